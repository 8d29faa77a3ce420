"""Catalogue records of position-based sparse attention (MECHANISMS.md §2; survey §3.1.1).

Each record's ``apply`` builds its pattern for the given lengths (small demonstration defaults,
overridable as options) and attends over it. Patterns compare query and key positions directly;
``causal="bottom-right"`` makes the n queries the last n of m positions: the last n rows of the
causal m × m pattern (decoding with a key/value cache).
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..common import causal_alignment
from ..mechanism import AttentionResult, Mechanism
from ..sparse.attention import sparse_attention
from ..sparse.axial import axial_patterns
from ..sparse.band import band_pattern
from ..sparse.bigbird import bigbird_pattern
from ..sparse.block_local import block_local_pattern
from ..sparse.bp_transformer import bp_transformer_pattern, bp_tree_spans
from ..sparse.dilated import dilated_pattern
from ..sparse.etc import etc_pattern
from ..sparse.global_tokens import global_pattern
from ..sparse.image_transformer import image_transformer_pattern
from ..sparse.longformer import longformer_pattern
from ..sparse.pattern import SparsePattern
from ..sparse.random_edges import random_pattern
from ..sparse.sparse_transformer import sparse_transformer_pattern
from ..sparse.star_transformer import star_transformer_pattern
from ..sparse.strided import strided_pattern

__all__ = ["RECORDS", "attend_pattern", "pattern_door"]

SURVEY = 'T. Lin et al., 2021, "A Survey of Transformers", arXiv:2106.04554'
LONGFORMER = 'I. Beltagy, M. E. Peters, A. Cohan, 2020, "Longformer: The Long-Document Transformer", arXiv:2004.05150'
BIGBIRD = 'M. Zaheer et al., 2020, "Big Bird: Transformers for Longer Sequences", arXiv:2007.14062'
CHILD = 'R. Child et al., 2019, "Generating Long Sequences with Sparse Transformers", arXiv:1904.10509'


def attend_pattern(q, k, v, pattern: SparsePattern, method: str = "equation") -> AttentionResult:
    """Sparse attention over ``pattern`` with the dense effective weights (for plots and errors)."""
    out, w = sparse_attention(q, k, v, pattern, method=method, return_weights=True)
    return AttentionResult(out, w if method == "equation" else pattern.to_dense(w))


def pattern_door(make: Callable[..., SparsePattern], *, cross: bool = True, causal_ok: bool = True) -> Callable:
    """``apply`` from ``make(n, m, causal, rng, **options) -> SparsePattern``.

    ``cross=False``: the pattern is self-attention over one sequence, so n must equal m (except
    with bottom-right alignment, where the queries are the last n of the m positions).
    """
    def apply(q, k, v, *, causal=False, rng=None, method="equation", **options):
        n, m = np.shape(q)[-2], np.shape(k)[-2]
        alignment = causal_alignment(causal)
        if alignment is not None and not causal_ok:
            raise ValueError(f"{make.__name__[1:]} has no causal variant in its paper; pass causal=False")
        if alignment == "bottom-right":
            pattern = make(m, m, True, rng, **options).last_rows(n)
        elif not cross and n != m:
            raise ValueError(
                f"{make.__name__[1:]} is self-attention over one sequence: q has n={n} queries but k has "
                f"m={m} keys (causal='bottom-right' takes the last n of m positions)"
            )
        else:
            pattern = make(n, m, alignment is not None, rng, **options)
        return attend_pattern(q, k, v, pattern, method)

    apply.__doc__ = f"Uniform door: attention over {make.__name__[1:]}'s pattern ({make.__doc__})"
    return apply


# --- pattern makers with small demonstration defaults ---------------------------------------------

def _global(n, m, causal, rng, global_indices=(0,)):
    """G = {0}"""
    return global_pattern(n, global_indices, m=m, causal=causal)


def _band(n, m, causal, rng, w=2):
    """w = 2"""
    return band_pattern(n, w, m=m, causal=causal)


def _dilated(n, m, causal, rng, w=2, dilation=2):
    """w = 2, w_d = 2"""
    return dilated_pattern(n, w, dilation, m=m, causal=causal)


def _strided(n, m, causal, rng, stride=3):
    """s = 3"""
    return strided_pattern(n, stride, m=m, causal=causal)


def _random(n, m, causal, rng, r=None, keys=None):
    """r = 2 keys from rng, or an explicit draw"""
    if keys is not None:
        return random_pattern(n, r, m=m, causal=causal, keys=keys)
    return random_pattern(n, 2 if r is None else r, m=m, causal=causal, rng=rng)


def _block_local(n, m, causal, rng, block=3):
    """b = 3"""
    return block_local_pattern(n, block, m=m, causal=causal)


def _star_transformer(n, m, causal, rng, ring=True):
    """n − 1 satellites and the relay as the last position"""
    return star_transformer_pattern(n - 1, ring=ring)


def _longformer(n, m, causal, rng, window=4, dilation=1, global_indices=(0,)):
    """w = 4, G = {0}"""
    return longformer_pattern(n, window, dilation=dilation, global_indices=global_indices, causal=causal)


def _etc(n, m, causal, rng, num_global=2, radius=1, **options):
    """2 global tokens first, radius 1"""
    return etc_pattern(num_global, n - num_global, radius, **options)


def _bigbird(n, m, causal, rng, block_size=2, num_random_blocks=1, **options):
    """blocks of 2, 1 random block per row, from rng"""
    return bigbird_pattern(n, block_size=block_size, num_random_blocks=num_random_blocks,
                           rng=None if "random_blocks" in options else rng, **options)


def _sparse_transformer(n, m, causal, rng, stride=3, kind="strided", **options):
    """l = 3, strided"""
    return sparse_transformer_pattern(n, stride, kind=kind, causal=causal, **options)


def _bp_transformer(n, m, causal, rng, k=1):
    """over the tree's nodes (tokens, then span nodes). Its causal option (the paper's, left context
    only) orders tokens, not node indices, so the door offers no causal=True: span nodes, indexed
    after every token, would break j ≤ i."""
    return bp_transformer_pattern(_bp_tokens(n), k, causal=causal)


def _image_transformer(n, m, causal, rng, width=None, query_block=(2, 2), memory_flange=(1, 1), order="raster",
                       **options):
    """a height × width image, 2 × 2 query blocks, flange 1; causal in raster order (j ≤ i)"""
    width = _image_width(n) if width is None else width
    if n % width:
        raise ValueError(f"the image width {width} does not divide the sequence length n={n}")
    return image_transformer_pattern(n // width, width, query_block=query_block, memory_flange=memory_flange,
                                     causal=causal, order=order, **options)


def _bp_tokens(nodes: int) -> int:
    """The token count n whose binary partition tree has ``nodes`` nodes."""
    for n in range(1, nodes + 1):
        if len(bp_tree_spans(n)) == nodes:
            return n
    raise ValueError(f"no BP-Transformer tree has {nodes} nodes (n tokens give n + ⌈n/2⌉ + … + 1)")


def _image_width(n: int) -> int:
    """The widest divisor of n not above √n: the most square image of n pixels."""
    return max(w for w in range(1, int(np.sqrt(n)) + 1) if n % w == 0)


def _apply_axial(q, k, v, *, causal=False, rng=None, method="equation", width=None):
    """Row attention, then column attention over its output (both with the same q, k).

    The effective matrix is A_col A_row: every position reaches every other of the image in the
    two steps (each step alone only its row or column).
    """
    n, m = np.shape(q)[-2], np.shape(k)[-2]
    if n != m or causal_alignment(causal) == "bottom-right":
        raise ValueError(f"axial attention is self-attention over an image: q has n={n}, k has m={m}; "
                         "causal may be True or False")
    width = _image_width(n) if width is None else width
    if n % width:
        raise ValueError(f"the image width {width} does not divide the sequence length n={n}")
    row, column = axial_patterns(n // width, width, causal=causal is not False)
    mid, A_row = attend_pattern(q, k, v, row, method)
    out, A_col = attend_pattern(q, k, mid, column, method)
    return AttentionResult(out, A_col @ A_row)


def _record(id, title, section, paper, equation, time, memory, causal, function, apply, exact_limit, **kw):
    return Mechanism(id, title, "sparse", section, paper, equation, time, memory, causal, "attention", function,
                     apply, exact_limit=exact_limit, position_dependent=True, **kw)


RECORDS = (
    _record("global", "Global attention", "3.1.1.1 (Fig. 4a)", LONGFORMER,
            r"J_i = \{0..m-1\} \text{ if } i \in G, \text{ else } G", "O(g·(n+m)·d)", "O(g·(n+m))", True,
            global_pattern, pattern_door(_global), "G = all positions"),
    _record("band", "Band (sliding-window) attention", "3.1.1.1 (Fig. 4b)", LONGFORMER,
            r"J_i = \{ j : |i - j| \le w \}", "O(n·w·d)", "O(n·w)", True, band_pattern, pattern_door(_band),
            "w ≥ max(n, m)"),
    _record("dilated", "Dilated sliding-window attention", "3.1.1.1 (Fig. 4c)", LONGFORMER,
            r"J_i = \{ j : |i - j| \le w\,w_d,\ (i - j) \bmod w_d = 0 \}", "O(n·w·d)", "O(n·w)", True,
            dilated_pattern, pattern_door(_dilated), "w_d = 1 and w ≥ max(n, m)"),
    _record("strided", "Strided attention", "3.1.1.1 (dilation w_d ≫ 1)", CHILD,
            r"J_i = \{ j : (i - j) \bmod s = 0 \}", "O(n·m·d / s)", "O(n·m / s)", True, strided_pattern,
            pattern_door(_strided), "s = 1"),
    _record("random", "Random attention", "3.1.1.1 (Fig. 4d)", BIGBIRD,
            r"J_i = r \text{ keys drawn uniformly without replacement}", "O(n·r·d)", "O(n·r)", True,
            random_pattern, pattern_door(_random), "r = m"),
    _record("block_local", "Block local attention", "3.1.1.1 (Fig. 4e)", SURVEY,
            r"J_i = \{ j : \lfloor i/b \rfloor = \lfloor j/b \rfloor \}", "O(n·b·d)", "O(n·b)", True,
            block_local_pattern, pattern_door(_block_local), "b ≥ max(n, m)"),
    _record("star_transformer", "Star-Transformer (ring + relay node)", "3.1.1.2 (Fig. 5a)",
            'Q. Guo et al., 2019, "Star-Transformer", arXiv:1902.09113',
            r"J_i = \{i-1, i, i+1, \text{relay}\},\ J_\text{relay} = \text{all}", "O(n·d)", "O(n)", False,
            star_transformer_pattern, pattern_door(_star_transformer, cross=False, causal_ok=False),
            "none (fixed degree 4)", cross=False),
    _record("longformer", "Longformer (sliding window, dilation per head, global tokens)", "3.1.1.2 (Fig. 5b)",
            LONGFORMER, r"J_i = \{ j : |i-j| \le w/2 \cdot w_d,\ w_d \mid i-j \} \cup G", "O(n·(w+g)·d)",
            "O(n·(w+g))", True, longformer_pattern, pattern_door(_longformer, cross=False),
            "w ≥ 2n, w_d = 1", cross=False),
    _record("etc", "ETC global-local attention", "3.1.1.2 (Fig. 5c)",
            'J. Ainslie et al., 2020, "ETC: Encoding Long and Structured Inputs in Transformers", arXiv:2004.08483',
            r"g2g, g2l, l2g \text{ full};\ l2l: |i-j| \le r", "O((n_g + r)·n·d)", "O((n_g + r)·n)", False,
            etc_pattern, pattern_door(_etc, cross=False, causal_ok=False), "r ≥ n_l", cross=False),
    _record("bigbird", "BigBird (block form: window, global, random blocks)", "3.1.1.2 (Fig. 5d)", BIGBIRD,
            r"J_I = \{I-1, I, I+1\} \cup G \cup R_I \text{ (blocks of } b\text{)}", "O(n·(3+g+r)·b·d)",
            "O(n·(3+g+r)·b)", False, bigbird_pattern, pattern_door(_bigbird, cross=False, causal_ok=False),
            "(3 + g + r)·b ≥ n", cross=False, example_length=16),
    _record("sparse_transformer", "Sparse Transformer (strided and fixed factorisations)", "3.1.1.2 (Fig. 5e)",
            CHILD, r"A^{(1)}_i = \{ j : i - l \le j \le i \},\ A^{(2)}_i = \{ j : (i - j) \bmod l = 0 \}",
            "O(n·√n·d)", "O(n·√n)", True, sparse_transformer_pattern,
            pattern_door(_sparse_transformer, cross=False), "l ≥ n", cross=False),
    _record("bp_transformer", "BP-Transformer (binary partition tree)", "3.1.1.3 (Fig. 6a)",
            'Z. Ye et al., 2019, "BP-Transformer: Modelling Long-Range Context via Binary Partitioning", '
            "arXiv:1911.04070", r"\text{token } i \to k \text{ span nodes per side per level}",
            "O(k·n·log(n/k)·d)", "O(k·n·log(n/k))", False, bp_transformer_pattern,
            pattern_door(_bp_transformer, cross=False, causal_ok=False), "k ≥ n", cross=False),
    _record("image_transformer", "Image Transformer 2-D local attention", "3.1.1.3 (Fig. 6b)",
            'N. Parmar et al., 2018, "Image Transformer", arXiv:1802.05751',
            r"J_{(r,c)} = \text{memory block around the query block of } (r, c)", "O(n·l_m·d)", "O(n·l_m)", True,
            image_transformer_pattern, pattern_door(_image_transformer, cross=False), "blocks ≥ image",
            cross=False, example_length=16),
    _record("axial", "Axial attention (rows, then columns)", "3.1.1.3 (Fig. 6c)",
            'J. Ho et al., 2019, "Axial Attention in Multidimensional Transformers", arXiv:1912.12180',
            r"A = A_\text{col} A_\text{row}", "O(n·(H+W)·d)", "O(n·(H+W))", True, axial_patterns, _apply_axial,
            "none (exact in two steps' reach)", cross=False, incremental=False, example_length=16),
)
