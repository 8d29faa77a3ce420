r"""Chunkwise-parallel causal linear attention: the scan's sums regrouped into per-chunk matrix products.

For aligned features q, k (B, n, F) and values v (B, n, e), chunk c holds positions a … a + L − 1 and

    num_i = Σ_{a ≤ t ≤ i} c_it (q_i·k_t) v_t  +  (ι_i q_i)ᵀ S_c       (intra-chunk + inter-chunk)
    den_i = Σ_{a ≤ t ≤ i} c_it (q_i·k_t)      +  (ι_i q_i)ᵀ z_c
    S_{c+1} = α_c S_c + Σ_{a ≤ t < a + L} (ω_t k_t) v_tᵀ,  z_{c+1} = α_c z_c + Σ_t ω_t k_t     (S_0, z_0 given)

with the decays c_it (within the chunk), ι_i (state to query), ω_t (key to the chunk's end) and α_c
(across the chunk) all 1 when there are none. The products inside a chunk go through BLAS
(:func:`refattn.kernels.gemm.gemm`), so the flops run at GEMM speed instead of the scan's scalar
loops: the inter part is written into the output rows and the intra part added onto it (β = 1), as
each chunk's state increment is added onto S.

The chunks are grouped into segments of :data:`SEGMENT_CHUNKS` chunks, and the work runs in three
passes: each segment's own state increment (the recurrence from a zero state over its chunks, or
with no decay Σ_t k_t v_tᵀ over the segment in products of :data:`STATE_ROWS` rows; independent:
``prange`` over segments), the state entering each segment (a short running sum over segments),
then each segment's outputs chunk after chunk from its entering state (independent again). Each
array is read twice and the output written once; the F × e state stays in cache. The segments are a
fixed number of chunks, so the sums and their rounding do not depend on the number of threads. The
denominators' sums (q_i·z and the intra row sums) run in eight interleaved partial sums, where one running sum
would wait on each addition.

The intra part sets the pairs t > i to 0 before its product (a selection: a NaN score of a later key
never reaches query i). A chunk holding a non-finite value would still spread it through 0·inf in
the product, so such a chunk sums its pairs t <= i by loops instead, as the scan does.
"""
from __future__ import annotations

import numpy as np

from .._jit import jit_inline, jit_parallel, prange
from . import check_kernel_arrays, kernel_scalar
from .blas import serial_blas
from .gemm import gemm, gemm_work

__all__ = ["SEGMENT_CHUNKS", "STATE_ROWS", "chunk_linear"]

#: Chunks per segment: the unit of parallel work (a fixed number: results do not depend on the threads).
#: Measured at n = 65536, C = 32, F = e = 64 on two threads: 16 chunks 31.0 ms, 32 30.1, 64 29.9 (but
#: n = 2048 then has one segment, one thread); n = 2048: 1.03, 0.87, 1.29 ms.
SEGMENT_CHUNKS = 32

#: Rows per product of a segment's state increment (pass 1, no decay). Measured with F = e = 64 on one
#: thread: Kᵀ V over 128 rows runs at 47 GFLOP/s, over 512 at 33 (OpenBLAS's small-matrix kernels
#: take 64 × 64 × 128; larger products are packed first).
STATE_ROWS = 128


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
        work, keys = gemm_work(), np.empty((size if decayed else 0, F))
        if g + 1 < G:                                              # (the last segment's increment is never read)
            S, z = states[b, g], sums[b, g]
            S[:], z[:] = 0.0, 0.0
            if decayed:
                for c in range(g * SEGMENT_CHUNKS, (g + 1) * SEGMENT_CHUNKS):
                    spans[b, g] *= _fold(S, z, k, v, outward, across, decayed, b, c, size, n, keys, work)
            else:                                                  # no decay: Σ_t k_t v_tᵀ over the segment
                a, end = g * SEGMENT_CHUNKS * size, (g + 1) * SEGMENT_CHUNKS * size
                for r in range(a, end, STATE_ROWS):
                    gemm(k[b, r:min(r + STATE_ROWS, end)], True, v[b, r:min(r + STATE_ROWS, end)], False, 1.0, S,
                         work)
                _add_rows(z, k[b, a:end])
    for b in prange(B if G > 0 else 0):                            # pass 2: the state entering each segment
        S, z = S0[b].copy(), z0[b].copy()
        for g in range(G):
            incoming, incoming_z = states[b, g].copy(), sums[b, g].copy()
            states[b, g], sums[b, g] = S, z
            S, z = spans[b, g] * S + incoming, spans[b, g] * z + incoming_z
    for job in prange(B * G):                                      # pass 3: outputs, chunk after chunk
        b, g = job // G, job % G
        work, keys = gemm_work(), np.empty((size if decayed else 0, F))
        S, z = states[b, g].copy(), sums[b, g].copy()
        P_full, ones = np.empty((size, size)), np.ones(size)
        queries = np.empty((size if decayed else 0, F))
        for c in range(g * SEGMENT_CHUNKS, min(N, (g + 1) * SEGMENT_CHUNKS)):
            a = c * size
            L = min(size, n - a)
            qa, ka, va, out = q[b, a:a + L], k[b, a:a + L], v[b, a:a + L], num[b, a:a + L]
            P = P_full[:L, :L]
            gemm(qa, False, ka, True, 0.0, P, work)                # q_i·k_t
            for i in range(L):
                if decayed:
                    for t in range(i + 1):
                        P[i, t] *= coefficients[b, c, i, t]
                for t in range(i + 1, L):
                    P[i, t] = 0.0                                  # the future, by selection
                den[b, a + i] = _dot(P[i, :i + 1], ones[:i + 1])   # Σ_{t <= i} c_it q_i·k_t
            qi = qa
            if decayed:
                qi = queries[:L]
                for i in range(L):
                    for f in range(F):
                        qi[i, f] = qa[i, f] * inward[b, c, i]
            gemm(qi, False, S, False, 0.0, out, work)              # inter-chunk: (ι_i q_i)ᵀ S_c
            if _finite(va):
                gemm(P, False, va, False, 1.0, out, work)          # + intra-chunk
            else:                                                  # 0·inf would reach rows i < t
                for i in range(L):
                    for t in range(i + 1):
                        for j in range(e):
                            out[i, j] += P[i, t] * va[t, j]
            for i in range(L):
                d = den[b, a + i] + _dot(qi[i], z)                 # + (ι_i q_i)ᵀ z_c
                if normalise:                                      # out = num / (den + ε), as the scan
                    d += eps
                    for j in range(e):
                        out[i, j] /= d
                den[b, a + i] = d
            if c + 1 < min(N, (g + 1) * SEGMENT_CHUNKS):
                _fold(S, z, k, v, outward, across, decayed, b, c, size, n, keys, work)


@jit_inline
def _dot(x, y):  # pragma: no cover - jitted
    """Σ_f x_f y_f over two 1-d arrays, in eight interleaved partial sums (independent additions)."""
    n = x.shape[0]
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
    for f in range(0, n - n % 8, 8):
        s0 += x[f] * y[f]
        s1 += x[f + 1] * y[f + 1]
        s2 += x[f + 2] * y[f + 2]
        s3 += x[f + 3] * y[f + 3]
        s4 += x[f + 4] * y[f + 4]
        s5 += x[f + 5] * y[f + 5]
        s6 += x[f + 6] * y[f + 6]
        s7 += x[f + 7] * y[f + 7]
    tail = 0.0
    for f in range(n - n % 8, n):
        tail += x[f] * y[f]
    return (((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))) + tail


@jit_inline
def _finite(x):  # pragma: no cover - jitted
    """Every entry of the 2-d ``x`` finite (stops at the first that is not)."""
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            if not np.isfinite(x[i, j]):
                return False
    return True


@jit_inline
def _fold(S, z, k, v, outward, across, decayed, b, c, size, n, keys, work):  # pragma: no cover - jitted
    """S, z ← α_c (S, z) + Σ_t ω_t k_t (v_tᵀ, 1) over chunk c, in place; returns α_c (1 past the last chunk).

    ``keys`` is a (C, F) scratch for the decayed keys ω_t k_t (unused without decay).
    """
    a = c * size
    L = min(size, n - a)
    if L <= 0:
        return 1.0
    if not decayed:
        gemm(k[b, a:a + L], True, v[b, a:a + L], False, 1.0, S, work)
        _add_rows(z, k[b, a:a + L])
        return 1.0
    kw = keys[:L]
    for t in range(L):
        for f in range(kw.shape[1]):
            kw[t, f] = k[b, a + t, f] * outward[b, c, t]
    S *= across[b, c]
    z *= across[b, c]
    gemm(kw, True, v[b, a:a + L], False, 1.0, S, work)
    _add_rows(z, kw)
    return across[b, c]


@jit_inline
def _add_rows(z, x):  # pragma: no cover - jitted
    """z += x[t] for each row t of a (T, F) array, in order (the scan's sums)."""
    for t in range(x.shape[0]):
        for f in range(x.shape[1]):
            z[f] += x[t, f]
