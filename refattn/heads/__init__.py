"""Multi-head variants (survey §4.6): heads that interact, heads with limited spans, heads aggregated
by routing, and losses that make heads diverse or shape their patterns.
"""
from .head_size import RECORD as HEAD_SIZE
from .head_size import head_scores, head_size_attention, represent_attention
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
    HEAD_SIZE,
)

__all__ = [
    "KVCache",
    "MultiQueryParams",
    "convert_multi_head",
    "head_scores",
    "head_size_attention",
    "init_multi_query",
    "kv_cache_bytes",
    "kv_cache_summary",
    "multi_query_attention",
    "multi_query_step",
    "represent_attention",
]
