"""Sparse Sinkhorn attention: the balancing to its stated tolerance, causal balancing's limit and its look at later
blocks, the attention over a known sort, SortCut, the effective matrix, and refusals that name the argument."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from refattn import registry, scaled_dot_product_attention
from refattn.sparse import (
    SortNetParams,
    block_summaries,
    default_block_size,
    init_sort_net,
    sinkhorn_attention,
    sinkhorn_normalize,
    sort_net_scores,
    sorting_matrix,
)

TIGHT = {"rtol": 1e-12, "atol": 1e-12}
ROUNDING = 1e-12           # sums of N ≤ 8 terms of size ≤ 1 after a few dozen float64 operations each


def _birkhoff(K):
    """Δ = max log(K_ip K_jq / (K_jp K_iq)) over all index quadruples, and κ = tanh(Δ/4), by explicit loops."""
    N = len(K)
    delta = max(math.log(K[i, p] * K[j, q] / (K[j, p] * K[i, q]))
                for i, j, p, q in itertools.product(range(N), repeat=4))
    return delta, math.tanh(delta / 4)


@pytest.mark.parametrize("scale", [0.5, 2.0])
def test_sinkhorn_is_doubly_stochastic_to_the_tolerance_of_its_iteration_count(rng, scale):
    """Columns sum to 1 after every iteration (the column step is last); rows within e^{κ^{2(k−1)}Δ} − 1 (Birkhoff's
    contraction, see sinkhorn_normalize's Notes), and the bound is reached, not just stated: at scale 0.5 the rows
    are within rounding of 1 by k = 30."""
    X = scale * rng.standard_normal((5, 5))
    delta, kappa = _birkhoff(np.exp(X))
    for k in (1, 2, 3, 5, 8, 13, 30):
        P = sinkhorn_normalize(X, k)
        np.testing.assert_allclose(P.sum(axis=0), 1.0, rtol=0, atol=ROUNDING)
        bound = math.expm1(kappa ** (2 * (k - 1)) * delta)
        assert np.max(np.abs(P.sum(axis=1) - 1.0)) <= bound + ROUNDING, (k, bound)
    if scale == 0.5:
        np.testing.assert_allclose(sinkhorn_normalize(X, 30).sum(axis=1), 1.0, rtol=0, atol=ROUNDING)


def test_the_sorting_matrix_meets_the_same_tolerance_with_gumbel_noise_and_temperature(rng):
    """P = S^k((R + ε)/τ) from the sorting network, at the defaults k = 7, τ = 0.75 and at k = 20, τ = 2."""
    k = rng.standard_normal((24, 3))
    net = init_sort_net(1, 3, 6)
    eps = rng.gumbel(size=(6, 6))
    R = sort_net_scores(block_summaries(k, 4), net)
    for iterations, tau in ((7, 0.75), (20, 2.0)):
        P = sorting_matrix(k, 4, net, eps, temperature=tau, iterations=iterations)
        delta, kappa = _birkhoff(np.exp((R + eps) / tau))
        np.testing.assert_allclose(P.sum(axis=0), 1.0, rtol=0, atol=ROUNDING)
        assert np.max(np.abs(P.sum(axis=1) - 1.0)) <= math.expm1(kappa ** (2 * (iterations - 1)) * delta) + ROUNDING


def test_sinkhorn_zero_iterations_is_the_exponential_and_one_block_is_one():
    X = np.array([[0.0, np.log(3.0)], [1.0, -1.0]])
    np.testing.assert_allclose(sinkhorn_normalize(X, 0), np.exp(X), **TIGHT)
    np.testing.assert_array_equal(sinkhorn_normalize(np.array([[2.5]]), 7), [[1.0]])


def test_causal_balancing_keeps_earlier_blocks_only_and_tends_to_the_shift(rng):
    """On the pairs J < I, the only matrix with unit row sums (rows 1..N−1) and column sums (columns 0..N−2) is the
    shift P[I, I − 1] = 1; causal balancing approaches it as k grows, whatever the scores."""
    N = 5
    X = rng.standard_normal((N, N))
    mask = np.tri(N, k=-1, dtype=bool)
    shift = np.eye(N, k=-1)
    distances = []
    for k in (7, 50, 500):
        P = sinkhorn_normalize(X, k, mask=mask)
        np.testing.assert_array_equal(P[~mask], 0.0)                # block 0 sorts nothing; J >= I never
        np.testing.assert_allclose(P.sum(axis=0)[:-1], 1.0, rtol=0, atol=ROUNDING)
        distances.append(np.max(np.abs(P - shift)))
    assert distances[0] > distances[1] > distances[2]
    assert distances[2] < 0.01                                      # measured 0.0037 at k = 500 (about 2/k)


def test_causal_summaries_stop_at_each_blocks_first_token(rng):
    k = rng.standard_normal((12, 3))
    x = block_summaries(k, 4, causal=True)
    np.testing.assert_allclose(x, [k[:1].sum(axis=0), k[:5].sum(axis=0), k[:9].sum(axis=0)], **TIGHT)
    k2 = k.copy()
    k2[5:] = 100.0                                                  # after block 1's first token
    changed = block_summaries(k2, 4, causal=True)
    np.testing.assert_array_equal(changed[:2], x[:2])
    assert np.all(changed[2] != x[2])


def _permutation_noise(perm, strength=60.0):
    """ε = strength · Π for the permutation I ← perm[I]: with a zero sorting network, P = Π up to e^{−strength}."""
    eps = np.zeros((len(perm), len(perm)))
    eps[np.arange(len(perm)), perm] = strength
    return eps


ZERO_NET = SortNetParams(np.zeros((4, 4)), np.zeros(4), np.zeros((4, 4)), np.zeros(4))


@pytest.mark.parametrize("causal", [False, True])
def test_each_block_attends_its_sorted_block_and_its_own_in_one_softmax(rng, causal):
    """With P a permutation (ε = 60·Π, zero sorting network, τ = 1), query t of block I is softmax attention over
    the keys of block π(I) then of block I (causal: its own up to t; block 0 alone): written with the core sdpa."""
    b, N = 3, 4
    q, k, v = rng.standard_normal((3, N * b, 4))
    perm = [0, 0, 1, 2] if causal else [2, 0, 3, 1]                  # causal: the shift, the one causal limit
    eps = _permutation_noise(perm)
    out = sinkhorn_attention(q, k, v, block_size=b, sort_net=ZERO_NET, gumbel=eps, temperature=1.0,
                             iterations=3, causal=causal)
    for I in range(N):
        rows = slice(I * b, I * b + b)
        src = slice(perm[I] * b, perm[I] * b + b)
        own = np.tril(np.ones((b, b), dtype=bool)) if causal else np.ones((b, b), dtype=bool)
        has_sorted = not causal or I > 0
        keys = np.concatenate([k[src], k[rows]]) if has_sorted else k[rows]
        values = np.concatenate([v[src], v[rows]]) if has_sorted else v[rows]
        mask = np.concatenate([np.ones((b, b), dtype=bool), own], axis=1) if has_sorted else own
        expected = scaled_dot_product_attention(q[rows], keys, values, mask)
        np.testing.assert_allclose(out[rows], expected, **TIGHT, err_msg=f"block {I}")


def test_sortcut_attends_the_first_sorted_blocks_only(rng):
    b, N = 2, 4
    q, k, v = rng.standard_normal((3, N * b, 4))
    perm = [3, 1, 0, 2]
    out = sinkhorn_attention(q, k, v, block_size=b, sort_net=ZERO_NET, gumbel=_permutation_noise(perm),
                             temperature=1.0, sortcut=2)
    keys = np.concatenate([k[6:8], k[2:4]])                          # sorted blocks 0 and 1: blocks 3 and 1
    values = np.concatenate([v[6:8], v[2:4]])
    np.testing.assert_allclose(out, scaled_dot_product_attention(q, keys, values), **TIGHT)


@pytest.mark.parametrize("causal", [False, True, "bottom-right"])
def test_one_block_is_softmax_attention_whatever_the_draws(rng, causal):
    n = 5 if causal == "bottom-right" else 8
    q, k, v = rng.standard_normal((n, 3)), rng.standard_normal((8, 3)), rng.standard_normal((8, 2))
    out, A = sinkhorn_attention(q, k, v, block_size=8, rng=4, temperature=0.3, iterations=2, causal=causal,
                                return_weights=True)
    expected, weights = scaled_dot_product_attention(q, k, v, causal=causal, return_weights=True)
    np.testing.assert_allclose(out, expected, **TIGHT)
    np.testing.assert_allclose(A, weights, **TIGHT)
    cut = sinkhorn_attention(q[:8] if n == 8 else k, k, v, block_size=8, rng=4, sortcut=1)   # SortCut c = 1
    np.testing.assert_allclose(cut, scaled_dot_product_attention(q[:8] if n == 8 else k, k, v), **TIGHT)


@pytest.mark.parametrize(("causal", "options"), [(False, {}), (True, {}), ("bottom-right", {}),
                                                 (False, {"sortcut": 2}), (False, {"block_size": 2})])
@pytest.mark.parametrize("method", ["equation", "csr"])
def test_the_effective_matrix_is_the_mechanism(rng, causal, options, method):
    """out = A v (batched, two heads), future keys weigh exactly 0, and the rows of A sum to 1 within the rows of P."""
    n = 10 if causal == "bottom-right" else 16
    q, k, v = rng.standard_normal((2, n, 4)), rng.standard_normal((2, 16, 4)), rng.standard_normal((2, 16, 3))
    result = registry.get("sinkhorn").apply(q, k, v, causal=causal, rng=5, return_weights=True, method=method,
                                            return_draws=True, **options)
    np.testing.assert_allclose(result.output, result.weights @ v, **TIGHT)
    if causal:
        future = np.arange(16) > np.arange(n)[:, None] + (16 - n if causal == "bottom-right" else 0)
        np.testing.assert_array_equal(result.weights[:, future], 0.0)
    b = options.get("block_size", default_block_size(16))
    P = sorting_matrix(k, b, result.draws["sort_net"], result.draws["gumbel"], causal=causal is not False)
    rows = np.abs(P.sum(axis=-1) - 1.0)                            # block 0 of a causal P: no sorted block at all
    spread = np.max(np.where(P.sum(axis=-1) > 0, rows, 0.0))
    np.testing.assert_allclose(result.weights.sum(axis=-1), 1.0, rtol=0, atol=spread + ROUNDING)


def test_causal_choice_of_past_blocks_looks_at_later_keys(rng):
    """The column sums of causal balancing run over later blocks: a later key moves earlier outputs (documented,
    future_independent=False), its weight stays 0, and later values never reach them; with k = 0 iterations (no
    balancing) the earlier outputs ignore the later keys."""
    q, k, v = rng.standard_normal((3, 16, 4))
    base = registry.get("sinkhorn").apply(q, k, v, causal=True, rng=2, return_weights=True, return_draws=True)
    draws = base.draws
    k2, v2 = k.copy(), v.copy()
    k2[12:] = 3.0 * rng.standard_normal((4, 4))                     # the last block's keys
    moved = registry.get("sinkhorn").apply(q, k2, v, causal=True, return_weights=True, **draws)
    assert np.max(np.abs(moved.output[4:12] - base.output[4:12])) > 1e-6
    np.testing.assert_array_equal(moved.output[:4], base.output[:4])  # block 0: its own block only
    np.testing.assert_array_equal(moved.weights[:12, 12:], 0.0)
    v2[12:] = np.nan
    np.testing.assert_array_equal(registry.get("sinkhorn").apply(q, k, v2, causal=True, **draws).output[:12],
                                  base.output[:12])
    still = [registry.get("sinkhorn").apply(q, kk, v, causal=True, iterations=0, **draws).output[:12]
             for kk in (k, k2)]
    np.testing.assert_array_equal(still[1], still[0])


def test_a_nan_key_reaches_every_row_through_the_balancing_and_is_reported_so(rng):
    """A NaN key (5, in block 1) enters the summaries of the later blocks 2 and 3, so their rows of R, so every
    column sum of the balancing: every row with a sorted block is NaN, and ``allowed`` (every pair) says that any key
    may reach any row; block 0 has no sorted block."""
    q, k, v = rng.standard_normal((3, 16, 4))
    k[5] = np.nan
    result = registry.get("sinkhorn").apply(q, k, v, causal=True, rng=2, return_weights=True)
    assert np.isnan(result.output[4:]).all() and np.isfinite(result.output[:4]).all()
    assert result.allowed.all()


def test_default_block_size_is_the_smallest_divisor_at_least_the_square_root():
    for m in range(1, 200):
        b = default_block_size(m)
        assert m % b == 0 and b * b >= m
        assert not any(m % c == 0 and c * c >= m for c in range(1, b))


def test_the_sort_net_uses_the_first_n_columns_of_a_wider_one(rng):
    k = rng.standard_normal((8, 3))
    wide = init_sort_net(0, 3, 6)
    narrow = SortNetParams(wide.w_p, wide.b_p, wide.w_b[:, :4], wide.b_b[:4])
    x = block_summaries(k, 2)
    np.testing.assert_array_equal(sort_net_scores(x, wide), sort_net_scores(x, narrow))


@pytest.mark.parametrize(("options", "error", "match"), [
    ({"block_size": 3}, ValueError, r"m=8 keys do not fill whole blocks of block_size=3"),
    ({"block_size": 0}, ValueError, "block_size must be a positive int, got 0"),
    ({"sortcut": 5, "block_size": 2}, ValueError, r"sortcut=5 exceeds the N=4 blocks of m=8 keys"),
    ({"sortcut": 1, "causal": True}, ValueError, "sortcut=1 has no causal form"),
    ({"temperature": 0.0}, ValueError, "temperature must be a positive finite number, got 0.0"),
    ({"temperature": "hot"}, TypeError, "temperature must be a real number, got str"),
    ({"iterations": -1}, ValueError, "iterations must be a non-negative int, got -1"),
    ({"gumbel": np.zeros((3, 3)), "block_size": 2}, ValueError,
     r"gumbel must broadcast to the sorting scores' shape \(\.\.\., N, N\) = \(4, 4\), got shape \(3, 3\)"),
    ({"sort_net": init_sort_net(0, 3, 2), "block_size": 2}, ValueError,
     "sort_net scores N_max=2 places but the keys make N=4 blocks"),
    ({"sort_net": init_sort_net(0, 5, 4), "block_size": 2}, ValueError, r"sort_net must map d=3 to h"),
    ({"sort_net": (1, 2)}, TypeError, "sort_net must be a SortNetParams"),
    ({"widht": 2}, TypeError, "sinkhorn takes no option 'widht'; its options: block_size, sort_net, gumbel, "),
])
def test_refusals_name_the_argument(rng, options, error, match):
    q, k, v = rng.standard_normal((3, 8, 3))
    with pytest.raises(error, match=match):
        registry.get("sinkhorn").apply(q, k, v, rng=0, **options)


def test_the_natural_function_takes_each_draw_given_or_from_rng(rng):
    q, k, v = rng.standard_normal((3, 8, 3))
    net, eps = init_sort_net(0, 3, 2), np.zeros((2, 2))
    for call in (sinkhorn_attention, registry.get("sinkhorn").apply):
        with pytest.raises(ValueError,
                           match=r"^sinkhorn draws its sorting network from rng: pass rng= \(or sort_net=\)$"):
            call(q, k, v, block_size=4)
        with pytest.raises(ValueError, match=r"^sinkhorn draws its Gumbel noise from rng: pass rng= \(or gumbel=\)$"):
            call(q, k, v, block_size=4, sort_net=net)
    np.testing.assert_array_equal(sinkhorn_attention(q, k, v, block_size=4, sort_net=net, gumbel=eps, rng=0),
                                  sinkhorn_attention(q, k, v, block_size=4, sort_net=net, gumbel=eps))   # rng unused
    with pytest.raises(ValueError, match=r"self-attention over one sequence: q has n=6 queries but k has m=8"):
        sinkhorn_attention(q[:6], k, v, block_size=4, rng=0)
    drawn = sinkhorn_attention(q, k, v, block_size=4, sort_net=net, rng=7)      # gumbel from rng=7
    np.testing.assert_array_equal(drawn, sinkhorn_attention(q, k, v, block_size=4, sort_net=net,
                                                            gumbel=np.random.default_rng(7).gumbel(size=(2, 2))))
