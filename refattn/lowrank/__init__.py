"""Low-rank attention (survey §4.4): the n × m attention matrix replaced by a product of thin factors.

- :func:`lowrank_band_attention` (Guo et al., 2019; §4.4.1, low-rank parameterisation): a softmax over
  scores of rank ≤ D_k (queries and keys projected to a small width) mixed with a softmax within a
  band; causal by masking both.

Conventions shared by the family's registry entries: every random draw and learned parameter is an
option of ``apply``, drawn from ``rng`` when it is not given and returned with
``return_draws=True``; ``return_weights=True`` gives the effective n × m matrix W with
out = W v exactly (its rows need not sum to 1 nor be non-negative: a pseudoinverse has signs).
"""

from .lowrank_band import RECORD as LOWRANK_BAND
from .lowrank_band import LowRankBandParams, init_lowrank_band, lowrank_band_attention

#: The family's catalogue records, in catalogue order (each declared in its mechanism's module).
RECORDS = (
    LOWRANK_BAND,
)

__all__ = [
    "LowRankBandParams",
    "init_lowrank_band",
    "lowrank_band_attention",
]
