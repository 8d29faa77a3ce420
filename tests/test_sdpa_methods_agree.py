"""Every method of scaled dot-product attention gives the same answer, or the same error, at the edges.

The methods: the equation path, the blocked kernel, "auto", the default (tests/test_sdpa_memory.py
checks that it streams beyond the memory budget), and the CSR kernel of ``sparse_attention`` over
the same allowed pairs. The edges: n, m, d_k, d_v or the batch of size 0
(one rule, in the docstring of ``scaled_dot_product_attention``), scores that overflow float64,
and the tile sizes of the blocked kernel, which every method checks alike.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from refattn import scaled_dot_product_attention
from refattn.common import MemoryBudgetError, temporary_memory_budget
from refattn.sparse import SparsePattern, sparse_attention

from .naive import naive_causal_allowed, naive_sdpa

EXACT = {"rtol": 1e-13, "atol": 1e-13}          # the blocked kernel's bound (tests/test_blocked_sdpa.py)
SDPA_METHODS = ["equation", "blocked", "auto", None]




def run(method, q, k, v, **kwargs):
    """(out, lse) of one method; "csr" takes a bool ``mask`` and ``causal`` as a pattern (no batch mask)."""
    if method == "csr":
        n, m = q.shape[-2], k.shape[-2]
        allowed = np.ones((n, m), bool) if kwargs.get("mask") is None else kwargs["mask"]
        causal = kwargs.get("causal", False)
        if causal is not False:
            allowed = allowed & naive_causal_allowed(n, m, "bottom-right" if causal == "bottom-right" else "top-left")
        out = sparse_attention(q, k, v, SparsePattern.from_mask(allowed), method="csr", scale=kwargs.get("scale"),
                               fully_masked=kwargs.get("fully_masked", "zero"))
        return out, None
    return scaled_dot_product_attention(q, k, v, return_lse=True, method=method, **kwargs)


def methods_for(kwargs):
    """The sdpa methods, and csr where the options are a pattern (a shared bool mask, causal, no lengths)."""
    mask = kwargs.get("mask")
    csr_ok = kwargs.get("key_lengths") is None and (mask is None or (mask.dtype == bool and mask.ndim == 2))
    return SDPA_METHODS + ["csr"] * csr_ok


def option_sets(rng, n, m, batch_last):
    """Masks (none, bool, bias with -inf), causal alignments and key lengths over (n, m)."""
    masks = [None, rng.random((n, m)) < 0.6,
             np.where(rng.random((n, m)) < 0.6, rng.standard_normal((n, m)), -np.inf)]
    lengths = [None, rng.integers(0, m + 1, size=batch_last)]
    for mask in masks:
        for causal in (False, True, "bottom-right"):
            for key_lengths in lengths:
                yield {"mask": mask, "causal": causal, "key_lengths": key_lengths}


EDGE_SHAPES = {                                                    # batch, n, m, d_k, d_v
    "n=0": ((2,), 0, 5, 4, 3),
    "m=0": ((2,), 3, 0, 4, 3),
    "n=m=0": ((2,), 0, 0, 4, 3),
    "d_v=0": ((2,), 3, 5, 4, 0),
    "batch=0": ((0, 2), 3, 5, 4, 3),
}


@pytest.mark.parametrize("policy", ["zero", "nan", "uniform"])
@pytest.mark.parametrize("shape", EDGE_SHAPES.values(), ids=EDGE_SHAPES.keys())
def test_edge_sizes_follow_one_rule_in_every_method(rng, shape, policy):
    batch, n, m, d_k, d_v = shape
    q, k, v = (rng.standard_normal((*batch, t, w)) for t, w in ((n, d_k), (m, d_k), (m, d_v)))
    fill = np.nan if policy == "nan" else 0.0                     # m = 0: "uniform" is the empty sum, 0
    for options in option_sets(rng, n, m, batch[-1]):
        for method in methods_for(options):
            out, lse = run(method, q, k, v, fully_masked=policy, **options)
            assert out.shape == (*batch, n, d_v) and out.dtype == np.float64, (method, options)
            if m == 0:
                np.testing.assert_array_equal(out, np.full(out.shape, fill), err_msg=str(method))
            if lse is not None:
                assert lse.shape == (*batch, n), method
                if m == 0:
                    np.testing.assert_array_equal(lse, -np.inf, err_msg=str(method))


@pytest.mark.parametrize("policy", ["zero", "nan", "uniform"])
def test_empty_value_vectors_keep_the_weights_log_sum_exp(rng, policy):
    # d_v = 0: nothing to average, but the scores are still there; lse equals the naive loop's.
    q, k, v = rng.standard_normal((4, 3)), rng.standard_normal((6, 3)), np.zeros((6, 0))
    allowed = rng.random((4, 6)) < 0.5
    allowed[1] = False
    expected = [math.log(sum(math.exp(sum(q[i, c] * k[j, c] for c in range(3)) / math.sqrt(3))
                             for j in range(6) if allowed[i, j])) if allowed[i].any() else -math.inf
                for i in range(4)]
    for method in SDPA_METHODS:
        out, lse = run(method, q, k, v, mask=allowed, fully_masked=policy)
        assert out.shape == (4, 0)
        np.testing.assert_allclose(lse, expected, **EXACT)


@pytest.mark.parametrize("policy", ["zero", "nan", "uniform"])
def test_empty_query_key_vectors_with_a_scale_attend_uniformly_in_every_method(rng, policy):
    # d_k = 0 with an explicit scale: every score is 0, so a row averages the values it may see.
    n, m = 4, 6
    q, k, v = np.zeros((2, n, 0)), np.zeros((2, m, 0)), rng.standard_normal((2, m, 3))
    mask = rng.random((n, m)) < 0.5
    mask[2] = False                                                # a fully masked row
    expected = np.empty((2, n, 3))
    for b in range(2):
        for i in range(n):
            seen = [j for j in range(m) if mask[i, j]]
            if seen:
                expected[b, i] = sum(v[b, j] for j in seen) / len(seen)
            else:
                expected[b, i] = {"zero": 0.0, "nan": np.nan, "uniform": sum(v[b]) / m}[policy]
    for method in methods_for({"mask": mask}):
        out, _ = run(method, q, k, v, mask=mask, scale=0.5, fully_masked=policy)
        np.testing.assert_allclose(out, expected, **EXACT, err_msg=str(method))


def test_empty_query_key_vectors_refuse_the_default_scale_in_every_method():
    q, k, v = np.zeros((3, 0)), np.zeros((5, 0)), np.ones((5, 2))
    messages = set()
    for method in [*SDPA_METHODS, "csr"]:
        with pytest.raises(ValueError, match=r"default scale 1/sqrt\(d_k\) needs d_k >= 1, got d_k=0") as info:
            run(method, q, k, v)
        messages.add(str(info.value))
    assert len(messages) == 1


def overflowing_inputs():
    """q_0·k_0 overflows: its four products are ±1e310, which a plain loop sums to NaN and BLAS with fused
    multiply-adds to -inf; every other score is finite (|q_0·k_1| = 2.75e155)."""
    q = np.array([[1e155, -1e155, 1e155, -1e155],
                  [1.0, 2.0, 0.5, -1.0],
                  [0.3, -0.2, 0.1, 0.4]])
    k = np.array([[-1e155, -1e155, -1e155, -1e155],
                  [0.5, 0.25, -1.0, 2.0],
                  [1.0, 1.0, 1.0, 1.0],
                  [-0.5, 0.1, 0.7, 0.2]])
    v = np.array([[1.0, -2.0], [0.5, 3.0], [-1.0, 0.25], [2.0, 1.0]])
    return q, k, v


@pytest.mark.parametrize("kind", ["none", "bool", "bias", "causal"])
def test_an_overflowing_score_makes_its_row_nan_in_every_method(kind):
    q, k, v = overflowing_inputs()
    hide = np.ones((3, 4), bool)
    hide[1:, 0] = False                                            # rows 1 and 2 never see key 0
    options = {"none": {}, "bool": {"mask": hide}, "bias": {"mask": np.where(hide, 0.25, -np.inf)},
               "causal": {"causal": True}}[kind]
    allowed = {"none": np.ones((3, 4), bool), "bool": hide, "bias": hide,
               "causal": naive_causal_allowed(3, 4)}[kind]
    bias = np.where(hide, 0.25, 0.0) if kind == "bias" else None
    for method in methods_for(options):
        out, lse = run(method, q, k, v, **options)
        assert np.isnan(out[0]).all(), method                      # row 0 sees key 0
        if lse is not None:
            assert np.isnan(lse[0]), method
        expected, _ = naive_sdpa(q[1:], k, v, allowed=allowed[1:], bias=None if bias is None else bias[1:])
        np.testing.assert_allclose(out[1:], expected, **EXACT, err_msg=str(method))   # finite scores only


def test_an_overflowing_score_in_a_hidden_pair_changes_nothing():
    q, k, v = overflowing_inputs()
    hide = np.ones((3, 4), bool)
    hide[0, 0] = False
    expected, _ = naive_sdpa(q, k, v, allowed=hide)
    for method in methods_for({"mask": hide}):
        out, _ = run(method, q, k, v, mask=hide)
        np.testing.assert_allclose(out, expected, **EXACT, err_msg=str(method))


def test_an_infinite_query_entry_makes_its_visible_row_nan(rng):
    # q_0 = (inf, 0, 0) against keys with k_j0 < 0: every score is -inf, which the equation path used
    # to read as "no visible key" and answer with zeros; the row now is NaN in every method.
    q, k, v = rng.standard_normal((3, 3)), rng.standard_normal((5, 3)), rng.standard_normal((5, 2))
    q[0] = (np.inf, 0.0, 0.0)
    k[:, 0] = -np.abs(k[:, 0]) - 0.1
    expected, _ = naive_sdpa(q[1:], k, v)
    for method in methods_for({}):
        out, _ = run(method, q, k, v)
        assert np.isnan(out[0]).all(), method
        np.testing.assert_allclose(out[1:], expected, **EXACT, err_msg=str(method))


BAD_BLOCK_SIZES = [0, -3, 2.5, True, "8", (4, 0), (2, 3, 4), [4]]


@pytest.mark.parametrize("block_size", BAD_BLOCK_SIZES, ids=repr)
def test_block_size_is_checked_alike_whatever_the_method(rng, block_size):
    small = [rng.standard_normal((5, 4)) for _ in range(3)]
    big = [np.zeros((2048, 1)), np.zeros((2048, 1)), np.zeros((2048, 1))]   # 2**22 scores: "auto" is blocked
    messages = set()
    for q, k, v in (small, big):
        for method in ("equation", "blocked", "auto", None):
            with pytest.raises(ValueError, match=r"block_size must be a positive int") as info:
                scaled_dot_product_attention(q, k, v, method=method, block_size=block_size)
            messages.add(str(info.value))
    assert len(messages) == 1


@pytest.mark.parametrize("block_size", [2**40, (2**62, 3), (1, 2**40)])
def test_a_tile_larger_than_the_problem_is_cut_to_it(rng, block_size):
    q, k, v = rng.standard_normal((2, 7, 4)), rng.standard_normal((2, 9, 4)), rng.standard_normal((2, 9, 3))
    expected = scaled_dot_product_attention(q, k, v, causal=True, return_lse=True)
    got = scaled_dot_product_attention(q, k, v, causal=True, return_lse=True, method="blocked", block_size=block_size)
    for a, b in zip(expected, got, strict=True):
        np.testing.assert_allclose(b, a, **EXACT)


def test_tiles_over_the_memory_budget_are_refused_before_allocating(rng):
    q = k = v = rng.standard_normal((600, 2))
    with temporary_memory_budget(2**20), \
            pytest.raises(MemoryBudgetError, match=r"score tiles \(block_size=\(600, 600\).*GiB"):
        scaled_dot_product_attention(q, k, v, method="blocked", block_size=600)   # ≥ 2.7 MiB per thread
    with temporary_memory_budget(2**20):                                            # the default tiles fit
        out = scaled_dot_product_attention(q, k, v, method="blocked")
    np.testing.assert_allclose(out, scaled_dot_product_attention(q, k, v), **EXACT)
