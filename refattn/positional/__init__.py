"""Positional information beyond sinusoids: learned, relative (Shaw), Transformer-XL, T5 buckets, ALiBi,
RoPE, KERPLE and DeBERTa's disentangled attention, each with the details that silently change results as
named options.
"""

from .relative_pe import RECORD as RELATIVE_PE
from .relative_pe import RelativeEmbeddings, init_relative_embeddings, relative_attention, relative_index
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
RECORDS = (RELATIVE_PE, TRANSFORMER_XL)

__all__ = [
    "RelativeEmbeddings", "init_relative_embeddings", "relative_attention", "relative_index",
    "TransformerXLLayer", "TransformerXLParams", "init_transformer_xl", "init_transformer_xl_layer", "rel_shift",
    "relative_sinusoids", "transformer_xl_attention", "transformer_xl_segments", "transformer_xl_step",
    "transformer_xl_terms",
]
