"""The vanilla Transformer core (Vaswani et al., 2017): the exact reference everything else is compared to."""
from ..mechanism import family

# isort: off
# The family, one line per mechanism module, in catalogue order.
from .softmax import *  # noqa: F403
from .sdpa import *  # noqa: F403
from .causal_mask import *  # noqa: F403
from .padding_mask import *  # noqa: F403
from .multi_head import *  # noqa: F403
from .cross_attention import *  # noqa: F403
from .sinusoidal_pe import *  # noqa: F403
from .layer_norm import *  # noqa: F403
from .ffn import *  # noqa: F403
from .encoder_layer import *  # noqa: F403
from .decoder_layer import *  # noqa: F403
from .transformer import *  # noqa: F403
# isort: on

#: The family's catalogue records, in catalogue order (each declared in its mechanism's module).
RECORDS, __all__ = family(globals())
