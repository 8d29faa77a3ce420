# %% [markdown]
# # Content-based sparse attention and query prototypes
#
# **T. Lin, Y. Wang, X. Liu, X. Qiu, "A Survey of Transformers", AI Open 2022,
# [arXiv:2106.04554](https://arxiv.org/abs/2106.04554) (v2), §4.1.2 "Content-based Sparse Attention" and
# §4.3.1 "Attention with Prototype Queries".** Each model paper is cited where it appears.
#
# The position-based patterns of notebook 02 decide *before seeing the data* which (i, j) pairs are
# scored. The mechanisms here decide *from the content*: queries and keys are clustered (Routing
# Transformer), hashed (Reformer), sorted (Sinkhorn attention) or picked by an edge predictor (SAC), or
# the queries are replaced by a few prototypes (clustered attention, Informer). The promise is the same:
# score only the pairs that would carry most of the softmax mass.
#
# > **Why these are hard to trust.** Their clustering, hashing and sampling are random, and
# > implementations draw them inside fused kernels, so no attention map can be read out and no two
# > implementations can be compared on the same draw. In refattn every draw is an option of the
# > registry's `apply`, drawn from `rng` when not given and returned with `return_draws=True`; and
# > `return_weights=True` scatters each mechanism's effective n × m matrix back, so it can be set
# > beside exact softmax attention.
#
# The plain text paraphrases the survey and the cited papers. Commentary is set apart as block
# quotes. Every claim that can be checked is an `assert`.
#
# **Contents.** (a) one draw, fed back · (b) Routing Transformer: clusters, round by round ·
# (c) Reformer: hashing, sorting, chunks, and the collision probability · (d) Sinkhorn attention: a
# doubly stochastic sorting matrix · (e) SAC: edges from a predictor · (f) clustered and improved
# clustered attention · (g) Informer: which queries matter · (h) how much softmax mass each keeps, on
# structured and unstructured input · (i) exercises

# %%
import numpy as np

import refattn
from refattn import registry, viz
from refattn.figures.common import group_strips

np.set_printoptions(precision=3, suppress=True, linewidth=110)
rng = np.random.default_rng(20210615)   # arXiv:2106.04554v2 date; every draw below comes from rng


def structured(n, d=8, directions=3, spread=0.25, seed=0):
    """q = k (self-attention) drawn around a few random directions: content with clusters in it."""
    g = np.random.default_rng(seed)
    centres = g.standard_normal((directions, d))
    centres *= 2.0 / np.linalg.norm(centres, axis=1, keepdims=True)
    x = centres[g.integers(0, directions, n)] + spread * g.standard_normal((n, d))
    return x, x.copy(), g.standard_normal((n, d))


def softmax_weights(q, k, v, causal=False):
    return refattn.scaled_dot_product_attention(q, k, v, causal=causal, return_weights=True)[1]


def mass_kept(A_exact, allowed):
    """The share of exact softmax's mass that falls on the pairs a mechanism computed, per row, averaged."""
    return float(np.mean(np.sum(np.where(allowed, A_exact, 0.0), axis=-1)))


# %% [markdown]
# ## (a) One draw, fed back
#
# Every registry entry takes `rng` (a seed or a `numpy.random.Generator`) and returns the draws it made
# when asked. Given back as options, without `rng`, they reproduce the result bit for bit: this is how
# another implementation is fed the very same centroids, rotations, noise or samples.

# %%
q, k, v = structured(24)
routing = registry.get("routing")
first = routing.apply(q, k, v, rng=7, return_draws=True)
print("routing draws:", {name: np.shape(x) for name, x in first.draws.items()})
again = routing.apply(q, k, v, **first.draws)                     # no rng: the draw is explicit
assert np.array_equal(again.output, first.output)
for record in registry.all():
    if record.draws and record.family in ("sparse", "compressed"):
        print(f"{record.id:<20} draws {record.draws}")

# %% [markdown]
# ## (b) Routing Transformer: clusters, round by round
#
# **A. Roy, M. Saffar, A. Vaswani, D. Grangier, "Efficient Content-Based Sparse Attention with Routing
# Transformers", TACL 2021, [arXiv:2003.05997](https://arxiv.org/abs/2003.05997).** Queries and keys
# share k centroids μ; each token is routed to its nearest centroid (by direction), and a query attends
# only the keys routed to its own centroid. The centroids learn by online k-means over the training
# batches, μ ← λμ + (1 − λ)/2 (Σ q̂_i + Σ k̂_j) over each cluster's members.
#
# Below, the same input is routed by the drawn centroids and then after update steps with λ = 0.9.
# The colour strips beside each matrix are the clusters of the queries (left) and keys (top); grey
# pairs are not computed.

# %%
from refattn.sparse.routing import draw_centroids, nearest_centroid, update_centroids

q, k, v = structured(24, seed=3)
A_exact = softmax_weights(q, k, v)
mu = draw_centroids(rng, 3, q.shape[-1])
steps, kept = {}, {}
for step in range(9):
    result = routing.apply(q, k, v, centroids=mu, return_weights=True)
    steps[step] = (mu, result)
    kept[step] = mass_kept(A_exact, result.allowed)
    mu = update_centroids(mu, q, k, decay=0.9)
print("softmax mass on the routed pairs, step by step:", np.round(list(kept.values()), 2))
shown = (0, 1, 2, 8)

fig = viz.figure((12, 3.4))
axes = viz.draw_attention(fig, np.stack([steps[s][1].weights for s in shown]),
                          allowed=np.stack([steps[s][1].allowed for s in shown]),
                          titles=[f"step {s}: {100 * kept[s]:.0f}% of softmax's mass" for s in shown],
                          annotate=False)
for ax, s in zip(axes.flat, shown, strict=True):
    group_strips(ax, nearest_centroid(q, steps[s][0]), nearest_centroid(k, steps[s][0]))
fig

# %% [markdown]
# > A few updates move the random centroids onto the input's directions: from step 4 on, the routed
# > pairs hold about four fifths of softmax's mass with about a third of the n² pairs computed, and
# > the clusters no longer change. The update is a training step (the paper runs it on every batch); `apply` only routes by
# > the centroids it is given. One cluster is exactly softmax attention (the record's exact limit,
# > `num_clusters=1`).

# %%
one = routing.apply(q, k, v, num_clusters=1, rng=0, return_weights=True)
np.testing.assert_allclose(one.weights, A_exact, rtol=1e-12, atol=1e-12)
computed = steps[8][1].allowed.mean()
print(f"share of the n² pairs computed at step 8: {computed:.2f}")
assert kept[8] > 0.75 and computed < 0.4

# %% [markdown]
# ## (c) Reformer: hashing, sorting, chunks, and the collision probability
#
# **N. Kitaev, Ł. Kaiser, A. Levskaya, "Reformer: The Efficient Transformer", ICLR 2020,
# [arXiv:2001.04451](https://arxiv.org/abs/2001.04451), §2.** Queries and keys are shared (the keys
# are the unit-normalised queries), and hashed by angular LSH, h(x) = argmax([xR; −xR]) with a random
# R of b/2 columns: nearby directions tend to share a bucket. The tokens are sorted by bucket (then by
# position) and cut into chunks of c; each chunk attends to its own chunk and the one before it, within
# the same bucket. A token attends to itself only when it has nothing else. Several hash rounds are
# merged by their log-sum-exp, so the result is softmax attention over the union of the rounds' pairs.

# %%
from refattn.sparse.reformer_lsh import draw_lsh_rotations, lsh_buckets, lsh_chunks, lsh_collision_probability

x, _, v = structured(32, d=8, directions=4, spread=0.3, seed=6)
reformer = registry.get("reformer_lsh")
rotations = draw_lsh_rotations(rng, 8, 4, num_rounds=4)               # 4 rounds of b = 4 buckets
buckets = lsh_buckets(x, rotations)                                 # (rounds, n)
order, chunk = lsh_chunks(buckets[0], 8)
print("round 0, buckets in sorted order:", buckets[0][order])
print("             chunk of each rank:", chunk[order])

unit = x / np.linalg.norm(x, axis=-1, keepdims=True)
not_self = ~np.eye(32, dtype=bool)
_, A_shared = refattn.scaled_dot_product_attention(x, unit, v, mask=not_self, return_weights=True)
panels = {f"{r} round{'s' if r > 1 else ''}": reformer.apply(x, x, v, rotations=rotations[:r], chunk_length=8,
                                                              return_weights=True)
          for r in (1, 2, 4)}
fig = viz.figure((13, 3.4))
axes = viz.draw_attention(fig, np.stack([p.weights for p in panels.values()] + [A_shared]),
                          allowed=np.stack([p.allowed for p in panels.values()] + [not_self]),
                          titles=[f"{name}: {100 * mass_kept(A_shared, p.allowed):.0f}% of the mass"
                                  for name, p in panels.items()] + ["shared-QK softmax, no self"],
                          annotate=False)
group_strips(axes.flat[0], buckets[0], buckets[0])
fig

# %% [markdown]
# > More rounds catch more of the pairs that matter: each round is another chance for two nearby
# > tokens to share a bucket. With one bucket and one chunk holding every token, LSH attention is
# > exactly shared-QK softmax attention with the self-exclusion, the limit the module's tests hold.

# %%
one = reformer.apply(x, x, v, num_buckets=1, num_rounds=1, chunk_length=32, rng=0, return_weights=True)
np.testing.assert_allclose(one.weights, A_shared, rtol=1e-12, atol=1e-12)

# %% [markdown]
# **The collision probability.** For two unit vectors at angle θ, one hash round with b = 2 buckets
# (one random hyperplane) puts them in the same bucket with probability 1 − θ/π; for more buckets the
# closed form is an integral over the Gaussian projections (`lsh_collision_probability`). Below, the
# frequency over 4000 independent rounds per angle, against the closed form. Each point is a binomial
# mean, so it lies within 5 standard deviations of the closed form unless something is wrong (a false
# alarm has probability below 6e-7 per point, about 3e-5 for the whole figure).

# %%
angles = np.linspace(0.0, np.pi, 19)
trials = 4000
fig = viz.figure((6.5, 3.6))
ax = fig.add_subplot()
for b, color in zip((2, 4, 8), ("#4e79a7", "#f28e2b", "#59a14f"), strict=True):
    R = draw_lsh_rotations(rng, 8, b, num_rounds=trials)
    frequency = []
    for theta in angles:
        pair = np.stack([np.eye(8)[0], np.cos(theta) * np.eye(8)[0] + np.sin(theta) * np.eye(8)[1]])
        h = lsh_buckets(pair, R)                                    # (trials, 2)
        frequency.append(np.mean(h[:, 0] == h[:, 1]))
    p = lsh_collision_probability(angles, b)
    sigma = np.sqrt(p * (1 - p) / trials)
    assert np.all(np.abs(np.array(frequency) - p) <= 5 * sigma + 1e-12), b
    ax.plot(angles, p, color=color, label=f"closed form, b = {b}")
    ax.plot(angles, frequency, "o", color=color, ms=3, label=f"{trials} rounds, b = {b}")
ax.set_xlabel("angle θ between the two vectors")
ax.set_ylabel("P(same bucket)")
ax.legend(fontsize=7)
fig

# %% [markdown]
# ## (d) Sinkhorn attention: a doubly stochastic sorting matrix
#
# **Y. Tay, D. Bahri, L. Yang, D. Metzler, D.-C. Juan, "Sparse Sinkhorn Attention", ICML 2020,
# [arXiv:2002.11296](https://arxiv.org/abs/2002.11296).** The keys are cut into blocks; a small sorting
# network scores, from each block's summary, which block should take which place. Sinkhorn balancing
# (dividing rows, then columns, by their sums, over and over) turns exp(scores/τ) into a soft
# permutation P: a doubly stochastic matrix. Each block of queries then attends to its own block and to
# the block P sorts into its place.
#
# Balancing converges: after each iteration the columns sum to 1 exactly, and the rows approach 1
# geometrically (Birkhoff's contraction, the bound the module's tests hold it to).

# %%
from refattn.sparse import block_summaries, draw_gumbel, init_sort_net, sinkhorn_normalize, sort_net_scores

q, k, v = structured(32, seed=2)
block, N = 4, 8
net, gumbel = init_sort_net(rng, 8, N), draw_gumbel(rng, N)
log_alpha = (sort_net_scores(block_summaries(k, block), net) + gumbel) / 0.75
row_error = []
for iterations in range(1, 21):
    P = sinkhorn_normalize(log_alpha, iterations)
    assert np.allclose(P.sum(axis=0), 1.0, rtol=0, atol=1e-12)          # columns: exact after every iteration
    row_error.append(np.abs(P.sum(axis=1) - 1.0).max())
assert all(b <= a for a, b in zip(row_error, row_error[1:], strict=False))  # the rows only get closer
print("largest |row sum − 1| after 1, 5, 10, 20 iterations:", np.array(row_error)[[0, 4, 9, 19]])

fig = viz.figure((11, 3.2))
left, right = fig.subfigures(1, 2, width_ratios=[1.6, 1])
viz.draw_attention(left, np.stack([sinkhorn_normalize(log_alpha, t) for t in (1, 7)]),
                   titles=["P after 1 iteration", "P after 7 (the default)"], xlabel="block J (sorted from)",
                   ylabel="place I", vmax=1.0)
ax = right.add_subplot()
ax.semilogy(range(1, 21), row_error, "o-")
ax.set_xlabel("Sinkhorn iterations")
ax.set_ylabel("max |row sum − 1|")
fig

# %% [markdown]
# ## (e) SAC: edges from a predictor
#
# **X. Li, Y. Meng, M. Zhou, Q. Han, F. Wu, J. Li, "SAC: Accelerating and Structuring Self-Attention via
# Sparse Adaptive Connection", NeurIPS 2020, [arXiv:2003.09833](https://arxiv.org/abs/2003.09833).**
# An edge predictor (in the paper an LSTM trained with reinforcement learning) chooses which (i, j)
# pairs are edges of the attention graph; attention runs on those edges only. refattn takes the edge
# list (or the predictor's scores) explicitly, so a learned predictor's choice can be fed in, and has a
# small seeded bilinear predictor for demonstrations: each query keeps its r best-scored keys.

# %%
from refattn.sparse import init_sac_predictor, predict_edges

q, k, v = structured(24, seed=4)
predictor = init_sac_predictor(rng, 8)
edges = predict_edges(q, k, predictor, r=4)
sac = registry.get("sac").apply(q, k, v, predictor=predictor, r=4, return_weights=True)
print("edges (i, j), the first six:", edges[:6].tolist())
assert sac.allowed.sum() == 24 * 4                                # r = 4 keys per query
every = registry.get("sac").apply(q, k, v, predictor=predictor, r=24, return_weights=True)
np.testing.assert_allclose(every.weights, softmax_weights(q, k, v), rtol=1e-12, atol=1e-12)   # all edges: exact
viz.plot_attention(sac.weights, allowed=sac.allowed, titles="SAC, r = 4 edges per query (grey: no edge)",
                   annotate=False, size=3.2)

# %% [markdown]
# ## (f) Clustered and improved clustered attention
#
# **A. Vyas, A. Katharopoulos, F. Fleuret, "Fast Transformers with Clustered Attention", NeurIPS 2020,
# [arXiv:2007.04825](https://arxiv.org/abs/2007.04825).** The queries (only the queries) are hashed to
# B bits by random hyperplanes and grouped by K-means in Hamming space; each cluster's centroid attends
# to every key, and every member takes its centroid's attention. The *improved* form recomputes, for
# each member, the exact attention on its cluster's top-k keys, and gives the rest of the mass as the
# clustered approximation does.

# %%
from refattn.compressed import cluster_queries

q, k, v = structured(24, directions=4, seed=5)
A_exact = softmax_weights(q, k, v)
planes_rng = np.random.default_rng(1)
clusters = cluster_queries(q, 4, rng=planes_rng)
results = {
    "clustered, C = 4": registry.get("clustered").apply(q, k, v, assignment=clusters, return_weights=True),
    "improved, C = 4, top-k = 3": registry.get("improved_clustered").apply(q, k, v, assignment=clusters, top_k=3,
                                                                        return_weights=True),
    "exact softmax": refattn.mechanism.AttentionResult(A_exact @ v, A_exact),
}
fig = viz.figure((11, 3.6))
axes = viz.draw_attention(fig, np.stack([r.weights for r in results.values()]), titles=list(results),
                          annotate=False)
for ax in axes.flat[:2]:
    group_strips(ax, clusters)
for name, r in results.items():
    print(f"{name:<28} relative output error {np.linalg.norm(r.output - A_exact @ v) / np.linalg.norm(A_exact @ v):.3f}")
fig

# %% [markdown]
# > Every member of a cluster gets the same row: the effective matrix has at most C distinct rows. The
# > improved form is never farther from softmax in L1 (row by row) than the clustered one, and with
# > C = n (each query alone) or top-k = m both are exact softmax attention.

# %%
exact = registry.get("clustered").apply(q, k, v, assignment=np.arange(24), return_weights=True)
np.testing.assert_allclose(exact.weights, A_exact, rtol=1e-12, atol=1e-12)
l1 = {name: np.abs(r.weights - A_exact).sum(axis=-1) for name, r in results.items()}
assert np.all(l1["improved, C = 4, top-k = 3"] <= l1["clustered, C = 4"] + 1e-12)

# %% [markdown]
# ## (g) Informer: which queries matter
#
# **H. Zhou et al., "Informer: Beyond Efficient Transformer for Long Sequence Time-Series Forecasting",
# AAAI 2021, [arXiv:2012.07436](https://arxiv.org/abs/2012.07436).** A query whose attention is close
# to uniform might as well output the mean of the values. The *sparsity measure* M(q_i, K) =
# ln Σ_j e^{s_ij} − mean_j s_ij (Eq. 2, the KL divergence of uniform from the query's attention, up to
# ln m) is bounded by the max-mean M̄ = max_j s_ij − mean_j s_ij (Eq. 4), which needs only a sample of
# U = ⌈c ln m⌉ keys per query. The u = ⌈c ln n⌉ queries of largest M̄ attend fully; the others output
# mean(V).

# %%
from refattn.compressed import draw_sampled_keys, informer_counts, query_sparsity, top_queries

n = 32
q, k, v = (rng.standard_normal((n, 8)) for _ in range(3))
q[[3, 17, 25]] *= 6.0                                             # three peaked queries
u, U = informer_counts(n, n, factor=2)
sample = draw_sampled_keys(rng, n, n, U)
M_bar = query_sparsity(q, k, sample)
M_exact = query_sparsity(q, k, kind="lse")
active = top_queries(M_bar, u)
print(f"u = {u} active queries, U = {U} sampled keys each; picked:", sorted(active.tolist()))
assert {3, 17, 25} <= set(active.tolist())

fig = viz.figure((10, 3))
ax = fig.add_subplot()
colors = np.where(np.isin(np.arange(n), active), "#f28e2b", "#4e79a7")
ax.bar(np.arange(n), M_bar, color=colors, label="M̄ on the sample (orange: active)")
ax.plot(np.arange(n), M_exact - np.log(n), "ko", ms=3, label="exact M − ln m (Eq. 2)")
ax.set_xlabel("query i")
ax.legend(loc="upper right")
fig

# %% [markdown]
# > The peaked queries have a large measure and are picked whichever keys are sampled. With u = n every
# > query is active and ProbSparse is exact softmax attention (the record's exact limit). Its causal
# > form chooses the active queries over the whole sequence, so a later token can change an earlier
# > output: the registry records it as `future_independent=False`, and a decoder with a key/value cache
# > does not reproduce training.

# %%
informer = registry.get("informer")
full = informer.apply(q, k, v, num_top=n, sampled_keys=sample, return_weights=True)
np.testing.assert_allclose(full.weights, softmax_weights(q, k, v), rtol=1e-12, atol=1e-12)
assert not informer.future_independent

# %% [markdown]
# ## (h) How much softmax mass each keeps, on structured and unstructured input
#
# Each mechanism's effective matrix Ã beside exact softmax A, on self-attention input (q = k, as
# Reformer requires) of n = 64 tokens: *structured* input is drawn around 4 directions, *unstructured*
# input is Gaussian. The measure is the mass the two rows share, Σ_j min(Ã_ij, A_ij) averaged over the
# rows (1 − the total-variation distance): 1 means exact softmax attention. Every mechanism runs with
# its registry defaults and `rng=0`; SAC also runs with the "oracle" predictor W = I, whose bilinear
# score is q·k itself, as a trained predictor would approach.

# %%
from refattn.sparse import SacPredictor

CONTENT = [r for r in registry.all() if r.family in ("sparse", "compressed")   # this notebook's mechanisms
           and (r.content_selected or r.id in ("clustered", "informer"))]
LEARNED = {"sac", "sinkhorn"}                  # their selection comes from parameters that are trained
n = 64
gaussian = np.random.default_rng(11).standard_normal((2, n, 8))
inputs = {"structured": structured(n, directions=4, spread=0.2, seed=11),
          "unstructured": (gaussian[0], gaussian[0].copy(), gaussian[1])}
runs = {r.id: (r, {}) for r in CONTENT} | {"sac, W = I": (registry.get("sac"), {"predictor": SacPredictor(np.eye(8))})}
shared = {}
print(f"{'mechanism':<20}" + "".join(f"{name:>14}" for name in inputs))
for label, (record, options) in runs.items():
    for name, (q, k, v) in inputs.items():
        A = softmax_weights(q, k, v)
        W = record.apply(q, k, v, rng=0, return_weights=True, **options).weights.reshape(n, n)
        shared[label, name] = float(np.mean(np.minimum(W, A).sum(axis=-1)))
    print(f"{label:<20}" + "".join(f"{shared[label, name]:>14.3f}" for name in inputs))

# %% [markdown]
# > Selection from the content's geometry pays off where the content has structure: routing, hashing,
# > clustering and the sparsity measure all share more of softmax's mass on the clustered input than on
# > Gaussian input, where no small set of pairs holds most of the mass. SAC's predictor and Sinkhorn's
# > sorting network are *learned*: with the random parameters of an untrained model they choose pairs
# > unrelated to the scores and keep little, whatever the input. SAC with a predictor that scores q·k
# > (W = I) keeps each query's r best keys, the most any r keys can hold, and so beats the random
# > predictor on both inputs; but a fixed r keeps *less* on the structured input, where each query's
# > mass spreads over the ~16 near-copies of its direction, than on Gaussian input, where it
# > concentrates on a few keys. Which selection suits which input is a property of the mechanism.

# %%
for label in runs:
    if label in {r.id for r in CONTENT} - LEARNED:
        assert shared[label, "structured"] > shared[label, "unstructured"], label
for name in inputs:
    assert shared["sac, W = I", name] > shared["sac", name]
assert shared["sac, W = I", "structured"] < shared["sac, W = I", "unstructured"]

# %% [markdown]
# ## (i) Exercises
#
# 1. Feed `routing.apply(..., return_draws=True).draws["centroids"]` to your own Routing
#    implementation and compare outputs; then pass `balanced=True` (the official code's top-k routing)
#    and find an input where a later token changes an earlier causal output.
# 2. Measure Reformer's share of softmax mass against the number of hash rounds on the structured input
#    of (c), and the cost: how many rounds until the mass stops growing?
# 3. Run Sinkhorn balancing with `temperature` 0.1 and 10: how does the number of iterations needed for
#    rows within 1e-6 of 1 change, and why (look at the contraction bound in the module's docstring)?
# 4. For Informer, compare `measure="paper"` with the official code's `measure="official"` on an input
#    with n != m: which queries change, and by how much does the output move?
# 5. Improved clustered attention with `top_k` from 0 to m: plot the row L1 distance to softmax. Is it
#    monotone?
