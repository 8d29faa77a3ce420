r"""Transformer-XL's relative attention and segment-level memory (Dai et al., 2019, arXiv:1901.02860v3, §3.2-3.3;
survey §5.1.2).

    A^rel_ij = q_iᵀ k_j  +  q_iᵀ W_k,R R_{i−j}  +  uᵀ k_j  +  vᵀ W_k,R R_{i−j}        §3.3
                 (a)            (b)               (c)          (d)
    α_ij = softmax_j(A^rel_ij / √d),   out_i = Σ_j α_ij v_j,   causal: j ≤ i + mlen

(a) content against content, (b) content against the relative position, (c) a global content bias u,
(d) a global position bias v (the official code's ``r_w_bias`` and ``r_r_bias``). R_{i−j} is the
sinusoid of the distance i − j (the official code's ``PositionalEmbedding``: the concatenation
[sin(p·f), cos(p·f)], f_c = 10000^(−2c/d_r)), projected by W_k,R (``r_net``, no bias); its positions
run from klen − 1 down to 0 (``pos_seq = arange(klen − 1, −1, −1)``), clamped to ``clamp_len`` when
given (every distance beyond it shares the encoding of clamp_len). The official code computes
(a) + (c) as (q + u)ᵀk and (b) + (d) as (q + v)ᵀ(W_k,R R), the latter over every position of R and
then aligned by its relative-shift trick (:func:`rel_shift`), which this module follows as
``method="shift"``; ``method="direct"`` indexes R by i − j instead. Both give the same scores on
every pair a query may see.

Segment-level memory (§3.2): the hidden states of the previous segment are cached and, with no
gradient (SG), concatenated before the current segment's states: h̃ = [SG(m); h]. Queries come from
h alone, keys and values from h̃, so the n queries are the last n of m = mlen + n positions: query i
sits at position i + mlen (``causal="bottom-right"``; ``causal=True`` puts it at i, no memory),
key j at j, distance i + mlen − j. The official code masks j > i + mlen (causal by selection).
:func:`transformer_xl_segments` is the decoding loop over segments that carries the memory (the
last ``mem_len`` states, as the official ``_update_mems``); with an empty memory a segment is plain
relative attention (the (a)-(d) form alone). Transformer-XL is a language model: it has no
non-causal form here (R holds the distances klen − 1 … 0 only).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.budget import check_fits
from ..common.checks import as_float, as_rng, check_choice, check_qkv, check_scale, default_scale
from ..common.ints import check_non_negative_int, check_positive_int
from ..common.products import weighted_values
from ..core.softmax import softmax
from ..draws import given_or_drawn, optional_rng
from ..mechanism import Mechanism

__all__ = [
    "TransformerXLLayer",
    "TransformerXLParams",
    "init_transformer_xl",
    "init_transformer_xl_layer",
    "rel_shift",
    "relative_sinusoids",
    "transformer_xl_attention",
    "transformer_xl_segments",
    "transformer_xl_step",
    "transformer_xl_terms",
]

DAI = ('Z. Dai, Z. Yang, Y. Yang, J. Carbonell, Q. V. Le, R. Salakhutdinov, 2019, "Transformer-XL: Attentive '
       'Language Models Beyond a Fixed-Length Context", ACL 2019, arXiv:1901.02860')
#: N(0, init_std) for every weight and for u, v: the official code's ``--init normal --init_std 0.02``
#: (pytorch/train.py, ``weights_init``).
INIT_STD = 0.02
METHODS = ("direct", "shift")


@dataclass(frozen=True)
class TransformerXLParams:
    """The position parameters of one Transformer-XL attention (per head where they have a head axis).

    Attributes
    ----------
    u : (..., d) ndarray
        The global content bias (``r_w_bias``), term (c).
    v : (..., d) ndarray
        The global position bias (``r_r_bias``), term (d).
    W_r : (..., d_r, d) ndarray
        W_k,R, the projection of the sinusoids R (width d_r) to key width d (``r_net``).

    Leading axes (heads) broadcast against the queries' leading axes.
    """

    u: NDArray
    v: NDArray
    W_r: NDArray

    def __post_init__(self) -> None:
        u, v = as_float("u", self.u, min_ndim=1), as_float("v", self.v, min_ndim=1)
        W_r = as_float("W_r", self.W_r, min_ndim=2)
        if u.shape[-1] != W_r.shape[-1] or v.shape[-1] != W_r.shape[-1]:
            raise ValueError(f"u, v must be (..., d) and W_r (..., d_r, d) with the same d, got u {u.shape}, "
                             f"v {v.shape}, W_r {W_r.shape}")
        if W_r.shape[-2] % 2:
            raise ValueError(f"W_r must have an even d_r (R is [sin, cos] of d_r/2 frequencies), got {W_r.shape}")
        for name, x in (("u", u), ("v", v), ("W_r", W_r)):
            object.__setattr__(self, name, x)


def init_transformer_xl(rng, d: int, *, d_r: int | None = None, num_heads: int | None = None,
                        init_std: float = INIT_STD) -> TransformerXLParams:
    """Draw u, v and W_k,R from N(0, init_std²), the official code's initialisation.

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw.
    d : int
        The key width (d_head).
    d_r : int, optional
        Width of the sinusoids R (d_model in the paper); default the even number d or d + 1.
    num_heads : int, optional
        Give u, v and W_r a leading head axis of this length (one set per head, as the official code).
    init_std : float, default 0.02

    Returns
    -------
    TransformerXLParams
    """
    rng = as_rng(rng)
    d = check_non_negative_int("d", d)
    d_r = d + d % 2 if d_r is None else check_non_negative_int("d_r", d_r)
    heads = () if num_heads is None else (check_positive_int("num_heads", num_heads),)
    return TransformerXLParams(rng.normal(0.0, init_std, (*heads, d)), rng.normal(0.0, init_std, (*heads, d)),
                               rng.normal(0.0, init_std, (*heads, d_r, d)))


def relative_sinusoids(positions: ArrayLike, d_r: int, *, clamp_len: int | None = None) -> NDArray:
    """R at the given relative positions: [sin(p·f), cos(p·f)], f_c = 10000^(−2c/d_r), c < d_r/2.

    Parameters
    ----------
    positions : (L,) array_like
        Relative distances p (the official code passes klen − 1, …, 0).
    d_r : int
        Even width.
    clamp_len : int, optional
        p is clamped to at most clamp_len (``pos_seq.clamp_(max=clamp_len)``); None: no clamp.

    Returns
    -------
    (L, d_r) ndarray
    """
    d_r = check_non_negative_int("d_r", d_r)
    if d_r % 2:
        raise ValueError(f"d_r must be even (R is [sin, cos] of d_r/2 frequencies), got d_r={d_r}")
    p = np.asarray(positions, dtype=np.float64)
    if clamp_len is not None:
        p = np.minimum(p, check_positive_int("clamp_len", clamp_len))
    inv_freq = 1.0 / 10000.0 ** (np.arange(0.0, d_r, 2.0) / d_r)   # (d_r/2,)
    angle = p[:, None] * inv_freq                                  # (L, d_r/2)
    return np.concatenate([np.sin(angle), np.cos(angle)], axis=-1)  # (L, d_r)


def rel_shift(x: ArrayLike) -> NDArray:
    """The official relative-shift trick on the last two axes: pad a zero column, reshape, drop the first row.

    For x (..., qlen, klen) whose column c holds position klen − 1 − c, entry (i, j) of the result
    holds the column of distance klen − qlen + i − j, wherever j ≤ i + klen − qlen (the pairs a causal
    query sees); the other entries are left-overs of neighbouring rows (zeros or shifted values)
    that the causal mask removes.

    Parameters
    ----------
    x : (..., qlen, klen) array_like

    Returns
    -------
    (..., qlen, klen) ndarray
    """
    x = np.asarray(x)
    *lead, qlen, klen = x.shape
    padded = np.concatenate([np.zeros((*lead, qlen, 1), dtype=x.dtype), x], axis=-1)   # (..., qlen, klen+1)
    padded = padded.reshape(*lead, klen + 1, qlen)                 # the same memory read as (klen+1, qlen)
    return padded[..., 1:, :].reshape(*lead, qlen, klen)           # drop the first row, read back as (qlen, klen)


def _offset(causal, n: int, m: int) -> int:
    """mlen, the position of query 0: m − n for the last n of m positions, 0 for top-left."""
    check_choice("causal", causal, (True, "top-left", "bottom-right"))
    return m - n if causal == "bottom-right" else 0


def transformer_xl_terms(
    q: ArrayLike, k: ArrayLike, params: TransformerXLParams, *, causal: bool | str = "bottom-right",
    clamp_len: int | None = None, method: str = "direct",
) -> tuple[NDArray, NDArray, NDArray, NDArray]:
    r"""The four unscaled score terms (a)-(d) of Transformer-XL, each (..., n, m).

    .. math::

        (a)\; q_i^\top k_j, \quad (b)\; q_i^\top W_{k,R} R_{i-j}, \quad (c)\; u^\top k_j, \quad
        (d)\; v^\top W_{k,R} R_{i-j}

    Parameters
    ----------
    q : (..., n, d) array_like
    k : (..., m, d) array_like
    params : TransformerXLParams
    causal : {True, "top-left", "bottom-right"}, default "bottom-right"
        Where query i sits: i + m − n (the keys hold a memory of m − n positions) or i.
    clamp_len : int, optional
        Clamp of R's positions.
    method : {"direct", "shift"}, default "direct"
        Index R by i − j, or project R over positions klen − 1 … 0 and align with :func:`rel_shift`
        (the official code; klen = n + mlen).

    Returns
    -------
    a, b, c, d : (..., n, m) ndarray
        Equal for both methods on every pair j ≤ i + mlen; (b) and (d) hold left-overs elsewhere
        with ``method="shift"``.
    """
    q, k = as_float("q", q, min_ndim=2), as_float("k", k, min_ndim=2)
    check_choice("method", method, METHODS)
    n, m, d = q.shape[-2], k.shape[-2], q.shape[-1]
    if params.u.shape[-1] != d or k.shape[-1] != d:
        raise ValueError(f"q has d={d}, k has d={k.shape[-1]}, params have d={params.u.shape[-1]}")
    offset = _offset(causal, n, m)
    u, v_bias, W_r = params.u[..., None, :], params.v[..., None, :], params.W_r   # (..., 1, d), (..., d_r, d)
    a = q @ np.swapaxes(k, -1, -2)                                 # (..., n, m)  (a) q_iᵀk_j
    c = np.broadcast_to(u @ np.swapaxes(k, -1, -2), a.shape)       # (..., n, m)  (c) uᵀk_j
    if method == "direct":
        lo = offset - (m - 1)                                      # the smallest distance i + mlen − j
        r = relative_sinusoids(np.arange(lo, n + offset), W_r.shape[-2], clamp_len=clamp_len) @ W_r  # (..., L, d)
        dist = np.arange(n)[:, None] + offset - np.arange(m)[None, :] - lo   # (n, m)  i + mlen − j, from 0
        qr = q @ np.swapaxes(r, -1, -2)                            # (..., n, L)  q_iᵀ W R_p
        b = np.take_along_axis(qr, np.broadcast_to(dist, (*qr.shape[:-2], n, m)), axis=-1)  # (b)
        vr = v_bias @ np.swapaxes(r, -1, -2)                       # (..., 1, L)  vᵀ W R_p
        d_term = np.take_along_axis(vr, np.broadcast_to(dist, (*vr.shape[:-2], n, m)), axis=-1)  # (d)
    else:
        klen = n + offset
        r = relative_sinusoids(np.arange(klen - 1, -1, -1), W_r.shape[-2], clamp_len=clamp_len) @ W_r  # (..., klen, d)
        B_raw = q @ np.swapaxes(r, -1, -2)                         # (..., n, klen)  column c: position klen−1−c
        D_raw = np.broadcast_to(v_bias @ np.swapaxes(r, -1, -2), (*np.broadcast_shapes(
            v_bias.shape[:-2], r.shape[:-2]), n, klen))            # (..., n, klen)
        b, d_term = (_fit_columns(rel_shift(x), m) for x in (B_raw, D_raw))
    shape = np.broadcast_shapes(a.shape, b.shape, d_term.shape)
    return tuple(np.broadcast_to(x, shape) for x in (a, b, c, d_term))


def _fit_columns(x: NDArray, m: int) -> NDArray:
    """The shifted (..., n, klen) scores on m key columns: keys at j ≥ klen are never seen (zeros)."""
    klen = x.shape[-1]
    if klen >= m:
        return x[..., :m]
    return np.concatenate([x, np.zeros((*x.shape[:-1], m - klen))], axis=-1)


def transformer_xl_attention(
    q: ArrayLike, k: ArrayLike, v: ArrayLike, params: TransformerXLParams | str | None = None, *,
    rng: np.random.Generator | int | None = None, causal: bool | str = "bottom-right", clamp_len: int | None = None,
    method: str = "direct",
    scale: float | None = None, return_weights: bool = False,
) -> NDArray | tuple[NDArray, NDArray]:
    r"""Transformer-XL attention of n queries over m = mlen + n keys and values (memory first).

    .. math::

        \alpha_{ij} = \operatorname{softmax}_{j \le i + m_{len}}\Big(\frac{(q_i + u)^\top k_j
        + (q_i + v)^\top W_{k,R} R_{i + m_{len} - j}}{\sqrt d}\Big), \qquad
        \mathrm{out}_i = \sum_j \alpha_{ij} v_j

    Parameters
    ----------
    q : (..., n, d) array_like
        Queries of the current segment (one head per leading index).
    k : (..., m, d) array_like
        Keys of [memory; segment].
    v : (..., m, d_v) array_like
        Values of [memory; segment].
    params : TransformerXLParams or "zero", optional
        u, v and W_k,R (:func:`init_transformer_xl`); drawn from ``rng`` when not given (N(0, 0.02²));
        "zero": u = v = 0 and W_k,R = 0 (causal softmax attention exactly).
    rng : numpy.random.Generator or int, optional
        Draws ``params`` when not given; unused otherwise.
    causal : {True, "top-left", "bottom-right"}, default "bottom-right"
        "bottom-right": the first m − n keys are the memory (query i at position i + m − n); True:
        query i at position i. Always causal, by selection (j ≤ i + mlen).
    clamp_len : int, optional
        Distances beyond it share R_clamp_len (the official ``clamp_len``; None: no clamp).
    method : {"direct", "shift"}, default "direct"
        How (b) and (d) are aligned: R indexed by i − j, or the official relative-shift trick.
    scale : float, optional
        Default :math:`1/\sqrt{d}`.
    return_weights : bool, default False
        Also return α.

    Returns
    -------
    out : (..., n, d_v) ndarray
    weights : (..., n, m) ndarray
        Only if ``return_weights``.

    Notes
    -----
    Time O(n·m·d + (n + m)·d_r·d), memory O(n·m). With u = v = 0 and W_k,R = 0 it is causal softmax
    attention exactly.

    References
    ----------
    .. [1] Z. Dai et al., "Transformer-XL: Attentive Language Models Beyond a Fixed-Length Context",
       ACL 2019, arXiv:1901.02860v3, §3.3 (the four terms), Appendix B (the shift); official code
       kimiyoung/transformer-xl, pytorch/mem_transformer.py (``RelPartialLearnableMultiHeadAttn``).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> q = rng.standard_normal((3, 4))                            # a segment of 3 queries
    >>> k, v = rng.standard_normal((2, 5, 4))                      # 2 memory positions + 3
    >>> params = init_transformer_xl(rng, 4)
    >>> out, A = transformer_xl_attention(q, k, v, params, return_weights=True)
    >>> A.shape, bool(np.all(A[0, 3:] == 0))                       # query 0 sits at position 2
    ((3, 5), True)
    >>> bool(np.allclose(transformer_xl_attention(q, k, v, params, method="shift"), out))
    True
    """
    q, k, v = (as_float(label, x, min_ndim=2) for label, x in (("q", q), ("k", k), ("v", v)))
    check_qkv(q, k, v)
    d = q.shape[-1]
    if isinstance(params, str):
        if params != "zero":
            raise ValueError(f"params must be TransformerXLParams, None or 'zero', got {params!r}")
        params = TransformerXLParams(np.zeros(d), np.zeros(d), np.zeros((d + d % 2, d)))
    params = given_or_drawn("transformer_xl", "params", params, optional_rng(rng),
                            lambda r: init_transformer_xl(r, d), what="u, v and W_k,R")
    if not isinstance(params, TransformerXLParams):
        raise TypeError(f"params must be TransformerXLParams, got {type(params).__name__}")
    if causal is False:
        raise ValueError("Transformer-XL is causal: causal must be True, 'top-left' or 'bottom-right' (R holds the "
                         "distances klen − 1 … 0 only), got False")
    n, m = q.shape[-2], k.shape[-2]
    scale = default_scale(q.shape[-1]) if scale is None else check_scale(scale)
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2], params.u.shape[:-1])
    check_fits("Transformer-XL's four (..., n, m) score terms", (4, *batch, n, m))
    offset = _offset(causal, n, m)
    allowed = np.arange(m)[None, :] <= np.arange(n)[:, None] + offset   # (n, m)  j ≤ i + mlen
    with np.errstate(invalid="ignore", over="ignore"):             # NaN/Inf inputs: IEEE in the rows that see them
        a, b, c, d_term = transformer_xl_terms(q, k, params, causal=causal, clamp_len=clamp_len, method=method)
        S = (a + b + c + d_term) * scale                           # (..., n, m)  A^rel / √d
        A = softmax(S, mask=allowed)                               # (..., n, m)  by selection
    empty = np.broadcast_to(~allowed.any(axis=-1, keepdims=True), (*A.shape[:-1], 1))
    out = weighted_values(A, v, allowed, empty, "zero")            # (..., n, d_v)
    return (out, A) if return_weights else out


@dataclass(frozen=True)
class TransformerXLLayer:
    """One attention-only Transformer-XL layer: projections of the states and the position parameters.

    Attributes
    ----------
    W_q, W_k, W_v : (d_model, d) ndarray
        Projections of the hidden states (``qkv_net``, one head).
    params : TransformerXLParams
        u, v and W_k,R of the layer.
    """

    W_q: NDArray
    W_k: NDArray
    W_v: NDArray
    params: TransformerXLParams


def init_transformer_xl_layer(rng, d_model: int, *, init_std: float = INIT_STD) -> TransformerXLLayer:
    """One layer of width d_model → d_model, every weight from N(0, init_std²) (official code).

    Parameters
    ----------
    rng : numpy.random.Generator or int
    d_model : int
        Width of the hidden states (and of R).
    init_std : float, default 0.02

    Returns
    -------
    TransformerXLLayer
    """
    rng = as_rng(rng)
    d = check_positive_int("d_model", d_model)
    W_q, W_k, W_v = (rng.normal(0.0, init_std, (d, d)) for _ in range(3))
    return TransformerXLLayer(W_q, W_k, W_v, init_transformer_xl(rng, d, d_r=d + d % 2, init_std=init_std))


def transformer_xl_step(
    h: ArrayLike, memories: list[NDArray] | None, layers, *, mem_len: int, clamp_len: int | None = None,
) -> tuple[NDArray, list[NDArray], list[NDArray]]:
    r"""One segment through attention-only layers, each attending over [SG(memory); segment].

    .. math::

        \tilde h^{(l-1)} = [\mathrm{SG}(m^{(l-1)});\, h^{(l-1)}], \quad
        q = h^{(l-1)} W_q,\; k = \tilde h^{(l-1)} W_k,\; v = \tilde h^{(l-1)} W_v, \quad
        h^{(l)} = \operatorname{Attn}^{\mathrm{rel}}(q, k, v)

    Parameters
    ----------
    h : (..., n, d_model) array_like
        The segment's states (layer input).
    memories : list of (..., mlen, d_model) ndarray, or None
        Per layer, the cached input states of the previous segment(s); None: empty (the first segment).
    layers : sequence of TransformerXLLayer
    mem_len : int
        How many of the latest states each memory keeps (the official ``mem_len``).
    clamp_len : int, optional

    Returns
    -------
    out : (..., n, d_model) ndarray
        The top layer's states (attention only: no residual, layer norm or feed-forward).
    memories : list of ndarray
        The next segment's memories: the last ``mem_len`` of [memory; input states] per layer, copied
        (a constant: no gradient flows into it, the paper's SG).
    weights : list of (..., n, mlen + n) ndarray
        Each layer's attention weights.
    """
    h = as_float("h", h, min_ndim=2)
    mem_len = check_non_negative_int("mem_len", mem_len)
    if memories is None:
        memories = [h[..., :0, :]] * len(layers)
    if len(memories) != len(layers):
        raise ValueError(f"memories has {len(memories)} entries for {len(layers)} layers")
    new_memories, weights = [], []
    for layer, memory in zip(layers, memories, strict=True):
        h_tilde = np.concatenate([np.broadcast_to(memory, (*h.shape[:-2], *memory.shape[-2:])), h], axis=-2)
        q, k, v = h @ layer.W_q, h_tilde @ layer.W_k, h_tilde @ layer.W_v
        out, A = transformer_xl_attention(q, k, v, layer.params, causal="bottom-right", clamp_len=clamp_len,
                                          return_weights=True)
        new_memories.append(h_tilde[..., h_tilde.shape[-2] - min(mem_len, h_tilde.shape[-2]):, :].copy())
        weights.append(A)
        h = out
    return h, new_memories, weights


def transformer_xl_segments(
    x: ArrayLike, layers, *, segment_length: int, mem_len: int, clamp_len: int | None = None,
) -> NDArray:
    """Decode a sequence segment by segment, carrying each layer's memory from one segment to the next.

    Parameters
    ----------
    x : (..., N, d_model) array_like
        The whole sequence's input states.
    layers : sequence of TransformerXLLayer
    segment_length : int
        The segment length (the official ``tgt_len``); the last segment may be shorter.
    mem_len : int
        States kept per layer (0: no memory, each segment alone).
    clamp_len : int, optional

    Returns
    -------
    (..., N, d_model) ndarray
        The top layer's states of every segment.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> layer = init_transformer_xl_layer(rng, 4)
    >>> x = rng.standard_normal((6, 4))
    >>> whole = transformer_xl_segments(x, [layer], segment_length=6, mem_len=0)
    >>> bool(np.allclose(transformer_xl_segments(x, [layer], segment_length=2, mem_len=6), whole))
    True
    """
    x = as_float("x", x, min_ndim=2)
    L = check_positive_int("segment_length", segment_length)
    memories, outs = None, []
    for start in range(0, x.shape[-2], L):
        out, memories, _ = transformer_xl_step(x[..., start:start + L, :], memories, layers, mem_len=mem_len,
                                               clamp_len=clamp_len)
        outs.append(out)
    return np.concatenate(outs, axis=-2) if outs else x[..., :0, :].copy()


RECORD = Mechanism.of(
    transformer_xl_attention,
    id="transformer_xl", title="Transformer-XL relative attention with segment memory", family="positional",
    section="5.1.2", paper=DAI,
    equation=r"A^{rel}_{ij} = q_i^\top k_j + q_i^\top W_{k,R} R_{i-j} + u^\top k_j + v^\top W_{k,R} R_{i-j},"
             r"\quad \operatorname{softmax}_{j \le i + m_{len}}(A^{rel}/\sqrt d)\, V",
    time="O(n·m·d)", memory="O(n·m)", noncausal=False, causal=True, position_dependent=True,
    figure="refattn.figures.transformer_xl:transformer_xl",
    examples=({"method": "shift"}, {"clamp_len": 2}, {"clamp_len": 1, "method": "shift"}),
    methods=METHODS, exact_options={"params": "zero"},
    exact_limit="u = v = 0 and W_k,R = 0 (terms (b)-(d) vanish)",
    draws=("params",),
)
