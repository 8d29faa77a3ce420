"""Average Attention Network: the cumulative average is uniform causal attention, its three forms agree, the whole
sub-layer follows Eqs. (1)-(3) position by position, and nothing n × n is built by default."""
from __future__ import annotations

import math

import numpy as np
import pytest

from refattn import scaled_dot_product_attention
from refattn.common import MemoryBudgetError, temporary_memory_budget
from refattn.prior import (
    AverageAttentionParams,
    AverageAttentionState,
    average_attention,
    average_attention_decode,
    average_attention_layer,
    average_attention_step,
    average_weights,
    init_average_attention,
)

TIGHT = {"rtol": 1e-12, "atol": 1e-12}
SETTINGS = (False, True, "bottom-right")


def test_hand_case_causal_and_not():
    v = np.array([[2.0], [4.0], [9.0]])                            # running means 2, 3, 5; overall 5
    for method in ("equation", "scan"):
        np.testing.assert_array_equal(average_attention(v, v, v, method=method)[:, 0], [2.0, 3.0, 5.0])
        np.testing.assert_array_equal(average_attention(v, v, v, causal=False, method=method)[:, 0], [5.0] * 3)


@pytest.mark.parametrize("causal", SETTINGS)
@pytest.mark.parametrize(("n", "m"), [(4, 7), (7, 4), (5, 5)])
@pytest.mark.parametrize("method", ["equation", "scan"])
def test_equals_softmax_attention_with_equal_scores(rng, causal, n, m, method):
    """q = 0 makes every score 0, so softmax's weights are uniform over what each row sees (n != m too; bottom-right
    with n > m: the first rows see no key and are 0 in both)."""
    q, k, v = np.zeros((2, n, 3)), rng.standard_normal((2, m, 3)), rng.standard_normal((2, m, 2))
    out, A = average_attention(q, k, v, causal=causal, method=method, return_weights=True)
    expected, A_sm = scaled_dot_product_attention(q, k, v, causal=causal, return_weights=True)
    np.testing.assert_allclose(out, expected, **TIGHT)
    assert A.shape == A_sm.shape                                   # one matrix, broadcast over the batch
    np.testing.assert_allclose(A, A_sm, **TIGHT)


def test_mask_matrix_is_one_over_j_on_the_past():
    A, seen = average_weights(4, 4)
    expected = np.tril(np.ones((4, 4))) / np.arange(1, 5)[:, None]   # M_jk = 1/j, k ≤ j (positions from 1)
    np.testing.assert_array_equal(A, expected)
    np.testing.assert_array_equal(seen, np.tril(np.ones((4, 4), dtype=bool)))


@pytest.mark.parametrize("causal", SETTINGS)
def test_scan_equals_mask_matrix(rng, causal):
    v = rng.standard_normal((3, 2, 9, 5))
    q = np.zeros((3, 2, 6, 5))                                      # only its length 6 enters
    np.testing.assert_allclose(average_attention(q, v, v, causal=causal, method="scan"),
                               average_attention(q, v, v, causal=causal, method="equation"), **TIGHT)


def test_auto_streams_without_the_mask_matrix():
    """auto is the scan: at n = m = 4096 it needs no 128 MiB matrix; equation and the weights refuse before allocating
    under a 1 MiB budget."""
    v = np.ones((4096, 2))
    with temporary_memory_budget(2**20):
        np.testing.assert_array_equal(average_attention(v, v, v), 1.0)
        with pytest.raises(MemoryBudgetError, match="method='equation'"):
            average_attention(v, v, v, method="equation")
        with pytest.raises(MemoryBudgetError, match="return_weights"):
            average_attention(v, v, v, return_weights=True)


def test_bad_method_is_named():
    v = np.ones((3, 2))
    with pytest.raises(ValueError, match="method"):
        average_attention(v, v, v, method="loop")


# --- the whole sub-layer ----------------------------------------------------------------------------------


def _sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


def _naive_layer(y, params, use_ffn):
    """Eqs. (1)-(3) one position and one unit at a time: g_j = (1/j) Σ_{k≤j} y_k, g̃_j = FFN(g_j),
    [i; f] = σ([y_j; g̃_j] W + b), h_j = LayerNorm(y_j + i ⊙ y_j + f ⊙ g̃_j) with ε = 1e-6."""
    n, d = y.shape
    p = params
    d_ff = p.ffn.w_1.shape[1]
    h = np.zeros((n, d))
    for j in range(n):
        g = [sum(y[t, c] for t in range(j + 1)) / (j + 1) for c in range(d)]
        if use_ffn:
            hidden = [max(0.0, sum(g[c] * p.ffn.w_1[c, u] for c in range(d)) + p.ffn.b_1[u]) for u in range(d_ff)]
            g = [sum(hidden[u] * p.ffn.w_2[u, c] for u in range(d_ff)) + p.ffn.b_2[c] for c in range(d)]
        x = list(y[j]) + g
        z = [sum(x[r] * p.w_gate[r, c] for r in range(2 * d)) + p.b_gate[c] for c in range(2 * d)]
        s = [y[j, c] + _sigmoid(z[c]) * y[j, c] + _sigmoid(z[d + c]) * g[c] for c in range(d)]
        mean = sum(s) / d
        var = sum((t - mean) ** 2 for t in s) / d
        for c in range(d):
            h[j, c] = (s[c] - mean) / math.sqrt(var + 1e-6) * p.norm.gamma[c] + p.norm.beta[c]
    return h


@pytest.mark.parametrize("use_ffn", [True, False])
def test_layer_equals_the_papers_equations_position_by_position(rng, use_ffn):
    y = rng.standard_normal((6, 4))
    params = init_average_attention(rng, 4, 8)
    params = AverageAttentionParams(params.ffn, params.w_gate, params.b_gate,
                                    type(params.norm)(rng.uniform(0.5, 1.5, 4), rng.standard_normal(4)))
    np.testing.assert_allclose(average_attention_layer(y, params, use_ffn=use_ffn), _naive_layer(y, params, use_ffn),
                               **TIGHT)


@pytest.mark.parametrize("use_ffn", [True, False])
def test_parallel_and_recurrent_forms_agree(rng, use_ffn):
    y = rng.standard_normal((2, 3, 11, 4))
    params = init_average_attention(rng, 4, 16)
    recurrent = average_attention_decode(y, params, use_ffn=use_ffn)
    for method in ("equation", "scan", "auto"):
        np.testing.assert_allclose(average_attention_layer(y, params, use_ffn=use_ffn, method=method), recurrent,
                                   **TIGHT)


def test_step_carries_only_a_running_sum_and_a_count(rng):
    y = rng.standard_normal((5, 3))
    params = init_average_attention(0, 3, 6)
    state = None
    for t in range(5):
        _, state = average_attention_step(state, y[t], params)
    assert isinstance(state, AverageAttentionState) and state.count == 5 and state.total.shape == (3,)
    np.testing.assert_allclose(state.total, y.sum(axis=0), **TIGHT)


def test_gates_are_returned_and_later_positions_change_nothing_before(rng):
    y = rng.standard_normal((7, 4))
    params = init_average_attention(2, 4, 8)
    h, i, f = average_attention_layer(y, params, return_gates=True)
    assert i.shape == f.shape == (7, 4) and np.all((i > 0) & (i < 1)) and np.all((f > 0) & (f < 1))
    y[4:] = rng.standard_normal((3, 4))
    np.testing.assert_array_equal(average_attention_layer(y, params)[:4], h[:4])


def test_init_follows_the_official_initialiser():
    d, d_ff = 6, 10
    params = init_average_attention(5, d, d_ff)
    bounds = {"w_1": math.sqrt(6 / (d + d_ff)), "w_2": math.sqrt(6 / (d + d_ff)), "b_1": math.sqrt(3 / d_ff),
              "b_2": math.sqrt(3 / d)}
    for name, bound in bounds.items():
        w = getattr(params.ffn, name)
        assert np.all(np.abs(w) <= bound) and np.abs(w).max() > bound / 2, name
    assert np.all(np.abs(params.w_gate) <= math.sqrt(6 / (4 * d))) and params.w_gate.shape == (2 * d, 2 * d)
    assert np.all(np.abs(params.b_gate) <= math.sqrt(3 / (2 * d)))
    np.testing.assert_array_equal(params.norm.gamma, 1.0)
    np.testing.assert_array_equal(params.norm.beta, 0.0)
    np.testing.assert_array_equal(init_average_attention(5, d, d_ff).w_gate, params.w_gate)


def test_bad_layer_input_is_named():
    params = init_average_attention(0, 4, 8)
    with pytest.raises(ValueError, match="y has d_model=3"):
        average_attention_layer(np.ones((5, 3)), params)
    with pytest.raises(TypeError, match="params must be an AverageAttentionParams"):
        average_attention_layer(np.ones((5, 4)), params.ffn)
    with pytest.raises(TypeError, match="state must be"):
        average_attention_step((np.zeros(4), 0), np.ones(4), params)
    with pytest.raises(ValueError, match="w_gate must have shape"):
        AverageAttentionParams(params.ffn, np.ones((4, 4)), params.b_gate, params.norm)
