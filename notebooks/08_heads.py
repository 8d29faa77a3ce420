# %% [markdown]
# # Multi-head variants
#
# **T. Lin, Y. Wang, X. Liu, X. Qiu, "A Survey of Transformers", AI Open 2022,
# [arXiv:2106.04554](https://arxiv.org/abs/2106.04554) (v2), §4.6 "Improved Multi-Head Mechanism".** Each
# model paper is cited where it appears.
#
# Multi-head attention runs h attentions side by side on their own projections and concatenates them. The
# survey's §4.6 groups the ways of changing that:
#
# - **heads that interact** (§4.6.1): talking heads mix the heads' logits and weights; collaborative heads
#   share one query and key projection; routing-by-agreement aggregates the heads as capsules instead of
#   concatenating them;
# - **heads with limited spans** (§4.6.2): an adaptive span learned per head, or fixed multi-scale windows;
# - **losses** (§4.6.1): regularisers that make the heads disagree, or push them to predefined patterns.
#
# Two changes that every large model uses now belong here too: **multi-query and grouped-query attention**,
# which share key and value heads to shrink the decoding cache, and a **head size** chosen apart from
# d_model / h.
#
# > **One convention for the family.** Every registry entry here takes the layer's inputs (q, k, v are
# > x_q, x_kv, x_v of width d_model), `num_heads` and `params` (drawn from `rng` when absent and returned as
# > a draw), and returns per-head weights (..., h, n, m). Each one's limit is multi-head attention with the
# > same parameters, tested to 1e-12.
#
# The plain text paraphrases the survey and the cited papers. Commentary is set apart as block
# quotes. Every claim that can be checked is an `assert`.
#
# **Contents.** (a) adaptive span: the soft masks, and z moving under its gradient · (b) multi-scale heads
# · (c) talking heads, stepped · (d) collaborative heads and the compression they allow · (e) multi-query and
# grouped-query attention: the key/value cache · (f) head size and the low-rank bottleneck · (g) the
# head-diversity losses · (h) routing-by-agreement · (i) exercises

# %%
import matplotlib as mpl
import numpy as np

import refattn
from refattn import viz
from refattn.core.multi_head import project_heads
from refattn.heads import (
    TalkingHeadsParams,
    adaptive_span_attention,
    adaptive_span_grad_z,
    adaptive_span_heads,
    adaptive_span_mask,
    collaborative_attention,
    collaborative_from_multi_head,
    convert_multi_head,
    cp_decomposition,
    dynamic_routing,
    em_routing,
    guide_pattern,
    guide_patterns,
    head_products,
    head_scores,
    init_talking_heads,
    kv_cache_bytes,
    kv_cache_summary,
    layer_windows,
    multi_query_attention,
    multi_scale_attention,
    pattern_loss,
    pattern_loss_score_grad,
    position_disagreement,
    represent_attention,
    span_cache_length,
    span_loss,
    subspace_disagreement,
    talking_heads_attention,
)

np.set_printoptions(precision=3, suppress=True, linewidth=110)
rng = np.random.default_rng(20210615)   # arXiv:2106.04554v2 date; every draw below comes from rng or a stated seed


def styled():
    # hand-made plots (curves, bars) use the same style file as refattn.viz
    return mpl.style.context(viz.STYLE_PATH)


n, d_model, h = 16, 16, 4
x = rng.standard_normal((n, d_model))
mh = refattn.init_multi_head(rng, d_model, h)
out_mh, A_mh = refattn.multi_head_attention(x, x, mh, num_heads=h, causal=True, return_weights=True)

# %% [markdown]
# ## (a) Adaptive attention span
#
# **S. Sukhbaatar, E. Grave, P. Bojanowski, A. Joulin, "Adaptive Attention Span in Transformers", ACL 2019,
# [arXiv:1905.07799](https://arxiv.org/abs/1905.07799).** Each head learns how far back it looks. A soft mask
# of the distance x = t − r between query t and key r,
#
# $$m_z(x) = \min\Big(\max\Big(\frac{R + z - x}{R}, 0\Big), 1\Big),$$
#
# is 1 up to distance z, falls linearly to 0 over a ramp of R positions, and is multiplied into the weights
# after the softmax, which are then renormalised:
# a_tr = m_z(t − r) exp(s_tr) / Σ_q m_z(t − q) exp(s_tq). A loss (λ/M) Σ_i z_i keeps the spans short, and
# because m_z is piecewise linear in z, z gets a gradient and is learned with the rest of the model. Keys
# further back than max z + R carry no weight, so a decoder can drop them from its cache.

# %%
z, R, S = np.array([1.0, 3.0, 6.0, 12.0]), 2.0, n
masks = adaptive_span_mask(z, n, max_span=S, ramp=R)
assert masks.min() >= 0.0 and masks.max() <= 1.0                   # mask values lie in [0, 1]
_, A_span = adaptive_span_attention(x, x, mh, num_heads=h, z=z, max_span=S, ramp=R, return_weights=True)
print("cache length the spans need:", span_cache_length(z, max_span=S, ramp=R), "of", n)
out_wide = adaptive_span_attention(x, x, mh, num_heads=h, z=np.full(h, float(S)), max_span=S, ramp=R)
np.testing.assert_allclose(out_wide, out_mh, rtol=1e-12, atol=1e-12)   # z >= S >= n: causal multi-head attention

fig = viz.figure((13, 6.4))
rows = fig.subfigures(2, 1)
viz.draw_attention(rows[0], masks, vmax=1.0, annotate=False, titles=[f"m_z(t − r), z = {z_:g}" for z_ in z])
viz.draw_attention(rows[1], A_span, vmax=1.0, annotate=False, titles=[f"head {i}: weights, z = {z_:g}"
                                                                      for i, z_ in enumerate(z)])
fig

# %% [markdown]
# **z moving under its gradient.** A toy: one head whose target output was made with span 6. Starting at
# z = 1, the gradient of ½‖y(z) − y*‖² with respect to z (`adaptive_span_grad_z`, analytic, held to finite
# differences in the tests) plus the span loss's λ pushes z towards the span the target needs.

# %%
Q, K, V = (project_heads(x, w, None, 1) for w in rng.standard_normal((3, d_model, 4)) / np.sqrt(d_model))
ramp, target_z = 4.0, 6.0
y_target = adaptive_span_heads(Q, K, V, np.array([target_z]), max_span=S, ramp=ramp)
z_t, lam, lr, path, losses = np.array([1.0]), 1e-3, 2.0, [], []
for _ in range(40):
    y = adaptive_span_heads(Q, K, V, z_t, max_span=S, ramp=ramp)
    losses.append(0.5 * np.sum((y - y_target) ** 2) + span_loss(z_t, lam))
    path.append(z_t[0])
    grad = adaptive_span_grad_z(Q, K, V, z_t, y - y_target, max_span=S, ramp=ramp) + span_loss(z_t, lam,
                                                                                               return_grad=True)[1]
    z_t = np.clip(z_t - lr * grad, 0.0, S)                           # the official code clamps z to [0, S]
assert losses[-1] < 0.1 * losses[0]
print(f"z: {path[0]:.2f} → {path[-1]:.2f} (target {target_z}); loss {losses[0]:.3g} → {losses[-1]:.3g}")
with styled():
    fig = viz.figure((9, 3.2))
    ax1, ax2 = fig.subplots(1, 2)
    ax1.plot(path, marker="o", markersize=3)
    ax1.axhline(target_z, color="grey", linestyle="--", linewidth=1)
    ax1.set(xlabel="step", ylabel="z", title="the span under gradient descent")
    ax2.semilogy(losses, marker="o", markersize=3)
    ax2.set(xlabel="step", ylabel="loss", title="½‖y(z) − y*‖² + (λ/M) Σ z")
fig

# %% [markdown]
# ## (b) Multi-scale heads
#
# **Q. Guo, X. Qiu, P. Liu, X. Xue, Z. Zhang, "Multi-Scale Self-Attention for Text Classification", AAAI
# 2020, [arXiv:1912.00544](https://arxiv.org/abs/1912.00544).** Fixed spans instead of learned ones: head i
# sees the keys within ω_i positions of its query. The paper's analysis of BERT finds small scales useful in
# the lower layers and larger ones higher up, with a mix of scales in every layer.
#
# > refattn's `layer_windows` follows that principle with a rule of its own (a run of half the scales,
# > sliding up with the layer); the paper's exact table could not be checked here.

# %%
windows = [1, 2, 4, n]
_, A_ms = multi_scale_attention(x, x, mh, num_heads=h, windows=windows, return_weights=True)
assert all(np.all(A_ms[i][np.abs(np.subtract.outer(np.arange(n), np.arange(n))) > w] == 0)
           for i, w in enumerate(windows))                           # head i sees |t − r| <= ω_i only
out_all = multi_scale_attention(x, x, mh, num_heads=h, windows=[n] * h)
np.testing.assert_allclose(out_all, refattn.multi_head_attention(x, x, mh, num_heads=h), rtol=1e-12, atol=1e-12)
print("scales per layer (rows) and head (columns):")
print(layer_windows(6, 4, [1, 2, 4, 8, 16, 32]))

fig = viz.figure((13, 3.4))
viz.draw_attention(fig, A_ms, vmax=1.0, annotate=False, titles=[f"head {i}: ω = {w}" for i, w in enumerate(windows)])
fig

# %% [markdown]
# ## (c) Talking heads, stepped
#
# **N. Shazeer, Z. Lan, Y. Cheng, N. Ding, L. Hou, "Talking-Heads Attention",
# [arXiv:2003.02436](https://arxiv.org/abs/2003.02436).** Two learned h × h maps let the heads exchange
# information: P_l mixes the logits of the h_k query-key heads into h softmax heads, and P_w mixes the h
# weight matrices into h_v value heads,
#
# $$L_h = \sum_k P_l[k, h]\, J_k, \qquad W_h = \operatorname{softmax}(L_h), \qquad U_v = \sum_h P_w[h, v]\, W_h .$$
#
# A mask is applied after P_l, just before the softmax (as the official Mesh TensorFlow code does), so a
# hidden pair gets weight 0 in every head.

# %%
th = init_talking_heads(rng, d_model, h)
_, U = talking_heads_attention(x, x, th, return_weights=True)
p = th.projections
J = project_heads(x, p.w_q, p.b_q, h) @ np.swapaxes(project_heads(x, p.w_k, p.b_k, h), -1, -2) / np.sqrt(d_model // h)
L_mix = np.einsum("kh,knm->hnm", th.P_l, J)                          # step 1: logits mixed across heads
W_mix = refattn.softmax(L_mix)                                       # step 2: one softmax per head
U_mix = np.einsum("hv,hnm->vnm", th.P_w, W_mix)                      # step 3: weights mixed across heads
np.testing.assert_allclose(U_mix, U, rtol=1e-12, atol=1e-14)        # the three steps are the layer's weights
eye = TalkingHeadsParams(p, np.eye(h), np.eye(h))
np.testing.assert_allclose(talking_heads_attention(x, x, eye), refattn.multi_head_attention(x, x, p, num_heads=h),
                           rtol=1e-12, atol=1e-12)                   # identity mixes: multi-head attention

fig = viz.figure((13, 9.6))
rows = fig.subfigures(3, 1)
viz.draw_attention(rows[0], refattn.softmax(J), vmax=1.0, annotate=False,
                   titles=[f"softmax(J_{k}) (no mixing)" for k in range(h)])
viz.draw_attention(rows[1], W_mix, vmax=1.0, annotate=False, titles=[f"W_{i} = softmax(Σ_k P_l[k, {i}] J_k)"
                                                                     for i in range(h)])
viz.draw_attention(rows[2], U_mix, signed=True, annotate=False, titles=[f"U_{v} = Σ_h P_w[h, {v}] W_h"
                                                                        for v in range(h)])
fig

# %% [markdown]
# > After P_w the "weights" U need not be distributions: P_w has signs, so a value head can subtract one
# > softmax head's pattern from another's (the signed colour scale of the last row).

# %% [markdown]
# ## (d) Collaborative heads and the compression they allow
#
# **J.-B. Cordonnier, A. Loukas, M. Jaggi, "Multi-Head Attention: Collaborate Instead of Concatenate",
# [arXiv:2006.16362](https://arxiv.org/abs/2006.16362).** Heads often learn redundant query-key projections.
# Collaborative heads share one W̃_Q and one W̃_K of width D̃_k, and head i re-weighs their D̃_k dimensions
# with its own mixing vector m_i: head i's scores are X W̃_Q diag(m_i) W̃_Kᵀ Xᵀ. With D̃_k = h·d_k and
# one-hot mixing by blocks it *is* multi-head attention. A trained multi-head layer can be re-parameterised
# by decomposing the tensor of its heads' products W_Q^i W_K^iᵀ (a CP decomposition), and the rank that
# reproduces the tensor is the width D̃_k it needs.

# %%
full = collaborative_from_multi_head(mh, h)                           # D̃_k = h·d_k: copied, one-hot mixing
np.testing.assert_allclose(collaborative_attention(x, x, full), refattn.multi_head_attention(x, x, mh, num_heads=h),
                           rtol=1e-12, atol=1e-12)
# A layer whose 4 heads all re-weigh 3 shared directions, each in its own rotated coordinates: head i has
# W_Q^i = B_q diag(m_i) E O_i and W_K^i = B_k E O_i (E = [I_3 0], O_i orthogonal), so that
# W_Q^i W_K^iᵀ = B_q diag(m_i) B_kᵀ: CP rank 3, although each head's projections look unrelated
basis_q, basis_k = rng.standard_normal((2, d_model, 3))
E = np.eye(3, d_model // h)
heads_q, heads_k = [], []
for m_i in rng.standard_normal((h, 3)):
    O_i = np.linalg.qr(rng.standard_normal((d_model // h, d_model // h)))[0]
    heads_q.append(basis_q @ np.diag(m_i) @ E @ O_i)
    heads_k.append(basis_k @ E @ O_i)
redundant = refattn.MultiHeadParams(np.concatenate(heads_q, axis=1), np.concatenate(heads_k, axis=1), mh.w_v, mh.w_o)
T = head_products(redundant, h)
errors = {}
for width in (1, 2, 3, 4):
    errors[width] = cp_decomposition(T, width, rng=0, max_sweeps=2000, tol=1e-14).error
    print(f"D̃_k = {width}: relative error of the heads' products {viz.roundoff_text(errors[width], '.2e')}")
assert errors[3] < 1e-8 < errors[2]                                  # 3 shared dimensions are enough, 2 are not
compressed = collaborative_from_multi_head(redundant, h, 3, rng=0, max_sweeps=2000, tol=1e-14)
np.testing.assert_allclose(collaborative_attention(x, x, compressed, scale=1 / np.sqrt(d_model // h)),
                           refattn.multi_head_attention(x, x, redundant, num_heads=h), rtol=1e-11, atol=1e-12)
print("query/key parameters:", 2 * d_model * h * (d_model // h), "→", 2 * d_model * 3 + h * 3)

# %% [markdown]
# > The last comparison allows 1e-11 rather than 1e-12: the decomposition is iterative (ALS), and its
# > residual of about 1e-14 in the products reaches the scores multiplied by the inputs' norms (about 10² on
# > these 16-wide Gaussian tokens). With random heads no width below h·d_k is exact (their products have full
# > rank), and the compression is an approximation whose error the paper trades against the parameters saved.

# %% [markdown]
# ## (e) Multi-query and grouped-query attention: the key/value cache
#
# **N. Shazeer, "Fast Transformer Decoding: One Write-Head is All You Need",
# [arXiv:1911.02150](https://arxiv.org/abs/1911.02150); J. Ainslie et al., "GQA: Training Generalized
# Multi-Query Transformer Models from Multi-Head Checkpoints",
# [arXiv:2305.13245](https://arxiv.org/abs/2305.13245).** A decoder keeps every past key and value of every
# head of every layer. Sharing g < h key/value heads among the h query heads shrinks that cache h/g times:
# g = 1 is multi-query attention, 1 < g < h grouped-query, g = h multi-head. Query head i reads key/value
# head i // (h/g), the convention refattn's oracle uses. GQA starts from a multi-head checkpoint by
# mean-pooling each group's key and value heads.

# %%
gqa = convert_multi_head(mh, num_heads=h, num_kv_heads=2)             # heads 0, 1 share one key/value head; 2, 3 another
_, A_g = multi_query_attention(x, x, gqa, num_heads=h, causal=True, return_weights=True)
np.testing.assert_allclose(multi_query_attention(x, x, mh, num_heads=h, causal=True), out_mh, rtol=1e-12, atol=1e-12)
print(kv_cache_summary(32, 8, 128, "float16", num_tokens=4096, num_layers=32))   # a Llama-2-70B-like layout

lengths = 2 ** np.arange(8, 18)
with styled():
    fig = viz.figure((7.5, 3.6))
    ax = fig.subplots()
    for g, label in ((32, "multi-head, g = 32"), (8, "grouped-query, g = 8"), (1, "multi-query, g = 1")):
        ax.loglog(lengths, [kv_cache_bytes(g, 128, "float16", num_tokens=int(t), num_layers=32) / 2**30
                            for t in lengths], marker="o", markersize=3, label=label)
    ax.set(xlabel="context length n (tokens)", ylabel="cache (GiB)",
           title="key/value cache, 32 layers of 32 query heads, d_head = 128, float16")
    ax.legend()
fig

# %% [markdown]
# ## (f) Head size and the low-rank bottleneck
#
# **S. Bhojanapalli, C. Yun, A. S. Rawat, S. J. Reddi, S. Kumar, "Low-Rank Bottleneck in Multi-head Attention
# Models", ICML 2020, [arXiv:2002.07028](https://arxiv.org/abs/2002.07028).** A head's scores
# X W_Q (X W_K)ᵀ have rank at most d_head, so with d_head = d_model / h, adding heads at a fixed d_model
# shrinks what each head can express. Choosing the head size apart from h (d_head ≥ n in the paper's
# theorem) lets a head represent any attention matrix.

# %%
xs = rng.standard_normal((n, 32))                                    # n = 16 tokens of width 32 (rank 16)
ranks = {}
for d_p in (1, 2, 4, 8, 16):
    params = refattn.init_multi_head(rng, 32, 1, d_k=d_p)
    ranks[d_p] = int(np.linalg.matrix_rank(head_scores(xs, xs, params, num_heads=1)[0]))
print("rank of one head's scores by head size:", ranks)
assert ranks == {d_p: min(d_p, n) for d_p in ranks}
target = refattn.softmax(4.0 * np.eye(n) + rng.standard_normal((n, n)))   # an arbitrary attention matrix
w_q, w_k = represent_attention(xs, target, n)                        # d_head = n: the theorem's head
reached = refattn.softmax(xs @ w_q @ (xs @ w_k).T / np.sqrt(n))
np.testing.assert_allclose(reached, target, rtol=1e-9, atol=1e-12)   # exact up to the pseudoinverse's rounding

# %% [markdown]
# ## (g) Losses that shape the heads
#
# **J. Li, Z. Tu, B. Yang, M. R. Lyu, T. Zhang, "Multi-Head Attention with Disagreement Regularization", EMNLP
# 2018, [arXiv:1810.10183](https://arxiv.org/abs/1810.10183).** Heads that learn the same thing waste
# capacity. Three terms, each a mean over all pairs of heads (i = j included), reward disagreement in the
# value subspaces (the cosine of V^i and V^j), in the attended positions (the overlap Σ|A^i ⊙ A^j|) and in
# the outputs (the cosine of O^i and O^j); the paper maximises J = L + λD. A cosine term lies in [−1, 0]:
# −1 for identical heads, −1/H for pairwise orthogonal ones.
#
# **A. Deshpande, K. Narasimhan, "Guiding Attention for Self-Supervised Learning with Transformers",
# Findings of EMNLP 2020, [arXiv:2010.02399](https://arxiv.org/abs/2010.02399).** Instead of pushing the
# heads apart, push chosen heads towards predefined patterns (the next token, the previous token, the first
# token, the delimiters) with λ Σ_h ‖A_h − P_h‖²_F.

# %%
H, T_len, width = 4, 8, 6
one = rng.standard_normal((1, T_len, width))
identical = np.repeat(one, H, axis=0)                                # four copies of one head
random_heads = rng.standard_normal((H, T_len, width))
basis = np.linalg.qr(rng.standard_normal((width, width)))[0][:, :H]  # four orthonormal directions
orthogonal = np.stack([np.outer(np.abs(rng.standard_normal(T_len)) + 0.1, basis[:, i]) for i in range(H)])
terms = {name: float(subspace_disagreement(heads))
         for name, heads in (("identical", identical), ("random", random_heads), ("orthogonal", orthogonal))}
print({name: round(value, 4) for name, value in terms.items()})
np.testing.assert_allclose(terms["identical"], -1.0, rtol=0, atol=1e-15)   # the extreme: every cosine is 1
np.testing.assert_allclose(terms["orthogonal"], -1 / H, rtol=0, atol=1e-15)  # only the diagonal cosines remain
same_map = np.repeat(guide_pattern("previous", T_len)[None], H, axis=0)    # identical one-hot heads
np.testing.assert_allclose(position_disagreement(same_map), -T_len, rtol=0, atol=1e-12)   # the position term's extreme

patterns, guided = guide_patterns(["next", "previous", "first", None], n)   # guide three of the four heads
assert pattern_loss(patterns, patterns, guided=guided) == 0.0        # 0 when A equals the pattern
scores = head_scores(x, x, mh, num_heads=h)
steps = [refattn.softmax(scores)]
for _ in range(100):                                                 # plain gradient steps on the scores
    scores = scores - 5.0 * pattern_loss_score_grad(scores, patterns, guided=guided)
    steps.append(refattn.softmax(scores))
losses = [float(pattern_loss(A_, patterns, guided=guided)) for A_ in steps]
assert losses[-1] < 1e-3 * losses[0]
print(f"guidance loss {losses[0]:.3f} → {losses[-1]:.4f} after {len(steps) - 1} steps on the scores")

fig = viz.figure((13, 6.4))
rows = fig.subfigures(2, 1)
viz.draw_attention(rows[0], np.stack([guide_pattern(p, n) for p in ("next", "previous", "first")]
                                     + [steps[0][3]]), vmax=1.0, annotate=False,
                   titles=["P: next token", "P: previous token", "P: first token", "head 3 (not guided)"])
viz.draw_attention(rows[1], steps[-1], vmax=1.0, annotate=False,
                   titles=[f"head {i} after {len(steps) - 1} steps" for i in range(h)])
fig

# %% [markdown]
# ## (h) Routing-by-agreement
#
# **J. Li, B. Yang, Z.-Y. Dou, X. Wang, M. R. Lyu, Z. Tu, "Information Aggregation for Multi-Head Attention
# with Routing-by-Agreement", NAACL 2019, [arXiv:1904.03100](https://arxiv.org/abs/1904.03100).** Instead of
# concatenating the heads, treat each head's output as an input capsule, let it cast a vote û_{j|i} = head_i
# W_ij for every output capsule j, and decide by iterated agreement how much of each head goes where:
#
# - **dynamic routing** (Sabour et al. 2017): coupling c_i· = softmax(b_i·), s_j = Σ_i c_ij û_{j|i},
#   v_j = squash(s_j), b_ij += û_{j|i} · v_j;
# - **EM routing** (Hinton et al. 2018): each output capsule is a Gaussian fitted to the votes it receives, and
#   each vote is reassigned to the capsules under which it is likely.
#
# > refattn's EM routing follows Hinton et al.'s Procedure 1 with every head's activation 1, as the module
# > says; the adaptation in Li et al.'s paper could not be checked here.
#
# A toy position: three heads agree on what capsule 0 should be, a fourth dissents, and the votes for
# capsule 1 are scattered.

# %%
toy = np.random.default_rng(3)
w0, w1 = np.array([1.0, 0.5, -0.5]), np.array([-0.3, 0.8, 0.2])
votes = np.empty((4, 2, 3))                                          # (heads, output capsules, width)
votes[:3, 0] = w0 + 0.1 * toy.standard_normal((3, 3))               # heads 0-2 agree on capsule 0
votes[3, 0] = -w0                                                    # head 3 dissents
votes[:, 1] = w1 + 0.6 * toy.standard_normal((4, 3))                # capsule 1: scattered votes
T = 8
_, c_dyn = dynamic_routing(votes, iterations=T)
_, c_em = em_routing(votes, np.zeros(2), np.zeros(2), iterations=T)
for c in (c_dyn, c_em):
    np.testing.assert_allclose(c.sum(axis=-1), 1.0, rtol=0, atol=1e-15)   # each head's coupling is a distribution
    np.testing.assert_array_equal(c[0], 0.5)                          # the first iteration is uniform
assert c_dyn[-1, 3, 0] < 0.01                                        # the dissenting head leaves capsule 0
assert np.all(c_em[-1, :3, 0] > 0.999) and c_em[-1, 3, 0] < 1e-6     # EM: the agreeing heads form capsule 0
change_dyn = np.abs(np.diff(c_dyn, axis=0)).max(axis=(1, 2))
change_em = np.abs(np.diff(c_em, axis=0)).max(axis=(1, 2))
print("largest change of a coupling per iteration, dynamic:", change_dyn.round(3))
print("                                             EM:     ",
      np.array([viz.roundoff_text(x, ".0e") for x in change_em]))

fig = viz.figure((8.5, 5.2))
rows = fig.subfigures(2, 1)
viz.draw_attention(rows[0], c_dyn[[0, 1, 3, 7]], vmax=1.0, xlabel="output capsule j", ylabel="head i",
                   titles=[f"dynamic, iteration {t + 1}" for t in (0, 1, 3, 7)])
viz.draw_attention(rows[1], c_em[[0, 1, 3, 7]], vmax=1.0, xlabel="output capsule j", ylabel="head i",
                   titles=[f"EM, iteration {t + 1}" for t in (0, 1, 3, 7)])
fig

# %% [markdown]
# > EM routing settles within four iterations here: the three agreeing votes make a tight Gaussian that
# > claims them, and the dissenting vote is far more likely under the broad capsule 1. Dynamic routing moves
# > more slowly (its logits grow by one dot product per iteration) and, on random votes, need not settle
# > monotonically at all, which is why the iteration count is an option (`iterations`, the paper's default 3)
# > and not a convergence test.

# %% [markdown]
# ## (i) Exercises
#
# 1. **The cache a span needs.** For spans z = (2, 5, 9, 30) with R = 32 and S = 1024, how many past positions
#    must a decoder keep? Check with `span_cache_length`, then halve R.
#    <details><summary>Hint</summary>The mask is 0 beyond z + R, so the longest head decides: ⌈30 + 32⌉ = 62
#    positions, and 46 with R = 16. The official code rounds the cache up to a multiple of 64.</details>
#
# 2. **Grouped-query from a checkpoint.** Convert `mh` to g = 1 and g = 2 with `convert_multi_head` (mean and
#    first-head pooling) and measure each output's distance to the multi-head output. Which is closer?
#    <details><summary>Hint</summary>On this untrained layer g = 2 is closer than g = 1 (fewer heads are pooled
#    together), and mean pooling is closer than the first head. The GQA paper's Figure 4 finds mean pooling
#    best for trained checkpoints after uptraining.</details>
#
# 3. **Talking heads that do not talk.** Make P_l and P_w permutation matrices. Is the layer still equal to
#    multi-head attention?
#    <details><summary>Hint</summary>Only up to reordering: the softmax heads are a permutation of the
#    query-key heads and the value heads read them permuted back; with P_w = P_lᵀ the output equals
#    `multi_head_attention`'s.</details>
