"""``python -m refattn bench beyond``: the attention-free mixers and hybrids as n doubles, beside softmax attention.

Each registry entry of the ``beyond`` family runs with the option it offers for long inputs (one head,
d = 64, ``rng=0``): FNet's FFT, AFT-simple's causal scan, top-k's query chunks of 64, XCiT, Skyformer with
l = 64 landmarks, Scatterbrain with one bucket per 32 tokens and its pair list, Long-Short's sparse path
(window 16, rank 8), FLASH's chunks of 64. gMLP and Sinkformer hold an n × m matrix by definition and are
left out. Softmax attention (the blocked online-softmax kernel, causal=False) runs in the same process as
the baseline. Printed: the time of each call, the peak memory (NumPy's allocations, tracemalloc),
t(n)/t(n/2), and each entry's time over softmax's at the same n. Target (issue 17): at the largest n every
entry's peak memory is under 1 GiB and grows linearly (at most 1.25 × the ratio of the last two sizes).
"""
from __future__ import annotations

import argparse

from ..argtypes import positive_int
from ._measure import check_memory, growth_table, mib

__all__ = ["CASES", "add_arguments", "check_arguments", "run"]

LANDMARKS, CHUNK, WINDOW, RANK, PER_BUCKET = 64, 64, 16, 8, 32

#: name -> (registry id, options of apply at length n, how its cost grows)
CASES = {
    "softmax": ("sdpa", lambda n: {"method": "blocked"}, "the baseline: n²·d time, O(n·d) memory (online softmax)"),
    "fnet": ("fnet", lambda n: {}, "two FFTs: n·d·log(n·d)"),
    "aft-simple": ("aft", lambda n: {"kind": "simple", "causal": True, "method": "scan"},
                   "a running sum per channel: n·d"),
    "topk": ("topk", lambda n: {"method": "chunk", "chunk_size": CHUNK},
             f"every score is still computed: n²·d time, chunks of {CHUNK} queries: O({CHUNK}·n) memory"),
    "xcit": ("xcit", lambda n: {}, "a d × d map: n·d²"),
    "skyformer": ("skyformer", lambda n: {"num_landmarks": LANDMARKS},
                  f"l = {LANDMARKS} landmarks: n·l·d + l³"),
    "scatterbrain": ("scatterbrain", lambda n: {"num_buckets": max(2, 2 * (n // (2 * PER_BUCKET))), "method": "pairs"},
                     f"a bucket per {PER_BUCKET} tokens (support ~ n·{PER_BUCKET}·rounds) plus r features: n"),
    "long_short": ("long_short", lambda n: {"method": "csr", "window": WINDOW, "rank": RANK},
                   f"window {WINDOW} + rank {RANK}: n·(w + r)·d"),
    "flash": ("gau", lambda n: {"chunk": CHUNK}, f"chunks of {CHUNK}: n·c·s quadratic + n·s·e linear"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``bench beyond``."""
    parser.add_argument("--sizes", type=positive_int, nargs="+", default=[2048, 4096, 8192, 16384],
                        metavar="N", help=f"sequence lengths (at least {LANDMARKS}, Skyformer's landmarks)")
    parser.add_argument("--d", type=positive_int, default=64, help="head width d = d_v")
    parser.add_argument("--repeat", type=positive_int, default=2, help="timed calls per point (best is kept)")


def check_arguments(args: argparse.Namespace) -> None:
    """Raise a one-line ``ValueError`` for a size below the landmarks or that would not fit in memory."""
    for n in args.sizes:
        if n < LANDMARKS:
            raise ValueError(f"n={n} is fewer tokens than Skyformer's {LANDMARKS} landmarks")
    check_memory({f"n={n}": {"inputs and output": 4 * n * args.d * 8,
                             "Scatterbrain's pairs": 2 * n * PER_BUCKET * 2 * (args.d + 16) * 8} for n in args.sizes},
                 "lower --sizes or --d")


def run(args: argparse.Namespace) -> int:
    """Run the benchmark, print the tables and the target; return 0, or 1 if the target is missed."""
    results: dict = {}
    growth_table(CASES, args.sizes, args.d, args.repeat, results)
    print("\ntime over softmax's (blocked kernel) at the same n, measured in this process:")
    print(f"{'mechanism':<16}" + "".join(f"{n:>9}" for n in args.sizes))
    for name in CASES:
        if name != "softmax":
            print(f"{name:<16}" + "".join(f"{results[name][n][0] / results['softmax'][n][0]:>9.2f}"
                                          for n in args.sizes))
    largest = max(args.sizes)
    previous = max((n for n in args.sizes if n < largest), default=None)
    ok = True
    for name in CASES:
        peak = results[name][largest][1]
        growth = peak / max(results[name][previous][1], 1) if previous else 1.0
        met = peak < 2**30 and (previous is None or growth <= 2.5 * largest / (2 * previous))
        ok &= met
        print(f"target: {name} peak memory at n = {largest} = {mib(peak)} MiB (< 1024), growth from n = {previous} "
              f"×{growth:.2f} (linear: ×{largest / previous if previous else 1:.0f}): {'met' if met else 'MISSED'}")
    return 0 if ok else 1
