r"""Figure of improved clustered attention (Vyas et al. 2020, §3.3): the effective matrix beside exact softmax.

The input and the clusters are those of :mod:`refattn.figures.clustered` (the same seeds, so the
same four clusters); each query's cluster is the strip left of its row. Each cluster's top-k keys
(k = 3, the keys its centroid weighs most) are outlined in every row of the cluster: there the
query's own softmax shares the centroid's mass on them, elsewhere the row keeps the centroid's
weights, as clustered attention. Beside it: exact softmax on the same input, with the same cells
outlined, and the difference on a diverging scale. Rows = queries *i*, columns = keys *j*.
"""
from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from numpy.typing import NDArray

from ..compressed import query_centroids
from ..viz import figure, roundoff_text
from .clustered import GROUPS, example, run, versus_softmax

__all__ = ["improved_clustered"]

TOP_K = 3


def top_keys(clusters: NDArray) -> NDArray:
    """The top-k keys of each cluster's centroid on :func:`~refattn.figures.clustered.example`, (C, k)."""
    q, k, _ = example()
    scores = query_centroids(q, clusters, GROUPS) @ k.T / np.sqrt(q.shape[-1])   # (C, m)  Q^c Kᵀ/√d
    return np.argsort(-scores, axis=-1, kind="stable")[:, :TOP_K]


def improved_clustered() -> Figure:
    """Improved clustered attention (C = 4, top-k = 3 keys recomputed) beside exact softmax attention."""
    A, clusters, error = run("improved_clustered", top_k=TOP_K)
    A_c, same, _ = run("clustered")
    T = top_keys(clusters)
    recomputed = np.zeros(A.shape, dtype=bool)
    recomputed[np.arange(len(clusters))[:, None], T[clusters]] = True
    if not np.array_equal(same, clusters) or not np.array_equal(A[~recomputed], A_c[~recomputed]):
        raise ValueError("improved_clustered: the figure's top-k keys and the record's apply disagree")
    fig = figure((11.5, 4.2))
    for ax in versus_softmax(fig, A, clusters, "improved clustered"):
        for i, j in zip(*np.nonzero(recomputed), strict=True):
            ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor="none", edgecolor="black", lw=0.8))
    fig.suptitle(f"Improved clustered attention, C = {GROUPS}, top-k = {TOP_K} (outlined: each cluster's top-k "
                 f"keys, recomputed per query): relative output error {roundoff_text(error, '.2f')}")
    return fig
