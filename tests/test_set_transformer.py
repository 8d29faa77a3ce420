"""Set Transformer: the inducing-point attention path (hand-computed, its effective matrix, ISAB's two attentions
written with multi-head attention, the limit of one pointed inducing point per key), the blocks against the paper's
equations and a transcription of the official MAB, permutation equivariance of MAB/SAB/ISAB and invariance of PMA,
the draws, no causal form, bad input, edge sizes and memory. tests/naive.py and the registry-driven tests cover the
rest."""
from __future__ import annotations

import math

import numpy as np
import pytest

from refattn import MultiHeadParams, init_multi_head, multi_head_attention, registry, scaled_dot_product_attention
from refattn.common import MemoryBudgetError, temporary_memory_budget
from refattn.compressed import (
    ISABParams,
    MABParams,
    PMAParams,
    draw_inducing_points,
    induced_attention,
    induced_maps,
    init_isab,
    init_mab,
    init_pma,
    isab,
    mab,
    pma,
    sab,
)

TIGHT = {"rtol": 1e-12, "atol": 1e-12}
LN2, LN3 = math.log(2.0), math.log(3.0)
RECORD = registry.get("set_transformer")


# --- the inducing-point attention path ------------------------------------------------------------------------

def test_hand_computed_one_and_two_inducing_points():
    """d = 1, scale 1, k = (0, ln 3), v = (4, 8). I = (1): A_IK = softmax(0, ln 3) = (1/4, 3/4), so H_V = 1 + 6 = 7
    and every query, with one memory slot, outputs 7. I = (1, 0) adds the slot A_IK = (1/2, 1/2): H_K = ln 3 / 2,
    H_V = 6; the first slot's key is 3 ln 3 / 4, so q = 4 ln 2 / ln 3 scores 3 ln 2 and 2 ln 2: weights 2/3, 1/3 and
    output 2/3 · 7 + 1/3 · 6 = 20/3."""
    k, v = np.array([[0.0], [LN3]]), np.array([[4.0], [8.0]])
    q = np.array([[0.3], [-2.0], [4 * LN2 / LN3]])
    np.testing.assert_allclose(induced_attention(q, k, v, [[1.0]], scale=1.0), [[7.0]] * 3, rtol=1e-15)
    out, W = induced_attention(q[2:], k, v, [[1.0], [0.0]], scale=1.0, return_weights=True)
    np.testing.assert_allclose(out, [[20 / 3]], rtol=1e-15)
    np.testing.assert_allclose(W, [[2 / 3 * 1 / 4 + 1 / 3 * 1 / 2, 2 / 3 * 3 / 4 + 1 / 3 * 1 / 2]], rtol=1e-15)


def test_effective_matrix_is_the_product_of_the_two_maps(rng):
    q, k, v = rng.standard_normal((2, 3, 6, 4)), rng.standard_normal((2, 3, 9, 4)), rng.standard_normal((2, 3, 9, 5))
    inducing = draw_inducing_points(rng, 3, 4)
    out, W = induced_attention(q, k, v, inducing, return_weights=True)
    A_QH, A_IK = induced_maps(q, k, inducing)
    assert A_QH.shape == (2, 3, 6, 3) and A_IK.shape == (2, 3, 3, 9)
    np.testing.assert_allclose(W, A_QH @ A_IK, **TIGHT)
    np.testing.assert_allclose(out, W @ v, **TIGHT)
    np.testing.assert_allclose(W.sum(axis=-1), 1.0, rtol=0, atol=1e-15 * 9)
    np.testing.assert_array_less(0.0, W)                           # every query reaches every key, positively
    assert max(np.linalg.matrix_rank(W[b, h]) for b in range(2) for h in range(3)) == 3   # rank ≤ ℓ = 3
    np.testing.assert_allclose(A_IK, scaled_dot_product_attention(inducing, k, k, return_weights=True)[1], **TIGHT)


def test_one_isab_head_without_residuals_norms_and_rff_is_the_path(rng):
    """ISAB's two attentions written with multi-head attention (one head, projections and Wᴼ, no bias): H =
    MultiHead(I, X, X), Y = MultiHead(X, H, H); the path with the composed projections gives Y before Wᴼ₂."""
    d, n, ell = 6, 8, 3
    X, I = rng.standard_normal((n, d)), rng.standard_normal((ell, d))
    p1, p2 = (init_multi_head(rng, d, 1, bias=False) for _ in range(2))
    Y = multi_head_attention(X, multi_head_attention(I, X, p1, num_heads=1), p2, num_heads=1)
    memory = X @ p1.w_v @ p1.w_o                                   # what H = A_IK (X W_V1) W_O1 mixes
    path = induced_attention(X @ p2.w_q, memory @ p2.w_k, memory @ p2.w_v, I @ p1.w_q, inducing_keys=X @ p1.w_k)
    np.testing.assert_allclose(path @ p2.w_o, Y, **TIGHT)


def test_one_inducing_point_pointed_at_each_key_is_softmax_attention(rng):
    """The limit the record names: ℓ = m inducing points I_j = c·k_j with unit keys and c = 1e5, so each one's weight on
    any other key is below e^{−40}: A_IK is the identity to rounding, the memory is (K, V), and the path is softmax."""
    k = rng.standard_normal((7, 4))
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    assert np.max(k @ k.T - 2 * np.eye(7)) < 1 - 40 * 2 / 1e5     # every cosine gap > 8e-4: c·s·gap > 40
    q, v = rng.standard_normal((5, 4)), rng.standard_normal((7, 3))
    np.testing.assert_allclose(induced_attention(q, k, v, 1e5 * k), scaled_dot_product_attention(q, k, v), **TIGHT)


def test_the_output_is_invariant_to_permuting_the_keys_and_values_together(rng):
    q, k, v = rng.standard_normal((5, 4)), rng.standard_normal((9, 4)), rng.standard_normal((9, 3))
    result = RECORD.apply(q, k, v, rng=1, return_weights=True)
    perm = rng.permutation(9)
    permuted = RECORD.apply(q, k[perm], v[perm], rng=1, return_weights=True)
    np.testing.assert_allclose(permuted.output, result.output, **TIGHT)
    np.testing.assert_allclose(permuted.weights, result.weights[:, perm], **TIGHT)


def test_the_record_draws_its_inducing_points_and_takes_them_back(rng):
    q, k, v = rng.standard_normal((3, 5, 4))
    result = RECORD.apply(q, k, v, rng=8, num_inducing=6, return_draws=True)
    inducing = result.draws["inducing"]
    np.testing.assert_array_equal(inducing, np.random.default_rng(8).standard_normal((6, 4)))
    np.testing.assert_array_equal(result.output, induced_attention(q, k, v, inducing))
    assert RECORD.apply(q, k, v, rng=8).draws is None
    assert RECORD.apply(q, k, v, rng=8, return_draws=True).draws["inducing"].shape == (4, 4)   # ℓ = 4 by default


# --- the blocks ----------------------------------------------------------------------------------------------

def _layer_norm(x, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(axis=-1, keepdims=True) + eps)


def _paper_mab(x, y, p, h, eps=1e-5):
    """MAB(X, Y) = LN(H + rFF(H)), H = LN(X + concat_j softmax(XW_jᵠ(YW_jᴷ)ᵀ/√d_k) YW_jⱽ · Wᴼ), head by head."""
    a = p.attention
    d_k = a.w_q.shape[1] // h
    heads = []
    for j in range(h):
        cols = slice(j * d_k, (j + 1) * d_k)
        Q, K, V = x @ a.w_q[:, cols] + a.b_q[cols], y @ a.w_k[:, cols] + a.b_k[cols], y @ a.w_v[:, cols] + a.b_v[cols]
        S = Q @ K.T / math.sqrt(d_k)
        E = np.exp(S - S.max(axis=-1, keepdims=True))
        heads.append(E / E.sum(axis=-1, keepdims=True) @ V)
    H = _layer_norm(x + np.concatenate(heads, axis=-1) @ a.w_o + a.b_o, eps)
    rff = np.maximum(0.0, H @ p.rff.w_1 + p.rff.b_1) @ p.rff.w_2 + p.rff.b_2
    return _layer_norm(H + rff, eps)


def _official_mab(Q, K, p, num_heads, ln):
    """The official ``MAB.forward`` (juho-lee/set_transformer, modules.py) line by line on one batch element,
    torch's split/cat along the batch axis kept as numpy's: heads stacked, scaled by √dim_V, O = Q_ + A V_."""
    a, dim_V = p.attention, p.attention.w_q.shape[1]
    Q = Q @ a.w_q + a.b_q                                          # Q = self.fc_q(Q)
    K, V = K @ a.w_k + a.b_k, K @ a.w_v + a.b_v                    # K, V = self.fc_k(K), self.fc_v(K)
    dim_split = dim_V // num_heads
    Q_, K_, V_ = (np.stack(np.split(t, dim_V // dim_split, axis=-1)) for t in (Q, K, V))   # torch.cat(split, 0)
    S = Q_ @ np.swapaxes(K_, 1, 2) / math.sqrt(dim_V)
    A = np.exp(S - S.max(axis=-1, keepdims=True))
    A /= A.sum(axis=-1, keepdims=True)                             # torch.softmax(·, 2)
    O = np.concatenate(list(Q_ + A @ V_), axis=-1)                 # torch.cat((Q_ + A.bmm(V_)).split(B, 0), 2)
    O = _layer_norm(O) if ln else O
    O = O + np.maximum(0.0, O @ p.rff.w_1 + p.rff.b_1)             # O + F.relu(self.fc_o(O))
    return _layer_norm(O) if ln else O


def _biased(p):
    """The same block with random biases, so the checks see every bias where it acts."""
    rng = np.random.default_rng(5)
    a = p.attention
    biases = {name: rng.standard_normal(getattr(a, name).shape) for name in ("b_q", "b_k", "b_v", "b_o")}
    return type(p)(MultiHeadParams(a.w_q, a.w_k, a.w_v, a.w_o, **biases),
                   type(p.rff)(p.rff.w_1, rng.standard_normal(p.rff.b_1.shape), p.rff.w_2, p.rff.b_2),
                   p.norm_1, p.norm_2)


def test_mab_is_the_papers_equations(rng):
    p = _biased(init_mab(rng, 8, 2, d_ff=12))
    x, y = rng.standard_normal((5, 8)), rng.standard_normal((7, 8))
    np.testing.assert_allclose(mab(x, y, p, num_heads=2), _paper_mab(x, y, p, 2), **TIGHT)
    np.testing.assert_allclose(sab(y, p, num_heads=2), _paper_mab(y, y, p, 2), **TIGHT)


@pytest.mark.parametrize("ln", [False, True])
def test_the_official_form_is_the_official_mab(rng, ln):
    p = _biased(init_mab(rng, 8, 4, form="official"))
    np.testing.assert_array_equal(p.rff.w_2, np.eye(8))           # its rFF is one layer and a ReLU
    x, y = rng.standard_normal((5, 8)), rng.standard_normal((7, 8))
    got = mab(x, y, p, num_heads=4, form="official", scale_by="model", layer_norm=ln)
    np.testing.assert_allclose(got, _official_mab(x, y, p, 4, ln), **TIGHT)


def test_scale_by_model_divides_by_the_width_of_all_heads(rng):
    x, y = rng.standard_normal((5, 8)), rng.standard_normal((7, 8))
    four, one = init_mab(rng, 8, 4), init_mab(rng, 8, 1)
    np.testing.assert_allclose(mab(x, y, one, num_heads=1, scale_by="model"), mab(x, y, one, num_heads=1), **TIGHT)
    assert not np.allclose(mab(x, y, four, num_heads=4, scale_by="model"), mab(x, y, four, num_heads=4))
    slower = MultiHeadParams(four.attention.w_q / 2, four.attention.w_k, four.attention.w_v, four.attention.w_o,
                             four.attention.b_q, four.attention.b_k, four.attention.b_v, four.attention.b_o)
    np.testing.assert_allclose(                                    # 1/√(h·d_k) = (1/2)·1/√d_k with h = 4
        mab(x, y, four, num_heads=4, scale_by="model"),
        mab(x, y, type(four)(slower, four.rff, four.norm_1, four.norm_2), num_heads=4), **TIGHT)


def test_pma_pools_rff_of_z_with_the_seeds_and_the_official_form_pools_z(rng):
    z = rng.standard_normal((6, 8))
    paper, official = init_pma(rng, 8, 2, 3), init_pma(rng, 8, 2, 3, form="official")
    assert official.rff is None and paper.rff is not None
    rff = np.maximum(0.0, z @ paper.rff.w_1 + paper.rff.b_1) @ paper.rff.w_2 + paper.rff.b_2
    np.testing.assert_allclose(pma(z, paper, num_heads=2), _paper_mab(paper.seeds, rff, paper.mab, 2), **TIGHT)
    np.testing.assert_allclose(pma(z, official, num_heads=2, form="official", scale_by="model", layer_norm=False),
                               _official_mab(official.seeds, z, official.mab, 2, ln=False), **TIGHT)


def test_isab_is_mab_of_x_and_mab_of_the_inducing_points(rng):
    p = init_isab(rng, 8, 2, 3)
    x = rng.standard_normal((2, 6, 8))
    H = np.stack([_paper_mab(p.inducing, x[b], p.mab_1, 2) for b in range(2)])
    np.testing.assert_allclose(isab(x, p, num_heads=2), np.stack([_paper_mab(x[b], H[b], p.mab_2, 2)
                                                                   for b in range(2)]), **TIGHT)


OPTIONS = [{}, {"form": "official", "scale_by": "model", "layer_norm": False}]


@pytest.mark.parametrize("options", OPTIONS, ids=["paper", "official"])
def test_mab_sab_isab_are_permutation_equivariant_and_pma_invariant(rng, options):
    form = options.get("form", "paper")
    x, y = rng.standard_normal((2, 9, 8)), rng.standard_normal((2, 7, 8))
    perm, perm_y = rng.permutation(9), rng.permutation(7)
    block, induced, pool = init_mab(rng, 8, 2, form=form), init_isab(rng, 8, 2, 4, form=form), \
        init_pma(rng, 8, 2, 2, form=form)
    out = mab(x, y, block, num_heads=2, **options)
    np.testing.assert_allclose(mab(x[:, perm], y[:, perm_y], block, num_heads=2, **options), out[:, perm], **TIGHT)
    np.testing.assert_allclose(sab(x[:, perm], block, num_heads=2, **options),
                               sab(x, block, num_heads=2, **options)[:, perm], **TIGHT)
    np.testing.assert_allclose(isab(x[:, perm], induced, num_heads=2, **options),
                               isab(x, induced, num_heads=2, **options)[:, perm], **TIGHT)
    pooled = pma(x, pool, num_heads=2, **options)
    assert pooled.shape == (2, 2, 8)
    np.testing.assert_allclose(pma(x[:, perm], pool, num_heads=2, **options), pooled, **TIGHT)


def test_init_draws_in_order_and_the_inducing_points_as_the_official_xavier():
    p = init_isab(3, 8, 2, 5)
    bound = math.sqrt(6.0 / ((5 + 1) * 8))                         # xavier_uniform_ of a (1, 5, 8) tensor
    draw = np.random.default_rng(3)
    np.testing.assert_array_equal(p.inducing, draw.uniform(-bound, bound, size=(5, 8)))
    again = init_mab(draw, 8, 2)
    np.testing.assert_array_equal(p.mab_1.attention.w_q, again.attention.w_q)
    assert isinstance(p, ISABParams) and isinstance(init_pma(0, 8, 2, 1), PMAParams)


# --- no causal form, bad input, edge sizes, memory -------------------------------------------------------------

def test_causal_is_refused_with_the_reason(rng):
    q, k, v = rng.standard_normal((3, 5, 4))
    with pytest.raises(ValueError, match="has no causal form .* a set has no order"):
        induced_attention(q, k, v, draw_inducing_points(0, 2, 4), causal=True)
    with pytest.raises(ValueError, match=r"takes causal in \(False,\)"):
        RECORD.apply(q, k, v, rng=0, causal=True)


def test_the_function_draws_what_it_is_not_given(rng):
    """induced_attention draws ℓ = 4 inducing points (or num_inducing) from rng, as the set_transformer record does."""
    q, k, v = rng.standard_normal((3, 5, 4))
    np.testing.assert_array_equal(induced_attention(q, k, v, rng=5),
                                  induced_attention(q, k, v, draw_inducing_points(5, 4, 4)))
    np.testing.assert_array_equal(induced_attention(q, k, v, num_inducing=2, rng=5),
                                  induced_attention(q, k, v, draw_inducing_points(5, 2, 4)))
    np.testing.assert_array_equal(RECORD.apply(q, k, v, num_inducing=2, rng=5).output,
                                  induced_attention(q, k, v, num_inducing=2, rng=5))
    given = draw_inducing_points(1, 3, 4)
    np.testing.assert_array_equal(induced_attention(q, k, v, given, rng=5), induced_attention(q, k, v, given))
    with pytest.raises(ValueError, match=r"set_transformer draws its inducing points from rng: pass rng= "
                                         r"\(or inducing=\)"):
        induced_attention(q, k, v)


def test_bad_input_is_named(rng):
    q, k, v = rng.standard_normal((3, 5, 4))
    with pytest.raises(ValueError, match=r"inducing has d_k=3 \(shape \(2, 3\)\) but q has d_k=4"):
        induced_attention(q, k, v, np.ones((2, 3)))
    with pytest.raises(ValueError, match="inducing must hold at least one row"):
        induced_attention(q, k, v, np.ones((0, 4)))
    with pytest.raises(ValueError, match=r"inducing_keys must have k's \(m, d_k\) = \(5, 4\), got shape \(6, 4\)"):
        induced_attention(q, k, v, np.ones((2, 4)), inducing_keys=np.ones((6, 4)))
    with pytest.raises(ValueError, match="draws its inducing points from rng"):
        RECORD.apply(q, k, v)
    with pytest.raises(ValueError, match=r"inducing has shape \(2, 4\) but num_inducing=3"):
        RECORD.apply(q, k, v, inducing=np.ones((2, 4)), num_inducing=3)
    with pytest.raises(ValueError, match="num_inducing must be a positive int"):
        RECORD.apply(q, k, v, rng=0, num_inducing=0)
    with pytest.raises(TypeError, match="params must be MABParams"):
        mab(q, k, init_multi_head(0, 4, 2), num_heads=2)
    with pytest.raises(TypeError, match="params must be ISABParams"):
        isab(q, init_mab(0, 4, 2), num_heads=2)
    with pytest.raises(ValueError, match="scale_by must be one of"):
        mab(q, k, init_mab(0, 4, 2), num_heads=2, scale_by="dim_V")
    with pytest.raises(ValueError, match="d_ff must be None"):
        init_mab(0, 4, 2, d_ff=8, form="official")
    block = init_mab(0, 4, 2)
    wide = MABParams(init_multi_head(0, 4, 2, d_k=3), block.rff, block.norm_1, block.norm_2)
    with pytest.raises(ValueError, match=r"h·d_k and h·d_v must be d_model=4"):
        mab(q, k, wide, num_heads=2, form="official")


def test_edge_sizes_follow_the_shared_rule(rng):
    inducing = draw_inducing_points(rng, 3, 4)
    q, k, v = rng.standard_normal((5, 4)), rng.standard_normal((6, 4)), rng.standard_normal((6, 3))
    out, W = induced_attention(q[:0], k, v, inducing, return_weights=True)
    assert out.shape == (0, 3) and W.shape == (0, 6)
    out, W = induced_attention(q, k[:0], v[:0], inducing, return_weights=True)   # m = 0: no key, zero rows
    np.testing.assert_array_equal(out, np.zeros((5, 3)))
    assert W.shape == (5, 0)
    assert induced_attention(q, k, v[:, :0], inducing).shape == (5, 0)
    assert induced_attention(np.ones((0, 5, 4)), k, v, inducing).shape == (0, 5, 3)
    with pytest.raises(ValueError, match="d_k=0"):
        induced_attention(q[:, :0], k[:, :0], v, inducing[:, :0])
    out = induced_attention(q[:, :0], k[:, :0], v, inducing[:, :0], scale=1.0)   # scores 0: uniform twice
    np.testing.assert_allclose(out, np.broadcast_to(v.mean(axis=0), (5, 3)), **TIGHT)


def test_nothing_n_by_m_without_weights(rng):
    n = 2048
    q, k, v = rng.standard_normal((3, n, 8))
    with temporary_memory_budget(8 * 2**20):                        # n·m·8 bytes = 32 MiB > 8 MiB
        out = RECORD.apply(q, k, v, rng=0).output
        with pytest.raises(MemoryBudgetError, match="return_weights=True"):
            RECORD.apply(q, k, v, rng=0, return_weights=True)
    np.testing.assert_allclose(out[:4], RECORD.apply(q[:4], k, v, rng=0).output, **TIGHT)
