r"""The generic figure of a registry record whose ``figure`` is a :class:`~refattn.mechanism.FigureSpec`.

One column per panel of the spec: on top the pairs the mechanism lets each query see (its
``allowed`` pattern, dark = may attend), below the weights of ``apply`` on seeded q, k, v, with the
pairs outside the pattern in the neutral grey. A mechanism without a pattern (every pair may carry
weight) gets the weights row only. A new mechanism with a spec needs no drawing code of its own.
"""
from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from ..mechanism import Mechanism
from ..viz import draw_attention, draw_pattern, figure
from .common import seeded_qkv

__all__ = ["PATTERN_ROW", "WEIGHTS_ROW", "draw_spec"]

PATTERN_ROW = "pattern (True = may attend, dark)"
WEIGHTS_ROW = "weights on a seeded input (grey = pair not kept)"


def draw_spec(record: Mechanism) -> Figure:
    """Draw ``record`` by its :class:`~refattn.mechanism.FigureSpec`."""
    spec = record.figure
    q, k, v = seeded_qkv(spec.seed, spec.n, spec.m)
    if record.shared_qk:
        k = q                                                      # its keys are its queries
    results = [record.apply(q, k, v, rng=spec.seed, return_weights=True, **options) for _, options in spec.panels]
    titles = [title for title, _ in spec.panels]
    weights = np.stack([r.weights for r in results])
    patterned = any(r.allowed is not None for r in results)
    c = len(results)
    fig = figure((1.0 + 3.0 * c, 8.7 if patterned else 4.4))
    if patterned:
        allowed = np.stack([np.ones(r.weights.shape, dtype=bool) if r.allowed is None else r.allowed
                            for r in results])
        if np.any(weights[~allowed] != 0):
            raise ValueError(f"{record.id}: apply put weight outside the pattern it reports as allowed")
        top, bottom = fig.subfigures(2, 1, height_ratios=[1.08, 1.0])
        draw_pattern(top, allowed, titles=titles, suptitle=PATTERN_ROW)
        draw_attention(bottom, weights, allowed=allowed, titles=[t.split("\n")[0] for t in titles],
                       signed=not record.nonnegative, vmax=None if not record.nonnegative else 1.0,
                       suptitle=WEIGHTS_ROW)
    else:
        draw_attention(fig, weights, titles=titles, signed=not record.nonnegative,
                       vmax=None if not record.nonnegative else 1.0)
    fig.suptitle(spec.title)
    return fig
