# %% [markdown]
# # Do we need q and k at all? Attention-free mixers and hybrids
#
# Softmax attention mixes the tokens of a sequence by an n × m matrix computed from queries and keys,
# softmax(QKᵀ/√d). The mechanisms here answer the question "do we need q and k at all?" in two ways.
#
# - **Mixers that drop pairwise attention.** FNet mixes tokens by a fixed Fourier transform. AFT weighs the
#   values by the keys and learned position biases, channel by channel. gMLP gates one half of its
#   channels by a learned linear map of the other half over the tokens.
# - **Hybrids that keep softmax but change its support or normalisation.** Top-k keeps the k largest
#   scores of each row. Sinkformer balances the rows *and* the columns. XCiT attends across channels
#   instead of tokens. Skyformer replaces the softmax by a Gaussian kernel and approximates it by Nyström.
#   Scatterbrain adds a sparse and a low-rank estimate. Long-Short adds a window and a projected memory.
#   GAU replaces the softmax by relu² and gates the result.
#
# Each paper is cited where it appears. None of them is in the survey's taxonomy (Lin et al.,
# [arXiv:2106.04554](https://arxiv.org/abs/2106.04554)), which ends in mid-2021; they come after it or beside
# it.
#
# > **One convention for the whole family.** Every registry entry takes q, k, v and returns, as its
# > `weights`, the matrix M that mixes the tokens: out = M v. Where no single real matrix does that, the
# > entry returns what does, and its record's `mixing` says so. FNet returns the real and imaginary planes of
# > the DFT (`mixing="fourier"`: its output also mixes the channels). AFT returns one matrix per channel
# > (`"per_channel"`). XCiT returns the d × d map over channels (`"channels"`). Each record's `exact_limit` names the setting in which it equals softmax
# > attention, or says why none exists.
#
# The plain text paraphrases the cited papers. Commentary is set apart as block quotes. Every claim that
# can be checked is an `assert`.
#
# **Contents.** (a) every mixing matrix beside softmax · (b) FNet's DFT · (c) AFT's four variants · (d) gMLP's
# spatial gating at initialisation · (e) top-k: the error against k · (f) Sinkformer: towards doubly stochastic
# · (g) XCiT: a d × d map · (h) Skyformer · (i) Scatterbrain · (j) Long-Short · (k) GAU and FLASH · (l) the cost
# against n · (m) exercises

# %%
from functools import partial

import matplotlib as mpl
import numba
import numpy as np

import refattn
from refattn import registry, viz
from refattn.bench._measure import peak_memory
from refattn.beyond import (
    XcitParams,
    aft_attention,
    aft_position_bias,
    cross_covariance_attention,
    dft_matrix,
    fnet_mixing,
    gau_attention,
    init_aft_position_bias,
    init_scale_offset,
    init_spatial_gating,
    kernelized_attention,
    long_short_attention,
    scatterbrain_parts,
    sinkformer_weights,
    skyformer_attention,
    spatial_gating_unit,
    topk_attention,
)
from refattn.linear import draw_omega
from refattn.sparse import draw_lsh_rotations

np.set_printoptions(precision=3, suppress=True, linewidth=110)
rng = np.random.default_rng(20210615)   # every draw below comes from rng or a stated seed


def styled():
    # hand-made plots (curves, bars) use the same style file as refattn.viz
    return mpl.style.context(viz.STYLE_PATH)


n, d = 16, 8
q, k, v = 1.5 * rng.standard_normal((n, d)), rng.standard_normal((n, d)), rng.standard_normal((n, d))
out_soft, A_soft = refattn.scaled_dot_product_attention(q, k, v, return_weights=True)

# %% [markdown]
# ## (a) Every mixing matrix beside softmax
#
# The registry entries on the same q, k, v (n = m = 16, d = 8, drawn parameters from seed 0), each on its own
# colour scale (gMLP's W starts within ±1e-3/n; GAU's drawn scales γ ~ N(0, 0.02²) make relu²(QKᵀ/n) of order
# 1e-8 at initialisation). Each matrix reproduces its
# entry's output: checked here for the entries whose output is M v.

# %%
mixing = {"softmax": A_soft}
for mech in registry.FAMILIES["beyond"]:
    result = mech.apply(q, k, v, rng=0, return_weights=True)
    W = result.weights
    if mech.mixing == "tokens" and mech.id != "gmlp":                # gMLP's matrix feeds its gate on q
        np.testing.assert_allclose(result.output, W @ v, rtol=1e-12, atol=1e-12)
    elif mech.mixing == "per_channel":                               # AFT: one matrix per channel
        np.testing.assert_allclose(result.output, np.einsum("cij,jc->ic", W, v), rtol=1e-12, atol=1e-12)
    mixing[mech.id] = W[0] if mech.mixing in ("per_channel", "fourier") else W   # channel 0; FNet's Re F_n
assert mixing["xcit"].shape == (d, d)

fig = viz.figure((15, 5.6))
titles = {"fnet": "fnet (Re F_n)", "aft": "aft (channel 0)", "xcit": "xcit (d × d channels)"}
for panel, name in zip(fig.subfigures(2, 6).ravel(), mixing, strict=False):
    viz.draw_attention(panel, mixing[name], signed=True, vmin=None, annotate=False, titles=titles.get(name, name),
                       xlabel="", ylabel="")
fig

# %% [markdown]
# > Three kinds of matrix. The softmax hybrids (top-k, Sinkformer, Scatterbrain, Long-Short) keep non-negative
# > rows summing to 1, close to softmax's. The kernel and relu² ones (Skyformer, GAU) have rows of any sum.
# > The mixers (FNet, gMLP) are fixed or learned matrices that do not look at the input at all: FNet's is the
# > same for every sequence of this length, and gMLP's W at initialisation is almost zero (section (d)).

# %% [markdown]
# ## (b) FNet's Fourier mixing
#
# **J. Lee-Thorp, J. Ainslie, I. Eckstein, S. Ontañón, "FNet: Mixing Tokens with Fourier Transforms", NAACL
# 2022, [arXiv:2105.03824](https://arxiv.org/abs/2105.03824), Eq. 3.** The attention sublayer becomes
# y = Re(FFT_seq(FFT_hidden(x))): a 2-D discrete Fourier transform, real part kept. In matrices,
# y = Re(F_n X F_d) with F_n[j, t] = exp(−2πi·jt/n). No parameters, nothing read from the input: the mixing is
# the same for every sequence of length n.

# %%
F = dft_matrix(n)
np.testing.assert_allclose(F @ F.conj().T, n * np.eye(n), rtol=0, atol=1e-12)     # F/√n is unitary
x_seq = rng.standard_normal((n, d))
explicit = np.real(F @ x_seq @ dft_matrix(d))
np.testing.assert_allclose(fnet_mixing(x_seq), explicit, rtol=1e-12, atol=1e-12)   # FFT = the DFT matrices
np.testing.assert_allclose(fnet_mixing(x_seq, method="matrix"), explicit, rtol=1e-12, atol=1e-12)
# Re(F_n X F_d) = Re F_n · X · Re F_d − Im F_n · X · Im F_d: two real token mixings, each with a channel mixing
np.testing.assert_allclose(explicit, F.real @ x_seq @ dft_matrix(d).real - F.imag @ x_seq @ dft_matrix(d).imag,
                           rtol=1e-12, atol=1e-12)
one_hot = np.zeros((n, 1))
one_hot[3] = 1.0
print("a single token at position 3 spreads over every position:", np.round(fnet_mixing(one_hot)[:, 0], 3))

fig = viz.figure((10, 4.4))
viz.draw_attention(fig, np.stack([F.real, F.imag]), signed=True, annotate=False,
                   titles=["Re F_16: cos(2π jt/n)", "Im F_16: −sin(2π jt/n)"], xlabel="token t", ylabel="output j")
fig

# %% [markdown]
# ## (c) AFT: keys and position biases, channel by channel
#
# **S. Zhai, W. Talbott, N. Srivastava, C. Huang, H. Goh, R. Zhang, J. Susskind, "An Attention Free
# Transformer", 2021, [arXiv:2105.14103](https://arxiv.org/abs/2105.14103), §3.** No dot product:
#
# $$Y_t = \sigma(Q_t) \odot \frac{\sum_{t'} \exp(K_{t'} + w_{t,t'}) \odot V_{t'}}{\sum_{t'} \exp(K_{t'} + w_{t,t'})}$$
#
# with learned pairwise position biases w (AFT-full; factorised as u u′ᵀ), kept only within a window s
# (AFT-local; zero, not −∞, outside it), none (AFT-simple), or a convolution filter shared by the channels of a
# head (AFT-conv). Per channel c that is a matrix A^c over (t, t′): as many "heads" as channels.

# %%
params = init_aft_position_bias(rng, n, bias_dim=4, std=1.0)           # a visible w (the default std is 0.01)
biases = np.concatenate([aft_position_bias("full", n, params=params),                   # (1, n, n) each: one "head"
                         aft_position_bias("local", n, params=params, window=3)])
out_full, A_aft = aft_attention(q, k, v, params=params, return_weights=True)
np.testing.assert_allclose(out_full, np.einsum("ctj,jc->tc", A_aft, v), rtol=1e-12, atol=1e-12)  # per channel
sig = 1 / (1 + np.exp(-q))
soft_k = np.exp(k) / np.exp(k).sum(axis=0)                              # softmax over tokens, per channel
np.testing.assert_allclose(aft_attention(q, k, v, kind="simple"), sig * (soft_k * v).sum(axis=0),
                           rtol=1e-12, atol=1e-12)                      # AFT-simple's closed form
np.testing.assert_allclose(aft_attention(q, k, v, params=params, causal=True, method="scan"),
                           aft_attention(q, k, v, params=params, causal=True), rtol=1e-12, atol=1e-12)

fig = viz.figure((14, 3.6))
viz.draw_attention(fig, np.concatenate([biases, A_aft[:3]]), signed=True, vmin=None, annotate=False,
                   titles=["w (AFT-full)", "w (AFT-local, s = 3)", "A^0", "A^1", "A^2"])
fig

# %% [markdown]
# > The causal scan (`method="scan"`, a Numba kernel) keeps running max-shifted sums of e^K ⊙ V and e^K
# > for the keys outside the bias band and adds the band per query: O(n·d) for AFT-simple, O(n·s·d) for
# > AFT-local. It equals the parallel form to 1e-12.

# %% [markdown]
# ## (d) gMLP's spatial gating unit
#
# **H. Liu, Z. Dai, D. R. So, Q. V. Le, "Pay Attention to MLPs", NeurIPS 2021,
# [arXiv:2105.08050](https://arxiv.org/abs/2105.08050), §2.** The channels of Z split in two halves; one gates
# the other after a learned linear map over the tokens: s(Z) = Z₁ ⊙ (W·LayerNorm(Z₂) + b). W starts near zero
# and b at one, so each block starts as (almost) the identity gate s(Z) ≈ Z₁: "near-identity" training start.
# aMLP adds a tiny single-head attention to the gate.
#
# > **The bound.** At initialisation |W_ij| ≤ ε/ℓ (ℓ tokens) and every entry of a layer-normalised row has
# > magnitude at most √(d − 1), so |s(Z) − Z₁| ≤ ε·√(d − 1)·|Z₁| entry by entry.

# %%
sgu = init_spatial_gating(rng, n)
gated = spatial_gating_unit(np.concatenate([q, v], axis=-1), params=sgu)
eps = 1e-3
assert np.abs(sgu.W).max() <= eps / n and np.all(sgu.b == 1.0)
assert np.all(np.abs(gated - q) <= eps * np.sqrt(d - 1) * np.abs(q) + 1e-15)
print(f"largest |s(Z) − Z₁| / |Z₁| at initialisation: {np.max(np.abs(gated - q) / np.abs(q)):.2e}"
      f" (bound ε·√(d − 1) = {eps * np.sqrt(d - 1):.2e})")

# %% [markdown]
# ## (e) Top-k attention: the error against k
#
# **G. Zhao, J. Lin, Z. Zhang, X. Ren, Q. Su, X. Sun, "Explicit Sparse Transformer", 2019,
# [arXiv:1912.11637](https://arxiv.org/abs/1912.11637); A. Gupta, G. Dar, S. Goodman, D. Ciprut, J. Berant,
# "Memory-efficient Transformers via Top-k Attention", 2021, [arXiv:2106.06899](https://arxiv.org/abs/2106.06899).**
# Keep the k largest scores of each row, softmax over them, drop the rest. Gupta et al. compute it in query
# chunks so that no n × m matrix is held (`method="chunk"`). Ties at the k-th score are all kept (the
# default, `ties="threshold"`, the paper's rule) or broken towards the earlier key (`ties="first"`).

# %%
m_long = 64
q64, k64, v64 = 2.0 * rng.standard_normal((m_long, d)), rng.standard_normal((m_long, d)), rng.standard_normal((m_long, d))
exact = refattn.scaled_dot_product_attention(q64, k64, v64)
ks = np.arange(1, m_long + 1)
errors = np.array([np.abs(topk_attention(q64, k64, v64, top_k=t) - exact).max() for t in ks])
np.testing.assert_allclose(topk_attention(q64, k64, v64, top_k=m_long), exact, rtol=1e-12, atol=1e-12)   # k = m
np.testing.assert_allclose(topk_attention(q64, k64, v64, top_k=8, method="chunk", chunk_size=5),
                           topk_attention(q64, k64, v64, top_k=8, method="equation"), rtol=1e-12, atol=1e-12)
tied = np.zeros((1, 4))
print("ties: threshold keeps", topk_attention(tied, np.eye(4), np.eye(4), top_k=2, return_weights=True)[1][0],
      "first keeps", topk_attention(tied, np.eye(4), np.eye(4), top_k=2, ties="first", return_weights=True)[1][0])
with styled():
    fig = viz.figure((7, 3.4))
    ax = fig.subplots()
    ax.semilogy(ks[:-1], viz.roundoff(errors[:-1]), marker="o", markersize=2)
    ax.set(xlabel="k (keys kept per row)", ylabel="max |out − softmax out|", title=f"top-k against softmax, m = {m_long}")
fig

# %% [markdown]
# ## (f) Sinkformer: towards doubly stochastic
#
# **M. E. Sander, P. Ablin, M. Blondel, G. Peyré, "Sinkformers: Transformers with Doubly Stochastic
# Attention", AISTATS 2022, [arXiv:2110.11773](https://arxiv.org/abs/2110.11773).** Sinkhorn's algorithm on
# exp(S): normalise the rows, then the columns, then the rows ... One row step is softmax; the iterations
# converge to the doubly stochastic matrix with the same cross-ratios. The official code runs 3 steps.

# %%
S = q @ k.T / np.sqrt(d)
np.testing.assert_allclose(sinkformer_weights(S, 1), refattn.softmax(S), rtol=1e-12, atol=1e-15)   # T = 1: softmax
steps = np.arange(1, 41)
row_dev = [np.abs(sinkformer_weights(S, t).sum(axis=1) - 1).max() for t in steps]
col_dev = [np.abs(sinkformer_weights(S, t).sum(axis=0) - 1).max() for t in steps]
assert row_dev[-1] < 1e-6 and col_dev[-1] < 1e-6
with styled():
    fig = viz.figure((12, 3.6))
    ax0, ax1 = fig.subplots(1, 2, width_ratios=[1.2, 1])
    ax0.semilogy(steps, viz.roundoff(row_dev), label="rows", marker="o", markersize=2)
    ax0.semilogy(steps, viz.roundoff(col_dev), label="columns", marker="o", markersize=2)   # just normalised: the floor
    viz.shade_roundoff(ax0)
    ax0.set(xlabel="Sinkhorn steps T", ylabel="max |sum − 1|", title="rows and columns after T steps")
    ax0.legend()
    ax1.imshow(sinkformer_weights(S, 40), cmap="YlGnBu")
    ax1.set(title="T = 40: doubly stochastic", xlabel="key j", ylabel="query i")
fig

# %% [markdown]
# ## (g) XCiT: attention across channels
#
# **A. El-Nouby, H. Touvron, M. Caron, P. Bojanowski, M. Douze, A. Joulin, I. Laptev, N. Neverova, G.
# Synnaeve, J. Verbeek, H. Jégou, "XCiT: Cross-Covariance Image Transformers", NeurIPS 2021,
# [arXiv:2106.09681](https://arxiv.org/abs/2106.09681), §3.1.** The queries and keys are L2-normalised along
# the tokens, and the attention is a softmax of the d × d cross-covariance K̂ᵀQ̂ times a learned temperature:
# it mixes channels, and its size does not grow with the number of tokens.

# %%
for tokens in (4, 64, 1024):
    x_tok = rng.standard_normal((3, tokens, d))
    out_x, A_x = cross_covariance_attention(*x_tok, return_weights=True)
    assert A_x.shape == (d, d) and out_x.shape == (tokens, d)
    np.testing.assert_allclose(out_x, x_tok[2] @ A_x.T, rtol=1e-12, atol=1e-12)   # out = V Aᵀ
_, A_sharp = cross_covariance_attention(q, k, v, params=XcitParams(np.array(8.0)), return_weights=True)
fig = viz.figure((8, 3.8))
viz.draw_attention(fig, np.stack([mixing["xcit"], A_sharp]), vmax=1.0, annotate=False,
                   titles=["temperature 1 (initialisation)", "temperature 8"], xlabel="channel", ylabel="channel")
fig

# %% [markdown]
# ## (h) Skyformer: a Gaussian kernel, by Nyström
#
# **Y. Chen, Q. Zeng, H. Ji, Y. Yang, "Skyformer: Remodel Self-Attention with Gaussian Kernel and Nyström
# Method", NeurIPS 2021, [arXiv:2111.00035](https://arxiv.org/abs/2111.00035).** Softmax's exp(q·k/√d) becomes
# the Gaussian kernel κ(q, k) = exp(−‖q − k‖²/(2√d)), which is symmetric and positive definite, so the n + m
# points share one kernel matrix and Nyström approximates it from l landmarks drawn among them. Unlike
# softmax there is no row normalisation.
#
# > The error against exact kernelized attention falls as the landmarks grow; with every point a landmark,
# > no regularisation and the exact pseudoinverse it is exact (tested at 1e-12 where the landmark matrix is
# > well conditioned).

# %%
q32, k32, v32 = rng.standard_normal((3, 32, d))
kernel_exact = kernelized_attention(q32, k32, v32)
landmark_counts = [4, 8, 16, 32, 64]
scale_exact = np.abs(kernel_exact).max()
sky_err = [np.abs(skyformer_attention(q32, k32, v32, num_landmarks=count, rng=1, gamma=0.0, pinv="exact")
                  - kernel_exact).max() / scale_exact for count in landmark_counts]
every_point = skyformer_attention(q32, k32, v32, landmarks=np.arange(64), gamma=0.0, pinv="exact")
print("max error / max |exact| by landmarks drawn (with replacement):", np.array(sky_err))
every_point_error = np.abs(every_point - kernel_exact).max() / scale_exact
print(f"every one of the 64 points a landmark: {viz.roundoff_text(every_point_error)}")
np.testing.assert_allclose(every_point, kernel_exact, rtol=0, atol=1e-12 * scale_exact)   # the exact limit
assert sky_err[-1] < sky_err[0]

# %% [markdown]
# ## (i) Scatterbrain: sparse plus low rank
#
# **B. Chen, T. Dao, E. Winsor, Z. Song, A. Rudra, C. Ré, "Scatterbrain: Unifying Sparse and Low-rank Attention
# Approximation", NeurIPS 2021, [arXiv:2110.15343](https://arxiv.org/abs/2110.15343).** Performer's random
# features estimate every entry of exp(QKᵀ/√d), with an error that grows with the entry. LSH finds the large
# entries. Scatterbrain takes the low-rank estimate everywhere and replaces it by the exact value on the LSH
# support: L + (E − L) on 𝒮, L elsewhere. Unbiased, and exact where the mass is.

# %%
E = np.exp(q @ k.T / np.sqrt(d))


def estimates(parts):
    """Performer alone, the LSH support alone, and Scatterbrain: each row-normalised."""
    lsh_only = np.where(parts.support, E, 0.0)
    return {"Performer alone": parts.low_rank / parts.low_rank.sum(axis=1, keepdims=True),
            "LSH support alone": lsh_only / lsh_only.sum(axis=1, keepdims=True), "Scatterbrain": parts.weights}


draw_rng = np.random.default_rng(2110)
for n_buckets in (2, 4):
    errors = {name: [] for name in ("Performer alone", "LSH support alone", "Scatterbrain")}
    for _ in range(20):                                                  # 20 draws of hash and features
        parts = scatterbrain_parts(q, k, draw_lsh_rotations(draw_rng, d, n_buckets, 2), draw_omega(draw_rng, 16, d))
        np.testing.assert_allclose((parts.low_rank + parts.sparse)[parts.support], E[parts.support], rtol=1e-12)
        for name, W in estimates(parts).items():
            errors[name].append(np.linalg.norm(W - A_soft) / np.linalg.norm(A_soft))
    means = {name: np.mean(values) for name, values in errors.items()}
    assert means["Scatterbrain"] < means["Performer alone"]
    print(f"{n_buckets} buckets, mean ‖W − A‖/‖A‖ over 20 draws: "
          + ", ".join(f"{name} {value:.3f}" for name, value in means.items()))
one_bucket = scatterbrain_parts(q, k, draw_lsh_rotations(draw_rng, d, 1, 2), draw_omega(draw_rng, 16, d))
assert one_bucket.support.all()                                         # one bucket: every pair
np.testing.assert_allclose(one_bucket.weights, A_soft, rtol=1e-12, atol=1e-12)
shown = estimates(parts)
fig = viz.figure((13, 3.6))
viz.draw_attention(fig, np.stack([parts.support.astype(float), shown["Performer alone"], parts.weights, A_soft]),
                   signed=True,
                   vmin=None, annotate=False, titles=["LSH support S", "Performer alone", "Scatterbrain", "softmax"])
fig

# %% [markdown]
# ## (j) Long-Short Transformer
#
# **C. Zhu, W. Ping, C. Xiao, M. Shoeybi, T. Goldstein, A. Anandkumar, B. Catanzaro, "Long-Short Transformer:
# Efficient Transformers for Language and Vision", NeurIPS 2021,
# [arXiv:2107.02192](https://arxiv.org/abs/2107.02192).** Each query attends, in one softmax, to a short-term
# window of keys and to r keys projected from the whole sequence by P = softmax(K W^P) (the dynamic
# projection). DualLN normalises the two branches separately. With a window covering every key, no projection
# and no layer norm it is softmax attention.

# %%
out_ls, A_ls = long_short_attention(q, k, v, window=2, rank=3, rng=rng, dual_ln="keys", return_weights=True)
np.testing.assert_allclose(out_ls, A_ls @ v, rtol=1e-12, atol=1e-12)
np.testing.assert_allclose(A_ls.sum(axis=1), 1.0, rtol=1e-12)
np.testing.assert_allclose(long_short_attention(q, k, v, window=n, rank=0, rng=0, dual_ln="none"), out_soft,
                           rtol=1e-12, atol=1e-12)
_, A_ls_causal = long_short_attention(q, k, v, window=2, rank=3, segment=4, rng=rng, dual_ln="keys", causal=True,
                                      return_weights=True)
assert np.all(np.triu(A_ls_causal, 1) == 0)                             # no weight on a later token
fig = viz.figure((10, 4.2))
viz.draw_attention(fig, np.stack([A_ls, A_ls_causal]), vmax=1.0, annotate=False,
                   titles=["window 2 + rank 3", "causal: window + earlier segments"])
fig

# %% [markdown]
# ## (k) GAU and FLASH
#
# **W. Hua, Z. Dai, H. Liu, Q. V. Le, "Transformer Quality in Linear Time", ICML 2022,
# [arXiv:2202.10447](https://arxiv.org/abs/2202.10447).** One head, q and k from a single shared Z through a
# per-dimension scale and offset, relu² in place of the softmax: A = relu²(QKᵀ/n). The gated attention unit
# multiplies A V by a gate U. FLASH splits the sequence into chunks: relu² attention inside each chunk, linear
# attention across chunks, which costs O(n).

# %%
z = rng.standard_normal((n, d))
so_gau, so_flash = init_scale_offset(rng, d), init_scale_offset(rng, d, count=4)   # (Q, K); (Q, K, Q', K')
out_gau, A_gau = gau_attention(z, z, v, params=so_gau, return_weights=True)
_, A_flash = gau_attention(z, z, v, params=so_flash, chunk=4, return_weights=True)
_, A_flash_causal = gau_attention(z, z, v, params=so_flash, chunk=4, causal=True, return_weights=True)
assert np.all(A_gau >= 0)
assert np.all(np.triu(A_flash_causal, 1) == 0)
fig = viz.figure((13, 3.6))
viz.draw_attention(fig, np.stack([A_gau, A_flash, A_flash_causal]), signed=True, vmin=None, annotate=False,
                   titles=["GAU: relu²(QKᵀ/n)", "FLASH, chunks of 4", "FLASH, causal"])
fig

# %% [markdown]
# ## (l) The cost against n
#
# Peak memory of each registry entry's call (NumPy's allocations, tracemalloc: deterministic, unlike time) at
# n = 256 … 2048, d = 64, with Numba on one thread: a parallel kernel's scratch is allocated per running task, so
# with more threads the peak would grow with the machine's cores and vary with how the tasks overlap. Each entry
# runs with the option it offers for long inputs, where it has one: softmax's
# blocked online kernel, AFT-simple's causal scan, top-k's query chunks of 64, Long-Short's sparse path with a window of 16 and rank 8, FLASH's chunks of
# 64, and Scatterbrain with one bucket per 32 tokens (so that its support grows like n). The defaults of the
# others are their only form. `python -m refattn bench beyond` measures the time as n doubles, beside softmax
# attention run in the same process.

# %%
sizes = [256, 512, 1024, 2048]
LONG_INPUT = {
    "aft": lambda size: {"kind": "simple", "causal": True, "method": "scan"},
    "sdpa": lambda size: {"method": "blocked"},
    "topk": lambda size: {"method": "chunk", "chunk_size": 64},
    "long_short": lambda size: {"method": "csr", "window": 16, "rank": 8},
    "gau": lambda size: {"chunk": 64},
    "scatterbrain": lambda size: {"num_buckets": size // 32, "method": "pairs"},
}
cost_rng = np.random.default_rng(0)
peaks = {}
numba.set_num_threads(1)                                          # one task, one scratch at a time, on any machine
for name in ["sdpa", *[mech.id for mech in registry.FAMILIES["beyond"]]]:
    mech = registry.get(name)
    options = LONG_INPUT.get(name, lambda size: {})
    mech.apply(*cost_rng.standard_normal((3, 64, 64)), rng=0, **options(64))   # compile or load any kernel first
    peaks[name] = []
    for size in sizes:
        qc, kc, vc = cost_rng.standard_normal((3, size, 64))
        _, peak = peak_memory(partial(mech.apply, qc, kc, vc, rng=0, **options(size)))
        peaks[name].append(round(peak / 2**20, 1))   # MiB to 0.1: Python's own allocations jitter by ~100 bytes
numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
growth = {name: values[-1] / values[-2] for name, values in peaks.items()}
print("peak MiB at n = 2048, and its growth from n = 1024:")
for name, values in peaks.items():
    print(f"  {name:<13}{values[-1]:>8.1f}  ×{growth[name]:.2f}")
quadratic = {"gmlp", "sinkformer"}                                       # an n × m matrix is their definition
assert all(growth[name] > 3.5 for name in quadratic)
assert all(growth[name] < 2.5 for name in growth if name not in quadratic)
with styled():
    fig = viz.figure((8, 4.6))
    ax = fig.subplots()
    for index, (name, values) in enumerate(peaks.items()):
        ax.loglog(sizes, values, marker="o", markersize=3, label=name, linewidth=2.5 if name == "sdpa" else 1,
                  linestyle="-" if index < 6 else "--")
    ax.set(xlabel="n", ylabel="peak MiB", title="peak memory of one call (d = 64)")
    ax.legend(fontsize=7, ncol=2)
fig

# %% [markdown]
# > Only gMLP and Sinkformer need the n × m matrix whatever their options: gMLP's W is n × n by definition,
# > and Sinkformer's column steps need every row at once. Softmax attention itself streams (the blocked
# > online softmax of notebook 04): its memory is linear, and only its time is quadratic.

# %% [markdown]
# ## (m) Exercises
#
# 1. **FNet's inverse.** FNet keeps only the real part. Can the input be recovered from the output? Try
#    n = 4, d = 1 with `fnet_mixing` and `dft_matrix`.
#    <details><summary>Hint</summary>For real x, Re(F x) = (F + F̄)x / 2 is the cosine transform, which is
#    singular for n = 4 (the sine part is lost): rows j and n − j are equal, so different inputs give the
#    same output.</details>
#
# 2. **Top-k and ties.** With all scores equal, how many keys does `ties="threshold"` keep for k = 2, and
#    which weights do they get?
#    <details><summary>Hint</summary>All of them: every score equals the k-th largest. The weights are uniform,
#    exactly softmax. `ties="first"` keeps keys 0 and 1 with weight ½ each.</details>
#
# 3. **Sinkformer and n ≠ m.** What can the column sums of a doubly stochastic n × m matrix with rows summing to
#    1 be?
#    <details><summary>Hint</summary>The total is n, so the m columns sum to n/m each on average; Sinkformer
#    scales them to n/m. The docstring explains why the official code's choice would make one step differ from
#    softmax.</details>
