r"""Average attention: the cumulative average of the values (Zhang et al., 2018; survey §4.5).

    g_i = (1/(i + 1)) Σ_{j ≤ i} v_j         causal: uniform weights over the keys a query may see

Its attention matrix is fixed by positions alone (no query or key enters it): 1/(i + 1) on j ≤ i.
(The Average Attention Network follows it with a feed-forward layer and input/forget gates; this
is the averaging core.)
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common import causal_alignment, check_qkv, weighted_values
from ..core.causal_mask import causal_mask
from ..mechanism import AttentionResult, FigureSpec, Mechanism

__all__ = ["average_attention"]


def average_attention(q: ArrayLike, k: ArrayLike, v: ArrayLike, *, causal: bool | str = True,
                      return_weights: bool = False) -> NDArray | tuple[NDArray, NDArray]:
    r"""The average of the values each query may see.

    .. math::

        g_i = \frac{1}{|J_i|} \sum_{j \in J_i} v_j, \qquad J_i = \{ j : j \le i \} \text{ (causal)}

    Parameters
    ----------
    q : (..., n, d) array_like
        Queries (only their number n matters).
    k : (..., m, d) array_like
        Keys (only their number m matters).
    v : (..., m, d_v) array_like
        Values.
    causal : {False, True, "top-left", "bottom-right"}, default True
        Which keys each query averages.
    return_weights : bool, default False
        Also return the (n, m) weights.

    Returns
    -------
    out : (..., n, d_v) ndarray
    weights : (n, m) ndarray
        Only if ``return_weights``.

    Examples
    --------
    >>> v = np.array([[2.0], [4.0], [9.0]])
    >>> average_attention(v, v, v)[:, 0]                  # 2, (2 + 4)/2, (2 + 4 + 9)/3
    array([2., 3., 5.])
    """
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    check_qkv(q, k, v)
    n, m = q.shape[-2], k.shape[-2]
    alignment = causal_alignment(causal)
    seen = np.ones((n, m), dtype=bool) if alignment is None else causal_mask(n, m, alignment=alignment)
    counts = seen.sum(axis=-1, keepdims=True)                       # (n, 1)  |J_i|
    A = np.where(seen, 1.0 / np.maximum(counts, 1), 0.0)            # (n, m)  1/|J_i| on J_i
    out = weighted_values(A, v, seen, counts == 0, "zero")         # (..., n, d_v)  A v, by selection
    return (out, A) if return_weights else out


def _apply(q, k, v, *, causal=True, rng=None, return_weights=False):
    """average_attention (``rng`` is not used)."""
    if not return_weights:
        return AttentionResult(average_attention(q, k, v, causal=causal))
    out, A = average_attention(q, k, v, causal=causal, return_weights=True)
    shape = (*out.shape[:-1], A.shape[-1])
    return AttentionResult(out, np.broadcast_to(A, shape), np.broadcast_to(A > 0, shape))


RECORD = Mechanism(
    id="average_attention", title="Average Attention Network (cumulative average)", family="prior",
    section="4.5", paper='B. Zhang, D. Xiong, J. Su, 2018, "Accelerating Neural Transformer via an Average '
    'Attention Network", arXiv:1805.00631', equation=r"g_i = \frac{1}{i + 1} \sum_{j \le i} v_j",
    time="O(n·d_v)", memory="O(d_v) state", kind="attention", function=average_attention, apply=_apply,
    causal=True, position_dependent=True,
    figure=FigureSpec(title="Average attention: uniform weights over the keys each query may see", n=12,
                      panels=(("non-causal: 1/m", {"causal": False}),
                              ("causal: 1/(i + 1) on j ≤ i", {"causal": True}))),
    exact_options=None, exact_limit="none: fixed uniform weights (sdpa gives them only when every score is equal)",
)
