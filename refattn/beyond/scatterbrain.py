r"""Scatterbrain (Chen, Dao et al. 2021, arXiv:2110.15343v1): sparse (LSH) plus low-rank (Performer) attention.

    q̃_i = q_i / d^{1/4},  k̃_j = k_j / d^{1/4}                     q̃·k̃ = q·k/√d
    L_ij = φ(q̃_i)ᵀ φ(k̃_j)                                          low rank: Performer's estimate of exp(q̃·k̃)
    𝒮 = {(i, j) : h_r(q̃_i) = h_r(k̃_j) for some hash round r}      sparse support: LSH collisions
    S_ij = exp(q̃_i·k̃_j) − φ(q̃_i)ᵀ φ(k̃_j)   for (i, j) ∈ 𝒮,  else 0   the low-rank estimate subtracted on 𝒮
    Â = L + S                                                       = exp(q̃_i·k̃_j) on 𝒮, L_ij elsewhere
    out = (φ(Q̃)(φ(K̃)ᵀV) + S V) / (φ(Q̃)(φ(K̃)ᵀ1) + S 1)              row-normalised; nothing n × m formed

    causal: the same over the pairs j ≤ i (low rank by a prefix scan, 𝒮 restricted to j ≤ i)

Performer alone estimates every entry of exp(QKᵀ/√d) with a variance that grows with the entry; LSH
alone finds the large entries and drops the rest. Scatterbrain uses the exact value where LSH finds a
pair and the low-rank estimate everywhere else, so the estimate is unbiased and the large entries carry
no error. With a support covering every pair (one bucket), Â = exp(QKᵀ/√d) and the result is softmax
attention exactly (up to the rounding of L + (E − L)).

:func:`lsh_support` is 𝒮, :func:`scatterbrain_parts` the dense L, S and their normalised sum (for plots
and tests), :func:`scatterbrain_attention` the attention. The hash is Reformer's angular LSH
(:func:`refattn.sparse.draw_lsh_rotations`, :func:`refattn.sparse.lsh_buckets`) applied to queries and
keys alike; the features are Performer's (:func:`refattn.linear.draw_omega`,
:func:`refattn.linear.favor_features`).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import scipy.sparse
from numpy.typing import ArrayLike, NDArray

from ..common.budget import check_fits
from ..common.checks import (
    as_float,
    broadcast_batch,
    causal_alignment,
    check_bool,
    check_choice,
    check_qkv,
    check_scale,
    checked_qkv,
    default_scale,
)
from ..common.ints import check_positive_int
from ..common.products import split_scale, weighted_values
from ..deprecation import renamed
from ..draws import given_or_drawn, optional_rng
from ..kernels import kernel_rows
from ..linear._common import last_keys, resolve_method
from ..linear.performer import check_omega, draw_omega, favor_features, favor_from_terms, favor_terms
from ..mechanism import Mechanism, WhenDrawn
from ..sparse.reformer_lsh import draw_lsh_rotations, lsh_buckets

__all__ = ["ScatterbrainParts", "lsh_support", "scatterbrain_attention", "scatterbrain_parts"]

SCATTERBRAIN = ('B. Chen, T. Dao, E. Winsor, Z. Song, A. Rudra, C. Ré, 2021, "Scatterbrain: Unifying Sparse and '
                'Low-rank Attention Approximation", arXiv:2110.15343')
KINDS = ("hyperbolic", "positive")
METHODS = ("equation", "pairs", "auto")
N_ROUNDS, N_BUCKETS, NUM_FEATURES = 2, 8, 16                       # official: n_hashes = 2; nb_features = 32 = 2·16
#: Pairs whose query and key rows the pairs path gathers at once (2¹⁶ pairs: 32 MiB per gathered array at d = 64).
PAIR_BLOCK = 2**16


class ScatterbrainParts(NamedTuple):
    r"""The dense parts of Scatterbrain's estimate, unnormalised, and the attention they make.

    Attributes
    ----------
    support : (..., n, m) ndarray of bool
        𝒮, the LSH collisions (within the causal mask when causal).
    low_rank : (..., n, m) ndarray
        :math:`L_{ij} = \phi(\tilde q_i)^\top \phi(\tilde k_j)` (0 outside the causal mask).
    sparse : (..., n, m) ndarray
        :math:`S_{ij} = e^{\tilde q_i \cdot \tilde k_j} - L_{ij}` on 𝒮, 0 elsewhere.
    weights : (..., n, m) ndarray
        :math:`(L + S)` with each row divided by its sum (a row with no key: 0).
    """

    support: NDArray
    low_rank: NDArray
    sparse: NDArray
    weights: NDArray


@renamed(n_buckets="num_buckets")
def lsh_support(q: ArrayLike, k: ArrayLike, rotations: ArrayLike, *, num_buckets=None) -> NDArray:
    r"""The sparse support: the pairs whose query and key share a bucket in at least one hash round.

    .. math::

        \mathcal S = \{(i, j) : \exists r,\ h_r(q_i) = h_r(k_j)\}, \qquad
        h_r(x) = \arg\max\big([x R_r;\, -x R_r]\big)

    Parameters
    ----------
    q : (..., n, d) array_like
        Queries.
    k : (..., m, d) array_like
        Keys.
    rotations : (..., num_rounds, d, b/2) array_like
        One projection per round (:func:`refattn.sparse.draw_lsh_rotations`); no column: one bucket.
    num_buckets : int or sequence of int, optional
        As :func:`refattn.sparse.lsh_buckets` (default: twice the columns of R, 1 with none).

    Returns
    -------
    support : (..., n, m) ndarray of bool

    Notes
    -----
    The hash looks at directions only (the bucket of x is that of any positive multiple of x). Each pair
    is decided by its own query and key, whatever the other tokens are.

    Examples
    --------
    >>> q = np.array([[1.0, 0.0], [-1.0, 0.0]])
    >>> lsh_support(q, q, np.array([[[1.0], [0.0]]])).astype(int)        # two buckets: the sign of x₀
    array([[1, 0],
           [0, 1]])
    """
    q, k = as_float("q", q, min_ndim=2), as_float("k", k, min_ndim=2)
    check_qkv(q, k, k)
    with np.errstate(invalid="ignore"):                                # a NaN row hashes as lsh_buckets says
        h_q = lsh_buckets(q, rotations, num_buckets)                    # (..., R, n)
        h_k = lsh_buckets(k, rotations, num_buckets)                    # (..., R, m)
    check_fits("the support", (*np.broadcast_shapes(h_q.shape[:-1], h_k.shape[:-1]), q.shape[-2], k.shape[-2]), 1)
    return (h_q[..., :, None] == h_k[..., None, :]).any(axis=-3)      # (..., n, m)  ∃r h_r(q_i) = h_r(k_j)


def _features(q, k, omega, kind, scale):
    """q̃, k̃, φ(q̃) and φ(k̃) (the unshifted features, for :func:`scatterbrain_parts`)."""
    q_tilde, k_tilde = split_scale(q, k, scale)
    with np.errstate(invalid="ignore", over="ignore"):
        return q_tilde, k_tilde, favor_features(q_tilde, omega, kind=kind), favor_features(k_tilde, omega, kind=kind)


class _LogFeatures(NamedTuple):
    """φ(q̃) and φ(k̃) as exponents, φ = e^{a}/√F, with the shifts that keep every product at most 1."""

    a_q: NDArray                                                      # (..., n, F)  ±ωᵀq̃ − ‖q̃‖²/2
    a_k: NDArray                                                      # (..., m, F)  ±ωᵀk̃ − ‖k̃‖²/2
    C: NDArray                                                        # (..., m)  C_j = max over the keys l ≤ j
    #                                                                   (all keys if not causal) of max_f a_k[l, f]


def _log_features(q_tilde, k_tilde, omega, kind, alignment) -> _LogFeatures:
    """The feature exponents and the key shift C_j (a running maximum under causal, so that a later key never
    changes an earlier row; NaN propagates from its key on)."""
    with np.errstate(invalid="ignore", over="ignore"):
        a_q, _, _ = favor_terms(q_tilde, omega, kind)
        a_k, _, _ = favor_terms(k_tilde, omega, kind)
    C = a_k.max(axis=-1)                                              # (..., m)  max_f a_k[j, f]
    if alignment is None:
        C = np.broadcast_to(C.max(axis=-1, keepdims=True), C.shape)    # every row sees every key
    else:
        C = np.maximum.accumulate(C, axis=-1)
    return _LogFeatures(a_q, a_k, C)


def _row_shift(logs: _LogFeatures, last: NDArray, M: NDArray) -> tuple[NDArray, NDArray]:
    r"""c_i = max(max_f a_q[i, f] + C_{l(i)}, M_i) and C_{l(i)}, each (..., n).

    M_i is the largest q̃_i·k̃_j on row i's support (−∞ for none). Row i of Â is computed as
    Â_ij·e^{−c_i}, a factor that cancels in its normalisation: e^{q̃_i·k̃_j − c_i} ≤ 1 on the support and every
    term e^{a_q[i, f] − c_i + C_{l(i)}}·e^{a_k[j, f] − C_j}·e^{C_j − C_{l(i)}} of L_ij·e^{−c_i} is ≤ 1, so nothing
    overflows, and the largest exact entry of a row is 1.
    """
    C_row = np.take(logs.C, np.maximum(last, 0), axis=-1)             # (..., n)  C_{l(i)}
    return np.maximum(logs.a_q.max(axis=-1) + C_row, M), C_row


def _shifted_features(logs: _LogFeatures, c: NDArray, C_row: NDArray) -> tuple[NDArray, NDArray]:
    """φ(q̃_i)·e^{C_{l(i)} − c_i} (..., n, F) and ψ_j = φ(k̃_j)·e^{−C_j} (..., m, F), each entry ≤ 1/√F."""
    with np.errstate(invalid="ignore"):                               # NaN rows and keys stay NaN
        phi_q = favor_from_terms(logs.a_q - (c - C_row)[..., None], None, 0.0)
        psi_k = favor_from_terms(logs.a_k - logs.C[..., None], None, 0.0)
    return phi_q, psi_k


def _dense_weights(q, k, rotations, omega, num_buckets, kind, scale, alignment) -> tuple[NDArray, NDArray]:
    """𝒮 and the normalised weights Â/Â1, each (..., n, m), from the row-shifted parts; nothing checked."""
    n, m = q.shape[-2], k.shape[-2]
    q_tilde, k_tilde = split_scale(q, k, scale)
    allowed = _allowed(alignment, n, m)
    support = lsh_support(q_tilde, k_tilde, rotations, num_buckets=num_buckets) & allowed
    logs = _log_features(q_tilde, k_tilde, omega, kind, alignment)
    with np.errstate(invalid="ignore", over="ignore"):                # non-finite inputs: IEEE, row by row
        Z = q_tilde @ np.swapaxes(k_tilde, -1, -2)                    # (..., n, m)  q̃_i·k̃_j
    M = np.max(np.where(support, Z, -np.inf), axis=-1)                # (..., n)  the support's largest, NaN kept
    c, C_row = _row_shift(logs, last_keys(n, m, alignment)[1], M)
    phi_q, psi_k = _shifted_features(logs, c, C_row)
    with np.errstate(invalid="ignore", over="ignore"):                # pairs j > l(i) may overflow: not selected
        rescale = np.exp(logs.C[..., None, :] - C_row[..., :, None])  # (..., n, m)  e^{C_j − C_{l(i)}}
        L = np.where(allowed, (phi_q @ np.swapaxes(psi_k, -1, -2)) * rescale, 0.0)   # (..., n, m)  L·e^{−c_i}
        E = np.exp(Z - c[..., None])                                  # (..., n, m)  exp(q̃_i·k̃_j − c_i)
        A_hat = L + np.where(support, E - L, 0.0)                     # (..., n, m)  Â·e^{−c_i}
        den = A_hat.sum(axis=-1, keepdims=True)                       # (..., n, 1)
        weights = np.where(allowed.any(axis=-1, keepdims=True), A_hat / np.where(den == 0, 1.0, den), 0.0)
    return support, weights


def _allowed(alignment, n: int, m: int) -> NDArray:
    """(n, m) bool: every pair, or j ≤ i + δ under the alignment."""
    delta, _ = last_keys(n, m, alignment)
    return np.arange(m)[None, :] <= np.arange(n)[:, None] + delta


@renamed(n_buckets="num_buckets")
def scatterbrain_parts(q: ArrayLike, k: ArrayLike, rotations: ArrayLike, omega: ArrayLike, *, num_buckets=None,
                       kind: str = "hyperbolic", scale: float | None = None, causal=False) -> ScatterbrainParts:
    r"""Scatterbrain's estimate in its dense parts: the support 𝒮, the low-rank L, the sparse correction S, Â/Â1.

    .. math::

        \hat A = L + S, \quad L = \phi(\tilde Q)\phi(\tilde K)^\top, \quad
        S = \mathbb 1_{\mathcal S} \odot \big(e^{\tilde Q \tilde K^\top} - L\big), \qquad
        W = \operatorname{diag}(\hat A \mathbf 1)^{-1} \hat A

    Parameters
    ----------
    q : (..., n, d) array_like
    k : (..., m, d) array_like
    rotations : (..., num_rounds, d, b/2) array_like
        The LSH projections (:func:`refattn.sparse.draw_lsh_rotations`).
    omega : (r, d) or (..., r, d) array_like
        Performer's projections (:func:`refattn.linear.draw_omega`).
    num_buckets : int or sequence of int, optional
        As :func:`lsh_support`.
    kind : {"hyperbolic", "positive"}, default "hyperbolic"
        Performer's feature map (:func:`refattn.linear.favor_features`).
    scale : float, optional
        *s*, multiplier of :math:`q^\top k` (default :math:`1/\sqrt d`): the features and the hash see
        :math:`\operatorname{sign}(s)\sqrt{|s|}\,q` and :math:`\sqrt{|s|}\,k`.
    causal : {False, True, "top-left", "bottom-right"}, default False
        Keep only the pairs j ≤ i (bottom-right: j ≤ i + m − n).

    Returns
    -------
    ScatterbrainParts

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k = rng.standard_normal((2, 6, 4))
    >>> from refattn.sparse import draw_lsh_rotations
    >>> from refattn.linear import draw_omega
    >>> p = scatterbrain_parts(q, k, draw_lsh_rotations(1, 4, 2, 2), draw_omega(2, 8, 4))
    >>> exact = np.exp(q @ k.T / 2)
    >>> bool(np.allclose((p.low_rank + p.sparse)[p.support], exact[p.support]))   # exact on the support
    True
    """
    q, k = as_float("q", q, min_ndim=2), as_float("k", k, min_ndim=2)
    check_qkv(q, k, k)
    check_choice("kind", kind, KINDS)
    alignment = causal_alignment(causal)
    scale = default_scale(q.shape[-1]) if scale is None else check_scale(scale)
    omega = check_omega(omega, q.shape[-1])
    batch = broadcast_batch({"q": q.shape[:-2], "k": k.shape[:-2], "omega": omega.shape[:-2]})
    check_fits("the dense parts", (*batch, q.shape[-2], k.shape[-2]))
    support, weights = _dense_weights(q, k, rotations, omega, num_buckets, kind, scale, alignment)
    q_tilde, k_tilde, phi_q, phi_k = _features(q, k, omega, kind, scale)
    allowed = _allowed(alignment, q.shape[-2], k.shape[-2])
    with np.errstate(invalid="ignore", over="ignore"):                # as they are: inf where e^{q̃·k̃} overflows
        L = np.where(allowed, phi_q @ np.swapaxes(phi_k, -1, -2), 0.0)   # (..., n, m)  φ(q̃_i)ᵀφ(k̃_j), j ≤ i if causal
        E = np.exp(q_tilde @ np.swapaxes(k_tilde, -1, -2))            # (..., n, m)  exp(q̃_i·k̃_j)
        S = np.where(support, E - L, 0.0)                             # (..., n, m)  exp − low rank, on 𝒮
    return ScatterbrainParts(support, L, S, weights)


@renamed(n_buckets="num_buckets", n_rounds="num_rounds")
def scatterbrain_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    rotations: ArrayLike | None = None,
    omega: ArrayLike | None = None,
    rng=None,
    num_buckets=N_BUCKETS,
    num_rounds: int = N_ROUNDS,
    num_features: int = NUM_FEATURES,
    kind: str = "hyperbolic",
    scale: float | None = None,
    causal=False,
    method: str = "auto",
    return_weights: bool = False,
) -> NDArray | tuple[NDArray, NDArray]:
    r"""Scatterbrain: softmax attention from Performer's low-rank estimate, made exact on LSH's sparse support.

    .. math::

        \mathrm{out}_i = \frac{\phi(\tilde q_i)^\top \sum_j \phi(\tilde k_j) v_j^\top
                               + \sum_{j : (i, j) \in \mathcal S} \big(e^{\tilde q_i\cdot\tilde k_j}
                                 - \phi(\tilde q_i)^\top\phi(\tilde k_j)\big) v_j}
                              {\phi(\tilde q_i)^\top \sum_j \phi(\tilde k_j)
                               + \sum_{j : (i, j) \in \mathcal S} \big(e^{\tilde q_i\cdot\tilde k_j}
                                 - \phi(\tilde q_i)^\top\phi(\tilde k_j)\big)}

    Parameters
    ----------
    q : (..., n, d) array_like
        Queries.
    k : (..., m, d) array_like
        Keys.
    v : (..., m, d_v) array_like
        Values.
    rotations : (..., num_rounds, d, b/2) array_like, optional
        The LSH projections (:func:`refattn.sparse.draw_lsh_rotations`); drawn from ``rng`` when absent.
    omega : (r, d) or (..., r, d) array_like, optional
        Performer's projections (:func:`refattn.linear.draw_omega`, orthogonal, χ norms); drawn from
        ``rng`` when absent.
    rng : numpy.random.Generator or int, optional
        Draws what is not given (rotations first, then ω); refused when both are given.
    num_buckets : int or sequence of int, default 8
        *b*, buckets per round (1: every pair in the support, exact attention). With ``rotations``
        given, their columns must fit it; ``None`` takes it from them.
    num_rounds : int, default 2
        Hash rounds drawn (the official ``n_hashes = 2``).
    num_features : int, default 16
        *r*, Performer projections drawn (the hyperbolic map has 2r features: the official
        ``nb_features = 32``).
    kind : {"hyperbolic", "positive"}, default "hyperbolic"
        Performer's feature map: the official code's ``cosh`` features, or FAVOR+'s positive ones.
    scale : float, optional
        *s* (default :math:`1/\sqrt d`); see :func:`scatterbrain_parts`.
    causal : {False, True, "top-left", "bottom-right"}, default False
        Only pairs j ≤ i (bottom-right: j ≤ i + m − n); a row that sees no key is 0.
    method : {"auto", "equation", "pairs"}, default "auto"
        "equation": the dense parts (:func:`scatterbrain_parts`). "pairs": the low rank by its right
        product (causal: a prefix scan) and the sparse correction over the listed pairs, O((n + m)·r·d
        + |𝒮|·(d + r)) time, nothing n × m. "auto": "equation" while its n × m arrays fit the memory
        budget, else "pairs".
    return_weights : bool, default False
        Also return the effective matrix (rows of Â divided by their sums), with out = W V exactly.

    Returns
    -------
    out : (..., n, d_v) ndarray
    weights : (..., n, m) ndarray
        Only if ``return_weights``. Rows sum to 1 and are non-negative (both feature maps are positive).

    Notes
    -----
    **Exact limit.** With one bucket (``num_buckets=1``) every pair collides, S = E − L everywhere, and
    Â = L + (E − L) = exp(QKᵀ/√d): softmax attention, up to the rounding of the subtraction (relative
    ε·L_ij/E_ij per entry). With ``causal`` it is causal softmax attention.

    **Unbiased.** For ω with :math:`\mathcal N(0, I)` marginals, :math:`\mathrm E[\phi(x)^\top\phi(y)] =
    e^{x^\top y}`, so :math:`\mathrm E[\hat A] = e^{\tilde Q\tilde K^\top}` whatever the support (the
    paper's Theorem 1); the normalised rows are a ratio of unbiased estimates.

    **Paper and code.**

    * *The hash.* The paper's LSH finds pairs whose query and key collide; the official
      ``SBSmyrfAttention`` hashes with SMYRF: the asymmetric XBOX+ transform (which pads q and k so that
      the angle follows the inner product, using the largest norms of the sequence), then sorts the
      hashed queries and keys and cuts them into clusters of equal size (``q_cluster_size = 32`` for
      LRA), cluster c of queries attending cluster c of keys. Here the support is Reformer's angular LSH
      applied to q̃ and k̃ with the same rotations and bucket equality (no sorting into equal clusters),
      so whether a pair is in 𝒮 depends on that pair alone: permuting the tokens permutes the result,
      and under ``causal`` later tokens never change an earlier row. Buckets may be unequal in size.
    * *Rounds.* A pair found by several rounds counts once (the official code divides by its
      duplicate count, which amounts to the same).
    * *Features.* The official ``SBPerformerFeatures`` uses ``cosh`` (hyperbolic) features of an
      orthogonal Gaussian matrix with χ norms (``ortho_scaling = 0``) and q, k scaled by
      :math:`d^{-1/4}`, as here; it subtracts row and key maxima (log scales), as here (below). Its LRA
      configurations add ``softmax_eps = 1e-4`` to the features, a bias not in the paper, left out.

    **Row shift.** Row *i* of Â is computed as :math:`\hat A_{ij} e^{-c_i}`, a factor that cancels in its
    normalisation, with :math:`c_i = \max(\max_f a_f(\tilde q_i) + C_{l(i)},\ \max_{j \in \mathcal S_i}
    \tilde q_i\cdot\tilde k_j)`: *a* the features' exponents (:math:`\phi = e^{a}/\sqrt F`) and
    :math:`C_{l(i)}` the largest key exponent among the keys row *i* sees (a running maximum under ``causal``,
    so later keys never reach earlier rows). Every exponential is then at most 1, as softmax's row maximum
    makes it: scores beyond float64's exponent range (``exp(710)`` overflows) give the exact limit's softmax,
    and both methods shift by the same :math:`c_i`. A NaN or inf reaches the rows that see it, as in softmax
    attention.

    References
    ----------
    .. [1] B. Chen, T. Dao, E. Winsor, Z. Song, A. Rudra, C. Ré, "Scatterbrain: Unifying Sparse and
       Low-rank Attention Approximation", NeurIPS 2021, arXiv:2110.15343v1, §3 (Algorithm 1), Theorem 1.
    .. [2] HazyResearch/scatterbrain, ``src/models/attention/sbsmyrf_attention.py``,
       ``feature_maps_sb.py``, ``configs/experiment/lra/*/sbsmyrf.yaml``.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 6, 4))
    >>> out, W = scatterbrain_attention(q, k, v, rng=1, num_buckets=2, return_weights=True)
    >>> bool(np.allclose(W.sum(axis=-1), 1.0) and np.allclose(out, W @ v))
    True
    >>> from refattn import scaled_dot_product_attention
    >>> one = scatterbrain_attention(q, k, v, rng=1, num_buckets=1)
    >>> bool(np.allclose(one, scaled_dot_product_attention(q, k, v)))
    True
    """
    q, k, v, batch = checked_qkv(q, k, v)
    n, m, d, d_v = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    check_choice("kind", kind, KINDS)
    check_choice("method", method, METHODS)
    alignment = causal_alignment(causal)
    return_weights = check_bool("return_weights", return_weights)
    scale = default_scale(d) if scale is None else check_scale(scale)
    rng = optional_rng(rng)                                            # one stream: rotations first, then ω
    rotations = given_or_drawn("scatterbrain", "rotations", rotations, rng, what="its LSH rotations", draw=lambda r:
                               draw_lsh_rotations(r, d, num_buckets, check_positive_int("num_rounds", num_rounds)))
    if omega is None and rng is not None and d < 1:
        raise ValueError(f"scatterbrain draws omega over the d_k features of q: needs d_k >= 1, got q shape {q.shape}")
    omega = given_or_drawn("scatterbrain", "omega", omega, rng, what="Performer's projections ω",
                           draw=lambda r: draw_omega(r, check_positive_int("num_features", num_features), d))
    omega = check_omega(omega, d)
    rotations = as_float("rotations", rotations, min_ndim=3)
    lsh_buckets(np.zeros((1, d)), rotations, num_buckets)              # rotations against d and num_buckets
    batch = broadcast_batch({"q": q.shape[:-2], "k": k.shape[:-2], "v": v.shape[:-2], "omega": omega.shape[:-2],
                             "rotations": rotations.shape[:-3]})
    if return_weights:
        check_fits("the weights (return_weights=True)", (*batch, n, m))
    if n == 0 or m == 0:
        out = np.zeros((*batch, n, d_v))
        return (out, np.zeros((*batch, n, m))) if return_weights else out
    method = resolve_method(method, "pairs", (*batch, n, m))
    if method == "equation":
        _, W = _dense_weights(q, k, rotations, omega, num_buckets, kind, scale, alignment)
        empty = ~_allowed(alignment, n, m).any(axis=-1, keepdims=True)
        with np.errstate(invalid="ignore", over="ignore"):
            out = weighted_values(np.broadcast_to(W, (*batch, n, m)), v, _allowed(alignment, n, m), empty, "zero")
        out = np.broadcast_to(out, (*batch, n, d_v)).copy()
        return (out, np.broadcast_to(W, (*batch, n, m)).copy()) if return_weights else out
    out, weights = _by_pairs(q, k, v, rotations, omega, num_buckets, kind, scale, alignment, batch, return_weights)
    return (out, weights) if return_weights else out


def _by_pairs(q, k, v, rotations, omega, num_buckets, kind, scale, alignment, batch, return_weights):
    """The low rank by its right product (or causal scan) plus the sparse correction over the listed pairs, every
    row shifted by the same c_i as the equation path (:func:`_row_shift`)."""
    n, m, d_v = q.shape[-2], k.shape[-2], v.shape[-1]
    q_tilde, k_tilde = split_scale(q, k, scale)
    with np.errstate(invalid="ignore"):                                # a NaN row hashes as lsh_buckets says
        h_q = lsh_buckets(q_tilde, rotations, num_buckets)              # (..., R, n)
        h_k = lsh_buckets(k_tilde, rotations, num_buckets)              # (..., R, m)
    logs = _log_features(q_tilde, k_tilde, omega, kind, alignment)
    delta, last = last_keys(n, m, alignment)
    flat = {name: kernel_rows(x, batch, x.shape[-2:]) for name, x in
            (("q", q_tilde), ("k", k_tilde), ("v", v), ("a_q", logs.a_q), ("a_k", logs.a_k))}
    B = flat["q"].shape[0]
    finite = np.isfinite(flat["v"])                                   # (B, m, d_v)
    v_finite = np.where(finite, flat["v"], 0.0)                       # non-finite values: added row by row below
    logs = _LogFeatures(flat["a_q"], flat["a_k"], kernel_rows(logs.C, batch, (m,)))
    for name, h in (("h_q", h_q), ("h_k", h_k)):                      # (B, R, ·) integer buckets
        flat[name] = np.broadcast_to(h, (*batch, *h.shape[-2:])).reshape(B, *h.shape[-2:])
    pairs, M = [], np.full((B, n), -np.inf)                           # M_i: the support's largest q̃_i·k̃_j
    for b in range(B):
        i, j = _collisions(flat["h_q"][b], flat["h_k"][b], m)
        keep = j <= i + delta
        i, j = i[keep], j[keep]
        Z = np.empty(len(i))                                           # (|𝒮|,)  q̃_i·k̃_j on 𝒮
        for start in range(0, len(i), PAIR_BLOCK):                     # gathered rows PAIR_BLOCK pairs at a time
            p = slice(start, start + PAIR_BLOCK)
            Z[p] = np.einsum("pd,pd->p", flat["q"][b][i[p]], flat["k"][b][j[p]])
        with np.errstate(invalid="ignore"):
            np.maximum.at(M[b], i, Z)                                  # NaN kept, as np.max keeps it
        pairs.append((i, j, Z))
    c, C_row = _row_shift(logs, last, M)                              # (B, n)
    phi_q, psi_k = _shifted_features(logs, c, C_row)                  # (B, n, F), (B, m, F)
    num, den = np.empty((B, n, d_v)), np.empty((B, n))
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        if alignment is None:
            KV = np.swapaxes(psi_k, -1, -2) @ v_finite                  # (B, F, d_v)  ψ(K̃)ᵀV
            num[:] = phi_q @ KV                                         # (B, n, d_v)  φ(Q̃)(ψ(K̃)ᵀV)
            den[:] = (phi_q @ psi_k.sum(axis=-2)[..., None])[..., 0]    # (B, n)  φ(Q̃)(ψ(K̃)ᵀ1)
        else:
            from ..kernels.scan import causal_linear_scan  # Numba loads on first use only
            out_lr = np.empty((B, n, d_v))
            causal_linear_scan(phi_q, psi_k, v_finite, delta, 0.0, out_lr, den, shift=np.ascontiguousarray(logs.C))
            num[:] = np.where((den == 0)[..., None], 0.0, out_lr * den[..., None])   # Σ_{j ≤ l(i)} L_ij v_j
        weights = np.zeros((B, n, m)) if return_weights else None
        for b, (i, j, Z) in enumerate(pairs):
            correction = np.empty(len(i))                               # (|𝒮|,)  (E − L)·e^{−c_i} on 𝒮
            for start in range(0, len(i), PAIR_BLOCK):
                p = slice(start, start + PAIR_BLOCK)
                E = np.exp(Z[p] - c[b][i[p]])                           # exp(q̃_i·k̃_j − c_i)
                L = np.einsum("pf,pf->p", phi_q[b][i[p]], psi_k[b][j[p]]) \
                    * np.exp(logs.C[b][j[p]] - C_row[b][i[p]])          # φ(q̃_i)ᵀφ(k̃_j)·e^{−c_i}
                correction[p] = E - L
            S = scipy.sparse.csr_matrix((correction, (i, j)), shape=(n, m))   # S on 𝒮
            num[b] += S @ v_finite[b]                                   # (n, d_v)  + S V
            den[b] += np.bincount(i, weights=correction, minlength=n)   # (n,)      + S 1
            bad = np.flatnonzero(~finite[b].all(axis=-1))               # keys with a non-finite value
            if return_weights or len(bad):
                cols = np.arange(m) if return_weights else bad
                A_hat = _columns(phi_q[b], psi_k[b], logs.C[b], C_row[b], cols, alignment, i, j, correction)
            if len(bad):                                                # α_ij v_j IEEE-style, where j is allowed
                A_bad, v_bad = A_hat[:, bad] if return_weights else A_hat, flat["v"][b][bad]   # (n, b), (b, d_v)
                use = _allowed(alignment, n, m)[:, bad, None] & ~finite[b][bad][None]       # (n, b, d_v)
                num[b] += np.sum(np.where(use, A_bad[..., None] * v_bad[None], 0.0), axis=-2)
            if return_weights:
                weights[b] = A_hat
        sees_none = last < 0
        out = np.where(sees_none[:, None], 0.0, num / np.where(den == 0, 1.0, den)[..., None])
        if return_weights:
            weights = np.where(sees_none[:, None], 0.0, weights / np.where(den == 0, 1.0, den)[..., None])
    out = out.reshape(*batch, n, d_v)
    return out, (weights.reshape(*batch, n, m) if return_weights else None)


def _columns(phi_q, psi_k, C, C_row, cols, alignment, i, j, correction) -> NDArray:
    """(n, len(cols)): columns ``cols`` (sorted) of Â·e^{−c_i}, from the shifted features and the pairs' corrections."""
    n, m = phi_q.shape[0], psi_k.shape[0]
    rescale = np.exp(C[cols][None, :] - C_row[:, None])              # (n, c)  e^{C_j − C_{l(i)}}
    A_hat = np.where(_allowed(alignment, n, m)[:, cols], (phi_q @ psi_k[cols].T) * rescale, 0.0)   # L·e^{−c_i}
    on = np.isin(j, cols)
    A_hat[i[on], np.searchsorted(cols, j[on])] += correction[on]     # + (E − L)·e^{−c_i} on 𝒮
    return A_hat


def _collisions(h_q: NDArray, h_k: NDArray, m: int) -> tuple[NDArray, NDArray]:
    """The pairs (i, j) with h_r(q_i) = h_r(k_j) in some round, each once, sorted by i then j: O(|𝒮| log |𝒮|)."""
    codes = []
    for hq, hk in zip(h_q, h_k, strict=True):                        # one round at a time
        order = np.argsort(hk, kind="stable")
        sorted_k = hk[order]
        lo, hi = np.searchsorted(sorted_k, hq, "left"), np.searchsorted(sorted_k, hq, "right")
        count = hi - lo                                               # (n,)  keys in query i's bucket
        i = np.repeat(np.arange(len(hq)), count)
        offset = np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count)
        codes.append(i * m + order[np.repeat(lo, count) + offset])
    code = np.unique(np.concatenate(codes)) if codes else np.zeros(0, dtype=np.int64)
    return code // m, code % m


RECORD = Mechanism.of(
    scatterbrain_attention,                                        # 2 rounds of 2 buckets, r = 4: for short examples
    defaults={"num_buckets": 2, "num_features": WhenDrawn("omega", 4)},   # rotations do not say their buckets
    id="scatterbrain", title="Scatterbrain (LSH sparse + Performer low rank)", family="beyond",
    section="after the survey (sparse + low rank, cf. §4.1.2 and §4.2)", paper=SCATTERBRAIN,
    equation=r"\hat A = \phi(\tilde Q)\phi(\tilde K)^\top + \mathbb 1_{\mathcal S} \odot "
             r"\big(e^{\tilde Q\tilde K^\top} - \phi(\tilde Q)\phi(\tilde K)^\top\big),\quad "
             r"\mathrm{out} = \operatorname{diag}(\hat A\mathbf 1)^{-1}\hat A V",
    time="O((n + m)·r·d + |𝒮|·(d + r))", memory="O((n + m)·r + |𝒮|)", causal=True, cross=True,
    position_dependent=False,
    content_selected=True, methods=("equation", "pairs", "auto"),
    examples=({"kind": "positive", "num_features": 3}, {"num_buckets": 4, "num_rounds": 1, "scale": 0.7},
              {"num_buckets": (2, 4), "num_rounds": 3}),
    figure="refattn.figures.scatterbrain:scatterbrain",
    exact_options={"num_buckets": 1}, exact_limit="one bucket: the support covers every pair, so L + (E − L) = E",
    draws=("rotations", "omega"),
)
