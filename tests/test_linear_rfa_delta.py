"""Gated RFA and the fast-weight delta rule: equation against scan against naive loops, their exact limits."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from refattn.kernels.delta_scan import _delta_rule_scan, delta_rule_scan
from refattn.kernels.gated_scan import _gated_linear_scan, gated_linear_scan
from refattn.linear import elu_feature_map, linear_attention
from refattn.linear.delta_rule import DeltaBetaParams, delta_beta, delta_rule_attention, init_delta_beta
from refattn.linear.rfa import RFAGateParams, init_rfa_gate, rfa_attention, rfa_gates

from .naive import naive_delta, naive_rfa, naive_rfa_weights

TIGHT = {"rtol": 1e-12, "atol": 1e-12}


def qkv(rng, n, d=4, d_v=3, batch=()):
    return (rng.standard_normal((*batch, n, d)), rng.standard_normal((*batch, n, d)),
            rng.standard_normal((*batch, n, d_v)))


def relu_map(x):
    return np.maximum(x, 0.0)


def unit_map(x):
    """φ(x) = x/‖x‖₂: ‖φ‖₂ = 1 exactly what the delta rule's exact overwrite needs."""
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


# ---------------------------------------------------------------- naive transcriptions of the papers


def closed_form_delta_weights(q, k, beta, phi, normalize=True):
    """A_ij = β_j φ(k_j)ᵀ (I − β_{j+1}φ_{j+1}φ_{j+1}ᵀ) ⋯ (I − β_iφ_iφ_iᵀ) φ(q_i), the unrolled product."""
    def feat(x):
        f = phi(x)
        return f / f.sum() if normalize else f

    n = len(q)
    pk = [feat(k[j]) for j in range(n)]
    A = np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1):
            row = beta[j] * pk[j]
            for l in range(j + 1, i + 1):
                row = row @ (np.eye(len(row)) - beta[l] * np.outer(pk[l], pk[l]))
            A[i, j] = row @ feat(q[i])
    return A


# ---------------------------------------------------------------- RFA


@pytest.mark.parametrize("gate_form", ["paper", "decay"])
@pytest.mark.parametrize("n", [1, 5, 9])
def test_rfa_equation_and_scan_match_the_naive_recurrence(rng, n, gate_form):
    q, k, v = qkv(rng, n, d_v=2)
    g = rng.uniform(0.0, 0.95, size=n)
    expected = naive_rfa(q, k, v, g, elu_feature_map, coupled=gate_form == "paper")
    for method in ("equation", "scan"):
        out = rfa_attention(q, k, v, g, elu_feature_map, gate_form=gate_form, method=method)
        np.testing.assert_allclose(out, expected, **TIGHT)


def test_rfa_effective_weights_match_the_unrolled_coefficients(rng):
    q, k, v = qkv(rng, 7)
    g = rng.uniform(size=7)
    out, A = rfa_attention(q, k, v, g, elu_feature_map, return_weights=True)
    np.testing.assert_allclose(A, naive_rfa_weights(q, k, g, elu_feature_map), **TIGHT)
    np.testing.assert_allclose(A @ v, out, **TIGHT)
    _, A_scan = rfa_attention(q, k, v, g, elu_feature_map, method="scan", return_weights=True)
    np.testing.assert_array_equal(A_scan, A)


@given(st.integers(1, 10), st.integers(1, 4), st.integers(1, 4), st.sampled_from(["paper", "decay"]),
       st.integers(0, 2**32 - 1))
def test_rfa_scan_equals_equation_and_rows_sum_to_one(n, d, d_v, gate_form, seed):
    rng = np.random.default_rng(seed)
    q, k, v = qkv(rng, n, d=d, d_v=d_v, batch=(2,))
    g = rng.uniform(0.0, 0.99, size=(2, n))
    g[:, rng.integers(n)] = 0.0                                    # a hard reset somewhere
    out, A = rfa_attention(q, k, v, g, elu_feature_map, gate_form=gate_form, return_weights=True)
    np.testing.assert_allclose(rfa_attention(q, k, v, g, elu_feature_map, gate_form=gate_form, method="scan"),
                               out, **TIGHT)
    np.testing.assert_allclose(A.sum(axis=-1), 1.0, **TIGHT)
    assert (A >= 0).all()
    assert (np.triu(A, 1) == 0).all()


def test_rfa_batch_heads_and_broadcast_gates(rng):
    q, k, v = qkv(rng, 6, batch=(2, 3))
    g_heads = rng.uniform(size=(3, 6))                             # one gate sequence per head, shared by the batch
    out = rfa_attention(q, k, v, g_heads, elu_feature_map)
    np.testing.assert_allclose(rfa_attention(q, k, v, g_heads, elu_feature_map, method="scan"), out, **TIGHT)
    for b in range(2):
        for h in range(3):
            np.testing.assert_allclose(out[b, h], naive_rfa(q[b, h], k[b, h], v[b, h], g_heads[h], elu_feature_map),
                                       **TIGHT)


@pytest.mark.parametrize("method", ["equation", "scan"])
def test_rfa_zero_gate_resets_memory_every_step(rng, method):
    # g ≡ 0, paper form: S_t = φ(k_t) ⊗ v_t, z_t = φ(k_t), so out_t = v_t exactly: the memory is
    # reset at every step (attention to the current token only), NOT the ungated model.
    q, k, v = qkv(rng, 6)
    out, A = rfa_attention(q, k, v, np.zeros(6), elu_feature_map, method=method, return_weights=True)
    np.testing.assert_allclose(out, v, **TIGHT)
    np.testing.assert_allclose(A, np.eye(6), **TIGHT)


@pytest.mark.parametrize("method", ["equation", "scan"])
def test_rfa_decay_form_with_unit_gate_is_ungated_causal_linear_attention(rng, method):
    # gate_form="decay", g ≡ 1: S_t = S_{t−1} + φ(k_t) ⊗ v_t, the paper's ungated causal RFA.
    q, k, v = qkv(rng, 7, batch=(2,))
    expected, A_lin = linear_attention(q, k, v, elu_feature_map, causal=True, return_weights=True)
    out, A = rfa_attention(q, k, v, np.ones(7), elu_feature_map, gate_form="decay", method=method,
                           return_weights=True)
    np.testing.assert_allclose(out, expected, **TIGHT)
    np.testing.assert_allclose(A, A_lin, **TIGHT)


@pytest.mark.parametrize("gamma", [0.3, 0.9, 1.0 - 1e-9])
def test_rfa_constant_gate_write_factor_cancels(rng, gamma):
    # c_ij = (1 − γ)γ^{i−j}: the common factor 1 − γ cancels, so the paper form equals the decay form.
    q, k, v = qkv(rng, 8)
    g = np.full(8, gamma)
    paper = rfa_attention(q, k, v, g, elu_feature_map, method="scan")
    np.testing.assert_allclose(paper, rfa_attention(q, k, v, g, elu_feature_map, gate_form="decay"), **TIGHT)


def test_rfa_paper_form_tends_to_ungated_as_gate_tends_to_one(rng):
    # Weights ∝ γ^{i−j} s_ij with γ^{i−j} ∈ [γ^n, 1]: each normalised weight moves by a factor within
    # [γ^n, γ^{−n}], so |out − ungated| ≤ 2(γ^{−n} − 1)·max|v| (positive φ); the bound → 0 as γ → 1.
    q, k, v = qkv(rng, 8)
    ungated = linear_attention(q, k, v, elu_feature_map, causal=True)
    for gamma in (0.99, 0.9999, 1 - 1e-7):
        out = rfa_attention(q, k, v, np.full(8, gamma), elu_feature_map)
        assert np.abs(out - ungated).max() <= 2 * (gamma ** -8 - 1) * np.abs(v).max()


def test_rfa_paper_form_unit_gate_erases_every_write(rng):
    q, k, v = qkv(rng, 4)
    with pytest.raises(ZeroDivisionError, match=r"denominator .* is 0 at index \(0,\)"):
        rfa_attention(q, k, v, np.ones(4), elu_feature_map)
    for method in ("equation", "scan"):
        out = rfa_attention(q, k, v, np.ones(4), elu_feature_map, method=method, eps=1e-3)
        np.testing.assert_array_equal(out, np.zeros_like(out))


@pytest.mark.parametrize("method", ["equation", "scan"])
def test_rfa_past_outputs_ignore_the_future(rng, method):
    q, k, v = qkv(rng, 9, batch=(2,))
    g = rng.uniform(size=(2, 9))
    out = rfa_attention(q, k, v, g, elu_feature_map, method=method)
    for x in (q, k, v):
        x[:, 5:] = rng.standard_normal(x[:, 5:].shape)
    g[:, 5:] = rng.uniform(size=(2, 4))
    np.testing.assert_array_equal(rfa_attention(q, k, v, g, elu_feature_map, method=method)[:, :5], out[:, :5])


def test_rfa_future_nan_gates_and_keys_do_not_reach_the_past(rng):
    q, k, v = qkv(rng, 6)
    g = rng.uniform(size=6)
    outs = {method: rfa_attention(q, k, v, g, elu_feature_map, method=method) for method in ("equation", "scan")}
    g[4], k[5] = np.nan, np.nan
    for method, out in outs.items():
        new = rfa_attention(q, k, v, g, elu_feature_map, method=method)
        np.testing.assert_array_equal(new[:4], out[:4])
        assert np.isnan(new[4:]).all()


def test_gated_scan_python_source_equals_compiled(rng):
    # What NUMBA_DISABLE_JIT=1 runs: the kernel's own Python function, loops and all (under that flag
    # the kernel already is the Python function, which has no .py_func).
    phi_q, phi_k = elu_feature_map(rng.standard_normal((2, 2, 5, 3)))
    v, g = rng.standard_normal((2, 5, 4)), rng.uniform(size=(2, 5))
    for coupled in (True, False):
        results = []
        for fn in (gated_linear_scan, getattr(_gated_linear_scan, "py_func", _gated_linear_scan)):
            out, den = np.empty((2, 5, 4)), np.empty((2, 5))
            fn(phi_q, phi_k, v, g, coupled, 0.0, out, den)
            results.append((out, den))
        np.testing.assert_allclose(results[0][0], results[1][0], **TIGHT)
        np.testing.assert_allclose(results[0][1], results[1][1], **TIGHT)


def test_rfa_gates_and_init():
    # σ(0) = 1/2, σ(ln 3) = 3/4; saturated logits give exactly 0 and 1, never overflow.
    x = np.array([[0.0, 0.0], [np.log(3.0), 0.0], [1e4, 0.0], [-1e4, 0.0]])
    np.testing.assert_allclose(rfa_gates(x, np.array([1.0, 5.0]), 0.0), [0.5, 0.75, 1.0, 0.0], rtol=1e-15)
    np.testing.assert_allclose(rfa_gates(np.zeros((2, 3)), np.ones(3), np.log(3.0)), [0.75, 0.75], rtol=1e-15)
    p, p2 = init_rfa_gate(7, 6, b_g=2.0), init_rfa_gate(np.random.default_rng(7), 6, b_g=2.0)
    np.testing.assert_array_equal(p.w_g, p2.w_g)
    assert isinstance(p, RFAGateParams) and p.b_g == 2.0
    assert np.abs(p.w_g).max() <= np.sqrt(6 / 7)
    assert rfa_gates(np.ones((2, 4, 6)), p.w_g, p.b_g).shape == (2, 4)


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"k": np.ones((5, 4)), "v": np.ones((5, 3))}, ValueError, r"causal self-attention.*n=4 queries and m=5 keys"),
    ({"gates": np.full(4, 1.5)}, ValueError, r"gates must lie in \[0, 1\]"),
    ({"gates": np.full(5, 0.5)}, ValueError, r"gates must have shape \(..., n\) with n=4"),
    ({"gates": np.full((3, 4), 0.5)}, ValueError, "leading .batch. dimensions do not broadcast"),
    ({"gates": np.ones(4, int)}, TypeError, "gates must be a real floating-point array"),
    ({"method": "loop"}, ValueError, "method must be one of"),
    ({"gate_form": "ungated"}, ValueError, "gate_form must be one of"),
    ({"eps": np.nan}, ValueError, "eps must be a finite real number"),
    ({"feature_map": lambda x: x[..., :1, :]}, ValueError, "feature_map turned q of shape"),
])
def test_rfa_bad_input(kwargs, error, match):
    args = {"q": np.ones((2, 4, 4)), "k": np.ones((2, 4, 4)), "v": np.ones((2, 4, 3)), "gates": np.full(4, 0.5),
            "feature_map": elu_feature_map}
    args.update(kwargs)
    q, k, v, gates, fm = (args.pop(n) for n in ("q", "k", "v", "gates", "feature_map"))
    with pytest.raises(error, match=match):
        rfa_attention(q, k, v, gates, fm, **args)


def test_rfa_gates_bad_input():
    with pytest.raises(ValueError, match=r"w_g must have shape \(d,\) = \(3,\)"):
        rfa_gates(np.ones((2, 3)), np.ones(4))
    with pytest.raises(ValueError, match="b_g must be a scalar"):
        rfa_gates(np.ones((2, 3)), np.ones(3), np.ones(2))
    with pytest.raises(ValueError, match="d must be a positive int"):
        init_rfa_gate(0, 0)


# ---------------------------------------------------------------- delta rule


@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("n", [1, 5, 9])
def test_delta_equation_and_scan_match_the_naive_loop(rng, n, normalize):
    q, k, v = qkv(rng, n, d_v=2)
    beta = rng.uniform(size=n)
    fm = elu_feature_map if normalize else (lambda x: elu_feature_map(x) / 4)   # keep I − βφφᵀ a contraction
    expected = naive_delta(q, k, v, beta, fm, normalize)
    for method in ("equation", "scan"):
        out = delta_rule_attention(q, k, v, beta, fm, normalize=normalize, method=method)
        np.testing.assert_allclose(out, expected, **TIGHT)


@given(st.integers(1, 10), st.integers(1, 4), st.integers(1, 4), st.integers(0, 2**32 - 1))
def test_delta_scan_equals_equation(n, d, d_v, seed):
    rng = np.random.default_rng(seed)
    q, k, v = qkv(rng, n, d=d, d_v=d_v, batch=(3,))
    beta = rng.uniform(size=(3, n))
    out, A = delta_rule_attention(q, k, v, beta, elu_feature_map, return_weights=True)
    np.testing.assert_allclose(delta_rule_attention(q, k, v, beta, elu_feature_map, method="scan"), out, **TIGHT)
    np.testing.assert_allclose(A @ v, out, **TIGHT)
    assert (np.triu(A, 1) == 0).all()


@pytest.mark.parametrize("normalize", [True, False])
def test_delta_effective_matrix_matches_the_unrolled_product(rng, normalize):
    # A_ij = β_j φ(k_j)ᵀ P_{j+1:i} φ(q_i) from W_i = W_{i−1}(I − β_i φ_iφ_iᵀ) + β_i v_i φ_iᵀ.
    q, k, v = qkv(rng, 7, d_v=5)
    beta = rng.uniform(size=7)
    out, A = delta_rule_attention(q, k, v, beta, elu_feature_map, normalize=normalize, method="scan",
                                  return_weights=True)
    np.testing.assert_allclose(A, closed_form_delta_weights(q, k, beta, elu_feature_map, normalize), **TIGHT)
    np.testing.assert_allclose(A @ v, out, **TIGHT)


@pytest.mark.parametrize("method", ["equation", "scan"])
def test_delta_zero_beta_leaves_the_memory_empty(rng, method):
    q, k, v = qkv(rng, 6, batch=(2,))
    out, A = delta_rule_attention(q, k, v, np.zeros(6), elu_feature_map, method=method, return_weights=True)
    np.testing.assert_array_equal(out, np.zeros_like(out))
    np.testing.assert_array_equal(A, np.zeros_like(A))


@pytest.mark.parametrize("method", ["equation", "scan"])
def test_delta_zero_beta_step_is_invisible_to_later_steps(rng, method):
    # β_t = 0 ⇒ W_t = W_{t−1}: every later output equals that of the sequence with step t removed.
    q, k, v = qkv(rng, 8)
    beta = rng.uniform(size=8)
    beta[3] = 0.0
    out = delta_rule_attention(q, k, v, beta, elu_feature_map, method=method)
    keep = np.r_[0:3, 4:8]
    dropped = delta_rule_attention(q[keep], k[keep], v[keep], beta[keep], elu_feature_map, method=method)
    np.testing.assert_allclose(out[keep], dropped, **TIGHT)


@pytest.mark.parametrize("method", ["equation", "scan"])
def test_delta_unit_key_and_unit_rate_overwrite_exactly(rng, method):
    # W_iφ_i = v̄_i + β_i‖φ_i‖²(v_i − v̄_i): with ‖φ‖₂ = 1 and β = 1, reading with the key just written
    # returns v_i exactly, whatever the memory held (keys repeat, so earlier values are overwritten).
    n = 8
    keys = rng.standard_normal((3, 4))[rng.integers(3, size=n)]
    v = rng.standard_normal((n, 2))
    out = delta_rule_attention(keys, keys, v, np.ones(n), unit_map, normalize=False, method=method)
    np.testing.assert_allclose(out, v, **TIGHT)


@pytest.mark.parametrize("method", ["equation", "scan"])
def test_delta_sum_normalised_one_hot_features_overwrite_exactly(rng, method):
    # With φ/Σφ and φ ≥ 0, ‖φ‖₂ = 1 only for a one-hot φ: relu of a key with one positive entry.
    n = 6
    k = -np.abs(rng.standard_normal((n, 4)))
    k[np.arange(n), rng.integers(4, size=n)] = rng.uniform(0.5, 2.0, size=n)
    v = rng.standard_normal((n, 3))
    out = delta_rule_attention(k, k, v, np.ones(n), relu_map, method=method)
    np.testing.assert_allclose(out, v, **TIGHT)


def test_delta_first_write_reads_back_scaled_by_the_feature_norm(rng):
    # Into the empty memory: y_1 = β‖φ'(k)‖² v with φ' = φ/Σφ, and ‖φ'‖² < 1 unless φ is one-hot.
    q, k, v = qkv(rng, 1)
    beta = np.array([0.7])
    phi = elu_feature_map(k[0]) / elu_feature_map(k[0]).sum()
    out = delta_rule_attention(k, k, v, beta, elu_feature_map)
    np.testing.assert_allclose(out[0], 0.7 * (phi @ phi) * v[0], **TIGHT)
    assert phi @ phi < 1


def test_delta_normalize_is_division_by_the_feature_sum(rng):
    q, k, v = qkv(rng, 6)
    beta = rng.uniform(size=6)
    pre = delta_rule_attention(q, k, v, beta, lambda x: elu_feature_map(x) / elu_feature_map(x).sum(-1, keepdims=True),
                               normalize=False)
    np.testing.assert_allclose(delta_rule_attention(q, k, v, beta, elu_feature_map), pre, **TIGHT)


@pytest.mark.parametrize("method", ["equation", "scan"])
def test_delta_past_outputs_ignore_the_future(rng, method):
    q, k, v = qkv(rng, 9, batch=(2,))
    beta = rng.uniform(size=(2, 9))
    out = delta_rule_attention(q, k, v, beta, elu_feature_map, method=method)
    for x in (q, k, v):
        x[:, 5:] = rng.standard_normal(x[:, 5:].shape)
    beta[:, 5:] = rng.uniform(size=(2, 4))
    np.testing.assert_array_equal(delta_rule_attention(q, k, v, beta, elu_feature_map, method=method)[:, :5],
                                  out[:, :5])


def test_delta_scan_python_source_equals_compiled(rng):
    # What NUMBA_DISABLE_JIT=1 runs: the kernel's own Python function, loops and all (under that flag
    # the kernel already is the Python function, which has no .py_func).
    phi_q, phi_k = elu_feature_map(rng.standard_normal((2, 2, 5, 3)))
    v, beta = rng.standard_normal((2, 5, 4)), rng.uniform(size=(2, 5))
    results = []
    for fn in (delta_rule_scan, getattr(_delta_rule_scan, "py_func", _delta_rule_scan)):
        out = np.empty((2, 5, 4))
        fn(phi_q, phi_k, v, beta, out)
        results.append(out)
    np.testing.assert_allclose(results[0], results[1], **TIGHT)


def test_delta_beta_and_init():
    x = np.array([[0.0, 0.0], [np.log(3.0), 0.0], [-1e4, 0.0]])
    np.testing.assert_allclose(delta_beta(x, np.array([1.0, 2.0])), [0.5, 0.75, 0.0], rtol=1e-15)
    np.testing.assert_allclose(delta_beta(np.zeros((1, 2)), np.ones(2), -np.log(3.0)), [0.25], rtol=1e-15)
    p = init_delta_beta(3, 5)
    assert isinstance(p, DeltaBetaParams) and p.b == 0.0 and p.w.shape == (5,)
    np.testing.assert_array_equal(p.w, init_delta_beta(np.random.default_rng(3), 5).w)
    assert np.abs(p.w).max() <= np.sqrt(6 / 6)


def test_delta_zero_feature_sum_is_reported(rng):
    q, k, v = qkv(rng, 3)
    k[1] = -np.abs(k[1])                                           # relu(k_1) = 0: φ/Σφ undefined
    with pytest.raises(ZeroDivisionError, match=r"the sum of the features of k is 0 at index \(1,\)"):
        delta_rule_attention(q, k, v, np.ones(3), relu_map)


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"k": np.ones((5, 4)), "v": np.ones((5, 3))}, ValueError, r"causal self-attention.*n=4 queries and m=5 keys"),
    ({"beta": np.full(4, -0.1)}, ValueError, r"beta must lie in \[0, 1\]"),
    ({"beta": np.full(3, 0.5)}, ValueError, r"beta must have shape \(..., n\) with n=4"),
    ({"v": np.ones((4, 4, 3))}, ValueError, "leading .batch. dimensions do not broadcast"),
    ({"q": np.ones((2, 4, 4), np.int64)}, TypeError, "q must be a real floating-point array"),
    ({"method": "loop"}, ValueError, "method must be one of"),
    ({"normalize": 1}, TypeError, "normalize must be True or False, got 1"),
    ({"feature_map": lambda x: x.sum(axis=-1)}, ValueError, "feature_map turned q of shape"),
])
def test_delta_bad_input(kwargs, error, match):
    args = {"q": np.ones((2, 4, 4)), "k": np.ones((2, 4, 4)), "v": np.ones((2, 4, 3)), "beta": np.full(4, 0.5),
            "feature_map": elu_feature_map}
    args.update(kwargs)
    q, k, v, beta, fm = (args.pop(n) for n in ("q", "k", "v", "beta", "feature_map"))
    with pytest.raises(error, match=match):
        delta_rule_attention(q, k, v, beta, fm, **args)


@pytest.mark.parametrize("method", ["equation", "scan"])
def test_empty_sequences(method):
    q, v = np.zeros((2, 0, 3)), np.zeros((2, 0, 2))
    out, A = rfa_attention(q, q, v, np.zeros(0), elu_feature_map, method=method, return_weights=True)
    assert out.shape == (2, 0, 2) and A.shape == (2, 0, 0)
    out, A = delta_rule_attention(q, q, v, np.zeros(0), elu_feature_map, method=method, return_weights=True)
    assert out.shape == (2, 0, 2) and A.shape == (2, 0, 0)


@pytest.mark.parametrize(("function", "coefficients", "draw"), [
    (rfa_attention, "gates", lambda rng, k: rfa_gates(k, init_rfa_gate(rng, k.shape[-1]).w_g)),
    (delta_rule_attention, "beta", lambda rng, k: delta_beta(k, init_delta_beta(rng, k.shape[-1]).w)),
])
def test_the_function_draws_its_coefficients_from_rng_and_decodes_bottom_right(rng, function, coefficients, draw):
    """The function is the registry's door: rng draws the per-step coefficients (σ(k·w) with w as init_* draws it),
    φ defaults to elu + 1, and causal="bottom-right" gives the last n rows of the full recurrence."""
    q, k, v = rng.standard_normal((6, 5)), rng.standard_normal((6, 5)), rng.standard_normal((6, 3))
    c = draw(np.random.default_rng(4), k)
    full = function(q, k, v, c, elu_feature_map)
    np.testing.assert_array_equal(function(q, k, v, rng=4), full)
    out, A = function(q[-2:], k, v, **{coefficients: c}, causal="bottom-right", return_weights=True)
    full_out, full_A = function(q, k, v, c, return_weights=True)
    np.testing.assert_allclose(out, full_out[-2:], rtol=0, atol=1e-14)   # the same sums; BLAS may block the products
    # of the padded queries differently
    np.testing.assert_allclose(A, full_A[-2:], rtol=0, atol=1e-14)
    mechanism = function.__name__.removesuffix("_attention")      # the message names the id: rfa, delta_rule
    with pytest.raises(ValueError, match=rf"^{mechanism} draws the parameters of its {coefficients} from "
                                         rf"rng: pass rng= \(or {coefficients}=\)$"):
        function(q, k, v)
    with pytest.raises(ValueError, match=r"causal self-attention.*n=2 queries and m=6 keys.*'bottom-right'"):
        function(q[-2:], k, v, c)
    with pytest.raises(ValueError, match="is a causal recurrence: pass causal=True or 'bottom-right'"):
        function(q, k, v, c, causal=False)
