"""Positional information beyond sinusoids: learned, relative (Shaw), Transformer-XL, T5 buckets, ALiBi,
RoPE, KERPLE and DeBERTa's disentangled attention, each with the details that silently change results as
named options.
"""
from .alibi import ALIBI_FORMS, alibi_attention, alibi_bias, alibi_slopes
from .alibi import RECORD as ALIBI
from .deberta import RECORD as DEBERTA
from .deberta import (
    DebertaParams,
    deberta_attention,
    deberta_delta,
    disentangled_scores,
    init_deberta,
    log_bucket_position,
)
from .kerple import KERPLE_VARIANTS, KerpleParams, init_kerple, kerple_attention, kerple_bias
from .kerple import RECORD as KERPLE
from .learned_pe import RECORD as LEARNED_PE
from .learned_pe import init_learned_pe, learned_positional_encoding
from .relative_pe import RECORD as RELATIVE_PE
from .relative_pe import RelativeEmbeddings, init_relative_embeddings, relative_attention, relative_index
from .rope import RECORD as ROPE
from .rope import ROPE_BASE, ROPE_PAIRINGS, rope_attention, rope_frequencies, rotate
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
from .transformer_xl import RECORD as TRANSFORMER_XL
from .transformer_xl import (
    TransformerXLLayer,
    TransformerXLParams,
    init_transformer_xl,
    init_transformer_xl_layer,
    rel_shift,
    relative_sinusoids,
    transformer_xl_attention,
    transformer_xl_segments,
    transformer_xl_step,
    transformer_xl_terms,
)

#: The family's catalogue records, in catalogue order (each declared in its mechanism's module).
RECORDS = (
    LEARNED_PE,
    RELATIVE_PE,
    TRANSFORMER_XL,
    T5_BIAS,
    ALIBI,
    ROPE,
    KERPLE,
    DEBERTA,
)

__all__ = [
    "ALIBI_FORMS",
    "DebertaParams",
    "KERPLE_VARIANTS",
    "KerpleParams",
    "ROPE_BASE",
    "ROPE_PAIRINGS",
    "RelativeEmbeddings",
    "T5BiasParams",
    "T5_MAX_DISTANCE",
    "T5_NUM_BUCKETS",
    "TransformerXLLayer",
    "TransformerXLParams",
    "alibi_attention",
    "alibi_bias",
    "alibi_slopes",
    "deberta_attention",
    "deberta_delta",
    "disentangled_scores",
    "init_deberta",
    "init_kerple",
    "init_learned_pe",
    "init_relative_embeddings",
    "init_t5_bias",
    "init_transformer_xl",
    "init_transformer_xl_layer",
    "kerple_attention",
    "kerple_bias",
    "learned_positional_encoding",
    "log_bucket_position",
    "rel_shift",
    "relative_attention",
    "relative_index",
    "relative_positions",
    "relative_sinusoids",
    "rope_attention",
    "rope_frequencies",
    "rotate",
    "t5_bias",
    "t5_bias_attention",
    "t5_relative_position_bucket",
    "transformer_xl_attention",
    "transformer_xl_segments",
    "transformer_xl_step",
    "transformer_xl_terms",
]
