r"""Masks as every function in refattn reads them: one polarity, masking by selection.

Convention: a boolean mask is ``True`` where query *i* **may attend** to key *j* (as PyTorch's
``scaled_dot_product_attention`` and JAX; note that ``torch.nn.MultiheadAttention``'s
``key_padding_mask`` and boolean ``attn_mask`` use the opposite). A float mask is an additive bias;
its ``-inf`` entries mask by selection, exactly like ``False``. :func:`attention_mask` resolves a
mask and a ``causal`` argument (:func:`refattn.common.causal_alignment`) into the allowed pairs and
the bias; the mask builders are :mod:`refattn.core.causal_mask` and :mod:`refattn.core.padding_mask`, and
:func:`allowed_pairs` gives the pairs a mechanism's figure and ``AttentionResult.allowed`` show.
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .common.checks import causal_alignment

__all__ = ["allowed_pairs", "attention_mask", "causal_rows", "check_key_lengths", "check_mask_shape", "key_padding"]


def attention_mask(
    mask, causal, n: int, m: int, dtype, rows: range | None = None
) -> tuple[NDArray | None, NDArray | None]:
    """Resolve ``mask`` and ``causal`` into ``(allowed, bias)``.

    ``allowed`` is a boolean array broadcastable to ``(..., n, m)`` (``None`` when every pair is
    allowed) and ``bias`` an additive float array (``None`` when there is none). The ``-inf``
    entries of a float mask move into ``allowed``, so that they mask by selection. ``rows`` (a
    range of query rows) restricts both to those rows: ``(..., len(rows), m)``.
    """
    allowed = bias = None
    rows = range(n) if rows is None else rows
    if mask is not None:
        mask = check_mask_shape(mask, n, m)
        if mask.ndim >= 2 and mask.shape[-2] == n and len(rows) != n:
            mask = mask[..., rows.start:rows.stop, :]
        if mask.dtype == np.bool_:
            allowed = mask
        elif mask.dtype.kind == "f":
            bias = mask.astype(dtype, copy=False)
            allowed = bias != -np.inf
        else:
            raise TypeError(
                f"mask must be bool (True = may attend) or float (additive bias), got dtype "
                f"{mask.dtype} with shape {mask.shape}"
            )
    alignment = causal_alignment(causal)
    if alignment is not None:
        tri = causal_rows(rows, m, 0 if alignment == "top-left" else m - n)
        allowed = tri if allowed is None else allowed & tri
    return allowed, bias


def check_mask_shape(mask: ArrayLike, n: int, m: int) -> NDArray:
    """Return ``mask`` as an array, or raise ``ValueError`` unless it broadcasts to (..., n, m)."""
    mask = np.asarray(mask)
    tail = (1,) * max(0, 2 - mask.ndim) + tuple(mask.shape[-2:])
    if mask.ndim < 1 or tail[0] not in (1, n) or tail[1] not in (1, m):
        raise ValueError(
            f"mask has shape {mask.shape}, which does not broadcast to the scores' shape (..., n={n}, m={m})"
        )
    return mask


def causal_rows(rows: range, m: int, delta: int) -> NDArray:
    """The causal mask's query rows ``rows`` (validated): ``j <= i + delta``, of shape (len(rows), m).

    The equation path takes the rows of one chunk of queries at a time, without the n × m mask.
    """
    i = np.arange(rows.start, rows.stop)[:, None]                  # (rows, 1)
    j = np.arange(m)[None, :]                                      # (1, m)
    return j <= i + delta                                          # (rows, m)


def allowed_pairs(mask, causal, shape: tuple[int, ...], fully_masked: str = "zero"):
    """The pairs a row may see under ``mask`` and ``causal``, broadcast to the weights' ``shape`` (or None).

    Under ``fully_masked="uniform"`` a row that may see no key attends to every key, uniformly: it uses them all.
    """
    allowed, _ = attention_mask(mask, causal, shape[-2], shape[-1], np.float64)
    if allowed is None:
        return None
    allowed = np.broadcast_to(allowed, shape)
    if fully_masked == "uniform":
        allowed = allowed | ~allowed.any(axis=-1, keepdims=True)
    return allowed


def check_key_lengths(key_lengths: ArrayLike, m: int) -> NDArray:
    """``key_lengths`` as an int64 array with values in [0, m], or a ``TypeError``/``ValueError``."""
    lengths = np.asarray(key_lengths)
    if lengths.dtype.kind not in "iu":
        raise TypeError(f"key_lengths must be an integer array, got dtype {lengths.dtype} with shape {lengths.shape}")
    if lengths.size and (lengths.min() < 0 or lengths.max() > m):
        raise ValueError(
            f"key_lengths must lie in [0, m={m}], got values in [{lengths.min()}, {lengths.max()}]"
        )
    return lengths.astype(np.int64, copy=False)


def key_padding(lengths: NDArray, m: int) -> NDArray:
    """The key padding mask of checked ``lengths`` (:func:`check_key_lengths`): j < lengths[b], shape (..., 1, m)."""
    return (np.arange(m) < lengths[..., None])[..., None, :]       # (..., 1, m)
