"""sdpa_vjp(method="blocked") (FlashAttention-2's backward, Numba) against the equation VJP.

Tolerance 1e-12, relative to the largest gradient entry (and absolute below 1): the blocked pass
recomputes the weights as exp(s − L) instead of exp(s − max)/Σ, uses D_i = dO_i·O_i for
Σ_j dA_ij A_ij and sums tile by tile, a few roundings per entry (observed ~5e-16); a wrong
rescale, a missed tile or a leaked masked pair is O(1).
"""
from __future__ import annotations

import numpy as np
import pytest

from refattn.common import temporary_memory_budget
from refattn.core.sdpa import AUTO_BLOCKED_ENTRIES
from refattn.oracle.vjp import VJP_ARRAYS, sdpa_vjp, vjp_method

TOL = 1e-12


def assert_same_grads(blocked, equation):
    """Every gradient: NaN in the same places, else equal to TOL relative to the largest entry."""
    for name, b, e in zip(("dq", "dk", "dv", "d_bias"), blocked, equation, strict=True):
        if e is None:
            assert b is None, name
            continue
        assert b.shape == e.shape, name
        np.testing.assert_array_equal(np.isnan(b), np.isnan(e), err_msg=name)
        finite = ~np.isnan(e)
        bound = TOL * max(1.0, float(np.max(np.abs(e[finite]), initial=0.0)))
        assert float(np.max(np.abs(b[finite] - e[finite]), initial=0.0)) <= bound, name


def inputs(rng, n, m, d=5, d_v=4, batch=(2, 3)):
    return (rng.standard_normal((*batch, n, d)), rng.standard_normal((*batch, m, d)),
            rng.standard_normal((*batch, m, d_v)), rng.standard_normal((*batch, n, d_v)))


def both(q, k, v, d_out, mask=None, block_size=None, **options):
    equation = sdpa_vjp(q, k, v, d_out, mask, method="equation", **options)
    blocked = sdpa_vjp(q, k, v, d_out, mask, method="blocked", block_size=block_size, **options)
    return blocked, equation


@pytest.mark.parametrize(("n", "m", "block_size"), [(16, 16, 8), (37, 37, 8), (37, 53, (8, 16)), (50, 29, (7, 5)),
                                                    (9, 9, 64), (1, 11, 1)])
@pytest.mark.parametrize("causal", [False, "top-left", "bottom-right"])
def test_blocked_vjp_equals_the_equation(rng, n, m, block_size, causal):
    q, k, v, d_out = inputs(rng, n, m)
    assert_same_grads(*both(q, k, v, d_out, block_size=block_size, causal=causal, scale=0.6))


@pytest.mark.parametrize("kind", ["bool", "bias", "lengths", "bias+lengths"])
@pytest.mark.parametrize("fully_masked", ["zero", "nan", "uniform"])
@pytest.mark.parametrize("causal", [False, True, "bottom-right"])
def test_blocked_vjp_masks_and_policies(rng, kind, fully_masked, causal):
    n, m = 23, 31
    q, k, v, d_out = inputs(rng, n, m)
    mask, options = None, {"causal": causal, "fully_masked": fully_masked}
    if kind == "bool":
        mask = rng.random((3, n, m)) < 0.2                         # shared by the batch: some rows see nothing
    if kind.startswith("bias"):
        mask = rng.standard_normal((2, 3, n, m))
        mask[rng.random(mask.shape) < 0.6] = -np.inf
        mask[0, 1, 4] = -np.inf                                    # a fully masked row
    if kind.endswith("lengths"):
        options["key_lengths"] = np.array([[0, 5, 31], [3, 1, 17]])
    assert_same_grads(*both(q, k, v, d_out, mask, block_size=(8, 6), **options))


def test_blocked_vjp_shared_bias_and_keys_sum_over_the_batch(rng):
    n, m = 19, 21
    q, d_out = rng.standard_normal((2, 3, n, 5)), rng.standard_normal((2, 3, n, 4))
    k, v = rng.standard_normal((m, 5)), rng.standard_normal((3, m, 4))   # broadcast over the batch
    bias = np.where(rng.random((n, m)) < 0.7, rng.standard_normal((n, m)), -np.inf)
    blocked, equation = both(q, k, v, d_out, bias, block_size=4, causal=True)
    assert blocked.dk.shape == k.shape and blocked.d_bias.shape == bias.shape
    assert_same_grads(blocked, equation)


def test_blocked_vjp_grouped_query_heads(rng):
    n, m = 17, 26
    q, d_out = rng.standard_normal((2, 6, n, 5)), rng.standard_normal((2, 6, n, 4))
    k, v = rng.standard_normal((2, 2, m, 5)), rng.standard_normal((2, 2, m, 4))
    lengths = np.array([[26, 3, 0, 9, 26, 1], [2, 2, 2, 26, 25, 24]])
    for fully_masked in ("zero", "nan", "uniform"):
        blocked, equation = both(q, k, v, d_out, block_size=(5, 8), enable_gqa=True, causal="bottom-right",
                                 key_lengths=lengths, fully_masked=fully_masked)
        assert blocked.dk.shape == k.shape
        assert_same_grads(blocked, equation)


def test_blocked_vjp_garbage_in_masked_keys_values_and_rows_stays_out(rng):
    n, m = 20, 24
    q, k, v, d_out = inputs(rng, n, m)
    lengths = np.array([[24, 10, 0], [5, 24, 13]])
    for b, h, length in ((0, 1, 10), (1, 0, 5), (1, 2, 13)):
        k[b, h, length:] = np.nan                                  # padding garbage beyond the key length
        v[b, h, length:] = np.inf
    d_out[0, 2] = np.nan                                           # a head whose rows all see no key
    mask = rng.random((n, m)) < 0.8
    for fully_masked in ("zero", "uniform"):
        blocked, equation = both(q, k, v, d_out, mask, block_size=(6, 7), key_lengths=lengths, causal=True,
                                 fully_masked=fully_masked)
        assert_same_grads(blocked, equation)
    assert np.isfinite(blocked.dk[1, 0]).all() and np.isfinite(blocked.dv[0, 1]).all()


@pytest.mark.parametrize(("n", "m", "d", "d_v", "batch"), [(0, 4, 3, 2, (2,)), (3, 0, 3, 2, (2,)),
                                                           (3, 4, 3, 0, (2,)), (3, 4, 0, 2, (2,)),
                                                           (3, 4, 3, 2, (0, 2))])
@pytest.mark.parametrize("fully_masked", ["zero", "nan", "uniform"])
def test_blocked_vjp_edge_sizes(rng, n, m, d, d_v, batch, fully_masked):
    q, k, v, d_out = inputs(rng, n, m, d, d_v, batch)
    assert_same_grads(*both(q, k, v, d_out, scale=0.5, fully_masked=fully_masked))


def test_default_and_auto_choose_blocked_where_the_dense_arrays_are_large(rng):
    big = (AUTO_BLOCKED_ENTRIES + 1,)
    assert vjp_method("auto", np.float64, big) == "blocked"
    assert vjp_method("auto", np.float32, big) == "equation"
    q, k, v, d_out = inputs(rng, 64, 64)
    expected = sdpa_vjp(q, k, v, d_out, causal=True, method="equation")
    scores = 6 * 64 * 64 * 8
    with temporary_memory_budget(VJP_ARRAYS * scores // 2):       # the dense VJP no longer fits: it streams
        assert vjp_method("auto", np.float64, (6, 64, 64)) == "blocked"
        assert_same_grads(sdpa_vjp(q, k, v, d_out, causal=True), expected)


def test_vjp_method_none_is_the_deprecated_spelling_of_auto(rng):
    q, k, v, d_out = inputs(rng, 4, 5)
    with pytest.warns(DeprecationWarning, match=r'sdpa_vjp: method=None is method="auto"'):
        old = sdpa_vjp(q, k, v, d_out, method=None)
    for was, now in zip(old, sdpa_vjp(q, k, v, d_out), strict=True):   # the same path: the same bits
        assert (was is None and now is None) or np.array_equal(was, now)


def test_blocked_vjp_refuses_other_dtypes_and_bad_options(rng):
    q, k, v, d_out = inputs(rng, 4, 5)
    with pytest.raises(ValueError, match="float64 only"):
        sdpa_vjp(q, k, v, d_out, method="blocked", dtype=np.float32)
    with pytest.raises(ValueError, match="method"):
        sdpa_vjp(q, k, v, d_out, method="tiled")
    with pytest.raises(ValueError, match="block_size"):
        sdpa_vjp(q, k, v, d_out, method="blocked", block_size=0)
    with pytest.raises(ValueError, match="key_lengths"):
        sdpa_vjp(q, k, v, d_out, method="blocked", key_lengths=np.array([6, 1, 1]))


def test_float64_gradients_over_the_memory_budget_come_from_the_blocked_backward(rng):
    from refattn.oracle.evaluate import Conventions, Problem, evaluate

    q, k, v, d_out = inputs(rng, 40, 40, batch=(2,))
    conv = Conventions(causal="top-left", scale=0.4, fully_masked="zero", mask=None, layout="bhnd")
    dense = evaluate(Problem(q, k, v, d_out, {}, True), conv, np.float64)
    small = evaluate(Problem(q, k, v, d_out, {}, True, memory_budget=2 * 40 * 40 * 8), conv, np.float64)
    for name in ("out", "dq", "dk", "dv"):
        bound = TOL * max(1.0, float(np.max(np.abs(dense.arrays[name]))))
        assert float(np.max(np.abs(small.arrays[name] - dense.arrays[name]))) <= bound, name
    assert small.arrays["dq"].dtype == np.float64                  # the blocked backward's, never n × m


def test_d_bias_is_zero_on_masked_pairs_when_a_visible_value_is_nan(rng):
    # A NaN value that row i sees makes the row's Σ_j dA_ij A_ij NaN; the masked pairs' d_bias stays the
    # documented 0 (selection, not 0 · NaN), on both paths, and the visible pairs are NaN on both.
    q, k, v, d_out = inputs(rng, 6, 9, batch=(2,))
    bias = np.where(rng.random((6, 9)) < 0.6, rng.standard_normal((6, 9)), -np.inf)
    bias[:, 4] = 0.0                                               # key 4 visible to every row
    v[0, 4, 1] = np.nan
    with np.errstate(invalid="ignore"):
        for method in ("equation", "blocked"):
            d_bias = sdpa_vjp(q, k, v, d_out, bias, method=method).d_bias
            masked = np.isneginf(bias)
            assert np.array_equal(d_bias[masked], np.zeros(int(masked.sum()))), method
            assert np.isnan(d_bias[~masked]).all(), method
