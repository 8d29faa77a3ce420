r"""Improved clustered attention (Vyas, Katharopoulos, Fleuret, 2020, arXiv:2007.04825v2, §3.3; survey §4.3.1).

Clustered attention (:mod:`refattn.compressed.clustered`) gives every member of a cluster its
centroid's attention A^c. The improved form recomputes, for each query, its exact attention on the
k keys its centroid weighs most, and keeps the centroid's attention on the others:

    T ∈ {0, 1}^{C × m},  T_jl = 1 iff key l is among the top-k keys of centroid j (by A^c_jl)
    m̂_j   = Σ_l T_jl A^c_jl                                 the centroid's mass on its top-k keys
    A^t_il = m̂_j · exp(Q_i K_lᵀ/√d_k) / Σ_r T_jr exp(Q_i K_rᵀ/√d_k)    if T_jl = 1
           = A^c_jl                                                     otherwise
    V̂^t   = A^t V                                           (j the cluster of query i)

Every row of A^t sums to 1: the top-k keys share the centroid's mass m̂_j as the query's own
softmax over them would, the other keys keep the centroid's weights. Time O(C·m·d + n·k·d).
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.budget import check_fits
from ..common.checks import broadcast_batch, check_bool, check_qkv, check_scale, default_scale
from ..common.ints import check_non_negative_int
from ..common.products import weighted_values
from ..core.softmax import masked_softmax
from ..mechanism import Mechanism
from ..papers import VYAS
from .clustered import (
    ITERATIONS,
    check_assignment,
    checked_clusters,
    query_centroids,
)

__all__ = ["improved_clustered_attention"]

TOP_K = 32                                         # the official default


def improved_clustered_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    num_clusters: int | None = None,
    top_k: int = TOP_K,
    bits: int | None = None,
    iterations: int = ITERATIONS,
    hash_bias: bool = True,
    scale: float | None = None,
    causal: bool = False,
    rng=None,
    planes: ArrayLike | None = None,
    initial: ArrayLike | None = None,
    assignment: ArrayLike | None = None,
    return_weights: bool = False,
) -> NDArray | tuple[NDArray, NDArray]:
    r"""Improved clustered attention: exact attention on each cluster's top-k keys, the centroid's elsewhere.

    .. math::

        \hat m_j = \sum_l T_{jl} A^c_{jl}, \qquad
        A^t_{il} = \begin{cases}
            \hat m_j \, \dfrac{\exp(Q_i K_l^\top / \sqrt{d_k})}{\sum_r T_{jr} \exp(Q_i K_r^\top / \sqrt{d_k})}
                & T_{jl} = 1 \\[1ex]
            A^c_{jl} & \text{otherwise}
        \end{cases}, \qquad \hat V^t = A^t V

    with *j* the cluster of query *i*, :math:`A^c` the centroids' attention of
    :func:`~refattn.compressed.clustered.clustered_attention` and :math:`T_{jl} = 1` for the *k*
    keys of largest :math:`A^c_{jl}`.

    Parameters
    ----------
    q : (..., n, d_k) array_like
        Queries; only they are clustered.
    k : (..., m, d_k) array_like
        Keys.
    v : (..., m, d_v) array_like
        Values.
    num_clusters : int, optional
        *C* (the official ``clusters``, which has no default); default ``initial``'s length or
        ``assignment``'s largest cluster + 1, else 3 (a small demonstration size). Capped at *n*.
    top_k : int, default 32
        *k*, the keys recomputed for each query (the official ``topk`` and its default); at most
        *m* are taken. ``top_k`` 0 or 1 is clustered attention (one key's softmax is 1: it keeps the
        centroid's weight), ``top_k >= m`` exact softmax attention.
    bits : int, optional
        *B*, the bits of the hash; default 63, or ``planes``' rows.
    iterations : int, default 10
        Lloyd iterations of the Hamming K-means.
    hash_bias : bool, default True
        Hyperplanes with random offsets, else through the origin; used when drawing ``planes``.
    scale : float, optional
        Multiplier of the scores; default :math:`1/\sqrt{d_k}`.
    causal : bool, default False
        Must be False: the paper defines no causal form (see Notes).
    rng : numpy.random.Generator or int, optional
        Source of ``planes`` and ``initial`` when they are not given (unused with ``assignment``,
        which takes neither).
    planes : (B, d_k + 1) or (..., B, d_k + 1) array_like, optional
        Explicit hash hyperplanes (:func:`~refattn.compressed.clustered.draw_hash_planes`).
    initial : (C,) or (..., C) array_like of int, optional
        Explicit initial centroids, distinct query indices
        (:func:`~refattn.compressed.clustered.draw_initial_centroids`).
    assignment : (..., n) array_like of int, optional
        The cluster of each query, instead of hashing and K-means.
    return_weights : bool, default False
        Also return the effective (..., n, m) matrix :math:`A^t`.

    Returns
    -------
    out : (..., n, d_v) ndarray
    weights : (..., n, m) ndarray
        Only if ``return_weights``.

    Notes
    -----
    The top-k keys of a centroid are those of largest score :math:`Q^c_j K_l^\top` times the
    scale (the order of :math:`A^c_{jl}`; the official code ranks the unscaled product, the same
    order for a positive scale); equal scores go to the lower key index (``torch.topk`` leaves
    their order unspecified), and a NaN score ranks last.

    Each row of :math:`A^t` is at least as close to the exact row :math:`A_i` as the clustered row
    in L1: off the top-k keys both are :math:`A^c_j`, and on them
    :math:`\sum_{l \in T_j} |A^t_{il} - A_{il}| = |\hat m_j - \sum_{l \in T_j} A_{il}| \le
    \sum_{l \in T_j} |A^c_{jl} - A_{il}|` (the paper's argument for the improvement, §3.3).

    The official code computes the top-k part as ``softmax(top-k scores) * (1 - A_bottomk)`` with
    ``A_bottomk`` the centroid's mass off the top-k keys, which is :math:`\hat m_j` up to rounding.
    Its ``ImprovedClusteredCausalAttention`` (not in the paper) clusters the whole sequence, keeps
    only each cluster's top-k keys, masks those after the query, and drops the rest of the keys:
    which past keys a query sees then depends on future queries and keys. It is not reproduced
    here; ``causal=True`` is refused.

    Time: clustering as in clustered attention, the centroid scores O(C·m·d_k), the top-k
    selection O(C·m log m), the recomputation O(n·k·(d_k + d_v)). Memory: the (..., C, m)
    centroid scores and weights (checked against the memory budget); the recomputation runs
    cluster by cluster, so nothing n × m is formed unless ``return_weights``.

    References
    ----------
    .. [1] A. Vyas, A. Katharopoulos, F. Fleuret, "Fast Transformers with Clustered Attention",
       NeurIPS 2020, arXiv:2007.04825v2, §3.3 (improved clustered attention).
    .. [2] idiap/fast-transformers, ``fast_transformers/attention/improved_clustered_attention.py``,
       ``fast_transformers/attention/improved_clustered_causal_attention.py``.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 8, 4))
    >>> out, A = improved_clustered_attention(q, k, v, num_clusters=2, top_k=3, rng=1, return_weights=True)
    >>> bool(np.allclose(A.sum(axis=-1), 1.0))
    True
    >>> exact = improved_clustered_attention(q, k, v, num_clusters=2, top_k=8, rng=1)
    >>> from refattn import scaled_dot_product_attention
    >>> bool(np.allclose(exact, scaled_dot_product_attention(q, k, v)))
    True
    """
    q, k, v, assignment = checked_clusters("improved_clustered_attention", q, k, v, causal, num_clusters, bits,
                                           iterations, hash_bias, rng, planes, initial, assignment)
    return _attend(q, k, v, assignment, num_clusters, top_k, scale, check_bool("return_weights", return_weights))


def _attend(q: NDArray, k: NDArray, v: NDArray, assignment: NDArray, num_clusters, top_k, scale,
            return_weights: bool):
    """Improved clustered attention for a given assignment: out, or (out, weights)."""
    top_k = check_non_negative_int("top_k", top_k)
    scale = default_scale(q.shape[-1]) if scale is None else check_scale(scale)
    n, m, d_k, d_v = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    assignment, C = check_assignment(assignment, n, num_clusters)
    batch = broadcast_batch({"q, k, v": check_qkv(q, k, v), "assignment": assignment.shape[:-1]})
    check_fits("the centroids' scores", (*batch, C, m))
    if return_weights:
        check_fits("the weights (return_weights=True)", (*batch, n, m))
    Q_c = query_centroids(q, assignment, C)                        # (..., C, d_k)  Q^c
    with np.errstate(invalid="ignore", over="ignore"):
        S_c = (Q_c @ np.swapaxes(k, -1, -2)) * scale               # (..., C, m)  Q^c Kᵀ/√d_k
    S_c = np.broadcast_to(S_c, (*batch, C, m)).copy()
    S_c[~np.isfinite(S_c)] = np.nan                                # Inf/NaN in a centroid or key: undefined
    A_c, _ = masked_softmax(S_c, None, "zero")                     # (..., C, m)  A^c
    T = np.argsort(-S_c, axis=-1, kind="stable")[..., :top_k]      # (..., C, k)  top-k keys of each centroid
    in_T = np.zeros(S_c.shape, dtype=bool)
    np.put_along_axis(in_T, T, True, axis=-1)                      # (..., C, m)  T_jl
    m_hat = np.where(in_T, A_c, 0.0).sum(axis=-1)                  # (..., C)  m̂_j = Σ_l T_jl A^c_jl
    A_rest = np.where(in_T, 0.0, A_c)                              # (..., C, m)  A^c off the top-k keys
    no_row = np.zeros((*batch, C, 1), dtype=bool)
    V_rest = weighted_values(A_rest, v, ~in_T, no_row, "zero")     # (..., C, d_v)  Σ_{l∉T_j} A^c_jl V_l

    flat = int(np.prod(batch, dtype=np.int64))
    a = np.broadcast_to(assignment, (*batch, n)).reshape(flat, n)
    qs = np.broadcast_to(q, (*batch, n, d_k)).reshape(flat, n, d_k)
    ks = np.broadcast_to(k, (*batch, m, d_k)).reshape(flat, m, d_k)
    vs = np.broadcast_to(v, (*batch, m, d_v)).reshape(flat, m, d_v)
    T, m_hat = T.reshape(flat, C, T.shape[-1]), m_hat.reshape(flat, C)
    out = np.take_along_axis(V_rest.reshape(flat, C, d_v), a[..., None], axis=-2)   # (B, n, d_v)  the rest
    A = np.take_along_axis(A_rest.reshape(flat, C, m), a[..., None], axis=-2) if return_weights else None
    for b in range(flat):
        order = np.argsort(a[b], kind="stable")                    # the queries, cluster by cluster
        starts = np.searchsorted(a[b][order], np.arange(C + 1))
        for j in range(C):
            members = order[starts[j]:starts[j + 1]]
            if members.size == 0 or T.shape[-1] == 0:
                continue
            keys = T[b, j]                                         # (k,)  the top-k keys of cluster j
            with np.errstate(invalid="ignore", over="ignore"):
                S = (qs[b, members] @ ks[b, keys].T) * scale       # (|j|, k)  Q_i K_lᵀ/√d_k
            S[~np.isfinite(S)] = np.nan
            W = masked_softmax(S, None, "zero")[0] * m_hat[b, j]   # (|j|, k)  A^t_il on l ∈ T_j
            alone = np.zeros((members.size, 1), dtype=bool)        # no member is without a key
            out[b, members] += weighted_values(W, vs[b, keys], None, alone, "zero")   # Σ_{l∈T_j} A^t_il V_l
            if return_weights:
                A[b, members[:, None], keys] = W
    out = out.reshape(*batch, n, d_v)                              # V̂^t = A^t V
    return out if A is None else (out, A.reshape(*batch, n, m))


RECORD = Mechanism.of(
    improved_clustered_attention, defaults={"top_k": 2}, allowed=None,      # top_k = 2 for the short examples
    id="improved_clustered", title="Improved clustered attention", family="compressed", section="4.3.1",
    paper=VYAS,
    equation=r"A^t_{il} = \hat m_{c(i)} \frac{e^{Q_i K_l^\top/\sqrt{d_k}}}{\sum_{r \in T_{c(i)}} "
             r"e^{Q_i K_r^\top/\sqrt{d_k}}} \ (l \in T_{c(i)}),\quad A^c_{c(i) l} \ \text{otherwise}",
    time="O(n·C·B·iterations + C·m·d + n·k·d)", memory="O(n·C + C·m)", kind="attention",
    examples=({"top_k": 0}, {"hash_bias": False}, {"num_clusters": 1, "top_k": 3}),
    causal=False,
    position_dependent=True,                       # the initial centroids are queries drawn by position
    content_selected=True, figure="refattn.figures.improved_clustered:improved_clustered",
    exact_options=lambda n, m: {"top_k": m}, exact_limit="top_k = m (every key recomputed exactly)",
    draws=("planes", "initial"),
)
