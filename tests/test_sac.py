"""Sparse Adaptive Connection: attention on explicit edges (every edge is softmax attention), the edge selection
from scores and from the demonstration predictor (in blocks of queries, never n × m), one edge set per sequence,
and refusals that name the argument."""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from refattn import registry, scaled_dot_product_attention
from refattn.sparse import (
    SacPredictor,
    init_sac_predictor,
    predict_edges,
    predictor_scores,
    sac_attention,
    sparse_attention,
    top_edges,
)
from refattn.sparse import sac as sac_module
from refattn.sparse.pattern import SparsePattern

TIGHT = {"rtol": 1e-12, "atol": 1e-12}


def _every_edge(n, m):
    return np.array([(i, j) for i in range(n) for j in range(m)])


@pytest.mark.parametrize("causal", [False, True, "bottom-right"])
@pytest.mark.parametrize("method", ["equation", "csr"])
def test_every_edge_is_softmax_attention(rng, causal, method):
    n = 4 if causal == "bottom-right" else 6
    q, k, v = rng.standard_normal((n, 3)), rng.standard_normal((6, 3)), rng.standard_normal((6, 2))
    out, A = sac_attention(q, k, v, _every_edge(n, 6), causal=causal, method=method, return_weights=True)
    expected, weights = scaled_dot_product_attention(q, k, v, causal=causal, return_weights=True)
    np.testing.assert_allclose(out, expected, **TIGHT)
    np.testing.assert_allclose(A, weights, **TIGHT)


def test_edges_are_a_set_in_any_order_with_padding(rng):
    """Repeats merge, order does not matter, (-1, -1) is no edge, and the result is sparse attention on the set."""
    q, k, v = rng.standard_normal((4, 3)), rng.standard_normal((5, 3)), rng.standard_normal((5, 2))
    edges = np.array([(2, 4), (0, 1), (-1, -1), (0, 3), (2, 4), (3, 0), (0, 1)])
    pattern = SparsePattern.from_pairs([0, 0, 2, 3], [1, 3, 4, 0], 4, 5)
    out = sac_attention(q, k, v, edges)
    np.testing.assert_allclose(out, sparse_attention(q, k, v, pattern), **TIGHT)
    np.testing.assert_array_equal(out[1], 0.0)                      # query 1 has no edge: a zero row
    np.testing.assert_array_equal(sac_attention(q, k, v, edges[::-1]), out)


def test_one_edge_set_per_sequence(rng):
    """Edges with leading dims: batch element b attends on edges[b]; 2-D edges are shared by every sequence."""
    q, k, v = rng.standard_normal((2, 4, 3)), rng.standard_normal((2, 5, 3)), rng.standard_normal((2, 5, 2))
    edges = np.array([[(0, 1), (1, 2), (2, 3), (3, 4)], [(0, 0), (0, 4), (3, 1), (-1, -1)]])
    out, A = sac_attention(q, k, v, edges, return_weights=True)
    for b in range(2):
        one, weights = sac_attention(q[b], k[b], v[b], edges[b], return_weights=True)
        np.testing.assert_array_equal(out[b], one)
        np.testing.assert_array_equal(A[b], weights)
    shared = sac_attention(q, k, v, edges[0])
    np.testing.assert_array_equal(shared[1], sac_attention(q[1], k[1], v[1], edges[0]))


def test_causal_drops_the_edges_to_later_keys(rng):
    q, k, v = rng.standard_normal((3, 5, 3))
    edges = np.array([(0, 0), (0, 3), (1, 2), (1, 1), (4, 2)])
    out = sac_attention(q, k, v, edges, causal=True)
    np.testing.assert_array_equal(out, sac_attention(q, k, v, np.array([(0, 0), (1, 1), (4, 2)])))


def test_top_edges_ranks_by_score_ties_to_the_smaller_key_and_nan_first():
    scores = np.array([[0.5, 0.9, 0.5, 0.1], [np.nan, 0.2, 0.2, 0.3], [-np.inf, -np.inf, -np.inf, 1.0]])
    assert top_edges(scores, 2).tolist() == [[0, 0], [0, 1], [1, 0], [1, 3], [2, 0], [2, 3]]
    assert top_edges(scores, 0).shape == (0, 2)
    assert top_edges(scores, 9).shape == (12, 2)                     # r > m: every key
    assert top_edges(scores, 3, causal=True).tolist() == [[0, 0], [-1, -1], [-1, -1], [1, 0], [1, 1], [-1, -1],
                                                          [2, 0], [2, 1], [2, 2]]


def test_predicted_edges_are_the_top_edges_of_the_scores_whatever_the_block_of_queries(rng, monkeypatch):
    q, k = rng.standard_normal((2, 3, 9, 4)), rng.standard_normal((3, 11, 4))
    predictor = init_sac_predictor(0, 4)
    logits = (q @ predictor.w) @ np.swapaxes(k, -1, -2)
    p = predictor_scores(q, k, predictor)
    np.testing.assert_allclose(p, 1 / (1 + np.exp(-logits)), **TIGHT)
    for causal in (False, True, "bottom-right"):
        expected = top_edges(logits, 3, causal=causal)
        assert np.array_equal(top_edges(p, 3, causal=causal), expected)   # σ keeps the order here (no rounding ties)
        for rows in (1, 2, 4, 100):                                   # the score block: rows × (batch·m) pairs
            monkeypatch.setattr(sac_module, "SCORE_BLOCK_BYTES", 8 * rows * 6 * 11)
            np.testing.assert_array_equal(predict_edges(q, k, predictor, 3, causal=causal), expected)


def test_a_nan_key_is_picked_first_and_shows(rng):
    """A NaN score ranks first, so a NaN key reaches every row (that may see it) instead of vanishing unseen."""
    q, k, v = rng.standard_normal((3, 6, 3))
    k[4] = np.nan
    result = registry.get("sac").apply(q, k, v, rng=1, r=2, return_weights=True)
    assert result.allowed[:, 4].all() and np.isnan(result.output).all()
    causal = registry.get("sac").apply(q, k, v, causal=True, rng=1, r=2, return_weights=True)
    assert np.isfinite(causal.output[:4]).all() and np.isnan(causal.output[4:]).all()


def test_the_predictor_never_holds_n_by_m_scores():
    """At n = m = 4096 a dense float64 score matrix is 128 MiB; scoring in blocks of 8 MiB of queries' scores, with
    the selection's temporaries (ranks, partition, counts: about five such blocks), stays near 40 MiB."""
    rng = np.random.default_rng(3)
    n = 4096
    q, k, v = rng.standard_normal((3, n, 2))
    registry.get("sac").apply(q[:8], k[:8], v[:8], rng=0, method="csr")     # the kernel compiles outside the trace
    tracemalloc.start()
    try:
        out = registry.get("sac").apply(q, k, v, rng=0, method="csr").output
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert out.shape == (n, 2)
    assert peak < n * n * 8 / 2, f"peak {peak / 2**20:.0f} MiB"


@pytest.mark.parametrize(("edges", "error", "match"), [
    (np.array([0, 1]), ValueError, r"edges must have shape \(\.\.\., E, 2\) of \(query, key\) pairs, got shape \(2,\)"),
    (np.array([[0, 1, 2]]), ValueError, r"edges must have shape \(\.\.\., E, 2\)"),
    (np.array([[0.0, 1.0]]), TypeError, "edges must be an array of ints, got dtype float64"),
    (np.array([[4, 1]]), ValueError, r"edges must be pairs \(i, j\) with 0 <= i < n=4 and 0 <= j < m=5.*got \(4, 1\)"),
    (np.array([[0, -1]]), ValueError, r"or \(-1, -1\) for none; got \(0, -1\)"),
    (np.zeros((3, 2, 2), dtype=int), ValueError, r"leading \(batch\) dimensions do not broadcast: q, k, v \(2,\), "
                                                 r"edges \(3,\)"),
])
def test_bad_edges_are_named(rng, edges, error, match):
    q, k, v = rng.standard_normal((2, 4, 3)), rng.standard_normal((2, 5, 3)), rng.standard_normal((2, 5, 2))
    with pytest.raises(error, match=match):
        sac_attention(q, k, v, edges)


@pytest.mark.parametrize(("options", "error", "match"), [
    ({"r": -1}, ValueError, "r must be a non-negative int, got -1"),
    ({"predictor": np.eye(3)}, TypeError, "predictor must be a SacPredictor"),
    ({"predictor": SacPredictor(np.eye(2))}, ValueError, r"predictor.w must be \(d, d\) for q and k of width d=3"),
    ({"rng": None}, ValueError, r"sac draws its predictor from rng: pass rng= \(or predictor=\)"),
    ({"widht": 1}, TypeError, "sac takes no option 'widht'; its options: r, predictor, method"),
])
def test_apply_refusals_name_the_argument(rng, options, error, match):
    q, k, v = rng.standard_normal((3, 5, 3))
    with pytest.raises(error, match=match):
        registry.get("sac").apply(q, k, v, **({"rng": 0} | options))
