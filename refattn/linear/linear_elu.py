r"""Deterministic feature maps φ for linearised attention (survey §4.2).

    sim(q, k) = φ(q) φ(k)ᵀ  ≥ 0,   so  softmax-like weights  α_ij = φ(q_i)φ(k_j)ᵀ / Σ_l φ(q_i)φ(k_l)ᵀ

Random-feature maps (Performer's FAVOR+) live in :mod:`refattn.linear.performer`.
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.checks import as_float
from ..mechanism import Mechanism
from ..papers import KATHAROPOULOS
from .attention import LINEAR_EQUATION, linear_attention

__all__ = ["elu_feature_map"]


def elu_feature_map(x: ArrayLike) -> NDArray:
    r"""The Linear Transformer's feature map, :math:`\phi(x) = \operatorname{elu}(x) + 1`.

    .. math::

        \phi(x) = \begin{cases} x + 1 & x > 0 \\ e^{x} & x \le 0 \end{cases}
                = e^{\min(x, 0)} + \max(x, 0)

    (the second form is how it is computed: no branch to select, no overflow).

    Strictly positive, so every similarity :math:`\phi(q)\phi(k)^\top` and every denominator is
    positive.

    Parameters
    ----------
    x : (..., d) array_like
        Queries or keys.

    Returns
    -------
    phi : (..., d) ndarray
        F = d features.

    References
    ----------
    .. [1] A. Katharopoulos, A. Vyas, N. Pappas, F. Fleuret, "Transformers are RNNs: Fast
       Autoregressive Transformers with Linear Attention", ICML 2020, arXiv:2006.16236v3, §3.2.1.

    Examples
    --------
    >>> elu_feature_map([-1.0, 0.0, 2.0])
    array([0.36787944, 1.        , 3.        ])
    """
    x = as_float("x", x)
    return np.exp(np.minimum(x, 0)) + np.maximum(x, 0)             # elu(x) + 1 (e^x never overflows: x <= 0)


RECORD = Mechanism.of(
    linear_attention, fixed={"feature_map": elu_feature_map}, options=("method", "eps", "chunk_size"),
    id="linear_elu", title="Linear Transformer (φ = elu + 1)", family="linear", section="4.2", paper=KATHAROPOULOS,
    equation=LINEAR_EQUATION, time="O((n + m)·F·d_v)", memory="O(F·d_v) state", kind="attention",
    methods=("equation", "right", "scan", "chunk", "auto"), examples=({"eps": 1e-6}, {"chunk_size": 3}),
    causal=True, figure="refattn.figures.linear:linear_elu",
    exact_options=None, exact_limit="none: a different kernel, elu(q)+1 · elu(k)+1 in place of exp(q·k/√d)",
)
