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
from ..mechanism import family

# isort: off
# The family, one line per mechanism module, in catalogue order.
from .clustered import *  # noqa: F403
from .improved_clustered import *  # noqa: F403
from .informer import *  # noqa: F403
from .mca import *  # noqa: F403
from .set_transformer import *  # noqa: F403
from .luna import *  # noqa: F403
from .linformer import *  # noqa: F403
from .poolingformer import *  # noqa: F403
# isort: on

#: The family's catalogue records, in catalogue order (each declared in its mechanism's module).
RECORDS, __all__ = family(globals())
