r"""Lazyformer: attention maps computed once per block of layers and reused (Ying et al., 2021; survey §4.5.2).

C. Ying, G. Ke, D. He, T.-Y. Liu, "LazyFormer: Self Attention with Lazy Update", arXiv:2102.12702:

    layers grouped in lazy blocks of b consecutive layers
    first layer of a block:   A⁽ˡ⁾ = softmax(Q⁽ˡ⁾K⁽ˡ⁾ᵀ/√d_k)          computed        (w1, w2) = (1, 0)
    the other layers:         A⁽ˡ⁾ = A⁽ˡ⁻¹⁾                           reused          (w1, w2) = (0, 1)
    every layer:              out⁽ˡ⁾ = A⁽ˡ⁾ V⁽ˡ⁾                       its own values

The survey's rule Â⁽ˡ⁾ = w1·S⁽ˡ⁾ + w2·g(Â⁽ˡ⁻¹⁾) with g the identity and (w1, w2) switching between
(1, 0) and (0, 1) (:func:`~refattn.prior.prior_from_below`). The paper reuses the attention
distribution (post-softmax weights); passing up the pre-softmax map Â instead, as the rule does,
gives the same weights (softmax of the same map), so the two readings agree exactly. A reusing layer
needs no queries or keys of its own: only its values meet the shared weights.

Sharing off (b = 1) recomputes every layer: the vanilla stack. With a causal mask the shared map is
the first layer's causal map, so every layer of the block is causal.
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.checks import as_float
from ..common.ints import check_positive_int
from ..mechanism import Mechanism
from .lower_layer import LayerRule, StackProjections, attention_with_prior_from_below, stack_attention

__all__ = ["COMPUTE", "REUSE", "lazy_rules", "lazyformer_attention", "lazyformer_stack"]

LAZYFORMER = ('C. Ying, G. Ke, D. He, T.-Y. Liu, 2021, "LazyFormer: Self Attention with Lazy Update", '
              'arXiv:2102.12702')
#: A layer that computes its own map: w1 = 1, w2 = 0.
COMPUTE = LayerRule(1.0, 0.0)
#: A layer that reuses the map from below: w1 = 0, w2 = 1, g = identity.
REUSE = LayerRule(0.0, 1.0)
DEFAULT_LAYERS, DEFAULT_BLOCK = 4, 2


def lazy_rules(layers: int, block: int) -> tuple[LayerRule, ...]:
    """The rule of layers 2 … L: :data:`COMPUTE` for the first layer of each block of ``block`` layers, :data:`REUSE`
    for the others.

    Parameters
    ----------
    layers : int
        L, the number of layers.
    block : int
        Layers per lazy block (1: sharing off, every layer computes its map).

    Returns
    -------
    tuple of LayerRule
        ``layers`` − 1 of them.

    Examples
    --------
    >>> [r.w1 for r in lazy_rules(5, 2)]                           # layers 2 … 5: reuse, compute, reuse, compute
    [0.0, 1.0, 0.0, 1.0]
    """
    block = check_positive_int("block", block)
    return tuple(COMPUTE if l % block == 0 else REUSE for l in range(1, layers))


def lazyformer_attention(
    q: ArrayLike, k: ArrayLike, v: ArrayLike, shared: ArrayLike | None = None, *,
    causal: bool | str = False, scale: float | None = None, return_weights: bool = False,
) -> tuple[NDArray, NDArray] | tuple[NDArray, NDArray, NDArray]:
    r"""One Lazyformer attention layer: compute the map (first layer of a block) or reuse the one from below.

    .. math::

        \hat A^{(l)} = \begin{cases} Q K^\top / \sqrt{d_k} & \text{first layer of a block} \\
        \hat A^{(l-1)} & \text{otherwise} \end{cases}, \qquad
        \mathrm{out} = \operatorname{softmax}(\hat A^{(l)})\, V

    Parameters
    ----------
    q : (..., n, d_k) array_like or None
        This layer's queries, read only when it computes (None when it reuses).
    k : (..., m, d_k) array_like or None
        This layer's keys, likewise.
    v : (..., m, d_v) array_like
        This layer's values.
    shared : (..., n, m) array_like, optional
        The map passed up by the layer below (its ``combined``), to reuse; None: compute this
        layer's own (the first layer of a block).
    causal : {False, True, "top-left", "bottom-right"}, default False
        By selection, as in the block's first layer.
    scale : float, optional
        Default :math:`1/\sqrt{d_k}`.
    return_weights : bool, default False
        Also return the weights.

    Returns
    -------
    out : (..., n, d_v) ndarray
    combined : (..., n, m) ndarray
        The map, to pass up (the same array's values as ``shared`` when reusing).
    weights : (..., n, m) ndarray
        Only if ``return_weights``.

    References
    ----------
    .. [1] C. Ying, G. Ke, D. He, T.-Y. Liu, "LazyFormer: Self Attention with Lazy Update",
       arXiv:2102.12702v1 (lazy blocks).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v, v2 = rng.standard_normal((4, 5, 8))
    >>> out1, shared, A1 = lazyformer_attention(q, k, v, return_weights=True)       # computes
    >>> out2, _, A2 = lazyformer_attention(None, None, v2, shared, return_weights=True)   # reuses
    >>> bool(np.array_equal(A1, A2)), bool(np.allclose(out2, A1 @ v2))
    (True, True)
    """
    if shared is None:
        layer = attention_with_prior_from_below(q, k, v, causal=causal, scale=scale, return_weights=return_weights)
    else:                                                          # reuse: no queries or keys (w1 = 0 reads none)
        v, shared = as_float("v", v, min_ndim=2), as_float("shared", shared, min_ndim=2)
        no_q, no_k = np.zeros((*shared.shape[:-1], 0)), np.zeros((*v.shape[:-1], 0))   # (..., n, 0), (..., m, 0)
        layer = attention_with_prior_from_below(no_q, no_k, v, shared, rule=REUSE, causal=causal, scale=1.0,
                                                return_weights=return_weights)
    return (layer.output, layer.combined, layer.weights) if return_weights else (layer.output, layer.combined)


def lazyformer_stack(
    q: ArrayLike, k: ArrayLike, v: ArrayLike, *, layers: int | None = None, block: int = DEFAULT_BLOCK,
    projections: StackProjections | None = None, rng: np.random.Generator | int | None = None,
    causal: bool | str = False, scale: float | None = None, return_weights: bool = False,
) -> NDArray | tuple[NDArray, NDArray]:
    r"""An attention-only Lazyformer stack on one q, k, v: the first layer of each block computes the map, the
    others reuse it.

    .. math::

        \hat A^{(l)} = \begin{cases} (Q W_q^{(l)}) (K W_k^{(l)})^\top / \sqrt{d_k} & \text{first layer of a block}
        \\ \hat A^{(l-1)} & \text{otherwise} \end{cases}, \qquad
        \mathrm{out} = \operatorname{softmax}(\hat A^{(L)})\, V

    Parameters
    ----------
    q : (..., n, d_k) array_like
    k : (..., m, d_k) array_like
    v : (..., m, d_v) array_like
    layers : int, optional
        L; default 4, or the projections' count when they are given.
    block : int, default 2
        Layers per lazy block (:func:`lazy_rules`; 1: every layer computes its map).
    projections : StackProjections, optional
        W_q, W_k of layers 2 … L (:func:`~refattn.prior.init_stack_projections`; layer 1 reads q and k as they
        are); drawn from ``rng`` when not given.
    rng : numpy.random.Generator or int, optional
        Source of the projections; unused when they are given.
    causal : {False, True, "top-left", "bottom-right"}, default False
        By selection in every layer.
    scale : float, optional
        Default :math:`1/\sqrt{d_k}`, in every layer.
    return_weights : bool, default False
        Also return the top layer's weights.

    Returns
    -------
    out : (..., n, d_v) ndarray
    weights : (..., n, m) ndarray
        Only if ``return_weights``.

    Notes
    -----
    :func:`~refattn.prior.attention_stack` with :func:`lazy_rules` (why one q, k, v feed every layer: see
    there). One block over every layer is softmax attention exactly: each layer reuses the bottom layer's map.
    """
    block = check_positive_int("block", block)
    return stack_attention("lazyformer", q, k, v, lambda L: lazy_rules(L, block), layers=layers,
                           projections=projections, rng=rng, causal=causal, scale=scale, default_layers=DEFAULT_LAYERS,
                           return_weights=return_weights)


RECORD = Mechanism.of(
    lazyformer_stack,
    id="lazyformer", title="Lazyformer (attention maps shared within blocks of layers)", family="prior",
    section="4.5.2", paper=LAZYFORMER,
    equation=r"\hat A^{(l)} = w_1 S^{(l)} + w_2 \hat A^{(l-1)},\ (w_1, w_2) = (1, 0) \text{ first in a block, } "
             r"(0, 1) \text{ else}",
    time="O(L/b·n·m·d + L·n·m·d_v)", memory="O(n·m)", kind="attention", causal=True,
    figure="refattn.figures.lazyformer:lazyformer",
    examples=({"block": 1}, {"layers": 3, "block": 3}, {"layers": 5, "block": 2}),
    exact_options={"block": DEFAULT_LAYERS},
    exact_limit="one block over every layer (each reuses the bottom layer's map), or one layer",
    draws=("projections",),
)
