"""The training record: the run it keeps is the run that trains, and the shipped records are the shipped models'."""
from __future__ import annotations

import numpy as np
import pytest

from refattn import training
from refattn.training.record import PROBE_SEED, SCORE_SEED, SCORE_SEQUENCES


def test_recording_does_not_change_the_training():
    params, record = training.record_training("induction", seed=2, steps=27, progress=False)
    plain, history = training.train("induction", seed=2, steps=27, progress=False)
    assert training.compare_params(params, plain) == []
    np.testing.assert_array_equal(record.loss, history.loss)
    assert record.steps.tolist() == [0, 25, 27]                       # the checkpoints reached, and the last step


def test_the_first_checkpoint_is_the_initial_weights():
    _, record = training.record_training("reverse", seed=3, steps=2, progress=False)
    probe = training.get_task("reverse").draw(PROBE_SEED, 1)
    _, weights = training.seq2seq_logits(training.init_params("reverse", seed=3), probe.src, probe.inputs,
                                         return_weights=True)
    for name, W in weights.items():
        np.testing.assert_array_equal(record.weights[name][0], W[0])


def test_save_and_load_round_trip(tmp_path):
    _, record = training.record_training("induction", seed=1, steps=3, progress=False)
    loaded = training.load_record(training.save_record(tmp_path / "r.npz", record))
    for field in ("loss", "accuracy", "steps"):
        np.testing.assert_array_equal(getattr(loaded, field), getattr(record, field))
    assert loaded.tokens.keys() == record.tokens.keys() and loaded.scores.keys() == record.scores.keys()
    for name, W in record.weights.items():                          # float32 on disk: drawing only
        np.testing.assert_array_equal(loaded.weights[name], W.astype(np.float32))
    for name, s in record.scores.items():
        np.testing.assert_array_equal(loaded.scores[name], s)
    assert training.save_record(tmp_path / "again.npz", record).read_bytes() == (tmp_path / "r.npz").read_bytes()


@pytest.mark.parametrize("task", ["reverse", "induction"])
def test_the_shipped_record_ends_at_the_shipped_model(task):
    record, params = training.training_record(task), training.pretrained(task)
    spec = training.get_task(task)
    assert record.steps[-1] == spec.steps and len(record.loss) == spec.steps
    final = {f"{name}/{score}": value for name, table in
             training.head_scores(task, params, num_sequences=SCORE_SEQUENCES, rng=SCORE_SEED).items()
             for score, value in table.items()}
    # The record was computed on the machine that trained the model, these scores here, where BLAS may round the
    # forward pass otherwise. First order: about 100 terms on the way to a logit (embeddings, the 16-, 24- and
    # 32-term products, the score's own) added in two orders, of the size of the logits' spread within a row
    # (up to 43 in reverse, 95 in induction): a logit moves by <= 2·100·eps·100 = 4.4e-12, a weight by twice
    # that of itself, a mean of weights by <= 1e-11. (Measured: 1 ulp under Prescott's kernels, 2 under others.)
    for name, value in final.items():
        np.testing.assert_allclose(record.scores[name][-1], value, rtol=0, atol=1e-11)
    probe = spec.draw(PROBE_SEED, 1)
    logits = training.seq2seq_logits if spec.kind == "seq2seq" else training.decoder_logits
    inputs = (probe.src, probe.inputs) if spec.kind == "seq2seq" else (probe.inputs,)
    _, weights = logits(params, *inputs, return_weights=True)
    for name, W in weights.items():            # float32 storage: relative rounding 2^-24, and the kernel's 1e-11
        np.testing.assert_allclose(record.weights[name][-1], W[0], rtol=2.0**-24 + 1e-11, atol=1e-45)
