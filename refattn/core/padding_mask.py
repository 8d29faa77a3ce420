r"""The key padding mask (Vaswani et al., 2017, §3.2.3): keys past a sequence's length get weight 0.

    M[b, 0, j] = [j < ℓ_b]           (..., 1, m), True = may attend; broadcasts over the n queries
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.ints import check_non_negative_int
from ..masks import allowed_pairs, key_padding
from ..mechanism import Mechanism, PerShape
from ..papers import VASWANI
from .sdpa import scaled_dot_product_attention

__all__ = ["padding_mask"]


def padding_mask(lengths: ArrayLike, m: int) -> NDArray:
    r"""Key padding mask: ``True`` for the first ``lengths[b]`` keys of sequence *b*.

    .. math::

        M_{b,1,j} = [\, j < \ell_b \,]

    Parameters
    ----------
    lengths : (...) array_like of int
        Number of real (non-padding) keys per sequence, ``0 <= lengths <= m``.
    m : int
        Padded key length.

    Returns
    -------
    mask : (..., 1, m) ndarray of bool
        Broadcasts against scores ``(..., n, m)`` whose leading dims match ``lengths``'s shape. For
        scores with a head axis ``(B, H, n, m)`` pass ``lengths[:, None]``.

    Examples
    --------
    >>> padding_mask([3, 1], 4).astype(int)
    array([[[1, 1, 1, 0]],
    <BLANKLINE>
           [[1, 0, 0, 0]]])
    """
    lengths = np.asarray(lengths)
    if lengths.dtype.kind not in "iu":
        raise TypeError(f"lengths must be an integer array, got dtype {lengths.dtype}")
    m = check_non_negative_int("m", m)
    if lengths.size and (lengths.min() < 0 or lengths.max() > m):
        raise ValueError(
            f"lengths must lie in [0, m={m}], got values in [{lengths.min()}, {lengths.max()}]"
        )
    return key_padding(lengths, m)                                 # (..., 1, m)


def _padded_pairs(call: dict, weights):
    """The pairs of the call's padding and ``causal``, broadcast to the weights' shape."""
    m = weights.shape[-1]
    return allowed_pairs(padding_mask(call["key_lengths"], m), call["causal"], weights.shape)


RECORD = Mechanism.of(
    scaled_dot_product_attention, function=padding_mask, options=("key_lengths", "scale"),
    defaults={"key_lengths": PerShape(lambda n, m: m - m // 3)},     # the last third of every key sequence is padding
    renamed={"lengths": "key_lengths"}, allowed=_padded_pairs,
    id="padding_mask", title="Key padding mask", family="vanilla", section="2 (Vaswani §3.2.3)", paper=VASWANI,
    equation=r"M_{b,1,j} = [\,j < \ell_b\,]", time="O(n·m·d)", memory="O(n·m)", kind="mask",
    causal=True, figure="refattn.figures.vanilla:padding_mask",
    exact_options=lambda n, m: {"key_lengths": m}, exact_limit="lengths = m (no padding)",
)
