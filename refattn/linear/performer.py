r"""Performer: FAVOR+ random features for softmax attention (Choromanski et al., arXiv:2009.14794v4).

    SM(x, y) = exp(xᵀy) = E_ω[φ(x)ᵀφ(y)],   ω ~ N(0, I_d)                      (Eq. 6–7)

    positive    φ(x) = exp(−‖x‖²/2)/√r     · [exp(ω₁ᵀx) … exp(ω_rᵀx)]               F = r   (Lemma 1)
    hyperbolic  φ(x) = exp(−‖x‖²/2)/√(2r)  · [exp(ωᵢᵀx) …, exp(−ωᵢᵀx) …]           F = 2r  (Lemma 1)
    trig        φ(x) = exp(+‖x‖²/2)/√r     · [sin(ωᵢᵀx) …, cos(ωᵢᵀx) …]            F = 2r  (§2.3)

    MSE of the r-projection estimate, i.i.d. ω  (Lemma 2, Eq. 8), z = x + y, Δ = x − y:
        trig        1/(2r) · exp(‖z‖²) · SM⁻² · (1 − exp(−‖Δ‖²))²
        positive    1/r    · exp(‖z‖²) · SM²  · (1 − exp(−‖z‖²))
        hyperbolic  ½ (1 − exp(−‖z‖²)) · MSE_positive

    Performer attention = linear attention with φ applied to q/d^{1/4} and k/d^{1/4}, so that
    φ(q̃)ᵀφ(k̃) estimates exp(qᵀk/√d), the unnormalised softmax score (Eq. 1, 4).

There are r = ``num_features`` random projections ω₁ … ω_r (the paper's m, a letter that here
always counts keys) and F = r or 2r features. ω is drawn by :func:`draw_omega` (i.i.d., or
orthogonal blocks: §2.4 and App. B.2), from an explicit ``rng`` or passed in as ``omega=`` so that
another implementation can be fed the same draw.
"""
from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.checks import as_float, as_rng, broadcast_batch, check_bool, check_choice, check_qkv
from ..common.ints import check_positive_int
from ..draws import given_or_drawn, optional_rng
from ..mechanism import Mechanism, WhenDrawn
from ..papers import PERFORMER
from .attention import KeyFeatures, attend, check_linear_options, check_method_alignment
from .chunk import check_chunk_size

__all__ = ["draw_omega", "favor_features", "favor_mse", "performer_attention"]

KINDS = ("positive", "hyperbolic", "trig")
NORMS = ("chi", "sqrt_d")


def draw_omega(
    rng: np.random.Generator | int,
    num_features: int,
    d: int,
    *,
    orthogonal: bool = True,
    norms: str = "chi",
) -> NDArray:
    r"""Draw the random projections :math:`\omega_1, \dots, \omega_r \in \mathbb{R}^d` of FAVOR+.

    .. math::

        \omega_i = \ell_i \, u_i, \qquad
        \ell_i = \begin{cases} \|g_i\|,\ g_i \sim \mathcal{N}(0, I_d) & \text{norms="chi"} \\
                               \sqrt{d} & \text{norms="sqrt_d"} \end{cases}

    where the directions :math:`u_i` are uniform on the unit sphere, either independent
    (``orthogonal=False``) or exactly orthogonal within each block of *d* consecutive rows
    (``orthogonal=True``; the last block is truncated when *d* does not divide *r*).

    Parameters
    ----------
    rng : numpy.random.Generator or int
        The source of every draw (an int is a seed).
    num_features : int
        *r*, the number of random projections (rows); *m* in the paper.
    d : int
        Dimension of queries and keys.
    orthogonal : bool, default True
        Orthogonal random features (ORFs, the paper's and the official default) or i.i.d. rows.
    norms : {"chi", "sqrt_d"}, default "chi"
        Row lengths. "chi": independent :math:`\chi(d)` lengths, so that every row is marginally
        :math:`\mathcal{N}(0, I_d)` and :math:`\phi(x)^\top\phi(y)` is unbiased for
        :math:`\exp(x^\top y)` (official ``scaling=0``). "sqrt_d": every row has length
        :math:`\sqrt{d}` (official ``scaling=1``), the estimator of the *regularised* softmax
        kernel SMREG of §2.3, a biased estimate of SM (SMREG ≤ SM, Theorem 1).

    Returns
    -------
    omega : (num_features, d) ndarray

    Notes
    -----
    The draw order is part of the contract, so that another implementation can reproduce it with
    the same ``numpy.random.Generator``:

    * ``orthogonal=True``: for each of the :math:`\lceil r/d \rceil` blocks, ``G =
      rng.standard_normal((d, d))``, ``Q, R = numpy.linalg.qr(G)``, ``Q *= sign(diag(R))`` and the
      block's directions are the rows of ``Q.T`` (the columns of *Q*); then, for ``norms="chi"``,
      the lengths are the row norms of ``rng.standard_normal((r, d))``. This is the official
      ``gaussian_orthogonal_random_matrix`` / ``create_projection_matrix`` construction.
    * ``orthogonal=False``: ``G = rng.standard_normal((r, d))``; "chi" returns *G* itself,
      "sqrt_d" returns its rows rescaled to length :math:`\sqrt{d}`.

    The sign fix makes *Q* the Gram–Schmidt factor of *G* that the paper names (the QR
    factorisation with a positive diagonal in *R* is unique), so the draw does not depend on the
    sign convention of the LAPACK build, and *Q* is Haar-distributed (Mezzadri, 2007, §5). It
    matters: the official code takes *Q* from ``jnp.linalg.qr`` / ``tf.linalg.qr`` without it, and
    with the Householder convention of LAPACK (:math:`R_{11}` of the sign opposite to
    :math:`G_{11}`; checked with NumPy's LAPACK) the first direction of every block has a negative
    first coordinate. Its rows are then not marginally isotropic and the estimate is biased: for
    d = r = 4 and :math:`x = y = 0.4\,e_1`, a 20000-draw mean of :math:`\phi(x)^\top\phi(y)` is
    1.010 against :math:`\exp(x^\top y) = 1.174` (about 40 standard errors). Across machines the
    result here is identical up to the rounding of the QR.

    References
    ----------
    .. [1] K. Choromanski et al., "Rethinking Attention with Performers", ICLR 2021,
       arXiv:2009.14794v4, §2.3 (SMREG), §2.4 and App. B.2 (ORFs in d × d blocks).
    .. [2] google-research/google-research, ``performer/fast_attention/jax/fast_attention.py``,
       ``GaussianOrthogonalRandomMatrix``; ``performer/fast_attention/tensorflow/fast_attention.py``,
       ``create_projection_matrix``.
    .. [3] F. Mezzadri, "How to generate random matrices from the classical compact groups",
       Notices of the AMS 54 (2007), arXiv:math-ph/0609050v2.

    Examples
    --------
    >>> omega = draw_omega(0, 6, 4)
    >>> omega.shape
    (6, 4)
    >>> u = omega[:4] / np.linalg.norm(omega[:4], axis=1, keepdims=True)
    >>> bool(np.allclose(u @ u.T, np.eye(4)))          # one full block: orthonormal directions
    True
    >>> bool(np.allclose(np.linalg.norm(draw_omega(0, 6, 4, norms="sqrt_d"), axis=1), 2.0))
    True
    """
    rng = as_rng(rng)
    num_features = check_positive_int("num_features", num_features)
    d = check_positive_int("d", d)
    check_bool("orthogonal", orthogonal)
    check_choice("norms", norms, NORMS)
    if not orthogonal:
        G = rng.standard_normal((num_features, d))                 # (r, d)  rows ~ N(0, I_d)
        if norms == "chi":
            return G
        return G * (np.sqrt(d) / np.linalg.norm(G, axis=1, keepdims=True))
    blocks = []
    for _ in range(-(-num_features // d)):                         # ⌈r/d⌉ blocks
        G = rng.standard_normal((d, d))
        Q, R = np.linalg.qr(G)
        Q = Q * np.sign(np.diag(R))                                # unique QR: diag(R) > 0
        blocks.append(Q.T)                                         # rows: orthonormal directions
    U = np.concatenate(blocks, axis=0)[:num_features]              # (r, d)  ‖u_i‖ = 1
    if norms == "chi":
        lengths = np.linalg.norm(rng.standard_normal((num_features, d)), axis=1)   # (r,)  ℓ_i ~ χ(d)
    else:
        lengths = np.full(num_features, np.sqrt(d))
    return U * lengths[:, None]


def favor_features(
    x: ArrayLike,
    omega: ArrayLike,
    *,
    kind: str = "positive",
    stabilize: bool = False,
    eps: float = 0.0,
    is_query: bool | None = None,
) -> NDArray:
    r"""The FAVOR feature map :math:`\phi`, with :math:`\mathrm{E}_\omega[\phi(x)^\top\phi(y)] = \exp(x^\top y)`.

    .. math::

        \phi^{+}(x) &= \tfrac{1}{\sqrt{r}} e^{-\|x\|^2/2}
            \big(e^{\omega_1^\top x}, \dots, e^{\omega_r^\top x}\big) \\
        \phi^{\mathrm{hyp+}}(x) &= \tfrac{1}{\sqrt{2r}} e^{-\|x\|^2/2}
            \big(e^{\omega_1^\top x}, \dots, e^{\omega_r^\top x},
                 e^{-\omega_1^\top x}, \dots, e^{-\omega_r^\top x}\big) \\
        \phi^{\mathrm{trig}}(x) &= \tfrac{1}{\sqrt{r}} e^{+\|x\|^2/2}
            \big(\sin \omega_1^\top x, \dots, \sin \omega_r^\top x,
                 \cos \omega_1^\top x, \dots, \cos \omega_r^\top x\big)

    applied to *x* as given: Performer attention applies it to :math:`q/d^{1/4}` and
    :math:`k/d^{1/4}` (see :func:`performer_attention`).

    Parameters
    ----------
    x : (..., T, d) array_like
        Rows to map (queries or keys).
    omega : (r, d) or (..., r, d) array_like
        The *r* projections from :func:`draw_omega`; leading dims broadcast against those of *x* (for
        instance one draw per head, or many independent draws in a Monte-Carlo study).
    kind : {"positive", "hyperbolic", "trig"}, default "positive"
        :math:`\widehat{\mathrm{SM}}^{+}_r` (F = r), :math:`\widehat{\mathrm{SM}}^{\mathrm{hyp+}}_r`
        (F = 2r) or :math:`\widehat{\mathrm{SM}}^{\mathrm{trig}}_r` (F = 2r).
    stabilize : bool, default False
        Subtract the official code's maximum inside the exponential (see Notes). Off in the paper.
    eps : float, default 0.0
        The official ``numerical_stabilizer``: added to every exponential before the
        :math:`1/\sqrt{r}` factor, :math:`\phi_i = (e^{\dots} + \epsilon)/\sqrt{r}`. Positive and
        hyperbolic kinds only. Not in the paper: it biases the estimate (see Notes).
    is_query : bool, optional
        Whether *x* holds queries (the maximum of each row's own terms) or keys (the maximum over
        the whole sequence). Required when ``stabilize`` is on for the positive and hyperbolic
        kinds; for trig, ``None`` and ``False`` take the official maximum over the sequence.

    Returns
    -------
    phi : (..., T, F) ndarray

    Notes
    -----
    **Paper versus official code.** The official ``softmax_kernel_transformation`` (TensorFlow)
    and ``nonnegative_softmax_kernel_feature_creator`` (JAX) compute, for data already scaled by
    :math:`d^{-1/4}`,

    .. math::

        \phi_i(x) = \tfrac{1}{\sqrt{r}}\big(\exp(\omega_i^\top x - \|x\|^2/2 - c) + \epsilon\big),

    with :math:`c = \max_i \omega_i^\top x` over the features of each query row
    (``is_query=True``), and :math:`c = \max_{j, i} \omega_i^\top k_j` over all features *and all
    positions* of the key tensor (per batch and head; ``is_query=False``), and
    :math:`\epsilon = 10^{-6}` by default. ``stabilize=True`` reproduces *c*; ``eps`` reproduces
    :math:`\epsilon`.

    * *c* multiplies every feature of a query row by :math:`e^{-c_i}` and every key feature by the
      same :math:`e^{-c}`, so the estimated score :math:`\phi(q_i)^\top\phi(k_j)` is multiplied by
      :math:`e^{-c_i - c}`, constant along each row of the attention matrix: it cancels exactly in
      the row normalisation :math:`\widehat{D}^{-1}` (Eq. 4), and the attention output changes only
      by rounding. The kernel estimate itself is no longer :math:`\exp(x^\top y)`: it is scaled by
      a data-dependent factor. The official key maximum runs over *all* positions, future ones
      included: in causal attention a NaN or a huge future key would reach every earlier row.
      :func:`performer_attention` therefore takes it, causally, over the keys each row sees (a
      running maximum; see there).
    * :math:`\epsilon` adds :math:`\epsilon (a_i + b_i) + \epsilon^2` to each term
      :math:`a_i b_i` of :math:`\phi(x)^\top\phi(y) = \tfrac{1}{r}\sum_i (a_i + \epsilon)(b_i + \epsilon)`;
      without the stabiliser :math:`\mathrm{E}[a_i] = \mathrm{E}[b_i] = 1`, so
      :math:`\mathrm{E}[\phi(x)^\top\phi(y)] = \exp(x^\top y) + 2\epsilon + \epsilon^2`: biased, and the
      bias does not cancel in the normalisation (it pulls attention rows towards uniform). With the
      stabiliser its relative size grows by :math:`e^{c}`.
    * hyperbolic: the official code has no hyperbolic map; ``stabilize=True`` uses the same rule
      with :math:`c` the maximum of :math:`|\omega_i^\top x|` (both halves), which cancels alike.
    * trig: the official ``sincos_softmax_kernel_feature_creator`` (JAX) multiplies by
      :math:`\exp(\|x\|^2/2 - \max_j \|x_j\|^2/2)`, the maximum over the sequence (per batch and
      head), for queries and keys alike; ``stabilize=True`` reproduces it (``is_query`` None or
      False). With ``is_query=True`` the shift is each row's own :math:`\|x\|^2/2` (the factor
      becomes 1), which cancels alike and keeps one query's NaN out of the other rows. It has no
      :math:`\epsilon`. It orders the features [cos, sin]; the paper's Eq. (5) and this function
      use [sin, cos] (the dot product is the same).

    Trigonometric features take both signs: attention rows built from them sum to 1 but may be
    negative, and a denominator may be near 0 (the paper's §2.3 argument for positive features).

    References
    ----------
    .. [1] K. Choromanski et al., "Rethinking Attention with Performers", ICLR 2021,
       arXiv:2009.14794v4, Eq. (5)–(7), Lemma 1, §2.3.
    .. [2] google-research/google-research, ``performer/fast_attention/tensorflow/fast_attention.py``
       (``softmax_kernel_transformation``) and ``performer/fast_attention/jax/fast_attention.py``
       (``nonnegative_softmax_kernel_feature_creator``, ``sincos_softmax_kernel_feature_creator``).

    Examples
    --------
    Unbiased: with many projections (a mean of many independent single-feature estimates)
    :math:`\phi(x)^\top\phi(y)` approaches :math:`\exp(x^\top y)` (sd ≈ 0.001 here).

    >>> x, y = np.array([[0.3, -0.2]]), np.array([[0.1, 0.4]])
    >>> omega = draw_omega(0, 200_000, 2, orthogonal=False)
    >>> est = (favor_features(x, omega) @ favor_features(y, omega).T).item()
    >>> bool(abs(est - np.exp(x @ y.T).item()) < 0.01)
    True
    """
    check_choice("kind", kind, KINDS)
    check_bool("stabilize", stabilize)
    x = as_float("x", x, min_ndim=2)
    omega = check_omega(omega, x.shape[-1])
    broadcast_batch({"x": x.shape[:-2], "omega": omega.shape[:-2]})
    eps = _check_eps(eps)
    if eps != 0.0 and kind == "trig":
        raise ValueError("eps is the official positive-feature stabiliser; kind='trig' takes none (eps=0.0)")
    if stabilize and is_query is None and kind != "trig":
        raise ValueError("stabilize=True needs is_query=True (max per row) or False (max over the sequence)")
    if stabilize and is_query is not None:
        check_bool("is_query", is_query)
    exponent, candidate, trig = favor_terms(x, omega, kind)
    c = 0.0
    if stabilize:                                                  # each row's own, or over the sequence
        c = candidate if is_query else candidate.max(axis=-2, keepdims=True, initial=-np.inf)   # T = 0: no row
    return favor_from_terms(exponent - c, trig, eps)


def favor_terms(x: NDArray, omega: NDArray, kind: str) -> tuple[NDArray, NDArray, NDArray | None]:
    """FAVOR's φ(x) in parts: φ = (e^{a − c} ⊙ b + ε)/√F for a stabiliser c.

    Returns the exponents ``a`` (..., T, F) (or (..., T, 1) for trig), each row's stabiliser
    candidate (..., T, 1) (max_i ωᵢᵀx, max_i |ωᵢᵀx| for hyperbolic, ‖x‖²/2 for trig) and ``b``, the
    trig factors [sin, cos] (..., T, 2r), or None (b = 1).
    """
    u = x @ np.swapaxes(omega, -1, -2)                             # (..., T, r)  ωᵢᵀx
    half_sq = 0.5 * np.sum(x * x, axis=-1, keepdims=True)          # (..., T, 1)  ‖x‖²/2
    if kind == "trig":                                             # h(x) = e^{‖x‖²/2}
        return half_sq, half_sq, np.concatenate([np.sin(u), np.cos(u)], axis=-1)   # [sin ωᵢᵀx, cos ωᵢᵀx]
    if kind == "hyperbolic":
        u = np.concatenate([u, -u], axis=-1)                       # (..., T, 2r)  [ωᵢᵀx, −ωᵢᵀx]
    return u - half_sq, u.max(axis=-1, keepdims=True), None        # ωᵀx − ‖x‖²/2


def favor_from_terms(exponent: NDArray, trig: NDArray | None, eps: float) -> NDArray:
    """(e^{exponent} ⊙ b + ε)/√F: F = r (positive) or 2r (hyperbolic, trig)."""
    if trig is not None:
        return np.exp(exponent) * trig / np.sqrt(trig.shape[-1] // 2)   # (..., T, 2r)  h(x)[sin, cos]/√r
    return (np.exp(exponent) + eps) / np.sqrt(exponent.shape[-1])   # e^{ωᵀx − ‖x‖²/2}/√r (or /√(2r))


def favor_mse(x: ArrayLike, y: ArrayLike, num_features: int, *, kind: str = "positive") -> NDArray:
    r"""Closed-form mean squared error of the FAVOR estimate of :math:`\mathrm{SM}(x, y) = \exp(x^\top y)`.

    .. math::

        \mathrm{MSE}(\widehat{\mathrm{SM}}^{\mathrm{trig}}_r) &= \tfrac{1}{2r}\, e^{\|x+y\|^2}\,
            \mathrm{SM}^{-2}(x, y)\, \big(1 - e^{-\|x-y\|^2}\big)^2 \\
        \mathrm{MSE}(\widehat{\mathrm{SM}}^{+}_r) &= \tfrac{1}{r}\, e^{\|x+y\|^2}\,
            \mathrm{SM}^{2}(x, y)\, \big(1 - e^{-\|x+y\|^2}\big) \\
        \mathrm{MSE}(\widehat{\mathrm{SM}}^{\mathrm{hyp+}}_r) &= \tfrac{1}{2}\big(1 - e^{-\|x+y\|^2}\big)\,
            \mathrm{MSE}(\widehat{\mathrm{SM}}^{+}_r)

    for *r* independent :math:`\omega_i \sim \mathcal{N}(0, I_d)` (the hyperbolic and trig maps
    have F = 2r features from these *r* projections).

    Parameters
    ----------
    x, y : (..., d) array_like
        The two arguments (broadcast together).
    num_features : int
        *r*, the number of projections (*m* in the paper).
    kind : {"positive", "hyperbolic", "trig"}, default "positive"

    Returns
    -------
    mse : (...) ndarray

    Notes
    -----
    Orthogonal projections lower the positive MSE further (Theorem 2, Eq. 10, for r ≤ d).

    References
    ----------
    .. [1] K. Choromanski et al., "Rethinking Attention with Performers", ICLR 2021,
       arXiv:2009.14794v4, Lemma 2, Eq. (8).

    Examples
    --------
    Near :math:`x = -y` (a small kernel value) trig features are far worse than positive ones:

    >>> x, y = np.array([1.0, 0.0]), np.array([-1.0, 0.1])
    >>> bool(favor_mse(x, y, 16, kind="trig") > 100 * favor_mse(x, y, 16, kind="positive"))
    True
    """
    check_choice("kind", kind, KINDS)
    num_features = check_positive_int("num_features", num_features)
    x, y = as_float("x", x, min_ndim=1), as_float("y", y, min_ndim=1)
    if x.shape[-1] != y.shape[-1]:
        raise ValueError(f"x has d={x.shape[-1]} but y has d={y.shape[-1]} (x shape {x.shape}, y shape {y.shape})")
    sm = np.exp(np.sum(x * y, axis=-1))                            # SM(x, y) = exp(xᵀy)
    zz = np.sum((x + y) ** 2, axis=-1)                             # ‖x + y‖²
    if kind == "trig":
        dd = np.sum((x - y) ** 2, axis=-1)                         # ‖x − y‖²
        return np.exp(zz) / sm**2 * (-np.expm1(-dd)) ** 2 / (2 * num_features)
    positive = np.exp(zz) * sm**2 * -np.expm1(-zz) / num_features
    return positive if kind == "positive" else 0.5 * -np.expm1(-zz) * positive


def performer_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    num_features: int | None = None,
    rng: np.random.Generator | int | None = None,
    omega: ArrayLike | None = None,
    kind: str = "positive",
    orthogonal: bool = True,
    norms: str = "chi",
    causal: bool | str = False,
    method: str = "auto",
    stabilize: bool = False,
    eps: float = 0.0,
    denominator_eps: float = 0.0,
    fully_masked: str = "zero",
    return_weights: bool = False,
    chunk_size: int | None = None,
) -> NDArray | tuple[NDArray, NDArray]:
    r"""Performer (FAVOR+) attention: softmax attention estimated with random features.

    .. math::

        \widehat{\mathrm{Att}}(Q, K, V) = \widehat{D}^{-1}\big(Q'((K')^\top V)\big), \quad
        \widehat{D} = \operatorname{diag}\big(Q'((K')^\top \mathbf{1})\big), \quad
        Q' = \phi(Q / d^{1/4}), \; K' = \phi(K / d^{1/4})

    so that :math:`\phi(q_i/d^{1/4})^\top \phi(k_j/d^{1/4})` estimates
    :math:`\exp(q_i^\top k_j / \sqrt{d})`, the unnormalised weight of
    :func:`~refattn.scaled_dot_product_attention` (causal: the lower triangle, Eq. 2 and App. B.1).

    Parameters
    ----------
    q : (..., n, d) array_like
        Queries.
    k : (..., m, d) array_like
        Keys.
    v : (..., m, d_v) array_like
        Values.
    num_features : int, optional
        *r*, the number of random projections (*m* in the paper; the map has r or 2r features).
        Default :math:`\max(1, \operatorname{round}(d \ln d))`, the paper's :math:`\Theta(d \log d)`
        (§3, before Theorem 4; App. B.3) with constant 1; d = 64 gives 266, close to the official
        default of 256 (App. A.3). Must equal ``omega.shape[-2]`` if both are given.
    rng : numpy.random.Generator or int, optional
        Source of the draw of ω (:func:`draw_omega`), unused when ``omega`` is given.
    omega : (r, d) or (..., r, d) array_like, optional
        An explicit draw (e.g. to feed the same ω to another implementation).
    kind : {"positive", "hyperbolic", "trig"}, default "positive"
        The feature map (:func:`favor_features`).
    orthogonal : bool, default True
        Orthogonal blocks (FAVOR+) or i.i.d. projections; ignored when ``omega`` is given.
    norms : {"chi", "sqrt_d"}, default "chi"
        Row lengths of ω (:func:`draw_omega`); ignored when ``omega`` is given.
    causal : {False, True, "top-left", "bottom-right"}, default False
        As in :func:`~refattn.scaled_dot_product_attention`.
    method : {"auto", "equation", "right", "scan", "chunk"}, default "auto"
        Multiplication order (:func:`~refattn.linear.linear_attention`): the masked
        :math:`(Q'K'^\top)V`, the non-causal :math:`Q'(K'^\top V)` of Eq. (4), or the causal
        prefix-sum recurrence of App. B.1, by steps ("scan") or by chunks ("chunk", with
        ``chunk_size``); "auto" is "equation" while the n × m matrix fits the
        memory budget, then "right" (non-causal) or "chunk" (causal).
    stabilize : bool, default False
        The official max-subtraction (:func:`favor_features`): queries per row, keys over the
        keys each row sees (all of them non-causally, as the official code; see Notes). Changes
        the output only by rounding when ``eps=0``.
    eps : float, default 0.0
        The official additive ``numerical_stabilizer`` inside the features (official default
        1e-6); biased (:func:`favor_features`).
    denominator_eps : float, default 0.0
        The official guard on each row's denominator :math:`R_i = \phi(q_i)^\top \sum_j \phi(k_j)`
        (the causal prefix sum, or the sum over all keys): :math:`R_i + 2\epsilon_R` wherever
        :math:`|R_i| \le \epsilon_R`, as ``FastAttentionviaLowRankDecomposition.dot_product_attention``
        applies its ``numerical_stabilizer`` (1e-6, the same constant as ``eps``). It matters in
        causal attention, whose first rows sum few keys. Positive and hyperbolic features only.
    fully_masked : {"zero", "nan", "uniform"}, default "zero"
        Output of a query that sees no key (bottom-right alignment with n > m).
    return_weights : bool, default False
        Also return the effective attention matrix :math:`\widehat{D}^{-1} Q'K'^\top` (masked).
    chunk_size : int, optional
        Positions per chunk of ``method="chunk"`` (default :data:`~refattn.linear.chunk.DEFAULT_CHUNK_SIZE`).

    Returns
    -------
    out : (..., n, d_v) ndarray
    weights : (..., n, m) ndarray
        Only if ``return_weights``. Rows sum to 1; non-negative for the positive and hyperbolic
        kinds.

    Raises
    ------
    ValueError
        If neither or both of ``rng`` and ``omega`` are given, ``omega`` does not have *d*
        columns, ``num_features`` < 1 or disagrees with ``omega``, d = 0 (the scale
        :math:`d^{-1/4}`), or an option is unknown.
    ZeroDivisionError
        If a trig denominator is exactly 0 (from :func:`~refattn.linear.linear_attention`).

    Notes
    -----
    Time :math:`O((n + m) F d)` for "right"/"scan" (F features, *m* keys), memory
    :math:`O(F d_v)` beyond inputs; "equation" materialises the :math:`n \times m` matrix.

    **The causal stabiliser.** The official key shift :math:`c = \max_{j,i} \omega_i^\top k_j`
    runs over every position, so in causal attention a NaN in a future key, or a future key large
    enough to underflow the others' features, would reach every earlier row. Here row *i* uses
    :math:`C_{l(i)} = \max_{j \le l(i)} \max_i \omega_i^\top k_j`, the maximum over the keys it
    sees (*l(i)*: its last visible key, in either alignment): the keys' features are stored
    relative to the running maximum :math:`C_j`, and row *i* rescales them by
    :math:`e^{C_j - C_{l(i)}} \le 1` (the scan whenever the running maximum grows, the equation
    path pair by pair). With ``eps=0`` every row's features are scaled by one factor
    :math:`e^{-C_{l(i)}}`, which cancels in its normalisation: the output equals the unstabilised
    one up to rounding. With ``eps > 0`` the features are the official
    :math:`(e^{\omega^\top k - \|k\|^2/2 - C_{l(i)}} + \epsilon)/\sqrt{r}`, with the official *c*
    replaced by each row's own maximum (identical non-causally). Trig queries are shifted by their
    own :math:`\|q\|^2/2` (``is_query=True`` in :func:`favor_features`), the keys as above.

    **Paper versus official code.** The paper's FAVOR+ (the default here) is positive features,
    orthogonal ω with :math:`\chi(d)` lengths, no stabiliser, no :math:`\epsilon`. The official
    ``make_fast_softmax_attention`` defaults are 256 features, orthogonal, ``ortho_scaling=0``
    (= ``norms="chi"``), the max-subtraction (``stabilize=True``) and ``numerical_stabilizer=1e-6``
    (``eps=1e-6``); it also replaces a denominator :math:`R` with :math:`|R| \le 10^{-6}` by
    :math:`R + 2 \cdot 10^{-6}` (``denominator_eps=1e-6``; off by default, as the paper has no
    such guard), and it redraws ω from a seed derived from the queries on every call
    (``redraw_features=True``), whereas here the draw is always explicit.

    References
    ----------
    .. [1] K. Choromanski et al., "Rethinking Attention with Performers", ICLR 2021,
       arXiv:2009.14794v4, Eq. (1), (2), (4), Lemma 1, App. A.3, B.1, B.3.
    .. [2] google-research/google-research, ``performer/fast_attention/jax/fast_attention.py``
       (``make_fast_softmax_attention``, ``FastAttentionviaLowRankDecomposition``).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = 0.5 * rng.standard_normal((3, 6, 8))
    >>> out, A = performer_attention(q, k, v, num_features=64, rng=1, return_weights=True)
    >>> bool(np.allclose(A.sum(axis=-1), 1.0) and (A >= 0).all())
    True
    >>> right = performer_attention(q, k, v, num_features=64, rng=1, method="right")
    >>> bool(np.allclose(out, right))
    True
    """
    check_choice("kind", kind, KINDS)
    check_choice("norms", norms, NORMS)
    check_linear_options(method, fully_masked, return_weights)
    chunk_size = check_chunk_size(chunk_size)
    check_bool("orthogonal", orthogonal)
    check_bool("stabilize", stabilize)
    q, k, v = (as_float(name, a) for name, a in (("q", q), ("k", k), ("v", v)))
    check_qkv(q, k, v)
    alignment = check_method_alignment(method, causal)
    d = q.shape[-1]
    if d < 1:
        raise ValueError(f"performer_attention scales q and k by d_k^(-1/4): needs d_k >= 1, got q shape {q.shape}, "
                         f"k shape {k.shape}")
    eps = _check_eps(eps)
    if eps != 0.0 and kind == "trig":
        raise ValueError("eps is the official positive-feature stabiliser; kind='trig' takes none (eps=0.0)")
    denominator_eps = _check_eps(denominator_eps, "denominator_eps")
    if denominator_eps != 0.0 and kind == "trig":
        raise ValueError("denominator_eps guards the positive features' denominators; kind='trig' takes none "
                         "(denominator_eps=0.0)")
    given = omega is not None
    r = _default_num_features(d) if num_features is None else num_features
    omega = given_or_drawn(f"performer_{kind}", "omega", omega, optional_rng(rng), what="ω",
                           draw=lambda g: draw_omega(g, r, d, orthogonal=orthogonal, norms=norms))
    if given:
        omega = check_omega(omega, d)
        if num_features is not None and check_positive_int("num_features", num_features) != omega.shape[-2]:
            raise ValueError(f"num_features={num_features} but omega has {omega.shape[-2]} rows (shape {omega.shape})")
    batch = broadcast_batch({"q": q.shape[:-2], "k": k.shape[:-2], "v": v.shape[:-2], "omega": omega.shape[:-2]})

    scale = d ** -0.25                                              # exp(qᵀk/√d) = exp((q/d^{1/4})ᵀ(k/d^{1/4}))
    q_tilde, k_tilde = q * scale, k * scale                        # (..., n, d), (..., m, d)
    phi_q = favor_features(q_tilde, omega, kind=kind, stabilize=stabilize, eps=eps, is_query=True)   # (..., n, F)
    if stabilize and alignment is not None:
        keys = _running_key_features(k_tilde, omega, kind, eps)
    else:
        keys = KeyFeatures(favor_features(k_tilde, omega, kind=kind, stabilize=stabilize, eps=eps, is_query=False))
    return attend(phi_q, keys, v, batch, alignment, method, 0.0, fully_masked, return_weights, guard=denominator_eps,
                  chunk_size=chunk_size)


def _running_key_features(k_tilde: NDArray, omega: NDArray, kind: str, eps: float) -> KeyFeatures:
    """Causal stabilised key features: ψ_j = φ(k_j) e^{−C_j} with C_j the running maximum over keys 0 … j.

    C_j never decreases, and a NaN stays in it from its key on (``np.maximum`` propagates NaN), so
    only the rows that see that key are affected. ε is kept apart, as the offset added after each
    row's rescaling.
    """
    exponent, candidate, trig = favor_terms(k_tilde, omega, kind)
    C = np.maximum.accumulate(candidate[..., 0], axis=-1)          # (..., m)  C_j = max_{l ≤ j} (row l's maximum)
    psi = favor_from_terms(exponent - C[..., None], trig, 0.0)    # (..., m, F)  φ(k_j) e^{−C_j} without ε
    return KeyFeatures(psi, C, eps / np.sqrt(psi.shape[-1]))       # offset ε/√F


def _default_num_features(d: int) -> int:
    return max(1, round(d * math.log(d)))


def _check_eps(eps, name: str = "eps") -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float, np.integer, np.floating)) \
            or not np.isfinite(eps) or eps < 0:
        raise ValueError(f"{name} must be a finite non-negative real number, got {eps!r}")
    return float(eps)


def check_omega(omega, d: int) -> NDArray:
    """ω as float64 (..., r, d) with r >= 1 and d matching the inputs, or a ValueError naming omega and its shape."""
    omega = as_float("omega", omega)
    if omega.ndim < 2:
        raise ValueError(f"omega must have shape (num_features, d) or (..., num_features, d), got shape {omega.shape}")
    if omega.shape[-1] != d:
        raise ValueError(f"omega has d={omega.shape[-1]} columns but the inputs have d={d} (omega shape {omega.shape})")
    if omega.shape[-2] < 1:
        raise ValueError(f"omega must have at least one row, got shape {omega.shape}")
    return omega


RECORD_POSITIVE = Mechanism.of(
    performer_attention, defaults={"num_features": WhenDrawn("omega", 64)}, fixed={"kind": "positive"},
    id="performer_positive", title="Performer FAVOR+ positive random features", family="linear", section="4.2",
    paper=PERFORMER, equation=r"\phi(x) = \tfrac{e^{-\|x\|^2/2}}{\sqrt{r}} \big[e^{\omega_i^\top x}\big]_{i=1}^r",
    time="O((n + m)·r·d)", memory="O(r·d) state", kind="attention",
    methods=("equation", "right", "scan", "chunk", "auto"),
    examples=({"stabilize": True}, {"orthogonal": False, "num_features": 5}, {"eps": 1e-3},
              {"eps": 1e-6, "denominator_eps": 1e-6}),
    causal=True, figure="refattn.figures.linear:performer_positive",
    exact_options=None, exact_limit="none at finite r: unbiased for exp(q·k/√d), exact only as r → ∞",
    draws=("omega",),
)

RECORD_TRIG = Mechanism.of(
    performer_attention, defaults={"num_features": WhenDrawn("omega", 64)}, fixed={"kind": "trig"},
    id="performer_trig", title="Performer trigonometric random features", family="linear", section="4.2",
    paper=PERFORMER,
    equation=r"\phi(x) = \tfrac{e^{\|x\|^2/2}}{\sqrt{r}} \big[\sin \omega_i^\top x, \cos \omega_i^\top x\big]_{i=1}^r",
    time="O((n + m)·r·d)", memory="O(r·d) state", kind="attention",
    methods=("equation", "right", "scan", "chunk", "auto"),
    examples=({"stabilize": True}, {"orthogonal": False, "num_features": 5}),
    causal=True, nonnegative=False, figure="refattn.figures.linear:performer_trig",
    exact_options=None, exact_limit="none at finite r: unbiased for exp(q·k/√d), exact only as r → ∞",
    draws=("omega",),
)
