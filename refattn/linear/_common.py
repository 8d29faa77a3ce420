"""Helpers shared by the linearised-attention modules: features, denominators, kernel inputs, σ."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from ..common import as_float, broadcast_batch, causal_alignment, check_qkv
from ..core.causal_mask import causal_mask
from ..mechanism import AttentionResult


def features(feature_map: Callable[[NDArray], NDArray], x: NDArray, name: str) -> NDArray:
    """φ(x) as float64, checked to keep every axis of ``x`` but the last."""
    phi = np.asarray(feature_map(x), dtype=np.float64)
    if phi.shape[:-1] != x.shape[:-1]:
        raise ValueError(f"feature_map turned {name} of shape {x.shape} into shape {phi.shape}; "
                         "it must keep every axis but the last")
    return phi


def safe_denominator(den: NDArray) -> NDArray:
    """Denominators with exact zeros replaced by 1 (those rows are then reported or overwritten)."""
    return np.where(den == 0, 1.0, den)


def check_denominators(den: NDArray, what: str, remedy: str, skip: NDArray | None = None) -> None:
    """Raise ``ZeroDivisionError`` naming the first row whose denominator is exactly 0 (never a silent inf)."""
    zero = den == 0 if skip is None else (den == 0) & ~skip
    if zero.any():
        where = tuple(int(i) for i in np.argwhere(zero)[0])
        raise ZeroDivisionError(f"{what} is 0 at index {where} ({int(zero.sum())} rows): {remedy}")


def sigmoid(x: NDArray) -> NDArray:
    """σ(x) = 1/(1 + e^{−x}) without overflow: e^{−|x|} ≤ 1 in both branches."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def check_recurrence_inputs(q, k, v, coefficients, name: str, who: str):
    """Validate the inputs of a causal recurrence over one sequence with a per-step coefficient in [0, 1].

    Returns float64 ``q, k, v``, the ``coefficients`` ``(..., n)`` and the broadcast batch shape.
    """
    q, k, v = (as_float(label, x) for label, x in (("q", q), ("k", k), ("v", v)))
    check_qkv(q, k, v)
    n, m = q.shape[-2], k.shape[-2]
    if n != m:
        raise ValueError(f"{who} is causal self-attention: step t writes token t to the memory and then reads "
                         f"it, so q and k need the same length; got n={n} queries and m={m} keys "
                         f"(q shape {q.shape}, k shape {k.shape})")
    c = as_float(name, coefficients, min_ndim=1)
    if c.shape[-1] != n:
        raise ValueError(f"{name} must have shape (..., n) with n={n} to match q {q.shape}, got shape {c.shape}")
    batch = broadcast_batch({"q": q.shape[:-2], "k": k.shape[:-2], "v": v.shape[:-2], name: c.shape[:-1]})
    outside = (c < 0) | (c > 1)                                    # NaN passes: it follows IEEE where used
    if outside.any():
        raise ValueError(f"{name} must lie in [0, 1] (a sigmoid output); got values in "
                         f"[{np.nanmin(c)}, {np.nanmax(c)}] at {int(outside.sum())} positions")
    return q, k, v, c, batch


def recurrence_apply(run: Callable, name: str) -> Callable:
    """The registry's uniform ``apply`` of a causal recurrence.

    ``run(q, k, v, rng, method, return_weights, **options)`` computes the recurrence over one sequence.

    Bottom-right alignment: the n queries are the last n of the m positions. Output i depends on
    its own query and on the keys, values and gates up to i only, so the recurrence runs over all m
    positions (earlier queries, whose outputs are dropped, are zeros) and the last rows are kept.
    """
    def apply(q, k, v, *, causal=True, rng=None, return_weights=False, method="equation", **options):
        alignment = causal_alignment(causal)
        if alignment is None:
            raise ValueError(f"{name} is a causal recurrence: pass causal=True or 'bottom-right', got causal=False")
        n, m = np.shape(q)[-2], np.shape(k)[-2]
        if n != m and alignment == "top-left":
            raise ValueError(f"{name} is self-attention over one sequence: q has n={n}, k has m={m} "
                             "(causal='bottom-right' takes the last n of m positions)")
        if n != m:
            keep = min(n, m)
            q = as_float("q", q)
            q_all = np.zeros((*q.shape[:-2], m, q.shape[-1]))
            q_all[..., m - keep:, :] = q[..., n - keep:, :]
            result = run(q_all, k, v, rng, method, return_weights, **options)
            out, A = result if return_weights else (result, None)
            lead = (*out.shape[:-2], n - keep)                     # queries before the first key: no key
            out = np.concatenate([np.zeros((*lead, out.shape[-1])), out[..., m - keep:, :]], axis=-2)
            if return_weights:
                A = np.concatenate([np.zeros((*lead, m)), A[..., m - keep:, :]], axis=-2)
        else:
            result = run(q, k, v, rng, method, return_weights, **options)
            out, A = result if return_weights else (result, None)
        if not return_weights:
            return AttentionResult(out)
        return AttentionResult(out, A, causal_mask(n, m, alignment=alignment) & np.ones(A.shape, dtype=bool))

    apply.__doc__ = f"The registry's uniform apply of {name} ({run.__doc__})"
    return apply
