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
from .multi_scale import RECORD as MULTI_SCALE
from .multi_scale import layer_windows, multi_scale_attention, multi_scale_mask

#: The family's catalogue records, in catalogue order (each declared in its mechanism's module).
RECORDS = (ADAPTIVE_SPAN, MULTI_SCALE)

__all__ = [
    "adaptive_span_attention", "adaptive_span_grad_z", "adaptive_span_heads", "adaptive_span_mask",
    "span_cache_length", "span_loss",
    "layer_windows", "multi_scale_attention", "multi_scale_mask",
]
