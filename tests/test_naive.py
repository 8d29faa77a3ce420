"""Every registered mechanism against its naive twin in ``tests/naive.py``: the same options and draws on both
sides, every causal setting the record takes, n != m where it allows it, and bottom-right with more and fewer
queries than keys. Driven by the registry, so a mechanism cannot be registered without its twin."""
from __future__ import annotations

import numpy as np
import pytest

from refattn import registry

from .naive import NAIVE

APPLIABLE = [m for m in registry.all() if m.apply is not None]
TIGHT = {"rtol": 1e-12, "atol": 1e-12}


def test_every_mechanism_with_an_apply_has_a_naive_twin_and_no_twin_is_orphaned():
    ids = {m.id for m in APPLIABLE}
    assert not ids - set(NAIVE), f"registered without a naive twin in tests/naive.py: {sorted(ids - set(NAIVE))}"
    assert not set(NAIVE) - ids, f"naive twins of no registered mechanism: {sorted(set(NAIVE) - ids)}"


def _shapes(mech, causal):
    """(n, m): n != m where the record is cross, else its lengths; bottom-right also n = L − 3 and L + 2."""
    L = mech.example_length
    shapes = [(5, 7)] if mech.cross else [(t, t) for t in (L, *NAIVE[mech.id].lengths)]
    return shapes + ([(L - 3, L), (L + 2, L)] if causal == "bottom-right" else [])


CASES = [(mech, causal, n, m, setting) for mech in APPLIABLE if mech.id in NAIVE for causal in mech.causal_settings
         for n, m in _shapes(mech, causal) for setting in range(len(NAIVE[mech.id].options))]


def _qkv(rng, mech, n, m, batch=(), d=4):
    d_v = d if NAIVE[mech.id].value_width_d else 3
    q, k, v = (rng.standard_normal((*batch, n, d)), rng.standard_normal((*batch, m, d)),
               rng.standard_normal((*batch, m, d_v)))
    return (q, q.copy(), v) if mech.shared_qk else (q, k, v)


@pytest.mark.parametrize(("mech", "causal", "n", "m", "setting"), CASES,
                         ids=[f"{c[0].id}-{c[1]}-{c[2]}x{c[3]}-{c[4]}" for c in CASES])
def test_apply_equals_the_naive_loop(rng, mech, causal, n, m, setting):
    case = NAIVE[mech.id]
    q, k, v = _qkv(rng, mech, n, m)
    options = case.options[setting](rng, n, m, q.shape[-1], causal)
    out = mech.apply(q, k, v, causal=causal, **options).output     # no rng: every draw is an explicit option
    np.testing.assert_allclose(out, case.fn(q, k, v, causal, **options), **TIGHT,
                               err_msg=f"{mech.id}, causal={causal!r}, n={n}, m={m}, options {options}")


@pytest.mark.parametrize(("mech", "causal"), [(m, c) for m in APPLIABLE if m.id in NAIVE for c in m.causal_settings],
                         ids=lambda x: getattr(x, "id", repr(x)))
def test_batched_apply_equals_the_naive_loop_per_sequence(rng, mech, causal):
    case = NAIVE[mech.id]
    n, m = _shapes(mech, causal)[-1]                               # bottom-right: n > m, zero first rows
    q, k, v = _qkv(rng, mech, n, m, batch=(2,))
    options = case.options[0](rng, n, m, q.shape[-1], causal)
    out = mech.apply(q, k, v, causal=causal, **options).output
    for b in range(2):
        np.testing.assert_allclose(out[b], case.fn(q[b], k[b], v[b], causal, **options), **TIGHT,
                                   err_msg=f"{mech.id}, causal={causal!r}, batch row {b}")
