r"""CSALR: Nyström attention with (Ã + εI)⁻¹ (Chen et al., 2020, IJCAI; survey §4.4.2).

    Q̃ = AvgPool_s(Q),  K̃ = AvgPool_s(K)                 landmarks: windows of s tokens, stride s
    F̃ = softmax(Q K̃ᵀ/√d)      (n × l)
    Ã = softmax(Q̃ K̃ᵀ/√d)      (l × l)                   M in the survey
    B̃ = softmax(Q̃ Kᵀ/√d)      (l × m)
    Ŝ = F̃ (Ã + εI)⁻¹ B̃         (n × m)
    out = F̃ ((Ã + εI)⁻¹ (B̃ V))  a linear solve, never n × m

Compressed self-attention with low-rank approximation (CSALR) decomposes the attention map into
"a landmark attention map and a combination coefficient map with a small number of landmark
feature vectors sampled from the input feature map by average pooling" (the paper's abstract). The
survey (§4.4.2) sets it beside Nyströmformer: both approximate softmax(QKᵀ/√d) by
F̃ · (inverse of Ã) · B̃ with landmarks down-sampled from the input (strided average pooling), and
where the inverse of Ã may not exist, CSALR adds an identity matrix to it so that the inverse
always exists, while Nyströmformer takes the Moore–Penrose pseudoinverse
(:mod:`refattn.lowrank.nystromformer`).

:func:`average_pool` gives the landmarks and :func:`nystrom_csalr_attention` the attention; the
three factors are :func:`~refattn.lowrank.nystromformer.landmark_kernels`.
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.budget import check_fits
from ..common.checks import as_float, check_bool, check_scale, checked_qkv, default_scale
from ..common.ints import check_positive_int
from ..mechanism import Mechanism
from ..sparse.pattern import no_causal_form
from .nystromformer import landmark_kernels

__all__ = ["average_pool", "nystrom_csalr_attention"]

CSALR = ('Z. Chen, M. Gong, L. Ge, B. Du, 2020, "Compressed Self-Attention for Deep Metric Learning with Low-Rank '
         'Approximation", IJCAI 2020 (no arXiv version; as summarised in T. Lin et al., "A Survey of '
         'Transformers", arXiv:2106.04554, §4.4.2)')
EPS = 1.0
NO_CAUSAL_FORM = ("every landmark is the mean of a window of the sequence and (Ã + εI)⁻¹ couples all windows, so "
                  "each query's row mixes later keys and values; the paper's module, for image feature maps, "
                  "defines none")


def average_pool(x: ArrayLike, pool: int) -> NDArray:
    r"""Strided average pooling along the sequence: the mean of each window of s tokens, stride s.

    .. math::

        \tilde x_j = \frac1s \sum_{i = js}^{js + s - 1} x_i, \qquad j = 0 \dots \lfloor n/s \rfloor - 1

    Parameters
    ----------
    x : (..., n, d) array_like
        Queries or keys.
    pool : int
        *s*, the window (kernel) and the stride, ``1 <= s <= n``.

    Returns
    -------
    x_tilde : (..., ⌊n/s⌋, d) ndarray
        The last n mod s tokens, in no full window, are in no landmark (as PyTorch's ``avg_pool``
        with its default ``ceil_mode=False``).

    Examples
    --------
    >>> average_pool(np.arange(7.0)[:, None], 2).ravel()        # token 6 is in no window
    array([0.5, 2.5, 4.5])
    """
    x = as_float("x", x, min_ndim=2)
    s = check_positive_int("pool", pool)
    n = x.shape[-2]
    if s > n:
        raise ValueError(f"pool={s} is longer than the n={n} tokens (x shape {x.shape}): no window holds a landmark; "
                         f"pool <= {n}")
    num_landmarks = n // s
    windows = x[..., : num_landmarks * s, :].reshape(*x.shape[:-2], num_landmarks, s, x.shape[-1])
    with np.errstate(invalid="ignore", over="ignore"):
        return windows.mean(axis=-2)                               # (..., l, d)  x̃_j


def nystrom_csalr_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    pool: int = 2,
    eps: float = EPS,
    scale: float | None = None,
    causal: bool = False,
    return_weights: bool = False,
) -> NDArray | tuple[NDArray, NDArray]:
    r"""CSALR attention: softmax(QK̃ᵀ/√d) (softmax(Q̃K̃ᵀ/√d) + εI)⁻¹ softmax(Q̃Kᵀ/√d) V, landmarks pooled.

    .. math::

        \mathrm{out} = \operatorname{softmax}\Big(\frac{Q\tilde K^\top}{\sqrt d}\Big)\,
            \Big(\operatorname{softmax}\Big(\frac{\tilde Q\tilde K^\top}{\sqrt d}\Big)
            + \varepsilon I\Big)^{-1}\,
            \operatorname{softmax}\Big(\frac{\tilde Q K^\top}{\sqrt d}\Big) V

    with :math:`\tilde Q, \tilde K` the strided average pools of Q and K (:func:`average_pool`).

    Parameters
    ----------
    q : (..., n, d) array_like
        Queries.
    k : (..., m, d) array_like
        Keys.
    v : (..., m, d_v) array_like
        Values.
    pool : int, default 2
        *s*, the pooling window and stride: l = ⌊n/s⌋ landmark queries and ⌊m/s⌋ landmark keys,
        which must be equal (Ã is square).
    eps : float, default 1.0
        *ε* >= 0, added to the diagonal of Ã (see Notes); 0 is the plain inverse.
    scale : float, optional
        Multiplier of the dot products; default :math:`1/\sqrt{d}`.
    causal : bool, default False
        Must be False: CSALR has no causal form (a landmark mixes the positions of its window).
    return_weights : bool, default False
        Also return the effective matrix :math:`\hat S = \tilde F (\tilde A + \varepsilon I)^{-1}
        \tilde B`, with out = Ŝ V exactly.

    Returns
    -------
    out : (..., n, d_v) ndarray
    weights : (..., n, m) ndarray
        Only if ``return_weights``. Each row sums to exactly 1/(1 + ε) (Notes); entries may be
        negative.

    Notes
    -----
    **ε.** In the survey's account CSALR adds an identity matrix to Ã so that the inverse always
    exists: ε = 1, the default. It does exist: Ã is a softmax, with positive entries and
    rows summing to 1, so :math:`\tilde A + I` is strictly diagonally dominant
    (:math:`\tilde A_{jj} + 1 > 1 - \tilde A_{jj} = \sum_{i \ne j} \tilde A_{ji}`), which holds for
    every ε >= 1. A smaller ε approaches the Nyström form :math:`\tilde A^{-1}` but can meet a
    singular :math:`\tilde A + \varepsilon I` (where −ε is an eigenvalue of Ã, which a positive
    stochastic matrix may have in (−1, 0)); that, or a singular Ã at ε = 0, is a ValueError naming
    ``eps``.

    **Rows.** :math:`\tilde A \mathbf 1 = \mathbf 1` gives
    :math:`(\tilde A + \varepsilon I)^{-1} \mathbf 1 = \mathbf 1 / (1 + \varepsilon)` and so
    :math:`\hat S \mathbf 1 = \tilde F \mathbf 1 / (1 + \varepsilon) = \mathbf 1 / (1 + \varepsilon)`:
    with ε = 1 every output is half a weighted sum of the values (a scale that a learned output
    projection absorbs).

    **Exact limit.** With s = 1 and n = m every token is a landmark, Ã = S = softmax(QKᵀ/√d) and

    .. math::

        \hat S_\varepsilon = S (S + \varepsilon I)^{-1} S = S - \varepsilon\, S (S + \varepsilon I)^{-1}
        \;\xrightarrow{\;\varepsilon \to 0\;}\; S

    where S is invertible: the error is ε S(S + εI)⁻¹ = ε I + O(ε²), linear in ε, and ε = 0 is
    softmax attention to rounding.

    **Landmarks.** The paper pools the 2-D feature maps of a CNN; on a sequence the windows are
    1-D: s tokens each, stride s, the trailing n mod s tokens in no window (PyTorch's pooling
    default). When s divides n these are Nyströmformer's segment means with l = n/s, and with
    ε = 0 the two mechanisms agree wherever Ã is invertible (Ã⁺ = Ã⁻¹).

    **No causal form.** Every landmark mixes the positions of its window and the inverse couples
    all windows, so output *i* depends on later keys and values; ``causal=True`` is refused.

    Cost: O((n + m)·l·d + l³) time and O((n + m)·l + l²) memory, with l = ⌊n/s⌋.

    References
    ----------
    .. [1] Z. Chen, M. Gong, L. Ge, B. Du, "Compressed Self-Attention for Deep Metric Learning with
       Low-Rank Approximation", IJCAI 2020.
    .. [2] T. Lin et al., "A Survey of Transformers", arXiv:2106.04554, §4.4.2.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 8, 4))
    >>> out, W = nystrom_csalr_attention(q, k, v, pool=2, return_weights=True)
    >>> bool(np.allclose(W.sum(axis=-1), 0.5))              # 1/(1 + ε), ε = 1
    True
    >>> from refattn import scaled_dot_product_attention
    >>> exact = nystrom_csalr_attention(q, k, v, pool=1, eps=0.0)
    >>> bool(np.allclose(exact, scaled_dot_product_attention(q, k, v)))
    True
    """
    no_causal_form(causal, "CSALR", NO_CAUSAL_FORM)
    return_weights = check_bool("return_weights", return_weights)
    out, weights = _csalr(q, k, v, pool, eps, scale, return_weights)
    return (out, weights) if return_weights else out


def _check_eps(eps) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float, np.integer, np.floating)):
        raise TypeError(f"eps must be a real number, got {type(eps).__name__}")
    if not np.isfinite(eps) or eps < 0:
        raise ValueError(f"eps must be finite and >= 0, got {eps!r}")
    return float(eps)


def _csalr(q, k, v, pool, eps, scale, return_weights):
    """Check everything, pool the landmarks, solve: ``(out, weights or None)``."""
    q, k, v, batch = checked_qkv(q, k, v)
    n, m, d_v = q.shape[-2], k.shape[-2], v.shape[-1]
    s = check_positive_int("pool", pool)
    eps = _check_eps(eps)
    scale = default_scale(q.shape[-1]) if scale is None else check_scale(scale)
    if return_weights:
        check_fits("the weights (return_weights=True)", (*batch, n, m))
    if n == 0 or m == 0:                                           # no query, or no key to see: zero rows
        return np.zeros((*batch, n, d_v)), (np.zeros((*batch, n, m)) if return_weights else None)
    if n // s != m // s:
        raise ValueError(f"pool={s} makes {n // s} landmark queries from n={n} but {m // s} landmark keys from m={m}; "
                         "the landmark matrix must be square (pick a pool with n // pool == m // pool)")
    Q_tilde, K_tilde = average_pool(q, s), average_pool(k, s)      # (..., l, d)
    l = Q_tilde.shape[-2]
    check_fits("the factor softmax(QK̃ᵀ/√d)", (*batch, n, l))
    check_fits("the factor softmax(Q̃Kᵀ/√d)", (*batch, l, m))
    F_tilde, A_tilde, B_tilde = landmark_kernels(q, k, Q_tilde, K_tilde, scale=scale)
    A_eps = A_tilde + eps * np.eye(l)                              # (..., l, l)  Ã + εI
    with np.errstate(invalid="ignore", over="ignore"):
        BV = B_tilde @ v                                           # (..., l, d_v)  B̃ V
        rhs = np.concatenate([BV, np.broadcast_to(B_tilde, (*BV.shape[:-2], l, m))], axis=-1) if return_weights \
            else BV
        try:
            X = np.linalg.solve(np.broadcast_to(A_eps, (*rhs.shape[:-2], l, l)), rhs)   # (Ã + εI)⁻¹ [B̃V | B̃]
        except np.linalg.LinAlgError:
            raise ValueError(f"softmax(Q̃K̃ᵀ/√d) + eps·I is singular with eps={eps!r} (−eps is an eigenvalue of the "
                             "landmark matrix); eps >= 1 always gives an invertible matrix") from None
        out = F_tilde @ X[..., :d_v]                               # (..., n, d_v)  F̃ (Ã + εI)⁻¹ B̃ V
        weights = F_tilde @ X[..., d_v:] if return_weights else None   # (..., n, m)  Ŝ
    out = np.broadcast_to(out, (*batch, n, d_v)).copy()
    if return_weights:
        weights = np.broadcast_to(weights, (*batch, n, m)).copy()
    return out, weights


RECORD = Mechanism.of(
    nystrom_csalr_attention, allowed=None,
    id="nystrom_csalr", title="Nyström with (M + εI)⁻¹ (CSALR)", family="lowrank", section="4.4.2", paper=CSALR,
    equation=r"\hat S = \operatorname{softmax}\!\Big(\frac{Q\tilde K^\top}{\sqrt d}\Big)"
             r"\Big(\operatorname{softmax}\!\Big(\frac{\tilde Q\tilde K^\top}{\sqrt d}\Big) + \varepsilon I\Big)^{-1}"
             r"\operatorname{softmax}\!\Big(\frac{\tilde Q K^\top}{\sqrt d}\Big)",
    time="O((n + m)·l·d + l³), l = ⌊n/s⌋", memory="O((n + m)·l + l²)", kind="attention",
    causal=False, cross=False, position_dependent=True,
    normalized=False, nonnegative=False,
    examples=({"eps": 0.1}, {"pool": 3}),
    figure="refattn.figures.nystrom_csalr:nystrom_csalr",
    exact_options={"pool": 1, "eps": 0.0},
    exact_limit="s = 1 (every token a landmark) and ε = 0",
)
