"""Low-rank and band attention: a hand-computed case, the rank of the low-rank module's scores and of its softmax, the
mixture against its two modules computed independently, the exact limits, causal forms, the methods, the draws,
memory, edge sizes and bad input. The naive loop of tests/naive.py and the registry-driven tests cover the rest."""
from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest

from refattn import registry, scaled_dot_product_attention
from refattn.common import MemoryBudgetError, temporary_memory_budget
from refattn.lowrank import LowRankBandParams, init_lowrank_band, lowrank_band_attention
from refattn.sparse import band_pattern, sparse_attention

TIGHT = {"rtol": 1e-12, "atol": 1e-12}


def _qkv(rng, n=9, m=11, d=4, d_v=3, batch=()):
    return (rng.standard_normal((*batch, n, d)), rng.standard_normal((*batch, m, d)),
            rng.standard_normal((*batch, m, d_v)))


def test_hand_computed_mixture():
    """d = D_k = 1, W_q = 2, W_k = ½: the low-rank scores are q·k = (0, ln 3, 0) → weights (1, 3, 1)/5 → 28/5; the
    band w = 0 keeps key 0 alone → 4. α = ½: out = 4.8, A = ½(⅕, ⅗, ⅕) + ½(1, 0, 0) = (0.6, 0.3, 0.1)."""
    q, k, v = np.array([[1.0]]), np.array([[0.0], [math.log(3.0)], [0.0]]), np.array([[4.0], [8.0], [0.0]])
    params = LowRankBandParams(np.array([[2.0]]), np.array([[0.5]]))
    out, A = lowrank_band_attention(q, k, v, window=0, params=params, scale=1.0, return_weights=True)
    np.testing.assert_allclose(out, [[4.8]], rtol=1e-15)
    np.testing.assert_allclose(A, [[0.6, 0.3, 0.1]], rtol=1e-15)


def test_scores_have_rank_at_most_dk_but_their_softmax_does_not(rng):
    """rank(Q W_q (K W_k)ᵀ) ≤ D_k exactly; the softmax acts entry by entry, so A_low is of higher rank (its singular
    values fall fast instead: the (D_k + 1)-th is well below the first but far from rounding)."""
    q, k, v = _qkv(rng, n=12, m=12, d=6)
    params = init_lowrank_band(0, 6, 2)
    scores = (q @ params.w_q) @ (k @ params.w_k).T / math.sqrt(2)
    sigma = np.linalg.svd(scores, compute_uv=False)
    assert np.all(sigma[2:] <= 1e-13 * sigma[0]), sigma
    A_low = lowrank_band_attention(q, k, v, window=1, alpha=1.0, params=params, return_weights=True)[1]
    s = np.linalg.svd(A_low, compute_uv=False)
    assert np.linalg.matrix_rank(A_low) > 2 and s[2] > 1e-6 * s[0], s


@pytest.mark.parametrize("causal", [False, True, "bottom-right"])
def test_mixture_of_the_two_modules_computed_independently(rng, causal):
    n, m = (11, 11) if causal is True else (9, 11)
    q, k, v = _qkv(rng, n=n, m=m, batch=(2,))
    params = init_lowrank_band(1, 4, 2)
    out, A = lowrank_band_attention(q, k, v, window=2, alpha=0.3, params=params, causal=causal, return_weights=True)
    low, A_low = scaled_dot_product_attention(q @ params.w_q, k @ params.w_k, v, causal=causal, return_weights=True)
    local, A_band = sparse_attention(q, k, v, band_pattern(n, 2, m=m, causal=causal), return_weights=True)
    np.testing.assert_allclose(out, 0.3 * low + 0.7 * local, **TIGHT)
    np.testing.assert_allclose(A, 0.3 * A_low + 0.7 * A_band, **TIGHT)
    np.testing.assert_allclose(out, A @ v, **TIGHT)
    assert np.all(A >= 0)
    np.testing.assert_allclose(A.sum(axis=-1), 1.0, **TIGHT)


def test_alpha_zero_and_one_are_the_modules_alone(rng):
    q, k, v = _qkv(rng)
    params = init_lowrank_band(2, 4, 3)
    np.testing.assert_array_equal(lowrank_band_attention(q, k, v, window=1, alpha=0.0, params=params),
                                  sparse_attention(q, k, v, band_pattern(9, 1, m=11)))
    np.testing.assert_allclose(lowrank_band_attention(q, k, v, window=1, alpha=1.0, params=params),
                               scaled_dot_product_attention(q @ params.w_q, k @ params.w_k, v), **TIGHT)


@pytest.mark.parametrize("causal", [False, True, "bottom-right"])
@pytest.mark.parametrize(("alpha", "window"), [(1.0, 0), (0.4, 11)])
def test_identity_projections_of_full_width_are_softmax_attention(rng, causal, alpha, window):
    """D_k = d_k, W_q = W_k = I: the low-rank module is softmax attention; with a band over every key, so is the
    band module, and any mixture of the two."""
    q, k, v = _qkv(rng, n=11 if causal is True else 8, m=11)
    identity = LowRankBandParams(np.eye(4), np.eye(4))
    out = lowrank_band_attention(q, k, v, window=window, alpha=alpha, params=identity, causal=causal)
    np.testing.assert_allclose(out, scaled_dot_product_attention(q, k, v, causal=causal), **TIGHT)


@pytest.mark.parametrize("causal", [False, True, "bottom-right"])
def test_methods_agree(rng, causal):
    q, k, v = _qkv(rng, n=13 if causal is True else 10, m=13, batch=(2, 1))
    outs = [lowrank_band_attention(q, k, v, window=2, rank=2, rng=4, causal=causal, method=method)
            for method in ("equation", "blocked", "auto")]
    for other in outs[1:]:
        np.testing.assert_allclose(other, outs[0], **TIGHT)


def test_apply_draws_the_projections_from_rng(rng):
    q, k, v = _qkv(rng)
    drawn = registry.get("lowrank_band").apply(q, k, v, rng=3, return_draws=True).draws["params"]
    expected = init_lowrank_band(3, 4, 2)
    np.testing.assert_array_equal(drawn.w_q, expected.w_q)
    np.testing.assert_array_equal(drawn.w_k, expected.w_k)


def test_blocked_holds_nothing_n_by_m():
    """n = m = 4096: the dense scores (128 MiB) are far above a 16 MiB budget; "blocked" streams the low-rank module
    and runs the band on the CSR kernel under it, and the dense weights are refused before they are allocated."""
    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((3, 4096, 8))
    lowrank_band_attention(q[:8], k[:8], v[:8], window=2, rank=2, rng=0, method="blocked")   # compile first
    with temporary_memory_budget(16 * 2**20):
        tracemalloc.start()
        out = lowrank_band_attention(q, k, v, window=8, rank=2, rng=0, method="blocked")
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        with pytest.raises(MemoryBudgetError, match="return_weights"):
            lowrank_band_attention(q, k, v, window=8, rank=2, rng=0, return_weights=True)
    assert out.shape == (4096, 8) and np.isfinite(out).all()
    assert peak < 16 * 2**20, f"peak {peak / 2**20:.1f} MiB"


def test_edge_sizes(rng):
    q, k, v = _qkv(rng, n=5, m=6)
    for method in ("equation", "blocked"):
        out, A = lowrank_band_attention(q[:0], k, v, window=1, rank=2, rng=0, method=method, return_weights=True)
        assert out.shape == (0, 3) and A.shape == (0, 6)
        out = lowrank_band_attention(q, k[:0], v[:0], window=1, rank=2, rng=0, method=method)
        np.testing.assert_array_equal(out, np.zeros((5, 3)))
        assert lowrank_band_attention(q, k, v[:, :0], window=1, rank=2, rng=0, method=method).shape == (5, 0)
        out = lowrank_band_attention(np.zeros((0, 5, 4)), np.zeros((0, 6, 4)), np.zeros((0, 6, 3)), window=1, rank=2,
                                     rng=0, method=method)
        assert out.shape == (0, 5, 3)
    with pytest.raises(ValueError, match="d_k"):
        lowrank_band_attention(q[:, :0], k[:, :0], v, window=1, rank=2, rng=0)


@pytest.mark.parametrize(("options", "error", "match"), [
    ({"alpha": 1.5}, ValueError, r"alpha must lie in \[0, 1\], got 1.5"),
    ({"alpha": float("nan")}, ValueError, "alpha must lie in"),
    ({"alpha": True}, TypeError, "alpha must be a real number"),
    ({"window": -1}, ValueError, "window must be a non-negative int"),
    ({"rank": 0}, ValueError, "rank must be a positive int"),
    ({"rank": None}, ValueError, "pass rank="),
    ({"method": "csr"}, ValueError, "method must be one of"),
    ({"causal": "yes"}, ValueError, "causal must be one of"),
])
def test_bad_options_are_named(rng, options, error, match):
    q, k, v = _qkv(rng)
    with pytest.raises(error, match=match):
        lowrank_band_attention(q, k, v, **({"window": 1, "rank": 2} | options), rng=0)


def test_bad_params_are_named(rng):
    q, k, v = _qkv(rng)
    with pytest.raises(ValueError,
                       match=r"^lowrank_band draws its projections from rng: pass rng= \(or params=\)$"):
        lowrank_band_attention(q, k, v, window=1, rank=2)
    params = init_lowrank_band(0, 4, 2)                            # a given draw wins: rng is unused
    np.testing.assert_array_equal(lowrank_band_attention(q, k, v, window=1, rng=0, params=params),
                                  lowrank_band_attention(q, k, v, window=1, params=params))
    with pytest.raises(TypeError, match="params must be a LowRankBandParams"):
        lowrank_band_attention(q, k, v, window=1, params=np.eye(4))
    with pytest.raises(ValueError, match=r"q has d_k=4 and rank=3: expected \(4, 3\)"):
        lowrank_band_attention(q, k, v, window=1, rank=3, params=init_lowrank_band(0, 4, 2))
    with pytest.raises(ValueError, match=r"q has d_k=4: expected \(4, D_k\)"):
        lowrank_band_attention(q, k, v, window=1, params=init_lowrank_band(0, 5, 2))
    with pytest.raises(ValueError, match=r"w_k has shape \(4, 3\) but w_q has shape \(4, 2\)"):
        LowRankBandParams(np.zeros((4, 2)), np.zeros((4, 3)))
    with pytest.raises(ValueError, match="D_k >= 1"):
        LowRankBandParams(np.zeros((4, 0)), np.zeros((4, 0)))
