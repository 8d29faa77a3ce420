"""Positional information beyond sinusoids: learned, relative (Shaw), Transformer-XL, T5 buckets, ALiBi,
RoPE, KERPLE and DeBERTa's disentangled attention, each with the details that silently change results as
named options.
"""
from .kerple import KERPLE_VARIANTS, KerpleParams, init_kerple, kerple_attention, kerple_bias
from .kerple import RECORD as KERPLE
from .t5_bias import RECORD as T5_BIAS
from .t5_bias import (
    T5_MAX_DISTANCE,
    T5_NUM_BUCKETS,
    T5BiasParams,
    init_t5_bias,
    relative_positions,
    t5_bias,
    t5_bias_attention,
    t5_relative_position_bucket,
)

#: The family's catalogue records, in catalogue order (each declared in its mechanism's module).
RECORDS = (T5_BIAS, KERPLE)

__all__ = [
    "KERPLE_VARIANTS",
    "KerpleParams",
    "init_kerple",
    "kerple_attention",
    "kerple_bias",
    "T5_MAX_DISTANCE",
    "T5_NUM_BUCKETS",
    "T5BiasParams",
    "init_t5_bias",
    "relative_positions",
    "t5_bias",
    "t5_bias_attention",
    "t5_relative_position_bucket",
]
