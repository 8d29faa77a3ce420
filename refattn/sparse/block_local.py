r"""Block local attention (survey §4.1.1, Fig. 4e).

    J_i = { j : ⌊i / b⌋ = ⌊j / b⌋ }      (causal: and j ≤ i)

The sequence is cut into non-overlapping blocks of ``block`` positions; a query sees exactly the
keys of its own block: the attention matrix is block-diagonal.
"""
from __future__ import annotations

from ..common import check_positive_int, check_sizes
from ..mechanism import FigureSpec, Mechanism
from ..papers import SURVEY
from .attention import pattern_apply
from .pattern import SparsePattern, query_positions

__all__ = ["block_local_pattern"]


def block_local_pattern(n: int, block: int, *, m: int | None = None, causal: bool | str = False) -> SparsePattern:
    r"""Queries attend to the keys of their own block.

    .. math::

        J_i = \{\, j : \lfloor i / b \rfloor = \lfloor j / b \rfloor \,\}

    Parameters
    ----------
    n : int
        Number of queries.
    block : int
        Block size *b* (the last block may be shorter).
    m : int, optional
        Number of keys; default ``n``.
    causal : {False, True, "top-left", "bottom-right"}, default False
        Keep only ``j <= i`` inside the block (``True``, "top-left"); "bottom-right": the n queries
        are the last n of the m positions, query *i* at position i + m − n, for its block as for
        ``j <= i + m − n``.

    Returns
    -------
    SparsePattern

    References
    ----------
    .. [1] N. Parmar et al., "Image Transformer", arXiv:1802.05751v3, §3.2 (1-D local attention);
       T. Lin et al., "A Survey of Transformers", arXiv:2106.04554v2, §4.1.1.

    Examples
    --------
    >>> block_local_pattern(5, 2).to_mask().astype(int)
    array([[1, 1, 0, 0, 0],
           [1, 1, 0, 0, 0],
           [0, 0, 1, 1, 0],
           [0, 0, 1, 1, 0],
           [0, 0, 0, 0, 1]])
    """
    n, m = check_sizes(n, m)
    i, alignment = query_positions(n, m, causal)                   # (n,) query positions
    block = check_positive_int("block", block)
    start = i // block * block
    return SparsePattern.from_row_ranges(start, start + block if alignment is None else i + 1, m)


def _block_local(n, m, causal, rng, block=3):
    """b = 3"""
    return block_local_pattern(n, block, m=m, causal=causal)


RECORD = Mechanism(
    id="block_local", title="Block local attention", family="sparse", section="4.1.1.1 (Fig. 4e)", paper=SURVEY,
    equation=r"J_i = \{ j : \lfloor i/b \rfloor = \lfloor j/b \rfloor \}",
    time="O(n·b·d)", memory="O(n·b)", kind="attention", methods=("equation", "csr", "auto"),
    function=block_local_pattern, apply=pattern_apply(_block_local, "block_local"),
    causal=True, position_dependent=True, figure=FigureSpec(
        title="Block local attention (Fig. 4e): blocks of b = 4 tokens, n = 18 (last block shorter)",
        n=18, seed=25, panels=(
        ("⌊i/b⌋ = ⌊j/b⌋", {"block": 4}),
        ("causal: and j ≤ i", {"block": 4, "causal": True}),
    )),
    exact_options=lambda n, m: {"block": max(n, m)}, exact_limit="b ≥ max(n, m)",
)
