"""What the blocked kernels read, in plain NumPy: tile sizes, and inputs flattened to (B, ·, ·) with their visibility.

The forward and backward blocked kernels (:mod:`refattn.kernels.blocked`, :mod:`refattn.kernels.blocked_bwd`),
the sparse family's BSR path, the oracle and the benches all take their tiles and inputs from here; importing
this module loads no Numba.
"""
from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from ..common.budget import check_fits
from ..common.checks import causal_alignment
from ..common.ints import check_positive_int
from . import kernel_rows

__all__ = ["BLAS_ONE_THREAD_WORK", "blocked_inputs", "check_block_size", "default_block_size"]

BLAS_ONE_THREAD_WORK = 2**18     # OpenBLAS runs a product of M·N·K <= this on the calling thread only


def default_block_size(d_k: int, d_v: int) -> tuple[int, int]:
    """Square tiles ``(b, b)``: the largest power of two ``b <= 64`` with ``b·b·max(d_k, d_v) <= 2**18``, or 8.

    Both tile products, ``K_J Q_Iᵀ`` (b·b·d_k) and ``P_IJ V_J`` (b·b·d_v), then stay within OpenBLAS's
    one-thread size, so the only threads are Numba's (one level of parallelism). 64 is where larger
    tiles stopped paying on this machine (d = 32: (64, 64) and (64, 128) equal).

    >>> default_block_size(64, 64), default_block_size(128, 128), default_block_size(1024, 64)
    ((64, 64), (32, 32), (16, 16))
    """
    b = 64
    while b > 8 and b * b * max(d_k, d_v) > BLAS_ONE_THREAD_WORK:
        b //= 2
    return b, b


def check_block_size(block_size, d_k: int, d_v: int) -> tuple[int, int]:
    """``block_size`` (None, an int or a pair of ints >= 1) as ``(block_q, block_k)``; None: the default."""
    if block_size is None:
        return default_block_size(d_k, d_v)
    pair = isinstance(block_size, (tuple, list)) or (isinstance(block_size, np.ndarray) and block_size.ndim > 0)
    sizes = tuple(block_size) if pair else (block_size, block_size)
    if len(sizes) != 2:
        raise ValueError(f"block_size must be a positive int or a pair of them, got {block_size!r}")
    return check_positive_int("block_size", sizes[0]), check_positive_int("block_size", sizes[1])


def blocked_inputs(q: NDArray, k: NDArray, v: NDArray, mask: NDArray | None, causal, key_lengths: NDArray | None,
                   batch: tuple[int, ...]):
    """``([q, k, v] flattened to (B, ·, ·), Visibility)``: what the blocked kernels (forward and backward) read.

    ``mask`` checked by :func:`~refattn.masks.check_mask_shape`, ``key_lengths`` by
    :func:`check_key_lengths`, ``batch`` their broadcast batch shape.
    """
    from .blocked import Visibility  # Numba loads on first use only

    n, m = q.shape[-2], k.shape[-2]
    flat = [kernel_rows(x, batch, x.shape[-2:]) for x in (q, k, v)]   # (B, ·, ·)
    B = flat[0].shape[0]
    no_index = np.zeros(0, dtype=np.int64)
    bool_mask, mask_index = np.zeros((0, 0, 0), dtype=bool), no_index
    bias, bias_index = np.zeros((0, 0, 0)), no_index
    if mask is not None:
        if mask.dtype.kind not in "bf":
            raise TypeError(f"mask must be bool (True = may attend) or float (additive bias), got dtype "
                            f"{mask.dtype} with shape {mask.shape}")
        slabs, index = _mask_slabs(mask, batch, n, m)
        if mask.dtype == np.bool_:
            bool_mask, mask_index = slabs, index
        else:
            bias, bias_index = slabs.astype(np.float64, copy=False), index
    if key_lengths is None:
        lengths = np.full(B, m, dtype=np.int64)
    else:
        lengths = np.ascontiguousarray(np.broadcast_to(key_lengths, batch).reshape(-1))
    alignment = causal_alignment(causal)
    delta = m - n if alignment == "bottom-right" else 0
    return flat, Visibility(alignment is not None, delta, lengths, bool_mask, mask_index, bias, bias_index)


def _mask_slabs(mask: NDArray, batch: tuple[int, ...], n: int, m: int) -> tuple[NDArray, NDArray]:
    """Mask as C-contiguous (S, n, m) slabs and, per flattened batch row, the index of its slab.

    The mask's own leading dims are kept (no copy per head when a mask is shared by the heads). A
    mask that must be broadcast along n or m (a padding mask, a row of biases) is copied, after
    :func:`~refattn.common.check_fits`.
    """
    mask_batch = mask.shape[:-2] if mask.ndim >= 2 else ()
    full = (*mask_batch, n, m)
    itemsize = 1 if mask.dtype == np.bool_ else 8
    if mask.shape != full or not mask.flags.c_contiguous or mask.dtype not in (np.bool_, np.float64):
        check_fits("the mask broadcast to (..., n, m) for the blocked kernel (key_lengths= and causal= need none)",
                   full, itemsize)
    slabs = np.ascontiguousarray(mask if mask.shape == full else np.broadcast_to(mask, full))   # writeable if
    slabs = slabs.reshape(math.prod(mask_batch), n, m)             # the mask is: one compiled kernel type
    index = np.arange(slabs.shape[0], dtype=np.int64).reshape(mask_batch)
    return slabs, np.ascontiguousarray(np.broadcast_to(index, batch).reshape(-1))
