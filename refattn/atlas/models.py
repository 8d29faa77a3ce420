r"""The trained models' side of the atlas: their attention calls on a batch, and their accuracy with another attention.

The shipped weights of :mod:`refattn.training` (:func:`~refattn.training.pretrained`) are run on a batch of
their task drawn from a seed; every attention call (per head: q, k, v and whether it is causal) is recorded
by :func:`~refattn.training.attention_inputs`. The accuracy is :func:`~refattn.training.evaluate` on
fresh sequences (a seed the training never draws from), with the attention under test in every call.
"""
from __future__ import annotations

from ..common.ints import check_non_negative_int, check_positive_int
from ..training.tasks import EVAL_SEED, TASKS
from .runner import AttentionCall, TaskInputs

__all__ = ["TASK_NAMES", "model_task"]

#: The tasks of :mod:`refattn.training`, in the atlas's column order.
TASK_NAMES = tuple(TASKS)


def model_task(task: str, *, input_sequences: int = 8, num_sequences: int = 200, seed: int = 0) -> TaskInputs:
    r"""A trained model's attention calls and accuracy, for :func:`refattn.atlas.run_atlas`.

    Parameters
    ----------
    task : {"reverse", "induction"}
        The task; its shipped weights are loaded.
    input_sequences : int, default 8
        Sequences of the batch whose attention calls are measured.
    num_sequences : int, default 200
        Fresh sequences of each accuracy; 0 measures no accuracy.
    seed : int, default 0
        Both are drawn with seed ``EVAL_SEED + seed`` (:data:`refattn.training.tasks.EVAL_SEED`, a seed the
        training never draws from).

    Returns
    -------
    TaskInputs
        Every attention call of the model on the batch (encoder and decoder self-attention and the
        cross-attention of "reverse", each layer of "induction"), and its accuracy as a function of the
        attention used.
    """
    from ..training import attention_inputs, evaluate, get_task, pretrained

    spec = get_task(task)
    input_sequences = check_positive_int("input_sequences", input_sequences)
    num_sequences = check_non_negative_int("num_sequences", num_sequences)
    seed = check_non_negative_int("seed", seed)
    params = pretrained(spec.name)
    batch = spec.draw(EVAL_SEED + seed, input_sequences)
    tokens = (batch.src, batch.inputs) if spec.kind == "seq2seq" else (batch.inputs,)
    calls = tuple(AttentionCall(name, q, k, v, causal)
                  for name, q, k, v, causal in attention_inputs(spec.kind, params, *tokens))

    def accuracy(attention):
        return evaluate(spec.name, params, num_sequences=num_sequences, rng=EVAL_SEED + seed,
                        attention=attention)

    return TaskInputs(spec.name, calls, accuracy if num_sequences else None, num_sequences or None)
