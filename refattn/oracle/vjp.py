r"""Analytic backward passes (vector-Jacobian products) of the core mechanisms, in float64.

Each function takes the forward inputs and an upstream gradient ``d_out`` = ∂L/∂out and returns
∂L/∂input for every input, by the chain rule written out (no autodiff):

    softmax      y = softmax(x)                  dx = y ⊙ (dy − Σ_j dy_j y_j)
    sdpa         S = Q Kᵀ·scale + B, A = softmax(S), O = A V
                 dV = Aᵀ dO,  dA = dO Vᵀ,  dS = A ⊙ (dA − rowsum(dA ⊙ A)),
                 dQ = scale·dS K,  dK = scale·dSᵀ Q,  dB = dS
    multi-head   the projections' chain rule around sdpa:  y = x W + b  →  dW = xᵀ dy, db = Σ dy, dx = dy Wᵀ
    linear       out_i = φ(q_i) Σ_j φ(k_j)ᵀ v_j / φ(q_i) Σ_j φ(k_j)ᵀ,  φ = elu + 1
                 dsim_ij = (dO_i · (v_j − out_i)) / den_i,  dv_j = Σ_i A_ij dO_i,
                 dφ(q_i) = Σ_j dsim_ij φ(k_j),  dφ(k_j) = Σ_i dsim_ij φ(q_i),  dx = dφ(x) ⊙ φ'(x)

Masking is by selection, as in the forward passes: a masked pair (i, j) contributes an exact 0 to
every gradient, so NaN or Inf stored in a masked-out key, value or upstream-gradient row cannot
reach the gradient of anything that does not use it. Inputs that were broadcast in the forward
pass (a key shared by a batch of queries, a mask without a batch axis) get their gradient summed
over the broadcast axes, back to their own shape.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common import (
    as_float,
    broadcast_batch,
    causal_alignment,
    check_choice,
    check_positive_int,
    check_qkv,
    check_scale,
    default_scale,
    weighted_values,
)
from ..core.masks import attention_mask, check_mask_shape
from ..core.multi_head import MultiHeadParams, head_shared, project_heads
from ..core.sdpa import scaled_dot_product_attention
from ..core.softmax import FULLY_MASKED_POLICIES, masked_softmax
from ..linear._common import check_denominators, safe_denominator
from ..linear.linear_elu import elu_feature_map

__all__ = [
    "MultiHeadGrads",
    "SdpaGrads",
    "linear_attention_vjp",
    "multi_head_vjp",
    "sdpa_vjp",
    "softmax_vjp",
]

LINEAR_METHODS = ("equation", "scan")


class SdpaGrads(NamedTuple):
    """Gradients of scaled dot-product attention, each of its input's own shape.

    Attributes
    ----------
    dq : (..., n, d_k) ndarray
    dk : (..., m, d_k) ndarray
    dv : (..., m, d_v) ndarray
    d_bias : ndarray or None
        Of the float mask's shape when ``mask`` was an additive bias, else ``None``.
    """

    dq: NDArray
    dk: NDArray
    dv: NDArray
    d_bias: NDArray | None


class MultiHeadGrads(NamedTuple):
    """Gradients of multi-head attention.

    Attributes
    ----------
    dx_q : (..., n, d_model) ndarray
    dx_kv : (..., m, d_model) ndarray
        Includes the value path's gradient when ``x_v`` was not given (then ``x_kv`` fed both).
    dx_v : (..., m, d_model) ndarray or None
        ``None`` when ``x_v`` was not given.
    dparams : MultiHeadParams
        Gradients of every weight and bias, ``None`` where the parameters have no bias.
    """

    dx_q: NDArray
    dx_kv: NDArray
    dx_v: NDArray | None
    dparams: MultiHeadParams


# --------------------------------------------------------------------------------------------- softmax


def softmax_vjp(
    x: ArrayLike,
    d_y: ArrayLike,
    *,
    axis: int = -1,
    mask: ArrayLike | None = None,
    fully_masked: str = "zero",
) -> NDArray:
    r"""Vector-Jacobian product of :func:`refattn.softmax`.

    .. math::

        y = \operatorname{softmax}(x), \qquad
        \frac{\partial y_j}{\partial x_l} = y_j(\delta_{jl} - y_l), \qquad
        \bar x_l = \sum_j \bar y_j \frac{\partial y_j}{\partial x_l}
                 = y_l \Big(\bar y_l - \sum_j \bar y_j y_j\Big)

    with the sum over the kept entries of the slice.

    Parameters
    ----------
    x : array_like of float
        Logits, as given to :func:`refattn.softmax`.
    d_y : array_like of float, same shape as ``x``
        Upstream gradient :math:`\bar y = \partial L / \partial y`.
    axis : int, default -1
        Axis the softmax normalised over.
    mask : array_like of bool, optional
        ``True`` where an entry takes part; must broadcast to ``x.shape``.
    fully_masked : {"zero", "nan", "uniform"}, default "zero"
        The forward pass's policy for a slice with no entry left. "zero" and "uniform" slices are
        constants of ``x``: zero gradient. "nan" slices get a NaN gradient (what autodiff through
        the 0/0 gives).

    Returns
    -------
    dx : ndarray, same shape as ``x``
        0 on masked entries (whatever ``d_y`` holds there).

    Examples
    --------
    >>> x, d_y = np.array([0.5, -1.0, 2.0]), np.array([1.0, 0.0, 0.0])
    >>> dx = softmax_vjp(x, d_y)
    >>> bool(abs(dx.sum()) < 1e-15)                  # softmax is invariant to a shift of x
    True
    >>> softmax_vjp([1.0, np.nan], [1.0, np.nan], mask=[True, False])
    array([0., 0.])
    """
    x = as_float("x", x)
    d_y = as_float("d_y", d_y)
    if x.ndim == 0:
        raise ValueError("x must have at least one dimension, got a scalar")
    if d_y.shape != x.shape:
        raise ValueError(f"d_y has shape {d_y.shape} but x has shape {x.shape}; they must be equal")
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool) or not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis must be an int in [{-x.ndim}, {x.ndim}), got {axis!r}")
    check_choice("fully_masked", fully_masked, FULLY_MASKED_POLICIES)
    kept = np.ones(x.shape, dtype=bool)
    if mask is not None:
        mask = np.asarray(mask)
        if mask.dtype != np.bool_:
            raise TypeError(f"mask must be a boolean array (True = keep), got dtype {mask.dtype}")
        try:
            kept = np.broadcast_to(mask, x.shape)
        except ValueError:
            raise ValueError(f"mask has shape {mask.shape}, which does not broadcast to x's shape {x.shape}") from None
    y, empty = masked_softmax(x, None if mask is None else kept, fully_masked, axis=int(axis))
    y = np.where(kept, y, 0.0)                                     # exact 0 where masked
    d_y = np.where(kept, d_y, 0.0)                                 # masked garbage never enters
    with np.errstate(invalid="ignore"):
        dot = np.sum(d_y * y, axis=axis, keepdims=True)            # Σ_j ȳ_j y_j
        dx = np.where(kept, y * (d_y - dot), 0.0)                  # y ⊙ (ȳ − Σ ȳ y)
    return np.where(empty, np.nan if fully_masked == "nan" else 0.0, dx)


# ------------------------------------------------------------------------------------------------ sdpa


def sdpa_vjp(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    d_out: ArrayLike,
    mask: ArrayLike | None = None,
    *,
    causal: bool | str = False,
    scale: float | None = None,
    fully_masked: str = "zero",
) -> SdpaGrads:
    r"""Gradients of :func:`refattn.scaled_dot_product_attention` with respect to q, k, v and the bias.

    .. math::

        S = Q K^\top s + B, \quad A = \operatorname{softmax}(S), \quad O = A V

        \bar V = A^\top \bar O, \qquad \bar A = \bar O V^\top, \qquad
        \bar S = A \odot \big(\bar A - \operatorname{rowsum}(\bar A \odot A)\big)

        \bar Q = s\, \bar S K, \qquad \bar K = s\, \bar S^\top Q, \qquad \bar B = \bar S

    where :math:`\bar X = \partial L / \partial X` and :math:`\bar S` is 0 on masked pairs. These
    are the equations FlashAttention's backward pass evaluates tile by tile (Dao et al., 2022,
    Alg. 4; :math:`\operatorname{rowsum}(\bar A \odot A) = \operatorname{rowsum}(\bar O \odot O)`).

    Parameters
    ----------
    q : (..., n, d_k) array_like
        Queries.
    k : (..., m, d_k) array_like
        Keys.
    v : (..., m, d_v) array_like
        Values.
    d_out : (..., n, d_v) array_like
        Upstream gradient :math:`\bar O`, of the forward output's (broadcast) shape.
    mask : (..., n, m) array_like of bool or float, optional
        As in :func:`~refattn.scaled_dot_product_attention`; a float mask is the bias :math:`B`.
    causal : {False, True, "top-left", "bottom-right"}, default False
        As in :func:`~refattn.scaled_dot_product_attention`.
    scale : float, optional
        :math:`s`. Default :math:`1/\sqrt{d_k}`.
    fully_masked : {"zero", "nan", "uniform"}, default "zero"
        The forward pass's policy for a query that may attend to no key. "zero": its output is the
        constant 0, so it contributes nothing to any gradient. "uniform": its output is the mean of
        all *m* values, so each value gets :math:`\bar O_i / m` and q, k and the bias get nothing
        from it. "nan": its output is NaN; like autodiff through the 0/0, the NaN reaches its own
        row of dq and d_bias and every key and value of its batch element.

    Returns
    -------
    SdpaGrads
        ``(dq, dk, dv, d_bias)``, each summed back to its input's own shape (so a ``k`` shared by a
        batch of queries gets the sum over the batch); ``d_bias`` is ``None`` unless ``mask`` was a
        float bias, and is 0 at its ``-inf`` entries.

    Notes
    -----
    Time :math:`O(n m (d_k + d_v))`, memory :math:`O(n m)`. A non-finite key, value or ``d_out``
    row reaches only the gradients of the pairs that use it (masking by selection, as
    :func:`~refattn.core.sdpa.weighted_values` does forwards).

    References
    ----------
    .. [1] A. Vaswani et al., "Attention Is All You Need", NeurIPS 2017, arXiv:1706.03762v7, Eq. (1).
    .. [2] T. Dao et al., "FlashAttention: Fast and Memory-Efficient Exact Attention with
       IO-Awareness", NeurIPS 2022, arXiv:2205.14135v2, §3.1 and Alg. 4 (backward pass).

    Examples
    --------
    >>> from refattn import scaled_dot_product_attention
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((2, 5, 4)), rng.standard_normal((7, 4)), rng.standard_normal((7, 3))
    >>> d_out = rng.standard_normal((2, 5, 3))
    >>> g = sdpa_vjp(q, k, v, d_out, causal="bottom-right")
    >>> g.dq.shape, g.dk.shape, g.dv.shape, g.d_bias
    ((2, 5, 4), (7, 4), (7, 3), None)
    >>> _, A = scaled_dot_product_attention(q, k, v, causal="bottom-right", return_weights=True)
    >>> bool(np.allclose(g.dv, np.einsum("bnm,bnc->mc", A, d_out)))          # dV = Aᵀ dO, summed over the batch
    True
    """
    q, k, v = (as_float(name, x) for name, x in (("q", q), ("k", k), ("v", v)))
    check_qkv(q, k, v)
    check_choice("fully_masked", fully_masked, FULLY_MASKED_POLICIES)
    n, m, d_k, d_v = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    scale = default_scale(d_k) if scale is None else check_scale(scale)
    batch_shapes = {"q": q.shape[:-2], "k": k.shape[:-2], "v": v.shape[:-2]}
    if mask is not None:
        mask = check_mask_shape(mask, n, m)
        batch_shapes["mask"] = mask.shape[:-2]
    batch = broadcast_batch(batch_shapes)
    d_out = _check_grad("d_out", d_out, (*batch, n, d_v), f"q {q.shape}, k {k.shape}, v {v.shape}")
    allowed, bias = attention_mask(mask, causal, n, m, np.float64)

    with np.errstate(invalid="ignore"):                            # masked-out garbage may be inf − inf
        S = (q @ np.swapaxes(k, -1, -2)) * scale                   # (..., n, m)  S = QKᵀ·s
    if bias is not None:
        S = S + bias                                               # (..., n, m)  S + B
    A, empty = masked_softmax(S, allowed, fully_masked)            # (..., n, m), (..., n, 1)
    shape = (*batch, n, m)
    A, empty = np.broadcast_to(A, shape), np.broadcast_to(empty, shape)
    keys_used = np.ones(shape, bool) if allowed is None else np.broadcast_to(allowed, shape)
    if fully_masked == "nan":
        keys_used = keys_used | empty                              # a NaN row poisons its batch element
    values_used = keys_used | empty if fully_masked == "uniform" else keys_used   # uniform rows average all of V

    A_T = np.swapaxes(np.where(values_used, A, 0.0), -1, -2)       # (..., m, n)  Aᵀ, exact 0 where unused
    dv = weighted_values(A_T, d_out, np.swapaxes(values_used, -1, -2), None, "zero")   # (..., m, d_v)  Aᵀ dO
    with np.errstate(invalid="ignore"):
        dA = d_out @ np.swapaxes(v, -1, -2)                        # (..., n, m)  dA = dO Vᵀ
        A_kept = np.where(keys_used & ~empty, A, 0.0)
        dA = np.where(keys_used & ~empty, dA, 0.0)                 # masked values never enter
        rowsum = np.sum(dA * A_kept, axis=-1, keepdims=True)       # (..., n, 1)  Σ_j dA_ij A_ij
        dS = A_kept * (dA - rowsum)                                # (..., n, m)  A ⊙ (dA − rowsum)
    dS = np.where(empty, np.nan if fully_masked == "nan" else 0.0, dS)
    dq = scale * weighted_values(dS, k, keys_used, None, "zero")  # (..., n, d_k)  s·dS K
    dk = scale * weighted_values(np.swapaxes(dS, -1, -2), q, np.swapaxes(keys_used, -1, -2), None, "zero")
    d_bias = None if bias is None else _sum_to_shape(dS, bias.shape)   # dB = dS
    return SdpaGrads(_sum_to_shape(dq, q.shape), _sum_to_shape(dk, k.shape), _sum_to_shape(dv, v.shape), d_bias)


# ------------------------------------------------------------------------------------------ multi-head


def multi_head_vjp(
    x_q: ArrayLike,
    x_kv: ArrayLike,
    params: MultiHeadParams,
    d_out: ArrayLike,
    *,
    num_heads: int,
    mask: ArrayLike | None = None,
    causal: bool | str = False,
    scale: float | None = None,
    fully_masked: str = "zero",
    x_v: ArrayLike | None = None,
) -> MultiHeadGrads:
    r"""Gradients of :func:`refattn.multi_head_attention` with respect to its inputs and parameters.

    .. math::

        Q = x_q W^Q + b^Q,\; K = x_{kv} W^K + b^K,\; V = x_v W^V + b^V,\;
        O = \operatorname{Concat}(\mathrm{head}_i)\, W^O + b^O

        \bar W^O = C^\top \bar O,\; \bar b^O = \textstyle\sum \bar O,\;
        \bar C = \bar O\, W^{O\top} \;\to\; (\bar Q, \bar K, \bar V) = \text{sdpa\_vjp per head}

        \bar W^Q = x_q^\top \bar Q,\; \bar b^Q = \textstyle\sum \bar Q,\; \bar x_q = \bar Q\, W^{Q\top}
        \quad (\text{likewise } K, V)

    with :math:`C = \operatorname{Concat}(\mathrm{head}_i)` and the sums over every token and batch
    entry. When ``x_v`` is not given, :math:`x_{kv}` feeds both K and V and
    :math:`\bar x_{kv} = \bar K W^{K\top} + \bar V W^{V\top}`.

    Parameters
    ----------
    x_q : (..., n, d_model) array_like
        Query-side input.
    x_kv : (..., m, d_model) array_like
        Key-side (and value-side unless ``x_v``) input.
    params : MultiHeadParams
        The projections.
    d_out : (..., n, d_model) array_like
        Upstream gradient, of the forward output's (broadcast) shape.
    num_heads : int
        *h* in the paper.
    mask : (..., n, m) array_like of bool or float, optional
        Shared by all heads, as in :func:`~refattn.multi_head_attention`.
    causal : {False, True, "top-left", "bottom-right"}, default False
        As in :func:`~refattn.scaled_dot_product_attention`.
    scale : float, optional
        Default :math:`1/\sqrt{d_k}` with the per-head width.
    fully_masked : {"zero", "nan", "uniform"}, default "zero"
        As in :func:`sdpa_vjp`.
    x_v : (..., m, d_model) array_like, optional
        Value-side input, when it differs from ``x_kv``.

    Returns
    -------
    MultiHeadGrads
        ``(dx_q, dx_kv, dx_v, dparams)``; each input's gradient has that input's shape.

    References
    ----------
    .. [1] A. Vaswani et al., "Attention Is All You Need", NeurIPS 2017, arXiv:1706.03762v7, §3.2.2.

    Examples
    --------
    >>> from refattn import init_multi_head
    >>> rng = np.random.default_rng(0)
    >>> params = init_multi_head(rng, d_model=4, num_heads=2)
    >>> x, d_out = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    >>> g = multi_head_vjp(x, x, params, d_out, num_heads=2, causal=True)
    >>> g.dx_q.shape, g.dx_v, g.dparams.w_o.shape
    ((3, 4), None, (4, 4))
    >>> bool(np.allclose(g.dparams.b_o, d_out.sum(axis=0)))
    True
    """
    check_positive_int("num_heads", num_heads)
    if not isinstance(params, MultiHeadParams):
        raise TypeError(f"params must be a MultiHeadParams, got {type(params).__name__}")
    x_q = as_float("x_q", x_q, min_ndim=2)
    x_kv = as_float("x_kv", x_kv, min_ndim=2)
    shared_v = x_v is None
    x_v = x_kv if shared_v else as_float("x_v", x_v, min_ndim=2)
    d_model = params.d_model
    for name, x in (("x_q", x_q), ("x_kv", x_kv), ("x_v", x_v)):
        if x.shape[-1] != d_model:
            raise ValueError(f"{name} has d_model={x.shape[-1]} (shape {x.shape}) but params have d_model={d_model}")
    if x_v.shape[-2] != x_kv.shape[-2]:
        raise ValueError(f"x_v has m={x_v.shape[-2]} but x_kv has m={x_kv.shape[-2]}")
    n, m = x_q.shape[-2], x_kv.shape[-2]
    batch_shapes = {"x_q": x_q.shape[:-2], "x_kv": x_kv.shape[:-2], "x_v": x_v.shape[:-2]}
    if mask is not None:
        mask = check_mask_shape(mask, n, m)
        batch_shapes["mask"] = mask.shape[:-2]
    batch = broadcast_batch(batch_shapes)
    d_out = _check_grad("d_out", d_out, (*batch, n, d_model), f"x_q {x_q.shape}, x_kv {x_kv.shape}")
    w_q, w_k, w_v, w_o = (np.asarray(w, dtype=np.float64) for w in (params.w_q, params.w_k, params.w_v, params.w_o))

    Q = project_heads(x_q, w_q, params.b_q, num_heads)             # (..., h, n, d_k)  x_q Wᵠ + bᵠ
    K = project_heads(x_kv, w_k, params.b_k, num_heads)            # (..., h, m, d_k)
    V = project_heads(x_v, w_v, params.b_v, num_heads)             # (..., h, m, d_v)
    options = {"mask": head_shared(mask), "causal": causal, "scale": scale, "fully_masked": fully_masked}
    heads = scaled_dot_product_attention(Q, K, V, **options)       # (..., h, n, d_v)
    C = _merge_heads(heads)                                        # (..., n, h·d_v)  Concat(head_i)

    dw_o = _flat(C).T @ _flat(d_out)                               # (h·d_v, d_model)  Cᵀ dO
    db_o = None if params.b_o is None else _flat(d_out).sum(axis=0)
    d_heads = _split_heads(d_out @ w_o.T, num_heads)               # (..., h, n, d_v)  dO Wᴼᵀ, per head
    g = sdpa_vjp(Q, K, V, d_heads, **options)
    dQ, dK, dV = (_merge_heads(x) for x in (g.dq, g.dk, g.dv))     # (..., T, h·d_head)

    def linear_grads(x, w, b, dy):                                 # y = x W + b
        return _flat(x).T @ _flat(dy), None if b is None else _flat(dy).sum(axis=0), dy @ w.T

    dw_q, db_q, dx_q = linear_grads(x_q, w_q, params.b_q, dQ)
    dw_k, db_k, dx_kv = linear_grads(x_kv, w_k, params.b_k, dK)
    dw_v, db_v, dx_v = linear_grads(x_v, w_v, params.b_v, dV)
    if shared_v:
        dx_kv, dx_v = dx_kv + dx_v, None                           # x_kv fed K and V
    dparams = MultiHeadParams(dw_q, dw_k, dw_v, dw_o, db_q, db_k, db_v, db_o)
    return MultiHeadGrads(dx_q, dx_kv, dx_v, dparams)


# ---------------------------------------------------------------------------------------------- linear


def linear_attention_vjp(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    d_out: ArrayLike,
    *,
    causal: bool | str = False,
    method: str = "equation",
    eps: float = 0.0,
) -> tuple[NDArray, NDArray, NDArray]:
    r"""Gradients of the Linear Transformer's attention (:math:`\phi = \operatorname{elu} + 1`).

    Forward, as :func:`refattn.linear.linear_attention` with :func:`~refattn.linear.elu_feature_map`:

    .. math::

        \mathrm{sim}_{ij} = \phi(q_i)\cdot\phi(k_j)\,[j \in J_i], \quad
        \mathrm{den}_i = \textstyle\sum_j \mathrm{sim}_{ij} + \epsilon, \quad
        o_i = \textstyle\sum_j \mathrm{sim}_{ij} v_j / \mathrm{den}_i

    Backward, with :math:`g_i = \bar o_i / \mathrm{den}_i` and :math:`c_i = g_i \cdot o_i`:

    .. math::

        \overline{\mathrm{sim}}_{ij} = g_i \cdot v_j - c_i, \qquad
        \bar v_j = \textstyle\sum_i \mathrm{sim}_{ij}\, g_i

        \overline{\phi(q_i)} = \textstyle\sum_j \overline{\mathrm{sim}}_{ij}\, \phi(k_j)
                             = S_i g_i - c_i z_i, \qquad
        \overline{\phi(k_j)} = \textstyle\sum_i \overline{\mathrm{sim}}_{ij}\, \phi(q_i)
                             = U_j v_j - w_j

        \bar q = \overline{\phi(q)} \odot \phi'(q), \quad \bar k = \overline{\phi(k)} \odot \phi'(k), \quad
        \phi'(x) = \begin{cases} 1 & x > 0 \\ e^x & x \le 0 \end{cases}

    where :math:`S_i = \sum_{j \in J_i} \phi(k_j) v_j^\top` and :math:`z_i = \sum_{j \in J_i}
    \phi(k_j)` are the forward scan's states, and :math:`U_j = \sum_{i: j \in J_i} \phi(q_i)
    g_i^\top`, :math:`w_j = \sum_{i: j \in J_i} c_i \phi(q_i)` the reverse scan's (also
    :math:`\bar v_j = U_j^\top \phi(k_j)`).

    Parameters
    ----------
    q : (..., n, d) array_like
        Queries.
    k : (..., m, d) array_like
        Keys.
    v : (..., m, d_v) array_like
        Values.
    d_out : (..., n, d_v) array_like
        Upstream gradient, of the forward output's (broadcast) shape.
    causal : {False, True, "top-left", "bottom-right"}, default False
        :math:`J_i` is every key, or :math:`j \le i` (+ :math:`m - n` for "bottom-right"). A
        query that sees no key has the constant output 0 and contributes nothing.
    method : {"equation", "scan"}, default "equation"
        "equation": differentiate the left product :math:`(\phi(Q)\phi(K)^\top)V` (masked for
        ``causal``), :math:`O(n m F)`. "scan": the backward of the recurrence, :math:`O((n + m) F
        d_v)` time and :math:`O(F d_v)` state: a forward sweep over queries (:math:`S_i, z_i` →
        :math:`\overline{\phi(q_i)}`), then a reverse sweep over keys that folds in the queries that
        see key *j* (:math:`U_j, w_j` → :math:`\overline{\phi(k_j)}, \bar v_j`). Non-causal, both
        states are whole-sequence sums: the right-product backward.
    eps : float, default 0.0
        Added to every denominator, as in the forward pass.

    Returns
    -------
    dq : ndarray of ``q``'s shape
    dk : ndarray of ``k``'s shape
    dv : ndarray of ``v``'s shape

    Raises
    ------
    ZeroDivisionError
        If a query that sees keys has a zero denominator (features underflowed to 0 and ``eps`` is 0).

    Notes
    -----
    The paper writes the cumulative-sum gradients for the numerator of causal self-attention
    (n = m); here the normaliser's terms (:math:`c_i`, :math:`w_j`) are included and the queries
    may be aligned top-left or bottom-right with n != m. A query that sees no key (bottom-right,
    n > m) has the constant output 0 (the "zero" policy) and a zero gradient.

    References
    ----------
    .. [1] A. Katharopoulos et al., "Transformers are RNNs", ICML 2020, arXiv:2006.16236v3, §3.3.1
       (gradient computation in constant memory), Eq. (13)–(15).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v, d_out = rng.standard_normal((4, 6, 3))
    >>> quadratic = linear_attention_vjp(q, k, v, d_out, causal=True)
    >>> scan = linear_attention_vjp(q, k, v, d_out, causal=True, method="scan")
    >>> all(bool(np.allclose(a, b, rtol=1e-12, atol=1e-12)) for a, b in zip(quadratic, scan))
    True
    """
    check_choice("method", method, LINEAR_METHODS)
    q, k, v = (as_float(name, x) for name, x in (("q", q), ("k", k), ("v", v)))
    batch = check_qkv(q, k, v)
    alignment = causal_alignment(causal)
    if isinstance(eps, bool) or not isinstance(eps, (int, float, np.floating)) or not np.isfinite(eps):
        raise ValueError(f"eps must be a finite real number, got {eps!r}")
    n, m, d_v = q.shape[-2], k.shape[-2], v.shape[-1]
    d_out = _check_grad("d_out", d_out, (*batch, n, d_v), f"q {q.shape}, k {k.shape}, v {v.shape}")
    phi_q, phi_k = elu_feature_map(q), elu_feature_map(k)          # (..., n, F), (..., m, F)
    delta = {None: m, "top-left": 0, "bottom-right": m - n}[alignment]   # query i sees keys j <= i + delta
    sees_none = np.arange(n) + delta < 0                           # (n,)

    if method == "equation":
        dphi_q, dphi_k, dv = _linear_quadratic_vjp(phi_q, phi_k, v, d_out, alignment, sees_none, float(eps))
    elif alignment is None:
        dphi_q, dphi_k, dv = _linear_right_vjp(phi_q, phi_k, v, d_out, float(eps))
    else:
        phi_q_b, phi_k_b, v_b = (np.broadcast_to(x, (*batch, *x.shape[-2:])) for x in (phi_q, phi_k, v))
        dphi_q, dphi_k, dv = _linear_scan_vjp(phi_q_b, phi_k_b, v_b, d_out, delta, float(eps))
    dq = dphi_q * _elu_feature_map_derivative(q)                   # dφ(q) ⊙ φ'(q)
    dk = dphi_k * _elu_feature_map_derivative(k)                   # dφ(k) ⊙ φ'(k)
    return _sum_to_shape(dq, q.shape), _sum_to_shape(dk, k.shape), _sum_to_shape(dv, v.shape)


def _elu_feature_map_derivative(x: NDArray) -> NDArray:
    """φ'(x) for φ = elu + 1: 1 for x > 0, eˣ otherwise."""
    return np.where(x > 0, 1.0, np.exp(np.minimum(x, 0.0)))


def _linear_quadratic_vjp(phi_q, phi_k, v, d_out, alignment, sees_none, eps):
    """Backward of the masked left product; returns (dφ(q), dφ(k), dv)."""
    n, m = phi_q.shape[-2], phi_k.shape[-2]
    allowed = None if alignment is None else attention_mask(None, alignment, n, m, np.float64)[0]   # (n, m)
    with np.errstate(invalid="ignore"):                            # masked-out garbage may be inf − inf
        sim = phi_q @ np.swapaxes(phi_k, -1, -2)                   # (..., n, m)  φ(q_i)·φ(k_j)
    if allowed is not None:
        sim = np.where(allowed, sim, 0.0)                          # keep j ∈ J_i, by selection
    den = sim.sum(axis=-1) + eps                                   # (..., n)
    check_denominators(den, "linear attention denominator φ(q_i)·Σ_j φ(k_j) + eps",
                       "the features underflowed to 0; pass eps", skip=sees_none)
    A = sim / safe_denominator(den)[..., None]                     # (..., n, m)
    out = weighted_values(A, v, allowed, None, "zero")             # (..., n, d_v)  o = A V
    g = np.where(sees_none[:, None], 0.0, d_out / safe_denominator(den)[..., None])   # (..., n, d_v)  ō_i / den_i
    c = np.sum(g * out, axis=-1, keepdims=True)                    # (..., n, 1)    g_i · o_i
    with np.errstate(invalid="ignore"):
        d_sim = g @ np.swapaxes(v, -1, -2) - c                     # (..., n, m)    g_i · v_j − c_i
    if allowed is not None:
        d_sim = np.where(allowed, d_sim, 0.0)
        allowed_T = allowed.T
    else:
        allowed_T = None
    dv = weighted_values(np.swapaxes(A, -1, -2), d_out, allowed_T, None, "zero")   # (..., m, d_v)  Aᵀ ō
    dphi_q = weighted_values(d_sim, phi_k, allowed, None, "zero")  # (..., n, F)  Σ_j d̄sim_ij φ(k_j)
    dphi_k = weighted_values(np.swapaxes(d_sim, -1, -2), phi_q, allowed_T, None, "zero")   # (..., m, F)
    return dphi_q, dphi_k, dv


def _linear_right_vjp(phi_q, phi_k, v, d_out, eps):
    """Non-causal backward in right-product order, O((n + m)·F·d_v); returns (dφ(q), dφ(k), dv)."""
    S = np.swapaxes(phi_k, -1, -2) @ v                             # (..., F, d_v)  S = Σ_j φ(k_j) v_jᵀ
    z = phi_k.sum(axis=-2)                                         # (..., F)       z = Σ_j φ(k_j)
    den = (phi_q @ z[..., None])[..., 0] + eps                     # (..., n)       φ(q_i)·z + ε
    check_denominators(den, "linear attention denominator φ(q_i)·Σ_j φ(k_j) + eps",
                       "the features underflowed to 0; pass eps")
    out = (phi_q @ S) / den[..., None]                             # (..., n, d_v)
    g = d_out / den[..., None]                                     # (..., n, d_v)  g_i = ō_i / den_i
    c = np.sum(g * out, axis=-1, keepdims=True)                    # (..., n, 1)    c_i = g_i · o_i
    dphi_q = g @ np.swapaxes(S, -1, -2) - c * z[..., None, :]      # (..., n, F)    S g_i − c_i z
    U = np.swapaxes(phi_q, -1, -2) @ g                             # (..., F, d_v)  U = Σ_i φ(q_i) g_iᵀ
    w = np.swapaxes(phi_q, -1, -2) @ c                             # (..., F, 1)    w = Σ_i c_i φ(q_i)
    dphi_k = v @ np.swapaxes(U, -1, -2) - np.swapaxes(w, -1, -2)   # (..., m, F)    U v_j − w
    dv = phi_k @ U                                                 # (..., m, d_v)  Uᵀ φ(k_j)
    return dphi_q, dphi_k, dv


def _linear_scan_vjp(phi_q, phi_k, v, d_out, delta, eps):
    """Causal backward as two sweeps with O(F·d_v) state; query i sees keys j <= i + delta."""
    n, m = phi_q.shape[-2], phi_k.shape[-2]
    F, d_v = phi_q.shape[-1], v.shape[-1]
    batch = phi_q.shape[:-2]
    g = np.zeros((*batch, n, d_v))                                 # g_i = ō_i / den_i
    c = np.zeros((*batch, n))                                      # c_i = g_i · o_i
    dphi_q = np.zeros((*batch, n, F))
    S = np.zeros((*batch, F, d_v))                                 # S = Σ_{j ≤ i+δ} φ(k_j) v_jᵀ
    z = np.zeros((*batch, F))                                      # z = Σ_{j ≤ i+δ} φ(k_j)
    seen = 0                                                       # keys folded into S, z so far
    for i in range(n):                                             # forward sweep over queries
        while seen <= min(i + delta, m - 1):
            S = S + phi_k[..., seen, :, None] * v[..., seen, None, :]
            z = z + phi_k[..., seen, :]
            seen += 1
        if i + delta < 0:                                          # sees no key: constant output 0
            continue
        p = phi_q[..., i, :]                                       # (..., F)  φ(q_i)
        den = np.sum(p * z, axis=-1) + eps                         # (...,)    φ(q_i)·z_i + ε
        check_denominators(den, f"linear attention denominator of query {i}, φ(q_i)·Σ_j φ(k_j) + eps",
                           "the features underflowed to 0; pass eps")
        out = np.einsum("...f,...fc->...c", p, S) / den[..., None]  # (..., d_v)  o_i = φ(q_i)ᵀ S_i / den_i
        g[..., i, :] = d_out[..., i, :] / den[..., None]
        c[..., i] = np.sum(g[..., i, :] * out, axis=-1)
        dphi_q[..., i, :] = (np.einsum("...fc,...c->...f", S, g[..., i, :])
                             - c[..., i, None] * z)                # S_i g_i − c_i z_i
    dphi_k = np.zeros((*batch, m, F))
    dv = np.zeros((*batch, m, d_v))
    U = np.zeros((*batch, F, d_v))                                 # U = Σ_{i: j ≤ i+δ} φ(q_i) g_iᵀ
    w = np.zeros((*batch, F))                                      # w = Σ_{i: j ≤ i+δ} c_i φ(q_i)
    i = n - 1                                                      # next query to fold, going backwards
    for j in range(m - 1, -1, -1):                                 # reverse sweep over keys
        while i >= 0 and i + delta >= j:
            U = U + phi_q[..., i, :, None] * g[..., i, None, :]
            w = w + c[..., i, None] * phi_q[..., i, :]
            i -= 1
        dphi_k[..., j, :] = np.einsum("...fc,...c->...f", U, v[..., j, :]) - w   # U_j v_j − w_j
        dv[..., j, :] = np.einsum("...fc,...f->...c", U, phi_k[..., j, :])       # U_jᵀ φ(k_j)
    return dphi_q, dphi_k, dv


# ------------------------------------------------------------------------------------------- helpers


def _check_grad(name: str, d: ArrayLike, shape: tuple[int, ...], inputs: str) -> NDArray:
    """``d`` as float64, or a ``ValueError`` unless it has the forward output's shape exactly."""
    d = as_float(name, d)
    if d.shape != tuple(shape):
        raise ValueError(f"{name} has shape {d.shape} but the forward output has shape {tuple(shape)} ({inputs})")
    return d


def _sum_to_shape(x: NDArray, shape: tuple[int, ...]) -> NDArray:
    """Sum ``x`` over the axes along which an array of ``shape`` was broadcast to ``x.shape``."""
    lead = x.ndim - len(shape)
    if lead > 0:
        x = x.sum(axis=tuple(range(lead)))
    axes = tuple(i for i, size in enumerate(shape) if size == 1 and x.shape[i] != 1)
    if axes:
        x = x.sum(axis=axes, keepdims=True)
    return x.reshape(shape)


def _flat(x: NDArray) -> NDArray:
    """(..., d) → (N, d): every leading axis becomes a row."""
    return x.reshape(-1, x.shape[-1])


def _merge_heads(x: NDArray) -> NDArray:
    """(..., h, T, d_head) → (..., T, h·d_head), head i in columns i·d_head …"""
    x = np.swapaxes(x, -2, -3)                                     # (..., T, h, d_head)
    return x.reshape(*x.shape[:-2], -1)


def _split_heads(x: NDArray, num_heads: int) -> NDArray:
    """(..., T, h·d_head) → (..., h, T, d_head), the inverse of :func:`_merge_heads`."""
    x = x.reshape(*x.shape[:-1], num_heads, x.shape[-1] // num_heads)
    return np.swapaxes(x, -2, -3)
