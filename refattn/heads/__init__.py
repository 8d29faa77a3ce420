"""Multi-head variants (survey §4.6): heads that interact, heads with limited spans, heads aggregated
by routing, and losses that make heads diverse or shape their patterns.
"""

from .disagreement_reg import RECORD as _DISAGREEMENT_REG
from .disagreement_reg import (DISAGREEMENT_TERMS, cosine_disagreement, cosine_disagreement_grad, disagreement,
                               output_disagreement, position_disagreement, position_disagreement_grad,
                               subspace_disagreement)
from .pattern_aux_loss import RECORD as _PATTERN_AUX_LOSS
from .pattern_aux_loss import (PATTERNS, guide_pattern, guide_patterns, pattern_loss, pattern_loss_grad,
                               pattern_loss_score_grad)

#: The family's catalogue records, in catalogue order (each declared in its mechanism's module).
RECORDS = (_DISAGREEMENT_REG, _PATTERN_AUX_LOSS)

__all__ = [
    "DISAGREEMENT_TERMS", "cosine_disagreement", "cosine_disagreement_grad", "disagreement", "output_disagreement",
    "position_disagreement", "position_disagreement_grad", "subspace_disagreement",
    "PATTERNS", "guide_pattern", "guide_patterns", "pattern_loss", "pattern_loss_grad", "pattern_loss_score_grad",
]
