"""What the family's layer doors share: the width that sizes the parameters they draw."""
from __future__ import annotations

from numpy.typing import NDArray


def drawn_width(x_q: NDArray) -> int:
    """d_model, the width of the checked ``x_q``, which sizes the parameters a layer draws from ``rng``.

    A ``ValueError`` naming ``x_q`` when it is 0: there are no projections to draw.
    """
    if x_q.shape[-1] == 0:
        raise ValueError(f"x_q has width d_model = 0 (shape {x_q.shape}): there are no projections to draw")
    return x_q.shape[-1]
