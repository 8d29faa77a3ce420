"""Luna: hand-computed pack and unpack (one pack token at 0 is the mean of the values, and causal their running mean),
the effective matrix in both forms, a transcription of the official causal code, decoding one position at a time,
permutation equivariance of the non-causal form, the limit of one pointed pack token per key, the draws, bad input,
edge sizes and memory. tests/naive.py and the registry-driven tests (future independence, bottom-right) cover the
rest."""
from __future__ import annotations

import math

import numpy as np
import pytest

from refattn import registry, scaled_dot_product_attention
from refattn.common import MemoryBudgetError, temporary_memory_budget
from refattn.compressed import draw_pack, induced_attention, luna_attention, luna_maps, pack_activation

TIGHT = {"rtol": 1e-12, "atol": 1e-12}
RECORD = registry.get("luna")


# --- hand-computed cases ---------------------------------------------------------------------------------------

def test_pack_activation_is_softplus_with_beta_ln2():
    """log₂(1 + 2^x): 1 at 0, log₂ 3 at 1, log₂(3/2) at −1; at ±60, 60 + ε and ε = ln(1 + 2^−60)/ln 2 ≈ 1.25e-18 (no
    overflow, no underflow to 0)."""
    tiny = math.log1p(2.0**-60) / math.log(2.0)
    np.testing.assert_allclose(pack_activation([0.0, 1.0, -1.0, 60.0, -60.0]),
                               [1.0, math.log2(3.0), math.log2(1.5), 60.0 + tiny, tiny], rtol=1e-14, atol=0)


def test_one_pack_token_at_zero_is_the_mean_and_causally_the_running_mean(rng):
    """P = 0: every pack score is 0, so the pack is uniform (1/m) and causally F = softplus(0) = 1 for every key;
    the unpack has one token, weight 1, so the output is mean(V), and causally (1/(t+1)) Σ_{j≤t} v_j."""
    q, k, v = rng.standard_normal((6, 4)), rng.standard_normal((6, 4)), rng.standard_normal((6, 3))
    zero = np.zeros((1, 4))
    np.testing.assert_allclose(luna_attention(q, k, v, zero), np.broadcast_to(v.mean(axis=0), (6, 3)), **TIGHT)
    running = np.cumsum(v, axis=0) / np.arange(1, 7)[:, None]
    out, W = luna_attention(q, k, v, zero, causal=True, return_weights=True)
    np.testing.assert_allclose(out, running, **TIGHT)
    np.testing.assert_allclose(W, np.tril(np.ones((6, 6))) / np.arange(1, 7)[:, None], **TIGHT)


# --- the effective matrix --------------------------------------------------------------------------------------

def test_non_causal_is_the_inducing_point_path_with_the_pack(rng):
    q, k, v = rng.standard_normal((2, 5, 4)), rng.standard_normal((2, 8, 4)), rng.standard_normal((2, 8, 3))
    pack, pack_keys = draw_pack(rng, 3, 4), rng.standard_normal((2, 8, 4))
    out, W = luna_attention(q, k, v, pack, pack_keys=pack_keys, return_weights=True)
    A_unpack, A_pack = luna_maps(q, k, pack, pack_keys=pack_keys)
    np.testing.assert_allclose(W, A_unpack @ A_pack, **TIGHT)
    np.testing.assert_allclose(out, W @ v, **TIGHT)
    np.testing.assert_allclose(W.sum(axis=-1), 1.0, rtol=0, atol=1e-15 * 8)
    np.testing.assert_array_equal(out, induced_attention(q, k, v, pack, inducing_keys=pack_keys))
    np.testing.assert_allclose(A_pack, scaled_dot_product_attention(pack, pack_keys, v, return_weights=True)[1],
                               **TIGHT)


@pytest.mark.parametrize("causal", [True, "bottom-right"])
def test_causal_matrix_from_the_maps_by_matrix_products(rng, causal):
    """W_tj = (1/(t+1)) Σ_l A_unpack,tl F_jl on j ≤ t, with A_unpack,t = softmax(s q_t · (F_{≤t}ᵀ K_{≤t})/(t+1))
    recomputed here per position by matrix products (not running sums)."""
    n, m = (7, 7) if causal is True else (4, 7)
    q, k, v, kp = rng.standard_normal((n, 4)), rng.standard_normal((m, 4)), rng.standard_normal((m, 3)), \
        rng.standard_normal((m, 4))
    pack, s = draw_pack(rng, 3, 4), 0.5
    out, W = luna_attention(q, k, v, pack, pack_keys=kp, causal=causal, scale=s, return_weights=True)
    A_unpack, Ft = luna_maps(q, k, pack, pack_keys=kp, causal=causal, scale=s)
    F = pack_activation(s * kp @ pack.T)                           # (m, l)
    np.testing.assert_allclose(Ft, F.T, **TIGHT)
    expected = np.zeros((n, m))
    for i in range(n):
        t = i + m - n if causal == "bottom-right" else i
        P_K = F[: t + 1].T @ k[: t + 1] / (t + 1)                  # (l, d)
        S = s * P_K @ q[i]
        a = np.exp(S - S.max()) / np.exp(S - S.max()).sum()
        np.testing.assert_allclose(A_unpack[i], a, **TIGHT)
        expected[i, : t + 1] = F[: t + 1] @ a / (t + 1)
    np.testing.assert_allclose(W, expected, **TIGHT)
    np.testing.assert_allclose(out, W @ v, **TIGHT)
    assert np.all(W >= 0) and not np.allclose(W.sum(axis=-1), 1.0)   # nonnegative, rows not normalised


def _official_causal(x, pq_proj, pc_proj, q_proj, c_proj, scaling):
    """``LunarCausalAttention.forward`` (fairseq-apollo, luna_attention.py), one head, no bias, no dropout:
    pattn = softplus(pc_proj(x) · pq, β = ln 2), efficient_causal_attention_parallel twice, k = v = c_proj(x)."""
    def efficient_causal_attention_parallel(a, b, c):              # (n, d1), (n, d1), (n, d2)
        sum_mat = b[:, :, None] * c[:, None, :]                    # torch.matmul(y.unsqueeze(3), z.unsqueeze(2))
        accum_mat = np.cumsum(sum_mat, axis=0)
        res = np.einsum("nd,nde->ne", a, accum_mat)
        return res / np.arange(1, a.shape[0] + 1)[:, None]

    pq = pq_proj * scaling                                         # pq = self.pq_proj(pquery) * self.scaling
    pattn = np.logaddexp(0, math.log(2.0) * (x @ pc_proj) @ pq.T) / math.log(2.0)   # F.softplus(k.bmm(pq), beta)
    q = x @ q_proj * scaling
    k = v = x @ c_proj
    attn_weights = efficient_causal_attention_parallel(q, k, pattn)
    attn_probs = np.exp(attn_weights - attn_weights.max(axis=-1, keepdims=True))
    attn_probs /= attn_probs.sum(axis=-1, keepdims=True)
    return efficient_causal_attention_parallel(attn_probs, pattn, v)


def test_causal_form_is_the_official_causal_attention(rng):
    x, P = rng.standard_normal((9, 6)), rng.standard_normal((3, 6))
    pq_proj, pc_proj, q_proj, c_proj = (rng.standard_normal((6, 6)) / 3 for _ in range(4))
    expected = _official_causal(x, P @ pq_proj, pc_proj, q_proj, c_proj, 6**-0.5)
    got = luna_attention(x @ q_proj, x @ c_proj, x @ c_proj, P @ pq_proj, pack_keys=x @ pc_proj, causal=True)
    np.testing.assert_allclose(got, expected, **TIGHT)


def test_decoding_one_position_at_a_time_equals_the_causal_form(rng):
    """incremental_causal_attention: step t sees the keys 0 … t and its own query (bottom-right, n = 1)."""
    q, k, v = rng.standard_normal((8, 4)), rng.standard_normal((8, 4)), rng.standard_normal((8, 3))
    pack = draw_pack(rng, 3, 4)
    full = luna_attention(q, k, v, pack, causal=True)
    steps = [luna_attention(q[t:t + 1], k[: t + 1], v[: t + 1], pack, causal="bottom-right")[0] for t in range(8)]
    np.testing.assert_allclose(np.array(steps), full, **TIGHT)


def test_non_causal_is_permutation_equivariant_in_the_sequence(rng):
    """Self-attention on X (q, k, v all rows of X): permuting X permutes the output, as for a set."""
    x = rng.standard_normal((9, 4))
    pack = draw_pack(rng, 3, 4)
    perm = rng.permutation(9)
    out = luna_attention(x, 0.5 * x, x[:, :3], pack)
    np.testing.assert_allclose(luna_attention(x[perm], 0.5 * x[perm], x[perm, :3], pack), out[perm], **TIGHT)
    causal = luna_attention(x, 0.5 * x, x[:, :3], pack, causal=True)
    assert not np.allclose(luna_attention(x[perm], 0.5 * x[perm], x[perm, :3], pack, causal=True), causal[perm])


def test_one_pack_token_pointed_at_each_key_is_softmax_attention(rng):
    """l = m pack tokens P_j = c·k_j, unit keys, c = 1e5: the pack is the identity to rounding (see the Set Transformer
    test), the packed context is (K, V) and the unpack is softmax attention; not so causally (F is not one-hot)."""
    k = rng.standard_normal((7, 4))
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    assert np.max(k @ k.T - 2 * np.eye(7)) < 1 - 40 * 2 / 1e5
    q, v = rng.standard_normal((5, 4)), rng.standard_normal((7, 3))
    np.testing.assert_allclose(luna_attention(q, k, v, 1e5 * k), scaled_dot_product_attention(q, k, v), **TIGHT)


def test_the_record_draws_its_pack_and_takes_it_back(rng):
    q, k, v = rng.standard_normal((3, 5, 4))
    result = RECORD.apply(q, k, v, rng=8, pack_length=6, causal=True, return_draws=True, return_weights=True)
    pack = result.draws["pack"]
    np.testing.assert_array_equal(pack, np.random.default_rng(8).standard_normal((6, 4)))
    np.testing.assert_array_equal(result.output, luna_attention(q, k, v, pack, causal=True))
    np.testing.assert_array_equal(result.allowed, np.tril(np.ones((5, 5), dtype=bool)))
    assert RECORD.apply(q, k, v, rng=8, return_draws=True).draws["pack"].shape == (4, 4)   # l = 4 by default
    assert RECORD.apply(q, k, v, rng=8, return_weights=True).allowed is None


# --- bad input, edge sizes, memory -----------------------------------------------------------------------------

@pytest.mark.parametrize("causal", [False, True])
def test_the_function_draws_what_it_is_not_given(rng, causal):
    """luna_attention draws l = 4 pack queries (or pack_length) from rng, as the registry's apply does."""
    q, k, v = rng.standard_normal((3, 5, 4))
    np.testing.assert_array_equal(luna_attention(q, k, v, rng=5, causal=causal),
                                  luna_attention(q, k, v, draw_pack(5, 4, 4), causal=causal))
    np.testing.assert_array_equal(luna_attention(q, k, v, pack_length=2, rng=5, causal=causal),
                                  luna_attention(q, k, v, draw_pack(5, 2, 4), causal=causal))
    np.testing.assert_array_equal(RECORD.apply(q, k, v, pack_length=2, rng=5, causal=causal).output,
                                  luna_attention(q, k, v, pack_length=2, rng=5, causal=causal))
    given = draw_pack(1, 3, 4)
    np.testing.assert_array_equal(luna_attention(q, k, v, given, rng=5), luna_attention(q, k, v, given))
    with pytest.raises(ValueError, match=r"luna draws its pack queries from rng: pass rng= \(or pack=\)"):
        luna_attention(q, k, v)


def test_bad_input_is_named(rng):
    q, k, v = rng.standard_normal((3, 5, 4))
    with pytest.raises(ValueError, match=r"pack has d_k=3 \(shape \(2, 3\)\) but q has d_k=4"):
        luna_attention(q, k, v, np.ones((2, 3)))
    with pytest.raises(ValueError, match="pack must hold at least one row"):
        luna_attention(q, k, v, np.ones((0, 4)), causal=True)
    with pytest.raises(ValueError, match=r"pack_keys must have k's \(m, d_k\) = \(5, 4\), got shape \(5, 3\)"):
        luna_attention(q, k, v, np.ones((2, 4)), pack_keys=np.ones((5, 3)))
    with pytest.raises(ValueError, match="causal must be one of"):
        luna_attention(q, k, v, np.ones((2, 4)), causal="yes")
    with pytest.raises(ValueError, match="draws its pack queries from rng"):
        RECORD.apply(q, k, v)
    with pytest.raises(ValueError, match=r"pack has shape \(2, 4\) but pack_length=3"):
        RECORD.apply(q, k, v, pack=np.ones((2, 4)), pack_length=3)
    with pytest.raises(TypeError, match="return_weights must be True or False"):
        luna_attention(q, k, v, np.ones((2, 4)), return_weights=1)


@pytest.mark.parametrize("causal", [False, True, "bottom-right"])
def test_edge_sizes_follow_the_shared_rule(rng, causal):
    pack = draw_pack(rng, 3, 4)
    q, k, v = rng.standard_normal((5, 4)), rng.standard_normal((6, 4)), rng.standard_normal((6, 3))
    out, W = luna_attention(q[:0], k, v, pack, causal=causal, return_weights=True)
    assert out.shape == (0, 3) and W.shape == (0, 6)
    out, W = luna_attention(q, k[:0], v[:0], pack, causal=causal, return_weights=True)   # m = 0: zero rows
    np.testing.assert_array_equal(out, np.zeros((5, 3)))
    assert W.shape == (5, 0)
    assert luna_attention(q, k, v[:, :0], pack, causal=causal).shape == (5, 0)
    assert luna_attention(np.ones((0, 5, 4)), k, v, pack, causal=causal).shape == (0, 5, 3)
    with pytest.raises(ValueError, match="d_k=0"):
        luna_attention(q[:, :0], k[:, :0], v, pack[:, :0], causal=causal)
    if causal is False:                                            # scores 0: a uniform pack and unpack
        np.testing.assert_allclose(luna_attention(q[:, :0], k[:, :0], v, pack[:, :0], scale=1.0),
                                   np.broadcast_to(v.mean(axis=0), (5, 3)), **TIGHT)


def test_bottom_right_queries_before_every_key_are_zero(rng):
    q, k, v = rng.standard_normal((9, 4)), rng.standard_normal((6, 4)), rng.standard_normal((6, 3))
    out, W = luna_attention(q, k, v, draw_pack(rng, 2, 4), causal="bottom-right", return_weights=True)
    np.testing.assert_array_equal(out[:3], 0.0)
    np.testing.assert_array_equal(W[:3], 0.0)
    np.testing.assert_array_less(0.0, W[3:][np.tril(np.ones((6, 6), dtype=bool))])


@pytest.mark.parametrize("causal", [False, True])
def test_nothing_n_by_m_without_weights(rng, causal):
    n = 2048
    q, k, v = rng.standard_normal((3, n, 8))
    with temporary_memory_budget(8 * 2**20):                        # n·m·8 bytes = 32 MiB > 8 MiB
        out = RECORD.apply(q, k, v, rng=0, causal=causal).output
        with pytest.raises(MemoryBudgetError, match="return_weights=True"):
            RECORD.apply(q, k, v, rng=0, causal=causal, return_weights=True)
    np.testing.assert_allclose(out[:4], RECORD.apply(q[:4], k, v, rng=0).output if not causal else
                               RECORD.apply(q[:4], k[:4], v[:4], rng=0, causal=True).output, **TIGHT)
