"""refattn.oracle.check within a memory budget: output and gradients by blocks of query rows equal the dense ones."""
from __future__ import annotations

import tracemalloc
from dataclasses import replace

import numpy as np
import pytest

from refattn import scaled_dot_product_attention
from refattn.common import DEFAULT_MEMORY_BUDGET
from refattn.masks import attention_mask
from refattn.oracle.check import check
from refattn.oracle.evaluate import (
    DENSE_ARRAYS,
    Conventions,
    Problem,
    _row_block_mask,
    block_rows,
    evaluate,
)
from refattn.oracle.fixtures import CASES, make_case
from refattn.oracle.vjp import sdpa_vjp


def case_problem(name: str, layout: str, budget: int = DEFAULT_MEMORY_BUDGET):
    """(problem, conventions) of fixture case ``name``, forward only, with a float32 candidate."""
    a = make_case(name, layout=layout)
    causal = {"none": None}.get(str(a["causal"]), str(a["causal"]))
    conv = Conventions(causal, float(a["scale"]), str(a["fully_masked"]), a.get("mask"), layout)
    problem = Problem(a["q"], a["k"], a["v"], None, {"out": a["out"].astype(np.float32)}, False, budget)
    return problem, conv


def rows_budget(problem: Problem, layout: str, rows: int) -> int:
    """The budget that gives blocks of ``rows`` query rows: (b, h) query heads over m keys."""
    q, k = (problem.q, problem.k) if layout == "bhnd" else (np.swapaxes(problem.q, 1, 2), np.swapaxes(problem.k, 1, 2))
    return rows * DENSE_ARRAYS * 8 * q.shape[0] * q.shape[1] * k.shape[2]


def test_small_problems_run_the_equation_path_itself(rng):
    q, k, v = rng.standard_normal((2, 3, 5, 8)), rng.standard_normal((2, 3, 9, 8)), rng.standard_normal((2, 3, 9, 6))
    problem = Problem(q, k, v, None, {"out": np.zeros((2, 3, 5, 6), np.float32)}, False)
    conv = Conventions("bottom-right", 0.3, "zero", None, "bhnd")
    assert block_rows(q, k, v, None, DEFAULT_MEMORY_BUDGET) == 5
    for dtype in (np.float64, np.float32):
        expected = scaled_dot_product_attention(q, k, v, causal="bottom-right", scale=0.3, dtype=dtype)
        assert np.array_equal(evaluate(problem, conv, dtype).arrays["out"], expected)   # bit for bit


def test_block_rows_follow_the_budget(rng):
    q, k, v = rng.standard_normal((2, 3, 10, 4)), rng.standard_normal((1, 3, 7, 4)), rng.standard_normal((1, 3, 7, 5))
    row = DENSE_ARRAYS * 8 * (2 * 3) * 7                            # bytes per query row: batch (2, 3), m = 7
    assert block_rows(q, k, v, None, 10 * row) == 10                # exactly fits: dense
    assert block_rows(q, k, v, None, 10 * row - 1) == 9
    assert block_rows(q, k, v, None, 3 * row + row // 2) == 3
    assert block_rows(q, k, v, None, 1) == 1                        # never fewer than one row
    with pytest.raises(ValueError, match="leading"):               # (4, 1) does not broadcast with (2, 3)
        block_rows(q, k, v, np.ones((4, 1, 1, 7), bool), 10 * row)
    mask = np.ones((5, 2, 1, 1, 7), bool)                           # batch (5, 2, 3): five times the bytes per row
    assert block_rows(q, k, v, mask, 10 * row) == 2


@pytest.mark.parametrize("causal", [None, "top-left", "bottom-right"])
@pytest.mark.parametrize("kind", ["none", "bool", "bool-broadcast", "float", "float-broadcast"])
@pytest.mark.parametrize(("n", "m"), [(6, 9), (9, 6)])
def test_row_block_mask_is_those_rows_of_the_dense_mask(rng, causal, kind, n, m):
    mask = {"none": None, "bool": rng.random((2, n, m)) < 0.7, "bool-broadcast": rng.random((2, 1, m)) < 0.7,
            "float": np.where(rng.random((2, n, m)) < 0.7, rng.standard_normal((2, n, m)), -np.inf),
            "float-broadcast": np.where(rng.random((m,)) < 0.7, rng.standard_normal(m), -np.inf)}[kind]
    conv = Conventions(causal, 1.0, "zero", mask, "bhnd")
    allowed, bias = attention_mask(mask, causal or False, n, m, np.float64)
    allowed = np.ones((n, m), bool) if allowed is None else np.broadcast_to(allowed, np.broadcast_shapes(allowed.shape,
                                                                                                          (n, m)))
    for start, stop in ((0, 4), (4, n), (2, 3)):
        rows, rows_bias = attention_mask(_row_block_mask(conv, n, m, start, stop), False, stop - start, m, np.float64)
        rows = np.ones((stop - start, m), bool) if rows is None else rows
        assert np.array_equal(np.broadcast_to(rows, allowed[..., start:stop, :].shape), allowed[..., start:stop, :])
        if bias is not None:                                         # the bias itself is unchanged where allowed
            dense_bias = np.broadcast_to(bias, allowed.shape)[..., start:stop, :]
            block_bias = np.broadcast_to(rows_bias, dense_bias.shape)
            kept = allowed[..., start:stop, :]
            assert np.array_equal(block_bias[kept], dense_bias[kept])


@pytest.mark.parametrize("rows", [1, 2, 4])
@pytest.mark.parametrize("layout", ["bhnd", "bnhd"])
@pytest.mark.parametrize("name", list(CASES))
def test_row_blocks_give_the_dense_oracle_baseline_and_error_model(name, layout, rows):
    dense, conv = case_problem(name, layout)
    blocks = replace(dense, memory_budget=rows_budget(dense, layout, rows))
    # BLAS may order a block's sums unlike the whole matrix's: a float32 or float16 ulp or so apart
    # (measured: 6.6e-8 relative in float32, 0 in float16, 1.8e-16 in float64)
    for dtype, noise, tol in ((np.float64, ("abs", "rss"), 1e-12), (np.float32, (), 1e-6), (np.float16, (), 1e-3)):
        a, b = evaluate(dense, conv, dtype, noise=noise), evaluate(blocks, conv, dtype, noise=noise)
        scale = float(np.max(np.abs(a.arrays["out"])))
        assert b.arrays["out"].dtype == a.arrays["out"].dtype and b.arrays["out"].shape == a.arrays["out"].shape
        assert float(np.max(np.abs(b.arrays["out"] - a.arrays["out"]))) <= tol * scale
        assert np.array_equal(b.empty, a.empty)
        assert b.groups == a.groups
        for combine in noise:
            assert b.noise[combine]["out"] == pytest.approx(a.noise[combine]["out"], rel=1e-12)


@pytest.mark.parametrize("name", list(CASES))
def test_check_by_row_blocks_reaches_the_dense_verdict(name):
    a = make_case(name)
    kwargs = dict(mask=a.get("mask"), causal={"none": False}.get(str(a["causal"]), str(a["causal"])),
                  scale=float(a["scale"]), fully_masked=str(a["fully_masked"]))
    for candidate in (a["out"].astype(np.float32), a["out"].astype(np.float16), a["out"],
                      a["out"].astype(np.float32)[..., ::-1], (a["out"] * 1.01).astype(np.float32)):
        dense = check(candidate, a["q"], a["k"], a["v"], **kwargs)
        blocks = check(candidate, a["q"], a["k"], a["v"], memory_budget=1, **kwargs)   # one row at a time
        assert blocks.passed == dense.passed
        assert blocks.alternatives == dense.alternatives
        assert blocks.fully_masked == dense.fully_masked
        for c_blocks, c_dense in zip(blocks.comparisons, dense.comparisons, strict=True):
            assert c_blocks.passed == c_dense.passed
            assert c_blocks.max_abs_error == pytest.approx(c_dense.max_abs_error, rel=1e-6, abs=1e-15)


@pytest.mark.parametrize("rows", [1, 3])
@pytest.mark.parametrize("layout", ["bhnd", "bnhd"])
@pytest.mark.parametrize("name", list(CASES))
def test_gradients_by_row_blocks_equal_the_dense_ones(rng, name, layout, rows):
    # dQ row by row; dK, dV and their κ summed over the blocks. float64 and its κ: the same sums in
    # another order (1e-12); float64 without κ: the blocked kernels (measured 3e-14). float32 and
    # float16 baselines: each block's partial dK, dV is rounded to the dtype before the blocks are
    # added, a few ulps of the largest entry (measured over these cases: 3.2e-7 in float32, 1.3e-3
    # in float16, relative to the largest entry; bounds 1e-6 and 4e-3).
    dense, conv = case_problem(name, layout)
    d_out = rng.standard_normal(dense.q.shape[:-1] + (dense.v.shape[-1],))
    dense = replace(dense, d_out=d_out, grads=True)
    blocks = replace(dense, memory_budget=rows_budget(dense, layout, rows))
    for dtype, noise, tol in ((np.float64, ("abs", "rss"), 1e-12), (np.float64, (), 1e-12), (np.float32, (), 1e-6),
                              (np.float16, (), 4e-3)):
        a, b = evaluate(dense, conv, dtype, noise=noise), evaluate(blocks, conv, dtype, noise=noise)
        assert np.array_equal(b.empty, a.empty)
        for array in ("out", "dq", "dk", "dv"):
            assert b.arrays[array].dtype == a.arrays[array].dtype and b.arrays[array].shape == a.arrays[array].shape
            scale = max(1.0, float(np.max(np.abs(a.arrays[array]))))
            assert float(np.max(np.abs(b.arrays[array] - a.arrays[array]))) <= tol * scale, (dtype, array)
        for combine in noise:
            for array in ("out", "dq", "dk", "dv"):
                assert b.noise[combine][array] == pytest.approx(a.noise[combine][array], rel=1e-12), (combine, array)


def test_gradients_above_the_budget_are_checked_by_row_blocks_within_it(rng):
    h, n, m, d = 2, 256, 320, 8
    q, k, v, d_out = (rng.standard_normal(shape) for shape in ((h, n, d), (h, m, d), (h, m, d), (h, n, d)))
    g = sdpa_vjp(q, k, v, d_out, dtype=np.float32)
    out = scaled_dot_product_attention(q, k, v).astype(np.float32)
    grads = {"d_out": d_out, "dq": g.dq, "dk": g.dk, "dv": g.dv}
    budget = 10 * 2**20                                             # the dense evaluation needs 11.25 MiB
    assert DENSE_ARRAYS * 8 * h * n * m > budget
    check(out, q, k, v, memory_budget=budget, **grads)            # a first call may compile the blocked kernels
    tracemalloc.start()
    try:
        blocks = check(out, q, k, v, memory_budget=budget, **grads)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # The row blocks are sized so that one evaluation's (rows, m) arrays fit the budget; the rest (the
    # blocked backward's O(n·d) arrays, the partial sums, the candidate's copies) is small beside it
    # (measured: 0.70 × the budget).
    assert peak < budget
    dense = check(out, q, k, v, **grads)
    assert blocks.passed and dense.passed
    # The float64 oracle by blocks (the blocked kernels) differs from the dense one by rounding, about
    # 1e-15 of entries of size 1, against candidate errors of 2e-8 and more: at most ~1e-7 of an error
    # (measured: 8e-10).
    for c_blocks, c_dense in zip(blocks.comparisons, dense.comparisons, strict=True):
        assert c_blocks.name == c_dense.name
        assert c_blocks.max_abs_error == pytest.approx(c_dense.max_abs_error, rel=1e-6, abs=1e-15)
    bad = check(out, q, k, v, memory_budget=budget, **(grads | {"dk": g.dk * 1.01}))
    assert [c.passed for c in bad.comparisons] == [True, True, False, True]


@pytest.mark.parametrize("budget", [0, -1, 1.5, True, "4 GiB"])
def test_memory_budget_must_be_a_positive_int(rng, budget):
    q = rng.standard_normal((3, 4))
    with pytest.raises(ValueError, match="memory_budget must be a positive int"):
        check(np.zeros((3, 4)), q, q, q, memory_budget=budget)


def test_default_memory_budget_is_the_librarys(rng):
    """memory_budget=None takes refattn.common.memory_budget(): one budget for every streaming default."""
    from refattn.common import set_memory_budget

    q = rng.standard_normal((1, 6, 4))
    out, d_out = scaled_dot_product_attention(q, q, q), rng.standard_normal((1, 6, 4))
    grads = [np.zeros((1, 6, 4))] * 3
    assert check(out, q, q, q, d_out=d_out, dq=grads[0], dk=grads[1], dv=grads[2]) is not None
    dense = check(out, q, q, q, d_out=d_out, dq=grads[0], dk=grads[1], dv=grads[2])
    previous = set_memory_budget(9 * 8 * 6 * 4)   # four query rows of the 9 dense arrays (the kernels' tiles fit)
    try:
        blocks = check(out, q, q, q, d_out=d_out, dq=grads[0], dk=grads[1], dv=grads[2])   # by blocks of rows
        assert check(out, q, q, q).passed
    finally:
        set_memory_budget(previous)
    # The float64 candidate "out" is the dense oracle's own equation (error 0 there); the oracle by blocks of rows
    # computes its products with fewer rows, which BLAS may sum in other orders: a few roundings of entries of
    # size <= max|q|, 4·(d + m)·eps·max|q| with d = 4 and m = 6 terms per sum (the measured gap: 1 ulp).
    tol = 4 * (4 + 6) * np.finfo(np.float64).eps * np.abs(q).max()
    assert [c.max_abs_error for c in blocks.comparisons] == pytest.approx([c.max_abs_error for c in dense.comparisons],
                                                                          rel=1e-12, abs=tol)
