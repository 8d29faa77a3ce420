r"""Blocked backward pass of scaled dot-product attention (FlashAttention-2, Algorithm 2), float64.

Dao, "FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning", ICLR 2024,
arXiv:2307.08691, Algorithm 2. The forward pass kept, per query row *i*, its output
:math:`O_i` and its log-sum-exp :math:`L_i = \log \sum_j e^{S_{ij}}`
(:mod:`refattn.kernels.blocked`). The backward pass never stores the weights: for every pair of a
key tile *J* and a query tile *I* it recomputes them from :math:`L_i`::

    s_ij  = scale · q_i·k_j (+ b_ij)            only for visible pairs (selection, as forwards)
    p_ij  = exp(s_ij − L_i)                     = A_ij exactly as softmax defines it
    dp_ij = dO_i·v_j
    ds_ij = p_ij (dp_ij − D_i),   D_i = dO_i·O_i   (= Σ_j p_ij dp_ij, computed once per row)
    dV_J += P_IJᵀ dO_I,  dK_J += scale · dS_IJᵀ Q_I,  dQ_I += scale · dS_IJ K_J,  dB_IJ = dS_IJ

:math:`p_{ij} = e^{s_{ij} - L_i}` is the softmax weight itself, not an approximation:
:math:`e^{s_{ij}} / \sum_l e^{s_{il}} = e^{s_{ij} - \log \sum_l e^{s_{il}}}`. Nothing of size n × m
exists (except ``d_bias`` when a bias was given, an input of that size): the scratch of one task is
a few (block_k × block_q) tiles and the (block_k × d) accumulators of its key tile.

Layout, as in the forward kernel: tiles are transposed, ``S_JIᵀ = K_J Q_Iᵀ`` (keys × queries), so
the scores are the very products the forward kernel computed, and every per-query quantity
(``L_i``, ``D_i``) is a contiguous vector of the inner loop. The five tile products go through BLAS
(``np.dot``); a tile pair that touches a row of q, k, v or dO holding NaN/Inf runs the three
accumulations by explicit loops over its visible pairs instead (0 · NaN must not enter).

Parallel strategy: ``prange`` over (batch row, key-tile group) tasks. A task owns the dK, dV rows
of its key tiles and one partial dQ of its batch row (its group's), so no two tasks write the same
entry; the partials are summed afterwards. The number of groups depends on the batch size only
(:data:`KEY_GROUP_TASKS`), never on the thread count, so results do not depend on it. A query
that sees no key (``L_i = -inf``) gets nothing here; the fully-masked policies are applied by the
caller (:func:`refattn.oracle.vjp.sdpa_vjp`).
"""
from __future__ import annotations

import numba
import numpy as np

from .._jit import jit_parallel, prange
from ..common.budget import check_fits
from ..common.checks import check_scale
from ..common.ints import check_positive_int
from . import check_kernel_array
from .blas import serial_blas
from .blocked import _select_per_pair, _visible, check_visibility, finite_rows
from .vexp import vexp

__all__ = ["KEY_GROUP_TASKS", "blocked_attention_vjp", "key_groups"]

KEY_GROUP_TASKS = 8   # split each batch row's key tiles into groups until there are >= 8 tasks (one partial dQ each)


def key_groups(B: int, n_key_tiles: int) -> int:
    """Key-tile groups per batch row: enough for ``KEY_GROUP_TASKS`` tasks, at most one per key tile, at least 1."""
    return max(1, min(n_key_tiles, -(-KEY_GROUP_TASKS // max(B, 1))))


def blocked_attention_vjp(q, k, v, d_out, out, lse, scale, visibility, tiles, dq, dk, dv, d_bias) -> None:
    """Blocked backward over flattened batch rows, after checking what the kernel indexes.

    q (B, n, d), k (B, m, d), v (B, m, d_v), d_out and out (B, n, d_v), lse (B, n) from the forward
    pass with the same ``visibility`` (a :class:`~refattn.kernels.blocked.Visibility`), ``scale``
    and inputs; C-contiguous float64. ``tiles`` = (block_q, block_k). Writes ``dq`` (B, n, d),
    ``dk`` (B, m, d), ``dv`` (B, m, d_v) and, when a bias is given, ``d_bias`` (B, n, m) (else an
    empty (0, 0, 0) array). Rows with ``lse = -inf`` contribute nothing (the caller applies the
    fully-masked policy). A wrong shape, dtype, layout or index raises ``ValueError``/``TypeError``.
    """
    B, n, d = check_kernel_array("q", q, (None, None, None))
    m = check_kernel_array("k", k, (B, None, d))[1]
    d_v = check_kernel_array("v", v, (B, m, None))[2]
    for name, x in (("d_out", d_out), ("out", out)):
        check_kernel_array(name, x, (B, n, d_v))
    check_kernel_array("lse", lse, (B, n))
    for name, x, shape in (("dq", dq, (B, n, d)), ("dk", dk, (B, m, d)), ("dv", dv, (B, m, d_v))):
        check_kernel_array(name, x, shape, writeable=True)
    scale = check_scale(scale)
    causal, delta = check_visibility(visibility, B, n, m)
    visibility = visibility._replace(causal=causal, delta=delta)  # one compiled type
    has_bias = visibility.bias.shape[0] > 0
    check_kernel_array("d_bias", d_bias, (B, n, m) if has_bias else (0, 0, 0), writeable=True)
    block_q, block_k = (check_positive_int("block_size", t) for t in tiles)
    block_q, block_k = min(block_q, max(n, 1)), min(block_k, max(m, 1))
    groups = key_groups(B, -(-m // block_k))
    tasks = min(numba.get_num_threads(), B * groups)
    check_fits(f"the blocked backward's tiles (block_size=({block_q}, {block_k}), one set per running task)",
               (tasks, 4, block_k, block_q))
    check_fits("the blocked backward's partial dq (one per key-tile group)", (groups, B, n, d))
    D = np.einsum("bne,bne->bn", d_out, out)                       # D_i = dO_i·O_i
    D[lse == -np.inf] = 0.0                                        # rows that see no key take no part
    partial = dq[None] if groups == 1 else np.zeros((groups, B, n, d))
    dq[...], dk[...], dv[...] = 0.0, 0.0, 0.0
    if has_bias:
        d_bias[...] = 0.0
    with serial_blas():                                            # BLAS runs inside the kernel's threads
        _backward_loop(q, k, v, d_out, lse, np.ascontiguousarray(D), scale, visibility, (block_q, block_k),
                       partial, dk, dv, d_bias)
    if groups > 1:
        np.sum(partial, axis=0, out=dq)


@jit_parallel
def _backward_loop(q, k, v, d_out, lse, D, scale, visibility, tiles, dq, dk, dv, d_bias):  # pragma: no cover
    """The kernel of :func:`blocked_attention_vjp`; ``dq`` is (groups, B, n, d), zeroed, one partial per group."""
    B, n, d = q.shape
    m, d_v = v.shape[1], v.shape[2]
    groups = dq.shape[0]
    causal, delta, lengths = visibility.causal, visibility.delta, visibility.lengths
    block_q, block_k = tiles
    q_ok, k_ok, v_ok, do_ok = finite_rows(q), finite_rows(k), finite_rows(v), finite_rows(d_out)
    per_pair = visibility.mask.shape[0] > 0 or visibility.bias.shape[0] > 0
    has_bias = d_bias.shape[0] > 0
    n_ktiles = (m + block_k - 1) // block_k
    for t in prange(B * groups):                                   # independent (batch row, key-tile group)
        b, g = t // groups, t % groups
        x_t = np.empty((block_k, block_q))                         # selected scores sᵀ, then dSᵀ
        p_t = np.empty((block_k, block_q))                         # Pᵀ
        dp_t = np.empty((block_k, block_q))                        # dPᵀ = V_J dO_Iᵀ
        q_t = np.empty((d, block_q))                               # Q_Iᵀ
        do_t = np.empty((d_v, block_q))                            # dO_Iᵀ
        dk_acc = np.empty((block_k, d))
        dv_acc = np.empty((block_k, d_v))
        dk_tile = np.empty((block_k, d))
        dv_tile = np.empty((block_k, d_v))
        dq_tile = np.empty((block_q, d))
        shift = np.empty(block_q)                                  # L_i, or 0 for a row that sees no key
        j_stop = min(m, lengths[b])
        for jt in range(g, n_ktiles, groups):
            j0 = jt * block_k
            if j0 >= j_stop:
                break
            cols = min(j_stop, j0 + block_k) - j0
            k_j, v_j = k[b, j0:j0 + cols], v[b, j0:j0 + cols]
            dk_acc[:cols] = 0.0
            dv_acc[:cols] = 0.0
            kv_finite = True
            for jj in range(j0, j0 + cols):
                kv_finite = kv_finite and k_ok[b, jj] and v_ok[b, jj]
            i_start = 0
            if causal:                                             # query i sees key j iff i >= j − delta
                i_start = max(0, j0 - delta)
                i_start -= i_start % block_q
            for i0 in range(i_start, n, block_q):
                i1 = min(n, i0 + block_q)
                rows = i1 - i0
                s_c = x_t.reshape(-1)[:cols * rows].reshape(cols, rows)    # contiguous tile views
                p_c = p_t.reshape(-1)[:cols * rows].reshape(cols, rows)
                dp_c = dp_t.reshape(-1)[:cols * rows].reshape(cols, rows)
                qt_c = q_t.reshape(-1)[:d * rows].reshape(d, rows)
                dot_c = do_t.reshape(-1)[:d_v * rows].reshape(d_v, rows)
                for e in range(d):
                    for r in range(rows):
                        qt_c[e, r] = q[b, i0 + r, e]
                for e in range(d_v):
                    for r in range(rows):
                        dot_c[e, r] = d_out[b, i0 + r, e]
                np.dot(k_j, qt_c, s_c)                             # (cols, rows) K_J Q_Iᵀ, as forwards
                if per_pair:
                    _select_per_pair(s_c, scale, visibility, b, i0, j0)
                else:
                    diagonal = causal and j0 + cols - 1 > i0 + delta
                    for c in range(cols):
                        first = j0 + c - delta - i0 if diagonal else 0
                        for r in range(rows):
                            x = s_c[c, r] * scale
                            x = x if abs(x) < np.inf else np.nan   # a score that is not finite: NaN
                            s_c[c, r] = x if r >= first else -np.inf
                for r in range(rows):
                    L = lse[b, i0 + r]
                    shift[r] = 0.0 if L == -np.inf else L
                for c in range(cols):                              # Pᵀ = exp(sᵀ − L), 0 where not visible
                    for r in range(rows):
                        x = s_c[c, r]
                        p_c[c, r] = 0.0 if x == -np.inf else vexp(x - shift[r])
                np.dot(v_j, dot_c, dp_c)                           # (cols, rows) dPᵀ = V_J dO_Iᵀ
                for c in range(cols):                              # dSᵀ = Pᵀ ⊙ (dPᵀ − D), 0 where not visible
                    for r in range(rows):
                        visible = s_c[c, r] != -np.inf
                        s_c[c, r] = p_c[c, r] * (dp_c[c, r] - D[b, i0 + r]) if visible else 0.0
                if has_bias:
                    for r in range(rows):
                        for c in range(cols):
                            d_bias[b, i0 + r, j0 + c] = s_c[c, r]
                finite = kv_finite
                for ii in range(i0, i1):
                    finite = finite and q_ok[b, ii] and do_ok[b, ii]
                if finite:
                    np.dot(p_c, d_out[b, i0:i1], dv_tile[:cols])   # Pᵀ dO_I
                    np.dot(s_c, q[b, i0:i1], dk_tile[:cols])       # dSᵀ Q_I
                    np.dot(s_c.T, k_j, dq_tile[:rows])             # dS K_J
                    for c in range(cols):
                        for e in range(d_v):
                            dv_acc[c, e] += dv_tile[c, e]
                        for e in range(d):
                            dk_acc[c, e] += dk_tile[c, e]
                    for r in range(rows):
                        for e in range(d):
                            dq[g, b, i0 + r, e] += scale * dq_tile[r, e]
                else:                                              # selection: 0·NaN must not enter
                    for c in range(cols):
                        for r in range(rows):
                            if _visible(visibility, b, i0 + r, j0 + c):
                                p, ds = p_c[c, r], s_c[c, r]
                                for e in range(d_v):
                                    dv_acc[c, e] += p * d_out[b, i0 + r, e]
                                for e in range(d):
                                    dk_acc[c, e] += ds * q[b, i0 + r, e]
                                    dq[g, b, i0 + r, e] += scale * (ds * k_j[c, e])
            for c in range(cols):
                for e in range(d_v):
                    dv[b, j0 + c, e] = dv_acc[c, e]
                for e in range(d):
                    dk[b, j0 + c, e] = scale * dk_acc[c, e]
