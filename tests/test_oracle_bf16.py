"""bfloat16 candidates: exact rounding, other frameworks' tensors by duck typing, correct outputs pass, bugs named."""
from __future__ import annotations

import numpy as np
import pytest

from refattn import causal_mask
from refattn.oracle.check import check
from refattn.oracle.precision import FORMATS, host_array, round_bfloat16, spacing


def nearest_bfloat16(x32: np.ndarray) -> np.ndarray:
    """Round float32 values to bfloat16 by comparing the two neighbours in float64 (ties to the even one)."""
    bits = x32.view(np.uint32).astype(np.uint64)
    lo_bits = bits & 0xFFFF0000
    lo = lo_bits.astype(np.uint32).view(np.float32).astype(np.float64)
    hi = (lo_bits + 0x10000).astype(np.uint32).view(np.float32).astype(np.float64)
    beyond = np.copysign(2.0**128, lo)                              # the next step past the largest bfloat16
    x = x32.astype(np.float64)
    d_lo, d_hi = np.abs(x - lo), np.abs(np.where(np.isinf(hi), beyond, hi) - x)
    lo_even = (lo_bits >> 16) % 2 == 0
    return np.where((d_lo < d_hi) | ((d_lo == d_hi) & lo_even), lo, hi)   # rounding to 2^128 overflows to inf


class FakeTensor:
    """A framework tensor as PyTorch's behaves: NumPy cannot read a bfloat16 one, ``.float()`` converts it."""

    def __init__(self, values, dtype: str):
        self.values, self.dtype = np.asarray(values), f"fake.{dtype}"
        self.calls = []

    def detach(self):
        self.calls.append("detach")
        return self

    def cpu(self):
        self.calls.append("cpu")
        return self

    def float(self):
        self.calls.append("float")
        return FakeTensor(self.values.astype(np.float32), "float32")

    def __array__(self, dtype=None, copy=None):
        if self.dtype.endswith("bfloat16"):
            raise TypeError("Got unsupported ScalarType BFloat16")
        return self.values if dtype is None else self.values.astype(dtype)


class DlpackOnly:
    """An array exposing only the DLPack protocol."""

    def __init__(self, values):
        self.values = np.asarray(values)

    def __dlpack__(self, **kwargs):
        return self.values.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.values.__dlpack_device__()


def torch_like_bf16(q, k, v, allowed, scale):
    """A bfloat16 kernel as PyTorch's CPU one is written: float32 scores and softmax, P stored in bfloat16,
    float32 accumulation of P V, normalised and stored in bfloat16 at the end (no refattn code)."""
    qb, kb, vb = (round_bfloat16(x) for x in (q, k, v))
    S = (qb @ np.swapaxes(kb, -1, -2)) * np.float32(scale)
    S = np.where(allowed, S, -np.inf)
    P = np.exp(S - S.max(axis=-1, keepdims=True))
    return round_bfloat16((round_bfloat16(P) @ vb) / P.sum(axis=-1, keepdims=True))


@pytest.fixture
def bf16_problem():
    rng = np.random.default_rng(19)
    q = rng.standard_normal((2, 3, 5, 16))
    k = rng.standard_normal((2, 3, 9, 16))
    v = rng.standard_normal((2, 3, 9, 8))
    return q, k, v


# ------------------------------------------------------------------------------------------- rounding


def test_round_bfloat16_is_round_to_nearest_even():
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32)
    ties = (rng.integers(0, 2**16, 2000, dtype=np.uint64).astype(np.uint32) << 16) | 0x8000   # exact midpoints
    x = np.concatenate([bits, ties]).view(np.float32)
    x = x[np.isfinite(x)]
    got = round_bfloat16(x).astype(np.float64)
    want = nearest_bfloat16(x)
    assert np.array_equal(got, want)                               # exact: rounding has no tolerance


def test_round_bfloat16_specials():
    got = round_bfloat16(np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 3.4e38, -3.4e38], np.float32))
    assert np.isnan(got[0]) and got[1] == np.inf and got[2] == -np.inf
    assert got[3] == 0 and not np.signbit(got[3]) and got[4] == 0 and np.signbit(got[4])
    assert got[5] == np.inf and got[6] == -np.inf                 # past the largest bfloat16, 3.39e38
    signalling = np.array([0x7F800001], np.uint32).view(np.float32)   # a NaN whose payload is in the cut bits
    assert np.isnan(round_bfloat16(signalling)[0])
    assert FORMATS["bfloat16"].max == float(np.array([0x7F7F0000], np.uint32).view(np.float32)[0])


def test_bfloat16_spacing_is_one_step_of_the_significand():
    x = np.array([1.0, 1.5, 2.0**-130, 3.0e38])
    assert spacing(x, FORMATS["bfloat16"]).tolist() == [2.0**-7, 2.0**-7, 2.0**-133, 2.0**120]


# ------------------------------------------------------------------------------------------ duck typing


def test_host_array_reads_bfloat16_tensors_through_float():
    values = round_bfloat16(np.linspace(-3, 3, 12).reshape(3, 4))
    tensor = FakeTensor(values, "bfloat16")
    arr, fmt = host_array("x", tensor)
    assert fmt == "bfloat16" and arr.dtype == np.float32 and np.array_equal(arr, values)
    assert tensor.calls == ["detach", "cpu", "float"]
    arr, fmt = host_array("x", FakeTensor(values.astype(np.float16), "float16"))
    assert fmt is None and arr.dtype == np.float16
    arr, fmt = host_array("x", DlpackOnly(values))
    assert fmt is None and np.array_equal(arr, values)


def test_bfloat16_tensor_that_is_not_bfloat16_is_refused():
    with pytest.raises(ValueError, match=r"x\[0\] = .*not a bfloat16 number"):
        host_array("x", FakeTensor(np.array([1.0 + 2**-10], np.float32), "bfloat16"))


def test_check_takes_tensors_directly(bf16_problem):
    q, k, v = bf16_problem
    allowed = causal_mask(5, 9, causal="bottom-right")
    out = torch_like_bf16(q, k, v, allowed, 0.25)
    tensors = [FakeTensor(round_bfloat16(x), "bfloat16") for x in (q, k, v)]
    report = check(FakeTensor(out, "bfloat16"), *tensors, causal="bottom-right")
    assert report.passed and report.dtype == "bfloat16" and report["out"].dtype == "bfloat16"
    assert check(out, q, k, v, causal="bottom-right", candidate_dtype="bfloat16").passed


def test_candidate_dtype_checks_the_values(bf16_problem):
    q, k, v = bf16_problem
    with pytest.raises(ValueError, match=r"candidate is said to be bfloat16 but candidate\[0, 0, 0, 0\]"):
        check(np.full((2, 3, 5, 8), 1 + 2**-12, np.float32), q, k, v, candidate_dtype="bfloat16")
    with pytest.raises(ValueError, match="candidate_dtype"):
        check(np.zeros((2, 3, 5, 8), np.float32), q, k, v, candidate_dtype="float8")


def test_bfloat16_gradients_need_the_table_rule(bf16_problem):
    q, k, v = bf16_problem
    zeros = [FakeTensor(np.zeros(x.shape, np.float32), "bfloat16") for x in (q, k, v)]
    with pytest.raises(ValueError, match="bfloat16 gradients are judged by rule='table' only"):
        check(np.zeros((2, 3, 5, 8)), q, k, v, d_out=np.ones((2, 3, 5, 8)), dq=zeros[0], dk=zeros[1], dv=zeros[2])


# ------------------------------------------------------------------------- correct passes, bugs are named


@pytest.mark.parametrize("alignment", ["top-left", "bottom-right"])
def test_correct_bfloat16_output_passes(bf16_problem, alignment):
    q, k, v = bf16_problem
    out = torch_like_bf16(q, k, v, causal_mask(5, 9, causal=alignment), 0.25)
    report = check(out, q, k, v, causal=alignment, candidate_dtype="bfloat16")
    assert report.passed, str(report)
    assert report["out"].max_abs_error > 1e-4                      # bfloat16 is far from the float64 oracle
    assert report["out"].max_abs_error <= 2 * report["out"].baseline_error   # within FlashAttention's 2×


def test_bfloat16_bug_scale_is_named(bf16_problem):
    q, k, v = bf16_problem
    out = torch_like_bf16(q, k, v, np.ones((5, 9), bool), 1.0)    # forgot 1/√d_k
    report = check(out, q, k, v, candidate_dtype="bfloat16")
    assert not report.passed
    assert report.alternatives == ("scale=1 (no scaling) instead of 0.25",)


def test_bfloat16_bug_causal_alignment_is_named(bf16_problem):
    q, k, v = bf16_problem
    out = torch_like_bf16(q, k, v, causal_mask(5, 9, causal="top-left"), 0.25)
    report = check(out, q, k, v, causal="bottom-right", candidate_dtype="bfloat16")
    assert not report.passed
    assert report.alternatives == ('causal="top-left" (query i sees keys j <= i) instead of causal="bottom-right" '
                                   "(query i sees keys j <= i + m - n)",)


def test_bfloat16_bug_mask_is_named(bf16_problem):
    q, k, v = bf16_problem
    keep = np.random.default_rng(3).random((2, 1, 5, 9)) < 0.6
    keep[..., 0] = True
    keep[..., 1] = False                                           # every row sees a key under both polarities
    out = torch_like_bf16(q, k, v, ~keep, 0.25)                    # True read as "masked out"
    report = check(out, q, k, v, mask=keep, candidate_dtype="bfloat16")
    assert not report.passed
    assert report.alternatives == ("the boolean mask is inverted (True = masked out, as torch.nn.MultiheadAttention)",)
    assert "matches if the boolean mask is inverted" in str(report)


# ------------------------------------------------------------------ non-finite values in masked-out inputs


def additive_mask_attention(q, k, v, keep, scale):
    """Masking by adding -inf and multiplying by zero weights, as a plain PyTorch softmax does (no selection)."""
    with np.errstate(invalid="ignore"):
        S = (q.astype(np.float32) @ np.swapaxes(k.astype(np.float32), -1, -2)) * np.float32(scale)
        S = S + np.where(keep, np.float32(0), np.float32(-np.inf))
        P = np.exp(S - np.max(S, axis=-1, keepdims=True))
        return (P / P.sum(axis=-1, keepdims=True)) @ v.astype(np.float32)


@pytest.mark.parametrize("poisoned", ["k", "v"])
def test_nonfinite_masked_out_inputs_get_the_exact_hint(bf16_problem, poisoned):
    q, k, v = (x.copy() for x in bf16_problem)
    keep = np.ones((2, 1, 1, 9), bool)
    keep[0, ..., 7:] = False                                       # batch 0 pads its last two keys
    (k if poisoned == "k" else v)[0, 1, 7, 2] = np.nan             # garbage in a padded slot of head 1
    out = additive_mask_attention(q, k, v, keep, 0.25)
    report = check(out, q, k, v, mask=keep)
    assert not report.passed
    assert report.alternatives == ()                               # "the mask is ignored" does not match by NaN
    assert "the mask is ignored" in report.alternatives_tried
    want = 5 * 8 if poisoned == "k" else 5                         # every row of head 1, or its column 2
    assert report["out"].nan_where_finite == want
    assert report.hints == (
        f"the candidate differs from the oracle only at {want} output elements, all NaN/Inf in the candidate, each "
        f"where a NaN/Inf in a masked-out key ({int(poisoned == 'k')} positions) or value ({int(poisoned == 'v')} "
        "positions) reaches when masking is not by selection (a NaN key's score is NaN, and NaN + -inf = NaN; a zero "
        "weight times a NaN value is NaN). refattn masks by selection, so masked-out inputs never reach the output: "
        "select instead of adding -inf (torch.where on scores and weights), or replace NaN/Inf in the padding of k "
        "and v by 0 before the call",)
    assert "hint: the candidate differs from the oracle only at" in str(report)


def test_no_hint_when_other_elements_differ_too(bf16_problem):
    q, k, v = (x.copy() for x in bf16_problem)
    keep = np.ones((2, 1, 1, 9), bool)
    keep[0, ..., 7:] = False
    v[0, 1, 8, 0] = np.inf
    out = additive_mask_attention(q, k, v, keep, 0.25)
    out[1, 0, 0, 0] += 1.0                                         # a real error elsewhere
    report = check(out, q, k, v, mask=keep)
    assert not report.passed and report.hints == ()


def test_nan_matching_nan_never_makes_an_alternative_match(bf16_problem):
    q, k, v = (x.copy() for x in bf16_problem)
    keep = np.ones((2, 1, 1, 9), bool)
    keep[..., 8] = False
    k[..., 8, :] = np.nan                                          # every batch and head pads key 8 with NaN
    out = additive_mask_attention(q, k, v, np.ones((1, 9), bool), 0.25)   # the mask really ignored: all NaN
    report = check(out, q, k, v, mask=keep)
    assert not report.passed and report.alternatives == () and report.partial_alternatives == ()
    assert "the mask is ignored" in report.alternatives_tried


def test_fully_masked_nan_policy_is_still_named(bf16_problem):
    q, k, v = bf16_problem
    keep = np.ones((2, 1, 5, 9), bool)
    keep[1, 0, 3] = False                                          # query 3 of batch 1 sees no key
    out = additive_mask_attention(q, k, v, keep, 0.25)             # -inf everywhere: NaN row
    report = check(out, q, k, v, mask=keep)
    assert report.alternatives == ('fully_masked="nan" instead of "zero"',)
