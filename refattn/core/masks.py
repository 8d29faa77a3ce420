r"""Masks as every function in refattn reads them: one polarity, masking by selection.

Convention: a boolean mask is ``True`` where query *i* **may attend** to key *j* (as PyTorch's
``scaled_dot_product_attention`` and JAX; note that ``torch.nn.MultiheadAttention``'s
``key_padding_mask`` and boolean ``attn_mask`` use the opposite). A float mask is an additive bias;
its ``-inf`` entries mask by selection, exactly like ``False``. :func:`attention_mask` resolves a
mask and a ``causal`` argument (:func:`refattn.common.causal_alignment`) into the allowed pairs and
the bias; the mask builders are :mod:`refattn.core.causal_mask` and :mod:`refattn.core.padding_mask`.
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common import causal_alignment
from .causal_mask import causal_rows

__all__ = ["attention_mask", "check_mask_shape"]


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
