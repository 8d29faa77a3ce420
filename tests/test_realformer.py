"""RealFormer: one layer is the vanilla layer, the residual scores in closed form, the natural function chained
layer by layer equals the registry's stack, causal rows, and bad input. The naive loop of tests/naive.py, the rule's
tests (tests/test_prior_lower_layer.py) and the registry-driven tests cover the rest."""
from __future__ import annotations

import numpy as np
import pytest

from refattn import encoder_layer, init_encoder_layer, registry, scaled_dot_product_attention
from refattn.prior import StackProjections, prior_encoder, realformer_attention, realformer_rules, realformer_stack

TIGHT = {"rtol": 1e-12, "atol": 1e-12}
RECORD = registry.get("realformer")


def _qkv(rng, n=5, m=7, d=4, d_v=3, batch=()):
    return (rng.standard_normal((*batch, n, d)), rng.standard_normal((*batch, m, d)),
            rng.standard_normal((*batch, m, d_v)))


def test_one_layer_is_the_vanilla_layer(rng):
    """No scores from below: softmax attention bit for bit; a one-layer encoder stack is encoder_layer."""
    q, k, v = _qkv(rng, batch=(2,))
    for causal in (False, True, "bottom-right"):
        out, combined, A = realformer_attention(q, k, v, causal=causal, return_weights=True)
        ref, A_ref = scaled_dot_product_attention(q, k, v, causal=causal, return_weights=True)
        np.testing.assert_array_equal(out, ref)
        np.testing.assert_array_equal(A, A_ref)
    params = [init_encoder_layer(rng, 8, 2, 16)]
    x = rng.standard_normal((6, 8))
    np.testing.assert_array_equal(prior_encoder(x, params, num_heads=2, rules=()).output,
                                  encoder_layer(x, params[0], num_heads=2))


def test_identity_projections_sum_the_same_scores(rng):
    """With W_q = W_k = I every layer's scores are S, so after L layers Â = L·S: sdpa with scale L/√d."""
    q, k, v = _qkv(rng)
    for L in (2, 4):
        eye = np.broadcast_to(np.eye(4), (L - 1, 4, 4)).copy()
        got = RECORD.apply(q, k, v, projections=StackProjections(eye, eye), return_weights=True)
        out, A = scaled_dot_product_attention(q, k, v, scale=L / 2.0, return_weights=True)
        np.testing.assert_allclose(got.output, out, **TIGHT)
        np.testing.assert_allclose(got.weights, A, **TIGHT)


def test_natural_function_chained_equals_the_registry_stack(rng):
    """realformer_attention layer by layer, each fed the map the one below returned, is the registry's stack."""
    q, k, v = _qkv(rng, batch=(2,))
    result = RECORD.apply(q, k, v, causal=True, rng=4, layers=3, return_weights=True, return_draws=True)
    P = result.draws["projections"]
    out, prev = realformer_attention(q, k, v, causal=True)
    for l in range(2):
        out, prev, A = realformer_attention(q @ P.w_q[l], k @ P.w_k[l], v, prev, causal=True, return_weights=True)
    np.testing.assert_array_equal(out, result.output)
    np.testing.assert_array_equal(A, result.weights)


def test_residual_scores_of_masked_pairs_pass_up_but_never_reach_a_row(rng):
    """Causal: the map passed up holds the hidden pairs' residual scores (the paper's Prev is the whole map), yet
    row i of every layer is unchanged when the keys after i change."""
    q, k, v = _qkv(rng, n=6, m=6)
    out1, prev = realformer_attention(q, k, v, causal=True)
    hidden = np.triu(np.ones((6, 6), dtype=bool), 1)
    assert np.all(prev[hidden] != 0)
    out2, _ = realformer_attention(2 * q, k, v, prev, causal=True)
    k2, v2 = k.copy(), v.copy()
    k2[4:], v2[4:] = np.nan, np.nan
    _, prev_b = realformer_attention(q, k2, v2, causal=True)
    out2_b, _ = realformer_attention(2 * q, k2, v2, prev_b, causal=True)
    np.testing.assert_array_equal(out2_b[:4], out2[:4])


def test_apply_defaults_and_bad_input(rng):
    q, k, v = _qkv(rng)
    result = RECORD.apply(q, k, v, rng=0, return_draws=True)
    assert result.draws["projections"].layers == 3                # the default depth
    P = result.draws["projections"]
    with pytest.raises(ValueError, match="layers=2 but the projections are for 3 layers"):
        RECORD.apply(q, k, v, projections=P, layers=2)
    with pytest.raises(TypeError, match="projections must be StackProjections"):
        RECORD.apply(q, k, v, projections=np.eye(4))
    with pytest.raises(ValueError, match="draws its projections from rng"):
        RECORD.apply(q, k, v)
    with pytest.raises(ValueError, match="layers"):
        RECORD.apply(q, k, v, rng=0, layers=0)
    assert realformer_rules(1) == ()


def test_the_record_is_the_public_stack(rng):
    """RECORD.apply is realformer_stack: the same output and weights, the projections drawn from the same rng."""
    q, k, v = _qkv(rng)
    got = RECORD.apply(q, k, v, causal=True, rng=4, layers=4, return_weights=True, return_draws=True)
    out, A = realformer_stack(q, k, v, causal=True, rng=4, layers=4, return_weights=True)
    np.testing.assert_array_equal(got.output, out)
    np.testing.assert_array_equal(got.weights, A)
    np.testing.assert_array_equal(realformer_stack(q, k, v, causal=True, projections=got.draws["projections"]), out)
