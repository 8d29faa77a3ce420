"""scaled_dot_product_attention against the per-query loop, extended precision and its properties."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from refattn import causal_mask, padding_mask, scaled_dot_product_attention
from refattn.oracle.extended import mp_sdpa

from .naive import naive_causal_allowed, naive_sdpa

EPS = np.finfo(np.float64).eps
TIGHT = {"rtol": 1e-12, "atol": 1e-12}


def qkv(rng, n, m, d=4, d_v=3, batch=()):
    return (rng.standard_normal((*batch, n, d)), rng.standard_normal((*batch, m, d)),
            rng.standard_normal((*batch, m, d_v)))


def test_hand_computed():
    # scores 0 and ln 3 (scale 1/√1) → weights 1/4, 3/4 → output 4/4 + 3·8/4 = 7
    q, k, v = np.array([[1.0]]), np.array([[0.0], [np.log(3.0)]]), np.array([[4.0], [8.0]])
    out, A = scaled_dot_product_attention(q, k, v, return_weights=True)
    np.testing.assert_allclose(A, [[0.25, 0.75]], rtol=1e-15)
    np.testing.assert_allclose(out, [[7.0]], rtol=1e-15)


def test_hand_computed_scale():
    # d_k = 4 → scale 1/2; q·k = 2 ln 3 → scaled score ln 3 against 0
    q = np.array([[1.0, 1.0, 0.0, 0.0]])
    k = np.array([[0.0, 0.0, 0.0, 0.0], [np.log(3.0), np.log(3.0), 0.0, 0.0]])
    _, A = scaled_dot_product_attention(q, k, np.eye(2), return_weights=True)
    np.testing.assert_allclose(A, [[0.25, 0.75]], rtol=1e-15)


@pytest.mark.parametrize(("n", "m"), [(4, 7), (7, 4), (1, 5), (6, 6)])
def test_matches_naive_loop(rng, n, m):
    q, k, v = qkv(rng, n, m)
    out, A = scaled_dot_product_attention(q, k, v, return_weights=True)
    out_ref, A_ref = naive_sdpa(q, k, v)
    np.testing.assert_allclose(A, A_ref, **TIGHT)
    np.testing.assert_allclose(out, out_ref, **TIGHT)


@pytest.mark.parametrize("alignment", ["top-left", "bottom-right"])
@pytest.mark.parametrize(("n", "m"), [(3, 7), (7, 3)])
def test_causal_matches_naive_loop(rng, alignment, n, m):
    q, k, v = qkv(rng, n, m)
    causal = True if alignment == "top-left" else alignment
    out, A = scaled_dot_product_attention(q, k, v, causal=causal, return_weights=True)
    out_ref, A_ref = naive_sdpa(q, k, v, allowed=naive_causal_allowed(n, m, alignment))
    np.testing.assert_allclose(A, A_ref, **TIGHT)
    np.testing.assert_allclose(out, out_ref, **TIGHT)


def test_bool_mask_bias_and_scale_match_naive_loop(rng):
    n, m = 5, 8
    q, k, v = qkv(rng, n, m)
    allowed = rng.random((n, m)) < 0.6
    allowed[2] = False                                       # one fully masked row → zeros
    bias = rng.standard_normal((n, m))
    bias[0, :3] = -np.inf                                    # −inf bias masks like False
    out, A = scaled_dot_product_attention(q, k, v, np.where(allowed, bias, -np.inf),
                                          scale=0.3, return_weights=True)
    out_ref, A_ref = naive_sdpa(q, k, v, allowed=allowed, bias=bias, scale=0.3)
    np.testing.assert_allclose(A, A_ref, **TIGHT)
    np.testing.assert_allclose(out, out_ref, **TIGHT)
    np.testing.assert_array_equal(out[2], 0.0)


def test_batch_equals_stack_of_single_calls(rng):
    q, k, v = qkv(rng, 3, 5, batch=(2, 3))
    mask = padding_mask(np.array([[5, 2, 4], [1, 5, 3]]), 5)          # (2, 3, 1, 5)
    out = scaled_dot_product_attention(q, k, v, mask, causal="bottom-right")
    for b in range(2):
        for h in range(3):
            single = scaled_dot_product_attention(q[b, h], k[b, h], v[b, h], mask[b, h], causal="bottom-right")
            np.testing.assert_allclose(out[b, h], single, **TIGHT)


def test_leading_dims_broadcast(rng):
    # one set of keys/values shared by a batch of queries
    q = rng.standard_normal((4, 3, 6))
    _, k, v = qkv(rng, 3, 5, d=6)
    out = scaled_dot_product_attention(q, k, v)
    np.testing.assert_allclose(out[2], scaled_dot_product_attention(q[2], k, v), **TIGHT)


def test_matches_extended_precision(rng):
    # Error model (float64 path vs 50-digit mpmath): each score s = scale·q·k carries at most
    # d·eps·scale·Σ_c|q_c k_c| absolute error, which exp makes relative in α; normalising adds
    # ~m·eps. The output Σ_j α_j v_j then errs by at most that relative error times Σ_j α_j |v_j|,
    # plus d_v-independent m·eps for its own sum. A factor 2 covers the first-order terms.
    n, m, d = 4, 6, 8
    q, k, v = qkv(rng, n, m, d=d, d_v=3)
    allowed = causal_mask(n, m, causal="bottom-right")
    out, A = scaled_dot_product_attention(q, k, v, causal="bottom-right", return_weights=True)
    out_mp, A_mp, _ = mp_sdpa(q, k, v, allowed)
    scale = 1 / np.sqrt(d)
    score_err = d * EPS * scale * (np.abs(q) @ np.abs(k).T).max(axis=-1, keepdims=True)   # (n, 1)
    rel = 2 * (score_err + (m + 4) * EPS)                                                 # (n, 1)
    assert np.all(np.abs(A - A_mp) <= rel * A_mp + 1e-323)
    assert np.all(np.abs(out - out_mp) <= rel * (A_mp @ np.abs(v)) + m * EPS * (A_mp @ np.abs(v)))


def test_extreme_logits_finite_and_correct():
    # |scores| ~ 1e4: the second key trails by ln 2 (weight 1/3), the third by 2e4 (weight 0).
    q = np.array([[1e4]])
    k = np.array([[1.0], [1.0 - np.log(2.0) / 1e4], [-1.0]])
    v = np.array([[3.0], [6.0], [1e6]])
    out, A = scaled_dot_product_attention(q, k, v, return_weights=True)
    assert np.all(np.isfinite(A)) and np.all(np.isfinite(out))
    # k[1] is rounded when stored, which perturbs its score by up to 1e4·eps ≈ 2e-12 relative.
    np.testing.assert_allclose(A, [[2 / 3, 1 / 3, 0.0]], rtol=1e-11, atol=0)
    np.testing.assert_allclose(out, [[4.0]], rtol=1e-11)


@pytest.mark.parametrize(("causal", "alignment", "n", "m"), [
    (True, "top-left", 4, 6), (True, "top-left", 6, 4),
    ("bottom-right", "bottom-right", 4, 6), ("bottom-right", "bottom-right", 6, 4),
])
def test_nonfinite_in_masked_keys_and_values_never_reach_the_output(rng, causal, alignment, n, m):
    q, k, v = qkv(rng, n, m)
    clean = scaled_dot_product_attention(q, k, v, causal=causal)
    allowed = causal_mask(n, m, causal=alignment)
    j = int(np.flatnonzero((allowed.sum(axis=0) > 0) & (allowed.sum(axis=0) < n))[-1])  # seen by some rows
    blind = ~allowed[:, j]
    assert blind.any() and not blind.all()
    k[j], v[j] = np.nan, np.inf
    out = scaled_dot_product_attention(q, k, v, causal=causal)
    np.testing.assert_array_equal(out[blind], clean[blind])
    assert np.isnan(out[~blind]).all()                   # rows that may see key j: IEEE


def test_nan_in_padding_never_leaks_with_bool_or_float_masks(rng):
    q, k, v = qkv(rng, 3, 5, batch=(2,))
    lengths = np.array([3, 5])
    mask = padding_mask(lengths, 5)                      # (2, 1, 5)
    clean = scaled_dot_product_attention(q, k, v, mask)
    k[0, 3:], v[0, 3:] = np.inf, np.nan
    np.testing.assert_array_equal(scaled_dot_product_attention(q, k, v, mask), clean)
    bias = np.where(mask, 0.0, -np.inf)
    np.testing.assert_array_equal(scaled_dot_product_attention(q, k, v, bias), clean)


def test_nonfinite_values_follow_ieee_in_rows_that_use_them(rng):
    q, k, v = qkv(rng, 3, 4)
    v[1, 0] = np.inf
    out = scaled_dot_product_attention(q, k, v, causal=True)
    assert np.isfinite(out[0]).all()                     # query 0 sees key 0 only
    assert np.isposinf(out[1:, 0]).all()                 # queries 1, 2 weigh +inf by α > 0
    assert np.isfinite(out[1:, 1:]).all()
    q[2, 0] = np.nan
    out = scaled_dot_product_attention(q, k, v, causal=True)
    assert np.isnan(out[2]).all() and np.isfinite(out[0]).all()


@pytest.mark.parametrize("policy", ["zero", "nan", "uniform"])
def test_fully_masked_row_policies(rng, policy):
    # bottom-right with n = 5 > m = 3: queries 0 and 1 see no key.
    q, k, v = qkv(rng, 5, 3)
    v[2] = np.nan                                         # seen only by "uniform" rows and rows 2–4
    out, A = scaled_dot_product_attention(q, k, v, causal="bottom-right", fully_masked=policy,
                                          return_weights=True)
    if policy == "zero":
        np.testing.assert_array_equal(A[:2], 0.0)
        np.testing.assert_array_equal(out[:2], 0.0)
    elif policy == "nan":
        assert np.isnan(A[:2]).all() and np.isnan(out[:2]).all()
    else:
        np.testing.assert_array_equal(A[:2], 1 / 3)
        assert np.isnan(out[:2]).all()                    # the uniform rows do use key 2
    np.testing.assert_allclose(A[3], scaled_dot_product_attention(q, k, v, causal="bottom-right",
                                                                  return_weights=True)[1][3], rtol=1e-15)


def test_uniform_policy_is_the_mean_of_values(rng):
    q, k, v = qkv(rng, 2, 4)
    out = scaled_dot_product_attention(q, k, v, np.zeros((2, 4), bool), fully_masked="uniform")
    np.testing.assert_allclose(out, np.broadcast_to(v.mean(axis=0), (2, 3)), **TIGHT)


def test_default_scale_equals_prescaled_queries(rng):
    q, k, v = qkv(rng, 3, 5, d=16)
    np.testing.assert_allclose(scaled_dot_product_attention(q, k, v),
                               scaled_dot_product_attention(q / 4.0, k, v, scale=1.0), **TIGHT)


@pytest.mark.parametrize(("dtype", "bound"), [
    # float32/float16: inputs rounded to the format (eps/2 relative) and ~d + m roundings in the
    # sums; with O(1) values the output error stays below 50 eps of the format.
    (np.float32, 50 * np.finfo(np.float32).eps),
    (np.float16, 50 * np.finfo(np.float16).eps),
])
def test_low_precision_dtypes(rng, dtype, bound):
    q, k, v = qkv(rng, 4, 6)
    out = scaled_dot_product_attention(q, k, v, causal=True, dtype=dtype)
    assert out.dtype == dtype
    np.testing.assert_allclose(out, scaled_dot_product_attention(q, k, v, causal=True), rtol=0, atol=bound)


def test_inputs_are_not_modified(rng):
    q, k, v = qkv(rng, 3, 4)
    copies = [x.copy() for x in (q, k, v)]
    scaled_dot_product_attention(q, k, v, causal=True)
    for x, c in zip((q, k, v), copies, strict=True):
        np.testing.assert_array_equal(x, c)


shapes = st.tuples(st.integers(1, 6), st.integers(1, 7), st.integers(1, 5), st.integers(1, 4))


@given(shapes, st.integers(0, 2**32 - 1), st.sampled_from([False, True, "bottom-right"]))
def test_rows_sum_to_one_or_are_fully_masked(shape, seed, causal):
    n, m, d, d_v = shape
    q, k, v = qkv(np.random.default_rng(seed), n, m, d, d_v)
    _, A = scaled_dot_product_attention(q, k, v, causal=causal, return_weights=True)
    sees_some_key = A.sum(axis=-1) > 0
    # top-left and non-causal rows always see key 0; bottom-right row i sees i + m − n + 1 keys
    expected = np.arange(n) + (m - n) >= 0 if causal == "bottom-right" else np.ones(n, bool)
    np.testing.assert_array_equal(sees_some_key, expected)
    assert np.all(A >= 0)
    np.testing.assert_allclose(A.sum(axis=-1)[sees_some_key], 1.0, rtol=0, atol=m * EPS)


@given(shapes, st.integers(0, 2**32 - 1))
def test_key_value_permutation_invariance_and_query_equivariance(shape, seed):
    n, m, d, d_v = shape
    rng = np.random.default_rng(seed)
    q, k, v = qkv(rng, n, m, d, d_v)
    pk, pq = rng.permutation(m), rng.permutation(n)
    out = scaled_dot_product_attention(q, k, v)
    # Permuting keys reorders the sums Σ_j: ≤ 2·m·eps·Σ_j α_j |v_j| <= 2·m·eps·max|v| (two orders, each within
    # m·eps of the exact sum). Permuting keys or queries also moves rows and columns to other places in BLAS's
    # tiles, where a score's d terms may be added in another order: ≤ Δs = 2·d·eps·|scale|·Σ_l |q_il||k_jl|,
    # which moves a weight by ≤ 2·Δs of itself and the output by ≤ 2·Δs·max|v|. Doubled: first order.
    ds = 2 * d * EPS * (np.abs(q) @ np.abs(k).T).max() / np.sqrt(d)
    bound = 2 * (2 * m * EPS + 2 * ds) * np.abs(v).max()
    np.testing.assert_allclose(scaled_dot_product_attention(q, k[pk], v[pk]), out, rtol=0, atol=bound)
    np.testing.assert_allclose(scaled_dot_product_attention(q[pq], k, v), out[pq], rtol=0, atol=bound)


@given(st.integers(2, 7), st.integers(2, 7), st.integers(0, 2**32 - 1),
       st.sampled_from(["top-left", "bottom-right"]))
def test_causal_outputs_ignore_the_future(n, m, seed, alignment):
    rng = np.random.default_rng(seed)
    q, k, v = qkv(rng, n, m)
    causal = True if alignment == "top-left" else alignment
    out = scaled_dot_product_attention(q, k, v, causal=causal)
    delta = 0 if alignment == "top-left" else m - n
    for i in range(n):
        first_future = max(i + delta + 1, 0)
        if first_future >= m:
            continue
        k2, v2 = k.copy(), v.copy()
        k2[first_future:] = rng.standard_normal(k2[first_future:].shape)
        v2[first_future:] = rng.standard_normal(v2[first_future:].shape)
        out2 = scaled_dot_product_attention(q, k2, v2, causal=causal)
        np.testing.assert_array_equal(out2[: i + 1], out[: i + 1])


def _bad(q=(3, 4), k=(5, 4), v=(5, 2), **kwargs):
    def call():
        def arr(s):
            return np.ones(s) if isinstance(s, tuple) else s
        return scaled_dot_product_attention(arr(q), arr(k), arr(v), **kwargs)
    return call


@pytest.mark.parametrize(("call", "error", "match"), [
    (_bad(k=(5, 3)), ValueError, r"q has d_k=4 but k has d_k=3 \(q shape \(3, 4\), k shape \(5, 3\)\)"),
    (_bad(v=(6, 2)), ValueError, r"k has m=5 keys but v has m=6 values"),
    (_bad(q=(2, 3, 4), k=(4, 5, 4), v=(4, 5, 2)), ValueError,
     r"leading \(batch\) dimensions do not broadcast: q \(2,\), k \(4,\)"),
    (_bad(q=(4,)), ValueError, r"q must have shape \(\.\.\., length, dim\), got shape \(4,\)"),
    (_bad(q=np.float64(1.0)), ValueError, r"q must have shape \(\.\.\., length, dim\), got shape \(\)"),
    (_bad(q=None), TypeError, r"q must be a real floating-point array, got dtype object with shape \(\)"),
    (_bad(return_weights=1), TypeError, r"return_weights must be True or False, got 1"),
    (_bad(method="flash"), ValueError, r"method must be one of \('equation', 'blocked', 'auto'\)"),
    (_bad(mask=np.ones((3, 4), bool)), ValueError, r"mask has shape \(3, 4\).*\(\.\.\., n=3, m=5\)"),
    (_bad(mask=np.ones((3, 5), int)), TypeError, "mask must be bool .* or float .*, got dtype int"),
    (_bad(q=np.ones((3, 4), int)), TypeError, "q must be a real floating-point array, got dtype int"),
    (_bad(v=np.ones((5, 2), complex)), TypeError, "v must be a real floating-point array, got dtype complex"),
    (_bad(causal="bottom-left"), ValueError, "causal must be one of"),
    (_bad(causal=1), ValueError, "causal must be one of"),
    (_bad(fully_masked="drop"), ValueError, "fully_masked must be one of"),
    (_bad(scale="0.5"), TypeError, "scale must be a real number"),
    (_bad(scale=np.inf), ValueError, "scale must be finite"),
    (_bad(q=(3, 0), k=(5, 0)), ValueError, r"default scale 1/sqrt\(d_k\) needs d_k >= 1, got d_k=0"),
    (_bad(dtype=np.int32), TypeError, "dtype must be float16, float32 or float64"),
])
def test_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


@pytest.mark.parametrize("method", ["equation", "blocked"])
def test_empty_query_key_vectors_with_a_scale_attend_uniformly(method):
    q, k, v = np.ones((3, 0)), np.ones((5, 0)), np.arange(10.0).reshape(5, 2)
    out = scaled_dot_product_attention(q, k, v, scale=1.0, method=method)   # every score is 0
    np.testing.assert_allclose(out, np.broadcast_to(v.mean(axis=0), (3, 2)), rtol=1e-15)


@given(shapes, st.integers(0, 2**32 - 1), st.floats(-1e3, 1e3))
def test_per_query_shift_invariance(shape, seed, c):
    # softmax(S + c_i) = softmax(S): a bias constant along each row changes nothing. In floats
    # S + c rounds each score by eps·|S + c|, which exp turns into that relative error in α.
    n, m, d, d_v = shape
    rng = np.random.default_rng(seed)
    q, k, v = qkv(rng, n, m, d, d_v)
    shift = c * rng.random((n, 1))
    out = scaled_dot_product_attention(q, k, v)
    shifted = scaled_dot_product_attention(q, k, v, np.broadcast_to(shift, (n, m)))
    bound = 4 * EPS * (abs(c) + np.abs(q).sum() * np.abs(k).max() + 1) * np.abs(v).max() * m
    np.testing.assert_allclose(shifted, out, rtol=0, atol=bound)


def test_lse_is_the_log_of_the_softmax_denominator(rng):
    # ℓ_i = log Σ_{j visible} exp(s_ij), by a plain loop with math.fsum; −inf for a fully masked row.
    import math

    q, k, v = qkv(rng, 5, 3)
    out, A, lse = scaled_dot_product_attention(q, k, v, causal="bottom-right", return_weights=True,
                                               return_lse=True)
    S = q @ k.T / 2.0
    allowed = causal_mask(5, 3, causal="bottom-right")
    for i in range(5):
        terms = [math.exp(S[i, j]) for j in range(3) if allowed[i, j]]
        expected = math.log(math.fsum(terms)) if terms else -math.inf
        np.testing.assert_allclose(lse[i], expected, rtol=1e-14)
    np.testing.assert_allclose(A, np.where(allowed, np.exp(S - lse[:, None]), 0.0), rtol=1e-13, atol=1e-15)
    np.testing.assert_array_equal(scaled_dot_product_attention(q, k, v, causal="bottom-right", return_lse=True)[0],
                                  out)


def test_lse_of_extreme_logits_is_finite():
    q, k = np.array([[1e4]]), np.array([[1.0], [-1.0]])
    _, lse = scaled_dot_product_attention(q, k, np.ones((2, 1)), return_lse=True)
    np.testing.assert_allclose(lse, [1e4 + np.log1p(np.exp(-2e4))], rtol=1e-15)


@pytest.mark.parametrize("policy", ["zero", "nan", "uniform"])
def test_zero_keys_means_every_row_is_fully_masked(rng, policy):
    q, k, v = rng.standard_normal((3, 4)), np.zeros((0, 4)), np.zeros((0, 2))
    out, A, lse = scaled_dot_product_attention(q, k, v, fully_masked=policy, return_weights=True, return_lse=True)
    assert out.shape == (3, 2) and A.shape == (3, 0)
    np.testing.assert_array_equal(lse, -np.inf)
    expected = {"zero": 0.0, "nan": np.nan, "uniform": 0.0}[policy]   # uniform over no key: the empty sum
    np.testing.assert_array_equal(out, np.full((3, 2), expected))
