r"""Strided attention: every ``stride``-th position, at any distance (survey §4.1.1, dilation w_d ≫ 1).

    J_i = { j : (i − j) mod s = 0 }      (causal: and j ≤ i)

Used as one of the two factorised heads of the Sparse Transformer (Child et al., 2019).
"""
from __future__ import annotations

import numpy as np

from ..common.checks import check_sizes, check_window
from ..mechanism import FigureSpec, Mechanism
from ..papers import CHILD
from .attention import pattern_apply
from .pattern import SparsePattern, query_positions

__all__ = ["strided_pattern"]


def strided_pattern(n: int, stride: int, *, m: int | None = None, causal: bool | str = False) -> SparsePattern:
    r"""Keys whose distance to the query is a multiple of ``stride``.

    .. math::

        J_i = \{\, j : (i - j) \bmod s = 0 \,\}

    Parameters
    ----------
    n : int
        Number of queries.
    stride : int
        :math:`s \ge 1`; 1 keeps everything.
    m : int, optional
        Number of keys; default ``n``.
    causal : {False, True, "top-left", "bottom-right"}, default False
        Keep only ``j <= i`` (``True``, "top-left"); "bottom-right": the n queries are the last n of
        the m positions, query *i* at position i + m − n, for the window as for ``j <= i + m − n``.

    Returns
    -------
    SparsePattern
        nnz ≈ n·m / s.

    References
    ----------
    .. [1] R. Child, S. Gray, A. Radford, I. Sutskever, "Generating Long Sequences with Sparse
       Transformers", arXiv:1904.10509v1, §4.2, Eq. (strided, A⁽²⁾).

    Examples
    --------
    >>> strided_pattern(8, 3).row(4).tolist()
    [1, 4, 7]
    """
    n, m = check_sizes(n, m)
    i, alignment = query_positions(n, m, causal)                   # (n,) query positions
    stride = check_window("stride", stride, max(n, m, 1), positive=True)   # a stride >= max(n, m): itself only
    return SparsePattern.from_row_ranges(i % stride, np.full(n, m) if alignment is None else i + 1, m, step=stride)


def _strided(n, m, causal, rng, stride=3):
    """s = 3"""
    return strided_pattern(n, stride, m=m, causal=causal)


RECORD = Mechanism(
    id="strided", title="Strided attention", family="sparse", section="4.1.1.1 (dilation w_d ≫ 1)", paper=CHILD,
    equation=r"J_i = \{ j : (i - j) \bmod s = 0 \}",
    time="O(n·m·d / s)", memory="O(n·m / s)", kind="attention", methods=("equation", "csr", "bsr", "auto"),
    function=strided_pattern, apply=pattern_apply(_strided, "strided"),
    causal=True, position_dependent=True, figure=FigureSpec(
        title="Strided attention (dilation w_d ≫ 1, no window): s = 4", n=16, seed=23, panels=(
        ("(i − j) mod s = 0", {"stride": 4}),
        ("causal: and j ≤ i", {"stride": 4, "causal": True}),
    )),
    exact_options={"stride": 1}, exact_limit="s = 1",
)
