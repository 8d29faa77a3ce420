r"""Poolingformer's two-level attention (Zhang et al., 2021, arXiv:2105.04371; survey §4.3.2).

First level: a sliding window, w₁ keys on each side of the query (band attention):

    y_i = Σ_{j : |i − j| ≤ w₁} softmax_j(q_i·k_j / √d) v_j

Second level: pooling attention over a larger window, stacked on the first level (its queries, keys and
values are the first level's outputs y, not the layer's input). The outputs in the window
[i − w₂, i + w₂] are pooled with kernel κ and stride ξ into T = ⌊(2w₂ + 1 − κ)/ξ⌋ + 1 segments, and
query i attends to its segments:

    s_{i,t} = i − w₂ + tξ,  t = 0 … T − 1                        segment starts
    S_{i,t} = {s_{i,t}, …, s_{i,t} + κ − 1} ∩ [0, n)               a segment's positions (an empty one is dropped)
    ỹ_s = Pool(y_l : l ∈ S)                                        mean, max, or conv (LDConv, below)
    q̃_i = y_i W_Q,  k̃_s = ỹ_s W_K,  ṽ_s = ỹ_s
    z_i = Σ_t softmax_t(q̃_i·k̃_{s_{i,t}} / √d) ṽ_{s_{i,t}}
    out_i = y_i + z_i                                              the residual connection between the levels

The conv pooling is a lightweight dynamic convolution (LDConv, Wu et al., 2019): one kernel of κ weights
for every channel, predicted from the segment and normalised by a softmax,

    LDConv(y_s, …, y_{s+κ−1}) = Σ_l δ_l y_l,   δ = softmax((ȳ_s W_δ)_{l − s} : l ∈ S),   ȳ_s = mean(y_l : l ∈ S)

Mean and conv pooling are weighted sums over a segment's positions with weights shared by every
channel, so both levels are linear in v: out = W v exactly, with the effective n × m matrix

    W = (I + A₂ P) A₁

A₁ (n × m) the band attention, P ((n + κ − 1) × n) the pooling (row s: segment s's weights over the
positions l) and A₂ (n × (n + κ − 1)) the second level's attention over the segment starts. W's rows
sum to 2 (1 without the residual) and are >= 0. Max pooling takes each channel's maximum at its own
position, so no single matrix gives its output, and it has no ``return_weights``.

Pieces: :func:`init_poolingformer` draws the second level's parameters (:class:`PoolingformerParams`),
:func:`pooling_pattern` is the second level's sparsity pattern over segment starts, :func:`pooling_matrix`
the pooling P as a dense matrix (for plots and checks), and :func:`poolingformer_attention` the two
levels, each through :func:`~refattn.sparse.sparse_attention` (the dense definition, or the CSR kernel
on the kept pairs only).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.budget import check_fits
from ..common.checks import (
    as_float,
    as_rng,
    check_bool,
    check_choice,
    check_scale,
    checked_qkv,
    default_scale,
)
from ..common.init import glorot
from ..common.ints import check_non_negative_int, check_positive_int
from ..common.products import weighted_values
from ..core.softmax import softmax
from ..draws import given_or_drawn, note_allowed, optional_rng
from ..mechanism import Mechanism
from ..sparse.attention import METHODS, check_weights_fit, sparse_attention
from ..sparse.band import band_pattern
from ..sparse.pattern import SparsePattern, no_causal_form

__all__ = ["PoolingformerParams", "init_poolingformer", "pooling_matrix", "pooling_pattern",
           "poolingformer_attention"]

POOLINGFORMER = ('H. Zhang, Y. Gong, Y. Shen, W. Li, J. Lv, N. Duan, W. Chen, 2021, "Poolingformer: Long Document '
                 'Modeling with Pooling Attention", ICML 2021, arXiv:2105.04371')
POOLINGS = ("conv", "mean", "max")
NO_CAUSAL = ("an encoder for long documents (question answering, the encoder of a summariser): its windows and "
             "pooled segments reach tokens after the query")


@dataclass(frozen=True, eq=False)
class PoolingformerParams:
    r"""The second level's learned parameters; weights act on the right (``y @ w``).

    Attributes
    ----------
    w_q, w_k : (d_v, d_k) ndarray
        :math:`W_Q`, :math:`W_K`: the second level's queries :math:`\tilde q_i = y_i W_Q` and keys
        :math:`\tilde k_s = \tilde y_s W_K`, from the first level's outputs (width d_v) to the
        queries' width d_k.
    w_kernel : (d_v, kernel_size) ndarray
        :math:`W_\delta`: the conv pooling's kernel logits :math:`\bar y_s W_\delta`, one per
        position of a segment (used by ``pooling="conv"`` only).
    """

    w_q: NDArray
    w_k: NDArray
    w_kernel: NDArray

    def __post_init__(self) -> None:
        for name in ("w_q", "w_k", "w_kernel"):
            w = as_float(name, getattr(self, name))
            if w.ndim != 2:
                raise ValueError(f"{name} must be a 2-D matrix, got shape {w.shape}")
            object.__setattr__(self, name, w)
        if self.w_k.shape != self.w_q.shape:
            raise ValueError(f"w_k has shape {self.w_k.shape} but w_q has shape {self.w_q.shape} (both (d_v, d_k))")
        if self.w_kernel.shape[0] != self.w_q.shape[0] or self.w_kernel.shape[1] < 1:
            raise ValueError(f"w_kernel must have shape (d_v, kernel_size) = ({self.w_q.shape[0]}, >= 1), "
                             f"got shape {self.w_kernel.shape}")


def init_poolingformer(rng, d_v: int, d_k: int, kernel_size: int) -> PoolingformerParams:
    r"""Draw the second level's parameters (Glorot/Xavier uniform).

    .. math::

        W \sim \mathcal{U}\Big(\pm\sqrt{6/(\text{fan}_\text{in} + \text{fan}_\text{out})}\Big)

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw, in the order w_q, w_k, w_kernel (a matrix with no entry draws nothing).
    d_v : int
        Width of the first level's outputs (of the values).
    d_k : int
        Width of the second level's queries and keys (that of the queries).
    kernel_size : int
        κ, the positions of a pooled segment.

    Returns
    -------
    PoolingformerParams

    Examples
    --------
    >>> p = init_poolingformer(0, 4, 8, 3)
    >>> p.w_q.shape, p.w_k.shape, p.w_kernel.shape
    ((4, 8), (4, 8), (4, 3))
    """
    rng = as_rng(rng)
    d_v, d_k = check_non_negative_int("d_v", d_v), check_non_negative_int("d_k", d_k)
    kernel_size = check_positive_int("kernel_size", kernel_size)
    return PoolingformerParams(*(glorot(rng, d_v, width) if d_v + width else np.zeros((d_v, width))
                                 for width in (d_k, d_k, kernel_size)))


def pooling_pattern(n: int, pool_window: int, kernel_size: int, stride: int) -> SparsePattern:
    r"""The second level's pattern: query *i* keeps the starts of the segments pooled in its window.

    .. math::

        J_i = \{\, s_{i,t} + \kappa - 1 : s_{i,t} = i - w_2 + t\xi,\ t = 0 \dots T - 1,\
        S_{i,t} \cap [0, n) \ne \emptyset \,\}, \qquad T = \lfloor (2 w_2 + 1 - \kappa)/\xi \rfloor + 1

    Parameters
    ----------
    n : int
        Number of queries (the first level's outputs).
    pool_window : int
        w₂: the window is [i − w₂, i + w₂].
    kernel_size : int
        κ, positions per segment, at most the window's 2w₂ + 1.
    stride : int
        ξ, between the starts of consecutive segments.

    Returns
    -------
    SparsePattern
        Shape (n, n + κ − 1): column c is the segment starting at position s = c − (κ − 1), for the
        starts 1 − κ … n − 1 of every segment that overlaps the sequence. nnz ≤ n·T, built in O(nnz).

    Examples
    --------
    Segments of κ = 2 positions, ξ = 2 apart, in the window [i − 2, i + 2]: starts i − 2 and i
    (query 0's first segment, {−2, −1}, lies before the sequence and is dropped).

    >>> p = pooling_pattern(4, 2, 2, 2)
    >>> [(p.row(i) - 1).tolist() for i in range(4)]        # the starts s (column − (κ − 1))
    [[0], [-1, 1], [0, 2], [1, 3]]
    """
    n = check_non_negative_int("n", n)
    pool_window, kernel_size, stride = _check_geometry(pool_window, kernel_size, stride)
    T = (2 * pool_window + 1 - kernel_size) // stride + 1
    first = np.arange(n, dtype=np.int64) - pool_window + kernel_size - 1   # column of s_{i,0}
    return SparsePattern.from_row_ranges(first, first + (T - 1) * stride + 1, n + kernel_size - 1, stride)


def pooling_matrix(y: ArrayLike, kernel_size: int, *, pooling: str = "mean",
                   w_kernel: ArrayLike | None = None) -> NDArray:
    r"""The pooling P as a dense matrix: row *s* holds segment *s*'s weights over the positions.

    .. math::

        \tilde y_s = \sum_{l \in S_s} P_{s l}\, y_l, \qquad
        P_{s l} = \frac{1}{|S_s|} \ \text{(mean)} \quad\text{or}\quad
        \operatorname{softmax}_{l \in S_s}\big((\bar y_s W_\delta)_{l - s}\big) \ \text{(conv)}

    for the segments :math:`S_s = \{s, \dots, s + \kappa - 1\} \cap [0, n)`, s = 1 − κ … n − 1.

    Parameters
    ----------
    y : (..., n, d_v) array_like
        The first level's outputs (the conv kernel is predicted from them).
    kernel_size : int
        κ.
    pooling : {"mean", "conv"}, default "mean"
        Max pooling has no matrix (each channel takes its maximum at its own position).
    w_kernel : (d_v, kernel_size) array_like, optional
        :math:`W_\delta`, required by ``pooling="conv"``.

    Returns
    -------
    P : (..., n + κ − 1, n) ndarray
        Rows sum to 1; row s = c − (κ − 1) is column c of :func:`pooling_pattern`. Dense: n² entries,
        refused above the memory budget.

    Examples
    --------
    >>> pooling_matrix(np.zeros((3, 1)), 2)
    array([[1. , 0. , 0. ],
           [0.5, 0.5, 0. ],
           [0. , 0.5, 0.5],
           [0. , 0. , 1. ]])
    """
    check_choice("pooling", pooling, ("mean", "conv"))
    y = as_float("y", y, min_ndim=2)
    kernel_size = check_positive_int("kernel_size", kernel_size)
    if pooling == "conv":
        if w_kernel is None:
            raise ValueError("pooling='conv' predicts its kernel with w_kernel: pass w_kernel (d_v, kernel_size)")
        w_kernel = as_float("w_kernel", w_kernel)
        if w_kernel.shape != (y.shape[-1], kernel_size):
            raise ValueError(f"w_kernel must have shape (d_v, kernel_size) = ({y.shape[-1]}, {kernel_size}), "
                             f"got shape {w_kernel.shape}")
    n = y.shape[-2]
    check_fits("the dense pooling matrix", (*y.shape[:-2], n + kernel_size - 1, n))
    return _pool(np.broadcast_to(np.eye(n), (*y.shape[:-2], n, n)), _pool_weights(y, kernel_size, pooling, w_kernel))


def poolingformer_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    window: int,
    pool_window: int,
    kernel_size: int,
    stride: int,
    pooling: str = "conv",
    params: PoolingformerParams | None = None,
    rng: np.random.Generator | int | None = None,
    residual: bool = True,
    causal: bool | str = False,
    scale: float | None = None,
    method: str = "auto",
    return_weights: bool = False,
) -> NDArray | tuple[NDArray, NDArray]:
    r"""Poolingformer's two levels: a sliding window, then attention over pooled segments of a larger one.

    .. math::

        y_i = \sum_{|i - j| \le w_1} \operatorname{softmax}_j\Big(\frac{q_i \cdot k_j}{\sqrt d}\Big) v_j,
        \qquad
        \mathrm{out}_i = y_i + \sum_{t} \operatorname{softmax}_t\Big(\frac{(y_i W_Q) \cdot
        (\tilde y_{s_{i,t}} W_K)}{\sqrt d}\Big)\, \tilde y_{s_{i,t}}

    with :math:`\tilde y_s` the pooled first-level outputs of segment s (module docstring).

    Parameters
    ----------
    q : (..., n, d_k) array_like
        Queries.
    k : (..., m, d_k) array_like
        Keys.
    v : (..., m, d_v) array_like
        Values.
    window : int
        w₁: the first level sees keys ``i − w₁ … i + w₁`` (2w₁ + 1; positions compared directly
        when n != m). The paper's first-level window of 128 tokens is w₁ = 64.
    pool_window : int
        w₂: the second level pools the first level's outputs in ``[i − w₂, i + w₂]``. The paper's
        second-level window of 512 tokens is w₂ = 256.
    kernel_size : int
        κ, positions per pooled segment, at most 2w₂ + 1.
    stride : int
        ξ, between the starts of consecutive segments.
    pooling : {"conv", "mean", "max"}, default "conv"
        "conv": the lightweight dynamic convolution (LDConv) of the paper; "mean" and "max": its
        other pooling operations. "max" has no ``return_weights``.
    params : PoolingformerParams, optional
        The second level's :math:`W_Q, W_K, W_\delta` (:func:`init_poolingformer`); drawn from
        ``rng`` when not given.
    rng : numpy.random.Generator or int, optional
        Draws ``params`` with :func:`init_poolingformer` when it is not given (unused when it is).
    residual : bool, default True
        Add the first level's output to the second's (the paper's connection between the levels).
    causal : False
        The paper defines no causal form: anything else is a ``ValueError``.
    scale : float, optional
        Multiplier of the dot products of both levels; default :math:`1/\sqrt{d_k}`.
    method : {"equation", "csr", "auto"}, default "auto"
        How each level attends (:func:`~refattn.sparse.sparse_attention`): the dense masked
        definition, the CSR kernel on the kept pairs only, or "equation" while its scores fit the
        memory budget. The weights, when asked for, come from "equation" whatever the method.
    return_weights : bool, default False
        Also return the effective (..., n, m) matrix :math:`W = (I + A_2 P) A_1`
        (:math:`A_2 P A_1` without the residual), with ``out = W v``.

    Returns
    -------
    out : (..., n, d_v) ndarray
    weights : (..., n, m) ndarray
        Only if ``return_weights``.

    Notes
    -----
    **Choices made here.** The paper gives the two windows (128 and 512 tokens in its experiments),
    the pooling kernel and stride, its pooling operations (mean, max, and LDConv, its choice) and the
    residual connection between the levels; it also reports, as ablations, a second level built on the
    layer's input instead of the first level's output ("Mix") and one sharing the first level's
    projections. What this module fixes besides:

    * *Segments.* Query i's window [i − w₂, i + w₂] is cut like a convolution without padding:
      starts i − w₂ + tξ while a segment of κ fits in the window. Positions outside [0, n) are left
      out of a segment (mean and conv renormalise over the rest); a segment with none is dropped.
    * *The LDConv kernel* is predicted from the segment's mean, one kernel for every channel (the
      single weight group of Wu et al.'s LightConv), and pools keys and values alike.
    * *The second level's value projection* is the identity (:math:`\tilde v = \tilde y`), so that
      out = W v with one n × m matrix; a learned :math:`W_V` would give out = y + z W_V, the second
      level's output multiplied on the right.
    * *One head*: the second level reads this head's first-level output (width d_v) and projects it
      back to the queries' width d_k.

    **Exact limit.** Without the residual, a second level that sees only the query's own output
    (w₂ = 0, κ = ξ = 1: one segment, weight 1) gives out = y, and w₁ ≥ max(n, m) makes y softmax
    attention. With the residual the same settings give exactly 2y: the two levels add, so the
    mechanism as published has no setting equal to softmax attention.

    No causal form: Poolingformer is an encoder for long documents (question answering; the encoder of
    a summariser), and its windows and pooled segments reach tokens after the query.

    Complexity: O(n·(w₁ + T)·d) for the two levels and O(n·κ·d) for the pooling; memory O(n·(w₁ + T))
    for the patterns plus O(n·d) (``method="csr"``); nothing n × m unless ``return_weights``.

    References
    ----------
    .. [1] H. Zhang et al., "Poolingformer: Long Document Modeling with Pooling Attention", ICML 2021,
       arXiv:2105.04371.
    .. [2] F. Wu, A. Fan, A. Baevski, Y. Dauphin, M. Auli, "Pay Less Attention with Lightweight and
       Dynamic Convolutions", ICLR 2019, arXiv:1901.10430 (LightConv, DynamicConv).
    .. [3] T. Lin et al., "A Survey of Transformers", arXiv:2106.04554, §4.3.2.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 12, 4))
    >>> out, W = poolingformer_attention(q, k, v, window=1, pool_window=4, kernel_size=3, stride=2, rng=1,
    ...                                  return_weights=True)
    >>> bool(np.allclose(out, W @ v)), bool(np.allclose(W.sum(axis=-1), 2.0))
    (True, True)
    """
    check_choice("method", method, METHODS)
    check_choice("pooling", pooling, POOLINGS)
    residual = check_bool("residual", residual)
    return_weights = check_bool("return_weights", return_weights)
    q, k, v, batch = checked_qkv(q, k, v)
    no_causal_form(causal, "Poolingformer", NO_CAUSAL)
    window = check_non_negative_int("window", window)
    pool_window, kernel_size, stride = _check_geometry(pool_window, kernel_size, stride)
    n, m, d_k, d_v = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    scale = default_scale(d_k) if scale is None else check_scale(scale)
    if return_weights and pooling == "max":
        raise ValueError("pooling='max' has no effective matrix (each channel takes its maximum at its own position, "
                         "so out = W v holds for no single W): pass return_weights=False, or pooling='mean'/'conv'")
    params = given_or_drawn("poolingformer", "params", params, optional_rng(rng), what="its parameters",
                            draw=lambda r: init_poolingformer(r, d_v, d_k, kernel_size))
    params = _check_params(params, d_v, d_k, kernel_size)
    if return_weights:
        check_weights_fit(batch, n, m)
        check_fits("the second level's dense weights (return_weights=True)", (*batch, n, n + kernel_size - 1))
        check_fits("the pooled first-level weights (return_weights=True)", (*batch, n + kernel_size - 1, m))
    if n == 0:                                                     # no query: nothing to pool or attend
        out = np.zeros((*batch, 0, d_v))
        if not return_weights:
            return out
        note_allowed(np.zeros((*batch, 0, m), dtype=bool))
        return out, np.zeros((*batch, 0, m))
    first = band_pattern(n, window, m=m)                           # (n, m)  |i − j| ≤ w₁
    second = pooling_pattern(n, pool_window, kernel_size, stride)  # (n, n + κ − 1)  the segment starts
    levels = (q, k, v, params, first, second, pooling, residual, scale)
    if not return_weights:
        return _levels(*levels, method=method)[0]
    out, W, allowed = _levels(*levels, method="equation", weights=True)
    if method == "csr":
        out = _levels(*levels, method="csr")[0]
    note_allowed(allowed)                                          # the pairs of the two levels' patterns
    return out, W


def _check_geometry(pool_window, kernel_size, stride) -> tuple[int, int, int]:
    """w₂ >= 0, κ >= 1, ξ >= 1 and κ <= 2w₂ + 1 (a segment fits in the window)."""
    pool_window = check_non_negative_int("pool_window", pool_window)
    kernel_size = check_positive_int("kernel_size", kernel_size)
    stride = check_positive_int("stride", stride)
    if kernel_size > 2 * pool_window + 1:
        raise ValueError(f"kernel_size={kernel_size} does not fit in the second level's window of 2·pool_window + 1 "
                         f"= {2 * pool_window + 1} positions (pool_window={pool_window})")
    return pool_window, kernel_size, stride


def _check_params(params, d_v: int, d_k: int, kernel_size: int) -> PoolingformerParams:
    if not isinstance(params, PoolingformerParams):
        raise TypeError(f"params must be a PoolingformerParams (init_poolingformer), got {type(params).__name__}")
    if params.w_q.shape != (d_v, d_k) or params.w_kernel.shape != (d_v, kernel_size):
        raise ValueError(f"params has w_q {params.w_q.shape} and w_kernel {params.w_kernel.shape}, but v has "
                         f"d_v={d_v}, q has d_k={d_k} and kernel_size={kernel_size}: expected ({d_v}, {d_k}) and "
                         f"({d_v}, {kernel_size})")
    return params


def _levels(q, k, v, params, first, second, pooling, residual, scale, *, method, weights=False):
    """The two levels: ``(out, W, allowed)``, the last two None unless ``weights`` (then method is "equation")."""
    kappa = params.w_kernel.shape[1]
    y = sparse_attention(q, k, v, first, scale=scale, method=method, return_weights=weights)   # (..., n, d_v)
    if weights:
        y, A1 = y
        np.copyto(A1, 0.0, where=~first.to_mask())                 # exact zeros off the band (a NaN row too)
    with np.errstate(invalid="ignore", over="ignore"):             # Inf in a row: NaN in that row only
        q2 = y @ params.w_q                                        # (..., n, d_k)      q̃_i = y_i W_Q
        if pooling == "max":
            v2 = _max_pool(y, kappa)                               # (..., C, d_v)      ṽ_s = max_l y_l
            k2 = _max_pool(y @ params.w_k, kappa)                  # (..., C, d_k)      k̃_s = max_l (y_l W_K)
        else:
            delta = _pool_weights(y, kappa, pooling, params.w_kernel)   # (..., C, κ)   δ_s
            v2 = _pool(y, delta)                                   # (..., C, d_v)      ṽ_s = ỹ_s = Σ_l δ_l y_l
            k2 = v2 @ params.w_k                                   # (..., C, d_k)      k̃_s = ỹ_s W_K
    z = sparse_attention(q2, k2, v2, second, scale=scale, method=method, return_weights=weights)  # (..., n, d_v)
    if weights:
        z, A2 = z
        np.copyto(A2, 0.0, where=~second.to_mask())
    out = y + z if residual else z                                 # out_i = y_i + z_i
    if not weights:
        return out, None, None
    mask1, mask2 = first.to_mask(), second.to_mask()
    empty = np.zeros((A2.shape[-2], 1), dtype=bool)
    lower = weighted_values(A2, _pool(A1, delta), mask2, empty, "zero")   # (..., n, m)  A₂ (P A₁)
    W = A1 + lower if residual else lower                          # W = (I + A₂P) A₁
    reach = (mask2 @ _segments(y.shape[-2], kappa) @ mask1.astype(np.float64)) > 0   # pairs A₂ P A₁ can weigh
    allowed = mask1 | reach if residual else reach
    return out, W, np.broadcast_to(allowed, W.shape)


def _valid(n: int, kappa: int) -> NDArray:
    """(n + κ − 1, κ): position s + t of segment s = c − (κ − 1) lies in [0, n)."""
    position = np.arange(n + kappa - 1)[:, None] - (kappa - 1) + np.arange(kappa)   # (C, κ)
    return (position >= 0) & (position < n)


def _segments(n: int, kappa: int) -> NDArray:
    """(n + κ − 1, n) float 0/1: position l belongs to segment c."""
    return _pool(np.eye(n), np.where(_valid(n, kappa), 1.0, 0.0))


def _pool_weights(y: NDArray, kappa: int, pooling: str, w_kernel: NDArray | None) -> NDArray:
    """δ (..., C, κ): each segment's weights over its positions (0 outside [0, n)); mean, or LDConv's softmax."""
    valid = _valid(y.shape[-2], kappa)                             # (C, κ)
    mean = np.where(valid, 1.0, 0.0) / np.maximum(valid.sum(axis=1, keepdims=True), 1)   # (C, κ)  1/|S_s|
    if pooling == "mean":
        return np.broadcast_to(mean, (*y.shape[:-2], *mean.shape))
    with np.errstate(invalid="ignore", over="ignore"):            # Inf in y: NaN logits in its segments only
        logits = _pool(y, mean) @ w_kernel                         # (..., C, κ)  ȳ_s W_δ
    return softmax(logits, mask=valid)                             # (..., C, κ)  δ = softmax over S_s


def _pool(x: NDArray, delta: NDArray) -> NDArray:
    """Σ_t δ_{c,t} x_{c+t−(κ−1)} for every segment c: (..., n, D) → (..., n + κ − 1, D), one shifted add per t.

    Each term reads only positions of its segment, so a NaN or Inf in x reaches only the segments that hold it.
    """
    n, kappa = x.shape[-2], delta.shape[-1]
    out = np.zeros((*np.broadcast_shapes(x.shape[:-2], delta.shape[:-2]), n + kappa - 1, x.shape[-1]))
    with np.errstate(invalid="ignore", over="ignore"):
        for t in range(kappa):
            c = kappa - 1 - t                                      # segment c reads position c + t − (κ − 1)
            out[..., c:c + n, :] += delta[..., c:c + n, t, None] * x
    return out


def _max_pool(x: NDArray, kappa: int) -> NDArray:
    """max over each segment's positions, channel by channel: (..., n, D) → (..., n + κ − 1, D); NaN propagates."""
    n = x.shape[-2]
    out = np.full((*x.shape[:-2], n + kappa - 1, x.shape[-1]), -np.inf)
    for t in range(kappa):
        c = kappa - 1 - t
        out[..., c:c + n, :] = np.maximum(out[..., c:c + n, :], x)
    return out


RECORD = Mechanism.of(
    poolingformer_attention,                       # three segments per query at a short test length:
    defaults={"window": 1, "pool_window": 3, "kernel_size": 3, "stride": 2},
    id="poolingformer", title="Poolingformer two-level pooling attention", family="compressed", section="4.3.2",
    paper=POOLINGFORMER,
    equation=r"y_i = \sum_{|i-j| \le w_1} \operatorname{softmax}_j(q_i k_j^\top/\sqrt d)\, v_j, \quad "
             r"\mathrm{out}_i = y_i + \sum_t \operatorname{softmax}_t\big(y_i W_Q (\tilde y_{s_{i,t}} W_K)^\top"
             r"/\sqrt d\big)\, \tilde y_{s_{i,t}}, \quad \tilde y_s = \operatorname{Pool}_\kappa(y_s, \dots, "
             r"y_{s+\kappa-1})",
    time="O(n·(w₁ + w₂/ξ + κ)·d)", memory="O(n·(w₁ + w₂/ξ) + n·d)", kind="attention",
    methods=("equation", "csr", "auto"), causal=False,
    position_dependent=True, normalized=False,
    examples=({"pooling": "mean"}, {"residual": False, "pool_window": 2, "kernel_size": 2, "stride": 1}),
    figure="refattn.figures.poolingformer:poolingformer",
    exact_options=lambda n, m: {"window": max(n, m), "pool_window": 0, "kernel_size": 1, "stride": 1,
                                "residual": False},
    exact_limit="w₁ ≥ max(n, m), a second level that sees only the query's own output (w₂ = 0, κ = 1) and no "
                "residual (with it, exactly twice softmax attention)",
    draws=("params",),
)
