"""Multi-head variants (survey §4.6): heads that interact, heads with limited spans, heads aggregated
by routing, and losses that make heads diverse or shape their patterns.
"""
from .multi_query import RECORD as MULTI_QUERY
from .multi_query import (
    KVCache,
    MultiQueryParams,
    convert_multi_head,
    init_multi_query,
    kv_cache_bytes,
    kv_cache_summary,
    multi_query_attention,
    multi_query_step,
)

#: The family's catalogue records, in catalogue order (each declared in its mechanism's module).
RECORDS = (
    MULTI_QUERY,
)

__all__ = [
    "KVCache",
    "MultiQueryParams",
    "convert_multi_head",
    "init_multi_query",
    "kv_cache_bytes",
    "kv_cache_summary",
    "multi_query_attention",
    "multi_query_step",
]
