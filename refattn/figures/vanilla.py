r"""Figures of the vanilla Transformer (Vaswani et al., 2017, arXiv:1706.03762v7).

One function per vanilla registry id (and the sheet :func:`vanilla_overview`). Each draws its
inputs from its own fixed seed, computes with refattn's public functions only and returns a
:class:`matplotlib.figure.Figure` drawn with :mod:`refattn.viz`, so the same call gives the same
pixels on every run. Matrices follow the viz conventions: rows = queries *i*, columns = keys *j*;
masks are drawn dark where ``True`` = may attend; weights on the one-sided weights scale with the
pairs a mask excludes grey, signed quantities (encodings, activations, values) on the diverging
scale, and small matrices with their values printed.

Attention weights from inside the layers are recomputed with
``multi_head_attention(..., return_weights=True)`` on the layer's own parameters and inputs (the
post-LN residual chain of §3.1); the tests check that this chain reproduces
:func:`refattn.decoder_layer` and the logits of :func:`refattn.greedy_decode`.
"""
from __future__ import annotations

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure
from numpy.typing import NDArray

import refattn as ra

from ..viz import STYLE_PATH, draw_attention, draw_pattern, figure, plot_attention

__all__ = [
    "softmax", "sdpa", "causal_mask", "padding_mask", "multi_head", "cross_attention", "sinusoidal_pe",
    "layer_norm", "ffn", "encoder_layer", "decoder_layer", "transformer", "vanilla_overview",
]

D_MODEL, NUM_HEADS, D_FF = 16, 4, 32
_styled = matplotlib.style.context(STYLE_PATH)     # decorator: every artist of a sheet in refattn's style


# --- seeded examples (shared by the single figures and the overview sheet) ------------------------

def _sdpa_example() -> tuple[NDArray, NDArray, NDArray]:
    """n = 6 queries, m = 9 keys: returns (A, V, AV)."""
    rng = np.random.default_rng(2)
    q, k, v = 1.5 * rng.standard_normal((6, 8)), rng.standard_normal((9, 8)), rng.standard_normal((9, 4))
    out, A = ra.scaled_dot_product_attention(q, k, v, return_weights=True)
    return A, v, out


def _causal_example(n: int, m: int, alignment: str) -> tuple[NDArray, NDArray]:
    """Causal weights (n, m) and the mask that gives them."""
    rng = np.random.default_rng(3)
    q, k = rng.standard_normal((n, 8)), rng.standard_normal((m, 8))
    causal = True if alignment == "top-left" else alignment
    A = ra.scaled_dot_product_attention(q, k, k, causal=causal, return_weights=True)[1]
    return A, ra.causal_mask(n, m, alignment=alignment)


def _padding_example() -> tuple[NDArray, NDArray, NDArray]:
    """Batch of 3, n = 5, m = 9, lengths 9, 6, 3: returns (lengths, mask (3, 1, 9), weights (3, 5, 9))."""
    rng = np.random.default_rng(4)
    lengths = np.array([9, 6, 3])
    q, k = rng.standard_normal((3, 5, 8)), rng.standard_normal((3, 9, 8))
    mask = ra.padding_mask(lengths, 9)
    return lengths, mask, ra.scaled_dot_product_attention(q, k, k, mask, return_weights=True)[1]


def _multi_head_example() -> NDArray:
    """Self-attention weights (h, n, n) of 4 heads on n = 8 positions."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((8, D_MODEL)) + ra.sinusoidal_positional_encoding(8, D_MODEL)
    params = ra.init_multi_head(rng, D_MODEL, NUM_HEADS)
    return ra.multi_head_attention(x, x, params, num_heads=NUM_HEADS, return_weights=True)[1]


def _cross_example() -> NDArray:
    """Cross-attention weights (h, 5, 8): 5 decoder queries over 8 encoder keys."""
    rng = np.random.default_rng(6)
    y, memory = rng.standard_normal((5, D_MODEL)), rng.standard_normal((8, D_MODEL))
    params = ra.init_multi_head(rng, D_MODEL, NUM_HEADS)
    return ra.multi_head_attention(y, memory, params, num_heads=NUM_HEADS, return_weights=True)[1]


def _encoder_example() -> NDArray:
    """Self-attention weights (layers, h, 7, 7) of a 2-layer post-LN encoder."""
    rng = np.random.default_rng(10)
    x = rng.standard_normal((7, D_MODEL)) + ra.sinusoidal_positional_encoding(7, D_MODEL)
    weights = []
    for _ in range(2):
        layer = ra.init_encoder_layer(rng, D_MODEL, NUM_HEADS, D_FF)
        x, A = ra.encoder_layer(x, layer, num_heads=NUM_HEADS, return_weights=True)
        weights.append(A)
    return np.stack(weights)


def _decoder_example() -> tuple[NDArray, NDArray]:
    """Causal self-attention (h, 6, 6) and cross-attention (h, 6, 9) weights of one decoder layer."""
    rng = np.random.default_rng(11)
    y = rng.standard_normal((6, D_MODEL)) + ra.sinusoidal_positional_encoding(6, D_MODEL)
    memory = rng.standard_normal((9, D_MODEL))
    layer = ra.init_decoder_layer(rng, D_MODEL, NUM_HEADS, D_FF)
    _, (self_w, cross_w) = ra.decoder_layer(y, memory, layer, num_heads=NUM_HEADS, return_weights=True)
    return self_w, cross_w


def _transformer_example():
    """Source, greedy tokens and cross-attention (layers, h, T, m) of a tiny random Transformer."""
    params = ra.init_transformer(12, 10, 10, d_model=D_MODEL, num_heads=2, d_ff=D_FF, num_layers=2)
    src = np.array([3, 7, 1, 5, 9, 2, 8])
    tokens, _, cross_w = ra.greedy_decode(src, params, num_heads=2, bos=0, max_len=6, return_weights=True)
    return src, tokens, cross_w


# --- one figure per registry id ---------------------------------------------------------------------

@_styled
def softmax() -> Figure:
    """Softmax of one row of logits at several temperatures; saturation of unscaled dot products."""
    rng = np.random.default_rng(1)
    x = rng.normal(0.0, 1.5, size=10)
    taus = (4.0, 1.0, 0.5, 0.25, 0.1)
    by_tau = np.stack([ra.softmax(x / tau) for tau in taus])
    d_ks = (4, 16, 64, 256, 1024)
    unscaled, scaled = [], []
    for d_k in d_ks:                                   # q·k has variance d_k for N(0, 1) entries (§3.2.1)
        q, k = rng.standard_normal((1, d_k)), rng.standard_normal((10, d_k))
        unscaled.append(ra.scaled_dot_product_attention(q, k, k, scale=1.0, return_weights=True)[1][0])
        scaled.append(ra.scaled_dot_product_attention(q, k, k, return_weights=True)[1][0])
    fig = figure((11.5, 3.1))
    left, right = fig.subfigures(1, 2, width_ratios=[1.0, 2.1])
    draw_attention(left, by_tau, titles="softmax(x / τ), one row of logits", row_labels=[f"τ = {t:g}" for t in taus],
                   xlabel="logit index j", ylabel="", vmax=1.0, colorbar=False)
    draw_attention(right, np.stack([unscaled, scaled]), titles=["softmax(q·kⱼ): saturates as d_k grows",
                   "softmax(q·kⱼ / √d_k): stays spread"], row_labels=[f"d_k = {d}" for d in d_ks], ylabel="",
                   vmax=1.0)
    fig.suptitle("Softmax: temperature, and why scores are scaled by 1/√d_k (§3.2.1)")
    return fig


@_styled
def sdpa() -> Figure:
    """Weights A (n = 6, m = 9), values V and output AV of scaled dot-product attention."""
    A, v, out = _sdpa_example()
    fig = figure((10.0, 3.8))
    left, middle, right = fig.subfigures(1, 3, width_ratios=[2.6, 1.45, 1.45])
    draw_attention(left, A, titles="A = softmax(QKᵀ/√d_k)\nrows sum to 1")
    draw_attention(middle, v, signed=True, titles="V", xlabel="feature", ylabel="key j")
    draw_attention(right, out, signed=True, titles="output AV", xlabel="feature")
    fig.suptitle("Scaled dot-product attention, n = 6 queries, m = 9 keys (Eq. 1)")
    return fig


@_styled
def causal_mask() -> Figure:
    """Top-left and bottom-right causal masks for n < m and n > m."""
    fig = figure((9.0, 4.3))
    wide, tall = fig.subfigures(1, 2, width_ratios=[1.45, 1.0])
    draw_pattern(wide, np.stack([ra.causal_mask(5, 8), ra.causal_mask(5, 8, alignment="bottom-right")]),
                 titles=["top-left: j ≤ i", "bottom-right: j ≤ i + 3"], suptitle="n = 5 queries, m = 8 keys")
    draw_pattern(tall, np.stack([ra.causal_mask(8, 5), ra.causal_mask(8, 5, alignment="bottom-right")]),
                 titles=["top-left: j ≤ i", "bottom-right: j ≤ i − 3\nrows 0–2 fully masked"],
                 suptitle="n = 8 queries, m = 5 keys")
    fig.suptitle("Causal (look-ahead) masks, True = may attend (dark)")
    return fig


@_styled
def padding_mask() -> Figure:
    """Key padding masks of a batch of 3 and the attention weights they give (padded keys at 0)."""
    lengths, mask, A = _padding_example()
    fig = figure((8.6, 5.2))
    top, bottom = fig.subfigures(2, 1)
    draw_pattern(top, np.broadcast_to(mask, A.shape), titles=[f"b = {b}: ℓ = {n}" for b, n in enumerate(lengths)],
                 suptitle="mask M[b, i, j] = [j < ℓ_b], True = may attend")
    draw_attention(bottom, A, allowed=mask, titles=[f"b = {b}: weights" for b in range(3)],
                   suptitle="softmax over the real keys only; padded keys (grey) get weight exactly 0")
    fig.suptitle("Key padding mask, n = 5 queries, m = 9 keys")
    return fig


@_styled
def multi_head() -> Figure:
    """Self-attention weights of each of h = 4 heads, as a (1, h, n, m) grid."""
    A = _multi_head_example()
    return plot_attention(A[None], titles=[f"head {i + 1}" for i in range(len(A))],
                          suptitle=f"Multi-head self-attention: h = 4 heads, n = m = 8, d_model = {D_MODEL} (§3.2.2)")


@_styled
def cross_attention() -> Figure:
    """Cross-attention weights per head: n = 5 decoder queries over m = 8 encoder keys."""
    A = _cross_example()
    return plot_attention(A[None], titles=[f"head {i + 1}" for i in range(len(A))],
                          xlabel="encoder key j", ylabel="decoder query i",
                          suptitle="Cross-attention: n = 5 decoder queries over m = 8 encoder keys, no mask (§3.2.3)")


@_styled
def sinusoidal_pe() -> Figure:
    """The sinusoidal encoding of 64 positions × 64 dims, a few of its columns, and PE·PEᵀ."""
    pe = ra.sinusoidal_positional_encoding(64, 64)
    fig = figure((13.0, 4.3))
    left, middle, right = fig.subfigures(1, 3, width_ratios=[1.0, 1.15, 1.0])
    draw_attention(left, pe, signed=True, vmax=1.0, xlabel="dimension", ylabel="position pos",
                   titles="PE: sin in even, cos in odd columns")
    ax = middle.add_subplot()
    for col in (0, 6, 16, 32):
        ax.plot(pe[:, col], label=f"dim {col}: ω = {10000.0 ** (-col / 64):.3g}")
    ax.set(xlabel="position pos", ylabel="PE(pos, dim)", title="columns are sinusoids, wavelengths 2π … 10000·2π")
    ax.legend(loc="lower left", ncols=2, fontsize=7)
    ax.set_ylim(-1.6, 1.15)
    draw_attention(right, pe @ pe.T, signed=True, xlabel="position pos′", ylabel="position pos",
                   titles="PE·PEᵀ = Σᵢ cos((pos − pos′)ωᵢ)\ndepends on the offset only")
    fig.suptitle("Sinusoidal positional encoding, 64 positions × d_model = 64 (§3.5)")
    return fig


@_styled
def layer_norm() -> Figure:
    """Rows with different means and scales, before and after layer normalisation, and their statistics."""
    rng = np.random.default_rng(8)
    mu, sigma = rng.normal(0.0, 3.0, size=8), np.exp(rng.normal(0.0, 0.8, size=8))
    x = mu[:, None] + sigma[:, None] * rng.standard_normal((8, 16))
    y = ra.layer_norm(x)
    fig = figure((12.5, 3.0))
    left, middle, right = fig.subfigures(1, 3, width_ratios=[1.0, 1.0, 0.9])
    draw_attention(left, x, signed=True, titles="x: rows with their own mean and scale", xlabel="feature k",
                   ylabel="row (position)")
    draw_attention(middle, y, signed=True, titles="LayerNorm(x), γ = 1, β = 0", xlabel="feature k", ylabel="")
    ax = right.add_subplot()
    rows = np.arange(8)
    ax.plot(rows, x.mean(axis=1), "o", color="0.6", label="mean, before")
    ax.plot(rows, x.std(axis=1), "s", color="0.6", mfc="none", label="std, before")
    ax.plot(rows, y.mean(axis=1), "o", label="mean, after")
    ax.plot(rows, y.std(axis=1), "s", mfc="none", label="std, after")
    ax.axhline(0.0, color="0.85", lw=0.8, zorder=0)
    ax.set(xlabel="row (position)", ylabel="row statistic", title="each row: mean → 0, std → 1")
    ax.legend(fontsize=7, ncols=2, loc="lower left")
    ax.set_ylim(min(x.mean(axis=1).min(), -1) - 2.5, None)
    fig.suptitle("Layer normalisation over the feature axis of each position (Ba et al., 2016; §3.1)")
    return fig


@_styled
def ffn() -> Figure:
    """Pre-activations, the ReLU's kept units and the output of a position-wise FFN (d_ff = 32)."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal((10, 8))
    params = ra.init_feed_forward(rng, 8, D_FF)
    pre = x @ params.w_1 + params.b_1                  # (n, d_ff)  xW₁ + b₁
    fig = figure((12.5, 3.6))
    left, middle, right = fig.subfigures(1, 3, width_ratios=[1.0, 1.0, 0.8])
    draw_attention(left, pre, signed=True, titles="xW₁ + b₁ (pre-activation)", xlabel="hidden unit", ylabel="position")
    draw_pattern(middle, pre > 0, titles="max(0, ·) > 0: units the ReLU keeps", xlabel="hidden unit", ylabel="")
    draw_attention(right, ra.feed_forward(x, params), signed=True, titles="FFN(x)", xlabel="feature", ylabel="")
    fig.suptitle("Position-wise feed-forward network FFN(x) = max(0, xW₁ + b₁)W₂ + b₂, "
                 f"d_model = 8, d_ff = {D_FF} (Eq. 2)")
    return fig


@_styled
def encoder_layer() -> Figure:
    """Self-attention weights of each head in each layer of a 2-layer encoder."""
    A = _encoder_example()
    titles = [[f"layer {layer + 1}, head {h + 1}" for h in range(A.shape[1])] for layer in range(A.shape[0])]
    return plot_attention(A, titles=titles, suptitle="Encoder self-attention: 2 post-LN layers × 4 heads, n = 7")


@_styled
def decoder_layer() -> Figure:
    """Causal self-attention and cross-attention weights of each head of one decoder layer."""
    self_w, cross_w = _decoder_example()
    fig = figure((10.5, 5.3))
    top, bottom = fig.subfigures(2, 1)
    heads = [f"head {i + 1}" for i in range(len(self_w))]
    draw_attention(top, self_w[None], allowed=ra.causal_mask(6), titles=heads, vmax=1.0,
                   suptitle="masked self-attention, causal top-left: j ≤ i (n = 6; grey = masked)")
    draw_attention(bottom, cross_w[None], titles=heads, vmax=1.0, xlabel="encoder key j",
                   suptitle="cross-attention over the encoder output (m = 9)")
    fig.suptitle("Decoder layer (post-LN): attention weights of each head (§3.1, §3.2.3)")
    return fig


@_styled
def transformer() -> Figure:
    """Cross-attention of a tiny random Transformer at each greedy decoding step (2 × 3 grid)."""
    src, tokens, cross_w = _transformer_example()
    A = cross_w[-1].mean(axis=0)                       # (T, m)  last decoder layer, mean over heads
    T = len(A)
    decoded = np.arange(T)[None, :, None] <= np.arange(T)[:, None, None]                 # (T, T, 1)  row ≤ step
    return plot_attention(
        np.broadcast_to(A, (T, *A.shape)).reshape(2, T // 2, *A.shape), allowed=decoded.reshape(2, T // 2, T, 1),
        titles=[f"step {t + 1}: emits {tokens[t + 1]}" for t in range(T)],
        row_labels=["bos" if t == 0 else str(t) for t in tokens[:-1]], col_labels=[str(s) for s in src],
        xlabel="source token", ylabel="decoder input", vmax=1.0,
        suptitle="Greedy decoding with a tiny random Transformer: cross-attention at each step\n"
                 "(last of 2 decoder layers, mean over 2 heads; grey = not decoded yet)",
    )


# --- overview sheet ----------------------------------------------------------------------------------

@_styled
def vanilla_overview() -> Figure:
    """The main attention matrices of the vanilla Transformer on one colour scale, masked pairs grey."""
    _, mask, padded = _padding_example()
    panels = [
        (_sdpa_example()[0], None, "sdpa, n = 6, m = 9"),
        (*_causal_example(5, 8, "top-left"), "causal top-left, 5 × 8"),
        (*_causal_example(8, 5, "bottom-right"), "causal bottom-right, 8 × 5\n(rows 0–2: no key, weights 0)"),
        (padded[2], mask[2], "key padding, ℓ = 3 of 9"),
        (_multi_head_example()[0], None, "multi-head self-attn, head 1"),
        (_cross_example()[0], None, "cross-attention, head 1"),
        (_encoder_example()[1, 0], None, "encoder layer 2, head 1"),
        (_decoder_example()[0][0], ra.causal_mask(6), "decoder causal self-attn, head 1"),
    ]
    fig = figure((12.6, 6.6))
    sheet, bar = fig.subfigures(1, 2, width_ratios=[30, 1.3])
    for sub, (A, allowed, title) in zip(sheet.subfigures(2, 4).flat, panels, strict=True):
        axes = draw_attention(sub, A, allowed=allowed, titles=title, vmax=1.0, colorbar=False)
    cax = bar.add_axes((0.0, 0.15, 0.3, 0.7))
    bar.colorbar(axes[0, 0].images[0], cax=cax)                    # every panel: the weights scale 0 … 1
    fig.suptitle("Vanilla Transformer attention weights (rows = queries i, columns = keys j; grey = masked pair)")
    return fig
