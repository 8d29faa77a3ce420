"""SparsePattern: CSR invariants, conversions, algebra, and the O(nnz) constructors against masks."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from refattn import causal_mask
from refattn.sparse import SparsePattern


def random_mask(seed, n, m, density=0.3):
    return np.random.default_rng(seed).random((n, m)) < density


masks = st.tuples(st.integers(0, 2**32 - 1), st.integers(1, 9), st.integers(1, 11), st.floats(0, 1))


@given(masks)
def test_mask_round_trip_and_pairs(args):
    seed, n, m, density = args
    mask = random_mask(seed, n, m, density)
    p = SparsePattern.from_mask(mask)
    np.testing.assert_array_equal(p.to_mask(), mask)
    assert p.nnz == mask.sum() and p.shape == (n, m)
    np.testing.assert_array_equal(p.row_counts(), mask.sum(axis=1))
    assert SparsePattern.from_pairs(*np.nonzero(mask), n, m) == p
    rows, cols = np.nonzero(mask)
    order = np.random.default_rng(seed).permutation(len(rows))
    doubled = np.concatenate([order, order])                         # shuffled, every pair twice
    assert SparsePattern.from_pairs(rows[doubled], cols[doubled], n, m) == p


@given(masks, st.integers(0, 2**32 - 1))
def test_union_and_intersection_are_mask_or_and(args, seed2):
    seed, n, m, density = args
    a, b = random_mask(seed, n, m, density), random_mask(seed2, n, m, 0.5)
    pa, pb = SparsePattern.from_mask(a), SparsePattern.from_mask(b)
    np.testing.assert_array_equal((pa | pb).to_mask(), a | b)
    np.testing.assert_array_equal((pa & pb).to_mask(), a & b)


@pytest.mark.parametrize(("n", "m"), [(6, 9), (9, 6), (5, 5)])
@pytest.mark.parametrize("alignment", ["top-left", "bottom-right"])
def test_causal_filter_equals_and_with_causal_mask(n, m, alignment):
    mask = random_mask(3, n, m, 0.6)
    p = SparsePattern.from_mask(mask).causal(alignment)
    np.testing.assert_array_equal(p.to_mask(), mask & causal_mask(n, m, causal=alignment))


@given(st.integers(1, 12), st.integers(1, 15), st.integers(-20, 20), st.integers(-5, 25), st.integers(1, 4),
       st.integers(0, 2**32 - 1))
def test_row_ranges_equal_python_ranges(n, m, a, span, step, seed):
    rng = np.random.default_rng(seed)
    start = a + rng.integers(-3, 4, size=n)
    stop = start + span + rng.integers(-3, 4, size=n)
    steps = rng.integers(1, step + 1, size=n)
    p = SparsePattern.from_row_ranges(start, stop, m, step=steps)
    for i in range(n):
        expected = [j for j in range(start[i], stop[i], steps[i]) if 0 <= j < m]
        np.testing.assert_array_equal(p.row(i), expected)


def test_to_dense_scatters_values_in_csr_order():
    p = SparsePattern.from_mask(np.array([[True, False, True], [False, True, False]]))
    np.testing.assert_array_equal(p.to_dense(np.array([1.0, 2.0, 3.0])), [[1, 0, 2], [0, 3, 0]])
    np.testing.assert_array_equal(p.to_dense(np.ones((2, 3)), fill=np.nan)[1, 0, 1], np.nan)


def test_full_and_density():
    p = SparsePattern.full(3, 4)
    assert p.nnz == 12 and p.density == 1.0
    assert repr(p) == "SparsePattern(n=3, m=4, nnz=12, density=1)"


def test_large_patterns_never_become_dense():
    n = 65536
    p = SparsePattern.from_row_ranges(np.arange(n) - 2, np.arange(n) + 3, n)
    assert p.nnz == 5 * n - 6
    with pytest.raises(ValueError, match=r"to_mask\(\) would allocate n·m = 65536·65536 booleans"):
        p.to_mask()


def test_arrays_are_read_only():
    p = SparsePattern.full(2, 2)
    with pytest.raises(ValueError, match="read-only"):
        p.indices[0] = 1


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: SparsePattern([0, 2], [1, 1], 1, 3), ValueError, "strictly increasing within each row"),
    (lambda: SparsePattern([0, 1], [3], 1, 3), ValueError, r"indices must lie in \[0, m=3\)"),
    (lambda: SparsePattern([0, 2, 1], [0, 1], 2, 3), ValueError, "never decrease"),
    (lambda: SparsePattern([0, 1], [0], 2, 3), ValueError, r"indptr must have shape \(n \+ 1,\) = \(3,\)"),
    (lambda: SparsePattern([0], [], -1, 3), ValueError, "n must be a non-negative int"),
    (lambda: SparsePattern.from_mask(np.ones((2, 2))), TypeError, "mask must be a 2-D boolean array"),
    (lambda: SparsePattern.from_pairs([0, 5], [0, 1], 3, 3), ValueError, r"rows must lie in \[0, n=3\)"),
    (lambda: SparsePattern.from_row_ranges([0], [2], 3, step=0), ValueError, "step must be >= 1"),
    (lambda: SparsePattern.full(2, 2) | SparsePattern.full(2, 3), ValueError, r"shapes \(2, 2\) and \(2, 3\)"),
    (lambda: SparsePattern.full(2, 2) & np.ones((2, 2), bool), TypeError, "cannot combine SparsePattern"),
    (lambda: SparsePattern.full(2, 2).to_dense(np.ones(3)), ValueError, r"data must have shape \(\.\.\., nnz=4\)"),
    (lambda: SparsePattern.full(2, 2).causal("left"), ValueError, "causal must be one of"),
    (lambda: SparsePattern.full(2, 2).causal(False), ValueError, "SparsePattern.causal keeps the causal pairs"),
])
def test_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


@pytest.mark.parametrize(("n", "m"), [(3, 7), (7, 7), (9, 4)])
def test_last_rows_is_bottom_right_alignment(n, m):
    # The causal m × m pattern's last n rows (empty rows first when n > m) is the bottom-right mask.
    p = SparsePattern.full(m, m).causal().last_rows(n)
    np.testing.assert_array_equal(p.to_mask(), causal_mask(n, m, causal="bottom-right"))


# --- hardening: nothing is cast, nothing wraps, empty patterns are patterns ------------------------------------

@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: SparsePattern([0, 1], [1.7], 1, 3), TypeError, r"indices must be an array of ints, got dtype float64"),
    (lambda: SparsePattern([0, 1], [1.0], 1, 3), TypeError, r"indices must be an array of ints, got dtype float64"),
    (lambda: SparsePattern([0.0, 1.0], [1], 1, 3), TypeError, r"indptr must be an array of ints, got dtype float64"),
    (lambda: SparsePattern([0, 1], [True], 1, 3), TypeError, r"indices must be an array of ints, got dtype bool"),
    (lambda: SparsePattern(["0", "1"], [1], 1, 3), TypeError, r"indptr must be an array of ints, got dtype <U1"),
    (lambda: SparsePattern([0, 1], [[1]], 1, 3), ValueError, r"indices must have 1 dimension, got shape \(1, 1\)"),
    # 2**32 + 1 would wrap to 1 in int32: it is range-checked before narrowing
    (lambda: SparsePattern([0, 1], [2**32 + 1], 1, 3), ValueError, r"indices must lie in \[0, m=3\), got values in "
                                                                     r"\[4294967297, 4294967297\]"),
    (lambda: SparsePattern([0, 1], [1], 1.0, 3), ValueError, "n must be a non-negative int, got 1.0"),
    (lambda: SparsePattern.from_pairs([0.5], [1], 3, 3), TypeError, "rows must be an array of ints, got dtype float64"),
    (lambda: SparsePattern.from_pairs([0], [True], 3, 3), TypeError, "cols must be an array of ints, got dtype bool"),
    (lambda: SparsePattern.from_pairs([[0], [1, 2]], [0, 1], 3, 3), ValueError, "rows must be a rectangular array"),
    (lambda: SparsePattern.from_pairs([0], [0], 3, 2.0), ValueError, "m must be a non-negative int, got 2.0"),
    (lambda: SparsePattern.from_row_ranges([0.5], [2], 3), TypeError, "start must be an array of ints"),
    (lambda: SparsePattern.from_row_ranges([0], [2.5], 3), TypeError, "stop must be an array of ints"),
    (lambda: SparsePattern.from_row_ranges([0], [2], 3, step=1.5), TypeError, "step must be an array of ints"),
    (lambda: SparsePattern.from_row_ranges([0], [2], 3.0), ValueError, "m must be a non-negative int, got 3.0"),
    (lambda: SparsePattern.from_row_ranges([0, 1], [2], 3), ValueError, r"start and stop must have the same \(n,\)"),
    (lambda: SparsePattern.from_row_ranges([0, 1], [2, 3], 3, step=[1, 1, 1]), ValueError,
     r"step must be an int or have start's shape \(2,\), got shape \(3,\)"),
    (lambda: SparsePattern.from_row_ranges(np.array([2**64 - 1], np.uint64), [2], 3), ValueError,
     "start must fit in int64"),
    (lambda: SparsePattern.from_row_segments([[0.5]], [[2]], 3), TypeError, "start must be an array of ints"),
    (lambda: SparsePattern.from_row_segments([0], [2], 3), ValueError,
     r"start must have 2 dimensions, got shape \(1,\)"),
    (lambda: SparsePattern.from_mask([[True], [False, True]]), ValueError, "mask must be a rectangular array"),
    (lambda: SparsePattern.full(2.0, 3), ValueError, "n must be a non-negative int, got 2.0"),
    (lambda: SparsePattern.full(2, -3), ValueError, "m must be a non-negative int, got -3"),
    (lambda: SparsePattern.full(2, 2).to_mask(max_size=2.5), ValueError, "max_size must be a non-negative int"),
    (lambda: SparsePattern.full(1, 2).to_dense(["a", "b"]), TypeError, "data must be numeric, got dtype <U1"),
    (lambda: SparsePattern.full(1, 2).to_dense([1.0, 2.0], fill="0"), TypeError, "fill must be a number, got str"),
])
def test_index_arrays_and_sizes_are_refused_not_cast(call, error, match):
    with pytest.raises(error, match=match):
        call()


@pytest.mark.parametrize(("i", "error", "match"), [
    (-1, IndexError, r"row -1 is out of range for a pattern of n=3 queries \(0 <= i < n\)"),
    (3, IndexError, r"row 3 is out of range for a pattern of n=3 queries"),
    (1.0, TypeError, "row index must be an int, got float 1.0"),
    (True, TypeError, "row index must be an int, got bool True"),
    ("1", TypeError, "row index must be an int, got str '1'"),
])
def test_row_refuses_what_is_not_a_query_index(i, error, match):
    # IndexError as a Python sequence raises for an index past its end; negative rows are refused too
    # (a query position, not an offset from the end), so row(-1) is never an empty row.
    p = SparsePattern.from_mask(np.array([[True, False], [False, True], [True, True]]))
    with pytest.raises(error, match=match):
        p.row(i)


def test_row_takes_numpy_ints():
    p = SparsePattern.from_mask(np.array([[True, False], [True, True]]))
    np.testing.assert_array_equal(p.row(np.int64(1)), [0, 1])
    np.testing.assert_array_equal(p.row(0), [0])


@pytest.mark.parametrize(("n", "m"), [(0, 0), (0, 4), (3, 0)])
def test_empty_patterns_behave_like_empty_masks(n, m):
    mask = np.zeros((n, m), dtype=bool)
    patterns = [SparsePattern.full(n, m) if n * m == 0 else None, SparsePattern.from_mask(mask),
                SparsePattern.from_pairs([], [], n, m), SparsePattern([0] * (n + 1), [], n, m),
                SparsePattern.from_row_ranges(np.zeros(n, np.int64), np.full(n, m), m),
                SparsePattern.from_row_segments(np.zeros((n, 2), np.int64), np.full((n, 2), 0), m)]
    for p in patterns:
        assert p.shape == (n, m) and p.nnz == 0 and p.density == 0.0
        np.testing.assert_array_equal(p.to_mask(), mask)
        assert p.to_dense(np.ones((2, 0))).shape == (2, n, m)
        np.testing.assert_array_equal(p.row_counts(), np.zeros(n))
        assert p.causal("bottom-right") == p and (p | p) == p and (p & p) == p
        assert p.last_rows(2).shape == (2, m) and p.last_rows(2).nnz == 0


def test_builders_refuse_index_arrays_over_the_memory_budget():
    from refattn.common import MemoryBudgetError, set_memory_budget

    previous = set_memory_budget(4000)                               # bytes: 1000 int32 indices
    try:
        fits = SparsePattern.from_row_ranges(np.zeros(1000, np.int64), np.ones(1000, np.int64), 2)   # 4000 B
        assert fits.nnz == 1000
        with pytest.raises(MemoryBudgetError, match=r"the pattern's indices of shape \(1001,\) would take"):
            SparsePattern.from_row_ranges(np.zeros(1001, np.int64), np.ones(1001, np.int64), 2)
        with pytest.raises(MemoryBudgetError, match=r"the pattern's indices of shape \(1000,\) would take"):
            SparsePattern.from_row_segments(np.zeros((500, 1), np.int64), np.full((500, 1), 2), 2)   # int64
    finally:
        set_memory_budget(previous)
