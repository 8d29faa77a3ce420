r"""Top-k attention: softmax over the k largest scores of each row only (Zhao et al., 2019; Gupta et al., 2021).

Explicit Sparse Transformer (Zhao et al., 2019, arXiv:1912.11637, §2, Eq. 5-6) keeps, in each query's row of
the scores, the k largest and masks the rest before the softmax:

    S = Q Kᵀ · scale (+ B)                          (..., n, m)
    t_i = the k-th largest of the scores row i may see
    M(S, k)_ij = S_ij  if S_ij ≥ t_i,  −∞ otherwise
    A = softmax(M(S, k)),   out = A V

Gupta et al. (2021, arXiv:2106.06899, §3) compute the same thing in query chunks: the scores of c queries at a
time (c × m), their top-k, the softmax over those k and the product with V, so that nothing n × m is held at
once (``method="chunk"``; same result row for row, since the selection and the softmax of a row read that
row only).

Ties. Zhao's equation keeps every score equal to the k-th largest (``ties="threshold"``, the default; a row
may then keep more than k keys), as its official code does (``torch.lt(attn, t)`` masks only the scores
strictly below t). Gupta's code keeps exactly k (``torch.topk``), leaving the choice among equal scores to
the implementation; ``ties="first"`` keeps exactly k and, among equal scores, the keys of smaller index j.
A NaN score (a NaN or Inf in q_i or k_j, as in :func:`~refattn.scaled_dot_product_attention`) ranks above
every number, so a row that may see it always keeps it and its output is NaN (as ``torch.topk`` ranks NaN
first): selection never hides a non-finite key from a row that may see it.

Masks and the causal mask act before the selection: only the keys a row may see compete, and a row that
sees fewer than k keeps them all. With k ≥ m every visible key is kept: softmax attention exactly.
"""
from __future__ import annotations

import math
import warnings

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.budget import check_fits, memory_budget
from ..common.checks import as_float, causal_alignment, check_bool, check_choice, check_qkv, check_scale, default_scale
from ..common.ints import check_positive_int
from ..common.products import scores, weighted_values
from ..core.softmax import FULLY_MASKED_POLICIES, masked_softmax
from ..deprecation import REMOVED_IN
from ..draws import note_allowed
from ..masks import attention_mask, check_mask_shape
from ..mechanism import Mechanism

__all__ = ["TOPK_METHODS", "TOPK_TIES", "topk_attention", "topk_mask"]

ZHAO = ('G. Zhao, J. Lin, Z. Zhang, X. Ren, Q. Su, X. Sun, 2019, "Explicit Sparse Transformer: Concentrated '
        'Attention Through Explicit Selection", arXiv:1912.11637; A. Gupta, G. Dar, S. Goodman, D. Ciprut, '
        'J. Berant, 2021, "Memory-efficient Transformers via Top-k Attention", arXiv:2106.06899')
#: Keep every score equal to the k-th largest (Zhao et al.'s Eq. 5), or exactly k, smaller key index first.
TOPK_TIES = ("threshold", "first")
#: The whole score matrix at once, Gupta et al.'s query chunks, or the first while its scores fit the budget.
TOPK_METHODS = ("equation", "chunk", "auto")
#: The default k: the official code's enwik8 run "top8" (lancopku/Explicit-Sparse-Transformer,
#: ``adaptive-span/topk-selection-train.sh``, ``--div -8``: k = 8).
DEFAULT_TOP_K = 8
ROW_ARRAYS = 6   # arrays of the scores' size one chunk holds at its peak (S, the sort keys, their order and
# ranks, the weights, the kept pairs): a chunk of query rows takes 1/6 of the memory budget


def topk_mask(scores: ArrayLike, top_k: int, *, allowed: ArrayLike | None = None,
              ties: str = "threshold") -> NDArray:
    r"""The pairs top-k attention keeps: in each row, the ``top_k`` largest of the scores the row may see.

    .. math::

        \mathrm{keep}_{ij} = [\mathrm{allowed}_{ij}]\,[S_{ij} \ge t_i], \qquad
        t_i = \text{the } \min(k, |\{j : \mathrm{allowed}_{ij}\}|)\text{-th largest allowed } S_{ij}

    Parameters
    ----------
    scores : (..., n, m) array_like
        S. A NaN ranks above every number (it is always kept by a row that may see it).
    top_k : int
        k >= 1.
    allowed : (..., n, m) array_like of bool, optional
        The pairs that compete (``True`` = may attend); default all.
    ties : {"threshold", "first"}, default "threshold"
        "threshold": every score equal to :math:`t_i` is kept too (Zhao et al.'s Eq. 5; a row may keep more
        than k). "first": exactly :math:`\min(k, \cdot)` per row; among equal scores the smaller key index j.

    Returns
    -------
    keep : (..., n, m) ndarray of bool

    Examples
    --------
    >>> S = np.array([[3.0, 1.0, 3.0, 2.0]])
    >>> topk_mask(S, 1)                                            # both 3s tie for the largest
    array([[ True, False,  True, False]])
    >>> topk_mask(S, 1, ties="first")
    array([[ True, False, False, False]])
    >>> topk_mask(S, 2, allowed=[[False, True, True, True]])
    array([[False, False,  True,  True]])
    """
    S = as_float("scores", scores, min_ndim=2)
    top_k = check_positive_int("top_k", top_k)
    check_choice("ties", ties, TOPK_TIES)
    if allowed is None:
        allowed = np.ones(S.shape, dtype=bool)
    else:
        allowed = np.asarray(allowed)
        if allowed.dtype != np.bool_:
            raise TypeError(f"allowed must be a boolean array, got dtype {allowed.dtype} with shape {allowed.shape}")
        try:
            allowed = np.broadcast_to(allowed, S.shape)
        except ValueError:
            raise ValueError(f"allowed of shape {allowed.shape} does not broadcast to scores' {S.shape}") from None
    m = S.shape[-1]
    if m == 0:
        return np.zeros(S.shape, dtype=bool)
    with np.errstate(invalid="ignore"):
        key = np.where(allowed, np.where(np.isnan(S), -np.inf, -S), np.nan)   # ascending: NaN scores first,
    order = np.argsort(key, axis=-1, kind="stable")                # the keys a row may not see (NaN) last
    if ties == "first":
        rank = np.empty_like(order)
        np.put_along_axis(rank, order, np.arange(m), axis=-1)      # rank of S_ij in its row, ties by j
        return allowed & (rank < top_k)
    count = allowed.sum(axis=-1, keepdims=True)                    # (..., n, 1)  keys row i may see
    kth = np.take_along_axis(key, np.take_along_axis(order, np.clip(np.minimum(count, top_k) - 1, 0, m - 1),
                                                     axis=-1), axis=-1)                  # −t_i
    with np.errstate(invalid="ignore"):
        return allowed & (key <= kth) & (count > 0)                # S_ij ≥ t_i


def topk_attention(
    q: ArrayLike, k: ArrayLike, v: ArrayLike, mask: ArrayLike | None = None, *,
    top_k: int = DEFAULT_TOP_K,
    ties: str = "threshold",
    causal: bool | str = False,
    scale: float | None = None,
    fully_masked: str = "zero",
    method: str = "auto",
    chunk_size: int | None = None,
    return_weights: bool = False,
) -> NDArray | tuple[NDArray, NDArray]:
    r"""Top-k attention: softmax over the k largest scores of each query's row, the rest masked.

    .. math::

        A = \operatorname{softmax}\big(M(S, k)\big), \quad
        M(S, k)_{ij} = \begin{cases} S_{ij} & S_{ij} \ge t_i \\ -\infty & \text{otherwise} \end{cases},
        \quad S = \frac{QK^\top}{\sqrt{d_k}} + B, \qquad \mathrm{out} = A V

    Parameters
    ----------
    q : (..., n, d_k) array_like
        Queries.
    k : (..., m, d_k) array_like
        Keys.
    v : (..., m, d_v) array_like
        Values.
    mask : (..., n, m) array_like of bool or float, optional
        As in :func:`~refattn.scaled_dot_product_attention`: ``True`` = may attend, or an additive bias B
        (its ``-inf`` entries mask). Masked keys do not compete for the k places.
    top_k : int, default 8
        k >= 1 (the default: the official code's enwik8 run "top8"); k >= m is softmax attention.
    ties : {"threshold", "first"}, default "threshold"
        The rule among scores equal to the k-th largest (:func:`topk_mask`).
    causal : {False, True, "top-left", "bottom-right"}, default False
        The causal mask, applied before the selection.
    scale : float, optional
        Multiplier of :math:`QK^\top`; default :math:`1/\sqrt{d_k}`.
    fully_masked : {"zero", "nan", "uniform"}, default "zero"
        A row that may see no key, as in :func:`~refattn.scaled_dot_product_attention`.
    method : {"equation", "chunk", "auto"}, default "auto"
        "equation": the whole (..., n, m) score matrix at once. "chunk": Gupta et al.'s query chunks,
        ``chunk_size`` rows at a time. "auto": "equation" while the scores fit the memory budget (or the weights
        are asked for), else "chunk". ("chunked" is the deprecated name of "chunk".)
    chunk_size : int, optional
        Query rows per chunk of "chunk"; default: as many as fit 1/6 of
        :func:`~refattn.common.memory_budget` (the chunk's scores, sort keys and order, weights).
    return_weights : bool, default False
        Also return the (..., n, m) weights A (zero outside the kept pairs).

    Returns
    -------
    out : (..., n, d_v) ndarray
    weights : (..., n, m) ndarray
        Only if ``return_weights``.

    Notes
    -----
    Time :math:`O(n m (d_k + d_v + \log m))` (the sort of each row; the product with V runs over the dense
    rows, as Gupta et al.'s code scatters the k weights into them); memory :math:`O(n m)` for "equation",
    :math:`O(c\, m)` for chunks of c queries.

    **Paper and code.** Zhao et al.'s official code (lancopku/Explicit-Sparse-Transformer,
    ``fairseq/modules/sparse_activated_multihead_attention.py``) takes k = ⌈m / div⌉ or k = −div and masks
    the scores below the k-th largest, adding ``-inf`` for padding first: a row with fewer visible keys than
    k keeps them all, as here. Gupta et al.'s code (ag1988/top_k_attention,
    ``nocache_attention/nocache_attention.py``) fills masked scores with the most negative float and takes
    ``torch.topk``, so a row that sees fewer than k keys also "keeps" masked keys with weight
    :math:`e^{-3.4\cdot 10^{38}} = 0`, and a fully masked row becomes uniform over k masked keys; here masked
    keys never compete and a fully masked row follows ``fully_masked``.

    References
    ----------
    .. [1] G. Zhao et al., "Explicit Sparse Transformer: Concentrated Attention Through Explicit Selection",
       arXiv:1912.11637v1, §2, Eq. (5)-(6).
    .. [2] A. Gupta et al., "Memory-efficient Transformers via Top-k Attention", SustaiNLP 2021,
       arXiv:2106.06899v1, §3.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((2, 5, 4)), rng.standard_normal((2, 7, 4)), rng.standard_normal((2, 7, 3))
    >>> out, A = topk_attention(q, k, v, top_k=2, return_weights=True)
    >>> out.shape, (A > 0).sum(axis=-1).max()                      # two keys per row
    ((2, 5, 3), np.int64(2))
    >>> chunked = topk_attention(q, k, v, top_k=2, method="chunk", chunk_size=2)
    >>> bool(np.allclose(chunked, out, rtol=1e-12, atol=1e-12))
    True
    >>> from refattn import scaled_dot_product_attention
    >>> bool(np.allclose(topk_attention(q, k, v, top_k=7), scaled_dot_product_attention(q, k, v)))
    True
    """
    return_weights = check_bool("return_weights", return_weights)
    q, k, v = (as_float(name, x) for name, x in (("q", q), ("k", k), ("v", v)))
    if method == "chunked":
        warnings.warn(f'topk_attention: method="chunked" is method="chunk" (the old name goes in refattn {REMOVED_IN})',
                      DeprecationWarning, stacklevel=2)
        method = "chunk"
    out, A, keep = _topk(q, k, v, mask, top_k, ties, causal, scale, fully_masked, method, chunk_size, return_weights)
    note_allowed(keep)                                             # the kept pairs (None unless return_weights)
    return (out, A) if return_weights else out


def _topk(q, k, v, mask, top_k, ties, causal, scale, fully_masked, method, chunk_size, return_weights):
    """Validate in one order for every method, then run it: (out, weights or None, kept pairs or None)."""
    batch = check_qkv(q, k, v)
    n, m, d_v = q.shape[-2], k.shape[-2], v.shape[-1]
    top_k = check_positive_int("top_k", top_k)
    check_choice("ties", ties, TOPK_TIES)
    check_choice("method", method, TOPK_METHODS)
    check_choice("fully_masked", fully_masked, FULLY_MASKED_POLICIES)
    scale = default_scale(q.shape[-1]) if scale is None else check_scale(scale)
    chunk_size = None if chunk_size is None else check_positive_int("chunk_size", chunk_size)
    if mask is not None:
        mask = check_mask_shape(mask, n, m)
        if mask.dtype.kind not in "bf":
            raise TypeError(f"mask must be bool (True = may attend) or float (additive bias), got dtype {mask.dtype} "
                            f"with shape {mask.shape}")
        try:
            batch = np.broadcast_shapes(batch, mask.shape[:-2])
        except ValueError:
            raise ValueError(f"mask's leading dims {mask.shape[:-2]} do not broadcast to q, k, v's {batch}") from None
    causal_alignment(causal)
    shape = (*batch, n, m)
    if return_weights:
        check_fits("the weights (return_weights=True)", shape)
    if method == "auto":
        method = "equation" if return_weights or math.prod(shape) * 8 * ROW_ARRAYS <= memory_budget() else "chunk"
    if method == "equation":
        check_fits('the scores of method="equation"', shape)
        step = max(n, 1)
    else:
        step = chunk_size or max(1, memory_budget() // (ROW_ARRAYS * 8 * max(1, math.prod(batch) * m)))
        check_fits("the scores of one chunk of query rows", (*batch, min(step, n), m))
    out = np.empty((*batch, n, d_v))
    A = np.empty(shape) if return_weights else None
    keep = np.empty(shape, dtype=bool) if return_weights else None
    for i0 in range(0, n, step):                                   # Gupta et al.: one chunk of queries at a time
        rows = range(i0, min(n, i0 + step))
        chunk = _rows(q, k, v, mask, causal, scale, top_k, ties, fully_masked, batch, rows)
        out[..., i0:rows.stop, :] = chunk[0]
        if return_weights:
            A[..., i0:rows.stop, :], keep[..., i0:rows.stop, :] = chunk[1], chunk[2]
    return out, A, keep


def _rows(q, k, v, mask, causal, scale, top_k, ties, fully_masked, batch: tuple[int, ...], rows: range):
    """Top-k attention of the query rows ``rows``: (out, weights, kept pairs) of those rows."""
    allowed, bias = attention_mask(mask, causal, q.shape[-2], k.shape[-2], np.float64, rows)
    q = q[..., rows.start:rows.stop, :]
    S = scores(q, k, scale)                                        # (..., c, m)  QKᵀ·scale, non-finite: NaN
    if bias is not None:
        S = S + bias                                               # (..., c, m)  S + B
    shape = (*batch, len(rows), k.shape[-2])
    S = np.broadcast_to(S, shape)                                  # a mask may carry more batch dims than q, k
    allowed = np.ones(shape, dtype=bool) if allowed is None else np.broadcast_to(allowed, shape)
    keep = topk_mask(S, top_k, allowed=allowed, ties=ties)         # (..., c, m)  S_ij ≥ t_i
    A, empty = masked_softmax(S, keep, fully_masked)               # (..., c, m)  softmax(M(S, k))
    out = weighted_values(A, v, keep, empty, fully_masked)         # (..., c, d_v)  A V
    if fully_masked == "uniform":
        keep = keep | empty                                        # a uniform row uses every key
    return out, A, keep


RECORD = Mechanism.of(
    topk_attention,
    id="topk", title="Top-k attention (Explicit Sparse Transformer; memory-efficient top-k)", family="beyond",
    section="not in the survey (content-based sparsity, cf. §4.1.2)", paper=ZHAO,
    equation=r"\operatorname{softmax}\big(M(S, k)\big) V,\ M(S, k)_{ij} = S_{ij}\ \text{if}\ S_{ij} \ge t_i"
             r"\ (\text{the $k$-th largest of row } i),\ -\infty\ \text{otherwise}",
    time="O(n·m·(d + log m))", memory="O(n·m), O(c·m) in chunks",
    methods=TOPK_METHODS, causal=True,
    content_selected=True, figure="refattn.figures.topk:topk",
    examples=({"top_k": 2}, {"top_k": 3, "ties": "first"}, {"top_k": 1, "fully_masked": "uniform"},
              {"top_k": 2, "chunk_size": 2}),
    exact_options=lambda n, m: {"top_k": max(m, 1)},
    exact_limit="k ≥ m: every visible key kept",
)
