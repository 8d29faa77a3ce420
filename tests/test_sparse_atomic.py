"""The five atomic patterns of the survey (§4.1.1, Fig. 4) against double loops over their set definitions."""
from __future__ import annotations

import numpy as np
import pytest

from refattn import sparse
from refattn.common import MemoryBudgetError
from refattn.sparse.band import band_pattern
from refattn.sparse.block_local import block_local_pattern
from refattn.sparse.dilated import dilated_pattern
from refattn.sparse.etc import etc_pattern
from refattn.sparse.global_ import global_pattern
from refattn.sparse.random import draw_random_keys, random_pattern
from refattn.sparse.strided import strided_pattern

SIZES = [(1, 1), (7, 7), (6, 10), (10, 6), (13, 13)]
CAUSAL = [False, True, "top-left", "bottom-right"]


def loop_mask(n, m, keep, causal=False):
    """The mask {(i, j) : keep(p, j), and j <= p if causal} by a double Python loop.

    p is query i's position: i, or i + m − n when the n queries are the last n of the m positions
    (bottom-right).
    """
    offset = m - n if causal == "bottom-right" else 0
    return np.array([[bool(keep(i + offset, j)) and (causal is False or j <= i + offset) for j in range(m)]
                     for i in range(n)]).reshape(n, m)


@pytest.mark.parametrize(("n", "m"), SIZES)
@pytest.mark.parametrize("w", [0, 1, 3, 20])
@pytest.mark.parametrize("causal", CAUSAL)
def test_band(n, m, w, causal):
    def keep(i, j):                                                # causal: 0 <= i − j <= w
        return abs(i - j) <= w
    np.testing.assert_array_equal(band_pattern(n, w, m=m, causal=causal).to_mask(), loop_mask(n, m, keep, causal))


@pytest.mark.parametrize(("n", "m"), SIZES)
def test_band_wider_than_the_sequence_is_full_attention(n, m):
    np.testing.assert_array_equal(band_pattern(n, max(n, m), m=m).to_mask(), np.ones((n, m), bool))


@pytest.mark.parametrize(("n", "m"), SIZES)
@pytest.mark.parametrize(("w", "d"), [(1, 2), (2, 3), (3, 1), (0, 4)])
@pytest.mark.parametrize("causal", CAUSAL)
def test_dilated(n, m, w, d, causal):
    def keep(i, j):
        return abs(i - j) <= w * d and (i - j) % d == 0
    np.testing.assert_array_equal(dilated_pattern(n, w, d, m=m, causal=causal).to_mask(),
                                  loop_mask(n, m, keep, causal))


@pytest.mark.parametrize(("n", "m"), SIZES)
@pytest.mark.parametrize("w", [0, 2, 5])
def test_dilation_one_is_the_band(n, m, w):
    assert dilated_pattern(n, w, 1, m=m) == band_pattern(n, w, m=m)
    for causal in CAUSAL[1:]:
        assert dilated_pattern(n, w, 1, m=m, causal=causal) == band_pattern(n, w, m=m, causal=causal)


@pytest.mark.parametrize(("n", "m"), SIZES)
@pytest.mark.parametrize("s", [1, 2, 3, 5])
@pytest.mark.parametrize("causal", CAUSAL)
def test_strided(n, m, s, causal):
    def keep(i, j):
        return (i - j) % s == 0
    np.testing.assert_array_equal(strided_pattern(n, s, m=m, causal=causal).to_mask(), loop_mask(n, m, keep, causal))


@pytest.mark.parametrize(("n", "m"), SIZES)
@pytest.mark.parametrize("b", [1, 2, 4, 7])
@pytest.mark.parametrize("causal", CAUSAL)
def test_block_local(n, m, b, causal):
    def keep(i, j):
        return i // b == j // b
    np.testing.assert_array_equal(block_local_pattern(n, b, m=m, causal=causal).to_mask(),
                                  loop_mask(n, m, keep, causal))


@pytest.mark.parametrize(("n", "m"), SIZES)
@pytest.mark.parametrize("G", [[0], [0, 3], [2, 5, 6]])
@pytest.mark.parametrize("causal", CAUSAL)
def test_global(n, m, G, causal):
    G = [g for g in G if g < max(n, m)]
    def keep(i, j):
        return i in G or j in G
    np.testing.assert_array_equal(global_pattern(n, G, m=m, causal=causal).to_mask(), loop_mask(n, m, keep, causal))


@pytest.mark.parametrize(("n", "m", "r"), [(8, 8, 3), (5, 12, 4), (12, 5, 5), (6, 6, 6)])
def test_random_exact_count_and_determinism(n, m, r):
    p = random_pattern(n, r, m=m, rng=42)
    np.testing.assert_array_equal(p.row_counts(), np.full(n, r))
    assert random_pattern(n, r, m=m, rng=42) == p
    assert random_pattern(n, r, m=m, keys=draw_random_keys(42, n, r, m=m)) == p


@pytest.mark.parametrize("causal", CAUSAL[1:])
def test_random_causal_counts(causal):
    p = random_pattern(9, 3, rng=np.random.default_rng(1), causal=causal)
    np.testing.assert_array_equal(p.row_counts(), [1, 2, 3, 3, 3, 3, 3, 3, 3])
    assert np.all(p.indices <= p.row_ids())


@pytest.mark.parametrize(("n", "m"), [(9, 5), (5, 9)])
def test_random_bottom_right_draws_from_the_keys_up_to_the_query_position(n, m):
    p = random_pattern(n, 3, m=m, rng=np.random.default_rng(1), causal="bottom-right")
    position = np.arange(n) + m - n
    np.testing.assert_array_equal(p.row_counts(), np.clip(position + 1, 0, 3))
    assert np.all(p.indices <= position[p.row_ids()])
    keys = draw_random_keys(2, n, 3, m=m, causal="bottom-right")
    assert np.all((keys <= position[:, None]) | (keys == -1))           # -1 pads the rows with fewer candidates
    np.testing.assert_array_equal((keys >= 0).sum(axis=1), np.clip(position + 1, 0, 3))


@pytest.mark.parametrize(("n", "m"), SIZES)
@pytest.mark.parametrize("causal", CAUSAL)
def test_random_given_keys(n, m, causal):
    keys = draw_random_keys(3, n, min(n, m), m=m)
    def keep(i, j):                                               # the drawn keys of query i, whatever its position
        return j in keys[i - (m - n if causal == "bottom-right" else 0)]
    np.testing.assert_array_equal(random_pattern(n, m=m, keys=keys, causal=causal).to_mask(),
                                  loop_mask(n, m, keep, causal))


def test_random_draw_is_uniform_over_keys():
    # Each of m = 10 keys is in a row's r = 3 with probability 3/10. Over 20000 rows a key's count
    # is Binomial(20000, 0.3): sd ≈ 64.8, and |count − 6000| ≤ 5 sd fails for any key with
    # probability < 10 · 5.7e-7 (two-sided normal tail), the false-alarm rate of this test.
    keys = draw_random_keys(7, 20000, 3, m=10)
    counts = np.bincount(keys.ravel(), minlength=10)
    assert np.all(np.abs(counts - 6000) <= 5 * np.sqrt(20000 * 0.3 * 0.7))


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: band_pattern(4, -1), ValueError, "window must be a non-negative int"),
    (lambda: band_pattern(-1, 1), ValueError, "n must be a non-negative int, got -1"),
    (lambda: band_pattern(3, 1, m=2.0), ValueError, "m must be a non-negative int, got 2.0"),
    (lambda: dilated_pattern(4, 1, 0), ValueError, "dilation must be a positive int, got 0"),
    (lambda: strided_pattern(4, 0), ValueError, "stride must be a positive int, got 0"),
    (lambda: block_local_pattern(4, 0), ValueError, "block must be a positive int"),
    (lambda: global_pattern(4, [4]), ValueError, r"global_indices must lie in \[0, max\(n, m\)=4\)"),
    (lambda: global_pattern(4, [0.5]), TypeError, r"global_indices must be an array of ints, got dtype float64"),
    (lambda: global_pattern(4, [True]), TypeError, r"global_indices must be an array of ints, got dtype bool"),
    (lambda: global_pattern(4, [[0], [1, 2]]), ValueError, "global_indices must be a rectangular array"),
    (lambda: random_pattern(4, 2), ValueError, r"^random draws its keys from rng: pass rng= \(or keys=\)$"),
    (lambda: random_pattern(4, 5, rng=0), ValueError, "cannot draw r=5 distinct keys from m=4"),
    (lambda: random_pattern(2, keys=[[0, 0], [1, -1]]), ValueError, "repeats a key within a row"),
    (lambda: random_pattern(2, keys=[[0, 2], [1, -1]]), ValueError, r"keys must lie in \[0, m=2\)"),
])
def test_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


@pytest.mark.parametrize(("n", "m"), [(0, 0), (0, 5), (4, 0)])
@pytest.mark.parametrize("causal", CAUSAL)
def test_no_query_or_no_key_is_an_empty_pattern(n, m, causal):
    # The edge-size rule starts here: a pattern of n = 0 queries or m = 0 keys is empty, not an error.
    patterns = [band_pattern(n, 2, m=m, causal=causal), dilated_pattern(n, 1, 2, m=m, causal=causal),
                strided_pattern(n, 3, m=m, causal=causal), block_local_pattern(n, 3, m=m, causal=causal),
                global_pattern(n, (), m=m, causal=causal), global_pattern(n, [0] if max(n, m) else [], m=m),
                random_pattern(n, 0, m=m, causal=causal, rng=0),
                random_pattern(n, m=m, causal=causal, keys=np.zeros((n, 0), np.int64))]
    if causal is not False or n == 0:                              # causal rows take all of their < r candidates
        patterns.append(random_pattern(n, 2, m=m, causal=causal, rng=0))
    for p in patterns:
        assert p.shape == (n, m) and p.nnz == 0
        np.testing.assert_array_equal(p.to_mask(), np.zeros((n, m), bool))


def test_random_refuses_more_keys_than_there_are_saying_what_works():
    with pytest.raises(ValueError, match=r"cannot draw r=2 distinct keys from m=0: without a causal mask r <= m"):
        random_pattern(4, 2, m=0, rng=0)


HUGE = 10**30


@pytest.mark.parametrize(("build", "name"), [
    (lambda: band_pattern(HUGE, 2), "n"), (lambda: band_pattern(5, 2, m=HUGE), "m"),
    (lambda: strided_pattern(5, 2, m=HUGE), "m"), (lambda: global_pattern(HUGE), "n"),
    (lambda: random_pattern(HUGE, 2, rng=0), "n"), (lambda: draw_random_keys(0, 5, 2, m=HUGE), "m"),
    (lambda: sparse.axial_pattern(4, HUGE, axis="row"), "width"), (lambda: sparse.etc_pattern(1, HUGE, 1), "num_long"),
    (lambda: sparse.bigbird_pattern(HUGE, block_size=2, rng=0), "n"),
    (lambda: sparse.bigbird_block_layout(HUGE, rng=0), "num_blocks"), (lambda: sparse.bp_tree_spans(HUGE), "n"),
    (lambda: sparse.image_transformer_pattern(8, 8, query_block=(HUGE, 2)), r"query_block\[0\]"),
    (lambda: sparse.sparse_transformer_pattern(8, HUGE), "stride"), (lambda: sparse.draw_gumbel(0, HUGE), "num_blocks"),
    (lambda: sparse.draw_lsh_rotations(0, 4, 2, HUGE), "num_rounds"), (lambda: sparse.draw_centroids(0, 2, HUGE), "d"),
])
def test_builders_refuse_a_size_beyond_int64_by_name(build, name):
    """One shared check (refattn.common.check_size): NumPy's "Maximum allowed size exceeded" or an OverflowError
    named no argument."""
    with pytest.raises(ValueError, match=rf"^{name}={HUGE} is too large: sizes and counts must be at most 2\*\*62"):
        build()


def test_builders_refuse_rows_beyond_the_memory_budget_by_name():
    with pytest.raises(MemoryBudgetError, match=r"^n=1099511627776: the row pointers of shape \(1099511627777,\) "):
        band_pattern(2**40, 1)


@pytest.mark.parametrize("causal", [False, True, "bottom-right"])
def test_windows_that_mean_everything_are_clamped(causal):
    """band_pattern's docstring: w >= max(n, m) keeps every pair; 10**30 was refused. Every window, reach, gap or
    stride beyond its clamp gives the pattern of the clamp."""
    n, m = 5, 8
    assert band_pattern(n, HUGE, m=m, causal=causal) == band_pattern(n, max(n, m), m=m, causal=causal)
    assert band_pattern(n, HUGE, m=m) == sparse.SparsePattern.full(n, m)
    assert dilated_pattern(n, HUGE, HUGE, m=m, causal=causal) == band_pattern(n, 0, m=m, causal=causal)
    assert dilated_pattern(n, HUGE, 1, m=m, causal=causal) == band_pattern(n, m, m=m, causal=causal)
    assert strided_pattern(n, HUGE, m=m, causal=causal) == band_pattern(n, 0, m=m, causal=causal)
    assert block_local_pattern(n, HUGE, m=m, causal=causal) == block_local_pattern(n, m, m=m, causal=causal)
    assert sparse.longformer_pattern(n, 2, dilation=HUGE) == band_pattern(n, 0)
    assert sparse.block_window_pattern(6, 2, look_backward=HUGE) == sparse.block_window_pattern(6, 2, look_backward=3)
    assert sparse.etc_pattern(1, 4, HUGE) == sparse.etc_pattern(1, 4, 4)


@pytest.mark.parametrize(("build", "old", "new"), [
    (lambda **o: band_pattern(9, **o), {"w": 2}, {"window": 2}),
    (lambda **o: dilated_pattern(9, dilation=2, **o), {"w": 2}, {"window": 2}),
    (lambda **o: etc_pattern(2, 7, **o), {"radius": 1}, {"window": 1}),
])
def test_the_old_window_names_warn_and_give_the_same_pattern(build, old, new):
    (name,) = old
    with pytest.warns(DeprecationWarning, match=rf"{name}= is renamed window="):
        pattern = build(**old)
    assert pattern == build(**new)
    assert pattern != build(window=new["window"] + 1)


def test_random_keys_given_leave_rng_unused():
    keys = np.array([[0, 2], [1, 3], [0, 1]])
    assert random_pattern(3, 2, m=4, keys=keys, rng=5) == random_pattern(3, 2, m=4, keys=keys)
