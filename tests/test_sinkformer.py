"""Sinkformer (Sander et al. 2022): one row step is softmax, the sums after each step, the stated tolerance of T
steps, n != m, masks (a causal mask tends to the identity), non-finite scores and bad input."""
from __future__ import annotations

import math

import numpy as np
import pytest

from refattn import registry, scaled_dot_product_attention
from refattn.beyond import sinkformer_attention, sinkformer_weights

TIGHT = {"rtol": 1e-12, "atol": 1e-12}


def _qkv(rng, n=5, m=7, d=4, d_v=3, batch=()):
    return (rng.standard_normal((*batch, n, d)), rng.standard_normal((*batch, m, d)),
            rng.standard_normal((*batch, m, d_v)))


@pytest.mark.parametrize(("n", "m"), [(5, 7), (6, 6), (8, 3)])
def test_one_row_step_is_softmax_attention(rng, n, m):
    q, k, v = _qkv(rng, n, m, batch=(2,))
    out, K = sinkformer_attention(q, k, v, iterations=1, return_weights=True)
    ref, A = scaled_dot_product_attention(q, k, v, return_weights=True)
    np.testing.assert_allclose(out, ref, **TIGHT)
    np.testing.assert_allclose(K, A, **TIGHT)


def test_hand_computed_two_by_two():
    # exp(S) = [[1, 3], [1, 1]]: rows → [[1/4, 3/4], [1/2, 1/2]]; columns (sums 3/4, 5/4) → [[1/3, 3/5], [2/3, 2/5]].
    S = np.log([[1.0, 3.0], [1.0, 1.0]])
    np.testing.assert_allclose(sinkformer_weights(S, 1), [[0.25, 0.75], [0.5, 0.5]], rtol=1e-15)
    np.testing.assert_allclose(sinkformer_weights(S, 2), [[1 / 3, 3 / 5], [2 / 3, 2 / 5]], rtol=1e-15)
    # The limit D₁ exp(S) D₂ keeps the cross-ratio K_00 K_11 / (K_01 K_10) = 1·1 / (3·1) = 1/3; with unit sums it is
    # [[b, 1 − b], [1 − b, b]], so b² / (1 − b)² = 1/3 and b = 1 / (1 + √3).
    b = 1 / (1 + math.sqrt(3))
    np.testing.assert_allclose(sinkformer_weights(S, 60), [[b, 1 - b], [1 - b, b]], rtol=1e-13)


@pytest.mark.parametrize(("n", "m"), [(6, 6), (4, 9), (9, 4)])
def test_each_step_normalises_its_side(rng, n, m):
    S = 2.0 * rng.standard_normal((2, n, m))
    for T in range(1, 8):
        K = sinkformer_weights(S, T)
        if T % 2:
            np.testing.assert_allclose(K.sum(axis=-1), 1.0, rtol=0, atol=1e-15 * m)
        else:
            np.testing.assert_allclose(K.sum(axis=-2), n / m, rtol=0, atol=1e-15 * n)


def _cross_ratio_range(S):
    """Δ = max over i, j, p, q of S_ip + S_jq − S_jp − S_iq, by loops."""
    n, m = S.shape
    return max(S[i, p] + S[j, q] - S[j, p] - S[i, q] for i in range(n) for j in range(n) for p in range(m)
               for q in range(m))


@pytest.mark.parametrize(("n", "m", "spread"), [(6, 6, 0.5), (5, 8, 1.0), (7, 4, 0.3)])
def test_the_stated_tolerance_holds_and_shrinks(rng, n, m, spread):
    S = spread * rng.standard_normal((n, m))
    delta = _cross_ratio_range(S)
    kappa = math.tanh(delta / 4)
    for T in range(2, 16):
        K = sinkformer_weights(S, T)
        other = K.sum(axis=-2) / (n / m) if T % 2 else K.sum(axis=-1)   # the side the last step left alone
        bound = math.expm1(kappa ** (T - 2) * delta)
        assert np.max(np.abs(other - 1.0)) <= bound + 1e-14, (T, np.max(np.abs(other - 1.0)), bound)


def test_many_steps_make_it_doubly_stochastic(rng):
    q, k, v = _qkv(rng, 8, 8)
    out, K = sinkformer_attention(q, k, v, iterations=81, return_weights=True)
    np.testing.assert_allclose(K.sum(axis=-1), 1.0, rtol=0, atol=1e-13)
    np.testing.assert_allclose(K.sum(axis=-2), 1.0, rtol=0, atol=1e-13)
    np.testing.assert_allclose(out, K @ v, **TIGHT)
    # D₁ exp(S) D₂: the log cross-ratios of K are the scores' own.
    S = q @ k.T / 2.0
    logK = np.log(K)
    np.testing.assert_allclose(logK[1:, 1:] + logK[0, 0] - logK[1:, :1] - logK[:1, 1:],
                               S[1:, 1:] + S[0, 0] - S[1:, :1] - S[:1, 1:], **TIGHT)


def test_the_default_is_three_steps_and_rows_sum_to_one(rng):
    q, k, v = _qkv(rng, 6, 6)
    out, K = registry.get("sinkformer").apply(q, k, v, return_weights=True)[:2]
    np.testing.assert_array_equal(K, sinkformer_weights(q @ k.T / 2.0, 3))
    np.testing.assert_allclose(K.sum(axis=-1), 1.0, rtol=0, atol=1e-15 * 6)


def test_masks_balance_the_pairs_that_take_part(rng):
    q, k, v = _qkv(rng, 6, 5)
    mask = rng.random((6, 5)) < 0.7
    mask[:, 4] = False                                             # a padded key: no row sees it
    mask[2] = False                                                # a fully masked query: a zero row
    out, K = sinkformer_attention(q, k, v, mask, iterations=301, return_weights=True)
    np.testing.assert_array_equal(K[~mask], 0.0)
    np.testing.assert_array_equal(out[2], 0.0)
    rows, cols = mask.any(axis=1), mask.any(axis=0)               # r = 5 rows, s = 4 columns with a pair
    np.testing.assert_allclose(K.sum(axis=1)[rows], 1.0, rtol=0, atol=1e-13)
    np.testing.assert_allclose(K.sum(axis=0)[cols], rows.sum() / cols.sum(), rtol=0, atol=1e-12)
    np.testing.assert_allclose(out, K @ v, **TIGHT)
    v[4] = np.nan                                                  # a masked value never reaches the output
    np.testing.assert_array_equal(sinkformer_attention(q, k, v, mask, iterations=301), out)
    one = sinkformer_attention(q, k, v, mask, iterations=1)        # one row step: masked softmax
    np.testing.assert_allclose(one, scaled_dot_product_attention(q, k, v, mask), **TIGHT)


def test_a_causal_mask_tends_to_the_identity_and_reads_later_queries(rng):
    q, k, v = _qkv(rng, 6, 6)
    causal = np.tril(np.ones((6, 6), dtype=bool))
    off = [np.max(np.abs(sinkformer_weights(q @ k.T / 2.0, T, mask=causal) - np.eye(6))) for T in (1, 11, 101, 1001)]
    assert off[0] > off[1] > off[2] > off[3]                       # the identity is the only balanced matrix
    assert off[3] < 0.05                                           # on the lower triangle (slow: no total support)
    q2 = q.copy()
    q2[5] += 1.0                                                   # the last query changes the column sums
    first = sinkformer_attention(q, k, v, causal, iterations=2)[0]
    assert np.all(first != sinkformer_attention(q2, k, v, causal, iterations=2)[0])


def test_the_registry_entry_has_no_causal_form(rng):
    q, k, v = _qkv(rng, 4, 4)
    with pytest.raises(ValueError, match="causal"):
        registry.get("sinkformer").apply(q, k, v, causal=True)


def test_non_finite_inputs_follow_ieee_in_the_rows_they_reach(rng):
    q, k, v = _qkv(rng, 4, 5)
    k[1] = np.nan
    assert np.all(np.isnan(sinkformer_attention(q, k, v, iterations=1)))   # every row sees key 1
    q, k, v = _qkv(rng, 4, 5)
    v[3, 0] = np.inf
    out = sinkformer_attention(q, k, v)
    assert np.all(np.isinf(out[:, 0])) and np.all(np.isfinite(out[:, 1:]))


def test_edge_sizes(rng):
    q, k, v = _qkv(rng, 0, 4)
    assert sinkformer_attention(q, k, v).shape == (0, 3)
    q, k, v = _qkv(rng, 3, 0)
    np.testing.assert_array_equal(sinkformer_attention(q, k, v), np.zeros((3, 3)))
    q, k, v = _qkv(rng, 3, 4, d=0)
    with pytest.raises(ValueError, match="d_k"):
        sinkformer_attention(q, k, v)
    np.testing.assert_allclose(sinkformer_attention(q, k, v, scale=1.0, iterations=4), np.tile(v.mean(axis=0), (3, 1)),
                               **TIGHT)


@pytest.mark.parametrize(("options", "error", "name"), [
    ({"iterations": 0}, ValueError, "iterations"), ({"iterations": 1.5}, ValueError, "iterations"),
    ({"scale": np.inf}, ValueError, "scale"), ({"mask": np.ones((3, 3), dtype=bool)}, ValueError, "mask"),
    ({"mask": np.ones((5, 7))}, TypeError, "mask"),
])
def test_bad_input_names_the_argument(rng, options, error, name):
    q, k, v = _qkv(rng)
    mask = options.pop("mask", None)
    with pytest.raises(error, match=name):
        sinkformer_attention(q, k, v, mask, **options)


def test_a_count_beyond_int64_is_refused_by_name_at_once():
    """iterations=10**30 ran for ever: every count goes through the shared int checks, which refuse above 2**62."""
    q = np.ones((4, 2))
    with pytest.raises(ValueError, match=r"^iterations=10{30} is too large: sizes and counts must be at most 2\*\*62"):
        sinkformer_attention(q, q, q, iterations=10**30)
