r"""Figure of multi-query and grouped-query attention (Shazeer, 2019; Ainslie et al., 2023): heads, KV-cache sizes.

Top: the weights of h = 8 query heads of one causal self-attention layer (n = 10 tokens, d_model = 16,
seed 3) as multi-head attention (g = 8), and after converting the same checkpoint by mean-pooling its
key/value heads (:func:`~refattn.heads.convert_multi_head`) to grouped-query (g = 2) and multi-query
(g = 1) attention. Each panel's title and frame take the colour of the key/value head it reads
(query head i reads head i // (h / g)). Bottom: the key/value cache against the context length for a
model of 32 layers of h = 32 heads of 128 in float16, with g = 32, 8 and 1, and the same numbers
printed by :func:`~refattn.heads.kv_cache_summary`.
"""
from __future__ import annotations

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure

from .. import init_multi_head, sinusoidal_positional_encoding
from ..heads import convert_multi_head, kv_cache_bytes, kv_cache_summary, multi_query_attention
from ..viz import STYLE_PATH, draw_attention, figure
from .common import GROUP_COLORS

__all__ = ["multi_query"]

N, D_MODEL, H, SEED = 10, 16, 8, 3
GROUPS = (8, 2, 1)
MODEL = {"num_heads": 32, "d_head": 128, "num_layers": 32, "dtype": "float16"}   # a 7B-parameter decoder's shape
CONTEXT = 4096


@matplotlib.style.context(STYLE_PATH)
def multi_query() -> Figure:
    """Per-head weights for g = h, 2, 1 (one checkpoint, mean-pooled) above the cache size against n.

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    rng = np.random.default_rng(SEED)
    x = rng.standard_normal((N, D_MODEL)) + sinusoidal_positional_encoding(N, D_MODEL)
    mha = init_multi_head(rng, D_MODEL, H)
    weights = np.stack([multi_query_attention(x, x, convert_multi_head(mha, num_heads=H, num_kv_heads=g),
                                              num_heads=H, causal=True, return_weights=True)[1] for g in GROUPS])

    fig = figure((14.0, 10.0))
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.3, 1.0])
    titles = [f"q-head {i} → kv {i // (H // g)}" for g in GROUPS for i in range(H)]
    axes = draw_attention(top, weights, allowed=np.tril(np.ones((N, N), dtype=bool)), titles=titles, annotate=False,
                          suptitle=f"the weights of each query head, causal, n = {N}; a panel's colour is the "
                                   "key/value head it reads, i // (h / g)")
    names = {H: "multi-head", 1: "multi-query"}
    for row, g in enumerate(GROUPS):
        axes[row, 0].set_ylabel(f"{names.get(g, 'grouped-query')}, g = {g}\nquery i")
        for i, ax in enumerate(axes[row]):
            color = GROUP_COLORS[(i // (H // g)) % len(GROUP_COLORS)]
            ax.title.set_color(color)
            for spine in ax.spines.values():
                spine.set(edgecolor=color, linewidth=2.0)

    plot, text = bottom.subfigures(1, 2, width_ratios=[1.0, 1.05])
    _cache_sizes(plot.add_subplot())
    summary = kv_cache_summary(MODEL["num_heads"], 8, MODEL["d_head"], MODEL["dtype"], num_tokens=CONTEXT,
                               num_layers=MODEL["num_layers"])
    ax = text.add_subplot()
    ax.axis("off")
    ax.text(0.0, 0.62, "kv_cache_summary(32, 8, 128, 'float16',\n                 num_tokens=4096, num_layers=32)\n\n"
            + summary.replace(", 4096 tokens", ",\n  4096 tokens"), family="monospace", fontsize=8.5, va="center",
            transform=ax.transAxes)
    fig.suptitle("Multi-query and grouped-query attention (Shazeer, 2019; Ainslie et al., 2023)\n"
                 f"h = {H} query heads share g key/value heads: one multi-head checkpoint, its key/value heads "
                 "mean-pooled to g = 2 and g = 1")
    return fig


def _cache_sizes(ax) -> None:
    """Cache bytes against the context length n for g = h, 8, 1 (log-log), with the sizes at n = 4096 marked."""
    n = 2.0 ** np.arange(7, 18)                                    # 128 … 131072 tokens
    h, d_head, layers, dtype = MODEL["num_heads"], MODEL["d_head"], MODEL["num_layers"], MODEL["dtype"]
    for g, color, label in ((h, GROUP_COLORS[0], f"multi-head, g = h = {h}"), (8, GROUP_COLORS[1],
                            "grouped-query, g = 8"), (1, GROUP_COLORS[2], "multi-query, g = 1")):
        per_token = kv_cache_bytes(g, d_head, dtype, num_layers=layers)
        ax.plot(n, n * per_token / 2**30, marker="o", markersize=3, color=color, label=label)
        at = CONTEXT * per_token / 2**30
        ax.annotate(f"{at:g} GiB", (CONTEXT, at), textcoords="offset points", xytext=(6, -11), fontsize=8,
                    color=color)
    ax.axvline(CONTEXT, color="black", linestyle=":", linewidth=1)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set(xlabel="context length n (tokens)", ylabel="key/value cache (GiB)",
           title=f"cache of one sequence: {layers} layers × h = {h} heads of {d_head}, {dtype}\n"
                 "= 2·g·d_head·2 bytes per token per layer; h does not enter")
    ax.legend(loc="upper left", fontsize=8)
