r"""The gallery: every registered attention mechanism's weights on one sheet, straight from the registry.

One small panel per record with an ``apply`` (components have no attention matrix), in catalogue
order, each drawn from ``apply(q, k, v, rng=seed, return_weights=True)`` on seeded input with the
record's first causal setting and its own demonstration defaults. A mechanism registered tomorrow
appears here without anyone editing this module or the notebook cell that shows it.
"""
from __future__ import annotations

import math

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure

from .. import registry
from ..mechanism import Mechanism
from ..viz import STYLE_PATH, draw_attention, figure
from .common import seeded_qkv

__all__ = ["gallery"]


@matplotlib.style.context(STYLE_PATH)
def gallery(records: list[Mechanism] | None = None, *, n: int = 12, seed: int = 0, cols: int = 6) -> Figure:
    r"""Draw the effective attention matrix of every record with an ``apply``, one panel each.

    Parameters
    ----------
    records : list of Mechanism, optional
        What to draw; default every registered record that has an ``apply``.
    n : int, default 12
        Queries and keys of the seeded input (a record that needs another length, such as a
        pattern defined on whole blocks, uses its ``example_length``).
    seed : int, default 0
        Seed of q, k, v and of each mechanism's own draws.
    cols : int, default 6
        Panels per row.

    Returns
    -------
    fig : matplotlib.figure.Figure
        Pairs a mechanism does not let a query see are grey; signed weights (random features,
        the delta rule) on a diverging scale clipped at the 95th percentile of their magnitude, the
        others on one scale from 0 to 1.

    Examples
    --------
    >>> fig = gallery([registry.get("sdpa"), registry.get("band")])
    >>> [ax.get_title().split("\n")[0] for ax in fig.axes]
    ['sdpa', 'band']
    """
    records = [m for m in registry.all() if m.apply is not None] if records is None else list(records)
    rows = math.ceil(len(records) / cols)
    fig = figure((2.05 * cols + 0.4, 2.45 * rows + 0.5))
    panels = fig.subfigures(rows, cols, squeeze=False)
    for sub, record in zip(panels.flat, records, strict=False):      # the last row may have empty slots
        _panel(sub, record, n, seed)
    fig.suptitle(f"Every registered attention mechanism: its weights on a seeded input ({len(records)} records, "
                 "catalogue order; grey = pair not allowed)")
    return fig


def _panel(container, record: Mechanism, n: int, seed: int) -> None:
    length = n if record.cross else record.example_length
    causal = record.causal_settings[0]
    q, k, v = seeded_qkv(seed, length)
    if record.shared_qk:
        k = q                                                      # its keys are its queries
    result = record.apply(q, k, v, causal=causal, rng=seed, return_weights=True)
    A, allowed = result.weights, result.allowed
    while A.ndim > 2:                                              # heads: the first one
        A, allowed = A[0], None if allowed is None else allowed[0]
    note = {False: "", True: ", causal", "bottom-right": ", causal"}[causal]
    lead = {"tokens": ", head 1", "channels": ", head 1", "per_channel": ", channel 0", "fourier": ", Re F_n"}
    title = f"{record.id}\n{record.family}{note}" + (lead[record.mixing] if result.weights.ndim > 2 else "") + \
        (", channels" if record.mixing == "channels" else "")
    if record.nonnegative:
        draw_attention(container, A, allowed=allowed, titles=title, xlabel="", ylabel="", vmax=1.0, annotate=False,
                       colorbar=False)
    else:
        s = float(np.nanpercentile(np.abs(A), 95))               # a few huge estimates would flatten the rest
        draw_attention(container, A, allowed=allowed, titles=title, xlabel="", ylabel="", signed=True, vmin=None,
                       vmax=s, annotate=False, colorbar=False)
