"""Timing and peak-memory helpers for the benchmarks, and the memory check of their arguments."""
from __future__ import annotations

import ctypes
import functools
import math
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..kernels.blas import openblas_libraries

PATTERN_BYTES_PER_ROW = 16 * 2**10
"""Bytes per query row of building a sparse pattern and running the CSR kernel on it, at most.

Measured with tracemalloc (one head, d = 64, n = 4096 and 8192): band w = 128 2.3-3.6 KiB, BigBird
b = 64 8.1 KiB, Longformer w = 256 with 2 globals 9.4 KiB.
"""


def extra_target(value, default, sizes: list[int] | None):
    """The setting of a benchmark's extra target (a size of its own, a sweep): ``--sizes`` runs only what it asks.

    ``value`` when the option was given; otherwise ``default`` when ``--sizes`` was not given (``sizes`` None)
    and None (skip) when it was.
    """
    if value is not None:
        return value
    return default if sizes is None else None


def best_time(fn: Callable[[], object], repeat: int) -> float:
    """Best wall time of ``repeat`` calls, in seconds (the least disturbed by other load)."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def best_times(calls: dict[str, Callable[[], object]], repeat: int, settle: float = 0.3) -> dict[str, float]:
    """Best wall time of each call over ``repeat`` rounds, in seconds; rounds interleave the calls.

    Interleaving spreads a change of load on a shared machine over every contender, and each call
    starts ``settle`` seconds after the previous one: thread pools keep spinning for a while after
    their last job (OpenBLAS's, torch's OpenMP, Numba's), and a contender started among them runs
    on fewer free cores. Measured here: torch just before made the blocked causal kernel 1.3x
    torch's time instead of 0.7x.
    """
    best = dict.fromkeys(calls, float("inf"))
    for _ in range(repeat):
        for name, fn in calls.items():
            time.sleep(settle)
            start = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def gemm_rate(size: int = 1024, repeat: int = 3) -> float:
    """The machine's float64 matrix-product rate now, in GFLOP/s: the best of ``repeat`` (size × size) products.

    ``np.dot`` runs BLAS with its own threads; the rate is the ceiling a tiled kernel is compared with.
    """
    a = np.random.default_rng(0).standard_normal((size, size))
    out = np.empty_like(a)
    np.dot(a, a, out)                                              # threads started, pages touched
    return 2 * size**3 / best_time(lambda: np.dot(a, a, out), repeat) / 1e9


def machine() -> str:
    """The CPU and the BLAS libraries in use, for the head of a benchmark's output.

    The CPU's model name, family and model numbers and whether it has AVX-512, from ``/proc/cpuinfo``;
    for each OpenBLAS loaded (NumPy's, and SciPy's, which the kernels' ``np.dot`` calls once loaded),
    its own ``get_config`` and ``get_corename`` (the kernel its DYNAMIC_ARCH build chose for this
    CPU). "unknown" where they cannot be read (not Linux, another BLAS).
    """
    fields = {}
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    cpu = fields.get("model name", "unknown")
    if "cpu family" in fields:
        cpu += f" (family {fields['cpu family']} model {fields.get('model', '?')}"
        cpu += ", AVX-512)" if "avx512f" in fields.get("flags", "").split() else ", no AVX-512)"
    blas = []
    for library in openblas_libraries():
        config, core = library.function("get_config"), library.function("get_corename")
        config.restype = core.restype = ctypes.c_char_p
        blas.append(f"{config().decode().strip()} (kernel {core().decode()}; {Path(library.path).name})")
    return f"CPU {cpu}; BLAS {'; '.join(blas) or 'unknown'}"


def peak_memory(fn: Callable[[], object]) -> tuple[object, int]:
    """Run ``fn`` once; return its result and the peak of memory allocated meanwhile, in bytes.

    Counts NumPy's allocations (traced by ``tracemalloc``); the kernels allocate their outputs
    through NumPy before the call and only O(row) scratch inside.
    """
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    try:
        result = fn()
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    return result, peak


def mib(nbytes: float) -> str:
    """Bytes as MiB, for tables."""
    return f"{nbytes / 2**20:.1f}"


def available_memory() -> int | None:
    """Bytes of memory a new allocation can take now (``MemAvailable`` of /proc/meminfo), or None if unknown."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def check_memory(needs: dict[str, dict[str, int]], advice: str) -> None:
    """Raise a one-line ``ValueError`` naming the GiB unless every run's estimated peak fits in memory now.

    ``needs[label]`` is the estimated peak of one run (label e.g. "n=4096"), in bytes, by what takes
    them; ``advice`` names the options that lower it. Where the available memory is unknown (not
    Linux), every run passes.
    """
    available = available_memory()
    if available is None or not needs:
        return
    label, parts = max(needs.items(), key=lambda item: sum(item[1].values()))
    need = sum(parts.values())
    if need > available:
        detail = ", ".join(f"{what} {nbytes / 2**30:.3g}" for what, nbytes in parts.items())
        raise ValueError(f"{label} needs about {need / 2**30:.3g} GiB ({detail} GiB), more than the "
                         f"{available / 2**30:.3g} GiB of memory available now; {advice}")


def growth_table(cases: dict, sizes: list[int], d: int, repeat: int, results: dict | None = None) -> int:
    """Time a registry record's ``apply`` as n doubles, print t(n)/t(n/2) and the peak memory; 0 if every peak at
    n = 65536 stays under 1 GiB, else 1.

    ``cases[name] = (registry id, options(n) -> dict, how its cost grows)``; each call has one head of width
    ``d``, ``rng=0`` and the default method (k = q for shared-QK attention). The peak is NumPy's allocations
    during the call (tracemalloc), inputs excluded. ``results``, if given, receives ``results[name][n] = (seconds,
    peak bytes)``.
    """
    from .. import registry

    rng = np.random.default_rng(0)
    print(f"{'mechanism':<16}{'n':>7}{'apply s':>9}{'peak MiB':>10}{'t(n)/t(n/2)':>12}   growth per doubling: "
          "n, n log n, n^1.5, n^2")
    ok = True
    for name, (mech_id, options, why) in cases.items():
        record = registry.get(mech_id)
        _apply(record, *rng.standard_normal((3, 64, d)), options(64))   # compile (or load) the kernels
        previous, peaks = None, {}
        for n in sizes:
            q, k, v = rng.standard_normal((3, n, d))
            call = functools.partial(_apply, record, q, k, v, options(n))
            _, peaks[n] = peak_memory(call)
            seconds = best_time(call, repeat)
            if results is not None:
                results.setdefault(name, {})[n] = (seconds, peaks[n])
            growth = (f"{seconds / previous:>12.2f}   2, {2 * math.log(n) / math.log(n / 2):.2f}, 2.83, 4"
                      if previous else f"{'—':>12}")
            print(f"{name:<16}{n:>7}{seconds:>9.3f}{mib(peaks[n]):>10}{growth}", flush=True)
            previous = seconds
        print(f"  {name}: {why}")
        if 65536 in peaks:
            ok &= peaks[65536] < 2**30
            print(f"target: {name} peak memory at n = 65536 = {mib(peaks[65536])} MiB (< 1024): "
                  f"{'met' if peaks[65536] < 2**30 else 'MISSED'}")
    return 0 if ok else 1


def _apply(record, q, k, v, options) -> None:
    record.apply(q, q if record.shared_qk else k, v, rng=0, **options)
