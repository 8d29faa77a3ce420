# %% [markdown]
# # Online softmax: exact attention, one key tile at a time
#
# **M. Milakov, N. Gimelshein, "Online normalizer calculation for softmax", 2018,
# [arXiv:1805.02867](https://arxiv.org/abs/1805.02867) (v2), Algorithm 3.**
# **T. Dao, D. Y. Fu, S. Ermon, A. Rudra, C. Ré, "FlashAttention: Fast and Memory-Efficient Exact Attention
# with IO-Awareness", NeurIPS 2022, [arXiv:2205.14135](https://arxiv.org/abs/2205.14135) (v2), §3.1 and
# Algorithm 1.**
# **M. N. Rabe, C. Staats, "Self-attention Does Not Need O(n²) Memory", 2021,
# [arXiv:2112.05682](https://arxiv.org/abs/2112.05682).**
# **T. Dao, "FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning", ICLR 2024,
# [arXiv:2307.08691](https://arxiv.org/abs/2307.08691), Algorithm 2 (backward pass).**
#
# For one query with scores $s_1, \dots, s_m$ and values $v_1, \dots, v_m$, read the keys in order and keep a
# running maximum $\mu_j$, a running sum $\ell_j$ and an unnormalised output $a_j$
# ($m_0 = -\infty$, $\ell_0 = 0$, $a_0 = 0$):
#
# $$
# \mu_j = \max(\mu_{j-1}, s_j), \qquad
# \ell_j = \ell_{j-1}\, e^{\mu_{j-1} - \mu_j} + e^{s_j - \mu_j}, \qquad
# a_j = a_{j-1}\, e^{\mu_{j-1} - \mu_j} + e^{s_j - \mu_j}\, v_j ,
# $$
#
# $$
# \operatorname{softmax}(s)^\top V = \frac{a_m}{\ell_m}, \qquad \log \sum_{j} e^{s_j} = \mu_m + \log \ell_m .
# $$
#
# The first two recurrences are Milakov and Gimelshein's online normaliser (Algorithm 3): one pass over the
# scores computes both the maximum, for safety, and the normaliser, which is *rescaled by*
# $e^{m_\text{old} - m_\text{new}}$ each time the maximum grows. The third is what FlashAttention adds
# (§3.1, Algorithm 1): the same rescaling applied to the weighted sum of the values, one *tile* of keys at a
# time rather than one key, so that the $n \times m$ score matrix never exists. Rabe and Staats make the same
# observation from the memory side: with a running maximum and sum, attention over chunks of keys needs
# memory that does not grow with the number of keys for one query, and their practical chunked
# implementation needs $O(\sqrt n)$ for self-attention.
#
# The plain text paraphrases the papers, with their section and algorithm numbers. Commentary is set apart
# as block quotes.
# Every derivation is an `assert` against refattn to $10^{-13}$.
#
# > In refattn the equation path, `scaled_dot_product_attention(..., method="equation")` (the default),
# > forms the scores; `method="blocked"` is a Numba kernel that runs the recurrence above over
# > `block_size = (query tile, key tile)` tiles (`refattn.kernels.blocked`). `return_lse=True` returns
# > $\log \sum_j e^{s_j}$ per query, and `refattn.oracle.merge_attention` combines two (output, lse) pairs:
# > section (d) shows that this merge *is* the online-softmax step. `refattn.oracle.sdpa_vjp` gives the
# > gradients, on the dense arrays (`method="equation"`) or by FlashAttention-2's backward tile loop
# > (`method="blocked"`, `refattn.kernels.blocked_bwd`), which section (e) derives.
#
# **Contents.** (a) why the rescaling is exact · (b) tile by tile on a small example · (c) memory versus
# $n$ · (d) the log-sum-exp merge: split keys, flash-decoding, causal masks · (e) the backward pass:
# the gradients, $D_i = dO_i \cdot O_i$, weights recomputed from the log-sum-exp, the tile loop, memory ·
# (f) exercises

# %%
import tracemalloc
from functools import partial

import matplotlib as mpl
import numba  # only to pin the thread count in (c)
import numpy as np

import refattn
from refattn import viz
from refattn.oracle import merge_attention, sdpa_vjp

np.set_printoptions(precision=3, suppress=True, linewidth=110)
rng = np.random.default_rng(1805_02867)   # arXiv:1805.02867; every draw below comes from rng
sdpa = refattn.scaled_dot_product_attention


def check(mine, ref):
    # "from the equation" cells end here: our NumPy lines against refattn, to 1e-13
    np.testing.assert_allclose(mine, ref, rtol=1e-13, atol=1e-13)


def styled():
    # hand-made plots (curves) use the same style file as refattn.viz
    return mpl.style.context(viz.STYLE_PATH)


# %% [markdown]
# ## (a) Why the online softmax is exact
#
# Split the keys into tiles $J_1, J_2, \dots, J_T$ (any sizes, in any order). After $t$ tiles write
# $K_t = J_1 \cup \dots \cup J_t$ and keep
#
# $$
# \mu^{(t)} = \max_{j \in K_t} s_j, \qquad
# \ell^{(t)} = \sum_{j \in K_t} e^{s_j - \mu^{(t)}}, \qquad
# a^{(t)} = \sum_{j \in K_t} e^{s_j - \mu^{(t)}}\, v_j .
# $$
#
# **The rescaling identity.** For any key already folded in, $e^{s_j - \mu^{(t)}} = e^{\mu^{(t-1)} - \mu^{(t)}}\,
# e^{s_j - \mu^{(t-1)}}$: exponents add. So the sums over $K_{t-1}$ need not be recomputed when the maximum
# moves; they are multiplied by one number per query,
#
# $$
# \mu^{(t)} = \max\Big(\mu^{(t-1)}, \max_{j \in J_t} s_j\Big), \qquad
# \ell^{(t)} = e^{\mu^{(t-1)} - \mu^{(t)}}\, \ell^{(t-1)} + \sum_{j \in J_t} e^{s_j - \mu^{(t)}}, \qquad
# a^{(t)} = e^{\mu^{(t-1)} - \mu^{(t)}}\, a^{(t-1)} + \sum_{j \in J_t} e^{s_j - \mu^{(t)}}\, v_j ,
# $$
#
# and the invariant above holds after every tile. At the end the common factor $e^{-\mu^{(T)}}$ cancels:
#
# $$
# \frac{a^{(T)}}{\ell^{(T)}} = \frac{\sum_j e^{s_j} v_j}{\sum_j e^{s_j}} = \operatorname{softmax}(s)^\top V,
# \qquad \mu^{(T)} + \log \ell^{(T)} = \log \sum_j e^{s_j} .
# $$
#
# > Nothing is approximated: the result is the softmax, not an estimate of it. Every exponent is $\le 0$, so
# > nothing overflows, and $\ell^{(t)} \ge 1$ (the key at the maximum contributes $e^0$), so the final
# > division is safe. Before the first tile $\mu^{(0)} = -\infty$ and the factor $e^{-\infty} = 0$ erases the
# > empty start. In floating point the only difference from the equation path is the rescaling
# > multiplications: a few roundings per tile, so the two agree to about $10^{-15}$, not bit for bit.
# > FlashAttention's Algorithm 1 keeps the output normalised after every tile (it divides by $\ell$ each
# > time); keeping $a$ unnormalised and dividing once, as here and in refattn's kernel, is the same
# > recurrence with fewer divisions.
#
# First the identity on numbers, then the whole recurrence.

# %%
s = rng.standard_normal(10) * 3                        # one query's scores over 10 keys
old, new = s[:6].max(), s.max()                        # the maximum before and after keys 6..9
check(np.exp(s[:6] - new), np.exp(old - new) * np.exp(s[:6] - old))   # e^{s−m_new} = e^{m_old−m_new} e^{s−m_old}

ell = np.exp(old - new) * np.exp(s[:6] - old).sum() + np.exp(s[6:] - new).sum()
check(new + np.log(ell), np.log(np.exp(s).sum()))      # m + log ℓ = log Σ e^{s_j}
print(f"m_old = {old:.3f}, m_new = {new:.3f}, rescaling factor e^(m_old - m_new) = {np.exp(old - new):.3f}")


# %% [markdown]
# ### From the equation: a plain-NumPy tile loop
#
# > The recurrence, written out in NumPy and labelled as such: this is the one place the notebook computes
# > attention itself, to re-derive it. `fold` is one step, folding a tile of scores and its values into the
# > state $(m, \ell, a)$ of a tile of queries; `online_attention` cuts the queries into tiles of `block_q`
# > rows and the keys into tiles of `block_k` and folds the key tiles in order. It returns the output and the
# > log-sum-exp. No masks: exercise 1 adds the causal one.

# %%
# from the equation: Milakov & Gimelshein Alg. 3 / FlashAttention Alg. 1, in plain NumPy (not refattn)
def fold(state, s, v_tile):
    run_max, run_sum, acc = state                               # m, ℓ: (..., rows); a: (..., rows, d_v)
    new_max = np.maximum(run_max, s.max(axis=-1))               # m_new = max(m_old, max_j s_j)
    alpha = np.exp(run_max - new_max)                           # e^{m_old − m_new}: rescales the past
    p = np.exp(s - new_max[..., None])                          # e^{s_j − m_new} for the tile's keys
    return new_max, alpha * run_sum + p.sum(axis=-1), alpha[..., None] * acc + p @ v_tile


def online_attention(q, k, v, block_q, block_k):
    n, m, scale = q.shape[-2], k.shape[-2], 1 / np.sqrt(q.shape[-1])
    out, lse = np.empty(q.shape[:-1] + v.shape[-1:]), np.empty(q.shape[:-1])
    for i0 in range(0, n, block_q):                             # query tiles are independent
        q_i = q[..., i0:i0 + block_q, :]
        state = (np.full(q_i.shape[:-1], -np.inf), np.zeros(q_i.shape[:-1]),
                 np.zeros(q_i.shape[:-1] + v.shape[-1:]))       # m = −inf, ℓ = 0, a = 0
        for j0 in range(0, m, block_k):                         # key tiles, in order
            s = q_i @ np.swapaxes(k[..., j0:j0 + block_k, :], -1, -2) * scale
            state = fold(state, s, v[..., j0:j0 + block_k, :])
        run_max, run_sum, acc = state
        out[..., i0:i0 + block_q, :] = acc / run_sum[..., None]     # a / ℓ
        lse[..., i0:i0 + block_q] = run_max + np.log(run_sum)       # m + log ℓ
    return out, lse


# %% [markdown]
# > The check: 3 heads, $n = 8$ queries, $m = 12$ keys, $d = 16$. Tile sizes that divide $n$ and $m$
# > ($4 \times 4$, $2 \times 6$, $8 \times 12$: one tile), that do not ($3 \times 5$, $5 \times 7$), single keys
# > ($1 \times 1$, Milakov and Gimelshein's case) and tiles larger than the input. Each is asserted against
# > the equation path and against `method="blocked"` with the same `block_size`, output and log-sum-exp.

# %%
h, n, m, d = 3, 8, 12, 16
q = rng.standard_normal((h, n, d))
k = rng.standard_normal((h, m, d)) * 2                 # wider scores: the running max moves more
v = rng.standard_normal((h, m, d))
exact, exact_lse = sdpa(q, k, v, return_lse=True)     # method="equation": the (h, n, m) scores

print(f"{'block (q, k)':>12}  {'divides n, m':>12}  {'|mine - equation|':>17}  {'|blocked - equation|':>20}")
for block in [(4, 4), (2, 6), (8, 12), (3, 5), (5, 7), (1, 1), (16, 32)]:
    mine, mine_lse = online_attention(q, k, v, *block)
    blocked, blocked_lse = sdpa(q, k, v, return_lse=True, method="blocked", block_size=block)
    for out, lse in ((mine, mine_lse), (blocked, blocked_lse)):
        check(out, exact)
        check(lse, exact_lse)
    divides = n % block[0] == 0 and m % block[1] == 0
    print(f"{str(block):>12}  {str(divides):>12}  {viz.roundoff_text(np.abs(mine - exact).max()):>17}  "
          f"{viz.roundoff_text(np.abs(blocked - exact).max()):>20}")

# %% [markdown]
# **Takeaways.**
#
# - Folding key tiles into a running maximum, a running sum and an unnormalised output is exact: the
#   rescaling by $e^{m_\text{old} - m_\text{new}}$ only applies $e^{a + b} = e^a e^b$.
# - For every tile size tried, dividing $n$ and $m$ or not, the NumPy loop and `method="blocked"` agree
#   with the equation path to rounding, in the output and in the log-sum-exp. The differences, of order
#   $10^{-15}$, are printed as "< 1e-12": their digits depend on the machine's BLAS kernel and SIMD loops,
#   so below refattn's round-off floor (`viz.roundoff`) only the bound is shown.

# %% [markdown]
# ## (b) Tile by tile
#
# > One head, $n = 8$ queries, $m = 12$ keys, key tiles of 4: three steps. Each frame of the player shows
# > the weights *as the state holds them* after the tile is folded in, $e^{s_{ij} - \mu_i}$ on the keys seen so
# > far (grey: keys not read yet). Each row's largest entry is exactly 1, at the running maximum, and the
# > row sums to $\ell_i$. When a new tile holds a larger score, the whole row dims: that is the rescaling by
# > $e^{m_\text{old} - m_\text{new}}$. The last frame divides by $\ell$ and is the softmax, equal to the
# > equation path's weights. The titles give the largest error of the partial output $a_i / \ell_i$ against
# > the final one. Under the player, its four frames side by side, for viewers that drop its JavaScript
# > (GitHub's notebook viewer).

# %%
n, m, d, tile = 8, 12, 4, 4
q = rng.standard_normal((n, d))
k = rng.standard_normal((m, d)) * 1.5
v = rng.standard_normal((m, d))
final, A = sdpa(q, k, v, return_weights=True)

S = q @ k.T / np.sqrt(d)                               # (n, m), only to draw the frames
state = (np.full(n, -np.inf), np.zeros(n), np.zeros((n, d)))
frames, titles, history = [], [], []
for t, j0 in enumerate(range(0, m, tile)):
    state = fold(state, S[:, j0:j0 + tile], v[j0:j0 + tile])
    run_max, run_sum, acc = state
    err = np.abs(acc / run_sum[:, None] - final).max(axis=1)    # per query: |partial − final|
    history.append((run_max, run_sum, err))
    frame = np.full((n, m), np.nan)
    frame[:, :j0 + tile] = np.exp(S[:, :j0 + tile] - run_max[:, None])   # e^{s_ij − μ_i}, seen keys
    check(frame[:, :j0 + tile].sum(axis=1), run_sum)                      # each row sums to ℓ_i
    frames.append(frame)
    titles.append(f"tile {t + 1}/3 folded in (keys {j0}-{j0 + tile - 1}): e^(s - m), "
                  f"max error {viz.roundoff_text(err.max(), '.1e', equals=True)}")
frames.append(frames[-1] / run_sum[:, None])           # divide by ℓ: the softmax
titles.append("divided by ℓ: the softmax, max |weights - equation path| "
              + viz.roundoff_text(np.abs(frames[-1] - A).max()))
check(frames[-1], A)                                   # = the equation path's weights
check(acc / run_sum[:, None], final)

viz.step_through(np.array(frames), titles=titles, mode="html", interval=1200, vmax=1.0, size=4.0,
                 xlabel="key j (tiles of 4)")

# %%
# the player's four frames side by side, for viewers that drop its JavaScript
viz.plot_attention(np.array(frames), vmax=1.0, size=2.6, xlabel="key j (tiles of 4)",
                   titles=[f"after tile {t + 1} of 3" for t in range(3)] + ["divided by ℓ: the softmax"],
                   suptitle="e^(s − m) on the keys read so far (grey: not read yet), frames of the player above")

# %%
print("per query i (rows), after tiles 1, 2, 3 (columns)")
for name, index in (("running max μ_i", 0), ("running sum l_i", 1), ("|a_i / l_i - final_i|", 2)):
    print(f"\n{name}:\n", np.stack([step[index] for step in history], axis=1))

with styled():
    fig = viz.figure((10, 2.8))
    ax_max, ax_sum, ax_err = fig.subplots(1, 3)
    steps = np.arange(1, 4)
    for i in range(n):
        ax_max.plot(steps, [step[0][i] for step in history], "o-", lw=1)
        ax_sum.plot(steps, [step[1][i] for step in history], "o-", lw=1)
        ax_err.semilogy(steps, viz.roundoff([step[2][i] for step in history]), "o-", lw=1)
    viz.shade_roundoff(ax_err)                          # after the last tile: round-off, drawn at the floor
    ax_max.set(xlabel="key tiles folded in", title="running max μ_i (one line per query)", xticks=steps)
    ax_sum.set(xlabel="key tiles folded in", title="running sum ℓ_i", xticks=steps)
    ax_err.set(xlabel="key tiles folded in", title="|partial output - final|", xticks=steps)
fig

# %% [markdown]
# > The maximum never decreases and the partial outputs are not approximations of the final one in any
# > useful sense: after tile 1 a query's output is the exact attention over keys 0–3 only, and can be far
# > from the answer. Only after the last tile is it the attention over all keys, to rounding. The running sum
# > can *fall* from one tile to the next: that happens when the maximum jumps, because $\ell$ is measured in
# > units of $e^{m}$.

# %% [markdown]
# **Takeaways.**
#
# - After each tile the state holds the exact attention over the keys read so far, which can be far from
#   the final output; after the last tile it is the attention over all keys, to rounding.
# - A row's running maximum never decreases, while its running sum can fall when the maximum jumps.

# %% [markdown]
# ## (c) Memory versus $n$
#
# > The equation path materialises the scores: $h \cdot n \cdot m$ float64 numbers, $8\,h n m$ bytes, and in
# > practice a few such arrays at once (the scores, their exponentials, the weights). At $n = m = 32768$ with
# > 8 heads one score matrix is $8 \cdot 32768^2 \cdot 8$ bytes $= 64$ GiB. The blocked path needs the
# > inputs and the output, $O(h n d)$, plus per task (one query tile of one head, run by one thread) a score
# > tile, a transposed query tile, the tile product $P V$ and an accumulator: $O(\text{threads} \cdot (b_q b_k +
# > d\, b_q + b_q d_v))$, independent of $n$.

# %%
heads, d = 8, 64
block_q, block_k = 64, 64                                     # refattn's default block_size
per_task = 8 * (block_k * block_q + d * block_q + 2 * block_q * d + 4 * block_q)  # S^T, Q^T, PV, acc, 4 vectors
GiB, MiB = 2**30, 2**20

ns = 2 ** np.arange(9, 18)                                    # 512 ... 131072
scores = heads * ns * ns * 8                                  # one (h, n, n) float64 score matrix
io = 4 * heads * ns * d * 8 + heads * ns * 8                  # q, k, v, out and lse
print(f"score matrix at n = 32768, {heads} heads: {heads * 32768**2 * 8 / GiB:.0f} GiB")
print(f"blocked scratch per task (tile {block_q} x {block_k}, d = {d}): {per_task / 2**10:.0f} KiB")
for n_ in (4096, 32768, 131072):
    i = list(ns).index(n_)
    print(f"n = {n_:6d}: scores {scores[i] / GiB:8.2f} GiB   inputs + output {io[i] / MiB:7.1f} MiB")

with styled():
    fig = viz.figure((5.5, 3.4))
    ax = fig.subplots()
    ax.loglog(ns, scores, "o-", label="equation: one score matrix, 8·h·n²")
    ax.loglog(ns, io, "s-", label="both: q, k, v, out, lse, 8·h·n·(4d + 1)")
    for threads, style in ((2, ":"), (128, "--")):
        ax.loglog(ns, np.full(ns.shape, threads * per_task), "k" + style, lw=1,
                  label=f"blocked scratch, {threads} threads")
    ax.axhline(64 * GiB, color="gray", lw=0.8)
    ax.set_ylim(1e5, 1e13)
    ax.annotate("64 GiB at n = 32768", (32768, 64 * GiB), xytext=(40000, 64 * GiB / 6), fontsize=8)
    ax.set(xlabel="n = m", ylabel="bytes", title=f"memory of attention, h = {heads}, d = {d}, float64")
    ax.legend(fontsize=7, loc="upper left")
fig


# %% [markdown]
# > **Measured.** `tracemalloc` records NumPy's allocations and, as it turns out, the Numba kernel's too
# > (each task's scratch shows up). Two heads, $d = 64$, $n = m$ from 512 to 4096, each path measured twice
# > from a state where the inputs already exist, so the peak is the *extra* memory a call needs. The
# > equation path's peak repeats to within a few KiB (the NumPy arrays are the same; a few Python
# > objects differ from call to call). The blocked path's depends on how many tasks run at
# > the same moment, a matter of thread scheduling, so it is measured here with one Numba thread: the
# > output plus one task's scratch, whatever $n$ is. The cell asserts that bound (with $T$ threads it is
# > $T$ tasks' scratch).

# %%
def traced_peak(call):
    tracemalloc.start()
    call()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak

heads, d = 2, 64
sdpa(*rng.standard_normal((3, heads, 64, d)), method="blocked")   # load the compiled kernel first
measured, lines = {}, []
for n_ in (512, 1024, 2048, 4096):
    q, k, v = rng.standard_normal((3, heads, n_, d))
    eq = [traced_peak(lambda: sdpa(q, k, v, method="equation")) for _ in range(2)]
    numba.set_num_threads(1)                                       # one task at a time: a repeatable peak
    bl = [traced_peak(lambda: sdpa(q, k, v, method="blocked")) for _ in range(2)]
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    score_bytes, out_bytes = heads * n_ * n_ * 8, heads * n_ * (d + 1) * 8
    assert abs(eq[0] - eq[1]) < 2**16, eq                         # the same NumPy arrays, give or take a few KiB
    assert 3 * score_bytes <= eq[0] <= 3 * score_bytes + 2 * MiB   # scores, exponentials, weights
    for peak in bl:
        assert out_bytes <= peak <= out_bytes + per_task + 64 * 2**10
    measured[n_] = (eq[0], max(bl))
    lines.append(f"{n_:5d}  {score_bytes / MiB:12.1f}  {eq[0] / MiB:13.1f}  {eq[0] / score_bytes:5.2f}  "
                 f"{min(bl) / MiB:12.1f}  {out_bytes / MiB:9.1f}")
print(f"{'n':>5}  {'score matrix':>12}  {'equation peak':>13}  {'ratio':>5}  {'blocked peak':>12}  {'out + lse':>9}   (MiB)")
print("\n".join(lines))        # after the loop: output sent while measuring would allocate in the kernel's threads

# %% [markdown]
# > The equation path's peak is three score matrices (the ratio column), growing like $n^2$: a factor 64
# > from $n = 512$ to $4096$. The blocked path's grows like $n$, because it is the output plus a constant
# > scratch. The time is another matter and is not measured here: `python -m refattn bench sdpa` times
# > both paths.

# %% [markdown]
# **Takeaways.**
#
# - The equation path's peak memory is three $h \times n \times m$ float64 arrays and grows like $n^2$; one
#   score matrix alone is 64 GiB at $n = 32768$ with 8 heads.
# - The blocked path never forms the scores: beyond the output it needs a fixed scratch per running task,
#   so its peak grows like $n$.

# %% [markdown]
# ## (d) The log-sum-exp merge
#
# Split the keys into two disjoint sets $a$ and $b$ and compute attention over each, with its log-sum-exp
# $\ell_a = \log\sum_{j \in a} e^{s_j}$. Since $o_a = e^{-\ell_a} \sum_{j\in a} e^{s_j} v_j$, the two
# unnormalised sums are $e^{\ell_a} o_a$ and $e^{\ell_b} o_b$, and
#
# $$
# \ell = \log\big(e^{\ell_a} + e^{\ell_b}\big), \qquad o = e^{\ell_a - \ell}\, o_a + e^{\ell_b - \ell}\, o_b .
# $$
#
# This is the step of (a) with the state stored differently: $(m, \ell, a)$ there, $(o = a/\ell,\ \text{lse} =
# m + \log \ell)$ here. `refattn.oracle.merge_attention(out_a, lse_a, out_b, lse_b)` implements it.
#
# > First the plain split: keys $0..4$ and $5..11$ by slicing, each half with `return_lse=True`.

# %%
h, n, m, d = 2, 6, 12, 8
q, k, v = rng.standard_normal((h, n, d)), rng.standard_normal((h, m, d)), rng.standard_normal((h, m, d))
full, full_lse = sdpa(q, k, v, return_lse=True)

out_a, lse_a = sdpa(q, k[:, :5], v[:, :5], return_lse=True)        # keys 0..4
out_b, lse_b = sdpa(q, k[:, 5:], v[:, 5:], return_lse=True)        # keys 5..11
out, lse = merge_attention(out_a, lse_a, out_b, lse_b)
check(out, full)
check(lse, full_lse)

# the same merge, written from the equation
ell = np.logaddexp(lse_a, lse_b)
check(np.exp(lse_a - ell)[..., None] * out_a + np.exp(lse_b - ell)[..., None] * out_b, full)
print("weight of part a per query (head 0):", np.exp(lse_a - ell)[0])

# %% [markdown]
# ### The merge is the online-softmax step
#
# > Fold the key tiles one at a time with `merge_attention`, starting from the empty state
# > $(o, \text{lse}) = (0, -\infty)$: this is the loop of (a), with refattn computing each tile. It agrees
# > with the full attention, with the blocked kernel and with the NumPy loop of (a).

# %%
out, lse = np.zeros((h, n, d)), np.full((h, n), -np.inf)             # nothing seen yet
for j0 in range(0, m, 5):                                             # tiles of 5 keys: 5, 5, 2
    tile_out, tile_lse = sdpa(q, k[:, j0:j0 + 5], v[:, j0:j0 + 5], return_lse=True)
    out, lse = merge_attention(out, lse, tile_out, tile_lse)
check(out, full)
check(lse, full_lse)
check(out, sdpa(q, k, v, method="blocked", block_size=(n, 5)))
check(out, online_attention(q, k, v, n, 5)[0])

# %% [markdown]
# ### Split-KV decoding (flash-decoding)
#
# > At a decoding step there is one new query per sequence and a long key/value cache. Tiling the queries
# > gives no parallelism (there is one), so the *keys* are split instead: each chunk of the cache is
# > attended to independently (on its own core or streaming multiprocessor), returns $(o, \text{lse})$, and
# > the partial results are merged, in any tree, because the merge is associative (up to rounding). This is
# > the idea of T. Dao, D. Haziza, F. Massa, G. Sizov, *Flash-Decoding for long-context inference* (PyTorch
# > blog, 2023) and of split-K kernels generally.
# >
# > A batch of three sequences whose caches hold 64, 37 and 5 valid positions (`key_lengths`), 4 heads,
# > chunks of 16 slots. A chunk past a sequence's length sees no key: `lse = -inf`, and the merge gives it
# > weight exactly 0, whatever its output holds (here the `"nan"` policy makes it NaN, to show it is
# > selected away, not multiplied by 0).

# %%
B, h, cache, d, chunk = 3, 4, 64, 8, 16
lengths = np.array([64, 37, 5])
q = rng.standard_normal((B, h, 1, d))                  # one new query per sequence and head
k, v = rng.standard_normal((2, B, h, cache, d))
k[2, :, 5:] = v[2, :, 5:] = np.nan                     # garbage past sequence 2's length: never read
full, full_lse = sdpa(q, k, v, key_lengths=lengths[:, None], return_lse=True)

parts = []
for c0 in range(0, cache, chunk):                      # each chunk on its own: independent work
    chunk_lengths = np.clip(lengths - c0, 0, chunk)    # valid slots of this chunk, per sequence
    parts.append(sdpa(q, k[..., c0:c0 + chunk, :], v[..., c0:c0 + chunk, :], return_lse=True,
                      key_lengths=chunk_lengths[:, None], fully_masked="nan"))
    print(f"chunk {c0:2d}-{c0 + chunk - 1}: valid slots per sequence {chunk_lengths}, "
          f"empty (lse = -inf): {np.isneginf(parts[-1][1][:, 0, 0])}")

left, right = merge_attention(*parts[0], *parts[1]), merge_attention(*parts[2], *parts[3])
out, lse = merge_attention(*left, *right)              # a tree: (0 + 1) + (2 + 3)
check(out, full)
check(lse, full_lse)
out_seq, lse_seq = parts[0]
for part in parts[1:]:                                 # or one after the other
    out_seq, lse_seq = merge_attention(out_seq, lse_seq, *part)
check(out_seq, full)
check(sdpa(q, k, v, key_lengths=lengths[:, None], method="blocked", block_size=(1, chunk)), full)
print("merged == full attention over the valid cache, tree and sequential; no NaN:", not np.isnan(out).any())

# %% [markdown]
# ### Causal masks with $n \ne m$, and empty parts
#
# > A causal mask restricted to a slice of the keys is the full mask's columns: `causal_mask(n, m,
# > alignment)[:, part]`. With $n \ne m$ the two alignments differ (notebook 01, section (d)): top-left
# > lets query $i$ see keys $j \le i$, bottom-right $j \le i + (m - n)$. Splitting the keys then leaves some
# > queries with *no* key in a part, and when $n > m$ bottom-right leaves some queries with no key at all.
# > Four cases, each split at every point between two keys, merged, and compared with the full causal
# > attention, output and log-sum-exp.

# %%
d = 8
for n, m in ((5, 9), (9, 5)):
    q, k, v = rng.standard_normal((n, d)), rng.standard_normal((m, d)), rng.standard_normal((m, d))
    for alignment in ("top-left", "bottom-right"):
        mask = refattn.causal_mask(n, m, causal=alignment)          # (n, m), True = may attend
        full, full_lse = sdpa(q, k, v, causal=alignment, return_lse=True)
        empty_parts = 0
        for split in range(1, m):                                      # keys [0, split) and [split, m)
            a = sdpa(q, k[:split], v[:split], mask[:, :split], return_lse=True)
            b = sdpa(q, k[split:], v[split:], mask[:, split:], return_lse=True)
            out, lse = merge_attention(*a, *b)
            check(out, full)
            np.testing.assert_array_equal(np.isneginf(lse), np.isneginf(full_lse))
            check(lse[np.isfinite(lse)], full_lse[np.isfinite(full_lse)])
            empty_parts += np.isneginf(a[1]).sum() + np.isneginf(b[1]).sum()
        print(f"n = {n}, m = {m}, {alignment:12}: queries that see no key at all: "
              f"{int(np.isneginf(full_lse).sum())}; (query, part) pairs with lse = -inf over the "
              f"{m - 1} splits: {empty_parts}")

# %% [markdown]
# > Every split agrees. The merge needs no special case in the caller: an empty part carries
# > $\text{lse} = -\infty$, hence weight $e^{-\infty} = 0$, and a query empty in both parts stays at
# > $\text{lse} = -\infty$ with output 0, which is what `fully_masked="zero"` gives on the full attention.
# > The same $-\infty$ is the online softmax's starting state $\mu^{(0)}$, and the reason refattn's kernel
# > treats "no key seen yet" separately: $e^{m_\text{old} - m_\text{new}}$ with both $-\infty$ would be
# > $e^{\text{NaN}}$ (exercise 1).

# %% [markdown]
# **Takeaways.**
#
# - Attention over two disjoint key sets combines from the two (output, log-sum-exp) pairs alone, and
#   folding tiles in with `merge_attention` is the online-softmax step of (a).
# - The merge is associative up to rounding, so split-KV decoding can merge its chunks in any order or
#   tree.
# - A part that sees no key carries lse $= -\infty$ and gets weight exactly 0, whatever its output holds;
#   every split of a causal mask, with $n < m$ or $n > m$, merges to the full result.

# %% [markdown]
# ## (e) The backward pass: recomputing the weights from the log-sum-exp
#
# **T. Dao, "FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning", ICLR 2024,
# [arXiv:2307.08691](https://arxiv.org/abs/2307.08691), §3.1.2 and Algorithm 2; FlashAttention, §3.1 and
# Algorithm 4.**
#
# Forwards, $S = \text{scale}\cdot Q K^\top$, $P = \operatorname{softmax}(S)$ row by row, $O = P V$. Backwards,
# given $dO = \partial \mathcal{L} / \partial O$ (any loss $\mathcal{L}$), the chain rule gives
#
# $$
# dV = P^\top dO, \qquad dP = dO\, V^\top, \qquad dS = P \circ (dP - D), \quad
# D_i = \sum_j P_{ij}\, dP_{ij}, \qquad dQ = \text{scale}\cdot dS\, K, \qquad dK = \text{scale}\cdot dS^\top Q .
# $$
#
# The only non-linear step is the softmax: for one row $p = \operatorname{softmax}(s)$,
# $\partial p_j / \partial s_l = p_j(\delta_{jl} - p_l)$, so $ds_l = \sum_j dp_j\, p_j (\delta_{jl} - p_l) =
# p_l\,(dp_l - \sum_j p_j\, dp_j)$: that is $dS = P \circ (dP - D)$. A masked pair has $P_{ij} = 0$, hence
# $dS_{ij} = 0$.
#
# > `refattn.oracle.sdpa_vjp` computes these gradients: `method="equation"` on dense $n \times m$ arrays,
# > `method="blocked"` with FlashAttention-2's tile loop in Numba (`refattn.kernels.blocked_bwd`). First the
# > equations in NumPy against the equation path; then a finite difference, which does not rest on them.

# %%
h, n, m, d = 2, 5, 7, 4
q, k, v = rng.standard_normal((h, n, d)), rng.standard_normal((h, m, d)), rng.standard_normal((h, m, d))
d_out = rng.standard_normal((h, n, d))                     # dO, the gradient arriving from above
scale = 1 / np.sqrt(d)
out, P = sdpa(q, k, v, return_weights=True)                # O and P, (h, n, d) and (h, n, m)

# from the equation
dv = np.swapaxes(P, -1, -2) @ d_out                        # Pᵀ dO
dp = d_out @ np.swapaxes(v, -1, -2)                        # dO Vᵀ, (h, n, m)
D = (P * dp).sum(axis=-1, keepdims=True)                   # D_i = Σ_j P_ij dP_ij
ds = P * (dp - D)                                          # P ∘ (dP − D)
dq, dk = scale * ds @ k, scale * np.swapaxes(ds, -1, -2) @ q
grads = sdpa_vjp(q, k, v, d_out, method="equation")
for mine, ref in ((dq, grads.dq), (dk, grads.dk), (dv, grads.dv)):
    check(mine, ref)

# the same gradients as a directional derivative of loss = Σ dO ∘ O, by central differences:
# error ≈ step²·(third derivative) + eps·|loss|/step ≈ 1e-10 + 1e-10, asserted at 1e-8
direction = rng.standard_normal((3, h, max(n, m), d))
dir_q, dir_k, dir_v = direction[0, :, :n], direction[1, :, :m], direction[2, :, :m]


def loss(t):                                               # moves q, k, v by t along the direction
    return np.sum(d_out * sdpa(q + t * dir_q, k + t * dir_k, v + t * dir_v))


step = 1e-5
numeric = (loss(step) - loss(-step)) / (2 * step)
analytic = np.sum(dq * dir_q) + np.sum(dk * dir_k) + np.sum(dv * dir_v)
assert abs(numeric - analytic) <= 1e-8 * max(1.0, abs(analytic)), (numeric, analytic)
print(f"directional derivative: analytic {analytic:.6f}, central difference {numeric:.6f}")

# %% [markdown]
# ### Why $D_i = dO_i \cdot O_i$
#
# $D_i$ is a sum over *all* the keys of row $i$, but the tile loop below meets them one tile at a time and
# needs $D_i$ in every tile. It needs no pass over the row: since $dP_{ij} = dO_i \cdot v_j$,
#
# $$
# D_i = \sum_j P_{ij}\, dP_{ij} = \sum_j P_{ij}\, (dO_i \cdot v_j) = dO_i \cdot \Big(\sum_j P_{ij}\, v_j\Big)
# = dO_i \cdot O_i ,
# $$
#
# one dot product of length $d_v$ per query, from the output the forward pass returned (FlashAttention-2,
# §3.1.2). Each equality, asserted:

# %%
step_1 = (P * dp).sum(axis=-1)                                         # Σ_j P_ij dP_ij
step_2 = np.einsum("hij,hie,hje->hi", P, d_out, v)                     # Σ_j P_ij (dO_i · v_j)
step_3 = np.einsum("hie,hie->hi", d_out, P @ v)                        # dO_i · (Σ_j P_ij v_j)
step_4 = np.einsum("hie,hie->hi", d_out, out)                          # dO_i · O_i
for later in (step_2, step_3, step_4):
    check(later, step_1)
check(ds.sum(axis=-1), np.zeros((h, n)))    # and each row of dS sums to 0: softmax ignores a shift of s
print("D (head 0):", step_4[0])

# %% [markdown]
# ### The weights recomputed from $L_i$ are the forward's weights
#
# The forward pass keeps, per query, only $O_i$ and $L_i = \log \sum_l e^{s_{il}}$ (section (a): $\mu + \log
# \ell$). The backward pass recomputes each weight from its own score and $L_i$:
#
# $$
# e^{s_{ij} - L_i} = \frac{e^{s_{ij}}}{e^{L_i}} = \frac{e^{s_{ij}}}{\sum_l e^{s_{il}}} = P_{ij} .
# $$
#
# This is the definition of the softmax, not an approximation of it, and it reads no other key: a tile of
# $P$ is recomputed from that tile's scores and $n$ numbers $L_i$, so no $n \times m$ array is kept between
# the two passes. In floating point $e^{s - L}$ and the equation path's $e^{s - \mu} / \ell$ round
# differently, so they agree to about one unit in the last place, asserted at $10^{-15}$ (weights are at
# most 1).

# %%
n, m, d = 8, 12, 4
q, k, v = rng.standard_normal((n, d)), rng.standard_normal((m, d)) * 1.5, rng.standard_normal((m, d))
_, P, L = sdpa(q, k, v, return_weights=True, return_lse=True)        # the equation path: P from all of S
out_blocked, L_blocked = sdpa(q, k, v, method="blocked", block_size=4, return_lse=True)   # what FA keeps
check(L_blocked, L)

S = q @ k.T / np.sqrt(d)
recomputed = np.exp(S - L_blocked[:, None])                           # every entry alone: e^{s_ij − L_i}
np.testing.assert_allclose(recomputed, P, rtol=0, atol=1e-15)
tile = np.exp(S[4:8, 4:8] - L_blocked[4:8, None])                     # one 4 × 4 tile, nothing else read
np.testing.assert_allclose(tile, P[4:8, 4:8], rtol=0, atol=1e-15)
print(f"max |exp(s - L) - P| {viz.roundoff_text(np.abs(recomputed - P).max(), equals=True)}, "
      f"{recomputed.size} weights from {S.size} scores and {L.size} log-sum-exps")

# %% [markdown]
# ### From the equation: the backward tile loop
#
# > FlashAttention-2's order (Algorithm 2): key tiles outer. A key tile $J$ stays put while the query
# > tiles $I$ stream past it; its $dK_J$ and $dV_J$ are sums over the queries, so they accumulate in the
# > inner loop and are finished, and written once, when the inner loop ends. $dQ_I$ is a sum over the keys:
# > it receives one term per key tile and is final only after the last key tile. (Parallel kernels give
# > each thread its own key tiles; refattn's kernel keeps a partial $dQ$ per group of key tiles and adds
# > them at the end.) Each step recomputes one tile of $P$ from $L$ and uses $D_i = dO_i \cdot O_i$.
# >
# > The mask is the causal mask of notebook 01, `refattn.causal_mask`, applied by selection: a masked score
# > is $-\infty$, so its weight $e^{-\infty - L_i}$ is exactly 0, and a tile the mask hides entirely is
# > skipped. Every query here sees at least one key, so $L_i$ is finite; a query that sees none has
# > $L_i = -\infty$ and $e^{-\infty - (-\infty)}$ is NaN, which refattn's kernel treats apart (as in
# > exercise 1).

# %%
# from the equation: FlashAttention-2 Alg. 2 in plain NumPy (not refattn); one head, allowed = (n, m) bool
def backward_tiles(q, k, v, d_out, out, lse, allowed, block_q, block_k, steps=None):
    n, m, scale = q.shape[0], k.shape[0], 1 / np.sqrt(q.shape[1])
    D = np.einsum("ie,ie->i", d_out, out)                               # D_i = dO_i · O_i, once
    dq, dk, dv = np.zeros(q.shape), np.zeros(k.shape), np.zeros(v.shape)
    for j0 in range(0, m, block_k):                                     # key tiles, outer
        J = slice(j0, j0 + block_k)
        for i0 in range(0, n, block_q):                                 # query tiles, inner
            I = slice(i0, i0 + block_q)
            if not allowed[I, J].any():
                continue                                                # hidden by the mask: skipped
            s = np.where(allowed[I, J], q[I] @ k[J].T * scale, -np.inf)
            p = np.exp(s - lse[I, None])                                # P_IJ recomputed from L
            ds = p * (d_out[I] @ v[J].T - D[I, None])                   # dS = P ∘ (dP − D)
            dv[J] += p.T @ d_out[I]                                     # dV_J += P_IJᵀ dO_I
            dk[J] += scale * ds.T @ q[I]                                # dK_J += scale dS_IJᵀ Q_I
            dq[I] += scale * ds @ k[J]                                  # dQ_I += scale dS_IJ K_J
            if steps is not None:                                       # for the figure below
                steps.append((I, J, p, dq.copy(), dk.copy(), dv.copy()))
    return dq, dk, dv


# %% [markdown]
# > The check: $n = 8$ queries, $m = 12$ keys, both causal alignments ($n \ne m$, so they differ), tile sizes
# > that divide $n$ and $m$ and that do not. The forward pass is refattn's blocked kernel, which returns
# > $O$ and $L$; the loop's gradients are asserted against `sdpa_vjp` with `method="equation"` and with
# > `method="blocked"` (the same tiles).

# %%
d_out = rng.standard_normal((n, d))
print(f"{'causal':>12}  {'block (q, k)':>12}  {'tiles run':>9}  {'|mine - equation|':>17}  {'|blocked - equation|':>20}")
for alignment in ("top-left", "bottom-right"):
    allowed = refattn.causal_mask(n, m, causal=alignment)           # True = may attend
    equation = sdpa_vjp(q, k, v, d_out, causal=alignment, method="equation")
    for block in [(4, 4), (2, 6), (3, 5), (8, 12)]:
        out, lse = sdpa(q, k, v, causal=alignment, method="blocked", block_size=block, return_lse=True)
        steps = []
        mine = backward_tiles(q, k, v, d_out, out, lse, allowed, *block, steps=steps)
        blocked = sdpa_vjp(q, k, v, d_out, causal=alignment, method="blocked", block_size=block)
        for mine_g, blocked_g, ref in zip(mine, blocked[:3], equation[:3], strict=True):   # dq, dk, dv
            check(mine_g, ref)
            check(blocked_g, ref)
        err_mine = max(np.abs(a - b).max() for a, b in zip(mine, equation[:3], strict=True))
        err_blocked = max(np.abs(a - b).max() for a, b in zip(blocked[:3], equation[:3], strict=True))
        tiles = -(-n // block[0]) * -(-m // block[1])
        print(f"{alignment:>12}  {str(block):>12}  {len(steps):>4} / {tiles:<2}  {viz.roundoff_text(err_mine):>17}  "
              f"{viz.roundoff_text(err_blocked):>20}")

# %% [markdown]
# > The loop step by step, bottom-right causal mask, tiles of $4 \times 4$: three key tiles times two
# > query tiles, of which the mask hides one (keys 8–11 for queries 0–3), so five steps, one column each.
# > Top: the tile of $P$ recomputed at that step (outlined; grey: not computed at this step, or masked).
# > Below: the partial $dQ$, $dK$, $dV$ after the step, transposed so that a column is one query or one key
# > (the columns of $dK^\top$ and $dV^\top$ line up with those of $P$), each on one signed scale for all
# > steps; grey columns belong to key tiles not reached yet.

# %%
alignment, block = "bottom-right", (4, 4)
allowed = refattn.causal_mask(n, m, causal=alignment)
out, lse = sdpa(q, k, v, causal=alignment, method="blocked", block_size=block, return_lse=True)
final = sdpa_vjp(q, k, v, d_out, causal=alignment, method="blocked", block_size=block)
steps = []
backward_tiles(q, k, v, d_out, out, lse, allowed, *block, steps=steps)

p_tiles, snapshots = [], {"dQ": [], "dK": [], "dV": []}
for t, (I, J, p, dq, dk, dv) in enumerate(steps):
    frame = np.full((n, m), np.nan)
    frame[I, J] = np.where(allowed[I, J], p, np.nan)              # this step's tile of P, masked pairs grey
    p_tiles.append(frame)
    reached = np.arange(m) < J.stop                               # key rows whose tile has started
    snapshots["dQ"].append(dq)
    snapshots["dK"].append(np.where(reached[:, None], dk, np.nan))
    snapshots["dV"].append(np.where(reached[:, None], dv, np.nan))
    last_of_tile = t + 1 == len(steps) or steps[t + 1][1] != J
    if last_of_tile:                                              # a key tile's dK, dV are final when it ends
        check(dk[J], final.dk[J])
        check(dv[J], final.dv[J])
    assert (t + 1 == len(steps)) == (np.abs(dq - final.dq).max() <= 1e-13)   # dQ is final only at the end

fig = viz.figure((14, 8.6))
rows = fig.subfigures(4, 1, height_ratios=[8, 4.4, 4.4, 4.4])
axes = viz.draw_attention(rows[0], np.array(p_tiles), vmax=1.0, annotate=False,
                          titles=[f"step {t + 1}: P, queries {I.start}-{I.stop - 1}, keys {J.start}-{J.stop - 1}"
                                  for t, (I, J, *_) in enumerate(steps)])
for ax, (I, J, *_) in zip(axes[0], steps, strict=True):
    ax.add_patch(mpl.patches.Rectangle((J.start - 0.5, I.start - 0.5), J.stop - J.start, I.stop - I.start,
                                       fill=False, ec="C3", lw=2))
for row, (name, frames), xlabel in zip(rows[1:], snapshots.items(), ("query i", "key j", "key j"), strict=True):
    frames = np.swapaxes(np.array(frames), -1, -2)                # transposed: one column per query / key
    viz.draw_attention(row, frames, signed=True, vmax=float(np.nanmax(np.abs(frames))), annotate=False,
                       titles=[f"{name}ᵀ after step {t + 1}" for t in range(len(steps))], xlabel=xlabel,
                       ylabel="feature")
fig

# %% [markdown]
# > Steps 1 and 2 finish keys 0–3 of $dK$ and $dV$, steps 3 and 4 keys 4–7, and step 5, the only tile of
# > keys 8–11 that the mask leaves, finishes those at once: a key tile's columns do not change after its last
# > step. $dQ$ changes at every step (queries 0–3 at steps 1 and 3, queries 4–7 at steps 2, 4 and 5) and is
# > final only after step 5. The arrays that live across steps are $dQ$, $dK$, $dV$, $L$ and $D$; a tile of
# > $P$ exists for one step.

# %% [markdown]
# ### Memory
#
# > The equation path forms the scores, the weights, $dP$ and $dS$: several $h \times n \times m$ arrays.
# > The blocked path keeps, besides the gradients it returns, the forward pass's $O$ (it computes it
# > again, since `sdpa_vjp` takes only $q, k, v$ and $dO$), $L$ and $D$ ($n$ numbers each per head), a partial
# > $dQ$ per group of key tiles (`refattn.kernels.blocked_bwd.KEY_GROUP_TASKS`; with two heads, four groups)
# > and a fixed scratch of a few tiles per task: $O(n \cdot d)$. Measured as in (c), with `tracemalloc`,
# > one Numba thread for a repeatable peak, the smaller peak of two calls, rounded to 10 KiB; causal, two
# > heads, $d = 64$.

# %%
def rounded(peak):
    return int(round(peak / (10 * KiB))) * 10 * KiB                  # to 10 KiB: a few KiB vary per call


KiB, heads, d = 2**10, 2, 64
ns_bwd, peaks = (256, 512, 1024, 2048), {"equation": [], "blocked": []}
for n_ in ns_bwd:
    q, k, v, d_out = rng.standard_normal((4, heads, n_, d))
    eq = min(traced_peak(partial(sdpa_vjp, q, k, v, d_out, causal=True, method="equation")) for _ in range(2))
    numba.set_num_threads(1)
    bl = min(traced_peak(partial(sdpa_vjp, q, k, v, d_out, causal=True, method="blocked")) for _ in range(2))
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    peaks["equation"].append(eq)
    peaks["blocked"].append(bl)
print(f"{'n':>5}  {'n x m (MiB)':>11}  {'equation peak':>13}  {'/ n x m':>7}  {'blocked peak':>12}  {'/ n x d':>7}")
for n_, eq, bl in zip(ns_bwd, peaks["equation"], peaks["blocked"], strict=True):   # printed after measuring, as in (c)
    nm_bytes, nd_bytes = heads * n_ * n_ * 8, heads * n_ * d * 8
    print(f"{n_:5d}  {nm_bytes / MiB:11.2f}  {rounded(eq) / MiB:13.2f}  {rounded(eq) / nm_bytes:7.1f}  "
          f"{rounded(bl) / MiB:12.2f}  {rounded(bl) / nd_bytes:7.1f}")

eq, bl = np.array(peaks["equation"], float), np.array(peaks["blocked"], float)
assert np.all(np.abs(eq[1:] / eq[:-1] - 4) < 0.1)                     # doubling n: 4 times the memory, n²
growth = np.diff(bl)                                                   # a + b·n: the increments double with n
assert np.all(np.abs(growth[1:] / growth[:-1] - 2) < 0.02), growth
assert bl[-1] < eq[-1] / 20

# %% [markdown]
# > The equation path's peak is about seven $n \times m$ arrays and quadruples when $n$ doubles. The
# > blocked path's is about eight $n \times d$ arrays (the three gradients, $O$ and four partial $dQ$; $L$ and
# > $D$ are $n$ numbers per head) plus a scratch that does not depend on $n$: it doubles when $n$ doubles.
# > The equation path's memory is what stops gradient checks at large $n$ (section (c): one $n \times m$
# > matrix is 64 GiB at $n = 32768$ with 8 heads); `sdpa_vjp`'s default switches to the blocked path when
# > the dense arrays would not fit the memory budget.

# %% [markdown]
# **Takeaways.**
#
# - The backward pass needs, per query, only $O_i$ and $L_i$ from the forward: $e^{s_{ij} - L_i}$ is the
#   forward's weight (to one rounding), and $\sum_j P_{ij}\, dP_{ij} = dO_i \cdot O_i$ needs no pass over
#   the row.
# - With key tiles outer, each key tile finishes its $dK$, $dV$ rows and writes them once; $dQ$ receives one
#   term per key tile. The NumPy loop and `sdpa_vjp(method="blocked")` equal the equation path to
#   $10^{-13}$, with $n \ne m$ and both causal alignments.
# - The blocked backward's memory grows like $n \cdot d$, the equation path's like $n \cdot m$.

# %% [markdown]
# ## (f) Exercises
#
# 1. **Causal tiles.** Add `causal=True` (top-left) to `online_attention` of (a): mask the scores of a tile
#    with `np.where(j <= i, s, -np.inf)`, and skip key tiles that lie entirely right of the query tile's
#    last row. Check it against `sdpa(q, k, v, causal=True)` and against `method="blocked"` for $n = m$ and
#    for $n > m$ with `causal="bottom-right"`. What goes wrong in `fold` for a query that has seen no key
#    yet?
#    <details><summary>Hint</summary>For such a row both <code>run_max</code> and the tile's maximum are
#    <code>-inf</code>, so <code>alpha = exp(-inf - (-inf)) = exp(nan)</code>. Guard it:
#    <code>alpha = np.where(np.isneginf(new_max), 1.0, np.exp(run_max - new_max))</code> and
#    <code>p = np.where(np.isneginf(new_max)[..., None], 0.0, np.exp(s - new_max[..., None]))</code>. Skipping
#    tiles: a query tile with rows <code>i0 .. i1-1</code> needs key tiles with <code>j0 &lt;= i1 - 1 + (m -
#    n)</code> (bottom-right).</details>
#
# 2. **The maximum is only for safety.** Replace the running maximum by 0 in `fold` (so
#    $\ell = \sum_j e^{s_j}$) and multiply the keys by 100. At what score does the sum overflow in float64,
#    and what do `sdpa` and your loop of (a) return there? Then do the same in float32
#    (`sdpa(..., dtype=np.float32)`).
#    <details><summary>Hint</summary><code>np.exp(x)</code> is <code>inf</code> for <code>x &gt; 709.78</code>
#    in float64 and <code>x &gt; 88.72</code> in float32, and <code>inf / inf = nan</code>. With the running
#    maximum every exponent is at most 0.</details>
#
# 3. **The bias gradient.** With a float mask $B$ (an additive bias: `sdpa(q, k, v, B)` is
#    $\operatorname{softmax}(\text{scale}\cdot QK^\top + B)\,V$) the scores gain $B$ and $dB = dS$. Give
#    `backward_tiles` of (e) a `bias` argument: add `bias[I, J]` to each tile's scores and write the tile's
#    $dS$ into a `d_bias` array. Check it against `sdpa_vjp(q, k, v, d_out, B, method="blocked").d_bias`
#    with some entries of $B$ set to $-\infty$. `d_bias` is $n \times m$: why does that not break the rule
#    that the backward pass stores nothing of that size?
#    <details><summary>Hint</summary><code>s = np.where(allowed[I, J], q[I] @ k[J].T * scale + bias[I, J],
#    -np.inf)</code> and <code>d_bias[I, J] = ds</code>; the forward's $L$ must come from the same biased
#    scores, <code>sdpa(q, k, v, B, method="blocked", return_lse=True)</code>. <code>d_bias</code> is an
#    output of the size of an input the caller already holds; what the backward pass avoids is keeping
#    $P$ (or $S$) from the forward pass, and each tile of $dS$ is written once and never read
#    again.</details>
#
# 4. **How many splits?** In the flash-decoding example of (d), merge 64 chunks of one key each, once in
#    order and once as a balanced tree, and compare both with the full attention. Which is closer, and by
#    how much, in units of `np.finfo(float).eps`? Does the blocked kernel with `block_size=(1, 1)` agree
#    with either bit for bit?
#    <details><summary>Hint</summary>Both are within a few eps; the tree is usually the closer, since
#    each term goes through at most $\log_2 64 = 6$ merges instead of up to 63. The kernel keeps
#    $(m, \ell, a)$ and divides once at the end, while the merge renormalises at every step, so expect
#    agreement to rounding, not bits.</details>
