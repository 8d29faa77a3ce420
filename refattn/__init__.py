"""refattn: the NumPy reference implementation of Transformer attention mechanisms.

Every mechanism is a plain-NumPy function whose lines mirror its paper's equations, computed in
float64 by default, with explicit conventions (mask polarity ``True`` = may attend, top-left or
bottom-right causal alignment, an explicit fully-masked-row policy) and explicit randomness.
"""
from __future__ import annotations

from . import linear, oracle, registry, sparse
from .core.causal_mask import causal_mask
from .core.decoder_layer import DecoderCache, DecoderLayerParams, decoder_layer, decoder_layer_step, init_decoder_layer
from .core.encoder_layer import EncoderLayerParams, encoder_layer, init_encoder_layer
from .core.ffn import FeedForwardParams, feed_forward, init_feed_forward
from .core.layer_norm import LayerNormParams, init_layer_norm, layer_norm
from .core.multi_head import MultiHeadParams, init_multi_head, multi_head_attention
from .core.padding_mask import padding_mask
from .core.sdpa import scaled_dot_product_attention
from .core.sinusoidal_pe import sinusoidal_positional_encoding, sinusoidal_rotation
from .core.softmax import softmax
from .core.transformer import (
    TransformerParams,
    decode,
    encode,
    greedy_decode,
    init_transformer,
    transformer,
)

__version__ = "0.3.0"

__all__ = [
    "DecoderCache",
    "DecoderLayerParams",
    "EncoderLayerParams",
    "FeedForwardParams",
    "LayerNormParams",
    "MultiHeadParams",
    "TransformerParams",
    "causal_mask",
    "decode",
    "decoder_layer",
    "decoder_layer_step",
    "encode",
    "encoder_layer",
    "feed_forward",
    "greedy_decode",
    "init_decoder_layer",
    "init_encoder_layer",
    "init_feed_forward",
    "init_layer_norm",
    "init_multi_head",
    "init_transformer",
    "layer_norm",
    "linear",
    "multi_head_attention",
    "oracle",
    "padding_mask",
    "registry",
    "sparse",
    "scaled_dot_product_attention",
    "sinusoidal_positional_encoding",
    "sinusoidal_rotation",
    "softmax",
    "transformer",
]
