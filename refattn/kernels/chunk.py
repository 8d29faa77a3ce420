r"""Chunkwise-parallel causal linear attention: the scan's sums regrouped into per-chunk matrix products.

For aligned features q, k (B, n, F) and values v (B, n, e), chunk c holds positions a … a + L − 1 and

    num_i = Σ_{a ≤ t ≤ i} c_it (q_i·k_t) v_t  +  (ι_i q_i)ᵀ S_c       (intra-chunk + inter-chunk)
    den_i = Σ_{a ≤ t ≤ i} c_it (q_i·k_t)      +  (ι_i q_i)ᵀ z_c
    S_{c+1} = α_c S_c + Σ_{a ≤ t < a + L} (ω_t k_t) v_tᵀ,  z_{c+1} = α_c z_c + Σ_t ω_t k_t     (S_0, z_0 given)

with the decays c_it (within the chunk), ι_i (state to query), ω_t (key to the chunk's end) and α_c
(across the chunk) all 1 when there are none. The products inside a chunk go through BLAS
(``np.dot``), so the flops run at GEMM speed instead of the scan's scalar loops.

The chunks are grouped into segments of :data:`SEGMENT_CHUNKS` chunks, and the work runs in three
passes: each segment's own state increment (the recurrence from a zero state over its chunks, or
with no decay the one product Σ_t k_t v_tᵀ over the segment; independent: ``prange`` over
segments), the state entering each segment (a short running sum over segments), then each
segment's outputs chunk after chunk from its entering state (independent again). Each array is
read twice and the output written once; the F × e state stays in cache. The segments are a fixed
number of chunks, so the sums and their rounding do not depend on the number of threads.

The intra part sets the pairs t > i to 0 before its product (a selection: a NaN score of a later key
never reaches query i). A chunk holding a non-finite value would still spread it through 0·inf in
the product, so such a chunk sums its pairs t <= i by loops instead, as the scan does.
"""
from __future__ import annotations

import numpy as np

from .._jit import jit_inline, jit_parallel, prange
from . import check_kernel_arrays, kernel_scalar
from .blas import serial_blas

__all__ = ["SEGMENT_CHUNKS", "chunk_linear"]

#: Chunks per segment: the unit of parallel work (a fixed number: results do not depend on the threads).
SEGMENT_CHUNKS = 16


def chunk_linear(q, k, v, S0, z0, size, num, den, *, decays=None, eps=None) -> None:
    """Run the chunkwise form after checking every shape it indexes; writes ``num`` (B, n, e) and ``den`` (B, n).

    q, k (B, n, F) aligned (key t beside query t), v (B, n, e), S0 (B, F, e) and z0 (B, F) the state
    before the first chunk, ``size`` the chunk size C; ``decays`` None or (coefficients (B, N, C, C), inward (B, N, C),
    outward (B, N, C), across (B, N)) with N = ⌈n / C⌉ (see the module docstring). With ``eps`` (a finite
    float) the kernel normalises as the scan does: ``num`` receives num / (den + ε) and ``den`` den + ε.
    """
    normalise = eps is not None
    who = "chunk_linear"
    size = kernel_scalar(who, "size", size, int)
    if size < 1:
        raise ValueError(f"{who}: size must be >= 1, got {size}")
    layouts = {"q": (q, "B n F"), "k": (k, "B n F"), "v": (v, "B n e"), "S0": (S0, "B F e"), "z0": (z0, "B F"),
               "num": (num, "B n e"), "den": (den, "B n")}
    sizes = check_kernel_arrays(who, layouts, written=("num", "den"))
    B, N = sizes["B"], -(-sizes["n"] // size)
    if decays is None:
        decays = (np.ones((B, 0, size, size)), np.ones((B, 0, size)), np.ones((B, 0, size)), np.ones((B, 0)))
        chunks = "N0"
    else:
        chunks = "N"
    coefficients, inward, outward, across = decays
    layouts |= {"coefficients": (coefficients, f"B {chunks} C C"), "inward": (inward, f"B {chunks} C"),
                "outward": (outward, f"B {chunks} C"), "across": (across, f"B {chunks}")}
    sizes = check_kernel_arrays(who, layouts, written=("num", "den"))
    if sizes["C"] != size or sizes.get("N", N) != N:
        raise ValueError(f"{who}: decays must have N = {N} chunks of C = {size}, got coefficients of shape "
                         f"{coefficients.shape}")
    with serial_blas():                                            # BLAS runs inside the kernel's threads
        _chunk_linear(q, k, v, S0, z0, coefficients, inward, outward, across, size,
                      kernel_scalar(who, "eps", eps, float) if normalise else 0.0, normalise, num, den)


@jit_parallel
def _chunk_linear(q, k, v, S0, z0, coefficients, inward, outward, across, size, eps, normalise, num,
                  den):  # pragma: no cover - jitted
    """The three passes of :func:`chunk_linear`; the decay arrays have no chunk (N = 0) when there are none."""
    B, n, F = q.shape
    e = v.shape[2]
    N = (n + size - 1) // size
    G = (N + SEGMENT_CHUNKS - 1) // SEGMENT_CHUNKS                 # segments
    decayed = coefficients.shape[1] > 0
    states = np.empty((B, G, F, e))                                # pass 1: a segment's increment; pass 2: the
    sums = np.empty((B, G, F))                                     # state (S, z) entering it
    spans = np.ones((B, G))                                        # Π α_c over a segment's chunks
    for job in prange(B * G):                                      # pass 1: each segment from a zero state
        b, g = job // G, job % G
        if g + 1 < G:                                              # (the last segment's increment is never read)
            if decayed:
                S, z = np.zeros((F, e)), np.zeros(F)
                for c in range(g * SEGMENT_CHUNKS, (g + 1) * SEGMENT_CHUNKS):
                    spans[b, g] *= _fold(S, z, k, v, outward, across, decayed, b, c, size, n)
                states[b, g], sums[b, g] = S, z
            else:                                                  # no decay: one product for the segment
                a, end = g * SEGMENT_CHUNKS * size, (g + 1) * SEGMENT_CHUNKS * size
                states[b, g], sums[b, g] = np.dot(k[b, a:end].T, v[b, a:end]), _column_sums(k[b, a:end])
    for b in prange(B if G > 0 else 0):                            # pass 2: the state entering each segment
        S, z = S0[b].copy(), z0[b].copy()
        for g in range(G):
            incoming, incoming_z = states[b, g].copy(), sums[b, g].copy()
            states[b, g], sums[b, g] = S, z
            S, z = spans[b, g] * S + incoming, spans[b, g] * z + incoming_z
    for job in prange(B * G):                                      # pass 3: outputs, chunk after chunk
        b, g = job // G, job % G
        S, z = states[b, g].copy(), sums[b, g].copy()
        P_full, intra_full, inter_full = np.empty((size, size)), np.empty((size, e)), np.empty((size, e))
        for c in range(g * SEGMENT_CHUNKS, min(N, (g + 1) * SEGMENT_CHUNKS)):
            a = c * size
            L = min(size, n - a)
            qa, ka, va = q[b, a:a + L], k[b, a:a + L], v[b, a:a + L]
            if L == size:                                          # scratch reused (np.dot into it)
                P, intra, inter = P_full, intra_full, inter_full
            else:                                                  # the last, shorter chunk
                P, intra, inter = np.empty((L, L)), np.empty((L, e)), np.empty((L, e))
            np.dot(qa, ka.T, P)                                    # q_i·k_t
            for i in range(L):
                row = 0.0
                for t in range(i + 1):
                    if decayed:
                        P[i, t] *= coefficients[b, c, i, t]
                    row += P[i, t]
                den[b, a + i] = row
                for t in range(i + 1, L):
                    P[i, t] = 0.0                                  # the future, by selection
            if _finite(va):
                np.dot(P, va, intra)
            else:                                                  # 0·inf would reach rows i < t
                intra[:] = 0.0
                for i in range(L):
                    for t in range(i + 1):
                        for j in range(e):
                            intra[i, j] += P[i, t] * va[t, j]
            qi = qa
            if decayed:
                qi = qa.copy()
                for i in range(L):
                    qi[i] *= inward[b, c, i]
            np.dot(qi, S, inter)                                   # inter-chunk: (ι_i q_i)ᵀ S_c
            for i in range(L):
                d = den[b, a + i]
                for f in range(F):
                    d += qi[i, f] * z[f]                           # + (ι_i q_i)ᵀ z_c
                if normalise:                                      # out = num / (den + ε), as the scan
                    d += eps
                    for j in range(e):
                        num[b, a + i, j] = (intra[i, j] + inter[i, j]) / d
                else:
                    for j in range(e):
                        num[b, a + i, j] = intra[i, j] + inter[i, j]
                den[b, a + i] = d
            if c + 1 < min(N, (g + 1) * SEGMENT_CHUNKS):
                _fold(S, z, k, v, outward, across, decayed, b, c, size, n)


@jit_inline
def _finite(x):  # pragma: no cover - jitted
    """Every entry of the 2-d ``x`` finite (stops at the first that is not)."""
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            if not np.isfinite(x[i, j]):
                return False
    return True


@jit_inline
def _fold(S, z, k, v, outward, across, decayed, b, c, size, n):  # pragma: no cover - jitted
    """S, z ← α_c (S, z) + Σ_t ω_t k_t (v_tᵀ, 1) over chunk c, in place; returns α_c (1 past the last chunk)."""
    a = c * size
    L = min(size, n - a)
    if L <= 0:
        return 1.0
    if not decayed:
        S += np.dot(k[b, a:a + L].T, v[b, a:a + L])
        z += _column_sums(k[b, a:a + L])
        return 1.0
    kw = k[b, a:a + L].copy()
    for t in range(L):
        kw[t] *= outward[b, c, t]
    S *= across[b, c]
    z *= across[b, c]
    S += np.dot(kw.T, v[b, a:a + L])
    z += _column_sums(kw)
    return across[b, c]


@jit_inline
def _column_sums(x):  # pragma: no cover - jitted
    """Σ_t x[t] over the rows of a (T, F) array, row after row (the scan's order)."""
    out = np.zeros(x.shape[1])
    for t in range(x.shape[0]):
        for f in range(x.shape[1]):
            out[f] += x[t, f]
    return out
