"""Positional information beyond sinusoids: learned, relative (Shaw), Transformer-XL, T5 buckets, ALiBi,
RoPE, KERPLE and DeBERTa's disentangled attention, each with the details that silently change results as
named options.
"""

from .alibi import ALIBI_FORMS, alibi_attention, alibi_bias, alibi_slopes
from .alibi import RECORD as ALIBI
from .rope import RECORD as ROPE
from .rope import ROPE_BASE, ROPE_PAIRINGS, rope_attention, rope_frequencies, rotate

#: The family's catalogue records, in catalogue order (each declared in its mechanism's module).
RECORDS = (
    ALIBI,
    ROPE,
)

__all__ = [
    "ALIBI_FORMS",
    "ROPE_BASE",
    "ROPE_PAIRINGS",
    "alibi_attention",
    "alibi_bias",
    "alibi_slopes",
    "rope_attention",
    "rope_frequencies",
    "rotate",
]
