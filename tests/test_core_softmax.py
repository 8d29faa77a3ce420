"""softmax: hand cases, extreme logits, masking by selection, policies, extended precision."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from refattn import softmax
from refattn.oracle.extended import mp_softmax

EPS = np.finfo(np.float64).eps


def test_hand_computed():
    # e^0 : e^{ln 3} = 1 : 3  →  1/4, 3/4
    np.testing.assert_allclose(softmax([0.0, np.log(3.0)]), [0.25, 0.75], rtol=1e-15)


def test_extreme_logits_are_finite_and_correct():
    # |x| ~ 1e4: exp(1e4) overflows, so only the max shift makes this finite.
    # differences of 1e4 → e^{-1e4} underflows to exactly 0 in float64.
    x = np.array([1e4, 1e4 - np.log(2.0), -1e4])
    w = softmax(x)
    assert np.all(np.isfinite(w))
    np.testing.assert_allclose(w, [2 / 3, 1 / 3, 0.0], rtol=1e-12, atol=0)   # 1 : 1/2 : 0


def test_matches_extended_precision_to_a_few_ulps(rng):
    # O(1) logits: exp and the division round once each per entry and the sum of m = 9 terms adds
    # at most ~m·eps/2 relative, so 16 ulps bounds the total.
    x = rng.standard_normal((5, 9))
    expected = mp_softmax(x)
    np.testing.assert_allclose(softmax(x), expected, rtol=16 * EPS, atol=0)


@pytest.mark.parametrize("scale", [30.0, 700.0])
def test_matches_extended_precision_large_logits(rng, scale):
    # Softmax's conditioning: the shifted logit y = x_j − max x is rounded to eps/2·|y|, and exp
    # turns that absolute error into the relative error |y|·eps/2 of entry j. Bound per entry:
    # (|y| + m + 4)·eps relative, plus subnormal spacing (4.9e-324) absolute.
    x = rng.standard_normal((5, 9)) * scale
    expected = mp_softmax(x)
    y = np.abs(x - x.max(axis=-1, keepdims=True))
    bound = (y + x.shape[-1] + 4) * EPS * expected + 1e-323
    assert np.all(np.abs(softmax(x) - expected) <= bound)


def test_mask_selects_and_nan_in_masked_entries_does_not_leak():
    x = np.array([[0.0, np.nan, np.log(3.0), np.inf]])
    w = softmax(x, mask=np.array([[True, False, True, False]]))
    np.testing.assert_allclose(w, [[0.25, 0.0, 0.75, 0.0]], rtol=1e-15)


@pytest.mark.parametrize(("policy", "expected"), [
    ("zero", [0.0, 0.0, 0.0]),
    ("nan", [np.nan, np.nan, np.nan]),
    ("uniform", [1 / 3, 1 / 3, 1 / 3]),
])
def test_fully_masked_policies(policy, expected):
    x = np.array([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]])
    mask = np.array([[False, False, False], [True, True, True]])
    w = softmax(x, mask=mask, fully_masked=policy)
    np.testing.assert_allclose(w[0], expected, rtol=1e-15)
    np.testing.assert_allclose(w[1], softmax(x[1]), rtol=1e-15)   # other rows untouched


def test_all_minus_inf_row_is_fully_masked():
    np.testing.assert_array_equal(softmax([-np.inf, -np.inf]), [0.0, 0.0])


def test_ieee_in_rows_that_use_nonfinite_values():
    w = softmax(np.array([[0.0, np.nan], [0.0, 1.0]]))
    assert np.isnan(w[0]).all()
    assert np.isfinite(w[1]).all()


def test_axis(rng):
    x = rng.standard_normal((4, 6))
    np.testing.assert_allclose(softmax(x, axis=0), softmax(x.T).T, rtol=1e-15)


def test_dtype_follows_compute_dtype():
    assert softmax(np.array([1.0, 2.0], dtype=np.float32)).dtype == np.float64
    assert softmax([1.0, 2.0], dtype=np.float32).dtype == np.float32


finite_rows = arrays(np.float64, st.tuples(st.integers(1, 4), st.integers(1, 12)),
                     elements=st.floats(-1e4, 1e4, allow_nan=False))


@given(finite_rows)
def test_rows_sum_to_one_and_are_nonnegative(x):
    w = softmax(x)
    assert np.all(w >= 0)
    np.testing.assert_allclose(w.sum(axis=-1), 1.0, rtol=0, atol=x.shape[-1] * EPS)


@given(finite_rows, st.floats(-1e3, 1e3))
def test_shift_invariance(x, c):
    # softmax(x + c) = softmax(x) exactly in maths; in floats x + c rounds each entry by up to
    # eps·|x + c| ≤ eps·2e4, and exp turns that absolute error into a relative one.
    bound = 4 * EPS * (np.abs(x).max() + abs(c) + 1)
    np.testing.assert_allclose(softmax(x + c), softmax(x), rtol=bound, atol=1e-300)


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"x": np.array([1, 2])}, TypeError, "x must be a real floating-point array, got dtype int"),
    ({"x": np.array([1j, 2j])}, TypeError, "complex"),
    ({"x": np.ones(3), "mask": np.ones(4, bool)}, ValueError, r"mask has shape \(4,\).*x's shape \(3,\)"),
    ({"x": np.ones(3), "mask": np.ones(3)}, TypeError, "mask must be a boolean array"),
    ({"x": np.ones(3), "fully_masked": "ignore"}, ValueError, "fully_masked must be one of"),
    ({"x": np.ones(3), "axis": 1}, ValueError, "axis must be an int in"),
    ({"x": np.float64(1.0)}, ValueError, "scalar"),
])
def test_bad_input(kwargs, error, match):
    with pytest.raises(error, match=match):
        softmax(**kwargs)
