r"""How far an approximation's attention is from exact softmax attention, for one attention call.

Three numbers, each a function of the exact softmax weights :math:`A` (rows :math:`a_i`), the exact
output :math:`O = AV` and what the approximation returns (its output :math:`\tilde O`, its effective
weights :math:`\tilde A`, the pairs it computes):

- **output relative error** :math:`\lVert \tilde O - O \rVert_F / \lVert O \rVert_F` over the whole
  call (every batch element, head, query and channel);
- **attention mass kept**: the exact softmax mass on the pairs the approximation computes,
  :math:`\frac1N \sum_i \sum_{j \in \mathcal A_i} A_{ij}`, averaged over the N query rows (1 when it
  computes every pair);
- **row KL** :math:`\frac1N \sum_i \operatorname{KL}(a_i \,\Vert\, \tilde a_i) = \frac1N \sum_i
  \sum_j A_{ij} \log(A_{ij} / \tilde A_{ij})`, defined only where every row of :math:`\tilde A` is a
  distribution (entries >= 0, rows summing to 1). It is :math:`+\infty` for a row that gives zero weight
  to a pair the exact softmax weighs (every sparse pattern that drops a key: its mass kept says how much).

The relative error is a ratio of norms and the KL divergence is >= 0 (Gibbs' inequality); computed, a
KL of two nearly equal rows can land a little below 0 by round-off, and :func:`row_kl` returns 0 for
it (within a stated bound; beyond it, a bug, it raises).
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from ..common.checks import as_float

__all__ = ["ROW_SUM_TOLERANCE", "clamp_round_off", "is_row_distribution", "mass_kept", "relative_error", "row_kl"]

#: How far from 1 a row sum may be for the row to count as a distribution (float64 sums of at most a few
#: thousand terms each within a few units in the last place of 1 are off by far less).
ROW_SUM_TOLERANCE = 1e-9


def relative_error(approx: ArrayLike, exact: ArrayLike) -> float:
    r"""Output relative error :math:`\lVert \tilde O - O \rVert_F / \lVert O \rVert_F`.

    Parameters
    ----------
    approx, exact : array_like, same shape
        The approximation's output and the exact output.

    Returns
    -------
    float
        0 when both are zero; ``inf`` when only ``exact`` is; NaN when ``approx`` holds a NaN.

    Examples
    --------
    >>> relative_error([3.0, 4.0], [3.0, 0.0])                  # ‖(0, 4)‖ / ‖(3, 0)‖
    1.3333333333333333
    """
    approx, exact = as_float("approx", approx), as_float("exact", exact)
    if approx.shape != exact.shape:
        raise ValueError(f"approx and exact must have one shape, got approx {approx.shape} and exact {exact.shape}")
    num, den = float(np.linalg.norm((approx - exact).ravel())), float(np.linalg.norm(exact.ravel()))
    if den == 0.0:
        return 0.0 if num == 0.0 else np.inf
    return num / den


def mass_kept(exact_weights: ArrayLike, allowed: ArrayLike | None) -> float:
    r"""The exact softmax mass on the pairs an approximation computes, averaged over query rows.

    Parameters
    ----------
    exact_weights : (..., n, m) array_like
        Exact softmax attention weights (rows sum to 1).
    allowed : (..., n, m) array_like of bool, broadcastable to ``exact_weights``, or None
        The pairs the approximation computes (``AttentionResult.allowed``); None: every pair.

    Returns
    -------
    float
        In [0, 1]; 1 when ``allowed`` is None; NaN when there is no query row.

    Examples
    --------
    >>> A = [[0.5, 0.5], [0.25, 0.75]]
    >>> mass_kept(A, [[True, False], [True, True]])             # (0.5 + 1) / 2
    0.75
    """
    A = as_float("exact_weights", exact_weights, min_ndim=2)
    if allowed is None:
        return 1.0
    allowed = np.asarray(allowed)
    if allowed.dtype != bool:
        raise TypeError(f"allowed must be boolean, got dtype {allowed.dtype} with shape {allowed.shape}")
    try:
        allowed = np.broadcast_to(allowed, A.shape)
    except ValueError:
        raise ValueError(f"allowed of shape {allowed.shape} does not broadcast to exact_weights' {A.shape}") from None
    kept = np.where(allowed, A, 0.0).sum(axis=-1)                  # (..., n)  Σ_{j∈𝒜_i} A_ij
    return float(kept.mean()) if kept.size else np.nan


def is_row_distribution(weights: ArrayLike) -> bool:
    """Whether every row of ``weights`` (the last axis) is a distribution: entries >= 0 summing to 1.

    A row sum may differ from 1 by :data:`ROW_SUM_TOLERANCE`. A row of zeros also counts: a query that
    sees no key (a cluster without keys, say) and outputs 0; it has lost all of the exact mass.

    Parameters
    ----------
    weights : (..., m) array_like
        Rows of weights.

    Returns
    -------
    bool

    Examples
    --------
    >>> is_row_distribution([[0.5, 0.5], [0.0, 0.0]]), is_row_distribution([[1.5, -0.5]])
    (True, False)
    """
    W = as_float("weights", weights, min_ndim=1)
    sums = W.sum(axis=-1)
    return bool(np.all(W >= 0.0) and np.all((np.abs(sums - 1.0) <= ROW_SUM_TOLERANCE) | (sums == 0.0)))


def row_kl(exact_weights: ArrayLike, approx_weights: ArrayLike) -> float:
    r"""Mean over query rows (the last axis) of KL(exact ‖ approx).

    .. math::

        \frac1N \sum_i \operatorname{KL}(a_i \Vert \tilde a_i), \qquad
        \operatorname{KL}(a_i \Vert \tilde a_i) = \sum_j A_{ij} \log \frac{A_{ij}}{\tilde A_{ij}}

    Parameters
    ----------
    exact_weights : (..., n, m) array_like
        Exact softmax weights :math:`A`, rows summing to 1.
    approx_weights : (..., n, m) array_like
        The approximation's weights :math:`\tilde A`; every row must be a distribution or zero
        (:func:`is_row_distribution`), otherwise a ``ValueError``: KL is not defined for it.

    Returns
    -------
    float
        >= 0; ``inf`` when some row gives zero weight to a pair of positive exact weight (a row of
        zeros among them). Terms with
        :math:`A_{ij} = 0` count 0 (:math:`0 \log 0 = 0`).

    Raises
    ------
    RuntimeError
        If a row's KL is below 0 by more than round-off (see Notes): a bug, since KL >= 0.

    Notes
    -----
    A row's KL, computed, may land below 0 by round-off; it is returned as 0 when it is at least
    :math:`-\big(\delta + (m + 4)\,\varepsilon\,(1 + \sum_j A_{ij}(|\log A_{ij}| + |\log \tilde A_{ij}|))\big)`,
    with :math:`\delta` = :data:`ROW_SUM_TOLERANCE`, :math:`\varepsilon` float64's machine epsilon and m
    the row length. For the stored values, the log-sum inequality gives KL >= :math:`\alpha\log(\alpha/s)`
    with :math:`\alpha = \sum_j A_{ij} = 1 \pm m\varepsilon/2` and :math:`s = \sum_j \tilde A_{ij} \le 1 + \delta`,
    so at least :math:`-(\delta + m\varepsilon/2)` to first order; computing it adds at most
    :math:`\varepsilon\,A_{ij}(|\log A_{ij}| + |\log \tilde A_{ij}|)` per term (each log within an ulp)
    and :math:`(m + 2)\,\varepsilon/2` of the terms' absolute sum for the subtraction, product and sum
    (Higham, 2002, §4.2). Measured on the atlas's rows: -2.5e-15 at worst.

    Examples
    --------
    >>> round(row_kl([[0.5, 0.5]], [[0.25, 0.75]]), 12)         # ½ log 2 + ½ log(2/3)
    0.143841036226
    >>> row_kl([[0.5, 0.5]], [[1.0, 0.0]])
    inf
    """
    A = as_float("exact_weights", exact_weights, min_ndim=2)
    W = as_float("approx_weights", approx_weights, min_ndim=2)
    if A.shape != W.shape:
        raise ValueError(f"exact_weights and approx_weights must have one shape, got {A.shape} and {W.shape}")
    if not is_row_distribution(W):
        raise ValueError("approx_weights' rows are not distributions (an entry < 0 or a row sum off 1 by more "
                         f"than {ROW_SUM_TOLERANCE:g}): KL(exact ‖ approx) is not defined for them")
    positive = A > 0.0
    lost = positive & (W <= 0.0)                                   # exact mass the approximation cannot carry
    kept = positive & ~lost
    log_A, log_W = np.log(np.where(positive, A, 1.0)), np.log(np.where(kept, W, 1.0))
    terms = np.where(kept, A * (log_A - log_W), 0.0)               # (..., n, m)  A_ij log(A_ij / Ã_ij)
    kl = np.where(lost.any(axis=-1), np.inf, terms.sum(axis=-1))   # (..., n)
    size = np.where(kept, A * (np.abs(log_A) + np.abs(log_W)), 0.0).sum(axis=-1)   # (..., n)
    bound = ROW_SUM_TOLERANCE + (A.shape[-1] + 4) * np.finfo(np.float64).eps * (1.0 + size)
    kl = clamp_round_off(kl, bound, "row KL")
    return float(kl.mean()) if kl.size else np.nan


def clamp_round_off(values: ArrayLike, bound: ArrayLike, what: str) -> np.ndarray:
    """``values``, quantities >= 0 by definition, with round-off below 0 (down to ``-bound``) set to 0.

    Parameters
    ----------
    values : array_like
        The computed quantities (``inf`` and NaN pass through).
    bound : array_like, broadcastable to ``values``
        How far below 0 round-off can take each value.
    what : str
        Their name, for the error.

    Returns
    -------
    ndarray
        ``values`` with every value in ``[-bound, 0]`` (-0.0 included) replaced by 0.

    Raises
    ------
    RuntimeError
        If a value is below ``-bound``: no round-off, a bug in what computed it.

    Examples
    --------
    >>> clamp_round_off([0.5, -2.5e-15, 0.0], 1e-12, "row KL")
    array([0.5, 0. , 0. ])
    """
    values = np.asarray(values, dtype=np.float64)
    bound = np.broadcast_to(np.asarray(bound, dtype=np.float64), values.shape)
    below = values < -bound
    if below.any():
        i = np.unravel_index(int(np.argmax(below)), values.shape)
        raise RuntimeError(f"{what} {values[i]:.3g} at {tuple(int(j) for j in i)} is below 0 by more than its "
                           f"round-off bound {bound[i]:.3g}: it is >= 0 by definition, so this is a bug")
    return np.where(values <= 0.0, 0.0, values)
