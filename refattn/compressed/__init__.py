"""Query prototypes and compressed memory (survey §4.3).

- Query prototypes (§4.3.1): a few prototypes stand in for the n queries, and their attention is
  given back to the queries they represent.

  * :func:`clustered_attention` (Vyas et al., 2020): the queries are hashed to B bits by random
    hyperplanes and grouped by K-means in Hamming space (:func:`cluster_queries`); each cluster's
    centroid attends to every key and its members take its output.
    :func:`improved_clustered_attention` then recomputes each query's attention exactly on its
    cluster's top-k keys. Neither has a causal form (the clusters span the whole sequence). Both
    take the cluster assignment itself (``assignment=``) instead of the draws; n = 0 gives no
    output row, m = 0 zero rows (no key), and C is capped at n.
  * :func:`informer_attention` (Zhou et al., 2021, ProbSparse): each query's sparsity measure
    max − mean of its scores on U = ⌈c ln m⌉ sampled keys (:func:`query_sparsity`) picks the
    u = ⌈c ln n⌉ active queries (:func:`top_queries`), which attend fully; the others output the
    mean of the values (causal: the running mean). The official code's counts, measure and running
    sum are named options; its causal form's choice of queries looks at later tokens.

Conventions shared by the family's registry entries: every random draw (k-means initialisation,
hash planes, sampled keys) is an option of ``apply``, drawn from ``rng`` when it is not given and
returned with ``return_draws=True``; ``return_weights=True`` scatters the mechanism's effective
n × m attention matrix back from its prototypes.
"""
from .clustered import RECORD as CLUSTERED
from .clustered import (
    cluster_queries,
    clustered_attention,
    draw_hash_planes,
    draw_initial_centroids,
    hamming_kmeans,
    hash_queries,
    query_centroids,
)
from .improved_clustered import RECORD as IMPROVED_CLUSTERED
from .improved_clustered import improved_clustered_attention
from .informer import RECORD as INFORMER
from .informer import draw_sampled_keys, informer_attention, informer_counts, query_sparsity, top_queries

#: The family's catalogue records, in catalogue order (each declared in its mechanism's module).
RECORDS = (
    CLUSTERED,
    IMPROVED_CLUSTERED,
    INFORMER,
)

__all__ = [
    "cluster_queries",
    "clustered_attention",
    "draw_hash_planes",
    "draw_initial_centroids",
    "draw_sampled_keys",
    "hamming_kmeans",
    "hash_queries",
    "improved_clustered_attention",
    "informer_attention",
    "informer_counts",
    "query_centroids",
    "query_sparsity",
    "top_queries",
]
