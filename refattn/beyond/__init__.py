"""Beyond pairwise softmax attention: mixers that drop q and k (FNet, AFT, gMLP) and hybrids that keep
softmax but change its support or normalisation (top-k, Sinkformer, XCiT, Skyformer, Scatterbrain,
Long-Short, GAU). Each still mixes tokens by some n × m matrix, and each shows it.
"""

from .scatterbrain import RECORD as _SCATTERBRAIN
from .scatterbrain import ScatterbrainParts, lsh_support, scatterbrain_attention, scatterbrain_parts
from .skyformer import RECORD as _SKYFORMER
from .skyformer import (
    SkyformerFactors,
    draw_skyformer_landmarks,
    gaussian_kernel,
    kernelized_attention,
    skyformer_attention,
    skyformer_factors,
)

#: The family's catalogue records, in catalogue order (each declared in its mechanism's module).
RECORDS = (
    _SKYFORMER,
    _SCATTERBRAIN,
)

__all__ = [
    "ScatterbrainParts",
    "SkyformerFactors",
    "draw_skyformer_landmarks",
    "gaussian_kernel",
    "kernelized_attention",
    "lsh_support",
    "scatterbrain_attention",
    "scatterbrain_parts",
    "skyformer_attention",
    "skyformer_factors",
]
