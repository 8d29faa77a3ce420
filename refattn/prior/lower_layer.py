r"""Prior from lower layers (survey §4.5.2): each layer's scores combined with the map of the layer below.

The survey's general rule (Lin et al., arXiv:2106.04554, §4.5.2, Eq. 6), layer by layer:

    Â⁽ˡ⁾ = w1·S⁽ˡ⁾ + w2·g(Â⁽ˡ⁻¹⁾)          S⁽ˡ⁾ = Q⁽ˡ⁾K⁽ˡ⁾ᵀ·scale, this layer's own scores
    A⁽ˡ⁾ = softmax(Â⁽ˡ⁾)                   the layer's weights; Â⁽ˡ⁾ passes up to layer l + 1
    Â⁽¹⁾ = S⁽¹⁾                            the bottom layer has nothing below it

g: R^{n×m} → R^{n×m} turns the map below into a prior for this layer. Three mechanisms are instances:

    RealFormer            w1 = w2 = 1, g = identity               (He et al., 2021, arXiv:2012.11747)
    Predictive Attention  w1 = α, w2 = 1 − α, g = a 2-D convolution over (query, key), heads as channels
                                                                  (Wang et al., 2021, arXiv:2102.12895)
    Lazyformer            g = identity; w1, w2 = 1, 0 in the first layer of each block (the map is
                          computed) and 0, 1 in the others (the map is reused)  (Ying et al., 2021,
                          arXiv:2102.12702)

This module holds the rule (:func:`prior_from_below`), one layer of attention under it
(:func:`attention_with_prior_from_below`, the prior as sdpa's additive bias), and the attention-only
stack the three registry entries share (:func:`attention_stack`): ``layers`` layers on the same q,
k, v, layer l's queries and keys q W_q⁽ˡ⁾ and k W_k⁽ˡ⁾ (layer 1: q and k themselves), only the maps
passing up, and the output the top layer's weights times v.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.checks import as_float, as_rng, check_bool, check_scale, checked_qkv, default_scale
from ..common.init import glorot
from ..common.ints import check_non_negative_int, check_positive_int
from ..common.products import scores
from ..core.sdpa import scaled_dot_product_attention
from ..draws import given_or_drawn, optional_rng
from ..masks import allowed_pairs, check_mask_shape

__all__ = [
    "LayerResult",
    "LayerRule",
    "StackProjections",
    "StackTrace",
    "attention_stack",
    "attention_with_prior_from_below",
    "init_stack_projections",
    "prior_from_below",
]


def _check_weight(name: str, w) -> float:
    """A rule weight as a finite float (``TypeError``/``ValueError`` naming it otherwise)."""
    if isinstance(w, bool) or not isinstance(w, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number, got {type(w).__name__}")
    if not np.isfinite(w):
        raise ValueError(f"{name} must be finite, got {w!r}")
    return float(w)


def prior_from_below(scores: ArrayLike | None, previous: ArrayLike | None, *, w1: float, w2: float,
                     g: Callable[[NDArray], NDArray] | None = None) -> NDArray:
    r"""The survey's general rule: this layer's scores plus a prior made from the map of the layer below.

    .. math::

        \hat A^{(l)} = w_1 \, S^{(l)} + w_2 \, g\big(\hat A^{(l-1)}\big)

    Parameters
    ----------
    scores : (..., n, m) array_like or None
        :math:`S^{(l)}`, this layer's own scores :math:`Q K^\top \cdot \mathrm{scale}` (before the
        softmax). May be None when ``w1 == 0`` (the layer reuses the map below and need not
        compute its own, as Lazyformer's do).
    previous : (..., n, m) array_like or None
        :math:`\hat A^{(l-1)}`, the combined map the layer below passed up (before its softmax).
        None for the bottom layer, which has nothing below it: :math:`\hat A^{(1)} = S^{(1)}`,
        whatever the weights.
    w1, w2 : float
        The weights of this layer's scores and of the prior.
    g : callable, optional
        Maps :math:`\hat A^{(l-1)}` to an array of the scores' shape. Default: the identity.

    Returns
    -------
    (..., n, m) ndarray
        :math:`\hat A^{(l)}`, which this layer's softmax reads and which passes up to layer l + 1.

    Notes
    -----
    A term whose weight is 0 is left out, not multiplied by 0 (so a NaN or Inf in it cannot
    leak in as 0·∞, and a layer with ``w1 = 0`` may pass ``scores=None``). Terms are added
    elementwise, so with g = identity the entry (i, j) of every layer's map depends only on the
    entries (i, j) below it: a causal mask applied by selection in every layer keeps each row free
    of later keys. A g that mixes entries (a convolution) does not have that property.

    The three instances (survey §4.5.2): RealFormer ``w1 = w2 = 1`` with ``g = None``; Predictive
    Attention ``w1 = α``, ``w2 = 1 − α`` with ``g`` a convolution
    (:func:`refattn.prior.attention_convolution`); Lazyformer ``(w1, w2) = (1, 0)`` in the first
    layer of each block and ``(0, 1)`` in the others, ``g = None``.

    References
    ----------
    .. [1] T. Lin, Y. Wang, X. Liu, X. Qiu, "A Survey of Transformers", arXiv:2106.04554v2, §4.5.2, Eq. (6).

    Examples
    --------
    >>> S, below = np.array([[1.0, 2.0]]), np.array([[0.5, -1.0]])
    >>> prior_from_below(S, below, w1=1.0, w2=1.0)                 # RealFormer: the residual
    array([[1.5, 1. ]])
    >>> prior_from_below(None, below, w1=0.0, w2=1.0)              # Lazyformer, a reusing layer
    array([[ 0.5, -1. ]])
    >>> prior_from_below(S, None, w1=0.0, w2=1.0)                  # the bottom layer: its own scores
    array([[1., 2.]])
    """
    w1, w2 = _check_weight("w1", w1), _check_weight("w2", w2)
    if g is not None and not callable(g):
        raise TypeError(f"g must be callable (a map of the previous layer's map) or None, got {type(g).__name__}")
    if scores is not None:
        scores = as_float("scores", scores, min_ndim=2)
    if previous is None:
        if scores is None:
            raise ValueError("the bottom layer (previous=None) needs its scores: got scores=None")
        return scores
    previous = as_float("previous", previous, min_ndim=2)
    if scores is None and w1 != 0:
        raise ValueError(f"scores=None leaves the term w1·S out, which needs w1 = 0; got w1={w1}")
    prior = previous if g is None else np.asarray(g(previous))
    reference = scores if scores is not None else previous
    if prior.shape != reference.shape:
        what = "g(previous)" if g is not None else "previous"
        raise ValueError(f"{what} has shape {prior.shape} but the scores have shape {reference.shape}")
    with np.errstate(invalid="ignore", over="ignore"):             # Inf entries: IEEE in the rows that hold them
        if w1 == 0:
            return w2 * prior if w2 != 0 else np.zeros_like(prior)
        if w2 == 0:
            return w1 * scores
        return w1 * scores + w2 * prior                            # (..., n, m)  Â = w1·S + w2·g(Â⁽ˡ⁻¹⁾)


@dataclass(frozen=True)
class LayerRule:
    """The rule's setting for one layer above the bottom: :math:`\\hat A = w_1 S + w_2 g(\\hat A_\\text{below})`.

    Attributes
    ----------
    w1, w2 : float
        Weights of the layer's own scores and of the prior from below.
    g : callable or None
        The map from the layer below to the prior; None is the identity.
    """

    w1: float
    w2: float
    g: Callable[[NDArray], NDArray] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "w1", _check_weight("w1", self.w1))
        object.__setattr__(self, "w2", _check_weight("w2", self.w2))
        if self.g is not None and not callable(self.g):
            raise TypeError(f"g must be callable or None, got {type(self.g).__name__}")


class LayerResult(NamedTuple):
    """What one layer of :func:`attention_with_prior_from_below` computed.

    Attributes
    ----------
    output : (..., n, d_v) ndarray
        The layer's attention output.
    scores : (..., n, m) ndarray or None
        :math:`S^{(l)}`, its own scores (None where ``w1 = 0``: the layer reuses the map below).
    prior : (..., n, m) ndarray or None
        :math:`w_2 g(\\hat A^{(l-1)})`, the prior it adds (None at the bottom and where ``w2 = 0``).
    combined : (..., n, m) ndarray
        :math:`\\hat A^{(l)}`, what its softmax reads and what passes up.
    weights : (..., n, m) ndarray or None
        :math:`\\operatorname{softmax}(\\hat A^{(l)})` over the allowed pairs, when asked for.
    """

    output: NDArray
    scores: NDArray | None
    prior: NDArray | None
    combined: NDArray
    weights: NDArray | None = None


def attention_with_prior_from_below(
    q: ArrayLike, k: ArrayLike, v: ArrayLike, previous: ArrayLike | None = None, *, rule: LayerRule | None = None,
    mask: ArrayLike | None = None, causal: bool | str = False, scale: float | None = None,
    return_weights: bool = False,
) -> LayerResult:
    r"""One layer of attention under the rule: softmax of this layer's scores plus the prior from below.

    .. math::

        \hat A^{(l)} = w_1 S^{(l)} + w_2\, g(\hat A^{(l-1)}), \qquad
        \mathrm{out} = \operatorname{softmax}(\hat A^{(l)})\, V

    Parameters
    ----------
    q : (..., n, d_k) array_like
        This layer's queries.
    k : (..., m, d_k) array_like
        This layer's keys.
    v : (..., m, d_v) array_like
        This layer's values.
    previous : (..., n, m) array_like, optional
        :math:`\hat A^{(l-1)}`, the map the layer below passed up. None: the bottom layer
        (plain softmax attention, ``rule`` unused).
    rule : LayerRule
        :math:`(w_1, w_2, g)`; required with ``previous``.
    mask : (..., n, m) array_like of bool, optional
        ``True`` where query *i* may attend to key *j* (a key padding mask, say); by selection,
        like ``causal``.
    causal : {False, True, "top-left", "bottom-right"}, default False
        Masks by selection in this layer: a masked pair's entry of :math:`\hat A` never reaches
        its row (it still passes up, and is masked again there).
    scale : float, optional
        Multiplier of :math:`QK^\top`; default :math:`1/\sqrt{d_k}`.
    return_weights : bool, default False
        Also return the weights :math:`\operatorname{softmax}(\hat A^{(l)})`.

    Returns
    -------
    LayerResult
        output, scores, prior, combined (to pass up), and weights when asked for.

    Notes
    -----
    The attention is :func:`~refattn.scaled_dot_product_attention` with the prior
    :math:`w_2 g(\hat A^{(l-1)})` as its additive bias and ``w1 · scale`` as its scale, i.e.
    :math:`\operatorname{softmax}(w_1 QK^\top \cdot \mathrm{scale} + w_2 g(\hat A^{(l-1)}))`; the
    map passed up is :func:`prior_from_below` of the same terms (equal to it bit for bit when
    :math:`w_1 \in \{0, 1\}`, to rounding otherwise: the product :math:`w_1 \cdot \mathrm{scale}`
    is taken first there).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 4, 8))
    >>> bottom = attention_with_prior_from_below(q, k, v)
    >>> above = attention_with_prior_from_below(q, k, v, bottom.combined, rule=LayerRule(1.0, 1.0))
    >>> bool(np.allclose(above.combined, 2 * bottom.scores))       # RealFormer on the same q, k: 2 S
    True
    >>> bool(np.allclose(bottom.output, scaled_dot_product_attention(q, k, v)))
    True
    """
    q, k, v, _ = checked_qkv(q, k, v)
    scale = default_scale(q.shape[-1]) if scale is None else check_scale(scale)
    if previous is None:
        S = scores(q, k, scale)                              # (..., n, m)  Â⁽¹⁾ = S⁽¹⁾
        prior, combined, S_scale = None, S, scale
    else:
        if not isinstance(rule, LayerRule):
            raise TypeError(f"a layer with a map from below needs rule= (a LayerRule), got {type(rule).__name__}")
        previous = as_float("previous", previous, min_ndim=2)
        S = scores(q, k, scale) if rule.w1 != 0 else None
        prior = prior_from_below(None, previous, w1=0.0, w2=rule.w2, g=rule.g) if rule.w2 != 0 else None
        if prior is not None and prior.shape[-2:] != (q.shape[-2], k.shape[-2]):
            raise ValueError(f"the prior from previous (shape {previous.shape}) has shape {prior.shape}; expected "
                             f"(..., n={q.shape[-2]}, m={k.shape[-2]})")
        combined = prior_from_below(S, previous, w1=rule.w1, w2=rule.w2, g=rule.g)   # (..., n, m)  Â⁽ˡ⁾
        S_scale = rule.w1 * scale
    if mask is not None:
        mask = check_mask_shape(mask, q.shape[-2], k.shape[-2])
        if mask.dtype != bool:
            raise TypeError(f"mask must be boolean (True = may attend), got dtype {mask.dtype} with shape {mask.shape}")
        if prior is not None:                                      # −inf entries of a float mask mask by selection
            prior = np.where(mask, prior, -np.inf)
    result = scaled_dot_product_attention(q, k, v, mask=prior if prior is not None else mask, causal=causal,
                                          scale=S_scale,
                                          return_weights=return_weights)   # softmax(w1·S + w2·g(Â⁽ˡ⁻¹⁾)) V
    out, A = result if return_weights else (result, None)
    return LayerResult(out, S, prior, combined, A)


@dataclass(frozen=True)
class StackProjections:
    """The per-layer query and key projections of :func:`attention_stack`, layers 2 … L (layer 1 reads q and k).

    Attributes
    ----------
    w_q, w_k : (L − 1, d_k, d_k) ndarray
        Layer l + 2's queries are ``q @ w_q[l]`` and its keys ``k @ w_k[l]``.
    """

    w_q: NDArray
    w_k: NDArray

    def __post_init__(self) -> None:
        for name in ("w_q", "w_k"):
            w = np.asarray(getattr(self, name))
            if w.ndim != 3 or w.shape[1] != w.shape[2] or w.dtype.kind != "f":
                raise ValueError(f"{name} must be a float array of shape (layers − 1, d_k, d_k), got shape "
                                 f"{w.shape} and dtype {w.dtype}")
        if np.shape(self.w_q) != np.shape(self.w_k):
            raise ValueError(f"w_q has shape {np.shape(self.w_q)} but w_k has shape {np.shape(self.w_k)}")

    @property
    def layers(self) -> int:
        """L, the number of layers (one more than the projections)."""
        return np.shape(self.w_q)[0] + 1


def init_stack_projections(rng, layers: int, d_k: int) -> StackProjections:
    r"""Draw the query and key projections of layers 2 … L of :func:`attention_stack` (Glorot uniform).

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw.
    layers : int
        L, the number of layers (>= 1; one layer draws nothing).
    d_k : int
        Width of the queries and keys.

    Returns
    -------
    StackProjections

    Notes
    -----
    Each (d_k, d_k) matrix is :math:`\mathcal U(\pm\sqrt{6/(2 d_k)})`, as
    :func:`~refattn.init_multi_head` draws its projections, in the order w_q⁽²⁾, w_k⁽²⁾, w_q⁽³⁾, …,
    so the projected rows keep about the inputs' scale.

    Examples
    --------
    >>> P = init_stack_projections(0, 3, 4)
    >>> P.w_q.shape, P.layers
    ((2, 4, 4), 3)
    """
    rng = as_rng(rng)
    layers = check_positive_int("layers", layers)
    d_k = check_non_negative_int("d_k", d_k)
    shape = (layers - 1, d_k, d_k)
    if d_k == 0:                                                   # empty queries and keys: nothing to draw
        return StackProjections(np.zeros(shape), np.zeros(shape))
    w = [glorot(rng, d_k, d_k) for _ in range(2 * (layers - 1))]
    return StackProjections(np.array(w[0::2]).reshape(shape), np.array(w[1::2]).reshape(shape))


@dataclass(frozen=True)
class StackTrace:
    """Every layer of :func:`attention_stack` (lists indexed by layer, bottom first).

    Attributes
    ----------
    output : (..., n, d_v) ndarray
        The top layer's weights times v.
    scores : list of ndarray or None
        :math:`S^{(l)}`, each layer's own scores (None where ``w1 = 0``: the layer reuses the map).
    priors : list of ndarray or None
        :math:`w_2 g(\\hat A^{(l-1)})`, the prior each layer adds (None at the bottom and where ``w2 = 0``).
    combined : list of ndarray
        :math:`\\hat A^{(l)}`, the map each layer's softmax reads and passes up.
    weights : list of ndarray
        :math:`\\operatorname{softmax}(\\hat A^{(l)})` over the allowed pairs.
    allowed : ndarray of bool or None
        The pairs every layer may use (the causal mask), None when all.
    """

    output: NDArray
    scores: list
    priors: list
    combined: list
    weights: list
    allowed: NDArray | None


def attention_stack(q: ArrayLike, k: ArrayLike, v: ArrayLike, *, rules: Sequence[LayerRule],
                    projections: StackProjections, causal: bool | str = False,
                    scale: float | None = None) -> StackTrace:
    r"""An attention-only stack under the rule: L layers on the same q, k, v, only the maps passing up.

    .. math::

        Q^{(1)} = q,\ K^{(1)} = k; \quad Q^{(l)} = q W_q^{(l)},\ K^{(l)} = k W_k^{(l)}\ (l \ge 2); \qquad
        \hat A^{(l)} = w_1^{(l)} Q^{(l)} K^{(l)\top} \mathrm{scale} + w_2^{(l)} g^{(l)}(\hat A^{(l-1)}); \qquad
        \mathrm{out} = \operatorname{softmax}(\hat A^{(L)})\, v

    Parameters
    ----------
    q : (..., n, d_k) array_like
    k : (..., m, d_k) array_like
    v : (..., m, d_v) array_like
    rules : sequence of LayerRule
        The rule of layers 2 … L (length L − 1).
    projections : StackProjections
        W_q, W_k of layers 2 … L (:func:`init_stack_projections`), of the same L.
    causal : {False, True, "top-left", "bottom-right"}, default False
        Applied by selection in every layer.
    scale : float, optional
        Default :math:`1/\sqrt{d_k}`, in every layer.

    Returns
    -------
    StackTrace

    Notes
    -----
    Why this shape for a registry entry: a uniform ``apply`` receives one q, k, v and no layer
    inputs, yet the rule is about layers. Projecting the same q and k per layer gives each layer
    its own scores, the rule combines them exactly as it would in a network, and the top layer's
    weights meet v. One layer is exactly softmax attention (layer 1 reads q and k unprojected);
    values and outputs do not pass up, so the figure and the tests see the rule alone. The full
    encoder stack, where hidden states pass up too, is :func:`refattn.prior.prior_encoder`.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 5, 4))
    >>> P = init_stack_projections(1, 3, 4)
    >>> trace = attention_stack(q, k, v, rules=[LayerRule(1.0, 1.0)] * 2, projections=P)   # RealFormer
    >>> len(trace.combined), bool(np.allclose(trace.combined[2], sum(trace.scores)))
    (3, True)
    """
    q, k, v, _ = checked_qkv(q, k, v)
    if not isinstance(projections, StackProjections):
        raise TypeError(f"projections must be StackProjections (init_stack_projections), got "
                        f"{type(projections).__name__}")
    rules = tuple(rules)
    if len(rules) != projections.layers - 1:
        raise ValueError(f"{len(rules)} rules for {projections.layers} layers (projections w_q shape "
                         f"{np.shape(projections.w_q)}): need one rule per layer above the bottom")
    if np.shape(projections.w_q)[1] != q.shape[-1]:
        raise ValueError(f"projections are {np.shape(projections.w_q)[1:]} but q and k have d_k={q.shape[-1]}")
    scale = default_scale(q.shape[-1]) if scale is None else check_scale(scale)
    layers = [attention_with_prior_from_below(q, k, v, causal=causal, scale=scale, return_weights=True)]
    for l, rule in enumerate(rules):
        with np.errstate(invalid="ignore", over="ignore"):         # Inf inputs: NaN rows, as IEEE says
            q_l = q @ projections.w_q[l]                           # (..., n, d_k)  q W_q⁽ˡ⁾
            k_l = k @ projections.w_k[l]                           # (..., m, d_k)  k W_k⁽ˡ⁾
        layers.append(attention_with_prior_from_below(q_l, k_l, v, layers[-1].combined, rule=rule, causal=causal,
                                                      scale=scale, return_weights=True))
    top = layers[-1]
    return StackTrace(top.output, [x.scores for x in layers], [x.prior for x in layers],
                      [x.combined for x in layers], [x.weights for x in layers],
                      allowed_pairs(None, causal, top.weights.shape))


def stack_projections(by: str, q: NDArray, rng: np.random.Generator | None, layers: int | None,
                      projections: StackProjections | None, default_layers: int) -> StackProjections:
    """The stack doors' projections: ``projections`` checked against ``layers`` when given, else drawn from
    ``rng`` (:func:`refattn.draws.given_or_drawn`, noted as the draw ``projections``) for ``layers`` (default
    ``default_layers``) layers of q's width."""
    if projections is None:
        layers = default_layers if layers is None else check_positive_int("layers", layers)
        return given_or_drawn(by, "projections", None, rng, lambda r: init_stack_projections(r, layers, q.shape[-1]),
                              what="its projections")
    if not isinstance(projections, StackProjections):
        raise TypeError(f"projections must be StackProjections (init_stack_projections), got "
                        f"{type(projections).__name__}")
    if layers is not None and check_positive_int("layers", layers) != projections.layers:
        raise ValueError(f"layers={layers} but the projections are for {projections.layers} layers "
                         f"(w_q shape {np.shape(projections.w_q)})")
    return given_or_drawn(by, "projections", projections, rng, init_stack_projections)


def stack_attention(by: str, q: ArrayLike, k: ArrayLike, v: ArrayLike,
                    rules_of: Callable[[int], Sequence[LayerRule]], *, layers: int | None,
                    projections: StackProjections | None, rng, causal, scale: float | None, default_layers: int,
                    return_weights: bool) -> NDArray | tuple[NDArray, NDArray]:
    """The stack doors' shared body: :func:`attention_stack` with ``rules_of(L)`` and the projections of
    :func:`stack_projections`; the top layer's output, and its weights with ``return_weights``."""
    return_weights = check_bool("return_weights", return_weights)
    q, k, v, _ = checked_qkv(q, k, v)
    scale = default_scale(q.shape[-1]) if scale is None else check_scale(scale)
    projections = stack_projections(by, q, optional_rng(rng), layers, projections, default_layers)
    trace = attention_stack(q, k, v, rules=rules_of(projections.layers), projections=projections, causal=causal,
                            scale=scale)
    return (trace.output, trace.weights[-1]) if return_weights else trace.output
