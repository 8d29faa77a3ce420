r"""Random attention (survey §4.1.1, Fig. 4d): ``r`` keys drawn at random for each query.

    J_i = r keys drawn uniformly without replacement   (causal: from j ≤ i, min(r, i + 1) of them)

With ``causal="bottom-right"`` the n queries are the last n of the m positions: query i draws
from j ≤ i + m − n.

Random edges make the attention graph an expander, so information crosses the sequence in few
layers (BigBird, §2). The draw is explicit: :func:`draw_random_keys` returns it as an array that
another implementation can be fed, and :func:`random_pattern` accepts such an array back.
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.checks import as_rng, causal_alignment, check_size, check_sizes
from ..draws import given_or_drawn, optional_rng
from ..mechanism import FigureSpec, Mechanism
from ..papers import BIGBIRD
from .attention import pattern_apply
from .pattern import SparsePattern, as_indices, query_positions

__all__ = ["draw_random_keys", "random_pattern"]


def draw_random_keys(rng, n: int, r: int, *, m: int | None = None, causal: bool | str = False) -> NDArray:
    r"""Draw ``r`` distinct keys per query, uniformly (every r-subset equally likely).

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw.
    n : int
        Number of queries.
    r : int
        Keys per query; at most ``m`` (non-causal).
    m : int, optional
        Number of keys; default ``n``.
    causal : {False, True, "top-left", "bottom-right"}, default False
        Draw query *i*'s keys from ``j <= i`` only (``True``, "top-left"), or from
        ``j <= i + m − n`` ("bottom-right"); rows with no more than ``r`` candidates take all of them.

    Returns
    -------
    keys : (n, r) ndarray of int64
        Sorted within each row; ``-1`` pads causal rows that have fewer than ``r`` candidates.

    Notes
    -----
    Rows are drawn with replacement and redrawn while they hold a repeat (rejection sampling,
    which is exactly uniform over r-subsets and vectorised; a row is accepted with probability
    ≥ 1/e for r ≤ √m, and a per-row ``Generator.choice`` takes over when r > m/2).
    """
    rng = as_rng(rng)
    n, m = check_sizes(n, m)
    i, alignment = query_positions(n, m, causal)                   # (n,) query positions
    r = check_size("r", r)
    if alignment is None and r > m and n:
        raise ValueError(f"cannot draw r={r} distinct keys from m={m}: without a causal mask r <= m "
                         "(causal rows with fewer candidates take them all)")
    limit = np.full(n, m) if alignment is None else np.clip(i + 1, 0, m)   # candidates 0 … limit − 1
    keys = np.full((n, r), -1, dtype=np.int64)
    take_all = limit <= r
    keys[take_all] = np.where(np.arange(r) < limit[take_all, None], np.arange(r), -1)
    rows = np.flatnonzero(~take_all)
    dense = rows[r > limit[rows] // 2]
    for i in dense:                                                # r close to the pool size
        keys[i] = np.sort(rng.choice(limit[i], size=r, replace=False))
    pending = rows[r <= limit[rows] // 2]
    while pending.size:
        draw = np.sort(rng.integers(0, limit[pending, None], size=(pending.size, r)), axis=1)
        ok = np.all(np.diff(draw, axis=1) > 0, axis=1)
        keys[pending[ok]] = draw[ok]
        pending = pending[~ok]
    return keys


def random_pattern(
    n: int, r: int | None = None, *, m: int | None = None, causal: bool | str = False,
    rng=None, keys: ArrayLike | None = None,
) -> SparsePattern:
    r"""Each query attends to ``r`` random keys, drawn from ``rng`` or given as ``keys``.

    .. math::

        J_i = \{\, j_{i,1}, \dots, j_{i,r} \,\}, \quad j_{i,t} \sim \text{uniform, distinct}

    Parameters
    ----------
    n : int
        Number of queries.
    r : int, optional
        Keys per query (required with ``rng``).
    m : int, optional
        Number of keys; default ``n``.
    causal : {False, True, "top-left", "bottom-right"}, default False
        Draw from ``j <= i`` only (``True``, "top-left") or from ``j <= i + m − n``
        ("bottom-right": the n queries are the last n of the m positions); with ``keys``, drop the
        keys after that.
    rng : numpy.random.Generator or int, optional
        Source of the draw (see :func:`draw_random_keys`).
    keys : (n, r) array_like of int, optional
        An explicit draw (``rng`` is then unused); ``-1`` entries are ignored.

    Returns
    -------
    SparsePattern
        Exactly ``r`` keys per row (``min(r, i + 1)`` if causal, top-left) when drawn from ``rng``.

    References
    ----------
    .. [1] M. Zaheer et al., "Big Bird: Transformers for Longer Sequences", arXiv:2007.14062v2, §2.

    Examples
    --------
    >>> random_pattern(6, 2, rng=0).row_counts()
    array([2, 2, 2, 2, 2, 2])
    """
    n, m = check_sizes(n, m)
    alignment = causal_alignment(causal)
    if keys is None and rng is not None and r is None:
        raise ValueError("random_pattern needs r (keys per query) to draw from rng")
    keys = given_or_drawn("random", "keys", keys, optional_rng(rng),
                          lambda g: draw_random_keys(g, n, r, m=m, causal=causal), what="its keys")
    keys = as_indices("keys", keys, ndim=2)
    if keys.shape[0] != n:
        raise ValueError(f"keys must have shape (n={n}, r), got shape {keys.shape}")
    if r is not None and keys.shape[1] != r:
        raise ValueError(f"keys has {keys.shape[1]} columns but r={r}")
    kept = keys >= 0
    if np.any(keys[kept] >= m) or np.any(keys < -1):
        raise ValueError(f"keys must lie in [0, m={m}) (or be -1 for none), got values in [{keys.min()}, {keys.max()}]")
    rows = np.repeat(np.arange(n), keys.shape[1]).reshape(keys.shape)
    pattern = SparsePattern.from_pairs(rows[kept], keys[kept], n, m)
    if np.any(pattern.row_counts() != kept.sum(axis=1)):
        raise ValueError("keys repeats a key within a row")
    return pattern if alignment is None else pattern.causal(alignment)


def _random(n, m, causal, rng, r=2, keys=None):
    """r = 2 keys from rng, or an explicit draw"""
    if keys is None:
        if rng is None:
            raise ValueError("random draws its keys from rng: pass rng= (or keys=)")
        keys = draw_random_keys(rng, n, r, m=m, causal=causal)
    return random_pattern(n, m=m, causal=causal, keys=keys), {"keys": keys}


RECORD = Mechanism(
    id="random", title="Random attention", family="sparse", section="4.1.1.1 (Fig. 4d)", paper=BIGBIRD,
    equation=r"J_i = r \text{ keys drawn uniformly without replacement}",
    time="O(n·r·d)", memory="O(n·r)", kind="attention", methods=("equation", "csr", "bsr", "auto"),
    function=random_pattern, apply=pattern_apply(_random, "random"),
    causal=True, position_dependent=True, figure=FigureSpec(
        title="Random attention (Fig. 4d): r = 3 distinct keys per query, uniform, seed 24", n=16, seed=24, panels=(
        ("r keys from all m", {"r": 3}),
        ("causal: min(r, i + 1) keys from j ≤ i", {"r": 3, "causal": True}),
    )),
    exact_options=lambda n, m: {"r": m}, exact_limit="r = m", draws=("keys",),
)
