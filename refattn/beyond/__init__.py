"""Beyond pairwise softmax attention: mixers that drop q and k (FNet, AFT, gMLP) and hybrids that keep
softmax but change its support or normalisation (top-k, Sinkformer, XCiT, Skyformer, Scatterbrain,
Long-Short, GAU). Each still mixes tokens by some n × m matrix, and each shows it.
"""
from .gau import (
    GAU_QK_STD,
    GauLayerParams,
    ScaleOffset,
    gated_attention_unit,
    gau_attention,
    init_gau_layer,
    init_scale_offset,
    mixed_chunk_weights,
    scale_offset,
)
from .gau import RECORD as GAU
from .xcit import RECORD as XCIT
from .xcit import XCIT_EPS, XcitParams, cross_covariance_attention, init_xcit, normalize_tokens

#: The family's catalogue records, in catalogue order (each declared in its mechanism's module).
RECORDS = (
    XCIT,
    GAU,
)

__all__ = [
    "GAU_QK_STD",
    "GauLayerParams",
    "ScaleOffset",
    "XCIT_EPS",
    "XcitParams",
    "cross_covariance_attention",
    "gated_attention_unit",
    "gau_attention",
    "init_gau_layer",
    "init_scale_offset",
    "init_xcit",
    "mixed_chunk_weights",
    "normalize_tokens",
    "scale_offset",
]
