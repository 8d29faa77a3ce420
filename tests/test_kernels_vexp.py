"""``refattn.kernels.vexp``: the blocked kernel's exponential, against libm (np.exp) and mpmath.

Bounds: 1 ulp from ``np.exp`` and 1.5 ulp from the exact value. The budget of vexp itself: the
last Horner step ``p·r + 1`` rounds once (0.5 ulp), the steps before it contribute their rounding
scaled by |r| <= 0.35 (together < 0.3 ulp), the reduction ``r = x − n ln 2`` is exact up to one
rounding of a term |r| times smaller, and the scaling by 2^n is exact (or one more 0.5 ulp rounding
of a subnormal result, in units of that subnormal's ulp). So about 0.8-1.3 ulp from the truth;
measured 1.11 on the mpmath sample below, while glibc's exp is within 0.66 there. Two roundings
from different algorithms can sit on either side of the exact value, hence 1 ulp between the two.
"""
from __future__ import annotations

import mpmath
import numpy as np
import pytest

from refattn._jit import jit
from refattn.kernels.vexp import bits_float, float_bits, vexp

SPECIAL = np.array([-np.inf, np.inf, np.nan, 0.0, -0.0, 1e-300, -1e-300, 5e-324, -5e-324,
                    -745.2, -745.14, -745.13, -708.4, -708.39, 709.78, 709.79, 709.8, 710.0, -1e300, 1e300])


@jit
def _vexp_loop(x, out):  # pragma: no cover - jitted
    for i in range(x.shape[0]):
        out[i] = vexp(x[i])


def vexp_array(x):
    out = np.empty_like(x)
    _vexp_loop(x, out)
    return out


def ulps_apart(a, b):
    """|a − b| in units of the spacing of doubles at |b| (b finite)."""
    return np.abs(a - b) / np.spacing(np.abs(b))


def test_within_one_ulp_of_numpy(rng):
    x = np.concatenate([rng.uniform(-750, 712, 10**6), rng.uniform(-40, 0, 10**6), rng.uniform(-1, 1, 10**6),
                        -np.abs(rng.standard_normal(10**6)) * 1e-8])
    with np.errstate(over="ignore"):
        ref = np.exp(x)
    out = vexp_array(x)
    finite = np.isfinite(ref)
    assert ulps_apart(out[finite], ref[finite]).max() <= 1.0
    np.testing.assert_array_equal(out[~finite], ref[~finite])        # overflow: both +inf
    assert np.mean(out == ref) > 0.85                                # mostly the very same double


def test_special_values_equal_numpy():
    with np.errstate(over="ignore"):
        ref = np.exp(SPECIAL)
    out = vexp_array(SPECIAL)
    np.testing.assert_array_equal(out, ref)                          # NaN == NaN here; 0, inf, 1 exact
    assert vexp(0.0) == 1.0 and vexp(-np.inf) == 0.0


def test_within_one_and_a_half_ulp_of_mpmath(rng):
    mpmath.mp.prec = 200
    x = np.concatenate([rng.uniform(-745, 709, 1500), rng.uniform(-1, 0, 1500), rng.uniform(-40, 0, 1500)])
    out = vexp_array(x)
    worst = 0.0
    for xi, yi in zip(x, out, strict=True):
        exact = mpmath.exp(mpmath.mpf(float(xi)))
        worst = max(worst, float(abs(mpmath.mpf(float(yi)) - exact) / mpmath.mpf(float(np.spacing(float(exact))))))
    assert worst <= 1.5


def test_python_and_numba_agree_bit_for_bit(rng):
    x = np.concatenate([SPECIAL, rng.uniform(-750, 712, 300)])
    py = np.array([vexp.py_func(float(xi)) for xi in x]) if hasattr(vexp, "py_func") else vexp_array(x)
    np.testing.assert_array_equal(py.view(np.int64), vexp_array(x).view(np.int64))


@pytest.mark.parametrize("x", [0.0, -0.0, 1.5, -2.25, np.inf, 1e-310, np.nan])
def test_bit_casts_round_trip(x):
    bits = float_bits(x)
    assert bits == np.float64(x).view(np.int64)
    assert np.float64(bits_float(bits)).view(np.int64) == bits
    assert np.float64(bits_float(bits + 2**64)).view(np.int64) == bits    # wraps like Numba's int64
