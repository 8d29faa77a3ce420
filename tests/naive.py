"""Naive oracles: loops transcribed from the papers' sums, one scalar at a time.

They share no code with refattn (no vectorised softmax, no matmul), so agreement with them is
evidence, not tautology. Use them on small shapes only.
"""
from __future__ import annotations

import math

import numpy as np


def naive_sdpa(q, k, v, allowed=None, bias=None, scale=None):
    """Per-query loop of Attention(Q, K, V)_i = Σ_j α_ij v_j, α_ij = e^{s_ij} / Σ_l e^{s_il}.

    q (n, d), k (m, d), v (m, d_v); ``allowed`` (n, m) bool, ``bias`` (n, m) float. A query with no
    allowed key gets a zero row (refattn's default ``fully_masked="zero"``). Returns (out, weights).
    """
    n, d = q.shape
    m, d_v = v.shape
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    out = np.zeros((n, d_v))
    weights = np.zeros((n, m))
    for i in range(n):
        scores = {}
        for j in range(m):
            if allowed is not None and not allowed[i, j]:
                continue
            s = sum(q[i, c] * k[j, c] for c in range(d)) * scale
            if bias is not None:
                s += bias[i, j]
            if s != -math.inf:
                scores[j] = s
        if not scores:
            continue
        top = max(scores.values())
        total = sum(math.exp(s - top) for s in scores.values())
        for j, s in scores.items():
            weights[i, j] = math.exp(s - top) / total
            for c in range(d_v):
                out[i, c] += weights[i, j] * v[j, c]
    return out, weights


def naive_causal_allowed(n, m, alignment="top-left"):
    """Python loop version of the causal mask: j <= i (+ m − n for bottom-right)."""
    delta = 0 if alignment == "top-left" else m - n
    return np.array([[j <= i + delta for j in range(m)] for i in range(n)], dtype=bool).reshape(n, m)
