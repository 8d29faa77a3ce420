"""``python -m refattn bench lowrank``: Nyströmformer's cost as n doubles, through the registry's ``apply``.

Nyströmformer with l = 64 landmarks (one head, d = 64, the default iterative pseudoinverse) at
n = 4096 … 65536: the time of the registry's ``apply``, the peak memory of the call (NumPy
allocations, tracemalloc) and t(n)/t(n/2) beside the ratios of linear (2), n log n, n^1.5 and
quadratic (4) growth. It multiplies softmax(QK̃ᵀ) (n × l) by Ã⁺ (l × l) by softmax(Q̃Kᵀ)V
(l × d_v) and never forms n × n. Targets (issue 13): the time grows linearly, and the peak memory
at n = 65536 stays under 1 GiB.
"""
from __future__ import annotations

import argparse

from ..argtypes import positive_int
from ._measure import check_memory, growth_table

__all__ = ["CASES", "add_arguments", "check_arguments", "run"]

LANDMARKS = 64

#: name -> (registry id, options of apply at length n, how its cost grows)
CASES = {
    "nystromformer": ("nystromformer", lambda n: {"num_landmarks": LANDMARKS},
                      f"l = {LANDMARKS} landmarks: n·l·d for the two thin factors, l³ for the pseudoinverse → n"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``bench lowrank``."""
    parser.add_argument("--sizes", type=positive_int, nargs="+", default=[4096, 8192, 16384, 32768, 65536],
                        metavar="N", help=f"sequence lengths (at least {LANDMARKS}, the landmarks)")
    parser.add_argument("--d", type=positive_int, default=64, help="head width d = d_v")
    parser.add_argument("--repeat", type=positive_int, default=2, help="timed calls per point (best is kept)")


def check_arguments(args: argparse.Namespace) -> None:
    """Raise a one-line ``ValueError`` for a size below the landmarks or that would not fit in memory."""
    for n in args.sizes:
        if n < LANDMARKS:
            raise ValueError(f"n={n} is fewer tokens than the {LANDMARKS} landmarks")
    check_memory({f"n={n}": {"inputs and output": 4 * n * args.d * 8, "factors": 3 * n * LANDMARKS * 8}
                  for n in args.sizes}, "lower --sizes or --d")


def run(args: argparse.Namespace) -> int:
    """Run the benchmark, print the table and the target; return 0, or 1 if the target is missed."""
    return growth_table(CASES, args.sizes, args.d, args.repeat)
