r"""Scaled dot-product attention (Vaswani et al., 2017, §3.2.1, Eq. 1).

    S = Q Kᵀ · scale + B            scale = 1/√d_k by default, B an optional additive bias
    A = softmax(S) over the allowed keys (boolean mask, causal mask, −inf bias entries)
    Attention(Q, K, V) = A V

Masking is by selection: a masked-out key's score and value never enter the arithmetic, so NaN or
Inf stored there (padding garbage, an uninitialised cache slot) cannot reach the output.
"""
from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.budget import check_fits, memory_budget
from ..common.checks import (
    as_float,
    broadcast_batch,
    causal_alignment,
    check_bool,
    check_choice,
    check_qkv,
    check_scale,
    compute_dtype,
    default_scale,
)
from ..common.groups import grouped_kv
from ..common.products import scores, weighted_values
from ..deprecation import none_is_auto
from ..kernels.tiles import blocked_inputs, check_block_size
from ..masks import attention_mask, check_key_lengths, check_mask_shape, key_padding
from ..mechanism import Mechanism
from ..papers import VASWANI
from .softmax import FULLY_MASKED_POLICIES, masked_softmax

__all__ = ["scaled_dot_product_attention"]

METHODS = ("equation", "blocked", "auto")
AUTO_BLOCKED_ENTRIES = 2**21     # "auto": blocked once the score matrix batch·n·m exceeds this (16 MiB),
# where blocked was faster alone and inside multi_head_attention (README, "Speed and memory")
EQUATION_ARRAYS = 4              # arrays of the scores' size the equation path holds at its peak
# (S, the selected scores, their exponentials, the weights): a chunk of query rows takes 1/4 of the budget


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
    key_lengths: ArrayLike | None = None,
    method: str = "auto",
    block_size: int | tuple[int, int] | None = None,
    dtype=np.float64,
    enable_gqa: bool = False,
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
    key_lengths : (...) array_like of int, optional
        Key padding as lengths: the query rows of batch index ``b`` see only keys ``j <
        key_lengths[b]`` (combined with ``mask`` and ``causal`` by logical and). Its shape
        broadcasts against the leading dims of ``q``, ``k``, ``v`` from the right, so for
        ``(B, H, n, d)`` inputs pass ``lengths[:, None]``. The equation path turns it into
        :func:`refattn.padding_mask`; the blocked kernel just stops at the length.
    method : {"equation", "blocked", "auto"}, default "auto"
        "equation": the readable definition above, materialising the ``(..., n, m)`` scores.
        "blocked": a Numba kernel with an online softmax over tiles (FlashAttention's Algorithm 1,
        :mod:`refattn.kernels.blocked`) that never materialises the scores; float64 only, no
        ``return_weights``. "auto": "equation" while the scores fit the memory budget (see Notes) and
        have at most ``2**21`` entries, else it streams (where the blocked kernel is faster). ``None``,
        the old default, is read as "auto" with a ``DeprecationWarning``. Streaming is the blocked kernel in float64,
        and the equation path one chunk of query rows at a time in float32/float16; the weights,
        when asked for, always come from "equation".
    block_size : int or (int, int), optional
        Query and key tile rows of the blocked kernel, positive ints (checked whatever the method);
        a tile larger than the problem is cut to it. Default:
        :func:`~refattn.kernels.tiles.default_block_size`, ``(64, 64)`` for ``d_k, d_v <= 64``. Tiles
        whose products exceed ``2**18`` multiply-adds let OpenBLAS start threads inside Numba's, which is
        several times slower (measured in the README, "Speed and memory").
    dtype : float dtype, default float64
        Compute and output dtype. Inputs of any float precision are converted to it; float32 or
        float16 run the same equation in that precision (a same-dtype baseline).
    enable_gqa : bool, default False
        Grouped-query attention (PyTorch's ``enable_gqa``): ``q`` is ``(..., h, n, d_k)`` and ``k``,
        ``v`` are ``(..., h_kv, m, ·)`` with ``h`` divisible by ``h_kv``; query head ``i`` reads
        key/value head ``i // (h / h_kv)`` (:func:`refattn.common.kv_groups`, the rule of
        :func:`refattn.oracle.check`). A mask and ``key_lengths`` are then in the query heads'
        layout ``(..., h, n, m)``. False: the head axes broadcast as any other batch axis.

    Returns
    -------
    out : (..., n, d_v) ndarray
    weights : (..., n, m) ndarray
        Only if ``return_weights``.
    lse : (..., n) ndarray
        Only if ``return_lse``; after ``weights`` when both are asked for.

    Notes
    -----
    Time :math:`O(n m (d_k + d_v))`, memory :math:`O(n m)` for the score matrix (``method=
    "blocked"``: no score matrix; a mask or bias given as an array is still read tile by tile from
    its O(n m) input). The blocked result equals the equation path to about 1e-13 relative: the
    online rescaling adds a few roundings per key tile. Rows follow IEEE
    for non-finite inputs they use (a NaN query, or a NaN key or value the row may attend to, gives
    a NaN row) and are unaffected by those they may not use. A score
    :math:`\mathrm{scale} \cdot q_i \cdot k_j` that is not finite (an Inf or NaN in :math:`q_i` or
    :math:`k_j`, or a dot product beyond the float64 range, e.g. inputs near 1e155) is NaN before
    the bias is added, so its row is NaN whenever the pair is visible: the rounding of such a sum
    to +inf, -inf or NaN depends on the order of summation and on fused multiply-adds, which differ
    between BLAS and the kernels, and an overflow must not pass for a masked key.

    Edge sizes follow one rule in every method: n = 0 gives ``(..., 0, d_v)`` (weights
    ``(..., 0, m)``); m = 0 leaves every query without a key, so it follows ``fully_masked``: 0
    under "zero" and "uniform" (a mean over no key is the empty sum), NaN under "nan", with
    ``lse = -inf``; d_k = 0 refuses the default scale (``ValueError`` naming d_k), while an explicit
    ``scale`` gives scores 0 (uniform attention); d_v = 0 gives ``(..., n, 0)``; a batch of size 0
    gives empty results of the right shape.

    Memory: :func:`refattn.common.memory_budget` (4 GiB unless ``REFATTN_MEMORY_BUDGET`` or
    :func:`refattn.common.set_memory_budget` says otherwise) bounds one dense ``(..., n, m)`` array.
    Above it the default and "auto" stream, ``return_weights=True`` and ``method="equation"``
    raise :class:`~refattn.common.MemoryBudgetError` (a ``ValueError`` and a ``MemoryError``)
    before allocating, naming the size in GiB, and so do blocked score tiles or a mask that the
    blocked kernel would have to broadcast to ``(..., n, m)`` (pass ``key_lengths`` and ``causal``
    instead). The equation path itself holds about four arrays of the scores' size at its peak.

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
    method = none_is_auto("scaled_dot_product_attention", method)
    check_choice("method", method, METHODS)
    return_weights, return_lse = check_bool("return_weights", return_weights), check_bool("return_lse", return_lse)
    q, k, v = (as_float(name, x, dtype) for name, x in (("q", q), ("k", k), ("v", v)))
    if check_bool("enable_gqa", enable_gqa):
        k, v, _ = grouped_kv(q, k, v)                              # (..., h, m, ·): head i reads i // (h/h_kv)
    batch = check_qkv(q, k, v)
    n, m, d_k, d_v = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    scale = default_scale(d_k) if scale is None else check_scale(scale)
    check_choice("fully_masked", fully_masked, FULLY_MASKED_POLICIES)
    causal_alignment(causal)
    tiles = check_block_size(block_size, d_k, d_v)                # checked whatever the method
    if key_lengths is not None:
        key_lengths = check_key_lengths(key_lengths, m)
    if mask is not None:
        mask = check_mask_shape(mask, n, m)
        batch = broadcast_batch({"q, k, v": batch, "mask": mask.shape[:-2]})
    if key_lengths is not None:
        batch = broadcast_batch({"q, k, v (and mask)": batch, "key_lengths": key_lengths.shape})
    method = resolve_method(method, dtype, (*batch, n, m), return_weights)
    if method == "blocked":
        return _blocked(q, k, v, mask, causal, key_lengths, batch, scale, fully_masked, tiles, return_lse)
    if method == "equation":
        out, A, lse = _equation(q, k, v, mask, causal, key_lengths, scale, fully_masked)
    else:                                                          # "rows": no weights asked for
        (out, lse), A = _equation_by_rows(q, k, v, mask, causal, key_lengths, batch, scale, fully_masked), None
    extra = (A,) * return_weights + (lse,) * return_lse
    return (out, *extra) if extra else out


def _equation(q, k, v, mask, causal, key_lengths, scale, fully_masked, rows: range | None = None):
    """The definition, for the query rows ``rows`` (all by default): ``(out, weights, lse)``."""
    n, m = q.shape[-2], k.shape[-2]
    allowed, bias = attention_mask(mask, causal, n, m, q.dtype, rows)
    if key_lengths is not None:
        padded = key_padding(key_lengths, m)                       # (..., 1, m)
        allowed = padded if allowed is None else allowed & padded
    if rows is not None:
        q = q[..., rows.start:rows.stop, :]

    S = scores(q, k, scale)                                        # (..., n, m)  S = QKᵀ/√d_k
    if bias is not None:
        S = S + bias                                               # (..., n, m)  S + B
    A, empty, lse = masked_softmax(S, allowed, fully_masked, return_lse=True)   # (..., n, m)  softmax(S)
    out = weighted_values(A, v, allowed, empty, fully_masked)      # (..., n, d_v)  A V
    return out, A, lse


def _equation_by_rows(q, k, v, mask, causal, key_lengths, batch, scale, fully_masked):
    """The equation path over chunks of query rows whose scores take 1/EQUATION_ARRAYS of the budget: ``(out, lse)``."""
    n, m, d_v = q.shape[-2], k.shape[-2], v.shape[-1]
    check_fits("the scores of one query row", (*batch, 1, m), q.dtype.itemsize)
    step = max(1, memory_budget() // (EQUATION_ARRAYS * max(1, math.prod(batch) * m * q.dtype.itemsize)))
    out, lse = np.empty((*batch, n, d_v), dtype=q.dtype), np.empty((*batch, n), dtype=q.dtype)
    for i0 in range(0, n, step):
        rows = range(i0, min(n, i0 + step))
        out[..., i0:rows.stop, :], _, lse[..., i0:rows.stop] = _equation(
            q, k, v, mask, causal, key_lengths, scale, fully_masked, rows)
    return out, lse


def resolve_method(method: str, dtype, scores_shape: tuple[int, ...], return_weights: bool = False) -> str:
    """The path that runs for scores of ``scores_shape``: "equation", "blocked", or "rows" (the
    equation path over chunks of query rows).

    "auto" gives "equation" while the scores fit :func:`~refattn.common.memory_budget` and have at
    most ``AUTO_BLOCKED_ENTRIES`` entries, else "blocked" in float64 and
    "rows" in other dtypes. Raises :class:`~refattn.common.MemoryBudgetError` before allocating
    over-budget weights (``return_weights``) or scores (``method="equation"``), and ``ValueError``
    for "blocked" with a dtype other than float64 or with ``return_weights``.
    """
    check_choice("method", method, METHODS)
    dtype = np.dtype(dtype)
    if return_weights:
        check_fits("the weights (return_weights=True)", scores_shape, dtype.itemsize)
    entries = math.prod(scores_shape)
    fits = entries * dtype.itemsize <= memory_budget()
    if method == "auto":
        if return_weights or (fits and entries <= AUTO_BLOCKED_ENTRIES):
            return "equation"
        if dtype == np.float64:
            return "blocked"
        return "equation" if fits else "rows"
    if method == "blocked":
        if dtype != np.float64:
            raise ValueError(f'method="blocked" computes in float64 only, got dtype={dtype}; '
                             'use method="equation" for other dtypes')
        if return_weights:
            raise ValueError('method="blocked" never materialises the attention weights: '
                             'return_weights=True needs method="equation"')
    else:
        check_fits('the scores of method="equation"', scores_shape, dtype.itemsize)
    return method


def _blocked(q, k, v, mask, causal, key_lengths, batch, scale, fully_masked, tiles, return_lse):
    """Flatten the batch, split ``mask`` into tiles' sources, run :func:`blocked_attention`."""
    from ..kernels import POLICY_CODES
    from ..kernels.blocked import blocked_attention  # Numba loads on first use only

    n, m, d_v = q.shape[-2], k.shape[-2], v.shape[-1]
    flat, visibility = blocked_inputs(q, k, v, mask, causal, key_lengths, batch)
    B = flat[0].shape[0]
    vmean = np.zeros((0, 0))
    if fully_masked == "uniform":                                  # A = 1/m on every key: (1/m)·1ᵀ V
        vmean = np.full((B, 1, m), 1.0 / m) @ flat[2] if m else np.zeros((B, 1, d_v))
        vmean = np.ascontiguousarray(vmean[:, 0, :])
    out, lse = np.empty((B, n, d_v)), np.empty((B, n))
    blocked_attention(*flat, scale, visibility, (POLICY_CODES[fully_masked], vmean), tiles, out, lse)
    out = out.reshape(*batch, n, d_v)
    return (out, lse.reshape(*batch, n)) if return_lse else out


RECORD = Mechanism.of(
    scaled_dot_product_attention, options=("mask", "scale", "fully_masked", "method"),
    id="sdpa", title="Scaled dot-product attention", family="vanilla", section="2 (Vaswani §3.2.1)", paper=VASWANI,
    equation=r"\operatorname{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}} + B\right) V",
    time="O(n·m·d)", memory="O(n·m), O(n·d) blocked", kind="attention",
    methods=("equation", "blocked", "auto"),
    examples=({"fully_masked": "nan"}, {"fully_masked": "uniform"}, {"scale": 2.0}),
    causal=True, figure="refattn.figures.vanilla:sdpa", exact_options={}, exact_limit="exact",
)
