"""Sparse attention (survey §4.1): patterns in CSR form, their builders, and attention over them.

- Atomic patterns (Fig. 4): :func:`global_pattern`, :func:`band_pattern`, :func:`dilated_pattern`,
  :func:`strided_pattern`, :func:`random_pattern`, :func:`block_local_pattern`, :func:`block_window_pattern`.
- Compound (Fig. 5): :func:`star_transformer_pattern`, :func:`longformer_pattern` (and
  :func:`longformer_patterns`, one per head), :func:`etc_pattern`, :func:`bigbird_pattern`,
  :func:`sparse_transformer_pattern`.
- Extended (Fig. 6): :func:`bp_transformer_pattern`, :func:`image_transformer_pattern`,
  :func:`axial_pattern` / :func:`axial_patterns`.
- Content-based (§4.1.2): :func:`routing_attention` (k-means routing, with :func:`draw_centroids`,
  :func:`nearest_centroid` and :func:`update_centroids`), :func:`reformer_lsh_attention`
  (shared-QK attention within LSH buckets, with :func:`draw_lsh_rotations`, :func:`lsh_buckets`,
  :func:`lsh_chunks` and :func:`lsh_collision_probability`), :func:`sac_attention` on predicted
  edges, :func:`sinkhorn_attention` on softly sorted blocks.

:func:`sparse_attention` attends over any of them, by the dense equation path or the Numba CSR
kernel (``method="csr"``) whose cost follows the kept pairs.

Conventions shared by the builders and the registry entries:

- *Indices are never cast.* Index arguments (a pattern's arrays, ``global_indices``, explicit
  draws) must be integer arrays; a float, bool or string index is a ``TypeError`` naming the
  argument (:func:`~refattn.sparse.pattern.as_indices`).
- *Edge sizes, one rule for both methods.* A builder takes n = 0 queries or m = 0 keys and returns
  an empty pattern; attention over it gives an output of shape (..., 0, d_v) for n = 0 and, for
  m = 0, queries that see no key (zero rows: the registry entries use ``fully_masked="zero"``).
  d_v = 0 gives (..., n, 0), a batch of 0 empty results, and d_k = 0 a ``ValueError`` naming d_k
  (the default scale 1/√d_k is undefined). Registry entries whose structure needs positions (the
  Star-Transformer's relay, ETC's global tokens, BigBird's whole blocks, BP-Transformer's tree)
  refuse lengths they cannot lay out with a ``ValueError`` naming n and the lengths they take.
- *Memory.* Builders write CSR directly in O(nnz) and refuse an index array above
  :func:`refattn.common.memory_budget` before allocating it; ``apply(..., method="csr")`` holds
  no n × m array, and ``return_weights=True`` refuses dense weights above the budget before
  anything is built (:class:`refattn.common.MemoryBudgetError`).
"""
from .attention import sparse_attention
from .axial import RECORD as AXIAL
from .axial import axial_pattern, axial_patterns
from .band import RECORD as BAND
from .band import band_pattern
from .bigbird import RECORD as BIGBIRD
from .bigbird import bigbird_block_layout, bigbird_key_counts, bigbird_pattern, draw_bigbird_random_blocks
from .block_local import RECORD as BLOCK_LOCAL
from .block_local import block_local_pattern, block_window_pattern
from .bp_transformer import RECORD as BP_TRANSFORMER
from .bp_transformer import bp_transformer_pattern, bp_tree_spans
from .dilated import RECORD as DILATED
from .dilated import dilated_pattern
from .etc import RECORD as ETC
from .etc import etc_pattern
from .global_ import RECORD as GLOBAL
from .global_ import global_pattern
from .image_transformer import RECORD as IMAGE_TRANSFORMER
from .image_transformer import image_transformer_1d_pattern, image_transformer_pattern
from .longformer import RECORD as LONGFORMER
from .longformer import longformer_pattern, longformer_patterns
from .pattern import SparsePattern
from .random import RECORD as RANDOM
from .random import draw_random_keys, random_pattern
from .reformer_lsh import RECORD as REFORMER_LSH
from .reformer_lsh import (
    draw_lsh_rotations,
    lsh_buckets,
    lsh_chunks,
    lsh_collision_probability,
    reformer_lsh_attention,
)
from .routing import RECORD as ROUTING
from .routing import draw_centroids, nearest_centroid, routing_attention, update_centroids
from .sac import RECORD as SAC
from .sac import SacPredictor, init_sac_predictor, predict_edges, predictor_scores, sac_attention, top_edges
from .sinkhorn import RECORD as SINKHORN
from .sinkhorn import (
    SortNetParams,
    block_summaries,
    default_block_size,
    draw_gumbel,
    init_sort_net,
    masked_logsumexp,
    sinkhorn_attention,
    sinkhorn_normalize,
    sort_net_scores,
    sorting_matrix,
)
from .sparse_transformer import RECORD as SPARSE_TRANSFORMER
from .sparse_transformer import sparse_transformer_pattern
from .star_transformer import RECORD as STAR_TRANSFORMER
from .star_transformer import star_transformer_pattern
from .strided import RECORD as STRIDED
from .strided import strided_pattern

#: The family's catalogue records, in catalogue order (each declared in its mechanism's module).
RECORDS = (
    GLOBAL,
    BAND,
    DILATED,
    STRIDED,
    RANDOM,
    BLOCK_LOCAL,
    STAR_TRANSFORMER,
    LONGFORMER,
    ETC,
    BIGBIRD,
    SPARSE_TRANSFORMER,
    BP_TRANSFORMER,
    IMAGE_TRANSFORMER,
    AXIAL,
    ROUTING,
    REFORMER_LSH,
    SAC,
    SINKHORN,
)

__all__ = [
    "SacPredictor",
    "SortNetParams",
    "SparsePattern",
    "axial_pattern",
    "axial_patterns",
    "band_pattern",
    "bigbird_block_layout",
    "bigbird_key_counts",
    "bigbird_pattern",
    "block_local_pattern",
    "block_window_pattern",
    "block_summaries",
    "bp_transformer_pattern",
    "bp_tree_spans",
    "default_block_size",
    "dilated_pattern",
    "draw_bigbird_random_blocks",
    "draw_centroids",
    "draw_gumbel",
    "draw_lsh_rotations",
    "draw_random_keys",
    "etc_pattern",
    "global_pattern",
    "image_transformer_1d_pattern",
    "image_transformer_pattern",
    "init_sac_predictor",
    "init_sort_net",
    "longformer_pattern",
    "longformer_patterns",
    "lsh_buckets",
    "lsh_chunks",
    "lsh_collision_probability",
    "masked_logsumexp",
    "nearest_centroid",
    "predict_edges",
    "predictor_scores",
    "random_pattern",
    "reformer_lsh_attention",
    "routing_attention",
    "sac_attention",
    "sinkhorn_attention",
    "sinkhorn_normalize",
    "sort_net_scores",
    "sorting_matrix",
    "sparse_attention",
    "sparse_transformer_pattern",
    "star_transformer_pattern",
    "strided_pattern",
    "top_edges",
    "update_centroids",
]
