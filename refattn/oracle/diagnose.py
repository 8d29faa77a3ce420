r"""Naming the convention mix-up behind a failed check.

When a candidate fails, each usual mix-up replaces one convention and the whole comparison is redone
(oracle, baseline, floor):

    causal      the other alignments ("top-left", "bottom-right") and no causal mask
    mask        the boolean mask inverted (True = masked out, as torch.nn.MultiheadAttention), or ignored
    scale       1, 1/d_k and 1/√d_k
    policy      the other fully-masked policies (when a row is fully masked)
    layout      the candidate's arrays in the other layout, or the inputs read in the other layout

Each one under which every array passes is reported as "matches if ..."; when none does, those under
which some arrays pass are listed as "partly". NaN matching NaN never makes an alternative match
where the oracle asked for is finite.

    non-finite  the candidate differs only by NaN/Inf where a non-finite value in a masked-out key
                or value reaches when masking is not by selection (:func:`masked_nonfinite_hint`)
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from ..common.checks import default_scale
from ..core.softmax import FULLY_MASKED_POLICIES
from ..masks import attention_mask
from .evaluate import Conventions, Evaluation, Problem
from .report import Comparison
from .shapes import LAYOUT_SHAPES, kv_groups, other_layout, repeat_over_groups, swap_heads

__all__ = ["alternatives", "describe", "masked_nonfinite_hint", "try_alternatives"]

_CAUSAL_NAMES = {None: "no causal mask", "top-left": 'causal="top-left" (query i sees keys j <= i)',
                 "bottom-right": 'causal="bottom-right" (query i sees keys j <= i + m - n)'}


def alternatives(problem: Problem, conv: Conventions, oracle: Evaluation) -> list[tuple[str, Conventions]]:
    """Every convention mix-up worth trying, as (label, conventions)."""
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
        alts.append((f"{_CAUSAL_NAMES[alignment]} instead of {_CAUSAL_NAMES[conv.causal]}",
                     replace(conv, causal=alignment)))
    if conv.mask is not None:
        if conv.mask.dtype == np.bool_:
            alts.append(("the boolean mask is inverted (True = masked out, as torch.nn.MultiheadAttention)",
                         replace(conv, mask=~conv.mask)))
        alts.append(("the mask is ignored", replace(conv, mask=None)))
    tried = [conv.scale]
    scales = [(1.0, "scale=1 (no scaling)")]
    if d_k:                                                        # d_k = 0: no 1/d_k (and the scores are 0)
        scales += [(1.0 / d_k, f"scale=1/d_k={1.0 / d_k:.6g}"),
                   (default_scale(d_k), f"scale=1/√d_k={default_scale(d_k):.6g}")]
    for s, text in scales:
        if not any(np.isclose(s, t, rtol=1e-9, atol=0) for t in tried):
            tried.append(s)
            alts.append((f"{text} instead of {conv.scale:.6g}", replace(conv, scale=s)))
    if np.any(oracle.empty):
        for policy in FULLY_MASKED_POLICIES:
            if policy != conv.fully_masked:
                alts.append((f'fully_masked="{policy}" instead of "{conv.fully_masked}"',
                             replace(conv, fully_masked=policy)))
    if problem.q.ndim >= 3 and problem.k.ndim >= 3 and problem.v.ndim >= 3:
        other = other_layout(conv.layout)
        alts.append((f"the candidate's outputs are in layout {other!r} {LAYOUT_SHAPES[other]} (axes -2 and -3 "
                     "swapped)", replace(conv, outputs_transposed=True)))
        alts.append((f"the candidate reads the inputs in layout {other!r} {LAYOUT_SHAPES[other]}",
                     replace(conv, layout=other)))
    return alts


def try_alternatives(
    problem: Problem,
    conv: Conventions,
    oracle: Evaluation,
    compare: Callable[[Problem, Conventions], Sequence[Comparison]],
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(tried, matching, partly matching) labels of :func:`alternatives`.

    ``compare(problem, conventions)`` redoes the whole comparison under other conventions; a
    partial match is one where some arrays pass. An alternative that does not fit the shapes is
    left out.
    """
    tried, matches, partial = [], [], []
    for label, alt in alternatives(problem, conv, oracle):
        try:
            with np.errstate(all="ignore"):
                comparisons = compare(problem, alt)
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


def describe(conv: Conventions, problem: Problem, oracle: Evaluation) -> dict[str, str]:
    """The conventions of a check in words, for the report."""
    d_k = problem.q.shape[-1]
    is_default = d_k >= 1 and np.isclose(conv.scale, default_scale(d_k), rtol=1e-12)
    scale = f"{conv.scale:.6g}" + (" (1/√d_k)" if is_default else "")
    if conv.mask is None:
        mask = "none"
    elif conv.mask.dtype == np.bool_:
        mask = f"bool {tuple(conv.mask.shape)} (True = may attend)"
    else:
        mask = f"float bias {tuple(conv.mask.shape)}"
    described = {"causal": conv.causal or "none", "scale": scale, "fully_masked": repr(conv.fully_masked),
                 "layout": f"{conv.layout!r} {LAYOUT_SHAPES[conv.layout]}", "mask": mask}
    if oracle.groups > 1:
        h_axis = -3 if conv.layout == "bhnd" else -2
        described["heads"] = (f"grouped-query, h={problem.q.shape[h_axis]} query heads over "
                              f"h_kv={problem.k.shape[h_axis]} key/value heads ({oracle.groups} per group)")
    return described


def masked_nonfinite_hint(problem: Problem, conv: Conventions, passed_out) -> str | None:
    """The hint when the output differs only where non-finite masked-out keys or values would reach.

    Masking by selection keeps a masked-out key's score and value out of the arithmetic. An
    implementation that masks by adding ``-inf`` (or a large negative number) to the scores and
    multiplying by zero weights does not: a NaN or Inf in a masked-out key ``k_j`` makes the score
    ``q_i·k_j`` NaN, and NaN + (-inf) is NaN, so row ``i`` becomes NaN; a NaN or Inf in a masked-out
    value ``v_je`` gives 0 × NaN = NaN in column ``e`` of row ``i``. When every failing element of
    the output is non-finite in the candidate and reachable that way, the difference is exactly
    that, and the hint says so; otherwise ``None``. ``passed_out``: the output's elementwise pass
    mask (``None`` when its shape does not fit).
    """
    c = problem.candidates["out"]
    if passed_out is None or passed_out.all() or conv.outputs_transposed:
        return None
    q, k, v = problem.q, problem.k, problem.v
    if conv.layout == "bnhd":
        q, k, v = swap_heads(q), swap_heads(k), swap_heads(v)
    groups = kv_groups(q, k, v)
    k, v = repeat_over_groups(k, groups), repeat_over_groups(v, groups)
    n, m = q.shape[-2], k.shape[-2]
    allowed, _ = attention_mask(conv.mask, conv.causal or False, n, m, np.float64)
    bad_k, bad_v = ~np.all(np.isfinite(k), axis=-1), ~np.isfinite(v)        # (..., m), (..., m, d_v)
    if allowed is None or not (bad_k.any() or bad_v.any()):
        return None
    masked = ~allowed                                              # (..., n, m)
    rows = np.any(masked & bad_k[..., None, :], axis=-1)           # (..., n)  a masked non-finite key
    cells = (masked.astype(np.float64) @ bad_v.astype(np.float64)) > 0   # (..., n, d_v)  a masked non-finite value
    reach = rows[..., None] | cells
    if conv.layout == "bnhd":
        reach = swap_heads(reach)
    try:
        reach = np.broadcast_to(reach, c.shape)
    except ValueError:
        return None
    failing = ~passed_out
    if not np.all(reach[failing] & ~np.isfinite(c[failing])):
        return None
    hidden = np.any(masked, axis=-2)                               # (..., m)  keys masked out for some query
    keys = int(np.sum(bad_k & hidden))
    values = int(np.sum(np.any(bad_v, axis=-1) & hidden))
    return (f"the candidate differs from the oracle only at {int(failing.sum())} output elements, all NaN/Inf in the "
            f"candidate, each where a NaN/Inf in a masked-out key ({keys} positions) or value ({values} positions) "
            "reaches when masking is not by selection (a NaN key's score is NaN, and NaN + -inf = NaN; a zero weight "
            "times a NaN value is NaN). refattn masks by selection, so masked-out inputs never reach the output: "
            "select instead of adding -inf (torch.where on scores and weights), or replace NaN/Inf in the padding "
            "of k and v by 0 before the call")
