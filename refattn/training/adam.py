r"""Adam (Kingma & Ba, 2015, Alg. 1) over parameter pytrees, deterministic.

    m_t = β₁ m_{t−1} + (1 − β₁) g_t              first moment
    v_t = β₂ v_{t−1} + (1 − β₂) g_t²             second (raw) moment
    m̂_t = m_t / (1 − β₁ᵗ),  v̂_t = v_t / (1 − β₂ᵗ)  bias corrections
    θ_t = θ_{t−1} − α m̂_t / (√v̂_t + ε)

Defaults are the paper's (α = 0.001, β₁ = 0.9, β₂ = 0.999, ε = 1e-8); the Transformer paper trained with
β₂ = 0.98, ε = 1e-9 (Vaswani et al., 2017, §5.3). Every operation is elementwise in a fixed order, so
the same gradients give the same parameters bit for bit.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .tree import flatten, tree_map

__all__ = ["AdamState", "adam_init", "adam_update", "global_norm"]


@dataclass(frozen=True)
class AdamState:
    """Adam's state: the step count t and the moment trees m, v (each of the parameters' structure)."""

    step: int
    m: Any
    v: Any


def adam_init(params) -> AdamState:
    """The state before the first step: t = 0, m = v = 0.

    Parameters
    ----------
    params : parameter tree
        E.g. a Seq2SeqParams or DecoderOnlyParams.

    Returns
    -------
    AdamState
    """
    zeros = tree_map(np.zeros_like, params)
    return AdamState(0, zeros, zeros)


def adam_update(
    params, grads, state: AdamState, *, lr: float = 1e-3, beta1: float = 0.9, beta2: float = 0.999,
    eps: float = 1e-8,
) -> tuple[Any, AdamState]:
    r"""One Adam step.

    .. math::

        m_t = \beta_1 m_{t-1} + (1 - \beta_1) g_t, \quad v_t = \beta_2 v_{t-1} + (1 - \beta_2) g_t^2,
        \quad \theta_t = \theta_{t-1} - \alpha\, \frac{m_t / (1 - \beta_1^t)}{\sqrt{v_t / (1 - \beta_2^t)} + \epsilon}

    Parameters
    ----------
    params : parameter tree
        :math:`\theta_{t-1}`.
    grads : parameter tree
        :math:`g_t`, of ``params``' structure.
    state : AdamState
        After step t − 1 (:func:`adam_init` before the first).
    lr : float, default 1e-3
        :math:`\alpha` (a schedule is the caller's: pass this step's value).
    beta1 : float, default 0.9
        :math:`\beta_1`.
    beta2 : float, default 0.999
        :math:`\beta_2` (0.98 in the Transformer paper).
    eps : float, default 1e-8
        :math:`\epsilon` (1e-9 in the Transformer paper).

    Returns
    -------
    params : parameter tree
        :math:`\theta_t` (new arrays; the inputs are not modified).
    state : AdamState

    References
    ----------
    .. [1] D. P. Kingma, J. Ba, "Adam: A Method for Stochastic Optimization", ICLR 2015, arXiv:1412.6980v9,
       Algorithm 1.
    .. [2] A. Vaswani et al., "Attention Is All You Need", NeurIPS 2017, arXiv:1706.03762v7, §5.3.

    Examples
    --------
    >>> theta = np.array([1.0, -2.0])
    >>> new, state = adam_update(theta, np.array([0.5, -3.0]), adam_init(theta), lr=0.1)
    >>> new, state.step                            # the first step moves every entry by lr·sign(g)
    (array([ 0.9, -1.9]), 1)
    """
    for name, value, low, high in (("lr", lr, 0.0, np.inf), ("beta1", beta1, 0.0, 1.0), ("beta2", beta2, 0.0, 1.0),
                                   ("eps", eps, 0.0, np.inf)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
                or not low <= value < high:
            raise ValueError(f"{name} must be a number in [{low}, {high}), got {value!r}")
    if not isinstance(state, AdamState):
        raise TypeError(f"state must be an AdamState (see adam_init), got {type(state).__name__}")
    t = state.step + 1
    m = tree_map(lambda m, g: beta1 * m + (1 - beta1) * g, state.m, grads)      # m_t
    v = tree_map(lambda v, g: beta2 * v + (1 - beta2) * g * g, state.v, grads)  # v_t
    c1, c2 = 1 - beta1 ** t, 1 - beta2 ** t                                      # bias corrections
    new = tree_map(lambda p, m, v: p - lr * (m / c1) / (np.sqrt(v / c2) + eps), params, m, v)
    return new, AdamState(t, m, v)


def global_norm(tree) -> float:
    r"""The Euclidean norm of all of a tree's arrays together, :math:`\sqrt{\sum_\ell \lVert g_\ell \rVert^2}`.

    Parameters
    ----------
    tree : parameter tree
        E.g. gradients, to clip them to a norm: ``tree_map(lambda g: g * min(1, c / norm), grads)``.

    Returns
    -------
    float

    Examples
    --------
    >>> global_norm((np.array([3.0]), np.array([[4.0]])))
    5.0
    """
    return float(np.sqrt(sum(float(np.sum(leaf * leaf)) for leaf in flatten(tree))))
