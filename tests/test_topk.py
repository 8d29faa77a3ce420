"""Top-k attention (Zhao et al. 2019; Gupta et al. 2021): the kept support, the tie rules, the limit k = m, Gupta's
query chunks against the whole matrix, masks, the causal forms, non-finite scores and bad input."""
from __future__ import annotations

import math

import numpy as np
import pytest

from refattn import registry, scaled_dot_product_attention
from refattn.beyond import topk_attention, topk_mask
from refattn.common import MemoryBudgetError, temporary_memory_budget

TIGHT = {"rtol": 1e-12, "atol": 1e-12}


def _qkv(rng, n=5, m=7, d=4, d_v=3, batch=()):
    return (rng.standard_normal((*batch, n, d)), rng.standard_normal((*batch, m, d)),
            rng.standard_normal((*batch, m, d_v)))


def test_hand_computed_ties():
    # One query q = 1 and scale 1: the scores are the keys, ln 3, 0, ln 3, ln 2 (exp: 3, 1, 3, 2).
    q, v = np.array([[1.0]]), np.array([[1.0], [10.0], [100.0], [1000.0]])
    k = np.array([[math.log(3.0)], [0.0], [math.log(3.0)], [math.log(2.0)]])
    cases = [
        (1, "threshold", [0.5, 0.0, 0.5, 0.0]),                    # both ln 3 equal the largest: 3/6 each
        (1, "first", [1.0, 0.0, 0.0, 0.0]),                        # exactly one: the smaller index, j = 0
        (2, "first", [0.5, 0.0, 0.5, 0.0]),
        (3, "threshold", [3 / 8, 0.0, 3 / 8, 2 / 8]),              # 3, 3, 2 over 8
        (4, "first", [3 / 9, 1 / 9, 3 / 9, 2 / 9]),                # every key: softmax
    ]
    for top_k, ties, expected in cases:
        out, A = topk_attention(q, k, v, top_k=top_k, ties=ties, scale=1.0, return_weights=True)
        np.testing.assert_allclose(A, [expected], rtol=1e-15, atol=0, err_msg=f"k={top_k}, {ties}")
        np.testing.assert_allclose(out, [[np.dot(expected, v[:, 0])]], rtol=1e-14, err_msg=f"k={top_k}, {ties}")


def test_threshold_keeps_every_score_equal_to_the_kth():
    S = np.array([[2.0, 1.0, 1.0, 1.0, 0.0]])
    np.testing.assert_array_equal(topk_mask(S, 2), [[True, True, True, True, False]])
    np.testing.assert_array_equal(topk_mask(S, 2, ties="first"), [[True, True, False, False, False]])
    np.testing.assert_array_equal(topk_mask(S, 4, ties="first"), [[True, True, True, True, False]])


@pytest.mark.parametrize("ties", ["threshold", "first"])
@pytest.mark.parametrize("top_k", [1, 2, 4, 9])
def test_kept_pairs_are_the_largest_visible_scores(rng, ties, top_k):
    S = np.round(rng.standard_normal((3, 6, 8)), 1)                # rounded: many ties
    allowed = rng.random((3, 6, 8)) < 0.7
    keep = topk_mask(S, top_k, allowed=allowed, ties=ties)
    for b in range(3):
        for i in range(6):
            visible = np.flatnonzero(allowed[b, i])
            kept = np.flatnonzero(keep[b, i])
            assert set(kept) <= set(visible)
            want = min(top_k, visible.size)
            ranked = sorted(visible, key=lambda j, b=b, i=i: (-S[b, i, j], j))
            if ties == "first":
                assert list(kept) == sorted(ranked[:want])
            elif want:
                kth = S[b, i, ranked[want - 1]]
                assert list(kept) == sorted(j for j in visible if S[b, i, j] >= kth)


@pytest.mark.parametrize("causal", [False, True, "bottom-right"])
def test_k_at_least_m_is_softmax_attention_with_masks(rng, causal):
    n, m = (5, 7) if causal is not True else (7, 7)
    q, k, v = _qkv(rng, n, m, batch=(2,))
    for mask in (None, rng.random((n, m)) < 0.6, rng.standard_normal((2, n, m))):
        out, A = topk_attention(q, k, v, mask, top_k=m, causal=causal, return_weights=True)
        ref, A_ref = scaled_dot_product_attention(q, k, v, mask, causal=causal, return_weights=True)
        np.testing.assert_allclose(out, ref, **TIGHT)
        np.testing.assert_allclose(A, A_ref, **TIGHT)


def test_distance_to_softmax_is_twice_the_dropped_softmax_mass_and_falls_with_k(rng):
    # Top-k renormalises softmax's weights on the kept keys: Σ_j |A^k_ij − A_ij| = 2 (1 − Σ_kept A_ij).
    q, k, v = _qkv(rng, 6, 9)
    A = scaled_dot_product_attention(q, k, v, return_weights=True)[1]
    distances = []
    for top_k in range(1, 10):
        A_k = topk_attention(q, k, v, top_k=top_k, return_weights=True)[1]
        kept = A_k > 0
        l1 = np.abs(A_k - A).sum(axis=-1)
        np.testing.assert_allclose(l1, 2 * (1 - np.where(kept, A, 0).sum(axis=-1)), **TIGHT)
        distances.append(l1)
    assert np.all(np.diff(distances, axis=0) <= 1e-15)
    np.testing.assert_allclose(distances[-1], 0.0, atol=1e-15)


@pytest.mark.parametrize("causal", [False, True, "bottom-right"])
@pytest.mark.parametrize("chunk_size", [1, 3, 20])
def test_gupta_chunks_equal_the_whole_matrix(rng, causal, chunk_size):
    n, m = (7, 7) if causal is True else (9, 6)
    q, k, v = _qkv(rng, n, m, batch=(2, 1))
    mask = rng.random((3, 2, 1, n, m)) < 0.8                       # more batch dims than q, k, v
    for ties in ("threshold", "first"):
        whole = topk_attention(q, k, v, mask, top_k=2, ties=ties, causal=causal, method="equation",
                               return_weights=True)
        chunked = topk_attention(q, k, v, mask, top_k=2, ties=ties, causal=causal, method="chunk",
                                 chunk_size=chunk_size, return_weights=True)
        assert whole[0].shape == (3, 2, 1, n, 3)
        np.testing.assert_allclose(chunked[0], whole[0], **TIGHT)
        np.testing.assert_allclose(chunked[1], whole[1], **TIGHT)    # the products of row subsets round alike
        np.testing.assert_array_equal(chunked[1] > 0, whole[1] > 0)  # to 1 ulp; the kept pairs are the same


def test_method_chunked_is_the_deprecated_name_of_chunk(rng):
    q, k, v = _qkv(rng)
    new = topk_attention(q, k, v, top_k=2, method="chunk", chunk_size=2, return_weights=True)
    with pytest.warns(DeprecationWarning, match='method="chunked" is method="chunk"'):
        old = topk_attention(q, k, v, top_k=2, method="chunked", chunk_size=2, return_weights=True)
    np.testing.assert_array_equal(old[0], new[0])
    np.testing.assert_array_equal(old[1], new[1])
    with pytest.warns(DeprecationWarning, match='method="chunked"'):
        result = registry.get("topk").apply(q, k, v, top_k=2, method="chunked", chunk_size=2)
    np.testing.assert_array_equal(result.output, new[0])


def test_auto_streams_over_the_memory_budget(rng):
    q, k, v = _qkv(rng, 40, 30)
    whole = topk_attention(q, k, v, top_k=3, method="equation")
    with temporary_memory_budget(2000):                            # 40 × 30 scores: 9600 bytes
        np.testing.assert_allclose(topk_attention(q, k, v, top_k=3), whole, **TIGHT)
        with pytest.raises(MemoryBudgetError, match="return_weights"):
            topk_attention(q, k, v, top_k=3, return_weights=True)
        with pytest.raises(MemoryBudgetError, match='method="equation"'):
            topk_attention(q, k, v, top_k=3, method="equation")


def test_causal_rows_ignore_the_future_and_bottom_right_is_the_last_rows(rng):
    q, k, v = _qkv(rng, 8, 8)
    out, A = topk_attention(q, k, v, top_k=2, causal=True, return_weights=True)
    np.testing.assert_array_equal(A[np.triu_indices(8, 1)], 0.0)
    np.testing.assert_array_equal((A > 0).sum(axis=-1), [1, 2, 2, 2, 2, 2, 2, 2])   # row 0 sees one key
    k2, v2 = k.copy(), v.copy()
    k2[5:], v2[5:] = np.nan, np.nan
    np.testing.assert_array_equal(topk_attention(q, k2, v2, top_k=2, causal=True)[:5], out[:5])
    last = topk_attention(q[5:], k, v, top_k=2, causal="bottom-right")
    np.testing.assert_allclose(last, out[5:], **TIGHT)


def test_a_nan_score_is_always_kept_by_the_rows_that_see_it(rng):
    q, k, v = _qkv(rng, 6, 6)
    k[3] = np.nan
    for ties in ("threshold", "first"):
        out, A = registry.get("topk").apply(q, k, v, causal=True, top_k=1, ties=ties, return_weights=True)[:2]
        assert np.all(np.isnan(out[3:])), ties                     # rows 3 … 5 see key 3: it ranks first
        assert np.all(np.isfinite(out[:3])), ties                  # rows 0 … 2 may not see it
    k[3] = np.inf                                                  # an Inf key makes its scores NaN too
    assert np.all(np.isnan(topk_attention(q, k, v, top_k=2)))


@pytest.mark.parametrize("policy", ["zero", "nan", "uniform"])
def test_fully_masked_rows_follow_the_policy(rng, policy):
    q, k, v = _qkv(rng, 4, 5)
    mask = np.ones((4, 5), dtype=bool)
    mask[2] = False
    out, A = topk_attention(q, k, v, mask, top_k=1, fully_masked=policy, return_weights=True)
    ref = scaled_dot_product_attention(q[2:3], k, v, mask[2:3], fully_masked=policy)
    np.testing.assert_allclose(out[2:3], ref, rtol=1e-15, atol=0)
    if policy == "uniform":
        np.testing.assert_allclose(out[2], v.mean(axis=0), rtol=1e-14)
    result = registry.get("topk").apply(q, k, v, mask=mask, top_k=1, fully_masked=policy, return_weights=True)
    np.testing.assert_array_equal(result.allowed[2], policy == "uniform")   # a uniform row uses every key


def test_edge_sizes(rng):
    q, k, v = _qkv(rng, 0, 4)
    assert topk_attention(q, k, v, top_k=2).shape == (0, 3)
    q, k, v = _qkv(rng, 3, 0)
    np.testing.assert_array_equal(topk_attention(q, k, v, top_k=2), np.zeros((3, 3)))
    assert np.all(np.isnan(topk_attention(q, k, v, top_k=2, fully_masked="nan")))
    q, k, v = _qkv(rng, 3, 4, d=0)
    with pytest.raises(ValueError, match="d_k"):
        topk_attention(q, k, v)
    np.testing.assert_allclose(topk_attention(q, k, v, top_k=4, scale=1.0), np.tile(v.mean(axis=0), (3, 1)),
                               **TIGHT)


@pytest.mark.parametrize(("options", "error", "name"), [
    ({"top_k": 0}, ValueError, "top_k"), ({"top_k": 2.5}, ValueError, "top_k"),
    ({"ties": "random"}, ValueError, "ties"), ({"method": "blocked"}, ValueError, "method"),
    ({"chunk_size": 0}, ValueError, "chunk_size"), ({"mask": np.ones((3, 3), dtype=bool)}, ValueError, "mask"),
    ({"mask": np.ones((5, 7), dtype=int)}, TypeError, "mask"),
    ({"causal": "yes"}, ValueError, "causal"), ({"fully_masked": "ignore"}, ValueError, "fully_masked"),
])
def test_bad_input_names_the_argument(rng, options, error, name):
    q, k, v = _qkv(rng)
    mask = options.pop("mask", None)
    with pytest.raises(error, match=name):
        topk_attention(q, k, v, mask, **options)
