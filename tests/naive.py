"""Naive oracles: loops transcribed from the papers' sums, one scalar at a time.

They share no code with refattn (no vectorised softmax, no matmul), so agreement with them is
evidence, not tautology. Use them on small shapes only.
"""
from __future__ import annotations

import math

import numpy as np

from refattn import MultiHeadParams


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


def random_params(rng, d_model, num_heads, d_k, d_v=None):
    """Parameters with random, non-zero weights *and* biases (init gives zero biases)."""
    d_v = d_k if d_v is None else d_v
    h = num_heads
    return MultiHeadParams(
        w_q=rng.standard_normal((d_model, h * d_k)) / np.sqrt(d_model),
        w_k=rng.standard_normal((d_model, h * d_k)) / np.sqrt(d_model),
        w_v=rng.standard_normal((d_model, h * d_v)) / np.sqrt(d_model),
        w_o=rng.standard_normal((h * d_v, d_model)) / np.sqrt(h * d_v),
        b_q=rng.standard_normal(h * d_k),
        b_k=rng.standard_normal(h * d_k),
        b_v=rng.standard_normal(h * d_v),
        b_o=rng.standard_normal(d_model),
    )


def per_head_loop(x_q, x_kv, params, num_heads, x_v=None, allowed=None):
    """MultiHead(Q, K, V) for one sequence (no batch dims), head by head with naive_sdpa.

    W_iᵠ = w_q[:, i·d_k:(i+1)·d_k] etc.; heads concatenated, then Wᴼ, then bᴼ. Returns
    (out (n, d_model), weights (h, n, m), heads list).
    """
    x_v = x_kv if x_v is None else x_v
    d_k = params.w_q.shape[1] // num_heads
    d_v = params.w_v.shape[1] // num_heads
    heads, weights = [], []
    for i in range(num_heads):
        qs = ks = slice(i * d_k, (i + 1) * d_k)
        vs = slice(i * d_v, (i + 1) * d_v)
        Q_i = x_q @ params.w_q[:, qs] + params.b_q[qs]
        K_i = x_kv @ params.w_k[:, ks] + params.b_k[ks]
        V_i = x_v @ params.w_v[:, vs] + params.b_v[vs]
        head, A = naive_sdpa(Q_i, K_i, V_i, allowed=allowed)
        heads.append(head)
        weights.append(A)
    out = np.concatenate(heads, axis=-1) @ params.w_o + params.b_o
    return out, np.stack(weights), heads


def naive_linear(q, k, v, phi, allowed=None):
    """V'_i = Σ_j sim_ij v_j / Σ_j sim_ij with sim_ij = φ(q_i)·φ(k_j), by Python loops (Katharopoulos Eq. 2)."""
    n, m = len(q), len(k)
    out = np.zeros((n, v.shape[1]))
    for i in range(n):
        pq = phi(q[i])
        sims = {j: float(sum(a * b for a, b in zip(pq, phi(k[j]), strict=True)))
                for j in range(m) if allowed is None or allowed[i, j]}
        total = sum(sims.values())
        for j, s in sims.items():
            out[i] += s / total * v[j]
    return out


def naive_efficient(q, k, v):
    """out_i = Σ_c ρ_q(Q)_ic Σ_j ρ_k(K)_jc v_j, softmaxes written out with math.exp (Shen et al., §3)."""
    n, d = q.shape
    m = k.shape[0]
    rho_q = [[math.exp(q[i, c]) / sum(math.exp(q[i, e]) for e in range(d)) for c in range(d)] for i in range(n)]
    rho_k = [[math.exp(k[j, c]) / sum(math.exp(k[l, c]) for l in range(m)) for c in range(d)] for j in range(m)]
    out = np.zeros((n, v.shape[1]))
    A = np.zeros((n, m))
    for i in range(n):
        for j in range(m):
            A[i, j] = sum(rho_q[i][c] * rho_k[j][c] for c in range(d))
            out[i] += A[i, j] * v[j]
    return out, A


def naive_rfa(q, k, v, g, phi, coupled=True):
    """Peng et al. Eq. 7 step by step for one sequence: S_t = g_t S_{t−1} + (1 − g_t) φ(k_t) ⊗ v_t, ...

    The n queries read after the last n of the m = len(k) steps (n = m: query t after step t; bottom-right
    otherwise, and queries before the first step are zero rows).
    """
    n, m, d_v = len(q), len(k), v.shape[1]
    F = len(phi(k[0]))
    S = [[0.0] * d_v for _ in range(F)]
    z = [0.0] * F
    out = np.zeros((n, d_v))
    for t in range(m):
        pk = phi(k[t])
        w = 1.0 - g[t] if coupled else 1.0
        for f in range(F):
            z[f] = g[t] * z[f] + w * pk[f]
            for c in range(d_v):
                S[f][c] = g[t] * S[f][c] + w * pk[f] * v[t, c]
        i = t - (m - n)                                              # the query that reads after step t
        if i < 0:
            continue
        pq = phi(q[i])
        den = sum(pq[f] * z[f] for f in range(F))
        for c in range(d_v):
            out[i, c] = sum(pq[f] * S[f][c] for f in range(F)) / den
    return out


def naive_rfa_weights(q, k, g, phi):
    """A_ij = c_ij φ(q_i)·φ(k_j) / Σ_l c_il φ(q_i)·φ(k_l), c_ij = (1 − g_j) Π_{l=j+1..i} g_l, by explicit products."""
    n = len(q)
    A = np.zeros((n, n))
    for i in range(n):
        row = []
        for j in range(i + 1):
            c = 1.0 - g[j]
            for l in range(j + 1, i + 1):
                c *= g[l]
            row.append(c * float(phi(q[i]) @ phi(k[j])))
        A[i, : i + 1] = np.array(row) / sum(row)
    return A


def naive_delta(q, k, v, beta, phi, normalize=True):
    """Schlag et al. §4.2 step by step for one sequence, W as a list of rows (d_v × F).

    The n queries read after the last n of the m = len(k) steps, as in :func:`naive_rfa`.
    """
    def feat(x):
        f = phi(x)
        return [t / sum(f) for t in f] if normalize else f

    n, m, d_v = len(q), len(k), v.shape[1]
    F = len(feat(k[0]))
    W = [[0.0] * F for _ in range(d_v)]
    out = np.zeros((n, d_v))
    for t in range(m):
        pk = feat(k[t])
        v_bar = [sum(W[c][f] * pk[f] for f in range(F)) for c in range(d_v)]        # v̄ = W φ(k)
        for c in range(d_v):
            for f in range(F):
                W[c][f] += beta[t] * (v[t, c] - v_bar[c]) * pk[f]                  # W += β(v − v̄) ⊗ φ(k)
        i = t - (m - n)
        if i < 0:
            continue
        pq = feat(q[i])
        for c in range(d_v):
            out[i, c] = sum(W[c][f] * pq[f] for f in range(F))                     # y = W φ(q)
    return out
