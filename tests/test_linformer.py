"""Linformer: hand-computed cases, the exact limits, the effective matrix, the draw and the sharing modes, heads,
no causal form, edge sizes, memory, and bad input. The naive loop of tests/naive.py and the registry-driven tests
cover the rest."""
from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest

from refattn import registry, scaled_dot_product_attention
from refattn.compressed import draw_projections, linformer_attention

TIGHT = {"rtol": 1e-12, "atol": 1e-12}
LN3 = math.log(3.0)


def _qkv(rng, n=5, m=7, d=4, d_v=3, batch=()):
    return (rng.standard_normal((*batch, n, d)), rng.standard_normal((*batch, m, d)),
            rng.standard_normal((*batch, m, d_v)))


# --- hand-computed cases -----------------------------------------------------------------------------

def test_one_projected_row_gives_fv_to_every_query():
    """k = 1: one projected key, so every softmax row is (1) and every output is F V = 0.25·4 + 0.75·8 = 7."""
    q, k, v = np.array([[3.0], [-1.0]]), np.array([[0.0], [1.0]]), np.array([[4.0], [8.0]])
    out, W = linformer_attention(q, k, v, E=[[1.0, 1.0]], F=[[0.25, 0.75]], return_weights=True)
    np.testing.assert_allclose(out, [[7.0], [7.0]], rtol=1e-15)
    np.testing.assert_allclose(W, [[0.25, 0.75], [0.25, 0.75]], rtol=1e-15)


def test_hand_computed_swapped_values():
    """E = I, F swaps the two values: P̄ = softmax(0, ln 3) = (1/4, 3/4) on F V = (8, 4): 8/4 + 3·4/4 = 5, and
    W = P̄ F = (3/4, 1/4)."""
    q, k, v = np.array([[1.0]]), np.array([[0.0], [LN3]]), np.array([[4.0], [8.0]])
    out, W = linformer_attention(q, k, v, E=np.eye(2), F=[[0.0, 1.0], [1.0, 0.0]], scale=1.0, return_weights=True)
    np.testing.assert_allclose(out, [[5.0]], rtol=1e-15)
    np.testing.assert_allclose(W, [[0.75, 0.25]], rtol=1e-15)


# --- exact limits and the effective matrix -----------------------------------------------------------

@pytest.mark.parametrize("method", ["equation", "blocked", "auto"])
def test_identity_projections_are_softmax_attention(rng, method):
    q, k, v = _qkv(rng, batch=(2,))
    out, W = linformer_attention(q, k, v, E=np.eye(7), F=np.eye(7), method=method, return_weights=True)
    ref, A = scaled_dot_product_attention(q, k, v, return_weights=True)
    np.testing.assert_allclose(out, ref, **TIGHT)
    np.testing.assert_allclose(W, A, **TIGHT)


def test_one_permutation_for_keys_and_values_is_softmax_attention(rng):
    """E = F = Π (k = m) reorders the keys and the values alike: the softmax over keys does not see the order."""
    q, k, v = _qkv(rng)
    perm = np.eye(7)[rng.permutation(7)]
    np.testing.assert_allclose(linformer_attention(q, k, v, E=perm, sharing="kv"),
                               scaled_dot_product_attention(q, k, v), **TIGHT)


@pytest.mark.parametrize("options", [{}, {"init": "official"}, {"sharing": "kv"}, {"scale": 0.3}])
def test_output_is_the_effective_matrix_times_v(rng, options):
    q, k, v = _qkv(rng, n=6, m=9, batch=(2,))
    out, W = linformer_attention(q, k, v, proj_dim=4, rng=1, return_weights=True, **options)
    assert W.shape == (2, 6, 9)
    np.testing.assert_allclose(W @ v, out, **TIGHT)


def test_effective_rows_sum_to_the_rows_of_p_f_1_and_may_be_negative(rng):
    q, k, v = _qkv(rng)
    E, F = draw_projections(3, 7, 4)
    E, F = E[0, 0], F[0, 0]
    out, W = linformer_attention(q, k, v, E=E, F=F, return_weights=True)
    P = scaled_dot_product_attention(q, E @ k, F @ v, return_weights=True)[1]
    np.testing.assert_allclose(W.sum(axis=-1), P @ F.sum(axis=-1), **TIGHT)
    assert np.any(W < 0) and not np.allclose(W.sum(axis=-1), 1.0)
    assert registry.get("linformer").normalized is False and registry.get("linformer").nonnegative is False


def test_methods_agree(rng):
    q, k, v = _qkv(rng, n=30, m=40, batch=(2,))
    outs = [linformer_attention(q, k, v, proj_dim=8, rng=2, method=method) for method in ("equation", "blocked",
                                                                                              "auto")]
    for out in outs[1:]:
        np.testing.assert_allclose(out, outs[0], rtol=1e-13, atol=1e-13)


# --- the draw and the sharing modes ------------------------------------------------------------------

def test_draw_order_of_one_head_of_one_layer():
    E, F = draw_projections(5, 7, 3)
    G = np.random.default_rng(5).standard_normal((1, 1, 2, 3, 7)) / math.sqrt(3)
    np.testing.assert_array_equal(E, G[:, :, 0])
    np.testing.assert_array_equal(F, G[:, :, 1])


def test_official_draw_is_fairseqs_xavier_uniform_with_gain_one_over_root_two():
    E, F = draw_projections(5, 10, 4, init="official", sharing="headwise", num_layers=2, num_heads=3)
    bound = math.sqrt(3.0 / 14)
    G = np.random.default_rng(5).uniform(-bound, bound, size=(2, 1, 2, 4, 10))
    np.testing.assert_array_equal(E[:, 2], G[:, 0, 0])
    np.testing.assert_array_equal(F[:, 1], G[:, 0, 1])
    assert np.abs(E).max() <= bound


def test_paper_draw_has_variance_one_over_k():
    """N(0, 1/k) entries: the sample variance of 20 000 of them is 1/k within 3 % (three standard errors)."""
    E, _ = draw_projections(0, 1000, 20)
    assert abs(E.var() * 20 - 1.0) < 0.03


@pytest.mark.parametrize(("sharing", "distinct"), [("none", 2 * 2 * 3), ("headwise", 2 * 2), ("kv", 2),
                                                   ("layerwise", 1)])
def test_sharing_modes_are_the_papers(sharing, distinct):
    """§4: none, two matrices per head and layer; headwise, E_{l,i} = E_l, F_{l,i} = F_l; kv, E_{l,i} = F_{l,i} = E_l;
    layerwise, one matrix everywhere. Shared matrices are one array, not copies."""
    E, F = draw_projections(1, 6, 2, sharing=sharing, num_heads=3, num_layers=2)
    assert E.shape == F.shape == (2, 3, 2, 6)
    matrices = {arr[l, i].tobytes() for arr in (E, F) for l in range(2) for i in range(3)}
    assert len(matrices) == distinct
    assert (F is E) == (sharing in ("kv", "layerwise"))
    if sharing != "none":
        assert np.shares_memory(E[1, 0], E[1, 2]) and np.shares_memory(F[0, 0], F[0, 1])
    assert np.shares_memory(E[0], E[1]) == (sharing == "layerwise")
    assert not E.flags.writeable


def test_per_head_projections_act_on_their_heads(rng):
    """num_heads = h: E and F (h, k, m) from the same draw as draw_projections, head i of the inputs with E_i, F_i;
    under "headwise" every head uses head 0's."""
    q, k, v = _qkv(rng, batch=(2, 3))
    for sharing in ("none", "headwise"):
        out = linformer_attention(q, k, v, proj_dim=4, rng=8, num_heads=3, sharing=sharing)
        E, F = draw_projections(8, 7, 4, num_heads=3, sharing=sharing)
        for i in range(3):
            np.testing.assert_allclose(out[:, i], linformer_attention(q[:, i], k[:, i], v[:, i], E=E[0, i],
                                                                      F=F[0, i]), **TIGHT)
        heads_equal = np.allclose(out[:, 0], linformer_attention(q[:, 0], k[:, 0], v[:, 0], E=E[0, 1], F=F[0, 1]))
        assert heads_equal == (sharing == "headwise")


def test_kv_sharing_uses_e_for_the_values(rng):
    q, k, v = _qkv(rng)
    E = draw_projections(2, 7, 4)[0][0, 0]
    np.testing.assert_array_equal(linformer_attention(q, k, v, E=E, sharing="kv"),
                                  linformer_attention(q, k, v, E=E, F=E))
    drawn = linformer_attention(q, k, v, proj_dim=4, rng=2, sharing="layerwise")
    np.testing.assert_allclose(drawn, linformer_attention(q, k, v, E=draw_projections(2, 7, 4, sharing="kv")[0][0, 0],
                                                          sharing="kv"), **TIGHT)


def test_apply_returns_the_projections_it_used(rng):
    q, k, v = _qkv(rng)
    result = registry.get("linformer").apply(q, k, v, rng=4, sharing="kv", return_draws=True)
    assert result.draws["E"].shape == (4, 7) and result.draws["F"] is result.draws["E"]
    np.testing.assert_array_equal(result.draws["E"], draw_projections(4, 7, 4, sharing="kv")[0][0, 0])


# --- no causal form ----------------------------------------------------------------------------------

@pytest.mark.parametrize("causal", [True, "top-left", "bottom-right"])
def test_no_causal_form(rng, causal):
    q, k, v = _qkv(rng)
    with pytest.raises(ValueError, match=r"Linformer has no causal form \(E K and F V mix all m positions, later "
                                         r"ones included.*issue #4\); pass causal=False"):
        linformer_attention(q, k, v, proj_dim=2, rng=0, causal=causal)
    with pytest.raises(ValueError, match="linformer takes causal in"):
        registry.get("linformer").apply(q, k, v, rng=0, causal=causal)


def test_every_output_row_depends_on_the_last_key():
    """Why there is no causal form: changing only the last key and value moves the first query's output."""
    rng = np.random.default_rng(3)
    q, k, v = _qkv(rng, n=7)
    before = linformer_attention(q, k, v, proj_dim=3, rng=1)
    k[-1], v[-1] = k[-1] + 1.0, v[-1] + 1.0
    assert np.all(np.abs(linformer_attention(q, k, v, proj_dim=3, rng=1) - before)[0] > 1e-6)


# --- edge sizes, memory, bad input -------------------------------------------------------------------

def test_edge_sizes(rng):
    q, k, v = _qkv(rng)
    assert linformer_attention(q[:0], k, v, proj_dim=3, rng=0).shape == (0, 3)
    out, W = linformer_attention(q, k[:0], v[:0], proj_dim=3, rng=0, return_weights=True)
    np.testing.assert_array_equal(out, np.zeros((5, 3)))           # m = 0: the empty sum
    assert W.shape == (5, 0)
    assert linformer_attention(q, k, v[:, :0], proj_dim=3, rng=0).shape == (5, 0)
    assert linformer_attention(q[None][:0], k[None][:0], v[None][:0], proj_dim=3, rng=0).shape == (0, 5, 3)
    with pytest.raises(ValueError, match="d_k"):
        linformer_attention(q[:, :0], k[:, :0], v, proj_dim=3, rng=0)
    np.testing.assert_allclose(linformer_attention(q[:, :0], k[:, :0], v, E=np.eye(7), F=np.eye(7), scale=1.0),
                               np.broadcast_to(v.mean(axis=0), (5, 3)), **TIGHT)   # scores 0: uniform


def test_nothing_n_by_m():
    """n = m = 4096, k = 8: the n × m weights would be 128 MiB; the call stays under 8 MiB beyond its inputs."""
    rng = np.random.default_rng(0)
    q, k, v = _qkv(rng, n=4096, m=4096, d=8, d_v=8)
    tracemalloc.start()
    linformer_attention(q, k, v, proj_dim=8, rng=0)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 8 * 2**20, peak


def test_k_4_by_default_and_rng_unused_with_explicit_projections(rng):
    """proj_dim = 4 when drawing without it (as the registry's apply); a registry passes rng always, and with E it
    draws nothing."""
    q, k, v = _qkv(rng)
    np.testing.assert_array_equal(linformer_attention(q, k, v, rng=3), linformer_attention(q, k, v, proj_dim=4, rng=3))
    assert not np.array_equal(linformer_attention(q, k, v, rng=3), linformer_attention(q, k, v, proj_dim=3, rng=3))
    E, F = np.ones((3, 7)) / 7, np.eye(3, 7)
    np.testing.assert_array_equal(linformer_attention(q, k, v, E=E, F=F, rng=0), linformer_attention(q, k, v, E=E, F=F))


def test_bad_input(rng):
    q, k, v = _qkv(rng)
    E = np.ones((3, 7))
    cases = [
        (dict(), ValueError, r"linformer draws E and F from rng: pass rng= \(or E=\)"),
        (dict(E=np.ones((3, 6)), F=E), ValueError, r"E must have shape \(\.\.\., k, m=7\)"),
        (dict(E=E, F=np.ones((2, 7))), ValueError, r"F must have E's \(k, m\)"),
        (dict(E=E), ValueError, "sharing='none' projects keys and values separately"),
        (dict(E=E, F=2 * E, sharing="kv"), ValueError, "F differs from E"),
        (dict(E=E, F=E, proj_dim=4), ValueError, "proj_dim=4 but E has k=3"),
        (dict(rng=0, proj_dim=0), ValueError, "proj_dim must be a positive int"),
        (dict(rng=0, proj_dim=2, sharing="heads"), ValueError, "sharing must be one of"),
        (dict(rng=0, proj_dim=2, init="xavier"), ValueError, "init must be one of"),
        (dict(rng=0, proj_dim=2, method="csr"), ValueError, "method must be one of"),
        (dict(E=E.astype(int), F=E), TypeError, "E must be a real floating-point array"),
    ]
    for options, error, message in cases:
        with pytest.raises(error, match=message):
            linformer_attention(q, k, v, **options)
    with pytest.raises(ValueError, match=r"leading \(batch\) dimensions do not broadcast: q, k, v \(2,\), E \(4,\)"):
        linformer_attention(*_qkv(rng, batch=(2,)), E=np.ones((4, 3, 7)), F=np.ones((4, 3, 7)))
    with pytest.raises(ValueError, match=r"^linformer draws E and F from rng: pass rng= \(or E=\)$"):   # its id
        registry.get("linformer").apply(q, k, v)
