"""Random Synthesizer: R = 0 is uniform attention, the weights as softmax(R) written out, no input read, the rows
of the queries' positions (bottom-right decoding), the factorised form, the mixture with the dot product, the
draw, and bad input. The naive loop of tests/naive.py and the registry-driven tests cover the rest."""
from __future__ import annotations

import numpy as np
import pytest

from refattn import registry, scaled_dot_product_attention
from refattn.common import MemoryBudgetError
from refattn.prior import (
    FactorizedRandomSynthesizer,
    RandomSynthesizer,
    init_random_synthesizer,
    random_logits,
    synthesizer_random_attention,
)

TIGHT = {"rtol": 1e-12, "atol": 1e-12}


def _qkv(rng, n=5, m=7, d=4, d_v=3, batch=()):
    return (rng.standard_normal((*batch, n, d)), rng.standard_normal((*batch, m, d)),
            rng.standard_normal((*batch, m, d_v)))


def _softmax_rows(S):
    e = np.exp(S - S.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_zero_logits_are_uniform_attention(rng):
    """R = 0: the mean of the values (non-causal), the running mean (causal), and for the last n of m positions
    the running mean up to each one (bottom-right); written with cumsum, not softmax."""
    q, k, v = _qkv(rng, n=7, m=7)
    zero = RandomSynthesizer(np.zeros((7, 7)))
    np.testing.assert_allclose(synthesizer_random_attention(q, k, v, params=zero),
                               np.broadcast_to(v.mean(axis=0), (7, 3)), **TIGHT)
    running = np.cumsum(v, axis=0) / np.arange(1, 8)[:, None]
    np.testing.assert_allclose(synthesizer_random_attention(q, k, v, params=zero, causal=True), running, **TIGHT)
    np.testing.assert_allclose(synthesizer_random_attention(q[:3], k, v, params=zero, causal="bottom-right"),
                               running[4:], **TIGHT)
    # and softmax attention with equal scores (q = 0) is the same uniform attention
    np.testing.assert_allclose(synthesizer_random_attention(q, k, v, params=zero, causal=True),
                               scaled_dot_product_attention(np.zeros_like(q), k, v, causal=True), **TIGHT)


def test_weights_are_the_softmax_of_the_logits_and_read_no_input(rng):
    q, k, v = _qkv(rng, batch=(2,))
    R = rng.standard_normal((9, 9))
    out, A = synthesizer_random_attention(q, k, v, params=RandomSynthesizer(R), return_weights=True)
    np.testing.assert_allclose(A, np.broadcast_to(_softmax_rows(R[:5, :7]), (2, 5, 7)), **TIGHT)
    np.testing.assert_allclose(out, _softmax_rows(R[:5, :7]) @ v, **TIGHT)
    other = synthesizer_random_attention(np.full_like(q, np.nan), np.full_like(k, np.inf), v,
                                         params=RandomSynthesizer(R))
    np.testing.assert_array_equal(other, out)


def test_bottom_right_queries_read_the_rows_of_their_positions(rng):
    """3 new queries at positions 4, 5, 6 of 7: rows 4..6 of R, keys j <= position."""
    q, k, v = _qkv(rng, n=3, m=7)
    R = rng.standard_normal((7, 7))
    _, A = synthesizer_random_attention(q, k, v, params=RandomSynthesizer(R), causal="bottom-right",
                                        return_weights=True)
    visible = np.arange(7)[None, :] <= np.arange(4, 7)[:, None]
    np.testing.assert_allclose(A, _softmax_rows(np.where(visible, R[4:], -np.inf)), **TIGHT)


def test_factorised_logits_are_r1_r2_transposed(rng):
    q, k, v = _qkv(rng, n=7, m=7)
    R1, R2 = rng.standard_normal((2, 8, 2))
    f = FactorizedRandomSynthesizer(R1, R2)
    np.testing.assert_allclose(random_logits(f), R1 @ R2.T, **TIGHT)
    assert np.linalg.matrix_rank(random_logits(f)) == 2
    for causal in (False, True):
        np.testing.assert_allclose(synthesizer_random_attention(q, k, v, params=f, causal=causal),
                                   synthesizer_random_attention(q, k, v, params=RandomSynthesizer(R1 @ R2.T),
                                                                causal=causal), **TIGHT)


def test_mixture_with_the_dot_product_written_out(rng):
    """R+V: softmax(α_R R + α_V QKᵀ/√d); the official random_plus mode is α = (1, 1)."""
    q, k, v = _qkv(rng)
    R = rng.standard_normal((7, 7))
    for alpha in ((1.0, 1.0), (0.25, 0.75)):
        _, A = synthesizer_random_attention(q, k, v, params=RandomSynthesizer(R), mix="dot", alpha=alpha,
                                            return_weights=True)
        np.testing.assert_allclose(A, _softmax_rows(alpha[0] * R[:5] + alpha[1] * (q @ k.T) / 2.0), **TIGHT)


def test_integer_mixture_weights_are_the_same_reals(rng):
    q, k, v = rng.standard_normal((3, 5, 4))
    params = RandomSynthesizer(rng.standard_normal((5, 5)))
    as_ints = synthesizer_random_attention(q, k, v, params=params, mix="dot", alpha=(0, 1))
    np.testing.assert_array_equal(as_ints, synthesizer_random_attention(q, k, v, params=params, mix="dot",
                                                                        alpha=(0.0, 1.0)))
    np.testing.assert_array_equal(as_ints, scaled_dot_product_attention(q, k, v))
    with pytest.raises(TypeError, match="alpha"):                  # bools are not weights
        synthesizer_random_attention(q, k, v, params=params, mix="dot", alpha=(False, True))


def test_draw_follows_the_official_initialisation():
    """Glorot uniform on the official (ℓ, heads, ℓ) variable: bound √(6/(ℓ + ℓ²)); R1, R2 of (k, heads, ℓ):
    √(6/(k(1 + ℓ)))."""
    p = init_random_synthesizer(3, 20)
    assert p.R.shape == (20, 20) and np.abs(p.R).max() <= np.sqrt(6 / 420)
    assert np.abs(p.R).max() > 0.95 * np.sqrt(6 / 420)             # 400 uniform draws reach the top 5% of the bound
    f = init_random_synthesizer(3, 20, rank=4)
    assert f.R1.shape == f.R2.shape == (20, 4) and max(np.abs(f.R1).max(), np.abs(f.R2).max()) <= np.sqrt(6 / 84)
    np.testing.assert_array_equal(init_random_synthesizer(3, 20).R, p.R)


def test_uniform_apply_draws_the_smallest_length_that_fits(rng):
    mech = registry.get("synthesizer_random")
    q, k, v = _qkv(rng, n=9, m=7)
    assert mech.apply(q, k, v, rng=1, return_draws=True).draws["params"].length == 9
    assert mech.apply(q[:3], k, v, rng=1, causal="bottom-right", return_draws=True).draws["params"].length == 7
    drawn = mech.apply(q, k, v, rng=1, max_length=12, return_draws=True).draws
    assert drawn["params"].length == 12 and drawn["dense_params"] is None


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"params": RandomSynthesizer(np.zeros((6, 6)))}, ValueError, "ℓ >= 7"),
    ({"params": RandomSynthesizer(np.zeros((7, 8)))}, ValueError, "square"),
    ({"params": FactorizedRandomSynthesizer(np.zeros((7, 2)), np.zeros((7, 3)))}, ValueError, "R2"),
    ({"params": np.zeros((7, 7))}, TypeError, "params"),
    ({"rng": 0, "mix": "random"}, ValueError, "mix"),
    ({"rng": 0, "rank": 0}, ValueError, "rank"),
    ({"rng": 0, "max_length": 6}, ValueError, "ℓ >= 7"),
    ({}, ValueError, r"synthesizer_random draws the random synthesizer's parameters from rng: pass rng="),
])
def test_bad_input_is_named(rng, kwargs, error, match):
    q, k, v = _qkv(rng)
    with pytest.raises(error, match=match):
        synthesizer_random_attention(q, k, v, **kwargs)


def test_a_random_synthesizer_beyond_the_memory_budget_is_refused_before_allocating():
    """R is ℓ × ℓ: ℓ = 65536 (32 GiB) is a named MemoryBudgetError when drawn, the logits when given factorised."""
    q = np.zeros((65536, 2))
    with pytest.raises(MemoryBudgetError, match="random synthesizer's R"):
        synthesizer_random_attention(q, q, q[:, :1], rng=0)
    with pytest.raises(MemoryBudgetError, match="synthesized logits"):
        synthesizer_random_attention(q, q, q[:, :1], params=init_random_synthesizer(0, 65536, rank=1))
