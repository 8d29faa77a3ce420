"""Multi-query and grouped-query attention (Shazeer 2019; Ainslie et al. 2023): the g = h limit, the grouping
convention, decoding with a key/value cache, the cache's size and the conversion of a multi-head checkpoint."""
from __future__ import annotations

import numpy as np
import pytest

from refattn import MultiHeadParams, init_multi_head, multi_head_attention, registry, scaled_dot_product_attention
from refattn.core.multi_head import combine_heads, project_heads
from refattn.heads import (
    KVCache,
    MultiQueryParams,
    convert_multi_head,
    init_multi_query,
    kv_cache_bytes,
    kv_cache_summary,
    multi_query_attention,
    multi_query_step,
)
from refattn.oracle.shapes import repeat_over_groups

from .naive import naive_multi_query, random_gqa_params, random_params

TIGHT = {"rtol": 1e-12, "atol": 1e-12}
D_MODEL = 6


def _x(rng, *shape):
    return rng.standard_normal((*shape, D_MODEL))


# --- the limit g = h --------------------------------------------------------------------------------------

@pytest.mark.parametrize("causal", [False, True, "bottom-right"])
def test_g_equal_h_is_multi_head_with_the_same_params(rng, causal):
    params = random_params(rng, D_MODEL, 3, d_k=2, d_v=4)           # d_k, d_v independent of d_model / h
    x_q, x_kv, x_v = _x(rng, 2, 5), _x(rng, 2, 7), _x(rng, 2, 7)
    mask = rng.random((5, 7)) < 0.8
    expected, A = multi_head_attention(x_q, x_kv, params, num_heads=3, x_v=x_v, mask=mask, causal=causal,
                                       return_weights=True)
    as_gqa = MultiQueryParams(params.w_q, params.w_k, params.w_v, params.w_o, params.b_q, params.b_k, params.b_v,
                              params.b_o)
    for p in (params, as_gqa, convert_multi_head(params, num_heads=3, num_kv_heads=3)):
        out, weights = multi_query_attention(x_q, x_kv, p, num_heads=3, x_v=x_v, mask=mask, causal=causal,
                                             return_weights=True)
        np.testing.assert_allclose(out, expected, **TIGHT)
        np.testing.assert_allclose(weights, A, **TIGHT)


def test_registry_entry_with_g_equal_h_is_the_multi_head_entry():
    """init_multi_query draws init_multi_head's arrays when g = h, so the two entries agree on the same rng."""
    rng = np.random.default_rng(3)
    q, k, v = rng.standard_normal((3, 2, 5, 8))
    for causal in (False, True):
        got = registry.get("multi_query").apply(q, k, v, causal=causal, rng=4, num_heads=4, num_kv_heads=4,
                                                return_weights=True)
        want = registry.get("multi_head").apply(q, k, v, causal=causal, rng=4, num_heads=4, return_weights=True)
        np.testing.assert_allclose(got.output, want.output, **TIGHT)
        np.testing.assert_allclose(got.weights, want.weights, **TIGHT)
        given = registry.get("multi_query").apply(q, k, v, causal=causal, num_heads=4,
                                                  params=random_params(rng, 8, 4, d_k=3, d_v=2), return_draws=True)
        same = registry.get("multi_head").apply(q, k, v, causal=causal, num_heads=4, params=given.draws["params"])
        np.testing.assert_allclose(given.output, same.output, **TIGHT)


def test_init_with_g_equal_h_draws_init_multi_head():
    gqa, mha = init_multi_query(5, 8, 4, num_kv_heads=4), init_multi_head(5, 8, 4)
    for name in ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o"):
        np.testing.assert_array_equal(getattr(gqa, name), getattr(mha, name), err_msg=name)


# --- the grouping convention ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("h", "g"), [(4, 1), (4, 2), (6, 3), (6, 2)])
def test_query_head_i_reads_key_value_head_i_over_r_as_the_oracle(rng, h, g):
    """Each key/value head repeated for its r = h / g query heads (the oracle's repeat_over_groups, i.e.
    repeat_interleave), then ordinary multi-head arithmetic: the same output and weights."""
    params = random_gqa_params(rng, D_MODEL, h, g, d_k=3, d_v=2)
    x_q, x_kv = _x(rng, 5), _x(rng, 7)
    Q = project_heads(x_q, params.w_q, params.b_q, h)                              # (h, n, d_k)
    K = repeat_over_groups(project_heads(x_kv, params.w_k, params.b_k, g), h // g)  # (h, m, d_k)
    V = repeat_over_groups(project_heads(x_kv, params.w_v, params.b_v, g), h // g)  # (h, m, d_v)
    heads, A = scaled_dot_product_attention(Q, K, V, causal="bottom-right", return_weights=True)
    out, weights = multi_query_attention(x_q, x_kv, params, num_heads=h, causal="bottom-right", return_weights=True)
    np.testing.assert_allclose(out, combine_heads(heads, params.w_o, params.b_o), **TIGHT)
    np.testing.assert_allclose(weights, A, **TIGHT)


def test_changing_one_key_value_head_changes_only_its_query_group(rng):
    """h = 6, g = 3: key/value head 1 serves query heads 2 and 3 (i // 2 = 1), and no other."""
    params = random_gqa_params(rng, D_MODEL, 6, 3, d_k=2, d_v=2)
    x = _x(rng, 5)
    w_k = params.w_k.copy()
    w_k[:, 2:4] = rng.standard_normal((D_MODEL, 2))                 # key head 1's columns
    moved = MultiQueryParams(params.w_q, w_k, params.w_v, params.w_o, params.b_q, params.b_k, params.b_v, params.b_o)
    before = multi_query_attention(x, x, params, num_heads=6, return_weights=True)[1]
    after = multi_query_attention(x, x, moved, num_heads=6, return_weights=True)[1]
    changed = [i for i in range(6) if not np.array_equal(before[i], after[i])]
    assert changed == [2, 3]


def test_multi_query_heads_share_one_key_and_value_set(rng):
    """g = 1: every head's value mixture is of the same values, so two heads with equal query projections agree."""
    params = random_gqa_params(rng, D_MODEL, 3, 1, d_k=2, d_v=2)
    w_q = params.w_q.copy()
    w_q[:, 4:6], b_q = w_q[:, 0:2], params.b_q.copy()
    b_q[4:6] = b_q[0:2]
    twin = MultiQueryParams(w_q, params.w_k, params.w_v, params.w_o, b_q, params.b_k, params.b_v, params.b_o)
    x = _x(rng, 4)
    A = multi_query_attention(x, x, twin, num_heads=3, return_weights=True)[1]
    # Heads 0 and 2 have the same query columns at other places of one product x @ W_Q, which BLAS may sum in
    # another order there (an edge tile): the queries differ by ≤ 2·(D_MODEL + 1)·eps·(|x| @ |W_Q| + |b_Q|), and
    # with the scores' own 2 terms a score by ≤ Δs = 2·(D_MODEL + 3)·eps·scale·Σ_l (|x| @ |W_Q| + |b_Q|)_il |k_jl|
    # (first order). A weight then moves by ≤ 2·Δs of itself, and the softmax's rounding of two different
    # scores (exp, the 4-term sum, the division) adds ≤ 2·6·eps.
    eps = np.finfo(np.float64).eps
    q_size = np.abs(x) @ np.abs(w_q[:, 0:2]) + np.abs(b_q[0:2])               # (4, 2)
    keys = np.abs(x @ params.w_k + params.b_k)                                 # (4, 2)  the one shared key set
    ds = 2 * (D_MODEL + 3) * eps * (q_size @ keys.T).max() / np.sqrt(2)
    np.testing.assert_allclose(A[2], A[0], rtol=0, atol=2 * ds + 12 * eps)
    assert not np.allclose(A[1], A[0], rtol=1e-3, atol=1e-3)


def test_natural_function_equals_the_naive_loop_over_batch_and_mask(rng):
    params = random_gqa_params(rng, D_MODEL, 4, 2, d_k=3, d_v=2)
    x_q, x_kv, x_v = _x(rng, 2, 5), _x(rng, 2, 7), _x(rng, 2, 7)
    mask = rng.random((2, 5, 7)) < 0.7
    out = multi_query_attention(x_q, x_kv, params, num_heads=4, x_v=x_v, mask=mask, causal=True)
    for b in range(2):
        np.testing.assert_allclose(out[b], naive_multi_query(x_q[b], x_kv[b], x_v[b], True, params, num_heads=4,
                                                             mask=mask[b]), **TIGHT)


def test_method_none_is_the_deprecated_spelling_of_auto(rng):
    params = init_multi_query(rng, D_MODEL, num_heads=2, num_kv_heads=1)
    x = _x(rng, 5)
    with pytest.warns(DeprecationWarning, match='multi_query_attention: method=None is method="auto"'):
        old = multi_query_attention(x, x, params, num_heads=2, method=None)
    np.testing.assert_array_equal(old, multi_query_attention(x, x, params, num_heads=2, method="auto"))


def test_the_function_draws_its_params_as_the_registry_does(rng):
    x = _x(rng, 5)
    result = registry.get("multi_query").apply(x, x, x, rng=3, num_heads=2, num_kv_heads=1, return_draws=True)
    np.testing.assert_array_equal(multi_query_attention(x, x, num_heads=2, num_kv_heads=1, rng=3), result.output)
    np.testing.assert_array_equal(multi_query_attention(x, x, result.draws["params"], num_heads=2), result.output)
    with pytest.raises(ValueError, match=r"^multi_query draws its parameters from rng: pass rng= \(or params=\)$"):
        multi_query_attention(x, x, num_heads=2)


def test_blocked_method_agrees_with_the_equation_path(rng):
    params = random_gqa_params(rng, D_MODEL, 4, 2, d_k=3, d_v=2)
    x = _x(rng, 2, 9)
    for causal in (False, True):
        np.testing.assert_allclose(multi_query_attention(x, x, params, num_heads=4, causal=causal, method="blocked"),
                                   multi_query_attention(x, x, params, num_heads=4, causal=causal, method="equation"),
                                   rtol=1e-13, atol=1e-13)


# --- decoding with a key/value cache ----------------------------------------------------------------------

@pytest.mark.parametrize("chunks", [(1,) * 7, (3, 1, 2, 1)])
def test_decoding_with_the_cache_reproduces_the_full_causal_result(rng, chunks):
    params = random_gqa_params(rng, D_MODEL, 4, 2, d_k=3, d_v=5)
    x = _x(rng, 2, sum(chunks))
    full, A = multi_query_attention(x, x, params, num_heads=4, causal=True, return_weights=True)
    cache, start = None, 0
    for t in chunks:
        out, cache, weights = multi_query_step(x[:, start:start + t], params, cache, num_heads=4, return_weights=True)
        np.testing.assert_allclose(out, full[:, start:start + t], **TIGHT)
        np.testing.assert_allclose(weights, A[..., start:start + t, :start + t], **TIGHT)
        start += t
        assert cache.k.shape == (2, 2, start, 3) and cache.v.shape == (2, 2, start, 5)   # g heads, not h
        assert cache.num_tokens == start


def test_cache_holds_the_keys_and_values_of_the_g_heads(rng):
    params = random_gqa_params(rng, D_MODEL, 4, 1, d_k=3, d_v=2)
    x = _x(rng, 5)
    cache = None
    for t in range(5):
        cache = multi_query_step(x[t:t + 1], params, cache, num_heads=4)[1]
    np.testing.assert_allclose(cache.k[0], x @ params.w_k + params.b_k, **TIGHT)
    np.testing.assert_allclose(cache.v[0], x @ params.w_v + params.b_v, **TIGHT)
    assert cache.nbytes == kv_cache_bytes(1, 3, np.float64, num_tokens=5, d_v=2) == 5 * (3 + 2) * 8


def test_cache_of_the_wrong_shape_or_type_is_refused(rng):
    params = random_gqa_params(rng, D_MODEL, 4, 2, d_k=3, d_v=2)
    cache = KVCache(np.zeros((1, 3, 3)), np.zeros((1, 3, 2)))       # one head where params have two
    with pytest.raises(ValueError, match=r"cache holds k \(1, 3, 3\).*needs keys \(2, t, 3\)"):
        multi_query_step(_x(rng, 1), params, cache, num_heads=4)
    with pytest.raises(TypeError, match="cache must be a KVCache"):
        multi_query_step(_x(rng, 1), params, (np.zeros((2, 0, 3)), np.zeros((2, 0, 2))), num_heads=4)


# --- the cache's size -------------------------------------------------------------------------------------

def test_kv_cache_bytes_hand_computed():
    # Llama-2-7B: h = g = 32, d_head = 128, 32 layers, float16: 2·32·128·2·32 = 524288 B = 0.5 MiB per token.
    assert kv_cache_bytes(32, 128, "float16", num_layers=32) == 524288
    # Llama-2-70B: g = 8 key/value heads of 128, 80 layers, 2 bytes (bfloat16): 2·8·128·2·80 = 327680 B per token.
    assert kv_cache_bytes(8, 128, 2, num_layers=80) == 327680
    # 3 sequences of 10 tokens, 2 layers, g = 2, d_k = 4, d_v = 6, float32: 3·2·10·2·(4 + 6)·4.
    assert kv_cache_bytes(2, 4, np.float32, num_tokens=10, num_layers=2, batch_size=3, d_v=6) == 4800


def test_kv_cache_bytes_scales_with_g_and_not_h():
    mha, gqa, mqa = (kv_cache_bytes(g, 64, "float16", num_tokens=1000) for g in (16, 4, 1))
    assert mha == 4 * gqa == 16 * mqa == 2 * 16 * 64 * 2 * 1000


@pytest.mark.parametrize(("args", "error", "match"), [
    ((0, 64, "float16"), ValueError, "num_kv_heads"),
    ((2, 64, "float16", {"num_tokens": -1}), ValueError, "num_tokens"),
    ((2, 64, "no such type"), TypeError, "dtype"),
    ((2, 64, 0), ValueError, "dtype"),
])
def test_kv_cache_bytes_bad_input(args, error, match):
    *positional, options = args if isinstance(args[-1], dict) else (*args, {})
    with pytest.raises(error, match=match):
        kv_cache_bytes(*positional, **options)


def test_kv_cache_summary_compares_the_three_layouts():
    lines = kv_cache_summary(32, 8, 128, "float16", num_tokens=4096, num_layers=32).splitlines()
    assert lines[0] == ("key/value cache, h = 32, d_head = 128, 2 bytes per number, 4096 tokens, 32 layers, "
                        "batch 1:")
    assert [line.split()[0] for line in lines[1:]] == ["multi-head", "grouped-query", "multi-query"]
    # 2·32·128·2 = 16 KiB per token per layer, × 4096 × 32 = 2 GiB; g = 8: a quarter; g = 1: 1/32.
    assert "16 KiB per token per layer" in lines[1] and "2 GiB in all" in lines[1]
    assert "512 MiB in all (4× less)" in lines[2] and "64 MiB in all (32× less)" in lines[3]
    with pytest.raises(ValueError, match="num_kv_heads=3 does not divide num_heads=32"):
        kv_cache_summary(32, 3, 128, "float16", num_tokens=1)


# --- uptraining: a multi-head checkpoint pooled into g key/value heads --------------------------------

def test_conversion_mean_pools_each_group_of_key_and_value_heads(rng):
    params = random_params(rng, D_MODEL, 6, d_k=2, d_v=3)
    gqa = convert_multi_head(params, num_heads=6, num_kv_heads=2)   # groups {0, 1, 2} and {3, 4, 5}
    for j in range(2):
        heads = range(3 * j, 3 * j + 3)
        np.testing.assert_allclose(gqa.w_k[:, 2 * j:2 * j + 2], sum(params.w_k[:, 2 * i:2 * i + 2] for i in heads) / 3,
                                   **TIGHT)
        np.testing.assert_allclose(gqa.w_v[:, 3 * j:3 * j + 3], sum(params.w_v[:, 3 * i:3 * i + 3] for i in heads) / 3,
                                   **TIGHT)
        np.testing.assert_allclose(gqa.b_k[2 * j:2 * j + 2], sum(params.b_k[2 * i:2 * i + 2] for i in heads) / 3,
                                   **TIGHT)
        np.testing.assert_allclose(gqa.b_v[3 * j:3 * j + 3], sum(params.b_v[3 * i:3 * i + 3] for i in heads) / 3,
                                   **TIGHT)
    for name in ("w_q", "w_o", "b_q", "b_o"):
        assert getattr(gqa, name) is getattr(params, name), name
    first = convert_multi_head(params, num_heads=6, num_kv_heads=2, pooling="first")
    np.testing.assert_array_equal(first.w_k, np.concatenate([params.w_k[:, 0:2], params.w_k[:, 6:8]], axis=1))
    np.testing.assert_array_equal(first.b_v, np.concatenate([params.b_v[0:3], params.b_v[9:12]]))


def test_conversion_is_lossless_when_the_heads_of_a_group_already_agree(rng):
    """Key/value heads equal within each group: the pooled layer is the multi-head layer itself."""
    base = random_params(rng, D_MODEL, 2, d_k=2, d_v=3)
    spread = lambda w: np.repeat(w.reshape(*w.shape[:-1], 2, -1), 2, axis=-2).reshape(*w.shape[:-1], -1)  # noqa: E731
    params = MultiHeadParams(random_params(rng, D_MODEL, 4, d_k=2, d_v=3).w_q, spread(base.w_k), spread(base.w_v),
                             random_params(rng, D_MODEL, 4, d_k=2, d_v=3).w_o, rng.standard_normal(8),
                             spread(base.b_k), spread(base.b_v), rng.standard_normal(D_MODEL))
    x = _x(rng, 6)
    gqa = convert_multi_head(params, num_heads=4, num_kv_heads=2)
    np.testing.assert_allclose(multi_query_attention(x, x, gqa, num_heads=4, causal=True),
                               multi_head_attention(x, x, params, num_heads=4, causal=True), **TIGHT)


def test_conversion_bad_input(rng):
    params = random_params(rng, D_MODEL, 4, d_k=2)
    with pytest.raises(ValueError, match="num_kv_heads=3 does not divide num_heads=4"):
        convert_multi_head(params, num_heads=4, num_kv_heads=3)
    with pytest.raises(ValueError, match="pooling"):
        convert_multi_head(params, num_heads=4, num_kv_heads=2, pooling="max")
    with pytest.raises(ValueError, match="num_heads=3 does not divide the key width 8"):
        convert_multi_head(params, num_heads=3, num_kv_heads=1)
    with pytest.raises(TypeError, match="params must be MultiHeadParams"):
        convert_multi_head(random_gqa_params(rng, D_MODEL, 4, 2, 2, 2), num_heads=4, num_kv_heads=2)


# --- bad input --------------------------------------------------------------------------------------------

def test_params_shapes_are_checked():
    w = np.zeros((4, 4))
    with pytest.raises(ValueError, match=r"w_k has shape \(3, 2\); expected 4 rows"):
        MultiQueryParams(w, np.zeros((3, 2)), np.zeros((4, 2)), w)
    with pytest.raises(ValueError, match="another ratio h / g"):
        MultiQueryParams(w, np.zeros((4, 2)), np.zeros((4, 4)), w)
    with pytest.raises(ValueError, match=r"b_k has shape \(4,\); expected \(2,\)"):
        MultiQueryParams(w, np.zeros((4, 2)), np.zeros((4, 2)), w, b_k=np.zeros(4))
    with pytest.raises(ValueError, match="w_o must be a 2-D matrix"):
        MultiQueryParams(w, w, w, np.zeros(4))


def test_head_counts_that_do_not_fit_are_refused(rng):
    params = random_gqa_params(rng, D_MODEL, 4, 2, d_k=3, d_v=2)   # w_q 12 columns, w_k 6
    x = _x(rng, 3)
    with pytest.raises(ValueError, match="num_heads=5 does not divide the query width h·d_k = 12"):
        multi_query_attention(x, x, params, num_heads=5)
    one_group = MultiQueryParams(np.ones((D_MODEL, 12)), np.ones((D_MODEL, 3)), np.ones((D_MODEL, 2)),
                                 np.ones((8, D_MODEL)))             # h = 4: d_k = 3, g = 1; h = 2: d_k = 6
    with pytest.raises(ValueError, match=r"w_k has 3 columns .* d_k = 6"):
        multi_query_attention(x, x, one_group, num_heads=2)
    with pytest.raises(ValueError, match="num_heads=6 is not a multiple of the g = 4"):
        multi_query_attention(x, x, random_gqa_params(rng, D_MODEL, 6, 4, d_k=1, d_v=1), num_heads=6)
    with pytest.raises(TypeError, match="params must be MultiQueryParams"):
        multi_query_attention(x, x, {"w_q": params.w_q}, num_heads=4)
    with pytest.raises(ValueError, match=r"x_kv has d_model=5 \(shape \(3, 5\)\) but params have d_model=6"):
        multi_query_attention(x, x[:, :5], params, num_heads=4)
    with pytest.raises(ValueError, match="num_kv_heads=3 does not divide num_heads=4"):
        init_multi_query(0, 8, 4, num_kv_heads=3)


def test_apply_options_are_checked(rng):
    apply = registry.get("multi_query").apply
    q = rng.standard_normal((3, 4))
    params = random_gqa_params(rng, 4, 2, 1, d_k=2, d_v=2)
    with pytest.raises(ValueError, match="num_kv_heads=2 but params have g = 1"):
        apply(q, q, q, params=params, num_kv_heads=2)
    with pytest.raises(ValueError, match="'identity' \\(with num_heads=1\\)"):
        apply(q, q, q, params="identity")
    with pytest.raises(ValueError, match=r"^multi_query draws its parameters from rng: pass rng= \(or params=\)$"):
        apply(q, q, q)
    with pytest.raises(ValueError, match="x_q has width d_model = 0"):
        apply(np.zeros((3, 0)), np.zeros((3, 0)), q, rng=0)
