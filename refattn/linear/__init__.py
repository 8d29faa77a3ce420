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
from .attention import linear_attention
from .delta_rule import RECORD as DELTA_RULE
from .delta_rule import DeltaBetaParams, delta_beta, delta_rule_attention, init_delta_beta
from .efficient_attention import RECORD as EFFICIENT_ATTENTION
from .efficient_attention import efficient_attention
from .linear_elu import RECORD as LINEAR_ELU
from .linear_elu import elu_feature_map
from .performer import RECORD_POSITIVE as PERFORMER_POSITIVE
from .performer import RECORD_TRIG as PERFORMER_TRIG
from .performer import draw_omega, favor_features, favor_mse, performer_attention
from .rfa import RECORD as RFA
from .rfa import RFAGateParams, init_rfa_gate, rfa_attention, rfa_gates

#: The family's catalogue records, in catalogue order (each declared in its mechanism's module).
RECORDS = (LINEAR_ELU, PERFORMER_POSITIVE, PERFORMER_TRIG, EFFICIENT_ATTENTION, RFA, DELTA_RULE)

__all__ = [
    "DeltaBetaParams",
    "RFAGateParams",
    "delta_beta",
    "delta_rule_attention",
    "draw_omega",
    "efficient_attention",
    "elu_feature_map",
    "favor_features",
    "favor_mse",
    "init_delta_beta",
    "init_rfa_gate",
    "linear_attention",
    "performer_attention",
    "rfa_attention",
    "rfa_gates",
]
