"""Clustered and improved clustered attention (Vyas et al. 2020): the hashing and the Hamming K-means against loops,
the draws, the exact limits, the closed forms of the broadcast and of the top-k recomputation, no causal form,
bad input, edge sizes and memory. The registry-driven tests (tests/test_registry.py, test_naive.py, test_fuzz.py)
hold both to the shared properties and to their naive twins besides."""
from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest

from refattn import registry, scaled_dot_product_attention
from refattn.common import MemoryBudgetError, temporary_memory_budget
from refattn.compressed import (
    cluster_queries,
    clustered_attention,
    draw_hash_planes,
    draw_initial_centroids,
    hamming_kmeans,
    hash_queries,
    improved_clustered_attention,
    query_centroids,
)

from .naive import naive_hamming_kmeans, naive_hash

TIGHT = {"rtol": 1e-12, "atol": 1e-12}
MECHANISMS = [clustered_attention, improved_clustered_attention]


def _qkv(rng, n=9, m=7, d=4, d_v=3, batch=()):
    return (rng.standard_normal((*batch, n, d)), rng.standard_normal((*batch, m, d)),
            rng.standard_normal((*batch, m, d_v)))


def _softmax_rows(S):
    e = np.exp(S - S.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


# --- hashing and K-means ----------------------------------------------------------------------------

def test_hash_bits_are_the_sides_of_the_hyperplanes(rng):
    q = rng.standard_normal((2, 6, 3))
    planes = rng.standard_normal((2, 5, 4))                        # one set of planes per batch row
    hashes = hash_queries(q, planes)
    assert hashes.shape == (2, 6, 5) and hashes.dtype == bool
    for b in range(2):
        for i in range(6):
            assert tuple(hashes[b, i]) == naive_hash(q[b, i], planes[b]), (b, i)


def test_hyperplanes_through_the_origin_hash_by_direction_only(rng):
    q = rng.standard_normal((20, 4))
    planes = draw_hash_planes(rng, 63, 4, hash_bias=False)
    np.testing.assert_array_equal(hash_queries(2.5 * q, planes), hash_queries(q, planes))
    biased = draw_hash_planes(rng, 63, 4)
    assert not np.array_equal(hash_queries(2.5 * q, biased), hash_queries(q, biased))   # offsets see the length


@pytest.mark.parametrize(("n", "bits", "clusters", "iterations"), [(12, 63, 3, 10), (20, 3, 6, 4), (30, 5, 8, 1)])
def test_hamming_kmeans_equals_the_loop(rng, n, bits, clusters, iterations):
    """Few bits make equal and equidistant codes: ties to the first cluster and even splits are exercised."""
    hashes = rng.random((2, 3, n, bits)) < 0.5
    initial = rng.choice(n, size=clusters, replace=False)
    got = hamming_kmeans(hashes, initial, iterations=iterations)
    assert got.shape == (2, 3, n) and got.dtype == np.int64
    for index in np.ndindex(2, 3):
        codes = [tuple(h) for h in hashes[index].tolist()]
        assert got[index].tolist() == naive_hamming_kmeans(codes, initial.tolist(), iterations), index


def test_an_emptied_cluster_keeps_its_code_and_wins_queries_back():
    # Queries 0 and 2 share the code 0000 and both start a cluster: every tie goes to cluster 0, so cluster 1 is
    # empty after the first assignment. Cluster 0's majority moves to 0011 (3 of its 5 members), cluster 1 keeps
    # 0000 and wins queries 0 and 2 back; query 6 (0111) is 1 bit from both 0011 and 1111: the first, cluster 0.
    codes = ["0000", "0011", "0000", "1111", "1110", "0011", "0111", "0011"]
    hashes = np.array([[c == "1" for c in code] for code in codes])
    assert hamming_kmeans(hashes, [0, 2, 3], iterations=1).tolist() == [0, 0, 0, 2, 2, 0, 2, 0]
    assert hamming_kmeans(hashes, [0, 2, 3], iterations=2).tolist() == [1, 0, 1, 2, 2, 0, 0, 0]
    for iterations in (1, 2, 10):
        assert hamming_kmeans(hashes, [0, 2, 3], iterations=iterations).tolist() == naive_hamming_kmeans(
            [tuple(h) for h in hashes.tolist()], [0, 2, 3], iterations)


def test_each_lloyd_iteration_lowers_the_total_hamming_distance(rng):
    """With each cluster at its majority code, Σ_i ‖h_i ⊕ μ_c(i)‖₁ = Σ_j Σ_b min(ones, zeros) never grows."""
    hashes = hash_queries(rng.standard_normal((200, 8)), draw_hash_planes(rng, 16, 8))
    initial = draw_initial_centroids(rng, 200, 8)

    def cost(assignment):
        ones = np.array([hashes[assignment == j].sum(axis=0) for j in range(8)])
        sizes = np.bincount(assignment, minlength=8)[:, None]
        return int(np.minimum(ones, sizes - ones).sum())

    costs = [cost(hamming_kmeans(hashes, initial, iterations=t)) for t in range(1, 9)]
    assert all(b <= a for a, b in zip(costs, costs[1:], strict=False)), costs
    assert costs[-1] < costs[0], costs                             # and it does move


def test_draws_follow_their_documented_order(rng):
    """planes = standard_normal((B, d + 1)) (last column zeroed without hash_bias), then initial = choice(n, C);
    clustered attention from rng equals clustered attention fed those draws."""
    q, k, v = _qkv(rng)
    gen = np.random.default_rng(5)
    planes = gen.standard_normal((63, 5))
    initial = gen.choice(9, size=3, replace=False)
    np.testing.assert_array_equal(draw_hash_planes(5, 63, 4), planes)
    again = np.random.default_rng(5)
    np.testing.assert_array_equal(draw_hash_planes(again, 63, 4), planes)
    np.testing.assert_array_equal(draw_initial_centroids(again, 9, 3), initial)
    through = draw_hash_planes(5, 63, 4, hash_bias=False)
    np.testing.assert_array_equal(through[:, :-1], planes[:, :-1])
    np.testing.assert_array_equal(through[:, -1], 0.0)
    for fn in MECHANISMS:
        np.testing.assert_array_equal(fn(q, k, v, num_clusters=3, rng=5),
                                      fn(q, k, v, planes=planes, initial=initial))
        np.testing.assert_array_equal(fn(q, k, v, num_clusters=3, rng=5),
                                      fn(q, k, v, assignment=cluster_queries(q, 3, rng=5)))
    result = registry.get("clustered").apply(q, k, v, rng=5, return_draws=True)
    np.testing.assert_array_equal(result.draws["planes"], planes)
    np.testing.assert_array_equal(result.draws["initial"], initial)


def test_clusters_are_capped_at_the_number_of_queries(rng):
    q, k, v = _qkv(rng, n=4)
    np.testing.assert_array_equal(cluster_queries(q, 10, rng=1), cluster_queries(q, 4, rng=1))
    assert sorted(cluster_queries(q, 4, rng=1).tolist()) == [0, 1, 2, 3]   # distinct codes: each alone
    apply = registry.get("clustered").apply
    drawn = apply(q, k, v, num_clusters=10, rng=1, return_draws=True)
    assert drawn.draws["initial"].shape == (4,)
    np.testing.assert_array_equal(apply(q, k, v, num_clusters=10, **drawn.draws).output, drawn.output)


def test_separated_groups_are_found(rng):
    """Three tight groups far apart, K-means started from one query of each: it finds them (from a random start,
    two starts in one group can leave a local optimum, as any K-means)."""
    centres = 4.0 * rng.standard_normal((3, 8))
    truth = rng.permutation(np.arange(40) % 3)
    q = centres[truth] + 0.05 * rng.standard_normal((40, 8))
    starts = [int(np.flatnonzero(truth == g)[0]) for g in range(3)]
    found = cluster_queries(q, planes=draw_hash_planes(rng, 63, 8), initial=starts)
    np.testing.assert_array_equal(found, truth[starts].argsort()[truth])   # cluster j is the group of starts[j]


# --- clustered attention ------------------------------------------------------------------------------

def test_hand_computed_one_cluster():
    # Centroid of q = 0 and 2 is 1; scores 0 and ln 3 → weights 1/4, 3/4 → both outputs 0.25·4 + 0.75·8 = 7.
    q, k, v = np.array([[0.0], [2.0]]), np.array([[0.0], [np.log(3.0)]]), np.array([[4.0], [8.0]])
    out, A = clustered_attention(q, k, v, assignment=[0, 0], scale=1.0, return_weights=True)
    np.testing.assert_allclose(A, [[0.25, 0.75], [0.25, 0.75]], rtol=1e-15)
    np.testing.assert_allclose(out, [[7.0], [7.0]], rtol=1e-15)


def test_every_member_takes_its_centroids_softmax_attention(rng):
    q, k, v = _qkv(rng, batch=(2,))
    assignment = np.array([2, 0, 2, 1, 0, 0, 2, 1, 4])             # cluster 3 empty
    out, A = clustered_attention(q, k, v, assignment=assignment, return_weights=True)
    for j in (0, 1, 2, 4):
        members = assignment == j
        centroid = q[:, members].mean(axis=1, keepdims=True)        # (2, 1, d)
        c_out, c_A = scaled_dot_product_attention(centroid, k, v, return_weights=True)
        np.testing.assert_allclose(out[:, members], np.broadcast_to(c_out, out[:, members].shape), **TIGHT)
        np.testing.assert_allclose(A[:, members], np.broadcast_to(c_A, A[:, members].shape), **TIGHT)
    np.testing.assert_allclose(query_centroids(q, assignment)[:, 3], 0.0, **TIGHT)


@pytest.mark.parametrize("batch", [(), (2, 3)])
def test_every_query_alone_is_softmax_attention(rng, batch):
    q, k, v = _qkv(rng, batch=batch)
    exact, A = scaled_dot_product_attention(q, k, v, return_weights=True)
    labels = rng.permutation(9)                                    # any labelling of singleton clusters
    out, weights = clustered_attention(q, k, v, assignment=labels, return_weights=True)
    np.testing.assert_allclose(out, exact, **TIGHT)
    np.testing.assert_allclose(weights, A, **TIGHT)
    assert len({tuple(h) for h in hash_queries(q.reshape(-1, 9, 4)[0], draw_hash_planes(1, 63, 4)).tolist()}) == 9
    drawn = clustered_attention(q.reshape(-1, 9, 4)[0], k.reshape(-1, 7, 4)[0], v.reshape(-1, 7, 3)[0],
                                num_clusters=9, rng=1)             # C = n from rng: distinct codes, each alone
    np.testing.assert_allclose(drawn, exact.reshape(-1, 9, 3)[0], **TIGHT)


def test_queries_shared_across_heads_broadcast(rng):
    q, _, _ = _qkv(rng)
    _, k, v = _qkv(rng, batch=(3,))
    out = clustered_attention(q, k, v, num_clusters=3, rng=4)
    improved = improved_clustered_attention(q, k, v, num_clusters=3, top_k=2, rng=4)
    for h in range(3):
        np.testing.assert_allclose(out[h], clustered_attention(q, k[h], v[h], num_clusters=3, rng=4), **TIGHT)
        np.testing.assert_allclose(improved[h], improved_clustered_attention(q, k[h], v[h], num_clusters=3, top_k=2,
                                                                             rng=4), **TIGHT)


def test_blocked_centroids_equal_the_equation(rng):
    q, k, v = _qkv(rng, n=40, m=33, batch=(2,))
    np.testing.assert_allclose(clustered_attention(q, k, v, num_clusters=5, rng=0, method="blocked"),
                               clustered_attention(q, k, v, num_clusters=5, rng=0, method="equation"),
                               rtol=1e-13, atol=1e-13)


# --- improved clustered attention ---------------------------------------------------------------------

@pytest.mark.parametrize("top_k", [7, 50])
def test_improved_with_every_key_recomputed_is_softmax_attention(rng, top_k):
    q, k, v = _qkv(rng, batch=(2,))
    exact, A = scaled_dot_product_attention(q, k, v, return_weights=True)
    out, weights = improved_clustered_attention(q, k, v, num_clusters=2, top_k=top_k, rng=3, return_weights=True)
    np.testing.assert_allclose(out, exact, **TIGHT)
    np.testing.assert_allclose(weights, A, **TIGHT)


def test_improved_without_top_keys_is_clustered_attention(rng):
    q, k, v = _qkv(rng, batch=(2,))
    out, A = improved_clustered_attention(q, k, v, num_clusters=3, top_k=0, rng=3, return_weights=True)
    c_out, c_A = clustered_attention(q, k, v, num_clusters=3, rng=3, return_weights=True)
    np.testing.assert_allclose(out, c_out, **TIGHT)
    np.testing.assert_array_equal(A, c_A)


def test_improved_weights_follow_the_paper(rng):
    """Off the top-k keys: the centroid's weights; on them: the query's own softmax scaled to the centroid's mass."""
    q, k, v = _qkv(rng, n=12, m=10)
    assignment = rng.integers(0, 3, size=12)
    top_k, scale = 3, 0.5
    out, A_t = improved_clustered_attention(q, k, v, assignment=assignment, top_k=top_k, scale=scale,
                                            return_weights=True)
    _, A_c = clustered_attention(q, k, v, assignment=assignment, scale=scale, return_weights=True)
    np.testing.assert_allclose(out, A_t @ v, **TIGHT)
    for i in range(12):
        T = np.argsort(-A_c[i], kind="stable")[:top_k]              # the centroid's largest weights
        rest = np.setdiff1d(np.arange(10), T)
        np.testing.assert_array_equal(A_t[i, rest], A_c[i, rest])
        own = _softmax_rows(scale * q[i] @ k[T].T)
        np.testing.assert_allclose(A_t[i, T], A_c[i, T].sum() * own, **TIGHT)


def test_improved_rows_are_never_farther_from_softmax_than_clustered_rows(rng):
    q, k, v = _qkv(rng, n=30, m=20, batch=(3,))
    _, A = scaled_dot_product_attention(q, k, v, return_weights=True)
    _, A_c = clustered_attention(q, k, v, num_clusters=4, rng=6, return_weights=True)
    clustered = np.abs(A_c - A).sum(axis=-1)
    for top_k in (2, 4, 10):
        _, A_t = improved_clustered_attention(q, k, v, num_clusters=4, top_k=top_k, rng=6, return_weights=True)
        improved = np.abs(A_t - A).sum(axis=-1)
        assert np.all(improved <= clustered + 1e-15), top_k        # rounding of the row sums only
        assert np.any(improved < clustered - 1e-3), top_k
    # One key: the query's softmax over it is 1, so it keeps the centroid's weight m̂ = A^c: clustered attention.
    _, A_1 = improved_clustered_attention(q, k, v, num_clusters=4, top_k=1, rng=6, return_weights=True)
    np.testing.assert_allclose(A_1, A_c, **TIGHT)


def test_equal_centroid_scores_take_the_lower_key_first():
    # Keys 1 and 3 are equal, so their centroid weights tie; the top-1 key is 1, recomputed (the one member's own
    # softmax over one key is 1, times the mass m̂), while key 3 keeps the centroid's weight.
    q = np.array([[1.0, 0.0]])
    k = np.array([[0.0, 1.0], [2.0, 0.0], [0.0, -1.0], [2.0, 0.0]])
    v = np.eye(4)
    _, A = improved_clustered_attention(q, k, v, assignment=[0], top_k=1, scale=1.0, return_weights=True)
    e = np.exp([0.0, 2.0, 0.0, 2.0])
    np.testing.assert_allclose(A[0], e / e.sum(), rtol=1e-15)      # one member: its centroid is itself
    _, A2 = improved_clustered_attention(np.array([[1.0, 0.0], [3.0, 0.0]]), k, v, assignment=[0, 0], top_k=1,
                                         scale=1.0, return_weights=True)
    c = np.exp([0.0, 4.0, 0.0, 4.0])                               # centroid (2, 0): scores 0, 4, 0, 4
    np.testing.assert_allclose(A2[:, 3], c[3] / c.sum(), rtol=1e-15)
    np.testing.assert_allclose(A2[:, 1], c[1] / c.sum(), rtol=1e-15)   # one recomputed key carries the whole mass


# --- no causal form, bad input, edge sizes, memory ----------------------------------------------------

@pytest.mark.parametrize("fn", MECHANISMS, ids=lambda f: f.__name__)
def test_causal_is_refused_with_the_reason(rng, fn):
    q, k, v = _qkv(rng)
    with pytest.raises(ValueError, match="has no causal form"):
        fn(q, k, v, num_clusters=2, rng=0, causal=True)
    for mech in ("clustered", "improved_clustered"):
        with pytest.raises(ValueError, match=r"takes causal in \(False,\)"):
            registry.get(mech).apply(q, k, v, rng=0, causal=True)


@pytest.mark.parametrize("fn", MECHANISMS, ids=lambda f: f.__name__)
def test_bad_input_is_named(rng, fn):
    q, k, v = _qkv(rng)
    cases = [
        (TypeError, "assignment must be an array of ints", {"assignment": np.zeros(9)}),
        (ValueError, r"assignment must have shape \(\.\.\., n\) with n=9", {"assignment": np.zeros(8, int)}),
        (ValueError, r"assignment must hold clusters in \[0, num_clusters=2\)",
         {"assignment": np.arange(9) % 3, "num_clusters": 2}),
        (ValueError, "initial must hold distinct query indices", {"initial": [1, 1], "rng": 0}),
        (ValueError, r"initial must hold query indices in \[0, n=9\)", {"initial": [0, 9], "rng": 0}),
        (ValueError, r"planes must have shape \(B, d \+ 1\) = \(B, 5\)", {"planes": np.ones((3, 4)), "initial": [0]}),
        (ValueError, r"num_clusters=3 \(capped at n=9\) but initial names 2 queries",
         {"num_clusters": 3, "initial": [0, 1], "rng": 0}),
        (ValueError, "bits=4 but planes has 3 rows", {"bits": 4, "planes": np.ones((3, 5)), "initial": [0]}),
        (ValueError, fr"{fn.__name__} draws the hash planes from rng: pass rng= \(or planes=\)", {"num_clusters": 2}),
        (ValueError, fr"{fn.__name__} draws the initial centroids from rng: pass rng= \(or initial=\)",
         {"planes": np.ones((3, 5))}),
        (ValueError, "assignment replaces the clustering", {"assignment": np.zeros(9, int), "initial": [0]}),
        (ValueError, "iterations must be a positive int", {"num_clusters": 2, "rng": 0, "iterations": 0}),
        (TypeError, "hash_bias must be True or False", {"num_clusters": 2, "rng": 0, "hash_bias": 1}),
    ]
    if fn is improved_clustered_attention:
        cases.append((ValueError, "top_k must be a non-negative int", {"num_clusters": 2, "rng": 0, "top_k": -1}))
    for error, message, options in cases:
        with pytest.raises(error, match=message):
            fn(q, k, v, **options)
    with pytest.raises(ValueError, match="q has d_k=4 but k has d_k=3"):
        fn(q, k[:, :3], v, num_clusters=2, rng=0)
    with pytest.raises(TypeError, match="hashes must be a boolean array"):
        hamming_kmeans(np.zeros((4, 3)), [0])
    with pytest.raises(ValueError, match="cannot draw num_clusters=5 distinct queries"):
        draw_initial_centroids(0, 4, 5)


@pytest.mark.parametrize("fn", MECHANISMS, ids=lambda f: f.__name__)
def test_three_clusters_by_default_and_rng_unused_where_nothing_is_drawn(rng, fn):
    """C = 3 unless num_clusters, initial or assignment gives it; rng is ignored (a registry passes it) with
    assignment, or with both draws given."""
    q, k, v = _qkv(rng)
    np.testing.assert_array_equal(fn(q, k, v, rng=4), fn(q, k, v, num_clusters=3, rng=4))
    assert not np.array_equal(fn(q, k, v, rng=4), fn(q, k, v, num_clusters=2, rng=4))
    a = np.arange(9) % 4
    np.testing.assert_array_equal(fn(q, k, v, assignment=a, rng=0), fn(q, k, v, assignment=a))
    planes, initial = draw_hash_planes(1, 8, 4), [0, 5]
    np.testing.assert_array_equal(fn(q, k, v, planes=planes, initial=initial, rng=0),
                                  fn(q, k, v, planes=planes, initial=initial))


def test_method_none_is_auto_with_a_warning(rng):
    q, k, v = _qkv(rng)
    with pytest.warns(DeprecationWarning, match='method=None is method="auto"'):
        old = clustered_attention(q, k, v, rng=2, method=None)
    np.testing.assert_array_equal(old, clustered_attention(q, k, v, rng=2, method="auto"))


@pytest.mark.parametrize("mech", ["clustered", "improved_clustered"])
def test_edge_sizes_follow_the_one_rule(rng, mech):
    apply = registry.get(mech).apply
    q, k, v = _qkv(rng, batch=(2,))
    assert apply(q[:, :0], k, v, rng=0, return_weights=True).weights.shape == (2, 0, 7)
    assert apply(q[:, :0], k, v, rng=0).output.shape == (2, 0, 3)
    no_key = apply(q, k[:, :0], v[:, :0], rng=0, return_weights=True)
    np.testing.assert_array_equal(no_key.output, np.zeros((2, 9, 3)))
    assert no_key.weights.shape == (2, 9, 0)
    assert apply(q, k, v[..., :0], rng=0).output.shape == (2, 9, 0)
    assert apply(q[:0], k[:0], v[:0], rng=0).output.shape == (0, 9, 3)
    with pytest.raises(ValueError, match="d_k=0"):
        apply(q[..., :0], k[..., :0], v, rng=0)
    uniform = apply(q[..., :0], k[..., :0], v, rng=0, scale=1.0, return_weights=True)
    np.testing.assert_allclose(uniform.weights, 1 / 7, **TIGHT)


@pytest.mark.parametrize("fn", MECHANISMS, ids=lambda f: f.__name__)
def test_nothing_n_by_m_without_weights(rng, fn):
    """n = m = 2048 queries and keys: the n × m weights would take 32 MiB; the run peaks far below, and asking for
    them under a budget below that refuses before allocating."""
    n = m = 2048
    q, k, v = _qkv(rng, n=n, m=m, d=16, d_v=16)
    options = {"num_clusters": 16, "rng": 0} | ({"top_k": 8} if fn is improved_clustered_attention else {})
    tracemalloc.start()
    try:
        out = fn(q, k, v, **options)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert out.shape == (n, 16)
    assert peak < n * m * 8 / 4, f"peak {peak / 2**20:.1f} MiB"     # the weights' size is 32 MiB
    with temporary_memory_budget(n * m * 8 // 2), pytest.raises(MemoryBudgetError, match="the weights"):
        fn(q, k, v, return_weights=True, **options)


def test_kmeans_refuses_distances_beyond_the_budget(rng):
    hashes = rng.random((1000, 4)) < 0.5
    with temporary_memory_budget(1000 * 50 * 8 - 1), pytest.raises(MemoryBudgetError, match="Hamming distances"):
        hamming_kmeans(hashes, np.arange(50))
    assert math.prod(hamming_kmeans(hashes, np.arange(50)).shape) == 1000
