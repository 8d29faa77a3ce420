"""linear_attention: the quadratic, right-product and scan paths against each other and a naive loop."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from refattn import causal_mask
from refattn.common import MemoryBudgetError, set_memory_budget
from refattn.kernels.scan import _causal_linear_scan, causal_linear_scan
from refattn.linear import elu_feature_map, linear_attention

from .naive import naive_linear

TIGHT = {"rtol": 1e-12, "atol": 1e-12}


def qkv(rng, n, m, d=4, d_v=3, batch=()):
    return (rng.standard_normal((*batch, n, d)), rng.standard_normal((*batch, m, d)),
            rng.standard_normal((*batch, m, d_v)))


def test_elu_feature_map_is_the_two_case_definition_bit_for_bit(rng):
    # φ(x) = x + 1 for x > 0 and e^x otherwise (the paper's cases), against the computed
    # e^{min(x, 0)} + max(x, 0), on a wide range and every special value, scalars included
    x = np.concatenate([rng.standard_normal(10_000) * 30, [0.0, -0.0, np.inf, -np.inf, np.nan, 1e308,
                                                          -1e308, 5e-324, -5e-324, 1e-17, -745.2]])
    cases = np.array([xi + 1.0 if xi > 0 else np.exp(xi) for xi in x])
    np.testing.assert_array_equal(elu_feature_map(x), cases)
    assert elu_feature_map(-1.0) == np.exp(-1.0) and elu_feature_map(2.0) == 3.0


@pytest.mark.parametrize(("n", "m"), [(5, 8), (8, 5), (6, 6)])
def test_quadratic_and_right_match_the_naive_loop(rng, n, m):
    q, k, v = qkv(rng, n, m)
    expected = naive_linear(q, k, v, elu_feature_map)
    for method in ("equation", "right"):
        np.testing.assert_allclose(linear_attention(q, k, v, elu_feature_map, method=method), expected, **TIGHT)


@pytest.mark.parametrize(("n", "m"), [(5, 8), (8, 5), (6, 6)])
@pytest.mark.parametrize("alignment", ["top-left", "bottom-right"])
def test_scan_and_quadratic_match_the_naive_causal_loop(rng, n, m, alignment):
    q, k, v = qkv(rng, n, m)
    causal = True if alignment == "top-left" else alignment
    allowed = causal_mask(n, m, causal=alignment)
    sees = allowed.any(axis=1)
    expected = naive_linear(q[sees], k, v, elu_feature_map, allowed[sees])
    for method in ("equation", "scan"):
        out = linear_attention(q, k, v, elu_feature_map, causal=causal, method=method)
        np.testing.assert_allclose(out[sees], expected, **TIGHT)
        np.testing.assert_array_equal(out[~sees], 0.0)            # fully masked: zero by default


@given(st.integers(1, 7), st.integers(1, 7), st.integers(0, 2**32 - 1),
       st.sampled_from([False, True, "bottom-right"]))
def test_the_three_paths_agree(n, m, seed, causal):
    q, k, v = qkv(np.random.default_rng(seed), n, m, batch=(2,))
    quadratic = linear_attention(q, k, v, elu_feature_map, causal=causal)
    fast = linear_attention(q, k, v, elu_feature_map, causal=causal, method="right" if causal is False else "scan")
    np.testing.assert_allclose(fast, quadratic, **TIGHT)


def test_effective_weights_are_row_stochastic_and_reproduce_the_output(rng):
    q, k, v = qkv(rng, 6, 9)
    out, A = linear_attention(q, k, v, elu_feature_map, causal="bottom-right", return_weights=True, method="scan")
    np.testing.assert_allclose(A.sum(axis=-1), 1.0, rtol=0, atol=1e-15 * 9)
    assert np.all(A >= 0)
    np.testing.assert_array_equal(A[~causal_mask(6, 9, causal="bottom-right")], 0.0)
    np.testing.assert_allclose(A @ v, out, **TIGHT)


@pytest.mark.parametrize("method", ["equation", "scan"])
def test_causal_outputs_ignore_the_future_even_nan(rng, method):
    # The quadratic path must mask by selection: A @ v would spread 0·NaN from future values.
    q, k, v = qkv(rng, 7, 7)
    out = linear_attention(q, k, v, elu_feature_map, causal=True, method=method)
    k[4:], v[4:] = np.inf, np.nan
    np.testing.assert_array_equal(linear_attention(q, k, v, elu_feature_map, causal=True, method=method)[:4],
                                  out[:4])


@pytest.mark.parametrize("policy", ["zero", "nan", "uniform"])
def test_rows_without_keys_follow_the_policy(rng, policy):
    q, k, v = qkv(rng, 5, 3)
    out = linear_attention(q, k, v, elu_feature_map, causal="bottom-right", method="scan", fully_masked=policy)
    expected = {"zero": np.zeros(3), "nan": np.full(3, np.nan), "uniform": v.mean(axis=0)}[policy]
    np.testing.assert_allclose(out[:2], np.broadcast_to(expected, (2, 3)), **TIGHT)


def test_zero_denominator_is_an_error_not_a_silent_inf():
    # φ(x) = x can make φ(q)·Σφ(k) exactly 0: q = (1, −1), keys (1, 0) and (0, 1) sum to (1, 1).
    q, k, v = np.array([[1.0, -1.0]]), np.array([[1.0, 0.0], [0.0, 1.0]]), np.ones((2, 2))
    for method in ("equation", "right"):
        with pytest.raises(ZeroDivisionError, match=r"denominator .* is 0 at index \(0,\)"):
            linear_attention(q, k, v, lambda x: x, method=method)
    out = linear_attention(q, k, v, lambda x: x, eps=0.5)         # with eps the row is defined
    np.testing.assert_allclose(out, [[0.0, 0.0]], **TIGHT)


def test_eps_is_added_to_every_denominator(rng):
    q, k, v = qkv(rng, 4, 6)
    out = linear_attention(q, k, v, elu_feature_map, eps=1e-6, method="right")
    phi_q, phi_k = elu_feature_map(q), elu_feature_map(k)
    np.testing.assert_allclose(out, (phi_q @ (phi_k.T @ v)) / (phi_q @ phi_k.sum(0) + 1e-6)[:, None], **TIGHT)


def test_scan_kernel_python_source_equals_compiled(rng):
    phi_q, phi_k, v = (elu_feature_map(x) if i < 2 else x for i, x in enumerate(qkv(rng, 5, 7, batch=(2,))))
    results = []
    python_source = getattr(_causal_linear_scan, "py_func", _causal_linear_scan)  # no py_func when JIT is disabled
    out, den = np.empty((2, 5, 3)), np.empty((2, 5))
    causal_linear_scan(phi_q, phi_k, v, 2, 0.0, out, den)          # the wrapper, then the compiled kernel
    results.append((out, den))
    out, den = np.empty((2, 5, 3)), np.empty((2, 5))
    python_source(phi_q, phi_k, v, np.zeros((2, 0)), 0.0, 2, 0.0, out, den)
    results.append((out, den))
    np.testing.assert_allclose(results[0][0], results[1][0], **TIGHT)
    np.testing.assert_allclose(results[0][1], results[1][1], **TIGHT)


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"method": "right", "causal": True}, ValueError, "method='right' sums over every key"),
    ({"method": "scan"}, ValueError, "method='scan' is the causal recurrence"),
    ({"method": "fast"}, ValueError, "method must be one of"),
    ({"eps": np.inf}, ValueError, "eps must be a finite real number"),
    ({"feature_map": lambda x: x.sum(-1)}, ValueError, r"feature_map turned q of shape \(4, 3\) into shape \(4,\)"),
])
def test_bad_input(rng, kwargs, error, match):
    q, k, v = qkv(rng, 4, 6, d=3)
    kwargs = {"feature_map": elu_feature_map} | kwargs
    with pytest.raises(error, match=match):
        linear_attention(q, k, v, **kwargs)


def repeated_elu(x):
    """φ with 12 features for d = 4 (elu + 1, each feature three times)."""
    return np.repeat(elu_feature_map(x), 3, axis=-1)


def first_elu(x):
    """φ with 1 feature."""
    return elu_feature_map(x)[..., :1]


@pytest.mark.parametrize(("causal", "method"), [(False, "equation"), (False, "right"), (True, "equation"),
                                                (True, "scan"), ("bottom-right", "equation"), ("bottom-right", "scan")])
@pytest.mark.parametrize(("query_map", "key_map", "F_q", "F_k"), [(repeated_elu, first_elu, 12, 1),
                                                                  (first_elu, repeated_elu, 1, 12)])
def test_feature_counts_must_agree_before_any_method_runs(rng, causal, method, query_map, key_map, F_q, F_k):
    # Fewer key features made the scan read past phi_k (a crash, or different numbers on each call);
    # extra key features were ignored; the other methods failed inside matmul.
    q, k, v = qkv(rng, 6, 8)
    match = (rf"feature_map gave φ\(q\) of shape \(6, {F_q}\) \(F={F_q}\) but key_feature_map gave φ\(k\) of shape "
             rf"\(8, {F_k}\) \(F={F_k}\)")
    with pytest.raises(ValueError, match=match):
        linear_attention(q, k, v, query_map, key_feature_map=key_map, causal=causal, method=method)


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"feature_map": None}, TypeError, "feature_map must be a callable φ .* got NoneType"),
    ({"feature_map": "elu"}, TypeError, "feature_map must be a callable φ .* got str"),
    ({"key_feature_map": 3}, TypeError, "key_feature_map must be a callable φ .* got int"),
    ({"feature_map": lambda x: elu_feature_map(x) + 0j}, TypeError,
     r"feature_map must return real numbers, but gave dtype complex128 \(shape \(4, 3\)\) for q of shape \(4, 3\)"),
    ({"key_feature_map": lambda x: elu_feature_map(x) * 1j}, TypeError,
     r"key_feature_map must return real numbers, but gave dtype complex128 \(shape \(6, 3\)\) for k"),
    ({"feature_map": lambda x: x > 0}, TypeError, "feature_map must return real numbers, but gave dtype bool"),
    ({"feature_map": lambda x: np.array(["a"] * x.shape[-2])}, TypeError, "gave dtype <U1"),
    ({"return_weights": 1}, TypeError, "return_weights must be True or False, got 1"),
])
@pytest.mark.parametrize("method", ["equation", "right"])
def test_maps_must_be_callables_with_real_features(rng, kwargs, error, match, method):
    # A complex map was silently cast to its real part; None failed with "'NoneType' object is not callable".
    q, k, v = qkv(rng, 4, 6, d=3)
    kwargs = {"feature_map": elu_feature_map} | kwargs
    with pytest.raises(error, match=match):
        linear_attention(q, k, v, method=method, **kwargs)


def test_integer_features_are_real_and_accepted(rng):
    q, k, v = qkv(rng, 4, 6)
    def counts(x):
        return (x > 0).astype(np.int64) + 1                        # 1 or 2: positive integer features
    np.testing.assert_allclose(linear_attention(q, k, v, counts),
                               linear_attention(q, k, v, lambda x: counts(x).astype(np.float64)), **TIGHT)


@pytest.fixture
def small_budget():
    """A memory budget of 4 KiB (512 float64 entries), restored afterwards."""
    previous = set_memory_budget(4096)
    yield 4096
    set_memory_budget(previous)


@pytest.mark.parametrize("causal", [False, True, "bottom-right"])
def test_auto_streams_above_the_memory_budget(rng, small_budget, causal):
    # 30 × 40 = 1200 entries > 512: "auto" takes the right product or the chunkwise form, "equation" refuses before
    # allocating, and so do the weights; below the budget "auto" is the equation path itself.
    q, k, v = qkv(rng, 30, 40)
    streaming = "right" if causal is False else "chunk"
    np.testing.assert_array_equal(linear_attention(q, k, v, elu_feature_map, causal=causal),
                                  linear_attention(q, k, v, elu_feature_map, causal=causal, method=streaming))
    with pytest.raises(MemoryBudgetError,
                       match=r"similarity matrix of method='equation' of shape \(30, 40\) would take 8.94e-06 GiB"):
        linear_attention(q, k, v, elu_feature_map, causal=causal, method="equation")
    with pytest.raises(MemoryBudgetError, match=r"the weights \(return_weights=True\) of shape \(30, 40\)"):
        linear_attention(q, k, v, elu_feature_map, causal=causal, method=streaming, return_weights=True)
    q, k, v = qkv(rng, 12, 40)                                     # 480 entries: within the budget
    np.testing.assert_array_equal(linear_attention(q, k, v, elu_feature_map, causal=causal),
                                  linear_attention(q, k, v, elu_feature_map, causal=causal, method="equation"))
