"""Argument checks of the pattern builders that the other families do not share."""
from __future__ import annotations

import numpy as np


def causal_flag(causal) -> bool:
    """Pattern builders take ``causal`` as a bool (alignment is the caller's business, see ``last_rows``)."""
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(
            f"causal must be True or False for a pattern builder, got {causal!r}; for bottom-right "
            "alignment build the m × m pattern and take .last_rows(n)"
        )
    return bool(causal)
