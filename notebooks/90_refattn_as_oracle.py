# %% [markdown]
# # refattn as an oracle: checking another attention implementation
#
# **T. Dao, D. Y. Fu, S. Ermon, A. Rudra, C. Ré, "FlashAttention: Fast and Memory-Efficient Exact
# Attention with IO-Awareness", NeurIPS 2022, [arXiv:2205.14135](https://arxiv.org/abs/2205.14135)
# (v2), §3.1, Alg. 1 and Appendix B**; T. Dao, "FlashAttention-2: Faster Attention with Better
# Parallelism and Work Partitioning", ICLR 2024, [arXiv:2307.08691](https://arxiv.org/abs/2307.08691)
# (v1); M. Milakov, N. Gimelshein, "Online normalizer calculation for softmax",
# [arXiv:1805.02867](https://arxiv.org/abs/1805.02867) (v2), Alg. 3; and the test suite of
# `Dao-AILab/flash-attention` (`tests/test_flash_attn.py`).
#
# $$
# O = \operatorname{softmax}\!\big(Q K^\top s + B\big)\, V, \qquad s = 1/\sqrt{d_k}
# $$
#
# $$
# \max|c - o| \;\le\; 2 \max|b - o| + \text{floor} \quad (\text{output}), \qquad
# \max|c - o| \;\le\; 3 \max|b - o| + \text{floor} \quad (dQ,\ dK,\ dV)
# $$
#
# with $c$ the implementation under test (the *candidate*), $o$ a high-precision reference and $b$ a
# plain implementation run in the candidate's dtype (the *baseline*).
#
# The plain text paraphrases the papers, with their section numbers; the only quotations are lines of
# FlashAttention's test code. Commentary is set apart as block quotes. Every claim about a report is
# an `assert` on the report's fields or text.
#
# **Contents.** (a) what the oracle is for, and its three rules · (b) a correct float32 candidate
# passes · (c) six typical bugs, each named by the report · (d) gradients · (e) the
# extended-precision tier · (f) log-sum-exp and merging · (g) fixtures for other languages ·
# (h) exercises

# %%
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

import refattn
from refattn import viz
from refattn.oracle import CASES, TABLES, check, check_file, export_case, merge_attention, sdpa_vjp
from refattn.oracle.extended import mp_sdpa

np.set_printoptions(precision=3, suppress=True, linewidth=110)
rng = np.random.default_rng(20220527)   # arXiv:2205.14135v1 date; every draw below comes from rng

sdpa = refattn.scaled_dot_product_attention
KEEP = ("refattn oracle check", "out ", "dq ", "dk ", "dv ", "  threshold", "  max abs", "  non-finite  cand",
        "  shape mismatch", "fully masked", "matches if", "no alternative", "partly")


def excerpt(report):
    # the lines of a report read in this notebook: verdict, each array's bound and largest error, the named fixes
    print("\n".join(line for line in str(report).splitlines() if line.startswith(KEEP)))


# %% [markdown]
# ## (a) What the oracle is for
#
# > refattn is written for three kinds of people: learners, who read the notebooks beside the papers;
# > visual explorers, who step through attention matrices; and **implementers** of attention in
# > PyTorch, JAX, CUDA or Rust. This notebook is for the third kind. An implementer has a fast
# > attention (a fused kernel, a blocked online softmax, a port to another language) and wants to
# > know whether it computes attention. Three things are needed for that, and refattn provides each:
# >
# > 1. **ground truth** for the same inputs: refattn's equations in float64, certified against a
# >    50-digit evaluation (section (e));
# > 2. **explicit conventions**: mask polarity, causal alignment when $n \ne m$, the scale, the
# >    axis layout, what a query that sees no key returns. Most disagreements between two attention
# >    codes are a convention, not arithmetic. When a check fails, the report tries the usual mix-ups
# >    one at a time and names the one that would make it pass (section (c));
# > 3. **a tolerance that means something**: neither a hand-picked `atol=1e-3` that hides bugs in
# >    float32 nor `1e-6` that fails every honest float16 kernel.
#
# ### FlashAttention's ratio rule
#
# FlashAttention's tests do not fix a tolerance. They compute the same attention three ways: the
# kernel under test; a simple PyTorch reference with the inputs upcast to float32 (`out_ref`); and
# that same PyTorch reference run in the kernel's low-precision dtype, with its operations reordered
# (`out_pt`). The kernel passes if its error against `out_ref` is at most a small multiple of
# `out_pt`'s error. In `tests/test_flash_attn.py` (FlashAttention 2) the assertions read:
#
# ```python
# # Check that FlashAttention's numerical error is at most twice the numerical error
# # of a Pytorch implementation.
# assert (out - out_ref).abs().max().item() <= 2 * (out_pt - out_ref).abs().max().item()
# ...
# assert (dq - dq_ref).abs().max().item() <= 3 * (dq_pt - dq_ref).abs().max().item()
# ```
#
# (earlier versions of the file used 2 for the gradients too).
#
# > The rule adapts itself to everything that makes attention hard to compute: the dtype, the
# > sequence length, the size of the logits, the mask. A long sequence with large logits loses more
# > accuracy in float16 for *any* implementation, and the baseline loses it too, so the threshold
# > grows with it. A kernel that is much worse than the plain code, a float16 accumulator for
# > example, fails whatever the problem.
# >
# > refattn's version (`rule="ratio"`, the default of `refattn.oracle.check`):
# >
# > - $o$ is refattn's float64 result (for gradients, `refattn.oracle.sdpa_vjp`), so the reference
# >   is far more accurate than the candidate in every case that matters;
# > - $b$ is refattn's own equation path run in the candidate's dtype,
# >   `scaled_dot_product_attention(..., dtype=np.float32)` for the output, the equations of
# >   `sdpa_vjp` with every intermediate in that dtype for the gradients;
# > - factor 2 for the output, 3 for `dq`, `dk`, `dv`;
# > - plus a **floor**, $c\,\varepsilon \max\kappa$: $\varepsilon$ the dtype's machine epsilon,
# >   $\kappa$ the first-order effect of rounding every score term, weight and product once. Twice
# >   a baseline error can be accidentally tiny (a short row, a lucky rounding), and an honest
# >   kernel that rounds in another order would then fail. The FlashAttention 3 tests
# >   (`hopper/test_flash_attn.py`) add a floor of the same kind, the noise of one arithmetic
# >   operation. For a float64 candidate the baseline is the oracle itself, so the floor is the
# >   whole threshold.
#
# The baseline is an ordinary refattn call: the report's baseline error is exactly what we get by
# hand.

# %%
q = rng.standard_normal((2, 4, 32, 16))                          # (b, h, n, d_k)
k = rng.standard_normal((2, 4, 48, 16))                          # (b, h, m, d_k)
v = rng.standard_normal((2, 4, 48, 16))                          # (b, h, m, d_v)

o = sdpa(q, k, v)                                                # float64 oracle
b = sdpa(q, k, v, dtype=np.float32)                              # the same equations, in float32
baseline_error = float(np.max(np.abs(b - o)))

report = check(b, q, k, v)                                       # the baseline itself, as a candidate
assert report.passed and report["out"].baseline_error == baseline_error
print(f"baseline: max|b - o| = {baseline_error:.3g} (float32 eps = {np.finfo(np.float32).eps:.3g})")
print(report["out"].threshold)

# %% [markdown]
# ### The other two rules
#
# > - `rule="table"`: $|c - o| \le \text{atol} + \text{rtol}\,|o|$ element by element, with a named
# >   table copied from its source: `"torch-default"` (the defaults of `torch.testing.assert_close`),
# >   `"xformers"` (the per-dtype `ERROR_ATOL` / `ERROR_RTOL` of xFormers' attention operators, forward
# >   and backward) and `"jax"` (the default tolerances of JAX's test utilities, and its gradient
# >   tolerances). Use it to reproduce the check another project's CI makes.
# > - `rule="ulp"`: $|c - o| \le N$ ulps of the candidate's dtype at the array's largest $|o|$,
# >   $N$ = `max_ulps` (default 64). Simple to state, but blind to conditioning: a correct float32
# >   implementation needs hundreds of ulps once the logits are in the hundreds, which the ratio
# >   rule's baseline and floor account for and a fixed ulp count does not.

# %%
print(f"{'table':14} {'dtype':8} {'output (rtol, atol)':>22} {'gradients (rtol, atol)':>24}")
for name, table in TABLES.items():
    for dtype in ("float16", "float32", "float64"):
        fwd, bwd = table.forward.get(dtype, "-"), table.backward.get(dtype, "-")
        print(f"{name:14} {dtype:8} {fwd!s:>22} {bwd!s:>24}")


# %% [markdown]
# **Takeaways.**
#
# - The default rule needs no hand-picked tolerance: a float64 oracle, a baseline that runs the same
#   equations in the candidate's dtype, and a bound of twice the baseline's error (three times for
#   gradients) plus a rounding-noise floor. The bound follows the dtype, the sizes and the logits.
# - The table and ulp rules reproduce the fixed tolerances of other projects' tests (PyTorch, xFormers,
#   JAX) when a check must match theirs.

# %% [markdown]
# ## (b) A correct float32 candidate passes under every rule
#
# > The candidate is written here, in a few NumPy lines, the way a port to another framework would
# > be: float32 throughout, the scale folded into the scores, the softmax normalised *after* the
# > product with $V$ (as fused kernels do). It is not a refattn mechanism; that is the point. It is
# > checked, not trusted.

# %%
def candidate(q, k, v):
    # the implementation under test: float32, max-shifted exponentials, normalised after P V
    q, k, v = (np.asarray(x, np.float32) for x in (q, k, v))
    S = (q @ np.swapaxes(k, -1, -2)) * np.float32(1 / np.sqrt(q.shape[-1]))   # (..., n, m)  QKᵀ/√d_k
    P = np.exp(S - S.max(axis=-1, keepdims=True))                               # (..., n, m)  e^(S − max)
    return (P @ v) / P.sum(axis=-1, keepdims=True)                              # (..., n, d_v)


out = candidate(q, k, v)
report = check(out, q, k, v)
print(report)
assert report.passed and out.dtype == np.float32

# %% [markdown]
# > Reading the report: the candidate's largest error is about the baseline's, well inside
# > $2\times$ baseline + floor. The largest *relative* error, thousands of float32 ulps, sits on an
# > output element close to 0 where the weighted sum of the values cancels: relative error there says
# > nothing about the implementation, which is why the rules bound absolute error at the array's
# > scale. The same candidate under the other rules:

# %%
rules = [("ratio", {}), ("table", {"table": "torch-default"}), ("table", {"table": "xformers"}),
         ("table", {"table": "jax"}), ("ulp", {})]
for rule, options in rules:
    report = check(out, q, k, v, rule=rule, **options)
    assert report.passed
    print(f"{rule:5} {options.get('table', ''):13} pass   {report['out'].threshold}")


# %% [markdown]
# **Takeaways.**
#
# - A correct float32 implementation that orders its operations differently passes under every rule,
#   with an error about the size of the baseline's.
# - Relative error says little at outputs close to 0, where sums cancel; the rules bound absolute error
#   at the array's scale.

# %% [markdown]
# ## (c) Six typical bugs, each named by the report
#
# > Each bug below is a small hand-written candidate, a variant of the one above with one mistake
# > that real ports make. Each one fails, and the report says which convention the candidate
# > actually implements: the `matches if ...` lines. The checks are asserts on the report's text,
# > so the notebook fails if the diagnosis ever changes.
#
# ### 1. Causal alignment when $n \ne m$: decoding with a key/value cache
#
# Decoding with a cache feeds the newest tokens as queries against every cached key. FlashAttention
# (from version 2.1) aligns the causal mask to the bottom-right corner in that case, so the last
# query sees the last key (query $i$ sees keys $j \le i + m - n$); a mask written as `np.tril` is
# aligned top-left ($j \le i$), which is right only when $n = m$.

# %%
def candidate_tril(q, k, v):
    # bug: the causal mask as np.tril, i.e. top-left aligned
    q, k, v = (np.asarray(x, np.float32) for x in (q, k, v))
    n, m = q.shape[-2], k.shape[-2]
    S = (q @ np.swapaxes(k, -1, -2)) * np.float32(1 / np.sqrt(q.shape[-1]))
    S = np.where(np.tril(np.ones((n, m), bool)), S, -np.inf)                   # j <= i
    P = np.exp(S - S.max(axis=-1, keepdims=True))
    return (P @ v) / P.sum(axis=-1, keepdims=True)


# 3 new tokens (positions 7, 8, 9) over a cache of 7 keys plus their own 3: n = 3, m = 10
q_new = rng.standard_normal((2, 4, 3, 16))
k_all, v_all = rng.standard_normal((2, 2, 4, 10, 16))
report = check(candidate_tril(q_new, k_all, v_all), q_new, k_all, v_all, causal="bottom-right")
print(report)
assert not report.passed
assert 'matches if causal="top-left"' in str(report)


# %% [markdown]
# > Every element fails and the report names the fix. Since the candidate does exactly what
# > `np.tril` says, the fix is `np.tril(..., k=m - n)`: with the diagonal shifted it passes.

# %%
def candidate_tril_shifted(q, k, v):
    q, k, v = (np.asarray(x, np.float32) for x in (q, k, v))
    n, m = q.shape[-2], k.shape[-2]
    S = (q @ np.swapaxes(k, -1, -2)) * np.float32(1 / np.sqrt(q.shape[-1]))
    S = np.where(np.tril(np.ones((n, m), bool), k=m - n), S, -np.inf)          # j <= i + m − n
    P = np.exp(S - S.max(axis=-1, keepdims=True))
    return (P @ v) / P.sum(axis=-1, keepdims=True)


report = check(candidate_tril_shifted(q_new, k_all, v_all), q_new, k_all, v_all, causal="bottom-right")
assert report.passed
excerpt(report)
named = {"np.tril causal mask": check(candidate_tril(q_new, k_all, v_all), q_new, k_all, v_all,
                                      causal="bottom-right")}


# %% [markdown]
# ### 2. Inverted mask polarity
#
# refattn's boolean masks mean **True = may attend**, as `torch.nn.functional.scaled_dot_product_attention`
# and flax do. `torch.nn.MultiheadAttention` documents the opposite for its boolean `attn_mask` and
# `key_padding_mask`: there True marks a position that may *not* be attended to. A port that keeps
# one convention while its caller uses the other attends to exactly the wrong keys.

# %%
def candidate_blocked_mask(q, k, v, mask):
    # bug: reads the mask as nn.MultiheadAttention does (True = blocked)
    q, k, v = (np.asarray(x, np.float32) for x in (q, k, v))
    S = (q @ np.swapaxes(k, -1, -2)) * np.float32(1 / np.sqrt(q.shape[-1]))
    S = np.where(mask, -np.inf, S)
    P = np.exp(S - S.max(axis=-1, keepdims=True))
    return (P @ v) / P.sum(axis=-1, keepdims=True)


q, k, v = rng.standard_normal((3, 2, 4, 12, 16))
mask = rng.random((2, 1, 12, 12)) < 0.6                          # True = may attend (refattn)
mask[..., 0], mask[..., -1] = True, False                        # every row keeps a key and blocks one
report = check(candidate_blocked_mask(q, k, v, mask), q, k, v, mask=mask)
excerpt(report)
assert not report.passed
assert "matches if the boolean mask is inverted (True = masked out, as torch.nn.MultiheadAttention)" in str(report)
named["mask read as True = blocked"] = report


# %% [markdown]
# ### 3. The missing $1/\sqrt{d_k}$
#
# Vaswani et al. (§3.2.1) divide the dot products by $\sqrt{d_k}$, because large dot products would
# push the softmax into regions where its gradients are tiny. A kernel that takes the scale as an argument and is called without it, or a port that
# forgets it, computes a sharper softmax.

# %%
def candidate_unscaled(q, k, v):
    # bug: no 1/√d_k
    q, k, v = (np.asarray(x, np.float32) for x in (q, k, v))
    S = q @ np.swapaxes(k, -1, -2)
    P = np.exp(S - S.max(axis=-1, keepdims=True))
    return (P @ v) / P.sum(axis=-1, keepdims=True)


report = check(candidate_unscaled(q, k, v), q, k, v)
excerpt(report)
assert not report.passed
assert "matches if scale=1 (no scaling) instead of 0.25" in str(report)
named["no 1/√d_k"] = report


# %% [markdown]
# ### 4. Accumulating in float16
#
# FlashAttention keeps a running maximum, a running sum of exponentials and a running weighted sum
# of values per query while it walks over blocks of keys, rescaling the sums when the maximum grows
# (§3.1, Alg. 1; the online softmax of Milakov and Gimelshein, Alg. 3). Its inputs may be float16,
# but the running sums are kept in float32. The candidate below is that loop, one key at a time,
# float16 in and float16 out. The first version accumulates in float32; the second accumulates the
# sum of exponentials and the weighted sum of values in float16.
#
# > Nothing here is a convention, so no `matches if` line can name it. What the ratio rule catches
# > is that the error is several times what a plain float16 implementation makes, and it grows with
# > the number of keys: each addition to a float16 sum rounds at a relative $2^{-11}$, $m$ times.
# > The sequence is long ($m = 1024$) because the difference takes a few hundred keys to build up.

# %%
def candidate_online(q, k, v, acc=np.float32):
    # an online softmax over keys, one key at a time; float16 inputs and output, running sums in `acc`
    q, k, v = (np.asarray(x, np.float16) for x in (q, k, v))
    S = (q @ np.swapaxes(k, -1, -2)) * np.float16(1 / np.sqrt(q.shape[-1]))   # (..., n, m) float16
    row_max = np.full(S.shape[:-1] + (1,), -np.inf, acc)                      # running max
    l = np.zeros(S.shape[:-1] + (1,), acc)                                    # running Σ e^(s − max)
    o = np.zeros(S.shape[:-1] + (v.shape[-1],), acc)                          # running Σ e^(s − max) v
    for j in range(S.shape[-1]):
        new_max = np.maximum(row_max, S[..., j:j + 1])
        rescale, p = np.exp(row_max - new_max).astype(acc), np.exp(S[..., j:j + 1] - new_max).astype(acc)
        l = rescale * l + p
        o = rescale * o + p * v[..., j:j + 1, :]                          # (..., n, 1) · (..., 1, d_v)
        row_max = new_max
    return (o / l).astype(np.float16)


q_long = rng.standard_normal((1, 2, 8, 32))
k_long, v_long = rng.standard_normal((2, 1, 2, 1024, 32))
for acc in (np.float32, np.float16):
    report = check(candidate_online(q_long, k_long, v_long, acc), q_long, k_long, v_long)
    print(f"--- running sums in {np.dtype(acc).name}")
    excerpt(report)
    assert report.passed == (acc == np.float32)
assert "no alternative convention matches" in str(report)
named["float16 running sums"] = report

# %% [markdown]
# > With float32 running sums the float16 candidate passes, with an error about the baseline's (the
# > baseline is refattn run in float16, whose matrix products NumPy accumulates in float32, as
# > FlashAttention does). With float16 running sums it fails by a clear factor: the report gives the
# > bound, the largest error and where it is, and tries the usual conventions without finding one
# > that fits.
#
# ### 5. The transposed layout: (b, n, h, d) versus (b, h, n, d)
#
# PyTorch's `scaled_dot_product_attention` takes `(batch, heads, seq, dim)`; FlashAttention's
# `flash_attn_func` and xFormers take `(batch, seq, heads, dim)`. A kernel written for one and
# handed the other attends along the head axis instead of the sequence. The check takes
# `layout="bnhd"` for FlashAttention-style arrays and tries both ways of getting it wrong: reading
# the inputs in the other layout, and returning the output in the other layout.

# %%
q_bnhd, k_bnhd, v_bnhd = (np.swapaxes(x, 1, 2) for x in (q, k, v))   # (b, n, h, d), as FlashAttention
print("q in layout bnhd:", q_bnhd.shape)

# bug 5a: FlashAttention-layout arrays fed to a candidate written for (b, h, n, d)
report = check(candidate(q_bnhd, k_bnhd, v_bnhd), q_bnhd, k_bnhd, v_bnhd, layout="bnhd")
excerpt(report)
assert not report.passed
assert "matches if the candidate reads the inputs in layout 'bhnd'" in str(report)
named["inputs read as (b, h, n, d)"] = report

# bug 5b: attention computed right, but the output handed back as (b, h, n, d)
out = candidate(*(np.swapaxes(x, 1, 2) for x in (q_bnhd, k_bnhd, v_bnhd)))
report = check(out, q_bnhd, k_bnhd, v_bnhd, layout="bnhd")
excerpt(report)
assert not report.passed
assert "matches if the candidate's outputs are in layout 'bhnd'" in str(report)
named["output left as (b, h, n, d)"] = report


# %% [markdown]
# > In 5b the candidate's output has the wrong *shape*, (2, 4, 12, 16) where (2, 12, 4, 16) is
# > expected; the report says so instead of raising, then finds that the swapped axes fit.
#
# ### 6. A query that sees no key: NaN or zero?
#
# When every key of a query is masked (an empty sequence in a ragged batch, or bottom-right causal
# alignment with $n > m$), the softmax is $0/0$. FlashAttention and PyTorch 2.5's SDPA return 0 for
# that query; a textbook softmax over $-\infty$ scores returns NaN; filling masked scores with
# $-10^9$ instead gives the uniform average of the values. refattn makes this a choice,
# `fully_masked="zero"` (default), `"nan"` or `"uniform"`, and the check tells which one a candidate
# follows.

# %%
def candidate_textbook(q, k, v, mask):
    # a textbook masked softmax: -inf scores, e^(s − max) / Σ; a row with no key gives 0/0 = NaN
    q, k, v = (np.asarray(x, np.float32) for x in (q, k, v))
    S = (q @ np.swapaxes(k, -1, -2)) * np.float32(1 / np.sqrt(q.shape[-1]))
    S = np.where(mask, S, -np.inf)
    with np.errstate(invalid="ignore"):                            # −inf − (−inf) in the empty rows
        P = np.exp(S - S.max(axis=-1, keepdims=True))
        return (P @ v) / P.sum(axis=-1, keepdims=True)


lengths = np.array([12, 0])                                       # the second sequence is empty
padding = refattn.padding_mask(lengths, 12)[:, None]              # (b, 1, 1, m)
report = check(candidate_textbook(q, k, v, padding), q, k, v, mask=padding)
excerpt(report)
assert not report.passed
assert 'matches if fully_masked="nan" instead of "zero"' in str(report)
assert report.fully_masked.candidate_follows == ("nan",)
named["NaN for a query with no key"] = report

# if NaN is the documented behaviour of the code under test, say so and the check passes
assert check(candidate_textbook(q, k, v, padding), q, k, v, mask=padding, fully_masked="nan").passed

# %% [markdown]
# > The six diagnoses together. Each line is read off `report.alternatives`, the structured form of
# > the `matches if` lines.

# %%
for bug, report in named.items():
    assert not report.passed
    print(f"{bug:30} -> {report.alternatives[0] if report.alternatives else 'no convention: arithmetic'}")


# %% [markdown]
# **Takeaways.**
#
# - Every bug fails the check, and each convention mix-up (causal alignment, mask polarity, the missing
#   scale, input or output layout, the fully-masked policy) is named in a `matches if` line.
# - Float16 running sums fail with no convention named: the error is arithmetic, and the report lists
#   the conventions it tried.

# %% [markdown]
# ## (d) Gradients
#
# FlashAttention does not store the $n \times m$ weights for the backward pass; it recomputes them
# block by block from $Q$, $K$ and the saved softmax statistics (§3.1, Appendix B; FlashAttention-2
# saves the log-sum-exp). The equations it
# evaluates are those of ordinary backpropagation through $O = AV$, $A = \operatorname{softmax}(S)$:
#
# $$
# dV = A^\top dO, \qquad dA = dO\, V^\top, \qquad
# dS_{ij} = A_{ij}\Big(dA_{ij} - \sum_l A_{il}\, dA_{il}\Big), \qquad
# dQ = s\, dS\, K, \qquad dK = s\, dS^\top Q .
# $$
#
# > The row sum is the softmax Jacobian's second term: $\partial a_j / \partial s_l = a_j(\delta_{jl}
# > - a_l)$. FlashAttention computes it as $D_i = \sum_e dO_{ie} O_{ie}$, the same number, because
# > $\sum_l A_{il}\, dA_{il} = \sum_l A_{il} \sum_e dO_{ie} V_{le} = \sum_e dO_{ie} O_{ie}$.
# >
# > Pass the upstream gradient `d_out` and the candidate's `dq`, `dk`, `dv` to `check`; they are
# > compared with `refattn.oracle.sdpa_vjp` under the factor 3.

# %%
def candidate_with_grads(q, k, v, d_out, rowsum=True):
    # forward and hand-written backward pass, float32; rowsum=False drops the softmax Jacobian's aaᵀ term
    q, k, v, d_out = (np.asarray(x, np.float32) for x in (q, k, v, d_out))
    s = np.float32(1 / np.sqrt(q.shape[-1]))
    S = (q @ np.swapaxes(k, -1, -2)) * s                          # (..., n, m)
    P = np.exp(S - S.max(axis=-1, keepdims=True))
    A = P / P.sum(axis=-1, keepdims=True)                         # (..., n, m)  softmax
    O = A @ v                                                     # (..., n, d_v)
    dV = np.swapaxes(A, -1, -2) @ d_out                           # (..., m, d_v)  Aᵀ dO
    dA = d_out @ np.swapaxes(v, -1, -2)                           # (..., n, m)    dO Vᵀ
    D = np.sum(dA * A, axis=-1, keepdims=True) if rowsum else 0   # (..., n, 1)    Σ_l A_il dA_il
    dS = A * (dA - D)                                             # (..., n, m)
    dQ = s * (dS @ k)                                             # (..., n, d_k)
    dK = s * (np.swapaxes(dS, -1, -2) @ q)                        # (..., m, d_k)
    return O, dQ, dK, dV


q, k, v = rng.standard_normal((3, 2, 3, 10, 16))
d_out = rng.standard_normal((2, 3, 10, 16))
out_c, dq_c, dk_c, dv_c = candidate_with_grads(q, k, v, d_out)
report = check(out_c, q, k, v, d_out=d_out, dq=dq_c, dk=dk_c, dv=dv_c)
print(report)
assert report.passed

# FlashAttention's D_i equals the row sum of dA ⊙ A (float64, the oracle's weights)
o64, A64 = sdpa(q, k, v, return_weights=True)
np.testing.assert_allclose(np.sum((d_out @ np.swapaxes(v, -1, -2)) * A64, axis=-1),
                           np.sum(d_out * o64, axis=-1), rtol=1e-12, atol=1e-12)

# %%
out_c, dq_c, dk_c, dv_c = candidate_with_grads(q, k, v, d_out, rowsum=False)
report = check(out_c, q, k, v, d_out=d_out, dq=dq_c, dk=dk_c, dv=dv_c)
excerpt(report)
assert not report.passed
assert report["out"].passed and report["dv"].passed                  # untouched by the softmax Jacobian
assert not report["dq"].passed and not report["dk"].passed
assert report["dq"].threshold.startswith("max|c − o| ≤ 3 × ")         # the gradient factor
grads = sdpa_vjp(q, k, v, d_out)                                     # what dq, dk, dv are compared with
print("dq error / |dq| of the oracle:", f"{np.max(np.abs(dq_c - grads.dq)) / np.max(np.abs(grads.dq)):.2f}")

# %% [markdown]
# > The forward output and `dv` pass (they never go through the softmax's Jacobian), and `dq`, `dk`
# > fail by an error comparable to the gradients themselves. A gradient check that compared only the
# > loss, or only `dv`, would have missed it. No convention explains it, so the report lists what it
# > tried.

# %% [markdown]
# **Takeaways.**
#
# - Gradients are compared with `refattn.oracle.sdpa_vjp` under the factor 3. A backward pass without the
#   row-sum term of the softmax's Jacobian passes on the output and `dv` and fails on `dq` and `dk`.
# - A check of the output alone, or of `dv` alone, would have missed that bug.

# %% [markdown]
# ## (e) The extended-precision tier: who checks the oracle?
#
# A float64 oracle is only as good as its own error. For a float32 candidate the margin is
# enormous, but for a **float64 candidate** the threshold is the floor alone, a few float64 ulps
# scaled by the conditioning, so the oracle itself must be within a few ulps of the exact value, and
# that cannot be measured in float64. `refattn.oracle.extended.mp_sdpa` evaluates the same formula
# in 50-digit arithmetic (mpmath) and rounds each result to float64 once: it is within one ulp of
# the exact value. The test suite holds refattn's float64 path to it; here is one small case.

# %%
q, k, v = rng.standard_normal((3, 2, 6, 8))                      # small: the mpmath loops are scalar Python
out_mp, A_mp, lse_mp = mp_sdpa(q, k, v, causal=True)
out64, A64, lse64 = sdpa(q, k, v, causal=True, return_weights=True, return_lse=True)


def ulps(x, exact, scale=None):
    # |x − exact| in units of the float64 spacing at `scale` (default: at the exact value itself)
    return np.abs(x - exact) / np.spacing(np.abs(exact if scale is None else scale))


kept = A_mp > 0
print(f"weights, max ulp difference:                        {ulps(A64, A_mp)[kept].max():.0f}")
print(f"log-sum-exp, max ulp difference:                    {ulps(lse64, lse_mp).max():.0f}")
print(f"output, at the scale Σ_j A_ij |v_je|:               {ulps(out64, out_mp, A_mp @ np.abs(v)).max():.0f}")
print(f"output, at each element's own value:                {ulps(out64, out_mp).max():.0f}")
i = np.unravel_index(np.argmax(ulps(out64, out_mp)), out_mp.shape)
print(f"  (at {tuple(int(j) for j in i)}: the value {out_mp[i]:.4f} is a cancelling sum of terms of size {(A_mp @ np.abs(v))[i]:.4f})")
assert ulps(A64, A_mp)[kept].max() <= 8 and ulps(out64, out_mp, A_mp @ np.abs(v)).max() <= 4

report = check(out_mp, q, k, v, causal=True)                     # the mpmath result as a float64 candidate
assert report.passed
print(report["out"].threshold)
distance = np.max(np.abs(out64 - out_mp))
print(f"refattn's own distance to it:  max|refattn − mp| {viz.roundoff_text(distance, equals=True)}")

# %% [markdown]
# > The weights agree to a few ulps, the outputs to one or two ulps of the size of the terms they
# > sum. Measured against each output's own value the count is larger (9 here, a few dozen on other
# > draws): an output near 0 is a
# > sum of positive and negative terms that cancel, and its relative error is amplified by the
# > cancellation in *any* implementation, the exact one rounded to float64 included. This is why the
# > check's ulp rule and the report's scale column use the spacing at the array's scale.
# >
# > The float64 threshold is a few dozen times refattn's own error on this case: room for a
# > candidate that rounds in another order, no room for a float64 candidate with a real bug. Without
# > the 50-digit tier nobody could say whether refattn's last few bits are right, and an oracle
# > whose error is unknown cannot set a float64 threshold.

# %% [markdown]
# **Takeaways.**
#
# - refattn's float64 attention is held to a 50-digit mpmath evaluation: the weights within a few ulps,
#   the outputs within one or two ulps of the size of the terms they sum.
# - That sets a float64 threshold that means something: the mpmath result passes it, and refattn's own
#   error is a few dozen times smaller than it.

# %% [markdown]
# ## (f) Log-sum-exp and merging partial attentions
#
# With `return_lse=True`, `scaled_dot_product_attention` also returns $\ell_i = \log \sum_j e^{S_{ij}}$
# per query ($-\infty$ for a query that sees no key), the number FlashAttention saves for its
# backward pass. Attention over two disjoint key sets $a$ and $b$ combines into attention over their
# union from the two (output, $\ell$) pairs alone:
#
# $$
# \ell = \log\!\big(e^{\ell_a} + e^{\ell_b}\big), \qquad
# o = e^{\ell_a - \ell}\, o_a + e^{\ell_b - \ell}\, o_b .
# $$
#
# > That is the whole online softmax: FlashAttention's loop over key blocks (Alg. 1), split-K /
# > flash-decoding's combination of partial results, and ring attention across devices all apply
# > these two lines. `refattn.oracle.merge_attention` is them, with the empty-set cases handled.

# %%
q = rng.standard_normal((2, 3, 5, 16))
k, v = rng.standard_normal((2, 2, 3, 12, 16))
first = np.arange(12) < 6                                         # keys 0-5 | keys 6-11
out_a, lse_a = sdpa(q, k, v, first, return_lse=True)
out_b, lse_b = sdpa(q, k, v, ~first, return_lse=True)
out, lse = merge_attention(out_a, lse_a, out_b, lse_b)
full, full_lse = sdpa(q, k, v, return_lse=True)
np.testing.assert_allclose(out, full, rtol=1e-12, atol=1e-12)
np.testing.assert_allclose(lse, full_lse, rtol=1e-12, atol=1e-12)

# the two lines, written out
ell = np.logaddexp(lse_a, lse_b)
mine = np.exp(lse_a - ell)[..., None] * out_a + np.exp(lse_b - ell)[..., None] * out_b
np.testing.assert_allclose(mine, full, rtol=1e-12, atol=1e-12)

# online: four blocks of three keys, from the empty state (output 0, ℓ = −∞)
out, lse = np.zeros_like(full), np.full(full_lse.shape, -np.inf)
for block in np.split(np.arange(12), 4):
    out_blk, lse_blk = sdpa(q, k[..., block, :], v[..., block, :], return_lse=True)
    out, lse = merge_attention(out, lse, out_blk, lse_blk)
np.testing.assert_allclose(out, full, rtol=1e-12, atol=1e-12)
print("two halves merged == full attention; four blocks merged online == full attention")

# %% [markdown]
# > A blocked candidate that also returns its log-sum-exp (FlashAttention's `softmax_lse`) can be
# > compared with `full_lse` the same way; `check` itself compares outputs and gradients only.

# %% [markdown]
# **Takeaways.**
#
# - Attention over disjoint key sets combines exactly from the (output, log-sum-exp) pairs: two halves,
#   or blocks folded in one at a time from the empty state.
# - `return_lse=True` gives the log-sum-exp a blocked candidate can be compared with.

# %% [markdown]
# ## (g) Fixtures for other languages
#
# A CUDA kernel, a Rust crate or a JAX function cannot call refattn, but it can read a file.
# `export_case` (or `python -m refattn export`) writes a named case as an `.npz`: the inputs, the
# conventions as 0-d string arrays, and refattn's float64 results. The other implementation reads
# `q`, `k`, `v`, computes its output, adds it to the file as `candidate_out` (and optionally
# `candidate_dq`, `candidate_dk`, `candidate_dv` for the file's `d_out`), and `python -m refattn
# check FILE.npz` prints the report and exits 0 (pass), 1 (fail) or 2 (malformed file). Every input
# value is rounded to 8 significant bits, so casting to float16, bfloat16 or float32 loses nothing.

# %%
for name, case in CASES.items():
    print(f"{name:15} {case.description}")


# %%
def other_language(arrays):
    # stands in for the other implementation: float32 attention from the file's arrays and conventions
    q, k, v = (arrays[key].astype(np.float32) for key in ("q", "k", "v"))
    n, m = q.shape[-2], k.shape[-2]
    causal = str(arrays["causal"])                                # "none", "top-left" or "bottom-right"
    allowed = np.ones((n, m), bool)
    if causal != "none":
        allowed = np.tril(allowed, k=m - n if causal == "bottom-right" else 0)
    S = (q @ np.swapaxes(k, -1, -2)) * np.float32(arrays["scale"])
    S = np.where(allowed, S, -np.inf)
    P = np.exp(S - S.max(axis=-1, keepdims=True))
    return (P @ v) / P.sum(axis=-1, keepdims=True)


def cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "refattn", *args], cwd=cwd, capture_output=True, text=True)


with tempfile.TemporaryDirectory() as tmp:                        # nothing is written into the repository
    tmp = Path(tmp)
    export_case("bottom_right", tmp / "bottom_right.npz")
    print("written:", sorted(p.name for p in tmp.iterdir()))

    with np.load(tmp / "bottom_right.npz", allow_pickle=False) as f:
        arrays = {key: f[key] for key in f.files}
    print("keys:", ", ".join(sorted(arrays)))
    print("q", arrays["q"].shape, "k", arrays["k"].shape, "causal", repr(str(arrays["causal"])),
          "scale", f"{float(arrays['scale']):.6g}")

    arrays["candidate_out"] = other_language(arrays)
    np.savez(tmp / "bottom_right.npz", **arrays)                   # the file, now with the candidate's output
    report = check_file(tmp / "bottom_right.npz")
    assert report.passed

    run = cli("check", "bottom_right.npz", cwd=tmp)               # relative paths: no temporary path in the output
    print(f"\n$ python -m refattn check bottom_right.npz   -> exit code {run.returncode}")
    print("\n".join(run.stdout.splitlines()[:5]))
    assert run.returncode == 0 and run.stdout.strip() == str(report)

    run = cli("check", "bottom_right.npz", "--rule", "table", "--table", "jax", cwd=tmp)
    print(f"\n$ python -m refattn check bottom_right.npz --rule table --table jax   -> exit code {run.returncode}")
    print("\n".join(run.stdout.splitlines()[:1]))
    assert run.returncode == 0

    # malformed files: exit code 2 and a one-line error on stderr, never a traceback
    broken = {"no_candidate.npz": {k: x for k, x in arrays.items() if k != "candidate_out"},
              "bad_causal.npz": {**arrays, "causal": np.array("diagonal")},
              "int_candidate.npz": {**arrays, "candidate_out": np.zeros((2, 3, 5, 6), np.int32)}}
    for name, content in broken.items():
        np.savez(tmp / name, **content)
        run = cli("check", name, cwd=tmp)
        print(f"\n$ python -m refattn check {name}   -> exit code {run.returncode}")
        print(run.stderr.strip())
        assert run.returncode == 2 and run.stdout == "" and len(run.stderr.strip().splitlines()) == 1

# %% [markdown]
# > The report the command prints is the one `check_file` returns in Python, so a CI job in another
# > language can gate on the exit code and still show a reader the numbers. Write the fixture with
# > `--layout bnhd` for an implementation that takes `(b, n, h, d)` arrays; the conventions travel
# > in the file, so the check needs no flags.

# %% [markdown]
# **Takeaways.**
#
# - A fixture is an `.npz` with the inputs, the conventions and refattn's results; the other
#   implementation adds its output, and `python -m refattn check` prints the same report as `check_file`
#   and exits 0 (pass) or 1 (fail).
# - A malformed file gets exit code 2 and a one-line error on stderr, never a traceback.

# %% [markdown]
# ## (h) Exercises
#
# 1. **Gradients through a file.** Extend `candidate_with_grads` of (d) to a causal mask (masked
#    pairs get $A_{ij} = 0$ and $dS_{ij} = 0$), add `candidate_dq`, `candidate_dk`, `candidate_dv`
#    for the fixture's `d_out` to `bottom_right.npz`, and run `python -m refattn check`. Then drop
#    the row-sum term again: which lines of the report change?
#    <details><summary>Hint</summary>With <code>S = np.where(allowed, S, -np.inf)</code> the
#    weights are already 0 on masked pairs, and so is <code>dS = A * (dA - D)</code>; nothing else
#    changes. The gradients' thresholds use the factor 3; <code>out</code> and <code>dv</code> still
#    pass without the row sum.</details>
#
# 2. **How long before float16 accumulation shows?** Run `candidate_online` of (c) 4 with
#    `acc=np.float16` for $m = 64, 128, 256, 512, 1024$ and a few seeds, and print the largest error
#    against the ratio rule's bound (`report["out"].max_abs_error` and the `threshold` line). At what
#    $m$ does it fail reliably? How does the float32-accumulator version's error change with $m$?
#    <details><summary>Hint</summary>Each float16 addition rounds at a relative $2^{-11}$, and the
#    roundings of $m$ additions add up like a random walk, about $\sqrt{m}$ of them. The baseline's
#    error comes from rounding the weights and outputs to float16 once, which does not grow with
#    $m$. Short rows can pass by luck; that is what the fixed sequence length in (c) avoids.</details>
#
# 3. **Grouped-query heads.** Export the `gqa` case ($h = 4$ query heads over $h_{kv} = 2$ key/value
#    heads) and write a candidate that expands the key/value heads with `np.repeat(k, 2, axis=1)`.
#    Then use `np.tile(k, (1, 2, 1, 1))` instead. Does the report name that mistake? Which query
#    head reads which key/value head in each case?
#    <details><summary>Hint</summary><code>np.repeat</code> gives query head $i$ the key/value
#    head $i // 2$ (PyTorch's <code>enable_gqa</code>, FlashAttention); <code>np.tile</code> gives
#    it $i \bmod 2$. The report's list of alternatives does not include the other head grouping, so
#    it fails without naming a fix: read <code>report.alternatives_tried</code>.</details>
#
# 4. **Conditioning.** Multiply `q` and `k` of (b) by 10, so that the logits reach the hundreds.
#    Check the correct `candidate` under `rule="ratio"` and `rule="ulp"`. How do the baseline error,
#    the floor and the ulp bound change, and which rule still passes?
#    <details><summary>Hint</summary>A score of size 100 rounded in float32 is off by about
#    $100 \cdot 2^{-24}$, and $e^{s}$ turns that absolute error into a relative error of the
#    weight. The baseline and the floor both grow with $|s|$; the ulp rule's bound does not (it
#    depends on $\max|o|$ only), so an honest implementation can exceed 64 ulps.</details>
