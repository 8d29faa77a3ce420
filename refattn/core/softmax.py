r"""Numerically stable, masked softmax.

    softmax(x)_j = exp(x_j − max_k x_k) / Σ_k exp(x_k − max_k x_k)

Masked entries are removed by selection (``np.where``), never by adding a large negative number,
so a NaN or Inf sitting in a masked-out entry cannot reach the result. A row with nothing left to
normalise (every entry masked, or every remaining entry ``-inf``) follows an explicit policy.
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.checks import as_float, check_choice
from ..mechanism import Mechanism
from ..papers import VASWANI

__all__ = ["softmax", "FULLY_MASKED_POLICIES"]

FULLY_MASKED_POLICIES = ("zero", "nan", "uniform")


def softmax(
    x: ArrayLike,
    axis: int = -1,
    mask: ArrayLike | None = None,
    *,
    fully_masked: str = "zero",
    dtype=np.float64,
) -> NDArray:
    r"""Softmax along ``axis``, max-shifted, with an optional boolean mask.

    .. math::

        \operatorname{softmax}(x)_j =
        \frac{[M_j]\, e^{x_j - \max_{k: M_k} x_k}}{\sum_{k: M_k} e^{x_k - \max_{k: M_k} x_k}}

    Parameters
    ----------
    x : array_like of float
        Logits.
    axis : int, default -1
        Axis to normalise over.
    mask : array_like of bool, optional
        ``True`` where an entry takes part; must broadcast to ``x.shape``. Masked entries get weight
        exactly 0 whatever their value (NaN and Inf included).
    fully_masked : {"zero", "nan", "uniform"}, default "zero"
        Result for a slice with no entry left (all masked, or all ``-inf``): all zeros (PyTorch >=
        2.5 SDPA, FlashAttention), NaN (0/0, as older PyTorch), or uniform over the whole axis (what
        filling masked logits with ``-1e9`` gives, as in the Annotated Transformer).
    dtype : float dtype, default float64
        Compute (and output) dtype.

    Returns
    -------
    weights : ndarray of ``dtype``, same shape as ``x``

    Notes
    -----
    Shifting by the maximum does not change the result (the common factor cancels) and keeps every
    exponent <= 0, so ``exp`` never overflows; the maximum entry contributes exactly 1 to the sum,
    which therefore never underflows to 0. Non-finite values follow IEEE in the slices that use
    them: a NaN logit makes its whole slice NaN, a ``+inf`` logit gives NaN (inf/inf).

    Examples
    --------
    >>> softmax([0.0, np.log(3.0)])
    array([0.25, 0.75])
    >>> softmax([1e4, 0.0, np.nan], mask=[True, True, False])
    array([1., 0., 0.])
    """
    x = as_float("x", x, dtype)
    if x.ndim == 0:
        raise ValueError("x must have at least one dimension, got a scalar")
    axis = _check_axis(axis, x.ndim)
    allowed = None
    if mask is not None:
        mask = np.asarray(mask)
        if mask.dtype != np.bool_:
            raise TypeError(
                f"mask must be a boolean array (True = keep), got dtype {mask.dtype}; "
                "add a float bias to x instead"
            )
        try:
            ok = np.broadcast_shapes(mask.shape, x.shape) == x.shape
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(f"mask has shape {mask.shape}, which does not broadcast to x's shape {x.shape}")
        allowed = mask
    return masked_softmax(x, allowed, fully_masked, axis=axis)[0]


def masked_softmax(
    x: NDArray, allowed: NDArray | None, fully_masked: str, axis: int = -1, *, return_lse: bool = False
) -> tuple[NDArray, NDArray] | tuple[NDArray, NDArray, NDArray]:
    """Softmax of ``x`` over the ``allowed`` entries; returns ``(weights, empty)`` (and the log-sum-exp).

    ``empty`` (same shape as ``x`` but 1 along ``axis``) flags the slices with no entry left, to
    which ``fully_masked`` was applied; their log-sum-exp is ``-inf`` (log of an empty sum).
    Inputs are assumed validated.
    """
    check_choice("fully_masked", fully_masked, FULLY_MASKED_POLICIES)
    x_sel = x if allowed is None else np.where(allowed, x, -np.inf)
    x_max = np.max(x_sel, axis=axis, keepdims=True, initial=-np.inf)   # NaN propagates; no entry → −inf
    empty = x_max == -np.inf                                       # nothing left to normalise
    e = np.exp(x_sel - np.where(empty, 0, x_max))                  # exp(x_j − max x), masked → 0
    total = np.sum(e, axis=axis, keepdims=True)                    # ≥ 1 unless the slice is empty
    weights = e / np.where(empty, 1, total)
    if fully_masked == "nan":
        weights = np.where(empty, np.nan, weights)
    elif fully_masked == "uniform":
        weights = np.where(empty, 1 / max(x.shape[axis], 1), weights)   # (an empty axis has no weight to set)
    if not return_lse:
        return weights.astype(x.dtype, copy=False), empty
    with np.errstate(divide="ignore"):                             # log 0 = −inf for empty slices
        lse = np.where(empty, -np.inf, x_max + np.log(np.where(empty, 1, total)))   # max + log Σ exp(x − max)
    return weights.astype(x.dtype, copy=False), empty, np.squeeze(lse, axis=axis).astype(x.dtype, copy=False)


def _check_axis(axis, ndim: int) -> int:
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool) or not -ndim <= axis < ndim:
        raise ValueError(f"axis must be an int in [{-ndim}, {ndim}), got {axis!r}")
    return int(axis) % ndim


RECORD = Mechanism(
    id="softmax", title="Numerically stable masked softmax", family="vanilla", section="2 (Vaswani §3.2.1)",
    paper=VASWANI, equation=r"\operatorname{softmax}(x)_j = \frac{e^{x_j - \max_k x_k}}{\sum_k e^{x_k - \max_k x_k}}",
    time="O(n·m)", memory="O(n·m)", kind="component", function=softmax, causal=True,
    figure="refattn.figures.vanilla:softmax", exact_options=None, exact_limit="a component (no apply)",
)
