"""The scan kernels' wrappers: every shape a kernel indexes is checked first; a run with Numba's bounds checking."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from refattn.kernels.delta_scan import delta_rule_scan
from refattn.kernels.gated_scan import gated_linear_scan
from refattn.kernels.scan import _causal_linear_scan, causal_linear_scan

TIGHT = {"rtol": 1e-12, "atol": 1e-12}
REPO = Path(__file__).resolve().parents[1]


def scan_args(rng, B=2, n=5, m=7, F=3, d_v=2):
    return {"phi_q": rng.random((B, n, F)), "phi_k": rng.random((B, m, F)), "v": rng.random((B, m, d_v)),
            "out": np.empty((B, n, d_v)), "den": np.empty((B, n))}


def gated_args(rng, B=2, n=5, F=3, d_v=2):
    return {"phi_q": rng.random((B, n, F)), "phi_k": rng.random((B, n, F)), "v": rng.random((B, n, d_v)),
            "g": rng.random((B, n)), "out": np.empty((B, n, d_v)), "den": np.empty((B, n))}


def run_scan(a, delta=0, eps=0.0, **kw):
    causal_linear_scan(a["phi_q"], a["phi_k"], a["v"], delta, eps, a["out"], a["den"], **kw)


def run_gated(a, coupled=True, eps=0.0):
    gated_linear_scan(a["phi_q"], a["phi_k"], a["v"], a["g"], coupled, eps, a["out"], a["den"])


def run_delta(a):
    delta_rule_scan(a["phi_q"], a["phi_k"], a["v"], a["g"], a["out"])


@pytest.mark.parametrize(("name", "shape", "match"), [
    # A query map of 12 features with a key map of 1: the kernel read phi_k past its last feature.
    ("phi_k", (2, 7, 1), r"causal_linear_scan: phi_k has shape \(2, 7, 1\) = \(B, m, F\), so F=1, but phi_q has F=3"),
    ("phi_k", (2, 7, 12), r"phi_k has shape \(2, 7, 12\) = \(B, m, F\), so F=12, but phi_q has F=3"),
    ("v", (2, 6, 2), r"v has shape \(2, 6, 2\) = \(B, m, d_v\), so m=6, but phi_k has m=7"),
    ("v", (1, 7, 2), r"v has shape \(1, 7, 2\) = \(B, m, d_v\), so B=1, but phi_q has B=2"),
    ("out", (2, 5, 3), r"out has shape \(2, 5, 3\) = \(B, n, d_v\), so d_v=3, but v has d_v=2"),
    ("out", (2, 4, 2), r"out has shape \(2, 4, 2\) = \(B, n, d_v\), so n=4, but phi_q has n=5"),
    ("den", (2, 6), r"den has shape \(2, 6\) = \(B, n\), so n=6, but phi_q has n=5"),
    ("phi_q", (5, 3), r"phi_q must have shape \(B, n, F\), got shape \(5, 3\)"),
])
def test_scan_wrapper_checks_every_shape_it_indexes(rng, name, shape, match):
    a = scan_args(rng)
    a[name] = rng.random(shape)
    with pytest.raises(ValueError, match=match):
        run_scan(a)


def test_scan_wrapper_checks_the_shift(rng):
    a = scan_args(rng)
    with pytest.raises(ValueError, match=r"shift has shape \(2, 6\) = \(B, m\), so m=6, but phi_k has m=7"):
        run_scan(a, shift=np.zeros((2, 6)))


@pytest.mark.parametrize(("name", "shape", "match"), [
    ("phi_k", (2, 5, 1), r"gated_linear_scan: phi_k has shape \(2, 5, 1\) = \(B, n, F\), so F=1, but phi_q has F=3"),
    ("phi_k", (2, 4, 3), r"phi_k has shape \(2, 4, 3\) = \(B, n, F\), so n=4, but phi_q has n=5"),
    ("g", (2, 4), r"g has shape \(2, 4\) = \(B, n\), so n=4, but phi_q has n=5"),
    ("v", (2, 5, 3), r"out has shape \(2, 5, 2\) = \(B, n, d_v\), so d_v=2, but v has d_v=3"),
])
def test_gated_wrapper_checks_every_shape_it_indexes(rng, name, shape, match):
    a = gated_args(rng)
    a[name] = rng.random(shape)
    with pytest.raises(ValueError, match=match):
        run_gated(a)


@pytest.mark.parametrize(("name", "shape", "match"), [
    ("phi_k", (2, 5, 1), r"delta_rule_scan: phi_k has shape \(2, 5, 1\) = \(B, n, F\), so F=1, but phi_q has F=3"),
    ("g", (2, 6), r"beta has shape \(2, 6\) = \(B, n\), so n=6, but phi_q has n=5"),
    ("out", (3, 5, 2), r"out has shape \(3, 5, 2\) = \(B, n, d_v\), so B=3, but phi_q has B=2"),
])
def test_delta_wrapper_checks_every_shape_it_indexes(rng, name, shape, match):
    a = gated_args(rng)
    a[name] = rng.random(shape)
    with pytest.raises(ValueError, match=match):
        run_delta(a)


def test_wrappers_check_types_layout_and_scalars(rng):
    a = scan_args(rng)
    a["v"] = np.ones((2, 7, 2), dtype=np.int64)
    with pytest.raises(TypeError,
                       match=r"causal_linear_scan: v must be a float64 ndarray \(B, m, d_v\), got dtype int64"):
        run_scan(a)
    a = scan_args(rng)
    a["phi_k"] = np.asfortranarray(a["phi_k"])
    with pytest.raises(ValueError, match="phi_k must be C-contiguous"):
        run_scan(a)
    a = scan_args(rng)
    a["out"].flags.writeable = False
    with pytest.raises(ValueError, match="out is written by the kernel and must be writeable"):
        run_scan(a)
    with pytest.raises(TypeError, match="causal_linear_scan: delta must be an int, got True"):
        run_scan(scan_args(rng), delta=True)
    with pytest.raises(ValueError, match="causal_linear_scan: eps must be finite, got nan"):
        run_scan(scan_args(rng), eps=np.nan)
    with pytest.raises(TypeError, match="gated_linear_scan: coupled must be True or False, got 1"):
        run_gated(gated_args(rng), coupled=1)
    a = gated_args(rng)
    a["g"] = [0.5] * 5
    with pytest.raises(TypeError, match=r"delta_rule_scan: beta must be a float64 ndarray \(B, n\), got list"):
        run_delta(a)


@pytest.mark.parametrize("delta", [-3, 0, 2, 9])
def test_scan_python_source_equals_compiled_with_shift_and_offset(rng, delta):
    # What NUMBA_DISABLE_JIT=1 runs: the kernel's own Python function (which has no .py_func then).
    a = scan_args(rng)
    shift = np.maximum.accumulate(3 * rng.standard_normal((2, 7)), axis=-1)
    results = []
    for fn in (_causal_linear_scan, getattr(_causal_linear_scan, "py_func", _causal_linear_scan)):
        out, den = np.empty((2, 5, 2)), np.empty((2, 5))
        fn(a["phi_q"], a["phi_k"], a["v"], shift, 0.25, delta, 0.5, out, den)
        results.append((out, den))
    np.testing.assert_allclose(results[0][0], results[1][0], **TIGHT)
    np.testing.assert_allclose(results[0][1], results[1][1], **TIGHT)


def test_scan_shift_and_offset_follow_their_definition(rng):
    # Row i reads ψ_j e^{C_j − C_{l(i)}} + ω for its keys j ≤ l(i) = min(i + delta, m − 1): a loop over pairs.
    a = scan_args(rng, B=1)
    shift = np.maximum.accumulate(3 * rng.standard_normal((1, 7)), axis=-1)
    omega, delta, eps = 0.25, 1, 0.5
    run_scan(a, delta=delta, eps=eps, shift=shift, offset=omega)
    pq, pk, v, C = a["phi_q"][0], a["phi_k"][0], a["v"][0], shift[0]
    for i in range(5):
        last = min(i + delta, 6)
        num, den = np.zeros(2), eps
        for j in range(last + 1):
            s = sum(pq[i, f] * (pk[j, f] * np.exp(C[j] - C[last]) + omega) for f in range(3))
            num, den = num + s * v[j], den + s
        np.testing.assert_allclose(a["den"][0, i], den, **TIGHT)
        np.testing.assert_allclose(a["out"][0, i], num / den, **TIGHT)


def test_the_kernels_stay_in_bounds_under_numba_boundscheck(tmp_path):
    # The three scan kernels and the chunkwise one, compiled afresh with NUMBA_BOUNDSCHECK=1, on ordinary
    # and edge shapes (B, n, m = 0; F = 1; d_v = 0; delta past either end; chunks that do and do not divide
    # n, with and without decays, a NaN value): any out-of-bounds index would raise. The
    # script first checks that bounds checking is on: the raw kernel with a key map of 1 feature for
    # a query map of 12 (what the wrapper now refuses) must raise IndexError.
    script = textwrap.dedent("""
        import numpy as np
        import numba
        from refattn.kernels import chunk
        from refattn.kernels.delta_scan import delta_rule_scan
        from refattn.kernels.gated_scan import gated_linear_scan
        from refattn.kernels.scan import _causal_linear_scan, causal_linear_scan

        rng = np.random.default_rng(0)
        try:
            _causal_linear_scan(rng.random((1, 4, 12)), rng.random((1, 4, 1)), rng.random((1, 4, 2)),
                                np.zeros((1, 0)), 0.0, 0, 0.0, np.empty((1, 4, 2)), np.empty((1, 4)))
            raise SystemExit("bounds checking is off: the short phi_k was read past its end")
        except (IndexError, SystemError) as error:   # prange re-raises IndexError as SystemError
            assert isinstance(error, IndexError) or isinstance(error.__cause__, IndexError), error
        for B, n, m, F, d_v in [(2, 5, 7, 3, 2), (1, 7, 5, 1, 4), (0, 3, 3, 2, 2), (2, 0, 4, 2, 2),
                                (2, 4, 0, 2, 2), (1, 3, 3, 2, 0)]:
            phi_q, phi_k, v = rng.random((B, n, F)), rng.random((B, m, F)), rng.random((B, m, d_v))
            shift = np.maximum.accumulate(rng.random((B, m)), axis=-1)
            for delta in (-2, 0, m - n, m + 3):
                out, den = np.empty((B, n, d_v)), np.empty((B, n))
                causal_linear_scan(phi_q, phi_k, v, delta, 0.5, out, den)
                causal_linear_scan(phi_q, phi_k, v, delta, 0.5, out, den, shift=shift, offset=0.1)
            phi_k, v, g = rng.random((B, n, F)), rng.random((B, n, d_v)), rng.random((B, n))
            out, den = np.empty((B, n, d_v)), np.empty((B, n))
            for coupled in (True, False):
                gated_linear_scan(phi_q, phi_k, v, g, coupled, 0.5, out, den)
            delta_rule_scan(phi_q, phi_k, v, g, out)
        chunk._chunk_linear = numba.njit(chunk._chunk_linear.py_func)   # serial: prange drops IndexError
        for B, n, F, e in [(2, 9, 3, 2), (1, 4, 1, 1), (0, 3, 2, 2), (2, 0, 2, 2), (1, 5, 2, 0)]:
            q, k, v = rng.random((B, n, F)), rng.random((B, n, F)), rng.random((B, n, e))
            if B > 0 and n > 2 and e > 0:
                v[0, 2, 0] = np.nan                                     # the chunk loop for a non-finite value
            for size in (1, 2, 4, 16):
                N = -(-n // size)
                decays = (rng.random((B, N, size, size)), rng.random((B, N, size)), rng.random((B, N, size)),
                          rng.random((B, N)))
                for d in (None, decays):
                    chunk.chunk_linear(q, k, v, rng.random((B, F, e)), rng.random((B, F)), size, np.empty((B, n, e)),
                                       np.empty((B, n)), decays=d)
    """)
    env = {**os.environ, "NUMBA_BOUNDSCHECK": "1", "NUMBA_CACHE_DIR": str(tmp_path / "numba"),
           "NUMBA_DISABLE_JIT": "0", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
