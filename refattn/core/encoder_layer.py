r"""The Transformer encoder layer (Vaswani et al., 2017, §3.1), post-LN as in the paper, or pre-LN.

Post-LN ("the output of each sub-layer is LayerNorm(x + Sublayer(x))"):

    x ← LN(x + SelfAttn(x));  x ← LN(x + FFN(x))

Pre-LN (``norm_first=True``, Xiong et al., 2020, arXiv:2002.04745) is x ← x + Sublayer(LN(x)).

The settings of PyTorch's ``nn.TransformerEncoderLayer``: ``norm_first``, ``activation`` of the
feed-forward (relu, gelu, and the other activations of :func:`~refattn.core.ffn.feed_forward`), the
layer-norm ε (``eps``, PyTorch's ``layer_norm_eps``) and ``bias`` (``init_encoder_layer(bias=False)``:
projections and layer norms without biases). Dropout is not modelled (PyTorch in eval mode).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from numpy.typing import ArrayLike, NDArray

from ..common.checks import as_float, as_rng, check_bool
from ..mechanism import Mechanism
from ..papers import VASWANI
from .ffn import GATED, FeedForwardParams, feed_forward, init_feed_forward
from .layer_norm import LayerNormParams, init_layer_norm, layer_norm
from .multi_head import MultiHeadParams, init_multi_head, multi_head_attention

__all__ = ["EncoderLayerParams", "init_encoder_layer", "encoder_layer"]


@dataclass(frozen=True)
class EncoderLayerParams:
    """Self-attention, feed-forward and the two layer norms of one encoder layer."""

    self_attn: MultiHeadParams
    ffn: FeedForwardParams
    norm_1: LayerNormParams
    norm_2: LayerNormParams


def init_encoder_layer(
    rng, d_model: int, num_heads: int, d_ff: int, *, activation: str = "relu", bias: bool = True,
) -> EncoderLayerParams:
    """Draw an encoder layer (self-attention, then FFN; norms at γ = 1, β = 0).

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
    EncoderLayerParams
    """
    rng = as_rng(rng)
    return EncoderLayerParams(
        init_multi_head(rng, d_model, num_heads, bias=bias),
        init_feed_forward(rng, d_model, d_ff, gated=activation in GATED, bias=bias),
        init_layer_norm(d_model, bias=bias), init_layer_norm(d_model, bias=bias),
    )


def encoder_layer(
    x: ArrayLike, params: EncoderLayerParams, *, num_heads: int,
    mask: ArrayLike | None = None, norm_first: bool = False, eps: float = 1e-5,
    activation: str = "relu", return_weights: bool = False,
) -> NDArray | tuple[NDArray, NDArray]:
    r"""One encoder layer: self-attention and a feed-forward network, each with residual and norm.

    .. math::

        x' = \operatorname{LN}(x + \operatorname{MultiHead}(x, x, x)), \qquad
        \operatorname{out} = \operatorname{LN}(x' + \operatorname{FFN}(x'))

    Parameters
    ----------
    x : (..., n, d_model) array_like
        Input sequence.
    params : EncoderLayerParams
        Layer parameters.
    num_heads : int
        Attention heads.
    mask : (..., n, n) array_like of bool or float, optional
        Self-attention mask (typically a key padding mask), ``True`` = may attend.
    norm_first : bool, default False
        Pre-LN, :math:`x + \operatorname{Sublayer}(\operatorname{LN}(x))`, instead of the paper's post-LN.
    eps : float, default 1e-5
        Layer-norm epsilon (PyTorch's ``layer_norm_eps``).
    activation : str, default "relu"
        Activation of the feed-forward network (see :func:`~refattn.core.ffn.feed_forward`).
    return_weights : bool, default False
        Also return the self-attention weights of every head.

    Returns
    -------
    out : (..., n, d_model) ndarray
    weights : (..., h, n, n) ndarray
        Only if ``return_weights``.

    References
    ----------
    .. [1] A. Vaswani et al., "Attention Is All You Need", NeurIPS 2017, arXiv:1706.03762v7, §3.1.
    .. [2] PyTorch documentation, ``torch.nn.TransformerEncoderLayer`` (norm_first, activation,
       layer_norm_eps, bias).
    """
    x = as_float("x", x, min_ndim=2)
    check_bool("norm_first", norm_first)
    p, seen = params, {}

    def self_attention(s: NDArray) -> NDArray:
        out, seen["self"] = multi_head_attention(s, s, p.self_attn, num_heads=num_heads, mask=mask,
                                                 return_weights=True)
        return out

    x = residual(x, self_attention, p.norm_1, norm_first, eps)
    out = residual(x, lambda s: feed_forward(s, p.ffn, activation=activation), p.norm_2, norm_first, eps)
    return (out, seen["self"]) if return_weights else out


def residual(
    x: NDArray, sublayer: Callable[[NDArray], NDArray], norm: LayerNormParams,
    norm_first: bool, eps: float,
) -> NDArray:
    """Post-LN ``LN(x + sublayer(x))`` (the paper) or pre-LN ``x + sublayer(LN(x))``."""
    if norm_first:
        return x + sublayer(layer_norm(x, norm.gamma, norm.beta, eps))
    return layer_norm(x + sublayer(x), norm.gamma, norm.beta, eps)


RECORD = Mechanism(
    id="encoder_layer", title="Transformer encoder layer", family="vanilla", section="2.1 (Vaswani §3.1)",
    paper=VASWANI, equation=r"x' = \operatorname{LN}(x + \operatorname{MultiHead}(x,x,x)),\ "
    r"\operatorname{LN}(x' + \operatorname{FFN}(x'))", time="O(n²·d + n·d·d_ff)", memory="O(h·n²)",
    kind="component", function=encoder_layer, causal=False, figure="refattn.figures.vanilla:encoder_layer",
    exact_options=None, exact_limit="a component (no apply)",
)
