r"""Causal linear-attention scan: the RNN form of linearised attention (Katharopoulos et al., 2020, Eq. 18–20).

    S_j = S_{j−1} + φ(k_j) v_jᵀ        (F × d_v memory)
    z_j = z_{j−1} + φ(k_j)             (F normaliser)
    out_i = φ(q_i)ᵀ S_{j(i)} / (φ(q_i)ᵀ z_{j(i)} + ε)      j(i) = the last key query i may see

O(n·F·d_v) time, O(F·d_v) state: nothing grows with the sequence. The loops mirror the sums.

Two options serve Performer's stabilised key features (:func:`refattn.linear.performer_attention`):

- ``shift``: the key features are given relative to a running log-scale, ψ_j = φ(k_j)·e^{−C_j}
  with C_j non-decreasing (a running maximum). Whenever C grows, S and z are multiplied by
  e^{C_{j−1} − C_j} ≤ 1, so after key j they hold the sums of φ(k_l)·e^{−C_j}: query i reads the
  features of the keys it sees scaled by e^{−C_{j(i)}}, a factor set by those keys only.
- ``offset``: a constant ω added to every key feature after that rescaling, which adds
  ω·(Σ_f φ(q_i)_f)·Σ_j v_j to the numerator and ω·(Σ_f φ(q_i)_f)·(j(i) + 1) to the denominator.
"""
from __future__ import annotations

import numpy as np

from .._jit import jit_parallel, prange
from . import check_kernel_arrays, kernel_scalar

__all__ = ["causal_linear_scan"]


def causal_linear_scan(phi_q, phi_k, v, delta, eps, out, den, *, shift=None, offset=0.0) -> None:
    """Run the scan after checking every shape it indexes.

    phi_q (B, n, F), phi_k (B, m, F), v (B, m, d_v), all C-contiguous float64; query i sees keys
    j <= i + delta (any int: negative sees none, m or more sees all). Writes out (B, n, d_v) and the
    denominators den (B, n). ``shift`` (B, m), non-decreasing along the keys, or None; ``offset``
    a finite float (see the module docstring).
    """
    layouts = {"phi_q": (phi_q, "B n F"), "phi_k": (phi_k, "B m F"), "v": (v, "B m d_v"),
               "out": (out, "B n d_v"), "den": (den, "B n")}
    if shift is not None:
        layouts["shift"] = (shift, "B m")
    sizes = check_kernel_arrays("causal_linear_scan", layouts, written=("out", "den"))
    if shift is None:
        shift = np.zeros((sizes["B"], 0))
    who = "causal_linear_scan"
    _causal_linear_scan(phi_q, phi_k, v, shift, kernel_scalar(who, "offset", offset, float),
                        kernel_scalar(who, "delta", delta, int), kernel_scalar(who, "eps", eps, float), out, den)


@jit_parallel
def _causal_linear_scan(phi_q, phi_k, v, shift, offset, delta, eps, out, den):  # pragma: no cover - jitted
    """The loops of :func:`causal_linear_scan`; ``shift`` is (B, m), or (B, 0) for none."""
    B, n, F = phi_q.shape
    m, d_v = v.shape[1], v.shape[2]
    rescaled = shift.shape[1] > 0
    for b in prange(B):
        S = np.zeros((F, d_v))                                     # S = Σ_j φ(k_j) v_jᵀ
        z = np.zeros(F)                                            # z = Σ_j φ(k_j)
        v_sum = np.zeros(d_v)                                      # Σ_j v_j (offset only)
        seen = 0                                                   # keys folded into S and z so far
        for i in range(n):
            last = min(i + delta, m - 1)                           # query i sees keys 0 … last
            while seen <= last:
                if rescaled and seen > 0 and shift[b, seen] != shift[b, seen - 1]:
                    r = np.exp(shift[b, seen - 1] - shift[b, seen])   # C grew: S, z ← e^{C_{j−1} − C_j} S, z
                    for f in range(F):
                        z[f] *= r
                        for c in range(d_v):
                            S[f, c] *= r
                for f in range(F):
                    z[f] += phi_k[b, seen, f]
                    for c in range(d_v):
                        S[f, c] += phi_k[b, seen, f] * v[b, seen, c]
                if offset != 0.0:
                    for c in range(d_v):
                        v_sum[c] += v[b, seen, c]
                seen += 1
            d = 0.0
            for f in range(F):
                d += phi_q[b, i, f] * z[f]                         # φ(q_i)ᵀ z
            sigma = 0.0
            if offset != 0.0:
                for f in range(F):
                    sigma += phi_q[b, i, f]                        # Σ_f φ(q_i)_f
                d += offset * sigma * seen                         # + ω Σ_f φ(q_i)_f · (keys seen)
            den[b, i] = d + eps
            for c in range(d_v):
                acc = 0.0
                for f in range(F):
                    acc += phi_q[b, i, f] * S[f, c]                # φ(q_i)ᵀ S
                if offset != 0.0:
                    acc += offset * sigma * v_sum[c]               # + ω Σ_f φ(q_i)_f · Σ_j v_j
                out[b, i, c] = acc / (d + eps)

