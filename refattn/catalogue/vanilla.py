"""Catalogue records of the vanilla Transformer (MECHANISMS.md §1; Vaswani et al., 2017)."""
from __future__ import annotations

import numpy as np

from ..common import as_rng
from ..core.encoder_decoder import decoder_layer, encoder_layer
from ..core.layers import feed_forward, layer_norm
from ..core.masks import causal_mask, padding_mask
from ..core.multi_head import init_multi_head, multi_head_attention
from ..core.positional import sinusoidal_positional_encoding
from ..core.sdpa import scaled_dot_product_attention
from ..core.softmax import softmax
from ..core.transformer import transformer
from ..mechanism import AttentionResult, Mechanism

__all__ = ["RECORDS"]

VASWANI = 'A. Vaswani et al., 2017, "Attention Is All You Need", arXiv:1706.03762'


def _apply_sdpa(q, k, v, *, causal=False, rng=None, mask=None, scale=None, fully_masked="zero"):
    out, A = scaled_dot_product_attention(q, k, v, mask, causal=causal, scale=scale,
                                          fully_masked=fully_masked, return_weights=True)
    return AttentionResult(out, A)


def _apply_causal_mask(q, k, v, *, causal=True, rng=None, scale=None):
    """sdpa under the look-ahead mask; ``causal`` picks the alignment (True = top-left)."""
    if causal is False:
        raise ValueError("the causal_mask mechanism is causal by definition; pass causal=True or an alignment")
    return _apply_sdpa(q, k, v, causal=causal, scale=scale)


def _apply_padding_mask(q, k, v, *, causal=False, rng=None, lengths=None, scale=None):
    """sdpa with a key padding mask; ``lengths`` (batch shape) given or drawn from ``rng`` in [1, m]."""
    m = np.shape(k)[-2]
    batch = np.broadcast_shapes(np.shape(q)[:-2], np.shape(k)[:-2], np.shape(v)[:-2])
    if lengths is None:
        if rng is None:
            raise ValueError("padding_mask needs lengths= or rng= to draw them")
        lengths = as_rng(rng).integers(1, m + 1, size=batch)
    return _apply_sdpa(q, k, v, causal=causal, mask=padding_mask(lengths, m), scale=scale)


def _apply_multi_head(q, k, v, *, causal=False, rng=None, num_heads=2, params=None, mask=None):
    """MultiHead(Q, K, V) with parameters ``params`` or drawn from ``rng`` (d_model = q's width)."""
    if params is None:
        if rng is None:
            raise ValueError("multi-head attention needs params= or rng= to draw them")
        params = init_multi_head(rng, np.shape(q)[-1], num_heads)
    out, A = multi_head_attention(q, k, params, num_heads=num_heads, x_v=v, mask=mask,
                                  causal=causal, return_weights=True)
    return AttentionResult(out, A)


def _apply_cross_attention(q, k, v, *, causal=False, rng=None, **options):
    """Decoder queries attend to encoder keys/values: no causal mask, n and m free."""
    if causal is not False:
        raise ValueError("cross-attention is not causal: the decoder may see the whole source")
    return _apply_multi_head(q, k, v, rng=rng, **options)


RECORDS = (
    Mechanism(
        "softmax", "Numerically stable masked softmax", "vanilla", "2 (Vaswani §3.2.1)", VASWANI,
        r"\operatorname{softmax}(x)_j = \frac{e^{x_j - \max_k x_k}}{\sum_k e^{x_k - \max_k x_k}}",
        "O(n·m)", "O(n·m)", True, "component", softmax,
    ),
    Mechanism(
        "sdpa", "Scaled dot-product attention", "vanilla", "2 (Vaswani §3.2.1)", VASWANI,
        r"\operatorname{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}} + B\right) V",
        "O(n·m·d)", "O(n·m)", True, "attention", scaled_dot_product_attention, _apply_sdpa,
    ),
    Mechanism(
        "causal_mask", "Decoder (look-ahead) mask, top-left and bottom-right", "vanilla",
        "2 (Vaswani §3.2.3)", VASWANI,
        r"M_{ij} = [\,j \le i + \delta\,],\ \delta \in \{0,\ m - n\}",
        "O(n·m·d)", "O(n·m)", True, "mask", causal_mask, _apply_causal_mask, position_dependent=True,
    ),
    Mechanism(
        "padding_mask", "Key padding mask", "vanilla", "2 (Vaswani §3.2.3)", VASWANI,
        r"M_{b,1,j} = [\,j < \ell_b\,]",
        "O(n·m·d)", "O(n·m)", True, "mask", padding_mask, _apply_padding_mask,
    ),
    Mechanism(
        "multi_head", "Multi-head attention", "vanilla", "2.1 (Vaswani §3.2.2)", VASWANI,
        r"\operatorname{Concat}(\mathrm{head}_1, \dots, \mathrm{head}_h) W^O,\ "
        r"\mathrm{head}_i = \operatorname{Attention}(QW_i^Q, KW_i^K, VW_i^V)",
        "O(n·m·d + (n+m)·d²)", "O(h·n·m)", True, "attention", multi_head_attention, _apply_multi_head,
    ),
    Mechanism(
        "cross_attention", "Encoder–decoder (cross) attention", "vanilla", "2.2 (Vaswani §3.2.3)", VASWANI,
        r"\operatorname{MultiHead}(Y, M, M),\ Y \in \mathbb{R}^{n \times d},\ M \in \mathbb{R}^{m \times d}",
        "O(n·m·d + (n+m)·d²)", "O(h·n·m)", False, "attention", multi_head_attention, _apply_cross_attention,
    ),
    Mechanism(
        "sinusoidal_pe", "Sinusoidal positional encoding", "vanilla", "2.1 (Vaswani §3.5)", VASWANI,
        r"PE_{(pos,2i)} = \sin(pos/10000^{2i/d}),\ PE_{(pos,2i+1)} = \cos(pos/10000^{2i/d})",
        "O(n·d)", "O(n·d)", True, "component", sinusoidal_positional_encoding,
    ),
    Mechanism(
        "layer_norm", "Layer normalisation with residual (post-LN and pre-LN)", "vanilla",
        "2.1 (Vaswani §3.1)", VASWANI,
        r"\operatorname{LayerNorm}(x + \operatorname{Sublayer}(x))",
        "O(n·d)", "O(n·d)", True, "component", layer_norm,
    ),
    Mechanism(
        "ffn", "Position-wise feed-forward network", "vanilla", "2.1 (Vaswani §3.3)", VASWANI,
        r"\max(0, xW_1 + b_1) W_2 + b_2",
        "O(n·d·d_ff)", "O(n·d_ff)", True, "component", feed_forward,
    ),
    Mechanism(
        "encoder_layer", "Transformer encoder layer", "vanilla", "2.1 (Vaswani §3.1)", VASWANI,
        r"x' = \operatorname{LN}(x + \operatorname{MultiHead}(x,x,x)),\ "
        r"\operatorname{LN}(x' + \operatorname{FFN}(x'))",
        "O(n²·d + n·d·d_ff)", "O(h·n²)", False, "component", encoder_layer,
    ),
    Mechanism(
        "decoder_layer", "Transformer decoder layer (with key/value cache)", "vanilla",
        "2.1 (Vaswani §3.1)", VASWANI,
        r"\operatorname{LN}\circ(\text{causal self-attn},\ \text{cross-attn},\ \operatorname{FFN})",
        "O(n²·d + n·m·d + n·d·d_ff)", "O(h·n·(n+m))", True, "component", decoder_layer,
    ),
    Mechanism(
        "transformer", "Encoder–decoder Transformer with greedy decoding", "vanilla",
        "2 (Vaswani §3)", VASWANI,
        r"\operatorname{softmax}(\operatorname{Decoder}(E[y]\sqrt{d} + PE,\ "
        r"\operatorname{Encoder}(E[x]\sqrt{d} + PE))\,W_{out})",
        "O(N·(n²+m²+nm)·d)", "O(h·(n²+m²+nm))", True, "component", transformer,
    ),
)
