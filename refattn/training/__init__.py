"""Training small Transformers in NumPy with refattn's own gradients.

- :mod:`refattn.training.vjp`: the backward passes beyond attention (embedding and positions, layer norm,
  feed-forward, linear projections, cross-entropy with a loss mask);
- :mod:`refattn.training.model`: the encoder–decoder of :mod:`refattn.core` and a decoder-only model, their
  logits (with every attention's weights, or another attention swapped in), loss and gradients, and
  pytree helpers for their frozen-dataclass parameters;
- :mod:`refattn.training.adam`: Adam.
"""
from .adam import AdamState, adam_init, adam_update, global_norm
from .model import (
    DecoderOnlyLayerParams,
    DecoderOnlyParams,
    Seq2SeqParams,
    attention_inputs,
    decoder_logits,
    decoder_loss_and_grads,
    flatten,
    init_decoder_only,
    init_seq2seq,
    leaf_names,
    seq2seq_logits,
    seq2seq_loss_and_grads,
    tree_map,
    unflatten,
)
from .vjp import (
    FeedForwardGrads,
    LayerNormGrads,
    LinearGrads,
    cross_entropy,
    embedding_vjp,
    feed_forward_vjp,
    layer_norm_vjp,
    linear_vjp,
    position_vjp,
)

__all__ = [
    "AdamState",
    "DecoderOnlyLayerParams",
    "DecoderOnlyParams",
    "FeedForwardGrads",
    "LayerNormGrads",
    "LinearGrads",
    "Seq2SeqParams",
    "adam_init",
    "adam_update",
    "attention_inputs",
    "cross_entropy",
    "decoder_logits",
    "decoder_loss_and_grads",
    "embedding_vjp",
    "feed_forward_vjp",
    "flatten",
    "global_norm",
    "init_decoder_only",
    "init_seq2seq",
    "layer_norm_vjp",
    "leaf_names",
    "linear_vjp",
    "position_vjp",
    "seq2seq_logits",
    "seq2seq_loss_and_grads",
    "tree_map",
    "unflatten",
]
