"""Routing attention (Roy et al. 2021): the routing, the online k-means update, the two routings, both methods,
the exact limit, the rule for non-finite tokens and what causality does and does not promise."""
from __future__ import annotations

import math

import numpy as np
import pytest

from refattn import registry, scaled_dot_product_attention
from refattn.sparse import draw_centroids, nearest_centroid, routing_attention, update_centroids

from .naive import naive_centroid_distances, naive_update_centroids, routing

TIGHT = {"rtol": 1e-12, "atol": 1e-12}
E1, E2 = [1.0, 0.0], [0.0, 1.0]


def _qkv(rng, n, m, d=4, d_v=3, batch=()):
    return (rng.standard_normal((*batch, n, d)), rng.standard_normal((*batch, m, d)),
            rng.standard_normal((*batch, m, d_v)))


def _loop_clusters(x, centroids):
    """Nearest centroid by the naive distances ‖x̂ − μ_c‖² (ties to the lower index), −1 without a direction."""
    return [-1 if dist is None else min(range(len(centroids)), key=lambda c, dist=dist: (dist[c], c))
            for dist in naive_centroid_distances(x, centroids)]


# --- the draw and the routing ----------------------------------------------------------------------------------

def test_draw_centroids_is_the_normalised_gaussian_draw():
    G = np.random.default_rng(5).standard_normal((6, 3))
    np.testing.assert_array_equal(draw_centroids(5, 6, 3), G / np.linalg.norm(G, axis=1, keepdims=True))
    assert draw_centroids(5, 2, 0).shape == (2, 0)


def test_nearest_centroid_equals_the_loop(rng):
    x = rng.standard_normal((40, 5))
    x[3] = 0.0                                                     # direction 0: nearest is the shortest centroid
    x[7, 2], x[11, 0] = np.nan, -np.inf                            # no direction: no cluster
    x[13] *= 1e200                                                 # a finite row whose plain norm would overflow
    centroids = rng.standard_normal((6, 5))
    got = nearest_centroid(x, centroids)
    expected = _loop_clusters(np.where(np.arange(40)[:, None] == 13, x / 1e200, x), centroids)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, expected)
    assert got[7] == got[11] == -1 and got[3] == np.argmin(np.sum(centroids**2, axis=1))


def test_nearest_centroid_broadcasts_one_set_of_centroids_per_head(rng):
    x, centroids = rng.standard_normal((2, 3, 9, 4)), rng.standard_normal((3, 5, 4))
    got = nearest_centroid(x, centroids)
    assert got.shape == (2, 3, 9)
    for b in range(2):
        for h in range(3):
            np.testing.assert_array_equal(got[b, h], _loop_clusters(x[b, h], centroids[h]))


# --- the online k-means update -----------------------------------------------------------------------------------

@pytest.mark.parametrize("decay", [0.999, 0.5, 0.0, 1.0])
def test_update_centroids_equals_the_loop(rng, decay):
    centroids = rng.standard_normal((4, 3))
    q, k = rng.standard_normal((9, 3)), rng.standard_normal((6, 3))
    q[2, 1], k[4, 0] = np.nan, np.inf                              # in no cluster: they add nothing
    before = (centroids.copy(), q.copy(), k.copy())
    new = update_centroids(centroids, q, k, decay=decay)
    np.testing.assert_allclose(new, naive_update_centroids(centroids, q, k, decay), **TIGHT)
    for x, x0 in zip((centroids, q, k), before, strict=True):    # a pure function: the inputs are untouched
        np.testing.assert_array_equal(x, x0)


def test_update_sums_over_the_batch_that_shares_the_centroids(rng):
    q, k = rng.standard_normal((2, 3, 7, 4)), rng.standard_normal((2, 3, 5, 4))
    shared = rng.standard_normal((6, 4))
    expected = naive_update_centroids(shared, q.reshape(-1, 4), k.reshape(-1, 4), 0.9)   # Σ over every token
    np.testing.assert_allclose(update_centroids(shared, q, k, decay=0.9), expected, **TIGHT)
    per_head = rng.standard_normal((3, 6, 4))                      # one set per head: Σ over the batch axis only
    got = update_centroids(per_head, q, k, decay=0.9)
    for h in range(3):
        moved = naive_update_centroids(per_head[h], q[:, h].reshape(-1, 4), k[:, h].reshape(-1, 4), 0.9)
        np.testing.assert_allclose(got[h], moved, **TIGHT)


def test_update_hand_computed():
    """Query (2, 0) → μ_0, keys (0, 3) and (0, 1) → μ_1; λ = 1/2: μ_0 = ½e₁ + ¼e₁, μ_1 = ½e₂ + ¼(e₂ + e₂)."""
    new = update_centroids([E1, E2], [[2.0, 0.0]], [[0.0, 3.0], [0.0, 1.0]], decay=0.5)
    np.testing.assert_allclose(new, [[0.75, 0.0], [0.0, 1.0]], rtol=1e-15)


# --- attention -------------------------------------------------------------------------------------------------

def test_routing_hand_computed():
    """Scale 1. Routing by direction: q = (1, 0), k0 = (½, 0), k2 = (½ + ln 3, 0) → e₁; q = (0, 1), (−1, 0), k1 = (0, 2)
    → e₂ ((−1, 0) is √2 from e₂ and 2 from e₁). Query 0 sees keys 0 and 2, scores ½ and ½ + ln 3: weights ¼, ¾,
    output ¼·1 + ¾·4 = 13/4; queries 1 and 2 see key 1 alone: output 2. Causal: query 0 sees key 0 alone."""
    q = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    k = np.array([[0.5, 0.0], [0.0, 2.0], [0.5 + math.log(3.0), 0.0]])
    v = np.array([[1.0], [2.0], [4.0]])
    for method in ("equation", "csr"):
        out, A = routing_attention(q, k, v, centroids=[E1, E2], scale=1.0, method=method, return_weights=True)
        np.testing.assert_allclose(A, [[0.25, 0.0, 0.75], [0.0, 1.0, 0.0], [0.0, 1.0, 0.0]], rtol=1e-15, atol=1e-16)
        np.testing.assert_allclose(out, [[3.25], [2.0], [2.0]], rtol=1e-15)
        causal = routing_attention(q, k, v, centroids=[E1, E2], scale=1.0, method=method, causal=True)
        np.testing.assert_allclose(causal, [[1.0], [2.0], [2.0]], rtol=1e-15)


@pytest.mark.parametrize("balanced", [False, True])
@pytest.mark.parametrize("causal", [False, True, "bottom-right"])
@pytest.mark.parametrize("fully_masked", ["zero", "nan", "uniform"])
def test_csr_equals_the_dense_definition(rng, balanced, causal, fully_masked):
    """n != m, a batch of 2 × 3 heads with one set of centroids per head, and some queries in no cluster."""
    q, k, v = _qkv(rng, 11, 8, batch=(2, 3))
    q[0, 1, 4] = np.nan                                            # a query without a direction
    centroids = rng.standard_normal((3, 4, 4))
    options = {"centroids": centroids, "balanced": balanced, "causal": causal, "fully_masked": fully_masked,
               "return_weights": True}
    out, A = routing_attention(q, k, v, method="equation", **options)
    out_csr, A_csr = routing_attention(q, k, v, method="csr", **options)
    np.testing.assert_allclose(out_csr, out, **TIGHT)
    np.testing.assert_allclose(A_csr, A, **TIGHT)
    assert np.isnan(out[0, 1, 4]).all() == (fully_masked == "nan")
    auto, A_auto = routing_attention(q, k, v, **options)           # "auto" is the csr path, weights or not
    np.testing.assert_array_equal(auto, out_csr)
    np.testing.assert_array_equal(A_auto, A_csr)
    plain = routing_attention(q, k, v, centroids=centroids, balanced=balanced, causal=causal, fully_masked=fully_masked)
    np.testing.assert_array_equal(plain, out_csr)


@pytest.mark.parametrize("causal", [False, True, "bottom-right"])
def test_the_weights_are_the_same_cluster_pairs(rng, causal):
    q, k, v = _qkv(rng, 13, 13)
    centroids = draw_centroids(4, 3, 4)
    c_q, c_k = nearest_centroid(q, centroids), nearest_centroid(k, centroids)
    assert len(set(c_q.tolist())) == 3 and len(set(c_k.tolist())) == 3   # every cluster is used here
    result = registry.get("routing").apply(q, k, v, causal=causal, centroids=centroids, return_weights=True)
    allowed = (c_q[:, None] == c_k[None, :]) & (np.arange(13)[None, :] <= np.arange(13)[:, None] if causal else True)
    np.testing.assert_array_equal(result.allowed, allowed)
    np.testing.assert_array_equal(result.weights > 0, allowed)
    np.testing.assert_allclose(result.weights.sum(axis=1)[allowed.any(axis=1)], 1.0, rtol=0, atol=1e-15)


@pytest.mark.parametrize("balanced", [False, True])
@pytest.mark.parametrize("causal", [False, True, "bottom-right"])
def test_one_cluster_is_softmax_attention(rng, balanced, causal):
    q, k, v = _qkv(rng, 9, 9 if causal is True else 6, batch=(2,))
    q[0, 2] = 0.0                                                  # the zero vector is routed too
    for method in ("equation", "csr"):
        out, A = routing_attention(q, k, v, num_clusters=1, rng=3, balanced=balanced, causal=causal, method=method,
                                   return_weights=True)
        exact, A_exact = scaled_dot_product_attention(q, k, v, causal=causal, return_weights=True)
        np.testing.assert_allclose(out, exact, **TIGHT)
        np.testing.assert_allclose(A, A_exact, **TIGHT)


def test_per_head_centroids_equal_one_call_per_head(rng):
    q, k, v = _qkv(rng, 7, 9, batch=(2, 3))
    centroids = rng.standard_normal((3, 2, 4))
    out = routing_attention(q, k, v, centroids=centroids)
    for h in range(3):
        np.testing.assert_allclose(out[:, h], routing_attention(q[:, h], k[:, h], v[:, h], centroids=centroids[h]),
                                   **TIGHT)


# --- non-finite tokens -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("balanced", [False, True])
@pytest.mark.parametrize("poison", [np.nan, np.inf])
def test_a_non_finite_key_joins_no_cluster(rng, balanced, poison):
    """Key 4 with a NaN or Inf is in no cluster: the output is the routing attention over the other keys."""
    q, k, v = _qkv(rng, 9, 8)
    centroids = draw_centroids(2, 3, 4)
    k[4, 1], v[4] = poison, poison
    for method in ("equation", "csr"):
        got = routing_attention(q, k, v, centroids=centroids, balanced=balanced, method=method)
        keep = np.arange(8) != 4
        if not balanced:                                           # the other keys route as before
            expected = routing_attention(q, k[keep], v[keep], centroids=centroids, method=method)
            np.testing.assert_allclose(got, expected, **TIGHT)
        assert np.all(np.isfinite(got))


def test_a_non_finite_query_joins_no_cluster_and_follows_fully_masked(rng):
    q, k, v = _qkv(rng, 6, 8)
    q[2, 0] = -np.inf
    for method in ("equation", "csr"):
        clean = routing_attention(np.delete(q, 2, axis=0), k, v, num_clusters=2, rng=0, method=method)
        zero = routing_attention(q, k, v, num_clusters=2, rng=0, method=method)
        np.testing.assert_array_equal(zero[2], 0.0)
        np.testing.assert_allclose(np.delete(zero, 2, axis=0), clean, **TIGHT)
        nan = routing_attention(q, k, v, num_clusters=2, rng=0, method=method, fully_masked="nan")
        assert np.isnan(nan[2]).all() and np.isfinite(np.delete(nan, 2, axis=0)).all()


# --- causality --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("method", ["equation", "csr"])
def test_nearest_centroid_routing_is_future_independent(rng, method):
    """Output i depends on nothing after i: change every query, key and value after position 5, bit for bit."""
    q, k, v = _qkv(rng, 12, 12)
    centroids = draw_centroids(1, 3, 4)
    out = routing_attention(q, k, v, centroids=centroids, causal=True, method=method)
    q2, k2, v2 = q.copy(), k.copy(), v.copy()
    q2[6:], k2[6:], v2[6:] = _qkv(rng, 6, 6)
    out2 = routing_attention(q2, k2, v2, centroids=centroids, causal=True, method=method)
    np.testing.assert_array_equal(out2[:6], out[:6])


def test_balanced_causal_routing_looks_at_the_future():
    """Balanced windows of w = 2 around e₁ and e₂. Query 0 (on e₁) sees key 0 while the keys after it are far from
    e₁; when keys 2 and 3 turn towards e₁ they take e₁'s window from key 0, and query 0, which may not see them, is
    left without a key: a past output changed with the future. The future keys never carry weight."""
    q = np.array([E1, E2, E2, E2])
    k = np.array([[1.0, 0.5], E2, [0.1, 1.0], E2])
    v = np.array([[1.0], [2.0], [3.0], [4.0]])
    later = k.copy()
    later[2], later[3] = [1.0, 0.1], E1
    for method in ("equation", "csr"):
        options = {"centroids": [E1, E2], "balanced": True, "causal": True, "method": method, "return_weights": True}
        (before, A), (after, A_after) = (routing_attention(q, keys, v, **options) for keys in (k, later))
        np.testing.assert_array_equal(before[0], [1.0])           # key 0 in e₁'s window with query 0
        np.testing.assert_array_equal(after[0], [0.0])            # e₁'s window is keys 2, 3: query 0 sees none
        for weights in (A, A_after):
            np.testing.assert_array_equal(np.triu(weights, 1), 0.0)


# --- bad input ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("options", "error", "match"), [
    ({}, ValueError, r"^routing draws its centroids from rng: pass rng= \(or centroids=\)$"),
    ({"num_clusters": 2}, ValueError, r"^routing draws its centroids from rng: pass rng= \(or centroids=\)$"),
    ({"rng": 0, "num_clusters": 0}, ValueError, "num_clusters must be a positive int, got 0"),
    ({"centroids": [E1, E2], "num_clusters": 3}, ValueError, r"num_clusters=3 but centroids has 2 rows \(shape"),
    ({"centroids": [[1.0, 0.0, 0.0]]}, ValueError, r"centroids has d=3 columns but q and k have d=2"),
    ({"centroids": [E1, [np.nan, 0.0]]}, ValueError, r"centroids must be finite, got a NaN or Inf in shape \(2, 2\)"),
    ({"centroids": np.zeros((0, 2))}, ValueError, r"centroids must have at least one row .* shape \(0, 2\)"),
    ({"centroids": [1.0, 0.0]}, ValueError, r"centroids must have shape \(k, d\) or .*, got shape \(2,\)"),
    ({"centroids": [[1, 0]]}, TypeError, "centroids must be a real floating-point array, got dtype int64"),
    ({"centroids": [E1, E2], "balanced": 1}, TypeError, "balanced must be True or False, got 1"),
    ({"centroids": [E1, E2], "method": "dense"}, ValueError, "method must be one of"),
    ({"centroids": np.ones((3, 2, 2))}, ValueError, r"leading \(batch\) dimensions do not broadcast: .* centroids"),
])
def test_bad_options_are_named(options, error, match):
    q, k, v = np.ones((2, 5, 2)), np.ones((2, 4, 2)), np.ones((2, 4, 1))
    with pytest.raises(error, match=match):
        routing_attention(q, k, v, **options)


def test_update_refuses_bad_decay_and_mismatched_widths():
    with pytest.raises(ValueError, match=r"decay must be a real number in \[0, 1\], got 1.5"):
        update_centroids([E1], [E1], [E1], decay=1.5)
    with pytest.raises(ValueError, match=r"q has d=2 but k has d=3"):
        update_centroids([E1], [E1], [[1.0, 0.0, 0.0]])
    with pytest.raises(ValueError, match=r"centroids has d=2 columns but q and k have d=3"):
        update_centroids([E1], [[1.0, 0.0, 0.0]], [[1.0, 0.0, 0.0]])


def test_given_centroids_leave_rng_unused_and_the_default_count_is_ceil_sqrt_m(rng):
    q, k, v = rng.standard_normal((5, 2)), rng.standard_normal((4, 2)), rng.standard_normal((4, 1))
    np.testing.assert_array_equal(routing_attention(q, k, v, rng=0, centroids=[E1, E2]),
                                  routing_attention(q, k, v, centroids=[E1, E2]))
    np.testing.assert_array_equal(routing_attention(q, k, v, rng=3),
                                  routing_attention(q, k, v, centroids=draw_centroids(3, 2, 2)))   # ⌈√4⌉ = 2


def test_the_registry_entry_draws_ceil_sqrt_m_centroids_and_returns_them():
    rng = np.random.default_rng(0)
    for m, expected in ((1, 1), (4, 2), (5, 3), (16, 4), (17, 5)):
        q, k, v = _qkv(rng, 3, m)
        drawn = registry.get("routing").apply(q, k, v, rng=7, return_draws=True).draws["centroids"]
        np.testing.assert_array_equal(drawn, draw_centroids(7, expected, 4))
    assert registry.get("routing").apply(q, k, v, rng=7, num_clusters=2, return_draws=True).draws[
        "centroids"].shape == (2, 4)


def test_the_naive_twin_sees_real_clusters(rng):
    """The naive cases route into several clusters (not one cluster, which would be plain softmax)."""
    q, k, v = _qkv(rng, 5, 7)
    centroids = rng.standard_normal((3, 4))
    out = routing(q, k, v, False, centroids)
    assert len(set(_loop_clusters(k, centroids))) > 1
    assert not np.allclose(out, scaled_dot_product_attention(q, k, v))
