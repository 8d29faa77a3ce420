"""Low-rank attention (survey §4.4): the n × m attention matrix replaced by a product of thin factors.

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
from .nystrom_csalr import RECORD as NYSTROM_CSALR
from .nystrom_csalr import average_pool, nystrom_csalr_attention
from .nystromformer import RECORD as NYSTROMFORMER
from .nystromformer import (
    NystromFactors,
    PenroseResiduals,
    draw_conv_weights,
    exact_pinv,
    iterative_pinv,
    landmark_kernels,
    landmark_segments,
    nystrom_factors,
    nystromformer_attention,
    penrose_residuals,
    segment_means,
)

#: The family's catalogue records, in catalogue order (each declared in its mechanism's module).
RECORDS = (
    NYSTROM_CSALR,
    NYSTROMFORMER,
)

__all__ = [
    "NystromFactors",
    "PenroseResiduals",
    "average_pool",
    "draw_conv_weights",
    "exact_pinv",
    "iterative_pinv",
    "landmark_kernels",
    "landmark_segments",
    "nystrom_csalr_attention",
    "nystrom_factors",
    "nystromformer_attention",
    "penrose_residuals",
    "segment_means",
]
