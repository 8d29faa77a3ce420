r"""Global attention (survey §4.1.1, Fig. 4a).

    J_i = all keys           if i ∈ G         (a global query attends to everything)
    J_i ⊇ G                  for every i      (every query attends to the global keys)

A few positions G act as hubs: any two tokens are at most two hops apart through them. G indexes
positions shared by queries and keys (self-attention): query i is at position i, also when n != m,
except with ``causal="bottom-right"``, where the n queries are the last n of the m positions.
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from ..common.checks import check_sizes
from ..mechanism import FigureSpec, Mechanism
from ..papers import LONGFORMER
from .attention import pattern_apply
from .pattern import SparsePattern, as_indices, query_positions

__all__ = ["global_pattern"]


def global_pattern(
    n: int, global_indices: ArrayLike = (0,), *, m: int | None = None, causal: bool | str = False
) -> SparsePattern:
    r"""Global positions attend to all keys and are attended by all queries.

    .. math::

        J_i = \{0, \dots, m-1\} \text{ if } i \in G, \qquad J_i = G \text{ otherwise}

    Parameters
    ----------
    n : int
        Number of queries.
    global_indices : array_like of int, default (0,)
        The global positions *G* (e.g. ``[CLS]`` at 0); each must lie in ``[0, max(n, m))``.
    m : int, optional
        Number of keys; default ``n``.
    causal : {False, True, "top-left", "bottom-right"}, default False
        Keep only ``j <= i`` (a global token then sees its past, and is seen by its future);
        "bottom-right": the n queries are the last n of the m positions, query *i* at position
        i + m − n, which decides both whether it is global and which keys it may see.

    Returns
    -------
    SparsePattern
        nnz ≈ g·(n + m), built without an n × m array.

    References
    ----------
    .. [1] I. Beltagy et al., "Longformer", arXiv:2004.05150v2, §3.1 ("global attention");
       M. Zaheer et al., "Big Bird", arXiv:2007.14062v2, §2.

    Examples
    --------
    >>> global_pattern(4, [1]).to_mask().astype(int)
    array([[0, 1, 0, 0],
           [1, 1, 1, 1],
           [0, 1, 0, 0],
           [0, 1, 0, 0]])
    """
    n, m = check_sizes(n, m)
    i, alignment = query_positions(n, m, causal)                   # (n,) query positions
    G = np.unique(as_indices("global_indices", global_indices).astype(np.int64))   # () is "no global token"
    if G.size and (G.min() < 0 or G.max() >= max(n, m)):
        raise ValueError(f"global_indices must lie in [0, max(n, m)={max(n, m)}), got values in [{G.min()}, {G.max()}]")
    g_rows, g_cols = np.flatnonzero(np.isin(i, G)), G[G < m]      # queries at a global position; global keys
    rows = np.concatenate([np.repeat(g_rows, m), np.repeat(np.arange(n), len(g_cols))])
    cols = np.concatenate([np.tile(np.arange(m), len(g_rows)), np.tile(g_cols, n)])
    pattern = SparsePattern.from_pairs(rows, cols, n, m)
    return pattern if alignment is None else pattern.causal(alignment)


def _global(n, m, causal, rng, global_indices=None):
    """G = {0} (no global token when there is no position, n = m = 0)"""
    return global_pattern(n, ((0,) if max(n, m) else ()) if global_indices is None else global_indices, m=m,
                          causal=causal)


RECORD = Mechanism(
    id="global", title="Global attention", family="sparse", section="4.1.1.1 (Fig. 4a)", paper=LONGFORMER,
    equation=r"J_i = \{0..m-1\} \text{ if } i \in G, \text{ else } G",
    time="O(g·(n+m)·d)", memory="O(g·(n+m))", kind="attention", methods=("equation", "csr", "bsr", "auto"),
    function=global_pattern, apply=pattern_apply(_global, "global"),
    causal=True, position_dependent=True, figure=FigureSpec(
        title="Global attention (Fig. 4a): G = {0, 9} attend to all keys and are attended by all",
        n=16, seed=20, panels=(
        ("non-causal: J_i = all if i ∈ G, else G", {"global_indices": (0, 9)}),
        ("causal: the same, and j ≤ i", {"global_indices": (0, 9), "causal": True}),
    )),
    exact_options=lambda n, m: {"global_indices": tuple(range(m))}, exact_limit="G = every key position",
)
