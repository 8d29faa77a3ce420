# %% [markdown]
# # Linear attention: kernels, associativity, and the RNN inside
#
# **T. Lin, Y. Wang, X. Liu, X. Qiu, "A Survey of Transformers", AI Open 2022,
# [arXiv:2106.04554](https://arxiv.org/abs/2106.04554) (v2), §4.2 "Linearized Attention", Eq. (11)–(13).**
# **A. Katharopoulos, A. Vyas, N. Pappas, F. Fleuret, "Transformers are RNNs: Fast Autoregressive
# Transformers with Linear Attention", ICML 2020, [arXiv:2006.16236](https://arxiv.org/abs/2006.16236) (v3).**
# **K. Choromanski et al., "Rethinking Attention with Performers", ICLR 2021,
# [arXiv:2009.14794](https://arxiv.org/abs/2009.14794) (v4).** The gated and delta-rule memories and
# Efficient Attention are cited where they appear.
#
# Attention with a similarity function (the softmax is $\operatorname{sim}(q, k) = \exp(q^\top k/\sqrt d)$),
# and a kernel in its place, $\operatorname{sim}(q, k) = \phi(q)^\top \phi(k)$:
#
# $$
# V'_i = \frac{\sum_{j} \operatorname{sim}(Q_i, K_j)\, V_j}{\sum_{j} \operatorname{sim}(Q_i, K_j)}
# \quad\Longrightarrow\quad
# V'_i = \frac{\phi(Q_i)^\top \sum_{j} \phi(K_j)\, V_j^\top}{\phi(Q_i)^\top \sum_{j} \phi(K_j)}
# $$
#
# In matrix form the numerator is a product of three matrices, and the order is free:
#
# $$
# \big(\phi(Q)\,\phi(K)^\top\big)\, V \;=\; \phi(Q)\,\big(\phi(K)^\top V\big)
# \qquad \text{(left: } n \times m \text{ matrix; right: } F \times d_v \text{ matrix)}
# $$
#
# Causally ($j \le i$) the two sums become running sums, a recurrence with a constant-size state:
#
# $$
# S_i = S_{i-1} + \phi(K_i)\, V_i^\top, \qquad z_i = z_{i-1} + \phi(K_i), \qquad
# V'_i = \frac{\phi(Q_i)^\top S_i}{\phi(Q_i)^\top z_i}, \qquad S_0 = 0,\ z_0 = 0 .
# $$
#
# Shapes, as everywhere in refattn: $n$ queries, $m$ keys, $d$ the width of $q$ and $k$, $d_v$ the
# width of $v$, $F$ the number of features $\phi$ returns.
#
# The plain text paraphrases the survey and the papers, with their section numbers; the only
# quotations are the titles and one printed result of two GitHub issues, in (i). Commentary is set
# apart as block quotes. Every derivation is checked against refattn to 1e-12, and every limit and
# identity is an `assert`.
#
# > **Why linear.** Softmax attention scores all $n \times m$ pairs, because $\exp(q^\top k)$ does
# > not split into a function of $q$ times a function of $k$. A kernel $\phi(q)^\top\phi(k)$ does,
# > so the sum over keys can be done once, before any query is seen. The survey (§4.2) calls this
# > *linearized attention* and names its two ingredients: the feature map $\phi$ and the aggregation
# > rule (a plain sum of the outer products $\phi(k_j) v_j^\top$). H.-y. Lee's lecture on
# > self-attention variants (NTU, *Machine Learning* 2022) makes the same point by swapping the order
# > of two matrix products and counting multiplications; section (b) does that count.
#
# **Contents.** (a) from the equation · (b) the cost of the two orders · (c) the kernel view: elu + 1
# and Performer's features · (d) error versus the number of random features · (e) the RNN view, token
# by token · (f) gated and delta-rule memories · (g) the chunkwise-parallel form · (h) Efficient
# Attention · (i) why Performer's relative errors can be large · (j) exercises

# %%
import matplotlib as mpl
import numpy as np
from matplotlib.patches import Rectangle

import refattn
from refattn import registry, viz
from refattn.linear import (
    delta_beta,
    delta_rule_attention,
    draw_omega,
    efficient_attention,
    elu_feature_map,
    favor_features,
    favor_mse,
    init_delta_beta,
    init_rfa_gate,
    linear_attention,
    performer_attention,
    rfa_attention,
    rfa_gates,
)

np.set_printoptions(precision=3, suppress=True, linewidth=110)
rng = np.random.default_rng(2006_16236)   # arXiv:2006.16236; every draw below comes from rng


def check(mine, ref):
    # "from the equation" cells end here: our few NumPy lines against refattn, to 1e-12
    np.testing.assert_allclose(mine, ref, rtol=1e-12, atol=1e-12)


def styled():
    # hand-made plots (curves, scatters) use the same style file as refattn.viz
    return mpl.style.context(viz.STYLE_PATH)


def rel(a, b):
    # relative Frobenius error of a against the reference b
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


# %% [markdown]
# ## (a) From the equation
#
# Katharopoulos et al. (§3.1–3.2, Eq. 2–6) write attention with a generic non-negative similarity,
# of which the softmax is the case $\operatorname{sim}(q, k) = \exp(q^\top k / \sqrt{d})$. With a kernel,
# $\operatorname{sim}(q, k) = \phi(q)^\top\phi(k)$, the associativity of matrix products takes
# $\phi(Q_i)^\top$ out of the sum over $j$, so that $\sum_j \phi(K_j)V_j^\top$ and $\sum_j \phi(K_j)$ are
# computed once and reused by every query. Their feature map (§3.2.1) is
# $\phi(x) = \operatorname{elu}(x) + 1$, applied elementwise, which is positive, so $F = d$. The survey
# gives the same construction (§4.2, Eq. 11–13).
#
# > Four NumPy lines per order. The general form with $\operatorname{sim} = \exp$ is checked against
# > `scaled_dot_product_attention`. The left product $(\phi(Q)\phi(K)^\top)V$ is checked against
# > `linear_attention(method="equation")`, which also returns the effective matrix
# > $A_{ij} = \phi(q_i)^\top\phi(k_j) / \sum_l \phi(q_i)^\top\phi(k_l)$. The right product
# > $\phi(Q)(\phi(K)^\top V)$ is checked against `method="right"`, which never forms an $n \times m$
# > array.

# %%
n, m, d, d_v = 10, 12, 4, 3
q, k, v = rng.standard_normal((n, d)), rng.standard_normal((m, d)), rng.standard_normal((m, d_v))

sim = np.exp(q @ k.T / np.sqrt(d))                                 # (n, m)  sim(q_i, k_j) = exp(q_i·k_j/√d)
check(sim @ v / sim.sum(axis=1, keepdims=True), refattn.scaled_dot_product_attention(q, k, v))

phi_q = np.where(q > 0, q + 1, np.exp(q))                          # (n, F)  φ(x) = elu(x) + 1, F = d
phi_k = np.where(k > 0, k + 1, np.exp(k))                          # (m, F)
check(phi_q, elu_feature_map(q))

left = (phi_q @ phi_k.T) @ v / (phi_q @ phi_k.T).sum(axis=1, keepdims=True)   # (n, d_v)  via an n × m matrix
KV, z = phi_k.T @ v, phi_k.sum(axis=0)                             # (F, d_v), (F,)   Σ_j φ(k_j) v_jᵀ, Σ_j φ(k_j)
right = phi_q @ KV / (phi_q @ z)[:, None]                          # (n, d_v)  via an F × d_v matrix

out_quad, A = linear_attention(q, k, v, elu_feature_map, return_weights=True)
check(left, out_quad)
check(right, linear_attention(q, k, v, elu_feature_map, method="right"))
check(left, right)                                                 # associativity, to rounding
check(A, phi_q @ phi_k.T / (phi_q @ z)[:, None])
print(f"left  order: (φ(Q) φ(K)ᵀ) is {(phi_q @ phi_k.T).shape}, then times V {v.shape}")
print(f"right order: φ(K)ᵀV is {KV.shape} and φ(K)ᵀ1 is {z.shape}, then φ(Q) {phi_q.shape} times them")
print("rows of A sum to", A.sum(axis=1).round(12), " min entry", A.min().round(3), "(φ > 0, so A > 0)")

# %% [markdown]
# **Takeaways.**
#
# - With a kernel $\phi(q)^\top\phi(k)$ in place of $\exp(q^\top k/\sqrt d)$ the products can be taken in
#   either order: the left one forms an $n \times m$ matrix, the right one an $F \times d_v$ matrix, and
#   the two agree to rounding.
# - elu + 1 gives positive features, so the effective attention matrix is positive and its rows sum
#   to 1, as softmax weights do.


# %% [markdown]
# ## (b) The cost of the two orders, counted
#
# Katharopoulos et al. (§3.2.1) compare the cost of softmax attention, quadratic in the sequence
# length, with that of the right product, linear in it, and note that the number of features enters
# the cost of the right product. The lecture counts the multiplications of the two orders
# exactly, for $Q, K \in \mathbb{R}^{d \times N}$ and $V \in \mathbb{R}^{d' \times N}$ (tokens as
# columns, softmax left out):
#
# - $K^\top Q$ takes $N \cdot d \cdot N$ multiplications and $V A$ another $d' \cdot N \cdot N$: in all
#   $(d + d')N^2$;
# - $V K^\top$ takes $d' \cdot N \cdot d$ and multiplying the result by $Q$ another $d' \cdot d \cdot N$:
#   in all $2 d' d N$.
#
# > **Mapping the lecture's symbols to refattn's.** The lecture's $N$ is the sequence length, here
# > $n$ queries and $m$ keys ($n = m = N$ in self-attention); its $d$ is the width of the queries and
# > keys, which after the feature map is $F$ (for elu + 1, $F = d$; for Performer, $F$ is the number
# > of random features); its $d'$ is $d_v$. A product of an $a \times b$ and a $b \times c$
# > matrix is $a \cdot b \cdot c$ multiply-adds, and counting them needs no instrument: the shapes
# > give it. Below, the counts of the arrays of (a) are taken from their shapes and asserted equal to
# > the formulas:
# >
# > $$\text{left} = n m F + n m d_v \;\xrightarrow{\,n = m = N\,}\; (F + d_v)N^2, \qquad
# > \text{right} = m F d_v + n F d_v \;\xrightarrow{\,n = m = N\,}\; 2 F d_v N .$$
# >
# > The right order wins as soon as $(F + d_v)N^2 > 2 F d_v N$, i.e. for
# > $N > N^\ast = 2 F d_v / (F + d_v)$, the *harmonic mean* of $F$ and $d_v$. The normaliser (row sums
# > on the left; $\phi(K)^\top 1$ and $\phi(Q)z$ on the right) and the feature map itself are left out,
# > as in the lecture; exercise 1 puts them back.

# %%
def macs(a, b):
    # multiply-adds of the matrix product a @ b: a.shape[0]·a.shape[1]·b.shape[1]
    assert a.shape[1] == b.shape[0]
    return a.shape[0] * a.shape[1] * b.shape[1]


F = phi_q.shape[1]
count_left = macs(phi_q, phi_k.T) + macs(phi_q @ phi_k.T, v)       # (φ(Q)φ(K)ᵀ), then (·)V
count_right = macs(phi_k.T, v) + macs(phi_q, KV)                   # φ(K)ᵀV, then φ(Q)(·)
assert count_left == n * m * F + n * m * d_v
assert count_right == m * F * d_v + n * F * d_v
print(f"(a): n = {n}, m = {m}, F = {F}, d_v = {d_v}:  left {count_left} multiply-adds, right {count_right}")


def left_count(N, F, d_v):
    return (F + d_v) * N**2                                        # the lecture's (d + d')N²


def right_count(N, F, d_v):
    return 2 * F * d_v * N                                         # the lecture's 2d'dN


settings = {                                                       # (F, d_v)
    "elu + 1, d = d_v = 64 (F = d)": (64, 64),
    "Performer, d = d_v = 64, m = round(d ln d) = 266": (266, 64),
    "Performer trig/hyperbolic, same draw (F = 2r = 532)": (532, 64),
    "elu + 1, d = 512, d_v = 64": (512, 64),
}
print(f"\n{'setting':<52}{'F':>5}{'d_v':>5}{'N* = 2F·d_v/(F + d_v)':>24}")
for name, (F_, dv_) in settings.items():
    N_star = 2 * F_ * dv_ / (F_ + dv_)
    assert np.isclose(left_count(N_star, F_, dv_), right_count(N_star, F_, dv_))   # the curves cross at N*
    print(f"{name:<52}{F_:>5}{dv_:>5}{N_star:>24.1f}")

N = 4096
print(f"\nat N = {N}, F = d_v = 64: left {left_count(N, 64, 64):.3e}, right {right_count(N, 64, 64):.3e}, "
      f"ratio {left_count(N, 64, 64) / right_count(N, 64, 64):.0f} = N / N*")

# %%
Ns = np.unique(np.round(np.logspace(0, 4, 200)).astype(int))
with styled():
    fig = viz.figure((10, 3.6))
    axes = fig.subplots(1, 2)
    for ax, (name, (F_, dv_)) in zip(axes, list(settings.items())[:2], strict=True):
        N_star = 2 * F_ * dv_ / (F_ + dv_)
        ax.loglog(Ns, left_count(Ns, F_, dv_), label="left  (φ(Q)φ(K)ᵀ)V:  (F + d_v)N²")
        ax.loglog(Ns, right_count(Ns, F_, dv_), label="right  φ(Q)(φ(K)ᵀV):  2F·d_v·N")
        ax.axvline(N_star, color="0.5", lw=0.8, ls=":")
        ax.plot([N_star], [right_count(N_star, F_, dv_)], "ko", ms=5)
        ax.annotate(f"N* = {N_star:.0f}", (N_star, right_count(N_star, F_, dv_)), xytext=(8, -14),
                    textcoords="offset points")
        ax.set(xlabel="sequence length N = n = m", ylabel="multiply-adds (numerator)",
               title=f"{name.split(',')[0]}: F = {F_}, d_v = {dv_}")
        ax.legend(loc="upper left")
fig

# %% [markdown]
# > The two lines cross exactly once, at the harmonic mean of $F$ and $d_v$: $N^\ast = 64$ for elu + 1
# > with $d = d_v = 64$, and about 103 for Performer's default 266 features. Below $N^\ast$ the $n
# > \times m$ matrix is the cheaper route; above it the right order saves a factor $N/N^\ast$, which
# > grows without bound. The memory moves the same way: the left order stores an $n \times m$ matrix,
# > the right one an $F \times d_v$ matrix, whatever $N$ is. (Wall-clock times depend on the machine and
# > on BLAS, so none are printed here; `python -m refattn bench linear` measures the causal scan
# > against the quadratic path.)

# %% [markdown]
# **Takeaways.**
#
# - Counted from the shapes, the left order costs $(F + d_v)N^2$ multiply-adds and the right one
#   $2 F d_v N$; they cross at $N^\ast = 2 F d_v/(F + d_v)$, the harmonic mean of $F$ and $d_v$.
# - Beyond $N^\ast$ the right order saves a factor $N/N^\ast$, and the matrix it stores,
#   $F \times d_v$, does not grow with $N$.

# %% [markdown]
# ## (c) The kernel view: elu + 1 and Performer's random features
#
# Two ways to choose $\phi$:
#
# - **A different kernel.** elu + 1 (Katharopoulos et al., §3.2.1) is positive and cheap ($F = d$), but
#   $\phi(q)^\top\phi(k)$ is not $\exp(q^\top k/\sqrt d)$, nor an estimate of it: linear attention
#   with this map is a different model, not an approximation of softmax attention.
# - **An estimate of the softmax kernel.** Performer (Choromanski et al., §2.3, Lemma 1) draws
#   $\omega_1, \dots, \omega_m \sim \mathcal N(0, I_d)$ and builds features whose inner product is
#   an unbiased estimate of $\operatorname{SM}(x, y) = \exp(x^\top y)$; applied to $q/d^{1/4}$ and
#   $k/d^{1/4}$, it estimates $\exp(q^\top k/\sqrt d)$. The *trigonometric* features are the random
#   Fourier features, $\tfrac{1}{\sqrt r}e^{\|x\|^2/2}[\sin\omega_i^\top x, \cos\omega_i^\top x]$
#   ($F = 2r$); the *positive* ones are $\tfrac{1}{\sqrt r}e^{-\|x\|^2/2}[e^{\omega_i^\top x}]$
#   ($F = r$); the *hyperbolic* ones add $e^{-\omega_i^\top x}$ ($F = 2r$). FAVOR+ is positive features
#   with orthogonal $\omega$ (§2.4).
#
# > Inputs: $n = 16$ tokens, $d = 16$, independent standard normal $q$ and $k$ scaled so that
# > $\|q/d^{1/4}\|^2 \approx 1.5$ on average, a regime where the estimates are usable (section (i)
# > shows what happens when they are not). One draw of $r = 64$ orthogonal $\omega$ serves all three
# > Performer maps. Besides the relative (Frobenius) error of the whole kernel matrix, the table gives
# > the median relative error of single entries, separately for the quarter of pairs with the smallest
# > $\exp(q^\top k/\sqrt d)$ and the quarter with the largest.

# %%
n, d, d_v, r_feat = 16, 16, 8, 64
q, k = np.sqrt(1.5 / np.sqrt(d)) * rng.standard_normal((2, n, d))  # E‖q/d^¼‖² = 1.5
v = rng.standard_normal((n, d_v))
omega = draw_omega(rng, r_feat, d)                                  # (r, d)  orthogonal blocks, χ(d) lengths

exact_kernel = np.exp(q @ k.T / np.sqrt(d))                         # (n, n)  exp(q·k/√d)
out_sm, A_sm = refattn.scaled_dot_product_attention(q, k, v, return_weights=True)
maps = {"softmax (exact)": (out_sm, A_sm, exact_kernel, "—")}
out, A = linear_attention(q, k, v, elu_feature_map, return_weights=True)
maps["elu + 1"] = (out, A, elu_feature_map(q) @ elu_feature_map(k).T, d)
s = d ** -0.25
for kind in ("positive", "hyperbolic", "trig"):
    phi_x, phi_y = favor_features(q * s, omega, kind=kind), favor_features(k * s, omega, kind=kind)
    out, A = performer_attention(q, k, v, omega=omega, kind=kind, return_weights=True)
    check(A, phi_x @ phi_y.T / (phi_x @ phi_y.T).sum(axis=1, keepdims=True))   # Performer = linear attention
    maps[f"Performer {kind}"] = (out, A, phi_x @ phi_y.T, phi_x.shape[1])

small = exact_kernel <= np.quantile(exact_kernel, 0.25)             # the quarter of smallest kernel values
large = exact_kernel >= np.quantile(exact_kernel, 0.75)             # and of the largest
print(f"mean ‖q/d^¼‖² = {np.mean(np.sum((q * s) ** 2, axis=1)):.2f}; exp(q·k/√d) ranges over "
      f"[{exact_kernel.min():.2f}, {exact_kernel.max():.2f}]; largest softmax weight {A_sm.max():.2f}")
print(f"{'map':<21}{'F':>4}{'kernel':>9}{'small quarter':>15}{'large quarter':>15}{'A':>8}{'output':>9}"
      f"{'min A_ij':>10}")
for name, (out, A, K, F_) in maps.items():
    entry = np.abs(K / exact_kernel - 1)                            # relative error of each entry
    kernel = (f"{rel(K, exact_kernel):9.3f}{np.median(entry[small]):15.3f}{np.median(entry[large]):15.3f}"
              if name != "elu + 1" else f"{'—':>9}{'— (another kernel)':>30}")
    print(f"{name:<21}{F_:>4}{kernel}{rel(A, A_sm):8.3f}{rel(out, out_sm):9.3f}{A.min():10.4f}")
print("relative errors: of the kernel matrix, median of single entries, of the attention matrix, of the output")

entry_error = {kind: np.abs(maps[f"Performer {kind}"][2] / exact_kernel - 1) for kind in ("positive", "trig")}
assert np.median(entry_error["trig"][small]) > np.median(entry_error["positive"][small])   # trig: worst on small
assert np.median(entry_error["trig"][large]) < np.median(entry_error["positive"][large])   # positive: worst on large
assert maps["Performer trig"][1].min() < 0 < min(maps[name][1].min() for name in maps if "trig" not in name)

# %%
with styled():
    fig = viz.figure((11, 3.3))
    axes = fig.subplots(1, 4)
    for ax, name in zip(axes[:3], ["Performer positive", "Performer hyperbolic", "Performer trig"], strict=True):
        ax.axhline(1.0, color="0.6", lw=0.8)
        ax.scatter(exact_kernel.ravel(), (maps[name][2] / exact_kernel).ravel(), s=6, alpha=0.6)
        ax.set(xscale="log", ylim=(-0.5, 2.5), xlabel="exp(q·k/√d)", title=f"{name}, r = {r_feat}")
    axes[0].set_ylabel("estimate / exact")
    ax = axes[3]
    ax.loglog(exact_kernel.ravel(), maps["elu + 1"][2].ravel(), ".", ms=4, alpha=0.6, color="C3")
    ax.set(xlabel="exp(q·k/√d)", ylabel="φ(q)·φ(k)", title="elu + 1: another kernel")
    for ax in axes:                                                 # plain ticks on the log axes
        ax.set_xticks([0.5, 1, 2], ["0.5", "1", "2"])
        ax.xaxis.set_minor_formatter(mpl.ticker.NullFormatter())
    axes[3].set_yticks([10, 20, 30], ["10", "20", "30"])
    axes[3].yaxis.set_minor_formatter(mpl.ticker.NullFormatter())
fig

# %%
names = list(maps)
A_grid = np.array([maps[name][1] for name in names])                # (5, n, n): one row of panels
lo = min(0.0, float(A_grid.min()))
viz.plot_attention(A_grid, titles=[f"{name}\n" + ("exp(q·k/√d)" if name.startswith("softmax") else f"F = {maps[name][3]}")
                                   for name in names], vmin=lo, size=2.2,
                   suptitle="effective attention matrices (rows sum to 1); trig may go negative")

# %% [markdown]
# > Read the table against Lemma 2 (section (d)). The trig features are the most accurate of the three
# > on the largest kernel values and the least accurate on the smallest ones; the positive features
# > are the other way round (both asserted above). Attention rows are sums over many keys, most of
# > which have small kernel values, and there the trig estimate can even go negative: the trig matrix
# > has a negative "weight", and a denominator that is a sum of signed terms can come close to zero.
# > That is the paper's argument (§2.3) for positive features. The hyperbolic features, which pair
# > each $\omega$ with $-\omega$, are the best of the three here, at twice the features of the positive
# > map. The positive map's one large error is visible in the third panel: an overestimated large
# > entry takes a big share of its row.
# >
# > elu + 1 is not an estimate at all. Near zero it is about $1 + x$, so for inputs of this size its
# > kernel varies by a factor of about 3 (10 to 30 in the last scatter) where the softmax kernel varies
# > by about 10, and its attention is nearly uniform (the flat second panel). Its "errors" in the table
# > measure how far another kernel is from softmax, not an estimation error; in a trained model the
# > projections adapt to the kernel.

# %% [markdown]
# **Takeaways.**
#
# - elu + 1 is another kernel, not an estimate of the softmax kernel; Performer's random features give
#   unbiased estimates of $\exp(q^\top k/\sqrt d)$, and Performer attention is linear attention with
#   those features.
# - The trig features are the most accurate on the largest kernel values and the least on the smallest,
#   the positive features the other way round; only the trig features give negative weights.

# %% [markdown]
# ## (d) Error versus the number of random features
#
# Choromanski et al. (§2.3, Lemma 2) give the mean squared error of the three estimators from $r$
# independent $\omega_i \sim \mathcal N(0, I_d)$, with $z = x + y$, $\Delta = x - y$ and
# $\operatorname{SM} = \exp(x^\top y)$:
#
# $$
# \operatorname{MSE}_{\text{trig}} = \tfrac{1}{2r}\, e^{\|z\|^2} \operatorname{SM}^{-2} \big(1 - e^{-\|\Delta\|^2}\big)^2,
# \qquad
# \operatorname{MSE}_{+} = \tfrac{1}{r}\, e^{\|z\|^2} \operatorname{SM}^{2} \big(1 - e^{-\|z\|^2}\big),
# \qquad
# \operatorname{MSE}_{\text{hyp}} = \tfrac12 \big(1 - e^{-\|z\|^2}\big) \operatorname{MSE}_{+}.
# $$
#
# > `favor_mse(x, y, r, kind=...)` evaluates these. The trig error vanishes as $x \to y$ (then
# > $\Delta = 0$) and explodes when $\operatorname{SM}$ is small; the positive error vanishes as
# > $x \to -y$ (then $z = 0$) and is proportional to $\operatorname{SM}^2$, so it is *relatively*
# > small exactly where the kernel is small. Below, two pairs in $d = 4$: one close to each other
# > (trig wins) and one close to opposite (positive wins). For each $r$, 4000 independent draws of
# > i.i.d. $\omega$ (`draw_omega(..., orthogonal=False)`) give an empirical MSE, which is asserted
# > within 4 standard errors of the closed form. The x-axis counts projections: trig and hyperbolic
# > features have $F = 2r$, positive ones $F = r$.

# %%
d4 = 4
pairs = {
    "x ≈ y (trig wins)": (np.array([0.5, 0.3, -0.2, 0.1]), np.array([0.45, 0.35, -0.1, 0.1])),
    "x ≈ −y (positive wins)": (np.array([0.6, -0.3, 0.2, 0.1]), np.array([-0.5, 0.35, -0.3, 0.0])),
}
kinds = ("positive", "hyperbolic", "trig")
rs = 2 ** np.arange(9)                                              # r = 1 … 256
R = 4000
omegas = draw_omega(rng, R * rs[-1], d4, orthogonal=False).reshape(R, rs[-1], d4)   # R independent draws
mse = {}
for label, (x_, y_) in pairs.items():
    sm = np.exp(x_ @ y_)
    print(f"{label}: SM = {sm:.3f}, ‖x+y‖² = {np.sum((x_ + y_) ** 2):.3f}, ‖x−y‖² = {np.sum((x_ - y_) ** 2):.3f}")
    for kind in kinds:
        emp, theory, z_scores = [], [], []
        for r_ in rs:
            est = np.sum(favor_features(x_[None], omegas[:, :r_], kind=kind)
                         * favor_features(y_[None], omegas[:, :r_], kind=kind), axis=-1)[:, 0]   # (R,)
            sq = (est - sm) ** 2
            emp.append(sq.mean())
            theory.append(float(favor_mse(x_, y_, int(r_), kind=kind)))
            z_scores.append((sq.mean() - theory[-1]) / (sq.std() / np.sqrt(R)))
        mse[label, kind] = np.array(emp), np.array(theory)
        assert np.all(np.abs(z_scores) < 4), (label, kind, z_scores)
        print(f"   {kind:<11} MSE at r = 1: {theory[0]:9.3g}   empirical/closed form over r: "
              f"{np.round(np.array(emp) / np.array(theory), 2)}")

# %%
with styled():
    fig = viz.figure((10, 3.6))
    axes = fig.subplots(1, 2, sharey=True)
    for ax, label in zip(axes, pairs, strict=True):
        for c, kind in enumerate(kinds):
            emp, theory = mse[label, kind]
            ax.loglog(rs, theory, color=f"C{c}", label=f"{kind}: Lemma 2")
            ax.loglog(rs, emp, "o", color=f"C{c}", ms=4, mfc="none", label=f"{kind}: {R} draws")
        ax.set(xlabel="r (random projections)", title=label)
    axes[0].set_ylabel("MSE of the estimate of exp(xᵀy)")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside right center")
fig

# %% [markdown]
# > Every curve falls as $1/r$: Lemma 2's MSE is the variance of one feature divided by $r$, so
# > doubling the features halves the MSE, and only the constant depends on the pair. That constant
# > is what differs by orders of magnitude: a factor of about $3 \cdot 10^{4}$ in favour of trig for the
# > close pair, and about 70 in favour of positive for the opposite pair. The paper's argument (§2.3)
# > is that attention needs the many small kernel values to be accurate, which favours the positive
# > features.
# >
# > **The knob on a whole attention layer: $r$, with i.i.d. or orthogonal $\omega$.** FAVOR+ draws
# > the $\omega_i$ in orthogonal blocks of $d$ (§2.4; Theorem 2 shows the MSE of the positive
# > estimator can only go down). Below, $n = 64$, $d = 16$, $\|q/d^{1/4}\|^2 \approx 0.5$, and the
# > relative output error against exact softmax attention, averaged over 80 draws per point.

# %%
n, d = 64, 16
q, k, v = 0.35 * rng.standard_normal((3, n, d))                   # E‖q/d^¼‖² = 0.35² · √16 ≈ 0.5
out_sm = refattn.scaled_dot_product_attention(q, k, v)
feature_counts = [4, 8, 16, 32, 64, 128, 256, 512]
draws = 80
errors = {}
for orthogonal in (False, True):
    e = np.array([[rel(performer_attention(q, k, v, num_features=r_, rng=rng, orthogonal=orthogonal,
                                           method="right"), out_sm) for _ in range(draws)]
                  for r_ in feature_counts])                        # (len(r), draws)
    errors[orthogonal] = e.mean(axis=1), e.std(axis=1) / np.sqrt(draws)
print(f"{'r':>5}{'i.i.d.':>17}{'orthogonal':>17}")
for t, r_ in enumerate(feature_counts):
    print(f"{r_:>5}" + "".join(f"{errors[o][0][t]:>10.3f} ± {errors[o][1][t]:.3f}" for o in (False, True)))
(mean_iid, se_iid), (mean_ort, se_ort) = errors[False], errors[True]
slope = np.polyfit(np.log(feature_counts[3:]), np.log(mean_ort[3:]), 1)[0]
one_block = np.array(feature_counts) >= d
assert np.all(mean_ort[one_block] + 2 * np.hypot(se_iid, se_ort)[one_block] < mean_iid[one_block])   # r ≥ d
assert -0.6 < slope < -0.4
print(f"orthogonal lower at {np.sum(errors[True][0] < errors[False][0])} of {len(feature_counts)} r; "
      f"slope of log(error) vs log(r), r ≥ 32: "
      f"{np.polyfit(np.log(feature_counts[3:]), np.log(errors[True][0][3:]), 1)[0]:.2f} (−½: error ∝ 1/√r)")

with styled():
    fig = viz.figure((6.5, 3.6))
    ax = fig.subplots()
    for orthogonal, marker in ((False, "o-"), (True, "s-")):
        mean, se = errors[orthogonal]
        ax.errorbar(feature_counts, mean, yerr=2 * se, fmt=marker, capsize=2,
                    label="orthogonal ω (FAVOR+)" if orthogonal else "i.i.d. ω")
    ax.plot(feature_counts, errors[True][0][3] * np.sqrt(32 / np.array(feature_counts)), "k--", lw=0.8,
            label="∝ 1/√r")
    ax.set(xscale="log", yscale="log", xlabel="r (positive features)", ylabel="‖out − softmax out‖ / ‖softmax out‖",
           title=f"Performer output error, n = {n}, d = {d}, {draws} draws per point (±2 s.e.)")
    ax.set_yticks([0.05, 0.1, 0.2, 0.4, 0.6], ["0.05", "0.1", "0.2", "0.4", "0.6"])
    ax.yaxis.set_minor_formatter(mpl.ticker.NullFormatter())
    ax.legend()
fig

# %% [markdown]
# > The output error falls like $1/\sqrt r$ (fitted slope about $-0.5$, asserted), the square root of
# > the kernel's $1/r$. Orthogonal blocks lower it by a modest and consistent 8–20 % once $r \ge d$
# > (at least one full block), by more than two standard errors at every such $r$ (asserted); with
# > $r = 4$ or 8, a fraction of one block, the two are within their error bars. The relative errors
# > look large because the exact output averages many random values and is small; the point of the plot
# > is the slope and the gap, not the level. At larger $\|q\|, \|k\|$ the features are heavy-tailed and
# > the error approaches its $1/\sqrt r$ regime only at much larger $r$: section (i).

# %% [markdown]
# **Takeaways.**
#
# - Lemma 2's closed-form MSE agrees with 4000 independent draws at every $r$ and falls like $1/r$; the
#   constant in front depends on the pair and differs by orders of magnitude between the estimators.
# - On a whole attention layer the output error falls like $1/\sqrt r$, and orthogonal $\omega$ lower it
#   once $r \ge d$.

# %% [markdown]
# ## (e) The RNN view, token by token
#
# With a causal mask the sums run over $j \le i$ (Katharopoulos et al., §3.3), and they
# are prefix sums: $S_i = \sum_{j \le i}\phi(K_j)V_j^\top$ and $z_i = \sum_{j \le i}\phi(K_j)$, each
# obtained from the previous one by adding one term. Written as a recurrence (§3.4, Eq. 16–20), the
# layer is a recurrent network whose hidden state is the pair $(S_i, z_i)$: at inference each new
# token costs a constant amount of work and memory. The survey (§4.2) reads $S_i$ as a memory matrix
# that accumulates associations (outer products of key features and values) and that the query
# features read out, with a normalisation.
#
# > Below: the recurrence in five NumPy lines, asserted equal to both of refattn's causal paths (the
# > masked left product, and `method="scan"`, a Numba loop); then the state stepped through token by
# > token; then a check that output $i$ ignores every later token.

# %%
n, d, d_v = 8, 4, 3
q, k, v = rng.standard_normal((n, d)), rng.standard_normal((n, d)), rng.standard_normal((n, d_v))
phi_q, phi_k = elu_feature_map(q), elu_feature_map(k)
F = phi_k.shape[1]

S, z, outs, states = np.zeros((F, d_v)), np.zeros(F), [], []
for i in range(n):
    S, z = S + np.outer(phi_k[i], v[i]), z + phi_k[i]               # write token i: S_i, z_i
    outs.append(phi_q[i] @ S / (phi_q[i] @ z))                      # read with query i
    states.append(np.column_stack([S, z]))                          # (F, d_v + 1)  [S_i | z_i]
outs, states = np.array(outs), np.array(states)

check(outs, linear_attention(q, k, v, elu_feature_map, causal=True, method="scan"))
out_causal, A_causal = linear_attention(q, k, v, elu_feature_map, causal=True, return_weights=True)
check(outs, out_causal)                                             # the masked left product
for i in range(n):
    check(states[i][:, :d_v], phi_k[:i + 1].T @ v[:i + 1])          # S_i = Σ_{j≤i} φ(k_j) v_jᵀ
assert np.all(np.triu(A_causal, 1) == 0)

q2, k2, v2 = q.copy(), k.copy(), v.copy()                          # replace tokens 5..7 (the future of 0..4)
q2[5:], k2[5:], v2[5:] = 3 * rng.standard_normal((n - 5, d)), 3 * rng.standard_normal((n - 5, d)), \
    3 * rng.standard_normal((n - 5, d_v))
out2 = linear_attention(q2, k2, v2, elu_feature_map, causal=True, method="scan")
check(out2[:5], outs[:5])
print(f"state: S_i is F × d_v = {F} × {d_v} and z_i has F = {F} entries, at every step")
print("outputs 0..4 unchanged when tokens 5..7 are replaced: causal")

# %%
lim = float(np.abs(states).max())
viz.step_through(states, mode="html", interval=900, cmap="RdBu_r", vmin=-lim, vmax=lim, size=2.6,
                 titles=[f"after token {i}: [S_{i} | z_{i}]" for i in range(n)],
                 row_labels=[f"φ{f}" for f in range(F)], col_labels=[str(c) for c in range(d_v)] + ["z"],
                 xlabel="value dim of S  |  z", ylabel="feature f")

# %%
# three of the player's frames, for viewers that drop its JavaScript
shown = [0, n // 2 - 1, n - 1]
viz.plot_attention(states[shown], cmap="RdBu_r", vmin=-lim, vmax=lim, size=2.2,
                   titles=[f"after token {i}: [S_{i} | z_{i}]" for i in shown],
                   row_labels=[f"φ{f}" for f in range(F)], col_labels=[str(c) for c in range(d_v)] + ["z"],
                   xlabel="value dim of S  |  z", ylabel="feature f",
                   suptitle="the state [S_i | z_i] of causal linear attention (elu + 1), frames of the player above")

# %% [markdown]
# > Each frame is the whole state after one more token: the $F \times d_v$ block is $S_i$, the last
# > column is $z_i$. Every step adds the rank-one term $\phi(k_i)v_i^\top$ to $S$ and $\phi(k_i) > 0$
# > to $z$, so $z$ only grows (its column reddens step by step), while entries of $S$ can change sign.
# > Nothing is ever removed: the memory of the plain sum rule forgets nothing and weighs all
# > past tokens by their kernel value alone, which is what the gated and delta-rule memories of (f)
# > change. The next player shows the same computation as rows of the effective matrix: at step $i$,
# > row $i$ appears; earlier rows never change. Under each player, a strip of three of its frames
# > shows the same steps for viewers that drop its JavaScript (GitHub's notebook viewer).

# %%
frames = np.where(np.arange(n)[None, :, None] <= np.arange(n)[:, None, None], A_causal[None], np.nan)
viz.step_through(frames, mode="html", interval=900, vmax=1.0, size=2.8,
                 titles=[f"step {i}: row {i} = φ(q_{i})ᵀφ(k_j) / φ(q_{i})ᵀz_{i}" for i in range(n)])

# %%
# the same three steps of this player, for viewers that drop its JavaScript
viz.plot_attention(frames[shown], vmax=1.0, size=2.4, titles=[f"step {i}: rows 0–{i}" for i in shown],
                   suptitle="causal linear attention (elu + 1), the effective matrix row by row")

# %%
d_model = d_v_model = F_model = 64
print(f"per sequence and head, d = d_v = F = {d_model}:")
print(f"{'n':>7}{'softmax KV cache n·(d + d_v)':>30}{'linear state F·d_v + F':>26}")
for e in (8, 10, 12, 14, 16):
    n_ = 2**e
    print(f"{n_:>7}{n_ * (d_model + d_v_model):>30,}{F_model * d_v_model + F_model:>26,}")

# %% [markdown]
# > Softmax decoding keeps every past key and value (the KV cache), $n(d + d_v)$ numbers, growing with
# > the sequence; the linear-attention state is $F d_v + F$ numbers, fixed. That is the whole
# > advantage at inference, and also its limit: a fixed-size state cannot hold an unbounded number of
# > associations exactly, and with the sum rule every new write interferes with the old ones.

# %% [markdown]
# **Takeaways.**
#
# - Causal linear attention is a recurrent network whose state $(S_i, z_i)$ has a fixed size,
#   $F \times (d_v + 1)$: the five-line loop, the masked left product and the Numba scan agree, and no
#   output depends on a later token.
# - The sum rule only adds: $z$ grows at every step and nothing written is ever removed.
# - Softmax decoding keeps a key/value cache that grows with $n$; the linear state does not.

# %% [markdown]
# ## (f) Gated and delta-rule memories
#
# **Gated RFA** (H. Peng et al., "Random Feature Attention", ICLR 2021,
# [arXiv:2103.02143](https://arxiv.org/abs/2103.02143), §3, Eq. 7). A scalar gate
# $g_t = \sigma(w_g \cdot x_t + b_g)$ interpolates between the old memory and the new association,
# $S_t = g_t S_{t-1} + (1 - g_t)\,\phi(k_t) v_t^\top$ and likewise for $z_t$, which gives the model a
# learned recency bias. (RFA's own $\phi$ is a random Fourier map; here elu + 1 keeps the examples
# positive, and any map can be passed.)
#
# **Delta rule** (I. Schlag, K. Irie, J. Schmidhuber, "Linear Transformers Are Secretly Fast Weight
# Programmers", ICML 2021, [arXiv:2102.11174](https://arxiv.org/abs/2102.11174), §4.2). Read what the
# memory holds for the new key, $\bar v_i = W_{i-1}\phi(k_i)$, and move it towards $v_i$ with a
# learning rate $\beta_i = \sigma(W_\beta x_i)$: $W_i = W_{i-1} + \beta_i (v_i - \bar v_i)\phi(k_i)^\top$,
# then read $y_i = W_i\phi(q_i)$. §4 normalises $\phi$ by the sum of its components.
#
# > Limits asserted below (from `rfa_attention`'s and `delta_rule_attention`'s docstrings):
# > - RFA, paper form, $g \equiv 0$: the memory is reset at every step and $\operatorname{out}_t = v_t$.
# > - RFA, *decay* form ($S_t = g_t S_{t-1} + \phi(k_t)v_t^\top$), $g \equiv 1$: exactly causal linear
# >   attention. A constant gate $\gamma$ gives the same output in both forms ($1 - \gamma$ cancels).
# > - Paper form, $g \equiv 1$: every write is multiplied by $0$, the denominator is $0$, and refattn
# >   raises instead of returning NaN.
# > - Delta rule: reading with the key just written gives
# >   $\bar v_i + \beta_i\|\phi(k_i)\|^2(v_i - \bar v_i)$, which is exactly $v_i$, whatever the memory
# >   held, when $\beta_i\|\phi(k_i)\|^2 = 1$.

# %%
n, d, d_v = 10, 4, 3
q, k, v = rng.standard_normal((n, d)), rng.standard_normal((n, d)), rng.standard_normal((n, d_v))
x_gate = rng.standard_normal((n, d))                                # the gate's input x_t (the layer input)
gate = init_rfa_gate(rng, d, b_g=1.0)                               # b_g > 0: gates start near σ(1) ≈ 0.73
g = rfa_gates(x_gate, gate.w_g, gate.b_g)                           # (n,)  g_t = σ(w_g·x_t + b_g)
phi_q, phi_k = elu_feature_map(q), elu_feature_map(k)

S, z, outs = np.zeros((d, d_v)), np.zeros(d), []
for t in range(n):
    S = g[t] * S + (1 - g[t]) * np.outer(phi_k[t], v[t])            # Eq. 7: forget, then write
    z = g[t] * z + (1 - g[t]) * phi_k[t]
    outs.append(phi_q[t] @ S / (phi_q[t] @ z))
out_rfa, A_rfa = rfa_attention(q, k, v, g, elu_feature_map, return_weights=True)
check(np.array(outs), out_rfa)
check(out_rfa, rfa_attention(q, k, v, g, elu_feature_map, method="scan"))

ones, zeros, gamma = np.ones(n), np.zeros(n), np.full(n, 0.7)
check(rfa_attention(q, k, v, zeros, elu_feature_map), v)            # g ≡ 0: out_t = v_t
check(rfa_attention(q, k, v, ones, elu_feature_map, gate_form="decay"),
      linear_attention(q, k, v, elu_feature_map, causal=True))      # decay form, g ≡ 1: causal linear
check(rfa_attention(q, k, v, gamma, elu_feature_map),
      rfa_attention(q, k, v, gamma, elu_feature_map, gate_form="decay"))   # constant γ: 1 − γ cancels
try:
    rfa_attention(q, k, v, ones, elu_feature_map)
except ZeroDivisionError as err:
    print("paper form, g ≡ 1:", str(err)[:96], "…")
print("gates g_t:", g, f" smallest at token {np.argmin(g)}")

# %%
beta_params = init_delta_beta(rng, d)
beta = delta_beta(x_gate, beta_params.w, beta_params.b)             # (n,)  β_i = σ(W_β x_i)
phi_qn = phi_q / phi_q.sum(axis=1, keepdims=True)                   # φ normalised by its sum (§4)
phi_kn = phi_k / phi_k.sum(axis=1, keepdims=True)

W, outs = np.zeros((d_v, d)), []
for i in range(n):
    v_bar = W @ phi_kn[i]                                           # what the memory holds for k_i
    W = W + beta[i] * np.outer(v[i] - v_bar, phi_kn[i])             # move it towards v_i
    outs.append(W @ phi_qn[i])                                      # read with q_i
out_delta, A_delta = delta_rule_attention(q, k, v, beta, elu_feature_map, return_weights=True)
check(np.array(outs), out_delta)
check(out_delta, delta_rule_attention(q, k, v, beta, elu_feature_map, method="scan"))
check(A_delta @ v, out_delta)                                       # linear in V: out = A V

k_big = k + 1.0                                                     # keys with ‖φ(k)‖² ≥ 1, so β ≤ 1 below
norms2 = np.sum(elu_feature_map(k_big) ** 2, axis=1)
assert norms2.min() >= 1
beta_exact = 1 / norms2                                             # β_i ‖φ(k_i)‖² = 1
read_back = delta_rule_attention(k_big, k_big, v, beta_exact, elu_feature_map, normalize=False)   # q_i = k_i
check(read_back, v)                                                 # write-then-read returns v_i exactly
half = delta_rule_attention(k_big, k_big, v, beta_exact / 2, elu_feature_map, normalize=False)
print("β‖φ(k)‖² = 1:   read-back error", viz.roundoff_text(np.abs(read_back - v).max()))
print("β‖φ(k)‖² = 1/2: read-back error", np.abs(half - v).max().round(3), "(halfway from the old value)")
print("row sums of the delta rule's effective matrix:", A_delta.sum(axis=1))
A_delta1 = delta_rule_attention(q, k, v, np.ones(n), elu_feature_map, return_weights=True)[1]   # β ≡ 1
print(f"smallest entry of the delta rule's effective matrix: {A_delta[np.tril_indices(n)].min():.4f} "
      f"with β = σ(W_β x) ≈ {beta.mean():.2f}, {A_delta1[np.tril_indices(n)].min():.4f} with β ≡ 1")

# %%
A_decay = rfa_attention(q, k, v, gamma, elu_feature_map, gate_form="decay", return_weights=True)[1]
panels = {"causal linear (sum rule)": linear_attention(q, k, v, elu_feature_map, causal=True,
                                                        return_weights=True)[1],
          "RFA gate, g = σ(w·x + 1)": A_rfa, "RFA constant γ = 0.7": A_decay}
fig = viz.figure((13, 3.4))
left, right = fig.subfigures(1, 2, width_ratios=[3, 2.2])
viz.draw_attention(left, np.array(list(panels.values())), titles=list(panels), vmax=1.0)
lim = float(np.abs([A_delta, A_delta1]).max())
viz.draw_attention(right, np.array([A_delta, A_delta1]), titles=["delta rule, β = σ(W_β x)", "delta rule, β ≡ 1"],
                   cmap="RdBu_r", vmin=-lim, vmax=lim)
fig

# %% [markdown]
# > The sum rule weighs a past token by its kernel value alone, so old tokens keep their share. A gate
# > multiplies the weight of token $j$ in row $i$ by $(1 - g_j)\prod_{l=j+1}^{i} g_l$: with a constant
# > $\gamma = 0.7$ the weights decay geometrically away from the diagonal, an exponential recency
# > bias. With data-dependent gates the decay changes from step to step: a step with a small $g_t$
# > writes strongly and damps everything before it (the bright column at the token with the smallest
# > gate, printed above). The delta rule's matrix (blue-red, its own scale) is not row-stochastic: its
# > rows sum to less than 1, because the memory starts empty and a write with $\beta < 1$ stores only
# > part of a value. Its entries may be negative: writing a key first *subtracts* what the memory
# > retrieves for it, which removes part of every earlier value stored under similar features. With
# > the initial $\beta \approx 0.5$ that stays small here; with $\beta \equiv 1$ (full overwrite) the
# > columns of earlier tokens fade fast and the minimum entry is printed above.

# %% [markdown]
# **Takeaways.**
#
# - Gated RFA scales older contributions by the gates, a learned recency bias. Its decay form with
#   $g \equiv 1$ is causal linear attention, and its paper form with $g \equiv 0$ returns each token's value.
# - The delta rule replaces what the memory holds for a key: when $\beta_i\|\phi(k_i)\|^2 = 1$, reading
#   the key just written returns its value exactly. Its effective matrix is not row-stochastic and can
#   have negative entries.

# %% [markdown]
# ## (g) The chunkwise-parallel form: the same recurrence by matrix products
#
# The scan of (e) is sequential: token $i$ waits for $S_{i-1}$, and each step is a rank-one update
# of the whole state. The right product of (a), made causal, is parallel: a cumulative sum gives every
# $S_i$ at once, but it stores all of them, $n \cdot F \cdot d_v$ numbers, more than the $n \times n$
# matrix whenever $F d_v > n$. The *chunkwise* form sits between the two; it is how gated and
# delta-rule linear attention are trained today (S. Yang et al., "Gated Linear Attention Transformers
# with Hardware-Efficient Training", ICML 2024, [arXiv:2312.06635](https://arxiv.org/abs/2312.06635),
# §3). Cut the sequence into chunks of $C$ positions. Query $i$, in the chunk that starts at $a$, sees
# the keys before the chunk through the state $S_{a-1}$ and the keys of its own chunk directly:
#
# $$
# \operatorname{num}_i = \underbrace{\phi(q_i)^\top S_{a-1}}_{\text{inter-chunk: the state}}
# + \underbrace{\sum_{a \le t \le i} \big(\phi(q_i)^\top\phi(k_t)\big)\, v_t}_{\text{intra-chunk: quadratic}},
# \qquad
# S_{a+C-1} = S_{a-1} + \sum_{t=a}^{a+C-1} \phi(k_t)\, v_t^\top ,
# $$
#
# and the same with $v_t$ replaced by 1 for the denominator. For a whole chunk $c$ (rows
# $\Phi(Q_c)$, $\Phi(K_c)$, $V_c$) both are matrix products:
# $\operatorname{num}_c = \Phi(Q_c)\,S_{c-1} + \operatorname{tril}\big(\Phi(Q_c)\Phi(K_c)^\top\big)V_c$ and
# $S_c = S_{c-1} + \Phi(K_c)^\top V_c$, where $S_{c-1}$ is the state entering chunk $c$.
#
# > Below: the scan, the causal right product by `np.cumsum`, and the chunk loop, a few NumPy lines
# > each (the denominator rides along as one more column of $V$, a column of ones). They are checked
# > against refattn's `method="scan"`, `method="chunk"` and the masked left product
# > `method="equation"`, to 1e-12: for a chunk size that divides $n$ and ones that do not (the last
# > chunk is shorter), $C = 1$ (one token per chunk: the scan) and $C \ge n$ (one chunk: the left
# > product). refattn's `method="right"` is non-causal only; its causal form is the scan.
# > This section draws from a generator of its own, seeded with that paper's number.

# %%
rng_chunk = np.random.default_rng(2312_06635)                      # arXiv:2312.06635 (GLA)


def scan(phi_q, phi_k, v):
    # (e)'s loop: one rank-one write and one read per token
    S, z, out = np.zeros((phi_k.shape[1], v.shape[1])), np.zeros(phi_k.shape[1]), []
    for i in range(len(v)):
        S, z = S + np.outer(phi_k[i], v[i]), z + phi_k[i]
        out.append(phi_q[i] @ S / (phi_q[i] @ z))
    return np.array(out)


def right_cumsum(phi_q, phi_k, v):
    # every S_i and z_i at once: parallel, but (n, F, d_v) numbers
    S_all = np.cumsum(phi_k[:, :, None] * v[:, None, :], axis=0)   # (n, F, d_v)
    z_all = np.cumsum(phi_k, axis=0)                               # (n, F)
    return np.einsum("if,ifv->iv", phi_q, S_all) / np.einsum("if,if->i", phi_q, z_all)[:, None]


def chunk_loop(phi_q, phi_k, v, C):
    # per chunk: a C × C masked product (intra) and two state GEMMs (inter, and the state update)
    v1 = np.column_stack([v, np.ones(len(v))])                     # [V | 1]: numerator and denominator
    S = np.zeros((phi_k.shape[1], v1.shape[1]))                    # [S | z] before the chunk
    num = np.empty_like(v1)
    for a in range(0, len(v), C):                                  # the last chunk may be shorter
        Qc, Kc, Vc = phi_q[a:a + C], phi_k[a:a + C], v1[a:a + C]
        num[a:a + C] = Qc @ S + np.tril(Qc @ Kc.T) @ Vc            # inter + intra
        S = S + Kc.T @ Vc                                          # the state after the chunk
    return num[:, :-1] / num[:, -1:]


d, d_v = 4, 3
for n, C in ((16, 4), (18, 4), (18, 5), (18, 1), (18, 18), (18, 64)):
    q, k, v = rng_chunk.standard_normal((n, d)), rng_chunk.standard_normal((n, d)), rng_chunk.standard_normal((n, d_v))
    phi_q, phi_k = elu_feature_map(q), elu_feature_map(k)
    reference = linear_attention(q, k, v, elu_feature_map, causal=True, method="scan")
    check(scan(phi_q, phi_k, v), reference)
    check(right_cumsum(phi_q, phi_k, v), reference)
    check(chunk_loop(phi_q, phi_k, v, C), reference)
    check(linear_attention(q, k, v, elu_feature_map, causal=True, method="chunk", chunk_size=C), reference)
    check(linear_attention(q, k, v, elu_feature_map, causal=True, method="equation"), reference)
    sizes = [min(C, n - a) for a in range(0, n, C)]               # the chunks' lengths
    chunks = " + ".join(f"{sizes.count(s_)} × {s_}" for s_ in dict.fromkeys(sizes))
    print(f"n = {n:>2}, C = {C:>2}, chunks {chunks:<14} scan = cumsum = chunk loop = method='chunk' = equation")

# %% [markdown]
# > **The chunk's two parts, drawn.** With $n = 16$ and $C = 4$, the causal matrix splits into the
# > four diagonal blocks, the intra-chunk part (each a $C \times C$ product, masked to its lower
# > triangle), and everything below them, the inter-chunk part, which the chunk form never forms: row
# > block $c$ of it reaches the output only through the state $S_{c-1}$. Below, the effective matrix
# > of `method="chunk"` (`return_weights=True`), whole and in its two parts (grey: not in the part;
# > red: the diagonal blocks; dashed: the block that each chunk's entering state stands for). Then the
# > numerator of one chunk, as the sum of its two parts.

# %%
n, C = 16, 4
q, k, v = rng_chunk.standard_normal((n, d)), rng_chunk.standard_normal((n, d)), rng_chunk.standard_normal((n, d_v))
phi_q, phi_k = elu_feature_map(q), elu_feature_map(k)
out_chunk, A_chunk = linear_attention(q, k, v, elu_feature_map, causal=True, method="chunk", chunk_size=C,
                                      return_weights=True)
chunk_of = np.arange(n) // C                                       # the chunk of each position
lower = np.tri(n, dtype=bool)                                      # t <= i
intra = lower & (chunk_of[:, None] == chunk_of[None, :])           # the diagonal blocks' triangles
inter = chunk_of[:, None] > chunk_of[None, :]                      # the keys of earlier chunks
assert np.array_equal(intra | inter, lower) and not np.any(intra & inter)
check(A_chunk, np.where(lower, phi_q @ phi_k.T, 0.0) / (phi_q @ phi_k.T * lower).sum(axis=1, keepdims=True))

fig = viz.plot_attention(np.array([A_chunk, A_chunk, A_chunk]), allowed=np.array([lower, intra, inter]),
                         annotate=False, size=3.0,
                         titles=["causal A, chunks of C = 4", "intra-chunk: C × C masked products",
                                 "inter-chunk: read from the state"],
                         suptitle="method='chunk': each row's weights in two parts")
for p, ax in enumerate(fig.axes[:3]):
    for a in range(0, n, C):
        ax.add_patch(Rectangle((a - 0.5, a - 0.5), C, C, fill=False, ec="#d62728", lw=1.6))
        if a and p != 1:                                           # the block the state stands for
            ax.add_patch(Rectangle((-0.5, a - 0.5), a, C, fill=False, ec="k", lw=1.2, ls="--"))
fig

# %%
c = 2                                                              # one chunk: rows 8 … 11
rows = slice(c * C, (c + 1) * C)
v1 = np.column_stack([v, np.ones(n)])                              # [V | 1]
S_before = phi_k[:c * C].T @ v1[:c * C]                            # [S | z] entering chunk c, (F, d_v + 1)
inter_part = phi_q[rows] @ S_before                                # φ(Q_c) [S | z]
intra_part = np.tril(phi_q[rows] @ phi_k[rows].T) @ v1[rows]       # tril(φ(Q_c)φ(K_c)ᵀ) [V_c | 1]
M = phi_q @ phi_k.T                                                # φ(q_i)·φ(k_t)
check(inter_part, np.where(inter, M, 0.0)[rows] @ v1)              # the state is exactly the inter block
check(intra_part, np.where(intra, M, 0.0)[rows] @ v1)
numerator = inter_part + intra_part
check(numerator[:, :-1] / numerator[:, -1:], out_chunk[rows])

share = (A_chunk * inter).sum(axis=1)                              # weight each row takes from the state
shares = np.array([share[chunk_of == c_].mean() for c_ in range(n // C)])
assert np.all(share[:C] == 0) and np.all(np.diff(shares) > 0)     # chunk 0 starts from S = 0, then it grows
print("mean share of a row's weight carried by the state, by chunk:", shares.round(3))

viz.plot_attention(np.array([inter_part, intra_part, numerator]), signed=True, size=2.4,
                   titles=[f"φ(Q_{c}) [S | z] before chunk {c}", f"+ tril(φ(Q_{c})φ(K_{c})ᵀ) [V_{c} | 1]",
                           "= numerator | denominator"],
                   row_labels=[f"q_{i}" for i in range(c * C, (c + 1) * C)],
                   col_labels=[f"v{j}" for j in range(d_v)] + ["den"], xlabel="value dim  |  denominator",
                   ylabel=f"query i (chunk {c})")

# %% [markdown]
# > Each row of chunk 2 is the sum of what the state $[S \mid z]$ holds for it (the keys of chunks 0
# > and 1, asserted equal to the inter-chunk block of the matrix times $[V \mid 1]$) and its own
# > chunk's masked product; the last column is the denominator, and the quotient is refattn's output.
# > The printed shares grow from chunk to chunk (asserted): a later chunk finds more keys in the state, and the
# > masked product only ever covers $C$ of them.
# >
# > **Why chunk runs at matrix-product speed.** Count the multiply-adds from the shapes, as in (b)
# > (numerator only). The scan does $2nFd_v$: per token, a rank-one write and a read of the
# > $F \times d_v$ state. The chunk loop does $nC(F + d_v)$ within the chunks (the $C \times C$
# > products with their masked halves included: a matrix product computes them) and the same $2nFd_v$
# > across them: $\Phi(Q_c)S_{c-1}$ and $\Phi(K_c)^\top V_c$ (in flops, twice these:
# > $2nC(F + d_v) + 4nFd_v$, as `bench` counts them). So chunk does *more* work than the scan, by
# > the factor $1 + C/N^\ast$, with $N^\ast = 2Fd_v/(F + d_v)$ the crossing of (b). What it gains is the
# > kind of work. A scan step reads and writes the whole state for about one multiply-add per number
# > moved, and step $i$ must wait for step $i - 1$. A matrix product $(a \times b)(b \times c)$ does $abc$
# > multiply-adds on $ab + bc + ac$ numbers, each reused many times from the cache, so BLAS runs it
# > near the machine's peak; all the chunks' $C \times C$ products are independent, and only the $n/C$
# > state additions remain in order. `python -m refattn bench linear` times the two on your machine,
# > beside its matrix-product rate (`--chunk-size` tries other chunk sizes).

# %%
count_within = count_across = 0
S = np.zeros((phi_k.shape[1], d_v))
for a in range(0, n, C):                                           # the loop's products, counted from shapes
    Qc, Kc, Vc = phi_q[a:a + C], phi_k[a:a + C], v[a:a + C]
    count_within += macs(Qc, Kc.T) + macs(Qc @ Kc.T, Vc)
    count_across += macs(Qc, S) + macs(Kc.T, Vc)
F = phi_k.shape[1]
assert count_within == n * C * (F + d_v) and count_across == 2 * n * F * d_v   # scan: 2nFd_v as well


def reuse(a, b, c_):
    # multiply-adds per number read or written by an (a × b)(b × c) product
    return a * b * c_ / (a * b + b * c_ + a * c_)


n_big, F_big, dv_big = 65536, 64, 64
N_star = 2 * F_big * dv_big / (F_big + dv_big)
scan_count = 2 * n_big * F_big * dv_big
scan_reuse = 2 * F_big * dv_big / (2 * F_big * dv_big + 2 * F_big + 2 * dv_big)   # S in and out, φ(k), φ(q), v, out
print(f"n = {n_big}, F = d_v = {F_big}: the scan does {scan_count:.3e} multiply-adds, "
      f"{scan_reuse:.2f} per number read or written")
print(f"{'C':>5}{'within chunks':>16}{'across':>12}{'chunk / scan':>14}{'reuse, smallest product':>26}")
for C_ in (1, 4, 16, 32, 64, 128, 256):
    within, across = n_big * C_ * (F_big + dv_big), 2 * n_big * F_big * dv_big
    ratio = (within + across) / scan_count
    assert np.isclose(ratio, 1 + C_ / N_star)
    smallest = min(reuse(C_, F_big, C_), reuse(C_, C_, dv_big), reuse(C_, F_big, dv_big), reuse(F_big, C_, dv_big))
    print(f"{C_:>5}{within:>16.3e}{across:>12.3e}{ratio:>14.3f}{smallest:>26.1f}")

# %% [markdown]
# > The last column is the multiply-adds per number read or written by the least favourable of a
# > chunk's four products. At $C = 64 = N^\ast$ the chunk form does twice the scan's multiply-adds,
# > all in matrix products whose every input is reused about 20 times; at $C = 1$ its products are
# > the scan's rank-one updates again. Larger chunks raise the reuse only slowly and the work
# > linearly, which is why the chunk size stays moderate (refattn's default is 64).
# >
# > **Gates and the delta rule** have chunk forms too (`method="chunk"` in `rfa_attention`,
# > `delta_rule_attention`, `performer_attention`). A gate scales the state between tokens, so within a
# > chunk each pair $(i, t)$ gains the product of the gates between them, and the state is decayed as it
# > enters and leaves the chunk. The delta rule's writes are not additive (each first subtracts what its
# > key retrieves), but a chunk's writes can be collected in the WY/UT form of S. Yang et al. (NeurIPS
# > 2024, [arXiv:2406.06484](https://arxiv.org/abs/2406.06484), §3): a triangular solve gives what each
# > key writes, $U - W S_{c-1}$. The module docstring of `refattn/linear/chunk.py` writes out both; below,
# > each is held to its scan.

# %%
omega = draw_omega(rng_chunk, 8, d)
for n, C in ((16, 4), (18, 5)):
    q, k, v = rng_chunk.standard_normal((n, d)), rng_chunk.standard_normal((n, d)), rng_chunk.standard_normal((n, d_v))
    g, beta = rng_chunk.uniform(0.5, 1.0, n), rng_chunk.uniform(0.0, 1.0, n)
    for gate_form in ("paper", "decay"):
        check(rfa_attention(q, k, v, g, elu_feature_map, gate_form=gate_form, method="chunk", chunk_size=C),
              rfa_attention(q, k, v, g, elu_feature_map, gate_form=gate_form, method="scan"))
    check(delta_rule_attention(q, k, v, beta, elu_feature_map, method="chunk", chunk_size=C),
          delta_rule_attention(q, k, v, beta, elu_feature_map, method="scan"))
    check(performer_attention(q, k, v, omega=omega, causal=True, method="chunk", chunk_size=C),
          performer_attention(q, k, v, omega=omega, causal=True, method="scan"))
print("gated RFA (both forms), the delta rule and causal Performer: method='chunk' = method='scan', to 1e-12")

# %% [markdown]
# **Takeaways.**
#
# - The chunkwise form computes the causal recurrence exactly (asserted against the scan, the cumulative
#   sum and the masked left product): each query adds what the state holds for the earlier chunks to a
#   masked $C \times C$ product over its own chunk.
# - It does $1 + C/N^\ast$ times the scan's multiply-adds, but in matrix products that reuse their
#   inputs, with only $n/C$ sequential steps; $C = 1$ is the scan, $C \ge n$ the masked left product.
# - Gates and the delta rule keep their chunk forms: decays inside and across chunks, and the WY/UT
#   form of a chunk's writes.

# %% [markdown]
# ## (h) Efficient Attention
#
# Z. Shen, M. Zhang, H. Zhao, S. Yi, H. Li, "Efficient Attention: Attention with Linear
# Complexities", WACV 2021, [arXiv:1812.01243](https://arxiv.org/abs/1812.01243), §3. Normalise the
# queries and keys separately, each with a softmax, and multiply right to left:
#
# $$
# E(Q, K, V) = \rho_q(Q)\,\big(\rho_k(K)^\top V\big), \qquad
# \rho_q = \text{softmax of each row of } Q \text{ (over its } d \text{ features)}, \quad
# \rho_k = \text{softmax of each column of } K \text{ (over the } m \text{ positions)}.
# $$
#
# > Each column $c$ of $\rho_k(K)$ is a distribution over positions, so $\rho_k(K)^\top V$ is $d$
# > global context vectors, and each query mixes them with the weights $\rho_q(q_i)$. The effective
# > matrix $A = \rho_q(Q)\rho_k(K)^\top$ has rows that sum to 1, since
# > $\sum_j A_{ij} = \sum_c \rho_q(Q)_{ic}\sum_j\rho_k(K)_{jc} = \sum_c \rho_q(Q)_{ic} = 1$, and rank at most
# > $d$. The column softmax runs over *all* positions, so there is no causal form: every output
# > depends on every key, and the registry's uniform `apply` refuses `causal=True`.

# %%
n, m, d, d_v = 12, 12, 4, 3
q, k, v = rng.standard_normal((n, d)), rng.standard_normal((m, d)), rng.standard_normal((m, d_v))
rho_q = np.exp(q) / np.exp(q).sum(axis=1, keepdims=True)           # (n, d)  softmax over features
rho_k = np.exp(k) / np.exp(k).sum(axis=0, keepdims=True)           # (m, d)  softmax over positions
out_eff, A_eff = efficient_attention(q, k, v, return_weights=True)
check(rho_q @ (rho_k.T @ v), out_eff)
check(rho_q @ rho_k.T, A_eff)

check(A_eff.sum(axis=1), np.ones(n))                               # rows sum to 1
assert np.all(A_eff > 0) and np.linalg.matrix_rank(A_eff) <= d
k2 = k.copy()
k2[-1] += 1.0                                                       # move the last key only
assert np.abs(efficient_attention(q, k2, v)[0] - out_eff[0]).max() > 1e-3   # query 0 sees key m − 1
try:
    registry.get("efficient_attention").apply(q, k, v, causal=True)
except ValueError as err:
    print("causal=True:", err)
row_error = np.abs(A_eff.sum(1) - 1).max()
print(f"rank of A: {np.linalg.matrix_rank(A_eff)} (≤ d = {d}); max |row sum − 1| {viz.roundoff_text(row_error)}")

A_soft = refattn.scaled_dot_product_attention(q, k, v, scale=1.0, return_weights=True)[1]
viz.plot_attention(np.array([A_soft, A_eff]), size=2.8,
                   titles=["softmax(QKᵀ), for reference", "Efficient Attention ρ_q(Q)ρ_k(K)ᵀ"])


# %% [markdown]
# > Both matrices are row-stochastic and positive, but they are different functions of $Q$ and $K$:
# > Efficient Attention is not an approximation of softmax attention (the official code, like
# > refattn, has no $1/\sqrt d$ here). Its rank is at most $d = 4$, so its rows are mixtures of only
# > $d$ distributions over the keys, the columns of $\rho_k(K)$, which is why its rows look alike.

# %% [markdown]
# **Takeaways.**
#
# - Efficient Attention normalises $Q$ over its features and $K$ over the positions: its effective
#   matrix is positive, row-stochastic and of rank at most $d$.
# - It is a different function of $Q$ and $K$ from softmax attention, not an approximation of it, and
#   it has no causal form.

# %% [markdown]
# ## (i) Why Performer's relative errors can be large
#
# Users of `lucidrains/performer-pytorch` have reported large errors against exact attention, for
# instance in issue [#46](https://github.com/lucidrains/performer-pytorch/issues/46) ("SelfAttention
# layer seems to have large error relative to nn.MultiheadAttention?") and issue
# [#69](https://github.com/lucidrains/performer-pytorch/issues/69) ("FastAttention doesn't give results
# in agreement with standard attention?"), where $n = 24$, $d = 128$, 1024 features and standard normal
# $q, k, v$ gave a mean absolute error of "(73.28 +/- 1.99)%" of the exact output.
#
# > **It is the estimator, not a bug.** Lemma 2 with $x = q/d^{1/4}$, $y = k/d^{1/4}$ gives the
# > relative error of one kernel entry for positive features:
# > $\sqrt{\operatorname{MSE}_+}/\operatorname{SM} = \sqrt{(e^{\|x + y\|^2} - 1)/r}$. It depends on
# > the norms, exponentially. For standard normal $q, k$, $\|x\|^2 \approx d/\sqrt d = \sqrt d$, so
# > $\|x + y\|^2 \approx 2\sqrt d \approx 22.6$ at $d = 128$, and the relative error of a single entry is
# > about $\sqrt{e^{22.6}/1024} \approx 2.5 \cdot 10^3$. No practical $r$ fixes that: the number of
# > features needed grows like $e^{\|x + y\|^2}$.
# >
# > And the 73 %? performer-pytorch's `softmax_kernel` follows the official code: it subtracts a
# > maximum inside the exponential and adds $\epsilon = 10^{-4}$ to every feature. refattn reproduces
# > both with `stabilize=True, eps=1e-4` (see `favor_features`).
# > When the key features are tiny next to $\epsilon$, every key gets nearly the same features, and
# > the output tends to the plain average of the values. Below, the issue's setting is measured
# > three ways, with the issue's metric, $\operatorname{mean}|\text{fast} - \text{exact}| /
# > \operatorname{mean}|\text{exact}|$.

# %%
def issue_metric(fast, exact):
    return float(np.abs(fast - exact).mean() / np.abs(exact).mean())


n, d, r_feat, trials = 24, 128, 1024, 5
results = {"paper FAVOR+ (no stabiliser, eps = 0)": [], "official-style: stabilize=True, eps=1e-4": [],
           "uniform attention: mean of the values": []}
for _ in range(trials):
    q, k, v = rng.standard_normal((3, n, d))
    exact = refattn.scaled_dot_product_attention(q, k, v)
    omega = draw_omega(rng, r_feat, d)
    fast = performer_attention(q, k, v, omega=omega, method="right")
    official = performer_attention(q, k, v, omega=omega, method="right", stabilize=True, eps=1e-4)
    results["paper FAVOR+ (no stabiliser, eps = 0)"].append(issue_metric(fast, exact))
    results["official-style: stabilize=True, eps=1e-4"].append(issue_metric(official, exact))
    results["uniform attention: mean of the values"].append(issue_metric(np.broadcast_to(v.mean(0), v.shape), exact))
x_, y_ = q / d**0.25, k / d**0.25
z2 = np.sum((x_[:, None] + y_[None]) ** 2, axis=-1)
print(f"n = {n}, d = {d}, r = {r_feat}, {trials} trials; median ‖x + y‖² = {np.median(z2):.1f}")
print(f"predicted relative RMS error of one kernel entry: {np.sqrt(np.expm1(np.median(z2)) / r_feat):.3g}")
for name, vals in results.items():
    print(f"  {name:<44} error {100 * np.mean(vals):6.1f} % ± {100 * np.std(vals):.1f}")

# %% [markdown]
# > With the $\epsilon$ of the official code the error is the error of *uniform* attention, and the
# > issue's 73 %: the estimate has collapsed to the average of the values. Without it (the paper's
# > estimator) the error is larger still, because the output follows whichever few keys drew a large
# > $e^{\omega^\top k}$. (The issue passes its standard normal $q, k, v$ straight to `FastAttention`, as
# > here; its $\omega$ differ from these draws, so only the level is comparable.)
# >
# > The fix is not in the implementation but in the inputs: the error depends on $\|q\|$ and $\|k\|$.
# > The sweep below scales standard normal $q, k$ by $s$ ($d = 64$, $r = 256$, 10 draws per point), so
# > that $\|x + y\|^2 \approx 2s^2\sqrt d$.

# %%
n, d, r_feat, draws = 64, 64, 256, 10
scales = np.array([0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1.0, 1.2])
sweep = {"paper FAVOR+": [], "official-style (eps = 1e-4)": [], "uniform attention": []}
z2_median, predicted = [], []
base = rng.standard_normal((3, n, d))
for s_ in scales:
    q, k, v = s_ * base[0], s_ * base[1], base[2]
    exact = refattn.scaled_dot_product_attention(q, k, v)
    e_paper, e_official = [], []
    for _ in range(draws):
        omega = draw_omega(rng, r_feat, d)
        e_paper.append(rel(performer_attention(q, k, v, omega=omega, method="right"), exact))
        e_official.append(rel(performer_attention(q, k, v, omega=omega, method="right", stabilize=True, eps=1e-4),
                              exact))
    sweep["paper FAVOR+"].append(np.mean(e_paper))
    sweep["official-style (eps = 1e-4)"].append(np.mean(e_official))
    sweep["uniform attention"].append(rel(np.broadcast_to(v.mean(0), v.shape), exact))
    x_, y_ = q / d**0.25, k / d**0.25
    z2 = np.sum((x_[:, None] + y_[None]) ** 2, axis=-1)
    z2_median.append(np.median(z2))
    predicted.append(np.median(np.sqrt(favor_mse(x_[:, None], y_[None], r_feat)) / np.exp(x_ @ y_.T)))
print(f"{'s':>5}{'median ‖x+y‖²':>15}{'kernel rel. RMSE':>18}" + "".join(f"{name:>30}" for name in sweep))
for t, s_ in enumerate(scales):
    print(f"{s_:>5}{z2_median[t]:>15.2f}{predicted[t]:>18.3g}" + "".join(f"{sweep[k_][t]:>30.3f}" for k_ in sweep))
paper, official, uniform = (np.array(sweep[name]) for name in sweep)
z2_median = np.array(z2_median)
beyond, far = z2_median > 2, z2_median > 15
assert np.all(np.minimum(paper, official)[beyond] > 0.98 * uniform[beyond])   # no estimate clearly beats the mean
assert np.all(np.abs(official[far] / uniform[far] - 1) < 0.05)                  # the official one is the mean
print(f"‖x+y‖² > 2:  best estimate / uniform ≥ {np.min(np.minimum(paper, official)[beyond] / uniform[beyond]):.3f};"
      f"  ‖x+y‖² > 15: official / uniform ∈ [{np.min(official[far] / uniform[far]):.3f}, "
      f"{np.max(official[far] / uniform[far]):.3f}]")

with styled():
    fig = viz.figure((10.5, 3.6))
    ax_k, ax_o = fig.subplots(1, 2)
    zz = np.linspace(0.05, 25, 300)
    for r_, style in ((64, ":"), (256, "-"), (1024, "--")):
        ax_k.semilogy(zz, np.sqrt(np.expm1(zz) / r_), style, color="k", lw=1, label=f"r = {r_}")
    ax_k.semilogy(z2_median, predicted, "o", color="C1", label=f"at the sweep's pairs (median), r = {r_feat}")
    ax_k.axvline(2 * np.sqrt(128), color="C3", lw=0.8)
    ax_k.annotate("issue #69:\nd = 128, s = 1", (2 * np.sqrt(128), 1e-1), xytext=(-72, 0), textcoords="offset points")
    ax_k.set(xlabel="‖x + y‖²  (x = q/d^¼, y = k/d^¼)", ylabel="√MSE₊ / exp(xᵀy)",
             title="Lemma 2: relative error of one kernel entry")
    ax_k.legend(loc="upper left")
    for name, style in zip(sweep, ("o-", "s-", "k--"), strict=True):
        ax_o.plot(z2_median, sweep[name], style, label=name)
    ax_o.set(xlabel="median ‖x + y‖²", ylabel="‖out − softmax out‖ / ‖softmax out‖",
             title=f"attention output, d = {d}, r = {r_feat}", yscale="log")
    ax_o.legend()
fig

# %% [markdown]
# > The estimate is good when $\|x + y\|^2$ is of order 1. From about 2.5 on, neither estimate is
# > clearly closer to softmax attention than the plain average of the values (the dashed line; both
# > asserted, with the ratios printed), and from about 15 on the official-style one *is* that average,
# > to within a few per cent. Standard normal inputs sit at 16 ($d = 64$) or 23 ($d = 128$). Trained Performers do work: in issue #46 the reporter adds that
# > inside a trained model the approximation works reasonably well, though worse than exact attention
# > at equal size, and the paper trains them. A trained model can keep its query and key norms where
# > the estimate is good; a comparison on random unit-variance inputs is close to the worst case. If
# > the layer must match softmax, keep $\|q\|, \|k\|$ small or use exact attention; if it need not, a
# > deterministic map such as elu + 1 has no variance at all.

# %% [markdown]
# **Takeaways.**
#
# - The relative error of one positive-feature kernel entry is $\sqrt{(e^{\|x + y\|^2} - 1)/r}$: it grows
#   exponentially with the query and key norms, and standard normal inputs at $d = 128$ are far outside
#   the range where 1024 features help.
# - With the official code's $\epsilon$ the estimate collapses to the plain average of the values, the
#   73 % error of the issue; here, from $\|x + y\|^2 \approx 2.5$ on, neither estimate beats that average.

# %% [markdown]
# ## (j) Exercises
#
# 1. **Put the normaliser and the features back into the count.** Extend the counts of (b): the left
#    order also needs the row sums ($n(m - 1)$ additions) and $n d_v$ divisions; the right one
#    $\phi(K)^\top\mathbf 1$ ($(m - 1)F$ additions), $\phi(Q)z$ ($nF$ multiply-adds) and $n d_v$
#    divisions. Performer's features cost $(n + m)\,r d$ multiply-adds for $\omega^\top x$. Where is
#    the crossing now for elu + 1 with $F = d = d_v = 64$, and from which $N$ does Performer's right
#    order ($r = F = 266$) beat *exact* softmax attention ($n m d + n m d_v$ and the row sums)?
#    <details><summary>Hint</summary>Counting a row-sum addition like a multiply-add, the left order
#    costs <code>(F + d_v + 1)N²</code> and the right one <code>2F·d_v·N + 2F·N</code>, so
#    <code>N* = 2F(d_v + 1)/(F + d_v + 1)</code>: 64.5 instead of 64 for F = d_v = 64. Against exact
#    softmax, <code>(d + d_v + 1)N² = 2F·d_v·N + 2F·N + 2r·d·N</code> gives about 530 tokens for
#    F = r = 266. Counting is not timing: the exponentials are not multiply-adds.</details>
#
# 2. **The chunk size between its two ends.** Show on paper that `chunk_loop` of (g) with $C = 1$
#    computes exactly the scan's $\phi(q_i)^\top S_i$, and with $C \ge n$ the masked left product. The
#    cumulative sum of (g) holds every $S_i$, $n F d_v$ numbers; the scan holds one. A batched chunk
#    form that keeps every chunk's entering state and every chunk's $C \times C$ product at once holds
#    about $nC + (n/C) F d_v$ numbers: which $C$ makes that smallest, and how does it compare with the
#    cumulative sum at $F = d_v = 64$?
#    <details><summary>Hint</summary>With <code>C = 1</code> the masked product is the single number
#    <code>φ(q_i)·φ(k_i)</code>, so <code>num_i = φ(q_i)ᵀS_(i−1) + (φ(q_i)·φ(k_i)) v_i = φ(q_i)ᵀS_i</code>.
#    With one chunk the state stays 0 and <code>num = tril(φ(Q)φ(K)ᵀ) V</code>. The derivative of
#    <code>nC + nF·d_v/C</code> vanishes at <code>C = √(F·d_v)</code>, 64 here, where the total is
#    <code>128 n</code> numbers, against <code>4096 n</code> for the cumulative sum.</details>
#
# 3. **Orthogonal features for a single pair.** For the two pairs of (d), estimate the MSE of the
#    positive estimator with $r = d = 4$ from one orthogonal block per estimate
#    (`draw_omega(..., orthogonal=True)`), and compare it with the i.i.d. MSE and with `favor_mse`.
#    How many draws do you need to see a difference?
#    <details><summary>Hint</summary>Every <code>d</code> consecutive rows of an orthogonal draw are one
#    block, so <code>draw_omega(rng, R * 4, 4).reshape(R, 4, 4)</code> is <code>R</code> independent
#    blocks. Theorem 2 says the orthogonal MSE is lower, by a term that grows with
#    <code>‖x + y‖</code>: invisible for the opposite pair (<code>‖x + y‖² = 0.03</code>), about 10 % for
#    the close pair. The positive features are heavy-tailed, so the standard error of an empirical MSE
#    shrinks slowly: expect to need tens of thousands of draws.</details>
#
# 4. **RFA's paper form as $\gamma \to 1$.** With a constant gate $\gamma$, the paper form equals the
#    decay form (checked in (f)). Plot the relative difference between the paper form at $\gamma = 1 -
#    10^{-p}$ and causal linear attention, for $p = 1, \dots, 8$. Why does $\gamma = 1$ itself fail?
#    <details><summary>Hint</summary>At constant <code>γ</code> both forms weigh token <code>j</code> in
#    row <code>i</code> by <code>γ^(i−j)</code> (up to the factor <code>1 − γ</code> that cancels), so the
#    difference from causal linear attention shrinks like <code>1 − γ</code>. At <code>γ = 1</code> the
#    paper form multiplies every write by <code>1 − γ = 0</code>: an empty memory and a zero
#    denominator, which refattn reports as <code>ZeroDivisionError</code>.</details>
#
# 5. **Capacity: sum rule versus delta rule.** Use a one-hot feature map with $F = d = 4$ slots,
#    `lambda x: np.eye(4)[np.argmax(x, axis=-1)]`. Write 20 random key-value pairs with the delta rule
#    (`normalize=False`, $\beta \equiv 1$), then add 20 read steps that write nothing ($\beta = 0$) and
#    query with the same 20 keys. Compare what is read back with the last value written to each slot,
#    and with the sum rule's memory $W = \sum_j v_j\phi(k_j)^\top$.
#    <details><summary>Hint</summary>Concatenate <code>q = [k; k]</code>, <code>k = [k; k]</code>,
#    <code>v = [v; 0]</code>, <code>β = [1, …, 1, 0, …, 0]</code> and keep the last 20 outputs. The delta
#    rule returns the last value written to each key's slot, exactly: it overwrites. The sum rule
#    returns the sum of every value written to that slot (linear attention divides by their number:
#    their average).</details>
