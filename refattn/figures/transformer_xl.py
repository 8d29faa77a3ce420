r"""Figure of Transformer-XL (Dai et al., 2019; survey §5.1.2): the four score terms and the memory over two segments.

Top: the terms (a) q_iᵀk_j, (b) q_iᵀW_k,R R_{i−j}, (c) uᵀk_j and (d) vᵀW_k,R R_{i−j} (each /√d) of one
segment of 8 queries over a memory of 8 positions and its own 8 (seeded input, d = 8, seed 4;
u, v, W_k,R from N(0, 1) so the position terms show: the official 0.02 makes them faint), with
the pairs the causal mask removes (j > i + mlen) in grey; (c) is constant down each column, (d)
along each diagonal i − j, (b) along no line (it reads q_i). Bottom: one attention-only layer
decoding 16 states in two segments of 8 with mem_len = 8
(:func:`~refattn.positional.transformer_xl_step`), the keys on absolute positions: segment 1 has
no memory (plain relative attention), segment 2 reads the cached states of segment 1 (no gradient
flows into them) before its own.
"""
from __future__ import annotations

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure

from ..positional import TransformerXLParams, init_transformer_xl_layer, transformer_xl_step, transformer_xl_terms
from ..viz import STYLE_PATH, draw_attention, figure
from .common import seeded_qkv

__all__ = ["transformer_xl"]

SEGMENT, SEED = 8, 4


@matplotlib.style.context(STYLE_PATH)
def transformer_xl() -> Figure:
    """Terms (a)-(d) on top; two segments' weights with the memory below.

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    q, k, _ = seeded_qkv(SEED, SEGMENT, 2 * SEGMENT)
    rng = np.random.default_rng(SEED)
    d = q.shape[-1]
    params = TransformerXLParams(rng.standard_normal(d), rng.standard_normal(d), rng.standard_normal((d, d)))
    terms = np.stack(transformer_xl_terms(q, k, params)) / np.sqrt(d)            # (4, n, mlen + n)
    visible = np.arange(2 * SEGMENT)[None, :] <= np.arange(SEGMENT)[:, None] + SEGMENT

    layer = init_transformer_xl_layer(rng, d, init_std=0.5)
    x = rng.standard_normal((2 * SEGMENT, d))
    _, memories, (A1,) = transformer_xl_step(x[:SEGMENT], None, [layer], mem_len=SEGMENT)
    _, _, (A2,) = transformer_xl_step(x[SEGMENT:], memories, [layer], mem_len=SEGMENT)
    first = np.concatenate([A1, np.zeros((SEGMENT, SEGMENT))], axis=-1)          # keys 8 … 15 do not exist yet
    seen1 = np.arange(2 * SEGMENT)[None, :] <= np.arange(SEGMENT)[:, None]

    fig = figure((13.6, 8.4))
    top, bottom = fig.subfigures(2, 1)
    draw_attention(top, terms, allowed=visible, signed=True, annotate=False,
                   titles=["(a) q_iᵀk_j", "(b) q_iᵀW_k,R R_{i−j}", "(c) uᵀk_j", "(d) vᵀW_k,R R_{i−j}"])
    draw_attention(bottom, np.stack([first, A2]), allowed=np.stack([seen1, visible]), annotate=False,
                   titles=["segment 1 (positions 0-7): no memory", "segment 2 (positions 8-15): memory = segment 1"],
                   xlabel="key position j", ylabel="query i of the segment")
    fig.suptitle(f"Transformer-XL (Dai et al., 2019): A^rel = (a) + (b) + (c) + (d), softmax over j ≤ i + mlen; "
                 f"segment {SEGMENT}, mem_len {SEGMENT}, d = {d}, seed {SEED}\n"
                 "top: one segment over [memory; segment], each term /√d; bottom: the memory stepped over two "
                 "segments (one attention-only layer)")
    return fig
