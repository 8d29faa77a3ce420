r"""The figures of the priors from lower layers (survey §4.5.2), drawn layer by layer.

Seeded input (:func:`~refattn.figures.common.seeded_qkv`: n = m = 10, d = 8) and the registry
record's ``apply`` (its projections drawn from the fixed seed), stepped through with
:func:`~refattn.prior.attention_stack`. One row per layer, bottom first: the prior from below
w2·g(Â⁽ˡ⁻¹⁾), this layer's own term w1·S⁽ˡ⁾, their sum Â⁽ˡ⁾ (the map passed up), all three on one
signed scale, and the weights softmax(Â⁽ˡ⁾). A term left out of the rule (nothing below the bottom
layer, w2 = 0, or w1 = 0 in a layer that reuses the map) is drawn as zeros and says so.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
from matplotlib.figure import Figure

from .. import registry
from ..prior import LayerRule, attention_stack
from ..viz import draw_attention, figure
from .common import seeded_qkv

__all__ = ["stack_figure"]

N, SEED = 10, 7


def stack_figure(mechanism: str, rules_of: Callable[[int, dict], tuple[LayerRule, ...]], title: str, *,
                 layers: int = 3, causal: bool = False, **options) -> Figure:
    """Every layer of the registry entry ``mechanism``'s stack: prior, own scores, their sum, weights.

    Parameters
    ----------
    mechanism : str
        The registry id.
    rules_of : callable
        ``rules_of(layers, draws)``, the rule of layers 2 … L the entry used with ``options`` and its
        ``draws``.
    title : str
        The figure's title.
    layers : int, default 3
        L, one row each.
    causal : bool, default False
        Passed to ``apply``; masked pairs are drawn grey.
    **options
        Further options of ``apply``.

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    q, k, v = seeded_qkv(SEED, N)
    result = registry.get(mechanism).apply(q, k, v, rng=SEED, layers=layers, causal=causal, return_weights=True,
                                           return_draws=True, **options)
    trace = attention_stack(q, k, v, rules=rules_of(layers, result.draws), projections=result.draws["projections"],
                            causal=causal)
    if not np.array_equal(trace.output, result.output):
        raise ValueError(f"{mechanism}: the figure's stack and the registry entry disagree")
    allowed = np.ones((N, N), dtype=bool) if trace.allowed is None else trace.allowed
    rules = (None, *rules_of(layers, result.draws))
    fig = figure((13.0, 3.3 * layers + 0.4))
    rows = fig.subfigures(layers, 1)
    signed_max = max(float(np.nanmax(np.abs(np.where(allowed, a, 0.0)))) for a in trace.combined + [
        s for s in trace.scores if s is not None] + [p for p in trace.priors if p is not None])
    for l, row in enumerate(rows):
        maps, weights = row.subfigures(1, 2, width_ratios=[3.0, 1.25])
        rule = rules[l]
        prior = trace.priors[l] if trace.priors[l] is not None else np.zeros((N, N))
        own = trace.scores[l] if trace.scores[l] is not None else np.zeros((N, N))
        own = own if rule is None else rule.w1 * own
        if rule is None:
            labels = ["nothing below (bottom layer)", "S⁽¹⁾ = QKᵀ/√d", "Â⁽¹⁾ = S⁽¹⁾, passed up"]
        else:
            labels = [f"prior w2·g(Â⁽{l}⁾), w2 = {rule.w2:g}" if rule.w2 else "prior left out (w2 = 0)",
                      f"w1·S⁽{l + 1}⁾, w1 = {rule.w1:g}" if rule.w1 else "own scores not computed (w1 = 0)",
                      f"Â⁽{l + 1}⁾ = sum, passed up"]
        draw_attention(maps, np.stack([prior, own, trace.combined[l]]), allowed=allowed, signed=True,
                       vmin=None, vmax=signed_max, annotate=False, titles=labels,
                       ylabel=f"layer {l + 1}: query i")
        draw_attention(weights, trace.weights[l], allowed=allowed, annotate=False, vmax=1.0, ylabel="",
                       titles=f"weights softmax(Â⁽{l + 1}⁾)")
    fig.suptitle(title)
    return fig
