"""Performer / FAVOR+: the draw of ω, the feature maps against Lemma 1–2, and the attention paths.

Statistical checks use fixed seeds, so a run is deterministic; each bound below states the
probability that a *correct* implementation would fail it for a seed picked at random (the
false-alarm rate), with the distributional argument it rests on.
"""
from __future__ import annotations

import math
from math import comb

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from refattn import scaled_dot_product_attention
from refattn.linear.performer import draw_omega, favor_features, favor_mse, performer_attention

TIGHT = {"rtol": 1e-12, "atol": 1e-12}
KINDS = ("positive", "hyperbolic", "trig")
Z = 5.0          # two-sided normal tail 2·Φ(−5) ≈ 5.7e-7 per check (one-sided ≈ 2.9e-7)

# (x, y) pairs in d = 4 with moderate norms, chosen from Lemma 2's formulas:
PAIRS = {
    # x ≈ −y: SM small, ‖x+y‖ tiny, ‖x−y‖ large → trig MSE ≈ 550 × positive MSE
    "opposite": (np.array([0.8, 0.0, 0.0, 0.0]), np.array([-0.8, 0.1, 0.0, 0.0])),
    # x ≈ y: SM large, ‖x−y‖ small → positive MSE ≈ 1600 × trig MSE
    "close": (np.array([0.4, 0.2, 0.0, 0.0]), np.array([0.4, 0.2, 0.2, 0.0])),
    # x ⟂ y: SM = 1
    "orthogonal": (np.array([0.5, 0.0, 0.2, 0.0]), np.array([0.0, 0.6, 0.0, -0.3])),
}


def single_feature_moments(x, y, kind, orders=4):
    """E[Z^k], k = 1..orders, of one term Z of the estimate (1/r)·Σᵢ Zᵢ, exactly.

    With t = ωᵀ(x+y) ~ N(0, ‖x+y‖²) or s = ωᵀ(x−y) ~ N(0, ‖x−y‖²):
      positive    Z = Λ e^t        E[Z^k] = Λ^k e^{k²‖x+y‖²/2}
      hyperbolic  Z = Λ cosh t     cosh^k t = 2^{−k} Σ_j C(k,j) e^{(k−2j)t}
      trig        Z = H cos s      cos^k s  = 2^{−k} Σ_j C(k,j) e^{i(k−2j)s},  E e^{ias} = e^{−a²‖x−y‖²/2}
    with Λ = exp(−(‖x‖² + ‖y‖²)/2) and H = 1/Λ (sin·sin + cos·cos = cos of the difference).
    """
    zz, dd = np.sum((x + y) ** 2), np.sum((x - y) ** 2)
    lam = np.exp(-(x @ x + y @ y) / 2)
    moments = []
    for k in range(1, orders + 1):
        a2 = [(k - 2 * j) ** 2 for j in range(k + 1)]                          # (k − 2j)²
        binom = [comb(k, j) / 2**k for j in range(k + 1)]
        if kind == "positive":
            moments.append(lam**k * np.exp(k * k * zz / 2))
        elif kind == "hyperbolic":
            moments.append(lam**k * sum(c * np.exp(a * zz / 2) for c, a in zip(binom, a2, strict=True)))
        else:
            moments.append(lam**-k * sum(c * np.exp(-a * dd / 2) for c, a in zip(binom, a2, strict=True)))
    return moments


def estimate_moments(x, y, kind, r):
    """Mean, variance and 4th central moment of the r-term estimate, from the exact moments of Z."""
    e1, e2, e3, e4 = single_feature_moments(x, y, kind)
    mu2 = e2 - e1**2
    mu4 = e4 - 4 * e3 * e1 + 6 * e2 * e1**2 - 3 * e1**4
    return e1, mu2 / r, mu4 / r**3 + 3 * (r - 1) * mu2**2 / r**3   # mean of r i.i.d. terms


def iid_estimates(seed, R, r, kind, d=4):
    """R independent estimates φ(x)ᵀφ(y) of every pair, each from its own r i.i.d. projections: (R, pairs)."""
    omega = draw_omega(seed, R * r, d, orthogonal=False).reshape(R, r, d)   # R independent draws
    X = np.stack([x for x, _ in PAIRS.values()])
    Y = np.stack([y for _, y in PAIRS.values()])
    return np.sum(favor_features(X, omega, kind=kind) * favor_features(Y, omega, kind=kind), axis=-1)


def qkv(rng, n, m, d=8, d_v=3, batch=(), scale=0.5):
    """Moderate inputs: ‖q/d^{1/4}‖² ≈ 0.7, where the feature estimates are well concentrated."""
    return (scale * rng.standard_normal((*batch, n, d)), scale * rng.standard_normal((*batch, m, d)),
            rng.standard_normal((*batch, m, d_v)))


# ---------------------------------------------------------------------------------------- draw_omega

@pytest.mark.parametrize("norms", ["chi", "sqrt_d"])
def test_orthogonal_blocks_have_orthonormal_directions(norms):
    d, r = 5, 13                                                   # blocks of 5, 5 and a truncated 3
    omega = draw_omega(3, r, d, norms=norms)
    assert omega.shape == (r, d)
    U = omega / np.linalg.norm(omega, axis=1, keepdims=True)
    for start in range(0, r, d):
        block = U[start:start + d]
        np.testing.assert_allclose(block @ block.T, np.eye(len(block)), atol=1e-12, err_msg=f"block at {start}")


def test_orthogonal_directions_are_the_gram_schmidt_factor_of_the_draws():
    # The sign fix makes Q the Gram–Schmidt factor (unique QR with diag(R) > 0), whatever LAPACK does.
    d, r, seed = 4, 10, 11
    U = draw_omega(seed, r, d, norms="sqrt_d") / np.sqrt(d)
    rng = np.random.default_rng(seed)
    expected = []
    for _ in range(3):                                             # ⌈10/4⌉ blocks, drawn in order
        G = rng.standard_normal((d, d))
        Q = np.zeros((d, d))
        for j in range(d):                                         # modified Gram–Schmidt on columns
            w = G[:, j].copy()
            for i in range(j):
                w -= (Q[:, i] @ w) * Q[:, i]
            Q[:, j] = w / np.linalg.norm(w)
        expected.append(Q.T)
    np.testing.assert_allclose(U, np.concatenate(expected)[:r], atol=1e-12)


def test_chi_lengths_are_the_norms_of_the_gaussian_vectors_drawn_after_the_blocks():
    d, r, seed = 6, 15, 5
    omega = draw_omega(seed, r, d)
    rng = np.random.default_rng(seed)
    for _ in range(3):                                             # the ⌈15/6⌉ orthogonal blocks
        rng.standard_normal((d, d))
    lengths = np.linalg.norm(rng.standard_normal((r, d)), axis=1)
    np.testing.assert_allclose(np.linalg.norm(omega, axis=1), lengths, rtol=1e-14)


def test_sqrt_d_lengths_are_exact():
    for orthogonal in (True, False):
        omega = draw_omega(2, 11, 7, orthogonal=orthogonal, norms="sqrt_d")
        np.testing.assert_allclose(np.linalg.norm(omega, axis=1), np.sqrt(7), rtol=1e-14)


def test_iid_draw_is_the_gaussian_matrix_itself():
    G = np.random.default_rng(8).standard_normal((9, 3))
    np.testing.assert_array_equal(draw_omega(8, 9, 3, orthogonal=False), G)
    unit = draw_omega(8, 9, 3, orthogonal=False, norms="sqrt_d") / np.sqrt(3)
    np.testing.assert_allclose(unit, G / np.linalg.norm(G, axis=1, keepdims=True), rtol=1e-14)


@pytest.mark.parametrize("orthogonal", [True, False])
def test_chi_rows_have_mean_squared_norm_d(orthogonal):
    # Σᵢ‖ωᵢ‖² is exactly χ²(r·d) for chi lengths (independent of the directions, or Gaussian rows):
    # the central 1 − 1e-6 interval of that law is the acceptance region (false alarm 1e-6).
    d, r = 8, 4000
    total = np.sum(draw_omega(21, r, d, orthogonal=orthogonal) ** 2)
    lo, hi = stats.chi2.ppf(5e-7, r * d), stats.chi2.isf(5e-7, r * d)
    assert lo < total < hi, f"Σ‖ω‖² = {total:.1f} outside [{lo:.1f}, {hi:.1f}] (mean {r * d})"


def test_draws_are_reproducible_and_seeds_differ():
    a = draw_omega(7, 12, 5)
    np.testing.assert_array_equal(draw_omega(7, 12, 5), a)
    np.testing.assert_array_equal(draw_omega(np.random.default_rng(7), 12, 5), a)
    assert not np.array_equal(draw_omega(8, 12, 5), a)


# ------------------------------------------------------------------------------------ favor_features

def test_features_match_the_paper_formulas_elementwise(rng):
    # Eq. (5) with Lemma 1's h and f, written as loops over rows and features.
    x, omega = rng.standard_normal((2, 3, 4)), 0.7 * rng.standard_normal((5, 4))
    r = 5
    for kind in KINDS:
        phi = favor_features(x, omega, kind=kind)
        assert phi.shape == (2, 3, r if kind == "positive" else 2 * r)
        for b in range(2):
            for t in range(3):
                xv = x[b, t]
                w = [omega[i] @ xv for i in range(r)]
                if kind == "positive":
                    ref = [math.exp(-xv @ xv / 2) * math.exp(wi) / math.sqrt(r) for wi in w]
                elif kind == "hyperbolic":
                    ref = [math.exp(-xv @ xv / 2) * math.exp(s * wi) / math.sqrt(2 * r) for s in (1, -1) for wi in w]
                else:
                    ref = [math.exp(xv @ xv / 2) * f(wi) / math.sqrt(r) for f in (math.sin, math.cos) for wi in w]
                np.testing.assert_allclose(phi[b, t], ref, **TIGHT, err_msg=f"{kind} [{b}, {t}]")


def test_feature_dot_products_are_the_lemma_estimators(rng):
    # φ(x)ᵀφ(y) = Λ/r Σ e^{ωᵢᵀz} (positive), Λ/r Σ cosh ωᵢᵀz (hyperbolic), Λ⁻¹/r Σ cos ωᵢᵀ(x−y) (trig)
    x, y, omega = 0.5 * rng.standard_normal(4), 0.5 * rng.standard_normal(4), rng.standard_normal((7, 4))
    lam = np.exp(-(x @ x + y @ y) / 2)
    expected = {"positive": lam * np.mean(np.exp(omega @ (x + y))),
                "hyperbolic": lam * np.mean(np.cosh(omega @ (x + y))),
                "trig": np.mean(np.cos(omega @ (x - y))) / lam}
    for kind in KINDS:
        est = favor_features(x[None], omega, kind=kind) @ favor_features(y[None], omega, kind=kind).T
        np.testing.assert_allclose(est.item(), expected[kind], rtol=1e-13, err_msg=kind)


def test_lemma2_equals_the_variance_from_exact_moments():
    # Independent derivation: E[Z] = SM (Lemma 1) and Var[(1/r)ΣZᵢ] = Lemma 2's MSE (Eq. 8).
    for name, (x, y) in PAIRS.items():
        for kind in KINDS:
            mean, var, _ = estimate_moments(x, y, kind, 16)
            np.testing.assert_allclose(mean, np.exp(x @ y), rtol=1e-13, err_msg=f"{kind} {name}")
            # Var = E[Z²] − E[Z]² cancels: its rounding is ~eps·E[Z²]/Var, and E[Z²]/Var reaches 2e4 on
            # these pairs ("opposite", hyperbolic), ~5e-12; 1e-9 leaves 100× for the exps on both sides.
            np.testing.assert_allclose(favor_mse(x, y, 16, kind=kind), var, rtol=1e-9, err_msg=f"{kind} {name}")


@pytest.mark.parametrize("kind", KINDS)
def test_estimates_are_unbiased(kind):
    # Mean of R = 20000 independent estimates (r = 16 i.i.d. projections each) against exp(xᵀy),
    # within Z·σ/√R with σ² the exact variance (Lemma 2, checked above). The grand mean is over
    # 320000 i.i.d. terms, log-normal-like with log-sd ≤ 0.92 (skewness ≤ 5), so its skewness is
    # ≤ 0.01 and the normal tail applies: false alarm ≈ 6e-7 per pair (distribution-free
    # Chebyshev: ≤ 1/Z² = 4 %).
    R, r = 20_000, 16
    est = iid_estimates(101, R, r, kind)
    for i, (name, (x, y)) in enumerate(PAIRS.items()):
        sm = np.exp(x @ y)
        sigma = np.sqrt(favor_mse(x, y, r, kind=kind))
        assert abs(est[:, i].mean() - sm) <= Z * sigma / np.sqrt(R), f"{kind} {name}: mean {est[:, i].mean()} vs {sm}"


@pytest.mark.parametrize("kind", KINDS)
def test_empirical_mse_matches_lemma2(kind):
    # Empirical MSE = mean of W = (Ŝ − SM)² over R i.i.d. draws; SE = √((μ₄ − MSE²)/R) with μ₄ the
    # exact 4th central moment of Ŝ (from the exact moments of one term). W is skewed (skewness
    # ≤ 12 for these pairs, so ≤ 0.09 for the mean of R = 20000): by Cornish–Fisher the nominal 5 SE
    # bound sits ≥ 4.6 real SE out, false alarm ≲ 4e-6 per pair (over 100 seeds the z-scores had
    # sd 0.87–1.05, max |z| 4.0). Relative SE is 1–2 %, so the check resolves ±10 % of Eq. (8).
    R, r = 20_000, 16
    est = iid_estimates(202, R, r, kind)
    for i, (name, (x, y)) in enumerate(PAIRS.items()):
        sm = np.exp(x @ y)
        _, var, mu4 = estimate_moments(x, y, kind, r)
        mse = favor_mse(x, y, r, kind=kind)
        se = np.sqrt((mu4 - var**2) / R)
        empirical = np.mean((est[:, i] - sm) ** 2)
        assert abs(empirical - mse) <= Z * se, f"{kind} {name}: {empirical:.4g} vs Lemma 2 {mse:.4g} ± {se:.2g}"


def test_trig_is_worse_where_the_kernel_is_small_and_positive_where_it_is_large():
    # Lemma 2's ratios are ≈ 550 and ≈ 1/1600 here; the empirical MSEs (±2 % each) must show it.
    R, r = 20_000, 16
    mse = {kind: np.mean((iid_estimates(303, R, r, kind) - [np.exp(x @ y) for x, y in PAIRS.values()]) ** 2, axis=0)
           for kind in ("positive", "trig")}
    opposite, close = list(PAIRS).index("opposite"), list(PAIRS).index("close")
    assert mse["trig"][opposite] > 100 * mse["positive"][opposite]
    assert mse["positive"][close] > 100 * mse["trig"][close]


def test_orthogonal_features_do_not_increase_the_mse():
    # Theorem 2 (Eq. 10), r = d = 16: MSE_ort ≤ MSE_iid − 2(r−1)/(r(d+2))·(SM − Λ)². One-sided check
    # of the empirical orthogonal MSE over R = 16000 independent orthogonal draws against that bound
    # plus Z·SE, SE the empirical sd of W = (Ŝ − SM)² over √R: the self-normalised mean (a t-statistic;
    # W has all moments) is asymptotically normal; with W's skewness ≈ 8 (→ 0.06 for the mean) the
    # one-sided false alarm is ≲ 2e-6 (over 20 seeds the z-scores were all < 0, as Theorem 2's gap
    # predicts). The i.i.d. MSE exceeds the bound by ≈ 10 SE, so features that were not orthogonal
    # would fail the second assertion.
    d = r = 16
    R = 16_000
    x, y = np.zeros(d), np.zeros(d)
    x[:4], y[:4] = [0.5, 0.3, -0.2, 0.1], [0.4, 0.1, 0.3, -0.2]
    sm, lam = np.exp(x @ y), np.exp(-(x @ x + y @ y) / 2)
    omega = draw_omega(404, R * r, d).reshape(R, r, d)             # blocks of d rows: R independent draws
    est = np.sum(favor_features(x[None], omega) * favor_features(y[None], omega), axis=-1)[:, 0]
    W = (est - sm) ** 2
    bound = favor_mse(x, y, r) - 2 * (r - 1) / (r * (d + 2)) * (sm - lam) ** 2
    se = W.std(ddof=1) / np.sqrt(R)
    assert W.mean() <= bound + Z * se, f"orthogonal MSE {W.mean():.4g} > Theorem 2 bound {bound:.4g} + {Z} × {se:.2g}"
    assert bound + Z * se < favor_mse(x, y, r)                     # the check has power against i.i.d.


def test_orthogonal_estimates_are_unbiased_along_the_axes():
    # Orthogonal rows must stay marginally N(0, I): without the sign fix LAPACK's Householder QR
    # gives every block a first direction with a negative first coordinate, and for x + y along e₁
    # the mean estimate falls to ≈ 1.01 instead of exp(xᵀy) ≈ 1.17 (d = 4), a ≈ 40 SE miss here.
    # σ: by Theorem 2 the orthogonal variance is at most Lemma 2's i.i.d. variance (r = d), a
    # conservative σ, so the false alarm is below the normal 6e-7 per pair.
    d = r = 4
    R = 20_000
    omega = draw_omega(606, R * r, d).reshape(R, r, d)             # R independent orthogonal blocks
    for x, y in [(np.array([0.4, 0, 0, 0]), np.array([0.4, 0, 0, 0])),
                 (np.array([0.0, -0.5, 0, 0]), np.array([0.0, -0.3, 0, 0])),
                 PAIRS["orthogonal"]]:
        est = np.sum(favor_features(x[None], omega) * favor_features(y[None], omega), axis=-1)[:, 0]
        sm = np.exp(x @ y)
        assert abs(est.mean() - sm) <= Z * np.sqrt(favor_mse(x, y, r) / R), f"x={x}, y={y}: {est.mean()} vs {sm}"


def test_eps_biases_the_estimate_by_two_eps_plus_eps_squared():
    # φᵢ = (aᵢ + ε)/√r with E[aᵢ] = 1 ⇒ E[φ(x)ᵀφ(y)] = SM + 2ε + ε², exactly; the same draws
    # with ε = 0 pin the difference per draw: (ε/r)Σ(aᵢ + bᵢ) + ε².
    eps, R, r = 0.05, 20_000, 16
    for kind in ("positive", "hyperbolic"):
        omega = draw_omega(505, R * r, 4, orthogonal=False).reshape(R, r, 4)
        x, y = PAIRS["orthogonal"]
        px, py = (favor_features(v[None], omega, kind=kind) for v in (x, y))
        px_e, py_e = (favor_features(v[None], omega, kind=kind, eps=eps) for v in (x, y))
        F = px.shape[-1]
        diff = np.sum(px_e * py_e, axis=-1) - np.sum(px * py, axis=-1)
        np.testing.assert_allclose(diff, eps / np.sqrt(F) * np.sum(px + py, axis=-1) + eps**2, rtol=1e-11)
        # E[diff] = 2ε + ε² exactly; the grand mean is over 320000 log-normal-like terms (log-sd
        # ≤ 0.7, skewness of the mean ≤ 0.01), so the empirical SE is reliable: false alarm ≈ 6e-7.
        mean, se = diff.mean(), diff.std(ddof=1) / np.sqrt(R)
        assert abs(mean - (2 * eps + eps**2)) <= Z * se, f"{kind}: bias {mean} vs {2 * eps + eps**2}"
        assert mean > 100 * se                                     # the bias is visible, far beyond noise


def test_stabilizer_scales_query_rows_and_the_whole_key_tensor(rng):
    x, omega = rng.standard_normal((2, 5, 4)), draw_omega(1, 6, 4)
    for kind in ("positive", "hyperbolic"):
        plain = favor_features(x, omega, kind=kind)
        ratio_q = favor_features(x, omega, kind=kind, stabilize=True, is_query=True) / plain
        ratio_k = favor_features(x, omega, kind=kind, stabilize=True, is_query=False) / plain
        np.testing.assert_allclose(ratio_q, np.broadcast_to(ratio_q[..., :1], ratio_q.shape), rtol=1e-12)
        np.testing.assert_allclose(ratio_k, np.broadcast_to(ratio_k[..., :1, :1], ratio_k.shape), rtol=1e-12)
        u = x @ omega.T
        u = u if kind == "positive" else np.concatenate([u, -u], axis=-1)
        np.testing.assert_allclose(ratio_q[..., 0], np.exp(-u.max(axis=-1)), rtol=1e-12)
        np.testing.assert_allclose(ratio_k[:, 0, 0], np.exp(-u.max(axis=(-2, -1))), rtol=1e-12)
        assert ratio_k.max() <= 1.0 and ratio_q.max() <= 1.0
    ratio_t = favor_features(x, omega, kind="trig", stabilize=True) / favor_features(x, omega, kind="trig")
    np.testing.assert_allclose(ratio_t[:, 0, 0], np.exp(-0.5 * np.max(np.sum(x * x, -1), axis=-1)), rtol=1e-12)


def test_features_accept_one_omega_per_batch_item(rng):
    x, omega = rng.standard_normal((3, 4, 5)), rng.standard_normal((3, 6, 5))
    batched = favor_features(x, omega, kind="hyperbolic")
    for b in range(3):
        np.testing.assert_allclose(batched[b], favor_features(x[b], omega[b], kind="hyperbolic"), **TIGHT)


# ------------------------------------------------------------------------------- performer_attention

@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("n", "m"), [(5, 8), (8, 5)])
def test_quadratic_right_and_scan_agree(rng, kind, n, m):
    q, k, v = qkv(rng, n, m, batch=(2,))
    opts = {"num_features": 24, "rng": 9, "kind": kind}
    np.testing.assert_allclose(performer_attention(q, k, v, method="right", **opts),
                               performer_attention(q, k, v, **opts), **TIGHT)
    for causal in (True, "bottom-right"):
        np.testing.assert_allclose(performer_attention(q, k, v, causal=causal, method="scan", **opts),
                                   performer_attention(q, k, v, causal=causal, **opts), **TIGHT,
                                   err_msg=f"causal={causal}")


@settings(max_examples=30)
@given(st.integers(1, 7), st.integers(1, 9), st.integers(1, 6), st.integers(0, 2**32 - 1),
       st.sampled_from(["positive", "hyperbolic"]), st.booleans())
def test_weights_are_a_distribution_per_row(n, m, d, seed, kind, causal):
    rng = np.random.default_rng(seed)
    q, k, v = qkv(rng, n, m, d=d)
    out, A = performer_attention(q, k, v, num_features=8, rng=seed, kind=kind, causal=causal, return_weights=True)
    assert (A >= 0).all()
    np.testing.assert_allclose(A.sum(axis=-1), 1.0, **TIGHT)
    np.testing.assert_allclose(out, A @ v, **TIGHT)


def test_trig_weights_sum_to_one(rng):
    q, k, v = qkv(rng, 6, 9)
    _, A = performer_attention(q, k, v, num_features=16, rng=2, kind="trig", return_weights=True)
    np.testing.assert_allclose(A.sum(axis=-1), 1.0, **TIGHT)


def test_explicit_omega_equals_the_rng_draw(rng):
    q, k, v = qkv(rng, 5, 7)
    for orthogonal, norms in [(True, "chi"), (False, "sqrt_d")]:
        drawn = performer_attention(q, k, v, num_features=20, rng=4, orthogonal=orthogonal, norms=norms)
        omega = draw_omega(4, 20, 8, orthogonal=orthogonal, norms=norms)
        np.testing.assert_array_equal(performer_attention(q, k, v, omega=omega), drawn)
        np.testing.assert_array_equal(performer_attention(q, k, v, omega=omega, num_features=20), drawn)


def test_default_num_features_is_d_log_d(rng):
    q, k, v = qkv(rng, 4, 6, d=16)                                 # round(16 · ln 16) = 44
    np.testing.assert_array_equal(performer_attention(q, k, v, rng=3),
                                  performer_attention(q, k, v, omega=draw_omega(3, 44, 16)))


def test_scores_estimate_softmax_of_qk_over_sqrt_d(rng):
    # The d^{-1/4} scaling: with many projections the weights approach softmax(qkᵀ/√d). With
    # r = 2¹⁶ i.i.d. features each score has relative sd ≤ √(e^{‖z̃‖²}/r) ≤ 1.2 % (‖z̃‖² ≤ 2.1 here),
    # a weight (a ratio of such means) ≲ 2 %, so rtol 10 % is > 5 σ (measured max 0.7 % over 5
    # seeds); with these inputs a wrong scaling (d^{-1/2} or none) misses by 19 % or 42 %.
    q, k, v = qkv(rng, 3, 4, d=8, scale=0.4)
    _, A = performer_attention(q, k, v, num_features=2**16, rng=6, orthogonal=False, return_weights=True)
    _, A_exact = scaled_dot_product_attention(q, k, v, return_weights=True)
    np.testing.assert_allclose(A, A_exact, rtol=0.1)


@pytest.mark.parametrize("kind", ["positive", "hyperbolic"])
def test_error_against_softmax_falls_as_features_grow(rng, kind):
    # RMS output error averaged over 40 feature seeds at r = 16, 64, 256, 1024. The estimate's sd
    # scales as r^{-1/2} (Lemma 2), so each 4× step should about halve the error. Measured over 40
    # draws of (q, k, v): step ratios have mean 0.52–0.61, sd ≤ 0.08, max 0.92; the 16 → 1024 ratio
    # has mean 0.18, sd 0.026 (theory 0.125). Required: every step decreases (ratio < 1, > 5 sd from
    # the mean) and the whole grid gains 2.5× (ratio < 0.4, > 8 sd).
    q, k, v = qkv(rng, 10, 13)
    exact = scaled_dot_product_attention(q, k, v)
    errors = [np.mean([np.sqrt(np.mean((performer_attention(q, k, v, num_features=r, rng=s, kind=kind) - exact) ** 2))
                       for s in range(40)]) for r in (16, 64, 256, 1024)]
    assert all(fine < coarse for coarse, fine in zip(errors[:-1], errors[1:], strict=True)), f"errors {errors}"
    assert errors[-1] < 0.4 * errors[0], f"errors {errors}"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("causal", [False, True])
def test_stabilizer_changes_the_output_only_by_rounding(rng, kind, causal):
    # exp(u − ‖x‖²/2 − c) versus exp(u − ‖x‖²/2): arguments O(5), so each feature differs by a few
    # ulps (≤ 1e-15 relative) and the row-normalised output by ≤ F·1e-15; 1e-12 leaves margin.
    q, k, v = qkv(rng, 6, 9, batch=(2,))
    opts = {"num_features": 32, "rng": 12, "kind": kind, "causal": causal, "return_weights": True}
    out, A = performer_attention(q, k, v, **opts)
    out_s, A_s = performer_attention(q, k, v, stabilize=True, **opts)
    np.testing.assert_allclose(out_s, out, **TIGHT)
    np.testing.assert_allclose(A_s, A, **TIGHT)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("causal", "n", "m"), [(True, 7, 9), ("bottom-right", 6, 9), ("bottom-right", 9, 6)])
@pytest.mark.parametrize("method", ["equation", "scan"])
def test_causal_stabilizer_cancels_where_it_matters(rng, kind, causal, n, m, method):
    # Inputs 2.5× the moderate ones: |ωᵀk̃| up to ~8 and ‖k̃‖²/2 up to ~5, and the running key maximum grows
    # along the keys (1 to 4 distinct values per sequence), so the scan rescales its state. Row i's features are
    # all scaled by e^{−C_{l(i)}}, which cancels in its normalisation; what remains is rounding: each exp
    # argument (|·| ≤ ~20) carries ~20·2⁻⁵³ ≈ 2e-15 relative error, and the scan multiplies by at most m − 1 = 8
    # rescaling factors of the same accuracy, so each feature is within ~2e-14 relative and the normalised
    # output (values O(1)) within that; 1e-12 leaves a wide margin.
    q, k, v = qkv(rng, n, m, batch=(2,), scale=1.25)
    opts = {"num_features": 16, "rng": 4, "kind": kind, "causal": causal, "method": method}
    out = performer_attention(q, k, v, **opts)
    out_s = performer_attention(q, k, v, stabilize=True, **opts)
    assert np.isfinite(out).all() and np.isfinite(out_s).all()
    np.testing.assert_allclose(out_s, out, **TIGHT)


@pytest.mark.parametrize("kind", ["positive", "hyperbolic"])
@pytest.mark.parametrize(("causal", "n", "m"), [(True, 6, 8), ("bottom-right", 5, 8), ("bottom-right", 8, 5)])
@pytest.mark.parametrize("method", ["equation", "scan"])
def test_causal_stabilizer_with_eps_is_the_official_formula_with_each_rows_own_maximum(rng, kind, causal, n, m,
                                                                                         method):
    # A loop over (i, j): φ⁽ⁱ⁾(k_j) = (exp(ωᵀk̃_j − ‖k̃_j‖²/2 − C_i) + ε)/√F with C_i the maximum of ωᵀk̃ over the
    # keys row i sees (official code: over every key), φ(q_i) the official per-row query features.
    q, k, v = qkv(rng, n, m, scale=1.25)
    eps, omega = 1e-3, draw_omega(2, 6, 8)
    q_t, k_t = q * 8**-0.25, k * 8**-0.25
    u = k_t @ omega.T
    u = u if kind == "positive" else np.concatenate([u, -u], axis=-1)     # (m, F)
    F = u.shape[-1]
    phi_q = favor_features(q_t, omega, kind=kind, stabilize=True, is_query=True, eps=eps)
    delta = 0 if causal is True else m - n
    expected = np.zeros((n, 3))
    for i in range(n):
        seen = range(min(i + delta, m - 1) + 1)
        if not seen:
            continue
        C = max(u[j].max() for j in seen)
        s = [phi_q[i] @ ((np.exp(u[j] - 0.5 * k_t[j] @ k_t[j] - C) + eps) / np.sqrt(F)) for j in seen]
        expected[i] = sum(s_j * v[j] for s_j, j in zip(s, seen, strict=True)) / sum(s)
    out = performer_attention(q, k, v, omega=omega, kind=kind, causal=causal, method=method, stabilize=True, eps=eps)
    np.testing.assert_allclose(out, expected, **TIGHT)


def test_trig_query_stabilizer_is_each_rows_own_norm(rng):
    # is_query=True shifts each row by its own ‖x‖²/2: h(x) = 1, one factor per row (it cancels in attention).
    x, omega = rng.standard_normal((2, 5, 4)), draw_omega(1, 6, 4)
    u = x @ omega.T
    np.testing.assert_allclose(favor_features(x, omega, kind="trig", stabilize=True, is_query=True),
                               np.concatenate([np.sin(u), np.cos(u)], axis=-1) / np.sqrt(6), **TIGHT)


def test_zero_width_inputs_name_d_k(rng):
    with pytest.raises(ValueError, match=r"scales q and k by d_k\^\(-1/4\): needs d_k >= 1, got q shape \(4, 0\)"):
        performer_attention(np.zeros((4, 0)), np.zeros((5, 0)), np.ones((5, 2)), omega=np.zeros((3, 0)))


def test_stabilized_batch_equals_a_stack_of_single_calls(rng):
    # The key maximum is taken per batch item, so batching does not couple items.
    q, k, v = qkv(rng, 5, 7, batch=(3,))
    opts = {"num_features": 16, "rng": 1, "stabilize": True, "eps": 1e-3}
    batched = performer_attention(q, k, v, **opts)
    for b in range(3):
        np.testing.assert_allclose(batched[b], performer_attention(q[b], k[b], v[b], **opts), **TIGHT)


@pytest.mark.parametrize("method", ["equation", "scan"])
@pytest.mark.parametrize("eps", [0.0, 1e-3])
def test_causal_outputs_ignore_the_future_eps_included(rng, method, eps):
    # The key maximum is taken over the keys each row sees, so the official ε added after it no
    # longer lets future keys reach past rows (the sequence-wide maximum did).
    q, k, v = qkv(rng, 8, 8)
    k2, v2 = k.copy(), v.copy()
    k2[5:] *= 6.0                                                  # future keys with a larger ωᵀk
    v2[5:] = rng.standard_normal(v2[5:].shape)
    opts = {"num_features": 16, "rng": 3, "causal": True, "stabilize": True, "eps": eps, "method": method}
    np.testing.assert_array_equal(performer_attention(q, k2, v2, **opts)[:5], performer_attention(q, k, v, **opts)[:5])


def test_large_eps_pulls_the_weights_to_uniform(rng):
    # φᵀφ = (1/F)Σ(a + ε)(b + ε) → ε² for every pair as ε grows: the bias does not cancel in A.
    q, k, v = qkv(rng, 4, 6)
    _, A = performer_attention(q, k, v, num_features=8, rng=0, eps=1e6, return_weights=True)
    # (a_i + ε)·(b_i + ε) = ε²(1 + (a_i + b_i)/ε + …): weights differ from 1/6 by ~(a + b)/ε; the features
    # are ≤ ~1 at these norms, so ~1e-6 for ε = 1e6 (3.7e-7 measured); 1e-5 leaves a 10× margin.
    np.testing.assert_allclose(A, 1 / 6, rtol=1e-5)
    out0 = performer_attention(q, k, v, num_features=8, rng=0)
    assert np.max(np.abs(performer_attention(q, k, v, num_features=8, rng=0, eps=1e-2) - out0)) > 1e-5


def test_fully_masked_rows_follow_the_policy(rng):
    q, k, v = qkv(rng, 6, 4)                                       # bottom-right, n > m: rows 0, 1 see nothing
    out = performer_attention(q, k, v, num_features=8, rng=0, causal="bottom-right")
    np.testing.assert_array_equal(out[:2], 0.0)
    nan = performer_attention(q, k, v, num_features=8, rng=0, causal="bottom-right", fully_masked="nan")
    assert np.isnan(nan[:2]).all() and np.isfinite(nan[2:]).all()


# ----------------------------------------------------------------------------------------- bad input

def test_bad_input_is_refused(rng):
    q, k, v = qkv(rng, 4, 5, d=6)
    with pytest.raises(ValueError, match=r"omega has d=5 columns but the inputs have d=6"):
        performer_attention(q, k, v, omega=np.ones((8, 5)))
    with pytest.raises(ValueError, match="omega must have shape"):
        performer_attention(q, k, v, omega=np.ones(6))
    with pytest.raises(ValueError, match="kind must be one of"):
        performer_attention(q, k, v, rng=0, kind="relu")
    with pytest.raises(ValueError, match="norms must be one of"):
        performer_attention(q, k, v, rng=0, norms="unit")
    with pytest.raises(ValueError, match="norms must be one of"):
        draw_omega(0, 4, 3, norms="chi2")
    with pytest.raises(ValueError, match=r"^performer_positive draws ω from rng: pass rng= \(or omega=\)$"):
        performer_attention(q, k, v)
    omega = draw_omega(0, 8, 6)                                    # a given draw wins: rng is unused
    np.testing.assert_array_equal(performer_attention(q, k, v, rng=0, omega=omega),
                                  performer_attention(q, k, v, omega=omega))
    for bad in (0, -3, True, 2.0):
        with pytest.raises(ValueError, match="num_features must be a positive int"):
            performer_attention(q, k, v, rng=0, num_features=bad)
        with pytest.raises(ValueError, match="num_features must be a positive int"):
            draw_omega(0, bad, 6)
    with pytest.raises(ValueError, match=r"num_features=7 but omega has 8 rows"):
        performer_attention(q, k, v, omega=draw_omega(0, 8, 6), num_features=7)
    with pytest.raises(TypeError, match="rng must be a numpy.random.Generator"):
        performer_attention(q, k, v, rng="seed")
    with pytest.raises(TypeError, match="q must be a real floating-point array"):
        performer_attention(np.ones((4, 6), dtype=int), k, v, rng=0)
    with pytest.raises(ValueError, match="q has d_k=6 but k has d_k=5"):
        performer_attention(q, k[..., :5], v, rng=0)
    with pytest.raises(TypeError, match="orthogonal must be True or False, got"):
        draw_omega(0, 4, 3, orthogonal=1)
    with pytest.raises(ValueError, match="eps must be a finite non-negative"):
        performer_attention(q, k, v, rng=0, eps=-1e-6)
    with pytest.raises(ValueError, match="kind='trig' takes none"):
        favor_features(q, draw_omega(0, 4, 6), kind="trig", eps=1e-6)
    with pytest.raises(ValueError, match="stabilize=True needs is_query"):
        favor_features(q, draw_omega(0, 4, 6), stabilize=True)
    with pytest.raises(ValueError, match="x has d=6 but y has d=5"):
        favor_mse(np.ones(6), np.ones(5), 4)


def test_favor_features_names_batches_of_x_and_omega_that_do_not_broadcast():
    """NumPy's broadcast error from the matmul named neither argument."""
    with pytest.raises(ValueError, match=r"^leading \(batch\) dimensions do not broadcast: x \(3,\), omega \(2,\)$"):
        favor_features(np.ones((3, 5, 4)), np.ones((2, 6, 4)))
