r"""Layer normalisation with the residual connection (Vaswani et al., 2017, §3.1; Ba et al., 2016).

    LayerNorm(x) = γ ⊙ (x − μ) / √(σ² + ε) + β      μ, σ² the mean and (biased) variance of the row
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.checks import as_float, check_bool, check_non_negative
from ..common.ints import check_positive_int
from ..mechanism import Mechanism
from ..papers import VASWANI

__all__ = ["LayerNormParams", "init_layer_norm", "layer_norm"]


@dataclass(frozen=True)
class LayerNormParams:
    """Gain :math:`\\gamma` and bias :math:`\\beta` of a layer norm, each of shape (d_model,).

    ``beta`` is None for a layer norm without bias (PyTorch's ``LayerNorm(bias=False)``).
    """

    gamma: NDArray
    beta: NDArray | None


def init_layer_norm(d_model: int, *, bias: bool = True) -> LayerNormParams:
    """The usual initialisation: :math:`\\gamma = 1`, :math:`\\beta = 0`.

    Parameters
    ----------
    d_model : int
        Width of the normalised rows.
    bias : bool, default True
        Give the norm a bias :math:`\\beta`; False: ``beta`` is None (PyTorch's ``bias=False``).

    Returns
    -------
    LayerNormParams
    """
    check_positive_int("d_model", d_model)
    return LayerNormParams(np.ones(d_model), np.zeros(d_model) if check_bool("bias", bias) else None)


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
    check_non_negative("eps", eps)
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


RECORD = Mechanism(
    id="layer_norm", title="Layer normalisation with residual (post-LN and pre-LN)", family="vanilla",
    section="2.1 (Vaswani §3.1)", paper=VASWANI, equation=r"\operatorname{LayerNorm}(x + \operatorname{Sublayer}(x))",
    time="O(n·d)", memory="O(n·d)", kind="component", function=layer_norm, causal=True,
    figure="refattn.figures.vanilla:layer_norm", exact_options=None, exact_limit="a component (no apply)",
)
