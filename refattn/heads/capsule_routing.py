r"""Multi-head attention aggregated by routing-by-agreement (Li et al., 2019, arXiv:1904.03100v1).

The h heads of multi-head attention are the input capsules of one position; each votes for every one of
N output capsules through its own learned transform, and an iterative routing decides how much of each
head goes to each output capsule. The output capsules, concatenated and projected, replace
multi-head attention's Concat(head_1, …, head_h) Wᴼ:

    Ω_i^in = head_i = Attention(Q W_iᵠ, K W_iᴷ, V W_iⱽ)              input capsule i (per position)
    û_{j|i} = Ω_i^in W_ij                                              vote of head i for output capsule j
    Ω^out = Routing(û, T)                                              N output capsules of width d_cap
    out = Concat(Ω_1^out, …, Ω_N^out) Wᴼ + bᴼ

Dynamic routing (Sabour et al., 2017, Procedure 1), T iterations:

    b_ij = 0;  repeat T times:  c_ij = exp(b_ij) / Σ_k exp(b_ik)       (softmax over output capsules j)
                                s_j = Σ_i c_ij û_{j|i},  v_j = squash(s_j) = ‖s_j‖² / (1 + ‖s_j‖²) · s_j / ‖s_j‖
                                b_ij ← b_ij + û_{j|i} · v_j      (squash(0) = 0)
    Ω_j^out = v_j

EM routing (Hinton et al., 2018, Procedure 1), T iterations, each output capsule a Gaussian of mean μ_j,
per-dimension variance σ_j² and activation a_j:

    R_ij = 1/N;  repeat T times:
        M-step:  μ_j = Σ_i R_ij û_{j|i} / Σ_i R_ij,   σ_j² = Σ_i R_ij (û_{j|i} − μ_j)² / Σ_i R_ij  (+ ε)
                 cost_j = Σ_d (β_u,j + log σ_jd) Σ_i R_ij,   a_j = logistic(λ_t (β_a,j − cost_j))
        E-step (not after the last M-step):
                 p_ij = Π_d N(û_{j|i,d}; μ_jd, σ_jd²),   R_ij = a_j p_ij / Σ_k a_k p_ik
    Ω_j^out = a_j μ_j

Sources of each detail. Li et al. name the two procedures they aggregate the heads with, Sabour et
al.'s dynamic routing and Hinton et al.'s EM routing, applied to the heads of each position as input
capsules with a learned transform per (head, output capsule) pair; the survey (§4.6.3) summarises the
result as output capsules "concatenated to serve as the final output". Li et al.'s own equations were not
at hand for this module, so the following details come from the routing papers and are marked as such:
the heads carry no activation of their own, so every input capsule's activation is 1 (Hinton et al.'s
R_ij · a_i is R_ij); the E-step is skipped after the last M-step (its result would be unused); Hinton
et al. use a fixed schedule of the inverse temperature λ without stating it, so ``inverse_temperature``
is an option (a constant, default 1, or one value per iteration); the variance floor ε (default 1e-8)
is the guard EM-routing implementations add so that identical votes (one head, or a query that sees no
key) give a finite ln σ. Sizes: N = h output capsules of width d_cap = d_v by default, so the final
projection Wᴼ has multi-head attention's shape (h·d_v, d_model); T = 3 iterations (Sabour et al.'s
choice); the vote transforms are Glorot-uniform per pair and β_u = β_a = 0 at initialisation (neither
routing paper states them). With N ≥ h, EM routing can give each head a capsule of its own, whose
variance is then ε: such singleton clusters dominate the E-step, and the coupling can swing between
assignments from one iteration to the next; N < h makes the heads share capsules.

Routing is per position: it mixes the h heads of one query and nothing else, so every property of
the heads' attention (its weights, its causal mask, which keys a query sees) carries over unchanged;
``return_weights`` gives the heads' (..., h, n, m) weights. No setting of the options is softmax
attention: dynamic routing's output capsules are squashed (norm < 1) and EM routing's are a_j μ_j with
a_j ∈ (0, 1) computed from the votes' spread, so neither is linear in the heads.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.checks import as_float, as_rng, check_choice
from ..common.init import glorot
from ..common.ints import check_positive_int
from ..core.multi_head import combine_heads, drawn_width, head_shared, layer_inputs, project_heads
from ..core.sdpa import scaled_dot_product_attention
from ..core.softmax import softmax
from ..draws import given_or_drawn, note_allowed, optional_rng
from ..masks import allowed_pairs, check_mask_shape
from ..mechanism import Mechanism

__all__ = [
    "CapsuleRoutingParams", "capsule_routing_attention", "dynamic_routing", "em_routing", "head_votes",
    "init_capsule_routing", "squash",
]

LI_ROUTING = ('J. Li, B. Yang, Z.-Y. Dou, X. Wang, M. R. Lyu, Z. Tu, 2019, "Information Aggregation for Multi-Head '
              'Attention with Routing-by-Agreement", arXiv:1904.03100')
ROUTINGS = ("dynamic", "em")


@dataclass(frozen=True)
class CapsuleRoutingParams:
    """Parameters of multi-head attention with routing-by-agreement; weights act on the right (``x @ w``).

    Attributes
    ----------
    w_q, w_k : (d_model, h·d_k) ndarray
        The heads' query and key projections, head *i* in columns i·d_k … (i+1)·d_k − 1.
    w_v : (d_model, h·d_v) ndarray
        The heads' value projections.
    w_votes : (h, N, d_v, d_cap) ndarray
        ``w_votes[i, j]`` is W_ij, the transform of head *i*'s output into its vote for output capsule *j*.
    w_o : (N·d_cap, d_model) ndarray
        Projection of the concatenated output capsules, capsule *j* in rows j·d_cap … (j+1)·d_cap − 1.
    beta_u, beta_a : (N,) ndarray
        EM routing's per-capsule cost offsets β_u and activation thresholds β_a (unused by dynamic routing).
    b_q, b_k, b_v, b_o : ndarray or None
        Biases of the four projections.
    """

    w_q: NDArray
    w_k: NDArray
    w_v: NDArray
    w_votes: NDArray
    w_o: NDArray
    beta_u: NDArray
    beta_a: NDArray
    b_q: NDArray | None = None
    b_k: NDArray | None = None
    b_v: NDArray | None = None
    b_o: NDArray | None = None

    def __post_init__(self) -> None:
        for name, ndim in (("w_q", 2), ("w_k", 2), ("w_v", 2), ("w_votes", 4), ("w_o", 2), ("beta_u", 1),
                           ("beta_a", 1)):
            if np.ndim(getattr(self, name)) != ndim:
                raise ValueError(f"{name} must be {ndim}-D, got shape {np.shape(getattr(self, name))}")
        d_model = self.w_q.shape[0]
        if self.w_k.shape != self.w_q.shape:
            raise ValueError(f"w_k has shape {self.w_k.shape} but w_q has shape {self.w_q.shape}")
        if self.w_v.shape[0] != d_model:
            raise ValueError(f"w_v has shape {self.w_v.shape}; expected ({d_model}, h·d_v)")
        h, N, d_v, d_cap = self.w_votes.shape
        if h * d_v != self.w_v.shape[1]:
            raise ValueError(f"w_votes has shape {self.w_votes.shape} (h={h}, d_v={d_v}) but w_v has "
                             f"{self.w_v.shape[1]} columns; expected h·d_v = {h * d_v}")
        if self.w_q.shape[1] % h:
            raise ValueError(f"w_q has {self.w_q.shape[1]} columns, not divisible by h={h} "
                             f"(w_votes {self.w_votes.shape})")
        if self.w_o.shape != (N * d_cap, d_model):
            raise ValueError(f"w_o has shape {self.w_o.shape}; expected (N·d_cap, d_model) = "
                             f"({N * d_cap}, {d_model})")
        for name in ("beta_u", "beta_a"):
            if np.shape(getattr(self, name)) != (N,):
                raise ValueError(f"{name} has shape {np.shape(getattr(self, name))}; expected (N,) = ({N},)")
        for b, w in (("b_q", "w_q"), ("b_k", "w_k"), ("b_v", "w_v"), ("b_o", "w_o")):
            bias = getattr(self, b)
            if bias is not None and np.shape(bias) != (getattr(self, w).shape[1],):
                raise ValueError(f"{b} has shape {np.shape(bias)}; expected ({getattr(self, w).shape[1]},) "
                                 f"to match {w} {getattr(self, w).shape}")

    @property
    def num_heads(self) -> int:
        """*h*: the number of heads, the input capsules."""
        return self.w_votes.shape[0]

    @property
    def num_capsules(self) -> int:
        """*N*: the number of output capsules."""
        return self.w_votes.shape[1]

    @property
    def d_model(self) -> int:
        """Model width: rows of ``w_q``."""
        return self.w_q.shape[0]


def init_capsule_routing(
    rng, d_model: int, num_heads: int, *, num_capsules: int | None = None, d_capsule: int | None = None,
    bias: bool = True,
) -> CapsuleRoutingParams:
    r"""Draw the parameters of multi-head attention with routing-by-agreement.

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw.
    d_model : int
        Model width, divisible by ``num_heads`` (d_k = d_v = d_model / h, as in multi-head attention).
    num_heads : int
        *h*: the heads, the input capsules.
    num_capsules : int, optional
        *N*: the output capsules. Default ``num_heads``.
    d_capsule : int, optional
        Width of an output capsule. Default d_v, so that Wᴼ is (h·d_v, d_model) as in multi-head attention.
    bias : bool, default True
        Give the query, key, value and output projections zero biases (as :func:`~refattn.init_multi_head`).

    Returns
    -------
    CapsuleRoutingParams

    Notes
    -----
    Glorot uniform per matrix, drawn in the order w_q, w_k, w_v, the h·N vote transforms (head-major),
    w_o; β_u = β_a = 0. Neither the paper nor the routing papers state an initialisation.
    """
    rng = as_rng(rng)
    check_positive_int("d_model", d_model)
    h = check_positive_int("num_heads", num_heads)
    if d_model % h:
        raise ValueError(f"d_model={d_model} is not divisible by num_heads={h}")
    d = d_model // h
    N = h if num_capsules is None else check_positive_int("num_capsules", num_capsules)
    d_cap = d if d_capsule is None else check_positive_int("d_capsule", d_capsule)
    w_q, w_k, w_v = glorot(rng, d_model, h * d), glorot(rng, d_model, h * d), glorot(rng, d_model, h * d)
    w_votes = np.stack([np.stack([glorot(rng, d, d_cap) for _ in range(N)]) for _ in range(h)])
    w_o = glorot(rng, N * d_cap, d_model)
    b = (lambda size: np.zeros(size)) if bias else (lambda size: None)
    return CapsuleRoutingParams(w_q, w_k, w_v, w_votes, w_o, np.zeros(N), np.zeros(N),
                                b(h * d), b(h * d), b(h * d), b(d_model))


def squash(s: ArrayLike) -> NDArray:
    r"""Sabour et al.'s squashing non-linearity along the last axis: ‖s‖² / (1 + ‖s‖²) · s / ‖s‖.

    It keeps the direction of ``s`` and maps its norm r to r² / (1 + r²) < 1; ``s = 0`` gives 0. The norm is
    taken of ``s`` divided by its largest entry and the factor written r / (1 + r²) = 1 / (r + 1/r), so that no
    square overflows: ``squash([1e200, 0, 0])`` is [1, 0, 0].

    Parameters
    ----------
    s : (..., d) array_like

    Returns
    -------
    (..., d) ndarray

    Examples
    --------
    >>> squash([3.0, 4.0])            # norm 5 → 25/26
    array([0.57692308, 0.76923077])
    """
    s = as_float("s", s, min_ndim=1)
    top = np.max(np.abs(s), axis=-1, keepdims=True)                         # (..., 1)  max_i |s_i|
    with np.errstate(divide="ignore", invalid="ignore"):                   # s = 0: 1/‖s‖ = inf and the factor is 0
        norm = top * np.sqrt(np.sum((s / np.where(top == 0, 1.0, top)) ** 2, axis=-1, keepdims=True))   # ‖s‖
        return s * (1.0 / (norm + 1.0 / norm))                             # ‖s‖²/(1+‖s‖²) · s/‖s‖ = s·‖s‖/(1+‖s‖²)


def head_votes(heads: ArrayLike, w_votes: ArrayLike) -> NDArray:
    r"""The votes û_{j|i} = head_i W_ij of every head for every output capsule, one set per position.

    Parameters
    ----------
    heads : (..., h, n, d_v) array_like
        The heads' outputs, the input capsules.
    w_votes : (h, N, d_v, d_cap) array_like
        ``w_votes[i, j]`` is W_ij.

    Returns
    -------
    votes : (..., n, h, N, d_cap) ndarray
        ``votes[..., t, i, j, :]`` is head *i*'s vote for output capsule *j* at position *t*.
    """
    heads = as_float("heads", heads, min_ndim=3)
    w_votes = as_float("w_votes", w_votes, min_ndim=4)
    if heads.shape[-3] != w_votes.shape[0] or heads.shape[-1] != w_votes.shape[2]:
        raise ValueError(f"heads have shape {heads.shape} (h, n, d_v) but w_votes has shape {w_votes.shape} "
                         "(h, N, d_v, d_cap)")
    return np.einsum("...ind,ijde->...nije", heads, w_votes)                # (..., n, h, N, d_cap)


def _check_votes(votes: ArrayLike, iterations: int) -> tuple[NDArray, int]:
    votes = as_float("votes", votes, min_ndim=3)
    return votes, check_positive_int("iterations", iterations)


def dynamic_routing(votes: ArrayLike, *, iterations: int = 3) -> tuple[NDArray, NDArray]:
    r"""Dynamic routing between capsules (Sabour et al., 2017, Procedure 1).

    .. math::

        c_{ij} = \frac{e^{b_{ij}}}{\sum_k e^{b_{ik}}}, \quad s_j = \sum_i c_{ij}\hat u_{j|i}, \quad
        v_j = \operatorname{squash}(s_j), \quad b_{ij} \leftarrow b_{ij} + \hat u_{j|i}\cdot v_j,
        \quad b_{ij}^{(0)} = 0

    Parameters
    ----------
    votes : (..., h, N, d) array_like
        û_{j|i}: input capsule *i*'s vote for output capsule *j*.
    iterations : int, default 3
        *T* (≥ 1).

    Returns
    -------
    capsules : (..., N, d) ndarray
        v_j after the last iteration.
    coupling : (..., T, h, N) ndarray
        c_ij used in each iteration; every (t, i) row is a distribution over the N output capsules, and the
        first is uniform, 1/N.

    References
    ----------
    .. [1] S. Sabour, N. Frosst, G. E. Hinton, "Dynamic Routing Between Capsules", NeurIPS 2017,
       arXiv:1710.09829v2, Procedure 1, Eq. (1)-(3).

    Examples
    --------
    >>> votes = np.random.default_rng(0).standard_normal((3, 2, 4))     # h = 3 heads, N = 2 capsules
    >>> v, c = dynamic_routing(votes, iterations=1)
    >>> np.testing.assert_allclose(v, squash(votes.sum(axis=0) / 2), rtol=1e-15)   # c = 1/N
    """
    votes, T = _check_votes(votes, iterations)
    b = np.zeros(votes.shape[:-1])                                         # (..., h, N)  b_ij = 0
    history = []
    for t in range(T):
        c = softmax(b, axis=-1)                                            # (..., h, N)  c_ij over j
        history.append(c)
        s = np.einsum("...ij,...ijd->...jd", c, votes)                     # (..., N, d)  s_j = Σ_i c_ij û_{j|i}
        v = squash(s)                                                      # (..., N, d)  v_j
        if t < T - 1:
            b = b + np.einsum("...ijd,...jd->...ij", votes, v)             # (..., h, N)  b_ij += û_{j|i}·v_j
    return v, np.stack(history, axis=-3)


def em_routing(
    votes: ArrayLike, beta_u: ArrayLike, beta_a: ArrayLike, *, iterations: int = 3,
    inverse_temperature: float | Sequence[float] = 1.0, eps: float = 1e-8,
) -> tuple[NDArray, NDArray]:
    r"""EM routing (Hinton et al., 2018, Procedure 1) with every input capsule's activation 1.

    .. math::

        \mu_j = \frac{\sum_i R_{ij}\hat u_{j|i}}{\sum_i R_{ij}}, \quad
        \sigma_j^2 = \frac{\sum_i R_{ij}(\hat u_{j|i} - \mu_j)^2}{\sum_i R_{ij}} + \varepsilon, \quad
        a_j = \operatorname{logistic}\Big(\lambda\big(\beta_{a,j} - \sum_d (\beta_{u,j} + \ln\sigma_{jd})
        \textstyle\sum_i R_{ij}\big)\Big), \quad
        R_{ij} = \frac{a_j p_{ij}}{\sum_k a_k p_{ik}}, \quad R_{ij}^{(0)} = \frac1N

    with :math:`p_{ij} = \prod_d \mathcal N(\hat u_{j|i,d}; \mu_{jd}, \sigma_{jd}^2)`; the E-step (the
    update of R) follows every M-step but the last. The E-step is computed in log space,
    :math:`R_{i\cdot} = \operatorname{softmax}_j(\ln a_j + \ln p_{ij})`.

    Parameters
    ----------
    votes : (..., h, N, d) array_like
        û_{j|i}.
    beta_u, beta_a : (N,) array_like
        β_u and β_a per output capsule.
    iterations : int, default 3
        *T* (≥ 1): the number of M-steps.
    inverse_temperature : float or sequence of T floats, default 1.0
        λ, constant or per iteration (Hinton et al. use a fixed schedule without stating it).
    eps : float, default 1e-8
        Floor added to every σ² (identical votes would otherwise give ln σ = −∞).

    Returns
    -------
    capsules : (..., N, d) ndarray
        a_j μ_j after the last M-step.
    coupling : (..., T, h, N) ndarray
        R_ij used by each M-step; every (t, i) row is a distribution over the N capsules, the first 1/N.

    References
    ----------
    .. [1] G. E. Hinton, S. Sabour, N. Frosst, "Matrix Capsules with EM Routing", ICLR 2018, Procedure 1.

    Examples
    --------
    >>> votes = np.random.default_rng(0).standard_normal((3, 2, 4))
    >>> out, R = em_routing(votes, np.zeros(2), np.zeros(2), iterations=4)
    >>> R.shape, bool(np.all(np.abs(R.sum(axis=-1) - 1) < 1e-15))
    ((4, 3, 2), True)
    """
    votes, T = _check_votes(votes, iterations)
    N = votes.shape[-2]
    beta_u, beta_a = as_float("beta_u", beta_u), as_float("beta_a", beta_a)
    for name, beta in (("beta_u", beta_u), ("beta_a", beta_a)):
        if beta.shape != (N,):
            raise ValueError(f"{name} has shape {beta.shape}; expected (N,) = ({N},) for votes of shape {votes.shape}")
    lam = np.asarray(inverse_temperature, dtype=np.float64)
    lam = np.broadcast_to(lam, (T,)) if lam.ndim == 0 else lam
    if lam.shape != (T,) or not np.all(np.isfinite(lam)):
        raise ValueError(f"inverse_temperature must be a finite number or {T} of them (iterations={T}), got "
                         f"shape {lam.shape}")
    if not (np.isfinite(eps) and eps >= 0):
        raise ValueError(f"eps must be a finite number >= 0, got {eps!r}")
    R = np.full(votes.shape[:-1], 1.0 / N)                                 # (..., h, N)  R_ij = 1/N
    history = []
    for t in range(T):
        history.append(R)
        R_sum = R.sum(axis=-2)[..., None]                                  # (..., N, 1)  Σ_i R_ij
        mu = np.einsum("...ij,...ijd->...jd", R, votes) / R_sum            # (..., N, d)  μ_j
        dev2 = (votes - mu[..., None, :, :]) ** 2                          # (..., h, N, d)  (û − μ_j)²
        var = np.einsum("...ij,...ijd->...jd", R, dev2) / R_sum + eps      # (..., N, d)  σ_j² (+ ε)
        cost = ((beta_u[:, None] + 0.5 * np.log(var)) * R_sum).sum(axis=-1)   # (..., N)  Σ_d (β_u + ln σ) Σ_i R
        x = lam[t] * (beta_a - cost)                                       # (..., N)
        log_a = -np.logaddexp(0.0, -x)                                     # (..., N)  ln a_j = ln logistic(x)
        if t < T - 1:
            log_p = -0.5 * np.sum(dev2 / var[..., None, :, :] + np.log(2 * np.pi * var)[..., None, :, :],
                                  axis=-1)                                 # (..., h, N)  ln p_ij
            R = softmax(log_a[..., None, :] + log_p, axis=-1)              # (..., h, N)  a_j p_ij / Σ_k a_k p_ik
    return np.exp(log_a)[..., None] * mu, np.stack(history, axis=-3)


def capsule_routing_attention(
    x_q: ArrayLike,
    x_kv: ArrayLike,
    params: CapsuleRoutingParams | None = None,
    *,
    num_heads: int | None = None,
    rng=None,
    routing: str = "dynamic",
    iterations: int = 3,
    inverse_temperature: float | Sequence[float] = 1.0,
    eps: float = 1e-8,
    mask: ArrayLike | None = None,
    causal: bool | str = False,
    x_v: ArrayLike | None = None,
    return_weights: bool = False,
    return_coupling: bool = False,
) -> NDArray | tuple[NDArray, ...]:
    r"""Multi-head attention whose heads are aggregated by routing-by-agreement (Li et al., 2019).

    .. math::

        \hat u_{j|i} = \mathrm{head}_i W_{ij}, \quad
        \Omega^{out} = \operatorname{Routing}(\hat u, T), \quad
        \mathrm{out} = \operatorname{Concat}(\Omega^{out}_1, \dots, \Omega^{out}_N) W^O

    Parameters
    ----------
    x_q : (..., n, d_model) array_like
        Query-side input.
    x_kv : (..., m, d_model) array_like
        Key-side input (and value-side unless ``x_v`` is given).
    params : CapsuleRoutingParams, optional
        From :func:`init_capsule_routing`; its ``w_votes`` fixes h and N. Drawn from ``rng`` when omitted
        (:func:`init_capsule_routing`, d_model = the width of ``x_q``, h = ``num_heads``, N = h).
    num_heads : int, optional
        *h*: of the parameters drawn from ``rng`` (then required), or checked against those of ``params``.
    rng : numpy.random.Generator or int, optional
        Draws ``params`` when it is omitted.
    routing : {"dynamic", "em"}, default "dynamic"
        Dynamic routing (:func:`dynamic_routing`) or EM routing (:func:`em_routing`).
    iterations : int, default 3
        *T*, the routing iterations (≥ 1).
    inverse_temperature : float or sequence of T floats, default 1.0
        EM routing's λ.
    eps : float, default 1e-8
        EM routing's variance floor.
    mask : (..., n, m) array_like of bool or float, optional
        Shared by all heads, as in :func:`~refattn.multi_head_attention`.
    causal : {False, True, "top-left", "bottom-right"}, default False
        As in :func:`~refattn.scaled_dot_product_attention`, for every head.
    x_v : (..., m, d_model) array_like, optional
        Value-side input when it differs from ``x_kv``.
    return_weights : bool, default False
        Also return the heads' attention weights.
    return_coupling : bool, default False
        Also return the coupling coefficients of every iteration.

    Returns
    -------
    out : (..., n, d_model) ndarray
    weights : (..., h, n, m) ndarray
        Only if ``return_weights``: the heads' weights (routing does not change them).
    coupling : (..., n, T, h, N) ndarray
        Only if ``return_coupling``: per position, iteration and head, a distribution over the N capsules.

    References
    ----------
    .. [1] J. Li, B. Yang, Z.-Y. Dou, X. Wang, M. R. Lyu, Z. Tu, "Information Aggregation for Multi-Head
       Attention with Routing-by-Agreement", NAACL 2019, arXiv:1904.03100v1.
    .. [2] S. Sabour, N. Frosst, G. E. Hinton, "Dynamic Routing Between Capsules", NeurIPS 2017, arXiv:1710.09829v2.
    .. [3] G. E. Hinton, S. Sabour, N. Frosst, "Matrix Capsules with EM Routing", ICLR 2018.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> params = init_capsule_routing(rng, d_model=8, num_heads=2)
    >>> x = rng.standard_normal((5, 8))
    >>> out, A, C = capsule_routing_attention(x, x, params, routing="em", causal=True, return_weights=True,
    ...                                       return_coupling=True)
    >>> out.shape, A.shape, C.shape
    ((5, 8), (2, 5, 5), (5, 3, 2, 2))
    """
    x_q = as_float("x_q", x_q, min_ndim=2)                         # its width sizes drawn parameters
    if params is None and rng is not None and num_heads is None:   # rng missing too: given_or_drawn says so
        raise ValueError("capsule_routing needs num_heads= to draw params from rng (or params=)")
    params = given_or_drawn("capsule_routing", "params", params, optional_rng(rng),
                            lambda r: init_capsule_routing(r, drawn_width(x_q), num_heads), what="its parameters")
    if not isinstance(params, CapsuleRoutingParams):
        raise TypeError(f"params must be CapsuleRoutingParams (see init_capsule_routing), got {type(params).__name__}")
    if num_heads is not None and params.num_heads != num_heads:
        raise ValueError(f"params have h={params.num_heads} heads (w_votes {params.w_votes.shape}) but "
                         f"num_heads={num_heads}")
    check_choice("routing", routing, ROUTINGS)
    check_positive_int("iterations", iterations)
    x_q, x_kv, x_v = layer_inputs(x_q, x_kv, x_v, params.d_model)
    if mask is not None:
        mask = check_mask_shape(mask, x_q.shape[-2], x_kv.shape[-2])
    h = params.num_heads
    Q = project_heads(x_q, params.w_q, params.b_q, h)                      # (..., h, n, d_k)  Q W_iᵠ
    K = project_heads(x_kv, params.w_k, params.b_k, h)                     # (..., h, m, d_k)  K W_iᴷ
    V = project_heads(x_v, params.w_v, params.b_v, h)                      # (..., h, m, d_v)  V W_iⱽ
    result = scaled_dot_product_attention(Q, K, V, mask=head_shared(mask), causal=causal,
                                          return_weights=return_weights)   # (..., h, n, d_v) [, (..., h, n, m)]
    heads, A = result if return_weights else (result, None)
    votes = head_votes(heads, params.w_votes)                              # (..., n, h, N, d_cap)  û_{j|i}
    if routing == "dynamic":
        capsules, coupling = dynamic_routing(votes, iterations=iterations)  # (..., n, N, d_cap)
    else:
        capsules, coupling = em_routing(votes, params.beta_u, params.beta_a, iterations=iterations,
                                        inverse_temperature=inverse_temperature, eps=eps)
    out = combine_heads(np.swapaxes(capsules, -2, -3), params.w_o, params.b_o)   # (..., n, d_model)  Concat(Ω^out) Wᴼ
    if not (return_weights or return_coupling):
        return out
    if return_weights:
        note_allowed(lambda: allowed_pairs(head_shared(mask), causal, A.shape))
    return (out,) + ((A,) if return_weights else ()) + ((coupling,) if return_coupling else ())


RECORD = Mechanism.of(
    capsule_routing_attention, inputs=("x_q", "x_kv", "x_v"), defaults={"num_heads": 2},
    fixed={"return_coupling": False},
    id="capsule_routing", title="Routing-by-agreement of heads", family="heads", section="4.6.3",
    paper=LI_ROUTING,
    equation=r"\hat u_{j|i} = \mathrm{head}_i W_{ij},\ \operatorname{Concat}(\operatorname{Routing}(\hat u, T))W^O",
    time="O(n·m·d + n·h·N·d²·T)", memory="O(h·n·m + n·h·N·d)", kind="attention",
    causal=True,
    figure="refattn.figures.capsule_routing:capsule_routing",
    examples=({"routing": "em"}, {"iterations": 1}, {"num_heads": 4, "routing": "em"}),
    exact_options=None,
    exact_limit="none: dynamic routing squashes every output capsule (norm < 1) and EM routing scales it by an "
    "activation in (0, 1) computed from the votes' spread, so no setting is linear in the heads",
    draws=("params",),
    layer_inputs=True,
)
