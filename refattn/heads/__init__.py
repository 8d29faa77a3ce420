"""Multi-head variants (survey §4.6): heads that interact, heads with limited spans, heads aggregated
by routing, and losses that make heads diverse or shape their patterns.
"""
from .talking_heads import RECORD as TALKING_HEADS
from .talking_heads import TalkingHeadsParams, init_talking_heads, talking_heads_attention

#: The family's catalogue records, in catalogue order (each declared in its mechanism's module).
RECORDS = (
    TALKING_HEADS,
)

__all__ = [
    "TalkingHeadsParams",
    "init_talking_heads",
    "talking_heads_attention",
]
