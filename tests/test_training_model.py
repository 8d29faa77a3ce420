"""refattn.training.model and adam: the forward passes against refattn.core, a whole training step's
gradient against finite differences, attention substitution, pytrees and Adam.

Finite differences of a whole model. The loss L (mean cross-entropy, O(1)) is differentiated with respect
to a few random entries of every parameter array by tests/test_oracle_vjp.py's central ``fd_grad``
(h = 1e-5). Its error is ≤ h²/6 · |∂³L| + ε_L / h. L passes through ≲ 100 floating-point steps per token
(two layers of projections, softmax, layer norm, FFN) on values ≲ 10, so ε_L ≲ 100 · 10 · 2.2e-16 ≈ 2e-13
and ε_L / h ≲ 2e-8; through layer norms and softmaxes of these O(1) activations the third derivatives
are ≲ 100, so truncation ≤ 1e-10/6 · 100 ≈ 2e-9. Hence MODEL_FD_TOL: atol 3e-8 (rtol 1e-7 for entries
≫ 1). A missing or wrong term of the chain rule changes a gradient by O(its size); the test asserts the
checked entries are not all tiny, so such an error is ≫ 3e-8. The parameters are the initial draw plus
N(0, 0.1²) noise so that biases, β and γ − 1 are not 0 (a zero bias would hide a wrong bias term). ReLU's
kinks: the seeds are fixed; a stencil straddling one would fail deterministically, not flakily.
"""
from __future__ import annotations

import numpy as np
import pytest

from refattn import decoder_layer, encoder_layer, scaled_dot_product_attention, softmax
from refattn.core.transformer import embed, transformer
from refattn.oracle.vjp import sdpa_vjp
from refattn.training import (
    AdamState,
    DecoderOnlyParams,
    Seq2SeqParams,
    adam_init,
    adam_update,
    attention_inputs,
    decoder_logits,
    decoder_loss_and_grads,
    flatten,
    global_norm,
    init_decoder_only,
    init_seq2seq,
    leaf_names,
    seq2seq_logits,
    seq2seq_loss_and_grads,
    tree_map,
    unflatten,
)
from refattn.training.model import _sdpa_backward

from .test_oracle_vjp import fd_grad

MODEL_FD_TOL = {"rtol": 1e-7, "atol": 3e-8}      # derived in the module docstring
TIGHT = {"rtol": 1e-12, "atol": 1e-12}


def jitter(rng, params, sigma=0.1):
    return tree_map(lambda a: a + sigma * rng.standard_normal(a.shape), params)


def tiny_seq2seq(rng, norm_first=False, num_layers=2):
    params = init_seq2seq(rng, 7, 6, d_model=8, num_heads=2, d_ff=12, num_layers=num_layers, norm_first=norm_first)
    src, tgt_in, tgt_out = rng.integers(0, 7, (3, 5)), rng.integers(0, 6, (3, 4)), rng.integers(0, 6, (3, 4))
    return params, src, tgt_in, tgt_out                          # n_src = 5 ≠ n_tgt = 4


def tiny_decoder(rng, **options):
    params = init_decoder_only(rng, 6, 8, 2, 2, **options)
    return params, rng.integers(0, 6, (3, 7)), rng.integers(0, 6, (3, 7))


DECODER_OPTIONS = [
    {"max_len": 9},                                               # attention-only, learned positions, pre-LN
    {"d_ff": 12, "max_len": 7},                                   # with FFNs
    {"positions": "sinusoidal", "norm": False},                   # sinusoids, no layer norm
]


def check_gradient_by_finite_differences(rng, loss, params, grads, entries=3):
    """Compare ``grads`` with central differences of ``loss(params)`` at a few random entries of every array."""
    leaves, g_leaves = flatten(params), flatten(grads)
    assert leaf_names(grads) == leaf_names(params)
    checked = []
    for i, (name, leaf, g) in enumerate(zip(leaf_names(params), leaves, g_leaves, strict=True)):
        coords = list({tuple(int(rng.integers(0, s)) for s in leaf.shape) for _ in range(entries)})

        def loss_of_leaf(x, i=i):
            return loss(unflatten(params, [x if j == i else other for j, other in enumerate(leaves)]))

        fd = fd_grad(loss_of_leaf, leaf, coords=coords)
        np.testing.assert_allclose(np.array([g[c] for c in coords]), np.array([fd[c] for c in coords]),
                                   err_msg=name, **MODEL_FD_TOL)
        checked += [abs(g[c]) for c in coords]
    assert np.median(checked) > 1e-4                              # the checked gradients are not all tiny


# ----------------------------------------------------------------------------------- forward passes


@pytest.mark.parametrize("norm_first", [False, True])
def test_seq2seq_logits_equal_core_transformer(rng, norm_first):
    params, src, tgt_in, _ = tiny_seq2seq(rng, norm_first)
    params = jitter(rng, params)
    expected = transformer(src, tgt_in, params.transformer, num_heads=2)
    np.testing.assert_allclose(seq2seq_logits(params, src, tgt_in), expected, **TIGHT)


def test_seq2seq_weights_are_core_layers_weights(rng):
    params, src, tgt_in, _ = tiny_seq2seq(rng)
    T = params.transformer
    _, weights = seq2seq_logits(params, src, tgt_in, return_weights=True)
    assert sorted(weights) == ["decoder.0.cross", "decoder.0.self", "decoder.1.cross", "decoder.1.self",
                               "encoder.0.self", "encoder.1.self"]
    x = embed(src, T.src_embedding, "src")
    for i, layer in enumerate(T.encoder):                         # refattn.core's layers, one by one
        x, A = encoder_layer(x, layer, num_heads=2, return_weights=True)
        np.testing.assert_allclose(weights[f"encoder.{i}.self"], A, **TIGHT)
    y = embed(tgt_in, T.tgt_embedding, "tgt")
    for i, layer in enumerate(T.decoder):
        y, (A_self, A_cross) = decoder_layer(y, x, layer, num_heads=2, return_weights=True)
        np.testing.assert_allclose(weights[f"decoder.{i}.self"], A_self, **TIGHT)
        np.testing.assert_allclose(weights[f"decoder.{i}.cross"], A_cross, **TIGHT)
    assert weights["decoder.0.cross"].shape == (3, 2, 4, 5)


@pytest.mark.parametrize("options", DECODER_OPTIONS)
def test_decoder_logits_follow_the_equations(rng, options):
    # an independent transcription: x = E[t]·√d + P;  x ← x + MHA(LN(x));  x ← x + FFN(LN(x));  LN(x) W + b
    params, tokens, _ = tiny_decoder(rng, **options)
    params = jitter(rng, params)
    n, d, h = tokens.shape[1], 8, 2
    pos = params.position[:n] if params.position is not None else np.array(
        [[np.sin(t / 10000 ** (2 * (j // 2) / d)) if j % 2 == 0 else np.cos(t / 10000 ** (2 * (j // 2) / d))
          for j in range(d)] for t in range(n)])
    x = params.embedding[tokens] * np.sqrt(d) + pos

    def ln(x, norm):
        if norm is None:
            return x
        return norm.gamma * (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) + norm.beta

    for layer in params.layers:
        s, a = ln(x, layer.norm_1), layer.attn
        heads = []
        for i in range(h):                                        # one head at a time, columns i·4 … i·4 + 3
            cols = slice(4 * i, 4 * i + 4)
            Q, K, V = (s @ w[:, cols] + b[cols] for w, b in ((a.w_q, a.b_q), (a.w_k, a.b_k), (a.w_v, a.b_v)))
            S = Q @ np.swapaxes(K, -1, -2) / 2.0                  # √d_k = 2
            S = np.where(np.tril(np.ones((n, n), bool)), S, -np.inf)
            heads.append(softmax(S) @ V)
        x = x + np.concatenate(heads, axis=-1) @ a.w_o + a.b_o
        if layer.ffn is not None:
            f = layer.ffn
            x = x + np.maximum(0, ln(x, layer.norm_2) @ f.w_1 + f.b_1) @ f.w_2 + f.b_2
    expected = ln(x, params.final_norm) @ params.w_out + params.b_out
    np.testing.assert_allclose(decoder_logits(params, tokens), expected, **TIGHT)


def test_decoder_weights_are_causal_distributions(rng):
    params, tokens, _ = tiny_decoder(rng, max_len=9)
    _, weights = decoder_logits(params, tokens, return_weights=True)
    assert sorted(weights) == ["layer.0", "layer.1"]
    for A in weights.values():
        assert A.shape == (3, 2, 7, 7)
        np.testing.assert_allclose(A.sum(axis=-1), 1.0, **TIGHT)
        assert (A[..., np.triu_indices(7, 1)[0], np.triu_indices(7, 1)[1]] == 0.0).all()


# ------------------------------------------------------------------------------ attention substitution


def test_sdpa_substitution_reproduces_the_default_bit_for_bit(rng):
    params, src, tgt_in, _ = tiny_seq2seq(rng)
    np.testing.assert_array_equal(seq2seq_logits(params, src, tgt_in, attention=scaled_dot_product_attention),
                                  seq2seq_logits(params, src, tgt_in))
    params, tokens, _ = tiny_decoder(rng, max_len=9)
    np.testing.assert_array_equal(decoder_logits(params, tokens, attention=scaled_dot_product_attention),
                                  decoder_logits(params, tokens))


def test_substituted_attention_is_used_in_every_head(rng):
    params, src, tgt_in, _ = tiny_seq2seq(rng)
    seen = []

    def uniform(q, k, v, *, causal):                              # a stand-in approximation: mean of the values
        seen.append((q.shape, causal))
        return scaled_dot_product_attention(np.zeros_like(q), k, v, causal=causal)

    logits = seq2seq_logits(params, src, tgt_in, attention=uniform)
    assert seen == [((3, 2, 5, 4), False)] * 2 + [((3, 2, 4, 4), True), ((3, 2, 4, 4), False)] * 2
    assert np.abs(logits - seq2seq_logits(params, src, tgt_in)).max() > 1e-3


@pytest.mark.parametrize("kind", ["seq2seq", "decoder"])
def test_attention_inputs_reproduce_the_weights(rng, kind):
    if kind == "seq2seq":
        params, src, tgt_in, _ = tiny_seq2seq(rng)
        inputs = (src, tgt_in)
        _, weights = seq2seq_logits(params, *inputs, return_weights=True)
    else:
        params, tokens, _ = tiny_decoder(rng, max_len=9)
        inputs = (tokens,)
        _, weights = decoder_logits(params, *inputs, return_weights=True)
    calls = attention_inputs(kind, params, *inputs)
    assert sorted(name for name, *_ in calls) == sorted(weights)
    for name, q, k, v, causal in calls:
        S = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
        if causal:
            S = np.where(np.tril(np.ones(S.shape[-2:], bool)), S, -np.inf)
        np.testing.assert_allclose(softmax(S), weights[name], **TIGHT)
        assert v.shape[:-1] == k.shape[:-1]


# ------------------------------------------------------------------------------------------ gradients


@pytest.mark.parametrize("norm_first", [False, True])
def test_seq2seq_gradient_matches_finite_differences(rng, norm_first):
    params, src, tgt_in, tgt_out = tiny_seq2seq(rng, norm_first)
    params = jitter(rng, params)
    mask = np.array([[True, True, False, True], [True, True, True, True], [False, True, True, False]])
    loss, grads = seq2seq_loss_and_grads(params, src, tgt_in, tgt_out, mask)
    assert isinstance(grads, Seq2SeqParams) and grads.num_heads == 2

    def loss_of(p):
        return seq2seq_loss_and_grads(p, src, tgt_in, tgt_out, mask)[0]

    assert loss == loss_of(params)
    check_gradient_by_finite_differences(rng, loss_of, params, grads)


@pytest.mark.parametrize("options", DECODER_OPTIONS)
def test_decoder_gradient_matches_finite_differences(rng, options):
    params, tokens, targets = tiny_decoder(rng, **options)
    params = jitter(rng, params)
    mask = np.zeros(tokens.shape, bool)
    mask[:, 3:] = True                                            # only the later positions count

    def loss_of(p):
        return decoder_loss_and_grads(p, tokens, targets, mask)[0]

    loss, grads = decoder_loss_and_grads(params, tokens, targets, mask)
    assert isinstance(grads, DecoderOnlyParams)
    check_gradient_by_finite_differences(rng, loss_of, params, grads)
    if params.position is not None:                               # P[t] of unused rows gets nothing
        np.testing.assert_array_equal(grads.position[7:], 0.0)


def test_attention_backward_from_weights_equals_oracle_sdpa_vjp(rng):
    # the model's backward reuses the forward's weights; the oracle recomputes them with its masks
    Q, K, V, d_out = rng.standard_normal((4, 2, 3, 5, 4))
    for causal in (False, True):
        _, A = scaled_dot_product_attention(Q, K, V, causal=causal, return_weights=True)
        mine, oracle = _sdpa_backward(Q, K, V, A, d_out), sdpa_vjp(Q, K, V, d_out, causal=causal)
        for name in ("dq", "dk", "dv"):
            np.testing.assert_allclose(getattr(mine, name), getattr(oracle, name), **TIGHT)


# ------------------------------------------------------------------------------------------- pytrees


def test_pytree_round_trip_and_names(rng):
    params, *_ = tiny_seq2seq(rng, num_layers=1)
    names, leaves = leaf_names(params), flatten(params)
    assert len(names) == len(set(names)) == len(leaves) == 46   # embeddings 2, encoder 16, decoder 26, out 2
    assert names[0] == "transformer.src_embedding" and "transformer.decoder.0.cross_attn.b_o" in names
    rebuilt = unflatten(params, [leaf * 2 for leaf in leaves])
    assert rebuilt.num_heads == 2 and rebuilt.transformer.encoder_norm is None
    for old, new in zip(leaves, flatten(rebuilt), strict=True):
        np.testing.assert_array_equal(new, 2 * old)
    summed = tree_map(lambda a, b: a + b, params, rebuilt)
    np.testing.assert_array_equal(summed.transformer.w_out, 3 * params.transformer.w_out)


def test_unflatten_refuses_wrong_leaves(rng):
    params, *_ = tiny_decoder(rng, max_len=9)
    leaves = flatten(params)
    with pytest.raises(ValueError, match="leaves has 1 arrays"):
        unflatten(params, leaves[:1])
    with pytest.raises(ValueError, match="leaf 'embedding' has shape \\(2,\\)"):
        unflatten(params, [np.zeros(2)] + leaves[1:])


# ---------------------------------------------------------------------------------------------- Adam


def test_adam_two_steps_hand_computed():
    # g₁ = 2, g₂ = −1, β₁ = 0.5, β₂ = 0.75, ε = 0, α = 0.1:
    # m₁ = 1, v₁ = 1 → m̂ = 2, v̂ = 4 → θ₁ = 1 − 0.1·2/2 = 0.9
    # m₂ = 0, v₂ = 0.75 + 0.25 = 1 → m̂ = 0 → θ₂ = 0.9
    theta = np.array([1.0])
    options = {"lr": 0.1, "beta1": 0.5, "beta2": 0.75, "eps": 0.0}
    theta, state = adam_update(theta, np.array([2.0]), adam_init(theta), **options)
    np.testing.assert_allclose(theta, [0.9], rtol=1e-15)
    theta, state = adam_update(theta, np.array([-1.0]), state, **options)
    np.testing.assert_allclose(theta, [0.9], rtol=1e-15)
    assert isinstance(state, AdamState) and state.step == 2
    np.testing.assert_allclose(state.v, [1.0], rtol=1e-15)


def test_adam_lowers_the_loss_of_both_tiny_models(rng):
    params, src, tgt_in, tgt_out = tiny_seq2seq(rng, num_layers=1)
    state = adam_init(params)
    first, _ = seq2seq_loss_and_grads(params, src, tgt_in, tgt_out)
    for _ in range(20):
        loss, grads = seq2seq_loss_and_grads(params, src, tgt_in, tgt_out)
        params, state = adam_update(params, grads, state, lr=1e-2)
    assert seq2seq_loss_and_grads(params, src, tgt_in, tgt_out)[0] < 0.5 * first

    params, tokens, targets = tiny_decoder(rng, max_len=9)
    state = adam_init(params)
    first, _ = decoder_loss_and_grads(params, tokens, targets)
    for _ in range(20):
        loss, grads = decoder_loss_and_grads(params, tokens, targets)
        params, state = adam_update(params, grads, state, lr=1e-2)
    assert decoder_loss_and_grads(params, tokens, targets)[0] < 0.5 * first


def test_adam_is_deterministic_and_leaves_its_inputs_alone(rng):
    params, tokens, targets = tiny_decoder(rng, max_len=9)
    before = [leaf.copy() for leaf in flatten(params)]
    _, grads = decoder_loss_and_grads(params, tokens, targets)
    a, _ = adam_update(params, grads, adam_init(params), lr=1e-2)
    b, _ = adam_update(params, grads, adam_init(params), lr=1e-2)
    for x, y, old, now in zip(flatten(a), flatten(b), before, flatten(params), strict=True):
        np.testing.assert_array_equal(x, y)
        np.testing.assert_array_equal(old, now)


def test_global_norm_is_the_norm_of_all_leaves(rng):
    params, *_ = tiny_decoder(rng, max_len=9)
    everything = np.concatenate([a.ravel() for a in flatten(params)])
    np.testing.assert_allclose(global_norm(params), np.linalg.norm(everything), rtol=1e-14)


# ---------------------------------------------------------------------------------------- bad inputs


def test_bad_inputs_are_named(rng):
    s2s, src, tgt_in, tgt_out = tiny_seq2seq(rng, num_layers=1)
    dec, tokens, targets = tiny_decoder(rng, max_len=9)
    with pytest.raises(ValueError, match="return_weights=True"):
        seq2seq_logits(s2s, src, tgt_in, attention=scaled_dot_product_attention, return_weights=True)
    with pytest.raises(TypeError, match="attention must be a callable"):
        decoder_logits(dec, tokens, attention="softmax")
    with pytest.raises(TypeError, match="params must be a Seq2SeqParams"):
        seq2seq_loss_and_grads(dec, src, tgt_in, tgt_out)
    with pytest.raises(TypeError, match="params must be a DecoderOnlyParams"):
        decoder_logits(s2s, tokens)
    with pytest.raises(ValueError, match="src has batch shape \\(3,\\)"):
        seq2seq_logits(s2s, src, tgt_in[:2])
    with pytest.raises(TypeError, match="tokens must be an integer array"):
        decoder_logits(dec, tokens * 1.0)
    with pytest.raises(ValueError, match="max_len=9 rows, but tokens has n=10"):
        decoder_logits(dec, np.zeros((1, 10), int))
    with pytest.raises(ValueError, match="kind"):
        attention_inputs("encoder", s2s, src)
    with pytest.raises(ValueError, match="takes 2 token arrays, got 1"):
        attention_inputs("seq2seq", s2s, src)
    with pytest.raises(ValueError, match="needs max_len"):
        init_decoder_only(0, 6, 8, 2, 1)
    with pytest.raises(ValueError, match="max_len must be None"):
        init_decoder_only(0, 6, 8, 2, 1, max_len=4, positions="sinusoidal")
    with pytest.raises(ValueError, match="not divisible by num_heads=3"):
        init_decoder_only(0, 6, 8, 3, 1, max_len=4)
    with pytest.raises(ValueError, match="lr must be"):
        adam_update(dec, dec, adam_init(dec), lr=-1.0)


def test_seq2seq_trains_a_post_ln_stack_with_final_norms(rng):
    # nn.Transformer's post-LN stack (final norms present) with a non-default layer_norm_eps: the forward
    # equals refattn.core's and the gradient its finite differences (tolerance as in the module docstring).
    from refattn import init_transformer

    params = Seq2SeqParams(init_transformer(rng, 7, 6, d_model=8, num_heads=2, d_ff=12, num_layers=1,
                                            final_norms=True, layer_norm_eps=1e-3), 2)
    assert not params.transformer.norm_first and params.transformer.encoder_norm is not None
    params = jitter(rng, params)
    src, tgt_in, tgt_out = rng.integers(0, 7, (2, 5)), rng.integers(0, 6, (2, 4)), rng.integers(0, 6, (2, 4))
    np.testing.assert_allclose(seq2seq_logits(params, src, tgt_in),
                               transformer(src, tgt_in, params.transformer, num_heads=2), **TIGHT)
    loss, grads = seq2seq_loss_and_grads(params, src, tgt_in, tgt_out)
    assert (grads.transformer.norm_first, grads.transformer.layer_norm_eps) == (False, 1e-3)

    def loss_of(p):
        return seq2seq_loss_and_grads(p, src, tgt_in, tgt_out)[0]

    check_gradient_by_finite_differences(rng, loss_of, params, grads, entries=2)


@pytest.mark.parametrize(("settings", "message"), [
    ({"activation": "gelu"}, 'trains activation="relu" only, got activation="gelu"'),
    ({"bias": False}, r"every bias present.*transformer\.encoder\.0\.self_attn\.b_q = None"),
])
def test_seq2seq_refuses_settings_its_backward_does_not_cover(settings, message):
    from refattn import init_transformer

    params = Seq2SeqParams(init_transformer(0, 5, 5, d_model=4, num_heads=2, d_ff=6, num_layers=1, **settings), 2)
    with pytest.raises(ValueError, match=message):
        seq2seq_loss_and_grads(params, [[1, 2]], [[0, 1]], [[1, 2]])
