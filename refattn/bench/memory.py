"""``python -m refattn bench memory``: every default at the lengths people test, each in a process of its own.

Each case runs in a fresh Python process, which reports the wall time of the call, the resident
memory before it (inputs made, kernels compiled on a small warm-up) and the peak during it (the
process's maximum resident set size). A case that refuses by design (weights over the memory
budget) reports the time to its error and the message. Target (issue 11): every case completes
within this machine's memory or refuses before allocating, naming the size in GiB. The README's
memory table is this command's output.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap

__all__ = ["CASES", "add_arguments", "run"]

_PRELUDE = """
import json, resource, time
import numpy as np
import refattn
from refattn import registry
rng = np.random.default_rng(0)
def rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024      # Linux reports KiB
"""

#: name -> (what, setup code, warm-up code, the measured call)
CASES = {
    "sdpa": ("sdpa, default method, n = m = 65536, d = 64, float64",
             "q, k, v = rng.standard_normal((3, 1, 1, 65536, 64))",
             "refattn.scaled_dot_product_attention(q[..., :64, :], k[..., :64, :], v[..., :64, :], method='blocked')",
             "refattn.scaled_dot_product_attention(q, k, v)"),
    "sdpa_weights": ("sdpa, return_weights=True, n = m = 65536 (refused)",
                     "q, k, v = rng.standard_normal((3, 1, 1, 65536, 64))", "None",
                     "refattn.scaled_dot_product_attention(q, k, v, return_weights=True)"),
    "multi_head": ("multi_head, default method, n = m = 16384, 8 heads, d_model = 512",
                   "x = rng.standard_normal((16384, 512)); p = refattn.init_multi_head(0, 512, 8)",
                   "refattn.multi_head_attention(x[:64], x[:64], p, num_heads=8, method='blocked')",
                   "refattn.multi_head_attention(x, x, p, num_heads=8)"),
    "check": ("oracle.check, float32 candidate, n = m = 32768, 8 heads, d = 64",
              "q, k, v = rng.standard_normal((3, 1, 8, 32768, 64)).astype(np.float32); "
              "c = refattn.scaled_dot_product_attention(q, k, v).astype(np.float32)",
              "refattn.oracle.check(c[..., :64, :], q[..., :64, :], k[..., :64, :], v[..., :64, :])",
              "refattn.oracle.check(c, q, k, v)"),
    "band_csr": ("registry band apply, method='csr', n = m = 65536, d = 64",
                 "q, k, v = rng.standard_normal((3, 65536, 64))",
                 "registry.get('band').apply(q[:64], k[:64], v[:64], method='csr')",
                 "registry.get('band').apply(q, k, v, method='csr')"),
    "band_default": ("registry band apply, default method, n = m = 65536, d = 64",
                     "q, k, v = rng.standard_normal((3, 65536, 64))",
                     "registry.get('band').apply(q[:64], k[:64], v[:64], method='csr')",
                     "registry.get('band').apply(q, k, v)"),
    "linear_scan": ("registry linear_elu apply, causal, method='scan', n = m = 65536, d = 64",
                    "q, k, v = rng.standard_normal((3, 65536, 64))",
                    "registry.get('linear_elu').apply(q[:64], k[:64], v[:64], causal=True, method='scan')",
                    "registry.get('linear_elu').apply(q, k, v, causal=True, method='scan')"),
    "linear_default": ("registry linear_elu apply, causal, default method, n = m = 65536, d = 64",
                       "q, k, v = rng.standard_normal((3, 65536, 64))",
                       "registry.get('linear_elu').apply(q[:64], k[:64], v[:64], causal=True, method='scan')",
                       "registry.get('linear_elu').apply(q, k, v, causal=True)"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The command line of ``bench memory``."""
    parser.add_argument("--only", nargs="+", choices=list(CASES), metavar="CASE",
                        help=f"run only these cases (of {', '.join(CASES)})")


def run(args: argparse.Namespace) -> int:
    """Run the cases one process each and print the table (Markdown)."""
    print("| case | wall time of the call | resident before | peak resident | result |")
    print("|---|---|---|---|---|")
    for name in args.only or CASES:
        what, setup, warm, call = CASES[name]
        report = _measure(setup, warm, call)
        result = "completed" if report["error"] is None else f"refused: {report['error']}"
        print(f"| {what} | {report['seconds']:.2f} s | {report['before'] / 2**20:.0f} MiB | "
              f"{report['peak'] / 2**20:.0f} MiB | {result} |", flush=True)
    return 0


def _measure(setup: str, warm: str, call: str) -> dict:
    code = _PRELUDE + textwrap.dedent(f"""
        {setup}
        {warm}
        before = rss()
        start = time.perf_counter()
        error = None
        try:
            {call}
        except MemoryError as exc:
            error = str(exc)
        seconds = time.perf_counter() - start
        print(json.dumps({{"seconds": seconds, "before": before, "peak": rss(), "error": error}}))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])
