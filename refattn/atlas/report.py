r"""The atlas published: the README's table (between ``<!-- atlas:start/end -->``) and ``figures/atlas.png``.

The figure draws, per task, each row's output relative error on the model's q, k, v against its time over
sdpa's (top) and the model's accuracy with it against the same time (bottom). The Pareto front of the
approximations (the rows at their defaults that no other such row beats on both time and error) is
drawn as a step line and labelled; the exact rows sit in a band at the bottom of the error axis
(their errors, at most 1e-12, are round-off: drawn and printed by :func:`refattn.viz.roundoff`'s rule).
"""
from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .. import registry
from .runner import Atlas, TaskResult

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["ATLAS_END", "ATLAS_START", "EXACT_BOUND", "FAMILY_COLOURS",
           "KEPT_ACCURACY", "atlas_figure", "atlas_markdown", "pareto_front", "update_readme_atlas"]

ATLAS_START, ATLAS_END = "<!-- atlas:start -->\n", "<!-- atlas:end -->"
#: The bound every exact row's error must meet.
EXACT_BOUND = 1e-12


def atlas_markdown(atlas: Atlas) -> str:
    r"""The README's atlas table and the list of what was skipped, as Markdown.

    Parameters
    ----------
    atlas : Atlas
        A result of :func:`refattn.atlas.run_atlas`.

    Returns
    -------
    str
        A paragraph on how it was measured, one table row per atlas row, then every reason a record
        could not take a call, with the rows and calls it stopped.
    """
    tasks = list(atlas.baseline)
    baseline = ", ".join(f"{t} {_number(a, '.3f')}" for t, a in atlas.baseline.items())
    lines = [
        f"Softmax attention's accuracy: {baseline} ({_sequences(atlas)}). Seed {atlas.settings['seed']}: "
        "the random inputs and every mechanism's own draws. "
        "*error*: output relative error ‖Õ − O‖/‖O‖ on the model's q, k, v / on standard normal inputs of the "
        "same shapes; *mass*: exact softmax mass on the pairs the mechanism computes; *KL*: mean row "
        "KL(exact ‖ approx), — where its weights are not row distributions; both on the model's inputs, means "
        "over the attention calls taken. *time*: over sdpa's on the same calls, best of "
        f"{atlas.settings['repeats']}, all tasks (at these lengths overheads dominate, not the asymptotic "
        "cost); *accuracy*: with the mechanism in every attention call, no retraining. Rows marked (exact) are "
        "the record's exact limit.",
        "",
        "| mechanism | family | cost | time / sdpa | " + " | ".join(
            f"{t}: error (real / random) | {t}: mass / KL | {t}: accuracy" for t in tasks) + " |",
        "|---|---|---|---|" + "---|---|---|" * len(tasks),
    ]
    for row in atlas.rows:
        if row.skipped:
            continue
        name = f"`{row.id}`" + (" (exact)" if row.setting == "exact" else "")
        cells = [name, row.family, _escape(row.time), _ratio(row.time_ratio)]
        for t in tasks:
            cells += _task_cells(row.tasks[t])
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Skipped calls (a record that takes none of a task's calls has no cells for it):", ""]
    for reason, where in _skips(atlas).items():
        lines.append(f"- {_escape(reason)}: {', '.join(where)}")
    return "\n".join(lines) + "\n"


def update_readme_atlas(path, atlas: Atlas) -> bool:
    """Rewrite the atlas between the ``<!-- atlas:start/end -->`` markers of the README at ``path``.

    Parameters
    ----------
    path : str or pathlib.Path
        The README (Markdown) holding the two markers.
    atlas : Atlas
        The results to publish.

    Returns
    -------
    bool
        Whether the file changed.
    """
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if ATLAS_START not in text or ATLAS_END not in text:
        raise ValueError(f"{path} has no {ATLAS_START.strip()} … {ATLAS_END} markers")
    head, rest = text.split(ATLAS_START, 1)
    new = head + ATLAS_START + atlas_markdown(atlas) + ATLAS_END + rest.split(ATLAS_END, 1)[1]
    if new != text:
        path.write_text(new, encoding="utf-8")
    return new != text


def pareto_front(times, errors) -> list[int]:
    """Indices of the points no other point beats on both time and error (lower is better), by time.

    Parameters
    ----------
    times, errors : sequence of float
        One point per row.

    Returns
    -------
    list of int
        The front, in increasing time (and decreasing error).

    Examples
    --------
    >>> pareto_front([1.0, 2.0, 3.0, 4.0], [0.5, 0.6, 0.1, 0.1])
    [0, 2]
    """
    times, errors = np.asarray(times, float), np.asarray(errors, float)
    if times.shape != errors.shape or times.ndim != 1:
        raise ValueError(f"times and errors must be 1-D of one length, got {times.shape} and {errors.shape}")
    front, best = [], np.inf
    for i in np.lexsort((errors, times)):                          # by time, ties by error
        if errors[i] < best:
            front.append(int(i))
            best = errors[i]
    return front


def atlas_figure(atlas: Atlas) -> Figure:
    """Error and accuracy against measured time, one column per task, the approximations' Pareto front marked.

    Parameters
    ----------
    atlas : Atlas
        A result of :func:`refattn.atlas.run_atlas`.

    Returns
    -------
    fig : matplotlib.figure.Figure
        Per task: the approximations' output error (top), the exact rows' (middle strip, at most
        :data:`EXACT_BOUND`), the task accuracy of both (bottom, naming the approximations within
        :data:`KEPT_ACCURACY` of softmax's), against time over sdpa's.
    """
    import matplotlib.style

    from ..viz import STYLE_PATH, figure

    tasks = list(atlas.baseline)
    families = [f for f in registry.FAMILIES if any(row.family == f for row in atlas.rows)]
    colours = {f: FAMILY_COLOURS[i % len(FAMILY_COLOURS)] for i, f in enumerate(families)}
    with matplotlib.style.context(STYLE_PATH):
        fig = figure((6.5 * len(tasks), 11))
        axes = fig.subplots(3, len(tasks), squeeze=False, sharex="col", gridspec_kw={"height_ratios": [4, 1.2, 3]})
        for column, task in enumerate(tasks):
            _draw_task(axes[:, column], atlas, task, colours)
        handles = [axes[0, 0].scatter([], [], color=colours[f], s=25, label=f) for f in families]
        handles.append(axes[0, 0].scatter([], [], marker="D", facecolor="none", edgecolor="k", s=30,
                                          label="exact limit"))
        fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 6), fontsize=8)
        fig.suptitle("Fidelity atlas: registry entries in place of the trained models' softmax attention")
    return fig


#: The accuracy panels name the approximations whose accuracy is at most this far below softmax attention's.
KEPT_ACCURACY = 0.05

#: One colour per family (matplotlib's "tab10"), in the registry's family order.
FAMILY_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                  "#bcbd22", "#17becf")


def _draw_task(axes, atlas: Atlas, task: str, colours: dict) -> None:
    from ..viz import roundoff, shade_roundoff

    ax_error, ax_exact, ax_accuracy = axes
    rows = [r for r in atlas.rows if r.tasks[task].calls_taken and r.tasks[task].time_ratio is not None]
    for row in rows:
        result, exact = row.tasks[task], row.setting == "exact"
        style = dict(marker="D", facecolor="none", edgecolor=colours[row.family], s=30) if exact else \
            dict(marker="o", color=colours[row.family], s=25, alpha=0.85)
        (ax_exact if exact else ax_error).scatter(result.time_ratio, roundoff(result.error), zorder=3,
                                                  **style)
        if result.accuracy is not None:
            ax_accuracy.scatter(result.time_ratio, result.accuracy, zorder=3, **style)
    approx = [r for r in rows if r.setting == "default" and r.tasks[task].calls_taken == r.tasks[task].calls_total]
    front = [approx[i] for i in pareto_front([r.tasks[task].time_ratio for r in approx],
                                             [r.tasks[task].error for r in approx])]
    if front:
        x = [r.tasks[task].time_ratio for r in front]
        y = roundoff([r.tasks[task].error for r in front])
        ax_error.step(x, y, where="post", color="k", lw=1.0, zorder=2, label="Pareto front (approximations "
                      "taking every call)")
        for i, (row, xi, yi) in enumerate(zip(front, x, y, strict=True)):
            ax_error.annotate(row.id, (xi, yi), xytext=(4, 3 if i % 2 == 0 else -9), textcoords="offset points",
                              fontsize=7)
        ax_error.legend(loc="upper right", fontsize=8)
    ax_error.set(xscale="log", yscale="log", title=f"{task}: output relative error on the model's q, k, v",
                 ylabel="‖Õ − O‖ / ‖O‖")
    ax_exact.set(yscale="log", ylim=(None, EXACT_BOUND * 30), ylabel="exact rows")
    shade_roundoff(ax_exact)
    ax_exact.text(0.01, 0.9, f"error ≤ {EXACT_BOUND:g}: round-off", transform=ax_exact.transAxes, fontsize=7,
                  color="0.35", va="top")
    baseline = atlas.baseline[task]
    kept = [r.id for r in sorted(approx, key=lambda r: r.tasks[task].time_ratio) if baseline is not None and
            r.tasks[task].accuracy is not None and r.tasks[task].accuracy >= baseline - KEPT_ACCURACY]
    if kept:                                                       # the approximations that keep the task
        ax_accuracy.text(0.02, 0.5, textwrap.fill(f"within {KEPT_ACCURACY:g} of softmax's accuracy, fastest "
                                                  f"first: {', '.join(kept)}", 48),
                         transform=ax_accuracy.transAxes, fontsize=7, va="center",
                         bbox=dict(facecolor="white", edgecolor="0.8"))
    if baseline is not None:
        ax_accuracy.axhline(baseline, color="k", lw=0.8, ls="--", label=f"softmax attention {baseline:.3f}")
        ax_accuracy.legend(loc="center right", fontsize=8)
    ax_accuracy.set(xscale="log", ylim=(-0.03, 1.03), xlabel="time / sdpa's time (same calls, same process)",
                    ylabel="accuracy, no retraining", title=f"{task}: task accuracy")


def _task_cells(result: TaskResult) -> list[str]:
    if not result.calls_taken:
        return ["", "", ""]
    partial = "" if result.calls_taken == result.calls_total else \
        f" ({result.calls_taken} of {result.calls_total} calls)"
    error = f"{_computed(result.error, '.1e')} / {_computed(result.error_random, '.1e')}{partial}"
    kl = _computed(result.kl, ".2g")
    return [error, f"{_number(result.mass, '.3f')} / {kl}", _number(result.accuracy, ".3f")]


def _skips(atlas: Atlas) -> dict[str, list[str]]:
    """Each reason, with where it applied: ``label (task: call, call)``."""
    skips: dict[str, list[str]] = {}
    for row in atlas.rows:
        by_reason: dict[str, list[str]] = {}
        for task, result in row.tasks.items():
            for reason, calls in result.skipped.items():
                what = "all calls" if len(calls) == result.calls_total else ", ".join(calls)
                by_reason.setdefault(" ".join(reason.split()), []).append(f"{task}: {what}")
        for reason, where in by_reason.items():
            name = f"`{row.id}`" + (" (exact)" if row.setting == "exact" else "")
            skips.setdefault(reason, []).append(f"{name} ({'; '.join(where)})")
    return skips


def _sequences(atlas: Atlas) -> str:
    evaluated = atlas.settings.get("num_sequences") or {}
    if not evaluated:
        return "no model evaluated"
    return "fresh sequences: " + ", ".join(f"{task} {count}" for task, count in evaluated.items())


def _number(x: float | None, fmt: str) -> str:
    if x is None:
        return "—"
    if np.isinf(x):
        return "∞"
    return format(x, fmt)


def _computed(x: float | None, fmt: str) -> str:
    """An error or a divergence, by the figures' rule for round-off (:func:`refattn.viz.roundoff_text`):
    "< 1e-12" below the floor, so that its last bits, which change with the machine, are not printed."""
    from ..viz import roundoff_text

    return "—" if x is None else "∞" if np.isinf(x) else roundoff_text(x, fmt)


def _ratio(x: float | None) -> str:
    return "—" if x is None else f"{x:.2g}×" if x < 10 else f"{x:.0f}×"


def _escape(text: str) -> str:
    return re.sub(r"\s+", " ", text).replace("|", "\\|")

