r"""Check another implementation's attention output (and gradients) against refattn's float64 oracle.

    oracle     O = softmax(Q Kᵀ·s + B) V in float64, dQ, dK, dV from refattn.oracle.vjp.sdpa_vjp
    baseline   the same equations run in the candidate's dtype (what an honest implementation gets)
    ratio      max|c − O| ≤ 2·max|b − O| + floor  (3× for gradients; FlashAttention's rule)
    table      |c − O| ≤ atol + rtol·|O|          (torch.testing, xFormers or JAX defaults)
    ulp        |c − O| ≤ N ulp(max|O|)            (ULPs of the candidate's dtype)

When a check fails, the usual convention mix-ups are tried one at a time (the other causal
alignment, the inverted mask, no scale, the other layout, another fully-masked policy ...) and the
report names each one under which the candidate would pass.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common import as_float, causal_alignment, check_choice, check_scale, default_scale, weighted_values
from ..core.masks import attention_mask
from ..core.sdpa import scaled_dot_product_attention
from ..core.softmax import FULLY_MASKED_POLICIES, masked_softmax
from .report import Comparison, FullyMaskedRows, Report
from .tolerances import (
    DEFAULT_MAX_ULPS,
    DEFAULT_TABLE,
    RATIO_FACTORS,
    RULES,
    TABLES,
    floor_spec,
    forward_noise,
    gradient_noise,
    table_tolerance,
)
from .vjp import sdpa_vjp

__all__ = ["LAYOUTS", "assert_close", "check"]

LAYOUTS = ("bhnd", "bnhd")
_LAYOUT_SHAPES = {"bhnd": "(..., h, n, d)", "bnhd": "(..., n, h, d)"}
_CANDIDATE_DTYPES = (np.float16, np.float32, np.float64)
_GRADS = ("dq", "dk", "dv")


def check(
    candidate: ArrayLike,
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    mask: ArrayLike | None = None,
    causal: bool | str = False,
    scale: float | None = None,
    fully_masked: str = "zero",
    d_out: ArrayLike | None = None,
    dq: ArrayLike | None = None,
    dk: ArrayLike | None = None,
    dv: ArrayLike | None = None,
    rule: str = "ratio",
    table: str | None = None,
    layout: str = "bhnd",
    max_ulps: float | None = None,
) -> Report:
    r"""Compare a candidate attention output (and gradients) with refattn's float64 oracle.

    .. math::

        O = \operatorname{softmax}\Big(Q K^\top s + B\Big) V, \qquad
        \max |c - O| \le 2 \max |b - O| + \text{floor} \quad (\text{rule "ratio"})

    Parameters
    ----------
    candidate : (..., n, d_v) array_like of float16, float32 or float64
        The other implementation's output for these inputs. Its dtype is "the candidate's dtype":
        the baseline runs in it and ULPs and table entries are taken for it.
    q : (..., n, d_k) array_like
        The queries the candidate was given (in ``layout``; any float dtype, compared in float64).
    k : (..., m, d_k) array_like
        Keys. With a head axis (axis -3 in layout "bhnd") of ``h_kv`` entries where ``q`` has
        ``h``, ``h`` divisible by ``h_kv``: grouped-query attention, query head ``i`` reads
        key/value head ``i // (h // h_kv)`` (as ``repeat_interleave``: PyTorch ``enable_gqa``,
        FlashAttention).
    v : (..., m, d_v) array_like
        Values, with ``k``'s heads.
    mask : (..., n, m) array_like of bool or float, optional
        ``True`` = may attend, or an additive float bias (``-inf`` masks), in score layout
        ``(..., h, n, m)`` whatever ``layout`` is.
    causal : {False, True, "top-left", "bottom-right"}, default False
        As in :func:`refattn.scaled_dot_product_attention`.
    scale : float, optional
        Multiplier of :math:`QK^\top`. Default :math:`1/\sqrt{d_k}`.
    fully_masked : {"zero", "nan", "uniform"}, default "zero"
        Output of a query that may attend to no key.
    d_out : (..., n, d_v) array_like, optional
        The upstream gradient the candidate's ``dq``, ``dk``, ``dv`` were computed with (ignored
        without them).
    dq, dk, dv : array_like, optional
        The candidate's gradients, of the shapes of ``q``, ``k``, ``v``; checked against
        :func:`refattn.oracle.vjp.sdpa_vjp` (summed over each key/value head's query group).
    rule : {"ratio", "table", "ulp"}, default "ratio"
        "ratio": :math:`\max|c - O| \le f \max|b - O| + \text{floor}`, :math:`f = 2` for the
        output and 3 for gradients (FlashAttention's tests), :math:`b` the same-dtype baseline.
        "table": :math:`|c - O| \le \text{atol} + \text{rtol}|O|` per element, from ``table``.
        "ulp": :math:`|c - O| \le N \operatorname{ulp}(\max|O|)`, ``N = max_ulps``.
    table : {"torch-default", "xformers", "jax"}, optional
        Rule "table" only; default "torch-default". See :data:`refattn.oracle.tolerances.TABLES`.
    layout : {"bhnd", "bnhd"}, default "bhnd"
        Axis order of ``q, k, v, d_out``, the candidate and its gradients: ``(..., h, n, d)``
        (PyTorch SDPA) or ``(..., n, h, d)`` (FlashAttention, xFormers, JAX ``BTNH``).
    max_ulps : float, optional
        Rule "ulp" only; default :data:`~refattn.oracle.tolerances.DEFAULT_MAX_ULPS` (64).

    Returns
    -------
    Report
        ``report.passed``, one :class:`~refattn.oracle.report.Comparison` per array, the fully
        masked rows, and when it fails the alternative conventions under which it would pass;
        ``print(report)`` reads as a multi-line summary.

    Raises
    ------
    TypeError
        A candidate that is not float16/32/64, integer or complex inputs.
    ValueError
        Unknown rule, table, layout or policy; shapes that do not fit each other; gradients
        without ``d_out``. (A candidate of the wrong shape is not an error: the report fails it,
        and names a transposed layout if that is what fits.)

    Notes
    -----
    **Same-dtype baseline.** For the output, :func:`refattn.scaled_dot_product_attention` with
    ``dtype=`` the candidate's dtype. For gradients, the equations of
    :func:`~refattn.oracle.vjp.sdpa_vjp` evaluated in that dtype (the inputs cast to it, every
    intermediate kept in it), on the same-dtype forward weights. A float64 candidate's baseline is
    the oracle itself (error 0), so its threshold is the floor alone.

    **Floor.** Twice the baseline error can be accidentally tiny (a lucky rounding, a short
    sequence), so the ratio rule adds :math:`c\,\varepsilon \max \kappa`, with
    :math:`\varepsilon` the candidate dtype's machine epsilon and :math:`\kappa` the first-order
    effect of one rounding of every score (relative to :math:`|s| \sum_l |q_{il}||k_{jl}| +
    |B_{ij}|`, so large logits and cancellation raise it), every weight and every product
    (:func:`~refattn.oracle.tolerances.forward_noise`, ``gradient_noise``): for float16 the
    root-sum-square of those independent errors (their typical size), for float32 their
    worst-case sum, for float64 (whose baseline is the oracle itself) the worst-case sum doubled;
    :func:`~refattn.oracle.tolerances.floor_spec` gives the reasons and the measurements.

    **Alternatives.** On failure, each of these replaces one convention and the whole comparison is
    redone (oracle, baseline, floor): the other causal alignments and no causal mask, the inverted
    boolean mask, no mask, ``scale`` 1, :math:`1/d_k` and :math:`1/\sqrt{d_k}`, the other
    fully-masked policies (when a row is fully masked), the candidate's arrays in the other layout
    and the inputs read in the other layout. Each one under which every array passes is reported as
    "matches if ..."; when none does, those under which some arrays pass are listed as "partly".

    **Non-finite values** are never covered by a tolerance: a NaN or Inf where the oracle is
    finite fails; a NaN (Inf) in the oracle passes only where the candidate has NaN (the same Inf)
    too, and the report counts them either way.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 2, 5, 8))
    >>> out = scaled_dot_product_attention(q, k, v, causal=True, dtype=np.float32)
    >>> check(out, q, k, v, causal=True).passed
    True
    >>> report = check(out, q, k, v)                        # causal=True forgotten
    >>> report.passed, report.alternatives
    (False, ('causal="top-left" (query i sees keys j <= i) instead of no causal mask',))
    >>> wrong = scaled_dot_product_attention(q, k, v, causal=True, scale=1.0, dtype=np.float32)
    >>> check(wrong, q, k, v, causal=True).alternatives
    ('scale=1 (no scaling) instead of 0.353553',)
    """
    cands = {"out": _as_candidate("candidate", candidate)}
    for name, g in (("dq", dq), ("dk", dk), ("dv", dv)):
        if g is not None:
            cands[name] = _as_candidate(name, g)
    q, k, v = (as_float(name, x) for name, x in (("q", q), ("k", k), ("v", v)))
    grads = len(cands) > 1
    if grads and d_out is None:
        raise ValueError("dq, dk and dv are checked against the gradient for d_out: pass d_out, the upstream "
                         "gradient the candidate's gradients were computed with")
    d_out = as_float("d_out", d_out) if grads else None
    check_choice("layout", layout, LAYOUTS)
    check_choice("fully_masked", fully_masked, FULLY_MASKED_POLICIES)
    check_choice("rule", rule, RULES)
    alignment = causal_alignment(causal)
    if layout == "bnhd":
        for name, x in (("q", q), ("k", k), ("v", v), ("d_out", d_out)):
            if x is not None and x.ndim < 3:
                raise ValueError(f"layout 'bnhd' needs {name} of shape (..., n, h, d), got shape {x.shape}")
    scale = default_scale(q.shape[-1]) if scale is None else check_scale(scale)
    spec = _rule_spec(rule, table, max_ulps)
    if mask is not None:
        mask = np.asarray(mask)
    conv = _Conventions(alignment, scale, fully_masked, mask, layout)
    problem = _Problem(q, k, v, d_out, cands, grads)

    comparisons, ok, oracle = _run(problem, conv, spec)
    passed = all(c.passed for c in comparisons)
    fully = _fully_masked_rows(problem, conv, spec, oracle, ok.get("out"))
    tried, matches, partial = (), (), ()
    if not passed:
        tried, matches, partial = _try_alternatives(problem, conv, spec, oracle)
    return Report(
        passed=passed,
        rule=rule,
        rule_detail=spec.detail,
        dtype=cands["out"].dtype.name,
        conventions=_describe(conv, problem, oracle),
        comparisons=tuple(comparisons),
        fully_masked=fully,
        alternatives=matches,
        alternatives_tried=tried,
        partial_alternatives=() if matches else partial,
    )


def assert_close(candidate: ArrayLike, q: ArrayLike, k: ArrayLike, v: ArrayLike, **options) -> Report:
    r"""Raise ``AssertionError`` with the report's text unless :func:`check` passes.

    Parameters
    ----------
    candidate, q, k, v : array_like
        As in :func:`check`.
    **options
        Every keyword argument of :func:`check`.

    Returns
    -------
    Report
        The passing report.

    Examples
    --------
    >>> rng = np.random.default_rng(1)
    >>> q, k, v = rng.standard_normal((3, 4, 6))
    >>> _ = assert_close(scaled_dot_product_attention(q, k, v, dtype=np.float16), q, k, v)
    >>> assert_close(np.zeros((4, 6)), q, k, v)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    AssertionError: refattn oracle check FAILED: rule 'ratio', candidate dtype float64
    ...
    """
    report = check(candidate, q, k, v, **options)
    if not report.passed:
        raise AssertionError(str(report))
    return report


# ------------------------------------------------------------------------------------------ internals


@dataclass(frozen=True)
class _Conventions:
    causal: str | None              # None, "top-left" or "bottom-right"
    scale: float
    fully_masked: str
    mask: NDArray | None
    layout: str                     # how the inputs are read
    outputs_transposed: bool = False


@dataclass(frozen=True)
class _Problem:
    q: NDArray
    k: NDArray
    v: NDArray
    d_out: NDArray | None
    candidates: dict
    grads: bool


@dataclass(frozen=True)
class _Spec:
    rule: str
    table: str | None
    max_ulps: float
    detail: str


def _rule_spec(rule: str, table: str | None, max_ulps) -> _Spec:
    if rule != "table" and table is not None:
        raise ValueError(f"table={table!r} is only used with rule='table', got rule={rule!r}")
    if rule != "ulp" and max_ulps is not None:
        raise ValueError(f"max_ulps={max_ulps!r} is only used with rule='ulp', got rule={rule!r}")
    if rule == "ratio":
        detail = ("FlashAttention's: max|c − o| ≤ 2 × max|b − o| (output), 3 × (gradients), + a rounding-noise "
                  "floor; o the float64 oracle, b refattn's equation path run in the candidate's dtype")
        return _Spec(rule, None, 0.0, detail)
    if rule == "table":
        table = DEFAULT_TABLE if table is None else table
        if table not in TABLES:
            raise ValueError(f"table must be one of {tuple(TABLES)!r}, got {table!r}")
        return _Spec(rule, table, 0.0, f"|c − o| ≤ atol + rtol·|o| per element, table {table!r}: "
                                      f"{TABLES[table].source}")
    max_ulps = DEFAULT_MAX_ULPS if max_ulps is None else max_ulps
    if isinstance(max_ulps, bool) or not isinstance(max_ulps, (int, float, np.integer, np.floating)) \
            or not np.isfinite(max_ulps) or max_ulps < 0:
        raise ValueError(f"max_ulps must be a finite number >= 0, got {max_ulps!r}")
    return _Spec(rule, None, float(max_ulps), f"|c − o| ≤ {float(max_ulps):g} ulp of the candidate's dtype at the "
                                             "array's largest |o| (spacing of max|o|)")


def _as_candidate(name: str, x: ArrayLike) -> NDArray:
    arr = np.asarray(x)
    if arr.dtype.type not in _CANDIDATE_DTYPES:
        raise TypeError(
            f"{name} must be a float16, float32 or float64 array, got dtype {arr.dtype} with shape {arr.shape}"
            + ("; cast bfloat16 results to float32 (and compare with float32 tolerances)"
               if "bfloat16" in arr.dtype.name else "")
        )
    return arr


def _other(layout: str) -> str:
    return "bnhd" if layout == "bhnd" else "bhnd"


def _swap(x: NDArray | None) -> NDArray | None:
    return None if x is None else np.swapaxes(x, -2, -3)


def _sum_to_shape(x: NDArray, shape: tuple) -> NDArray:
    """Sum ``x`` over the axes along which an array of ``shape`` was broadcast to ``x.shape``."""
    lead = x.ndim - len(shape)
    if lead > 0:
        x = x.sum(axis=tuple(range(lead)))
    axes = tuple(i for i, size in enumerate(shape) if size == 1 and x.shape[i] != 1)
    if axes:
        x = x.sum(axis=axes, keepdims=True)
    return x.reshape(shape)


def _groups(q: NDArray, k: NDArray, v: NDArray) -> int:
    """Query heads per key/value head (1 without grouped-query attention); arrays in (..., h, n, d)."""
    if q.ndim < 3 or k.ndim < 3 or k.shape[-3] == q.shape[-3]:
        return 1
    h, h_kv = q.shape[-3], k.shape[-3]
    if v.ndim < 3 or v.shape[-3] != h_kv:
        raise ValueError(f"k has h_kv={h_kv} heads but v has shape {v.shape}; they must have the same heads")
    if h % h_kv:
        raise ValueError(
            f"q has h={h} heads but k has h_kv={h_kv} (q shape {q.shape}, k shape {k.shape}): grouped-query "
            "attention needs h divisible by h_kv"
        )
    return h // h_kv


def _ungroup(g: NDArray, groups: int) -> NDArray:
    """(..., h, m, d) gradient of repeated keys → (..., h_kv, m, d), summed over each group."""
    if groups == 1:
        return g
    return g.reshape(*g.shape[:-3], g.shape[-3] // groups, groups, *g.shape[-2:]).sum(axis=-3)


def _attention(problem: _Problem, conv: _Conventions, dtype, *, noise=None) -> dict:
    """Output (and gradients) under ``conv`` in ``dtype``, in the layout the arrays came in.

    float64 is the oracle (gradients by :func:`sdpa_vjp`); float16/32 the same-dtype baseline.
    For each ``combine`` in ``noise`` ("abs", "rss"), also the scalars ``kappa_<combine>_<name>`` of the
    ratio rule's floor.
    """
    q, k, v, d_out = problem.q, problem.k, problem.v, problem.d_out
    if conv.layout == "bnhd":
        q, k, v, d_out = _swap(q), _swap(k), _swap(v), _swap(d_out)
    groups = _groups(q, k, v)
    if groups > 1:
        k, v = np.repeat(k, groups, axis=-3), np.repeat(v, groups, axis=-3)
    causal = conv.causal or False
    out, A, lse = scaled_dot_product_attention(
        q, k, v, conv.mask, causal=causal, scale=conv.scale, fully_masked=conv.fully_masked,
        return_weights=True, return_lse=True, dtype=dtype,
    )
    result = {"out": out, "empty": lse == -np.inf, "groups": groups}
    if problem.grads:
        if np.dtype(dtype) == np.float64:
            g = sdpa_vjp(q, k, v, d_out, conv.mask, causal=causal, scale=conv.scale, fully_masked=conv.fully_masked)
            dq, dk, dv = g.dq, g.dk, g.dv
        else:
            dq, dk, dv = _sdpa_vjp_in(q, k, v, d_out, conv.mask, causal, conv.scale, conv.fully_masked, dtype)
        result.update(dq=dq, dk=_ungroup(dk, groups), dv=_ungroup(dv, groups))
    for combine in noise or ():
        n, m = q.shape[-2], k.shape[-2]
        allowed, bias = attention_mask(conv.mask, causal, n, m, np.float64)
        used = np.ones(A.shape, bool) if allowed is None else np.broadcast_to(allowed, A.shape)
        if conv.fully_masked == "uniform":
            used = used | result["empty"][..., None]
        kappa, W = forward_noise(q, k, v, A, out, bias, used, conv.scale, combine)
        result[f"kappa_{combine}_out"] = _max(kappa)
        if problem.grads:
            k_dq, k_dk, k_dv = gradient_noise(q, k, v, d_out, A, out, W, used, conv.scale, combine)
            p = 1 if combine == "abs" else 2                       # magnitudes add, or their squares do
            result[f"kappa_{combine}_dq"] = _max(_sum_to_shape(k_dq**p, q.shape)) ** (1 / p)
            result[f"kappa_{combine}_dk"] = _max(_ungroup(_sum_to_shape(k_dk**p, k.shape), groups)) ** (1 / p)
            result[f"kappa_{combine}_dv"] = _max(_ungroup(_sum_to_shape(k_dv**p, v.shape), groups)) ** (1 / p)
    if conv.layout == "bnhd":
        for name in ("out", "dq", "dk", "dv"):
            if name in result:
                result[name] = _swap(result[name])
        result["empty"] = np.swapaxes(result["empty"], -1, -2)     # (..., n, h)
    return result


def _max(x: NDArray) -> float:
    return float(np.max(x)) if x.size else 0.0


def _sdpa_vjp_in(q, k, v, d_out, mask, causal, scale, fully_masked, dtype):
    """The equations of :func:`sdpa_vjp`, every intermediate kept in ``dtype`` (the gradient baseline)."""
    q, k, v, d_out = (as_float(name, x, dtype) for name, x in (("q", q), ("k", k), ("v", v), ("d_out", d_out)))
    n, m = q.shape[-2], k.shape[-2]
    allowed, bias = attention_mask(mask, causal, n, m, dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        S = (q @ np.swapaxes(k, -1, -2)) * scale                   # (..., n, m)  S = QKᵀ·s
        if bias is not None:
            S = S + bias                                           # (..., n, m)  S + B
    A, empty = masked_softmax(S, allowed, fully_masked)            # (..., n, m), (..., n, 1)
    shape = np.broadcast_shapes(A.shape, d_out.shape[:-1] + (m,))
    A, empty = np.broadcast_to(A, shape), np.broadcast_to(empty, shape)
    keys_used = np.ones(shape, bool) if allowed is None else np.broadcast_to(allowed, shape)
    if fully_masked == "nan":
        keys_used = keys_used | empty
    values_used = keys_used | empty if fully_masked == "uniform" else keys_used
    A_T = np.swapaxes(np.where(values_used, A, 0.0), -1, -2)       # (..., m, n)  Aᵀ
    with np.errstate(invalid="ignore", over="ignore"):
        dv = weighted_values(A_T, d_out, np.swapaxes(values_used, -1, -2), None, "zero")   # Aᵀ dO
        dA = d_out @ np.swapaxes(v, -1, -2)                        # (..., n, m)  dA = dO Vᵀ
        A_kept = np.where(keys_used & ~empty, A, 0.0)
        dA = np.where(keys_used & ~empty, dA, 0.0)
        rowsum = np.sum(dA * A_kept, axis=-1, keepdims=True)       # (..., n, 1)
        dS = A_kept * (dA - rowsum)                                # (..., n, m)  A ⊙ (dA − rowsum)
        dS = np.where(empty, np.nan if fully_masked == "nan" else 0.0, dS).astype(dtype, copy=False)
        dq = scale * weighted_values(dS, k, keys_used, None, "zero")                  # s·dS K
        dk = scale * weighted_values(np.swapaxes(dS, -1, -2), q, np.swapaxes(keys_used, -1, -2), None, "zero")
    return (_sum_to_shape(dq, q.shape).astype(dtype, copy=False),
            _sum_to_shape(dk, k.shape).astype(dtype, copy=False),
            _sum_to_shape(dv, v.shape).astype(dtype, copy=False))


def _run(problem: _Problem, conv: _Conventions, spec: _Spec) -> tuple[list, dict, dict]:
    """Compare every candidate array under ``conv``; return (comparisons, pass masks, oracle).

    The oracle dict also gets ``tol_<name>``, the tolerance each array was held to.
    """
    noise = {floor_spec(c.dtype)[1] for c in problem.candidates.values()} if spec.rule == "ratio" else None
    oracle = _attention(problem, conv, np.float64, noise=noise)
    baselines = {}
    comparisons, ok = [], {}
    for name, c in problem.candidates.items():
        if conv.outputs_transposed:
            if c.ndim < 3:
                raise ValueError("no head axis to transpose")
            c = _swap(c)
        o = oracle[name]
        if c.shape != o.shape:
            comparisons.append(Comparison(
                name, o.shape, c.shape, c.dtype.name, False, "-",
                note=f"shape mismatch: the candidate has shape {c.shape}, the oracle {o.shape}"))
            continue
        tol, text, base_err, base_bad = _threshold(name, c.dtype, o, oracle, spec, problem, conv, baselines)
        oracle[f"tol_{name}"] = tol
        comparison, passed = _compare(name, c, o, tol, text, base_err, base_bad)
        comparisons.append(comparison)
        ok[name] = passed
    return comparisons, ok, oracle


def _threshold(name, dtype, o, oracle, spec, problem, conv, baselines):
    """(tolerance, description, baseline error, baseline non-finite count) for one array."""
    dtype = np.dtype(dtype)
    gradient = name != "out"
    if spec.rule == "table":
        rtol, atol = table_tolerance(spec.table, dtype, gradient)
        return (atol + rtol * np.abs(o), f"|c − o| ≤ atol + rtol·|o|, rtol={rtol:g}, atol={atol:g} "
                f"(table {spec.table!r}, {dtype.name} {'gradients' if gradient else 'output'})", None, 0)
    finite = o[np.isfinite(o)]
    top = float(np.max(np.abs(finite))) if finite.size else 0.0
    spacing = float(np.abs(np.spacing(dtype.type(min(top, float(np.finfo(dtype).max))))))
    if spec.rule == "ulp":
        tol = spec.max_ulps * spacing
        return tol, (f"|c − o| ≤ {spec.max_ulps:g} ulp × {spacing:.3g} (spacing of max|o| = {top:.4g} in "
                     f"{dtype.name}) = {tol:.3g}"), None, 0
    factor = RATIO_FACTORS[name]
    c, combine = floor_spec(dtype)
    floor = c * float(np.finfo(dtype).eps) * oracle[f"kappa_{combine}_{name}"]
    if dtype == np.float64:
        base_err, base_bad, source = 0.0, 0, "refattn in float64 = the oracle"
    else:
        if dtype.name not in baselines:
            baselines[dtype.name] = _attention(problem, conv, dtype)
        b = baselines[dtype.name][name]
        both = np.isfinite(o) & np.isfinite(b)
        base_bad = int(np.sum(np.isfinite(o) & ~np.isfinite(b)))
        base_err = float(np.max(np.abs(b[both] - o[both]))) if both.any() else 0.0
        source = f"refattn's equation path in {dtype.name}"
    tol = factor * base_err + floor
    text = (f"max|c − o| ≤ {factor:g} × {base_err:.3g} (baseline: {source}) + {floor:.3g} (rounding-noise floor) "
            f"= {tol:.3g}")
    return tol, text, base_err, base_bad


def _elementwise_ok(c: NDArray, o: NDArray, tol) -> tuple[NDArray, NDArray, NDArray]:
    """(pass mask, |c − o| where both are finite else 0, both-finite mask)."""
    c = c.astype(np.float64)
    fin_o, fin_c = np.isfinite(o), np.isfinite(c)
    both = fin_o & fin_c
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.where(both, np.abs(c - o), 0.0)
    same_nonfinite = ~fin_o & ((np.isnan(o) & np.isnan(c)) | (~np.isnan(o) & (c == o)))
    return (both & (err <= tol)) | same_nonfinite, err, both


def _compare(name, c, o, tol, text, base_err, base_bad) -> tuple[Comparison, NDArray]:
    ok, err, both = _elementwise_ok(c, o, tol)
    c64 = c.astype(np.float64)
    fin_o = np.isfinite(o)
    same_nonfinite = ~fin_o & ok
    mismatch = ~ok & ~(both)
    stats = {}
    if both.any():
        i = np.unravel_index(np.argmax(np.where(both, err, -1.0)), o.shape)
        stats.update(max_abs_error=float(err[i]), max_abs_index=_ints(i), max_abs_values=(float(c64[i]), float(o[i])))
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            rel = np.where(both, np.where(err == 0, 0.0, err / np.abs(o)), -1.0)
            spacing = np.abs(np.spacing(o.astype(c.dtype)))
            ulp = np.where(both & np.isfinite(spacing), err / spacing, -1.0)
        i = np.unravel_index(np.argmax(rel), o.shape)
        stats.update(max_rel_error=float(rel[i]), max_rel_index=_ints(i), max_rel_values=(float(c64[i]), float(o[i])))
        i = np.unravel_index(np.argmax(ulp), o.shape)
        stats.update(max_ulp_error=float(ulp[i]), max_ulp_index=_ints(i))
        top = float(np.max(np.abs(o[fin_o])))
        with np.errstate(over="ignore"):
            scale_spacing = float(np.abs(np.spacing(c.dtype.type(min(top, float(np.finfo(c.dtype).max))))))
        stats["scale_ulp_error"] = float(err.max()) / scale_spacing
        stats["mean_abs_error"] = float(np.mean(err[both]))
        stats["rms_error"] = float(np.sqrt(np.mean(err[both] ** 2)))
    first = _ints(np.unravel_index(int(np.argmax(mismatch)), o.shape)) if mismatch.any() else None
    comparison = Comparison(
        name=name, shape=o.shape, candidate_shape=c.shape, dtype=c.dtype.name, passed=bool(ok.all()),
        threshold=text, size=int(o.size), n_failing=int(o.size - np.sum(ok)),
        nan_where_finite=int(np.sum(fin_o & np.isnan(c64))), inf_where_finite=int(np.sum(fin_o & np.isinf(c64))),
        oracle_nonfinite=int(np.sum(~fin_o)), oracle_nonfinite_matched=int(np.sum(same_nonfinite)),
        first_mismatch=first, baseline_error=base_err, baseline_nonfinite=base_bad, **stats,
    )
    return comparison, ok


def _ints(index) -> tuple:
    return tuple(int(i) for i in index)


def _fully_masked_rows(problem, conv, spec, oracle, ok) -> FullyMaskedRows:
    empty = oracle["empty"]                                        # (..., n) rows of the output
    count, total = int(np.sum(empty)), int(empty.size)
    c = problem.candidates["out"]
    if not count or ok is None:
        return FullyMaskedRows(count, total, conv.fully_masked, None)
    rows = np.broadcast_to(empty[..., None], ok.shape)
    matches = bool(ok[rows].all())
    follows = []
    for policy in FULLY_MASKED_POLICIES:
        o = oracle["out"] if policy == conv.fully_masked else \
            _attention(replace(problem, grads=False), replace(conv, fully_masked=policy), np.float64)["out"]
        tol = _threshold("out", c.dtype, o, oracle, spec, problem, conv, {})[0] if spec.rule == "table" \
            else oracle["tol_out"]
        policy_ok, _, _ = _elementwise_ok(c, o, tol)
        if policy_ok[rows].all():
            follows.append(policy)
    return FullyMaskedRows(count, total, conv.fully_masked, matches, tuple(follows))


def _alternatives(problem: _Problem, conv: _Conventions, oracle: dict) -> list[tuple[str, _Conventions]]:
    """Every convention mix-up worth trying, as (label, conventions)."""
    names = {None: "no causal mask", "top-left": 'causal="top-left" (query i sees keys j <= i)',
             "bottom-right": 'causal="bottom-right" (query i sees keys j <= i + m - n)'}
    q_seq = problem.q.shape[-2] if conv.layout == "bhnd" else problem.q.shape[-3]
    k_seq = problem.k.shape[-2] if conv.layout == "bhnd" else problem.k.shape[-3]
    d_k = problem.q.shape[-1]
    alts = []
    for alignment in (None, "top-left", "bottom-right"):
        if alignment == conv.causal or (q_seq == k_seq and "bottom-right" in (alignment, conv.causal)
                                        and alignment is not None and conv.causal is not None):
            continue                                               # n = m: the two alignments agree
        if q_seq == k_seq and alignment == "bottom-right" and conv.causal is None:
            continue
        alts.append((f"{names[alignment]} instead of {names[conv.causal]}", replace(conv, causal=alignment)))
    if conv.mask is not None:
        if conv.mask.dtype == np.bool_:
            alts.append(("the boolean mask is inverted (True = masked out, as torch.nn.MultiheadAttention)",
                         replace(conv, mask=~conv.mask)))
        alts.append(("the mask is ignored", replace(conv, mask=None)))
    tried = [conv.scale]
    for s, text in ((1.0, "scale=1 (no scaling)"), (1.0 / d_k, f"scale=1/d_k={1.0 / d_k:.6g}"),
                    (default_scale(d_k), f"scale=1/√d_k={default_scale(d_k):.6g}")):
        if not any(np.isclose(s, t, rtol=1e-9, atol=0) for t in tried):
            tried.append(s)
            alts.append((f"{text} instead of {conv.scale:.6g}", replace(conv, scale=s)))
    if np.any(oracle["empty"]):
        for policy in FULLY_MASKED_POLICIES:
            if policy != conv.fully_masked:
                alts.append((f'fully_masked="{policy}" instead of "{conv.fully_masked}"',
                             replace(conv, fully_masked=policy)))
    if problem.q.ndim >= 3 and problem.k.ndim >= 3 and problem.v.ndim >= 3:
        other = _other(conv.layout)
        alts.append((f"the candidate's outputs are in layout {other!r} {_LAYOUT_SHAPES[other]} (axes -2 and -3 "
                     "swapped)", replace(conv, outputs_transposed=True)))
        alts.append((f"the candidate reads the inputs in layout {other!r} {_LAYOUT_SHAPES[other]}",
                     replace(conv, layout=other)))
    return alts


def _try_alternatives(problem, conv, spec, oracle) -> tuple[tuple, tuple, tuple]:
    """(tried, matching, partly matching) labels; a partial match is one where some arrays pass."""
    tried, matches, partial = [], [], []
    for label, alt in _alternatives(problem, conv, oracle):
        try:
            with np.errstate(all="ignore"):
                comparisons, _, _ = _run(problem, alt, spec)
        except (ValueError, TypeError):                            # the alternative does not fit the shapes
            continue
        tried.append(label)
        passing = [c.name for c in comparisons if c.passed]
        if len(passing) == len(comparisons):
            matches.append(label)
        elif passing:
            failing = [c.name for c in comparisons if not c.passed]
            partial.append(f"{', '.join(passing)} match if {label} ({', '.join(failing)} still fail)")
    return tuple(tried), tuple(matches), tuple(partial)


def _describe(conv: _Conventions, problem: _Problem, oracle: dict) -> dict:
    d_k = problem.q.shape[-1]
    scale = f"{conv.scale:.6g}" + (" (1/√d_k)" if np.isclose(conv.scale, default_scale(d_k), rtol=1e-12) else "")
    if conv.mask is None:
        mask = "none"
    elif conv.mask.dtype == np.bool_:
        mask = f"bool {tuple(conv.mask.shape)} (True = may attend)"
    else:
        mask = f"float bias {tuple(conv.mask.shape)}"
    described = {"causal": conv.causal or "none", "scale": scale, "fully_masked": repr(conv.fully_masked),
                 "layout": f"{conv.layout!r} {_LAYOUT_SHAPES[conv.layout]}", "mask": mask}
    groups = oracle["groups"]
    if groups > 1:
        h_axis = -3 if conv.layout == "bhnd" else -2
        described["heads"] = (f"grouped-query, h={problem.q.shape[h_axis]} query heads over "
                              f"h_kv={problem.k.shape[h_axis]} key/value heads ({groups} per group)")
    return described
