"""Multi-head variants (survey §4.6): heads that interact, heads with limited spans, heads aggregated
by routing, and losses that make heads diverse or shape their patterns.
"""
from ..mechanism import family

# isort: off
# The family, one line per mechanism module, in catalogue order.
from .disagreement_reg import *  # noqa: F403
from .pattern_aux_loss import *  # noqa: F403
from .talking_heads import *  # noqa: F403
from .collaborative_heads import *  # noqa: F403
from .adaptive_span import *  # noqa: F403
from .multi_scale import *  # noqa: F403
from .capsule_routing import *  # noqa: F403
from .multi_query import *  # noqa: F403
from .head_size import *  # noqa: F403
# isort: on

#: The family's catalogue records, in catalogue order (each declared in its mechanism's module).
RECORDS, __all__ = family(globals())
