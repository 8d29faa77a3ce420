r"""The position-wise feed-forward network (Vaswani et al., 2017, §3.3, Eq. 2).

    FFN(x) = max(0, x W₁ + b₁) W₂ + b₂         applied to each position separately

Other activations (``activation=``): GELU, x·Φ(x) exactly or with its tanh approximation
(Hendrycks & Gimpel, 2016, arXiv:1606.08415v5), and the gated units of Shazeer (2020,
arXiv:2002.05202v1, Eqs. 5-6), which need a second input matrix V (``w_gate``):

    FFN_SwiGLU(x) = (Swish₁(x W₁ + b₁) ⊗ (x V + c)) W₂ + b₂        Swish₁(z) = z·σ(z)
    FFN_GEGLU(x)  = (GELU(x W₁ + b₁) ⊗ (x V + c)) W₂ + b₂

The paper's gated units have no biases; b₁, c, b₂ may each be None (PyTorch's ``bias=False``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import erf, expit

from ..common.checks import as_float, as_rng, check_bool, check_choice
from ..common.init import glorot
from ..common.ints import check_positive_int
from ..mechanism import Mechanism
from ..papers import VASWANI

__all__ = ["ACTIVATIONS", "FeedForwardParams", "init_feed_forward", "feed_forward"]

ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "swiglu", "geglu")
GATED = ("swiglu", "geglu")


@dataclass(frozen=True)
class FeedForwardParams:
    """Parameters of the position-wise FFN.

    ``w_1`` (d_model, d_ff), ``b_1`` (d_ff,), ``w_2`` (d_ff, d_model), ``b_2`` (d_model,); for the
    gated activations also ``w_gate`` (d_model, d_ff), Shazeer's V, and ``b_gate`` (d_ff,). Any bias
    may be None (no bias).
    """

    w_1: NDArray
    b_1: NDArray | None
    w_2: NDArray
    b_2: NDArray | None
    w_gate: NDArray | None = None
    b_gate: NDArray | None = None

    def __post_init__(self) -> None:
        if np.ndim(self.w_1) != 2:
            raise ValueError(f"w_1 must be a (d_model, d_ff) matrix, got shape {np.shape(self.w_1)}")
        d_model, d_ff = np.shape(self.w_1)
        expected = {"b_1": (d_ff,), "w_2": (d_ff, d_model), "b_2": (d_model,), "w_gate": (d_model, d_ff),
                    "b_gate": (d_ff,)}
        if self.w_gate is None and self.b_gate is not None:
            raise ValueError(f"b_gate (shape {np.shape(self.b_gate)}) needs w_gate")
        for name, shape in expected.items():
            if name != "w_2" and getattr(self, name) is None:
                continue
            if np.shape(getattr(self, name)) != shape:
                raise ValueError(
                    f"{name} has shape {np.shape(getattr(self, name))}; expected {shape} "
                    f"given w_1 of shape {np.shape(self.w_1)}"
                )


def init_feed_forward(rng, d_model: int, d_ff: int, *, gated: bool = False, bias: bool = True) -> FeedForwardParams:
    """Draw FFN parameters: Glorot uniform weights (``w_1``, ``w_2``, then ``w_gate``), zero biases.

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw.
    d_model : int
        Model width (512 in the paper).
    d_ff : int
        Inner width (2048 in the paper).
    gated : bool, default False
        Also draw ``w_gate`` (and ``b_gate``), for ``activation="swiglu"`` or ``"geglu"``.
    bias : bool, default True
        Give the linear maps biases (PyTorch's ``bias``); False: every bias is None.

    Returns
    -------
    FeedForwardParams
    """
    rng = as_rng(rng)
    check_positive_int("d_model", d_model)
    check_positive_int("d_ff", d_ff)
    b = (lambda size: np.zeros(size)) if check_bool("bias", bias) else (lambda size: None)
    w_1, w_2 = glorot(rng, d_model, d_ff), glorot(rng, d_ff, d_model)
    gate = (glorot(rng, d_model, d_ff), b(d_ff)) if check_bool("gated", gated) else ()
    return FeedForwardParams(w_1, b(d_ff), w_2, b(d_model), *gate)


def feed_forward(x: ArrayLike, params: FeedForwardParams, *, activation: str = "relu") -> NDArray:
    r"""Position-wise feed-forward network (§3.3, Eq. 2).

    .. math::

        \operatorname{FFN}(x) = \max(0,\, x W_1 + b_1)\, W_2 + b_2

    Parameters
    ----------
    x : (..., d_model) array_like
        Input rows; each row (position) is transformed independently.
    params : FeedForwardParams
        :math:`W_1, b_1, W_2, b_2` (and :math:`V, c` = ``w_gate``, ``b_gate`` for the gated units).
    activation : {"relu", "gelu", "gelu_tanh", "swiglu", "geglu"}, default "relu"
        "relu": the paper's max(0, ·). "gelu": :math:`z\,\Phi(z) = \tfrac12 z (1 + \operatorname{erf}(z/\sqrt2))`
        (PyTorch ``GELU(approximate="none")``). "gelu_tanh": :math:`\tfrac12 z (1 + \tanh(\sqrt{2/\pi}
        (z + 0.044715 z^3)))` (``approximate="tanh"``). "swiglu", "geglu": Shazeer's gated units,
        Swish₁ (SiLU) or exact GELU of :math:`xW_1 + b_1` times :math:`xV + c`; they need ``w_gate``
        and the others refuse it.

    Returns
    -------
    y : (..., d_model) ndarray

    References
    ----------
    .. [1] A. Vaswani et al., "Attention Is All You Need", NeurIPS 2017, arXiv:1706.03762v7, Eq. (2).
    .. [2] D. Hendrycks and K. Gimpel, "Gaussian Error Linear Units (GELUs)", arXiv:1606.08415v5, §2.
    .. [3] N. Shazeer, "GLU Variants Improve Transformer", arXiv:2002.05202v1, Eqs. (5)-(6).

    Examples
    --------
    >>> params = FeedForwardParams(np.eye(2), None, np.eye(2), None, w_gate=np.eye(2))
    >>> feed_forward([[0.0, 1.0]], params, activation="swiglu")    # (z·σ(z))·z at z = 1: σ(1)
    array([[0.        , 0.73105858]])
    """
    x = as_float("x", x, min_ndim=1)
    check_choice("activation", activation, ACTIVATIONS)
    if x.shape[-1] != params.w_1.shape[0]:
        raise ValueError(f"x has d_model={x.shape[-1]} (shape {x.shape}) but w_1 has shape {params.w_1.shape}")
    if (activation in GATED) != (params.w_gate is not None):
        raise ValueError(f'activation="{activation}" ' + ("needs params.w_gate (init_feed_forward(gated=True))"
                         if activation in GATED else f"has no gate, but params.w_gate has shape {params.w_gate.shape}"))
    z = _affine(x, params.w_1, params.b_1)                         # (..., d_ff)  xW₁ + b₁
    if activation == "relu":
        hidden = np.maximum(0.0, z)                                # max(0, z)
    elif activation == "gelu_tanh":
        hidden = 0.5 * z * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (z + 0.044715 * z**3)))
    elif activation == "swiglu":
        hidden = z * expit(z)                                      # Swish₁(z) = z·σ(z)
    else:                                                          # "gelu", "geglu"
        hidden = 0.5 * z * (1.0 + erf(z / math.sqrt(2.0)))         # z·Φ(z)
    if activation in GATED:
        hidden = hidden * _affine(x, params.w_gate, params.b_gate)  # ⊗ (xV + c)
    return _affine(hidden, params.w_2, params.b_2)                 # (..., d_model)


def _affine(x: NDArray, w: NDArray, b: NDArray | None) -> NDArray:
    """``x @ w + b`` (no ``b`` when None)."""
    y = x @ w
    return y if b is None else y + b


RECORD = Mechanism(
    id="ffn", title="Position-wise feed-forward network", family="vanilla", section="2.1 (Vaswani §3.3)",
    paper=VASWANI, equation=r"\max(0, xW_1 + b_1) W_2 + b_2", time="O(n·d·d_ff)", memory="O(n·d_ff)",
    kind="component", function=feed_forward, causal=True, figure="refattn.figures.vanilla:ffn", exact_options=None,
    exact_limit="a component (no apply)",
)
