"""Training small Transformers in NumPy with refattn's own gradients.

- :mod:`refattn.training.vjp`: the backward passes beyond attention (embedding and positions, layer norm,
  feed-forward, linear projections, cross-entropy with a loss mask);
- :mod:`refattn.training.model`: the encoder–decoder of :mod:`refattn.core` and a decoder-only model, their
  logits (with every attention's weights, or another attention swapped in), loss and gradients;
- :mod:`refattn.training.tree`: pytree helpers for their frozen-dataclass parameters;
- :mod:`refattn.training.adam`: Adam;
- :mod:`refattn.training.tasks`: the tasks ``"reverse"`` and ``"induction"``, their seeded data and
  :func:`evaluate`;
- :mod:`refattn.training.scores`: head scores (previous token, induction, anti-diagonal mass);
- :mod:`refattn.training.loop`: the training loop, :func:`pretrained` weights and weight files
  (``python -m refattn train TASK``);
- :mod:`refattn.training.record`: the record shipped beside each model (curves, and the attention and head
  scores at checkpoints), for showing training stepped without retraining.
"""
from .adam import AdamState, adam_init, adam_update, global_norm
from .loop import (
    History,
    compare_params,
    init_params,
    load_params,
    pretrained,
    pretrained_path,
    save_params,
    train,
    train_accuracy,
)
from .model import (
    DecoderOnlyLayerParams,
    DecoderOnlyParams,
    Seq2SeqParams,
    attention_inputs,
    decoder_logits,
    decoder_loss_and_grads,
    init_decoder_only,
    init_seq2seq,
    seq2seq_logits,
    seq2seq_loss_and_grads,
)
from .record import (
    CHECKPOINTS,
    TrainingRecord,
    load_record,
    record_path,
    record_training,
    save_record,
    training_record,
)
from .scores import antidiagonal_mass, head_scores, induction_score, previous_token_score
from .tasks import TASKS, Batch, Task, decode_greedily, evaluate, get_task, induction_batch, reverse_batch
from .tree import flatten, leaf_names, tree_map, unflatten
from .vjp import (
    FeedForwardGrads,
    LayerNormGrads,
    LinearGrads,
    cross_entropy,
    embedding_vjp,
    feed_forward_vjp,
    layer_norm_vjp,
    linear_vjp,
    position_vjp,
)

__all__ = [
    "AdamState",
    "Batch",
    "CHECKPOINTS",
    "DecoderOnlyLayerParams",
    "DecoderOnlyParams",
    "FeedForwardGrads",
    "History",
    "LayerNormGrads",
    "LinearGrads",
    "Seq2SeqParams",
    "TASKS",
    "Task",
    "TrainingRecord",
    "adam_init",
    "adam_update",
    "antidiagonal_mass",
    "attention_inputs",
    "compare_params",
    "cross_entropy",
    "decode_greedily",
    "decoder_logits",
    "decoder_loss_and_grads",
    "embedding_vjp",
    "evaluate",
    "feed_forward_vjp",
    "flatten",
    "get_task",
    "global_norm",
    "head_scores",
    "induction_batch",
    "induction_score",
    "init_decoder_only",
    "init_params",
    "init_seq2seq",
    "layer_norm_vjp",
    "leaf_names",
    "linear_vjp",
    "load_params",
    "load_record",
    "position_vjp",
    "pretrained",
    "pretrained_path",
    "previous_token_score",
    "record_path",
    "record_training",
    "reverse_batch",
    "save_params",
    "save_record",
    "seq2seq_logits",
    "seq2seq_loss_and_grads",
    "train",
    "train_accuracy",
    "training_record",
    "tree_map",
    "unflatten",
]
