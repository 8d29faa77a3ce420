"""gMLP's spatial gating unit (Liu et al. 2021): the initialisation and its identity-gating bound, the weights that
reproduce the output, the causal form, aMLP's tiny attention, the natural function against the uniform apply."""
from __future__ import annotations

import math

import numpy as np
import pytest

from refattn import registry
from refattn.beyond import GMLP_INIT_EPS, SpatialGatingParams, init_spatial_gating, spatial_gating_unit

TIGHT = {"rtol": 1e-12, "atol": 1e-12}
GMLP = registry.get("gmlp")


def _layer_norm(x, eps=1e-5):
    """(x − μ)/√(σ² + ε) over the last axis, written out here (no refattn code)."""
    mu = x.sum(axis=-1, keepdims=True) / x.shape[-1]
    return (x - mu) / np.sqrt(((x - mu) ** 2).sum(axis=-1, keepdims=True) / x.shape[-1] + eps)


def _params(rng, L):
    return SpatialGatingParams(rng.standard_normal((L, L)), rng.standard_normal(L))


def test_initialisation_is_w_near_zero_and_b_one():
    p = init_spatial_gating(0, 8)
    assert p.W.shape == (8, 8) and p.length == 8
    np.testing.assert_array_equal(p.b, np.ones(8))
    assert np.abs(p.W).max() <= GMLP_INIT_EPS / 8
    assert np.abs(p.W).max() > 0.9 * GMLP_INIT_EPS / 8           # the whole range is used, not a smaller one
    assert np.abs(init_spatial_gating(0, 8, init_eps=0.5).W).max() <= 0.5 / 8


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize(("n", "e"), [(3, 2), (16, 4), (40, 9)])
def test_at_initialisation_the_unit_is_identity_gating_within_the_stated_bound(seed, n, e):
    """|s(Z) − Z₁| <= ε·√(e − 1)·|Z₁| entry by entry: |W_ij| <= ε/ℓ, b = 1, |LayerNorm(Z₂)_jc| <= √(e − 1), at
    most ℓ terms."""
    z = np.random.default_rng(seed).standard_normal((2, n, 2 * e)) * 3.0
    s = spatial_gating_unit(z, rng=seed)
    z1 = z[..., :e]
    bound = GMLP_INIT_EPS * math.sqrt(e - 1) * np.abs(z1)
    assert np.all(np.abs(s - z1) <= bound)
    assert np.abs(s - z1).max() > 0                                # close to, not equal to, the identity


def test_the_identity_gating_bound_is_attained_at_the_extreme_of_the_initial_range():
    """W = ε/ℓ everywhere and every Z₂ row (1, 0, …, 0): LayerNorm gives √(e − 1) in channel 0 (up to the norm's
    ε), so s − Z₁ = ε·√(e − 1)·Z₁ there, the bound itself (ratio 1 − O(ε_LN))."""
    n, e = 6, 5
    p = SpatialGatingParams(np.full((n, n), GMLP_INIT_EPS / n), np.ones(n))
    z1 = np.random.default_rng(0).standard_normal((n, e))
    z2 = np.zeros((n, e))
    z2[:, 0] = 1.0
    s = spatial_gating_unit(np.concatenate([z1, z2], axis=-1), params=p)
    ratio = (s[:, 0] - z1[:, 0]) / (GMLP_INIT_EPS * math.sqrt(e - 1) * z1[:, 0])
    np.testing.assert_allclose(ratio, 1.0, rtol=0, atol=1e-4)     # √(σ²/(σ² + 1e-5)), σ² = (e − 1)/e²: 1 − 3.2e-5


@pytest.mark.parametrize("causal", [False, True, "bottom-right"])
@pytest.mark.parametrize("options", [{}, {"tiny_attention": True}, {"norm": False},
                                     {"tiny_attention": True, "norm": False, "scale": 0.4}])
def test_weights_reproduce_the_output(causal, options):
    """out = q ⊙ (M v̂ + b_{p_i}), M the returned weights (W, plus softmax(q kᵀ·scale) with the tiny attention)."""
    rng = np.random.default_rng(1)
    n, m = (4, 6) if causal == "bottom-right" else (6, 6)
    q, k, v = rng.standard_normal((n, 5)), rng.standard_normal((m, 5)), rng.standard_normal((m, 5))
    p = _params(rng, m + 1)
    result = GMLP.apply(q, k, v, causal=causal, params=p, return_weights=True, **options)
    v_hat = _layer_norm(v) if options.get("norm", True) else v
    rows = np.arange(n) + (m - n if causal == "bottom-right" else 0)
    np.testing.assert_allclose(result.output, q * (result.weights @ v_hat + p.b[rows, None]), **TIGHT)
    W = p.W[rows, :m]
    allowed = np.arange(m)[None, :] <= rows[:, None] if causal is not False else np.ones((n, m), dtype=bool)
    W = np.where(allowed, W, 0.0)
    if causal is not False:
        np.testing.assert_array_equal(result.allowed, allowed)
    if options.get("tiny_attention"):
        S = np.where(allowed, q @ k.T * options.get("scale", 1 / math.sqrt(5)), -np.inf)
        A = np.exp(S - S.max(axis=-1, keepdims=True))
        W = W + A / A.sum(axis=-1, keepdims=True)
    np.testing.assert_allclose(result.weights, W, **TIGHT)


def test_causal_form_ignores_w_above_the_diagonal():
    rng = np.random.default_rng(2)
    q, v = rng.standard_normal((2, 5, 3))
    p = _params(rng, 5)
    upper = SpatialGatingParams(p.W + np.triu(rng.standard_normal((5, 5)), 1), p.b)
    out = GMLP.apply(q, q, v, causal=True, params=p).output
    np.testing.assert_array_equal(GMLP.apply(q, q, v, causal=True, params=upper).output, out)
    assert not np.allclose(GMLP.apply(q, q, v, params=upper).output, GMLP.apply(q, q, v, params=p).output,
                           rtol=0, atol=1e-6)


def test_natural_function_on_z_equals_the_uniform_apply_on_its_halves():
    """spatial_gating_unit([Z₁, Z₂]) = apply(q = Z₁, k, v = Z₂); gate_res = the tiny attention's output gives aMLP."""
    rng = np.random.default_rng(3)
    z = rng.standard_normal((2, 7, 8))
    k = rng.standard_normal((2, 7, 4))
    p = _params(rng, 9)
    for causal in (False, True):
        s, W = spatial_gating_unit(z, params=p, causal=causal, return_weights=True)
        result = GMLP.apply(z[..., :4], k, z[..., 4:], causal=causal, params=p, return_weights=True)
        np.testing.assert_allclose(s, result.output, **TIGHT)
        np.testing.assert_allclose(np.broadcast_to(W, (2, 7, 7)), result.weights, **TIGHT)
        tiny = GMLP.apply(z[..., :4], k, z[..., 4:], causal=causal, params=p, tiny_attention=True,
                          return_weights=True)
        gate_res = (tiny.weights - W) @ _layer_norm(z[..., 4:])    # A v̂, the tiny attention's output
        np.testing.assert_allclose(spatial_gating_unit(z, params=p, causal=causal, gate_res=gate_res), tiny.output,
                                   **TIGHT)


def test_a_query_before_the_first_key_is_a_zero_row():
    rng = np.random.default_rng(4)
    q, k, v = rng.standard_normal((6, 3)), rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
    result = GMLP.apply(q, k, v, causal="bottom-right", rng=0, tiny_attention=True, return_weights=True)
    np.testing.assert_array_equal(result.output[:2], 0.0)
    np.testing.assert_array_equal(result.weights[:2], 0.0)
    assert np.all(result.output[2:] != 0)


def test_bad_input_is_refused_with_the_argument_named():
    rng = np.random.default_rng(5)
    q, v = rng.standard_normal((5, 4)), rng.standard_normal((5, 4))
    with pytest.raises(ValueError, match=r"q and v must have the same width, got q shape \(5, 3\), v shape \(5, 4\)"):
        GMLP.apply(q[:, :3], q[:, :3], v)
    with pytest.raises(ValueError, match=r"same length n = m \(or causal='bottom-right'\), got q shape \(4, 4\)"):
        GMLP.apply(q[:4], q, v, causal=True)
    with pytest.raises(ValueError, match="params cover ℓ = 3 positions but the sequence has m = 5"):
        GMLP.apply(q, q, v, params=init_spatial_gating(0, 3))
    with pytest.raises(ValueError, match=r"W \(ℓ, ℓ\) and b \(ℓ,\), got W shape \(5, 5\), b shape \(4,\)"):
        GMLP.apply(q, q, v, params=SpatialGatingParams(np.zeros((5, 5)), np.ones(4)))
    with pytest.raises(TypeError, match="params must be SpatialGatingParams"):
        GMLP.apply(q, q, v, params=np.zeros((5, 5)))
    with pytest.raises(ValueError, match="even number of channels"):
        spatial_gating_unit(np.ones((4, 5)), rng=0)
    with pytest.raises(ValueError, match=r"^gmlp draws its spatial projection from rng: pass rng= "
                                         r"\(or params=\)$"):
        spatial_gating_unit(np.ones((4, 6)))
    with pytest.raises(ValueError, match="gate_res must broadcast"):
        spatial_gating_unit(np.ones((4, 6)), rng=0, gate_res=np.ones((4, 2)))
    with pytest.raises(ValueError, match="init_eps must be >= 0"):
        init_spatial_gating(0, 3, init_eps=-1.0)


def test_given_params_leave_rng_unused():
    z = np.random.default_rng(3).standard_normal((4, 6))
    params = init_spatial_gating(9, 4)
    np.testing.assert_array_equal(spatial_gating_unit(z, params=params, rng=0), spatial_gating_unit(z, params=params))
