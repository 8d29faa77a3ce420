"""The linearised family's shared promises, over every registered linear mechanism and every method.

- one edge-size rule: n = 0, m = 0, d_v = 0 and a batch dimension of 0 give the same results in every
  method, and d_k = 0 the same named ValueError (the rule is stated in refattn.linear);
- NaN/Inf in a query, key or value reaches only the rows that may see it, stabilisers included;
- inputs are validated before anything indexes their shapes;
- the default method streams above the memory budget, and weights above it are refused before allocating.
"""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from refattn import registry
from refattn.common import MemoryBudgetError, set_memory_budget
from refattn.linear import delta_rule_attention, elu_feature_map, linear_attention, performer_attention, rfa_attention

LINEAR = [m for m in registry.all() if m.family == "linear"]
CAUSAL = [m for m in LINEAR if m.causal]
RECURRENT = ("rfa", "delta_rule")                                  # self-attention: top-left needs n = m


def _id(x):
    return getattr(x, "id", repr(x))


def settings(mechs):
    return [(m, c) for m in mechs for c in m.causal_settings]


def methods(mech, causal):
    """Every method ``apply`` of ``mech`` takes at this causal setting (None: it has no method option)."""
    if mech.id == "efficient_attention":
        return [None]
    if mech.id in RECURRENT:
        return ["auto", "equation", "scan"]
    return ["auto", "equation", "right" if causal is False else "scan"]


def call(mech, q, k, v, causal, method, **options):
    if method is not None:
        options["method"] = method
    return mech.apply(q, k, v, causal=causal, rng=0, **options)


def outcome(fn):
    try:
        return fn()
    except (TypeError, ValueError, ZeroDivisionError) as error:
        return error


def sizes(mech, causal, n, m):
    """(n, m) as given, or n = m = min(n, m) where the mechanism is self-attention and the alignment top-left."""
    return (min(n, m),) * 2 if mech.id in RECURRENT and causal is True else (n, m)


EDGES = {"n = 0": (0, 6, 3, 2, ()), "m = 0": (4, 0, 3, 2, ()), "d_v = 0": (4, 6, 3, 0, ()),
         "batch 0": (4, 6, 3, 2, (0,)), "batch 0 × 2": (4, 6, 3, 2, (2, 0))}


@pytest.mark.parametrize("edge", list(EDGES))
@pytest.mark.parametrize(("mech", "causal"), settings(LINEAR), ids=_id)
def test_edge_sizes_give_one_result_in_every_method(rng, mech, causal, edge):
    n, m, d, d_v, batch = EDGES[edge]
    n, m = sizes(mech, causal, n, m)
    q, k = rng.standard_normal((*batch, n, d)), rng.standard_normal((*batch, m, d))
    v = rng.standard_normal((*batch, m, d_v))
    results = [call(mech, q, k, v, causal, method, return_weights=True) for method in methods(mech, causal)]
    out, A = results[0].output, results[0].weights
    assert out.shape == (*batch, n, d_v) and A.shape == (*batch, n, m), (out.shape, A.shape)
    if m == 0:
        np.testing.assert_array_equal(out, 0.0)                    # no key: the "zero" policy
    for result in results[1:]:
        np.testing.assert_array_equal(result.output, out)
        np.testing.assert_array_equal(result.weights, A)


@pytest.mark.parametrize(("mech", "causal"), settings(LINEAR), ids=_id)
def test_zero_width_keys_give_one_named_error_in_every_method(rng, mech, causal):
    n, m = sizes(mech, causal, 4, 6)
    q, k, v = np.zeros((n, 0)), np.zeros((m, 0)), rng.standard_normal((m, 2))
    errors = [outcome(lambda method=method: call(mech, q, k, v, causal, method)) for method in methods(mech, causal)]
    assert all(isinstance(e, ValueError) and "d_k" in str(e) for e in errors), errors
    assert len({(type(e), str(e)) for e in errors}) == 1, errors


@pytest.mark.parametrize("causal", [False, True, "bottom-right"])
@pytest.mark.parametrize(("policy", "fill"), [("zero", 0.0), ("nan", np.nan), ("uniform", 0.0)])
def test_no_key_follows_the_fully_masked_policy_in_every_method(rng, causal, policy, fill):
    # m = 0: every query sees no key. "uniform" is a mean over no key, the empty sum 0. The denominators
    # (all 0) are not checked for rows that see no key: no ZeroDivisionError.
    q, k, v = rng.standard_normal((4, 3)), np.zeros((0, 3)), np.zeros((0, 2))
    streaming = "right" if causal is False else "scan"
    for method in ("auto", "equation", streaming):
        for fn in (lambda **kw: linear_attention(q, k, v, elu_feature_map, **kw),
                   lambda **kw: performer_attention(q, k, v, rng=0, num_features=5, stabilize=True, eps=1e-3, **kw),
                   lambda **kw: performer_attention(q, k, v, rng=0, num_features=5, kind="hyperbolic", **kw)):
            out, A = fn(causal=causal, method=method, fully_masked=policy, return_weights=True)
            np.testing.assert_array_equal(out, np.full((4, 2), fill))
            assert A.shape == (4, 0)


def test_recurrences_at_no_key_and_no_query(rng):
    for fn, coefficients in ((rfa_attention, "gates"), (delta_rule_attention, "beta")):
        for method in ("auto", "equation", "scan"):
            out, A = fn(np.zeros((2, 0, 3)), np.zeros((2, 0, 3)), np.zeros((2, 0, 2)), np.zeros(0), elu_feature_map,
                        method=method, return_weights=True)
            assert out.shape == (2, 0, 2) and A.shape == (2, 0, 0), coefficients
        with pytest.raises(ValueError, match=r"feature_map gave no feature \(F=0\) for q of shape \(5, 0\)"):
            fn(np.zeros((5, 0)), np.zeros((5, 0)), np.ones((5, 2)), np.full(5, 0.5), elu_feature_map)


# --- NaN and Inf reach only the rows that may see them ----------------------------------------------------------

GARBAGE = {"nan": np.nan, "inf": np.inf, "-inf": -np.inf}
SHAPES = {True: [(7, 7, 4), (5, 8, 3)], "bottom-right": [(5, 8, 5), (8, 5, 2)]}   # n, m, the spoiled key


def options(mech):
    """The option sets to try: Performer with and without its official stabiliser (and ε)."""
    if mech.id == "performer_positive":
        return [{}, {"stabilize": True}, {"stabilize": True, "eps": 1e-3}]
    if mech.id == "performer_trig":
        return [{}, {"stabilize": True}]
    return [{}]


@pytest.mark.parametrize("garbage", list(GARBAGE))
@pytest.mark.parametrize("where", ["k", "v"])
@pytest.mark.parametrize(("mech", "causal"), [(m, c) for m, c in settings(CAUSAL) if c is not False], ids=_id)
def test_a_spoiled_key_or_value_reaches_only_the_rows_that_see_it(rng, mech, causal, where, garbage):
    # Query i sees keys j <= i + δ (δ = 0 top-left, m − n bottom-right). A NaN in key 4 used to make rows 0–3 of
    # Performer's stabilised causal attention NaN: its key maximum ran over every position.
    for n, m, j0 in SHAPES[causal]:
        n, m = sizes(mech, causal, n, m)
        delta = 0 if causal is True else m - n
        blind = np.arange(n) + delta < j0                          # rows that may not see key j0
        q, k, v = 0.5 * rng.standard_normal((n, 4)), 0.5 * rng.standard_normal((m, 4)), rng.standard_normal((m, 3))
        spoiled_k, spoiled_v = k.copy(), v.copy()
        (spoiled_k if where == "k" else spoiled_v)[j0, 1] = GARBAGE[garbage]
        for opts in options(mech):
            outs = []
            for method in methods(mech, causal):
                clean = call(mech, q, k, v, causal, method, **opts).output
                out = call(mech, q, spoiled_k, spoiled_v, causal, method, **opts).output
                np.testing.assert_array_equal(out[blind], clean[blind], err_msg=f"{method} {opts} n={n} m={m}")
                assert np.isfinite(out[blind]).all()
                if garbage == "nan":                               # every row that sees the NaN has one
                    assert np.isnan(out[~blind]).any(axis=-1).all(), f"{method} {opts}"
                outs.append(out)
            if garbage == "nan":
                for out in outs[1:]:
                    np.testing.assert_allclose(out, outs[0], rtol=1e-12, atol=1e-12, equal_nan=True)


@pytest.mark.parametrize("garbage", list(GARBAGE))
@pytest.mark.parametrize(("mech", "causal"), settings(LINEAR), ids=_id)
def test_a_spoiled_query_reaches_only_its_own_row(rng, mech, causal, garbage):
    # Trig features with the official stabiliser took the query shift over the whole sequence, so one query's
    # NaN reached every row: queries are now shifted by their own ‖q‖²/2.
    n, m = sizes(mech, causal, 6, 8)
    q, k, v = 0.5 * rng.standard_normal((n, 4)), 0.5 * rng.standard_normal((m, 4)), rng.standard_normal((m, 3))
    spoiled = q.copy()
    spoiled[2, 0] = GARBAGE[garbage]
    others = np.arange(n) != 2
    for opts in options(mech):
        for method in methods(mech, causal):
            clean = call(mech, q, k, v, causal, method, **opts).output
            out = call(mech, spoiled, k, v, causal, method, **opts).output
            np.testing.assert_array_equal(out[others], clean[others], err_msg=f"{method} {opts}")


# --- validation before anything indexes a shape -----------------------------------------------------------------

BAD_ARRAYS = [
    (np.ones((4, 3), dtype=np.int64), TypeError, "must be a real floating-point array, got dtype int64"),
    (np.ones((4, 3), dtype=bool), TypeError, "must be a real floating-point array, got dtype bool"),
    (np.ones((4, 3), dtype=complex), TypeError, "must be a real floating-point array, got dtype complex128"),
    (np.ones(3), ValueError, r"must have shape \(..., length, dim\), got shape \(3,\)"),
    (np.float64(1.0), ValueError, r"must have shape \(..., length, dim\), got shape \(\)"),
    (None, TypeError, "must be a real floating-point array, got dtype object"),
]


@pytest.mark.parametrize("name", ["q", "k", "v"])
@pytest.mark.parametrize(("bad", "error", "match"), BAD_ARRAYS, ids=["int", "bool", "complex", "1-D", "0-D", "None"])
@pytest.mark.parametrize(("mech", "causal"), settings(LINEAR), ids=_id)
def test_bad_arrays_are_named_in_every_alignment(mech, causal, name, bad, error, match):
    # rfa and delta_rule took n and m from the shapes (IndexError for 1-D q) before validating; the
    # bottom-right path with n != m is tried explicitly.
    n, m = sizes(mech, causal, 4, 6)
    args = {"q": np.ones((n, 3)), "k": np.ones((m, 3)), "v": np.ones((m, 2))}
    args[name] = bad
    with pytest.raises(error, match=f"{name} {match}"):
        call(mech, args["q"], args["k"], args["v"], causal, methods(mech, causal)[-1])


@pytest.mark.parametrize(("fn", "name"), [(rfa_attention, "gates"), (delta_rule_attention, "beta")])
@pytest.mark.parametrize(("bad", "error", "match"), [
    (np.full(4, 0.5, dtype=complex), TypeError, "must be a real floating-point array, got dtype complex128"),
    (np.ones(4, dtype=bool), TypeError, "must be a real floating-point array, got dtype bool"),
    (np.float64(0.5), ValueError, r"must have at least 1 dimensions, got shape \(\)"),
])
def test_recurrence_coefficients_are_validated(fn, name, bad, error, match):
    with pytest.raises(error, match=f"{name} {match}"):
        fn(np.ones((4, 3)), np.ones((4, 3)), np.ones((4, 2)), bad, elu_feature_map)


@pytest.mark.parametrize("fn", [rfa_attention, delta_rule_attention])
def test_recurrences_refuse_maps_that_are_not_real_callables(fn):
    args = (np.ones((4, 3)), np.ones((4, 3)), np.ones((4, 2)), np.full(4, 0.5))
    with pytest.raises(TypeError, match="feature_map must be a callable φ .* got NoneType"):
        fn(*args, None)
    with pytest.raises(TypeError, match="feature_map must return real numbers, but gave dtype complex128"):
        fn(*args, lambda x: elu_feature_map(x) + 1j)
    with pytest.raises(TypeError, match="return_weights must be True or False, got 'yes'"):
        fn(*args, elu_feature_map, return_weights="yes")


# --- memory -----------------------------------------------------------------------------------------------------

@pytest.fixture
def budget_64k():
    """A memory budget of 64 KiB, restored afterwards."""
    previous = set_memory_budget(2**16)
    yield 2**16
    set_memory_budget(previous)


@pytest.mark.parametrize(("mech", "causal"), settings(LINEAR), ids=_id)
def test_default_method_streams_above_the_budget_and_never_forms_n_by_m(rng, budget_64k, mech, causal):
    # n = m = 2048: an n × m float64 array is 32 MiB, 512 times the budget. The default method must stream, and
    # its peak allocation stay far below one n × m array (features, outputs and kernel copies: < 1 MiB here);
    # weights are refused before allocating.
    n = m = 2048
    q, k, v = 0.5 * rng.standard_normal((n, 4)), 0.5 * rng.standard_normal((m, 4)), rng.standard_normal((m, 2))
    opts = {"num_features": 8} if mech.id.startswith("performer") else {}   # few features: quick without the JIT
    mech.apply(q, k, v, causal=causal, rng=0, **opts)              # first call: Numba compiles or loads its kernel
    tracemalloc.start()
    try:
        out = mech.apply(q, k, v, causal=causal, rng=0, **opts).output
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert out.shape == (n, 2) and np.isfinite(out).all()
    assert peak < n * m * 8 / 4, f"peak {peak / 2**20:.1f} MiB"
    with pytest.raises(MemoryBudgetError, match=r"weights \(return_weights=True\) of shape \(2048, 2048\) would take "
                                                r"0.0312 GiB"):
        mech.apply(q, k, v, causal=causal, rng=0, return_weights=True, **opts)
