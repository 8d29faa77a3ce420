"""Attention with prior (survey §4.5): attention scores combined with a prior distribution.

The survey's rule: the generated scores and a prior are added before the softmax,
Â = w1·A_generated + w2·G. The prior models locality (a Gaussian over positions, §4.5.1), comes
from a lower layer (§4.5.2), is a task adapter (§4.5.3), or replaces attention altogether
(§4.5.4: average attention, hard-coded Gaussians, Synthesizer).
"""
from .lazyformer import COMPUTE, REUSE, lazy_rules, lazyformer_attention
from .lazyformer import RECORD as LAZYFORMER
from .lower_layer import (
    LayerResult,
    LayerRule,
    StackProjections,
    StackTrace,
    attention_stack,
    attention_with_prior_from_below,
    init_stack_projections,
    prior_from_below,
)
from .predictive_attention import RECORD as PREDICTIVE_ATTENTION
from .predictive_attention import (
    AttentionConv,
    attention_convolution,
    evolving_logits,
    init_attention_conv,
    predictive_attention,
    predictive_rules,
)
from .prior_encoder import EncoderTrace, prior_encoder
from .realformer import REALFORMER_RULE, realformer_attention, realformer_rules
from .realformer import RECORD as REALFORMER

#: The family's catalogue records, in catalogue order (each declared in its mechanism's module).
RECORDS = (
    REALFORMER,
    PREDICTIVE_ATTENTION,
    LAZYFORMER,
)

__all__ = [
    "AttentionConv",
    "COMPUTE",
    "EncoderTrace",
    "LayerResult",
    "LayerRule",
    "REALFORMER_RULE",
    "REUSE",
    "StackProjections",
    "StackTrace",
    "attention_convolution",
    "attention_stack",
    "attention_with_prior_from_below",
    "evolving_logits",
    "init_attention_conv",
    "init_stack_projections",
    "lazy_rules",
    "lazyformer_attention",
    "predictive_attention",
    "predictive_rules",
    "prior_encoder",
    "prior_from_below",
    "realformer_attention",
    "realformer_rules",
]
