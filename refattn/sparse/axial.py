r"""Axial attention: attend along one axis of a 2-D layout at a time (survey §4.1.1, Fig. 6c).

Positions of an H × W layout, flattened row-major (position r·W + c):

    row attention      J_(r,c) = { (r, c') : 0 ≤ c' < W }      masked: c' ≤ c
    column attention   J_(r,c) = { (r', c) : 0 ≤ r' < H }      masked: r' ≤ r

Each layer mixes information along one axis and keeps the other independent, so a layer costs
O(H·W·(H + W)) instead of O((H·W)²); a row layer followed by a column layer reaches every position.
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.checks import causal_alignment, check_bool, check_choice, check_size, checked_qkv
from ..draws import note_allowed
from ..mechanism import Mechanism
from .attention import METHODS, attend_pattern, check_weights_fit
from .image_transformer import image_shape
from .pattern import SparsePattern

__all__ = ["axial_attention", "axial_pattern", "axial_patterns"]

AXES = ("row", "column")


def axial_pattern(height: int, width: int, *, axis: str, causal: bool | str = False) -> SparsePattern:
    r"""Row or column attention over an H × W layout flattened row-major.

    .. math::

        J^{\text{row}}_{(r,c)} = \{(r, c')\}_{c'=0}^{W-1}, \qquad
        J^{\text{column}}_{(r,c)} = \{(r', c)\}_{r'=0}^{H-1}

    (masked: :math:`c' \le c`, resp. :math:`r' \le r`).

    Parameters
    ----------
    height : int
        Number of rows *H*, >= 0 (0: an empty layout).
    width : int
        Number of columns *W*, >= 1. Position (r, c) is index r·W + c.
    axis : {"row", "column"}
        "row": attend along the row, i.e. over the width axis (``attn_axis=2`` of a (B, H, W, D)
        tensor in the official code); "column": along the column, over the height axis
        (``attn_axis=1``).
    causal : {False, True, "top-left", "bottom-right"}, default False
        Masked axial attention: keep the keys at or before the query along the axis, diagonal
        included (the official ``mask = ts[:, None] >= ts[None, :]``). Both masked patterns are
        causal in the raster order of the flattened layout: the unmasked pattern and ``j <= i``.
        Self-attention (H·W queries and keys), so "bottom-right" is the same as "top-left".

    Returns
    -------
    SparsePattern
        Square, (H·W) × (H·W); W keys per query for rows, H for columns (fewer when masked), built in
        O(nnz) without an (H·W) × (H·W) array.

    Notes
    -----
    The Axial Transformer builds its autoregressive context from these masks plus shifts of the
    input (the outer decoder: unmasked row and masked column attention on the image shifted down by
    one row; the inner decoder: masked row attention on the row shifted right by one). The shifts
    act on the inputs, not on the pattern, and are not part of it.

    References
    ----------
    .. [1] J. Ho, N. Kalchbrenner, D. Weissenborn, T. Salimans, "Axial Attention in Multidimensional
       Transformers", arXiv:1912.12180v1, §3 (axial attention), §4 (masked row and column
       attention in the Axial Transformer); official code google-research/axial, ``nn.attn_nd``,
       ``transformers.py``.
    .. [2] T. Lin et al., "A Survey of Transformers", arXiv:2106.04554v2, §4.1.1, Fig. 6(c).

    Examples
    --------
    A 2 × 3 layout: the row pattern is block-diagonal, the column pattern a stride-W comb.

    >>> axial_pattern(2, 3, axis="row").to_mask().astype(int)
    array([[1, 1, 1, 0, 0, 0],
           [1, 1, 1, 0, 0, 0],
           [1, 1, 1, 0, 0, 0],
           [0, 0, 0, 1, 1, 1],
           [0, 0, 0, 1, 1, 1],
           [0, 0, 0, 1, 1, 1]])
    >>> axial_pattern(2, 3, axis="column", causal=True).to_mask().astype(int)
    array([[1, 0, 0, 0, 0, 0],
           [0, 1, 0, 0, 0, 0],
           [0, 0, 1, 0, 0, 0],
           [1, 0, 0, 1, 0, 0],
           [0, 1, 0, 0, 1, 0],
           [0, 0, 1, 0, 0, 1]])
    """
    H = check_size("height", height)
    W = check_size("width", width, positive=True)
    check_size("height·width", H * W, rows=True)
    check_choice("axis", axis, AXES)
    causal = causal_alignment(causal) is not None
    i = np.arange(H * W, dtype=np.int64)
    r, c = np.divmod(i, W)
    if axis == "row":                                              # keys r·W + c', c' = 0 … W − 1 (or … c)
        return SparsePattern.from_row_ranges(r * W, (i + 1) if causal else (r + 1) * W, H * W)
    return SparsePattern.from_row_ranges(c, (i + 1) if causal else c + H * W, H * W, step=W)   # r'·W + c


def axial_patterns(
    height: int, width: int, *, causal: bool | str = False
) -> tuple[SparsePattern, SparsePattern]:
    r"""The row pattern and the column pattern of axial attention over an H × W layout.

    .. math::

        \bigl(J^{\text{row}},\ J^{\text{column}}\bigr), \qquad
        J^{\text{row}} \circ J^{\text{column}} = J^{\text{column}} \circ J^{\text{row}} = \text{all pairs}

    Parameters
    ----------
    height : int
        Number of rows *H*, >= 0 (0: an empty layout).
    width : int
        Number of columns *W*, >= 1. Position (r, c) is index r·W + c.
    causal : {False, True, "top-left", "bottom-right"}, default False
        Masked row and masked column attention (see :func:`axial_pattern`).

    Returns
    -------
    row, column : SparsePattern
        ``axial_pattern(height, width, axis="row", causal=causal)`` and the same with
        ``axis="column"``. Unmasked, two layers (one of each, in either order) connect every position
        to every position.

    References
    ----------
    .. [1] J. Ho et al., "Axial Attention in Multidimensional Transformers", arXiv:1912.12180v1, §3.

    Examples
    --------
    >>> row, col = axial_patterns(3, 4)
    >>> (row.nnz, col.nnz) == (3 * 4 * 4, 3 * 4 * 3)
    True
    >>> two_layers = col.to_mask().astype(int) @ row.to_mask().astype(int)
    >>> bool((two_layers > 0).all())
    True
    """
    return (axial_pattern(height, width, axis="row", causal=causal),
            axial_pattern(height, width, axis="column", causal=causal))


def axial_attention(q: ArrayLike, k: ArrayLike, v: ArrayLike, *, width: int | None = None,
                    causal: bool | str = False, method: str = "auto",
                    return_weights: bool = False) -> NDArray | tuple[NDArray, NDArray]:
    r"""Row attention, then column attention over its output (both with the same q, k).

    .. math::

        A = A_\text{col} A_\text{row}, \qquad \mathrm{out} = A_\text{col} (A_\text{row} V)

    The n positions are an image of height × width flattened row-major; the effective matrix
    reaches every position of the image in the two steps (each step alone only its row or column).

    Parameters
    ----------
    q, k : (..., n, d) array_like
        Queries and keys of the n positions (self-attention: as many keys as queries).
    v : (..., n, d_v) array_like
        Values.
    width : int, optional
        The image's width, any divisor of n; default the most square layout.
    causal : bool, default False
        Each step causal along its axis (:func:`axial_pattern`); there is no bottom-right form.
    method : {"equation", "csr", "bsr", "auto"}, default "auto"
        As in :func:`~refattn.sparse.sparse_attention`, for both steps.
    return_weights : bool, default False
        Also return the effective (..., n, n) matrix :math:`A_\text{col} A_\text{row}`.

    Returns
    -------
    out : (..., n, d_v) ndarray
    weights : (..., n, n) ndarray
        Only if ``return_weights``.
    """
    q, k, v, batch = checked_qkv(q, k, v)
    check_choice("method", method, METHODS)
    return_weights = check_bool("return_weights", return_weights)
    n, m = q.shape[-2], k.shape[-2]
    alignment = causal_alignment(causal)
    if n != m or alignment == "bottom-right":
        raise ValueError(f"axial attention is self-attention over an image: q has n={n}, k has m={m}, and causal "
                         f"may be True or False (got causal={causal!r})")
    height, width = image_shape(n, width, "axial")
    if return_weights:
        check_weights_fit(batch, n, n)
    row, column = axial_patterns(height, width, causal=alignment is not None)
    mid, A_row = attend_pattern(q, k, v, row, method=method, return_weights=return_weights)[:2]
    out, A_col = attend_pattern(q, k, mid, column, method=method, return_weights=return_weights)[:2]
    if not return_weights:
        return out
    A = _two_steps(A_col, A_row, height, width)                    # (..., n, n)  A_col A_row

    def reach():                                                   # (n, n) pairs reached in two steps
        masks = (p.to_mask(max_size=n * n).astype(np.float64) for p in (column, row))
        return np.broadcast_to(_two_steps(*masks, height, width) > 0, A.shape)

    note_allowed(reach)
    return out, A


def _two_steps(col: NDArray, row: NDArray, H: int, W: int) -> NDArray:
    """The product ``col @ row`` of a column and a row attention matrix, in O(n·(H + W)·n) instead of O(n³).

    Position (r, c) reaches (s, d) through (s, c) only: ``col`` is non-zero only within a column and
    ``row`` only within a row, so (col @ row)[(r, c), (s, d)] = col[(r, c), (s, c)] · row[(s, c), (s, d)].
    """
    batch = col.shape[:-2]
    col = np.einsum("...rcsc->...rcs", col.reshape(*batch, H, W, H, W))             # (..., H, W, H)
    row = np.einsum("...scsd->...scd", row.reshape(*row.shape[:-2], H, W, H, W))    # (..., H, W, W)
    return np.einsum("...rcs,...scd->...rcsd", col, row).reshape(*np.broadcast_shapes(batch, row.shape[:-3]),
                                                                   H * W, H * W)


RECORD = Mechanism.of(
    axial_attention, defaults={"method": "equation"},
    id="axial", title="Axial attention (rows, then columns)", family="sparse", section="4.1.1.3 (Fig. 6c)",
    paper='J. Ho et al., 2019, "Axial Attention in Multidimensional Transformers", arXiv:1912.12180',
    equation=r"A = A_\text{col} A_\text{row}", time="O(n·(H+W)·d)", memory="O(n·(H+W))", kind="attention",
    methods=("equation", "csr", "bsr", "auto"),
    causal=True, incremental=False, position_dependent=True, cross=False,
    example_length=16, figure="refattn.figures.sparse:axial", exact_options=None,
    exact_limit="none: each step sees one row or column; the two steps reach the whole image, but as a product "
    "of two softmaxes",
)
