"""Multi-head attention (Vaswani et al., 2017, §3.2.2) against a per-head loop of naive pieces."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refattn import MultiHeadParams, init_multi_head, multi_head_attention, scaled_dot_product_attention
from tests.naive import naive_causal_allowed, per_head_loop, random_params

TOL = dict(rtol=1e-12, atol=1e-12)


def test_matches_per_head_loop_of_naive_sdpa(rng):
    d_model, h, d_k, d_v, n, m, B = 6, 3, 2, 4, 4, 7, 2
    params = random_params(rng, d_model, h, d_k, d_v)
    x_q, x_kv = rng.standard_normal((B, n, d_model)), rng.standard_normal((B, m, d_model))
    out, A = multi_head_attention(x_q, x_kv, params, num_heads=h, return_weights=True)
    assert out.shape == (B, n, d_model) and A.shape == (B, h, n, m)
    for b in range(B):
        ref_out, ref_A, _ = per_head_loop(x_q[b], x_kv[b], params, h)
        np.testing.assert_allclose(out[b], ref_out, **TOL)
        np.testing.assert_allclose(A[b], ref_A, **TOL)


@settings(max_examples=25)
@given(
    batch=st.lists(st.integers(1, 2), max_size=2).map(tuple),
    n=st.integers(1, 5), m=st.integers(1, 6), h=st.integers(1, 3),
    d_k=st.integers(1, 3), d_v=st.integers(1, 3), d_model=st.integers(1, 5),
    seed=st.integers(0, 2**16),
)
def test_matches_per_head_loop_over_shapes(batch, n, m, h, d_k, d_v, d_model, seed):
    rng = np.random.default_rng(seed)
    params = random_params(rng, d_model, h, d_k, d_v)
    x_q, x_kv = rng.standard_normal((*batch, n, d_model)), rng.standard_normal((*batch, m, d_model))
    out, A = multi_head_attention(x_q, x_kv, params, num_heads=h, return_weights=True)
    assert out.shape == (*batch, n, d_model) and A.shape == (*batch, h, n, m)
    for idx in np.ndindex(*batch):
        ref_out, ref_A, _ = per_head_loop(x_q[idx], x_kv[idx], params, h)
        np.testing.assert_allclose(out[idx], ref_out, **TOL)
        np.testing.assert_allclose(A[idx], ref_A, **TOL)


def test_concat_times_w_o_is_sum_of_row_blocks(rng):
    # Survey Eq. 14: Concat(head_1 … head_h) Wᴼ = Σ_i head_i Wᴼ_i, Wᴼ_i = rows i·d_v … (i+1)·d_v − 1.
    d_model, h, d_k, d_v, n, m = 8, 4, 2, 3, 5, 3
    params = random_params(rng, d_model, h, d_k, d_v)
    x_q, x_kv = rng.standard_normal((n, d_model)), rng.standard_normal((m, d_model))
    out = multi_head_attention(x_q, x_kv, params, num_heads=h)
    _, _, heads = per_head_loop(x_q, x_kv, params, h)
    summed = sum(heads[i] @ params.w_o[i * d_v:(i + 1) * d_v, :] for i in range(h)) + params.b_o
    np.testing.assert_allclose(out, summed, **TOL)


def test_weights_are_per_head_sdpa_weights(rng):
    d_model, h, n, m, B = 8, 2, 3, 6, 2
    params = random_params(rng, d_model, h, d_model // h)
    x_q, x_kv = rng.standard_normal((B, n, d_model)), rng.standard_normal((B, m, d_model))
    out, A = multi_head_attention(x_q, x_kv, params, num_heads=h, return_weights=True)
    assert A.shape == (B, h, n, m)
    np.testing.assert_allclose(A.sum(axis=-1), np.ones((B, h, n)), rtol=0, atol=4e-16 * m)
    assert (A >= 0).all()
    d_k = d_model // h
    for i in range(h):
        cols = slice(i * d_k, (i + 1) * d_k)
        Q_i = x_q @ params.w_q[:, cols] + params.b_q[cols]
        K_i = x_kv @ params.w_k[:, cols] + params.b_k[cols]
        V_i = x_kv @ params.w_v[:, cols] + params.b_v[cols]
        _, A_i = scaled_dot_product_attention(Q_i, K_i, V_i, return_weights=True)
        np.testing.assert_allclose(A[:, i], A_i, **TOL)
    np.testing.assert_array_equal(
        multi_head_attention(x_q, x_kv, params, num_heads=h), out,
        err_msg="return_weights must not change the output",
    )


def test_cross_attention_with_separate_value_input(rng):
    d_model, h, n, m = 6, 2, 2, 5
    params = random_params(rng, d_model, h, 3)
    x_q, x_kv, x_v = (rng.standard_normal((t, d_model)) for t in (n, m, m))
    out, A = multi_head_attention(x_q, x_kv, params, num_heads=h, x_v=x_v, return_weights=True)
    ref_out, ref_A, _ = per_head_loop(x_q, x_kv, params, h, x_v=x_v)
    np.testing.assert_allclose(out, ref_out, **TOL)
    np.testing.assert_allclose(A, ref_A, **TOL)
    # x_v really is used: the weights depend only on x_q, x_kv, the output on x_v too.
    out_kv, A_kv = multi_head_attention(x_q, x_kv, params, num_heads=h, return_weights=True)
    np.testing.assert_array_equal(A_kv, A)
    assert np.abs(out_kv - out).max() > 1e-3


def test_batch_mask_is_shared_by_all_heads(rng):
    d_model, h, n, m, B = 6, 3, 4, 5, 2
    params = random_params(rng, d_model, h, 2)
    x_q, x_kv = rng.standard_normal((B, n, d_model)), rng.standard_normal((B, m, d_model))
    mask = rng.random((B, n, m)) < 0.6
    mask[0, 1, :] = False                                       # one fully masked query row
    out, A = multi_head_attention(x_q, x_kv, params, num_heads=h, mask=mask, return_weights=True)
    for b in range(B):
        ref_out, ref_A, _ = per_head_loop(x_q[b], x_kv[b], params, h, allowed=mask[b])
        np.testing.assert_allclose(out[b], ref_out, **TOL)
        np.testing.assert_allclose(A[b], ref_A, **TOL)
    np.testing.assert_array_equal(A[~np.broadcast_to(mask[:, None], A.shape)], 0.0)
    # Fully masked row: every head is zero ("zero" policy), so only bᴼ remains.
    np.testing.assert_array_equal(A[0, :, 1, :], 0.0)
    np.testing.assert_allclose(out[0, 1], params.b_o, **TOL)


@pytest.mark.parametrize(("n", "m"), [(3, 6), (6, 3)])
@pytest.mark.parametrize(("causal", "alignment"), [(True, "top-left"), ("top-left", "top-left"),
                                               ("bottom-right", "bottom-right")])
def test_causal_alignments_with_n_ne_m(rng, n, m, causal, alignment):
    d_model, h = 4, 2
    params = random_params(rng, d_model, h, 2)
    x_q, x_kv = rng.standard_normal((n, d_model)), rng.standard_normal((m, d_model))
    out, A = multi_head_attention(x_q, x_kv, params, num_heads=h, causal=causal, return_weights=True)
    allowed = naive_causal_allowed(n, m, alignment)
    ref_out, ref_A, _ = per_head_loop(x_q, x_kv, params, h, allowed=allowed)
    np.testing.assert_allclose(out, ref_out, **TOL)
    np.testing.assert_allclose(A, ref_A, **TOL)


def test_causal_true_and_bottom_right_differ_when_n_ne_m(rng):
    d_model, h, n, m = 4, 2, 3, 5
    params = random_params(rng, d_model, h, 2)
    x_q, x_kv = rng.standard_normal((n, d_model)), rng.standard_normal((m, d_model))
    _, A_tl = multi_head_attention(x_q, x_kv, params, num_heads=h, causal=True, return_weights=True)
    _, A_br = multi_head_attention(x_q, x_kv, params, num_heads=h, causal="bottom-right", return_weights=True)
    # top-left: query 0 sees key 0 only; bottom-right: the last query sees every key.
    np.testing.assert_array_equal(A_tl[:, 0, 1:], 0.0)
    np.testing.assert_allclose(A_tl[:, 0, 0], 1.0, rtol=0, atol=0)
    assert (A_br[:, -1, :] > 0).all()
    np.testing.assert_array_equal(A_br[:, 0, (m - n) + 1:], 0.0)     # query 0 sees keys j <= m − n
    assert (A_br[:, 0, :(m - n) + 1] > 0).all()


def test_mask_and_causal_combine(rng):
    d_model, h, n, m, B = 4, 2, 4, 6, 2
    params = random_params(rng, d_model, h, 2)
    x_q, x_kv = rng.standard_normal((B, n, d_model)), rng.standard_normal((B, m, d_model))
    lengths = np.array([6, 3])
    pad = np.arange(m)[None, None, :] < lengths[:, None, None]   # (B, 1, m) key padding
    out = multi_head_attention(x_q, x_kv, params, num_heads=h, mask=pad, causal="bottom-right")
    for b in range(B):
        allowed = naive_causal_allowed(n, m, "bottom-right") & pad[b]
        ref_out, _, _ = per_head_loop(x_q[b], x_kv[b], params, h, allowed=allowed)
        np.testing.assert_allclose(out[b], ref_out, **TOL)


def test_init_multi_head_shapes_bounds_determinism():
    d_model, h = 12, 3
    p = init_multi_head(np.random.default_rng(5), d_model, h)
    assert p.w_q.shape == p.w_k.shape == p.w_v.shape == (d_model, d_model)
    assert p.w_o.shape == (d_model, d_model)
    for name in ("b_q", "b_k", "b_v", "b_o"):
        np.testing.assert_array_equal(getattr(p, name), np.zeros(d_model), err_msg=name)
    bound = np.sqrt(6.0 / (d_model + d_model))                   # Glorot: fan_in = fan_out = 12
    for name in ("w_q", "w_k", "w_v", "w_o"):
        w = getattr(p, name)
        assert np.abs(w).max() <= bound, name
        assert np.abs(w).max() > 0.8 * bound, name               # 144 uniform draws reach near the bound
    assert len({getattr(p, name).tobytes() for name in ("w_q", "w_k", "w_v", "w_o")}) == 4
    q = init_multi_head(5, d_model, h)                           # int seed == Generator(seed)
    for name in ("w_q", "w_k", "w_v", "w_o"):
        np.testing.assert_array_equal(getattr(p, name), getattr(q, name), err_msg=name)
    other = init_multi_head(6, d_model, h)
    assert not np.array_equal(other.w_q, p.w_q)


def test_init_multi_head_custom_widths_and_no_bias():
    d_model, h, d_k, d_v = 10, 2, 3, 4
    p = init_multi_head(0, d_model, h, d_k=d_k, d_v=d_v, bias=False)
    assert p.w_q.shape == p.w_k.shape == (d_model, h * d_k)
    assert p.w_v.shape == (d_model, h * d_v) and p.w_o.shape == (h * d_v, d_model)
    assert p.b_q is None and p.b_k is None and p.b_v is None and p.b_o is None
    assert np.abs(p.w_q).max() <= np.sqrt(6.0 / (d_model + h * d_k))
    assert np.abs(p.w_v).max() <= np.sqrt(6.0 / (d_model + h * d_v))
    assert np.abs(p.w_o).max() <= np.sqrt(6.0 / (h * d_v + d_model))
    x, mem = np.random.default_rng(1).standard_normal((2, 3, d_model))
    out = multi_head_attention(x, mem, p, num_heads=h)
    assert out.shape == (3, d_model)


def test_init_multi_head_indivisible_width():
    with pytest.raises(ValueError, match=r"d_model=10.*num_heads=3"):
        init_multi_head(0, 10, 3)


def test_bad_inputs(rng):
    d_model, h = 4, 2
    p = init_multi_head(rng, d_model, h)
    x = rng.standard_normal((3, d_model))
    mem = rng.standard_normal((5, d_model))
    with pytest.raises(ValueError, match=r"x_q has d_model=7.*\(3, 7\).*d_model=4"):
        multi_head_attention(rng.standard_normal((3, 7)), mem, p, num_heads=h)
    with pytest.raises(ValueError, match=r"x_kv has d_model=5"):
        multi_head_attention(x, rng.standard_normal((5, 5)), p, num_heads=h)
    with pytest.raises(ValueError, match=r"x_v has m=4 but x_kv has m=5"):
        multi_head_attention(x, mem, p, num_heads=h, x_v=rng.standard_normal((4, d_model)))
    with pytest.raises(TypeError, match=r"x_q must be a real floating-point array.*int"):
        multi_head_attention(np.ones((3, d_model), dtype=np.int64), mem, p, num_heads=h)
    with pytest.raises(TypeError, match=r"x_kv must be a real floating-point array"):
        multi_head_attention(x, np.ones((5, d_model), dtype=int), p, num_heads=h)
    with pytest.raises(ValueError, match=r"not divisible by num_heads=3"):
        multi_head_attention(x, mem, p, num_heads=3)
    with pytest.raises(ValueError, match=r"mask has shape \(3, 4\)"):
        multi_head_attention(x, mem, p, num_heads=h, mask=np.ones((3, 4), dtype=bool))
    with pytest.raises(ValueError, match=r"batch"):
        multi_head_attention(rng.standard_normal((2, 3, d_model)), rng.standard_normal((3, 5, d_model)),
                             p, num_heads=h)


def test_params_with_inconsistent_shapes(rng):
    w = rng.standard_normal((4, 4))
    with pytest.raises(ValueError, match=r"w_k has shape \(4, 6\) but w_q has shape \(4, 4\)"):
        MultiHeadParams(w, rng.standard_normal((4, 6)), w, w)
    # A w_k or w_v with other rows than d_model is PyTorch's kdim/vdim: valid, and then the inputs must have it.
    wide = MultiHeadParams(w, rng.standard_normal((3, 4)), rng.standard_normal((5, 4)), w)
    with pytest.raises(ValueError, match=r"x_kv has kdim=4 \(shape \(2, 4\)\) but params have kdim=3"):
        multi_head_attention(np.ones((2, 4)), np.ones((2, 4)), wide, num_heads=2, x_v=np.ones((2, 5)))
    with pytest.raises(ValueError, match=r"x_v has vdim=3 \(shape \(2, 3\)\) but params have vdim=5 \(x_v defaults"):
        multi_head_attention(np.ones((2, 4)), np.ones((2, 3)), wide, num_heads=2)
    with pytest.raises(ValueError, match=r"bias_k and bias_v are given together"):
        MultiHeadParams(w, w, w, w, bias_k=np.zeros(4))
    with pytest.raises(ValueError, match=r"bias_v has shape \(3,\); expected \(4,\)"):
        MultiHeadParams(w, w, w, w, bias_k=np.zeros(4), bias_v=np.zeros(3))
    with pytest.raises(ValueError, match=r"w_o has shape \(4, 3\).*\(4, 4\)"):
        MultiHeadParams(w, w, w, rng.standard_normal((4, 3)))
    with pytest.raises(ValueError, match=r"w_q must be a 2-D matrix, got shape \(4,\)"):
        MultiHeadParams(np.ones(4), w, w, w)
    with pytest.raises(ValueError, match=r"b_v has shape \(3,\); expected \(4,\)"):
        MultiHeadParams(w, w, w, w, b_v=np.zeros(3))


def test_float32_compute_close_to_float64(rng):
    d_model, h, n, m = 8, 2, 5, 7
    params = random_params(rng, d_model, h, 4)
    x_q, x_kv = rng.standard_normal((n, d_model)), rng.standard_normal((m, d_model))
    out64, A64 = multi_head_attention(x_q, x_kv, params, num_heads=h, return_weights=True)
    out32, A32 = multi_head_attention(x_q, x_kv, params, num_heads=h, return_weights=True, dtype=np.float32)
    assert out32.dtype == np.float32 and A32.dtype == np.float32
    # Worst-case forward-error bound (Higham, ch. 3): a length-L sum carries ≤ L·u·Σ|terms|,
    # u = eps32/2. The chain is: rounding x and W to float32 (1 unit each), x W (L = 8),
    # QKᵀ (L = 4), softmax normalisation (L = 7), A V (L = 7), Concat Wᴼ (L = 8): ≈ 36·u, i.e.
    # 18·eps32, times Σ|terms|, which exceeds |out| by a small factor here (terms of either sign),
    # so 64·eps32·(1 + max|out|) covers it with margin (max|out| ≈ 4 here; observed error ≈ 6·eps32).
    # A is a softmax of the scores, so its error is ≈ the scores' absolute error: 64·eps32.
    eps32 = np.finfo(np.float32).eps
    scale = 1.0 + np.abs(out64).max()
    np.testing.assert_allclose(out32, out64, rtol=0, atol=64 * eps32 * scale)
    np.testing.assert_allclose(A32, A64, rtol=0, atol=64 * eps32)
    assert np.abs(out32 - out64).max() > 0
    # float32 inputs with the default dtype are computed in float64.
    out_default = multi_head_attention(x_q.astype(np.float32), x_kv.astype(np.float32), params, num_heads=h)
    assert out_default.dtype == np.float64
    ref = multi_head_attention(x_q.astype(np.float32).astype(np.float64),
                               x_kv.astype(np.float32).astype(np.float64), params, num_heads=h)
    np.testing.assert_array_equal(out_default, ref)


def test_inputs_not_modified(rng):
    params = random_params(rng, 4, 2, 2)
    x_q, x_kv = rng.standard_normal((3, 4)), rng.standard_normal((5, 4))
    copies = x_q.copy(), x_kv.copy(), params.w_q.copy(), params.b_o.copy()
    multi_head_attention(x_q, x_kv, params, num_heads=2, causal=True)
    for a, b in zip((x_q, x_kv, params.w_q, params.b_o), copies, strict=True):
        np.testing.assert_array_equal(a, b)


def test_bad_mask_shape_is_reported_as_given(rng):
    # The convention: errors name the argument and the shapes *seen*; the user passed (2, 3, 4).
    p = init_multi_head(rng, 4, 2)
    x, mem = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 5, 4))
    with pytest.raises(ValueError, match=r"mask has shape \(2, 3, 4\)"):
        multi_head_attention(x, mem, p, num_heads=2, mask=np.ones((2, 3, 4), dtype=bool))


@pytest.mark.parametrize("policy", ["zero", "nan", "uniform"])
@pytest.mark.parametrize("method", ["auto", "equation", "blocked"])
def test_edge_sizes(rng, method, policy):
    d_model, h = 6, 2
    params = random_params(rng, d_model, h, 3)

    def mha(n, m, batch=()):
        x_q, x_kv = rng.standard_normal((*batch, n, d_model)), rng.standard_normal((*batch, m, d_model))
        return multi_head_attention(x_q, x_kv, params, num_heads=h, fully_masked=policy, method=method)

    assert mha(0, 4).shape == (0, d_model)
    assert mha(0, 4, batch=(3,)).shape == (3, 0, d_model)
    assert mha(2, 4, batch=(0,)).shape == (0, 2, d_model)
    assert mha(0, 0, batch=(0, 2)).shape == (0, 2, 0, d_model)
    # m = 0: every head's row is 0 ("zero", and "uniform": a mean over no key) or NaN; Wᴼ then adds bᴼ.
    out = mha(3, 0, batch=(2,))
    expected = np.full((2, 3, d_model), np.nan) if policy == "nan" else np.broadcast_to(params.b_o, (2, 3, d_model))
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("params", [{"w_q": np.eye(4)}, (np.eye(4),) * 4])
def test_params_of_another_type_are_named(rng, params):
    x = rng.standard_normal((3, 4))
    with pytest.raises(TypeError, match=r"params must be MultiHeadParams \(see init_multi_head\), None or "
                                        r"'identity', got (dict|tuple)"):
        multi_head_attention(x, x, params, num_heads=1)


def test_params_none_are_drawn_from_rng_or_refused(rng):
    x = rng.standard_normal((3, 4))
    with pytest.raises(ValueError, match=r"^multi_head draws its projections from rng: pass rng= "
                                         r"\(or params=\)$"):
        multi_head_attention(x, x, num_heads=2)
    drawn = multi_head_attention(x, x, num_heads=2, rng=7)
    np.testing.assert_array_equal(drawn, multi_head_attention(x, x, init_multi_head(7, 4, 2), num_heads=2))


def test_identity_params_are_sdpa(rng):
    x, y = rng.standard_normal((3, 4)), rng.standard_normal((5, 4))
    np.testing.assert_allclose(multi_head_attention(x, y, "identity", num_heads=1),
                               scaled_dot_product_attention(x, y, y), rtol=0, atol=1e-15)
    with pytest.raises(ValueError, match=r"params must be MultiHeadParams, None or 'identity' \(with num_heads=1\)"):
        multi_head_attention(x, y, "identity", num_heads=2)


@pytest.mark.parametrize(("q", "error", "natural"), [
    (np.ones(4), ValueError, r"x_q must have at least 2 dimensions, got shape \(4,\)"),
    (np.float64(1.0), ValueError, r"x_q must have at least 2 dimensions, got shape \(\)"),
    (None, TypeError, r"x_q must be a real floating-point array, got dtype object"),
])
@pytest.mark.parametrize("params", [None, "identity"])
def test_apply_names_a_query_without_length_and_width(q, error, natural, params):
    from refattn import registry

    kv = np.ones((3, 4))
    num_heads = 1 if params == "identity" else 2
    with pytest.raises(error, match=natural):                      # one validation: the door's, naming x_q
        registry.get("multi_head").apply(q, kv, kv, rng=0, params=params, num_heads=num_heads)
    with pytest.raises(error, match=natural):                      # the natural function names its x_q
        multi_head_attention(q, kv, init_multi_head(0, 4, 2), num_heads=2)


def test_apply_names_a_query_of_width_zero_when_drawing():
    from refattn import registry

    empty = np.zeros((3, 0))
    with pytest.raises(ValueError, match=r"q has width d_model = 0"):
        registry.get("multi_head").apply(empty, empty, empty, rng=0)
