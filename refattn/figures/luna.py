r"""Figure of Luna (Ma et al., 2021, §3; survey §4.3.2): the pack and unpack factors, non-causal and causal.

One seeded input (:func:`~refattn.figures.common.seeded_qkv`: n = m = 16, d = 8, seed 13) and l = 4
pack queries P drawn by the registry record's ``apply`` (``rng=13``), the same in both rows. Each
row: the pack's weights on the keys (non-causal: :math:`A_\mathrm{pack}`, l × m, rows summing to 1;
causal: the softplus activations :math:`F^\top`, unnormalised), each pack token's row coloured;
the unpack's weights on the l packed tokens (n × l, each column coloured by its token; causal:
row *t* reads the packed context of positions ≤ t); the effective matrix W from ``apply`` (checked
against the maps) beside exact softmax attention on the same input (causal: later keys grey).
Rows = queries *i* (or pack tokens), columns = keys *j* (or packed tokens).
"""
from __future__ import annotations

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure

import refattn as ra

from .. import registry
from ..compressed import luna_maps
from ..viz import STYLE_PATH, draw_attention, figure, roundoff_text
from .common import group_strips, seeded_qkv

__all__ = ["luna"]

N, SEED, L = 16, 13, 4


@matplotlib.style.context(STYLE_PATH)
def luna() -> Figure:
    """Pack and unpack maps and their composition beside softmax attention, non-causal (top) and causal (bottom).

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    q, k, v = seeded_qkv(SEED, N)
    record = registry.get("luna")
    fig = figure((14.0, 8.4))
    for row, causal in zip(fig.subfigures(2, 1), (False, True), strict=True):
        result = record.apply(q, k, v, causal=causal, rng=SEED, pack_length=L, return_weights=True,
                              return_draws=True)
        A_unpack, A_pack = luna_maps(q, k, result.draws["pack"], causal=causal)
        _check(result.weights, A_unpack, A_pack, causal)
        _row(row, q, k, v, result, A_unpack, A_pack, causal)
    fig.suptitle(f"Luna (Ma et al., 2021): l = {L} pack tokens P attend the keys (pack), the queries attend the "
                 f"packed context (unpack); n = m = {N}, seed {SEED}")
    return fig


def _check(W, A_unpack, A_pack, causal: bool) -> None:
    """The record's effective matrix is the composition of the drawn maps (causal: the running mean of F)."""
    expected = A_unpack @ A_pack
    if causal:
        expected = np.tril(expected / np.arange(1, N + 1)[:, None])
    if not np.allclose(W, expected, rtol=1e-12, atol=1e-12):
        raise ValueError("luna: the figure's maps and the record's apply disagree")


def _row(container, q, k, v, result, A_unpack, A_pack, causal: bool) -> None:
    """[pack on the keys | queries on the packed tokens | W | softmax] for one form."""
    pack_panel, unpack_panel, pair = container.subfigures(1, 3, width_ratios=[1.25, 0.75, 2.0])
    pack_title = ("Fᵀ (l × m), F = softplus_ln2(s·K Pᵀ):\nthe causal pack, unnormalised" if causal else
                  "A_pack (l × m):\npack tokens on the keys")
    (ax,) = draw_attention(pack_panel, A_pack, ylabel="pack token l", titles=pack_title).ravel()
    group_strips(ax, np.arange(L))
    (ax,) = draw_attention(unpack_panel, A_unpack, xlabel="packed token l",
                           titles="A_unpack (n × l):\nqueries on the packed tokens").ravel()
    group_strips(ax, None, np.arange(L))
    out, S = ra.scaled_dot_product_attention(q, k, v, causal=causal, return_weights=True)
    error = np.linalg.norm(result.output - out) / np.linalg.norm(out)
    allowed = ra.causal_mask(N) if causal else None
    W_title = "W_tj = Σ_l A_unpack,tl F_jl / (t + 1), j ≤ t" if causal else "W = A_unpack·A_pack"
    draw_attention(pair, np.stack([result.weights, S]), allowed=allowed,
                   titles=[W_title, "causal softmax" if causal else "softmax"])
    label = ("causal: the packed context of position t is the mean over j ≤ t; rows of W do not sum to 1"
             if causal else "non-causal: rows of W sum to 1, rank ≤ l")
    container.suptitle(f"{label}; relative output error ‖y − y_sm‖/‖y_sm‖ = {roundoff_text(error, '.2f')}")
