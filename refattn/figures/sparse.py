r"""Figures of position-based sparse attention (survey §4.1.1, Figs. 4–6): specs, and the per-head, tree, image views.

The atomic patterns of Fig. 4 are drawn from their records' :class:`~refattn.mechanism.FigureSpec`
by the generic template, and so are Star-Transformer and ETC from the specs :data:`star_transformer`
and :data:`etc` here (pattern and weights, two settings, named positions and group lines). The
other compound and extended patterns have figures of their own (per-head patterns, the BigBird
layout by kind, the Sparse Transformer's two parts, the BP tree, the image views), plus the
sheets :func:`sparse_atomic` (Fig. 4), :func:`sparse_compound` (Fig. 5) and :func:`sparse_extended`
(Fig. 6). Each pattern comes from its builder in :mod:`refattn.sparse` and is drawn with ``True`` =
may attend dark; the weights beside it come from the registry record's ``apply`` (or
:func:`refattn.sparse.sparse_attention` for per-head patterns) on seeded q, k, v, with the pairs the
pattern does not keep drawn grey. Rows = queries *i*, columns = keys *j*, as everywhere in
:mod:`refattn.viz`.
"""
from __future__ import annotations

import matplotlib.style
import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle
from numpy.typing import NDArray

from ..mechanism import FigureSpec
from ..sparse import (
    axial_patterns,
    band_pattern,
    bigbird_block_layout,
    bigbird_pattern,
    block_local_pattern,
    bp_transformer_pattern,
    bp_tree_spans,
    dilated_pattern,
    draw_bigbird_random_blocks,
    etc_pattern,
    global_pattern,
    image_transformer_pattern,
    longformer_pattern,
    longformer_patterns,
    random_pattern,
    sparse_attention,
    sparse_transformer_pattern,
    star_transformer_pattern,
)
from ..viz import PATTERN_CMAP, STYLE_PATH, draw_attention, draw_pattern, figure
from .common import registry_result, seeded_qkv
from .template import WEIGHTS_ROW, split_lines

__all__ = [
    "star_transformer", "longformer", "etc", "bigbird", "sparse_transformer", "bp_transformer", "image_transformer",
    "axial",
    "sparse_atomic", "sparse_compound", "sparse_extended",
]

_styled = matplotlib.style.context(STYLE_PATH)     # decorator: every artist of a sheet in refattn's style
NAVY, BLUE, ORANGE = PATTERN_CMAP(1.0), "#6baed6", "#f28e2b"


# --- shared drawing ---------------------------------------------------------------------------------

def _weights(mechanism: str, n: int, *, seed: int, causal: bool = False, **options) -> NDArray:
    """The effective weights of the registry record's ``apply`` on seeded input of n positions."""
    return registry_result(mechanism, n, seed=seed, causal=causal, **options).weights


def _on_pattern(A: NDArray, mask: NDArray) -> NDArray:
    """Weights with the pairs outside ``mask`` set to NaN (drawn grey); refuses weight outside it."""
    if np.any(A[~mask] != 0):
        raise ValueError("the weights put mass outside the drawn pattern: figure and apply disagree")
    return np.where(mask, A, np.nan)


def _categorical(container, codes: NDArray, colors, **kwargs) -> NDArray:
    """Integer codes 0 … k drawn white, then ``colors`` in order (no colour bar)."""
    cmap = ListedColormap(["white", *colors])
    return draw_attention(container, codes.astype(np.float64), cmap=cmap, vmin=-0.5, vmax=len(colors) + 0.5,
                          colorbar=False, **kwargs)


def _legend(container, legend: dict, extra=()) -> None:
    """Colour patches (label → colour) and ``extra`` handles in one row below ``container``."""
    handles = [*(Patch(facecolor=c, edgecolor="0.4", label=label) for label, c in legend.items()), *extra]
    container.legend(handles=handles, loc="outside lower center", ncols=len(handles), handlelength=1.2,
                     columnspacing=1.0)


def _image_view(container, keys: NDArray, query: tuple[int, int], titles, *, rects=(), legend_extra=()) -> NDArray:
    """Keys ([r,] c, H, W) of one query pixel on the image, the query pixel orange; ``rects`` outline blocks.

    ``rects``: (top, left, height, width, linestyle) in pixels, drawn on every panel.
    """
    codes = keys.astype(np.int64)
    codes[..., query[0], query[1]] = 2
    axes = _categorical(container, codes, [BLUE, ORANGE], titles=titles, xlabel="column", ylabel="row")
    _legend(container, {"key kept": BLUE, "query pixel": ORANGE}, legend_extra)
    for ax in axes.flat:
        for top, left, h, w, style in rects:
            ax.add_patch(Rectangle((left - 0.5, top - 0.5), w, h, fill=False, ec=NAVY, lw=2.0, ls=style))
    return axes


def _bp_tree(ax, n: int, k: int, token: int) -> None:
    """The binary partition tree as rows of span bars, node ids inside; ``token``'s keys highlighted."""
    keys = set(bp_transformer_pattern(n, k).row(token).tolist())
    for t, (level, start, stop) in enumerate(bp_tree_spans(n)):
        color = ORANGE if t == token else BLUE if t in keys else "0.93"
        ax.add_patch(Rectangle((start - 0.45, level - 0.38), stop - start - 0.1, 0.76, fc=color, ec="0.45", lw=0.6))
        ax.text((start + stop - 1) / 2, level, str(t), ha="center", va="center", fontsize=7)
    levels = max(level for level, _, _ in bp_tree_spans(n))
    ax.set(xlim=(-0.6, n - 0.4), ylim=(-0.6, levels + 0.6), yticks=range(levels + 1), xlabel="token position",
           ylabel="level l (spans of 2ˡ tokens)")
    ax.set_title(f"node ids in pattern order; token {token} (orange) attends to itself and the blue nodes")


def _level_starts(n: int) -> list[int]:
    """Node ids where each span level of the BP tree begins (tokens are level 0, from node 0)."""
    levels = [level for level, _, _ in bp_tree_spans(n)]
    return [t for t in range(1, len(levels)) if levels[t] != levels[t - 1]]


def _bigbird_codes(num_blocks: int, random_blocks: NDArray) -> NDArray:
    """Default block layout (global: first and last; window 3) coded 1 = global, 2 = window, 3 = random."""
    layout = bigbird_block_layout(num_blocks, num_random_blocks=random_blocks.shape[1], random_blocks=random_blocks)
    I, J = np.indices(layout.shape)
    G = np.isin(I, [0, num_blocks - 1]) | np.isin(J, [0, num_blocks - 1])
    return np.where(~layout, 0, np.where(G, 1, np.where(np.abs(I - J) <= 1, 2, 3)))


# --- compound patterns (Fig. 5) ----------------------------------------------------------------------

#: n = 12 satellites and the relay s (last position): the paper's ring and fastNLP's path.
star_transformer = FigureSpec(
    title="Star-Transformer (Fig. 5a), no causal form: satellites 0–11 see\n"
          "i − 1, i, i + 1 and the relay s (last position); s sees all",
    n=13, seed=30, figsize=(7.4, 8.8), labels=(*map(str, range(12)), "s"), split=(12,), panels=(
        ("ring (paper): 0 and 11 are neighbours", {}),
        ("ring=False: a path (fastNLP's unfold)", {"ring": False}),
    ))


@_styled
def longformer() -> Figure:
    """Per-head dilations 1, 1, 2, 3 with window w = 4 and global token 0; causal; weights per head."""
    n, window, dilations, G = 24, 4, [1, 1, 2, 3], [0]
    heads = longformer_patterns(n, window, dilations, global_indices=G)
    causal = longformer_patterns(n, window, dilations, global_indices=G, causal=True)
    q, k, v = seeded_qkv(31, n, heads=len(heads))
    masks = np.stack([p.to_mask() for p in heads])
    A = _on_pattern(sparse_attention(q, k, v, heads, return_weights=True)[1], masks)
    titles = [f"head {h + 1}: dilation d = {d}" for h, d in enumerate(dilations)]
    fig = figure((11.0, 11.6))
    top, middle, bottom = fig.subfigures(3, 1)
    draw_pattern(top, masks, titles=titles, suptitle="non-causal: |i − j| ≤ (w/2)·d with d | i − j, ∪ G")
    draw_pattern(middle, np.stack([p.to_mask() for p in causal]), titles=titles,
                 suptitle="causal (autoregressive LM, §4): and j ≤ i")
    draw_attention(bottom, A, titles=titles, vmax=1.0, suptitle=WEIGHTS_ROW + ", one pattern per head")
    fig.suptitle("Longformer (Fig. 5b): total window w = 4 (w/2 = 2 keys each side + the token), "
                 "dilation per head, global G = {0}")
    return fig


#: g = 3 global tokens before L = 15 long tokens, radius r = 2; general and hard (segment) masks.
etc = FigureSpec(
    title="ETC global-local attention (Fig. 5c), no causal form: positions 0–2 global,\n"
          "3–17 long (3 segments of 5); long-to-long radius r = 2, the token itself included",
    n=18, seed=32, figsize=(7.4, 9.2), split=(3,), panels=(
        ("g2g, g2l, l2g full; l2l |a − b| ≤ r", {"num_global": 3, "window": 2}),
        ("hard g2l + l2g: global k ↔ segment k", {"num_global": 3, "window": 2, "hard_g2l": True, "hard_l2g": True,
                                                  "segment_ids": np.repeat(np.arange(3), 5)}),
    ))


@_styled
def bigbird() -> Figure:
    """Block layout and token pattern coloured by kind (global, window, random), and the weights."""
    n, b, r = 48, 4, 2
    R = draw_bigbird_random_blocks(33, n // b, r)
    blocks = _bigbird_codes(n // b, R)
    mask = bigbird_pattern(n, block_size=b, num_random_blocks=r, random_blocks=R).to_mask()
    tokens = np.where(mask, np.kron(blocks, np.ones((b, b), dtype=np.int64)), 0)
    A = _weights("bigbird", n, seed=33, block_size=b, num_random_blocks=r, random_blocks=R)
    fig = figure((12.6, 5.0))
    codes, weights = fig.subfigures(1, 2, width_ratios=[2.0, 1.15])
    left, right = codes.subfigures(1, 2)
    _categorical(left, blocks, [NAVY, BLUE, ORANGE], titles="block layout: 12 × 12 blocks of b = 4",
                 xlabel="key block J", ylabel="query block I")
    split_lines(_categorical(right, tokens, [NAVY, BLUE, ORANGE], titles="token pattern: layout ⊗ ones(b, b), n = 48"),
           range(b, n, b), color="0.75", lw=0.5)
    _legend(codes, {"global blocks (first, last)": NAVY, "window (I − 1, I, I + 1)": BLUE,
                    f"random (r = {r} per row)": ORANGE})
    draw_attention(weights, _on_pattern(A, mask), titles="weights on a seeded input\n(grey = pair not kept)")
    fig.suptitle("BigBird-ITC block-sparse attention (Fig. 5d): g = 2 global, w_b = 3 window, r = 2 random blocks "
                 "(no causal form)")
    return fig


@_styled
def sparse_transformer() -> Figure:
    """Strided and fixed (l = 4, c = 1): parts A⁽¹⁾, A⁽²⁾ and their union, causal as in the paper."""
    n, l = 16, 4
    rows = {
        "strided": ["A⁽¹⁾: max(0, i − l) ≤ j ≤ i", "A⁽²⁾: (i − j) mod l = 0"],
        "fixed": ["A⁽¹⁾: ⌊j/l⌋ = ⌊i/l⌋ (own block)", "A⁽²⁾: j mod l = l − 1 (c = 1)"],
    }
    fig = figure((12.4, 8.0))
    for sub, (kind, titles) in zip(fig.subfigures(2, 1), rows.items(), strict=True):
        left, right = sub.subfigures(1, 2, width_ratios=[3.0, 1.25])
        masks = np.stack([sparse_transformer_pattern(n, l, kind=kind, part=p).to_mask() for p in (1, 2, None)])
        draw_pattern(left, masks, titles=[*titles, "A⁽¹⁾ ∪ A⁽²⁾ (merged head)"], suptitle=f"{kind}, l = {l}")
        draw_attention(right, _on_pattern(_weights("sparse_transformer", n, seed=34, causal=True, stride=l,
                                                   kind=kind), masks[2]), titles="weights, union", vmax=1.0)
    fig.suptitle("Sparse Transformer factorised attention (Child et al., 2019), n = 16, l = √n = 4, "
                 "causal j ≤ i as in the paper; grey = pair not kept")
    return fig


# --- extended patterns (Fig. 6) ----------------------------------------------------------------------

@_styled
def bp_transformer() -> Figure:
    """The tree's spans with one token's keys, and the node patterns (k = 1, 2, causal) with weights."""
    n = 16
    cuts = _level_starts(n)
    panels = [("k = 1", bp_transformer_pattern(n, 1)), ("k = 2", bp_transformer_pattern(n, 2)),
              ("k = 1, causal: left context only", bp_transformer_pattern(n, 1, causal=True))]
    masks = np.stack([p.to_mask() for _, p in panels])
    fig = figure((12.6, 6.9))
    top, bottom = fig.subfigures(2, 1, height_ratios=[0.75, 1.18])
    _bp_tree(top.add_subplot(), n, 1, 5)
    top.suptitle("binary partition of n = 16 tokens, k = 1: spans attend to their tokens (affiliated edges)")
    left, right = bottom.subfigures(1, 2, width_ratios=[3.0, 1.2])
    split_lines(draw_pattern(left, masks, titles=[t for t, _ in panels], xlabel="key node", ylabel="query node",
                        suptitle="31 nodes: tokens 0–15 | level-1 spans 16–23 | 24–27 | 28–29 | root 30"), cuts)
    split_lines(draw_attention(right, _on_pattern(_weights("bp_transformer", len(masks[0]), seed=35), masks[0]),
                          titles="weights, k = 1", xlabel="key node", ylabel="query node", vmax=1.0), cuts)
    fig.suptitle("BP-Transformer (Fig. 6a): attention over the nodes of a binary partition tree "
                 "(grey = pair not kept)")
    return fig


def _image_transformer_views(container, H: int, W: int, query: tuple[int, int], causal_too: bool = True):
    """One query pixel's keys: the memory block, and (``causal_too``) the causal block-raster keys."""
    opts = {"query_block": (2, 2), "memory_flange": (2, 2)}
    row = query[0] * W + query[1]
    keys = [image_transformer_pattern(H, W, **opts).to_mask()[row]]
    titles = ["non-causal: J = memory block M"]
    if causal_too:
        keys.append(image_transformer_pattern(H, W, causal=True, **opts).to_mask()[row])
        titles.append("causal, block-raster order (paper)")
    r0, c0 = query[0] // 2 * 2, query[1] // 2 * 2
    outline = [Line2D([], [], color=NAVY, lw=2.0, label="query block Q"),
               Line2D([], [], color=NAVY, lw=2.0, ls=":", label="memory block M")]
    return _image_view(container, np.stack(keys).reshape(-1, H, W), query, titles, legend_extra=outline,
                       rects=[(r0, c0, 2, 2, "-"), (r0 - 2, c0 - 2, 4, 6, ":")])


@_styled
def image_transformer() -> Figure:
    """An 8 × 8 image, 2 × 2 query blocks, flange (2, 2): one query block, its memory, patterns and weights."""
    H = W = 8
    query = (5, 2)
    opts = {"query_block": (2, 2), "memory_flange": (2, 2)}
    masks = np.stack([image_transformer_pattern(H, W, **opts).to_mask(),
                      image_transformer_pattern(H, W, causal=True, **opts).to_mask()])
    A = _on_pattern(_weights("image_transformer", H * W, seed=36, width=W, **opts), masks[0])
    fig = figure((12.0, 8.2))
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.0, 1.05])
    left, right = top.subfigures(1, 2, width_ratios=[2.0, 1.0])
    _image_transformer_views(left, H, W, query)
    draw_attention(right, A[query[0] * W + query[1]].reshape(H, W), titles=f"weights of query {query}\n"
                   "(grey = not in its memory)", xlabel="column", ylabel="row")
    left, right = bottom.subfigures(1, 2, width_ratios=[2.0, 1.0])
    draw_pattern(left, masks, titles=["non-causal", "causal (block-raster)"],
                 suptitle="pattern over the 64 pixels in raster order r·W + c")
    draw_attention(right, A, titles="weights, non-causal\n(grey = pair not kept)")
    fig.suptitle("Image Transformer 2-D local attention (Fig. 6b): 8 × 8 image, query blocks 2 × 2, "
                 "memory flange 2 rows up, 2 columns left and right")
    return fig


@_styled
def axial() -> Figure:
    """Row and column patterns (and masked), one pixel's keys per step, and the two-step A_col A_row."""
    H, W, p = 5, 6, (2, 3)
    masks = np.stack([pat.to_mask() for pat in (*axial_patterns(H, W), *axial_patterns(H, W, causal=True))])
    two_step = np.stack([_weights("axial", H * W, seed=37, width=W, causal=causal) for causal in (False, True)])
    i = p[0] * W + p[1]
    fig = figure((11.6, 9.4))
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.0, 1.3])
    draw_pattern(top, masks, titles=["row: same r", "column: same c", "row, masked: c′ ≤ c", "column, masked: r′ ≤ r"],
                 suptitle="patterns over the 30 positions of a 5 × 6 layout, raster order r·W + c")
    left, right = bottom.subfigures(1, 2, width_ratios=[0.85, 1.3])
    _image_view(left, np.stack([*masks[:2, i], *(two_step[:, i] > 0)]).reshape(2, 2, H, W), p,
                [["row step", "column step"], ["two steps: (A_col A_row)ᵢ ≠ 0", "two steps, masked"]])
    left.suptitle(f"keys of pixel {p}: masked, two steps reach\nonly the rectangle r′ ≤ r, c′ ≤ c")
    draw_attention(right, np.where(two_step > 0, two_step, np.nan), titles=["A_col A_row", "masked"],
                   suptitle="effective weights: row attention, then column\n"
                            "attention (grey = unreachable in two steps)")
    fig.suptitle("Axial attention (Fig. 6c): attend along rows, then along columns")
    return fig


# --- overview sheets ---------------------------------------------------------------------------------

@_styled
def sparse_atomic() -> Figure:
    """The five atomic patterns of the survey's Fig. 4 at n = 16."""
    n = 16
    masks = np.stack([p.to_mask() for p in (
        global_pattern(n, [0]), band_pattern(n, 2), dilated_pattern(n, 2, 2),
        random_pattern(n, 2, rng=0), block_local_pattern(n, 4))])
    fig = figure((12.6, 3.6))
    draw_pattern(fig, masks, titles=["(a) global, G = {0}", "(b) band, |i − j| ≤ 2", "(c) dilated, w = 2, w_d = 2",
                                     "(d) random, r = 2", "(e) block local, b = 4"])
    fig.suptitle("Atomic sparse attention patterns (survey Fig. 4), n = 16, True = may attend (dark)")
    return fig


@_styled
def sparse_compound() -> Figure:
    """Star, Longformer, ETC and BigBird (the survey's Fig. 5) at 16 positions each."""
    panels = [
        ("(a) Star: 15 satellites + relay", star_transformer_pattern(15), [15]),
        ("(b) Longformer: w = 4, G = {0}", longformer_pattern(16, 4, global_indices=[0]), [1]),
        ("(c) ETC: g = 2, radius 1", etc_pattern(2, 14, 1), [2]),
        ("(d) BigBird: b = 1 (tokens), r = 2", bigbird_pattern(16, block_size=1, num_random_blocks=2, rng=0),
         [1, 15]),
    ]
    fig = figure((11.2, 3.6))
    for sub, (title, pattern, split) in zip(fig.subfigures(1, 4), panels, strict=True):
        split_lines(draw_pattern(sub, pattern.to_mask(), titles=title), split)
    fig.suptitle("Compound sparse attention patterns (survey Fig. 5), 16 positions; orange lines: global | local")
    return fig


@_styled
def sparse_extended() -> Figure:
    """BP-Transformer, Image Transformer 2-D and axial (the survey's Fig. 6): matrices and their layouts."""
    fig = figure((13.0, 7.6))
    tree, image, grid = fig.subfigures(1, 3, width_ratios=[1.25, 1.0, 1.0])
    upper, lower = tree.subfigures(2, 1)
    split_lines(draw_pattern(upper, bp_transformer_pattern(16, 1).to_mask(), xlabel="key node", ylabel="query node",
                        titles="(a) BP-Transformer, n = 16, k = 1: 31 nodes"), _level_starts(16))
    ax = lower.add_subplot()
    _bp_tree(ax, 16, 1, 5)
    ax.set_title("nodes: tokens, then spans; token 5's keys blue")
    upper, lower = image.subfigures(2, 1)
    draw_pattern(upper, image_transformer_pattern(8, 8, query_block=(2, 2), memory_flange=(2, 2)).to_mask(),
                 titles="(b) Image Transformer 2-D, 8 × 8 image")
    _image_transformer_views(lower, 8, 8, (5, 2), causal_too=False)
    upper, lower = grid.subfigures(2, 1)
    row, column = axial_patterns(5, 6)
    draw_pattern(upper, (row | column).to_mask(), titles="(c) axial, 5 × 6: row ∪ column")
    _image_view(lower, (row | column).to_mask()[15].reshape(1, 5, 6), (2, 3), "pixel (2, 3): its row and column")
    fig.suptitle("Extended sparse attention patterns (survey Fig. 6): the matrix, and what one query reads")
    return fig
