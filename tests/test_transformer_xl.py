"""Transformer-XL: the relative-shift trick by hand and against direct (i − j) indexing, R's ordering and clamp,
zero parameters are causal softmax attention, an empty memory is plain relative attention, the segment loop with its
memory against the whole sequence and against the naive loop, per-head parameters, and bad input. The naive loop of
tests/naive.py and the registry-driven tests cover the rest."""
from __future__ import annotations

import math

import numpy as np
import pytest

from refattn import registry, scaled_dot_product_attention
from refattn.positional import (
    TransformerXLParams,
    init_transformer_xl,
    init_transformer_xl_layer,
    rel_shift,
    relative_sinusoids,
    transformer_xl_attention,
    transformer_xl_segments,
    transformer_xl_step,
    transformer_xl_terms,
)

from .naive import naive_transformer_xl

TIGHT = {"rtol": 1e-12, "atol": 1e-12}
RECORD = registry.get("transformer_xl")


def _params(rng, d=4, d_r=6, heads=()):
    """Parameters of order 1 (the official 0.02 makes (b)-(d) tiny)."""
    return TransformerXLParams(rng.standard_normal((*heads, d)), rng.standard_normal((*heads, d)),
                               rng.standard_normal((*heads, d_r, d)))


def test_rel_shift_by_hand():
    # pad a zero column: [[0 1 2 3] [0 4 5 6] [0 7 8 9]]; read as 4 × 3: [0 1 2] [3 0 4] [5 6 0] [7 8 9];
    # drop the first row and read back as 3 × 3. Row i, column j ≤ i holds the column of distance i − j
    # (column c holds position 2 − c); above the diagonal are left-overs (0 and 4).
    x = np.arange(1.0, 10.0).reshape(3, 3)
    np.testing.assert_array_equal(rel_shift(x), [[3, 0, 4], [5, 6, 0], [7, 8, 9]])


@pytest.mark.parametrize(("qlen", "klen"), [(4, 4), (3, 7), (1, 5), (5, 2)])
def test_rel_shift_equals_direct_indexing_on_the_causal_pairs(rng, qlen, klen):
    """Column c of x holds position klen − 1 − c; after the shift, (i, j) holds distance klen − qlen + i − j
    wherever j ≤ i + klen − qlen (with a batch and a head axis in front)."""
    x = rng.standard_normal((2, 3, qlen, klen))
    shifted = rel_shift(x)
    mlen = klen - qlen
    for i in range(qlen):
        for j in range(min(i + mlen + 1, klen)):
            np.testing.assert_array_equal(shifted[..., i, j], x[..., i, klen - 1 - (mlen + i - j)])


def test_relative_sinusoids_order_and_clamp():
    # d_r = 4: frequencies 1 and 10000^(−1/2) = 1/100; R_p = [sin p, sin p/100, cos p, cos p/100]
    R = relative_sinusoids(np.arange(2, -1, -1), 4)                # positions klen − 1 … 0 with klen = 3
    np.testing.assert_allclose(R, [[math.sin(2), math.sin(0.02), math.cos(2), math.cos(0.02)],
                                   [math.sin(1), math.sin(0.01), math.cos(1), math.cos(0.01)],
                                   [0.0, 0.0, 1.0, 1.0]], rtol=1e-15, atol=1e-15)
    clamped = relative_sinusoids(np.arange(5, -1, -1), 4, clamp_len=2)
    np.testing.assert_array_equal(clamped[:4], np.broadcast_to(R[0], (4, 4)))   # 5, 4, 3, 2 -> 2
    np.testing.assert_array_equal(clamped[4:], R[1:])


@pytest.mark.parametrize("causal", [True, "bottom-right"])
@pytest.mark.parametrize(("n", "m"), [(5, 7), (7, 5), (4, 4)])
def test_shift_terms_equal_direct_terms_on_every_visible_pair(rng, causal, n, m):
    q, k = rng.standard_normal((2, n, 4)), rng.standard_normal((2, m, 4))
    params = _params(rng, heads=(2,))
    offset = m - n if causal == "bottom-right" else 0
    visible = np.arange(m)[None, :] <= np.arange(n)[:, None] + offset
    for clamp_len in (None, 2):
        direct = transformer_xl_terms(q, k, params, causal=causal, clamp_len=clamp_len)
        shift = transformer_xl_terms(q, k, params, causal=causal, clamp_len=clamp_len, method="shift")
        for name, x, y in zip("abcd", direct, shift, strict=True):
            np.testing.assert_allclose(x[..., visible], y[..., visible], **TIGHT, err_msg=f"term ({name})")


def test_terms_are_the_papers_four_products(rng):
    """(a) q_iᵀk_j, (b) q_iᵀW R_{i−j}, (c) uᵀk_j, (d) vᵀW R_{i−j}, each written out for one pair."""
    q, k = rng.standard_normal((3, 4)), rng.standard_normal((5, 4))
    params = _params(rng)
    a, b, c, d = transformer_xl_terms(q, k, params)                # bottom-right: mlen = 2
    i, j = 2, 1                                                    # query at position 4: distance 3
    r = relative_sinusoids([3.0], 6)[0] @ params.W_r
    np.testing.assert_allclose([a[i, j], b[i, j], c[i, j], d[i, j]],
                               [q[i] @ k[j], q[i] @ r, params.u @ k[j], params.v @ r], **TIGHT)


@pytest.mark.parametrize("causal", [True, "bottom-right"])
def test_zero_parameters_are_causal_softmax_attention(rng, causal):
    q, k, v = rng.standard_normal((2, 5, 4)), rng.standard_normal((2, 7, 4)), rng.standard_normal((2, 7, 3))
    zero = TransformerXLParams(np.zeros(4), np.zeros(4), np.zeros((6, 4)))
    ref, A_ref = scaled_dot_product_attention(q, k, v, causal=causal, return_weights=True)
    for method in ("direct", "shift"):
        out, A = transformer_xl_attention(q, k, v, zero, causal=causal, method=method, return_weights=True)
        np.testing.assert_allclose(out, ref, **TIGHT)
        np.testing.assert_allclose(A, A_ref, **TIGHT)


def test_per_head_parameters_equal_one_call_per_head(rng):
    q, k, v = rng.standard_normal((3, 5, 4)), rng.standard_normal((3, 8, 4)), rng.standard_normal((3, 8, 2))
    params = init_transformer_xl(rng, 4, num_heads=3, init_std=1.0)
    assert params.u.shape == (3, 4) and params.W_r.shape == (3, 4, 4)
    out = transformer_xl_attention(q, k, v, params)
    for h in range(3):
        one = TransformerXLParams(params.u[h], params.v[h], params.W_r[h])
        np.testing.assert_allclose(out[h], naive_transformer_xl(q[h], k[h], v[h], "bottom-right", one), **TIGHT)


def test_empty_memory_is_plain_relative_attention(rng):
    """The first segment (no memory): queries, keys and values all from the segment, causal top-left: the (a)-(d)
    form alone, as the naive loop computes it."""
    layer = init_transformer_xl_layer(rng, 4, init_std=0.5)
    h = rng.standard_normal((6, 4))
    out, memories, (A,) = transformer_xl_step(h, None, [layer], mem_len=3)
    q, k, v = h @ layer.W_q, h @ layer.W_k, h @ layer.W_v
    np.testing.assert_allclose(out, transformer_xl_attention(q, k, v, layer.params, causal=True), **TIGHT)
    np.testing.assert_allclose(out, naive_transformer_xl(q, k, v, True, layer.params), **TIGHT)
    assert A.shape == (6, 6)
    np.testing.assert_array_equal(memories[0], h[3:])              # the official _update_mems: the last mem_len


def test_memory_is_carried_and_truncated_to_mem_len(rng):
    """Segment 2 attends over the last mem_len states of segment 1 and its own, query i at position i + mlen."""
    layer = init_transformer_xl_layer(rng, 4, init_std=0.5)
    h1, h2 = rng.standard_normal((2, 4, 4))
    _, memories, _ = transformer_xl_step(h1, None, [layer], mem_len=3)
    out, memories2, (A,) = transformer_xl_step(h2, memories, [layer], mem_len=3)
    h_tilde = np.concatenate([h1[1:], h2])                          # [SG(m); h], m = the last 3 states of h1
    q, k, v = h2 @ layer.W_q, h_tilde @ layer.W_k, h_tilde @ layer.W_v
    np.testing.assert_allclose(out, naive_transformer_xl(q, k, v, "bottom-right", layer.params), **TIGHT)
    assert A.shape == (4, 7)
    np.testing.assert_array_equal(A[0, 4:], 0.0)                   # query 0 at position 3 sees keys 0 … 3
    np.testing.assert_array_equal(memories2[0], h2[1:])


@pytest.mark.parametrize("layers", [1, 2])
def test_segments_with_a_memory_of_everything_equal_the_whole_sequence(rng, layers):
    """R depends on i − j only, so segments of 3 carrying every earlier state (per layer) give the one-segment
    result: the memory extends the context exactly (2 layers: layer 2's memory holds layer 1's outputs)."""
    stack = [init_transformer_xl_layer(rng, 4, init_std=0.5) for _ in range(layers)]
    x = rng.standard_normal((2, 8, 4))
    whole = transformer_xl_segments(x, stack, segment_length=8, mem_len=0)
    np.testing.assert_allclose(transformer_xl_segments(x, stack, segment_length=3, mem_len=8), whole, **TIGHT)
    short = transformer_xl_segments(x, stack, segment_length=3, mem_len=2)   # a shorter memory forgets
    np.testing.assert_allclose(short[..., :3, :], whole[..., :3, :], **TIGHT)
    assert np.abs(short[..., 3:, :] - whole[..., 3:, :]).max() > 1e-6


def test_one_layer_segments_equal_a_windowed_naive_loop(rng):
    """mem_len = 2, segments of 3: query t of segment s sees the 2 states before the segment and its own up to t."""
    layer = init_transformer_xl_layer(rng, 4, init_std=0.5)
    x = rng.standard_normal((7, 4))
    got = transformer_xl_segments(x, [layer], segment_length=3, mem_len=2)
    for start in range(0, 7, 3):
        lo = max(0, start - 2)
        seg, ctx = x[start:start + 3], x[lo:start + 3]
        expected = naive_transformer_xl(seg @ layer.W_q, ctx @ layer.W_k, ctx @ layer.W_v, "bottom-right",
                                        layer.params)
        np.testing.assert_allclose(got[start:start + 3], expected, **TIGHT)


def test_clamp_len_makes_far_distances_share_one_encoding(rng):
    q, k = rng.standard_normal((6, 4)), rng.standard_normal((6, 4))
    params = _params(rng)
    _, b, _, d = transformer_xl_terms(q, k, params, causal=True, clamp_len=2)
    r2 = relative_sinusoids([2.0], 6)[0] @ params.W_r
    for i in range(6):
        for j in range(i - 1):                                     # distances ≥ 2
            np.testing.assert_allclose([b[i, j], d[i, j]], [q[i] @ r2, params.v @ r2], **TIGHT)


def test_bad_input(rng):
    q, k, v = rng.standard_normal((3, 5, 4))
    params = _params(rng)
    with pytest.raises(ValueError, match="causal"):
        transformer_xl_attention(q, k, v, params, causal=False)
    with pytest.raises(ValueError, match="causal"):
        RECORD.apply(q, k, v, causal=False)
    with pytest.raises(ValueError, match="even d_r"):
        TransformerXLParams(np.zeros(4), np.zeros(4), np.zeros((5, 4)))
    with pytest.raises(ValueError, match="same d"):
        TransformerXLParams(np.zeros(3), np.zeros(4), np.zeros((4, 4)))
    with pytest.raises(ValueError, match="params have d=2"):
        transformer_xl_attention(q, k, v, _params(rng, d=2))
    with pytest.raises(TypeError, match="TransformerXLParams"):
        transformer_xl_attention(q, k, v, {"u": 0})
    with pytest.raises(ValueError, match="method"):
        transformer_xl_attention(q, k, v, params, method="roll")
    with pytest.raises(ValueError, match="clamp_len"):
        transformer_xl_attention(q, k, v, params, clamp_len=0)
    with pytest.raises(ValueError, match="'zero'"):
        RECORD.apply(q, k, v, params="ones")
    with pytest.raises(ValueError, match="2 entries for 1 layers"):
        transformer_xl_step(q, [q, q], [init_transformer_xl_layer(rng, 4)], mem_len=2)


def test_the_function_draws_or_zeroes_its_parameters_as_the_record_does(rng):
    q, k, v = rng.standard_normal((5, 4)), rng.standard_normal((7, 4)), rng.standard_normal((7, 3))
    drawn = RECORD.apply(q, k, v, causal="bottom-right", rng=2, return_draws=True)
    np.testing.assert_array_equal(transformer_xl_attention(q, k, v, rng=2), drawn.output)
    np.testing.assert_array_equal(transformer_xl_attention(q, k, v, drawn.draws["params"]), drawn.output)
    np.testing.assert_allclose(transformer_xl_attention(q, k, v, "zero"),
                               scaled_dot_product_attention(q, k, v, causal="bottom-right"), **TIGHT)
    for call in (transformer_xl_attention, RECORD.apply):
        with pytest.raises(ValueError,
                           match=r"^transformer_xl draws u, v and W_k,R from rng: pass rng= \(or params=\)$"):
            call(q, k, v)
