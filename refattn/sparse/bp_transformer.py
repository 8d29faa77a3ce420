r"""BP-Transformer: attention over a binary partition tree of the sequence (survey §4.1.1, Fig. 6a).

    nodes        u_{0,i}  token i, i = 0 … n−1                                  (the leaves)
                 u_{l,p}  span node of the tokens [p·2^l, min((p+1)·2^l, n)),  l = 1 … L = ⌈log₂ n⌉
    affiliated   u_{l,p} attends to every token of its span                     (2^l edges, fewer at the edge)
    contextual   u_{0,i} attends to k nodes per level on each side, fine near i and coarse far away:
                 right of i, the nodes tile [i+1, n) left to right, k of level 0, then k of level 1, …;
                 left of i, the nodes tile [0, i) right to left, in the same way
    self         u_{0,i} attends to itself

The sequence is halved recursively (binary partitioning); every tree level is a row of span nodes.
A token reads its neighbours as tokens, the text a little further away as 2-token spans, further still
as 4-token spans …, so its context nodes cover the whole sequence exactly once with O(k·log(n/k))
nodes, and the graph has O(k·n·log(n/k)) edges. The pattern is the square attention over all nodes:
queries and keys are the same node list,

    node order   tokens 0 … n−1, then the level-1 spans left to right, then level 2, …, the root last

which is the order of the official code (yzh119/BPT, ``graph_builder/builder.pyx``).
"""
from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from ..common.checks import causal_alignment, check_size
from ..common.ints import check_positive_int
from ..mechanism import Mechanism
from .attention import pattern_apply
from .pattern import SparsePattern

__all__ = ["bp_transformer_pattern", "bp_tree_spans"]


def _level_sizes(n: int) -> NDArray:
    """Nodes per level: n, ⌈n/2⌉, ⌈n/4⌉, …, 1 (a single token is its own root)."""
    sizes = [n]
    while sizes[-1] > 1:
        sizes.append((sizes[-1] + 1) // 2)
    return np.array(sizes, dtype=np.int64)


def bp_tree_spans(n: int) -> list[tuple[int, int, int]]:
    r"""The nodes of the binary partition tree of ``n`` tokens, in the pattern's node order.

    .. math::

        u_{l,p} \;\text{covers the tokens}\; [\,p\,2^l,\ \min((p+1)\,2^l,\ n)\,), \qquad
        l = 0, \dots, L = \lceil \log_2 n \rceil

    Parameters
    ----------
    n : int
        Number of tokens (leaves).

    Returns
    -------
    list of (level, start, stop)
        One entry per node: the tokens first (``(0, i, i + 1)``), then the spans level by level,
        left to right, the root ``(L, 0, n)`` last. Node *t* of
        :func:`bp_transformer_pattern` is entry *t*. There are :math:`\sum_l \lceil n / 2^l \rceil`
        nodes: :math:`2n - 1` when *n* is a power of two (a perfect binary tree: n leaves and n − 1
        span nodes). Otherwise the last node of a level may cover fewer than :math:`2^l` tokens
        (it has a single child when its level-(l − 1) row has odd length), as in the official code.

    References
    ----------
    .. [1] Z. Ye, Q. Guo, Q. Gan, X. Qiu, Z. Zhang, "BP-Transformer: Modelling Long-Range Context via
       Binary Partitioning", arXiv:1911.04070v1, §3 (binary partitioning, Fig. 2).

    Examples
    --------
    >>> bp_tree_spans(4)
    [(0, 0, 1), (0, 1, 2), (0, 2, 3), (0, 3, 4), (1, 0, 2), (1, 2, 4), (2, 0, 4)]
    >>> len(bp_tree_spans(8)) == 2 * 8 - 1
    True
    >>> bp_tree_spans(3)[3:]
    [(1, 0, 2), (1, 2, 3), (2, 0, 3)]
    """
    n = check_size("n", n, positive=True, rows=True)
    return [(level, p << level, min((p + 1) << level, n))
            for level, size in enumerate(_level_sizes(n).tolist()) for p in range(size)]


def bp_transformer_pattern(n: int, k: int, *, causal: bool | str = False) -> SparsePattern:
    r"""The BP-Transformer graph over the tokens and span nodes of the binary partition of ``n`` tokens.

    .. math::

        J_{u_{l,p}} = \{\, u_{0,i} : p\,2^l \le i < (p+1)\,2^l \,\} \quad (l \ge 1), \qquad
        J_{u_{0,i}} = \{u_{0,i}\} \,\cup\, \mathcal{C}^{\leftarrow}_k(i) \,\cup\, \mathcal{C}^{\rightarrow}_k(i)

    :math:`\mathcal{C}^{\rightarrow}_k(i)` walks right from :math:`c = i + 1` with a cursor: at level
    :math:`l = 0, 1, 2, \dots` it takes k nodes, each the node of level *l* that starts at *c*
    (:math:`u_{l, c/2^l}`), then moves *c* past it. When *c* is not a multiple of :math:`2^l` the
    level-*l* node there would overlap what is already taken, so the first of the k is the
    level-(l − 1) node :math:`u_{l-1, c/2^{l-1}}` instead. The walk stops at *n*.
    :math:`\mathcal{C}^{\leftarrow}_k(i)` is the mirror image, from :math:`c = i` down to 0. Each side's
    nodes tile its side exactly once, finest next to *i*.

    Parameters
    ----------
    n : int
        Number of tokens (leaves of the tree).
    k : int
        Context nodes per level on each side, *k* in the paper (``step`` in the official code), >= 1.
    causal : {False, True, "top-left", "bottom-right"}, default False
        Drop the right-hand contextual edges (the official code's ``triu=True``, used for language
        modelling and decoders): a token then reads only nodes whose spans lie wholly at or before
        it. Span nodes keep all their tokens; no token reads a span that reaches past it. This
        orders tokens, not node indices (span nodes come after every token), so it is not
        ``j <= i`` on the N × N pattern. Self-attention over the nodes, so "bottom-right" is the
        same as "top-left".

    Returns
    -------
    SparsePattern
        Square, N × N with N = ``len(bp_tree_spans(n))`` nodes ordered as in :func:`bp_tree_spans`
        (tokens first). Queries, keys and values are the node representations, tokens and spans
        alike; the token outputs are rows 0 … n − 1. Built in O(nnz) plus a sort of each token's
        O(k·log n) context nodes, without an N × N array.

    Notes
    -----
    Edges. The affiliated edges number n·L (each token belongs to one span per level,
    :math:`L = \lceil \log_2 n \rceil`), the self loops n, and the contextual edges of one side at most
    k per level over at most :math:`\log_2(n/k) + 2` levels (after level *l* a side has covered
    at least :math:`(2k - 1)\,2^l - k + 1` tokens). Hence, for n >= k,

    .. math::

        \mathrm{nnz} \le n\,(1 + \lceil \log_2 n \rceil) + 2kn\,(\log_2(n/k) + 2)
        \le 6\,k\,n\,\log_2(n/k) \quad (n \ge 4k),

    the paper's :math:`O(k \cdot n \log(n/k))`.

    Paper versus official code. The edge directions follow the official builder
    (``graph_builder/builder.pyx``, class ``SegmentTree``/``BinaryPartition``): its edge list is
    (source, destination) and its attention (``modules/attention.py``, ``fn.v_dot_u('q', 'k')``) lets
    the destination query the source's key, so a token is the query of its self loop and contextual
    edges, a span node the query of its affiliated edges. Span nodes get no self loop there, nor
    here. The official cursor walk checks the right-hand pointer against the size of the current
    level only; when n is not a power of two and a level has an odd number of nodes, a pointer that
    had run past the end of one level can come back in range at the next and name a node of the
    wrong level (n = 5, k = 1: token 2 is linked to the span [0, 4) as "right context"), at times one
    the token already reads, which the DGL softmax then counts twice. Here the walk stops at the end
    of the sequence, so each token's nodes tile the sequence exactly once; a pattern is a set of
    pairs and cannot carry such a duplicate, so the official walk is not offered as an option. For n
    a power of two the two graphs are identical (tested against a transcription of the official
    loop). The relative-position edge types and
    the clipping distance of the official code label edges and do not change which pairs are kept.

    References
    ----------
    .. [1] Z. Ye, Q. Guo, Q. Gan, X. Qiu, Z. Zhang, "BP-Transformer: Modelling Long-Range Context via
       Binary Partitioning", arXiv:1911.04070v1, §3 (graph construction: affiliated and contextual
       edges); official code https://github.com/yzh119/BPT.
    .. [2] T. Lin et al., "A Survey of Transformers", arXiv:2106.04554v2, §4.1.1 (extended sparse
       attention, Fig. 6a).

    Examples
    --------
    Four tokens (nodes 0–3), the spans [0, 2) and [2, 4) (nodes 4, 5) and the root (node 6), k = 1:
    token 0 reads itself, token 1 and the span [2, 4); token 3 reads token 2 and the span [0, 2);
    the span nodes read their tokens.

    >>> bp_transformer_pattern(4, 1).to_mask().astype(int)
    array([[1, 1, 0, 0, 0, 1, 0],
           [1, 1, 1, 1, 0, 0, 0],
           [1, 1, 1, 1, 0, 0, 0],
           [0, 0, 1, 1, 1, 0, 0],
           [1, 1, 0, 0, 0, 0, 0],
           [0, 0, 1, 1, 0, 0, 0],
           [1, 1, 1, 1, 0, 0, 0]])
    """
    n = check_size("n", n, positive=True, rows=True)
    k = check_size("k", k, positive=True)
    causal = causal_alignment(causal) is not None
    sizes = _level_sizes(n)
    offset = np.concatenate([[0], np.cumsum(sizes)[:-1]])          # id of u_{l,0}
    N = int(sizes.sum())
    i = np.arange(n, dtype=np.int64)

    slots = [i]                                                    # token rows: self loop u_{0,i} → u_{0,i},
    sides = ("left",) if causal else ("left", "right")
    for side in sides:                                             # then the contextual nodes: a cursor
        c = i.copy() if side == "left" else i + 1                  # c = edge of the part already read
        for t in range(k * len(sizes)):
            level = t // k                                         # k nodes per level
            live = c > 0 if side == "left" else c < n
            if not live.any():
                break
            aligned = (c & ((1 << level) - 1)) == 0                # c a multiple of 2^l?
            lev = np.where(aligned, level, level - 1)              # if not, the finer node (first of k)
            start = c - (1 << lev) if side == "left" else c        # the node covers [start, start + 2^lev)
            slots.append(np.where(live, offset[lev] + (start >> lev), N))   # u_{lev, start / 2^lev}; N = none
            c = c - (1 << lev) * live if side == "left" else c + (1 << lev) * live
    context = np.sort(np.stack(slots, axis=1), axis=1)             # (n, slots) each row's nodes, sorted
    kept = context < N

    level_of = np.repeat(np.arange(len(sizes)), sizes)[n:]         # span rows (affiliated): u_{l,p} reads
    first = (np.arange(n, N) - offset[level_of]) << level_of       # the tokens [p·2^l, min((p+1)·2^l, n))
    span_len = np.minimum(first + (1 << level_of), n) - first
    indptr = np.concatenate([[0], np.cumsum(np.concatenate([kept.sum(axis=1), span_len]))])
    within = np.arange(span_len.sum()) - np.repeat(np.cumsum(span_len) - span_len, span_len)
    indices = np.concatenate([context[kept], np.repeat(first, span_len) + within])
    return SparsePattern(indptr, indices, N, N)


def _bp_transformer(n, m, causal, rng, nodes_per_level=1):
    """over the tree's nodes (tokens, then span nodes), k = nodes_per_level = 1 (the option is not called
    k, which names the keys). Its causal option (the paper's, left context only) orders tokens, not node
    indices, so the registry entry offers no causal=True: span nodes, indexed after every token, would
    break j ≤ i."""
    k = check_positive_int("nodes_per_level", nodes_per_level)
    return bp_transformer_pattern(_bp_tokens(n), k, causal=causal)


def _bp_tokens(nodes: int) -> int:
    """The token count t whose binary partition tree has ``nodes`` nodes (by bisection: the count grows with t)."""
    lo, hi = 1, max(nodes, 1)                                      # t tokens give at least t nodes
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if _node_count(mid) < nodes else (lo, mid)
    if _node_count(lo) != nodes:
        counts = ", ".join(str(_node_count(t)) for t in range(1, 9))
        nearest = " and ".join(str(_node_count(t)) for t in (lo - 1, lo) if t >= 1 and _node_count(t) != nodes)
        raise ValueError(
            f"bp_transformer attends over the n nodes of a binary partition tree, and t tokens give "
            f"n = t + ⌈t/2⌉ + ⌈t/4⌉ + … + 1 nodes (n = {counts}, …): n={nodes} is no such count (nearest: {nearest})"
        )
    return lo


def _node_count(tokens: int) -> int:
    """Nodes of the binary partition tree of ``tokens`` tokens."""
    return int(_level_sizes(tokens).sum())


RECORD = Mechanism(
    id="bp_transformer", title="BP-Transformer (binary partition tree)", family="sparse", section="4.1.1.3 (Fig. 6a)",
    paper='Z. Ye et al., 2019, "BP-Transformer: Modelling Long-Range Context via Binary Partitioning", '
    "arXiv:1911.04070", equation=r"\text{token } i \to k \text{ span nodes per side per level}",
    time="O(k·n·log(n/k)·d)", memory="O(k·n·log(n/k))", kind="attention",
    methods=("equation", "csr", "bsr", "auto"), function=bp_transformer_pattern,
    apply=pattern_apply(_bp_transformer, "bp_transformer", cross=False, causal_ok=False), causal=False,
    position_dependent=True, cross=False, figure="refattn.figures.sparse:bp_transformer", exact_options=None,
    exact_limit="none: span nodes attend to their own tokens only, whatever k",
)
