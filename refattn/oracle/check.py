r"""Check another implementation's attention output (and gradients) against refattn's float64 oracle.

    oracle     O = softmax(Q Kᵀ·s + B) V in float64, dQ, dK, dV from refattn.oracle.vjp.sdpa_vjp
    baseline   the same two functions run in the candidate's dtype (what an honest implementation gets)
    ratio      max|c − O| ≤ 2·max|b − O| + floor  (3× for gradients; FlashAttention's rule)
    table      |c − O| ≤ atol + rtol·|O|          (torch.testing, xFormers or JAX defaults)
    ulp        |c − O| ≤ N ulp(max|O|)            (ULPs of the candidate's dtype)

When a check fails, the usual convention mix-ups are tried one at a time (the other causal
alignment, the inverted mask, no scale, the other layout, another fully-masked policy ...) and the
report names each one under which the candidate would pass (:mod:`refattn.oracle.diagnose`).
"""
from __future__ import annotations

from dataclasses import dataclass, is_dataclass, replace

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .. import common
from ..common.checks import as_float, causal_alignment, check_choice, check_scale, default_scale
from ..common.ints import check_positive_int
from ..core.softmax import FULLY_MASKED_POLICIES
from .diagnose import describe, masked_nonfinite_hint, try_alternatives
from .evaluate import Conventions, Evaluation, Problem, evaluate
from .precision import BFLOAT16, Format, bfloat16_values, host_array, number_format, spacing
from .report import Comparison, FullyMaskedRows, Report, compare_arrays, elementwise_ok
from .shapes import LAYOUTS, swap_heads
from .tolerances import RATIO_FACTORS, RuleSpec, floor_spec, rule_spec, table_tolerance
from .vjp import GRADIENT_IDS, record_vjp

__all__ = ["LAYOUTS", "assert_close", "check", "check_mechanism"]

_CANDIDATE_DTYPES = (np.float16, np.float32, np.float64)


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
    memory_budget: int | None = None,
    candidate_dtype: str | None = None,
) -> Report:
    r"""Compare a candidate attention output (and gradients) with refattn's float64 oracle.

    .. math::

        O = \operatorname{softmax}\Big(Q K^\top s + B\Big) V, \qquad
        \max |c - O| \le 2 \max |b - O| + \text{floor} \quad (\text{rule "ratio"})

    Parameters
    ----------
    candidate : (..., n, d_v) array_like of float16, float32, float64 or bfloat16
        The other implementation's output for these inputs. Its dtype is "the candidate's dtype":
        the baseline runs in it and ULPs and table entries are taken for it. Another framework's
        tensor is read by duck typing (:func:`refattn.oracle.precision.host_array`; a bfloat16
        tensor, e.g. PyTorch's, through ``.float()``, exactly), which is also how ``q``, ``k``,
        ``v``, ``mask``, ``d_out`` and the gradients are read.
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
    memory_budget : int, optional
        Bytes the oracle's, the baseline's and the error model's ``(..., n, m)`` arrays may take at
        once. Above it the output and the gradients are computed by blocks of query rows (the same
        arithmetic per row; dK and dV summed over the blocks; see Notes). Default
        :func:`refattn.common.memory_budget` (4 GiB unless set).
    candidate_dtype : {"bfloat16"}, optional
        The format of the candidate's values when its array does not say it: "bfloat16" for a
        bfloat16 result cast to float32 (or float64), e.g. ``tensor.float().numpy()``; every value
        must then be a bfloat16 number (``ValueError`` otherwise). A bfloat16 tensor or
        ``ml_dtypes`` array needs no such hint.

    Returns
    -------
    Report
        ``report.passed``, one :class:`~refattn.oracle.report.Comparison` per array, the fully
        masked rows, and when it fails the alternative conventions under which it would pass;
        ``print(report)`` reads as a multi-line summary.

    Raises
    ------
    TypeError
        A candidate that is not float16/32/64 or bfloat16, integer or complex inputs, a mask
        neither bool nor float.
    ValueError
        Unknown rule, table, layout or policy; inputs with fewer than two dimensions or shapes that
        do not fit each other; gradients without ``d_out``. (A candidate of the wrong shape is not an error: the
        report fails it, and names a transposed layout if that is what fits.)

    Notes
    -----
    **Same-dtype baseline.** :func:`refattn.scaled_dot_product_attention` and
    :func:`~refattn.oracle.vjp.sdpa_vjp` with ``dtype=`` the candidate's dtype (the inputs cast to
    it, every intermediate kept in it). A float64 candidate's baseline is the oracle itself
    (error 0), so its threshold is the floor alone. A bfloat16 candidate's baseline is the same
    equation path with bfloat16 rounding emulated on float32
    (:func:`~refattn.oracle.precision.sdpa_bfloat16`: inputs, scores, weights and output rounded
    to bfloat16, products and softmax accumulated in float32); its gradients are judged by rule
    "table" only (``ValueError`` under "ratio" and "ulp": refattn has no bfloat16 backward pass).

    **Floor.** Twice the baseline error can be accidentally tiny (a lucky rounding, a short
    sequence), so the ratio rule adds :math:`c\,\varepsilon \max \kappa`, with
    :math:`\varepsilon` the candidate dtype's machine epsilon and :math:`\kappa` the first-order
    effect of one rounding of every score (relative to :math:`|s| \sum_l |q_{il}||k_{jl}| +
    |B_{ij}|`, so large logits and cancellation raise it), every weight and every product
    (:func:`~refattn.oracle.tolerances.forward_noise`, ``gradient_noise``): for float16 the
    root-sum-square of those independent errors (their typical size; bfloat16 too), for float32
    their worst-case sum, for float64 (whose baseline is the oracle itself) the worst-case sum
    doubled. For outputs :math:`c` is 1/4 (float32) or 1/8 (float16, bfloat16), small enough that
    the threshold is FlashAttention's 2× plus a small margin; for gradients 1 (2 for float64).
    :func:`~refattn.oracle.tolerances.floor_spec` gives the reasons and the measurements, and
    ``python -m refattn bench oracle`` the false-rejection and detection rates.

    **Alternatives.** On failure, each of these replaces one convention and the whole comparison is
    redone (oracle, baseline, floor): the other causal alignments and no causal mask, the inverted
    boolean mask, no mask, ``scale`` 1, :math:`1/d_k` and :math:`1/\sqrt{d_k}`, the other
    fully-masked policies (when a row is fully masked), the candidate's arrays in the other layout
    and the inputs read in the other layout. Each one under which every array passes is reported as
    "matches if ..."; when none does, those under which some arrays pass are listed as "partly".

    **Memory.** A dense evaluation holds up to
    :data:`~refattn.oracle.evaluate.DENSE_ARRAYS` (9) float64 arrays of shape ``(..., n, m)``. When
    they exceed ``memory_budget``, the oracle, the baseline and the error model are computed for
    blocks of query rows in turn, each row over all m keys by the same equations, in memory
    proportional to the block: n = m = 32768 with 8 heads takes 2.8 GiB beyond the inputs.
    Gradients too: dQ row by row, dK and dV (sums over every query row) and their error model as
    the sums of the blocks' parts; the float64 oracle's gradients under ``rule="table"`` come from
    the blocked backward pass (``sdpa_vjp(method="blocked")``), which never forms n × m.

    **Non-finite values** are never covered by a tolerance: a NaN or Inf where the oracle is
    finite fails; a NaN (Inf) in the oracle passes only where the candidate has NaN (the same Inf)
    too, and the report counts them either way. An alternative convention is never accepted
    because NaN matched NaN where the oracle is finite (except the NaN rows of the policy "nan").
    When the candidate differs only by NaN or Inf where a non-finite value in a masked-out key or
    value would reach it if masking were not by selection (a masked NaN key makes its score NaN
    whatever the additive mask; a masked NaN value gives 0 × NaN = NaN), the report's hint says
    so (:func:`~refattn.oracle.diagnose.masked_nonfinite_hint`).

    Examples
    --------
    >>> from refattn import scaled_dot_product_attention
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
    if candidate_dtype is not None:
        check_choice("candidate_dtype", candidate_dtype, (BFLOAT16,))
    cands, formats = {}, {}
    for name, label, x in (("out", "candidate", candidate), ("dq", "dq", dq), ("dk", "dk", dk), ("dv", "dv", dv)):
        if x is not None:
            cands[name], formats[name] = _as_candidate(label, x, candidate_dtype)
    q, k, v = (as_float(name, host_array(name, x)[0], min_ndim=2) for name, x in (("q", q), ("k", k), ("v", v)))
    grads = len(cands) > 1
    if grads and d_out is None:
        raise ValueError("dq, dk and dv are checked against the gradient for d_out: pass d_out, the upstream "
                         "gradient the candidate's gradients were computed with")
    grad_formats = [formats[name] for name in ("dq", "dk", "dv") if name in formats]
    if rule != "table" and BFLOAT16 in grad_formats:
        raise ValueError(f"bfloat16 gradients are judged by rule='table' only (refattn has no bfloat16 backward pass "
                         f"to serve as the baseline of rule={rule!r}); got dq, dk, dv in {', '.join(grad_formats)}")
    d_out = as_float("d_out", host_array("d_out", d_out)[0]) if grads else None
    check_choice("layout", layout, LAYOUTS)
    check_choice("fully_masked", fully_masked, FULLY_MASKED_POLICIES)
    spec = rule_spec(rule, table, max_ulps)
    alignment = causal_alignment(causal)
    if layout == "bnhd":
        for name, x in (("q", q), ("k", k), ("v", v), ("d_out", d_out)):
            if x is not None and x.ndim < 3:
                raise ValueError(f"layout 'bnhd' needs {name} of shape (..., n, h, d), got shape {x.shape}")
    scale = default_scale(q.shape[-1]) if scale is None else check_scale(scale)
    if mask is not None:
        mask = host_array("mask", mask)[0]
        if mask.dtype != np.bool_ and mask.dtype.kind != "f":
            raise TypeError(f"mask must be bool (True = may attend) or a float bias, got dtype {mask.dtype} "
                            f"with shape {mask.shape}")
    conv = Conventions(alignment, scale, fully_masked, mask, layout)
    problem = Problem(q, k, v, d_out, cands, grads, common.memory_budget() if memory_budget is None
                      else check_positive_int("memory_budget", memory_budget), formats)

    run = _run(problem, conv, spec)
    passed = all(c.passed for c in run.comparisons)
    fully = _fully_masked_rows(problem, conv, spec, run)
    tried, matches, partial, hints = (), (), (), ()
    if not passed:
        tried, matches, partial = try_alternatives(problem, conv, run.oracle,
                                                   lambda p, alt: _alternative(p, alt, spec, run))
        hint = masked_nonfinite_hint(problem, conv, run.passed.get("out"))
        hints = () if hint is None else (hint,)
    return Report(
        passed=passed,
        rule=rule,
        rule_detail=spec.detail,
        dtype=formats["out"],
        conventions=describe(conv, problem, run.oracle),
        comparisons=tuple(run.comparisons),
        fully_masked=fully,
        alternatives=matches,
        alternatives_tried=tried,
        partial_alternatives=() if matches else partial,
        hints=hints,
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
    >>> from refattn import scaled_dot_product_attention
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
class _Run:
    """Every candidate array compared under one set of conventions."""

    comparisons: list[Comparison]
    passed: dict[str, NDArray]                 # elementwise pass mask of each array whose shape fits
    tolerances: dict[str, float | NDArray]     # the tolerance each array was held to
    oracle: Evaluation


def _as_candidate(name: str, x, declared: str | None) -> tuple[NDArray, str]:
    """``(array, format name)`` of a candidate array: a float16/32/64 array, or float32 holding bfloat16 values."""
    arr, fmt = host_array(name, x)
    if fmt is None and declared == BFLOAT16:
        arr, fmt = bfloat16_values(name, arr), BFLOAT16
    if fmt == BFLOAT16:
        return arr, fmt
    if arr.dtype.type not in _CANDIDATE_DTYPES:
        raise TypeError(f"{name} must be a float16, float32, float64 or bfloat16 array, got dtype {arr.dtype} with "
                        f"shape {arr.shape}")
    return arr, arr.dtype.name


def _run(problem: Problem, conv: Conventions, spec: RuleSpec) -> _Run:
    """Compare every candidate array with the oracle under ``conv``."""
    noise = {floor_spec(fmt)[1] for fmt in problem.formats.values()} if spec.rule == "ratio" else ()
    oracle = evaluate(problem, conv, np.float64, noise=noise)
    baselines = {}
    comparisons, passed, tolerances = [], {}, {}
    for name, c in problem.candidates.items():
        if conv.outputs_transposed:
            if c.ndim < 3:
                raise ValueError("no head axis to transpose")
            c = swap_heads(c)
        o = oracle.arrays[name]
        if c.shape != o.shape:
            comparisons.append(Comparison(
                name, o.shape, c.shape, problem.formats[name], False, "-",
                note=f"shape mismatch: the candidate has shape {c.shape}, the oracle {o.shape}"))
            continue
        fmt = number_format(problem.formats[name])
        tol, text, base_err, base_bad = _threshold(name, fmt, oracle, spec, problem, conv, baselines)
        tolerances[name] = tol
        comparison, passed[name] = compare_arrays(name, c, o, tol, text, base_err, base_bad, fmt)
        comparisons.append(comparison)
    return _Run(comparisons, passed, tolerances, oracle)


def _alternative(problem: Problem, alt: Conventions, spec: RuleSpec, run: _Run) -> list[Comparison]:
    """The comparisons under another convention, where NaN matching NaN never counts as agreement.

    An element that is non-finite in the alternative's oracle but finite in the oracle of the
    conventions asked for fails, whatever the candidate holds there: that NaN comes from a
    non-finite input the alternative lets through (a masked-out key under "the mask is ignored"),
    and a candidate that propagates it does not follow that convention. The exception is the NaN
    that the fully-masked policy "nan" puts in the rows (and dq rows) of queries that see no key.
    """
    alt_run = _run(problem, alt, spec)
    comparisons = []
    for c in alt_run.comparisons:
        ok, o, main = alt_run.passed.get(c.name), alt_run.oracle.arrays[c.name], run.oracle.arrays[c.name]
        if ok is not None and c.passed and o.shape == main.shape:
            borrowed = ~np.isfinite(o) & np.isfinite(main)
            if alt.fully_masked == "nan" and c.name in ("out", "dq"):
                borrowed &= ~np.broadcast_to(alt_run.oracle.empty[..., None], o.shape)
            elif alt.fully_masked == "nan":                        # a NaN row poisons its batch element's dk, dv
                borrowed[...] = False
            if np.any(borrowed & ok):
                c = replace(c, passed=False)
        comparisons.append(c)
    return comparisons


def _threshold(name, fmt: Format, oracle: Evaluation, spec: RuleSpec, problem, conv, baselines: dict):
    """(tolerance, description, baseline error, baseline non-finite count) for one array.

    ``baselines`` caches the same-dtype evaluation by format name.
    """
    o = oracle.arrays[name]
    if spec.rule != "ratio":
        return _fixed_threshold(name, o, fmt, spec)
    factor = RATIO_FACTORS[name]
    c, combine = floor_spec(fmt.name, name != "out")
    floor = c * fmt.eps * oracle.noise[combine][name]
    if fmt.name == "float64":
        base_err, base_bad, source = 0.0, 0, "refattn in float64 = the oracle"
    else:
        if fmt.name not in baselines:
            baselines[fmt.name] = evaluate(problem, conv, fmt.name)
        b = baselines[fmt.name].arrays[name]
        both = np.isfinite(o) & np.isfinite(b)
        base_bad = int(np.sum(np.isfinite(o) & ~np.isfinite(b)))
        base_err = float(np.max(np.abs(b[both] - o[both]))) if both.any() else 0.0
        source = f"refattn's equation path in {fmt.name}" + (" (bfloat16 rounding emulated)" if fmt.name == BFLOAT16
                                                              else "")
    tol = factor * base_err + floor
    text = (f"max|c − o| ≤ {factor:g} × {base_err:.3g} (baseline: {source}) + {floor:.3g} (rounding-noise floor) "
            f"= {tol:.3g}")
    return tol, text, base_err, base_bad


def _fixed_threshold(name: str, o: NDArray, fmt: Format, spec: RuleSpec):
    """(tolerance, description, None, 0) of the rules that need no baseline: "table" and "ulp"."""
    gradient = name != "out"
    if spec.rule == "table":
        rtol, atol = table_tolerance(spec.table, fmt.name, gradient)
        return (atol + rtol * np.abs(o), f"|c − o| ≤ atol + rtol·|o|, rtol={rtol:g}, atol={atol:g} "
                f"(table {spec.table!r}, {fmt.name} {'gradients' if gradient else 'output'})", None, 0)
    finite = o[np.isfinite(o)]
    top = float(np.max(np.abs(finite))) if finite.size else 0.0
    gap = float(spacing(min(top, fmt.max), fmt))
    tol = spec.max_ulps * gap
    return tol, (f"|c − o| ≤ {spec.max_ulps:g} ulp × {gap:.3g} (spacing of max|o| = {top:.4g} in "
                 f"{fmt.name}) = {tol:.3g}"), None, 0


def _fully_masked_rows(problem: Problem, conv: Conventions, spec: RuleSpec, run: _Run) -> FullyMaskedRows:
    """The fully masked query rows, and which policies the candidate's output follows there."""
    empty = run.oracle.empty                                       # (..., n) rows of the output
    count, total = int(np.sum(empty)), int(empty.size)
    c = problem.candidates["out"]
    ok = run.passed.get("out")
    if not count or ok is None:
        return FullyMaskedRows(count, total, conv.fully_masked, None)
    rows = np.broadcast_to(empty[..., None], ok.shape)
    matches = bool(ok[rows].all())
    follows = []
    for policy in FULLY_MASKED_POLICIES:
        other = run.oracle if policy == conv.fully_masked else \
            evaluate(replace(problem, grads=False), replace(conv, fully_masked=policy), np.float64)
        tol = run.tolerances["out"] if spec.rule != "table" else \
            _threshold("out", number_format(problem.formats["out"]), other, spec, problem, conv, {})[0]
        policy_ok, _, _ = elementwise_ok(c, other.arrays["out"], tol)
        if policy_ok[rows].all():
            follows.append(policy)
    return FullyMaskedRows(count, total, conv.fully_masked, matches, tuple(follows))


# ------------------------------------------------------------------------------ any registered mechanism


def check_mechanism(candidate: ArrayLike, q: ArrayLike, k: ArrayLike, v: ArrayLike, *, mechanism: str,
                    causal: bool | str = False, options: dict | None = None, draws: dict | None = None,
                    d_out: ArrayLike | None = None, dq: ArrayLike | None = None, dk: ArrayLike | None = None,
                    dv: ArrayLike | None = None, rule: str = "ratio", table: str | None = None,
                    max_ulps: float | None = None) -> Report:
    r"""Check a candidate's output (and gradients) of any registered attention mechanism against refattn.

    The oracle is the registry entry's uniform ``apply(q, k, v, causal=causal, **options, **draws)``
    in float64, and for the ids of :data:`~refattn.oracle.vjp.GRADIENT_IDS` its gradients
    (:func:`~refattn.oracle.vjp.record_vjp`). The rules are :func:`check`'s; what the ratio rule's
    baseline and floor are for a mechanism without refattn's same-dtype equation path is in Notes.
    The test vectors of :mod:`refattn.oracle.vectors` hold every argument.

    Parameters
    ----------
    candidate : array_like
        The candidate's output, of ``apply``'s output shape; float16, float32 or float64.
    q, k, v : array_like
        ``apply``'s inputs.
    mechanism : str
        A registered id with an ``apply``.
    causal : {False, True, "top-left", "bottom-right"}, default False
    options, draws : dict, optional
        ``apply``'s other options, and every random draw and learned parameter it used.
    d_out : array_like, optional
        The upstream gradient; needed with ``dq``, ``dk``, ``dv``.
    dq, dk, dv : array_like, optional
        The candidate's gradients of q, k and v (only for the ids refattn has gradients of).
    rule, table, max_ulps
        As in :func:`check`.

    Returns
    -------
    Report
        As :func:`check`'s; on failure ``alternatives`` names the other causal settings of the
        mechanism under which the candidate would pass.

    Raises
    ------
    TypeError
        A candidate that is not float16/32/64.
    ValueError
        An unknown id or one without ``apply``, gradients for an id without them or without
        ``d_out``, and whatever ``apply`` refuses.

    Notes
    -----
    **Baseline.** Refattn's mechanisms compute in float64 only, so the same-dtype baseline of a
    float16 or float32 candidate is the float64 ``apply`` (and gradients) run on the inputs, the
    upstream gradient, the options and the draws rounded to the candidate's dtype, its result
    rounded to that dtype: the error every implementation storing its tensors in that dtype makes.
    A float64 candidate's baseline is the oracle (error 0).

    **Floor.** :math:`2 (m + d_k)\, \varepsilon \max|o|`: one rounding of the candidate's dtype
    per term of a sum over the m keys and the d_k channels, at the array's scale, doubled as the
    rule doubles the baseline (FlashAttention 3's floor is the noise of one operation at the
    array's scale; a mechanism chains several such sums).

    Examples
    --------
    >>> from refattn import registry
    >>> rng = np.random.default_rng(0)
    >>> q, (k, v) = rng.standard_normal((5, 4)), rng.standard_normal((2, 7, 4))
    >>> result = registry.get("performer_positive").apply(q, k, v, causal=True, rng=1, return_draws=True)
    >>> check_mechanism(result.output.astype(np.float32), q, k, v, mechanism="performer_positive", causal=True,
    ...                 draws=result.draws).passed
    True
    >>> check_mechanism(result.output, q, k, v, mechanism="performer_positive", draws=result.draws).alternatives
    ('causal=True instead of False',)
    """
    from .. import registry

    try:
        mech = registry.get(mechanism)
    except KeyError as error:
        raise ValueError(error.args[0]) from None
    if mech.apply is None:
        raise ValueError(f"mechanism {mechanism!r} is a component: it has no apply to check")
    cands = {}
    for name, label, x in (("out", "candidate", candidate), ("dq", "dq", dq), ("dk", "dk", dk), ("dv", "dv", dv)):
        if x is not None:
            cands[name], fmt = _as_candidate(label, x, None)
            if fmt == BFLOAT16:
                raise ValueError(f"{label}: bfloat16 candidates are judged for sdpa (check) only; the other mechanisms "
                                 "have no bfloat16 baseline yet: pass the values as float32")
    grads = len(cands) > 1
    if grads and mechanism not in GRADIENT_IDS:
        raise ValueError(f"refattn has gradients of {', '.join(GRADIENT_IDS)} only, not of {mechanism!r}: "
                         "pass no dq, dk, dv")
    if grads and d_out is None:
        raise ValueError("dq, dk and dv are checked against the gradient for d_out: pass d_out, the upstream "
                         "gradient the candidate's gradients were computed with")
    q, k, v = (as_float(name, x, min_ndim=2) for name, x in (("q", q), ("k", k), ("v", v)))
    d_out = as_float("d_out", d_out) if grads else None
    spec = rule_spec(rule, table, max_ulps)
    options, draws = dict(options or {}), dict(draws or {})

    def run(setting):
        oracle = _mechanism_arrays(mech, q, k, v, d_out, setting, options, draws, grads, np.float64)
        baselines, comparisons = {}, []
        for name, c in cands.items():
            o = oracle[name]
            if c.shape != o.shape:
                comparisons.append(Comparison(
                    name, o.shape, c.shape, c.dtype.name, False, "-",
                    note=f"shape mismatch: the candidate has shape {c.shape}, the oracle {o.shape}"))
                continue
            if spec.rule != "ratio":
                tol, text, base_err, base_bad = _fixed_threshold(name, o, number_format(c.dtype), spec)
            else:
                tol, text, base_err, base_bad = _mechanism_ratio(name, o, c.dtype, k.shape[-2] + q.shape[-1],
                                                                 lambda dt: _mechanism_arrays(
                                                                     mech, q, k, v, d_out, setting, options,
                                                                     draws, grads, dt), baselines)
            comparisons.append(compare_arrays(name, c, o, tol, text, base_err, base_bad, number_format(c.dtype))[0])
        return comparisons

    comparisons = run(causal)
    passed = all(c.passed for c in comparisons)
    tried, matches = [], []
    if not passed:
        for setting in mech.causal_settings:
            if setting == causal:
                continue
            text = f"causal={setting!r} instead of {causal!r}"
            tried.append(text)
            try:
                if all(c.passed for c in run(setting)):
                    matches.append(text)
            except ValueError:                                     # a setting these shapes cannot take
                pass
    rows = int(np.prod(cands["out"].shape[:-1]))
    return Report(
        passed=passed, rule=rule, rule_detail=spec.detail if spec.rule != "ratio" else (
            "FlashAttention's: max|c − o| ≤ 2 × max|b − o| (output), 3 × (gradients), + a rounding-noise floor "
            "2·(m + d_k)·ε·max|o|; o the mechanism's float64 apply, b the same on the inputs, options and draws "
            "rounded to the candidate's dtype"),
        dtype=cands["out"].dtype.name,
        conventions={"mechanism": mechanism, "causal": repr(causal),
                     "options": ", ".join(f"{key}={value!r}" for key, value in options.items()) or "defaults",
                     "draws": ", ".join(draws) or "none"},
        comparisons=tuple(comparisons),
        fully_masked=FullyMaskedRows(0, rows, str(options.get("fully_masked", "zero")), None),
        alternatives=tuple(matches), alternatives_tried=tuple(tried),
    )


def _mechanism_arrays(mech, q, k, v, d_out, causal, options, draws, grads: bool, dtype) -> dict:
    """``{"out", ["dq", "dk", "dv"]}`` of ``mech`` in float64, on its arguments rounded to ``dtype`` first (and the
    results after) unless ``dtype`` is float64."""
    if dtype != np.float64:
        from ..training.tree import tree_map  # frozen dataclasses and tuples of arrays

        def rounded(x):
            return x.astype(dtype).astype(np.float64) if isinstance(x, np.ndarray) and x.dtype.kind == "f" else x

        q, k, v = (rounded(x) for x in (q, k, v))
        d_out = None if d_out is None else rounded(d_out)
        options, draws = ({key: tree_map(rounded, value) if isinstance(value, (np.ndarray, tuple, list)) or
                           is_dataclass(value) else value for key, value in tree.items()}
                          for tree in (options, draws))
    arrays = {"out": mech.apply(q, k, v, causal=causal, **options, **draws).output}
    if grads:
        arrays["dq"], arrays["dk"], arrays["dv"], _ = record_vjp(mech.id, q, k, v, d_out, causal=causal,
                                                                 options=options, draws=draws)
    if dtype != np.float64:
        arrays = {name: x.astype(dtype) for name, x in arrays.items()}
    return arrays


def _mechanism_ratio(name: str, o: NDArray, dtype: np.dtype, terms: int, baseline, baselines: dict):
    """The ratio rule's (tolerance, description, baseline error, baseline non-finite count) for a mechanism."""
    dtype = np.dtype(dtype)
    finite = o[np.isfinite(o)]
    floor = 2.0 * terms * float(np.finfo(dtype).eps) * (float(np.max(np.abs(finite))) if finite.size else 0.0)
    if dtype == np.float64:
        base_err, base_bad, source = 0.0, 0, "refattn in float64 = the oracle"
    else:
        if dtype.name not in baselines:
            baselines[dtype.name] = baseline(dtype)
        b = baselines[dtype.name][name].astype(np.float64)
        both = np.isfinite(o) & np.isfinite(b)
        base_bad = int(np.sum(np.isfinite(o) & ~np.isfinite(b)))
        base_err = float(np.max(np.abs(b[both] - o[both]))) if both.any() else 0.0
        source = f"refattn on the inputs rounded to {dtype.name}"
    factor = RATIO_FACTORS[name]
    tol = factor * base_err + floor
    return tol, (f"max|c − o| ≤ {factor:g} × {base_err:.3g} (baseline: {source}) + {floor:.3g} (rounding-noise "
                 f"floor, {terms} terms) = {tol:.3g}"), base_err, base_bad
