"""Every registered mechanism under hostile input: a named TypeError/ValueError, or one result whatever the method.

Hypothesis draws, for each record with an ``apply``: shapes from 0-D to 4-D with n, m, d, d_v and the batch
down to 0; dtypes from bool, int and complex to float16/32/64; malformed arguments (None, ragged lists,
strings); NaN and Inf placed anywhere in the keys and values; and the shared options (``causal`` values good
and bad, ``rng`` seeds good and bad, ``return_weights``, every ``method`` the record lists) with the option
settings the record names as its ``examples``. Each call must
either return, with every method that returns giving the same output, or raise a TypeError or ValueError whose
message names an argument. A second property puts NaN in a key that some rows may not see and checks that
those rows do not change. Nothing here names an id: a mechanism registered tomorrow is held to all of it.

Hypothesis runs derandomised (tests/conftest.py), so the examples are the same on every run.
"""
from __future__ import annotations

import inspect
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refattn import registry
from refattn.mechanism import AttentionResult

APPLIABLE = [m for m in registry.all() if m.apply is not None]
SHARED_NAMES = {"q", "k", "v", "n", "m", "d_k", "d_v", "causal", "rng", "return_weights", "method", "dtype"}
BAD_CAUSAL = (1, 0, "yes", None, "top-right")
TIGHT = {"rtol": 1e-12, "atol": 1e-12}
# Between methods, the sums run in other orders (tiles, CSR rows, scans): the tests of each family hold them
# to 1e-13 .. 1e-12 relative; 1e-10 absolute covers entries near 0 of outputs of size up to ~10 here.
ACROSS_METHODS = {"rtol": 1e-11, "atol": 1e-10}


def _argument_names(mech) -> set[str]:
    """Names an error may cite: the shared ones, every option of the mechanism's own apply, and its door's inputs."""
    own = set(inspect.signature(mech.apply.__wrapped__).parameters)
    door = getattr(mech.apply, "door", None)                       # Mechanism.of: a layer door says x_q, x_kv, x_v
    return SHARED_NAMES | own | (set(inspect.signature(door).parameters) if door else set())


def _names_an_argument(message: str, names: set[str]) -> bool:
    return any(re.search(rf"(?<![\w.]){re.escape(name)}(?![\w(])", message) for name in names)


@st.composite
def _array(draw, shape, dtype):
    """An array of ``shape`` and ``dtype``, finite normal values, sometimes with NaN/Inf sprinkled in."""
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    if draw(st.booleans()) and x.size:
        spots = rng.random(shape) < 0.2
        x = np.where(spots, draw(st.sampled_from([np.nan, np.inf, -np.inf])), x)
    if dtype == "complex":
        return x + 1j
    if dtype == "int":
        return np.nan_to_num(x).astype(np.int64)
    if dtype == "bool":
        return x > 0
    return x.astype(dtype)


@st.composite
def _call(draw, mech):
    """(q, k, v, options) for one call, mostly well-formed, sometimes not."""
    L = mech.example_length
    if mech.cross:
        n, m = draw(st.integers(0, 6)), draw(st.integers(0, 6))
    else:
        n = m = draw(st.sampled_from([L, L, L, 0, 1, L + 1]))
    causal = draw(st.sampled_from(mech.causal_settings + mech.causal_settings + BAD_CAUSAL))
    if causal == "bottom-right":
        n = draw(st.sampled_from([n, max(m - 2, 0), m + 2]))
    d, d_v = draw(st.sampled_from([4, 4, 1, 0])), draw(st.sampled_from([4, 4, 2, 0]))
    lead = draw(st.sampled_from([(), (), (2,), (0,), (2, 1)]))
    dtype = draw(st.sampled_from(["float64"] * 6 + ["float32", "float16", "int", "bool", "complex"]))
    q, k, v = (draw(_array((*lead, length, width), dtype)) for length, width in ((n, d), (m, d), (m, d_v)))
    if mech.shared_qk and draw(st.sampled_from([True, True, False])):
        k = q                                                      # the keys are the queries (else refused)
    malformed = draw(st.sampled_from([None] * 8 + ["none", "1-D", "0-D", "ragged", "string", "list"]))
    if malformed is not None:
        q = {"none": None, "1-D": np.ones(3), "0-D": np.float64(1.0), "ragged": [[1.0, 2.0], [3.0]],
             "string": "q", "list": np.asarray(q).tolist()}[malformed]
    options = {"causal": causal,
               "rng": draw(st.sampled_from([0, 3, 3, -1, "seed", None])),
               "return_weights": draw(st.sampled_from([False, True, 1])),
               **draw(st.sampled_from(({},) + mech.examples))}
    return q, k, v, options


def _run(mech, q, k, v, options, method):
    """(result, None) or (None, exception); any exception but a named TypeError/ValueError fails here."""
    extra = {} if method is None else {"method": method}
    try:
        return mech.apply(q, k, v, **options, **extra), None
    except (TypeError, ValueError) as error:
        assert _names_an_argument(str(error), _argument_names(mech)), (  # noqa: PT017 - the message is the test
            f"{mech.id} method={method}: {type(error).__name__} names no argument: {error}")
        return None, error


@pytest.mark.parametrize("mech", APPLIABLE, ids=lambda m: m.id)
@settings(max_examples=40)
@given(data=st.data())
def test_named_error_or_the_same_result_by_every_method(mech, data):
    q, k, v, options = data.draw(_call(mech))
    methods = mech.methods or (None,)
    runs = {method: _run(mech, q, k, v, options, method) for method in methods}
    done = {method: result for method, (result, error) in runs.items() if error is None}
    refused = {method: error for method, (result, error) in runs.items() if error is not None}
    for method, error in refused.items():                          # a method may only refuse what the others
        if done:                                                   # refuse, or a setting it cannot take
            assert "method" in str(error), f"{mech.id}: {sorted(done)} returned but {method} raised {error!r}"
    if not done:
        return
    first, *others = done.values()
    assert isinstance(first, AttentionResult)
    for method, result in zip(list(done)[1:], others, strict=True):
        np.testing.assert_allclose(result.output, first.output, **ACROSS_METHODS,
                                   err_msg=f"{mech.id}: method {method} against {list(done)[0]}")
        if options["return_weights"] is True:
            np.testing.assert_allclose(result.weights, first.weights, **ACROSS_METHODS)


@pytest.mark.parametrize("mech", [m for m in APPLIABLE if not m.content_selected], ids=lambda m: m.id)
@settings(max_examples=15)
@given(data=st.data())
def test_nan_in_a_key_a_row_may_not_see_never_reaches_that_row(mech, data):
    L = mech.example_length
    n, m = (data.draw(st.integers(1, 6)), data.draw(st.integers(2, 6))) if mech.cross else (L, L)
    causal = data.draw(st.sampled_from(mech.causal_settings))
    if causal == "bottom-right" and mech.cross:
        n = data.draw(st.integers(1, m + 2))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    q, k, v = rng.standard_normal((n, 4)), rng.standard_normal((m, 4)), rng.standard_normal((m, 4))
    seed = data.draw(st.integers(0, 100))
    example = data.draw(st.sampled_from(({},) + mech.examples))
    reference = mech.apply(q, k, v, causal=causal, rng=seed, return_weights=True, **example)
    if reference.allowed is None:
        return                                                     # every row may see every key
    allowed = reference.allowed.reshape(-1, n, m).all(axis=0)      # heads: a key hidden from the row in all
    hidden = np.flatnonzero(~allowed.all(axis=0))                  # keys some row may not see
    if hidden.size == 0:
        return
    j = int(data.draw(st.sampled_from(hidden.tolist())))
    rows = ~reference.allowed.reshape(-1, n, m)[:, :, j].any(axis=0)
    poison = data.draw(st.sampled_from([np.nan, np.inf]))
    k[j], v[j] = poison, poison
    for method in mech.methods or (None,):
        extra = example | ({} if method is None else {"method": method})
        try:
            before = mech.apply(q * 1.0, np.where(np.isfinite(k), k, 0.0), np.where(np.isfinite(v), v, 0.0),
                                causal=causal, rng=seed, **extra)
        except ValueError as error:                                # a setting this method does not take
            assert "method" in str(error)                          # noqa: PT017 - the message is the test
            continue
        after = mech.apply(q, k, v, causal=causal, rng=seed, **extra)
        np.testing.assert_allclose(after.output[rows], before.output[rows], **TIGHT,
                                   err_msg=f"{mech.id} method={method}: key {j} leaked into rows that may not see it")


@pytest.mark.parametrize("mech", [m for m in APPLIABLE if m.content_selected], ids=lambda m: m.id)
@settings(max_examples=15)
@given(data=st.data())
def test_a_nan_key_reaches_only_the_rows_that_select_it(mech, data):
    """Content decides which pairs are computed, so a non-finite key may land in another selection than its finite
    value would; masking by selection still keeps it out of every row the call's own ``allowed`` hides it from."""
    L = mech.example_length
    n, m = (data.draw(st.integers(1, 6)), data.draw(st.integers(2, 6))) if mech.cross else (L, L)
    causal = data.draw(st.sampled_from(mech.causal_settings))
    if causal == "bottom-right" and mech.cross:
        n = data.draw(st.integers(1, m + 2))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    q, k, v = rng.standard_normal((n, 4)), rng.standard_normal((m, 4)), rng.standard_normal((m, 4))
    j = data.draw(st.integers(0, m - 1))
    poison = data.draw(st.sampled_from([np.nan, np.inf, -np.inf]))
    k[j], v[j] = poison, poison
    if mech.shared_qk:
        q = k                                                      # the query at j is poisoned too
    seed = data.draw(st.integers(0, 100))
    example = data.draw(st.sampled_from(({},) + mech.examples))
    for method in mech.methods or (None,):
        extra = example | ({} if method is None else {"method": method})
        result = mech.apply(q, k, v, causal=causal, rng=seed, return_weights=True, **extra)
        allowed = np.ones((n, m), dtype=bool) if result.allowed is None else result.allowed.reshape(-1, n, m)
        rows = ~np.reshape(allowed, (-1, n, m))[:, :, j].any(axis=0)
        if mech.shared_qk:
            rows[j] = False
        assert np.all(np.isfinite(result.output[rows])), f"{mech.id} method={method}: key {j} leaked into rows {rows}"
