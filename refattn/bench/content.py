"""``python -m refattn bench content``: Routing and Reformer cost as n doubles, through the registry's ``apply``.

For each content-based mechanism at n = 4096 … 65536 (one head, d = 64), it prints the time of
the registry's ``apply`` with its defaults (the pairs chosen from the content, then the CSR
kernel), the peak memory of the call (NumPy allocations, tracemalloc) and t(n)/t(n/2), beside the
ratios that n log n (2·log n / log(n/2)), n^1.5 (2.83) and quadratic (4) growth would give.
Targets (issue 12): the growth of each is stated from its measured ratios, and peak memory at
n = 65536 stays under 1 GiB.
"""
from __future__ import annotations

import argparse

from ..argtypes import positive_int
from ._measure import check_memory, growth_table

__all__ = ["CASES", "add_arguments", "check_arguments", "run"]

#: name -> (registry id, options of apply at length n, how its cost grows)
CASES = {
    "routing": ("routing", lambda n: {},
                "k = ⌈√n⌉ clusters (apply's default, the paper's k = √n): n·k·d to route, about n²/k·d to attend, "
                "so n^1.5"),
    "reformer_lsh": ("reformer_lsh", lambda n: {},
                     "b = 2⌊n/128⌋ buckets (trax's count, hashed as two factors above 128): hashing n·√b·d, "
                     "sorting n log n, chunks n·c·d with c = ⌈2n/b⌉ → about n log n"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``bench content``."""
    parser.add_argument("--sizes", type=positive_int, nargs="+", default=[4096, 8192, 16384, 32768, 65536],
                        metavar="N", help="sequence lengths")
    parser.add_argument("--d", type=positive_int, default=64, help="head width d = d_v")
    parser.add_argument("--repeat", type=positive_int, default=2, help="timed calls per point (best is kept)")
    parser.add_argument("--only", nargs="+", choices=list(CASES), metavar="CASE",
                        help=f"run only these mechanisms (of {', '.join(CASES)})")


def check_arguments(args: argparse.Namespace) -> None:
    """Raise a one-line ``ValueError`` if a size would not fit in memory (inputs, output and pairs)."""
    check_memory({f"n={n}": {"inputs and output": 4 * n * args.d * 8, "pairs and kernel": 2**30} for n in args.sizes},
                 "lower --sizes or --d")


def run(args: argparse.Namespace) -> int:
    """Run the benchmark, print the table and the targets; return 0, or 1 if a target is missed."""
    return growth_table({name: CASES[name] for name in args.only or CASES}, args.sizes, args.d, args.repeat)
