"""CA-MTL's conditional attention: the prior's block structure as the official code cuts it, its initialisation,
its conditioning on the task, the lengths it takes, and its exact limit."""
from __future__ import annotations

import math

import numpy as np
import pytest

from refattn import scaled_dot_product_attention
from refattn.prior import CamtlParams, camtl_attention, camtl_prior, init_camtl

TIGHT = {"rtol": 1e-12, "atol": 1e-12}


def _params(rng, L, c, num_tasks=3, d_z=5):
    """Unit-scale parameters (a trained prior: A, the FiLM and every bias random)."""
    return CamtlParams(rng.standard_normal((num_tasks, d_z)), rng.standard_normal((d_z, d_z)), rng.standard_normal(d_z),
                       rng.standard_normal((d_z, 2 * c)), rng.standard_normal(2 * c), rng.standard_normal((L, c)))


@pytest.mark.parametrize(("L", "c", "widths"), [(8, 4, [4, 4]), (7, 4, [4, 3]), (6, 2, [2, 2, 2]),
                                                (11, 3, [3, 3, 3, 2]), (5, 5, [5]), (4, 1, [1, 1, 1, 1])])
def test_prior_is_block_diagonal_exactly(rng, L, c, widths):
    """Zero off the blocks, bit for bit; on block j (rows and columns [jc, jc + c) cut at L), row r holds
    A[r, :width] ⊙ (1 + γ) + β, with γ, β from z by hand."""
    p = _params(rng, L, c)
    M = camtl_prior(p, task_id=1)
    starts = np.cumsum([0, *widths])
    assert p.num_blocks == len(widths) and starts[-1] == L
    on_block = np.zeros((L, L), dtype=bool)
    for start, width in zip(starts[:-1], widths, strict=True):
        on_block[start:start + width, start:start + width] = True
    np.testing.assert_array_equal(M[~on_block], 0.0)
    z = p.task_embeddings[1] @ p.w_task + p.b_task
    gamma, beta = (z @ p.w_film + p.b_film)[:c], (z @ p.w_film + p.b_film)[c:]
    for start, width in zip(starts[:-1], widths, strict=True):
        block = p.A[start:start + width, :width] * (1 + gamma[:width]) + beta[:width]
        np.testing.assert_allclose(M[start:start + width, start:start + width], block, **TIGHT)


def test_official_block_rule_on_bert_base():
    """BERT-base, max_seq_length 128: N = 768 // 128 = 6 blocks of width ⌈128/6⌉ = 22, the last one 18 wide."""
    p = init_camtl(0, max_len=128, d_model=768)
    assert p.A.shape == (128, 22) and p.num_blocks == 6
    M = camtl_prior(p)
    np.testing.assert_array_equal(M[110:, :110], 0.0)
    np.testing.assert_array_equal(M[:110, 110:], 0.0)
    assert np.all(M[110:, 110:] != 0)                              # β ≠ 0 almost surely


def test_torch_chunk_gives_fewer_blocks_than_requested():
    """d_model = 24, L = 6: N = 4 requested, width ⌈6/4⌉ = 2, so torch.chunk cuts three blocks."""
    p = init_camtl(0, max_len=6, d_model=24)
    assert p.A.shape == (6, 2) and p.num_blocks == 3


def test_initialisation_follows_the_official_code():
    """A = 0, zero biases, N(0, 0.02²) weights: at initialisation each block repeats β(z) down its rows."""
    p = init_camtl(3, max_len=100, d_model=400, num_tasks=2)      # N = 4 blocks of width 25
    assert p.A.shape == (100, 25)
    np.testing.assert_array_equal(p.A, 0.0)
    np.testing.assert_array_equal(p.b_task, 0.0)
    np.testing.assert_array_equal(p.b_film, 0.0)
    for w in (p.task_embeddings, p.w_task, p.w_film):
        # the sample std of s draws of N(0, σ²) has relative standard error ≈ 1/√(2s) ≤ 1/√(2·800) = 2.5 %;
        # 15 % is six of those
        assert abs(w.std() / 0.02 - 1) < 0.15
    M = camtl_prior(p, task_id=1)
    beta = (p.task_embeddings[1] @ p.w_task @ p.w_film)[25:]
    for r in range(100):
        start = (r // 25) * 25
        np.testing.assert_allclose(M[r, start:start + 25], beta, rtol=1e-12, atol=0)


def test_block_count_rules_and_their_errors():
    with pytest.raises(ValueError, match=r"d_model=100.*max_len=8"):
        init_camtl(0, max_len=8, d_model=100)
    assert init_camtl(0, max_len=8, d_model=100, num_blocks=3).A.shape == (8, 3)
    diagonal = init_camtl(0, max_len=8, d_model=800, a_std=1.0)   # N = 100 >= L: width 1, eight blocks
    assert diagonal.A.shape == (8, 1) and diagonal.num_blocks == 8
    M = camtl_prior(diagonal)
    np.testing.assert_array_equal(M[~np.eye(8, dtype=bool)], 0.0)
    with pytest.raises(ValueError, match="a_std"):
        init_camtl(0, max_len=8, d_model=16, a_std=-1.0)


def test_a_std_draws_a_random_a():
    p = init_camtl(0, max_len=8, d_model=16, a_std=2.0)
    assert np.all(p.A != 0) and abs(p.A.std() / 2.0 - 1) < 0.5     # 32 draws: relative standard error 12.5 %


def test_exact_limit_zero_a_and_zero_beta(rng):
    """A = 0 and β = 0 make M = 0 whatever γ: softmax attention. So does z = 0 at the official initialisation."""
    q, k, v = rng.standard_normal((3, 2, 6, 4))
    p = _params(rng, 8, 3)
    c = p.block_size
    w_film, b_film = p.w_film.copy(), p.b_film.copy()
    w_film[:, c:], b_film[c:] = 0.0, 0.0
    flat = CamtlParams(p.task_embeddings, p.w_task, p.b_task, w_film, b_film, np.zeros_like(p.A))
    expected = scaled_dot_product_attention(q, k, v)
    np.testing.assert_array_equal(camtl_prior(flat, task_id=2), 0.0)
    np.testing.assert_allclose(camtl_attention(q, k, v, params=flat, task_id=2), expected, **TIGHT)
    initial = init_camtl(1, max_len=6, d_model=12)
    np.testing.assert_allclose(camtl_attention(q, k, v, params=initial, task_embedding=np.zeros(12)), expected,
                               **TIGHT)


def test_the_prior_moves_the_weights_by_task(rng):
    """Different tasks, different attention; a batch of task ids equals one call per task."""
    q, k, v = rng.standard_normal((3, 3, 7, 4))
    p = _params(rng, 9, 4)
    out = camtl_attention(q, k, v, params=p, task_id=np.array([0, 2, 1]))
    for b, t in enumerate((0, 2, 1)):
        np.testing.assert_allclose(out[b], camtl_attention(q[b], k[b], v[b], params=p, task_id=t), **TIGHT)
    assert np.max(np.abs(out[0] - camtl_attention(q[0], k[0], v[0], params=p, task_id=1))) > 1e-3


def test_task_id_means_its_transformed_embedding(rng):
    p = _params(rng, 6, 3)
    z = p.task_embeddings[2] @ p.w_task + p.b_task
    np.testing.assert_array_equal(camtl_prior(p, task_id=2), camtl_prior(p, task_embedding=z))


def test_one_prior_for_every_head(rng):
    """(B, H, n, d) inputs with task_id[:, None]: each head sees its batch element's prior (the official code adds
    one prior to every head)."""
    q, k, v = rng.standard_normal((3, 2, 3, 6, 4))
    p = _params(rng, 6, 2)
    out = camtl_attention(q, k, v, params=p, task_id=np.array([1, 0])[:, None])
    for b, t in enumerate((1, 0)):
        for h in range(3):
            np.testing.assert_allclose(out[b, h], camtl_attention(q[b, h], k[b, h], v[b, h], params=p, task_id=t),
                                       **TIGHT)


def test_a_shorter_sequence_is_the_padded_one_with_its_padding_masked(rng):
    """The official code pads to L tokens and masks the padded keys: its first n rows are n tokens with the prior's
    top-left n × n corner."""
    n, L = 5, 9
    p = _params(rng, L, 4)
    q, k, v = rng.standard_normal((3, L, 4))
    q[n:], k[n:], v[n:] = 7.0, -3.0, 100.0                         # padding tokens
    M = camtl_prior(p, task_id=1)
    padded = scaled_dot_product_attention(q, k, v, mask=M, key_lengths=n)
    np.testing.assert_allclose(camtl_attention(q[:n], k[:n], v[:n], params=p, task_id=1), padded[:n], **TIGHT)


def test_lengths_it_cannot_take(rng):
    p = _params(rng, 6, 3)
    q = rng.standard_normal((7, 4))
    with pytest.raises(ValueError, match=r"max_len=6.*m=7"):
        camtl_attention(q, q, q, params=p)
    with pytest.raises(ValueError, match=r"n=5.*m=6"):
        camtl_attention(q[:5], q[:6], q[:6], params=p)
    out = camtl_attention(q[:3], q[:6], q[:6], params=p, causal="bottom-right")
    assert out.shape == (3, 4)


def test_bad_arguments_are_named(rng):
    p = _params(rng, 6, 3)
    q = rng.standard_normal((6, 4))
    with pytest.raises(ValueError, match="task_id"):
        camtl_attention(q, q, q, params=p, task_id=3)
    with pytest.raises(TypeError, match="task_id"):
        camtl_attention(q, q, q, params=p, task_id=1.0)
    with pytest.raises(ValueError, match="not both"):
        camtl_attention(q, q, q, params=p, task_id=1, task_embedding=np.zeros(5))
    with pytest.raises(ValueError, match=r"task_embedding.*d_z=5"):
        camtl_attention(q, q, q, params=p, task_embedding=np.zeros(4))
    with pytest.raises(TypeError, match="params"):
        camtl_attention(q, q, q, params={"A": 1})
    with pytest.raises(ValueError, match=r"camtl draws its params from rng: pass rng= \(or params=\)"):
        camtl_attention(q, q, q)
    with pytest.raises(ValueError, match="num_blocks"):
        camtl_attention(q, q, q, params=p, num_blocks=2)
    with pytest.raises(ValueError, match="max_len=7"):
        camtl_attention(q, q, q, params=p, max_len=7)
    with pytest.raises(ValueError, match=r"w_film must have shape \(5, 6\)"):
        CamtlParams(p.task_embeddings, p.w_task, p.b_task, p.w_film[:, :4], p.b_film, p.A)
    with pytest.raises(ValueError, match="A must have shape"):
        CamtlParams(p.task_embeddings, p.w_task, p.b_task, np.zeros((5, 14)), np.zeros(14), np.zeros((6, 7)))


def test_drawn_params_are_the_official_initialisation(rng):
    """The natural function's rng draw is init_camtl's (L = m, d_model = 2L unless given)."""
    q, k, v = rng.standard_normal((3, 6, 4))
    p = init_camtl(4, max_len=6, d_model=12)
    np.testing.assert_array_equal(camtl_attention(q, k, v, rng=4), camtl_attention(q, k, v, params=p))
    assert math.ceil(6 / 2) == p.block_size


def test_given_params_leave_rng_unused(rng):
    """params and rng both: the given params are used and nothing is drawn (the rule of every draw)."""
    q = rng.standard_normal((5, 4))
    p = init_camtl(1, max_len=6, d_model=12, a_std=1.0)
    np.testing.assert_array_equal(camtl_attention(q, q, q, params=p, rng=0), camtl_attention(q, q, q, params=p))
    assert not np.array_equal(camtl_attention(q, q, q, rng=0, max_len=6, d_model=12),
                              camtl_attention(q, q, q, params=p))
