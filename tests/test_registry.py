"""The catalogue: records are complete and consistent, and every ``apply`` obeys the shared properties."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from refattn import registry
from refattn.registry import AttentionResult, Mechanism

CATALOGUE = Path(__file__).resolve().parents[2] / "shared" / "MECHANISMS.md"
APPLIABLE = [m for m in registry.all() if m.apply is not None]
CAUSAL = [m for m in APPLIABLE if m.causal]
INCREMENTAL = [m for m in CAUSAL if m.incremental]


def catalogue_ids(section: int) -> list[str]:
    text = CATALOGUE.read_text(encoding="utf-8")
    part = text.split(f"## {section}.")[1].split("\n## ")[0]
    return re.findall(r"^\| `([a-z_0-9]+)`", part, flags=re.M)


@pytest.mark.skipif(not CATALOGUE.exists(), reason="shared/MECHANISMS.md is beside the repo only in the workspace")
def test_every_vanilla_id_of_the_catalogue_is_registered():
    assert set(catalogue_ids(1)) <= set(registry.ids())


def test_records_are_complete():
    for m in registry.all():
        for name in ("id", "title", "family", "section", "paper", "equation", "time", "memory"):
            assert getattr(m, name), f"{m.id}: empty {name}"
        assert "arXiv:" in m.paper, m.id
        assert callable(m.function), m.id


def test_get_and_unknown_id():
    assert registry.get("sdpa").id == "sdpa"
    with pytest.raises(KeyError, match="no mechanism 'flash'; known ids: softmax, sdpa"):
        registry.get("flash")


def test_components_and_only_components_have_no_apply():
    with pytest.raises(ValueError, match="components, and only components"):
        Mechanism("x", "x", "vanilla", "1", "p", "e", "t", "m", False, "attention", print)


def _lengths(mech, n=5, m=7):
    """n != m where the mechanism takes two sequences, else its own example length twice."""
    return (n, m) if mech.cross else (mech.example_length, mech.example_length)


def _inputs(seed, batch=(), n=5, m=7, d=4):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((*batch, n, d)), rng.standard_normal((*batch, m, d)),
            rng.standard_normal((*batch, m, d)))


def _rows(weights):
    """Weights as (..., n, m) with any head axis folded into the batch."""
    return weights.reshape(-1, *weights.shape[-2:])


@pytest.mark.parametrize("mech", APPLIABLE, ids=lambda m: m.id)
def test_apply_returns_output_and_row_stochastic_weights(mech):
    n, m = _lengths(mech)
    q, k, v = _inputs(1, n=n, m=m)
    result = mech.apply(q, k, v, rng=3)
    assert isinstance(result, AttentionResult)
    assert result.output.shape == (n, 4)
    A = _rows(result.weights)
    assert A.shape[-2:] == (n, m)
    assert np.all(A >= 0) or not mech.nonnegative
    sums = A.sum(axis=-1)
    if mech.normalized:
        np.testing.assert_allclose(sums[sums != 0], 1.0, rtol=0, atol=1e-15 * m)


@pytest.mark.parametrize("mech", [m for m in APPLIABLE if not m.position_dependent], ids=lambda m: m.id)
def test_apply_is_query_permutation_equivariant(mech):
    n, m = _lengths(mech)
    q, k, v = _inputs(2, n=n, m=m)
    perm = np.random.default_rng(0).permutation(n)
    out = mech.apply(q, k, v, rng=3).output
    np.testing.assert_allclose(mech.apply(q[perm], k, v, rng=3).output, out[perm], rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("mech", APPLIABLE, ids=lambda m: m.id)
def test_apply_same_rng_same_result(mech):
    q, k, v = _inputs(4, (), *_lengths(mech))
    np.testing.assert_array_equal(mech.apply(q, k, v, rng=9).output, mech.apply(q, k, v, rng=9).output)


@pytest.mark.parametrize("mech", APPLIABLE, ids=lambda m: m.id)
def test_apply_batch_equals_stack_of_single_calls(mech):
    q, k, v = _inputs(5, (3,), *_lengths(mech))
    lengths = {"lengths": np.array([7, 2, 5])} if mech.id == "padding_mask" else {}
    out = mech.apply(q, k, v, rng=3, **lengths).output
    for b in range(3):
        single = {"lengths": lengths["lengths"][b]} if lengths else {}
        np.testing.assert_allclose(out[b], mech.apply(q[b], k[b], v[b], rng=3, **single).output,
                                   rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize(("mech", "causal"), [(m, True) for m in CAUSAL] + [(m, "bottom-right") for m in INCREMENTAL],
                         ids=lambda x: x.id if isinstance(x, Mechanism) else str(x))
def test_apply_causal_outputs_ignore_the_future(mech, causal):
    n, m = _lengths(mech)
    q, k, v = _inputs(6, n=n, m=m)
    out = mech.apply(q, k, v, causal=causal, rng=3, lengths=m) if mech.id == "padding_mask" else \
        mech.apply(q, k, v, causal=causal, rng=3)
    first_hidden = 3 + 1 + (0 if causal is True else m - n)          # keys row 3 may not see
    k[first_hidden:], v[first_hidden:] = np.nan, np.nan
    out2 = mech.apply(q, k, v, causal=causal, rng=3, lengths=m) if mech.id == "padding_mask" else \
        mech.apply(q, k, v, causal=causal, rng=3)
    np.testing.assert_array_equal(out2.output[:4], out.output[:4])


def test_catalogue_markdown_has_a_row_per_mechanism():
    rows = [line for line in registry.catalogue_markdown().splitlines() if line.startswith("| `")]
    assert [r.split("`")[1] for r in rows] == registry.ids()


@pytest.mark.parametrize("mech", INCREMENTAL, ids=lambda m: m.id)
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
    extra = {"lengths": m} if mech.id == "padding_mask" else {}
    full = mech.apply(q_all, k, v, causal=True, rng=3, **extra).output
    last = mech.apply(q, k, v, causal="bottom-right", rng=3, **extra).output
    np.testing.assert_allclose(last[-min(n, m):], full[-min(n, m):], rtol=1e-13, atol=1e-13)
    np.testing.assert_array_equal(last[: max(n - m, 0)], 0.0)
