"""KERPLE: the log and power biases at hand-computed values, the paper's constraints, r1 = 0 is sdpa, the power
kernel at r2 = 1 is a linear (ALiBi-like) bias, per-head parameters, the causal form."""
from __future__ import annotations

import math

import numpy as np
import pytest

from refattn import registry, scaled_dot_product_attention
from refattn.positional import KerpleParams, init_kerple, kerple_attention, kerple_bias

TIGHT = {"rtol": 1e-12, "atol": 1e-12}
APPLY = registry.get("kerple").apply


def test_biases_at_hand_computed_values():
    """Query 0 of 1 at position 3 (bottom-right, m = 4): distances 3, 2, 1, 0."""
    log = kerple_bias(KerpleParams(0.5, 2.0), 1, 4, causal="bottom-right")
    np.testing.assert_allclose(log, [[-0.5 * math.log(7), -0.5 * math.log(5), -0.5 * math.log(3), 0.0]], **TIGHT)
    power = kerple_bias(KerpleParams(0.5, 1.5), 1, 4, kind="power", causal="bottom-right")
    np.testing.assert_allclose(power, [[-0.5 * 3 * math.sqrt(3), -0.5 * 2 * math.sqrt(2), -0.5, 0.0]], **TIGHT)
    sym = kerple_bias(KerpleParams(1.0, 1.0), 3, 3, kind="power")
    np.testing.assert_array_equal(sym, [[0, -1, -2], [-1, 0, -1], [-2, -1, 0]])


def test_per_head_parameters_give_one_bias_per_head():
    params = KerpleParams([1.0, 2.0], [1.0, 0.5])
    B = kerple_bias(params, 2, 3)
    assert B.shape == (2, 2, 3)
    np.testing.assert_allclose(B[1, 0], [0.0, -2 * math.log(1.5), -2 * math.log(2.0)], **TIGHT)


@pytest.mark.parametrize("kind", ["log", "power"])
@pytest.mark.parametrize("causal", [False, True, "bottom-right"])
@pytest.mark.parametrize(("n", "m"), [(5, 8), (8, 5)])
def test_r1_zero_is_sdpa(rng, kind, causal, n, m):
    q, k, v = rng.standard_normal((2, 3, n, 4)), rng.standard_normal((2, 3, m, 4)), rng.standard_normal((2, 3, m, 2))
    params = KerpleParams(np.zeros(3), rng.uniform(0.1, 2.0, 3))
    expected, A = scaled_dot_product_attention(q, k, v, causal=causal, return_weights=True)
    got = APPLY(q, k, v, causal=causal, params=params, kind=kind, return_weights=True)
    np.testing.assert_allclose(got.output, expected, **TIGHT)
    np.testing.assert_allclose(got.weights, A, **TIGHT)


@pytest.mark.parametrize("causal", [False, True, "bottom-right"])
def test_power_two_one_is_a_linear_bias_written_out_as_a_float_mask(rng, causal):
    """−r1|i − j|^1 is ALiBi's linear bias with slope r1: sdpa with the bias written out by a loop."""
    n, m, r1 = 6, 9, 0.375
    offset = m - n if causal == "bottom-right" else 0
    bias = np.array([[-r1 * abs(i + offset - j) for j in range(m)] for i in range(n)])
    q, k, v = rng.standard_normal((n, 4)), rng.standard_normal((m, 4)), rng.standard_normal((m, 3))
    got = kerple_attention(q, k, v, params=KerpleParams(r1, 1.0), kind="power", causal=causal, return_weights=True)
    expected = scaled_dot_product_attention(q, k, v, bias, causal=causal, return_weights=True)
    np.testing.assert_allclose(got[0], expected[0], **TIGHT)
    np.testing.assert_allclose(got[1], expected[1], **TIGHT)


@pytest.mark.parametrize("kind", ["log", "power"])
def test_heads_each_use_their_pair(rng, kind):
    h, n = 3, 7
    q, k, v = (rng.standard_normal((2, h, n, 4)) for _ in range(3))
    params = init_kerple(rng, num_heads=h)
    out = kerple_attention(q, k, v, params=params, kind=kind, causal=True)
    for head in range(h):
        one = KerpleParams(params.r1[head], params.r2[head])
        np.testing.assert_allclose(out[:, head], kerple_attention(q[:, head], k[:, head], v[:, head], params=one,
                                                                  kind=kind, causal=True), **TIGHT)


def test_weights_decay_with_distance_when_queries_and_keys_are_silent(rng):
    """q = 0: the weights are softmax of the bias alone, strictly decreasing as keys recede (r1, r2 > 0)."""
    n, v = 8, rng.standard_normal((8, 2))
    for kind, params in (("log", KerpleParams(1.3, 0.7)), ("power", KerpleParams(0.4, 1.8))):
        A = kerple_attention(np.zeros((n, 3)), np.zeros((n, 3)), v, params=params, kind=kind, causal=True,
                             return_weights=True)[1]
        assert np.all(np.diff(A[-1]) > 0)                         # the last query: weight grows towards j = i


def test_drawn_parameters_follow_the_authors_initialisation():
    params = init_kerple(np.random.default_rng(4), num_heads=64)
    assert params.r1.shape == params.r2.shape == (64,)
    assert np.all((0 < params.r1) & (params.r1 < 2)) and params.r1.max() > 1.5
    assert np.all((0 < params.r2) & (params.r2 < 1))
    assert init_kerple(0).r1.shape == ()


def test_the_paper_s_constraints_are_enforced(rng):
    q = rng.standard_normal((5, 4))
    with pytest.raises(ValueError, match="r2 ≤ 2"):
        kerple_attention(q, q, q, params=KerpleParams(1.0, 2.5), kind="power")
    kerple_attention(q, q, q, params=KerpleParams(1.0, 2.5), kind="log")     # log: any r2 > 0
    kerple_attention(q, q, q, params=KerpleParams(1.0, 2.0), kind="power")   # r2 = 2 is allowed
    with pytest.raises(ValueError, match="r2"):
        KerpleParams(1.0, 0.0)
    with pytest.raises(ValueError, match="r1"):
        KerpleParams(-0.1, 1.0)
    with pytest.raises(ValueError, match="r1"):
        KerpleParams(np.inf, 1.0)
    with pytest.raises(ValueError, match="same shape"):
        KerpleParams([1.0, 2.0], 1.0)
    with pytest.raises(ValueError, match="kind"):
        kerple_attention(q, q, q, params=KerpleParams(1.0, 1.0), kind="cubic")
    with pytest.raises(TypeError, match="KerpleParams"):
        kerple_attention(q, q, q, params=(1.0, 1.0))
    with pytest.raises(ValueError, match=r"params heads \(3,\)"):
        APPLY(rng.standard_normal((2, 5, 4)), rng.standard_normal((2, 5, 4)), rng.standard_normal((2, 5, 4)),
              params=KerpleParams(np.ones(3), np.ones(3)))


def test_a_missing_rng_gets_the_one_message_from_the_function_and_the_record(rng):
    q = rng.standard_normal((5, 4))
    for call in (kerple_attention, APPLY):
        with pytest.raises(ValueError, match=r"^kerple draws r1 and r2 from rng: pass rng= \(or params=\)$"):
            call(q, q, q)


def test_variant_is_the_deprecated_name_of_kind(rng):
    q, k, v = rng.standard_normal((3, 5, 4))
    params = KerpleParams(0.5, 1.5)
    with pytest.warns(DeprecationWarning, match=r"kerple_attention: option variant= is renamed kind="):
        old = kerple_attention(q, k, v, params=params, variant="power")
    np.testing.assert_array_equal(old, kerple_attention(q, k, v, params=params, kind="power"))
    with pytest.warns(DeprecationWarning, match=r"kerple: option variant= is renamed kind="):
        old = APPLY(q, k, v, params=params, variant="power")
    np.testing.assert_array_equal(old.output, APPLY(q, k, v, params=params, kind="power").output)
