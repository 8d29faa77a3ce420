r"""Axis and shape helpers shared by the oracle's modules: layouts, grouped-query heads, broadcast sums.

    layout "bhnd"   (..., h, n, d)   PyTorch SDPA                          swap_heads: axes −3 ↔ −2
    layout "bnhd"   (..., n, h, d)   FlashAttention, xFormers, JAX BTNH
    grouped-query   h query heads over h_kv key/value heads; query head i reads head i // (h / h_kv)
    broadcast       the gradient of an input broadcast in the forward pass is summed back to its shape
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.checks import as_float
from ..common.groups import kv_groups, repeat_over_groups, sum_over_groups

__all__ = [
    "LAYOUTS",
    "LAYOUT_SHAPES",
    "as_upstream_gradient",
    "kv_groups",
    "other_layout",
    "repeat_over_groups",
    "sum_over_groups",
    "sum_to_shape",
    "swap_heads",
]

LAYOUTS = ("bhnd", "bnhd")
LAYOUT_SHAPES = {"bhnd": "(..., h, n, d)", "bnhd": "(..., n, h, d)"}


def other_layout(layout: str) -> str:
    """The layout that is not ``layout``."""
    return "bnhd" if layout == "bhnd" else "bhnd"


def swap_heads(x: NDArray | None) -> NDArray | None:
    """Swap the head and sequence axes (−3 and −2), turning one layout into the other; ``None`` stays."""
    return None if x is None else np.swapaxes(x, -2, -3)


def sum_to_shape(x: NDArray, shape: tuple[int, ...]) -> NDArray:
    """Sum ``x`` over the axes along which an array of ``shape`` was broadcast to ``x.shape``."""
    lead = x.ndim - len(shape)
    if lead > 0:
        x = x.sum(axis=tuple(range(lead)))
    axes = tuple(i for i, size in enumerate(shape) if size == 1 and x.shape[i] != 1)
    if axes:
        x = x.sum(axis=axes, keepdims=True)
    return x.reshape(shape)


def as_upstream_gradient(name: str, d: ArrayLike, shape: tuple[int, ...], inputs: str, dtype=np.float64) -> NDArray:
    """``d`` as a ``dtype`` array, or a ``ValueError`` unless it has the forward output's shape exactly.

    ``inputs`` names the forward inputs and their shapes, for the message.
    """
    d = as_float(name, d, dtype)
    if d.shape != tuple(shape):
        raise ValueError(f"{name} has shape {d.shape} but the forward output has shape {tuple(shape)} ({inputs})")
    return d
