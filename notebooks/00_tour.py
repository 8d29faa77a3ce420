# %% [markdown]
# # A tour of refattn
#
# **refattn** is a NumPy reference implementation of the attention mechanisms of the Transformer
# family. Each mechanism is a short, plain-NumPy function whose lines follow its paper's equations.
# It computes in float64 and is explicit about the conventions that make two attention codes disagree:
# mask polarity, causal alignment, what a fully masked row returns, the default scale, and where every
# random draw comes from.
#
# It is written for three kinds of reader:
#
# | who | what refattn gives them | where to start |
# |---|---|---|
# | **Learners** | code you can read next to the paper, with the paper's symbols as variable names | `01_vanilla_transformer.ipynb`, then `refattn/core/*.py` |
# | **Visual explorers** | attention matrices, heads, masks and decoding steps drawn with `refattn.viz` | `refattn.viz`, `figures/` |
# | **Implementers** (PyTorch, JAX, CUDA, Rust, …) | float64 ground truth for the same inputs, plus a same-dtype baseline that sets the tolerance | section 4 below |
#
# What refattn is *not*: a training framework for real models. It is fast only where that makes checking at
# real sizes possible: the blocked softmax core and the sparse and scan kernels. Its models are drawn at random
# from an explicit seed, except two tiny Transformers trained in plain NumPy with refattn's own gradients
# (`refattn.training`), so that attention that *learned* something can be read: see
# `11_learned_attention.ipynb` (a cross-attention anti-diagonal, a previous-token and an induction head, and
# the fidelity atlas of every approximation on them).
#
# This tour covers: 1. the conventions · 2. the catalogue · 3. the two ways to call a mechanism ·
# 4. refattn as an oracle · 5. where each family lives · 6. figures, tests and notebooks.

# %%
import importlib.util

import numpy as np
from IPython.display import Markdown, display

import refattn
from refattn import registry, scaled_dot_product_attention

np.set_printoptions(precision=4, suppress=True)
rng = np.random.default_rng(1706_03762)   # arXiv:1706.03762; every draw below comes from rng

# %% [markdown]
# ## 1. Conventions
#
# | topic | refattn | who else does it this way |
# |---|---|---|
# | shapes | `q (..., n, d_k)`, `k (..., m, d_k)`, `v (..., m, d_v)` → output `(..., n, d_v)`, weights `(..., n, m)`; leading (batch, head) dims broadcast | `numpy.linalg`'s `(..., M, N)` |
# | weight matrices | act on the right, `x @ W` with `W` of shape `(d_in, d_out)` | the paper (`Q W_i^Q`) |
# | mask polarity | boolean, **`True` = may attend**; a float mask is an additive bias | PyTorch `scaled_dot_product_attention`, JAX. **Opposite** in `torch.nn.MultiheadAttention` |
# | causal, `n != m` | `causal=True` is top-left (`j <= i`); `causal="bottom-right"` is `j <= i + (m - n)` | PyTorch `is_causal` / FlashAttention ≥ 2.1 and KV-cache decoding |
# | fully masked row | `fully_masked="zero"` (default), `"nan"` or `"uniform"`, never an accident | PyTorch ≥ 2.5 and FlashAttention / older PyTorch / filling with `-1e9` |
# | scale | `1/√d_k` unless `scale=` is given | the paper, Eq. (1) |
# | precision | float64 whatever the input dtype; `dtype=` runs the same equation in float32/float16 | — |
# | randomness | an explicit `rng` (a `numpy.random.Generator` or an int seed); `None` is refused | — |
#
# Each row is checked in code below, with `n != m` throughout: when the lengths are equal, alignment bugs
# stay hidden.

# %%
n, m, d_k, d_v = 3, 5, 4, 2
q = rng.standard_normal((2, n, d_k)).astype(np.float32)    # a batch of 2, handed over in float32
k = rng.standard_normal((2, m, d_k)).astype(np.float32)
v = rng.standard_normal((2, m, d_v)).astype(np.float32)

out, A = scaled_dot_product_attention(q, k, v, return_weights=True)
print(f"inputs {q.dtype} -> output {out.dtype} {out.shape}, weights {A.dtype} {A.shape}")

# the default scale is 1/sqrt(d_k)
np.testing.assert_array_equal(out, scaled_dot_product_attention(q, k, v, scale=1 / np.sqrt(d_k)))
# the same equation run in float32: the "same-dtype baseline" of section 4
print("dtype=np.float32 ->", scaled_dot_product_attention(q, k, v, dtype=np.float32).dtype)

# %% [markdown]
# > **Mask polarity and causal alignment.** Below are the two causal masks for `n = 3` queries and
# > `m = 5` keys (1 = may attend). Top-left lets query *i* see keys `0 … i`. Bottom-right lines up the
# > last query with the last key. That is the right mask when the 3 queries are the *newest* 3 of 5
# > positions, as in decoding with a key/value cache. When `n == m` the two masks are the same.

# %%
print("causal=True (top-left):\n", refattn.causal_mask(n, m).astype(int))
print('causal="bottom-right":\n', refattn.causal_mask(n, m, causal="bottom-right").astype(int))

allowed = refattn.causal_mask(n, m, causal="bottom-right")
_, A = scaled_dot_product_attention(q, k, v, causal="bottom-right", return_weights=True)
np.testing.assert_array_equal(A[:, ~allowed], 0.0)           # False = exactly zero weight
np.testing.assert_allclose(A.sum(axis=-1), 1.0, rtol=1e-12)  # rows are distributions over allowed keys

# %% [markdown]
# > **A fully masked row.** With bottom-right alignment and more queries than keys (`n = 4`,
# > `m = 2`), the first `n - m = 2` queries come before every key, so they may attend to none. The
# > softmax of an empty set is undefined, and libraries disagree on what to return. refattn makes you
# > choose, and defaults to zeros.

# %%
q4, k2, v2 = rng.standard_normal((4, d_k)), rng.standard_normal((2, d_k)), rng.standard_normal((2, d_v))
for policy in ("zero", "nan", "uniform"):
    out, A = scaled_dot_product_attention(q4, k2, v2, causal="bottom-right", fully_masked=policy,
                                          return_weights=True)
    print(f"fully_masked={policy!r:9}  weights of rows 0-1: {A[:2].tolist()}")

# %% [markdown]
# **Takeaways.**
#
# - Whatever the input dtype, refattn computes in float64; `dtype=` runs the same equation in a lower
#   precision on purpose, as a baseline.
# - A boolean mask is `True` where a query may attend, and masked keys get exactly zero weight. With
#   `n != m`, `causal=True` (top-left) and `causal="bottom-right"` are different masks.
# - A query that may see no key returns what `fully_masked=` says (`"zero"` by default, `"nan"` or
#   `"uniform"`), never an accident of the arithmetic.

# %% [markdown]
# ## 2. The catalogue
#
# `refattn.registry` is the single list of mechanisms. The command line, the figures, the README table,
# the shared property tests and this table are all generated from it. Each record has a `kind`:
#
# - **attention**: has `apply(q, k, v, ...)`;
# - **mask**: `apply` is attention under that mask;
# - **component**: a building block (softmax, layer norm, positional encoding, whole layers), which
#   has no `apply` and is called through its own `function`.

# %%
rows = ["| id | mechanism | family | kind | causal | time | memory | section |",
        "|---|---|---|---|---|---|---|---|"]
for mech in registry.all():
    rows.append(f"| `{mech.id}` | {mech.title} | {mech.family} | {mech.kind} | "
                f"{'yes' if mech.causal else 'no'} | {mech.time} | {mech.memory} | {mech.section} |")
display(Markdown("\n".join(rows)))
print(len(registry.all()), "records; families:", sorted({mech.family for mech in registry.all()}))

# %% [markdown]
# **Takeaways.**
#
# - The registry is the one list of mechanisms: the command line, the figures, the README table and
#   the tests read it, so none of them keeps a list of its own.
# - Each record says what kind of thing it is (attention, mask, component), whether it has a causal
#   form, and where in its paper (or in the survey) it comes from.

# %% [markdown]
# ## 3. Two ways to call a mechanism
#
# Each mechanism has the registry's **uniform `apply`**, `registry.get(id).apply(q, k, v, *, causal=False,
# rng=None, return_weights=False, **options)`, which returns an `AttentionResult(output, weights, allowed)`:
# the weights (and the pairs each query may see) only when asked for. It also has its **own
# function** with its natural parameters. Code that loops over the catalogue (tests, figures, error
# comparisons) uses `apply`. People use the function. The two agree exactly:

# %%
sdpa = registry.get("sdpa")
display(Markdown(f"**{sdpa.title}**, {sdpa.paper}: $${sdpa.equation}$$"))

q, k, v = rng.standard_normal((4, 8)), rng.standard_normal((6, 8)), rng.standard_normal((6, 3))  # n=4, m=6
result = sdpa.apply(q, k, v, causal="bottom-right", return_weights=True)
out, A = scaled_dot_product_attention(q, k, v, causal="bottom-right", return_weights=True)
np.testing.assert_array_equal(result.output, out)
np.testing.assert_array_equal(result.weights, A)
print("apply:", type(result).__name__, result.output.shape, result.weights.shape, "== the function's")

# %% [markdown]
# > For the visual explorer, `refattn.viz` draws any `(n, m)`, `(c, n, m)` or `(r, c, n, m)` stack of
# > weights as a grid of heat maps on one shared colour scale. Here are the weights above: 4 queries over
# > 6 keys with bottom-right causal alignment. The first query may see keys 0–2 only.

# %%
from refattn import viz

viz.plot_attention(A, row_labels=[f"q{i}" for i in range(4)], col_labels=[f"k{j}" for j in range(6)],
                   size=2.6, titles='causal="bottom-right", n=4, m=6')

# %% [markdown]
# > `apply` takes the same arguments everywhere, so one loop can call every attention-like record.
# > Records with learned parameters (multi-head, cross-attention) draw them from `rng`. Each record
# > says which `causal` values its `apply` takes (`causal_settings`): a causal recurrence or the causal
# > mask takes no `causal=False`. The gallery below is that loop, drawn: every registered attention
# > mechanism's weights on a seeded input, in catalogue order. It is generated from the registry, so a
# > mechanism added tomorrow appears in it (and in `figures/gallery.png`) without anyone editing this cell.

# %%
from refattn.figures.gallery import gallery

gallery()

# %%
for mech in registry.all():
    if mech.apply is None:
        continue
    # Records say what their apply takes: two sequences (cross), or one sequence of a length at
    # which the pattern exists (example_length), and which causal settings.
    n, m = (4, 6) if mech.cross else (mech.example_length, mech.example_length)
    x = rng.standard_normal((n + m, 8))
    causal = "bottom-right" if mech.incremental else mech.causal_settings[0]
    k = x[:n] if mech.shared_qk else x[n:]                 # a shared-QK record's keys are its queries
    res = mech.apply(x[:n], k, x[n:], causal=causal, rng=0, return_weights=True)  # values: d_v = d_model
    print(f"{mech.id:20} {mech.family:8} causal={causal!s:13} output {res.output.shape}  weights {res.weights.shape}")


# %% [markdown]
# **Takeaways.**
#
# - Every attention-like mechanism has one call shape, `apply(q, k, v, causal=..., rng=...)`, returning
#   the output (and, when asked, the weights); its own function, with its natural parameters, gives the
#   same numbers.
# - The gallery is drawn from the registry, so it grows with it.
# - Any stack of weights, `(n, m)`, `(c, n, m)` or `(r, c, n, m)`, is drawn by `refattn.viz.plot_attention`
#   on one colour scale.

# %% [markdown]
# ## 4. refattn as an oracle
#
# To test another implementation (a PyTorch module, a CUDA kernel, a JAX function), feed it and refattn
# *the same inputs* and compare. An absolute tolerance picked by hand is too loose or too tight,
# depending on sizes and dtypes. FlashAttention's test suite uses a better rule, stated in words:
#
# > **Compute a float64 reference. Run a plain, straightforward implementation in the same low
# > precision as the code under test and measure its error against the reference. The code under test
# > passes if its own error against the reference is at most twice that baseline error.**
#
# refattn gives you both pieces. `scaled_dot_product_attention(...)` is the float64 reference, and
# `scaled_dot_product_attention(..., dtype=np.float32)` is the same equation run in float32, which is
# the baseline. Below, the "code under test" is a hand-written float32 kernel that folds the scale into
# `q` and normalises after multiplying by `V`, as fused kernels do. A second version keeps its
# probabilities in float16 (the bug of a kernel that rounds `P` to half precision before `P V`), and
# the rule catches it.

# %%
def candidate_attention(q, k, v, p_dtype=np.float32):
    # the implementation under test: float32, scale folded into q, normalisation deferred to the end
    q, k, v = (np.asarray(x, np.float32) for x in (q, k, v))
    s = (q * np.float32(1 / np.sqrt(q.shape[-1]))) @ np.swapaxes(k, -1, -2)
    p = np.exp(s - s.max(axis=-1, keepdims=True)).astype(p_dtype).astype(np.float32)
    return (p @ v) / p.sum(axis=-1, keepdims=True)


batch, heads, n, m, d = 2, 4, 64, 48, 32
q = rng.standard_normal((batch, heads, n, d)).astype(np.float32)
k = rng.standard_normal((batch, heads, m, d)).astype(np.float32)
v = rng.standard_normal((batch, heads, m, d)).astype(np.float32)

oracle = scaled_dot_product_attention(q, k, v)                       # float64 ground truth
baseline = scaled_dot_product_attention(q, k, v, dtype=np.float32)   # same equation, float32
err_baseline = np.abs(baseline - oracle).max()
eps32 = np.finfo(np.float32).eps
assert err_baseline < 10 * eps32                                     # a few roundings of float32
# float32 rounding errors: their digits depend on the machine's BLAS kernel, so the verdicts are printed
print(f"baseline: max|baseline - oracle| < 10 ε = {10 * eps32:.1e} (ε of float32)")


def report(name, actual):
    ratio = np.abs(actual - oracle).max() / err_baseline
    print(f"{name:40} max|err| {'≤' if ratio <= 2 else '>'} 2 x baseline  {'PASS' if ratio <= 2 else 'FAIL'}")
    return ratio


report("baseline: refattn, dtype=float32", baseline)
report("candidate, float32", candidate_attention(q, k, v))
assert report("candidate, P rounded to float16", candidate_attention(q, k, v, p_dtype=np.float16)) > 100

# %% [markdown]
# > Practical notes for comparing against another library:
# >
# > - **Same inputs.** Save `q, k, v` (and the mask) to an `.npz` file and load it on the other side.
# >   NumPy's `Generator` streams are not promised to stay the same across NumPy versions, so "same seed"
# >   on two machines does not guarantee the same numbers. A saved file does.
# > - **Same conventions.** Invert boolean masks for `torch.nn.MultiheadAttention` (`True` = *blocked*
# >   there). Pass `causal="bottom-right"` when the other side aligns causal masks that way
# >   (FlashAttention ≥ 2.1). Set `fully_masked=` to the other library's behaviour.
# > - **Same parameters.** Weights act on the right here (`x @ W`). `torch.nn.Linear` stores `W.T`.
# >
# > **The oracle package does this for you.** `refattn.oracle.check(candidate, q, k, v, ...)` applies
# > the rule above (plus a rounding-noise floor; or a named tolerance table, or an ulp bound), checks
# > gradients against `refattn.oracle.sdpa_vjp` with the 3× rule, and when it fails, names the
# > convention that would match (causal alignment, mask polarity, scale, layout, fully-masked policy).
# > `python -m refattn export` / `check FILE.npz` do the same across languages. See
# > `90_refattn_as_oracle.ipynb`.

# %% [markdown]
# **Takeaways.**
#
# - A tolerance is set by a baseline, not by hand: the same equation run in the candidate's precision,
#   compared with the float64 result. A candidate passes at up to twice the baseline's error.
# - The hand-written float32 candidate passes, with an error within twice the baseline's; the same
#   code with its probabilities rounded to float16 fails by a factor of more than a hundred (asserted).

# %% [markdown]
# ## 5. Where each family lives
#
# The package layout follows the survey's taxonomy. Available now: the **vanilla Transformer core**
# (`refattn/core/`: softmax, masks, scaled dot-product attention, multi-head attention, positional
# encodings, layer norm and FFN, encoder and decoder layers with a key/value cache, the full
# encoder–decoder with greedy decoding), **position-based sparse attention** (`refattn/sparse/`,
# notebook 02), **linearised attention** (`refattn/linear/`, notebook 03), the **Numba cores** for
# them (`refattn/kernels/`: the blocked online-softmax core, the CSR sparse kernel and the causal scans) and the **oracle tools**
# (`refattn/oracle/`, notebook 90). The survey's other families, query prototypes and compressed memory
# (§4.3), low-rank attention (§4.4), attention with a prior (§4.5) and multi-head variants (§4.6), are
# not available yet; a family only counts as available once its mechanisms are in the registry. This
# cell reports what your copy has:

# %%
from collections import Counter

planned = {
    "refattn.core": ("vanilla", "vanilla Transformer: softmax, masks, sdpa, multi-head, positional, layers"),
    "refattn.viz": (None, "matplotlib helpers: attention matrices, head grids, patterns, stepping"),
    "refattn.sparse": ("sparse", "position-based patterns (band, global, BigBird ...); content-based ones to come"),
    "refattn.linear": ("linear", "feature maps and linearised attention (right product, causal scan)"),
    "refattn.compressed": ("compressed", "query prototypes, compressed key/value memory"),
    "refattn.lowrank": ("lowrank", "low-rank + band, Nystrom variants"),
    "refattn.prior": ("prior", "Gaussian priors, shared maps, synthesizers"),
    "refattn.heads": ("heads", "multi-head variants (multi-query, grouped-query, talking heads)"),
    "refattn.kernels": (None, "Numba cores: blocked online softmax, CSR sparse, causal scans"),
    "refattn.oracle": (None, "comparison, tolerances, extended precision, gradients, npz I/O"),
}
registered = Counter(mech.family for mech in registry.all())
print(f"{'package':20} {'on disk':8} {'mechanisms':>10}  contents")
for module, (family, contents) in planned.items():
    on_disk = "yes" if importlib.util.find_spec(module) is not None else "no"
    count = "-" if family is None else registered.get(family, 0)
    print(f"{module:20} {on_disk:8} {count:>10}  {contents}")

# %% [markdown]
# **Takeaways.**
#
# - The packages follow the survey's taxonomy: `core` (vanilla), `sparse` (§4.1), `linear` (§4.2), with
#   the Numba kernels and the oracle tools beside them.
# - What counts as available is what the registry holds, which this cell counts rather than states.

# %% [markdown]
# ## 6. Figures, tests and these notebooks
#
# From the repository root:
#
# ```bash
# python -m refattn list                  # the catalogue (--json for records, --markdown for the README table)
# python -m refattn figures               # rewrite figures/*.png: seeded, byte-stable, one per mechanism
# python -m refattn figures --only sdpa   # just one
# python -m pytest                        # unit tests, doctests (--doctest-modules) and notebooks (--nbmake)
# python -m pytest notebooks -q           # only the notebooks, executed headless
# jupytext --sync notebooks/*.ipynb       # after editing a notebook or its .py twin: carry the inputs across
# jupyter nbconvert --to notebook --execute --inplace --ExecutePreprocessor.record_timing=False \
#     --Exporter.preprocessors='["nbconvert.preprocessors.CoalesceStreamsPreprocessor"]' notebooks/*.ipynb
# ```
#
# The last command re-executes every notebook in place, and its two options keep that byte-stable.
# `record_timing=False` keeps execution timestamps out of the files, and the `CoalesceStreamsPreprocessor`
# merges printed output that the kernel happened to send in several pieces.
#
# Each notebook `NAME.ipynb` has a twin, `NAME.py`, with the same cells as text (jupytext's py:percent
# format): that is the file to read in a diff, and either half can be edited. The notebooks are committed
# executed, so they can be read on a code host without a kernel. Each one is seeded and runs in a few
# seconds, so a re-run changes no output. The `list` command runs in-process like this:

# %%
from refattn.cli import main

main(["list"]);

# %% [markdown]
# **Takeaways.**
#
# - The notebooks are seeded, and the re-execution command keeps timings and stream splits out of them,
#   so re-executing an unchanged notebook writes the same bytes.
# - `python -m pytest` runs the unit tests, the doctests and every notebook; a notebook and its `.py`
#   twin must hold the same cells.

# %% [markdown]
# **Next:** `01_vanilla_transformer.ipynb` computes the vanilla Transformer from its equations step by
# step. It starts from two tokens and ends with greedy decoding through a key/value cache.
