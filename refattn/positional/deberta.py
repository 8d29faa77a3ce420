r"""DeBERTa's disentangled attention: content and relative position as separate score terms (He et al., 2021).

Each token has a content vector and shares a table of relative-position vectors P (2k rows). The
score of query i and key j sums three terms (the paper's Eq. 4):

    Ã_ij = Q^c_i · K^c_j                      content-to-content (c2c)
         + Q^c_i · K^r_{δ(i,j)}               content-to-position (c2p)
         + K^c_j · Q^r_{δ(j,i)}               position-to-content (p2c)
    A = softmax(Ã / √(3d)),   out = A V^c

with K^r = P W_{k,r} and Q^r = P W_{q,r} the projected position table (rows 0 … 2k − 1) and the
relative index (the paper's δ, distances clipped at k)

    δ(i, j) = 0            if i − j ≤ −k
            = 2k − 1       if i − j ≥ k
            = i − j + k    otherwise.

The scale is 1/√(s·d) with s = 1 + the number of position terms (the official code's
``scale_factor``; s = 3 with both terms, the paper's 1/√(3d)); it multiplies every term. With no
position term s = 1 and the scores are Q^c K^cᵀ/√d: exactly softmax attention.

**Log buckets (DeBERTa-v2/v3).** The later versions replace i − j by its log bucket
(``make_log_bucket_position`` of microsoft/DeBERTa, DeBERTa/deberta/da_utils.py): with
mid = position_buckets // 2 and r clipped to ±(max_position − 1),

    bucket(r) = r                                                                if |r| ≤ mid
              = sign(r) · (⌈log(|r|/mid) / log((max_position − 1)/mid) · (mid − 1)⌉ + mid)   otherwise,

and then k = position_buckets (the table has 2·position_buckets rows) and
δ(i, j) = clip(bucket(i − j) + k, 0, 2k − 1). The official code computes the logarithm in float32;
here it is float64 (the two agree on every distance the tests list).

**p2c's index: the paper and the official code differ.** The paper's Eq. 4 reads Q^r at δ(j, i)
("for a given position i, position-to-content computes the attention weight of the key content at j
with respect to the query position at i, thus the relative distance is δ(j, i)"). The official code,
in every version (microsoft/DeBERTa ``DisentangledSelfAttention.disentangled_attention_bias``: the
first release negates the distance and transposes the product, the two flips cancelling; the current
one gathers ``Q^r K^cᵀ`` along its rows with the c2p index), and Hugging Face's port read it at
δ(i, j), the same index as c2p. ``p2c_index="paper"`` (the default) follows Eq. 4;
``p2c_index="official"`` reproduces the released models.

Positions: query i sits at position i (at i + m − n with ``causal="bottom-right"``, the n queries
being the last n of m positions), key j at position j; the relative distance is i − j (the official
``build_relative_position``: query ids minus key ids, also when n ≠ m). DeBERTa is an encoder; with
``causal`` the decoder's mask is applied by selection, and since every term of row i reads q_i and
the keys it sees only, later keys change nothing.

Not here: the official code's ``p2p`` term (not in the paper; its v2 code path for n ≠ m reads an
undefined index), the shared-key option ``share_att_key`` (K^r, Q^r made with the content
projections: pass such K^r, Q^r as ``params``), dropout and the enhanced mask decoder.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.budget import check_fits
from ..common.checks import (
    as_float,
    as_rng,
    broadcast_batch,
    causal_alignment,
    check_bool,
    check_choice,
    check_scale,
    checked_qkv,
    default_scale,
)
from ..common.ints import check_non_negative_int, check_positive_int
from ..core.sdpa import scaled_dot_product_attention
from ..draws import given_or_drawn, optional_rng
from ..mechanism import Mechanism

__all__ = ["DebertaParams", "deberta_attention", "disentangled_scores", "init_deberta", "log_bucket_position",
           "deberta_delta"]

HE = ('P. He, X. Liu, J. Gao, W. Chen, 2021, "DeBERTa: Decoding-enhanced BERT with Disentangled Attention", '
      'ICLR 2021, arXiv:2006.03654')
TERMS = ("c2p", "p2c")
P2C_INDEX = ("paper", "official")
METHODS = ("equation", "blocked", "auto")


@dataclass(frozen=True, eq=False)
class DebertaParams:
    r"""The projected relative-position table: :math:`K^r = P W_{k,r}` and :math:`Q^r = P W_{q,r}`.

    Attributes
    ----------
    pos_key : (..., 2k, d) ndarray
        :math:`K^r`, read by content-to-position at row :math:`\delta(i, j)`.
    pos_query : (..., 2k, d) ndarray
        :math:`Q^r`, read by position-to-content. Leading dims (heads) broadcast with q's.
    """

    pos_key: NDArray
    pos_query: NDArray

    def __post_init__(self) -> None:
        for name in ("pos_key", "pos_query"):
            object.__setattr__(self, name, as_float(name, getattr(self, name), min_ndim=2))
        if self.pos_key.shape != self.pos_query.shape:
            raise ValueError(f"pos_key has shape {self.pos_key.shape} but pos_query has shape "
                             f"{self.pos_query.shape} (both (..., 2k, d))")
        rows = self.pos_key.shape[-2]
        if rows < 2 or rows % 2:
            raise ValueError(f"pos_key and pos_query need 2k rows (k >= 1), got shape {self.pos_key.shape}")


def init_deberta(rng, span: int, d: int) -> DebertaParams:
    r"""Draw :math:`K^r` and :math:`Q^r`, (2·span, d) each, entries :math:`\mathcal{N}(0, 1)`.

    In the official code P is an embedding table drawn from :math:`\mathcal{N}(0, 0.02^2)` and layer-normed
    (v2), then projected by linear maps drawn from :math:`\mathcal{N}(0, 0.02^2)`; here the projected rows
    are drawn directly, at unit scale (the scale of the seeded q and k), so the position terms are as large
    as the content term and visible in the figures.

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw: pos_key first, then pos_query.
    span : int
        k, the clipping distance (``position_buckets`` with log buckets).
    d : int
        Width of q and k.

    Returns
    -------
    DebertaParams

    Examples
    --------
    >>> init_deberta(0, 4, 8).pos_key.shape
    (8, 8)
    """
    rng = as_rng(rng)
    span, d = check_positive_int("span", span), check_non_negative_int("d", d)
    pos_key = rng.standard_normal((2 * span, d))
    return DebertaParams(pos_key, rng.standard_normal((2 * span, d)))


def _check_buckets(position_buckets, max_position) -> tuple[int, int] | None:
    if (position_buckets is None) != (max_position is None):
        raise ValueError(f"log buckets need both position_buckets and max_position, got "
                         f"position_buckets={position_buckets!r}, max_position={max_position!r}")
    if position_buckets is None:
        return None
    position_buckets = check_positive_int("position_buckets", position_buckets)
    max_position = check_positive_int("max_position", max_position)
    if position_buckets < 2 or max_position - 1 <= position_buckets // 2:
        raise ValueError(f"log buckets need position_buckets >= 2 and max_position − 1 > position_buckets // 2, "
                         f"got position_buckets={position_buckets}, max_position={max_position}")
    return position_buckets, max_position


def log_bucket_position(r: ArrayLike, position_buckets: int, max_position: int) -> NDArray:
    r"""DeBERTa-v2/v3's log bucket of a relative distance (``make_log_bucket_position``).

    .. math::

        \operatorname{bucket}(r) = \begin{cases} r & |r| \le \text{mid} \\
        \operatorname{sign}(r)\Big(\Big\lceil \frac{\log(|r|/\text{mid})}{\log((\text{max\_position}-1)/\text{mid})}
        (\text{mid} - 1)\Big\rceil + \text{mid}\Big) & \text{otherwise} \end{cases}

    with mid = position_buckets // 2 and r first clipped to ±(max_position − 1).

    Parameters
    ----------
    r : array_like of int
        Relative distances i − j.
    position_buckets : int
        Number of buckets on each side (the table has 2·position_buckets rows).
    max_position : int
        Distances beyond max_position − 1 share the last bucket.

    Returns
    -------
    ndarray of int64
        Buckets in [−(position_buckets − 1), position_buckets − 1] (for even position_buckets).

    Examples
    --------
    >>> log_bucket_position(np.arange(0, 40, 4), 8, 32)     # r = 8: ⌈3·log 2 / log(31/4)⌉ + 4 = 6
    array([0, 4, 6, 6, 7, 7, 7, 7, 7, 7])
    """
    position_buckets, max_position = _check_buckets(position_buckets, max_position)
    r = np.asarray(r)
    if not np.issubdtype(r.dtype, np.integer):
        raise TypeError(f"r must hold integer distances, got dtype {r.dtype}")
    r = np.clip(r.astype(np.int64), -(max_position - 1), max_position - 1)
    mid = position_buckets // 2
    a = np.abs(r)
    log_pos = np.ceil(np.log(np.maximum(a, mid) / mid) / np.log((max_position - 1) / mid) * (mid - 1)) + mid
    return np.where(a <= mid, r, np.sign(r) * log_pos.astype(np.int64))


def _delta(r: NDArray, span: int, buckets) -> NDArray:
    """δ: clip(ρ(r) + k, 0, 2k − 1) for distances r, ρ the identity or the log bucket."""
    if buckets is not None:
        r = log_bucket_position(r, *buckets)
    return np.clip(r + span, 0, 2 * span - 1)


def deberta_delta(n: int, m: int, span: int, *, offset: int = 0, position_buckets: int | None = None,
                   max_position: int | None = None) -> NDArray:
    r"""The relative index :math:`\delta(i, j)`, (n, m): the row of the position table query i reads for key j.

    .. math::

        \delta(i, j) = \operatorname{clip}(\rho(p_i - j) + k,\ 0,\ 2k - 1)

    with :math:`p_i = i + \text{offset}` the query's position and ρ the identity (the paper) or
    :func:`log_bucket_position` (v2/v3; then k = position_buckets). :math:`\delta(j, i)` is the transpose
    of the index built with the roles swapped (``deberta_delta(m, n, ...)`` with the offset negated).

    Parameters
    ----------
    n, m : int
        Numbers of queries and keys.
    span : int
        k, the clipping distance (ignored in favour of position_buckets with log buckets).
    offset : int, default 0
        Position of query 0 (m − n for queries that are the last n of m positions).
    position_buckets, max_position : int, optional
        Log buckets (both or neither).

    Returns
    -------
    (n, m) ndarray of int64

    Examples
    --------
    >>> deberta_delta(3, 5, 2)
    array([[2, 1, 0, 0, 0],
           [3, 2, 1, 0, 0],
           [3, 3, 2, 1, 0]])
    """
    n, m = check_non_negative_int("n", n), check_non_negative_int("m", m)
    buckets = _check_buckets(position_buckets, max_position)
    span = buckets[0] if buckets is not None else check_positive_int("span", span)
    if isinstance(offset, bool) or not isinstance(offset, (int, np.integer)):
        raise TypeError(f"offset must be an int, got {type(offset).__name__}")
    r = (np.arange(n, dtype=np.int64)[:, None] + int(offset)) - np.arange(m, dtype=np.int64)[None, :]
    return _delta(r, span, buckets)


def _check_terms(terms) -> tuple[str, ...]:
    if isinstance(terms, str) or not isinstance(terms, (tuple, list)):
        raise TypeError(f"terms must be a tuple of position terms from {TERMS}, got {terms!r}")
    for term in terms:
        check_choice("terms", term, TERMS)
    if len(set(terms)) != len(terms):
        raise ValueError(f"terms lists a term twice: {terms!r}")
    return tuple(terms)


def _check_params(params, d: int, buckets) -> int:
    """The span k the table serves, after checking it against d and the buckets."""
    if not isinstance(params, DebertaParams):
        raise TypeError(f"params must be a DebertaParams (init_deberta), got {type(params).__name__}")
    rows, width = params.pos_key.shape[-2:]
    if width != d:
        raise ValueError(f"params has pos_key of shape {params.pos_key.shape}, but q and k have d={d}")
    if buckets is not None and rows != 2 * buckets[0]:
        raise ValueError(f"with position_buckets={buckets[0]} the table needs 2·position_buckets = {2 * buckets[0]} "
                         f"rows, but pos_key has shape {params.pos_key.shape}")
    return rows // 2


def disentangled_scores(q: ArrayLike, k: ArrayLike, params: DebertaParams, *, terms=TERMS,
                        position_buckets: int | None = None, max_position: int | None = None,
                        p2c_index: str = "paper", causal: bool | str = False,
                        scale: float | None = None) -> dict[str, NDArray]:
    r"""The three score terms, each already multiplied by the scale.

    .. math::

        \text{c2c}_{ij} = s\,Q^c_i \cdot K^c_j, \quad \text{c2p}_{ij} = s\,Q^c_i \cdot K^r_{\delta(i,j)}, \quad
        \text{p2c}_{ij} = s\,K^c_j \cdot Q^r_{\delta(j,i)}, \qquad s = 1/\sqrt{(1 + |\text{terms}|)\,d}

    Parameters
    ----------
    q : (..., n, d) array_like
        Content queries :math:`Q^c`.
    k : (..., m, d) array_like
        Content keys :math:`K^c`.
    params : DebertaParams
        :math:`K^r, Q^r` (2k rows each).
    terms : tuple of {"c2p", "p2c"}, default ("c2p", "p2c")
        The position terms (the official ``pos_att_type``).
    position_buckets, max_position : int, optional
        Log buckets of v2/v3 (both or neither); the table then has 2·position_buckets rows.
    p2c_index : {"paper", "official"}, default "paper"
        p2c reads :math:`Q^r` at :math:`\delta(j, i)` (Eq. 4) or at :math:`\delta(i, j)` (the released code).
    causal : {False, True, "top-left", "bottom-right"}, default False
        Only fixes the query positions (i + m − n for "bottom-right"); nothing is masked here.
    scale : float, optional
        s; default :math:`1/\sqrt{(1 + |\text{terms}|)\,d}`.

    Returns
    -------
    dict
        "c2c" and each of ``terms``: (..., n, m) arrays whose sum is the scores Ã·s.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k = rng.standard_normal((2, 5, 4))
    >>> S = disentangled_scores(q, k, init_deberta(1, 2, 4))
    >>> sorted(S), S["c2p"].shape
    (['c2c', 'c2p', 'p2c'], (5, 5))
    """
    q, k = as_float("q", q, min_ndim=2), as_float("k", k, min_ndim=2)
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q has d={q.shape[-1]} but k has d={k.shape[-1]} (q shape {q.shape}, k shape {k.shape})")
    broadcast_batch({"q": q.shape[:-2], "k": k.shape[:-2]})
    terms = _check_terms(terms)
    buckets = _check_buckets(position_buckets, max_position)
    check_choice("p2c_index", p2c_index, P2C_INDEX)
    span = _check_params(params, q.shape[-1], buckets)
    return _scores(q, k, params, terms, buckets, p2c_index, causal_alignment(causal),
                   _scale(q.shape[-1], terms, scale), span)


def _scale(d: int, terms: tuple[str, ...], scale) -> float:
    if scale is not None:
        return check_scale(scale)
    default_scale(d)                                               # d = 0: the ValueError naming d_k
    return 1.0 / math.sqrt((1 + len(terms)) * d)                   # 1/√(s·d), s = 1 + #position terms


def _scores(q, k, params, terms, buckets, p2c_index, alignment, scale, span) -> dict[str, NDArray]:
    n, m = q.shape[-2], k.shape[-2]
    offset = m - n if alignment == "bottom-right" else 0
    r = (np.arange(n, dtype=np.int64)[:, None] + offset) - np.arange(m, dtype=np.int64)[None, :]   # (n, m)  i − j
    delta = _delta(r, span, buckets)                               # (n, m)  δ(i, j)
    with np.errstate(invalid="ignore", over="ignore"):             # Inf in q_i or k_j: NaN where they are read
        scores = {"c2c": (q @ np.swapaxes(k, -1, -2)) * scale}     # (..., n, m)  Q^c K^cᵀ·s
        if "c2p" in terms:
            c2p = (q @ np.swapaxes(params.pos_key, -1, -2)) * scale   # (..., n, 2k)  Q^c K^rᵀ·s
            idx = np.broadcast_to(delta, (*c2p.shape[:-2], n, m))
            scores["c2p"] = np.take_along_axis(c2p, idx, axis=-1)  # (..., n, m)  Q^c_i·K^r_{δ(i,j)}·s
        if "p2c" in terms:
            rows = delta if p2c_index == "official" else _delta(-r, span, buckets)   # δ(i, j) or δ(j, i)
            p2c = (k @ np.swapaxes(params.pos_query, -1, -2)) * scale  # (..., m, 2k)  K^c Q^rᵀ·s
            idx = np.broadcast_to(rows.T, (*p2c.shape[:-2], m, n))
            scores["p2c"] = np.swapaxes(np.take_along_axis(p2c, idx, axis=-1), -1, -2)  # K^c_j·Q^r_{rows[i,j]}·s
    return scores


def deberta_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    params: DebertaParams | None = None,
    *,
    rng: np.random.Generator | int | None = None,
    span: int = 4,
    terms=TERMS,
    position_buckets: int | None = None,
    max_position: int | None = None,
    p2c_index: str = "paper",
    causal: bool | str = False,
    scale: float | None = None,
    method: str = "auto",
    return_weights: bool = False,
) -> NDArray | tuple[NDArray, NDArray]:
    r"""DeBERTa's disentangled attention: content-to-content plus the relative-position terms, one softmax.

    .. math::

        \operatorname{softmax}\Big(\frac{Q^c K^{c\top} + [Q^c K^{r\top}]_{\delta(i,j)}
        + [K^c Q^{r\top}]_{\delta(j,i)}^\top}{\sqrt{3d}}\Big) V^c

    Parameters
    ----------
    q : (..., n, d) array_like
        Content queries :math:`Q^c = H W_{q,c}`.
    k : (..., m, d) array_like
        Content keys :math:`K^c`.
    v : (..., m, d_v) array_like
        Content values :math:`V^c`.
    params : DebertaParams, optional
        :math:`K^r, Q^r`, (..., 2k, d) (:func:`init_deberta`); k is the clipping distance. Drawn from
        ``rng`` when not given: 2·span rows, or 2·position_buckets with log buckets.
    rng : numpy.random.Generator or int, optional
        Draws ``params`` when not given; unused otherwise.
    span : int, default 4
        k of drawn tables without log buckets (given tables bring their own).
    terms : tuple of {"c2p", "p2c"}, default ("c2p", "p2c")
        The position terms; ``()`` leaves content-to-content at scale 1/√d: softmax attention.
    position_buckets, max_position : int, optional
        v2/v3's log buckets (:func:`log_bucket_position`); the table then has 2·position_buckets rows.
    p2c_index : {"paper", "official"}, default "paper"
        p2c at :math:`\delta(j, i)` (the paper's Eq. 4) or :math:`\delta(i, j)` (the official code).
    causal : {False, True, "top-left", "bottom-right"}, default False
        A decoder's mask, by selection (DeBERTa itself is an encoder); "bottom-right" also puts query i
        at position i + m − n.
    scale : float, optional
        Multiplier of every term; default :math:`1/\sqrt{(1 + |\text{terms}|)\,d}` (1/√(3d) with both).
    method : {"equation", "blocked", "auto"}, default "auto"
        The path of :func:`~refattn.scaled_dot_product_attention` over c2c plus the position terms (these
        are n × m whatever the path); the weights, when asked for, come from "equation".
    return_weights : bool, default False
        Also return the (..., n, m) weights.

    Returns
    -------
    out : (..., n, d_v) ndarray
    weights : (..., n, m) ndarray
        Only if ``return_weights``.

    Notes
    -----
    Complexity: O(n·m·d + (n + m)·k·d) time, O(n·m + (n + m)·k) memory. The paper's (and the code's)
    defaults: k = 512 (``max_relative_positions`` = ``max_position_embeddings``) in v1; position_buckets
    = 256, max_position = 512 in v2/v3 (their model configs).

    References
    ----------
    .. [1] P. He, X. Liu, J. Gao, W. Chen, "DeBERTa: Decoding-enhanced BERT with Disentangled Attention",
       ICLR 2021, arXiv:2006.03654, §3.1, Eqs. (2)-(4).
    .. [2] microsoft/DeBERTa, DeBERTa/deberta/disentangled_attention.py and da_utils.py.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 6, 4))
    >>> out, A = deberta_attention(q, k, v, init_deberta(1, 2, 4), return_weights=True)
    >>> bool(np.allclose(A.sum(axis=-1), 1.0)), bool(np.allclose(A @ v, out))
    (True, True)
    >>> plain = deberta_attention(q, k, v, init_deberta(1, 2, 4), terms=())
    >>> bool(np.allclose(plain, scaled_dot_product_attention(q, k, v), rtol=1e-12, atol=1e-12))
    True
    """
    check_choice("method", method, METHODS)
    check_choice("p2c_index", p2c_index, P2C_INDEX)
    return_weights = check_bool("return_weights", return_weights)
    q, k, v, batch = checked_qkv(q, k, v)
    alignment = causal_alignment(causal)
    terms = _check_terms(terms)
    buckets = _check_buckets(position_buckets, max_position)
    params = given_or_drawn("deberta", "params", params, optional_rng(rng),
                            lambda r: init_deberta(r, span if buckets is None else buckets[0], q.shape[-1]),
                            what="its position table")
    span = _check_params(params, q.shape[-1], buckets)
    lead = broadcast_batch({"q, k, v": batch, "params": params.pos_key.shape[:-2]})
    n, m = q.shape[-2], k.shape[-2]
    scale = _scale(q.shape[-1], terms, scale)
    check_fits("the position terms of the scores", (*lead, n, m))
    S = _scores(q, k, params, terms, buckets, p2c_index, alignment, scale, span)
    bias = sum((S[t] for t in terms), np.zeros((n, m)))            # (..., n, m)  the position terms, scaled
    if not return_weights:
        return scaled_dot_product_attention(q, k, v, bias, causal=causal, scale=scale, method=method)
    out, A = scaled_dot_product_attention(q, k, v, bias, causal=causal, scale=scale, method="equation",
                                          return_weights=True)     # softmax(Q^c K^cᵀ·s + c2p + p2c), its V
    if method == "blocked":
        out = scaled_dot_product_attention(q, k, v, bias, causal=causal, scale=scale, method="blocked")
    return out, A


RECORD = Mechanism.of(
    deberta_attention,
    id="deberta", title="DeBERTa disentangled attention (content and relative position)", family="positional",
    section="5.1.2", paper=HE,
    equation=r"\operatorname{softmax}\!\Big(\frac{Q^c_i K^{c\top}_j + Q^c_i K^{r\top}_{\delta(i,j)} "
             r"+ K^c_j Q^{r\top}_{\delta(j,i)}}{\sqrt{3d}}\Big) V^c",
    time="O(n·m·d + (n+m)·k·d)", memory="O(n·m + (n+m)·k)", kind="attention", methods=METHODS,
    causal=True, position_dependent=True,
    examples=({"terms": ("c2p",)}, {"p2c_index": "official"}, {"position_buckets": 4, "max_position": 8},
              {"span": 1}),
    figure="refattn.figures.deberta:deberta",
    exact_options={"terms": ()}, exact_limit="no position term (terms=()): Q^c K^cᵀ/√d, softmax attention",
    draws=("params",),
)
