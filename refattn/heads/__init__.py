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
from .capsule_routing import RECORD as CAPSULE_ROUTING
from .capsule_routing import (
    CapsuleRoutingParams,
    capsule_routing_attention,
    dynamic_routing,
    em_routing,
    head_votes,
    init_capsule_routing,
    squash,
)
from .collaborative_heads import RECORD as COLLABORATIVE_HEADS
from .collaborative_heads import (
    CollaborativeParams,
    CPDecomposition,
    block_mixing,
    collaborative_attention,
    collaborative_from_multi_head,
    cp_decomposition,
    head_products,
    init_collaborative,
)
from .disagreement_reg import (
    DISAGREEMENT_TERMS,
    cosine_disagreement,
    cosine_disagreement_grad,
    disagreement,
    output_disagreement,
    position_disagreement,
    position_disagreement_grad,
    subspace_disagreement,
)
from .disagreement_reg import RECORD as DISAGREEMENT_REG
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
from .pattern_aux_loss import (
    PATTERNS,
    guide_pattern,
    guide_patterns,
    pattern_loss,
    pattern_loss_grad,
    pattern_loss_score_grad,
)
from .pattern_aux_loss import RECORD as PATTERN_AUX_LOSS
from .talking_heads import RECORD as TALKING_HEADS
from .talking_heads import TalkingHeadsParams, init_talking_heads, talking_heads_attention

#: The family's catalogue records, in catalogue order (each declared in its mechanism's module).
RECORDS = (
    DISAGREEMENT_REG,
    PATTERN_AUX_LOSS,
    TALKING_HEADS,
    COLLABORATIVE_HEADS,
    ADAPTIVE_SPAN,
    MULTI_SCALE,
    CAPSULE_ROUTING,
    MULTI_QUERY,
    HEAD_SIZE,
)

__all__ = [
    "CPDecomposition",
    "CapsuleRoutingParams",
    "CollaborativeParams",
    "DISAGREEMENT_TERMS",
    "KVCache",
    "MultiQueryParams",
    "PATTERNS",
    "TalkingHeadsParams",
    "adaptive_span_attention",
    "adaptive_span_grad_z",
    "adaptive_span_heads",
    "adaptive_span_mask",
    "block_mixing",
    "capsule_routing_attention",
    "collaborative_attention",
    "collaborative_from_multi_head",
    "convert_multi_head",
    "cosine_disagreement",
    "cosine_disagreement_grad",
    "cp_decomposition",
    "disagreement",
    "dynamic_routing",
    "em_routing",
    "guide_pattern",
    "guide_patterns",
    "head_products",
    "head_scores",
    "head_size_attention",
    "head_votes",
    "init_capsule_routing",
    "init_collaborative",
    "init_multi_query",
    "init_talking_heads",
    "kv_cache_bytes",
    "kv_cache_summary",
    "layer_windows",
    "multi_query_attention",
    "multi_query_step",
    "multi_scale_attention",
    "multi_scale_mask",
    "output_disagreement",
    "pattern_loss",
    "pattern_loss_grad",
    "pattern_loss_score_grad",
    "position_disagreement",
    "position_disagreement_grad",
    "represent_attention",
    "span_cache_length",
    "span_loss",
    "squash",
    "subspace_disagreement",
    "talking_heads_attention",
]
