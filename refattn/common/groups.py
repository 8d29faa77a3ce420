"""Grouped-query attention: h query heads reading h_kv key/value heads, head i reading i // (h / h_kv)."""
from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

__all__ = ["grouped_kv", "kv_groups", "repeat_over_groups", "sum_over_groups"]


def kv_groups(q: NDArray, k: NDArray, v: NDArray) -> int:
    """Query heads per key/value head (1 without grouped-query attention); arrays in (..., h, n, d).

    Grouped-query attention (Ainslie et al., 2023, arXiv:2305.13245v3): ``h`` query heads share
    ``h_kv`` key/value heads, query head ``i`` reading head ``i // (h / h_kv)`` (PyTorch's
    ``repeat_interleave`` under ``enable_gqa``, FlashAttention); the oracle and
    :func:`~refattn.scaled_dot_product_attention` use this one rule.

    Parameters
    ----------
    q : (..., h, n, d_k) ndarray
        Queries.
    k : (..., h_kv, m, d_k) ndarray
        Keys.
    v : (..., h_kv, m, d_v) ndarray
        Values.

    Returns
    -------
    int
        ``h // h_kv``; 1 when the heads are equal or an array has no head axis. Raises
        ``ValueError`` when ``k`` and ``v`` have different heads or ``h`` is not a multiple of ``h_kv``.
    """
    if q.ndim < 3 or k.ndim < 3 or k.shape[-3] == q.shape[-3]:
        return 1
    h, h_kv = q.shape[-3], k.shape[-3]
    if v.ndim < 3 or v.shape[-3] != h_kv:
        raise ValueError(f"k has h_kv={h_kv} heads but v has shape {v.shape}; they must have the same heads")
    if h % h_kv:
        raise ValueError(
            f"q has h={h} heads but k has h_kv={h_kv} (q shape {q.shape}, k shape {k.shape}): grouped-query "
            "attention needs h divisible by h_kv"
        )
    return h // h_kv


def repeat_over_groups(x: NDArray, groups: int) -> NDArray:
    """(..., h_kv, m, d) → (..., h, m, d): each key/value head repeated for its group (``repeat_interleave``).

    Parameters
    ----------
    x : (..., h_kv, m, d) ndarray
        Keys or values.
    groups : int
        Query heads per key/value head (:func:`kv_groups`).

    Returns
    -------
    (..., h_kv·groups, m, d) ndarray
    """
    return x if groups == 1 else np.repeat(x, groups, axis=-3)


def sum_over_groups(g: NDArray, groups: int) -> NDArray:
    """(..., h, m, d) gradient of :func:`repeat_over_groups`'s output → (..., h_kv, m, d), summed over each group.

    Parameters
    ----------
    g : (..., h, m, d) ndarray
        Gradient with respect to the repeated keys or values.
    groups : int
        Query heads per key/value head (:func:`kv_groups`).

    Returns
    -------
    (..., h // groups, m, d) ndarray
    """
    if groups == 1:
        return g
    return g.reshape(*g.shape[:-3], g.shape[-3] // groups, groups, *g.shape[-2:]).sum(axis=-3)


def grouped_kv(q: NDArray, k: NDArray, v: NDArray) -> tuple[NDArray, NDArray, int]:
    """``(k, v, groups)`` with the key/value heads repeated over their query groups (``enable_gqa=True``).

    Parameters
    ----------
    q : (..., h, n, d_k) ndarray
        Queries.
    k : (..., h_kv, m, d_k) ndarray
        Keys, ``h`` divisible by ``h_kv`` (:func:`kv_groups`).
    v : (..., h_kv, m, d_v) ndarray
        Values.

    Returns
    -------
    (k, v, groups)
        Keys and values with ``h`` heads, and ``h // h_kv``. A ``ValueError`` naming the shapes for
        arrays without a head axis.
    """
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.ndim < 3:
            raise ValueError(f"enable_gqa=True needs {name} with a head axis, (..., h, length, dim), "
                             f"got shape {x.shape}")
    groups = kv_groups(q, k, v)
    return repeat_over_groups(k, groups), repeat_over_groups(v, groups), groups
