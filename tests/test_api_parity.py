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
    q, k = rng.standard_normal((2, h, 5, 4)), rng.standard_normal((2, h_kv, 5, 4))
    v = rng.standard_normal((2, h_kv, 5, 3))
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
        for got, want in ((g.dk, full.dk), (g.dv, full.dv)):
            np.testing.assert_allclose(got[:, head], want[:, 2 * head] + want[:, 2 * head + 1], rtol=1e-12, atol=1e-12)


# ------------------------------------------------ nn.MultiheadAttention: kdim, vdim, add_bias_kv, add_zero_attn


def torch_mha_reference(query, key, value, num_heads, q_proj_weight, k_proj_weight, v_proj_weight, in_proj_bias,
                        out_proj_weight, out_proj_bias, bias_k=None, bias_v=None, add_zero_attn=False,
                        attn_mask=None):
    """``torch.nn.MultiheadAttention(embed_dim, num_heads, bias=True, add_bias_kv, add_zero_attn, kdim, vdim,
    batch_first=True)`` forward in NumPy, as its documentation and ``F.multi_head_attention_forward`` define it
    (dropout 0): weights (out, in) act as ``x @ W.T``; ``bias_k``/``bias_v`` of shape (1, 1, E) are appended to
    the projected key/value sequences and ``attn_mask`` padded with one allowed column; heads are
    (N·num_heads, len, E / num_heads); ``add_zero_attn`` appends a zero key/value per head and pads the mask
    again; a boolean ``attn_mask`` is True where attention is NOT allowed, a float one is added; a 3-D mask is
    (N·num_heads, L, S). Returns the output and the per-head weights (``average_attn_weights=False``)."""
    N, L, E = query.shape
    head_dim = E // num_heads
    b_q, b_k, b_v = np.split(in_proj_bias, 3)
    q = query @ q_proj_weight.T + b_q
    k = key @ k_proj_weight.T + b_k
    v = value @ v_proj_weight.T + b_v
    if attn_mask is not None and attn_mask.dtype == np.bool_:
        attn_mask = np.where(attn_mask, -np.inf, 0.0)
    if bias_k is not None:
        k = np.concatenate([k, np.broadcast_to(bias_k, (N, 1, E))], axis=1)
        v = np.concatenate([v, np.broadcast_to(bias_v, (N, 1, E))], axis=1)
        if attn_mask is not None:
            attn_mask = np.concatenate([attn_mask, np.zeros((*attn_mask.shape[:-1], 1))], axis=-1)

    def heads(x):                                                  # (N, T, E) -> (N·num_heads, T, head_dim)
        return x.reshape(N, x.shape[1], num_heads, head_dim).transpose(0, 2, 1, 3).reshape(N * num_heads, -1, head_dim)

    q, k, v = heads(q), heads(k), heads(v)
    if add_zero_attn:
        k = np.concatenate([k, np.zeros((N * num_heads, 1, head_dim))], axis=1)
        v = np.concatenate([v, np.zeros((N * num_heads, 1, head_dim))], axis=1)
        if attn_mask is not None:
            attn_mask = np.concatenate([attn_mask, np.zeros((*attn_mask.shape[:-1], 1))], axis=-1)
    scores = (q / math.sqrt(head_dim)) @ k.transpose(0, 2, 1)
    if attn_mask is not None:
        scores = scores + attn_mask
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = weights / weights.sum(axis=-1, keepdims=True)
    out = (weights @ v).reshape(N, num_heads, L, head_dim).transpose(0, 2, 1, 3).reshape(N, L, E)
    return out @ out_proj_weight.T + out_proj_bias, weights.reshape(N, num_heads, L, -1)


def torch_arguments(params):
    """refattn's parameters in torch's layout: (out, in) weights, ``in_proj_bias`` = [b_q, b_k, b_v]."""
    args = {"q_proj_weight": params.w_q.T, "k_proj_weight": params.w_k.T, "v_proj_weight": params.w_v.T,
            "in_proj_bias": np.concatenate([params.b_q, params.b_k, params.b_v]),
            "out_proj_weight": params.w_o.T, "out_proj_bias": params.b_o}
    if params.bias_k is not None:
        args.update(bias_k=params.bias_k[None, None, :], bias_v=params.bias_v[None, None, :])
    return args


def random_biases(params, rng):
    """Nonzero projection biases (init draws zeros, which would hide a misplaced bias)."""
    from dataclasses import replace
    return replace(params, **{name: rng.standard_normal(np.shape(getattr(params, name)))
                              for name in ("b_q", "b_k", "b_v", "b_o")})


@pytest.mark.parametrize("add_bias_kv", [False, True])
@pytest.mark.parametrize("add_zero_attn", [False, True])
@pytest.mark.parametrize("mask_kind", ["none", "per_head_bool", "per_head_float", "causal"])
def test_multi_head_matches_torch_multihead_attention(add_bias_kv, add_zero_attn, mask_kind):
    from refattn import init_multi_head, multi_head_attention

    rng = np.random.default_rng(31)
    N, L, S, E, h, kdim, vdim = 2, 3, 5, 6, 2, 4, 7
    params = random_biases(init_multi_head(rng, E, h, kdim=kdim, vdim=vdim, add_bias_kv=add_bias_kv), rng)
    assert (params.w_k.shape, params.w_v.shape, params.bias_k is None) == ((kdim, E), (vdim, E), not add_bias_kv)
    x_q, x_k, x_v = rng.standard_normal((N, L, E)), rng.standard_normal((N, S, kdim)), rng.standard_normal((N, S, vdim))
    ours, theirs, causal = None, None, False
    if mask_kind == "per_head_bool":
        ours = rng.random((N, h, L, S)) < 0.6
        ours[..., 0] = True                                        # no fully masked row (torch gives NaN there)
        theirs = ~ours.reshape(N * h, L, S)                        # torch: 3-D (N·num_heads, L, S), True = masked
    elif mask_kind == "per_head_float":
        ours = rng.standard_normal((1, h, L, S))                   # (1, h, L, S): the same per-head bias for all
        theirs = np.broadcast_to(ours, (N, h, L, S)).reshape(N * h, L, S)
    elif mask_kind == "causal":
        causal, theirs = True, ~np.tril(np.ones((L, S), dtype=bool))   # torch: a 2-D causal attn_mask
    out, A = multi_head_attention(x_q, x_k, params, num_heads=h, x_v=x_v, mask=ours, causal=causal,
                                  add_zero_attn=add_zero_attn, return_weights=True)
    expected, expected_A = torch_mha_reference(x_q, x_k, x_v, h, **torch_arguments(params),
                                               add_zero_attn=add_zero_attn, attn_mask=theirs)
    assert A.shape == (N, h, L, S + add_bias_kv + add_zero_attn)
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(A, expected_A, rtol=1e-12, atol=1e-12)


def test_multi_head_vjp_with_bias_kv_against_finite_differences():
    from refattn import init_multi_head, multi_head_attention
    from refattn.oracle.vjp import multi_head_vjp

    rng = np.random.default_rng(32)
    params = random_biases(init_multi_head(rng, 4, 2, kdim=3, vdim=5, add_bias_kv=True), rng)
    x_q, x_k, x_v = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 4, 3)), rng.standard_normal((2, 4, 5))
    mask = rng.random((2, 2, 3, 4)) < 0.7
    d_out = rng.standard_normal((2, 3, 4))
    g = multi_head_vjp(x_q, x_k, params, d_out, num_heads=2, x_v=x_v, mask=mask, causal=True)
    from dataclasses import replace

    def loss(**change):
        return float(np.sum(d_out * multi_head_attention(x_q, x_k, replace(params, **change), num_heads=2, x_v=x_v,
                                                          mask=mask, causal=True)))

    # Central differences, step 1e-5: truncation ~ h²·|f'''| ~ 1e-10 and rounding ~ eps·|f|/h ~ 1e-10 at these
    # unit-scale inputs, so 1e-8 holds with margin.
    step = 1e-5
    for name in ("bias_k", "bias_v", "w_k", "w_v"):
        x = getattr(params, name)
        fd = np.zeros_like(x)
        for index in np.ndindex(x.shape):
            plus, minus = x.copy(), x.copy()
            plus[index] += step
            minus[index] -= step
            fd[index] = (loss(**{name: plus}) - loss(**{name: minus})) / (2 * step)
        np.testing.assert_allclose(getattr(g.dparams, name), fd, rtol=0, atol=1e-8, err_msg=name)


# ------------------------------------------------------------------------------ per-head masks, one rule


def test_per_head_mask_rule_and_errors():
    from refattn import init_multi_head, multi_head_attention

    rng = np.random.default_rng(33)
    B, n, m, d, h = 3, 2, 4, 4, 2
    params = random_biases(init_multi_head(rng, d, h), rng)
    x, mem = rng.standard_normal((B, n, d)), rng.standard_normal((B, m, d))
    per_head = rng.random((B, h, n, m)) < 0.6
    per_head[..., 0] = True
    _, A = multi_head_attention(x, mem, params, num_heads=h, mask=per_head, return_weights=True)
    np.testing.assert_array_equal(A[~per_head], 0.0)               # each head its own mask
    # (1, h, n, m) is per head and shared by the batch, never a batch of masks (torch: (B·h, n, m) repeated)
    out, A = multi_head_attention(x, mem, params, num_heads=h, mask=per_head[:1], return_weights=True)
    expected, _ = torch_mha_reference(x, mem, mem, h, **torch_arguments(params),
                                      attn_mask=~np.broadcast_to(per_head[:1], per_head.shape).reshape(B * h, n, m))
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)
    # Unbatched inputs: (h, n, m) is per head.
    out = multi_head_attention(x[0], mem[0], params, num_heads=h, mask=per_head[0])
    np.testing.assert_allclose(out, multi_head_attention(x[:1], mem[:1], params, num_heads=h, mask=per_head[:1])[0],
                               rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError,
                       match=r"mask has shape \(3, 2, 2, 4\): with inputs of 0 batch dims .* at most 3 dims"):
        multi_head_attention(x[0], mem[0], params, num_heads=h, mask=per_head)
    with pytest.raises(ValueError, match=r"mask has shape \(3, 3, 2, 4\).*head axis has 3 entries and num_heads=2"):
        multi_head_attention(x, mem, params, num_heads=h, mask=np.ones((B, 3, n, m), dtype=bool))
    with pytest.raises(ValueError, match=r"mask has shape \(3, 2, 4\): 3 dims with inputs of 0 batch dims"):
        multi_head_attention(x[0], mem[0], params, num_heads=h, mask=np.ones((B, n, m), dtype=bool))


# ------------------------------------------------------------------- feed-forward activations


def sigmoid(z):
    return 1.0 / (1.0 + math.exp(-z))


# PyTorch's documented formulas (torch.nn.GELU, torch.nn.SiLU, torch.nn.ReLU) and Shazeer (2020)'s
# FFN_SwiGLU / FFN_GEGLU (arXiv:2002.05202v1, Eqs. 5-6), one element at a time.
SCALAR_ACTIVATIONS = {
    "relu": lambda z: max(0.0, z),
    "gelu": lambda z: z * 0.5 * (1.0 + math.erf(z / math.sqrt(2.0))),                  # GELU(approximate="none")
    "gelu_tanh": lambda z: 0.5 * z * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (z + 0.044715 * z**3))),
    "swiglu": lambda z: z * sigmoid(z),                                                # SiLU = Swish_1
    "geglu": lambda z: z * 0.5 * (1.0 + math.erf(z / math.sqrt(2.0))),
}


def transcribed_ffn(x, params, activation):
    """FFN(x) = f(x W₁ + b₁) [⊗ (x V + c)] W₂ + b₂ with Python loops over positions and units."""
    d_model, d_ff = params.w_1.shape
    out = np.zeros_like(x)
    for row in np.ndindex(x.shape[:-1]):
        hidden = []
        for j in range(d_ff):
            bias = 0.0 if params.b_1 is None else params.b_1[j]
            z = sum(x[row][i] * params.w_1[i, j] for i in range(d_model)) + bias
            a = SCALAR_ACTIVATIONS[activation](z)
            if activation in ("swiglu", "geglu"):
                a *= sum(x[row][i] * params.w_gate[i, j] for i in range(d_model)) + (
                    0.0 if params.b_gate is None else params.b_gate[j])
            hidden.append(a)
        for c in range(d_model):
            out[row][c] = sum(hidden[j] * params.w_2[j, c] for j in range(d_ff)) + (
                0.0 if params.b_2 is None else params.b_2[c])
    return out


@pytest.mark.parametrize("activation", ["relu", "gelu", "gelu_tanh", "swiglu", "geglu"])
@pytest.mark.parametrize("bias", [True, False])
def test_feed_forward_activations_match_their_definitions(activation, bias):
    from dataclasses import replace

    from refattn.core.ffn import feed_forward, init_feed_forward

    rng = np.random.default_rng(41)
    gated = activation in ("swiglu", "geglu")
    params = init_feed_forward(rng, 4, 6, gated=gated, bias=bias)
    assert (params.b_1 is None, params.w_gate is None) == (not bias, not gated)
    if bias:
        params = replace(params, **{name: rng.standard_normal(np.shape(getattr(params, name)))
                                    for name in ("b_1", "b_2") + (("b_gate",) if gated else ())})
    x = 2.0 * rng.standard_normal((2, 3, 4))
    np.testing.assert_allclose(feed_forward(x, params, activation=activation), transcribed_ffn(x, params, activation),
                               rtol=1e-12, atol=1e-12)


def test_feed_forward_refuses_a_gate_mismatch():
    from refattn.core.ffn import feed_forward, init_feed_forward

    plain, gated = init_feed_forward(0, 4, 6), init_feed_forward(0, 4, 6, gated=True)
    with pytest.raises(ValueError, match=r'activation="swiglu" needs params.w_gate'):
        feed_forward(np.ones((2, 4)), plain, activation="swiglu")
    with pytest.raises(ValueError, match=r'activation="gelu" has no gate, but params.w_gate has shape \(4, 6\)'):
        feed_forward(np.ones((2, 4)), gated, activation="gelu")
    with pytest.raises(ValueError, match="activation"):
        feed_forward(np.ones((2, 4)), plain, activation="silu")


# ------------------------------------ nn.Transformer, nn.TransformerEncoderLayer, nn.TransformerDecoderLayer


def torch_layer_norm(x, weight, bias, eps):
    """``torch.nn.LayerNorm(d, eps, bias)``: (x − E[x]) / √(Var[x] + ε) · weight + bias, Var biased; no bias
    term with ``bias=False``."""
    mean = x.sum(axis=-1, keepdims=True) / x.shape[-1]
    var = ((x - mean) ** 2).sum(axis=-1, keepdims=True) / x.shape[-1]
    y = (x - mean) / np.sqrt(var + eps) * weight
    return y if bias is None else y + bias


TORCH_ACTIVATIONS = {                                              # torch.nn.functional.relu, gelu (approximate="none")
    "relu": lambda z: np.maximum(z, 0.0),
    "gelu": np.vectorize(lambda z: 0.5 * z * (1.0 + math.erf(z / math.sqrt(2.0)))),
}


def torch_linear(x, weight, bias):
    """``nn.Linear``: x Wᵀ + b, weight (out, in); no b with ``bias=False``."""
    y = x @ weight.T
    return y if bias is None else y + bias


def torch_mha_block(x_q, x_kv, attn, num_heads, attn_mask=None):
    """A layer's ``self_attn`` / ``multihead_attn`` (``nn.MultiheadAttention(d_model, nhead, bias=bias,
    batch_first=True)``) in refattn's parameters: weights transposed to torch's (out, in); ``bias=False``
    has no in_proj_bias and no out_proj bias, which adds zeros."""
    zeros = np.zeros(attn.w_q.shape[1])
    in_proj_bias = np.concatenate([zeros if b is None else b for b in (attn.b_q, attn.b_k, attn.b_v)])
    out_proj_bias = np.zeros(attn.w_o.shape[1]) if attn.b_o is None else attn.b_o
    return torch_mha_reference(x_q, x_kv, x_kv, num_heads, attn.w_q.T, attn.w_k.T, attn.w_v.T, in_proj_bias,
                               attn.w_o.T, out_proj_bias, attn_mask=attn_mask)[0]


def torch_ff_block(x, ffn, activation):
    """``_ff_block``: linear2(activation(linear1(x))) (dropout off)."""
    return torch_linear(TORCH_ACTIVATIONS[activation](torch_linear(x, ffn.w_1.T, ffn.b_1)), ffn.w_2.T, ffn.b_2)


def torch_encoder_layer(src, p, nhead, activation, eps, norm_first):
    """``nn.TransformerEncoderLayer.forward`` as documented (the source's two branches):
    norm_first: x = x + sa(norm1(x)); x = x + ff(norm2(x)); else x = norm1(x + sa(x)); x = norm2(x + ff(x))."""
    def norm(n, x):
        return torch_layer_norm(x, n.gamma, n.beta, eps)

    def sa(x):
        return torch_mha_block(x, x, p.self_attn, nhead)

    def ff(x):
        return torch_ff_block(x, p.ffn, activation)

    x = src
    if norm_first:
        x = x + sa(norm(p.norm_1, x))
        return x + ff(norm(p.norm_2, x))
    x = norm(p.norm_1, x + sa(x))
    return norm(p.norm_2, x + ff(x))


def torch_decoder_layer(tgt, memory, p, nhead, activation, eps, norm_first):
    """``nn.TransformerDecoderLayer.forward`` with ``tgt_mask`` the square subsequent mask (True above the
    diagonal = not allowed): norm_first: x = x + sa(norm1(x)); x = x + mha(norm2(x), memory);
    x = x + ff(norm3(x)); else x = norm1(x + sa(x)); x = norm2(x + mha(x, memory)); x = norm3(x + ff(x))."""
    n = tgt.shape[-2]
    tgt_mask = np.triu(np.ones((n, n), dtype=bool), k=1)

    def norm(q, x):
        return torch_layer_norm(x, q.gamma, q.beta, eps)

    def sa(x):
        return torch_mha_block(x, x, p.self_attn, nhead, attn_mask=tgt_mask)

    def mha(x):
        return torch_mha_block(x, memory, p.cross_attn, nhead)

    def ff(x):
        return torch_ff_block(x, p.ffn, activation)

    x = tgt
    if norm_first:
        x = x + sa(norm(p.norm_1, x))
        x = x + mha(norm(p.norm_2, x))
        return x + ff(norm(p.norm_3, x))
    x = norm(p.norm_1, x + sa(x))
    x = norm(p.norm_2, x + mha(x))
    return norm(p.norm_3, x + ff(x))


def torch_transformer(src, tgt, params, nhead):
    """``nn.Transformer(d_model, nhead, num_encoder_layers, num_decoder_layers, dim_feedforward, dropout=0,
    activation, layer_norm_eps, batch_first=True, norm_first, bias)``: its encoder is the layers then
    ``encoder_norm`` (a LayerNorm(d_model, eps, bias) in post-LN and pre-LN alike), its decoder the layers then
    ``decoder_norm``; ``forward(src, tgt, tgt_mask=causal)``. Inputs are already embedded (torch has no
    embedding); the final norms are applied where the params have them."""
    settings = {"activation": params.activation, "eps": params.layer_norm_eps, "norm_first": params.norm_first}
    memory = src
    for layer in params.encoder:
        memory = torch_encoder_layer(memory, layer, nhead, **settings)
    if params.encoder_norm is not None:
        memory = torch_layer_norm(memory, params.encoder_norm.gamma, params.encoder_norm.beta, params.layer_norm_eps)
    out = tgt
    for layer in params.decoder:
        out = torch_decoder_layer(out, memory, layer, nhead, **settings)
    if params.decoder_norm is not None:
        out = torch_layer_norm(out, params.decoder_norm.gamma, params.decoder_norm.beta, params.layer_norm_eps)
    return out


def paper_embedding(tokens, table):
    """E[t]·√d_model + PE, PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(…) (Vaswani §3.4-3.5)."""
    n, d = tokens.shape[-1], table.shape[1]
    pe = np.zeros((n, d))
    for pos in range(n):
        for i in range(0, d, 2):
            pe[pos, i] = math.sin(pos / 10000 ** (i / d))
            pe[pos, i + 1] = math.cos(pos / 10000 ** (i / d))
    return table[tokens] * math.sqrt(d) + pe


def jittered(tree, rng):
    """Every array plus N(0, 0.3²) noise, so biases, β and γ − 1 are not 0 (a zero would hide a misplaced term)."""
    from refattn.training import tree_map
    return tree_map(lambda a: a + 0.3 * rng.standard_normal(a.shape), tree)


LAYER_SETTINGS = [(norm_first, activation, bias) for norm_first in (False, True) for activation in ("relu", "gelu")
                  for bias in (True, False)]


@pytest.mark.parametrize(("norm_first", "activation", "bias"), LAYER_SETTINGS)
def test_encoder_and_decoder_layers_match_torch_layers(norm_first, activation, bias):
    from refattn import decoder_layer, encoder_layer, init_decoder_layer, init_encoder_layer

    rng = np.random.default_rng(53)
    d_model, nhead, d_ff, eps = 6, 2, 10, 1e-3                     # eps ≠ the 1e-5 default, so a dropped eps shows
    enc = jittered(init_encoder_layer(rng, d_model, nhead, d_ff, activation=activation, bias=bias), rng)
    dec = jittered(init_decoder_layer(rng, d_model, nhead, d_ff, activation=activation, bias=bias), rng)
    assert (enc.norm_1.beta is None, dec.self_attn.b_q is None, dec.ffn.b_2 is None) == (not bias,) * 3
    x, memory = rng.standard_normal((2, 5, d_model)), rng.standard_normal((2, 4, d_model))
    settings = {"norm_first": norm_first, "activation": activation, "eps": eps}
    np.testing.assert_allclose(encoder_layer(x, enc, num_heads=nhead, **settings),
                               torch_encoder_layer(x, enc, nhead, **settings), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(decoder_layer(x, memory, dec, num_heads=nhead, **settings),
                               torch_decoder_layer(x, memory, dec, nhead, **settings), rtol=1e-12, atol=1e-12)


STACK_SETTINGS = [  # (norm_first, final_norms, activation, bias): nn.Transformer's post-LN and pre-LN, and the paper's
    (False, True, "relu", True),
    (False, True, "gelu", False),
    (True, True, "gelu", True),
    (True, True, "relu", False),
    (False, False, "gelu", True),
    (True, False, "relu", True),
]


@pytest.mark.parametrize(("norm_first", "final_norms", "activation", "bias"), STACK_SETTINGS)
def test_transformer_stack_matches_torch_transformer(norm_first, final_norms, activation, bias):
    from refattn import decode, encode, greedy_decode, init_transformer, transformer

    rng = np.random.default_rng(59)
    nhead = 2
    params = init_transformer(rng, 7, 9, d_model=6, num_heads=nhead, d_ff=10, num_layers=2, norm_first=norm_first,
                              final_norms=final_norms, activation=activation, layer_norm_eps=1e-3, bias=bias)
    assert (params.norm_first, params.encoder_norm is not None, params.decoder_norm is not None) == (
        norm_first, final_norms, final_norms)
    assert (params.b_out is None, params.decoder[0].norm_3.beta is None) == (not bias, not bias)
    params = jittered(params, rng)
    src, tgt = rng.integers(0, 7, (2, 5)), rng.integers(0, 9, (2, 4))

    def expected_logits(tgt):
        out = torch_transformer(paper_embedding(src, params.src_embedding), paper_embedding(tgt, params.tgt_embedding),
                                params, nhead)
        return torch_linear(out, params.w_out.T, params.b_out)    # the output projection, after decoder_norm

    np.testing.assert_allclose(transformer(src, tgt, params, num_heads=nhead), expected_logits(tgt),
                               rtol=1e-12, atol=1e-12)
    memory = encode(src, params, num_heads=nhead)
    np.testing.assert_allclose(decode(tgt, memory, params, num_heads=nhead), expected_logits(tgt),
                               rtol=1e-12, atol=1e-12)
    tokens, logits = greedy_decode(src, params, num_heads=nhead, bos=0, max_len=4)
    np.testing.assert_allclose(logits, expected_logits(tokens[:, :-1]), rtol=1e-12, atol=1e-12)


def test_stack_settings_are_independent_and_checked():
    from dataclasses import replace

    from refattn import init_transformer

    def draw(**settings):
        return init_transformer(0, 5, 5, d_model=4, num_heads=2, d_ff=6, num_layers=1, **settings)

    summary = {key: (p.norm_first, p.encoder_norm is not None, p.decoder_norm is not None) for key, p in {
        "paper": draw(), "pre-LN": draw(norm_first=True), "torch post-LN": draw(final_norms=True),
        "pre-LN without final norms": draw(norm_first=True, final_norms=False)}.items()}
    assert summary == {"paper": (False, False, False), "pre-LN": (True, True, True),
                       "torch post-LN": (False, True, True), "pre-LN without final norms": (True, False, False)}
    p = draw()
    with pytest.raises(ValueError, match="activation"):
        replace(p, activation="tanh")
    with pytest.raises(ValueError, match="layer_norm_eps must be a non-negative number, got -1"):
        replace(p, layer_norm_eps=-1.0)
    with pytest.raises(TypeError, match="norm_first must be True or False, got 1"):
        replace(p, norm_first=1)
    with pytest.raises(TypeError, match="final_norms must be True or False"):
        draw(final_norms="yes")
    with pytest.raises(TypeError, match="bias must be True or False"):
        draw(bias=0)
