"""method="blocked" (Numba online softmax, FlashAttention Algorithm 1) against the equation path.

Tolerance: rtol 1e-13 (atol 1e-13 for outputs near 0). Not 1e-15: the online softmax rescales the
running sum and accumulator by exp(m_old − m_new) once per key tile and divides by ℓ at the end
instead of normalising the weights first, and BLAS sums q·k in another order, so each output
carries a few more roundings than the equation path (observed ~1e-15). Not 1e-12 either: 1e-13
still leaves a 10-100× margin while catching any real mistake (a missed rescale is O(1)).
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from refattn import init_multi_head, multi_head_attention, padding_mask, scaled_dot_product_attention
from refattn.core.sdpa import AUTO_BLOCKED_ENTRIES, resolve_method
from refattn.kernels import POLICY_CODES
from refattn.kernels.blocked import Visibility, _blocked_loop, blocked_attention

EXACT = {"rtol": 1e-13, "atol": 1e-13}
BLOCKS = [1, 3, 16, 64, (3, 5)]


def qkv(rng, n, m, d=4, d_v=3, batch=()):
    return (rng.standard_normal((*batch, n, d)), rng.standard_normal((*batch, m, d)),
            rng.standard_normal((*batch, m, d_v)))


def both(q, k, v, block_size=None, **kwargs):
    """(equation, blocked) results of the same call, with the log-sum-exp."""
    eq = scaled_dot_product_attention(q, k, v, return_lse=True, **kwargs)
    bl = scaled_dot_product_attention(q, k, v, return_lse=True, method="blocked", block_size=block_size, **kwargs)
    return eq, bl


def assert_same(eq, bl):
    for a, b in zip(eq, bl, strict=True):
        np.testing.assert_allclose(b, a, **EXACT)


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize(("n", "m"), [(17, 23), (23, 17), (16, 64)])
def test_matches_equation_over_tile_sizes(rng, block, n, m):
    q, k, v = qkv(rng, n, m, d=5, d_v=3, batch=(2,))
    assert_same(*both(q, k, v, block_size=block))


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("causal", [True, "top-left", "bottom-right"])
@pytest.mark.parametrize(("n", "m"), [(9, 20), (20, 9)])          # n > m bottom-right: empty rows
def test_causal_both_alignments(rng, block, causal, n, m):
    q, k, v = qkv(rng, n, m, batch=(2,))
    assert_same(*both(q, k, v, block_size=block, causal=causal))


@st.composite
def blocked_cases(draw):
    """Any shapes, tiles, alignment, mask kind, key lengths and policy, with a seed for the data."""
    batch, n, m = draw(st.integers(1, 3)), draw(st.integers(1, 24)), draw(st.integers(1, 24))
    return {
        "batch": batch, "n": n, "m": m, "d": draw(st.integers(1, 5)), "d_v": draw(st.integers(1, 4)),
        "block_size": (draw(st.integers(1, 9)), draw(st.integers(1, 9))),
        "causal": draw(st.sampled_from([False, True, "bottom-right"])),
        "mask": draw(st.sampled_from([None, "bool", "bias"])),
        "key_lengths": draw(st.none() | st.lists(st.integers(0, m), min_size=batch, max_size=batch)),
        "fully_masked": draw(st.sampled_from(["zero", "nan", "uniform"])),
        "logit_scale": draw(st.sampled_from([1.0, 30.0])),           # 30: running maxima jump by 100s
        "seed": draw(st.integers(0, 2**32 - 1)),
    }


@given(blocked_cases())
def test_property_blocked_equals_equation(case):
    rng = np.random.default_rng(case["seed"])
    q, k, v = qkv(rng, case["n"], case["m"], case["d"], case["d_v"], batch=(case["batch"],))
    shape = (case["batch"], case["n"], case["m"])
    mask = {None: None, "bool": rng.random(shape) < 0.6,
            "bias": np.where(rng.random(shape) < 0.6, rng.standard_normal(shape), -np.inf)}[case["mask"]]
    lengths = None if case["key_lengths"] is None else np.array(case["key_lengths"])
    eq, bl = both(q * case["logit_scale"], k, v, block_size=case["block_size"], causal=case["causal"],
                  mask=mask, key_lengths=lengths, fully_masked=case["fully_masked"])
    assert_same(eq, bl)


@pytest.mark.parametrize("causal", [False, True, "bottom-right"])
def test_default_tiles_at_real_head_sizes(rng, causal):
    """d = 64 and d = 128 take the default (64, 64) and (32, 32) tiles; n, m not multiples of them."""
    for d in (64, 128):
        q, k, v = qkv(rng, 150, 131, d=d, d_v=d, batch=(2,))
        assert_same(*both(q, k, v, causal=causal))


@pytest.mark.parametrize("policy", ["zero", "nan", "uniform"])
@pytest.mark.parametrize("block", [1, 4, 64])
def test_bool_mask_with_empty_rows_and_every_policy(rng, policy, block):
    q, k, v = qkv(rng, 11, 13, batch=(3,))
    mask = rng.random((3, 11, 13)) < 0.4
    mask[0, 2] = False
    mask[2, 7] = False
    eq, bl = both(q, k, v, mask=mask, fully_masked=policy, block_size=block)
    assert_same(eq, bl)
    assert np.all(bl[1][0, 2] == -np.inf)


@pytest.mark.parametrize("policy", ["zero", "nan", "uniform"])
@pytest.mark.parametrize("causal", [False, "bottom-right"])
def test_float_bias_with_minus_inf(rng, policy, causal):
    q, k, v = qkv(rng, 10, 7, batch=(2,))
    bias = rng.standard_normal((2, 10, 7))
    bias[rng.random(bias.shape) < 0.3] = -np.inf
    bias[1, 4] = -np.inf                                           # an empty row
    assert_same(*both(q, k, v, mask=bias, causal=causal, fully_masked=policy, block_size=3))


@pytest.mark.parametrize("method", ["equation", "blocked"])
def test_key_lengths_equal_padding_mask(rng, method):
    q, k, v = qkv(rng, 6, 9, batch=(3, 2))
    lengths = np.array([9, 0, 4])[:, None]                         # (B, 1) against (B, H)
    out = scaled_dot_product_attention(q, k, v, key_lengths=lengths, method=method, block_size=4)
    ref = scaled_dot_product_attention(q, k, v, mask=padding_mask(lengths, 9))
    np.testing.assert_allclose(out, ref, **EXACT)


@pytest.mark.parametrize("policy", ["zero", "nan", "uniform"])
def test_key_lengths_with_mask_causal_and_policies(rng, policy):
    q, k, v = qkv(rng, 8, 12, batch=(3,))
    mask = rng.random((8, 12)) < 0.7
    for causal in (False, True, "bottom-right"):
        assert_same(*both(q, k, v, mask=mask, causal=causal, key_lengths=np.array([12, 5, 0]),
                          fully_masked=policy, block_size=(3, 5)))


@pytest.mark.parametrize("block", [1, 4, 64])
@pytest.mark.parametrize("kind", ["bool", "bias", "lengths", "causal"])
def test_nonfinite_in_masked_keys_and_values_never_leak(rng, block, kind):
    n, m = 5, 8
    q, k, v = qkv(rng, n, m, batch=(2,))
    k[:, 6:] = np.nan
    v[:, 6] = np.inf
    v[:, 7] = np.nan
    kwargs = {"bool": {"mask": np.arange(m) < 6},
              "bias": {"mask": np.where(np.arange(m) < 6, 0.5, -np.inf)},
              "lengths": {"key_lengths": np.array([6, 6])},
              "causal": {"causal": True}}[kind]                    # n=5: query i sees keys j <= i <= 4
    eq, bl = both(q, k, v, block_size=block, **kwargs)
    assert np.isfinite(bl[0]).all() and np.isfinite(bl[1]).all()
    assert_same(eq, bl)


def test_nonfinite_in_visible_entries_follows_ieee(rng):
    q, k, v = qkv(rng, 4, 6, batch=(2,))
    v[0, 2, 1] = np.inf                                            # visible to every row of batch 0
    q[1, 3, 0] = np.nan                                            # one NaN row in batch 1
    eq, bl = both(q, k, v, block_size=2)
    assert_same(eq, bl)
    assert np.isnan(bl[0][1, 3]).all() and np.isfinite(bl[0][1, :3]).all()


def test_extreme_logits(rng):
    q, k, v = qkv(rng, 6, 40, batch=(2,))
    assert_same(*both(q * 300, k * 300, v, block_size=7))           # running max changes by 1e4s


@pytest.mark.parametrize("method", ["blocked", "auto"])
def test_batch_and_head_broadcasting(rng, method):
    q = rng.standard_normal((2, 3, 5, 4))                          # (B, H, n, d)
    k = rng.standard_normal((2, 1, 7, 4))                          # keys shared by the heads
    v = rng.standard_normal((7, 3))                                # values shared by everything
    mask = rng.random((2, 1, 5, 7)) < 0.6                          # mask shared by the heads
    bias = rng.standard_normal((3, 1, 7))                          # bias per head, broadcast over n
    for mk in (mask, bias):
        ref = scaled_dot_product_attention(q, k, v, mk, return_lse=True)
        out = scaled_dot_product_attention(q, k, v, mk, return_lse=True, method=method, block_size=3)
        assert out[0].shape == (2, 3, 5, 3)
        assert_same(ref, out)


def test_mask_batch_dims_extend_the_batch(rng):
    q, k, v = qkv(rng, 5, 6)
    mask = rng.random((4, 5, 6)) < 0.5
    eq, bl = both(q, k, v, mask=mask, block_size=2)
    assert bl[0].shape == (4, 5, 3)
    assert_same(eq, bl)


def test_scale_and_d_v(rng):
    q, k, v = qkv(rng, 7, 9, d=6, d_v=11)
    assert_same(*both(q, k, v, scale=0.37, block_size=(4, 2)))


@pytest.mark.parametrize("causal", [False, True])
def test_multi_head_blocked_equals_equation(rng, causal):
    params = init_multi_head(rng, 16, 4)
    x, mem = rng.standard_normal((2, 9, 16)), rng.standard_normal((2, 9, 16))
    mask = rng.random((2, 9, 9)) < 0.7
    ref = multi_head_attention(x, mem, params, num_heads=4, mask=mask, causal=causal)
    out = multi_head_attention(x, mem, params, num_heads=4, mask=mask, causal=causal, method="blocked")
    np.testing.assert_allclose(out, ref, **EXACT)


@pytest.mark.parametrize("masked", [True, False])                  # the per-pair path and the fast path
def test_kernel_py_func_equals_compiled(rng, masked):
    q, k, v = qkv(rng, 7, 9, batch=(2,))
    mask = rng.random((1, 7, 9)) < 0.6
    mask[0, 3] = False
    bias = rng.standard_normal((2, 7, 9))
    if not masked:
        mask, bias = np.zeros((0, 0, 0), dtype=bool), np.zeros((0, 0, 0))
    python_source = getattr(_blocked_loop, "py_func", _blocked_loop)   # no py_func when JIT is disabled
    visibility = Visibility(True, 2, np.array([9, 6]), mask, np.zeros(2, dtype=np.int64), bias,
                            np.arange(2, dtype=np.int64))
    args = (q, k, v, 0.5, visibility, (POLICY_CODES["uniform"], v.mean(axis=1)), (3, 4))
    results = []
    for fn in (blocked_attention, python_source):                  # the checked entry runs the compiled loop
        out, lse = np.empty((2, 7, 3)), np.empty((2, 7))
        fn(*args, out, lse)
        results.append((out, lse))
    np.testing.assert_allclose(results[0][0], results[1][0], **EXACT)
    np.testing.assert_allclose(results[0][1], results[1][1], **EXACT)


def test_auto_chooses_blocked_above_the_threshold():
    big, small = (2, AUTO_BLOCKED_ENTRIES // 2 + 1), (2, AUTO_BLOCKED_ENTRIES // 2)   # score shapes
    assert resolve_method("auto", np.float64, big) == "blocked"
    assert resolve_method("auto", np.float64, small) == "equation"
    assert resolve_method("auto", np.float32, big) == "equation"
    assert resolve_method("auto", np.float64, big, return_weights=True) == "equation"
    assert resolve_method("equation", np.float64, big) == "equation"


def test_method_none_is_the_deprecated_spelling_of_auto(rng):
    q, k, v = qkv(rng, 4, 5)
    with pytest.warns(DeprecationWarning, match=r'method=None is method="auto"'):
        old = scaled_dot_product_attention(q, k, v, method=None)
    assert np.array_equal(old, scaled_dot_product_attention(q, k, v))


def test_auto_small_is_the_equation_path(rng):
    q, k, v = qkv(rng, 4, 5)
    out, A = scaled_dot_product_attention(q, k, v, method="auto", return_weights=True)
    assert A.shape == (4, 5)


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"method": "flash"}, ValueError, r"method must be one of"),
    ({"method": "blocked", "dtype": np.float32}, ValueError, r'method="blocked" computes in float64 only'),
    ({"method": "blocked", "return_weights": True}, ValueError, r"return_weights=True needs"),
    ({"method": "blocked", "block_size": 0}, ValueError, r"block_size must be a positive int"),
    ({"method": "blocked", "block_size": (2, 3, 4)}, ValueError, r"block_size must be"),
    ({"key_lengths": np.array([1.5])}, TypeError, r"key_lengths must be an integer array"),
    ({"key_lengths": np.array([6])}, ValueError, r"key_lengths must lie in \[0, m=5\]"),
    ({"key_lengths": np.array([1, 2, 3])}, ValueError, r"key_lengths"),
    ({"method": "blocked", "mask": np.ones((3, 5), dtype=int)}, TypeError, r"mask must be bool"),
])
def test_bad_input(rng, kwargs, error, match):
    q, k, v = qkv(rng, 3, 5, batch=(2,))
    with pytest.raises(error, match=match):
        scaled_dot_product_attention(q, k, v, **kwargs)


def test_finite_rows_flags_every_row_holding_nan_or_inf(rng):
    from refattn.kernels.blocked import finite_rows

    v = rng.standard_normal((2, 5, 3))
    v[0, 1, 2], v[1, 4, 0], v[1, 0, 1] = np.nan, np.inf, -np.inf
    for fn in (finite_rows, getattr(finite_rows, "py_func", finite_rows)):   # no py_func when JIT is disabled
        np.testing.assert_array_equal(fn(v), np.isfinite(v).all(axis=-1))


def kernel_arguments(rng, B=2, n=5, m=7, d=3, d_v=2):
    """Valid arguments of blocked_attention: a bool mask of one slab shared by the rows, and no bias."""
    q, k, v = qkv(rng, n, m, d, d_v, batch=(B,))
    visibility = Visibility(False, 0, np.full(B, m), rng.random((1, n, m)) < 0.5, np.zeros(B, dtype=np.int64),
                            np.zeros((0, 0, 0)), np.zeros(0, dtype=np.int64))
    return {"q": q, "k": k, "v": v, "scale": 0.5, "visibility": visibility,
            "fully_masked": (POLICY_CODES["uniform"], v.mean(axis=1)), "tiles": (2, 3),
            "out": np.empty((B, n, d_v)), "lse": np.empty((B, n))}


def _visibility(**fields):
    return lambda args: args["visibility"]._replace(**fields)


@pytest.mark.parametrize(("name", "change", "error", "match"), [
    ("visibility", _visibility(mask_index=np.array([0, 1])), ValueError,
     r"visibility.mask_index must lie in \[0, 0\], got values in \[0, 1\]"),
    ("visibility", _visibility(mask=np.ones((1, 5, 8), bool)), ValueError,
     r"visibility.mask must have shape \(1, 5, 7\), got shape \(1, 5, 8\)"),
    ("visibility", _visibility(mask=np.ones((1, 5, 7))), TypeError, r"visibility.mask must have dtype bool"),
    ("visibility", _visibility(bias=np.zeros((2, 5, 7)), bias_index=np.array([0, -1])), ValueError,
     r"visibility.bias_index must lie in \[0, 1\], got values in \[-1, 0\]"),
    ("visibility", _visibility(lengths=np.array([7, 8])), ValueError,
     r"visibility.lengths must lie in \[0, 7\], got values in \[7, 8\]"),
    ("visibility", _visibility(lengths=np.array([7])), ValueError, r"visibility.lengths must have shape \(2,\)"),
    ("visibility", _visibility(lengths=np.array([7, 7], dtype=np.int32)), TypeError,
     r"visibility.lengths must have dtype int64, got int32"),
    ("visibility", _visibility(causal=1), TypeError, r"visibility.causal must be True or False, got 1"),
    ("visibility", _visibility(delta=1.5), TypeError, r"visibility.delta must be an int, got 1.5"),
    ("visibility", lambda args: tuple(args["visibility"]), TypeError, r"visibility must be a Visibility, got tuple"),
    ("k", lambda args: args["k"][:1].copy(), ValueError, r"k must have shape \(2, ·, 3\), got shape \(1, 7, 3\)"),
    ("v", lambda args: args["v"][:, :6].copy(), ValueError, r"v must have shape \(2, 7, ·\), got shape \(2, 6, 2\)"),
    ("q", lambda args: args["q"].astype(np.float32), TypeError, r"q must have dtype float64, got float32"),
    ("q", lambda args: np.asfortranarray(args["q"]), ValueError, r"q must be C-contiguous"),
    ("out", lambda args: np.empty((2, 5, 3)), ValueError, r"out must have shape \(2, 5, 2\)"),
    ("lse", lambda args: np.broadcast_to(np.empty(5), (2, 5)), ValueError, r"lse must be C-contiguous and writeable"),
    ("fully_masked", lambda args: (2, np.zeros((2, 3))), ValueError, r"vmean must have shape \(2, 2\)"),
    ("fully_masked", lambda args: (3, np.zeros((0, 0))), ValueError, r"policy must be one of the codes"),
    ("tiles", lambda args: (0, 3), ValueError, r"block_size must be a positive int, got 0"),
    ("scale", lambda args: np.nan, ValueError, r"scale must be finite"),
])
def test_kernel_checks_every_array_it_indexes(rng, name, change, error, match):
    args = kernel_arguments(rng)
    args[name] = change(args)
    with pytest.raises(error, match=match):
        blocked_attention(**args)


def test_kernel_arguments_are_valid_as_built(rng):
    args = kernel_arguments(rng)
    blocked_attention(**args)
    mask = args["visibility"].mask[0]
    expected = scaled_dot_product_attention(args["q"], args["k"], args["v"], mask, scale=0.5, fully_masked="uniform")
    np.testing.assert_allclose(args["out"], expected, **EXACT)
