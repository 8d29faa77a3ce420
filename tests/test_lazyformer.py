"""Lazyformer: sharing off recomputes every layer, the weights are shared exactly within a block, a reusing layer
reads no queries or keys, the schedule, and bad input. The naive loop of tests/naive.py, the rule's tests
(tests/test_prior_lower_layer.py) and the registry-driven tests cover the rest."""
from __future__ import annotations

import numpy as np
import pytest

from refattn import registry, scaled_dot_product_attention
from refattn.prior import COMPUTE, REUSE, attention_stack, lazy_rules, lazyformer_attention

TIGHT = {"rtol": 1e-12, "atol": 1e-12}
RECORD = registry.get("lazyformer")


def _qkv(rng, n=5, m=7, d=4, d_v=3, batch=()):
    return (rng.standard_normal((*batch, n, d)), rng.standard_normal((*batch, m, d)),
            rng.standard_normal((*batch, m, d_v)))


def test_schedule():
    assert lazy_rules(1, 2) == ()
    assert lazy_rules(6, 2) == (REUSE, COMPUTE, REUSE, COMPUTE, REUSE)
    assert lazy_rules(6, 3) == (REUSE, REUSE, COMPUTE, REUSE, REUSE)
    assert lazy_rules(4, 1) == (COMPUTE,) * 3
    assert (COMPUTE.w1, COMPUTE.w2, REUSE.w1, REUSE.w2) == (1.0, 0.0, 0.0, 1.0)


@pytest.mark.parametrize("causal", [False, True])
def test_sharing_off_recomputes_every_layer(rng, causal):
    """Blocks of one layer: each layer computes its own map, so the top layer alone is softmax attention on its own
    queries and keys."""
    q, k, v = _qkv(rng, batch=(2,), m=5 if causal else 7)
    result = RECORD.apply(q, k, v, causal=causal, rng=1, block=1, return_weights=True, return_draws=True)
    P = result.draws["projections"]
    out, A = scaled_dot_product_attention(q @ P.w_q[-1], k @ P.w_k[-1], v, causal=causal, return_weights=True)
    np.testing.assert_array_equal(result.output, out)
    np.testing.assert_array_equal(result.weights, A)


def test_weights_are_shared_exactly_within_a_block(rng):
    q, k, v = _qkv(rng)
    result = RECORD.apply(q, k, v, rng=2, layers=6, block=3, return_draws=True)
    trace = attention_stack(q, k, v, rules=lazy_rules(6, 3), projections=result.draws["projections"])
    for l in (1, 2, 4, 5):
        np.testing.assert_array_equal(trace.weights[l], trace.weights[l - 1])
        assert trace.scores[l] is None
    assert not np.allclose(trace.weights[3], trace.weights[2])
    np.testing.assert_array_equal(result.output, trace.output)


def test_one_block_over_every_layer_is_softmax_attention(rng):
    """Every layer reuses the bottom layer's map, whatever the projections above: sdpa bit for bit."""
    q, k, v = _qkv(rng)
    for causal in (False, True):
        got = RECORD.apply(q, k[:5], v[:5], causal=causal, rng=3, layers=5, block=5).output
        np.testing.assert_array_equal(got, scaled_dot_product_attention(q, k[:5], v[:5], causal=causal))


def test_a_reusing_layer_reads_no_queries_or_keys(rng):
    """The natural function: the block's first layer computes, the next takes its map and its own values only."""
    q, k, v = _qkv(rng)
    v2 = rng.standard_normal((7, 2))
    out1, shared, A1 = lazyformer_attention(q, k, v, causal="bottom-right", return_weights=True)
    out2, passed, A2 = lazyformer_attention(None, None, v2, shared, causal="bottom-right", return_weights=True)
    np.testing.assert_array_equal(A2, A1)
    np.testing.assert_array_equal(passed, shared)
    np.testing.assert_allclose(out2, A1 @ v2, **TIGHT)


def test_bad_input(rng):
    q, k, v = _qkv(rng)
    with pytest.raises(ValueError, match="block"):
        RECORD.apply(q, k, v, rng=0, block=0)
    with pytest.raises(ValueError, match="block must be a positive int, got 1.5"):
        lazy_rules(3, 1.5)
