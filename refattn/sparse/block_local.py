r"""Block local attention (survey §4.1.1, Fig. 4e).

    J_i = { j : ⌊i / b⌋ = ⌊j / b⌋ }      (causal: and j ≤ i)

The sequence is cut into non-overlapping blocks of ``block`` positions; a query sees exactly the
keys of its own block: the attention matrix is block-diagonal. :func:`block_window_pattern` widens
it to the blocks before and after, as lucidrains' ``local-attention`` defines ``look_backward`` and
``look_forward``.
"""
from __future__ import annotations

import numpy as np

from ..common.checks import check_bool, check_sizes, check_window
from ..deprecation import renamed
from ..mechanism import FigureSpec, Mechanism
from ..papers import SURVEY
from .attention import pattern_apply
from .pattern import SparsePattern, query_positions

__all__ = ["block_local_pattern", "block_window_pattern"]


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
    block = check_window("block", block, max(n, m, 1), positive=True)   # one block holds every position
    start = i // block * block
    return SparsePattern.from_row_ranges(start, start + block if alignment is None else i + 1, m)


@renamed(window_size="window")
def block_window_pattern(
    n: int, window: int, *, look_backward: int = 1, look_forward: int | None = None, causal: bool = False,
    exact_windowsize: bool = False,
) -> SparsePattern:
    r"""Blocks of ``window`` positions, each query seeing its block and ``look_backward`` blocks
    before and ``look_forward`` blocks after, as lucidrains' ``LocalAttention`` defines them.

    .. math::

        J_i = \{\, j : \lfloor i/w \rfloor - b \le \lfloor j/w \rfloor \le \lfloor i/w \rfloor + f \,\}
        \quad (\text{causal: and } j \le i)

    ``exact_windowsize=True`` also keeps only :math:`i - w b \le j \le i + w f` (causal:
    :math:`i - w b \le j \le i`), so every query sees the same span of positions.

    Parameters
    ----------
    n : int
        Sequence length (self-attention: n queries and n keys). Need not be a multiple of
        ``window``: the last block is shorter, as lucidrains' ``autopad=True`` with an input
        ``mask`` hiding the padding (see Notes).
    window : int
        *w*, positions per block: the whole window (lucidrains' ``window_size``, the old name here,
        deprecated).
    look_backward : int, default 1
        *b*, blocks before the query's own.
    look_forward : int, optional
        *f*, blocks after; default 0 when ``causal``, else 1 (lucidrains' default). Must be 0 when
        ``causal``.
    causal : bool, default False
        Keep only :math:`j \le i`.
    exact_windowsize : bool, default False
        Clip the blocks to the exact span above (lucidrains' ``exact_windowsize``).

    Returns
    -------
    SparsePattern
        (n, n).

    Notes
    -----
    lucidrains/local-attention (``local_attention/local_attention.py``, ``LocalAttention.forward``
    and ``look_around``, commit af58e53): keys of blocks before the first or after the last are
    padding (position ``-1``) and masked; ``causal`` masks ``bq_t < bq_k``; ``exact_windowsize``
    masks ``bq_t > bq_k + window_size * look_backward`` (and, non-causal, ``bq_k -
    window_size * look_forward > bq_t``). Masked scores are filled with ``-finfo.max``, not −∞, so
    a row could only differ from this pattern if every key it may see were hidden by the input
    ``mask`` (it then averages its look-around uniformly); a query always sees itself here.
    With ``autopad=True`` the sequence is padded with zero keys and values up to a multiple of
    ``window_size``; without an input ``mask`` those zero keys take part in the last blocks'
    softmax (score 0, value 0) and dilute it. This pattern has no such keys: it equals
    ``autopad=True`` with a ``mask`` that is True on the n real positions.

    References
    ----------
    .. [1] lucidrains, local-attention, https://github.com/lucidrains/local-attention,
       ``LocalAttention`` (``look_backward``, ``look_forward``, ``exact_windowsize``, ``autopad``).
    .. [2] N. Parmar et al., "Image Transformer", arXiv:1802.05751v3, §3.2 (local attention in
       query blocks over memory blocks).

    Examples
    --------
    >>> block_window_pattern(6, 2, look_backward=1, look_forward=0).to_mask().astype(int)
    array([[1, 1, 0, 0, 0, 0],
           [1, 1, 0, 0, 0, 0],
           [1, 1, 1, 1, 0, 0],
           [1, 1, 1, 1, 0, 0],
           [0, 0, 1, 1, 1, 1],
           [0, 0, 1, 1, 1, 1]])
    >>> block_window_pattern(6, 2, causal=True, exact_windowsize=True).to_mask().astype(int)
    array([[1, 0, 0, 0, 0, 0],
           [1, 1, 0, 0, 0, 0],
           [1, 1, 1, 0, 0, 0],
           [0, 1, 1, 1, 0, 0],
           [0, 0, 1, 1, 1, 0],
           [0, 0, 0, 1, 1, 1]])
    """
    n, _ = check_sizes(n, None)
    w = check_window("window", window, max(n, 1), positive=True)   # one window holds every position
    back = check_window("look_backward", look_backward, n)           # n windows back reach the first
    causal, exact = check_bool("causal", causal), check_bool("exact_windowsize", exact_windowsize)
    forward = check_window("look_forward", (0 if causal else 1) if look_forward is None else look_forward, n)
    if causal and forward:
        raise ValueError(f"a causal window cannot look forward: got causal=True with look_forward={forward}")
    i = np.arange(n)                                               # (n,) query positions
    block = i // w
    start = np.maximum(block - back, 0) * w                        # first key of block ⌊i/w⌋ − b
    stop = np.minimum((block + forward + 1) * w, n)                # past the last key of block ⌊i/w⌋ + f
    if causal:
        stop = np.minimum(stop, i + 1)                             # j <= i
    if exact:
        start = np.maximum(start, i - w * back)                    # i − j <= w·b
        stop = np.minimum(stop, i + w * forward + 1)               # j − i <= w·f
    return SparsePattern.from_row_ranges(start, stop, n)


def _block_local(n, m, causal, rng, block=3):
    """b = 3"""
    return block_local_pattern(n, block, m=m, causal=causal)


RECORD = Mechanism(
    id="block_local", title="Block local attention", family="sparse", section="4.1.1.1 (Fig. 4e)", paper=SURVEY,
    equation=r"J_i = \{ j : \lfloor i/b \rfloor = \lfloor j/b \rfloor \}",
    time="O(n·b·d)", memory="O(n·b)", kind="attention", methods=("equation", "csr", "bsr", "auto"),
    function=block_local_pattern, apply=pattern_apply(_block_local, "block_local"),
    causal=True, position_dependent=True, figure=FigureSpec(
        title="Block local attention (Fig. 4e): blocks of b = 4 tokens, n = 18 (last block shorter)",
        n=18, seed=25, panels=(
        ("⌊i/b⌋ = ⌊j/b⌋", {"block": 4}),
        ("causal: and j ≤ i", {"block": 4, "causal": True}),
    )),
    exact_options=lambda n, m: {"block": max(n, m)}, exact_limit="b ≥ max(n, m)",
)
