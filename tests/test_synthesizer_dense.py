"""Dense Synthesizer: a hand case, the weights as a softmax of F(q) written out, slicing to the keys' length, the
factorised form's tiling, the mixtures (and their limits), keys not read, causality, the draw, and bad input.
The naive loop of tests/naive.py and the registry-driven tests cover the rest."""
from __future__ import annotations

import math

import numpy as np
import pytest

from refattn import registry, scaled_dot_product_attention
from refattn.common import MemoryBudgetError
from refattn.prior import (
    DenseSynthesizer,
    FactorizedDenseSynthesizer,
    RandomSynthesizer,
    dense_logits,
    init_dense_synthesizer,
    synthesizer_dense_attention,
    synthesizer_random_attention,
)

TIGHT = {"rtol": 1e-12, "atol": 1e-12}


def _qkv(rng, n=5, m=7, d=4, d_v=3, batch=()):
    return (rng.standard_normal((*batch, n, d)), rng.standard_normal((*batch, m, d)),
            rng.standard_normal((*batch, m, d_v)))


def _params(rng, d, length):
    return DenseSynthesizer(W1=rng.standard_normal((d, d)), b1=rng.standard_normal(d),
                            W2=rng.standard_normal((d, length)), b2=rng.standard_normal(length))


def _softmax_rows(S):
    e = np.exp(S - S.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_hand_case():
    """d = 1, W1 = 1, b1 = 0: ReLU(x); W2 = (0, 1), b2 = (0, ln 3 − 2). x = 2: logits (0, ln 3), weights (1/4, 3/4),
    output 4/4 + 3·8/4 = 7; x = −1: ReLU gives 0, logits (0, ln 3 − 2)."""
    p = DenseSynthesizer(W1=np.eye(1), b1=np.zeros(1), W2=np.array([[0.0, 1.0]]), b2=np.array([0.0, math.log(3) - 2]))
    q, v = np.array([[2.0], [-1.0]]), np.array([[4.0], [8.0]])
    out, A = synthesizer_dense_attention(q, q, v, params=p, return_weights=True)
    e = math.exp(math.log(3) - 2)
    np.testing.assert_allclose(A, [[0.25, 0.75], [1 / (1 + e), e / (1 + e)]], rtol=1e-15)
    np.testing.assert_allclose(out[0], [7.0], rtol=1e-15)


def test_weights_are_the_softmax_of_the_synthesized_logits(rng):
    q, k, v = _qkv(rng, batch=(2,))
    p = _params(rng, 4, 7)
    out, A = synthesizer_dense_attention(q, k, v, params=p, return_weights=True)
    B = np.maximum(q @ p.W1 + p.b1, 0) @ p.W2 + p.b2                # (2, 5, 7), written out
    np.testing.assert_allclose(A, _softmax_rows(B), **TIGHT)
    np.testing.assert_allclose(out, _softmax_rows(B) @ v, **TIGHT)


def test_longer_parameters_are_sliced_to_the_keys(rng):
    """F made for ℓ = 11 and applied to m = 7 keys is F with W2, b2 cut to their first 7 columns (the official
    slice)."""
    q, k, v = _qkv(rng)
    p = _params(rng, 4, 11)
    cut = DenseSynthesizer(W1=p.W1, b1=p.b1, W2=p.W2[:, :7], b2=p.b2[:7])
    # The logits h @ W2 + b2 are products with 11 or 7 columns, which BLAS may sum in other orders: the same
    # d + 1 = 5 terms, each order within 5·eps of the exact sum, so ΔB <= 2·5·eps·(|h| @ |W2| + |b2|). A weight
    # moves by <= 2·max ΔB of itself, the output by that times max|v|, plus the two roundings of Σ_j α_ij v_j
    # (<= 2·m·eps·max|v|). Doubled: first order.
    h = np.maximum(q @ p.W1 + p.b1, 0.0)                                     # (5, 4)  the same in both
    dB = 2 * 5 * np.finfo(np.float64).eps * (np.abs(h) @ np.abs(cut.W2) + np.abs(cut.b2)).max()
    bound = 2 * (2 * dB + 2 * 7 * np.finfo(np.float64).eps) * np.abs(v).max()
    np.testing.assert_allclose(synthesizer_dense_attention(q, k, v, params=p),
                               synthesizer_dense_attention(q, k, v, params=cut), rtol=0, atol=bound)


def test_factorised_logits_are_the_tiled_products(rng):
    """C_i reshaped to b × a is the outer product B_i A_iᵀ of the two heads' outputs (rank one): every product
    A_r B_p once."""
    x = rng.standard_normal((6, 4))
    p = FactorizedDenseSynthesizer(A=_params(rng, 4, 3), B=_params(rng, 4, 5))
    C = dense_logits(x, p)
    A, B = dense_logits(x, p.A), dense_logits(x, p.B)
    assert C.shape == (6, 15)
    np.testing.assert_allclose(C.reshape(6, 5, 3), B[:, :, None] * A[:, None, :], **TIGHT)
    assert all(np.linalg.matrix_rank(row.reshape(5, 3)) == 1 for row in C)


def test_keys_are_not_read_without_the_dot_product(rng):
    q, k, v = _qkv(rng)
    p = _params(rng, 4, 7)
    np.testing.assert_array_equal(synthesizer_dense_attention(q, np.full_like(k, np.nan), v, params=p),
                                  synthesizer_dense_attention(q, k, v, params=p))


def test_mixture_with_the_dot_product_written_out(rng):
    """D+V: softmax(α_D B + α_V QKᵀ/√d); α = (1, 0) is the dense synthesizer alone, (0, 1) softmax attention."""
    q, k, v = _qkv(rng)
    p = _params(rng, 4, 7)
    B = np.maximum(q @ p.W1 + p.b1, 0) @ p.W2 + p.b2
    _, A = synthesizer_dense_attention(q, k, v, params=p, mix="dot", alpha=(0.3, 1.2), return_weights=True)
    np.testing.assert_allclose(A, _softmax_rows(0.3 * B + 1.2 * (q @ k.T) / 2.0), **TIGHT)
    np.testing.assert_allclose(synthesizer_dense_attention(q, k, v, params=p, mix="dot", alpha=(1.0, 0.0)),
                               synthesizer_dense_attention(q, k, v, params=p), **TIGHT)
    for causal in (False, True, "bottom-right"):
        np.testing.assert_allclose(
            synthesizer_dense_attention(q, k, v, params=p, mix="dot", alpha=(0.0, 1.0), causal=causal),
            scaled_dot_product_attention(q, k, v, causal=causal), **TIGHT)


def test_random_plus_dense_is_the_same_from_either_entry(rng):
    q, k, v = _qkv(rng)
    p, R = _params(rng, 4, 7), RandomSynthesizer(rng.standard_normal((8, 8)))
    for causal in (False, True):
        a = synthesizer_dense_attention(q, k, v, params=p, mix="random", random_params=R, alpha=(0.2, 0.9),
                                        causal=causal)
        b = synthesizer_random_attention(q, k, v, params=R, mix="dense", dense_params=p, alpha=(0.9, 0.2),
                                         causal=causal)
        np.testing.assert_allclose(a, b, **TIGHT)


def test_default_alpha_is_equal_weights(rng):
    """The official alpha modes start at σ(0) = ½ each; N components get 1/N."""
    q, k, v = _qkv(rng)
    p = _params(rng, 4, 7)
    np.testing.assert_array_equal(synthesizer_dense_attention(q, k, v, params=p, mix="dot"),
                                  synthesizer_dense_attention(q, k, v, params=p, mix="dot", alpha=(0.5, 0.5)))


def test_causal_weights_are_the_masked_softmax_and_ignore_the_future(rng):
    q, k, v = _qkv(rng, n=6, m=6)
    p = _params(rng, 4, 6)
    _, A = synthesizer_dense_attention(q, k, v, params=p, causal=True, return_weights=True)
    B = np.maximum(q @ p.W1 + p.b1, 0) @ p.W2 + p.b2
    expected = _softmax_rows(np.where(np.tri(6, dtype=bool), B, -np.inf))
    np.testing.assert_allclose(A, expected, **TIGHT)
    v2 = v.copy()
    v2[3:] = rng.standard_normal((3, 3))
    k2 = k.copy()
    k2[3:] = np.nan
    for mix in ((), "dot"):
        before = synthesizer_dense_attention(q, k, v, params=p, causal=True, mix=mix)
        after = synthesizer_dense_attention(q, k2, v2, params=p, causal=True, mix=mix)
        np.testing.assert_array_equal(after[:3], before[:3])


def test_draw_follows_the_official_initialisation():
    """Truncated normal σ = 1/√d cut at ±2σ, zero biases; reproducible; drawn in the order W1, W2."""
    p = init_dense_synthesizer(5, 16, 40)
    assert p.W1.shape == (16, 16) and p.W2.shape == (16, 40) and p.length == 40
    assert np.abs(p.W1).max() <= 2 / 4 and np.abs(p.W2).max() <= 2 / 4
    np.testing.assert_array_equal(p.b1, 0.0)
    np.testing.assert_array_equal(p.b2, 0.0)
    # N(0, 1) cut at ±2 has standard deviation 0.8796; the sample std of N = 896 draws has standard error
    # ≈ 0.88/√(2N) = 0.021, so 0.08 is ~4 standard errors (fixed seed: a deterministic check of the scale).
    assert abs(np.concatenate([p.W1.ravel(), p.W2.ravel()]).std() * 4 - 0.8796) < 0.08
    np.testing.assert_array_equal(init_dense_synthesizer(5, 16, 40).W2, p.W2)
    f = init_dense_synthesizer(5, 16, factors=(4, 10))
    assert f.length == 40 and f.A.W2.shape == (16, 4) and f.B.W2.shape == (16, 10)


def test_uniform_apply_draws_for_the_keys_length_and_returns_its_draws(rng):
    q, k, v = _qkv(rng)
    mech = registry.get("synthesizer_dense")
    result = mech.apply(q, k, v, rng=2, return_draws=True)
    assert result.draws["params"].length == 7 and result.draws["random_params"] is None
    np.testing.assert_array_equal(result.output, synthesizer_dense_attention(q, k, v, rng=2))
    mixed = mech.apply(q, k, v, rng=2, mix="random", max_length=9, return_draws=True)
    assert mixed.draws["params"].length == 9 and mixed.draws["random_params"].length == 9


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"params": DenseSynthesizer(np.eye(3), np.zeros(3), np.ones((3, 7)), np.zeros(7))}, ValueError, "params"),
    ({"params": DenseSynthesizer(np.eye(4), np.zeros(4), np.ones((4, 5)), np.zeros(5))}, ValueError, "m = 7"),
    ({"params": np.eye(4)}, TypeError, "params"),
    ({"rng": 0, "mix": "dense"}, ValueError, "mix"),
    ({"rng": 0, "mix": ("dot", "dot")}, ValueError, "mix"),
    ({"rng": 0, "mix": 3}, TypeError, "mix"),
    ({"rng": 0, "mix": "dot", "alpha": (1.0,)}, ValueError, "alpha"),
    ({"rng": 0, "alpha": (np.nan,)}, ValueError, "alpha"),
    ({"rng": 0, "scale": 0.5}, ValueError, "scale"),
    ({"rng": 0, "factors": (2, 3)}, ValueError, "m = 7"),
    ({"rng": 0, "factors": 6}, TypeError, "factors"),
    ({}, ValueError, r"synthesizer_dense draws the dense synthesizer's parameters from rng: pass rng= \(or params=\)"),
    ({"params": DenseSynthesizer(np.eye(4), np.zeros(4), np.ones((4, 7)), np.zeros(7)), "mix": "random"}, ValueError,
     r"synthesizer_dense draws the random synthesizer's parameters from rng: pass rng= \(or random_params=\)"),
    ({"rng": 0, "random_params": RandomSynthesizer(np.zeros((7, 7)))}, ValueError, "random_params"),
])
def test_bad_input_is_named(rng, kwargs, error, match):
    q, k, v = _qkv(rng)
    with pytest.raises(error, match=match):
        synthesizer_dense_attention(q, k, v, **kwargs)


def test_given_params_leave_rng_unused(rng):
    """Every parameter given and rng too: nothing is drawn (the rule of every draw), whatever rng."""
    q, k, v = _qkv(rng)
    params = DenseSynthesizer(np.eye(4), np.zeros(4), rng.standard_normal((4, 7)), np.zeros(7))
    np.testing.assert_array_equal(synthesizer_dense_attention(q, k, v, params=params, rng=3),
                                  synthesizer_dense_attention(q, k, v, params=params))
    assert not np.array_equal(synthesizer_dense_attention(q, k, v, rng=3),
                              synthesizer_dense_attention(q, k, v, params=params))


def test_logits_beyond_the_memory_budget_are_refused_before_allocating():
    """The logits are n × m by definition: at n = m = 65536 (32 GiB) a named MemoryBudgetError, nothing allocated."""
    q = np.zeros((65536, 2))
    with pytest.raises(MemoryBudgetError, match="synthesized logits"):
        synthesizer_dense_attention(q, q, q[:, :1], rng=0)
