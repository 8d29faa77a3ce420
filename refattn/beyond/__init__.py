"""Beyond pairwise softmax attention: mixers that drop q and k (FNet, AFT, gMLP) and hybrids that keep
softmax but change its support or normalisation (top-k, Sinkformer, XCiT, Skyformer, Scatterbrain,
Long-Short, GAU). Each still mixes tokens by some n × m matrix, and each shows it.
"""
from .fnet import FNET_METHODS, dft_matrix, fnet_mixing
from .fnet import RECORD as FNET

#: The family's catalogue records, in catalogue order (each declared in its mechanism's module).
RECORDS = (
    FNET,
)

__all__ = [
    "FNET_METHODS",
    "dft_matrix",
    "fnet_mixing",
]
