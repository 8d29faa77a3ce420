r"""Multi-query and grouped-query attention (Shazeer, 2019; Ainslie et al., 2023; survey §4.6).

h query heads share g key/value heads, g dividing h; with r = h / g query heads per group, query head i
reads key/value head ⌊i / r⌋ (the grouping of ``torch.repeat_interleave``, PyTorch's ``enable_gqa`` and
FlashAttention, and the one :func:`refattn.oracle.check` takes):

    head_i = Attention(Q W_iᵠ, K W_⌊i/r⌋ᴷ, V W_⌊i/r⌋ⱽ),     i = 0 … h − 1
    MultiQuery(Q, K, V) = Concat(head_0, …, head_{h−1}) Wᴼ

g = 1 is multi-query attention (Shazeer: one set of keys and values shared by every head),
1 < g < h grouped-query attention (Ainslie et al. §2.2), g = h multi-head attention. Wᵠ is (d_model × h·d_k)
and Wᴼ (h·d_v × d_model) as in multi-head attention; Wᴷ and Wⱽ have only g·d_k and g·d_v columns.

Key/value cache. A decoder keeps the keys and values of every past token, per layer,

    2 · g · d_head numbers per token per layer      (g · (d_k + d_v) when the widths differ)

h / g times fewer than multi-head attention's 2 · h · d_head; the query heads do not enter.
:func:`kv_cache_bytes` counts them, :func:`kv_cache_summary` prints them beside multi-head's and
multi-query's, and :func:`multi_query_step` decodes with a :class:`KVCache` (bottom-right causal
attention of the new queries over every cached key), reproducing the full causal computation.

Uptraining (Ainslie et al. §2.1). A multi-head checkpoint becomes a grouped-query one by mean-pooling the
key and value projection matrices of the r heads of each group (:func:`convert_multi_head`); the
paper then trains on for a small fraction (α = 0.05) of the original steps. With g = h the
conversion is the identity and the layer is the multi-head layer itself.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.checks import as_float, as_rng, broadcast_batch, check_choice
from ..common.init import glorot
from ..common.ints import check_positive_int
from ..core.multi_head import (
    MultiHeadParams,
    check_biases,
    check_matrices,
    combine_heads,
    drawn_width,
    head_shared,
    project_heads,
)
from ..core.sdpa import scaled_dot_product_attention
from ..deprecation import none_is_auto
from ..draws import given_or_drawn, note_allowed, optional_rng
from ..masks import allowed_pairs, check_mask_shape
from ..mechanism import Mechanism

__all__ = [
    "KVCache",
    "MultiQueryParams",
    "convert_multi_head",
    "init_multi_query",
    "kv_cache_bytes",
    "kv_cache_summary",
    "multi_query_attention",
    "multi_query_step",
]

SHAZEER = 'N. Shazeer, 2019, "Fast Transformer Decoding: One Write-Head is All You Need", arXiv:1911.02150'
AINSLIE = ('J. Ainslie, J. Lee-Thorp, M. de Jong, Y. Zemlyanskiy, F. Lebrón, S. Sanghai, 2023, "GQA: Training '
           'Generalized Multi-Query Transformer Models from Multi-Head Checkpoints", arXiv:2305.13245')
POOLINGS = ("mean", "first")


@dataclass(frozen=True)
class MultiQueryParams:
    """Parameters of grouped-query attention; weights act on the right (``x @ w``).

    Attributes
    ----------
    w_q : (d_model, h·d_k) ndarray
        Query projections of the h query heads, side by side (head i owns columns i·d_k … (i+1)·d_k − 1).
    w_k : (d_model, g·d_k) ndarray
        Key projections of the g key/value heads.
    w_v : (d_model, g·d_v) ndarray
        Value projections of the g key/value heads.
    w_o : (h·d_v, d_model) ndarray
        Output projection of the h concatenated heads.
    b_q, b_k, b_v, b_o : ndarray or None
        Biases of the four projections.

    Notes
    -----
    The shapes fix the ratio h / g (``w_q``'s columns over ``w_k``'s, and ``w_o``'s rows over ``w_v``'s
    columns); the number of query heads h is given to the functions, as to
    :func:`~refattn.multi_head_attention`. With g = h the fields are those of
    :class:`~refattn.MultiHeadParams`, which the functions also take.
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
        for name in ("w_k", "w_v"):
            if getattr(self, name).shape[0] != d_model:
                raise ValueError(f"{name} has shape {getattr(self, name).shape}; expected {d_model} rows as w_q "
                                 f"{self.w_q.shape}")
        if self.w_o.shape[1] != d_model:
            raise ValueError(f"w_o has shape {self.w_o.shape}; expected (h·d_v, d_model) with d_model = {d_model}")
        if self.w_q.shape[1] * self.w_v.shape[1] != self.w_k.shape[1] * self.w_o.shape[0]:
            raise ValueError(
                f"w_q {self.w_q.shape} and w_k {self.w_k.shape} give h·d_k : g·d_k, but w_o {self.w_o.shape} and "
                f"w_v {self.w_v.shape} give h·d_v : g·d_v in another ratio h / g"
            )
        check_biases(self)

    @property
    def d_model(self) -> int:
        """Model width: rows of ``w_q``."""
        return self.w_q.shape[0]


def _head_counts(params: MultiQueryParams | MultiHeadParams, num_heads: int) -> tuple[int, int, int]:
    """(g, d_k, d_v) of ``params`` with ``num_heads`` = h query heads, or a ValueError naming the shapes."""
    h = check_positive_int("num_heads", num_heads)
    if params.w_q.shape[1] % h or params.w_o.shape[0] % h:
        raise ValueError(f"num_heads={h} does not divide the query width h·d_k = {params.w_q.shape[1]} (w_q shape "
                         f"{params.w_q.shape}) and the output rows h·d_v = {params.w_o.shape[0]} (w_o shape "
                         f"{params.w_o.shape})")
    d_k, d_v = params.w_q.shape[1] // h, params.w_o.shape[0] // h
    if d_k == 0 or params.w_k.shape[1] % d_k or params.w_k.shape[1] == 0:
        raise ValueError(f"w_k has {params.w_k.shape[1]} columns (shape {params.w_k.shape}), not a positive multiple "
                         f"g·d_k of the per-head width d_k = {d_k} that num_heads={h} gives w_q {params.w_q.shape}")
    g = params.w_k.shape[1] // d_k
    if h % g:
        raise ValueError(f"num_heads={h} is not a multiple of the g = {g} key/value heads of w_k {params.w_k.shape}")
    return g, d_k, d_v


def init_multi_query(
    rng, d_model: int, num_heads: int, num_kv_heads: int = 1, *, bias: bool = True,
    d_k: int | None = None, d_v: int | None = None,
) -> MultiQueryParams:
    r"""Draw grouped-query attention parameters (Glorot/Xavier uniform, zero biases).

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw, in the order w_q, w_k, w_v, w_o (as :func:`~refattn.init_multi_head`, which
        draws the same arrays when ``num_kv_heads == num_heads``).
    d_model : int
        Model width.
    num_heads : int
        h, the query heads.
    num_kv_heads : int, default 1
        g, the key/value heads; a divisor of h (1: multi-query, h: multi-head).
    bias : bool, default True
        Give the four projections biases (initialised to zero).
    d_k : int, optional
        Query/key width per head. Default ``d_model // num_heads``.
    d_v : int, optional
        Value width per head. Default ``d_k``.

    Returns
    -------
    MultiQueryParams

    Examples
    --------
    >>> p = init_multi_query(0, d_model=8, num_heads=4, num_kv_heads=2)
    >>> p.w_q.shape, p.w_k.shape, p.w_v.shape, p.w_o.shape
    ((8, 8), (8, 4), (8, 4), (8, 8))
    """
    rng = as_rng(rng)
    check_positive_int("d_model", d_model)
    h, g = check_positive_int("num_heads", num_heads), check_positive_int("num_kv_heads", num_kv_heads)
    if h % g:
        raise ValueError(f"num_kv_heads={g} does not divide num_heads={h}")
    if d_k is None:
        if d_model % h:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={h}; pass d_k explicitly")
        d_k = d_model // h
    d_v = d_k if d_v is None else d_v
    check_positive_int("d_k", d_k)
    check_positive_int("d_v", d_v)
    w_q, w_k = glorot(rng, d_model, h * d_k), glorot(rng, d_model, g * d_k)
    w_v, w_o = glorot(rng, d_model, g * d_v), glorot(rng, h * d_v, d_model)
    b = (lambda size: np.zeros(size)) if bias else (lambda size: None)
    return MultiQueryParams(w_q, w_k, w_v, w_o, b(h * d_k), b(g * d_k), b(g * d_v), b(d_model))


def multi_query_attention(
    x_q: ArrayLike,
    x_kv: ArrayLike,
    params: MultiQueryParams | MultiHeadParams | str | None = None,
    *,
    num_heads: int,
    num_kv_heads: int | None = None,
    rng=None,
    mask: ArrayLike | None = None,
    causal: bool | str = False,
    scale: float | None = None,
    fully_masked: str = "zero",
    x_v: ArrayLike | None = None,
    return_weights: bool = False,
    method: str = "auto",
) -> NDArray | tuple[NDArray, NDArray]:
    r"""Grouped-query attention: h query heads over g shared key/value heads (g = 1: multi-query).

    .. math::

        \mathrm{head}_i = \operatorname{Attention}\big(Q W_i^Q,\ K W_{\lfloor i/r \rfloor}^K,\
        V W_{\lfloor i/r \rfloor}^V\big), \quad r = h/g, \qquad
        \operatorname{Concat}(\mathrm{head}_0, \dots, \mathrm{head}_{h-1})\, W^O

    Parameters
    ----------
    x_q : (..., n, d_model) array_like
        Query-side input.
    x_kv : (..., m, d_model) array_like
        Key-side input (and value-side unless ``x_v`` is given).
    params : MultiQueryParams, MultiHeadParams, "identity" or None
        Projections (:func:`init_multi_query`); multi-head parameters are the case g = h. ``None``: drawn from
        ``rng`` (:func:`init_multi_query`, d_model = the width of ``x_q``, g = ``num_kv_heads``).
        ``"identity"``: one head whose projections are the identity (no bias), which is scaled dot-product
        attention itself.
    num_heads : int
        h, the query heads; g follows from the widths of ``params`` (``w_k`` has g·d_k columns).
    num_kv_heads : int, optional
        g, the key/value heads: of the parameters drawn from ``rng`` (default 1, multi-query), or checked
        against those of ``params``.
    rng : numpy.random.Generator or int, optional
        Draws ``params`` when it is omitted.
    mask : (..., n, m) array_like of bool or float, optional
        As in :func:`~refattn.scaled_dot_product_attention`, shared by all heads.
    causal : {False, True, "top-left", "bottom-right"}, default False
        As in :func:`~refattn.scaled_dot_product_attention`.
    scale : float, optional
        Default :math:`1/\sqrt{d_k}`.
    fully_masked : {"zero", "nan", "uniform"}, default "zero"
        As in :func:`~refattn.scaled_dot_product_attention`.
    x_v : (..., m, d_model) array_like, optional
        Value-side input when it differs from ``x_kv``.
    return_weights : bool, default False
        Also return every query head's attention matrix.
    method : {"equation", "blocked", "auto"}, default "auto"
        How each head's attention is computed, as in :func:`~refattn.scaled_dot_product_attention`
        (``None``, the old default, is "auto" with a ``DeprecationWarning``).

    Returns
    -------
    out : (..., n, d_model) ndarray
    weights : (..., h, n, m) ndarray
        Only if ``return_weights``: query head i's matrix at ``weights[..., i, :, :]``.

    Notes
    -----
    The g key/value heads are computed once and broadcast over the r query heads of their group
    (the queries reshaped to ``(..., g, r, n, d_k)``), never copied, as a decoder reads its cache.

    References
    ----------
    .. [1] N. Shazeer, "Fast Transformer Decoding: One Write-Head is All You Need", 2019, arXiv:1911.02150v1, §3.
    .. [2] J. Ainslie et al., "GQA: Training Generalized Multi-Query Transformer Models from Multi-Head
       Checkpoints", EMNLP 2023, arXiv:2305.13245v3, §2.2.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> params = init_multi_query(rng, d_model=8, num_heads=4, num_kv_heads=2)
    >>> x = rng.standard_normal((5, 8))
    >>> out, A = multi_query_attention(x, x, params, num_heads=4, causal=True, return_weights=True)
    >>> out.shape, A.shape
    ((5, 8), (4, 5, 5))
    >>> from refattn import init_multi_head, multi_head_attention
    >>> mha = init_multi_head(1, d_model=8, num_heads=4)           # g = h: multi-head attention
    >>> bool(np.allclose(multi_query_attention(x, x, mha, num_heads=4), multi_head_attention(x, x, mha, num_heads=4),
    ...                  rtol=1e-12, atol=1e-12))
    True
    """
    method = none_is_auto("multi_query_attention", method)
    x_q = as_float("x_q", x_q, min_ndim=2)                         # its width sizes drawn parameters
    params = _multi_query_params(params, x_q, num_heads, num_kv_heads, rng)
    g, d_k, d_v = _head_counts(params, num_heads)
    h, r = num_heads, num_heads // g
    x_kv = as_float("x_kv", x_kv, min_ndim=2)
    x_v = x_kv if x_v is None else as_float("x_v", x_v, min_ndim=2)
    _check_inputs(params.d_model, x_q=x_q, x_kv=x_kv, x_v=x_v)
    if x_v.shape[-2] != x_kv.shape[-2]:
        raise ValueError(f"x_v has m={x_v.shape[-2]} but x_kv has m={x_kv.shape[-2]}")
    if mask is not None:
        mask = check_mask_shape(mask, x_q.shape[-2], x_kv.shape[-2])
    Q = project_heads(x_q, params.w_q, params.b_q, h)              # (..., h, n, d_k)     Q W_iᵠ
    K = project_heads(x_kv, params.w_k, params.b_k, g)             # (..., g, m, d_k)     K W_jᴷ, once per group
    V = project_heads(x_v, params.w_v, params.b_v, g)              # (..., g, m, d_v)     V W_jⱽ
    heads, A = _grouped_attention(Q, K, V, mask=mask, causal=causal, scale=scale, fully_masked=fully_masked,
                                  return_weights=return_weights, method=method, r=r)
    out = combine_heads(heads, params.w_o, params.b_o)             # (..., n, d_model)   Concat(head_i) Wᴼ
    if not return_weights:
        return out
    note_allowed(lambda: allowed_pairs(head_shared(mask), causal, A.shape, fully_masked))
    return out, A


def _multi_query_params(params, x_q: NDArray, num_heads: int, num_kv_heads, rng) -> MultiQueryParams | MultiHeadParams:
    """``params`` as given (g checked against ``num_kv_heads``), drawn from ``rng``, or ``"identity"``."""
    check_positive_int("num_heads", num_heads)
    params = given_or_drawn("multi_query", "params", params, optional_rng(rng), lambda r: init_multi_query(
        r, drawn_width(x_q), num_heads, 1 if num_kv_heads is None else num_kv_heads), what="its parameters")
    if isinstance(params, str):
        if params != "identity" or num_heads != 1:
            raise ValueError(f"params must be MultiQueryParams, None or 'identity' (with num_heads=1), got "
                             f"{params!r} with num_heads={num_heads}")
        eye = np.eye(x_q.shape[-1])
        params = MultiQueryParams(eye, eye, eye, eye)
    elif not isinstance(params, (MultiQueryParams, MultiHeadParams)):
        raise TypeError(f"params must be MultiQueryParams (see init_multi_query), MultiHeadParams (g = h), None or "
                        f"'identity', got {type(params).__name__}")
    g = _head_counts(params, num_heads)[0]
    if num_kv_heads is not None and num_kv_heads != g:
        raise ValueError(f"num_kv_heads={num_kv_heads} but params have g = {g} key/value heads (w_k "
                         f"{params.w_k.shape}, w_q {params.w_q.shape}, num_heads={num_heads})")
    return params


def _grouped_attention(Q, K, V, *, mask, causal, scale, fully_masked, return_weights, method, r):
    """Query head i attends over key/value head i // r: (..., h, n, d_k), (..., g, m, d_k), (..., g, m, d_v)."""
    Qg = Q.reshape(*Q.shape[:-3], Q.shape[-3] // r, r, *Q.shape[-2:])   # (..., g, r, n, d_k)  head i = (i // r, i % r)
    if mask is not None and np.ndim(mask) >= 3:
        mask = np.expand_dims(np.asarray(mask), (-3, -4))          # (..., 1, 1, n, m)    shared by every head
    result = scaled_dot_product_attention(                         # (..., g, r, n, d_v) [, (..., g, r, n, m)]
        Qg, K[..., None, :, :], V[..., None, :, :], mask=mask, causal=causal, scale=scale,
        fully_masked=fully_masked, return_weights=return_weights, method=method,
    )
    heads, A = result if return_weights else (result, None)
    heads = heads.reshape(*Q.shape[:-1], heads.shape[-1])          # (..., h, n, d_v)
    return heads, None if A is None else A.reshape(*Q.shape[:-1], A.shape[-1])   # (..., h, n, m)


def _check_params(params) -> MultiQueryParams | MultiHeadParams:
    if not isinstance(params, (MultiQueryParams, MultiHeadParams)):
        raise TypeError(f"params must be MultiQueryParams (see init_multi_query) or MultiHeadParams, got "
                        f"{type(params).__name__}")
    return params


def _check_inputs(d_model: int, **inputs: NDArray) -> None:
    for name, x in inputs.items():
        if x.shape[-1] != d_model:
            raise ValueError(f"{name} has d_model={x.shape[-1]} (shape {x.shape}) but params have d_model={d_model}")
    broadcast_batch({name: x.shape[:-2] for name, x in inputs.items()})


# --- decoding with a key/value cache ------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class KVCache:
    """The keys and values a decoder keeps for one attention layer: g heads, not h.

    Attributes
    ----------
    k : (..., g, t, d_k) ndarray
        Keys of the t positions decoded so far, per key/value head.
    v : (..., g, t, d_v) ndarray
        Their values.
    """

    k: NDArray
    v: NDArray

    @property
    def num_tokens(self) -> int:
        """t, the positions held."""
        return self.k.shape[-2]

    @property
    def nbytes(self) -> int:
        """Bytes held: ``k.nbytes + v.nbytes`` (:func:`kv_cache_bytes` of its heads, widths and dtype)."""
        return self.k.nbytes + self.v.nbytes


def multi_query_step(
    x_new: ArrayLike,
    params: MultiQueryParams | MultiHeadParams,
    cache: KVCache | None = None,
    *,
    num_heads: int,
    return_weights: bool = False,
) -> tuple[NDArray, KVCache] | tuple[NDArray, KVCache, NDArray]:
    r"""Advance causal self-attention by the new positions ``x_new``, reading and extending a key/value cache.

    Only the new positions are projected: their keys and values are appended to the cache's g heads, and
    their h query heads attend over every cached and new key with bottom-right causal alignment (the
    last new query sees every key). Running the whole sequence through :func:`multi_query_attention`
    with ``causal=True`` gives the same output at every position.

    Parameters
    ----------
    x_new : (..., t, d_model) array_like
        Inputs at the next t positions (usually t = 1).
    params : MultiQueryParams or MultiHeadParams
        Projections.
    cache : KVCache, optional
        Keys and values of the earlier positions; ``None`` before the first.
    num_heads : int
        h, the query heads.
    return_weights : bool, default False
        Also return the new positions' weights over every position so far.

    Returns
    -------
    out : (..., t, d_model) ndarray
    cache : KVCache
        Extended by the t new positions: (..., g, t₀ + t, d_k) keys and (..., g, t₀ + t, d_v) values.
    weights : (..., h, t, t₀ + t) ndarray
        Only if ``return_weights``.

    Examples
    --------
    >>> params = init_multi_query(0, d_model=8, num_heads=4, num_kv_heads=1)
    >>> x = np.random.default_rng(1).standard_normal((6, 8))
    >>> cache, rows = None, []
    >>> for t in range(6):
    ...     out, cache = multi_query_step(x[t:t + 1], params, cache, num_heads=4)
    ...     rows.append(out)
    >>> cache.k.shape                                             # one key/value head, 6 positions
    (1, 6, 2)
    >>> full = multi_query_attention(x, x, params, num_heads=4, causal=True)
    >>> bool(np.allclose(np.concatenate(rows), full, rtol=1e-12, atol=1e-12))
    True
    """
    params = _check_params(params)
    g, d_k, d_v = _head_counts(params, num_heads)
    x_new = as_float("x_new", x_new, min_ndim=2)
    _check_inputs(params.d_model, x_new=x_new)
    if cache is None:
        cache = KVCache(np.zeros((*x_new.shape[:-2], g, 0, d_k)), np.zeros((*x_new.shape[:-2], g, 0, d_v)))
    elif not isinstance(cache, KVCache):
        raise TypeError(f"cache must be a KVCache or None, got {type(cache).__name__}")
    elif cache.k.shape[:-3] != x_new.shape[:-2] or cache.k.shape[-3:] != (g, cache.num_tokens, d_k) or \
            cache.v.shape != (*cache.k.shape[:-1], d_v):
        batch = ", ".join(map(str, x_new.shape[:-2])) + ", " * bool(x_new.shape[:-2])
        raise ValueError(f"cache holds k {cache.k.shape} and v {cache.v.shape}, but x_new {x_new.shape} with these "
                         f"params needs keys ({batch}{g}, t, {d_k}) and values ({batch}{g}, t, {d_v})")
    K = np.concatenate([cache.k, project_heads(x_new, params.w_k, params.b_k, g)], axis=-2)   # (..., g, t₀+t, d_k)
    V = np.concatenate([cache.v, project_heads(x_new, params.w_v, params.b_v, g)], axis=-2)   # (..., g, t₀+t, d_v)
    Q = project_heads(x_new, params.w_q, params.b_q, num_heads)                               # (..., h, t, d_k)
    heads, A = _grouped_attention(Q, K, V, mask=None, causal="bottom-right", scale=None, fully_masked="zero",
                                  return_weights=return_weights, method="auto", r=num_heads // g)
    out = combine_heads(heads, params.w_o, params.b_o)                                        # (..., t, d_model)
    return (out, KVCache(K, V), A) if return_weights else (out, KVCache(K, V))


def kv_cache_bytes(
    num_kv_heads: int, d_head: int, dtype, *, num_tokens: int = 1, num_layers: int = 1, batch_size: int = 1,
    d_v: int | None = None,
) -> int:
    r"""Bytes of the key/value cache: keys and values of g heads, per token, layer and sequence.

    .. math::

        \text{bytes} = b \cdot L \cdot t \cdot g \cdot (d_k + d_v) \cdot \text{itemsize}
        \qquad (= 2\, g\, d_\text{head}\ \text{itemsize per token per layer when}\ d_v = d_k)

    The query heads h do not enter: multi-head attention (g = h) keeps h / g times more than
    grouped-query, and h times more than multi-query attention (g = 1).

    Parameters
    ----------
    num_kv_heads : int
        g, the key/value heads (h for multi-head attention).
    d_head : int
        d_k, the key width per head.
    dtype : numpy dtype or int
        The cache's number format (``"float16"``, ``np.float32`` ...), or its size in bytes (2 for
        bfloat16, which NumPy lacks).
    num_tokens : int, default 1
        t, the positions cached (the context length).
    num_layers : int, default 1
        L, the attention layers.
    batch_size : int, default 1
        b, the sequences decoded together.
    d_v : int, optional
        Value width per head; default ``d_head``.

    Returns
    -------
    int

    Examples
    --------
    >>> kv_cache_bytes(32, 128, "float16")                         # multi-head, h = 32: per token per layer
    16384
    >>> kv_cache_bytes(8, 128, 2, num_tokens=4096, num_layers=32) / 2**30   # GQA g = 8, 4096 tokens, 32 layers
    0.5
    """
    g = check_positive_int("num_kv_heads", num_kv_heads)
    d_k = check_positive_int("d_head", d_head)
    d_v = d_k if d_v is None else check_positive_int("d_v", d_v)
    t, L, b = (check_positive_int(name, x) for name, x in (("num_tokens", num_tokens), ("num_layers", num_layers),
                                                           ("batch_size", batch_size)))
    return b * L * t * g * (d_k + d_v) * _itemsize(dtype)


def _itemsize(dtype) -> int:
    """Bytes per number of ``dtype``: a NumPy dtype or a positive int."""
    if isinstance(dtype, (int, np.integer)) and not isinstance(dtype, bool):
        return check_positive_int("dtype", dtype)
    try:
        return np.dtype(dtype).itemsize
    except TypeError:
        raise TypeError(f"dtype must be a NumPy dtype or a size in bytes, got {dtype!r}") from None


def kv_cache_summary(
    num_heads: int, num_kv_heads: int, d_head: int, dtype, *, num_tokens: int, num_layers: int = 1,
    batch_size: int = 1,
) -> str:
    r"""The key/value cache of grouped-query attention in words, beside multi-head's and multi-query's.

    Parameters
    ----------
    num_heads : int
        h, the query heads.
    num_kv_heads : int
        g, the key/value heads, a divisor of h.
    d_head : int
        Width per head (keys and values alike).
    dtype : numpy dtype or int
        As in :func:`kv_cache_bytes`.
    num_tokens : int
        Positions cached.
    num_layers : int, default 1
        Attention layers.
    batch_size : int, default 1
        Sequences decoded together.

    Returns
    -------
    str
        One line per layout (multi-head g = h, this g, multi-query g = 1): bytes per token per
        layer and for the whole cache.

    Examples
    --------
    >>> print(kv_cache_summary(32, 8, 128, "float16", num_tokens=4096, num_layers=32))
    key/value cache, h = 32, d_head = 128, 2 bytes per number, 4096 tokens, 32 layers, batch 1:
      multi-head    g = 32: 16 KiB per token per layer,   2 GiB in all
      grouped-query g =  8:  4 KiB per token per layer, 512 MiB in all (4× less)
      multi-query   g =  1:  512 B per token per layer,  64 MiB in all (32× less)
    """
    h, g = check_positive_int("num_heads", num_heads), check_positive_int("num_kv_heads", num_kv_heads)
    if h % g:
        raise ValueError(f"num_kv_heads={g} does not divide num_heads={h}")
    itemsize = _itemsize(dtype)
    lines = [f"key/value cache, h = {h}, d_head = {d_head}, {itemsize} bytes per number, {num_tokens} tokens, "
             f"{num_layers} layer{'s' * (num_layers != 1)}, batch {batch_size}:"]
    layouts = [("multi-head", h)] + ([("grouped-query", g)] if 1 < g < h else []) + ([("multi-query", 1)] if h > 1
                                                                                      else [])
    width = len(str(h))
    for name, heads in layouts:
        per_token = kv_cache_bytes(heads, d_head, dtype)
        total = kv_cache_bytes(heads, d_head, dtype, num_tokens=num_tokens, num_layers=num_layers,
                               batch_size=batch_size)
        less = "" if heads == h else f" ({h // heads}× less)"
        lines.append(f"  {name:<13} g = {heads:>{width}}: {_size(per_token):>6} per token per layer, "
                     f"{_size(total):>7} in all{less}")
    return "\n".join(lines)


def _size(nbytes: int) -> str:
    """Bytes in the largest binary unit that leaves at least 1 (``4 KiB``, ``512 MiB``), 3 significant digits."""
    for unit, power in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 2**power:
            return f"{nbytes / 2**power:.3g} {unit}"
    return f"{nbytes} B"


# --- uptraining from a multi-head checkpoint --------------------------------------------------------

def convert_multi_head(
    params: MultiHeadParams, *, num_heads: int, num_kv_heads: int, pooling: str = "mean",
) -> MultiQueryParams:
    r"""A multi-head layer turned grouped-query: each group's key and value heads pooled into one.

    .. math::

        W_j^K = \frac{1}{r} \sum_{i = jr}^{jr + r - 1} W_i^K, \quad
        W_j^V = \frac{1}{r} \sum_{i = jr}^{jr + r - 1} W_i^V \quad (\text{and their biases}),
        \qquad j = 0 \dots g - 1,\ r = h / g

    Parameters
    ----------
    params : MultiHeadParams
        A multi-head layer of ``num_heads`` heads.
    num_heads : int
        h.
    num_kv_heads : int
        g, a divisor of h; query heads ``j·r … (j+1)·r − 1`` form group j.
    pooling : {"mean", "first"}, default "mean"
        "mean": the paper's conversion (mean-pooling); "first": the group's first head, one of the
        alternatives the paper compares it with (its Figure 4: mean pooling works best).

    Returns
    -------
    MultiQueryParams
        ``w_q``, ``w_o`` and their biases as given; with g = h, the layer unchanged.

    References
    ----------
    .. [1] J. Ainslie et al., arXiv:2305.13245v3, §2.1 (uptraining), §2.2 and Figure 4.

    Examples
    --------
    >>> from refattn import init_multi_head
    >>> mha = init_multi_head(0, d_model=8, num_heads=4)
    >>> gqa = convert_multi_head(mha, num_heads=4, num_kv_heads=2)
    >>> gqa.w_k.shape, bool(np.allclose(gqa.w_k[:, :2], (mha.w_k[:, 0:2] + mha.w_k[:, 2:4]) / 2))
    ((8, 4), True)
    """
    if not isinstance(params, MultiHeadParams):
        raise TypeError(f"params must be MultiHeadParams, got {type(params).__name__}")
    h, g = check_positive_int("num_heads", num_heads), check_positive_int("num_kv_heads", num_kv_heads)
    check_choice("pooling", pooling, POOLINGS)
    if h % g:
        raise ValueError(f"num_kv_heads={g} does not divide num_heads={h}")
    if params.w_k.shape[1] % h or params.w_v.shape[1] % h:
        raise ValueError(f"num_heads={h} does not divide the key width {params.w_k.shape[1]} and value width "
                         f"{params.w_v.shape[1]} of params (w_k {params.w_k.shape}, w_v {params.w_v.shape})")
    r = h // g

    def pooled(x: NDArray | None) -> NDArray | None:               # (..., h·d) → (..., g·d), head by head
        if x is None:
            return None
        heads = x.reshape(*x.shape[:-1], g, r, x.shape[-1] // h)   # (..., g, r, d): head i = (i // r, i % r)
        one = heads.mean(axis=-2) if pooling == "mean" else heads[..., 0, :]   # (..., g, d)
        return one.reshape(*x.shape[:-1], g * (x.shape[-1] // h))

    return MultiQueryParams(params.w_q, pooled(params.w_k), pooled(params.w_v), params.w_o,
                            params.b_q, pooled(params.b_k), pooled(params.b_v), params.b_o)


# --- the registry entry ------------------------------------------------------------------------------

RECORD = Mechanism.of(
    multi_query_attention, inputs=("x_q", "x_kv", "x_v"), defaults={"num_heads": 2},
    id="multi_query", title="Multi-query and grouped-query attention", family="heads",
    section="4.6", paper=f"{SHAZEER}; {AINSLIE}",
    equation=r"\operatorname{Concat}_i\big(\operatorname{Attention}(QW_i^Q, KW_{\lfloor i/r\rfloor}^K, "
    r"VW_{\lfloor i/r\rfloor}^V)\big) W^O,\ r = h/g",
    time="O(n·m·h·d_k + (n+m)·d·(h+g)·d_k)", memory="O(h·n·m); cache O(g·m·d_k)", kind="attention",
    examples=({"num_heads": 4, "num_kv_heads": 2}, {"num_heads": 4, "num_kv_heads": 4}),
    causal=True, figure="refattn.figures.multi_query:multi_query",
    exact_options={"num_heads": 1, "params": "identity"},
    exact_limit="one head, identity projections (g = h = 1); g = h is multi-head attention", draws=("params",),
    layer_inputs=True,
)
