"""Multi-head variants (survey §4.6): heads that interact, heads with limited spans, heads aggregated
by routing, and losses that make heads diverse or shape their patterns.
"""
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

#: The family's catalogue records, in catalogue order (each declared in its mechanism's module).
RECORDS = (CAPSULE_ROUTING,)

__all__ = [
    "CapsuleRoutingParams", "capsule_routing_attention", "dynamic_routing", "em_routing", "head_votes",
    "init_capsule_routing", "squash",
]
