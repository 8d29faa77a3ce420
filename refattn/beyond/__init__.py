"""Beyond pairwise softmax attention: mixers that drop q and k (FNet, AFT, gMLP) and hybrids that keep
softmax but change its support or normalisation (top-k, Sinkformer, XCiT, Skyformer, Scatterbrain,
Long-Short, GAU). Each still mixes tokens by some n × m matrix and returns it as its weights, except XCiT,
which attends across channels: its weights are the d × d channel map (the record's ``mixing="channels"``).
"""
from ..mechanism import family

# isort: off
# The family, one line per mechanism module, in catalogue order.
from .fnet import *  # noqa: F403
from .aft import *  # noqa: F403
from .gmlp import *  # noqa: F403
from .topk import *  # noqa: F403
from .sinkformer import *  # noqa: F403
from .xcit import *  # noqa: F403
from .skyformer import *  # noqa: F403
from .scatterbrain import *  # noqa: F403
from .long_short import *  # noqa: F403
from .gau import *  # noqa: F403
# isort: on

#: The family's catalogue records, in catalogue order (each declared in its mechanism's module).
RECORDS, __all__ = family(globals())
