r"""Layer normalisation and the position-wise feed-forward network (Vaswani et al., 2017, §3.1, §3.3).

    LayerNorm(x) = γ ⊙ (x − μ) / √(σ² + ε) + β      μ, σ² the mean and (biased) variance of the row
    FFN(x)       = max(0, x W₁ + b₁) W₂ + b₂         applied to each position separately
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common import as_float, as_rng, check_positive_int, glorot

__all__ = [
    "LayerNormParams",
    "FeedForwardParams",
    "init_layer_norm",
    "init_feed_forward",
    "layer_norm",
    "feed_forward",
]


@dataclass(frozen=True)
class LayerNormParams:
    """Gain :math:`\\gamma` and bias :math:`\\beta` of a layer norm, each of shape (d_model,)."""

    gamma: NDArray
    beta: NDArray


def init_layer_norm(d_model: int) -> LayerNormParams:
    """The usual initialisation: :math:`\\gamma = 1`, :math:`\\beta = 0`.

    Parameters
    ----------
    d_model : int
        Width of the normalised rows.

    Returns
    -------
    LayerNormParams
    """
    check_positive_int("d_model", d_model)
    return LayerNormParams(np.ones(d_model), np.zeros(d_model))


def layer_norm(
    x: ArrayLike, gamma: ArrayLike | None = None, beta: ArrayLike | None = None, eps: float = 1e-5
) -> NDArray:
    r"""Layer normalisation over the last axis (Ba et al., 2016).

    .. math::

        \operatorname{LayerNorm}(x) = \gamma \odot \frac{x - \mu}{\sqrt{\sigma^2 + \epsilon}} + \beta,
        \qquad \mu = \tfrac{1}{d}\textstyle\sum_k x_k,\quad \sigma^2 = \tfrac{1}{d}\sum_k (x_k - \mu)^2

    Parameters
    ----------
    x : (..., d_model) array_like
        Input rows.
    gamma : (d_model,) array_like, optional
        Gain; default 1.
    beta : (d_model,) array_like, optional
        Bias; default 0.
    eps : float, default 1e-5
        Added to the variance (PyTorch's default).

    Returns
    -------
    y : (..., d_model) ndarray

    References
    ----------
    .. [1] J. L. Ba, J. R. Kiros, G. E. Hinton, "Layer Normalization", arXiv:1607.06450v1, Eq. (4).

    Examples
    --------
    >>> y = layer_norm([[1.0, 2.0, 3.0]], eps=0.0)
    >>> bool(np.allclose(y.mean(), 0.0)), bool(np.allclose(y.var(), 1.0))
    (True, True)
    """
    x = as_float("x", x, min_ndim=1)
    d = x.shape[-1]
    if isinstance(eps, bool) or not isinstance(eps, (int, float, np.integer, np.floating)) or not eps >= 0:
        raise ValueError(f"eps must be a non-negative number, got {eps!r}")
    mu = x.mean(axis=-1, keepdims=True)                            # (..., 1)  μ
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)             # (..., 1)  σ² (biased)
    y = (x - mu) / np.sqrt(var + eps)                              # (..., d)
    for name, p in (("gamma", gamma), ("beta", beta)):
        if p is not None and np.shape(p) != (d,):
            raise ValueError(f"{name} has shape {np.shape(p)} but x has d_model={d} (shape {x.shape})")
    if gamma is not None:
        y = y * as_float("gamma", gamma)                           # γ ⊙ ·
    if beta is not None:
        y = y + as_float("beta", beta)                             # + β
    return y


@dataclass(frozen=True)
class FeedForwardParams:
    """Parameters of the position-wise FFN.

    ``w_1`` (d_model, d_ff), ``b_1`` (d_ff,), ``w_2`` (d_ff, d_model), ``b_2`` (d_model,).
    """

    w_1: NDArray
    b_1: NDArray
    w_2: NDArray
    b_2: NDArray

    def __post_init__(self) -> None:
        if np.ndim(self.w_1) != 2:
            raise ValueError(f"w_1 must be a (d_model, d_ff) matrix, got shape {np.shape(self.w_1)}")
        d_model, d_ff = np.shape(self.w_1)
        expected = {"b_1": (d_ff,), "w_2": (d_ff, d_model), "b_2": (d_model,)}
        for name, shape in expected.items():
            if np.shape(getattr(self, name)) != shape:
                raise ValueError(
                    f"{name} has shape {np.shape(getattr(self, name))}; expected {shape} "
                    f"given w_1 of shape {np.shape(self.w_1)}"
                )


def init_feed_forward(rng, d_model: int, d_ff: int) -> FeedForwardParams:
    """Draw FFN parameters: Glorot uniform weights (``w_1`` then ``w_2``), zero biases.

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw.
    d_model : int
        Model width (512 in the paper).
    d_ff : int
        Inner width (2048 in the paper).

    Returns
    -------
    FeedForwardParams
    """
    rng = as_rng(rng)
    check_positive_int("d_model", d_model)
    check_positive_int("d_ff", d_ff)
    w_1, w_2 = glorot(rng, d_model, d_ff), glorot(rng, d_ff, d_model)
    return FeedForwardParams(w_1, np.zeros(d_ff), w_2, np.zeros(d_model))


def feed_forward(x: ArrayLike, params: FeedForwardParams) -> NDArray:
    r"""Position-wise feed-forward network (§3.3, Eq. 2).

    .. math::

        \operatorname{FFN}(x) = \max(0,\, x W_1 + b_1)\, W_2 + b_2

    Parameters
    ----------
    x : (..., d_model) array_like
        Input rows; each row (position) is transformed independently.
    params : FeedForwardParams
        :math:`W_1, b_1, W_2, b_2`.

    Returns
    -------
    y : (..., d_model) ndarray

    References
    ----------
    .. [1] A. Vaswani et al., "Attention Is All You Need", NeurIPS 2017, arXiv:1706.03762v7, Eq. (2).
    """
    x = as_float("x", x, min_ndim=1)
    if x.shape[-1] != params.w_1.shape[0]:
        raise ValueError(f"x has d_model={x.shape[-1]} (shape {x.shape}) but w_1 has shape {params.w_1.shape}")
    hidden = np.maximum(0.0, x @ params.w_1 + params.b_1)          # (..., d_ff)  max(0, xW₁ + b₁)
    return hidden @ params.w_2 + params.b_2                        # (..., d_model)
