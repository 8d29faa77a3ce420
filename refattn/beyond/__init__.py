"""Beyond pairwise softmax attention: mixers that drop q and k (FNet, AFT, gMLP) and hybrids that keep
softmax but change its support or normalisation (top-k, Sinkformer, XCiT, Skyformer, Scatterbrain,
Long-Short, GAU). Each still mixes tokens by some n × m matrix, and each shows it.
"""
from .fnet import FNET_METHODS, dft_matrix, fnet_mixing
from .fnet import RECORD as FNET
from .gmlp import GMLP_INIT_EPS, GMLP_NORM_EPS, SpatialGatingParams, init_spatial_gating, spatial_gating_unit
from .gmlp import RECORD as GMLP

#: The family's catalogue records, in catalogue order (each declared in its mechanism's module).
RECORDS = (
    FNET,
    GMLP,
)

__all__ = [
    "FNET_METHODS",
    "GMLP_INIT_EPS",
    "GMLP_NORM_EPS",
    "SpatialGatingParams",
    "dft_matrix",
    "fnet_mixing",
    "init_spatial_gating",
    "spatial_gating_unit",
]
