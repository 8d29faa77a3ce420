r"""The key padding mask (Vaswani et al., 2017, §3.2.3): keys past a sequence's length get weight 0.

    M[b, 0, j] = [j < ℓ_b]           (..., 1, m), True = may attend; broadcasts over the n queries
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common import check_non_negative_int
from ..mechanism import Mechanism
from ..papers import VASWANI

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
    return (np.arange(m) < lengths[..., None])[..., None, :]       # (..., 1, m)


def _apply(q, k, v, *, causal=False, rng=None, return_weights=False, lengths=None, scale=None):
    """sdpa with a key padding mask. ``lengths`` (batch shape, or one length for all) defaults to
    m − ⌊m/3⌋: the last third of every key sequence is padding (``rng`` is not used)."""
    from .sdpa import RECORD as SDPA  # sdpa imports this module

    m = k.shape[-2]                                                # the registry's entry has checked q, k, v
    lengths = m - m // 3 if lengths is None else lengths
    return SDPA.apply(q, k, v, causal=causal, return_weights=return_weights, mask=padding_mask(lengths, m),
                      scale=scale)


RECORD = Mechanism(
    id="padding_mask", title="Key padding mask", family="vanilla", section="2 (Vaswani §3.2.3)", paper=VASWANI,
    equation=r"M_{b,1,j} = [\,j < \ell_b\,]", time="O(n·m·d)", memory="O(n·m)", kind="mask",
    function=padding_mask, apply=_apply, causal=True, figure="refattn.figures.vanilla:padding_mask",
    exact_options=lambda n, m: {"lengths": m}, exact_limit="lengths = m (no padding)",
)
