# %% [markdown]
# # Compressed memory and low rank
#
# **T. Lin, Y. Wang, X. Liu, X. Qiu, "A Survey of Transformers", AI Open 2022,
# [arXiv:2106.04554](https://arxiv.org/abs/2106.04554) (v2), §4.3.2 "Attention with Compressed Key-Value
# Memory" and §4.4 "Low-rank Self-Attention".** Each model paper is cited where it appears.
#
# Softmax attention lets n queries read m keys and values through an n × m matrix. The survey groups two
# ways of shrinking that matrix:
#
# - **Compressed key-value memory** (§4.3.2): shorten the keys and values *before* attention, so that
#   the n queries read a memory of r ≪ m rows. Memory-compressed attention does it with a strided
#   convolution, Linformer with learned projections along the sequence, Set Transformer and Luna with a
#   few extra trainable tokens that first read the input and are then read by it, Poolingformer with
#   pooling on top of a sliding window.
# - **Low rank** (§4.4): the attention matrix is often of low rank in practice, which one can build in
#   as a parameterisation (a low-rank module with a small key width beside a band module, Guo et al.,
#   §4.4.1), or use to approximate the matrix (the Nyström methods, §4.4.2: CSALR and Nyströmformer
#   rebuild it from a few landmark rows and columns and an inverse of their intersection).
#
# > **The effective matrix.** Every mechanism here mixes the keys and values before the queries see
# > them, and the mixing is linear in the values, so the output is still out = W V for one n × m matrix
# > W: the attention over the memory times the mixing. refattn's `return_weights=True` gives that W
# > exactly, so each mechanism can be set beside exact softmax attention. Its rows need not be
# > distributions: Nyström's have negative entries and need not sum to 1 (mlpen/Nystromformer issue
# > #14), Linformer's are a softmax times an arbitrary projection. Nyström's pseudoinverse, an
# > iteration in the official code, has its own trust issues: its initialisation is reduced over the
# > whole batch (issues #3 and #6). Both are measured below.
#
# The plain text paraphrases the survey and the cited papers. Commentary is set apart as block
# quotes. Every claim that can be checked is an `assert`.
#
# **Contents.** (a) one effective matrix per mechanism · (b) why low rank is plausible: singular values
# · (c) Nyströmformer: landmarks and three factors · (d) the pseudoinverse iteration and its two
# initialisations · (e) CSALR: (M + εI)⁻¹ · (f) low rank plus a band · (g) Linformer · (h)
# memory-compressed attention · (i) Set Transformer · (j) Luna · (k) Poolingformer · (l) the error
# against softmax as the budget grows · (m) exercises

# %%
import math

import matplotlib as mpl
import numpy as np

import refattn
from refattn import registry, viz
from refattn.compressed import (
    MemoryCompression,
    blockwise_local_attention,
    compress_memory,
    compression_matrix,
    draw_inducing_points,
    draw_pack,
    draw_projections,
    induced_attention,
    induced_maps,
    init_isab,
    init_mab,
    init_pma,
    isab,
    linformer_attention,
    luna_attention,
    luna_maps,
    mab,
    memory_compressed_attention,
    pma,
    pooling_matrix,
    pooling_pattern,
    poolingformer_attention,
    sab,
)
from refattn.lowrank import (
    LowRankBandParams,
    average_pool,
    exact_pinv,
    init_lowrank_band,
    iterative_pinv,
    landmark_segments,
    lowrank_band_attention,
    nystrom_csalr_attention,
    nystrom_factors,
    nystromformer_attention,
    penrose_residuals,
    segment_means,
)
from refattn.sparse import band_pattern, sparse_attention

np.set_printoptions(precision=3, suppress=True, linewidth=110)
rng = np.random.default_rng(20210615)   # arXiv:2106.04554v2 date; every draw below comes from rng or a stated seed
EPS = np.finfo(np.float64).eps


def styled():
    # hand-made plots (curves, scatter) use the same style file as refattn.viz
    return mpl.style.context(viz.STYLE_PATH)


def smooth(n, d=8, width=4.0, seed=0):
    """q, k, v (n, d) that vary smoothly along the sequence: white noise filtered by a Gaussian of `width`
    positions, each scaled to unit variance. Neighbouring tokens are alike, as in text or images."""
    g = np.random.default_rng(seed)
    t = np.arange(-3 * int(width), 3 * int(width) + 1)
    kernel = np.exp(-t**2 / (2 * width**2))
    out = []
    for _ in range(3):
        x = g.standard_normal((n + t.size - 1, d))
        y = np.stack([np.convolve(x[:, c], kernel, mode="valid") for c in range(d)], axis=1)
        out.append(y / y.std())
    return tuple(out)


def gaussian(n, d=8, seed=0):
    """i.i.d. N(0, 1) q, k, v (n, d): no structure at all."""
    return tuple(np.random.default_rng(seed).standard_normal((3, n, d)))


def clustered(n, d=16, directions=4, spread=0.25, norm=3.0, seed=0):
    """n tokens (n, d) drawn around a few random directions of length `norm`: content with clusters in it."""
    g = np.random.default_rng(seed)
    centres = g.standard_normal((directions, d))
    centres *= norm / np.linalg.norm(centres, axis=1, keepdims=True)
    return centres[g.integers(0, directions, n)] + spread * g.standard_normal((n, d))


def phrases(n, l, d, norm, seed):
    """q, k, v (n, d) in l segments of coherent "phrases": segment j's tokens lie around its own direction of
    length `norm` (k a noisy copy of q)."""
    g = np.random.default_rng(seed)
    centres = g.standard_normal((l, d))
    centres *= norm / np.linalg.norm(centres, axis=1, keepdims=True)
    x = np.repeat(centres, n // l, axis=0) + 0.3 * g.standard_normal((n, d))
    return x, x + 0.3 * g.standard_normal((n, d)), g.standard_normal((n, d))


def softmax_attention(q, k, v, causal=False):
    """(out, A): exact softmax attention and its weights."""
    return refattn.scaled_dot_product_attention(q, k, v, causal=causal, return_weights=True)


def relative_error(out, exact):
    return float(np.linalg.norm(out - exact) / np.linalg.norm(exact))


def energy_rank(A, fraction):
    """The smallest r whose r largest singular values hold `fraction` of Σσ² (the squared Frobenius norm)."""
    sigma = np.linalg.svd(A, compute_uv=False)
    return int(np.searchsorted(np.cumsum(sigma**2) / np.sum(sigma**2), fraction) + 1)


# %% [markdown]
# ## (a) One effective matrix per mechanism
#
# Each registry entry of §4.3.2 and §4.4 runs on the same smooth input (n = m = 24) with its registry
# defaults and `rng=0`, and returns its effective matrix W. The output is W V to rounding for every
# one of them; the record's `normalized` and `nonnegative` say whether W's rows sum to 1 and are ≥ 0.

# %%
MECHANISMS = [r for r in registry.all() if r.section == "4.3.2" or r.family == "lowrank"]
q, k, v = smooth(24, seed=1)
exact, A = softmax_attention(q, k, v)
results = {r.id: r.apply(q, k, v, rng=0, return_weights=True) for r in MECHANISMS}
print(f"{'mechanism':<17}{'section':>8}{'row sums':>18}{'min W_ij':>10}{'output error':>14}")
for r in MECHANISMS:
    W, out = results[r.id].weights, results[r.id].output
    np.testing.assert_allclose(out, W @ v, rtol=1e-12, atol=1e-12)     # out = W V, whatever W is
    sums = W.sum(axis=-1)
    assert not r.normalized or np.allclose(sums, 1.0, rtol=0, atol=1e-12), r.id
    assert not r.nonnegative or W.min() >= 0.0, r.id
    print(f"{r.id:<17}{r.section:>8}{sums.min():>9.3f} … {sums.max():<6.3f}{W.min():>10.3f}"
          f"{relative_error(out, exact):>14.3f}")

fig = viz.figure((11, 10.2))
viz.draw_attention(fig, np.stack([results[r.id].weights for r in MECHANISMS] + [A]).reshape(3, 3, 24, 24),
                   signed=True, annotate=False, titles=[r.id for r in MECHANISMS] + ["exact softmax"])
fig

# %% [markdown]
# > One signed colour scale for all. With the registry's small defaults (3 landmarks, k = 4 projected
# > rows, c = 3, 4 inducing points or pack tokens), Nyströmformer's 3 landmarks come within 3 % of
# > softmax's output on this smooth input, while the untrained draws of Linformer (random signed
# > projections) and memory-compressed attention (random scalar taps) give rows that are neither ≥ 0 nor
# > sum to 1. Set Transformer and Luna give the same matrix: for the same draw, Luna's non-causal pack and
# > unpack *is* the inducing-point path (section (j)). Only Set Transformer and low-rank + band are
# > normalised by construction; CSALR's rows sum to exactly 1/(1 + ε) = 1/2 (section (e)) and
# > Poolingformer's to 2, its two levels added (section (k)).

# %% [markdown]
# ## (b) Why low rank is plausible: singular values
#
# The survey's §4.4 starts from an observation: empirical and theoretical analyses report that the
# self-attention matrix is often low rank. Linformer (S. Wang et al., arXiv:2006.04768v3, §3) shows it on
# pretrained RoBERTa: the normalised cumulative singular values of its attention matrices rise steeply,
# with a long tail, in every layer and head, so most of each matrix lies in a few singular directions;
# its Theorem 1 states that softmax attention can be approximated by a low-rank matrix.
#
# No trained model is downloaded here. Instead, softmax attention (n = 128) on input with the kind of
# structure real input has, against attention on i.i.d. Gaussian input:
#
# - **clustered tokens**: self-attention on tokens around 4 directions (q = k);
# - **sinusoidal positions**: self-attention on the sinusoidal encodings of the positions (d = 16),
#   whose dot products depend on the distance i − j and vary smoothly with it;
# - **multi-head attention**: the 4 heads of refattn's `multi_head_attention` with random (Glorot)
#   projections, on clustered tokens plus their positional encodings;
# - **Gaussian q, k**: i.i.d. N(0, 1) queries and keys;
# - **sharp positions**: the sinusoidal encodings scaled by 4, so that each position attends mostly to
#   itself and its neighbours.
#
# A matrix's *energy* is Σσᵢ², its squared Frobenius norm; r₉₀ and r₉₉ are the ranks whose largest
# singular values hold 90 % and 99 % of it. The mean row entropy says how spread the rows are (at most
# ln 128 = 4.85, the uniform row; a flat matrix is close to rank 1 whatever its input): a fair
# comparison holds it roughly equal, as it is for all but the sharp positions, sharp on purpose.

# %%
n = 128
pe = refattn.sinusoidal_positional_encoding(n, 16)
x = clustered(n)
mha = refattn.init_multi_head(np.random.default_rng(1), d_model=16, num_heads=4)
_, heads = refattn.multi_head_attention(x + pe, x + pe, mha, num_heads=4, return_weights=True)
g = gaussian(n, d=16, seed=2)
spectra = {
    "clustered tokens": softmax_attention(x, x, x)[1],
    "sinusoidal positions": softmax_attention(pe, pe, pe)[1],
    **{f"multi-head, head {h}": heads[h] for h in range(4)},
    "Gaussian q, k": softmax_attention(g[0], g[1], g[2])[1],
    "sharp positions (×4)": softmax_attention(4 * pe, 4 * pe, pe)[1],
}
ranks = {}
print(f"{'attention matrix':<24}{'row entropy':>12}{'r90':>6}{'r99':>6}{'σ₁₀/σ₁':>10}")
for name, M in spectra.items():
    sigma = np.linalg.svd(M, compute_uv=False)
    entropy = float(-np.mean(np.sum(M * np.log(M), axis=-1)))
    ranks[name] = (energy_rank(M, 0.90), energy_rank(M, 0.99))
    print(f"{name:<24}{entropy:>12.2f}{ranks[name][0]:>6}{ranks[name][1]:>6}{sigma[9] / sigma[0]:>10.1e}")

with styled():
    fig = viz.figure((11.5, 3.9))
    ax_sigma, ax_energy = fig.subplots(1, 2)
    for name, M in spectra.items():
        sigma = np.linalg.svd(M, compute_uv=False)
        style = {"color": "0.6", "lw": 0.8} if name.startswith("multi-head") else {"lw": 1.6}
        label = None if name.startswith("multi-head, head ") and not name.endswith("0") else \
            name.replace(", head 0", " (4 heads)")
        ax_sigma.semilogy(np.arange(1, n + 1), viz.roundoff(sigma / sigma[0]), label=label, **style)
        ax_energy.plot(np.arange(1, n + 1), np.cumsum(sigma**2) / np.sum(sigma**2), **style)
    for level in (0.9, 0.99):
        ax_energy.axhline(level, color="black", lw=0.6, ls=":")
    ax_sigma.set(xlabel="i", ylabel="σᵢ / σ₁", ylim=(1e-6, 1.5), title="singular values, n = 128")
    ax_energy.set(xscale="log", xlabel="rank r", ylabel="energy of the r largest", ylim=(0, 1.02),
                  title="cumulative energy (dotted: 90 %, 99 %)")
    ax_sigma.legend(fontsize=7, loc="upper right")
fig

# %% [markdown]
# > At about the same row entropy (the clustered tokens' rows are even a little sharper than the Gaussian
# > ones), attention on structured input is close to low rank: 4 directions give a matrix of 4 blocks
# > (r₉₉ = 4), smooth positional similarity a smooth kernel of i − j, whose singular values fall by
# > more than an order of magnitude within ten indices, and the random heads on tokens plus positions
# > inherit both (r₉₉ ≤ 9). On Gaussian input the energy spreads over dozens of directions. And
# > low rank is not a property of attention as such: the sharp positional matrix, nearly a band around
# > the diagonal, is close to full rank. That is why Guo et al. keep a band module beside the low-rank
# > one (section (f)).

# %%
structured_names = ["clustered tokens", "sinusoidal positions"] + [f"multi-head, head {h}" for h in range(4)]
for name in structured_names:
    assert ranks[name][1] < ranks["Gaussian q, k"][0] / 2, name       # r99 of structure < half of noise's r90
assert ranks["sharp positions (×4)"][0] > n / 2                        # a sharp band: most directions matter

# %% [markdown]
# ## (c) Nyströmformer: landmarks and three factors
#
# **Y. Xiong, Z. Zeng, R. Chakraborty, M. Tan, G. Fung, Y. Li, V. Singh, "Nyströmformer: A Nyström-Based
# Algorithm for Approximating Self-Attention", AAAI 2021, [arXiv:2102.03902](https://arxiv.org/abs/2102.03902)
# (v3).** The Nyström method rebuilds a matrix from a few of its rows and columns and the pseudoinverse of
# their intersection. For S = softmax(QKᵀ/√d), the "rows" and "columns" come from l landmark queries Q̃
# and keys K̃, the means of l contiguous segments of the sequence:
#
# $$
# \hat S = \underbrace{\operatorname{softmax}\Big(\frac{Q\tilde K^\top}{\sqrt d}\Big)}_{\tilde F,\ n \times l}\;
# \underbrace{\operatorname{softmax}\Big(\frac{\tilde Q\tilde K^\top}{\sqrt d}\Big)^{+}}_{\tilde A^+,\ l \times l}\;
# \underbrace{\operatorname{softmax}\Big(\frac{\tilde Q K^\top}{\sqrt d}\Big)}_{\tilde B,\ l \times m},
# \qquad \mathrm{out} = \tilde F\,\big(\tilde A^+ (\tilde B V)\big)
# $$
#
# computed right to left, so nothing n × m is formed. (The survey's M is Ã.)
#
# > **Segments when l does not divide n.** The official code reshapes the sequence into (l, n/l), so l
# > must divide n. refattn follows the authors' later extension (their T2T-ViT code): the first
# > l − (n mod l) segments hold ⌊n/l⌋ tokens and the last n mod l one more.

# %%
bounds = landmark_segments(10, 4)
print("10 tokens, 4 landmarks: segments", [list(range(a, b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)])
assert np.diff(bounds).tolist() == [2, 2, 3, 3]
x10 = rng.standard_normal((10, 3))
np.testing.assert_allclose(segment_means(x10, 4), [x10[a:b].mean(axis=0) for a, b in zip(bounds[:-1], bounds[1:],
                                                                                        strict=True)],
                           rtol=1e-12, atol=1e-12)

# %% [markdown]
# From the equation: the landmarks, the three softmax factors and NumPy's pseudoinverse, against
# `nystromformer_attention` with the exact pseudoinverse (SciPy's), on smooth input with n = 30 tokens and
# l = 4 landmarks (segments of 7, 7, 8, 8).

# %%
n, l = 30, 4
q, k, v = smooth(n, seed=3)
exact, S = softmax_attention(q, k, v)
Q_t, K_t = segment_means(q, l), segment_means(k, l)                        # (l, d)  Q̃, K̃
F_t = refattn.softmax(q @ K_t.T / math.sqrt(8))                            # (n, l)  F̃
A_t = refattn.softmax(Q_t @ K_t.T / math.sqrt(8))                          # (l, l)  Ã
B_t = refattn.softmax(Q_t @ k.T / math.sqrt(8))                            # (l, m)  B̃
out = F_t @ (np.linalg.pinv(A_t) @ (B_t @ v))                              # (n, d_v)
print(f"κ(Ã) = {np.linalg.cond(A_t):.1f}")
np.testing.assert_allclose(out, nystromformer_attention(q, k, v, num_landmarks=l, pinv="exact"), rtol=1e-12,
                           atol=1e-12)

# %% [markdown]
# The three factors and their product beside exact softmax, with the official 6 iterations for Ã⁺
# (the default). The factors are probability rows (F̃ and B̃, one colour scale from 0); Ã⁺ and Ŝ are
# signed.

# %%
f = nystrom_factors(q, k, num_landmarks=l)                                 # Ã⁺ by 6 iterations
result = registry.get("nystromformer").apply(q, k, v, num_landmarks=l, return_weights=True)
S_hat = f.F_tilde @ f.A_tilde_pinv @ f.B_tilde
np.testing.assert_allclose(S_hat, result.weights, rtol=1e-12, atol=1e-12)

fig = viz.figure((15, 4.2))
parts = fig.subfigures(1, 5, width_ratios=[0.42, 0.62, 1.25, 1.0, 1.15])
top = max(f.F_tilde.max(), f.B_tilde.max())                               # one scale for the two softmax factors
viz.draw_attention(parts[0], f.F_tilde, vmax=top, titles="F̃, n × l", xlabel="landmark\nkey", annotate=False,
                   colorbar=False)
viz.draw_attention(parts[1], f.A_tilde_pinv, signed=True, titles="Ã⁺ (6 iterations)", xlabel="landmark query",
                   ylabel="landmark key", colorbar=False)
viz.draw_attention(parts[2], f.B_tilde, vmax=top, titles="B̃, l × m", ylabel="landmark\nquery", annotate=False)
vmax = float(np.abs(np.stack([S_hat, S])).max())
viz.draw_attention(parts[3], S_hat, signed=True, vmax=vmax, titles="Ŝ = F̃ Ã⁺ B̃", annotate=False, colorbar=False)
viz.draw_attention(parts[4], S, signed=True, vmax=vmax, titles="S = softmax(QKᵀ/√d), exact", annotate=False)
fig

# %% [markdown]
# > Ŝ has rank ≤ l = 4 and is a smoothed S: a query's row is a signed mixture of the 4 landmark rows
# > of B̃. Its rows are not distributions.

# %%
print(f"relative output error {relative_error(result.output, exact):.3f};  rank of Ŝ: "
      f"{np.linalg.matrix_rank(S_hat)};  min Ŝ_ij = {S_hat.min():.3f};  row sums {S_hat.sum(1).min():.4f} … "
      f"{S_hat.sum(1).max():.4f}")
assert np.linalg.matrix_rank(S_hat) == l and S_hat.min() < 0

# %% [markdown]
# **Rows (issue #14).** Ã's rows sum to 1, Ã1 = 1, so with an invertible Ã and its exact inverse
# Ŝ1 = F̃Ã⁻¹1 = F̃1 = 1: the rows sum to 1, though some entries are negative. Six iterations have not
# converged on Ã (next section), so their rows need not.
#
# **Exact limit.** With l = n landmarks each segment is one token, Ã = F̃ = B̃ = S and Ŝ = SS⁺S = S:
# with the exact pseudoinverse this is softmax attention to rounding. On the smooth input S is itself
# nearly singular (that is what low rank means), and rounding is amplified by its condition number κ(S);
# on Gaussian input S is well conditioned.

# %%
exact_rows = nystromformer_attention(q, k, v, num_landmarks=l, pinv="exact", return_weights=True)[1].sum(axis=1)
assert np.allclose(exact_rows, 1.0, rtol=0, atol=1e-12)
assert np.abs(S_hat.sum(axis=1) - 1).max() > 1e-4                            # 6 steps: off by ~4e-4
for name, (qi, ki, vi) in (("Gaussian", gaussian(n, seed=4)), ("smooth", (q, k, v))):
    full = nystromformer_attention(qi, ki, vi, num_landmarks=n, pinv="exact")
    reference, S_i = softmax_attention(qi, ki, vi)
    err, kappa = relative_error(full, reference), np.linalg.cond(S_i)
    bound = max(1e-12, EPS * kappa)                                             # round-off, amplified by κ(S)
    print(f"{name:<9} l = n: κ(S) = {kappa:.1e},  relative error < max(1e-12, ε·κ(S)) = {bound:.1e}")
    assert err < bound

# %% [markdown]
# ## (d) The pseudoinverse iteration and its two initialisations
#
# The paper (Lemma 1) computes Ã⁺ by a third-order iteration,
#
# $$
# Z_0 = \frac{\tilde A^\top}{\|\tilde A\|_1 \|\tilde A\|_\infty}, \qquad
# Z_{j+1} = \tfrac14 Z_j \big(13 I - \tilde A Z_j (15 I - \tilde A Z_j (7 I - \tilde A Z_j))\big),
# $$
#
# and its code stops after 6 steps. Z is the Moore–Penrose pseudoinverse when all four Penrose
# conditions hold: ÃZÃ = Ã, ZÃZ = Z, and ÃZ and ZÃ symmetric. `penrose_residuals` gives the Frobenius
# norm of each residual; below they are divided by ‖Ã‖_F, ‖Z‖_F and ‖ÃZ‖_F, ‖ZÃ‖_F, so that they read
# as relative errors.

# %%
A_t = nystrom_factors(*smooth(64, seed=5)[:2], num_landmarks=8, pinv="exact").A_tilde
steps = np.arange(21)
Zs = [iterative_pinv(A_t, j) for j in steps]


def relative_residuals(M, Z):
    r = penrose_residuals(M, Z)
    norm = np.linalg.norm
    return np.array([r.mzm / norm(M), r.zmz / norm(Z), r.mz_symmetry / norm(M @ Z), r.zm_symmetry / norm(Z @ M)])


residuals = np.array([relative_residuals(A_t, Z) for Z in Zs])                  # (steps, 4)
scipy_residuals = relative_residuals(A_t, exact_pinv(A_t))
distance = [np.abs(Z - exact_pinv(A_t)).max() / np.abs(exact_pinv(A_t)).max() for Z in Zs]
print(f"κ(Ã) = {np.linalg.cond(A_t):.0f};  SciPy pinv's relative residuals:",
      ", ".join(viz.roundoff_text(r) for r in scipy_residuals))
assert scipy_residuals.max() < 1e-12                                           # SciPy's pinv: the four conditions
converged = int(np.argmax(np.array(distance) < 1e-12))
print(f"the iteration reaches SciPy's pinv to 1e-12 (largest entry, relative) after {converged} steps; "
      f"after 6 steps it is {distance[6]:.2f} away")
assert residuals[converged:].max() < 1e-12 and distance[6] > 0.1

with styled():
    fig = viz.figure((7.5, 3.6))
    ax = fig.add_subplot()
    labels = ["‖ÃZÃ − Ã‖ / ‖Ã‖", "‖ZÃZ − Z‖ / ‖Z‖", "‖(ÃZ)ᵀ − ÃZ‖ / ‖ÃZ‖", "‖(ZÃ)ᵀ − ZÃ‖ / ‖ZÃ‖"]
    for c, label in enumerate(labels):
        ax.semilogy(steps, viz.roundoff(residuals[:, c]), "o-", ms=3, label=label)
    ax.semilogy(steps, viz.roundoff(distance), "k--", lw=1, label="max |Z − Ã⁺| / max |Ã⁺|")
    ax.axvline(6, color="black", ls=":", lw=1)
    viz.shade_roundoff(ax)
    ax.set(xlabel="iteration j", ylabel="relative residual", ylim=(None, 10), xticks=steps[::2],
           title=f"Penrose residuals of Z_j, Ã of 8 landmarks (κ = {np.linalg.cond(A_t):.0f}); dotted: 6 steps")
    ax.legend(fontsize=7, loc="upper right")
fig

# %% [markdown]
# > Both symmetry conditions hold from the start: every iterate is Ãᵀ times a polynomial in ÃÃᵀ, so ÃZ
# > and ZÃ are symmetric by construction (to rounding). The other two fall slowly, then suddenly: a
# > singular direction σ of Ã gains a factor of about 13/4 per step while ασ² ≪ 1 (α the initial
# > coefficient), then converges at third order. So the steps needed grow with log(1/δ), δ = ασ²_min =
# > σ²_min/(‖Ã‖₁‖Ã‖∞): with the module's estimate, ⌈log(1/δ)/log(13/4)⌉ + 3. Measured on landmark
# > matrices of several inputs:

# %%
matrices = []
for seed in range(6):
    for width in (1.0, 2.0, 4.0):
        matrices.append(nystrom_factors(*smooth(64, width=width, seed=seed)[:2], num_landmarks=8,
                                        pinv="exact").A_tilde)
    for norm in (1.5, 2.5, 4.0):
        matrices.append(nystrom_factors(*phrases(64, 8, 16, norm, seed)[:2], num_landmarks=8,
                                        pinv="exact").A_tilde)
M = np.stack(matrices)
M = M[np.linalg.cond(M) < 1e4]                       # beyond, rounding (~ε·κ²) keeps the 1e-12 criterion out of reach
P = exact_pinv(M)
distance = np.array([np.abs(iterative_pinv(M, j) - P).max(axis=(-2, -1)) / np.abs(P).max(axis=(-2, -1))
                     for j in range(30)])            # (steps, matrices)
needed = np.argmax(distance < 1e-12, axis=0)
assert np.all(distance[-1] < 1e-12)                  # every one converged within 29 steps
sigma_min = np.linalg.svd(M, compute_uv=False)[:, -1]
delta = sigma_min**2 / (np.abs(M).sum(axis=-2).max(axis=-1) * np.abs(M).sum(axis=-1).max(axis=-1))
predicted = np.ceil(np.log(1 / delta) / np.log(13 / 4)).astype(int) + 3
kappa = np.linalg.cond(M)
print(f"{len(M)} matrices, κ from {kappa.min():.1f} to {kappa.max():.0f}; steps needed {needed.min()} … "
      f"{needed.max()}; 6 steps suffice for {np.sum(needed <= 6)} of them")
assert np.all((predicted - needed >= 0) & (predicted - needed <= 1))
assert np.all(needed[kappa < 4] <= 6) and np.all(needed[kappa > 10] > 6)

with styled():
    fig = viz.figure((7.5, 3.4))
    ax = fig.add_subplot()
    ax.semilogx(kappa, needed, "o", label="measured (to 1e-12)")
    ax.semilogx(kappa, predicted, "x", color="black", label="⌈log(1/δ)/log(13/4)⌉ + 3")
    ax.axhline(6, color="black", ls=":", lw=1, label="the official 6")
    ax.set(xlabel="κ(Ã)", ylabel="iterations needed", title="iterations to SciPy's pinv against κ(Ã), l = 8")
    ax.legend(fontsize=8)
fig

# %% [markdown]
# > The official 6 steps converge only the best-conditioned landmark matrices (κ below about 5); on
# > the others they leave the smallest singular directions almost untouched (issue #6 reports the
# > iteration failing to converge). Section (l) shows that this is not all bad: those are the
# > directions in which Ã⁺ is largest.
#
# **The two initialisations.** The paper's Z₀ divides by ‖Ã‖₁‖Ã‖∞ *per matrix* (for a softmax matrix
# ‖Ã‖∞ = 1, its rows sum to 1). The official code (`iterative_inv`) takes one maximum of the column sums
# over the whole tensor, batch and heads included (issue #3); lucidrains' port does the same, and
# HuggingFace exposes both. `init="official"` is that global coefficient. It costs nothing on a batch of
# similar matrices; beside one head of large ‖Ã‖₁ (every landmark query attending to one key, column
# sum ≈ l) every other matrix starts l times too small and needs about log l / log(13/4) more steps.
#
# The batch: three heads whose segments are coherent phrases (tokens around one direction per segment,
# of norms 2, 3, 4), and a fourth head whose landmark queries all attend to the first segment's keys;
# n = 64, l = 16.

# %%
n, l, d = 64, 16, 16
batch = [phrases(n, l, d, norm, seed) for seed, norm in enumerate((2.0, 3.0, 4.0))]
g = np.random.default_rng(9)
q_sink, k_sink = 0.3 * g.standard_normal((2, n, d))
q_sink[:, 0], k_sink[:, 0] = 2.0, 0.0
k_sink[: n // l, 0] = 8.0                                 # the first segment's keys: every landmark query's favourite
batch.append((q_sink, k_sink, g.standard_normal((n, d))))
q, k, v = (np.stack(x) for x in zip(*batch, strict=True))  # (4 heads, n, d)
A_t = nystrom_factors(q, k, num_landmarks=l, pinv="exact").A_tilde
P = exact_pinv(A_t)
print("‖Ã‖₁ per head:", np.abs(A_t).sum(axis=-2).max(axis=-1), "  κ(Ã):",
      ", ".join(f"{c:.3g}" for c in np.linalg.cond(A_t)))                   # head 3's κ: 3 digits are sure
steps = np.arange(16)
distance = {init: np.array([np.abs(iterative_pinv(A_t, j, init=init) - P).max(axis=(-2, -1))
                            / np.abs(P).max(axis=(-2, -1)) for j in steps]) for init in ("paper", "official")}

with styled():
    fig = viz.figure((11, 3.5))
    for ax, (init, title) in zip(fig.subplots(1, 2, sharey=True), (("paper", "per-matrix Z₀ (the paper)"),
                                                                    ("official", "global Z₀ (the official code)")),
                                 strict=True):
        for h in range(3):
            ax.semilogy(steps, viz.roundoff(distance[init][:, h]), "o-", ms=3, label=f"phrase head {h}")
        ax.semilogy(steps, viz.roundoff(distance[init][:, 3]), "k--", lw=1, label="head 3 (one key)")
        ax.axvline(6, color="black", ls=":", lw=1)
        viz.shade_roundoff(ax)
        ax.set(xlabel="iteration j", title=title, ylim=(None, 10))
    fig.axes[0].set_ylabel("max |Z_j − Ã⁺| / max |Ã⁺|")
    fig.axes[0].legend(fontsize=7, loc="lower left")
fig

# %%
reference = refattn.scaled_dot_product_attention(q, k, v)


def head_errors(out):
    return np.linalg.norm(out - reference, axis=(-2, -1)) / np.linalg.norm(reference, axis=(-2, -1))


errors = {init: head_errors(nystromformer_attention(q, k, v, num_landmarks=l, init=init)) for init in ("paper",
                                                                                                      "official")}
errors["exact pinv"] = head_errors(nystromformer_attention(q, k, v, num_landmarks=l, pinv="exact"))
for name, e in errors.items():
    print(f"output error per head, {name:<10}", e)
needed = {init: np.argmax(distance[init] < 1e-12, axis=0)[:3] for init in distance}
print("steps to 1e-12 on the phrase heads: per-matrix", needed["paper"], " global", needed["official"])
assert np.all(needed["official"] - needed["paper"] == 2)                      # log(12.5/1.1)/log(13/4) ≈ 2.1
assert distance["official"][6, 1] > 1e-3 > 1e-6 > distance["paper"][6, 1]       # at 6 steps: fails where paper converged
assert errors["official"][0] > 1.5 * errors["paper"][0]

# %% [markdown]
# > The global coefficient costs every phrase head two more steps; at the official 6, head 1's
# > pseudoinverse is off by a fifth where the per-matrix one has converged to 10⁻⁶, and head 0's output
# > error nearly doubles. Head 3 is ill-conditioned whatever the start (all its landmark queries are
# > alike, κ ≈ 2·10⁷): its iterates stay far from Ã⁺, and yet its output error is 0.08 with them against
# > 2.0 with the exact Ã⁺, a first sight of the regularising effect of stopping early (section (l)).

# %% [markdown]
# ## (e) CSALR: (M + εI)⁻¹
#
# **Z. Chen, M. Gong, L. Ge, B. Du, "Compressed Self-Attention for Deep Metric Learning with Low-Rank
# Approximation", IJCAI 2020.** The survey sets it beside Nyströmformer: the same three factors with
# landmarks from strided average pooling (windows of s tokens, stride s), and, since the inverse of the
# landmark matrix M = Ã need not exist, an identity added to it:
#
# $$
# \hat S = \operatorname{softmax}\Big(\frac{Q\tilde K^\top}{\sqrt d}\Big)
#          \big(\tilde A + \varepsilon I\big)^{-1}
#          \operatorname{softmax}\Big(\frac{\tilde Q K^\top}{\sqrt d}\Big), \qquad \varepsilon = 1
# $$
#
# > Ã is a positive matrix with rows summing to 1, so Ã + I is strictly diagonally dominant and always
# > invertible; and (Ã + εI)⁻¹1 = 1/(1 + ε), so every row of Ŝ sums to exactly 1/(1 + ε), a scale a
# > learned output projection absorbs. With s = 1 every token is a landmark, Ã = S, and
# > Ŝ_ε = S(S + εI)⁻¹S = S − εI + ε²(S + εI)⁻¹: the error is −εI to first order, and ε = 0 is softmax
# > attention. With ε = 0 and s dividing n, CSALR's landmarks are Nyströmformer's segment means, and
# > where Ã is invertible the two are the same matrix.

# %%
q, k, v = gaussian(24, seed=6)
exact, S = softmax_attention(q, k, v)
np.testing.assert_allclose(average_pool(q, 3), segment_means(q, 8), rtol=1e-12, atol=1e-12)   # s = 3: l = 8
for eps in (1.0, 0.1):
    W = nystrom_csalr_attention(q, k, v, pool=3, eps=eps, return_weights=True)[1]
    np.testing.assert_allclose(W.sum(axis=-1), 1 / (1 + eps), rtol=1e-12)
np.testing.assert_allclose(nystrom_csalr_attention(q, k, v, pool=1, eps=0.0), exact, rtol=1e-12, atol=1e-12)
np.testing.assert_allclose(nystrom_csalr_attention(q, k, v, pool=3, eps=0.0),
                           nystromformer_attention(q, k, v, num_landmarks=8, pinv="exact"), rtol=1e-12, atol=1e-12)

# every token a landmark (s = 1): Ŝ_ε = S(S + εI)⁻¹S = S − εI + ε²(S + εI)⁻¹, exactly
I = np.eye(24)
eigenvalues = np.linalg.eigvals(S)
print(f"{'ε':>8}{'max |Ŝ_ε − S|':>16}{'min |λ(S) + ε|':>17}")
for eps in (1.0, 1e-1, 1e-2, 1e-3, 1e-4, 0.0):
    W = nystrom_csalr_attention(q, k, v, pool=1, eps=eps, return_weights=True)[1]
    np.testing.assert_allclose(W, S - eps * I + eps**2 * np.linalg.inv(S + eps * I), rtol=0, atol=1e-12)
    print(f"{eps:>8.0e}{viz.roundoff_text(np.abs(W - S).max(), '.2e'):>16}{np.abs(eigenvalues + eps).min():>17.2e}")

# %% [markdown]
# > The way to ε = 0 is not monotone: at ε = 0.1 the error is larger than at ε = 1, because S + 0.1·I is
# > nearly singular. A positive matrix with rows summing to 1 may have eigenvalues in (−1, 0), and this
# > S has one near −0.1. ε ≥ 1 can never meet one; that is the survey's "make sure that the inverse
# > always exists".

# %% [markdown]
# ## (f) Low rank plus a band
#
# **Q. Guo, X. Qiu, X. Xue, Z. Zhang, "Low-Rank and Locality Constrained Self-Attention for Sequence
# Modeling", IEEE/ACM TASLP 27(12), 2019.** The survey (§4.4.1) reads the low rank of attention as an
# inductive bias: a key width D_k larger than the sequence over-parameterises, so limit it. Guo et al.
# split self-attention into a low-rank module with a small D_k, for long-range, non-local interactions,
# and a band module for local ones. refattn mixes the two row-stochastic matrices:
#
# $$
# A = \alpha\, \operatorname{softmax}\Big(\frac{QW_q (KW_k)^\top}{\sqrt{D_k}}\Big)
#   + (1 - \alpha)\, \operatorname{softmax}_{|i - j| \le w}\Big(\frac{QK^\top}{\sqrt{d}}\Big)
# $$
#
# > Low rank here is the rank of the *scores*: QW_q(KW_k)ᵀ has rank ≤ D_k. The softmax acts entry by
# > entry, and e^S is a sum of the entrywise powers S∘ᵖ/p!, of growing rank, so the low-rank module's
# > attention matrix is not of rank D_k, only close to it; the band adds a full-rank local part.
# > Below (n = 48, D_k = 2, w = 2): the low-rank module's matrix is numerically of rank 44, yet 3
# > directions hold 99 % of its energy; the band's energy spreads over 35.

# %%
n, d, D_k, w = 48, 8, 2, 2
q, k, v = smooth(n, seed=7)
params = init_lowrank_band(np.random.default_rng(8), d, D_k)
out, A = lowrank_band_attention(q, k, v, window=w, params=params, return_weights=True)
A_low = lowrank_band_attention(q, k, v, window=w, params=params, alpha=1.0, return_weights=True)[1]
A_band = lowrank_band_attention(q, k, v, window=w, params=params, alpha=0.0, return_weights=True)[1]
np.testing.assert_allclose(A, 0.5 * A_low + 0.5 * A_band, rtol=1e-12, atol=1e-12)   # α = ½
np.testing.assert_allclose(A.sum(axis=-1), 1.0, rtol=1e-12)
S_low = (q @ params.w_q) @ (k @ params.w_k).T / math.sqrt(D_k)
assert np.linalg.matrix_rank(S_low) == D_k
print(f"{'':<26}{'rank':>6}{'r90':>6}{'r99':>6}")
for name, M in (("scores QW_q(KW_k)ᵀ/√D_k", S_low), ("low-rank module", A_low), ("band module", A_band), ("A", A)):
    print(f"{name:<26}{np.linalg.matrix_rank(M):>6}{energy_rank(M, 0.9):>6}{energy_rank(M, 0.99):>6}")

# the exact limits: the band alone covering every key; or the low-rank module with D_k = d and W_q = W_k = I
exact = softmax_attention(q, k, v)[0]
np.testing.assert_allclose(lowrank_band_attention(q, k, v, window=n, params=params, alpha=0.0), exact,
                           rtol=1e-12, atol=1e-12)
np.testing.assert_allclose(lowrank_band_attention(q, k, v, window=w, params=LowRankBandParams(np.eye(d), np.eye(d)),
                                                  alpha=1.0), exact, rtol=1e-12, atol=1e-12)

fig = viz.figure((13, 3.6))
left, right = fig.subfigures(1, 2, width_ratios=[3, 1.3])
viz.draw_attention(left, np.stack([A_low, A_band, A]), annotate=False,
                   titles=[f"low-rank module, D_k = {D_k}", f"band module, w = {w}", "A = ½ low-rank + ½ band"])
with styled():
    ax = right.add_subplot()
    for M, label in ((S_low, "scores QW_q(KW_k)ᵀ/√D_k"), (A_low, "softmax of them"), (A_band, "band module"),
                     (A, "A")):
        sigma = np.linalg.svd(M, compute_uv=False)
        ax.semilogy(np.arange(1, n + 1), viz.roundoff(sigma / sigma[0]), label=label)
    viz.shade_roundoff(ax)
    ax.set(xlabel="i", ylabel="σᵢ / σ₁", ylim=(None, 2), title="singular values")
    ax.legend(fontsize=7)
fig

# %% [markdown]
# ## (g) Linformer
#
# **S. Wang, B. Z. Li, M. Khabsa, H. Fang, H. Ma, "Linformer: Self-Attention with Linear Complexity",
# [arXiv:2006.04768](https://arxiv.org/abs/2006.04768) (v3), §4.** Two matrices E, F ∈ ℝ^{k×m} project
# the keys and the values along the sequence, from m rows to k, before attention:
#
# $$
# \operatorname{head} = \underbrace{\operatorname{softmax}\Big(\frac{Q (EK)^\top}{\sqrt{d_k}}\Big)}_{\bar P,\ n \times k}
#                       \, F V, \qquad W = \bar P F \quad (n \times m)
# $$
#
# E and F are learned; refattn draws them as the paper's proof does, N(0, 1/k), or takes them
# explicitly. §4 shares them between heads ("headwise"), between keys and values ("kv": E = F), or
# across every layer ("layerwise"), and `draw_projections` draws them so.

# %%
E, F = draw_projections(rng, 16, 4, sharing="headwise", num_heads=2, num_layers=2)   # (layers, heads, k, m)
assert np.array_equal(E[0, 0], E[0, 1]) and not np.array_equal(E[0, 0], E[1, 0]) and not np.array_equal(E, F)
E_kv, F_kv = draw_projections(rng, 16, 4, sharing="kv", num_layers=2)
E_all, F_all = draw_projections(rng, 16, 4, sharing="layerwise", num_heads=2, num_layers=2)
assert F_kv is E_kv and F_all is E_all and np.array_equal(E_all[0, 0], E_all[1, 1])

q, k, v = smooth(16, seed=9)
exact, S = softmax_attention(q, k, v)
result = registry.get("linformer").apply(q, k, v, E=E[0, 0], F=F[0, 0], return_weights=True)
P_bar = softmax_attention(q, E[0, 0] @ k, F[0, 0] @ v)[1]
np.testing.assert_allclose(P_bar @ F[0, 0], result.weights, rtol=1e-12, atol=1e-12)
np.testing.assert_allclose(linformer_attention(q, k, v, E=np.eye(16), F=np.eye(16)), exact, rtol=1e-12,
                           atol=1e-12)                                          # E = F = I: softmax attention

fig = viz.figure((14, 3.6))
proj, mapping, product = fig.subfigures(1, 3, width_ratios=[1.6, 0.6, 2.1])
viz.draw_attention(proj, np.stack([E[0, 0], F[0, 0]]), signed=True, annotate=False, xlabel="position j",
                   ylabel="row r", titles=["E (keys), k × m", "F (values)"])
viz.draw_attention(mapping, P_bar, titles="P̄, n × k", xlabel="row r", annotate=False)
viz.draw_attention(product, np.stack([result.weights, S]), signed=True, annotate=False,
                   titles=[f"W = P̄F (error {relative_error(result.output, exact):.2f})", "exact softmax"])
fig

# %% [markdown]
# > Untrained random projections give W little resemblance to softmax's matrix: each projected key is a
# > random signed mixture of every token. The paper's guarantee (Theorem 2) is for k of order
# > d log d / ε², far beyond m at these sizes, and the model learns E and F; section (l) shows the error
# > of random ones against k.
#
# **No causal form.** Every row of EK mixes all m positions, so every projected key and value carries the
# future, and no mask on the n × k scores can remove it (lucidrains/linformer issue #4). refattn refuses
# `causal=True` with that reason:

# %%
try:
    linformer_attention(q, k, v, E=E[0, 0], F=F[0, 0], causal=True)
except ValueError as error:
    print("ValueError:", error)
else:
    raise AssertionError("Linformer has no causal form")

# %% [markdown]
# ## (h) Memory-compressed attention
#
# **P. J. Liu, M. Saleh, E. Pot, B. Goodrich, R. Sepassi, Ł. Kaiser, N. Shazeer, "Generating Wikipedia by
# Summarizing Long Sequences", ICLR 2018, [arXiv:1801.10198](https://arxiv.org/abs/1801.10198) (v1),
# §4.2.3.** A strided convolution with kernel = stride = c shortens the keys and values by a factor c;
# the n queries attend the ⌊m/c⌋ compressed rows. The same decoder interleaves it with local attention
# within blocks of tokens. With scalar taps w₀ … w_{c−1} shared by the channels, the convolution is a
# matrix along the sequence, K̃ = CK with C_{r, rc+t} = w_t: a Linformer projection with a strided band
# structure, and W = softmax(QK̃ᵀ/√d) C.
#
# In the decoder (causal), query i sees the compressed blocks all of whose tokens are at or before i.

# %%
n, c = 12, 3
q, k, v = smooth(n, seed=10)
taps = np.full(c, 1 / c)                                                  # mean pooling of c tokens
C = compression_matrix(n, taps)                                          # (n/c, n)
np.testing.assert_allclose(compress_memory(k, taps), C @ k, rtol=1e-12, atol=1e-12)
mean = MemoryCompression(taps, taps)
W = memory_compressed_attention(q, k, v, params=mean, return_weights=True)[1]
W_causal = memory_compressed_attention(q, k, v, params=mean, causal=True, return_weights=True)[1]
W_local = blockwise_local_attention(q, k, v, block=4, causal=True, return_weights=True)[1]
assert np.all(np.triu(W_causal, 1) == 0)                                 # nothing after i
assert np.all(W_causal[: c - 1] == 0)                                    # before the first block ends: no block, 0
np.testing.assert_allclose(W, linformer_attention(q, k, v, E=C, sharing="kv", return_weights=True)[1],
                           rtol=1e-12, atol=1e-12)                       # = Linformer with E = F = C
one = MemoryCompression(np.ones(1), np.ones(1))                          # c = 1, the tap 1
for causal in (False, True):
    np.testing.assert_allclose(memory_compressed_attention(q, k, v, params=one, causal=causal),
                               softmax_attention(q, k, v, causal=causal)[0], rtol=1e-12, atol=1e-12)

fig = viz.figure((14, 3.4))
conv, maps = fig.subfigures(1, 2, width_ratios=[1.2, 3])
viz.draw_attention(conv, C, titles=f"C: kernel = stride = {c}", xlabel="position j", ylabel="memory row r")
viz.draw_attention(maps, np.stack([W, W_causal, W_local]), annotate=False,
                   titles=["W = P C (mean taps)", "causal: blocks ending ≤ i", "local attention, blocks of 4"])
fig

# %% [markdown]
# > With mean taps every memory row is a distribution over its c tokens, so W's rows are too; learned taps
# > (d × d matrices in the paper's layer, which mix the channels and leave no n × m matrix) need not be.
# > The first c − 1 queries of the decoder see no finished block and output 0; tensor2tensor prepends
# > the first token to the memory instead (`memory="tensor2tensor"`).

# %% [markdown]
# ## (i) Set Transformer
#
# **J. Lee, Y. Lee, J. Kim, A. R. Kosiorek, S. Choi, Y. W. Teh, "Set Transformer: A Framework for
# Attention-based Permutation-Invariant Neural Networks", ICML 2019,
# [arXiv:1810.00825](https://arxiv.org/abs/1810.00825) (v3), §3.** Its block MAB(X, Y) = LayerNorm(H +
# rFF(H)), H = LayerNorm(X + Multihead(X, Y, Y)), lets a set X attend a set Y. ISAB replaces the O(n²)
# self-attention MAB(X, X) by two attentions through ℓ learned *inducing points* I: H = MAB(I, X), then
# MAB(X, H). PMA pools a set into k outputs: MAB(S, rFF(Z)) with k learned seeds S.
#
# Without the blocks' residuals, norms and feed-forward layers, ISAB's attention path is
# A_IK = softmax(IKᵀ/√d) (ℓ × m), the memory H = A_IK K, A_IK V, and A_QH = softmax(Q(A_IK K)ᵀ/√d)
# (n × ℓ): W = A_QH A_IK, of rank ≤ ℓ, is the registry entry's effective matrix.

# %%
n, ell = 16, 3
q, k, v = smooth(n, seed=11)
inducing = draw_inducing_points(rng, ell, 8)
A_QH, A_IK = induced_maps(q, k, inducing)
out, W = induced_attention(q, k, v, inducing, return_weights=True)
np.testing.assert_allclose(W, A_QH @ A_IK, rtol=1e-12, atol=1e-12)
np.testing.assert_allclose(W.sum(axis=-1), 1.0, rtol=1e-12)
assert np.linalg.matrix_rank(W) == ell

fig = viz.figure((14, 3.4))
two, product = fig.subfigures(1, 2, width_ratios=[1.9, 2.2])
inner = two.subfigures(1, 2, width_ratios=[0.45, 1.45])
viz.draw_attention(inner[0], A_QH, vmax=1.0, titles="A_QH, n × ℓ", xlabel="inducing\npoint",
                   annotate=False, colorbar=False)
viz.draw_attention(inner[1], A_IK, vmax=1.0, titles="A_IK, ℓ × m", ylabel="inducing point",
                   annotate=False)
viz.draw_attention(product, np.stack([W, softmax_attention(q, k, v)[1]]), annotate=False,
                   titles=[f"W = A_QH A_IK (rank {ell})", "exact softmax"])
fig

# %% [markdown]
# > The blocks have no positional input anywhere: every element goes through the same maps. So MAB,
# > SAB and ISAB are permutation-*equivariant* in X (permute the set, and the outputs follow), and PMA is
# > permutation-*invariant*. The paper's scaled softmax divides by √d; the official code divides by √d of
# > the whole model (`scale_by="model"`), refattn by each head's width (`scale_by="head"`, the default, as
# > the Transformer's heads do); with one head the two agree.

# %%
d_model, heads, set_size = 8, 2, 7
X = rng.standard_normal((set_size, d_model))
perm = rng.permutation(set_size)
block = init_mab(rng, d_model, heads)
isab_params = init_isab(rng, d_model, heads, num_inducing=3)
pma_params = init_pma(rng, d_model, heads, num_seeds=2)
np.testing.assert_allclose(sab(X[perm], block, num_heads=heads), sab(X, block, num_heads=heads)[perm],
                           rtol=1e-12, atol=1e-12)
np.testing.assert_allclose(isab(X[perm], isab_params, num_heads=heads), isab(X, isab_params, num_heads=heads)[perm],
                           rtol=1e-12, atol=1e-12)
np.testing.assert_allclose(pma(X[perm], pma_params, num_heads=heads), pma(X, pma_params, num_heads=heads),
                           rtol=1e-12, atol=1e-12)
one_head = init_mab(rng, d_model, 1)
np.testing.assert_allclose(mab(X, X, one_head, num_heads=1, scale_by="model"), mab(X, X, one_head, num_heads=1),
                           rtol=1e-12, atol=1e-12)
assert not np.allclose(mab(X, X, block, num_heads=heads, scale_by="model"), mab(X, X, block, num_heads=heads))
print("ISAB output", isab(X, isab_params, num_heads=heads).shape, "; PMA output", pma(X, pma_params,
                                                                                    num_heads=heads).shape)

# %% [markdown]
# ## (j) Luna
#
# **X. Ma, X. Kong, S. Wang, C. Zhou, J. May, H. Ma, L. Zettlemoyer, "Luna: Linear Unified Nested
# Attention", NeurIPS 2021, [arXiv:2106.01540](https://arxiv.org/abs/2106.01540) (v2), §3.** An extra
# sequence P of fixed length l *packs* the context, P′ = Attn(P, C), and the sequence *unpacks* it,
# Y = Attn(X, P′); P′ goes on as the next layer's P. One head's effective matrix is W = A_unpack A_pack:
# Set Transformer's inducing-point path with the pack queries in place of the inducing points (the
# difference is that Luna carries P′ from layer to layer).
#
# Luna's causal form (the official `LunarCausalAttention`) replaces the pack softmax, which would read
# the whole sequence, by an elementwise softplus F, and position t reads the *running mean* of the
# packed context over positions ≤ t. Its rows are ≥ 0 but not normalised.

# %%
n, l = 16, 3
q, k, v = smooth(n, seed=12)
pack = draw_pack(rng, l, 8)
out, W = luna_attention(q, k, v, pack, return_weights=True)
A_unpack, A_pack = luna_maps(q, k, pack)
np.testing.assert_allclose(W, A_unpack @ A_pack, rtol=1e-12, atol=1e-12)
np.testing.assert_allclose(out, induced_attention(q, k, v, pack), rtol=1e-12, atol=1e-12)   # = Set Transformer's path

perm = rng.permutation(n)                                     # permute the queries: the outputs follow
np.testing.assert_allclose(luna_attention(q[perm], k, v, pack), out[perm], rtol=1e-12, atol=1e-12)
np.testing.assert_allclose(luna_attention(q, k[perm], v[perm], pack), out, rtol=1e-12,
                           atol=1e-12)                        # permute the context: nothing changes

out_c, W_c = luna_attention(q, k, v, pack, causal=True, return_weights=True)
np.testing.assert_allclose(out_c, W_c @ v, rtol=1e-12, atol=1e-12)
assert np.all(np.triu(W_c, 1) == 0) and W_c.min() >= 0
for t in (0, 5, 15):                                          # output t from positions ≤ t alone
    prefix = luna_attention(q[: t + 1], k[: t + 1], v[: t + 1], pack, causal=True)
    np.testing.assert_allclose(prefix[t], out_c[t], rtol=1e-12, atol=1e-12)
print(f"causal row sums: {W_c.sum(axis=1).min():.2f} … {W_c.sum(axis=1).max():.2f}")

fig = viz.figure((14, 3.4))
maps, matrices = fig.subfigures(1, 2, width_ratios=[1.9, 3.2])
inner = maps.subfigures(1, 2, width_ratios=[0.45, 1.45])
viz.draw_attention(inner[0], A_unpack, vmax=1.0, titles="A_unpack, n × l", xlabel="pack\ntoken", annotate=False,
                   colorbar=False)
viz.draw_attention(inner[1], A_pack, vmax=1.0, titles="A_pack, l × m", ylabel="pack token", annotate=False)
viz.draw_attention(matrices, np.stack([W, W_c, softmax_attention(q, k, v, causal=True)[1]]), annotate=False,
                   titles=["W = A_unpack A_pack", "causal (running means)", "causal softmax"])
fig

# %% [markdown]
# ## (k) Poolingformer
#
# **H. Zhang, Y. Gong, Y. Shen, W. Li, J. Lv, N. Duan, W. Chen, "Poolingformer: Long Document Modeling
# with Pooling Attention", ICML 2021, [arXiv:2105.04371](https://arxiv.org/abs/2105.04371).** Two levels:
# a sliding window of w₁ keys on each side gives y; a second level, stacked on y, attends the first
# level's outputs pooled (kernel κ, stride ξ) over a larger window of w₂ on each side, and the two are
# added. Pooling by a lightweight dynamic convolution (the default) or by the mean weights each segment's
# positions with weights shared by the channels, so both levels are linear in V and
#
# $$
# W = (I + A_2 P)\, A_1
# $$
#
# with A₁ the band attention (n × m), P the pooling ((n + κ − 1) × n, one row per segment start) and A₂
# the second level's attention over the segments each query sees. Below, the three pieces are rebuilt
# from refattn's band attention, pooling matrix and pooling pattern, and multiplied.

# %%
n, w1, w2, kappa, xi = 20, 1, 6, 3, 2
q, k, v = smooth(n, seed=13)
record = registry.get("poolingformer")
result = record.apply(q, k, v, window=w1, pool_window=w2, kernel_size=kappa, stride=xi, rng=14, return_weights=True,
                      return_draws=True)
params = result.draws["params"]
y, A1 = sparse_attention(q, k, v, band_pattern(n, w1), return_weights=True, method="equation")
P = pooling_matrix(y, kappa, pooling="conv", w_kernel=params.w_kernel)     # (n + κ − 1, n)
second = pooling_pattern(n, w2, kappa, xi)
pooled = P @ y
A2 = sparse_attention(y @ params.w_q, pooled @ params.w_k, pooled, second, return_weights=True, method="equation")[1]
W = (np.eye(n) + A2 @ P) @ A1
np.testing.assert_allclose(W, result.weights, rtol=1e-12, atol=1e-12)
np.testing.assert_allclose(W.sum(axis=-1), 2.0, rtol=1e-12)                    # two levels, each row-stochastic
exact = softmax_attention(q, k, v)[0]
limit = dict(window=n, pool_window=0, kernel_size=1, stride=1, params=None, rng=0)
np.testing.assert_allclose(poolingformer_attention(q, k, v, residual=False, **limit), exact, rtol=1e-12, atol=1e-12)
np.testing.assert_allclose(poolingformer_attention(q, k, v, **limit), 2 * exact, rtol=1e-12, atol=1e-12)

fig = viz.figure((15, 3.6))
parts = fig.subfigures(1, 4, width_ratios=[1, 1.05, 1.05, 1.2])
viz.draw_attention(parts[0], A1, allowed=band_pattern(n, w1).to_mask(), titles=f"A₁: band, w₁ = {w1}",
                   annotate=False, colorbar=False)
viz.draw_attention(parts[1], P, titles=f"P: conv pooling, κ = {kappa}", xlabel="position", ylabel="segment start",
                   annotate=False, colorbar=False)
viz.draw_attention(parts[2], A2, allowed=second.to_mask(), titles=f"A₂: w₂ = {w2}, ξ = {xi}",
                   xlabel="segment start", annotate=False)
viz.draw_attention(parts[3], W, titles="W = (I + A₂P) A₁", annotate=False)
fig

# %% [markdown]
# > The second level widens each query's reach from 2w₁ + 1 = 3 keys to 2(w₁ + w₂) + 1 = 15, at the
# > cost of ⌊(2w₂ + 1 − κ)/ξ⌋ + 1 = 6 pooled segments per query. It is added to the first level, so W's
# > rows sum to 2, and no setting of the published model is softmax attention: with w₁ ≥ n, and a
# > second level that sees only its own query's output (w₂ = 0, κ = ξ = 1), it is exactly twice
# > softmax attention (asserted above); without the residual, exactly softmax attention.

# %% [markdown]
# ## (l) The error against softmax as the budget grows
#
# All on one seeded input, the smooth one (n = m = 64, d = 8), against exact softmax attention; the
# budget r is the number of memory rows each query reads: landmarks l (Nyströmformer), m/s (CSALR's
# pooled landmarks), the projected length k (Linformer, random N(0, 1/k) projections), m/c memory rows
# (MCA, mean taps, the same matrix as Linformer with E = F = mean pooling), inducing points ℓ (Set
# Transformer; Luna's non-causal pack of l tokens is the same path and the same matrix for the same
# draw), and m/κ pooled segments (Poolingformer, second level over the whole sequence, κ = ξ, mean
# pooling, w₁ = 1, without the residual so that its rows are distributions).
#
# Two measures of the effective matrix W beside the output's relative error:
#
# - where W's rows are distributions (≥ 0, summing to 1), the mean row **KL(A_i ‖ W_i)**, the
#   information lost when softmax's row A_i is replaced by W_i (finite here: every W_ij > 0);
# - for every mechanism, the mean row **L1 distance ‖W_i − A_i‖₁**. Nyström's rows are signed, and a
#   KL divergence of a signed row is not defined; the L1 distance is, and it bounds the output error of
#   the row, |(W_i − A_i)V| ≤ ‖W_i − A_i‖₁ max_j |v_j|. For two distributions it is twice the total
#   variation.

# %%
n = 64
q, k, v = smooth(n, seed=0)
exact, A = softmax_attention(q, k, v)
budgets = [1, 2, 4, 8, 16, 32, 64]


def mean_pool(r):
    return MemoryCompression(np.full(n // r, r / n), np.full(n // r, r / n))


SWEEP = {
    "Nyströmformer, 6 steps": lambda r: registry.get("nystromformer").apply(q, k, v, num_landmarks=r,
                                                                             return_weights=True),
    "Nyströmformer, exact pinv": lambda r: registry.get("nystromformer").apply(q, k, v, num_landmarks=r, pinv="exact",
                                                                                return_weights=True),
    "CSALR, ε = 1": lambda r: registry.get("nystrom_csalr").apply(q, k, v, pool=n // r, return_weights=True),
    "Linformer, random E, F": lambda r: registry.get("linformer").apply(q, k, v, proj_dim=r, rng=r,
                                                                         return_weights=True),
    "MCA, mean taps": lambda r: registry.get("mca").apply(q, k, v, params=mean_pool(r), return_weights=True),
    "Set Transformer = Luna": lambda r: registry.get("set_transformer").apply(q, k, v, num_inducing=r, rng=r,
                                                                               return_weights=True),
    "Poolingformer, no residual": lambda r: registry.get("poolingformer").apply(
        q, k, v, window=1, pool_window=n, kernel_size=n // r, stride=n // r, pooling="mean", residual=False, rng=r,
        return_weights=True),
}
sweep = {name: [run(r) for r in budgets] for name, run in SWEEP.items()}


def row_kl(W):
    """Mean KL(A_i ‖ W_i), or NaN when W's rows are not distributions."""
    if W.min() < 0 or not np.allclose(W.sum(axis=-1), 1.0, rtol=0, atol=1e-12):
        return np.nan
    return float(np.mean(np.sum(A * np.log(A / W), axis=-1)))


measures = {name: np.array([[relative_error(r.output, exact), row_kl(r.weights),
                             np.abs(r.weights - A).sum(axis=-1).mean()] for r in runs])
            for name, runs in sweep.items()}
print(f"{'':<28}" + "".join(f"{r:>8}" for r in budgets))
for name, m in measures.items():
    print(f"{name:<28}" + "".join(f"{e:>8.3f}" for e in m[:, 0]))

# %%
for t, r in enumerate(budgets):
    np.testing.assert_allclose(sweep["MCA, mean taps"][t].weights, linformer_attention(
        q, k, v, E=compression_matrix(n, np.full(n // r, r / n)), sharing="kv", return_weights=True)[1],
        rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(sweep["Set Transformer = Luna"][t].weights, registry.get("luna").apply(
        q, k, v, pack_length=r, rng=r, return_weights=True).weights, rtol=1e-12, atol=1e-12)
kappa = np.linalg.cond(A)
assert measures["MCA, mean taps"][-1, 0] < 1e-12                       # c = 1, the tap 1: softmax attention
six, scipy_pinv = measures["Nyströmformer, 6 steps"][:, 0], measures["Nyströmformer, exact pinv"][:, 0]
assert np.all(six[2:4] < scipy_pinv[2:4]) and np.all(six[5:] > scipy_pinv[5:])   # l = 4, 8 | l = 32, 64
assert measures["Nyströmformer, exact pinv"][-1, 0] < EPS * kappa      # l = n: softmax, to rounding × κ(S)
for name in ("Linformer, random E, F", "Set Transformer = Luna", "Poolingformer, no residual", "CSALR, ε = 1"):
    assert measures[name][:, 0].min() > 0.1, name                     # no budget reaches softmax
print(f"κ(S) = {kappa:.1e}; Nyströmformer at l = n with the exact pinv: error < ε·κ(S) = {EPS * kappa:.1e}")

with styled():
    fig = viz.figure((14, 4.4))
    axes = fig.subplots(1, 3)
    floor = 1e-4                                                        # exact points (r = 64) drawn on the axis
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf"]
    for index, (name, m) in enumerate(measures.items()):
        for column, ax in enumerate(axes):
            if column == 1 and np.isnan(m[:, 1]).any():                 # KL only where every W is a distribution
                continue
            ax.plot(budgets, np.maximum(m[:, column], floor), "os^vDP*"[index] + "-", ms=4, color=colors[index],
                    label=name, clip_on=False)
    for ax, title in zip(axes, ("output: ‖y − y_sm‖ / ‖y_sm‖", "rows: mean KL(A_i ‖ W_i) (distributions only)",
                                "rows: mean ‖W_i − A_i‖₁"), strict=True):
        ax.set(xscale="log", yscale="log", xlabel="budget r (memory rows per query)", title=title,
               xticks=budgets, xticklabels=[str(b) for b in budgets], ylim=(floor, 100))
        ax.minorticks_off()
    axes[0].legend(fontsize=7, loc="lower left")
    fig.suptitle(f"on the axis at r = 64: MCA (0, exact) and Nyströmformer with the exact pinv "
                 f"(< rounding × κ(S) = {EPS * kappa:.0e})", fontsize=9)
fig

# %% [markdown]
# > **What the sweep shows.**
# >
# > - Only two budgets end at softmax attention: MCA with c = 1 and the tap 1 (equal to Linformer with
# >   E = F = I), and Nyströmformer with l = n and the exact pseudoinverse, to rounding amplified by
# >   κ(S), which is large on this smooth input (its attention matrix is nearly low rank, so nearly
# >   singular).
# > - On the way, the exact pseudoinverse is *not* always the best choice: at l = 4 and 8, where Ã is
# >   ill-conditioned, it amplifies the directions in which F̃ and B̃ disagree with S, and the 6-step
# >   iteration, which has not yet reached those directions (section (d)), acts as a regularised
# >   inverse and stays closer. But six steps never converge on these Ã, and their error levels off at
# >   2 % from l = 16 on; from l = 32 the exact pseudoinverse is better, and only it reaches softmax.
# > - Mean pooling (MCA, Linformer with pooling) improves steadily on smooth input: neighbours are
# >   alike, so their mean stands for them. Random untrained projections are far at every k: Linformer's
# >   E and F must be learned.
# > - Set Transformer / Luna with random inducing points, and Poolingformer's second level, do not
# >   approach softmax as the budget grows: they are other layers, trained as such, not approximations
# >   of softmax attention. CSALR's rows sum to 1/2 (ε = 1), which alone would give an error of ½ at
# >   every s; the measured 0.65–0.72 include it.

# %% [markdown]
# ## (m) Exercises
#
# 1. **Fewer steps, smaller error.** On the smooth input of (l), compute Nyströmformer's output error
#    with l = 8 for `iterations` 3, 6, 10, 20 and with `pinv="exact"`. Where is the minimum? Compare
#    κ(Ã) (`nystrom_factors(q, k, num_landmarks=8, pinv="exact").A_tilde`).
#    <details><summary>Hint</summary>The error falls and then rises again: the iteration first fits the
#    large singular values of Ã, where F̃Ã⁺B̃ is close to S, and only later the small ones, where 1/σ
#    is large and the factors' mismatch is amplified. Stopping early is a regularisation, like a
#    truncated SVD.</details>
#
# 2. **The global initialisation on a uniform batch.** Repeat the batch of (d) without head 3. Do the
#    two initialisations still differ?
#    <details><summary>Hint</summary>The phrase heads all have ‖Ã‖₁ ≈ 1, so the global maximum is
#    within a few per cent of each head's own: the two coefficients nearly agree and so do the steps
#    needed. The official code fails only beside a head of larger norm.</details>
#
# 3. **Luna decodes with a cache.** With `causal="bottom-right"`, the last query of a sequence sees every
#    key. Check that `luna_attention(q[-1:], k, v, pack, causal="bottom-right")` equals the last row of
#    `luna_attention(q, k, v, pack, causal=True)`.
#    <details><summary>Hint</summary>Bottom-right places the single query at position m − 1, where the
#    running means cover all m positions, exactly as the last row of the top-left causal call does.
#    </details>
