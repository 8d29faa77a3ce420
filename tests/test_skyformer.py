"""Skyformer (Chen, Zeng et al. 2021): the kernel's closed form, the exact limit with every point a landmark, the
preconditioned pseudoinverse, the landmark draws and the refusals."""
from __future__ import annotations

import numpy as np
import pytest

from refattn import registry
from refattn.beyond import (
    draw_skyformer_landmarks,
    gaussian_kernel,
    kernelized_attention,
    skyformer_attention,
    skyformer_factors,
)

TIGHT = {"rtol": 1e-12, "atol": 1e-12}


def _qkv(seed, n=6, m=9, d=4, batch=()):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((*batch, n, d)), rng.standard_normal((*batch, m, d)),
            rng.standard_normal((*batch, m, 3)))


def test_kernelized_attention_is_exp_scores_with_the_paper_s_symmetric_normalisation():
    """§4.1: κ(Q/d^{1/4}, K/d^{1/4}) = D_Q^{−1/2} exp(QKᵀ/√d) D_K^{−1/2}, (D_Q)_ii = exp(‖q_i‖²/√d)."""
    q, k, v = _qkv(0)
    d = q.shape[-1]
    A = np.exp(q @ k.T / np.sqrt(d))
    D_q = np.exp(np.sum(q * q, axis=-1) / np.sqrt(d))
    D_k = np.exp(np.sum(k * k, axis=-1) / np.sqrt(d))
    expected = A / np.sqrt(D_q)[:, None] / np.sqrt(D_k)[None, :]
    out, C = kernelized_attention(q, k, v, return_weights=True)
    np.testing.assert_allclose(C, expected, **TIGHT)
    np.testing.assert_allclose(out, expected @ v, **TIGHT)
    distances = np.sum((q[:, None, :] - k[None, :, :]) ** 2, axis=-1)      # ‖q_i − k_j‖² directly
    np.testing.assert_allclose(gaussian_kernel(q, k), np.exp(-distances / 2), **TIGHT)


@pytest.mark.parametrize(("n", "m", "d", "batch"), [(6, 9, 4, ()), (7, 7, 4, (2,)), (12, 10, 8, ())])
def test_every_point_a_landmark_is_exact_kernelized_attention(n, m, d, batch):
    """(I, 0) C̄ C̄⁺ C̄ (0, I)ᵀ = C. Rounding grows as ε·κ(C̄): the seeded inputs keep κ(C̄) below 500 (≈ 1e-13
    here); at κ ≈ 1e11 (d = 2, 40 points) the same identity holds only to ≈ 1e-6."""
    q, k, v = _qkv(1, n, m, d, batch)
    f = skyformer_factors(q, k, np.arange(n + m), gamma=0.0, pinv="exact")
    assert np.linalg.cond(f.M).max() < 500
    out, W = skyformer_attention(q, k, v, landmarks=np.arange(n + m), gamma=0.0, pinv="exact", return_weights=True)
    exact, C = kernelized_attention(q, k, v, return_weights=True)
    np.testing.assert_allclose(W, C, **TIGHT)
    np.testing.assert_allclose(out, exact, **TIGHT)


def test_output_is_the_effective_matrix_times_v_and_not_row_normalised():
    q, k, v = _qkv(2)
    out, W = skyformer_attention(q, k, v, num_landmarks=5, rng=3, return_weights=True)
    np.testing.assert_allclose(out, W @ v, **TIGHT)
    assert np.abs(W.sum(axis=-1) - 1).max() > 0.1                   # kernelized attention has no row normaliser


def test_exact_inverse_with_gamma_is_the_inverse_of_the_regularised_landmark_kernel():
    """D^{−1/2} (D^{−1/2} M D^{−1/2})⁻¹ D^{−1/2} = M⁻¹ for M = κ(X_L, X_L) + γI, against numpy.linalg.inv."""
    q, k, _ = _qkv(4)
    landmarks = np.array([0, 3, 3, 7, 12])
    f = skyformer_factors(q, k, landmarks, gamma=0.1, pinv="exact")
    points = np.concatenate([q, k]) / q.shape[-1] ** 0.25
    X_L = points[landmarks]
    M = np.exp(-np.sum((X_L[:, None] - X_L[None]) ** 2, axis=-1) / 2) + 0.1 * np.eye(5)
    np.testing.assert_allclose(f.M, M, **TIGHT)
    np.testing.assert_allclose(f.W, np.linalg.inv(M), **TIGHT)
    np.testing.assert_allclose(f.X_L, X_L, **TIGHT)


def test_the_iteration_converges_to_the_exact_inverse():
    """Lemma 3: the preconditioned matrix has its spectrum in (0, 1], and the iteration converges from there."""
    q, k, v = _qkv(5)
    f = skyformer_factors(q, k, [0, 3, 5, 7, 12], pinv="exact")
    M_hat = f.M / np.sqrt(np.outer(f.M.sum(axis=-1), f.M.sum(axis=-1)))
    eig = np.linalg.eigvalsh(M_hat)
    assert eig.min() > 0 and abs(eig.max() - 1) < 1e-12          # D^{1/2}1 is an eigenvector of eigenvalue 1
    exact = skyformer_attention(q, k, v, landmarks=[0, 3, 5, 7, 12], pinv="exact")
    six = skyformer_attention(q, k, v, landmarks=[0, 3, 5, 7, 12])
    many = skyformer_attention(q, k, v, landmarks=[0, 3, 5, 7, 12], iterations=20)
    np.testing.assert_allclose(many, exact, **TIGHT)
    assert np.abs(six - exact).max() > 1e-8                        # the official 6 steps have not converged here


def test_repeated_landmarks_change_nothing_without_regularisation():
    """C̄S(SᵀC̄S)⁺SᵀC̄ depends on S through the span of C̄^{1/2}S only: a repeated column adds nothing."""
    q, k, v = _qkv(6)
    once = skyformer_attention(q, k, v, landmarks=[0, 3, 7, 12], gamma=0.0, pinv="exact")
    twice = skyformer_attention(q, k, v, landmarks=[0, 3, 3, 7, 12, 12], gamma=0.0, pinv="exact")
    np.testing.assert_allclose(twice, once, **TIGHT)


def test_landmark_draws():
    paper = draw_skyformer_landmarks(0, 4, 6, 1000)
    assert paper.dtype == np.int64 and paper.min() == 0 and paper.max() == 9
    official = draw_skyformer_landmarks(0, 4, 6, 7, sampling="official", shape=(2,))
    assert official.shape == (2, 7)
    assert (official[:, :3] < 4).all() and (official[:, 3:] >= 4).all()   # ⌊l/2⌋ queries, then keys
    rng = np.random.default_rng(0)
    np.testing.assert_array_equal(draw_skyformer_landmarks(0, 4, 6, 5), rng.integers(0, 10, size=5))
    q, k, v = _qkv(7)
    result = registry.get("skyformer").apply(q, k, v, rng=1, return_draws=True)
    np.testing.assert_array_equal(result.draws["landmarks"], draw_skyformer_landmarks(1, 6, 9, 4))
    np.testing.assert_array_equal(skyformer_attention(q, k, v, landmarks=[0, 1], rng=0),   # given: rng not read
                                  skyformer_attention(q, k, v, landmarks=[0, 1]))


def test_refusals_name_the_argument():
    q, k, v = _qkv(8)
    with pytest.raises(ValueError, match="causal"):
        skyformer_attention(q, k, v, rng=0, causal=True)
    with pytest.raises(ValueError, match="landmarks"):
        skyformer_attention(q, k, v, landmarks=[0, 15])
    with pytest.raises(ValueError, match=r"skyformer draws its landmarks from rng: pass rng= \(or landmarks=\)"):
        skyformer_attention(q, k, v)
    with pytest.raises(ValueError, match="num_landmarks"):
        skyformer_attention(q, k, v, landmarks=[0, 1], num_landmarks=3)
    with pytest.raises(TypeError, match="landmarks"):
        skyformer_attention(q, k, v, landmarks=[0.5, 1.0])
    with pytest.raises(ValueError, match="gamma"):
        skyformer_attention(q, k, v, landmarks=[0, 1], gamma=-1.0)
    with pytest.raises(ValueError, match="sampling"):
        skyformer_attention(q, k, v, rng=0, sampling="stratified")


def test_a_non_finite_gamma_is_named():
    """The shared finiteness check said "scale must be finite"."""
    q = np.ones((4, 2))
    with pytest.raises(ValueError, match=r"^gamma must be finite, got nan$"):
        skyformer_attention(q, q, q, rng=0, gamma=float("nan"))
