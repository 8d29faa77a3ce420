"""Sparse attention (survey §4.1): patterns in CSR form, their builders, and attention over them.

- Atomic patterns (Fig. 4): :func:`global_pattern`, :func:`band_pattern`, :func:`dilated_pattern`,
  :func:`strided_pattern`, :func:`random_pattern`, :func:`block_local_pattern`, :func:`block_window_pattern`.
- Compound (Fig. 5): :func:`star_transformer_pattern`, :func:`longformer_pattern` (and
  :func:`longformer_patterns`, one per head), :func:`etc_pattern`, :func:`bigbird_pattern`,
  :func:`sparse_transformer_pattern`.
- Extended (Fig. 6): :func:`bp_transformer_pattern`, :func:`image_transformer_pattern`,
  :func:`axial_pattern` / :func:`axial_patterns` (and :func:`axial_attention`, rows then columns).
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
from ..mechanism import family

# isort: off
# The shared engine (attention over a pattern, the pattern type), then the family, one line per mechanism module,
# in catalogue order.
from .attention import *  # noqa: F403
from .pattern import *  # noqa: F403
from .global_ import *  # noqa: F403
from .band import *  # noqa: F403
from .dilated import *  # noqa: F403
from .strided import *  # noqa: F403
from .random import *  # noqa: F403
from .block_local import *  # noqa: F403
from .star_transformer import *  # noqa: F403
from .longformer import *  # noqa: F403
from .etc import *  # noqa: F403
from .bigbird import *  # noqa: F403
from .sparse_transformer import *  # noqa: F403
from .bp_transformer import *  # noqa: F403
from .image_transformer import *  # noqa: F403
from .axial import *  # noqa: F403
from .routing import *  # noqa: F403
from .reformer_lsh import *  # noqa: F403
from .sac import *  # noqa: F403
from .sinkhorn import *  # noqa: F403
# isort: on

#: The family's catalogue records, in catalogue order (each declared in its mechanism's module).
RECORDS, __all__ = family(globals())
