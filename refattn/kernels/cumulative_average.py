r"""Cumulative-average scan: the running mean of the values (Zhang et al., 2018, Eq. 1; the AAN's decoding form).

    s_j = s_{j−1} + v_j,    c_j = c_{j−1} + 1       (d_v running sum, one count)
    out_i = s_{j(i)} / c_{j(i)}                      j(i) = the last key query i may see

O(n·d_v) time, O(d_v) state: nothing grows with the sequence. A query that sees no key (j(i) < 0)
gets a zero row.
"""
from __future__ import annotations

import numpy as np

from .._jit import jit_parallel, prange
from . import check_kernel_arrays, kernel_scalar

__all__ = ["cumulative_average_scan"]


def cumulative_average_scan(v, delta, out) -> None:
    """Run the scan after checking every shape it indexes.

    v (B, m, d_v) C-contiguous float64; query i averages keys j <= i + delta (any int: negative sees
    none, m or more sees all). Writes out (B, n, d_v).
    """
    check_kernel_arrays("cumulative_average_scan", {"v": (v, "B m d_v"), "out": (out, "B n d_v")},
                        written=("out",))
    _cumulative_average_scan(v, kernel_scalar("cumulative_average_scan", "delta", delta, int), out)


@jit_parallel
def _cumulative_average_scan(v, delta, out):  # pragma: no cover - jitted
    """The loops of :func:`cumulative_average_scan`."""
    B, m, d_v = v.shape
    n = out.shape[1]
    for b in prange(B):
        s = np.zeros(d_v)                                          # s = Σ_{j ≤ j(i)} v_j
        seen = 0                                                   # c: keys folded into s so far
        for i in range(n):
            last = min(i + delta, m - 1)                           # query i sees keys 0 … last
            while seen <= last:
                for c in range(d_v):
                    s[c] += v[b, seen, c]
                seen += 1
            for c in range(d_v):
                out[b, i, c] = s[c] / seen if seen > 0 else 0.0    # s / c; no key seen: 0
