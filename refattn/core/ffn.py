r"""The position-wise feed-forward network (Vaswani et al., 2017, §3.3, Eq. 2).

    FFN(x) = max(0, x W₁ + b₁) W₂ + b₂         applied to each position separately
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common import as_float, as_rng, check_positive_int, glorot
from ..mechanism import Mechanism
from ..papers import VASWANI

__all__ = ["FeedForwardParams", "init_feed_forward", "feed_forward"]


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


RECORD = Mechanism(
    id="ffn", title="Position-wise feed-forward network", family="vanilla", section="2.1 (Vaswani §3.3)",
    paper=VASWANI, equation=r"\max(0, xW_1 + b_1) W_2 + b_2", time="O(n·d·d_ff)", memory="O(n·d_ff)",
    kind="component", function=feed_forward, causal=True, figure="refattn.figures.vanilla:ffn", exact_options=None,
    exact_limit="a component (no apply)",
)
