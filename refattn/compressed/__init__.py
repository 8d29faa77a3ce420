"""Query prototypes and compressed memory (survey §4.3).

- Query prototypes (§4.3.1): a few prototypes stand in for the n queries, and their attention is
  given back to the queries they represent.

Conventions shared by the family's registry entries: every random draw (k-means initialisation,
hash planes, sampled keys) is an option of ``apply``, drawn from ``rng`` when it is not given and
returned with ``return_draws=True``; ``return_weights=True`` scatters the mechanism's effective
n × m attention matrix back from its prototypes.
"""
from .informer import RECORD as INFORMER
from .informer import draw_sampled_keys, informer_attention, informer_counts, query_sparsity, top_queries

#: The family's catalogue records, in catalogue order (each declared in its mechanism's module).
RECORDS = (
    INFORMER,
)

__all__ = [
    "draw_sampled_keys", "informer_attention", "informer_counts", "query_sparsity", "top_queries",
]
