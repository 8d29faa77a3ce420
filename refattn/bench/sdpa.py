"""``python -m refattn bench sdpa``: the quadratic core, equation path vs blocked online softmax vs PyTorch.

For n = 1024 … 8192 (8 heads, d = 64, float64) it times ``scaled_dot_product_attention`` by the
equation path (where the (h, n, n) score matrix fits: n <= --equation-max), by the blocked Numba
kernel (``method="blocked"``), and, when PyTorch is importable, torch's CPU
``scaled_dot_product_attention`` on the same inputs in the same process (``torch.set_num_threads``
= the Numba thread count). GFLOP/s counts the pairs a run must compute, 4·h·d per pair: n² of them,
n(n + 1)/2 causal (so a causal rate beside the machine's GEMM rate is a rate, not twice one). Peak
memory is NumPy's allocations during the call (tracemalloc) beyond the inputs; the kernel's own
per-thread tiles are outside it and O(threads · tile²).

Blocked and torch are timed in interleaved rounds with a pause before each call
(:func:`refattn.bench._measure.best_times`), so that one library's spinning threads do not slow
the other down and a change of load hits both; the equation path, whose GiBs of scores perturb the
machine for a while, in rounds of its own. Best of ``--repeat`` (5) rounds: this machine is
shared, and single calls vary by 20%.

Targets (issue 6): blocked time at n = 4096 at most 1.0× torch's, non-causal and causal; peak
memory at n = 32768, 8 heads, under 512 MiB beyond inputs and output (run when ``--sizes`` is not
given, or at ``--memory-n N``).

``--plot FILE`` also times sparse band attention (CSR) and the causal linear scan at every n and
draws time vs n for every mechanism there (a measurement of this machine: the README's
``figures/complexity.png`` is such a plot, rewritten only by ``--plot figures/complexity.png``);
without it nothing is written.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from ..argtypes import non_negative_int, output_file, positive_int
from ..core.sdpa import scaled_dot_product_attention
from ._measure import (
    PATTERN_BYTES_PER_ROW,
    best_time,
    best_times,
    check_memory,
    extra_target,
    machine,
    mib,
    peak_memory,
)

__all__ = ["DEFAULT_SIZES", "MEMORY_N", "add_arguments", "check_arguments", "measure", "run"]

DEFAULT_SIZES = (1024, 2048, 4096, 8192)
MEMORY_N = 32768
"""n of the peak-memory target, run by default only when ``--sizes`` is not given."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``bench sdpa``."""
    parser.add_argument("--sizes", type=positive_int, nargs="+", default=None, metavar="N",
                        help=f"sequence lengths n = m (default {' '.join(map(str, DEFAULT_SIZES))}; refused, naming "
                             "the GiB, if a run would not fit in memory)")
    parser.add_argument("--heads", type=positive_int, default=8)
    parser.add_argument("--d", type=positive_int, default=64)
    parser.add_argument("--repeat", type=positive_int, default=5, help="timed rounds per point (best is kept)")
    parser.add_argument("--equation-max", type=non_negative_int, default=4096,
                        help="largest n for the equation path (0: never)")
    parser.add_argument("--memory-n", type=non_negative_int, default=None,
                        help=f"n of the peak-memory target (0: skip; default {MEMORY_N} without --sizes, else skip)")
    parser.add_argument("--plot", type=output_file, default=None, metavar="FILE",
                        help="also time band attention and the linear scan, and write the time-vs-n figure there "
                             "(default: no figure; figures/complexity.png is the README's)")


SCORE_ARRAYS = 5
"""Float64 (h, n, n) arrays the equation path holds at once, at most (tracemalloc: 4.1 causal, 3.0 not)."""


def check_arguments(args: argparse.Namespace) -> None:
    """Raise a one-line ``ValueError`` if a size would not fit in the memory available now.

    The estimate of size n: 8 float64 (h, n, d) arrays (inputs, outputs, the scan's features), with
    ``--plot`` the band pattern of the complexity figure
    (:data:`~refattn.bench._measure.PATTERN_BYTES_PER_ROW` per row) and, where n <= ``--equation-max``,
    :data:`SCORE_ARRAYS` (h, n, n) score arrays.
    """
    needs = {}
    for n in args.sizes or DEFAULT_SIZES:
        needs[f"n={n}"] = {"inputs and outputs": 8 * args.heads * n * args.d * 8}
        if args.plot is not None:
            needs[f"n={n}"]["band pattern"] = PATTERN_BYTES_PER_ROW * n
        if n <= args.equation_max:
            needs[f"n={n}"]["equation path's scores"] = SCORE_ARRAYS * args.heads * n * n * 8
    memory_n = extra_target(args.memory_n, MEMORY_N, args.sizes)
    if memory_n:
        needs[f"--memory-n {memory_n}"] = {"inputs and output": 5 * args.heads * memory_n * args.d * 8}
    check_memory(needs, "lower --sizes, --heads, --d, --equation-max or --memory-n")


def _threads() -> int:
    import numba  # loaded when the bench runs, not by the CLI

    return numba.get_num_threads()


def _torch():
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(_threads())
    return torch


def measure(n: int, heads: int, d: int, causal: bool, repeat: int, equation_max: int, torch) -> dict:
    """Times (seconds) of each available implementation on one seeded (heads, n, d) problem."""
    rng = np.random.default_rng(n)
    q, k, v = (rng.standard_normal((heads, n, d)) for _ in range(3))
    calls = {"blocked": lambda: scaled_dot_product_attention(q, k, v, causal=causal, method="blocked")}
    if torch is not None:
        tq, tk, tv = (torch.from_numpy(x)[None] for x in (q, k, v))
        sdpa = torch.nn.functional.scaled_dot_product_attention

        def torch_call():
            with torch.no_grad():
                return sdpa(tq, tk, tv, is_causal=causal)
        calls["torch"] = torch_call
    times = best_times(calls, repeat)                               # the pair the target compares
    if n <= equation_max:                                           # its GiBs of scores perturb the machine
        times["equation"] = best_times({"equation": lambda: scaled_dot_product_attention(q, k, v, causal=causal)},
                                       repeat)["equation"]
    return times


def run(args: argparse.Namespace) -> int:
    """Run the benchmark, print the table and the targets; return 0, or 1 if a target is missed."""
    torch = _torch()
    print(machine())
    print(f"threads: numba {_threads()}" +
          (f", torch {torch.get_num_threads()} (torch {torch.__version__})" if torch else ", torch not importable"))
    t0 = time.perf_counter()
    scaled_dot_product_attention(*np.ones((3, 4, 8)), method="blocked")
    print(f"blocked kernel ready in {time.perf_counter() - t0:.2f} s (first call: compile or load from cache)")
    print(f"{'n':>6}{'causal':>8}{'method':>10}{'time s':>10}{'GFLOP/s':>9}{'vs torch':>10}")
    ok, at_4096, curves = True, {}, {}
    for n in args.sizes or DEFAULT_SIZES:
        for causal in (False, True):
            times = measure(n, args.heads, args.d, causal, args.repeat, args.equation_max, torch)
            flops = 4 * args.heads * (n * (n + 1) // 2 if causal else n * n) * args.d
            for method, t in times.items():
                ratio = f"{t / times['torch']:.2f}" if "torch" in times else "—"
                print(f"{n:>6}{str(causal):>8}{method:>10}{t:>10.4f}{flops / t / 1e9:>9.2f}{ratio:>10}")
                curves.setdefault(f"sdpa {method}{' causal' if causal else ''}", {})[n] = t
            if n == 4096 and "torch" in times:
                at_4096[causal] = times["blocked"] / times["torch"]
        if args.plot is not None:                                  # the other curves of the figure
            curves.setdefault("sparse band w=128 (CSR)", {})[n] = _band_time(n, args.heads, args.d, args.repeat)
            curves.setdefault("causal linear scan (elu+1)", {})[n] = _scan_time(n, args.heads, args.d, args.repeat)
    if args.plot is not None:
        try:
            print(f"wrote {_plot(curves, args.plot, args.heads, args.d)}")
        except OSError as error:
            print(f"error: cannot write {args.plot}: {error.strerror or error}", file=sys.stderr)
            return 2
    for causal, ratio in at_4096.items():
        ok &= ratio <= 1.0
        print(f"target: blocked / torch at n = 4096, causal={causal}: {ratio:.2f} (<= 1.0): "
              f"{'met' if ratio <= 1.0 else 'MISSED'}")
    n = extra_target(args.memory_n, MEMORY_N, args.sizes)
    if n:                                                          # the memory target
        rng = np.random.default_rng(1)
        q, k, v = (rng.standard_normal((args.heads, n, args.d)) for _ in range(3))
        _, peak = peak_memory(lambda: scaled_dot_product_attention(q, k, v, causal=True, method="blocked"))
        beyond = peak - q.nbytes                                   # the output, (h, n, d), is allocated inside
        ok &= beyond < 512 * 2**20
        print(f"target: peak memory at n = {n}, {args.heads} heads, causal, beyond inputs and output = "
              f"{mib(beyond)} MiB (< 512): {'met' if beyond < 512 * 2**20 else 'MISSED'}")
    return 0 if ok else 1


def _band_time(n: int, heads: int, d: int, repeat: int) -> float:
    from ..sparse import band_pattern, sparse_attention

    rng, pattern = np.random.default_rng(n), band_pattern(n, 128)
    q, k, v = (rng.standard_normal((heads, n, d)) for _ in range(3))
    sparse_attention(*np.ones((3, 8, d)), band_pattern(8, 1), method="csr")    # compiled (any n, even n < 8)
    return best_time(lambda: sparse_attention(q, k, v, pattern, method="csr"), repeat)


def _scan_time(n: int, heads: int, d: int, repeat: int) -> float:
    from ..linear import elu_feature_map, linear_attention

    rng = np.random.default_rng(n)
    q, k, v = (rng.standard_normal((heads, n, d)) for _ in range(3))
    return best_time(lambda: linear_attention(q, k, v, elu_feature_map, causal=True, method="scan"), repeat)


def _plot(curves: dict, path: Path, heads: int, d: int) -> Path:
    """Time vs n, log-log, one line per mechanism, with n² and n guides (measured: not byte-stable)."""
    import matplotlib
    import matplotlib.style

    from ..viz import STYLE_PATH, figure, save_figure

    with matplotlib.style.context(STYLE_PATH):
        fig = figure((7.5, 4.8))
        ax = fig.subplots()
        colors = matplotlib.colormaps["tab10"]
        for i, (label, points) in enumerate(curves.items()):
            ns = sorted(points)
            ax.loglog(ns, [points[n] for n in ns], marker="o", label=label, color=colors(i % 10),
                      linestyle="--" if "causal" in label and "sdpa" in label else "-")
        ns = np.array(sorted({n for points in curves.values() for n in points}), dtype=float)
        top = max(max(points.values()) for points in curves.values())
        ax.loglog(ns, top * (ns / ns[-1]) ** 2, color="0.6", linewidth=0.8, label="∝ n² (guide)")
        ax.loglog(ns, top / 50 * (ns / ns[-1]), color="0.8", linewidth=0.8, label="∝ n (guide)")
        ax.set(xlabel="sequence length n", ylabel="time (s, best of repeats)",
               title=f"Attention time vs n ({heads} heads, d = {d}, float64, this machine)")
        ax.legend(fontsize=7, loc="upper left")
    return save_figure(fig, path)
