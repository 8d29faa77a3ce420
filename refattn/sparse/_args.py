"""Argument checks shared by the pattern builders."""
from __future__ import annotations

import numpy as np


def sizes(n, m) -> tuple[int, int]:
    """Validate ``n`` and the optional ``m`` (default ``n``) of a pattern builder."""
    m = n if m is None else m
    for name, value in (("n", n), ("m", m)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(n), int(m)


def non_negative(name: str, value) -> int:
    """Validate a window, count or offset that may be 0."""
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{name} must be a non-negative int, got {value!r}")
    return int(value)


def causal_flag(causal) -> bool:
    """Pattern builders take ``causal`` as a bool (alignment is the caller's business, see ``last_rows``)."""
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(
            f"causal must be True or False for a pattern builder, got {causal!r}; for bottom-right "
            "alignment build the m × m pattern and take .last_rows(n)"
        )
    return bool(causal)
