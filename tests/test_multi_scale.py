"""Multi-scale multi-head attention: the window of each head, each head against the sparse family's band pattern on
the same projections, the limit of wide scales against multi-head attention, the causal half, the layer × head table
of scales, bad input. The naive loop of tests/naive.py and the registry-driven tests cover the rest."""
from __future__ import annotations

import numpy as np
import pytest

from refattn import multi_head_attention, registry, scaled_dot_product_attention
from refattn.core.multi_head import project_heads
from refattn.heads import layer_windows, multi_scale_attention, multi_scale_mask
from refattn.sparse import band_pattern, sparse_attention

from .naive import random_params

TIGHT = {"rtol": 1e-12, "atol": 1e-12}


def test_mask_holds_the_keys_within_each_scale():
    """Row t of head i holds r with |t − r| <= ω_i: 2ω_i + 1 keys away from the ends; causal keeps r <= t."""
    windows = [0, 1, 3]
    M = multi_scale_mask(windows, 10)
    for i, w in enumerate(windows):
        np.testing.assert_array_equal(M[i].sum(axis=-1)[w:10 - w], 2 * w + 1)
        for t in range(10):
            np.testing.assert_array_equal(np.flatnonzero(M[i, t]), np.arange(max(0, t - w), min(10, t + w + 1)))
    C = multi_scale_mask(windows, 10, causal=True)
    np.testing.assert_array_equal(C, M & np.tril(np.ones((10, 10), dtype=bool)))
    B = multi_scale_mask(windows, 3, 8, causal="bottom-right")     # queries at positions 5, 6, 7
    np.testing.assert_array_equal(B, multi_scale_mask(windows, 8, causal=True)[:, 5:])


def test_each_head_is_band_attention_on_its_projections(rng):
    """Head i equals the sparse family's band pattern of width ω_i on Q W_iᵠ, K W_iᴷ, V W_iⱽ: its weights against the
    pattern's equation path, the layer's output against the heads of the CSR kernel, concatenated and projected."""
    params = random_params(rng, 8, 3, d_k=3, d_v=2)
    x = rng.standard_normal((9, 8))
    windows = [0, 2, 4]
    out, A = multi_scale_attention(x, x, params, num_heads=3, windows=windows, return_weights=True)
    Q, K, V = (project_heads(x, w, b, 3) for w, b in ((params.w_q, params.b_q), (params.w_k, params.b_k),
                                                       (params.w_v, params.b_v)))
    heads = []
    for i, w in enumerate(windows):
        _, A_band = sparse_attention(Q[i], K[i], V[i], band_pattern(9, w), method="equation", return_weights=True)
        np.testing.assert_allclose(A[i], A_band, **TIGHT)
        heads.append(sparse_attention(Q[i], K[i], V[i], band_pattern(9, w), method="csr"))
    np.testing.assert_allclose(out, np.concatenate(heads, axis=-1) @ params.w_o + params.b_o, **TIGHT)


@pytest.mark.parametrize(("causal", "n", "m"), [(False, 6, 6), (False, 5, 8), (True, 7, 7), ("bottom-right", 4, 7)])
def test_scales_covering_the_sequence_are_multi_head(rng, causal, n, m):
    """Every ω_i >= max(n, m) − 1: every head sees every key (its causal half when causal): multi-head attention with
    the same parameters."""
    params = random_params(rng, 8, 2, d_k=3, d_v=2)
    x_q, x_kv, x_v = rng.standard_normal((n, 8)), rng.standard_normal((m, 8)), rng.standard_normal((m, 8))
    out, A = multi_scale_attention(x_q, x_kv, params, num_heads=2, windows=[max(n, m) - 1, 50], causal=causal,
                                   x_v=x_v, return_weights=True)
    ref, A_ref = multi_head_attention(x_q, x_kv, params, num_heads=2, x_v=x_v, causal=causal, return_weights=True)
    np.testing.assert_allclose(out, ref, **TIGHT)
    np.testing.assert_allclose(A, A_ref, **TIGHT)


def test_a_scale_one_short_of_the_sequence_is_not_multi_head(rng):
    """ω = n − 2 hides the far corner pair from its head: the limit above is tight."""
    params = random_params(rng, 8, 1, d_k=3, d_v=2)
    x = rng.standard_normal((6, 8))
    out, A = multi_scale_attention(x, x, params, num_heads=1, windows=[4], return_weights=True)
    assert A[0, 0, 5] == 0.0 and A[0, 5, 0] == 0.0
    assert np.abs(out - multi_head_attention(x, x, params, num_heads=1)).max() > 1e-6


def test_batched_heads_equal_single_calls(rng):
    params = random_params(rng, 8, 2, d_k=3, d_v=2)
    x = rng.standard_normal((3, 7, 8))
    out = multi_scale_attention(x, x, params, num_heads=2, windows=[1, 3], causal=True)
    for b in range(3):
        np.testing.assert_allclose(out[b], multi_scale_attention(x[b], x[b], params, num_heads=2, windows=[1, 3],
                                                                 causal=True), **TIGHT)


def test_layer_windows_grow_with_depth_and_mix_scales_in_every_layer():
    scales = [16, 1, 4, 2, 32, 8, 64]
    table = layer_windows(4, 5, scales)
    assert table.shape == (4, 5)
    assert table[0, 0] == 1 and table[-1, -1] == 64               # the smallest scale first, the largest last
    assert np.all(np.diff(table, axis=0) >= 0) and np.all(np.diff(table, axis=1) >= 0)
    assert all(len(set(row)) >= 3 for row in table.tolist())      # each layer mixes scales (a run of 4 of the 7)
    assert set(table.ravel()) <= set(scales)
    np.testing.assert_array_equal(layer_windows(1, 1, [3, 1]), [[1]])
    np.testing.assert_array_equal(layer_windows(2, 1, [1, 2, 4, 8]), [[1], [4]])


@pytest.mark.parametrize(("windows", "match"), [([-1, 2], ">= 0"), ([1.5, 2], "integer"), ([1, 2, 3], "num_heads"),
                                                ([], "integer"), ([[1, 2]], "integer")])
def test_bad_windows_are_refused(rng, windows, match):
    params = random_params(rng, 8, 2, d_k=3, d_v=2)
    x = rng.standard_normal((5, 8))
    with pytest.raises(ValueError, match=match):
        multi_scale_attention(x, x, params, num_heads=2, windows=windows)


def test_window_masks_beyond_the_memory_budget_are_refused_before_allocating():
    from refattn.common import MemoryBudgetError, temporary_memory_budget

    with temporary_memory_budget(2**20), pytest.raises(MemoryBudgetError, match="window masks"):
        multi_scale_mask([1, 2], 65536)                            # 2 × 65536² entries: far beyond 1 MiB


def test_the_function_draws_or_takes_identity_params_as_the_registry_does(rng):
    x, mem = rng.standard_normal((4, 8)), rng.standard_normal((6, 8))
    result = registry.get("multi_scale").apply(x, mem, mem, rng=7, num_heads=2, return_draws=True)
    np.testing.assert_array_equal(multi_scale_attention(x, mem, num_heads=2, rng=7), result.output)
    np.testing.assert_array_equal(multi_scale_attention(x, mem, result.draws["params"], num_heads=2,
                                                        windows=[1, 3]), result.output)   # ω_i = 2i + 1
    np.testing.assert_allclose(multi_scale_attention(x, mem, "identity", num_heads=1, windows=[6]),
                               scaled_dot_product_attention(x, mem, mem), **TIGHT)
    with pytest.raises(ValueError, match=r"^multi_scale draws its parameters from rng: pass rng= \(or params=\)$"):
        multi_scale_attention(x, mem, num_heads=2)
    with pytest.raises(ValueError, match="'identity' \\(with num_heads=1\\)"):
        multi_scale_attention(x, mem, "identity", num_heads=2)
