"""Multi-head variants (survey §4.6): heads that interact, heads with limited spans, heads aggregated
by routing, and losses that make heads diverse or shape their patterns.
"""
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
from .talking_heads import RECORD as TALKING_HEADS
from .talking_heads import TalkingHeadsParams, init_talking_heads, talking_heads_attention

#: The family's catalogue records, in catalogue order (each declared in its mechanism's module).
RECORDS = (
    TALKING_HEADS,
    COLLABORATIVE_HEADS,
)

__all__ = [
    "CPDecomposition",
    "CollaborativeParams",
    "TalkingHeadsParams",
    "block_mixing",
    "collaborative_attention",
    "collaborative_from_multi_head",
    "cp_decomposition",
    "head_products",
    "init_collaborative",
    "init_talking_heads",
    "talking_heads_attention",
]
