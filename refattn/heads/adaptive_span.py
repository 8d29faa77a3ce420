r"""Adaptive attention span (Sukhbaatar, Grave, Bojanowski and Joulin, 2019; survey §4.6).

Each head i learns how far back it looks: a soft mask of its span z_i, with a ramp of width R,

    m_z(x) = min(max((R + z − x) / R, 0), 1)                                          (Eq. 1)

weighs the key at distance x = t − r from the query's position t, within the S positions the layer may
keep at most (S, the maximum span), and the weights are renormalised:

    a_tr = m_z(t − r) exp(s_tr) / Σ_q m_z(t − q) exp(s_tq)                               (Eq. 2)

The mask is 1 up to distance z, falls linearly to 0 over the next R positions and is 0 beyond z + R,
so z is learned by gradient descent like any weight. The official code (facebookresearch/adaptive-span,
``adaptive_span.py``) applies it as written: softmax over the window, then the mask multiplied in, then
the rows renormalised (with ``+ 1e-8`` in the denominator: the option ``eps`` here, default 0, the
equation). It stores z as a fraction z̃ = z / S of the maximum span, initialised to 0 (``--adapt-span-init``),
clamped to [0, 1] after every update; the ramp is R = 32 (``--adapt-span-ramp``).

The span loss (Eq. 3) adds (λ / M) Σ_i z_i to the training loss, M the number of heads: the official code
adds λ · S · mean_i z̃_i per layer (``get_loss``), which is the same, summed over the layers.

Cache trimming: m_z(x) = 0 for x ≥ z + R, so a key further back than ⌈max_i z_i + R⌉ − 1 positions gets
no weight from any head and can be dropped (``span_cache_length``); the official code drops it
(``trim_memory``, rounded down to multiples of 64, keeping 64 more positions in the cache in case the spans
grow). Decoding with only the last ``span_cache_length`` keys gives the same outputs (tested).

Positions: refattn's causal attention lets query t see key t (j ≤ i), so the window here is the S
positions t − S + 1 … t and the mask reads x = t − r from 0 (the query's own position: m = 1 whenever
z ≥ 0). The official layer (``models.py``, ``SeqAttention``) attends to the S *previous* positions
t − S … t − 1 ("attention doesn't include the current step itself") with the same mask counted from the
nearest of them (its template ``linspace(1 − S, 0, S)`` gives m = 1 at the nearest key when z = 0):
``include_current=False`` reproduces that layout, and its first query, with no previous position, gets a
zero row. The paper's Eq. 2 sums over t − S … t − 1 with m_z(t − r); read literally it would shift the ramp
by one position from the code's. The official scores also add a learned relative position term
(``key_pe``), which belongs to the model, not to the span: it is not here.
"""
from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.budget import check_fits
from ..common.checks import (
    as_float,
    broadcast_batch,
    causal_alignment,
    check_bool,
    check_scale,
    check_sizes,
    default_scale,
)
from ..common.ints import check_positive_int
from ..common.products import scores, weighted_values
from ..core.multi_head import (
    MultiHeadParams,
    combine_heads,
    drawn_width,
    init_multi_head,
    layer_inputs,
    project_heads,
    resolve_params,
)
from ..core.softmax import masked_softmax
from ..draws import given_or_drawn, note_allowed, optional_rng
from ..mechanism import Mechanism, PerShape

__all__ = ["adaptive_span_attention", "adaptive_span_grad_z", "adaptive_span_heads", "adaptive_span_mask",
           "span_cache_length", "span_loss"]

SUKHBAATAR = ('S. Sukhbaatar, E. Grave, P. Bojanowski, A. Joulin, 2019, "Adaptive Attention Span in Transformers", '
              'ACL 2019, arXiv:1905.07799')
OFFICIAL_RAMP = 32                                                 # --adapt-span-ramp default


def _check_span(z, max_span, ramp) -> tuple[NDArray, int, float]:
    """z as a float vector of spans >= 0 (one per head), S a positive int, R a positive finite number."""
    max_span = check_positive_int("max_span", max_span)
    ramp = check_scale(ramp, "ramp")                                # a finite real number, as a float
    if ramp <= 0:
        raise ValueError(f"ramp must be a finite number > 0 (R, the width of the mask's ramp), got {ramp!r}")
    z = np.asarray(z)
    z = as_float("z", z.astype(np.float64) if z.dtype.kind in "iu" else z)   # spans in positions: ints welcome
    if z.ndim > 1:
        raise ValueError(f"z must be one span per head, a scalar or a 1-D array, got shape {z.shape}")
    if not np.all(np.isfinite(z)) or np.any(z < 0):
        raise ValueError(f"z must hold finite spans >= 0 (the official code clamps z to [0, S]), got {z}")
    return np.atleast_1d(z), max_span, float(ramp)


def _distances(n: int, m: int, causal, include_current: bool) -> tuple[NDArray, NDArray]:
    """x = t − r (− 1 without the current position) for query i at position t and key r, and the causal pairs x >= 0."""
    alignment = causal_alignment(causal)
    if alignment is None:
        raise ValueError("adaptive span is causal (a span reaches into the past, as in the paper's language "
                         "models): pass causal=True or 'bottom-right', got causal=False")
    t = np.arange(n)[:, None] + (m - n if alignment == "bottom-right" else 0)   # (n, 1)  query positions
    x = t - np.arange(m)[None, :] - (0 if include_current else 1)              # (n, m)
    return x, x >= 0


def adaptive_span_mask(
    z: ArrayLike, n: int, m: int | None = None, *, max_span: int, ramp: float = OFFICIAL_RAMP, causal=True,
    include_current: bool = True,
) -> NDArray:
    r"""Each head's soft span mask :math:`m_{z_i}(t - r)` over the (query, key) pairs, 0 outside the window.

    .. math::

        m_z(x) = \min\Big(\max\Big(\frac{R + z - x}{R}, 0\Big), 1\Big), \qquad 0 \le x = t - r < S

    Parameters
    ----------
    z : (h,) array_like of float
        Spans :math:`z_i \ge 0`, one per head (a scalar for one head).
    n : int
        Number of queries.
    m : int, optional
        Number of keys; default ``n``.
    max_span : int
        The maximum span *S*: a query sees at most its S most recent positions.
    ramp : float, default 32
        The ramp's width *R* (the official default).
    causal : {True, "top-left", "bottom-right"}, default True
        Positions of the queries: query *i* at position *i* (top-left) or at *i* + m − n (bottom-right:
        the n queries are the last n of m positions).
    include_current : bool, default True
        The window holds the query's own position (x = t − r from 0); ``False``: the official layout, the
        S previous positions, with x = t − r − 1.

    Returns
    -------
    mask : (h, n, m) ndarray of float in [0, 1]

    References
    ----------
    .. [1] S. Sukhbaatar et al., "Adaptive Attention Span in Transformers", ACL 2019, arXiv:1905.07799v2, Eq. 1-2.

    Examples
    --------
    >>> adaptive_span_mask([1.0], 4, max_span=4, ramp=2)[0]
    array([[1. , 0. , 0. , 0. ],
           [1. , 1. , 0. , 0. ],
           [0.5, 1. , 1. , 0. ],
           [0. , 0.5, 1. , 1. ]])
    """
    z, max_span, ramp = _check_span(z, max_span, ramp)
    n, m = check_sizes(n, m)
    x, causal_pairs = _distances(n, m, causal, check_bool("include_current", include_current))
    return _soft_mask(z, x, causal_pairs & (x < max_span), ramp)


def _soft_mask(z: NDArray, x: NDArray, window: NDArray, ramp: float) -> NDArray:
    """m_z(x) of every head on the window, 0 elsewhere: (h, n, m)."""
    ramped = np.clip((ramp + z[:, None, None] - x) / ramp, 0.0, 1.0)   # (h, n, m)  m_z(x)
    return np.where(window, ramped, 0.0)


def _span_weights(S: NDArray, z: NDArray, max_span: int, ramp: float, causal, include_current: bool, eps: float):
    """(A, M, p, allowed, empty, x): Eq. 2 from the scores S (..., h, n, m), as the official code computes it."""
    n, m = S.shape[-2:]
    x, causal_pairs = _distances(n, m, causal, include_current)
    window = causal_pairs & (x < max_span)                         # (n, m)  the S positions a query may keep
    M = _soft_mask(z, x, window, ramp)                             # (h, n, m)  m_z(t − r)
    # With eps = 0 the softmax over the mask's support equals the one over the window once renormalised (the
    # common factor cancels), and keeps a NaN key the mask hides out of the row; eps > 0 needs the window's.
    allowed = np.broadcast_to(window if eps else M > 0, S.shape)
    p, empty = masked_softmax(S, allowed, "zero")                  # (..., h, n, m)  softmax over the window
    weighted = M * p                                               # (..., h, n, m)  m_z(t − r) · p_tr
    total = weighted.sum(axis=-1, keepdims=True) + eps             # (..., h, n, 1)  Σ_q m_z(t − q) p_tq (+ ε)
    A = np.divide(weighted, total, out=np.zeros_like(weighted), where=total > 0)   # renormalised (Eq. 2)
    return A, M, p, allowed, empty, x


def adaptive_span_heads(
    q: ArrayLike, k: ArrayLike, v: ArrayLike, z: ArrayLike, *, max_span: int, ramp: float = OFFICIAL_RAMP,
    causal=True, scale: float | None = None, include_current: bool = True, eps: float = 0.0,
    return_weights: bool = False,
) -> NDArray | tuple[NDArray, NDArray]:
    r"""Adaptive-span attention of h heads already projected: softmax, the span mask, renormalisation.

    .. math::

        a_{tr} = \frac{m_{z_i}(t - r)\, e^{s_{tr}}}{\sum_q m_{z_i}(t - q)\, e^{s_{tq}}}, \qquad
        s_{tr} = \frac{q_t \cdot k_r}{\sqrt{d_k}}, \qquad y_t = \sum_r a_{tr} v_r

    Parameters
    ----------
    q : (..., h, n, d_k) array_like
        Queries of every head.
    k : (..., h, m, d_k) array_like
        Keys.
    v : (..., h, m, d_v) array_like
        Values.
    z : (h,) array_like of float
        Span of each head, :math:`z_i \ge 0`.
    max_span : int
        *S*, the most positions a query may look back over (its own included).
    ramp : float, default 32
        *R*.
    causal : {True, "top-left", "bottom-right"}, default True
        Query positions, as in :func:`adaptive_span_mask`.
    scale : float, optional
        Multiplier of :math:`q_t \cdot k_r`; default :math:`1/\sqrt{d_k}`.
    include_current : bool, default True
        As in :func:`adaptive_span_mask`.
    eps : float, default 0.0
        Added to the renormalising sum; the official code uses 1e-8 (then rows sum to slightly less than 1).
    return_weights : bool, default False
        Also return the weights.

    Returns
    -------
    out : (..., h, n, d_v) ndarray
    weights : (..., h, n, m) ndarray
        Only if ``return_weights``. A query with no key in its window gets a zero row.

    References
    ----------
    .. [1] S. Sukhbaatar et al., "Adaptive Attention Span in Transformers", ACL 2019, arXiv:1905.07799v2, Eq. 2.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 2, 5, 4))
    >>> out, A = adaptive_span_heads(q, k, v, [0.5, 2.5], max_span=5, ramp=1, return_weights=True)
    >>> out.shape, bool(np.allclose(A.sum(axis=-1), 1.0))
    ((2, 5, 4), True)
    >>> bool(np.all(A[0][np.tril(np.ones((5, 5)), -2) > 0] == 0))     # head 0: z + R = 1.5, two keys at most
    True
    """
    q, k, v, z, max_span, ramp, scale, eps = _check_heads(q, k, v, z, max_span, ramp, scale, eps)
    check_bool("include_current", include_current)
    check_bool("return_weights", return_weights)
    S = scores(q, k, scale)                                        # (..., h, n, m)
    A, _, _, allowed, empty, _ = _span_weights(S, z, max_span, ramp, causal, include_current, eps)
    out = weighted_values(A, v, allowed, empty, "zero")            # (..., h, n, d_v)  Σ_r a_tr v_r
    if not return_weights:
        return out
    note_allowed(allowed)
    return out, A


def _check_heads(q, k, v, z, max_span, ramp, scale, eps):
    """Shapes of projected heads (..., h, T, d) with one span per head; the scale; eps >= 0."""
    q, k, v = as_float("q", q, min_ndim=3), as_float("k", k, min_ndim=3), as_float("v", v, min_ndim=3)
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q has d_k={q.shape[-1]} but k has d_k={k.shape[-1]} (shapes {q.shape}, {k.shape})")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k has m={k.shape[-2]} keys but v has {v.shape[-2]} (shapes {k.shape}, {v.shape})")
    broadcast_batch({"q": q.shape[:-2], "k": k.shape[:-2], "v": v.shape[:-2]})
    z, max_span, ramp = _check_span(z, max_span, ramp)
    if z.shape[0] not in (1, q.shape[-3]):
        raise ValueError(f"z has {z.shape[0]} spans but q has h={q.shape[-3]} heads (shape {q.shape})")
    scale = default_scale(q.shape[-1]) if scale is None else check_scale(scale)
    eps = _check_eps(eps)
    check_fits("the scores of every head", (*np.broadcast_shapes(q.shape[:-2], k.shape[:-2]), q.shape[-2],
                                             k.shape[-2]))
    return q, k, v, z, max_span, ramp, scale, eps


def _check_eps(eps) -> float:
    """eps as a finite float >= 0."""
    if isinstance(eps, bool) or not isinstance(eps, (int, float, np.integer, np.floating)):
        raise TypeError(f"eps must be a real number, got {type(eps).__name__}")
    if not (np.isfinite(eps) and eps >= 0):
        raise ValueError(f"eps must be a finite number >= 0, got {eps!r}")
    return float(eps)


def adaptive_span_grad_z(
    q: ArrayLike, k: ArrayLike, v: ArrayLike, z: ArrayLike, d_out: ArrayLike, *, max_span: int,
    ramp: float = OFFICIAL_RAMP, causal=True, scale: float | None = None, include_current: bool = True,
    eps: float = 0.0,
) -> NDArray:
    r"""The gradient of a loss with respect to each head's span z_i, given the loss's gradient d_out at the output.

    With :math:`p_{tr}` the softmax over the window, :math:`T_t = \sum_q m_{tq} p_{tq} + \varepsilon` and
    :math:`m'_{tr} = \partial m_z(t - r)/\partial z = 1/R` on the ramp (z < t − r < z + R), else 0:

    .. math::

        \frac{\partial a_{tr}}{\partial z} = c_{tr} - a_{tr} \sum_q c_{tq}, \quad
        c_{tr} = \frac{m'_{tr} p_{tr}}{T_t}, \qquad
        \frac{\partial L}{\partial z_i} = \sum_t \Big(\sum_r c_{tr} g_{tr}
        - \sum_r a_{tr} g_{tr} \sum_r c_{tr}\Big), \quad g_{tr} = \frac{\partial L}{\partial y_t} \cdot v_r

    summed over the batch.

    Parameters
    ----------
    q, k, v, z
        As in :func:`adaptive_span_heads`.
    d_out : (..., h, n, d_v) array_like
        :math:`\partial L / \partial y`, the gradient at the output of :func:`adaptive_span_heads`.
    max_span, ramp, causal, scale, include_current, eps
        As in :func:`adaptive_span_heads`.

    Returns
    -------
    d_z : (h,) ndarray
        :math:`\partial L / \partial z_i` (one entry when ``z`` is one span shared by the heads: the sum).

    Notes
    -----
    m_z is piecewise linear in z, with kinks where z − x or z + R − x is 0 (integer z with an integer
    ramp): there it has no derivative, and this returns the one with those keys off the ramp (PyTorch's
    ``clamp``, whose gradient passes at the bounds, counts them on it). Elsewhere the gradient is exact;
    the tests hold it to central differences.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 2, 6, 4))
    >>> adaptive_span_grad_z(q, k, v, [0.5, 2.5], np.ones((2, 6, 4)), max_span=6, ramp=2).shape
    (2,)
    """
    q, k, v, z, max_span, ramp, scale, eps = _check_heads(q, k, v, z, max_span, ramp, scale, eps)
    check_bool("include_current", include_current)
    d_out = as_float("d_out", d_out)
    expected = np.broadcast_shapes(q.shape[:-1], k.shape[:-2] + (q.shape[-2],)) + (v.shape[-1],)
    if d_out.shape != expected:
        raise ValueError(f"d_out has shape {d_out.shape}; expected the output's shape {expected}")
    S = scores(q, k, scale)
    A, M, p, _, _, x = _span_weights(S, z, max_span, ramp, causal, include_current, eps)
    on_ramp = (M > 0) & (x > z[:, None, None]) & (x < z[:, None, None] + ramp)   # (h, n, m)  z < x < z + R
    total = (M * p).sum(axis=-1, keepdims=True) + eps             # (..., h, n, 1)  T_t
    c = np.divide(np.where(on_ramp, p / ramp, 0.0), total, out=np.zeros_like(p), where=total > 0)   # c_tr
    g = d_out @ np.swapaxes(v, -1, -2)                             # (..., h, n, m)  g_tr = dy_t · v_r
    per_row = (c * g).sum(axis=-1) - (A * g).sum(axis=-1) * c.sum(axis=-1)   # (..., h, n)
    per_head = per_row.sum(axis=-1).reshape(-1, per_row.shape[-2]).sum(axis=0)   # (h,)  over the batch and t
    return per_head if z.shape[0] == per_head.shape[0] else per_head.sum(keepdims=True)


def span_loss(z: ArrayLike, coefficient: float, *, return_grad: bool = False) -> float | tuple[float, NDArray]:
    r"""The span loss :math:`(\lambda / M) \sum_i z_i` of one layer's M heads, and its gradient :math:`\lambda / M`.

    Parameters
    ----------
    z : (M,) array_like of float
        The heads' spans.
    coefficient : float
        λ (5e-7 in the official enwik8 run, 2e-6 in its small one).
    return_grad : bool, default False
        Also return :math:`\partial / \partial z_i`, λ / M for every head.

    Returns
    -------
    loss : float
    grad : (M,) ndarray
        Only if ``return_grad``.

    Notes
    -----
    The official ``get_loss`` is ``λ · S · mean(z̃)`` with z̃ = z / S: the same number, added once per layer.

    Examples
    --------
    >>> span_loss([1.0, 3.0], 0.5)
    1.0
    """
    z = np.atleast_1d(as_float("z", z))
    if z.ndim != 1:
        raise ValueError(f"z must be one span per head (1-D), got shape {z.shape}")
    coefficient = check_scale(coefficient, "coefficient")
    loss = coefficient / z.size * float(z.sum())                  # (λ/M) Σ_i z_i
    return (loss, np.full(z.size, coefficient / z.size)) if check_bool("return_grad", return_grad) else loss


def span_cache_length(z: ArrayLike, *, max_span: int, ramp: float = OFFICIAL_RAMP) -> int:
    r"""How many of the most recent positions any head can still weigh: :math:`\min(S, \lceil \max_i z_i + R\rceil)`.

    m_z(x) = 0 for x ≥ z + R, so keys further back get no weight from any head and a key/value cache may drop
    them: decoding with the last ``span_cache_length`` positions (the query's own included) gives the same
    outputs. The official ``get_cache_size`` keeps up to 64 positions more, in multiples of 64.

    Parameters
    ----------
    z : (h,) array_like of float
        The heads' spans.
    max_span : int
        *S*.
    ramp : float, default 32
        *R*.

    Returns
    -------
    int

    Examples
    --------
    >>> span_cache_length([0.0, 3.5], max_span=100, ramp=2)
    6
    """
    z, max_span, ramp = _check_span(z, max_span, ramp)
    return int(min(max_span, math.ceil(float(z.max()) + ramp)))


def adaptive_span_attention(
    x_q: ArrayLike, x_kv: ArrayLike, params: MultiHeadParams | str | None = None, *, num_heads: int,
    z: ArrayLike | None = None, max_span: int, ramp: float = OFFICIAL_RAMP, causal=True, x_v: ArrayLike | None = None,
    scale: float | None = None, include_current: bool = True, eps: float = 0.0, rng=None,
    return_weights: bool = False,
) -> NDArray | tuple[NDArray, NDArray]:
    r"""Multi-head attention whose head i sees its past through the soft span mask of z_i.

    .. math::

        \operatorname{Concat}(\mathrm{head}_1, \dots, \mathrm{head}_h) W^O, \quad
        \mathrm{head}_i = \operatorname{SpanAttention}_{z_i}(Q W_i^Q, K W_i^K, V W_i^V)

    with :func:`adaptive_span_heads` for SpanAttention.

    Parameters
    ----------
    x_q : (..., n, d_model) array_like
        Query-side input.
    x_kv : (..., m, d_model) array_like
        Key-side input (and value-side unless ``x_v``).
    params : MultiHeadParams, "identity" or None
        Projections, as in :func:`~refattn.multi_head_attention`. ``None``: drawn from ``rng``
        (:func:`~refattn.init_multi_head`, d_model = the width of ``x_q``). ``"identity"``: one head whose
        projections are the identity.
    num_heads : int
        *h*.
    z : (h,) array_like of float, optional
        Spans :math:`z_i \ge 0`. Default :math:`z_i = 0.5 + 2i` (head 0 looks one step back, each next head two
        more), a demonstration: a trained model learns them.
    max_span : int
        *S*.
    ramp : float, default 32
        *R*.
    causal : {True, "top-left", "bottom-right"}, default True
        Query positions, as in :func:`adaptive_span_mask`.
    x_v : (..., m, d_model) array_like, optional
        Value-side input.
    scale : float, optional
        Default :math:`1/\sqrt{d_k}` with the per-head width.
    include_current, eps
        As in :func:`adaptive_span_heads`.
    rng : numpy.random.Generator or int, optional
        Draws ``params`` when it is omitted.
    return_weights : bool, default False
        As in :func:`adaptive_span_heads`.

    Returns
    -------
    out : (..., n, d_model) ndarray
    weights : (..., h, n, m) ndarray
        Only if ``return_weights``.

    References
    ----------
    .. [1] S. Sukhbaatar et al., "Adaptive Attention Span in Transformers", ACL 2019, arXiv:1905.07799v2, §3.

    Examples
    --------
    >>> from refattn import init_multi_head, multi_head_attention
    >>> rng = np.random.default_rng(0)
    >>> params = init_multi_head(rng, d_model=8, num_heads=2)
    >>> x = rng.standard_normal((6, 8))
    >>> out = adaptive_span_attention(x, x, params, num_heads=2, z=[6, 6], max_span=6)     # z >= S >= n
    >>> bool(np.allclose(out, multi_head_attention(x, x, params, num_heads=2, causal=True), atol=1e-12))
    True
    """
    check_positive_int("num_heads", num_heads)
    x_q = as_float("x_q", x_q, min_ndim=2)                         # its width sizes drawn parameters
    params = given_or_drawn("adaptive_span", "params", params, optional_rng(rng),
                            lambda r: init_multi_head(r, drawn_width(x_q), num_heads), what="its parameters")
    params = resolve_params(params, x_q, num_heads, None)   # "identity": one head, identity projections
    z = default_spans(num_heads) if z is None else z
    x_q, x_kv, x_v = layer_inputs(x_q, x_kv, x_v, params.d_model)
    Q = project_heads(x_q, params.w_q, params.b_q, num_heads)      # (..., h, n, d_k)  Q W_iᵠ
    K = project_heads(x_kv, params.w_k, params.b_k, num_heads)     # (..., h, m, d_k)  K W_iᴷ
    V = project_heads(x_v, params.w_v, params.b_v, num_heads)      # (..., h, m, d_v)  V W_iⱽ
    heads, A = adaptive_span_heads(Q, K, V, z, max_span=max_span, ramp=ramp, causal=causal, scale=scale,
                                   include_current=include_current, eps=eps, return_weights=True)
    out = combine_heads(heads, params.w_o, params.b_o)             # (..., n, d_model)  Concat(·) Wᴼ
    return (out, A) if return_weights else out


def default_spans(num_heads: int) -> NDArray:
    """The demonstration spans z_i = 0.5 + 2i (head 0 looks one step back, each next head two more)."""
    return 0.5 + 2.0 * np.arange(num_heads)


RECORD = Mechanism.of(
    adaptive_span_attention, inputs=("x_q", "x_kv", "x_v"),
    defaults={"num_heads": 2, "max_span": PerShape(lambda n, m: max(n, m, 1)), "ramp": 2},
    id="adaptive_span", title="Adaptive attention span", family="heads", section="4.6", paper=SUKHBAATAR,
    equation=r"a_{tr} = \frac{m_z(t-r)\, e^{s_{tr}}}{\sum_q m_z(t-q)\, e^{s_{tq}}},\ "
    r"m_z(x) = \min\!\big(\max\!\big(\tfrac{R + z - x}{R}, 0\big), 1\big)",
    time="O(n·m·d + (n+m)·d²)", memory="O(h·n·m)", kind="attention", noncausal=False, causal=True,
    position_dependent=True,
    examples=({"include_current": False}, {"eps": 1e-8}, {"num_heads": 4, "ramp": 1.5, "max_span": 4}),
    figure="refattn.figures.adaptive_span:adaptive_span",
    exact_options=lambda n, m: {"num_heads": 1, "params": "identity", "max_span": max(n, m, 1),
                                "z": [float(max(n, m, 1))]},
    exact_limit="one head, identity projections, z >= S >= max(n, m): causal softmax attention",
    draws=("params",),
    layer_inputs=True,
)
