"""The encoder–decoder Transformer (Vaswani et al., 2017, §3): forward pass and greedy decoding."""
from __future__ import annotations

import dataclasses
import inspect
import math

import numpy as np
import pytest

from refattn import (
    decode,
    decoder_layer,
    encode,
    encoder_layer,
    greedy_decode,
    init_transformer,
    layer_norm,
    padding_mask,
    transformer,
)
from refattn.core.transformer import embed

TOL = dict(rtol=1e-12, atol=1e-12)
SRC_VOCAB, TGT_VOCAB, D_MODEL, H, D_FF, N_LAYERS = 11, 13, 8, 2, 16, 2


def perturbed(value, rng, size=0.3):
    """Every array in a (nested) parameter structure plus N(0, size²) noise.

    Zero biases and γ = 1, β = 0 everywhere would hide swapped norms or a dropped bias.
    """
    if dataclasses.is_dataclass(value):
        return dataclasses.replace(value, **{
            f.name: perturbed(getattr(value, f.name), rng, size) for f in dataclasses.fields(value)
            if getattr(value, f.name) is not None
        })
    if isinstance(value, tuple):
        return tuple(perturbed(v, rng, size) for v in value)
    if isinstance(value, np.ndarray):
        return value + size * rng.standard_normal(value.shape)
    return value


def small_model(rng, norm_first):
    params = init_transformer(rng, SRC_VOCAB, TGT_VOCAB, d_model=D_MODEL, num_heads=H, d_ff=D_FF,
                              num_layers=N_LAYERS, norm_first=norm_first)
    return perturbed(params, rng, size=0.1)   # larger noise makes the post-LN model's argmax constant


def paper_pe(num_positions, d_model):
    """PE(pos, 2i) = sin(pos/10000^{2i/d}), PE(pos, 2i+1) = cos(pos/10000^{2i/d})."""
    return np.array([[math.sin(pos / 10000 ** (2 * (c // 2) / d_model)) if c % 2 == 0
                      else math.cos(pos / 10000 ** (2 * (c // 2) / d_model)) for c in range(d_model)]
                     for pos in range(num_positions)])


@pytest.fixture(params=[False, True], ids=["post-LN", "pre-LN"])
def model(request, rng):
    return small_model(rng, request.param)


# --- greedy decoding against teacher forcing ----------------------------------------------------

def test_greedy_logits_equal_teacher_forcing(rng, model):
    src = rng.integers(0, SRC_VOCAB, size=(2, 6))
    lengths = np.array([6, 4])                                    # n_src = 6 != decoded length 5
    tokens, logits = greedy_decode(src, model, num_heads=H, bos=1, max_len=5, src_lengths=lengths)
    assert tokens.shape == (2, 6) and tokens.dtype.kind == "i"
    assert logits.shape == (2, 5, TGT_VOCAB)
    np.testing.assert_array_equal(tokens[:, 0], 1)
    np.testing.assert_array_equal(tokens[:, 1:], np.argmax(logits, axis=-1))
    memory = encode(src, model, num_heads=H, src_lengths=lengths)
    forced = decode(tokens[:, :-1], memory, model, num_heads=H, src_lengths=lengths)
    np.testing.assert_allclose(logits, forced, **TOL)
    full = transformer(src, tokens[:, :-1], model, num_heads=H, src_lengths=lengths)
    np.testing.assert_allclose(logits, full, **TOL)
    # a non-trivial run: the two sequences and the steps do not all pick the same token
    assert len(np.unique(tokens[:, 1:])) > 1


def test_greedy_batch_equals_single_sequences(rng, model):
    src = rng.integers(0, SRC_VOCAB, size=(2, 6))
    lengths = np.array([6, 3])
    tokens, logits = greedy_decode(src, model, num_heads=H, bos=0, max_len=4, src_lengths=lengths)
    for b in range(2):
        t_b, l_b = greedy_decode(src[b, :lengths[b]], model, num_heads=H, bos=0, max_len=4)
        assert t_b.shape == (5,) and l_b.shape == (4, TGT_VOCAB)
        np.testing.assert_array_equal(t_b, tokens[b])
        np.testing.assert_allclose(l_b, logits[b], **TOL)


def test_greedy_eos_forces_eos_afterwards(rng, model):
    src = rng.integers(0, SRC_VOCAB, size=(2, 6))
    lengths = np.array([5, 6])
    max_len = 6
    free, free_logits = greedy_decode(src, model, num_heads=H, bos=0, max_len=max_len, src_lengths=lengths)
    eos = int(free[0, 2])                                          # sequence 0 emits it at step 1
    tokens, logits = greedy_decode(src, model, num_heads=H, bos=0, max_len=max_len, eos=eos,
                                   src_lengths=lengths)
    for b in range(2):
        hits = np.flatnonzero(free[b, 1:] == eos)
        first = hits[0] if hits.size else None                     # step of the first eos
        upto = tokens.shape[1] - 1 if first is None else first + 1
        np.testing.assert_array_equal(tokens[b, :upto + 1], free[b, :upto + 1])
        np.testing.assert_allclose(logits[b, :upto], free_logits[b, :upto], **TOL)
        if first is not None:
            np.testing.assert_array_equal(tokens[b, first + 1:], eos)
    ended = np.any(tokens[:, 1:] == eos, axis=-1)
    steps = logits.shape[1]
    assert tokens.shape == (2, steps + 1)
    assert steps == max_len or ended.all()
    # teacher forcing on the result still reproduces every step's logits
    memory = encode(src, model, num_heads=H, src_lengths=lengths)
    forced = decode(tokens[:, :-1], memory, model, num_heads=H, src_lengths=lengths)
    np.testing.assert_allclose(logits, forced, **TOL)
    # argmax matches, except where the token was forced to eos after an earlier eos
    argmax = np.argmax(logits, axis=-1)
    after_eos = np.cumsum(tokens[:, 1:] == eos, axis=-1) - (tokens[:, 1:] == eos) > 0
    np.testing.assert_array_equal(tokens[:, 1:][~after_eos], argmax[~after_eos])


def test_greedy_stops_early_when_all_sequences_end(rng, model):
    src = rng.integers(0, SRC_VOCAB, size=(2, 5))
    _, first_logits = greedy_decode(src, model, num_heads=H, bos=0, max_len=1)
    eos = 7
    b_out = model.b_out.copy()
    b_out[eos] = np.abs(first_logits).max() + 50.0                 # step 0 picks eos for every sequence
    forced = dataclasses.replace(model, b_out=b_out)
    tokens, logits = greedy_decode(src, forced, num_heads=H, bos=0, max_len=8, eos=eos)
    assert tokens.shape == (2, 2) and logits.shape == (2, 1, TGT_VOCAB)
    np.testing.assert_array_equal(tokens, [[0, eos], [0, eos]])
    # when only one sequence ends, decoding runs to max_len and the ended one is padded with eos
    # (search, deterministically, for a source pair where sequence 0 emits a token sequence 1 never does)
    for _ in range(50):
        src = rng.integers(0, SRC_VOCAB, size=(2, 5))
        tokens_free, _ = greedy_decode(src, model, num_heads=H, bos=0, max_len=4)
        only_first = [int(t) for t in tokens_free[0, 1:] if t not in tokens_free[1, 1:]]
        if only_first:
            break
    assert only_first, "test setup: no token is emitted by sequence 0 only"
    eos = only_first[0]
    first = int(np.flatnonzero(tokens_free[0, 1:] == eos)[0]) + 1
    tokens, logits = greedy_decode(src, model, num_heads=H, bos=0, max_len=4, eos=eos)
    assert tokens.shape == (2, 5) and logits.shape == (2, 4, TGT_VOCAB)
    np.testing.assert_array_equal(tokens[0, :first], tokens_free[0, :first])
    np.testing.assert_array_equal(tokens[0, first:], eos)
    np.testing.assert_array_equal(tokens[1], tokens_free[1])


# --- padding ------------------------------------------------------------------------------------

def test_source_padding_is_invisible(rng, model):
    src = rng.integers(0, SRC_VOCAB, size=(2, 7))
    lengths = np.array([7, 4])
    tgt = rng.integers(0, TGT_VOCAB, size=(2, 5))
    memory = encode(src, model, num_heads=H, src_lengths=lengths)
    logits = decode(tgt, memory, model, num_heads=H, src_lengths=lengths)
    src2 = src.copy()
    src2[1, 4:] = (src[1, 4:] + 1 + rng.integers(0, SRC_VOCAB - 1, size=3)) % SRC_VOCAB   # all differ
    assert (src2[1, 4:] != src[1, 4:]).all()
    memory2 = encode(src2, model, num_heads=H, src_lengths=lengths)
    np.testing.assert_array_equal(memory2[0], memory[0])
    np.testing.assert_array_equal(memory2[1, :4], memory[1, :4])    # padded positions may change
    assert np.abs(memory2[1, 4:] - memory[1, 4:]).max() > 1e-3
    logits2 = decode(tgt, memory2, model, num_heads=H, src_lengths=lengths)
    np.testing.assert_array_equal(logits2, logits)
    tokens, g_logits = greedy_decode(src, model, num_heads=H, bos=0, max_len=3, src_lengths=lengths)
    tokens2, g_logits2 = greedy_decode(src2, model, num_heads=H, bos=0, max_len=3, src_lengths=lengths)
    np.testing.assert_array_equal(tokens2, tokens)
    np.testing.assert_array_equal(g_logits2, g_logits)


def test_padded_batch_equals_unpadded_sequence(rng, model):
    src = rng.integers(0, SRC_VOCAB, size=(2, 6))
    lengths = np.array([6, 4])
    tgt = rng.integers(0, TGT_VOCAB, size=(2, 3))
    memory = encode(src, model, num_heads=H, src_lengths=lengths)
    alone = encode(src[1, :4], model, num_heads=H)
    np.testing.assert_allclose(memory[1, :4], alone, **TOL)
    logits = decode(tgt, memory, model, num_heads=H, src_lengths=lengths)
    np.testing.assert_allclose(logits[1], decode(tgt[1], alone, model, num_heads=H), **TOL)


# --- composition and embedding --------------------------------------------------------------------

def test_encode_is_embedding_then_layers(rng, model):
    src = rng.integers(0, SRC_VOCAB, size=(2, 5))
    lengths = np.array([5, 2])
    x = model.src_embedding[src] * math.sqrt(D_MODEL) + paper_pe(5, D_MODEL)
    mask = np.arange(5)[None, None, :] < lengths[:, None, None]
    for layer in model.encoder:
        x = encoder_layer(x, layer, num_heads=H, mask=mask, norm_first=model.norm_first)
    if model.norm_first:
        x = layer_norm(x, model.encoder_norm.gamma, model.encoder_norm.beta)
    # PE by math.sin vs np.sin of positions < 5 differs by ≲ 1e-15; it then passes through two layers
    # of O(1) gain, so 1e-12 holds.
    np.testing.assert_allclose(encode(src, model, num_heads=H, src_lengths=lengths), x, **TOL)


def test_embedding_scale_and_positions(rng, model):
    # With no layers the stacks reduce to their inputs: E[tok]·√d_model + PE (§3.4, §3.5).
    empty = dataclasses.replace(model, encoder=(), decoder=())
    src, tgt = rng.integers(0, SRC_VOCAB, size=(3, 6)), rng.integers(0, TGT_VOCAB, size=(3, 4))
    x = model.src_embedding[src] * math.sqrt(D_MODEL) + paper_pe(6, D_MODEL)
    y = model.tgt_embedding[tgt] * math.sqrt(D_MODEL) + paper_pe(4, D_MODEL)
    if model.norm_first:                                             # the pre-LN stacks' final norms
        x = layer_norm(x, model.encoder_norm.gamma, model.encoder_norm.beta)
        y = layer_norm(y, model.decoder_norm.gamma, model.decoder_norm.beta)
    memory = encode(src, empty, num_heads=H)
    np.testing.assert_allclose(memory, x, **TOL)
    np.testing.assert_allclose(decode(tgt, memory, empty, num_heads=H), y @ model.w_out + model.b_out, **TOL)


def test_greedy_uses_the_same_positions_as_decode(rng, model):
    # One greedy step from bos equals decode([bos]) and the position-0 encoding (sin 0 = 0, cos 0 = 1).
    src = rng.integers(0, SRC_VOCAB, size=(4,))
    memory = encode(src, model, num_heads=H)
    _, logits = greedy_decode(src, model, num_heads=H, bos=3, max_len=1)
    np.testing.assert_allclose(logits, decode([3], memory, model, num_heads=H), **TOL)


# --- bad input ----------------------------------------------------------------------------------

def test_bad_token_ids(rng, model):
    src = rng.integers(0, SRC_VOCAB, size=(2, 4))
    memory = encode(src, model, num_heads=H)
    with pytest.raises(TypeError, match=r"src must be an integer array of token ids.*float64"):
        encode(src.astype(float), model, num_heads=H)
    with pytest.raises(TypeError, match=r"tgt must be an integer array of token ids"):
        decode(np.array([[0.0, 1.0]]), memory, model, num_heads=H)
    with pytest.raises(TypeError, match=r"src must be an integer array"):
        greedy_decode(src.astype(np.float32), model, num_heads=H, bos=0, max_len=2)
    msg = rf"src holds ids in \[0, {SRC_VOCAB}\] but the vocabulary has {SRC_VOCAB}"
    with pytest.raises(ValueError, match=msg):
        encode([[0, SRC_VOCAB]], model, num_heads=H)
    with pytest.raises(ValueError, match=rf"src holds ids in \[-1, 2\] but the vocabulary has {SRC_VOCAB}"):
        encode([[-1, 2]], model, num_heads=H)
    with pytest.raises(ValueError, match=rf"tgt holds ids in \[1, {TGT_VOCAB + 4}\].*{TGT_VOCAB}"):
        decode([[1, TGT_VOCAB + 4]], memory[0], model, num_heads=H)


@pytest.mark.parametrize(("name", "value"), [("bos", TGT_VOCAB), ("bos", -1), ("bos", 1.0),
                                         ("eos", TGT_VOCAB + 2), ("eos", -3)])
def test_bad_special_tokens(rng, model, name, value):
    src = rng.integers(0, SRC_VOCAB, size=(1, 3))
    kwargs = {"bos": 0, name: value}
    with pytest.raises(ValueError, match=rf"{name} must be a token id in \[0, {TGT_VOCAB}\), got {value!r}"):
        greedy_decode(src, model, num_heads=H, max_len=2, **kwargs)


def test_bad_max_len(rng, model):
    with pytest.raises(ValueError, match=r"max_len must be a positive int, got 0"):
        greedy_decode([[1, 2]], model, num_heads=H, bos=0, max_len=0)


# --- init ---------------------------------------------------------------------------------------

def test_init_transformer_defaults_are_the_base_model():
    sig = inspect.signature(init_transformer).parameters
    assert (sig["d_model"].default, sig["num_heads"].default, sig["d_ff"].default,
            sig["num_layers"].default, sig["norm_first"].default) == (512, 8, 2048, 6, False)
    # drawing the base model takes < 1 s with small vocabularies (the ~44M layer parameters dominate)
    p = init_transformer(0, 5, 7)
    assert p.src_embedding.shape == (5, 512) and p.tgt_embedding.shape == (7, 512)
    assert len(p.encoder) == len(p.decoder) == 6
    assert p.w_out.shape == (512, 7) and p.b_out.shape == (7,)
    assert p.encoder_norm is None and p.decoder_norm is None and not p.norm_first
    for layer in p.encoder:
        assert layer.self_attn.w_q.shape == layer.self_attn.w_o.shape == (512, 512)
        assert layer.ffn.w_1.shape == (512, 2048) and layer.ffn.w_2.shape == (2048, 512)
    for layer in p.decoder:
        assert layer.cross_attn.w_k.shape == (512, 512) and layer.ffn.b_1.shape == (2048,)
    # embeddings ~ N(0, 1/d_model): the std of 12·512 draws is within ±3% of 1/√512 (its relative
    # standard error is 1/√(2·6144) ≈ 0.9%, so this is a > 3σ band)
    emb = np.concatenate([p.src_embedding, p.tgt_embedding]).ravel()
    assert abs(emb.std() * math.sqrt(512) - 1.0) < 0.03
    assert np.abs(p.w_out).max() <= math.sqrt(6.0 / (512 + 7))


def test_init_transformer_determinism_and_pre_ln():
    a = init_transformer(3, 5, 6, d_model=8, num_heads=2, d_ff=8, num_layers=2)
    b = init_transformer(np.random.default_rng(3), 5, 6, d_model=8, num_heads=2, d_ff=8, num_layers=2)
    np.testing.assert_array_equal(a.decoder[1].cross_attn.w_v, b.decoder[1].cross_attn.w_v)
    np.testing.assert_array_equal(a.w_out, b.w_out)
    assert not np.array_equal(a.encoder[0].self_attn.w_q, a.encoder[1].self_attn.w_q)
    pre = init_transformer(3, 5, 6, d_model=8, num_heads=2, d_ff=8, num_layers=2, norm_first=True)
    assert pre.norm_first
    np.testing.assert_array_equal(pre.encoder_norm.gamma, np.ones(8))
    np.testing.assert_array_equal(pre.decoder_norm.beta, np.zeros(8))
    with pytest.raises(ValueError, match=r"num_layers must be a positive int"):
        init_transformer(0, 5, 6, num_layers=0)
    with pytest.raises(ValueError, match=r"src_vocab must be a positive int"):
        init_transformer(0, 0, 6)


def test_greedy_decode_cross_weights_equal_teacher_forced_decoder_weights():
    params = init_transformer(3, 10, 11, d_model=16, num_heads=2, d_ff=32, num_layers=2)
    src = np.array([[1, 4, 2, 8, 5], [3, 3, 9, 0, 0]])
    lengths = np.array([5, 3])
    tokens, logits, cross = greedy_decode(src, params, num_heads=2, bos=0, max_len=4, src_lengths=lengths,
                                          return_weights=True)
    np.testing.assert_array_equal(logits, greedy_decode(src, params, num_heads=2, bos=0, max_len=4,
                                                        src_lengths=lengths)[1])
    assert cross.shape == (2, 2, 2, 4, 5)                       # (layers, batch, h, T, m)
    np.testing.assert_array_equal(cross[:, 1, ..., 3:], 0.0)     # padded source keys
    # Teacher forcing the decoded tokens layer by layer gives the same cross-attention rows.
    memory = encode(src, params, num_heads=2, src_lengths=lengths)
    y = embed(tokens[:, :-1], params.tgt_embedding, "tgt")
    mask = padding_mask(lengths, 5)
    for layer, expected in zip(params.decoder, cross, strict=True):
        y, (_, A_cross) = decoder_layer(y, memory, layer, num_heads=2, memory_mask=mask, return_weights=True)
        np.testing.assert_allclose(A_cross, expected, rtol=1e-12, atol=1e-12)
