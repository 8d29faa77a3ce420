"""Routing-by-agreement of heads (Li et al., 2019): squash, the two routings' coupling coefficients, their closed
forms at one iteration, convergence where it is guaranteed, the heads' weights, causality and bad input."""
from __future__ import annotations

import math

import numpy as np
import pytest

from refattn import MultiHeadParams, multi_head_attention, registry, scaled_dot_product_attention
from refattn.heads import (
    CapsuleRoutingParams,
    capsule_routing_attention,
    dynamic_routing,
    em_routing,
    head_votes,
    init_capsule_routing,
    squash,
)

TIGHT = {"rtol": 1e-12, "atol": 1e-12}


def _logistic(x):
    return 1.0 / (1.0 + np.exp(-x))


def test_squash_keeps_the_direction_and_maps_the_norm_below_one():
    rng = np.random.default_rng(0)
    s = rng.standard_normal((50, 6)) * np.logspace(-3, 3, 50)[:, None]   # norms from ~1e-3 to ~1e3
    out = squash(s)
    r = np.linalg.norm(s, axis=-1)
    np.testing.assert_allclose(np.linalg.norm(out, axis=-1), r**2 / (1 + r**2), rtol=1e-13)
    assert np.all(np.linalg.norm(out, axis=-1) < 1.0)
    np.testing.assert_allclose(out / np.linalg.norm(out, axis=-1, keepdims=True), s / r[:, None], rtol=1e-13)
    np.testing.assert_array_equal(squash(np.zeros((2, 3))), 0.0)   # ‖s‖ = 0: the zero vector, no NaN


def test_squash_of_a_norm_whose_square_overflows():
    """‖s‖² = 1e400 overflows: r²/(1 + r²) is 1 to the last bit, and the direction is kept (it gave NaN)."""
    s = np.array([[1e200, 0.0, 0.0], [3e200, -4e200, 0.0], [0.0, 1e308, 1e308]])
    np.testing.assert_allclose(squash(s), [[1.0, 0.0, 0.0], [0.6, -0.8, 0.0], [0.0, 2**-0.5, 2**-0.5]], rtol=1e-15)
    np.testing.assert_allclose(squash([3e-150, 4e-150]), [1.5e-299, 2e-299], rtol=1e-15)   # r² ≈ 2.5e-299: r² s/r


def test_squash_hand_computed():      # s = (3, 4): ‖s‖ = 5, 25/26 · (3, 4)/5 = (15/26, 20/26)
    np.testing.assert_allclose(squash([3.0, 4.0]), [15 / 26, 20 / 26], rtol=1e-15)


@pytest.mark.parametrize("routing", ["dynamic", "em"])
def test_coupling_coefficients_are_distributions_over_output_capsules(routing):
    votes = np.random.default_rng(1).standard_normal((2, 5, 4, 3, 6))     # (batch, n, h, N, d)
    if routing == "dynamic":
        _, C = dynamic_routing(votes, iterations=4)
    else:
        _, C = em_routing(votes, np.full(3, 0.5), np.full(3, -0.2), iterations=4)
    assert C.shape == (2, 5, 4, 4, 3)
    assert np.all(C >= 0)
    np.testing.assert_allclose(C.sum(axis=-1), 1.0, rtol=0, atol=4e-16)   # N = 3 terms, one rounding each
    np.testing.assert_array_equal(C[..., 0, :, :], 1 / 3)                 # the first iteration is uniform


def test_dynamic_routing_one_iteration_is_the_squashed_uniform_sum():
    """T = 1: c_ij = 1/N, so v_j = squash(Σ_i û_{j|i} / N) = squash((h/N) · mean_i û_{j|i})."""
    votes = np.random.default_rng(2).standard_normal((3, 4, 2, 5))       # h = 4, N = 2
    v, C = dynamic_routing(votes, iterations=1)
    s = votes.mean(axis=-3) * (4 / 2)
    norm = np.linalg.norm(s, axis=-1, keepdims=True)
    np.testing.assert_allclose(v, norm / (1 + norm**2) * s, **TIGHT)
    assert C.shape == (3, 1, 4, 2)


def test_em_routing_one_iteration_is_the_activated_mean_of_the_votes():
    """T = 1: R_ij = 1/N, so μ_j is the mean of the h votes, σ_j² their variance (+ ε), Σ_i R_ij = h/N, and
    a_j = logistic(λ(β_a − Σ_d (β_u + ln σ_jd) h/N)); the output is a_j μ_j."""
    rng = np.random.default_rng(3)
    votes = rng.standard_normal((4, 3, 5))                               # h = 4, N = 3, d = 5
    beta_u, beta_a, lam = rng.standard_normal(3), rng.standard_normal(3), 0.7
    out, _ = em_routing(votes, beta_u, beta_a, iterations=1, inverse_temperature=lam, eps=1e-6)
    mu, var = votes.mean(axis=0), votes.var(axis=0) + 1e-6               # (N, d)
    a = _logistic(lam * (beta_a - ((beta_u[:, None] + 0.5 * np.log(var)) * (4 / 3)).sum(axis=-1)))
    np.testing.assert_allclose(out, a[:, None] * mu, **TIGHT)


def test_dynamic_routing_converges_on_a_planted_agreement():
    """h = 4 heads all vote w for capsule 0 and ±w' (two each) for capsule 1. By induction every head has the same
    logits b_i, so s_1 = c_1 (w' − w' + w' − w') = 0 exactly, v_1 = 0, b_i1 stays 0, while b_i0 grows by
    w·v_0 = ‖w‖ ‖v_0‖ ≥ δ = ‖w‖ r²/(1 + r²) per iteration (c_i0 ≥ 1/2, so ‖s_0‖ ≥ r = 2‖w‖). So c_i0 =
    logistic(b_i0) rises to 1 and its change from iteration t to t + 1 is at most (b_{t+1} − b_t) · logistic'(b_t)
    ≤ ‖w‖ e^{−tδ}: the change shrinks geometrically."""
    rng = np.random.default_rng(4)
    w, w2 = rng.standard_normal(3), rng.standard_normal(3)
    votes = np.stack([np.stack([w, s * w2]) for s in (1, -1, 1, -1)])    # (h=4, N=2, d=3)
    T = 12
    v, C = dynamic_routing(votes, iterations=T)
    np.testing.assert_array_equal(v[1], 0.0)
    np.testing.assert_array_equal(C, np.broadcast_to(C[:, :1], C.shape))  # every head routes alike
    c0 = C[:, 0, 0]
    assert np.all(np.diff(c0) > 0)
    r = 2 * np.linalg.norm(w)
    delta = np.linalg.norm(w) * r**2 / (1 + r**2)
    change = np.abs(np.diff(C, axis=0)).max(axis=(1, 2))                 # (T − 1,)
    bound = np.linalg.norm(w) * np.exp(-delta * np.arange(T - 1))
    assert np.all(change <= bound + 1e-15), (change, bound)
    assert change[-1] < 1e-3 * change[0]


def test_em_routing_reaches_its_fixed_point_after_two_e_steps_on_a_planted_agreement():
    """The same planted votes: capsule 0's votes are identical (μ_0 = w, σ_0² = ε whatever R is), capsule 1's are
    ±w' with equal weights on the pairs (every head is alike), so μ_1 = 0 and σ_1² = w'² do not depend on R either;
    only the activations do, through Σ_i R_ij in the cost. The first E-step sends every head to the tight cluster
    (ln p_i0 = −(d/2) ln 2πε is far above ln p_i1): R_i1 ~ 1e-11, so capsule 1's cost falls from 2·Σ_d(ln σ_1d) to
    ~0 and the second E-step moves R_i1 once more, by ~1e-11; from then on the cost changes by ~1e-11 · Σ_d ln σ_1d,
    a_1 by less than that, and R_i1 ∝ a_1 by a relative ~1e-11: the coupling no longer changes (1e-18 absolute)."""
    rng = np.random.default_rng(4)
    w, w2 = rng.standard_normal(3), rng.standard_normal(3)
    votes = np.stack([np.stack([w, s * w2]) for s in (1, -1, 1, -1)])
    out, R = em_routing(votes, np.zeros(2), np.zeros(2), iterations=6, eps=1e-8)
    change = np.abs(np.diff(R, axis=0)).max(axis=(1, 2))                  # (5,)
    assert change[0] > 0.49 and 0 < change[1] < 1e-10
    np.testing.assert_allclose(R[3:], np.broadcast_to(R[2], R[3:].shape), rtol=0, atol=1e-18)
    assert np.all(R[1:, :, 0] > 1 - 1e-10)
    np.testing.assert_allclose(out[1], 0.0, atol=1e-15)                   # μ_1 = 0


def test_heads_weights_are_multi_heads_and_routing_runs_on_its_heads():
    """Routing changes only how the heads are combined: the weights equal multi-head attention's with the same
    projections, and the output is the routing of head_votes(heads) projected by Wᴼ."""
    rng = np.random.default_rng(5)
    params = init_capsule_routing(rng, 8, 2, num_capsules=3, d_capsule=5)
    params = CapsuleRoutingParams(params.w_q, params.w_k, params.w_v, params.w_votes, params.w_o,
                                  rng.standard_normal(3), rng.standard_normal(3), *rng.standard_normal((3, 8)),
                                  rng.standard_normal(8))
    x, mem = rng.standard_normal((2, 5, 8)), rng.standard_normal((2, 7, 8))
    mh = MultiHeadParams(params.w_q, params.w_k, params.w_v, np.eye(8), params.b_q, params.b_k, params.b_v)
    heads_concat, A_mh = multi_head_attention(x, mem, mh, num_heads=2, return_weights=True)
    for routing in ("dynamic", "em"):
        out, A, C = capsule_routing_attention(x, mem, params, routing=routing, iterations=2, return_weights=True,
                                              return_coupling=True)
        np.testing.assert_array_equal(A, A_mh)
        heads = np.swapaxes(heads_concat.reshape(2, 5, 2, 4), -2, -3)    # (batch, h, n, d_v)
        votes = head_votes(heads, params.w_votes)
        caps, C_ref = (dynamic_routing(votes, iterations=2) if routing == "dynamic"
                       else em_routing(votes, params.beta_u, params.beta_a, iterations=2))
        np.testing.assert_allclose(out, caps.reshape(2, 5, 15) @ params.w_o + params.b_o, **TIGHT)
        np.testing.assert_allclose(C, C_ref, **TIGHT)
        assert C.shape == (2, 5, 2, 2, 3)


def test_dynamic_output_capsules_are_squashed_so_no_setting_is_multi_head():
    """The record's missing exact limit: one head, one capsule, identity transforms still squash the head."""
    rng = np.random.default_rng(6)
    eye = np.eye(4)
    params = CapsuleRoutingParams(eye, eye, eye, eye[None, None], eye, np.zeros(1), np.zeros(1))
    x = 3 * rng.standard_normal((6, 4))
    out = capsule_routing_attention(x, x, params, iterations=1)
    head = scaled_dot_product_attention(x, x, x)
    np.testing.assert_allclose(out, squash(head), **TIGHT)
    assert np.all(np.linalg.norm(out, axis=-1) < 1) and np.any(np.linalg.norm(head, axis=-1) > 1)
    assert registry.get("capsule_routing").exact_options is None


@pytest.mark.parametrize("routing", ["dynamic", "em"])
def test_causal_by_selection_routing_is_per_position(routing):
    """Routing mixes the heads of one position only, so with causal=True the first rows are the same bits when
    every later position (query, key and value) is NaN: a NaN that reached them would show.

    Both calls have the same shapes, so every BLAS product sums each element in the same order whatever the
    kernel; a 5-query call would not be comparable bit for bit (``x[:5] @ W`` and ``(x @ W)[:5]`` differ in
    the last bit under some OpenBLAS kernels)."""
    rng = np.random.default_rng(7)
    params = init_capsule_routing(rng, 8, 4)
    x = rng.standard_normal((9, 8))
    out = capsule_routing_attention(x, x, params, routing=routing, causal=True)
    poisoned = x.copy()
    poisoned[5:] = np.nan
    with np.errstate(invalid="ignore"):
        again = capsule_routing_attention(poisoned, poisoned, params, routing=routing, causal=True)
    np.testing.assert_array_equal(again[:5], out[:5])
    assert np.isnan(again[5:]).all()                               # the poison did go through the later rows


def test_a_query_that_sees_no_key_gets_the_routing_of_zero_heads():
    """A fully masked row: every head is 0 (fully_masked="zero"), every vote 0; dynamic routing gives squash(0) = 0,
    EM routing μ = 0; the output is the bias bᴼ."""
    rng = np.random.default_rng(8)
    params = init_capsule_routing(rng, 4, 2)
    params = CapsuleRoutingParams(*(getattr(params, f) for f in ("w_q", "w_k", "w_v", "w_votes", "w_o", "beta_u",
                                                                 "beta_a", "b_q", "b_k", "b_v")),
                                  b_o=rng.standard_normal(4))
    x = rng.standard_normal((3, 4))
    for routing in ("dynamic", "em"):
        out = capsule_routing_attention(x[:2], x, params, routing=routing, causal="bottom-right",
                                        mask=np.array([[False] * 3, [True] * 3]))
        np.testing.assert_array_equal(out[0], params.b_o)


def test_apply_reproduces_the_natural_function():
    rng = np.random.default_rng(9)
    q, k, v = rng.standard_normal((3, 5, 8))
    mech = registry.get("capsule_routing")
    result = mech.apply(q, k, v, rng=1, num_heads=4, routing="em", iterations=2, return_weights=True,
                        return_draws=True)
    out, A = capsule_routing_attention(q, k, result.draws["params"], routing="em", iterations=2, x_v=v,
                                       return_weights=True)
    np.testing.assert_array_equal(result.output, out)
    np.testing.assert_array_equal(result.weights, A)
    assert result.draws["params"].num_capsules == 4 and result.draws["params"].w_o.shape == (8, 8)
    np.testing.assert_array_equal(capsule_routing_attention(q, k, num_heads=4, rng=1, routing="em", iterations=2,
                                                            x_v=v), out)   # the function draws as the registry


def _params(h=2, d_model=4):
    return init_capsule_routing(0, d_model, h)


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: capsule_routing_attention(np.ones((3, 4)), np.ones((3, 4)), _params(), routing="kmeans"),
     ValueError, "routing"),
    (lambda: capsule_routing_attention(np.ones((3, 4)), np.ones((3, 4)), _params(), iterations=0),
     ValueError, "iterations"),
    (lambda: capsule_routing_attention(np.ones((3, 4)), np.ones((3, 4)), "params"), TypeError, "params"),
    (lambda: capsule_routing_attention(np.ones((3, 5)), np.ones((3, 4)), _params()), ValueError, "x_q has d_model=5"),
    (lambda: dynamic_routing(np.ones((2, 3, 4)), iterations=-1), ValueError, "iterations"),
    (lambda: dynamic_routing(np.ones((3, 4))), ValueError, "votes"),
    (lambda: em_routing(np.ones((2, 3, 4)), np.zeros(2), np.zeros(3)), ValueError, r"beta_u has shape \(2,\)"),
    (lambda: em_routing(np.ones((2, 3, 4)), np.zeros(3), np.zeros(3), iterations=3, inverse_temperature=[1, 2]),
     ValueError, "inverse_temperature must be"),
    (lambda: em_routing(np.ones((2, 3, 4)), np.zeros(3), np.zeros(3), eps=-1.0), ValueError, "eps"),
    (lambda: head_votes(np.ones((3, 5, 2)), np.ones((2, 3, 2, 2))), ValueError, "w_votes has shape"),
    (lambda: CapsuleRoutingParams(np.ones((4, 4)), np.ones((4, 4)), np.ones((4, 4)), np.ones((2, 3, 2, 2)),
                                  np.ones((5, 4)), np.zeros(3), np.zeros(3)), ValueError, r"w_o has shape \(5, 4\)"),
    (lambda: CapsuleRoutingParams(np.ones((4, 4)), np.ones((4, 4)), np.ones((4, 6)), np.ones((2, 3, 2, 2)),
                                  np.ones((6, 4)), np.zeros(3), np.zeros(3)), ValueError, "w_votes has shape"),
    (lambda: init_capsule_routing(0, 6, 4), ValueError, "d_model=6"),
    (lambda: registry.get("capsule_routing").apply(np.ones((3, 4)), np.ones((3, 4)), np.ones((3, 4)),
                                                   params=_params(h=2), num_heads=4), ValueError, "num_heads=4"),
    (lambda: registry.get("capsule_routing").apply(np.ones((3, 4)), np.ones((3, 4)), np.ones((3, 4))),
     ValueError, r"^capsule_routing draws its parameters from rng: pass rng= \(or params=\)$"),
    (lambda: capsule_routing_attention(np.ones((3, 4)), np.ones((3, 4)), rng=0), ValueError,
     r"^capsule_routing needs num_heads= to draw params from rng \(or params=\)$"),
    (lambda: capsule_routing_attention(np.ones((3, 4)), np.ones((3, 4)), _params(h=2), num_heads=4), ValueError,
     r"params have h=2 heads .* but num_heads=4"),
])
def test_bad_input_is_named(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_em_inverse_temperature_schedule_is_used_per_iteration():
    """λ given per iteration: the last M-step's activation uses the last value (T = 1 with [λ] equals λ)."""
    votes = np.random.default_rng(10).standard_normal((3, 2, 4))
    a = em_routing(votes, np.zeros(2), np.zeros(2), iterations=1, inverse_temperature=[0.3])[0]
    b = em_routing(votes, np.zeros(2), np.zeros(2), iterations=1, inverse_temperature=0.3)[0]
    np.testing.assert_array_equal(a, b)
    c = em_routing(votes, np.zeros(2), np.zeros(2), iterations=2, inverse_temperature=[0.3, 2.0])[0]
    d = em_routing(votes, np.zeros(2), np.zeros(2), iterations=2, inverse_temperature=[0.3, 0.3])[0]
    assert not np.array_equal(c, d)
    assert math.isfinite(float(np.sum(c)))
