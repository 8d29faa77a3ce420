r"""Fast-weight delta rule (Schlag, Irie & Schmidhuber, 2021, §4): linear attention that overwrites instead of adding.

    v̄_i = W_{i−1} φ(k_i)                          the value the memory currently holds for k_i
    W_i = W_{i−1} + β_i (v_i − v̄_i) ⊗ φ(k_i)       move it toward v_i, at learning rate β_i = σ(W_β x_i)
    y_i = W_i φ(q_i)                              read with the query          (W_0 = 0, W is d_v × F)

φ is normalised by the sum of its components, φ(x) / Σ_j φ(x)_j, in place of linear attention's
denominator. The sum rule W_i = W_{i−1} + v_i ⊗ φ(k_i) (linear attention) only adds, so two keys that
overlap interfere; the delta rule first removes what k_i retrieves.

    "equation"  the update above as a NumPy loop over time, vectorised over the batch (O(F·d_v) state)
    "scan"      the same loop in Numba (refattn.kernels.delta_scan)
    "chunk"     by chunks in the WY/UT form, the state carried across chunks by matrix products (refattn.linear.chunk)
    "auto"      "equation": it never forms an n × n array

For fixed q, k and β the output is linear in V: y = A V with an effective n × n matrix A (Notes).
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
from ..draws import given_or_drawn, optional_rng
from ..kernels import kernel_rows
from ..mechanism import Mechanism
from ._common import (
    causal_recurrence,
    check_denominators,
    check_feature_counts,
    check_feature_map,
    check_recurrence_inputs,
    drawn_parameters,
    features,
    sigmoid,
)
from .chunk import check_chunk_size, delta_rule_chunks
from .linear_elu import elu_feature_map

__all__ = ["DeltaBetaParams", "delta_beta", "delta_rule_attention", "init_delta_beta"]

METHODS = ("auto", "equation", "scan", "chunk")


@dataclass(frozen=True)
class DeltaBetaParams:
    r"""Parameters of the learning rate :math:`\beta_i = \sigma(w \cdot x_i + b)`.

    Attributes
    ----------
    w : (d,) ndarray
        Weights, the row :math:`W_\beta`.
    b : float
        Bias (the paper has none: 0).
    """

    w: NDArray
    b: float = 0.0

    def __post_init__(self) -> None:
        if np.ndim(self.w) != 1:
            raise ValueError(f"w must be a vector (d,), got shape {np.shape(self.w)}")
        if np.ndim(self.b) != 0:
            raise ValueError(f"b must be a scalar, got shape {np.shape(self.b)}")


def init_delta_beta(rng, d: int) -> DeltaBetaParams:
    r"""Draw the learning-rate weights :math:`W_\beta` (Glorot uniform), bias 0.

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw.
    d : int
        Width of the input :math:`x_i`.

    Returns
    -------
    DeltaBetaParams

    Notes
    -----
    :math:`W_\beta` is one column of a Glorot-uniform matrix, :math:`U(\pm\sqrt{6/(d + 1)})`.
    The paper's :math:`\beta_i = \sigma(W_\beta x_i)` has no bias, nor has the official code (its
    fused ``qkvb_net`` projection is built with ``bias=False``), so ``b = 0``.

    Examples
    --------
    >>> p = init_delta_beta(0, 8)
    >>> p.w.shape, p.b
    ((8,), 0.0)
    """
    rng = as_rng(rng)
    d = check_positive_int("d", d)
    return DeltaBetaParams(w=glorot(rng, d, 1)[:, 0], b=0.0)


def delta_beta(x: ArrayLike, w: ArrayLike, b: float | ArrayLike = 0.0) -> NDArray:
    r"""The delta rule's learning rate, :math:`\beta_i = \sigma(w \cdot x_i + b)`, for every step.

    Parameters
    ----------
    x : (..., n, d) array_like
        Inputs :math:`x_i`.
    w : (d,) array_like
        Weights :math:`W_\beta`.
    b : float, default 0.0
        Bias (0 in the paper).

    Returns
    -------
    beta : (..., n) ndarray
        Values in [0, 1].

    Examples
    --------
    >>> delta_beta(np.zeros((2, 3)), np.ones(3))
    array([0.5, 0.5])
    """
    x = as_float("x", x, min_ndim=1)
    w = as_float("w", w)
    b = as_float("b", b)
    if w.ndim != 1 or w.shape[0] != x.shape[-1]:
        raise ValueError(f"w must have shape (d,) = ({x.shape[-1]},) to match x of shape {x.shape}, "
                         f"got shape {w.shape}")
    if b.ndim != 0:
        raise ValueError(f"b must be a scalar, got shape {b.shape}")
    return sigmoid(x @ w + b)                                     # (..., n)  σ(W_β x_i + b)


def delta_rule_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    beta: ArrayLike | None = None,
    feature_map: Callable[[NDArray], NDArray] = elu_feature_map,
    *,
    normalize: bool = True,
    method: str = "auto",
    return_weights: bool = False,
    chunk_size: int | None = None,
    causal: bool | str = True,
    rng: np.random.Generator | int | None = None,
) -> NDArray | tuple[NDArray, NDArray]:
    r"""Causal fast-weight memory updated by the delta rule (Schlag et al., 2021).

    .. math::

        \bar v^{(i)} = W^{(i-1)} \phi(k^{(i)}), \qquad
        W^{(i)} = W^{(i-1)} + \beta^{(i)} \big(v^{(i)} - \bar v^{(i)}\big) \otimes \phi(k^{(i)}), \qquad
        y^{(i)} = W^{(i)} \phi(q^{(i)})

    with :math:`W^{(0)} = 0` (:math:`d_v \times F`) and, by default, every feature vector
    normalised by its sum, :math:`\phi(x) \leftarrow \phi(x) / \sum_j \phi(x)_j`. Causal
    self-attention: step *i* writes token *i*, then reads.

    Parameters
    ----------
    q : (..., n, d) array_like
        Queries :math:`q^{(i)}`.
    k : (..., m, d) array_like
        Keys :math:`k^{(i)}` (as many as queries, m = n, unless ``causal="bottom-right"``).
    v : (..., m, d_v) array_like
        Values :math:`v^{(i)}`.
    beta : (..., m) array_like, optional
        Learning rates :math:`\beta^{(i)} \in [0, 1]`, e.g. from :func:`delta_beta`. Explicit, so
        that another implementation can be fed the same rates. Default: :math:`\sigma(k^{(i)} \cdot w)`
        with *w* drawn from ``rng`` by :func:`init_delta_beta`.
    feature_map : callable, default :func:`~refattn.linear.elu_feature_map`
        :math:`\phi`, mapping ``(..., n, d)`` to ``(..., n, F)`` real features, F >= 1 (ELU + 1,
        DPFP, FAVOR+ ...).
    normalize : bool, default True
        Divide :math:`\phi(q)` and :math:`\phi(k)` by the sum of their components, as the paper and
        the official code do. ``False`` uses :math:`\phi` as it is.
    method : {"auto", "equation", "scan", "chunk"}, default "auto"
        "equation": the update as a NumPy loop over time, vectorised over the batch. "scan": the
        same loop in Numba. "chunk": by chunks of ``chunk_size`` steps, each chunk's product of
        updates in the WY/UT form and the memory carried across chunks by matrix products
        (:mod:`refattn.linear.chunk`). Both take :math:`O(n F d_v)` time and :math:`O(F d_v)` memory, so
        "auto" is "equation" at every size.
    return_weights : bool, default False
        Also return the effective matrix *A* with ``out = A @ v`` (Notes;
        :class:`~refattn.common.MemoryBudgetError` before allocating if it exceeds the memory
        budget).
    chunk_size : int, optional
        Steps per chunk of ``method="chunk"`` (default :data:`~refattn.linear.chunk.DEFAULT_CHUNK_SIZE`).
    causal : {True, "top-left", "bottom-right"}, default True
        A causal recurrence: True (n = m), or "bottom-right", the n queries as the last n of the m
        positions (decoding with the memory of the first m − n).
    rng : numpy.random.Generator or int, optional
        Draws the rates' weights when ``beta`` is not given.

    Returns
    -------
    out : (..., n, d_v) ndarray
    weights : (..., n, m) ndarray
        Only if ``return_weights``: lower triangular; rows need not sum to 1 nor be non-negative
        (the delta rule subtracts what it retrieves).

    Raises
    ------
    ValueError
        If the shapes do not fit, q and k differ in length, a rate lies outside [0, 1], the map
        gives no feature (F = 0) or different F for q and k, or an option is unknown.
    TypeError
        If an input is not a real floating-point array, ``normalize`` is not a bool, or
        ``feature_map`` is not callable or gives non-real features.
    ZeroDivisionError
        If ``normalize`` and some :math:`\sum_j \phi(x)_j` is exactly 0 (e.g. DPFP of a zero vector).

    Notes
    -----
    **Effective attention matrix.** Write :math:`\phi_i = \phi(k^{(i)})`. The update is
    :math:`W^{(i)} = W^{(i-1)}(I - \beta^{(i)}\phi_i\phi_i^\top) + \beta^{(i)} v^{(i)}\phi_i^\top`,
    so by induction from :math:`W^{(0)} = 0`

    .. math::

        W^{(i)} = \sum_{j \le i} \beta^{(j)}\, v^{(j)}\, \phi_j^\top P_{j+1:i}, \qquad
        P_{j+1:i} = (I - \beta^{(j+1)}\phi_{j+1}\phi_{j+1}^\top)\cdots(I - \beta^{(i)}\phi_i\phi_i^\top),

    and :math:`y^{(i)} = \sum_{j \le i} A_{ij} v^{(j)}` with
    :math:`A_{ij} = \beta^{(j)}\,\phi_j^\top P_{j+1:i}\,\phi(q^{(i)})` (:math:`A_{ij} = 0` for
    :math:`j > i`). *A* depends on *q*, *k*, *β* only: the layer is linear in *V* but *A* is not a
    fixed kernel of (q_i, k_j), as every later key rotates what earlier ones wrote. Row *i* of *A*
    is the output of the same recurrence fed with the one-hot values :math:`v^{(j)} = e_j`, which
    is how ``return_weights`` computes it (:math:`O(n^2 F)`). The sum rule
    :math:`W^{(i)} = W^{(i-1)} + v^{(i)} \otimes \phi_i` has :math:`P = I` and
    :math:`A_{ij} = \phi_j^\top \phi(q^{(i)})`, unnormalised causal linear attention.

    **What one write does.** :math:`W^{(i)}\phi_i = \bar v^{(i)} + \beta^{(i)}\|\phi_i\|_2^2
    (v^{(i)} - \bar v^{(i)})`: reading with the key just written moves from the old value toward
    the new one by the fraction :math:`\beta^{(i)}\|\phi_i\|_2^2`, and returns :math:`v^{(i)}`
    exactly, whatever the memory held, iff :math:`\beta^{(i)}\|\phi_i\|_2^2 = 1`. With the sum
    normalisation and :math:`\phi \ge 0`, :math:`\|\phi_i\|_2^2 \le (\sum_j \phi_{i,j})^2 = 1`, with
    equality only for a one-hot :math:`\phi_i`; so with :math:`\beta \le 1` the exact overwrite
    needs :math:`\beta = 1` and a one-hot feature vector (DPFP's sparse features come close), and a
    first write into the empty memory reads back :math:`\beta\|\phi_i\|_2^2\, v^{(i)}`.
    :math:`\beta^{(i)} = 0` leaves the memory unchanged, so that step is invisible to every later
    one; :math:`\beta \equiv 0` gives :math:`W \equiv 0` and a zero output.

    **Paper versus official code.** The official code (IDSIA/lmtool-fwp,
    ``src/utils/cuda_fast_weight_layer.py``) normalises both keys and queries by their sum ("crucial
    for stable training"), skips the attention denominator by default
    (``skip_attn_normalization=True``), and multiplies the output by :math:`1/\sqrt{d_\text{head}}`,
    a constant the output projection absorbs: multiply ``out`` by it to compare. Its CUDA kernel
    (``fast_weight_cuda.cu``) computes, per step, ``v_old = W k``, ``W += k ⊗ β(v − v_old)``,
    ``out = W q``, the order used here.

    References
    ----------
    .. [1] I. Schlag, K. Irie, J. Schmidhuber, "Linear Transformers Are Secretly Fast Weight
       Programmers", ICML 2021, arXiv:2102.11174v3, §4.2 (the delta update rule with a dynamic
       learning rate β) and §4 (normalising φ by its sum); official code github.com/IDSIA/lmtool-fwp.

    Examples
    --------
    >>> from refattn.linear import elu_feature_map
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 6, 4))
    >>> beta = rng.uniform(size=6)
    >>> out, A = delta_rule_attention(q, k, v, beta, elu_feature_map, return_weights=True)
    >>> bool(np.allclose(A @ v, out)), bool(np.allclose(np.triu(A, 1), 0.0))
    (True, True)
    >>> float(np.abs(delta_rule_attention(q, k, v, np.zeros(6), elu_feature_map)).max())   # β ≡ 0: W stays 0
    0.0
    """
    check_choice("method", method, METHODS)
    normalize = check_bool("normalize", normalize)
    check_bool("return_weights", return_weights)
    chunk_size = check_chunk_size(chunk_size)
    check_feature_map(feature_map, "feature_map")
    q, k, v, _ = checked_qkv(q, k, v)
    rng = optional_rng(rng)

    def run(q_all):
        b = given_or_drawn("delta_rule", "beta", beta, rng, lambda r: _drawn_beta(r, k),
                           what="the parameters of its beta")
        return _delta_rule(q_all, k, v, b, feature_map, normalize, method, return_weights, chunk_size)

    return causal_recurrence(run, q, k, causal, "delta_rule_attention", return_weights)


def _drawn_beta(rng: np.random.Generator, k: NDArray) -> NDArray:
    """σ(k·w + b), (..., m), with the weights drawn by :func:`init_delta_beta` over k's d_k features."""
    params = drawn_parameters("delta_rule_attention", "beta", k, rng, init_delta_beta)
    return delta_beta(k, params.w, params.b)


def _delta_rule(q, k, v, beta, feature_map, normalize, method, return_weights, chunk_size):
    """The fast-weight recurrence over one sequence (n = m)."""
    q, k, v, beta, batch = check_recurrence_inputs(q, k, v, beta, "beta")
    n = q.shape[-2]
    if return_weights:
        check_fits("the weights (return_weights=True)", (*batch, n, n))
    phi_q, phi_k = features(feature_map, q, "q"), features(feature_map, k, "k")
    check_feature_counts(phi_q, phi_k, "feature_map", "feature_map")
    phi_q, phi_k = _normalized(phi_q, "q", normalize), _normalized(phi_k, "k", normalize)

    if method in ("auto", "equation"):
        out = _delta_loop(phi_q, phi_k, v, beta)                   # (..., n, d_v)
    elif method == "chunk":
        out = delta_rule_chunks(phi_q, phi_k, v, beta, batch, chunk_size)
    else:
        out = _scan(phi_q, phi_k, v, beta, batch)
    if not return_weights:
        return out
    one_hot = np.eye(n)                                            # (n, n)  v^{(j)} = e_j
    A = _delta_loop(phi_q, phi_k, one_hot, beta)                   # (..., n, n)  y^{(i)} = Σ_j A_ij e_j
    return out, A


def _delta_loop(phi_q: NDArray, phi_k: NDArray, v: NDArray, beta: NDArray) -> NDArray:
    """The update rule over time, vectorised over the leading (batch) axes."""
    batch = np.broadcast_shapes(phi_q.shape[:-2], phi_k.shape[:-2], v.shape[:-2], beta.shape[:-1])
    n, F, d_v = phi_q.shape[-2], phi_q.shape[-1], v.shape[-1]
    W = np.zeros((*batch, d_v, F))                                 # W^{(0)} = 0
    out = np.empty((*batch, n, d_v))
    for i in range(n):
        phi_k_i = phi_k[..., i, :]                                 # (..., F)
        v_bar = (W @ phi_k_i[..., None])[..., 0]                   # (..., d_v)  v̄ = W^{(i−1)} φ(k^{(i)})
        delta = beta[..., i, None] * (v[..., i, :] - v_bar)        # (..., d_v)  β^{(i)} (v^{(i)} − v̄)
        W = W + delta[..., :, None] * phi_k_i[..., None, :]        # (..., d_v, F)  W^{(i)} = W^{(i−1)} + δ ⊗ φ(k^{(i)})
        out[..., i, :] = (W @ phi_q[..., i, :, None])[..., 0]      # (..., d_v)  y^{(i)} = W^{(i)} φ(q^{(i)})
    return out


def _scan(phi_q, phi_k, v, beta, batch):
    from ..kernels.delta_scan import delta_rule_scan  # Numba loads on first use only

    n, d_v = phi_q.shape[-2], v.shape[-1]
    flat = [kernel_rows(x, batch, x.shape[-2:]) for x in (phi_q, phi_k, v)]     # (B, n, ·)
    b = kernel_rows(beta, batch, (n,))                                     # (B, n)
    out = np.empty((b.shape[0], n, d_v))
    delta_rule_scan(*flat, b, out)
    return out.reshape(*batch, n, d_v)


def _normalized(phi: NDArray, name: str, normalize: bool) -> NDArray:
    if not normalize:
        return phi
    total = phi.sum(axis=-1, keepdims=True)                        # Σ_j φ(x)_j
    check_denominators(total[..., 0], f"the sum of the features of {name}",
                       "φ/Σφ is undefined; use normalize=False or a feature map with a positive sum")
    return phi / total                                             # φ(x) / Σ_j φ(x)_j


RECORD = Mechanism.of(
    delta_rule_attention,
    id="delta_rule", title="Fast-weight delta rule", family="linear", section="4.2",
    paper='I. Schlag, K. Irie, J. Schmidhuber, 2021, "Linear Transformers Are Secretly Fast Weight Programmers", '
    "arXiv:2102.11174", equation=r"W_i = W_{i-1} + \beta_i (v_i - W_{i-1}\phi(k_i)) \otimes \phi(k_i)",
    time="O(n·F·d_v)", memory="O(F·d_v) state", kind="attention",
    methods=("equation", "scan", "chunk", "auto"), examples=({"normalize": False},), noncausal=False, causal=True,
    position_dependent=True, cross=False, normalized=False, nonnegative=False,
    figure="refattn.figures.linear:delta_rule",
    exact_options=None, exact_limit="none: an unnormalised fast-weight memory (β = 0 leaves it empty)",
    draws=("beta",),
)
