r"""Gated causal linear-attention scan: Random Feature Attention's gated recurrence (Peng et al., 2021, Eq. 7).

    S_t = g_t S_{t−1} + w_t φ(k_t) v_tᵀ        (F × d_v memory)
    z_t = g_t z_{t−1} + w_t φ(k_t)             (F normaliser)
    out_t = φ(q_t)ᵀ S_t / (φ(q_t)ᵀ z_t + ε)

with the write weight w_t = 1 − g_t (the paper's form) or w_t = 1 (decay only). O(n·F·d_v) time,
O(F·d_v) state. The loops mirror the recurrence; rows of the batch run in parallel.
"""
from __future__ import annotations

import numpy as np

from .._jit import jit_parallel, prange
from . import check_kernel_arrays, kernel_scalar

__all__ = ["gated_linear_scan"]


def gated_linear_scan(phi_q, phi_k, v, g, coupled, eps, out, den) -> None:
    """Run the gated scan after checking every shape it indexes.

    phi_q, phi_k (B, n, F), v (B, n, d_v), g (B, n), all C-contiguous float64; ``coupled``: the write
    is weighted by (1 − g_t) (True) or 1; ``eps`` a finite float. Writes out (B, n, d_v) and den (B, n).
    """
    check_kernel_arrays("gated_linear_scan", {
        "phi_q": (phi_q, "B n F"), "phi_k": (phi_k, "B n F"), "v": (v, "B n d_v"), "g": (g, "B n"),
        "out": (out, "B n d_v"), "den": (den, "B n")}, written=("out", "den"))
    _gated_linear_scan(phi_q, phi_k, v, g, kernel_scalar("gated_linear_scan", "coupled", coupled, bool),
                       kernel_scalar("gated_linear_scan", "eps", eps, float), out, den)


@jit_parallel
def _gated_linear_scan(phi_q, phi_k, v, g, coupled, eps, out, den):  # pragma: no cover - jitted
    """The loops of :func:`gated_linear_scan`."""
    B, n, F = phi_q.shape
    d_v = v.shape[2]
    for b in prange(B):
        S = np.zeros((F, d_v))                                     # S_0 = 0
        z = np.zeros(F)                                            # z_0 = 0
        for t in range(n):
            g_t = g[b, t]
            w_t = 1.0 - g_t if coupled else 1.0                    # weight of the new association
            for f in range(F):
                z[f] = g_t * z[f] + w_t * phi_k[b, t, f]           # z_t = g_t z_{t−1} + w_t φ(k_t)
                for c in range(d_v):
                    S[f, c] = g_t * S[f, c] + w_t * phi_k[b, t, f] * v[b, t, c]   # S_t = g_t S_{t−1} + w_t φ(k_t) v_tᵀ
            d = 0.0
            for f in range(F):
                d += phi_q[b, t, f] * z[f]                         # φ(q_t)ᵀ z_t
            den[b, t] = d + eps
            for c in range(d_v):
                acc = 0.0
                for f in range(F):
                    acc += phi_q[b, t, f] * S[f, c]                # φ(q_t)ᵀ S_t
                out[b, t, c] = acc / (d + eps)
