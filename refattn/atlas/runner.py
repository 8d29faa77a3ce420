r"""Run every registry entry in place of softmax attention and measure how far it lands.

A row of the atlas is a registry record at one setting: its defaults (``"default"``), or its exact limit
(``"exact"``, the record's ``exact_options``; sdpa and causal_mask, exact at their defaults, have only this
row). Each row meets each task's attention calls, every (q, k, v, causal) that the trained model's attention
layers see on a batch of the task, per head, and the same calls with random inputs of the same shapes. It
reports, per task:

- the output relative error, the attention mass kept and the row KL (:mod:`refattn.atlas.metrics`), each
  the mean over the calls it takes, on the model's inputs (``real``) and on the random ones (``random``);
- its time over sdpa's on the same calls (best of ``repeats`` runs of each call through the registry's
  ``apply``, measured in this process);
- the model's accuracy when the row's attention replaces every attention call, without retraining.

A record that cannot take a call (it projects a layer's inputs with its own heads' parameters, its keys
are its queries, it has no causal form or only one, it needs n == m, or its ``apply`` refuses the shapes
with a ValueError) is listed with the reason; it is never dropped. Its metrics are over the calls it takes
and its accuracy is measured only when it takes them all.
"""
from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from .. import registry
from ..bench._measure import best_time
from ..common.checks import check_choice
from ..common.ints import check_positive_int
from ..core.sdpa import scaled_dot_product_attention
from ..mechanism import Mechanism
from .metrics import is_row_distribution, mass_kept, relative_error, row_kl

__all__ = ["Atlas", "AttentionCall", "Entry", "RowResult", "TaskInputs", "TaskResult", "atlas_entries",
           "attention_function", "run_atlas", "skip_reason"]

SETTINGS = ("default", "exact")


@dataclass(frozen=True)
class AttentionCall:
    """One attention call of a model: per-head queries, keys and values.

    Attributes
    ----------
    name : str
        Where it sits ("encoder.0.self", "decoder.0.cross", "layer.1", ...).
    q : (batch, h, n, d) ndarray
    k : (batch, h, m, d) ndarray
    v : (batch, h, m, d_v) ndarray
    causal : bool or str
        The ``causal`` argument the model passes.
    """

    name: str
    q: NDArray = field(repr=False)
    k: NDArray = field(repr=False)
    v: NDArray = field(repr=False)
    causal: bool | str = False

    def random_like(self, rng: np.random.Generator) -> AttentionCall:
        """The same call with standard normal q, k, v of the same shapes."""
        return AttentionCall(self.name, *(rng.standard_normal(x.shape) for x in (self.q, self.k, self.v)),
                             self.causal)


@dataclass(frozen=True)
class TaskInputs:
    """What the atlas needs of a task: its attention calls and how to score an attention on it.

    Attributes
    ----------
    name : str
        The task's name.
    calls : tuple of AttentionCall
        Every attention call of the model on a batch of the task.
    accuracy : callable or None
        ``accuracy(attention) -> float``: the task accuracy with ``attention`` (a function with
        ``scaled_dot_product_attention``'s signature, or None for softmax attention) in every call; None when
        there is no model to score.
    num_sequences : int or None
        How many sequences ``accuracy`` scores (for the report).
    """

    name: str
    calls: tuple[AttentionCall, ...]
    accuracy: Callable[[Callable | None], float] | None = field(default=None, repr=False)
    num_sequences: int | None = None


@dataclass(frozen=True)
class Entry:
    """A row of the atlas: a registry record at its defaults or at its exact limit."""

    record: Mechanism
    setting: str

    @property
    def label(self) -> str:
        """``id`` for the defaults, ``id (exact)`` for the exact limit."""
        return self.record.id if self.setting == "default" else f"{self.record.id} (exact)"

    @property
    def exact(self) -> bool:
        """Whether the row is held to exact softmax attention."""
        return self.setting == "exact"

    def options(self, n: int, m: int) -> dict:
        """The options of ``apply`` at n queries and m keys."""
        return self.record.exact(n, m) if self.exact else {}

    def apply(self, q: NDArray, k: NDArray, v: NDArray, *, causal, seed: int, return_weights: bool = False):
        """The record's ``apply`` at the entry's options, with ``rng=seed`` when the record draws anything."""
        options = self.options(q.shape[-2], k.shape[-2]) | ({"rng": seed} if self.record.draws else {})
        return self.record.apply(q, k, v, causal=causal, return_weights=return_weights, **options)


@dataclass
class TaskResult:
    """One row's measurements on one task (None where not measured; ``skipped`` says why)."""

    calls_taken: int = 0
    calls_total: int = 0
    error: float | None = None
    error_random: float | None = None
    mass: float | None = None
    mass_random: float | None = None
    kl: float | None = None
    kl_random: float | None = None
    kl_note: str | None = None
    time_ratio: float | None = None
    seconds: float | None = None
    sdpa_seconds: float | None = None
    accuracy: float | None = None
    skipped: dict[str, list[str]] = field(default_factory=dict)   # reason -> the calls it stops


@dataclass
class RowResult:
    """One row of the atlas: the entry's fields and its result on every task."""

    id: str
    label: str
    family: str
    setting: str
    time: str
    tasks: dict[str, TaskResult]

    @property
    def time_ratio(self) -> float | None:
        """Time over sdpa's over every call taken, all tasks together."""
        seconds = [t.seconds for t in self.tasks.values() if t.seconds is not None]
        sdpa = [t.sdpa_seconds for t in self.tasks.values() if t.sdpa_seconds is not None]
        return sum(seconds) / sum(sdpa) if seconds and sum(sdpa) > 0 else None

    @property
    def skipped(self) -> bool:
        """Whether it took no call of any task."""
        return all(t.calls_taken == 0 for t in self.tasks.values())


@dataclass
class Atlas:
    """The atlas: every row's results, the baseline accuracies and how it was run."""

    rows: list[RowResult]
    baseline: dict[str, float | None]
    settings: dict

    def as_dict(self) -> dict:
        """JSON-serialisable (infinities as the string "inf")."""
        def clean(x):
            if isinstance(x, float) and not math.isfinite(x):
                return str(x)
            if isinstance(x, dict):
                return {k: clean(v) for k, v in x.items()}
            if isinstance(x, (list, tuple)):
                return [clean(v) for v in x]
            return x

        rows = [{"id": r.id, "label": r.label, "family": r.family, "setting": r.setting, "time": r.time,
                 "time_ratio": r.time_ratio, "tasks": {name: vars(t) for name, t in r.tasks.items()}}
                for r in self.rows]
        return clean({"settings": self.settings, "baseline": self.baseline, "rows": rows})


def atlas_entries(ids: Iterable[str] | None = None, settings: Iterable[str] = SETTINGS) -> list[Entry]:
    """The atlas's rows, in catalogue order: every record that attends over (q, k, v).

    Records of kind "attention" or "mask" get a default row, unless their defaults are exact attention
    (``exact_options == {}``), and an exact row where they have an exact limit.

    Parameters
    ----------
    ids : iterable of str, optional
        Only these records (each must be of kind "attention" or "mask").
    settings : iterable of {"default", "exact"}, default both
        Only the rows at these settings.

    Returns
    -------
    list of Entry
    """
    settings = tuple(settings)
    for setting in settings:
        check_choice("settings", setting, SETTINGS)
    records = registry.all() if ids is None else [registry.get(i) for i in ids]
    entries = []
    for record in records:
        if record.kind == "component":
            if ids is not None:
                raise ValueError(f"ids: {record.id} is a component (no apply), it has no row in the atlas")
            continue
        if "default" in settings and (callable(record.exact_options) or record.exact_options != {}):
            entries.append(Entry(record, "default"))           # exact_options None, or options that differ
        if "exact" in settings and record.exact_options is not None:
            entries.append(Entry(record, "exact"))
    return entries


def skip_reason(entry: Entry, call: AttentionCall) -> str | None:
    """Why ``entry`` cannot take ``call`` by the record's own fields, or None when it can.

    Parameters
    ----------
    entry : Entry
        The row.
    call : AttentionCall
        The model's call.

    Returns
    -------
    str or None
        The reason, in words.

    Examples
    --------
    >>> q = np.zeros((1, 2, 4, 8))
    >>> skip_reason(Entry(registry.get("linformer"), "default"), AttentionCall("layer.0", q, q, q, True))
    'no causal form; the model attends causally'
    """
    record, n, m = entry.record, call.q.shape[-2], call.k.shape[-2]
    if record.layer_inputs and not entry.exact:
        return ("takes a layer's inputs (width d_model) and projects them with its own heads' parameters; the "
                "model gives one head's q, k, v")
    if record.shared_qk:
        return "its keys are its queries (shared QK); the model's heads have their own keys"
    if call.causal not in record.causal_settings:
        return ("no causal form; the model attends causally" if call.causal is not False else
                "causal only; the model attends to every key")
    if not record.cross and n != m and call.causal is False:
        return f"self-attention only (n = m); the model's cross-attention has n = {n}, m = {m}"
    return None


def attention_function(entry: Entry, seed: int) -> Callable:
    """``entry`` as a drop-in for ``scaled_dot_product_attention(q, k, v, *, causal, mask)``.

    Each call runs ``entry.record.apply`` with the entry's options at the call's n and m and, when the record
    draws anything, ``rng=seed`` (the same draws for every call of the same shapes). A ``mask`` other than
    None is refused (no record but sdpa's takes one).

    Parameters
    ----------
    entry : Entry
        The row.
    seed : int
        The ``rng`` of every call.

    Returns
    -------
    callable
        ``attention(q, k, v, *, causal=False, mask=None) -> out``.
    """
    def attention(q, k, v, *, causal=False, mask=None):
        if mask is not None:
            raise ValueError(f"the atlas's {entry.label} takes no mask; got one of shape {np.shape(mask)}")
        return entry.apply(q, k, v, causal=causal, seed=seed).output

    return attention


def run_atlas(tasks: Sequence[TaskInputs], *, ids: Iterable[str] | None = None, settings: Iterable[str] = SETTINGS,
              repeats: int = 3, seed: int = 0, progress: bool = False) -> Atlas:
    r"""Measure every atlas row on every task.

    Parameters
    ----------
    tasks : sequence of TaskInputs
        The tasks (see :func:`refattn.atlas.model_tasks` for the trained models').
    ids : iterable of str, optional
        Only these records (default: every record of kind "attention" or "mask").
    settings : iterable of {"default", "exact"}, default both
        Only the rows at these settings.
    repeats : int, default 3
        Timed runs of each call; the best counts.
    seed : int, default 0
        Seed of the random inputs and of every mechanism's own draws (``rng=seed`` where it draws any).
    progress : bool, default False
        One line per row on stderr.

    Returns
    -------
    Atlas
    """
    repeats = check_positive_int("repeats", repeats)
    entries = atlas_entries(ids, settings)
    random_calls = {t.name: [c.random_like(np.random.default_rng([seed, i])) for i, c in enumerate(t.calls)]
                    for t in tasks}
    exact = {t.name: [_exact(c) for c in t.calls] for t in tasks}
    exact_random = {t.name: [_exact(c) for c in random_calls[t.name]] for t in tasks}
    sdpa = registry.get("sdpa").apply                              # through the same validation layer as the rows
    sdpa_seconds = {t.name: [best_time(lambda c=c: sdpa(c.q, c.k, c.v, causal=c.causal), repeats) for c in t.calls]
                    for t in tasks}
    baseline = {t.name: None if t.accuracy is None else t.accuracy(None) for t in tasks}
    rows = []
    for number, entry in enumerate(entries, 1):
        results = {}
        for task in tasks:
            results[task.name] = _run_task(entry, task, random_calls[task.name], exact[task.name],
                                           exact_random[task.name], sdpa_seconds[task.name], repeats, seed)
        row = RowResult(entry.record.id, entry.label, entry.record.family, entry.setting, entry.record.time, results)
        rows.append(row)
        if progress:
            summary = "; ".join(f"{name} {_progress(r)}" for name, r in results.items())
            print(f"[{number}/{len(entries)}] {entry.label}: {summary}", file=sys.stderr, flush=True)
    settings = {"seed": seed, "repeats": repeats,
                "num_sequences": {t.name: t.num_sequences for t in tasks if t.accuracy is not None},
                "calls": {t.name: [[c.name, list(c.q.shape), list(c.k.shape), c.causal] for c in t.calls]
                          for t in tasks}}
    return Atlas(rows, baseline, settings)


def _exact(call: AttentionCall) -> tuple[NDArray, NDArray]:
    return scaled_dot_product_attention(call.q, call.k, call.v, causal=call.causal, return_weights=True)


def _run_task(entry, task, random_calls, exact, exact_random, sdpa_seconds, repeats, seed) -> TaskResult:
    result = TaskResult(calls_total=len(task.calls))
    per_call, taken = [], []
    for index, (call, random_call) in enumerate(zip(task.calls, random_calls, strict=True)):
        reason = skip_reason(entry, call)
        if reason is None:
            try:
                measured = [_measure(entry, c, *e, seed) for c, e in ((call, exact[index]),
                                                                    (random_call, exact_random[index]))]
            except (ValueError, TypeError) as error:
                reason = f"{type(error).__name__}: {error}"
        if reason is not None:
            result.skipped.setdefault(reason, []).append(call.name)
            continue
        per_call.append(measured)
        taken.append(index)
    result.calls_taken = len(taken)
    if not taken:
        return result
    real, random = zip(*per_call, strict=True)
    result.error, result.error_random = _mean(m["error"] for m in real), _mean(m["error"] for m in random)
    if real[0]["mass"] is not None:                                # None where weights map channels, not pairs
        result.mass, result.mass_random = _mean(m["mass"] for m in real), _mean(m["mass"] for m in random)
    notes = {m["kl_note"] for m in (*real, *random)} - {None}
    if notes:
        result.kl_note = "; ".join(sorted(notes))
    else:
        result.kl, result.kl_random = _mean(m["kl"] for m in real), _mean(m["kl"] for m in random)
    result.seconds = sum(best_time(lambda c=task.calls[i]: entry.apply(c.q, c.k, c.v, causal=c.causal, seed=seed),
                                   repeats) for i in taken)
    result.sdpa_seconds = sum(sdpa_seconds[i] for i in taken)
    result.time_ratio = result.seconds / result.sdpa_seconds if result.sdpa_seconds > 0 else None
    if task.accuracy is not None and len(taken) == len(task.calls):
        try:
            result.accuracy = float(task.accuracy(attention_function(entry, seed)))
        except (ValueError, TypeError) as error:
            result.skipped.setdefault(f"accuracy: {type(error).__name__}: {error}", []).append("evaluation")
    return result


def _measure(entry: Entry, call: AttentionCall, exact_out: NDArray, exact_weights: NDArray, seed: int) -> dict:
    result = entry.apply(call.q, call.k, call.v, causal=call.causal, seed=seed, return_weights=True)
    out = result.output
    if out.shape != exact_out.shape:
        raise ValueError(f"output of shape {out.shape}, the model's attention gives {exact_out.shape}")
    mixing = entry.record.mixing
    measured = {"error": relative_error(out, exact_out), "mass": None, "kl": None, "kl_note": None}
    if mixing != "channels":                                       # weights over (query, key) pairs: mass kept
        allowed = result.allowed
        if allowed is not None and mixing == "per_channel":       # (..., d_v, n, m): a pair any channel computes
            allowed = np.asarray(allowed).any(axis=-3)
        measured["mass"] = mass_kept(exact_weights, None if allowed is None else _pairs(allowed, exact_weights.shape))
    weights = None if result.weights is None or mixing != "tokens" else _pairs(result.weights, exact_weights.shape)
    if mixing != "tokens":
        measured["kl_note"] = f"its weights are not one (n, m) matrix (mixing {mixing!r})"
    elif weights is None:
        measured["kl_note"] = "it returns no weights"
    elif not is_row_distribution(weights):
        measured["kl_note"] = "its rows are not distributions"
    else:
        measured["kl"] = row_kl(exact_weights, weights)
    return measured


def _pairs(x: NDArray, shape: tuple[int, ...]) -> NDArray:
    """``x`` (weights or allowed pairs) on the model's (batch, h, n, m) grid, dropping the one-head axis that a
    multi-head record's exact limit adds."""
    x = np.asarray(x)
    while x.ndim > len(shape) and x.shape[-3] == 1:
        x = x[..., 0, :, :]
    return np.broadcast_to(x, shape)


def _mean(values: Iterable[float]) -> float:
    return float(np.mean(list(values)))


def _progress(r: TaskResult) -> str:
    if r.calls_taken == 0:
        return "skipped"
    accuracy = "" if r.accuracy is None else f", accuracy {r.accuracy:.3f}"
    return f"{r.calls_taken}/{r.calls_total} calls, error {r.error:.2e}{accuracy}"

