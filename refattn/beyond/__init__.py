"""Beyond pairwise softmax attention: mixers that drop q and k (FNet, AFT, gMLP) and hybrids that keep
softmax but change its support or normalisation (top-k, Sinkformer, XCiT, Skyformer, Scatterbrain,
Long-Short, GAU). Each still mixes tokens by some n × m matrix, and each shows it.
"""

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
)

__all__ = [
    "SkyformerFactors",
    "draw_skyformer_landmarks",
    "gaussian_kernel",
    "kernelized_attention",
    "skyformer_attention",
    "skyformer_factors",
]
