"""Analytic VJPs (refattn.oracle.vjp) against central finite differences, and merge_attention.

Finite differences. Every gradient is checked against the central difference of the scalar
L(x) = ⟨d_out, forward(x)⟩ computed with the public forward functions (no code shared with the
VJPs):

    FD_i = (L(x + h e_i) − L(x − h e_i)) / (x_i⁺ − x_i⁻),    h = 1e-5

(dividing by the representable step x_i⁺ − x_i⁻ rather than 2h removes the step's own rounding).
Its error is truncation plus rounding:

    |FD_i − ∂L/∂x_i| ≤ h²/6 · max|∂³L/∂x_i³| + ε_L / h

With standard-normal inputs on these small shapes the third derivatives are O(1)–O(10), so
truncation ≤ 1e-10/6 · 10 ≈ 2e-10; each L is a sum of ≲ 100 terms of size ≲ 10, so its absolute
rounding error is ε_L ≲ 100 · 10 · 2.2e-16 ≈ 2e-13 in the worst case, giving ε_L / h ≲ 2e-8 (the
typical error, ~√terms · eps · |L| / h, is ≈ 1e-10). h = 1e-5 is near the optimal step
(3ε_L/M₃)^{1/3} ≈ 4e-5. Hence FD_TOL: atol 2e-8 per coordinate (the worst-case bound above) and
rtol 1e-7 for the few gradients of size ≫ 1. Measured over this file: median error 1e-12, max
1.2e-9. A wrong term in a gradient is O(1), 10⁷ times larger.

The elu feature map φ is only C¹ (φ'' jumps at 0), so the bound holds only where the stencil
[x − h, x + h] does not straddle 0: the linear-attention tests assert |x| > 100·h.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from refattn import MultiHeadParams, init_multi_head, multi_head_attention, scaled_dot_product_attention, softmax
from refattn.linear import elu_feature_map, linear_attention
from refattn.oracle.linear_vjp import linear_attention_vjp
from refattn.oracle.merge import merge_attention
from refattn.oracle.vjp import MultiHeadGrads, SdpaGrads, multi_head_vjp, sdpa_vjp, softmax_vjp

H = 1e-5
FD_TOL = {"rtol": 1e-7, "atol": 2e-8}          # derived in the module docstring
TIGHT = {"rtol": 1e-12, "atol": 1e-12}
MERGE = {"rtol": 1e-13, "atol": 1e-13}


def fd_grad(loss, x, h=H, coords=None):
    """Central differences of the scalar loss at the given coordinates of x (all by default)."""
    g = np.zeros_like(x)
    for idx in coords if coords is not None else np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[idx] += h
        xm[idx] -= h
        step = xp[idx] - xm[idx] if np.isfinite(x[idx]) else 2 * h   # masked NaN / −inf entries: loss unchanged
        g[idx] = (loss(xp) - loss(xm)) / step
    return g


def fd_grads(loss, inputs, names):
    """FD gradients of loss(**inputs) with respect to each named input."""
    def partial(name):
        return lambda x: loss(**{**inputs, name: x})
    return {name: fd_grad(partial(name), inputs[name]) for name in names}


def qkv(rng, n, m, d=3, d_v=2, batch=()):
    return (rng.standard_normal((*batch, n, d)), rng.standard_normal((*batch, m, d)),
            rng.standard_normal((*batch, m, d_v)))


# ------------------------------------------------------------------------------------------- softmax


def test_softmax_vjp_hand_computed():
    # y = softmax(0, ln 3) = (1/4, 3/4); ȳ = (1, 0): Σ ȳ y = 1/4 → dx = (1/4 · 3/4, 3/4 · (−1/4)) = ±3/16
    dx = softmax_vjp([0.0, np.log(3.0)], [1.0, 0.0])
    np.testing.assert_allclose(dx, [3 / 16, -3 / 16], rtol=1e-15)


@pytest.mark.parametrize("axis", [-1, 0])
def test_softmax_vjp_matches_finite_differences(rng, axis):
    x, d_y = rng.standard_normal((2, 4, 5))
    mask = rng.random((4, 5)) < 0.7
    mask[1] = False                                               # a fully masked row
    mask[:, 2] = False                                            # a fully masked column
    x[~mask] = np.nan                                             # masked garbage never enters

    def loss(x):
        return np.sum(d_y * softmax(x, axis=axis, mask=mask))

    dx = softmax_vjp(x, d_y, axis=axis, mask=mask)
    np.testing.assert_allclose(dx, fd_grad(loss, x), **FD_TOL)
    np.testing.assert_array_equal(dx[~mask], 0.0)


def test_softmax_vjp_fully_masked_policies(rng):
    x, d_y = rng.standard_normal((2, 3, 4))
    mask = np.ones((3, 4), bool)
    mask[1] = False
    zero = softmax_vjp(x, d_y, mask=mask)
    np.testing.assert_array_equal(zero[1], 0.0)
    np.testing.assert_array_equal(softmax_vjp(x, d_y, mask=mask, fully_masked="uniform"), zero)
    nan = softmax_vjp(x, d_y, mask=mask, fully_masked="nan")
    assert np.isnan(nan[1]).all()
    np.testing.assert_array_equal(nan[[0, 2]], zero[[0, 2]])


def test_softmax_vjp_sums_to_zero_and_nan_follows_ieee(rng):
    x, d_y = rng.standard_normal((2, 3, 6))
    np.testing.assert_allclose(softmax_vjp(x, d_y).sum(axis=-1), 0.0, atol=1e-15)
    x[0, 2] = np.nan                                              # a kept NaN poisons its own row only
    dx = softmax_vjp(x, d_y)
    assert np.isnan(dx[0]).all()
    assert np.isfinite(dx[1:]).all()


# ---------------------------------------------------------------------------------------------- sdpa


def sdpa_loss(d_out, mask=None, **options):
    def loss(q, k, v, bias=None):
        return np.sum(d_out * scaled_dot_product_attention(q, k, v, mask if bias is None else bias, **options))
    return loss


SDPA_CASES = {
    "plain": {"n": 3, "m": 5},
    "scale": {"n": 4, "m": 3, "scale": 0.3},
    "causal top-left n<m": {"n": 4, "m": 6, "causal": True},
    "causal top-left n>m": {"n": 6, "m": 4, "causal": True},
    "causal bottom-right n<m": {"n": 3, "m": 5, "causal": "bottom-right"},
    "causal bottom-right n>m": {"n": 5, "m": 3, "causal": "bottom-right"},   # first 2 rows fully masked
    "uniform policy": {"n": 5, "m": 3, "causal": "bottom-right", "fully_masked": "uniform"},
}


@pytest.mark.parametrize("case", list(SDPA_CASES))
def test_sdpa_vjp_matches_finite_differences(rng, case):
    options = dict(SDPA_CASES[case])
    n, m = options.pop("n"), options.pop("m")
    q, k, v = qkv(rng, n, m)
    d_out = rng.standard_normal((n, 2))
    g = sdpa_vjp(q, k, v, d_out, **options)
    fd = fd_grads(sdpa_loss(d_out, **options), {"q": q, "k": k, "v": v}, "qkv")
    for name in "qkv":
        np.testing.assert_allclose(getattr(g, "d" + name), fd[name], **FD_TOL, err_msg=f"d{name}")
    assert g.d_bias is None


def test_sdpa_vjp_bool_mask_matches_finite_differences(rng):
    n, m = 4, 6
    q, k, v = qkv(rng, n, m)
    d_out = rng.standard_normal((n, 2))
    mask = rng.random((n, m)) < 0.6
    mask[2] = False                                               # fully masked row: zero gradient
    mask[0, 0] = True
    g = sdpa_vjp(q, k, v, d_out, mask, causal="bottom-right")
    fd = fd_grads(sdpa_loss(d_out, mask, causal="bottom-right"), {"q": q, "k": k, "v": v}, "qkv")
    for name in "qkv":
        np.testing.assert_allclose(getattr(g, "d" + name), fd[name], **FD_TOL, err_msg=f"d{name}")
    np.testing.assert_array_equal(g.dq[2], 0.0)


def test_sdpa_vjp_float_bias_matches_finite_differences(rng):
    n, m = 5, 4
    q, k, v = qkv(rng, n, m, batch=(2,))
    d_out = rng.standard_normal((2, n, 2))
    bias = rng.standard_normal((n, m))                            # shared by the batch: d_bias summed
    bias[0, 1] = bias[3, :2] = -np.inf                            # −inf masks by selection
    bias[4] = -np.inf                                             # a fully masked row
    g = sdpa_vjp(q, k, v, d_out, bias, causal=True, scale=0.7)
    loss = sdpa_loss(d_out, causal=True, scale=0.7)
    fd = fd_grads(loss, {"q": q, "k": k, "v": v, "bias": bias}, ["q", "k", "v", "bias"])
    for name in "qkv":
        np.testing.assert_allclose(getattr(g, "d" + name), fd[name], **FD_TOL, err_msg=f"d{name}")
    assert g.d_bias.shape == bias.shape
    np.testing.assert_allclose(g.d_bias, fd["bias"], **FD_TOL)
    np.testing.assert_array_equal(g.d_bias[~np.isfinite(bias) | np.triu(np.ones((n, m), bool), 1)], 0.0)
    np.testing.assert_array_equal(g.dq[:, 4], 0.0)


def test_sdpa_vjp_dv_is_weights_transposed_times_d_out(rng):
    n, m = 4, 7
    q, k, v = qkv(rng, n, m, batch=(3,))
    d_out = rng.standard_normal((3, n, 2))
    mask = rng.random((3, n, m)) < 0.5
    _, A = scaled_dot_product_attention(q, k, v, mask, causal=True, return_weights=True)
    g = sdpa_vjp(q, k, v, d_out, mask, causal=True)
    np.testing.assert_allclose(g.dv, np.swapaxes(A, -1, -2) @ d_out, rtol=1e-13, atol=1e-13)


def test_sdpa_vjp_sums_gradients_of_broadcast_inputs(rng):
    n, m = 3, 5
    q = rng.standard_normal((2, 4, n, 3))                         # (batch, heads, n, d)
    k = rng.standard_normal((m, 3))                               # one k shared by every batch and head
    v = rng.standard_normal((4, m, 2))                            # shared by the batch
    bias = rng.standard_normal((2, 1, 1, m))                      # per batch, shared by heads and queries
    d_out = rng.standard_normal((2, 4, n, 2))
    g = sdpa_vjp(q, k, v, d_out, bias)
    assert (g.dq.shape, g.dk.shape, g.dv.shape, g.d_bias.shape) == (q.shape, k.shape, v.shape, bias.shape)
    dk, dv, d_bias = np.zeros_like(k), np.zeros_like(v), np.zeros_like(bias)
    for b in range(2):
        for h in range(4):
            single = sdpa_vjp(q[b, h], k, v[h], d_out[b, h], np.broadcast_to(bias[b, 0], (n, m)))
            np.testing.assert_allclose(g.dq[b, h], single.dq, **TIGHT)
            dk += single.dk
            dv[h] += single.dv
            d_bias[b, 0] += single.d_bias.sum(axis=0)
    np.testing.assert_allclose(g.dk, dk, **TIGHT)
    np.testing.assert_allclose(g.dv, dv, **TIGHT)
    np.testing.assert_allclose(g.d_bias, d_bias, **TIGHT)
    fd = fd_grads(sdpa_loss(d_out), {"q": q, "k": k, "v": v, "bias": bias}, ["k", "bias"])
    np.testing.assert_allclose(g.dk, fd["k"], **FD_TOL)
    np.testing.assert_allclose(g.d_bias, fd["bias"], **FD_TOL)


def test_sdpa_vjp_mask_with_batch_axes_broadcasts_the_inputs(rng):
    n, m = 3, 4
    q, k, v = qkv(rng, n, m)
    mask = rng.random((2, n, m)) < 0.7                            # the mask alone carries the batch
    d_out = rng.standard_normal((2, n, 2))
    g = sdpa_vjp(q, k, v, d_out, mask)
    fd = fd_grads(sdpa_loss(d_out, mask), {"q": q, "k": k, "v": v}, "qkv")
    for name in "qkv":
        np.testing.assert_allclose(getattr(g, "d" + name), fd[name], **FD_TOL, err_msg=f"d{name}")


def test_sdpa_vjp_masked_garbage_does_not_leak(rng):
    n, m = 4, 6
    q, k, v = qkv(rng, n, m)
    d_out = rng.standard_normal((n, 2))
    mask = np.ones((n, m), bool)
    mask[:, 4:] = False                                           # keys 4, 5: padding nobody sees
    mask[1] = False                                               # query 1 sees nothing
    clean = sdpa_vjp(q, k, v, d_out, mask)
    k[4:], v[4] = np.nan, np.inf
    v[5] = -np.inf
    q[1], d_out[1] = np.nan, np.inf                               # garbage in a fully masked query row
    g = sdpa_vjp(q, k, v, d_out, mask)
    for name in ("dq", "dk", "dv"):
        np.testing.assert_array_equal(getattr(g, name), getattr(clean, name), err_msg=name)
    np.testing.assert_array_equal(g.dk[4:], 0.0)
    np.testing.assert_array_equal(g.dv[4:], 0.0)


def test_sdpa_vjp_nan_in_a_used_key_follows_ieee(rng):
    n, m = 3, 5
    q, k, v = qkv(rng, n, m)
    d_out = rng.standard_normal((n, 2))
    k[4] = np.nan                                                 # bottom-right, j <= i + 2: only query 2 sees key 4
    g = sdpa_vjp(q, k, v, d_out, causal="bottom-right")
    assert np.isnan(g.dq[2]).all()
    assert np.isfinite(g.dq[:2]).all()


def test_sdpa_vjp_nan_policy_poisons_its_batch_element(rng):
    n, m = 4, 3
    q, k, v = qkv(rng, n, m, batch=(2,))
    d_out = rng.standard_normal((2, n, 2))
    mask = np.ones((2, n, m), bool)
    mask[0, 1] = False                                            # batch 0 has a fully masked row
    g = sdpa_vjp(q, k, v, d_out, mask, fully_masked="nan")
    zero = sdpa_vjp(q, k, v, d_out, mask)
    assert np.isnan(g.dq[0, 1]).all() and np.isnan(g.dk[0]).all() and np.isnan(g.dv[0]).all()
    np.testing.assert_array_equal(g.dq[0, [0, 2, 3]], zero.dq[0, [0, 2, 3]])
    for name in ("dq", "dk", "dv"):
        np.testing.assert_array_equal(getattr(g, name)[1], getattr(zero, name)[1], err_msg=name)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_sdpa_vjp_dtype_is_the_compute_and_output_dtype(rng, dtype):
    # The values are held to a derived float32 bound in test_oracle_extended; here the dtype and the
    # fully-masked policies, which act by selection whatever the dtype.
    q, k, v = qkv(rng, 4, 6, batch=(2,))
    d_out = rng.standard_normal((2, 4, 2))
    bias = rng.standard_normal((4, 6))
    bias[0] = -np.inf                                              # query 0 is fully masked
    for fully_masked in ("zero", "nan", "uniform"):
        g = sdpa_vjp(q, k, v, d_out, bias, fully_masked=fully_masked, dtype=dtype)
        g64 = sdpa_vjp(q, k, v, d_out, bias, fully_masked=fully_masked)
        for name, x, x64 in zip(SdpaGrads._fields, g, g64, strict=True):
            assert x.dtype == dtype and x.shape == x64.shape, name
            np.testing.assert_array_equal(np.isnan(x), np.isnan(x64), err_msg=f"{fully_masked} {name}")
        if fully_masked != "nan":
            np.testing.assert_array_equal(g.dq[:, 0], 0.0)        # a fully masked query gets nothing
            np.testing.assert_array_equal(g.d_bias[0], 0.0)
    with pytest.raises(TypeError, match="dtype must be float16, float32 or float64"):
        sdpa_vjp(q, k, v, d_out, dtype=np.int32)


@given(st.integers(0, 2**32 - 1), st.integers(1, 5), st.integers(1, 5), st.integers(1, 4), st.integers(1, 3),
       st.lists(st.integers(1, 3), max_size=2), st.sampled_from([False, True, "bottom-right"]),
       st.sampled_from([None, "bool", "float"]))
def test_sdpa_vjp_matches_finite_differences_on_random_shapes(seed, n, m, d, d_v, batch, causal, mask_kind):
    rng = np.random.default_rng(seed)
    q, k, v = qkv(rng, n, m, d, d_v, tuple(batch))
    d_out = rng.standard_normal((*batch, n, d_v))
    mask = None
    if mask_kind == "bool":
        mask = rng.random((n, m)) < 0.7
    elif mask_kind == "float":
        mask = np.where(rng.random((n, m)) < 0.7, rng.standard_normal((n, m)), -np.inf)
    g = sdpa_vjp(q, k, v, d_out, mask, causal=causal)
    loss = sdpa_loss(d_out, mask, causal=causal)
    inputs = {"q": q, "k": k, "v": v}
    for name, x in inputs.items():
        coords = [tuple(rng.integers(0, s) for s in x.shape) for _ in range(3)]
        fd = fd_grad(lambda x, name=name: loss(**{**inputs, name: x}), x, coords=coords)
        for idx in coords:
            np.testing.assert_allclose(getattr(g, "d" + name)[idx], fd[idx], **FD_TOL, err_msg=f"d{name}{idx}")


# ---------------------------------------------------------------------------------------- multi-head


def random_params(rng, d_model, num_heads, d_k, d_v, bias):
    params = init_multi_head(rng, d_model, num_heads, bias=bias, d_k=d_k, d_v=d_v)
    if not bias:
        return params
    return MultiHeadParams(params.w_q, params.w_k, params.w_v, params.w_o,   # non-zero biases
                           *(rng.standard_normal(b.shape) for b in (params.b_q, params.b_k, params.b_v, params.b_o)))


PARAM_NAMES = ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o")


@pytest.mark.parametrize("separate_v", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_multi_head_vjp_matches_finite_differences(rng, separate_v, bias):
    n, m, d_model, h = 3, 5, 4, 2
    params = random_params(rng, d_model, h, d_k=2, d_v=3, bias=bias)
    x_q, x_kv = rng.standard_normal((2, n, d_model)), rng.standard_normal((m, d_model))   # memory shared by the batch
    x_v = rng.standard_normal((m, d_model)) if separate_v else None
    d_out = rng.standard_normal((2, n, d_model))
    mask = rng.random((n, m)) < 0.7
    mask[1] = False
    options = {"num_heads": h, "mask": mask, "causal": "bottom-right"}

    def loss(x_q=x_q, x_kv=x_kv, x_v=x_v, params=params):
        return np.sum(d_out * multi_head_attention(x_q, x_kv, params, x_v=x_v, **options))

    g = multi_head_vjp(x_q, x_kv, params, d_out, x_v=x_v, **options)
    assert isinstance(g, MultiHeadGrads)
    inputs = {"x_q": x_q, "x_kv": x_kv} | ({"x_v": x_v} if separate_v else {})
    fd = fd_grads(loss, inputs, list(inputs))
    np.testing.assert_allclose(g.dx_q, fd["x_q"], **FD_TOL)
    np.testing.assert_allclose(g.dx_kv, fd["x_kv"], **FD_TOL)
    if separate_v:
        np.testing.assert_allclose(g.dx_v, fd["x_v"], **FD_TOL)
    else:
        assert g.dx_v is None
    for name in PARAM_NAMES:
        p = getattr(params, name)
        if p is None:
            assert getattr(g.dparams, name) is None, name
            continue
        fd_p = fd_grad(lambda x, name=name: loss(params=MultiHeadParams(**{**vars(params), name: x})), p)
        np.testing.assert_allclose(getattr(g.dparams, name), fd_p, **FD_TOL, err_msg=name)


def test_multi_head_vjp_float_bias_and_scale(rng):
    n, m, d_model, h = 4, 3, 6, 3
    params = random_params(rng, d_model, h, d_k=2, d_v=2, bias=True)
    x_q, x_kv = rng.standard_normal((n, d_model)), rng.standard_normal((m, d_model))
    d_out = rng.standard_normal((n, d_model))
    bias = np.where(rng.random((n, m)) < 0.8, rng.standard_normal((n, m)), -np.inf)
    options = {"num_heads": h, "mask": bias, "causal": True, "scale": 0.4}

    def loss(x_q):
        return np.sum(d_out * multi_head_attention(x_q, x_kv, params, **options))

    g = multi_head_vjp(x_q, x_kv, params, d_out, **options)
    np.testing.assert_allclose(g.dx_q, fd_grad(loss, x_q), **FD_TOL)


# -------------------------------------------------------------------------------------------- linear


def linear_loss(d_out, causal):
    def loss(q, k, v):
        return np.sum(d_out * linear_attention(q, k, v, elu_feature_map, causal=causal))
    return loss


LINEAR_CASES = [(False, 4, 6), (False, 6, 4), (True, 4, 6), (True, 6, 4),
                ("bottom-right", 4, 6), ("bottom-right", 6, 4)]


@pytest.mark.parametrize("method", ["equation", "scan"])
@pytest.mark.parametrize(("causal", "n", "m"), LINEAR_CASES)
def test_linear_attention_vjp_matches_finite_differences(rng, method, causal, n, m):
    q, k, v = qkv(rng, n, m, batch=(2,))
    assert np.abs(q).min() > 100 * H and np.abs(k).min() > 100 * H   # away from φ'''s kink at 0
    d_out = rng.standard_normal((2, n, 2))
    dq, dk, dv = linear_attention_vjp(q, k, v, d_out, causal=causal, method=method)
    fd = fd_grads(linear_loss(d_out, causal), {"q": q, "k": k, "v": v}, "qkv")
    np.testing.assert_allclose(dq, fd["q"], **FD_TOL)
    np.testing.assert_allclose(dk, fd["k"], **FD_TOL)
    np.testing.assert_allclose(dv, fd["v"], **FD_TOL)


@pytest.mark.parametrize(("causal", "n", "m"), [*LINEAR_CASES, ("bottom-right", 9, 3), (True, 1, 7)])
def test_linear_attention_vjp_quadratic_equals_scan(rng, causal, n, m):
    q = rng.standard_normal((2, 3, n, 4))
    k, v = rng.standard_normal((3, m, 4)), rng.standard_normal((m, 5))   # broadcast over the batch
    d_out = rng.standard_normal((2, 3, n, 5))
    quadratic = linear_attention_vjp(q, k, v, d_out, causal=causal, eps=1e-6)
    scan = linear_attention_vjp(q, k, v, d_out, causal=causal, method="scan", eps=1e-6)
    for name, a, b in zip(("dq", "dk", "dv"), quadratic, scan, strict=True):
        np.testing.assert_allclose(a, b, **TIGHT, err_msg=name)
    assert (quadratic[1].shape, quadratic[2].shape) == (k.shape, v.shape)


def test_linear_attention_vjp_queries_that_see_nothing_have_zero_gradient(rng):
    n, m = 6, 2                                                   # bottom-right: queries 0 … 3 see no key
    q, k, v = qkv(rng, n, m)
    d_out = rng.standard_normal((n, 2))
    for method in ("equation", "scan"):
        dq, _, _ = linear_attention_vjp(q, k, v, d_out, causal="bottom-right", method=method)
        np.testing.assert_array_equal(dq[:4], 0.0)


def test_linear_attention_vjp_future_garbage_does_not_leak(rng):
    n = m = 5
    q, k, v = qkv(rng, n, m)
    d_out = rng.standard_normal((n, 2))
    k_bad, v_bad = k.copy(), v.copy()
    k_bad[4], v_bad[4] = np.nan, np.inf                           # the last key: only query 4 sees it
    for method in ("equation", "scan"):
        clean = linear_attention_vjp(q, k, v, d_out, causal=True, method=method)
        dq, _, _ = linear_attention_vjp(q, k_bad, v_bad, d_out, causal=True, method=method)
        np.testing.assert_array_equal(dq[:4], clean[0][:4], err_msg=method)
        assert np.isnan(dq[4]).all()


def test_linear_attention_vjp_refuses_a_zero_denominator(rng):
    q, k, v = qkv(rng, 3, 4)
    q[1] = -800.0                                                 # φ(q_1) = e^{-800} underflows to 0
    d_out = rng.standard_normal((3, 2))
    for method in ("equation", "scan"):
        for causal in (False, True):
            with pytest.raises(ZeroDivisionError, match="denominator"):
                linear_attention_vjp(q, k, v, d_out, causal=causal, method=method)
        grads = linear_attention_vjp(q, k, v, d_out, method=method, eps=1e-6)
        assert all(np.isfinite(g).all() for g in grads), method


# --------------------------------------------------------------------------------------------- merge


def attention_with_lse(q, k, v, allowed, **options):
    return scaled_dot_product_attention(q, k, v, allowed, return_lse=True, **options)


@pytest.mark.parametrize(("n", "m"), [(5, 8), (8, 5)])
def test_merging_two_disjoint_key_sets_equals_full_attention(rng, n, m):
    q, k, v = qkv(rng, n, m, d=4, d_v=3, batch=(2,))
    allowed = rng.random((2, n, m)) < 0.8
    allowed[0, 1] = False                                         # sees no key in either part
    part = rng.random((2, n, m)) < 0.5                            # a random partition of each row's keys
    part[:, 2] = True                                             # row 2: everything in part a, b empty
    part[:, 3] = False                                            # row 3: a empty
    for causal in (False, True, "bottom-right"):
        full, full_lse = attention_with_lse(q, k, v, allowed, causal=causal)
        out_a, lse_a = attention_with_lse(q, k, v, allowed & part, causal=causal)
        out_b, lse_b = attention_with_lse(q, k, v, allowed & ~part, causal=causal, fully_masked="nan")
        out, lse = merge_attention(out_a, lse_a, out_b, lse_b)   # NaN rows of an empty part selected away
        np.testing.assert_allclose(out, full, **MERGE, err_msg=str(causal))
        np.testing.assert_allclose(lse, full_lse, **MERGE, err_msg=str(causal))
    assert lse[0, 1] == -np.inf
    np.testing.assert_array_equal(out[0, 1], 0.0)


def test_merge_is_associative_over_three_parts(rng):
    n, m = 4, 9
    q, k, v = qkv(rng, n, m, d=4, d_v=3)
    label = rng.integers(0, 3, (n, m))                            # each pair in one of three parts
    label[0] = 1                                                  # row 0: parts 0 and 2 empty
    parts = [attention_with_lse(q, k, v, label == p) for p in range(3)]
    left = merge_attention(*merge_attention(*parts[0], *parts[1]), *parts[2])
    right = merge_attention(*parts[0], *merge_attention(*parts[1], *parts[2]))
    full = attention_with_lse(q, k, v, None)
    for merged in (left, right):
        np.testing.assert_allclose(merged[0], full[0], **MERGE)
        np.testing.assert_allclose(merged[1], full[1], **MERGE)
    np.testing.assert_allclose(left[0], right[0], **MERGE)


def test_merge_of_two_empty_parts_is_zero():
    out, lse = merge_attention(np.full((1, 2), np.nan), [-np.inf], np.full((1, 2), np.nan), [-np.inf])
    np.testing.assert_array_equal(out, [[0.0, 0.0]])
    np.testing.assert_array_equal(lse, [-np.inf])


# ----------------------------------------------------------------------------------------- bad input


def test_bad_inputs_get_clear_errors(rng):
    q, k, v = qkv(rng, 3, 4)
    with pytest.raises(ValueError, match=r"d_out has shape \(4, 2\).*\(3, 2\)"):
        sdpa_vjp(q, k, v, np.zeros((4, 2)))
    with pytest.raises(TypeError, match="d_out"):
        sdpa_vjp(q, k, v, np.zeros((3, 2), int))
    with pytest.raises(ValueError, match="mask has shape"):
        sdpa_vjp(q, k, v, np.zeros((3, 2)), np.ones((3, 5), bool))
    with pytest.raises(ValueError, match=r"leading \(batch\) dimensions do not broadcast"):
        sdpa_vjp(np.stack([q, q]), k, v, np.zeros((2, 3, 2)), np.ones((3, 3, 4), bool))
    with pytest.raises(ValueError, match="fully_masked"):
        sdpa_vjp(q, k, v, np.zeros((3, 2)), fully_masked="ignore")
    with pytest.raises(ValueError, match="d_y has shape"):
        softmax_vjp(np.zeros((2, 3)), np.zeros((3, 2)))
    with pytest.raises(ValueError, match="mask has shape"):
        softmax_vjp(np.zeros((2, 3)), np.zeros((2, 3)), mask=np.ones(2, bool))
    with pytest.raises(ValueError, match="method"):
        linear_attention_vjp(q, k, v, np.zeros((3, 2)), method="right")
    with pytest.raises(ValueError, match="d_out has shape"):
        linear_attention_vjp(q, k, v, np.zeros((3, 3)))
    params = init_multi_head(rng, 4, 2)
    with pytest.raises(ValueError, match="d_out has shape"):
        multi_head_vjp(np.zeros((3, 4)), np.zeros((5, 4)), params, np.zeros((5, 4)), num_heads=2)
    with pytest.raises(ValueError, match="lse_a has shape"):
        merge_attention(np.zeros((3, 2)), np.zeros(2), np.zeros((3, 2)), np.zeros(3))
    with pytest.raises(ValueError, match="d_v"):
        merge_attention(np.zeros((3, 2)), np.zeros(3), np.zeros((3, 4)), np.zeros(3))


def test_named_tuples():
    assert SdpaGrads._fields == ("dq", "dk", "dv", "d_bias")
    assert MultiHeadGrads._fields == ("dx_q", "dx_kv", "dx_v", "dparams")
