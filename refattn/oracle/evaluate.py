r"""What a check compares a candidate with: attention under one set of conventions, in one dtype.

    oracle     float64: O = softmax(Q Kᵀ·s + B) V, and dQ, dK, dV from sdpa_vjp
    baseline   the same two functions run in the candidate's dtype (``dtype=``): what an honest
               implementation in that precision gets
    noise      κ, the first-order effect of one rounding of every score, weight and product
               (:func:`~refattn.oracle.tolerances.forward_noise`), for the ratio rule's floor

A :class:`Conventions` holds every choice a candidate can get wrong (causal alignment, scale, mask,
fully-masked policy, layout), so that the diagnosis of a failure can change one at a time.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from ..core.masks import attention_mask
from ..core.sdpa import scaled_dot_product_attention
from .shapes import kv_groups, repeat_over_groups, sum_over_groups, sum_to_shape, swap_heads
from .tolerances import forward_noise, gradient_noise
from .vjp import sdpa_vjp

__all__ = ["Conventions", "Evaluation", "Problem", "evaluate"]


@dataclass(frozen=True)
class Conventions:
    """The conventions the candidate is assumed to follow.

    Attributes
    ----------
    causal : {None, "top-left", "bottom-right"}
    scale : float
    fully_masked : {"zero", "nan", "uniform"}
    mask : ndarray or None
        Bool (``True`` = may attend) or float bias, in score layout.
    layout : {"bhnd", "bnhd"}
        How the inputs are read.
    outputs_transposed : bool
        The candidate's arrays are in the other layout than the inputs.
    """

    causal: str | None
    scale: float
    fully_masked: str
    mask: NDArray | None
    layout: str
    outputs_transposed: bool = False


@dataclass(frozen=True)
class Problem:
    """The inputs as given (float64, in the caller's layout) and the candidate's arrays by name.

    Attributes
    ----------
    q, k, v : ndarray
    d_out : ndarray or None
        The upstream gradient; ``None`` unless gradients are checked.
    candidates : dict of str to ndarray
        "out", and "dq", "dk", "dv" when gradients are checked.
    grads : bool
        Gradients are checked.
    """

    q: NDArray
    k: NDArray
    v: NDArray
    d_out: NDArray | None
    candidates: dict[str, NDArray]
    grads: bool


@dataclass(frozen=True)
class Evaluation:
    r"""Attention (and its gradients) under one :class:`Conventions`, in one dtype.

    Attributes
    ----------
    arrays : dict of str to ndarray
        "out", and "dq", "dk", "dv" when gradients are checked, in the layout the inputs came in
        (``dk``, ``dv`` summed over each key/value head's query group).
    empty : ndarray of bool
        The queries that see no key: ``(..., h, n)`` in layout "bhnd", ``(..., n, h)`` in "bnhd".
    groups : int
        Query heads per key/value head (1 without grouped-query attention).
    noise : dict of str to dict of str to float
        ``noise[combine][name]``: the largest :math:`\kappa` of array ``name`` for ``combine`` "abs"
        or "rss" (only those asked for).
    """

    arrays: dict[str, NDArray]
    empty: NDArray
    groups: int
    noise: dict[str, dict[str, float]] = field(default_factory=dict)


def evaluate(problem: Problem, conv: Conventions, dtype, *, noise=()) -> Evaluation:
    r"""Output (and gradients) of ``problem`` under ``conv`` in ``dtype``, in the layout the arrays came in.

    float64 is the oracle, float16/32 the same-dtype baseline. For each ``combine`` in ``noise``
    ("abs", "rss"), also the ratio rule's :math:`\kappa` of every array.
    """
    q, k, v, d_out = problem.q, problem.k, problem.v, problem.d_out
    if conv.layout == "bnhd":
        q, k, v, d_out = swap_heads(q), swap_heads(k), swap_heads(v), swap_heads(d_out)
    groups = kv_groups(q, k, v)
    k, v = repeat_over_groups(k, groups), repeat_over_groups(v, groups)   # query head i reads head i // groups
    options = {"causal": conv.causal or False, "scale": conv.scale, "fully_masked": conv.fully_masked}
    out, A, lse = scaled_dot_product_attention(q, k, v, conv.mask, return_weights=True, return_lse=True,
                                               dtype=dtype, **options)
    arrays, empty = {"out": out}, lse == -np.inf
    if problem.grads:
        with np.errstate(invalid="ignore", over="ignore"):         # a float16 baseline may overflow: reported
            g = sdpa_vjp(q, k, v, d_out, conv.mask, dtype=dtype, **options)
        arrays.update(dq=g.dq, dk=sum_over_groups(g.dk, groups), dv=sum_over_groups(g.dv, groups))
    kappas = {combine: _noise(q, k, v, d_out, A, out, empty, conv, combine, groups, problem.grads)
              for combine in noise}
    if conv.layout == "bnhd":
        arrays = {name: swap_heads(x) for name, x in arrays.items()}
        empty = np.swapaxes(empty, -1, -2)                         # (..., n, h)
    return Evaluation(arrays, empty, groups, kappas)


def _noise(q, k, v, d_out, A, out, empty, conv, combine, groups, grads) -> dict[str, float]:
    """The largest κ of each array (float64 inputs in layout "bhnd", keys repeated over the groups)."""
    allowed, bias = attention_mask(conv.mask, conv.causal or False, q.shape[-2], k.shape[-2], np.float64)
    used = np.ones(A.shape, bool) if allowed is None else np.broadcast_to(allowed, A.shape)
    if conv.fully_masked == "uniform":
        used = used | empty[..., None]
    kappa, W = forward_noise(q, k, v, A, out, bias, used, conv.scale, combine)
    kappas = {"out": _max(kappa)}
    if grads:
        k_dq, k_dk, k_dv = gradient_noise(q, k, v, d_out, A, out, W, used, conv.scale, combine)
        p = 1 if combine == "abs" else 2                           # magnitudes add, or their squares do
        kappas["dq"] = _max(sum_to_shape(k_dq**p, q.shape)) ** (1 / p)
        kappas["dk"] = _max(sum_over_groups(sum_to_shape(k_dk**p, k.shape), groups)) ** (1 / p)
        kappas["dv"] = _max(sum_over_groups(sum_to_shape(k_dv**p, v.shape), groups)) ** (1 / p)
    return kappas


def _max(x: NDArray) -> float:
    return float(np.max(x)) if x.size else 0.0
