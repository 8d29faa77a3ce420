r"""Longformer attention: (dilated) sliding window plus symmetric global attention (survey §4.1.1, Fig. 5b).

    J_i = { j : |i − j| ≤ (w/2)·d,  (i − j) mod d = 0 }  ∪  G     if i ∉ G     window w, dilation d
    J_i = { 0, …, n − 1 }                                          if i ∈ G     global rows are full

``window`` is the paper's *w*, the total window: w/2 keys on each side plus the token itself, so
w + 1 keys in all (Longformer's official config counts ``attention_window`` per side instead).
The pattern is the union of two atomic ones, built with ``|``:

    longformer = dilated(w/2, d)  |  global(G)        (d = 1: band(w/2) | global(G))

Each head may use its own dilation (§3.1): :func:`longformer_patterns` returns one pattern per
head for :func:`~refattn.sparse.attention.sparse_attention`'s per-head form.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

from ..common.checks import check_sizes, check_window
from ..common.ints import check_non_negative_int
from ..mechanism import Mechanism
from ..papers import LONGFORMER
from .attention import pattern_apply
from .dilated import dilated_pattern
from .global_ import global_pattern
from .pattern import SparsePattern, as_indices

__all__ = ["longformer_pattern", "longformer_patterns"]


def longformer_pattern(
    n: int, window: int, *, dilation: int = 1, global_indices: ArrayLike = (), causal: bool | str = False
) -> SparsePattern:
    r"""Longformer's sliding window of total size ``window`` (optionally dilated) plus global tokens.

    .. math::

        J_i = \{\, j : |i - j| \le \tfrac{w}{2} d,\ (i - j) \bmod d = 0 \,\} \cup G, \qquad
        J_i = \{0, \dots, n-1\} \ \text{for}\ i \in G

    Parameters
    ----------
    n : int
        Sequence length (self-attention: n queries and n keys).
    window : int
        The paper's window size *w*, even and >= 0: w/2 keys on each side of the token, which
        itself is always kept (w + 1 keys before clipping at the ends; w/2 + 1 if causal).
    dilation : int, default 1
        Gap *d* >= 1 between the window's keys; the receptive field is w·d + 1 positions.
    global_indices : array_like of int, default ()
        Positions *G* with symmetric global attention (e.g. ``[CLS]`` at 0, or the question
        tokens in QA): they attend to every key and every query attends to them.
    causal : {False, True, "top-left", "bottom-right"}, default False
        Keep only ``j <= i`` (the paper's autoregressive character LM, §4).
        Self-attention (n queries, n keys), so "bottom-right" is the same as "top-left".

    Returns
    -------
    SparsePattern
        (n, n), nnz ≤ n·(w + 1) + 2·g·n, built in O(nnz) without an n × n array.

    Notes
    -----
    Conventions checked against the official code (allenai/longformer):

    - *Window.* The paper (§3.1) gives each token "½w tokens on each side". The official
      ``LongformerConfig.attention_window`` is the one-sided count ("256 on each side" for an
      effective 512), and ``diagonaled_mm_tvm`` keeps ``i + d·(k − w_side)`` for
      ``k = 0 … 2·w_side``: the token itself plus w_side keys on each side. The Hugging Face port
      takes the total window and asserts it is even (``one_sided_attn_window_size =
      attention_window // 2``); refattn does the same, so an odd ``window`` is a ``ValueError``.
      To reproduce an official config, pass ``window = 2 * attention_window``.
    - *Dilation.* Per head in ``diagonaled_mm_tvm`` (a tensor ``D`` with one dilation per head);
      the ``sliding_chunks`` implementation and the Hugging Face port support dilation 1 only.
      Use :func:`longformer_patterns` for per-head dilation.
    - *Causal.* ``autoregressive=True`` in the official code keeps ``k ≤ w_side``, i.e.
      ``j = i − d·t`` for ``t = 0 … w_side``: the same as ``causal=True`` here.
    - *Global attention.* The paper uses separate projections Q_g, K_g, V_g for the global
      pairs; that is a parameter choice and does not change which pairs are kept. In the
      official code a global key that also lies in a token's window is counted once
      (``remove_from_windowed_attention_mask``), as in this set union.

    References
    ----------
    .. [1] I. Beltagy, M. E. Peters, A. Cohan, "Longformer: The Long-Document Transformer",
       arXiv:2004.05150v2, §3.1 (sliding window, dilated sliding window, global attention),
       §4.1 (dilation per head in the autoregressive model).

    Examples
    --------
    >>> longformer_pattern(6, 2, global_indices=[0]).to_mask().astype(int)
    array([[1, 1, 1, 1, 1, 1],
           [1, 1, 1, 0, 0, 0],
           [1, 1, 1, 1, 0, 0],
           [1, 0, 1, 1, 1, 0],
           [1, 0, 0, 1, 1, 1],
           [1, 0, 0, 0, 1, 1]])
    >>> longformer_pattern(9, 4, dilation=2).row(4).tolist()
    [0, 2, 4, 6, 8]
    """
    n, _ = check_sizes(n, None)
    half = _half_window(window)
    G = _global_indices(global_indices, n)
    window_pattern = dilated_pattern(n, half, dilation, causal=causal)
    return window_pattern | global_pattern(n, G, causal=causal) if G.size else window_pattern


def longformer_patterns(
    n: int, window: int, dilations: Sequence[int], *, global_indices: ArrayLike = (),
    causal: bool | str = False,
) -> list[SparsePattern]:
    r"""One Longformer pattern per head, head *h* with dilation ``dilations[h]``.

    Parameters
    ----------
    n : int
        Sequence length.
    window : int
        Total window *w* (even), shared by all heads.
    dilations : sequence or 1-D array of int
        One dilation >= 1 per head, e.g. ``[1, 1, 2, 3]``: the paper lets some heads stay local
        and others reach further (§3.1, "multi-head attention" paragraph).
    global_indices : array_like of int, default ()
        Global positions, the same for every head.
    causal : {False, True, "top-left", "bottom-right"}, default False
        Keep only ``j <= i``.
        Self-attention (n queries, n keys), so "bottom-right" is the same as "top-left".

    Returns
    -------
    list of SparsePattern
        ``len(dilations)`` patterns of shape (n, n), for ``sparse_attention(q, k, v, patterns)``
        with ``q`` of shape ``(..., H, n, d)``.

    Notes
    -----
    The official code passes the dilations as a per-head tensor to ``diagonaled_mm_tvm``; the
    Hugging Face port dropped dilation, so it corresponds to ``dilations = [1] * H``.

    References
    ----------
    .. [1] I. Beltagy et al., "Longformer", arXiv:2004.05150v2, §3.1, §4.1.

    Examples
    --------
    >>> heads = longformer_patterns(8, 2, [1, 2])
    >>> [p.row(4).tolist() for p in heads]
    [[3, 4, 5], [2, 4, 6]]
    """
    n, _ = check_sizes(n, None)
    half = _half_window(window)
    if not isinstance(dilations, (Sequence, np.ndarray)) or isinstance(dilations, (str, bytes)) or not len(dilations):
        raise TypeError(f"dilations must be a non-empty sequence of ints (one per head), got {dilations!r}")
    dilations = [check_window(f"dilations[{h}]", d, max(n, 1), positive=True) for h, d in enumerate(dilations)]
    G = _global_indices(global_indices, n)
    windows = [dilated_pattern(n, half, d, causal=causal) for d in dilations]
    return [w | global_pattern(n, G, causal=causal) for w in windows] if G.size else windows


def _half_window(window) -> int:
    window = check_non_negative_int("window", window)              # w/2 is clamped by dilated_pattern
    if window % 2:
        raise ValueError(f"window must be even (w/2 keys on each side of the token), got window={window}")
    return window // 2


def _global_indices(global_indices, n: int):
    G = as_indices("global_indices", global_indices)
    if G.size and (G.min() < 0 or G.max() >= n):
        raise ValueError(f"global_indices must lie in [0, n={n}), got values in [{G.min()}, {G.max()}]")
    return G.astype(np.int64)


def _longformer(n, m, causal, rng, window=4, dilation=1, global_indices=None):
    """w = 4, G = {0} (no global token when n = 0)"""
    G = ((0,) if n else ()) if global_indices is None else global_indices
    return longformer_pattern(n, window, dilation=dilation, global_indices=G, causal=causal)


RECORD = Mechanism(
    id="longformer", title="Longformer (sliding window, dilation per head, global tokens)", family="sparse",
    section="4.1.1.2 (Fig. 5b)", paper=LONGFORMER,
    equation=r"J_i = \{ j : |i-j| \le w/2 \cdot w_d,\ w_d \mid i-j \} \cup G", time="O(n·(w+g)·d)",
    memory="O(n·(w+g))", kind="attention", methods=("equation", "csr", "bsr", "auto"), function=longformer_pattern,
    apply=pattern_apply(_longformer, "longformer", cross=False), causal=True, position_dependent=True, cross=False,
    figure="refattn.figures.sparse:longformer", exact_options=lambda n, m: {"window": 2 * max(n, m), "dilation": 1},
    exact_limit="w ≥ 2n, w_d = 1",
)
