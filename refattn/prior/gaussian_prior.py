r"""Gaussian prior over positions: localness with a predicted centre and window (Yang et al., 2018; survey §4.5.1).

A Gaussian bias G, centred on a position P_i predicted from query i and as wide as a window D_i, is
added to the scores before the softmax:

    S = Q Kᵀ · scale + G                                          the scores, with the prior
    G_ij = −(j − P_i)² / (2 σ_i²),   σ_i = D_i / 2                  G_ij ≤ 0, 0 at the centre
    A = softmax(S),   out = A V

    P_i = I · sigmoid(v_pᵀ tanh(W_p q_i))                           the centre, in (0, I)
    D_i = I · sigmoid(v_dᵀ tanh(W_p q_i))                           window "query": W_p shared with P_i
    D   = I · sigmoid(u_dᵀ tanh(W_d K̄)),   K̄ = mean of the keys     window "layer": one D for every query
    D   = a number                                                  a fixed window

Adding G to the scores multiplies each query's softmax weights by the Gaussian density
exp(G_ij) and renormalises them. I is the input length: with n queries and m keys the centre
indexes the keys, so I = m (the number of keys); positions count from 1, j = 1 … m, as the
paper's h_1 … h_I, so P_i ∈ (0, I) runs from just before the first key to the last. In the code,
the key at index j (from 0) sits at position j + 1.

A fixed window of ``np.inf`` gives σ = ∞ and G = 0 (−0.0, exactly), which is softmax attention.

Causal use (the paper gives no rule for it): query i reads only the I_i keys it may see, so its
length is I_i (i + 1 for ``causal=True``, i + 1 + m − n bottom-right) and its layer-specific K̄
is the running mean of those keys; row i then depends on q_i and keys 1 … I_i alone, and decoding
with a key/value cache reproduces the full causal computation.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.budget import check_fits
from ..common.checks import (
    as_float,
    as_rng,
    broadcast_batch,
    causal_alignment,
    check_bool,
    check_choice,
    check_scale,
    checked_qkv,
    default_scale,
)
from ..common.init import glorot
from ..common.ints import check_non_negative_int, check_positive_int
from ..core.causal_mask import causal_mask
from ..core.sdpa import scaled_dot_product_attention
from ..draws import given_or_drawn, optional_rng
from ..linear._common import sigmoid
from ..mechanism import Mechanism

__all__ = ["GaussianPriorParams", "gaussian_prior_attention", "gaussian_prior_bias", "init_gaussian_prior",
           "predict_gaussian_prior"]

YANG = ('B. Yang, Z. Tu, D. F. Wong, F. Meng, L. S. Chao, T. Zhang, 2018, "Modeling Localness for Self-Attention '
        'Networks", EMNLP 2018, arXiv:1810.10182')
WINDOWS = ("query", "layer")
METHODS = ("equation", "blocked", "auto")


@dataclass(frozen=True, eq=False)
class GaussianPriorParams:
    r"""The predictors of the centre and the window; weights act on the right (``q @ w_p``).

    Attributes
    ----------
    w_p : (d_k, h) ndarray
        :math:`W_p`, read by the centre and the query-specific window (the paper's
        :math:`W_p q_i` is ``q_i @ w_p`` here).
    v_p : (h,) ndarray
        :math:`v_p` (the paper's :math:`U_p`): the centre's :math:`p_i = v_p^\top \tanh(W_p q_i)`.
    v_d : (h,) ndarray
        :math:`v_d` (the paper's :math:`U_d` of this window): the query-specific window's
        :math:`z_i = v_d^\top \tanh(W_p q_i)`.
    w_d : (d_k, h) ndarray
        :math:`W_d`, read by the layer-specific window from the mean key :math:`\bar K`.
    u_d : (h,) ndarray
        :math:`u_d` (the paper's :math:`U_d` of this window): the layer-specific window's
        :math:`z = u_d^\top \tanh(W_d \bar K)`.
    """

    w_p: NDArray
    v_p: NDArray
    v_d: NDArray
    w_d: NDArray
    u_d: NDArray

    def __post_init__(self) -> None:
        for name in ("w_p", "v_p", "v_d", "w_d", "u_d"):
            object.__setattr__(self, name, as_float(name, getattr(self, name)))
        for name in ("w_p", "w_d"):
            if getattr(self, name).ndim != 2:
                raise ValueError(f"{name} must be a (d_k, h) matrix, got shape {getattr(self, name).shape}")
        if self.w_d.shape != self.w_p.shape:
            raise ValueError(f"w_d has shape {self.w_d.shape} but w_p has shape {self.w_p.shape} (both (d_k, h))")
        h = self.w_p.shape[1]
        for name in ("v_p", "v_d", "u_d"):
            if getattr(self, name).shape != (h,):
                raise ValueError(f"{name} must have shape (h,) = ({h},) to match w_p {self.w_p.shape}, got shape "
                                 f"{getattr(self, name).shape}")


def init_gaussian_prior(rng, d_k: int, hidden: int | None = None) -> GaussianPriorParams:
    r"""Draw the predictors of the centre and the window (Glorot/Xavier uniform).

    .. math::

        W_p, W_d \sim \mathcal{U}\Big(\pm\sqrt{6/(d_k + h)}\Big)^{d_k \times h}, \qquad
        v_p, v_d, u_d \sim \mathcal{U}\Big(\pm\sqrt{6/(h + 1)}\Big)^{h}

    Every predictor is drawn, whatever window is used later, so one draw serves every option.

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw, in the order w_p, v_p, v_d, w_d, u_d (a vector drawn as an (h, 1) matrix).
    d_k : int
        Width of the queries and keys.
    hidden : int, optional
        h, the width of the tanh layer; default d_k (the paper's :math:`W_p \in \mathbb{R}^{d \times d}`).

    Returns
    -------
    GaussianPriorParams

    Notes
    -----
    The paper states no initialisation; Glorot uniform is the one :func:`refattn.common.glorot`
    gives every learned projection in this package.

    Examples
    --------
    >>> params = init_gaussian_prior(0, 8)
    >>> params.w_p.shape, params.v_p.shape, params.u_d.shape
    ((8, 8), (8,), (8,))
    """
    rng = as_rng(rng)
    d_k = check_non_negative_int("d_k", d_k)
    h = max(d_k, 1) if hidden is None else check_positive_int("hidden", hidden)
    w_p = glorot(rng, d_k, h)
    v_p, v_d = glorot(rng, h, 1)[:, 0], glorot(rng, h, 1)[:, 0]
    w_d = glorot(rng, d_k, h)
    u_d = glorot(rng, h, 1)[:, 0]
    return GaussianPriorParams(w_p, v_p, v_d, w_d, u_d)


def _check_window(window):
    """The window checked: "query", "layer", or a number > 0 (``np.inf`` allowed) as a float."""
    if isinstance(window, str):
        check_choice("window", window, WINDOWS)
        return window
    if isinstance(window, (bool, np.bool_)) or not isinstance(window, (int, float, np.integer, np.floating)):
        raise TypeError(f"window must be 'query', 'layer' or a number D > 0, got {type(window).__name__}")
    if not window > 0:                                             # NaN fails too
        raise ValueError(f"window must be 'query', 'layer' or a number D > 0 (np.inf: no prior), got {window!r}")
    return float(window)


def _lengths(n: int, m: int, alignment: str | None) -> NDArray:
    """(n,) I_i: the number of keys query i may see (m without a causal mask)."""
    if alignment is None:
        return np.full(n, m, dtype=np.int64)
    return causal_mask(n, m, causal=alignment).sum(axis=-1)


def _check_params(params, d_k: int) -> None:
    if not isinstance(params, GaussianPriorParams):
        raise TypeError(f"params must be a GaussianPriorParams (init_gaussian_prior), got {type(params).__name__}")
    if params.w_p.shape[0] != d_k:
        raise ValueError(f"params has w_p of shape {params.w_p.shape}, but q and k have d_k={d_k}: expected "
                         f"({d_k}, h)")


def predict_gaussian_prior(q: ArrayLike, k: ArrayLike, params: GaussianPriorParams, *, window="query",
                           causal: bool | str = False) -> tuple[NDArray, NDArray]:
    r"""The centres :math:`P_i` and windows :math:`D_i` predicted for each query.

    .. math::

        P_i = I_i\,\operatorname{sigmoid}\big(v_p^\top \tanh(W_p q_i)\big), \qquad
        D_i = \begin{cases}
            I_i\,\operatorname{sigmoid}\big(v_d^\top \tanh(W_p q_i)\big) & \text{"query"} \\
            I_i\,\operatorname{sigmoid}\big(u_d^\top \tanh(W_d \bar K_i)\big) & \text{"layer"} \\
            D & \text{a number}
        \end{cases}

    Parameters
    ----------
    q : (..., n, d_k) array_like
        Queries.
    k : (..., m, d_k) array_like
        Keys (their mean is read by the "layer" window; their number m is the length I).
    params : GaussianPriorParams
        The predictors (:func:`init_gaussian_prior`).
    window : {"query", "layer"} or float, default "query"
        What the window reads: the query ("query", the paper's query-specific window, with
        :math:`W_p` shared with the centre), the mean of the keys ("layer", one window for every
        query of the layer), or nothing (a fixed window D > 0; ``np.inf`` is no prior at all).
    causal : {False, True, "top-left", "bottom-right"}, default False
        Without a causal mask :math:`I_i = m` and :math:`\bar K_i` is the mean of every key. With
        one, :math:`I_i` is the number of keys query *i* may see and :math:`\bar K_i` their mean
        (0 for a query that sees none).

    Returns
    -------
    P : (..., n) ndarray
        The centres, in :math:`(0, I_i)`, on positions that count from 1.
    D : (..., n) ndarray
        The windows (σ_i = D_i / 2).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k = rng.standard_normal((2, 6, 4))
    >>> P, D = predict_gaussian_prior(q, k, init_gaussian_prior(1, 4))
    >>> bool(np.all((0 < P) & (P < 6))), bool(np.all((0 < D) & (D < 6)))
    (True, True)
    """
    q, k = as_float("q", q, min_ndim=2), as_float("k", k, min_ndim=2)
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q has d_k={q.shape[-1]} but k has d_k={k.shape[-1]} (q shape {q.shape}, k shape {k.shape})")
    broadcast_batch({"q": q.shape[:-2], "k": k.shape[:-2]})
    _check_params(params, q.shape[-1])
    window = _check_window(window)
    return _predict(q, k, params, window, causal_alignment(causal))


def _predict(q, k, params, window, alignment):
    """(P, D) for checked inputs."""
    n, m = q.shape[-2], k.shape[-2]
    I = _lengths(n, m, alignment).astype(np.float64)              # (n,)  I_i
    with np.errstate(invalid="ignore", over="ignore"):             # Inf in q_i: NaN in row i only
        hidden = np.tanh(q @ params.w_p)                           # (..., n, h)  tanh(W_p q_i)
        P = I * sigmoid(hidden @ params.v_p)                       # (..., n)  P_i = I·sigmoid(v_pᵀ tanh(W_p q_i))
        if window == "query":
            D = I * sigmoid(hidden @ params.v_d)                   # (..., n)  D_i = I·sigmoid(v_dᵀ tanh(W_p q_i))
        elif window == "layer":
            K_bar = _mean_keys(k, I, alignment)                    # (..., n, d_k)  K̄ (K̄_i causal)
            D = I * sigmoid(np.tanh(K_bar @ params.w_d) @ params.u_d)   # (..., n)  I·sigmoid(u_dᵀ tanh(W_d K̄))
        else:
            D = np.full(np.shape(P), window)                       # (..., n)  D fixed
    return P, D


def _mean_keys(k: NDArray, I: NDArray, alignment: str | None) -> NDArray:
    """K̄ as (..., 1, d_k) (the mean of every key), or (..., n, d_k) causal (the mean of the I_i first keys)."""
    if alignment is None:
        return k.mean(axis=-2, keepdims=True) if k.shape[-2] else np.zeros((*k.shape[:-2], 1, k.shape[-1]))
    running = np.cumsum(k, axis=-2)                                # (..., m, d_k)  Σ_{j ≤ t} k_j
    seen = I.astype(np.int64)
    total = np.take(running, np.maximum(seen - 1, 0), axis=-2) if k.shape[-2] else \
        np.zeros((*k.shape[:-2], len(I), k.shape[-1]))
    return np.where(seen[:, None] > 0, total / np.maximum(I, 1.0)[:, None], 0.0)


def gaussian_prior_bias(P: ArrayLike, D: ArrayLike, m: int) -> NDArray:
    r"""The Gaussian prior :math:`G_{ij} = -(j - P_i)^2 / (2\sigma_i^2)`, :math:`\sigma_i = D_i / 2`, over m keys.

    Parameters
    ----------
    P : (..., n) array_like
        Centres, on positions that count from 1 (the key at index j from 0 sits at j + 1).
    D : (..., n) array_like
        Windows, > 0; ``np.inf`` gives G = 0 (−0.0).
    m : int
        Number of keys.

    Returns
    -------
    G : (..., n, m) ndarray
        ≤ 0, largest (0) where the position equals the centre.

    Examples
    --------
    >>> gaussian_prior_bias(np.array([2.0]), np.array([2.0]), 4)    # σ = 1: −(j − 2)²/2 at j = 1 … 4
    array([[-0.5, -0. , -0.5, -2. ]])
    >>> gaussian_prior_bias(np.array([2.0]), np.array([np.inf]), 3)
    array([[-0., -0., -0.]])
    """
    P, D = as_float("P", P, min_ndim=1), as_float("D", D, min_ndim=1)
    m = check_non_negative_int("m", m)
    broadcast_batch({"P": P.shape, "D": D.shape})
    j = np.arange(1, m + 1, dtype=np.float64)                      # (m,)  positions 1 … m
    sigma = D[..., None] / 2.0                                     # (..., n, 1)  σ_i = D_i/2
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):   # σ = 0: a query that sees no key
        return -((j - P[..., None]) ** 2) / (2.0 * sigma ** 2)     # (..., n, m)  G_ij = −(j − P_i)²/(2σ_i²)


def gaussian_prior_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    params: GaussianPriorParams | None = None,
    rng: np.random.Generator | int | None = None,
    window="query",
    causal: bool | str = False,
    scale: float | None = None,
    method: str = "auto",
    return_weights: bool = False,
) -> NDArray | tuple[NDArray, NDArray]:
    r"""Softmax attention with a predicted Gaussian prior over positions added to the scores.

    .. math::

        \operatorname{softmax}\Big(\frac{QK^\top}{\sqrt{d_k}} + G\Big) V, \qquad
        G_{ij} = -\frac{(j - P_i)^2}{2\sigma_i^2}, \quad \sigma_i = \frac{D_i}{2}, \quad
        P_i = I\,\operatorname{sigmoid}\big(v_p^\top \tanh(W_p q_i)\big)

    Parameters
    ----------
    q : (..., n, d_k) array_like
        Queries.
    k : (..., m, d_k) array_like
        Keys.
    v : (..., m, d_v) array_like
        Values.
    params : GaussianPriorParams, optional
        The predictors of the centre and the window (:func:`init_gaussian_prior`); drawn from ``rng``
        when not given.
    rng : numpy.random.Generator or int, optional
        Draws ``params`` with :func:`init_gaussian_prior` (h = d_k); unused when ``params`` is given.
    window : {"query", "layer"} or float, default "query"
        The window :math:`D_i` (:func:`predict_gaussian_prior`): predicted from the query
        ("query"), from the mean of the keys ("layer"), or a fixed number D > 0 (``np.inf``: G = 0,
        softmax attention).
    causal : {False, True, "top-left", "bottom-right"}, default False
        The decoder's mask, combined with the prior by selection (a key query *i* may not see gets
        no weight whatever its G). Query *i*'s length :math:`I_i` is the number of keys it may see
        and its "layer" window reads their mean (see Notes).
    scale : float, optional
        Multiplier of :math:`QK^\top`; default :math:`1/\sqrt{d_k}`. G is added unscaled.
    method : {"equation", "blocked", "auto"}, default "auto"
        :func:`~refattn.scaled_dot_product_attention`'s path over the scores plus G (G itself is
        n × m whatever the path). The weights, when asked for, come from "equation".
    return_weights : bool, default False
        Also return the (..., n, m) weights softmax(S + G).

    Returns
    -------
    out : (..., n, d_v) ndarray
    weights : (..., n, m) ndarray
        Only if ``return_weights``.

    Notes
    -----
    **Where each choice comes from.** G, σ_i = D_i/2 and the centre's predictor are the paper's (§3)
    and the survey's (§4.5.1); the centre reads the query alone (the paper offers no other input
    for it). The three windows are the paper's: fixed (one D for every query), layer-specific
    (one D from the mean of the layer's keys, its own :math:`W_d`) and query-specific (from
    :math:`q_i`, sharing :math:`W_p` with the centre). I is the paper's input length, the
    sequence both queries and keys come from; with n ≠ m the centre indexes the keys, so I = m.
    Positions count from 1 (the paper's :math:`h_1 \dots h_I`), so :math:`P_i \in (0, I)` ends at
    the last key. The paper applies the prior to the lower layers only; this is one head (a
    leading axis of q, k, v shares one ``params``).

    **Causal rule (decided here; the paper gives none).** Query *i* uses :math:`I_i`, the number
    of keys it may see, as its length, and its layer-specific window reads
    :math:`\bar K_i = \frac{1}{I_i}\sum_{j \le I_i} k_j`, the running mean of those keys. Row *i*
    then depends on :math:`q_i` and the keys it may see alone: later keys change nothing, and
    decoding with a key/value cache (``causal="bottom-right"``, m growing by one per step)
    reproduces the full causal computation row by row. With I = m, or the mean of every key, each
    decoding step would predict another centre and window than training did at the same position.

    **Exact limit.** A fixed window ``np.inf`` gives σ = ∞ and G = −0.0 everywhere: exactly
    softmax attention (adding −0.0 changes no score).

    Complexity: O(n·m·(d_k + d_v)) time for the attention, O(n·h·d_k) (+ O(n·h·d_k) "layer") for
    the predictors, O(n·m) memory for G.

    References
    ----------
    .. [1] B. Yang, Z. Tu, D. F. Wong, F. Meng, L. S. Chao, T. Zhang, "Modeling Localness for
       Self-Attention Networks", EMNLP 2018, arXiv:1810.10182v1, §3.
    .. [2] T. Lin et al., "A Survey of Transformers", arXiv:2106.04554, §4.5.1.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 8, 4))
    >>> out, A = gaussian_prior_attention(q, k, v, rng=1, return_weights=True)
    >>> bool(np.allclose(A.sum(axis=-1), 1.0)), bool(np.allclose(A @ v, out))
    (True, True)
    >>> no_prior = gaussian_prior_attention(q, k, v, rng=1, window=np.inf)
    >>> bool(np.allclose(no_prior, scaled_dot_product_attention(q, k, v), rtol=1e-12, atol=1e-12))
    True
    """
    check_choice("method", method, METHODS)
    return_weights = check_bool("return_weights", return_weights)
    rng = optional_rng(rng)
    q, k, v, batch = checked_qkv(q, k, v)
    alignment = causal_alignment(causal)
    window = _check_window(window)
    n, m, d_k = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = default_scale(d_k) if scale is None else check_scale(scale)
    params = given_or_drawn("gaussian_prior", "params", params, rng, lambda r: init_gaussian_prior(r, d_k),
                            what="its predictors")
    _check_params(params, d_k)
    check_fits("the Gaussian prior G", (*batch, n, m))
    P, D = _predict(q, k, params, window, alignment)               # (..., n), (..., n)
    G = gaussian_prior_bias(P, D, m)                               # (..., n, m)
    if not return_weights:
        return scaled_dot_product_attention(q, k, v, G, causal=causal, scale=scale, method=method)
    out, A = scaled_dot_product_attention(q, k, v, G, causal=causal, scale=scale, method="equation",
                                          return_weights=True)     # softmax(QKᵀ·scale + G), its V
    if method == "blocked":
        out = scaled_dot_product_attention(q, k, v, G, causal=causal, scale=scale, method="blocked")
    return out, A


RECORD = Mechanism.of(
    gaussian_prior_attention,
    id="gaussian_prior", title="Gaussian prior with predicted centre and window (localness)", family="prior",
    section="4.5.1", paper=YANG,
    equation=r"\operatorname{softmax}\!\Big(\frac{QK^\top}{\sqrt{d_k}} + G\Big) V,\quad "
             r"G_{ij} = -\frac{(j - P_i)^2}{2\sigma_i^2},\ \sigma_i = \frac{D_i}{2},\ "
             r"P_i = I\,\operatorname{sigmoid}(v_p^\top \tanh(W_p q_i))",
    time="O(n·m·d)", memory="O(n·m)", kind="attention", methods=METHODS, causal=True, position_dependent=True,
    examples=({"window": "layer"}, {"window": 3.0}),
    figure="refattn.figures.gaussian_prior:gaussian_prior",
    exact_options={"window": np.inf}, exact_limit="a fixed window D = ∞ (σ → ∞, G = 0)",
    draws=("params",),
)
