r"""Fast-weight delta-rule scan (Schlag, Irie & Schmidhuber, 2021, §4.2).

    v̄_i = W_{i−1} φ(k_i)                          retrieve what the memory holds for k_i
    W_i = W_{i−1} + β_i (v_i − v̄_i) ⊗ φ(k_i)       replace it, at learning rate β_i
    y_i = W_i φ(q_i)                              read with the query

W is the d_v × F fast-weight matrix, W_0 = 0. O(n·F·d_v) time, O(F·d_v) state. The loops mirror the
three lines above; rows of the batch run in parallel.
"""
from __future__ import annotations

import numpy as np

from .._jit import jit_parallel, prange
from . import check_kernel_arrays

__all__ = ["delta_rule_scan"]


def delta_rule_scan(phi_q, phi_k, v, beta, out) -> None:
    """Run the delta-rule scan after checking every shape it indexes.

    phi_q, phi_k (B, n, F), v (B, n, d_v), beta (B, n), all C-contiguous float64; writes out (B, n, d_v).
    """
    check_kernel_arrays("delta_rule_scan", {
        "phi_q": (phi_q, "B n F"), "phi_k": (phi_k, "B n F"), "v": (v, "B n d_v"), "beta": (beta, "B n"),
        "out": (out, "B n d_v")}, written=("out",))
    _delta_rule_scan(phi_q, phi_k, v, beta, out)


@jit_parallel
def _delta_rule_scan(phi_q, phi_k, v, beta, out):  # pragma: no cover - jitted
    """The loops of :func:`delta_rule_scan`."""
    B, n, F = phi_q.shape
    d_v = v.shape[2]
    for b in prange(B):
        W = np.zeros((d_v, F))                                     # W_0 = 0
        v_bar = np.empty(d_v)
        for i in range(n):
            for c in range(d_v):
                acc = 0.0
                for f in range(F):
                    acc += W[c, f] * phi_k[b, i, f]                # v̄_i = W_{i−1} φ(k_i)
                v_bar[c] = acc
            for c in range(d_v):
                u = beta[b, i] * (v[b, i, c] - v_bar[c])           # β_i (v_i − v̄_i)
                for f in range(F):
                    W[c, f] += u * phi_k[b, i, f]                  # W_i = W_{i−1} + β_i (v_i − v̄_i) ⊗ φ(k_i)
            for c in range(d_v):
                acc = 0.0
                for f in range(F):
                    acc += W[c, f] * phi_q[b, i, f]                # y_i = W_i φ(q_i)
                out[b, i, c] = acc
