"""The survey's rule for priors from lower layers (§4.5.2): the rule itself, one layer under it, the attention-only
stack of the registry entries, and the encoder stack (plain encoder layers when the rule is off; each instance's
structure layer by layer). RealFormer, Lazyformer and Predictive Attention have their own files."""
from __future__ import annotations

import math

import numpy as np
import pytest

from refattn import encoder_layer, init_encoder_layer, scaled_dot_product_attention
from refattn.prior import (
    LayerRule,
    StackProjections,
    attention_stack,
    attention_with_prior_from_below,
    init_stack_projections,
    lazy_rules,
    prior_encoder,
    prior_from_below,
    realformer_rules,
)

TIGHT = {"rtol": 1e-12, "atol": 1e-12}


def _softmax_rows(S, allowed=None):
    """exp(S − max) / Σ over the allowed entries of each row, by numpy (independent of refattn's softmax)."""
    S = np.where(allowed, S, -np.inf) if allowed is not None else S
    E = np.exp(S - S.max(axis=-1, keepdims=True))
    return E / E.sum(axis=-1, keepdims=True)


# --- the rule ----------------------------------------------------------------------------------------

def test_rule_hand_computed():
    """2·(1, 2) + 0.5·(4, −2) = (4, 3); the identity g; a g that doubles: 2·(1, 2) + 0.5·(8, −4) = (6, 2)."""
    S, below = np.array([[1.0, 2.0]]), np.array([[4.0, -2.0]])
    np.testing.assert_array_equal(prior_from_below(S, below, w1=2.0, w2=0.5), [[4.0, 3.0]])
    np.testing.assert_array_equal(prior_from_below(S, below, w1=2.0, w2=0.5, g=lambda a: 2 * a), [[6.0, 2.0]])


def test_rule_bottom_layer_is_its_scores_whatever_the_weights():
    S = np.array([[1.0, -3.0]])
    for w1, w2 in ((1.0, 1.0), (0.0, 1.0), (0.3, 0.7)):
        np.testing.assert_array_equal(prior_from_below(S, None, w1=w1, w2=w2), S)


def test_rule_leaves_out_a_term_of_weight_zero():
    """A term of weight 0 is left out, not multiplied: a NaN or Inf in it does not become 0·∞ = NaN."""
    S, below = np.array([[1.0, 2.0]]), np.array([[np.inf, np.nan]])
    np.testing.assert_array_equal(prior_from_below(S, below, w1=1.0, w2=0.0), S)
    np.testing.assert_array_equal(prior_from_below(below, S, w1=0.0, w2=1.0), S)
    np.testing.assert_array_equal(prior_from_below(None, S, w1=0.0, w2=3.0), 3 * S)


def test_rule_reproduces_each_instance_from_its_weights(rng):
    """The rule with (w1, w2, g) = (1, 1, id) is RealFormer's residual; (1, 0) and (0, 1) are Lazyformer's computing
    and reusing layers; each against its paper's formula written out here."""
    S, below = rng.standard_normal((2, 3, 4, 5))
    np.testing.assert_array_equal(prior_from_below(S, below, w1=1.0, w2=1.0), S + below)      # RealFormer: S + Prev
    np.testing.assert_array_equal(prior_from_below(S, below, w1=1.0, w2=0.0), S)              # Lazyformer: compute
    np.testing.assert_array_equal(prior_from_below(S, below, w1=0.0, w2=1.0), below)          # Lazyformer: reuse
    alpha = 0.3                                                     # Predictive Attention's weights, g = a map
    np.testing.assert_allclose(prior_from_below(S, below, w1=alpha, w2=1 - alpha, g=np.tanh),
                               alpha * S + (1 - alpha) * np.tanh(below), **TIGHT)


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"w1": "1", "w2": 1.0}, TypeError, "w1"),
    ({"w1": 1.0, "w2": np.nan}, ValueError, "w2"),
    ({"w1": True, "w2": 1.0}, TypeError, "w1"),
    ({"w1": 1.0, "w2": 1.0, "g": 3}, TypeError, "g must be callable"),
    ({"w1": 1.0, "w2": 1.0, "g": lambda a: a[..., :-1]}, ValueError, r"g\(previous\) has shape \(2, 2\)"),
])
def test_rule_bad_input(kwargs, error, match):
    with pytest.raises(error, match=match):
        prior_from_below(np.ones((2, 3)), np.ones((2, 3)), **kwargs)


def test_rule_needs_scores_unless_w1_is_zero():
    with pytest.raises(ValueError, match="needs w1 = 0"):
        prior_from_below(None, np.ones((2, 3)), w1=0.5, w2=1.0)
    with pytest.raises(ValueError, match="bottom layer"):
        prior_from_below(None, None, w1=0.0, w2=1.0)


# --- one layer and the attention-only stack --------------------------------------------------------------

def test_one_layer_softmaxes_the_rule(rng):
    """softmax(w1·S + w2·g(Â below)) V, against numpy; the bottom layer is sdpa bit for bit."""
    q, k = rng.standard_normal((5, 4)), rng.standard_normal((7, 4))
    v, below = rng.standard_normal((7, 3)), rng.standard_normal((5, 7))
    bottom = attention_with_prior_from_below(q, k, v, return_weights=True)
    out, A = scaled_dot_product_attention(q, k, v, return_weights=True)
    np.testing.assert_array_equal(bottom.output, out)
    np.testing.assert_array_equal(bottom.weights, A)
    rule = LayerRule(0.6, 0.4, np.sin)
    layer = attention_with_prior_from_below(q, k, v, below, rule=rule, return_weights=True)
    S = q @ k.T / 2.0
    combined = 0.6 * S + 0.4 * np.sin(below)
    np.testing.assert_allclose(layer.combined, combined, **TIGHT)
    np.testing.assert_allclose(layer.prior, 0.4 * np.sin(below), **TIGHT)
    np.testing.assert_allclose(layer.weights, _softmax_rows(combined), **TIGHT)
    np.testing.assert_allclose(layer.output, _softmax_rows(combined) @ v, **TIGHT)


def test_masked_pairs_of_the_map_below_never_reach_a_row(rng):
    """NaN and ±Inf at the pairs a causal mask hides, in the map from below: the output is as with zeros there."""
    q, k, v = rng.standard_normal((3, 6, 4))
    below = rng.standard_normal((6, 6))
    hidden = np.triu(np.ones((6, 6), dtype=bool), 1)
    poisoned = below.copy()
    poisoned[hidden] = np.resize([np.nan, np.inf, -np.inf], hidden.sum())
    clean = attention_with_prior_from_below(q, k, v, np.where(hidden, 0.0, below), rule=LayerRule(1.0, 1.0),
                                            causal=True)
    dirty = attention_with_prior_from_below(q, k, v, poisoned, rule=LayerRule(1.0, 1.0), causal=True)
    np.testing.assert_array_equal(dirty.output, clean.output)


def test_layer_mask_is_by_selection_and_checked(rng):
    q, k, v = rng.standard_normal((3, 4, 4))
    mask = rng.random((4, 4)) < 0.6
    mask[:, 0] = True
    layer = attention_with_prior_from_below(q, k, v, rng.standard_normal((4, 4)), rule=LayerRule(1.0, 1.0),
                                            mask=mask, return_weights=True)
    np.testing.assert_array_equal(layer.weights[~mask], 0.0)
    np.testing.assert_allclose(layer.weights, _softmax_rows(layer.combined, mask), **TIGHT)
    with pytest.raises(TypeError, match="mask must be boolean"):
        attention_with_prior_from_below(q, k, v, mask=np.ones((4, 4)))
    with pytest.raises(ValueError, match=r"mask has shape \(3, 4\)"):
        attention_with_prior_from_below(q, k, v, mask=np.ones((3, 4), dtype=bool))
    with pytest.raises(TypeError, match="needs rule="):
        attention_with_prior_from_below(q, k, v, np.zeros((4, 4)))


def test_stack_of_one_layer_is_sdpa_and_draws_nothing(rng):
    q, k, v = rng.standard_normal((3, 2, 5, 4))
    P = init_stack_projections(0, 1, 4)
    assert P.w_q.shape == (0, 4, 4) and P.layers == 1
    trace = attention_stack(q, k, v, rules=(), projections=P, causal=True)
    np.testing.assert_array_equal(trace.output, scaled_dot_product_attention(q, k, v, causal=True))


def test_stack_layer_l_reads_its_projections(rng):
    """Layer l's scores are (q W_q⁽ˡ⁾)(k W_k⁽ˡ⁾)ᵀ/√d; with the rule off (w2 = 0) the top layer alone decides."""
    q, k, v = rng.standard_normal((5, 4)), rng.standard_normal((7, 4)), rng.standard_normal((7, 3))
    P = init_stack_projections(1, 3, 4)
    trace = attention_stack(q, k, v, rules=[LayerRule(1.0, 0.0)] * 2, projections=P)
    for l in (1, 2):
        np.testing.assert_allclose(trace.scores[l], (q @ P.w_q[l - 1]) @ (k @ P.w_k[l - 1]).T / 2.0, **TIGHT)
    np.testing.assert_allclose(trace.output, scaled_dot_product_attention(q @ P.w_q[1], k @ P.w_k[1], v), **TIGHT)


def test_stack_projections_draw_and_checks():
    P = init_stack_projections(5, 3, 4)
    bound = math.sqrt(6 / 8)
    assert P.w_q.shape == P.w_k.shape == (2, 4, 4) and np.abs(P.w_q).max() <= bound
    again = init_stack_projections(5, 3, 4)
    np.testing.assert_array_equal(again.w_k, P.w_k)
    with pytest.raises(ValueError, match=r"w_q must be a float array of shape \(layers − 1, d_k, d_k\)"):
        StackProjections(np.ones((2, 4, 3)), np.ones((2, 4, 3)))
    with pytest.raises(ValueError, match="w_q has shape"):
        StackProjections(np.ones((2, 4, 4)), np.ones((1, 4, 4)))
    q = np.ones((5, 4))
    with pytest.raises(ValueError, match="1 rules for 3 layers"):
        attention_stack(q, q, q, rules=[LayerRule(1.0, 1.0)], projections=P)
    with pytest.raises(ValueError, match=r"projections are \(4, 4\) but q and k have d_k=3"):
        attention_stack(q[:, :3], q[:, :3], q, rules=realformer_rules(3), projections=P)


# --- the encoder stack ---------------------------------------------------------------------------------

def _encoder(rng, layers=3, d_model=8, heads=2):
    return [init_encoder_layer(rng, d_model, heads, 16) for _ in range(layers)], rng.standard_normal((2, 6, d_model))


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_with_the_rule_off_is_the_stack_of_encoder_layers(rng, norm_first):
    """w2 = 0 in every layer (each layer its own scores): encoder_layer applied L times, the same params, 1e-12."""
    params, x = _encoder(rng)
    mask = rng.random((2, 6, 6)) < 0.7
    mask[..., 0] = True
    trace = prior_encoder(x, params, num_heads=2, rules=[LayerRule(1.0, 0.0)] * 2, mask=mask, norm_first=norm_first)
    y = x
    for l, p in enumerate(params):
        np.testing.assert_allclose(trace.inputs[l], y, **TIGHT)
        y, A = encoder_layer(y, p, num_heads=2, mask=mask, norm_first=norm_first, return_weights=True)
        np.testing.assert_allclose(trace.weights[l], A, **TIGHT)
    np.testing.assert_allclose(trace.output, y, **TIGHT)


def test_encoder_realformer_structure_layer_by_layer(rng):
    """Each layer's scores are its own heads' QKᵀ/√d_k on its input; the map passed up is the sum of every score
    below and its own; its weights are the softmax of that map."""
    params, x = _encoder(rng)
    trace = prior_encoder(x, params, num_heads=2, rules=realformer_rules(3))
    for l, p in enumerate(params):
        a, s = p.self_attn, trace.inputs[l]
        Q = (s @ a.w_q + a.b_q).reshape(2, 6, 2, 4).transpose(0, 2, 1, 3)   # (B, h, n, d_k)
        K = (s @ a.w_k + a.b_k).reshape(2, 6, 2, 4).transpose(0, 2, 1, 3)
        np.testing.assert_allclose(trace.scores[l], Q @ K.transpose(0, 1, 3, 2) / 2.0, **TIGHT)
        np.testing.assert_allclose(trace.combined[l], sum(trace.scores[: l + 1]), **TIGHT)
        np.testing.assert_allclose(trace.weights[l], _softmax_rows(trace.combined[l]), **TIGHT)
        if l:
            np.testing.assert_array_equal(trace.priors[l], trace.combined[l - 1])


def test_encoder_lazyformer_structure_layer_by_layer(rng):
    """Blocks of 2 over 5 layers: layers 1, 3, 5 compute; 2 and 4 reuse the weights below them exactly."""
    params, x = _encoder(rng, layers=5)
    trace = prior_encoder(x, params, num_heads=2, rules=lazy_rules(5, 2))
    for l in range(5):
        if l % 2:
            assert trace.scores[l] is None
            np.testing.assert_array_equal(trace.weights[l], trace.weights[l - 1])
        else:
            assert trace.priors[l] is None
            np.testing.assert_array_equal(trace.combined[l], trace.scores[l])
    assert not np.allclose(trace.weights[2], trace.weights[0])


def test_encoder_lazyformer_with_sharing_off_is_the_stack_of_encoder_layers(rng):
    params, x = _encoder(rng)
    trace = prior_encoder(x, params, num_heads=2, rules=lazy_rules(3, 1))
    y = x
    for p in params:
        y = encoder_layer(y, p, num_heads=2)
    np.testing.assert_allclose(trace.output, y, **TIGHT)


@pytest.mark.parametrize("rules", [realformer_rules(3), lazy_rules(3, 2)], ids=["realformer", "lazyformer"])
def test_causal_encoder_rows_ignore_later_tokens(rng, rules):
    """A causal (decoder-only) stack: rows 0-2 of every layer are unchanged when tokens 3… change."""
    params, x = _encoder(rng)
    trace = prior_encoder(x, params, num_heads=2, rules=rules, causal=True)
    x2 = x.copy()
    x2[:, 3:] = rng.standard_normal(x2[:, 3:].shape)
    again = prior_encoder(x2, params, num_heads=2, rules=rules, causal=True)
    np.testing.assert_array_equal(again.output[:, :3], trace.output[:, :3])
    for l in range(3):
        np.testing.assert_array_equal(again.weights[l][..., :3, :], trace.weights[l][..., :3, :])


def test_encoder_bad_input(rng):
    params, x = _encoder(rng)
    with pytest.raises(ValueError, match="rules must hold one LayerRule per layer above the bottom: 2 for 3"):
        prior_encoder(x, params, num_heads=2, rules=realformer_rules(2))
    with pytest.raises(TypeError, match="EncoderLayerParams"):
        prior_encoder(x, [], num_heads=2, rules=())
    with pytest.raises(ValueError, match="num_heads"):
        prior_encoder(x, params, num_heads=0, rules=realformer_rules(3))
