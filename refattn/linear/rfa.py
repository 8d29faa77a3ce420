r"""Random Feature Attention with its gate (Peng et al., 2021, §3, Eq. 7): causal linear attention that forgets.

    g_t = σ(w_g · x_t + b_g)                              a scalar gate per step (and head)
    S_t = g_t S_{t−1} + (1 − g_t) φ(k_t) ⊗ v_t            S_0 = 0    (F × d_v)
    z_t = g_t z_{t−1} + (1 − g_t) φ(k_t)                  z_0 = 0    (F)
    out_t = φ(q_t)ᵀ S_t / φ(q_t)ᵀ z_t

Unrolled, query i weighs key j ≤ i by c_ij = (1 − g_j) Π_{l=j+1..i} g_l (see Notes), so the two paths

    "equation"  the masked n × n matrix c_ij φ(q_i)·φ(k_j), row-normalised (also the effective matrix)
    "scan"      the recurrence above, in Numba (refattn.kernels.gated_scan)
    "chunk"     the recurrence by chunks: c_ij within a chunk, the gated state across chunks (refattn.linear.chunk)
    "auto"      "equation" while its n × n matrix fits the memory budget, "chunk" above

agree to 1e-12. φ is any feature map; RFA's own is a random Fourier map of ℓ2-normalised q and k.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.budget import check_fits
from ..common.checks import as_float, as_rng, check_bool, check_choice, checked_qkv
from ..common.init import glorot
from ..common.ints import check_positive_int
from ..common.products import weighted_values
from ..draws import given_or_drawn, optional_rng
from ..kernels import kernel_rows
from ..mechanism import Mechanism
from ._common import (
    causal_recurrence,
    check_denominators,
    check_eps,
    check_feature_counts,
    check_feature_map,
    check_recurrence_inputs,
    drawn_parameters,
    features,
    resolve_method,
    safe_denominator,
    sigmoid,
)
from .chunk import check_chunk_size, gate_coefficients, gated_chunks
from .linear_elu import elu_feature_map

__all__ = ["RFAGateParams", "init_rfa_gate", "rfa_attention", "rfa_gates"]

METHODS = ("auto", "equation", "scan", "chunk")
GATE_FORMS = ("paper", "decay")


@dataclass(frozen=True)
class RFAGateParams:
    r"""Parameters of RFA's gate :math:`g_t = \sigma(w_g \cdot x_t + b_g)`.

    Attributes
    ----------
    w_g : (d,) ndarray
        Gate weights :math:`w_g`.
    b_g : float
        Gate bias :math:`b_g`.
    """

    w_g: NDArray
    b_g: float

    def __post_init__(self) -> None:
        if np.ndim(self.w_g) != 1:
            raise ValueError(f"w_g must be a vector (d,), got shape {np.shape(self.w_g)}")
        if np.ndim(self.b_g) != 0:
            raise ValueError(f"b_g must be a scalar, got shape {np.shape(self.b_g)}")


def init_rfa_gate(rng, d: int, *, b_g: float = 0.0) -> RFAGateParams:
    r"""Draw the gate weights :math:`w_g` (Glorot uniform) and set the bias :math:`b_g`.

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw.
    d : int
        Width of the gate's input :math:`x_t`.
    b_g : float, default 0.0
        Gate bias. A positive bias starts the gate near 1 (long memory).

    Returns
    -------
    RFAGateParams

    Notes
    -----
    :math:`w_g` is one column of a Glorot-uniform matrix,
    :math:`U(\pm\sqrt{6/(d + 1)})`, as refattn draws every projection; the bias is not drawn.

    Examples
    --------
    >>> p = init_rfa_gate(0, 8)
    >>> p.w_g.shape, p.b_g
    ((8,), 0.0)
    """
    rng = as_rng(rng)
    d = check_positive_int("d", d)
    return RFAGateParams(w_g=glorot(rng, d, 1)[:, 0], b_g=float(b_g))


def rfa_gates(x: ArrayLike, w_g: ArrayLike, b_g: float | ArrayLike = 0.0) -> NDArray:
    r"""RFA's gate, :math:`g_t = \sigma(w_g \cdot x_t + b_g)`, for every step at once.

    Parameters
    ----------
    x : (..., n, d) array_like
        Gate inputs :math:`x_t` (the layer's input at step *t*).
    w_g : (d,) array_like
        Gate weights.
    b_g : float, default 0.0
        Gate bias.

    Returns
    -------
    gates : (..., n) ndarray
        Values in [0, 1] (in (0, 1) unless the logit saturates in float64).

    Examples
    --------
    >>> rfa_gates(np.zeros((3, 2)), np.ones(2))
    array([0.5, 0.5, 0.5])
    """
    x = as_float("x", x, min_ndim=1)
    w_g = as_float("w_g", w_g)
    b_g = as_float("b_g", b_g)
    if w_g.ndim != 1 or w_g.shape[0] != x.shape[-1]:
        raise ValueError(f"w_g must have shape (d,) = ({x.shape[-1]},) to match x of shape {x.shape}, "
                         f"got shape {w_g.shape}")
    if b_g.ndim != 0:
        raise ValueError(f"b_g must be a scalar, got shape {b_g.shape}")
    return sigmoid(x @ w_g + b_g)                                 # (..., n)  σ(w_g·x_t + b_g)


def rfa_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    gates: ArrayLike | None = None,
    feature_map: Callable[[NDArray], NDArray] = elu_feature_map,
    *,
    gate_form: str = "paper",
    method: str = "auto",
    eps: float = 0.0,
    return_weights: bool = False,
    chunk_size: int | None = None,
    causal: bool | str = True,
    rng: np.random.Generator | int | None = None,
) -> NDArray | tuple[NDArray, NDArray]:
    r"""Gated causal random feature attention (RFA-Gate): a linear-attention RNN with a forget gate.

    .. math::

        S_t = g_t\,S_{t-1} + (1 - g_t)\,\phi(k_t) \otimes v_t, \qquad
        z_t = g_t\,z_{t-1} + (1 - g_t)\,\phi(k_t), \qquad
        \operatorname{out}_t = \frac{\phi(q_t)^\top S_t}{\phi(q_t) \cdot z_t}

    with :math:`S_0 = 0`, :math:`z_0 = 0`. Causal self-attention: step *t* reads the memory
    after writing token *t*, so queries and keys come from the same *n* positions.

    Parameters
    ----------
    q : (..., n, d) array_like
        Queries.
    k : (..., m, d) array_like
        Keys (as many as queries, m = n, unless ``causal="bottom-right"``).
    v : (..., m, d_v) array_like
        Values.
    gates : (..., m) array_like, optional
        :math:`g_t \in [0, 1]`, one per step (and per batch row or head), e.g. from
        :func:`rfa_gates`. Explicit, so that another implementation can be fed the same gates.
        Default: :math:`\sigma(k_t \cdot w_g)` with :math:`w_g` drawn from ``rng`` by
        :func:`init_rfa_gate`.
    feature_map : callable, default :func:`~refattn.linear.elu_feature_map`
        :math:`\phi`, mapping ``(..., n, d)`` to ``(..., n, F)`` real features, F >= 1.
    gate_form : {"paper", "decay"}, default "paper"
        "paper": the write is weighted by :math:`1 - g_t`, a convex combination of the old memory
        and the new association (Eq. 7). "decay": :math:`S_t = g_t S_{t-1} + \phi(k_t) \otimes v_t`
        (and likewise *z*), the gate only decays the past; with :math:`g \equiv 1` this is the
        paper's ungated causal RFA, i.e. causal linear attention.
    method : {"auto", "equation", "scan", "chunk"}, default "auto"
        "equation": the masked :math:`n \times n` matrix of the unrolled sum. "scan": the
        recurrence in Numba, :math:`O(n F d_v)` time and :math:`O(F d_v)` memory. "chunk": the
        recurrence by chunks of ``chunk_size`` steps in matrix products
        (:mod:`refattn.linear.chunk`). "auto":
        "equation" while one (..., n, n) float64 array fits :func:`~refattn.common.memory_budget`,
        "chunk" above (an explicit "equation" above it raises
        :class:`~refattn.common.MemoryBudgetError` before allocating).
    eps : float, default 0.0
        Added to every denominator :math:`\phi(q_t) \cdot z_t` (the paper's equations have none).
    return_weights : bool, default False
        Also return the effective attention matrix (computed by the equation path whatever
        ``method`` is; :class:`~refattn.common.MemoryBudgetError` before allocating if it
        exceeds the memory budget).
    chunk_size : int, optional
        Steps per chunk of ``method="chunk"`` (default :data:`~refattn.linear.chunk.DEFAULT_CHUNK_SIZE`).
    causal : {True, "top-left", "bottom-right"}, default True
        A causal recurrence: True (n = m), or "bottom-right", the n queries as the last n of the m
        positions (decoding with the memory of the first m − n).
    rng : numpy.random.Generator or int, optional
        Draws the gates' weights when ``gates`` is not given.

    Returns
    -------
    out : (..., n, d_v) ndarray
    weights : (..., n, m) ndarray
        Only if ``return_weights``: :math:`A_{ij} = c_{ij}\phi(q_i)\cdot\phi(k_j) / \sum_{l \le i}
        c_{il}\phi(q_i)\cdot\phi(k_l)` for :math:`j \le i`, 0 above the diagonal. With ``eps=0``
        every row sums to 1; entries are non-negative when :math:`\phi` is.

    Raises
    ------
    ValueError
        If the shapes do not fit, q and k differ in length, a gate lies outside [0, 1], the map
        gives no feature (F = 0) or different F for q and k, or an option is unknown.
    TypeError
        If an input is not a real floating-point array, or ``feature_map`` is not callable or
        gives non-real features.
    ZeroDivisionError
        If a denominator :math:`\phi(q_t)\cdot z_t + \epsilon` is exactly 0 (e.g. ``gate_form="paper"``
        with :math:`g_1 = \dots = g_t = 1`: every write so far was erased); never a silent inf or NaN.

    Notes
    -----
    **Unrolled form.** By induction from :math:`S_0 = 0`,

    .. math::

        S_i = \sum_{j \le i} c_{ij}\,\phi(k_j) \otimes v_j, \qquad
        z_i = \sum_{j \le i} c_{ij}\,\phi(k_j), \qquad
        c_{ij} = (1 - g_j) \prod_{l=j+1}^{i} g_l

    (the write of step *j* is weighted by :math:`1 - g_j` and then multiplied by every later gate;
    the empty product is 1). Hence

    .. math::

        \operatorname{out}_i = \frac{\sum_{j \le i} c_{ij}\,\phi(q_i)\cdot\phi(k_j)\,v_j}
                                    {\sum_{j \le i} c_{ij}\,\phi(q_i)\cdot\phi(k_j)},

    causal linear attention with the similarity reweighted by :math:`c_{ij}`. The equation path
    forms :math:`c_{ij}` as products of gates (no division by cumulative products, which would
    fail at :math:`g = 0`). With ``gate_form="decay"``, :math:`c_{ij} = \prod_{l=j+1}^{i} g_l`.

    **Limits.** :math:`g \equiv 0` (paper form): :math:`c_{ij} = \delta_{ij}`, the memory is reset
    at every step and :math:`\operatorname{out}_t = v_t` exactly; this is *not* the ungated model.
    A constant gate :math:`g_t = \gamma`: :math:`c_{ij} = (1 - \gamma)\gamma^{i-j}` and the factor
    :math:`1 - \gamma` cancels between numerator and denominator, so the paper form equals the
    decay form with the same :math:`\gamma`, an exponential recency bias. At :math:`\gamma = 1` the
    decay form is exactly the ungated causal RFA
    (:math:`S_t = S_{t-1} + \phi(k_t)\otimes v_t`, the paper's causal attention), i.e.
    :func:`~refattn.linear.linear_attention` with ``causal=True``; the paper form reaches it only
    as the limit :math:`\gamma \to 1` (at :math:`\gamma = 1` every write is multiplied by 0).

    **RFA's own feature map.** The paper's :math:`\phi` is the random Fourier map of Rahimi and
    Recht, :math:`\phi(x) = D^{-1/2}[\sin(w_1\cdot x), \dots, \sin(w_D\cdot x), \cos(w_1\cdot x),
    \dots, \cos(w_D\cdot x)]` with Gaussian :math:`w_i`, whose expected inner product is a Gaussian
    kernel of :math:`x - y`; applied to :math:`\ell_2`-normalised queries and keys,
    :math:`\|x - y\|^2 = 2 - 2x\cdot y`, so it estimates :math:`\exp(x\cdot y/\sigma^2)` up to a
    constant that cancels in the normalisation. Its similarities can be negative, so a
    denominator can be small or of either sign. Any map can be passed here; the gate is independent
    of the map.

    **Cost.** Equation path :math:`O(n^2 (F + d_v))` time and :math:`O(n^2)` memory; scan
    :math:`O(n F d_v)` time and :math:`O(F d_v)` state.

    References
    ----------
    .. [1] H. Peng, N. Pappas, D. Yogatama, R. Schwartz, N. A. Smith, L. Kong, "Random Feature
       Attention", ICLR 2021, arXiv:2103.02143v2, §3 (random feature map, causal RFA, and the
       gate "learning with recency bias", Eq. 7).
    .. [2] A. Rahimi, B. Recht, "Random Features for Large-Scale Kernel Machines", NeurIPS 2007.

    Examples
    --------
    >>> from refattn.linear import elu_feature_map
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 6, 4))
    >>> g = rng.uniform(size=6)
    >>> out, A = rfa_attention(q, k, v, g, elu_feature_map, return_weights=True)
    >>> bool(np.allclose(A.sum(axis=-1), 1.0)), bool(np.allclose(np.triu(A, 1), 0.0))
    (True, True)
    >>> bool(np.allclose(rfa_attention(q, k, v, np.zeros(6), elu_feature_map), v))   # g ≡ 0: out_t = v_t
    True
    """
    check_choice("method", method, METHODS)
    check_choice("gate_form", gate_form, GATE_FORMS)
    check_bool("return_weights", return_weights)
    chunk_size = check_chunk_size(chunk_size)
    check_feature_map(feature_map, "feature_map")
    eps = check_eps(eps)
    coupled = gate_form == "paper"
    q, k, v, _ = checked_qkv(q, k, v)
    rng = optional_rng(rng)

    def run(q_all):
        g = given_or_drawn("rfa", "gates", gates, rng, lambda r: _drawn_gates(r, k),
                           what="the parameters of its gates")
        return _rfa(q_all, k, v, g, feature_map, coupled, method, eps, return_weights, chunk_size)

    return causal_recurrence(run, q, k, causal, "rfa_attention", return_weights)


def _drawn_gates(rng: np.random.Generator, k: NDArray) -> NDArray:
    """σ(k·w_g + b_g), (..., m), with the weights drawn by :func:`init_rfa_gate` over k's d_k features."""
    params = drawn_parameters("rfa_attention", "gates", k, rng, init_rfa_gate)
    return rfa_gates(k, params.w_g, params.b_g)


def _rfa(q, k, v, gates, feature_map, coupled, method, eps, return_weights, chunk_size):
    """The gated recurrence over one sequence (n = m)."""
    q, k, v, gates, batch = check_recurrence_inputs(q, k, v, gates, "gates")
    phi_q, phi_k = features(feature_map, q, "q"), features(feature_map, k, "k")
    check_feature_counts(phi_q, phi_k, "feature_map", "feature_map")
    n = q.shape[-2]
    if return_weights:
        check_fits("the weights (return_weights=True)", (*batch, n, n))
    method = resolve_method(method, "chunk", (*batch, n, n))

    if method == "equation" or return_weights:
        A, den_eq = _effective_weights(phi_q, phi_k, gates, coupled, eps)
    if method == "equation":
        causal = np.tri(q.shape[-2], dtype=bool)                   # masked-out future values never enter
        out, den = weighted_values(A, v, causal, np.zeros((q.shape[-2], 1), bool), "zero"), den_eq
    elif method == "chunk":
        out, den = gated_chunks(phi_q, phi_k, v, gates, coupled, eps, batch, chunk_size)
    else:
        out, den = _scan(phi_q, phi_k, v, gates, coupled, eps, batch)
    check_denominators(den, "RFA denominator φ(q_t)·z_t + eps",
                       "nothing weighted has been written to the memory there (gates of 1 with gate_form='paper', "
                       "or a feature map that is not positive); pass eps")
    return (out, A) if return_weights else out


def _effective_weights(phi_q, phi_k, gates, coupled, eps):
    """A_ij = c_ij φ(q_i)·φ(k_j) / Σ_{l ≤ i} c_il φ(q_i)·φ(k_l) on j ≤ i, and the denominators."""
    n = phi_q.shape[-2]
    with np.errstate(invalid="ignore"):                            # future garbage may be inf − inf
        sim = phi_q @ np.swapaxes(phi_k, -1, -2)                   # (..., n, n)  φ(q_i)·φ(k_j)
    C = gate_coefficients(gates, coupled)                          # (..., n, n)  c_ij
    num = np.where(np.tri(n, dtype=bool), C * sim, 0.0)            # keep j ≤ i (selection: the future cannot leak)
    den = num.sum(axis=-1) + eps                                   # (..., n)  φ(q_i)ᵀ z_i + ε
    return num / safe_denominator(den)[..., None], den


def _scan(phi_q, phi_k, v, gates, coupled, eps, batch):
    from ..kernels.gated_scan import gated_linear_scan  # Numba loads on first use only

    n, d_v = phi_q.shape[-2], v.shape[-1]
    flat = [kernel_rows(x, batch, x.shape[-2:]) for x in (phi_q, phi_k, v)]     # (B, n, ·)
    g = kernel_rows(gates, batch, (n,))                                    # (B, n)
    out, den = np.empty((g.shape[0], n, d_v)), np.empty((g.shape[0], n))
    with np.errstate(divide="ignore", invalid="ignore"):
        gated_linear_scan(*flat, g, coupled, eps, out, den)
    return out.reshape(*batch, n, d_v), den.reshape(*batch, n)


RECORD = Mechanism.of(
    rfa_attention,
    id="rfa", title="Random Feature Attention with gating", family="linear", section="4.2",
    paper='H. Peng et al., 2021, "Random Feature Attention", arXiv:2103.02143',
    equation=r"S_t = g_t S_{t-1} + (1 - g_t)\,\phi(k_t) \otimes v_t", time="O(n·F·d_v)", memory="O(F·d_v) state",
    kind="attention",
    methods=("equation", "scan", "chunk", "auto"), examples=({"gate_form": "decay"},), noncausal=False, causal=True,
    position_dependent=True, cross=False, figure="refattn.figures.linear:rfa", exact_options=None,
    exact_limit="none: a gated linear memory; its decay form with g ≡ 1 is causal linear attention (tested)",
    draws=("gates",),
)
