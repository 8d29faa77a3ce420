"""The committed figures/ are what ``python -m refattn figures`` draws, here and on another machine.

``figures`` must write the same bytes whatever kernel OpenBLAS picks for the CPU, however many threads
it runs, whichever SIMD loops NumPy dispatches and whatever CPU Numba compiles for: on a machine where
OpenBLAS picked Haswell instead of SkylakeX it rewrote four of the committed PNGs, whose round-off
quantities had been drawn as data (:func:`refattn.viz.roundoff` is the rule that keeps them out).

Each environment is one subprocess that draws every figure into a temporary folder; the two start
together (on two cores they take about the time of one, ~2 minutes). The other machine is simulated
without touching this process' settings: a machine-wide ``OPENBLAS_CORETYPE`` or ``OPENBLAS_L2_SIZE``
is left as it is for the default run, and only the subprocess gets another kernel, one this CPU runs.
"""
from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import threadpoolctl

from refattn.figures import figure_names

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = ROOT / "figures"
TIMEOUT = 1800                                     # seconds per run: ~100 s on the 2-core CI machine
GENERIC_KERNEL = {"x86_64": "Prescott", "amd64": "Prescott", "aarch64": "ARMV8", "arm64": "ARMV8"}
GENERIC_NAMES = {"prescott", "katmai", "armv8"}    # OpenBLAS reports its Prescott kernel as Katmai in some builds


def _openblas_kernel() -> str | None:
    """The kernel OpenBLAS picked for NumPy in this process (threadpoolctl), None without OpenBLAS."""
    kernels = [info.get("architecture") for info in threadpoolctl.threadpool_info()
               if info["internal_api"] == "openblas"]
    return kernels[0] if kernels else None


def _other_kernel() -> tuple[str | None, str]:
    """(OPENBLAS_CORETYPE for the other machine, or None; why None).

    The generic kernel of the CPU family (Prescott: SSE3, run by every x86-64 CPU; ARMV8 on 64-bit ARM),
    unless OpenBLAS already runs it here: then no other kernel is sure to run on this CPU.
    """
    default, machine = _openblas_kernel(), platform.machine().lower()
    if default is None:
        return None, "NumPy is not linked to OpenBLAS: no kernel to choose"
    if machine not in GENERIC_KERNEL:
        return None, f"no OpenBLAS kernel known to run on every {machine} CPU"
    if default.lower() in GENERIC_NAMES:
        return None, f"OpenBLAS already runs the generic kernel here ({default})"
    return GENERIC_KERNEL[machine], ""


def _environment(tmp: Path, *, other: bool) -> dict[str, str]:
    """This process' environment with the checkout first on the path; ``other``: another machine's settings."""
    env = dict(os.environ, MPLBACKEND="Agg",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    if not other:
        return env
    kernel, _ = _other_kernel()
    if kernel is not None:
        env["OPENBLAS_CORETYPE"] = kernel
    env["OPENBLAS_NUM_THREADS"] = "1"
    avx512 = [f for f in np.show_config(mode="dicts")["SIMD Extensions"]["found"]    # NumPy's AVX-512 loops
              if f == "X86_V4" or f.startswith("AVX512")]
    if avx512:
        env["NPY_DISABLE_CPU_FEATURES"] = " ".join(filter(None, [os.environ.get("NPY_DISABLE_CPU_FEATURES"), *avx512]))
    env["NUMBA_CPU_NAME"] = "generic"
    env["NUMBA_CACHE_DIR"] = str(tmp / "numba-generic")             # code compiled for another CPU: its own cache
    return env


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Both environments' ``figures --out`` subprocesses, started together: {name: (process, folder)}."""
    started = {}
    for name in ("default", "other"):
        tmp = tmp_path_factory.mktemp(name)
        process = subprocess.Popen([sys.executable, "-m", "refattn", "figures", "--out", str(tmp / "figures")],
                                   cwd=ROOT, env=_environment(tmp, other=name == "other"),
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        started[name] = process, tmp / "figures"
    yield started
    for process, _ in started.values():
        if process.poll() is None:
            process.kill()
            process.wait()


def _differing(run) -> list[str]:
    """Wait for one run; the figures whose bytes differ from the committed ones (or that are missing)."""
    process, out = run
    _, stderr = process.communicate(timeout=TIMEOUT)
    assert process.returncode == 0, stderr[-3000:]
    names = [f"{name}.png" for name in figure_names()]
    assert sorted(p.name for p in out.iterdir()) == sorted(names)
    return [name for name in names
            if not (COMMITTED / name).is_file() or (out / name).read_bytes() != (COMMITTED / name).read_bytes()]


def test_the_default_environment_draws_the_committed_figures(runs):
    """The main job (``figures`` in this checkout) leaves every committed PNG as it is."""
    differing = _differing(runs["default"])
    assert not differing, f"`python -m refattn figures` redraws {len(differing)} committed figures: {differing}"


def test_another_machine_draws_the_committed_figures(runs):
    """Another BLAS kernel, one thread, no AVX-512 loops in NumPy and Numba's generic CPU: the same bytes."""
    differing = _differing(runs["other"])
    kernel, why = _other_kernel()
    settings = (f"OPENBLAS_CORETYPE={kernel}" if kernel else f"OpenBLAS' own kernel ({why})") + \
        ", OPENBLAS_NUM_THREADS=1, NumPy without AVX-512, NUMBA_CPU_NAME=generic"
    assert not differing, f"with {settings}, `figures` draws {len(differing)} figures differently: {differing}"


def test_the_other_machine_runs_another_blas_kernel(tmp_path):
    """Otherwise the test above would not vary the kernel, which is what changed the figures in issue 37."""
    kernel, why = _other_kernel()
    if kernel is None:
        pytest.skip(f"the other machine keeps this kernel: {why}")
    code = ("import numpy, threadpoolctl; print(next(i['architecture'] for i in threadpoolctl.threadpool_info() "
            "if i['internal_api'] == 'openblas'))")
    other = subprocess.run([sys.executable, "-c", code], env=_environment(tmp_path, other=True), check=True,
                           capture_output=True, text=True).stdout.strip()
    assert other.lower() in GENERIC_NAMES and other != _openblas_kernel(), (other, _openblas_kernel())
