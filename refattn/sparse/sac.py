r"""Sparse Adaptive Connection (Li et al., 2020, arXiv:2003.09833; survey §4.1.2): attention on predicted edges.

SAC treats the queries and keys as the nodes of a graph and lets an edge predictor choose the
edges E; attention then runs on those edges only:

    out_i = Σ_{j : (i, j) ∈ E} softmax_j(q_i k_jᵀ / √d) v_j            (the softmax over i's edges)

The paper's predictor is an LSTM that, given a source node, predicts the nodes it links to (with
distance encodings of the nodes' positions), trained by REINFORCE since choosing an edge is
discrete. That learned predictor is not reproduced: the edges are an explicit argument of
:func:`sac_attention`; :func:`top_edges` selects them from explicit scores, and a small seeded
predictor stands in for the learned one in demonstrations:

    s_ij = q_i W k_jᵀ,   p_ij = σ(s_ij)   (W from init_sac_predictor(rng, d))
    E = the r keys of largest s_ij for each query i    (causal: among j ≤ i)

With every edge (r = m) SAC is softmax attention.
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
    check_bool,
    check_choice,
    check_size,
    checked_qkv,
    default_scale,
)
from ..common.init import glorot
from ..common.ints import check_non_negative_int
from ..draws import given_or_drawn, note_allowed, optional_rng
from ..mechanism import Mechanism
from .attention import METHODS, attend_pattern, check_weights_fit
from .pattern import SparsePattern, as_indices, query_positions

__all__ = ["SacPredictor", "init_sac_predictor", "predict_edges", "predictor_scores", "sac_attention", "top_edges"]

PAPER = ('X. Li, Y. Meng, M. Zhou, Q. Han, F. Wu, J. Li, 2020, "SAC: Accelerating and Structuring Self-Attention '
         'via Sparse Adaptive Connection", arXiv:2003.09833')
SCORE_BLOCK_BYTES = 2**23      # predict_edges scores this many bytes of (query, key) pairs at a time


@dataclass(frozen=True)
class SacPredictor:
    r"""A bilinear edge predictor, the demonstration stand-in for SAC's learned LSTM: :math:`s_{ij} = q_i W k_j^\top`.

    Attributes
    ----------
    w : (d, d) ndarray
        W.
    """

    w: NDArray


def init_sac_predictor(rng, d: int) -> SacPredictor:
    r"""Draw the demonstration predictor: W Glorot-uniform, :math:`U(\pm\sqrt{6/(2d)})`.

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw.
    d : int
        Width of the queries and keys (d_k), >= 1.

    Returns
    -------
    SacPredictor
    """
    rng = as_rng(rng)
    if check_size("d", d) < 1:
        raise ValueError(f"the predictor needs d >= 1, got d={d}")
    check_fits(f"the predictor's weights (d={d})", (d, d))
    return SacPredictor(glorot(rng, d, d))


def predictor_scores(q: ArrayLike, k: ArrayLike, predictor: SacPredictor) -> NDArray:
    r"""Every edge's probability under the demonstration predictor, :math:`\sigma(q_i W k_j^\top)` (dense: for plots).

    Parameters
    ----------
    q : (..., n, d) array_like
        Queries.
    k : (..., m, d) array_like
        Keys.
    predictor : SacPredictor
        W.

    Returns
    -------
    (..., n, m) ndarray
        In (0, 1); the predictor ranks the keys of each query by :math:`q_i W k_j^\top`, in the same
        order (σ increases) but without σ's ties where it rounds to 0 or 1.
    """
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-_logits(q, k, predictor)))   # σ(s_ij)


def _logits(q, k, predictor) -> NDArray:
    """s_ij = q_i W k_jᵀ, (..., n, m), after checking W against d."""
    q, k = as_float("q", q, min_ndim=2), as_float("k", k, min_ndim=2)
    if not isinstance(predictor, SacPredictor):
        raise TypeError(f"predictor must be a SacPredictor (init_sac_predictor), got {type(predictor).__name__}")
    w = as_float("predictor.w", predictor.w)
    d = q.shape[-1]
    if w.shape != (d, d) or k.shape[-1] != d:
        raise ValueError(f"predictor.w must be (d, d) for q and k of width d={d}, got w shape {w.shape}, "
                         f"k shape {k.shape}")
    with np.errstate(invalid="ignore", over="ignore"):             # NaN/Inf inputs: IEEE in their own scores
        return (q @ w) @ np.swapaxes(k, -1, -2)                    # (..., n, m)  q_i W k_jᵀ


def top_edges(scores: ArrayLike, r: int, *, causal: bool | str = False) -> NDArray:
    r"""The edges of the r largest scores of each query: :math:`E = \{(i, j) : j \in \mathrm{top}_r(s_{i\cdot})\}`.

    Parameters
    ----------
    scores : (..., n, m) array_like
        :math:`s_{ij}`, larger = more wanted (e.g. :func:`predictor_scores`).
    r : int
        Edges per query (a query with fewer candidates keeps all of them).
    causal : {False, True, "top-left", "bottom-right"}, default False
        Candidates j ≤ i (top-left) or j ≤ i + m − n (bottom-right) only.

    Returns
    -------
    edges : (..., n·min(r, m), 2) ndarray of int64
        (i, j) pairs, query by query, keys increasing; ``(-1, -1)`` pads a query with fewer
        candidates than r.

    Notes
    -----
    Ties go to the smaller j. A NaN score ranks first: a NaN in a key or query is attended, and shows
    in the output, rather than being left out unseen.

    Examples
    --------
    >>> top_edges(np.array([[0.1, 0.9, 0.5], [0.3, 0.2, 0.7]]), 2).tolist()
    [[0, 1], [0, 2], [1, 0], [1, 2]]
    >>> top_edges(np.array([[0.1, 0.9, 0.5], [0.3, 0.2, 0.7]]), 2, causal=True).tolist()
    [[0, 0], [-1, -1], [1, 0], [1, 1]]
    """
    S = as_float("scores", scores, min_ndim=2)
    r = check_non_negative_int("r", r)
    n, m = S.shape[-2:]
    positions, alignment = query_positions(n, m, causal)
    return _edges(_top_keys(S, r, _candidates(positions, m, alignment)), 0)


def predict_edges(q: ArrayLike, k: ArrayLike, predictor: SacPredictor, r: int, *,
                  causal: bool | str = False) -> NDArray:
    r"""The demonstration predictor's edges: the r keys of largest :math:`q_i W k_j^\top` for each query.

    The scores are computed a block of queries at a time (at most ``SCORE_BLOCK_BYTES`` of them), so
    that no (n, m) array is held; the result equals :func:`top_edges` of the full scores.

    Parameters
    ----------
    q : (..., n, d) array_like
        Queries.
    k : (..., m, d) array_like
        Keys.
    predictor : SacPredictor
        W (:func:`init_sac_predictor`).
    r : int
        Edges per query.
    causal : {False, True, "top-left", "bottom-right"}, default False
        Candidates j ≤ i (or ≤ i + m − n) only.

    Returns
    -------
    edges : (..., n·min(r, m), 2) ndarray of int64
        As :func:`top_edges`.
    """
    q, k = as_float("q", q, min_ndim=2), as_float("k", k, min_ndim=2)
    r = check_non_negative_int("r", r)
    n, m = q.shape[-2], k.shape[-2]
    positions, alignment = query_positions(n, m, causal)
    batch = broadcast_batch({"q": q.shape[:-2], "k": k.shape[:-2]})
    rows = max(1, SCORE_BLOCK_BYTES // (8 * max(1, m * math.prod(batch))))
    parts = []
    for start in range(0, n, rows):
        block = slice(start, start + rows)
        S = _logits(q[..., block, :], k, predictor)                # (..., rows, m)
        parts.append(_edges(_top_keys(S, r, _candidates(positions[block], m, alignment)), start))
    if not parts:                                                  # n = 0
        return np.zeros((*batch, 0, 2), dtype=np.int64)
    return np.concatenate(parts, axis=-2)


def _candidates(positions: NDArray, m: int, alignment) -> NDArray | None:
    """(rows, m) bool: the keys each query may pick (None: all)."""
    return None if alignment is None else np.arange(m) <= positions[:, None]


def _top_keys(S: NDArray, r: int, allowed: NDArray | None) -> NDArray:
    """(..., rows, min(r, m)) keys of the r largest scores per row, increasing; -1 where a row has fewer candidates.

    A selection by value, O(m) per row: the r-th smallest of the keys' rank values (−s, NaN first as −∞,
    candidates not allowed last as +∞), everything below it, and the first ties in index order to make r.
    """
    m = S.shape[-1]
    r = min(r, m)
    rank = np.where(np.isnan(S), -np.inf, -S)                      # smaller = better; NaN first
    if allowed is not None:
        rank = np.where(allowed, rank, np.inf)
    if r == 0 or S.size == 0:
        return np.zeros((*S.shape[:-1], r), dtype=np.int64)
    kth = np.partition(rank, r - 1, axis=-1)[..., r - 1:r]         # the r-th best rank value of each row
    below, tied = rank < kth, rank == kth
    take = below | (tied & (np.cumsum(tied, axis=-1) <= r - below.sum(axis=-1, keepdims=True)))
    keys = np.nonzero(take)[-1].reshape(*S.shape[:-1], r)          # exactly r per row, increasing
    if allowed is not None:
        keys = np.where(np.take_along_axis(np.broadcast_to(allowed, S.shape), keys, axis=-1), keys, -1)
    return keys.astype(np.int64)


def _edges(keys: NDArray, first_row: int) -> NDArray:
    """(..., rows, r) keys → (..., rows·r, 2) pairs (first_row + i, j); -1 keys give (-1, -1)."""
    rows = first_row + np.arange(keys.shape[-2])[:, None]
    i = np.where(keys >= 0, np.broadcast_to(rows, keys.shape), -1)
    return np.stack([i, keys], axis=-1).reshape(*keys.shape[:-2], keys.shape[-2] * keys.shape[-1], 2)


def sac_attention(
    q: ArrayLike, k: ArrayLike, v: ArrayLike, edges: ArrayLike | None = None, *,
    r: int = 2,
    predictor: SacPredictor | None = None,
    rng: np.random.Generator | int | None = None,
    causal: bool | str = False,
    method: str = "auto",
    return_weights: bool = False,
) -> NDArray | tuple[NDArray, NDArray]:
    r"""Softmax attention on the given edges only: SAC's attention once its predictor has chosen them.

    .. math::

        \operatorname{out}_i = \sum_{j : (i, j) \in E}
        \frac{\exp(q_i k_j^\top / \sqrt{d})}{\sum_{l : (i, l) \in E} \exp(q_i k_l^\top / \sqrt{d})}\, v_j

    Parameters
    ----------
    q : (..., n, d) array_like
        Queries.
    k : (..., m, d) array_like
        Keys.
    v : (..., m, d_v) array_like
        Values.
    edges : (E, 2) or (..., E, 2) array_like of int
        The (query i, key j) edges, in any order (repeats merge); ``(-1, -1)`` is padding, so that
        batch elements can have different numbers of edges. Leading dims broadcast against q, k, v's
        (one edge set per sequence or head: the predictor reads their content). Default: the
        demonstration predictor's (:func:`predict_edges`), r keys a query.
    r : int, default 2
        Keys a query when the predictor picks the edges (``edges`` not given).
    predictor : SacPredictor, optional
        The demonstration predictor, when ``edges`` is not given; drawn from ``rng``
        (:func:`init_sac_predictor`) when not given either.
    rng : numpy.random.Generator or int, optional
        Draws ``predictor`` when needed; unused otherwise.
    causal : {False, True, "top-left", "bottom-right"}, default False
        Drop the edges with j > i (top-left) or j > i + m − n (bottom-right).
    method : {"equation", "csr", "auto"}, default "auto"
        As in :func:`~refattn.sparse.sparse_attention`: "csr" costs O(|E|·d) and never holds n × m.
    return_weights : bool, default False
        Also return the dense (..., n, m) weights (0 off the edges).

    Returns
    -------
    out : (..., n, d_v) ndarray
        A query without an edge gets a zero row.
    weights : (..., n, m) ndarray
        Only if ``return_weights``.

    Notes
    -----
    **Causal form.** ``causal=True`` is refattn's restriction of the edge set to j ≤ i, which a
    decoder needs whatever chose the edges; it is not a causal form of the paper's LSTM predictor,
    which is not reproduced here. The demonstration predictor's candidates are restricted as well
    before it picks, so that a query keeps r past keys.

    References
    ----------
    .. [1] X. Li et al., "SAC: Accelerating and Structuring Self-Attention via Sparse Adaptive
       Connection", NeurIPS 2020, arXiv:2003.09833v3, §3.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 4, 2))
    >>> every = np.array([(i, j) for i in range(4) for j in range(4)])
    >>> from refattn import scaled_dot_product_attention
    >>> bool(np.allclose(sac_attention(q, k, v, every), scaled_dot_product_attention(q, k, v)))
    True
    """
    check_choice("method", method, METHODS)
    return_weights = check_bool("return_weights", return_weights)
    q, k, v, batch = checked_qkv(q, k, v)
    if edges is None:
        default_scale(q.shape[-1])                                 # d_k = 0: the same error whatever follows
        r = check_non_negative_int("r", r)
        query_positions(q.shape[-2], k.shape[-2], causal)
        if return_weights:
            check_weights_fit(batch, q.shape[-2], k.shape[-2])
        predictor = given_or_drawn("sac", "predictor", predictor, optional_rng(rng),
                                   lambda g: init_sac_predictor(g, q.shape[-1]), what="its predictor")
        edges = predict_edges(q, k, predictor, r, causal=causal)
    out, weights, allowed = _sac(q, k, v, edges, batch, causal, method, return_weights)
    if not return_weights:
        return out
    note_allowed(allowed)                                          # the edges kept
    return out, weights


def _sac(q, k, v, edges, batch, causal, method, return_weights):
    """(out, weights or None, allowed or None) of attention on ``edges``: one CSR pattern per sequence."""
    n, m = q.shape[-2], k.shape[-2]
    edges = as_indices("edges", edges, ndim=None).astype(np.int64, copy=False)
    if edges.ndim < 2 or edges.shape[-1] != 2:
        raise ValueError(f"edges must have shape (..., E, 2) of (query, key) pairs, got shape {edges.shape}")
    padding = np.all(edges == -1, axis=-1)
    i, j = edges[..., 0], edges[..., 1]
    bad = ~padding & ((i < 0) | (i >= n) | (j < 0) | (j >= m))
    if bad.any():
        raise ValueError(f"edges must be pairs (i, j) with 0 <= i < n={n} and 0 <= j < m={m}, or (-1, -1) for none; "
                         f"got {tuple(edges[bad][0].tolist())}")
    _, alignment = query_positions(n, m, causal)
    full = broadcast_batch({"q, k, v": batch, "edges": edges.shape[:-2]})
    if return_weights:
        check_weights_fit(full, n, m)
    if edges.ndim == 2:                                            # one edge set for every sequence
        result = attend_pattern(q, k, v, _pattern(edges, padding, n, m, alignment), method=method,
                                return_weights=return_weights)
        return result.output, result.weights, result.allowed
    B = math.prod(full)
    flat = [np.broadcast_to(x, (*full, *x.shape[-2:])).reshape(B, *x.shape[-2:]) for x in (q, k, v, edges)]
    padding = np.broadcast_to(padding, full + padding.shape[-1:]).reshape(B, padding.shape[-1])
    results = [attend_pattern(flat[0][b], flat[1][b], flat[2][b], _pattern(flat[3][b], padding[b], n, m, alignment),
                              method=method, return_weights=return_weights) for b in range(B)]
    out = np.stack([r.output for r in results]) if B else np.zeros((0, n, v.shape[-1]))
    out = out.reshape(*full, n, v.shape[-1])
    if not return_weights:
        return out, None, None
    weights = (np.stack([r.weights for r in results]) if B else np.zeros((0, n, m))).reshape(*full, n, m)
    allowed = (np.stack([r.allowed for r in results]) if B else np.zeros((0, n, m), bool)).reshape(*full, n, m)
    return out, weights, allowed


def _pattern(edges: NDArray, padding: NDArray, n: int, m: int, alignment) -> SparsePattern:
    pattern = SparsePattern.from_pairs(edges[~padding, 0], edges[~padding, 1], n, m)
    return pattern if alignment is None else pattern.causal(alignment)


RECORD = Mechanism.of(
    sac_attention, options=("r", "predictor", "method"),            # the demonstration predictor picks the edges
    id="sac", title="Sparse Adaptive Connection (attention on predicted edges)", family="sparse", section="4.1.2",
    paper=PAPER,
    equation=r"\operatorname{out}_i = \sum_{(i, j) \in E} \operatorname{softmax}_{j : (i, j) \in E}"
             r"\big(q_i k_j^\top/\sqrt{d}\big)\, v_j",
    time="O(|E|·d) attention (+ O(n·m·d) for the demonstration predictor)", memory="O(|E|)", kind="attention",
    methods=("equation", "csr", "bsr", "auto"), figure="refattn.figures.sac:sac",
    causal=True, content_selected=True, draws=("predictor",), examples=({"r": 1},),
    exact_options=lambda n, m: {"r": m}, exact_limit="every edge: r = m keys per query",
)
