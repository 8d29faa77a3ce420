r"""Training loop, shipped weights and weight files.

    for step 1 … steps:   batch ~ task's generator;  loss, g = ∂ cross-entropy / ∂θ;  θ ← Adam(θ, g, α_step)

with α_step rising linearly over the first ``warmup`` steps and then falling along a half cosine to 0
(Loshchilov & Hutter, 2017, without restarts), β₁ = 0.9, β₂ = 0.98, ε = 1e-9 (Vaswani et al., 2017,
§5.3). One seed gives the initial parameters and then every batch, so on one machine the same
``(task, seed, steps)`` gives the same weights bit for bit; another machine whose BLAS sums in another
order (or with other threads) takes other rounding paths and ends elsewhere, at the same accuracy.

A weight file is an uncompressed ``.npz``: one float64 array per leaf of the parameter tree, named by its
dotted path (:func:`~refattn.training.tree.leaf_names`), written with fixed zip timestamps so the same
weights give the same bytes.
"""
from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ..common.ints import check_non_negative_int, check_positive_int
from ..common.npz import write_npz
from .adam import adam_init, adam_update
from .model import (
    decoder_logits,
    decoder_loss_and_grads,
    init_decoder_only,
    init_seq2seq,
    seq2seq_logits,
    seq2seq_loss_and_grads,
)
from .tasks import Batch, Task, get_task
from .tree import flatten, leaf_names, unflatten

__all__ = ["History", "compare_params", "init_params", "load_params", "pretrained", "pretrained_path", "save_params",
           "train", "train_accuracy"]

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"
ADAM = dict(beta1=0.9, beta2=0.98, eps=1e-9)                      # Vaswani et al., 2017, §5.3


class History(NamedTuple):
    """What :func:`train` measured.

    Attributes
    ----------
    loss : (steps,) ndarray
        The training batch's loss before each step's update.
    accuracy : (steps,) ndarray
        The training batch's :func:`train_accuracy` before each step's update.
    seconds : float
        Wall time of the loop.
    """

    loss: np.ndarray
    accuracy: np.ndarray
    seconds: float


def init_params(task, *, seed: int | None = None):
    """The untrained model of ``task``: the weights a :func:`train` run from ``seed`` starts from.

    Parameters
    ----------
    task : str or Task
        The task (its ``kind`` and ``model`` give the structure :func:`load_params` fills).
    seed : int, optional
        Default the shipped weights' seed.

    Returns
    -------
    Seq2SeqParams or DecoderOnlyParams
    """
    task = get_task(task)
    return _init(task, np.random.default_rng(task.seed if seed is None else check_non_negative_int("seed", seed)))


def _init(task: Task, rng: np.random.Generator):
    if task.kind == "seq2seq":
        return init_seq2seq(rng, task.vocab, task.vocab, **task.model)
    return init_decoder_only(rng, task.vocab, **task.model)


def _learning_rate(task: Task, step: int, steps: int) -> float:
    """α at ``step`` (0-based): linear warm-up over ``task.warmup`` steps, then a half cosine to 0."""
    if step < task.warmup:
        return task.learning_rate * (step + 1) / task.warmup
    progress = (step - task.warmup) / max(1, steps - task.warmup)
    return task.learning_rate * 0.5 * (1.0 + math.cos(math.pi * progress))


def train_accuracy(task, logits: np.ndarray, batch: Batch) -> float:
    r"""Teacher-forced accuracy of ``logits`` on ``batch``.

    Parameters
    ----------
    task : str or Task
        The task.
    logits : (B, T, vocab) ndarray
        The model's predictions for ``batch.inputs``.
    batch : Batch
        The batch.

    Returns
    -------
    float
        ``"reverse"``: the fraction of sequences with every token right (for softmax attention, a causal
        decoder, this is the greedy decoding's exact-match rate: a greedy decoder that is right so far
        sees what teacher forcing feeds it). ``"induction"``: the fraction of scored tokens right.
    """
    task = get_task(task)
    right = np.argmax(logits, axis=-1) == batch.targets                # (B, T)
    if task.kind == "seq2seq":
        return float(np.mean(np.all(right | ~batch.loss_mask, axis=1)))
    return float(np.mean(right[batch.loss_mask]))


def train(task, *, seed: int | None = None, steps: int | None = None, out: str | Path | None = None,
          progress: bool = True, callback: Callable | None = None):
    r"""Train the model of ``task`` from a seed with Adam.

    Parameters
    ----------
    task : str or Task
        ``"reverse"`` or ``"induction"``.
    seed : int, optional
        Seeds the initial parameters and every batch; default the shipped weights' (``Task.seed``).
    steps : int, optional
        Adam steps; default the shipped weights' (``Task.steps``). The learning-rate schedule spans them.
    out : str or Path, optional
        Write the trained weights there (:func:`save_params`).
    progress : bool, default True
        Show step, loss, accuracy and steps/s on stderr: one line rewritten in place on a terminal,
        otherwise a line every tenth of the run.
    callback : callable, optional
        ``callback(step, params)`` after each step (1-based ``step``): e.g. to keep checkpoints.

    Returns
    -------
    params : Seq2SeqParams or DecoderOnlyParams
    history : History

    Examples
    --------
    >>> params, history = train("induction", seed=1, steps=3, progress=False)
    >>> history.loss.shape, history.accuracy.shape, type(params).__name__
    ((3,), (3,), 'DecoderOnlyParams')
    """
    task = get_task(task)
    seed = task.seed if seed is None else check_non_negative_int("seed", seed)
    steps = task.steps if steps is None else check_positive_int("steps", steps)
    rng = np.random.default_rng(seed)
    params = _init(task, rng)
    state = adam_init(params)
    losses, accuracies = np.empty(steps), np.empty(steps)
    show = _Progress(task.name, steps) if progress else None
    start = time.perf_counter()
    for step in range(steps):
        batch = task.draw(rng, task.batch_size)
        if task.kind == "seq2seq":
            loss, grads, logits = _seq2seq_step(params, batch)
        else:
            loss, grads, logits = _decoder_step(params, batch)
        losses[step], accuracies[step] = loss, train_accuracy(task, logits, batch)
        params, state = adam_update(params, grads, state, lr=_learning_rate(task, step, steps), **ADAM)
        if callback is not None:
            callback(step + 1, params)
        if show is not None:
            show(step + 1, losses[step], accuracies[step], time.perf_counter() - start)
    seconds = time.perf_counter() - start
    if out is not None:
        save_params(out, params)
    return params, History(losses, accuracies, seconds)


def _seq2seq_step(params, batch: Batch):
    loss, grads = seq2seq_loss_and_grads(params, batch.src, batch.inputs, batch.targets, batch.loss_mask)
    return loss, grads, seq2seq_logits(params, batch.src, batch.inputs)


def _decoder_step(params, batch: Batch):
    loss, grads = decoder_loss_and_grads(params, batch.inputs, batch.targets, batch.loss_mask)
    return loss, grads, decoder_logits(params, batch.inputs)


class _Progress:
    """``reverse  step 400/1000  loss 0.4123  accuracy 0.812  312 steps/s`` on stderr."""

    def __init__(self, name: str, steps: int):
        self.name, self.steps = name, steps
        self.tty = sys.stderr.isatty()
        self.every = max(1, steps // (100 if self.tty else 10))
        self.width = len(str(steps))

    def __call__(self, step: int, loss: float, accuracy: float, seconds: float) -> None:
        if step % self.every and step != self.steps:
            return
        line = (f"{self.name}  step {step:>{self.width}}/{self.steps}  loss {loss:<8.3g}  accuracy {accuracy:.3f}  "
                f"{step / seconds:4.0f} steps/s")
        end = "\n" if step == self.steps or not self.tty else ""
        sys.stderr.write(("\r" if self.tty else "") + line + end)
        sys.stderr.flush()


# --- weight files ------------------------------------------------------------------------------------

def pretrained_path(task) -> Path:
    """The file of ``task``'s shipped weights: ``refattn/training/weights/<task>.npz``.

    Parameters
    ----------
    task : str or Task
        ``"reverse"`` or ``"induction"``.

    Returns
    -------
    Path
    """
    return WEIGHTS_DIR / f"{get_task(task).name}.npz"


def pretrained(task):
    """``task``'s shipped parameters (trained by ``python -m refattn train <task>``, the defaults).

    Parameters
    ----------
    task : str or Task
        ``"reverse"`` or ``"induction"``.

    Returns
    -------
    Seq2SeqParams or DecoderOnlyParams

    Examples
    --------
    >>> pretrained("reverse").num_heads
    2
    """
    return load_params(pretrained_path(task), task)


def compare_params(params, other) -> list[tuple[str, float]]:
    """The arrays in which two parameter trees of one structure differ, bit for bit.

    Parameters
    ----------
    params, other : Seq2SeqParams or DecoderOnlyParams
        Trees of the same structure.

    Returns
    -------
    list of (name, max |Δ|)
        One entry per leaf whose float64 bit patterns differ anywhere (empty: identical).
    """
    names, mine, theirs = leaf_names(params), flatten(params), flatten(other)
    if names != leaf_names(other) or [a.shape for a in mine] != [b.shape for b in theirs]:
        raise ValueError("the two parameter trees do not have the same structure")
    return [(name, float(np.max(np.abs(a - b)))) for name, a, b in zip(names, mine, theirs, strict=True)
            if not np.array_equal(_bits(a), _bits(b))]


def _bits(leaf) -> np.ndarray:
    """The float64 bit patterns (NaN equals the same NaN, 0.0 differs from -0.0)."""
    return np.ascontiguousarray(leaf, dtype=np.float64).view(np.uint64)


def save_params(path: str | Path, params) -> Path:
    """Write ``params`` to ``path`` as an uncompressed ``.npz`` of named float64 arrays, byte-stable.

    Parameters
    ----------
    path : str or Path
        The file (its folder must exist).
    params : Seq2SeqParams or DecoderOnlyParams
        The parameters.

    Returns
    -------
    Path
    """
    write_npz(path, {name: np.asarray(leaf, dtype=np.float64)
                     for name, leaf in zip(leaf_names(params), flatten(params), strict=True)})
    return Path(path)


def load_params(path: str | Path, task):
    """Read the parameters of ``task``'s model from a file written by :func:`save_params`.

    Parameters
    ----------
    path : str or Path
        The ``.npz`` file.
    task : str or Task
        Gives the structure (``Task.kind`` and ``Task.model``).

    Returns
    -------
    Seq2SeqParams or DecoderOnlyParams
    """
    template = init_params(task)
    names = leaf_names(template)
    with np.load(path, allow_pickle=False) as archive:
        stored = sorted(archive.files)
        if stored != sorted(names):
            raise ValueError(f"{path} does not hold the {get_task(task).name} model's arrays: missing "
                             f"{sorted(set(names) - set(stored))}, unexpected {sorted(set(stored) - set(names))}")
        return unflatten(template, [archive[name] for name in names])
