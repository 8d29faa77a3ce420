"""GAU and FLASH: relu² attention of scale-offset Q, K with the paper's 1/n; the mixed chunk attention against its
direct definition (non-causal and causal, chunks that do not divide n), its limits, its linear memory; the gate."""
from __future__ import annotations

import numpy as np
import pytest

from refattn import registry
from refattn.beyond import (
    GAU_QK_STD,
    ScaleOffset,
    gated_attention_unit,
    gau_attention,
    init_gau_layer,
    init_scale_offset,
    mixed_chunk_weights,
    scale_offset,
)
from refattn.common import MemoryBudgetError, temporary_memory_budget

TIGHT = {"rtol": 1e-12, "atol": 1e-12}
GAU = registry.get("gau")


def _params(rng, rows, s=4):
    return ScaleOffset(rng.standard_normal((rows, s)), rng.standard_normal((rows, s)))


def test_relu_squared_by_hand():
    """Q = K = z (γ = 1, β = 0), m = 2: A = relu(zzᵀ/2)²; the negative score is cut to 0."""
    z = np.array([[1.0, 2.0], [-1.0, 1.0]])                        # zzᵀ = [[5, 1], [1, 2]]
    v = np.array([[1.0], [10.0]])
    identity = ScaleOffset(np.ones((2, 2)), np.zeros((2, 2)))
    out, A = gau_attention(z, z, v, params=identity, return_weights=True)
    np.testing.assert_allclose(A, [[6.25, 0.25], [0.25, 1.0]], **TIGHT)
    np.testing.assert_allclose(out, [[8.75], [10.25]], **TIGHT)
    z[1] = [-1.0, -1.0]                                            # zzᵀ[0, 1] = −3 < 0: weight 0
    np.testing.assert_allclose(gau_attention(z, z, v, params=identity, return_weights=True)[1][0, 1], 0.0, **TIGHT)


def test_queries_and_keys_are_one_z_scaled_and_offset_per_dimension(rng):
    z, v = rng.standard_normal((6, 4)), rng.standard_normal((6, 3))
    params = _params(rng, 2)
    Q, K = z * params.gamma[0] + params.beta[0], z * params.gamma[1] + params.beta[1]
    _, A = gau_attention(z, z, v, params=params, return_weights=True)
    np.testing.assert_allclose(A, np.maximum(Q @ K.T / 6, 0) ** 2, **TIGHT)   # default scale: the paper's 1/n
    np.testing.assert_array_equal(scale_offset(z, params)[1], K)


def test_initialisation_is_the_papers(rng):
    """γ ~ N(0, 0.02²), β = 0. With 4000 draws the sample std is within 5 % of 0.02 (its relative error is about
    1/√(2·4000) ≈ 1.1 %)."""
    params = init_scale_offset(0, 1000, count=4)
    assert params.gamma.shape == params.beta.shape == (4, 1000) and GAU_QK_STD == 0.02
    np.testing.assert_array_equal(params.beta, 0.0)
    assert abs(params.gamma.std() / 0.02 - 1) < 0.05


def _definition(q, k, v, params, chunk, causal, scale, linear_scale):
    """FLASH §3.2 written with explicit index sets: quadratic for keys in the query's chunk (j ≤ i when causal),
    linear for keys in every chunk, or in earlier chunks when causal."""
    Q, K, Ql, Kl = (z * params.gamma[t] + params.beta[t] for t, z in enumerate((q, k, q, k)))
    n, m = len(q), len(k)
    M = np.zeros((n, m))
    for i in range(n):
        for j in range(m):
            same = i // chunk == j // chunk
            if same and (not causal or j <= i):
                M[i, j] += max(Q[i] @ K[j] * scale, 0.0) ** 2
            if not causal or j // chunk < i // chunk:
                M[i, j] += Ql[i] @ Kl[j] * linear_scale
    return M @ v, M


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("n", "chunk"), [(12, 4), (11, 4), (10, 3), (9, 1), (7, 20)])
def test_mixed_chunk_attention_equals_its_direct_definition(rng, causal, n, chunk):
    z, v = rng.standard_normal((n, 4)), rng.standard_normal((n, 3))
    params = _params(rng, 4)
    expected_out, expected_M = _definition(z, z, v, params, chunk, causal, 1 / chunk, 1 / n)
    out, M = gau_attention(z, z, v, params=params, chunk=chunk, causal=causal, return_weights=True)
    np.testing.assert_allclose(M, expected_M, **TIGHT)
    np.testing.assert_allclose(out, expected_out, **TIGHT)
    np.testing.assert_allclose(gau_attention(z, z, v, params=params, chunk=chunk, causal=causal), out, **TIGHT)


def test_one_chunk_causal_is_gau_with_the_chunk_scale_and_no_linear_part(rng):
    """Causal with c ≥ n: every key is in the query's chunk, no chunk precedes it, so Q', K' play no part."""
    z, v = rng.standard_normal((7, 4)), rng.standard_normal((7, 3))
    params = _params(rng, 4)
    two = ScaleOffset(params.gamma[:2], params.beta[:2])
    np.testing.assert_allclose(gau_attention(z, z, v, params=params, chunk=7, causal=True),
                               gau_attention(z, z, v, params=two, causal=True, scale=1 / 7), **TIGHT)


def test_causal_chunks_ignore_later_keys_in_and_after_their_chunk(rng):
    z, v = rng.standard_normal((10, 4)), rng.standard_normal((10, 3))
    params = _params(rng, 4)
    out = gau_attention(z, z, v, params=params, chunk=4, causal=True)
    for i in (1, 4, 6):                                            # inside chunk 0, first and middle of chunk 1
        k, w = z.copy(), v.copy()
        k[i + 1:], w[i + 1:] = np.nan, np.nan
        np.testing.assert_array_equal(gau_attention(z, k, w, params=params, chunk=4, causal=True)[: i + 1],
                                      out[: i + 1])


def test_the_chunked_form_never_builds_an_n_by_m_matrix(rng):
    """n = m = 2048: the n × m weights take 32 MiB; under a 16 MiB budget GAU refuses, the chunks run."""
    z, v = rng.standard_normal((2048, 4)), rng.standard_normal((2048, 2))
    with temporary_memory_budget(16 * 2**20):
        with pytest.raises(MemoryBudgetError):
            GAU.apply(z, z, v, rng=0)
        out = GAU.apply(z, z, v, rng=0, chunk=64, causal=True).output
    assert out.shape == (2048, 2) and np.isfinite(out).all()


def test_module_weights_reproduce_the_chunked_output(rng):
    q, k, v = rng.standard_normal((5, 4)), rng.standard_normal((9, 4)), rng.standard_normal((9, 3))
    params = _params(rng, 4)
    Q, K, Ql, Kl = scale_offset(q, params)[0], scale_offset(k, params)[1], scale_offset(q, params)[2], \
        scale_offset(k, params)[3]
    for causal in (False, True, "bottom-right"):
        M = mixed_chunk_weights(Q, K, Ql, Kl, chunk=3, causal=causal, scale=0.4, linear_scale=0.1)
        out = gau_attention(q, k, v, params=params, chunk=3, causal=causal, scale=0.4, linear_scale=0.1)
        np.testing.assert_allclose(out, M @ v, **TIGHT)


def test_the_gated_unit(rng):
    """O = (U ⊙ relu²(QKᵀ/n) V) W_o + b_o with U, V, Z = SiLU of dense layers of x."""
    x = rng.standard_normal((2, 6, 8))
    params = init_gau_layer(3, 8, s=4)
    params = type(params)(**{**vars(params), "qk": _params(rng, 2), "b_u": rng.standard_normal(16)})

    def silu(t):
        return t / (1 + np.exp(-t))

    u, v, z = silu(x @ params.w_u + params.b_u), silu(x @ params.w_v + params.b_v), silu(x @ params.w_z + params.b_z)
    Q, K = z * params.qk.gamma[0] + params.qk.beta[0], z * params.qk.gamma[1] + params.qk.beta[1]
    A = np.tril(np.maximum(Q @ np.swapaxes(K, -1, -2) / 6, 0) ** 2)
    expected = (u * (A @ v)) @ params.w_o + params.b_o
    np.testing.assert_allclose(gated_attention_unit(x, params, causal=True), expected, **TIGHT)
    chunked = init_gau_layer(3, 8, s=4, chunked=True)
    assert chunked.qk.gamma.shape == (4, 4)
    assert gated_attention_unit(x, chunked, chunk=2).shape == (2, 6, 8)


def test_bad_input_is_named(rng):
    z, v = rng.standard_normal((5, 4)), rng.standard_normal((5, 3))
    with pytest.raises(ValueError, match=r"params must have shape \(4, s=4\)"):
        gau_attention(z, z, v, params=_params(rng, 2), chunk=2)
    with pytest.raises(ValueError, match="chunk must be"):
        gau_attention(z, z, v, rng=0, chunk=0)
    with pytest.raises(ValueError, match=r"gau draws its scale-offset params from rng: pass rng= \(or params=\)"):
        gau_attention(z, z, v)
    with pytest.raises(TypeError, match="params must be a ScaleOffset"):
        GAU.apply(z, z, v, params=np.ones((2, 4)))
    with pytest.raises(ValueError, match="gamma must have shape"):
        ScaleOffset(np.ones((3, 4)), np.zeros((3, 4)))
    with pytest.raises(ValueError, match="count must be 2"):
        init_scale_offset(0, 4, count=3)
    with pytest.raises(ValueError, match="x has d_model=4"):
        gated_attention_unit(z, init_gau_layer(0, 8, s=2))
