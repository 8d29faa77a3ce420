r"""Named test cases written to ``.npz`` files, and the reader behind ``python -m refattn check``.

A fixture holds the inputs, the conventions and refattn's float64 outputs and gradients of one
case, for another implementation's test suite to load (``python -m refattn export``). A check file
is a fixture (or any file of the same format) plus the candidate's results under ``candidate_*``
keys (``python -m refattn check``). Every file is read with ``allow_pickle=False``; strings are
0-d unicode arrays (``np.array("top-left")``).

Keys (shapes in layout "bhnd"; in "bnhd" the two axes before the last are swapped, except in
``mask``, which is always in score layout, and ``lse``, which is then ``(b, n, h)``):

    q            (b, h, n, d_k)      float       required
    k, v         (b, h_kv, m, d_k), (b, h_kv, m, d_v)   h_kv = h, or h divisible by h_kv (grouped-query)
    mask         broadcasts to (b, h, n, m); bool (True = may attend) or float bias (-inf masks); optional
    d_out        (b, h, n, d_v)      float       the upstream gradient; needed with candidate_dq/dk/dv
    causal       0-d str             "none" | "top-left" | "bottom-right" (0-d bool accepted); default "none"
    scale        0-d float           default 1/√d_k
    fully_masked 0-d str             "zero" | "nan" | "uniform"; default "zero"
    layout       0-d str             "bhnd" | "bnhd"; default "bhnd"
    out, lse, dq, dk, dv, d_bias     refattn's float64 results (written by export, ignored by check)
    case, format, description        0-d str (written by export, ignored by check)
    mechanism                        0-d str: a registry id; a test vector of :mod:`refattn.oracle.vectors`,
                                     checked by :func:`~refattn.oracle.check.check_mechanism` (except "sdpa")
    candidate_out                    (b, h, n, d_v) float16/32/64: required by check
    candidate_dq, candidate_dk, candidate_dv   the candidate's gradients, optional
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..common.npz import write_npz
from ..core.padding_mask import padding_mask
from ..core.sdpa import scaled_dot_product_attention
from .check import check, check_mechanism
from .report import Report
from .shapes import LAYOUTS, kv_groups, repeat_over_groups, sum_over_groups, swap_heads
from .vjp import sdpa_vjp

__all__ = ["CASES", "FORMAT", "Case", "FixtureError", "check_file", "export_case", "load_check_file", "make_case"]

FORMAT = "refattn-fixture-1"
CAUSAL_NAMES = {"none": False, "top-left": "top-left", "bottom-right": "bottom-right"}
INPUT_KEYS = ("q", "k", "v", "mask", "d_out")
CONVENTION_KEYS = ("causal", "scale", "fully_masked", "layout")
CANDIDATE_KEYS = ("candidate_out", "candidate_dq", "candidate_dk", "candidate_dv")


class FixtureError(ValueError):
    """A file that is not a usable fixture or check file; the message is one line naming the problem."""


@dataclass(frozen=True)
class Case:
    """A named fixture case.

    Attributes
    ----------
    name : str
    description : str
        One line: what the case exercises.
    build : callable
        ``build(rng) -> dict`` of inputs (``q, k, v, d_out``, optional ``mask``) and conventions
        (``causal``, ``scale``, ``fully_masked``), in layout "bhnd".
    seed : int
        The case's own seed: the same file on every machine.
    """

    name: str
    description: str
    build: Callable
    seed: int


def _representable(x: np.ndarray) -> np.ndarray:
    """Round to 8 significant bits, 0 below 2⁻¹⁴: exact in bfloat16, float16, float32 and float64."""
    mantissa, exponent = np.frexp(x)
    y = np.ldexp(np.round(mantissa * 256.0) / 256.0, exponent)
    return np.where(np.abs(y) < 2.0**-14, 0.0, y)


def _qkv(rng, b=2, h=3, n=5, m=7, d_k=8, d_v=6, h_kv=None, amp=1.0):
    h_kv = h if h_kv is None else h_kv
    return {
        "q": _representable(amp * rng.standard_normal((b, h, n, d_k))),
        "k": _representable(amp * rng.standard_normal((b, h_kv, m, d_k))),
        "v": _representable(rng.standard_normal((b, h_kv, m, d_v))),
        "d_out": _representable(rng.standard_normal((b, h, n, d_v))),
    }


def _basic(rng):
    return _qkv(rng)


def _causal_n_ne_m(rng):
    return {**_qkv(rng, n=6, m=9), "causal": "top-left"}


def _bottom_right(rng):
    return {**_qkv(rng, n=5, m=9), "causal": "bottom-right"}


def _padding(rng):
    return {**_qkv(rng, n=6, m=9), "mask": padding_mask(np.array([9, 5]), 9)[:, None]}   # (b, 1, 1, m)


def _empty_rows(rng):
    arrays = _qkv(rng, n=6, m=8)
    mask = rng.random((2, 1, 6, 8)) < 0.7
    mask[..., 0] = True                                            # every row sees key 0 ...
    mask[0, 0, [1, 4], :] = False                                  # ... except these three,
    mask[1, 0, 0, :] = False                                       # which see no key at all
    return {**arrays, "mask": mask, "fully_masked": "zero"}


def _gqa(rng):
    return {**_qkv(rng, h=4, h_kv=2, n=5, m=8), "causal": "top-left"}


def _extreme_logits(rng):
    return _qkv(rng, amp=30.0)                                     # |S| up to ~10³: e^S overflows unshifted


def _float_bias(rng):
    arrays = _qkv(rng)
    slopes = 2.0 ** -np.arange(1, 4)[:, None, None]                # (h, 1, 1)  ALiBi's geometric slopes
    i, j = np.arange(5)[:, None], np.arange(7)[None, :]
    bias = _representable(-slopes * np.abs(i - j) + 0.5 * rng.standard_normal((2, 3, 5, 7)))
    bias[0, 1, 2, [0, 3, 6]] = -np.inf                             # a few masked pairs, no empty row
    bias[1, 2, :, 5] = -np.inf
    return {**arrays, "mask": bias}


CASES = {case.name: case for case in (
    Case("basic", "b=2, h=3, n=5, m=7, d_k=8, d_v=6: no mask, not causal", _basic, 1),
    Case("causal_n_ne_m", "causal top-left with n=6 < m=9 (query i sees keys j <= i)", _causal_n_ne_m, 2),
    Case("bottom_right", "causal bottom-right with n=5 < m=9 (query i sees keys j <= i + 4)", _bottom_right, 3),
    Case("padding", "key padding mask (b, 1, 1, m): lengths 9 and 5 of m=9", _padding, 4),
    Case("empty_rows", "bool mask with 3 fully masked query rows, fully_masked='zero'", _empty_rows, 5),
    Case("gqa", "grouped-query: h=4 query heads, h_kv=2 key/value heads (head i reads kv head i // 2), causal",
         _gqa, 6),
    Case("extreme_logits", "q and k scaled by 30: scores up to ~10^3, softmax nearly one-hot", _extreme_logits, 7),
    Case("float_bias", "float additive bias (ALiBi slopes + noise) with some -inf entries", _float_bias, 8),
)}


def make_case(name: str, *, layout: str = "bhnd") -> dict:
    r"""The arrays of fixture case ``name``: inputs, conventions and refattn's float64 results.

    Parameters
    ----------
    name : str
        One of :data:`CASES`.
    layout : {"bhnd", "bnhd"}, default "bhnd"
        Axis order of ``q, k, v, d_out`` and of the results.

    Returns
    -------
    dict of str to ndarray
        The keys of the module docstring; strings as 0-d unicode arrays, ``scale`` as a 0-d
        float64 array (always written out, default or not).

    Examples
    --------
    >>> arrays = make_case("gqa")
    >>> arrays["q"].shape, arrays["k"].shape, arrays["dk"].shape, str(arrays["causal"])
    ((2, 4, 5, 8), (2, 2, 8, 8), (2, 2, 8, 8), 'top-left')
    """
    if name not in CASES:
        raise ValueError(f"unknown case {name!r}; known: {', '.join(CASES)}")
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be 'bhnd' or 'bnhd', got {layout!r}")
    case = CASES[name]
    spec = case.build(np.random.default_rng(case.seed))
    q, k, v, d_out, mask = spec["q"], spec["k"], spec["v"], spec["d_out"], spec.get("mask")
    causal = spec.get("causal", "none")
    scale = spec.get("scale", 1.0 / float(np.sqrt(q.shape[-1])))
    fully_masked = spec.get("fully_masked", "zero")
    groups = kv_groups(q, k, v)
    k_full, v_full = repeat_over_groups(k, groups), repeat_over_groups(v, groups)
    options = {"causal": CAUSAL_NAMES[causal], "scale": scale, "fully_masked": fully_masked}
    out, lse = scaled_dot_product_attention(q, k_full, v_full, mask, return_lse=True, **options)
    grads = sdpa_vjp(q, k_full, v_full, d_out, mask, **options)
    arrays = {"q": q, "k": k, "v": v, "d_out": d_out, "out": out, "dq": grads.dq,
              "dk": sum_over_groups(grads.dk, groups), "dv": sum_over_groups(grads.dv, groups)}
    if layout == "bnhd":
        arrays = {key: swap_heads(x) for key, x in arrays.items()}
        lse = np.swapaxes(lse, -1, -2)
    arrays["lse"] = lse
    if mask is not None:
        arrays["mask"] = mask
        if grads.d_bias is not None:
            arrays["d_bias"] = grads.d_bias
    arrays.update(causal=np.array(causal), scale=np.array(scale, dtype=np.float64),
                  fully_masked=np.array(fully_masked), layout=np.array(layout), case=np.array(name),
                  format=np.array(FORMAT), description=np.array(case.description))
    return arrays


def export_case(name: str, path: str | Path, *, layout: str = "bhnd") -> dict:
    """Write :func:`make_case` ``(name, layout=layout)`` to ``path`` (exactly that name); return the arrays.

    Parameters
    ----------
    name : str
        One of :data:`CASES`.
    path : str or Path
        The ``.npz`` file to write.
    layout : {"bhnd", "bnhd"}, default "bhnd"
        Axis order of q, k, v and the outputs.

    Returns
    -------
    dict
        The arrays written.
    """
    arrays = make_case(name, layout=layout)
    write_npz(path, arrays)
    return arrays


def load_check_file(path: str | Path) -> dict:
    r"""Read a check file into keyword arguments of :func:`refattn.oracle.check.check`.

    Parameters
    ----------
    path : str or Path
        An ``.npz`` file in the format of the module docstring, with ``candidate_out``.

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
    try:
        archive = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise FixtureError(f"{path}: no such file") from None
    except Exception as error:  # noqa: BLE001 - NumPy's header parser raises many kinds on junk
        raise FixtureError(f"{path}: not an npz archive readable without pickle ({_one_line(error)})") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise FixtureError(f"{path}: a single .npy array, not an npz archive of named arrays")
    with archive:
        arrays = {key: _member(path, archive, key) for key in archive.files}
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
            kwargs[name] = _float_array(path, key, arrays[key])
    if any(g in kwargs for g in ("dq", "dk", "dv")) and "d_out" not in kwargs:
        raise FixtureError(f"{path}: candidate gradients need 'd_out', the upstream gradient they were computed with")
    from .vectors import decode_vector, vector_ids  # it builds on this module

    if "mechanism" in arrays and _string(path, "mechanism", arrays["mechanism"], vector_ids()) != "sdpa":
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
            kwargs["causal"] = CAUSAL_NAMES[_string(path, "causal", causal, tuple(CAUSAL_NAMES))]
    if "scale" in arrays:
        scale = arrays["scale"]
        if scale.shape != () or scale.dtype.kind not in "fiu" or not np.isfinite(scale):
            shown = repr(scale.item()) if scale.shape == () else f"shape {scale.shape}"
            raise FixtureError(f"{path}: 'scale' must be a finite 0-d number, got dtype {scale.dtype}, {shown}")
        kwargs["scale"] = float(scale)
    if "fully_masked" in arrays:
        kwargs["fully_masked"] = _string(path, "fully_masked", arrays["fully_masked"], ("zero", "nan", "uniform"))
    if "layout" in arrays:
        kwargs["layout"] = _string(path, "layout", arrays["layout"], LAYOUTS)
    return kwargs


def check_file(path: str | Path, *, rule: str = "ratio", table: str | None = None,
               max_ulps: float | None = None, memory_budget: int | None = None) -> Report:
    """Load a check file and run :func:`~refattn.oracle.check.check` on it.

    Parameters
    ----------
    path : str or Path
        An ``.npz`` check file (inputs, conventions and ``candidate_out``; see the module docstring).
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
        raise FixtureError(f"{path}: {_one_line(error)}") from None
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
        raise FixtureError(f"{path}: {_one_line(error)}") from None
    for c in report.comparisons:
        if c.note:
            key = "candidate_out" if c.name == "out" else f"candidate_{c.name}"
            raise FixtureError(f"{path}: {key} has shape {c.candidate_shape} but the inputs give {c.shape}")
    return report


def _member(path, archive, key) -> np.ndarray:
    """Member ``key`` of the npz ``archive`` as an array, or a one-line ``FixtureError`` naming it."""
    try:
        x = archive[key]
    except Exception as error:  # noqa: BLE001 - NumPy's header parser raises many kinds on junk
        raise FixtureError(f"{path}: member {key!r} is not a .npy array readable without pickle "
                           f"({type(error).__name__}: {_one_line(error)})") from None
    if not isinstance(x, np.ndarray):          # NpzFile returns a member without the .npy magic as its raw bytes
        raise FixtureError(f"{path}: member {key!r} is not a .npy array ({len(x)} bytes without the .npy header)")
    return x


def _float_array(path, key, x):
    if x.dtype.kind != "f":
        raise FixtureError(f"{path}: {key!r} must be a float array, got dtype {x.dtype} with shape {x.shape}")
    return x


def _string(path, key, x, choices):
    if x.shape != () or x.dtype.kind not in "US":
        raise FixtureError(f"{path}: {key!r} must be a 0-d string array (np.array('...')), got {x.dtype} "
                           f"with shape {x.shape}")
    value = str(x) if x.dtype.kind == "U" else x.item().decode("ascii", "replace")
    if value not in choices:
        raise FixtureError(f"{path}: unknown {key} {value!r}; must be one of {', '.join(choices)}")
    return value


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__
