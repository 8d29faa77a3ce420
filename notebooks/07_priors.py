# %% [markdown]
# # Attention with prior
#
# **T. Lin, Y. Wang, X. Liu, X. Qiu, "A Survey of Transformers", AI Open 2022,
# [arXiv:2106.04554](https://arxiv.org/abs/2106.04554) (v2), §4.5 "Attention with Prior".** Each model
# paper is cited where it appears.
#
# Softmax attention computes its distribution from the inputs alone: A = softmax(S), S = QKᵀ/√d. The
# survey's §4.5 collects mechanisms that bring in a *prior* distribution from elsewhere and combine the
# two, in general by a weighted sum of scores before the softmax,
#
# $$\hat A = w_1 \cdot A_{\text{generated}} + w_2 \cdot G, \qquad \text{weights} = \operatorname{softmax}(\hat A).$$
#
# - **§4.5.1, a prior that models locality:** a Gaussian over positions, with its centre and width
#   predicted from the query (Yang et al.) or learned once per layer (the Gaussian Transformer).
# - **§4.5.2, a prior from a lower layer:** the scores or weights of the layer below, through a map g:
#   RealFormer, Predictive Attention, Lazyformer.
# - **§4.5.3, a prior as a task adapter:** CAMTL's block-diagonal prior, a function of the task.
# - **§4.5.4, the prior alone:** no query-key interaction at all. The average attention network, hard-coded
#   Gaussian attention, the Synthesizer.
#
# > **One convention for the whole family.** A prior is an additive bias on the scores, so every
# > mechanism here is `scaled_dot_product_attention(q, k, v, mask=G)` with a *float* mask G, and a causal
# > mask is combined with it by selection: a key that query i may not see gets weight 0 whatever its
# > prior. Where a paper's prior replaces the scores entirely (§4.5.4), the weights are still a softmax
# > (or a normalised density) over the keys each query may see.
#
# The plain text paraphrases the survey and the cited papers. Commentary is set apart as block
# quotes. Every claim that can be checked is an `assert`.
#
# **Contents.** (a) a Gaussian prior, step by step · (b) σ from narrow to wide, and the σ → ∞ limit · (c)
# the Gaussian Transformer · (d) CAMTL's task prior · (e) the general rule for priors from lower layers ·
# (f) its three instances stepped layer by layer · (g) an encoder stack with priors from below · (h) the
# average attention network · (i) hard-coded Gaussian attention · (j) the Synthesizer beside dot-product
# attention · (k) exercises

# %%
import matplotlib as mpl
import numpy as np

import refattn
from refattn import registry, viz
from refattn.prior import (
    HARDCODED_OFFSETS,
    HARDCODED_SIGMA,
    CamtlParams,
    GaussianTransformerParams,
    LayerRule,
    RandomSynthesizer,
    attention_convolution,
    attention_stack,
    average_attention,
    average_attention_decode,
    average_attention_layer,
    average_attention_step,
    average_weights,
    camtl_attention,
    camtl_prior,
    dense_logits,
    gaussian_prior_attention,
    gaussian_prior_bias,
    gaussian_transformer_attention,
    gaussian_transformer_prior,
    hardcoded_gaussian_weights,
    init_attention_conv,
    init_average_attention,
    init_camtl,
    init_dense_synthesizer,
    init_gaussian_prior,
    init_random_synthesizer,
    init_stack_projections,
    lazy_rules,
    predict_gaussian_prior,
    predictive_rules,
    prior_encoder,
    prior_from_below,
    random_logits,
    realformer_rules,
    synthesizer_dense_attention,
    synthesizer_random_attention,
)

np.set_printoptions(precision=3, suppress=True, linewidth=110)
rng = np.random.default_rng(20210615)   # arXiv:2106.04554v2 date; every draw below comes from rng or a stated seed


def styled():
    # hand-made plots (curves) use the same style file as refattn.viz
    return mpl.style.context(viz.STYLE_PATH)


def softmax_attention(q, k, v, causal=False):
    """(out, A): exact softmax attention and its weights."""
    return refattn.scaled_dot_product_attention(q, k, v, causal=causal, return_weights=True)


def scores(q, k):
    """S = QKᵀ/√d, the scores every mechanism here starts from (or replaces)."""
    return q @ k.T / np.sqrt(q.shape[-1])


n, d = 12, 8
q, k, v = rng.standard_normal((3, n, d))
_, A = softmax_attention(q, k, v)

# %% [markdown]
# ## (a) A Gaussian prior, step by step
#
# **B. Yang, Z. Tu, D. F. Wong, F. Meng, L. S. Chao, T. Zhang, "Modeling Localness for Self-Attention
# Networks", EMNLP 2018, [arXiv:1810.10182](https://arxiv.org/abs/1810.10182).** Each query predicts where
# its local context is centred and how wide it is, and a Gaussian around that centre is added to its scores:
#
# $$G_{ij} = -\frac{(j - P_i)^2}{2\sigma_i^2}, \quad \sigma_i = \frac{D_i}{2}, \quad
# P_i = I \cdot \operatorname{sigmoid}(v_p^\top \tanh(W_p q_i)), \quad
# D_i = I \cdot \operatorname{sigmoid}(v_d^\top \tanh(W_p q_i)),$$
#
# with I the sequence length, so that P_i and D_i lie in (0, I). The window can also be read from the mean of
# the keys (one window per layer, `window="layer"`) or fixed (`window=D`). Positions count from 1, as the
# paper's do: the key at index j (from 0) sits at position j + 1.

# %%
params = init_gaussian_prior(rng, d)
P, D = predict_gaussian_prior(q, k, params)
G = gaussian_prior_bias(P, D, n)
out, W = gaussian_prior_attention(q, k, v, params=params, return_weights=True)
np.testing.assert_allclose(W, refattn.softmax(scores(q, k) + G), rtol=1e-13, atol=1e-15)   # softmax(S + G), nothing else
peak = np.argmax(G, axis=-1) + 1                                     # the position where G is 0 …
assert np.all(np.abs(peak - P) <= 0.5)                               # … is the one nearest the centre P_i
print("P:", P.round(2))
print("D:", D.round(2))

fig = viz.figure((13, 3.5))
parts = fig.subfigures(1, 4)
viz.draw_attention(parts[0], G, signed=True, vmax=6.0, titles="prior G (colours stop at −6)", annotate=False)
viz.draw_attention(parts[1], scores(q, k), signed=True, titles="scores S = QKᵀ/√d", annotate=False)
viz.draw_attention(parts[2], A, titles="softmax(S)", annotate=False, vmax=1.0, colorbar=False)
viz.draw_attention(parts[3], W, titles="softmax(S + G)", annotate=False, vmax=1.0)
fig

# %% [markdown]
# > The prior is 0 at the predicted centre and falls off quadratically; the query's own scores decide
# > among the keys inside the window, the prior suppresses those outside. Untrained predictors put the
# > centres near the middle (sigmoid of a small number is near ½): a trained model learns to put P_i near i.

# %% [markdown]
# ## (b) σ from narrow to wide, and the σ → ∞ limit
#
# With the window fixed, σ = D/2 is one number for every query, and the prior's strength is its only knob.
# As σ shrinks, each row's weight is pulled to the key at the centre; as σ grows, G flattens to 0 and the
# combined weights return to softmax(S). At σ = ∞ (`window=np.inf`) G is exactly 0 (−0.0) and the
# mechanism *is* softmax attention.

# %%
windows = [0.5, 2.0, 6.0, 24.0, np.inf]
sweep = np.stack([gaussian_prior_attention(q, k, v, params=params, window=D_, return_weights=True)[1]
                  for D_ in windows])
gap = [float(np.abs(W_ - A).max()) for W_ in sweep]
assert all(a >= b for a, b in zip(gap, gap[1:], strict=False))                     # monotonically back to softmax as σ grows
out_inf = gaussian_prior_attention(q, k, v, params=params, window=np.inf)
np.testing.assert_array_equal(out_inf, softmax_attention(q, k, v)[0])   # σ → ∞: softmax attention, bit for bit
for D_, g in zip(windows, gap, strict=True):
    print(f"D = {D_:>5}  σ = {D_ / 2:>5}   max |weights − softmax(S)| = {g:.3g}")

fig = viz.figure((14, 3.4))
viz.draw_attention(fig, sweep, vmax=1.0, annotate=False, titles=[f"D = {D_}" for D_ in windows])
fig

# %% [markdown]
# > At D = 0.5 (σ = 0.25) each row is essentially one-hot at the key nearest P_i: a hard position lookup.
# > Causal: the same prior is combined with the causal mask by selection. The paper's length I becomes the
# > number of keys query i may see, so that row i depends on nothing later (and decoding with a key/value
# > cache reproduces it):

# %%
_, Wc = gaussian_prior_attention(q, k, v, params=params, causal=True, return_weights=True)
q2, k2, v2 = q.copy(), k.copy(), v.copy()
k2[8:], v2[8:] = 1e3, np.nan                                          # change every key and value after position 7
_, Wc2 = gaussian_prior_attention(q2, k2, v2, params=params, causal=True, return_weights=True)
np.testing.assert_array_equal(Wc[:8], Wc2[:8])                       # rows 0 … 7 never see them
assert np.all(np.triu(Wc, 1) == 0)

# %% [markdown]
# ## (c) The Gaussian Transformer
#
# **M. Guo, Y. Zhang, T. Liu, "Gaussian Transformer: A Lightweight Approach for Natural Language Inference",
# AAAI 2019.** One learned Gaussian per layer (or head) instead of one per query: the prior depends on the
# distance i − j alone,
#
# $$G_{ij} = -\,|\,w (i - j)^2 + b\,|, \qquad w \ge 0,\ b \le 0 .$$
#
# With b < 0 the prior is largest (0) not at the token itself but at distance √(−b/w) on both sides, and
# the token itself gets b: a neighbourhood that prefers the neighbours.

# %%
settings = [(0.5, 0.0), (0.1, -2.5), (0.0, 0.0)]
fig = viz.figure((13, 6.4))
rows = fig.subfigures(2, 1)
priors, weights = [], []
for w_, b_ in settings:
    gp = GaussianTransformerParams(w_, b_)
    priors.append(gaussian_transformer_prior(gp, n))
    weights.append(gaussian_transformer_attention(q, k, v, params=gp, return_weights=True)[1])
assert np.all(priors[1][np.arange(n), np.arange(n)] == -2.5)       # G_ii = b
assert np.argmax(priors[1][6]) in (6 - 5, 6 + 5)                     # largest at distance √(2.5/0.1) = 5
np.testing.assert_array_equal(weights[2], A)                          # w = b = 0: softmax attention
viz.draw_attention(rows[0], np.stack(priors), signed=True, vmax=6.0, annotate=False,
                   titles=[f"G, w = {w_}, b = {b_} (colours stop at −6)" for w_, b_ in settings])
viz.draw_attention(rows[1], np.stack(weights), vmax=1.0, annotate=False,
                   titles=[f"softmax(S + G), w = {w_}, b = {b_}" for w_, b_ in settings])
fig

# %% [markdown]
# ## (d) CAMTL: a prior per task
#
# **J. Pilault, A. Elhattami, C. Pal, "Conditionally Adaptive Multi-Task Learning: Improving Transfer
# Learning in NLP Using Fewer Parameters & Less Data", ICLR 2021,
# [arXiv:2009.09139](https://arxiv.org/abs/2009.09139).** A pretrained model shared by several tasks gets
# one trainable prior whose values depend on a task embedding z: a block-diagonal matrix
#
# $$M(z) = \bigoplus_{j=1}^{N} \big(A_j \odot (1 + \gamma(z)) + \beta(z)\big),$$
#
# with A_j trainable blocks and γ, β Feature-wise Linear Modulation (FiLM) of z. The official code fixes a
# maximum length L and N = d_model / L blocks; shorter inputs use the prior's top-left corner. Off the
# blocks the prior is exactly 0: each block is a phrase-sized window in which the task can reshape the
# attention.

# %%
L = n
c, d_z = 4, 3 * L                                                    # 3 blocks of width 4 (d_model = 3L)
cp = init_camtl(rng, max_len=L, d_model=d_z, num_tasks=2)          # the official initialisation: A = 0, FiLM ~ 0.02
print("largest |M(z)| at the official initialisation:", f"{np.abs(camtl_prior(cp, task_id=1)).max():.1e}")
assert np.abs(camtl_prior(cp, task_id=1)).max() < 1e-2                # the pretrained attention nearly as is
unit = 1 / np.sqrt(d_z)                                              # keeps z, γ(z), β(z) of order 1
cp = CamtlParams(rng.standard_normal((2, d_z)), unit * rng.standard_normal((d_z, d_z)), np.zeros(d_z),
                 unit * rng.standard_normal((d_z, 2 * c)), np.zeros(2 * c),
                 1.5 * rng.standard_normal((L, c)))                  # a prior of a few units, as after training
M = np.stack([camtl_prior(cp, task_id=t) for t in (0, 1)])
blocks = np.kron(np.eye(3, dtype=bool), np.ones((4, 4), dtype=bool))
assert np.all(M[:, ~blocks] == 0)                                    # block-diagonal, exactly
W_tasks = np.stack([camtl_attention(q, k, v, params=cp, task_id=t, return_weights=True)[1] for t in (0, 1)])
np.testing.assert_allclose(W_tasks[1], refattn.softmax(scores(q, k) + M[1]), rtol=1e-13, atol=1e-15)

fig = viz.figure((13, 3.4))
parts = fig.subfigures(1, 2, width_ratios=[1, 1.5])
viz.draw_attention(parts[0], M, signed=True, annotate=False, titles=["M(z), task 0", "M(z), task 1"])
viz.draw_attention(parts[1], np.concatenate([A[None], W_tasks]), vmax=1.0, annotate=False,
                   titles=["softmax(S)", "task 0", "task 1"])
fig

# %% [markdown]
# > With the official initialisation (A = 0, FiLM weights of scale 0.02, biases 0) only β(z) is left, and it
# > is tiny: the pretrained attention starts nearly untouched, and training moves the prior. The figure draws
# > a prior of a few units, as a trained adapter might have: the two tasks share the blocks' A and differ
# > through γ(z) and β(z).

# %% [markdown]
# ## (e) The general rule for priors from lower layers
#
# Attention maps of adjacent layers are often alike (§4.5.2), so a layer can start from the map of the layer
# below. The survey writes the family as one rule,
#
# $$\hat A^{(l)} = w_1 \cdot A^{(l)} + w_2 \cdot g\big(\hat A^{(l-1)}\big),$$
#
# with A^(l) = S^(l) the layer's own scores, Â^(l−1) the combined map the layer below passed up, and g a
# map that turns it into a prior. refattn has the rule as one function, `prior_from_below`, and every
# instance below is that function with its own (w1, w2, g):
#
# | mechanism | w1 | w2 | g | what passes up |
# |---|---|---|---|---|
# | RealFormer (He et al. 2021) | 1 | 1 | identity | the raw pre-softmax scores, residual included |
# | Predictive Attention (Wang et al. 2021) | α | 1 − α | a 3 × 3 convolution (heads as channels), then ReLU | the combined logits |
# | Lazyformer (Ying et al. 2021) | 1, then 0 | 0, then 1 | identity | the block's first map, reused |

# %%
S1, S2 = rng.standard_normal((2, n, n))
combined = prior_from_below(S2, S1, w1=0.3, w2=0.7, g=np.tanh)
np.testing.assert_array_equal(combined, 0.3 * S2 + 0.7 * np.tanh(S1))   # the rule, term by term
np.testing.assert_array_equal(prior_from_below(S1, None, w1=0.3, w2=0.7), S1)   # the bottom layer: its own scores

# %% [markdown]
# ## (f) Three instances, stepped layer by layer
#
# Each registry entry runs an attention-only stack on one q, k, v: layer 1 reads q and k, layers 2 … L read
# q W_q^(l) and k W_k^(l) (drawn projections), only the maps pass up, and the output is the top layer's
# weights times v. The three share the stack and differ only in their rules, so the same projections give
# three different tops.

# %%
layers = 4
proj = init_stack_projections(rng, layers, d)
convs = [init_attention_conv(rng) for _ in range(layers - 1)]
traces = {
    "RealFormer": attention_stack(q, k, v, rules=realformer_rules(layers), projections=proj),
    "Lazyformer (blocks of 2)": attention_stack(q, k, v, rules=lazy_rules(layers, 2), projections=proj),
    "Predictive (α = ½)": attention_stack(q, k, v, rules=predictive_rules(0.5, convs), projections=proj),
    "no prior (rule off)": attention_stack(q, k, v, rules=lazy_rules(layers, 1), projections=proj),
}
real, lazy, pred, off = traces.values()
for l in range(1, layers):                                           # the rule reproduces each instance
    np.testing.assert_array_equal(real.combined[l], real.scores[l] + real.combined[l - 1])
    np.testing.assert_array_equal(off.combined[l], off.scores[l])   # sharing off: every layer recomputes
    A_conv = attention_convolution(pred.combined[l - 1], convs[l - 1])
    np.testing.assert_allclose(pred.combined[l], 0.5 * pred.scores[l] + 0.5 * A_conv, rtol=1e-14, atol=1e-14)
np.testing.assert_array_equal(lazy.weights[1], lazy.weights[0])      # layer 2 reuses layer 1's map …
np.testing.assert_array_equal(lazy.weights[2], off.weights[2])       # … layer 3 computes its own, as without sharing
for t in traces.values():                                            # one layer (the bottom) is softmax attention
    np.testing.assert_allclose(t.weights[0], A, rtol=1e-13, atol=1e-15)
out_real = registry.get("realformer").apply(q, k, v, layers=layers, projections=proj).output
np.testing.assert_array_equal(out_real, real.output)                 # the registry's entry is this stack

fig = viz.figure((13, 12))
viz.draw_attention(fig, np.stack([np.stack(t.weights) for t in traces.values()]), vmax=1.0, annotate=False,
                   titles=[[f"{name}: layer {l + 1}" for l in range(layers)] for name in traces])
fig

# %% [markdown]
# > RealFormer's maps drift slowly: each layer adds its scores to everything below, so by layer 4 the
# > combined map is a sum of four score matrices and the weights sharpen (the sum of independent scores has a
# > growing variance). Lazyformer's layer 2 and 4 are copies of layers 1 and 3. Predictive Attention's
# > untrained convolution and ReLU pass up only a faint, smoothed prior, and its α = ½ halves the layer's own
# > scores, so its weights flatten: the convolution must be trained to be useful (the figure of the
# > registry's `predictive_attention` uses a hand-set kernel to show what it can do).

# %% [markdown]
# ## (g) An encoder stack with priors from below
#
# The same rules inside full encoder layers: each layer's multi-head attention adds the prior from the layer
# below, head by head, and keeps its own values, output projection, feed-forward network and norms.
# `prior_encoder` returns every layer's input, scores, prior, combined map and weights. With the prior off
# (w2 = 0 in every layer) it is a stack of the vanilla `encoder_layer`s.

# %%
d_model, heads = 16, 2
enc = [refattn.init_encoder_layer(rng, d_model, heads, 32) for _ in range(3)]
x = rng.standard_normal((n, d_model))
plain = x
for p in enc:
    plain = refattn.encoder_layer(plain, p, num_heads=heads)
rule_off = prior_encoder(x, enc, num_heads=heads, rules=[LayerRule(1.0, 0.0)] * 2)
np.testing.assert_allclose(rule_off.output, plain, rtol=1e-12, atol=1e-12)
residual = prior_encoder(x, enc, num_heads=heads, rules=realformer_rules(3))
for l in (1, 2):                                                     # RealFormer: the raw scores pass up, per head
    np.testing.assert_allclose(residual.combined[l], residual.scores[l] + residual.combined[l - 1],
                               rtol=1e-15, atol=0)

fig = viz.figure((13, 6.6))
viz.draw_attention(fig, np.stack([np.stack([w[h] for w in residual.weights]) for h in range(heads)]), vmax=1.0,
                   annotate=False, titles=[[f"head {h}, layer {l + 1}" for l in range(3)] for h in range(heads)])
fig

# %% [markdown]
# ## (h) The average attention network
#
# **B. Zhang, D. Xiong, J. Su, "Accelerating Neural Transformer via an Average Attention Network", ACL 2018,
# [arXiv:1805.00631](https://arxiv.org/abs/1805.00631).** The decoder's self-attention is replaced by the
# prior alone: a discrete uniform distribution over the past. Its core is the cumulative average
#
# $$g_j = \frac{1}{j} \sum_{k \le j} y_k ,$$
#
# which is causal softmax attention whose scores are all equal: every query weighs each key it may see by
# 1/(i + 1). A feed-forward layer and two gates then restore expressiveness,
# i_j, f_j = σ([y_j; FFN(g_j)] W + b), h_j = LayerNorm(y_j + i_j ⊙ y_j + f_j ⊙ FFN(g_j)).

# %%
W_avg, _ = average_weights(n, n, causal=True)
out_avg = average_attention(q, k, v, causal=True)
for causal, m_ in ((True, n), ("bottom-right", n + 5), (False, n + 5)):
    k_, v_ = rng.standard_normal((2, m_, d))
    exact = refattn.scaled_dot_product_attention(np.zeros((n, d)), k_, v_, causal=causal)   # q = 0: equal scores
    np.testing.assert_allclose(average_attention(q, k_, v_, causal=causal), exact, rtol=1e-12, atol=1e-14)
np.testing.assert_allclose(average_attention(q, k, v, causal=True, method="equation"), out_avg, rtol=1e-12, atol=1e-14)

fig = viz.figure((9, 3.4))
viz.draw_attention(fig, np.stack([W_avg, softmax_attention(q, k, v, causal=True)[1]]), vmax=1.0, annotate=False,
                   titles=["average attention: 1/(i + 1) on j ≤ i", "causal softmax(S)"])
fig

# %% [markdown]
# The paper's point is decoding. The parallel form (the masked matrix above, or a cumulative sum) trains
# like a Transformer; at inference the layer is an RNN whose state is a running sum and a count, so each
# new token costs O(d) instead of attention over the whole past. Both forms of the whole sub-layer agree:

# %%
aan = init_average_attention(rng, d_model=d, d_ff=4 * d)
y = rng.standard_normal((n, d))
parallel, gate_i, gate_f = average_attention_layer(y, aan, return_gates=True)
state, steps = None, []
for t in range(n):                                                   # token by token, as a decoder runs
    h_t, state = average_attention_step(state, y[t], aan)
    steps.append(h_t)
np.testing.assert_allclose(np.stack(steps), parallel, rtol=1e-12, atol=1e-12)
np.testing.assert_allclose(average_attention_decode(y, aan), parallel, rtol=1e-12, atol=1e-12)
print("state after", state.count, "tokens: the running sum, of shape", state.total.shape)
print("mean input gate", gate_i.mean().round(3), " mean forget gate", gate_f.mean().round(3))

# %% [markdown]
# ## (i) Hard-coded Gaussian attention
#
# **W. You, S. Sun, M. Iyyer, "Hard-Coded Gaussian Attention for Neural Machine Translation", ACL 2020,
# [arXiv:2005.00742](https://arxiv.org/abs/2005.00742).** No queries, no keys, nothing learned: each head
# attends by a fixed Gaussian centred on the query's own position plus a head offset (the paper's encoder
# heads look one token left and one token right, its decoder heads one token left and at the token itself),
# with σ = 1. The weights are normalised over the keys each query may see: a softmax of −(j − c)²/(2σ²).
# (`normalize="density"` keeps the official code's raw density instead, which is not normalised.)

# %%
enc, _ = hardcoded_gaussian_weights(n, offsets=HARDCODED_OFFSETS["encoder"], sigma=HARDCODED_SIGMA)
dec, _ = hardcoded_gaussian_weights(n, offsets=HARDCODED_OFFSETS["decoder"], sigma=HARDCODED_SIGMA, causal=True)
print("encoder offsets", HARDCODED_OFFSETS["encoder"], " decoder offsets", HARDCODED_OFFSETS["decoder"],
      " σ =", HARDCODED_SIGMA)
wide, _ = hardcoded_gaussian_weights(n, offsets=(0,), sigma=np.inf, causal=True)
np.testing.assert_allclose(wide[0], W_avg, rtol=1e-15, atol=0)   # σ → ∞: uniform over what each query sees = AAN

fig = viz.figure((13, 3.4))
viz.draw_attention(fig, np.concatenate([enc, dec]), vmax=1.0, annotate=False,
                   titles=[f"encoder head, offset {o:+d}" for o in HARDCODED_OFFSETS["encoder"]]
                   + [f"decoder head, offset {o:+d}" for o in HARDCODED_OFFSETS["decoder"]])
fig

# %% [markdown]
# > Hard-coded attention with σ → ∞ is the average attention network's core, exactly: both are the prior
# > alone, one a narrow Gaussian and the other the uniform distribution. You et al. find that only the
# > cross-attention needs to be learned for translation quality to hold up.

# %% [markdown]
# ## (j) The Synthesizer beside dot-product attention
#
# **Y. Tay, D. Bahri, D. Metzler, D.-C. Juan, Z. Zhao, C. Zheng, "Synthesizer: Rethinking Self-Attention
# for Transformer Models", ICML 2021, [arXiv:2005.00743](https://arxiv.org/abs/2005.00743).** The
# Synthesizer asks whether the token-token interaction is needed at all. Its logits come from each token
# alone (Dense: B_i = W₂ ReLU(W₁ x_i + b₁) + b₂, one row of ℓ logits per token) or from nothing (Random: a
# learned ℓ × ℓ matrix R), and Y = softmax(B) G(X). Factorised forms cut the parameters (Dense: two short
# projections whose outer product is the row; Random: R = R₁R₂ᵀ of rank k), and mixtures add the
# dot-product scores back with weights α.

# %%
dense = init_dense_synthesizer(rng, d, n)
rand = init_random_synthesizer(rng, n)
rand_visible = RandomSynthesizer(rng.standard_normal((n, n)))   # an R of unit scale, as after training
_, W_dense = synthesizer_dense_attention(q, k, v, params=dense, return_weights=True)
_, W_rand = synthesizer_random_attention(q, k, v, params=rand_visible, return_weights=True)
_, W_mix = synthesizer_random_attention(q, k, v, params=rand_visible, mix="dot", return_weights=True)
np.testing.assert_allclose(W_dense, refattn.softmax(dense_logits(q, dense)), rtol=1e-13, atol=1e-15)
np.testing.assert_allclose(W_rand, refattn.softmax(random_logits(rand_visible)), rtol=1e-13, atol=1e-15)
np.testing.assert_allclose(W_mix, refattn.softmax(0.5 * random_logits(rand_visible) + 0.5 * scores(q, k)),
                           rtol=1e-13, atol=1e-15)                   # R + dot, α = ½ each
_, W_dot = synthesizer_random_attention(q, k, v, params=rand_visible, mix="dot", alpha=(0, 1), return_weights=True)
np.testing.assert_array_equal(W_dot, A)                              # all weight on the dot product: softmax

q_other = rng.standard_normal((n, d))                                # another input, same parameters
_, W_rand_other = synthesizer_random_attention(q_other, k, v, params=rand_visible, return_weights=True)
np.testing.assert_array_equal(W_rand_other, W_rand)                  # Random: the same matrix for every input

fig = viz.figure((13, 3.8))
viz.draw_attention(fig, np.stack([A, W_dense, W_rand, W_mix]), vmax=1.0, annotate=False,
                   titles=["dot product: softmax(QKᵀ/√d)", "Dense: softmax(F(X))", "Random: softmax(R)",
                           "Random + dot, α = ½"])
fig

# %% [markdown]
# > The Dense Synthesizer's rows depend on each token alone, so two equal tokens get equal rows wherever they
# > stand; the Random Synthesizer's matrix is a parameter, the same for every input. At the official
# > initialisation R is nearly 0, so softmax(R) starts close to uniform (the average attention network's
# > non-causal prior); the figure draws an R of unit scale. The Dense Synthesizer is drawn at the official
# > initialisation (weights of scale 1/√d), whose logits are small: its rows start close to uniform too.

# %% [markdown]
# ## (k) Exercises
#
# 1. **Lazy blocks.** Run `attention_stack` with `lazy_rules(6, 3)`. Which layers' weights are equal, and which
#    projections are never read?
#    <details><summary>Hint</summary>Layers 1–3 share layer 1's map and layers 4–6 share layer 4's; the
#    projections of layers 2, 3, 5 and 6 are drawn but unused, as Lazyformer saves their Q Kᵀ.</details>
#
# 2. **A Gaussian prior that decodes.** With `causal=True`, query i's length I is the number of keys it may
#    see. Predict the centres with `predict_gaussian_prior(q, k, params, causal=True)` for the whole sequence
#    and for its first 6 tokens only: are the first 6 centres the same? What would change if I were the
#    whole length m?
#    <details><summary>Hint</summary>They are equal: row i reads q_i and the i + 1 keys it sees, nothing
#    later. With I = m a decoder would not know m in advance, and every new token would move every centre.
#    </details>
#
# 3. **How far is RealFormer from one layer?** With identity projections (`StackProjections` of identity
#    matrices) every layer's scores are the same S. What is RealFormer's top map after L layers, and which
#    softmax attention does it equal?
#    <details><summary>Hint</summary>Â^(L) = L·S, so the weights are softmax attention with the scale
#    multiplied by L: `scaled_dot_product_attention(q, k, v, scale=L / np.sqrt(d))`.</details>
