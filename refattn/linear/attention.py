r"""Linearised attention (survey §4.2, Eq. 11–13): kernel feature maps and the multiplication order.

    α_ij = φ(q_i) φ(k_j)ᵀ / Σ_l φ(q_i) φ(k_l)ᵀ          (a kernel in place of exp(q_i k_jᵀ))

    "equation"   (φ(Q) φ(K)ᵀ) V, row-normalised           O(n·m·F), and the effective matrix A
    "right"      φ(Q) (φ(K)ᵀ V) / φ(Q) (φ(K)ᵀ 1)          O((n + m)·F·d_v): associativity
    "scan"       S_j = S_{j−1} + φ(k_j) v_jᵀ, z_j = z_{j−1} + φ(k_j),
                 out_i = φ(q_i)ᵀ S_i / φ(q_i)ᵀ z_i         causal: an RNN with O(F·d_v) state
    "chunk"      causal: the scan's sums by chunks of C positions, quadratic within a chunk and the
                 state carried across chunks by matrix products (refattn.linear.chunk)
    "auto"       "equation" while its n × m array fits the memory budget, "right"/"chunk" above

The four are the same sums in other orders; the tests hold them equal to 1e-12. Edge sizes
(n, m, d_k, d_v or a batch dimension of 0) follow the rule stated in :mod:`refattn.linear`.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.budget import check_fits
from ..common.checks import causal_alignment, check_bool, check_choice, checked_qkv
from ..common.products import weighted_values
from ..core.softmax import FULLY_MASKED_POLICIES
from ..kernels import kernel_rows
from ..masks import attention_mask
from ._common import (
    check_denominators,
    check_eps,
    check_feature_counts,
    check_feature_map,
    features,
    last_keys,
    resolve_method,
    safe_denominator,
)
from .chunk import DEFAULT_CHUNK_SIZE, check_chunk_size, linear_chunks

__all__ = ["linear_attention"]

METHODS = ("auto", "equation", "right", "scan", "chunk")
LINEAR_EQUATION = r"\frac{\phi(q_i) \sum_j \phi(k_j)^\top v_j}{\phi(q_i) \sum_j \phi(k_j)^\top}"


def linear_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    feature_map: Callable[[NDArray], NDArray],
    *,
    key_feature_map: Callable[[NDArray], NDArray] | None = None,
    causal: bool | str = False,
    method: str = "auto",
    eps: float = 0.0,
    fully_masked: str = "zero",
    return_weights: bool = False,
    chunk_size: int | None = None,
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
        :math:`\phi`, mapping ``(..., T, d)`` to ``(..., T, F)`` real features, F >= 1 (e.g.
        :func:`~refattn.linear.elu_feature_map`, or a Performer map with its draw bound in).
    key_feature_map : callable, optional
        A different map for the keys, giving the same number F of features. Default ``feature_map``.
    causal : {False, True, "top-left", "bottom-right"}, default False
        As in :func:`~refattn.scaled_dot_product_attention`.
    method : {"auto", "equation", "right", "scan", "chunk"}, default "auto"
        "equation": the left product (φ(Q)φ(K)ᵀ)V, the definition and the source of the
        effective attention matrix. "right": φ(Q)(φ(K)ᵀV), non-causal only. "scan": the Numba
        recurrence, causal only. "chunk": the same recurrence chunkwise, by matrix products
        (:mod:`refattn.linear.chunk`), causal only. "auto": "equation" while one (..., n, m) float64 array fits
        :func:`~refattn.common.memory_budget`, else "right" (non-causal) or "chunk" (causal: the
        faster recurrence, ``python -m refattn bench linear``); an
        explicit "equation" above the budget raises
        :class:`~refattn.common.MemoryBudgetError` before allocating.
    eps : float, default 0.0
        Added to every denominator (the official code of Katharopoulos et al. adds 1e-6; the
        paper's equations do not).
    fully_masked : {"zero", "nan", "uniform"}, default "zero"
        Output of a query that sees no key (bottom-right with n > m, or m = 0), as in sdpa:
        "uniform" is the mean of the m values, 0 when m = 0.
    return_weights : bool, default False
        Also return the effective attention matrix :math:`A` ``(..., n, m)`` (computed by the
        equation path whatever ``method`` is; :class:`~refattn.common.MemoryBudgetError` before
        allocating if it exceeds the memory budget).
    chunk_size : int, optional
        Positions per chunk of ``method="chunk"`` (default
        :data:`~refattn.linear.chunk.DEFAULT_CHUNK_SIZE`); any positive size, dividing n or not.

    Returns
    -------
    out : (..., n, d_v) ndarray
    weights : (..., n, m) ndarray
        Only if ``return_weights``.

    Raises
    ------
    TypeError
        If an input is not a real floating-point array, a map is not callable or gives complex
        (or other non-real) features.
    ValueError
        If the shapes do not fit, a map changes an axis but the last, gives no feature (F = 0,
        e.g. elu + 1 when d_k = 0), or ``feature_map`` and ``key_feature_map`` give different F.
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
    check_linear_options(method, fully_masked, return_weights)
    chunk_size = check_chunk_size(chunk_size)
    check_feature_map(feature_map, "feature_map")
    key_map_name, key_map = ("feature_map", feature_map) if key_feature_map is None else \
        ("key_feature_map", key_feature_map)
    check_feature_map(key_map, key_map_name)
    q, k, v, batch = checked_qkv(q, k, v)
    alignment = check_method_alignment(method, causal)
    eps = check_eps(eps)
    phi_q = features(feature_map, q, "q")                          # (..., n, F)
    phi_k = features(key_map, k, "k", key_map_name)                # (..., m, F)
    check_feature_counts(phi_q, phi_k, "feature_map", key_map_name)
    return attend(phi_q, KeyFeatures(phi_k), v, batch, alignment, method, eps, fully_masked, return_weights,
                  chunk_size=chunk_size)


class KeyFeatures(NamedTuple):
    r"""The key features as :func:`attend` takes them.

    Attributes
    ----------
    phi : (..., m, F) ndarray
        :math:`\phi(k_j)`; with ``shift``, :math:`\psi_j = \phi(k_j)\,e^{-C_j}`.
    shift : (..., m) ndarray or None
        Causal only: a running log-scale :math:`C_j`, non-decreasing along the keys (a running
        maximum). Query *i*, whose last visible key is *l(i)*, then uses the features
        :math:`\psi_j e^{C_j - C_{l(i)}} = \phi(k_j)\,e^{-C_{l(i)}}` (each factor ≤ 1): its scale is set
        by the keys it sees only, and it cancels in the row's normalisation.
    offset : float
        A constant added to every key feature after that rescaling (Performer's official ε).
    """

    phi: NDArray
    shift: NDArray | None = None
    offset: float = 0.0


def check_linear_options(method, fully_masked, return_weights) -> None:
    """Validate the options every linear-attention entry shares (before anything is computed)."""
    check_choice("method", method, METHODS)
    check_choice("fully_masked", fully_masked, FULLY_MASKED_POLICIES)
    check_bool("return_weights", return_weights)


def check_method_alignment(method: str, causal) -> str | None:
    """The alignment of ``causal``, checked against ``method`` (right: non-causal; scan: causal)."""
    alignment = causal_alignment(causal)
    if method == "right" and alignment is not None:
        raise ValueError("method='right' sums over every key; for causal attention use method='scan'")
    if method in ("scan", "chunk") and alignment is None:
        raise ValueError(f"method={method!r} is the causal recurrence; for non-causal attention use method='right'")
    return alignment


def attend(phi_q, keys: KeyFeatures, v, batch, alignment, method, eps, fully_masked, return_weights, guard=0.0,
           chunk_size=DEFAULT_CHUNK_SIZE):
    """Linear attention over computed features, by ``method``, with the fully-masked policy and checks.

    ``guard`` > 0: the Performer code's denominator guard, R + 2·guard where |R| <= guard (non-negative
    features only: there R = 0 means every term is 0, so the numerator is 0 and the row 0).
    """
    n, m = phi_q.shape[-2], keys.phi.shape[-2]
    delta, last = last_keys(n, m, alignment)
    sees_none = last < 0                                           # (n,)  rows with no key at all
    if return_weights:
        check_fits("the weights (return_weights=True)", (*batch, n, m))
    method = resolve_method(method, "chunk" if alignment is not None else "right", (*batch, n, m))

    if method == "equation" or return_weights:
        A, den_q, allowed = _quadratic_weights(phi_q, keys, alignment, last, eps)
    if method == "equation":                                      # A V; masked-out values never enter
        out, den = weighted_values(A, v, allowed, sees_none[:, None], "zero"), den_q   # (..., n, d_v)
    elif method == "right":
        KV = np.swapaxes(keys.phi, -1, -2) @ v                     # (..., F, d_v)  φ(K)ᵀV
        z = keys.phi.sum(axis=-2)                                  # (..., F)       φ(K)ᵀ1
        den = (phi_q @ z[..., None])[..., 0] + eps                 # (..., n)       φ(Q)(φ(K)ᵀ1) + ε
        out = (phi_q @ KV) / safe_denominator(den)[..., None]                 # (..., n, d_v)
    elif method == "chunk":
        out, den = linear_chunks(phi_q, keys, v, batch, delta, eps, chunk_size)
    else:
        out, den = _scan(phi_q, keys, v, batch, delta, eps)
    if guard:
        low = np.abs(den) <= guard                                 # (..., n)  R ← R + 2·guard there
        rescale = np.where(low, den / (den + 2 * guard), 1.0)[..., None]   # out = W/R → W/(R + 2·guard)
        out = np.where((den == 0)[..., None], 0.0, out * rescale)  # R = 0: W = 0 (the scan gave 0/0)
        if return_weights:
            A = A * rescale
        den = np.where(low, den + 2 * guard, den)
    check_denominators(den, "linear attention denominator φ(q_i)·Σ_j φ(k_j) + eps",
                       "the feature map is not positive there; pass eps or a positive map", skip=sees_none)
    if sees_none.any():
        out = np.where(sees_none[:, None], _empty_row(fully_masked, v), out)
        if return_weights:
            A = np.where(sees_none[:, None], _empty_weights(fully_masked, m), A)
    return (out, A) if return_weights else out


def _quadratic_weights(phi_q, keys, alignment, last, eps):
    """A = φ(Q)φ(K)ᵀ masked and row-normalised, its denominators, and the allowed pairs (or None)."""
    n, m = phi_q.shape[-2], keys.phi.shape[-2]
    allowed = None
    with np.errstate(invalid="ignore"):                            # masked-out garbage may be inf − inf
        sim = phi_q @ np.swapaxes(keys.phi, -1, -2)                # (..., n, m)  φ(q_i)φ(k_j)ᵀ
    if keys.shift is not None and m > 0:
        C = keys.shift                                             # (..., m)  C_j, non-decreasing
        C_row = np.take(C, np.maximum(last, 0), axis=-1)           # (..., n)  C_{l(i)}
        with np.errstate(over="ignore", invalid="ignore"):         # only pairs j > l(i) can overflow: not selected
            sim = sim * np.exp(C[..., None, :] - C_row[..., :, None])   # (..., n, m)  ψ_j e^{C_j − C_{l(i)}}, ≤ 1 · ψ_j
    if keys.offset != 0.0:
        sim = sim + keys.offset * phi_q.sum(axis=-1, keepdims=True)     # + ω Σ_f φ(q_i)_f
    if alignment is not None:
        allowed, _ = attention_mask(None, alignment, n, m, np.float64)
        sim = np.where(allowed, sim, 0.0)                          # keep j <= i (+ m − n), by selection
    den = sim.sum(axis=-1) + eps                                   # (..., n)
    with np.errstate(invalid="ignore"):                            # rows using an inf key: IEEE NaN
        return sim / safe_denominator(den)[..., None], den, allowed


def _scan(phi_q, keys, v, batch, delta, eps):
    from ..kernels.scan import causal_linear_scan  # Numba loads on first use only

    n, m, d_v = phi_q.shape[-2], keys.phi.shape[-2], v.shape[-1]
    flat = [kernel_rows(x, batch, x.shape[-2:]) for x in (phi_q, keys.phi, v)]   # (B, ·, ·)
    shift = None if keys.shift is None else kernel_rows(keys.shift, batch, (m,))  # (B, m)
    out, den = np.empty((flat[0].shape[0], n, d_v)), np.empty((flat[0].shape[0], n))
    with np.errstate(divide="ignore", invalid="ignore"):
        causal_linear_scan(*flat, delta, eps, out, den, shift=shift, offset=keys.offset)
    return out.reshape(*batch, n, d_v), den.reshape(*batch, n)


def _empty_row(policy: str, v: NDArray) -> NDArray:
    if policy == "nan":
        return np.full(v.shape[-1], np.nan)
    if policy == "zero" or v.shape[-2] == 0:                       # uniform over no key: the empty sum, 0
        return np.zeros(v.shape[-1])
    return v.mean(axis=-2, keepdims=True)                          # uniform over all m keys


def _empty_weights(policy: str, m: int) -> float:
    if policy == "nan":
        return np.nan
    return 1.0 / m if policy == "uniform" and m > 0 else 0.0
