"""Attention with prior (survey §4.5): attention scores combined with a prior distribution.

The survey's rule: the generated scores and a prior are added before the softmax,
Â = w1·A_generated + w2·G. The prior models locality (a Gaussian over positions, §4.5.1), comes
from a lower layer (§4.5.2), is a task adapter (§4.5.3), or replaces attention altogether
(§4.5.4: average attention, hard-coded Gaussians, Synthesizer).
"""
from .gaussian_prior import RECORD as GAUSSIAN_PRIOR
from .gaussian_prior import (
    GaussianPriorParams,
    gaussian_prior_attention,
    gaussian_prior_bias,
    init_gaussian_prior,
    predict_gaussian_prior,
)

#: The family's catalogue records, in catalogue order (each declared in its mechanism's module).
RECORDS = (GAUSSIAN_PRIOR,)

__all__ = ["GaussianPriorParams", "gaussian_prior_attention", "gaussian_prior_bias", "init_gaussian_prior",
           "predict_gaussian_prior"]
