"""Memory-compressed attention and T-DMCA's local attention: the convolution and its matrix, hand-computed cases,
the exact limits, the effective matrix, the causal form (what each query sees, the future, decoding), the official
code's memory, the draw, edge sizes, memory, and bad input. The naive loop of tests/naive.py and the registry-driven
tests cover the rest."""
from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest

from refattn import registry, scaled_dot_product_attention
from refattn.common import temporary_memory_budget
from refattn.compressed import (
    MemoryCompression,
    blockwise_local_attention,
    compress_memory,
    compression_matrix,
    init_memory_compression,
    memory_compressed_attention,
)
from refattn.sparse import block_local_pattern

TIGHT = {"rtol": 1e-12, "atol": 1e-12}
LN3 = math.log(3.0)
MCA = registry.get("mca")


def _qkv(rng, n=7, m=7, d=4, d_v=3, batch=()):
    return (rng.standard_normal((*batch, n, d)), rng.standard_normal((*batch, m, d)),
            rng.standard_normal((*batch, m, d_v)))


def _shared(rng, c):
    return MemoryCompression(rng.standard_normal(c), rng.standard_normal(c))


# --- the convolution ---------------------------------------------------------------------------------

def test_full_taps_by_hand():
    """c = 2, d = 2: K̃_0 = k_0 W_0 + k_1 W_1 with W_0 = I and W_1 swapping the channels."""
    x = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    kernel = np.stack([np.eye(2), [[0.0, 1.0], [1.0, 0.0]]])
    np.testing.assert_array_equal(compress_memory(x, kernel), [[1.0 + 4.0, 2.0 + 3.0]])
    np.testing.assert_array_equal(compress_memory(x, kernel, remainder="pad"), [[0.0 + 2.0, 0.0 + 1.0],
                                                                                [3.0 + 6.0, 4.0 + 5.0]])


@pytest.mark.parametrize("remainder", ["drop", "pad"])
@pytest.mark.parametrize(("m", "c"), [(7, 3), (6, 3), (5, 1), (2, 4), (0, 2)])
def test_compression_matrix_is_the_convolution(rng, remainder, m, c):
    x, taps = rng.standard_normal((2, m, 3)), rng.standard_normal(c)
    C = compression_matrix(m, taps, remainder=remainder)
    M = m // c if remainder == "drop" else -(-m // c)
    assert C.shape == (M, m)
    np.testing.assert_allclose(C @ x, compress_memory(x, taps, remainder=remainder), **TIGHT)
    np.testing.assert_allclose(compress_memory(x, taps[:, None, None] * np.eye(3), remainder=remainder),
                               compress_memory(x, taps, remainder=remainder), **TIGHT)   # w_t·I is the scalar tap


def test_compression_matrix_by_hand():
    np.testing.assert_array_equal(compression_matrix(5, [1.0, 2.0], remainder="pad"),
                                  [[2, 0, 0, 0, 0], [0, 1, 2, 0, 0], [0, 0, 0, 1, 2]])


# --- hand-computed attention -------------------------------------------------------------------------

def _hand():
    """d = 1, scale 1, c = 2: k = (0, 0, ln 3, 0) sums to K̃ = (0, ln 3); v = (1, 3, 2, 6) halves to Ṽ = (2, 4)."""
    params = MemoryCompression(np.array([1.0, 1.0]), np.array([0.5, 0.5]))
    return np.ones((4, 1)), np.array([[0.0], [0.0], [LN3], [0.0]]), np.array([[1.0], [3.0], [2.0], [6.0]]), params


def test_hand_computed_non_causal():
    """P = softmax(0, ln 3) = (1/4, 3/4): out = 2/4 + 3·4/4 = 3.5, W = (1/8, 1/8, 3/8, 3/8)."""
    q, k, v, params = _hand()
    out, W = memory_compressed_attention(q, k, v, params=params, scale=1.0, return_weights=True)
    np.testing.assert_allclose(out, np.full((4, 1), 3.5), rtol=1e-15)
    np.testing.assert_allclose(W, np.tile([1 / 8, 1 / 8, 3 / 8, 3 / 8], (4, 1)), rtol=1e-15)


def test_hand_computed_causal_paper():
    """Block 0 ends at position 1, block 1 at 3: query 0 sees none (0), queries 1, 2 block 0 (Ṽ_0 = 2), query 3
    both (3.5)."""
    q, k, v, params = _hand()
    out, W = memory_compressed_attention(q, k, v, params=params, scale=1.0, causal=True, return_weights=True)
    np.testing.assert_allclose(out, [[0.0], [2.0], [2.0], [3.5]], rtol=1e-15)
    np.testing.assert_allclose(W, [[0, 0, 0, 0], [0.5, 0.5, 0, 0], [0.5, 0.5, 0, 0], [1 / 8, 1 / 8, 3 / 8, 3 / 8]],
                               rtol=1e-15)


def test_hand_computed_causal_tensor2tensor():
    """Memory (k_0, K̃_0, K̃_1): queries 0, 1 see the first token only (v_0 = 1); queries 2 and 3 also block 0,
    which ends at 1 < 2 (scores 0 and 0: (1 + 2)/2); block 1 ends at 3, not before query 3. Non-causal: scores
    (0, 0, ln 3), P = (1/5, 1/5, 3/5): 1/5 + 2/5 + 12/5 = 3."""
    q, k, v, params = _hand()
    out, W = memory_compressed_attention(q, k, v, params=params, scale=1.0, causal=True, memory="tensor2tensor",
                                         return_weights=True)
    np.testing.assert_allclose(out, [[1.0], [1.0], [1.5], [1.5]], rtol=1e-15)
    np.testing.assert_allclose(W, [[1, 0, 0, 0], [1, 0, 0, 0], [0.75, 0.25, 0, 0], [0.75, 0.25, 0, 0]], rtol=1e-15)
    out = memory_compressed_attention(q, k, v, params=params, scale=1.0, memory="tensor2tensor")
    np.testing.assert_allclose(out, np.full((4, 1), 3.0), rtol=1e-15)


# --- exact limits and the effective matrix -----------------------------------------------------------

@pytest.mark.parametrize("causal", [False, True, "bottom-right"])
@pytest.mark.parametrize("channels", ["shared", "full"])
def test_one_tap_identity_is_softmax_attention(rng, causal, channels):
    q, k, v = _qkv(rng, n=5, m=8, batch=(2,))
    params = MemoryCompression(np.ones(1), np.ones(1)) if channels == "shared" else \
        MemoryCompression(np.eye(4)[None], np.eye(3)[None])
    for remainder in ("drop", "pad"):
        out = memory_compressed_attention(q, k, v, params=params, causal=causal, remainder=remainder)
        np.testing.assert_allclose(out, scaled_dot_product_attention(q, k, v, causal=causal), **TIGHT)


def test_tensor2tensor_one_tap_is_not_softmax_attention(rng):
    """c = 1, the tap 1: the official memory holds the first token twice, and its mask hides the query's own token:
    causal row 0 is v_0, row i ≥ 1 softmax over (k_0, k_0, k_1 … k_{i−1})."""
    q, k, v = _qkv(rng)
    one = MemoryCompression(np.ones(1), np.ones(1))
    out = memory_compressed_attention(q, k, v, params=one, causal=True, memory="tensor2tensor")
    keys, values = np.concatenate([k[:1], k]), np.concatenate([v[:1], v])
    mask = np.arange(8) <= np.arange(7)[:, None]                   # memory items 0 … i: k_0, then blocks r < i
    np.testing.assert_allclose(out, scaled_dot_product_attention(q, keys, values, mask), **TIGHT)
    np.testing.assert_allclose(out[0], v[0], **TIGHT)


@pytest.mark.parametrize("options", [{}, {"memory": "tensor2tensor"}, {"remainder": "pad"},
                                     {"memory": "tensor2tensor", "remainder": "pad", "causal": True},
                                     {"causal": True}, {"causal": "bottom-right"}])
def test_output_is_the_effective_matrix_times_v(rng, options):
    q, k, v = _qkv(rng, n=6, m=11, batch=(2,))
    out, W = memory_compressed_attention(q, k, v, rng=3, channels="shared", return_weights=True, **options)
    assert W.shape == (2, 6, 11)
    np.testing.assert_allclose(W @ v, out, **TIGHT)


def test_rows_sum_to_the_value_taps_sum_and_mean_pooling_is_normalised(rng):
    q, k, v = _qkv(rng, n=5, m=9)
    params = _shared(rng, 3)
    W = memory_compressed_attention(q, k, v, params=params, return_weights=True)[1]
    np.testing.assert_allclose(W.sum(axis=-1), params.w_v.sum(), **TIGHT)
    mean = MemoryCompression(params.w_k, np.full(3, 1 / 3))
    W = memory_compressed_attention(q, k, v, params=mean, causal=True, return_weights=True)[1]
    rows = W.sum(axis=-1)
    np.testing.assert_allclose(rows[2:], 1.0, **TIGHT)             # rows 0, 1 see no block: 0
    np.testing.assert_array_equal(rows[:2], 0.0)
    assert np.all(W >= 0)


def test_full_taps_that_are_scalar_multiples_of_the_identity_are_shared_taps(rng):
    q, k, v = _qkv(rng, n=5, m=9)
    params = _shared(rng, 3)
    full = MemoryCompression(params.w_k[:, None, None] * np.eye(4), params.w_v[:, None, None] * np.eye(3))
    for causal in (False, True):
        np.testing.assert_allclose(memory_compressed_attention(q, k, v, params=full, causal=causal),
                                   memory_compressed_attention(q, k, v, params=params, causal=causal), **TIGHT)


def test_full_taps_have_no_effective_matrix(rng):
    q, k, v = _qkv(rng)
    with pytest.raises(ValueError, match="return_weights=True needs channels='shared'"):
        memory_compressed_attention(q, k, v, rng=0, return_weights=True)
    with pytest.raises(ValueError, match="return_weights=True needs channels='shared'"):
        MCA.apply(q, k, v, rng=0, channels="full", return_weights=True)


@pytest.mark.parametrize("method", ["blocked", "auto"])
@pytest.mark.parametrize("causal", [False, True, "bottom-right"])
def test_methods_agree(rng, method, causal):
    q, k, v = _qkv(rng, n=20, m=31, batch=(2,))
    for memory in ("paper", "tensor2tensor"):
        ref = memory_compressed_attention(q, k, v, rng=1, causal=causal, memory=memory, method="equation")
        np.testing.assert_allclose(memory_compressed_attention(q, k, v, rng=1, causal=causal, memory=memory,
                                                               method=method), ref, rtol=1e-13, atol=1e-13)


# --- the causal form ---------------------------------------------------------------------------------

@pytest.mark.parametrize("memory", ["paper", "tensor2tensor"])
@pytest.mark.parametrize("remainder", ["drop", "pad"])
@pytest.mark.parametrize("c", [2, 3])
def test_what_each_query_sees(rng, memory, remainder, c):
    """allowed[i, j]: token j's block (positions rc − p … rc + c − 1 − p) ends at or before i ("paper") or before i
    ("tensor2tensor", which also shows token 0 to every query); a dropped token is seen by none."""
    n = m = 8
    q, k, v = _qkv(rng, n, m)
    result = MCA.apply(q, k, v, causal=True, rng=0, factor=c, memory=memory, remainder=remainder, return_weights=True)
    pad = (-m) % c if remainder == "pad" else 0
    expected = np.zeros((n, m), dtype=bool)
    for i in range(n):
        for j in range(m):
            r = (j + pad) // c
            end = r * c + c - 1 - pad
            if end < m:
                expected[i, j] = end <= i if memory == "paper" else end < i
            expected[i, j] |= memory == "tensor2tensor" and j == 0
    np.testing.assert_array_equal(result.allowed, expected)
    np.testing.assert_array_equal(result.weights[~expected], 0.0)


@pytest.mark.parametrize("options", [{"memory": "tensor2tensor"}, {"remainder": "pad", "factor": 2},
                                     {"factor": 4, "channels": "full"}, {"mode": "local", "block": 3}])
def test_every_output_ignores_every_later_token(rng, options):
    """Row i is unchanged when the keys and values after position i change, for every i."""
    q, k, v = _qkv(rng, 9, 9)
    out = MCA.apply(q, k, v, causal=True, rng=2, **options).output
    for i in range(8):
        k2, v2 = k.copy(), v.copy()
        k2[i + 1:], v2[i + 1:] = rng.standard_normal(k[i + 1:].shape), rng.standard_normal(v[i + 1:].shape)
        np.testing.assert_array_equal(MCA.apply(q, k2, v2, causal=True, rng=2, **options).output[:i + 1],
                                      out[:i + 1])


@pytest.mark.parametrize("options", [{"memory": "tensor2tensor"}, {"remainder": "pad", "factor": 2},
                                     {"mode": "local", "block": 2}])
def test_decoding_with_a_cache_reproduces_the_causal_rows(rng, options):
    q, k, v = _qkv(rng, 9, 9)
    full = MCA.apply(q, k, v, causal=True, rng=5, **options).output
    for n in (1, 4, 11):
        new = np.concatenate([rng.standard_normal((max(n - 9, 0), 4)), q[-min(n, 9):]])
        last = MCA.apply(new, k, v, causal="bottom-right", rng=5, **options).output
        np.testing.assert_allclose(last[-min(n, 9):], full[-min(n, 9):], **TIGHT)
        np.testing.assert_array_equal(last[:max(n - 9, 0)], 0.0)


def test_causal_chunks_stay_within_the_memory_budget():
    """n = m = 3000, c = 3: the dense 3000 × 1000 scores take 23 MiB; with an 8 MiB budget the causal rows go by
    chunks, and the call's peak stays under 16 MiB beyond its inputs."""
    rng = np.random.default_rng(0)
    q, k, v = _qkv(rng, 3000, 3000, d=8, d_v=8)
    params = _shared(rng, 3)
    ref = memory_compressed_attention(q[-50:], k, v, params=params, causal="bottom-right")
    with temporary_memory_budget(8 * 2**20):
        tracemalloc.start()
        out = memory_compressed_attention(q, k, v, params=params, causal=True)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peak < 16 * 2**20, peak
    np.testing.assert_allclose(out[-50:], ref, **TIGHT)


# --- the local attention -----------------------------------------------------------------------------

@pytest.mark.parametrize("causal", [False, True, "bottom-right"])
@pytest.mark.parametrize("method", ["equation", "blocked", "auto"])
def test_local_attention_is_softmax_within_blocks(rng, causal, method):
    q, k, v = _qkv(rng, n=6, m=9)
    out, W = blockwise_local_attention(q, k, v, block=4, causal=causal, method=method, return_weights=True)
    mask = block_local_pattern(6, 4, m=9, causal=causal).to_mask()
    ref, A = scaled_dot_product_attention(q, k, v, mask, return_weights=True)
    np.testing.assert_allclose(out, ref, **TIGHT)
    np.testing.assert_allclose(W, A, **TIGHT)
    full = blockwise_local_attention(q, k, v, block=9, causal=causal, method=method)
    np.testing.assert_allclose(full, scaled_dot_product_attention(q, k, v, causal=causal), **TIGHT)


def test_rng_is_unused_with_given_kernels_and_the_local_mode_is_the_functions(rng):
    """A registry passes rng always: with params it draws nothing. mode="local" is blockwise_local_attention."""
    q, k, v = _qkv(rng)
    params = _shared(rng, 3)
    np.testing.assert_array_equal(memory_compressed_attention(q, k, v, params=params, rng=0),
                                  memory_compressed_attention(q, k, v, params=params))
    np.testing.assert_array_equal(memory_compressed_attention(q, k, v, mode="local", block=2, causal=True),
                                  blockwise_local_attention(q, k, v, block=2, causal=True))


def test_local_mode_of_the_record(rng):
    q, k, v = _qkv(rng)
    result = MCA.apply(q, k, v, mode="local", block=2, causal=True, return_weights=True, return_draws=True)
    np.testing.assert_array_equal(result.output, blockwise_local_attention(q, k, v, block=2, causal=True))
    assert result.draws == {"params": None}
    np.testing.assert_array_equal(result.allowed, block_local_pattern(7, 2, causal=True).to_mask())
    with pytest.raises(ValueError, match="scale is an option of mode='compressed'"):
        MCA.apply(q, k, v, mode="local", scale=0.5)


# --- the draw, edge sizes, bad input -----------------------------------------------------------------

def test_draw_is_glorot_uniform_in_order():
    params = init_memory_compression(4, 3, d_k=4, d_v=2)
    g = np.random.default_rng(4)
    np.testing.assert_array_equal(params.w_k, g.uniform(-math.sqrt(6 / 24), math.sqrt(6 / 24), (3, 4, 4)))
    np.testing.assert_array_equal(params.w_v, g.uniform(-math.sqrt(6 / 12), math.sqrt(6 / 12), (3, 2, 2)))
    shared = init_memory_compression(4, 3, channels="shared")
    g = np.random.default_rng(4)
    np.testing.assert_array_equal(shared.w_k, g.uniform(-1.0, 1.0, 3))
    np.testing.assert_array_equal(shared.w_v, g.uniform(-1.0, 1.0, 3))


def test_defaults_paper_function_and_registry_entry(rng):
    """The function draws the paper's d × d taps, c = 3; the registry's apply scalar taps (so that it has weights),
    and returns them."""
    q, k, v = _qkv(rng)
    np.testing.assert_array_equal(memory_compressed_attention(q, k, v, rng=6),
                                  memory_compressed_attention(q, k, v, params=init_memory_compression(6, 3, d_k=4,
                                                                                                     d_v=3)))
    result = MCA.apply(q, k, v, rng=6, return_draws=True)
    params = result.draws["params"]
    assert params.channels == "shared" and params.factor == 3
    np.testing.assert_array_equal(params.w_k, init_memory_compression(6, 3, channels="shared").w_k)


def test_edge_sizes(rng):
    q, k, v = _qkv(rng)
    params = _shared(rng, 3)
    assert memory_compressed_attention(q[:0], k, v, params=params, causal=True).shape == (0, 3)
    for causal in (False, True):
        np.testing.assert_array_equal(memory_compressed_attention(q, k[:2], v[:2], params=params, causal=causal),
                                      0.0)                         # m < c: no block, zero rows
        out = memory_compressed_attention(q, k[:2], v[:2], params=params, causal=causal, memory="tensor2tensor")
        np.testing.assert_allclose(out, np.broadcast_to(v[0], (7, 3)), **TIGHT)   # the first token alone
        out, W = memory_compressed_attention(q, k[:0], v[:0], params=params, causal=causal, return_weights=True)
        assert out.shape == (7, 3) and W.shape == (7, 0) and not out.any()
    assert memory_compressed_attention(q, k, v[:, :0], rng=0).shape == (7, 0)
    assert memory_compressed_attention(q[None][:0], k[None][:0], v[None][:0], params=params,
                                       causal=True).shape == (0, 7, 3)
    with pytest.raises(ValueError, match="d_k"):
        memory_compressed_attention(q[:, :0], k[:, :0], v, params=params)


def test_bad_input(rng):
    q, k, v = _qkv(rng)
    params = _shared(rng, 3)
    cases = [
        (dict(), ValueError, r"mca draws its kernels from rng: pass rng= \(or params=\)"),
        (dict(params=params, factor=2), ValueError, "factor=2 but params has c=3 taps"),
        (dict(params=params, channels="full"), ValueError, "channels='full' but params has 'shared' taps"),
        (dict(params=MemoryCompression(np.ones((3, 5, 5)), np.ones((3, 3, 3)))), ValueError,
         r"keys have d_k=4"),
        (dict(params=(np.ones(3), np.ones(3))), TypeError, "params must be a MemoryCompression"),
        (dict(rng=0, factor=0), ValueError, "factor must be a positive int"),
        (dict(rng=0, channels="depthwise"), ValueError, "channels must be one of"),
        (dict(rng=0, memory="lucidrains"), ValueError, "memory must be one of"),
        (dict(rng=0, remainder="truncate"), ValueError, "remainder must be one of"),
        (dict(rng=0, method="csr"), ValueError, "method must be one of"),
        (dict(rng=0, causal="yes"), ValueError, "causal must be one of"),
    ]
    for options, error, message in cases:
        with pytest.raises(error, match=message):
            memory_compressed_attention(q, k, v, **options)
    for w_k, w_v, message in [(np.ones((3, 4)), np.ones(3), r"w_k must have shape \(c,\)"),
                              (np.ones(3), np.ones(2), "one kind and one kernel size"),
                              (np.ones(3), np.ones((3, 2, 2)), "one kind and one kernel size"),
                              (np.ones(0), np.ones(0), "c >= 1")]:
        with pytest.raises(ValueError, match=message):
            MemoryCompression(w_k, w_v)
    with pytest.raises(TypeError, match="w_k must be a real floating-point array"):
        MemoryCompression(np.ones(3, dtype=int), np.ones(3))
    with pytest.raises(ValueError, match=r"kernel must have shape \(c,\) or \(c, d, d\) with d = x's width 4"):
        compress_memory(k, np.ones((3, 2, 2)))
    with pytest.raises(ValueError, match="pass d_k= and d_v="):
        init_memory_compression(0, 3)
    with pytest.raises(ValueError, match="mode must be one of"):
        MCA.apply(q, k, v, rng=0, mode="both")
    with pytest.raises(ValueError, match=r"^mca draws its kernels from rng: pass rng= \(or params=\)$"):   # its id
        MCA.apply(q, k, v)
