r"""Chunkwise-parallel causal linear attention: the scan's recurrence carried by matrix products.

Cut the sequence into chunks of C positions. Query *i* in the chunk that starts at *a* splits its
sum over the keys it sees into the keys before the chunk, already folded into the state, and the
keys of its own chunk:

    out_i ∝ φ(q_i)ᵀ S_{a−1}  +  Σ_{a ≤ t ≤ i} (φ(q_i)·φ(k_t)) v_t         (inter-chunk + intra-chunk)
    S_{b} = S_{a−1} + Σ_{a ≤ t ≤ b} φ(k_t) v_tᵀ                          (the state after the chunk)

Each chunk's intra part is a masked (C × C) product, its state increment Φ(K_c)ᵀ V_c, its inter
part Φ(Q_c) S: O(n·C·(F + d_v) + n·F·d_v) flops in small matrix products instead of the scan's
O(n·F·d_v) in scalar loops. The denominator is the same sums with v_t replaced by 1 (the state's
z = Σ φ(k_t) beside S). The products run in :func:`refattn.kernels.chunk.chunk_linear` (Numba, BLAS
per chunk, its last chunk shorter when C does not divide n).

Decays (RFA's gate, the running-maximum rescaling of Performer's stabilised causal features) enter as
three factors: the coefficient c_it of key t for query i within the chunk, the decay from the state
before the chunk to query i, and the decay from key t to the end of its chunk; the states then follow
S_c = a_c S_{c−1} + ΔS_c, a loop over chunks.

The delta rule (fast weights, Schlag et al.) is not additive: each write first removes what its key
retrieves. Within a chunk, its products of Householder-like factors (I − β_t φ_t φ_tᵀ) are written in
the WY/UT form of Yang et al. (2024): with the strictly lower triangular L = tril(diag(β) K Kᵀ, −1),
T = (I + L)⁻¹ diag(β), U = T V and W = T K,

    new_c = U − W S_{c−1},   out_c = Q S_{c−1} + tril(Q Kᵀ) new_c,   S_c = S_{c−1} + Kᵀ new_c.

The triangular solve is a forward substitution, so a non-finite key or value reaches only the rows
from its position on, as in the scan. The delta rule runs in NumPy, a loop over chunks; chunk sizes
that do not divide n pad its last chunk with zero features and β = 0 (which add exact zeros) and
drop the padded rows.

References
----------
.. [1] A. Katharopoulos et al., "Transformers are RNNs", ICML 2020, arXiv:2006.16236v3, §3.3 (the causal
   recurrence).
.. [2] S. Yang, B. Wang, Y. Shen, R. Panda, Y. Kim, "Gated Linear Attention Transformers with
   Hardware-Efficient Training", ICML 2024, arXiv:2312.06635, §3 (the chunkwise form).
.. [3] S. Yang, B. Wang, Y. Zhang, Y. Shen, Y. Kim, "Parallelizing Linear Transformers with the Delta
   Rule over Sequence Length", NeurIPS 2024, arXiv:2406.06484, §3 (the WY/UT representation).
"""
from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from ..common.budget import check_fits
from ..common.ints import check_positive_int
from ..kernels import kernel_rows

__all__ = [
    "DEFAULT_CHUNK_SIZE", "check_chunk_size", "delta_rule_chunks", "gate_coefficients", "gated_chunks", "linear_chunks",
]

#: Chunk size of ``method="chunk"`` when none is given (measured: ``python -m refattn bench linear --chunk-size C``).
DEFAULT_CHUNK_SIZE = 32


def check_chunk_size(chunk_size) -> int:
    """``chunk_size`` as a positive int (None: :data:`DEFAULT_CHUNK_SIZE`), or a ValueError/TypeError naming it."""
    return DEFAULT_CHUNK_SIZE if chunk_size is None else check_positive_int("chunk_size", chunk_size)


def linear_chunks(phi_q, keys, v, batch, delta, eps, chunk_size):
    """Causal linear attention by chunks: ``(out, den)`` equal to the scan's (see :func:`attend`).

    Query i sees keys j <= i + delta. The keys are aligned with the queries (key t + delta beside query
    t, zeros where there is none); keys before the first aligned one form the initial state.
    """
    n, m, F, d_v = phi_q.shape[-2], keys.phi.shape[-2], phi_q.shape[-1], v.shape[-1]
    q = kernel_rows(phi_q, batch, (n, F))                          # (B, n, F)
    k = kernel_rows(keys.phi, batch, (m, F))                       # (B, m, F)
    vv = kernel_rows(v, batch, (m, d_v))                           # (B, m, d_v)
    B = q.shape[0]
    if n == 0 or m == 0 or B == 0:                                 # every row sees no key (or there is none)
        return np.zeros((*batch, n, d_v)), np.full((*batch, n), eps)
    first, end = max(0, -delta), min(n, m - delta)                 # aligned positions t that hold a key t + delta
    if delta == 0 and m == n:                                      # n = m, top-left: already aligned
        k_al, v_al = k, vv
    else:
        k_al, v_al = np.zeros((B, n, F)), np.zeros((B, n, d_v))
        if end > first:
            k_al[:, first:end], v_al[:, first:end] = k[:, first + delta:end + delta], vv[:, first + delta:end + delta]
    prefix = min(max(delta, 0), m)                                 # keys 0 … prefix − 1: seen by every query
    k0, decays = k[:, :prefix], None
    if keys.shift is not None:
        shift = kernel_rows(keys.shift, batch, (m,))               # (B, m)  C_j, non-decreasing
        C = shift[:, np.clip(np.arange(n) + delta, 0, m - 1)]      # (B, n)  C at each query's last key
        C0 = shift[:, prefix - 1] if prefix else C[:, 0]           # (B,)    the initial state's scale
        with np.errstate(over="ignore", invalid="ignore"):
            k0 = k0 * np.exp(shift[:, :prefix] - C0[:, None])[..., None]
        decays = _shift_decays(C, C0, chunk_size)
    S0, z0 = np.swapaxes(k0, -1, -2) @ vv[:, :prefix], k0.sum(axis=1)   # the initial state (B, F, d_v), (B, F)
    if keys.offset == 0.0:                                         # the kernel divides
        out, den = _chunk_core(q, k_al, v_al, chunk_size, S0, z0, decays, eps)
        return out.reshape(*batch, n, d_v), den.reshape(*batch, n)
    num, den = _chunk_core(q, k_al, v_al, chunk_size, S0, z0, decays)
    last = np.minimum(np.arange(n) + delta, m - 1)                 # + ω Σ_f φ(q_i)_f (Σ_{j ≤ l(i)} v_j, l(i) + 1)
    seen = last >= 0
    sigma = keys.offset * q.sum(axis=-1)                           # (B, n)
    num += np.where(seen[:, None], sigma[..., None] * np.cumsum(vv, axis=1)[:, np.maximum(last, 0)], 0.0)
    den += np.where(seen, sigma * (last + 1), 0.0) + eps
    with np.errstate(divide="ignore", invalid="ignore"):
        np.divide(num, den[..., None], out=num)
    return num.reshape(*batch, n, d_v), den.reshape(*batch, n)


def gate_coefficients(gates: NDArray, coupled: bool) -> NDArray:
    """c_ij = (1 − g_j) Π_{l=j+1..i} g_l (coupled) or Π_{l=j+1..i} g_l, (..., n, n); meaningful for j ≤ i only."""
    n = gates.shape[-1]
    below = np.tri(n, dtype=bool)                                  # (n, n)  l ≤ i
    T = np.where(below, gates[..., None, :], 1.0)                  # (..., n, n)  T_il = g_l (l ≤ i), 1 (l > i)
    R = np.flip(np.cumprod(np.flip(T, axis=-1), axis=-1), axis=-1)  # R_ij = Π_{l ≥ j} T_il
    decay = np.concatenate([R[..., 1:], np.ones_like(R[..., :1])], axis=-1)   # Π_{l=j+1..i} g_l
    return (1.0 - gates[..., None, :]) * decay if coupled else decay          # c_ij


def gated_chunks(phi_q, phi_k, v, gates, coupled, eps, batch, chunk_size):
    """RFA's gated recurrence (see :mod:`refattn.kernels.gated_scan`) by chunks: ``(out, den)``."""
    n, F, d_v = phi_q.shape[-2], phi_q.shape[-1], v.shape[-1]
    q, k = kernel_rows(phi_q, batch, (n, F)), kernel_rows(phi_k, batch, (n, F))
    vv, g = kernel_rows(v, batch, (n, d_v)), kernel_rows(gates, batch, (n,))
    B = q.shape[0]
    if n == 0 or B == 0:
        return np.zeros((*batch, n, d_v)), np.full((*batch, n), eps)
    gc = _chunked(g, chunk_size, 1.0)                              # (B, N, C)  padding: g = 1 (and w = 0)
    coefficients = gate_coefficients(gc, coupled)                 # (B, N, C, C)  c_it, t <= i
    inward = np.cumprod(gc, axis=-1)                               # (B, N, C)  Π_{l=a..i} g_l
    decays = (coefficients, inward, coefficients[..., -1, :], inward[..., -1])
    out, den = _chunk_core(q, k, vv, chunk_size, np.zeros((B, F, d_v)), np.zeros((B, F)), decays, eps)
    return out.reshape(*batch, n, d_v), den.reshape(*batch, n)


def _shift_decays(C, C0, chunk_size):
    """The running-maximum rescaling as chunk decays (every factor e^{C_t − C_i}, t <= i, is <= 1)."""
    Cc = _chunked(C, chunk_size, "edge")                           # (B, N, Cs)
    before = np.concatenate([C0[:, None], Cc[:, :-1, -1]], axis=1)  # (B, N)  scale of the state entering chunk c
    after = Cc[..., -1]                                            # (B, N)  scale of the state leaving it
    with np.errstate(over="ignore", invalid="ignore"):
        coefficients = np.exp(Cc[..., None, :] - Cc[..., :, None])  # (B, N, Cs, Cs)  e^{C_t − C_i}
        inward = np.exp(before[..., None] - Cc)                    # (B, N, Cs)  e^{C_before − C_i}
        outward = np.exp(Cc - after[..., None])                    # (B, N, Cs)  e^{C_t − C_after}
        return coefficients, inward, outward, np.exp(before - after)


def _chunked(x: NDArray, size: int, fill) -> NDArray:
    """(B, T, ...) → (B, N, size, ...), the last chunk padded with ``fill`` (a number, or "edge": the last row)."""
    B, T = x.shape[:2]
    N = -(-T // size)
    pad = N * size - T
    if pad:
        tail = np.repeat(x[:, -1:], pad, axis=1) if fill == "edge" else np.full((B, pad, *x.shape[2:]), fill)
        x = np.concatenate([x, tail], axis=1)
    return x.reshape(B, N, size, *x.shape[2:])


def _chunk_core(q, k, v, size, S0, z0, decays, eps=None):
    """``(num, den)``: Σ_{t <= i} c_it (φ(q_i)·φ(k_t)) (v_t, 1) + φ(q_i)ᵀ(carried state), aligned (B, n, ·) inputs.

    With ``eps``: ``(num / (den + ε), den + ε)``, the scan's ``(out, den)``.

    ``S0`` (B, F, d_v) and ``z0`` (B, F) are the state before the first chunk. ``decays`` is None (c = 1)
    or (coefficients (B, N, C, C), inward (B, N, C), outward (B, N, C), across (B, N)): the within-chunk
    c_it, the decay from the state entering a chunk to each query, from each key to the state leaving its
    chunk, and across the whole chunk. The products run in :func:`refattn.kernels.chunk.chunk_linear`.
    """
    from ..kernels.chunk import SEGMENT_CHUNKS, chunk_linear

    B, n, F = q.shape
    chunks = -(-n // size)
    segments = -(-chunks // SEGMENT_CHUNKS)                        # the kernel keeps one state (S, z) per segment
    check_fits("the segment states of method='chunk'", (B, segments, F, v.shape[-1] + 1))
    num, den = np.empty(v.shape), np.empty((B, n))
    if decays is not None:
        decays = tuple(np.ascontiguousarray(x, dtype=np.float64) for x in decays)
    chunk_linear(q, k, v, np.ascontiguousarray(S0, dtype=np.float64), np.ascontiguousarray(z0, dtype=np.float64),
                 size, num, den, decays=decays, eps=eps)
    return num, den


def _lower_product(P: NDArray, x: NDArray) -> NDArray:
    """P @ x for P zero above the diagonal, where a non-finite x_t never reaches rows i < t (0·inf is NaN)."""
    out = P @ x
    bad = ~np.isfinite(x).all(axis=(-1, -2))                       # chunks holding a non-finite entry
    if bad.any():
        tri = np.tri(P.shape[-1], dtype=bool)[:, :, None]          # (C, C, 1)
        with np.errstate(invalid="ignore"):
            terms = np.where(tri, P[bad][..., None] * x[bad][..., None, :, :], 0.0)   # (·, C, C, e)
        out[bad] = terms.sum(axis=-2)
    return out


def delta_rule_chunks(phi_q, phi_k, v, beta, batch, chunk_size):
    """The delta rule (see :mod:`refattn.kernels.delta_scan`) by chunks in the WY/UT form: out (…, n, d_v)."""
    n, F, d_v = phi_q.shape[-2], phi_q.shape[-1], v.shape[-1]
    q, k = kernel_rows(phi_q, batch, (n, F)), kernel_rows(phi_k, batch, (n, F))
    vv, b = kernel_rows(v, batch, (n, d_v)), kernel_rows(beta, batch, (n,))
    B = q.shape[0]
    if n == 0 or B == 0:
        return np.zeros((*batch, n, d_v))
    size = chunk_size
    N = -(-n // size)
    check_fits("the chunk arrays of method='chunk'", (B, N, size, max(size, F + d_v)))
    qc, kc, vc = (_chunked(x, size, 0.0) for x in (q, k, vv))     # (B, N, C, ·)  padding: zero keys
    bc = _chunked(b, size, 0.0)                                    # (B, N, C)     and β = 0: no write
    strict = np.tri(size, k=-1, dtype=bool)
    with np.errstate(invalid="ignore", over="ignore"):
        L = np.where(strict, bc[..., None] * (kc @ np.swapaxes(kc, -1, -2)), 0.0)   # β_i φ_i·φ_t, t < i
        rhs = bc[..., None] * np.concatenate([kc, vc], axis=-1)   # (B, N, C, F + d_v)  diag(β) [K V]
        WU = np.empty_like(rhs)
        for i in range(size):                                      # (I + L) [W U] = diag(β) [K V], row by row
            WU[..., i, :] = rhs[..., i, :] - (L[..., i, None, :i] @ WU[..., :i, :])[..., 0, :]
        P = np.where(np.tri(size, dtype=bool), qc @ np.swapaxes(kc, -1, -2), 0.0)  # φ(q_i)·φ(k_t), t <= i
    W, U = WU[..., :F], WU[..., F:]
    out = np.empty((B, N, size, d_v))
    S = np.zeros((B, F, d_v))                                      # Wᵀ of the scan: S = Σ φ_t ⊗ (what t wrote)
    for c in range(N):
        new = U[:, c] - W[:, c] @ S                                # (B, C, d_v)  what each key of the chunk writes
        out[:, c] = qc[:, c] @ S + _lower_product(P[:, c], new)
        S = S + np.swapaxes(kc[:, c], -1, -2) @ new
    return out.reshape(B, N * size, d_v)[:, :n].reshape(*batch, n, d_v)
