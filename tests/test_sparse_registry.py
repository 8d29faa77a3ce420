"""The sparse family's registry entries under hostile input: q, k, v checked before any shape is read, options named,
one edge-size rule in both methods, lengths a pattern cannot take refused saying which it takes, dense weights refused
over the memory budget before they are allocated, and no n × m array on the csr path at n = 65536."""
from __future__ import annotations

import inspect
import re
import tracemalloc

import numpy as np
import pytest

from refattn import registry
from refattn.common import MemoryBudgetError, set_memory_budget
from refattn.sparse import band_pattern
from refattn.sparse.attention import attend_pattern

SPARSE = list(registry.FAMILIES["sparse"])
METHODS = ("equation", "csr")                                 # "auto" is one of the two
# Registry entries whose structure needs positions (a relay node, global tokens, whole blocks, a tree): at n = 0
# they refuse, naming n and saying which lengths they take. Every other entry gives an empty pattern.
NEEDS_POSITIONS = {
    "star_transformer": r"star_transformer puts the relay node at the last position.*n must be >= 1, got n=0",
    "etc": r"etc puts num_global=2 global tokens before the long tokens: n must be >= num_global, got n=0",
    "bigbird": r"n=0 holds no block; .* BigBird takes n = 4 or n >= 12, a multiple of block_size=2",
    "bp_transformer": r"t tokens give n = t \+ ⌈t/2⌉ \+ ⌈t/4⌉ \+ … \+ 1 nodes \(n = 1, 3, 6, 7, 11, 12, 14, 15, …\): "
                      r"n=0 is no such count \(nearest: 1\)",
}


def _id(x):
    return x.id if hasattr(x, "id") else repr(x)


def _qkv(n, m, d=3, d_v=2, batch=(), seed=0, *, mech=None):
    """Seeded q, k, v; k is q for a shared-QK entry (Reformer's keys are its queries)."""
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((*batch, n, d)), rng.standard_normal((*batch, m, d)),
               rng.standard_normal((*batch, m, d_v)))
    return (q, q.copy(), v) if mech is not None and mech.shared_qk else (q, k, v)


def _both(mech, q, k, v, **options):
    """Each method's (result, None) or (None, error): any error but a TypeError/ValueError fails the test."""
    runs = []
    for method in METHODS:
        try:
            runs.append((mech.apply(q, k, v, method=method, rng=0, **options), None))
        except (TypeError, ValueError) as error:
            runs.append((None, error))
    return runs


def _same_error(runs) -> Exception:
    (_, first), (_, second) = runs
    assert first is not None and second is not None, "one method refused and the other returned"
    assert (type(first), str(first)) == (type(second), str(second))
    return first


# --- q, k, v before anything else ------------------------------------------------------------------------------

BAD_QKV = [
    ("q", lambda L: np.ones(4), ValueError, r"q must have shape \(\.\.\., length, dim\), got shape \(4,\)"),
    ("q", lambda L: np.float64(1.0), ValueError, r"q must have shape \(\.\.\., length, dim\), got shape \(\)"),
    ("q", lambda L: None, TypeError, r"q must be a real floating-point array, got dtype object with shape \(\)"),
    ("k", lambda L: np.ones((L, 3), dtype=np.int64), TypeError,
     r"k must be a real floating-point array, got dtype int64 with shape \(\d+, 3\)"),
    ("v", lambda L: np.ones((L, 2), dtype=complex), TypeError,
     "v must be a real floating-point array, got dtype complex128"),
    ("q", lambda L: np.ones((L, 4)), ValueError, r"q has d_k=4 but k has d_k=3 \(q shape \(\d+, 4\), k shape"),
    ("v", lambda L: np.ones((L + 1, 2)), ValueError, r"k has m=\d+ keys but v has m=\d+ values"),
]


@pytest.mark.parametrize("mech", SPARSE, ids=_id)
@pytest.mark.parametrize(("which", "make", "error", "match"), BAD_QKV, ids=[f"{w}-{m}" for w, _, _, m in BAD_QKV])
def test_bad_qkv_is_named_before_any_shape_is_read(mech, which, make, error, match):
    L = mech.example_length
    args = dict(zip("qkv", _qkv(L, L, mech=mech), strict=True)) | {which: make(L)}
    for method in METHODS:
        with pytest.raises(error, match=match):
            mech.apply(args["q"], args["k"], args["v"], method=method, rng=0)


@pytest.mark.parametrize("mech", SPARSE, ids=_id)
def test_shared_arguments_are_checked_before_the_pattern_is_built(mech):
    q, k, v = _qkv(mech.example_length, mech.example_length, mech=mech)
    with pytest.raises(ValueError, match=re.escape(f"method must be one of {mech.methods}, got 'dense'")):
        mech.apply(q, k, v, method="dense", rng=0)
    with pytest.raises(TypeError, match="return_weights must be True or False, got 1"):
        mech.apply(q, k, v, return_weights=1, rng=0)


# --- options ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mech", SPARSE, ids=_id)
def test_unknown_options_name_the_option_and_the_mechanism(mech):
    q, k, v = _qkv(mech.example_length, mech.example_length, mech=mech)
    own = [p.name for p in inspect.signature(mech.apply).parameters.values()
           if p.kind is inspect.Parameter.KEYWORD_ONLY][4:]   # after causal, rng, return_weights, method (a pattern's)
    assert own, f"{mech.id}: apply's signature lists no option of its own"   # or return_draws (its function's)
    if hasattr(mech.apply, "door"):                                # a record made from its function: Mechanism.of
        message = rf"^{mech.id} takes no option 'widht'; its options: {', '.join(own)} \(and causal, rng, "
        message += r"return_weights, return_draws\)$"
    else:
        message = rf"^{mech.id} has no option 'widht'; its options are: {', '.join(own)}$"
    for method in METHODS:
        with pytest.raises(TypeError, match=message):
            mech.apply(q, k, v, method=method, rng=0, widht=3)


def test_apply_signatures_list_the_makers_options_with_their_defaults():
    def options(ident):
        return {name: p.default for name, p in inspect.signature(registry.get(ident).apply).parameters.items()
                if p.kind is inspect.Parameter.KEYWORD_ONLY
                and name not in ("causal", "rng", "return_weights", "return_draws", "method")}

    assert options("band") == {"window": 2}
    assert options("axial") == {"width": None}
    assert options("etc") == {"num_global": 2, "window": 1, "segment_ids": None, "hard_g2l": False, "hard_l2g": False}
    assert options("bigbird") == {"block_size": 2, "num_random_blocks": 1, "num_global_blocks": 2, "repeats": "once",
                                  "num_window_blocks": 3, "random_blocks": None, "candidates": "disjoint"}


# --- edge sizes: one rule, both methods ---------------------------------------------------------------------------

def _edge_cases():
    for mech in SPARSE:
        L = mech.example_length
        for causal in mech.causal_settings:
            yield mech, causal, "n=0", (0, 5 if mech.cross or causal == "bottom-right" else 0, 3, 2, ())
            if mech.cross or causal == "bottom-right":
                yield mech, causal, "m=0", (4, 0, 3, 2, ())
        yield mech, False, "batch=0", (L, L, 3, 2, (2, 0))
        yield mech, False, "d_v=0", (L, L, 3, 0, ())
        yield mech, False, "d_k=0", (L, L, 0, 2, ())


EDGES = list(_edge_cases())


@pytest.mark.parametrize(("mech", "causal", "label", "shape"), EDGES,
                         ids=[f"{c[0].id}-{c[1]}-{c[2]}" for c in EDGES])
def test_edge_sizes_follow_one_rule_in_both_methods(mech, causal, label, shape):
    n, m, d, d_v, batch = shape
    q, k, v = _qkv(n, m, d, d_v, batch, mech=mech)
    runs = _both(mech, q, k, v, causal=causal, return_weights=True)
    if label == "d_k=0":
        assert "the default scale 1/sqrt(d_k) needs d_k >= 1, got d_k=0" in str(_same_error(runs))
        return
    if label == "n=0" and mech.id in NEEDS_POSITIONS:
        error = _same_error(runs)
        assert isinstance(error, ValueError)
        assert re.search(NEEDS_POSITIONS[mech.id], str(error)), str(error)
        return
    if label == "m=0" and mech.id == "random" and causal is False:   # r = 2 distinct keys from none
        assert "cannot draw r=2 distinct keys from m=0: without a causal mask r <= m" in str(_same_error(runs))
        return
    (equation, error_eq), (csr, error_csr) = runs
    assert error_eq is None and error_csr is None, (error_eq, error_csr)
    for result in (equation, csr):
        assert result.output.shape == (*batch, n, d_v)
        assert result.weights.shape == result.allowed.shape == (*batch, n, m)
        if label == "m=0":                                         # no key: every row fully masked, "zero"
            np.testing.assert_array_equal(result.output, 0.0)
    np.testing.assert_allclose(csr.output, equation.output, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(csr.weights, equation.weights, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mech", SPARSE, ids=_id)
def test_every_short_length_gives_a_result_or_the_same_named_error_in_both_methods(mech):
    for n in range(0, 18):
        q, k, v = _qkv(n, n, seed=n, mech=mech)
        runs = _both(mech, q, k, v)
        if runs[0][1] is not None or runs[1][1] is not None:
            error = _same_error(runs)
            assert isinstance(error, ValueError) and re.search(r"\b[nm]=\d", str(error)), str(error)
        else:
            np.testing.assert_allclose(runs[1][0].output, runs[0][0].output, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(("ident", "n", "options", "error", "match"), [
    ("bigbird", 10, {}, ValueError, r"^n=10 makes num_blocks=5: num_random_blocks=1 but block row 2 has only 0 "
     r"candidate blocks .*; with "
     r"num_random_blocks=1 drawn from candidates='disjoint', num_global_blocks=2 and num_window_blocks=3, BigBird "
     r"takes n = 4 or n >= 12, a multiple of block_size=2$"),
    ("bigbird", 7, {}, ValueError, r"^n=7 must be a multiple of block_size=2 \(BigBird works in whole blocks\); .* "
     r"BigBird takes n = 4 or n >= 12"),
    ("bigbird", 2, {"num_random_blocks": 0}, ValueError, r"^n=2 makes num_blocks=1: num_global_blocks=2 exceeds "
     r"num_blocks=1; with num_random_blocks=0, num_global_blocks=2 and num_window_blocks=3, BigBird takes n >= 4"),
    ("bigbird", 16, {"block_size": 0}, ValueError, "block_size must be a positive int, got 0"),
    ("bigbird", 16, {"num_window_blocks": 2}, ValueError, "num_window_blocks must be an odd positive int"),
    ("bp_transformer", 5, {}, ValueError, r"n=5 is no such count \(nearest: 3 and 6\)"),
    ("bp_transformer", 7, {"nodes_per_level": 0}, ValueError, "nodes_per_level must be a positive int, got 0"),
    ("image_transformer", 16, {"width": 0}, ValueError, "width must be a positive int, got 0"),
    ("image_transformer", 16, {"width": -4}, ValueError, "width must be a positive int, got -4"),
    ("image_transformer", 16, {"width": 5}, ValueError, r"image_transformer lays its n=16 positions out as an image, "
     r"height rows of width positions: width=5 does not divide n \(the divisors of n: 1, 2, 4, 8, 16\)"),
    ("image_transformer", 16, {"query_block": (0, 2)}, ValueError, r"query_block\[0\] must be a positive int, got 0"),
    ("image_transformer", 16, {"memory_flange": (1, -1)}, ValueError,
     r"memory_flange\[1\] must be a non-negative int, got -1"),
    ("axial", 16, {"width": 0}, ValueError, "width must be a positive int, got 0"),
    ("axial", 16, {"width": "4"}, ValueError, "width must be a positive int, got '4'"),
    ("axial", 16, {"width": 3}, ValueError, r"axial lays its n=16 positions out .* width=3 does not divide n"),
    ("etc", 1, {}, ValueError, "n must be >= num_global, got n=1"),
    ("etc", 4, {"num_global": -1}, ValueError, "num_global must be a non-negative int, got -1"),
    ("star_transformer", 4, {"ring": 1}, TypeError, "ring must be True or False, got 1"),
    ("band", 5, {"window": -1}, ValueError, "window must be a non-negative int, got -1"),
    ("dilated", 5, {"dilation": 0}, ValueError, "dilation must be a positive int, got 0"),
    ("strided", 5, {"stride": 0}, ValueError, "stride must be a positive int, got 0"),
    ("block_local", 5, {"block": 0}, ValueError, "block must be a positive int, got 0"),
    ("longformer", 5, {"window": 3}, ValueError, "window must be even"),
    ("longformer", 5, {"dilation": 0}, ValueError, "dilation must be a positive int, got 0"),
    ("sparse_transformer", 5, {"stride": 0}, ValueError, "stride must be a positive int, got 0"),
    ("random", 5, {"r": -1}, ValueError, "r must be a non-negative int, got -1"),
    ("random", 5, {"keys": [[0.5, 1.0]] * 5}, TypeError, "keys must be an array of ints, got dtype float64"),
    ("random", 2, {"keys": [[0, -2], [1, -1]]}, ValueError, r"keys must lie in \[0, m=2\) \(or be -1 for none\)"),
    ("global", 5, {"global_indices": [1.5]}, TypeError, "global_indices must be an array of ints, got dtype float64"),
])
def test_refusals_name_the_argument_and_are_the_same_in_both_methods(ident, n, options, error, match):
    q, k, v = _qkv(n, n)
    for method in METHODS:
        with pytest.raises(error, match=match):
            registry.get(ident).apply(q, k, v, method=method, rng=0, **options)


@pytest.mark.parametrize("ident", ["image_transformer", "axial"])
def test_image_entries_take_every_width_that_divides_n(rng, ident):
    q, k, v = (rng.standard_normal((12, 3)) for _ in range(3))
    for width in (1, 2, 3, 4, 6, 12):
        out = registry.get(ident).apply(q, k, v, width=width)
        out_csr = registry.get(ident).apply(q, k, v, width=width, method="csr")
        np.testing.assert_allclose(out_csr.output, out.output, rtol=1e-12, atol=1e-12)


# --- memory ----------------------------------------------------------------------------------------------------

@pytest.fixture
def one_mib_budget():
    previous = set_memory_budget(2**20)
    yield
    set_memory_budget(previous)


def _length_at_least(mech, n):
    """The first length >= n the entry takes (bp_transformer: a node count of its tree)."""
    while True:
        try:
            mech.apply(*_qkv(n, n, d=1, d_v=1, mech=mech), rng=0, method="csr")
            return n
        except ValueError:
            n += 1


@pytest.mark.parametrize("mech", SPARSE, ids=_id)
@pytest.mark.parametrize("method", METHODS)
def test_dense_weights_over_the_budget_are_refused_before_anything_is_built(mech, method, one_mib_budget):
    n = _length_at_least(mech, 400)                                  # 400² float64 = 1.22 MiB > 1 MiB
    q, k, v = _qkv(n, n, mech=mech)
    with pytest.raises(MemoryBudgetError, match=rf"the dense weights \(return_weights=True\) of shape \({n}, {n}\) "
                                                r"would take 0.00\d+ GiB, above the memory budget of 0.000977 GiB"):
        mech.apply(q, k, v, method=method, rng=0, return_weights=True)
    assert mech.apply(q, k, v, method="csr", rng=0).output.shape == (n, 2)   # csr holds no n × n array


def test_attend_pattern_refuses_weights_over_the_budget_before_allocating(one_mib_budget):
    q, k, v = _qkv(300, 300, batch=(2,))                            # 2·300² float64 = 1.37 MiB
    pattern = band_pattern(300, 2)
    tracemalloc.start()
    try:
        with pytest.raises(MemoryBudgetError, match=r"of shape \(2, 300, 300\) would take 0.00134 GiB"):
            attend_pattern(q, k, v, pattern, method="csr", return_weights=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * 300 * 300 * 8 / 4                               # nothing near the weights was allocated


# Strided keeps every s-th key at any distance: n·m/s pairs, 5.3 GiB of int32 indices for the registry's s = 3 at
# n = 65536. Its builder refuses that before allocating; the Sparse Transformer uses it.
OVER_BUDGET_AT_65536 = {"strided", "sparse_transformer"}
# bigbird: a Python loop over 32768 block rows; sac: its demonstration predictor scores all n·m pairs (minutes at
# 65536; its scoring in blocks of queries is held to no n × m array at n = 4096 in tests/test_sac.py).
SLOW_UNDER_TRACING = {"bigbird", "sac"}


@pytest.mark.parametrize("mech", [m for m in SPARSE if m.id not in SLOW_UNDER_TRACING], ids=_id)
def test_csr_through_apply_holds_no_n_by_m_array_at_65536(mech):
    n = 131071 if mech.id == "bp_transformer" else 65536             # bp: the 131071 nodes of 65536 tokens
    q, k, v = _qkv(n, n, d=2, d_v=2, mech=mech)
    mech.apply(*_qkv(16 if mech.id != "bp_transformer" else 15, 16 if mech.id != "bp_transformer" else 15, mech=mech),
               method="csr", rng=0)                                  # the kernel compiled outside the trace
    tracemalloc.start()
    try:
        if mech.id in OVER_BUDGET_AT_65536:
            with pytest.raises(MemoryBudgetError, match=r"the pattern's indices of shape \(1431655766,\) would take "
                                                        r"5.33 GiB"):
                mech.apply(q, k, v, method="csr", rng=0)
        else:
            assert mech.apply(q, k, v, method="csr", rng=0).output.shape == (n, 2)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # An n × m boolean mask alone is 4 GiB; the patterns' own indices (axial: n·(H + W) pairs) stay far below.
    assert peak < n * n / 8, f"{mech.id}: peak {peak / 2**20:.0f} MiB"


@pytest.mark.parametrize("mech", SPARSE, ids=_id)
def test_weights_are_zero_outside_the_pattern_in_both_methods_even_in_a_nan_row(mech):
    L = mech.example_length
    q, k, v = _qkv(L, L, d=3, d_v=3, mech=mech)
    if mech.shared_qk:                         # the keys are the queries: token L // 2 hashes to bucket 0 and makes
        q[L // 2, 1] = np.nan                  # the rows that pair with it NaN (its own among them)
        k = q
    elif mech.content_selected:                  # a NaN key joins no selection; a score beyond float64 makes the NaN
        # rows, from finite q and k. Products near 1e450 overflow in every summation order; near 1e310 a sorted
        # key mixed with a small weight left a score at 6.6e307 that one method's partial sums overflowed, the
        # other's not.
        q, k[L // 2] = q * 1e200, k[L // 2] * 1e250
    else:
        k[L // 2, 1] = np.nan                                        # rows that keep key L // 2 become NaN
    results = [mech.apply(q, k, v, method=method, rng=0, return_weights=True) for method in METHODS]
    for result in results:
        np.testing.assert_array_equal(result.weights[~result.allowed], 0.0)
        assert np.isnan(result.weights[result.allowed]).any()
    np.testing.assert_array_equal(results[1].allowed, results[0].allowed)
    np.testing.assert_allclose(results[1].weights, results[0].weights, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(results[1].output, results[0].output, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(("mech_id", "old", "new"), [("band", "w", "window"), ("dilated", "w", "window"),
                                                     ("etc", "radius", "window")])
def test_a_pattern_option_renamed_window_keeps_its_old_name_for_one_release(mech_id, old, new):
    rng = np.random.default_rng(5)
    q, k, v = rng.standard_normal((3, 9, 4))
    apply = registry.get(mech_id).apply
    with pytest.warns(DeprecationWarning, match=rf"{mech_id}: option {old}= is renamed {new}="):
        was = apply(q, k, v, return_weights=True, **{old: 2})
    now = apply(q, k, v, return_weights=True, **{new: 2})
    np.testing.assert_array_equal(was.output, now.output)
    np.testing.assert_array_equal(was.weights, now.weights)
