r"""An encoder stack whose attention takes a prior from the layer below (survey §4.5.2), built on the core layers.

    for l = 1 … L:
        Q, K, V = x W_q⁽ˡ⁾, x W_k⁽ˡ⁾, x W_v⁽ˡ⁾  split into h heads            (project_heads)
        Â⁽ˡ⁾ = w1⁽ˡ⁾·QKᵀ/√d_k + w2⁽ˡ⁾·g⁽ˡ⁾(Â⁽ˡ⁻¹⁾)  per head;  Â⁽¹⁾ = QKᵀ/√d_k
        x ← LN(x + Concat_h(softmax(Â⁽ˡ⁾) V) Wᴼ);  x ← LN(x + FFN(x))        (post-LN; pre-LN optional)

Each layer is the Transformer encoder layer (:func:`~refattn.encoder_layer`, the same parameters),
except that its attention adds the prior w2·g(Â⁽ˡ⁻¹⁾) passed up from the layer below: what passes
up is each head's pre-softmax map Â⁽ˡ⁾ (RealFormer's raw residual scores, Predictive Attention's
combined logits), and a Lazyformer layer that reuses it reads exactly the weights of the layer that
computed it. With w2 = 0 in every layer it is the plain stack of encoder layers.

:func:`prior_encoder` returns every layer's input, scores, prior, combined map and weights, so a
notebook can step through the stack layer by layer.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from numpy.typing import ArrayLike, NDArray

from ..common.checks import as_float, causal_alignment, check_bool
from ..common.ints import check_positive_int
from ..core.encoder_layer import EncoderLayerParams, residual
from ..core.ffn import feed_forward
from ..core.multi_head import combine_heads, head_shared, project_heads
from .lower_layer import LayerResult, LayerRule, attention_with_prior_from_below

__all__ = ["EncoderTrace", "prior_encoder"]


@dataclass(frozen=True)
class EncoderTrace:
    """Every layer of :func:`prior_encoder` (lists indexed by layer, bottom first).

    Attributes
    ----------
    output : (..., n, d_model) ndarray
        The top layer's output.
    inputs : list of (..., n, d_model) ndarray
        Each layer's input (``inputs[0]`` is x).
    scores : list of (..., h, n, n) ndarray or None
        :math:`S^{(l)} = QK^\\top/\\sqrt{d_k}` per head (None where ``w1 = 0``: the layer reuses the map below).
    priors : list of (..., h, n, n) ndarray or None
        :math:`w_2 g(\\hat A^{(l-1)})` per head (None at the bottom and where ``w2 = 0``).
    combined : list of (..., h, n, n) ndarray
        :math:`\\hat A^{(l)}`, what each layer's softmax reads and passes up.
    weights : list of (..., h, n, n) ndarray
        Each layer's attention weights.
    """

    output: NDArray
    inputs: list
    scores: list
    priors: list
    combined: list
    weights: list


def prior_encoder(
    x: ArrayLike, layers: Sequence[EncoderLayerParams], *, num_heads: int, rules: Sequence[LayerRule],
    mask: ArrayLike | None = None, causal: bool | str = False, norm_first: bool = False, eps: float = 1e-5,
) -> EncoderTrace:
    r"""A stack of encoder layers in which each layer's attention adds a prior from the layer below.

    .. math::

        \hat A^{(l)}_i = w_1^{(l)} \frac{Q_i^{(l)} K_i^{(l)\top}}{\sqrt{d_k}}
        + w_2^{(l)} g^{(l)}\big(\hat A^{(l-1)}\big)_i, \qquad
        x^{(l)} = \operatorname{EncoderLayer}^{(l)}\big(x^{(l-1)};\ \operatorname{softmax}(\hat A^{(l)}_i)\big)

    Parameters
    ----------
    x : (..., n, d_model) array_like
        Input sequence.
    layers : sequence of EncoderLayerParams
        The L layers' parameters (:func:`~refattn.init_encoder_layer`), bottom first. A layer
        that reuses the map below (``w1 = 0``) does not read its ``w_q``, ``w_k``.
    num_heads : int
        Attention heads *h* (every layer).
    rules : sequence of LayerRule
        The rule of layers 2 … L (L − 1 of them): :func:`~refattn.prior.realformer_rules`,
        :func:`~refattn.prior.lazy_rules`, :func:`~refattn.prior.predictive_rules`, or any
        :class:`~refattn.prior.LayerRule`. Its ``g`` receives the whole (..., h, n, n) map, so a
        convolution can take the heads as its channels.
    mask : (..., n, n) array_like of bool, optional
        ``True`` = may attend (a key padding mask), shared by every head and layer, by selection.
    causal : {False, True, "top-left", "bottom-right"}, default False
        A causal mask in every layer (a decoder-only stack), by selection: a masked pair's entry
        of the map never reaches its row, in the layer or above.
    norm_first : bool, default False
        Pre-LN instead of the paper's post-LN, as :func:`~refattn.encoder_layer`.
    eps : float, default 1e-5
        Layer-norm epsilon.

    Returns
    -------
    EncoderTrace
        The output and every layer's input, scores, prior, combined map and weights.

    Notes
    -----
    What passes up follows each paper. RealFormer (He et al., 2021): the raw pre-softmax scores,
    residual included ("Prev"). Predictive Attention (Wang et al., 2021): the combined logits,
    before the softmax, which the next layer convolves. Lazyformer (Ying et al., 2021): the
    attention distribution of the block's first layer, reused; passing up its pre-softmax map and
    taking the softmax again gives the same weights. Each layer keeps its own values, output
    projection, feed-forward network and norms.

    Examples
    --------
    >>> import numpy as np
    >>> from refattn import init_encoder_layer
    >>> from refattn.prior import realformer_rules
    >>> rng = np.random.default_rng(0)
    >>> params = [init_encoder_layer(rng, 8, 2, 16) for _ in range(3)]
    >>> x = rng.standard_normal((5, 8))
    >>> trace = prior_encoder(x, params, num_heads=2, rules=realformer_rules(3))
    >>> trace.output.shape, trace.combined[2].shape
    ((5, 8), (2, 5, 5))
    >>> bool(np.allclose(trace.combined[2], sum(trace.scores)))   # RealFormer: the scores summed up the stack
    True
    """
    x = as_float("x", x, min_ndim=2)
    check_positive_int("num_heads", num_heads)
    norm_first = check_bool("norm_first", norm_first)
    causal_alignment(causal)
    layers, rules = tuple(layers), tuple(rules)
    if not layers or not all(isinstance(p, EncoderLayerParams) for p in layers):
        raise TypeError("layers must be a non-empty sequence of EncoderLayerParams (init_encoder_layer)")
    if len(rules) != len(layers) - 1 or not all(isinstance(r, LayerRule) for r in rules):
        raise ValueError(f"rules must hold one LayerRule per layer above the bottom: {len(layers) - 1} for "
                         f"{len(layers)} layers, got {len(rules)}")
    mask = head_shared(mask)
    seen: list[LayerResult] = []
    inputs = []
    for l, p in enumerate(layers):
        inputs.append(x)
        below, rule = (None, None) if l == 0 else (seen[-1].combined, rules[l - 1])

        def self_attention(s: NDArray, p=p, below=below, rule=rule) -> NDArray:
            a = p.self_attn
            Q = project_heads(s, a.w_q, a.b_q, num_heads)           # (..., h, n, d_k)
            K = project_heads(s, a.w_k, a.b_k, num_heads)           # (..., h, n, d_k)
            V = project_heads(s, a.w_v, a.b_v, num_heads)           # (..., h, n, d_v)
            seen.append(attention_with_prior_from_below(Q, K, V, below, rule=rule, mask=mask, causal=causal,
                                                        return_weights=True))   # softmax(w1·S + w2·g(Â⁽ˡ⁻¹⁾)) V
            return combine_heads(seen[-1].output, a.w_o, a.b_o)   # (..., n, d_model)  Concat(·) Wᴼ

        x = residual(x, self_attention, p.norm_1, norm_first, eps)
        x = residual(x, lambda s, p=p: feed_forward(s, p.ffn), p.norm_2, norm_first, eps)
    return EncoderTrace(x, inputs, [r.scores for r in seen], [r.prior for r in seen], [r.combined for r in seen],
                        [r.weights for r in seen])
