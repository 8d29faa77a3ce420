r"""Multi-head attention (Vaswani et al., 2017, §3.2.2).

    MultiHead(Q, K, V) = Concat(head_1, …, head_h) Wᴼ,   head_i = Attention(Q W_iᵠ, K W_iᴷ, V W_iⱽ)

The h projections W_iᵠ (d_model × d_k) are stored side by side as one (d_model × h·d_k) matrix,
as in every implementation, so head i owns columns i·d_k … (i+1)·d_k − 1; Wᴼ (h·d_v × d_model)
likewise owns rows i·d_v … (i+1)·d_v − 1 for head i. Written with those row blocks Wᴼ_i,

    Concat(head_1, …, head_h) Wᴼ = Σ_i head_i Wᴼ_i         (survey Eq. 14)

which the tests check.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common import as_float, as_rng, broadcast_batch, check_positive_int, glorot
from ..mechanism import AttentionResult, Mechanism
from ..papers import VASWANI
from .masks import check_mask_shape
from .sdpa import allowed_pairs, scaled_dot_product_attention

__all__ = ["MultiHeadParams", "init_multi_head", "multi_head_attention"]


@dataclass(frozen=True)
class MultiHeadParams:
    """Parameters of multi-head attention; weights act on the right (``x @ w``).

    Attributes
    ----------
    w_q, w_k : (d_model, h·d_k) ndarray
    w_v : (d_model, h·d_v) ndarray
    w_o : (h·d_v, d_model) ndarray
    b_q, b_k, b_v, b_o : ndarray or None
        Biases of the four projections (the paper writes none; most code has them).
    """

    w_q: NDArray
    w_k: NDArray
    w_v: NDArray
    w_o: NDArray
    b_q: NDArray | None = None
    b_k: NDArray | None = None
    b_v: NDArray | None = None
    b_o: NDArray | None = None

    def __post_init__(self) -> None:
        d_model = check_matrices(self)
        if self.w_k.shape != self.w_q.shape:
            raise ValueError(f"w_k has shape {self.w_k.shape} but w_q has shape {self.w_q.shape}")
        if self.w_v.shape[0] != d_model:
            raise ValueError(f"w_v has shape {self.w_v.shape}; expected ({d_model}, h·d_v)")
        if self.w_o.shape != (self.w_v.shape[1], d_model):
            raise ValueError(
                f"w_o has shape {self.w_o.shape}; expected (h·d_v, d_model) = "
                f"({self.w_v.shape[1]}, {d_model})"
            )
        check_biases(self)

    @property
    def d_model(self) -> int:
        """Model width: rows of ``w_q``."""
        return self.w_q.shape[0]


def check_matrices(params) -> int:
    """``w_q``, ``w_k``, ``w_v`` and ``w_o`` of a parameter record are 2-D matrices; returns d_model (rows of w_q)."""
    for name in ("w_q", "w_k", "w_v", "w_o"):
        w = getattr(params, name)
        if np.ndim(w) != 2:
            raise ValueError(f"{name} must be a 2-D matrix, got shape {np.shape(w)}")
    return params.w_q.shape[0]


def check_biases(params) -> None:
    """Each bias ``b_q``, ``b_k``, ``b_v``, ``b_o`` of a parameter record is None or as wide as its projection."""
    for b, w in (("b_q", "w_q"), ("b_k", "w_k"), ("b_v", "w_v"), ("b_o", "w_o")):
        bias = getattr(params, b)
        if bias is not None and np.shape(bias) != (getattr(params, w).shape[1],):
            raise ValueError(f"{b} has shape {np.shape(bias)}; expected ({getattr(params, w).shape[1]},) to match "
                             f"{w} {getattr(params, w).shape}")


def init_multi_head(
    rng, d_model: int, num_heads: int, *, bias: bool = True,
    d_k: int | None = None, d_v: int | None = None,
) -> MultiHeadParams:
    r"""Draw multi-head attention parameters (Glorot/Xavier uniform, zero biases).

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw.
    d_model : int
        Model width.
    num_heads : int
        *h* in the paper.
    bias : bool, default True
        Give the four projections biases (initialised to zero, as PyTorch does).
    d_k : int, optional
        Query/key width per head. Default ``d_model // num_heads`` (the paper's choice).
    d_v : int, optional
        Value width per head. Default ``d_k``.

    Returns
    -------
    MultiHeadParams

    Notes
    -----
    The paper does not state an initialisation; Glorot uniform,
    :math:`U(\pm\sqrt{6/(\text{fan}_\text{in} + \text{fan}_\text{out})})` per matrix, is the
    Annotated Transformer's and close to PyTorch's. The draws come in the order w_q, w_k, w_v, w_o.
    """
    rng = as_rng(rng)
    check_positive_int("d_model", d_model)
    check_positive_int("num_heads", num_heads)
    if d_k is None:
        if d_model % num_heads:
            raise ValueError(
                f"d_model={d_model} is not divisible by num_heads={num_heads}; pass d_k explicitly"
            )
        d_k = d_model // num_heads
    d_v = d_k if d_v is None else d_v
    check_positive_int("d_k", d_k)
    check_positive_int("d_v", d_v)
    h = num_heads
    w_q, w_k = glorot(rng, d_model, h * d_k), glorot(rng, d_model, h * d_k)
    w_v, w_o = glorot(rng, d_model, h * d_v), glorot(rng, h * d_v, d_model)
    b = (lambda size: np.zeros(size)) if bias else (lambda size: None)
    return MultiHeadParams(w_q, w_k, w_v, w_o, b(h * d_k), b(h * d_k), b(h * d_v), b(d_model))


def multi_head_attention(
    x_q: ArrayLike,
    x_kv: ArrayLike,
    params: MultiHeadParams,
    *,
    num_heads: int,
    mask: ArrayLike | None = None,
    causal: bool | str = False,
    scale: float | None = None,
    fully_masked: str = "zero",
    x_v: ArrayLike | None = None,
    return_weights: bool = False,
    method: str | None = None,
    dtype=np.float64,
) -> NDArray | tuple[NDArray, NDArray]:
    r"""Multi-head attention: h scaled dot-product attentions on learned projections.

    .. math::

        \operatorname{MultiHead}(Q, K, V) = \operatorname{Concat}(\mathrm{head}_1, \dots,
        \mathrm{head}_h) W^O, \quad
        \mathrm{head}_i = \operatorname{Attention}(Q W_i^Q, K W_i^K, V W_i^V)

    Parameters
    ----------
    x_q : (..., n, d_model) array_like
        Query-side input :math:`Q` (the decoder states in cross-attention).
    x_kv : (..., m, d_model) array_like
        Key-side input :math:`K` (and :math:`V` unless ``x_v`` is given): ``x_q`` itself for
        self-attention, the encoder output for cross-attention.
    params : MultiHeadParams
        Projections; ``params.w_q.shape[1]`` must be divisible by ``num_heads``.
    num_heads : int
        *h* in the paper.
    mask : (..., n, m) array_like of bool or float, optional
        As in :func:`~refattn.scaled_dot_product_attention`, shared by all heads.
    causal : {False, True, "top-left", "bottom-right"}, default False
        As in :func:`~refattn.scaled_dot_product_attention`.
    scale : float, optional
        Default :math:`1/\sqrt{d_k}` with the per-head width :math:`d_k`.
    fully_masked : {"zero", "nan", "uniform"}, default "zero"
        As in :func:`~refattn.scaled_dot_product_attention`.
    x_v : (..., m, d_model) array_like, optional
        Value-side input :math:`V` when it differs from the keys' input.
    return_weights : bool, default False
        Also return every head's attention matrix.
    method : {None, "equation", "blocked", "auto"}, default None
        How each head's attention is computed, as in
        :func:`~refattn.scaled_dot_product_attention` ("blocked": the Numba online-softmax kernel,
        float64 only and without ``return_weights``). The default is the equation path while the
        ``(..., h, n, m)`` scores fit :func:`refattn.common.memory_budget`, and streams beyond it:
        the blocked kernel in float64, the equation path one chunk of query rows at a time in
        float32/float16.
    dtype : float dtype, default float64
        Compute and output dtype.

    Returns
    -------
    out : (..., n, d_model) ndarray
    weights : (..., h, n, m) ndarray
        Only if ``return_weights``; ``weights[..., i, :, :]`` is head *i*'s matrix.

    References
    ----------
    .. [1] A. Vaswani et al., "Attention Is All You Need", NeurIPS 2017, arXiv:1706.03762v7, §3.2.2.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> params = init_multi_head(rng, d_model=8, num_heads=2)
    >>> x, memory = rng.standard_normal((3, 8)), rng.standard_normal((5, 8))
    >>> out, A = multi_head_attention(x, memory, params, num_heads=2, return_weights=True)
    >>> out.shape, A.shape
    ((3, 8), (2, 3, 5))
    """
    check_positive_int("num_heads", num_heads)
    if not isinstance(params, MultiHeadParams):
        raise TypeError(f"params must be MultiHeadParams (see init_multi_head), got {type(params).__name__}")
    x_q, x_kv, x_v = layer_inputs(x_q, x_kv, x_v, params.d_model, dtype)
    if mask is not None:
        mask = check_mask_shape(mask, x_q.shape[-2], x_kv.shape[-2])   # as given, before the head axis
    Q = project_heads(x_q, params.w_q, params.b_q, num_heads)      # (..., h, n, d_k)  Q W_iᵠ
    K = project_heads(x_kv, params.w_k, params.b_k, num_heads)     # (..., h, m, d_k)  K W_iᴷ
    V = project_heads(x_v, params.w_v, params.b_v, num_heads)      # (..., h, m, d_v)  V W_iⱽ
    result = scaled_dot_product_attention(                         # (..., h, n, d_v) [, (..., h, n, m)]
        Q, K, V, mask=head_shared(mask), causal=causal, scale=scale,
        fully_masked=fully_masked, return_weights=return_weights, method=method, dtype=dtype,
    )
    heads, A = result if return_weights else (result, None)
    out = combine_heads(heads, params.w_o, params.b_o)             # (..., n, d_model)  Concat(·) Wᴼ
    return (out, A) if return_weights else out


def layer_inputs(x_q: ArrayLike, x_kv: ArrayLike, x_v: ArrayLike | None, d_model: int,
                 dtype=np.float64) -> tuple[NDArray, NDArray, NDArray]:
    """A layer's inputs checked and converted: (x_q, x_kv, x_v), x_v = x_kv when None.

    Each is a float array of at least 2 dimensions with ``d_model`` columns; x_v has x_kv's m
    rows; the leading (batch) dims broadcast. ``ValueError``/``TypeError`` naming the argument and
    the shapes seen otherwise.
    """
    x_q = as_float("x_q", x_q, dtype, min_ndim=2)
    x_kv = as_float("x_kv", x_kv, dtype, min_ndim=2)
    x_v = x_kv if x_v is None else as_float("x_v", x_v, dtype, min_ndim=2)
    for name, x in (("x_q", x_q), ("x_kv", x_kv), ("x_v", x_v)):
        if x.shape[-1] != d_model:
            raise ValueError(f"{name} has d_model={x.shape[-1]} (shape {x.shape}) but params have d_model={d_model}")
    if x_v.shape[-2] != x_kv.shape[-2]:
        raise ValueError(f"x_v has m={x_v.shape[-2]} but x_kv has m={x_kv.shape[-2]}")
    broadcast_batch({"x_q": x_q.shape[:-2], "x_kv": x_kv.shape[:-2], "x_v": x_v.shape[:-2]})
    return x_q, x_kv, x_v


def project_heads(x: NDArray, w: NDArray, b: NDArray | None, num_heads: int) -> NDArray:
    """``x @ w + b`` split into heads: (..., T, d_model) → (..., h, T, d_head)."""
    if w.shape[1] % num_heads:
        raise ValueError(
            f"projection width {w.shape[1]} (weight shape {w.shape}) is not divisible by "
            f"num_heads={num_heads}"
        )
    y = x @ w.astype(x.dtype, copy=False)                          # (..., T, h·d_head)
    if b is not None:
        y = y + b.astype(x.dtype, copy=False)
    return split_heads(y, num_heads)                               # (..., h, T, d_head)


def combine_heads(heads: NDArray, w_o: NDArray, b_o: NDArray | None) -> NDArray:
    """Concatenate heads and project: (..., h, T, d_v) → (..., T, h·d_v) @ Wᴼ (+ bᴼ)."""
    concat = merge_heads(heads)                                    # (..., T, h·d_v)  Concat(head_i)
    out = concat @ w_o.astype(heads.dtype, copy=False)             # (..., T, d_model)
    return out if b_o is None else out + b_o.astype(heads.dtype, copy=False)


def split_heads(y: NDArray, num_heads: int) -> NDArray:
    """(..., T, h·d_head) → (..., h, T, d_head): head i takes columns i·d_head … (i+1)·d_head − 1."""
    y = y.reshape(*y.shape[:-1], num_heads, y.shape[-1] // num_heads)   # (..., T, h, d_head)
    return np.swapaxes(y, -2, -3)                                  # (..., h, T, d_head)


def merge_heads(heads: NDArray) -> NDArray:
    """(..., h, T, d_head) → (..., T, h·d_head), the inverse of :func:`split_heads` (Concat(head_i))."""
    concat = np.swapaxes(heads, -2, -3)                            # (..., T, h, d_head)
    return concat.reshape(*concat.shape[:-2], concat.shape[-2] * concat.shape[-1])   # (..., T, h·d_head)


def head_shared(mask: ArrayLike | None) -> ArrayLike | None:
    """Insert a head axis into a (..., n, m) mask so that all heads share it."""
    if mask is None:
        return None
    mask = np.asarray(mask)
    return np.expand_dims(mask, -3) if mask.ndim >= 3 else mask


def resolve_params(params, d_model: int, num_heads: int, rng) -> MultiHeadParams:
    """The ``params`` option of a multi-head registry entry: a :class:`MultiHeadParams` as given, drawn from
    ``rng`` (:func:`init_multi_head`, width ``d_model``) when ``None``, or ``"identity"``: one head whose four
    projections are the identity (no bias), which is scaled dot-product attention itself."""
    if params is None:
        if rng is None:
            raise ValueError("multi-head attention needs params= or rng= to draw them")
        if d_model == 0:
            raise ValueError("q has width d_model = 0: there are no projections to draw")
        return init_multi_head(rng, d_model, num_heads)
    if isinstance(params, str):
        if params != "identity" or num_heads != 1:
            raise ValueError(f"params must be MultiHeadParams, None or 'identity' (with num_heads=1), got {params!r} "
                             f"with num_heads={num_heads}")
        eye = np.eye(d_model)
        return MultiHeadParams(eye, eye, eye, eye)
    if not isinstance(params, MultiHeadParams):
        raise TypeError(f"params must be MultiHeadParams, None or 'identity', got {type(params).__name__}")
    return params


def _apply(q, k, v, *, causal=False, rng=None, return_weights=False, num_heads=2, params=None, mask=None):
    """MultiHead(Q, K, V) with ``params`` (see :func:`resolve_params`: drawn from ``rng`` when omitted, d_model =
    q's width, or ``"identity"`` with one head: scaled dot-product attention itself)."""
    q = as_float("q", q, min_ndim=2)                               # its width sizes the drawn parameters
    params = resolve_params(params, q.shape[-1], num_heads, rng)
    draws = {"params": params}                                     # drawn from rng, or as given
    if not return_weights:
        return AttentionResult(multi_head_attention(q, k, params, num_heads=num_heads, x_v=v, mask=mask,
                                                    causal=causal), draws=draws)
    out, A = multi_head_attention(q, k, params, num_heads=num_heads, x_v=v, mask=mask, causal=causal,
                                  return_weights=True)
    return AttentionResult(out, A, allowed_pairs(head_shared(mask), causal, A.shape), draws)


RECORD = Mechanism(
    id="multi_head", title="Multi-head attention", family="vanilla", section="2.1 (Vaswani §3.2.2)", paper=VASWANI,
    equation=r"\operatorname{Concat}(\mathrm{head}_1, \dots, \mathrm{head}_h) W^O,\ "
    r"\mathrm{head}_i = \operatorname{Attention}(QW_i^Q, KW_i^K, VW_i^V)",
    time="O(n·m·d + (n+m)·d²)", memory="O(h·n·m)", kind="attention",
    examples=({"num_heads": 1}, {"num_heads": 4}), function=multi_head_attention, apply=_apply,
    causal=True, figure="refattn.figures.vanilla:multi_head", exact_options={"num_heads": 1, "params": "identity"},
    exact_limit="one head, identity projections", draws=("params",),
    layer_inputs=True,
)
