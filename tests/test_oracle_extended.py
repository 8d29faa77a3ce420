"""The mpmath tier (refattn.oracle.extended), and refattn's float64 paths held to derived bounds of it.

Error model (float64 path against the tier; u = eps/2 is float64's unit roundoff). First order in u:
the neglected terms are products of two first-order ones, below 1e-20 relative even at |s| ~ 1e4.
The tier itself is within 1 ulp <= 2u·|value| of the exact formula (mp_sdpa's Notes), and that is
added to every bound.

- Scores. S_ij = fl(fl(q_i·k_j)·scale) + B_ij. The dot product of d terms errs by at most
  d·u·Σ_c|q_ic k_jc| (any summation order, FMA or not), the product by the scale by u, the default
  scale fl(1/fl(√d)) by 2u relative, the bias addition by u·|S_ij|. Per row,
      Δ_i = (d + 3)·u·scale·max_j Σ_c|q_ic k_jc| + u·max_j |S_ij|      (absolute, allowed j only).
- Weights. α = e^{y_j} / Σ_l e^{y_l} with y_j = S_ij − max S_i. Score errors δ_j change α_j by the
  relative δ_j − Σ_l α_l δ_l (the shift cancels), at most 2Δ_i: exp's conditioning turns an absolute
  score error into a relative weight error, which is why logits |s| ~ 1e4 cost ~1e4·d·u. The
  shift's own rounding u·|y_j| does the same for entry j (its weighted mean Σ α_l u|y_l| is below
  m·u/e, since y·e^{−y} <= 1/e and Σ e^{y} >= 1). NumPy's exp and log are within 1 ulp = 2u but not
  correctly rounded (0.65 ulp is typical of the worst case); exp counts 2u for entry j and 2u in
  the sum, the sum of m positive terms (m − 1)·u, the division u, the tier 2u:
      ε_ij = 2Δ_i + u·|y_ij| + (2m + 6)·u                                  (relative).
- Output O = A V (a matmul over m): |err| <= Σ_j α_ij|v_j|(ε_ij + m·u) + 2u·|O|.
- Log-sum-exp ℓ = max S + log Σ e^{y}: ℓ is 1-Lipschitz in the scores (Δ_i); the shift, exp and
  sum roundings add (m/e + 2 + m − 1)·u, the log 2u·log m, the final addition and the tier 3u·|ℓ|:
      |err| <= Δ_i + (2m + 4)·u + 3u·|ℓ|.
- Backward (see vjp_error_bounds): a few u relative to the magnitudes of the terms summed at each
  step, propagated through dP = dO Vᵀ, δ = Σ A dP, dS = A (dP − δ), dQ = s·dS K, dK = s·dSᵀ Q,
  dV = Aᵀ dO.
- The same model with float32's u = 2⁻²⁴ bounds sdpa_vjp(..., dtype=np.float32), whose every
  intermediate is float32 (see test_sdpa_vjp_float32_matches_extended_precision).

Every bound is asserted entrywise, with no safety factor; TINY (two subnormal spacings) is added
for entries that underflow, where relative bounds mean nothing.
"""
from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from refattn import scaled_dot_product_attention, softmax
from refattn.masks import attention_mask
from refattn.oracle import extended
from refattn.oracle.extended import mp_sdpa, mp_sdpa_vjp, mp_softmax, mp_softmax_vjp
from refattn.oracle.vjp import sdpa_vjp, softmax_vjp

EPS = np.finfo(np.float64).eps
U = EPS / 2                                                        # float64 unit roundoff
U32 = float(np.finfo(np.float32).eps) / 2                          # float32 unit roundoff, 2⁻²⁴
TINY = 1e-323                                                      # two subnormal spacings


def within(actual, expected, bound, what):
    """Assert |actual − expected| <= bound entrywise, naming the worst entry's error/bound ratio."""
    actual, expected, bound = np.broadcast_arrays(*(np.asarray(x, float) for x in (actual, expected, bound)))
    err = np.abs(actual - expected)
    ratio = np.max(err / bound) if err.size else 0.0
    assert np.all(err <= bound), f"{what}: max error/bound = {ratio:.3g}"


def swap(x):
    return np.swapaxes(x, -1, -2)


def sum_to(x, shape):
    """Sum over the axes along which an input of ``shape`` was broadcast (as a VJP does)."""
    lead = x.ndim - len(shape)
    x = x.sum(axis=tuple(range(lead)))
    axes = tuple(a for a, s in enumerate(shape) if s == 1 and x.shape[a] != 1)
    return x.sum(axis=axes, keepdims=True).reshape(shape)


def scores_model(q, k, mask, causal, scale, u=U, exp_ulps=1):
    """Allowed pairs, float64 scores, Δ_i (..., n, 1) and ε_ij (..., n, m) of the module docstring.

    ``u`` is the unit roundoff of the arithmetic bounded, ``exp_ulps`` the accuracy of its ``exp``:
    the (2m + 6)·u of the docstring is (2m + 2 + 4·exp_ulps)·u (exp counts 2·exp_ulps·u for the
    entry and as much in the sum).
    """
    n, m, d = q.shape[-2], k.shape[-2], q.shape[-1]
    s = 1 / math.sqrt(d) if scale is None else scale
    allowed, bias = attention_mask(mask, causal, n, m, np.float64)
    S = s * (q @ swap(k))                                          # (..., n, m)
    if bias is not None:
        S = S + np.where(bias == -np.inf, 0.0, bias)
    shape = np.broadcast_shapes(S.shape, np.shape(True if allowed is None else allowed))
    allowed = np.broadcast_to(True if allowed is None else allowed, shape)
    S = np.broadcast_to(S, shape)
    QK = np.broadcast_to(s * (np.abs(q) @ swap(np.abs(k))), shape)  # scale·Σ_c|q_ic k_jc|
    Delta = ((d + 3) * u * np.max(np.where(allowed, QK, 0.0), axis=-1, keepdims=True)
             + u * np.max(np.where(allowed, np.abs(S), 0.0), axis=-1, keepdims=True))
    top = np.max(np.where(allowed, S, -np.inf), axis=-1, keepdims=True)
    y = np.where(allowed, S - np.where(np.isfinite(top), top, 0.0), 0.0)
    eps_A = 2 * Delta + u * np.abs(y) + (2 * m + 2 + 4 * exp_ulps) * u
    return allowed, S, Delta, eps_A


def vjp_error_bounds(q, k, v, d_out, mask, causal, scale, A, u=U, exp_ulps=1):
    """Bound on |sdpa_vjp − exact| of dq, dk, dv (and d_bias), each of its input's shape, before the tier's rounding.

    First order in ``u`` (``A`` the tier's weights, ε_ij the weights' relative error from
    :func:`scores_model`, errA = A ε):
      dP = dO Vᵀ, a matmul over d_v:     E_P  = d_v·u·(|dO| |V|ᵀ)
      δ_i = Σ_j A_ij dP_ij (m terms):    E_δ  = Σ_j (errA |dP| + A E_P) + m·u·Σ_j A |dP|
      dS = A ⊙ (dP − δ), G = dP − δ:     E_dS = errA |G| + A (E_P + E_δ + u|G|) + u|A G|
      dQ = s·dS K (m terms, s rounded):  E_dQ = s (E_dS |K| + (m + 3)·u·|dS| |K|)
      dK = s·dSᵀ Q (n terms):            E_dK = s (E_dSᵀ |Q| + (n + 3)·u·|dS|ᵀ |Q|)
      dV = Aᵀ dO (n terms):              E_dV = (errA + n·u·A)ᵀ |dO|
      d_bias = dS:                       E_dS
    An input shared over B broadcast copies adds B·u·Σ|terms| for the sum over the copies. The
    magnitudes |dP|, |G| are float64 values: their own errors change the bound only at second order.
    """
    allowed, _, _, eps_A = scores_model(q, k, mask, causal, scale, u, exp_ulps)
    n, m, d, d_v = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    s = 1 / math.sqrt(d) if scale is None else scale
    errA = A * eps_A
    dP = np.where(allowed, d_out @ swap(v), 0.0)
    E_P = d_v * u * (np.abs(d_out) @ swap(np.abs(v)))
    delta = np.sum(A * dP, axis=-1, keepdims=True)
    E_delta = (np.sum(errA * np.abs(dP) + A * E_P, axis=-1, keepdims=True)
               + m * u * np.sum(A * np.abs(dP), axis=-1, keepdims=True))
    G = np.where(allowed, dP - delta, 0.0)
    dS = A * G
    E_dS = errA * np.abs(G) + A * (E_P + E_delta + u * np.abs(G)) + u * np.abs(dS)
    full = {                                                       # (error, magnitude) before the batch sum
        "dq": (s * (E_dS @ np.abs(k) + (m + 3) * u * np.abs(dS) @ np.abs(k)), s * np.abs(dS) @ np.abs(k), q.shape),
        "dk": (s * (swap(E_dS) @ np.abs(q) + (n + 3) * u * swap(np.abs(dS)) @ np.abs(q)),
               s * swap(np.abs(dS)) @ np.abs(q), k.shape),
        "dv": (swap(errA + n * u * A) @ np.abs(d_out), swap(A) @ np.abs(d_out), v.shape),
        "d_bias": (E_dS, np.abs(dS), np.shape(mask)),
    }
    bounds = {}
    for key, (err, mag, shape) in full.items():                    # err, mag of the broadcast shape
        copies = err.size // math.prod(shape)
        bounds[key] = sum_to(err, shape) + copies * u * sum_to(mag, shape)
    return bounds


def qkv(rng, n, m, d=4, d_v=3, batch=()):
    return (rng.standard_normal((*batch, n, d)), rng.standard_normal((*batch, m, d)),
            rng.standard_normal((*batch, m, d_v)))


def extreme(rng, n, m, d=4):
    """Scores |s| ~ 1e4 whose differences are O(1): every weight is non-trivial, exp is ill-conditioned."""
    c = np.array([100.0, 100.0, 0.0, 0.0])[:d]
    q = c + 1e-2 * rng.standard_normal((n, d))
    k = c + 1e-2 * rng.standard_normal((m, d))
    return q, k, rng.standard_normal((m, 3))


def case(name, rng):
    """(q, k, v, mask, causal, scale) of the named test case; n != m throughout."""
    if name == "plain":
        return (*qkv(rng, 5, 7), None, False, None)
    if name == "bool-mask":
        q, k, v = qkv(rng, 6, 4)
        mask = rng.random((6, 4)) < 0.6
        mask[2] = False                                            # a fully masked query
        return q, k, v, mask, False, None
    if name == "bias":
        q, k, v = qkv(rng, 4, 6)
        bias = rng.standard_normal((4, 6))
        bias[rng.random((4, 6)) < 0.3] = -np.inf                    # −inf entries mask
        return q, k, v, bias, False, None
    if name == "causal-top-left":
        return (*qkv(rng, 6, 4), None, True, None)
    if name == "causal-bottom-right":
        return (*qkv(rng, 6, 4), None, "bottom-right", None)       # queries 0, 1 see no key
    if name == "bottom-right-bool-scale":
        q, k, v = qkv(rng, 4, 7)
        return q, k, v, rng.random((4, 7)) < 0.7, "bottom-right", 0.3
    if name == "bias-causal-batched":
        q, k, v = qkv(rng, 5, 6, batch=(2, 3))
        k, v = k[0, 0], v[:, :1]                                   # keys shared, values per batch
        return q, k, v, rng.standard_normal((3, 5, 6)), True, None  # bias per head, shared over batch
    if name == "extreme":
        q, k, v = extreme(rng, 5, 7)
        return q, k, v, None, False, 0.5                           # s ≈ 1e4 ± O(1)
    if name == "extreme-bias":
        q, k, v = extreme(rng, 6, 4)
        return q, k, v, 3 * rng.standard_normal((6, 4)), "bottom-right", 0.5
    raise KeyError(name)


CASES = ["plain", "bool-mask", "bias", "causal-top-left", "causal-bottom-right", "bottom-right-bool-scale",
         "bias-causal-batched", "extreme", "extreme-bias"]


# ------------------------------------------------------------------------------ the tier by hand


def test_sdpa_hand_computed():
    # Scores 0 and ln 3 (scale 1) → weights 1/4, 3/4 → output 1/4·4 + 3/4·8 = 7, ℓ = log(1 + 3).
    # ln 3 is rounded when stored, which moves the weights by ~1e-16 relative: hence rtol 1e-15. The
    # output is 7 within 1e-16, so rounding to nearest gives 7 exactly.
    q, k, v = np.array([[1.0]]), np.array([[0.0], [np.log(3.0)]]), np.array([[4.0], [8.0]])
    out, A, lse = mp_sdpa(q, k, v, scale=1.0)
    np.testing.assert_allclose(A, [[0.25, 0.75]], rtol=1e-15)
    np.testing.assert_array_equal(out, [[7.0]])
    np.testing.assert_allclose(lse, [np.log(4.0)], rtol=1e-15)


def test_sdpa_vjp_hand_computed():
    # Same forward, dO = 2: dV = Aᵀ dO = (1/4·2, 3/4·2) = (0.5, 1.5); dP = dO vᵀ = (8, 16),
    # δ = Σ A dP = 2 + 12 = 14, dS = A ⊙ (dP − δ) = (1/4·(−6), 3/4·2) = (−1.5, 1.5);
    # dQ = dS K = 1.5·ln 3, dK = dSᵀ q = (−1.5, 1.5), d_bias = dS.
    q, k, v = np.array([[1.0]]), np.array([[0.0], [np.log(3.0)]]), np.array([[4.0], [8.0]])
    dq, dk, dv, d_bias = mp_sdpa_vjp(q, k, v, np.array([[2.0]]), np.zeros((1, 2)), scale=1.0)
    np.testing.assert_allclose(dv, [[0.5], [1.5]], rtol=1e-15)
    np.testing.assert_allclose(d_bias, [[-1.5, 1.5]], rtol=1e-15)
    np.testing.assert_allclose(dk, [[-1.5], [1.5]], rtol=1e-15)
    np.testing.assert_allclose(dq, [[1.5 * np.log(3.0)]], rtol=1e-15)
    assert mp_sdpa_vjp(q, k, v, np.array([[2.0]]), np.array([[True, True]]), scale=1.0)[3] is None


def test_softmax_rounds_once_to_nearest():
    # k equal logits: every weight is exactly 1/k, whose float64 rounding is Python's 1/k.
    for size in range(2, 12):
        np.testing.assert_array_equal(mp_softmax(np.zeros(size)), np.full(size, 1 / size))
    # A subnormal weight, e^{−740}/(1 + e^{−740}) = 85.4 subnormal spacings: 85 of them.
    assert mp_softmax([0.0, -740.0])[1] == math.exp(-740.0) == 85 * 5e-324


def test_conversion_rounds_directly_onto_the_subnormal_grid():
    # (1/2 + 2⁻⁶⁰)·2⁻¹⁰⁷⁴ is just above half the smallest subnormal: nearest is 2⁻¹⁰⁷⁴. Rounding to
    # 53 bits first (as mpmath's float() does) would make it an exact tie, then 0.
    ctx = extended._context(50)
    assert extended._round(ctx, ctx.ldexp(ctx.mpf(1) / 2 + ctx.ldexp(1, -60), -1074)) == 5e-324
    assert extended._round(ctx, -ctx.ldexp(ctx.mpf(3) / 2 - ctx.ldexp(1, -60), -1074)) == -5e-324
    assert extended._round(ctx, ctx.mpf(2) ** 1024) == np.inf


def test_softmax_vjp_hand_computed():
    # y = (1/2, 1/2), ȳ = (1, 0): Σ y ȳ = 1/2, dx = (1/2·(1 − 1/2), 1/2·(0 − 1/2)) = (1/4, −1/4)
    np.testing.assert_array_equal(mp_softmax_vjp([0.0, 0.0], [1.0, 0.0]), [0.25, -0.25])
    np.testing.assert_array_equal(mp_softmax_vjp([[0.0, 5.0]], [[1.0, np.nan]], mask=[[True, False]]), [[0.0, 0.0]])


def test_fully_masked_rows_and_conventions(rng):
    # Bottom-right, n = 6 > m = 4: queries 0 and 1 see no key (zero rows, ℓ = −inf, zero gradients).
    q, k, v = qkv(rng, 6, 4)
    out, A, lse = mp_sdpa(q, k, v, causal="bottom-right")
    np.testing.assert_array_equal(out[:2], 0.0)
    np.testing.assert_array_equal(A[:2], 0.0)
    np.testing.assert_array_equal(lse[:2], -np.inf)
    np.testing.assert_array_equal(A[2:] > 0, np.tril(np.ones((4, 4), bool)))   # j <= i + (m − n)
    top_left = mp_sdpa(q, k, v, causal=True)[1]
    np.testing.assert_array_equal(top_left > 0, np.tril(np.ones((6, 4), bool)))   # j <= i
    dq = mp_sdpa_vjp(q, k, v, np.ones((6, 3)), causal="bottom-right")[0]
    np.testing.assert_array_equal(dq[:2], 0.0)


def test_nonfinite_values_masked_out_are_never_read_and_used_ones_are_refused(rng):
    q, k, v = qkv(rng, 3, 4)
    mask = np.ones((3, 4), bool)
    mask[:, 3] = False
    k[3], v[3] = np.nan, np.inf
    out, A, _ = mp_sdpa(q, k, v, mask)
    out_3, A_3, _ = mp_sdpa(q, k[:3], v[:3])                        # the same problem without key 3
    np.testing.assert_array_equal(A, np.c_[A_3, np.zeros(3)])
    np.testing.assert_array_equal(out, out_3)
    with pytest.raises(ValueError, match="k holds a non-finite value"):
        mp_sdpa(q, k, v)
    with pytest.raises(ValueError, match="x holds a non-finite value"):
        mp_softmax([0.0, np.inf])


def test_bad_arguments(rng):
    q, k, v = qkv(rng, 3, 4)
    with pytest.raises(ValueError, match="dps must be an int >= 17"):
        mp_softmax([0.0], dps=10)
    with pytest.raises(ValueError, match="causal must be one of"):
        mp_sdpa(q, k, v, causal="top-right")
    with pytest.raises(TypeError, match="mask must be bool"):
        mp_sdpa(q, k, v, np.ones((3, 4), int))
    with pytest.raises(ValueError, match="d_out has shape"):
        mp_sdpa_vjp(q, k, v, np.ones((4, 3)))


def test_missing_mpmath_gets_a_clear_import_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "mpmath", None)               # makes `import mpmath` fail
    with pytest.raises(ImportError, match="pip install mpmath"):
        mp_softmax([0.0, 1.0])


def test_importing_refattn_does_not_import_mpmath():
    code = "import sys, refattn, refattn.oracle.extended; assert 'mpmath' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("name", ["plain", "bias", "causal-bottom-right", "bias-causal-batched", "extreme-bias"])
def test_dps_independence(rng, name):
    # Rounded once from 169 bits (dps 50) or 269 (dps 80): identical unless an exact value lies
    # within ~1e-40 (relative) of a float64 rounding midpoint (mp_sdpa's Notes).
    q, k, v, mask, causal, scale = case(name, rng)
    d_out = rng.standard_normal(mp_sdpa(q, k, v, mask, causal=causal, scale=scale)[0].shape)
    for f, args in ((mp_sdpa, (q, k, v, mask)), (mp_sdpa_vjp, (q, k, v, d_out, mask))):
        at50 = f(*args, causal=causal, scale=scale, dps=50)
        at80 = f(*args, causal=causal, scale=scale, dps=80)
        for a, b in zip(at50, at80, strict=True):
            np.testing.assert_array_equal(a, b)
    x, d_y = 30 * rng.standard_normal((3, 5)), rng.standard_normal((3, 5))
    np.testing.assert_array_equal(mp_softmax(x, dps=50), mp_softmax(x, dps=80))
    np.testing.assert_array_equal(mp_softmax_vjp(x, d_y, dps=50), mp_softmax_vjp(x, d_y, dps=80))


# ---------------------------------------------------------------------- float64 against the tier


@pytest.mark.parametrize(("kind", "masked", "axis"), [
    ("unit", False, -1), ("unit", True, 0), ("offset-1e4", True, -1), ("spread-700", False, -1),
])
def test_softmax_matches_extended_precision(rng, kind, masked, axis):
    # Inputs are exact, so Δ = 0 and ε_j = u·|y_j| + (2m + 6)·u (module docstring). "offset-1e4":
    # |x| ~ 1e4 with O(10) differences (only the max shift keeps exp finite; every weight is
    # non-trivial). "spread-700": |y| up to ~3e3, exp's conditioning, weights down to subnormals and 0.
    x = rng.standard_normal((6, 9))
    x = {"unit": x, "offset-1e4": 1e4 + 10 * x, "spread-700": 700 * x}[kind]
    mask = None
    if masked:
        mask = rng.random(x.shape) < 0.7
        mask[0] = False                                            # a fully masked slice
    if axis == 0:
        x, mask = x.T, None if mask is None else mask.T
    expected = mp_softmax(x, axis=axis, mask=mask)
    keep = np.ones(x.shape, bool) if mask is None else mask
    top = np.max(np.where(keep, x, -np.inf), axis=axis, keepdims=True)
    y = np.where(keep, np.abs(x - np.where(np.isfinite(top), top, 0.0)), 0.0)
    m = x.shape[axis]
    within(softmax(x, axis=axis, mask=mask), expected, (U * y + (2 * m + 6) * U) * expected + TINY, "softmax")


@pytest.mark.parametrize("name", CASES)
def test_sdpa_matches_extended_precision(rng, name):
    q, k, v, mask, causal, scale = case(name, rng)
    out, A, lse = scaled_dot_product_attention(q, k, v, mask, causal=causal, scale=scale,
                                               return_weights=True, return_lse=True)
    out_mp, A_mp, lse_mp = mp_sdpa(q, k, v, mask, causal=causal, scale=scale)
    allowed, S, Delta, eps_A = scores_model(q, k, mask, causal, scale)
    m = k.shape[-2]
    if name.startswith("extreme"):                                 # the regime is the intended one:
        assert np.abs(S[allowed]).min() > 5e3                      # |s| ~ 1e4 ...
        assert np.all(np.sum(A_mp > 1e-6, axis=-1)[allowed.sum(axis=-1) > 1] >= 2)   # ... yet no one-hot rows
    within(A, A_mp, eps_A * A_mp + TINY, "weights")
    within(out, out_mp, (A_mp * (eps_A + m * U)) @ np.abs(v) + 2 * U * np.abs(out_mp) + TINY, "output")
    seen = allowed.any(axis=-1)
    np.testing.assert_array_equal(lse[~seen], -np.inf)
    np.testing.assert_array_equal(lse_mp[~seen], -np.inf)
    bound = Delta[..., 0] + (2 * m + 4) * U + 3 * U * np.abs(lse_mp)
    within(lse[seen], lse_mp[seen], bound[seen], "lse")


@pytest.mark.parametrize("name", CASES)
def test_sdpa_vjp_matches_extended_precision(rng, name):
    # The error model of vjp_error_bounds with float64's u; the tier's rounding 2u·|value| is added last.
    q, k, v, mask, causal, scale = case(name, rng)
    out_mp, A_mp, _ = mp_sdpa(q, k, v, mask, causal=causal, scale=scale)
    d_out = rng.standard_normal(out_mp.shape)
    g = sdpa_vjp(q, k, v, d_out, mask, causal=causal, scale=scale)
    dq_mp, dk_mp, dv_mp, db_mp = mp_sdpa_vjp(q, k, v, d_out, mask, causal=causal, scale=scale)
    bounds = vjp_error_bounds(q, k, v, d_out, mask, causal, scale, A_mp)
    got = {"dq": (g.dq, dq_mp, q.shape), "dk": (g.dk, dk_mp, k.shape), "dv": (g.dv, dv_mp, v.shape)}
    if db_mp is None:
        assert g.d_bias is None
    else:
        got["d_bias"] = (g.d_bias, db_mp, np.shape(mask))
    for key, (actual, expected, shape) in got.items():
        assert actual.shape == expected.shape == tuple(shape)
        within(actual, expected, bounds[key] + 2 * U * np.abs(expected) + TINY, key)


@pytest.mark.parametrize("name", [name for name in CASES if not name.startswith("extreme")])
def test_sdpa_vjp_float32_matches_extended_precision(rng, name):
    # sdpa_vjp(dtype=np.float32) keeps every intermediate in float32, so the error model of
    # vjp_error_bounds holds with u = 2⁻²⁴ and NumPy's float32 exp within 3 ulp (the bound NumPy's own
    # accuracy test holds it to: numpy/_core/tests/data/umath-validation-set-exp.csv, float32 rows);
    # the default scale fl32(fl64(1/√d)) errs by u + 2u₆₄ < 2u, as the model allows. The inputs are
    # rounded to float32 first, so the tier differentiates exactly the numbers the float32 path
    # reads. The model is first order in u: here 2Δ < 1e-5, so the neglected products of two
    # first-order terms are below 1e-5 of the bound. The "extreme" cases are left out: with
    # |s| ~ 1e4, float32's 2Δ is ~1e-2 and those products reach 1% of the bound.
    q, k, v, mask, causal, scale = case(name, rng)
    q, k, v = (x.astype(np.float32).astype(np.float64) for x in (q, k, v))
    if mask is not None and mask.dtype.kind == "f":
        mask = mask.astype(np.float32).astype(np.float64)          # −inf entries stay −inf
    out_mp, A_mp, _ = mp_sdpa(q, k, v, mask, causal=causal, scale=scale)
    d_out = rng.standard_normal(out_mp.shape).astype(np.float32).astype(np.float64)
    g = sdpa_vjp(q, k, v, d_out, mask, causal=causal, scale=scale, dtype=np.float32)
    dq_mp, dk_mp, dv_mp, db_mp = mp_sdpa_vjp(q, k, v, d_out, mask, causal=causal, scale=scale)
    bounds = vjp_error_bounds(q, k, v, d_out, mask, causal, scale, A_mp, u=U32, exp_ulps=3)
    got = {"dq": (g.dq, dq_mp), "dk": (g.dk, dk_mp), "dv": (g.dv, dv_mp)}
    if db_mp is None:
        assert g.d_bias is None
    else:
        got["d_bias"] = (g.d_bias, db_mp)
    tiny = 2 * float(np.finfo(np.float32).smallest_subnormal)
    for key, (actual, expected) in got.items():
        assert actual.dtype == np.float32, key
        assert actual.shape == expected.shape
        within(actual, expected, bounds[key] + 2 * U * np.abs(expected) + tiny, key)
    g64 = sdpa_vjp(q, k, v, d_out, mask, causal=causal, scale=scale)
    err32, err64 = np.max(np.abs(g.dq - dq_mp)), np.max(np.abs(g64.dq - dq_mp))
    assert err32 > 1e3 * err64, "the float32 path computed in float64"   # its error is ~u₃₂/u₆₄ ≈ 1e9 times larger


@pytest.mark.parametrize(("scale", "masked"), [(1.0, False), (1.0, True), (1e3, True)])
def test_softmax_vjp_matches_extended_precision(rng, scale, masked):
    # y with ε_j = u|y_j| + (2m + 6)u; δ = Σ y ȳ errs by E_δ = Σ y|ȳ|(ε + m·u); dx = y (ȳ − δ) by
    # y (ε |G| + E_δ) + 2u|y G| (subtraction and product), plus the tier's 2u|dx|.
    x = scale * rng.standard_normal((5, 8))
    d_y = rng.standard_normal(x.shape)
    mask = None
    keep = np.ones(x.shape, bool)
    if masked:
        keep = rng.random(x.shape) < 0.7
        keep[1] = False
        mask = keep
    expected = mp_softmax_vjp(x, d_y, mask=mask)
    y = mp_softmax(x, mask=mask)
    m = x.shape[-1]
    top = np.max(np.where(keep, x, -np.inf), axis=-1, keepdims=True)
    eps_y = U * np.where(keep, np.abs(x - np.where(np.isfinite(top), top, 0.0)), 0.0) + (2 * m + 6) * U
    delta = np.sum(y * d_y, axis=-1, keepdims=True)
    E_delta = np.sum(y * np.abs(d_y) * (eps_y + m * U), axis=-1, keepdims=True)
    G = np.where(keep, d_y - delta, 0.0)
    bound = y * (eps_y * np.abs(G) + E_delta) + 2 * U * np.abs(y * G) + 2 * U * np.abs(expected) + TINY
    within(softmax_vjp(x, d_y, mask=mask), expected, bound, "softmax_vjp")
