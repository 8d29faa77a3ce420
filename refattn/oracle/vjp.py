r"""Analytic backward passes (vector-Jacobian products) of softmax, sdpa and multi-head attention.

Each function takes the forward inputs and an upstream gradient ``d_out`` = ∂L/∂out and returns
∂L/∂input for every input, by the chain rule written out (no autodiff):

    softmax      y = softmax(x)                  dx = y ⊙ (dy − Σ_j dy_j y_j)
    sdpa         S = Q Kᵀ·scale + B, A = softmax(S), O = A V
                 dV = Aᵀ dO,  dA = dO Vᵀ,  dS = A ⊙ (dA − rowsum(dA ⊙ A)),
                 dQ = scale·dS K,  dK = scale·dSᵀ Q,  dB = dS
    multi-head   the projections' chain rule around sdpa:  y = x W + b  →  dW = xᵀ dy, db = Σ dy, dx = dy Wᵀ

(The linear-attention backward is in :mod:`refattn.oracle.linear_vjp`.) :func:`record_vjp` gives the
gradients of the registry entries these cover (:data:`GRADIENT_IDS`) from their uniform ``apply``'s
arguments, for the test vectors.

Masking is by selection, as in the forward passes: a masked pair (i, j) contributes an exact 0 to
every gradient, so NaN or Inf stored in a masked-out key, value or upstream-gradient row cannot
reach the gradient of anything that does not use it. Inputs that were broadcast in the forward
pass (a key shared by a batch of queries, a mask without a batch axis) get their gradient summed
over the broadcast axes, back to their own shape. ``sdpa_vjp(..., dtype=np.float32)`` runs the same
equations with every intermediate in float32 (or float16): the gradient baseline of
:func:`refattn.oracle.check`.
"""
from __future__ import annotations

import inspect
import math
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.budget import check_fits, memory_budget
from ..common.checks import (
    as_float,
    broadcast_batch,
    check_bool,
    check_choice,
    check_qkv,
    check_scale,
    compute_dtype,
    default_scale,
)
from ..common.groups import grouped_kv, sum_over_groups
from ..common.products import weighted_values
from ..core.multi_head import RECORD as MULTI_HEAD
from ..core.multi_head import (
    MultiHeadParams,
    added_keys,
    head_mask,
    merge_heads,
    multi_head_attention,
    project_heads,
    split_heads,
)
from ..core.padding_mask import padding_mask
from ..core.sdpa import AUTO_BLOCKED_ENTRIES, scaled_dot_product_attention
from ..core.softmax import FULLY_MASKED_POLICIES, masked_softmax
from ..deprecation import none_is_auto
from ..kernels import kernel_rows
from ..kernels.tiles import blocked_inputs, check_block_size
from ..masks import attention_mask, check_key_lengths, check_mask_shape
from .shapes import as_upstream_gradient, sum_to_shape

__all__ = ["GRADIENT_IDS", "MultiHeadGrads", "SdpaGrads", "multi_head_vjp", "record_vjp", "sdpa_vjp", "softmax_vjp",
           "vjp_method"]

VJP_METHODS = ("equation", "blocked", "auto")
VJP_ARRAYS = 6   # arrays of the scores' size the equation VJP holds at its peak (S, A, dA, A_kept, dS, masks)

GRADIENT_IDS = ("sdpa", "multi_head", "cross_attention", "linear_elu")
"""The registry entries whose gradients refattn computes analytically (:func:`record_vjp`)."""


class SdpaGrads(NamedTuple):
    """Gradients of scaled dot-product attention, each of its input's own shape.

    Attributes
    ----------
    dq : (..., n, d_k) ndarray
    dk : (..., m, d_k) ndarray
    dv : (..., m, d_v) ndarray
    d_bias : ndarray or None
        Of the float mask's shape when ``mask`` was an additive bias, else ``None``.
    """

    dq: NDArray
    dk: NDArray
    dv: NDArray
    d_bias: NDArray | None


class MultiHeadGrads(NamedTuple):
    """Gradients of multi-head attention.

    Attributes
    ----------
    dx_q : (..., n, d_model) ndarray
    dx_kv : (..., m, d_model) ndarray
        Includes the value path's gradient when ``x_v`` was not given (then ``x_kv`` fed both).
    dx_v : (..., m, d_model) ndarray or None
        ``None`` when ``x_v`` was not given.
    dparams : MultiHeadParams
        Gradients of every weight and bias, ``None`` where the parameters have no bias.
    """

    dx_q: NDArray
    dx_kv: NDArray
    dx_v: NDArray | None
    dparams: MultiHeadParams


def softmax_vjp(
    x: ArrayLike,
    d_y: ArrayLike,
    *,
    axis: int = -1,
    mask: ArrayLike | None = None,
    fully_masked: str = "zero",
) -> NDArray:
    r"""Vector-Jacobian product of :func:`refattn.softmax`.

    .. math::

        y = \operatorname{softmax}(x), \qquad
        \frac{\partial y_j}{\partial x_l} = y_j(\delta_{jl} - y_l), \qquad
        \bar x_l = \sum_j \bar y_j \frac{\partial y_j}{\partial x_l}
                 = y_l \Big(\bar y_l - \sum_j \bar y_j y_j\Big)

    with the sum over the kept entries of the slice.

    Parameters
    ----------
    x : array_like of float
        Logits, as given to :func:`refattn.softmax`.
    d_y : array_like of float, same shape as ``x``
        Upstream gradient :math:`\bar y = \partial L / \partial y`.
    axis : int, default -1
        Axis the softmax normalised over.
    mask : array_like of bool, optional
        ``True`` where an entry takes part; must broadcast to ``x.shape``.
    fully_masked : {"zero", "nan", "uniform"}, default "zero"
        The forward pass's policy for a slice with no entry left. "zero" and "uniform" slices are
        constants of ``x``: zero gradient. "nan" slices get a NaN gradient (what autodiff through
        the 0/0 gives).

    Returns
    -------
    dx : ndarray, same shape as ``x``
        0 on masked entries (whatever ``d_y`` holds there).

    Examples
    --------
    >>> x, d_y = np.array([0.5, -1.0, 2.0]), np.array([1.0, 0.0, 0.0])
    >>> dx = softmax_vjp(x, d_y)
    >>> bool(abs(dx.sum()) < 1e-15)                  # softmax is invariant to a shift of x
    True
    >>> softmax_vjp([1.0, np.nan], [1.0, np.nan], mask=[True, False])
    array([0., 0.])
    """
    x = as_float("x", x)
    d_y = as_float("d_y", d_y)
    if x.ndim == 0:
        raise ValueError("x must have at least one dimension, got a scalar")
    if d_y.shape != x.shape:
        raise ValueError(f"d_y has shape {d_y.shape} but x has shape {x.shape}; they must be equal")
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool) or not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis must be an int in [{-x.ndim}, {x.ndim}), got {axis!r}")
    check_choice("fully_masked", fully_masked, FULLY_MASKED_POLICIES)
    kept = np.ones(x.shape, dtype=bool)
    if mask is not None:
        mask = np.asarray(mask)
        if mask.dtype != np.bool_:
            raise TypeError(f"mask must be a boolean array (True = keep), got dtype {mask.dtype}")
        try:
            kept = np.broadcast_to(mask, x.shape)
        except ValueError:
            raise ValueError(f"mask has shape {mask.shape}, which does not broadcast to x's shape {x.shape}") from None
    y, empty = masked_softmax(x, None if mask is None else kept, fully_masked, axis=int(axis))
    y = np.where(kept, y, 0.0)                                     # exact 0 where masked
    d_y = np.where(kept, d_y, 0.0)                                 # masked garbage never enters
    with np.errstate(invalid="ignore"):
        dot = np.sum(d_y * y, axis=axis, keepdims=True)            # Σ_j ȳ_j y_j
        dx = np.where(kept, y * (d_y - dot), 0.0)                  # y ⊙ (ȳ − Σ ȳ y)
    return np.where(empty, np.nan if fully_masked == "nan" else 0.0, dx)


def sdpa_vjp(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    d_out: ArrayLike,
    mask: ArrayLike | None = None,
    *,
    causal: bool | str = False,
    scale: float | None = None,
    fully_masked: str = "zero",
    dtype=np.float64,
    enable_gqa: bool = False,
    key_lengths: ArrayLike | None = None,
    method: str = "auto",
    block_size: int | tuple[int, int] | None = None,
) -> SdpaGrads:
    r"""Gradients of :func:`refattn.scaled_dot_product_attention` with respect to q, k, v and the bias.

    .. math::

        S = Q K^\top s + B, \quad A = \operatorname{softmax}(S), \quad O = A V

        \bar V = A^\top \bar O, \qquad \bar A = \bar O V^\top, \qquad
        \bar S = A \odot \big(\bar A - \operatorname{rowsum}(\bar A \odot A)\big)

        \bar Q = s\, \bar S K, \qquad \bar K = s\, \bar S^\top Q, \qquad \bar B = \bar S

    where :math:`\bar X = \partial L / \partial X` and :math:`\bar S` is 0 on masked pairs. These
    are the equations FlashAttention's backward pass evaluates tile by tile (Dao et al., 2022,
    Alg. 4; :math:`\operatorname{rowsum}(\bar A \odot A) = \operatorname{rowsum}(\bar O \odot O)`).

    Parameters
    ----------
    q : (..., n, d_k) array_like
        Queries.
    k : (..., m, d_k) array_like
        Keys.
    v : (..., m, d_v) array_like
        Values.
    d_out : (..., n, d_v) array_like
        Upstream gradient :math:`\bar O`, of the forward output's (broadcast) shape.
    mask : (..., n, m) array_like of bool or float, optional
        As in :func:`~refattn.scaled_dot_product_attention`; a float mask is the bias :math:`B`.
    causal : {False, True, "top-left", "bottom-right"}, default False
        As in :func:`~refattn.scaled_dot_product_attention`.
    scale : float, optional
        :math:`s`. Default :math:`1/\sqrt{d_k}`.
    fully_masked : {"zero", "nan", "uniform"}, default "zero"
        The forward pass's policy for a query that may attend to no key. "zero": its output is the
        constant 0, so it contributes nothing to any gradient. "uniform": its output is the mean of
        all *m* values, so each value gets :math:`\bar O_i / m` and q, k and the bias get nothing
        from it. "nan": its output is NaN; like autodiff through the 0/0, the NaN reaches its own
        row of dq and d_bias and every key and value of its batch element.
    dtype : float dtype, default float64
        Compute and output dtype. Inputs of any float precision are converted to it; float32 or
        float16 run the same equations with every intermediate in that precision (the same-dtype
        gradient baseline of :func:`refattn.oracle.check`), as ``dtype`` does in
        :func:`~refattn.scaled_dot_product_attention`.
    enable_gqa : bool, default False
        Grouped-query attention, as in :func:`~refattn.scaled_dot_product_attention`: ``k``, ``v``
        have ``h_kv`` heads, query head ``i`` reads head ``i // (h / h_kv)``, and ``dk``, ``dv`` are
        each key/value head's gradient summed over its group of query heads.
    key_lengths : (...) array_like of int, optional
        Key padding as lengths, as in :func:`~refattn.scaled_dot_product_attention`: query rows of
        batch index ``b`` see only keys ``j < key_lengths[b]``.
    method : {"equation", "blocked", "auto"}, default "auto"
        "equation": the equations above on dense ``(..., n, m)`` arrays. "blocked": FlashAttention-2's
        backward pass (:mod:`refattn.kernels.blocked_bwd`): the forward pass's output and
        log-sum-exp from the blocked kernel, then the weights recomputed tile by tile as
        :math:`A_{ij} = e^{S_{ij} - L_i}` and :math:`\operatorname{rowsum}(\bar A \odot A)` as
        :math:`D_i = \bar O_i \cdot O_i`; never an ``(n, m)`` array (but ``d_bias``), float64 only.
        "auto": "equation" while its dense arrays fit the memory budget and have at most ``2**21``
        entries; "blocked" beyond, in float64 (as the forward's "auto"). ``None``, the old default, is
        read as "auto" with a ``DeprecationWarning``.
    block_size : int or (int, int), optional
        Tiles of the blocked kernels, as in :func:`~refattn.scaled_dot_product_attention`.

    Returns
    -------
    SdpaGrads
        ``(dq, dk, dv, d_bias)`` of ``dtype``, each summed back to its input's own shape (so a ``k``
        shared by a batch of queries gets the sum over the batch); ``d_bias`` is ``None`` unless
        ``mask`` was a float bias, and is 0 at its ``-inf`` entries.

    Notes
    -----
    Time :math:`O(n m (d_k + d_v))`, memory :math:`O(n m)`. A non-finite key, value or ``d_out``
    row reaches only the gradients of the pairs that use it (masking by selection, as
    :func:`~refattn.core.sdpa.weighted_values` does forwards).

    References
    ----------
    .. [1] A. Vaswani et al., "Attention Is All You Need", NeurIPS 2017, arXiv:1706.03762v7, Eq. (1).
    .. [2] T. Dao et al., "FlashAttention: Fast and Memory-Efficient Exact Attention with
       IO-Awareness", NeurIPS 2022, arXiv:2205.14135v2, §3.1 and Alg. 4 (backward pass).

    Examples
    --------
    >>> from refattn import scaled_dot_product_attention
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((2, 5, 4)), rng.standard_normal((7, 4)), rng.standard_normal((7, 3))
    >>> d_out = rng.standard_normal((2, 5, 3))
    >>> g = sdpa_vjp(q, k, v, d_out, causal="bottom-right")
    >>> g.dq.shape, g.dk.shape, g.dv.shape, g.d_bias
    ((2, 5, 4), (7, 4), (7, 3), None)
    >>> _, A = scaled_dot_product_attention(q, k, v, causal="bottom-right", return_weights=True)
    >>> bool(np.allclose(g.dv, np.einsum("bnm,bnc->mc", A, d_out)))          # dV = Aᵀ dO, summed over the batch
    True
    """
    dtype = compute_dtype(dtype)
    method = none_is_auto("sdpa_vjp", method)
    check_choice("method", method, VJP_METHODS)
    q, k, v = (as_float(name, x, dtype) for name, x in (("q", q), ("k", k), ("v", v)))
    groups = 1
    if check_bool("enable_gqa", enable_gqa):
        k, v, groups = grouped_kv(q, k, v)                         # (..., h, m, ·): head i reads i // groups
    check_qkv(q, k, v)
    check_choice("fully_masked", fully_masked, FULLY_MASKED_POLICIES)
    n, m, d_k, d_v = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    scale = default_scale(d_k) if scale is None else check_scale(scale)
    tiles = check_block_size(block_size, d_k, d_v)
    batch_shapes = {"q": q.shape[:-2], "k": k.shape[:-2], "v": v.shape[:-2]}
    if mask is not None:
        mask = check_mask_shape(mask, n, m)
        batch_shapes["mask"] = mask.shape[:-2]
    if key_lengths is not None:
        key_lengths = check_key_lengths(key_lengths, m)
        batch_shapes["key_lengths"] = key_lengths.shape
    batch = broadcast_batch(batch_shapes)
    d_out = as_upstream_gradient("d_out", d_out, (*batch, n, d_v), f"q {q.shape}, k {k.shape}, v {v.shape}", dtype)
    if vjp_method(method, dtype, (*batch, n, m)) == "blocked":
        dq, dk, dv, d_bias = _blocked_vjp(q, k, v, d_out, mask, causal, key_lengths, batch, scale, fully_masked,
                                          tiles)
        return SdpaGrads(dq, sum_over_groups(dk, groups), sum_over_groups(dv, groups), d_bias)
    allowed, bias = attention_mask(mask, causal, n, m, dtype)
    if key_lengths is not None:
        padded = padding_mask(key_lengths, m)                      # (..., 1, m)  j < key_lengths[b]
        allowed = padded if allowed is None else allowed & padded

    with np.errstate(invalid="ignore"):                            # masked-out garbage may be inf − inf
        S = (q @ np.swapaxes(k, -1, -2)) * scale                   # (..., n, m)  S = QKᵀ·s
    if bias is not None:
        S = S + bias                                               # (..., n, m)  S + B
    A, empty = masked_softmax(S, allowed, fully_masked)            # (..., n, m), (..., n, 1)
    shape = (*batch, n, m)
    A, empty = np.broadcast_to(A, shape), np.broadcast_to(empty, shape)
    keys_used = np.ones(shape, bool) if allowed is None else np.broadcast_to(allowed, shape)
    if fully_masked == "nan":
        keys_used = keys_used | empty                              # a NaN row poisons its batch element
    values_used = keys_used | empty if fully_masked == "uniform" else keys_used   # uniform rows average all of V

    A_T = np.swapaxes(np.where(values_used, A, 0.0), -1, -2)       # (..., m, n)  Aᵀ, exact 0 where unused
    dv = weighted_values(A_T, d_out, np.swapaxes(values_used, -1, -2), None, "zero")   # (..., m, d_v)  Aᵀ dO
    with np.errstate(invalid="ignore"):
        dA = d_out @ np.swapaxes(v, -1, -2)                        # (..., n, m)  dA = dO Vᵀ
        A_kept = np.where(keys_used & ~empty, A, 0.0)
        dA = np.where(keys_used & ~empty, dA, 0.0)                 # masked values never enter
        rowsum = np.sum(dA * A_kept, axis=-1, keepdims=True)       # (..., n, 1)  Σ_j dA_ij A_ij
        dS = np.where(keys_used & ~empty, A_kept * (dA - rowsum), 0.0)   # A ⊙ (dA − rowsum); masked: 0, by
                                                                   # selection (a NaN rowsum times 0 is NaN)
    dS = np.where(empty, np.nan if fully_masked == "nan" else 0.0, dS)
    dq = scale * weighted_values(dS, k, keys_used, None, "zero")  # (..., n, d_k)  s·dS K
    dk = scale * weighted_values(np.swapaxes(dS, -1, -2), q, np.swapaxes(keys_used, -1, -2), None, "zero")
    d_bias = None if bias is None else sum_to_shape(dS, bias.shape)   # dB = dS
    dk = sum_over_groups(sum_to_shape(dk, k.shape), groups)       # each key/value head: Σ over its query group
    dv = sum_over_groups(sum_to_shape(dv, v.shape), groups)
    return SdpaGrads(sum_to_shape(dq, q.shape), dk, dv, d_bias)


def vjp_method(method: str, dtype, scores_shape: tuple[int, ...]) -> str:
    """The path :func:`sdpa_vjp` runs for scores of ``scores_shape``: "equation" or "blocked".

    "auto": "equation" while its ``VJP_ARRAYS`` dense arrays fit :func:`~refattn.common.memory_budget`
    and the scores have at most ``2**21`` entries (as the forward's "auto"); beyond, "blocked" in
    float64 ("equation" in other dtypes). "blocked" with another dtype: ``ValueError``.
    """
    check_choice("method", method, VJP_METHODS)
    dtype = np.dtype(dtype)
    entries = math.prod(scores_shape)
    if method == "auto":
        fits = VJP_ARRAYS * entries * dtype.itemsize <= memory_budget()
        small = fits and entries <= AUTO_BLOCKED_ENTRIES
        return "equation" if small or dtype != np.float64 else "blocked"
    if method == "blocked" and dtype != np.float64:
        raise ValueError(f'method="blocked" computes in float64 only, got dtype={dtype}; '
                         'use method="equation" for other dtypes')
    return method


def _blocked_vjp(q, k, v, d_out, mask, causal, key_lengths, batch, scale, fully_masked, tiles):
    """``(dq, dk, dv, d_bias)`` by :func:`refattn.kernels.blocked_bwd.blocked_attention_vjp`, k and v with h heads."""
    from ..kernels import POLICY_CODES
    from ..kernels.blocked import blocked_attention
    from ..kernels.blocked_bwd import blocked_attention_vjp  # Numba loads on first use only

    n, m, d_k, d_v = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    flat, visibility = blocked_inputs(q, k, v, mask, causal, key_lengths, batch)
    B = flat[0].shape[0]
    d_out = kernel_rows(d_out, batch, (n, d_v))
    out, lse = np.empty((B, n, d_v)), np.empty((B, n))             # O and L of the forward pass
    blocked_attention(*flat, scale, visibility, (POLICY_CODES["zero"], np.zeros((0, 0))), tiles, out, lse)
    dq, dk, dv = np.empty((B, n, d_k)), np.empty((B, m, d_k)), np.empty((B, m, d_v))
    has_bias = visibility.bias.shape[0] > 0
    if has_bias:
        check_fits("d_bias for every batch row (the blocked backward)", (B, n, m))
    d_bias = np.empty((B, n, m) if has_bias else (0, 0, 0))
    blocked_attention_vjp(*flat, d_out, out, lse, scale, visibility, tiles, dq, dk, dv, d_bias)
    empty = lse == -np.inf                                         # (B, n) rows that see no key
    if fully_masked == "uniform" and m:                            # A_ij = 1/m on every key: dV_j += dO_i / m
        dv += (np.where(empty[..., None], d_out, 0.0).sum(axis=1) / m)[:, None, :]
    if fully_masked == "nan" and m:                                # the NaN row reaches its batch element
        #                                                            (with no key at all, dq is the empty sum, 0)
        poisoned = empty.any(axis=1)
        dk[poisoned], dv[poisoned], dq[empty] = np.nan, np.nan, np.nan
        if has_bias:
            d_bias[empty] = np.nan
    dq = sum_to_shape(dq.reshape(*batch, n, d_k), q.shape)
    dk = sum_to_shape(dk.reshape(*batch, m, d_k), k.shape)
    dv = sum_to_shape(dv.reshape(*batch, m, d_v), v.shape)
    return dq, dk, dv, sum_to_shape(d_bias.reshape(*batch, n, m), mask.shape) if has_bias else None


def multi_head_vjp(
    x_q: ArrayLike,
    x_kv: ArrayLike,
    params: MultiHeadParams,
    d_out: ArrayLike,
    *,
    num_heads: int,
    mask: ArrayLike | None = None,
    causal: bool | str = False,
    scale: float | None = None,
    fully_masked: str = "zero",
    x_v: ArrayLike | None = None,
) -> MultiHeadGrads:
    r"""Gradients of :func:`refattn.multi_head_attention` with respect to its inputs and parameters.

    .. math::

        Q = x_q W^Q + b^Q,\; K = x_{kv} W^K + b^K,\; V = x_v W^V + b^V,\;
        O = \operatorname{Concat}(\mathrm{head}_i)\, W^O + b^O

        \bar W^O = C^\top \bar O,\; \bar b^O = \textstyle\sum \bar O,\;
        \bar C = \bar O\, W^{O\top} \;\to\; (\bar Q, \bar K, \bar V) = \text{sdpa\_vjp per head}

        \bar W^Q = x_q^\top \bar Q,\; \bar b^Q = \textstyle\sum \bar Q,\; \bar x_q = \bar Q\, W^{Q\top}
        \quad (\text{likewise } K, V)

    with :math:`C = \operatorname{Concat}(\mathrm{head}_i)` and the sums over every token and batch
    entry. Parameters with ``bias_k`` and ``bias_v`` (``add_bias_kv``) get their gradients too: the
    added key's and value's rows of :math:`\bar K`, :math:`\bar V`, summed over the batch. When ``x_v``
    is not given, :math:`x_{kv}` feeds both K and V and :math:`\bar x_{kv} = \bar K W^{K\top} + \bar V W^{V\top}`.

    Parameters
    ----------
    x_q : (..., n, d_model) array_like
        Query-side input.
    x_kv : (..., m, d_model) array_like
        Key-side (and value-side unless ``x_v``) input.
    params : MultiHeadParams
        The projections.
    d_out : (..., n, d_model) array_like
        Upstream gradient, of the forward output's (broadcast) shape.
    num_heads : int
        *h* in the paper.
    mask : (..., n, m) or (..., h, n, m) array_like of bool or float, optional
        Shared by all heads or per head, as in :func:`~refattn.multi_head_attention`.
    causal : {False, True, "top-left", "bottom-right"}, default False
        As in :func:`~refattn.scaled_dot_product_attention`.
    scale : float, optional
        Default :math:`1/\sqrt{d_k}` with the per-head width.
    fully_masked : {"zero", "nan", "uniform"}, default "zero"
        As in :func:`sdpa_vjp`.
    x_v : (..., m, d_model) array_like, optional
        Value-side input, when it differs from ``x_kv``.

    Returns
    -------
    MultiHeadGrads
        ``(dx_q, dx_kv, dx_v, dparams)``; each input's gradient has that input's shape.

    References
    ----------
    .. [1] A. Vaswani et al., "Attention Is All You Need", NeurIPS 2017, arXiv:1706.03762v7, §3.2.2.

    Examples
    --------
    >>> from refattn import init_multi_head
    >>> rng = np.random.default_rng(0)
    >>> params = init_multi_head(rng, d_model=4, num_heads=2)
    >>> x, d_out = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    >>> g = multi_head_vjp(x, x, params, d_out, num_heads=2, causal=True)
    >>> g.dx_q.shape, g.dx_v, g.dparams.w_o.shape
    ((3, 4), None, (4, 4))
    >>> bool(np.allclose(g.dparams.b_o, d_out.sum(axis=0)))
    True
    """
    if not isinstance(params, MultiHeadParams):
        raise TypeError(f"params must be a MultiHeadParams, got {type(params).__name__}")
    options = {"causal": causal, "scale": scale, "fully_masked": fully_masked}
    out = multi_head_attention(x_q, x_kv, params, num_heads=num_heads, mask=mask, x_v=x_v, **options)  # checks them
    shared_v = x_v is None
    x_q, x_kv = as_float("x_q", x_q), as_float("x_kv", x_kv)
    x_v = x_kv if shared_v else as_float("x_v", x_v)
    d_out = as_upstream_gradient("d_out", d_out, out.shape, f"x_q {x_q.shape}, x_kv {x_kv.shape}")
    w_q, w_k, w_v, w_o = (np.asarray(w, dtype=np.float64) for w in (params.w_q, params.w_k, params.w_v, params.w_o))

    Q = project_heads(x_q, w_q, params.b_q, num_heads)             # (..., h, n, d_k)  x_q Wᵠ + bᵠ
    K = project_heads(x_kv, w_k, params.b_k, num_heads)            # (..., h, m, d_k)
    V = project_heads(x_v, w_v, params.b_v, num_heads)             # (..., h, m, d_v)
    m = K.shape[-2]
    K, V, options["mask"], options["causal"] = added_keys(     # (..., h, m + e, ·): bias_k/bias_v appended
        Q.shape[-2], K, V, head_mask(mask, x_q, x_kv, x_v, num_heads), causal, params, num_heads, False)
    heads = scaled_dot_product_attention(Q, K, V, **options)       # (..., h, n, d_v)
    C = merge_heads(heads)                                         # (..., n, h·d_v)  Concat(head_i)

    dw_o = _flat(C).T @ _flat(d_out)                               # (h·d_v, d_model)  Cᵀ dO
    db_o = None if params.b_o is None else _flat(d_out).sum(axis=0)
    d_heads = split_heads(d_out @ w_o.T, num_heads)                # (..., h, n, d_v)  dO Wᴼᵀ, per head
    g = sdpa_vjp(Q, K, V, d_heads, **options)
    dQ, dK, dV = (merge_heads(x) for x in (g.dq, g.dk[..., :m, :], g.dv[..., :m, :]))   # (..., T, h·d_head)
    d_bias_kv = () if params.bias_k is None else \
        tuple(_flat(merge_heads(d[..., m:, :])).sum(axis=0) for d in (g.dk, g.dv))     # Σ over the batch

    def linear_grads(x, w, b, dy):                                 # y = x W + b
        return _flat(x).T @ _flat(dy), None if b is None else _flat(dy).sum(axis=0), dy @ w.T

    dw_q, db_q, dx_q = linear_grads(x_q, w_q, params.b_q, dQ)
    dw_k, db_k, dx_kv = linear_grads(x_kv, w_k, params.b_k, dK)
    dw_v, db_v, dx_v = linear_grads(x_v, w_v, params.b_v, dV)
    if shared_v:
        dx_kv, dx_v = dx_kv + dx_v, None                           # x_kv fed K and V
    dparams = MultiHeadParams(dw_q, dw_k, dw_v, dw_o, db_q, db_k, db_v, db_o, *d_bias_kv)
    return MultiHeadGrads(dx_q, dx_kv, dx_v, dparams)


def _flat(x: NDArray) -> NDArray:
    """(..., d) → (N, d): every leading axis becomes a row."""
    return x.reshape(-1, x.shape[-1])


def record_vjp(id: str, q: ArrayLike, k: ArrayLike, v: ArrayLike, d_out: ArrayLike, *,  # noqa: A002 - registry's word
               causal: bool | str = False, options: dict | None = None, draws: dict | None = None,
               dtype=np.float64) -> tuple[NDArray, NDArray, NDArray, MultiHeadParams | None]:
    r"""``(dq, dk, dv)`` of registry entry ``id``'s uniform ``apply(q, k, v, causal=causal, **options, **draws)``.

    Parameters
    ----------
    id : str
        One of :data:`GRADIENT_IDS`: ``"sdpa"`` (:func:`sdpa_vjp`), ``"multi_head"`` and
        ``"cross_attention"`` (:func:`multi_head_vjp` with q, k, v the layer inputs x_q, x_kv, x_v),
        ``"linear_elu"`` (:func:`~refattn.oracle.linear_vjp.linear_attention_vjp`).
    q, k, v, d_out : array_like
        ``apply``'s inputs and the upstream gradient, of its output's shape.
    causal : {False, True, "top-left", "bottom-right"}, default False
    options, draws : dict, optional
        ``apply``'s other options and its draws (``multi_head``'s ``params`` must be given).
    dtype : float dtype, default float64
        The compute dtype; only ``"sdpa"`` computes in float32 or float16 (:func:`sdpa_vjp`).

    Returns
    -------
    dq, dk, dv : ndarray
        The gradients with respect to q, k and v, each of its input's shape.
    dparams : MultiHeadParams or None
        The gradients of the projections (multi-head ids; ``None`` for the others).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v, d_out = rng.standard_normal((4, 3, 2))
    >>> dq, dk, dv, _ = record_vjp("sdpa", q, k, v, d_out, causal=True)
    >>> bool(np.array_equal(dv, sdpa_vjp(q, k, v, d_out, causal=True).dv))
    True
    """
    from .linear_vjp import linear_attention_vjp  # it imports the linear family

    options = {**(options or {}), **(draws or {})}
    check_choice("id", id, GRADIENT_IDS)
    known = {"sdpa": ("mask", "scale", "fully_masked", "method"), "multi_head": ("num_heads", "params", "mask"),
             "cross_attention": ("num_heads", "params", "mask"), "linear_elu": ("method", "eps")}[id]
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise ValueError(f"record_vjp({id!r}) takes the options {known}, got {unknown}")
    if np.dtype(dtype) != np.float64 and id != "sdpa":
        raise ValueError(f"record_vjp({id!r}) computes in float64 only, got dtype {np.dtype(dtype).name}")
    if id == "sdpa":
        options.pop("method", None)                                # every method is the same function
        g = sdpa_vjp(q, k, v, d_out, options.pop("mask", None), causal=causal, dtype=dtype, **options)
        return g.dq, g.dk, g.dv, None
    if id == "linear_elu":
        return (*linear_attention_vjp(q, k, v, d_out, causal=causal, eps=options.get("eps", 0.0)), None)
    if not isinstance(options.get("params"), MultiHeadParams):
        raise ValueError(f"record_vjp({id!r}) needs the drawn params (a MultiHeadParams), got "
                         f"{type(options.get('params')).__name__}")
    default_heads = inspect.signature(MULTI_HEAD.apply.__wrapped__).parameters["num_heads"].default
    g = multi_head_vjp(q, k, options["params"], d_out, num_heads=options.get("num_heads", default_heads),
                       mask=options.get("mask"), causal=causal, x_v=v)
    return g.dx_q, g.dx_kv, g.dx_v, g.dparams
