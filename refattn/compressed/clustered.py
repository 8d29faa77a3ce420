r"""Clustered attention (Vyas, Katharopoulos, Fleuret, 2020, arXiv:2007.04825v2, §3.2; survey §4.3.1).

The n queries are grouped into C clusters; each cluster's centroid attends to every key, and each
query takes its centroid's attention:

    S ∈ {0, 1}^{n × C},  S_ij = 1 iff query i is in cluster j
    Q^c_j = Σ_i S_ij Q_i / Σ_i S_ij                          centroid: the mean of its members
    A^c   = softmax(Q^c Kᵀ / √d_k)                          (C, m)
    V̂^c   = A^c V                                           (C, d_v)
    V̂_i   = Σ_j S_ij V̂^c_j                                  every member gets its centroid's output

so the effective attention matrix has the rows A_i = A^c_{c(i)}, c(i) the cluster of query i.
Time O(C·m·d) for the attention instead of O(n·m·d).

The clusters come from K-means in Hamming space (§3.2.1), as in the official code:

    h(x)_b = [a_bᵀx > t_b],  b = 1 … B      B random hyperplanes (a_b, t_b) ~ N(0, I_{d+1})
    Lloyd iterations on the B-bit codes: assign each code to the nearest centroid code
    (Hamming distance), then set each centroid bit to its members' majority bit.

The hash planes and the initial centroids (C distinct queries, whose codes start the iterations)
are random: :func:`draw_hash_planes` and :func:`draw_initial_centroids` draw them from an explicit
``rng``, and every function here also takes them back (``planes=``, ``initial=``) so that another
implementation can be fed the same draw, or takes the cluster assignment itself
(``assignment=``), which skips the clustering.
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.budget import check_fits
from ..common.checks import as_float, as_rng, broadcast_batch, check_bool, check_qkv, check_scale, default_scale
from ..common.ints import check_non_negative_int, check_positive_int
from ..core.sdpa import scaled_dot_product_attention
from ..deprecation import none_is_auto
from ..draws import given_or_drawn, optional_rng
from ..mechanism import Mechanism
from ..papers import VYAS
from ..sparse.pattern import as_indices

__all__ = [
    "cluster_queries",
    "clustered_attention",
    "draw_hash_planes",
    "draw_initial_centroids",
    "hamming_kmeans",
    "hash_queries",
    "query_centroids",
]

BITS, ITERATIONS = 63, 10                          # the official builder's defaults (see clustered_attention)
CLUSTERS = 3                                       # C when nothing gives it (the official code has no default)


# --- hashing ----------------------------------------------------------------------------------------

def draw_hash_planes(rng, bits: int, d: int, *, hash_bias: bool = True) -> NDArray:
    r"""Draw the B random hyperplanes that hash the queries to B bits.

    .. math::

        (a_b, t_b) \sim \mathcal{N}(0, I_{d+1}), \quad b = 1, \dots, B

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw.
    bits : int
        *B*, the number of bits (hyperplanes).
    d : int
        Width of the queries.
    hash_bias : bool, default True
        Draw the offsets :math:`t_b` (hyperplanes that miss the origin, so that the Hamming
        distance follows the Euclidean distance); ``False`` sets them to 0 (hyperplanes through the
        origin: the Hamming distance follows the angle).

    Returns
    -------
    planes : (bits, d + 1) ndarray
        Row *b* is :math:`(a_b, t_b)`: the normal in its first *d* columns, the offset in the last.

    Notes
    -----
    The draw is ``rng.standard_normal((bits, d + 1))``, then, with ``hash_bias=False``, the last
    column set to 0: the official ``normal_(planes)`` then ``planes[:, -1] = 0``, in one
    generator instead of PyTorch's.

    Examples
    --------
    >>> draw_hash_planes(0, 4, 3).shape
    (4, 4)
    >>> draw_hash_planes(0, 4, 3, hash_bias=False)[:, -1]
    array([0., 0., 0., 0.])
    """
    rng = as_rng(rng)
    bits, d = check_positive_int("bits", bits), check_non_negative_int("d", d)
    planes = rng.standard_normal((bits, d + 1))               # (B, d + 1)  (a_b, t_b) ~ N(0, I)
    if not check_bool("hash_bias", hash_bias):
        planes[:, -1] = 0.0                                        # through the origin
    return planes


def hash_queries(q: ArrayLike, planes: ArrayLike) -> NDArray:
    r"""The B-bit codes of the queries: bit *b* is set where the query lies beyond hyperplane *b*.

    .. math::

        h(x)_b = [\, a_b^\top x > t_b \,]

    Parameters
    ----------
    q : (..., n, d) array_like
        Queries.
    planes : (B, d + 1) or (..., B, d + 1) array_like
        The hyperplanes of :func:`draw_hash_planes`: normals in the first *d* columns, offsets in
        the last; leading dims broadcast against those of ``q``.

    Returns
    -------
    hashes : (..., n, B) ndarray of bool

    Notes
    -----
    A query with a NaN coordinate has every bit its projection touches unset (NaN > t is false).
    The official code packs the bits into one int64 (bit *b* of the integer is :math:`h_b`, so it
    takes B ≤ 63 there) and projects in float32; here they stay a boolean array, projected in
    float64, so a projection within float32 rounding of its offset may hash differently there.

    Examples
    --------
    >>> planes = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.5]])     # x₁ > 0, x₂ > 0.5
    >>> hash_queries(np.array([[2.0, 0.0], [-1.0, 1.0]]), planes)
    array([[ True, False],
           [False,  True]])
    """
    q = as_float("q", q, min_ndim=2)
    planes = check_planes(planes, q.shape[-1])
    normals, offsets = planes[..., :-1], planes[..., -1]           # (..., B, d), (..., B)
    with np.errstate(invalid="ignore", over="ignore"):
        projections = q @ np.swapaxes(normals, -1, -2)             # (..., n, B)  a_bᵀ x
    return projections > offsets[..., None, :]                     # (..., n, B)  [a_bᵀ x > t_b]


# --- K-means in Hamming space -----------------------------------------------------------------------

def draw_initial_centroids(rng, n: int, num_clusters: int) -> NDArray:
    r"""Draw C distinct queries whose codes start the K-means iterations.

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw.
    n : int
        Number of queries.
    num_clusters : int
        *C*, at most ``n``.

    Returns
    -------
    initial : (num_clusters,) ndarray of int64
        Query indices, distinct, in the order drawn (the order numbers the clusters).

    Notes
    -----
    The draw is ``rng.choice(n, size=C, replace=False)``, as the official
    ``np.random.choice(L, size=[clusters], replace=False)`` with NumPy's global generator.

    Examples
    --------
    >>> initial = draw_initial_centroids(0, 10, 4)
    >>> initial.shape, len(set(initial.tolist()))
    ((4,), 4)
    """
    rng = as_rng(rng)
    n, num_clusters = check_non_negative_int("n", n), check_positive_int("num_clusters", num_clusters)
    if num_clusters > n:
        raise ValueError(f"cannot draw num_clusters={num_clusters} distinct queries as initial centroids from n={n}")
    return rng.choice(n, size=num_clusters, replace=False).astype(np.int64)


def hamming_kmeans(hashes: ArrayLike, initial: ArrayLike, *, iterations: int = ITERATIONS) -> NDArray:
    r"""K-means on B-bit codes under the Hamming distance (Lloyd's iterations): each query's cluster.

    .. math::

        c(i) &= \operatorname*{arg\,min}_j \; \lVert h_i \oplus \mu_j \rVert_1
            \qquad \text{(Hamming distance; the first } j \text{ on a tie)} \\
        \mu_{j,b} &= \Big[\, \#\{i : c(i) = j,\ h_{i,b} = 1\} > \#\{i : c(i) = j,\ h_{i,b} = 0\} \,\Big]

    starting from :math:`\mu_j = h_{\text{initial}_j}`, alternating the two steps, and ending with
    an assignment: ``iterations`` assignments and ``iterations - 1`` centroid updates.

    Parameters
    ----------
    hashes : (..., n, B) array_like of bool
        The codes of :func:`hash_queries`.
    initial : (C,) or (..., C) array_like of int
        Distinct query indices whose codes are the initial centroids (:func:`draw_initial_centroids`);
        leading dims broadcast against those of ``hashes``.
    iterations : int, default 10
        Number of assignment steps (the official ``iterations``).

    Returns
    -------
    assignment : (..., n) ndarray of int64
        The cluster of each query, in ``range(C)``.

    Notes
    -----
    As the official ``clustering/hamming/cluster_cpu.cpp``: ties go to the lowest cluster index
    (its ``d < mind``), and a bit whose members are split evenly is 0 (its ``counts[b] > 0``). A
    cluster left without members keeps its code here; the official code gives it a random code
    from an unseeded ``std::random_device``, which no seed reproduces (a random 63-bit code, about
    31 bits from every query, rarely wins a query back, so both usually leave it empty).

    Each step can only lower the total distance :math:`\sum_i \lVert h_i \oplus \mu_{c(i)} \rVert_1`
    (the assignment minimises it given the centroids, the majority bit given the clusters).

    Examples
    --------
    >>> hashes = np.array([[0, 0, 0], [0, 0, 1], [1, 1, 1], [1, 1, 0]], dtype=bool)
    >>> hamming_kmeans(hashes, [0, 2])
    array([0, 0, 1, 1])
    """
    hashes = np.asarray(hashes)
    if hashes.dtype != bool or hashes.ndim < 2:
        raise TypeError(f"hashes must be a boolean array of shape (..., n, B), got dtype {hashes.dtype} "
                        f"with shape {hashes.shape}")
    iterations = check_positive_int("iterations", iterations)
    n, B = hashes.shape[-2:]
    initial = check_initial(initial, n)
    batch = broadcast_batch({"hashes": hashes.shape[:-2], "initial": initial.shape[:-1]})
    hashes = np.broadcast_to(hashes, (*batch, n, B))
    C = initial.shape[-1]
    if n == 0:
        return np.zeros((*batch, 0), dtype=np.int64)
    check_fits("the Hamming distances to the centroids", (*batch, n, C))
    mu = np.take_along_axis(hashes, np.broadcast_to(initial, (*batch, C))[..., None], axis=-2)   # (..., C, B)
    H = hashes.astype(np.float64)                                  # (..., n, B)  bits as 0/1
    for _ in range(iterations - 1):
        member = _nearest(H, mu)[..., None] == np.arange(C)        # (..., n, C)  S_ij
        size = member.sum(axis=-2)                                 # (..., C)  |cluster j|
        ones = np.swapaxes(member, -1, -2).astype(np.float64) @ H  # (..., C, B)  members with bit b set
        majority = 2 * ones > size[..., None]                      # (..., C, B)  more ones than zeros
        mu = np.where(size[..., None] > 0, majority, mu)           # an empty cluster keeps its code
    return _nearest(H, mu)


def _nearest(H: NDArray, mu: NDArray) -> NDArray:
    """The nearest centroid code of each code (the first on a tie): H (..., n, B) as 0/1, mu (..., C, B) bool."""
    B = H.shape[-1]
    X, Y = 2.0 * H - 1.0, 2.0 * mu - 1.0                           # bits as ±1: X·Y = B − 2·(Hamming distance)
    D = (B - X @ np.swapaxes(Y, -1, -2)) / 2                       # (..., n, C)  ‖h_i ⊕ μ_j‖₁
    return np.argmin(D, axis=-1).astype(np.int64)                  # (..., n)  c(i)


def cluster_queries(
    q: ArrayLike, num_clusters: int | None = None, *, bits: int | None = None, iterations: int = ITERATIONS,
    hash_bias: bool = True, rng=None, planes: ArrayLike | None = None, initial: ArrayLike | None = None,
) -> NDArray:
    r"""Cluster the queries as clustered attention does: hash them to B bits, then Hamming K-means.

    Parameters
    ----------
    q : (..., n, d) array_like
        Queries.
    num_clusters : int, optional
        *C*, the number of clusters (the official ``clusters``); default ``initial``'s length, or 3
        when drawing ``initial``. Capped at *n*: more clusters than queries start from every
        query (see Notes).
    bits : int, optional
        *B*, the bits of the hash; default 63, or ``planes``' rows.
    iterations : int, default 10
        Lloyd iterations (assignment steps) of :func:`hamming_kmeans`.
    hash_bias : bool, default True
        Hyperplanes with random offsets when drawing ``planes`` (see :func:`draw_hash_planes`).
    rng : numpy.random.Generator or int, optional
        Source of the draws not given: ``planes`` first, then ``initial``.
    planes : (B, d + 1) or (..., B, d + 1) array_like, optional
        Explicit hyperplanes (:func:`draw_hash_planes`).
    initial : (C,) or (..., C) array_like of int, optional
        Explicit initial centroids: distinct query indices (:func:`draw_initial_centroids`).

    Returns
    -------
    assignment : (..., n) ndarray of int64
        The cluster of each query, in ``range(C)``; :func:`clustered_attention` with
        ``assignment=`` this gives the same result as with the same ``rng`` (or draws).

    Notes
    -----
    The official code draws ``initial`` with ``np.random.choice(L, size=[clusters],
    replace=False)``, which raises for C > L; here C is capped at n (every query starts as its own
    centroid), so that short sequences and n = 0 work.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q = np.concatenate([rng.normal(-3, 0.1, (3, 2)), rng.normal(3, 0.1, (3, 2))])
    >>> cluster_queries(q, 2, rng=1)                   # two well separated groups
    array([0, 0, 0, 1, 1, 1])
    """
    q = as_float("q", q, min_ndim=2)
    assignment, _, _ = resolve_clusters("cluster_queries", q, num_clusters, bits, iterations, hash_bias, rng, planes,
                                        initial, None)
    return assignment


def check_planes(planes: ArrayLike, d: int) -> NDArray:
    """``planes`` as a float array of shape (..., B, d + 1), B >= 1, or a ``ValueError`` naming the shapes."""
    planes = as_float("planes", planes)
    if planes.ndim < 2 or planes.shape[-1] != d + 1 or planes.shape[-2] < 1:
        raise ValueError(f"planes must have shape (B, d + 1) = (B, {d + 1}) with B >= 1 (normals, then the offset), "
                         f"got shape {planes.shape} for queries of d={d}")
    return planes


def check_initial(initial: ArrayLike, n: int) -> NDArray:
    """``initial`` as int64 query indices (..., C): in [0, n), distinct along the last axis, C >= 1 unless n = 0."""
    initial = as_indices("initial", initial, ndim=None)
    if initial.ndim < 1:
        raise ValueError(f"initial must have shape (C,) or (..., C), got shape {initial.shape}")
    C = initial.shape[-1]
    if n > 0 and C == 0:
        raise ValueError(f"initial must name at least one query to start a cluster, got shape {initial.shape}")
    if initial.size and (initial.min() < 0 or initial.max() >= n):
        raise ValueError(f"initial must hold query indices in [0, n={n}), got values in "
                         f"[{initial.min()}, {initial.max()}]")
    initial = initial.astype(np.int64)
    ordered = np.sort(initial, axis=-1)
    if np.any(ordered[..., 1:] == ordered[..., :-1]):
        raise ValueError(f"initial must hold distinct query indices, got a repeated one in shape {initial.shape}")
    return initial


def check_assignment(assignment: ArrayLike, n: int, num_clusters: int | None) -> tuple[NDArray, int]:
    """``assignment`` as int64 (..., n) clusters in [0, C), and C (``num_clusters``, or one more than the largest)."""
    assignment = as_indices("assignment", assignment, ndim=None)
    if assignment.ndim < 1 or assignment.shape[-1] != n:
        raise ValueError(f"assignment must have shape (..., n) with n={n} queries, got shape {assignment.shape}")
    top = int(assignment.max()) + 1 if assignment.size else 0
    C = top if num_clusters is None else check_non_negative_int("num_clusters", num_clusters)
    if assignment.size and (assignment.min() < 0 or top > C):
        raise ValueError(f"assignment must hold clusters in [0, num_clusters={C}), got values in "
                         f"[{assignment.min()}, {top - 1}]")
    return assignment.astype(np.int64), C


def resolve_clusters(by: str, q: NDArray, num_clusters, bits, iterations, hash_bias, rng, planes, initial,
                     assignment):
    """Each query's cluster, and the draws it came from: ``(assignment, planes, initial)``.

    An explicit ``assignment`` is checked and used as it is (``planes`` and ``initial`` are then
    None: nothing was hashed); otherwise what is not given is drawn from ``rng`` (planes first, then
    initial; :func:`~refattn.draws.given_or_drawn`), the queries hashed and clustered.
    ``num_clusters`` is C (default ``CLUSTERS`` when drawing; capped at n). Shared by every clustered
    mechanism, so that the same options give the same clusters; ``by`` names the caller in messages.
    """
    n, d = q.shape[-2:]
    iterations = check_positive_int("iterations", iterations)
    hash_bias = check_bool("hash_bias", hash_bias)
    if assignment is not None:
        if planes is not None or initial is not None:
            raise ValueError(f"{by}: assignment replaces the clustering; pass no planes or initial with it")
        assignment, _ = check_assignment(assignment, n, num_clusters)
        return assignment, None, None
    if bits is not None:
        bits = check_positive_int("bits", bits)
    rng = optional_rng(rng)                                        # one generator for both draws
    planes = given_or_drawn(by, "planes", planes, rng, what="the hash planes",
                            draw=lambda r: draw_hash_planes(r, BITS if bits is None else bits, d, hash_bias=hash_bias))
    planes = check_planes(planes, d)
    if bits is not None and bits != planes.shape[-2]:
        raise ValueError(f"bits={bits} but planes has {planes.shape[-2]} rows (shape {planes.shape})")
    C = None if num_clusters is None else min(check_positive_int("num_clusters", num_clusters), n)   # C <= n
    drawn = min(CLUSTERS, n) if C is None else C
    initial = given_or_drawn(by, "initial", initial, rng, what="the initial centroids",
                             draw=lambda r: draw_initial_centroids(r, n, drawn) if n else np.zeros(0, dtype=np.int64))
    initial = check_initial(initial, n)
    if C is not None and C != initial.shape[-1]:
        raise ValueError(f"num_clusters={num_clusters} (capped at n={n}) but initial names {initial.shape[-1]} "
                         f"queries (shape {initial.shape})")
    assignment = hamming_kmeans(hash_queries(q, planes), initial, iterations=iterations)
    return assignment, planes, initial


# --- attention --------------------------------------------------------------------------------------

def query_centroids(q: ArrayLike, assignment: ArrayLike, num_clusters: int | None = None) -> NDArray:
    r"""The centroid of each cluster: the mean of its member queries.

    .. math::

        Q^c_j = \frac{\sum_i S_{ij} Q_i}{\sum_i S_{ij}}

    Parameters
    ----------
    q : (..., n, d) array_like
        Queries.
    assignment : (..., n) array_like of int
        The cluster of each query, in ``range(C)``.
    num_clusters : int, optional
        *C*; default one more than the largest cluster index.

    Returns
    -------
    centroids : (..., C, d) ndarray
        Zero for a cluster without members (no query reads it).

    Notes
    -----
    The sums run over the members only (``numpy.add.at``, in query order), not through a
    one-hot matrix product, so a NaN or Inf query reaches its own centroid and no other
    (0 · Inf would be NaN).

    Examples
    --------
    >>> query_centroids(np.array([[1.0], [3.0], [10.0]]), [0, 0, 1])
    array([[ 2.],
           [10.]])
    """
    q = as_float("q", q, min_ndim=2)
    n, d = q.shape[-2:]
    assignment, C = check_assignment(assignment, n, num_clusters)
    batch = broadcast_batch({"q": q.shape[:-2], "assignment": assignment.shape[:-1]})
    flat = int(np.prod(batch, dtype=np.int64))
    flat_q = np.broadcast_to(q, (*batch, n, d)).reshape(flat, n, d)
    flat_a = np.broadcast_to(assignment, (*batch, n)).reshape(flat, n)
    rows = np.arange(flat)[:, None]
    sums = np.zeros((flat, C, d))
    np.add.at(sums, (rows, flat_a), flat_q)                        # (B, C, d)  Σ_i S_ij Q_i
    counts = np.zeros((flat, C))
    np.add.at(counts, (rows, flat_a), 1.0)                         # (B, C)  Σ_i S_ij
    centroids = sums / np.maximum(counts, 1.0)[..., None]          # (B, C, d)  Q^c
    return centroids.reshape(*batch, C, d)


def clustered_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    num_clusters: int | None = None,
    bits: int | None = None,
    iterations: int = ITERATIONS,
    hash_bias: bool = True,
    scale: float | None = None,
    causal: bool = False,
    rng=None,
    planes: ArrayLike | None = None,
    initial: ArrayLike | None = None,
    assignment: ArrayLike | None = None,
    method: str = "auto",
    return_weights: bool = False,
) -> NDArray | tuple[NDArray, NDArray]:
    r"""Clustered attention: each cluster's centroid attends to all keys; its members take its output.

    .. math::

        Q^c_j = \frac{\sum_i S_{ij} Q_i}{\sum_i S_{ij}}, \qquad
        A^c = \operatorname{softmax}\Big(\frac{Q^c K^\top}{\sqrt{d_k}}\Big), \qquad
        \hat V_i = \sum_j S_{ij}\, (A^c V)_j

    Parameters
    ----------
    q : (..., n, d_k) array_like
        Queries; only they are clustered.
    k : (..., m, d_k) array_like
        Keys.
    v : (..., m, d_v) array_like
        Values.
    num_clusters : int, optional
        *C*, the number of clusters (the official ``clusters``, which has no default); default
        ``initial``'s length or ``assignment``'s largest cluster + 1, else 3 (a small demonstration
        size). Capped at *n* (see :func:`cluster_queries`).
    bits : int, optional
        *B*, the bits of the hash; default 63 (the official builder's default; the class's own is
        32), or ``planes``' rows.
    iterations : int, default 10
        Lloyd iterations of the Hamming K-means (the official default).
    hash_bias : bool, default True
        Hyperplanes with random offsets (the official default), else through the origin; used
        when drawing ``planes``.
    scale : float, optional
        Multiplier of :math:`Q^c K^\top`; default :math:`1/\sqrt{d_k}`.
    causal : bool, default False
        Must be False: clustered attention has no causal form (see Notes).
    rng : numpy.random.Generator or int, optional
        Source of ``planes`` and ``initial`` when they are not given (unused with ``assignment``,
        which takes neither).
    planes : (B, d_k + 1) or (..., B, d_k + 1) array_like, optional
        Explicit hash hyperplanes (:func:`draw_hash_planes`).
    initial : (C,) or (..., C) array_like of int, optional
        Explicit initial centroids, distinct query indices (:func:`draw_initial_centroids`).
    assignment : (..., n) array_like of int, optional
        The cluster of each query, instead of hashing and K-means: :math:`S_{ij} = [\,
        \text{assignment}_i = j\,]`. With ``np.arange(n)`` every query is alone and the result is
        exact softmax attention.
    method : {"equation", "blocked", "auto"}, default "auto"
        How the C centroids attend (:func:`refattn.scaled_dot_product_attention`'s ``method``):
        "auto" streams through the blocked kernel when the (..., C, m) scores would not fit the
        memory budget. ``None``, the old default, is read as "auto" with a ``DeprecationWarning``.
    return_weights : bool, default False
        Also return the effective (..., n, m) matrix, row *i* = :math:`A^c_{c(i)}`.

    Returns
    -------
    out : (..., n, d_v) ndarray
    weights : (..., n, m) ndarray
        Only if ``return_weights``.

    Notes
    -----
    Time: hashing O(n·B·d), K-means O(iterations·n·C·B), attention O(C·m·(d_k + d_v)) and the
    broadcast O(n·d_v). Memory: the (..., n, C) Hamming distances and the (..., C, m) centroid
    scores (or O(C·d) tiles, streamed); nothing n × m unless ``return_weights``.

    Causal attention: the paper clusters the queries of the whole sequence, so a centroid mixes
    past and future queries and no cluster's keys can be cut at one position; it defines no causal
    form, and ``causal=True`` is refused. (The official code has a causal variant of *improved*
    clustered attention only, which keeps just the top-k keys; see
    :func:`~refattn.compressed.improved_clustered.improved_clustered_attention`.)

    Paper versus official code: the official ``ClusteredAttention`` sorts the queries by cluster
    before aggregating them (a speed-up added after the paper, as its comment says); the result is
    the same. Its defaults: ``iterations=10``, ``hash_bias=True``, ``bits=63`` when built by name
    through its attention registry, ``bits=32`` when the class is constructed directly.

    References
    ----------
    .. [1] A. Vyas, A. Katharopoulos, F. Fleuret, "Fast Transformers with Clustered Attention",
       NeurIPS 2020, arXiv:2007.04825v2, §3.2 (clustered attention, Hamming K-means).
    .. [2] idiap/fast-transformers, ``fast_transformers/attention/clustered_attention.py``,
       ``fast_transformers/clustering/hamming/cluster_cpu.cpp``, ``fast_transformers/hashing/hash_cpu.cpp``.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 8, 4))
    >>> out, A = clustered_attention(q, k, v, num_clusters=3, rng=1, return_weights=True)
    >>> len(np.unique(A, axis=0)) <= 3                 # at most C distinct rows
    True
    >>> a = cluster_queries(q, 3, rng=1)               # the same draws give the same clusters
    >>> bool(np.array_equal(out, clustered_attention(q, k, v, assignment=a)))
    True
    >>> exact = clustered_attention(q, k, v, assignment=np.arange(8))
    >>> from refattn import scaled_dot_product_attention
    >>> bool(np.allclose(exact, scaled_dot_product_attention(q, k, v)))
    True
    """
    method = none_is_auto("clustered_attention", method)
    q, k, v, assignment = checked_clusters("clustered_attention", q, k, v, causal, num_clusters, bits, iterations,
                                           hash_bias, rng, planes, initial, assignment)
    return attend_clusters(q, k, v, assignment, num_clusters, scale, method, check_bool("return_weights",
                                                                                        return_weights))


def attend_clusters(q: NDArray, k: NDArray, v: NDArray, assignment: NDArray, num_clusters, scale, method,
                    return_weights: bool):
    """Clustered attention for a given assignment: out, or (out, weights)."""
    scale = default_scale(q.shape[-1]) if scale is None else check_scale(scale)
    assignment, C = check_assignment(assignment, q.shape[-2], num_clusters)
    batch = broadcast_batch({"q, k, v": check_qkv(q, k, v), "assignment": assignment.shape[:-1]})
    if return_weights:
        check_fits("the weights (return_weights=True)", (*batch, q.shape[-2], k.shape[-2]))
    Q_c = query_centroids(q, assignment, C)                        # (..., C, d_k)  Q^c
    result = scaled_dot_product_attention(Q_c, k, v, scale=scale, method=method, return_weights=return_weights)
    V_c, A_c = result if return_weights else (result, None)        # (..., C, d_v)  A^c V,  (..., C, m)  A^c
    index = np.broadcast_to(assignment, (*batch, q.shape[-2]))[..., None]   # (..., n, 1)
    out = np.take_along_axis(np.broadcast_to(V_c, (*batch, *V_c.shape[-2:])), index, axis=-2)  # V̂_i = V̂^c_{c(i)}
    if not return_weights:
        return out
    A = np.take_along_axis(np.broadcast_to(A_c, (*batch, *A_c.shape[-2:])), index, axis=-2)    # (..., n, m)
    return out, A


def checked_clusters(name: str, q, k, v, causal, num_clusters, bits, iterations, hash_bias, rng, planes, initial,
                     assignment) -> tuple[NDArray, NDArray, NDArray, NDArray]:
    """A clustered function's checks and clusters: q, k, v as float64 (checked), and each query's cluster."""
    refuse_causal(causal, name)
    q, k, v = (as_float(label, x) for label, x in (("q", q), ("k", k), ("v", v)))
    check_qkv(q, k, v)
    assignment, _, _ = resolve_clusters(name, q, num_clusters, bits, iterations, hash_bias, rng, planes, initial,
                                        assignment)
    return q, k, v, assignment


def refuse_causal(causal, name: str) -> None:
    if causal is not False:
        raise ValueError(f"{name} has no causal form (causal must be False, got {causal!r}): the paper clusters the "
                         "queries of the whole sequence, so every centroid mixes past and future queries")


RECORD = Mechanism.of(
    clustered_attention, allowed=None,
    id="clustered", title="Clustered attention", family="compressed", section="4.3.1", paper=VYAS,
    equation=r"\hat V_i = \operatorname{softmax}\!\Big(\frac{Q^c_{c(i)} K^\top}{\sqrt{d_k}}\Big) V,\quad "
             r"Q^c_j = \frac{\sum_i S_{ij} Q_i}{\sum_i S_{ij}}",
    time="O(n·C·B·iterations + C·m·d)", memory="O(n·C + C·m), O(n·C + C·d) blocked", kind="attention",
    methods=("equation", "blocked", "auto"),
    examples=({"hash_bias": False}, {"num_clusters": 1}, {"bits": 3, "iterations": 1}),
    causal=False,
    position_dependent=True,                       # the initial centroids are queries drawn by position
    figure="refattn.figures.clustered:clustered",
    exact_options=lambda n, m: {"assignment": np.arange(n)},
    exact_limit="C = n, every query alone in its cluster (assignment = 0 … n − 1)",
    draws=("planes", "initial"),
)
