"""``python -m refattn bench backward``: the sdpa backward pass, blocked (FlashAttention-2) vs equation vs PyTorch.

For n = 1024 … 4096 (8 heads, d = 64, float64) it times
:func:`refattn.oracle.vjp.sdpa_vjp` with ``method="blocked"`` (which reruns the blocked forward
pass for O and the log-sum-exp: "blocked"), the backward kernel alone given O and the
log-sum-exp, as a training step would call it after its own forward pass ("bwd kernel"), the
equation VJP where its (h, n, n) arrays fit (n <= --equation-max), and, when PyTorch is
importable, torch autograd's backward of its CPU ``scaled_dot_product_attention`` in float64
(``torch.autograd.grad`` on a graph built once, outside the timing), in interleaved rounds
(:func:`refattn.bench._measure.best_times`). GFLOP/s counts the backward's five products over the
pairs it must compute, 10·h·d per pair: n² of them, n(n + 1)/2 causal; beside them, the machine's
float64 GEMM rate measured in the same run (NumPy's BLAS on a 2048² product, all its threads).

Targets (issue 20): the backward kernel at n = 4096 at most 1.0× torch's backward, non-causal and
causal; peak memory of ``sdpa_vjp(method="blocked")`` at n = 32768, 8 heads, causal, under 512 MiB
beyond the inputs and the gradients (run when ``--sizes`` is not given, or at ``--memory-n N``).
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from ..argtypes import non_negative_int, positive_int
from ..oracle.vjp import VJP_ARRAYS, sdpa_vjp
from ._measure import best_times, check_memory, extra_target, gemm_rate, mib, peak_memory

__all__ = ["DEFAULT_SIZES", "MEMORY_N", "add_arguments", "check_arguments", "measure", "run"]

DEFAULT_SIZES = (1024, 2048, 4096)
MEMORY_N = 32768
"""n of the peak-memory target, run by default only when ``--sizes`` is not given."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``bench backward``."""
    parser.add_argument("--sizes", type=positive_int, nargs="+", default=None, metavar="N",
                        help=f"sequence lengths n = m (default {' '.join(map(str, DEFAULT_SIZES))})")
    parser.add_argument("--heads", type=positive_int, default=8)
    parser.add_argument("--d", type=positive_int, default=64)
    parser.add_argument("--repeat", type=positive_int, default=3, help="timed rounds per point (best is kept)")
    parser.add_argument("--equation-max", type=non_negative_int, default=2048,
                        help="largest n for the equation VJP (0: never)")
    parser.add_argument("--memory-n", type=non_negative_int, default=None,
                        help=f"n of the peak-memory target (0: skip; default {MEMORY_N} without --sizes, else skip)")


def check_arguments(args: argparse.Namespace) -> None:
    """Raise a one-line ``ValueError`` if a size would not fit in the memory available now."""
    needs = {}
    for n in args.sizes or DEFAULT_SIZES:
        needs[f"n={n}"] = {"inputs, outputs and gradients": 10 * args.heads * n * args.d * 8}
        if n <= args.equation_max:
            needs[f"n={n}"]["equation VJP's (h, n, n) arrays"] = VJP_ARRAYS * args.heads * n * n * 8
    memory_n = extra_target(args.memory_n, MEMORY_N, args.sizes)
    if memory_n:
        needs[f"--memory-n {memory_n}"] = {"inputs and gradients": 9 * args.heads * memory_n * args.d * 8}
    check_memory(needs, "lower --sizes, --heads, --d, --equation-max or --memory-n")


def measure(n: int, heads: int, d: int, causal: bool, repeat: int, equation_max: int, torch) -> dict:
    """Times (seconds) of each available backward on one seeded (heads, n, d) problem."""
    from ..core.sdpa import scaled_dot_product_attention
    from ..kernels.blocked_bwd import blocked_attention_vjp
    from ..kernels.tiles import blocked_inputs, default_block_size

    rng = np.random.default_rng(n)
    q, k, v, d_out = (rng.standard_normal((heads, n, d)) for _ in range(4))
    calls = {"blocked": lambda: sdpa_vjp(q, k, v, d_out, causal=causal, method="blocked")}
    out, lse = scaled_dot_product_attention(q, k, v, causal=causal, method="blocked", return_lse=True)
    flat, visibility = blocked_inputs(q, k, v, None, causal, None, (heads,))
    grads = np.empty_like(q), np.empty_like(k), np.empty_like(v)
    calls["bwd kernel"] = lambda: blocked_attention_vjp(*flat, d_out, out, lse, 1 / np.sqrt(d), visibility,
                                                        default_block_size(d, d), *grads, np.zeros((0, 0, 0)))
    if torch is not None:
        tq, tk, tv = (torch.from_numpy(x)[None].requires_grad_() for x in (q, k, v))
        t_out = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
        t_d_out = torch.from_numpy(d_out)[None]
        calls["torch"] = lambda: torch.autograd.grad(t_out, (tq, tk, tv), t_d_out, retain_graph=True)
    times = best_times(calls, repeat)
    if n <= equation_max:
        times["equation"] = best_times({"equation": lambda: sdpa_vjp(q, k, v, d_out, causal=causal,
                                                                      method="equation")}, repeat)["equation"]
    return times


def _torch(threads: int):
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(threads)
    return torch


def run(args: argparse.Namespace) -> int:
    """Run the benchmark, print the table and the targets; return 0, or 1 if a target is missed."""
    import numba  # loaded when the bench runs, not by the CLI

    torch = _torch(numba.get_num_threads())
    print(f"threads: numba {numba.get_num_threads()}" +
          (f", torch {torch.get_num_threads()} (torch {torch.__version__})" if torch else ", torch not importable"))
    t0 = time.perf_counter()
    sdpa_vjp(*np.ones((4, 3, 8)), method="blocked")
    print(f"blocked backward ready in {time.perf_counter() - t0:.2f} s (first call: compile or load from cache)")
    gemm = gemm_rate()
    print(f"float64 GEMM (NumPy BLAS, 2048²): {gemm:.1f} GFLOP/s")
    print(f"{'n':>6}{'causal':>8}{'method':>12}{'time s':>10}{'GFLOP/s':>9}{'of GEMM':>9}{'vs torch':>10}")
    ok, at_4096 = True, {}
    for n in args.sizes or DEFAULT_SIZES:
        for causal in (False, True):
            times = measure(n, args.heads, args.d, causal, args.repeat, args.equation_max, torch)
            flops = 10 * args.heads * (n * (n + 1) // 2 if causal else n * n) * args.d
            for method, t in times.items():
                ratio = f"{t / times['torch']:.2f}" if "torch" in times else "—"
                rate = flops / t / 1e9
                print(f"{n:>6}{str(causal):>8}{method:>12}{t:>10.4f}{rate:>9.2f}{rate / gemm:>9.0%}{ratio:>10}")
            if n == 4096 and "torch" in times:
                at_4096[causal] = times["bwd kernel"] / times["torch"]
    for causal, ratio in at_4096.items():
        ok &= ratio <= 1.0
        print(f"target: backward kernel / torch backward at n = 4096, causal={causal}: {ratio:.2f} (<= 1.0): "
              f"{'met' if ratio <= 1.0 else 'MISSED'}")
    n = extra_target(args.memory_n, MEMORY_N, args.sizes)
    if n:                                                          # the memory target
        rng = np.random.default_rng(1)
        q, k, v, d_out = (rng.standard_normal((args.heads, n, args.d)) for _ in range(4))
        _, peak = peak_memory(lambda: sdpa_vjp(q, k, v, d_out, causal=True, method="blocked"))
        beyond = peak - 3 * q.nbytes                               # the gradients are allocated inside
        ok &= beyond < 512 * 2**20
        print(f"target: peak memory of the blocked backward at n = {n}, {args.heads} heads, causal, beyond inputs "
              f"and gradients = {mib(beyond)} MiB (< 512): {'met' if beyond < 512 * 2**20 else 'MISSED'}")
    return 0 if ok else 1
