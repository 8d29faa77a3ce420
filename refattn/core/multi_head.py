r"""Multi-head attention (Vaswani et al., 2017, §3.2.2).

    MultiHead(Q, K, V) = Concat(head_1, …, head_h) Wᴼ,   head_i = Attention(Q W_iᵠ, K W_iᴷ, V W_iⱽ)

The h projections W_iᵠ (d_model × d_k) are stored side by side as one (d_model × h·d_k) matrix,
as in every implementation, so head i owns columns i·d_k … (i+1)·d_k − 1; Wᴼ (h·d_v × d_model)
likewise owns rows i·d_v … (i+1)·d_v − 1 for head i. Written with those row blocks Wᴼ_i,

    Concat(head_1, …, head_h) Wᴼ = Σ_i head_i Wᴼ_i         (survey Eq. 14)

which the tests check.

Options of PyTorch's ``nn.MultiheadAttention``: keys and values may have their own widths (``kdim``,
``vdim``: W_iᴷ is kdim × d_k, W_iⱽ vdim × d_v); ``add_bias_kv`` appends one learned key and value
(``bias_k``, ``bias_v``) to every sequence after the projections, and ``add_zero_attn`` then a key and
value of zeros in every head. The added positions are visible to every query.

Masks are shared by the heads or given per head, by one rule: with inputs of batch shape (B₁, …, B_r),
a mask of at most r + 2 dims is (…, n, m), shared by all heads, and a mask of r + 3 dims is
(B₁, …, B_r, h, n, m), per head (any of its axes may be 1). More dims, or a head axis other than 1 or h,
is a ValueError naming the shapes: a mask never adds batch axes and is never read two ways.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.checks import as_float, as_rng, broadcast_batch, check_bool
from ..common.init import glorot
from ..common.ints import check_positive_int
from ..deprecation import none_is_auto
from ..draws import given_or_drawn, note_allowed, optional_rng
from ..masks import allowed_pairs, attention_mask, check_mask_shape
from ..mechanism import Mechanism
from ..papers import VASWANI
from .sdpa import scaled_dot_product_attention

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
    bias_k : (h·d_k,) ndarray or None
        A learned key appended to every key sequence after the projection (PyTorch's
        ``add_bias_kv=True``); given together with ``bias_v``.
    bias_v : (h·d_v,) ndarray or None
        The learned value appended with ``bias_k``.

    ``w_k`` has ``kdim`` rows and ``w_v`` ``vdim`` rows, the widths of the key and value inputs
    (``d_model`` unless given otherwise, as PyTorch's ``kdim``/``vdim``).
    """

    w_q: NDArray
    w_k: NDArray
    w_v: NDArray
    w_o: NDArray
    b_q: NDArray | None = None
    b_k: NDArray | None = None
    b_v: NDArray | None = None
    b_o: NDArray | None = None
    bias_k: NDArray | None = None
    bias_v: NDArray | None = None

    def __post_init__(self) -> None:
        d_model = check_matrices(self)
        if self.w_k.shape[1] != self.w_q.shape[1]:
            raise ValueError(f"w_k has shape {self.w_k.shape} but w_q has shape {self.w_q.shape}; "
                             "they must have the same h·d_k columns")
        if self.w_o.shape != (self.w_v.shape[1], d_model):
            raise ValueError(
                f"w_o has shape {self.w_o.shape}; expected (h·d_v, d_model) = "
                f"({self.w_v.shape[1]}, {d_model})"
            )
        check_biases(self)
        if (self.bias_k is None) != (self.bias_v is None):
            raise ValueError("bias_k and bias_v are given together (add_bias_kv) or not at all, got "
                             f"bias_k shape {np.shape(self.bias_k)} and bias_v shape {np.shape(self.bias_v)}")
        for name, w in (("bias_k", "w_k"), ("bias_v", "w_v")):
            bias = getattr(self, name)
            if bias is not None and np.shape(bias) != (getattr(self, w).shape[1],):
                raise ValueError(f"{name} has shape {np.shape(bias)}; expected ({getattr(self, w).shape[1]},) to "
                                 f"match {w} {getattr(self, w).shape}")

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
    kdim: int | None = None, vdim: int | None = None, add_bias_kv: bool = False,
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
    kdim, vdim : int, optional
        Widths of the key and value inputs (rows of ``w_k``, ``w_v``). Default ``d_model``.
    add_bias_kv : bool, default False
        Draw ``bias_k`` and ``bias_v``, N(0, 1/(h·d)) each (PyTorch's ``xavier_normal_`` of its
        ``(1, 1, embed_dim)`` tensors), after the four matrices.

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
    kdim = d_model if kdim is None else check_positive_int("kdim", kdim)
    vdim = d_model if vdim is None else check_positive_int("vdim", vdim)
    h = num_heads
    w_q, w_k = glorot(rng, d_model, h * d_k), glorot(rng, kdim, h * d_k)
    w_v, w_o = glorot(rng, vdim, h * d_v), glorot(rng, h * d_v, d_model)
    b = (lambda size: np.zeros(size)) if bias else (lambda size: None)
    bias_kv = ()
    if check_bool("add_bias_kv", add_bias_kv):
        bias_kv = rng.normal(0.0, (h * d_k) ** -0.5, h * d_k), rng.normal(0.0, (h * d_v) ** -0.5, h * d_v)
    return MultiHeadParams(w_q, w_k, w_v, w_o, b(h * d_k), b(h * d_k), b(h * d_v), b(d_model), *bias_kv)


def multi_head_attention(
    x_q: ArrayLike,
    x_kv: ArrayLike,
    params: MultiHeadParams | str | None = None,
    *,
    num_heads: int,
    rng: np.random.Generator | int | None = None,
    mask: ArrayLike | None = None,
    causal: bool | str = False,
    scale: float | None = None,
    fully_masked: str = "zero",
    x_v: ArrayLike | None = None,
    add_zero_attn: bool = False,
    return_weights: bool = False,
    method: str = "auto",
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
    x_kv : (..., m, kdim) array_like
        Key-side input :math:`K` (and :math:`V` unless ``x_v`` is given): ``x_q`` itself for
        self-attention, the encoder output for cross-attention. ``kdim`` = rows of ``params.w_k``
        (``d_model`` unless the parameters were drawn with another ``kdim``).
    params : MultiHeadParams, "identity" or None
        Projections; ``params.w_q.shape[1]`` must be divisible by ``num_heads``. With ``bias_k``
        and ``bias_v`` (PyTorch's ``add_bias_kv``) one learned key and value are appended to every
        key/value sequence after the projections. None: drawn from ``rng`` (:func:`init_multi_head`,
        width d_model = x_q's). "identity" (with ``num_heads=1``): the four projections are the
        identity, which is scaled dot-product attention itself.
    num_heads : int
        *h* in the paper.
    rng : numpy.random.Generator or int, optional
        Draws ``params`` when it is None.
    mask : (..., n, m) or (..., h, n, m) array_like of bool or float, optional
        As in :func:`~refattn.scaled_dot_product_attention`. With inputs of batch shape
        ``(B_1, …, B_r)``: at most ``r + 2`` dims, ``(..., n, m)``, shared by all heads; exactly
        ``r + 3`` dims, ``(B_1, …, B_r, h, n, m)``, one mask per head (axes of size 1 broadcast, so
        ``(1, h, n, m)`` gives every batch entry the same per-head masks). More dims, or a head axis
        other than 1 or ``h``, raise ``ValueError`` naming the shapes. PyTorch's 3-D
        ``(B·h, n, m)`` ``attn_mask`` is ``mask.reshape(B, h, n, m)`` here (with the opposite
        boolean polarity: ``True`` = may attend).
    causal : {False, True, "top-left", "bottom-right"}, default False
        As in :func:`~refattn.scaled_dot_product_attention`.
    scale : float, optional
        Default :math:`1/\sqrt{d_k}` with the per-head width :math:`d_k`.
    fully_masked : {"zero", "nan", "uniform"}, default "zero"
        As in :func:`~refattn.scaled_dot_product_attention`.
    x_v : (..., m, vdim) array_like, optional
        Value-side input :math:`V` when it differs from the keys' input (needed when ``vdim``
        differs from ``kdim``).
    add_zero_attn : bool, default False
        Append a key and a value of zeros to every head after the projections (and after
        ``bias_k``/``bias_v``), as PyTorch's ``add_zero_attn``: a key every query may attend to with
        score 0, whose value adds nothing. The added positions (this one and ``bias_k``'s) are
        visible to every query whatever ``mask`` and ``causal`` say of the m given keys.
    return_weights : bool, default False
        Also return every head's attention matrix.
    method : {"equation", "blocked", "auto"}, default "auto"
        How each head's attention is computed, as in
        :func:`~refattn.scaled_dot_product_attention` ("blocked": the Numba online-softmax kernel,
        float64 only and without ``return_weights``; "auto": the equation path while the
        ``(..., h, n, m)`` scores fit :func:`refattn.common.memory_budget` and have at most 2**21
        entries, else it streams: the blocked kernel in float64, the equation path one chunk of
        query rows at a time in float32/float16). ``None`` is read as "auto", with a warning.
    dtype : float dtype, default float64
        Compute and output dtype.

    Returns
    -------
    out : (..., n, d_model) ndarray
    weights : (..., h, n, m + e) ndarray
        Only if ``return_weights``; ``weights[..., i, :, :]`` is head *i*'s matrix, over the m keys
        then the ``e`` added positions (``bias_k``, then the zero key).

    References
    ----------
    .. [1] A. Vaswani et al., "Attention Is All You Need", NeurIPS 2017, arXiv:1706.03762v7, §3.2.2.
    .. [2] PyTorch documentation, ``torch.nn.MultiheadAttention`` (kdim, vdim, add_bias_kv,
       add_zero_attn, the 3-D ``attn_mask``).

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
    method = none_is_auto("multi_head_attention", method)
    sized = as_float("x_q", x_q, dtype, min_ndim=2) if params is None or isinstance(params, str) else None
    params = resolve_params(params, sized, num_heads, optional_rng(rng))   # drawn, the identity, or as given
    x_q, x_kv, x_v = layer_inputs(x_q, x_kv, x_v, params.d_model, dtype,
                                  kdim=params.w_k.shape[0], vdim=params.w_v.shape[0])
    mask = head_mask(mask, x_q, x_kv, x_v, num_heads)              # (..., h or 1, n, m) or None
    Q = project_heads(x_q, params.w_q, params.b_q, num_heads)      # (..., h, n, d_k)  Q W_iᵠ
    K = project_heads(x_kv, params.w_k, params.b_k, num_heads)     # (..., h, m, d_k)  K W_iᴷ
    V = project_heads(x_v, params.w_v, params.b_v, num_heads)      # (..., h, m, d_v)  V W_iⱽ
    K, V, mask, causal = added_keys(Q.shape[-2], K, V, mask, causal, params, num_heads, add_zero_attn)
    result = scaled_dot_product_attention(                         # (..., h, n, d_v) [, (..., h, n, m + e)]
        Q, K, V, mask=mask, causal=causal, scale=scale,
        fully_masked=fully_masked, return_weights=return_weights, method=method, dtype=dtype,
    )
    heads, A = result if return_weights else (result, None)
    out = combine_heads(heads, params.w_o, params.b_o)             # (..., n, d_model)  Concat(·) Wᴼ
    if return_weights:                                             # the added keys' columns are visible
        note_allowed(lambda: allowed_pairs(mask, causal, A.shape, fully_masked))
    return (out, A) if return_weights else out


def layer_inputs(x_q: ArrayLike, x_kv: ArrayLike, x_v: ArrayLike | None, d_model: int,
                 dtype=np.float64, *, kdim: int | None = None,
                 vdim: int | None = None) -> tuple[NDArray, NDArray, NDArray]:
    """A layer's inputs checked and converted: (x_q, x_kv, x_v), x_v = x_kv when None.

    Each is a float array of at least 2 dimensions, x_q with ``d_model`` columns, x_kv with ``kdim``
    and x_v with ``vdim`` (both ``d_model`` by default); x_v has x_kv's m rows; the leading (batch)
    dims broadcast. ``ValueError``/``TypeError`` naming the argument and the shapes seen otherwise.
    """
    x_q = as_float("x_q", x_q, dtype, min_ndim=2)
    x_kv = as_float("x_kv", x_kv, dtype, min_ndim=2)
    x_v = x_kv if x_v is None else as_float("x_v", x_v, dtype, min_ndim=2)
    widths = {"x_q": ("d_model", d_model),
              "x_kv": ("d_model", d_model) if kdim in (None, d_model) else ("kdim", kdim),
              "x_v": ("d_model", d_model) if vdim in (None, d_model) else ("vdim", vdim)}
    for name, x in (("x_q", x_q), ("x_kv", x_kv), ("x_v", x_v)):
        symbol, width = widths[name]
        if x.shape[-1] != width:
            raise ValueError(f"{name} has {symbol}={x.shape[-1]} (shape {x.shape}) but params have {symbol}={width}"
                             + (" (x_v defaults to x_kv)" if name == "x_v" and x_v is x_kv else ""))
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


def head_mask(mask: ArrayLike | None, x_q: NDArray, x_kv: NDArray, x_v: NDArray, num_heads: int) -> NDArray | None:
    """A multi-head layer's ``mask`` with its head axis: ``(..., h or 1, n, m)`` (None stays None).

    The rule of :func:`multi_head_attention`: with inputs of batch shape (B₁, …, B_r), at most r + 2
    dims is a mask shared by the heads, r + 3 dims is (B₁, …, B_r, h, n, m) per head; anything else
    is a ``ValueError`` naming the shapes.
    """
    if mask is None:
        return None
    n, m = x_q.shape[-2], x_kv.shape[-2]
    mask = check_mask_shape(mask, n, m)                            # as given, before the head axis
    r = max(x.ndim for x in (x_q, x_kv, x_v)) - 2
    inputs = f"x_q {x_q.shape}, x_kv {x_kv.shape}, x_v {x_v.shape}"
    if mask.ndim <= r + 2:
        return head_shared(mask)
    if mask.ndim > r + 3:
        raise ValueError(f"mask has shape {mask.shape}: with inputs of {r} batch dims ({inputs}) a mask has at most "
                         f"{r + 3} dims, (batch, h, n, m); a mask may not add batch axes")
    if mask.shape[-3] not in (1, num_heads):
        raise ValueError(f"mask has shape {mask.shape}: {r + 3} dims with inputs of {r} batch dims ({inputs}) is "
                         f"(batch, h, n, m) per head, but its head axis has {mask.shape[-3]} entries and "
                         f"num_heads={num_heads}")
    return mask


def added_keys(n: int, K: NDArray, V: NDArray, mask: NDArray | None, causal, params: MultiHeadParams,
               num_heads: int, add_zero_attn: bool) -> tuple[NDArray, NDArray, NDArray | None, bool | str]:
    """``(K, V, mask, causal)`` with ``bias_k``/``bias_v`` and the zero key/value appended (PyTorch's
    ``add_bias_kv``, ``add_zero_attn``), and the mask, causal included, padded with allowed columns.

    ``n`` queries, ``K`` (..., h, m, d_k), ``V`` (..., h, m, d_v), ``mask`` with its head axis.
    Unchanged when nothing is added.
    """
    added_k, added_v = [], []
    if params.bias_k is not None:
        added_k.append(split_heads(params.bias_k.astype(K.dtype, copy=False)[None, :], num_heads))  # (h, 1, d_k)
        added_v.append(split_heads(params.bias_v.astype(V.dtype, copy=False)[None, :], num_heads))  # (h, 1, d_v)
    if check_bool("add_zero_attn", add_zero_attn):
        added_k.append(np.zeros((num_heads, 1, K.shape[-1]), dtype=K.dtype))
        added_v.append(np.zeros((num_heads, 1, V.shape[-1]), dtype=V.dtype))
    if not added_k:
        return K, V, mask, causal
    e, m = len(added_k), K.shape[-2]
    K = np.concatenate([K, *(np.broadcast_to(a, (*K.shape[:-2], 1, K.shape[-1])) for a in added_k)], axis=-2)
    V = np.concatenate([V, *(np.broadcast_to(a, (*V.shape[:-2], 1, V.shape[-1])) for a in added_v)], axis=-2)
    allowed, bias = attention_mask(mask, causal, n, m, K.dtype)    # over the m given keys
    if allowed is None and bias is None:
        return K, V, None, False
    if bias is None:                                               # bool: the added keys are allowed
        mask = np.broadcast_to(allowed, (*allowed.shape[:-1], m))
        pad = np.ones((*mask.shape[:-1], e), dtype=bool)
    else:                                                          # float: bias 0 on the added keys
        mask = bias if allowed is None else np.where(allowed, bias, -np.inf)
        mask = np.broadcast_to(mask, (*mask.shape[:-1], m))
        pad = np.zeros((*mask.shape[:-1], e), dtype=mask.dtype)
    return K, V, np.concatenate([mask, pad], axis=-1), False


def head_shared(mask: ArrayLike | None) -> ArrayLike | None:
    """Insert a head axis into a (..., n, m) mask so that all heads share it."""
    if mask is None:
        return None
    mask = np.asarray(mask)
    return np.expand_dims(mask, -3) if mask.ndim >= 3 else mask


def resolve_params(params, x_q: NDArray | None, num_heads: int, rng) -> MultiHeadParams:
    """``params`` of :func:`multi_head_attention`: drawn from ``rng`` (:func:`init_multi_head`, width d_model of the
    checked queries ``x_q``) when ``None``, or ``"identity"``: one head whose four projections are the identity (no
    bias), which is scaled dot-product attention itself; noted as the call's draw. ``x_q`` may be None when
    ``params`` are given."""
    if isinstance(params, str):
        if params != "identity" or num_heads != 1:
            raise ValueError(f"params must be MultiHeadParams, None or 'identity' (with num_heads=1), got {params!r} "
                             f"with num_heads={num_heads}")
        eye = np.eye(x_q.shape[-1])
        params = MultiHeadParams(eye, eye, eye, eye)
    elif params is not None and not isinstance(params, MultiHeadParams):
        raise TypeError(f"params must be MultiHeadParams (see init_multi_head), None or 'identity', got "
                        f"{type(params).__name__}")
    return given_or_drawn("multi_head", "params", params, rng,
                          lambda r: init_multi_head(r, drawn_width(x_q), num_heads), what="its projections")


def drawn_width(x_q: NDArray) -> int:
    """d_model, the width of the checked ``x_q``, which sizes the parameters a layer draws from ``rng``.

    A ``ValueError`` naming ``x_q`` when it is 0: there are no projections to draw.
    """
    if x_q.shape[-1] == 0:
        raise ValueError(f"x_q has width d_model = 0 (shape {x_q.shape}): there are no projections to draw")
    return x_q.shape[-1]


#: The options of the multi-head records (multi_head, cross_attention): the layer's, but its dtype and the
#: ``x_v`` input (``v``).
RECORD_OPTIONS = ("params", "num_heads", "mask", "scale", "fully_masked", "add_zero_attn", "method")

RECORD = Mechanism.of(
    multi_head_attention, inputs=("x_q", "x_kv", "x_v"), defaults={"num_heads": 2},
    options=RECORD_OPTIONS,
    id="multi_head", title="Multi-head attention", family="vanilla", section="2.1 (Vaswani §3.2.2)", paper=VASWANI,
    equation=r"\operatorname{Concat}(\mathrm{head}_1, \dots, \mathrm{head}_h) W^O,\ "
    r"\mathrm{head}_i = \operatorname{Attention}(QW_i^Q, KW_i^K, VW_i^V)",
    time="O(n·m·d + (n+m)·d²)", memory="O(h·n·m)", kind="attention",
    examples=({"num_heads": 1}, {"num_heads": 4}),
    causal=True, figure="refattn.figures.vanilla:multi_head", exact_options={"num_heads": 1, "params": "identity"},
    exact_limit="one head, identity projections", draws=("params",),
    layer_inputs=True,
)
