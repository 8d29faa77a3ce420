"""Predictive Attention: the convolution against scipy and a loop over heads and taps, α = 1 is the vanilla stack, the
rule reproduces the layer, heads as channels in the encoder stack, the official code's "evolving" form, no causal
form, and bad input. The naive loop of tests/naive.py and the registry-driven tests cover the rest."""
from __future__ import annotations

import functools

import numpy as np
import pytest
from scipy.signal import correlate2d

from refattn import encoder_layer, init_encoder_layer, registry, scaled_dot_product_attention
from refattn.prior import (
    AttentionConv,
    attention_convolution,
    evolving_logits,
    init_attention_conv,
    predictive_attention,
    predictive_rules,
    prior_encoder,
    prior_from_below,
)

TIGHT = {"rtol": 1e-12, "atol": 1e-12}
RECORD = registry.get("predictive_attention")


def _qkv(rng, n=5, m=7, d=4, d_v=3, batch=()):
    return (rng.standard_normal((*batch, n, d)), rng.standard_normal((*batch, m, d)),
            rng.standard_normal((*batch, m, d_v)))


def _conv_by_scipy(A, conv, relu=True):
    """Σ_c correlate2d(A_c, K_oc, "same") + b_o per output head o (scipy's zero-padded cross-correlation)."""
    out = np.stack([conv.bias[o] + sum(correlate2d(A[c], conv.kernel[o, c], mode="same")
                                       for c in range(conv.channels)) for o in range(conv.channels)])
    return np.maximum(out, 0.0) if relu else out


# --- the convolution g ------------------------------------------------------------------------------------

def test_convolution_mixes_heads_as_channels(rng):
    """Three heads, a 3 × 3 and a 5 × 3 kernel, n != m: against scipy's same-size cross-correlation."""
    A = rng.standard_normal((2, 3, 6, 8))
    for shape in ((3, 3, 3, 3), (3, 3, 5, 3)):
        conv = AttentionConv(rng.standard_normal(shape), rng.standard_normal(3))
        got = attention_convolution(A, conv, activation="none")
        for b in range(2):
            np.testing.assert_allclose(got[b], _conv_by_scipy(A[b], conv, relu=False), **TIGHT)
        np.testing.assert_allclose(attention_convolution(A, conv)[1], _conv_by_scipy(A[1], conv), **TIGHT)


def test_convolution_of_one_channel_takes_maps_without_a_channel_axis(rng):
    A = rng.standard_normal((4, 5, 6))                             # four separate maps
    conv = init_attention_conv(3)
    got = attention_convolution(A, conv)
    assert got.shape == (4, 5, 6)
    for b in range(4):
        np.testing.assert_allclose(got[b], _conv_by_scipy(A[b][None], conv)[0], **TIGHT)


def test_convolution_draw():
    """PyTorch's nn.Conv2d default: U(±1/√(h k²)), kernel first then bias."""
    conv = init_attention_conv(0, num_heads=2)
    rng = np.random.default_rng(0)
    bound = 1 / np.sqrt(18)
    np.testing.assert_array_equal(conv.kernel, rng.uniform(-bound, bound, size=(2, 2, 3, 3)))
    np.testing.assert_array_equal(conv.bias, rng.uniform(-bound, bound, size=2))


# --- the layer and the stack -----------------------------------------------------------------------------

def test_rule_reproduces_the_layer(rng):
    """prior_from_below with (α, 1 − α, g = the convolution) is the layer's map: α S + (1 − α) ReLU(conv(Â below))
    written out with scipy, and its weights the softmax of that."""
    q, k, v = _qkv(rng, batch=(2,))
    below = rng.standard_normal((2, 5, 7))
    conv = init_attention_conv(1, num_heads=2)
    out, combined, A = predictive_attention(q, k, v, below, conv=conv, alpha=0.3, return_weights=True)
    S = q @ k.transpose(0, 2, 1) / 2.0
    expected = 0.3 * S + 0.7 * _conv_by_scipy(below, conv)
    np.testing.assert_allclose(combined, expected, **TIGHT)
    g = functools.partial(attention_convolution, conv=conv)
    np.testing.assert_allclose(prior_from_below(S, below, w1=0.3, w2=0.7, g=g), expected, **TIGHT)
    E = np.exp(expected - expected.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(A, E / E.sum(axis=-1, keepdims=True), **TIGHT)
    np.testing.assert_allclose(out, A @ v, **TIGHT)


def test_alpha_one_is_the_vanilla_stack(rng):
    """α = 1 leaves every layer its own scores: the top layer alone (registry stack), encoder_layer stacked."""
    q, k, v = _qkv(rng)
    result = RECORD.apply(q, k, v, rng=5, alpha=1.0, return_weights=True, return_draws=True)
    P = result.draws["projections"]
    out, A = scaled_dot_product_attention(q @ P.w_q[-1], k @ P.w_k[-1], v, return_weights=True)
    np.testing.assert_allclose(result.output, out, **TIGHT)
    np.testing.assert_allclose(result.weights, A, **TIGHT)
    params = [init_encoder_layer(rng, 8, 2, 16) for _ in range(3)]
    x = rng.standard_normal((6, 8))
    convs = [init_attention_conv(rng, 2) for _ in range(2)]
    y = x
    for p in params:
        y = encoder_layer(y, p, num_heads=2)
    np.testing.assert_allclose(prior_encoder(x, params, num_heads=2, rules=predictive_rules(1.0, convs)).output, y,
                               **TIGHT)


def test_one_layer_is_softmax_attention(rng):
    q, k, v = _qkv(rng)
    out, logits = predictive_attention(q, k, v)
    np.testing.assert_array_equal(out, scaled_dot_product_attention(q, k, v))
    np.testing.assert_array_equal(logits, q @ k.T / 2.0)


def test_encoder_heads_are_the_channels(rng):
    """In the encoder stack each layer's prior is (1 − α) ReLU(conv(Â below)) over all h heads at once."""
    params = [init_encoder_layer(rng, 8, 2, 16) for _ in range(3)]
    x = rng.standard_normal((6, 8))
    convs = [init_attention_conv(rng, 2) for _ in range(2)]
    trace = prior_encoder(x, params, num_heads=2, rules=predictive_rules(0.6, convs))
    for l in (1, 2):
        np.testing.assert_allclose(trace.priors[l], 0.4 * _conv_by_scipy(trace.combined[l - 1], convs[l - 1]),
                                   **TIGHT)
        np.testing.assert_allclose(trace.combined[l], 0.6 * trace.scores[l] + trace.priors[l], **TIGHT)


def test_registry_stack_with_heads_as_channels(rng):
    q, k, v = _qkv(rng, batch=(2, 3))
    result = RECORD.apply(q, k, v, rng=1, num_heads=3, return_draws=True)
    assert all(c.kernel.shape == (3, 3, 3, 3) for c in result.draws["convs"])
    with pytest.raises(ValueError, match="num_heads=2 needs the heads on axis −3"):
        RECORD.apply(q, k, v, rng=1, num_heads=2)


# --- the official code's form ----------------------------------------------------------------------------

def test_evolving_form_is_the_official_codes(rng):
    """M = (1 − β) S + β Â below; Â = α ReLU(conv(M)) + (1 − α) M, written out; α = β = 0 is softmax attention."""
    q, k, v = _qkv(rng, batch=(2,))
    below = rng.standard_normal((2, 5, 7))
    conv = init_attention_conv(2, num_heads=2)
    out, combined, A = predictive_attention(q, k, v, below, conv=conv, alpha=0.4, beta=0.3, form="evolving",
                                            return_weights=True)
    M = 0.7 * (q @ k.transpose(0, 2, 1) / 2.0) + 0.3 * below
    np.testing.assert_allclose(combined, 0.4 * _conv_by_scipy(M, conv) + 0.6 * M, **TIGHT)
    np.testing.assert_allclose(out, A @ v, **TIGHT)
    plain = predictive_attention(q, k, v, below, conv=conv, alpha=0.0, beta=0.0, form="evolving")[0]
    np.testing.assert_allclose(plain, scaled_dot_product_attention(q, k, v), **TIGHT)
    np.testing.assert_allclose(evolving_logits(q, k, below, conv=conv, alpha=0.4, beta=0.3), combined, **TIGHT)


# --- no causal form, bad input ----------------------------------------------------------------------------

def test_no_causal_form(rng):
    q, k, v = _qkv(rng)
    with pytest.raises(ValueError, match="no causal form .*next query's scores"):
        predictive_attention(q, k, v, causal=True)
    with pytest.raises(ValueError, match="takes causal in"):
        RECORD.apply(q, k, v, rng=0, causal=True)


def test_bad_input(rng):
    q, k, v = _qkv(rng)
    conv = init_attention_conv(0)
    with pytest.raises(ValueError, match="alpha must be in"):
        predictive_attention(q, k, v, alpha=1.5)
    with pytest.raises(TypeError, match="needs conv="):
        predictive_attention(q, k, v, np.zeros((5, 7)))
    with pytest.raises(ValueError, match="form"):
        predictive_attention(q, k, v, form="official")
    with pytest.raises(ValueError, match="kernel sizes must be odd"):
        AttentionConv(np.ones((1, 1, 2, 3)), np.zeros(1))
    with pytest.raises(ValueError, match=r"bias must be a float array of shape \(1,\)"):
        AttentionConv(np.ones((1, 1, 3, 3)), np.zeros(2))
    with pytest.raises(ValueError, match=r"A must have shape \(..., h=2, n, m\)"):
        attention_convolution(np.zeros((3, 5, 5)), init_attention_conv(0, num_heads=2))
    with pytest.raises(ValueError, match="activation"):
        attention_convolution(np.zeros((5, 5)), conv, activation="gelu")
    with pytest.raises(ValueError, match="1 convolutions for 3 layers"):
        RECORD.apply(q, k, v, rng=0, layers=3, convs=(conv,))
    with pytest.raises(TypeError, match="convs must be a tuple of AttentionConv"):
        RECORD.apply(q, k, v, rng=0, convs=[conv, conv])
    with pytest.raises(ValueError, match="kernel_size must be odd"):
        init_attention_conv(0, kernel_size=4)
