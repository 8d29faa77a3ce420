"""Beyond pairwise softmax attention: mixers that drop q and k (FNet, AFT, gMLP) and hybrids that keep
softmax but change its support or normalisation (top-k, Sinkformer, XCiT, Skyformer, Scatterbrain,
Long-Short, GAU). Each still mixes tokens by some n × m matrix, and each shows it.
"""
from .xcit import RECORD as XCIT
from .xcit import XCIT_EPS, XcitParams, cross_covariance_attention, init_xcit, normalize_tokens

#: The family's catalogue records, in catalogue order (each declared in its mechanism's module).
RECORDS = (
    XCIT,
)

__all__ = [
    "XCIT_EPS",
    "XcitParams",
    "cross_covariance_attention",
    "init_xcit",
    "normalize_tokens",
]
