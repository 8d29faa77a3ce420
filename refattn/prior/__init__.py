"""Attention with prior (survey §4.5): attention scores combined with a prior distribution.

The survey's rule: the generated scores and a prior are added before the softmax,
Â = w1·A_generated + w2·G. The prior models locality (a Gaussian over positions, §4.5.1), comes
from a lower layer (§4.5.2), is a task adapter (§4.5.3), or replaces attention altogether
(§4.5.4: average attention, hard-coded Gaussians, Synthesizer).
"""
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

#: The family's catalogue records, in catalogue order (each declared in its mechanism's module).
RECORDS = (
    GAUSSIAN_PRIOR,
    GAUSSIAN_TRANSFORMER,
    CAMTL,
)

__all__ = [
    "CamtlParams",
    "GaussianPriorParams",
    "GaussianTransformerParams",
    "camtl_attention",
    "camtl_prior",
    "gaussian_prior_attention",
    "gaussian_prior_bias",
    "gaussian_transformer_attention",
    "gaussian_transformer_prior",
    "init_camtl",
    "init_gaussian_prior",
    "init_gaussian_transformer",
    "predict_gaussian_prior",
]
