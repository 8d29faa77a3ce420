"""Head size independent of the head count (Bhojanapalli et al. 2020): the d_p = d_model / h limit, the rank of a
head's scores (the low-rank bottleneck), and the head that represents any attention matrix once d_p >= n."""
from __future__ import annotations

import numpy as np
import pytest

from refattn import (
    MultiHeadParams,
    init_multi_head,
    multi_head_attention,
    registry,
    scaled_dot_product_attention,
    softmax,
)
from refattn.heads import head_scores, head_size_attention, represent_attention

from .naive import naive_head_size, random_params

TIGHT = {"rtol": 1e-12, "atol": 1e-12}


@pytest.mark.parametrize("causal", [False, True, "bottom-right"])
def test_head_size_d_model_over_h_is_multi_head(rng, causal):
    """The registry entry with d_p = d_model / h draws init_multi_head's own parameters: the two entries agree."""
    q, k, v = rng.standard_normal((3, 2, 5, 8))
    got = registry.get("head_size").apply(q, k, v, causal=causal, rng=7, num_heads=4, head_size=2,
                                          return_weights=True)
    want = registry.get("multi_head").apply(q, k, v, causal=causal, rng=7, num_heads=4, return_weights=True)
    np.testing.assert_allclose(got.output, want.output, **TIGHT)
    np.testing.assert_allclose(got.weights, want.weights, **TIGHT)


def test_natural_function_equals_the_naive_loop_at_any_head_size(rng):
    x_q, x_kv = rng.standard_normal((2, 4, 6)), rng.standard_normal((2, 9, 6))
    mask = rng.random((4, 9)) < 0.7
    for h, d_p in ((3, 2), (3, 9), (1, 20)):                      # below, at and above the key count m = 9
        params = random_params(rng, 6, h, d_k=d_p)
        out, A = head_size_attention(x_q, x_kv, params, num_heads=h, head_size=d_p, mask=mask, causal="bottom-right",
                                     return_weights=True)
        assert A.shape == (2, h, 4, 9)
        for b in range(2):
            np.testing.assert_allclose(out[b], naive_head_size(x_q[b], x_kv[b], x_kv[b], "bottom-right", params,
                                                               num_heads=h, mask=mask), **TIGHT)
        np.testing.assert_allclose(out, multi_head_attention(x_q, x_kv, params, num_heads=h, mask=mask,
                                                             causal="bottom-right"), **TIGHT)


def test_head_scores_are_each_heads_logits(rng):
    """softmax(S_i) is head i's attention matrix, and S_i is (x W_iᵠ + b)(x W_iᴷ + b)ᵀ/√d_p written out."""
    params = random_params(rng, 5, 2, d_k=3)
    x_q, x_kv = rng.standard_normal((4, 5)), rng.standard_normal((6, 5))
    S = head_scores(x_q, x_kv, params, num_heads=2)
    A = head_size_attention(x_q, x_kv, params, num_heads=2, return_weights=True)[1]
    np.testing.assert_allclose(softmax(S), A, **TIGHT)
    for i in range(2):
        cols = slice(3 * i, 3 * i + 3)
        Q, K = x_q @ params.w_q[:, cols] + params.b_q[cols], x_kv @ params.w_k[:, cols] + params.b_k[cols]
        np.testing.assert_allclose(S[i], Q @ K.T / np.sqrt(3), **TIGHT)
    np.testing.assert_allclose(head_scores(x_q, x_kv, params, num_heads=2, scale=0.5), S * np.sqrt(3) / 2, **TIGHT)


# --- the low-rank bottleneck -----------------------------------------------------------------------------

@pytest.mark.parametrize("d_p", [1, 3, 8, 12, 16])
def test_score_rank_is_the_head_size_up_to_n(d_p):
    """n = 12 tokens, d_model = 24: each head's 12 × 12 scores have rank min(d_p, n) for random projections."""
    rng = np.random.default_rng(d_p)
    x = rng.standard_normal((12, 24))
    params = init_multi_head(rng, 24, 3, d_k=d_p)
    S = head_scores(x, x, params, num_heads=3)
    assert [int(np.linalg.matrix_rank(S_i)) for S_i in S] == [min(d_p, 12)] * 3


def test_more_heads_at_a_fixed_width_shrink_the_rank_unless_the_size_is_fixed():
    """d_model = 32, n = 16: tied heads d_p = 32 / h fall below n from h = 4 on; heads of d_p = n keep rank n."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((16, 32))
    for h in (1, 2, 4, 8, 16):
        tied = head_scores(x, x, init_multi_head(rng, 32, h), num_heads=h)
        fixed = head_scores(x, x, init_multi_head(rng, 32, h, d_k=16), num_heads=h)
        assert max(np.linalg.matrix_rank(S) for S in tied) == min(32 // h, 16), h
        assert min(np.linalg.matrix_rank(S) for S in fixed) == 16, h


def test_a_head_smaller_than_n_cannot_express_attention_to_self():
    """P = softmax(4·I) needs logits 4·I + c1ᵀ, of rank ≥ n − 1 for every c, and a head of size d_p ≤ n − 2 has
    logits of rank ≤ d_p: no such head reaches P. The rank-d_p truncation of P's logits (represent_attention)
    misses it by a wide margin, while the head of size d_p = n reaches it."""
    n = 6
    rng = np.random.default_rng(2)
    x = rng.standard_normal((n, 10))
    P = softmax(4.0 * np.eye(n))
    logit_sv = np.linalg.svd(4.0 * np.eye(n) - 4.0 / n, compute_uv=False)   # row-centred logits: 4(I − 11ᵀ/n)
    np.testing.assert_allclose(logit_sv, [4.0] * (n - 1) + [0.0], rtol=0, atol=1e-12)   # rank n − 1
    for d_p in (1, 2, 4):
        w_q, w_k = represent_attention(x, P, d_p)
        A = softmax((x @ w_q) @ (x @ w_k).T / np.sqrt(d_p))
        assert np.abs(A - P).max() > 0.1, d_p
    w_q, w_k = represent_attention(x, P, n)
    np.testing.assert_allclose(softmax((x @ w_q) @ (x @ w_k).T / np.sqrt(n)), P, **TIGHT)


@pytest.mark.parametrize("d_p", [5, 7, 12])
def test_a_head_of_size_n_or_more_represents_any_attention_matrix(d_p):
    """The representation theorem, d_p ≥ n = 5: an arbitrary positive row-stochastic P is reached exactly.
    Tolerance: X X⁺ = I up to cond(X)·ε ≈ 1e-15 here, times logits of size ~5: well inside 1e-12."""
    rng = np.random.default_rng(d_p)
    x = rng.standard_normal((5, 8))
    P = softmax(2.0 * rng.standard_normal((5, 5)))
    w_q, w_k = represent_attention(x, P, d_p)
    assert w_q.shape == w_k.shape == (8, d_p)
    params = MultiHeadParams(w_q, w_k, np.zeros((8, d_p)), np.zeros((d_p, 8)))   # one head; values unused here
    A = head_size_attention(x, x, params, num_heads=1, head_size=d_p, return_weights=True)[1]
    np.testing.assert_allclose(A[0], P, **TIGHT)


def test_represent_attention_bad_input(rng):
    x, P = rng.standard_normal((4, 6)), softmax(rng.standard_normal((4, 4)))
    with pytest.raises(ValueError, match="rank n = 4"):
        represent_attention(x[:, :3], P, 4)
    with pytest.raises(ValueError, match=r"weights must be \(n, n\) = \(4, 4\)"):
        represent_attention(x, P[:3], 4)
    with pytest.raises(ValueError, match="positive"):
        represent_attention(x, np.eye(4), 4)
    with pytest.raises(ValueError, match="rows of weights must sum to 1"):
        represent_attention(x, 2 * P, 4)
    with pytest.raises(ValueError, match="head_size"):
        represent_attention(x, P, 0)


# --- bad input ------------------------------------------------------------------------------------------

def test_head_size_must_agree_with_the_params(rng):
    params = random_params(rng, 6, 3, d_k=4)
    x = rng.standard_normal((5, 6))
    with pytest.raises(ValueError, match=r"head_size=2 but params have w_q \(6, 12\): 3 heads of d_p = 4"):
        head_size_attention(x, x, params, num_heads=3, head_size=2)
    with pytest.raises(ValueError, match="num_heads=5 does not divide the projection width h·d_p = 12"):
        head_scores(x, x, params, num_heads=5)
    with pytest.raises(TypeError, match="params must be MultiHeadParams"):
        head_size_attention(x, x, {"w_q": params.w_q}, num_heads=3)
    with pytest.raises(ValueError, match=r"'identity' \(with num_heads=1\), got 'identity' with num_heads=3"):
        head_size_attention(x, x, "identity", num_heads=3)
    with pytest.raises(ValueError, match=r"x_kv has d_model=5 \(shape \(5, 5\)\)"):
        head_scores(x, x[:, :5], params, num_heads=3)


def test_the_function_draws_or_takes_identity_params_as_the_registry_does(rng):
    q, k = rng.standard_normal((4, 6)), rng.standard_normal((9, 6))
    result = registry.get("head_size").apply(q, k, k, rng=5, num_heads=3, head_size=2, return_draws=True)
    np.testing.assert_array_equal(head_size_attention(q, k, num_heads=3, head_size=2, rng=5), result.output)
    np.testing.assert_array_equal(head_size_attention(q, k, result.draws["params"], num_heads=3), result.output)
    np.testing.assert_allclose(head_size_attention(q, k, "identity", num_heads=1, causal="bottom-right"),
                               scaled_dot_product_attention(q, k, k, causal="bottom-right"), rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match=r"^head_size draws its parameters from rng: pass rng= \(or params=\)$"):
        head_size_attention(q, k, num_heads=3)


def test_apply_default_head_size_is_the_key_count(rng):
    q, k = rng.standard_normal((4, 6)), rng.standard_normal((9, 6))
    result = registry.get("head_size").apply(q, k, k, rng=0, return_draws=True)
    assert result.draws["params"].w_q.shape == (6, 2 * 9)           # h = 2 heads of d_p = m = 9
    with pytest.raises(ValueError, match="head_size=3 but params have"):
        registry.get("head_size").apply(q, k, k, params=result.draws["params"], head_size=3)
    with pytest.raises(ValueError, match="head_size=2 but params"):
        registry.get("head_size").apply(q, k, k, num_heads=1, params="identity", head_size=2)


def test_drawn_heads_beyond_the_memory_budget_are_refused_before_allocating():
    from refattn import registry
    from refattn.common import MemoryBudgetError, temporary_memory_budget

    x = np.zeros((4096, 8))                                        # default head_size = m = 4096: heads of 4096 × 4096
    with temporary_memory_budget(2**24), pytest.raises(MemoryBudgetError, match="head_size=4096"):
        registry.get("head_size").apply(x, x, x, rng=0)
