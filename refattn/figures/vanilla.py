r"""Figures of the vanilla Transformer (Vaswani et al., 2017): each component, a trained model's heads.

One function per vanilla registry id (and the sheet :func:`vanilla_overview`). Each draws its
inputs from its own fixed seed, computes with refattn's public functions only and returns a
:class:`matplotlib.figure.Figure` drawn with :mod:`refattn.viz`, so the same call gives the same
pixels on every run. Matrices follow the viz conventions: rows = queries *i*, columns = keys *j*;
masks are drawn dark where ``True`` = may attend; weights on the one-sided weights scale with the
pairs a mask excludes grey, signed quantities (encodings, activations, values) on the diverging
scale, and small matrices with their values printed.

The attention inside a model (multi-head, cross-attention, the encoder and decoder layers, the whole
Transformer and those panels of the overview) is that of the shipped model trained on the reverse task
(:func:`refattn.training.pretrained`: a post-LN encoder–decoder, one layer each, d_model = 16, 2
heads, trained with refattn's own gradients), on a seeded source sequence, with the tokens on the
axes: random weights show nothing a learner can read, trained ones show the anti-diagonal the task
needs. The weights are those of :func:`refattn.training.seq2seq_logits` and
:func:`refattn.greedy_decode`.
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
    return A, ra.causal_mask(n, m, causal=alignment)


def _padding_example() -> tuple[NDArray, NDArray, NDArray]:
    """Batch of 3, n = 5, m = 9, lengths 9, 6, 3: returns (lengths, mask (3, 1, 9), weights (3, 5, 9))."""
    rng = np.random.default_rng(4)
    lengths = np.array([9, 6, 3])
    q, k = rng.standard_normal((3, 5, 8)), rng.standard_normal((3, 9, 8))
    mask = ra.padding_mask(lengths, 9)
    return lengths, mask, ra.scaled_dot_product_attention(q, k, k, mask, return_weights=True)[1]


SOURCE_SEED = 5                                   # the reverse task's source drawn for the model figures


def _reverse():
    """The shipped reverse model, a seeded source, its decoder input and the tokens' labels."""
    from ..training import get_task, pretrained, reverse_batch

    params, batch, labels = pretrained("reverse"), reverse_batch(SOURCE_SEED, 1), get_task("reverse").labels
    return params, batch.src[0], batch.inputs[0], [labels[t] for t in batch.src[0]], \
        [labels[t] for t in batch.inputs[0]]


def _reverse_weights() -> tuple[dict, list[str], list[str]]:
    """Every attention's weights (h, ·, ·) of the trained model on the seeded source (teacher forcing)."""
    from ..training import seq2seq_logits

    params, src, inputs, src_labels, in_labels = _reverse()
    _, weights = seq2seq_logits(params, src[None], inputs[None], return_weights=True)
    return {name: w[0] for name, w in weights.items()}, src_labels, in_labels


def _multi_head_example() -> tuple[NDArray, list[str]]:
    """The trained encoder's self-attention weights (h, n, n) on the seeded source."""
    weights, src_labels, _ = _reverse_weights()
    return weights["encoder.0.self"], src_labels


def _cross_example() -> tuple[NDArray, list[str], list[str]]:
    """The trained decoder's cross-attention weights (h, T, n): decoder inputs over the source."""
    weights, src_labels, in_labels = _reverse_weights()
    return weights["decoder.0.cross"], src_labels, in_labels


def _decoder_example() -> tuple[NDArray, NDArray, list[str], list[str]]:
    """The trained decoder layer's causal self-attention (h, T, T) and cross-attention (h, T, n)."""
    weights, src_labels, in_labels = _reverse_weights()
    return weights["decoder.0.self"], weights["decoder.0.cross"], src_labels, in_labels


def _transformer_example():
    """Source, greedy tokens and cross-attention (layers, h, T, n) of the trained model, decoding alone."""
    params, src, _, src_labels, _ = _reverse()
    tokens, _, cross_w = ra.greedy_decode(src, params.transformer, num_heads=params.num_heads, bos=0,
                                          max_len=len(src) + 1, return_weights=True)
    return src_labels, tokens, cross_w


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
    draw_pattern(wide, np.stack([ra.causal_mask(5, 8), ra.causal_mask(5, 8, causal="bottom-right")]),
                 titles=["top-left: j ≤ i", "bottom-right: j ≤ i + 3"], suptitle="n = 5 queries, m = 8 keys")
    draw_pattern(tall, np.stack([ra.causal_mask(8, 5), ra.causal_mask(8, 5, causal="bottom-right")]),
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
    """Self-attention weights of each head of the trained encoder, over the source tokens."""
    A, labels = _multi_head_example()
    return plot_attention(A[None], titles=[f"head {i + 1}" for i in range(len(A))], row_labels=labels,
                          col_labels=labels, xlabel="source token j", ylabel="source token i", vmax=1.0, size=3.2,
                          suptitle=f"Multi-head self-attention, trained encoder ({len(A)} heads; §3.2.2)")


@_styled
def cross_attention() -> Figure:
    """Cross-attention weights per head of the trained decoder: the anti-diagonal of the reverse task."""
    A, src_labels, in_labels = _cross_example()
    return plot_attention(A[None], titles=[f"head {i + 1}" for i in range(len(A))], row_labels=in_labels,
                          col_labels=src_labels, xlabel="source token j", ylabel="decoder input i", vmax=1.0, size=3.2,
                          suptitle="Cross-attention of a decoder trained to reverse its source:\n"
                                   "decoder input i reads source token n − 1 − i (§3.2.3)")


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
    """Self-attention weights of each head of the trained encoder layer, beside its input and output norms."""
    A, labels = _multi_head_example()
    return plot_attention(A[None], titles=[f"layer 1, head {h + 1}" for h in range(len(A))], row_labels=labels,
                          col_labels=labels, xlabel="source token j", ylabel="source token i", vmax=1.0, size=3.2,
                          suptitle=f"Trained encoder: 1 post-LN layer × {len(A)} heads (reverse task)")


@_styled
def decoder_layer() -> Figure:
    """Causal self-attention and cross-attention weights of each head of the trained decoder layer."""
    self_w, cross_w, src_labels, in_labels = _decoder_example()
    T = self_w.shape[-1]
    fig = figure((4.2 * len(self_w) + 1.5, 8.6))
    top, bottom = fig.subfigures(2, 1)
    heads = [f"head {i + 1}" for i in range(len(self_w))]
    draw_attention(top, self_w[None], allowed=ra.causal_mask(T), titles=heads, vmax=1.0, row_labels=in_labels,
                   col_labels=in_labels, xlabel="decoder input j", ylabel="decoder input i",
                   suptitle=f"masked self-attention, causal top-left: j ≤ i (n = {T}; grey = masked)")
    draw_attention(bottom, cross_w[None], titles=heads, vmax=1.0, row_labels=in_labels, col_labels=src_labels,
                   xlabel="source token j", ylabel="decoder input i",
                   suptitle=f"cross-attention over the encoder output (m = {cross_w.shape[-1]})")
    fig.suptitle("Decoder layer (post-LN) trained on the reverse task: attention weights of each head (§3.1, §3.2.3)")
    return fig


@_styled
def transformer() -> Figure:
    """Cross-attention of the trained Transformer at each greedy decoding step."""
    src_labels, tokens, cross_w = _transformer_example()
    from ..training import get_task

    labels = get_task("reverse").labels
    A = cross_w[-1].max(axis=0)                        # (T, m)  last decoder layer, each pair's largest head weight
    T = len(A)
    steps = [0, 2, 4, 6, T - 2, T - 1]
    decoded = np.arange(T)[None, :, None] <= np.array(steps)[:, None, None]                 # (6, T, 1)  row ≤ step
    return plot_attention(
        np.broadcast_to(A, (len(steps), *A.shape)).reshape(2, 3, *A.shape),
        allowed=np.broadcast_to(decoded, (len(steps), T, A.shape[-1])).reshape(2, 3, T, A.shape[-1]),
        titles=[f"step {t + 1}: emits {labels[tokens[t + 1]]}" for t in steps],
        row_labels=[labels[t] for t in tokens[:-1]], col_labels=src_labels,
        xlabel="source token", ylabel="decoder input", vmax=1.0,
        suptitle="Greedy decoding with the Transformer trained to reverse its source: cross-attention at each step\n"
                 f"(its one decoder layer, the larger of {cross_w.shape[-3]} heads' weights per pair; "
                 "grey = not decoded yet)",
    )


# --- overview sheet ----------------------------------------------------------------------------------

@_styled
def vanilla_overview() -> Figure:
    """The main attention matrices of the vanilla Transformer on one colour scale, masked pairs grey."""
    _, mask, padded = _padding_example()
    encoder, src = _multi_head_example()
    self_w, cross_w, _, inputs = _decoder_example()
    panels = [                                      # (A, allowed, title, (row labels, column labels) or None)
        (_sdpa_example()[0], None, "sdpa, n = 6, m = 9", None),
        (*_causal_example(5, 8, "top-left"), "causal top-left, 5 × 8", None),
        (*_causal_example(8, 5, "bottom-right"), "causal bottom-right, 8 × 5\n(rows 0–2: no key, weights 0)", None),
        (padded[2], mask[2], "key padding, ℓ = 3 of 9", None),
        (encoder[0], None, "trained encoder self-attn, head 1", (src, src)),
        (cross_w[0], None, "trained cross-attention, head 1", (inputs, src)),
        (encoder[1], None, "trained encoder self-attn, head 2", (src, src)),
        (self_w[0], ra.causal_mask(9), "trained decoder causal self-attn, head 1", (inputs, inputs)),
    ]
    fig = figure((12.6, 6.6))
    sheet, bar = fig.subfigures(1, 2, width_ratios=[30, 1.3])
    for sub, (A, allowed, title, labels) in zip(sheet.subfigures(2, 4).flat, panels, strict=True):
        rows, cols = labels if labels is not None else (None, None)
        axes = draw_attention(sub, A, allowed=allowed, titles=title, vmax=1.0, colorbar=False, row_labels=rows,
                              col_labels=cols)
    cax = bar.add_axes((0.0, 0.15, 0.3, 0.7))
    bar.colorbar(axes[0, 0].images[0], cax=cax)                    # every panel: the weights scale 0 … 1
    fig.suptitle("Vanilla Transformer attention weights (rows = queries i, columns = keys j; grey = masked pair)")
    return fig
