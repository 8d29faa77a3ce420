r"""Scaled dot-product attention (Vaswani et al., 2017, §3.2.1, Eq. 1).

    S = Q Kᵀ · scale + B            scale = 1/√d_k by default, B an optional additive bias
    A = softmax(S) over the allowed keys (boolean mask, causal mask, −inf bias entries)
    Attention(Q, K, V) = A V

Masking is by selection: a masked-out key's score and value never enter the arithmetic, so NaN or
Inf stored there (padding garbage, an uninitialised cache slot) cannot reach the output.
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .._validate import as_float, check_qkv, compute_dtype
from .masks import attention_mask
from .softmax import masked_softmax

__all__ = ["scaled_dot_product_attention"]


def scaled_dot_product_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    mask: ArrayLike | None = None,
    *,
    causal: bool | str = False,
    scale: float | None = None,
    fully_masked: str = "zero",
    return_weights: bool = False,
    return_lse: bool = False,
    dtype=np.float64,
) -> NDArray | tuple[NDArray, ...]:
    r"""Scaled dot-product attention.

    .. math::

        A = \operatorname{softmax}\Big(\frac{Q K^\top}{\sqrt{d_k}} + B\Big), \qquad
        \operatorname{Attention}(Q, K, V) = A V

    Parameters
    ----------
    q : (..., n, d_k) array_like
        Queries :math:`Q`.
    k : (..., m, d_k) array_like
        Keys :math:`K`.
    v : (..., m, d_v) array_like
        Values :math:`V`.
    mask : (..., n, m) array_like of bool or float, optional
        Boolean: ``True`` where query *i* may attend to key *j*. Float: an additive bias :math:`B`
        whose ``-inf`` entries mask like ``False``. Any shape that broadcasts to ``(..., n, m)``.
    causal : {False, True, "top-left", "bottom-right"}, default False
        ``True``/"top-left": query *i* sees keys ``j <= i``. "bottom-right": ``j <= i + (m - n)``
        (the last query aligned with the last key). Combined with ``mask`` by logical and.
    scale : float, optional
        Multiplier of :math:`QK^\top`. Default :math:`1/\sqrt{d_k}`.
    fully_masked : {"zero", "nan", "uniform"}, default "zero"
        Weights (and output) of a query that may attend to no key: zeros, NaN, or uniform over all
        *m* keys (which is what filling masked scores with ``-1e9`` gives).
    return_weights : bool, default False
        Also return :math:`A`.
    return_lse : bool, default False
        Also return the log-sum-exp of each query's scores over the keys it may see,
        :math:`\ell_i = \log \sum_j e^{S_{ij}}` (``-inf`` for a query that sees none): what
        FlashAttention stores for the backward pass, and what merges partial attentions
        (:func:`refattn.oracle.merge_attention`).
    dtype : float dtype, default float64
        Compute and output dtype. Inputs of any float precision are converted to it; float32 or
        float16 run the same equation in that precision (a same-dtype baseline).

    Returns
    -------
    out : (..., n, d_v) ndarray
    weights : (..., n, m) ndarray
        Only if ``return_weights``.
    lse : (..., n) ndarray
        Only if ``return_lse``; after ``weights`` when both are asked for.

    Notes
    -----
    Time :math:`O(n m (d_k + d_v))`, memory :math:`O(n m)` for the score matrix. Rows follow IEEE
    for non-finite inputs they use (a NaN query, or a NaN key or value the row may attend to, gives
    a NaN row) and are unaffected by those they may not use.

    References
    ----------
    .. [1] A. Vaswani et al., "Attention Is All You Need", NeurIPS 2017, arXiv:1706.03762v7,
       §3.2.1, Eq. (1).

    Examples
    --------
    >>> q, k, v = np.array([[1.0]]), np.array([[0.0], [np.log(3.0)]]), np.array([[4.0], [8.0]])
    >>> out, A = scaled_dot_product_attention(q, k, v, return_weights=True)
    >>> A
    array([[0.25, 0.75]])
    >>> out
    array([[7.]])
    """
    dtype = compute_dtype(dtype)
    q, k, v = (as_float(name, x, dtype) for name, x in (("q", q), ("k", k), ("v", v)))
    check_qkv(q, k, v)
    n, m, d_k = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = default_scale(d_k) if scale is None else check_scale(scale)
    allowed, bias = attention_mask(mask, causal, n, m, dtype)

    with np.errstate(invalid="ignore"):                            # masked-out garbage may be inf − inf
        S = (q @ np.swapaxes(k, -1, -2)) * scale                   # (..., n, m)  S = QKᵀ/√d_k
    if bias is not None:
        S = S + bias                                               # (..., n, m)  S + B
    A, empty, lse = masked_softmax(S, allowed, fully_masked, return_lse=True)   # (..., n, m)  softmax(S)
    out = weighted_values(A, v, allowed, empty, fully_masked)      # (..., n, d_v)  A V
    extra = (A,) * return_weights + (lse,) * return_lse
    return (out, *extra) if extra else out


def default_scale(d_k: int) -> float:
    """The paper's scale 1/√d_k, as a Python float (so it keeps float16/float32 computations)."""
    return 1.0 / float(np.sqrt(d_k))


def check_scale(scale) -> float:
    """Validate a user ``scale``: a finite real number."""
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.integer, np.floating)):
        raise TypeError(f"scale must be a real number, got {type(scale).__name__}")
    if not np.isfinite(scale):
        raise ValueError(f"scale must be finite, got {scale!r}")
    return float(scale)


def weighted_values(
    A: NDArray, v: NDArray, allowed: NDArray | None, empty: NDArray, fully_masked: str
) -> NDArray:
    """``A @ v``, except that a non-finite value reaches only the rows that may attend to it.

    A plain matmul would spread a NaN in ``v[j]`` to every row, even those whose weight on key *j*
    is an exact 0 because *j* is masked (0 · NaN = NaN). Here the finite part goes through the
    matmul and each non-finite value is added, IEEE-style, to the rows that may use it.
    """
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
