r"""The encoder–decoder Transformer (Vaswani et al., 2017, §3): forward pass and greedy decoding.

    encode:  x = E_src[src]·√d_model + PE;  x ← EncoderLayer_l(x), l = 1 … N
    decode:  y = E_tgt[tgt]·√d_model + PE;  y ← DecoderLayer_l(y, memory);  logits = y W_out + b_out

The stack settings are PyTorch's ``nn.Transformer``'s, held by :class:`TransformerParams`: ``norm_first``
(post-LN as the paper, or pre-LN), final encoder and decoder norms (present or not, in either case:
``nn.Transformer`` has both in post-LN and in pre-LN; the paper has none), the feed-forward ``activation``,
``layer_norm_eps`` and biases (``init_transformer(bias=False)``: no bias in any projection or layer norm).

Greedy decoding feeds the arg-max token back one step at a time, keeping each decoder layer's
self-attention keys/values in a cache (:class:`~refattn.core.decoder_layer.DecoderCache`), so
step *t* costs O(t) attention instead of O(t²). Teacher-forcing the decoded sequence through
:func:`decode` gives the same logits at every step (the tests check it).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.checks import as_rng, check_bool, check_choice, check_non_negative
from ..common.init import glorot
from ..common.ints import check_positive_int
from ..mechanism import Mechanism
from ..papers import VASWANI
from .decoder_layer import DecoderLayerParams, decoder_layer, decoder_layer_step, init_decoder_layer
from .encoder_layer import EncoderLayerParams, encoder_layer, init_encoder_layer
from .ffn import ACTIVATIONS
from .layer_norm import LayerNormParams, init_layer_norm, layer_norm
from .padding_mask import padding_mask
from .sinusoidal_pe import sinusoidal_positional_encoding

__all__ = ["TransformerParams", "init_transformer", "encode", "decode", "transformer", "greedy_decode"]


@dataclass(frozen=True)
class TransformerParams:
    """Parameters of an encoder–decoder Transformer.

    Attributes
    ----------
    src_embedding : (src_vocab, d_model) ndarray
    tgt_embedding : (tgt_vocab, d_model) ndarray
    encoder : tuple of EncoderLayerParams
    decoder : tuple of DecoderLayerParams
    w_out : (d_model, tgt_vocab) ndarray
    b_out : (tgt_vocab,) ndarray or None
    encoder_norm, decoder_norm : LayerNormParams or None
        Final norms after the encoder and decoder stacks; ``None``: no final norm (the paper).
        Independent of ``norm_first``.
    norm_first : bool, default False
        Pre-LN layers, x + Sublayer(LN(x)), instead of the paper's post-LN, LN(x + Sublayer(x)).
    activation : str, default "relu"
        Activation of every feed-forward network (see :func:`~refattn.core.ffn.feed_forward`).
    layer_norm_eps : float, default 1e-5
        ε of every layer norm, the final norms included.
    """

    src_embedding: NDArray
    tgt_embedding: NDArray
    encoder: tuple[EncoderLayerParams, ...]
    decoder: tuple[DecoderLayerParams, ...]
    w_out: NDArray
    b_out: NDArray | None
    encoder_norm: LayerNormParams | None = None
    decoder_norm: LayerNormParams | None = None
    norm_first: bool = False
    activation: str = "relu"
    layer_norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        check_bool("norm_first", self.norm_first)
        check_choice("activation", self.activation, ACTIVATIONS)
        check_non_negative("layer_norm_eps", self.layer_norm_eps)

    @property
    def d_model(self) -> int:
        """Model width."""
        return self.src_embedding.shape[1]


def init_transformer(
    rng, src_vocab: int, tgt_vocab: int, *, d_model: int = 512, num_heads: int = 8,
    d_ff: int = 2048, num_layers: int = 6, norm_first: bool = False, final_norms: bool | None = None,
    activation: str = "relu", layer_norm_eps: float = 1e-5, bias: bool = True,
) -> TransformerParams:
    """Draw a Transformer (defaults: the paper's base model, §3 and Table 3).

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw (embeddings N(0, 1/d_model), then encoder layers, decoder layers,
        output projection).
    src_vocab, tgt_vocab : int
        Vocabulary sizes.
    d_model : int, default 512
        Model width.
    num_heads : int, default 8
        Attention heads.
    d_ff : int, default 2048
        FFN inner width.
    num_layers : int, default 6
        *N*, layers in each of the encoder and decoder stacks.
    norm_first : bool, default False
        Pre-LN layers (Xiong et al., 2020) instead of the paper's post-LN.
    final_norms : bool, optional
        A final layer norm after the encoder stack and one after the decoder stack. Default
        ``norm_first`` (a pre-LN stack needs them; the paper's post-LN has none); PyTorch's
        ``nn.Transformer`` has them in both cases: ``final_norms=True``.
    activation : str, default "relu"
        Activation of the feed-forward networks ("relu", "gelu", or another of
        :func:`~refattn.core.ffn.feed_forward`'s; "swiglu" and "geglu" draw their gates).
    layer_norm_eps : float, default 1e-5
        ε of every layer norm (PyTorch's ``layer_norm_eps``).
    bias : bool, default True
        Biases in every projection (attention, FFN, output) and layer norm; False: all None
        (PyTorch's ``bias=False``). The draws are the same either way (biases start at 0).

    Returns
    -------
    TransformerParams

    Notes
    -----
    The paper ties the two embeddings and the output projection (§3.4); they are separate here
    so that source and target vocabularies may differ.

    Examples
    --------
    >>> p = init_transformer(0, 5, 5, d_model=8, num_heads=2, d_ff=16, num_layers=1, final_norms=True,
    ...                      activation="gelu", bias=False)
    >>> p.norm_first, p.encoder_norm.beta, p.activation, p.b_out
    (False, None, 'gelu', None)
    """
    rng = as_rng(rng)
    for name, value in (("src_vocab", src_vocab), ("tgt_vocab", tgt_vocab), ("num_layers", num_layers),
                        ("d_model", d_model), ("num_heads", num_heads), ("d_ff", d_ff)):
        check_positive_int(name, value)
    check_bool("norm_first", norm_first)
    final_norms = norm_first if final_norms is None else check_bool("final_norms", final_norms)
    check_choice("activation", activation, ACTIVATIONS)
    check_bool("bias", bias)
    src_embedding = rng.normal(0.0, d_model ** -0.5, size=(src_vocab, d_model))
    tgt_embedding = rng.normal(0.0, d_model ** -0.5, size=(tgt_vocab, d_model))
    layer = {"activation": activation, "bias": bias}
    encoder = tuple(init_encoder_layer(rng, d_model, num_heads, d_ff, **layer) for _ in range(num_layers))
    decoder = tuple(init_decoder_layer(rng, d_model, num_heads, d_ff, **layer) for _ in range(num_layers))
    final = (init_layer_norm(d_model, bias=bias), init_layer_norm(d_model, bias=bias)) if final_norms else (None, None)
    return TransformerParams(src_embedding, tgt_embedding, encoder, decoder, glorot(rng, d_model, tgt_vocab),
                             np.zeros(tgt_vocab) if bias else None, *final, norm_first=norm_first,
                             activation=activation, layer_norm_eps=layer_norm_eps)


def encode(
    src: ArrayLike, params: TransformerParams, *, num_heads: int, src_lengths: ArrayLike | None = None,
) -> NDArray:
    r"""Run the encoder stack on source token ids.

    Parameters
    ----------
    src : (..., n_src) array_like of int
        Source token ids.
    params : TransformerParams
        Model parameters.
    num_heads : int
        Attention heads.
    src_lengths : (...) array_like of int, optional
        Real lengths of padded source sequences; padding keys are masked out.

    Returns
    -------
    memory : (..., n_src, d_model) ndarray

    Notes
    -----
    Every layer runs with ``params.norm_first``, ``params.activation`` and ``params.layer_norm_eps``
    (as do :func:`decode` and :func:`greedy_decode`); ``params.encoder_norm``, when present, normalises
    the result, and ``params.decoder_norm`` the decoder's output before the projection.
    """
    x = embed(src, params.src_embedding, "src")                    # (..., n_src, d_model)
    mask = _source_mask(src_lengths, x.shape[-2])
    for layer in params.encoder:
        x = encoder_layer(x, layer, num_heads=num_heads, mask=mask, **_layer_settings(params))
    return _final_norm(x, params.encoder_norm, params)


def decode(
    tgt: ArrayLike, memory: ArrayLike, params: TransformerParams, *, num_heads: int,
    src_lengths: ArrayLike | None = None,
) -> NDArray:
    r"""Run the decoder stack on target token ids with teacher forcing; return next-token logits.

    Parameters
    ----------
    tgt : (..., n_tgt) array_like of int
        Decoder input ids (the target shifted right, starting with BOS).
    memory : (..., n_src, d_model) array_like
        Encoder output.
    params : TransformerParams
        Model parameters.
    num_heads : int
        Attention heads.
    src_lengths : (...) array_like of int, optional
        Real source lengths (masks padding in cross-attention).

    Returns
    -------
    logits : (..., n_tgt, tgt_vocab) ndarray
        ``logits[..., t, :]`` scores the token following ``tgt[..., t]``.
    """
    y = embed(tgt, params.tgt_embedding, "tgt")                    # (..., n_tgt, d_model)
    memory_mask = _source_mask(src_lengths, np.shape(memory)[-2])
    for layer in params.decoder:
        y = decoder_layer(y, memory, layer, num_heads=num_heads, memory_mask=memory_mask, **_layer_settings(params))
    return _logits(y, params)


def transformer(
    src: ArrayLike, tgt: ArrayLike, params: TransformerParams, *, num_heads: int,
    src_lengths: ArrayLike | None = None,
) -> NDArray:
    r"""Teacher-forced forward pass: ``decode(tgt, encode(src))``.

    Parameters
    ----------
    src : (..., n_src) array_like of int
        Source token ids.
    tgt : (..., n_tgt) array_like of int
        Decoder input ids.
    params : TransformerParams
        Model parameters.
    num_heads : int
        Attention heads.
    src_lengths : (...) array_like of int, optional
        Real source lengths.

    Returns
    -------
    logits : (..., n_tgt, tgt_vocab) ndarray

    Examples
    --------
    >>> params = init_transformer(0, 11, 13, d_model=8, num_heads=2, d_ff=16, num_layers=2)
    >>> transformer([[1, 2, 3]], [[0, 5]], params, num_heads=2).shape
    (1, 2, 13)
    """
    memory = encode(src, params, num_heads=num_heads, src_lengths=src_lengths)
    return decode(tgt, memory, params, num_heads=num_heads, src_lengths=src_lengths)


def greedy_decode(
    src: ArrayLike, params: TransformerParams, *, num_heads: int, bos: int, max_len: int,
    eos: int | None = None, src_lengths: ArrayLike | None = None, return_weights: bool = False,
) -> tuple[NDArray, NDArray] | tuple[NDArray, NDArray, NDArray]:
    r"""Greedy decoding, one token per step, with a key/value cache per decoder layer.

    Parameters
    ----------
    src : (..., n_src) array_like of int
        Source token ids.
    params : TransformerParams
        Model parameters.
    num_heads : int
        Attention heads.
    bos : int
        Start token fed at step 0.
    max_len : int
        Number of tokens to generate.
    eos : int, optional
        End token. Once a sequence has produced it, its later tokens are ``eos`` too, and decoding
        stops early when every sequence has ended.
    src_lengths : (...) array_like of int, optional
        Real source lengths.
    return_weights : bool, default False
        Also return every decoder layer's cross-attention weights at every step.

    Returns
    -------
    tokens : (..., 1 + T) ndarray of int
        ``bos`` followed by the *T* <= ``max_len`` generated tokens.
    logits : (..., T, tgt_vocab) ndarray
        The logits each step chose from; equal to
        ``decode(tokens[..., :-1], encode(src))`` (teacher forcing on the result).
    cross_weights : (num_layers, ..., h, T, m) ndarray
        Only if ``return_weights``: row *t* is what step *t* attended to in the source.
    """
    check_positive_int("max_len", max_len)
    vocab = params.tgt_embedding.shape[0]
    for name, token in (("bos", bos), ("eos", eos)):
        if token is not None and (isinstance(token, bool) or not isinstance(token, (int, np.integer))
                                  or not 0 <= token < vocab):
            raise ValueError(f"{name} must be a token id in [0, {vocab}), got {token!r}")
    memory = encode(src, params, num_heads=num_heads, src_lengths=src_lengths)
    memory_mask = _source_mask(src_lengths, memory.shape[-2])
    tokens = np.full((*memory.shape[:-2], 1), bos, dtype=np.int64)
    pe = sinusoidal_positional_encoding(max_len, params.d_model)
    caches = [None] * len(params.decoder)
    step_logits, step_cross = [], []
    for t in range(max_len):
        y = embed(tokens[..., -1:], params.tgt_embedding, "tokens", pe[t:t + 1])  # (..., 1, d_model)
        cross = []
        for i, layer in enumerate(params.decoder):
            y, caches[i], (_, A_cross) = decoder_layer_step(
                y, memory, layer, caches[i], num_heads=num_heads, memory_mask=memory_mask,
                return_weights=True, **_layer_settings(params))
            cross.append(A_cross)                                  # (..., h, 1, m)
        step_cross.append(np.stack(cross))                         # (layers, ..., h, 1, m)
        logits = _logits(y, params)[..., 0, :]                     # (..., tgt_vocab)
        step_logits.append(logits)
        nxt = np.argmax(logits, axis=-1)
        if eos is not None:
            nxt = np.where(np.any(tokens[..., 1:] == eos, axis=-1), eos, nxt)   # ended: pad with eos
        tokens = np.concatenate([tokens, nxt[..., None]], axis=-1)
        if eos is not None and np.any(tokens[..., 1:] == eos, axis=-1).all():
            break
    logits = np.stack(step_logits, axis=-2)                       # (..., T, tgt_vocab)
    if return_weights:
        return tokens, logits, np.concatenate(step_cross, axis=-2)  # (layers, ..., h, T, m)
    return tokens, logits


def embed(tokens: ArrayLike, table: NDArray, name: str, pe: NDArray | None = None) -> NDArray:
    r"""Token embedding scaled by √d_model plus sinusoidal positions (§3.4, §3.5)."""
    tokens = np.asarray(tokens)
    if tokens.dtype.kind not in "iu" or tokens.ndim < 1:
        raise TypeError(
            f"{name} must be an integer array of token ids, got dtype {tokens.dtype} with shape {tokens.shape}"
        )
    vocab, d_model = table.shape
    if tokens.size and (tokens.min() < 0 or tokens.max() >= vocab):
        raise ValueError(f"{name} holds ids in [{tokens.min()}, {tokens.max()}] but the vocabulary has {vocab}")
    if pe is None:
        pe = sinusoidal_positional_encoding(tokens.shape[-1], d_model)
    return table[tokens] * np.sqrt(d_model) + pe                   # (..., n, d_model)


def _layer_settings(params: TransformerParams) -> dict:
    """The keyword settings every encoder and decoder layer of the stack runs with."""
    return {"norm_first": params.norm_first, "eps": params.layer_norm_eps, "activation": params.activation}


def _final_norm(x: NDArray, norm: LayerNormParams | None, params: TransformerParams) -> NDArray:
    return x if norm is None else layer_norm(x, norm.gamma, norm.beta, params.layer_norm_eps)


def _logits(y: NDArray, params: TransformerParams) -> NDArray:
    y = _final_norm(y, params.decoder_norm, params) @ params.w_out  # (..., n, tgt_vocab)
    return y if params.b_out is None else y + params.b_out


def _source_mask(src_lengths: ArrayLike | None, n_src: int) -> NDArray | None:
    return None if src_lengths is None else padding_mask(src_lengths, n_src)


RECORD = Mechanism(
    id="transformer", title="Encoder–decoder Transformer with greedy decoding", family="vanilla",
    section="2 (Vaswani §3)", paper=VASWANI,
    equation=r"\operatorname{softmax}(\operatorname{Decoder}(E[y]\sqrt{d} + PE,\ "
    r"\operatorname{Encoder}(E[x]\sqrt{d} + PE))\,W_{out})",
    time="O(N·(n²+m²+nm)·d)", memory="O(h·(n²+m²+nm))", kind="component", function=transformer, causal=True,
    figure="refattn.figures.vanilla:transformer", exact_options=None, exact_limit="a component (no apply)",
)
