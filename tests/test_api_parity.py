"""API parity with other libraries: each test holds refattn to a NumPy transcription of the other
library's documented semantics (written here from its documentation; torch is never imported)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from refattn import scaled_dot_product_attention
from refattn.oracle.vjp import sdpa_vjp

# ------------------------------------------------------------------ grouped-query attention (enable_gqa)


def torch_sdpa_reference(query, key, value, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    """The reference implementation printed in the documentation of
    ``torch.nn.functional.scaled_dot_product_attention`` (PyTorch 2.5), in NumPy, dropout 0.

    ``key.repeat_interleave(query.size(-3) // key.size(-3), -3)`` is written as the loop it means:
    repeated head ``i`` is key head ``i // (h / h_kv)``.
    """
    L, S = query.shape[-2], key.shape[-2]
    scale_factor = 1 / math.sqrt(query.shape[-1]) if scale is None else scale
    attn_bias = np.zeros((L, S))
    if is_causal:
        assert attn_mask is None
        temp_mask = np.tril(np.ones((L, S), dtype=bool), k=0)
        attn_bias[~temp_mask] = -np.inf
    if attn_mask is not None:
        if attn_mask.dtype == np.bool_:
            attn_bias = np.where(attn_mask, attn_bias, -np.inf)
        else:
            attn_bias = attn_mask + attn_bias
    if enable_gqa:
        h, h_kv = query.shape[-3], key.shape[-3]
        key = np.stack([key[..., i // (h // h_kv), :, :] for i in range(h)], axis=-3)
        value = np.stack([value[..., i // (h // h_kv), :, :] for i in range(h)], axis=-3)
    attn_weight = query @ np.swapaxes(key, -2, -1) * scale_factor
    attn_weight = attn_weight + attn_bias
    attn_weight = np.exp(attn_weight - attn_weight.max(axis=-1, keepdims=True))
    attn_weight = attn_weight / attn_weight.sum(axis=-1, keepdims=True)
    return attn_weight @ value


@pytest.mark.parametrize(("h", "h_kv"), [(6, 2), (4, 1), (3, 3)])
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_enable_gqa_matches_torch_reference(h, h_kv, causal):
    rng = np.random.default_rng(19)
    q, k, v = rng.standard_normal((2, h, 5, 4)), rng.standard_normal((2, h_kv, 5, 4)), rng.standard_normal((2, h_kv, 5, 3))
    expected = torch_sdpa_reference(q, k, v, is_causal=causal, enable_gqa=True)
    for method in ("equation", "blocked"):
        out = scaled_dot_product_attention(q, k, v, causal=causal, enable_gqa=True, method=method)
        np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12, err_msg=method)


def test_sdpa_enable_gqa_with_a_per_head_mask():
    rng = np.random.default_rng(20)
    q, k, v = rng.standard_normal((4, 3, 4)), rng.standard_normal((2, 6, 4)), rng.standard_normal((2, 6, 2))
    mask = rng.random((4, 3, 6)) < 0.7
    mask[..., 0] = True                                            # no fully masked row (torch would give NaN)
    expected = torch_sdpa_reference(q, k, v, attn_mask=mask, enable_gqa=True)
    out = scaled_dot_product_attention(q, k, v, mask, enable_gqa=True)
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)


def test_sdpa_enable_gqa_errors_name_the_shapes():
    rng = np.random.default_rng(21)
    q, k, v = rng.standard_normal((4, 3, 4)), rng.standard_normal((3, 6, 4)), rng.standard_normal((3, 6, 2))
    with pytest.raises(ValueError, match=r"h=4 heads but k has h_kv=3"):
        scaled_dot_product_attention(q, k, v, enable_gqa=True)
    with pytest.raises(ValueError, match=r"head axis.*\(3, 4\)"):
        scaled_dot_product_attention(q[0], k[0], v[0], enable_gqa=True)
    with pytest.raises(ValueError, match=r"k has h_kv=2 heads but v has shape \(1, 6, 2\)"):
        scaled_dot_product_attention(q, k[:2], v[:1], enable_gqa=True)
    with pytest.raises(TypeError, match="enable_gqa"):
        scaled_dot_product_attention(q, k[:2], v[:2], enable_gqa="yes")
    with pytest.raises(ValueError, match="broadcast"):             # without enable_gqa heads broadcast only
        scaled_dot_product_attention(q, k[:2], v[:2])


def test_sdpa_vjp_enable_gqa_against_finite_differences_of_the_torch_reference():
    rng = np.random.default_rng(22)
    q, k, v = rng.standard_normal((4, 3, 2)), rng.standard_normal((2, 4, 2)), rng.standard_normal((2, 4, 2))
    d_out = rng.standard_normal((4, 3, 2))
    g = sdpa_vjp(q, k, v, d_out, causal="bottom-right", enable_gqa=True)
    assert (g.dq.shape, g.dk.shape, g.dv.shape) == (q.shape, k.shape, v.shape)
    bias = np.where(np.tril(np.ones((3, 4), dtype=bool), k=1), 0.0, -np.inf)   # bottom-right: j <= i + (m − n)

    def loss(q, k, v):
        return float(np.sum(d_out * torch_sdpa_reference(q, k, v, attn_mask=bias, enable_gqa=True)))

    # Central differences, step 1e-5: truncation h²/6·|f'''| ~ 1e-10 (third derivatives O(1) at these
    # unit-scale inputs) plus rounding ~ eps·|f|/h ~ 2e-16·5/1e-5 = 1e-10, so 1e-8 holds with margin.
    step = 1e-5
    for name, x, grad in (("q", q, g.dq), ("k", k, g.dk), ("v", v, g.dv)):
        fd = np.zeros_like(x)
        for index in np.ndindex(x.shape):
            plus, minus = x.copy(), x.copy()
            plus[index] += step
            minus[index] -= step
            args = {"q": q, "k": k, "v": v}
            fd[index] = (loss(**{**args, name: plus}) - loss(**{**args, name: minus})) / (2 * step)
        np.testing.assert_allclose(grad, fd, rtol=0, atol=1e-8, err_msg=name)


def test_sdpa_vjp_enable_gqa_sums_each_group_exactly():
    """Autodiff of ``repeat_interleave`` sums the copies: dK of head g = Σ of the repeated heads' dK."""
    rng = np.random.default_rng(23)
    q, k, v = rng.standard_normal((2, 6, 3, 4)), rng.standard_normal((2, 3, 5, 4)), rng.standard_normal((2, 3, 5, 2))
    d_out = rng.standard_normal((2, 6, 3, 2))
    g = sdpa_vjp(q, k, v, d_out, causal=True, enable_gqa=True)
    k_full = np.stack([k[:, i // 2] for i in range(6)], axis=1)
    v_full = np.stack([v[:, i // 2] for i in range(6)], axis=1)
    full = sdpa_vjp(q, k_full, v_full, d_out, causal=True)
    np.testing.assert_allclose(g.dq, full.dq, rtol=1e-12, atol=1e-12)
    for head in range(3):
        np.testing.assert_allclose(g.dk[:, head], full.dk[:, 2 * head] + full.dk[:, 2 * head + 1], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(g.dv[:, head], full.dv[:, 2 * head] + full.dv[:, 2 * head + 1], rtol=1e-12, atol=1e-12)
