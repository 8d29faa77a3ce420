r"""Test vectors for every registered attention mechanism: ``.npz`` files any language can read.

``python -m refattn export --mechanism ID [--case NAME] --out F.npz`` writes one vector;
``python -m refattn vectors --out DIR`` writes the whole suite and ``DIR/manifest.json``;
``python -m refattn check F.npz`` judges the ``candidate_out`` (and ``candidate_dq/dk/dv``) added
to a vector. Every registry entry with a uniform ``apply`` has a vector: the inputs, every random
draw and learned parameter, the options, refattn's float64 output, its effective weights where
defined and its gradients where refattn has them.

**Format ``refattn-vectors-1``.** A plain ``.npz`` (a zip of ``.npy`` files, read with
``allow_pickle=False``; elsewhere any zip reader and the ``.npy`` format, whose header is a short
ASCII dict of dtype, order and shape) holding only numeric and bool arrays and 0-d unicode strings
(``<U…``, UTF-32). The zip entries are stored uncompressed with a fixed date, so the same vector is
the same bytes on every run. Members:

    format       0-d str   "refattn-vectors-1"
    mechanism    0-d str   the registry id (``python -m refattn list``)
    case         0-d str   "default" | "causal" | "bottom_right"
    description  0-d str   one line: the case and the shapes
    q, k, v      float64   apply's inputs, shapes (b, n, d), (b, m, d), (b, m, d); values exact in bfloat16
                           (8 significant bits), so every dtype reads the same numbers
    causal       0-d str   "none" | "top-left" | "bottom-right" (query i sees keys j <= i + m − n)
    options      0-d str   JSON object: the options given to apply besides q, k, v, causal and the draws
    defaults     0-d str   JSON object: apply's defaults for every option the file does not give
    draws        0-d str   JSON object: every random draw and learned parameter, by apply option
    draw.NAME[.FIELD...]   the draws' arrays (see "Trees" below)
    out          float64   apply's output (b, n, d_v): refattn's float64 result, the expected value
    weights      float64   the effective weights where defined (shape as the record's ``mixing``:
                           (b, [h,] n, m) token weights with out = weights @ v, or its documented form)
    allowed      bool      the pairs the mechanism lets each query see, where it has a pattern
    d_out        float64   an upstream gradient of out's shape   } only for the ids of
    dq, dk, dv   float64   the gradients of q, k, v for d_out    } ``refattn.oracle.vjp.GRADIENT_IDS``
    dparams.FIELD          the parameters' gradients (multi_head, cross_attention)
    scale, fully_masked, layout   sdpa only: its conventions as in :mod:`refattn.oracle.fixtures`, so
                           an sdpa vector is also a fixture and gets every hint of its check
    candidate_out, candidate_dq, candidate_dk, candidate_dv   added by the implementation under test

**Trees.** Options and draws are JSON values in which arrays are named members of the file:
``{"array": "draw.params.w_q"}``. A learned parameter is a frozen dataclass, written
``{"dataclass": "refattn.core.multi_head:MultiHeadParams", "fields": {"w_q": {"array": ...},
"b_q": null, ...}}``; a tuple is ``{"tuple": [...]}``, a list a JSON array; numbers, strings,
booleans and null are themselves, and ``{"float": "inf"}`` (``"-inf"``, ``"nan"``) a non-finite
number. Arrays of the draws are named ``draw.`` + the dotted path of option and fields (tuple
items by index: ``draw.convs.0.kernel``); arrays of other options ``option.`` + the path. To
reproduce ``out``, call the mechanism with q, k, v, causal, the options and the draws.

**Checking.** An sdpa vector is checked as a fixture (:func:`refattn.oracle.check`, with its
hints). Any other is checked by :func:`refattn.oracle.check.check_mechanism`: the same rules,
report and exit codes, the oracle being the mechanism's ``apply`` rerun on the file's inputs.

**Manifest.** ``DIR/manifest.json``: ``{"format": ..., "files": [{"id", "case", "file", "sha256",
"format", "arrays": {name: {"shape": [...], "dtype": "float64"}}}, ...]}``, one entry per file.
"""
from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import math
import zlib
from pathlib import Path

import numpy as np

from .. import registry
from ..common.checks import default_scale
from ..common.npz import write_npz
from ..mechanism import PerShape, WhenDrawn
from .npz import VECTOR_CAUSAL, decode_tree, decode_vector, read_npz, representable
from .vjp import GRADIENT_IDS, record_vjp

__all__ = ["CASE_NAMES", "FORMAT", "decode_tree", "decode_vector", "export_vector", "load_vector", "make_vector",
           "replay", "vector_cases", "vector_ids", "write_npz", "write_suite"]

FORMAT = "refattn-vectors-1"
CASE_NAMES = ("default", "causal", "bottom_right")


def vector_ids() -> list[str]:
    """Every registry id with a uniform ``apply``, in catalogue order."""
    return [m.id for m in registry.all() if m.apply is not None]


def vector_cases(id: str) -> tuple[str, ...]:  # noqa: A002 - the registry's word
    """The cases of ``id``: "default" (its first causal setting), "causal" when it has both a non-causal and a
    causal form, "bottom_right" when it decodes with a key/value cache."""
    mech = registry.get(id)
    return ("default",) + (("causal",) if mech.noncausal and mech.causal else ()) + \
        (("bottom_right",) if mech.incremental else ())


def make_vector(id: str, case: str = "default") -> dict:  # noqa: A002 - the registry's word
    r"""The arrays of the test vector of registry entry ``id`` in ``case`` (the module docstring's members).

    Parameters
    ----------
    id : str
        A registered id with an ``apply`` (:func:`vector_ids`).
    case : {"default", "causal", "bottom_right"}
        One of :func:`vector_cases` ``(id)``.

    Returns
    -------
    dict of str to ndarray

    Examples
    --------
    >>> arrays = make_vector("performer_positive", "causal")
    >>> arrays["q"].shape, arrays["draw.omega"].shape, str(arrays["causal"]), str(arrays["draws"])
    ((2, 5, 4), (64, 4), 'top-left', '{"omega": {"array": "draw.omega"}}')
    """
    mech = registry.get(id)
    if mech.apply is None:
        raise ValueError(f"{id!r} is a component (no apply): it has no test vector; ids with one: "
                         f"{', '.join(vector_ids())}")
    cases = vector_cases(id)
    if case not in cases:
        raise ValueError(f"{id!r} has the cases {', '.join(cases)}; got {case!r}")
    causal = {"default": mech.causal_settings[0], "causal": True, "bottom_right": "bottom-right"}[case]
    n, m = (5, 7) if mech.cross else (mech.example_length, mech.example_length)
    if case == "bottom_right":
        n = 3                                                      # 3 new queries, the last 3 of m positions
    seed = zlib.crc32(f"{id}:{case}".encode())                     # the same numbers on every machine
    rng = np.random.default_rng(seed)
    q = representable(rng.standard_normal((2, n, 4)))
    k = q[:, -m:].copy() if mech.shared_qk else representable(rng.standard_normal((2, m, 4)))
    v = representable(rng.standard_normal((2, m, 4)))
    result = mech.apply(q, k, v, causal=causal, rng=rng, return_weights=True, return_draws=True)
    arrays = {"format": np.array(FORMAT), "mechanism": np.array(id), "case": np.array(case),
              "description": np.array(f"{mech.title}: {case}, causal={VECTOR_CAUSAL[causal]}, b=2, n={n}, m={m}, "
                                      "d=4"),
              "q": q, "k": k, "v": v, "causal": np.array(VECTOR_CAUSAL[causal])}
    draws = {name: _encode(value, f"draw.{name}", arrays) for name, value in result.draws.items()}
    arrays["options"] = np.array(json.dumps({}))
    arrays["defaults"] = np.array(json.dumps(_defaults(mech, arrays)))
    arrays["draws"] = np.array(json.dumps(draws))
    arrays["out"] = result.output
    if result.weights is not None:
        arrays["weights"] = result.weights
    if result.allowed is not None:
        arrays["allowed"] = np.asarray(result.allowed, dtype=bool)
    if id in GRADIENT_IDS:
        d_out = representable(rng.standard_normal(result.output.shape))
        arrays["d_out"] = d_out
        arrays["dq"], arrays["dk"], arrays["dv"], dparams = record_vjp(id, q, k, v, d_out, causal=causal,
                                                                       draws=result.draws)
        for f in dataclasses.fields(dparams) if dparams is not None else ():
            if getattr(dparams, f.name) is not None:
                arrays[f"dparams.{f.name}"] = getattr(dparams, f.name)
    if id == "sdpa":                                               # also a fixture: its conventions spelled out
        arrays.update(scale=np.array(default_scale(q.shape[-1]), dtype=np.float64), fully_masked=np.array("zero"),
                      layout=np.array("bhnd"))
    return arrays


def export_vector(id: str, path: str | Path, case: str = "default") -> dict:  # noqa: A002 - the registry's word
    """Write :func:`make_vector` ``(id, case)`` to ``path`` (exactly that name); return the arrays."""
    arrays = make_vector(id, case)
    write_npz(path, arrays)
    return arrays


def write_suite(folder: str | Path, ids: list[str] | None = None, *, progress: bool = False) -> dict:
    """Write the "default" vector of every id (all of :func:`vector_ids` by default), and its "causal" one where
    it has one, as ``folder/ID-CASE.npz``, and ``folder/manifest.json``; return the manifest."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    entries = []
    for id in vector_ids() if ids is None else ids:  # noqa: A001 - the registry's word
        for case in [c for c in vector_cases(id) if c in ("default", "causal")]:
            arrays = make_vector(id, case)
            name = f"{id}-{case}.npz"
            data = write_npz(folder / name, arrays)
            entries.append({"id": id, "case": case, "file": name, "sha256": hashlib.sha256(data).hexdigest(),
                            "format": FORMAT, "arrays": {key: {"shape": list(np.shape(x)),
                                                               "dtype": np.asarray(x).dtype.str[1:]
                                                               if np.asarray(x).dtype.kind == "U" else
                                                               np.asarray(x).dtype.name}
                                                         for key, x in arrays.items()}})
            if progress:
                import sys

                print(f"wrote {folder / name}", file=sys.stderr)
    manifest = {"format": FORMAT, "files": entries}
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return manifest


def load_vector(path: str | Path) -> dict:
    """A vector's members, with ``options`` and ``draws`` decoded into apply's values and ``causal`` as apply takes
    it (False, True or "bottom-right"); ``FixtureError`` for a file that is not a readable vector."""
    return decode_vector(path, read_npz(path))


def replay(vector: dict):
    """Rerun the mechanism of a decoded vector (:func:`load_vector`) with its inputs, options and draws, no rng;
    return its ``AttentionResult``."""
    apply = registry.get(vector["mechanism"]).apply
    if apply is None:
        raise ValueError(f"{vector['mechanism']!r} has no uniform apply, so no test vector")
    return apply(vector["q"], vector["k"], vector["v"], causal=vector["causal"], return_weights=True,
                 **vector["options"], **vector["draws"])


def _encode(value, name: str, arrays: dict):
    """The JSON node of ``value``, its arrays added to ``arrays`` under ``name`` (dotted paths)."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biuf":
            raise TypeError(f"{name}: only numeric and bool arrays go into a vector, got dtype {value.dtype}")
        arrays[name] = value
        return {"array": name}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        cls = type(value)
        return {"dataclass": f"{cls.__module__}:{cls.__qualname__}",
                "fields": {f.name: _encode(getattr(value, f.name), f"{name}.{f.name}", arrays)
                           for f in dataclasses.fields(value)}}
    if isinstance(value, tuple):
        return {"tuple": [_encode(x, f"{name}.{i}", arrays) for i, x in enumerate(value)]}
    if isinstance(value, list):
        return [_encode(x, f"{name}.{i}", arrays) for i, x in enumerate(value)]
    if isinstance(value, (np.floating, float)) and not isinstance(value, bool) and not math.isfinite(value):
        return {"float": repr(float(value))}
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"{name}: cannot write a {type(value).__name__} into a vector")


def _defaults(mech, arrays: dict) -> dict:
    """apply's keyword defaults (its options but causal, rng, the flags and the draws), encoded; a default that
    depends on the lengths (:class:`~refattn.mechanism.PerShape`) at the vector's n and m, one that sizes a draw
    (:class:`~refattn.mechanism.WhenDrawn`) as the value the vector's draws were made with."""
    skip = {"causal", "rng", "return_weights", "return_draws", *mech.draws}
    n, m = arrays["q"].shape[-2], arrays["k"].shape[-2]

    def value(default):
        return default(n, m) if isinstance(default, PerShape) else \
            default.value if isinstance(default, WhenDrawn) else default

    def data(default) -> bool:                                     # a function (a feature map) is code, not data:
        return isinstance(default, PerShape) or not callable(default)   # a replay calls apply with its own

    return {p.name: _encode(value(p.default), f"option.{p.name}", arrays)
            for p in inspect.signature(mech.apply.__wrapped__).parameters.values()
            if p.kind is p.KEYWORD_ONLY and p.name not in skip and p.default is not p.empty and data(p.default)}
