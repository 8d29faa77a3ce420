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
from .camtl import RECORD as CAMTL
from .camtl import CamtlParams, camtl_attention, camtl_prior, init_camtl
from .gaussian_prior import RECORD as GAUSSIAN_PRIOR
from .gaussian_prior import (
    GaussianPriorParams,
    gaussian_prior_attention,
    gaussian_prior_bias,
    init_gaussian_prior,
    predict_gaussian_prior,
)
from .gaussian_transformer import RECORD as GAUSSIAN_TRANSFORMER
from .gaussian_transformer import (
    GaussianTransformerParams,
    gaussian_transformer_attention,
    gaussian_transformer_prior,
    init_gaussian_transformer,
)
from .hardcoded_gaussian import (
    HARDCODED_OFFSETS,
    HARDCODED_SIGMA,
    hardcoded_gaussian_attention,
    hardcoded_gaussian_weights,
    hardcoded_offsets,
)
from .hardcoded_gaussian import RECORD as HARDCODED_GAUSSIAN
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
RECORDS = (
    GAUSSIAN_PRIOR,
    GAUSSIAN_TRANSFORMER,
    REALFORMER,
    PREDICTIVE_ATTENTION,
    LAZYFORMER,
    CAMTL,
    AVERAGE_ATTENTION,
    HARDCODED_GAUSSIAN,
    SYNTHESIZER_DENSE,
    SYNTHESIZER_RANDOM,
)

__all__ = [
    "AttentionConv",
    "AverageAttentionParams",
    "AverageAttentionState",
    "COMPUTE",
    "CamtlParams",
    "DenseSynthesizer",
    "EncoderTrace",
    "FactorizedDenseSynthesizer",
    "FactorizedRandomSynthesizer",
    "GaussianPriorParams",
    "GaussianTransformerParams",
    "HARDCODED_OFFSETS",
    "HARDCODED_SIGMA",
    "LayerResult",
    "LayerRule",
    "REALFORMER_RULE",
    "REUSE",
    "RandomSynthesizer",
    "StackProjections",
    "StackTrace",
    "attention_convolution",
    "attention_stack",
    "attention_with_prior_from_below",
    "average_attention",
    "average_attention_decode",
    "average_attention_layer",
    "average_attention_step",
    "average_weights",
    "camtl_attention",
    "camtl_prior",
    "dense_logits",
    "evolving_logits",
    "gaussian_prior_attention",
    "gaussian_prior_bias",
    "gaussian_transformer_attention",
    "gaussian_transformer_prior",
    "hardcoded_gaussian_attention",
    "hardcoded_gaussian_weights",
    "hardcoded_offsets",
    "init_attention_conv",
    "init_average_attention",
    "init_camtl",
    "init_dense_synthesizer",
    "init_gaussian_prior",
    "init_gaussian_transformer",
    "init_random_synthesizer",
    "init_stack_projections",
    "lazy_rules",
    "lazyformer_attention",
    "predict_gaussian_prior",
    "predictive_attention",
    "predictive_rules",
    "prior_encoder",
    "prior_from_below",
    "random_logits",
    "realformer_attention",
    "realformer_rules",
    "synthesizer_dense_attention",
    "synthesizer_random_attention",
]
