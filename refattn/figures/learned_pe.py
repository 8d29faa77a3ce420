r"""The figure of learned absolute positional embeddings: the table's rows and how alike the positions are.

A table P of 32 positions × 16 dimensions drawn as BERT initialises it (:func:`~refattn.positional.init_learned_pe`,
seed 0, truncated normal of standard deviation 0.02), its rows drawn as a heat map, and the cosine
similarity of every pair of positions beside the same similarity for the sinusoids of the same size.
Freshly drawn rows are nearly orthogonal: position 5 is no more like position 6 than like position 30,
and nothing exists past row 31; the sinusoids' similarity depends on the distance alone (a band along
the diagonal). Training is what gives a learned table its structure.
"""
from __future__ import annotations

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure

from ..core.sinusoidal_pe import sinusoidal_positional_encoding
from ..positional import init_learned_pe
from ..viz import STYLE_PATH, draw_attention, figure

__all__ = ["learned_pe"]

MAX_LEN, D_MODEL, SEED = 32, 16, 0


def _cosine(P):
    unit = P / np.linalg.norm(P, axis=1, keepdims=True)
    return unit @ unit.T


@matplotlib.style.context(STYLE_PATH)
def learned_pe() -> Figure:
    """The table's rows; the cosine similarity of positions, learned (at initialisation) and sinusoidal.

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    P = init_learned_pe(SEED, MAX_LEN, D_MODEL)
    fig = figure((13.0, 5.4))
    table_panel, similarity_panel = fig.subfigures(1, 2, width_ratios=[0.8, 1.9])
    draw_attention(table_panel, P, signed=True, annotate=False, xlabel="dimension", ylabel="position t",
                   titles="the table P (rows = positions)\ntruncated N(0, 0.02²)")
    draw_attention(similarity_panel, np.stack([_cosine(P), _cosine(sinusoidal_positional_encoding(MAX_LEN, D_MODEL))]),
                   signed=True, vmax=1.0, annotate=False, xlabel="position", ylabel="position",
                   titles=["cosine similarity of P's rows\n(as drawn: no notion of distance)",
                           "the same for the sinusoids\n(a function of the distance only)"])
    fig.suptitle(f"Learned absolute positional embeddings (BERT, GPT-2): x'_t = x_t + P[t]; max_len = {MAX_LEN}, "
                 f"d_model = {D_MODEL}, seed {SEED}\n(a sequence longer than max_len has no encoding: a ValueError)")
    return fig
