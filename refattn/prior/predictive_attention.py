r"""Predictive Attention: the map below, convolved, predicts this layer's (Wang et al., 2021; survey §4.5.2).

    Â⁽ˡ⁾ = α·S⁽ˡ⁾ + (1 − α)·g(Â⁽ˡ⁻¹⁾)            S⁽ˡ⁾ = Q⁽ˡ⁾K⁽ˡ⁾ᵀ/√d_k;  Â⁽¹⁾ = S⁽¹⁾
    g(Â)_o = ReLU(b_o + Σ_c K_oc ⋆ Â_c)          a 3 × 3 convolution over (query, key), heads as channels,
                                                 zero padding keeping n × m ("same")
    A⁽ˡ⁾ = softmax(Â⁽ˡ⁾),  out = A⁽ˡ⁾ V⁽ˡ⁾          Â⁽ˡ⁾ (the combined logits) passes up

The survey's rule Â⁽ˡ⁾ = w1·S⁽ˡ⁾ + w2·g(Â⁽ˡ⁻¹⁾) with w1 = α, w2 = 1 − α and g a 2-D convolution
(:func:`~refattn.prior.prior_from_below`): the attention maps of the h heads are an h-channel image,
and each layer has its own convolution. What passes up are the logits (the pre-softmax map, the
official code's ``prev_atts.append(logits)``), not the weights.

Where each choice comes from (the survey [Lin et al., §4.5.2] states the rule; the rest):

- α on this layer's scores and 1 − α on the convolved map: the survey's statement of the paper
  (Predictive Attention Transformer, ICLR 2021 submission, openreview YQVjbJPnPc9).
- 3 × 3 kernel, zero "same" padding, heads as input and output channels, a bias, a ReLU after the
  convolution: the official code (pkuyym/EvolvingAttention: ``tf.layers.conv2d(att_matrix, Nh, 3,
  padding='same')`` then ``tf.nn.relu``; the PyTorch version ``nn.Conv2d(Nh, Nh, 3, padding=1)`` then
  ``LeakyReLU``). ``activation="none"`` drops the ReLU (a plain convolutional layer, as the survey
  words it).
- The initialisation U(±1/√(9h)) of kernel and bias: PyTorch's ``nn.Conv2d`` default, which the
  official PyTorch code keeps.
- α = 0.5: the official code's example command (``--alpha 0.5``).
- The official code, released with the published version ("Evolving Attention with Residual
  Convolutions", arXiv:2102.12895, ICML 2021), first mixes the map below into this layer's logits,
  M = (1 − β)·S⁽ˡ⁾ + β·Â⁽ˡ⁻¹⁾, then convolves that mix: Â⁽ˡ⁾ = α·ReLU(conv(M)) + (1 − α)·M, with α on
  the convolved branch. That is not an instance of the rule (the convolution reads S⁽ˡ⁾ too);
  ``form="evolving"`` computes it, with its ``beta`` (default 0.5, the TensorFlow code's default
  of ``asconv2d_fixed_padding``).

No causal form: the "same" convolution reads entry (i + 1, j) of the map below, the next query's
scores, and (i, j + 1), a later key's, into entry (i, j).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.checks import (
    as_float,
    as_rng,
    check_bool,
    check_choice,
    check_scale,
    checked_qkv,
    default_scale,
)
from ..common.ints import check_positive_int
from ..common.products import scores
from ..core.sdpa import scaled_dot_product_attention
from ..draws import given_or_drawn, optional_rng
from ..mechanism import Mechanism
from ..sparse.pattern import no_causal_form
from .lower_layer import (
    LayerRule,
    StackProjections,
    attention_stack,
    attention_with_prior_from_below,
    stack_projections,
)

__all__ = ["AttentionConv", "attention_convolution", "evolving_logits", "init_attention_conv", "predictive_attention",
           "predictive_attention_stack", "predictive_rules"]

PREDICTIVE = ('Y. Wang, Y. Yang, J. Bai, M. Zhang, J. Bai, J. Yu, C. Zhang, G. Huang, Y. Tong, 2021, "Evolving '
              'Attention with Residual Convolutions" (first as "Predictive Attention Transformer"), arXiv:2102.12895')
ACTIVATIONS = ("relu", "none")
FORMS = ("rule", "evolving")
NO_CAUSAL = ("its 'same' 3 × 3 convolution of the map below reads the next query's scores (i + 1, j) and a later "
             "key's (i, j + 1) into entry (i, j)")
DEFAULT_LAYERS, DEFAULT_ALPHA, DEFAULT_BETA = 3, 0.5, 0.5


@dataclass(frozen=True)
class AttentionConv:
    """One layer's convolution of the attention maps: h heads in, h heads out.

    Attributes
    ----------
    kernel : (h, h, k_h, k_w) ndarray
        ``kernel[o, c]`` is the filter from head c's map to head o's (odd sizes, so "same"
        padding is symmetric).
    bias : (h,) ndarray
        One per output head.
    """

    kernel: NDArray
    bias: NDArray

    def __post_init__(self) -> None:
        kernel, bias = np.asarray(self.kernel), np.asarray(self.bias)
        if kernel.ndim != 4 or kernel.shape[0] != kernel.shape[1] or kernel.dtype.kind != "f":
            raise ValueError(f"kernel must be a float array of shape (h, h, k_h, k_w), got shape {kernel.shape} "
                             f"and dtype {kernel.dtype}")
        if kernel.shape[2] % 2 == 0 or kernel.shape[3] % 2 == 0:
            raise ValueError(f"kernel sizes must be odd (for 'same' padding), got shape {kernel.shape}")
        if bias.shape != kernel.shape[:1] or bias.dtype.kind != "f":
            raise ValueError(f"bias must be a float array of shape ({kernel.shape[0]},) to match kernel "
                             f"{kernel.shape}, got shape {bias.shape} and dtype {bias.dtype}")

    @property
    def channels(self) -> int:
        """h, the heads it reads and writes."""
        return np.shape(self.kernel)[0]


def init_attention_conv(rng, num_heads: int = 1, kernel_size: int = 3) -> AttentionConv:
    r"""Draw one layer's attention convolution: PyTorch's ``nn.Conv2d`` default initialisation.

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw (the kernel first, then the bias).
    num_heads : int, default 1
        h, the channels in and out.
    kernel_size : int, default 3
        Odd side of the square kernel (the official code's 3).

    Returns
    -------
    AttentionConv

    Notes
    -----
    Kernel and bias are :math:`\mathcal U(\pm 1/\sqrt{h k^2})` (fan-in :math:`h k^2`), what
    ``nn.Conv2d(h, h, k)`` draws and the official PyTorch code keeps.

    Examples
    --------
    >>> conv = init_attention_conv(0, num_heads=2)
    >>> conv.kernel.shape, conv.bias.shape
    ((2, 2, 3, 3), (2,))
    """
    rng = as_rng(rng)
    h, size = check_positive_int("num_heads", num_heads), check_positive_int("kernel_size", kernel_size)
    if size % 2 == 0:
        raise ValueError(f"kernel_size must be odd (for 'same' padding), got {size}")
    bound = 1.0 / math.sqrt(h * size * size)
    kernel = rng.uniform(-bound, bound, size=(h, h, size, size))
    return AttentionConv(kernel, rng.uniform(-bound, bound, size=h))


def attention_convolution(A: ArrayLike, conv: AttentionConv, *, activation: str = "relu") -> NDArray:
    r"""g: the maps of h heads convolved as an h-channel image, same size out ("same" zero padding).

    .. math::

        g(A)_{o,i,j} = \phi\Big(b_o + \sum_c \sum_{a,b} K_{o,c,a,b}\, A_{c,\, i + a - p_h,\, j + b - p_w}\Big),
        \qquad A_{c,i',j'} = 0 \text{ outside the map}

    Parameters
    ----------
    A : (..., h, n, m) array_like
        The maps, heads on axis −3; with ``conv.channels == 1`` also (..., n, m) (one map per
        leading index).
    conv : AttentionConv
        Kernel (h, h, k_h, k_w) and bias (h,); :math:`p = (k - 1)/2`.
    activation : {"relu", "none"}, default "relu"
        :math:`\phi`: the official code's ReLU, or none.

    Returns
    -------
    (..., h, n, m) ndarray
        (..., n, m) for a one-channel input given without its channel axis.

    Notes
    -----
    A cross-correlation, as ``conv2d`` in PyTorch and TensorFlow (the kernel is not flipped).

    Examples
    --------
    >>> conv = AttentionConv(np.ones((1, 1, 3, 3)), np.zeros(1))    # sums each 3 × 3 neighbourhood
    >>> attention_convolution(np.eye(3), conv)
    array([[2., 2., 1.],
           [2., 3., 2.],
           [1., 2., 2.]])
    """
    if not isinstance(conv, AttentionConv):
        raise TypeError(f"conv must be an AttentionConv (init_attention_conv), got {type(conv).__name__}")
    check_choice("activation", activation, ACTIVATIONS)
    A = as_float("A", A, min_ndim=2)
    h = conv.channels
    squeeze = h == 1 and (A.ndim == 2 or A.shape[-3] != 1)
    if squeeze:
        A = A[..., None, :, :]                                     # (..., 1, n, m)
    if A.ndim < 3 or A.shape[-3] != h:
        raise ValueError(f"A must have shape (..., h={h}, n, m) (heads on axis −3) for a convolution of {h} "
                         f"channels, got shape {A.shape}")
    n, m = A.shape[-2:]
    _, _, k_h, k_w = conv.kernel.shape
    p_h, p_w = k_h // 2, k_w // 2
    padded = np.zeros((*A.shape[:-2], n + 2 * p_h, m + 2 * p_w))
    padded[..., p_h:p_h + n, p_w:p_w + m] = A                      # zero "same" padding
    out = np.zeros(A.shape)
    out += conv.bias[:, None, None]                                # (..., h, n, m)  b_o
    with np.errstate(invalid="ignore", over="ignore"):             # Inf entries: IEEE in the entries they reach
        for a in range(k_h):
            for b in range(k_w):
                window = padded[..., a:a + n, b:b + m]             # (..., h, n, m)  A_{c, i+a−p, j+b−p}
                out += np.einsum("oc,...cnm->...onm", conv.kernel[:, :, a, b], window)   # Σ_c K_oc,ab · window
    if activation == "relu":
        out = np.maximum(out, 0.0)                                 # ReLU (NaN stays NaN)
    return out[..., 0, :, :] if squeeze else out


def predictive_rules(alpha: float, convs, *, activation: str = "relu") -> tuple[LayerRule, ...]:
    """The rule of layers 2 … L: w1 = α, w2 = 1 − α, g = layer l's convolution.

    Parameters
    ----------
    alpha : float
        α, the weight of each layer's own scores.
    convs : sequence of AttentionConv
        One per layer above the bottom.
    activation : {"relu", "none"}, default "relu"
        After each convolution.

    Returns
    -------
    tuple of LayerRule
    """
    alpha = _check_alpha(alpha)
    check_choice("activation", activation, ACTIVATIONS)
    return tuple(LayerRule(alpha, 1.0 - alpha, functools.partial(attention_convolution, conv=c, activation=activation))
                 for c in convs)


def _check_alpha(alpha) -> float:
    """α as a float in [0, 1] (``TypeError``/``ValueError`` naming it otherwise)."""
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.integer, np.floating)):
        raise TypeError(f"alpha must be a real number, got {type(alpha).__name__}")
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1] (a convex combination), got {alpha!r}")
    return float(alpha)


def predictive_attention(
    q: ArrayLike, k: ArrayLike, v: ArrayLike, previous: ArrayLike | None = None, *, conv: AttentionConv | None = None,
    alpha: float = DEFAULT_ALPHA, activation: str = "relu", form: str = "rule", beta: float = DEFAULT_BETA,
    causal: bool | str = False, scale: float | None = None, return_weights: bool = False,
) -> tuple[NDArray, NDArray] | tuple[NDArray, NDArray, NDArray]:
    r"""One Predictive Attention layer: this layer's scores and the convolved map from below, mixed by α.

    .. math::

        \hat A^{(l)} = \alpha \frac{Q K^\top}{\sqrt{d_k}} + (1 - \alpha)\, g\big(\hat A^{(l-1)}\big),
        \qquad \mathrm{out} = \operatorname{softmax}(\hat A^{(l)})\, V

    Parameters
    ----------
    q : (..., h, n, d_k) array_like
        This layer's queries, heads on axis −3 when the convolution has h > 1 channels.
    k : (..., h, m, d_k) array_like
        This layer's keys.
    v : (..., h, m, d_v) array_like
        This layer's values.
    previous : (..., h, n, m) array_like, optional
        The logits the layer below returned (``combined``); None for the bottom layer (plain
        softmax attention).
    conv : AttentionConv
        This layer's convolution g (:func:`init_attention_conv`); required with ``previous``.
    alpha : float, default 0.5
        α in [0, 1]: 1 leaves the layer its own scores (softmax attention).
    activation : {"relu", "none"}, default "relu"
        After the convolution.
    form : {"rule", "evolving"}, default "rule"
        "rule": the equation above (the survey's). "evolving": the official code's
        :math:`M = (1 - \beta) S + \beta \hat A^{(l-1)}`,
        :math:`\hat A^{(l)} = \alpha\, g(M) + (1 - \alpha) M` (see the module's notes).
    beta : float, default 0.5
        β of ``form="evolving"`` (unused by "rule").
    causal : {False}, default False
        No causal form: any other value is a ``ValueError`` saying why.
    scale : float, optional
        Default :math:`1/\sqrt{d_k}`.
    return_weights : bool, default False
        Also return the weights.

    Returns
    -------
    out : (..., h, n, d_v) ndarray
    combined : (..., h, n, m) ndarray
        :math:`\hat A^{(l)}`, the logits to pass up.
    weights : (..., h, n, m) ndarray
        Only if ``return_weights``.

    References
    ----------
    .. [1] Y. Wang et al., "Evolving Attention with Residual Convolutions", ICML 2021,
       arXiv:2102.12895; first as "Predictive Attention Transformer: Improving Transformer with
       Attention Map Prediction", ICLR 2021 submission (openreview YQVjbJPnPc9).
    .. [2] T. Lin et al., "A Survey of Transformers", arXiv:2106.04554v2, §4.5.2.
    .. [3] pkuyym/EvolvingAttention (official code), ``EAResnet50/official/resnet/resnet_model.py``.

    Examples
    --------
    >>> from refattn import scaled_dot_product_attention
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 2, 5, 4))                # two heads
    >>> out1, logits = predictive_attention(q, k, v)               # the bottom layer: softmax attention
    >>> bool(np.allclose(out1, scaled_dot_product_attention(q, k, v)))
    True
    >>> conv = init_attention_conv(1, num_heads=2)
    >>> out2, logits2 = predictive_attention(q, k, v, logits, conv=conv, alpha=0.5)
    >>> logits2.shape
    (2, 5, 5)
    """
    no_causal_form(causal, "Predictive Attention", NO_CAUSAL)
    check_choice("form", form, FORMS)
    alpha = _check_alpha(alpha)
    if previous is not None and not isinstance(conv, AttentionConv):
        raise TypeError(f"a layer with logits from below needs conv= (an AttentionConv), got {type(conv).__name__}")
    if previous is None or form == "rule":
        rule = None if previous is None else predictive_rules(alpha, (conv,), activation=activation)[0]
        layer = attention_with_prior_from_below(q, k, v, previous, rule=rule, scale=scale, return_weights=True)
        out, combined, A = layer.output, layer.combined, layer.weights
    else:
        q, k, v, _ = checked_qkv(q, k, v)
        combined = evolving_logits(q, k, previous, conv=conv, alpha=alpha, beta=beta, activation=activation,
                                   scale=scale)
        out, A = scaled_dot_product_attention(q, k, v, mask=combined, scale=0.0,   # the logits are whole: they
                                              return_weights=True)                 # enter as the bias to 0·QKᵀ
    return (out, combined, A) if return_weights else (out, combined)


def evolving_logits(q: ArrayLike, k: ArrayLike, previous: ArrayLike, *, conv: AttentionConv, alpha: float,
                    beta: float, activation: str = "relu", scale: float | None = None) -> NDArray:
    r"""The official code's logits (``form="evolving"``): the map below mixed in first, then convolved.

    .. math::

        M = (1 - \beta)\, S^{(l)} + \beta\, \hat A^{(l-1)}, \qquad
        \hat A^{(l)} = \alpha\, g(M) + (1 - \alpha)\, M

    Parameters
    ----------
    q : (..., h, n, d_k) array_like
    k : (..., h, m, d_k) array_like
    previous : (..., h, n, m) array_like
        The logits from below.
    conv : AttentionConv
        g's convolution.
    alpha, beta : float
        In [0, 1]; α weighs the convolved branch here (the code's ``alpha * logits``).
    activation : {"relu", "none"}, default "relu"
        After the convolution.
    scale : float, optional
        Default :math:`1/\sqrt{d_k}`.

    Returns
    -------
    (..., h, n, m) ndarray
    """
    q, k = as_float("q", q, min_ndim=2), as_float("k", k, min_ndim=2)
    alpha, beta = _check_alpha(alpha), _check_alpha(beta)
    scale = default_scale(q.shape[-1]) if scale is None else check_scale(scale)
    S = scores(q, k, scale)                                  # (..., h, n, m)  S⁽ˡ⁾
    previous = as_float("previous", previous, min_ndim=2)
    if previous.shape[-2:] != S.shape[-2:]:
        raise ValueError(f"previous has shape {previous.shape}; expected (..., n={S.shape[-2]}, m={S.shape[-1]})")
    M = (1.0 - beta) * S + beta * previous                         # (..., h, n, m)  M = (1 − β)S + βÂ⁽ˡ⁻¹⁾
    return alpha * attention_convolution(M, conv, activation=activation) + (1.0 - alpha) * M


def predictive_attention_stack(
    q: ArrayLike, k: ArrayLike, v: ArrayLike, *, layers: int | None = None,
    projections: StackProjections | None = None, convs: tuple[AttentionConv, ...] | None = None,
    rng: np.random.Generator | int | None = None, alpha: float = DEFAULT_ALPHA, activation: str = "relu",
    num_heads: int | None = None, causal: bool | str = False, scale: float | None = None,
    return_weights: bool = False,
) -> NDArray | tuple[NDArray, NDArray]:
    r"""An attention-only Predictive Attention stack on one q, k, v, each layer above the bottom with its own
    3 × 3 convolution of the logits from below.

    .. math::

        \hat A^{(l)} = \alpha \frac{(Q W_q^{(l)}) (K W_k^{(l)})^\top}{\sqrt{d_k}}
        + (1 - \alpha)\, g^{(l)}\big(\hat A^{(l-1)}\big), \qquad
        \mathrm{out} = \operatorname{softmax}(\hat A^{(L)})\, V

    Parameters
    ----------
    q : (..., [h,] n, d_k) array_like
    k : (..., [h,] m, d_k) array_like
    v : (..., [h,] m, d_v) array_like
    layers : int, optional
        L; default 3, or the projections' count when they are given.
    projections : StackProjections, optional
        W_q, W_k of layers 2 … L (:func:`~refattn.prior.init_stack_projections`); drawn from ``rng`` when not given.
    convs : tuple of AttentionConv, optional
        g of layers 2 … L, one per layer above the bottom (:func:`init_attention_conv`); drawn from ``rng`` (after
        the projections) when not given.
    rng : numpy.random.Generator or int, optional
        Source of what is not given.
    alpha : float, default 0.5
        α in [0, 1] (:func:`predictive_rules`).
    activation : {"relu", "none"}, default "relu"
        After each convolution.
    num_heads : int, optional
        h, the convolutions' channels, with the heads on axis −3 of q, k, v; default one channel per leading index.
    causal : {False}, default False
        No causal form: any other value is a ``ValueError`` saying why.
    scale : float, optional
        Default :math:`1/\sqrt{d_k}`, in every layer.
    return_weights : bool, default False
        Also return the top layer's weights.

    Returns
    -------
    out : (..., [h,] n, d_v) ndarray
    weights : (..., [h,] n, m) ndarray
        Only if ``return_weights``.

    Notes
    -----
    :func:`~refattn.prior.attention_stack` with :func:`predictive_rules` (why one q, k, v feed every layer:
    see there). One layer is exactly softmax attention.
    """
    no_causal_form(causal, "Predictive Attention", NO_CAUSAL)
    return_weights = check_bool("return_weights", return_weights)
    alpha = _check_alpha(alpha)
    check_choice("activation", activation, ACTIVATIONS)
    q, k, v, _ = checked_qkv(q, k, v)
    scale = default_scale(q.shape[-1]) if scale is None else check_scale(scale)
    rng = optional_rng(rng)
    projections = stack_projections("predictive_attention", q, rng, layers, projections, DEFAULT_LAYERS)
    h = 1 if num_heads is None else check_positive_int("num_heads", num_heads)
    if num_heads is not None and (q.ndim < 3 or q.shape[-3] != h):
        raise ValueError(f"num_heads={h} needs the heads on axis −3 of q, got q shape {q.shape}")
    convs = given_or_drawn("predictive_attention", "convs", convs, rng,
                           lambda r: tuple(init_attention_conv(r, h) for _ in range(projections.layers - 1)),
                           what="its convolutions")
    if not isinstance(convs, tuple) or not all(isinstance(c, AttentionConv) for c in convs):
        raise TypeError("convs must be a tuple of AttentionConv, one per layer above the bottom")
    if len(convs) != projections.layers - 1:
        raise ValueError(f"{len(convs)} convolutions for {projections.layers} layers: need one per layer above the "
                         "bottom")
    if any(c.channels != h for c in convs):
        raise ValueError(f"the convolutions have {[c.channels for c in convs]} channels, the maps {h} "
                         f"({'num_heads' if num_heads is not None else 'one per leading index'})")
    trace = attention_stack(q, k, v, rules=predictive_rules(alpha, convs, activation=activation),
                            projections=projections, scale=scale)
    return (trace.output, trace.weights[-1]) if return_weights else trace.output


RECORD = Mechanism.of(
    predictive_attention_stack,
    id="predictive_attention", title="Predictive Attention (convolved maps from below)", family="prior",
    section="4.5.2", paper=PREDICTIVE,
    equation=r"\hat A^{(l)} = \alpha \frac{Q^{(l)} K^{(l)\top}}{\sqrt{d_k}} + (1 - \alpha)\, "
             r"\operatorname{Conv2D}(\hat A^{(l-1)})",
    time="O(L·n·m·(d + 9h))", memory="O(h·n·m)", kind="attention", causal=False, position_dependent=True,
    figure="refattn.figures.predictive_attention:predictive_attention",
    examples=({"alpha": 0.2}, {"activation": "none", "layers": 2}, {"alpha": 1.0}),
    exact_options={"layers": 1}, exact_limit="one layer (no map from below)",
    draws=("projections", "convs"),
)
