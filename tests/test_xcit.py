"""XCiT's cross-covariance attention: a d × d channel map whatever the number of tokens, the official code's
orientation and temperature, the paper's transposed form, normalisation along the tokens, heads, bad input."""
from __future__ import annotations

import math

import numpy as np
import pytest

from refattn import registry
from refattn.beyond import XCIT_EPS, XcitParams, cross_covariance_attention, init_xcit, normalize_tokens

TIGHT = {"rtol": 1e-12, "atol": 1e-12}
XCIT = registry.get("xcit")


def _qkv(rng, N, d=4, lead=()):
    return (rng.standard_normal((*lead, N, d)) for _ in range(3))


@pytest.mark.parametrize("N", [1, 3, 50, 400])
def test_the_map_is_d_by_d_whatever_the_number_of_tokens(rng, N):
    q, k, v = _qkv(rng, N, d=5)
    result = XCIT.apply(q, k, v, return_weights=True)
    assert result.weights.shape == (5, 5) and result.output.shape == (N, 5)
    np.testing.assert_allclose(result.weights.sum(axis=-1), 1.0, **TIGHT)
    np.testing.assert_allclose(result.output, v @ result.weights.T, **TIGHT)


def test_orthonormal_channels_give_the_closed_form():
    """q = k with orthogonal channels of norm 2: Q̂ᵀK̂ = I, so A = softmax(τ I): e^τ/(e^τ + d − 1) on the diagonal,
    1/(e^τ + d − 1) elsewhere (rows: query channels, softmax over key channels), out = V Aᵀ."""
    d, tau = 3, 1.7
    q = 2.0 * np.eye(4)[:, :d]                                     # 4 tokens, channel i on token i only
    v = np.arange(12.0).reshape(4, d)
    out, A = cross_covariance_attention(q, q, v, params=XcitParams(tau), return_weights=True)
    z = math.exp(tau) + d - 1
    expected = np.full((d, d), 1 / z) + np.eye(d) * (math.exp(tau) - 1) / z
    np.testing.assert_allclose(A, expected, **TIGHT)
    np.testing.assert_allclose(out, v @ expected.T, **TIGHT)


def test_rows_are_query_channels_and_the_softmax_runs_over_key_channels(rng):
    """The official orientation: A_ij = softmax over j of temperature·Σ_t q̂_ti k̂_tj (a row per query channel)."""
    q, k, v = _qkv(rng, 6)
    _, A = cross_covariance_attention(q, k, v, params=XcitParams(3.0), return_weights=True)
    q_hat = q / np.linalg.norm(q, axis=0)
    k_hat = k / np.linalg.norm(k, axis=0)
    for i in range(4):
        logits = 3.0 * np.array([q_hat[:, i] @ k_hat[:, j] for j in range(4)])
        np.testing.assert_allclose(A[i], np.exp(logits) / np.exp(logits).sum(), **TIGHT)


def test_equals_the_papers_transposed_form_with_tau_one_over_temperature(rng):
    """The paper's V·softmax(K̂ᵀQ̂/τ), normalised over the key channels (axis 0 of K̂ᵀQ̂), with τ = 1/temperature."""
    q, k, v = _qkv(rng, 9)
    temperature = 2.5
    q_hat, k_hat = q / np.linalg.norm(q, axis=0), k / np.linalg.norm(k, axis=0)
    logits = k_hat.T @ q_hat / (1 / temperature)                   # (d, d)  K̂ᵀQ̂/τ, rows = key channels
    A_paper = np.exp(logits) / np.exp(logits).sum(axis=0, keepdims=True)
    np.testing.assert_allclose(cross_covariance_attention(q, k, v, params=XcitParams(temperature)), v @ A_paper,
                               **TIGHT)


def test_default_temperature_is_the_official_initialisation_one(rng):
    q, k, v = _qkv(rng, 5)
    np.testing.assert_array_equal(init_xcit().temperature, 1.0)
    np.testing.assert_array_equal(init_xcit(4).temperature, np.ones(4))
    np.testing.assert_array_equal(cross_covariance_attention(q, k, v),
                                  cross_covariance_attention(q, k, v, params=XcitParams(1.0)))
    assert XCIT.apply(q, k, v, return_draws=True).draws["params"].temperature == 1.0


def test_channels_are_normalised_along_the_tokens(rng):
    """Rescaling a channel of q or k by c > 0 leaves the output unchanged: only directions over the tokens count."""
    q, k, v = _qkv(rng, 7)
    out = cross_covariance_attention(q, k, v)
    scaled = cross_covariance_attention(q * [3.0, 0.2, 1.0, 7.0], k * [0.5, 1.0, 40.0, 2.0], v)
    np.testing.assert_allclose(scaled, out, **TIGHT)
    np.testing.assert_allclose(np.linalg.norm(normalize_tokens(q), axis=-2), 1.0, **TIGHT)


def test_a_zero_channel_stays_zero_under_the_eps_floor_and_its_row_is_uniform(rng):
    q, k, v = _qkv(rng, 5)
    q[:, 1] = 0.0
    assert XCIT_EPS == 1e-12
    np.testing.assert_array_equal(normalize_tokens(q)[:, 1], 0.0)
    _, A = cross_covariance_attention(q, k, v, return_weights=True)
    np.testing.assert_allclose(A[1], 0.25, **TIGHT)                # scores 0: uniform over the 4 key channels


def test_joint_token_permutation_permutes_the_output_but_queries_alone_do_not(rng):
    q, k, v = _qkv(rng, 8)
    perm = np.random.default_rng(1).permutation(8)
    out = cross_covariance_attention(q, k, v)
    np.testing.assert_allclose(cross_covariance_attention(q[perm], k[perm], v[perm]), out[perm], **TIGHT)
    alone = cross_covariance_attention(q[perm], k, v)
    assert not np.allclose(alone, out[perm], rtol=1e-6, atol=1e-6)   # q's token t is paired with k's token t
    assert XCIT.position_dependent and not XCIT.cross and XCIT.mixing == "channels"


def test_heads_each_use_their_own_temperature(rng):
    q, k, v = _qkv(rng, 6, lead=(2, 3))                            # batch 2, 3 heads
    temps = np.array([0.5, 1.0, 4.0])
    out, A = cross_covariance_attention(q, k, v, params=XcitParams(temps), return_weights=True)
    assert A.shape == (2, 3, 4, 4)
    for h, t in enumerate(temps):
        np.testing.assert_allclose(out[:, h], cross_covariance_attention(q[:, h], k[:, h], v[:, h],
                                                                         params=XcitParams(t)), **TIGHT)


def test_bad_input_is_named(rng):
    q, k, v = _qkv(rng, 5)
    with pytest.raises(ValueError, match=r"same number of tokens.*q shape \(5, 4\) and k shape \(6, 4\)"):
        cross_covariance_attention(q, rng.standard_normal((6, 4)), rng.standard_normal((6, 4)))
    with pytest.raises(ValueError, match="d_v=3 and d_k=4"):
        cross_covariance_attention(q, k, v[:, :3])
    with pytest.raises(ValueError, match="temperature must be finite and > 0"):
        XcitParams(0.0)
    with pytest.raises(TypeError, match="params must be an XcitParams"):
        cross_covariance_attention(q, k, v, params=2.0)
    with pytest.raises(ValueError, match="params has 3 heads but q has no head axis"):
        cross_covariance_attention(q, k, v, params=XcitParams(np.ones(3)))
    with pytest.raises(ValueError, match="eps must be finite and > 0"):
        cross_covariance_attention(q, k, v, eps=0.0)
    with pytest.raises(ValueError, match="xcit takes causal in"):
        XCIT.apply(q, k, v, causal=True)


def test_edge_sizes(rng):
    """No token: an empty output of the right shape; width 0: a 0 × 0 map."""
    out, A = cross_covariance_attention(np.zeros((0, 3)), np.zeros((0, 3)), np.zeros((0, 3)), return_weights=True)
    assert out.shape == (0, 3)
    np.testing.assert_allclose(A, 1 / 3, **TIGHT)                  # no token: scores 0, uniform channel map
    out, A = cross_covariance_attention(np.zeros((4, 0)), np.zeros((4, 0)), np.zeros((4, 0)), return_weights=True)
    assert out.shape == (4, 0) and A.shape == (0, 0)
