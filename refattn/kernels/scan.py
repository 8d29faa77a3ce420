r"""Causal linear-attention scan: the RNN form of linearised attention (Katharopoulos et al., 2020, Eq. 18–20).

    S_j = S_{j−1} + φ(k_j) v_jᵀ        (F × d_v memory)
    z_j = z_{j−1} + φ(k_j)             (F normaliser)
    out_i = φ(q_i)ᵀ S_{j(i)} / (φ(q_i)ᵀ z_{j(i)} + ε)      j(i) = the last key query i may see

O(n·F·d_v) time, O(F·d_v) state: nothing grows with the sequence. The loops mirror the sums.
"""
from __future__ import annotations

import numpy as np

from .._jit import jit_parallel, prange

__all__ = ["causal_linear_scan"]


@jit_parallel
def causal_linear_scan(phi_q, phi_k, v, delta, eps, out, den):  # pragma: no cover - jitted
    """phi_q (B, n, F), phi_k (B, m, F), v (B, m, d_v); query i sees keys j <= i + delta.

    Writes out (B, n, d_v) and the denominators den (B, n).
    """
    B, n, F = phi_q.shape
    m, d_v = v.shape[1], v.shape[2]
    for b in prange(B):
        S = np.zeros((F, d_v))                                     # S = Σ_j φ(k_j) v_jᵀ
        z = np.zeros(F)                                            # z = Σ_j φ(k_j)
        seen = 0                                                   # keys folded into S and z so far
        for i in range(n):
            last = min(i + delta, m - 1)                           # query i sees keys 0 … last
            while seen <= last:
                for f in range(F):
                    z[f] += phi_k[b, seen, f]
                    for c in range(d_v):
                        S[f, c] += phi_k[b, seen, f] * v[b, seen, c]
                seen += 1
            d = 0.0
            for f in range(F):
                d += phi_q[b, i, f] * z[f]                         # φ(q_i)ᵀ z
            den[b, i] = d + eps
            for c in range(d_v):
                acc = 0.0
                for f in range(F):
                    acc += phi_q[b, i, f] * S[f, c]                # φ(q_i)ᵀ S
                out[b, i, c] = acc / (d + eps)
