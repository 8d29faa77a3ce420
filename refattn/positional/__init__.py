"""Positional information beyond sinusoids: learned, relative (Shaw), Transformer-XL, T5 buckets, ALiBi,
RoPE, KERPLE and DeBERTa's disentangled attention, each with the details that silently change results as
named options.
"""
from .deberta import RECORD as DEBERTA
from .deberta import (
    DebertaParams,
    deberta_attention,
    disentangled_scores,
    init_deberta,
    log_bucket_position,
    relative_index,
)
from .learned_pe import RECORD as LEARNED_PE
from .learned_pe import init_learned_pe, learned_positional_encoding

#: The family's catalogue records, in catalogue order (each declared in its mechanism's module).
RECORDS = (LEARNED_PE, DEBERTA)

__all__ = ["DebertaParams", "deberta_attention", "disentangled_scores", "init_deberta", "init_learned_pe",
           "learned_positional_encoding", "log_bucket_position", "relative_index"]
