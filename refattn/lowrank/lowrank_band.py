r"""Low-rank and band attention (Guo et al., 2019; survey §4.4.1): a low-rank module with small D_k plus a band module.

The self-attention matrix is decomposed into two modules, one for long-range, non-local interactions
and one for local dependencies:

    Q_r = Q W_q,  K_r = K W_k ∈ R^{· × D_k},  D_k small              the low-rank module's queries and keys
    S_low = Q_r K_rᵀ / √D_k                                          rank(S_low) ≤ D_k
    A_low = softmax(S_low)                                           over every key (causal: j ≤ i)
    A_band = softmax(Q Kᵀ / √d) restricted to |i − j| ≤ w            (causal: 0 ≤ i − j ≤ w)
    A = α A_low + (1 − α) A_band,   out = A V

A's rows sum to 1 and are >= 0. The low-rank constraint holds for the scores: rank(S_low) ≤ D_k, the
inductive bias of a small key width. The softmax acts entry by entry, so A_low itself is not of rank
≤ D_k in general (the exponential of a rank-D_k matrix is a sum of matrices of growing rank,
e^S = Σ_p S^{∘p}/p!, the p-th of rank ≤ C(D_k + p − 1, p)); its singular values fall off fast after
the first D_k (the figure shows them).

:func:`init_lowrank_band` draws the projections W_q, W_k (:class:`LowRankBandParams`), and
:func:`lowrank_band_attention` computes the two modules: the low-rank one by
:func:`~refattn.scaled_dot_product_attention` (dense, or the blocked kernel that never holds the
n × m scores), the band one by :func:`~refattn.sparse.sparse_attention` (dense, or the CSR kernel).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.checks import (
    as_float,
    as_rng,
    causal_alignment,
    check_bool,
    check_choice,
    check_scale,
    checked_qkv,
    default_scale,
)
from ..common.init import glorot
from ..common.ints import check_non_negative_int, check_positive_int
from ..core.sdpa import scaled_dot_product_attention
from ..draws import given_or_drawn, note_allowed, optional_rng
from ..mechanism import Mechanism, WhenDrawn
from ..sparse.attention import check_weights_fit, sparse_attention
from ..sparse.band import band_pattern

__all__ = ["LowRankBandParams", "init_lowrank_band", "lowrank_band_attention"]

GUO = ('Q. Guo, X. Qiu, X. Xue, Z. Zhang, 2019, "Low-Rank and Locality Constrained Self-Attention for Sequence '
       'Modeling", IEEE/ACM TASLP 27(12):2213-2222, doi:10.1109/TASLP.2019.2944078 (no arXiv version; in the '
       'survey, arXiv:2106.04554, §4.4.1)')
METHODS = ("equation", "blocked", "auto")
SDPA_METHOD = {"equation": "equation", "blocked": "blocked", "auto": "auto"}
BAND_METHOD = {"equation": "equation", "blocked": "csr", "auto": "auto"}


@dataclass(frozen=True, eq=False)
class LowRankBandParams:
    r"""The low-rank module's projections; weights act on the right (``q @ w_q``).

    Attributes
    ----------
    w_q, w_k : (d_k, D_k) ndarray
        :math:`W_q, W_k`: the module's queries :math:`Q W_q` and keys :math:`K W_k`, of the small
        width :math:`D_k` (the rank of its scores).
    """

    w_q: NDArray
    w_k: NDArray

    def __post_init__(self) -> None:
        for name in ("w_q", "w_k"):
            w = as_float(name, getattr(self, name))
            if w.ndim != 2 or w.shape[1] < 1:
                raise ValueError(f"{name} must be a (d_k, D_k) matrix with D_k >= 1, got shape {w.shape}")
            object.__setattr__(self, name, w)
        if self.w_k.shape != self.w_q.shape:
            raise ValueError(f"w_k has shape {self.w_k.shape} but w_q has shape {self.w_q.shape} (both (d_k, D_k))")

    @property
    def rank(self) -> int:
        """D_k, the width of the low-rank module's queries and keys."""
        return self.w_q.shape[1]


def init_lowrank_band(rng, d_k: int, rank: int) -> LowRankBandParams:
    r"""Draw the low-rank module's projections (Glorot/Xavier uniform).

    .. math::

        W_q, W_k \sim \mathcal{U}\Big(\pm\sqrt{6/(d_k + D_k)}\Big)^{d_k \times D_k}

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw, in the order w_q, w_k.
    d_k : int
        Width of the queries and keys.
    rank : int
        :math:`D_k`, the module's small key width, >= 1.

    Returns
    -------
    LowRankBandParams

    Examples
    --------
    >>> init_lowrank_band(0, 8, 2).w_q.shape
    (8, 2)
    """
    rng = as_rng(rng)
    d_k, rank = check_non_negative_int("d_k", d_k), check_positive_int("rank", rank)
    return LowRankBandParams(glorot(rng, d_k, rank), glorot(rng, d_k, rank))


def lowrank_band_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    window: int,
    rank: int | None = None,
    alpha: float = 0.5,
    params: LowRankBandParams | None = None,
    rng: np.random.Generator | int | None = None,
    causal: bool | str = False,
    scale: float | None = None,
    method: str = "auto",
    return_weights: bool = False,
) -> NDArray | tuple[NDArray, NDArray]:
    r"""Low-rank plus band attention: a softmax over low-rank scores and a softmax within a band, mixed.

    .. math::

        A = \alpha\, \operatorname{softmax}\Big(\frac{Q W_q (K W_k)^\top}{\sqrt{D_k}}\Big)
            + (1 - \alpha)\, \operatorname{softmax}_{|i - j| \le w}\Big(\frac{Q K^\top}{\sqrt{d_k}}\Big),
        \qquad \mathrm{out} = A V

    Parameters
    ----------
    q : (..., n, d_k) array_like
        Queries.
    k : (..., m, d_k) array_like
        Keys.
    v : (..., m, d_v) array_like
        Values.
    window : int
        w, a half-width: the band module sees keys ``i − w … i + w``, 2w + 1 of them (``i − w … i``
        when causal).
    rank : int, optional
        :math:`D_k`, the low-rank module's key width: required to draw ``params`` from ``rng``;
        with ``params``, their width (checked if given).
    alpha : float, default 0.5
        α in [0, 1], the low-rank module's share (0: the band module alone; 1: the low-rank one
        alone, the other is then not computed).
    params : LowRankBandParams, optional
        :math:`W_q, W_k` (:func:`init_lowrank_band`); drawn from ``rng`` when absent.
    rng : numpy.random.Generator or int, optional
        Draws ``params`` with :func:`init_lowrank_band` (unused when they are given).
    causal : {False, True, "top-left", "bottom-right"}, default False
        Both modules under the decoder's mask: query *i* sees keys ``j <= i`` (bottom-right: the n
        queries are the last n of the m positions, ``j <= i + m − n``).
    scale : float, optional
        Multiplier of the band module's scores; default :math:`1/\sqrt{d_k}`. The low-rank
        module's is :math:`1/\sqrt{D_k}`.
    method : {"equation", "blocked", "auto"}, default "auto"
        "equation": both modules dense (n × m scores). "blocked": the low-rank module by the
        blocked kernel of :func:`~refattn.scaled_dot_product_attention` and the band module by the
        CSR kernel, nothing n × m. "auto": each module's own "auto" (dense while it fits the memory
        budget and is small). The weights, when asked for, come from "equation" whatever the method.
    return_weights : bool, default False
        Also return A (n × m).

    Returns
    -------
    out : (..., n, d_v) ndarray
    weights : (..., n, m) ndarray
        Only if ``return_weights``.

    Notes
    -----
    **Choices made here.** The survey describes the mechanism as a decomposition of the self-attention
    matrix into a low-rank module with a small :math:`D_k` for long-range, non-local interactions and a
    band module for local dependencies. Here the decomposition is a sum of the two modules' attention
    matrices, weighted α and 1 − α so that A stays row-stochastic (α = ½ by default); each module has
    its own softmax; the band module reads the queries and keys as given, the low-rank module their
    projections to width :math:`D_k` (drawn parameters, one head). The causal form masks both modules
    with ``j <= i``; neither then depends on later tokens.

    **Exact limits.** α = 0 with w ≥ max(n, m) is softmax attention (the band covers every key).
    α = 1 with :math:`D_k = d_k` and :math:`W_q = W_k = I` is softmax attention; with both, any α is.

    Complexity: the low-rank module O(n·m·(D_k + d_v)) time, streamed (``method="blocked"``) in
    O((n + m)·(D_k + d_v)) memory; the band module O(n·w·d) time and O(n·w) memory.

    References
    ----------
    .. [1] Q. Guo, X. Qiu, X. Xue, Z. Zhang, "Low-Rank and Locality Constrained Self-Attention for
       Sequence Modeling", IEEE/ACM Trans. Audio, Speech and Language Processing 27(12):2213-2222,
       2019, doi:10.1109/TASLP.2019.2944078.
    .. [2] T. Lin et al., "A Survey of Transformers", arXiv:2106.04554, §4.4.1.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 10, 4))
    >>> out, A = lowrank_band_attention(q, k, v, window=1, rank=2, rng=1, return_weights=True)
    >>> bool(np.allclose(out, A @ v)), bool(np.allclose(A.sum(axis=-1), 1.0))
    (True, True)
    >>> identity = LowRankBandParams(np.eye(4), np.eye(4))
    >>> exact = lowrank_band_attention(q, k, v, window=10, params=identity)
    >>> bool(np.allclose(exact, scaled_dot_product_attention(q, k, v)))
    True
    """
    check_choice("method", method, METHODS)
    return_weights = check_bool("return_weights", return_weights)
    q, k, v, batch = checked_qkv(q, k, v)
    alignment = causal_alignment(causal)
    window = check_non_negative_int("window", window)
    alpha = _check_alpha(alpha)
    n, m, d_k = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = default_scale(d_k) if scale is None else check_scale(scale)
    if rank is not None:
        rank = check_positive_int("rank", rank)
    if params is None and rank is None:
        raise ValueError("lowrank_band draws params of width rank: pass rank= (D_k)")
    if params is not None and not isinstance(params, LowRankBandParams):
        raise TypeError(f"params must be a LowRankBandParams (init_lowrank_band), got {type(params).__name__}")
    if params is not None and (params.w_q.shape[0] != d_k or rank not in (None, params.rank)):
        raise ValueError(f"params has w_q of shape {params.w_q.shape}, but q has d_k={d_k}"
                         + ("" if rank is None else f" and rank={rank}") + f": expected ({d_k}, {rank or 'D_k'})")
    params = given_or_drawn("lowrank_band", "params", params, optional_rng(rng),
                            lambda r: init_lowrank_band(r, d_k, rank), what="its projections")
    if return_weights:
        check_weights_fit(batch, n, m)
    band = band_pattern(n, window, m=m, causal=alignment or False)
    if not return_weights:
        return _modules(q, k, v, params, band, alpha, alignment, scale, method)[0]
    out, A = _modules(q, k, v, params, band, alpha, alignment, scale, "equation", weights=True)
    if method == "blocked":
        out = _modules(q, k, v, params, band, alpha, alignment, scale, "blocked")[0]
    if alpha == 0.0 or alignment is not None:                      # the pairs a module of weight > 0 may weigh
        note_allowed(lambda: np.broadcast_to(band.to_mask() if alpha == 0.0 else _causal(n, m, alignment), A.shape))
    else:
        note_allowed(None)
    return out, A


def _check_alpha(alpha) -> float:
    if isinstance(alpha, (bool, np.bool_)) or not isinstance(alpha, (int, float, np.integer, np.floating)):
        raise TypeError(f"alpha must be a real number in [0, 1], got {type(alpha).__name__}")
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha!r}")
    return float(alpha)


def _causal(n: int, m: int, alignment: str) -> NDArray:
    """(n, m) j <= i (+ m − n bottom-right)."""
    return np.arange(m) <= np.arange(n)[:, None] + (m - n if alignment == "bottom-right" else 0)


def _modules(q, k, v, params, band, alpha, alignment, scale, method, *, weights=False):
    """``(out, A or None)``: α·(low-rank module) + (1 − α)·(band module), a module of weight 0 left out."""
    parts = []
    if alpha > 0.0:
        with np.errstate(invalid="ignore", over="ignore"):         # Inf in a row: NaN in that row only
            q_r, k_r = q @ params.w_q, k @ params.w_k              # (..., n, D_k), (..., m, D_k)  QW_q, KW_k
        parts.append((alpha, scaled_dot_product_attention(     # softmax(Q_r K_rᵀ/√D_k) V
            q_r, k_r, v, causal=alignment or False, scale=default_scale(params.rank), return_weights=weights,
            method=SDPA_METHOD[method])))
    if alpha < 1.0:
        result = sparse_attention(q, k, v, band, scale=scale, return_weights=weights,
                                  method=BAND_METHOD[method])      # softmax within the band, V
        if weights:
            np.copyto(result[1], 0.0, where=~band.to_mask())       # exact zeros off the band (a NaN row too)
        parts.append((1.0 - alpha, result))
    if len(parts) == 1:                                            # α = 0 or 1: that module alone, as it is
        return parts[0][1] if weights else (parts[0][1], None)
    (a, low), (b, local) = parts
    if not weights:
        return a * low + b * local, None
    return a * low[0] + b * local[0], a * low[1] + b * local[1]   # out, A = α A_low + (1 − α) A_band


RECORD = Mechanism.of(
    lowrank_band_attention, defaults={"window": 1, "rank": WhenDrawn("params", 2)},
    id="lowrank_band", title="Low-rank and band attention", family="lowrank", section="4.4.1", paper=GUO,
    equation=r"A = \alpha \operatorname{softmax}\!\Big(\frac{Q W_q (K W_k)^\top}{\sqrt{D_k}}\Big) + (1 - \alpha) "
             r"\operatorname{softmax}_{|i-j| \le w}\!\Big(\frac{Q K^\top}{\sqrt{d_k}}\Big), \quad D_k \ll d_k",
    time="O(n·m·(D_k + d_v) + n·w·d)", memory="O((n + m)·d + n·w)", kind="attention",
    methods=("equation", "blocked", "auto"), causal=True,
    position_dependent=True, examples=({"alpha": 0.2, "rank": 1}, {"window": 0, "rank": 3}),
    figure="refattn.figures.lowrank_band:lowrank_band",
    exact_options=lambda n, m: {"alpha": 0.0, "window": max(n, m)},
    exact_limit="α = 0 and w ≥ max(n, m) (the band alone), or α = 1 with D_k = d_k and W_q = W_k = I",
    draws=("params",),
)
