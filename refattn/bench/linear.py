"""``python -m refattn bench linear``: the causal scan is linear in n, with a state independent of n.

Causal linear attention with φ = elu + 1 (F = d = d_v = 64, one head, float64) by the Numba scan
(O(n·F·d_v) time, an F × d_v state) and by the quadratic left product (O(n²·F), an n × n matrix)
where it fits (n <= --quadratic-max). Prints time, GFLOP/s (scan: 4·n·F·d_v flops), peak memory
beyond the inputs, the quadratic/scan ratio and t(n)/t(n/2). Target (issue 4):
t(65536)/t(8192) <= 10.

Beside the scan, in the same run, the chunkwise form (``method="chunk"``, matrix products; its own
flops: 2·n·C·(F + d_v + 1) within chunks + 4·n·F·(d_v + 1) for the states) and the machine's float64
GEMM rate (a 1024³ product). Target (issue 20): the chunk form >= 5× faster than the scan at n = 65536.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from ..cli import non_negative_int, positive_int
from ..linear import elu_feature_map, linear_attention
from ..linear.chunk import DEFAULT_CHUNK_SIZE
from ._measure import best_time, check_memory, gemm_rate, mib, peak_memory

__all__ = ["add_arguments", "check_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``bench linear``."""
    parser.add_argument("--sizes", type=positive_int, nargs="+",
                        default=[1024, 2048, 4096, 8192, 16384, 32768, 65536], metavar="N",
                        help="sequence lengths (refused, naming the GiB, if a run would not fit in memory)")
    parser.add_argument("--d", type=positive_int, default=64, help="d = d_v = F")
    parser.add_argument("--repeat", type=positive_int, default=3, help="timed calls per point (best is kept)")
    parser.add_argument("--chunk-size", type=positive_int, default=DEFAULT_CHUNK_SIZE,
                        help="chunk size C of method='chunk'")
    parser.add_argument("--quadratic-max", type=non_negative_int, default=8192,
                        help="largest n for the quadratic path (0: never)")


QUADRATIC_ARRAYS = 3
"""Float64 (n, n) arrays the quadratic left product holds at once, at most (tracemalloc: 2.2)."""


def check_arguments(args: argparse.Namespace) -> None:
    """Raise a one-line ``ValueError`` if a size would not fit in the memory available now.

    The estimate of size n: 8 float64 (n, d) arrays (q, k, v, the features, the output) and, where
    n <= ``--quadratic-max``, :data:`QUADRATIC_ARRAYS` (n, n) arrays.
    """
    needs = {}
    for n in args.sizes:
        needs[f"n={n}"] = {"inputs, features and output": 8 * n * args.d * 8}
        if n <= args.quadratic_max:
            needs[f"n={n}"]["quadratic path"] = QUADRATIC_ARRAYS * n * n * 8
    check_memory(needs, "lower --sizes, --d or --quadratic-max")


def run(args: argparse.Namespace) -> int:
    """Run the benchmark, print the table and the target; return 0, or 1 if it is missed."""
    rng = np.random.default_rng(0)
    d = args.d
    t0 = time.perf_counter()
    linear_attention(*rng.standard_normal((3, 8, d)), elu_feature_map, causal=True, method="scan")
    print(f"scan kernel ready in {time.perf_counter() - t0:.2f} s (first call: compile or load from cache)")
    gemm = gemm_rate(1024, args.repeat)
    C = args.chunk_size
    print(f"machine float64 GEMM rate (1024³): {gemm:.1f} GFLOP/s; chunk size C = {C}")
    print(f"{'n':>7}{'scan s':>10}{'GFLOP/s':>9}{'scan MiB':>10}{'chunk s':>10}{'GFLOP/s':>9}{'scan/chunk':>12}"
          f"{'quadratic s':>13}{'quad MiB':>10}{'quad/scan':>11}{'t(n)/t(n/2)':>13}")
    times, speedups = {}, {}
    previous = None
    for n in args.sizes:
        q, k, v = (rng.standard_normal((n, d)) for _ in range(3))
        def scan(q=q, k=k, v=v):
            return linear_attention(q, k, v, elu_feature_map, causal=True, method="scan")
        def quadratic(q=q, k=k, v=v):
            return linear_attention(q, k, v, elu_feature_map, causal=True)
        def chunk(q=q, k=k, v=v):
            return linear_attention(q, k, v, elu_feature_map, causal=True, method="chunk", chunk_size=C)
        times[n] = t_scan = best_time(scan, args.repeat)
        t_chunk = best_time(chunk, args.repeat)
        speedups[n] = t_scan / t_chunk
        chunk_flops = 2 * n * C * (2 * d + 1) + 4 * n * d * (d + 1)
        _, mem_scan = peak_memory(scan)
        if n <= args.quadratic_max:
            t_quad = best_time(quadratic, 1)
            _, mem_quad = peak_memory(quadratic)
            quad = f"{t_quad:13.3f}{mib(mem_quad):>10}{t_quad / t_scan:11.1f}"
        else:
            quad = f"{'—':>13}{'—':>10}{'—':>11}"
        ratio = f"{t_scan / times[previous]:.2f}" if previous else "—"
        gflops = 4 * n * d * d / t_scan / 1e9
        print(f"{n:>7}{t_scan:>10.4f}{gflops:>9.2f}{mib(mem_scan):>10}{t_chunk:>10.4f}"
              f"{chunk_flops / t_chunk / 1e9:>9.2f}{speedups[n]:>12.1f}{quad}{ratio:>13}")
        previous = n
    print("scan memory = features φ(Q), φ(K) (2·n·F) + output (n·d_v) + denominators: linear in n; "
          "the recurrent state is one F × d_v matrix per sequence, whatever n is")
    missed = False
    if 8192 in times and 65536 in times:
        ratio = times[65536] / times[8192]
        print(f"target: scan t(65536)/t(8192) = {ratio:.2f} (<= 10 for linear scaling, 8 exactly): "
              f"{'met' if ratio <= 10 else 'MISSED'}")
        missed = ratio > 10
    if 65536 in speedups:
        print(f"target: chunk >= 5x faster than the scan at n = 65536: {speedups[65536]:.1f}x, "
              f"{'met' if speedups[65536] >= 5 else 'MISSED'}")
        missed = missed or speedups[65536] < 5
    return 1 if missed else 0
