r"""CSR sparse attention kernel: time and memory proportional to the kept pairs.

For every query *i* (rows in parallel), over its kept keys j ∈ J_i only::

    s_j = scale · q_i · k_j            one dot product per kept pair
    α_j = exp(s_j − max s) / Σ exp(s − max s)
    out_i = Σ_j α_j v_j

An optional additive bias per kept pair enters as s_j = scale · q_i · k_j + b_j; a pair whose bias
is −∞ is left out by selection (its weight is 0 whatever its score, and its value is never read), as
a −∞ bias or a False mask entry is in :func:`~refattn.scaled_dot_product_attention`.

Nothing of size n × m exists: the scratch is one row's scores. Keys outside J_i are never read, so
NaN or Inf stored there cannot reach the output. A score that is not finite (an Inf or NaN in q_i
or k_j, or a dot product beyond the float64 range, whose rounding to ±inf or NaN depends on the
order of summation) is NaN, as in the equation path and the blocked kernel: its row is NaN.
"""
from __future__ import annotations

import numpy as np

from .._jit import jit_parallel, prange
from ..common.checks import check_scale
from . import check_kernel_array, check_kernel_indices, check_policy

__all__ = ["check_pattern_inputs", "sparse_attention_csr"]


def sparse_attention_csr(q, k, v, pattern, scale, policy, out, weights, bias=None) -> None:
    """q (B, n, d), k (B, m, d), v (B, m, d_v) → out (B, n, d_v) and weights (B, nnz), or (B, 0) to skip them.

    ``pattern`` = (indptr, indices), the kept pairs in CSR form: indptr (n + 1,) int64 from 0 to
    nnz, never decreasing; indices (nnz,) of a signed integer type, in [0, m). ``scale`` a finite
    float; ``policy``: the fully-masked policy code 0/1/2. Every array the kernel indexes is checked
    first: a wrong shape, dtype, layout or index raises ``ValueError``/``TypeError`` naming it.
    ``bias``: (B, nnz) float64, added to each kept pair's score (−∞ leaves the pair out); None: no bias.
    """
    bias = check_pattern_inputs(q, k, v, pattern, out, weights, bias)
    indptr, indices = pattern
    _csr_loop(q, k, v, (indptr, indices), check_scale(scale), check_policy(policy), out, weights, bias)


def check_pattern_inputs(q, k, v, pattern, out, weights, bias):
    """The bias as the kernels take it ((B, 0) for none), after checking every array they index.

    q (B, n, d), k (B, m, d), v (B, m, d_v), out (B, n, d_v); ``pattern`` = (indptr (n + 1,) int64
    from 0 to nnz, never decreasing; indices (nnz,) of a signed integer type, in [0, m)); weights
    (B, 0) or (B, nnz); bias None or (B, nnz): what the CSR and BSR kernels index.
    ``ValueError``/``TypeError`` naming the argument otherwise.
    """
    B, n, d = check_kernel_array("q", q, (None, None, None))
    m = check_kernel_array("k", k, (B, None, d))[1]
    d_v = check_kernel_array("v", v, (B, m, None))[2]
    check_kernel_array("out", out, (B, n, d_v), writeable=True)
    indptr, indices = pattern
    nnz = check_kernel_array("indices", indices, (None,), "int")[0]
    check_kernel_indices("indptr", indptr, (n + 1,), 0, nnz, np.int64)
    if indptr[0] != 0 or indptr[-1] != nnz or np.any(np.diff(indptr) < 0):
        raise ValueError(f"indptr must start at 0, never decrease, and end at len(indices) = {nnz}")
    check_kernel_indices("indices", indices, (nnz,), 0, m - 1)
    weights_shape = check_kernel_array("weights", weights, (B, None), writeable=True)
    if weights_shape[1] not in (0, nnz):
        raise ValueError(f"weights must have shape (B, 0) or (B, nnz) = ({B}, {nnz}), got shape {weights_shape}")
    if bias is None:
        return np.zeros((B, 0))
    check_kernel_array("bias", bias, (B, nnz))
    return bias


@jit_parallel
def _csr_loop(q, k, v, pattern, scale, policy, out, weights, bias):  # pragma: no cover - jitted
    """The kernel of :func:`sparse_attention_csr` (its arguments, checked)."""
    indptr, indices = pattern
    B, n, d = q.shape
    m, d_v = v.shape[1], v.shape[2]
    keep_weights = weights.shape[1] > 0
    has_bias = bias.shape[1] > 0
    for t in prange(B * n):
        b, i = t // n, t % n
        lo, hi = indptr[i], indptr[i + 1]
        s = np.empty(hi - lo)
        s_max = -np.inf
        for p in range(lo, hi):                                    # s_j = scale · q_i·k_j (+ b_j)
            j = indices[p]
            acc = 0.0
            for c in range(d):
                acc += q[b, i, c] * k[b, j, c]
            x = acc * scale
            x = x if abs(x) < np.inf else np.nan                   # a score that is not finite: NaN
            if has_bias:
                x = -np.inf if bias[b, p] == -np.inf else x + bias[b, p]   # −∞: left out by selection
            s[p - lo] = x
            if s[p - lo] > s_max:
                s_max = s[p - lo]
        has_nan = False
        for p in range(hi - lo):
            if np.isnan(s[p]):
                has_nan = True
        for c in range(d_v):
            out[b, i, c] = 0.0
        if s_max == -np.inf and not has_nan:                       # no key left: the policy decides
            for c in range(d_v):
                if policy == 1:
                    out[b, i, c] = np.nan
                elif policy == 2:                                  # uniform over all m keys
                    acc = 0.0
                    for j in range(m):
                        acc += (1.0 / m) * v[b, j, c]
                    out[b, i, c] = acc
            if keep_weights:                                       # pairs all left out by their bias
                for p in range(lo, hi):
                    weights[b, p] = np.nan if policy == 1 else (1.0 / m if policy == 2 else 0.0)
            continue
        total = 0.0
        for p in range(hi - lo):                                   # e_j = exp(s_j − max s)
            s[p] = np.exp(s[p] - s_max)
            total += s[p]
        for p in range(lo, hi):                                    # out_i = Σ_j α_j v_j
            alpha = s[p - lo] / total
            if keep_weights:
                weights[b, p] = alpha
            if has_bias and bias[b, p] == -np.inf:                # left out: its value is never read
                continue
            j = indices[p]
            for c in range(d_v):
                out[b, i, c] += alpha * v[b, j, c]
