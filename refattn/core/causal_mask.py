r"""The causal (look-ahead) mask (Vaswani et al., 2017, §3.2.3), in its two alignments.

``True`` = may attend, as every mask in refattn (see :mod:`refattn.masks`). Causal alignment,
for ``n`` queries and ``m`` keys::

    top-left     (causal=True)            j <= i            PyTorch is_causal, JAX
    bottom-right (causal="bottom-right")  j <= i + (m - n)  FlashAttention >= 2.1, KV-cache decoding

The two agree when ``n == m``. With bottom-right alignment and ``n > m`` the first ``n - m``
queries see no key at all: they are fully masked rows (see ``fully_masked``).
"""
from __future__ import annotations

from numpy.typing import NDArray

from ..common.checks import causal_alignment
from ..common.ints import check_non_negative_int
from ..deprecation import renamed
from ..masks import causal_rows
from ..mechanism import Mechanism
from ..papers import VASWANI
from .sdpa import scaled_dot_product_attention

__all__ = ["causal_mask"]


@renamed(alignment="causal")
def causal_mask(n: int, m: int | None = None, *, causal: bool | str = True) -> NDArray:
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
    causal : {True, "top-left", "bottom-right"}, default True
        The alignment, as every ``causal`` argument spells it: True or "top-left": query *i* sees
        keys ``j <= i`` (PyTorch ``is_causal``). "bottom-right": the last query is aligned with the
        last key, ``j <= i + (m - n)`` (FlashAttention >= 2.1, and what decoding with a key/value
        cache needs). (The old name ``alignment=`` still works, with a ``DeprecationWarning``.)

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
    >>> causal_mask(2, 4, causal="bottom-right").astype(int)
    array([[1, 1, 1, 0],
           [1, 1, 1, 1]])
    """
    n = check_non_negative_int("n", n)
    m = n if m is None else check_non_negative_int("m", m)
    alignment = causal_alignment(causal)
    if alignment is None:
        raise ValueError("causal_mask is the causal mask: pass causal=True, 'top-left' or 'bottom-right', got "
                         f"causal={causal!r}")
    return causal_rows(range(n), m, 0 if alignment == "top-left" else m - n)


RECORD = Mechanism.of(
    scaled_dot_product_attention, function=causal_mask, options=("scale",),     # sdpa under the look-ahead mask
    id="causal_mask", title="Decoder (look-ahead) mask, top-left and bottom-right", family="vanilla",
    section="2 (Vaswani §3.2.3)", paper=VASWANI, equation=r"M_{ij} = [\,j \le i + \delta\,],\ \delta \in \{0,\ m - n\}",
    time="O(n·m·d)", memory="O(n·m)", kind="mask", noncausal=False, causal=True,
    position_dependent=True, figure="refattn.figures.vanilla:causal_mask", exact_options={},
    exact_limit="exact (sdpa with causal=True or 'bottom-right')",
)
