# %% [markdown]
# # Positional information beyond sinusoids
#
# **T. Lin, Y. Wang, X. Liu, X. Qiu, "A Survey of Transformers", AI Open 2022,
# [arXiv:2106.04554](https://arxiv.org/abs/2106.04554) (v2), §5.1 "Positional Representations".** Each
# model paper is cited where it appears.
#
# Attention is blind to order: permute the keys and values together and every output stays the same. The
# Transformer's sinusoids (notebook 01) add the position to the inputs. Every model a learner meets today
# does it differently:
#
# - **absolute, learned** (§5.1.1): a table of vectors, one per position, added to the inputs (BERT, GPT-2);
# - **relative** (§5.1.2): the *distance* i − j enters the scores, through learned vectors (Shaw et al.),
#   sinusoids and two global biases (Transformer-XL), a scalar per distance bucket (T5), a kernel of the
#   distance (KERPLE), or separate position terms (DeBERTa);
# - **a bias with no parameters** (ALiBi): a penalty linear in the distance, with a fixed slope per head;
# - **rotations** (§5.1.3, RoPE): q and k are turned by angles proportional to their positions, so their
#   dot product depends on i − j alone.
#
# > **One convention for the whole family.** Query i sits at position i and key j at position j; the
# > distance is i − j. With n ≠ m and `causal="bottom-right"`, the n queries are the *last* n of the m
# > positions: query i sits at i + m − n (a decoder continuing a prefix, Transformer-XL's segment after
# > its memory). Biases are added to the scores QKᵀ·scale, and a causal mask hides the later keys by
# > selection. Details that implementations choose differently are named options: RoPE's `pairing`,
# > ALiBi's slope rule and `form`, T5's `bidirectional`, Transformer-XL's `method="shift"`, DeBERTa's
# > `p2c_index`.
#
# The plain text paraphrases the survey and the cited papers. Commentary is set apart as block
# quotes. Every claim that can be checked is an `assert`.
#
# **Contents.** (a) learned absolute positions · (b) Shaw's relative representations · (c) Transformer-XL:
# the four terms, the relative shift and the memory stepped segment by segment · (d) T5's bucket map · (e)
# ALiBi's slopes · (f) RoPE: the rotation, relative-only scores, the two pairings · (g) KERPLE · (h)
# DeBERTa's disentangled terms · (i) every bias over (i, j) side by side · (j) past the training length ·
# (k) exercises

# %%
import matplotlib as mpl
import numpy as np

import refattn
from refattn import viz
from refattn.positional import (
    KerpleParams,
    T5BiasParams,
    alibi_attention,
    alibi_bias,
    alibi_slopes,
    deberta_attention,
    deberta_delta,
    disentangled_scores,
    init_deberta,
    init_learned_pe,
    init_relative_embeddings,
    init_t5_bias,
    init_transformer_xl,
    init_transformer_xl_layer,
    kerple_bias,
    learned_positional_encoding,
    rel_shift,
    relative_attention,
    relative_index,
    rope_attention,
    rope_frequencies,
    rotate,
    t5_bias,
    t5_relative_position_bucket,
    transformer_xl_attention,
    transformer_xl_segments,
    transformer_xl_step,
    transformer_xl_terms,
)

np.set_printoptions(precision=3, suppress=True, linewidth=110)
rng = np.random.default_rng(20210615)   # arXiv:2106.04554v2 date; every draw below comes from rng or a stated seed


def styled():
    # hand-made plots (curves, bars) use the same style file as refattn.viz
    return mpl.style.context(viz.STYLE_PATH)


n, d = 12, 8
q, k, v = 1.5 * rng.standard_normal((n, d)), rng.standard_normal((n, d)), rng.standard_normal((n, d))
causal = np.tril(np.ones((n, n), dtype=bool))
A_plain = refattn.scaled_dot_product_attention(q, k, v, causal=True, return_weights=True)[1]

# %% [markdown]
# ## (a) Learned absolute positions
#
# **J. Devlin, M.-W. Chang, K. Lee, K. Toutanova, "BERT", NAACL 2019,
# [arXiv:1810.04805](https://arxiv.org/abs/1810.04805); A. Radford et al., "Language Models are Unsupervised
# Multitask Learners" (GPT-2), 2019.** A table P with one row per position, up to max_len, is learned with the
# model and added to the inputs: x'_t = x_t + P[t]. BERT draws it from a truncated N(0, 0.02²), GPT-2 from
# N(0, 0.01²).
#
# > As drawn, the rows are unrelated: nothing tells position 5 that it is next to 6, which training has to
# > learn. The sinusoids have that structure built in: their dot products depend on the distance only. A
# > table has no row past max_len, so a longer sequence has no encoding at all.

# %%
max_len, d_model = 32, 16
P = init_learned_pe(rng, max_len, d_model)
S = refattn.sinusoidal_positional_encoding(max_len, d_model)
x = rng.standard_normal((max_len, d_model))
np.testing.assert_array_equal(learned_positional_encoding(x, P), x + P)    # x'_t = x_t + P[t]


def cosine(T):
    unit = T / np.linalg.norm(T, axis=1, keepdims=True)
    return unit @ unit.T


sinusoid_gram = S @ S.T
toeplitz = np.array([[sinusoid_gram[abs(i - j), 0] for j in range(max_len)] for i in range(max_len)])
np.testing.assert_allclose(sinusoid_gram, toeplitz, rtol=0, atol=1e-12)   # sinusoids: a function of |i − j| only
try:
    learned_positional_encoding(rng.standard_normal((max_len + 1, d_model)), P)
except ValueError as error:
    print("ValueError:", error)
else:
    raise AssertionError("a sequence longer than the table must be refused")

fig = viz.figure((12, 4.2))
viz.draw_attention(fig, np.stack([cosine(P), cosine(S)]), signed=True, vmax=1.0, annotate=False,
                   titles=["learned P (as drawn): cosine of rows", "sinusoids: cosine of rows"],
                   xlabel="position", ylabel="position")
fig

# %% [markdown]
# ## (b) Shaw's relative position representations
#
# **P. Shaw, J. Uszkoreit, A. Vaswani, "Self-Attention with Relative Position Representations", NAACL 2018,
# [arXiv:1803.02155](https://arxiv.org/abs/1803.02155).** Two learned vectors per distance enter the two sums
# of attention, one in the scores and one in the values:
#
# $$e_{ij} = \frac{q_i (k_j + a^K_{ij})^\top}{\sqrt d}, \qquad z_i = \sum_j \alpha_{ij} (v_j + a^V_{ij}), \qquad
# a_{ij} = w_{\operatorname{clip}(j - i,\, k)} .$$
#
# Distances beyond k share the vectors of ±k: 2k + 1 rows in each table.

# %%
span = 3
emb = init_relative_embeddings(rng, span, d, d)
idx = relative_index(n, n, span)                                        # (n, n) row of w for each pair
assert idx.min() == 0 and idx.max() == 2 * span
np.testing.assert_array_equal(idx - span, np.clip(np.subtract.outer(np.arange(n), np.arange(n)).T, -span, span))
out_rel, A_rel = relative_attention(q, k, v, emb, causal=True, return_weights=True)
e = np.einsum("id,ijd->ij", q, k[None, :, :] + emb.keys[idx]) / np.sqrt(d)   # the paper's two terms at once
alpha = refattn.softmax(np.where(causal, e, -np.inf))
z = np.einsum("ij,ijd->id", alpha, v[None, :, :] + emb.values[idx])
np.testing.assert_allclose(out_rel, z, rtol=1e-12, atol=1e-12)
zero = type(emb)(np.zeros_like(emb.keys), np.zeros_like(emb.values))
np.testing.assert_allclose(relative_attention(q, k, v, zero, causal=True),
                           refattn.scaled_dot_product_attention(q, k, v, causal=True), rtol=1e-12, atol=1e-12)

fig = viz.figure((12, 4.2))
viz.draw_attention(fig, np.stack([(idx - span).astype(float), A_rel, A_plain]),
                   allowed=np.stack([np.ones_like(causal), causal, causal]), signed=True, vmin=None, annotate=False,
                   titles=[f"clip(j − i, {span})", "weights with relative terms", "softmax, no position"])
fig

# %% [markdown]
# ## (c) Transformer-XL
#
# **Z. Dai, Z. Yang, Y. Yang, J. Carbonell, Q. V. Le, R. Salakhutdinov, "Transformer-XL: Attentive Language
# Models Beyond a Fixed-Length Context", ACL 2019, [arXiv:1901.02860](https://arxiv.org/abs/1901.02860),
# §3.2-3.3.** The score of query i and key j is four terms,
#
# $$A^{rel}_{ij} = \underbrace{q_i^\top k_j}_{(a)} + \underbrace{q_i^\top W_{k,R} R_{i-j}}_{(b)}
#   + \underbrace{u^\top k_j}_{(c)} + \underbrace{v^\top W_{k,R} R_{i-j}}_{(d)},$$
#
# content against content, content against the sinusoid R of the distance, a global content bias u and a
# global position bias v. The segment before the current one is cached as a *memory* (no gradient) and the
# keys and values run over [memory; segment]: with a memory of length mlen, query i sits at position
# i + mlen.
#
# **The relative shift.** Computing (b) + (d) for every pair would index R by i − j pair by pair. The
# official code instead computes (q_i + v)ᵀ W_{k,R} R_p for every *position* p of R (klen − 1 down to 0), and
# then slides row i left by n − 1 − i with one pad-and-reshape, `rel_shift`. On every pair a query may
# see, that is the direct indexing.

# %%
mlen, seg = 4, 6
qx, kx = rng.standard_normal((seg, d)), rng.standard_normal((mlen + seg, d))
px = init_transformer_xl(rng, d, init_std=0.5)
direct = transformer_xl_terms(qx, kx, px, method="direct")
shifted = transformer_xl_terms(qx, kx, px, method="shift")
visible = np.arange(mlen + seg)[None, :] <= np.arange(seg)[:, None] + mlen      # j ≤ i + mlen
for a, b in zip(direct, shifted, strict=True):
    np.testing.assert_allclose(a[visible], b[visible], rtol=1e-12, atol=1e-12)    # the shift is the indexing
toy = np.arange(12.0).reshape(3, 4)
print("rel_shift of\n", toy, "\nis\n", rel_shift(toy))

fig = viz.figure((13, 3.6))
viz.draw_attention(fig, np.stack(direct) / np.sqrt(d), allowed=visible, signed=True, annotate=False,
                   titles=["(a) q_iᵀk_j", "(b) q_iᵀW R_{i−j}", "(c) uᵀk_j", "(d) vᵀW R_{i−j}"],
                   xlabel="key j (memory 0-3)", ylabel="query i")
fig

# %% [markdown]
# **The memory, stepped.** One attention-only layer, a sequence of 3 segments of 4 tokens. Each step attends
# over [memory; segment] and hands the last `mem_len` states on; with mem_len = 4 each segment sees itself and
# the one before (the memory slides). With a memory as long as everything seen,
# the segment-by-segment loop equals running the whole sequence at once; with an empty memory a segment is
# plain relative attention.

# %%
L_seg, layer = 4, init_transformer_xl_layer(rng, d, init_std=0.5)
xs = rng.standard_normal((3 * L_seg, d))
memories, steps = None, []
for s in range(3):
    _, memories, (A_s,) = transformer_xl_step(xs[s * L_seg:(s + 1) * L_seg], memories, [layer], mem_len=L_seg)
    steps.append(A_s)
    print(f"segment {s}: weights {A_s.shape}, memory now {memories[0].shape[0]} states")
whole = transformer_xl_segments(xs, [layer], segment_length=3 * L_seg, mem_len=0)
np.testing.assert_allclose(transformer_xl_segments(xs, [layer], segment_length=L_seg, mem_len=3 * L_seg), whole,
                           rtol=1e-12, atol=1e-12)
first = xs[:L_seg]
np.testing.assert_allclose(
    transformer_xl_step(first, None, [layer], mem_len=L_seg)[0],
    transformer_xl_attention(first @ layer.W_q, first @ layer.W_k, first @ layer.W_v, layer.params, causal=True),
    rtol=1e-12, atol=1e-12)                                              # empty memory: plain relative attention

width = 3 * L_seg
padded = np.zeros((3, L_seg, width))
allowed = np.zeros((3, L_seg, width), dtype=bool)
titles = []
for s, A_s in enumerate(steps):
    start = (s + 1) * L_seg - A_s.shape[-1]                             # first key position this step sees
    padded[s, :, start:(s + 1) * L_seg] = A_s
    allowed[s, :, start:(s + 1) * L_seg] = A_s > 0
    titles.append(f"segment {s}: keys {start}-{(s + 1) * L_seg - 1}")
fig = viz.figure((13, 2.8))
viz.draw_attention(fig, padded, allowed=allowed, vmax=1.0, annotate=False, xlabel="key position",
                   ylabel="query of the segment",
                   titles=titles)
fig

# %% [markdown]
# ## (d) T5's relative position buckets
#
# **C. Raffel et al., "Exploring the Limits of Transfer Learning with a Unified Text-to-Text Transformer",
# JMLR 2020, [arXiv:1910.10683](https://arxiv.org/abs/1910.10683), §2.1.** One learned scalar per bucket and
# head is added to the scores. Relative positions r = j − i fall into 32 buckets: half of them exact for small
# |r|, the rest logarithmic up to max_distance = 128, and everything further in the last bucket. The encoder
# (bidirectional) spends half its buckets on each sign of r; the decoder (causal) maps the future to bucket 0
# and spends all 32 on the past.

# %%
r = np.arange(-300, 301)
b_bi = t5_relative_position_bucket(r, bidirectional=True)
b_causal = t5_relative_position_bucket(r, bidirectional=False)
assert b_bi.max() == 31 and b_causal.max() == 31
assert np.all(b_causal[r >= 0] == 0)                                     # the decoder's future: bucket 0
assert np.all(b_bi[r < 0] < 16) and np.all(b_bi[r > 0] >= 16)           # bidirectional: a half per sign
assert np.all(np.diff(b_bi[r >= 0]) >= 0) and np.all(np.diff(b_bi[r <= 0]) <= 0)   # monotone in |r| on each side
for rr in (0, 1, 7, 8, 20, 127, 128, 300):
    print(f"r = {rr:4d}: bidirectional {t5_relative_position_bucket(rr):2d}, "
          f"causal {t5_relative_position_bucket(-rr, bidirectional=False):2d}")

grid = np.subtract.outer(np.arange(160), np.arange(160)).T               # j − i
maps = np.stack([t5_relative_position_bucket(grid, bidirectional=True),
                 t5_relative_position_bucket(grid, bidirectional=False)]).astype(float)
fig = viz.figure((10, 4.8))
viz.draw_attention(fig, maps, vmin=0.0, vmax=31.0, cmap="turbo", annotate=False,
                   titles=["bidirectional buckets of j − i", "causal buckets of j − i"])
fig

# %% [markdown]
# ## (e) ALiBi's slopes
#
# **O. Press, N. A. Smith, M. Lewis, "Train Short, Test Long: Attention with Linear Biases Enables Input Length
# Extrapolation", ICLR 2022, [arXiv:2108.12409](https://arxiv.org/abs/2108.12409), §3.** No position enters the
# inputs. Head h adds −m_h·(i − j) to its scores, with fixed slopes: for h a power of two the geometric sequence
# 2^(−8/h), 2^(−16/h), …, 2^(−8). For other head counts the official code takes the slopes of the power of two
# below and fills up with every other slope of the next one.

# %%
for heads in (8, 12, 16):
    print(f"h = {heads:2d}:", alibi_slopes(heads))
np.testing.assert_array_equal(alibi_slopes(8), 2.0 ** -np.arange(1, 9))
np.testing.assert_array_equal(alibi_slopes(12)[8:], 2.0 ** (-np.arange(1, 8, 2) / 2))   # 2^(−0.5), 2^(−1.5), …

slopes = alibi_slopes(4)
Q4, K4, V4 = (np.broadcast_to(x_, (4, n, d)) for x_ in (q, k, v))   # the same q, k, v in every head
out_alibi, A_alibi = alibi_attention(Q4, K4, V4, slopes=slopes, causal=True, return_weights=True)
B = alibi_bias(n, slopes=slopes)                                         # (h, n, n)  −m_h (i − j)
np.testing.assert_allclose(out_alibi, refattn.scaled_dot_product_attention(Q4, K4, V4, mask=B, causal=True),
                           rtol=1e-12, atol=1e-12)                      # sdpa with the bias as a float mask

fig = viz.figure((13, 6.4))
rows = fig.subfigures(2, 1)
viz.draw_attention(rows[0], B, allowed=causal, signed=True, vmin=None, annotate=False,
                   titles=[f"bias, m = {m_:g}" for m_ in slopes])
viz.draw_attention(rows[1], A_alibi, allowed=causal, vmax=1.0, annotate=False,
                   titles=[f"weights, m = {m_:g}" for m_ in slopes])
fig

# %% [markdown]
# > The same q, k and v in every head: only the slope differs. The steep head (m = 1/4) leans towards the
# > latest tokens; the shallow ones (down to 1/256) barely differ from no bias at all over 12 tokens. The mix of scales is the point: a model gets local and global heads with no
# > parameter to learn.

# %% [markdown]
# ## (f) RoPE
#
# **J. Su, Y. Lu, S. Pan, A. Murtadha, B. Wen, Y. Liu, "RoFormer: Enhanced Transformer with Rotary Position
# Embedding", 2021, [arXiv:2104.09864](https://arxiv.org/abs/2104.09864), §3.4.** Each pair of dimensions of
# q and k at position p is turned by the angle p·θ_t, θ_t = 10000^(−2t/d). A rotation keeps lengths, and two
# rotations compose: (R_i q)ᵀ(R_j k) = qᵀR_{j−i}k. The score depends on the positions through i − j only.
#
# **The geometry.** One pair (x₁, x₂) of a fixed vector at positions 0 … 7: the fastest pair (t = 0, one
# radian per position) sweeps the circle, the next (a tenth of a radian) turns by 0.7 rad in all; the slowest
# pairs barely move over a short sequence and carry the long distances.

# %%
theta = rope_frequencies(d)
print("θ_t:", theta)
vec = np.tile([1.0, 0.0] * (d // 2), (8, 1))                            # the same vector at positions 0 … 7
turned = rotate(vec, np.arange(8))
np.testing.assert_allclose(np.linalg.norm(turned, axis=1), np.linalg.norm(vec, axis=1), rtol=1e-14)
with styled():
    fig = viz.figure((9, 3.4))
    for ax, t in zip(fig.subplots(1, 2), (0, 1), strict=True):
        ax.add_patch(mpl.patches.Circle((0, 0), 1.0, fill=False, color="lightgrey"))
        ax.scatter(turned[:, 2 * t], turned[:, 2 * t + 1], c=np.arange(8), cmap="viridis", zorder=3)
        for p, (a, b) in enumerate(turned[:, 2 * t:2 * t + 2]):
            ax.annotate(str(p), (a, b), textcoords="offset points", xytext=(4, 4), fontsize=7)
        ax.set(xlim=(-1.3, 1.3), ylim=(-1.3, 1.3), aspect="equal", title=f"pair t = {t}, θ = {theta[t]:.3g}")
fig

# %% [markdown]
# **Relative-only dependence.** Put the same q and k at every pair of positions (i, j) in 0 … 47: the score
# map is constant along each diagonal (a Toeplitz matrix), for both pairings.
#
# **The two pairings.** The paper and GPT-J pair dimensions (2t, 2t + 1) (`pairing="interleaved"`); GPT-NeoX and
# LLaMA pair (t, t + d/2) (`pairing="half"`). They are the same rotation after a fixed permutation of the
# dimensions, so a checkpoint moves from one to the other by permuting the rows of its q and k projections.
# Run unpermuted, they give different results.

# %%
P_pos = 48
qv, kv = rng.standard_normal(d), rng.standard_normal(d)
score_maps = {}
for pairing in ("interleaved", "half"):
    Rq = rotate(np.tile(qv, (P_pos, 1)), np.arange(P_pos), pairing=pairing)
    Rk = rotate(np.tile(kv, (P_pos, 1)), np.arange(P_pos), pairing=pairing)
    Smap = Rq @ Rk.T
    for offset in range(-P_pos + 1, P_pos):
        diagonal = np.diagonal(Smap, offset)
        np.testing.assert_allclose(diagonal, diagonal[0], rtol=0, atol=1e-12)   # a function of i − j alone
    score_maps[pairing] = Smap
perm = np.concatenate([np.arange(0, d, 2), np.arange(1, d, 2)])          # interleaved dim 2t → half-split t
qr, kr = rng.standard_normal((2, n, d))
np.testing.assert_allclose(rope_attention(qr, kr, v, causal=True),
                           rope_attention(qr[:, perm], kr[:, perm], v, causal=True, pairing="half"),
                           rtol=1e-12, atol=1e-12)
unpermuted = np.abs(rope_attention(qr, kr, v) - rope_attention(qr, kr, v, pairing="half")).max()
print(f"unpermuted, the pairings differ by {unpermuted:.3f}")

fig = viz.figure((10, 4.6))
viz.draw_attention(fig, np.stack(list(score_maps.values())), signed=True, annotate=False,
                   titles=["(R_i q)ᵀ(R_j k), interleaved", "(R_i q)ᵀ(R_j k), half-split"],
                   xlabel="key position j", ylabel="query position i")
fig

# %% [markdown]
# **Partial rotation and interpolation.** `rotary_dim=r` turns only the first r dimensions (GPT-J's
# `rotary_dim`, GPT-NeoX's `rotary_pct`); the rest carry content only. `scaling=s` divides every position by s
# (position interpolation, S. Chen et al. 2023, [arXiv:2306.15595](https://arxiv.org/abs/2306.15595)): a model
# trained on length L reads length s·L at angles it has seen.

# %%
np.testing.assert_allclose(rope_attention(qr, kr, v, rotary_dim=0), refattn.scaled_dot_product_attention(qr, kr, v),
                           rtol=1e-12, atol=1e-12)                      # nothing turns: softmax attention
np.testing.assert_allclose(rope_attention(qr, kr, v, scaling=4.0),
                           rope_attention(qr, kr, v, q_positions=np.arange(n) / 4, k_positions=np.arange(n) / 4),
                           rtol=1e-12, atol=1e-12)
partial = rotate(np.tile(qv, (3, 1)), np.arange(3), rotary_dim=4)
np.testing.assert_array_equal(partial[:, 4:], np.tile(qv[4:], (3, 1)))  # dimensions r … d − 1 pass through

# %% [markdown]
# ## (g) KERPLE
#
# **T.-C. Chi, T.-H. Fan, P. J. Ramadge, A. I. Rudnicky, "KERPLE: Kernelized Relative Positional Embedding for
# Length Extrapolation", NeurIPS 2022, [arXiv:2205.09921](https://arxiv.org/abs/2205.09921), §3.** The bias is a
# conditionally positive definite kernel of the distance with two learned parameters per head, r1, r2 > 0
# (and r2 ≤ 2 for the power variant): −r1·log(1 + r2|i − j|) or −r1·|i − j|^r2. ALiBi is the power variant
# with r2 = 1.

# %%
log_bias = kerple_bias(KerpleParams(1.0, 0.5), n, n)
power_bias = kerple_bias(KerpleParams(0.25, 1.0), n, n, kind="power")
dist = np.abs(np.subtract.outer(np.arange(n), np.arange(n)))
np.testing.assert_allclose(log_bias, -np.log1p(0.5 * dist), rtol=1e-14, atol=0)
np.testing.assert_allclose(power_bias, alibi_bias(n, slopes=[0.25], form="symmetric")[0], rtol=0, atol=0)

# %% [markdown]
# ## (h) DeBERTa's disentangled attention
#
# **P. He, X. Liu, J. Gao, W. Chen, "DeBERTa: Decoding-enhanced BERT with Disentangled Attention", ICLR 2021,
# [arXiv:2006.03654](https://arxiv.org/abs/2006.03654), Eq. 4.** Content and relative position stay separate
# vectors, and the score sums content-to-content, content-to-position and position-to-content, over √(3d):
#
# $$\tilde A_{ij} = Q^c_i K^{c\top}_j + Q^c_i K^{r\top}_{\delta(i,j)} + K^c_j Q^{r\top}_{\delta(j,i)} .$$
#
# δ clips the distance to ±k (the later versions bucket it logarithmically). The paper's Eq. 4 reads the
# position-to-content term at δ(j, i); the released code reads it at δ(i, j), and `p2c_index="official"`
# reproduces the released models.

# %%
dparams = init_deberta(rng, 4, d)
terms = disentangled_scores(q, k, dparams)
out_deb, A_deb = deberta_attention(q, k, v, dparams, return_weights=True)
np.testing.assert_allclose(A_deb, refattn.softmax(terms["c2c"] + terms["c2p"] + terms["p2c"]), rtol=1e-12,
                           atol=1e-15)
np.testing.assert_allclose(deberta_attention(q, k, v, dparams, terms=()), refattn.scaled_dot_product_attention(q, k, v),
                           rtol=1e-12, atol=1e-12)                      # position terms off: sdpa at 1/√d
print("δ(i, j) for n = 6, k = 2:\n", deberta_delta(6, 6, 2))

fig = viz.figure((13, 3.6))
viz.draw_attention(fig, np.stack([terms["c2c"], terms["c2p"], terms["p2c"], A_deb]), signed=True, vmin=None,
                   annotate=False, titles=["c2c / √(3d)", "c2p / √(3d)", "p2c / √(3d)", "weights"])
fig

# %% [markdown]
# ## (i) Every bias over (i, j)
#
# What each relative encoding adds to the scores of one head, causal, n = 24: the additive ones directly,
# RoPE and Transformer-XL as the change of the scores they make on the same q and k.

# %%
N = 24
q24, k24 = 1.5 * rng.standard_normal((N, d)), rng.standard_normal((N, d))
plain = q24 @ k24.T / np.sqrt(d)
causal24 = np.tril(np.ones((N, N), dtype=bool))
t5_head = T5BiasParams(init_t5_bias(rng, num_heads=1).table[0])
xl = init_transformer_xl(rng, d, init_std=0.5)
xl_terms = transformer_xl_terms(q24, k24, xl, causal=True)
biases = {
    "Shaw: q·a^K / √d": np.einsum("id,ijd->ij", q24, init_relative_embeddings(rng, 4, d, d).keys[
        relative_index(N, N, 4)]) / np.sqrt(d),
    "Transformer-XL: (b)+(c)+(d)": (xl_terms[1] + xl_terms[2] + xl_terms[3]) / np.sqrt(d),
    "T5: b[bucket(j − i)]": t5_bias(t5_head, N, N, causal=True),
    "ALiBi: −(i − j)/4": alibi_bias(N, slopes=[0.25])[0],
    "RoPE: change of scores": rotate(q24, np.arange(N)) @ rotate(k24, np.arange(N)).T / np.sqrt(d) - plain,
    "KERPLE log": kerple_bias(KerpleParams(1.0, 0.5), N, N),
    "DeBERTa: c2p + p2c": sum(disentangled_scores(q24, k24, init_deberta(rng, 4, d), causal=True)[t]
                              for t in ("c2p", "p2c")),
}
fig = viz.figure((14, 7.2))
rows = fig.subfigures(2, 1)
names = list(biases)
viz.draw_attention(rows[0], np.stack([biases[t] for t in names[:4]]), allowed=causal24, signed=True, vmin=None,
                   annotate=False, titles=names[:4])
viz.draw_attention(rows[1], np.stack([biases[t] for t in names[4:]]), allowed=causal24, signed=True, vmin=None,
                   annotate=False, titles=names[4:])
fig

# %% [markdown]
# ## (j) Past the training length
#
# A model sees positions up to its training length L and is then run longer. What does each encoding put into
# the scores of a query at distances it never saw? One query and one key vector, the query at position 5L − 1,
# the key at every position before it; the position's share of the score against the distance i − j (the
# grey band is the training range, distances < L = 32).
#
# > The curves explain the folklore. A learned table has no row past L (a ValueError here, garbage or a crash
# > in a model). Shaw and DeBERTa clip the distance, and T5 saturates at 128: the far past is one bucket,
# > whatever its distance. ALiBi and KERPLE keep decaying with the distance, the same function as in training,
# > which is why they extrapolate. RoPE's score keeps oscillating with angles never seen together in training;
# > interpolation (scaling 4) makes 4L positions read the angles of L. Transformer-XL's sinusoids are
# > defined at every distance, and `clamp_len` caps them.

# %%
L = 32
far = 5 * L
dist_far = np.arange(far)                                                # i − j = 0 … 5L − 1
q1, k1 = 1.5 * rng.standard_normal(d), rng.standard_normal(d)
keys_far = np.tile(k1, (far, 1))
Rq_far = rotate(q1[None, :], [far - 1.0])
curves = {
    "Shaw (k = 8)": q1 @ init_relative_embeddings(rng, 8, d, d).keys[relative_index(1, far, 8, offset=far - 1)[0]].T
    / np.sqrt(d),
    "T5 (causal)": t5_bias(t5_head, 1, far, causal="bottom-right")[0],
    "ALiBi (m = 1/16)": alibi_bias(1, far, slopes=[1 / 16], causal="bottom-right")[0, 0],
    "KERPLE log (1, 0.5)": kerple_bias(KerpleParams(1.0, 0.5), 1, far, causal="bottom-right")[0],
    "RoPE": (Rq_far @ rotate(keys_far, np.arange(far)).T)[0] / np.sqrt(d),
    "RoPE, scaling 4": (rotate(q1[None, :], [far - 1.0], scaling=4.0) @ rotate(keys_far, np.arange(far),
                                                                              scaling=4.0).T)[0] / np.sqrt(d),
    "Transformer-XL (b)+(d)": sum(transformer_xl_terms(q1[None, :], keys_far, xl, causal="bottom-right")[t]
                                  for t in (1, 3))[0] / np.sqrt(d),
    "DeBERTa c2p (k = 8)": disentangled_scores(q1[None, :], keys_far, init_deberta(rng, 8, d), terms=("c2p",),
                                               causal="bottom-right")["c2p"][0],
}
assert all(curve.shape == (far,) for curve in curves.values())
np.testing.assert_array_equal(curves["ALiBi (m = 1/16)"][::-1], -dist_far / 16)   # the same line past L
assert np.ptp(curves["T5 (causal)"][: far - 128]) == 0                 # T5: one bucket past 128
assert np.ptp(curves["Shaw (k = 8)"][: far - 8]) == 0                  # Shaw: one vector past k
try:
    learned_positional_encoding(rng.standard_normal((far, d_model)), P)
except ValueError:
    pass
else:
    raise AssertionError("a learned table of 32 rows must refuse 160 positions")

with styled():
    fig = viz.figure((14, 6.4))
    for ax, (name, curve) in zip(fig.subplots(2, 4).ravel(), curves.items(), strict=True):
        ax.axvspan(0, L, color="0.9")
        ax.plot(dist_far, curve[::-1], linewidth=1.2)
        ax.set(title=name, xlabel="i − j")
fig

# %% [markdown]
# ## (k) Exercises
#
# 1. **ALiBi with 6 heads.** Which slopes does `alibi_slopes(6)` give, and why are they not 2^(−8t/6)?
#    <details><summary>Hint</summary>The official rule takes the 4 slopes of h = 4 (1/4 … 1/256) and then every
#    other slope of h = 8, 2^(−1) and 2^(−3). The geometric sequence 2^(−8t/6) is what the paper's power-of-two
#    formula would give; the released models use the official rule.</details>
#
# 2. **T5's far past.** A decoder at position 1000 attends to positions 0 and 500. Do the two keys get the same
#    bias? Check with `t5_relative_position_bucket`.
#    <details><summary>Hint</summary>Both distances exceed max_distance = 128: both land in bucket 31 and get
#    the same scalar. Only the content can tell them apart.</details>
#
# 3. **RoPE's permutation.** Write the permutation that takes a half-split checkpoint's q projection to the
#    interleaved pairing (the inverse of `perm` above) and check it with `rope_attention`.
#    <details><summary>Hint</summary>`np.argsort(perm)`: half-split dimension t goes to 2t and t + d/2 to
#    2t + 1.</details>
#
# 4. **Transformer-XL without memory.** Run `transformer_xl_segments` with `mem_len=0` and segments of 4 on
#    `xs`. Which outputs equal the whole-sequence run?
#    <details><summary>Hint</summary>Only the first segment's: every later segment starts again with no context,
#    so its early queries see fewer keys than in the whole sequence.</details>
