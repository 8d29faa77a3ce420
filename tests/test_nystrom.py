"""Nyströmformer and CSALR: hand-computed cases, the landmarks against the official code's reshapes, the exact limits,
the pseudoinverse iteration (its error law, the iterations it needs, the official global initialisation failing),
the Penrose conditions, the rows (issue #14), the convolution skip, no causal form, edge sizes, nothing n × m, and
bad input. The naive loops of tests/naive.py and the registry-driven tests cover the rest."""
from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest
import scipy.ndimage

from refattn import registry, scaled_dot_product_attention
from refattn.common import MemoryBudgetError, temporary_memory_budget
from refattn.lowrank import (
    average_pool,
    draw_conv_weights,
    exact_pinv,
    iterative_pinv,
    landmark_kernels,
    landmark_segments,
    nystrom_csalr_attention,
    nystrom_factors,
    nystromformer_attention,
    penrose_residuals,
    segment_means,
)

TIGHT = {"rtol": 1e-12, "atol": 1e-12}
LN3 = math.log(3.0)


def _qkv(seed, n, m=None, d=4, d_v=3, batch=(), q_scale=1.0):
    rng = np.random.default_rng(seed)
    m = n if m is None else m
    return (q_scale * rng.standard_normal((*batch, n, d)), rng.standard_normal((*batch, m, d)),
            rng.standard_normal((*batch, m, d_v)))


# --- hand-computed cases -----------------------------------------------------------------------------

def test_one_landmark_every_query_takes_the_mean_querys_attention():
    """d = 1, scale 1, l = 1: q̃ = mean(0, 2 ln 3) = ln 3, F̃ = Ã = Ã⁺ = [[1]] (one landmark), so every row of Ŝ is
    B̃ = softmax(ln 3 · (0, 1)) = (1/4, 3/4), and the outputs are 4/4 + 8·3/4 = 7; the iteration keeps Z = 1 exactly
    (Z₀ = 1/(1·1), and ¼(13 − (15 − (7 − 1))) = 1)."""
    q, k, v = np.array([[0.0], [2 * LN3]]), np.array([[0.0], [1.0]]), np.array([[4.0], [8.0]])
    for pinv in ("iterative", "exact"):
        out, W = nystromformer_attention(q, k, v, num_landmarks=1, scale=1.0, pinv=pinv, return_weights=True)
        np.testing.assert_allclose(W, [[0.25, 0.75], [0.25, 0.75]], rtol=1e-15)
        np.testing.assert_allclose(out, [[7.0], [7.0]], rtol=1e-15)


def test_hand_computed_initial_iterate():
    """M = [[0.7, 0.3], [0.2, 0.8]]: ‖M‖₁ = max column sum = 1.1, ‖M‖∞ = max row sum = 1, so Z₀ = Mᵀ/1.1; the
    official coefficient (the largest column sum) is the same 1.1 here."""
    M = np.array([[0.7, 0.3], [0.2, 0.8]])
    np.testing.assert_allclose(iterative_pinv(M, 0), M.T / 1.1, rtol=1e-15)
    np.testing.assert_allclose(iterative_pinv(M, 0, init="official"), M.T / 1.1, rtol=1e-15)
    np.testing.assert_allclose(iterative_pinv(2 * M, 0), 2 * M.T / (2.2 * 2.0), rtol=1e-15)   # ‖2M‖∞ = 2 counts


def test_hand_computed_penrose_residuals():
    """Z = 0: ‖0 − M‖_F = √(4 + 1 + 1 + 1) = √7 and the other three vanish; Z = M⁻¹: all four vanish."""
    M = np.array([[2.0, 1.0], [1.0, 1.0]])
    r = penrose_residuals(M, np.zeros((2, 2)))
    np.testing.assert_allclose(tuple(r), (math.sqrt(7.0), 0.0, 0.0, 0.0), rtol=1e-15)
    np.testing.assert_allclose(tuple(penrose_residuals(M, np.array([[1.0, -1.0], [-1.0, 2.0]]))), 0.0, atol=0)


# --- landmarks ---------------------------------------------------------------------------------------

def test_segments_follow_the_official_t2t_vit_extension():
    """token_nystromformer.py: segs = N // l, num_k = (segs + 1)·l − N segments of segs tokens first, then l − num_k
    of segs + 1; its reshapes, transcribed, give the same means."""
    rng = np.random.default_rng(0)
    for n, l in [(7, 3), (10, 4), (9, 9), (11, 1), (64, 7)]:
        x = rng.standard_normal((2, n, 3))
        segs = n // l
        num_k = (segs + 1) * l - n
        first = x[:, : num_k * segs].reshape(2, num_k, segs, 3).mean(axis=-2) if num_k else np.zeros((2, 0, 3))
        last = x[:, num_k * segs:].reshape(2, l - num_k, segs + 1, 3).mean(axis=-2)
        np.testing.assert_allclose(segment_means(x, l), np.concatenate([first, last], axis=1), **TIGHT)
        bounds = landmark_segments(n, l)
        assert bounds[0] == 0 and bounds[-1] == n and set(np.diff(bounds)) <= {segs, segs + 1}


def test_segments_are_the_papers_reshape_when_l_divides_n():
    """The paper's code: Q.reshape(..., l, n // l, d).mean(dim=-2)."""
    x = np.random.default_rng(1).standard_normal((3, 12, 5))
    np.testing.assert_allclose(segment_means(x, 4), x.reshape(3, 4, 3, 5).mean(axis=-2), **TIGHT)
    np.testing.assert_array_equal(landmark_segments(12, 4), [0, 3, 6, 9, 12])
    np.testing.assert_array_equal(landmark_segments(5, 5), np.arange(6))


def test_average_pool_drops_the_trailing_tokens_and_equals_segment_means_when_s_divides_n():
    x = np.random.default_rng(2).standard_normal((2, 7, 3))
    np.testing.assert_allclose(average_pool(x, 2), (x[:, 0:6:2] + x[:, 1:6:2]) / 2, **TIGHT)
    y = x[:, :6]
    np.testing.assert_allclose(average_pool(y, 2), segment_means(y, 3), **TIGHT)
    np.testing.assert_array_equal(average_pool(x, 1), x)


def test_the_official_scaling_of_q_and_k_by_d_to_the_minus_quarter_is_the_same_attention():
    """The official code multiplies Q and K by d^{-1/4} each before the segment means, then takes softmax(QKᵀ)."""
    q, k, v = _qkv(3, 10, d=8)
    quarter = 8 ** -0.25
    ours = nystromformer_attention(q, k, v, num_landmarks=5)
    official = nystromformer_attention(q * quarter, k * quarter, v, num_landmarks=5, scale=1.0)
    np.testing.assert_allclose(official, ours, **TIGHT)


# --- exact limits ------------------------------------------------------------------------------------

@pytest.mark.parametrize("batch", [(), (2, 3)])
def test_every_token_a_landmark_with_the_exact_pinv_is_softmax_attention(batch):
    q, k, v = _qkv(4, 9, batch=batch, q_scale=1.5)
    out, W = nystromformer_attention(q, k, v, num_landmarks=9, pinv="exact", return_weights=True)
    expected, S = scaled_dot_product_attention(q, k, v, return_weights=True)
    np.testing.assert_allclose(out, expected, **TIGHT)
    np.testing.assert_allclose(W, S, **TIGHT)


def test_every_token_a_landmark_with_enough_iterations_is_softmax_attention():
    """Here S = softmax(QKᵀ/√d) itself goes through the iteration: κ(S) ≈ 49, δ = σ_min²/(‖S‖₁‖S‖∞) ≈ 2.8·10⁻⁴, so
    ⌈log(1/δ)/log(13/4)⌉ + 3 = 10 steps converge (test_iterations_needed_...), where the official 6 leave an output
    error of 0.017."""
    q, k, v = _qkv(5, 8, q_scale=1.5)
    expected = scaled_dot_product_attention(q, k, v)
    np.testing.assert_allclose(nystromformer_attention(q, k, v, num_landmarks=8, iterations=10), expected, **TIGHT)
    six = nystromformer_attention(q, k, v, num_landmarks=8)
    assert np.abs(six - expected).max() > 1e-3


def test_csalr_every_token_a_landmark_with_eps_0_is_softmax_attention():
    q, k, v = _qkv(6, 9, batch=(2,), q_scale=1.5)
    out, W = nystrom_csalr_attention(q, k, v, pool=1, eps=0.0, return_weights=True)
    expected, S = scaled_dot_product_attention(q, k, v, return_weights=True)
    np.testing.assert_allclose(out, expected, **TIGHT)
    np.testing.assert_allclose(W, S, **TIGHT)


def test_csalr_error_is_linear_in_eps():
    """At s = 1: Ŝ_ε = S(S + εI)⁻¹S = S − ε S(S + εI)⁻¹ (closed form), so (Ŝ_ε − S)/ε = −I + ε S⁻¹ + O(ε²): the
    error shrinks linearly, its largest entries on the diagonal, and (Ŝ_ε − S)/ε + I is at most about ε‖S⁻¹‖."""
    q, k, v = _qkv(7, 8, q_scale=1.5)
    _, S = scaled_dot_product_attention(q, k, v, return_weights=True)
    S_inv_max = np.abs(np.linalg.inv(S)).max()
    for eps in (1e-1, 1e-3, 1e-5):
        _, W = nystrom_csalr_attention(q, k, v, pool=1, eps=eps, return_weights=True)
        np.testing.assert_allclose(W, S - eps * S @ np.linalg.inv(S + eps * np.eye(8)), **TIGHT)
        deviation = np.abs((W - S) / eps + np.eye(8)).max()
        assert deviation <= 2 * eps * S_inv_max + 1e-12 / eps, (eps, deviation)   # + rounding of W − S, over ε


def test_csalr_with_eps_0_equals_nystromformer_with_the_exact_pinv_when_s_divides_n():
    q, k, v = _qkv(8, 12, q_scale=1.5)
    np.testing.assert_allclose(nystrom_csalr_attention(q, k, v, pool=3, eps=0.0),
                               nystromformer_attention(q, k, v, num_landmarks=4, pinv="exact"), **TIGHT)


# --- the pseudoinverse iteration ---------------------------------------------------------------------

def _landmark_matrix(seed, n=64, l=8, d=16, q_scale=1.0):
    q, k, _ = _qkv(seed, n, d=d, q_scale=q_scale)
    return nystrom_factors(q, k, num_landmarks=l, pinv="exact")


def test_the_error_of_each_direction_follows_e_next_equals_e_cubed_times_3_plus_e_over_4():
    """Z_j = Mᵀg(MMᵀ), so I − MZ_j is symmetric with the singular vectors of M and eigenvalues e_j(σ): from
    e₀ = 1 − ασ² (α = 1/(‖M‖₁‖M‖∞)), e_{j+1} = e_j³(3 + e_j)/4."""
    M = _landmark_matrix(0).A_tilde
    sigma = np.linalg.svd(M, compute_uv=False)
    e = 1 - sigma**2 / (np.abs(M).sum(axis=0).max() * np.abs(M).sum(axis=1).max())
    for j in range(8):
        residual = np.eye(8) - M @ iterative_pinv(M, j)
        np.testing.assert_allclose(residual, residual.T, rtol=0, atol=1e-13)
        np.testing.assert_allclose(np.sort(np.linalg.eigvalsh((residual + residual.T) / 2)), np.sort(e), rtol=0,
                                   atol=1e-12, err_msg=f"step {j}")
        e = e**3 * (3 + e) / 4


@pytest.mark.parametrize(("seed", "l", "q_scale", "needed"), [(0, 8, 1.0, 11), (0, 8, 2.0, 10), (1, 8, 1.5, 12),
                                                            (2, 16, 1.0, 14)])
def test_iterations_needed_to_reach_the_exact_pinv(seed, l, q_scale, needed):
    """Measured: the iteration reaches exact_pinv to 1e-12 (largest entry, relative) in exactly
    ⌈log(1/δ)/log(13/4)⌉ + 3 steps, δ = σ_min²/(‖M‖₁‖M‖∞): 11, 10, 12 and 14 steps for these landmark matrices
    (n = 64, d = 16; κ ≈ 86, 41, 190 and 441); two steps fewer leave errors of 2·10⁻³ to 4·10⁻², and the official 6
    leave 0.79, 0.49, 0.97 and 0.95."""
    f = _landmark_matrix(seed, l=l, q_scale=q_scale)
    M, P = f.A_tilde, f.A_tilde_pinv
    sigma_min = np.linalg.svd(M, compute_uv=False)[-1]
    delta = sigma_min**2 / (np.abs(M).sum(axis=0).max() * np.abs(M).sum(axis=1).max())
    assert needed == math.ceil(math.log(1 / delta) / math.log(13 / 4)) + 3

    def error(steps):
        return np.abs(iterative_pinv(M, steps) - P).max() / np.abs(P).max()

    assert error(needed) <= 1e-12
    assert error(needed - 2) > 1e-9
    assert error(6) > 0.1


def _sharp_and_sunk_batch(l=16, c=3.0):
    """Two softmax matrices: one near the identity (‖·‖₁ ≈ 1.2, κ ≈ 3), one whose rows all put their mass on column
    0 (‖·‖₁ ≈ l)."""
    rng = np.random.default_rng(1)
    sharp = c * np.eye(l) + 0.5 * rng.standard_normal((l, l))
    sunk = np.zeros((l, l))
    sunk[:, 0] = 8.0
    scores = np.stack([sharp, sunk + 0.5 * rng.standard_normal((l, l))])
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_the_official_global_initialisation_fails_beside_a_matrix_of_large_norm():
    """issue #3: one coefficient for the batch is 1/max ‖·‖₁ = 1/15.9, 14 times too small for the sharp matrix
    (‖·‖₁ = 1.16), which then needs 8 steps instead of 6: after the official 6 its relative error is 1.3·10⁻³, while
    the paper's per-matrix coefficient has converged. Alone, the sharp matrix gets its own coefficient either way."""
    M = _sharp_and_sunk_batch()
    sharp_pinv = exact_pinv(M[0])
    paper, official = iterative_pinv(M, 6), iterative_pinv(M, 6, init="official")
    np.testing.assert_allclose(paper[0], sharp_pinv, rtol=0, atol=1e-12 * np.abs(sharp_pinv).max())
    assert np.abs(official[0] - sharp_pinv).max() > 1e-4 * np.abs(sharp_pinv).max()
    assert max(penrose_residuals(M[0], official[0])) > 1e-4 > 1e-12 > max(penrose_residuals(M[0], paper[0]))
    np.testing.assert_allclose(iterative_pinv(M[0], 6, init="official"), paper[0], rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(iterative_pinv(M, 8, init="official")[0], sharp_pinv, rtol=0,
                               atol=1e-12 * np.abs(sharp_pinv).max())


def test_the_official_initialisation_couples_the_batch_in_attention():
    """A batch of two sequences with n = l = 16 (each token a landmark, Ã = S): in the first q = k = √(1.5√d)·I
    (scores 1.5 on the diagonal, ‖Ã‖₁ = 1), in the second every query aligns with key 0 (‖Ã‖₁ = 14.6). With the
    paper's coefficient the first sequence's output is softmax attention to 1e-12 in the official 6 steps; with the
    official one, shared with the second sequence, it is off by 0.04."""
    n = d = 16
    rng = np.random.default_rng(2)
    q = np.stack([math.sqrt(1.5 * math.sqrt(d)) * np.eye(n), np.tile(np.eye(d)[0] * 2.0, (n, 1))])
    k = np.stack([q[0], 0.3 * rng.standard_normal((n, d))])
    k[1, 0] = 10.0 * np.eye(d)[0]                                  # every query of sequence 1 picks key 0
    v = rng.standard_normal((2, n, 3))
    expected = scaled_dot_product_attention(q[0], k[0], v[0])
    paper = nystromformer_attention(q, k, v, num_landmarks=n)
    official = nystromformer_attention(q, k, v, num_landmarks=n, init="official")
    np.testing.assert_allclose(paper[0], expected, **TIGHT)
    assert np.abs(official[0] - expected).max() > 1e-2
    np.testing.assert_allclose(nystromformer_attention(q[0], k[0], v[0], num_landmarks=n, init="official"),
                               expected, **TIGHT)


def test_exact_pinv_meets_the_penrose_conditions():
    """To 1e-12 on landmark matrices (κ ≈ 86 and 2300) and on singular ones (rank 1, rank 3 of 5, 3 × 6), the
    first residual relative to ‖M‖_F and the second to ‖Z‖_F (each is in its matrix's units)."""
    rng = np.random.default_rng(3)
    matrices = [_landmark_matrix(0).A_tilde, _landmark_matrix(0, l=16, q_scale=2.0).A_tilde, np.full((4, 4), 0.25),
                rng.standard_normal((5, 3)) @ rng.standard_normal((3, 5)), rng.standard_normal((3, 6))]
    for M in matrices:
        Z = exact_pinv(M)
        r = penrose_residuals(M, Z)
        assert r.mzm <= 1e-12 * np.linalg.norm(M) and r.zmz <= 1e-12 * np.linalg.norm(Z), (M.shape, r)
        assert max(r.mz_symmetry, r.zm_symmetry) <= 1e-12, (M.shape, r)
    batch = np.stack([matrices[0], matrices[0].T])
    np.testing.assert_allclose(exact_pinv(batch)[1], exact_pinv(matrices[0].T), rtol=0, atol=0)


def test_the_iteration_meets_the_penrose_conditions_once_converged():
    """11 steps for this matrix (test_iterations_needed_...): all four residuals below 1e-12 (relative to ‖Z‖ for
    the second); after the official 6 they are not."""
    f = _landmark_matrix(0)
    M = f.A_tilde
    Z = iterative_pinv(M, 11)
    r = penrose_residuals(M, Z)
    assert max(r.mzm, r.mz_symmetry, r.zm_symmetry) <= 1e-12 and r.zmz <= 1e-12 * np.linalg.norm(Z), r
    assert penrose_residuals(M, iterative_pinv(M, 6)).mzm > 1e-2


def test_pinv_of_zero_nan_and_empty_matrices():
    np.testing.assert_array_equal(iterative_pinv(np.zeros((2, 3, 4))), np.zeros((2, 4, 3)))
    np.testing.assert_array_equal(exact_pinv(np.zeros((3, 4))), np.zeros((4, 3)))
    M = np.stack([np.eye(2), np.full((2, 2), np.nan)])
    for Z in (exact_pinv(M), iterative_pinv(M)):
        np.testing.assert_allclose(Z[0], np.eye(2), **TIGHT)
        assert np.isnan(Z[1]).all()
    assert np.isnan(iterative_pinv(M, init="official")).all()       # one shared coefficient, NaN for all
    assert exact_pinv(np.zeros((0, 3, 3))).shape == iterative_pinv(np.zeros((0, 3, 3))).shape == (0, 3, 3)


# --- the effective matrix ----------------------------------------------------------------------------

def test_weights_are_the_product_of_the_factors_and_give_the_output():
    q, k, v = _qkv(9, 11, batch=(2,), q_scale=1.5)
    for options in ({}, {"pinv": "exact"}, {"init": "official", "iterations": 9}):
        out, W = nystromformer_attention(q, k, v, num_landmarks=4, return_weights=True, **options)
        f = nystrom_factors(q, k, num_landmarks=4, **options)
        np.testing.assert_allclose(W, np.einsum("bia,bac,bcj->bij", f.F_tilde, f.A_tilde_pinv, f.B_tilde), **TIGHT)
        np.testing.assert_allclose(out, W @ v, **TIGHT)
    out, W = nystrom_csalr_attention(q, k, v, pool=3, eps=0.3, return_weights=True)
    np.testing.assert_allclose(out, W @ v, **TIGHT)


def test_rows_sum_to_1_with_the_exact_inverse_but_not_with_6_steps_and_entries_go_negative():
    """issue #14: Ã1 = 1, so with Ã invertible Ŝ1 = F̃Ã⁻¹1 = 1 exactly; the official 6 steps are not converged here
    (δ ≈ 1e-4) and their rows drift from 1. Two equal landmark queries make Ã singular (two equal rows) and its
    pseudoinverse maps 1 to the projection of 1 on Ã's row space, not to 1: the rows drift by 0.018; two equal
    landmark keys (two equal columns) leave 1 in the row space, and the rows sum to 1."""
    q, k, v = _qkv(10, 64, d=16)
    _, exact = nystromformer_attention(q, k, v, num_landmarks=8, pinv="exact", return_weights=True)
    _, six = nystromformer_attention(q, k, v, num_landmarks=8, return_weights=True)
    np.testing.assert_allclose(exact.sum(axis=-1), 1.0, rtol=0, atol=1e-12)
    assert exact.min() < 0 and six.min() < 0
    assert np.abs(six.sum(axis=-1) - 1).max() > 1e-3
    q, k, v = _qkv(11, 12, q_scale=1.5)
    equal_queries, equal_keys = q.copy(), k.copy()
    equal_queries[2:4], equal_keys[2:4] = q[0:2], k[0:2]           # segments 0 and 1 of 2 tokens alike
    _, singular = nystromformer_attention(equal_queries, k, v, num_landmarks=6, pinv="exact", return_weights=True)
    assert np.abs(singular.sum(axis=-1) - 1).max() > 1e-2
    _, singular = nystromformer_attention(q, equal_keys, v, num_landmarks=6, pinv="exact", return_weights=True)
    np.testing.assert_allclose(singular.sum(axis=-1), 1.0, rtol=0, atol=1e-12)


@pytest.mark.parametrize("eps", [1.0, 0.1, 2.5])
def test_csalr_rows_sum_to_1_over_1_plus_eps(eps):
    q, k, v = _qkv(12, 10, batch=(3,), q_scale=1.5)
    for pool in (1, 2, 3):
        _, W = nystrom_csalr_attention(q, k, v, pool=pool, eps=eps, return_weights=True)
        np.testing.assert_allclose(W.sum(axis=-1), 1 / (1 + eps), rtol=0, atol=1e-12)


def test_landmark_kernels_rows_sum_to_1_and_a_nan_row_stays_nan():
    q, k, _ = _qkv(13, 6)
    q[2] = np.inf
    F, A, B = landmark_kernels(q, k, segment_means(q, 3), segment_means(k, 3))
    np.testing.assert_allclose(F[[0, 1, 3, 4, 5]].sum(axis=-1), 1.0, rtol=0, atol=1e-15)
    assert np.isnan(F[2]).all()
    assert np.isnan(A[1]).all() and np.isfinite(A[[0, 2]]).all()     # landmark 1 averages q_2 and q_3


# --- the convolution skip ----------------------------------------------------------------------------

def test_conv_skip_is_the_official_depthwise_convolution_per_head():
    """nn.Conv2d(h, h, (K, 1), padding=(K // 2, 0), groups=h, bias=False) on V: per head, a cross-correlation along
    the sequence with zero padding, shared by the d_v channels; K = 33 as lucidrains' default."""
    q, k, v = _qkv(14, 40, batch=(2, 3))
    w = draw_conv_weights(0, 33, (3,))
    out, W = nystromformer_attention(q, k, v, num_landmarks=5, conv_weights=w, return_weights=True)
    plain = nystromformer_attention(q, k, v, num_landmarks=5)
    for h in range(3):
        conv = scipy.ndimage.correlate1d(v[:, h], w[h], axis=-2, mode="constant", cval=0.0)
        np.testing.assert_allclose(out[:, h] - plain[:, h], conv, **TIGHT)
    np.testing.assert_allclose(out, W @ v, **TIGHT)


def test_conv_weights_are_drawn_as_pytorch_initialises_them_and_returned():
    w = draw_conv_weights(np.random.default_rng(5), 33, (4,))
    np.testing.assert_array_equal(w, np.random.default_rng(5).uniform(-1 / math.sqrt(33), 1 / math.sqrt(33), (4, 33)))
    q, k, v = _qkv(15, 7)
    mech = registry.get("nystromformer")
    result = mech.apply(q, k, v, rng=5, conv_kernel_size=3, return_draws=True)
    np.testing.assert_array_equal(result.draws["conv_weights"], draw_conv_weights(5, 3))
    np.testing.assert_array_equal(mech.apply(q, k, v, conv_weights=result.draws["conv_weights"]).output, result.output)
    assert mech.apply(q, k, v, rng=5, return_draws=True).draws == {"conv_weights": None}


# --- no causal form ----------------------------------------------------------------------------------

def test_no_causal_form_and_the_reason_why():
    q, k, v = _qkv(16, 6)
    for fn in (nystromformer_attention, nystrom_csalr_attention):
        for causal in (True, "bottom-right"):
            with pytest.raises(ValueError, match="has no causal form .*mixes later keys and values"):
                fn(q, k, v, causal=causal)
    for mech in ("nystromformer", "nystrom_csalr"):
        with pytest.raises(ValueError, match="causal"):
            registry.get(mech).apply(q, k, v, causal=True)


def test_a_later_token_changes_every_earlier_output():
    """Why there is no causal form: changing only the last key and value moves the first row's output."""
    q, k, v = _qkv(17, 8)
    before = nystromformer_attention(q, k, v, num_landmarks=4)
    k[-1], v[-1] = k[-1] + 1.0, v[-1] + 1.0
    assert np.abs(nystromformer_attention(q, k, v, num_landmarks=4)[0] - before[0]).max() > 1e-3


# --- edge sizes, non-finite input, memory, bad input -------------------------------------------------

@pytest.mark.parametrize(("fn", "mean_share"), [
    (lambda q, k, v, **o: nystromformer_attention(q, k, v, num_landmarks=2, **o), 1.0),
    (lambda q, k, v, **o: nystrom_csalr_attention(q, k, v, pool=2, **o), 0.5)], ids=["nystromformer", "csalr"])
def test_edge_sizes(fn, mean_share):
    """n = 0: no row; m = 0: zero rows (no key to see); d_v = 0; batch 0; d_k = 0 needs an explicit scale and then
    every score is 0: every factor is uniform, Ŝ = 1/m, and the output is mean(V) (CSALR with ε = 1: half of it)."""
    rng = np.random.default_rng(18)
    out, W = fn(np.zeros((0, 4)), rng.standard_normal((5, 4)), rng.standard_normal((5, 3)), return_weights=True)
    assert out.shape == (0, 3) and W.shape == (0, 5)
    out, W = fn(rng.standard_normal((5, 4)), np.zeros((0, 4)), np.zeros((0, 3)), return_weights=True)
    np.testing.assert_array_equal(out, np.zeros((5, 3)))
    assert W.shape == (5, 0)
    assert fn(*_qkv(19, 6, d_v=0)).shape == (6, 0)
    assert fn(*_qkv(20, 6, batch=(0, 2))).shape == (0, 2, 6, 3)
    q, k, v = _qkv(21, 6, d=0)
    with pytest.raises(ValueError, match="d_k=0"):
        fn(q, k, v)
    np.testing.assert_allclose(fn(q, k, v, scale=1.0), np.broadcast_to(mean_share * v.mean(axis=0), (6, 3)), **TIGHT)


def test_a_nan_reaches_every_row_of_its_sequence_only():
    q, k, v = _qkv(22, 8, batch=(2,))
    k[0, 5] = np.nan
    out = nystromformer_attention(q, k, v, num_landmarks=4)
    assert np.isnan(out[0]).all() and np.isfinite(out[1]).all()
    assert np.isnan(nystromformer_attention(q, k, v, num_landmarks=4, init="official")).all()
    csalr = nystrom_csalr_attention(q, k, v)
    assert np.isnan(csalr[0]).all() and np.isfinite(csalr[1]).all()


def test_nothing_n_by_m_is_formed():
    """n = m = 4096, l = 16: the factors take 2·n·l·8 bytes = 1 MiB; an n × m array would take 128 MiB."""
    q, k, v = _qkv(23, 4096, d=16, d_v=16)
    for fn in (lambda: nystromformer_attention(q, k, v, num_landmarks=16),
               lambda: nystrom_csalr_attention(q, k, v, pool=256)):
        tracemalloc.start()
        fn()
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < 4096 * 4096 * 8 / 16, peak
    with temporary_memory_budget(2**20), pytest.raises(MemoryBudgetError, match="return_weights"):
        nystromformer_attention(q, k, v, num_landmarks=16, return_weights=True)


@pytest.mark.parametrize(("options", "error", "match"), [
    ({"num_landmarks": 0}, ValueError, "num_landmarks must be a positive int"),
    ({"num_landmarks": True}, ValueError, "num_landmarks must be a positive int"),
    ({"num_landmarks": 7}, ValueError, r"num_landmarks=7 is more than the tokens to average: q has n=6"),
    ({"pinv": "svd"}, ValueError, "pinv must be one of"),
    ({"init": "global"}, ValueError, "init must be one of"),
    ({"iterations": -1}, ValueError, "iterations must be a non-negative int"),
    ({"conv_weights": np.ones(4)}, ValueError, "kernel_size must be odd"),
    ({"conv_weights": np.ones((5, 3))}, ValueError, r"conv_weights \(5,\)"),
    ({"scale": np.nan}, ValueError, "scale must be finite"),
])
def test_nystromformer_bad_input(options, error, match):
    q, k, v = _qkv(24, 6, batch=(2,))
    with pytest.raises(error, match=match):
        nystromformer_attention(q, k, v, **({"num_landmarks": 2} | options))


def test_nystromformer_conv_needs_n_equal_m_and_apply_checks_its_kernel():
    q, k, v = _qkv(25, 6, m=8)
    with pytest.raises(ValueError, match="conv_weights .* needs n == m; got q with n=6 and v with m=8"):
        nystromformer_attention(q, k, v, num_landmarks=2, conv_weights=np.ones(3))
    q, k, v = _qkv(25, 6)
    mech = registry.get("nystromformer")
    with pytest.raises(ValueError,
                       match=r"^nystromformer draws the skip's filter from rng: "
                             r"pass rng= \(or conv_weights=\)$"):
        mech.apply(q, k, v, conv_kernel_size=3)
    with pytest.raises(ValueError, match="conv_kernel_size must be odd"):
        nystromformer_attention(q, k, v, num_landmarks=2, conv_kernel_size=4, rng=0)
    with pytest.raises(ValueError, match="conv_weights has .* taps but conv_kernel_size=5"):
        mech.apply(q, k, v, conv_kernel_size=5, conv_weights=np.ones(3))
    drawn = nystromformer_attention(q, k, v, num_landmarks=2, conv_kernel_size=3, rng=7)
    given = nystromformer_attention(q, k, v, num_landmarks=2, conv_weights=draw_conv_weights(7, 3))
    np.testing.assert_array_equal(drawn, given)                     # the function draws the skip as apply did


@pytest.mark.parametrize(("options", "error", "match"), [
    ({"pool": 0}, ValueError, "pool must be a positive int"),
    ({"pool": 7}, ValueError, "pool=7 is longer than the n=6 tokens"),
    ({"eps": -0.1}, ValueError, "eps must be finite and >= 0"),
    ({"eps": "1"}, TypeError, "eps must be a real number"),
])
def test_csalr_bad_input(options, error, match):
    q, k, v = _qkv(26, 6)
    with pytest.raises(error, match=match):
        nystrom_csalr_attention(q, k, v, **options)


def test_csalr_needs_a_square_landmark_matrix_and_an_invertible_one():
    q, k, v = _qkv(27, 6, m=9)
    with pytest.raises(ValueError, match="pool=2 makes 3 landmark queries from n=6 but 4 landmark keys from m=9"):
        nystrom_csalr_attention(q, k, v)
    q, k, v = _qkv(27, 6, m=7)                                     # ⌊6/3⌋ = ⌊7/3⌋ = 2 windows each: square
    out, W = nystrom_csalr_attention(q, k, v, pool=3, return_weights=True)
    assert W.shape == (6, 7)
    np.testing.assert_allclose(out, W @ v, **TIGHT)
    q, k, v = _qkv(28, 6, d=0)                                     # every score 0: Ã uniform, of rank 1
    with pytest.raises(ValueError, match=r"eps·I is singular with eps=0.0"):
        nystrom_csalr_attention(q, k, v, eps=0.0, scale=1.0)


def test_the_skip_kernel_size_is_named_as_the_option():
    """conv_kernel_size=-1 was reported as "kernel_size must be a positive int"."""
    mech = registry.get("nystromformer")
    q = np.ones((4, 2))
    with pytest.raises(ValueError, match=r"^conv_kernel_size must be a positive int, got -1$"):
        mech.apply(q, q, q, rng=0, conv_kernel_size=-1)
    with pytest.raises(ValueError, match=r"^conv_kernel_size must be odd .* got conv_kernel_size=2$"):
        mech.apply(q, q, q, rng=0, conv_kernel_size=2)
