# %% [markdown]
# # The vanilla Transformer, from the equations
#
# **A. Vaswani, N. Shazeer, N. Parmar, J. Uszkoreit, L. Jones, A. N. Gomez, Ł. Kaiser, I. Polosukhin,
# "Attention Is All You Need", NeurIPS 2017, [arXiv:1706.03762](https://arxiv.org/abs/1706.03762) (v7).**
#
# $$
# \operatorname{Attention}(Q, K, V) = \operatorname{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}}\right) V
# \qquad\qquad (1)
# $$
#
# $$
# \operatorname{MultiHead}(Q, K, V) = \operatorname{Concat}(\mathrm{head}_1, \dots, \mathrm{head}_h)\, W^O,
# \qquad \mathrm{head}_i = \operatorname{Attention}(Q W_i^Q,\ K W_i^K,\ V W_i^V)
# $$
#
# This notebook follows the usual walk-through of the model: two tokens "Thinking Machines", as in
# J. Alammar's *Illustrated Transformer*, then the scale, the masks, the heads, the positions, the
# layers and decoding. Every step is computed, every derivation is checked against refattn to 1e-12,
# and every claim is measured. Text in "quotation marks" is the paper's, with its section number.
# Commentary is set apart as block quotes, as in the *Annotated Transformer*.
#
# **Contents.** (a) Thinking Machines by hand · (b) scaled dot-product attention · (c) why
# $1/\sqrt{d_k}$, measured · (d) masks · (e) multi-head attention · (f) positional encodings ·
# (g) encoder and decoder layers · (h) greedy decoding with a key/value cache · (i) exercises

# %%
import numpy as np

import refattn
from refattn import viz

np.set_printoptions(precision=3, suppress=True)
rng = np.random.default_rng(20170612)   # arXiv:1706.03762v1 date; every draw below comes from rng


def check(mine, ref):
    # "from the equation" cells end here: our few NumPy lines against refattn, to 1e-12
    np.testing.assert_allclose(mine, ref, rtol=1e-12, atol=1e-12)


# %% [markdown]
# ## (a) "Thinking Machines", one number at a time
#
# "An attention function can be described as mapping a query and a set of key-value pairs to an
# output, where the query, keys, values, and output are all vectors. The output is computed as a
# weighted sum of the values, where the weight assigned to each value is computed by a compatibility
# function of the query with the corresponding key." (§3.2)
#
# > Two tokens with embeddings $x_1, x_2 \in \mathbb{R}^{d_\text{model}}$. Three projection matrices
# > $W^Q, W^K, W^V \in \mathbb{R}^{d_\text{model} \times d_k}$ turn each embedding into a query, a key
# > and a value. The sizes are those of the Illustrated Transformer's pictures: $d_\text{model} = 4$
# > and $d_k = d_v = 3$ (the paper has 512 and 64). The entries are random and rounded to one decimal
# > so they are easy to read. In a trained model they would be learned. Weights act on the right,
# > $q_i = x_i W^Q$, as in the paper.

# %%
tokens = ["Thinking", "Machines"]
d_model, d_k = 4, 3
x = rng.standard_normal((2, d_model)).round(1)        # (2, d_model)  rows x1, x2
W_Q = rng.standard_normal((d_model, d_k)).round(1)    # (d_model, d_k)
W_K = rng.standard_normal((d_model, d_k)).round(1)
W_V = rng.standard_normal((d_model, d_k)).round(1)

q, k, v = x @ W_Q, x @ W_K, x @ W_V                   # (2, d_k) each: row i is q_i, k_i, v_i
for i, token in enumerate(tokens):
    print(f"{token:9} x{i + 1} = {x[i]}  ->  q{i + 1} = {q[i]}  k{i + 1} = {k[i]}  v{i + 1} = {v[i]}")

# %% [markdown]
# > **Scores for "Thinking".** Its query $q_1$ is compared with every key: $s_{1j} = q_1 \cdot k_j$.
# > The scores are divided by $\sqrt{d_k}$, turned into weights by a softmax, and the weights mix the
# > values: $z_1 = \sum_j a_{1j} v_j$.

# %%
s = np.array([q[0] @ k[0], q[0] @ k[1]])              # q1·k1, q1·k2
print("1. scores            q1·k1, q1·k2 =", s)
s_scaled = s / np.sqrt(d_k)
print(f"2. divide by sqrt(d_k) = {np.sqrt(d_k):.3f}   ->", s_scaled)
e = np.exp(s_scaled - s_scaled.max())                 # shifting by the max changes nothing but avoids overflow
a = e / e.sum()
print("3. softmax           a11, a12     =", a, f" (sum {a.sum():.3f})")
weighted = a[:, None] * v                             # a1j · v_j, one row per key
print("4. weighted values   a11·v1       =", weighted[0])
print("                     a12·v2       =", weighted[1])
z1 = weighted.sum(axis=0)
print("5. sum               z1           =", z1)

# %% [markdown]
# > Both tokens at once is the same computation on matrices: $Z = \operatorname{softmax}(QK^\top /
# > \sqrt{d_k})\, V$. Row $i$ of the weight matrix is token $i$'s distribution over the keys.

# %%
S = q @ k.T / np.sqrt(d_k)                            # (2, 2)  scores
A = np.exp(S - S.max(axis=-1, keepdims=True))
A = A / A.sum(axis=-1, keepdims=True)                 # (2, 2)  softmax over keys, row by row
Z = A @ v                                             # (2, d_v)

out, A_ref = refattn.scaled_dot_product_attention(q, k, v, return_weights=True)
check(Z, out)
check(A, A_ref)
check(Z[0], z1)
print("weights (rows: queries Thinking, Machines; columns: keys)\n", A)
print("z1 =", Z[0], " z2 =", Z[1])

# %% [markdown]
# > Walk-throughs often say that *"the word at this position will have the highest softmax score"*.
# > That does not follow from the equation. Nothing makes $q_i \cdot k_i$ the largest score in row
# > $i$, because $W^Q \neq W^K$. Here "Machines" gives more weight to "Thinking" than to itself. Trained
# > models also have many heads that mostly look elsewhere (the previous token, punctuation, a
# > separator).

# %% [markdown]
# **Takeaways.**
#
# - Attention for one query is three steps: a score against every key, a softmax of the scaled
#   scores, and the weighted sum of the values. For all queries at once it is
#   $\operatorname{softmax}(QK^\top/\sqrt{d_k})\,V$, equal to refattn's result to $10^{-12}$.
# - Nothing makes a token attend most to itself: $W^Q \neq W^K$, and here "Machines" gives more weight
#   to "Thinking" than to itself.

# %% [markdown]
# ## (b) Scaled dot-product attention on a sentence
#
# "The input consists of queries and keys of dimension $d_k$, and values of dimension $d_v$. We compute
# the dot products of the query with all keys, divide each by $\sqrt{d_k}$, and apply a softmax
# function to obtain the weights on the values." (§3.2.1)
#
# > The same three lines on a real-length sentence. The embeddings and projections are random, so
# > the pattern carries no linguistic meaning: no "it → animal" will appear. It shows the shape of
# > the computation: one row per query, each row a probability distribution over the keys.

# %%
sentence = "The animal didn't cross the street because it was too tired".split()
n, d_model, d_k = len(sentence), 16, 8
x = rng.standard_normal((n, d_model))
W_Q, W_K, W_V = rng.standard_normal((3, d_model, d_k)) / np.sqrt(d_model)
q, k, v = x @ W_Q, x @ W_K, x @ W_V                   # (n, d_k)

S = q @ k.T / np.sqrt(d_k)                            # (n, n)  QKᵀ/√d_k
A = np.exp(S - S.max(axis=-1, keepdims=True))
A = A / A.sum(axis=-1, keepdims=True)                 # (n, n)  softmax over keys
Z = A @ v                                             # (n, d_v)
out, A_ref = refattn.scaled_dot_product_attention(q, k, v, return_weights=True)
check(Z, out)
check(A, A_ref)

# %%
viz.plot_attention(A, row_labels=sentence, col_labels=sentence, size=4.2,
                   suptitle="softmax(QKᵀ/√d_k), random projections")

# %% [markdown]
# **Takeaways.**
#
# - The same three lines serve a sentence of any length: one row per query, and each row is a
#   probability distribution over the keys.
# - With random projections the pattern carries no linguistic meaning; it shows the shape of the
#   computation, not what a trained model attends to. For attention that learned something (the same
#   encoder–decoder trained to reverse a sequence, and the heads of an induction model), see
#   `11_learned_attention.ipynb`.

# %% [markdown]
# ## (c) Why divide by $\sqrt{d_k}$? Measured
#
# "We suspect that for large values of $d_k$, the dot products grow large in magnitude, pushing the
# softmax function into regions where it has extremely small gradients. To counteract this effect, we
# scale the dot products by $\frac{1}{\sqrt{d_k}}$." (§3.2.1) And footnote 4: "assume that the
# components of $q$ and $k$ are independent random variables with mean 0 and variance 1. Then their dot
# product, $q \cdot k = \sum_{i=1}^{d_k} q_i k_i$, has mean 0 and variance $d_k$."
#
# > We test both claims. For each $d_k$, draw 500 queries, each with its own 16 keys, all
# > $\sim \mathcal N(0, I)$. We measure:
# > - the variance of $q \cdot k$;
# > - the largest softmax weight per row (1 means one-hot);
# > - the entropy of the row (at most $\ln 16 \approx 2.77$);
# > - the Frobenius norm of the softmax Jacobian $J = \operatorname{diag}(a) - a a^\top$, which every
# >   gradient through the softmax is multiplied by.
# >
# > Each measurement is made without scaling and with it. **This is the knob the notebook sweeps:
# > $d_k$.**

# %%
d_ks, num_queries, num_keys = [4, 16, 64, 256, 1024], 500, 16
stats = {"var": [], "max_w": {}, "entropy": {}, "jac": {}}
for d_k in d_ks:
    q = rng.standard_normal((num_queries, 1, d_k))
    k = rng.standard_normal((num_queries, num_keys, d_k))
    dots = (q @ np.swapaxes(k, -1, -2))[:, 0, :]               # (queries, keys)  q·k
    stats["var"].append(dots.var())
    for label, scale in (("unscaled", 1.0), ("scaled 1/√d_k", 1 / np.sqrt(d_k))):
        a = refattn.softmax(dots * scale)                      # (queries, keys)
        J = a[:, :, None] * np.eye(num_keys) - a[:, :, None] * a[:, None, :]   # diag(a) − a aᵀ
        entropy = -np.sum(a * np.log(np.where(a > 0, a, 1.0)), axis=-1)
        stats["max_w"].setdefault(label, []).append(a.max(axis=-1).mean())
        stats["entropy"].setdefault(label, []).append(entropy.mean())
        stats["jac"].setdefault(label, []).append(np.linalg.norm(J, axis=(1, 2)).mean())

print(f"{'d_k':>5} {'Var(q·k)':>9} | {'max weight':>19} | {'entropy':>15} | {'‖J‖_F':>15}")
print(f"{'':>5} {'':>9} | {'unscaled':>9} {'scaled':>9} | {'unscaled':>7} {'scaled':>7} | {'unscaled':>7} {'scaled':>7}")
for i, d_k in enumerate(d_ks):
    u, s = "unscaled", "scaled 1/√d_k"
    print(f"{d_k:5d} {stats['var'][i]:9.1f} | {stats['max_w'][u][i]:9.3f} {stats['max_w'][s][i]:9.3f} | "
          f"{stats['entropy'][u][i]:7.3f} {stats['entropy'][s][i]:7.3f} | "
          f"{stats['jac'][u][i]:7.3f} {stats['jac'][s][i]:7.3f}")

# %%
fig = viz.figure((11, 3.2))
ax_var, ax_max, ax_jac = fig.subplots(1, 3)
ax_var.loglog(d_ks, stats["var"], "o", label="measured Var(q·k)")
ax_var.loglog(d_ks, d_ks, "k--", lw=1, label="d_k (footnote 4)")
ax_var.set(xlabel="d_k", title="dot-product variance grows like d_k")
for label, style in (("unscaled", "o-"), ("scaled 1/√d_k", "s-")):
    ax_max.semilogx(d_ks, stats["max_w"][label], style, label=label)
    ax_jac.semilogx(d_ks, stats["jac"][label], style, label=label)
ax_max.axhline(1 / num_keys, color="gray", lw=1, ls=":", label="uniform 1/16")
ax_max.set(xlabel="d_k", ylim=(0, 1.02), title="mean largest softmax weight")
ax_jac.set(xlabel="d_k", ylim=(0, None), title="mean ‖softmax Jacobian‖_F")
for ax in (ax_var, ax_max, ax_jac):
    ax.legend(fontsize=8)
fig

# %% [markdown]
# > The footnote's arithmetic checks out: the measured variance tracks $d_k$. Without scaling, the
# > softmax saturates as $d_k$ grows. The largest weight heads to 1 (a near one-hot row), the
# > entropy collapses, and the Jacobian norm, which scales every gradient that flows back into the
# > scores, falls towards 0. With $1/\sqrt{d_k}$ the scores have unit variance for every $d_k$, and
# > all three measures stay flat. The scale makes the softmax's operating point independent of the
# > head width.

# %% [markdown]
# **Takeaways.**
#
# - For queries and keys with independent unit-variance components, $\operatorname{Var}(q \cdot k) = d_k$
#   (footnote 4), as measured here from $d_k = 4$ to 1024.
# - Unscaled, the softmax saturates as $d_k$ grows: the rows become nearly one-hot and the Jacobian
#   norm, which multiplies every gradient into the scores, falls towards 0. Scaled by $1/\sqrt{d_k}$,
#   the largest weight, the entropy and the Jacobian norm stay nearly constant across $d_k$.

# %% [markdown]
# ## (d) Masks
#
# "We need to prevent leftward information flow in the decoder to preserve the auto-regressive
# property. We implement this inside of scaled dot-product attention by masking out (setting to
# $-\infty$) all values in the input of the softmax which correspond to illegal connections." (§3.2.3)
#
# > refattn masks are boolean with **`True` = may attend**. Masked entries are removed *by selection*
# > (`np.where`), never by adding a large negative number. Three kinds of mask follow: padding, causal
# > (with its two alignments), and the fully masked rows that bottom-right alignment can create.
#
# ### Padding
#
# > A batch of two sequences, of real lengths 6 and 4, padded to $m = 6$. `padding_mask(lengths, m)` has
# > shape `(batch, 1, m)` and broadcasts over the queries. The two padding positions of the second
# > sequence get exactly zero weight from every query.

# %%
lengths, m, d = np.array([6, 4]), 6, 8
q, k, v = rng.standard_normal((3, 2, m, d))              # (batch=2, m, d) each: self-attention
mask = refattn.padding_mask(lengths, m)                  # (2, 1, m)
out, A = refattn.scaled_dot_product_attention(q, k, v, mask, return_weights=True)
np.testing.assert_array_equal(A[1][:, 4:], 0.0)          # padded keys: exactly 0
print("mask (batch, 1, m):\n", mask.astype(int))
viz.plot_attention(A, titles=[f"sequence {b} (length {lengths[b]})" for b in range(2)], size=2.8)

# %% [markdown]
# ### NaN in the padding never leaks
#
# > Padding slots often hold garbage: uninitialised memory, or a NaN from an earlier division. Suppose
# > they hold NaN. Adding $-10^9$ to the masked scores (the common recipe) does not remove a NaN, since
# > $\text{NaN} - 10^9 = \text{NaN}$. A plain `A @ V` also spreads it, since $0 \cdot \text{NaN} =
# > \text{NaN}$. So the whole sequence turns to NaN. refattn selects instead of adding, so the
# > result is the same as with clean padding.

# %%
k_bad, v_bad = k.copy(), v.copy()
k_bad[1, 4:], v_bad[1, 4:] = np.nan, np.nan              # garbage in sequence 1's padding slots

# the "-1e9" recipe, written out
S = q @ np.swapaxes(k_bad, -1, -2) / np.sqrt(d) + np.where(mask, 0.0, -1e9)
A_naive = np.exp(S - S.max(axis=-1, keepdims=True))
A_naive = A_naive / A_naive.sum(axis=-1, keepdims=True)
out_naive = A_naive @ v_bad
out_refattn = refattn.scaled_dot_product_attention(q, k_bad, v_bad, mask)

print("NaN outputs, -1e9 recipe:", np.isnan(out_naive[1]).sum(), "of", out_naive[1].size)
print("NaN outputs, refattn:    ", np.isnan(out_refattn[1]).sum(), "of", out_refattn[1].size)
check(out_refattn, out)                                   # identical to the clean-padding result

# %% [markdown]
# ### Causal masks when $n \neq m$: top-left or bottom-right?
#
# > With as many queries as keys, "query $i$ sees keys $j \le i$" is unambiguous. When they differ,
# > there are two conventions, and libraries disagree:
# >
# > - **top-left** (`causal=True`; PyTorch `is_causal`, JAX): $j \le i$;
# > - **bottom-right** (`causal="bottom-right"`; FlashAttention ≥ 2.1): $j \le i + (m - n)$, so the last
# >   query lines up with the last key.
# >
# > The case that matters is decoding with a key/value cache. The 3 newest tokens (positions 4, 5, 6)
# > arrive as $n = 3$ queries over $m = 7$ keys (4 cached + 3 new). Bottom-right lets new token 4 see
# > keys 0…4. Top-left would let it see key 0 only.

# %%
n_new, m_all = 3, 7
masks = np.stack([refattn.causal_mask(n_new, m_all),
                  refattn.causal_mask(n_new, m_all, causal="bottom-right")])   # (2, 3, 7)
viz.plot_pattern(masks, titles=["causal=True (top-left)", 'causal="bottom-right"'],
                 row_labels=[f"new {4 + i}" for i in range(n_new)], size=3.2)

# %%
# the check that matters: 3 new queries over all 7 keys == the last 3 rows of full causal attention
q, k, v = rng.standard_normal((3, m_all, d))
full = refattn.scaled_dot_product_attention(q, k, v, causal=True)              # (7, d)
bottom_right = refattn.scaled_dot_product_attention(q[4:], k, v, causal="bottom-right")
top_left = refattn.scaled_dot_product_attention(q[4:], k, v, causal=True)
check(bottom_right, full[4:])
print("bottom-right == rows 4-6 of the full causal attention: True")
print("top-left     == rows 4-6 of the full causal attention:", np.allclose(top_left, full[4:]))

# %% [markdown]
# ### More queries than keys: fully masked rows
#
# > With bottom-right alignment and $n > m$, the first $n - m$ queries come before every key. Their
# > row of allowed keys is empty, and the softmax of nothing is undefined. refattn makes this a
# > choice, `fully_masked=`:
# >
# > - `"zero"` (default): PyTorch ≥ 2.5 SDPA and FlashAttention;
# > - `"nan"`: the honest $0/0$ of older PyTorch;
# > - `"uniform"`: what filling with $-10^9$ gives (every score equal, so $1/m$ each), as in the
# >   Annotated Transformer.
# >
# > NaN cells are drawn grey.

# %%
n, m = 5, 3
q, k, v = rng.standard_normal((n, d)), rng.standard_normal((m, d)), rng.standard_normal((m, d))
policies = ("zero", "nan", "uniform")
weights, outputs = [], []
for policy in policies:
    out, A = refattn.scaled_dot_product_attention(q, k, v, causal="bottom-right", fully_masked=policy,
                                                  return_weights=True)
    weights.append(A)
    outputs.append(out)
    print(f"fully_masked={policy!r:9} output rows 0-1 (first 3 features): {out[:2, :3].round(3).tolist()}")
viz.plot_attention(np.stack(weights), titles=[f'"{p}"' for p in policies], vmax=1.0,
                   row_labels=[f"q{i}" for i in range(n)], col_labels=[f"k{j}" for j in range(m)],
                   size=2.4, suptitle='causal="bottom-right", n=5 > m=3: fully_masked=')

# %% [markdown]
# **Takeaways.**
#
# - Masking by selection gives masked keys exactly zero weight, and NaN stored in masked keys or values
#   never reaches the output; adding $-10^9$ turned every output of the padded sequence into NaN.
# - With $n \neq m$ the two causal alignments differ: bottom-right reproduces the last rows of full
#   causal attention, as decoding with a key/value cache needs; top-left does not.
# - A query that may see no key returns what `fully_masked=` says: zeros, NaN, or the uniform
#   average that filling with $-10^9$ gives.

# %% [markdown]
# ## (e) Multi-head attention
#
# "Instead of performing a single attention function with $d_\text{model}$-dimensional keys, values and
# queries, we found it beneficial to linearly project the queries, keys and values $h$ times with
# different, learned linear projections to $d_k$, $d_k$ and $d_v$ dimensions, respectively. [...]
# Multi-head attention allows the model to jointly attend to information from different
# representation subspaces at different positions. With a single attention head, averaging inhibits
# this." (§3.2.2)
#
# > refattn stores the $h$ projections side by side: $W^Q$ is $d_\text{model} \times h d_k$, and head $i$
# > owns columns $i d_k \dots (i+1) d_k - 1$. Splitting the rows of $W^O$ into blocks $W^O_i$
# > ($d_v \times d_\text{model}$) shows that concatenating and then projecting is a **sum of
# > re-parameterised heads** (the survey's §4.6.3, "multi-head with refined aggregation"):
# >
# > $$\operatorname{Concat}(\mathrm{head}_1, \dots, \mathrm{head}_h)\, W^O = \sum_{i=1}^h \mathrm{head}_i\, W^O_i
# > = \sum_{i=1}^h \operatorname{softmax}\!\Big(\tfrac{Q W_i^Q (K W_i^K)^\top}{\sqrt{d_k}}\Big)\, V\, (W_i^V W^O_i)$$
# >
# > So each head writes into the model's residual stream through its own rank-$d_v$ matrix
# > $W_i^V W^O_i$.

# %%
words = "the animal didn't cross the street".split()
n, d_model, h = len(words), 16, 4
d_k = d_v = d_model // h
x = rng.standard_normal((n, d_model))
p = refattn.init_multi_head(rng, d_model, h)          # w_q, w_k, w_v (16, 16), w_o (16, 16), zero biases

def split_heads(y):                                   # (n, h·d) -> (h, n, d): head i = columns i·d … (i+1)·d − 1
    return y.reshape(n, h, -1).transpose(1, 0, 2)

Q, K, V = (split_heads(x @ w + b) for w, b in ((p.w_q, p.b_q), (p.w_k, p.b_k), (p.w_v, p.b_v)))
heads = refattn.scaled_dot_product_attention(Q, K, V)            # (h, n, d_v)  head_i
concat = heads.transpose(1, 0, 2).reshape(n, h * d_v)            # (n, h·d_v)   Concat(head_1..head_h)
mine = concat @ p.w_o + p.b_o                                    # (n, d_model)

out, A = refattn.multi_head_attention(x, x, p, num_heads=h, return_weights=True)   # A: (h, n, n)
check(mine, out)

W_O = p.w_o.reshape(h, d_v, d_model)                             # row blocks W^O_i
summed = sum(heads[i] @ W_O[i] for i in range(h)) + p.b_o        # Σ_i head_i W^O_i
check(summed, out)
ranks = [int(np.linalg.matrix_rank(p.w_v[:, i * d_v:(i + 1) * d_v] @ W_O[i])) for i in range(h)]
print("concat-then-project == sum of heads; rank of each W_i^V W^O_i:", ranks, f"(d_v = {d_v})")

# %%
viz.plot_attention(A[None], titles=[f"head {i + 1}" for i in range(h)], row_labels=words,
                   col_labels=words, size=2.6, suptitle="multi_head_attention(..., return_weights=True)")

# %% [markdown]
# **Takeaways.**
#
# - Multi-head attention is $h$ scaled dot-product attentions on column blocks of the projections,
#   concatenated and projected by $W^O$; each head has its own attention matrix.
# - Concatenating and projecting equals summing $\mathrm{head}_i W^O_i$ over the heads: each head writes
#   into the output through its own matrix $W_i^V W^O_i$, of rank at most $d_v$.

# %% [markdown]
# ## (f) Positional encodings
#
# "Since our model contains no recurrence and no convolution, in order for the model to make use of
# the order of the sequence, we must inject some information about the relative or absolute position
# of the tokens in the sequence." (§3.5)
#
# $$
# PE_{(pos, 2i)} = \sin\!\big(pos / 10000^{2i/d_\text{model}}\big), \qquad
# PE_{(pos, 2i+1)} = \cos\!\big(pos / 10000^{2i/d_\text{model}}\big)
# $$
#
# > Each pair of columns $(2i, 2i+1)$ is a point on the unit circle turning at frequency
# > $\omega_i = 10000^{-2i/d_\text{model}}$. The first pairs turn fast (period $2\pi$ positions); the last
# > ones barely move (period up to $2\pi \cdot 10000$).

# %%
num_positions, d_model = 64, 32
pe = refattn.sinusoidal_positional_encoding(num_positions, d_model)       # (64, 32)

pos = np.arange(num_positions)[:, None]                                  # (P, 1)
omega = 10000.0 ** (-np.arange(0, d_model, 2) / d_model)                 # (d/2,)  ω_i
mine = np.empty((num_positions, d_model))
mine[:, 0::2], mine[:, 1::2] = np.sin(pos * omega), np.cos(pos * omega)  # interleaved, as in the paper
check(mine, pe)

viz.plot_attention(pe.T, cmap="RdBu_r", vmin=-1.0, vmax=1.0, xlabel="position pos",
                   ylabel="dimension (sin 2i, cos 2i+1)", size=6.5,
                   suptitle="sinusoidal positional encoding PE(pos, ·)ᵀ, d_model = 32")

# %% [markdown]
# "We chose this function because we hypothesized it would allow the model to easily learn to attend by
# relative positions, since for any fixed offset $k$, $PE_{pos+k}$ can be represented as a linear
# function of $PE_{pos}$." (§3.5)
#
# > The linear function is a rotation. It turns each (sin, cos) pair by the angle $k\omega_i$, the same
# > for every position: $PE_{pos+k} = PE_{pos} R_k$. `refattn.sinusoidal_rotation(k, d)` builds $R_k$.
# > A consequence is that $PE_p \cdot PE_q = \sum_i \cos\big((p - q)\,\omega_i\big)$ depends only on the
# > offset $p - q$ (the Gram matrix is Toeplitz). It is symmetric in $\pm(p-q)$, so the dot product
# > alone cannot tell before from after.

# %%
for offset in (1, 5, 17):
    R = refattn.sinusoidal_rotation(offset, d_model)                      # (d, d)
    check(pe[:-offset] @ R, pe[offset:])                                  # PE(pos + k) = PE(pos) R_k
    check(R @ R.T, np.eye(d_model))                                       # a rotation: orthogonal

G = pe @ pe.T                                                            # (P, P)  PE_p · PE_q
delta = pos - pos.T                                                      # p − q
check(G, np.cos(delta[..., None] * omega).sum(axis=-1))                  # Σ_i cos((p − q) ω_i)
print("PE(pos+k) = PE(pos) @ R_k for k = 1, 5, 17;  PE_p·PE_q = f(p - q) for all 64 x 64 pairs")

fig = viz.figure((9.5, 3.4))
ax_g, ax_f = fig.subplots(1, 2, width_ratios=[1, 1.5])
im = ax_g.imshow(G, cmap="viridis")
fig.colorbar(im, ax=ax_g, shrink=0.85)
ax_g.set(title="Gram matrix PE_p · PE_q", xlabel="position q", ylabel="position p")
ax_f.plot(np.arange(-63, 64), np.cos(np.arange(-63, 64)[:, None] * omega).sum(axis=-1), lw=1.5)
ax_f.set(title="PE_p · PE_q as a function of p − q", xlabel="offset p − q", ylabel="dot product")
ax_f.axhline(0, color="gray", lw=0.8)
fig

# %% [markdown]
# > **Interleaved or concatenated?** The paper interleaves (sin at even columns, cos at odd).
# > tensor2tensor, fairseq and many RoPE codes put all the sines first, then all the cosines. This is
# > the same encoding with its columns permuted: dot products, and so the Gram matrix, are unchanged.
# > The vectors themselves differ, though, so match the layout when you compare embeddings with another
# > implementation.

# %%
pe_cat = refattn.sinusoidal_positional_encoding(num_positions, d_model, layout="concatenated")
perm = np.r_[0:d_model:2, 1:d_model:2]                                   # sines first, then cosines
np.testing.assert_array_equal(pe_cat, pe[:, perm])
check(pe_cat @ pe_cat.T, G)
R_cat = refattn.sinusoidal_rotation(5, d_model, layout="concatenated")
check(pe_cat[:-5] @ R_cat, pe_cat[5:])
print("concatenated == interleaved[:, perm];  same Gram matrix;  max |difference| of the vectors:",
      np.abs(pe_cat - pe).max().round(3))

# %% [markdown]
# **Takeaways.**
#
# - Each (sin, cos) pair of columns turns at its own frequency, so a shift by $k$ positions is one
#   rotation, $PE_{pos+k} = PE_{pos} R_k$, the same for every position.
# - The dot product of two encodings depends only on the offset $p - q$, and not on its sign.
# - Interleaved and concatenated layouts are the same encoding with permuted columns: equal dot
#   products, different vectors.

# %% [markdown]
# ## (g) Encoder and decoder layers
#
# "We employ a residual connection around each of the two sub-layers, followed by layer normalization.
# That is, the output of each sub-layer is $\mathrm{LayerNorm}(x + \mathrm{Sublayer}(x))$, where
# $\mathrm{Sublayer}(x)$ is the function implemented by the sub-layer itself." (§3.1)
#
# > That is **post-LN**, the paper's arrangement and refattn's default. The paper trains it with a
# > learning rate that rises linearly over the first 4000 steps, a warm-up, and then decays (§5.3).
# > **Pre-LN**, $x + \mathrm{Sublayer}(\mathrm{LN}(x))$ (`norm_first=True`), moves the layer norm to
# > the input of each sub-layer, as GPT-2 does (A. Radford et al., 2019, §2.3). R. Xiong et al., "On
# > Layer Normalization in the Transformer Architecture", ICML 2020,
# > [arXiv:2002.04745](https://arxiv.org/abs/2002.04745), show that at initialisation a post-LN
# > Transformer has large expected gradients for the parameters near its output, which is why the
# > warm-up helps, while a pre-LN Transformer's gradients are well-behaved; in their experiments
# > pre-LN Transformers trained without the warm-up stage reached results comparable to the
# > baselines. Below, both arrangements are written out from the equation and checked against
# > `refattn.encoder_layer`, on the same input and parameters. The input rows are deliberately far
# > from normalised (mean ≈ 3, std ≈ 2).

# %%
n, d_model, h, d_ff = 6, 16, 2, 32
x = 3.0 + 2.0 * rng.standard_normal((n, d_model))
enc = refattn.init_encoder_layer(rng, d_model, h, d_ff)

def ln(y, norm):
    return refattn.layer_norm(y, norm.gamma, norm.beta)

def self_attention(y):
    return refattn.multi_head_attention(y, y, enc.self_attn, num_heads=h)

x1 = ln(x + self_attention(x), enc.norm_1)                               # post-LN: LN(x + Sublayer(x))
post = ln(x1 + refattn.feed_forward(x1, enc.ffn), enc.norm_2)
check(post, refattn.encoder_layer(x, enc, num_heads=h))

x1 = x + self_attention(ln(x, enc.norm_1))                               # pre-LN: x + Sublayer(LN(x))
pre = x1 + refattn.feed_forward(ln(x1, enc.norm_2), enc.ffn)
check(pre, refattn.encoder_layer(x, enc, num_heads=h, norm_first=True))

for name, y in (("input x", x), ("post-LN out", post), ("pre-LN out", pre)):
    print(f"{name:12} row means {y.mean(axis=-1).round(3) + 0.0}   row stds {y.std(axis=-1)}")

# %% [markdown]
# > **What layer norm does.** It normalises each row (one position of one sequence) across that row's
# > $d_\text{model}$ features: subtract the row mean, divide by the row standard deviation, then apply
# > the gain $\gamma$ and bias $\beta$ (1 and 0 here). No statistic is shared between positions or
# > between sequences of a batch. That is the difference from batch norm, and the reason it suits
# > variable-length sequences. After post-LN every row has mean 0 and std ≈ 1 (a little under, because
# > of $\varepsilon = 10^{-5}$). Pre-LN normalises only the sub-layers' *inputs*. Its output is the
# > residual stream, which keeps the input's scale (mean ≈ 3), so a pre-LN stack needs a final layer
# > norm (`TransformerParams.encoder_norm`).

# %%
y = refattn.layer_norm(x)
x_changed = x.copy()
x_changed[0] *= 100.0                                                    # change one row wildly
np.testing.assert_array_equal(refattn.layer_norm(x_changed)[1:], y[1:])  # the other rows do not move

fig = viz.figure((9, 2.8))
ax_mean, ax_std = fig.subplots(1, 2, sharex=True)
for name, arr, style in (("input x", x, "o-"), ("post-LN", post, "s-"), ("pre-LN", pre, "^-")):
    ax_mean.plot(arr.mean(axis=-1), style, label=name)
    ax_std.plot(arr.std(axis=-1), style, label=name)
ax_mean.set(title="row mean", xlabel="position")
ax_std.set(title="row standard deviation", xlabel="position")
ax_std.legend(fontsize=8)
fig

# %% [markdown]
# **Decoder.** "We also modify the self-attention sub-layer in the decoder stack to prevent positions
# from attending to subsequent positions. This masking, combined with fact that the output embeddings
# are offset by one position, ensures that the predictions for position $i$ can depend only on the
# known outputs at positions less than $i$." (§3.1)
#
# > A decoder layer adds a cross-attention sub-layer between the two: queries from the decoder, keys
# > and values from the encoder output ("memory"), with no causal mask. The check is behavioural:
# > change the future inputs, and the past outputs must not move by a single bit.

# %%
n_tgt, n_src = 5, 7
dec = refattn.init_decoder_layer(rng, d_model, h, d_ff)
y = rng.standard_normal((n_tgt, d_model))
memory = rng.standard_normal((n_src, d_model))
out = refattn.decoder_layer(y, memory, dec, num_heads=h)

y_future = y.copy()
y_future[3:] = rng.standard_normal((2, d_model))                         # rewrite positions 3 and 4
out_future = refattn.decoder_layer(y_future, memory, dec, num_heads=h)
np.testing.assert_array_equal(out_future[:3], out[:3])                   # positions 0-2: bit-identical
print("positions 0-2 unchanged; positions 3-4 changed:", not np.allclose(out_future[3:], out[3:]))

_, A_self = refattn.multi_head_attention(y, y, dec.self_attn, num_heads=h, causal=True, return_weights=True)
viz.plot_attention(A_self[None], titles=[f"decoder self-attention, head {i + 1}" for i in range(h)],
                   size=2.6)

# %% [markdown]
# **Takeaways.**
#
# - Post-LN normalises every row of a layer's output. Pre-LN normalises only the sub-layers' inputs, so
#   its output keeps the input's scale, and a pre-LN stack ends with a final layer norm.
# - Layer norm shares no statistic between positions: changing one row leaves the others unchanged,
#   bit for bit.
# - The decoder's causal mask is checked by behaviour: rewriting later inputs leaves the earlier
#   outputs bit-identical.

# %% [markdown]
# ## (h) Greedy decoding with the key/value cache
#
# > A complete (tiny, random, untrained) encoder–decoder: $d_\text{model} = 16$, 2 heads, 2 layers in
# > each stack, a 12-token vocabulary, and BOS = 1, EOS = 2. `refattn.greedy_decode` encodes the source
# > once, then feeds one token per step. Each decoder layer keeps the keys and values of the positions
# > already decoded (`DecoderCache`), so step $t$ projects only the new token and attends over $t + 1$
# > cached keys. It never recomputes the past.
# >
# > **The check.** Teacher forcing runs the whole produced sequence through the decoder at once, in
# > parallel, with a causal mask. It must give the same logits as the step-by-step cached decoding did
# > at each step.

# %%
vocab, d_model, h, num_layers, BOS, EOS = 12, 16, 2, 2, 1, 2
model = refattn.init_transformer(rng, vocab, vocab, d_model=d_model, num_heads=h, d_ff=32,
                                 num_layers=num_layers)
src = rng.integers(3, vocab, size=(2, 7))                                # a batch of two sources
src_lengths = np.array([7, 5])                                           # the second is padded
tokens, step_logits = refattn.greedy_decode(src, model, num_heads=h, bos=BOS, eos=EOS, max_len=8,
                                            src_lengths=src_lengths)
print("source tokens:\n", src, "\ndecoded (BOS first; a sequence that emits EOS continues with EOS):\n", tokens)

memory = refattn.encode(src, model, num_heads=h, src_lengths=src_lengths)
teacher_forced = refattn.decode(tokens[:, :-1], memory, model, num_heads=h, src_lengths=src_lengths)
check(teacher_forced, step_logits)
print("teacher-forced logits == cached step logits:", teacher_forced.shape)

# %% [markdown]
# > **Why the cached step uses bottom-right alignment.** At step $t$ the self-attention has one new
# > query (position $t$) and $t + 1$ keys (positions $0 \dots t$: $t$ cached plus the new one). Top-left
# > alignment, $j \le i$ with $i = 0$, would let the new token see only key 0, the BOS. Bottom-right,
# > $j \le i + (m - n) = t$, lets it see everything up to itself, exactly its row of the full causal
# > mask. The same holds when several new tokens arrive at once (prefill, or speculative decoding), as
# > in section (d). One decoder layer shows this: feeding 4 positions and then 3 more through the cache
# > equals one pass over all 7.

# %%
layer = model.decoder[0]
y = rng.standard_normal((7, d_model))                                    # one sequence, 7 positions
mem = memory[0]                                                          # (7, d_model)
full = refattn.decoder_layer(y, mem, layer, num_heads=h)
first, cache = refattn.decoder_layer_step(y[:4], mem, layer, None, num_heads=h)    # prefill 4
second, cache = refattn.decoder_layer_step(y[4:], mem, layer, cache, num_heads=h)  # 3 new over 7 keys
check(np.concatenate([first, second]), full)
print("cache after 7 positions: k", cache.k.shape, " v", cache.v.shape, " memory_k", cache.memory_k.shape)
print("step t = 4, 1 new query over 5 keys:", refattn.causal_mask(1, 5).astype(int),
      "top-left vs", refattn.causal_mask(1, 5, causal="bottom-right").astype(int), "bottom-right")

# %% [markdown]
# ### Stepping through the decoder
#
# > The attention of the first decoder layer, head 1, for the second sequence, one frame per decoding
# > step (press ▶; in a live kernel, `mode="widget"` gives a slider instead). Labels are `position:token`. Row $t$ is what the new query at step $t$ attends to.
# > The rows above it were computed at earlier steps and do not change, which is why caching is exact.
# > Grey rows have not been computed yet. This source has 5 real tokens padded to 7, so in the
# > cross-attention player its last two positions get zero weight at every step. Under each player, a
# > strip of three of its frames shows the same steps where the player cannot run (GitHub's notebook
# > viewer drops its JavaScript).
# >
# > The cached decoding does not return its weights, so we rebuild them from the same layer's
# > parameters: the decoder input (embedding $\cdot \sqrt{d_\text{model}}$ + PE, §3.4), causal
# > self-attention, then cross-attention on the post-LN output of the first sub-layer. The same
# > equations as `decoder_layer` give the same output (checked).

# %%
T = tokens.shape[1] - 1                                                  # decoding steps
y0 = model.tgt_embedding[tokens[:, :-1]] * np.sqrt(d_model) + refattn.sinusoidal_positional_encoding(T, d_model)
memory_mask = refattn.padding_mask(src_lengths, memory.shape[-2])        # (2, 1, n_src)

sa, A_self = refattn.multi_head_attention(y0, y0, layer.self_attn, num_heads=h, causal=True, return_weights=True)
y1 = ln(y0 + sa, layer.norm_1)
ca, A_cross = refattn.multi_head_attention(y1, memory, layer.cross_attn, num_heads=h, mask=memory_mask,
                                           return_weights=True)
y2 = ln(y1 + ca, layer.norm_2)
y3 = ln(y2 + refattn.feed_forward(y2, layer.ffn), layer.norm_3)
check(y3, refattn.decoder_layer(y0, memory, layer, num_heads=h, memory_mask=memory_mask))
y = y0                                                                   # and the whole stack from y0:
for each in model.decoder:
    y = refattn.decoder_layer(y, memory, each, num_heads=h, memory_mask=memory_mask)
check(y @ model.w_out + model.b_out, teacher_forced)                     # the decoder input was right

def growing(A):                                                          # (T, n_keys) -> (T, T, n_keys)
    frames = np.full((T, *A.shape), np.nan)
    for t in range(T):
        frames[t, :t + 1] = A[:t + 1]
    return frames

b = 1                                                                    # the second sequence
labels = [f"{t}:{tok}" for t, tok in enumerate(tokens[b, :-1])]
step_titles = [f"self-attention, step {t}: input {tokens[b, t]} -> next {tokens[b, t + 1]}" for t in range(T)]
viz.step_through(growing(A_self[b, 0]), titles=step_titles, mode="html", interval=700,
                 row_labels=labels, col_labels=labels, vmax=1.0, size=3.2)

# %%
# three of the player's frames, for viewers that drop its JavaScript
shown = [1, T // 2, T - 1]
viz.plot_attention(growing(A_self[b, 0])[shown], titles=[f"step {t}: next token {tokens[b, t + 1]}" for t in shown],
                   row_labels=labels, col_labels=labels, vmax=1.0, size=2.6,
                   suptitle="decoder self-attention (layer 1, head 1, sequence 2), frames of the player above")

# %%
# greedy_decode can return what each step attended to in the source: (layers, B, h, T, n_src).
_, _, cross = refattn.greedy_decode(src, model, num_heads=h, bos=BOS, eos=EOS, max_len=8,
                                    src_lengths=src_lengths, return_weights=True)
check(cross[0], A_cross)                                                 # = the teacher-forced first layer
src_labels = [f"{j}:{tok}" for j, tok in enumerate(src[b])]
step_titles = [title.replace("self-attention", "cross-attention") for title in step_titles]
viz.step_through(growing(cross[0, b, 0]), titles=step_titles, mode="html", interval=700,
                 row_labels=labels, col_labels=src_labels, xlabel="source position j", vmax=1.0, size=3.2)

# %%
# three of the player's frames, for viewers that drop its JavaScript
viz.plot_attention(growing(cross[0, b, 0])[shown], titles=[f"step {t}: next token {tokens[b, t + 1]}" for t in shown],
                   row_labels=labels, col_labels=src_labels, xlabel="source position j", vmax=1.0, size=2.6,
                   suptitle="cross-attention (layer 1, head 1, sequence 2), frames of the player above")

# %% [markdown]
# ### Counting the attention work, with and without the cache
#
# > Without a cache, step $t$ re-runs the decoder on all $t + 1$ positions: the self-attention scores
# > form a $(t+1) \times (t+1)$ matrix and the cross-attention a $(t+1) \times n_\text{src}$ one, in every
# > layer, head and sequence. With the cache, step $t$ computes one row of each, $1 \times (t+1)$ and
# > $1 \times n_\text{src}$. We *measure* the number of query–key scores as the size of the weight
# > matrices the layers return (`return_weights=True`), stepping the cached `decoder_layer_step` and,
# > without a cache, re-running `decoder_layer` on the growing prefix. We check the counts against the
# > formulas, and check that both choose from the same logits as `greedy_decode`.

# %%
# Count the query-key scores each step computes, read off the weight matrices the layers return
# (one score per entry): cached one-token steps versus re-running the whole prefix.
B, n_src = src.shape
per_step_cached, per_step_full = [], []
caches = [None] * num_layers
for t in range(T):
    y, n_scores = y0[:, t:t + 1], 0                                      # the step's one new position
    for i, each in enumerate(model.decoder):
        y, caches[i], (A_s, A_c) = refattn.decoder_layer_step(
            y, memory, each, caches[i], num_heads=h, memory_mask=memory_mask, return_weights=True)
        n_scores += A_s.size + A_c.size                                  # (B, h, 1, t+1) and (B, h, 1, n_src)
    check(y[:, 0] @ model.w_out + model.b_out, step_logits[:, t])
    per_step_cached.append(n_scores)

    y, n_scores = y0[:, :t + 1], 0                                       # no cache: the whole prefix again
    for each in model.decoder:
        y, (A_s, A_c) = refattn.decoder_layer(y, memory, each, num_heads=h, memory_mask=memory_mask,
                                              return_weights=True)
        n_scores += A_s.size + A_c.size                                  # (B, h, t+1, t+1) and (B, h, t+1, n_src)
    check(y[:, -1] @ model.w_out + model.b_out, step_logits[:, t])
    per_step_full.append(n_scores)

for t in range(T):                                                       # the formulas, per step
    assert per_step_cached[t] == num_layers * B * h * (1 * (t + 1) + 1 * n_src)
    assert per_step_full[t] == num_layers * B * h * ((t + 1) * (t + 1) + (t + 1) * n_src)

print(f"{'step t':>6} {'with cache':>11} {'without':>9}   (query-key scores, all layers, heads and sequences)")
for t in range(T):
    print(f"{t:6d} {per_step_cached[t]:11d} {per_step_full[t]:9d}")
print(f"{'total':>6} {sum(per_step_cached):11d} {sum(per_step_full):9d}")

# %% [markdown]
# > Per step, the cache turns quadratic work into linear work. Over $T$ steps the self-attention
# > scores add up to $\sum_t (t+1) = T(T+1)/2$ with the cache against
# > $\sum_t (t+1)^2 \approx T^3/3$ without, and the cross-attention to $T\, n_\text{src}$ against
# > $T(T+1)/2 \cdot n_\text{src}$. The cache also saves the projections: without it, every step
# > re-projects all $t + 1$ positions (and the encoder memory) in every layer. The price is memory,
# > $2 \cdot L \cdot h \cdot (t + 1) \cdot d_k$ numbers per sequence, which is what the later
# > multi-query and grouped-query variants shrink.

# %% [markdown]
# **Takeaways.**
#
# - Greedy decoding with the key/value cache gives the same logits as one teacher-forced pass over the
#   decoded tokens, and a prefill followed by cached steps equals one pass over all positions.
# - A cached step attends with bottom-right alignment: its new query is the last of $t + 1$ positions.
# - With the cache, step $t$ computes one row of scores instead of $t + 1$; over the 8 steps here,
#   736 query-key scores instead of 3648 (all layers, heads and sequences).

# %% [markdown]
# ## (i) Exercises
#
# 1. **Flip the polarity.** Pass `~mask` instead of `mask` in the padding example of (d). Predict the
#    weights of sequence 1 before you run it. Then write the one-line conversion from a
#    `torch.nn.MultiheadAttention` `key_padding_mask` to a refattn mask.
#    <details><summary>Hint</summary>In <code>nn.MultiheadAttention</code>, <code>True</code> means
#    "ignore this key"; in refattn it means "may attend". A row with every key blocked follows
#    <code>fully_masked</code>.</details>
#
# 2. **Another scale.** Some recent models scale scores by $1/d_k$ instead of $1/\sqrt{d_k}$. Add it as a
#    third setting in (c), using `refattn.softmax(dots * scale)`. What happens to the largest weight and
#    the entropy as $d_k$ grows, and why?
#    <details><summary>Hint</summary>With $q, k \sim \mathcal N(0, I)$ the scores then have variance
#    $1/d_k$, so they shrink towards 0 and the softmax tends to uniform: the entropy rises towards
#    $\ln 16$, the opposite failure. The case for $1/d_k$ rests on trained models, where $q$ and $k$
#    are correlated and $q \cdot k$ grows like $d_k$ rather than $\sqrt{d_k}$.</details>
#
# 3. **Rotations compose.** Check numerically that $R_a R_b = R_{a+b}$ and $R_k^\top = R_{-k}$ with
#    `refattn.sinusoidal_rotation`. Use them to show that $PE_p R_a \cdot PE_q R_a = PE_p \cdot PE_q$:
#    shifting both positions leaves the dot product unchanged.
#    <details><summary>Hint</summary>Each $R_k$ is block-diagonal with 2 × 2 rotations by $k\omega_i$,
#    and rotations by angles add. <code>check(R(a) @ R(b), R(a + b))</code> is one line.</details>
#
# 4. **The fully-masked recipe.** Reproduce `fully_masked="uniform"` from (d) "from the equation": fill
#    the disallowed scores with $-10^9$ and apply a plain softmax. Assert it against
#    `refattn.scaled_dot_product_attention(..., causal="bottom-right", fully_masked="uniform")`. Then put a
#    NaN in a masked-out key and see which of the two survives.
#    <details><summary>Hint</summary><code>np.where(refattn.causal_mask(n, m,
#    causal="bottom-right"), S, -1e9)</code>. In an all-masked row every score is equal, so the
#    softmax is $1/m$.</details>
#
# 5. **Memory of the cache.** For the paper's base model ($d_\text{model} = 512$, $h = 8$,
#    $d_k = d_v = 64$, $N = 6$ decoder layers) in float32, how many bytes does the self-attention cache
#    hold per sequence after 2048 tokens? Count with `cache.k.shape` on the tiny model in (h), then
#    scale up with the formula.
#    <details><summary>Hint</summary>Keys and values: $2 \cdot N \cdot h \cdot t \cdot d_k \cdot 4$
#    bytes, plus the cross-attention memory $2 \cdot N \cdot h \cdot n_\text{src} \cdot d_k \cdot 4$,
#    which is projected once.</details>
