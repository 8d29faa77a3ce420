r"""The two training tasks, their seeded data and their accuracy.

``"reverse"`` (encoder–decoder, the Transformer of :mod:`refattn.core.transformer`)
    The source is ``LENGTH = 8`` symbols drawn uniformly with replacement from ten symbols
    ``"0"`` … ``"9"``; the target is the source reversed, then ``EOS``. Ids: ``BOS = 0``,
    ``EOS = 1``, symbol *s* is id ``2 + s``; source and target share this vocabulary of 12 ids
    (the source never holds ``BOS`` or ``EOS``). With teacher forcing the decoder reads
    ``[BOS, x_L, …, x_1]`` and predicts ``[x_L, …, x_1, EOS]``: decoder row *t* < L must copy
    source position L − 1 − t, so its cross-attention should learn the anti-diagonal. The length
    is fixed: the mirrored position then depends on *t* alone.

``"induction"`` (decoder-only)
    A sequence ``BOS, x_1 … x_L, x_1 … x_L`` followed by ``PAD`` up to ``1 + 2·MAX_LENGTH`` tokens,
    with *L* drawn uniformly in ``[MIN_LENGTH, MAX_LENGTH] = [6, 12]`` and ``x_1 … x_L`` drawn
    without replacement from 24 symbols ``"a"`` … ``"x"``. Ids: ``BOS = 0``, ``PAD = 1``, symbol *s*
    is id ``2 + s``. The model reads the sequence without its last token and predicts each next
    token. Scored (loss and accuracy): the second copy's tokens after its first, ``x_2 … x_L``, each
    predicted at the position of the second copy's previous token; the one place where it occurred
    before is followed by the answer, so an induction head (Olsson et al., 2022) solves it. The
    first token of the copy is not scored (nothing but the length announces the copy), nor the
    first copy (random). The varying length keeps a fixed-offset head from solving the task;
    drawing without replacement keeps each answer unique (a symbol occurring twice in the first
    copy would have two candidate successors).

Every generator takes a ``numpy.random.Generator`` (or an int seed) and returns the same batch for
the same seed on every machine. :func:`evaluate` measures accuracy on fresh sequences: whole-sequence
exact match under greedy decoding for ``"reverse"`` (for softmax attention the same as every
teacher-forced prediction right, which the training display counts), per-token accuracy on the scored tokens for
``"induction"``, optionally with another attention swapped in for softmax attention.

References
----------
.. [1] C. Olsson et al., 2022, "In-context Learning and Induction Heads", Transformer Circuits
   Thread, arXiv:2209.11895.
"""
from __future__ import annotations

import string
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

from ..common.checks import as_rng, check_choice
from ..common.ints import check_positive_int
from .model import decoder_logits, seq2seq_logits

__all__ = [
    "BOS",
    "EOS",
    "EVAL_SEED",
    "PAD",
    "TASKS",
    "Batch",
    "Task",
    "decode_greedily",
    "evaluate",
    "get_task",
    "induction_batch",
    "reverse_batch",
]

BOS = 0
EOS = 1                                   # "reverse": end of the target
PAD = 1                                   # "induction": filler after the second copy (never scored)
FIRST_SYMBOL = 2                          # id of symbol 0 in both tasks

REVERSE_LENGTH = 8
REVERSE_SYMBOLS = 10
INDUCTION_MIN_LENGTH = 6
INDUCTION_MAX_LENGTH = 12
INDUCTION_SYMBOLS = 24
EVAL_SEED = 2209_11895                    # fresh sequences for evaluation (the shipped weights train on seed 0)


class Batch(NamedTuple):
    """One batch of a task (integer ids, int64).

    Attributes
    ----------
    src : (B, L) ndarray or None
        Encoder input (``"reverse"``); ``None`` for a decoder-only task.
    inputs : (B, T) ndarray
        Decoder input ids.
    targets : (B, T) ndarray
        The id each input position must predict.
    loss_mask : (B, T) ndarray of bool
        Positions that count in the loss and the accuracy.
    """

    src: NDArray | None
    inputs: NDArray
    targets: NDArray
    loss_mask: NDArray


def reverse_batch(rng, batch_size: int, *, length: int = REVERSE_LENGTH,
                  num_symbols: int = REVERSE_SYMBOLS) -> Batch:
    """Draw a batch of the ``"reverse"`` task.

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw.
    batch_size : int
        Sequences *B*.
    length : int, default 8
        Source length *L*.
    num_symbols : int, default 10
        Symbols, ids ``2 … 1 + num_symbols``.

    Returns
    -------
    Batch
        ``src`` (B, L); ``inputs`` ``[BOS, reversed src]`` and ``targets`` ``[reversed src, EOS]``,
        both (B, L + 1); ``loss_mask`` all True.

    Examples
    --------
    >>> b = reverse_batch(0, 1, length=4)
    >>> b.src, b.inputs, b.targets
    (array([[10,  8,  7,  4]]), array([[ 0,  4,  7,  8, 10]]), array([[ 4,  7,  8, 10,  1]]))
    """
    rng = as_rng(rng)
    batch_size = check_positive_int("batch_size", batch_size)
    check_positive_int("length", length)
    check_positive_int("num_symbols", num_symbols)
    src = FIRST_SYMBOL + rng.integers(0, num_symbols, size=(batch_size, length))   # (B, L)
    reverse = src[:, ::-1]
    inputs = np.concatenate([np.full((batch_size, 1), BOS), reverse], axis=1)      # (B, L+1)
    targets = np.concatenate([reverse, np.full((batch_size, 1), EOS)], axis=1)     # (B, L+1)
    return Batch(src.astype(np.int64), inputs.astype(np.int64), targets.astype(np.int64),
                 np.ones(targets.shape, dtype=bool))


def induction_batch(rng, batch_size: int, *, min_length: int = INDUCTION_MIN_LENGTH,
                    max_length: int = INDUCTION_MAX_LENGTH, num_symbols: int = INDUCTION_SYMBOLS) -> Batch:
    """Draw a batch of the ``"induction"`` task.

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw: first the lengths, then the symbols of each sequence.
    batch_size : int
        Sequences *B*.
    min_length, max_length : int, default 6, 12
        Bounds (inclusive) of the length *L* of the repeated part, drawn uniformly per sequence.
    num_symbols : int, default 24
        Symbols, ids ``2 … 1 + num_symbols``; at least ``max_length`` (drawn without replacement).

    Returns
    -------
    Batch
        ``src`` None; ``inputs`` (B, 2·max_length): ``BOS, x_1 … x_L, x_1 … x_L, PAD …``
        without its last token; ``targets`` the same sequence shifted by one; ``loss_mask`` True
        at the positions of ``x_1 … x_{L-1}`` in the second copy (whose targets are ``x_2 … x_L``).

    Examples
    --------
    >>> b = induction_batch(0, 1, min_length=3, max_length=3, num_symbols=5)
    >>> b.inputs, b.targets, b.loss_mask.astype(int)
    (array([[0, 4, 6, 5, 4, 6]]), array([[4, 6, 5, 4, 6, 5]]), array([[0, 0, 0, 0, 1, 1]]))
    """
    rng = as_rng(rng)
    batch_size = check_positive_int("batch_size", batch_size)
    check_positive_int("min_length", min_length)
    check_positive_int("max_length", max_length)
    check_positive_int("num_symbols", num_symbols)
    if min_length > max_length or max_length > num_symbols:
        raise ValueError(f"need min_length <= max_length <= num_symbols, got min_length={min_length}, "
                         f"max_length={max_length}, num_symbols={num_symbols}")
    lengths = rng.integers(min_length, max_length + 1, size=batch_size)          # (B,)
    sequences = np.full((batch_size, 1 + 2 * max_length), PAD, dtype=np.int64)   # BOS x x PAD…
    sequences[:, 0] = BOS
    loss_mask = np.zeros((batch_size, 2 * max_length), dtype=bool)
    for b, L in enumerate(lengths):
        x = FIRST_SYMBOL + rng.permutation(num_symbols)[:L]                     # L distinct symbols
        sequences[b, 1:1 + L] = x
        sequences[b, 1 + L:1 + 2 * L] = x
        loss_mask[b, L + 1:2 * L] = True                                         # inputs x_1 … x_{L-1} of copy 2
    return Batch(None, sequences[:, :-1], sequences[:, 1:], loss_mask)


@dataclass(frozen=True)
class Task:
    """A task: its data, its model and the recipe of its shipped weights.

    Attributes
    ----------
    name : str
        ``"reverse"`` or ``"induction"``.
    kind : str
        ``"seq2seq"`` (the encoder–decoder Transformer) or ``"decoder"`` (decoder-only).
    vocab : int
        Vocabulary size (ids).
    labels : tuple of str
        Printable label of each id (for axes of figures).
    draw : callable
        ``draw(rng, batch_size) -> Batch`` with the task's conventions.
    model : dict
        Keyword arguments of the model's ``init_*`` besides ``rng`` and the vocabulary.
    batch_size : int
        Sequences per training step.
    learning_rate : float
        Adam's peak step size.
    warmup : int
        Steps of linear warm-up of the step size (then a half cosine to 0).
    seed : int
        Seed of the shipped weights (initialisation and training batches).
    steps : int
        Training steps of the shipped weights.
    """

    name: str
    kind: str
    vocab: int
    labels: tuple[str, ...]
    draw: Callable[..., Batch] = field(repr=False)
    model: dict = field(default_factory=dict)
    batch_size: int = 32
    learning_rate: float = 1e-3
    warmup: int = 100
    seed: int = 0
    steps: int = 1000


TASKS: dict[str, Task] = {
    "reverse": Task(
        name="reverse", kind="seq2seq", vocab=FIRST_SYMBOL + REVERSE_SYMBOLS,
        labels=("<s>", "</s>", *string.digits[:REVERSE_SYMBOLS]), draw=reverse_batch,
        model=dict(d_model=16, num_heads=2, d_ff=32, num_layers=1),
        batch_size=32, learning_rate=1e-2, warmup=100, seed=0, steps=2000,
    ),
    "induction": Task(
        name="induction", kind="decoder", vocab=FIRST_SYMBOL + INDUCTION_SYMBOLS,
        labels=("<s>", "_", *string.ascii_lowercase[:INDUCTION_SYMBOLS]), draw=induction_batch,
        model=dict(d_model=24, num_heads=1, num_layers=2, max_len=2 * INDUCTION_MAX_LENGTH, norm=False),
        batch_size=32, learning_rate=1e-2, warmup=100, seed=0, steps=3000,
    ),
}
"""The two tasks. Models: ``"reverse"`` one encoder and one decoder layer (post-LN, as the paper), d_model
16, 2 heads, d_ff 32 (6,156 parameters); ``"induction"`` two attention-only layers of one head, d_model 24,
learned positions, no feed-forward network and no layer norm (6,650 parameters): the attention-only models
of Elhage et al. (2021) and Olsson et al. (2022), whose layer-0 head can only move token information. (With
pre-LN norms the same recipe reaches the same accuracy but a previous-token score near 0.4 instead of 0.7:
the head keeps more of its mass on the current token.)"""


def get_task(task) -> Task:
    """The :class:`Task` named ``task``.

    Parameters
    ----------
    task : str or Task
        A name in :data:`TASKS` (a ``ValueError`` names the known ones), or a Task, returned as it is.

    Returns
    -------
    Task
    """
    if isinstance(task, Task):
        return task
    check_choice("task", task, tuple(TASKS))
    return TASKS[task]


def evaluate(task, params, *, num_sequences: int, rng, attention: Callable | None = None) -> float:
    r"""Accuracy of ``params`` on ``num_sequences`` fresh sequences of ``task``.

    Parameters
    ----------
    task : str or Task
        ``"reverse"`` or ``"induction"``.
    params : TransformerParams or DecoderOnlyParams
        The model (as :func:`~refattn.training.pretrained` or :func:`~refattn.training.train` return).
    num_sequences : int
        Sequences drawn from ``rng`` with the task's generator.
    rng : numpy.random.Generator or int
        Source of the sequences; use a seed the training never used.
    attention : callable, optional
        Replaces softmax attention inside every head (forward only), with
        :func:`~refattn.scaled_dot_product_attention`'s signature ``(q, k, v, *, causal, mask) -> out``.

    Returns
    -------
    float
        ``"reverse"``: the fraction of sequences whose greedy decoding (:func:`decode_greedily`,
        L + 1 steps) equals the target exactly, ``EOS`` included. ``"induction"``: the fraction of
        scored tokens (``Batch.loss_mask``) whose arg-max prediction is right.
    """
    task = get_task(task)
    num_sequences = check_positive_int("num_sequences", num_sequences)
    batch = task.draw(as_rng(rng), num_sequences)
    if task.kind == "seq2seq":
        decoded = decode_greedily(params, batch.src, steps=batch.targets.shape[1], attention=attention)
        return float(np.mean(np.all(decoded == batch.targets, axis=1)))
    logits = decoder_logits(params, batch.inputs, attention=attention)          # (B, T, vocab)
    return float(np.mean((np.argmax(logits, axis=-1) == batch.targets)[batch.loss_mask]))


def decode_greedily(params, src: NDArray, *, steps: int, attention: Callable | None = None) -> NDArray:
    r"""Greedy decoding of the encoder–decoder: feed back the arg-max token ``steps`` times, starting from ``BOS``.

    Each step runs the whole decoder on the prefix decoded so far (teacher forcing on it), so an
    ``attention`` swapped in sees exactly the tokens a left-to-right decoder has, whether or not it
    is causal in the strict sense (a KV cache would assume it is).

    Parameters
    ----------
    params : TransformerParams
        The model.
    src : (B, L) ndarray of int
        Source ids.
    steps : int
        Tokens to generate.
    attention : callable, optional
        As in :func:`evaluate`.

    Returns
    -------
    tokens : (B, steps) ndarray of int
        The decoded ids, ``BOS`` not included.
    """
    steps = check_positive_int("steps", steps)
    tokens = np.full((np.shape(src)[0], 1), BOS, dtype=np.int64)
    for _ in range(steps):
        logits = seq2seq_logits(params, src, tokens, attention=attention)      # (B, t, vocab)
        tokens = np.concatenate([tokens, np.argmax(logits[:, -1], axis=-1)[:, None]], axis=1)
    return tokens[:, 1:]
