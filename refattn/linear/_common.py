"""Helpers shared by the linearised-attention modules: features, denominators, methods, kernel inputs, σ.

The edge-size rule they implement is stated in :mod:`refattn.linear`.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from ..common.budget import check_fits, memory_budget
from ..common.checks import as_float, broadcast_batch, causal_alignment, check_qkv


def check_feature_map(feature_map, name: str) -> None:
    """``TypeError`` naming the argument unless ``feature_map`` is callable (``None`` included)."""
    if not callable(feature_map):
        raise TypeError(f"{name} must be a callable φ mapping (..., T, d) to (..., T, F), "
                        f"got {type(feature_map).__name__}")


def features(feature_map: Callable[[NDArray], NDArray], x: NDArray, name: str,
             map_name: str = "feature_map") -> NDArray:
    """φ(x) as float64, checked: real numbers, every axis of ``x`` but the last kept, F >= 1 features.

    ``name`` is the input's name (q, k) and ``map_name`` the argument that holds the map.
    """
    check_feature_map(feature_map, map_name)
    phi = np.asarray(feature_map(x))
    if phi.dtype.kind not in "fiu":                                # complex would lose its imaginary part
        raise TypeError(f"{map_name} must return real numbers, but gave dtype {phi.dtype} "
                        f"(shape {phi.shape}) for {name} of shape {x.shape}")
    if phi.shape[:-1] != x.shape[:-1]:
        raise ValueError(f"{map_name} turned {name} of shape {x.shape} into shape {phi.shape}; "
                         "it must keep every axis but the last")
    if phi.shape[-1] == 0:
        raise ValueError(f"{map_name} gave no feature (F=0) for {name} of shape {x.shape} (d_k={x.shape[-1]}): "
                         "with no feature every similarity φ(q)·φ(k) is 0 and the weights 0/0 are undefined")
    return phi.astype(np.float64, copy=False)


def check_feature_counts(phi_q: NDArray, phi_k: NDArray, q_map: str, k_map: str) -> None:
    """``ValueError`` naming both maps unless φ(q) and φ(k) have the same number of features F."""
    if phi_q.shape[-1] != phi_k.shape[-1]:
        raise ValueError(f"{q_map} gave φ(q) of shape {phi_q.shape} (F={phi_q.shape[-1]}) but {k_map} gave "
                         f"φ(k) of shape {phi_k.shape} (F={phi_k.shape[-1]}): φ(q)·φ(k) needs the same F")


def check_eps(eps) -> float:
    """A denominator's ``eps`` as a float; ``ValueError`` unless it is a finite real number."""
    if isinstance(eps, (bool, np.bool_)) or not isinstance(eps, (int, float, np.integer, np.floating)) \
            or not np.isfinite(eps):
        raise ValueError(f"eps must be a finite real number, got {eps!r}")
    return float(eps)


def last_keys(n: int, m: int, alignment: str | None) -> tuple[int, NDArray]:
    """``delta`` (query i sees keys j <= i + delta) and ``last`` (n,), the last key each query sees, −1 for none.

    Non-causal: every key (delta = m); "top-left": j <= i; "bottom-right": j <= i + m − n. A query
    sees keys 0 … last with last = min(i + delta, m − 1): none when that is negative, and none at all
    when m = 0.
    """
    delta = {None: m, "top-left": 0, "bottom-right": m - n}[alignment]
    return delta, np.maximum(np.minimum(np.arange(n) + delta, m - 1), -1)


def resolve_method(method: str, streaming: str, dense_shape: tuple[int, ...]) -> str:
    """The method that runs: "auto" is "equation" while its (..., n, m) array fits the memory budget.

    Above the budget (:func:`refattn.common.memory_budget`), "auto" is ``streaming`` (the right
    product or a scan), and an explicit "equation" raises :class:`refattn.common.MemoryBudgetError`
    before allocating.
    """
    if method == "auto":
        return "equation" if math.prod(dense_shape) * 8 <= memory_budget() else streaming
    if method == "equation":
        check_fits("the similarity matrix of method='equation'", dense_shape)
    return method


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


def check_recurrence_inputs(q, k, v, coefficients, name: str):
    """Validate the inputs of a causal recurrence over one sequence (n == m) with a per-step coefficient in [0, 1].

    Returns float64 ``q, k, v``, the ``coefficients`` ``(..., n)`` and the broadcast batch shape.
    """
    q, k, v = (as_float(label, x) for label, x in (("q", q), ("k", k), ("v", v)))
    check_qkv(q, k, v)
    n = q.shape[-2]
    c = as_float(name, coefficients, min_ndim=1)
    if c.shape[-1] != n:
        raise ValueError(f"{name} must have shape (..., n) with n={n} to match q {q.shape}, got shape {c.shape}")
    batch = broadcast_batch({"q": q.shape[:-2], "k": k.shape[:-2], "v": v.shape[:-2], name: c.shape[:-1]})
    outside = (c < 0) | (c > 1)                                    # NaN passes: it follows IEEE where used
    if outside.any():
        raise ValueError(f"{name} must lie in [0, 1] (a sigmoid output); got values in "
                         f"[{np.nanmin(c)}, {np.nanmax(c)}] at {int(outside.sum())} positions")
    return q, k, v, c, batch


def causal_recurrence(run: Callable, q: NDArray, k: NDArray, causal, who: str, return_weights: bool):
    """``run(q)``, a causal recurrence over the m positions of k (q of length m), in either alignment.

    Top-left: step t writes token t to the memory and then reads it, so n == m. Bottom-right: the n
    queries are the last n of the m positions. Output i depends on its own query and on the keys,
    values and coefficients up to i only, so the recurrence runs over all m positions (earlier
    queries, whose outputs are dropped, are zeros) and the last rows are kept; a query before the
    first key sees no key and gets zeros.
    """
    alignment = causal_alignment(causal)
    if alignment is None:
        raise ValueError(f"{who} is a causal recurrence: pass causal=True or 'bottom-right', got causal=False")
    n, m = q.shape[-2], k.shape[-2]
    if n == m:
        return run(q)
    if alignment == "top-left":
        raise ValueError(f"{who} is causal self-attention: step t writes token t to the memory and then reads "
                         f"it, so q and k need the same length; got n={n} queries and m={m} keys "
                         f"(q shape {q.shape}, k shape {k.shape}; causal='bottom-right' takes the last n of "
                         "m positions)")
    keep = min(n, m)
    q_all = np.zeros((*q.shape[:-2], m, q.shape[-1]))
    q_all[..., m - keep:, :] = q[..., n - keep:, :]
    result = run(q_all)
    out, A = result if return_weights else (result, None)
    lead = (*out.shape[:-2], n - keep)                             # queries before the first key: no key
    out = np.concatenate([np.zeros((*lead, out.shape[-1])), out[..., m - keep:, :]], axis=-2)
    if not return_weights:
        return out
    return out, np.concatenate([np.zeros((*lead, m)), A[..., m - keep:, :]], axis=-2)


def drawn_parameters(who: str, option: str, k: NDArray, rng: np.random.Generator, init: Callable):
    """``init(rng, d_k)``: the parameters a recurrence draws for its per-step ``option`` when not given.

    The coefficients (RFA's gates, the delta rule's rates) are computed from the keys, so their
    weights span k's d_k features.
    """
    if k.shape[-1] == 0:
        raise ValueError(f"{who} draws the weights of its {option} over the d_k features of k: needs d_k >= 1, "
                         f"got k shape {k.shape}")
    return init(rng, k.shape[-1])
