r"""The ``.npz`` file format of fixtures and test vectors: reading, its errors, exact values.

Every file is read with ``allow_pickle=False``; strings are 0-d unicode arrays (``np.array("top-left")``);
files are written by :func:`refattn.common.npz.write_npz` (the same arrays give the same bytes). A fixture
(:mod:`refattn.oracle.fixtures`) holds one scaled dot-product case; a test vector
(:mod:`refattn.oracle.vectors`, whose docstring documents its members) any registered mechanism; a check
file is either, plus the candidate's results under ``candidate_*`` keys (:mod:`refattn.oracle.checkfile`).

A fixture's keys (shapes in layout "bhnd"; in "bnhd" the two axes before the last are swapped, except in
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

import dataclasses
import importlib
import json
from pathlib import Path

import numpy as np

__all__ = ["CANDIDATE_KEYS", "FIXTURE_CAUSAL", "FixtureError", "VECTOR_CAUSAL", "decode_tree", "decode_vector",
           "read_npz", "representable"]

FIXTURE_CAUSAL = {"none": False, "top-left": "top-left", "bottom-right": "bottom-right"}
"""A fixture's ``causal`` string -> sdpa's ``causal`` value."""
VECTOR_CAUSAL = {False: "none", True: "top-left", "bottom-right": "bottom-right"}
"""A mechanism's ``causal`` value -> a test vector's ``causal`` string."""
CANDIDATE_KEYS = ("candidate_out", "candidate_dq", "candidate_dk", "candidate_dv")


class FixtureError(ValueError):
    """A file that is not a usable fixture, vector or check file; the message is one line naming the problem."""


def representable(x: np.ndarray) -> np.ndarray:
    """Round to 8 significant bits, 0 below 2⁻¹⁴: exact in bfloat16, float16, float32 and float64."""
    mantissa, exponent = np.frexp(x)
    y = np.ldexp(np.round(mantissa * 256.0) / 256.0, exponent)
    return np.where(np.abs(y) < 2.0**-14, 0.0, y)


def read_npz(path: str | Path) -> dict:
    """Every member of the ``.npz`` file ``path``, read without pickle, by name.

    Raises
    ------
    FixtureError
        With a one-line message: no such file, not an npz archive, a member that is not a .npy array.
    """
    path = Path(path)
    try:
        archive = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise FixtureError(f"{path}: no such file") from None
    except Exception as error:  # noqa: BLE001 - NumPy's header parser raises many kinds on junk
        raise FixtureError(f"{path}: not an npz archive readable without pickle ({one_line(error)})") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise FixtureError(f"{path}: a single .npy array, not an npz archive of named arrays")
    with archive:
        return {key: _member(path, archive, key) for key in archive.files}


def decode_vector(path, arrays: dict) -> dict:
    """The members ``arrays`` of vector ``path`` with ``options``, ``draws`` and ``causal`` decoded (see
    :func:`load_vector`)."""
    for key in ("mechanism", "q", "k", "v", "causal", "options", "draws"):
        if key not in arrays:
            raise FixtureError(f"{path}: a vector needs {key!r} (has: {', '.join(sorted(arrays))})")
    decoded = dict(arrays)
    for key in ("options", "draws"):
        try:
            tree = json.loads(str(arrays[key]))
            if not isinstance(tree, dict):
                raise ValueError("not a JSON object")
            decoded[key] = {name: decode_tree(node, arrays) for name, node in tree.items()}
        except (ValueError, KeyError, TypeError, ImportError, AttributeError) as error:
            raise FixtureError(f"{path}: member {key!r} is not a readable tree of options ({error})") from None
    causal = str(arrays["causal"])
    names = {name: value for value, name in VECTOR_CAUSAL.items()}
    if causal not in names:
        raise FixtureError(f"{path}: 'causal' must be one of {', '.join(names)}, got {causal!r}")
    decoded["causal"] = names[causal]
    decoded["mechanism"] = str(arrays["mechanism"])
    return decoded


def decode_tree(node, arrays: dict):
    """The option value a JSON ``node`` of the trees of :mod:`refattn.oracle.vectors` stands for, its arrays taken
    from ``arrays``."""
    if isinstance(node, list):
        return [decode_tree(x, arrays) for x in node]
    if not isinstance(node, dict):
        return node
    if set(node) == {"array"}:
        return arrays[node["array"]]
    if set(node) == {"float"}:
        return float(node["float"])
    if set(node) == {"tuple"}:
        return tuple(decode_tree(x, arrays) for x in node["tuple"])
    if set(node) == {"dataclass", "fields"}:
        module, _, name = node["dataclass"].partition(":")
        if not module.startswith("refattn."):
            raise ValueError(f"dataclass {node['dataclass']!r} is not refattn's")
        cls = getattr(importlib.import_module(module), name)
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
            raise ValueError(f"{node['dataclass']!r} is not a dataclass")
        return cls(**{key: decode_tree(value, arrays) for key, value in node["fields"].items()})
    raise ValueError(f"unknown tree node {node!r}")


def _member(path, archive, key) -> np.ndarray:
    """Member ``key`` of the npz ``archive`` as an array, or a one-line ``FixtureError`` naming it."""
    try:
        x = archive[key]
    except Exception as error:  # noqa: BLE001 - NumPy's header parser raises many kinds on junk
        raise FixtureError(f"{path}: member {key!r} is not a .npy array readable without pickle "
                           f"({type(error).__name__}: {one_line(error)})") from None
    if not isinstance(x, np.ndarray):          # NpzFile returns a member without the .npy magic as its raw bytes
        raise FixtureError(f"{path}: member {key!r} is not a .npy array ({len(x)} bytes without the .npy header)")
    return x


def float_array(path, key, x):
    if x.dtype.kind != "f":
        raise FixtureError(f"{path}: {key!r} must be a float array, got dtype {x.dtype} with shape {x.shape}")
    return x


def string(path, key, x, choices):
    if x.shape != () or x.dtype.kind not in "US":
        raise FixtureError(f"{path}: {key!r} must be a 0-d string array (np.array('...')), got {x.dtype} "
                           f"with shape {x.shape}")
    value = str(x) if x.dtype.kind == "U" else x.item().decode("ascii", "replace")
    if value not in choices:
        raise FixtureError(f"{path}: unknown {key} {value!r}; must be one of {', '.join(choices)}")
    return value


def one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__
