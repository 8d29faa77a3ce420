"""Beyond pairwise softmax attention: mixers that drop q and k (FNet, AFT, gMLP) and hybrids that keep
softmax but change its support or normalisation (top-k, Sinkformer, XCiT, Skyformer, Scatterbrain,
Long-Short, GAU). Each still mixes tokens by some n × m matrix and returns it as its weights, except XCiT,
which attends across channels: its weights are the d × d channel map (the record's ``mixing="channels"``).
"""
from .aft import (
    AFT_VARIANTS,
    AFTConvFilter,
    AFTPositionBias,
    aft_attention,
    aft_position_bias,
    init_aft_conv_filter,
    init_aft_position_bias,
)
from .aft import RECORD as AFT
from .fnet import FNET_METHODS, dft_matrix, fnet_mixing
from .fnet import RECORD as FNET
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
from .gmlp import GMLP_INIT_EPS, GMLP_NORM_EPS, SpatialGatingParams, init_spatial_gating, spatial_gating_unit
from .gmlp import RECORD as GMLP
from .long_short import RECORD as LONG_SHORT
from .long_short import LongShortParams, init_long_short, long_short_attention, long_short_window_pattern
from .scatterbrain import RECORD as SCATTERBRAIN
from .scatterbrain import ScatterbrainParts, lsh_support, scatterbrain_attention, scatterbrain_parts
from .sinkformer import RECORD as SINKFORMER
from .sinkformer import SINKFORMER_ITERATIONS, sinkformer_attention, sinkformer_weights
from .skyformer import RECORD as SKYFORMER
from .skyformer import (
    SkyformerFactors,
    draw_skyformer_landmarks,
    gaussian_kernel,
    kernelized_attention,
    skyformer_attention,
    skyformer_factors,
)
from .topk import RECORD as TOPK
from .topk import TOPK_METHODS, TOPK_TIES, topk_attention, topk_mask
from .xcit import RECORD as XCIT
from .xcit import XCIT_EPS, XcitParams, cross_covariance_attention, init_xcit, normalize_tokens

#: The family's catalogue records, in catalogue order (each declared in its mechanism's module).
RECORDS = (
    FNET,
    AFT,
    GMLP,
    TOPK,
    SINKFORMER,
    XCIT,
    SKYFORMER,
    SCATTERBRAIN,
    LONG_SHORT,
    GAU,
)

__all__ = [
    "AFTConvFilter",
    "AFTPositionBias",
    "AFT_VARIANTS",
    "FNET_METHODS",
    "GAU_QK_STD",
    "GMLP_INIT_EPS",
    "GMLP_NORM_EPS",
    "GauLayerParams",
    "LongShortParams",
    "SINKFORMER_ITERATIONS",
    "ScaleOffset",
    "ScatterbrainParts",
    "SkyformerFactors",
    "SpatialGatingParams",
    "TOPK_METHODS",
    "TOPK_TIES",
    "XCIT_EPS",
    "XcitParams",
    "aft_attention",
    "aft_position_bias",
    "cross_covariance_attention",
    "dft_matrix",
    "draw_skyformer_landmarks",
    "fnet_mixing",
    "gated_attention_unit",
    "gau_attention",
    "gaussian_kernel",
    "init_aft_conv_filter",
    "init_aft_position_bias",
    "init_gau_layer",
    "init_long_short",
    "init_scale_offset",
    "init_spatial_gating",
    "init_xcit",
    "kernelized_attention",
    "long_short_attention",
    "long_short_window_pattern",
    "lsh_support",
    "mixed_chunk_weights",
    "normalize_tokens",
    "scale_offset",
    "scatterbrain_attention",
    "scatterbrain_parts",
    "sinkformer_attention",
    "sinkformer_weights",
    "skyformer_attention",
    "skyformer_factors",
    "spatial_gating_unit",
    "topk_attention",
    "topk_mask",
]
