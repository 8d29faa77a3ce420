"""The training tasks: seeded generators, head scores, accuracy of the shipped models, the CLI, weight files."""
from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

from refattn import training
from refattn.cli import main
from refattn.core.transformer import greedy_decode
from refattn.training import scores, tasks
from refattn.training.model import decoder_logits, seq2seq_logits
from refattn.training.tasks import BOS, EOS, PAD, induction_batch, reverse_batch
from refattn.training.tree import flatten, leaf_names, unflatten

# ------------------------------------------------------------------------------------------ generators


@pytest.mark.parametrize("draw", [reverse_batch, induction_batch])
def test_generators_are_seeded(draw):
    a, b, c = draw(5, 16), draw(np.random.default_rng(5), 16), draw(6, 16)
    for x, y in zip(a[1:], b[1:], strict=True):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a.inputs, c.inputs)


def test_reverse_batch_is_the_reversed_source():
    b = reverse_batch(1, 64)
    L = tasks.REVERSE_LENGTH
    assert b.src.shape == (64, L) and b.inputs.shape == b.targets.shape == (64, L + 1)
    assert b.src.dtype == b.inputs.dtype == b.targets.dtype == np.int64 and b.loss_mask.all()
    for src, inputs, targets in zip(b.src, b.inputs, b.targets, strict=True):
        assert list(targets) == [src[L - 1 - t] for t in range(L)] + [EOS]
        assert list(inputs) == [BOS] + [src[L - 1 - t] for t in range(L)]
    assert set(np.unique(b.src)) == set(range(2, 2 + tasks.REVERSE_SYMBOLS))     # every symbol, no BOS/EOS


def test_induction_batch_repeats_distinct_symbols():
    b = induction_batch(2, 200)
    T = 2 * tasks.INDUCTION_MAX_LENGTH
    assert b.src is None and b.inputs.shape == b.targets.shape == b.loss_mask.shape == (200, T)
    lengths = set()
    for inputs, targets, mask in zip(b.inputs, b.targets, b.loss_mask, strict=True):
        sequence = [*inputs, targets[-1]]
        assert list(targets) == sequence[1:]
        L = int(np.sum(np.asarray(sequence) != PAD)) // 2                   # BOS + 2L symbols
        lengths.add(L)
        x = sequence[1:1 + L]
        assert sequence[0] == BOS and len(set(x)) == L and min(x) >= 2
        assert sequence[1 + L:1 + 2 * L] == x and set(sequence[1 + 2 * L:]) <= {PAD}
        assert list(np.flatnonzero(mask)) == list(range(L + 1, 2 * L))    # second copy's x_1 … x_{L-1}
        assert [targets[p] for p in range(L + 1, 2 * L)] == x[1:]
    assert lengths == set(range(tasks.INDUCTION_MIN_LENGTH, tasks.INDUCTION_MAX_LENGTH + 1))


def test_generators_refuse_bad_sizes():
    with pytest.raises(ValueError, match="batch_size"):
        reverse_batch(0, 0)
    with pytest.raises(ValueError, match="max_length=30, num_symbols=24"):
        induction_batch(0, 4, max_length=30)
    with pytest.raises(ValueError, match="task must be one of"):
        tasks.get_task("copy")


# ------------------------------------------------------------------------------------------ head scores


def _loop_score(A, target_of):
    """Per head: mean over (b, i) with a non-empty target set of Σ_k∈set A[b, h, i, k] (plain loops)."""
    B, H, n, _ = A.shape
    out = []
    for h in range(H):
        values = [sum(A[b, h, i, k] for k in target_of(b, i)) for b in range(B) for i in range(n) if target_of(b, i)]
        out.append(sum(values) / len(values))
    return np.array(out)


def _causal_uniform(n):
    A = np.tri(n)
    return A / A.sum(axis=1, keepdims=True)


def test_previous_token_score_on_hand_made_maps(rng):
    n = 6
    prev = np.eye(n, k=-1)
    prev[0, 0] = 1.0
    A = np.stack([prev, _causal_uniform(n), np.eye(n)])[None]              # (1, 3, n, n)
    # rows 1 … 5 of the uniform causal map give 1/2, 1/3, … 1/6 to the previous token
    np.testing.assert_allclose(scores.previous_token_score(A), [1.0, np.mean(1 / np.arange(2, n + 1)), 0.0],
                               rtol=1e-15, atol=0)
    W = rng.dirichlet(np.ones(n), size=(3, 2, n))                          # (B, h, n, n) random rows
    np.testing.assert_allclose(scores.previous_token_score(W),
                               _loop_score(W, lambda b, i: [i - 1] if i else []), rtol=1e-13, atol=0)
    mask = np.zeros(n, bool)
    mask[[2, 4]] = True
    np.testing.assert_allclose(scores.previous_token_score(A, query_mask=mask), [1.0, (1 / 3 + 1 / 5) / 2, 0.0],
                               rtol=1e-15, atol=0)


def test_induction_score_on_hand_made_maps(rng):
    tokens = np.array([0, 5, 7, 9, 5, 7, 9])                              # BOS a b c a b c
    n = tokens.size
    induction = np.zeros((n, n))
    induction[np.arange(n), np.arange(n)] = 1.0                            # rows without a repeat: self
    induction[4, 2], induction[5, 3], induction[6, 4] = 1.0, 1.0, 1.0      # a→b, b→c, c→(the second a)
    induction[4, 4] = induction[5, 5] = induction[6, 6] = 0.0
    prev = np.eye(n, k=-1)
    prev[0, 0] = 1.0
    A = np.stack([induction, prev, _causal_uniform(n)])
    # the uniform map gives 1/5, 1/6, 1/7 to the one target of rows 4, 5, 6; the previous-token map 0
    np.testing.assert_allclose(scores.induction_score(A, tokens), [1.0, 0.0, (1 / 5 + 1 / 6 + 1 / 7) / 3],
                               rtol=1e-15, atol=0)
    batch = rng.integers(0, 4, size=(3, 9))                                # repeats everywhere, several targets
    W = rng.dirichlet(np.ones(9), size=(3, 2, 9))

    def targets(b, i):
        return [j + 1 for j in range(i) if batch[b, j] == batch[b, i]]

    np.testing.assert_allclose(scores.induction_score(W, batch), _loop_score(W, targets), rtol=1e-13, atol=0)
    keep = rng.random((3, 9)) < 0.5

    def kept(b, i):
        return targets(b, i) if keep[b, i] else []

    np.testing.assert_allclose(scores.induction_score(W, batch, query_mask=keep), _loop_score(W, kept),
                               rtol=1e-13, atol=0)


def test_antidiagonal_mass_on_hand_made_maps():
    T, m = 5, 4                                                           # the reverse task's EOS row: T = m + 1
    mirror = np.zeros((T, m))
    mirror[np.arange(m), m - 1 - np.arange(m)] = 1.0
    mirror[m] = 1 / m                                                     # the EOS row is not scored
    diagonal = np.eye(T, m)
    A = np.stack([np.stack([mirror, diagonal, np.full((T, m), 1 / m)])] * 2)   # (2, 3, T, m)
    # the identity meets the anti-diagonal of a 4 × 4 block nowhere (m even)
    np.testing.assert_allclose(scores.antidiagonal_mass(A), [1.0, 0.0, 1 / m], rtol=1e-15, atol=0)
    odd = np.eye(3)[None]
    np.testing.assert_allclose(scores.antidiagonal_mass(odd), [1 / 3], rtol=1e-15, atol=0)  # the centre only


def test_scores_refuse_bad_input():
    with pytest.raises(ValueError, match=r"shape \(4, 4\)"):
        scores.previous_token_score(np.eye(4))
    with pytest.raises(ValueError, match="self-attention"):
        scores.induction_score(np.ones((1, 3, 4)), [0, 1, 2])
    with pytest.raises(ValueError, match="tokens must be integer ids"):
        scores.induction_score(np.ones((1, 3, 3)), [0, 1])
    with pytest.raises(ValueError, match="do not fit"):
        scores.induction_score(np.ones((2, 1, 3, 3)), np.zeros((3, 3), int))
    with pytest.raises(TypeError, match="query_mask must be boolean"):
        scores.previous_token_score(np.ones((1, 3, 3)), query_mask=[1, 0, 1])


# ------------------------------------------------------------------------------------------ shipped models

FRESH = 31337                                   # no training run uses this seed (the shipped weights use 0)


def test_shipped_reverse_model_reverses_fresh_sequences():
    assert training.evaluate("reverse", training.pretrained("reverse"), num_sequences=1000, rng=FRESH) >= 0.99


def test_shipped_induction_model_completes_the_copy():
    assert training.evaluate("induction", training.pretrained("induction"), num_sequences=1000, rng=FRESH) >= 0.95


def test_reverse_cross_attention_is_anti_diagonal():
    found = training.head_scores("reverse", training.pretrained("reverse"), num_sequences=500, rng=FRESH)
    assert list(found) == ["decoder.0.cross"]
    assert found["decoder.0.cross"]["antidiagonal"].max() >= 0.8


def test_induction_model_has_previous_token_and_induction_heads():
    found = training.head_scores("induction", training.pretrained("induction"), num_sequences=500, rng=FRESH)
    assert list(found) == ["layer.0", "layer.1"]
    assert max(s["previous_token"].max() for s in found.values()) >= 0.5
    assert max(s["induction"].max() for s in found.values()) >= 0.5


def test_head_scores_count_real_tokens_only():
    params = training.pretrained("induction")
    batch = induction_batch(FRESH, 40)
    _, weights = decoder_logits(params, batch.inputs, return_weights=True)
    real = batch.inputs != PAD
    found = training.head_scores("induction", params, num_sequences=40, rng=FRESH)
    for name, A in weights.items():
        np.testing.assert_array_equal(found[name]["previous_token"],
                                      scores.previous_token_score(A, query_mask=real))
        np.testing.assert_array_equal(found[name]["induction"],
                                      scores.induction_score(A, batch.inputs, query_mask=real))


def test_greedy_decoding_matches_the_cached_decoder():
    params = training.pretrained("reverse")
    batch = reverse_batch(FRESH, 64)
    steps = batch.targets.shape[1]
    tokens, _ = greedy_decode(batch.src, params.transformer, num_heads=params.num_heads, bos=BOS, max_len=steps)
    np.testing.assert_array_equal(tasks.decode_greedily(params, batch.src, steps=steps), tokens[:, 1:])


def test_evaluate_counts_what_it_says():
    params = training.pretrained("reverse")
    batch = reverse_batch(FRESH, 200)
    decoded = tasks.decode_greedily(params, batch.src, steps=batch.targets.shape[1])
    expected = np.mean([list(d) == list(t) for d, t in zip(decoded, batch.targets, strict=True)])
    assert training.evaluate("reverse", params, num_sequences=200, rng=FRESH) == expected
    # a softmax decoder that is right so far sees what teacher forcing feeds it: the two rates agree
    logits = seq2seq_logits(params, batch.src, batch.inputs)
    assert training.train_accuracy("reverse", logits, batch) == expected
    params = training.pretrained("induction")
    batch = induction_batch(FRESH, 200)
    predicted = np.argmax(decoder_logits(params, batch.inputs), axis=-1)
    scored = zip(*np.nonzero(batch.loss_mask), strict=True)
    right = [predicted[b, t] == batch.targets[b, t] for b, t in scored]
    assert training.evaluate("induction", params, num_sequences=200, rng=FRESH) == np.mean(right)


def test_evaluate_uses_the_attention_swapped_in():
    from refattn import scaled_dot_product_attention

    def uniform(q, k, v, *, causal=False, mask=None):                   # every allowed key weighs the same
        return scaled_dot_product_attention(np.zeros_like(q), k, v, causal=causal, mask=mask)

    for task in ("reverse", "induction"):
        params = training.pretrained(task)
        exact = training.evaluate(task, params, num_sequences=100, rng=FRESH)
        assert training.evaluate(task, params, num_sequences=100, rng=FRESH,
                                 attention=scaled_dot_product_attention) == exact
        assert training.evaluate(task, params, num_sequences=100, rng=FRESH, attention=uniform) < 0.5


# ------------------------------------------------------------------------------------------ weight files


@pytest.mark.parametrize("task", ["reverse", "induction"])
def test_weight_files_round_trip_byte_for_byte(task, tmp_path):
    shipped = training.pretrained_path(task)
    assert shipped.name == f"{task}.npz" and shipped.stat().st_size < 100_000          # tens of KB
    params = training.pretrained(task)
    path = training.save_params(tmp_path / "w.npz", params)
    assert path.read_bytes() == shipped.read_bytes()             # the shipped file is what save_params writes
    assert training.compare_params(training.load_params(path, task), params) == []
    with np.load(path) as archive:
        assert sorted(archive.files) == sorted(leaf_names(params))
        assert all(archive[name].dtype == np.float64 for name in archive.files)


def test_loading_another_models_file_names_the_arrays(tmp_path):
    path = training.save_params(tmp_path / "w.npz", training.pretrained("induction"))
    with pytest.raises(ValueError, match=r"does not hold the reverse model's arrays: missing \['transformer"):
        training.load_params(path, "reverse")


def test_compare_params_finds_a_flipped_bit():
    params = training.pretrained("induction")
    leaves = [leaf.copy() for leaf in flatten(params)]
    leaves[3].reshape(-1)[0] = np.nextafter(leaves[3].reshape(-1)[0], np.inf)
    changed = unflatten(params, leaves)
    assert [name for name, _ in training.compare_params(changed, params)] == [leaf_names(params)[3]]
    assert training.compare_params(params, params) == []


# ------------------------------------------------------------------------------------------ training and the CLI


def run(*args):
    return subprocess.run([sys.executable, "-m", "refattn", *args], capture_output=True, text=True, check=False)


def test_cli_trains_a_few_steps_reproducibly(tmp_path):
    result = run("train", "induction", "--steps", "4", "--seed", "3", "--out", str(tmp_path / "w.npz"))
    assert result.returncode == 0, result.stderr
    assert "step 4/4" in result.stderr and "steps/s" in result.stderr and "accuracy" in result.stderr
    assert "induction: seed 3, 4 steps" in result.stdout and f"wrote {tmp_path / 'w.npz'}" in result.stdout
    params, history = training.train("induction", seed=3, steps=4, progress=False)
    assert training.compare_params(training.load_params(tmp_path / "w.npz", "induction"), params) == []
    assert history.loss.shape == history.accuracy.shape == (4,) and np.isfinite(history.loss).all()


def test_cli_writes_task_npz_by_default(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["train", "reverse", "--steps", "2"]) == 0
    assert "wrote reverse.npz" in capsys.readouterr().out
    assert training.load_params(tmp_path / "reverse.npz", "reverse").num_heads == 2


def test_cli_check_tells_bits_and_accuracy_apart(tmp_path, monkeypatch, capsys):
    from refattn.training import loop as train_module
    params, _ = training.train("induction", steps=2, progress=False)           # the shipped seed
    training.save_params(tmp_path / "induction.npz", params)
    monkeypatch.setattr(train_module, "WEIGHTS_DIR", tmp_path)                 # "shipped" = these 2 steps
    assert main(["train", "induction", "--steps", "2", "--check"]) == 0
    out = capsys.readouterr().out
    assert "bits: identical to the shipped weights" in out and "as good" in out
    assert [p.name for p in tmp_path.iterdir()] == ["induction.npz"]          # --check alone writes nothing
    leaves = [leaf.copy() for leaf in flatten(params)]                         # another BLAS's last bit
    leaves[3].reshape(-1)[0] = np.nextafter(leaves[3].reshape(-1)[0], np.inf)
    training.save_params(tmp_path / "induction.npz", unflatten(params, leaves))
    assert main(["train", "induction", "--steps", "2", "--check"]) == 0        # as good: the bits are reported
    out = capsys.readouterr().out
    assert f"bits: differ from the shipped weights (seed 0, 3000 steps) in 1 of {len(leaves)} arrays" in out
    assert f"in {leaf_names(params)[3]}" in out and "as good" in out
    assert main(["train", "induction", "--steps", "2", "--check", "--strict"]) == 1
    assert "--strict: the bits differ" in capsys.readouterr().out
    assert main(["train", "induction", "--steps", "2", "--strict"]) == 1          # --strict implies --check


def test_cli_check_fails_a_model_less_accurate_than_the_shipped_one(capsys):
    assert main(["train", "induction", "--steps", "2", "--check"]) == 1        # 2 steps against 3000
    out = capsys.readouterr().out
    accuracy, shipped = (float(x) for x in re.search(r"accuracy: (\S+) against the shipped model's (\S+)",
                                                     out).groups())
    assert accuracy < shipped and "WORSE" in out


def test_cli_refuses_an_output_in_a_missing_folder_before_training(tmp_path, monkeypatch, capsys):
    from refattn.training import loop as train_module

    def not_reached(*args, **kwargs):
        raise AssertionError("trained before refusing the output")
    monkeypatch.setattr(train_module, "train", not_reached)
    for option in ("--out", "--record"):
        with pytest.raises(SystemExit) as exit_info:
            main(["train", "reverse", option, str(tmp_path / "missing" / "w.npz")])
        error = capsys.readouterr().err.splitlines()[-1]
        assert exit_info.value.code == 2
        assert f"argument {option}: '{tmp_path / 'missing' / 'w.npz'}' cannot be written: the folder " \
               f"'{tmp_path / 'missing'}' does not exist" in error
    assert list(tmp_path.iterdir()) == []


def test_cli_refuses_bad_arguments():
    for args in (["train", "copy"], ["train", "reverse", "--steps", "0"], ["train", "reverse", "--seed", "-1"]):
        result = run(*args)
        assert result.returncode == 2 and "error:" in result.stderr, args


def test_training_refuses_bad_arguments():
    with pytest.raises(ValueError, match="steps must be a positive int"):
        training.train("reverse", steps=0)
    with pytest.raises(ValueError, match="seed must be a non-negative int"):
        training.train("reverse", seed=-2, steps=1)
