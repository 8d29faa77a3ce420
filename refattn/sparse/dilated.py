r"""Dilated (sliding-window with gaps) attention (survey §4.1.1, Fig. 4c).

    J_i = { j : |i − j| ≤ w·w_d  and  (i − j) mod w_d = 0 }     w keys each side, every w_d-th position

Like a dilated convolution it widens the receptive field to 2·w·w_d + 1 at the cost of 2w + 1
keys. ``dilation=1`` is the band; a large dilation is the strided pattern restricted to a window.
"""
from __future__ import annotations

from ..common.checks import check_sizes, check_window
from ..deprecation import renamed
from ..mechanism import FigureSpec, Mechanism
from ..papers import LONGFORMER
from .attention import pattern_apply
from .pattern import SparsePattern, query_positions

__all__ = ["dilated_pattern"]


@renamed(w="window")
def dilated_pattern(
    n: int, window: int, dilation: int, *, m: int | None = None, causal: bool | str = False
) -> SparsePattern:
    r"""``window`` keys on each side of the query, ``dilation`` positions apart.

    .. math::

        J_i = \{\, j : |i - j| \le w\, w_d,\ (i - j) \bmod w_d = 0 \,\}

    Parameters
    ----------
    n : int
        Number of queries.
    window : int
        *w*, the half-width: keys on each side (the query's own position is always kept), so the
        window spans w·w_d positions each way. (The old name ``w=`` is deprecated.)
    dilation : int
        Gap :math:`w_d \ge 1` between kept keys; 1 gives :func:`band_pattern`.
    m : int, optional
        Number of keys; default ``n``.
    causal : {False, True, "top-left", "bottom-right"}, default False
        Keep only ``j <= i`` (``True``, "top-left"); "bottom-right": the n queries are the last n of
        the m positions, query *i* at position i + m − n, for the window as for ``j <= i + m − n``.

    Returns
    -------
    SparsePattern

    References
    ----------
    .. [1] I. Beltagy et al., "Longformer", arXiv:2004.05150v2, §3.1 ("dilated sliding window").

    Examples
    --------
    >>> dilated_pattern(7, 1, 2).row(3).tolist()
    [1, 3, 5]
    """
    n, m = check_sizes(n, m)
    i, alignment = query_positions(n, m, causal)                   # (n,) query positions
    w = check_window("window", window, max(n, m))                             # w steps of at least 1 reach every key
    dilation = check_window("dilation", dilation, max(n, m, 1), positive=True)   # a gap >= max(n, m): itself only
    reach = w * dilation
    return SparsePattern.from_row_ranges(i - reach, i + reach + 1 if alignment is None else i + 1, m,
                                         step=dilation)


def _dilated(n, m, causal, rng, window=2, dilation=2):
    """window w = 2, w_d = 2"""
    return dilated_pattern(n, window, dilation, m=m, causal=causal)


RECORD = Mechanism(
    id="dilated", title="Dilated sliding-window attention", family="sparse",
    section="4.1.1.1 (Fig. 4c)", paper=LONGFORMER,
    equation=r"J_i = \{ j : |i - j| \le w\,w_d,\ (i - j) \bmod w_d = 0 \}",
    time="O(n·w·d)", memory="O(n·w)", kind="attention", methods=("equation", "csr", "bsr", "auto"),
    function=dilated_pattern, apply=pattern_apply(_dilated, "dilated", renamed={"w": "window"}),
    causal=True, position_dependent=True, figure=FigureSpec(
        title="Dilated attention (Fig. 4c): w = 2 keys each side, dilation w_d = 3,\n"
              "i itself kept; receptive field 2·w·w_d + 1 = 13 positions",
        n=20, seed=22, panels=(
        ("|i − j| ≤ w·w_d, w_d | i − j", {"window": 2, "dilation": 3}),
        ("causal: j ≤ i", {"window": 2, "dilation": 3, "causal": True}),
    )),
    exact_options=lambda n, m: {"window": max(n, m), "dilation": 1}, exact_limit="w_d = 1 and w ≥ max(n, m)",
)
