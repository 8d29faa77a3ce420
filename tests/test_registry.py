"""The catalogue: records are complete and consistent, every ``apply`` obeys the shared properties, every exact
limit holds. Everything here iterates the registry: a new record is held to all of it without being named."""
from __future__ import annotations

import importlib
import pkgutil
import re

import numpy as np
import pytest

from refattn import registry, scaled_dot_product_attention
from refattn.mechanism import AttentionResult, Mechanism

APPLIABLE = [m for m in registry.all() if m.apply is not None]
CAUSAL = [m for m in APPLIABLE if m.causal]
INCREMENTAL = [m for m in CAUSAL if m.incremental]
EXACT = [(m, c) for m in APPLIABLE if m.exact_options is not None for c in m.causal_settings]
TIGHT = {"rtol": 1e-12, "atol": 1e-12}


def _id(x):
    return x.id if isinstance(x, Mechanism) else repr(x)


def test_every_record_declared_in_a_family_is_registered():
    """The registry is the one list: a module that declares a record its family's list forgot fails here."""
    registered = {id(m) for m in registry.all()}
    for family, records in registry.FAMILIES.items():
        package = importlib.import_module(records[0].function.__module__.rpartition(".")[0])
        for info in pkgutil.iter_modules(package.__path__):
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            for name, value in vars(module).items():
                if isinstance(value, Mechanism) and value.family == family:
                    assert id(value) in registered, f"{module.__name__}.{name} ({value.id}) is not in {family}'s list"


def test_the_catalogue_of_the_survey_sections_1_to_8_has_84_ids():
    # MECHANISMS.md §1-§8: 84 ids (the number every figure, test vector and cross-check was built for)
    assert len(registry.ids()) == 84


def test_records_are_complete():
    for m in registry.all():
        for name in ("id", "title", "family", "section", "paper", "equation", "time", "memory", "exact_limit"):
            assert getattr(m, name), f"{m.id}: empty {name}"
        assert "arXiv:" in m.paper, m.id
        assert callable(m.function), m.id
        assert m.causal_settings or m.apply is None, f"{m.id}: apply takes no causal setting at all"


def test_each_record_lives_in_the_module_named_by_its_id():
    """``refattn/<family>/<id>.py`` (``global_`` for the keyword ``global``); variants share the module named by
    their common prefix (performer_positive and performer_trig in performer.py)."""
    for m in registry.all():
        found = [mod for mod in _record_modules() if any(r is m for r in _records_of(mod))]
        assert len(found) == 1, f"{m.id}: declared in {found}"
        stem = found[0].__name__.rsplit(".", 1)[1]
        assert stem in (m.id, m.id + "_") or m.id.startswith(stem + "_"), f"{m.id} lives in {found[0].__name__}"


def _record_modules():
    for family in registry.FAMILIES:
        package = importlib.import_module(f"refattn.{'core' if family == 'vanilla' else family}")
        for info in pkgutil.iter_modules(package.__path__):
            yield importlib.import_module(f"{package.__name__}.{info.name}")


def _records_of(module):
    return [value for name, value in vars(module).items() if name.startswith("RECORD") and
            isinstance(value, Mechanism)]


def test_get_and_unknown_id():
    assert registry.get("sdpa").id == "sdpa"
    with pytest.raises(KeyError, match="no mechanism 'flash'; known ids: softmax, sdpa"):
        registry.get("flash")


def test_components_and_only_components_have_no_apply():
    with pytest.raises(ValueError, match="components, and only components"):
        Mechanism(id="x", title="x", family="vanilla", section="1", paper="p", equation="e", time="t", memory="m",
                  kind="attention", function=print, causal=False, figure="a:b", exact_options=None,
                  exact_limit="none")


def _lengths(mech, n=5, m=7):
    """n != m where the mechanism takes two sequences, else its own example length twice."""
    return (n, m) if mech.cross else (mech.example_length, mech.example_length)


def _inputs(seed, batch=(), n=5, m=7, d=4, *, mech=None):
    """Seeded q, k, v; k is q for a shared-QK mechanism."""
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((*batch, n, d)), rng.standard_normal((*batch, m, d)),
               rng.standard_normal((*batch, m, d)))
    return (q, q.copy(), v) if mech is not None and mech.shared_qk else (q, k, v)


def _rows(weights):
    """Weights as (..., n, m) with any head axis folded into the batch."""
    return weights.reshape(-1, *weights.shape[-2:])


@pytest.mark.parametrize("mech", APPLIABLE, ids=_id)
def test_apply_returns_weights_only_when_asked(mech):
    q, k, v = _inputs(1, n=_lengths(mech)[0], m=_lengths(mech)[1], mech=mech)
    causal = mech.causal_settings[0]
    plain = mech.apply(q, k, v, causal=causal, rng=3)
    assert isinstance(plain, AttentionResult) and plain.weights is None and plain.allowed is None
    full = mech.apply(q, k, v, causal=causal, rng=3, return_weights=True)
    np.testing.assert_array_equal(full.output, plain.output)


@pytest.mark.parametrize(("mech", "causal", "example"),
                         [(m, c, e) for m in APPLIABLE for c in m.causal_settings for e in ({}, *m.examples)], ids=_id)
def test_apply_weights_rows_and_pattern(mech, causal, example):
    n, m = _lengths(mech)
    if causal == "bottom-right":
        n = m + 2                                                  # fully masked first rows too
    q, k, v = _inputs(1, n=n, m=m, mech=mech)
    result = mech.apply(q, k, v, causal=causal, rng=3, return_weights=True, **example)
    assert result.output.shape == (n, 4)
    A = _rows(result.weights)
    if mech.mixing == "channels":                                  # a d_v × d_v map of each token's channels
        assert A.shape[-2:] == (4, 4) and result.allowed is None
        np.testing.assert_allclose(result.output, v @ np.swapaxes(result.weights, -1, -2), **TIGHT)
    elif mech.mixing == "per_channel":                             # one (n, m) matrix per channel
        assert result.weights.shape == (4, n, m)
        np.testing.assert_allclose(result.output, np.einsum("cij,jc->ic", result.weights, v), **TIGHT)
    elif mech.mixing == "fourier":                                 # Re F_n, Im F_n; the channels' DFT as well
        assert result.weights.shape == (2, n, m)
        F_d = np.exp(-2j * np.pi * np.outer(np.arange(4), np.arange(4)) / 4)
        np.testing.assert_allclose(result.output, result.weights[0] @ v @ F_d.real - result.weights[1] @ v @ F_d.imag,
                                   **TIGHT)
    else:
        assert A.shape[-2:] == (n, m)
    assert np.all(A[~np.isnan(A)] >= 0) or not mech.nonnegative
    sums = A.sum(axis=-1)
    if mech.normalized and not example:                            # an example may add eps to the normaliser
        rows = (sums != 0) & ~np.isnan(sums)                       # NaN: fully masked under the "nan" policy
        np.testing.assert_allclose(sums[rows], 1.0, rtol=0, atol=1e-15 * m)
    if result.allowed is not None:                                 # nothing outside the reported pattern
        assert result.allowed.shape == result.weights.shape and result.allowed.dtype == bool
        nan_rows = np.isnan(result.weights).all(axis=-1, keepdims=True)   # the "nan" policy's fully masked rows
        np.testing.assert_array_equal(result.weights[~result.allowed & ~nan_rows], 0.0)


@pytest.mark.parametrize("mech", [m for m in APPLIABLE if not m.position_dependent], ids=_id)
def test_apply_is_query_permutation_equivariant(mech):
    n, m = _lengths(mech)
    q, k, v = _inputs(2, n=n, m=m, mech=mech)
    perm = np.random.default_rng(0).permutation(n)
    out = mech.apply(q, k, v, rng=3).output
    np.testing.assert_allclose(mech.apply(q[perm], k, v, rng=3).output, out[perm], rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("mech", APPLIABLE, ids=_id)
def test_apply_same_rng_same_result(mech):
    q, k, v = _inputs(4, (), *_lengths(mech), mech=mech)
    causal = mech.causal_settings[0]
    np.testing.assert_array_equal(mech.apply(q, k, v, causal=causal, rng=9).output,
                                  mech.apply(q, k, v, causal=causal, rng=9).output)


@pytest.mark.parametrize(("mech", "causal"), [(m, c) for m in APPLIABLE for c in m.causal_settings], ids=_id)
def test_apply_returns_its_draws_and_they_reproduce_the_result(mech, causal):
    """Another implementation can be fed the very draws: given back as options, without rng, they give the same
    result, bit for bit; a mechanism that declares no draw does not depend on rng at all."""
    n, m = _lengths(mech)
    q, k, v = _inputs(7, (2,), n=n + 2 if causal == "bottom-right" and not mech.cross else n, m=m, mech=mech)
    if causal == "bottom-right":
        q = q[:, :3]                                               # 3 new queries, the last 3 of m positions
    result = mech.apply(q, k, v, causal=causal, rng=3, return_weights=True, return_draws=True)
    assert mech.apply(q, k, v, causal=causal, rng=3).draws is None     # only when asked
    assert set(result.draws) == set(mech.draws)
    again = mech.apply(q, k, v, causal=causal, return_weights=True, return_draws=True, **result.draws)
    np.testing.assert_array_equal(again.output, result.output)
    np.testing.assert_array_equal(again.weights, result.weights)
    for name, draw in result.draws.items():                       # a draw given back is reported back as given
        assert again.draws[name] is draw or np.array_equal(again.draws[name], draw), name
    if not mech.draws:
        np.testing.assert_array_equal(mech.apply(q, k, v, causal=causal, rng=4).output, result.output)


def test_return_draws_is_checked():
    with pytest.raises(TypeError, match="return_draws"):
        registry.get("sdpa").apply(*_inputs(0), return_draws="yes")


@pytest.mark.parametrize("mech", APPLIABLE, ids=_id)
def test_apply_batch_equals_stack_of_single_calls(mech):
    q, k, v = _inputs(5, (3,), *_lengths(mech), mech=mech)
    causal = mech.causal_settings[0]
    out = mech.apply(q, k, v, causal=causal, rng=3).output
    for b in range(3):
        np.testing.assert_allclose(out[b], mech.apply(q[b], k[b], v[b], causal=causal, rng=3).output,
                                   rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize(("mech", "causal"), [(m, True) for m in CAUSAL] + [(m, "bottom-right") for m in INCREMENTAL],
                         ids=_id)
def test_apply_causal_outputs_ignore_the_future(mech, causal):
    """Rows 0-3 are unchanged when everything after their positions changes; where the record says the choice of
    pairs looks at later tokens (``future_independent=False``), the later keys carry zero weight and changing only
    the later values changes nothing."""
    n, m = _lengths(mech)
    q, k, v = _inputs(6, n=n, m=m, mech=mech)
    out = mech.apply(q, k, v, causal=causal, rng=3, return_weights=True)
    first_hidden = 3 + 1 + (0 if causal is True else m - n)          # keys row 3 may not see
    np.testing.assert_array_equal(_rows(out.weights)[:, :4, first_hidden:], 0.0)
    if mech.future_independent:
        k[first_hidden:], v[first_hidden:] = np.nan, np.nan
        if mech.shared_qk:
            q = k
    else:
        v[first_hidden:] = np.nan
    out2 = mech.apply(q, k, v, causal=causal, rng=3)
    np.testing.assert_array_equal(out2.output[:4], out.output[:4])


def test_catalogue_markdown_has_a_row_per_mechanism():
    rows = [line for line in registry.catalogue_markdown().splitlines() if line.startswith("| `")]
    assert [r.split("`")[1] for r in rows] == registry.ids()


@pytest.mark.parametrize("mech", INCREMENTAL, ids=_id)
@pytest.mark.parametrize("extra", [-4, 2])
def test_apply_bottom_right_equals_the_last_rows_of_causal_self_attention(mech, extra):
    # Decoding with a key/value cache: n new queries are the last n of the m positions. With
    # n > m the first n − m queries precede every key and are fully masked (zero rows).
    m = mech.example_length
    n = m + extra
    rng = np.random.default_rng(8)
    q_all, k, v = rng.standard_normal((m, 4)), rng.standard_normal((m, 4)), rng.standard_normal((m, 4))
    q = rng.standard_normal((n, 4))
    q[-min(n, m):] = q_all[-min(n, m):]
    full = mech.apply(q_all, k, v, causal=True, rng=3).output
    last = mech.apply(q, k, v, causal="bottom-right", rng=3).output
    np.testing.assert_allclose(last[-min(n, m):], full[-min(n, m):], rtol=1e-13, atol=1e-13)
    np.testing.assert_array_equal(last[: max(n - m, 0)], 0.0)


# --- exact limits -----------------------------------------------------------------------------------

def test_every_attention_record_states_its_exact_limit():
    """``exact_options`` is a field of every record; where it is None, ``exact_limit`` says why."""
    for m in APPLIABLE:
        if m.exact_options is None:
            assert m.exact_limit.startswith("none"), f"{m.id}: no exact options, and the limit text says none of why"


@pytest.mark.parametrize(("mech", "causal"), EXACT, ids=_id)
def test_exact_limit_equals_scaled_dot_product_attention(mech, causal):
    """apply(q, k, v, causal=c, **exact_options) is exact softmax attention, with n != m where the record takes two
    sequences (bottom-right: the last n of m positions, n < m and n > m)."""
    shapes = [_lengths(mech)]
    if causal == "bottom-right":
        L = mech.example_length
        shapes += [(L - 3, L), (L + 2, L)]
    for n, m in shapes:
        q, k, v = _inputs(11, (2,), n, m, mech=mech)
        options = mech.exact(n, m)
        got = mech.apply(q, k, v, causal=causal, rng=3, return_weights=True, **options)
        out, A = scaled_dot_product_attention(q, k, v, causal=causal, return_weights=True)
        np.testing.assert_allclose(got.output, out, **TIGHT, err_msg=f"{mech.id} {options} n={n} m={m}")
        np.testing.assert_allclose(got.weights.reshape(A.shape), A, **TIGHT)


@pytest.mark.parametrize("mech", [m for m in APPLIABLE if m.draws], ids=_id)
def test_a_missing_rng_gets_the_one_message_naming_the_id(mech):
    """ONE-DOOR's rule: without rng, a call either draws nothing (XCiT's default τ) or says "<id> draws <what> from
    rng: pass rng= (or <option>=)", whatever the function calls itself."""
    rng = np.random.default_rng(0)
    n = mech.example_length
    q, k, v = rng.standard_normal((n, 4)), rng.standard_normal((n, 4)), rng.standard_normal((n, 4))
    try:
        result = mech.apply(q, q if mech.shared_qk else k, v, causal=mech.causal_settings[0], return_draws=True)
    except ValueError as error:                                    # either outcome is asserted: the message is the test
        message = rf"{mech.id} draws .+ from rng: pass rng= \(or ({'|'.join(mech.draws)})=\)"
        assert re.fullmatch(message, str(error)), str(error)  # noqa: PT017
    else:                                                          # nothing was drawn: every draw is a fixed value
        assert result.output.shape == (n, 4)
