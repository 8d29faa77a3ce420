"""refattn.oracle.check: correct implementations pass, convention mix-ups are named, NaN is never hidden."""
from __future__ import annotations

import numpy as np
import pytest

from refattn import causal_mask, padding_mask, scaled_dot_product_attention
from refattn.oracle.check import assert_close, check
from refattn.oracle.shapes import repeat_over_groups, sum_over_groups
from refattn.oracle.tolerances import DEFAULT_MAX_ULPS, TABLES, forward_noise, gradient_noise, table_tolerance
from refattn.oracle.vjp import sdpa_vjp

# ---------------------------------------------------------------- an independent float32 implementation


def flash_forward(q, k, v, allowed, scale, dtype=np.float32, block=3):
    """FlashAttention's forward written from its paper: key blocks, running max and sum (online softmax).

    ``allowed`` is a boolean (..., n, m) array (True = may attend). Returns (out, lse) in ``dtype``;
    a query that sees no key gets 0 (and lse = -inf).
    """
    q, k, v = (np.asarray(x, dtype) for x in (q, k, v))
    m = k.shape[-2]
    out = np.zeros(q.shape[:-1] + (v.shape[-1],), dtype)
    row_max = np.full(q.shape[:-1] + (1,), -np.inf, dtype)
    row_sum = np.zeros(q.shape[:-1] + (1,), dtype)
    q_scaled = q * dtype(scale)
    for j0 in range(0, m, block):
        keys = slice(j0, min(j0 + block, m))
        S = q_scaled @ np.swapaxes(k[..., keys, :], -1, -2)
        S = np.where(allowed[..., keys], S, -np.inf)
        new_max = np.maximum(row_max, S.max(axis=-1, keepdims=True))
        shift = np.where(new_max == -np.inf, 0, new_max)
        p = np.exp(S - shift)
        rescale = np.exp(np.where(row_max == -np.inf, -np.inf, row_max - shift))
        row_sum = row_sum * rescale + p.sum(axis=-1, keepdims=True)
        out = out * rescale + p @ v[..., keys, :]
        row_max = new_max
    seen = row_sum > 0
    out = np.where(seen, out / np.where(seen, row_sum, 1), 0).astype(dtype)
    with np.errstate(divide="ignore"):
        lse = np.where(seen, row_max + np.log(np.where(seen, row_sum, 1)), -np.inf)[..., 0].astype(dtype)
    return out, lse


def flash_backward(q, k, v, d_out, allowed, scale, dtype=np.float32, block=3):
    """FlashAttention-2's backward: recompute the weights from the log-sum-exp, one key block at a time."""
    out, lse = flash_forward(q, k, v, allowed, scale, dtype, block)
    q, k, v, d_out = (np.asarray(x, dtype) for x in (q, k, v, d_out))
    D = np.sum(d_out * out, axis=-1, keepdims=True)                # rowsum(dO ⊙ O)
    dq = np.zeros(np.broadcast_shapes(q.shape, d_out.shape[:-1] + (q.shape[-1],)), dtype)
    dk = np.zeros(dq.shape[:-2] + k.shape[-2:], dtype)
    dv = np.zeros(dq.shape[:-2] + v.shape[-2:], dtype)
    finite_lse = np.where(lse == -np.inf, 0, lse)[..., None]
    for j0 in range(0, k.shape[-2], block):
        keys = slice(j0, min(j0 + block, k.shape[-2]))
        S = (q * dtype(scale)) @ np.swapaxes(k[..., keys, :], -1, -2)
        P = np.where(allowed[..., keys], np.exp(np.where(allowed[..., keys], S, 0) - finite_lse), 0).astype(dtype)
        dv[..., keys, :] = np.swapaxes(P, -1, -2) @ d_out
        dS = P * (d_out @ np.swapaxes(v[..., keys, :], -1, -2) - D)
        dq += (dS @ k[..., keys, :]) * dtype(scale)
        dk[..., keys, :] = (np.swapaxes(dS, -1, -2) @ q) * dtype(scale)
    return out, dq, dk, dv


@pytest.fixture
def problem(rng):
    """b=2, h=3, n=5 queries, m=9 keys (n != m), d_k=8, d_v=6, key padding, causal top-left."""
    q = rng.standard_normal((2, 3, 5, 8))
    k = rng.standard_normal((2, 3, 9, 8))
    v = rng.standard_normal((2, 3, 9, 6))
    d_out = rng.standard_normal((2, 3, 5, 6))
    mask = padding_mask(np.array([9, 6]), 9)[:, None]              # (2, 1, 1, 9)
    return q, k, v, d_out, mask


def allowed_of(mask, n, m, alignment="top-left"):
    tri = causal_mask(n, m, causal=alignment) if alignment else np.ones((n, m), bool)
    return tri if mask is None else mask & tri


# ----------------------------------------------------------------------------------------- passing


@pytest.mark.parametrize(("rule", "table"), [("ratio", None), ("table", "torch-default"), ("table", "xformers"),
                                             ("table", "jax"), ("ulp", None)])
def test_correct_float32_implementation_passes_every_rule(problem, rule, table):
    q, k, v, d_out, mask = problem
    allowed = allowed_of(mask, 5, 9)
    scale = 1 / np.sqrt(8)
    out, dq, dk, dv = flash_backward(q, k, v, d_out, allowed, scale)
    report = check(out, q, k, v, mask=mask, causal=True, d_out=d_out, dq=dq, dk=dk, dv=dv, rule=rule, table=table)
    assert report.passed, str(report)
    assert [c.name for c in report.comparisons] == ["out", "dq", "dk", "dv"]
    assert report.dtype == "float32"
    assert report.alternatives == ()


def test_refattn_float16_and_float64_pass_and_float64_is_held_to_ulps(problem):
    q, k, v, _, mask = problem
    for dtype in (np.float16, np.float64):
        out = scaled_dot_product_attention(q, k, v, mask, causal=True, dtype=dtype)
        assert check(out, q, k, v, mask=mask, causal=True).passed
    out64, _ = flash_forward(q, k, v, allowed_of(mask, 5, 9), 1 / np.sqrt(8), np.float64)
    report = check(out64, q, k, v, mask=mask, causal=True)
    assert report.passed, str(report)
    assert report["out"].baseline_error == 0.0                     # float64: the baseline is the oracle
    assert report["out"].scale_ulp_error < 64                      # a few ulps, not a loose tolerance
    out64[0, 0, 0, 0] += 1e-12
    assert not check(out64, q, k, v, mask=mask, causal=True).passed


def test_grouped_query_gradients_are_summed_over_each_group(rng):
    q = rng.standard_normal((2, 4, 5, 8))                          # h = 4 query heads
    k, v = rng.standard_normal((2, 2, 7, 8)), rng.standard_normal((2, 2, 7, 6))   # h_kv = 2
    d_out = rng.standard_normal((2, 4, 5, 6))
    k_rep, v_rep = np.repeat(k, 2, axis=1), np.repeat(v, 2, axis=1)   # query head i reads kv head i // 2
    out, dq, dk_rep, dv_rep = flash_backward(q, k_rep, v_rep, d_out, np.ones((5, 7), bool), 1 / np.sqrt(8))
    dk, dv = dk_rep.reshape(2, 2, 2, 7, 8).sum(axis=2), dv_rep.reshape(2, 2, 2, 7, 6).sum(axis=2)
    report = check(out, q, k, v, d_out=d_out, dq=dq, dk=dk, dv=dv)
    assert report.passed, str(report)
    assert "grouped-query" in report.conventions["heads"]
    bad = check(out, q, k, v, d_out=d_out, dq=dq, dk=dk_rep[:, ::2], dv=dv)    # one head's gradient only
    assert not bad.passed and not bad["dk"].passed and bad["dv"].passed


def test_repeated_heads_sum_back_over_their_group(rng):
    x = rng.standard_normal((2, 3, 4, 5))                          # h_kv = 3
    repeated = repeat_over_groups(x, 2)                            # h = 6: query head i reads head i // 2
    np.testing.assert_array_equal(repeated[:, 4], x[:, 2])
    np.testing.assert_array_equal(sum_over_groups(repeated, 2), x + x)   # one addition per entry: exact


def test_layout_bnhd(problem):
    q, k, v, d_out, _ = problem
    out = scaled_dot_product_attention(q, k, v, causal=True, dtype=np.float32)
    t = lambda x: np.swapaxes(x, 1, 2)                             # noqa: E731  (b, h, n, d) -> (b, n, h, d)
    assert check(t(out), t(q), t(k), t(v), causal=True, layout="bnhd").passed
    report = check(t(out), q, k, v, causal=True)                   # output in the other layout
    assert not report.passed
    assert "shape mismatch" in report["out"].note
    assert any("outputs are in layout 'bnhd'" in alt for alt in report.alternatives), str(report)


# ----------------------------------------------------------------------- failures name the convention


def test_wrong_causal_alignment_fails_and_is_named(problem):
    q, k, v, _, mask = problem
    out, _ = flash_forward(q, k, v, allowed_of(mask, 5, 9, "bottom-right"), 1 / np.sqrt(8))
    report = check(out, q, k, v, mask=mask, causal=True)
    assert not report.passed
    assert report.alternatives == ('causal="bottom-right" (query i sees keys j <= i + m - n) instead of '
                                   'causal="top-left" (query i sees keys j <= i)',)
    assert 'matches if causal="bottom-right"' in str(report)


def test_inverted_mask_fails_and_is_named(problem, rng):
    q, k, v, _, _ = problem
    mask = rng.random((2, 3, 5, 9)) < 0.6
    mask[..., 0], mask[..., 1] = True, False                       # no row empty either way
    out, _ = flash_forward(q, k, v, ~mask, 1 / np.sqrt(8))         # True = masked out (nn.MultiheadAttention)
    report = check(out, q, k, v, mask=mask)
    assert not report.passed
    assert len(report.alternatives) == 1 and "boolean mask is inverted" in report.alternatives[0]


def test_missing_scale_fails_and_is_named(problem):
    q, k, v, _, mask = problem
    out, _ = flash_forward(q, k, v, allowed_of(mask, 5, 9), 1.0)
    report = check(out, q, k, v, mask=mask, causal=True)
    assert not report.passed
    assert report.alternatives == ("scale=1 (no scaling) instead of 0.353553",)
    scaled_twice, _ = flash_forward(q, k, v, allowed_of(mask, 5, 9), 1 / 8)
    report = check(scaled_twice, q, k, v, mask=mask, causal=True)
    assert report.alternatives == ("scale=1/d_k=0.125 instead of 0.353553",)


def test_other_layout_of_the_inputs_is_named(rng):
    q, k, v = rng.standard_normal((3, 2, 4, 4, 8))                 # h = n = 4: both layouts fit
    out = np.swapaxes(scaled_dot_product_attention(*(np.swapaxes(x, 1, 2) for x in (q, k, v))), 1, 2)
    report = check(out.astype(np.float32), q, k, v)
    assert report.alternatives == ("the candidate reads the inputs in layout 'bnhd' (..., n, h, d)",)


def test_float16_accumulation_bug_fails_under_ratio(rng):
    q, k, v = (x.astype(np.float16) for x in (rng.standard_normal((2, 8, 16)), rng.standard_normal((2, 512, 16)),
                                               rng.standard_normal((2, 512, 16))))
    S = (q @ np.swapaxes(k, -1, -2)) * np.float16(0.25)
    e = np.exp(S - S.max(axis=-1, keepdims=True))                  # float16
    row_sum = np.zeros((2, 8, 1), np.float16)
    acc = np.zeros((2, 8, 16), np.float16)
    for j in range(512):                                           # the bug: float16 accumulators, key by key
        row_sum = row_sum + e[..., j:j + 1]
        acc = acc + e[..., j:j + 1] * v[..., j:j + 1, :]
    bug = acc / row_sum
    report = check(bug, q, k, v)
    assert not report.passed, str(report)
    assert report["out"].max_abs_error > 2 * report["out"].baseline_error
    good, _ = flash_forward(q, k, v, np.ones((8, 512), bool), 0.25, np.float32, block=64)   # float32 accumulators
    assert check(good.astype(np.float16), q, k, v).passed


# ------------------------------------------------------------------------------------ gradients


def test_gradient_bug_fails_only_where_it_is(problem):
    q, k, v, d_out, mask = problem
    out, dq, dk, dv = flash_backward(q, k, v, d_out, allowed_of(mask, 5, 9), 1 / np.sqrt(8))
    report = check(out, q, k, v, mask=mask, causal=True, d_out=d_out, dq=dq * np.sqrt(8), dk=dk, dv=dv)
    assert not report.passed
    assert [c.passed for c in report.comparisons] == [True, False, True, True]
    assert report["dq"].threshold.startswith("max|c − o| ≤ 3 ×")     # FlashAttention's 3× for gradients
    assert report.alternatives == ()


def test_gradients_need_d_out(problem):
    q, k, v, _, _ = problem
    out = scaled_dot_product_attention(q, k, v)
    with pytest.raises(ValueError, match="pass d_out"):
        check(out, q, k, v, dq=np.zeros_like(q))


def test_gradient_baseline_is_sdpa_vjp_in_the_candidates_dtype(problem):
    q, k, v, d_out, mask = problem
    out, dq, dk, dv = flash_backward(q, k, v, d_out, allowed_of(mask, 5, 9), 1 / np.sqrt(8))
    report = check(out, q, k, v, mask=mask, causal=True, d_out=d_out, dq=dq, dk=dk, dv=dv)
    assert report.passed, str(report)
    g32 = sdpa_vjp(q, k, v, d_out, mask, causal=True, dtype=np.float32)
    g64 = sdpa_vjp(q, k, v, d_out, mask, causal=True)
    for name in ("dq", "dk", "dv"):
        expected = float(np.max(np.abs(getattr(g32, name) - getattr(g64, name))))
        assert 0 < report[name].baseline_error == expected, name


# ----------------------------------------------------------------------------------- non-finite values


def test_nan_where_the_oracle_is_finite_fails_at_once(problem):
    q, k, v, _, _ = problem
    out = scaled_dot_product_attention(q, k, v, dtype=np.float32)
    out[1, 2, 3, 4] = np.nan
    for rule in ("ratio", "table", "ulp"):
        report = check(out, q, k, v, rule=rule)
        assert not report.passed and report["out"].n_failing == 1
        assert report["out"].nan_where_finite == 1 and report["out"].first_mismatch == (1, 2, 3, 4)
    assert "candidate NaN where the oracle is finite: 1" in str(report)


def test_nan_in_the_oracle_passes_only_if_the_candidate_has_it_too(problem):
    q, k, v, _, _ = problem
    v = v.copy()
    v[0, 0, 2, 1] = np.nan                                         # used by every query of head (0, 0)
    out = scaled_dot_product_attention(q, k, v, dtype=np.float32)
    report = check(out, q, k, v)
    assert report.passed
    assert report["out"].oracle_nonfinite == 5 == report["out"].oracle_nonfinite_matched
    assert "oracle NaN/Inf at 5 elements, candidate the same at 5" in str(report)
    hidden = np.nan_to_num(out)
    report = check(hidden, q, k, v)
    assert not report.passed and report["out"].n_failing == 5
    assert "different at 5 (fail)" in str(report)


def test_nan_in_masked_out_padding_must_not_leak(problem):
    q, k, v, _, mask = problem
    v = v.copy()
    v[1, :, 6:, :] = np.nan                                        # padding of sequence 1 (length 6)
    good = scaled_dot_product_attention(q, k, v, mask, causal=True, dtype=np.float32)   # masks by selection
    assert check(good, q, k, v, mask=mask, causal=True).passed
    leaky, _ = flash_forward(q, k, v, allowed_of(mask, 5, 9), 1 / np.sqrt(8))   # exp(-inf) · NaN in p @ v
    assert np.isnan(leaky[1]).all()
    report = check(leaky, q, k, v, mask=mask, causal=True)
    assert not report.passed and report["out"].nan_where_finite == leaky[1].size


def test_fully_masked_rows_follow_the_policy(rng):
    q, k, v = rng.standard_normal((2, 6, 4)), rng.standard_normal((2, 8, 4)), rng.standard_normal((2, 8, 3))
    mask = rng.random((2, 6, 8)) < 0.7
    mask[..., 0] = True
    mask[0, [1, 4]] = False                                        # two queries see no key
    zero = scaled_dot_product_attention(q, k, v, mask, dtype=np.float32)
    ok = check(zero, q, k, v, mask=mask)
    assert ok.passed and ok.fully_masked.count == 2 and ok.fully_masked.matches
    report = check(zero, q, k, v, mask=mask, fully_masked="nan")
    assert not report.passed
    assert report.fully_masked.matches is False and report.fully_masked.candidate_follows == ("zero",)
    assert report.alternatives == ('fully_masked="zero" instead of "nan"',)
    assert "fully masked rows: 2 of 12 (policy 'nan'): the candidate does NOT match" in str(report)
    nan_rows = scaled_dot_product_attention(q, k, v, mask, fully_masked="nan", dtype=np.float32)
    assert check(nan_rows, q, k, v, mask=mask, fully_masked="nan").passed


# --------------------------------------------------------------------------------- report and errors


def test_report_text_has_every_number(problem):
    q, k, v, _, _ = problem
    out = scaled_dot_product_attention(q, k, v, dtype=np.float32)
    out[0, 1, 2, 3] += 0.5
    report = check(out, q, k, v)
    c = report["out"]
    assert c.max_abs_index == (0, 1, 2, 3) and c.n_failing == 1
    # 0.5 added to a float32 output: the float32 sum and the float32-vs-float64 difference each move the
    # error by ~eps32·|out| ≈ 1e-7, well inside 1e-5 relative of 0.5.
    np.testing.assert_allclose(c.max_abs_error, 0.5, rtol=1e-5)
    assert c.max_abs_values[0] == float(out[0, 1, 2, 3])
    assert c.fraction_failing == 1 / out.size
    text = str(report)
    for part in ("FAILED", "rule 'ratio'", "threshold", "max|c − o| ≤ 2 ×", "max abs     0.5", "at (0, 1, 2, 3)",
                 "max rel", "ulp of float32", "mean abs", "rms", "1 of 180 elements fail", "non-finite  none",
                 "fully masked rows: 0 of 30", "no alternative convention matches"):
        assert part in text, part


def test_report_leaves_oracle_zeros_out_of_relative_and_ulp_errors():
    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((3, 1, 1, 4, 8))
    mask = np.ones((4, 4), bool)
    mask[2] = False                                                # a fully masked row: the oracle's row 2 is 0
    out = scaled_dot_product_attention(q, k, v, mask).astype(np.float32)
    out[0, 0, 2] = 1.0                                             # the candidate gives 1 there
    c = check(out, q, k, v, mask=mask)["out"]
    assert c.max_abs_error == 1.0 and c.max_abs_values == (1.0, 0.0)
    assert c.oracle_zeros == 8 and c.oracle_zeros_max_abs_error == 1.0
    assert c.max_rel_values[1] != 0 and c.max_rel_error < 1e-6      # float32 rounding of the other rows
    assert c.max_ulp_error <= 0.5                                   # not 1 / spacing(0) = 7e+44
    lines = c.lines()
    assert "  oracle 0    at 8 elements: abs error up to 1 (no relative or ulp error there)" in lines
    assert any(line.startswith(f"  max ulp     {c.max_ulp_error:.4g} ulp of float32 at (") for line in lines)
    assert not any("inf" in line for line in lines if line.startswith("  max rel"))
    zeros = check(np.zeros((1, 1, 4, 8), np.float32), q, k, np.zeros_like(v))["out"]   # the oracle is 0 everywhere
    assert zeros.max_ulp_index is None and zeros.oracle_zeros == 32
    assert "  max rel     — (no oracle value other than 0)" in zeros.lines()
    assert any(line.startswith("  max ulp     —;") for line in zeros.lines())


def test_assert_close_raises_with_the_report(problem):
    q, k, v, _, _ = problem
    out = scaled_dot_product_attention(q, k, v, dtype=np.float32)
    assert assert_close(out, q, k, v).passed
    with pytest.raises(AssertionError, match=r"(?s)FAILED.*matches if causal=\"top-left\""):
        assert_close(scaled_dot_product_attention(q, k, v, causal=True), q, k, v)


def test_ulp_rule_default_and_max_ulps(problem):
    q, k, v, _, _ = problem
    out = scaled_dot_product_attention(q, k, v)
    top = np.abs(out).max()
    nudged = out.astype(np.float32)
    nudged[0, 0, 0, 0] += 20 * np.spacing(np.float32(top))
    assert check(nudged, q, k, v, rule="ulp").passed               # 20 < DEFAULT_MAX_ULPS = 64
    assert not check(nudged, q, k, v, rule="ulp", max_ulps=8).passed
    assert f"{DEFAULT_MAX_ULPS} ulp" in check(nudged, q, k, v, rule="ulp")["out"].threshold


def test_tables_are_the_sources_numbers():
    assert table_tolerance("torch-default", np.float16, False) == (1e-3, 1e-5)
    assert table_tolerance("torch-default", np.float32, True) == (1.3e-6, 1e-5)
    assert table_tolerance("torch-default", np.float64, False) == (1e-7, 1e-7)
    assert TABLES["torch-default"].forward["bfloat16"] == (1.6e-2, 1e-5)
    assert table_tolerance("xformers", np.float16, False) == (4e-4, 4e-3)
    assert table_tolerance("xformers", np.float32, True) == (1e-4, 9e-4)
    assert table_tolerance("jax", np.float32, False) == (1e-6, 1e-6)
    assert table_tolerance("jax", np.float32, True) == (2e-3, 2e-3)
    with pytest.raises(ValueError, match="no entry for the candidate's dtype float64"):
        table_tolerance("xformers", np.float64, False)


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"candidate": np.zeros((5, 6), int)}, TypeError,
     "candidate must be a float16, float32, float64 or bfloat16 array"),
    ({"q": np.zeros((5, 8), int)}, TypeError, "q must be a real floating-point array"),
    ({"rule": "close-enough"}, ValueError, "rule must be one of"),
    ({"rule": "table", "table": "numpy"}, ValueError, "table must be one of"),
    ({"table": "jax"}, ValueError, "only used with rule='table'"),
    ({"max_ulps": 3}, ValueError, "only used with rule='ulp'"),
    ({"rule": "ulp", "max_ulps": -1}, ValueError, "max_ulps must be"),
    ({"layout": "nhd"}, ValueError, "layout must be one of"),
    ({"fully_masked": "ignore"}, ValueError, "fully_masked must be one of"),
    ({"causal": "top"}, ValueError, "causal must be one of"),
    ({"k": np.zeros((7, 5))}, ValueError, "q has d_k=8 but k has d_k=5"),
    ({"candidate": np.zeros((5, 6)), "rule": "table", "table": "xformers"}, ValueError, "no entry"),
    ({"q": np.float64(1.0)}, ValueError, r"q must have at least 2 dimensions, got shape \(\)"),
    ({"k": np.zeros(8)}, ValueError, r"k must have at least 2 dimensions, got shape \(8,\)"),
    ({"mask": np.ones((5, 7), int)}, TypeError, r"mask must be bool .* got dtype int64 with shape \(5, 7\)"),
    ({"mask": np.ones((4, 7), bool)}, ValueError, r"mask has shape \(4, 7\), which does not broadcast"),
])
def test_bad_arguments_get_named_errors(rng, kwargs, error, match):
    args = {"candidate": np.zeros((5, 6), np.float32), "q": rng.standard_normal((5, 8)),
            "k": rng.standard_normal((7, 8)), "v": rng.standard_normal((7, 6))}
    args.update(kwargs)
    with pytest.raises(error, match=match):
        check(args.pop("candidate"), args.pop("q"), args.pop("k"), args.pop("v"), **args)


def test_zero_width_queries_with_an_explicit_scale_attend_uniformly(rng):
    q, k, v = np.zeros((2, 4, 0)), np.zeros((2, 6, 0)), rng.standard_normal((2, 6, 3))
    d_out = rng.standard_normal((2, 4, 3))
    uniform = np.broadcast_to(v.mean(axis=-2, keepdims=True), (2, 4, 3))          # every score is 0
    grads = {"d_out": d_out, "dq": np.zeros((2, 4, 0)), "dk": np.zeros((2, 6, 0)),
             "dv": np.broadcast_to(d_out.sum(axis=-2, keepdims=True) / 6, (2, 6, 3))}   # dV = Aᵀ dO, A = 1/6
    report = check(uniform.astype(np.float32), q, k, v, scale=0.5, **grads)
    assert report.passed, str(report)
    assert report.conventions["scale"] == "0.5"
    causal = np.cumsum(v, axis=-2)[:, :4] / np.arange(1, 5)[:, None]             # query i averages keys 0..i
    assert check(causal, q, k, v, scale=3.0, causal=True).passed
    report = check(np.zeros((2, 4, 3), np.float32), q, k, v, scale=0.5)
    assert not report.passed
    assert report.alternatives_tried and not any("d_k" in alt for alt in report.alternatives_tried)
    with pytest.raises(ValueError, match=r"default scale 1/sqrt\(d_k\) needs d_k >= 1, got d_k=0"):
        check(uniform, q, k, v)


def test_grouped_query_heads_must_divide(rng):
    q, k, v = rng.standard_normal((1, 3, 4, 8)), rng.standard_normal((1, 2, 5, 8)), rng.standard_normal((1, 2, 5, 6))
    with pytest.raises(ValueError, match="h=3 heads but k has h_kv=2"):
        check(np.zeros((1, 3, 4, 6), np.float32), q, k, v)


def test_the_noise_estimates_refuse_an_unknown_combine():
    """combine="RSS" (or any value but "abs") silently took the root-sum-of-squares branch."""
    q, k, v = np.ones((3, 2, 2))
    A, used = np.full((2, 2), 0.5), np.ones((2, 2), dtype=bool)
    with pytest.raises(ValueError, match=r"^combine must be one of \('abs', 'rss'\), got 'RSS'$"):
        forward_noise(q, k, v, A, A @ v, None, used, 1.0, combine="RSS")
    with pytest.raises(ValueError, match=r"^combine must be one of \('abs', 'rss'\), got 'RSS'$"):
        gradient_noise(q, k, v, v, A, A @ v, A, used, 1.0, combine="RSS")
