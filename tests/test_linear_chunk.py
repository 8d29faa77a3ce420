"""method="chunk": the causal linear recurrences by chunks equal their Numba scans to 1e-12."""
from __future__ import annotations

import numpy as np
import pytest

from refattn.linear import delta_rule_attention, elu_feature_map, linear_attention, performer_attention, rfa_attention
from refattn.linear.chunk import DEFAULT_CHUNK_SIZE

TIGHT = {"rtol": 1e-12, "atol": 1e-12}
SIZES = (1, 3, 4, 5, 12, 64)                                       # n = 12: divides, does not, one chunk, wider


def relu_map(x):
    return np.maximum(x, 0.0)


def qkv(rng, n, m, batch=(2,), d=4, d_v=3):
    return (rng.standard_normal((*batch, n, d)), rng.standard_normal((*batch, m, d)),
            rng.standard_normal((*batch, m, d_v)))


@pytest.mark.parametrize("chunk_size", SIZES)
@pytest.mark.parametrize(("n", "m", "causal"), [(12, 12, True), (12, 12, "bottom-right"), (12, 19, True),
                                                (12, 19, "bottom-right"), (12, 7, True), (12, 7, "bottom-right")])
def test_elu_chunk_equals_scan(rng, n, m, causal, chunk_size):
    q, k, v = qkv(rng, n, m)
    for policy in ("zero", "nan", "uniform"):                     # bottom-right n > m: rows that see no key
        options = {"causal": causal, "fully_masked": policy, "eps": 1e-6}
        scan = linear_attention(q, k, v, elu_feature_map, method="scan", **options)
        chunk = linear_attention(q, k, v, elu_feature_map, method="chunk", chunk_size=chunk_size, **options)
        np.testing.assert_allclose(chunk, scan, **TIGHT)


@pytest.mark.parametrize("chunk_size", [3, 5, 64])
@pytest.mark.parametrize("kind", ["positive", "hyperbolic", "trig"])
@pytest.mark.parametrize(("n", "m", "causal"), [(12, 12, True), (9, 14, "bottom-right"), (14, 9, "bottom-right")])
def test_performer_chunk_equals_scan(rng, kind, n, m, causal, chunk_size):
    q, k, v = qkv(rng, n, m)
    settings = [{"stabilize": False}, {"stabilize": True}]
    if kind != "trig":                                             # the official ε (an offset) and denominator guard
        settings += [{"stabilize": True, "eps": 1e-3, "denominator_eps": 1e-6}]
    for extra in settings:
        options = {"rng": 3, "num_features": 6, "kind": kind, "causal": causal} | extra
        scan = performer_attention(q, k, v, method="scan", **options)
        chunk = performer_attention(q, k, v, method="chunk", chunk_size=chunk_size, **options)
        np.testing.assert_allclose(chunk, scan, **TIGHT, err_msg=str(extra))


def test_stabilised_chunk_follows_a_jump_of_the_running_maximum(rng):
    """A key far larger than the others moves the running maximum mid-chunk: the rows before it keep their scale."""
    q, k, v = qkv(rng, 10, 10)
    k[:, 6] *= 12.0
    options = {"rng": 0, "num_features": 8, "causal": True, "stabilize": True}
    scan = performer_attention(q, k, v, method="scan", **options)
    np.testing.assert_allclose(performer_attention(q, k, v, method="chunk", chunk_size=4, **options), scan, **TIGHT)


def test_signed_features_with_eps(rng):
    q, k, v = qkv(rng, 12, 12)
    scan = linear_attention(q, k, v, relu_map, causal=True, method="scan", eps=0.5)
    np.testing.assert_allclose(linear_attention(q, k, v, relu_map, causal=True, method="chunk", chunk_size=5, eps=0.5),
                               scan, **TIGHT)


@pytest.mark.parametrize("chunk_size", SIZES)
@pytest.mark.parametrize("gate_form", ["paper", "decay"])
def test_rfa_chunk_equals_scan(rng, gate_form, chunk_size):
    q, k, v = qkv(rng, 12, 12)
    gates = rng.uniform(size=(2, 12))
    gates[0, 4], gates[1, 7], gates[1, 8] = 0.0, 1.0, 0.0          # a reset and a full carry inside chunks
    scan = rfa_attention(q, k, v, gates, elu_feature_map, gate_form=gate_form, method="scan", eps=1e-9)
    chunk = rfa_attention(q, k, v, gates, elu_feature_map, gate_form=gate_form, method="chunk",
                          chunk_size=chunk_size, eps=1e-9)
    np.testing.assert_allclose(chunk, scan, **TIGHT)


@pytest.mark.parametrize("chunk_size", SIZES)
@pytest.mark.parametrize("normalize", [True, False])
def test_delta_rule_chunk_equals_scan(rng, normalize, chunk_size):
    q, k, v = qkv(rng, 12, 12)
    beta = rng.uniform(size=(2, 12))
    beta[0, 2], beta[1, 5] = 0.0, 1.0
    scan = delta_rule_attention(q, k, v, beta, elu_feature_map, normalize=normalize, method="scan")
    chunk = delta_rule_attention(q, k, v, beta, elu_feature_map, normalize=normalize, method="chunk",
                                 chunk_size=chunk_size)
    np.testing.assert_allclose(chunk, scan, **TIGHT)


@pytest.mark.parametrize("case", ["linear", "rfa", "delta"])
def test_a_non_finite_key_reaches_only_the_rows_after_it(rng, case):
    """Within a chunk the rows before key t multiply it by an exact 0, which would be NaN: they must not see it."""
    q, k, v = qkv(rng, 10, 10, batch=())
    k[6], v[6] = np.inf, np.nan
    coefficients = rng.uniform(size=10)
    run = {"linear": lambda **o: linear_attention(q, k, v, elu_feature_map, causal=True, **o),
           "rfa": lambda **o: rfa_attention(q, k, v, coefficients, elu_feature_map, **o),
           "delta": lambda **o: delta_rule_attention(q, k, v, coefficients, elu_feature_map, **o)}[case]
    with np.errstate(invalid="ignore", over="ignore"):
        scan, chunk = run(method="scan"), run(method="chunk", chunk_size=4)
    np.testing.assert_allclose(chunk[:6], scan[:6], **TIGHT)
    assert np.isfinite(chunk[:6]).all()
    assert np.array_equal(np.isnan(chunk[6:]), np.isnan(scan[6:]))


def test_no_key_and_no_query(rng):
    q, k, v = qkv(rng, 5, 0)
    for policy, expected in (("zero", 0.0), ("nan", np.nan), ("uniform", 0.0)):
        out = linear_attention(q, k, v, elu_feature_map, causal="bottom-right", method="chunk", fully_masked=policy)
        np.testing.assert_array_equal(out, np.full((2, 5, 3), expected))
    q, k, v = qkv(rng, 0, 4)
    assert linear_attention(q, k, v, elu_feature_map, causal=True, method="chunk").shape == (2, 0, 3)


def test_chunk_is_causal_only_and_its_size_is_checked(rng):
    q, k, v = qkv(rng, 6, 6)
    with pytest.raises(ValueError, match="method='chunk' is the causal recurrence"):
        linear_attention(q, k, v, elu_feature_map, method="chunk")
    for bad in (0, -3):
        with pytest.raises(ValueError, match="chunk_size"):
            linear_attention(q, k, v, elu_feature_map, causal=True, method="chunk", chunk_size=bad)
    with pytest.raises(ValueError, match="chunk_size"):
        rfa_attention(q, k, v, np.full(6, 0.5), elu_feature_map, method="chunk", chunk_size=2.5)
    assert isinstance(DEFAULT_CHUNK_SIZE, int) and DEFAULT_CHUNK_SIZE > 0


def test_chunk_memory_counts_one_state_per_segment(rng):
    # The kernel keeps one F × (d_v + 1) state per segment of SEGMENT_CHUNKS chunks, not one per chunk: n = 2048
    # in chunks of 32 is 64 chunks (64 · 4 · 4 = 1024 entries per state set) but 2 segments (32 entries).
    from refattn.common import MemoryBudgetError, set_memory_budget
    from refattn.kernels.chunk import SEGMENT_CHUNKS

    assert SEGMENT_CHUNKS == 32                                    # the numbers below assume it
    q, k, v = qkv(rng, 2048, 2048, batch=(), d=4, d_v=3)
    previous = set_memory_budget(512 * 8)                          # 512 float64 entries
    try:
        chunked = linear_attention(q, k, v, elu_feature_map, causal=True, method="chunk", chunk_size=32)
        np.testing.assert_allclose(chunked, linear_attention(q, k, v, elu_feature_map, causal=True, method="scan"),
                                   **TIGHT)
        q, k, v = qkv(rng, 8, 8, batch=(), d=32, d_v=31)           # one segment: 32 · 32 = 1024 entries > 512
        with pytest.raises(MemoryBudgetError, match=r"the segment states of method='chunk' of shape \(1, 1, 32, 32\)"):
            linear_attention(q, k, v, elu_feature_map, causal=True, method="chunk")
    finally:
        set_memory_budget(previous)
