r"""Figure of clustered attention (Vyas et al. 2020, §3.2): the effective matrix beside exact softmax.

The input has structure for the clusters to find: n = 24 queries around 4 random prototypes (each
query a prototype plus noise, the groups interleaved along the sequence), m = 24 keys and values
drawn at random (:func:`example`). The registry record's ``apply`` hashes the queries and clusters
them (C = 4, 63 bits, 10 iterations, its draws from the fixed seed ``DRAW``); the strip left of
each row is the query's cluster, coloured by :func:`refattn.figures.common.group_strips`. Every
row of a cluster is its centroid's attention, so the clustered matrix repeats C distinct rows.
From this random start the K-means merges two of the four groups and splits another (a local
optimum, which it reaches from most starts on this input): the merged cluster's rows carry most
of the error.
Beside it: exact softmax attention on the same input, and the difference on a diverging scale.
Rows = queries *i*, columns = keys *j*.
"""
from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure
from numpy.typing import NDArray

import refattn as ra

from .. import registry
from ..compressed import cluster_queries
from ..viz import draw_attention, figure, roundoff_text
from .common import group_strips

__all__ = ["clustered", "example", "versus_softmax"]

N, D, GROUPS = 24, 8, 4                            # queries (and keys), width, query prototypes
SEED, DRAW = 50, 51                                # the input; the hash planes and initial centroids


def example() -> tuple[NDArray, NDArray, NDArray]:
    """q (24, 8): 4 prototypes ~ N(0, 1.5²) plus noise N(0, 0.3²), interleaved; k, v ~ N(0, 1) (24, 8)."""
    rng = np.random.default_rng(SEED)
    prototypes = 1.5 * rng.standard_normal((GROUPS, D))
    group = rng.permutation(np.arange(N) % GROUPS)
    q = prototypes[group] + 0.3 * rng.standard_normal((N, D))
    return q, rng.standard_normal((N, D)), rng.standard_normal((N, D))


def run(mechanism: str, **options) -> tuple[NDArray, NDArray, float]:
    """The record's effective matrix on :func:`example`, each query's cluster, and the relative output error."""
    q, k, v = example()
    result = registry.get(mechanism).apply(q, k, v, rng=DRAW, return_weights=True, return_draws=True,
                                           num_clusters=GROUPS, **options)
    clusters = cluster_queries(q, **result.draws)                  # the clusters its draws make
    exact = ra.scaled_dot_product_attention(q, k, v)
    return result.weights, clusters, float(np.linalg.norm(result.output - exact) / np.linalg.norm(exact))


def versus_softmax(fig: Figure, A: NDArray, clusters: NDArray, name: str) -> NDArray:
    """[A | softmax] on one colour scale, then A − softmax on a diverging one, each row's cluster in a strip
    beside it; returns the axes of the three panels."""
    q, k, v = example()
    S = ra.scaled_dot_product_attention(q, k, v, return_weights=True)[1]
    pair, diff = fig.subfigures(1, 2, width_ratios=[1.9, 1.0])
    axes = [*draw_attention(pair, np.stack([A, S]), titles=[name, "softmax"]).ravel(),
            *draw_attention(diff, A - S, signed=True, titles=f"{name} − softmax", ylabel="").ravel()]
    for ax in axes:
        group_strips(ax, clusters)
    return np.array(axes)


def clustered() -> Figure:
    """Clustered attention (C = 4 clusters of 24 queries) beside exact softmax attention."""
    A, clusters, error = run("clustered")
    fig = figure((11.5, 4.2))
    versus_softmax(fig, A, clusters, "clustered")
    fig.suptitle(f"Clustered attention, C = {GROUPS} (strips: each query's cluster, from 63-bit hashes and "
                 f"Hamming K-means): relative output error {roundoff_text(error, '.2f')}")
    return fig
