"""Collaborative heads (Cordonnier et al., 2020): the multi-head limit, the re-parameterisation and the compression it
allows, the CP decomposition, errors."""
from __future__ import annotations

import math

import numpy as np
import pytest

from refattn import MultiHeadParams, init_multi_head, multi_head_attention, registry, scaled_dot_product_attention
from refattn.heads import (
    CollaborativeParams,
    block_mixing,
    collaborative_attention,
    collaborative_from_multi_head,
    cp_decomposition,
    head_products,
    init_collaborative,
)

from .naive import random_params

TIGHT = {"rtol": 1e-12, "atol": 1e-12}


def _inputs(rng, n=5, m=7, d=8, batch=(2,)):
    return rng.standard_normal((*batch, n, d)), rng.standard_normal((*batch, m, d)), rng.standard_normal((*batch, m, d))


@pytest.mark.parametrize("causal", [False, True, "bottom-right"])
def test_one_hot_block_mixing_equals_multi_head_with_the_same_params(rng, causal):
    """D̃_k = h·d_k, W̃ = the concatenated W^i, m_i = head i's block: multi_head, biases included (the key bias dropped,
    the query bias as the content bias), outputs and weights."""
    params = random_params(rng, 8, 4, d_k=3, d_v=2)
    collab = collaborative_from_multi_head(params, 4)
    np.testing.assert_array_equal(collab.mixing, block_mixing(4, 3))
    np.testing.assert_array_equal(collab.w_q, params.w_q)
    x_q, x_kv, x_v = _inputs(rng)
    mask = rng.random((5, 7)) < 0.7
    out, A = collaborative_attention(x_q, x_kv, collab, x_v=x_v, mask=mask, causal=causal, return_weights=True)
    ref, B = multi_head_attention(x_q, x_kv, params, num_heads=4, x_v=x_v, mask=mask, causal=causal,
                                  return_weights=True)
    np.testing.assert_allclose(out, ref, **TIGHT)
    np.testing.assert_allclose(A, B, **TIGHT)


def test_block_mixing_reproduces_every_head_product(rng):
    """W̃_Q diag(m_i) W̃_Kᵀ = W_Q^i W_K^iᵀ: the scores themselves, before any bias."""
    params = random_params(rng, 6, 3, d_k=2)
    collab = collaborative_from_multi_head(params, 3)
    T = head_products(params, 3)
    for i in range(3):
        product = collab.w_q @ np.diag(collab.mixing[i]) @ collab.w_k.T
        np.testing.assert_allclose(product, T[:, i, :], **TIGHT)
        cols = slice(2 * i, 2 * i + 2)
        np.testing.assert_allclose(T[:, i, :], params.w_q[:, cols] @ params.w_k[:, cols].T, **TIGHT)


def test_the_biases_move_into_a_content_bias_up_to_a_constant_per_row(rng):
    """(x W_Q^i + b_Q^i)(y W_K^i + b_K^i)ᵀ = x W_Q^i W_K^iᵀ yᵀ + y·c_i + (terms constant in y), c_i = W_K^i b_Q^iᵀ."""
    params = random_params(rng, 6, 2, d_k=3)
    collab = collaborative_from_multi_head(params, 2)
    x, y = rng.standard_normal((4, 6)), rng.standard_normal((5, 6))
    for i in range(2):
        cols = slice(3 * i, 3 * i + 3)
        full = (x @ params.w_q[:, cols] + params.b_q[cols]) @ (y @ params.w_k[:, cols] + params.b_k[cols]).T
        collaborative = (x @ collab.w_q * collab.mixing[i]) @ (y @ collab.w_k).T + (y @ collab.content_bias[:, i])
        difference = full - collaborative                         # (4, 5): the same in every column of a row
        np.testing.assert_allclose(difference, np.broadcast_to(difference[:, :1], (4, 5)), **TIGHT)


def test_random_heads_have_no_exact_compression_and_the_cp_error_is_bounded_by_the_unfolding(rng):
    """Generic heads with d_model = h·d_k: the mode-1 unfolding of T has rank h·d_k, so no D̃_k < h·d_k is exact;
    a rank-R CP approximation's relative error is at least the unfolding's best rank-R error (Eckart–Young)."""
    h, d_k = 4, 3
    params = random_params(rng, h * d_k, h, d_k=d_k)
    T = head_products(params, h)
    unfolding = T.reshape(h * d_k, -1)                             # (d_model, h·d_model)
    sigma = np.linalg.svd(unfolding, compute_uv=False)
    assert np.linalg.matrix_rank(unfolding) == h * d_k
    errors = []
    for R in (3, 6, 9, 11):
        cp = cp_decomposition(T, R, rng=0)
        bound = math.sqrt(np.sum(sigma[R:] ** 2)) / np.linalg.norm(T)
        assert cp.error >= bound * (1 - 1e-12) and bound > 0.01, (R, cp.error, bound)
        errors.append(cp.error)
    assert errors == sorted(errors, reverse=True)                  # measured: more shared width, less error


def _redundant_heads(rng, d_model=12, h=4, d_k=3, r=4):
    """h heads of width d_k built from r < h·d_k shared directions: head i uses every direction but its i-th, scaled
    by its own weights, so T has CP rank r (the redundancy the paper finds in trained heads)."""
    A, C = rng.standard_normal((d_model, r)), rng.standard_normal((d_model, r))
    M = rng.standard_normal((h, r)) * (1 - np.eye(h, r))
    w_q = np.hstack([A[:, M[i] != 0] * M[i][M[i] != 0] for i in range(h)])
    w_k = np.hstack([C[:, M[i] != 0] for i in range(h)])
    mh = init_multi_head(rng, d_model, h, d_k=d_k)
    return MultiHeadParams(w_q, w_k, mh.w_v, mh.w_o, b_v=mh.b_v, b_o=mh.b_o)


def test_redundant_heads_compress_exactly_at_their_cp_rank():
    """CP rank 4 < h·d_k = 12: run to convergence (tol 0, 500 sweeps; ALS converges linearly here and reaches
    rounding), the rank-4 collaborative layer reproduces the head products and, with the trained scale 1/√d_k,
    the layer's output; rank 3 cannot (0.36 relative error). The official stopping rule (tol 1e-6, 100 sweeps)
    stops at 3.5e-6."""
    rng = np.random.default_rng(0)
    params = _redundant_heads(rng)
    T = head_products(params, 4)
    exact = cp_decomposition(T, 4, rng=0, tol=0.0, max_sweeps=500)
    assert exact.error < 1e-12
    official = cp_decomposition(T, 4, rng=0)
    assert 1e-7 < official.error < 1e-5 and official.sweeps < 100
    assert cp_decomposition(T, 3, rng=0, tol=0.0, max_sweeps=500).error > 0.3
    collab = collaborative_from_multi_head(params, 4, 4, rng=0, tol=0.0, max_sweeps=500)
    assert collab.shared_dim == 4 and collab.content_bias is None
    x, memory = rng.standard_normal((6, 12)), rng.standard_normal((9, 12))
    out = collaborative_attention(x, memory, collab, scale=1 / math.sqrt(3), causal="bottom-right")
    ref = multi_head_attention(x, memory, params, num_heads=4, causal="bottom-right")
    np.testing.assert_allclose(out, ref, **TIGHT)


def test_default_scale_is_the_official_head_size():
    """1/√(D̃_k/h): a compressed layer used without the trained scale sharpens its scores by √(h·d_k/D̃_k)."""
    rng = np.random.default_rng(2)
    params = init_collaborative(rng, 8, 2, shared_dim=3)
    x = rng.standard_normal((4, 8))
    np.testing.assert_array_equal(collaborative_attention(x, x, params),
                                  collaborative_attention(x, x, params, scale=math.sqrt(2 / 3)))


def test_cp_decomposition_recovers_a_tensor_of_its_rank():
    rng = np.random.default_rng(5)
    A, B, C = rng.standard_normal((5, 3)), rng.standard_normal((4, 3)), rng.standard_normal((6, 3))
    T = np.einsum("ar,br,cr->abc", A, B, C)
    cp = cp_decomposition(T, 3, rng=1, tol=0.0, max_sweeps=400)
    np.testing.assert_allclose(np.einsum("ar,br,cr->abc", cp.A, cp.B, cp.C), T, rtol=0, atol=1e-12 * np.abs(T).max())
    assert cp.sweeps == 400


def test_init_follows_the_official_layer():
    params = init_collaborative(3, 16, 4, shared_dim=6)
    assert params.w_q.shape == (16, 6) and params.mixing.shape == (4, 6) and params.content_bias.shape == (16, 4)
    assert np.abs(params.w_q).max() <= 0.25 and np.abs(params.content_bias).max() <= 0.25   # U(±1/√16)
    # 24 draws of N(0, 0.2²): the sample deviation is within 50 % of 0.2 with probability > 0.999 (χ² with 24 d.o.f.)
    assert 0.1 < params.mixing.std() < 0.3
    np.testing.assert_array_equal(params.b_o, 0.0)


def test_exact_limit_of_the_record(rng):
    q, k, v = _inputs(rng, d=4, batch=())
    result = registry.get("collaborative_heads").apply(q, k, v, causal=True, num_heads=1, params="identity",
                                                       return_weights=True)
    assert result.weights.shape == (1, 5, 7)


def test_bad_input_is_refused(rng):
    mh = init_multi_head(rng, 8, 2)
    with pytest.raises(ValueError, match=r"shared_dim=9 exceeds h·d_k=8"):
        collaborative_from_multi_head(mh, 2, 9)
    with pytest.raises(ValueError, match="needs rng="):
        collaborative_from_multi_head(mh, 2, 4)
    with pytest.raises(ValueError, match=r"w_q \(8, 8\) does not split into num_heads=3"):
        collaborative_from_multi_head(mh, 3)
    with pytest.raises(TypeError, match="params must be MultiHeadParams"):
        collaborative_from_multi_head("mh", 2)
    with pytest.raises(ValueError, match=r"T must be a 3-way tensor, got shape \(3, 3\)"):
        cp_decomposition(np.eye(3), 2, rng=0)
    with pytest.raises(ValueError, match="tol must be a number >= 0"):
        cp_decomposition(np.ones((2, 2, 2)), 1, rng=0, tol=-1.0)
    with pytest.raises(ValueError, match=r"w_q \(8, 3\), w_k \(8, 3\) and mixing \(2, 4\)"):
        CollaborativeParams(np.ones((8, 3)), np.ones((8, 3)), np.ones((2, 4)), np.ones((8, 4)), np.ones((4, 8)))
    with pytest.raises(ValueError, match=r"content_bias has shape \(8, 3\); expected \(8, 2\)"):
        CollaborativeParams(np.ones((8, 3)), np.ones((8, 3)), np.ones((2, 3)), np.ones((8, 4)), np.ones((4, 8)),
                            np.ones((8, 3)))
    with pytest.raises(TypeError, match="params must be CollaborativeParams"):
        collaborative_attention(np.ones((2, 8)), np.ones((2, 8)), mh)


def test_the_function_draws_or_takes_identity_params_as_the_registry_does(rng):
    x, mem = rng.standard_normal((4, 8)), rng.standard_normal((6, 8))
    result = registry.get("collaborative_heads").apply(x, mem, mem, rng=7, num_heads=4, shared_dim=2,
                                                       return_draws=True)
    np.testing.assert_array_equal(collaborative_attention(x, mem, num_heads=4, shared_dim=2, rng=7), result.output)
    np.testing.assert_array_equal(collaborative_attention(x, mem, result.draws["params"]), result.output)
    np.testing.assert_allclose(collaborative_attention(x, mem, "identity", causal="bottom-right"),
                               scaled_dot_product_attention(x, mem, mem, causal="bottom-right"), **TIGHT)
    with pytest.raises(ValueError, match=r"^collaborative_heads draws its parameters from rng: pass rng= \(or par"):
        collaborative_attention(x, mem, num_heads=2)
    with pytest.raises(ValueError, match=r"^collaborative_heads needs num_heads= to draw params from rng"):
        collaborative_attention(x, mem, rng=7)
    with pytest.raises(ValueError, match="got 'identity' with num_heads=None, shared_dim=4"):
        collaborative_attention(x, mem, "identity", shared_dim=4)
