"""Adaptive attention span: the mask's values and shape, a hand-computed case, the exact limit against causal multi-head
attention, the post-softmax renormalisation against the additive log-mask form, the official layout, the gradients
with respect to z held to central differences with a derived tolerance, the span loss, the cache length, bad input.
The naive loop of tests/naive.py and the registry-driven tests cover the rest."""
from __future__ import annotations

import math

import numpy as np
import pytest

from refattn import multi_head_attention, registry, scaled_dot_product_attention
from refattn.heads import (
    adaptive_span_attention,
    adaptive_span_grad_z,
    adaptive_span_heads,
    adaptive_span_mask,
    span_cache_length,
    span_loss,
)

from .naive import random_params

TIGHT = {"rtol": 1e-12, "atol": 1e-12}
EPS = np.finfo(np.float64).eps


def _heads(rng, h=3, n=6, m=8, d=4, d_v=3, batch=()):
    return (rng.standard_normal((*batch, h, n, d)), rng.standard_normal((*batch, h, m, d)),
            rng.standard_normal((*batch, h, m, d_v)))


def test_mask_is_one_then_a_ramp_then_zero(rng):
    """m_z(x) = 1 for x <= z, (R + z − x)/R on the ramp, 0 from z + R on, and 0 outside the causal window."""
    z, R, S = np.array([0.0, 1.5, 4.25]), 2.0, 6
    M = adaptive_span_mask(z, 9, max_span=S, ramp=R)
    assert M.shape == (3, 9, 9) and M.min() >= 0.0 and M.max() <= 1.0
    for i in range(3):
        for t in range(9):
            for r in range(9):
                x = t - r
                expected = 0.0 if x < 0 or x >= S else 1.0 if x <= z[i] else 0.0 if x >= z[i] + R else \
                    (R + z[i] - x) / R
                assert M[i, t, r] == pytest.approx(expected, abs=1e-15), (i, t, r)


def test_hand_computed_weights():
    """Query 1 sees key 0 at x = 1 and key 1 at x = 0; z = 0, R = 2: masks ½ and 1; scores 0 and ln 3 (scale 1):
    weights ∝ (½ · 1, 1 · 3) = (1/7, 6/7); values 7 and 14 → 13."""
    q = np.array([[[0.0], [1.0]]])
    k = np.array([[[0.0], [math.log(3.0)]]])
    v = np.array([[[7.0], [14.0]]])
    out, A = adaptive_span_heads(q, k, v, [0.0], max_span=2, ramp=2, scale=1.0, return_weights=True)
    np.testing.assert_allclose(A[0, 1], [1 / 7, 6 / 7], rtol=1e-15)
    np.testing.assert_allclose(out[0, 1], [13.0], rtol=1e-15)
    np.testing.assert_array_equal(A[0, 0], [1.0, 0.0])


@pytest.mark.parametrize(("causal", "n", "m"), [(True, 6, 6), (True, 5, 8), ("bottom-right", 4, 7),
                                                 ("bottom-right", 9, 7)])
def test_spans_at_least_the_maximum_span_covering_the_sequence_are_causal_multi_head(rng, causal, n, m):
    """z >= S >= every distance: every mask value is 1 and the layer is causal multi-head attention with the same
    parameters (random weights and biases)."""
    params = random_params(rng, 8, 2, d_k=3, d_v=2)
    x_q, x_kv, x_v = rng.standard_normal((n, 8)), rng.standard_normal((m, 8)), rng.standard_normal((m, 8))
    S = max(n, m)
    out, A = adaptive_span_attention(x_q, x_kv, params, num_heads=2, z=[S, S + 3.5], max_span=S, causal=causal,
                                     x_v=x_v, ramp=32, return_weights=True)
    ref, A_ref = multi_head_attention(x_q, x_kv, params, num_heads=2, x_v=x_v, causal=causal, return_weights=True)
    np.testing.assert_allclose(out, ref, **TIGHT)
    np.testing.assert_allclose(A, A_ref, **TIGHT)


def test_renormalised_mask_equals_softmax_with_the_log_mask_added(rng):
    """m·e^s / Σ m·e^s = softmax(s + log m): the official code's product after the softmax against sdpa with the
    additive bias log m (−inf where m = 0, masked by selection), head by head."""
    q, k, v = _heads(rng, batch=(2,))
    z, S, R = np.array([0.3, 2.6, 5.0]), 5, 2.5
    out, A = adaptive_span_heads(q, k, v, z, max_span=S, ramp=R, causal="bottom-right", return_weights=True)
    M = adaptive_span_mask(z, 6, 8, max_span=S, ramp=R, causal="bottom-right")
    with np.errstate(divide="ignore"):
        bias = np.log(M)                                           # (h, n, m)
    ref, A_ref = scaled_dot_product_attention(q, k, v, mask=bias, return_weights=True)
    np.testing.assert_allclose(out, ref, **TIGHT)
    np.testing.assert_allclose(A, A_ref, **TIGHT)


def test_official_layout_is_the_current_layout_one_position_later(rng):
    """Without the current position (the official SeqAttention), query t sees t − S … t − 1 with the mask counted from
    t − 1: exactly what query t − 1 sees with it; the first query sees nothing and gets a zero row."""
    q, k, v = _heads(rng, n=7, m=7)
    z = np.array([0.5, 1.7, 3.2])
    official = adaptive_span_heads(q, k, v, z, max_span=4, ramp=1.5, include_current=False)
    current = adaptive_span_heads(q[..., 1:, :], k, v, z, max_span=4, ramp=1.5)
    np.testing.assert_allclose(official[..., 1:, :], current, **TIGHT)
    np.testing.assert_array_equal(official[..., 0, :], 0.0)


def test_eps_is_the_official_renormaliser(rng):
    """``eps`` adds ε to the renormalising sum: the weights are those of eps = 0 times T/(T + ε), T the masked sum."""
    q, k, v = _heads(rng)
    z = np.array([0.5, 1.5, 2.5])
    _, A0 = adaptive_span_heads(q, k, v, z, max_span=5, ramp=2, return_weights=True)
    _, A1 = adaptive_span_heads(q, k, v, z, max_span=5, ramp=2, eps=0.25, return_weights=True)
    S = q @ np.swapaxes(k, -1, -2) / 2.0
    window = adaptive_span_mask(np.full(3, 10.0), 6, 8, max_span=5, ramp=2) > 0
    p = np.where(window, np.exp(S - np.where(window, S, -np.inf).max(axis=-1, keepdims=True)), 0.0)
    p /= p.sum(axis=-1, keepdims=True)                             # softmax over the window
    T = (adaptive_span_mask(z, 6, 8, max_span=5, ramp=2) * p).sum(axis=-1, keepdims=True)
    np.testing.assert_allclose(A1, A0 * T / (T + 0.25), **TIGHT)


def _central_difference_check(f, z, analytic, h=1e-5, H=1e-2):
    """|analytic − central difference| within the derived bound, for each z_i.

    Central differences err by h²/6 · |f'''| (truncation) plus the rounding of f(z ± h) over 2h: each evaluation is a
    sum of products whose rounding is at most ~10 ε Σ|terms| (``scale``), so that part is 10 ε · scale / h. f''' is
    estimated by the stencil [f(z+2H) − 2f(z+H) + 2f(z−H) − f(z−2H)] / (2H³), with H small enough that z ± 2H stays
    on the same linear piece of every mask (the spans' fractional parts are at least 0.2 from an integer, R is an
    integer); the bound takes twice the estimate. With h = 1e-5: truncation ~1e-11 · |f'''|, rounding ~2e-10 · scale.
    """
    for i in range(len(z)):
        e = np.zeros(len(z))
        e[i] = 1.0

        def value(dz, e=e):
            return f(z + dz * e)[0]

        numeric = (value(h) - value(-h)) / (2 * h)
        third = (value(2 * H) - 2 * value(H) + 2 * value(-H) - value(-2 * H)) / (2 * H**3)
        bound = h**2 / 6 * 2 * abs(third) + 10 * EPS * f(z)[1] / h
        assert bound < 1e-7, f"z_{i}: the bound {bound} is too loose to test anything"
        assert abs(analytic[i] - numeric) <= bound, f"z_{i}: analytic {analytic[i]}, numeric {numeric}, bound {bound}"


@pytest.mark.parametrize(("causal", "include_current", "eps"), [(True, True, 0.0), ("bottom-right", True, 1e-8),
                                                                 (True, False, 0.0)])
def test_gradient_with_respect_to_z_matches_central_differences(rng, causal, include_current, eps):
    """L = Σ dO ⊙ y: ∂L/∂z_i from adaptive_span_grad_z against central differences of the output (batch of 2)."""
    q, k, v = _heads(rng, n=7, m=7, batch=(2,))
    d_out = rng.standard_normal((2, 3, 7, 3))
    z = np.array([0.3, 1.6, 3.7])                                  # each head has keys on its ramp
    kw = {"max_span": 6, "ramp": 2, "causal": causal, "include_current": include_current, "eps": eps}

    def f(spans):
        y = adaptive_span_heads(q, k, v, spans, **kw)
        return float(np.sum(d_out * y)), float(np.sum(np.abs(d_out * y)))

    analytic = adaptive_span_grad_z(q, k, v, z, d_out, **kw)
    assert analytic.shape == (3,) and np.all(analytic != 0)
    _central_difference_check(f, z, analytic)


def test_gradient_of_a_shared_span_is_the_sum_over_heads(rng):
    q, k, v = _heads(rng)
    d_out = rng.standard_normal((3, 6, 3))
    per_head = adaptive_span_grad_z(q, k, v, np.full(3, 1.4), d_out, max_span=5, ramp=2)
    shared = adaptive_span_grad_z(q, k, v, 1.4, d_out, max_span=5, ramp=2)
    np.testing.assert_allclose(shared, [per_head.sum()], **TIGHT)


def test_gradient_is_zero_where_no_key_is_on_a_ramp(rng):
    """z + R beyond the window (z = 4.5, S = 5): every mask inside the window is 1 and constant in z."""
    q, k, v = _heads(rng)
    grad = adaptive_span_grad_z(q, k, v, [4.5, 0.5, 4.5], rng.standard_normal((3, 6, 3)), max_span=5, ramp=2)
    assert grad[0] == 0.0 and grad[2] == 0.0 and grad[1] != 0.0


def test_a_step_against_the_gradient_lowers_the_loss(rng):
    """A learner's step: z ← z − η ∂L/∂z with L = ‖y − y*‖²/2 + span loss lowers L (η small, z kept in [0, S])."""
    q, k, v = _heads(rng, n=7, m=7)
    target = rng.standard_normal((3, 7, 3))
    z, S, R, lam = np.array([1.3, 2.4, 3.6]), 6, 2, 0.05

    def loss(spans):
        y = adaptive_span_heads(q, k, v, spans, max_span=S, ramp=R)
        return 0.5 * float(np.sum((y - target) ** 2)) + span_loss(spans, lam), y

    before, y = loss(z)
    grad = adaptive_span_grad_z(q, k, v, z, y - target, max_span=S, ramp=R) + span_loss(z, lam, return_grad=True)[1]
    after, _ = loss(np.clip(z - 0.01 * grad, 0, S))
    assert after < before


def test_span_loss_and_its_gradient():
    """(λ/M) Σ z_i: a linear function, so central differences agree up to rounding, ε|L|/h."""
    z, lam, h = np.array([0.5, 3.0, 7.25, 1.0]), 0.3, 1e-6
    loss, grad = span_loss(z, lam, return_grad=True)
    assert loss == pytest.approx(0.3 / 4 * 11.75, rel=1e-15)
    for i in range(4):
        e = np.zeros(4)
        e[i] = h
        numeric = (span_loss(z + e, lam) - span_loss(z - e, lam)) / (2 * h)
        assert abs(grad[i] - numeric) <= 4 * EPS * loss / h


def test_keys_beyond_the_cache_length_can_be_dropped(rng):
    """Decoding the last 2 queries with only the last span_cache_length positions gives the same output; one position
    fewer drops a key that still has weight."""
    q, k, v = _heads(rng, n=2, m=20)
    z, R = np.array([0.5, 3.25, 1.0]), 2
    L = span_cache_length(z, max_span=20, ramp=R)
    assert L == math.ceil(3.25 + 2)
    full = adaptive_span_heads(q, k, v, z, max_span=20, ramp=R, causal="bottom-right")
    kept = adaptive_span_heads(q, k[..., -(L + 1):, :], v[..., -(L + 1):, :], z, max_span=20, ramp=R,
                               causal="bottom-right")                # the first query needs one more
    np.testing.assert_allclose(kept, full, **TIGHT)
    last = adaptive_span_heads(q[..., -1:, :], k[..., -L:, :], v[..., -L:, :], z, max_span=20, ramp=R,
                               causal="bottom-right")
    np.testing.assert_allclose(last, full[..., -1:, :], **TIGHT)
    short = adaptive_span_heads(q[..., -1:, :], k[..., -L + 1:, :], v[..., -L + 1:, :], z, max_span=20, ramp=R,
                                causal="bottom-right")
    assert np.abs(short[1] - full[1, -1:]).max() > 1e-6
    assert span_cache_length(z, max_span=4, ramp=R) == 4


def test_nan_key_beyond_every_span_does_not_reach_the_row(rng):
    """Masking by selection: a NaN key at a distance where m_z = 0 does not reach the query (eps = 0)."""
    q, k, v = _heads(rng, n=8, m=8)
    k[..., 0, :], v[..., 0, :] = np.nan, np.nan
    out = adaptive_span_heads(q, k, v, [0.5, 1.5, 2.5], max_span=8, ramp=1)
    assert np.all(np.isfinite(out[..., 5:, :]))                   # x = t >= 5 > z + R for every head
    assert np.all(np.isnan(out[..., 0, :]))


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"causal": False}, "causal"), ({"z": [-0.5, 1.0, 1.0]}, "z"), ({"z": [1.0, 2.0]}, "z has 2 spans"),
    ({"ramp": 0}, "ramp"), ({"max_span": 0}, "max_span"), ({"eps": -1e-8}, "eps"), ({"z": [[1.0]]}, "z"),
    ({"z": [np.nan, 1.0, 1.0]}, "z"),
])
def test_bad_input_is_refused(rng, kwargs, match):
    q, k, v = _heads(rng)
    options = {"z": [1.0, 2.0, 3.0], "max_span": 4, "ramp": 2} | kwargs
    with pytest.raises(ValueError, match=match):
        adaptive_span_heads(q, k, v, **options)


def test_bad_gradient_input_is_refused(rng):
    q, k, v = _heads(rng)
    with pytest.raises(ValueError, match="d_out"):
        adaptive_span_grad_z(q, k, v, [1.0, 2.0, 3.0], np.ones((3, 6, 4)), max_span=4)


def test_span_loss_names_a_non_finite_coefficient():
    """The shared finiteness check said "scale must be finite"."""
    with pytest.raises(ValueError, match=r"^coefficient must be finite, got nan$"):
        span_loss(np.ones(3), float("nan"))


def test_a_ramp_beyond_float64_or_not_finite_is_named():
    """ramp=10**400 failed in np.isfinite ("ufunc 'isfinite' not supported"), naming nothing."""
    q = np.ones((4, 2))
    for ramp in (10**400, float("nan")):
        with pytest.raises(ValueError, match=r"^ramp must be finite, got "):
            registry.get("adaptive_span").apply(q, q, q, rng=0, ramp=ramp)


def test_the_function_draws_or_takes_identity_params_as_the_registry_does(rng):
    from refattn import registry

    x, mem = rng.standard_normal((4, 8)), rng.standard_normal((6, 8))
    result = registry.get("adaptive_span").apply(x, mem, mem, causal="bottom-right", rng=7, num_heads=2,
                                                 return_draws=True)
    options = {"num_heads": 2, "max_span": 6, "ramp": 2, "causal": "bottom-right"}   # the record's max(n, m), R
    np.testing.assert_array_equal(adaptive_span_attention(x, mem, rng=7, **options), result.output)
    np.testing.assert_array_equal(adaptive_span_attention(x, mem, result.draws["params"], z=[0.5, 2.5],
                                                          **options), result.output)     # z_i = 0.5 + 2i
    np.testing.assert_allclose(adaptive_span_attention(x, mem, "identity", num_heads=1, z=[6.0], max_span=6,
                                                       causal="bottom-right"),
                               scaled_dot_product_attention(x, mem, mem, causal="bottom-right"), **TIGHT)
    with pytest.raises(ValueError, match=r"^adaptive_span draws its parameters from rng: pass rng= \(or params=\)$"):
        adaptive_span_attention(x, mem, num_heads=2, max_span=6)
