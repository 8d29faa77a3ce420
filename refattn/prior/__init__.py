"""Attention with prior (survey §4.5): attention maps shaped by a fixed or learned prior."""
from .average_attention import RECORD as AVERAGE_ATTENTION
from .average_attention import average_attention

#: The family's catalogue records, in catalogue order (each declared in its mechanism's module).
RECORDS = (AVERAGE_ATTENTION,)

__all__ = ["average_attention"]
