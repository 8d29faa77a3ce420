"""Positional information beyond sinusoids: learned, relative (Shaw), Transformer-XL, T5 buckets, ALiBi,
RoPE, KERPLE and DeBERTa's disentangled attention, each with the details that silently change results as
named options.
"""

#: The family's catalogue records, in catalogue order (each declared in its mechanism's module).
RECORDS = ()

__all__ = []
