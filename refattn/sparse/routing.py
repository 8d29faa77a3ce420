r"""Routing attention (Roy et al., 2021; survey §4.1.2): queries attend the keys of their own k-means cluster.

Queries and keys are routed to k centroids μ_1 … μ_k ∈ R^d that both share; a query attends only
the keys routed to its own centroid (§4.1 of the paper):

    q̂_i = q_i / ‖q_i‖,  k̂_j = k_j / ‖k_j‖                      routing sees directions (unit norm)
    c(x) = argmin_c ‖x̂ − μ_c‖                                    nearest centroid
    out_i = Σ_{j : c(k_j) = c(q_i)} softmax_j(q_i·k_j / √d) v_j   (causal: and j ≤ i)

The attention itself uses q and k as given (scaled 1/√d), so one cluster is exactly softmax
attention. The centroids learn by the paper's online k-means update (§4.1), a training step:

    μ_c ← λ μ_c + (1 − λ)/2 · ( Σ_{i : c(q_i) = c} q̂_i + Σ_{j : c(k_j) = c} k̂_j )

Pieces: :func:`draw_centroids` (the random initial centroids, the only draw), :func:`nearest_centroid`
(the routing), :func:`update_centroids` (the update, returning new centroids), and
:func:`routing_attention` (attention over the routed pairs, by the dense definition or the CSR
kernel on the same-cluster pairs). ``balanced=True`` is the official code's balanced routing:
each centroid takes its w = ⌈n/k⌉ nearest queries and ⌈m/k⌉ nearest keys.
"""
from __future__ import annotations

import math

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
    check_size,
    checked_qkv,
    default_scale,
)
from ..common.ints import check_positive_int
from ..core.sdpa import scaled_dot_product_attention
from ..core.softmax import FULLY_MASKED_POLICIES
from ..draws import given_or_drawn, note_allowed, optional_rng
from ..mechanism import AttentionResult, Mechanism
from ..papers import ROUTING
from .attention import METHODS, check_weights_fit, sparse_attention
from .pattern import SparsePattern

__all__ = ["draw_centroids", "nearest_centroid", "routing_attention", "update_centroids"]


def draw_centroids(rng, num_clusters: int, d: int) -> NDArray:
    r"""Draw k initial centroids, uniform on the unit sphere of :math:`\mathbb{R}^d`.

    .. math::

        \mu_c = g_c / \lVert g_c \rVert, \qquad g_c \sim \mathcal{N}(0, I_d)

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw: ``G = rng.standard_normal((num_clusters, d))``, each row then divided
        by its norm (another implementation reproduces the draw from these two lines).
    num_clusters : int
        *k*, the number of clusters, >= 1.
    d : int
        Width of the queries and keys, >= 0 (d = 0 gives empty rows).

    Returns
    -------
    centroids : (num_clusters, d) ndarray

    Notes
    -----
    Unit centroids live where the routed directions :math:`\hat q, \hat k` live, and all have the
    same norm, so the nearest centroid is also the one of largest inner product. The official
    TensorFlow code (google-research ``routing_transformer/utils.py``, ``cluster_items``)
    initialises its ``means`` the same way up to its normalisation: standard normal rows passed
    through a layer norm without scale or bias (mean 0, norm √d); lucidrains'
    ``routing_transformer`` draws standard normal rows, then re-initialises them on the first
    batch from randomly chosen tokens refined by 10 k-means iterations (``Kmeans.init``).

    Examples
    --------
    >>> mu = draw_centroids(0, 3, 4)
    >>> mu.shape, bool(np.allclose(np.linalg.norm(mu, axis=1), 1.0))
    ((3, 4), True)
    """
    rng = as_rng(rng)
    num_clusters = check_size("num_clusters", num_clusters, positive=True)
    d = check_size("d", d)
    check_fits(f"the centroids (num_clusters={num_clusters}, d={d})", (num_clusters, d))
    G = rng.standard_normal((num_clusters, d))               # (k, d)  g_c ~ N(0, I_d)
    return G / np.linalg.norm(G, axis=1, keepdims=True) if d else G   # μ_c = g_c / ‖g_c‖


def nearest_centroid(x: ArrayLike, centroids: ArrayLike) -> NDArray:
    r"""The routing: the index of the centroid nearest to each token's direction.

    .. math::

        c(x) = \operatorname*{argmin}_c \lVert \hat x - \mu_c \rVert^2, \qquad
        \hat x = x / \lVert x \rVert

    Parameters
    ----------
    x : (..., L, d) array_like
        Queries or keys.
    centroids : (k, d) or (..., k, d) array_like
        The centroids :math:`\mu`, finite; leading dims broadcast against those of ``x`` (one set
        per head, say).

    Returns
    -------
    clusters : (..., L) ndarray of int64
        In ``[0, k)``; ``-1`` for a token with a NaN or Inf component, which has no direction and
        joins no cluster. Ties go to the lowest index.

    Notes
    -----
    A zero vector keeps direction 0 (its distance to :math:`\mu_c` is :math:`\lVert\mu_c\rVert`).
    The distances are computed as :math:`\lVert\mu_c\rVert^2 - 2\,\hat x^\top \mu_c` (the constant
    :math:`\lVert\hat x\rVert^2` dropped), O(L·k·d) time and O(L·k) memory. The official codes take
    the centroid of largest inner product :math:`\hat x^\top \mu_c` (google-research
    ``nearest_neighbor``, lucidrains ``dists_and_buckets``): the same centroid while all centroids
    have one norm, as :func:`draw_centroids` draws them, but not after the paper's update, which
    leaves them of different norms.

    Examples
    --------
    >>> mu = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> nearest_centroid([[3.0, 1.0], [0.2, 5.0], [np.nan, 1.0]], mu).tolist()
    [0, 1, -1]
    """
    x = as_float("x", x, min_ndim=2)
    centroids = _check_centroids(centroids, x.shape[-1], "x")
    broadcast_batch({"x": x.shape[:-2], "centroids": centroids.shape[:-2]})
    return _clusters(_distances(x, centroids))


def update_centroids(centroids: ArrayLike, q: ArrayLike, k: ArrayLike, *, decay: float = 0.999) -> NDArray:
    r"""The paper's online k-means step: new centroids from the queries and keys routed to them.

    .. math::

        \mu_c \leftarrow \lambda \mu_c + \frac{1 - \lambda}{2}
        \Big( \sum_{i : c(q_i) = c} \hat q_i + \sum_{j : c(k_j) = c} \hat k_j \Big)

    Parameters
    ----------
    centroids : (k, d) or (..., k, d) array_like
        The current centroids :math:`\mu`, finite.
    q : (..., n, d) array_like
        Queries (routed by their directions :math:`\hat q_i`, :func:`nearest_centroid`).
    k : (..., m, d) array_like
        Keys.
    decay : float, default 0.999
        :math:`\lambda` in [0, 1] (the paper's 0.999).

    Returns
    -------
    centroids : ndarray of the shape of ``centroids``
        New centroids; the inputs are not modified (a training step has no hidden state here).
        The sums run over every token of every batch element that shares a set of centroids
        (over the leading dims of q and k that ``centroids`` does not have). A token with a NaN or
        Inf component is in no cluster and adds nothing; a cluster without members decays to
        :math:`\lambda\mu_c`.

    Notes
    -----
    The sums are the paper's, not means, so a centroid's norm grows with the number of its
    members; the routing of the next step measures distances to these centroids as they are.
    The official codes differ: google-research's ``online_kmeans`` keeps exponential moving
    averages of each cluster's count and sum (decay 0.999) and sets μ to their ratio, the moving
    mean of its members; lucidrains' ``Kmeans.update`` moves μ by an exponential moving average
    (decay 0.999) towards the normalised mean of its members.

    References
    ----------
    .. [1] A. Roy, M. Saffar, A. Vaswani, D. Grangier, "Efficient Content-Based Sparse Attention
       with Routing Transformers", TACL 2021, arXiv:2003.05997, §4.1.

    Examples
    --------
    >>> mu = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> q, k = np.array([[2.0, 0.0]]), np.array([[0.0, 3.0], [0.0, 1.0]])
    >>> update_centroids(mu, q, k, decay=0.5)
    array([[0.75, 0.  ],
           [0.  , 1. ]])
    """
    q, k = as_float("q", q, min_ndim=2), as_float("k", k, min_ndim=2)
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q has d={q.shape[-1]} but k has d={k.shape[-1]} (q shape {q.shape}, k shape {k.shape})")
    centroids = _check_centroids(centroids, q.shape[-1], "q and k")
    if isinstance(decay, (bool, np.bool_)) or not isinstance(decay, (int, float, np.integer, np.floating)) \
            or not 0.0 <= decay <= 1.0:
        raise ValueError(f"decay must be a real number in [0, 1], got {decay!r}")
    num_clusters, d = centroids.shape[-2], q.shape[-1]
    batch = broadcast_batch({"q": q.shape[:-2], "k": k.shape[:-2], "centroids": centroids.shape[:-2]})
    B = math.prod(batch)
    sums = np.zeros((B, num_clusters, d))                          # Σ over each cluster's members, per batch element
    for x in (q, k):
        L = x.shape[-2]
        clusters = np.broadcast_to(_clusters(_distances(x, centroids)), (*batch, L)).reshape(B, L)
        directions = np.broadcast_to(_directions(x), (*batch, L, d)).reshape(B, L, d)
        b, t = np.nonzero(clusters >= 0)
        np.add.at(sums, (b, clusters[b, t]), directions[b, t])
    sums = sums.reshape(*batch, num_clusters, d)
    lead = len(batch) - (centroids.ndim - 2)                       # batch dims the centroids do not have
    sums = sums.sum(axis=tuple(range(lead)))
    shared = tuple(a for a, size in enumerate(centroids.shape[:-2]) if size == 1 and sums.shape[a] != 1)
    sums = sums.sum(axis=shared, keepdims=True)
    return decay * centroids + (1.0 - decay) / 2.0 * sums         # μ ← λμ + (1 − λ)/2 (Σ q̂ + Σ k̂)


def routing_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    num_clusters: int | None = None,
    rng=None,
    centroids: ArrayLike | None = None,
    balanced: bool = False,
    causal: bool | str = False,
    scale: float | None = None,
    fully_masked: str = "zero",
    method: str = "auto",
    return_weights: bool = False,
) -> NDArray | tuple[NDArray, NDArray]:
    r"""Routing attention: each query attends the keys routed to its own centroid.

    .. math::

        \operatorname{out}_i = \sum_{j \in J_i}
        \frac{\exp(q_i^\top k_j / \sqrt{d})}{\sum_{l \in J_i} \exp(q_i^\top k_l / \sqrt{d})}\, v_j,
        \qquad J_i = \{\, j : c(k_j) = c(q_i) \,\} \;\; (\text{causal: and } j \le i)

    with :math:`c` the nearest centroid of the token's direction (:func:`nearest_centroid`).

    Parameters
    ----------
    q : (..., n, d) array_like
        Queries.
    k : (..., m, d) array_like
        Keys.
    v : (..., m, d_v) array_like
        Values.
    num_clusters : int, optional
        *k*, the number of centroids drawn from ``rng``: default ⌈√m⌉ (the paper's k = √n); must equal
        ``centroids.shape[-2]`` when both are given.
    rng : numpy.random.Generator or int, optional
        Source of the centroids (:func:`draw_centroids`) when ``centroids`` is not given; unused otherwise.
    centroids : (k, d) or (..., k, d) array_like, optional
        Explicit, finite centroids (e.g. learned ones, or the draw fed to another implementation);
        leading dims broadcast against those of q, k, v.
    balanced : bool, default False
        False: the paper's routing, every token to its nearest centroid. True: the official code's
        balanced routing, each centroid takes the ⌈n/k⌉ queries and the ⌈m/k⌉ keys nearest to it
        (ties to the earlier position), so a token may be in several clusters or in none; a query
        in several clusters outputs the mean of its clusters' attention outputs (see Notes).
    causal : {False, True, "top-left", "bottom-right"}, default False
        Within a cluster, query *i* sees keys ``j <= i`` (or ``j <= i + m − n``, bottom-right), by
        original position.
    scale : float, optional
        Multiplier of :math:`q_i^\top k_j`; default :math:`1/\sqrt{d}`.
    fully_masked : {"zero", "nan", "uniform"}, default "zero"
        Output of a query that sees no key: its cluster has no key (before it, causal), or it has
        no cluster (a NaN or Inf in it, or, balanced, no centroid took it); as in
        :func:`~refattn.scaled_dot_product_attention`.
    method : {"equation", "csr", "auto"}, default "auto"
        "equation": the dense definition, a masked softmax over the n × m scores (one per cluster
        when ``balanced``). "csr": the CSR kernel over the routed pairs only, O(n·m·d/k) time for
        balanced clusters and no n × m array (dense weights only when asked for). "auto": "csr", at
        every size (the kernel computes about 1/k of the scores that the dense path computes: at
        n = 4096, d = 64, k = 64 it is about 30 times faster; at k = 2 the two take about the same
        time).
    return_weights : bool, default False
        Also return the effective dense (..., n, m) weights (refused above the memory budget).

    Returns
    -------
    out : (..., n, d_v) ndarray
    weights : (..., n, m) ndarray
        Only if ``return_weights``; zero outside the routed pairs.

    Raises
    ------
    ValueError
        If neither ``rng`` nor ``centroids`` is given, ``centroids`` does not have d
        columns or is not finite, ``num_clusters`` disagrees with it, d = 0 with the default scale,
        or an option is unknown.

    Notes
    -----
    **Routing.** The paper's analysis takes unit queries and keys (‖Q_i‖ = ‖K_j‖ = 1, §4.1), where
    nearest-centroid search is maximum-inner-product search; here the routing sees the directions
    :math:`\hat q, \hat k` (as lucidrains' ``F.normalize``), and the attention the inputs as given,
    scaled :math:`1/\sqrt d`, so ``num_clusters=1`` is exactly softmax attention (causal too). The
    official TensorFlow code layer-normalises q and k (no scale, no bias) and attends with those,
    without the :math:`1/\sqrt d` scale. A token with a NaN or Inf component has no direction: it
    joins no cluster, so its key reaches no query and its query sees no key (``fully_masked``);
    the non-finite value never reaches another row.

    **Balanced routing** (google-research ``gather_cluster_attention_items``: ``top_k`` of the
    negative distances per centroid, indices sorted by position; lucidrains ``distribution``). A
    token may be taken by several centroids or by none. The official codes scatter the clusters'
    outputs back and average them, dividing by (count + 10⁻²) (google-research
    ``scatter_cluster_items``) or (count + 10⁻⁵) (lucidrains ``scatter_mean``); here the mean is
    exact and runs over the clusters in which the query sees at least one key (a causal cluster
    may have none before it), so each row of the effective matrix sums to 1. Causal masking is by
    original position, as in lucidrains (``q_idx >= kv_idx``); google-research masks by the rank
    within the window, which is the same only when queries and keys share their routing
    (``share_qk``). Balanced routing is the default of neither here nor the paper: it couples
    tokens across the sequence (whether a centroid takes token *i* depends on every other token's
    distance), so with ``causal`` a past output can change when a future token changes, and a
    decoder with a key/value cache does not reproduce it; nearest-centroid routing decides each
    token alone, so its causal form is future-independent.

    **Cost.** With every token routed to its nearest centroid and balanced clusters,
    :math:`\lvert J_i \rvert \approx m/k` and the CSR path costs :math:`O(n m d / k)` time and
    :math:`O(n m / k)` memory for the pairs, plus :math:`O((n + m) k d)` for the routing; the paper
    takes :math:`k = \sqrt n` for :math:`O(n^{1.5} d)`. The pairs are built vectorised in
    :math:`O(\mathrm{nnz} + (n + m)\log(n + m))`: tokens sorted by (cluster, position), each
    query's keys a contiguous run of that order.

    References
    ----------
    .. [1] A. Roy, M. Saffar, A. Vaswani, D. Grangier, "Efficient Content-Based Sparse Attention
       with Routing Transformers", TACL 2021, arXiv:2003.05997, §4.1.
    .. [2] google-research/google-research, ``routing_transformer/utils.py``
       (``clustered_local_attention_helper``, ``cluster_items``, ``online_kmeans``).
    .. [3] lucidrains/routing-transformer, ``routing_transformer/routing_transformer.py``
       (``Kmeans``, ``KmeansAttention``).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 8, 4))
    >>> out, A = routing_attention(q, k, v, num_clusters=2, rng=1, return_weights=True)
    >>> clusters = nearest_centroid(q, draw_centroids(1, 2, 4)), nearest_centroid(k, draw_centroids(1, 2, 4))
    >>> bool(np.all((A > 0) == (clusters[0][:, None] == clusters[1][None, :])))
    True
    >>> exact = routing_attention(q, k, v, num_clusters=1, rng=1)
    >>> bool(np.allclose(exact, scaled_dot_product_attention(q, k, v)))
    True
    """
    q, k, v, _ = checked_qkv(q, k, v)
    if centroids is None and num_clusters is None:
        num_clusters = math.isqrt(max(k.shape[-2], 1) - 1) + 1        # ⌈√m⌉, at least 1
    centroids = given_or_drawn("routing", "centroids", centroids, optional_rng(rng),
                               lambda r: draw_centroids(r, num_clusters, q.shape[-1]), what="its centroids")
    result = _routing(q, k, v, centroids, num_clusters=num_clusters, balanced=balanced, causal=causal, scale=scale,
                      fully_masked=fully_masked, method=method, return_weights=return_weights)
    if not return_weights:
        return result.output
    note_allowed(result.allowed)                                   # the routed pairs
    return result.output, result.weights


def _routing(q, k, v, centroids, *, num_clusters, balanced, causal, scale, fully_masked, method,
             return_weights) -> AttentionResult:
    """Checked routing attention with given centroids: the output, and with weights the routed pairs too."""
    check_choice("method", method, METHODS)
    check_choice("fully_masked", fully_masked, FULLY_MASKED_POLICIES)
    balanced = check_bool("balanced", balanced)
    return_weights = check_bool("return_weights", return_weights)
    q, k, v, batch = checked_qkv(q, k, v)
    alignment = causal_alignment(causal)
    n, m, d = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = default_scale(d) if scale is None else check_scale(scale)
    centroids = _check_centroids(centroids, d, "q and k")
    if num_clusters is not None and check_positive_int("num_clusters", num_clusters) != centroids.shape[-2]:
        raise ValueError(f"num_clusters={num_clusters} but centroids has {centroids.shape[-2]} rows "
                         f"(shape {centroids.shape})")
    batch = broadcast_batch({"q, k, v": batch, "centroids": centroids.shape[:-2]})
    if return_weights:
        check_weights_fit(batch, n, m)
    q, k, v = (np.broadcast_to(x, (*batch, *x.shape[-2:])) for x in (q, k, v))
    if balanced:
        num_clusters = centroids.shape[-2]
        member_q = _windows(_distances(q, centroids), -(-n // num_clusters))   # (..., k, ⌈n/k⌉) nearest queries
        member_k = _windows(_distances(k, centroids), -(-m // num_clusters))   # (..., k, ⌈m/k⌉) nearest keys
    else:
        member_q = _clusters(_distances(q, centroids))[..., None, :]   # (..., 1, n) each query's one cluster
        member_k = _clusters(_distances(k, centroids))[..., None, :]   # (..., 1, m)
    attend = _equation if method == "equation" else _csr             # "auto" is "csr"
    return attend(q, k, v, member_q, member_k, balanced=balanced, alignment=alignment, scale=scale,
                  fully_masked=fully_masked, return_weights=return_weights)


# --- routing -----------------------------------------------------------------------------------------

def _directions(x: NDArray) -> NDArray:
    """x / ‖x‖ row by row (‖x‖ measured on x / max|x|, so that large finite rows keep their direction); a zero
    row stays 0, a row with NaN or Inf is NaN (it has no direction)."""
    finite = np.isfinite(x).all(axis=-1, keepdims=True)
    x = np.where(finite, x, 0.0)
    top = np.max(np.abs(x), axis=-1, keepdims=True, initial=0.0)
    x = x / np.where(top > 0, top, 1.0)
    norm = np.linalg.norm(x, axis=-1, keepdims=True)
    return np.where(finite, x / np.where(norm > 0, norm, 1.0), np.nan)


def _distances(x: NDArray, centroids: NDArray) -> NDArray:
    """(..., L, k): ‖μ_c‖² − 2 x̂ᵀμ_c, the squared distance less the constant ‖x̂‖²; NaN rows for non-finite tokens."""
    directions = _directions(x)                                   # (..., L, d)
    return np.sum(centroids**2, axis=-1)[..., None, :] - 2.0 * (directions @ np.swapaxes(centroids, -1, -2))


def _clusters(dist: NDArray) -> NDArray:
    """(..., L) nearest centroid of each token, −1 for a token without a direction (NaN distances)."""
    finite = ~np.isnan(dist).any(axis=-1)
    nearest = np.argmin(np.where(finite[..., None], dist, 0.0), axis=-1)
    return np.where(finite, nearest, -1).astype(np.int64)


def _windows(dist: NDArray, w: int) -> NDArray:
    """(..., k, w) balanced routing: each centroid's w nearest tokens (ties to the earlier position), sorted
    by position; −1 pads a window when fewer than w tokens have a direction."""
    L = dist.shape[-2]
    finite = ~np.isnan(dist).any(axis=-1)                          # (..., L)
    by_centroid = np.swapaxes(np.where(finite[..., None], dist, np.inf), -1, -2)   # (..., k, L)
    nearest = np.argsort(by_centroid, axis=-1, kind="stable")[..., :w]             # (..., k, w)
    taken = np.take_along_axis(np.broadcast_to(finite[..., None, :], by_centroid.shape), nearest, axis=-1)
    window = np.sort(np.where(taken, nearest, L), axis=-1)         # the untaken (L) last
    return np.where(window < L, window, -1).astype(np.int64)


def _check_centroids(centroids, d: int, against: str) -> NDArray:
    centroids = as_float("centroids", centroids)
    if centroids.ndim < 2:
        raise ValueError(f"centroids must have shape (k, d) or (..., k, d), got shape {centroids.shape}")
    if centroids.shape[-1] != d:
        raise ValueError(f"centroids has d={centroids.shape[-1]} columns but {against} have d={d} "
                         f"(centroids shape {centroids.shape})")
    if centroids.shape[-2] < 1:
        raise ValueError(f"centroids must have at least one row (one cluster), got shape {centroids.shape}")
    if not np.isfinite(centroids).all():
        raise ValueError(f"centroids must be finite, got a NaN or Inf in shape {centroids.shape}")
    return centroids


# --- attention over the routed pairs ------------------------------------------------------------------
#
# Both paths take the memberships as windows: member_q (..., C, W) lists, for each of C windows, the query
# positions in it (−1 pads). Nearest-centroid routing is one window (C = 1) holding every query's cluster id
# instead: there a query and a key are paired when their ids agree. Balanced routing has a window per centroid,
# and a query and a key are paired when they are in the same window.

def _window_mask(window: NDArray, L: int) -> NDArray:
    """(..., C, W) positions (−1 pads) → (..., C, L) membership."""
    mask = np.zeros((*window.shape[:-1], L + 1), dtype=bool)
    np.put_along_axis(mask, np.where(window >= 0, window, L), True, axis=-1)
    return mask[..., :L]


def _causal_pairs(alignment, n: int, m: int):
    """(n, m) causal mask by original position, or True."""
    if alignment is None:
        return True
    delta = 0 if alignment == "top-left" else m - n
    return np.arange(m)[None, :] <= np.arange(n)[:, None] + delta


def _equation(q, k, v, member_q, member_k, *, balanced, alignment, scale, fully_masked, return_weights):
    """The definition: per cluster c, a softmax over the pairs J_c = {(i, j) : i ∈ Q_c, j ∈ K_c, causal};
    each query averages the outputs of the clusters in which it sees a key (nearest-centroid routing: one)."""
    n, m = q.shape[-2], k.shape[-2]
    causal_ok = _causal_pairs(alignment, n, m)
    total = np.zeros((*q.shape[:-1], v.shape[-1]))                 # (..., n, d_v)  Σ_c out_c
    A = np.zeros((*q.shape[:-1], m))                               # (..., n, m)    Σ_c A_c
    allowed = np.zeros((*q.shape[:-1], m), dtype=bool)             # (..., n, m)    ∪_c J_c
    count = np.zeros(q.shape[:-1])                                 # (..., n)       clusters where i sees a key
    for J in _cluster_pairs(member_q, member_k, balanced, n, m):
        J = J & causal_ok                                          # (..., n, m)
        out_c, A_c = scaled_dot_product_attention(q, k, v, J, scale=scale, return_weights=True, method="equation")
        total += out_c                                             # 0 in the rows that see no key of c
        A += np.where(J, A_c, 0.0)
        allowed |= J
        count += J.any(axis=-1)
    return _mean_over_clusters(total, A if return_weights else None, allowed, count, v, fully_masked)


def _cluster_pairs(member_q: NDArray, member_k: NDArray, balanced: bool, n: int, m: int):
    """The (..., n, m) pairs routed together, one mask per cluster (nearest-centroid routing: all in one mask,
    since each token is in one cluster at most)."""
    if not balanced:
        c_q, c_k = member_q[..., 0, :, None], member_k[..., 0, None, :]
        yield (c_q == c_k) & (c_q >= 0)
        return
    in_q, in_k = _window_mask(member_q, n), _window_mask(member_k, m)   # (..., k, n), (..., k, m)
    for c in range(in_q.shape[-2]):
        yield in_q[..., c, :, None] & in_k[..., c, None, :]


def _csr(q, k, v, member_q, member_k, *, balanced, alignment, scale, fully_masked, return_weights):
    """The CSR kernel over the routed pairs only, every token sorted by (batch element, cluster, position).

    Rows are the (cluster, query) memberships, columns the key memberships in that order, so each cluster's
    keys are one contiguous run and a row keeps a run of it (all of it, or causal a prefix, found by binary
    search): the pattern is built vectorised in O(nnz), nothing is n × m, and the kernel reads each cluster's
    keys from one block. Rows are then averaged per query as in :func:`_equation`.
    """
    batch, (n, m), d, d_v = q.shape[:-2], (q.shape[-2], k.shape[-2]), q.shape[-1], v.shape[-1]
    B = math.prod(batch)
    row_b, row_cluster, row_position = _memberships(member_q.reshape(B, *member_q.shape[-2:]), balanced)
    col_b, col_cluster, col_position = _memberships(member_k.reshape(B, *member_k.shape[-2:]), balanced)
    G, span = int(max(row_cluster.max(initial=-1), col_cluster.max(initial=-1))) + 1, max(n, m, 1)
    row_code = (row_b * G + row_cluster) * span + row_position     # (batch element, cluster, position) as one int
    col_code = (col_b * G + col_cluster) * span + col_position
    rows, cols = np.argsort(row_code, kind="stable"), np.argsort(col_code, kind="stable")
    row_code, col_code = row_code[rows], col_code[cols]
    row_query = (row_b * n + row_position)[rows]                   # (R,)  the query b·n + i of each row
    col_key = (col_b * m + col_position)[cols]                     # (C,)  the key b·m + j of each column
    group_start = row_code - row_code % span                       # the code of (b, cluster, position 0)
    if alignment is None:
        limit = m
    else:                                                          # keep positions j < limit
        limit = np.clip(row_position[rows] + 1 + (0 if alignment == "top-left" else m - n), 0, m)
    lo = np.searchsorted(col_code, group_start)
    hi = np.searchsorted(col_code, group_start + limit)
    pattern = SparsePattern.from_row_ranges(lo, hi, len(col_key))  # row r keeps columns lo_r … hi_r − 1
    result = sparse_attention(q.reshape(B * n, d)[row_query][None], k.reshape(B * m, d)[col_key][None],
                              v.reshape(B * m, d_v)[col_key][None], pattern, scale=scale,
                              return_weights=return_weights, method="csr")
    out_rows, w = (result[0][0], result[1][0]) if return_weights else (result[0], None)
    sees = pattern.row_counts() > 0
    total = np.zeros((B * n, d_v))
    np.add.at(total, row_query[sees], out_rows[sees])              # Σ_c out_c, query by query
    count = np.bincount(row_query[sees], minlength=B * n).astype(np.float64)
    A = allowed = None
    if return_weights:
        pairs = (row_query[pattern.row_ids()], col_key[pattern.indices] % m)
        A, allowed = np.zeros((B * n, m)), np.zeros((B * n, m), dtype=bool)
        np.add.at(A, pairs, w)
        allowed[pairs] = True
    shaped = [None if x is None else x.reshape(*batch, n, *x.shape[1:]) for x in (total, A, allowed, count)]
    return _mean_over_clusters(*shaped, v, fully_masked)


def _memberships(member: NDArray, balanced: bool):
    """(B, C, W) windows → flat (b, cluster, position) of every membership."""
    if balanced:
        b, c, t = np.nonzero(member >= 0)
        return b, c, member[b, c, t]
    b, position = np.nonzero(member[:, 0] >= 0)                    # one window: the cluster ids
    return b, member[b, 0, position], position


def _mean_over_clusters(total, A, allowed, count, v, fully_masked) -> AttentionResult:
    """Σ_c out_c / count per query; a query that sees no key in any cluster follows ``fully_masked``."""
    none = count == 0                                              # (..., n)
    out = total / np.where(none, 1.0, count)[..., None]
    m = v.shape[-2]
    if fully_masked == "nan":
        out[none] = np.nan
    elif fully_masked == "uniform":                                # the mean of all m values (0 for m = 0)
        out = np.where(none[..., None], v.sum(axis=-2, keepdims=True) / max(m, 1), out)
    if A is None:
        return AttentionResult(out)
    A = A / np.where(none, 1.0, count)[..., None]
    if fully_masked != "zero":
        A = np.where(none[..., None], np.nan if fully_masked == "nan" else 1.0 / max(m, 1), A)
    return AttentionResult(out, A, allowed)


RECORD = Mechanism.of(
    routing_attention,
    id="routing", title="Routing Transformer", family="sparse", section="4.1.2", paper=ROUTING,
    equation=r"\operatorname{out}_i = \sum_{j : c(k_j) = c(q_i)} \operatorname{softmax}_j"
             r"\!\left(\frac{q_i^\top k_j}{\sqrt{d}}\right) v_j, \quad c(x) = \operatorname*{argmin}_c "
             r"\lVert x/\lVert x\rVert - \mu_c \rVert",
    time="O(n·m·d/k + (n + m)·k·d)", memory="O(n·m/k)", kind="attention", methods=("equation", "csr", "bsr", "auto"),
    causal=True, content_selected=True,
    examples=({"num_clusters": 2}, {"balanced": True}),
    figure="refattn.figures.routing:routing", exact_options={"num_clusters": 1}, exact_limit="one cluster (k = 1)",
    draws=("centroids",),
)
