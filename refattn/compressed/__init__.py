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

- Compressed key/value memory (§4.3.2): the m keys and values are mixed into fewer rows, which all
  n queries attend to; ``return_weights=True`` gives the attention times the mixing, an n × m
  matrix W with out = W V whose rows need not sum to 1 nor be ≥ 0.

  * :func:`memory_compressed_attention` (Liu et al., 2018): a strided convolution, kernel =
    stride = c, over the keys and the values (:func:`compress_memory`; :class:`MemoryCompression`
    holds its kernels); causal query i sees the blocks that end at or before i. The same paper's
    local attention within blocks is :func:`blockwise_local_attention` (``mode="local"``).
  * :func:`linformer_attention` (Wang et al., 2020): projections E, F ∈ R^{k×m} along the
    sequence (:func:`draw_projections`, with the paper's sharing between heads and layers); no
    causal form.
  * :func:`induced_attention` (Lee et al., 2019, Set Transformer): ISAB's attention path, ℓ
    inducing points attend the keys and the queries attend the ℓ mixtures; :func:`mab`,
    :func:`sab`, :func:`isab` and :func:`pma` are the paper's blocks, with the official code's
    departures as options. No causal form (sets have no order).
  * :func:`luna_attention` (Ma et al., 2021, Luna): pack and unpack, l pack tokens P in place of
    the inducing points; its causal form packs by running means of a softplus activation.
  * :func:`poolingformer_attention` (Zhang et al., 2021): a sliding window (first level), then
    attention over the first level's outputs pooled in segments of a larger window (second level),
    added by a residual connection; its effective matrix is (I + A₂ P) A₁. No causal form.

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
from .linformer import RECORD as LINFORMER
from .linformer import draw_projections, linformer_attention
from .luna import RECORD as LUNA
from .luna import draw_pack, luna_attention, luna_maps, pack_activation
from .mca import RECORD as MCA
from .mca import (
    MemoryCompression,
    blockwise_local_attention,
    compress_memory,
    compression_matrix,
    init_memory_compression,
    memory_compressed_attention,
)
from .poolingformer import RECORD as POOLINGFORMER
from .poolingformer import (
    PoolingformerParams,
    init_poolingformer,
    pooling_matrix,
    pooling_pattern,
    poolingformer_attention,
)
from .set_transformer import RECORD as SET_TRANSFORMER
from .set_transformer import (
    ISABParams,
    MABParams,
    PMAParams,
    draw_inducing_points,
    induced_attention,
    induced_maps,
    init_isab,
    init_mab,
    init_pma,
    isab,
    mab,
    pma,
    sab,
)

#: The family's catalogue records, in catalogue order (each declared in its mechanism's module).
RECORDS = (
    CLUSTERED,
    IMPROVED_CLUSTERED,
    INFORMER,
    MCA,
    SET_TRANSFORMER,
    LUNA,
    LINFORMER,
    POOLINGFORMER,
)

__all__ = [
    "ISABParams",
    "MABParams",
    "MemoryCompression",
    "PMAParams",
    "PoolingformerParams",
    "blockwise_local_attention",
    "cluster_queries",
    "clustered_attention",
    "compress_memory",
    "compression_matrix",
    "draw_hash_planes",
    "draw_inducing_points",
    "draw_initial_centroids",
    "draw_pack",
    "draw_projections",
    "draw_sampled_keys",
    "hamming_kmeans",
    "hash_queries",
    "improved_clustered_attention",
    "induced_attention",
    "induced_maps",
    "informer_attention",
    "informer_counts",
    "init_isab",
    "init_mab",
    "init_memory_compression",
    "init_pma",
    "init_poolingformer",
    "isab",
    "linformer_attention",
    "luna_attention",
    "luna_maps",
    "mab",
    "memory_compressed_attention",
    "pack_activation",
    "pma",
    "pooling_matrix",
    "pooling_pattern",
    "poolingformer_attention",
    "query_centroids",
    "query_sparsity",
    "sab",
    "top_queries",
]
