r"""Blocked scaled dot-product attention with an online softmax (FlashAttention, Algorithm 1), float64.

Dao et al., "FlashAttention: Fast and Memory-Efficient Exact Attention with IO-Awareness",
NeurIPS 2022, arXiv:2205.14135, Algorithm 1. Queries are cut into tiles of ``block_q`` rows and
keys into tiles of ``block_k``; for each query row *i* the kernel keeps a running maximum
:math:`\mu_i` (the paper's :math:`m_i`; *m* is the number of keys here), a running sum
:math:`\ell_i` and an unnormalised output :math:`\mathrm{acc}_i`, and for every key tile *J*::

    s_j   = scale · q_i·k_j (+ b_ij)                     only for visible keys j ∈ J
    μ'    = max(μ_i, max_j s_j)
    ℓ_i   = ℓ_i · exp(μ_i − μ') + Σ_j exp(s_j − μ')
    acc_i = acc_i · exp(μ_i − μ') + Σ_j exp(s_j − μ') v_j
    μ_i   = μ'

and at the end ``out_i = acc_i / ℓ_i``, ``lse_i = μ_i + log ℓ_i``. Nothing of size n × m exists:
the scratch of one task is a (block_k × block_q) score tile, a transposed query tile, the
(block_q × d_v) product ``P_IJ V_J`` and the accumulator.

Visibility is decided by selection, key by key: causal (``j <= i + delta``), key length
(``j < lengths[b]``), a boolean mask tile, ``-inf`` entries of an additive bias. A key that is not
visible is never used, neither its score nor its value, so NaN/Inf stored there cannot leak. Key
tiles beyond the causal frontier of the query tile, or beyond the key length, are skipped.

"No visible key yet" is the state ``μ_i = -inf``: there ``exp(s_j − μ_i)`` would be
``exp(−inf − (−inf)) = NaN``, so while the running maximum is still ``-inf`` (nothing seen, or only
``-inf`` scores) the weights subtract 0 instead, and every weight is ``exp(−inf) = 0``; when the
first finite score arrives, the rescaling factor ``exp(−inf − μ') = 0`` multiplies those zeros. A
query whose maximum stays ``-inf`` follows the fully-masked policy (0 zero, 1 NaN, 2 uniform = the
mean of all m values, ``vmean``) and gets ``lse = -inf``. NaN scores propagate into the running
maximum, so a NaN in a visible score makes the row NaN, as in the equation path. A score
``scale · q_i·k_j`` that is not finite (an Inf or NaN in q_i or k_j, or a dot product beyond the
float64 range, which BLAS rounds to +inf, -inf or NaN depending on its order of summation and its
fused multiply-adds) is made NaN before the bias and the selection, as in the equation path, so
that every method gives that row the same NaN.

Layout: the score tile is computed transposed, ``S_JIᵀ = K_J Q_Iᵀ`` of shape (keys, queries), so
that every per-query quantity (running max, rescale, ``exp``, running sum) is an update of a
contiguous vector of queries inside a loop over keys: elementwise, vectorised by LLVM without
``fastmath`` (a per-row reduction over keys would need reassociation). Each query's sum still adds
its terms in key order. The exponential is :func:`refattn.kernels.vexp.vexp`, branch-free and
within 1 ulp of ``np.exp`` (libm's scalar ``exp`` is a call LLVM cannot vectorise).

Parallel strategy: one level, ``prange`` over the independent (batch row × query tile) tasks;
inside a task the two tile products ``K_J Q_Iᵀ`` and ``P_IJ V_J`` are ``np.dot`` into preallocated
tiles (BLAS through SciPy, single-threaded because of their size). Results do not depend on the
thread count.

Tiles are square, ``b·b·max(d_k, d_v) <= 2**18`` multiply-adds
(:func:`refattn.kernels.tiles.default_block_size`: 64 for d <= 64, 32 up to 256): OpenBLAS runs a
product that small on the calling thread, and a larger one starts OpenBLAS threads inside Numba's
("Detect OpenMP Loop"), which was several times slower. The measurements behind these choices
are in the README's "Speed and memory" section; ``python -m refattn bench sdpa`` times the kernel
against the equation path and torch's CPU sdpa on this machine.

A value tile holding NaN/Inf is multiplied by explicit loops over the visible keys only (0 · NaN
must not enter through the BLAS product); key garbage is harmless in ``K_J Q_Iᵀ``, since it spoils
only its own row of the tile, whose scores are never selected.
"""
from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np
from numpy.typing import NDArray

from .._jit import jit, jit_inline, jit_parallel, prange
from ..common.budget import check_fits
from ..common.checks import check_bool, check_scale
from ..common.ints import check_positive_int
from . import POLICY_CODES, check_kernel_array, check_kernel_indices, check_policy
from .blas import serial_blas
from .vexp import vexp

__all__ = ["Visibility", "blocked_attention", "finite_rows"]


class Visibility(NamedTuple):
    """Which keys each query of a flattened batch row may see (Numba takes a NamedTuple of arrays).

    An absent mask or bias is an empty array, so that one compiled kernel serves every case.
    """

    causal: bool             # query i sees keys j <= i + delta only
    delta: int               # 0 top-left, m − n bottom-right
    lengths: NDArray         # (B,) int64: row b sees keys j < lengths[b]
    mask: NDArray            # (S_m, n, m) bool, True = may attend; (0, 0, 0) when absent
    mask_index: NDArray      # (B,) int64: the mask slab of row b
    bias: NDArray            # (S_b, n, m) float64, added to the scores, -inf masks; (0, 0, 0) when absent
    bias_index: NDArray      # (B,) int64: the bias slab of row b


def blocked_attention(q, k, v, scale, visibility, fully_masked, tiles, out, lse) -> None:
    """Blocked online-softmax attention over flattened batch rows, after checking what the kernel indexes.

    q (B, n, d), k (B, m, d), v (B, m, d_v): C-contiguous float64. ``scale`` a finite float.
    ``visibility``: a :class:`Visibility` (``lengths`` in [0, m]; a mask or bias of shape
    (S, n, m) with its index in [0, S)). ``fully_masked`` = (policy, vmean): the policy code
    0/1/2 and, for 2 (uniform), each row's mean value (B, d_v) (else (0, 0)). ``tiles`` =
    (block_q, block_k), positive ints; a tile larger than the problem is cut to it, and score tiles
    (one per task running at once, at most one per Numba thread) above
    :func:`refattn.common.memory_budget` raise
    :class:`~refattn.common.MemoryBudgetError`. Writes ``out`` (B, n, d_v) and ``lse`` (B, n).
    A wrong shape, dtype, layout or index raises ``ValueError``/``TypeError`` naming the argument.
    """
    B, n, d = check_kernel_array("q", q, (None, None, None))
    m = check_kernel_array("k", k, (B, None, d))[1]
    d_v = check_kernel_array("v", v, (B, m, None))[2]
    check_kernel_array("out", out, (B, n, d_v), writeable=True)
    check_kernel_array("lse", lse, (B, n), writeable=True)
    scale = check_scale(scale)
    causal, delta = check_visibility(visibility, B, n, m)
    policy, vmean = fully_masked
    policy = check_policy(policy)
    check_kernel_array("vmean", vmean, (B, d_v) if policy == POLICY_CODES["uniform"] else (None, None))
    block_q, block_k = (check_positive_int("block_size", t) for t in tiles)
    block_q, block_k = min(block_q, max(n, 1)), min(block_k, max(m, 1))   # no tile beyond the problem
    tasks = min(numba.get_num_threads(), B * -(-n // block_q))              # score tiles alive at once
    check_fits(f"the blocked kernel's score tiles (block_size=({block_q}, {block_k}), one per running task)",
               (tasks, block_k, block_q))
    visibility = visibility._replace(causal=causal, delta=int(delta))      # one compiled type
    with serial_blas():                                            # BLAS runs inside the kernel's threads
        _blocked_loop(q, k, v, scale, visibility, (policy, vmean), (block_q, block_k), out, lse)


def check_visibility(visibility, B: int, n: int, m: int) -> tuple[bool, int]:
    """``(causal, delta)`` after checking every array of ``visibility`` the blocked kernels index.

    A :class:`Visibility` with ``lengths`` (B,) in [0, m] and a mask or bias of shape (S, n, m) with
    its index (B,) in [0, S); ``TypeError``/``ValueError`` naming the field otherwise.
    """
    if not isinstance(visibility, Visibility):
        raise TypeError(f"visibility must be a Visibility, got {type(visibility).__name__}")
    causal, delta = check_bool("visibility.causal", visibility.causal), visibility.delta
    if isinstance(delta, (bool, np.bool_)) or not isinstance(delta, (int, np.integer)):
        raise TypeError(f"visibility.delta must be an int, got {delta!r}")
    check_kernel_indices("visibility.lengths", visibility.lengths, (B,), 0, m, np.int64)
    for name, dtype in (("mask", np.bool_), ("bias", np.float64)):
        slabs, index = getattr(visibility, name), getattr(visibility, name + "_index")
        S = check_kernel_array(f"visibility.{name}", slabs, (None, None, None), dtype)[0]
        if S:
            check_kernel_array(f"visibility.{name}", slabs, (S, n, m), dtype)
            check_kernel_indices(f"visibility.{name}_index", index, (B,), 0, S - 1, np.int64)
    return causal, int(delta)


@jit_parallel
def _blocked_loop(q, k, v, scale, visibility, fully_masked, tiles, out, lse):  # pragma: no cover - jitted
    """The kernel of :func:`blocked_attention` (its arguments, checked)."""
    B, n, d = q.shape
    m, d_v = v.shape[1], v.shape[2]
    causal, delta, lengths = visibility.causal, visibility.delta, visibility.lengths
    policy, vmean = fully_masked
    block_q, block_k = tiles
    v_row_finite = finite_rows(v)                                  # value row j holds no NaN/Inf: once,
    #                                                                not per tile pair
    n_tiles = (n + block_q - 1) // block_q
    per_pair = visibility.mask.shape[0] > 0 or visibility.bias.shape[0] > 0
    for t in prange(B * n_tiles):                                  # independent (batch row, query tile)
        b = t // n_tiles
        i0 = (t % n_tiles) * block_q
        i1 = min(n, i0 + block_q)
        rows = i1 - i0
        run_max = np.full(rows, -np.inf)                           # μ_i
        run_sum = np.zeros(rows)                                   # ℓ_i
        acc = np.zeros((rows, d_v))                                # Σ exp(s_j − μ_i) v_j
        q_t = np.ascontiguousarray(q[b, i0:i1].T)                  # (d, rows): Q_Iᵀ, once per task
        s_t = np.empty((block_k, rows))                            # scores, then weights, transposed
        pv = np.empty((rows, d_v))                                 # P_IJ V_J
        tile_max = np.empty(rows)
        shift = np.empty(rows)                                     # the μ_i that weights subtract
        j_stop = min(m, lengths[b])
        if causal:
            j_stop = min(j_stop, i1 + delta)                       # last row sees j <= i1 − 1 + delta
        for j0 in range(0, max(j_stop, 0), block_k):
            cols = min(j_stop, j0 + block_k) - j0
            st = s_t[:cols]
            np.dot(k[b, j0:j0 + cols], q_t, st)                    # (cols, rows) K_J Q_Iᵀ (BLAS); garbage in
            #                                                        key j spoils only row j of st, unselected
            diagonal = causal and not per_pair and j0 + cols - 1 > i0 + delta   # some pair in the future
            if per_pair:                                           # scaled, biased, -inf where not visible
                _select_per_pair(st, scale, visibility, b, i0, j0)
            factor = 1.0 if per_pair else scale                    # (x · 1.0 is x, NaN and ±inf included)
            tile_max[:] = -np.inf                                  # one pass: scale, causal select, tile max
            for c in range(cols):
                first = j0 + c - delta - i0 if diagonal else 0     # query i0 + r sees key j0 + c iff r >= first
                for r in range(rows):
                    x = st[c, r] * factor
                    if not per_pair:                               # a score that is not finite: NaN
                        x = x if abs(x) < np.inf else np.nan
                    x = x if r >= first else -np.inf
                    st[c, r] = x
                    tile_max[r] = x if (x > tile_max[r] or x != x) else tile_max[r]   # NaN propagates
            online_softmax_step(st, rows, cols, tile_max, run_max, shift, run_sum, acc)
            if not tile_values(st, v, v_row_finite, b, j0, cols, rows, pv, acc):   # selection: 0·NaN must not enter
                for c in range(cols):
                    for r in range(rows):
                        if _visible(visibility, b, i0 + r, j0 + c):
                            for e in range(d_v):
                                acc[r, e] += st[c, r] * v[b, j0 + c, e]
        for r in range(rows):
            i = i0 + r
            if run_max[r] == -np.inf:                              # no visible key: the policy decides
                lse[b, i] = -np.inf
                empty_row(policy, vmean, acc, r, out, b, i)
            else:
                lse[b, i] = run_max[r] + np.log(run_sum[r])
                for e in range(d_v):
                    out[b, i, e] = acc[r, e] / run_sum[r]


@jit_inline
def _visible(visibility, b, i, j):  # pragma: no cover - jitted
    """Query i of batch row b may attend to key j: causal, boolean mask, bias not -inf (lengths: by the caller)."""
    ok = not visibility.causal or j <= i + visibility.delta
    if ok and visibility.mask.shape[0] > 0:
        ok = visibility.mask[visibility.mask_index[b], i, j]
    if ok and visibility.bias.shape[0] > 0:
        ok = visibility.bias[visibility.bias_index[b], i, j] != -np.inf
    return ok


@jit_inline
def _select_per_pair(st, scale, visibility, b, i0, j0):  # pragma: no cover - jitted
    """Scaled scores, bias added, of the visible pairs; -inf for the others (st is (cols, rows), transposed).

    Row by row, so that the (n, m) mask and bias are read along their contiguous axis.
    """
    cols, rows = st.shape
    bias, bias_index = visibility.bias, visibility.bias_index
    for r in range(rows):
        i = i0 + r
        for c in range(cols):
            x = st[c, r] * scale
            x = x if abs(x) < np.inf else np.nan                   # a score that is not finite: NaN
            if _visible(visibility, b, i, j0 + c):
                if bias.shape[0] > 0:
                    x = x + bias[bias_index[b], i, j0 + c]
                st[c, r] = x
            else:
                st[c, r] = -np.inf


@jit
def finite_rows(v):  # pragma: no cover - jitted
    """out[b, j] = every entry of v[b, j] is finite; v (B, m, d_v), out (B, m) bool. No other temporary."""
    B, m, d_v = v.shape
    out = np.empty((B, m), dtype=np.bool_)
    for b in range(B):
        for j in range(m):
            ok = True
            for e in range(d_v):
                if not np.isfinite(v[b, j, e]):
                    ok = False
                    break
            out[b, j] = ok
    return out


@jit_inline
def online_softmax_step(st, rows, cols, tile_max, run_max, shift, run_sum, acc):  # pragma: no cover - jitted
    """One tile of the online softmax: rescale ℓ_i and acc_i to the new running maximum, then st ← e^{st − μ_i}.

    ``st`` (cols, rows) holds the tile's scores transposed (−∞ where hidden) and receives the
    weights; ``tile_max`` the tile's largest score per row (NaN propagates). Shared by the blocked
    and BSR kernels.
    """
    for r in range(rows):                                          # rescale ℓ_i and acc_i to the new maximum
        mu_old = run_max[r]
        mu_new = mu_old if (mu_old != mu_old or tile_max[r] <= mu_old) else tile_max[r]
        run_max[r] = mu_new
        shift[r] = 0.0 if mu_new == -np.inf else mu_new            # nothing visible yet: every weight is 0
        if mu_new != mu_old:
            alpha = vexp(mu_old - shift[r])                        # exp(−inf) = 0 on the first visible key
            run_sum[r] *= alpha
            for e in range(acc.shape[1]):
                acc[r, e] *= alpha
    for c in range(cols):                                          # p = exp(s − μ_i); ℓ_i += Σ p
        for r in range(rows):
            p = vexp(st[c, r] - shift[r])
            st[c, r] = p
            run_sum[r] += p


@jit_inline
def empty_row(policy, vmean, acc, r, out, b, i):  # pragma: no cover - jitted
    """Output row i of a query that sees no key, by the policy code (acc_r is 0, or NaN from 0·inf)."""
    for e in range(out.shape[2]):
        if policy == 1:
            out[b, i, e] = np.nan
        elif policy == 2:
            out[b, i, e] = vmean[b, e] + acc[r, e]
        else:
            out[b, i, e] = 0.0 + acc[r, e]


@jit_inline
def tile_values(st, v, v_row_finite, b, j0, cols, rows, pv, acc):  # pragma: no cover - jitted
    """acc += P_IJ V_J through BLAS (``pv`` its scratch) when the value tile is finite; False, with nothing
    added, when one of its rows holds NaN/Inf (the caller then adds the visible pairs by selection)."""
    for jj in range(j0, j0 + cols):
        if not v_row_finite[b, jj]:
            return False
    np.dot(st.T, v[b, j0:j0 + cols], pv)
    for r in range(rows):
        for e in range(acc.shape[1]):
            acc[r, e] += pv[r, e]
    return True
