r"""Attention masks: the one polarity, the two causal alignments, key padding.

Convention (used by every function in refattn): a boolean mask is ``True`` where query *i* **may
attend** to key *j* (as PyTorch's ``scaled_dot_product_attention`` and JAX; note that
``torch.nn.MultiheadAttention``'s ``key_padding_mask`` and boolean ``attn_mask`` use the opposite).
A float mask is an additive bias; its ``-inf`` entries mask by selection, exactly like ``False``.

Causal alignment, for ``n`` queries and ``m`` keys::

    top-left     (causal=True)            j <= i            PyTorch is_causal, JAX
    bottom-right (causal="bottom-right")  j <= i + (m - n)  FlashAttention >= 2.1, KV-cache decoding

The two agree when ``n == m``. With bottom-right alignment and ``n > m`` the first ``n - m``
queries see no key at all: they are fully masked rows (see ``fully_masked``).
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common import ALIGNMENTS, causal_alignment, check_choice, check_non_negative_int

__all__ = ["causal_mask", "padding_mask"]

def causal_mask(n: int, m: int | None = None, *, alignment: str = "top-left") -> NDArray:
    r"""Decoder (look-ahead) mask: ``True`` where query *i* may attend to key *j*.

    .. math::

        M_{ij} = [\, j \le i + \delta \,], \qquad
        \delta = 0 \text{ (top-left)}, \quad \delta = m - n \text{ (bottom-right)}

    Parameters
    ----------
    n : int
        Number of queries.
    m : int, optional
        Number of keys. Default ``n``.
    alignment : {"top-left", "bottom-right"}, default "top-left"
        "top-left": query *i* sees keys ``j <= i`` (PyTorch ``is_causal``). "bottom-right": the
        last query is aligned with the last key, ``j <= i + (m - n)`` (FlashAttention >= 2.1, and
        what decoding with a key/value cache needs).

    Returns
    -------
    mask : (n, m) ndarray of bool

    References
    ----------
    .. [1] A. Vaswani et al., "Attention Is All You Need", NeurIPS 2017, arXiv:1706.03762v7, §3.2.3.

    Examples
    --------
    >>> causal_mask(2, 4).astype(int)
    array([[1, 0, 0, 0],
           [1, 1, 0, 0]])
    >>> causal_mask(2, 4, alignment="bottom-right").astype(int)
    array([[1, 1, 1, 0],
           [1, 1, 1, 1]])
    """
    n = check_non_negative_int("n", n)
    m = n if m is None else check_non_negative_int("m", m)
    check_choice("alignment", alignment, ALIGNMENTS)
    delta = 0 if alignment == "top-left" else m - n
    i = np.arange(n)[:, None]                                      # (n, 1)
    j = np.arange(m)[None, :]                                      # (1, m)
    return j <= i + delta                                          # (n, m)


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


def attention_mask(mask, causal, n: int, m: int, dtype) -> tuple[NDArray | None, NDArray | None]:
    """Resolve ``mask`` and ``causal`` into ``(allowed, bias)``.

    ``allowed`` is a boolean array broadcastable to ``(..., n, m)`` (``None`` when every pair is
    allowed) and ``bias`` an additive float array (``None`` when there is none). The ``-inf``
    entries of a float mask move into ``allowed``, so that they mask by selection.
    """
    allowed = bias = None
    if mask is not None:
        mask = check_mask_shape(mask, n, m)
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
        tri = causal_mask(n, m, alignment=alignment)
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
