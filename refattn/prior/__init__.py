"""Attention with prior (survey §4.5): attention scores combined with a prior distribution.

The survey's rule: the generated scores and a prior are added before the softmax,
Â = w1·A_generated + w2·G. The prior models locality (a Gaussian over positions, §4.5.1), comes
from a lower layer (§4.5.2), is a task adapter (§4.5.3), or replaces attention altogether
(§4.5.4: average attention, hard-coded Gaussians, Synthesizer).
"""

from .average_attention import RECORD as AVERAGE_ATTENTION
from .average_attention import (
    AverageAttentionParams,
    AverageAttentionState,
    average_attention,
    average_attention_decode,
    average_attention_layer,
    average_attention_step,
    average_weights,
    init_average_attention,
)
from .hardcoded_gaussian import (
    HARDCODED_OFFSETS,
    HARDCODED_SIGMA,
    hardcoded_gaussian_attention,
    hardcoded_gaussian_weights,
    hardcoded_offsets,
)
from .hardcoded_gaussian import RECORD as HARDCODED_GAUSSIAN

#: The family's catalogue records, in catalogue order (each declared in its mechanism's module).
RECORDS = (AVERAGE_ATTENTION, HARDCODED_GAUSSIAN)

__all__ = [
    "AverageAttentionParams", "AverageAttentionState", "average_attention", "average_attention_decode",
    "average_attention_layer", "average_attention_step", "average_weights", "init_average_attention",
    "HARDCODED_OFFSETS", "HARDCODED_SIGMA", "hardcoded_gaussian_attention", "hardcoded_gaussian_weights",
    "hardcoded_offsets",
]
