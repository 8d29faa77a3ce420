r"""The report of :func:`refattn.oracle.check.check`: one :class:`Comparison` per array, and the verdict.

:func:`compare_arrays` measures one candidate array against the oracle under a tolerance and fills
in its :class:`Comparison`.

Every number an implementer needs to act on a failure is in the report: where the largest absolute
and relative errors are and the two values there, the error in ULPs of the candidate's dtype (relative
and ULP errors where the oracle value is not 0; where it is 0 only the absolute error means something,
reported on a line of its own), mean and RMS errors, how many elements fail, every NaN/Inf mismatch,
the fully masked rows and what the candidate does there, the threshold with the rule that produced it,
and the alternative conventions under which the candidate would pass.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from .precision import Format, spacing

__all__ = ["Comparison", "FullyMaskedRows", "Report", "compare_arrays", "elementwise_ok"]


@dataclass(frozen=True)
class Comparison:
    """One candidate array against the oracle.

    Attributes
    ----------
    name : str
        "out", "dq", "dk" or "dv".
    shape : tuple of int
        The oracle's shape.
    candidate_shape : tuple of int
    dtype : str
        The candidate's dtype.
    passed : bool
    threshold : str
        The rule's bound, with the numbers that went into it.
    size : int
        Number of elements.
    n_failing : int
        Elements that fail: outside the tolerance, or a non-finite mismatch.
    max_abs_error : float
        Over the elements where both the candidate and the oracle are finite (``nan`` if none).
    max_rel_error : float
        ``|c − o| / |o|`` over those elements where the oracle is not 0 (``nan`` if none).
    max_abs_index, max_rel_index : tuple of int or None
    max_abs_values, max_rel_values : tuple of (float, float) or None
        ``(candidate, oracle)`` at that index.
    max_ulp_error : float
        ``|c − o| / spacing(o)``, the spacing of the oracle value cast to the candidate's dtype, where the
        oracle is not 0 (``nan`` if it is 0 everywhere): the spacing of 0 is the smallest subnormal,
        and an error of 1 there would read as 7e+44 ulp of float32.
    max_ulp_index : tuple of int or None
    oracle_zeros : int
        Elements where the oracle is exactly 0 and the candidate finite.
    oracle_zeros_max_abs_error : float
        Largest ``|c|`` there (``nan`` if none): their only error.
    scale_ulp_error : float
        ``max|c − o| / spacing(max|o|)``: ULPs at the array's scale (what the "ulp" rule bounds).
    mean_abs_error, rms_error : float
    nan_where_finite, inf_where_finite : int
        Candidate NaN (±Inf) where the oracle is finite: each one fails.
    oracle_nonfinite : int
        Elements where the oracle is NaN or ±Inf.
    oracle_nonfinite_matched : int
        Of those, how many the candidate reproduces exactly (NaN for NaN, same-signed Inf).
    first_mismatch : tuple of int or None
        Index of the first non-finite mismatch.
    baseline_error : float or None
        Ratio rule only: ``max|b − o|`` of the same-dtype baseline.
    baseline_nonfinite : int
        Ratio rule only: elements where the baseline is non-finite but the oracle is finite
        (left out of ``baseline_error``).
    note : str
        Anything else (a shape mismatch).
    """

    name: str
    shape: tuple
    candidate_shape: tuple
    dtype: str
    passed: bool
    threshold: str
    size: int = 0
    n_failing: int = 0
    max_abs_error: float = float("nan")
    max_abs_index: tuple | None = None
    max_abs_values: tuple | None = None
    max_rel_error: float = float("nan")
    max_rel_index: tuple | None = None
    max_rel_values: tuple | None = None
    max_ulp_error: float = float("nan")
    max_ulp_index: tuple | None = None
    scale_ulp_error: float = float("nan")
    oracle_zeros: int = 0
    oracle_zeros_max_abs_error: float = float("nan")
    mean_abs_error: float = float("nan")
    rms_error: float = float("nan")
    nan_where_finite: int = 0
    inf_where_finite: int = 0
    oracle_nonfinite: int = 0
    oracle_nonfinite_matched: int = 0
    first_mismatch: tuple | None = None
    baseline_error: float | None = None
    baseline_nonfinite: int = 0
    note: str = ""

    @property
    def fraction_failing(self) -> float:
        """``n_failing / size`` (1.0 when the shapes differ)."""
        return self.n_failing / self.size if self.size else 1.0

    def lines(self) -> list[str]:
        """The comparison as indented report lines."""
        head = (f"{self.name} {_shape(self.shape)} {self.dtype}: {'pass' if self.passed else 'FAIL'}")
        if self.note:
            return [head, f"  {self.note}"]
        out = [f"{head}  ({self.n_failing} of {self.size} elements fail, {self.fraction_failing:.1%})",
               f"  threshold   {self.threshold}"]
        if self.baseline_nonfinite:
            out.append(f"  baseline    non-finite at {self.baseline_nonfinite} elements where the oracle is finite "
                       "(left out of the baseline error)")
        out.append(f"  max abs     {_at(self.max_abs_error, self.max_abs_index, self.max_abs_values)}")
        if self.max_rel_index is None:
            out.append("  max rel     — (no oracle value other than 0)")
        else:
            out.append(f"  max rel     {_at(self.max_rel_error, self.max_rel_index, self.max_rel_values)}")
        ulp = ("—" if self.max_ulp_index is None else
               f"{_g(self.max_ulp_error)} ulp of {self.dtype} at {_index(self.max_ulp_index)} (spacing of the oracle "
               "value)")
        out.append(f"  max ulp     {ulp}; {_g(self.scale_ulp_error)} ulp at the array's scale")
        if self.oracle_zeros:
            out.append(f"  oracle 0    at {self.oracle_zeros} elements: abs error up to "
                       f"{_g(self.oracle_zeros_max_abs_error)} (no relative or ulp error there)")
        out.append(f"  mean abs    {_g(self.mean_abs_error)}, rms {_g(self.rms_error)}")
        nonfinite = []
        if self.nan_where_finite:
            nonfinite.append(f"candidate NaN where the oracle is finite: {self.nan_where_finite}")
        if self.inf_where_finite:
            nonfinite.append(f"candidate Inf where the oracle is finite: {self.inf_where_finite}")
        if self.oracle_nonfinite:
            missed = self.oracle_nonfinite - self.oracle_nonfinite_matched
            nonfinite.append(f"oracle NaN/Inf at {self.oracle_nonfinite} elements, candidate the same at "
                             f"{self.oracle_nonfinite_matched}" + (f", different at {missed} (fail)" if missed else ""))
        if nonfinite:
            where = f" (first mismatch at {_index(self.first_mismatch)})" if self.first_mismatch is not None else ""
            out.append("  non-finite  " + "; ".join(nonfinite) + where)
        else:
            out.append("  non-finite  none")
        return out


def elementwise_ok(c: NDArray, o: NDArray, tol) -> tuple[NDArray, NDArray, NDArray]:
    """(pass mask, |c − o| where both are finite else 0, both-finite mask) of candidate ``c`` and oracle ``o``.

    A non-finite oracle value passes only where the candidate has the same one (NaN for NaN, the
    same-signed Inf); a non-finite candidate value where the oracle is finite fails.
    """
    c = c.astype(np.float64)
    fin_o, fin_c = np.isfinite(o), np.isfinite(c)
    both = fin_o & fin_c
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.where(both, np.abs(c - o), 0.0)
    same_nonfinite = ~fin_o & ((np.isnan(o) & np.isnan(c)) | (~np.isnan(o) & (c == o)))
    return (both & (err <= tol)) | same_nonfinite, err, both


def compare_arrays(name: str, c: NDArray, o: NDArray, tol, threshold: str, baseline_error: float | None,
                   baseline_nonfinite: int, fmt: Format) -> tuple[Comparison, NDArray]:
    """The :class:`Comparison` of candidate ``c`` (of number format ``fmt``) with oracle ``o`` under ``tol``,
    and the elementwise pass mask."""
    ok, err, both = elementwise_ok(c, o, tol)
    c64 = c.astype(np.float64)
    fin_o = np.isfinite(o)
    same_nonfinite = ~fin_o & ok
    mismatch = ~ok & ~both
    stats = {}
    if both.any():
        i = np.unravel_index(np.argmax(np.where(both, err, -1.0)), o.shape)
        stats.update(max_abs_error=float(err[i]), max_abs_index=_ints(i), max_abs_values=(float(c64[i]), float(o[i])))
        nonzero = both & (o != 0)                                  # relative and ulp errors mean nothing at 0
        if nonzero.any():
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                rel = np.where(nonzero, err / np.abs(o), -1.0)
                gaps = spacing(o, fmt)
                ulp = np.where(nonzero & np.isfinite(gaps), err / gaps, -1.0)
            i = np.unravel_index(np.argmax(rel), o.shape)
            stats.update(max_rel_error=float(rel[i]), max_rel_index=_ints(i),
                         max_rel_values=(float(c64[i]), float(o[i])))
            i = np.unravel_index(np.argmax(ulp), o.shape)
            stats.update(max_ulp_error=float(ulp[i]), max_ulp_index=_ints(i))
        zeros = both & ~nonzero
        if zeros.any():
            stats.update(oracle_zeros=int(np.sum(zeros)), oracle_zeros_max_abs_error=float(np.max(err[zeros])))
        top = float(np.max(np.abs(o[fin_o])))
        scale_spacing = float(spacing(min(top, fmt.max), fmt))
        stats["scale_ulp_error"] = float(err.max()) / scale_spacing
        stats["mean_abs_error"] = float(np.mean(err[both]))
        stats["rms_error"] = float(np.sqrt(np.mean(err[both] ** 2)))
    first = _ints(np.unravel_index(int(np.argmax(mismatch)), o.shape)) if mismatch.any() else None
    comparison = Comparison(
        name=name, shape=o.shape, candidate_shape=c.shape, dtype=fmt.name, passed=bool(ok.all()),
        threshold=threshold, size=int(o.size), n_failing=int(o.size - np.sum(ok)),
        nan_where_finite=int(np.sum(fin_o & np.isnan(c64))), inf_where_finite=int(np.sum(fin_o & np.isinf(c64))),
        oracle_nonfinite=int(np.sum(~fin_o)), oracle_nonfinite_matched=int(np.sum(same_nonfinite)),
        first_mismatch=first, baseline_error=baseline_error, baseline_nonfinite=baseline_nonfinite, **stats,
    )
    return comparison, ok


@dataclass(frozen=True)
class FullyMaskedRows:
    """Queries that may attend to no key, and what the candidate's output does there.

    Attributes
    ----------
    count : int
        Fully masked query rows (over every batch and head entry).
    total : int
        All query rows.
    policy : str
        The ``fully_masked`` policy checked against.
    matches : bool or None
        Whether every element of those rows passes (``None`` without such rows or without a
        candidate output of the right shape).
    candidate_follows : tuple of str
        The policies whose rows the candidate's rows match.
    """

    count: int
    total: int
    policy: str
    matches: bool | None
    candidate_follows: tuple = ()

    def line(self) -> str:
        """One report line."""
        text = f"fully masked rows: {self.count} of {self.total} (policy {self.policy!r})"
        if not self.count or self.matches is None:
            return text
        if self.matches:
            return text + ": the candidate matches the policy there"
        follows = (f"; they match {' / '.join(repr(p) for p in self.candidate_follows)}"
                   if self.candidate_follows else "; they match no policy")
        return text + ": the candidate does NOT match the policy there" + follows


@dataclass(frozen=True)
class Report:
    """The result of :func:`refattn.oracle.check.check`.

    Attributes
    ----------
    passed : bool
        Every comparison passed.
    rule : str
        "ratio", "table" or "ulp".
    rule_detail : str
        The rule in words, with its parameters and source.
    dtype : str
        The candidate's dtype.
    conventions : dict
        The conventions the oracle was computed with (causal, scale, fully_masked, layout, mask,
        grouped-query heads).
    comparisons : tuple of Comparison
        "out" first, then the gradients that were given.
    fully_masked : FullyMaskedRows
    alternatives : tuple of str
        When the check fails: the conventions under which every comparison would pass.
    alternatives_tried : tuple of str
        Every alternative convention that was tried.
    partial_alternatives : tuple of str
        When no alternative matches everything: those under which some of the arrays pass, e.g.
        "out match if ... (dq, dk, dv still fail)".
    hints : tuple of str
        When the check fails: what else explains the difference (non-finite values in masked-out
        inputs that the candidate let through).
    """

    passed: bool
    rule: str
    rule_detail: str
    dtype: str
    conventions: dict
    comparisons: tuple
    fully_masked: FullyMaskedRows
    alternatives: tuple = ()
    alternatives_tried: tuple = field(default=())
    partial_alternatives: tuple = field(default=())
    hints: tuple = field(default=())

    def __getitem__(self, name: str) -> Comparison:
        """The comparison of ``name`` ("out", "dq", "dk" or "dv")."""
        for c in self.comparisons:
            if c.name == name:
                return c
        raise KeyError(f"no comparison named {name!r}; have {[c.name for c in self.comparisons]}")

    def __str__(self) -> str:
        verdict = "PASSED" if self.passed else "FAILED"
        lines = [f"refattn oracle check {verdict}: rule {self.rule!r}, candidate dtype {self.dtype}",
                 f"rule: {self.rule_detail}",
                 "conventions: " + ", ".join(f"{k}={v}" for k, v in self.conventions.items())]
        for c in self.comparisons:
            lines.extend(c.lines())
        lines.append(self.fully_masked.line())
        if not self.passed:
            if self.alternatives:
                lines.extend(f"matches if {alt}" for alt in self.alternatives)
            elif self.alternatives_tried:
                lines.append(f"no alternative convention matches (tried {len(self.alternatives_tried)}: "
                             + "; ".join(self.alternatives_tried) + ")")
                lines.extend(f"partly: {alt}" for alt in self.partial_alternatives)
            lines.extend(f"hint: {hint}" for hint in self.hints)
        return "\n".join(lines)


def _ints(index) -> tuple:
    return tuple(int(i) for i in index)


def _g(x) -> str:
    return "nan" if x is None else f"{x:.4g}"


def _index(index) -> str:
    return "-" if index is None else "(" + ", ".join(str(i) for i in index) + ")"


def _shape(shape) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ")"


def _at(error, index, values) -> str:
    if index is None:
        return _g(error)
    return f"{_g(error)} at {_index(index)}: candidate {values[0]!r}, oracle {values[1]!r}"
