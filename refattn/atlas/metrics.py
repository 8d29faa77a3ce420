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
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from ..common import as_float

__all__ = ["ROW_SUM_TOLERANCE", "is_row_distribution", "mass_kept", "relative_error", "row_kl"]

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
    safe_W = np.where(positive & ~lost, W, 1.0)
    terms = np.where(positive & ~lost, A * (np.log(np.where(positive, A, 1.0)) - np.log(safe_W)), 0.0)
    kl = np.where(lost.any(axis=-1), np.inf, terms.sum(axis=-1))   # (..., n)
    return float(kl.mean()) if kl.size else np.nan
