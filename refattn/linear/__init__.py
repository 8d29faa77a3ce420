"""Linearised attention (survey §4.2): feature maps φ, the three multiplication orders, gated memories.

- :func:`linear_attention` with a feature map (:func:`elu_feature_map`, Performer's
  :func:`favor_features`): the left product (the equation), the right product and the causal scan.
- :func:`efficient_attention` (Shen et al.): softmax over Q's features and K's positions.
- :func:`rfa_attention` (gated memory, Peng et al.) and :func:`delta_rule_attention` (fast-weight
  delta rule, Schlag et al.): causal recurrences with their own scans.

Every method of every mechanism here gives the same result, or the same error, at the edge sizes:

- n = 0 (no query) or a batch dimension of 0: empty results of the right shape.
- m = 0 (no key): every query sees no key and gets the ``fully_masked`` policy's row ("zero" and
  "uniform", a mean over no key, give 0; "nan" gives NaN), as does any query that sees no key
  (bottom-right with n > m); a denominator is checked only for the rows that see a key.
- d_k = 0: a feature map that then gives no feature at all (F = 0, e.g. elu + 1 of an empty
  vector) is refused with a ``ValueError`` naming the map, for every method: with no feature every
  similarity φ(q)·φ(k) is the empty sum 0, and the weights 0/0 are undefined. Performer's fixed
  scale d_k^{-1/4}, Efficient Attention's softmax over the d_k features of a query, and the gates
  and rates drawn over d_k features (rfa, delta_rule) refuse d_k = 0 by name alike.
- d_v = 0: outputs of shape (..., n, 0).
"""
from ..mechanism import family

# isort: off
# The family, one line per mechanism module, in catalogue order (attention: the linear_attention engine,
# linear_elu's function).
from .attention import *  # noqa: F403
from .linear_elu import *  # noqa: F403
from .performer import *  # noqa: F403
from .efficient_attention import *  # noqa: F403
from .rfa import *  # noqa: F403
from .delta_rule import *  # noqa: F403
# isort: on

#: The family's catalogue records, in catalogue order (each declared in its mechanism's module).
RECORDS, __all__ = family(globals())
