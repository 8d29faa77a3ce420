"""API parity of the sparse family with other libraries, each against a NumPy transcription of that
library's documented or coded semantics (torch is never imported)."""
from __future__ import annotations

import numpy as np
import pytest

from refattn.sparse import SparsePattern, sparse_attention

TIGHT = {"rtol": 1e-12, "atol": 1e-12}
METHODS = ("equation", "csr", "auto")


def torch_sdpa_reference(query, key, value, attn_mask=None):
    """``torch.nn.functional.scaled_dot_product_attention``'s reference code from its documentation
    (pytorch.org/docs/stable/generated/torch.nn.functional.scaled_dot_product_attention.html),
    transcribed: a bool mask is ``True`` where a pair takes part (``masked_fill`` of ``-inf``
    elsewhere), a float mask is added to the scores; a row with no pair left is NaN (softmax of
    ``-inf`` only)."""
    L, S = query.shape[-2], key.shape[-2]
    scale_factor = 1 / np.sqrt(query.shape[-1])
    attn_bias = np.zeros((L, S))
    if attn_mask is not None:
        if attn_mask.dtype == np.bool_:
            attn_bias = np.where(np.logical_not(attn_mask), -np.inf, attn_bias)
        else:
            attn_bias = attn_mask + attn_bias
    attn_weight = query @ np.swapaxes(key, -2, -1) * scale_factor
    attn_weight = attn_weight + attn_bias
    with np.errstate(invalid="ignore"):                        # an all −inf row: NaN, as torch.softmax
        e = np.exp(attn_weight - attn_weight.max(axis=-1, keepdims=True))
        attn_weight = e / e.sum(axis=-1, keepdims=True)
    return attn_weight @ value


def random_grid(rng, shape, n, m, density=0.5):
    """Independent random patterns in a grid, with their stacked dense masks."""
    masks = rng.random((*shape, n, m)) < density
    grid = np.empty(shape, dtype=object)
    for cell in np.ndindex(shape):
        grid[cell] = SparsePattern.from_mask(masks[cell])
    return grid.tolist(), masks


@pytest.fixture
def problem(rng):
    B, H, n, m = 2, 3, 5, 7
    q, k, v = rng.standard_normal((B, H, n, 4)), rng.standard_normal((B, H, m, 4)), rng.standard_normal((B, H, m, 3))
    return q, k, v


@pytest.mark.parametrize("method", METHODS)
def test_a_pattern_per_batch_entry_and_head_is_torch_sdpa_under_its_mask(rng, problem, method):
    q, k, v = problem
    patterns, kept = random_grid(rng, (2, 3), 5, 7)
    expected = torch_sdpa_reference(q, k, v, kept)
    out = sparse_attention(q, k, v, patterns, fully_masked="nan", method=method)
    np.testing.assert_allclose(out, expected, **TIGHT)


@pytest.mark.parametrize("method", METHODS)
def test_a_pattern_per_batch_entry_is_shared_by_the_heads(rng, problem, method):
    q, k, v = problem
    patterns, kept = random_grid(rng, (2, 1), 5, 7)            # one per batch entry, broadcast over the heads
    out = sparse_attention(q, k, v, patterns, fully_masked="nan", method=method)
    np.testing.assert_allclose(out, torch_sdpa_reference(q, k, v, kept), **TIGHT)


@pytest.mark.parametrize("method", METHODS)
def test_pattern_and_boolean_mask_is_torch_sdpa_under_their_conjunction(rng, problem, method):
    q, k, v = problem
    patterns, kept = random_grid(rng, (3,), 5, 7, density=0.7)  # one per head
    mask = rng.random((2, 1, 5, 7)) < 0.7                      # one per batch entry
    out = sparse_attention(q, k, v, patterns, mask=mask, fully_masked="nan", method=method)
    np.testing.assert_allclose(out, torch_sdpa_reference(q, k, v, kept & mask), **TIGHT)


@pytest.mark.parametrize("method", METHODS)
def test_pattern_and_additive_bias_is_torch_sdpa_with_the_bias_on_the_kept_pairs(rng, problem, method):
    q, k, v = problem
    pattern = SparsePattern.from_mask(rng.random((5, 7)) < 0.7)
    bias = 3 * rng.standard_normal((3, 5, 7))                  # one per head, a few pairs −inf
    bias[rng.random(bias.shape) < 0.2] = -np.inf
    expected = torch_sdpa_reference(q, k, v, np.where(pattern.to_mask(), bias, -np.inf))
    out = sparse_attention(q, k, v, pattern, mask=bias, fully_masked="nan", method=method)
    np.testing.assert_allclose(out, expected, **TIGHT)


@pytest.mark.parametrize("method", METHODS)
def test_pattern_and_key_lengths_is_torch_key_padding_mask(rng, problem, method):
    # torch.nn.MultiheadAttention's key_padding_mask (N, S) is True where a key is IGNORED; as an
    # attn_mask it is ~key_padding_mask[:, None, None, :] (per batch entry, shared by heads and rows).
    q, k, v = problem
    patterns, kept = random_grid(rng, (2, 3), 5, 7, density=0.8)
    lengths = np.array([7, 3])
    key_padding_mask = np.arange(7)[None, :] >= lengths[:, None]          # (N, S), True = padding
    expected = torch_sdpa_reference(q, k, v, kept & ~key_padding_mask[:, None, None, :])
    out = sparse_attention(q, k, v, patterns, key_lengths=lengths[:, None], fully_masked="nan", method=method)
    np.testing.assert_allclose(out, expected, **TIGHT)


@pytest.mark.parametrize("fully_masked", ["zero", "nan", "uniform"])
def test_every_method_agrees_with_all_combined_and_garbage_in_hidden_keys(rng, problem, fully_masked):
    q, k, v = problem
    k, v = k.copy(), v.copy()
    k[..., 6, :], v[..., 5, :] = np.nan, np.inf                # hidden below: by key_lengths, by the mask
    patterns, _ = random_grid(rng, (2, 3), 5, 7)
    bias = rng.standard_normal((2, 1, 5, 7))
    bias[..., 5] = -np.inf
    results = {method: sparse_attention(q, k, v, patterns, mask=bias, key_lengths=np.array([[6], [6]]),
                                        fully_masked=fully_masked, return_weights=True, method=method)
               for method in ("equation", "csr")}
    out, dense = results["equation"]
    if fully_masked == "zero":                                 # "uniform" averages all m values, garbage too
        assert np.isfinite(out).all()
    np.testing.assert_allclose(results["csr"][0], out, **TIGHT)
    np.testing.assert_allclose(sparse_attention(q, k, v, patterns, mask=bias, key_lengths=np.array([[6], [6]]),
                                                fully_masked=fully_masked), out, **TIGHT)
    for b in range(2):                                         # csr weights: one per pattern pair, nested (B, H)
        for h in range(3):
            p, w = patterns[b][h], results["csr"][1][b][h]
            assert w.shape == (p.nnz,)
            np.testing.assert_allclose(w, dense[b, h][p.row_ids(), p.indices], **TIGHT)


def test_a_grid_that_does_not_line_up_is_refused(rng, problem):
    q, k, v = problem
    patterns, _ = random_grid(rng, (3, 3), 5, 7)
    with pytest.raises(ValueError, match=r"grid of shape \(3, 3\).*leading \(batch\) dims of q, k, v .* \(2, 3\)"):
        sparse_attention(q, k, v, patterns)
    with pytest.raises(TypeError, match="mask must be bool .* or float"):
        sparse_attention(q, k, v, patterns[0], mask=np.ones((5, 7), int))


def softmax_rows(s):
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def huggingface_bigbird(q, k, v, b, rand_attn):
    """HuggingFace ``BigBirdBlockSparseAttention.bigbird_block_sparse_attention``
    (transformers/models/big_bird/modeling_big_bird.py), transcribed for one head without padding:
    rows 0 and n_b − 1 see every key; row 1 concatenates key blocks [0, 1, 2, −1, random];
    rows 2 … n_b − 3 [0, I − 1, I, I + 1, random, −1]; row n_b − 2 [0, −3, −2, −1, random]; one
    softmax over each concatenation, so a block listed twice enters it twice."""
    n, d = q.shape
    nb = n // b
    bq, bk, bv = (x.reshape(nb, b, -1) for x in (q, k, v))
    gk, gv = bk[rand_attn].reshape(nb - 2, -1, d), bv[rand_attn].reshape(nb - 2, -1, v.shape[-1])
    rows = [softmax_rows(bq[0] @ k.T / np.sqrt(d)) @ v]
    for I in range(1, nb - 1):
        if I == 1:
            blocks = [0, 1, 2, nb - 1]
        elif I == nb - 2:
            blocks = [0, nb - 3, nb - 2, nb - 1]
        else:
            blocks = [0, I - 1, I, I + 1, nb - 1]                      # (the order of a concatenation is immaterial)
        keys = np.concatenate([bk[blocks].reshape(-1, d), gk[I - 1]])
        values = np.concatenate([bv[blocks].reshape(-1, v.shape[-1]), gv[I - 1]])
        rows.append(softmax_rows(bq[I] @ keys.T / np.sqrt(d)) @ values)
    rows.append(softmax_rows(bq[-1] @ k.T / np.sqrt(d)) @ v)
    return np.concatenate(rows)


@pytest.mark.parametrize("rand_attn", [
    np.zeros((6, 2), dtype=np.int32),                                  # eval mode: _bigbird_block_rand_mask's zeros
    np.array([[3, 3], [4, 0], [1, 2], [6, 6], [1, 1], [3, 2]]),        # repeats within rows and of window blocks
])
@pytest.mark.parametrize("method", METHODS)
def test_bigbird_random_blocks_as_given_count_their_repeats_as_huggingface(rng, rand_attn, method):
    from refattn.sparse.bigbird import RECORD

    b, nb = 2, 8
    q, k, v = rng.standard_normal((3, nb * b, 4))
    random_blocks = np.concatenate([[[-1, -1]], rand_attn, [[-1, -1]]])   # a -1 row for each global block row
    expected = huggingface_bigbird(q, k, v, b, rand_attn)
    result = RECORD.apply(q, k, v, block_size=b, num_random_blocks=2, random_blocks=random_blocks,
                          repeats="count", method=method, return_draws=True)
    np.testing.assert_allclose(result.output, expected, **TIGHT)
    np.testing.assert_array_equal(result.draws["random_blocks"], random_blocks)
    once = RECORD.apply(q, k, v, block_size=b, num_random_blocks=2, random_blocks=random_blocks, method=method)
    assert np.abs(once.output - expected).max() > 1e-3                    # a set keeps a repeated key once


def test_bigbird_repeated_random_blocks_keep_the_set_once():
    from refattn.sparse import bigbird_block_layout

    layout = bigbird_block_layout(6, num_random_blocks=2, random_blocks=[[-1, -1], [4, 4], [0, 4], [0, 1],
                                                                        [1, 2], [-1, -1]])
    single = bigbird_block_layout(6, num_random_blocks=2, random_blocks=[[-1, -1], [4, -1], [0, 4], [0, 1],
                                                                        [1, 2], [-1, -1]])
    np.testing.assert_array_equal(layout, single)


MAX_NEG = -np.finfo(np.float64).max                               # lucidrains' max_neg_value: -finfo.max


def look_around(x, backward=1, forward=0, pad_value=-1):
    """lucidrains/local-attention ``look_around`` (dim 2): each block followed by its neighbours'
    contents, blocks before the first and after the last filled with ``pad_value``."""
    pad = [(0, 0)] * x.ndim
    pad[1] = (backward, forward)
    padded = np.pad(x, pad, constant_values=pad_value)
    windows = x.shape[1]
    return np.concatenate([padded[:, t:t + windows] for t in range(backward + forward + 1)], axis=2)


def lucidrains_local_attention(q, k, v, window_size, *, causal=False, look_backward=1, look_forward=None,
                               exact_windowsize=False, autopad=False, mask=None):
    """``LocalAttention.forward`` (lucidrains/local-attention, local_attention/local_attention.py,
    commit af58e53) transcribed for (b, n, d) inputs, no rotary embedding, no shared_qk, no dropout."""
    look_forward = (0 if causal else 1) if look_forward is None else look_forward
    assert not (causal and look_forward > 0)
    orig_seq_len = q.shape[1]
    if autopad and orig_seq_len % window_size:                   # pad_to_multiple with zeros
        remainder = -orig_seq_len % window_size
        q, k, v = (np.pad(t, ((0, 0), (0, remainder), (0, 0))) for t in (q, k, v))
        if mask is not None:
            mask = np.pad(mask, ((0, 0), (0, remainder)), constant_values=False)
    b, n, dim_head = q.shape
    assert n % window_size == 0
    windows = n // window_size
    scale = dim_head ** -0.5
    b_t = np.arange(n).reshape(1, windows, window_size)
    bq, bk, bv = (t.reshape(b, windows, window_size, -1) for t in (q, k, v))
    bq = bq * scale
    kwargs = {"backward": look_backward, "forward": look_forward}
    bk, bv = look_around(bk, **kwargs, pad_value=-1), look_around(bv, **kwargs, pad_value=-1)
    bq_t = b_t[..., :, None]
    bq_k = look_around(b_t, **kwargs, pad_value=-1)[..., None, :]
    pad_mask = bq_k == -1
    sim = np.einsum("bwie,bwje->bwij", bq, bk)
    if causal:
        causal_mask = bq_t < bq_k
        if exact_windowsize:
            causal_mask = causal_mask | (bq_t > (bq_k + window_size * look_backward))
        sim = np.where(causal_mask, MAX_NEG, sim)
    if not causal and exact_windowsize:
        window_mask = (((bq_k - window_size * look_forward) > bq_t) | (bq_t > (bq_k + window_size * look_backward))
                       | pad_mask)
        sim = np.where(window_mask, MAX_NEG, sim)
    else:
        sim = np.where(pad_mask, MAX_NEG, sim)
    if mask is not None:
        mask = look_around(mask.reshape(b, windows, window_size), **kwargs, pad_value=False)[:, :, None, :]
        sim = np.where(~mask, MAX_NEG, sim)
    attn = softmax_rows(sim)
    out = np.einsum("bwij,bwje->bwie", attn, bv).reshape(b, n, -1)
    return out[:, :orig_seq_len]


@pytest.mark.parametrize("settings", [
    {"window_size": 3, "look_backward": 1},                                     # non-causal default: look_forward 1
    {"window_size": 2, "look_backward": 2, "look_forward": 0},
    {"window_size": 3, "look_backward": 0, "look_forward": 2},
    {"window_size": 3, "look_backward": 1, "exact_windowsize": True},
    {"window_size": 2, "look_backward": 2, "look_forward": 1, "exact_windowsize": True},
    {"window_size": 3, "causal": True},
    {"window_size": 2, "look_backward": 2, "causal": True, "exact_windowsize": True},
])
@pytest.mark.parametrize("method", METHODS)
def test_block_window_is_lucidrains_local_attention(rng, settings, method):
    from refattn.sparse import block_window_pattern

    q, k, v = rng.standard_normal((3, 2, 12, 4))
    expected = lucidrains_local_attention(q, k, v, **settings)
    window = {"window" if name == "window_size" else name: x for name, x in settings.items()}   # lucidrains' name
    out = sparse_attention(q, k, v, block_window_pattern(12, **window), method=method)
    np.testing.assert_allclose(out, expected, **TIGHT)


@pytest.mark.parametrize("causal", [False, True])
def test_block_window_of_a_ragged_length_is_autopad_with_the_padding_masked(rng, causal):
    from refattn.sparse import block_window_pattern

    q, k, v = rng.standard_normal((3, 2, 10, 4))
    settings = {"window_size": 4, "look_backward": 1, "causal": causal, "exact_windowsize": True}
    real = np.ones((2, 10), dtype=bool)
    expected = lucidrains_local_attention(q, k, v, autopad=True, mask=real, **settings)
    pattern = block_window_pattern(10, 4, look_backward=1, causal=causal, exact_windowsize=True)
    for method in METHODS:
        np.testing.assert_allclose(sparse_attention(q, k, v, pattern, method=method), expected, **TIGHT)
    if not causal:                                                # unmasked zero padding dilutes the last blocks
        diluted = lucidrains_local_attention(q, k, v, autopad=True, **settings)
        assert np.abs(diluted - expected)[:, 8:].max() > 1e-3


def test_block_window_refuses_looking_forward_when_causal():
    from refattn.sparse import block_window_pattern

    with pytest.raises(ValueError, match="a causal window cannot look forward: got causal=True with look_forward=1"):
        block_window_pattern(8, 2, causal=True, look_forward=1)
    with pytest.raises(ValueError, match="window must be a positive int"):
        block_window_pattern(8, 0)


def test_block_windows_old_name_window_size_warns_and_gives_the_same_pattern():
    from refattn.sparse import block_window_pattern

    with pytest.warns(DeprecationWarning, match=r"window_size= is renamed window="):
        old = block_window_pattern(8, window_size=3, look_backward=1)
    assert old == block_window_pattern(8, window=3, look_backward=1)
