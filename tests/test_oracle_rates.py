"""The ratio rule's floors: honest implementations pass on random problems, seeded bugs fail, 2× means 2×.

The full measurement (1000 problems) is ``python -m refattn bench oracle``; this is a small version.
"""
from __future__ import annotations

import numpy as np
import pytest

from refattn import causal_mask, scaled_dot_product_attention
from refattn.bench.oracle import BUGS, PRECISION_BUGS, measure, random_problem
from refattn.oracle.check import check


def forward_online(q, k, v, allowed, bias, scale):
    """Another honest float32 attention, written here: keys one at a time in order, running max and sum."""
    q, k, v = (np.asarray(x, np.float32) for x in (q, k, v))
    shape = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], allowed.shape[:-2]) + (q.shape[-2],)
    mx = np.full(shape, -np.inf, np.float32)
    total = np.zeros(shape, np.float32)
    acc = np.zeros(shape + (v.shape[-1],), np.float32)
    for j in range(k.shape[-2]):
        s = np.einsum("...nd,...d->...n", q, k[..., j, :]) * np.float32(scale)
        if bias is not None:
            s = s + np.broadcast_to(bias, allowed.shape)[..., j].astype(np.float32)
        s = np.where(allowed[..., j], s, -np.inf)
        new = np.maximum(mx, s)
        safe = np.where(new == -np.inf, np.float32(0), new)
        old_weight = np.exp(np.where(mx == -np.inf, -np.inf, mx - safe))
        w = np.exp(s - safe)
        total = total * old_weight + w
        acc = acc * old_weight[..., None] + w[..., None] * v[..., j, None, :]
        mx = new
    seen = total > 0
    return np.where(seen[..., None], acc / np.where(seen, total, 1)[..., None], 0).astype(np.float32)


def test_independent_float32_implementation_passes_on_random_problems():
    rng = np.random.default_rng(5)
    for _ in range(40):
        p = random_problem(rng)
        n, m = p["q"].shape[-2], p["k"].shape[-2]
        mask, bias = p["mask"], None
        allowed = np.ones((n, m), bool)
        if mask is not None and mask.dtype == np.bool_:
            allowed = mask
        elif mask is not None:
            bias = mask
        if p["causal"]:
            allowed = allowed & causal_mask(n, m, causal=p["causal"])
        out = forward_online(p["q"], p["k"], p["v"], allowed, bias, p["scale"])
        report = check(out, p["q"], p["k"], p["v"], mask=mask, causal=p["causal"], scale=p["scale"])
        assert report.passed, str(report)


def test_small_measurement_no_false_rejection_and_every_convention_bug_found():
    results = measure(25, seed=11)
    for name, (passed, judged) in results["honest"].items():
        assert (passed, judged) == (25, 25), name
        assert results["worst"][name] <= 1.0
    for name in BUGS:
        found, applicable, skipped = results["bugs"][name]
        assert found == applicable and applicable + skipped == 25, name
    assert sum(results["bugs"][name][1] for name in BUGS) > 100    # the bugs were really exercised
    assert results["bugs"][next(iter(PRECISION_BUGS))][1] == 25


@pytest.mark.parametrize(("dtype", "factor"), [(np.float32, 8.0), (np.float16, 3.0)])
def test_error_of_a_few_times_the_baseline_fails_on_a_well_conditioned_problem(dtype, factor):
    """The baseline's own error scaled element by element: 1.9× passes, ``factor``× fails.

    With E the baseline's max error and F the floor, the candidate's error is f·E against a threshold of
    2·E + F: 1.9× passes for any E, and f× fails iff (f − 2)·E > F. F (the oracle's rounding-noise bound) is
    the same on every machine; E is the float32 rounding of BLAS's products, which depends on the kernel, so
    f must hold for any summation order. Here F = 8.6e-7 in float32; E measured 3.4e-7 (Haswell) to 4.5e-7
    (SkylakeX), and 2.5e-7 to 6.8e-7 over 600 random orders of the keys and of the features (the same
    problem, other roundings). f = 4 needs E > F/2 = 4.3e-7 and failed on SkylakeX only; f = 8 needs
    E > F/6 = 1.4e-7, below the smallest E measured by a factor of 1.8. Under the former c = 1 floors
    (4·F) it needs E > 2/3·F = 5.7e-7, which the kernels measured did not reach: those floors let 8× pass.
    float16 (NumPy's own loops, float32 accumulators, no BLAS): F = 1.7e-4, E = 7.4e-4; f = 3 needs E > F.
    """
    rng = np.random.default_rng(8)
    q, k, v = rng.standard_normal((3, 2, 64, 64))
    exact = scaled_dot_product_attention(q, k, v)
    error = scaled_dot_product_attention(q, k, v, dtype=dtype).astype(np.float64) - exact
    assert check((exact + 1.9 * error).astype(dtype), q, k, v).passed
    report = check((exact + factor * error).astype(dtype), q, k, v)
    assert not report.passed, str(report)
    # The cast to dtype moves each element by at most half a spacing of the largest output: the planted error
    # survives it.
    half_spacing = float(np.spacing(np.abs(exact).max().astype(dtype))) / 2
    assert report["out"].max_abs_error >= factor * report["out"].baseline_error - half_spacing
