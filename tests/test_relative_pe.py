"""Shaw et al. 2018's relative position representations: zero embeddings are softmax attention, the clipped index
table, clipping means sharing the ±k vectors, a hand-computed case, heads, the causal form and bad input. The naive
loop of tests/naive.py and the registry-driven tests cover the rest."""
from __future__ import annotations

import math

import numpy as np
import pytest

from refattn import registry, scaled_dot_product_attention
from refattn.positional import RelativeEmbeddings, init_relative_embeddings, relative_attention, relative_index

from .naive import naive_relative_pe

TIGHT = {"rtol": 1e-12, "atol": 1e-12}
RECORD = registry.get("relative_pe")


def _qkv(rng, n=5, m=7, d=4, d_v=3, batch=()):
    return (rng.standard_normal((*batch, n, d)), rng.standard_normal((*batch, m, d)),
            rng.standard_normal((*batch, m, d_v)))


@pytest.mark.parametrize("causal", [False, True, "bottom-right"])
def test_zero_embeddings_are_softmax_attention(rng, causal):
    """a^K = a^V = 0: both terms vanish, sdpa exactly (weights too), with heads and n != m."""
    q, k, v = _qkv(rng, batch=(2, 3))
    zero = RelativeEmbeddings(np.zeros((5, 4)), np.zeros((5, 3)))
    out, A = relative_attention(q, k, v, zero, causal=causal, return_weights=True)
    ref, A_ref = scaled_dot_product_attention(q, k, v, causal=causal, return_weights=True)
    np.testing.assert_allclose(out, ref, **TIGHT)
    np.testing.assert_allclose(A, A_ref, **TIGHT)


def test_relative_index_is_the_clipped_distance_table():
    # idx_ij = clip(j − i, 2) + 2, written out by hand for 3 queries and 5 keys (query i at position i) ...
    np.testing.assert_array_equal(relative_index(3, 5, 2), [[2, 3, 4, 4, 4],
                                                            [1, 2, 3, 4, 4],
                                                            [0, 1, 2, 3, 4]])
    # ... and for the same queries as the last 3 of 5 positions (query i at i + 2)
    np.testing.assert_array_equal(relative_index(3, 5, 2, offset=2), [[0, 1, 2, 3, 4],
                                                                      [0, 0, 1, 2, 3],
                                                                      [0, 0, 0, 1, 2]])
    np.testing.assert_array_equal(relative_index(2, 3, 0), np.zeros((2, 3)))


def test_clipping_shares_the_vectors_of_plus_and_minus_k(rng):
    """Tables with k = 1 equal tables with k = 3 whose rows beyond ±1 repeat the rows of ±1: every distance
    beyond k uses w_{±k}."""
    q, k, v = _qkv(rng, n=6, m=7)
    small = init_relative_embeddings(rng, 1, 4, 3)
    extend = [0, 0, 0, 1, 2, 2, 2]                                 # rows −3 … 3 of the wide table
    wide = RelativeEmbeddings(small.keys[extend], small.values[extend])
    for causal in (False, True):
        np.testing.assert_allclose(relative_attention(q, k, v, wide, causal=causal),
                                   relative_attention(q, k, v, small, causal=causal), **TIGHT)
    other = RelativeEmbeddings(wide.keys.copy(), wide.values.copy())
    other.keys[0] += 1.0                                           # a distinct w^K_{−3}: now it matters
    assert np.abs(relative_attention(q, k, v, other) - relative_attention(q, k, v, wide)).max() > 1e-3


def test_hand_computed_case():
    # One query at position 0, two keys: distance 0 -> row 1 (w^K = ln 3), distance 1 -> row 2 (w^K = 0);
    # with k_j = 0 the scores are ln 3 and 0 -> weights 3/4, 1/4; values 0 + w^V: 3/4·20 + 1/4·30 = 22.5.
    emb = RelativeEmbeddings(np.array([[0.0], [math.log(3.0)], [0.0]]), np.array([[10.0], [20.0], [30.0]]))
    out, A = relative_attention([[1.0]], [[0.0], [0.0]], [[0.0], [0.0]], emb, return_weights=True)
    np.testing.assert_allclose(A, [[0.75, 0.25]], rtol=1e-15)
    np.testing.assert_allclose(out, [[22.5]], rtol=1e-15)


@pytest.mark.parametrize("causal", [False, True, "bottom-right"])
def test_heads_share_the_tables_and_each_equals_the_naive_loop(rng, causal):
    q, k, v = _qkv(rng, n=4, m=6, batch=(2,))
    emb = init_relative_embeddings(rng, 2, 4, 3)
    out = relative_attention(q, k, v, emb, causal=causal)
    for h in range(2):
        np.testing.assert_allclose(out[h], naive_relative_pe(q[h], k[h], v[h], causal, emb), **TIGHT)


def test_causal_rows_ignore_later_keys_and_their_embeddings(rng):
    """Row i never sees j > i: later keys and values (NaN) and the embeddings of positive distances change
    nothing (only distances j − i ≤ 0 are ever used)."""
    q, k, v = _qkv(rng, n=5, m=5)
    emb = init_relative_embeddings(rng, 2, 4, 3)
    out, A = relative_attention(q, k, v, emb, causal=True, return_weights=True)
    np.testing.assert_array_equal(A[np.triu_indices(5, 1)], 0.0)
    k2, v2 = k.copy(), v.copy()
    k2[3:], v2[3:] = np.nan, np.nan
    np.testing.assert_array_equal(relative_attention(q, k2, v2, emb, causal=True)[:3], out[:3])
    later = RelativeEmbeddings(emb.keys.copy(), emb.values.copy())
    later.keys[3:], later.values[3:] = 7.0, -7.0                   # rows of distances +1, +2
    np.testing.assert_allclose(relative_attention(q, k, v, later, causal=True), out, **TIGHT)


def test_apply_draws_glorot_tables_of_the_requested_size(rng):
    q, k, v = _qkv(rng)
    result = RECORD.apply(q, k, v, rng=0, max_distance=3, return_draws=True)
    emb = result.draws["embeddings"]
    assert emb.keys.shape == (7, 4) and emb.values.shape == (7, 3) and emb.max_distance == 3
    bound = math.sqrt(6.0 / (7 + 4))                               # Glorot uniform, fan_in 7, fan_out 4
    assert np.abs(emb.keys).max() <= bound
    np.testing.assert_allclose(result.output, relative_attention(q, k, v, emb), **TIGHT)


def test_bad_input(rng):
    q, k, v = _qkv(rng)
    with pytest.raises(ValueError, match=r"\(2k \+ 1, d_k\)"):
        RelativeEmbeddings(np.zeros((4, 4)), np.zeros((4, 3)))     # an even number of rows
    with pytest.raises(ValueError, match=r"\(2k \+ 1, d_k\)"):
        RelativeEmbeddings(np.zeros((5, 4)), np.zeros((3, 3)))
    with pytest.raises(ValueError, match="d_k=4"):
        relative_attention(q, k, v, RelativeEmbeddings(np.zeros((5, 2)), np.zeros((5, 3))))
    with pytest.raises(TypeError, match="embeddings must be RelativeEmbeddings"):
        relative_attention(q, k, v, np.zeros((5, 4)))
    with pytest.raises(ValueError, match="'zero'"):
        RECORD.apply(q, k, v, embeddings="ones")
    with pytest.raises(ValueError, match="max_distance"):
        RECORD.apply(q, k, v, rng=0, max_distance=-1)
    for call in (relative_attention, RECORD.apply):
        with pytest.raises(ValueError, match=r"^relative_pe draws its tables from rng: pass rng= \(or embeddings=\)$"):
            call(q, k, v)


def test_the_function_draws_and_zeroes_its_tables_as_the_record_does(rng):
    q, k, v = _qkv(rng)
    drawn = RECORD.apply(q, k, v, rng=4, max_distance=2, return_draws=True)
    np.testing.assert_array_equal(relative_attention(q, k, v, rng=4, max_distance=2), drawn.output)
    np.testing.assert_array_equal(relative_attention(q, k, v, drawn.draws["embeddings"]), drawn.output)
    np.testing.assert_allclose(relative_attention(q, k, v, "zero"), scaled_dot_product_attention(q, k, v), **TIGHT)
