r"""Attention guidance by predefined patterns (Deshpande and Narasimhan, 2020).

Self-attention heads of trained BERT-like models mostly follow a few position patterns; the
auxiliary loss pulls chosen heads towards them from the start of pre-training:

.. math::

    L_\text{guide} = \lambda \sum_{h \in \text{guided}} \lVert A_h - P_h \rVert_F^2,
    \qquad \frac{\partial L_\text{guide}}{\partial A_h} = 2 \lambda (A_h - P_h)

with the patterns P as (n, n) matrices built from positions (row i is where query i should look):

- ``"next"``: P[i, i+1] = 1 (the last token, with no next one, looks at itself);
- ``"previous"``: P[i, i−1] = 1 (the first token looks at itself);
- ``"first"``: P[i, 0] = 1 (the [CLS] token);
- ``"delimiter"``: P[i, d] = 1/|D| for each delimiter position d in D ([SEP] tokens; by default
  the last position);
- ``"uniform"``: P[i, j] = 1/n (bag of words).

Every pattern row sums to 1, so a row-stochastic head can reach it. The gradient chains to the
scores S (A = softmax(S)) through :func:`refattn.oracle.softmax_vjp`.

What was followed: no copy of the paper's text or official code (ameet-1997/AttentionGuidanceOfficial)
was at hand when this was written, so the form above is the one the survey (§4.6.1) and this
project's issue give, ‖A − P‖_F squared and summed over the guided heads with one weight λ; which
head gets which pattern is the caller's choice (``patterns`` names one per head, ``None`` leaves
a head free). The edge rows of "next"/"previous" (looking at themselves) are this module's choice.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.checks import as_float, check_choice
from ..common.ints import check_non_negative_int
from ..core.softmax import softmax
from ..mechanism import Mechanism
from ..oracle.vjp import softmax_vjp

__all__ = ["PATTERNS", "guide_pattern", "guide_patterns", "pattern_loss", "pattern_loss_grad",
           "pattern_loss_score_grad"]

PAPER = ('A. Deshpande, K. Narasimhan, 2020, "Guiding Attention for Self-Supervised Learning with '
         'Transformers", Findings of EMNLP, arXiv:2010.02399')

#: The predefined patterns, by name.
PATTERNS = ("next", "previous", "first", "delimiter", "uniform")


def guide_pattern(name: str, n: int, *, delimiters: Sequence[int] | None = None) -> NDArray:
    """One predefined pattern as an (n, n) row-stochastic matrix.

    Parameters
    ----------
    name : {"next", "previous", "first", "delimiter", "uniform"}
        The pattern (see the module docstring).
    n : int
        Sequence length.
    delimiters : sequence of int, optional
        Delimiter ([SEP]) positions for "delimiter", each in [0, n); default the last position.

    Returns
    -------
    P : (n, n) ndarray

    Examples
    --------
    >>> guide_pattern("next", 3)
    array([[0., 1., 0.],
           [0., 0., 1.],
           [0., 0., 1.]])
    >>> guide_pattern("delimiter", 3, delimiters=[0, 2])[1]
    array([0.5, 0. , 0.5])
    """
    check_choice("name", name, PATTERNS)
    check_non_negative_int("n", n)
    P = np.zeros((n, n))
    if n == 0:
        return P
    rows = np.arange(n)
    if name == "next":
        P[rows, np.minimum(rows + 1, n - 1)] = 1.0
    elif name == "previous":
        P[rows, np.maximum(rows - 1, 0)] = 1.0
    elif name == "first":
        P[:, 0] = 1.0
    elif name == "uniform":
        P[:] = 1.0 / n
    else:
        d = np.asarray([n - 1] if delimiters is None else delimiters)
        if d.ndim != 1 or d.size == 0 or not np.issubdtype(d.dtype, np.integer) or d.min() < 0 or d.max() >= n:
            raise ValueError(f"delimiters must be a non-empty sequence of ints in [0, {n}), got {delimiters!r}")
        d = np.unique(d)
        P[:, d] = 1.0 / d.size
    if name != "delimiter" and delimiters is not None:
        raise ValueError(f"delimiters are only for the 'delimiter' pattern, got them with {name!r}")
    return P


def guide_patterns(names: Sequence[str | None], n: int, *,
                   delimiters: Sequence[int] | None = None) -> tuple[NDArray, NDArray]:
    """The patterns of h heads, ``names[h]`` for head h (``None``: the head is not guided).

    Parameters
    ----------
    names : sequence of str or None
        One pattern name (see :data:`PATTERNS`) or ``None`` per head.
    n : int
        Sequence length.
    delimiters : sequence of int, optional
        Delimiter positions, used by the heads named "delimiter" (default the last position).

    Returns
    -------
    patterns : (h, n, n) ndarray
        Zero for unguided heads.
    guided : (h,) ndarray of bool
    """
    names = list(names)
    guided = np.array([name is not None for name in names], dtype=bool)
    patterns = np.zeros((len(names), n, n))
    for h, name in enumerate(names):
        if name is not None:
            patterns[h] = guide_pattern(name, n, delimiters=delimiters if name == "delimiter" else None)
    return patterns, guided


def _check(weights, patterns, guided, lam):
    A = as_float("weights", weights, min_ndim=3)
    P = as_float("patterns", patterns, min_ndim=3)
    if P.shape[-3:] != A.shape[-3:]:
        raise ValueError(f"patterns have shape {P.shape}; their last three axes must equal weights' "
                         f"(h, n, m) = {A.shape[-3:]}")
    g = np.ones(A.shape[-3], dtype=bool) if guided is None else np.asarray(guided)
    if g.dtype != np.bool_ or g.shape != (A.shape[-3],):
        raise ValueError(f"guided must be a boolean array of shape ({A.shape[-3]},) (one per head), "
                         f"got dtype {g.dtype}, shape {g.shape}")
    lam = float(as_float("lam", lam))
    if not np.isfinite(lam) or lam < 0:
        raise ValueError(f"lam must be a finite number >= 0, got {lam}")
    return A, P, g[:, None, None], lam


def pattern_loss(weights: ArrayLike, patterns: ArrayLike, *, guided: ArrayLike | None = None,
                 lam: float = 1.0) -> NDArray:
    r"""The guidance loss λ Σ_h ‖A_h − P_h‖_F² over the guided heads.

    Parameters
    ----------
    weights : (..., h, n, m) array_like of float
        Each head's attention matrix.
    patterns : (..., h, n, m) array_like of float
        The target of each head (broadcasting over the leading axes), e.g. from :func:`guide_patterns`.
    guided : (h,) array_like of bool, optional
        Which heads the loss guides; default all.
    lam : float, default 1.0
        The loss weight λ ≥ 0.

    Returns
    -------
    loss : (...) ndarray
        0 exactly when every guided head equals its pattern.

    References
    ----------
    A. Deshpande, K. Narasimhan (2020), arXiv:2010.02399.

    Examples
    --------
    >>> import numpy as np
    >>> P, guided = guide_patterns(["next", "first", None], 4)
    >>> float(pattern_loss(P, P, guided=guided))
    0.0
    >>> float(pattern_loss(np.full((3, 4, 4), 0.25), P, guided=guided))       # each row: 0.75² + 3·0.25²
    6.0
    """
    A, P, g, lam = _check(weights, patterns, guided, lam)
    diff = np.where(g, A - P, 0.0)
    return lam * np.sum(diff * diff, axis=(-3, -2, -1))


def pattern_loss_grad(weights: ArrayLike, patterns: ArrayLike, *, guided: ArrayLike | None = None,
                      lam: float = 1.0) -> NDArray:
    """Gradient of :func:`pattern_loss` with respect to the weights: 2λ(A_h − P_h), 0 on unguided heads.

    Parameters
    ----------
    weights : (..., h, n, m) array_like of float
        Each head's attention matrix.
    patterns : (..., h, n, m) array_like of float
        The target of each head, as for :func:`pattern_loss`.
    guided : (h,) array_like of bool, optional
        Which heads the loss guides; default all.
    lam : float, default 1.0
        The loss weight λ ≥ 0.

    Returns
    -------
    grad : (..., h, n, m) ndarray
    """
    A, P, g, lam = _check(weights, patterns, guided, lam)
    return 2.0 * lam * np.where(g, A - P, 0.0)


def pattern_loss_score_grad(scores: ArrayLike, patterns: ArrayLike, *, guided: ArrayLike | None = None,
                            lam: float = 1.0) -> NDArray:
    """Gradient of ``pattern_loss(softmax(scores), ...)`` with respect to the scores (the softmax VJP).

    Parameters
    ----------
    scores : (..., h, n, m) array_like of float
        The pre-softmax scores of each head, A = softmax(scores) along the keys.
    patterns : (..., h, n, m) array_like of float
        The target of each head, as for :func:`pattern_loss`.
    guided : (h,) array_like of bool, optional
        Which heads the loss guides; default all.
    lam : float, default 1.0
        The loss weight λ ≥ 0.

    Returns
    -------
    grad : (..., h, n, m) ndarray
        Each row sums to 0 (the softmax is invariant to a shift of its row).
    """
    S = as_float("scores", scores, min_ndim=3)
    return softmax_vjp(S, pattern_loss_grad(softmax(S), patterns, guided=guided, lam=lam))


RECORD = Mechanism(
    id="pattern_aux_loss", title="Attention guidance by predefined patterns", family="heads",
    section="4.6.1", paper=PAPER,
    equation=r"\lambda \sum_h \lVert A_h - P_h \rVert_F^2",
    time="O(h·n·m)", memory="O(h·n·m)", kind="component", function=pattern_loss, causal=False,
    figure="refattn.figures.pattern_aux_loss:pattern_aux_loss", exact_options=None,
    exact_limit="a component (an auxiliary loss on attention weights, no apply)",
)
