"""Encoder and decoder layers (Vaswani et al., 2017, §3.1) and incremental decoding with a cache."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from refattn import (
    DecoderCache,
    decoder_layer,
    decoder_layer_step,
    encoder_layer,
    init_decoder_layer,
    init_encoder_layer,
    layer_norm,
    multi_head_attention,
)

TOL = dict(rtol=1e-12, atol=1e-12)
D_MODEL, H, D_FF = 8, 2, 12


def perturbed(params, rng, size=0.3):
    """Every array of a (nested) parameter dataclass plus N(0, size²) noise.

    The init gives zero biases, γ = 1 and β = 0 in every norm, so swapping two norms or dropping a
    bias would go unnoticed; after this every parameter is distinct and non-trivial.
    """
    changes = {}
    for field in dataclasses.fields(params):
        value = getattr(params, field.name)
        if dataclasses.is_dataclass(value):
            changes[field.name] = perturbed(value, rng, size)
        elif isinstance(value, np.ndarray):
            changes[field.name] = value + size * rng.standard_normal(value.shape)
    return dataclasses.replace(params, **changes)


def ln(x, norm, eps=1e-5):
    """LN(x) = γ ⊙ (x − μ)/√(σ² + ε) + β, written out here (independent of refattn.layer_norm)."""
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return norm.gamma * (x - mu) / np.sqrt(var + eps) + norm.beta


def ffn(x, p):
    """FFN(x) = max(0, x W₁ + b₁) W₂ + b₂."""
    return np.maximum(x @ p.w_1 + p.b_1, 0.0) @ p.w_2 + p.b_2


def hand_encoder(x, p, mask, norm_first):
    attn = lambda s: multi_head_attention(s, s, p.self_attn, num_heads=H, mask=mask)  # noqa: E731
    if norm_first:
        x = x + attn(ln(x, p.norm_1))
        return x + ffn(ln(x, p.norm_2), p.ffn)
    x = ln(x + attn(x), p.norm_1)
    return ln(x + ffn(x, p.ffn), p.norm_2)


def hand_decoder(y, memory, p, self_mask, memory_mask, norm_first, causal=True):
    self_attn = lambda s: multi_head_attention(s, s, p.self_attn, num_heads=H,  # noqa: E731
                                               mask=self_mask, causal=causal)
    cross_attn = lambda s: multi_head_attention(s, memory, p.cross_attn, num_heads=H,  # noqa: E731
                                                mask=memory_mask)
    if norm_first:
        y = y + self_attn(ln(y, p.norm_1))
        y = y + cross_attn(ln(y, p.norm_2))
        return y + ffn(ln(y, p.norm_3), p.ffn)
    y = ln(y + self_attn(y), p.norm_1)
    y = ln(y + cross_attn(y), p.norm_2)
    return ln(y + ffn(y, p.ffn), p.norm_3)


def padding(lengths, m):
    """(B, 1, m) key padding mask, True = may attend."""
    return np.arange(m)[None, None, :] < np.asarray(lengths)[:, None, None]


@pytest.fixture
def enc_params(rng):
    return perturbed(init_encoder_layer(rng, D_MODEL, H, D_FF), rng)


@pytest.fixture
def dec_params(rng):
    return perturbed(init_decoder_layer(rng, D_MODEL, H, D_FF), rng)


# --- encoder ------------------------------------------------------------------------------------

@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("use_mask", [False, True])
def test_encoder_layer_is_its_composition(rng, enc_params, norm_first, use_mask):
    x = rng.standard_normal((2, 6, D_MODEL))
    mask = padding([6, 4], 6) if use_mask else None
    out = encoder_layer(x, enc_params, num_heads=H, mask=mask, norm_first=norm_first)
    assert out.shape == x.shape
    np.testing.assert_allclose(out, hand_encoder(x, enc_params, mask, norm_first), **TOL)


def test_encoder_post_and_pre_ln_differ(rng, enc_params):
    x = rng.standard_normal((5, D_MODEL))
    post = encoder_layer(x, enc_params, num_heads=H)
    pre = encoder_layer(x, enc_params, num_heads=H, norm_first=True)
    assert np.abs(post - pre).max() > 1e-2
    # post-LN ends with a norm: each row, un-scaled by γ and shifted by β, has zero mean
    g, b = enc_params.norm_2.gamma, enc_params.norm_2.beta
    np.testing.assert_allclose(((post - b) / g).mean(axis=-1), 0.0, rtol=0, atol=1e-13)


def test_encoder_eps_is_used(rng, enc_params):
    x = rng.standard_normal((4, D_MODEL))
    out = encoder_layer(x, enc_params, num_heads=H, eps=0.3)
    np.testing.assert_allclose(out, _hand_encoder_eps(x, enc_params, 0.3), **TOL)


def _hand_encoder_eps(x, p, eps):
    x = ln(x + multi_head_attention(x, x, p.self_attn, num_heads=H), p.norm_1, eps)
    return ln(x + ffn(x, p.ffn), p.norm_2, eps)


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_padding_does_not_reach_real_positions(rng, enc_params, norm_first):
    n, lengths = 6, [6, 3]
    x = rng.standard_normal((2, n, D_MODEL))
    mask = padding(lengths, n)
    out = encoder_layer(x, enc_params, num_heads=H, mask=mask, norm_first=norm_first)
    x2 = x.copy()
    x2[1, 3:] = 100 * rng.standard_normal((n - 3, D_MODEL))
    out2 = encoder_layer(x2, enc_params, num_heads=H, mask=mask, norm_first=norm_first)
    np.testing.assert_array_equal(out2[0], out[0])
    np.testing.assert_array_equal(out2[1, :3], out[1, :3])


# --- decoder ------------------------------------------------------------------------------------

@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_is_its_composition(rng, dec_params, norm_first):
    n, m = 5, 7                                                   # n != m
    y, memory = rng.standard_normal((2, n, D_MODEL)), rng.standard_normal((2, m, D_MODEL))
    memory_mask = padding([7, 4], m)
    self_mask = padding([5, 3], n)                                # target padding, on top of causal
    out = decoder_layer(y, memory, dec_params, num_heads=H, self_mask=self_mask,
                        memory_mask=memory_mask, norm_first=norm_first)
    assert out.shape == y.shape
    ref = hand_decoder(y, memory, dec_params, self_mask, memory_mask, norm_first)
    np.testing.assert_allclose(out, ref, **TOL)


@pytest.mark.parametrize("causal", [False, True, "bottom-right"])
def test_decoder_causal_option(rng, dec_params, causal):
    y, memory = rng.standard_normal((4, D_MODEL)), rng.standard_normal((6, D_MODEL))
    out = decoder_layer(y, memory, dec_params, num_heads=H, causal=causal)
    np.testing.assert_allclose(out, hand_decoder(y, memory, dec_params, None, None, False, causal), **TOL)


def test_decoder_default_is_causal(rng, dec_params):
    y, memory = rng.standard_normal((4, D_MODEL)), rng.standard_normal((6, D_MODEL))
    np.testing.assert_array_equal(decoder_layer(y, memory, dec_params, num_heads=H),
                                  decoder_layer(y, memory, dec_params, num_heads=H, causal=True))
    assert np.abs(decoder_layer(y, memory, dec_params, num_heads=H)
                  - decoder_layer(y, memory, dec_params, num_heads=H, causal=False)).max() > 1e-3


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_outputs_ignore_future_positions(rng, dec_params, norm_first):
    n, m = 6, 4
    y, memory = rng.standard_normal((2, n, D_MODEL)), rng.standard_normal((2, m, D_MODEL))
    memory_mask = padding([4, 2], m)
    out = decoder_layer(y, memory, dec_params, num_heads=H, memory_mask=memory_mask, norm_first=norm_first)
    for t in range(n - 1):
        y2 = y.copy()
        y2[:, t + 1:] = 10 * rng.standard_normal((2, n - t - 1, D_MODEL))
        out2 = decoder_layer(y2, memory, dec_params, num_heads=H, memory_mask=memory_mask,
                             norm_first=norm_first)
        np.testing.assert_array_equal(out2[:, :t + 1], out[:, :t + 1], err_msg=f"t={t}")
        assert np.abs(out2[:, t + 1:] - out[:, t + 1:]).max() > 1e-3


# --- incremental decoding -----------------------------------------------------------------------

def run_steps(y, memory, params, chunks, memory_mask, norm_first):
    outs, cache, start, caches = [], None, 0, []
    for size in chunks:
        out, cache = decoder_layer_step(y[..., start:start + size, :], memory, params, cache, num_heads=H,
                                        memory_mask=memory_mask, norm_first=norm_first)
        assert out.shape == (*y.shape[:-2], size, D_MODEL)
        outs.append(out)
        caches.append(cache)
        start += size
    assert start == y.shape[-2]
    return np.concatenate(outs, axis=-2), caches


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("chunks", [[1] * 7, [2, 3, 2], [3, 1, 3], [7]])
def test_step_by_step_equals_full_causal_decoder(rng, dec_params, norm_first, chunks):
    n, m, B = 7, 5, 2                                             # n != m
    y, memory = rng.standard_normal((B, n, D_MODEL)), rng.standard_normal((B, m, D_MODEL))
    memory_mask = padding([5, 3], m)
    full = decoder_layer(y, memory, dec_params, num_heads=H, memory_mask=memory_mask,
                         causal=True, norm_first=norm_first)
    stepped, caches = run_steps(y, memory, dec_params, chunks, memory_mask, norm_first)
    np.testing.assert_allclose(stepped, full, **TOL)

    d_k = D_MODEL // H
    t = 0
    for size, cache in zip(chunks, caches, strict=True):
        t += size
        assert isinstance(cache, DecoderCache)
        assert cache.k.shape == (B, H, t, d_k) and cache.v.shape == (B, H, t, d_k)
        assert cache.memory_k.shape == cache.memory_v.shape == (B, H, m, d_k)
        np.testing.assert_array_equal(cache.memory_k, caches[0].memory_k)
        np.testing.assert_array_equal(cache.memory_v, caches[0].memory_v)

    # The cache holds exactly the per-head projections K_i = s W_iᴷ + b_iᴷ, s the self-attention's
    # input (y for post-LN, LN₁(y) for pre-LN), and the memory's cross-attention projections.
    sa, ca, last = dec_params.self_attn, dec_params.cross_attn, caches[-1]
    s = ln(y, dec_params.norm_1) if norm_first else y
    for i in range(H):
        cols = slice(i * d_k, (i + 1) * d_k)
        np.testing.assert_allclose(last.k[:, i], s @ sa.w_k[:, cols] + sa.b_k[cols], **TOL)
        np.testing.assert_allclose(last.v[:, i], s @ sa.w_v[:, cols] + sa.b_v[cols], **TOL)
        np.testing.assert_allclose(last.memory_k[:, i], memory @ ca.w_k[:, cols] + ca.b_k[cols], **TOL)
        np.testing.assert_allclose(last.memory_v[:, i], memory @ ca.w_v[:, cols] + ca.b_v[cols], **TOL)


def test_step_unbatched_and_without_mask(rng, dec_params):
    n, m = 4, 6
    y, memory = rng.standard_normal((n, D_MODEL)), rng.standard_normal((m, D_MODEL))
    full = decoder_layer(y, memory, dec_params, num_heads=H)
    stepped, caches = run_steps(y, memory, dec_params, [1, 2, 1], None, False)
    np.testing.assert_allclose(stepped, full, **TOL)
    assert caches[-1].k.shape == (H, n, D_MODEL // H)


def test_step_memory_mask_matters(rng, dec_params):
    # guard against a step function that ignores memory_mask: padding keys must be masked
    y, memory = rng.standard_normal((1, 2, D_MODEL)), rng.standard_normal((1, 5, D_MODEL))
    masked, _ = decoder_layer_step(y, memory, dec_params, None, num_heads=H, memory_mask=padding([2], 5))
    unmasked, _ = decoder_layer_step(y, memory, dec_params, None, num_heads=H)
    assert np.abs(masked - unmasked).max() > 1e-3
    memory2 = memory.copy()
    memory2[0, 2:] = rng.standard_normal((3, D_MODEL))
    masked2, _ = decoder_layer_step(y, memory2, dec_params, None, num_heads=H, memory_mask=padding([2], 5))
    np.testing.assert_array_equal(masked2, masked)


def test_step_does_not_modify_cache(rng, dec_params):
    y, memory = rng.standard_normal((3, D_MODEL)), rng.standard_normal((4, D_MODEL))
    _, cache = decoder_layer_step(y[:2], memory, dec_params, None, num_heads=H)
    before = {f.name: getattr(cache, f.name).copy() for f in dataclasses.fields(cache)}
    out_a, _ = decoder_layer_step(y[2:], memory, dec_params, cache, num_heads=H)
    out_b, _ = decoder_layer_step(y[2:], memory, dec_params, cache, num_heads=H)
    np.testing.assert_array_equal(out_a, out_b)
    for name, value in before.items():
        np.testing.assert_array_equal(getattr(cache, name), value, err_msg=name)


def test_init_layers_shapes_and_determinism():
    enc = init_encoder_layer(7, D_MODEL, H, D_FF)
    dec = init_decoder_layer(7, D_MODEL, H, D_FF)
    assert enc.self_attn.w_q.shape == (D_MODEL, D_MODEL) and enc.ffn.w_1.shape == (D_MODEL, D_FF)
    assert dec.cross_attn.w_o.shape == (D_MODEL, D_MODEL) and dec.ffn.w_2.shape == (D_FF, D_MODEL)
    for norm in (enc.norm_1, enc.norm_2, dec.norm_1, dec.norm_2, dec.norm_3):
        np.testing.assert_array_equal(norm.gamma, np.ones(D_MODEL))
        np.testing.assert_array_equal(norm.beta, np.zeros(D_MODEL))
    assert not np.array_equal(dec.self_attn.w_q, dec.cross_attn.w_q)
    again = init_decoder_layer(np.random.default_rng(7), D_MODEL, H, D_FF)
    np.testing.assert_array_equal(again.cross_attn.w_v, dec.cross_attn.w_v)
    np.testing.assert_array_equal(again.ffn.w_1, dec.ffn.w_1)


def test_bad_inputs(rng, enc_params, dec_params):
    x = rng.standard_normal((4, D_MODEL))
    with pytest.raises(TypeError, match=r"x must be a real floating-point array"):
        encoder_layer(np.ones((4, D_MODEL), dtype=int), enc_params, num_heads=H)
    with pytest.raises(ValueError, match=r"x must have at least 2 dimensions"):
        encoder_layer(x[0], enc_params, num_heads=H)
    with pytest.raises(ValueError, match=r"d_model=5"):
        encoder_layer(rng.standard_normal((4, 5)), enc_params, num_heads=H)
    with pytest.raises(TypeError, match=r"memory must be a real floating-point array"):
        decoder_layer(x, np.ones((3, D_MODEL), dtype=int), dec_params, num_heads=H)
    with pytest.raises(ValueError, match=r"x_kv has d_model=5"):
        decoder_layer(x, rng.standard_normal((3, 5)), dec_params, num_heads=H)
    with pytest.raises(TypeError, match=r"y_new must be a real floating-point array"):
        decoder_layer_step(np.ones((1, D_MODEL), dtype=int), x, dec_params, num_heads=H)


def test_step_bad_shapes_are_named(rng, dec_params):
    # The convention: shapes that do not fit get a ValueError naming the argument and the shapes seen,
    # not a NumPy matmul/concatenate error from deep inside.
    memory = rng.standard_normal((2, 3, D_MODEL))
    with pytest.raises(ValueError, match=r"y_new.*\(2, 1, 5\)"):
        decoder_layer_step(rng.standard_normal((2, 1, 5)), memory, dec_params, num_heads=H)
    with pytest.raises(ValueError, match=r"memory.*\(2, 3, 5\)"):
        decoder_layer_step(rng.standard_normal((2, 1, D_MODEL)), rng.standard_normal((2, 3, 5)), dec_params,
                           num_heads=H)
    _, cache = decoder_layer_step(rng.standard_normal((2, 1, D_MODEL)), memory, dec_params, num_heads=H)
    with pytest.raises(ValueError, match=r"cache"):
        decoder_layer_step(rng.standard_normal((3, 1, D_MODEL)), memory, dec_params, cache, num_heads=H)


def test_layers_return_the_weights_of_their_attentions(rng):
    # The returned weights are those of multi_head_attention applied to the layer's own inputs.
    enc = init_encoder_layer(rng, 16, 4, 32)
    x = rng.standard_normal((2, 5, 16))
    out, A = encoder_layer(x, enc, num_heads=4, return_weights=True)
    np.testing.assert_array_equal(out, encoder_layer(x, enc, num_heads=4))
    np.testing.assert_array_equal(A, multi_head_attention(x, x, enc.self_attn, num_heads=4, return_weights=True)[1])

    dec = init_decoder_layer(rng, 16, 4, 32)
    y, memory = rng.standard_normal((2, 6, 16)), rng.standard_normal((2, 9, 16))
    out, (A_self, A_cross) = decoder_layer(y, memory, dec, num_heads=4, return_weights=True)
    np.testing.assert_array_equal(out, decoder_layer(y, memory, dec, num_heads=4))
    np.testing.assert_array_equal(A_self, multi_head_attention(y, y, dec.self_attn, num_heads=4, causal=True,
                                                               return_weights=True)[1])
    y1 = layer_norm(y + multi_head_attention(y, y, dec.self_attn, num_heads=4, causal=True),
                    dec.norm_1.gamma, dec.norm_1.beta)
    np.testing.assert_array_equal(A_cross, multi_head_attention(y1, memory, dec.cross_attn, num_heads=4,
                                                                return_weights=True)[1])
    assert A_self.shape == (2, 4, 6, 6) and A_cross.shape == (2, 4, 6, 9)

    # One cached step at a time returns the rows of the full layer's weights.
    cache = None
    for t in range(6):
        _, cache, (s_t, c_t) = decoder_layer_step(y[:, t:t + 1], memory, dec, cache, num_heads=4,
                                                  return_weights=True)
        assert s_t.shape == (2, 4, 1, t + 1)
        np.testing.assert_allclose(s_t[..., 0, :], A_self[..., t, : t + 1], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(c_t[..., 0, :], A_cross[..., t, :], rtol=1e-12, atol=1e-12)
