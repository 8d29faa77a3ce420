"""Long-Short attention: its window against hand-written patterns, the exact limit, the token-mixing matrix, the
causal segment-wise projection, DualLN, the official initialisation, and bad input."""
from __future__ import annotations

import numpy as np
import pytest

from refattn import LayerNormParams, registry, scaled_dot_product_attention
from refattn.beyond import LongShortParams, init_long_short, long_short_attention, long_short_window_pattern
from refattn.sparse import band_pattern

TIGHT = {"rtol": 1e-12, "atol": 1e-12}


def _qkv(seed, n=9, m=11, d=4, d_v=4, batch=()):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((*batch, n, d)), rng.standard_normal((*batch, m, d)),
            rng.standard_normal((*batch, m, d_v)))


def _params(seed, d=4, rank=2):
    """W^P of unit entries (P far from uniform) and layer norms away from γ = 1, β = 0."""
    rng = np.random.default_rng(seed)
    return LongShortParams(rng.standard_normal((d, rank)),
                           LayerNormParams(1 + 0.3 * rng.standard_normal(d), 0.3 * rng.standard_normal(d)),
                           LayerNormParams(1 + 0.3 * rng.standard_normal(d), 0.3 * rng.standard_normal(d)))


def test_bidirectional_window_is_the_segment_and_its_padding():
    # w = 4: segments {0..3}, {4..7}, {8, 9}; e = 2 keys each side. Written out by hand.
    rows = [(0, 6)] * 4 + [(2, 10)] * 4 + [(6, 10)] * 2
    expected = np.array([[lo <= j < hi for j in range(10)] for lo, hi in rows])
    np.testing.assert_array_equal(long_short_window_pattern(10, 4).to_mask(), expected)


def test_window_of_one_still_pads_one_key_each_side():
    # the official code's e = max(w // 2, 1): w = 1 sees i − 1, i, i + 1
    np.testing.assert_array_equal(long_short_window_pattern(5, 1).to_mask(), band_pattern(5, 1).to_mask())


@pytest.mark.parametrize("causal", [True, "bottom-right"])
def test_causal_window_is_the_last_w_keys(causal):
    # causal: j ∈ (p − w, p], the band of the w − 1 keys before the query and itself
    for n, m in ((6, 6), (4, 9), (9, 5)) if causal == "bottom-right" else ((6, 6),):
        np.testing.assert_array_equal(long_short_window_pattern(n, 3, m=m, causal=causal).to_mask(),
                                      band_pattern(n, 2, m=m, causal=causal).to_mask())


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("n", "m"), [(9, 11), (11, 11), (12, 7)])
def test_window_covering_everything_without_projection_or_norm_is_softmax(causal, n, m):
    if causal is True and n != m:
        return
    q, k, v = _qkv(1, n, m)
    got = long_short_attention(q, k, v, window=max(n, m), rank=0, rng=0, dual_ln="none", causal=causal)
    np.testing.assert_allclose(got, scaled_dot_product_attention(q, k, v, causal=causal), **TIGHT)


@pytest.mark.parametrize("causal", [False, True, "bottom-right"])
@pytest.mark.parametrize("dual_ln", ["keys", "none"])
def test_output_is_the_mixing_matrix_times_the_values(causal, dual_ln):
    n = 9 if causal is not True else 11
    q, k, v = _qkv(2, n, 11, d_v=3, batch=(2,))
    out, W = long_short_attention(q, k, v, window=3, segment=3, params=_params(3), dual_ln=dual_ln, causal=causal,
                                  return_weights=True)
    np.testing.assert_allclose(out, W @ v, **TIGHT)
    assert np.all(W >= 0)
    rows = W.sum(axis=-1)
    np.testing.assert_allclose(rows[rows != 0], 1.0, rtol=0, atol=1e-14)


def test_mixing_matrix_is_window_part_plus_projection_part():
    # bidirectional, no layer norm: W = A_short + A_long Pᵀ with one softmax over [q K̄ᵀ, q K̃ᵀ] (K̄ = Pᵀ K)
    q, k, v = _qkv(4, 8, 8)
    params = _params(5, rank=3)
    _, W = long_short_attention(q, k, v, window=2, params=params, dual_ln="none", return_weights=True)
    logits = k @ params.w_proj
    P = np.exp(logits - logits.max(axis=0)) / np.exp(logits - logits.max(axis=0)).sum(axis=0)   # (m, r)
    scores = np.concatenate([q @ (P.T @ k).T, q @ k.T], axis=1) / 2.0                          # 1/√d = 1/2
    allowed = np.concatenate([np.ones((8, 3), bool), long_short_window_pattern(8, 2).to_mask()], axis=1)
    A = np.where(allowed, np.exp(scores - scores.max(axis=1, keepdims=True)), 0.0)
    A /= A.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(W, A[:, 3:] + A[:, :3] @ P.T, **TIGHT)


def test_causal_rows_see_only_projections_of_earlier_segments():
    # l = 3, m = 11: three complete segments {0..2}, {3..5}, {6..8}; tokens 9, 10 are a tail never projected.
    q, k, v = _qkv(6, 11, 11)
    _, W = long_short_attention(q, k, v, window=1, segment=3, params=_params(7), dual_ln="none", causal=True,
                                return_weights=True)
    for i in range(11):
        covered = 3 * min(i // 3, 3)                               # keys of the segments s < ⌊i / 3⌋
        seen = set(range(covered)) | {i}                           # plus the window of w = 1: itself
        assert set(np.flatnonzero(W[i])) <= seen, i
        assert np.all(W[i, :covered] > 0), i                       # every key of a seen segment has weight


def test_causal_output_ignores_later_tokens_and_decoding_reproduces_it():
    q, k, v = _qkv(8, 10, 10)
    params = _params(9)
    options = {"window": 2, "segment": 3, "params": params, "causal": True}
    full = long_short_attention(q, k, v, **options)
    k2, v2 = k.copy(), v.copy()
    k2[6:], v2[6:] = 100.0, -100.0                                 # change everything after position 5
    np.testing.assert_array_equal(long_short_attention(q, k2, v2, **options)[:6], full[:6])
    for t in range(1, 11):                                         # one new query at a time, the cache holds t keys
        step = long_short_attention(q[t - 1:t], k[:t], v[:t], **(options | {"causal": "bottom-right"}))
        np.testing.assert_allclose(step, full[t - 1:t], **TIGHT)


def test_bidirectional_projection_mixes_every_key():
    # every query sees the projected keys, which read every key: changing the last key changes the first row
    q, k, v = _qkv(10, 8, 8)
    options = {"window": 2, "params": _params(11)}
    before = long_short_attention(q, k, v, **options)
    k[-1] += 1.0
    assert np.abs(long_short_attention(q, k, v, **options)[0] - before[0]).max() > 1e-6


def test_dual_ln_makes_the_output_blind_to_the_scale_of_keys_and_values():
    # LN(c x) = (x − μ)/√(σ² + ε/c²): at c = 10³ and 10⁴ both are LN(x) with ε/c² ≤ 1e-11, so the two outputs
    # differ by O(1e-11/σ²) relative; the rows here have σ² > 0.005 (asserted), hence the 1e-8 bound.
    q, k, v = _qkv(12, 8, 8)
    params = _params(13)
    assert min(k.var(axis=-1).min(), v.var(axis=-1).min()) > 0.005
    options = {"window": 2, "params": params, "projection_input": "normalized"}
    thousand = long_short_attention(q, 1e3 * k, 1e3 * v, **options)
    np.testing.assert_allclose(long_short_attention(q, 1e4 * k, 1e4 * v, **options), thousand, rtol=0, atol=1e-8)
    plain = long_short_attention(q, 1e3 * k, 1e3 * v, window=2, params=params, dual_ln="none")
    assert np.abs(plain - thousand).max() > 1.0                    # without the norms the scale matters


def test_branches_use_separate_layer_norms():
    # changing only LN_G's bias moves the output; with r = 0 (no long branch) it does not
    q, k, v = _qkv(14, 8, 8)
    params = _params(15)
    shifted = LongShortParams(params.w_proj, params.ln_short,
                              LayerNormParams(params.ln_long.gamma, params.ln_long.beta + 1.0))
    a = long_short_attention(q, k, v, window=2, params=params)
    b = long_short_attention(q, k, v, window=2, params=shifted)
    assert np.abs(a - b).max() > 1e-3
    no_long = LongShortParams(np.zeros((4, 0)), params.ln_short, params.ln_long)
    no_long_shifted = LongShortParams(np.zeros((4, 0)), params.ln_short, shifted.ln_long)
    np.testing.assert_array_equal(long_short_attention(q, k, v, window=2, params=no_long),
                                  long_short_attention(q, k, v, window=2, params=no_long_shifted))


def test_projection_input_differs_only_through_the_window_norm():
    q, k, v = _qkv(16, 8, 8)
    params = _params(17)
    raw = long_short_attention(q, k, v, window=2, params=params, dual_ln="none")
    normalized = long_short_attention(q, k, v, window=2, params=params, dual_ln="none", projection_input="normalized")
    np.testing.assert_array_equal(raw, normalized)                # nothing normalised: the same keys are projected
    assert np.abs(long_short_attention(q, k, v, window=2, params=params)
                  - long_short_attention(q, k, v, window=2, params=params, projection_input="normalized")).max() > 1e-6


def test_official_initialisation():
    params = init_long_short(np.random.default_rng(0), 64, 32)
    assert params.w_proj.shape == (64, 32)
    # N(0, 0.02²) over 2048 entries: the sample std is within 5 % of 0.02 (its relative sd is 1/√(2·2048) ≈ 1.6 %)
    np.testing.assert_allclose(params.w_proj.std(), 0.02, rtol=0.05)
    for ln in (params.ln_short, params.ln_long):
        np.testing.assert_array_equal(ln.gamma, 1.0)
        np.testing.assert_array_equal(ln.beta, 0.0)


def test_paper_dual_ln_has_no_mixing_matrix_and_needs_equal_widths():
    q, k, v = _qkv(18, 6, 6)
    with pytest.raises(ValueError, match="return_weights"):
        long_short_attention(q, k, v, window=2, rank=1, rng=0, return_weights=True)
    with pytest.raises(ValueError, match="d_v"):
        long_short_attention(q, k, v[..., :3], window=2, rank=1, rng=0)


def test_bad_input_is_named():
    q, k, v = _qkv(19, 6, 6)
    with pytest.raises(ValueError, match=r"long_short draws its parameters from rng: pass rng= \(or params=\)"):
        long_short_attention(q, k, v, window=2, rank=1)
    with pytest.raises(ValueError, match="window"):
        long_short_attention(q, k, v, window=0, rank=1, rng=0)
    with pytest.raises(ValueError, match="segment"):
        long_short_attention(q, k, v, window=2, segment=0, rank=1, rng=0, causal=True)
    with pytest.raises(ValueError, match="dual_ln"):
        long_short_attention(q, k, v, window=2, rank=1, rng=0, dual_ln="both")
    with pytest.raises(ValueError, match="w_proj"):
        long_short_attention(q, k, v, window=2, params=_params(0, d=3))
    with pytest.raises(TypeError, match="params"):
        long_short_attention(q, k, v, window=2, params=np.eye(4))
    with pytest.raises(ValueError, match="ln_long"):
        LongShortParams(np.zeros((4, 2)), LayerNormParams(np.ones(4), np.zeros(4)),
                        LayerNormParams(np.ones(3), np.zeros(3)))
    with pytest.raises(ValueError, match="d_k"):
        long_short_attention(q[..., :0], k[..., :0], v, window=2, rank=1, rng=0)


def test_edge_sizes():
    q, k, v = _qkv(20, 5, 0)
    out, W = long_short_attention(q, k, v, window=2, rank=2, rng=0, dual_ln="keys", return_weights=True)
    np.testing.assert_array_equal(out, 0.0)
    assert out.shape == (5, 4) and W.shape == (5, 0)
    q, k, v = _qkv(21, 0, 6)
    assert long_short_attention(q, k, v, window=2, rank=2, rng=0, causal=True).shape == (0, 4)
    q, k, v = _qkv(22, 5, 6, batch=(0,))
    assert long_short_attention(q, k, v, window=2, rank=2, rng=0).shape == (0, 5, 4)
    q, k, v = _qkv(23, 5, 6)                                       # d_k = 0 with a scale: uniform over what is seen
    out = long_short_attention(q[:, :0], k[:, :0], v, window=6, rank=0, rng=0, dual_ln="keys", scale=1.0)
    np.testing.assert_allclose(out, np.broadcast_to(v.mean(axis=0), (5, 4)), **TIGHT)


def test_drawn_params_have_rank_one_unless_told():
    q, k, v = _qkv(19, 6, 6)
    np.testing.assert_array_equal(long_short_attention(q, k, v, window=2, rng=0),
                                  long_short_attention(q, k, v, window=2, rng=0, rank=1))
    assert registry.get("long_short").apply(q, k, v, rng=0, return_draws=True).draws["params"].rank == 1
