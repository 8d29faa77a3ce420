"""Low-rank attention (survey §4.4): the n × m attention matrix replaced by a product of thin factors.

- :func:`lowrank_band_attention` (Guo et al., 2019; §4.4.1, low-rank parameterisation): a softmax over
  scores of rank ≤ D_k (queries and keys projected to a small width) mixed with a softmax within a
  band; causal by masking both.
- Nyström methods (§4.4.2): landmark queries Q̃ and keys K̃ give three softmax factors,
  softmax(QK̃ᵀ/√d) (n × l), Ã = softmax(Q̃K̃ᵀ/√d) (l × l) and softmax(Q̃Kᵀ/√d) (l × m), and the
  attention matrix is approximated by the first times an inverse of Ã times the third.

  * :func:`nystrom_csalr_attention` (CSALR, Chen et al., 2020): landmarks by strided average
    pooling, and (Ã + εI)⁻¹.
  * :func:`nystromformer_attention` (Xiong et al., 2021): landmarks by segment means, and the
    Moore–Penrose pseudoinverse Ã⁺, by the paper's iteration (:func:`iterative_pinv`) or exactly
    (:func:`exact_pinv`), with :func:`penrose_residuals` to say how far an iterate is from it.

  Neither has a causal form (a landmark mixes the positions of its segment or window).

Conventions shared by the family's registry entries: every random draw and learned parameter is an
option of ``apply``, drawn from ``rng`` when it is not given and returned with
``return_draws=True``; ``return_weights=True`` gives the effective n × m matrix W with
out = W v exactly (its rows need not sum to 1 nor be non-negative: a pseudoinverse has signs).
"""
from ..mechanism import family

# isort: off
# The family, one line per mechanism module, in catalogue order.
from .lowrank_band import *  # noqa: F403
from .nystrom_csalr import *  # noqa: F403
from .nystromformer import *  # noqa: F403
# isort: on

#: The family's catalogue records, in catalogue order (each declared in its mechanism's module).
RECORDS, __all__ = family(globals())
