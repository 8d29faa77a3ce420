r"""Image Transformer local attention: query blocks attend to memory blocks (survey §4.1.1, Fig. 6b).

2-D local attention over an image of H × W positions, flattened row-major (position r·W + c):

    query blocks   Q_{a,b} = rows [a·h_q, (a+1)·h_q) × columns [b·w_q, (b+1)·w_q)    (a tiling from the top left)
    memory block   M_{a,b} = rows [a·h_q − h_m, (a+1)·h_q) × columns [b·w_q − w_m, (b+1)·w_q + w_m)
    J_(r,c)        = M_{a,b} for the block Q_{a,b} that holds (r, c)
    causal         keep j generated no later than i: blocks in raster order, positions in raster
                   order within a block (the paper's generation order), i.e. everything above the
                   query block, the w_m columns on its left, and the block itself up to (r, c)

1-D local attention flattens the image in raster order and cuts the sequence into query blocks of
l_q positions; the memory block adds the l_m positions before the block:

    J_i = [⌊i/l_q⌋·l_q − l_m, (⌊i/l_q⌋ + 1)·l_q)        (causal: up to i)

Blocks that do not divide the image are clipped: the last block row/column is shorter, and memory
outside the image does not exist. This is what the official code computes by zero-padding the image
to a multiple of the query block and masking the padded keys (up to one quirk of its masked version,
see the Notes of :func:`image_transformer_pattern`).
"""
from __future__ import annotations

import math

import numpy as np

from ..common.checks import causal_alignment, check_choice, check_size
from ..mechanism import Mechanism
from .attention import pattern_apply
from .pattern import SparsePattern

__all__ = ["image_transformer_1d_pattern", "image_transformer_pattern"]

FLANGES = ("past", "both")
ORDERS = ("block-raster", "raster")


def _pair(name: str, value, check) -> tuple[int, int]:
    """Validate a (height, width) pair: a tuple, list or 1-D array of two ints."""
    if isinstance(value, np.ndarray) and value.ndim == 1:
        value = value.tolist()
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise TypeError(f"{name} must be a pair (height, width) of ints, got {value!r}")
    return check(f"{name}[0]", value[0]), check(f"{name}[1]", value[1])


def image_transformer_pattern(
    height: int,
    width: int,
    *,
    query_block: tuple[int, int] = (8, 16),
    memory_flange: tuple[int, int] = (8, 16),
    causal: bool | str = False,
    flange: str = "past",
    order: str = "block-raster",
) -> SparsePattern:
    r"""2-D local attention of the Image Transformer: each query block attends to its memory block.

    .. math::

        J_{(r,c)} = \big[\,a h_q - h_m,\ (a+1) h_q\big) \times \big[\,b w_q - w_m,\ (b+1) w_q + w_m\big),
        \qquad a = \lfloor r / h_q \rfloor,\ b = \lfloor c / w_q \rfloor

    rows × columns, clipped to the image; with ``causal`` only the positions generated no later than
    (r, c) are kept.

    Parameters
    ----------
    height : int
        Image height *H* (rows), >= 0 (0: an empty image, an empty pattern).
    width : int
        Image width *W* (columns), >= 1. Position (r, c) is index r·W + c (row-major, raster order).
    query_block : (int, int), default (8, 16)
        Query block :math:`(h_q, w_q)`, :math:`l_q = h_q w_q` positions; blocks tile the image from
        the top-left corner, those on the bottom and right edges are clipped when they do not divide
        the image. Default from the official code (tensor2tensor ``local_attention_2d``,
        ``query_shape=(8, 16)``).
    memory_flange : (int, int), default (8, 16)
        :math:`(h_m, w_m)`: the memory block extends the query block by :math:`h_m` rows on top and
        :math:`w_m` columns on the left and on the right. Default from the official code
        (``memory_flange=(8, 16)``).
    causal : {False, True, "top-left", "bottom-right"}, default False
        Keep only the positions generated no later than the query, in the order given by ``order``.
        Self-attention (H·W queries and keys), so "bottom-right" is the same as "top-left".
    flange : {"past", "both"}, default "past"
        "past": the flange extends upwards only, as in the paper (the memory block of size
        :math:`(h_q + h_m) \times (w_q + 2 w_m)`). "both": also :math:`h_m` rows below, as the official
        code's unmasked ``local_attention_2d`` (:math:`(h_q + 2h_m) \times (w_q + 2w_m)`). The two are
        equal once ``causal=True``.
    order : {"block-raster", "raster"}, default "block-raster"
        Generation order for ``causal``. "block-raster" (the paper): query blocks in raster order,
        positions in raster order inside each block, so the right flange and everything below the
        block come later and are masked. "raster": plain raster order of the image, j ≤ i in
        the row-major index (the right flange's rows above the query's row then count as past).

    Returns
    -------
    SparsePattern
        Square, (H·W) × (H·W); nnz ≤ H·W·(h_q + 2h_m)·(w_q + 2w_m), built row segment by row segment in
        O(nnz) without an (H·W) × (H·W) array.

    Notes
    -----
    The paper generates pixel channels as positions (an image of H × 3W for categorical
    intensities); pass ``width=3 * W`` (and a matching ``query_block``) for that layout.

    Paper versus official code. The paper's memory block extends the query block "to the top, left
    and right" (§3.3, Fig. 2) and the masked code follows it (tensor2tensor
    ``masked_local_attention_2d``: top region, left flange, and the query block under a lower
    triangle in block-raster order; "memory shape = query_shape + (block_flange[0],
    2*block_flange[1])"). Its unmasked ``local_attention_2d`` pads the keys by the flange on all four
    sides; that is ``flange="both"``. Where blocks do not divide the image the official code pads
    with zeros and masks zero keys (``embedding_to_padding``, which would also mask a genuine all-zero
    key); ``masked_local_attention_2d`` does not mask the padded positions *inside* the query block,
    so a real query can put weight on a padded zero key there. Neither quirk is reproduced: positions
    outside the image simply do not exist here.

    References
    ----------
    .. [1] N. Parmar, A. Vaswani, J. Uszkoreit, Ł. Kaiser, N. Shazeer, A. Ku, D. Tran, "Image
       Transformer", ICML 2018, arXiv:1802.05751v3, §3.3 ("2D local attention"), Fig. 2 (right).
    .. [2] tensor2tensor, ``tensor2tensor/layers/common_attention.py``: ``local_attention_2d``,
       ``masked_local_attention_2d``, ``make_2d_block_raster_mask``.
    .. [3] T. Lin et al., "A Survey of Transformers", arXiv:2106.04554v2, §4.1.1, Fig. 6(b).

    Examples
    --------
    A 4 × 4 image, 2 × 2 query blocks, a flange of 1 row and 1 column: the query (2, 1) sits in the
    block rows 2–3 × columns 0–1, so it reads rows 1–3 × columns 0–2; causally, the row above the
    block, the block up to itself and no column on its right.

    >>> p = image_transformer_pattern(4, 4, query_block=(2, 2), memory_flange=(1, 1))
    >>> p.to_mask()[2 * 4 + 1].reshape(4, 4).astype(int)
    array([[0, 0, 0, 0],
           [1, 1, 1, 0],
           [1, 1, 1, 0],
           [1, 1, 1, 0]])
    >>> image_transformer_pattern(4, 4, query_block=(2, 2), memory_flange=(1, 1),
    ...                           causal=True).to_mask()[2 * 4 + 1].reshape(4, 4).astype(int)
    array([[0, 0, 0, 0],
           [1, 1, 1, 0],
           [1, 1, 0, 0],
           [0, 0, 0, 0]])
    """
    H = check_size("height", height)
    W = check_size("width", width, positive=True)
    check_size("height·width", H * W, rows=True)
    h_q, w_q = _pair("query_block", query_block, lambda name, x: check_size(name, x, positive=True))
    h_m, w_m = _pair("memory_flange", memory_flange, check_size)
    causal = causal_alignment(causal) is not None
    check_choice("flange", flange, FLANGES)
    check_choice("order", order, ORDERS)

    r, c = np.divmod(np.arange(H * W, dtype=np.int64), W)         # (H·W,) query coordinates
    r0, c0 = r // h_q * h_q, c // w_q * w_q                        # top-left corner of the query block
    r1 = np.minimum(r0 + h_q, H)                                   # one past the block's last row
    left, right = np.maximum(c0 - w_m, 0), np.minimum(c0 + w_q + w_m, W)   # memory columns [left, right)
    below = h_m if flange == "both" and not causal else 0
    rr = (r0 - h_m)[:, None] + np.arange(h_q + h_m + below)        # (H·W, T) candidate memory rows
    lo = np.broadcast_to(left[:, None], rr.shape)
    hi = np.broadcast_to(right[:, None], rr.shape)
    valid = (rr >= 0) & (rr < np.minimum(r1 + below, H)[:, None])
    if causal:
        r_, c_ = r[:, None], c[:, None]
        if order == "block-raster":                                # in the block's rows: the left flange,
            in_block = np.minimum(c0 + w_q, W)[:, None]            # the block's rows above the query,
            hi = np.where(rr >= r0[:, None], np.where(rr < r_, in_block, c0[:, None]), hi)   # none below
        else:
            valid &= rr <= r_                                      # raster: no row below the query's
        hi = np.where(rr == r_, c_ + 1, hi)                        # the query's own row: up to (r, c)
    start = np.where(valid, rr * W + lo, 0)                        # segment of keys in memory row rr
    stop = np.where(valid, rr * W + hi, 0)
    return SparsePattern.from_row_segments(start, stop, H * W)


def image_transformer_1d_pattern(
    n: int,
    query_block: int = 128,
    memory_length: int = 128,
    *,
    causal: bool | str = False,
    flange: str = "past",
) -> SparsePattern:
    r"""1-D local attention of the Image Transformer: query blocks of the raster-scanned image.

    .. math::

        J_i = \big[\,b\,l_q - l_m,\ (b+1)\,l_q\big), \qquad b = \lfloor i / l_q \rfloor

    clipped to ``[0, n)``; causal: :math:`J_i \cap [0, i]`.

    Parameters
    ----------
    n : int
        Sequence length (H·W positions in raster order, or H·3W pixel channels), >= 0.
    query_block : int, default 128
        Query block length :math:`l_q`; the last block is shorter when it does not divide *n*.
        Default from the official code (tensor2tensor ``masked_local_attention_1d``,
        ``block_length=128``).
    memory_length : int, default 128
        :math:`l_m`, the positions before the block that the memory block adds. The default
        :math:`l_m = l_q` is the official masked code's memory (the previous block and the current one).
    causal : {False, True, "top-left", "bottom-right"}, default False
        Keep only ``j <= i``. Self-attention (n queries and keys), so "bottom-right" is the same as
        "top-left".
    flange : {"past", "both"}, default "past"
        "past": :math:`l_m` positions before the block only, as in the paper. "both": also :math:`l_m`
        after it, as the official code's unmasked ``local_attention_1d`` (``filter_width`` on each
        side). Equal once ``causal=True``.

    Returns
    -------
    SparsePattern
        Square, n × n, built in O(nnz). With ``memory_length=0`` it is
        :func:`~refattn.sparse.block_local.block_local_pattern` (``block=query_block``); with
        ``query_block=1`` and ``causal=True`` it is the causal
        :func:`~refattn.sparse.band.band_pattern` of width ``memory_length``.

    Notes
    -----
    The official ``masked_local_attention_1d`` falls back to a single block when n < 2·l_q; that
    switch is not reproduced (pass ``query_block=n`` for it).

    References
    ----------
    .. [1] N. Parmar et al., "Image Transformer", arXiv:1802.05751v3, §3.3 ("1D local attention"),
       Fig. 2 (left).
    .. [2] tensor2tensor, ``tensor2tensor/layers/common_attention.py``: ``local_attention_1d``,
       ``masked_local_attention_1d``.

    Examples
    --------
    >>> image_transformer_1d_pattern(6, 2, 1, causal=True).to_mask().astype(int)
    array([[1, 0, 0, 0, 0, 0],
           [1, 1, 0, 0, 0, 0],
           [0, 1, 1, 0, 0, 0],
           [0, 1, 1, 1, 0, 0],
           [0, 0, 0, 1, 1, 0],
           [0, 0, 0, 1, 1, 1]])
    """
    n = check_size("n", n, rows=True)
    l_q = check_size("query_block", query_block, positive=True)
    l_m = check_size("memory_length", memory_length)
    causal = causal_alignment(causal) is not None
    check_choice("flange", flange, FLANGES)
    i = np.arange(n, dtype=np.int64)
    b0 = i // l_q * l_q                                            # first position of the query block
    after = l_m if flange == "both" else 0
    return SparsePattern.from_row_ranges(b0 - l_m, (i + 1) if causal else b0 + l_q + after, n)


def _image_transformer(n, m, causal, rng, width=None, query_block=(2, 2), memory_flange=(1, 1), order="raster",
                       flange="past"):
    """a height × width image (width: the most square by default), 2 × 2 query blocks, flange 1; causal in
    raster order (j ≤ i)"""
    height, width = image_shape(n, width, "image_transformer")
    return image_transformer_pattern(height, width, query_block=query_block, memory_flange=memory_flange,
                                     causal=causal, order=order, flange=flange)


def image_width(n: int) -> int:
    """The widest divisor of n not above √n: the most square image of n pixels (1 for n = 0, an empty image)."""
    return max(w for w in range(1, math.isqrt(n) + 1) if n % w == 0) if n else 1


def image_shape(n: int, width, mechanism: str) -> tuple[int, int]:
    """(height, width) of the image that ``mechanism``'s registry entry lays its n positions out as.

    ``width=None`` takes :func:`image_width`; a given width must be a positive int dividing n (n = 0
    is an empty image of any width), else a ``ValueError`` naming it and saying which widths work.
    """
    if width is None:
        return n // image_width(n), image_width(n)
    width = check_size("width", width, positive=True)
    if n % width:
        small = [w for w in range(1, math.isqrt(n) + 1) if n % w == 0]
        divisors = sorted(set(small) | {n // w for w in small})
        hint = f" (the divisors of n: {', '.join(map(str, divisors))})" if len(divisors) <= 24 else ""
        raise ValueError(f"{mechanism} lays its n={n} positions out as an image, height rows of width positions: "
                         f"width={width} does not divide n{hint}")
    return n // width, width


RECORD = Mechanism(
    id="image_transformer", title="Image Transformer 2-D local attention", family="sparse",
    section="4.1.1.3 (Fig. 6b)", paper='N. Parmar et al., 2018, "Image Transformer", arXiv:1802.05751',
    equation=r"J_{(r,c)} = \text{memory block around the query block of } (r, c)", time="O(n·l_m·d)",
    memory="O(n·l_m)", kind="attention", methods=("equation", "csr", "bsr", "auto"), function=image_transformer_pattern,
    apply=pattern_apply(_image_transformer, "image_transformer", cross=False), causal=True, position_dependent=True,
    cross=False, example_length=16, figure="refattn.figures.sparse:image_transformer",
    exact_options=lambda n, m: {"width": m, "query_block": (1, m), "memory_flange": (0, m)},
    exact_limit="one query block holding the whole image (causal: raster order)",
)
