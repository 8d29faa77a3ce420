"""Masked products shared by the families: the weighted values of masked rows, the split of a score scale."""
from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

__all__ = ["scores", "split_scale", "weighted_values"]


def split_scale(q: np.ndarray, k: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """Share a score scale s between queries and keys: q̃ = sign(s)·√|s|·q and k̃ = √|s|·k, so q̃·k̃ = s·q·k.

    With s = 1/√d this is q/d^{1/4} and k/d^{1/4}, what kernels of q and k apart (random features, a Gaussian
    kernel, hashing) read in place of q·k/√d.

    Parameters
    ----------
    q, k : ndarray
        Queries and keys.
    scale : float
        s, a checked scale (:func:`check_scale`, :func:`default_scale`).

    Returns
    -------
    q_tilde, k_tilde : ndarray
    """
    root = np.sqrt(abs(scale))
    return q * (np.sign(scale) * root), k * root


def weighted_values(
    A: NDArray, v: NDArray, allowed: NDArray | None, empty: NDArray, fully_masked: str
) -> NDArray:
    """``A @ v``, except that a non-finite value reaches only the rows that may attend to it.

    A plain matmul would spread a NaN in ``v[j]`` to every row, even those whose weight on key *j*
    is an exact 0 because *j* is masked (0 · NaN = NaN). Here the finite part goes through the
    matmul and each non-finite value is added, IEEE-style, to the rows that may use it.

    Parameters
    ----------
    A : (..., n, m) ndarray
        Attention weights (exact zeros where masked).
    v : (..., m, d_v) ndarray
        Values.
    allowed : (..., n, m) ndarray of bool or None
        The pairs each row may see (``None``: all).
    empty : (..., n, 1) ndarray of bool
        Rows that see no key (fully masked).
    fully_masked : {"zero", "nan", "uniform"}
        The policy for those rows; "uniform" rows use every key. With no key at all (m = 0) every
        row is 0 under "zero" and "uniform" (the empty sum) and NaN under "nan".

    Returns
    -------
    (..., n, d_v) ndarray
    """
    if A.shape[-1] == 0:                                           # no key at all: every row is fully masked
        fill = np.nan if fully_masked == "nan" else 0.0            # "uniform": a mean over no key, the empty sum
        return np.full((*A.shape[:-1], v.shape[-1]), fill, dtype=A.dtype)
    finite = np.isfinite(v)
    if finite.all():
        return A @ v                                               # (..., n, d_v)
    out = A @ np.where(finite, v, 0)
    m = v.shape[-2]
    used = np.ones(A.shape, dtype=bool) if allowed is None else np.broadcast_to(allowed, A.shape)
    if fully_masked == "uniform":
        used = used | empty                                        # uniform rows use every key
    bad = np.flatnonzero(~finite.reshape(-1, m, v.shape[-1]).all(axis=(0, 2)))  # key indices
    v_bad = v[..., bad, :]                                         # (..., b, d_v)
    use = used[..., bad][..., None] & ~np.isfinite(v_bad)[..., None, :, :]  # (..., n, b, d_v)
    with np.errstate(invalid="ignore"):                            # 0·inf where masked: dropped below
        terms = A[..., bad][..., None] * v_bad[..., None, :, :]    # (..., n, b, d_v)  α_ij v_j
    return out + np.sum(np.where(use, terms, 0), axis=-2)


def scores(q: NDArray, k: NDArray, scale: float) -> NDArray:
    """S = Q Kᵀ · scale, (..., n, m), with every score that is not finite set to NaN.

    An Inf or NaN in q_i or k_j, or a dot product beyond the float64 range, makes the score undefined:
    its rounding to ±inf or NaN depends on the summation order of the BLAS kernel, and it must not pass
    for a masked key. Masking by selection then keeps it out of every row that may not see the pair.

    Parameters
    ----------
    q : (..., n, d_k) ndarray
        Queries.
    k : (..., m, d_k) ndarray
        Keys.
    scale : float
        Multiplier of the dot products.
    """
    with np.errstate(invalid="ignore", over="ignore"):             # masked-out garbage may be inf − inf
        S = (q @ np.swapaxes(k, -1, -2)) * scale                   # (..., n, m)  S = QKᵀ·scale
    S[~np.isfinite(S)] = np.nan                                    # undefined, whatever the kernel
    return S
