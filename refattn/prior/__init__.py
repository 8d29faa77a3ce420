"""Attention with prior (survey §4.5): attention scores combined with a prior distribution.

The survey's rule: the generated scores and a prior are added before the softmax,
Â = w1·A_generated + w2·G. The prior models locality (a Gaussian over positions, §4.5.1), comes
from a lower layer (§4.5.2), is a task adapter (§4.5.3), or replaces attention altogether
(§4.5.4: average attention, hard-coded Gaussians, Synthesizer).
"""
from ..mechanism import family

# isort: off
# The family, one line per module, in catalogue order (lower_layer: the survey's rule and the attention-only
# stack that realformer, predictive_attention and lazyformer share; prior_encoder: the encoder stack under it;
# synthesizer: the two synthesizers' parameters and logits).
from .gaussian_prior import *  # noqa: F403
from .gaussian_transformer import *  # noqa: F403
from .lower_layer import *  # noqa: F403
from .realformer import *  # noqa: F403
from .predictive_attention import *  # noqa: F403
from .lazyformer import *  # noqa: F403
from .prior_encoder import *  # noqa: F403
from .camtl import *  # noqa: F403
from .average_attention import *  # noqa: F403
from .hardcoded_gaussian import *  # noqa: F403
from .synthesizer import *  # noqa: F403
from .synthesizer_dense import *  # noqa: F403
from .synthesizer_random import *  # noqa: F403
# isort: on

#: The family's catalogue records, in catalogue order (each declared in its mechanism's module).
RECORDS, __all__ = family(globals())
