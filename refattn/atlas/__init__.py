r"""The fidelity atlas: every approximation of the registry in place of a trained model's softmax attention.

Each registry record that attends over (q, k, v) runs, at its defaults and at its exact limit, on every
attention call of the trained models of :mod:`refattn.training` (their real per-head q, k, v) and on random
inputs of the same shapes; the atlas reports how far its output and weights land from exact softmax
attention (:mod:`refattn.atlas.metrics`), its cost (the record's and a measured time over sdpa's) and the
model's accuracy with it in every attention call, without retraining (:mod:`refattn.atlas.runner`).
``python -m refattn atlas`` recomputes ``figures/atlas.png`` and the README's table
(:mod:`refattn.atlas.report`).
"""
from .metrics import is_row_distribution, mass_kept, relative_error, row_kl
from .models import TASK_NAMES, model_task
from .report import atlas_figure, atlas_markdown, pareto_front, update_readme_atlas
from .runner import (
    Atlas,
    AttentionCall,
    Entry,
    RowResult,
    TaskInputs,
    TaskResult,
    atlas_entries,
    attention_function,
    run_atlas,
    skip_reason,
)

__all__ = ["TASK_NAMES", "Atlas", "AttentionCall", "Entry", "RowResult", "TaskInputs", "TaskResult", "atlas_entries",
           "atlas_figure", "atlas_markdown", "attention_function", "is_row_distribution", "mass_kept", "model_task",
           "pareto_front", "relative_error", "row_kl", "run_atlas", "skip_reason", "update_readme_atlas"]
