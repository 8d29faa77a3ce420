"""Multi-head variants (survey §4.6): heads that interact, heads with limited spans, heads aggregated
by routing, and losses that make heads diverse or shape their patterns.
"""
from .adaptive_span import RECORD as ADAPTIVE_SPAN
from .adaptive_span import (
    adaptive_span_attention,
    adaptive_span_grad_z,
    adaptive_span_heads,
    adaptive_span_mask,
    span_cache_length,
    span_loss,
)
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
from .multi_scale import RECORD as MULTI_SCALE
from .multi_scale import layer_windows, multi_scale_attention, multi_scale_mask

#: The family's catalogue records, in catalogue order (each declared in its mechanism's module).
RECORDS = (
    ADAPTIVE_SPAN,
    MULTI_SCALE,
    MULTI_QUERY,
    HEAD_SIZE,
)

__all__ = [
    "KVCache",
    "MultiQueryParams",
    "adaptive_span_attention",
    "adaptive_span_grad_z",
    "adaptive_span_heads",
    "adaptive_span_mask",
    "convert_multi_head",
    "head_scores",
    "head_size_attention",
    "init_multi_query",
    "kv_cache_bytes",
    "kv_cache_summary",
    "layer_windows",
    "multi_query_attention",
    "multi_query_step",
    "multi_scale_attention",
    "multi_scale_mask",
    "represent_attention",
    "span_cache_length",
    "span_loss",
]
