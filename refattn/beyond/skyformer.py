r"""Skyformer (Chen, Zeng, Ji & Yang 2021, arXiv:2111.00035v1): a Gaussian kernel for softmax, approximated by Nyström.

    q̃_i = q_i / d^{1/4},  k̃_j = k_j / d^{1/4}                   (scale s = 1/√d: q̃·k̃ = s q·k)
    κ(x, y) = exp(−‖x − y‖²/2)                                   the standard Gaussian kernel
    C = κ(Q̃, K̃)                                                  (n × m)  kernelized attention: out = C V   (Eq. 3)
      = D_Q^{−1/2} exp(Q Kᵀ/√d) D_K^{−1/2},   (D_Q)_ii = exp(‖q_i‖²/√d)   no row normaliser

    C̄ = κ([Q̃; K̃], [Q̃; K̃])                                       (n + m) × (n + m), PSD       (Eq. 4)
    S: l columns of the identity drawn uniformly (landmarks: l of the n + m points, with replacement)
    C̃ = (I, 0) C̄ S (Sᵀ C̄ S)⁺ Sᵀ C̄ (0, I)ᵀ                          the Nyström approximation's
      = κ(Q̃, X_L) (κ(X_L, X_L))⁺ κ(X_L, K̃)                          off-diagonal block   (Eq. 5, 6)

    in practice (§4.4):  M = κ(X_L, X_L) + γ I,  D_M = diag(M 1),
    (·)⁺ ≈ D_M^{−1/2} Z D_M^{−1/2},  Z ≈ (D_M^{−1/2} M D_M^{−1/2})⁻¹ by Nyströmformer's iteration
    out = κ(Q̃, X_L) (D_M^{−1/2} Z D_M^{−1/2} (κ(X_L, K̃) V))      nothing n × m is formed

Skyformer drops softmax's normaliser: kernelized attention is exp(QKᵀ/√d) with each row divided by
:math:`e^{\|q_i\|^2/2\sqrt d}` and each column by :math:`e^{\|k_j\|^2/2\sqrt d}`, a symmetric
normalisation instead of softmax's row sums. Its rows do not sum to 1, and no setting of it is softmax
attention. Nyström needs a PSD matrix, and κ(Q̃, K̃) is not one (Q ≠ K); Skyformer makes it the
off-diagonal block of the PSD kernel matrix of all n + m points and samples its landmarks among them.
With every point as a landmark, γ = 0 and the exact pseudoinverse, C̃ = (I, 0) C̄ C̄⁺ C̄ (0, I)ᵀ = C: the
approximation is exact kernelized attention.

:func:`gaussian_kernel` is κ, :func:`kernelized_attention` the exact C V, :func:`draw_skyformer_landmarks`
the landmark draw, :func:`skyformer_factors` every factor, :func:`skyformer_attention` the attention. The
pseudoinverse (iterative or exact) is Nyströmformer's (:func:`refattn.lowrank.iterative_pinv`,
:func:`refattn.lowrank.exact_pinv`).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
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
from ..common.products import split_scale
from ..draws import given_or_drawn, optional_rng
from ..lowrank.nystromformer import INITS, ITERATIONS, PINVS, exact_pinv, iterative_pinv
from ..mechanism import Mechanism, WhenDrawn
from ..sparse.pattern import no_causal_form

__all__ = [
    "SkyformerFactors",
    "draw_skyformer_landmarks",
    "gaussian_kernel",
    "kernelized_attention",
    "skyformer_attention",
    "skyformer_factors",
]

SKYFORMER = ('Y. Chen, Q. Zeng, H. Ji, Y. Yang, 2021, "Skyformer: Remodel Self-Attention with Gaussian Kernel and '
             'Nyström Method", arXiv:2111.00035')
SAMPLINGS = ("paper", "official")
GAMMA = 0.1                                                        # official: STAS + 1e-1 * eye
NUM_LANDMARKS = 128                                                # official configurations: nb_features = 128
NO_CAUSAL_FORM = ("the landmarks are drawn among all n + m queries and keys, and the pseudoinverse of their kernel "
                  "matrix couples them, so every output row mixes later keys and values; the paper defines none")


class SkyformerFactors(NamedTuple):
    r"""Every factor of Skyformer's approximation :math:`\tilde C = F\, W\, B`.

    Attributes
    ----------
    landmarks : (..., l) ndarray of int64
        Which of the n + m points :math:`[\tilde Q; \tilde K]` are the landmarks (index < n: a query).
    X_L : (..., l, d) ndarray
        The landmark points :math:`X_L = S^\top [\tilde Q; \tilde K]`.
    F : (..., n, l) ndarray
        :math:`\kappa(\tilde Q, X_L)`.
    M : (..., l, l) ndarray
        :math:`\kappa(X_L, X_L) + \gamma I`.
    W : (..., l, l) ndarray
        :math:`D_M^{-1/2} Z D_M^{-1/2}`, the pseudoinverse of M as used (iterative or exact Z).
    B : (..., l, m) ndarray
        :math:`\kappa(X_L, \tilde K)`.
    """

    landmarks: NDArray
    X_L: NDArray
    F: NDArray
    M: NDArray
    W: NDArray
    B: NDArray


def gaussian_kernel(x: ArrayLike, y: ArrayLike) -> NDArray:
    r"""The standard Gaussian kernel between the rows of x and y: :math:`\kappa(x, y) = \exp(-\|x - y\|^2/2)`.

    .. math::

        \kappa(x_i, y_j) = \exp\big(x_i^\top y_j - \tfrac12\|x_i\|^2 - \tfrac12\|y_j\|^2\big)

    Parameters
    ----------
    x : (..., a, d) array_like
    y : (..., b, d) array_like
        Leading dims broadcast.

    Returns
    -------
    K : (..., a, b) ndarray
        In (0, 1]; 1 where :math:`x_i = y_j`. NaN where a row holds NaN or Inf.

    Notes
    -----
    Computed by the expansion (one matmul), as the official ``kernel_RS_RBF``; an exponent that rounds
    above 0 is clipped to 0 (κ ≤ 1), and a NaN stays NaN.

    Examples
    --------
    >>> gaussian_kernel(np.array([[0.0, 0.0]]), np.array([[0.0, 0.0], [1.0, 1.0]]))
    array([[1.        , 0.36787944]])
    """
    x, y = as_float("x", x, min_ndim=2), as_float("y", y, min_ndim=2)
    if x.shape[-1] != y.shape[-1]:
        raise ValueError(f"x has d={x.shape[-1]} but y has d={y.shape[-1]} (x shape {x.shape}, y shape {y.shape})")
    broadcast_batch({"x": x.shape[:-2], "y": y.shape[:-2]})
    with np.errstate(invalid="ignore", over="ignore"):
        half_x = 0.5 * np.sum(x * x, axis=-1)[..., :, None]            # (..., a, 1)  ‖x‖²/2
        half_y = 0.5 * np.sum(y * y, axis=-1)[..., None, :]            # (..., 1, b)  ‖y‖²/2
        exponent = x @ np.swapaxes(y, -1, -2) - half_x - half_y        # (..., a, b)  −‖x − y‖²/2
        return np.exp(np.where(exponent > 0.0, 0.0, exponent))       # (..., a, b)  κ ≤ 1; NaN stays NaN


def kernelized_attention(q: ArrayLike, k: ArrayLike, v: ArrayLike, *, scale: float | None = None,
                         return_weights: bool = False) -> NDArray | tuple[NDArray, NDArray]:
    r"""Kernelized attention (Skyformer's Eq. 3), exactly: :math:`C V` with :math:`C = \kappa(Q/d^{1/4}, K/d^{1/4})`.

    .. math::

        C_{ij} = \exp\Big(-\frac{\|q_i - k_j\|^2}{2\sqrt d}\Big)
               = e^{-\|q_i\|^2/2\sqrt d}\; e^{q_i^\top k_j/\sqrt d}\; e^{-\|k_j\|^2/2\sqrt d}

    Parameters
    ----------
    q : (..., n, d) array_like
    k : (..., m, d) array_like
    v : (..., m, d_v) array_like
    scale : float, optional
        *s*, the multiplier of :math:`q^\top k` (default :math:`1/\sqrt d`): the kernel is applied to
        :math:`\operatorname{sign}(s)\sqrt{|s|}\,q` and :math:`\sqrt{|s|}\,k`.
    return_weights : bool, default False
        Also return C.

    Returns
    -------
    out : (..., n, d_v) ndarray
    weights : (..., n, m) ndarray
        Only if ``return_weights``. Entries in (0, 1]; rows do not sum to 1.

    Examples
    --------
    >>> q = k = np.zeros((3, 2))
    >>> v = np.ones((3, 1))
    >>> kernelized_attention(q, k, v, scale=1.0).ravel()        # κ = 1 everywhere: each row sums the values
    array([3., 3., 3.])
    """
    q, k, v, batch = checked_qkv(q, k, v)
    scale = default_scale(q.shape[-1]) if scale is None else check_scale(scale)
    return_weights = check_bool("return_weights", return_weights)
    n, m = q.shape[-2], k.shape[-2]
    check_fits("the kernel matrix C", (*batch, n, m))
    q_tilde, k_tilde = split_scale(q, k, scale)
    C = np.broadcast_to(gaussian_kernel(q_tilde, k_tilde), (*batch, n, m))   # (..., n, m)  κ(Q̃, K̃)
    with np.errstate(invalid="ignore", over="ignore"):
        out = np.broadcast_to(C @ v, (*batch, n, v.shape[-1])).copy()       # (..., n, d_v)  C V
    return (out, C.copy()) if return_weights else out


def draw_skyformer_landmarks(rng, n: int, m: int, num_landmarks: int, *, sampling: str = "paper",
                             shape: tuple[int, ...] = ()) -> NDArray:
    r"""Draw the landmarks: l indices into the n + m points :math:`[\tilde Q; \tilde K]`, uniformly, with replacement.

    .. math::

        \text{paper: } \ell_t \sim \mathcal U\{0, \dots, n + m - 1\}\ \text{i.i.d.};\qquad
        \text{official: } \ell_t \sim \mathcal U\{0, \dots, n - 1\}\ (t < \lfloor l/2 \rfloor),\
        \ell_t \sim n + \mathcal U\{0, \dots, m - 1\}\ (t \ge \lfloor l/2 \rfloor)

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw.
    n, m : int
        Numbers of queries and keys, each >= 1.
    num_landmarks : int
        *l* (*d* in the paper, ``nb_features`` in the official code), >= 1.
    sampling : {"paper", "official"}, default "paper"
        "paper": the uniform sub-sampling matrix of Definition 1 over all 2n (here n + m) points.
        "official": the official ``uniform_sketching``, which draws the first ⌊l/2⌋ landmarks among the
        queries and the others among the keys.
    shape : tuple of int, default ()
        Leading dimensions (one draw per batch element: the official code draws one per sequence, shared
        by its heads).

    Returns
    -------
    landmarks : (*shape, l) ndarray of int64
        Index t < n is query t, index n + t is key t.

    Notes
    -----
    The draw is ``rng.integers(0, n + m, size=(*shape, l))`` ("paper"), or
    ``rng.integers(0, n, size=(*shape, l // 2))`` then ``n + rng.integers(0, m, size=(*shape, l − l // 2))``
    concatenated ("official"), so that another implementation can reproduce it.

    Examples
    --------
    >>> draw_skyformer_landmarks(0, 4, 6, 5)
    array([8, 6, 5, 2, 3])
    >>> bool((draw_skyformer_landmarks(0, 4, 6, 8, sampling="official")[:4] < 4).all())
    True
    """
    rng = as_rng(rng)
    n, m = check_positive_int("n", n), check_positive_int("m", m)
    num_landmarks = check_positive_int("num_landmarks", num_landmarks)
    check_choice("sampling", sampling, SAMPLINGS)
    shape = tuple(check_non_negative_int("shape", s) for s in shape)
    if sampling == "paper":
        return rng.integers(0, n + m, size=(*shape, num_landmarks), dtype=np.int64)
    half = num_landmarks // 2
    return np.concatenate([rng.integers(0, n, size=(*shape, half), dtype=np.int64),
                           n + rng.integers(0, m, size=(*shape, num_landmarks - half), dtype=np.int64)], axis=-1)


def _check_landmarks(landmarks, n: int, m: int) -> NDArray:
    """The landmark indices as int64 (..., l), l >= 1, each in [0, n + m), or a TypeError/ValueError naming them."""
    landmarks = np.asarray(landmarks)
    if landmarks.dtype.kind not in "iu" or landmarks.ndim < 1:
        raise TypeError(f"landmarks must be an integer array of shape (..., l), got dtype {landmarks.dtype} with "
                        f"shape {landmarks.shape}")
    if landmarks.shape[-1] < 1:
        raise ValueError(f"landmarks must hold at least one index, got shape {landmarks.shape}")
    if landmarks.size and (landmarks.min() < 0 or landmarks.max() >= n + m):
        raise ValueError(f"landmarks index the n + m = {n + m} queries and keys (n={n}, m={m}): each must be in "
                         f"[0, {n + m}), got values in [{landmarks.min()}, {landmarks.max()}]")
    return landmarks.astype(np.int64)


def skyformer_factors(q: ArrayLike, k: ArrayLike, landmarks: ArrayLike, *, gamma: float = GAMMA,
                      pinv: str = "iterative", iterations: int = ITERATIONS, init: str = "paper",
                      scale: float | None = None) -> SkyformerFactors:
    r"""Every factor of Skyformer: the landmark points, κ(Q̃, X_L), M = κ(X_L, X_L) + γI, its pseudoinverse, κ(X_L, K̃).

    .. math::

        \tilde C = \kappa(\tilde Q, X_L)\; D_M^{-1/2} Z D_M^{-1/2}\; \kappa(X_L, \tilde K), \qquad
        Z \approx \big(D_M^{-1/2} M D_M^{-1/2}\big)^{+}, \quad D_M = \operatorname{diag}(M \mathbf 1)

    Parameters
    ----------
    q : (..., n, d) array_like
        Queries, n >= 1.
    k : (..., m, d) array_like
        Keys, m >= 1.
    landmarks : (..., l) array_like of int
        Indices into the n + m points :math:`[\tilde Q; \tilde K]` (:func:`draw_skyformer_landmarks`);
        leading dims broadcast with the batch.
    gamma : float, default 0.1
        γ >= 0, added to the diagonal of the landmarks' kernel matrix (the official ``1e-1``; the paper's
        "small constant γ > 0" of §4.4, which its Lemma 3 needs for the iteration to converge).
    pinv : {"iterative", "exact"}, default "iterative"
        Z by Nyströmformer's iteration (:func:`refattn.lowrank.iterative_pinv`, the paper's §4.4) or by
        ``scipy.linalg.pinv`` (:func:`refattn.lowrank.exact_pinv`).
    iterations : int, default 6
        Steps of the iteration (the official ``iterative_inv(STAS, 6)``).
    init : {"paper", "official"}, default "paper"
        The iteration's initial coefficient: per matrix (Nyströmformer's Lemma 1) or the official code's
        one maximum column sum over the whole batch (its ``init_option="original"``).
    scale : float, optional
        *s* (default :math:`1/\sqrt d`); see :func:`kernelized_attention`.

    Returns
    -------
    SkyformerFactors
        ``F @ W @ B`` is the effective (n × m) matrix :math:`\tilde C`.

    Notes
    -----
    :math:`D_M^{-1/2}` is the preconditioning of §4.4 (Lemma 3: the singular values of
    :math:`D_M^{-1/2} M D_M^{-1/2}` lie in (0, 1)). With the exact pseudoinverse it changes nothing when
    M is invertible (γ > 0), and with γ = 0 it leaves the Nyström approximation unchanged too:
    :math:`\bar C S (S^\top \bar C S)^+ S^\top \bar C` depends on S only through the span of
    :math:`\bar C^{1/2} S`, which a positive column scaling keeps.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k = rng.standard_normal((2, 5, 4))
    >>> f = skyformer_factors(q, k, [0, 3, 7, 9])
    >>> f.F.shape, f.W.shape, f.B.shape
    ((5, 4), (4, 4), (4, 5))
    """
    q, k = as_float("q", q, min_ndim=2), as_float("k", k, min_ndim=2)
    check_qkv(q, k, k)
    n, m = q.shape[-2], k.shape[-2]
    if n == 0 or m == 0:
        raise ValueError(f"skyformer_factors needs n >= 1 queries and m >= 1 keys, got q shape {q.shape}, "
                         f"k shape {k.shape}")
    landmarks = _check_landmarks(landmarks, n, m)
    gamma = check_scale(gamma, "gamma")
    if gamma < 0:
        raise ValueError(f"gamma must be >= 0 (it is added to the diagonal of a PSD matrix), got gamma={gamma}")
    check_choice("pinv", pinv, PINVS)
    check_choice("init", init, INITS)
    iterations = check_non_negative_int("iterations", iterations)
    scale = default_scale(q.shape[-1]) if scale is None else check_scale(scale)
    batch = broadcast_batch({"q": q.shape[:-2], "k": k.shape[:-2], "landmarks": landmarks.shape[:-1]})
    l = landmarks.shape[-1]
    check_fits("the factor κ(Q̃, X_L)", (*batch, n, l))
    check_fits("the factor κ(X_L, K̃)", (*batch, l, m))
    q_tilde, k_tilde = split_scale(q, k, scale)
    d = q.shape[-1]
    X = np.concatenate([np.broadcast_to(q_tilde, (*batch, n, d)), np.broadcast_to(k_tilde, (*batch, m, d))],
                       axis=-2)                                        # (..., n + m, d)  [Q̃; K̃]
    index = np.broadcast_to(landmarks, (*batch, l))[..., None]          # (..., l, 1)
    X_L = np.take_along_axis(X, index, axis=-2)                        # (..., l, d)  Sᵀ[Q̃; K̃]
    F = gaussian_kernel(q_tilde, X_L)                                  # (..., n, l)  κ(Q̃, X_L)
    B = gaussian_kernel(X_L, k_tilde)                                  # (..., l, m)  κ(X_L, K̃)
    M = gaussian_kernel(X_L, X_L) + gamma * np.eye(l)                  # (..., l, l)  SᵀC̄S + γI
    with np.errstate(invalid="ignore", divide="ignore"):
        d_inv_sqrt = 1.0 / np.sqrt(M.sum(axis=-1))                     # (..., l)     D_M^{−1/2}
        M_hat = d_inv_sqrt[..., :, None] * M * d_inv_sqrt[..., None, :]   # (..., l, l)  D_M^{−1/2} M D_M^{−1/2}
    Z = exact_pinv(M_hat) if pinv == "exact" else iterative_pinv(M_hat, iterations, init=init)
    with np.errstate(invalid="ignore"):
        W = d_inv_sqrt[..., :, None] * Z * d_inv_sqrt[..., None, :]    # (..., l, l)  D_M^{−1/2} Z D_M^{−1/2}
    return SkyformerFactors(np.broadcast_to(landmarks, (*batch, l)), X_L, F, M, W, B)


def skyformer_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    num_landmarks: int | None = None,
    landmarks: ArrayLike | None = None,
    rng=None,
    sampling: str = "paper",
    gamma: float = GAMMA,
    pinv: str = "iterative",
    iterations: int = ITERATIONS,
    init: str = "paper",
    scale: float | None = None,
    causal: bool = False,
    return_weights: bool = False,
) -> NDArray | tuple[NDArray, NDArray]:
    r"""Skyformer: kernelized attention κ(Q̃, K̃) V by Nyström over l landmarks sampled among the queries and keys.

    .. math::

        \mathrm{out} = \kappa(\tilde Q, X_L)\,\Big(D_M^{-1/2} Z D_M^{-1/2}\,\big(\kappa(X_L, \tilde K)\,V\big)\Big),
        \qquad \kappa(x, y) = e^{-\|x - y\|^2/2},\ \tilde Q = Q/d^{1/4},\ \tilde K = K/d^{1/4}

    with :math:`X_L` the l landmarks drawn among the rows of :math:`[\tilde Q; \tilde K]`, M, :math:`D_M`
    and Z as in :func:`skyformer_factors`.

    Parameters
    ----------
    q : (..., n, d) array_like
        Queries.
    k : (..., m, d) array_like
        Keys.
    v : (..., m, d_v) array_like
        Values.
    num_landmarks : int, optional
        *l*, drawn from ``rng`` (default 128, the official ``nb_features``). With ``landmarks`` given, it
        must match their count if passed.
    landmarks : (..., l) array_like of int, optional
        The landmarks, indices into the n + m points (:func:`draw_skyformer_landmarks`).
    rng : numpy.random.Generator or int, optional
        Draws the landmarks when ``landmarks`` is not given (and is not read when it is).
    sampling : {"paper", "official"}, default "paper"
        How ``rng`` draws them (:func:`draw_skyformer_landmarks`).
    gamma, pinv, iterations, init
        See :func:`skyformer_factors` (γ = 0.1, the iteration, 6 steps, per-matrix start).
    scale : float, optional
        *s* (default :math:`1/\sqrt d`); see :func:`kernelized_attention`.
    causal : bool, default False
        Must be False: Skyformer has no causal form (see Notes).
    return_weights : bool, default False
        Also return the effective matrix :math:`\tilde C`, with out = :math:`\tilde C` V exactly.

    Returns
    -------
    out : (..., n, d_v) ndarray
    weights : (..., n, m) ndarray
        Only if ``return_weights``. Its rows do not sum to 1 and may hold negative entries.

    Notes
    -----
    **Cost.** O((n + m)·l·d + l³ per iteration) time and O((n + m)·l + l²) memory.

    **Exact limit.** With ``landmarks = arange(n + m)`` (every point once), ``gamma=0`` and
    ``pinv="exact"``, :math:`\tilde C = (I, 0)\,\bar C \bar C^+ \bar C\,(0, I)^\top = C`: exact
    :func:`kernelized_attention`. Kernelized attention is not softmax attention (no row normaliser, and
    the factors :math:`e^{-\|q_i\|^2/2\sqrt d}`, :math:`e^{-\|k_j\|^2/2\sqrt d}` in place of the row sums),
    so no setting of Skyformer is.

    **Paper and code.**

    * *Scale.* The official code multiplies q and k by ``32 ** -0.25``, the LRA head width d = 32
      written as a constant; here :math:`d^{-1/4}` of the actual d (``scale=1/√d``).
    * *Landmarks.* The paper's Definition 1 draws the columns of S i.i.d. uniformly among all points
      (``sampling="paper"``); the official ``uniform_sketching`` draws half among the queries and half
      among the keys (``sampling="official"``), one draw per sequence shared by the heads. Its
      ``accumulation = 1`` and ``random_sign = 1`` make S a plain sub-sampling matrix; Definition 1's
      :math:`1/\sqrt d` entries cancel in :math:`\bar C S (S^\top \bar C S)^+ S^\top \bar C`.
    * *Regularisation and preconditioning* (§4.4, official ``STAS + 1e-1 * eye`` then
      ``D_STAS_inv = sqrt(1 / STAS.sum(-1))``): γ = 0.1, and :math:`D_M = \operatorname{diag}((M + \gamma
      I)\mathbf 1)`.
    * *Pseudoinverse.* The official ``iterative_inv(STAS, 6)`` with ``init_option="original"``, the
      coefficient shared by the whole batch (``init="official"``); the default here is Nyströmformer's
      per-matrix coefficient, the one its paper states.
    * *Padding.* The official code zeroes padded positions in q, k and v; padding is not part of the
      paper's equations, and this function takes no mask.

    **No causal form.** The landmarks come from every position and the pseudoinverse couples them, so
    every output row depends on later tokens; the paper's models are encoders (LRA), and
    ``causal=True`` is refused.

    **Non-finite input.** Every output row mixes every landmark, so a NaN or Inf in a landmark point
    reaches every row; one in another query reaches its own row, one in another key or value every row.

    References
    ----------
    .. [1] Y. Chen, Q. Zeng, H. Ji, Y. Yang, "Skyformer: Remodel Self-Attention with Gaussian Kernel and
       Nyström Method", NeurIPS 2021, arXiv:2111.00035v1, Eq. (3)–(6), Definition 1, §4.4, Lemma 3.
    .. [2] pkuzengqi/Skyformer, ``src/models/attention_skyformer.py`` (``Skyformer``, ``kernel_RS_RBF``,
       ``iterative_inv``), ``src/config.py`` (``nb_features = 128``).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 6, 4))
    >>> out, C = skyformer_attention(q, k, v, num_landmarks=5, rng=1, return_weights=True)
    >>> out.shape, bool(np.allclose(out, C @ v))
    ((6, 4), True)
    >>> every = skyformer_attention(q, k, v, landmarks=np.arange(12), gamma=0.0, pinv="exact")
    >>> bool(np.allclose(every, kernelized_attention(q, k, v)))
    True
    """
    no_causal_form(causal, "Skyformer", NO_CAUSAL_FORM)
    q, k, v, batch = checked_qkv(q, k, v)
    n, m, d_v = q.shape[-2], k.shape[-2], v.shape[-1]
    check_choice("sampling", sampling, SAMPLINGS)
    return_weights = check_bool("return_weights", return_weights)
    if scale is None:
        default_scale(q.shape[-1])                                     # d_k = 0: a ValueError naming d_k
    if num_landmarks is not None:
        num_landmarks = check_positive_int("num_landmarks", num_landmarks)
    if landmarks is not None:
        landmarks = _check_landmarks(landmarks, n, m)
        if num_landmarks is not None and num_landmarks != landmarks.shape[-1]:
            raise ValueError(f"num_landmarks={num_landmarks} but landmarks has {landmarks.shape[-1]} indices "
                             f"(shape {landmarks.shape})")
    landmarks = given_or_drawn(
        "skyformer", "landmarks", landmarks, optional_rng(rng), what="its landmarks",
        draw=lambda r: draw_skyformer_landmarks(r, n, m, num_landmarks or NUM_LANDMARKS, sampling=sampling)
        if n > 0 and m > 0 else np.zeros(0, dtype=np.int64))          # nothing to sample from: no landmark
    if return_weights:
        check_fits("the weights (return_weights=True)", (*batch, n, m))
    if n == 0 or m == 0:                                               # no query, or no key: zero rows
        out = np.zeros((*batch, n, d_v))
        return (out, np.zeros((*batch, n, m))) if return_weights else out
    f = skyformer_factors(q, k, landmarks, gamma=gamma, pinv=pinv, iterations=iterations, init=init, scale=scale)
    with np.errstate(invalid="ignore", over="ignore"):
        out = f.F @ (f.W @ (f.B @ v))                                  # (..., n, d_v)  κ(Q̃,X_L) (W (κ(X_L,K̃) V))
        weights = (f.F @ f.W) @ f.B if return_weights else None        # (..., n, m)    C̃
    out = np.broadcast_to(out, (*batch, n, d_v)).copy()
    if not return_weights:
        return out
    return out, np.broadcast_to(weights, (*batch, n, m)).copy()


RECORD = Mechanism.of(
    skyformer_attention,                                           # the official 128 is more than the short examples
    defaults={"num_landmarks": WhenDrawn("landmarks", 4)},
    id="skyformer", title="Skyformer (Gaussian kernel, Nyström on the PSD completion)", family="beyond",
    section="after the survey (Gaussian kernel and Nyström, cf. §4.4.2)", paper=SKYFORMER,
    equation=r"\tilde C = \kappa(\tilde Q, X_L)\,\big(\kappa(X_L, X_L) + \gamma I\big)^{+}\,\kappa(X_L, \tilde K),"
             r"\quad \kappa(x, y) = e^{-\|x - y\|^2/2},\ X_L \subset [\tilde Q; \tilde K]",
    time="O((n + m)·l·d + l³·iterations)", memory="O((n + m)·l + l²)", causal=False, cross=True,
    position_dependent=True, normalized=False, nonnegative=False,
    examples=({"pinv": "exact", "gamma": 0.0}, {"sampling": "official", "init": "official", "iterations": 3},
              {"num_landmarks": 9, "gamma": 1.0, "scale": 0.7}),
    figure="refattn.figures.skyformer:skyformer",
    exact_options=None,
    exact_limit="none: Gaussian-kernel attention has no row normaliser, so no setting is softmax attention; with "
                "every one of the n + m points as a landmark, γ = 0 and the exact pseudoinverse it is exact "
                "kernelized attention κ(Q/d^{1/4}, K/d^{1/4}) V",
    draws=("landmarks",),
)
