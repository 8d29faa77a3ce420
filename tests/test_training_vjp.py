"""refattn.training.vjp against central finite differences of the public forward functions.

Every gradient is checked against the central difference of the scalar L(x) = ⟨d_y, forward(x)⟩ (or the
loss itself for cross_entropy), computed with refattn's forward functions or plain NumPy (no code shared
with the VJPs), by tests/test_oracle_vjp.py's ``fd_grad``: step h = 1e-5, divided by the representable
step. Its error is truncation plus rounding,

    |FD_i − ∂L/∂x_i| ≤ h²/6 · max|∂³L/∂x_i³| + ε_L / h.

The functions here are at most quadratic in any one input (linear, embedding, positions: exactly linear,
so truncation is 0; feed-forward: piecewise bilinear; layer norm and cross-entropy: smooth with O(1)–O(10)
third derivatives on these standard-normal inputs of width ≤ 6), so truncation ≤ 1e-10/6 · 10 ≈ 2e-10.
Each L is a sum of ≲ 100 terms of size ≲ 10: ε_L ≲ 100 · 10 · 2.2e-16 ≈ 2e-13, so ε_L / h ≲ 2e-8. Hence
FD_TOL (atol 2e-8, rtol 1e-7 for the few entries ≫ 1), the oracle's tolerance for the same reason. A
wrong term is O(1), 10⁷ times larger. ReLU is not differentiable at 0: the feed-forward test asserts
every pre-activation is farther than 100·h from 0, so no stencil straddles the kink.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from refattn import FeedForwardParams, feed_forward, init_feed_forward, layer_norm
from refattn.core.sinusoidal_pe import sinusoidal_positional_encoding
from refattn.core.transformer import embed
from refattn.positional.learned_pe import learned_positional_encoding
from refattn.training.vjp import (
    cross_entropy,
    embedding_vjp,
    feed_forward_vjp,
    layer_norm_vjp,
    linear_vjp,
    position_vjp,
)

from .test_oracle_vjp import FD_TOL, H, fd_grad

TIGHT = {"rtol": 1e-12, "atol": 1e-12}


# ------------------------------------------------------------------------------------- embeddings


def test_embedding_vjp_matches_finite_differences_of_core_embed(rng):
    vocab, d_model = 5, 4
    table = rng.standard_normal((vocab, d_model))
    tokens = np.array([[0, 3, 3, 1], [3, 0, 2, 3]])               # repeats; id 4 never occurs
    d_x = rng.standard_normal((2, 4, d_model))

    def loss(table):                                              # E[t]·√d + PE (refattn.core)
        return np.sum(d_x * embed(tokens, table, "tokens"))

    d_table = embedding_vjp(tokens, d_x, vocab, scale=np.sqrt(d_model))
    np.testing.assert_allclose(d_table, fd_grad(loss, table), **FD_TOL)
    np.testing.assert_array_equal(d_table[4], 0.0)


def test_embedding_vjp_hand_computed():
    # x = E[t]·3 with t = (1, 1, 0): dE[1] = 3·(x̄₀ + x̄₁), dE[0] = 3·x̄₂
    d_x = np.array([[1.0, 2.0], [10.0, 20.0], [100.0, 200.0]])
    np.testing.assert_allclose(embedding_vjp([1, 1, 0], d_x, 2, scale=3.0), [[300.0, 600.0], [33.0, 66.0]],
                               rtol=1e-15)


def test_position_vjp_matches_finite_differences(rng):
    P = rng.standard_normal((7, 3))                               # max_len 7 > n = 5
    x, d_x = rng.standard_normal((2, 2, 5, 3))

    def loss(P):
        return np.sum(d_x * learned_positional_encoding(x, P))

    d_P = position_vjp(d_x, 7)
    np.testing.assert_allclose(d_P, fd_grad(loss, P), **FD_TOL)
    np.testing.assert_array_equal(d_P[5:], 0.0)


def test_sinusoids_pass_the_gradient_through(rng):
    # x' = x + PE: ∂⟨d, x'⟩/∂x = d, whatever PE (no parameter, nothing to return)
    x, d_x = rng.standard_normal((2, 3, 6))

    def loss(x):
        return np.sum(d_x * (x + sinusoidal_positional_encoding(3, 6)))

    np.testing.assert_allclose(fd_grad(loss, x), d_x, **FD_TOL)


# ------------------------------------------------------------------------------ linear, norm, FFN


def test_linear_vjp_matches_finite_differences(rng):
    x, w, b, d_y = (rng.standard_normal(s) for s in ((2, 3, 4), (4, 5), (5,), (2, 3, 5)))

    def loss(x, w, b):
        return np.sum(d_y * (x @ w + b))

    g = linear_vjp(x, w, d_y)
    np.testing.assert_allclose(g.dx, fd_grad(lambda x: loss(x, w, b), x), **FD_TOL)
    np.testing.assert_allclose(g.dw, fd_grad(lambda w: loss(x, w, b), w), **FD_TOL)
    np.testing.assert_allclose(g.db, fd_grad(lambda b: loss(x, w, b), b), **FD_TOL)


@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_vjp_matches_finite_differences(rng, affine):
    x, d_y = rng.standard_normal((2, 2, 3, 6))
    gamma, beta = (1.0 + 0.5 * rng.standard_normal(6), rng.standard_normal(6)) if affine else (None, None)

    def loss(x, gamma, beta):
        return np.sum(d_y * layer_norm(x, gamma, beta, eps=1e-5))

    g = layer_norm_vjp(x, d_y, gamma, eps=1e-5)
    np.testing.assert_allclose(g.dx, fd_grad(lambda x: loss(x, gamma, beta), x), **FD_TOL)
    if affine:
        np.testing.assert_allclose(g.d_gamma, fd_grad(lambda gm: loss(x, gm, beta), gamma), **FD_TOL)
        np.testing.assert_allclose(g.d_beta, fd_grad(lambda bt: loss(x, gamma, bt), beta), **FD_TOL)
    else:                                                         # γ = 1, β = 0 are the defaults
        ones, zeros = np.ones(6), np.zeros(6)
        np.testing.assert_allclose(g.d_gamma, fd_grad(lambda gm: loss(x, gm, zeros), ones), **FD_TOL)
        np.testing.assert_allclose(g.d_beta, fd_grad(lambda bt: loss(x, ones, bt), zeros), **FD_TOL)


def test_layer_norm_vjp_is_orthogonal_to_shift_and_scale(rng):
    # LN(x + c) = LN(x) and (ε = 0) LN(a·x) = LN(x): dx is orthogonal to 1 and to x − μ, row by row
    x, d_y = rng.standard_normal((2, 4, 5))
    dx = layer_norm_vjp(x, d_y, rng.standard_normal(5), eps=0.0).dx
    np.testing.assert_allclose(dx.sum(axis=-1), 0.0, atol=1e-14)
    np.testing.assert_allclose(np.sum(dx * (x - x.mean(axis=-1, keepdims=True)), axis=-1), 0.0, atol=1e-14)


def test_feed_forward_vjp_matches_finite_differences(rng):
    d_model, d_ff = 4, 6
    p0 = init_feed_forward(rng, d_model, d_ff)
    p = FeedForwardParams(p0.w_1, 0.3 * rng.standard_normal(d_ff), p0.w_2, 0.3 * rng.standard_normal(d_model))
    x, d_y = rng.standard_normal((2, 2, 3, d_model))
    assert np.abs(x @ p.w_1 + p.b_1).min() > 100 * H             # no stencil straddles ReLU's kink

    def loss(x=x, **changed):
        return np.sum(d_y * feed_forward(x, dataclasses.replace(p, **changed)))

    g = feed_forward_vjp(x, p, d_y)
    np.testing.assert_allclose(g.dx, fd_grad(lambda v: loss(x=v), x), **FD_TOL)
    for name in ("w_1", "b_1", "w_2", "b_2"):
        np.testing.assert_allclose(getattr(g.dparams, name),
                                   fd_grad(lambda v, name=name: loss(**{name: v}), getattr(p, name)), **FD_TOL)


# ---------------------------------------------------------------------------------- cross-entropy


def test_cross_entropy_matches_its_definition_and_finite_differences(rng):
    logits = 3 * rng.standard_normal((2, 5, 4))
    targets = rng.integers(0, 4, (2, 5))
    mask = np.array([[True, False, True, True, False], [False, True, True, True, True]])
    p = np.exp(logits) / np.exp(logits).sum(axis=-1, keepdims=True)   # plain softmax: no shift needed here
    picked = np.take_along_axis(p, targets[..., None], axis=-1)[..., 0]
    expected = -np.log(picked[mask]).sum() / mask.sum()             # mean over the 7 kept tokens

    loss, d_logits = cross_entropy(logits, targets, mask)
    np.testing.assert_allclose(loss, expected, **TIGHT)
    np.testing.assert_allclose(d_logits, fd_grad(lambda z: cross_entropy(z, targets, mask)[0], logits), **FD_TOL)
    np.testing.assert_array_equal(d_logits[~mask], 0.0)
    np.testing.assert_allclose(d_logits.sum(axis=-1), 0.0, atol=1e-16)   # softmax − onehot sums to 0


def test_cross_entropy_hand_computed_and_stable():
    # logits (0, ln 3): p = (1/4, 3/4); target 1 → L = −ln(3/4), dz = (1/4, −1/4)
    loss, d = cross_entropy(np.array([[0.0, np.log(3.0)]]), np.array([1]))
    np.testing.assert_allclose(loss, -np.log(0.75), rtol=1e-15)
    np.testing.assert_allclose(d, [[0.25, -0.25]], rtol=1e-15)
    # shifted by 1000 (exp would overflow unshifted): the same loss and gradient
    loss_big, d_big = cross_entropy(np.array([[1000.0, 1000.0 + np.log(3.0)]]), np.array([1]))
    np.testing.assert_allclose(loss_big, -np.log(0.75), rtol=1e-12)
    np.testing.assert_allclose(d_big, [[0.25, -0.25]], rtol=1e-12)


def test_cross_entropy_without_mask_averages_every_token(rng):
    logits, targets = rng.standard_normal((3, 4)), np.array([0, 3, 1])
    np.testing.assert_allclose(cross_entropy(logits, targets)[0],
                               cross_entropy(logits, targets, np.ones(3, bool))[0], rtol=1e-15)


# ------------------------------------------------------------------------------------ bad inputs


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: embedding_vjp([0, 5], np.ones((2, 3)), 5), ValueError, "ids in \\[0, 5\\]"),
    (lambda: embedding_vjp([0.0, 1.0], np.ones((2, 3)), 5), TypeError, "integer array"),
    (lambda: embedding_vjp([0, 1], np.ones((3, 3)), 5), ValueError, "d_x has shape \\(3, 3\\)"),
    (lambda: position_vjp(np.ones((2, 6, 3)), 5), ValueError, "n=6.*max_len=5"),
    (lambda: linear_vjp(np.ones((2, 3)), np.ones((4, 5)), np.ones((2, 5))), ValueError, "w has shape \\(4, 5\\)"),
    (lambda: linear_vjp(np.ones((2, 3)), np.ones((3, 5)), np.ones((2, 4))), ValueError, "d_y has shape \\(2, 4\\)"),
    (lambda: layer_norm_vjp(np.ones((2, 3)), np.ones((2, 3)), np.ones(4)), ValueError, "gamma has shape \\(4,\\)"),
    (lambda: layer_norm_vjp(np.ones((2, 3)), np.ones((2, 3)), eps=-1.0), ValueError, "eps"),
    (lambda: feed_forward_vjp(np.ones((2, 3)), init_feed_forward(0, 4, 5), np.ones((2, 4))), ValueError,
     "x has d_model=3"),
    (lambda: feed_forward_vjp(np.ones((2, 4)), None, np.ones((2, 4))), TypeError, "FeedForwardParams"),
    (lambda: cross_entropy(np.ones((2, 3)), [0, 3]), ValueError, "ids in \\[0, 3\\]"),
    (lambda: cross_entropy(np.ones((2, 3)), [[0, 1]]), ValueError, "targets has shape \\(1, 2\\)"),
    (lambda: cross_entropy(np.ones((2, 3)), [0, 1], [1, 0]), TypeError, "loss_mask must be a boolean"),
    (lambda: cross_entropy(np.ones((2, 3)), [0, 1], [True]), ValueError, "loss_mask has shape \\(1,\\)"),
    (lambda: cross_entropy(np.ones((2, 3)), [0, 1], [False, False]), ValueError, "keeps no token"),
])
def test_bad_inputs_are_named(call, error, match):
    with pytest.raises(error, match=match):
        call()
