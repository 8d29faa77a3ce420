r"""Block-sparse (BSR) attention kernel: b × b tiles through BLAS, online softmax across a row's blocks.

A pattern made of b × b blocks (BigBird, block local, sliding windows rounded to blocks,
Longformer in block form) keeps whole tiles of pairs. :func:`block_layout` lists, for every
block row I (queries ``I·b … I·b + b − 1``), the block columns J that hold at least one kept
pair. The kernel then runs FlashAttention's online softmax (as :mod:`refattn.kernels.blocked`,
whose conventions it shares) over the listed tiles only::

    S_JIᵀ = K_J Q_Iᵀ                                 one BLAS product per listed tile
    s_ij  = scale · S_ij (+ b_ij)   if (i, j) is kept, −∞ otherwise
    μ', ℓ_i, acc_i                                   updated as in the blocked kernel
    acc_I += P_IJ V_J                                second BLAS product

and ``out_i = acc_i / ℓ_i``. A tile whose rows keep every key of the block (read from the CSR
pattern in O(1) per row: its indices are strictly increasing) takes the fast path; a partial
tile (the diagonal blocks of a window, a block cut by a bias) is masked within the tile by
selection, pair by pair, from the pattern's CSR row. The pattern itself stays the reference:
whatever the block size, the kernel computes exactly the pairs the pattern keeps, with the same
per-pair bias (CSR order) as :func:`~refattn.kernels.csr.sparse_attention_csr`, so the two
agree to rounding. Only the speed depends on how much of each listed tile is kept
(:func:`block_layout`'s ``area`` against the pattern's nnz).

Selection rules are the CSR kernel's: a pair that is not kept, or whose bias is −∞, is never used
(its score is −∞ and its value is read only by the BLAS product of a tile whose values are all
finite; a value tile holding NaN/Inf is multiplied by explicit loops over the visible pairs); a
kept score that is not finite is NaN and makes its row NaN; a row with no visible pair follows
the fully-masked policy (0 zero, 1 NaN, 2 uniform: the mean of all m values).

Nothing of size n × m exists: a task (one batch row × one block row, ``prange``) holds one b × b
score tile, the transposed query tile and the accumulator. With weights requested, a second sweep
over the row's tiles writes each kept pair's ``exp(s_ij − lse_i)`` in CSR order.
"""
from __future__ import annotations

import numpy as np

from .._jit import jit, jit_parallel, prange
from ..common.checks import check_scale
from ..common.ints import check_positive_int
from . import POLICY_CODES, check_kernel_array, check_kernel_indices, check_policy
from .blas import serial_blas
from .blocked import empty_row, finite_rows, online_softmax_step, tile_values
from .csr import check_pattern_inputs

__all__ = ["block_layout", "sparse_attention_bsr"]


def block_layout(indptr, indices, n: int, m: int, block_size: int) -> tuple[np.ndarray, np.ndarray, int]:
    """The b × b blocks of an n × m CSR pattern that hold a kept pair: ``(block_indptr, block_indices, area)``.

    ``block_indptr`` (ceil(n/b) + 1,) and ``block_indices`` list, per block row, its block columns
    in increasing order; ``area`` is the number of (query, key) pairs those tiles cover (edge
    tiles cut to n and m), so ``nnz / area`` is the fraction of the computed tile entries that the
    pattern keeps. O(nnz + number of blocks), no n × m array.
    """
    b = check_positive_int("block_size", block_size)
    check_kernel_array("indices", indices, (None,), "int")
    check_kernel_indices("indptr", indptr, (n + 1,), 0, len(indices), np.int64)
    check_kernel_indices("indices", indices, (len(indices),), 0, m - 1)
    return _block_layout(indptr, indices, n, m, b)


@jit
def _block_layout(indptr, indices, n, m, b):  # pragma: no cover - jitted
    n_bq, n_bk = (n + b - 1) // b, (m + b - 1) // b
    stamp = np.full(n_bk, -1, dtype=np.int64)                      # last block row that listed block column J
    block_indptr = np.zeros(n_bq + 1, dtype=np.int64)
    block_indices = np.empty(0, dtype=np.int64)
    for sweep in range(2):                                         # count, then list
        if sweep == 1:
            block_indptr = np.cumsum(block_indptr)
            block_indices = np.empty(block_indptr[-1], dtype=np.int64)
            stamp[:] = -1
        for big in range(n_bq):
            at = block_indptr[big]
            for i in range(big * b, min(n, big * b + b)):
                p, end = indptr[i], indptr[i + 1]
                while p < end:
                    col = indices[p] // b
                    if stamp[col] != big:
                        stamp[col] = big
                        if sweep == 0:
                            block_indptr[big + 1] += 1
                        else:
                            block_indices[at] = col
                            at += 1
                    last = min(m, col * b + b) - 1                 # the block's last key; rows are strictly
                    jump = p + last - indices[p]                   # increasing, so it sits at `jump` at most
                    if jump < end and indices[jump] == last:
                        p = jump + 1                               # the row holds the rest of the block
                    else:
                        p += 1
            if sweep == 1:
                block_indices[block_indptr[big]:at].sort()
    area = 0
    for big in range(n_bq):
        rows = min(n, big * b + b) - big * b
        for p in range(block_indptr[big], block_indptr[big + 1]):
            area += rows * (min(m, block_indices[p] * b + b) - block_indices[p] * b)
    return block_indptr, block_indices, area


def sparse_attention_bsr(q, k, v, pattern, blocks, scale, policy, out, weights, bias=None) -> None:
    """q (B, n, d), k (B, m, d), v (B, m, d_v) → out (B, n, d_v) and weights (B, nnz), or (B, 0) to skip them.

    ``pattern`` = (indptr, indices), the kept pairs in CSR form as for
    :func:`~refattn.kernels.csr.sparse_attention_csr`, each row strictly increasing (as
    :class:`~refattn.sparse.SparsePattern` guarantees; an unsorted row is not checked, O(nnz) on
    every call, and loses pairs, but nothing is read or written out of bounds); ``blocks`` =
    (block_indptr, block_indices, block_size) from :func:`block_layout` of the same pattern. ``scale`` a finite float;
    ``policy`` the fully-masked policy code 0/1/2; ``bias`` (B, nnz) float64 per kept pair
    (−∞ leaves it out) or None. Every array the kernel indexes is checked first: a wrong shape,
    dtype, layout or index raises ``ValueError``/``TypeError`` naming it.
    """
    bias = check_pattern_inputs(q, k, v, pattern, out, weights, bias)
    B, n, m, d_v = q.shape[0], q.shape[1], k.shape[1], v.shape[2]
    indptr, indices = pattern
    block_indptr, block_indices, b = blocks
    b = check_positive_int("block_size", b)
    n_bq, n_bk = -(-n // b), -(-m // b)
    check_kernel_indices("block_indptr", block_indptr, (n_bq + 1,), 0, len(block_indices), np.int64)
    check_kernel_indices("block_indices", block_indices, (len(block_indices),), 0, n_bk - 1, np.int64)
    policy = check_policy(policy)
    vmean = np.zeros((B, d_v))
    if policy == POLICY_CODES["uniform"] and m:
        vmean = (v * (1.0 / m)).sum(axis=1)                        # the CSR kernel's Σ_j (1/m) v_j
    with serial_blas():                                            # BLAS runs inside the kernel's threads
        _bsr_loop(q, k, v, (indptr, indices), (block_indptr, block_indices, b), check_scale(scale), policy, vmean,
                  out, weights, bias)


@jit_parallel
def _bsr_loop(q, k, v, pattern, blocks, scale, policy, vmean, out, weights, bias):  # pragma: no cover - jitted
    """The kernel of :func:`sparse_attention_bsr` (its arguments, checked)."""
    indptr, indices = pattern
    block_indptr, block_indices, bs = blocks
    B, n, d = q.shape
    m, d_v = v.shape[1], v.shape[2]
    keep_weights = weights.shape[1] > 0
    has_bias = bias.shape[1] > 0
    v_row_finite = finite_rows(v)
    n_bq = (n + bs - 1) // bs
    for t in prange(B * n_bq):                                     # independent (batch row, block row)
        bb = t // n_bq
        big = t % n_bq
        i0 = big * bs
        i1 = min(n, i0 + bs)
        rows = i1 - i0
        run_max = np.full(rows, -np.inf)                           # μ_i
        run_sum = np.zeros(rows)                                   # ℓ_i
        acc = np.zeros((rows, d_v))
        q_t = np.ascontiguousarray(q[bb, i0:i1].T)                 # (d, rows): Q_Iᵀ
        s_t = np.empty((bs, rows))                                 # scores, then weights, transposed
        seen = np.empty((bs, rows), dtype=np.bool_)                # visible pairs of a partial tile
        pv = np.empty((rows, d_v))
        tile_max = np.empty(rows)
        shift = np.empty(rows)
        cursor = np.empty(rows, dtype=np.int64)                    # each row's next CSR position
        lse = np.empty(rows)
        empty = np.zeros(rows, dtype=np.bool_)                     # no visible pair: the policy's row
        for sweep in range(2 if keep_weights else 1):              # 1: the weights, from lse
            for r in range(rows):
                cursor[r] = indptr[i0 + r]
            for bp in range(block_indptr[big], block_indptr[big + 1]):
                j0 = block_indices[bp] * bs
                j1 = min(m, j0 + bs)
                cols = j1 - j0
                st = s_t[:cols]
                np.dot(k[bb, j0:j1], q_t, st)                      # (cols, rows) K_J Q_Iᵀ (BLAS)
                full = not has_bias and sweep == 0
                for r in range(rows):                              # whole row of the tile kept? O(1)
                    p, end = cursor[r], indptr[i0 + r + 1]
                    while p < end and indices[p] < j0:            # (pairs of unlisted blocks: none)
                        p += 1
                    cursor[r] = p
                    if not (p + cols <= end and indices[p] == j0 and indices[p + cols - 1] == j1 - 1):
                        full = False
                tile_max[:] = -np.inf
                if full:                                           # every pair kept: scale, NaN, max
                    for c in range(cols):
                        for r in range(rows):
                            x = st[c, r] * scale
                            x = x if abs(x) < np.inf else np.nan
                            st[c, r] = x
                            tile_max[r] = x if (x > tile_max[r] or x != x) else tile_max[r]
                    for r in range(rows):
                        cursor[r] += cols
                else:                                              # select pair by pair from the CSR row
                    for r in range(rows):
                        p, end = cursor[r], indptr[i0 + r + 1]
                        for c in range(cols):
                            x = -np.inf
                            if p < end and indices[p] == j0 + c:
                                x = st[c, r] * scale
                                x = x if abs(x) < np.inf else np.nan
                                if has_bias:
                                    x = -np.inf if bias[bb, p] == -np.inf else x + bias[bb, p]
                                if sweep == 1 and not empty[r]:    # the weight of pair p
                                    weights[bb, p] = np.exp(x - lse[r])
                                p += 1
                            st[c, r] = x
                            seen[c, r] = x != -np.inf
                            tile_max[r] = x if (x > tile_max[r] or x != x) else tile_max[r]
                        cursor[r] = p
                if sweep == 1:
                    continue
                online_softmax_step(st, rows, cols, tile_max, run_max, shift, run_sum, acc)
                if not tile_values(st, v, v_row_finite, bb, j0, cols, rows, pv, acc):   # by selection: no 0·NaN
                    for c in range(cols):
                        for r in range(rows):
                            if full or seen[c, r]:
                                for e in range(d_v):
                                    acc[r, e] += st[c, r] * v[bb, j0 + c, e]
            if sweep == 0:
                for r in range(rows):
                    i = i0 + r
                    if run_max[r] == -np.inf:                      # no visible key: the policy decides
                        empty_row(policy, vmean, acc, r, out, bb, i)
                        empty[r] = True
                        if keep_weights:                           # every pair left out
                            for p in range(indptr[i], indptr[i + 1]):
                                weights[bb, p] = np.nan if policy == 1 else (1.0 / m if policy == 2 else 0.0)
                    else:
                        lse[r] = run_max[r] + np.log(run_sum[r])   # for the weights' sweep
                        for e in range(d_v):
                            out[bb, i, e] = acc[r, e] / run_sum[r]
