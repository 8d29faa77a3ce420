"""Positional information beyond sinusoids: learned, relative (Shaw), Transformer-XL, T5 buckets, ALiBi,
RoPE, KERPLE and DeBERTa's disentangled attention, each with the details that silently change results as
named options.
"""
from .alibi import RECORD as ALIBI
from .alibi import ALIBI_FORMS, alibi_attention, alibi_bias, alibi_slopes
from .kerple import RECORD as KERPLE
from .kerple import KERPLE_VARIANTS, KerpleParams, init_kerple, kerple_attention, kerple_bias
from .rope import RECORD as ROPE
from .rope import ROPE_BASE, ROPE_PAIRINGS, rope_attention, rope_frequencies, rotate
from .t5_bias import RECORD as T5_BIAS
from .t5_bias import (
    T5BiasParams,
    T5_MAX_DISTANCE,
    T5_NUM_BUCKETS,
    init_t5_bias,
    relative_positions,
    t5_bias,
    t5_bias_attention,
    t5_relative_position_bucket,
)

#: The family's catalogue records, in catalogue order (each declared in its mechanism's module).
RECORDS = (
    T5_BIAS,
    ALIBI,
    ROPE,
    KERPLE,
)

__all__ = [
    "ALIBI_FORMS",
    "KERPLE_VARIANTS",
    "KerpleParams",
    "ROPE_BASE",
    "ROPE_PAIRINGS",
    "T5BiasParams",
    "T5_MAX_DISTANCE",
    "T5_NUM_BUCKETS",
    "alibi_attention",
    "alibi_bias",
    "alibi_slopes",
    "init_kerple",
    "init_t5_bias",
    "kerple_attention",
    "kerple_bias",
    "relative_positions",
    "rope_attention",
    "rope_frequencies",
    "rotate",
    "t5_bias",
    "t5_bias_attention",
    "t5_relative_position_bucket",
]
