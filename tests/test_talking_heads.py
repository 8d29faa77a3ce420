"""Talking-heads attention (Shazeer et al., 2020): the multi-head limit, masking after P_l, closed forms, errors."""
from __future__ import annotations

import numpy as np
import pytest

from refattn import MultiHeadParams, init_multi_head, multi_head_attention, registry, scaled_dot_product_attention
from refattn.common import MemoryBudgetError, temporary_memory_budget
from refattn.heads import TalkingHeadsParams, init_talking_heads, talking_heads_attention

from .naive import random_params

TIGHT = {"rtol": 1e-12, "atol": 1e-12}


def _inputs(rng, n=5, m=7, d=8, batch=(2,)):
    return rng.standard_normal((*batch, n, d)), rng.standard_normal((*batch, m, d)), rng.standard_normal((*batch, m, d))


@pytest.mark.parametrize("causal", [False, True, "bottom-right"])
def test_identity_mixes_equal_multi_head_with_the_same_params(rng, causal):
    """h_k = h = h_v, P_l = P_w = I: multi_head with the same projections (biases included), outputs and weights."""
    params = random_params(rng, 8, 4, d_k=3, d_v=2)
    x_q, x_kv, x_v = _inputs(rng)
    mask = rng.random((5, 7)) < 0.7
    eye = TalkingHeadsParams(params, np.eye(4), np.eye(4))
    out, U = talking_heads_attention(x_q, x_kv, eye, x_v=x_v, mask=mask, causal=causal, return_weights=True)
    ref, A = multi_head_attention(x_q, x_kv, params, num_heads=4, x_v=x_v, mask=mask, causal=causal,
                                  return_weights=True)
    np.testing.assert_allclose(out, ref, **TIGHT)
    np.testing.assert_allclose(U, A, **TIGHT)


def test_a_permutation_undone_by_p_w_is_multi_head(rng):
    """A permutation P_l moves each key head's logits to another softmax head; P_w = P_lᵀ moves them back."""
    params = random_params(rng, 8, 3, d_k=2, d_v=3)
    x_q, x_kv, _ = _inputs(rng)
    perm = np.eye(3)[[2, 0, 1]]                                    # P_l[a, h] = 1 for (a, h) = (0, 2), (1, 0), (2, 1)
    out, U = talking_heads_attention(x_q, x_kv, TalkingHeadsParams(params, perm, perm.T), return_weights=True)
    ref, A = multi_head_attention(x_q, x_kv, params, num_heads=3, return_weights=True)
    np.testing.assert_allclose(out, ref, **TIGHT)
    np.testing.assert_allclose(U, A, **TIGHT)
    W = talking_heads_attention(x_q, x_kv, TalkingHeadsParams(params, perm, np.eye(3)), return_weights=True)[1]
    np.testing.assert_allclose(W, A[..., [1, 2, 0], :, :], **TIGHT)   # P_w = I shows W: softmax heads = J_1, J_2, J_0


def test_weights_are_the_softmax_of_mixed_logits_mixed_again(rng):
    """U against the paper's einsums written out with numpy, h_k = 2, h = 3, h_v = 4, one sequence."""
    params = init_talking_heads(rng, 6, 3, key_heads=2, value_heads=4, d_k=3, d_v=2, bias=True)
    x, memory = rng.standard_normal((4, 6)), rng.standard_normal((5, 6))
    p = params.projections
    Q = (x @ p.w_q).reshape(4, 2, 3)                               # Q[n, h_k, d_k]
    K = (memory @ p.w_k).reshape(5, 2, 3)
    J = np.einsum("nak,mak->nma", Q, K) / np.sqrt(3)               # J[n, m, h_k]
    L = np.einsum("nma,ah->nmh", J, params.P_l)                    # L[n, m, h]
    W = np.exp(L - L.max(axis=1, keepdims=True))
    W /= W.sum(axis=1, keepdims=True)                              # softmax over m
    U = np.einsum("nmh,hv->vnm", W, params.P_w)                    # U as (h_v, n, m)
    np.testing.assert_allclose(talking_heads_attention(x, memory, params, return_weights=True)[1], U, **TIGHT)


def test_rows_of_u_sum_to_the_columns_of_p_w(rng):
    """Σ_j U_v[i, j] = Σ_h P_w[h, v] Σ_j W_h[i, j] = Σ_h P_w[h, v] for every query that sees a key."""
    params = init_talking_heads(rng, 8, 4, key_heads=2, value_heads=3, d_v=2)
    x_q, x_kv, _ = _inputs(rng, n=9, m=6)
    U = talking_heads_attention(x_q, x_kv, params, causal="bottom-right", return_weights=True)[1]
    sums = U.sum(axis=-1)                                          # (2, h_v, 9)
    np.testing.assert_allclose(sums[..., 3:], np.broadcast_to(params.P_w.sum(axis=0)[:, None], (2, 3, 6)), **TIGHT)
    np.testing.assert_array_equal(sums[..., :3], 0.0)              # rows 0-2 see no key: W = 0, U = 0


def test_masked_logits_stay_masked_after_p_l(rng):
    """The mask acts on L, after P_l: a hidden key gets weight exactly 0 in every softmax head and every value head
    whatever P_l mixes, and a NaN or huge key there changes nothing; masking J instead would differ."""
    params = init_talking_heads(rng, 8, 4, key_heads=2, value_heads=2)
    x_q, x_kv, _ = _inputs(rng, n=6, m=6, batch=())
    out, U = talking_heads_attention(x_q, x_kv, params, causal=True, return_weights=True)
    np.testing.assert_array_equal(U[:, np.triu_indices(6, 1)[0], np.triu_indices(6, 1)[1]], 0.0)
    poisoned = x_kv.copy()
    poisoned[4] = 1e300
    poisoned[5] = np.nan
    np.testing.assert_array_equal(talking_heads_attention(x_q, poisoned, params, causal=True)[:4], out[:4])
    p = params.projections                                         # the other order: −inf in J, then P_l
    J = np.einsum("nak,mak->anm", (x_q @ p.w_q).reshape(6, 2, 4), (x_kv @ p.w_k).reshape(6, 2, 4)) / 2.0
    hidden = ~np.tril(np.ones((6, 6), dtype=bool))
    with np.errstate(invalid="ignore"):
        L_before = np.einsum("anm,ah->hnm", np.where(hidden, -np.inf, J), params.P_l)
    assert np.any((params.P_l > 0).any(axis=0) & (params.P_l < 0).any(axis=0))   # a head mixes both signs
    assert np.any(np.isnan(L_before[:, hidden]) | (L_before[:, hidden] == np.inf))  # so that order is no mask


def test_h_k_h_and_h_v_set_the_shapes(rng):
    params = init_talking_heads(rng, 12, 5, key_heads=3, value_heads=2)
    assert (params.key_heads, params.num_heads, params.value_heads) == (3, 5, 2)
    assert params.P_l.shape == (3, 5) and params.P_w.shape == (5, 2)
    assert params.projections.w_q.shape == (12, 12) and params.projections.w_v.shape == (12, 12)
    x = rng.standard_normal((3, 4, 12))
    out, U = talking_heads_attention(x, x, params, return_weights=True)
    assert out.shape == (3, 4, 12) and U.shape == (3, 2, 4, 4)


def test_init_is_seeded_and_truncated_at_two_standard_deviations():
    a = init_talking_heads(7, 16, 64, key_heads=16, value_heads=16, d_k=1, d_v=1)
    b = init_talking_heads(7, 16, 64, key_heads=16, value_heads=16, d_k=1, d_v=1)
    np.testing.assert_array_equal(a.P_l, b.P_l)
    np.testing.assert_array_equal(a.P_w, b.P_w)
    assert np.abs(a.P_l).max() <= 2.0 / np.sqrt(16) and np.abs(a.P_w).max() <= 2.0 / np.sqrt(64)
    # A normal truncated at ±2σ has standard deviation 0.8796σ and kurtosis 2.37; the sample deviation of these
    # 2048 standardised entries has relative standard error √((2.37 − 1)/(4·2048)) = 1.3 %: 5 % is 3.8 of them.
    pooled = np.concatenate([a.P_l.ravel() * np.sqrt(16), a.P_w.ravel() * np.sqrt(64)])
    np.testing.assert_allclose(pooled.std(), 0.8796, rtol=0.05)
    assert a.projections.b_q is None                               # the paper's layer has no biases


def test_exact_limit_of_the_record_is_sdpa(rng):
    q, k, v = _inputs(rng, d=4, batch=())
    result = registry.get("talking_heads").apply(q, k, v, causal=True, num_heads=1, params="identity",
                                                 return_weights=True)
    out, A = scaled_dot_product_attention(q, k, v, causal=True, return_weights=True)
    np.testing.assert_allclose(result.output, out, **TIGHT)
    np.testing.assert_allclose(result.weights[0], A, **TIGHT)


def test_bad_parameters_are_refused(rng):
    mh = init_multi_head(rng, 8, 2)
    with pytest.raises(ValueError, match=r"P_l has shape \(2, 3\) \(h_k, h\) but P_w has shape \(2, 2\)"):
        TalkingHeadsParams(mh, np.ones((2, 3)), np.ones((2, 2)))
    with pytest.raises(ValueError, match=r"w_q \(8, 8\) must split into h_k=3 heads"):
        TalkingHeadsParams(mh, np.ones((3, 2)), np.ones((2, 2)))
    with pytest.raises(ValueError, match="P_l and P_w must be 2-D"):
        TalkingHeadsParams(mh, np.ones(2), np.ones((2, 2)))
    with pytest.raises(TypeError, match="projections must be MultiHeadParams"):
        TalkingHeadsParams(np.eye(2), np.ones((2, 2)), np.ones((2, 2)))
    with pytest.raises(TypeError, match="params must be TalkingHeadsParams"):
        talking_heads_attention(np.ones((2, 8)), np.ones((2, 8)), mh)
    with pytest.raises(ValueError, match="d_model=8 is not divisible by key_heads=3"):
        init_talking_heads(rng, 8, 2, key_heads=3)
    good = TalkingHeadsParams(mh, np.eye(2), np.eye(2))
    with pytest.raises(ValueError, match=r"x_kv has d_model=6 \(shape \(3, 6\)\) but params have d_model=8"):
        talking_heads_attention(np.ones((2, 8)), np.ones((3, 6)), good)
    with pytest.raises(ValueError, match="fully_masked"):
        talking_heads_attention(np.ones((2, 8)), np.ones((3, 8)), good, fully_masked="skip")
    with pytest.raises(ValueError, match="params must be TalkingHeadsParams, None or 'identity'"):
        registry.get("talking_heads").apply(np.ones((2, 8)), np.ones((3, 8)), np.ones((3, 8)), params="identity")


def test_identity_params_must_be_square_identities_of_the_input_width():
    """The record's "identity" is sdpa itself; the same layer built by hand gives the same numbers."""
    eye = np.eye(4)
    by_hand = TalkingHeadsParams(MultiHeadParams(eye, eye, eye, eye), [[1.0]], [[1.0]])
    rng = np.random.default_rng(3)
    q, k, v = _inputs(rng, d=4, batch=())
    np.testing.assert_array_equal(
        talking_heads_attention(q, k, by_hand, x_v=v),
        registry.get("talking_heads").apply(q, k, v, num_heads=1, params="identity").output)


def test_logits_beyond_the_memory_budget_are_refused_before_allocating(rng):
    """Every head's logits at (i, j) are needed together: (h, n, m) = 4·64·64 float64 = 128 KiB > a 64 KiB budget."""
    params = init_talking_heads(rng, 8, 4, key_heads=2, value_heads=2)
    x = rng.standard_normal((64, 8))
    with temporary_memory_budget(64 * 1024), pytest.raises(MemoryBudgetError, match="logits of every head"):
        talking_heads_attention(x, x, params)


def test_a_head_count_that_does_not_divide_d_model_is_named_as_given():
    """key_heads and value_heads default to num_heads: num_heads=3 is the argument to blame, not key_heads."""
    with pytest.raises(ValueError, match=r"^d_model=8 is not divisible by num_heads=3; pass d_k explicitly$"):
        init_talking_heads(0, 8, 3)
    with pytest.raises(ValueError, match=r"^d_model=8 is not divisible by value_heads=3; pass d_v explicitly$"):
        init_talking_heads(0, 8, 2, value_heads=3)


def test_the_function_draws_or_takes_identity_params_as_the_registry_does(rng):
    x, mem = rng.standard_normal((4, 8)), rng.standard_normal((6, 8))
    options = {"num_heads": 4, "key_heads": 2, "value_heads": 1}
    result = registry.get("talking_heads").apply(x, mem, mem, rng=7, return_draws=True, **options)
    np.testing.assert_array_equal(talking_heads_attention(x, mem, rng=7, **options), result.output)
    np.testing.assert_array_equal(talking_heads_attention(x, mem, result.draws["params"]), result.output)
    np.testing.assert_allclose(talking_heads_attention(x, mem, "identity", causal="bottom-right"),
                               scaled_dot_product_attention(x, mem, mem, causal="bottom-right"), **TIGHT)
    with pytest.raises(ValueError, match=r"^talking_heads draws its parameters from rng: pass rng= \(or params=\)$"):
        talking_heads_attention(x, mem, num_heads=2)
    with pytest.raises(ValueError, match=r"^talking_heads draws its parameters from rng"):    # rng first
        talking_heads_attention(x, mem)
    with pytest.raises(ValueError, match=r"^talking_heads needs num_heads= to draw params from rng \(or params=\)$"):
        talking_heads_attention(x, mem, rng=7)
    with pytest.raises(ValueError, match="'identity' \\(with one head of each kind\\)"):
        talking_heads_attention(x, mem, "identity", key_heads=2)
