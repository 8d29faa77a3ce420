"""Positional information beyond sinusoids: learned, relative (Shaw), Transformer-XL, T5 buckets, ALiBi,
RoPE, KERPLE and DeBERTa's disentangled attention, each with the details that silently change results as
named options.
"""
from ..mechanism import family

# isort: off
# The family, one line per mechanism module, in catalogue order.
from .learned_pe import *  # noqa: F403
from .relative_pe import *  # noqa: F403
from .transformer_xl import *  # noqa: F403
from .t5_bias import *  # noqa: F403
from .alibi import *  # noqa: F403
from .rope import *  # noqa: F403
from .kerple import *  # noqa: F403
from .deberta import *  # noqa: F403
# isort: on

#: The family's catalogue records, in catalogue order (each declared in its mechanism's module).
RECORDS, __all__ = family(globals())
