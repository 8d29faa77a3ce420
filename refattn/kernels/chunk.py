r"""Chunkwise-parallel causal linear attention: the scan's sums regrouped into per-chunk matrix products.

For aligned features q, k (B, n, F) and values v (B, n, e) (the caller appends a column of ones to v,
so the denominator rides along), chunk c holds positions a … a + L − 1 and

    out_i = Σ_{a ≤ t ≤ i} c_it (q_i·k_t) v_t  +  (ι_i q_i)ᵀ S_c        (intra-chunk + inter-chunk)
    S_{c+1} = α_c S_c + Σ_{a ≤ t < a + L} (ω_t k_t) v_tᵀ,  S_0 given     (the state entering each chunk)

with the decays c_it (within the chunk), ι_i (state to query), ω_t (key to the chunk's end) and α_c
(across the chunk) all 1 when there are none. Three passes: every chunk's intra part and state
increment (independent: ``prange`` over chunks), the states as a running sum over chunks (one
F × e update per chunk), every chunk's inter part (independent again). The products inside a chunk
go through BLAS (``np.dot``), so the flops run at GEMM speed instead of the scan's scalar loops.

The intra part sets the pairs t > i to 0 before its product (a selection: a NaN score of a later key
never reaches query i). A chunk holding a non-finite value would still spread it through 0·inf in
the product, so such a chunk sums its pairs t <= i by loops instead, as the scan does.
"""
from __future__ import annotations

import numpy as np

from .._jit import jit_parallel, prange
from . import check_kernel_arrays, kernel_scalar

__all__ = ["chunk_linear"]


def chunk_linear(q, k, v, S0, size, out, *, decays=None) -> None:
    """Run the chunkwise form after checking every shape it indexes; writes ``out`` (B, n, e).

    q, k (B, n, F) aligned (key t beside query t), v (B, n, e), S0 (B, F, e) the state before the first
    chunk, ``size`` the chunk size C; ``decays`` None or (coefficients (B, N, C, C), inward (B, N, C),
    outward (B, N, C), across (B, N)) with N = ⌈n / C⌉ (see the module docstring).
    """
    who = "chunk_linear"
    size = kernel_scalar(who, "size", size, int)
    if size < 1:
        raise ValueError(f"{who}: size must be >= 1, got {size}")
    layouts = {"q": (q, "B n F"), "k": (k, "B n F"), "v": (v, "B n e"), "S0": (S0, "B F e"), "out": (out, "B n e")}
    B, n = q.shape[:2]
    N = -(-n // size)
    if decays is None:
        decays = (np.ones((B, 0, size, size)), np.ones((B, 0, size)), np.ones((B, 0, size)), np.ones((B, 0)))
        chunks = "N0"
    else:
        chunks = "N"
    coefficients, inward, outward, across = decays
    layouts |= {"coefficients": (coefficients, f"B {chunks} C C"), "inward": (inward, f"B {chunks} C"),
                "outward": (outward, f"B {chunks} C"), "across": (across, f"B {chunks}")}
    sizes = check_kernel_arrays(who, layouts, written=("out",))
    if sizes["C"] != size or sizes.get("N", N) != N:
        raise ValueError(f"{who}: decays must have N = {N} chunks of C = {size}, got coefficients of shape "
                         f"{coefficients.shape}")
    _chunk_linear(q, k, v, S0, coefficients, inward, outward, across, size, out)


@jit_parallel
def _chunk_linear(q, k, v, S0, coefficients, inward, outward, across, size, out):  # pragma: no cover - jitted
    """The three passes of :func:`chunk_linear`; the decay arrays have no chunk (N = 0) when there are none."""
    B, n, F = q.shape
    e = v.shape[2]
    N = (n + size - 1) // size
    decayed = coefficients.shape[1] > 0
    states = np.empty((B, N, F, e))                                # states[b, c]: the state entering chunk c
    for job in prange(B * N):                                      # pass 1: intra parts and state increments
        b, c = job // N, job % N
        a = c * size
        L = min(size, n - a)
        qa, ka, va = q[b, a:a + L], k[b, a:a + L], v[b, a:a + L]
        P = np.dot(qa, ka.T)                                       # q_i·k_t
        for i in range(L):
            for t in range(L):
                if t > i:
                    P[i, t] = 0.0                                  # the future, by selection
                elif decayed:
                    P[i, t] *= coefficients[b, c, i, t]
        if np.isfinite(va).all():
            out[b, a:a + L] = np.dot(P, va)
        else:                                                      # 0·inf would reach rows i < t
            for i in range(L):
                for j in range(e):
                    acc = 0.0
                    for t in range(i + 1):
                        acc += P[i, t] * va[t, j]
                    out[b, a + i, j] = acc
        if c + 1 < N:                                              # the last chunk's increment is never read
            kw = ka.copy()
            if decayed:
                for t in range(L):
                    kw[t] *= outward[b, c, t]
            states[b, c + 1] = np.dot(kw.T, va)
    for b in prange(B if N > 0 else 0):                            # pass 2: S_{c+1} = α_c S_c + increment_c
        states[b, 0] = S0[b]
        for c in range(1, N):
            alpha = across[b, c - 1] if decayed else 1.0
            for f in range(F):
                for j in range(e):
                    states[b, c, f, j] += alpha * states[b, c - 1, f, j]
    for job in prange(B * N):                                      # pass 3: inter parts, (ι_i q_i)ᵀ S_c
        b, c = job // N, job % N
        a = c * size
        L = min(size, n - a)
        qa = q[b, a:a + L].copy()
        if decayed:
            for i in range(L):
                qa[i] *= inward[b, c, i]
        out[b, a:a + L] += np.dot(qa, states[b, c])
