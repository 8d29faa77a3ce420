"""Gaussian prior (Yang et al., 2018): G in closed form at hand-computed centres and widths, the predictors at
hand-computed values, the prior's largest weight at the key nearest the centre, σ → ∞ (softmax) and σ → 0 (one key),
the length I with n != m and under a causal mask, causality of every window, decoding, the draws and bad input. The
naive loop of tests/naive.py and the registry-driven tests cover the rest."""
from __future__ import annotations

import math

import numpy as np
import pytest

from refattn import registry, scaled_dot_product_attention
from refattn.common import glorot
from refattn.prior import (
    GaussianPriorParams,
    gaussian_prior_attention,
    gaussian_prior_bias,
    init_gaussian_prior,
    predict_gaussian_prior,
)

TIGHT = {"rtol": 1e-12, "atol": 1e-12}
WINDOWS = ("query", "layer", 2.5)


def _qkv(rng, n=6, m=9, d=4, d_v=3, batch=()):
    return (rng.standard_normal((*batch, n, d)), rng.standard_normal((*batch, m, d)),
            rng.standard_normal((*batch, m, d_v)))


def _params(d, **given):
    """Predictors of width h = d: W_p, W_d zero matrices and v_p, v_d, u_d zero vectors unless given."""
    zero = {"w_p": np.zeros((d, d)), "v_p": np.zeros(d), "v_d": np.zeros(d), "w_d": np.zeros((d, d)),
            "u_d": np.zeros(d)}
    return GaussianPriorParams(**(zero | {name: np.asarray(w, dtype=float) for name, w in given.items()}))


# --- the prior in closed form ----------------------------------------------------------------------

def test_bias_closed_form_at_hand_computed_centre_and_width():
    """P = 2.5, D = 2 (σ = 1) over positions 1 … 4: −(j − 2.5)²/2 = −1.125, −0.125, −0.125, −1.125; P = 1, D = 4
    (σ = 2): −(j − 1)²/8 = 0, −0.125, −0.5, −1.125. All exact in binary."""
    G = gaussian_prior_bias(np.array([2.5, 1.0]), np.array([2.0, 4.0]), 4)
    np.testing.assert_array_equal(G, [[-1.125, -0.125, -0.125, -1.125], [-0.0, -0.125, -0.5, -1.125]])


def test_bias_is_zero_everywhere_when_the_window_is_infinite():
    G = gaussian_prior_bias(np.array([0.3, 7.9]), np.array([np.inf, np.inf]), 5)
    np.testing.assert_array_equal(G, 0.0)
    assert np.all(np.signbit(G)), "G = −(j − P)²/∞ is −0.0, which adds nothing to any score"


def test_centre_and_window_at_hand_computed_values():
    """d = h = 1, W_p = 1, q = atanh(½): tanh(W_p q) = ½. v_p = 2 ln 3 → p = ln 3 → sigmoid = ¾ → P = ¾·I;
    v_d = −2 ln 3 → D = ¼·I. I = m = 8 (n = 3 queries, m = 8 keys): P = 6, D = 2."""
    q = np.full((3, 1), math.atanh(0.5))
    k = np.zeros((8, 1))
    params = _params(1, w_p=[[1.0]], v_p=[2 * math.log(3.0)], v_d=[-2 * math.log(3.0)])
    P, D = predict_gaussian_prior(q, k, params)
    np.testing.assert_allclose(P, [6.0] * 3, rtol=4e-16)           # tanh(atanh(½)) is ½ to an ulp
    np.testing.assert_allclose(D, [2.0] * 3, rtol=4e-16)


def test_layer_window_reads_the_mean_key():
    """W_d = 1, u_d = 2 ln 3, keys whose mean is atanh(½): z = ln 3, D = ¾·m for every query, whatever q is."""
    rng = np.random.default_rng(1)
    k = np.array([[0.0], [2 * math.atanh(0.5)], [math.atanh(0.5)], [math.atanh(0.5)]])
    params = _params(1, w_d=[[1.0]], u_d=[2 * math.log(3.0)])
    _, D = predict_gaussian_prior(rng.standard_normal((5, 1)), k, params, window="layer")
    np.testing.assert_allclose(D, [3.0] * 5, rtol=4e-16)
    _, D_other = predict_gaussian_prior(rng.standard_normal((5, 1)), k, params, window="layer")
    np.testing.assert_array_equal(D_other, D)


def test_causal_lengths_are_the_keys_each_query_sees():
    """Zero predictors give sigmoid(0) = ½: P_i = D_i = I_i / 2 with I_i = m, i + 1 (causal) and i + 1 + m − n
    (bottom-right, 0 for the queries before the first key)."""
    q, k = np.ones((5, 2)), np.ones((3, 2))
    for causal, lengths in ((False, [3] * 5), (True, [1, 2, 3, 3, 3]), ("bottom-right", [0, 0, 1, 2, 3])):
        P, D = predict_gaussian_prior(q, k, _params(2), causal=causal)
        np.testing.assert_array_equal(P, np.array(lengths) / 2, err_msg=f"causal={causal!r}")
        np.testing.assert_array_equal(D, np.array(lengths) / 2, err_msg=f"causal={causal!r}")


def test_causal_layer_window_reads_the_running_mean():
    """Query i's K̄_i is the mean of keys 1 … i + 1, computed here by a loop."""
    rng = np.random.default_rng(2)
    q, k, _ = _qkv(rng, n=5, m=5)
    params = init_gaussian_prior(3, 4)
    _, D = predict_gaussian_prior(q, k, params, window="layer", causal=True)
    for i in range(5):
        K_bar = k[: i + 1].mean(axis=0)
        expected = (i + 1) / (1 + math.exp(-float(np.tanh(K_bar @ params.w_d) @ params.u_d)))
        np.testing.assert_allclose(D[i], expected, **TIGHT, err_msg=f"row {i}")


# --- the prior's weights ---------------------------------------------------------------------------

@pytest.mark.parametrize("window", WINDOWS)
def test_largest_prior_weight_sits_at_the_key_nearest_the_centre(rng, window):
    """With the scores switched off (scale = 0) the weights are softmax(G) = exp(G)/Σ exp(G), largest at the position
    nearest P_i (positions 1 … m, the key at index j sits at j + 1)."""
    q, k, v = _qkv(rng, n=7, m=12)
    params = init_gaussian_prior(4, 4)
    P, D = predict_gaussian_prior(q, k, params, window=window)
    _, A = gaussian_prior_attention(q, k, v, params=params, window=window, scale=0.0, return_weights=True)
    nearest = np.argmin(np.abs(np.arange(1, 13) - P[:, None]), axis=-1)
    np.testing.assert_array_equal(np.argmax(A, axis=-1), nearest)
    sigma = D[:, None] / 2
    density = np.exp(-((np.arange(1, 13) - P[:, None]) ** 2) / (2 * sigma**2))   # the Gaussian, independently
    np.testing.assert_allclose(A, density / density.sum(axis=-1, keepdims=True), **TIGHT)


def test_weights_are_softmax_of_scores_plus_prior(rng):
    q, k, v = _qkv(rng)
    params = init_gaussian_prior(5, 4)
    out, A = gaussian_prior_attention(q, k, v, params=params, return_weights=True)
    P, D = predict_gaussian_prior(q, k, params)
    S = q @ k.T / 2.0 + gaussian_prior_bias(P, D, 9)               # d = 4: scale ½
    E = np.exp(S - S.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(A, E / E.sum(axis=-1, keepdims=True), **TIGHT)
    np.testing.assert_allclose(out, A @ v, **TIGHT)


@pytest.mark.parametrize("causal", [False, True, "bottom-right"])
def test_infinite_window_is_softmax_attention_bit_for_bit(rng, causal):
    """G = −0.0 leaves every score as it is, so the weights are sdpa's exactly (n != m)."""
    q, k, v = _qkv(rng, batch=(2,))
    out, A = gaussian_prior_attention(q, k, v, rng=0, window=np.inf, causal=causal, method="equation",
                                      return_weights=True)
    ref_out, ref_A = scaled_dot_product_attention(q, k, v, causal=causal, method="equation", return_weights=True)
    np.testing.assert_array_equal(A, ref_A)
    np.testing.assert_array_equal(out, ref_out)


def test_widening_window_approaches_softmax_and_narrowing_window_picks_one_key(rng):
    """Fixed D = 1, 4, 16, 64: the weights' distance to softmax's falls at every step; at D = 1e8, G ≥ −m²/(2·(5e7)²)
    ≈ −2e-14 and the weights equal softmax's to 1e-12. D = 1e-3 (σ = 5e-4) puts all the weight on the key nearest
    P_i (the next one is ≥ 5e-4 away unless P_i falls within rounding of a half-integer, which it does not here)."""
    q, k, v = _qkv(rng, n=6, m=10)
    params = init_gaussian_prior(6, 4)
    softmax = scaled_dot_product_attention(q, k, v, return_weights=True)[1]
    gaps = [np.abs(gaussian_prior_attention(q, k, v, params=params, window=D, return_weights=True)[1]
                   - softmax).max() for D in (1.0, 4.0, 16.0, 64.0)]
    assert np.all(np.diff(gaps) < 0), gaps
    wide = gaussian_prior_attention(q, k, v, params=params, window=1e8, return_weights=True)[1]
    np.testing.assert_allclose(wide, softmax, **TIGHT)
    P, _ = predict_gaussian_prior(q, k, params, window=1e-3)
    nearest = np.argmin(np.abs(np.arange(1, 11) - P[:, None]), axis=-1)
    assert np.all(np.abs(np.abs(np.arange(1, 11) - P[:, None]) - 0.5).min(axis=-1) > 0.01), P
    narrow = gaussian_prior_attention(q, k, v, params=params, window=1e-3, return_weights=True)[1]
    np.testing.assert_array_equal(narrow, np.eye(10)[nearest])


# --- causality and decoding --------------------------------------------------------------------------

@pytest.mark.parametrize("window", WINDOWS)
def test_causal_rows_ignore_later_keys_for_every_window(rng, window):
    q, k, v = _qkv(rng, n=8, m=8)
    params = init_gaussian_prior(7, 4)
    out = gaussian_prior_attention(q, k, v, params=params, window=window, causal=True)
    k[5:], v[5:] = np.nan, np.nan
    np.testing.assert_array_equal(gaussian_prior_attention(q, k, v, params=params, window=window, causal=True)[:5],
                                  out[:5])


def test_noncausal_layer_window_reads_every_key(rng):
    """The paper's layer-specific window reads the mean of all keys: without a mask, moving the last key moves
    every query's window."""
    q, k, _ = _qkv(rng, n=8, m=8)
    params = init_gaussian_prior(7, 4)
    _, D = predict_gaussian_prior(q, k, params, window="layer")
    moved = k.copy()
    moved[-1] += 1.0
    _, D_moved = predict_gaussian_prior(q, moved, params, window="layer")
    assert np.all(D_moved != D)


@pytest.mark.parametrize("window", WINDOWS)
def test_decoding_one_query_at_a_time_equals_causal_self_attention(rng, window):
    """A key/value cache grows by one per step: step t's single query is the last of t + 1 positions
    (bottom-right), and gets the row t of the full causal computation."""
    q, k, v = _qkv(rng, n=7, m=7)
    params = init_gaussian_prior(8, 4)
    full = gaussian_prior_attention(q, k, v, params=params, window=window, causal=True)
    for t in range(7):
        step = gaussian_prior_attention(q[t:t + 1], k[:t + 1], v[:t + 1], params=params, window=window,
                                        causal="bottom-right")
        np.testing.assert_allclose(step[0], full[t], **TIGHT, err_msg=f"step {t}")


# --- draws, methods, shapes, errors ------------------------------------------------------------------

def test_init_draws_in_the_documented_order():
    params = init_gaussian_prior(11, 5, hidden=3)
    rng = np.random.default_rng(11)
    expected = (glorot(rng, 5, 3), glorot(rng, 3, 1)[:, 0], glorot(rng, 3, 1)[:, 0], glorot(rng, 5, 3),
                glorot(rng, 3, 1)[:, 0])
    for name, value in zip(("w_p", "v_p", "v_d", "w_d", "u_d"), expected, strict=True):
        np.testing.assert_array_equal(getattr(params, name), value, err_msg=name)


def test_rng_draws_the_params_the_registry_returns(rng):
    q, k, v = _qkv(rng)
    result = registry.get("gaussian_prior").apply(q, k, v, rng=4, window="layer", return_draws=True)
    params = result.draws["params"]
    np.testing.assert_array_equal(params.w_p, init_gaussian_prior(4, 4).w_p)
    np.testing.assert_array_equal(gaussian_prior_attention(q, k, v, rng=4, window="layer"), result.output)
    np.testing.assert_array_equal(gaussian_prior_attention(q, k, v, params=params, window="layer"), result.output)


@pytest.mark.parametrize("window", WINDOWS)
def test_blocked_method_equals_equation(rng, window):
    q, k, v = _qkv(rng, batch=(2,))
    kwargs = {"rng": 2, "window": window, "causal": True}
    np.testing.assert_allclose(gaussian_prior_attention(q, k, v, method="blocked", **kwargs),
                               gaussian_prior_attention(q, k, v, method="equation", **kwargs), **TIGHT)


def test_batch_of_queries_broadcasts_against_one_sequence_of_keys(rng):
    q, k, v = _qkv(rng, batch=(3,))
    out = gaussian_prior_attention(q, k[0], v[0], rng=1, window="layer")
    for b in range(3):
        np.testing.assert_allclose(out[b], gaussian_prior_attention(q[b], k[0], v[0], rng=1, window="layer"),
                                   **TIGHT)


def test_edge_sizes(rng):
    q, k, v = _qkv(rng)
    assert gaussian_prior_attention(q[:0], k, v, rng=0).shape == (0, 3)
    np.testing.assert_array_equal(gaussian_prior_attention(q, k[:0], v[:0], rng=0, window="layer"), 0.0)
    with pytest.raises(ValueError, match="d_k"):
        gaussian_prior_attention(q[:, :0], k[:, :0], v, rng=0)
    out = gaussian_prior_attention(q[:, :0], k[:, :0], v, rng=0, scale=1.0, window=np.inf)
    np.testing.assert_allclose(out, np.broadcast_to(v.mean(axis=0), out.shape), **TIGHT)


@pytest.mark.parametrize(("window", "error"), [(0.0, ValueError), (-1.0, ValueError), (np.nan, ValueError),
                                               ("keys", ValueError), (True, TypeError), (None, TypeError)])
def test_bad_window_is_named(rng, window, error):
    with pytest.raises(error, match="window"):
        gaussian_prior_attention(*_qkv(rng), rng=0, window=window)


def test_given_params_leave_rng_unused(rng):
    """params and rng both: the given params are used and nothing is drawn (the rule of every draw)."""
    q, k, v = _qkv(rng)
    params = init_gaussian_prior(0, 4)
    np.testing.assert_array_equal(gaussian_prior_attention(q, k, v, rng=5, params=params),
                                  gaussian_prior_attention(q, k, v, params=params))
    drawn = gaussian_prior_attention(q, k, v, rng=5)
    assert not np.array_equal(drawn, gaussian_prior_attention(q, k, v, params=params))


def test_bad_params_are_named(rng):
    q, k, v = _qkv(rng)
    with pytest.raises(ValueError, match=r"gaussian_prior draws its predictors from rng: pass rng= \(or params=\)"):
        gaussian_prior_attention(q, k, v)
    with pytest.raises(TypeError, match="params"):
        gaussian_prior_attention(q, k, v, params={"w_p": np.eye(4)})
    with pytest.raises(ValueError, match=r"w_p of shape \(3, 3\).*d_k=4"):
        gaussian_prior_attention(q, k, v, params=init_gaussian_prior(0, 3))
    with pytest.raises(ValueError, match="v_p must have shape"):
        GaussianPriorParams(np.eye(4), np.ones(3), np.ones(4), np.eye(4), np.ones(4))
    with pytest.raises(ValueError, match="w_d has shape"):
        GaussianPriorParams(np.eye(4), np.ones(4), np.ones(4), np.eye(3), np.ones(4))
    with pytest.raises(ValueError, match="rng"):
        registry.get("gaussian_prior").apply(q, k, v)
