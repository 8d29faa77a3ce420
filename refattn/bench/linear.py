"""``python -m refattn bench linear``: the causal scan is linear in n, with a state independent of n.

Causal linear attention with φ = elu + 1 (F = d = d_v = 64, one head, float64) by the Numba scan
(O(n·F·d_v) time, an F × d_v state) and by the quadratic left product (O(n²·F), an n × n matrix)
where it fits (n <= --quadratic-max). Prints time, GFLOP/s (scan: 4·n·F·d_v flops), peak memory
beyond the inputs, the quadratic/scan ratio and t(n)/t(n/2). Target (issue 4):
t(65536)/t(8192) <= 10.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from ..cli import non_negative_int, positive_int
from ..linear import elu_feature_map, linear_attention
from ._measure import best_time, check_memory, mib, peak_memory

__all__ = ["add_arguments", "check_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``bench linear``."""
    parser.add_argument("--sizes", type=positive_int, nargs="+",
                        default=[1024, 2048, 4096, 8192, 16384, 32768, 65536], metavar="N",
                        help="sequence lengths (refused, naming the GiB, if a run would not fit in memory)")
    parser.add_argument("--d", type=positive_int, default=64, help="d = d_v = F")
    parser.add_argument("--repeat", type=positive_int, default=3, help="timed calls per point (best is kept)")
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
    print(f"{'n':>7}{'scan s':>10}{'GFLOP/s':>9}{'scan MiB':>10}{'quadratic s':>13}{'quad MiB':>10}"
          f"{'quad/scan':>11}{'t(n)/t(n/2)':>13}")
    times = {}
    previous = None
    for n in args.sizes:
        q, k, v = (rng.standard_normal((n, d)) for _ in range(3))
        def scan(q=q, k=k, v=v):
            return linear_attention(q, k, v, elu_feature_map, causal=True, method="scan")
        def quadratic(q=q, k=k, v=v):
            return linear_attention(q, k, v, elu_feature_map, causal=True)
        times[n] = t_scan = best_time(scan, args.repeat)
        _, mem_scan = peak_memory(scan)
        if n <= args.quadratic_max:
            t_quad = best_time(quadratic, 1)
            _, mem_quad = peak_memory(quadratic)
            quad = f"{t_quad:13.3f}{mib(mem_quad):>10}{t_quad / t_scan:11.1f}"
        else:
            quad = f"{'—':>13}{'—':>10}{'—':>11}"
        ratio = f"{t_scan / times[previous]:.2f}" if previous else "—"
        gflops = 4 * n * d * d / t_scan / 1e9
        print(f"{n:>7}{t_scan:>10.4f}{gflops:>9.2f}{mib(mem_scan):>10}{quad}{ratio:>13}")
        previous = n
    print("scan memory = features φ(Q), φ(K) (2·n·F) + output (n·d_v) + denominators: linear in n; "
          "the recurrent state is one F × d_v matrix per sequence, whatever n is")
    if 8192 in times and 65536 in times:
        ratio = times[65536] / times[8192]
        print(f"target: scan t(65536)/t(8192) = {ratio:.2f} (<= 10 for linear scaling, 8 exactly): "
              f"{'met' if ratio <= 10 else 'MISSED'}")
        return 0 if ratio <= 10 else 1
    return 0
