r"""The generic figure of a registry record whose ``figure`` is a :class:`~refattn.mechanism.FigureSpec`.

One column per panel of the spec: on top the pairs the mechanism lets each query see (its
``allowed`` pattern, dark = may attend), below the weights of ``apply`` on seeded q, k, v, with the
pairs outside the pattern in the neutral grey. A mechanism without a pattern (every pair may carry
weight) gets the weights row only. Named positions (``labels``) and lines between index groups
(``split``) are drawn on every panel. A new mechanism with a spec needs no drawing code of its own.

A record names its spec directly (``figure=FigureSpec(...)``) or by ``"module:name"`` where the
module defines ``name = FigureSpec(...)`` (the figure's description next to its neighbours' in a
family's figure module).
"""
from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from ..mechanism import FigureSpec, Mechanism
from ..viz import draw_attention, draw_pattern, figure
from .common import seeded_qkv

__all__ = ["PATTERN_ROW", "SPLIT_COLOR", "WEIGHTS_ROW", "draw_spec", "split_lines"]

PATTERN_ROW = "pattern (True = may attend, dark)"
WEIGHTS_ROW = "weights on a seeded input (grey = pair not kept)"
SPLIT_COLOR = "#f28e2b"


def split_lines(axes, at, color=SPLIT_COLOR, lw: float = 1.0) -> None:
    """Lines between index groups (global | local tokens, tokens | span nodes, ...) on every panel."""
    for ax in np.ravel(axes):
        for a in at:
            ax.axhline(a - 0.5, color=color, lw=lw)
            ax.axvline(a - 0.5, color=color, lw=lw)


def draw_spec(record: Mechanism, spec: FigureSpec | None = None) -> Figure:
    """Draw ``record`` by ``spec`` (default its own :class:`~refattn.mechanism.FigureSpec`, ``record.figure``)."""
    spec = record.figure if spec is None else spec
    q, k, v = seeded_qkv(spec.seed, spec.n, spec.m)
    if record.shared_qk:
        k = q                                                      # its keys are its queries
    results = [record.apply(q, k, v, rng=spec.seed, return_weights=True, **options) for _, options in spec.panels]
    titles = [title for title, _ in spec.panels]
    weights = np.stack([r.weights for r in results])
    patterned = any(r.allowed is not None for r in results)
    c = len(results)
    fig = figure(spec.figsize or (1.0 + 3.0 * c, 8.7 if patterned else 4.4))
    labels = {"row_labels": spec.labels, "col_labels": spec.labels}
    if patterned:
        allowed = np.stack([np.ones(r.weights.shape, dtype=bool) if r.allowed is None else r.allowed
                            for r in results])
        if np.any(weights[~allowed] != 0):
            raise ValueError(f"{record.id}: apply put weight outside the pattern it reports as allowed")
        top, bottom = fig.subfigures(2, 1, height_ratios=[1.08, 1.0])
        split_lines(draw_pattern(top, allowed, titles=titles, suptitle=PATTERN_ROW, **labels), spec.split)
        split_lines(draw_attention(bottom, weights, allowed=allowed, titles=[t.split("\n")[0] for t in titles],
                                   signed=not record.nonnegative, vmax=None if not record.nonnegative else 1.0,
                                   suptitle=WEIGHTS_ROW, **labels), spec.split)
    else:
        split_lines(draw_attention(fig, weights, titles=titles, signed=not record.nonnegative,
                                   vmax=None if not record.nonnegative else 1.0, **labels), spec.split)
    fig.suptitle(spec.title)
    return fig
