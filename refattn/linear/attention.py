r"""Linearised attention (survey §4.2, Eq. 11–13): kernel feature maps and the multiplication order.

    α_ij = φ(q_i) φ(k_j)ᵀ / Σ_l φ(q_i) φ(k_l)ᵀ          (a kernel in place of exp(q_i k_jᵀ))

    "equation"   (φ(Q) φ(K)ᵀ) V, row-normalised           O(n·m·F), and the effective matrix A
    "right"      φ(Q) (φ(K)ᵀ V) / φ(Q) (φ(K)ᵀ 1)          O((n + m)·F·d_v): associativity
    "scan"       S_j = S_{j−1} + φ(k_j) v_jᵀ, z_j = z_{j−1} + φ(k_j),
                 out_i = φ(q_i)ᵀ S_i / φ(q_i)ᵀ z_i         causal: an RNN with O(F·d_v) state

The three are the same sums in other orders; the tests hold them equal to 1e-12.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common import as_float, causal_alignment, check_choice, check_qkv, weighted_values
from ..core.masks import attention_mask
from ..core.softmax import FULLY_MASKED_POLICIES
from ..kernels import kernel_rows
from ._common import check_denominators, features, safe_denominator

__all__ = ["linear_attention"]

METHODS = ("equation", "right", "scan")
LINEAR_EQUATION = r"\frac{\phi(q_i) \sum_j \phi(k_j)^\top v_j}{\phi(q_i) \sum_j \phi(k_j)^\top}"


def linear_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    feature_map: Callable[[NDArray], NDArray],
    *,
    key_feature_map: Callable[[NDArray], NDArray] | None = None,
    causal: bool | str = False,
    method: str = "equation",
    eps: float = 0.0,
    fully_masked: str = "zero",
    return_weights: bool = False,
) -> NDArray | tuple[NDArray, NDArray]:
    r"""Attention with the similarity :math:`\phi(q)\phi(k)^\top` in place of :math:`\exp(q k^\top)`.

    .. math::

        V'_i = \frac{\phi(Q_i) \sum_{j} \phi(K_j)^\top V_j}{\phi(Q_i) \sum_{j} \phi(K_j)^\top}

    with the sums over the keys query *i* may see (all, or :math:`j \le i` causally).

    Parameters
    ----------
    q : (..., n, d) array_like
        Queries.
    k : (..., m, d) array_like
        Keys.
    v : (..., m, d_v) array_like
        Values.
    feature_map : callable
        :math:`\phi`, mapping ``(..., T, d)`` to ``(..., T, F)`` (e.g.
        :func:`~refattn.linear.elu_feature_map`, or a Performer map with its draw bound in).
    key_feature_map : callable, optional
        A different map for the keys (e.g. Performer's stabilised features, whose shift is taken
        per query row but over the whole key sequence). Default ``feature_map``.
    causal : {False, True, "top-left", "bottom-right"}, default False
        As in :func:`~refattn.scaled_dot_product_attention`.
    method : {"equation", "right", "scan"}, default "equation"
        "equation": the left product (φ(Q)φ(K)ᵀ)V, the definition and the source of the
        effective attention matrix. "right": φ(Q)(φ(K)ᵀV), non-causal only. "scan": the Numba
        recurrence, causal only.
    eps : float, default 0.0
        Added to every denominator (the official code of Katharopoulos et al. adds 1e-6; the
        paper's equations do not).
    fully_masked : {"zero", "nan", "uniform"}, default "zero"
        Output of a query that sees no key (bottom-right with n > m), as in sdpa.
    return_weights : bool, default False
        Also return the effective attention matrix :math:`A` ``(..., n, m)`` (computed by the
        equation path whatever ``method`` is).

    Returns
    -------
    out : (..., n, d_v) ndarray
    weights : (..., n, m) ndarray
        Only if ``return_weights``.

    Raises
    ------
    ZeroDivisionError
        If a query that sees keys has a zero denominator :math:`\phi(q_i)\sum_j\phi(k_j)^\top + \epsilon`
        (possible for feature maps that are not positive): never a silent inf or NaN.

    Notes
    -----
    Rows of :math:`A` sum to 1 but are non-negative only if :math:`\phi` is.

    References
    ----------
    .. [1] A. Katharopoulos et al., "Transformers are RNNs", ICML 2020, arXiv:2006.16236v3, Eq. (2)–(6), (16)–(20).
    .. [2] T. Lin et al., "A Survey of Transformers", arXiv:2106.04554v2, §4.2, Eq. (11)–(13).

    Examples
    --------
    >>> from refattn.linear import elu_feature_map
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 5, 4))
    >>> left = linear_attention(q, k, v, elu_feature_map)
    >>> bool(np.allclose(left, linear_attention(q, k, v, elu_feature_map, method="right")))
    True
    """
    check_choice("method", method, METHODS)
    check_choice("fully_masked", fully_masked, FULLY_MASKED_POLICIES)
    q, k, v = (as_float(name, x) for name, x in (("q", q), ("k", k), ("v", v)))
    batch = check_qkv(q, k, v)
    alignment = causal_alignment(causal)
    if method == "right" and alignment is not None:
        raise ValueError("method='right' sums over every key; for causal attention use method='scan'")
    if method == "scan" and alignment is None:
        raise ValueError("method='scan' is the causal recurrence; for non-causal attention use method='right'")
    if isinstance(eps, bool) or not isinstance(eps, (int, float, np.floating)) or not np.isfinite(eps):
        raise ValueError(f"eps must be a finite real number, got {eps!r}")
    phi_q = features(feature_map, q, "q")
    phi_k = features(feature_map if key_feature_map is None else key_feature_map, k, "k")
    n, m = q.shape[-2], k.shape[-2]
    delta = {None: m, "top-left": 0, "bottom-right": m - n}[alignment]   # query i sees keys j <= i + delta
    sees_none = np.arange(n) + delta < 0                           # (n,)  rows with no key at all

    if method == "equation" or return_weights:
        A, den_q, allowed = _quadratic_weights(phi_q, phi_k, alignment, eps)
    if method == "equation":                                      # A V; masked-out values never enter
        out, den = weighted_values(A, v, allowed, sees_none[:, None], "zero"), den_q   # (..., n, d_v)
    elif method == "right":
        KV = np.swapaxes(phi_k, -1, -2) @ v                        # (..., F, d_v)  φ(K)ᵀV
        z = phi_k.sum(axis=-2)                                     # (..., F)       φ(K)ᵀ1
        den = (phi_q @ z[..., None])[..., 0] + eps                 # (..., n)       φ(Q)(φ(K)ᵀ1) + ε
        out = (phi_q @ KV) / safe_denominator(den)[..., None]                 # (..., n, d_v)
    else:
        out, den = _scan(phi_q, phi_k, v, batch, delta, eps)
    check_denominators(den, "linear attention denominator φ(q_i)·Σ_j φ(k_j) + eps",
                       "the feature map is not positive there; pass eps or a positive map", skip=sees_none)
    if sees_none.any():
        out = np.where(sees_none[:, None], _empty_row(fully_masked, v), out)
        if return_weights:
            A = np.where(sees_none[:, None], _empty_weights(fully_masked, m), A)
    return (out, A) if return_weights else out


def _quadratic_weights(phi_q, phi_k, alignment, eps):
    """A = φ(Q)φ(K)ᵀ masked and row-normalised, its denominators, and the allowed pairs (or None)."""
    n, m = phi_q.shape[-2], phi_k.shape[-2]
    allowed = None
    with np.errstate(invalid="ignore"):                            # masked-out garbage may be inf − inf
        sim = phi_q @ np.swapaxes(phi_k, -1, -2)                   # (..., n, m)  φ(q_i)φ(k_j)ᵀ
    if alignment is not None:
        allowed, _ = attention_mask(None, alignment, n, m, np.float64)
        sim = np.where(allowed, sim, 0.0)                          # keep j <= i (+ m − n), by selection
    den = sim.sum(axis=-1) + eps                                   # (..., n)
    with np.errstate(invalid="ignore"):                            # rows using an inf key: IEEE NaN
        return sim / safe_denominator(den)[..., None], den, allowed


def _scan(phi_q, phi_k, v, batch, delta, eps):
    from ..kernels.scan import causal_linear_scan  # Numba loads on first use only

    n, d_v = phi_q.shape[-2], v.shape[-1]
    flat = [kernel_rows(x, batch, x.shape[-2:]) for x in (phi_q, phi_k, v)]   # (B, ·, ·)
    out, den = np.empty((flat[0].shape[0], n, d_v)), np.empty((flat[0].shape[0], n))
    with np.errstate(divide="ignore", invalid="ignore"):
        causal_linear_scan(*flat, delta, float(eps), out, den)
    return out.reshape(*batch, n, d_v), den.reshape(*batch, n)


def _empty_row(policy: str, v: NDArray) -> NDArray:
    if policy == "zero":
        return np.zeros(v.shape[-1])
    if policy == "nan":
        return np.full(v.shape[-1], np.nan)
    return v.mean(axis=-2, keepdims=True)                          # uniform over all m keys


def _empty_weights(policy: str, m: int) -> NDArray:
    return {"zero": 0.0, "nan": np.nan, "uniform": 1.0 / m}[policy]
