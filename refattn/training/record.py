r"""The training record shipped beside each model: its curves, and its attention at checkpoints.

Notebooks and figures show training stepped without retraining anything: ``python -m refattn train TASK
--record FILE`` keeps, while it trains, the loss and accuracy of every step and, at the steps
:data:`CHECKPOINTS` (0 = the initial weights) and the last, every attention's weights on one fixed probe
sequence and every head's scores (:func:`~refattn.training.head_scores`) on fresh sequences. The shipped
records (``refattn/training/weights/<task>.record.npz``) come from the shipped weights' own run, so their
last checkpoint is the shipped model.
"""
from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np

from ..common.npz import write_npz
from .loop import WEIGHTS_DIR, init_params, train
from .model import decoder_logits, seq2seq_logits
from .scores import head_scores
from .tasks import get_task

__all__ = ["CHECKPOINTS", "TrainingRecord", "load_record", "record_path", "record_training", "save_record",
           "training_record"]

#: Steps after which the record keeps the attention and the head scores (0: the initial weights; the last
#: step is always kept as well).
CHECKPOINTS = (0, 25, 50, 100, 150, 200, 300, 400, 600, 800)
PROBE_SEED = 7                                 # the one sequence whose attention is kept at each checkpoint
SCORE_SEED, SCORE_SEQUENCES = 11, 64           # the fresh sequences of the head scores


class TrainingRecord(NamedTuple):
    """What a training run kept (see the module docstring).

    Attributes
    ----------
    loss, accuracy : (steps,) ndarray
        The training batch's loss and accuracy before each step's update.
    steps : (C,) ndarray of int
        The checkpoints kept.
    tokens : dict of str to ndarray
        The probe sequence: ``"src"`` and ``"inputs"`` (``"reverse"``) or ``"inputs"`` (``"induction"``).
    weights : dict of str to (C, h, n, m) ndarray
        Every attention's weights on the probe at each checkpoint, by the model's names ("decoder.0.cross");
        float32 in a saved record (they are for drawing; the scores keep float64).
    scores : dict of str to (C, h) ndarray
        Every head score at each checkpoint, named "<attention>/<score>" ("layer.1/induction").
    """

    loss: np.ndarray
    accuracy: np.ndarray
    steps: np.ndarray
    tokens: dict
    weights: dict
    scores: dict


def record_training(task, *, seed: int | None = None, steps: int | None = None, progress: bool = True):
    """Train as :func:`~refattn.training.train` does and keep the record of the run.

    Parameters
    ----------
    task : str or Task
        ``"reverse"`` or ``"induction"``.
    seed, steps : int, optional
        As :func:`~refattn.training.train` (default the shipped weights').
    progress : bool, default True
        Show the progress line.

    Returns
    -------
    params : Seq2SeqParams or DecoderOnlyParams
        The trained weights (bit for bit those of :func:`~refattn.training.train` with the same arguments).
    record : TrainingRecord

    Examples
    --------
    >>> params, record = record_training("induction", seed=1, steps=30, progress=False)
    >>> record.steps.tolist(), record.weights["layer.1"].shape
    ([0, 25, 30], (3, 1, 24, 24))
    """
    task = get_task(task)
    seed = task.seed if seed is None else seed
    steps = task.steps if steps is None else steps
    probe = task.draw(PROBE_SEED, 1)
    tokens = {"inputs": probe.inputs} if probe.src is None else {"src": probe.src, "inputs": probe.inputs}
    kept: list[tuple[int, dict, dict]] = []

    def keep(step: int, params) -> None:
        if step in CHECKPOINTS or step == steps:
            if task.kind == "seq2seq":
                _, weights = seq2seq_logits(params, probe.src, probe.inputs, return_weights=True)
            else:
                _, weights = decoder_logits(params, probe.inputs, return_weights=True)
            scores = {f"{name}/{score}": value for name, table in
                      head_scores(task, params, num_sequences=SCORE_SEQUENCES, rng=SCORE_SEED).items()
                      for score, value in table.items()}
            kept.append((step, {name: w[0] for name, w in weights.items()}, scores))

    keep(0, init_params(task, seed=seed))
    params, history = train(task, seed=seed, steps=steps, progress=progress, callback=keep)
    record = TrainingRecord(
        history.loss, history.accuracy, np.array([step for step, _, _ in kept]), tokens,
        {name: np.stack([w[name] for _, w, _ in kept]) for name in kept[0][1]},
        {name: np.stack([s[name] for _, _, s in kept]) for name in kept[0][2]})
    return params, record


def save_record(path: str | Path, record: TrainingRecord) -> Path:
    """Write a record as a byte-stable ``.npz`` (:func:`refattn.common.write_npz`).

    Parameters
    ----------
    path : str or Path
        The file.
    record : TrainingRecord
        The record.

    Returns
    -------
    Path
    """
    arrays = {"loss": record.loss, "accuracy": record.accuracy, "steps": record.steps}
    arrays |= {f"tokens/{name}": value for name, value in record.tokens.items()}
    arrays |= {f"weights/{name}": value.astype(np.float32) for name, value in record.weights.items()}   # display only
    arrays |= {f"scores/{name}": value for name, value in record.scores.items()}
    write_npz(path, arrays)
    return Path(path)


def load_record(path: str | Path) -> TrainingRecord:
    """Read a record written by :func:`save_record`.

    Parameters
    ----------
    path : str or Path
        The file.

    Returns
    -------
    TrainingRecord
    """
    with np.load(path, allow_pickle=False) as archive:
        group = {prefix: {name.split("/", 1)[1]: archive[name] for name in archive.files
                          if name.startswith(prefix + "/")} for prefix in ("tokens", "weights", "scores")}
        return TrainingRecord(archive["loss"], archive["accuracy"], archive["steps"], group["tokens"],
                              group["weights"], group["scores"])


def record_path(task) -> Path:
    """The shipped record of ``task``: ``refattn/training/weights/<task>.record.npz``.

    Parameters
    ----------
    task : str or Task
        ``"reverse"`` or ``"induction"``.

    Returns
    -------
    Path
    """
    return WEIGHTS_DIR / f"{get_task(task).name}.record.npz"


def training_record(task) -> TrainingRecord:
    """The shipped record of ``task``'s training run (the run that made :func:`~refattn.training.pretrained`).

    Parameters
    ----------
    task : str or Task
        ``"reverse"`` or ``"induction"``.

    Returns
    -------
    TrainingRecord
    """
    return load_record(record_path(task))
