"""The reader behind ``python -m refattn check``: a fixture or test vector plus a candidate's results, judged.

A check file is a fixture (:mod:`refattn.oracle.fixtures`) or a test vector (:mod:`refattn.oracle.vectors`)
with the candidate's results under ``candidate_*`` keys, in the format of :mod:`refattn.oracle.npz`.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .check import check, check_mechanism
from .npz import CANDIDATE_KEYS, FIXTURE_CAUSAL, FixtureError, decode_vector, float_array, one_line, read_npz, string
from .report import Report
from .shapes import LAYOUTS
from .vectors import vector_ids

__all__ = ["FixtureError", "check_file", "load_check_file"]


def load_check_file(path: str | Path) -> dict:
    r"""Read a check file into keyword arguments of :func:`refattn.oracle.check.check`.

    Parameters
    ----------
    path : str or Path
        An ``.npz`` file in the format of :mod:`refattn.oracle.npz`, with ``candidate_out``.

    Returns
    -------
    dict
        ``candidate, q, k, v`` and every convention, ``mask``, ``d_out``, ``dq``, ``dk``, ``dv``
        present in the file.

    Raises
    ------
    FixtureError
        With a one-line message naming the file's problem: not an npz archive, a member that is
        not a .npy array, a missing or non-float array, an unknown convention or ``candidate_*`` key.
    """
    path = Path(path)
    arrays = read_npz(path)
    unknown = [key for key in arrays if key.startswith("candidate_") and key not in CANDIDATE_KEYS]
    if unknown:
        raise FixtureError(f"{path}: unknown key {unknown[0]!r} (candidate keys: {', '.join(CANDIDATE_KEYS)})")
    for key in ("q", "k", "v", "candidate_out"):
        if key not in arrays:
            raise FixtureError(f"{path}: missing array {key!r} (has: {', '.join(sorted(arrays)) or 'nothing'})")
    kwargs = {}
    for key, name in (("candidate_out", "candidate"), ("q", "q"), ("k", "k"), ("v", "v"), ("d_out", "d_out"),
                      ("candidate_dq", "dq"), ("candidate_dk", "dk"), ("candidate_dv", "dv")):
        if key in arrays:
            kwargs[name] = float_array(path, key, arrays[key])
    if any(g in kwargs for g in ("dq", "dk", "dv")) and "d_out" not in kwargs:
        raise FixtureError(f"{path}: candidate gradients need 'd_out', the upstream gradient they were computed with")
    if "mechanism" in arrays and string(path, "mechanism", arrays["mechanism"], vector_ids()) != "sdpa":
        vector = decode_vector(path, arrays)
        kwargs.update(mechanism=vector["mechanism"], causal=vector["causal"], options=vector["options"],
                      draws=vector["draws"])
        return kwargs
    if "mask" in arrays:
        mask = arrays["mask"]
        if mask.dtype != np.bool_ and mask.dtype.kind != "f":
            raise FixtureError(f"{path}: 'mask' must be bool (True = may attend) or a float bias, got dtype "
                               f"{mask.dtype} with shape {mask.shape}")
        kwargs["mask"] = mask
    if "causal" in arrays:
        causal = arrays["causal"]
        if causal.shape == () and causal.dtype == np.bool_:
            kwargs["causal"] = "top-left" if bool(causal) else False
        else:
            kwargs["causal"] = FIXTURE_CAUSAL[string(path, "causal", causal, tuple(FIXTURE_CAUSAL))]
    if "scale" in arrays:
        scale = arrays["scale"]
        if scale.shape != () or scale.dtype.kind not in "fiu" or not np.isfinite(scale):
            shown = repr(scale.item()) if scale.shape == () else f"shape {scale.shape}"
            raise FixtureError(f"{path}: 'scale' must be a finite 0-d number, got dtype {scale.dtype}, {shown}")
        kwargs["scale"] = float(scale)
    if "fully_masked" in arrays:
        kwargs["fully_masked"] = string(path, "fully_masked", arrays["fully_masked"], ("zero", "nan", "uniform"))
    if "layout" in arrays:
        kwargs["layout"] = string(path, "layout", arrays["layout"], LAYOUTS)
    return kwargs


def check_file(path: str | Path, *, rule: str = "ratio", table: str | None = None,
               max_ulps: float | None = None, memory_budget: int | None = None) -> Report:
    """Load a check file and run :func:`~refattn.oracle.check.check` on it.

    Parameters
    ----------
    path : str or Path
        An ``.npz`` check file (inputs, conventions and ``candidate_out``; see :mod:`refattn.oracle.npz`).
    rule : {"ratio", "table", "ulp"}, default "ratio"
        The comparison rule.
    table : str, optional
        The tolerance table for ``rule="table"``.
    max_ulps : float, optional
        The bound for ``rule="ulp"``.
    memory_budget : int, optional
        Bytes the oracle's ``(..., n, m)`` arrays may take (see :func:`~refattn.oracle.check.check`);
        default :func:`refattn.common.memory_budget`.

    Returns
    -------
    Report

    Raises
    ------
    FixtureError
        The file is malformed (see :func:`load_check_file`), its arrays do not fit each other, or a
        candidate array's shape fits neither the inputs nor the other layout.
    """
    kwargs = load_check_file(path)
    if "mechanism" in kwargs:                                      # a test vector of another mechanism
        return _check_vector(path, kwargs, rule, table, max_ulps)
    if rule == "table" or table is not None:
        kwargs["table"] = table
    if rule == "ulp" or max_ulps is not None:
        kwargs["max_ulps"] = max_ulps
    try:
        report = check(rule=rule, memory_budget=memory_budget, **kwargs)
    except (ValueError, TypeError) as error:
        raise FixtureError(f"{path}: {one_line(error)}") from None
    if not report.alternatives:
        for c in report.comparisons:
            if c.note:
                key = "candidate_out" if c.name == "out" else f"candidate_{c.name}"
                raise FixtureError(f"{path}: {key} has shape {c.candidate_shape} but the inputs give {c.shape}")
    return report


def _check_vector(path, kwargs: dict, rule: str, table, max_ulps) -> Report:
    """:func:`~refattn.oracle.check.check_mechanism` on a loaded test vector; ``FixtureError`` for what it refuses."""
    if rule == "table" or table is not None:
        kwargs["table"] = table
    if rule == "ulp" or max_ulps is not None:
        kwargs["max_ulps"] = max_ulps
    try:
        report = check_mechanism(rule=rule, **kwargs)
    except (ValueError, TypeError) as error:
        raise FixtureError(f"{path}: {one_line(error)}") from None
    for c in report.comparisons:
        if c.note:
            key = "candidate_out" if c.name == "out" else f"candidate_{c.name}"
            raise FixtureError(f"{path}: {key} has shape {c.candidate_shape} but the inputs give {c.shape}")
    return report


