"""Beyond pairwise softmax attention: mixers that drop q and k (FNet, AFT, gMLP) and hybrids that keep
softmax but change its support or normalisation (top-k, Sinkformer, XCiT, Skyformer, Scatterbrain,
Long-Short, GAU). Each still mixes tokens by some n × m matrix, and each shows it.
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

#: The family's catalogue records, in catalogue order (each declared in its mechanism's module).
RECORDS = (
    AFT,
)

__all__ = [
    "AFT_VARIANTS", "AFTConvFilter", "AFTPositionBias", "aft_attention", "aft_position_bias", "init_aft_conv_filter",
    "init_aft_position_bias",
]
