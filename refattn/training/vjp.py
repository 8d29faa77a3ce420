r"""Backward passes (vector-Jacobian products) of the Transformer's parts beyond attention.

Each function takes the forward inputs and an upstream gradient ``d_y`` = ∂L/∂y and returns ∂L/∂input
for every input, by the chain rule written out (no autodiff). Attention itself uses
:func:`refattn.oracle.vjp.softmax_vjp`, :func:`~refattn.oracle.vjp.sdpa_vjp` and
:func:`~refattn.oracle.vjp.multi_head_vjp`.

    embedding     x = E[t]·s                      dE[v] = s·Σ_{t_i = v} dx_i
    positions     x' = x + P[:n]  (learned)       dx = dx',  dP[:n] = Σ_batch dx'
                  x' = x + PE     (sinusoids)     dx = dx'   (no parameter: the gradient passes through)
    linear        y = x W + b                     dW = xᵀ dy,  db = Σ dy,  dx = dy Wᵀ
    layer norm    x̂ = (x − μ)/σ,  y = γ ⊙ x̂ + β    dγ = Σ dy ⊙ x̂,  dβ = Σ dy,
                                                  dx = (g − mean(g) − x̂ ⊙ mean(g ⊙ x̂)) / σ,  g = γ ⊙ dy
    feed-forward  y = max(0, x W₁ + b₁) W₂ + b₂    the linear rule twice around ReLU's 1[x W₁ + b₁ > 0]
    cross-entropy L = −(1/N) Σ_i m_i log softmax(z_i)[y_i],  N = Σ_i m_i
                                                  dz_i = m_i (softmax(z_i) − onehot(y_i)) / N

σ = √(var + ε) with the biased variance; sums over every row (token and batch entry) the parameter was
shared by.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.checks import as_float, check_non_negative
from ..common.ints import check_positive_int
from ..core.ffn import FeedForwardParams

__all__ = [
    "FeedForwardGrads",
    "LayerNormGrads",
    "LinearGrads",
    "cross_entropy",
    "embedding_vjp",
    "feed_forward_vjp",
    "layer_norm_vjp",
    "linear_vjp",
    "position_vjp",
]


class LinearGrads(NamedTuple):
    """Gradients of ``y = x W + b``: ``dx`` (x's shape), ``dw`` (W's), ``db`` (b's, the column sums of dy)."""

    dx: NDArray
    dw: NDArray
    db: NDArray


class LayerNormGrads(NamedTuple):
    """Gradients of a layer norm: ``dx`` (x's shape), ``d_gamma`` and ``d_beta`` (each (d_model,))."""

    dx: NDArray
    d_gamma: NDArray
    d_beta: NDArray


class FeedForwardGrads(NamedTuple):
    """Gradients of the feed-forward network: ``dx`` (x's shape) and ``dparams`` (a FeedForwardParams)."""

    dx: NDArray
    dparams: FeedForwardParams


def _token_ids(name: str, tokens: ArrayLike, num_embeddings: int) -> NDArray:
    tokens = np.asarray(tokens)
    if tokens.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an integer array of token ids, got dtype {tokens.dtype} "
                        f"with shape {tokens.shape}")
    if tokens.size and (tokens.min() < 0 or tokens.max() >= num_embeddings):
        raise ValueError(f"{name} holds ids in [{tokens.min()}, {tokens.max()}] but there are "
                         f"{num_embeddings} embeddings")
    return tokens


def _upstream(d_y: ArrayLike, shape: tuple[int, ...], seen: str) -> NDArray:
    d_y = as_float("d_y", d_y)
    if d_y.shape != shape:
        raise ValueError(f"d_y has shape {d_y.shape} but the output has shape {shape} ({seen})")
    return d_y


def _rows(x: NDArray) -> NDArray:
    """(..., d) → (N, d): every leading axis becomes a row."""
    return x.reshape(-1, x.shape[-1])


def embedding_vjp(tokens: ArrayLike, d_x: ArrayLike, num_embeddings: int, *, scale: float = 1.0) -> NDArray:
    r"""Gradient of an embedding lookup ``x = table[tokens]·scale`` with respect to the table.

    .. math::

        x_i = s\, E_{t_i}, \qquad \bar E_v = s \sum_{i:\ t_i = v} \bar x_i

    :func:`refattn.core.transformer.embed` is :math:`E_{t_i}\sqrt{d_{model}} + PE_i` (§3.4, §3.5): its
    sinusoids have no parameter, so pass its upstream gradient here unchanged with
    ``scale=sqrt(d_model)``.

    Parameters
    ----------
    tokens : (...) array_like of int
        The looked-up ids.
    d_x : (..., d_model) array_like
        Upstream gradient :math:`\bar x`.
    num_embeddings : int
        Rows of the table (the vocabulary).
    scale : float, default 1.0
        :math:`s`.

    Returns
    -------
    d_table : (num_embeddings, d_model) ndarray
        Rows of ids that never occur are 0.

    Examples
    --------
    >>> embedding_vjp([[0, 2, 0]], np.ones((1, 3, 2)), 4, scale=2.0)
    array([[4., 4.],
           [0., 0.],
           [2., 2.],
           [0., 0.]])
    """
    num_embeddings = check_positive_int("num_embeddings", num_embeddings)
    tokens = _token_ids("tokens", tokens, num_embeddings)
    d_x = as_float("d_x", d_x, min_ndim=1)
    if d_x.shape[:-1] != tokens.shape:
        raise ValueError(f"d_x has shape {d_x.shape} but tokens has shape {tokens.shape}; "
                         "expected tokens' shape plus d_model")
    one_hot = tokens.reshape(-1, 1) == np.arange(num_embeddings)   # (N, V)  [t_i = v]
    return scale * (one_hot.T.astype(np.float64) @ _rows(d_x))     # (V, d_model)  s·Σ_{t_i = v} x̄_i


def position_vjp(d_x: ArrayLike, max_len: int) -> NDArray:
    r"""Gradient of a learned position table ``x' = x + P[:n]`` with respect to P.

    .. math::

        x'_{b,t} = x_{b,t} + P_t, \qquad \bar P_t = \sum_b \bar x'_{b,t} \ (t < n), \quad
        \bar P_t = 0 \ (t \ge n), \qquad \bar x = \bar x'

    (:func:`refattn.positional.learned_pe.learned_positional_encoding` with ``offset=0``). The input's
    gradient is the upstream gradient itself, as for the sinusoids, which have no parameter.

    Parameters
    ----------
    d_x : (..., n, d_model) array_like
        Upstream gradient :math:`\bar x'`.
    max_len : int
        Rows of the table; ``n <= max_len``.

    Returns
    -------
    d_table : (max_len, d_model) ndarray

    Examples
    --------
    >>> position_vjp(np.ones((3, 2, 1)), 4).ravel()
    array([3., 3., 0., 0.])
    """
    max_len = check_positive_int("max_len", max_len)
    d_x = as_float("d_x", d_x, min_ndim=2)
    n = d_x.shape[-2]
    if n > max_len:
        raise ValueError(f"d_x has n={n} positions (shape {d_x.shape}) but the table has max_len={max_len}")
    d_table = np.zeros((max_len, d_x.shape[-1]))
    d_table[:n] = d_x.reshape(-1, n, d_x.shape[-1]).sum(axis=0)   # Σ_b x̄'_{b,t}
    return d_table


def linear_vjp(x: ArrayLike, w: ArrayLike, d_y: ArrayLike) -> LinearGrads:
    r"""Gradients of ``y = x W + b`` (the output projection, and every projection of the model).

    .. math::

        \bar W = x^\top \bar y, \qquad \bar b = \textstyle\sum_i \bar y_i, \qquad \bar x = \bar y\, W^\top

    with the sums over every row (all leading axes).

    Parameters
    ----------
    x : (..., d_in) array_like
        Input.
    w : (d_in, d_out) array_like
        Weight :math:`W`.
    d_y : (..., d_out) array_like
        Upstream gradient :math:`\bar y`.

    Returns
    -------
    LinearGrads
        ``(dx, dw, db)``; ``db`` is the bias's gradient whether or not the layer has one.

    Examples
    --------
    >>> g = linear_vjp(np.ones((2, 3)), np.zeros((3, 4)), np.ones((2, 4)))
    >>> g.dw[0], g.db, g.dx.shape
    (array([2., 2., 2., 2.]), array([2., 2., 2., 2.]), (2, 3))
    """
    x = as_float("x", x, min_ndim=1)
    w = as_float("w", w)
    if w.ndim != 2 or w.shape[0] != x.shape[-1]:
        raise ValueError(f"w has shape {w.shape} but x has shape {x.shape}; expected (d_in, d_out) with "
                         f"d_in={x.shape[-1]}")
    d_y = _upstream(d_y, (*x.shape[:-1], w.shape[1]), f"x {x.shape}, w {w.shape}")
    dw = _rows(x).T @ _rows(d_y)                                   # (d_in, d_out)  xᵀ ȳ
    db = _rows(d_y).sum(axis=0)                                    # (d_out,)  Σ ȳ
    dx = d_y @ w.T                                                 # (..., d_in)  ȳ Wᵀ
    return LinearGrads(dx, dw, db)


def layer_norm_vjp(x: ArrayLike, d_y: ArrayLike, gamma: ArrayLike | None = None, eps: float = 1e-5) -> LayerNormGrads:
    r"""Gradients of :func:`refattn.layer_norm` over the last axis.

    .. math::

        \hat x = \frac{x - \mu}{\sigma},\ \sigma = \sqrt{\sigma^2_x + \epsilon}, \quad y = \gamma \odot \hat x + \beta

        \bar\gamma = \textstyle\sum \bar y \odot \hat x, \quad \bar\beta = \sum \bar y, \quad
        \bar x = \frac{1}{\sigma}\Big(g - \overline{g} - \hat x\, \overline{g \odot \hat x}\Big),
        \quad g = \gamma \odot \bar y

    where :math:`\overline{\cdot}` is the mean over the row's *d* entries (the two terms are the
    gradients through μ and through σ) and the sums for γ, β run over every row.

    Parameters
    ----------
    x : (..., d_model) array_like
        The forward input.
    d_y : (..., d_model) array_like
        Upstream gradient :math:`\bar y`.
    gamma : (d_model,) array_like, optional
        Gain; default 1. (β does not enter any gradient.)
    eps : float, default 1e-5
        As in the forward pass.

    Returns
    -------
    LayerNormGrads
        ``(dx, d_gamma, d_beta)``.

    References
    ----------
    .. [1] J. L. Ba, J. R. Kiros, G. E. Hinton, "Layer Normalization", arXiv:1607.06450v1, Eq. (4).

    Examples
    --------
    >>> g = layer_norm_vjp(np.array([[1.0, 2.0, 4.0]]), np.array([[0.3, -1.0, 2.0]]))
    >>> bool(abs(g.dx.sum()) < 1e-15)              # a shift of x leaves the output unchanged
    True
    """
    x = as_float("x", x, min_ndim=1)
    d = x.shape[-1]
    check_non_negative("eps", eps)
    d_y = _upstream(d_y, x.shape, f"x {x.shape}")
    if gamma is not None:
        gamma = as_float("gamma", gamma)
        if gamma.shape != (d,):
            raise ValueError(f"gamma has shape {gamma.shape} but x has d_model={d} (shape {x.shape})")
    mu = x.mean(axis=-1, keepdims=True)                            # (..., 1)  μ
    sigma = np.sqrt(((x - mu) ** 2).mean(axis=-1, keepdims=True) + eps)   # (..., 1)  √(σ² + ε)
    x_hat = (x - mu) / sigma                                       # (..., d)  x̂
    d_gamma = _rows(d_y * x_hat).sum(axis=0)                       # (d,)  Σ ȳ ⊙ x̂
    d_beta = _rows(d_y).sum(axis=0)                                # (d,)  Σ ȳ
    g = d_y if gamma is None else d_y * gamma                      # (..., d)  γ ⊙ ȳ
    dx = (g - g.mean(axis=-1, keepdims=True)
          - x_hat * (g * x_hat).mean(axis=-1, keepdims=True)) / sigma   # (..., d)
    return LayerNormGrads(dx, d_gamma, d_beta)


def feed_forward_vjp(x: ArrayLike, params: FeedForwardParams, d_y: ArrayLike) -> FeedForwardGrads:
    r"""Gradients of :func:`refattn.feed_forward`, :math:`\max(0, x W_1 + b_1) W_2 + b_2` (§3.3, Eq. 2).

    .. math::

        a = x W_1 + b_1,\ h = \max(0, a): \quad
        \bar W_2 = h^\top \bar y,\ \bar b_2 = \textstyle\sum \bar y,\ \bar h = \bar y W_2^\top,\
        \bar a = \bar h \odot 1[a > 0],\ \bar W_1 = x^\top \bar a,\ \bar b_1 = \textstyle\sum \bar a,\
        \bar x = \bar a W_1^\top

    (the subgradient 0 where :math:`a = 0` exactly, as PyTorch's ReLU).

    Parameters
    ----------
    x : (..., d_model) array_like
        The forward input.
    params : FeedForwardParams
        :math:`W_1, b_1, W_2, b_2`.
    d_y : (..., d_model) array_like
        Upstream gradient :math:`\bar y`.

    Returns
    -------
    FeedForwardGrads
        ``(dx, dparams)``.

    References
    ----------
    .. [1] A. Vaswani et al., "Attention Is All You Need", NeurIPS 2017, arXiv:1706.03762v7, Eq. (2).

    Examples
    --------
    >>> from refattn import init_feed_forward
    >>> p = init_feed_forward(0, 4, 8)
    >>> g = feed_forward_vjp(np.ones((3, 4)), p, np.ones((3, 4)))
    >>> g.dx.shape, g.dparams.w_1.shape, g.dparams.b_2
    ((3, 4), (4, 8), array([3., 3., 3., 3.]))
    """
    if not isinstance(params, FeedForwardParams):
        raise TypeError(f"params must be a FeedForwardParams, got {type(params).__name__}")
    x = as_float("x", x, min_ndim=1)
    if x.shape[-1] != params.w_1.shape[0]:
        raise ValueError(f"x has d_model={x.shape[-1]} (shape {x.shape}) but w_1 has shape {params.w_1.shape}")
    a = x @ params.w_1 + params.b_1                                # (..., d_ff)  x W₁ + b₁
    hidden = np.maximum(0.0, a)                                    # (..., d_ff)  max(0, a)
    outer = linear_vjp(hidden, params.w_2, d_y)                    # W₂, b₂ and h̄
    d_a = np.where(a > 0, outer.dx, 0.0)                           # (..., d_ff)  h̄ ⊙ 1[a > 0]
    inner = linear_vjp(x, params.w_1, d_a)                         # W₁, b₁ and x̄
    return FeedForwardGrads(inner.dx, FeedForwardParams(inner.dw, inner.db, outer.dw, outer.db))


def cross_entropy(
    logits: ArrayLike, targets: ArrayLike, loss_mask: ArrayLike | None = None,
) -> tuple[float, NDArray]:
    r"""Mean cross-entropy over the unmasked target tokens, and its gradient with respect to the logits.

    .. math::

        L = -\frac{1}{N} \sum_i m_i \log \operatorname{softmax}(z_i)_{y_i}, \quad N = \sum_i m_i,
        \qquad \bar z_i = \frac{m_i}{N}\big(\operatorname{softmax}(z_i) - \operatorname{onehot}(y_i)\big)

    The log-softmax is max-shifted (log-sum-exp), so large logits do not overflow.

    Parameters
    ----------
    logits : (..., V) array_like
        :math:`z`, one row of scores per token.
    targets : (...) array_like of int
        :math:`y`, the id each row should score highest, in [0, V).
    loss_mask : (...) array_like of bool, optional
        :math:`m`: ``True`` where a token counts (e.g. only the predicted half of a sequence); default
        every token. Masked rows get a zero gradient, whatever their target holds.

    Returns
    -------
    loss : float
    d_logits : (..., V) ndarray
        :math:`\partial L / \partial z`.

    Examples
    --------
    >>> loss, d = cross_entropy(np.zeros((1, 2, 4)), [[1, 3]])       # uniform over 4: L = ln 4
    >>> bool(np.isclose(loss, np.log(4))), d[0, 0]
    (True, array([ 0.125, -0.375,  0.125,  0.125]))
    """
    logits = as_float("logits", logits, min_ndim=1)
    V = logits.shape[-1]
    targets = _token_ids("targets", targets, V)
    if targets.shape != logits.shape[:-1]:
        raise ValueError(f"targets has shape {targets.shape} but logits has shape {logits.shape}; expected "
                         f"{logits.shape[:-1]}")
    if loss_mask is None:
        kept = np.ones(targets.shape, dtype=bool)
    else:
        kept = np.asarray(loss_mask)
        if kept.dtype != np.bool_:
            raise TypeError(f"loss_mask must be a boolean array (True = counts), got dtype {kept.dtype}")
        if kept.shape != targets.shape:
            raise ValueError(f"loss_mask has shape {kept.shape} but targets has shape {targets.shape}")
    N = int(kept.sum())
    if N == 0:
        raise ValueError(f"loss_mask (shape {kept.shape}) keeps no token: the mean over no token is undefined")
    shifted = logits - logits.max(axis=-1, keepdims=True)          # (..., V)  z − max z
    log_z = np.log(np.exp(shifted).sum(axis=-1, keepdims=True))    # (..., 1)  log Σ exp
    log_p = shifted - log_z                                        # (..., V)  log softmax(z)
    picked = np.take_along_axis(log_p, targets[..., None], axis=-1)[..., 0]   # (...)  log p(y_i)
    loss = -np.sum(np.where(kept, picked, 0.0)) / N
    d_logits = np.exp(log_p)                                       # (..., V)  softmax(z)
    np.put_along_axis(d_logits, targets[..., None],
                      np.take_along_axis(d_logits, targets[..., None], axis=-1) - 1.0, axis=-1)   # − onehot(y)
    d_logits = np.where(kept[..., None], d_logits / N, 0.0)        # m_i / N
    return float(loss), d_logits
