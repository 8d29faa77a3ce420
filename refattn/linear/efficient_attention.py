r"""Efficient Attention (Shen et al., 2021): normalise Q and K separately, then multiply right to left.

    E(Q, K, V) = ρ_q(Q) (ρ_k(K)ᵀ V)

    ρ_q(Q) = softmax of each row of Q     (over the d features: query i is a mixture of d "templates")
    ρ_k(K) = softmax of each column of K  (over the m positions: template c is a distribution over keys)

ρ_k(K)ᵀ V (d × d_v) holds d global context vectors; each query mixes them with its own weights.
O((n + m)·d·d_v) time and O(d·d_v) extra memory; nothing of size n × m unless the effective matrix
ρ_q(Q) ρ_k(K)ᵀ is asked for.
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.budget import check_fits
from ..common.checks import check_bool, checked_qkv
from ..core.softmax import softmax
from ..mechanism import Mechanism

__all__ = ["efficient_attention"]


def efficient_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    return_weights: bool = False,
) -> NDArray | tuple[NDArray, NDArray]:
    r"""Efficient attention with softmax normalisation: :math:`\rho_q(Q)\,(\rho_k(K)^\top V)`.

    .. math::

        E(Q, K, V) = \rho_q(Q)\,\big(\rho_k(K)^\top V\big), \qquad
        \rho_q(Q) = \sigma_\text{row}(Q), \quad \rho_k(K) = \sigma_\text{col}(K)

    :math:`\sigma_\text{row}` is the softmax of each row of :math:`Q` (over its *d* features),
    :math:`\sigma_\text{col}` the softmax of each column of :math:`K` (over the *m* positions).

    Parameters
    ----------
    q : (..., n, d) array_like
        Queries :math:`Q`.
    k : (..., m, d) array_like
        Keys :math:`K`.
    v : (..., m, d_v) array_like
        Values :math:`V`.
    return_weights : bool, default False
        Also return the effective attention matrix :math:`A = \rho_q(Q)\,\rho_k(K)^\top`
        (materialised only on request; :class:`~refattn.common.MemoryBudgetError` before
        allocating if it exceeds the memory budget).

    Returns
    -------
    out : (..., n, d_v) ndarray
    weights : (..., n, m) ndarray
        Only if ``return_weights``. Every entry is positive and every row sums to 1.

    Raises
    ------
    ValueError
        If the shapes do not fit, or d = 0 (a softmax over no feature has no value).
    TypeError
        If an input is not a real floating-point array.

    Notes
    -----
    **Rows of A sum to 1.** :math:`A_{ij} = \sum_c \rho_q(Q)_{ic}\,\rho_k(K)_{jc}`, so

    .. math::

        \sum_j A_{ij} = \sum_c \rho_q(Q)_{ic} \sum_j \rho_k(K)_{jc}
                      = \sum_c \rho_q(Q)_{ic} \cdot 1 = 1,

    because every column of :math:`\rho_k(K)` is a softmax over the positions *j* and every row of
    :math:`\rho_q(Q)` a softmax over the features *c*. Both factors are positive, so *A* is
    row-stochastic and ``out`` is a convex combination of the values, as in softmax attention;
    but :math:`A \ne \operatorname{softmax}(QK^\top)` in general, and *A* has rank at most *d*.

    **Associativity.** :math:`(\rho_q(Q)\rho_k(K)^\top)V = \rho_q(Q)(\rho_k(K)^\top V)`: the
    right product costs :math:`O((n + m)\,d\,d_v)` instead of :math:`O(n\,m\,(d + d_v))`.

    **Edge sizes.** With no key (*m* = 0), :math:`\rho_k(K)^\top V` is the empty sum, 0, and
    every output is 0: the "zero" policy of a query that sees no key (:mod:`refattn.linear`).
    With d = 0 the row softmax of :math:`Q` runs over no feature and is refused.

    **Non-causal.** The column softmax of *K* normalises over every position, so every output
    depends on every key: this is the paper's (vision, encoder) form, and it has no causal mask.

    **Paper versus code.** The official code (cmsflash/efficient-attention,
    ``efficient_attention.py``) applies ``softmax(keys, dim=2)`` over the h·w positions and
    ``softmax(queries, dim=1)`` over the channels, as here, with no :math:`1/\sqrt{d}` factor;
    around this core it adds per-head channel splits, an output reprojection and a residual, which
    belong to the layer, not to the attention. The paper also defines a scaling normalisation in
    place of the two softmaxes; only the softmax form, the one the official code implements, is here.

    References
    ----------
    .. [1] Z. Shen, M. Zhang, H. Zhao, S. Yi, H. Li, "Efficient Attention: Attention with Linear
       Complexities", WACV 2021, arXiv:1812.01243, §3 (efficient attention with softmax
       normalisation); official code github.com/cmsflash/efficient-attention.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((5, 4)), rng.standard_normal((7, 4)), rng.standard_normal((7, 3))
    >>> out, A = efficient_attention(q, k, v, return_weights=True)
    >>> out.shape, A.shape
    ((5, 3), (5, 7))
    >>> bool(np.allclose(A.sum(axis=-1), 1.0)), bool(np.allclose(A @ v, out))
    (True, True)
    """
    check_bool("return_weights", return_weights)
    q, k, v, batch = checked_qkv(q, k, v)
    if q.shape[-1] == 0:
        raise ValueError(f"efficient attention's softmax of each query runs over its d_k features: needs d_k >= 1, "
                         f"got q shape {q.shape}, k shape {k.shape}")
    if return_weights:
        check_fits("the weights (return_weights=True)", (*batch, q.shape[-2], k.shape[-2]))

    rho_q = softmax(q, axis=-1)                                    # (..., n, d)  σ_row(Q)
    rho_k = softmax(k, axis=-2)                                    # (..., m, d)  σ_col(K)
    context = np.swapaxes(rho_k, -1, -2) @ v                       # (..., d, d_v)  ρ_k(K)ᵀ V
    out = rho_q @ context                                          # (..., n, d_v)  ρ_q(Q)(ρ_k(K)ᵀ V)
    if not return_weights:
        return out
    A = rho_q @ np.swapaxes(rho_k, -1, -2)                         # (..., n, m)  ρ_q(Q) ρ_k(K)ᵀ
    return out, A


RECORD = Mechanism.of(
    efficient_attention, allowed=None,
    id="efficient_attention", title="Efficient Attention (softmax over Q's features and K's positions)",
    family="linear", section="4.2",
    paper='Z. Shen et al., 2018, "Efficient Attention: Attention with Linear Complexities", arXiv:1812.01243',
    equation=r"\rho_q(Q)\,\big(\rho_k(K)^\top V\big)", time="O((n + m)·d·d_v)", memory="O(d·d_v)",
    kind="attention", causal=False,
    figure="refattn.figures.linear:efficient_attention", exact_options=None,
    exact_limit="none: a different normalisation (softmax over Q's features and K's positions)",
)
