"""Extended-precision tier: the same formulas evaluated with mpmath at 50 significant digits.

Results are rounded to float64 only at the end, so they are correctly rounded to within a unit or
so; refattn's float64 path is then held to a few ULPs of them.
"""
from __future__ import annotations

import mpmath
import numpy as np

DPS = 50


def mp_softmax(x, allowed=None):
    """Softmax of a 1-D float array in mpmath (no max shift needed at 50 digits and this range)."""
    with mpmath.workdps(DPS):
        idx = [j for j in range(len(x)) if allowed is None or allowed[j]]
        if not idx:
            return np.zeros(len(x))
        e = {j: mpmath.exp(mpmath.mpf(float(x[j]))) for j in idx}
        total = mpmath.fsum(e.values())
        out = np.zeros(len(x))
        for j in idx:
            out[j] = float(e[j] / total)
        return out


def mp_sdpa(q, k, v, allowed=None, bias=None, scale=None):
    """Attention(Q, K, V) for q (n, d), k (m, d), v (m, d_v) in mpmath; returns (out, weights)."""
    n, d = q.shape
    m, d_v = v.shape
    with mpmath.workdps(DPS):
        sc = 1 / mpmath.sqrt(d) if scale is None else mpmath.mpf(scale)
        out = np.zeros((n, d_v))
        weights = np.zeros((n, m))
        for i in range(n):
            keep = [j for j in range(m) if allowed is None or allowed[i, j]]
            if bias is not None:
                keep = [j for j in keep if bias[i, j] != -np.inf]
            if not keep:
                continue
            s = {}
            for j in keep:
                dot = mpmath.fsum(mpmath.mpf(float(q[i, c])) * mpmath.mpf(float(k[j, c])) for c in range(d))
                s[j] = dot * sc + (0 if bias is None else mpmath.mpf(float(bias[i, j])))
            top = max(s.values())
            e = {j: mpmath.exp(s[j] - top) for j in keep}
            total = mpmath.fsum(e.values())
            for j in keep:
                weights[i, j] = float(e[j] / total)
            for c in range(d_v):
                out[i, c] = float(mpmath.fsum(e[j] / total * mpmath.mpf(float(v[j, c])) for j in keep))
        return out, weights
