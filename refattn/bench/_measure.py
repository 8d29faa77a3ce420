"""Timing and peak-memory helpers for the benchmarks."""
from __future__ import annotations

import time
import tracemalloc
from collections.abc import Callable


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
