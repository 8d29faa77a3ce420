r"""Analytic backward pass of the Linear Transformer's attention (φ = elu + 1), in float64.

    forward    sim_ij = φ(q_i)·φ(k_j) [j ∈ J_i],   den_i = Σ_j sim_ij + ε,   o_i = Σ_j sim_ij v_j / den_i
    backward   g_i = ō_i / den_i,   c_i = g_i·o_i,   d̄sim_ij = g_i·v_j − c_i,   dv_j = Σ_i sim_ij g_i,
               dφ(q_i) = Σ_j d̄sim_ij φ(k_j),   dφ(k_j) = Σ_i d̄sim_ij φ(q_i),   dx = dφ(x) ⊙ φ'(x)

The forward pass itself, :func:`refattn.linear.linear_attention`, gives the output o and refuses a
zero denominator; the backward adds the sums above, in the left-product order (``"equation"``) or
as two sweeps with O(F·d_v) state (``"scan"``). As in the forward pass, a pair (i, j) outside J_i
contributes an exact 0, so garbage in a key a query cannot see never reaches its gradient.
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.checks import causal_alignment, check_choice, checked_qkv
from ..common.products import weighted_values
from ..linear import elu_feature_map, linear_attention
from ..linear._common import last_keys
from ..masks import attention_mask
from .shapes import as_upstream_gradient, sum_to_shape

__all__ = ["linear_attention_vjp"]

METHODS = ("equation", "scan")


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
        If a query that sees keys has a zero denominator (features underflowed to 0 and ``eps`` is
        0); raised by the forward pass, :func:`refattn.linear.linear_attention`.

    Notes
    -----
    The output :math:`o` and the check of the denominators come from the forward pass,
    :func:`refattn.linear.linear_attention`, with the method of the same cost ("equation", or
    "scan" causal and "right" non-causal for ``method="scan"``). The paper writes the
    cumulative-sum gradients for the numerator of causal self-attention (n = m); here the
    normaliser's terms (:math:`c_i`, :math:`w_j`) are included and the queries may be aligned
    top-left or bottom-right with n != m. A query that sees no key (bottom-right with
    n > m, or m = 0) has the constant output 0 (the "zero" policy) and a zero gradient.

    References
    ----------
    .. [1] A. Katharopoulos et al., "Transformers are RNNs", ICML 2020, arXiv:2006.16236v3, §3.3.1
       (gradient computation in constant memory), Eq. (13)–(15).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v, d_out = rng.standard_normal((4, 6, 3))
    >>> equation = linear_attention_vjp(q, k, v, d_out, causal=True)
    >>> scan = linear_attention_vjp(q, k, v, d_out, causal=True, method="scan")
    >>> all(bool(np.allclose(a, b, rtol=1e-12, atol=1e-12)) for a, b in zip(equation, scan))
    True
    """
    check_choice("method", method, METHODS)
    q, k, v, batch = checked_qkv(q, k, v)
    alignment = causal_alignment(causal)
    n, m, d_v = q.shape[-2], k.shape[-2], v.shape[-1]
    d_out = as_upstream_gradient("d_out", d_out, (*batch, n, d_v), f"q {q.shape}, k {k.shape}, v {v.shape}")
    forward = "equation" if method == "equation" else "scan" if alignment is not None else "right"
    out = linear_attention(q, k, v, elu_feature_map, causal=causal, method=forward, eps=eps)   # (..., n, d_v)
    phi_q, phi_k = elu_feature_map(q), elu_feature_map(k)          # (..., n, F), (..., m, F)
    delta, last = last_keys(n, m, alignment)                       # query i sees keys 0 … last_i (none: −1)
    sees_none = last < 0                                           # (n,)  bottom-right with n > m, or m = 0

    if method == "equation":
        dphi_q, dphi_k, dv = _left_product_vjp(phi_q, phi_k, v, out, d_out, alignment, sees_none, float(eps))
    elif alignment is None:
        dphi_q, dphi_k, dv = _right_product_vjp(phi_q, phi_k, v, out, d_out, sees_none, float(eps))
    else:
        phi_q_b, phi_k_b, v_b = (np.broadcast_to(x, (*batch, *x.shape[-2:])) for x in (phi_q, phi_k, v))
        dphi_q, dphi_k, dv = _scan_vjp(phi_q_b, phi_k_b, v_b, out, d_out, delta, sees_none, float(eps))
    dq = dphi_q * _elu_feature_map_derivative(q)                   # dφ(q) ⊙ φ'(q)
    dk = dphi_k * _elu_feature_map_derivative(k)                   # dφ(k) ⊙ φ'(k)
    return sum_to_shape(dq, q.shape), sum_to_shape(dk, k.shape), sum_to_shape(dv, v.shape)


def _elu_feature_map_derivative(x: NDArray) -> NDArray:
    """φ'(x) for φ = elu + 1: 1 for x > 0, eˣ otherwise."""
    return np.where(x > 0, 1.0, np.exp(np.minimum(x, 0.0)))


def _left_product_vjp(phi_q, phi_k, v, out, d_out, alignment, sees_none, eps):
    """Backward of the masked left product; returns (dφ(q), dφ(k), dv)."""
    n, m = phi_q.shape[-2], phi_k.shape[-2]
    allowed = None if alignment is None else attention_mask(None, alignment, n, m, np.float64)[0]   # (n, m)
    allowed_T = None if allowed is None else allowed.T
    with np.errstate(invalid="ignore"):                            # masked-out garbage may be inf − inf
        sim = phi_q @ np.swapaxes(phi_k, -1, -2)                   # (..., n, m)  φ(q_i)·φ(k_j)
    if allowed is not None:
        sim = np.where(allowed, sim, 0.0)                          # keep j ∈ J_i, by selection
    den = sim.sum(axis=-1, keepdims=True) + eps                    # (..., n, 1)  nonzero where a key is seen
    g = np.divide(d_out, den, out=np.zeros(d_out.shape), where=~sees_none[:, None])   # (..., n, d_v)  ō_i / den_i
    c = np.sum(g * out, axis=-1, keepdims=True)                    # (..., n, 1)    g_i · o_i
    with np.errstate(invalid="ignore"):
        d_sim = g @ np.swapaxes(v, -1, -2) - c                     # (..., n, m)    g_i · v_j − c_i
    if allowed is not None:
        d_sim = np.where(allowed, d_sim, 0.0)
    dv = weighted_values(np.swapaxes(sim, -1, -2), g, allowed_T, None, "zero")   # (..., m, d_v)  Σ_i sim_ij g_i
    dphi_q = weighted_values(d_sim, phi_k, allowed, None, "zero")  # (..., n, F)  Σ_j d̄sim_ij φ(k_j)
    dphi_k = weighted_values(np.swapaxes(d_sim, -1, -2), phi_q, allowed_T, None, "zero")   # (..., m, F)
    return dphi_q, dphi_k, dv


def _right_product_vjp(phi_q, phi_k, v, out, d_out, sees_none, eps):
    """Non-causal backward in right-product order, O((n + m)·F·d_v); returns (dφ(q), dφ(k), dv)."""
    S = np.swapaxes(phi_k, -1, -2) @ v                             # (..., F, d_v)  S = Σ_j φ(k_j) v_jᵀ
    z = phi_k.sum(axis=-2)                                         # (..., F)       z = Σ_j φ(k_j)
    den = (phi_q @ z[..., None])[..., 0] + eps                     # (..., n)       φ(q_i)·z + ε, nonzero if m > 0
    g = np.divide(d_out, den[..., None], out=np.zeros(d_out.shape), where=~sees_none[:, None])   # g_i = ō_i / den_i
    c = np.sum(g * out, axis=-1, keepdims=True)                    # (..., n, 1)    c_i = g_i · o_i
    dphi_q = g @ np.swapaxes(S, -1, -2) - c * z[..., None, :]      # (..., n, F)    S g_i − c_i z
    U = np.swapaxes(phi_q, -1, -2) @ g                             # (..., F, d_v)  U = Σ_i φ(q_i) g_iᵀ
    w = np.swapaxes(phi_q, -1, -2) @ c                             # (..., F, 1)    w = Σ_i c_i φ(q_i)
    dphi_k = v @ np.swapaxes(U, -1, -2) - np.swapaxes(w, -1, -2)   # (..., m, F)    U v_j − w
    dv = phi_k @ U                                                 # (..., m, d_v)  Uᵀ φ(k_j)
    return dphi_q, dphi_k, dv


def _scan_vjp(phi_q, phi_k, v, out, d_out, delta, sees_none, eps):
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
        if sees_none[i]:                                           # sees no key: constant output 0
            continue
        den = np.sum(phi_q[..., i, :] * z, axis=-1) + eps          # (...,)  φ(q_i)·z_i + ε, nonzero
        g[..., i, :] = d_out[..., i, :] / den[..., None]
        c[..., i] = np.sum(g[..., i, :] * out[..., i, :], axis=-1)
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
