r"""Band (sliding-window, local) attention (survey §4.1.1, Fig. 4b).

    J_i = { j : |i − j| ≤ w }            non-causal: w keys on each side plus i itself, 2w + 1 in all
    J_i = { j : 0 ≤ i − j ≤ w }          causal: i itself and the w keys before it

The window is inclusive: query i always sees key i. For n != m query and key positions are
compared directly (top-left), except with ``causal="bottom-right"``, where the n queries are the
last n of the m positions (decoding with a key/value cache).
"""
from __future__ import annotations

from ..common.checks import check_sizes, check_window
from ..deprecation import renamed
from ..mechanism import FigureSpec, Mechanism
from ..papers import LONGFORMER
from .attention import pattern_apply
from .pattern import SparsePattern, query_positions

__all__ = ["band_pattern"]


@renamed(w="window")
def band_pattern(n: int, window: int, *, m: int | None = None, causal: bool | str = False) -> SparsePattern:
    r"""Keys within distance ``window`` of the query's position.

    .. math::

        J_i = \{\, j : |i - j| \le w \,\} \quad\text{or, causal,}\quad J_i = \{\, j : 0 \le i - j \le w \,\}

    Parameters
    ----------
    n : int
        Number of queries.
    window : int
        *w*, the half-width (one side): keys ``i − w … i + w`` (``i − w … i`` if causal), 2w + 1 in
        all. ``w >= max(n, m)`` keeps everything. (The old name ``w=`` is deprecated.)
    m : int, optional
        Number of keys; default ``n``.
    causal : {False, True, "top-left", "bottom-right"}, default False
        Keep only ``j <= i`` (``True``, "top-left"); "bottom-right": the n queries are the last n of
        the m positions, query *i* at position i + m − n, for the window as for ``j <= i + m − n``.

    Returns
    -------
    SparsePattern
        nnz ≤ n·(2w + 1), built in O(nnz) without an n × m array.

    References
    ----------
    .. [1] I. Beltagy, M. E. Peters, A. Cohan, "Longformer: The Long-Document Transformer",
       arXiv:2004.05150v2, §3.1 ("sliding window").

    Examples
    --------
    >>> band_pattern(5, 1).to_mask().astype(int)
    array([[1, 1, 0, 0, 0],
           [1, 1, 1, 0, 0],
           [0, 1, 1, 1, 0],
           [0, 0, 1, 1, 1],
           [0, 0, 0, 1, 1]])
    """
    n, m = check_sizes(n, m)
    i, alignment = query_positions(n, m, causal)                   # (n,) query positions
    w = check_window("window", window, max(n, m))                             # w >= max(n, m) keeps every pair
    return SparsePattern.from_row_ranges(i - w, i + w + 1 if alignment is None else i + 1, m)


def _band(n, m, causal, rng, window=2):
    """window w = 2"""
    return band_pattern(n, window, m=m, causal=causal)


RECORD = Mechanism(
    id="band", title="Band (sliding-window) attention", family="sparse", section="4.1.1.1 (Fig. 4b)", paper=LONGFORMER,
    equation=r"J_i = \{ j : |i - j| \le w \}",
    time="O(n·w·d)", memory="O(n·w)", kind="attention", methods=("equation", "csr", "bsr", "auto"),
    function=band_pattern, apply=pattern_apply(_band, "band", renamed={"w": "window"}),
    causal=True, position_dependent=True, figure=FigureSpec(
        title="Band (sliding-window) attention (Fig. 4b), w = 2, window inclusive", n=16, seed=21, panels=(
        ("|i − j| ≤ w: 2w + 1 = 5 keys", {"window": 2}),
        ("causal 0 ≤ i − j ≤ w: w + 1 = 3 keys", {"window": 2, "causal": True}),
    )),
    exact_options=lambda n, m: {"window": max(n, m)}, exact_limit="w ≥ max(n, m)",
)
