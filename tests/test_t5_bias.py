"""T5's relative position buckets: the bucket of every distance in −300 … 300 against a literal table derived from
the official code, bidirectional and causal; the bias gathered from the table; a zero table is sdpa; heads; errors."""
from __future__ import annotations

import numpy as np
import pytest

from refattn import registry, scaled_dot_product_attention
from refattn.positional import (
    T5BiasParams,
    init_t5_bias,
    relative_positions,
    t5_bias,
    t5_bias_attention,
    t5_relative_position_bucket,
)

from .naive import naive_t5_bucket

TIGHT = {"rtol": 1e-12, "atol": 1e-12}
APPLY = registry.get("t5_bias").apply

# The buckets of mesh_tensorflow's `_relative_position_bucket` (mesh_tensorflow/transformer/transformer_layers.py,
# also mesh_tensorflow/bert/bert.py) at its defaults num_buckets=32, max_distance=128, for r = memory position −
# query position, worked out by hand from the function's arithmetic:
#   n = −r. Bidirectional: B = 32 // 2 = 16, +16 when n < 0 (r > 0), n = |r|. Causal: B = 32, n = max(n, 0).
#   e = B // 2 exact buckets (n < e → bucket n); n ≥ e → min(e + int(log(n/e) / log(128/e) · (B − e)), B − 1).
#   Bidirectional, e = 8: e + ⌊2·log2(n/8)⌋; bucket 8 + k holds n ∈ [8·2^(k/2), 8·2^((k+1)/2)), bounds 8, 11.31,
#     16, 22.63, 32, 45.25, 64, 90.51, 128 (k = 0 … 8; k ≥ 8 is capped at 15).
#   Causal, e = 16: e + ⌊(16/3)·log2(n/16)⌋; bucket 16 + k holds n ∈ [16·2^(3k/16), 16·2^(3(k+1)/16)), bounds 16,
#     18.22, 20.75, 23.63, 26.91, 30.64, 34.90, 39.74, 45.25, 51.53, 58.69, 66.83, 76.11, 86.67, 98.70, 112.40, 128.
# Written as runs "r from a to b (inclusive) → bucket c".
BIDIRECTIONAL_RUNS = [
    (-300, -91, 15), (-90, -64, 14), (-63, -46, 13), (-45, -32, 12), (-31, -23, 11), (-22, -16, 10), (-15, -12, 9),
    (-11, -8, 8), (-7, -7, 7), (-6, -6, 6), (-5, -5, 5), (-4, -4, 4), (-3, -3, 3), (-2, -2, 2), (-1, -1, 1),
    (0, 0, 0),
    (1, 1, 17), (2, 2, 18), (3, 3, 19), (4, 4, 20), (5, 5, 21), (6, 6, 22), (7, 7, 23), (8, 11, 24), (12, 15, 25),
    (16, 22, 26), (23, 31, 27), (32, 45, 28), (46, 63, 29), (64, 90, 30), (91, 300, 31),
]
CAUSAL_RUNS = [
    (-300, -113, 31), (-112, -99, 30), (-98, -87, 29), (-86, -77, 28), (-76, -67, 27), (-66, -59, 26),
    (-58, -52, 25), (-51, -46, 24), (-45, -40, 23), (-39, -35, 22), (-34, -31, 21), (-30, -27, 20), (-26, -24, 19),
    (-23, -21, 18), (-20, -19, 17), (-18, -16, 16), (-15, -15, 15), (-14, -14, 14), (-13, -13, 13), (-12, -12, 12),
    (-11, -11, 11), (-10, -10, 10), (-9, -9, 9), (-8, -8, 8), (-7, -7, 7), (-6, -6, 6), (-5, -5, 5), (-4, -4, 4),
    (-3, -3, 3), (-2, -2, 2), (-1, -1, 1), (0, 300, 0),
]


def _expand(runs):
    """{r: bucket} for every r the runs cover, checking they tile −300 … 300 once."""
    table = {}
    for a, b, bucket in runs:
        for r in range(a, b + 1):
            assert r not in table
            table[r] = bucket
    assert sorted(table) == list(range(-300, 301))
    return table


@pytest.mark.parametrize(("bidirectional", "runs"), [(True, BIDIRECTIONAL_RUNS), (False, CAUSAL_RUNS)])
def test_buckets_of_every_distance_match_the_official_table(bidirectional, runs):
    table = _expand(runs)
    r = np.arange(-300, 301)
    expected = np.array([table[x] for x in r])
    np.testing.assert_array_equal(t5_relative_position_bucket(r, bidirectional=bidirectional), expected)
    np.testing.assert_array_equal([naive_t5_bucket(int(x), bidirectional) for x in r], expected)


@pytest.mark.parametrize(("bidirectional", "num_buckets", "max_distance"),
                         [(True, 8, 6), (False, 6, 5), (True, 64, 300), (False, 10, 1000), (True, 4, 2)])
def test_other_settings_match_the_scalar_transcription(bidirectional, num_buckets, max_distance):
    r = np.arange(-1200, 1201)
    got = t5_relative_position_bucket(r, bidirectional=bidirectional, num_buckets=num_buckets,
                                      max_distance=max_distance)
    expected = [naive_t5_bucket(int(x), bidirectional, num_buckets, max_distance) for x in r]
    np.testing.assert_array_equal(got, expected)
    assert got.min() == 0 and got.max() == num_buckets - 1


def test_bias_gathers_the_table_at_the_bucket_of_j_minus_i():
    """n = 2 queries, m = 4 keys; bottom-right puts query i at i + 2. Table b[c] = 10·c + 1, so each entry names
    its bucket: bidirectional r = j − i ∈ {0, 1, 2, 3} → buckets 0, 17, 18, 19; causal r < 0 → |r|, r ≥ 0 → 0."""
    params = T5BiasParams(10.0 * np.arange(32) + 1)
    np.testing.assert_array_equal(relative_positions(2, 4), [[0, 1, 2, 3], [-1, 0, 1, 2]])
    np.testing.assert_array_equal(t5_bias(params, 2, 4), [[1, 171, 181, 191], [11, 1, 171, 181]])
    np.testing.assert_array_equal(t5_bias(params, 2, 4, causal="bottom-right"), [[21, 11, 1, 1], [31, 21, 11, 1]])
    np.testing.assert_array_equal(t5_bias(params, 2, 4, causal="bottom-right", bidirectional=True),
                                  [[21, 11, 1, 171], [31, 21, 11, 1]])


def test_causal_defaults_to_the_unidirectional_table(rng):
    params = T5BiasParams(rng.standard_normal((3, 32)))
    np.testing.assert_array_equal(t5_bias(params, 20, 20, causal=True),
                                  t5_bias(params, 20, 20, causal=True, bidirectional=False))
    np.testing.assert_array_equal(t5_bias(params, 20, 20), t5_bias(params, 20, 20, bidirectional=True))
    assert t5_bias(params, 5, 9).shape == (3, 5, 9)


@pytest.mark.parametrize("causal", [False, True, "bottom-right"])
@pytest.mark.parametrize(("n", "m"), [(5, 8), (8, 5)])
def test_zero_table_is_sdpa(rng, causal, n, m):
    q, k, v = rng.standard_normal((2, 3, n, 4)), rng.standard_normal((2, 3, m, 4)), rng.standard_normal((2, 3, m, 2))
    expected, A = scaled_dot_product_attention(q, k, v, causal=causal, return_weights=True)
    got = APPLY(q, k, v, causal=causal, params=T5BiasParams(np.zeros((3, 32))), return_weights=True)
    np.testing.assert_allclose(got.output, expected, **TIGHT)
    np.testing.assert_allclose(got.weights, A, **TIGHT)


@pytest.mark.parametrize("causal", [False, "bottom-right"])
def test_heads_each_read_their_row_and_equal_sdpa_with_the_bias_as_a_float_mask(rng, causal):
    n, m, h = 6, 9, 3
    q, k, v = rng.standard_normal((2, h, n, 4)), rng.standard_normal((2, h, m, 4)), rng.standard_normal((2, h, m, 5))
    params = init_t5_bias(rng, num_heads=h)
    out, A = t5_bias_attention(q, k, v, params=params, causal=causal, scale=0.8, return_weights=True)
    for head in range(h):
        one = T5BiasParams(params.table[head])
        np.testing.assert_allclose(out[:, head], t5_bias_attention(q[:, head], k[:, head], v[:, head], params=one,
                                                                   causal=causal, scale=0.8), **TIGHT)
        bias = t5_bias(one, n, m, causal=causal)
        expected = scaled_dot_product_attention(q[:, head], k[:, head], v[:, head], bias, causal=causal, scale=0.8,
                                                return_weights=True)[1]
        np.testing.assert_allclose(A[:, head], expected, **TIGHT)


def test_the_drawn_table_follows_tensorflow_glorot_uniform():
    params = init_t5_bias(np.random.default_rng(3), num_heads=8)
    bound = np.sqrt(6.0 / (8 + 32))
    assert params.table.shape == (8, 32)
    assert np.all(np.abs(params.table) <= bound) and np.abs(params.table).max() > 0.9 * bound
    assert init_t5_bias(0).table.shape == (32,)


def test_bad_input_is_named(rng):
    q = rng.standard_normal((2, 5, 4))
    with pytest.raises(TypeError, match="relative_position"):
        t5_relative_position_bucket([0.5, 1.0])
    with pytest.raises(ValueError, match="max_distance"):
        t5_relative_position_bucket([0, 1], num_buckets=32, max_distance=8)        # 8 exact buckets: max > 8
    with pytest.raises(ValueError, match="num_buckets"):
        t5_relative_position_bucket([0, 1], num_buckets=3)                          # no exact bucket
    with pytest.raises(TypeError, match="T5BiasParams"):
        t5_bias_attention(q, q, q, params=np.zeros(32))
    with pytest.raises(ValueError, match="table"):
        T5BiasParams(np.zeros((2, 3, 32)))
    with pytest.raises(ValueError, match=r"^t5_bias draws its table from rng: pass rng= \(or params=\)$"):
        t5_bias_attention(q, q, q)
    with pytest.raises(ValueError, match="num_heads"):
        APPLY(q, q, q, params=T5BiasParams(np.zeros(32)), num_heads=2)
    with pytest.raises(ValueError, match=r"params.table heads \(3,\)"):
        APPLY(q, q, q, params=T5BiasParams(np.zeros((3, 32))))                      # 2 heads in q, 3 in the table


def test_relative_positions_refuses_an_unknown_alignment():
    """A typo of "bottom-right" gave top-left positions silently."""
    for same in ("top-left", True, None):
        np.testing.assert_array_equal(relative_positions(2, 4, causal=same), relative_positions(2, 4))
    for typo in ("bottom_right", "Bottom-Right", 1):
        with pytest.raises(ValueError,
                           match=r"^causal must be one of \(None, False, True, 'top-left', 'bottom-right'\), got "):
            relative_positions(2, 4, typo)


def test_relative_positions_old_name_alignment_warns_and_gives_the_same_positions():
    with pytest.warns(DeprecationWarning, match=r"alignment= is renamed causal="):
        old = relative_positions(2, 4, alignment="bottom-right")
    np.testing.assert_array_equal(old, relative_positions(2, 4, causal="bottom-right"))
    np.testing.assert_array_equal(old, [[-2, -1, 0, 1], [-3, -2, -1, 0]])
