r"""Two trainable Transformers with their exact gradients: the encoder–decoder and a decoder-only model.

    seq2seq        refattn.core's encoder–decoder (Vaswani et al., 2017, §3; post-LN as the paper):
                   x = E_src[src]·√d + PE;  x ← LN(x + SelfAttn(x));  x ← LN(x + FFN(x))
                   y = E_tgt[tgt]·√d + PE;  y ← LN(y + CausalSelfAttn(y));  y ← LN(y + CrossAttn(y, x));
                   y ← LN(y + FFN(y));  logits = y W_out + b_out
    decoder-only   a GPT-style stack (Radford et al., 2019), pre-LN, feed-forward optional:
                   x = E[t]·√d + P (learned) or PE (sinusoids);  x ← x + CausalSelfAttn(LN(x));
                   x ← x + FFN(LN(x));  logits = LN(x) W_out + b_out

The forward pass keeps what each step's backward needs (a "tape" of closures, one per sub-layer) and the
backward pass walks it in reverse: the chain rule of :mod:`refattn.training.vjp` for embeddings, layer
norms, feed-forward networks and projections, and :func:`refattn.oracle.vjp.sdpa_vjp`'s equations for
every head's attention, evaluated from the weights the forward pass kept. Batches are arrays with leading
axes, so one step is a few dozen matmuls whatever the batch.

``attention=`` replaces softmax attention inside every head in the forward pass by any function with
:func:`~refattn.scaled_dot_product_attention`'s signature: a trained model can run with an approximation
swapped in, without retraining. Parameters are frozen dataclasses (pytrees of arrays), which
:mod:`refattn.training.tree` walks.

Speed: the matrices of a small model are small, and OpenBLAS's worker threads cost more than they save on
them, the more so on a busy machine (a 2-layer d_model = 32 encoder–decoder step on a batch of 64 takes
~20 ms with OPENBLAS_NUM_THREADS=1 and several times longer with the default threads on 2 shared cores).
Set the variable before NumPy is imported (on this machine the results were the same bit for bit).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.checks import as_rng, check_bool, check_choice, default_scale
from ..common.init import glorot
from ..common.ints import check_positive_int
from ..core.decoder_layer import DecoderLayerParams
from ..core.encoder_layer import EncoderLayerParams
from ..core.ffn import FeedForwardParams, feed_forward, init_feed_forward
from ..core.layer_norm import LayerNormParams, init_layer_norm, layer_norm
from ..core.multi_head import MultiHeadParams, combine_heads, init_multi_head, merge_heads, project_heads, split_heads
from ..core.sdpa import scaled_dot_product_attention
from ..core.transformer import TransformerParams, embed, init_transformer
from ..oracle.vjp import SdpaGrads
from ..positional.learned_pe import init_learned_pe
from .tree import _children
from .vjp import cross_entropy, embedding_vjp, feed_forward_vjp, layer_norm_vjp, linear_vjp, position_vjp

__all__ = [
    "DecoderOnlyLayerParams",
    "DecoderOnlyParams",
    "Seq2SeqParams",
    "attention_inputs",
    "decoder_logits",
    "decoder_loss_and_grads",
    "init_decoder_only",
    "init_seq2seq",
    "seq2seq_logits",
    "seq2seq_loss_and_grads",
]

KINDS = ("seq2seq", "decoder")
POSITIONS = ("learned", "sinusoidal")
EPS = 1e-5                                                         # layer-norm ε, refattn.core's default

Backward = Callable[[NDArray], Any]


# --- parameters ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Seq2SeqParams:
    """refattn.core's encoder–decoder and its number of heads (which its arrays do not record).

    Attributes
    ----------
    transformer : TransformerParams
        Embeddings, encoder and decoder layers, output projection (post-LN, or pre-LN with final norms).
    num_heads : int
        Attention heads of every layer.
    """

    transformer: TransformerParams
    num_heads: int


@dataclass(frozen=True)
class DecoderOnlyLayerParams:
    """One pre-LN decoder-only layer: causal self-attention, then an optional feed-forward network.

    Attributes
    ----------
    attn : MultiHeadParams
    ffn : FeedForwardParams or None
        ``None`` in an attention-only model.
    norm_1, norm_2 : LayerNormParams or None
        The norms before the attention and before the FFN; ``None`` without layer norm (or without FFN).
    """

    attn: MultiHeadParams
    ffn: FeedForwardParams | None
    norm_1: LayerNormParams | None
    norm_2: LayerNormParams | None


@dataclass(frozen=True)
class DecoderOnlyParams:
    """A decoder-only Transformer.

    Attributes
    ----------
    embedding : (vocab, d_model) ndarray
        Token embedding E, used as E[t]·√d_model as in refattn.core.
    position : (max_len, d_model) ndarray or None
        Learned position table P; ``None`` for the fixed sinusoids.
    layers : tuple of DecoderOnlyLayerParams
    final_norm : LayerNormParams or None
        The norm before the output projection (pre-LN); ``None`` without layer norm.
    w_out : (d_model, vocab) ndarray
    b_out : (vocab,) ndarray
    num_heads : int
        Attention heads of every layer.
    """

    embedding: NDArray
    position: NDArray | None
    layers: tuple[DecoderOnlyLayerParams, ...]
    final_norm: LayerNormParams | None
    w_out: NDArray
    b_out: NDArray
    num_heads: int


def init_seq2seq(
    rng, src_vocab: int, tgt_vocab: int, *, d_model: int, num_heads: int, d_ff: int, num_layers: int,
    norm_first: bool = False,
) -> Seq2SeqParams:
    """Draw an encoder–decoder with :func:`refattn.core.transformer.init_transformer`.

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw.
    src_vocab, tgt_vocab : int
        Vocabulary sizes.
    d_model : int
        Model width.
    num_heads : int
        Attention heads.
    d_ff : int
        FFN inner width.
    num_layers : int
        Layers in each of the encoder and decoder.
    norm_first : bool, default False
        Pre-LN with final norms instead of the paper's post-LN.

    Returns
    -------
    Seq2SeqParams

    Examples
    --------
    >>> p = init_seq2seq(0, 5, 6, d_model=8, num_heads=2, d_ff=16, num_layers=1)
    >>> p.num_heads, p.transformer.w_out.shape
    (2, (8, 6))
    """
    transformer = init_transformer(rng, src_vocab, tgt_vocab, d_model=d_model, num_heads=num_heads, d_ff=d_ff,
                                   num_layers=num_layers, norm_first=norm_first)
    return Seq2SeqParams(transformer, num_heads)


def init_decoder_only(
    rng, vocab: int, d_model: int, num_heads: int, num_layers: int, *, d_ff: int | None = None,
    max_len: int | None = None, positions: str = "learned", norm: bool = True,
) -> DecoderOnlyParams:
    r"""Draw a decoder-only Transformer.

    Token embedding :math:`\mathcal{N}(0, 1/d_{model})` (so E·√d has unit variance, as refattn.core's),
    learned positions as BERT (:func:`refattn.positional.learned_pe.init_learned_pe`), projections
    Glorot uniform with zero biases, norms at γ = 1, β = 0.

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw (embedding, positions, then each layer, then the output projection).
    vocab : int
        Vocabulary size.
    d_model : int
        Model width.
    num_heads : int
        Attention heads per layer.
    num_layers : int
        Layers.
    d_ff : int, optional
        FFN inner width; ``None`` for an attention-only model (Elhage et al., 2021; Olsson et al., 2022).
    max_len : int, optional
        Rows of the learned position table (longest sequence); required with ``positions="learned"``,
        refused with ``"sinusoidal"``.
    positions : {"learned", "sinusoidal"}, default "learned"
        Learned table P, or the fixed sinusoids of §3.5.
    norm : bool, default True
        Pre-LN layer norms (before each sub-layer and the output projection); ``False`` for none.

    Returns
    -------
    DecoderOnlyParams

    Examples
    --------
    >>> p = init_decoder_only(0, 10, 16, 2, 2, max_len=12)
    >>> len(p.layers), p.layers[0].ffn, p.position.shape
    (2, None, (12, 16))
    """
    rng = as_rng(rng)
    for name, value in (("vocab", vocab), ("d_model", d_model), ("num_heads", num_heads),
                        ("num_layers", num_layers)):
        check_positive_int(name, value)
    check_choice("positions", positions, POSITIONS)
    check_bool("norm", norm)
    if d_ff is not None:
        check_positive_int("d_ff", d_ff)
    if positions == "learned" and max_len is None:
        raise ValueError("positions='learned' needs max_len, the rows of the position table")
    if positions == "sinusoidal" and max_len is not None:
        raise ValueError(f"positions='sinusoidal' has no table: max_len must be None, got {max_len!r}")
    if d_model % num_heads:
        raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
    embedding = rng.normal(0.0, d_model ** -0.5, size=(vocab, d_model))
    position = init_learned_pe(rng, max_len, d_model) if positions == "learned" else None

    def maybe_norm(present: bool) -> LayerNormParams | None:
        return init_layer_norm(d_model) if present else None

    layers = tuple(
        DecoderOnlyLayerParams(
            init_multi_head(rng, d_model, num_heads),
            None if d_ff is None else init_feed_forward(rng, d_model, d_ff),
            maybe_norm(norm), maybe_norm(norm and d_ff is not None),
        )
        for _ in range(num_layers)
    )
    return DecoderOnlyParams(embedding, position, layers, maybe_norm(norm), glorot(rng, d_model, vocab),
                             np.zeros(vocab), num_heads)


# --- the forward tape ----------------------------------------------------------------------------------

def _attention_block(x_q: NDArray, x_kv: NDArray, p: MultiHeadParams, h: int, causal: bool, attention,
                     name: str, seen: dict) -> tuple[NDArray, Backward]:
    """Multi-head attention as :func:`refattn.multi_head_attention` computes it, and its backward.

    ``attention(name, q, k, v, causal)`` replaces softmax attention when given. The backward maps d_out to
    (dx_q, dx_kv, dparams)."""
    Q = project_heads(x_q, p.w_q, p.b_q, h)                        # (B, h, n, d_k)  x_q Wᵠ + bᵠ
    K = project_heads(x_kv, p.w_k, p.b_k, h)                       # (B, h, m, d_k)
    V = project_heads(x_kv, p.w_v, p.b_v, h)                       # (B, h, m, d_v)
    if attention is None:
        heads, seen[name] = scaled_dot_product_attention(Q, K, V, causal=causal, return_weights=True)
    else:
        heads = attention(name, Q, K, V, causal)                   # (B, h, n, d_v)
    C = merge_heads(heads)                                         # (B, n, h·d_v)  Concat(head_i)
    out = combine_heads(heads, p.w_o, p.b_o)                       # (B, n, d_model)

    def backward(d_out: NDArray) -> tuple[NDArray, NDArray, MultiHeadParams]:
        o = linear_vjp(C, p.w_o, d_out)                            # Wᴼ, bᴼ, C̄
        g = _sdpa_backward(Q, K, V, seen[name], split_heads(o.dx, h))   # softmax attention's weights A
        q = linear_vjp(x_q, p.w_q, merge_heads(g.dq))
        k = linear_vjp(x_kv, p.w_k, merge_heads(g.dk))
        v = linear_vjp(x_kv, p.w_v, merge_heads(g.dv))

        def bias(b, grads):
            return None if b is None else grads.db

        dparams = MultiHeadParams(q.dw, k.dw, v.dw, o.dw, bias(p.b_q, q), bias(p.b_k, k), bias(p.b_v, v),
                                  bias(p.b_o, o))
        return q.dx, k.dx + v.dx, dparams

    return out, backward


def _sdpa_backward(Q: NDArray, K: NDArray, V: NDArray, A: NDArray, d_heads: NDArray) -> SdpaGrads:
    r""":func:`refattn.oracle.vjp.sdpa_vjp` for the model's attention, from the forward pass's weights.

    The model's attention has no mask beyond causality and finite inputs, so its weights are an exact 0 on
    every masked pair and the general function's selection (masks, fully masked rows, non-finite values)
    reduces to the bare equations; reusing A saves recomputing the softmax. The tests hold the two equal.

        dV = Aᵀ dO,  dA = dO Vᵀ,  dS = A ⊙ (dA − rowsum(dA ⊙ A)),  dQ = s·dS K,  dK = s·dSᵀ Q
    """
    scale = default_scale(Q.shape[-1])
    dV = np.swapaxes(A, -1, -2) @ d_heads                          # (B, h, m, d_v)  Aᵀ dO
    dA = d_heads @ np.swapaxes(V, -1, -2)                          # (B, h, n, m)  dO Vᵀ
    dS = A * (dA - np.sum(dA * A, axis=-1, keepdims=True))         # (B, h, n, m)  A ⊙ (dA − rowsum)
    dQ = scale * (dS @ K)                                          # (B, h, n, d_k)  s·dS K
    dK = scale * (np.swapaxes(dS, -1, -2) @ Q)                     # (B, h, m, d_k)  s·dSᵀ Q
    return SdpaGrads(dQ, dK, dV, None)


def _self_attention_block(p: MultiHeadParams, h: int, causal: bool, attention, name: str,
                          seen: dict) -> Callable[[NDArray], tuple[NDArray, Backward]]:
    """Self-attention as a sub-layer: its backward maps d_out to (ds, dparams), ds = dx_q + dx_kv."""
    def sublayer(s: NDArray):
        out, back = _attention_block(s, s, p, h, causal, attention, name, seen)

        def backward(d_out: NDArray):
            dx_q, dx_kv, dparams = back(d_out)
            return dx_q + dx_kv, dparams                           # s fed the queries, keys and values
        return out, backward
    return sublayer


def _residual(x: NDArray, sublayer: Callable[[NDArray], tuple[NDArray, Backward]], norm: LayerNormParams | None,
              norm_first: bool, eps: float = EPS) -> tuple[NDArray, Backward]:
    """Post-LN ``LN(x + F(x))``, pre-LN ``x + F(LN(x))`` or plain ``x + F(x)`` (``norm`` None), and its backward.

    ``sublayer(s)`` returns (F(s), backward of F); F's backward maps d_F to (d_s, *rest). The residual's
    backward maps d_out to (dx, d_norm, *rest)."""
    if norm is None:
        out, back = sublayer(x)

        def plain_backward(d_out: NDArray):
            d_s, *rest = back(d_out)                               # through F
            return (d_out + d_s, None, *rest)

        return x + out, plain_backward
    if norm_first:
        out, back = sublayer(layer_norm(x, norm.gamma, norm.beta, eps))

        def pre_ln_backward(d_out: NDArray):
            d_s, *rest = back(d_out)                               # through F
            ln = layer_norm_vjp(x, d_s, norm.gamma, eps)           # through LN
            return (d_out + ln.dx, LayerNormParams(ln.d_gamma, ln.d_beta), *rest)

        return x + out, pre_ln_backward
    out, back = sublayer(x)
    z = x + out                                                    # x + F(x)

    def post_ln_backward(d_out: NDArray):
        ln = layer_norm_vjp(z, d_out, norm.gamma, eps)             # through LN
        d_s, *rest = back(ln.dx)                                   # through F
        return (ln.dx + d_s, LayerNormParams(ln.d_gamma, ln.d_beta), *rest)

    return layer_norm(z, norm.gamma, norm.beta, eps), post_ln_backward


def _ffn_block(p: FeedForwardParams) -> Callable[[NDArray], tuple[NDArray, Backward]]:
    def sublayer(s: NDArray):
        def backward(d_out: NDArray):
            g = feed_forward_vjp(s, p, d_out)
            return g.dx, g.dparams
        return feed_forward(s, p), backward
    return sublayer


def _final_norm(x: NDArray, norm: LayerNormParams | None, eps: float = EPS) -> tuple[NDArray, Backward]:
    if norm is None:
        return x, lambda d: (d, None)

    def backward(d_out: NDArray):
        ln = layer_norm_vjp(x, d_out, norm.gamma, eps)
        return ln.dx, LayerNormParams(ln.d_gamma, ln.d_beta)

    return layer_norm(x, norm.gamma, norm.beta, eps), backward


def _check_trainable(T: TransformerParams) -> None:
    """The backward pass covers ReLU feed-forward networks, every bias present and no added key/value
    (``bias_k``); refuse other settings by name rather than differentiate another model."""
    if T.activation != "relu":
        raise ValueError(f'the seq2seq model trains activation="relu" only, got activation="{T.activation}"')
    biases, unsupported = {"b_q", "b_k", "b_v", "b_o", "b_1", "b_2", "beta", "b_out"}, {"bias_k", "w_gate"}

    def walk(node, path):
        for name, child in _children(node) or ():
            where = f"{path}.{name}" if path else name
            if (name in biases and child is None) or (name in unsupported and child is not None):
                raise ValueError(f"the seq2seq model trains with every bias present, no bias_k and no gate; "
                                 f"params have {where} = {'None' if child is None else 'an array'}")
            if child is not None and not isinstance(child, np.ndarray):
                walk(child, where)

    walk(T, "transformer")


def _check_params(kind: str, params) -> None:
    expected = Seq2SeqParams if kind == "seq2seq" else DecoderOnlyParams
    if not isinstance(params, expected):
        raise TypeError(f"params must be a {expected.__name__} for the {kind} model, got {type(params).__name__}")


def _tokens(name: str, tokens: ArrayLike) -> NDArray:
    tokens = np.asarray(tokens)
    if tokens.dtype.kind not in "iu" or tokens.ndim < 1:
        raise TypeError(f"{name} must be an integer array of token ids, got dtype {tokens.dtype} "
                        f"with shape {tokens.shape}")
    return tokens


def _seq2seq_forward(params: Seq2SeqParams, src, tgt_in, attention, seen: dict):
    """Logits and the backward mapping d_logits to the gradient tree."""
    _check_params("seq2seq", params)
    T, h = params.transformer, params.num_heads
    _check_trainable(T)
    eps = T.layer_norm_eps
    src, tgt_in = _tokens("src", src), _tokens("tgt_in", tgt_in)
    if src.shape[:-1] != tgt_in.shape[:-1]:
        raise ValueError(f"src has batch shape {src.shape[:-1]} (shape {src.shape}) but tgt_in has "
                         f"{tgt_in.shape[:-1]} (shape {tgt_in.shape})")
    scale = np.sqrt(T.d_model)
    x = embed(src, T.src_embedding, "src")                         # (B, n_src, d)  E[src]·√d + PE
    encoder = []
    for i, layer in enumerate(T.encoder):
        self_attention = _self_attention_block(layer.self_attn, h, False, attention, f"encoder.{i}.self", seen)
        x, back_1 = _residual(x, self_attention, layer.norm_1, T.norm_first, eps)
        x, back_2 = _residual(x, _ffn_block(layer.ffn), layer.norm_2, T.norm_first, eps)
        encoder.append((back_1, back_2))
    memory, back_enc_norm = _final_norm(x, T.encoder_norm, eps)    # (B, n_src, d)

    y = embed(tgt_in, T.tgt_embedding, "tgt_in")                   # (B, n_tgt, d)
    decoder, d_memory_parts = [], []
    for i, layer in enumerate(T.decoder):
        self_attention = _self_attention_block(layer.self_attn, h, True, attention, f"decoder.{i}.self", seen)

        def cross_attention(s, layer=layer, i=i):
            out, back = _attention_block(s, memory, layer.cross_attn, h, False, attention, f"decoder.{i}.cross",
                                         seen)

            def backward(d_out):
                d_s, d_mem, dparams = back(d_out)
                d_memory_parts.append(d_mem)                       # the memory's share, summed below
                return d_s, dparams
            return out, backward

        y, back_1 = _residual(y, self_attention, layer.norm_1, T.norm_first, eps)
        y, back_2 = _residual(y, cross_attention, layer.norm_2, T.norm_first, eps)
        y, back_3 = _residual(y, _ffn_block(layer.ffn), layer.norm_3, T.norm_first, eps)
        decoder.append((back_1, back_2, back_3))
    y_out, back_dec_norm = _final_norm(y, T.decoder_norm, eps)
    logits = y_out @ T.w_out + T.b_out                             # (B, n_tgt, V)

    def backward(d_logits: NDArray) -> Seq2SeqParams:
        out = linear_vjp(y_out, T.w_out, d_logits)
        d_y, d_decoder_norm = back_dec_norm(out.dx)
        d_layers = []
        for back_1, back_2, back_3 in reversed(decoder):
            d_y, d_norm_3, d_ffn = back_3(d_y)
            d_y, d_norm_2, d_cross = back_2(d_y)
            d_y, d_norm_1, d_self = back_1(d_y)
            d_layers.append(DecoderLayerParams(d_self, d_cross, d_ffn, d_norm_1, d_norm_2, d_norm_3))
        d_tgt_embedding = embedding_vjp(tgt_in, d_y, T.tgt_embedding.shape[0], scale=scale)
        d_x, d_encoder_norm = back_enc_norm(sum(d_memory_parts))
        d_enc_layers = []
        for back_1, back_2 in reversed(encoder):
            d_x, d_norm_2, d_ffn = back_2(d_x)
            d_x, d_norm_1, d_self = back_1(d_x)
            d_enc_layers.append(EncoderLayerParams(d_self, d_ffn, d_norm_1, d_norm_2))
        d_src_embedding = embedding_vjp(src, d_x, T.src_embedding.shape[0], scale=scale)
        grads = TransformerParams(d_src_embedding, d_tgt_embedding, tuple(reversed(d_enc_layers)),
                                  tuple(reversed(d_layers)), out.dw, out.db, d_encoder_norm, d_decoder_norm,
                                  norm_first=T.norm_first, activation=T.activation, layer_norm_eps=eps)
        return Seq2SeqParams(grads, params.num_heads)

    return logits, backward


def _decoder_forward(params: DecoderOnlyParams, tokens, attention, seen: dict):
    """Logits and the backward mapping d_logits to the gradient tree."""
    _check_params("decoder", params)
    P, h = params, params.num_heads
    tokens = _tokens("tokens", tokens)
    d_model = P.embedding.shape[1]
    n = tokens.shape[-1]
    if P.position is not None and n > P.position.shape[0]:
        raise ValueError(f"the learned position table has max_len={P.position.shape[0]} rows, but tokens has "
                         f"n={n} (shape {tokens.shape})")
    pe = None if P.position is None else P.position[:n]           # None: the sinusoids
    x = embed(tokens, P.embedding, "tokens", pe)                   # (B, n, d)  E[t]·√d + PE or P[:n]
    tape = []
    for i, layer in enumerate(P.layers):
        self_attention = _self_attention_block(layer.attn, h, True, attention, f"layer.{i}", seen)
        x, back_1 = _residual(x, self_attention, layer.norm_1, True)
        back_2 = None
        if layer.ffn is not None:
            x, back_2 = _residual(x, _ffn_block(layer.ffn), layer.norm_2, True)
        tape.append((back_1, back_2))
    x_out, back_norm = _final_norm(x, P.final_norm)
    logits = x_out @ P.w_out + P.b_out                             # (B, n, V)

    def backward(d_logits: NDArray) -> DecoderOnlyParams:
        out = linear_vjp(x_out, P.w_out, d_logits)
        d_x, d_final_norm = back_norm(out.dx)
        d_layers = []
        for back_1, back_2 in reversed(tape):
            d_ffn = d_norm_2 = None
            if back_2 is not None:
                d_x, d_norm_2, d_ffn = back_2(d_x)
            d_x, d_norm_1, d_attn = back_1(d_x)
            d_layers.append(DecoderOnlyLayerParams(d_attn, d_ffn, d_norm_1, d_norm_2))
        d_position = None if P.position is None else position_vjp(d_x, P.position.shape[0])
        d_embedding = embedding_vjp(tokens, d_x, P.embedding.shape[0], scale=np.sqrt(d_model))
        return DecoderOnlyParams(d_embedding, d_position, tuple(reversed(d_layers)), d_final_norm, out.dw, out.db,
                                 P.num_heads)

    return logits, backward


def _named(attention: Callable | None, return_weights: bool) -> Callable | None:
    """The public ``attention(q, k, v, *, causal)`` as the tape's ``attention(name, q, k, v, causal)``."""
    check_bool("return_weights", return_weights)
    if attention is None:
        return None
    if not callable(attention):
        raise TypeError(f"attention must be a callable like scaled_dot_product_attention, got "
                        f"{type(attention).__name__}")
    if return_weights:
        raise ValueError("return_weights=True returns softmax attention's weights; with attention= given there "
                         "are none (ask the substituted mechanism for its own)")
    return lambda name, q, k, v, causal: attention(q, k, v, causal=causal)


# --- public forward and gradients -----------------------------------------------------------------------

def seq2seq_logits(
    params: Seq2SeqParams, src: ArrayLike, tgt_in: ArrayLike, *, attention: Callable | None = None,
    return_weights: bool = False,
) -> NDArray | tuple[NDArray, dict[str, NDArray]]:
    r"""Teacher-forced logits of the encoder–decoder: :func:`refattn.core.transformer.transformer`.

    Parameters
    ----------
    params : Seq2SeqParams
        The model.
    src : (B, n_src) array_like of int
        Source ids.
    tgt_in : (B, n_tgt) array_like of int
        Decoder input ids (the target shifted right, starting with BOS).
    attention : callable, optional
        ``attention(q, k, v, *, causal) -> out`` with q (B, h, n, d_k), used in place of softmax attention
        in every head (encoder self, decoder self with ``causal=True``, cross). Default: softmax attention.
    return_weights : bool, default False
        Also return every attention's weights (softmax attention only).

    Returns
    -------
    logits : (B, n_tgt, tgt_vocab) ndarray
    weights : dict of str to ndarray
        Only if ``return_weights``: ``"encoder.{l}.self"`` (B, h, n_src, n_src), ``"decoder.{l}.self"``
        (B, h, n_tgt, n_tgt) and ``"decoder.{l}.cross"`` (B, h, n_tgt, n_src) for every layer l.

    Examples
    --------
    >>> from refattn.core.transformer import transformer
    >>> p = init_seq2seq(0, 5, 6, d_model=8, num_heads=2, d_ff=16, num_layers=1)
    >>> src, tgt = np.array([[1, 2, 3]]), np.array([[0, 4]])
    >>> bool(np.allclose(seq2seq_logits(p, src, tgt), transformer(src, tgt, p.transformer, num_heads=2)))
    True
    """
    seen = {}
    logits, _ = _seq2seq_forward(params, src, tgt_in, _named(attention, return_weights), seen)
    return (logits, seen) if return_weights else logits


def decoder_logits(
    params: DecoderOnlyParams, tokens: ArrayLike, *, attention: Callable | None = None, return_weights: bool = False,
) -> NDArray | tuple[NDArray, dict[str, NDArray]]:
    r"""Next-token logits of the decoder-only model.

    Parameters
    ----------
    params : DecoderOnlyParams
        The model.
    tokens : (B, n) array_like of int
        Input ids; ``logits[:, t]`` scores the token after ``tokens[:, t]``.
    attention : callable, optional
        ``attention(q, k, v, *, causal) -> out``, called with ``causal=True``, in place of softmax attention.
    return_weights : bool, default False
        Also return every layer's attention weights (softmax attention only).

    Returns
    -------
    logits : (B, n, vocab) ndarray
    weights : dict of str to ndarray
        Only if ``return_weights``: ``"layer.{l}"`` (B, h, n, n) for every layer l.

    Examples
    --------
    >>> p = init_decoder_only(0, 10, 16, 2, 2, max_len=12)
    >>> logits, A = decoder_logits(p, np.array([[1, 2, 3]]), return_weights=True)
    >>> logits.shape, sorted(A), A["layer.1"].shape
    ((1, 3, 10), ['layer.0', 'layer.1'], (1, 2, 3, 3))
    """
    seen = {}
    logits, _ = _decoder_forward(params, tokens, _named(attention, return_weights), seen)
    return (logits, seen) if return_weights else logits


def seq2seq_loss_and_grads(
    params: Seq2SeqParams, src: ArrayLike, tgt_in: ArrayLike, tgt_out: ArrayLike, loss_mask: ArrayLike | None = None,
) -> tuple[float, Seq2SeqParams]:
    r"""Mean cross-entropy of the encoder–decoder's predictions and its gradient for every parameter.

    Parameters
    ----------
    params : Seq2SeqParams
        The model.
    src : (B, n_src) array_like of int
        Source ids.
    tgt_in : (B, n_tgt) array_like of int
        Decoder input ids.
    tgt_out : (B, n_tgt) array_like of int
        The ids to predict (``tgt_in`` shifted left).
    loss_mask : (B, n_tgt) array_like of bool, optional
        Tokens that count; default all (:func:`refattn.training.vjp.cross_entropy`).

    Returns
    -------
    loss : float
    grads : Seq2SeqParams
        ∂loss/∂params, of ``params``' structure (``None`` where a bias or norm is absent).
    """
    logits, backward = _seq2seq_forward(params, src, tgt_in, None, {})
    loss, d_logits = cross_entropy(logits, tgt_out, loss_mask)
    return loss, backward(d_logits)


def decoder_loss_and_grads(
    params: DecoderOnlyParams, tokens: ArrayLike, targets: ArrayLike, loss_mask: ArrayLike | None = None,
) -> tuple[float, DecoderOnlyParams]:
    r"""Mean cross-entropy of the decoder-only model's next-token predictions and its gradient.

    Parameters
    ----------
    params : DecoderOnlyParams
        The model.
    tokens : (B, n) array_like of int
        Input ids.
    targets : (B, n) array_like of int
        The id to predict at each position (``tokens`` shifted left).
    loss_mask : (B, n) array_like of bool, optional
        Positions that count (e.g. the repeated half); default all.

    Returns
    -------
    loss : float
    grads : DecoderOnlyParams
        ∂loss/∂params, of ``params``' structure.
    """
    logits, backward = _decoder_forward(params, tokens, None, {})
    loss, d_logits = cross_entropy(logits, targets, loss_mask)
    return loss, backward(d_logits)


def attention_inputs(kind: str, params, *inputs: ArrayLike) -> list[tuple[str, NDArray, NDArray, NDArray, bool]]:
    r"""Every attention call's per-head inputs in a forward pass of the model.

    Parameters
    ----------
    kind : {"seq2seq", "decoder"}
        The model.
    params : Seq2SeqParams or DecoderOnlyParams
        Its parameters.
    *inputs : array_like of int
        ``(src, tgt_in)`` for "seq2seq", ``(tokens,)`` for "decoder".

    Returns
    -------
    list of (name, q, k, v, causal)
        In call order, named as :func:`seq2seq_logits`'s weights; q (B, h, n, d_k), k (B, h, m, d_k),
        v (B, h, m, d_v); ``scaled_dot_product_attention(q, k, v, causal=causal)`` is what the model
        computed there.

    Examples
    --------
    >>> p = init_decoder_only(0, 10, 16, 2, 2, max_len=12)
    >>> [(name, q.shape, causal) for name, q, k, v, causal in attention_inputs("decoder", p, [[1, 2, 3]])]
    [('layer.0', (1, 2, 3, 8), True), ('layer.1', (1, 2, 3, 8), True)]
    """
    check_choice("kind", kind, KINDS)
    _check_params(kind, params)
    expected = 2 if kind == "seq2seq" else 1
    if len(inputs) != expected:
        raise ValueError(f"the {kind} model takes {expected} token arrays, got {len(inputs)}")
    calls = []

    def recording(name, q, k, v, causal):
        calls.append((name, q, k, v, causal))
        return scaled_dot_product_attention(q, k, v, causal=causal)

    forward = _seq2seq_forward if kind == "seq2seq" else _decoder_forward
    forward(params, *inputs, recording, {})
    return calls
