"""The training tasks: seeded generators, head scores, accuracy of the shipped models, the CLI, weight files."""
from __future__ import annotations

import numpy as np
import pytest

from refattn.training import scores, tasks
from refattn.training.tasks import BOS, EOS, PAD, induction_batch, reverse_batch

# ------------------------------------------------------------------------------------------ generators


@pytest.mark.parametrize("draw", [reverse_batch, induction_batch])
def test_generators_are_seeded(draw):
    a, b, c = draw(5, 16), draw(np.random.default_rng(5), 16), draw(6, 16)
    for x, y in zip(a[1:], b[1:]):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a.inputs, c.inputs)


def test_reverse_batch_is_the_reversed_source():
    b = reverse_batch(1, 64)
    L = tasks.REVERSE_LENGTH
    assert b.src.shape == (64, L) and b.inputs.shape == b.targets.shape == (64, L + 1)
    assert b.src.dtype == b.inputs.dtype == b.targets.dtype == np.int64 and b.loss_mask.all()
    for src, inputs, targets in zip(b.src, b.inputs, b.targets):
        assert list(targets) == [src[L - 1 - t] for t in range(L)] + [EOS]
        assert list(inputs) == [BOS] + [src[L - 1 - t] for t in range(L)]
    assert set(np.unique(b.src)) == set(range(2, 2 + tasks.REVERSE_SYMBOLS))     # every symbol, no BOS/EOS


def test_induction_batch_repeats_distinct_symbols():
    b = induction_batch(2, 200)
    T = 2 * tasks.INDUCTION_MAX_LENGTH
    assert b.src is None and b.inputs.shape == b.targets.shape == b.loss_mask.shape == (200, T)
    lengths = set()
    for inputs, targets, mask in zip(b.inputs, b.targets, b.loss_mask):
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
