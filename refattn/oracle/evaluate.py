r"""What a check compares a candidate with: attention under one set of conventions, in one dtype.

    oracle     float64: O = softmax(Q Kᵀ·s + B) V, and dQ, dK, dV from sdpa_vjp
    baseline   the same two functions run in the candidate's dtype (``dtype=``): what an honest
               implementation in that precision gets
    noise      κ, the first-order effect of one rounding of every score, weight and product
               (:func:`~refattn.oracle.tolerances.forward_noise`), for the ratio rule's floor

A :class:`Conventions` holds every choice a candidate can get wrong (causal alignment, scale, mask,
fully-masked policy, layout), so that the diagnosis of a failure can change one at a time.

Memory: one evaluation holds up to :data:`DENSE_ARRAYS` float64 arrays of the scores' shape
``(..., n, m)`` at once. When they would take more than the problem's ``memory_budget``
(:func:`refattn.common.memory_budget`, 4 GiB by default), the output is computed for blocks of query rows in turn,
each block by the same equations over all m keys (so every row's arithmetic is the dense one's), in
memory proportional to block rows × m. Gradients too: dQ is row by row, and dK, dV (which sum over
every row) and their κ are the sums of the blocks' parts. The float64 oracle without κ (the "table"
rule's) comes from the blocked forward and backward kernels there, which never form n × m.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
from numpy.typing import NDArray

from .. import common
from ..common.checks import broadcast_batch, check_qkv
from ..core.sdpa import scaled_dot_product_attention
from ..masks import attention_mask, check_mask_shape
from .precision import BFLOAT16, sdpa_bfloat16
from .shapes import kv_groups, repeat_over_groups, sum_over_groups, sum_to_shape, swap_heads
from .tolerances import forward_noise, gradient_noise
from .vjp import sdpa_vjp

__all__ = ["DENSE_ARRAYS", "Conventions", "Evaluation", "Problem", "block_rows", "evaluate"]

"""Bytes one evaluation's ``(..., n, m)`` arrays may take before the output is computed by row blocks (4 GiB)."""

DENSE_ARRAYS = 9
"""Float64 ``(..., n, m)`` arrays one dense evaluation holds at once, at most.

Measured with ``tracemalloc`` (peak over the arrays' size, h = 4, n = 300, m = 500, every mask kind,
causal or not): 6.3 for the float64 oracle with the ratio rule's error model, 8.2 with gradients,
4.8 for a float32 baseline with gradients.
"""


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
    memory_budget : int
        Bytes an evaluation's ``(..., n, m)`` arrays may take (see the module docstring).
    formats : dict of str to str
        The number format of each candidate array: its dtype's name, or "bfloat16" for a float32
        array holding bfloat16 values.
    """

    q: NDArray
    k: NDArray
    v: NDArray
    d_out: NDArray | None
    candidates: dict[str, NDArray]
    grads: bool
    memory_budget: int = field(default_factory=common.memory_budget)
    formats: dict[str, str] = field(default_factory=dict)


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

    float64 is the oracle, float16/32 and "bfloat16" (emulated, output only:
    :func:`~refattn.oracle.precision.sdpa_bfloat16`) the same-dtype baseline. For each ``combine`` in ``noise``
    ("abs", "rss"), also the ratio rule's :math:`\kappa` of every array. Above the problem's
    ``memory_budget``, by blocks of :func:`block_rows` query rows (:func:`_by_row_blocks`).
    """
    q, k, v, d_out = problem.q, problem.k, problem.v, problem.d_out
    if conv.layout == "bnhd":
        q, k, v, d_out = swap_heads(q), swap_heads(k), swap_heads(v), swap_heads(d_out)
    groups = kv_groups(q, k, v)
    k, v = repeat_over_groups(k, groups), repeat_over_groups(v, groups)   # query head i reads head i // groups
    rows = block_rows(q, k, v, conv.mask, problem.memory_budget)
    n = q.shape[-2]
    if rows >= n:
        arrays, empty, kappas = _attend(q, k, v, d_out, conv, dtype, noise, groups, problem.grads)
        kappas = _roots(kappas)
    else:
        arrays, empty, kappas = _by_row_blocks(q, k, v, d_out, conv, dtype, noise, groups, problem.grads, rows)
    if conv.layout == "bnhd":
        arrays = {name: swap_heads(x) for name, x in arrays.items()}
        empty = np.swapaxes(empty, -1, -2)                         # (..., n, h)
    return Evaluation(arrays, empty, groups, kappas)


def block_rows(q: NDArray, k: NDArray, v: NDArray, mask: NDArray | None, memory_budget: int) -> int:
    """Query rows per block that keep one evaluation's ``(..., n, m)`` arrays within ``memory_budget`` bytes.

    ``q``, ``k``, ``v`` in layout "bhnd" with the key/value heads repeated over their groups; ``n``
    when everything fits (one dense evaluation), at least 1. Checks the shapes first (naming them).
    """
    batch = check_qkv(q, k, v)
    n, m = q.shape[-2], k.shape[-2]
    if mask is not None:
        mask = check_mask_shape(mask, n, m)
        batch = broadcast_batch({"q, k, v": batch, "mask": mask.shape[:-2]})
    row_bytes = DENSE_ARRAYS * 8 * math.prod(batch) * m            # bytes per query row
    if row_bytes * n <= memory_budget:
        return n
    return max(1, int(memory_budget // row_bytes))


def _by_row_blocks(q, k, v, d_out, conv: Conventions, dtype, noise, groups: int, grads: bool, rows: int):
    """(arrays, empty, κ maxima) by blocks of ``rows`` query rows, each a dense evaluation over all m keys.

    Every row's output, dQ and κ are its own: those of the block are the dense ones. dK, dV and their κ
    sum over the rows, so the blocks' parts are added (κ as p-th powers, p = 1 for "abs", 2 for "rss").
    The float64 oracle's arrays come from the blocked kernels (:func:`_streamed`): without ``noise``
    (the "table" rule's) entirely, with it the gradients (the blocks then give the output and κ only).
    """
    n, m = q.shape[-2], k.shape[-2]
    float64 = dtype != BFLOAT16 and np.dtype(dtype) == np.float64
    if float64 and not noise:
        return _streamed(q, k, v, d_out, conv, groups, grads)
    dense_grads = grads and not float64                            # the baselines' gradients, block by block
    parts: dict[str, list] = {"out": [], "dq": [], "empty": []}
    sums: dict[str, NDArray] = {}
    kappas: dict[str, dict[str, NDArray]] = {combine: {} for combine in noise}
    for start in range(0, n, rows):
        stop = min(start + rows, n)
        block = replace(conv, mask=_row_block_mask(conv, n, m, start, stop), causal=None)
        arrays, empty, block_kappas = _attend(q[..., start:stop, :], k, v, d_out[..., start:stop, :] if grads else None,
                                              block, dtype, noise, groups, grads, vjp=dense_grads)
        parts["out"].append(arrays["out"])
        parts["empty"].append(empty)
        if dense_grads:
            parts["dq"].append(arrays["dq"])
            for name in ("dk", "dv"):
                sums[name] = arrays[name] if name not in sums else sums[name] + arrays[name]
        for combine, per in block_kappas.items():
            for name, x in per.items():
                known = kappas[combine].get(name)
                if name in ("dk", "dv"):                           # p-th powers summed over the rows
                    kappas[combine][name] = x if known is None else known + x
                else:                                              # a row's own: the largest so far
                    kappas[combine][name] = np.asarray(_max(x) if known is None else max(known, _max(x)))
    out = {"out": np.concatenate(parts["out"], axis=-2)}
    if dense_grads:
        out.update(dq=np.concatenate(parts["dq"], axis=-2), dk=sums["dk"], dv=sums["dv"])
    elif grads:
        out.update(_blocked_grads(q, k, v, d_out, conv, groups))
    return out, np.concatenate(parts["empty"], axis=-1), _roots(kappas)


def _streamed(q, k, v, d_out, conv: Conventions, groups: int, grads: bool):
    """The float64 oracle without κ by the blocked kernels (forward, and backward with ``grads``): never n × m."""
    out, lse = scaled_dot_product_attention(q, k, v, conv.mask, return_lse=True, **_blocked_options(conv))
    arrays = {"out": out}
    if grads:
        arrays.update(_blocked_grads(q, k, v, d_out, conv, groups))
    return arrays, lse == -np.inf, {}


def _blocked_grads(q, k, v, d_out, conv: Conventions, groups: int) -> dict[str, NDArray]:
    """dq, dk, dv of the float64 oracle by the blocked backward pass (dk, dv summed over each group)."""
    g = sdpa_vjp(q, k, v, d_out, conv.mask, **_blocked_options(conv))
    return {"dq": g.dq, "dk": sum_over_groups(g.dk, groups), "dv": sum_over_groups(g.dv, groups)}


def _blocked_options(conv: Conventions) -> dict:
    return {"causal": conv.causal or False, "scale": conv.scale, "fully_masked": conv.fully_masked,
            "method": "blocked"}


def _attend(q, k, v, d_out, conv: Conventions, dtype, noise, groups: int, grads: bool, vjp: bool = True):
    """(arrays, empty, κ of every element: :func:`_noise`) of one dense evaluation, inputs in layout "bhnd" with heads
    repeated."""
    options = {"causal": conv.causal or False, "scale": conv.scale, "fully_masked": conv.fully_masked}
    if dtype == BFLOAT16:
        out, A, lse = sdpa_bfloat16(q, k, v, conv.mask, **options)
    else:
        out, A, lse = scaled_dot_product_attention(q, k, v, conv.mask, return_weights=True, return_lse=True,
                                                   dtype=dtype, **options)
    arrays, empty = {"out": out}, lse == -np.inf
    if grads and vjp:                                              # (vjp=False: κ of the gradients only)
        with np.errstate(invalid="ignore", over="ignore"):         # a float16 baseline may overflow: reported
            g = sdpa_vjp(q, k, v, d_out, conv.mask, dtype=dtype, **options)
        arrays.update(dq=g.dq, dk=sum_over_groups(g.dk, groups), dv=sum_over_groups(g.dv, groups))
    kappas = {combine: _noise(q, k, v, d_out, A, out, empty, conv, combine, groups, grads) for combine in noise}
    return arrays, empty, kappas


def _row_block_mask(conv: Conventions, n: int, m: int, start: int, stop: int) -> NDArray | None:
    """The mask of query rows ``start:stop``, with the causal mask folded in (it depends on the row index)."""
    mask = conv.mask
    if mask is not None and mask.ndim >= 2 and mask.shape[-2] == n:
        mask = mask[..., start:stop, :]
    if conv.causal is None:
        return mask
    delta = m - n if conv.causal == "bottom-right" else 0
    causal = np.arange(m) <= np.arange(start, stop)[:, None] + delta   # (rows, m)  j <= i + δ
    if mask is None:
        return causal
    if mask.dtype == np.bool_:
        return mask & causal
    return np.where(causal, mask, -np.inf)                         # a float bias: -inf masks by selection


def _noise(q, k, v, d_out, A, out, empty, conv, combine, groups, grads) -> dict[str, NDArray]:
    """κ of each array's elements (float64 inputs in layout "bhnd", keys repeated over the groups).

    dK's and dV's as p-th powers (p = 1 for "abs", 2 for "rss": what adds over query rows), rooted
    by :func:`_root`.
    """
    allowed, bias = attention_mask(conv.mask, conv.causal or False, q.shape[-2], k.shape[-2], np.float64)
    used = np.ones(A.shape, bool) if allowed is None else np.broadcast_to(allowed, A.shape)
    if conv.fully_masked == "uniform":
        used = used | empty[..., None]
    kappa, W = forward_noise(q, k, v, A, out, bias, used, conv.scale, combine)
    kappas = {"out": kappa}
    if grads:
        k_dq, k_dk, k_dv = gradient_noise(q, k, v, d_out, A, out, W, used, conv.scale, combine)
        p = _power(combine)                                        # magnitudes add, or their squares do
        kappas["dq"] = sum_to_shape(k_dq**p, q.shape) ** (1 / p)
        kappas["dk"] = sum_over_groups(sum_to_shape(k_dk**p, k.shape), groups)
        kappas["dv"] = sum_over_groups(sum_to_shape(k_dv**p, v.shape), groups)
    return kappas


def _power(combine: str) -> int:
    return 1 if combine == "abs" else 2


def _roots(kappas: dict[str, dict[str, NDArray]]) -> dict[str, dict[str, float]]:
    """The largest κ of each array from :func:`_noise`'s elements (dK's and dV's p-th powers rooted)."""
    return {combine: {name: _max(x) ** (1 / _power(combine)) if name in ("dk", "dv") else _max(x)
                      for name, x in per.items()} for combine, per in kappas.items()}


def _max(x: NDArray) -> float:
    return float(np.max(x)) if x.size else 0.0
