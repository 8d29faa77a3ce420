r"""Disagreement regularisation of multi-head attention (J. Li, Tu, Yang, Lyu and Zhang, 2018, §3).

Three terms, each a mean over ordered pairs of the h heads *including* i = j (the paper's 1/H² Σᵢ Σⱼ),
added to the training objective as ``J = L + λ D`` and *maximised* (the paper maximises the likelihood
and the disagreement together; as a loss to minimise, use ``−λ D``):

.. math::

    D_\text{subspace} &= -\frac{1}{H^2} \sum_{i=1}^H \sum_{j=1}^H
        \frac{V^i \cdot V^j}{\lVert V^i \rVert \lVert V^j \rVert}, \qquad V^i = X W_i^V \\
    D_\text{position} &= -\frac{1}{H^2} \sum_{i=1}^H \sum_{j=1}^H \big| A^i \odot A^j \big|,
        \qquad |M| = \textstyle\sum_{t,s} |M_{ts}| \\
    D_\text{output}   &= -\frac{1}{H^2} \sum_{i=1}^H \sum_{j=1}^H
        \frac{O^i \cdot O^j}{\lVert O^i \rVert \lVert O^j \rVert}, \qquad O^i = A^i V^i

The cosine terms are taken per position t (the cosine of head i's and head j's vectors at t) and
averaged over the n positions; the paper writes them for one vector per head and leaves the
position reduction implicit, so the average over positions is this module's reading.

Extremes. With the pairs i = j included, a cosine term lies in [−1, 0]: its **minimum −1** is reached
exactly when all heads are identical up to a positive factor at every position (every cosine 1);
pairwise orthogonal heads give −1/H (only the H diagonal cosines 1 remain), and heads whose unit
vectors sum to zero give the maximum 0. The position term lies in [−n, 0] for row-stochastic
attention: −n exactly for identical one-hot heads, 0 for heads attending to disjoint positions.

Gradients (analytic, per batch element). With u_k = V^k_t/‖V^k_t‖ and s_t = Σⱼ u_j,
D_t = −‖s_t‖²/H², so

.. math::

    \frac{\partial D}{\partial V^k_t} = -\frac{2}{n H^2}\,
        \frac{(I - u_k u_k^\top)\, s_t}{\lVert V^k_t \rVert}, \qquad
    \frac{\partial D_\text{position}}{\partial A^k} = -\frac{2}{H^2} \sum_j A^j

(the second for A ≥ 0, where |A^i ⊙ A^j| = Σ A^i ⊙ A^j).
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.checks import as_float
from ..mechanism import Mechanism

__all__ = ["DISAGREEMENT_TERMS", "cosine_disagreement", "cosine_disagreement_grad", "subspace_disagreement",
           "output_disagreement", "position_disagreement", "position_disagreement_grad", "disagreement"]

PAPER = ('J. Li, Z. Tu, B. Yang, M. R. Lyu, T. Zhang, 2018, "Multi-Head Attention with Disagreement '
         'Regularization", EMNLP, arXiv:1810.10183')

#: The three terms, in the paper's order.
DISAGREEMENT_TERMS = ("subspace", "position", "output")


def _heads(name: str, x: ArrayLike) -> NDArray:
    """Per-head vectors (..., h, n, d) as float64, with no zero vector (its cosine is undefined)."""
    x = as_float(name, x, min_ndim=3)
    if x.shape[-3] == 0:
        raise ValueError(f"{name} needs at least one head, got shape {x.shape} (..., h, n, d)")
    if x.shape[-1] == 0 or np.any(np.linalg.norm(x, axis=-1) == 0):
        raise ValueError(f"{name} has a zero vector (shape {x.shape}, (..., h, n, d)): its cosine is undefined")
    return x


def _unit_sum(x: NDArray) -> tuple[NDArray, NDArray, NDArray]:
    norms = np.linalg.norm(x, axis=-1, keepdims=True)              # (..., h, n, 1)
    u = x / norms
    return u, u.sum(axis=-3), norms                                # s: (..., n, d)


def cosine_disagreement(x: ArrayLike) -> NDArray:
    r"""The paper's cosine disagreement of h heads' vectors, averaged over positions.

    .. math::

        D = -\frac{1}{n H^2} \sum_t \sum_{i,j} \cos(x^i_t, x^j_t) = -\frac{1}{n H^2} \sum_t
            \Big\lVert \sum_i \frac{x^i_t}{\lVert x^i_t \rVert} \Big\rVert^2

    Parameters
    ----------
    x : (..., h, n, d) array_like of float
        Each head's vector at each position (values V^i = X W_i^V, or outputs O^i = A^i V^i).

    Returns
    -------
    D : (...) ndarray
        In [−1, 0]: −1 for identical heads, −1/h for pairwise orthogonal heads.

    References
    ----------
    J. Li et al. (2018), arXiv:1810.10183, §3 (subspace and output disagreement).

    Examples
    --------
    >>> import numpy as np
    >>> float(cosine_disagreement(np.ones((3, 2, 4))))
    -1.0
    >>> float(cosine_disagreement(np.eye(3)[:, None, :]))       # three orthogonal heads
    -0.3333333333333333
    """
    x = _heads("x", x)
    h, n = x.shape[-3], x.shape[-2]
    _, s, _ = _unit_sum(x)
    if n == 0:
        return np.zeros(x.shape[:-3])
    return -np.sum(s * s, axis=(-2, -1)) / (n * h * h)


def cosine_disagreement_grad(x: ArrayLike) -> NDArray:
    r"""Gradient of :func:`cosine_disagreement` with respect to its heads' vectors.

    .. math::

        \frac{\partial D}{\partial x^k_t} = -\frac{2}{n H^2}\,
            \frac{s_t - (u_k \cdot s_t)\, u_k}{\lVert x^k_t \rVert}, \qquad
        u_k = \frac{x^k_t}{\lVert x^k_t \rVert}, \quad s_t = \sum_j u_j

    Parameters
    ----------
    x : (..., h, n, d) array_like of float
        Each head's vector at each position.

    Returns
    -------
    grad : (..., h, n, d) ndarray
        Zero for identical heads (the minimum is flat in every direction that keeps the cosines).

    Examples
    --------
    >>> import numpy as np
    >>> float(np.abs(cosine_disagreement_grad(np.ones((3, 2, 4)))).max())
    0.0
    """
    x = _heads("x", x)
    h, n = x.shape[-3], x.shape[-2]
    if n == 0:
        return np.zeros_like(x)
    u, s, norms = _unit_sum(x)
    s = s[..., None, :, :]
    tangent = s - np.sum(u * s, axis=-1, keepdims=True) * u
    return -2.0 / (n * h * h) * tangent / norms


def subspace_disagreement(values: ArrayLike) -> NDArray:
    """D_subspace: :func:`cosine_disagreement` of the heads' value projections V^i = X W_i^V.

    Parameters
    ----------
    values : (..., h, n, d_head) array_like of float
        The projected values per head (:func:`refattn.core.multi_head.project_heads` of the value input).

    Returns
    -------
    D : (...) ndarray
    """
    return cosine_disagreement(values)


def output_disagreement(outputs: ArrayLike) -> NDArray:
    """D_output: :func:`cosine_disagreement` of the heads' outputs O^i = A^i V^i.

    Parameters
    ----------
    outputs : (..., h, n, d_head) array_like of float
        Each head's attention output, before concatenation and W^O.

    Returns
    -------
    D : (...) ndarray
    """
    return cosine_disagreement(outputs)


def _weights(name: str, a: ArrayLike) -> NDArray:
    a = as_float(name, a, min_ndim=3)
    if a.shape[-3] == 0:
        raise ValueError(f"{name} needs at least one head, got shape {a.shape} (..., h, n, m)")
    return a


def position_disagreement(weights: ArrayLike) -> NDArray:
    r"""D_position: minus the mean over head pairs of the summed overlap |A^i ⊙ A^j|.

    .. math::

        D_\text{position} = -\frac{1}{H^2} \sum_{i,j} \sum_{t,s} |A^i_{ts} A^j_{ts}|

    Parameters
    ----------
    weights : (..., h, n, m) array_like of float
        Each head's attention matrix.

    Returns
    -------
    D : (...) ndarray
        In [−n, 0] for row-stochastic weights: −n for identical one-hot heads, 0 for disjoint ones.

    Examples
    --------
    >>> import numpy as np
    >>> float(position_disagreement(np.stack([np.eye(3), np.eye(3)])))     # identical one-hot heads
    -3.0
    >>> float(position_disagreement(np.stack([np.eye(3), np.roll(np.eye(3), 1, axis=1)])))  # disjoint heads
    -1.5
    """
    a = np.abs(_weights("weights", weights))
    h = a.shape[-3]
    total = a.sum(axis=-3)
    return -np.sum(total * total, axis=(-2, -1)) / (h * h)


def position_disagreement_grad(weights: ArrayLike) -> NDArray:
    r"""Gradient of :func:`position_disagreement` with respect to each head's weights.

    .. math::

        \frac{\partial D_\text{position}}{\partial A^k_{ts}} = -\frac{2}{H^2}\,
            \operatorname{sign}(A^k_{ts}) \sum_j |A^j_{ts}|

    (for attention weights, A ≥ 0: −2/H² Σⱼ A^j; at an entry 0 the |·| has no derivative and this
    returns 0).

    Parameters
    ----------
    weights : (..., h, n, m) array_like of float
        Each head's attention matrix.

    Returns
    -------
    grad : (..., h, n, m) ndarray
    """
    a = _weights("weights", weights)
    h = a.shape[-3]
    total = np.abs(a).sum(axis=-3, keepdims=True)
    return -2.0 / (h * h) * np.sign(a) * total


def disagreement(*, values: ArrayLike | None = None, weights: ArrayLike | None = None,
                 outputs: ArrayLike | None = None) -> dict[str, NDArray]:
    """The terms the given tensors allow, keyed by name ("subspace", "position", "output").

    Parameters
    ----------
    values : (..., h, n, d_head) array_like, optional
        Value projections per head, for D_subspace.
    weights : (..., h, n, m) array_like, optional
        Attention matrices per head, for D_position.
    outputs : (..., h, n, d_head) array_like, optional
        Head outputs, for D_output.

    Returns
    -------
    dict of str to ndarray
        The paper adds them to the objective it maximises, J = L + λ D.

    Examples
    --------
    >>> import numpy as np
    >>> sorted(disagreement(values=np.ones((2, 3, 4)), weights=np.ones((2, 3, 3)) / 3))
    ['position', 'subspace']
    """
    given = {"subspace": values, "position": weights, "output": outputs}
    if all(x is None for x in given.values()):
        raise ValueError("disagreement needs at least one of values, weights, outputs; got none")
    funcs = {"subspace": subspace_disagreement, "position": position_disagreement, "output": output_disagreement}
    return {name: funcs[name](x) for name, x in given.items() if x is not None}


RECORD = Mechanism(
    id="disagreement_reg", title="Disagreement regularisation of heads", family="heads",
    section="4.6.1", paper=PAPER,
    equation=r"D = -\frac{1}{H^2}\sum_{i,j}\cos(V^i, V^j),\ -\frac{1}{H^2}\sum_{i,j}|A^i \odot A^j|,"
             r"\ -\frac{1}{H^2}\sum_{i,j}\cos(O^i, O^j)",
    time="O(h·n·d + h·n·m)", memory="O(n·d + n·m)", kind="component", function=disagreement, causal=False,
    figure="refattn.figures.disagreement_reg:disagreement_reg", exact_options=None,
    exact_limit="a component (a loss on a multi-head layer, no apply)",
)
