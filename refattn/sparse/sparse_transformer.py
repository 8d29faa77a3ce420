r"""Sparse Transformer factorised attention, strided and fixed (Child et al., 2019; survey §4.1.1, Fig. 5e).

Two heads, parts p = 1, 2 (the paper's m), each attend to a subset A⁽ᵖ⁾ᵢ of the keys; every j ≤ i
is reachable in two hops. With stride l and, for "fixed", c summary positions per block
(autoregressive: j ≤ i too):

    strided:  A⁽¹⁾ᵢ = { t, t + 1, …, i },  t = max(0, i − l)        the previous l keys and i
              A⁽²⁾ᵢ = { j : (i − j) mod l = 0 }                    every l-th key back
    fixed:    A⁽¹⁾ᵢ = { j : ⌊j / l⌋ = ⌊i / l⌋ }                    the query's own block
              A⁽²⁾ᵢ = { j : j mod l ∈ { l − c, …, l − 1 } }         the last c keys of every block

``part=1`` / ``part=2`` give the factorised heads; ``part=None`` their union A⁽¹⁾ ∪ A⁽²⁾, the
paper's "merged head". Each set is an atomic pattern:

    strided = band(l) | strided(l)          fixed = block_local(l) | summary columns
"""
from __future__ import annotations

import numpy as np

from ..common.checks import causal_alignment, check_choice, check_size, check_sizes
from ..common.ints import check_non_negative_int, check_positive_int
from ..mechanism import Mechanism
from ..papers import CHILD
from .attention import pattern_apply
from .band import band_pattern
from .block_local import block_local_pattern
from .pattern import SparsePattern
from .strided import strided_pattern

__all__ = ["sparse_transformer_pattern"]

KINDS = ("strided", "fixed")
PARTS = (None, 1, 2)
LOCAL_WINDOWS = ("paper", "official")


def sparse_transformer_pattern(
    n: int, stride: int, *, kind: str = "strided", c: int = 1, part: int | None = None, causal: bool | str = True,
    local_window: str = "paper", subblock: int = 0,
) -> SparsePattern:
    r"""The Sparse Transformer's strided or fixed pattern: one factorised head, or their union.

    **Causal by default** (``causal=True``), alone among the pattern builders: the paper's model is
    autoregressive. Pass ``causal=False`` for the bidirectional form.

    .. math::

        \text{strided: } A^{(1)}_i = \{t, \dots, i\},\ t = \max(0, i - l); \quad
        A^{(2)}_i = \{\, j : (i - j) \bmod l = 0 \,\}

        \text{fixed: } A^{(1)}_i = \{\, j : \lfloor j/l \rfloor = \lfloor i/l \rfloor \,\}; \quad
        A^{(2)}_i = \{\, j : j \bmod l \in \{l - c, \dots, l - 1\} \,\}

    Parameters
    ----------
    n : int
        Sequence length (self-attention).
    stride : int
        The stride *l* >= 1 (the paper picks l ≈ √n). For "strided" it is the local window and
        the step of A⁽²⁾; for "fixed" the block length.
    kind : {"strided", "fixed"}, default "strided"
        Which factorisation (§4.3): "strided" suits data with a period (images, audio), "fixed"
        text.
    c : int, default 1
        "fixed" only: summary positions per block, 1 <= c <= l (the paper uses c ∈ {8, 16, 32}
        for l ∈ {128, 256}).
    part : {None, 1, 2}, default None
        1 or 2: the single head A⁽¹⁾ or A⁽²⁾. None: A⁽¹⁾ ∪ A⁽²⁾, one "merged" head (§5.2).
    causal : {False, True, "top-left", "bottom-right"}, default True
        Keep only ``j <= i``, as in the paper, which is autoregressive. ``False`` drops that
        condition from both sets: A⁽¹⁾ of "strided" becomes the band |i − j| ≤ l, A⁽²⁾ every key
        at a multiple of l from i (resp. every summary column for "fixed"). Self-attention
        (n queries, n keys), so "bottom-right" is the same as "top-left".
    local_window : {"paper", "official"}, default "paper"
        "strided" A⁽¹⁾ only. "paper": {max(0, i − l), …, i}, l + 1 keys. "official": the
        previous l − 1 keys and i, l keys, as in openai/sparse_attention (see Notes).
    subblock : int, default 0
        "fixed" only: which length-c subblock of each block is the summary, counted from the
        block's end: A⁽²⁾ = {j : j mod l ∈ {l − (s + 1)c, …, l − sc − 1}}. The paper found it
        better to give different heads distinct subblocks; 0 is the formula above.

    Returns
    -------
    SparsePattern
        (n, n). nnz ≈ n(l + 1) + n²/(2l) (strided, causal); built from the atomic builders.

    Notes
    -----
    Checked against openai/sparse_attention (``attention.py``):

    - *Strided A⁽¹⁾.* ``get_attn_mask(n, "local", l)`` keeps
      ``tf.matrix_band_part(ones, min(n − 1, l − 1), 0)``: 0 <= i − j <= l − 1, i.e. l keys,
      whereas the paper's {max(0, i − l), …, i} has l + 1. ``local_window="official"`` selects
      the code's set; the default follows the paper.
    - *Strided A⁽²⁾.* ``get_attn_mask(n, "strided", l)`` keeps ``q >= k`` and
      ``(q − k) mod l == 0``: the paper's set. (The block-sparse path computes it on a
      transposed layout; the set is the same.)
    - *Fixed.* ``get_blocksparse_obj(..., "fixed")`` works in blocks of ``blocksize`` tokens:
      each query block sees its own length-l block (``row * stride:(row + 1) * stride``, with
      ``stride = l // blocksize``) and the block columns ``idx::stride`` for ``idx`` in the
      last ``vertsize`` blocks of every length-l block, then removes keys above the query. In
      tokens that is the paper's set with c = vertsize·blocksize; head h uses subblock
      ``h % num_verts`` (``indices[h % num_verts]``), which is ``subblock`` here.
    - The paper's A⁽²⁾ for "fixed" is written {j : j mod l ∈ {t, t + 1, …, l}}, t = l − c; since
      j mod l <= l − 1, that is the c values l − c … l − 1.

    References
    ----------
    .. [1] R. Child, S. Gray, A. Radford, I. Sutskever, "Generating Long Sequences with Sparse
       Transformers", arXiv:1904.10509v1, §4.2–4.3 (factorised self-attention, strided and
       fixed patterns, Fig. 3), §5.2 (factorised attention heads: interleaved, merged).

    Examples
    --------
    >>> sparse_transformer_pattern(8, 3).row(7).tolist()
    [1, 4, 5, 6, 7]
    >>> sparse_transformer_pattern(8, 3, kind="fixed", part=2).row(7).tolist()
    [2, 5]
    >>> sparse_transformer_pattern(6, 2, kind="fixed").to_mask().astype(int)
    array([[1, 0, 0, 0, 0, 0],
           [1, 1, 0, 0, 0, 0],
           [0, 1, 1, 0, 0, 0],
           [0, 1, 1, 1, 0, 0],
           [0, 1, 0, 1, 1, 0],
           [0, 1, 0, 1, 1, 1]])
    """
    n, _ = check_sizes(n, None)
    l = check_size("stride", stride, positive=True)
    check_choice("kind", kind, KINDS)
    check_choice("part", part, PARTS)
    check_choice("local_window", local_window, LOCAL_WINDOWS)
    causal = causal_alignment(causal) is not None
    if check_positive_int("c", c) > l:
        raise ValueError(f"c must be an int with 1 <= c <= stride={l}, got {c!r}")
    s = check_non_negative_int("subblock", subblock)
    if (s + 1) * c > l:
        raise ValueError(f"subblock={s} needs (subblock + 1)·c <= stride, got ({s} + 1)·{c} > {l}")

    def head(p: int) -> SparsePattern:                                 # A⁽ᵖ⁾ as an atomic pattern
        if kind == "strided":
            if p == 1:
                return band_pattern(n, l if local_window == "paper" else l - 1, causal=causal)
            return strided_pattern(n, l, causal=causal)
        if p == 1:
            return block_local_pattern(n, l, causal=causal)
        return _summary_columns(n, l, range(l - (s + 1) * c, l - s * c), causal)

    return head(1) | head(2) if part is None else head(part)


def _summary_columns(n: int, l: int, offsets: range, causal: bool) -> SparsePattern:
    """Every query attends to the keys j with j mod l in ``offsets`` (and j <= i if causal)."""
    stop = np.arange(n) + 1 if causal else np.full(n, n)
    columns = [SparsePattern.from_row_ranges(np.full(n, o), stop, n, step=l) for o in offsets]
    pattern = columns[0]
    for extra in columns[1:]:
        pattern = pattern | extra
    return pattern


def _sparse_transformer(n, m, causal, rng, stride=3, kind="strided", c=1, part=None, local_window="paper",
                        subblock=0):
    """l = 3, strided"""
    return sparse_transformer_pattern(n, stride, kind=kind, c=c, part=part, causal=causal, local_window=local_window,
                                      subblock=subblock)


RECORD = Mechanism(
    id="sparse_transformer", title="Sparse Transformer (strided and fixed factorisations)", family="sparse",
    section="4.1.1.2 (Fig. 5e)", paper=CHILD,
    equation=r"A^{(1)}_i = \{ j : i - l \le j \le i \},\ A^{(2)}_i = \{ j : (i - j) \bmod l = 0 \}",
    time="O(n·√n·d)", memory="O(n·√n)", kind="attention",
    methods=("equation", "csr", "bsr", "auto"), function=sparse_transformer_pattern,
    apply=pattern_apply(_sparse_transformer, "sparse_transformer", cross=False), causal=True,
    position_dependent=True, cross=False, figure="refattn.figures.sparse:sparse_transformer",
    exact_options=lambda n, m: {"stride": max(n, m)}, exact_limit="l ≥ n (strided)",
)
