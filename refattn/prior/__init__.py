"""Attention with prior (survey §4.5): attention scores combined with a prior distribution.

The survey's rule: the generated scores and a prior are added before the softmax,
Â = w1·A_generated + w2·G. The prior models locality (a Gaussian over positions, §4.5.1), comes
from a lower layer (§4.5.2), is a task adapter (§4.5.3), or replaces attention altogether
(§4.5.4: average attention, hard-coded Gaussians, Synthesizer).
"""
from .synthesizer import (
    DenseSynthesizer,
    FactorizedDenseSynthesizer,
    FactorizedRandomSynthesizer,
    RandomSynthesizer,
    dense_logits,
    init_dense_synthesizer,
    init_random_synthesizer,
    random_logits,
)
from .synthesizer_dense import RECORD as SYNTHESIZER_DENSE
from .synthesizer_dense import synthesizer_dense_attention
from .synthesizer_random import RECORD as SYNTHESIZER_RANDOM
from .synthesizer_random import synthesizer_random_attention

#: The family's catalogue records, in catalogue order (each declared in its mechanism's module).
RECORDS = (SYNTHESIZER_DENSE, SYNTHESIZER_RANDOM)

__all__ = [
    "DenseSynthesizer",
    "FactorizedDenseSynthesizer",
    "FactorizedRandomSynthesizer",
    "RandomSynthesizer",
    "dense_logits",
    "init_dense_synthesizer",
    "init_random_synthesizer",
    "random_logits",
    "synthesizer_dense_attention",
    "synthesizer_random_attention",
]
