r"""RealFormer: residual attention scores (He et al., 2021, arXiv:2012.11747v3, §3; survey §4.5.2).

    Â⁽ˡ⁾ = Q⁽ˡ⁾K⁽ˡ⁾ᵀ/√d_k + Â⁽ˡ⁻¹⁾          Prev: the raw scores of the layer below, residual included
    A⁽ˡ⁾ = softmax(Â⁽ˡ⁾),  out = A⁽ˡ⁾ V⁽ˡ⁾     Â⁽ˡ⁾ passes up to layer l + 1;  Â⁽¹⁾ = S⁽¹⁾

The survey's rule Â⁽ˡ⁾ = w1·S⁽ˡ⁾ + w2·g(Â⁽ˡ⁻¹⁾) with w1 = w2 = 1 and g the identity
(:func:`~refattn.prior.prior_from_below`): a residual connection on the pre-softmax attention maps,
per head, so Â⁽ᴸ⁾ = Σ_l S⁽ˡ⁾. What passes up is the raw score map before the softmax (the paper's
"Prev", its Fig. 1), not the weights.

Masks act by selection in every layer, so a pair masked in a layer gets no weight there whatever
its residual score; the residual scores of masked pairs still pass up and are masked again above
(they never reach a row). With a causal mask the
entry (i, j) of every map depends only on query i and key j (the sum is elementwise), so row i never
sees a later key: RealFormer works in decoders as it does in encoders.
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..mechanism import Mechanism
from .lower_layer import LayerRule, StackProjections, attention_with_prior_from_below, stack_attention

__all__ = ["REALFORMER_RULE", "realformer_attention", "realformer_rules", "realformer_stack"]

REALFORMER = ('R. He, A. Ravula, B. Kanagal, J. Ainslie, 2021, "RealFormer: Transformer Likes Residual Attention", '
              'arXiv:2012.11747')
#: The rule's setting for every layer above the bottom: w1 = w2 = 1, g = identity.
REALFORMER_RULE = LayerRule(1.0, 1.0)
DEFAULT_LAYERS = 3


def realformer_rules(layers: int) -> tuple[LayerRule, ...]:
    """The rule of layers 2 … L: :data:`REALFORMER_RULE` (w1 = w2 = 1, g = identity) for each.

    Parameters
    ----------
    layers : int
        L, the number of layers.

    Returns
    -------
    tuple of LayerRule
        ``layers`` − 1 of them.
    """
    return (REALFORMER_RULE,) * (layers - 1)


def realformer_attention(
    q: ArrayLike, k: ArrayLike, v: ArrayLike, previous: ArrayLike | None = None, *,
    causal: bool | str = False, scale: float | None = None, return_weights: bool = False,
) -> tuple[NDArray, NDArray] | tuple[NDArray, NDArray, NDArray]:
    r"""One RealFormer attention layer: softmax of this layer's scores plus the raw scores from below.

    .. math::

        \hat A^{(l)} = \frac{Q K^\top}{\sqrt{d_k}} + \mathrm{Prev}, \qquad
        \mathrm{out} = \operatorname{softmax}(\hat A^{(l)})\, V

    Parameters
    ----------
    q : (..., n, d_k) array_like
        This layer's queries (one head per leading index).
    k : (..., m, d_k) array_like
        This layer's keys.
    v : (..., m, d_v) array_like
        This layer's values.
    previous : (..., n, m) array_like, optional
        Prev, the map the layer below returned as ``combined``; None for the bottom layer
        (plain softmax attention).
    causal : {False, True, "top-left", "bottom-right"}, default False
        By selection in this layer (masked pairs' residual scores never reach a row).
    scale : float, optional
        Default :math:`1/\sqrt{d_k}`.
    return_weights : bool, default False
        Also return the weights :math:`\operatorname{softmax}(\hat A^{(l)})`.

    Returns
    -------
    out : (..., n, d_v) ndarray
    combined : (..., n, m) ndarray
        :math:`\hat A^{(l)}`, the raw scores to pass to the layer above as its ``previous``.
    weights : (..., n, m) ndarray
        Only if ``return_weights``.

    Notes
    -----
    The survey's rule with :math:`w_1 = w_2 = 1`, :math:`g` the identity. With one layer (no
    ``previous``) it is softmax attention exactly. Masking by selection makes a masked pair's
    entry of Prev irrelevant to its row.

    References
    ----------
    .. [1] R. He, A. Ravula, B. Kanagal, J. Ainslie, "RealFormer: Transformer Likes Residual
       Attention", Findings of ACL 2021, arXiv:2012.11747v3, §3, Fig. 1.

    Examples
    --------
    >>> import numpy as np
    >>> from refattn import scaled_dot_product_attention
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 4, 8))
    >>> out1, prev = realformer_attention(q, k, v)                 # the bottom layer: softmax attention
    >>> bool(np.allclose(out1, scaled_dot_product_attention(q, k, v)))
    True
    >>> out2, prev2 = realformer_attention(q, k, v, prev)          # same q, k above: scores doubled
    >>> bool(np.allclose(prev2, 2 * prev))
    True
    """
    layer = attention_with_prior_from_below(q, k, v, previous, rule=REALFORMER_RULE, causal=causal, scale=scale,
                                            return_weights=return_weights)
    return (layer.output, layer.combined, layer.weights) if return_weights else (layer.output, layer.combined)


def realformer_stack(
    q: ArrayLike, k: ArrayLike, v: ArrayLike, *, layers: int | None = None,
    projections: StackProjections | None = None, rng: np.random.Generator | int | None = None,
    causal: bool | str = False, scale: float | None = None, return_weights: bool = False,
) -> NDArray | tuple[NDArray, NDArray]:
    r"""An attention-only RealFormer stack on one q, k, v: each layer adds its scores to the raw scores from below.

    .. math::

        \hat A^{(1)} = \frac{Q K^\top}{\sqrt{d_k}}, \qquad
        \hat A^{(l)} = \frac{(Q W_q^{(l)}) (K W_k^{(l)})^\top}{\sqrt{d_k}} + \hat A^{(l-1)}, \qquad
        \mathrm{out} = \operatorname{softmax}(\hat A^{(L)})\, V

    Parameters
    ----------
    q : (..., n, d_k) array_like
    k : (..., m, d_k) array_like
    v : (..., m, d_v) array_like
    layers : int, optional
        L; default 3, or the projections' count when they are given.
    projections : StackProjections, optional
        W_q, W_k of layers 2 … L (:func:`~refattn.prior.init_stack_projections`); drawn from ``rng`` when not given.
    rng : numpy.random.Generator or int, optional
        Source of the projections; unused when they are given.
    causal : {False, True, "top-left", "bottom-right"}, default False
        By selection in every layer.
    scale : float, optional
        Default :math:`1/\sqrt{d_k}`, in every layer.
    return_weights : bool, default False
        Also return the top layer's weights :math:`\operatorname{softmax}(\hat A^{(L)})`.

    Returns
    -------
    out : (..., n, d_v) ndarray
    weights : (..., n, m) ndarray
        Only if ``return_weights``.

    Notes
    -----
    :func:`~refattn.prior.attention_stack` with :func:`realformer_rules` (why one q, k, v feed every
    layer: see there). One layer is exactly softmax attention.
    """
    return stack_attention("realformer", q, k, v, realformer_rules, layers=layers, projections=projections, rng=rng,
                           causal=causal, scale=scale, default_layers=DEFAULT_LAYERS, return_weights=return_weights)


RECORD = Mechanism.of(
    realformer_stack,
    id="realformer", title="RealFormer (residual attention scores)", family="prior", section="4.5.2",
    paper=REALFORMER,
    equation=r"\hat A^{(l)} = \frac{Q^{(l)} K^{(l)\top}}{\sqrt{d_k}} + \hat A^{(l-1)},\quad "
             r"\operatorname{softmax}(\hat A^{(l)})\, V",
    time="O(L·n·m·d)", memory="O(n·m)", kind="attention", causal=True, figure="refattn.figures.realformer:realformer",
    examples=({"layers": 2}, {"layers": 5}),
    exact_options={"layers": 1}, exact_limit="one layer (no scores from below)",
    draws=("projections",),
)
