"""``python -m refattn bench oracle``: the ratio rule's false-rejection and detection rates over random problems.

Each problem is drawn from a seeded generator: batch and heads, n from 1 to 48 queries, m from 1 to
160 keys, d_k from 1 to 128, no mask, key padding, a random boolean mask, a causal mask (either
alignment) or an additive bias, logits scaled by 0.25 to 4 (q and k both multiplied), values from
1e-2 to 100 with an offset. Every problem is judged by :func:`refattn.oracle.check` with its default
rule ("ratio": FlashAttention's 2× the same-dtype baseline's error, plus a rounding-noise floor) for

honest implementations, which must all pass (false-rejection rate 0):
    refattn's own paths in float32, float16 and bfloat16 (the baselines themselves), and
    :func:`online_attention`, an online softmax written independently of refattn's equation path
    (key blocks visited last to first, running maximum and sum), in float32, in float16 with
    float32 accumulators (FlashAttention's kernels) and in bfloat16 (weights and output stored in
    bfloat16, as PyTorch's CPU kernel);

seeded bugs, which must fail (detection rate): the scale forgotten or 1/d_k, the causal mask
dropped, aligned the other way or off by one, the boolean mask inverted or ignored, the last key
dropped, each value read from the next key, and (a precision bug) float16 weights summed key by key
in float16. A convention bug counts only on problems where it changes the exact (float64) output by
more than 1% of its largest value (dropping a key of weight 1e-30 is no bug to detect); the others
are reported as not applicable.
"""
from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from ..argtypes import positive_int
from ..core.sdpa import scaled_dot_product_attention
from ..masks import attention_mask
from ..oracle.check import check
from ..oracle.precision import BFLOAT16, round_bfloat16

__all__ = ["BUGS", "HONEST", "add_arguments", "check_arguments", "measure", "online_attention", "random_problem",
           "run"]

MATERIAL = 1e-2
"""A convention bug counts where it moves the exact output by more than this fraction of max|O|."""


def random_problem(rng: np.random.Generator) -> dict:
    """One random attention problem: ``q, k, v`` (float64) and the conventions ``mask``, ``causal``, ``scale``."""
    b, h = int(rng.integers(1, 3)), int(rng.choice([1, 2, 4]))
    n, m = int(rng.integers(1, 49)), int(np.exp(rng.uniform(0, np.log(160))))
    d_k, d_v = int(rng.choice([1, 4, 16, 64, 128])), int(rng.choice([1, 8, 32, 64]))
    logits = float(rng.choice([0.25, 0.5, 1.0, 2.0, 4.0]))          # q and k each scaled by √logits
    q = rng.standard_normal((b, h, n, d_k)) * np.sqrt(logits)
    k = rng.standard_normal((b, h, m, d_k)) * np.sqrt(logits)
    v = (rng.standard_normal((b, h, m, d_v)) + rng.choice([0.0, 1.0])) * float(rng.choice([1e-2, 1.0, 100.0]))
    kind = str(rng.choice(["none", "padding", "random", "causal", "causal", "bias"]))
    mask, causal = None, False
    if kind == "padding":
        mask = (np.arange(m) < rng.integers(1, m + 1, size=(b, 1, 1, 1)))       # (b, 1, 1, m)
    elif kind == "random":
        mask = rng.random((b, 1, n, m)) < rng.uniform(0.3, 0.9)
    elif kind == "causal":
        causal = str(rng.choice(["top-left", "bottom-right"]))
    elif kind == "bias":
        mask = -np.abs(np.arange(n)[:, None] - np.arange(m)) * float(rng.uniform(0.01, 0.5))   # ALiBi-like
    return {"q": q, "k": k, "v": v, "mask": mask, "causal": causal, "scale": 1.0 / np.sqrt(d_k), "kind": kind}


def online_attention(q, k, v, allowed, bias, scale: float, dtype: str = "float32", block: int = 16,
                     key_order: int = -1) -> np.ndarray:
    """Attention by an online softmax over key blocks, written without refattn's equation path.

    ``dtype`` "float32": everything in float32. "float16": float16 inputs and output, float32 scores,
    running sums and accumulator (FlashAttention's kernels). "bfloat16": bfloat16 inputs, the
    unnormalised weights rounded to bfloat16 before they multiply V, float32 accumulation, the
    output stored in bfloat16 (PyTorch's CPU kernel). Blocks of ``block`` keys are visited in
    ``key_order`` (-1: last to first). ``allowed`` (..., n, m) bool; ``bias`` float or None. A
    query that sees no key gets 0.
    """
    store = {"float32": lambda x: x.astype(np.float32), "float16": lambda x: x.astype(np.float16),
             BFLOAT16: round_bfloat16}[dtype]
    f32 = np.float32
    q, k, v = (store(x).astype(f32) for x in (q, k, v))
    m = k.shape[-2]
    shape = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], allowed.shape[:-2])
    acc = np.zeros((*shape, q.shape[-2], v.shape[-1]), f32)
    row_max = np.full((*shape, q.shape[-2], 1), -np.inf, f32)
    row_sum = np.zeros((*shape, q.shape[-2], 1), f32)
    starts = list(range(0, m, block))[::key_order]
    for j0 in starts:
        keys = slice(j0, min(j0 + block, m))
        S = (q @ np.swapaxes(k[..., keys, :], -1, -2)) * f32(scale)
        if bias is not None:
            S = S + np.broadcast_to(bias, (*S.shape[:-1], m))[..., keys].astype(f32)
        S = np.where(allowed[..., keys], S, -np.inf)
        new_max = np.maximum(row_max, S.max(axis=-1, keepdims=True))
        shift = np.where(new_max == -np.inf, f32(0), new_max)
        P = np.exp(S - shift)
        rescale = np.exp(np.where(row_max == -np.inf, -np.inf, row_max - shift)).astype(f32)
        row_sum = row_sum * rescale + P.sum(axis=-1, keepdims=True)
        P = round_bfloat16(P) if dtype == BFLOAT16 else P
        acc = acc * rescale + P @ v[..., keys, :]
        row_max = new_max
    seen = row_sum > 0
    return store(np.where(seen, acc / np.where(seen, row_sum, 1), 0))


_GIVEN = object()                                                  # "the problem's own mask"


def _allowed(p: dict, causal=None, mask=_GIVEN):
    """(allowed (..., n, m) bool, bias or None) of a problem, with its causal mask or mask replaced."""
    n, m = p["q"].shape[-2], p["k"].shape[-2]
    allowed, bias = attention_mask(p["mask"] if mask is _GIVEN else mask,
                                   p["causal"] if causal is None else causal, n, m, np.float64)
    allowed = np.ones((n, m), bool) if allowed is None else allowed
    return allowed, bias


def _online(p: dict, dtype: str = "float32", *, causal=None, mask=_GIVEN, scale=None, **kwargs):
    allowed, bias = _allowed(p, causal, mask)
    return online_attention(p["q"], p["k"], p["v"], allowed, bias, p["scale"] if scale is None else scale,
                            dtype, **kwargs)


def _refattn(dtype: str) -> Callable:
    if dtype == BFLOAT16:
        from ..oracle.precision import sdpa_bfloat16
        return lambda p: sdpa_bfloat16(p["q"], p["k"], p["v"], p["mask"], causal=p["causal"], scale=p["scale"],
                                       fully_masked="zero")[0]
    return lambda p: scaled_dot_product_attention(p["q"], p["k"], p["v"], p["mask"], causal=p["causal"],
                                                  scale=p["scale"], dtype=dtype)


HONEST = {
    "refattn float32": (_refattn("float32"), "float32"),
    "refattn float16": (_refattn("float16"), "float16"),
    "refattn bfloat16": (_refattn(BFLOAT16), BFLOAT16),
    "online float32": (lambda p: _online(p, "float32"), "float32"),
    "online float16": (lambda p: _online(p, "float16"), "float16"),
    "online bfloat16": (lambda p: _online(p, BFLOAT16), BFLOAT16),
}
"""name -> (implementation(problem) -> output, its format): honest implementations."""


def _other_alignment(p):
    return "top-left" if p["causal"] == "bottom-right" else "bottom-right"


def _off_by_one(p):
    n, m = p["q"].shape[-2], p["k"].shape[-2]
    delta = m - n if p["causal"] == "bottom-right" else 0
    strict = np.arange(m) < np.arange(n)[:, None] + delta          # j < i: the diagonal masked too
    given = p["mask"] if p["mask"] is not None and p["mask"].dtype == np.bool_ else True
    return (given & strict) if p["causal"] else None


def _bug(p, dtype="float32", **change):
    """The online float32 implementation with one convention changed; float64 with dtype="float64"."""
    if dtype == "float64":                                         # the bug's exact effect
        allowed, bias = _allowed(p, change.get("causal"), change.get("mask", _GIVEN))
        v = change.get("v", p["v"])
        out = scaled_dot_product_attention(p["q"], p["k"], v, allowed if bias is None else
                                           np.where(allowed, bias, -np.inf), scale=change.get("scale", p["scale"]))
        return out
    q = dict(p, v=change.pop("v")) if "v" in change else p
    return _online(q, dtype, **change)


def _float16_sums(p):
    """Weights in float16 summed key by key in float16 (a precision bug)."""
    allowed, bias = _allowed(p)
    q, k, v = (p[x].astype(np.float16) for x in ("q", "k", "v"))
    S = (q @ np.swapaxes(k, -1, -2)).astype(np.float16) * np.float16(p["scale"])
    if bias is not None:
        S = S + bias.astype(np.float16)
    S = np.where(allowed, S, -np.inf).astype(np.float16)
    top = S.max(axis=-1, keepdims=True)
    E = np.exp(S - np.where(top == -np.inf, 0, top)).astype(np.float16)
    total = np.zeros(E.shape[:-1] + (1,), np.float16)
    out = np.zeros(E.shape[:-1] + (v.shape[-1],), np.float16)
    for j in range(E.shape[-1]):
        total = (total + E[..., j:j + 1]).astype(np.float16)
        out = (out + E[..., j:j + 1] * v[..., j:j + 1, :]).astype(np.float16)
    return np.where(total > 0, out / np.where(total > 0, total, 1), 0).astype(np.float16)


BUGS = {
    "scale forgotten": lambda p, dt="float32": _bug(p, dt, scale=1.0),
    "scale 1/d_k": lambda p, dt="float32": _bug(p, dt, scale=p["scale"] ** 2),
    "causal mask dropped": lambda p, dt="float32": _bug(p, dt, causal=False) if p["causal"] else None,
    "causal aligned the other way": lambda p, dt="float32": (
        _bug(p, dt, causal=_other_alignment(p)) if p["causal"] else None),
    "causal off by one": lambda p, dt="float32": _bug(p, dt, causal=False, mask=_off_by_one(p)) if p["causal"]
    else None,
    "boolean mask inverted": lambda p, dt="float32": (
        _bug(p, dt, mask=~p["mask"]) if p["mask"] is not None and p["mask"].dtype == np.bool_ else None),
    "mask ignored": lambda p, dt="float32": _bug(p, dt, mask=None) if p["mask"] is not None else None,
    "last key dropped": lambda p, dt="float32": (
        _bug(p, dt, causal=False, mask=_allowed(p)[0] & (np.arange(p["k"].shape[-2]) < p["k"].shape[-2] - 1))
        if p["k"].shape[-2] > 1 else None),
    "values of the next key": lambda p, dt="float32": (
        _bug(p, dt, v=np.roll(p["v"], -1, axis=-2)) if p["k"].shape[-2] > 1 else None),
}
"""name -> bug(problem, dtype) -> output (``None`` where it does not apply): convention bugs."""

PRECISION_BUGS = {"float16 sums key by key": (_float16_sums, "float16")}
"""name -> (implementation, format): bugs of precision, judged on every problem."""


def measure(num_problems: int, seed: int = 0, *, honest=None, bugs=None, precision_bugs=None) -> dict:
    """Judge every honest implementation and seeded bug on ``num_problems`` random problems.

    Returns ``{"honest": {name: [passed, judged]}, "bugs": {name: [detected, applicable, skipped]},
    "worst": {name: largest candidate error / threshold}, "floor": {name: [floor / threshold, ...]}}``.
    """
    honest = HONEST if honest is None else honest
    bugs = BUGS if bugs is None else bugs
    precision_bugs = PRECISION_BUGS if precision_bugs is None else precision_bugs
    rng = np.random.default_rng(seed)
    results = {"honest": {name: [0, 0] for name in honest},
               "bugs": {name: [0, 0, 0] for name in (*bugs, *precision_bugs)},
               "worst": {name: 0.0 for name in honest}, "floor": {name: [] for name in honest}}
    for _ in range(num_problems):
        p = random_problem(rng)
        conventions = {"mask": p["mask"], "causal": p["causal"], "scale": p["scale"]}
        exact = scaled_dot_product_attention(p["q"], p["k"], p["v"], p["mask"], causal=p["causal"], scale=p["scale"])
        top = float(np.max(np.abs(exact))) if exact.size else 0.0
        with np.errstate(all="ignore"):
            for name, (impl, fmt) in honest.items():
                report = check(impl(p), p["q"], p["k"], p["v"], candidate_dtype=_declared(fmt), **conventions)
                results["honest"][name][0] += report.passed
                results["honest"][name][1] += 1
                used, floor = _shares(report["out"])
                results["worst"][name] = max(results["worst"][name], used)
                results["floor"][name].append(floor)
            for name, bug in bugs.items():
                effect = bug(p, "float64")
                if effect is None or not np.max(np.abs(effect - exact), initial=0.0) > MATERIAL * top:
                    results["bugs"][name][2] += 1
                    continue
                report = check(bug(p), p["q"], p["k"], p["v"], **conventions)
                results["bugs"][name][0] += not report.passed
                results["bugs"][name][1] += 1
            for name, (impl, fmt) in precision_bugs.items():
                report = check(impl(p), p["q"], p["k"], p["v"], candidate_dtype=_declared(fmt), **conventions)
                results["bugs"][name][0] += not report.passed
                results["bugs"][name][1] += 1
    return results


def _declared(fmt: str):
    return BFLOAT16 if fmt == BFLOAT16 else None


def _shares(c) -> tuple[float, float]:
    """(error, floor) of a ratio-rule comparison as fractions of its threshold (read back from the report)."""
    tol = float(c.threshold.rsplit("= ", 1)[1])
    floor = float(c.threshold.rsplit("+ ", 1)[1].split(" ")[0])
    if not tol > 0:
        return 0.0, 0.0
    return (c.max_abs_error / tol if np.isfinite(c.max_abs_error) else 0.0), floor / tol


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--problems", type=positive_int, default=1000, help="random problems (default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the problem generator (default 0)")


def check_arguments(args) -> None:
    """Nothing beyond argparse's own checks."""


def run(args) -> int:
    start = time.perf_counter()
    results = measure(args.problems, args.seed)
    elapsed = time.perf_counter() - start
    print(f"oracle check, rule 'ratio' (defaults), {args.problems} random problems, seed {args.seed} "
          f"({elapsed:.0f} s)")
    print("honest implementations          false rejections   worst error / threshold   floor / threshold (median)")
    rejected = judged = 0
    for name, (passed, count) in results["honest"].items():
        rejected, judged = rejected + count - passed, judged + count
        print(f"  {name:30s} {count - passed:5d} of {count:<6d}    {results['worst'][name]:<25.3f} "
              f"{np.median(results['floor'][name]):.3f}")
    print(f"  false-rejection rate: {rejected} of {judged} = {rejected / max(judged, 1):.2%}")
    print("seeded bugs                     detected           (not applicable)")
    totals = {"convention": [0, 0], "precision": [0, 0]}
    for name, (found, count, skipped) in results["bugs"].items():
        kind = totals["precision" if name in PRECISION_BUGS else "convention"]
        kind[0], kind[1] = kind[0] + found, kind[1] + count
        print(f"  {name:30s} {found:5d} of {count:<6d}    ({skipped})")
    for kind, (found, count) in totals.items():
        print(f"  detection rate, {kind} bugs: {found} of {count} = {found / max(count, 1):.2%}")
    return 0 if rejected == 0 else 1
