# %% [markdown]
# # Sparse attention: patterns, graphs, and what they keep
#
# **T. Lin, Y. Wang, X. Liu, X. Qiu, "A Survey of Transformers", AI Open 2022,
# [arXiv:2106.04554](https://arxiv.org/abs/2106.04554) (v2), §4.1 "Sparse Attention", Eq. (9), Figs. 4–6.**
# Each model paper is cited where its pattern appears.
#
# $$
# \hat A_{ij} =
# \begin{cases}
# q_i k_j^\top / \sqrt{d} & \text{if query } i \text{ attends to key } j \ \ \big((i, j) \text{ kept}\big) \\
# -\infty & \text{otherwise}
# \end{cases}
# \qquad
# A = \operatorname{softmax}(\hat A), \qquad \operatorname{out} = A V
# \qquad\qquad (9)
# $$
#
# Row $i$ keeps a set $J_i$ of keys, so $\operatorname{out}_i = \sum_{j \in J_i} \operatorname{softmax}_j(\hat A_{i,J_i})\, v_j$.
# Eq. (9) of the survey writes $q_i k_j^\top$; refattn keeps the $1/\sqrt{d}$ of the vanilla Eq. (1).
#
# The plain text paraphrases the survey and the cited papers, with their section numbers.
# Commentary is set apart as block quotes. Every derivation is checked against refattn to 1e-12, and
# every structural claim about a pattern (a union, a limit, a tiling) is an `assert`.
#
# > **Why sparse.** Dense attention scores all $n^2$ pairs. A *position-based* sparse pattern fixes,
# > before seeing the data, which $(i, j)$ pairs are scored, so the work is the number of kept pairs
# > (nnz), not $n^2$. The survey (§4.1.1) builds every such pattern from five *atomic* ones (§4.1.1.1,
# > Fig. 4), combines them into the *compound* patterns of published models (§4.1.1.2, Fig. 5), and adds
# > a few *extended* ones for trees and images (§4.1.1.3, Fig. 6). H.-y. Lee's lecture on
# > self-attention variants (NTU, *Machine Learning* 2022) walks the same path: local attention, then
# > a stride, then global tokens, and, to the question of which one is best, the answer that different
# > heads can use different patterns.
# > Content-based sparse attention (§4.1.2: Reformer, Routing Transformer), where the pattern depends
# > on $q$ and $k$, is not covered here.
#
# **Contents.** (a) from the equation · (b) the five atomic patterns (§4.1.1.1, Fig. 4) · (c) the
# bipartite graph · (d) one row at a time, and the receptive field over layers · (e) compound patterns
# (§4.1.1.2, Fig. 5) · (f) extended patterns (§4.1.1.3, Fig. 6) · (g) how much attention mass a
# pattern keeps · (h) cost versus $n$ · (i) exercises

# %%
import time

import matplotlib as mpl
import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.patches import Rectangle

import refattn
from refattn import sparse, viz
from refattn.sparse import SparsePattern

np.set_printoptions(precision=3, suppress=True, linewidth=110)
rng = np.random.default_rng(20210615)   # arXiv:2106.04554v2 date; every draw below comes from rng


def check(mine, ref):
    # "from the equation" cells end here: our few NumPy lines against refattn, to 1e-12
    np.testing.assert_allclose(mine, ref, rtol=1e-12, atol=1e-12)


def styled():
    # hand-made plots (graphs, trees, curves) use the same style file as refattn.viz
    return mpl.style.context(viz.STYLE_PATH)


# %% [markdown]
# ## (a) From the equation
#
# Sparse attention restricts the computation: one computes the similarity score of the query-key pairs according to
# pre-defined patterns (§4.1, before Eq. 9), and in implementation the $-\infty$ item is usually
# not stored in memory so as to decrease memory footprint (§4.1, after Eq. 9).
#
# > A pattern in refattn is a `SparsePattern`: the kept pairs in CSR form, the way
# > `scipy.sparse.csr_array` stores a boolean matrix without its values. `indices[indptr[i]:indptr[i + 1]]`
# > are the keys of query $i$, sorted. `to_mask()` materialises the dense boolean mask for small $n$.
# >
# > The definition is the dense mask applied to the dense scores: put $-\infty$ where the pattern says
# > no, then take the usual softmax. `sparse_attention(..., method="equation")` does exactly that.
# > `method="csr"` is a Numba kernel that visits only the kept pairs and never stores a $-\infty$:
# > its weights come back as one number per kept pair, in CSR order.

# %%
n, d = 12, 8
q, k, v = rng.standard_normal((3, n, d))
pattern = sparse.longformer_pattern(n, 4, global_indices=[0])          # window 2 each side, token 0 global
S = np.where(pattern.to_mask(), q @ k.T / np.sqrt(d), -np.inf)          # (n, n)  Â: q_i·k_j/√d kept, −∞ elsewhere
A = np.exp(S - S.max(axis=-1, keepdims=True))
A = A / A.sum(axis=-1, keepdims=True)                                   # (n, n)  softmax over the kept keys
out = A @ v                                                             # (n, d_v)

out_eq, A_eq = sparse.sparse_attention(q, k, v, pattern, return_weights=True)                   # dense masked path
out_csr, w_csr = sparse.sparse_attention(q, k, v, pattern, method="csr", return_weights=True)   # kept pairs only
check(out, out_eq)
check(out, out_csr)
check(A, A_eq)
check(A, pattern.to_dense(w_csr))                                       # scatter the nnz weights back to n × n
print(pattern)
print("indptr :", pattern.indptr)
print("row 0 keeps", pattern.row(0), " row 5 keeps", pattern.row(5))
print(f"equation path: weights {A_eq.shape} = n × n;  csr path: weights {w_csr.shape} = one per kept pair "
      f"(nnz = {pattern.nnz} of n² = {n * n})")

# %%
fig = viz.figure((8.6, 3.6))
left, right = fig.subfigures(1, 2)
viz.draw_attention(left, S, vmin=None, cmap="RdBu_r", titles="Â: kept scores; −∞ drawn grey")
viz.draw_attention(right, A, vmax=1.0, titles="A = softmax(Â), row by row")
fig

# %% [markdown]
# > The grey cells of $\hat A$ are exactly the zeros of $A$: a masked pair gets weight 0, not a small
# > number. Row 0 is the global token: it attends to every key, and every row attends to it (column
# > 0). The other rows see a window of 5 keys (2 on each side and the token itself) plus key 0.

# %% [markdown]
# **Takeaways.**
#
# - Sparse attention is dense attention with $-\infty$ outside the pattern: a masked pair gets weight
#   exactly 0, and each row's softmax runs over its kept keys only.
# - The CSR path (`method="csr"`) visits only the kept pairs and returns one weight per pair; it equals
#   the dense masked path, and the NumPy lines above, to $10^{-12}$.

# %% [markdown]
# ## (b) The five atomic patterns (survey §4.1.1.1, Fig. 4)
#
# - **Global.** To keep long-range dependencies, one can add some global nodes as the hub for
#   information propagation between nodes: they attend to every node, and every node attends to them
#   (survey §4.1.1.1, Fig. 4a; Longformer and BigBird call it global attention).
# - **Band** (a.k.a sliding window attention or local attention). Since most data come with a strong
#   property of locality, it is natural to restrict each query to attend to its neighbor nodes
#   (Fig. 4b).
# - **Dilated.** Analogous to dilated CNNs, the band's receptive field grows at no extra cost by
#   using a dilated window with gaps of dilation $w_d \ge 1$ (Fig. 4c). With an unlimited window and a
#   large $w_d$ it becomes *strided* attention (Sparse Transformer).
# - **Random.** To increase the ability of non-local interactions, a few edges are randomly sampled
#   for each query (Fig. 4d; BigBird, M. Zaheer et al., arXiv:2007.14062v2, §2).
# - **Block local.** The sequence is cut into non-overlapping query blocks, each of which is associated
#   with a local memory block (Fig. 4e; Image Transformer, N. Parmar et al., arXiv:1802.05751v3, §3.2).
#
# > **refattn's conventions** (stated in each builder's docstring, checked below):
# > - `band_pattern(n, w)`: the window is **inclusive** with **$w$ keys on each side**, so
# >   $J_i = \{j : |i - j| \le w\}$, $2w + 1$ keys away from the ends. Causal: $i - w \le j \le i$.
# > - `dilated_pattern(n, w, w_d)`: $w$ keys on each side, $w_d$ apart (receptive field $2 w w_d + 1$).
# > - `global_pattern(n, G)`: rows in $G$ are full, and every row keeps the columns $G$.
# > - `random_pattern(n, r, rng=...)`: $r$ distinct keys per row (causal: drawn from $j \le i$).
# > - `block_local_pattern(n, b)`: blocks of $b$ positions, block-diagonal.
# > - `causal=True` keeps $j \le i$. For the deterministic builders it is the non-causal pattern
# >   followed by `.causal()`.

# %%
n = 16
atomic = {
    "(a) global, G = {0, 1}": lambda causal: sparse.global_pattern(n, [0, 1], causal=causal),
    "(b) band, w = 2": lambda causal: sparse.band_pattern(n, 2, causal=causal),
    "(c) dilated, w = 2, w_d = 2": lambda causal: sparse.dilated_pattern(n, 2, 2, causal=causal),
    "(d) random, r = 3": lambda causal: sparse.random_pattern(n, 3, causal=causal, rng=rng),
    "(e) block local, b = 4": lambda causal: sparse.block_local_pattern(n, 4, causal=causal),
}
patterns = {causal: [make(causal) for make in atomic.values()] for causal in (False, True)}
masks = np.array([[p.to_mask() for p in patterns[causal]] for causal in (False, True)])
titles = [list(atomic), [f"causal {name[:3]}" for name in atomic]]
viz.plot_pattern(masks, titles=titles, size=2.1,
                 suptitle="Atomic sparse attention patterns (survey Fig. 4), n = 16; bottom row: causal=True")

# %%
band = sparse.band_pattern(n, 2)
print("band w=2:        row 8 keeps", band.row(8), "  row 0 keeps", band.row(0))
print("band w=2 causal: row 8 keeps", sparse.band_pattern(n, 2, causal=True).row(8))
print("dilated w=2, w_d=2: row 8 keeps", sparse.dilated_pattern(n, 2, 2).row(8))
assert band.row(8).tolist() == [6, 7, 8, 9, 10]                        # inclusive: w each side + i, 2w + 1 keys
assert sparse.dilated_pattern(n, 2, 1) == band                         # dilation 1 is the band
assert sparse.dilated_pattern(n, n, 4) == sparse.strided_pattern(n, 4) # unlimited window + dilation: strided
assert sparse.band_pattern(n, n) == SparsePattern.full(n, n)           # exact limit: w ≥ n is dense attention
for name, make in atomic.items():
    if "random" not in name:                                           # causal = the causal part of the pattern
        assert make(True) == make(False).causal(), name
random_causal = patterns[True][3]
assert np.all(random_causal.row_counts() == np.minimum(3, np.arange(n) + 1))   # r keys, fewer when i < r
print("keys per row (min, max):")
for name, p in zip(atomic, patterns[False], strict=True):
    print(f"  {name:<30} {p.row_counts().min():>2} {p.row_counts().max():>2}   nnz = {p.nnz:>3} of {n * n}")


# %% [markdown]
# > Only the global pattern has full rows: its cost is about $g(2n)$ pairs for $g$ global tokens, but
# > its rows are as long as the sequence. The others have a bounded number of keys per row, so their
# > nnz grows linearly in $n$. Each builder writes the CSR arrays directly, in $O(\text{nnz})$, so
# > building a band at $n = 65536$ never allocates $n^2$ booleans (section (h)).

# %% [markdown]
# **Takeaways.**
#
# - Band, dilated, random and block local attention keep a bounded number of keys per row, so their
#   nnz grows linearly in $n$; the global pattern's rows for global tokens span the whole sequence.
# - The limits are exact and asserted: a band with $w \ge n$ is dense attention, dilation 1 is the
#   band, an unlimited dilated window is strided attention, and each deterministic pattern's causal form
#   is the non-causal one with $j \le i$ kept.

# %% [markdown]
# ## (c) Attention as a bipartite graph
#
# The survey's other view (§4.1): standard attention is a complete bipartite graph in which every
# query receives information from every memory node; sparse attention is a sparse graph, the same
# nodes with some edges removed.
#
# > Queries on the left, keys on the right, an edge $i \to j$ for every kept pair: the matrix is the
# > graph's biadjacency matrix, and nnz is its number of edges. The sparse example is the
# > Longformer-style pattern of (a) at $n = 8$: a window of one key on each side, plus token 0 as a
# > global hub (its edges in red). Any two tokens are at most two hops apart through the hub.

# %%
def draw_bipartite(ax, pattern, title, hub=()):
    """Queries as a left column, keys as a right column, a line per kept pair (red if it touches a hub)."""
    n, m = pattern.shape
    for i, j in zip(pattern.row_ids().tolist(), pattern.indices.tolist(), strict=True):
        red = i in hub or j in hub
        ax.plot([0, 1], [i, j], color="C1" if red else "#4a5675", lw=1.0, zorder=1,
                antialiased=False)                                   # crisp 1-px lines keep the PNG small
    ax.scatter(np.zeros(n), np.arange(n), s=90, color="white", edgecolor="k", zorder=2)
    ax.scatter(np.ones(m), np.arange(m), s=90, color="white", edgecolor="k", zorder=2)
    for i in range(n):
        ax.text(-0.07, i, f"q{i}", ha="right", va="center")
    for j in range(m):
        ax.text(1.07, j, f"k{j}", ha="left", va="center")
    ax.set(xlim=(-0.3, 1.3), ylim=(max(n, m) - 0.5, -0.5), title=f"{title}\n{pattern.nnz} edges")
    ax.axis("off")


n = 8
dense = SparsePattern.full(n, n)
longformer8 = sparse.band_pattern(n, 1) | sparse.global_pattern(n, [0])
with styled():
    fig = viz.figure((10.5, 3.9))
    graphs, matrix = fig.subfigures(1, 2, width_ratios=[2.1, 1])
    ax_dense, ax_sparse = graphs.subplots(1, 2)
    draw_bipartite(ax_dense, dense, "dense: complete bipartite graph")
    draw_bipartite(ax_sparse, longformer8, "band w = 1 | global {0}", hub=(0,))
    viz.draw_pattern(matrix, longformer8.to_mask(), titles="the same pattern as a matrix")
fig

# %% [markdown]
# **Takeaways.**
#
# - A pattern is the biadjacency matrix of a bipartite graph from queries to keys, and its nnz is the
#   number of edges; dense attention is the complete bipartite graph.
# - A global hub puts any two tokens within two hops of each other, at the cost of one full row and
#   one full column.

# %% [markdown]
# ## (d) One row at a time, and the receptive field over layers
#
# ### Stepping through BigBird's rows
#
# > BigBird (M. Zaheer et al., arXiv:2007.14062v2, §2 and App. D) works in blocks of $b$ tokens. Block
# > row $I$ keeps the window blocks $I - 1, I, I + 1$, the global blocks (the first and the last), and
# > $r$ random blocks. Each frame below shows the whole pattern ($n = 24$, $b = 2$, $r = 1$) in light
# > blue, and in dark the keys that query $i$ keeps. Press ▶ (in a live kernel, `mode="widget"` gives a
# > slider instead). Rows 0–1 and 22–23 are global and see everything. A middle row sees its 3 window
# > blocks, the 2 global blocks and 1 random block: 12 keys, fewer next to the global blocks, where the
# > window overlaps them. Both tokens of a block keep the same keys. The strip under the player shows
# > four of its frames for viewers that drop its JavaScript (GitHub's notebook viewer).

# %%
n, b = 24, 2
bigbird24 = sparse.bigbird_pattern(n, block_size=b, num_random_blocks=1, rng=rng)
mask = bigbird24.to_mask()
frames = np.where(mask, 0.5, 0.0)[None].repeat(n, axis=0)          # (T = n, n, n): the whole pattern, light
frames[np.arange(n), np.arange(n)] = np.where(mask, 1.0, 0.0)      # frame i: row i dark
titles = [f"query {i} (block {i // b}) keeps {bigbird24.row(i).size} keys\n"
          f"key blocks {sorted(set((bigbird24.row(i) // b).tolist()))}" for i in range(n)]
three_levels = ListedColormap(["white", "#b8c7e0", "#1b2a49"])   # not kept / kept by another row / kept by row i
viz.step_through(frames, titles=titles, mode="html", interval=700, cmap=three_levels, vmax=1.0,
                 colorbar=False, size=3.3)

# %%
# four of the player's frames, for viewers that drop its JavaScript: a global row, a row next to a
# global block, a middle row, the last global row
shown = [0, 3, 12, 23]
viz.plot_attention(frames[shown], titles=[f"query {i} (block {i // b}): {bigbird24.row(i).size} keys" for i in shown],
                   cmap=three_levels, vmax=1.0, colorbar=False, size=2.6,
                   suptitle=f"BigBird, n = {n}, b = {b}, r = 1: frames of the player above")


# %% [markdown]
# ### How far information travels in $L$ layers
#
# > One layer lets token $i$ read the tokens in $J_i$. The next layer reads tokens that have already
# > read their own $J_j$, so after $L$ layers token $i$ depends on every token joined to it by a path of
# > at most $L$ edges. The residual connection carries $i$ to itself at every layer. In matrix form the
# > receptive field is the boolean power $R_L = (I \lor P)^L$, where $P$ is the pattern's mask.
# >
# > This is the graph-theoretic argument behind the compound patterns. A band of width $w$ grows the
# > receptive field by $w$ on each side per layer, so it needs $\lceil (n - 1)/w \rceil$ layers to
# > connect the sequence. A global token connects any two tokens in 2 hops. Random edges make an expander, in which
# > paths are logarithmically short (BigBird §2 and §3).

# %%
def receptive_fields(pattern, layers):
    """R_1 … R_L: R_L[i, j] is True when token i's output after L layers depends on token j."""
    P = (pattern.to_mask() | np.eye(pattern.n, dtype=bool)).astype(np.int64)   # + the residual i → i
    R, out = np.eye(pattern.n, dtype=np.int64), []
    for _ in range(layers):
        R = ((R @ P) > 0).astype(np.int64)                                       # one more hop
        out.append(R.astype(bool))
    return np.array(out)                                                         # (L, n, n)


n, layers = 64, 32
band64 = sparse.band_pattern(n, 2)
reach = {
    "band w = 2": band64,
    "band w = 2 | random r = 2": band64 | sparse.random_pattern(n, 2, rng=rng),
    "band w = 2 | global {0}": band64 | sparse.global_pattern(n, [0]),
    "BigBird b = 4, r = 1": sparse.bigbird_pattern(n, block_size=4, num_random_blocks=1, rng=rng),
}
fields = {name: receptive_fields(p, layers) for name, p in reach.items()}
print(f"{'pattern':<28}{'keys/row':>9}{'layers until every token reaches every token':>46}")
for name, R in fields.items():
    full = np.flatnonzero(R.all(axis=(1, 2)))
    print(f"{name:<28}{reach[name].nnz / n:9.1f}{(full[0] + 1 if full.size else '> 32'):>46}")

# %%
with styled():
    fig = viz.figure((9, 3.2))
    ax = fig.subplots()
    for name, R in fields.items():
        ax.plot(np.arange(1, layers + 1), R.mean(axis=(1, 2)), "o-", ms=3, label=name)
    ax.set(xlabel="layers L", ylabel="fraction of pairs (i, j) connected", ylim=(0, 1.03),
           title=f"receptive field over layers, n = {n}")
    ax.legend(loc="lower right")
fig

# %%
token, shown = 40, 8
fig = viz.figure((10, 5.4))
viz.draw_pattern(fig, np.array([R[:shown, token, :] for R in fields.values()])[:, None], titles=list(fields),
                 row_labels=[str(L) for L in range(1, shown + 1)], xlabel="token j", ylabel="layer L",
                 annotate_density=False, suptitle=f"which tokens token {token} depends on after L = 1 … {shown} layers")
fig

# %% [markdown]
# > The band's receptive field grows by exactly $w = 2$ tokens on each side per layer (the widening
# > wedge), and 32 layers are needed before every token reaches every other. Two random keys per row
# > already connect everything in 5 layers. One global token connects everything in 2 layers, which is
# > why most compound patterns below have one (a relay node, [CLS], extra global tokens, global
# > blocks). BigBird combines all three ingredients.

# %% [markdown]
# **Takeaways.**
#
# - After $L$ layers a token depends on every token within $L$ hops of the pattern's graph: a band with
#   $w = 2$ needs 32 layers before every one of 64 tokens reaches every other.
# - Two random keys per row connect all 64 tokens in 5 layers and one global token in 2: reach across
#   layers is what the random and global parts of the compound patterns add.

# %% [markdown]
# ## (e) Compound patterns (survey §4.1.1.2, Fig. 5)
#
# Existing sparse attentions are often composed of more than one of the above atomic patterns
# (§4.1.1.2). Each one below is built with refattn's model builder, and then **asserted equal to the union
# (`|`) of its atomic parts**, wherever the paper defines it that way.
#
# - **Star-Transformer** (Q. Guo et al., arXiv:1902.09113v3, §3.1): a ring of satellites (band of
#   width 3, closed into a ring) and one relay node that is global. The relay is the last position.
# - **Longformer** (I. Beltagy, M. E. Peters, A. Cohan, arXiv:2004.05150v2, §3.1): a sliding window of
#   total size $w$, ½w tokens on each side, optionally dilated, plus symmetric global attention on
#   task tokens ([CLS], the question).
#   `longformer_pattern(n, window=w)` takes the paper's total $w$, so it is the atomic band of
#   $w/2$. Pass `window = 2 * attention_window` to reproduce an official config, which counts one side.
# - **ETC** (J. Ainslie et al., arXiv:2004.08483v5, §3.2): $g$ extra global tokens placed before the
#   $L$ long tokens, with full g2g, g2l and l2g attention, and l2l limited to a radius $r$.
# - **BigBird** (ITC form): window, global and random *blocks*. The token pattern is the block layout
#   expanded to $b \times b$ tiles, so at the block level it is band | global | random.
# - **Sparse Transformer** (R. Child, S. Gray, A. Radford, I. Sutskever, arXiv:1904.10509v1, §4.2–4.3):
#   two factorised heads. In the *strided* version these are the previous $l$ keys and every $l$-th
#   key. In the *fixed* version they are the query's own block and the last $c$ "summary" positions of
#   every block. `part=None` is the merged head $A^{(1)} \cup A^{(2)}$, causal as in the paper.

# %%
n = 32
star = sparse.star_transformer_pattern(n - 1)                 # 31 satellites; the relay is position 31
assert star == (sparse.band_pattern(n, 1) | sparse.global_pattern(n, [n - 1])
                | SparsePattern.from_pairs([0, n - 2], [n - 2, 0], n, n))   # the ring closes 0 ↔ 30

longformer = sparse.longformer_pattern(n, 4, global_indices=[0])         # w = 4 in all: 2 on each side
assert longformer == sparse.dilated_pattern(n, 2, 1) | sparse.global_pattern(n, [0])
assert longformer == sparse.band_pattern(n, 2) | sparse.global_pattern(n, [0])
assert (sparse.longformer_pattern(n, 4, dilation=2, global_indices=[0])
        == sparse.dilated_pattern(n, 2, 2) | sparse.global_pattern(n, [0]))

etc = sparse.etc_pattern(2, n - 2, 1)                                     # 2 global tokens first, radius 1
assert etc == sparse.global_pattern(n, [0, 1]) | sparse.band_pattern(n, 1)

b, nb = 2, n // 2
R = sparse.draw_bigbird_random_blocks(rng, nb, 1)                         # the explicit draw, (n_b, r)
layout = sparse.bigbird_block_layout(nb, num_random_blocks=1, random_blocks=R)
bigbird = sparse.bigbird_pattern(n, block_size=b, num_random_blocks=1, random_blocks=R)
np.testing.assert_array_equal(bigbird.to_mask(), np.kron(layout, np.ones((b, b), dtype=bool)))  # blocks → tokens
assert SparsePattern.from_mask(layout) == (sparse.band_pattern(nb, 1) | sparse.global_pattern(nb, [0, nb - 1])
                                           | sparse.random_pattern(nb, keys=R))     # window | global | random

l = 4
strided = sparse.sparse_transformer_pattern(n, l)                         # kind="strided", causal
assert strided == sparse.band_pattern(n, l, causal=True) | sparse.strided_pattern(n, l, causal=True)
assert strided == sparse.sparse_transformer_pattern(n, l, part=1) | sparse.sparse_transformer_pattern(n, l, part=2)
fixed = sparse.sparse_transformer_pattern(n, l, kind="fixed")             # c = 1 summary position per block
assert fixed == (sparse.block_local_pattern(n, l, causal=True)
                 | sparse.sparse_transformer_pattern(n, l, kind="fixed", part=2))
print("random blocks R_I (−1: global row):", R.ravel())
print("BigBird block layout (n_b × n_b):")
print(layout.astype(int))

# %%
compound = {
    "Star-Transformer\n31 satellites + relay": star,
    "Longformer\nw = 4, G = {0}": longformer,
    "ETC\ng = 2, r = 1": etc,
    "BigBird (ITC)\nb = 2, r = 1": bigbird,
    "Sparse Transformer\nstrided, l = 4": strided,
    "Sparse Transformer\nfixed, l = 4, c = 1": fixed,
}
viz.plot_pattern(np.array([[p.to_mask() for p in compound.values()]]).reshape(2, 3, n, n),
                 titles=list(compound), size=2.8, suptitle="Compound patterns (survey Fig. 5), n = 32")

# %% [markdown]
# > Read the pictures against the unions. In the Star-Transformer, the last row and column (the relay)
# > are full, and the two corner cells close the ring. ETC and Longformer are the same picture up to the
# > number of global tokens. They differ in where those tokens come from: ETC adds extra tokens in front
# > of the input, Longformer marks existing ones. BigBird is made of $2 \times 2$ tiles. The fixed
# > Sparse Transformer's summary column (the last position of every block) behaves like a global
# > token, but only as a key: it is read by everyone and reads only its own block.

# %% [markdown]
# ### Different heads, different patterns
#
# > The lecture's answer to "which pattern is best?" was to let different heads use different ones.
# > Longformer does this with dilation, per head (§3.1): heads without dilation
# > focus on local context, heads with dilation reach further. `longformer_patterns`
# > returns one pattern per head, and `sparse_attention` accepts the list for inputs of shape
# > `(..., H, n, d)`. Here $n = 32$.

# %%
dilations = [1, 2, 3, 4]
heads = sparse.longformer_patterns(n, 4, dilations, global_indices=[0])
qh, kh, vh = rng.standard_normal((3, len(dilations), n, 8))                # (H, n, d)
out_heads = sparse.sparse_attention(qh, kh, vh, heads, method="csr")        # (H, n, d_v)
for h, p in enumerate(heads):
    check(out_heads[h], sparse.sparse_attention(qh[h], kh[h], vh[h], p))  # head by head, by the equation
viz.plot_pattern(np.array([p.to_mask() for p in heads]), titles=[f"head {h}: dilation {dh}" for h, dh in
                 enumerate(dilations)], size=2.2, suptitle="Longformer, one dilation per head (w = 4, G = {0})")

# %% [markdown]
# **Takeaways.**
#
# - The Star-Transformer, Longformer, ETC, BigBird and the Sparse Transformer are unions of atomic
#   patterns, each asserted with `|`; BigBird's token pattern is its block layout expanded to $b \times b$
#   tiles.
# - Longformer's `window` is the paper's total $w$, $w/2$ keys on each side. Heads can use different
#   patterns (here one dilation per head), and `sparse_attention` takes one pattern per head.

# %% [markdown]
# ## (f) Extended patterns (survey §4.1.1.3, Fig. 6)
#
# ### BP-Transformer: attention over a binary partition tree
#
# BP-Transformer builds a binary tree whose leaves are the tokens and whose internal nodes are span
# nodes, each covering a contiguous run of tokens (survey §4.1.1.3; Z. Ye et al., arXiv:1911.04070v1, §3).
#
# > The $n$ tokens are the leaves. Level $l$ has span nodes covering $2^l$ tokens. A token reads $k$
# > nodes per level on each side: tokens near it, 2-token spans a little further away, 4-token spans
# > further still. Span nodes read their own tokens. The pattern is square over all nodes, tokens
# > first (`bp_tree_spans(n)` gives the node order). Below, the tree for $n = 16$, $k = 1$, with the
# > nodes token 6 reads in red. Those nodes **tile the sequence exactly once**, which is asserted for
# > every token.

# %%
n, k_bp = 16, 1
spans = sparse.bp_tree_spans(n)                                   # [(level, start, stop)] in node order
bp = sparse.bp_transformer_pattern(n, k_bp)
print(bp, f"  nodes = {len(spans)} = 2n − 1")
for i in range(n):                                                # each token's nodes tile [0, n) exactly once
    covered = sorted((spans[t][1], spans[t][2]) for t in bp.row(i).tolist())   # (start, stop) of each node read
    assert [tok for start, stop in covered for tok in range(start, stop)] == list(range(n)), i
for t, (_, start, stop) in enumerate(spans[n:], start=n):        # span nodes read exactly their tokens
    assert bp.row(t).tolist() == list(range(start, stop))


def draw_tree(ax, spans, read, token):
    where = {t: ((start + stop - 1) / 2, level) for t, (level, start, stop) in enumerate(spans)}
    index = {(level, start): t for t, (level, start, _) in enumerate(spans)}
    for t, (level, start, _) in enumerate(spans):                 # parent → child edges
        for child in ((level - 1, start), (level - 1, start + 2 ** (level - 1))):
            if level and child in index:
                ax.plot(*zip(where[t], where[index[child]], strict=True), color="0.75", lw=0.8, zorder=1)
    for t, (x, y) in where.items():
        colour = "C0" if t == token else ("C1" if t in read else "white")
        ax.scatter([x], [y], s=110, color=colour, edgecolor="k", zorder=2)
        level, start, stop = spans[t]
        if level:
            ax.text(x, y + 0.22, f"{start}:{stop}", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len([s for s in spans if s[0] == 0])))
    ax.set(yticks=range(spans[-1][0] + 1), xlabel="token (leaf)", ylabel="tree level l",
           ylim=(-0.5, spans[-1][0] + 0.8))


token = 6
with styled():
    fig = viz.figure((11.5, 4.4))
    tree, matrix = fig.subfigures(1, 2, width_ratios=[1.45, 1])
    ax = tree.subplots()
    draw_tree(ax, spans, set(bp.row(token).tolist()) - {token}, token)
    ax.set_title(f"token {token} (blue) reads the red nodes: k = {k_bp} per level and side, fine near it, "
                 "coarse far away", fontsize=8)
    viz.draw_pattern(matrix, bp.to_mask(), titles=f"the {len(spans)} × {len(spans)} pattern: "
                     "token rows, then span rows", xlabel="key node", ylabel="query node")
fig

# %% [markdown]
# > Token 6 reads itself and its neighbours 5 and 7. Further left it reads token 4 and the span `0:4`,
# > and further right the spans `8:10`, `10:12` and `12:16`. Where the cursor is not at the start of a
# > node of the next level, the walk takes the finer node first: token 4 rather than a 2-token span,
# > `10:12` rather than a 4-token span. So the nodes never overlap and never leave a gap. A token reads
# > $O(k \log(n/k))$ nodes, so nnz is $O(k\, n \log(n/k))$ (section (h) measures the slope). The
# > span rows (16–30 in the matrix) read exactly their tokens.

# %% [markdown]
# ### Image Transformer: 2-D query blocks and memory blocks
#
# 2D block local attention, where query blocks and memory blocks are arranged directly in 2D plate
# (§4.1.1.3; N. Parmar et al., arXiv:1802.05751v3, §3.3).
#
# > Pixels are positions $r W + c$ of an $H \times W$ image in raster order. The image is tiled into
# > query blocks of $h_q \times w_q$ pixels. Each query block attends to a memory block that extends it
# > by $h_m$ rows upwards and by $w_m$ columns on the left and on the right (the paper's "past" flange).
# > The official unmasked code also pads $h_m$ rows below (`flange=both`). Causally, only the pixels
# > generated before the query count. The paper generates block by block in raster order, and pixel
# > by pixel in raster order inside each block (`order="block-raster"`). Below: an $8 \times 8$ image,
# > query blocks $2 \times 4$, flange $(2, 2)$, and the keys of the query pixel (5, 5) (orange dot; the
# > orange box is its query block).

# %%
H = W = 8
query_block, flange, (r, c) = (2, 4), (2, 2), (5, 5)
variants = {
    "non-causal, flange 'past'": dict(),
    "non-causal, flange 'both'\n(official unmasked code)": dict(flange="both"),
    "causal, block-raster order\n(the paper)": dict(causal=True),
    "causal, raster order": dict(causal=True, order="raster"),
}
images = np.array([sparse.image_transformer_pattern(H, W, query_block=query_block, memory_flange=flange, **kw)
                   .to_mask()[r * W + c].reshape(H, W) for kw in variants.values()])
fig = viz.plot_pattern(images, titles=list(variants), xlabel="column c", ylabel="row r", size=2.3,
                       suptitle=f"Image Transformer 2-D local attention: keys of pixel {(r, c)}, {H} × {W} image")
for ax in fig.axes:
    ax.add_patch(Rectangle((c // 4 * 4 - 0.5, r // 2 * 2 - 0.5), 4, 2, fill=False, ec="C3", lw=2))
    ax.plot(c, r, "o", color="C3", ms=6)

n = 24                                                            # the 1-D variant's exact limits
assert sparse.image_transformer_1d_pattern(n, 4, 0) == sparse.block_local_pattern(n, 4)
assert sparse.image_transformer_1d_pattern(n, 1, 3, causal=True) == sparse.band_pattern(n, 3, causal=True)
fig

# %% [markdown]
# ### Axial attention: rows, then columns
#
# Axial Transformer applies independent attention modules along each axis of the image (§4.1.1.3;
# J. Ho, N. Kalchbrenner, D. Weissenborn, T. Salimans, arXiv:1912.12180v1, §3).
#
# > One layer of row attention mixes each row and one layer of column attention each column. Each
# > costs $O(HW(H + W))$ instead of $O((HW)^2)$. Neither reaches the whole image on its own. Together,
# > as two layers, they do, and the two-step receptive field is the boolean product of the two
# > patterns. With masks (causal along each axis) the two steps reach only the rectangle above and to
# > the left. That is why the Axial Transformer adds shifted inputs, which are not part of the pattern.

# %%
H, W, (r, c) = 4, 6, (2, 3)
row, column = sparse.axial_patterns(H, W)
row_c, column_c = sparse.axial_patterns(H, W, causal=True)


def two_steps(first, second):                   # out = second(first(x)): i reads j through some u
    return (second.to_mask().astype(np.int64) @ first.to_mask().astype(np.int64)) > 0


full_reach = two_steps(row, column)
causal_reach = two_steps(row_c, column_c)
assert full_reach.all()                                                     # two layers: everything
rr, cc = np.divmod(np.arange(H * W), W)
assert np.array_equal(causal_reach, (rr[None, :] <= rr[:, None]) & (cc[None, :] <= cc[:, None]))  # the rectangle
assert not row.to_mask().all() and not column.to_mask().all()
i = r * W + c
panels = {"row attention (1 layer)": row.to_mask()[i], "column attention (1 layer)": column.to_mask()[i],
          "row, then column (2 layers)": full_reach[i], "masked row, then\nmasked column": causal_reach[i]}
fig = viz.plot_pattern(np.array([p.reshape(H, W) for p in panels.values()]), titles=list(panels),
                       xlabel="column", ylabel="row", size=2.3,
                       suptitle=f"Axial attention: what pixel {(r, c)} reads, {H} × {W} layout")
for ax in fig.axes:
    ax.plot(c, r, "o", color="C3", ms=6)
fig

# %% [markdown]
# **Takeaways.**
#
# - A BP-Transformer token reads tree nodes that tile the sequence exactly once, fine near it and coarse
#   far away: $O(k \log(n/k))$ nodes per token.
# - The Image Transformer's 2-D blocks and axial attention are patterns over pixels in raster order.
#   One axial row layer and one column layer together reach the whole image; with causal masks they
#   reach only the rectangle above and to the left.

# %% [markdown]
# ## (g) How much of the dense attention does a pattern keep?
#
# > A fixed pattern is a bet that the dense attention puts little weight outside it. We measure the bet
# > on two synthetic inputs, $n = 256$, $d = 64$:
# >
# > - **iid**: $q_i, k_j \sim \mathcal N(0, I)$, with no structure at all;
# > - **local**: $q_i$ and $k_i$ are noisy copies of a smooth random walk $z_i$ over positions (an AR(1)
# >   process with correlation $e^{-1/8}$ per step, about 8 tokens), so nearby tokens have similar
# >   queries and keys. This is the locality that band attention assumes.
# >
# > For each pattern we report two numbers. The first is the **kept mass**
# > $\frac{1}{n}\sum_{(i, j)\ \text{kept}} A_{ij}$, the average share of each dense softmax row that
# > falls on kept pairs (1 = nothing lost). The second is the relative **error**
# > $\lVert \text{sparse out} - \text{dense out} \rVert_F / \lVert \text{dense out} \rVert_F$ for random
# > values $v$. Density is nnz / $n^2$. On the iid input the kept mass can only be about the density.

# %%
n, d, ell = 256, 64, 8.0
rho = np.exp(-1 / ell)
z = np.empty((n, d))
z[0] = rng.standard_normal(d)
for t in range(1, n):                                              # AR(1): stationary, unit variance
    z[t] = rho * z[t - 1] + np.sqrt(1 - rho**2) * rng.standard_normal(d)
inputs = {
    "iid": tuple(rng.standard_normal((3, n, d))),
    "local": (z + 0.5 * rng.standard_normal((n, d)), z + 0.5 * rng.standard_normal((n, d)),
              rng.standard_normal((n, d))),
}
side = 16                                                          # the 2-D patterns see a 16 × 16 image
measured = {
    "global G = {0..7}": sparse.global_pattern(n, np.arange(8)),
    "band w = 8": sparse.band_pattern(n, 8),
    "dilated w = 8, w_d = 2": sparse.dilated_pattern(n, 8, 2),
    "strided s = 16": sparse.strided_pattern(n, 16),
    "random r = 17": sparse.random_pattern(n, 17, rng=rng),
    "block local b = 16": sparse.block_local_pattern(n, 16),
    "Star-Transformer": sparse.star_transformer_pattern(n - 1),
    "Longformer w = 16, G = {0}": sparse.longformer_pattern(n, 16, global_indices=[0]),
    "ETC g = 4, r = 8": sparse.etc_pattern(4, n - 4, 8),
    "BigBird b = 8, r = 2": sparse.bigbird_pattern(n, block_size=8, num_random_blocks=2, rng=rng),
    "Sparse Tr. l = 16 (non-causal)": sparse.sparse_transformer_pattern(n, 16, causal=False),
    "Image Tr. 2-D (4×4, flange 4)": sparse.image_transformer_pattern(side, side, query_block=(4, 4),
                                                                      memory_flange=(4, 4)),
    "axial, row layer (16 × 16)": sparse.axial_pattern(side, side, axis="row"),
}


def kept_mass_and_error(q, k, v, pattern, dense_out, A):
    sparse_out = sparse.sparse_attention(q, k, v, pattern, method="csr")
    mass = A[pattern.row_ids(), pattern.indices].sum() / pattern.n            # Σ_kept A_ij / n
    return mass, np.linalg.norm(sparse_out - dense_out) / np.linalg.norm(dense_out)


results = {}
for label, (q, k, v) in inputs.items():
    dense_out, A = refattn.scaled_dot_product_attention(q, k, v, return_weights=True)
    check(sparse.sparse_attention(q, k, v, measured["band w = 8"], method="csr"),
          sparse.sparse_attention(q, k, v, measured["band w = 8"]))             # csr = equation here too
    results[label] = {name: kept_mass_and_error(q, k, v, p, dense_out, A) for name, p in measured.items()}

print(f"{'pattern':<32}{'keys/row':>9}{'density':>9} | {'iid: mass':>10}{'error':>7} | {'local: mass':>12}{'error':>7}")
for name, p in measured.items():
    (m_iid, e_iid), (m_loc, e_loc) = results["iid"][name], results["local"][name]
    print(f"{name:<32}{p.nnz / n:9.1f}{p.density:9.3f} | {m_iid:10.3f}{e_iid:7.2f} | {m_loc:12.3f}{e_loc:7.2f}")

# %%
names = list(measured)
y = np.arange(len(names))
with styled():
    fig = viz.figure((11, 4.8))
    ax_mass, ax_err = fig.subplots(1, 2, sharey=True)
    for offset, label in ((-0.2, "iid"), (0.2, "local")):
        ax_mass.barh(y + offset, [results[label][nm][0] for nm in names], height=0.38, label=f"{label} q, k")
        ax_err.barh(y + offset, [results[label][nm][1] for nm in names], height=0.38, label=f"{label} q, k")
    ax_mass.scatter([measured[nm].density for nm in names], y, marker="|", s=200, color="k", zorder=3,
                    label="density nnz / n²")
    ax_mass.set(yticks=y, yticklabels=names, xlim=(0, 1), xlabel="kept dense attention mass  Σ_kept A_ij / n",
                title="share of the dense softmax a pattern keeps")
    ax_mass.invert_yaxis()
    ax_err.axvline(1.0, color="0.6", lw=0.8, ls=":")
    ax_err.set(xlabel="‖sparse out − dense out‖ / ‖dense out‖", title="relative output error")
    handles, labels = ax_mass.get_legend_handles_labels()
    ax_err.legend(handles, labels, loc="lower right")
fig

# %% [markdown]
# > On iid inputs every pattern keeps about its density and no more: with no structure in $q, k$ no
# > position is privileged, and the error is large. It exceeds 1 because the dense output averages 256
# > random values and is small, while a sparse row averages a few and is not. On the local input, the
# > patterns with a contiguous window (band, Longformer, ETC, BigBird, the Sparse Transformer's band
# > part, block local, the Image Transformer's 2-D block) keep 83–93 % of the mass. The
# > Star-Transformer keeps 60 % with only 5 keys per row. Dilation skips half of the nearest
# > neighbours and keeps 53 %. Global tokens, random keys and strides keep little, because they were
# > added for reach across layers (section (d)), not for mass in one layer. The walk is 1-D in the
# > raster order, so the 2-D patterns are only partly aligned with it. An axial row layer of a 16 × 16
# > image is exactly block local attention with $b = 16$, hence the same numbers.
# >
# > **The knob: the band width $w$.** From $w = 0$ (each token sees only itself) to $w = n - 1$ (dense,
# > the exact limit: mass 1 and error 0).

# %%
widths = [0, 1, 2, 4, 8, 16, 32, 64, 128, n - 1]
sweep = {label: np.array([kept_mass_and_error(q, k, v, sparse.band_pattern(n, w),
                                              *refattn.scaled_dot_product_attention(q, k, v, return_weights=True))
                          for w in widths]) for label, (q, k, v) in inputs.items()}
assert np.allclose(sweep["iid"][-1], [1.0, 0.0]) and np.allclose(sweep["local"][-1], [1.0, 0.0])   # w = n − 1: dense
print(f"{'w':>4}{'2w+1':>6}{'density':>9} | {'iid: mass':>10}{'error':>8} | {'local: mass':>12}{'error':>8}")
for t, w in enumerate(widths):
    density = sparse.band_pattern(n, w).density
    print(f"{w:4d}{2 * w + 1:6d}{density:9.3f} | {sweep['iid'][t, 0]:10.3f}{sweep['iid'][t, 1]:8.3f} | "
          f"{sweep['local'][t, 0]:12.3f}{sweep['local'][t, 1]:8.3f}")

x = np.array(widths) + 1                                          # w + 1 on a log axis (w = 0 included)
with styled():
    fig = viz.figure((10, 3.3))
    ax_mass, ax_err = fig.subplots(1, 2)
    for label, style in (("iid", "o-"), ("local", "s-")):
        ax_mass.semilogx(x, sweep[label][:, 0], style, label=f"{label} q, k")
        ax_err.loglog(x, viz.roundoff(sweep[label][:, 1]), style, label=f"{label} q, k")   # w = n − 1 at the floor
    viz.shade_roundoff(ax_err)
    ax_mass.semilogx(x, [sparse.band_pattern(n, w).density for w in widths], "k--", lw=1, label="density")
    ax_mass.set(xlabel="w + 1  (band: w keys each side)", ylabel="kept mass", ylim=(0, 1.03),
                title=f"band attention, n = {n}: kept mass")
    ax_err.set(xlabel="w + 1", ylabel="relative error", title="output error (w = n − 1: dense, rounding level)")
    ax_mass.legend()
    ax_err.legend()
fig

# %% [markdown]
# > On the local input a window of 8 keys on each side (6.5 % of the pairs) keeps about 90 % of the
# > dense attention. On the iid input the kept mass follows the density line all the way. The error
# > falls to exactly zero (to rounding) at $w = n - 1$, where the band is the full attention.

# %% [markdown]
# **Takeaways.**
#
# - On inputs without structure a pattern keeps about its density of the dense attention mass, and the
#   output error is large.
# - On the local input the patterns with a contiguous window keep 83–93 % of the mass; global tokens,
#   random keys and strides keep little in one layer, since they are there for reach across layers.
# - The band's error falls to 0 (to rounding) at $w = n - 1$, its exact limit.

# %% [markdown]
# ## (h) Cost versus $n$
#
# > The cost of sparse attention is the number of kept pairs: $\text{nnz} \cdot d$ multiply-adds for
# > the scores and $\text{nnz} \cdot d_v$ for the weighted sum of values, against $n^2$ pairs for
# > dense attention. nnz is
# > deterministic (random patterns draw exactly $r$ keys per row), so we count it for
# > $n = 2^{10} \dots 2^{16}$. Every pattern is built in CSR form in $O(\text{nnz})$, and none of these
# > calls allocates an $n \times n$ array. The Sparse Transformer uses $l = \sqrt n$ as in the paper,
# > which gives $O(n\sqrt n)$. BP-Transformer gives $O(k\,n \log(n/k))$. Axial attention over a square
# > image ($H \approx W \approx \sqrt n$, both layers counted) gives $O(n\sqrt n)$. Everything else is
# > linear.

# %%
exponents = range(10, 17)
sizes = [2**e for e in exponents]


def bigbird_nnz(n, b=64):
    # the token pattern is the block layout ⊗ 1_{b×b}: nnz = b² · (kept blocks). Checked on the token
    # pattern up to 2^13; above, the (n/b × n/b) layout is counted instead of 4·10⁷ token pairs.
    layout = sparse.bigbird_block_layout(n // b, rng=n)
    if n <= 2**13:
        assert sparse.bigbird_pattern(n, block_size=b, rng=n).nnz == b * b * layout.sum()
    return b * b * int(layout.sum())


def axial_nnz(n):
    row_p, col_p = sparse.axial_patterns(2 ** (n.bit_length() // 2), n // 2 ** (n.bit_length() // 2))
    return row_p.nnz + col_p.nnz


counting = {
    "band w = 64": lambda n: sparse.band_pattern(n, 64).nnz,
    "block local b = 64": lambda n: sparse.block_local_pattern(n, 64).nnz,
    "random r = 64": lambda n: sparse.random_pattern(n, 64, rng=rng).nnz,
    "Longformer w = 128, G = {0, n−1}": lambda n: sparse.longformer_pattern(n, 128, global_indices=[0, n - 1]).nnz,
    "BigBird b = 64, r = 3": bigbird_nnz,
    "BP-Transformer k = 4": lambda n: sparse.bp_transformer_pattern(n, 4).nnz,
    "Sparse Transformer l = √n": lambda n: sparse.sparse_transformer_pattern(n, round(np.sqrt(n))).nnz,
    "axial, row + column layers": axial_nnz,
}
nnz = {name: np.array([count(n) for n in sizes]) for name, count in counting.items()}
nnz["dense n²"] = np.array(sizes) ** 2

print(f"{'pattern':<34}" + "".join(f"{'2^' + str(e):>11}" for e in exponents) + f"{'slope':>7}")
for name, counts in nnz.items():
    slope = np.log2(counts[-1] / counts[0]) / (exponents[-1] - exponents[0])
    print(f"{name:<34}" + "".join(f"{c:11.3g}" for c in counts) + f"{slope:7.2f}")

# %%
with styled():
    fig = viz.figure((8.5, 4.6))
    ax = fig.subplots()
    for t, (name, counts) in enumerate(nnz.items()):
        if name.startswith("dense"):
            ax.loglog(sizes, counts, "k--", lw=1.2, label=name)
        else:                                                    # markers tell apart the lines that coincide
            ax.loglog(sizes, counts, marker="osv^DPX*"[t], ms=5 if t % 2 else 3.5, lw=1.2, label=name,
                      color=mpl.colormaps["tab10"](t), ls="-" if t % 2 == 0 else "--")
    ax.set_xticks(sizes, [f"$2^{{{e}}}$" for e in exponents])
    ax.set(xlabel="sequence length n", ylabel="kept pairs nnz", title="cost of a pattern = its kept pairs")
    ax.legend(fontsize=7, loc="upper left")
fig


# %% [markdown]
# > The slopes in the table are $\log_2$ growth per doubling of $n$: 1.00–1.03 for the band, block
# > local, random, Longformer and BigBird patterns (linear; block local and random coincide, and so do
# > band and Longformer), 1.5 for the Sparse Transformer and axial attention, 1.15 for BP-Transformer
# > (the $\log n$ factor), and 2 for dense attention. At $n = 65536$ the band keeps 0.2 % of the
# > pairs. BigBird's constant is large ($(3 + 2 + 3)\,b = 512$ keys per middle row),
# > but it does not grow with $n$.
# >
# > **Time.** Below, the CSR kernel runs on a band ($w = 64$, one head, $d = 64$) at $n$ = 1024, 4096
# > and 16384, and the dense masked path runs where $n \times n$ fits ($n \le 4096$). The outputs are
# > checked equal. Wall times depend on the machine and its load, so they are **not printed**, because
# > they would change this notebook on every run. Only the deterministic work ratio $n^2/\text{nnz}$ is
# > printed, and one robust comparison is asserted. The full benchmark, with times, GFLOP/s, peak memory,
# > $t(n)/t(n/2)$ and targets, is `python -m refattn bench sparse`.

# %%
def best_time(fn, repeat=3):
    best = np.inf
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


d = 64
seconds, lines = {}, []
for n in (1024, 4096, 16384):
    q, k, v = rng.standard_normal((3, n, d))
    band = sparse.band_pattern(n, 64)
    out_csr = sparse.sparse_attention(q, k, v, band, method="csr")           # also warms the kernel up
    seconds["csr", n] = best_time(lambda q=q, k=k, v=v, p=band: sparse.sparse_attention(q, k, v, p, method="csr"))
    if n <= 4096:
        out_dense = sparse.sparse_attention(q, k, v, band)                    # dense n × n masked path
        np.testing.assert_allclose(out_csr, out_dense, rtol=1e-12, atol=1e-12)
        seconds["dense", n] = best_time(lambda q=q, k=k, v=v, p=band: sparse.sparse_attention(q, k, v, p), repeat=1)
    dense_gib = n * n * 8 / 2**30
    lines.append(f"n = {n:5d}: nnz = {band.nnz:8d}, dense work / sparse work n²/nnz = {n * n / band.nnz:5.1f}, "
                 f"one dense n × n float64 array = {dense_gib:.3g} GiB")
assert seconds["dense", 4096] > seconds["csr", 4096]       # robust: about n²/nnz = 32 times less work
lines.append(f"at n = 4096 the CSR kernel beat the dense masked path: {seconds['dense', 4096] > seconds['csr', 4096]}")
print("\n".join(lines))                                   # one print: no timing-dependent stream splits

# %% [markdown]
# **Takeaways.**
#
# - The cost of a pattern is its number of kept pairs. It grows linearly in $n$ for the band, block local,
#   random, Longformer and BigBird patterns, like $n\sqrt n$ for the Sparse Transformer with $l = \sqrt n$
#   and for axial attention, a little faster than linearly for BP-Transformer (its $\log n$ factor), and
#   like $n^2$ for dense attention.
# - Every pattern is built in CSR form without an $n \times n$ array, and the CSR kernel, doing 32 times
#   less work, beats the dense masked path at $n = 4096$.

# %% [markdown]
# ## (i) Exercises
#
# 1. **Dilated heads reach further.** Using `receptive_fields` from (d), count how many layers each of
#    the four Longformer heads of (e) (`longformer_patterns(64, 4, [1, 2, 3, 4])`, no global token)
#    needs before every token reaches every token. A layer's heads act together, so the layer's
#    pattern is their union: how many layers does the union need?
#    <details><summary>Hint</summary>A dilation-<code>d</code> window only joins tokens whose distance
#    is a multiple of <code>d</code>, so heads with <code>d > 1</code> never connect the whole sequence
#    (<code>R[-1].all()</code> stays False). Dilation 1 needs 32 layers. The union reaches 8 tokens each
#    way per layer and needs 9.</details>
#
# 2. **Causal decoding with a cache.** Build a causal BigBird-like pattern from atomic parts,
#    `band_pattern(n, 2, causal=True) | global_pattern(n, [0], causal=True) | random_pattern(n, 2, causal=True, rng=0)`,
#    for $n = 32$. Check that the last query's output, computed with `pattern.last_rows(1)` on the last
#    query and all 32 keys, equals the last row of the full `sparse_attention` output.
#    <details><summary>Hint</summary><code>sparse.sparse_attention(q[-1:], k, v, p.last_rows(1))</code>
#    against <code>sparse.sparse_attention(q, k, v, p)[-1:]</code>, with <code>check</code>. The same works
#    for the last 5 queries (prefill).</details>
#
# 3. **Random keys keep their share, and no more.** For the iid input of (g), repeat the kept-mass
#    measurement for `random_pattern(256, r, rng=seed)` with 20 seeds and $r \in \{4, 16, 64\}$.
#    Compare the mean with $r/n$. Why is it so close, and why does the same pattern keep almost nothing
#    more on the local input?
#    <details><summary>Hint</summary>For a fixed row, the kept mass of a uniformly random
#    <code>r</code>-subset has expectation exactly <code>r / n</code> whatever the row's weights are: each
#    key is kept with probability <code>r / n</code>. The local input puts its mass near the diagonal,
#    which random keys rarely hit.</details>
#
# 4. **Star-Transformer's two hops.** Show with `receptive_fields` that `star_transformer_pattern(31)`
#    connects all 32 nodes in 2 layers, and that without the relay (`band_pattern(32, 1)` alone) it
#    takes 31. What does `ring=False` change?
#    <details><summary>Hint</summary>Satellite → relay → satellite is 2 hops. <code>ring=False</code>
#    removes only the wrap-around pairs (0, 30) and (30, 0), which the relay already bridges, so the
#    number of layers stays 2.</details>
#
# 5. **Sparse Transformer: two heads, every past key.** Child et al. (§4.2) design the two factorised
#    heads so that every $j \le i$ can be reached in two steps. For $n = 64$, $l = 8$, compose
#    `part=1` and `part=2` with `two_steps` from (f), in both orders, with and without the residual
#    connection (add `SparsePattern.from_mask(np.eye(n, dtype=bool))` to each head with `|`). Compare each
#    result with the causal mask `np.tril(np.ones((n, n), bool))`. Which combinations work for
#    `kind="strided"`, and which for `kind="fixed"`?
#    <details><summary>Hint</summary>Strided: all four. Fixed: only the block head first, then the summary
#    head, with the residual. A token reaches the earlier keys of its own block only through itself, and
#    another block only through that block's summary position, which must already have read its block.
#    The merged head (<code>part=None</code>) applied twice also gives <code>np.tril</code>.</details>
