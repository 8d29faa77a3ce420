"""sparse_attention: the CSR kernel against the dense masked equation path, and its conventions."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refattn import scaled_dot_product_attention
from refattn.kernels import POLICY_CODES
from refattn.kernels.csr import _csr_loop, sparse_attention_csr
from refattn.sparse import SparsePattern, sparse_attention
from refattn.sparse.band import band_pattern

from .naive import naive_sdpa

TIGHT = {"rtol": 1e-12, "atol": 1e-12}


def qkv(rng, n, m, d=4, d_v=3, batch=()):
    return (rng.standard_normal((*batch, n, d)), rng.standard_normal((*batch, m, d)),
            rng.standard_normal((*batch, m, d_v)))


def random_pattern_mask(rng, n, m, density):
    mask = rng.random((n, m)) < density
    mask[rng.integers(n)] = False                              # at least one empty row
    return mask


@settings(max_examples=40)
@given(st.integers(1, 9), st.integers(1, 11), st.floats(0.05, 1.0), st.integers(0, 2**32 - 1),
       st.sampled_from(["zero", "nan", "uniform"]))
def test_csr_equals_equation_on_random_patterns(n, m, density, seed, policy):
    rng = np.random.default_rng(seed)
    q, k, v = qkv(rng, n, m, batch=(2,))
    p = SparsePattern.from_mask(random_pattern_mask(rng, n, m, density))
    out_eq, A = sparse_attention(q, k, v, p, fully_masked=policy, return_weights=True)
    out_csr, data = sparse_attention(q, k, v, p, fully_masked=policy, return_weights=True, method="csr")
    np.testing.assert_allclose(out_csr, out_eq, **TIGHT)
    kept = p.to_mask()
    np.testing.assert_allclose(p.to_dense(data)[..., kept], A[..., kept], **TIGHT)


@pytest.mark.parametrize(("n", "m"), [(5, 8), (8, 5)])
@pytest.mark.parametrize("alignment", ["top-left", "bottom-right"])
def test_causal_patterns_equal_causal_sdpa(rng, n, m, alignment):
    q, k, v = qkv(rng, n, m)
    p = SparsePattern.full(n, m).causal(alignment)
    expected = scaled_dot_product_attention(q, k, v, causal=True if alignment == "top-left" else alignment)
    for method in ("equation", "csr"):
        np.testing.assert_allclose(sparse_attention(q, k, v, p, method=method), expected, **TIGHT)


def test_equation_path_matches_the_naive_loop(rng):
    q, k, v = qkv(rng, 6, 9)
    mask = random_pattern_mask(rng, 6, 9, 0.4)
    out, A = sparse_attention(q, k, v, SparsePattern.from_mask(mask), return_weights=True, method="csr")
    out_ref, A_ref = naive_sdpa(q, k, v, allowed=mask)
    np.testing.assert_allclose(out, out_ref, **TIGHT)


def test_full_pattern_is_full_attention(rng):
    q, k, v = qkv(rng, 7, 4, batch=(3, 2))
    out = sparse_attention(q, k, v, SparsePattern.full(7, 4), method="csr")
    np.testing.assert_allclose(out, scaled_dot_product_attention(q, k, v), **TIGHT)


def test_nonfinite_in_unused_keys_never_leaks(rng):
    q, k, v = qkv(rng, 6, 6)
    p = band_pattern(6, 1)
    clean = {method: sparse_attention(q, k, v, p, method=method) for method in ("equation", "csr")}
    k[5], v[5] = np.nan, np.inf                                  # key 5 is seen by queries 4 and 5 only
    for method in ("equation", "csr"):
        out = sparse_attention(q, k, v, p, method=method)
        np.testing.assert_array_equal(out[:4], clean[method][:4])
        assert np.isnan(out[4:]).all()


def test_per_head_patterns(rng):
    q, k, v = qkv(rng, 8, 8, batch=(2, 3))
    patterns = [band_pattern(8, w) for w in (0, 1, 3)]
    for method in ("equation", "csr"):
        out = sparse_attention(q, k, v, patterns, method=method)
        for h, p in enumerate(patterns):
            np.testing.assert_allclose(out[:, h], sparse_attention(q[:, h], k[:, h], v[:, h], p), **TIGHT)
    _, weights = sparse_attention(q, k, v, patterns, return_weights=True, method="csr")
    assert [w.shape for w in weights] == [(2, p.nnz) for p in patterns]


def test_kernel_python_source_equals_compiled(rng):
    # What NUMBA_DISABLE_JIT=1 runs: the kernel's own Python function, loops and all.
    q, k, v = qkv(rng, 5, 7, batch=(2,))
    p = SparsePattern.from_mask(random_pattern_mask(rng, 5, 7, 0.5))
    results = []
    bias = rng.standard_normal((2, p.nnz))
    bias[0, 0] = -np.inf                                         # a pair left out by its bias
    python_source = getattr(_csr_loop, "py_func", _csr_loop)    # no py_func when JIT is disabled
    for fn in (sparse_attention_csr, python_source):             # the checked entry runs the compiled loop
        out, w = np.empty((2, 5, 3)), np.empty((2, p.nnz))
        fn(q, k, v, (p.indptr, p.indices), 0.5, POLICY_CODES["uniform"], out, w, bias)
        results.append((out, w))
    np.testing.assert_allclose(results[0][0], results[1][0], **TIGHT)
    np.testing.assert_allclose(results[0][1], results[1][1], **TIGHT)


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"pattern": band_pattern(5, 1)}, ValueError, r"pattern has shape \(5, 5\) but q has n=4 queries and k has m=6"),
    ({"pattern": np.ones((4, 6), bool)}, TypeError, "pattern must be a SparsePattern or a non-empty sequence"),
    ({"pattern": [band_pattern(4, 1, m=6)] * 2}, ValueError, r"2 patterns given, one per head, but the head axis"),
    ({"pattern": band_pattern(4, 1, m=6), "method": "dense"}, ValueError, "method must be one of"),
    ({"pattern": band_pattern(4, 1, m=6), "fully_masked": "skip"}, ValueError, "fully_masked must be one of"),
])
def test_bad_input(rng, kwargs, error, match):
    q, k, v = qkv(rng, 4, 6)
    with pytest.raises(error, match=match):
        sparse_attention(q, k, v, **kwargs)


def csr_arguments(rng, B=2, n=4, m=6, d=3, d_v=2):
    q, k, v = qkv(rng, n, m, d, d_v, batch=(B,))
    p = SparsePattern.from_mask(random_pattern_mask(rng, n, m, 0.5))
    return {"q": q, "k": k, "v": v, "pattern": (p.indptr.copy(), p.indices.copy()), "scale": 0.5,
            "policy": POLICY_CODES["zero"], "out": np.empty((B, n, d_v)), "weights": np.empty((B, p.nnz))}


def _indices(change):
    return lambda args: (args["pattern"][0], change(args["pattern"][1].copy()))


def _indptr(change):
    return lambda args: (change(args["pattern"][0].copy()), args["pattern"][1])


def _set(position, value):
    def change(x):
        x[position] = value
        return x
    return change


@pytest.mark.parametrize(("name", "change", "error", "match"), [
    ("pattern", _indices(_set(-1, 6)), ValueError, r"indices must lie in \[0, 5\], got values in \[\d, 6\]"),
    ("pattern", _indices(_set(0, -1)), ValueError, r"indices must lie in \[0, 5\], got values in \[-1, \d\]"),
    ("pattern", _indices(lambda x: x.astype(np.float64)), TypeError,
     r"indices must have a signed integer dtype, got float64"),
    ("pattern", _indptr(lambda x: x[:-1].copy()), ValueError, r"indptr must have shape \(5,\), got shape \(4,\)"),
    ("pattern", _indptr(_set(0, 1)), ValueError, r"indptr must start at 0, never decrease, and end at len\(indices\)"),
    ("pattern", _indptr(_set(-1, 0)), ValueError, r"indptr must start at 0, never decrease"),
    ("pattern", _indptr(lambda x: np.concatenate([[0], x[-1:], x[2:]])), ValueError, r"never decrease"),
    ("weights", lambda args: np.empty((2, 1)), ValueError, r"weights must have shape \(B, 0\) or \(B, nnz\)"),
    ("out", lambda args: np.empty((2, 4, 3)), ValueError, r"out must have shape \(2, 4, 2\)"),
    ("k", lambda args: args["k"][:, :5].copy(), ValueError, r"v must have shape \(2, 5, ·\), got shape \(2, 6, 2\)"),
    ("policy", lambda args: True, ValueError, r"policy must be one of the codes"),
])
def test_kernel_checks_every_array_it_indexes(rng, name, change, error, match):
    args = csr_arguments(rng)
    args[name] = change(args)
    with pytest.raises(error, match=match):
        sparse_attention_csr(**args)


def test_a_tampered_pattern_is_refused_not_read_out_of_bounds(rng):
    q, k, v = qkv(rng, 4, 6)
    p = band_pattern(4, 1, m=6)
    object.__setattr__(p, "indices", np.where(p.indices == p.indices.max(), 60, p.indices).astype(np.int32))
    with pytest.raises(ValueError, match=r"indices must lie in \[0, 5\], got values in \[0, 60\]"):
        sparse_attention(q, k, v, p, method="csr")


def test_auto_is_the_equation_path_within_the_budget_and_csr_beyond_it(rng):
    from refattn.common import set_memory_budget
    from refattn.sparse import band_pattern

    q, k, v = rng.standard_normal((3, 2, 9, 4))
    p = band_pattern(9, 2)
    exact = {method: sparse_attention(q, k, v, p, method=method) for method in ("equation", "csr")}
    previous = set_memory_budget(2000)     # the weights (1296 bytes) fit; the equation path's ~4× of them does not
    try:
        np.testing.assert_array_equal(sparse_attention(q, k, v, p), exact["csr"])
        _, weights = sparse_attention(q, k, v, p, return_weights=True, method="auto")   # weights: always dense
        assert weights.shape == (2, 9, 9)
    finally:
        set_memory_budget(previous)
    np.testing.assert_array_equal(sparse_attention(q, k, v, p), exact["equation"])


def test_auto_with_one_pattern_per_head_returns_stacked_dense_weights(rng):
    from refattn.sparse import band_pattern

    q, k, v = rng.standard_normal((3, 2, 7, 4))                    # two heads on axis -3
    heads = [band_pattern(7, 1), band_pattern(7, 2)]
    out, weights = sparse_attention(q, k, v, heads, return_weights=True)
    out_eq, weights_eq = sparse_attention(q, k, v, heads, return_weights=True, method="equation")
    assert weights.shape == (2, 7, 7)
    np.testing.assert_array_equal(weights, weights_eq)
    np.testing.assert_array_equal(out, out_eq)
