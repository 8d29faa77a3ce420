r"""Merging attention over disjoint key sets from (output, log-sum-exp) pairs: online softmax's identity.

For one query with scores s_j, split the keys into disjoint sets a and b:

    ℓ_a = log Σ_{j∈a} e^{s_j},   o_a = Σ_{j∈a} e^{s_j − ℓ_a} v_j      (likewise b)
    ℓ   = log(e^{ℓ_a} + e^{ℓ_b}) = logaddexp(ℓ_a, ℓ_b)
    o   = e^{ℓ_a − ℓ} o_a + e^{ℓ_b − ℓ} o_b

This is how FlashAttention combines key blocks, split-K / flash-decoding combines partial results,
and ring attention combines devices.
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.checks import as_float, broadcast_batch

__all__ = ["merge_attention"]


def merge_attention(
    out_a: ArrayLike, lse_a: ArrayLike, out_b: ArrayLike, lse_b: ArrayLike
) -> tuple[NDArray, NDArray]:
    r"""Combine attention over two disjoint key sets into attention over their union.

    .. math::

        \ell = \log\big(e^{\ell_a} + e^{\ell_b}\big), \qquad
        o = e^{\ell_a - \ell}\, o_a + e^{\ell_b - \ell}\, o_b

    Parameters
    ----------
    out_a : (..., n, d_v) array_like
        Attention output over the first key set (as returned by
        :func:`~refattn.scaled_dot_product_attention` with that set's mask).
    lse_a : (..., n) array_like
        Its log-sum-exp per query (``return_lse=True``), ``-inf`` where the query sees no key of
        the set.
    out_b : (..., n, d_v) array_like
        Attention output over the second, disjoint key set.
    lse_b : (..., n) array_like
        Its log-sum-exp per query.

    Returns
    -------
    out : (..., n, d_v) ndarray
        Attention output over both sets. A query that sees neither set gets 0 (the "zero" policy).
    lse : (..., n) ndarray
        Log-sum-exp over both sets; ``-inf`` for a query that sees neither.

    Notes
    -----
    Derivation. Attention of one query over a key set *a* with scores :math:`s_j` is

    .. math::

        o_a = \frac{\sum_{j\in a} e^{s_j} v_j}{\sum_{j\in a} e^{s_j}}
            = e^{-\ell_a} \sum_{j\in a} e^{s_j} v_j,
        \qquad \ell_a = \log \sum_{j\in a} e^{s_j},

    so the unnormalised sum is recovered as :math:`\sum_{j\in a} e^{s_j} v_j = e^{\ell_a} o_a`.
    For disjoint *a* and *b* both the numerator and the denominator of the union's softmax split:

    .. math::

        o = \frac{e^{\ell_a} o_a + e^{\ell_b} o_b}{e^{\ell_a} + e^{\ell_b}}
          = e^{\ell_a - \ell}\, o_a + e^{\ell_b - \ell}\, o_b,
        \qquad \ell = \log(e^{\ell_a} + e^{\ell_b}).

    The weights :math:`e^{\ell_a - \ell}` and :math:`e^{\ell_b - \ell}` are in [0, 1] and sum to
    1, so the merge never overflows (``logaddexp`` evaluates :math:`\ell` as
    :math:`\max + \log(1 + e^{-|\ell_a - \ell_b|})`). This is the rescaling step of the online
    softmax: a running output is multiplied by :math:`e^{\ell_\text{old} - \ell_\text{new}}` when
    a new block of keys raises the normaliser. The merge is commutative and associative (up to
    rounding), so any number of parts can be combined in any tree.

    An empty part (:math:`\ell_a = -\infty`) has weight exactly 0 and its output, whatever its
    fully-masked policy made of it (zero, NaN or uniform), is selected away, so the other part
    passes through unchanged. Both parts empty gives :math:`\ell = -\infty` and a zero output.

    References
    ----------
    .. [1] M. Milakov, N. Gimelshein, "Online normalizer calculation for softmax",
       arXiv:1805.02867v2, Alg. 3.
    .. [2] T. Dao et al., "FlashAttention: Fast and Memory-Efficient Exact Attention with
       IO-Awareness", NeurIPS 2022, arXiv:2205.14135v2, §3.1 and Alg. 1 (lines 10–12).

    Examples
    --------
    >>> from refattn import scaled_dot_product_attention as sdpa
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 6, 4))
    >>> first = np.arange(6) < 2                                     # keys 0, 1 | keys 2 … 5
    >>> out_a, lse_a = sdpa(q, k, v, first, return_lse=True)
    >>> out_b, lse_b = sdpa(q, k, v, ~first, return_lse=True)
    >>> out, lse = merge_attention(out_a, lse_a, out_b, lse_b)
    >>> full, full_lse = sdpa(q, k, v, return_lse=True)
    >>> bool(np.allclose(out, full, rtol=1e-13, atol=1e-13)), bool(np.allclose(lse, full_lse, rtol=1e-13))
    (True, True)
    """
    out_a, lse_a, out_b, lse_b = (
        as_float(name, x) for name, x in (("out_a", out_a), ("lse_a", lse_a), ("out_b", out_b), ("lse_b", lse_b))
    )
    for out_name, out, lse_name, lse in (("out_a", out_a, "lse_a", lse_a), ("out_b", out_b, "lse_b", lse_b)):
        if out.ndim < 1 or lse.shape != out.shape[:-1]:
            raise ValueError(
                f"{lse_name} has shape {lse.shape} but {out_name} has shape {out.shape}; "
                f"expected {lse_name} of shape {out.shape[:-1]} (one log-sum-exp per query)"
            )
    if out_a.shape[-1] != out_b.shape[-1]:
        raise ValueError(f"out_a has d_v={out_a.shape[-1]} but out_b has d_v={out_b.shape[-1]} "
                         f"(shapes {out_a.shape}, {out_b.shape})")
    broadcast_batch({"lse_a": lse_a.shape, "lse_b": lse_b.shape})

    lse = np.logaddexp(lse_a, lse_b)                               # (..., n)  ℓ = log(e^ℓa + e^ℓb)
    empty_a, empty_b = lse_a == -np.inf, lse_b == -np.inf
    with np.errstate(invalid="ignore"):                            # −inf − (−inf) where both are empty
        w_a = np.where(empty_a, 0.0, np.exp(lse_a - lse))[..., None]   # (..., n, 1)  e^{ℓa − ℓ}
        w_b = np.where(empty_b, 0.0, np.exp(lse_b - lse))[..., None]   # (..., n, 1)  e^{ℓb − ℓ}
        part_a = np.where(empty_a[..., None], 0.0, w_a * out_a)    # an empty part is selected away
        part_b = np.where(empty_b[..., None], 0.0, w_b * out_b)
    return part_a + part_b, lse
