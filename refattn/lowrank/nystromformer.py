r"""Nyströmformer (Xiong et al., 2021, arXiv:2102.03902v3; survey §4.4.2): softmax attention through l landmarks.

    Q̃ = segment means of Q,  K̃ = segment means of K              l landmarks each
    F̃ = softmax(Q K̃ᵀ/√d)      (n × l)
    Ã = softmax(Q̃ K̃ᵀ/√d)      (l × l)      A_S in the paper's Lemma 1, M in the survey
    B̃ = softmax(Q̃ Kᵀ/√d)      (l × m)
    Ŝ = F̃ Ã⁺ B̃                 (n × m)      the Nyström approximation of S = softmax(Q Kᵀ/√d)
    out = F̃ (Ã⁺ (B̃ V))         computed in this order: nothing n × m is ever formed

    Ã⁺ by the paper's iteration (third order, from Z₀ = Ãᵀ / (‖Ã‖₁ ‖Ã‖∞)):
    Z_{j+1} = ¼ Z_j (13 I − Ã Z_j (15 I − Ã Z_j (7 I − Ã Z_j))),      Ã⁺ ≈ Z_6
    or exactly (scipy.linalg.pinv).

    optional skip (official code): out += DepthwiseConv_K(V), one K-tap filter per head along the sequence

The Nyström method rebuilds a matrix from a few of its rows and columns and the pseudoinverse of
their intersection. Nyströmformer takes the "rows" and "columns" of S from landmark queries and
keys, the means of l contiguous segments of the sequence, so that the three factors cost
O((n + m)·l·d) and Ã⁺ O(l³): linear in the sequence length.

:func:`landmark_segments` and :func:`segment_means` give the landmarks, :func:`landmark_kernels`
the three softmax factors, :func:`iterative_pinv` and :func:`exact_pinv` the two pseudoinverses,
:func:`penrose_residuals` how far a pseudoinverse is from the Penrose conditions,
:func:`nystrom_factors` every factor at once (for plots and comparisons), and
:func:`nystromformer_attention` the attention. :func:`draw_conv_weights` draws the official code's
convolution skip, which is off by default.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import scipy.linalg
from numpy.typing import ArrayLike, NDArray

from ..common.budget import check_fits
from ..common.checks import (
    as_float,
    as_rng,
    broadcast_batch,
    check_bool,
    check_choice,
    check_qkv,
    check_scale,
    checked_qkv,
    default_scale,
)
from ..common.ints import check_non_negative_int, check_positive_int
from ..core.softmax import softmax
from ..draws import given_or_drawn, note_draw, optional_rng
from ..mechanism import Mechanism
from ..sparse.pattern import no_causal_form

__all__ = [
    "NystromFactors",
    "PenroseResiduals",
    "draw_conv_weights",
    "exact_pinv",
    "iterative_pinv",
    "landmark_kernels",
    "landmark_segments",
    "nystrom_factors",
    "nystromformer_attention",
    "penrose_residuals",
    "segment_means",
]

NYSTROMFORMER = ('Y. Xiong et al., 2021, "Nyströmformer: A Nyström-Based Algorithm for Approximating '
                 'Self-Attention", arXiv:2102.03902')
PINVS = ("iterative", "exact")
INITS = ("paper", "official")
ITERATIONS = 6
NO_CAUSAL_FORM = ("every landmark is the mean of a segment, and the landmark matrix's pseudoinverse couples all "
                  "segments, so each query's row mixes later keys and values; the paper defines none")


class PenroseResiduals(NamedTuple):
    r"""How far Z is from the pseudoinverse of M: Frobenius norms of the four Penrose conditions' residuals.

    M⁺ is the one matrix for which all four are 0.

    Attributes
    ----------
    mzm : (...) ndarray
        :math:`\|MZM - M\|_F`.
    zmz : (...) ndarray
        :math:`\|ZMZ - Z\|_F`.
    mz_symmetry : (...) ndarray
        :math:`\|(MZ)^\top - MZ\|_F`.
    zm_symmetry : (...) ndarray
        :math:`\|(ZM)^\top - ZM\|_F`.
    """

    mzm: NDArray
    zmz: NDArray
    mz_symmetry: NDArray
    zm_symmetry: NDArray


class NystromFactors(NamedTuple):
    r"""Every factor of the Nyström approximation :math:`\hat S = \tilde F \tilde A^+ \tilde B`.

    Attributes
    ----------
    Q_tilde : (..., l, d) ndarray
        The landmark queries :math:`\tilde Q`.
    K_tilde : (..., l, d) ndarray
        The landmark keys :math:`\tilde K`.
    F_tilde : (..., n, l) ndarray
        :math:`\operatorname{softmax}(Q \tilde K^\top / \sqrt d)`.
    A_tilde : (..., l, l) ndarray
        :math:`\operatorname{softmax}(\tilde Q \tilde K^\top / \sqrt d)`.
    A_tilde_pinv : (..., l, l) ndarray
        Its pseudoinverse, by the iteration or exactly.
    B_tilde : (..., l, m) ndarray
        :math:`\operatorname{softmax}(\tilde Q K^\top / \sqrt d)`.
    """

    Q_tilde: NDArray
    K_tilde: NDArray
    F_tilde: NDArray
    A_tilde: NDArray
    A_tilde_pinv: NDArray
    B_tilde: NDArray


def landmark_segments(n: int, num_landmarks: int) -> NDArray:
    r"""Where the l segments of n tokens begin and end: the first l − r hold ⌊n/l⌋ tokens, the last r one more.

    .. math::

        r = n \bmod l, \qquad
        |\text{segment}_j| = \lfloor n/l \rfloor + [\, j \ge l - r \,], \quad j = 0 \dots l - 1

    Parameters
    ----------
    n : int
        Sequence length, ``n >= 1``.
    num_landmarks : int
        *l*, the number of segments, ``1 <= l <= n``.

    Returns
    -------
    bounds : (l + 1,) ndarray of int64
        Segment *j* is tokens ``bounds[j] … bounds[j + 1] − 1``; ``bounds[0] = 0``, ``bounds[l] = n``.

    Notes
    -----
    The paper's segment-means take l segments of n/l tokens each, and its code
    (``code/attention_nystrom.py``, ``LRA/code/attention_nystrom.py``) reshapes the sequence into
    (l, n/l), which requires l to divide n. The authors later extended segment-means to any n
    (README, 2021-04-06; ``ImageNet/T2T-ViT/models/token_nystromformer.py``): with
    ``segs = n // l`` and ``num_k = (segs + 1)·l − n``, the first ``num_k`` segments hold ``segs``
    tokens and the remaining ``l − num_k = n mod l`` hold ``segs + 1``, the rule used here. (NumPy's
    ``array_split`` puts the longer segments first instead; lucidrains' ``nystrom-attention`` pads
    the sequence in front with ``l − n mod l`` zero tokens, which then take part in the attention.)
    l > n would leave a segment without a token and is refused.

    Examples
    --------
    >>> landmark_segments(7, 3)                       # 2 + 2 + 3 tokens
    array([0, 2, 4, 7])
    >>> landmark_segments(8, 4)                       # l divides n: the paper's segments
    array([0, 2, 4, 6, 8])
    """
    n = check_positive_int("n", n)
    num_landmarks = check_positive_int("num_landmarks", num_landmarks)
    if num_landmarks > n:
        raise ValueError(f"num_landmarks={num_landmarks} is more than the n={n} tokens: every landmark is the mean "
                         f"of a segment of at least one token, so num_landmarks <= {n}")
    size, longer = divmod(n, num_landmarks)
    lengths = size + (np.arange(num_landmarks) >= num_landmarks - longer)    # (l,)  ⌊n/l⌋, the last r: + 1
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


def segment_means(x: ArrayLike, num_landmarks: int) -> NDArray:
    r"""The landmarks: the mean of each of the l contiguous segments of the sequence (:func:`landmark_segments`).

    .. math::

        \tilde x_j = \frac{1}{|\text{segment}_j|} \sum_{i \in \text{segment}_j} x_i

    Parameters
    ----------
    x : (..., n, d) array_like
        Queries or keys, ``n >= 1``.
    num_landmarks : int
        *l*, ``1 <= l <= n``.

    Returns
    -------
    x_tilde : (..., l, d) ndarray

    Examples
    --------
    >>> segment_means(np.arange(7.0)[:, None], 3).ravel()      # (0+1)/2, (2+3)/2, (4+5+6)/3
    array([0.5, 2.5, 5. ])
    """
    x = as_float("x", x, min_ndim=2)
    bounds = landmark_segments(x.shape[-2], num_landmarks)
    with np.errstate(invalid="ignore", over="ignore"):             # inf − inf in a sum: NaN, as IEEE says
        sums = np.add.reduceat(x, bounds[:-1], axis=-2)            # (..., l, d)  Σ_{i ∈ segment j} x_i
    return sums / np.diff(bounds)[:, None]                         # (..., l, d)  x̃_j


def landmark_kernels(q: ArrayLike, k: ArrayLike, q_tilde: ArrayLike, k_tilde: ArrayLike, *,
                     scale: float | None = None) -> tuple[NDArray, NDArray, NDArray]:
    r"""The three softmax factors of a Nyström approximation, from queries, keys and their landmarks.

    .. math::

        \tilde F = \operatorname{softmax}(Q \tilde K^\top s), \quad
        \tilde A = \operatorname{softmax}(\tilde Q \tilde K^\top s), \quad
        \tilde B = \operatorname{softmax}(\tilde Q K^\top s), \qquad s = 1/\sqrt{d}

    Parameters
    ----------
    q : (..., n, d) array_like
        Queries.
    k : (..., m, d) array_like
        Keys.
    q_tilde : (..., l_q, d) array_like
        Landmark queries.
    k_tilde : (..., l_k, d) array_like
        Landmark keys.
    scale : float, optional
        *s*; default :math:`1/\sqrt{d}`.

    Returns
    -------
    F_tilde : (..., n, l_k) ndarray
    A_tilde : (..., l_q, l_k) ndarray
    B_tilde : (..., l_q, m) ndarray
        Each row sums to 1. A row whose scores are not finite (an Inf or NaN in its query, or in a
        key it reads, or an overflow) is NaN (the softmax's "nan" policy): nothing is hidden.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k = rng.standard_normal((2, 6, 4))
    >>> F, A, B = landmark_kernels(q, k, segment_means(q, 2), segment_means(k, 2))
    >>> F.shape, A.shape, B.shape
    ((6, 2), (2, 2), (2, 6))
    """
    q, k, q_tilde, k_tilde = (as_float(name, x, min_ndim=2) for name, x in
                              (("q", q), ("k", k), ("q_tilde", q_tilde), ("k_tilde", k_tilde)))
    for name, x in (("k", k), ("q_tilde", q_tilde), ("k_tilde", k_tilde)):
        if x.shape[-1] != q.shape[-1]:
            raise ValueError(f"q has d={q.shape[-1]} but {name} has d={x.shape[-1]} "
                             f"(q shape {q.shape}, {name} shape {x.shape})")
    broadcast_batch({"q": q.shape[:-2], "k": k.shape[:-2], "q_tilde": q_tilde.shape[:-2],
                     "k_tilde": k_tilde.shape[:-2]})
    scale = default_scale(q.shape[-1]) if scale is None else check_scale(scale)

    def kernel(a, b):                                              # softmax(a bᵀ s), NaN rows kept NaN
        with np.errstate(invalid="ignore", over="ignore"):
            return softmax((a @ np.swapaxes(b, -1, -2)) * scale, fully_masked="nan")

    return kernel(q, k_tilde), kernel(q_tilde, k_tilde), kernel(q_tilde, k)    # F̃, Ã, B̃


def exact_pinv(M: ArrayLike) -> NDArray:
    r"""The Moore–Penrose pseudoinverse of each matrix, by ``scipy.linalg.pinv`` (SVD).

    .. math::

        M^+ = V \Sigma^+ U^\top \quad\text{for}\quad M = U \Sigma V^\top

    Parameters
    ----------
    M : (..., r, c) array_like
        Matrices.

    Returns
    -------
    M_pinv : (..., c, r) ndarray
        NaN for a matrix with a NaN or Inf entry (whose SVD is undefined).

    Notes
    -----
    ``scipy.linalg.pinv`` with its default tolerances: singular values below
    ``max(r, c)·ε·σ_max`` (ε the float64 machine epsilon) count as zero. Here it also takes empty
    batches and non-finite matrices, which it refuses.

    Examples
    --------
    >>> M = np.array([[1.0, 2.0], [2.0, 4.0]])             # rank 1
    >>> Z = exact_pinv(M)
    >>> bool(np.allclose(M @ Z @ M, M))
    True
    """
    M = as_float("M", M, min_ndim=2)
    Z = np.full((*M.shape[:-2], M.shape[-1], M.shape[-2]), np.nan)
    if M.size == 0:
        return np.zeros_like(Z)
    flat, out = M.reshape(-1, *M.shape[-2:]), Z.reshape(-1, M.shape[-1], M.shape[-2])
    finite = np.isfinite(flat).all(axis=(-2, -1))
    if finite.any():
        out[finite] = scipy.linalg.pinv(flat[finite])              # (b, c, r)  M⁺ = V Σ⁺ Uᵀ
    return Z


def iterative_pinv(M: ArrayLike, iterations: int = ITERATIONS, *, init: str = "paper") -> NDArray:
    r"""The pseudoinverse by the paper's third-order iteration, from Z₀ = Mᵀ/(‖M‖₁ ‖M‖∞).

    .. math::

        Z_0 = \frac{M^\top}{\|M\|_1 \|M\|_\infty}, \qquad
        Z_{j+1} = \tfrac14 Z_j \big(13 I - M Z_j (15 I - M Z_j (7 I - M Z_j))\big)

    Parameters
    ----------
    M : (..., r, c) array_like
        Matrices (in Nyströmformer, the l × l softmax of the landmarks).
    iterations : int, default 6
        Steps of the iteration (the official code's ``n_iter = 6``); 0 returns :math:`Z_0`.
    init : {"paper", "official"}, default "paper"
        "paper": per matrix, :math:`\|M\|_1 = \max_j \sum_i |M_{ij}|` and
        :math:`\|M\|_\infty = \max_i \sum_j |M_{ij}|`. "official": the official code's
        ``1 / torch.max(torch.sum(K, dim=-2)) * K.transpose(-1, -2)``, one coefficient for the whole
        call, the largest column sum of every matrix of every leading dimension (batch and heads
        alike); see Notes.

    Returns
    -------
    Z : (..., c, r) ndarray
        The iterate :math:`Z_{\text{iterations}}`. NaN for a matrix with a NaN or Inf entry (with
        ``init="official"``, for every matrix of the call). A zero matrix gives zero (its
        pseudoinverse).

    Notes
    -----
    **Convergence.** Every iterate is :math:`M^\top g(M M^\top)` for a polynomial *g*, so
    :math:`M Z_j` is symmetric and shares its eigenvectors with :math:`M M^\top`. For a singular
    value σ of M, the eigenvalue :math:`e = 1 - \alpha\sigma^2` of :math:`I - M Z_0`
    (α the initial coefficient) evolves as

    .. math::

        e_{j+1} = \tfrac14 e_j^3 (3 + e_j)

    (expand :math:`\tfrac14 x (13 - 15x + 7x^2 - x^3)` at :math:`x = 1 - e`): third-order once
    :math:`e` is small, but a direction with :math:`\delta = \alpha\sigma^2 \ll 1` first gains only
    a factor of about 13/4 per step (:math:`1 - e_{j+1} \approx \tfrac{13}{4}(1 - e_j)`). With
    :math:`\delta = \alpha\sigma_{\min}^2`, the iteration reached :func:`exact_pinv` to 10⁻¹²
    (largest entry, relative) in exactly :math:`\lceil \log(1/\delta)/\log(13/4) \rceil + 3`
    steps on the seeded landmark matrices of the tests (condition numbers 41 to 441: 10 to 14
    steps; 11 for an 8 × 8 one of condition number 86, where the official 6 leave a relative error
    of 0.79). By that count the 6 official steps converge only matrices with :math:`\delta \ge 0.03`, and
    leave the smallest directions of the others almost untouched (mlpen/Nystromformer issue #6,
    where 6 steps were found "not enough"; the authors measured about 12 steps of the global
    initialisation to match 6 of the per-matrix one).

    **The initial coefficient.** The paper (Lemma 1) takes
    :math:`Z_0 = A_S^\top / (\|A_S\|_1 \|A_S\|_\infty)` for each matrix; for a softmax matrix
    :math:`\|A_S\|_\infty = 1` (its rows sum to 1). The official code (``iterative_inv``) reduces
    the column sums with one ``torch.max`` over all its dimensions, batch and heads included
    (issue #3): every matrix of the call gets the smallest coefficient of any, and a matrix of small
    norm beside one of large norm (a head whose landmarks all attend to one key, ‖·‖₁ ≈ l) starts
    up to l times too small and needs about :math:`\log l / \log(13/4)` more steps. The fix of
    2021-02-27 added the per-matrix coefficient as an option (``init_option`` other than
    "original") and left the global one the default; its constructor tests the configuration key
    ``inv_coeff_init_option`` but reads ``inv_init_coeff_option``, and HuggingFace's
    ``NystromformerSelfAttention`` repeats the two names (it tests ``config.inv_coeff_init_option``
    and reads ``config["inv_init_coeff_option"]``). The T2T-ViT code of the same repository
    defaults to the per-matrix coefficient ("exact"). lucidrains'
    ``moore_penrose_iter_pinv`` also takes global maxima, of the absolute row sums and of the
    absolute column sums, over the batch and heads.

    References
    ----------
    .. [1] Y. Xiong et al., "Nyströmformer: A Nyström-Based Algorithm for Approximating
       Self-Attention", AAAI 2021, arXiv:2102.03902v3, Lemma 1.
    .. [2] mlpen/Nystromformer, ``code/attention_nystrom.py`` (``iterative_inv``); issues #3, #6.

    Examples
    --------
    >>> M = np.array([[0.7, 0.3], [0.2, 0.8]])
    >>> bool(np.allclose(iterative_pinv(M, 12), np.linalg.inv(M), rtol=1e-12, atol=0))
    True
    """
    M = as_float("M", M, min_ndim=2)
    iterations = check_non_negative_int("iterations", iterations)
    check_choice("init", init, INITS)
    M_T = np.swapaxes(M, -1, -2)                                   # (..., c, r)
    if M.size == 0:
        return np.zeros(M_T.shape)
    with np.errstate(invalid="ignore", over="ignore"):
        if init == "paper":
            norm_1 = np.abs(M).sum(axis=-2).max(axis=-1)           # (...)  ‖M‖₁ = max_j Σ_i |M_ij|
            norm_inf = np.abs(M).sum(axis=-1).max(axis=-1)         # (...)  ‖M‖∞ = max_i Σ_j |M_ij|
            alpha = _reciprocal(norm_1 * norm_inf)[..., None, None]
        else:
            alpha = _reciprocal(M.sum(axis=-2).max())              # one number: max over every column and batch
        Z = alpha * M_T                                            # (..., c, r)  Z₀
        I = np.eye(M.shape[-2])                                    # (r, r)
        for _ in range(iterations):
            MZ = M @ Z                                             # (..., r, r)
            Z = 0.25 * Z @ (13 * I - MZ @ (15 * I - MZ @ (7 * I - MZ)))   # Z_{j+1}
    return Z


def _reciprocal(x):
    """1/x, and 0 where x is 0 (a zero matrix: Z₀ = 0, whose iterates stay 0 = 0⁺)."""
    x = np.asarray(x, dtype=np.float64)
    return np.divide(1.0, x, out=np.zeros_like(x), where=x != 0)


def penrose_residuals(M: ArrayLike, Z: ArrayLike) -> PenroseResiduals:
    r"""How far Z is from M⁺: the Frobenius norms of the four Penrose conditions' residuals.

    .. math::

        \|MZM - M\|_F, \quad \|ZMZ - Z\|_F, \quad \|(MZ)^\top - MZ\|_F, \quad \|(ZM)^\top - ZM\|_F

    Parameters
    ----------
    M : (..., r, c) array_like
        Matrices.
    Z : (..., c, r) array_like
        Candidate pseudoinverses (:func:`iterative_pinv`, :func:`exact_pinv`).

    Returns
    -------
    PenroseResiduals
        Four (...) arrays; all zero exactly when Z = M⁺. The first is in the units of M and the
        second in those of Z (compare them with ‖M‖_F and ‖Z‖_F: rounding alone leaves about
        ε·κ(M) of each); the last two are residuals of MZ and ZM, which for Z = M⁺ are orthogonal
        projections.

    Examples
    --------
    >>> M = np.array([[2.0, 1.0], [1.0, 1.0]])
    >>> r = penrose_residuals(M, exact_pinv(M))
    >>> bool(max(r) < 1e-14)
    True
    >>> float(penrose_residuals(M, np.zeros((2, 2))).mzm)     # Z = 0: ‖M‖_F
    2.6457513110645907
    """
    M, Z = as_float("M", M, min_ndim=2), as_float("Z", Z, min_ndim=2)
    if Z.shape[-2:] != M.shape[-2:][::-1]:
        raise ValueError(f"Z must have shape (..., {M.shape[-1]}, {M.shape[-2]}) for M of shape {M.shape}, "
                         f"got Z shape {Z.shape}")
    broadcast_batch({"M": M.shape[:-2], "Z": Z.shape[:-2]})
    MZ, ZM = M @ Z, Z @ M                                          # (..., r, r), (..., c, c)

    def norm(x):
        return np.sqrt(np.sum(x * x, axis=(-2, -1)))

    return PenroseResiduals(norm(MZ @ M - M), norm(ZM @ Z - Z), norm(np.swapaxes(MZ, -1, -2) - MZ),
                            norm(np.swapaxes(ZM, -1, -2) - ZM))


def nystrom_factors(q: ArrayLike, k: ArrayLike, *, num_landmarks: int = 64, pinv: str = "iterative",
                    iterations: int = ITERATIONS, init: str = "paper", scale: float | None = None) -> NystromFactors:
    r"""Every factor of Nyströmformer's approximation: the landmarks, F̃, Ã, Ã⁺ and B̃.

    .. math::

        \hat S = \tilde F \tilde A^+ \tilde B
               = \operatorname{softmax}(Q\tilde K^\top/\sqrt d)\,
                 \operatorname{softmax}(\tilde Q\tilde K^\top/\sqrt d)^+\,
                 \operatorname{softmax}(\tilde Q K^\top/\sqrt d)

    Parameters
    ----------
    q : (..., n, d) array_like
        Queries, ``n >= 1``.
    k : (..., m, d) array_like
        Keys, ``m >= 1``.
    num_landmarks : int, default 64
        *l* (*m* in the paper), landmarks of the queries and of the keys alike, ``l <= min(n, m)``.
    pinv : {"iterative", "exact"}, default "iterative"
        :func:`iterative_pinv` (the paper and its code) or :func:`exact_pinv`.
    iterations : int, default 6
        Steps of the iteration (``pinv="iterative"`` only).
    init : {"paper", "official"}, default "paper"
        The iteration's initial coefficient (``pinv="iterative"`` only; see :func:`iterative_pinv`).
    scale : float, optional
        Multiplier of the dot products; default :math:`1/\sqrt{d}`.

    Returns
    -------
    NystromFactors
        ``F_tilde @ A_tilde_pinv @ B_tilde`` is the effective (n × m) matrix Ŝ.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k = rng.standard_normal((2, 9, 4))
    >>> f = nystrom_factors(q, k, num_landmarks=3)
    >>> f.F_tilde.shape, f.A_tilde_pinv.shape, f.B_tilde.shape
    ((9, 3), (3, 3), (3, 9))
    """
    q, k = as_float("q", q, min_ndim=2), as_float("k", k, min_ndim=2)
    check_qkv(q, k, k)
    check_choice("pinv", pinv, PINVS)
    check_choice("init", init, INITS)
    iterations = check_non_negative_int("iterations", iterations)
    num_landmarks = _check_landmarks(num_landmarks, q.shape[-2], k.shape[-2])
    Q_tilde, K_tilde = segment_means(q, num_landmarks), segment_means(k, num_landmarks)   # (..., l, d)
    batch = broadcast_batch({"q": q.shape[:-2], "k": k.shape[:-2]})
    check_fits("the factor softmax(QK̃ᵀ/√d)", (*batch, q.shape[-2], num_landmarks))
    check_fits("the factor softmax(Q̃Kᵀ/√d)", (*batch, num_landmarks, k.shape[-2]))
    F_tilde, A_tilde, B_tilde = landmark_kernels(q, k, Q_tilde, K_tilde, scale=scale)
    A_tilde_pinv = exact_pinv(A_tilde) if pinv == "exact" else iterative_pinv(A_tilde, iterations, init=init)
    return NystromFactors(Q_tilde, K_tilde, F_tilde, A_tilde, A_tilde_pinv, B_tilde)


def _check_landmarks(num_landmarks, n: int, m: int) -> int:
    """l as an int, 1 <= l <= min(n, m), or a ValueError naming num_landmarks and the lengths."""
    num_landmarks = check_positive_int("num_landmarks", num_landmarks)
    if num_landmarks > min(n, m):
        raise ValueError(f"num_landmarks={num_landmarks} is more than the tokens to average: q has n={n} and k has "
                         f"m={m}, and every landmark is the mean of a segment of at least one token, so "
                         f"num_landmarks <= {min(n, m)} (num_landmarks = n with pinv='exact' is exact attention)")
    return num_landmarks


def draw_conv_weights(rng, kernel_size: int, shape: tuple[int, ...] = ()) -> NDArray:
    r"""Draw the convolution skip's filters as PyTorch initialises the official ``nn.Conv2d``: U(±1/√K).

    .. math::

        w_t \sim \mathcal U\big(-1/\sqrt K,\; 1/\sqrt K\big), \quad t = 0 \dots K - 1

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw.
    kernel_size : int
        *K*, odd (the official code pads K // 2 on each side, so only an odd K keeps n outputs).
    shape : tuple of int, default ()
        Leading dimensions: ``(h,)`` for one filter per head, as the official grouped convolution
        (``groups = num_head``) has.

    Returns
    -------
    conv_weights : (*shape, K) ndarray

    Notes
    -----
    ``nn.Conv2d`` initialises its weight with ``kaiming_uniform_(a=√5)``, which is
    :math:`\mathcal U(\pm 1/\sqrt{\text{fan\_in}})`; a depthwise (K, 1) kernel has fan_in = K. The
    draw is ``rng.uniform(-b, b, size=(*shape, K))``, so another implementation can reproduce it.

    Examples
    --------
    >>> w = draw_conv_weights(0, 33)
    >>> w.shape, bool(np.all(np.abs(w) <= 1 / np.sqrt(33)))
    ((33,), True)
    """
    rng = as_rng(rng)
    K = _check_kernel_size(kernel_size)
    shape = tuple(check_non_negative_int("shape", s) for s in shape)
    bound = 1.0 / np.sqrt(K)
    return rng.uniform(-bound, bound, size=(*shape, K))


def _check_kernel_size(kernel_size, name: str = "kernel_size") -> int:
    K = check_positive_int(name, kernel_size)
    if K % 2 == 0:
        raise ValueError(f"{name} must be odd (the skip pads K // 2 tokens on each side and keeps n outputs), "
                         f"got {name}={K}")
    return K


def nystromformer_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    num_landmarks: int = 64,
    pinv: str = "iterative",
    iterations: int = ITERATIONS,
    init: str = "paper",
    conv_weights: ArrayLike | None = None,
    conv_kernel_size: int | None = None,
    rng: np.random.Generator | int | None = None,
    scale: float | None = None,
    causal: bool = False,
    return_weights: bool = False,
) -> NDArray | tuple[NDArray, NDArray]:
    r"""Nyström attention: F̃ (Ã⁺ (B̃ V)) from the segment means of Q and K, never forming n × m.

    .. math::

        \mathrm{out} = \operatorname{softmax}\Big(\frac{Q\tilde K^\top}{\sqrt d}\Big)\,
            \operatorname{softmax}\Big(\frac{\tilde Q\tilde K^\top}{\sqrt d}\Big)^{+}\,
            \operatorname{softmax}\Big(\frac{\tilde Q K^\top}{\sqrt d}\Big) V
            \;\big[\, + \operatorname{conv}_w(V) \,\big]

    with :math:`\tilde Q, \tilde K` the means of l contiguous segments (:func:`segment_means`).

    Parameters
    ----------
    q : (..., n, d) array_like
        Queries.
    k : (..., m, d) array_like
        Keys.
    v : (..., m, d_v) array_like
        Values.
    num_landmarks : int, default 64
        *l* (*m* in the paper), ``1 <= l <= min(n, m)`` when n and m are both > 0.
    pinv : {"iterative", "exact"}, default "iterative"
        How :math:`\tilde A^+` is computed: the paper's iteration (:func:`iterative_pinv`), or
        ``scipy.linalg.pinv`` (:func:`exact_pinv`).
    iterations : int, default 6
        Steps of the iteration, the official code's 6 (``pinv="iterative"`` only).
    init : {"paper", "official"}, default "paper"
        The iteration's initial coefficient: per matrix (the paper's Lemma 1), or the official
        code's one maximum over every batch element and head (issue #3); see
        :func:`iterative_pinv`.
    conv_weights : (..., K) array_like, optional
        The official code's skip: out += a depthwise convolution of V along the sequence with this
        K-tap filter (K odd, zero padding, cross-correlation as ``nn.Conv2d``), its leading
        dimensions broadcasting against the batch (``(h, K)``: one filter per head for a
        ``(b, h, n, d)`` batch). Needs n = m (the convolved values are added to the rows of the
        same positions). Default: no skip (the paper's equation). :func:`draw_conv_weights` draws
        them as PyTorch initialises them.
    conv_kernel_size : int, optional
        *K*: turns the skip on with one K-tap filter drawn from ``rng`` by :func:`draw_conv_weights`
        (unless ``conv_weights`` gives it, which must then have K taps).
    rng : numpy.random.Generator or int, optional
        Draws the skip's filter when ``conv_kernel_size`` is given without ``conv_weights``.
    scale : float, optional
        Multiplier of the dot products; default :math:`1/\sqrt{d}`.
    causal : bool, default False
        Must be False: Nyströmformer has no causal form (see Notes).
    return_weights : bool, default False
        Also return the effective matrix :math:`W = \hat S\,[+ C_w]`, with out = W V exactly
        (:math:`C_w` the n × n banded matrix of the convolution).

    Returns
    -------
    out : (..., n, d_v) ndarray
    weights : (..., n, m) ndarray
        Only if ``return_weights``. Its rows need not sum to 1 nor be non-negative (Notes).

    Notes
    -----
    **Cost.** :math:`\tilde F` (n × l), :math:`\tilde A^+` (l × l) and :math:`\tilde B V` (l × d_v)
    are formed in that order, then :math:`\tilde F (\tilde A^+ (\tilde B V))`: O((n + m)·l·d + l³
    per iteration) time and O((n + m)·l + l²) memory; the n × m matrix only with
    ``return_weights``.

    **Rows (issue #14).** :math:`\tilde A \mathbf 1 = \mathbf 1` (its rows sum to 1), so when
    :math:`\tilde A` is invertible and its inverse exact, :math:`\hat S \mathbf 1 = \tilde F
    \tilde A^{-1} \mathbf 1 = \tilde F \mathbf 1 = \mathbf 1`: the rows sum to 1, though some
    entries are negative. With the 6-step iteration (whose :math:`Z \mathbf 1 \ne \mathbf 1` until
    it has converged), or a singular :math:`\tilde A`, they need not: :math:`\tilde A^+ \mathbf 1`
    is the projection of :math:`\mathbf 1` on the row space of :math:`\tilde A`, which two equal
    landmark queries (two equal rows) can leave without it. The authors' advice is to renormalise
    afterwards, which this function does not do.

    **Exact limit.** With l = n = m every segment is one token, :math:`\tilde Q = Q`,
    :math:`\tilde K = K`, and :math:`\hat S = S S^+ S = S`: with ``pinv="exact"`` this is softmax
    attention to rounding. (The official code switches to plain softmax attention when
    ``num_landmarks == seq_len``; here the same equation runs.)

    **Paper and code.**

    * *Scale.* The official code scales q and k by :math:`d^{-1/4}` each before the segment means;
      the means are linear, so the scores are those of ``scale = 1/√d`` here, up to rounding.
    * *Landmarks* when l does not divide n: :func:`landmark_segments`.
    * *The pseudoinverse's initial coefficient*: ``init`` (:func:`iterative_pinv`).
    * *The skip*: ``conv_kernel_size`` in the official configurations adds
      ``nn.Conv2d(h, h, (K, 1), padding=(K // 2, 0), groups=h, bias=False)`` applied to V (one
      filter per head, shared by the d_v channels). Off in the paper's equation and here by
      default; lucidrains' port has it on (``residual_conv_kernel = 33``), HuggingFace's
      configuration sets ``conv_kernel_size = 65``.
    * *Masks.* The official code zeroes padded positions in Q and K and gives their keys −10⁹ in
      :math:`\tilde B`; padding is not part of the paper's equation and this function takes no mask.

    **No causal form.** A landmark is the mean of a segment, so the landmark keys mix future
    positions into every query's row, and :math:`\tilde A^+` couples all segments: output *i*
    depends on keys and values after *i* however the segments are cut. The paper defines no causal
    variant (its models are encoders), and ``causal=True`` is refused.

    **Non-finite input.** Every output row mixes every landmark, so a NaN or Inf in any query, key
    or value reaches every row of its batch element (and, with ``init="official"``, every batch
    element, through the shared coefficient).

    References
    ----------
    .. [1] Y. Xiong et al., "Nyströmformer: A Nyström-Based Algorithm for Approximating
       Self-Attention", AAAI 2021, arXiv:2102.03902v3.
    .. [2] mlpen/Nystromformer, ``code/attention_nystrom.py``, ``LRA/code/attention_nystrom.py``,
       ``ImageNet/T2T-ViT/models/token_nystromformer.py``; issues #3, #6, #14.
    .. [3] lucidrains/nystrom-attention; HuggingFace transformers, ``NystromformerSelfAttention``.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 12, 4))
    >>> out, W = nystromformer_attention(q, k, v, num_landmarks=4, return_weights=True)
    >>> out.shape, bool(np.allclose(out, W @ v))
    ((12, 4), True)
    >>> exact = nystromformer_attention(q, k, v, num_landmarks=12, pinv="exact")
    >>> from refattn import scaled_dot_product_attention
    >>> bool(np.allclose(exact, scaled_dot_product_attention(q, k, v)))
    True
    """
    no_causal_form(causal, "Nyströmformer", NO_CAUSAL_FORM)
    rng = optional_rng(rng)
    if conv_kernel_size is None and conv_weights is None:
        note_draw("conv_weights", None)                            # no skip: the paper's equation
    else:
        K = None if conv_kernel_size is None else _check_kernel_size(conv_kernel_size, "conv_kernel_size")
        if K is not None and conv_weights is not None and np.shape(conv_weights)[-1:] != (K,):
            raise ValueError(f"conv_weights has {np.shape(conv_weights)[-1:]} taps but conv_kernel_size={K}")
        conv_weights = given_or_drawn("nystromformer", "conv_weights", conv_weights, rng,
                                      lambda r: draw_conv_weights(r, K), what="the skip's filter")
    out, weights = _nystrom(q, k, v, num_landmarks, pinv, iterations, init, conv_weights, scale, return_weights)
    return (out, weights) if return_weights else out


def _nystrom(q, k, v, num_landmarks, pinv, iterations, init, conv_weights, scale, return_weights):
    """Check everything, then F̃ (Ã⁺ (B̃ V)) [+ conv(V)]: ``(out, weights or None)``."""
    q, k, v, batch = checked_qkv(q, k, v)
    n, m, d_v = q.shape[-2], k.shape[-2], v.shape[-1]
    check_choice("pinv", pinv, PINVS)
    check_choice("init", init, INITS)
    iterations = check_non_negative_int("iterations", iterations)
    num_landmarks = check_positive_int("num_landmarks", num_landmarks)
    scale = default_scale(q.shape[-1]) if scale is None else check_scale(scale)
    return_weights = check_bool("return_weights", return_weights)
    if conv_weights is not None:
        conv_weights = as_float("conv_weights", conv_weights, min_ndim=1)
        _check_kernel_size(conv_weights.shape[-1])
        if n != m:
            raise ValueError(f"conv_weights adds conv(V) to the output rows of the same positions, so it needs n == m; "
                             f"got q with n={n} and v with m={m}")
        batch = broadcast_batch({"q": q.shape[:-2], "k": k.shape[:-2], "v": v.shape[:-2],
                                 "conv_weights": conv_weights.shape[:-1]})
    if return_weights:
        check_fits("the weights (return_weights=True)", (*batch, n, m))
    if n == 0 or m == 0:                                           # no query, or no key to see: zero rows
        return np.zeros((*batch, n, d_v)), (np.zeros((*batch, n, m)) if return_weights else None)
    factors = nystrom_factors(q, k, num_landmarks=num_landmarks, pinv=pinv, iterations=iterations, init=init,
                              scale=scale)
    F_tilde, Z, B_tilde = factors.F_tilde, factors.A_tilde_pinv, factors.B_tilde
    with np.errstate(invalid="ignore", over="ignore"):
        out = F_tilde @ (Z @ (B_tilde @ v))                        # (..., n, d_v)  F̃ (Ã⁺ (B̃ V))
        weights = (F_tilde @ Z) @ B_tilde if return_weights else None   # (..., n, m)  Ŝ
    if conv_weights is not None:
        with np.errstate(invalid="ignore", over="ignore"):
            out = out + _value_convolution(v, conv_weights)        # (..., n, d_v)  + conv_w(V)
        if return_weights:
            weights = weights + _convolution_matrix(conv_weights, n)   # (..., n, n)  + C_w
    out = np.broadcast_to(out, (*batch, n, d_v)).copy()
    if return_weights:
        weights = np.broadcast_to(weights, (*batch, n, m)).copy()
    return out, weights


def _value_convolution(v: NDArray, w: NDArray) -> NDArray:
    """conv_w(V)_i = Σ_t w_t v_{i + t − K//2} (zero outside the sequence): one shifted slice per tap."""
    K, n = w.shape[-1], v.shape[-2]
    half = K // 2
    out = np.zeros((*np.broadcast_shapes(v.shape[:-2], w.shape[:-1]), n, v.shape[-1]))
    for t in range(K):
        shift = t - half                                           # out_i += w_t v_{i + shift}
        lo, hi = max(0, -shift), min(n, n - shift)
        if lo < hi:
            out[..., lo:hi, :] += w[..., t, None, None] * v[..., lo + shift:hi + shift, :]
    return out


def _convolution_matrix(w: NDArray, n: int) -> NDArray:
    """The (..., n, n) matrix C_w of the skip: C_ij = w_{j − i + K//2} where |j − i| <= K//2, else 0."""
    K = w.shape[-1]
    offset = np.arange(n) - np.arange(n)[:, None] + K // 2         # (n, n)  j − i + K//2
    inside = (offset >= 0) & (offset < K)
    return np.where(inside, w[..., np.clip(offset, 0, K - 1)], 0.0)


RECORD = Mechanism.of(
    nystromformer_attention, defaults={"num_landmarks": 3}, allowed=None,
    id="nystromformer", title="Nyströmformer (Moore–Penrose pseudoinverse)", family="lowrank", section="4.4.2",
    paper=NYSTROMFORMER,
    equation=r"\hat S = \operatorname{softmax}\!\Big(\frac{Q\tilde K^\top}{\sqrt d}\Big)\,"
             r"\operatorname{softmax}\!\Big(\frac{\tilde Q\tilde K^\top}{\sqrt d}\Big)^{+}\,"
             r"\operatorname{softmax}\!\Big(\frac{\tilde Q K^\top}{\sqrt d}\Big)",
    time="O((n + m)·l·d + l³·iterations)", memory="O((n + m)·l + l²)", kind="attention",
    causal=False, cross=False, position_dependent=True,
    normalized=False, nonnegative=False,
    examples=({"pinv": "exact"}, {"init": "official", "iterations": 3}, {"conv_kernel_size": 3}),
    figure="refattn.figures.nystromformer:nystromformer",
    exact_options=lambda n, m: {"num_landmarks": n, "pinv": "exact"},
    exact_limit="l = n landmarks (each segment one token) with the exact pseudoinverse",
    draws=("conv_weights",),
)
