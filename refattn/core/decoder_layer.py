r"""The Transformer decoder layer (Vaswani et al., 2017, §3.1), with a key/value cache for decoding.

Post-LN, as in the paper ("the output of each sub-layer is LayerNorm(x + Sublayer(x))"):

    y ← LN(y + CausalSelfAttn(y));  y ← LN(y + CrossAttn(y, memory));  y ← LN(y + FFN(y))

Pre-LN (``norm_first=True``, Xiong et al., 2020, arXiv:2002.04745) is y ← y + Sublayer(LN(y)).
``activation``, ``eps`` and ``bias`` are PyTorch's ``nn.TransformerDecoderLayer`` settings, as in
:mod:`refattn.core.encoder_layer`.

Decoding one token at a time, the decoder's self-attention keys and values of earlier positions do
not change (they are causal), so they are kept in a cache and only the new position's are
projected; the new queries are the *last* positions of the key sequence, which is exactly the
bottom-right causal alignment.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.checks import as_float, as_rng, check_bool
from ..mechanism import Mechanism
from ..papers import VASWANI
from .encoder_layer import residual
from .ffn import GATED, FeedForwardParams, feed_forward, init_feed_forward
from .layer_norm import LayerNormParams, init_layer_norm
from .multi_head import (
    MultiHeadParams,
    combine_heads,
    head_shared,
    init_multi_head,
    multi_head_attention,
    project_heads,
)
from .sdpa import scaled_dot_product_attention

__all__ = ["DecoderLayerParams", "DecoderCache", "init_decoder_layer", "decoder_layer", "decoder_layer_step"]


@dataclass(frozen=True)
class DecoderLayerParams:
    """Masked self-attention, cross-attention, feed-forward and three layer norms of a decoder layer."""

    self_attn: MultiHeadParams
    cross_attn: MultiHeadParams
    ffn: FeedForwardParams
    norm_1: LayerNormParams
    norm_2: LayerNormParams
    norm_3: LayerNormParams


@dataclass(frozen=True)
class DecoderCache:
    """What one decoder layer keeps between decoding steps.

    Attributes
    ----------
    k, v : (..., h, t, d_k), (..., h, t, d_v) ndarray
        Self-attention keys and values of the *t* positions decoded so far.
    memory_k, memory_v : (..., h, m, d_k), (..., h, m, d_v) ndarray
        Cross-attention keys and values of the encoder output (projected once).
    """

    k: NDArray
    v: NDArray
    memory_k: NDArray
    memory_v: NDArray


def init_decoder_layer(
    rng, d_model: int, num_heads: int, d_ff: int, *, activation: str = "relu", bias: bool = True,
) -> DecoderLayerParams:
    """Draw a decoder layer (self-attention, cross-attention, then FFN; norms at γ = 1, β = 0).

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw.
    d_model : int
        Model width.
    num_heads : int
        Attention heads.
    d_ff : int
        FFN inner width.
    activation : str, default "relu"
        The activation the layer will run with; "swiglu" and "geglu" also draw the FFN's gate.
    bias : bool, default True
        Biases in the projections, the FFN and the layer norms (PyTorch's ``bias``); False: all None.

    Returns
    -------
    DecoderLayerParams
    """
    rng = as_rng(rng)
    return DecoderLayerParams(
        init_multi_head(rng, d_model, num_heads, bias=bias), init_multi_head(rng, d_model, num_heads, bias=bias),
        init_feed_forward(rng, d_model, d_ff, gated=activation in GATED, bias=bias),
        *(init_layer_norm(d_model, bias=bias) for _ in range(3)),
    )


def decoder_layer(
    y: ArrayLike, memory: ArrayLike, params: DecoderLayerParams, *, num_heads: int,
    self_mask: ArrayLike | None = None, memory_mask: ArrayLike | None = None,
    causal: bool | str = True, norm_first: bool = False, eps: float = 1e-5, activation: str = "relu",
    return_weights: bool = False,
) -> NDArray | tuple[NDArray, tuple[NDArray, NDArray]]:
    r"""One decoder layer: masked self-attention, cross-attention to ``memory``, feed-forward.

    .. math::

        y' = \operatorname{LN}(y + \operatorname{MultiHead}_\text{causal}(y, y, y)), \quad
        y'' = \operatorname{LN}(y' + \operatorname{MultiHead}(y', M, M)), \quad
        \operatorname{out} = \operatorname{LN}(y'' + \operatorname{FFN}(y''))

    Parameters
    ----------
    y : (..., n, d_model) array_like
        Decoder input (the target sequence shifted right, during training).
    memory : (..., m, d_model) array_like
        Encoder output :math:`M`.
    params : DecoderLayerParams
        Layer parameters.
    num_heads : int
        Attention heads.
    self_mask : (..., n, n) array_like of bool or float, optional
        Extra self-attention mask (e.g. target padding), combined with ``causal``.
    memory_mask : (..., n, m) array_like of bool or float, optional
        Cross-attention mask, typically the source padding mask ``(..., 1, m)``.
    causal : {False, True, "top-left", "bottom-right"}, default True
        Self-attention causality ("prevent leftward information flow", §3.2.3).
    norm_first : bool, default False
        Pre-LN instead of the paper's post-LN.
    eps : float, default 1e-5
        Layer-norm epsilon (PyTorch's ``layer_norm_eps``).
    activation : str, default "relu"
        Activation of the feed-forward network (see :func:`~refattn.core.ffn.feed_forward`).
    return_weights : bool, default False
        Also return the self- and cross-attention weights of every head.

    Returns
    -------
    out : (..., n, d_model) ndarray
    weights : tuple of ndarray
        Only if ``return_weights``: self-attention ``(..., h, n, n)`` and cross-attention
        ``(..., h, n, m)`` weights.

    References
    ----------
    .. [1] A. Vaswani et al., "Attention Is All You Need", NeurIPS 2017, arXiv:1706.03762v7, §3.1, §3.2.3.
    .. [2] PyTorch documentation, ``torch.nn.TransformerDecoderLayer`` (norm_first, activation,
       layer_norm_eps, bias).
    """
    y = as_float("y", y, min_ndim=2)
    check_bool("norm_first", norm_first)
    memory = as_float("memory", memory, min_ndim=2)
    p, seen = params, {}

    def self_attention(s: NDArray) -> NDArray:
        out, seen["self"] = multi_head_attention(s, s, p.self_attn, num_heads=num_heads, mask=self_mask,
                                                 causal=causal, return_weights=True)
        return out

    def cross_attention(s: NDArray) -> NDArray:
        out, seen["cross"] = multi_head_attention(s, memory, p.cross_attn, num_heads=num_heads,
                                                  mask=memory_mask, return_weights=True)
        return out

    y = residual(y, self_attention, p.norm_1, norm_first, eps)
    y = residual(y, cross_attention, p.norm_2, norm_first, eps)
    out = residual(y, lambda s: feed_forward(s, p.ffn, activation=activation), p.norm_3, norm_first, eps)
    return (out, (seen["self"], seen["cross"])) if return_weights else out


def decoder_layer_step(
    y_new: ArrayLike, memory: ArrayLike, params: DecoderLayerParams,
    cache: DecoderCache | None = None, *, num_heads: int,
    memory_mask: ArrayLike | None = None, norm_first: bool = False, eps: float = 1e-5,
    activation: str = "relu", return_weights: bool = False,
) -> tuple[NDArray, DecoderCache] | tuple[NDArray, DecoderCache, tuple[NDArray, NDArray]]:
    r"""Advance a causal decoder layer by the new positions ``y_new``, using and extending a cache.

    The self-attention keys/values of earlier positions come from ``cache``; only the new
    positions are projected, and the new queries attend with bottom-right causal alignment (the
    last new query sees every cached and new key). Running the whole target through
    :func:`decoder_layer` gives the same result at every position (the tests check it).

    Parameters
    ----------
    y_new : (..., t, d_model) array_like
        Inputs at the next *t* positions (usually t = 1).
    memory : (..., m, d_model) array_like
        Encoder output; projected once, on the first step (when ``cache`` is None).
    params : DecoderLayerParams
        Layer parameters.
    cache : DecoderCache, optional
        State after the previous positions; ``None`` before the first.
    num_heads : int
        Attention heads.
    memory_mask : (..., t, m) array_like of bool or float, optional
        Cross-attention mask (typically the source padding mask ``(..., 1, m)``).
    norm_first : bool, default False
        Pre-LN instead of the paper's post-LN.
    eps : float, default 1e-5
        Layer-norm epsilon (PyTorch's ``layer_norm_eps``).
    activation : str, default "relu"
        Activation of the feed-forward network (see :func:`~refattn.core.ffn.feed_forward`).
    return_weights : bool, default False
        Also return the new positions' self- and cross-attention weights.

    Returns
    -------
    out : (..., t, d_model) ndarray
    cache : DecoderCache
        Extended by the *t* new positions.
    weights : tuple of ndarray
        Only if ``return_weights``: self-attention ``(..., h, t, t₀ + t)`` over every position so
        far and cross-attention ``(..., h, t, m)`` weights.
    """
    y_new = as_float("y_new", y_new, min_ndim=2)
    check_bool("norm_first", norm_first)
    memory = as_float("memory", memory, min_ndim=2)
    p, h = params, num_heads
    d_model = p.self_attn.d_model
    for name, x in (("y_new", y_new), ("memory", memory)):
        if x.shape[-1] != d_model:
            raise ValueError(f"{name} has d_model={x.shape[-1]} (shape {x.shape}) but params have d_model={d_model}")
    if cache is not None and cache.k.shape[:-3] != y_new.shape[:-2]:
        raise ValueError(
            f"cache holds batch shape {cache.k.shape[:-3]} (cache.k shape {cache.k.shape}) but y_new has "
            f"batch shape {y_new.shape[:-2]} (shape {y_new.shape})"
        )
    if cache is None:
        empty_k = project_heads(y_new[..., :0, :], p.self_attn.w_k, p.self_attn.b_k, h)
        empty_v = project_heads(y_new[..., :0, :], p.self_attn.w_v, p.self_attn.b_v, h)
        cache = DecoderCache(
            empty_k, empty_v,
            project_heads(memory, p.cross_attn.w_k, p.cross_attn.b_k, h),   # (..., h, m, d_k)
            project_heads(memory, p.cross_attn.w_v, p.cross_attn.b_v, h),   # (..., h, m, d_v)
        )
    grown = {}

    def cached_self_attention(s: NDArray) -> NDArray:
        sa = p.self_attn
        K = np.concatenate([cache.k, project_heads(s, sa.w_k, sa.b_k, h)], axis=-2)  # (..., h, t₀+t, d_k)
        V = np.concatenate([cache.v, project_heads(s, sa.w_v, sa.b_v, h)], axis=-2)  # (..., h, t₀+t, d_v)
        grown.update(k=K, v=V)
        Q = project_heads(s, sa.w_q, sa.b_q, h)                                        # (..., h, t, d_k)
        heads, grown["self"] = scaled_dot_product_attention(Q, K, V, causal="bottom-right", return_weights=True)
        return combine_heads(heads, sa.w_o, sa.b_o)

    def cached_cross_attention(s: NDArray) -> NDArray:
        ca = p.cross_attn
        Q = project_heads(s, ca.w_q, ca.b_q, h)                                        # (..., h, t, d_k)
        heads, grown["cross"] = scaled_dot_product_attention(Q, cache.memory_k, cache.memory_v,
                                                             mask=head_shared(memory_mask), return_weights=True)
        return combine_heads(heads, ca.w_o, ca.b_o)

    y = residual(y_new, cached_self_attention, p.norm_1, norm_first, eps)
    y = residual(y, cached_cross_attention, p.norm_2, norm_first, eps)
    y = residual(y, lambda s: feed_forward(s, p.ffn, activation=activation), p.norm_3, norm_first, eps)
    new_cache = DecoderCache(grown["k"], grown["v"], cache.memory_k, cache.memory_v)
    return (y, new_cache, (grown["self"], grown["cross"])) if return_weights else (y, new_cache)


RECORD = Mechanism(
    id="decoder_layer", title="Transformer decoder layer (with key/value cache)", family="vanilla",
    section="2.1 (Vaswani §3.1)", paper=VASWANI,
    equation=r"\operatorname{LN}\circ(\text{causal self-attn},\ \text{cross-attn},\ \operatorname{FFN})",
    time="O(n²·d + n·m·d + n·d·d_ff)", memory="O(h·n·(n+m))", kind="component", function=decoder_layer,
    causal=True, figure="refattn.figures.vanilla:decoder_layer", exact_options=None,
    exact_limit="a component (no apply)",
)
