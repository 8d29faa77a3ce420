"""``python -m refattn bench sparse``: the CSR kernel's time and memory follow the kept pairs; bsr beside it.

For band (w = 128), BigBird and Longformer patterns at n = 4096 … 65536 (one head, d = 64), it
prints the pattern's nnz, the time to build it, the CSR kernel's time and GFLOP/s (4·nnz·d flops:
a dot product and a weighted sum per kept pair), the block-sparse (bsr) kernel's time and GFLOP/s
on the same pairs (the same count: the padding of partial tiles is not counted) and its speed-up
over csr, the peak memory of pattern + csr kernel, dense masked attention's time where n × n
fits (n <= --dense-max), and t(n)/t(n/2) of csr. The machine's float64 GEMM rate, measured in the
same run, is printed first. Targets: t(65536)/t(8192) <= 10 for the band, peak memory at
n = 65536 under 1 GiB (issue 3), and bsr at least 4× faster than csr on BigBird (b = 64) at
n = 65536 (issue 20).
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from ..argtypes import non_negative_int, positive_int
from ..sparse import SparsePattern, band_pattern, sparse_attention
from ._measure import PATTERN_BYTES_PER_ROW, best_time, best_times, check_memory, gemm_rate, mib, peak_memory

__all__ = ["add_arguments", "check_arguments", "run"]


BIGBIRD_BLOCK = 64


def _builders() -> dict:
    from ..sparse.bigbird import bigbird_pattern
    from ..sparse.longformer import longformer_pattern

    return {
        "band w=128": lambda n: band_pattern(n, 128),
        f"bigbird b={BIGBIRD_BLOCK}": lambda n: bigbird_pattern(n, block_size=BIGBIRD_BLOCK, rng=0),
        "longformer w=256 g=2": lambda n: longformer_pattern(n, 256, global_indices=(0, n - 1)),
    }


def _bigbird_layout(n: int) -> None:
    """Raise BigBird's own ``ValueError`` if it cannot lay out n tokens (cheap: its n/64 × n/64 block layout)."""
    from ..sparse.bigbird import bigbird_block_layout

    if n % BIGBIRD_BLOCK:
        raise ValueError(f"n={n} is not a multiple of the block size {BIGBIRD_BLOCK}")
    bigbird_block_layout(n // BIGBIRD_BLOCK, rng=0)


DENSE_ARRAYS = 5
"""Float64 (n, n) arrays dense masked attention holds at once, at most (tracemalloc: 4.1)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``bench sparse``."""
    parser.add_argument("--sizes", type=positive_int, nargs="+", default=[4096, 8192, 16384, 32768, 65536],
                        metavar="N", help="sequence lengths; every pattern must take each of them (BigBird b=64: "
                        "n = 128 or a multiple of 64 from 512 on), and each run must fit in memory, else the "
                        "command is refused, saying why")
    parser.add_argument("--d", type=positive_int, default=64, help="head width d = d_v")
    parser.add_argument("--repeat", type=positive_int, default=3, help="timed calls per point (best is kept)")
    parser.add_argument("--dense-max", type=non_negative_int, default=8192,
                        help="largest n for dense masked attention (0: never)")


def check_arguments(args: argparse.Namespace) -> None:
    """Raise a one-line ``ValueError`` for a size a pattern cannot take or that would not fit in memory.

    The estimate of size n: q, k, v and the output (4 float64 (n, d) arrays), the pattern and the
    kernel (:data:`~refattn.bench._measure.PATTERN_BYTES_PER_ROW` per row) and, where n <=
    ``--dense-max``, :data:`DENSE_ARRAYS` (n, n) arrays of dense masked attention.
    """
    needs = {}
    for n in args.sizes:
        needs[f"n={n}"] = {"inputs and output": 4 * n * args.d * 8, "pattern and kernel": PATTERN_BYTES_PER_ROW * n}
        if n <= args.dense_max:
            needs[f"n={n}"]["dense masked attention"] = DENSE_ARRAYS * n * n * 8
    check_memory(needs, "lower --sizes, --d or --dense-max")
    for n in args.sizes:
        try:
            _bigbird_layout(n)
        except ValueError as error:
            raise ValueError(f"pattern 'bigbird b={BIGBIRD_BLOCK}' cannot take n={n}: {error}") from None


def run(args: argparse.Namespace) -> int:
    """Run the benchmark, print the table and the targets; return 0, or 1 if a target is missed."""
    rng = np.random.default_rng(0)
    d = args.d
    t0 = time.perf_counter()
    tiny = band_pattern(8, 1)
    for method in ("csr", "bsr"):
        sparse_attention(*rng.standard_normal((3, 8, d)), tiny, method=method)   # compile (or load the cache)
    print(f"CSR and BSR kernels ready in {time.perf_counter() - t0:.2f} s (first call: compile or load from cache)")
    print(f"float64 GEMM rate (1024 × 1024 np.dot, BLAS threads): {gemm_rate():.1f} GFLOP/s")
    print(f"{'pattern':<22}{'n':>7}{'nnz':>12}{'build s':>9}{'csr s':>9}{'GFLOP/s':>9}{'bsr s':>9}{'GFLOP/s':>9}"
          f"{'csr/bsr':>9}{'peak MiB':>10}{'dense s':>9}{'dense/csr':>10}{'t(n)/t(n/2)':>12}")
    times: dict[tuple[str, int], float] = {}
    peaks: dict[tuple[str, int], int] = {}
    for name, build in _builders().items():
        previous = None
        for n in args.sizes:
            q, k, v = (rng.standard_normal((n, d)) for _ in range(3))
            t_build = best_time(lambda build=build, n=n: build(n), 1)
            pattern, peak = peak_memory(lambda build=build, n=n, q=q, k=k, v=v:
                                        _build_and_attend(build, n, q, k, v))
            timed = best_times({method: lambda q=q, k=k, v=v, p=pattern, method=method:
                                sparse_attention(q, k, v, p, method=method) for method in ("csr", "bsr")},
                               args.repeat, settle=0.0)
            t_csr, t_bsr = timed["csr"], timed["bsr"]
            times[name + " bsr", n] = t_bsr
            t_dense = (best_time(lambda q=q, k=k, v=v, p=pattern: sparse_attention(q, k, v, p), 1)
                       if n <= args.dense_max else None)
            times[name, n], peaks[name, n] = t_csr, peak
            gflops = 4 * pattern.nnz * d / t_csr / 1e9
            ratio = f"{t_csr / times[name, previous]:.2f}" if previous else "—"
            dense = f"{t_dense:9.3f}{t_dense / t_csr:10.1f}" if t_dense else f"{'—':>9}{'—':>10}"
            print(f"{name:<22}{n:>7}{pattern.nnz:>12}{t_build:>9.2f}{t_csr:>9.3f}{gflops:>9.2f}{t_bsr:>9.3f}"
                  f"{4 * pattern.nnz * d / t_bsr / 1e9:>9.2f}{t_csr / t_bsr:>9.1f}{mib(peak):>10}{dense}{ratio:>12}")
            previous = n
    return _targets(times, peaks, args.sizes)


def _build_and_attend(build, n, q, k, v) -> SparsePattern:
    pattern = build(n)
    sparse_attention(q, k, v, pattern, method="csr")
    return pattern


def _targets(times, peaks, sizes) -> int:
    ok = True
    band = "band w=128"
    if 8192 in sizes and 65536 in sizes:
        ratio = times[band, 65536] / times[band, 8192]
        ok &= ratio <= 10
        print(f"target: band t(65536)/t(8192) = {ratio:.2f} (<= 10 for linear scaling, 8 exactly): "
              f"{'met' if ratio <= 10 else 'MISSED'}")
    if 65536 in sizes:
        bigbird = f"bigbird b={BIGBIRD_BLOCK}"
        speedup = times[bigbird, 65536] / times[bigbird + " bsr", 65536]
        ok &= speedup >= 4
        print(f"target: BigBird (b = {BIGBIRD_BLOCK}) at n = 65536, csr time / bsr time = {speedup:.1f} (>= 4): "
              f"{'met' if speedup >= 4 else 'MISSED'}")
        worst = max(peaks[name, 65536] for name, n in peaks if n == 65536)
        ok &= worst < 2**30
        print(f"target: peak memory at n = 65536 (pattern + kernel, all patterns) = {mib(worst)} MiB "
              f"(< 1024): {'met' if worst < 2**30 else 'MISSED'}")
    return 0 if ok else 1
