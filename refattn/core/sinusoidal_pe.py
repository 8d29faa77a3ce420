r"""Sinusoidal positional encoding (Vaswani et al., 2017, §3.5).

    PE(pos, 2i)   = sin(pos / base^{2i/d_model})
    PE(pos, 2i+1) = cos(pos / base^{2i/d_model})          base = 10000

Each (sin, cos) pair is a point on a circle turning at frequency ω_i = base^{−2i/d_model}, so
moving k positions is a fixed rotation by k·ω_i of every pair, whatever pos is: "for any fixed
offset k, PE_{pos+k} can be represented as a linear function of PE_{pos}" (§3.5).
"""
from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from ..common.checks import check_choice
from ..common.ints import check_positive_int
from ..mechanism import Mechanism
from ..papers import VASWANI

__all__ = ["sinusoidal_positional_encoding", "sinusoidal_rotation"]

LAYOUTS = ("interleaved", "concatenated")


def sinusoidal_positional_encoding(
    num_positions: int, d_model: int, base: float = 10000.0, *, layout: str = "interleaved"
) -> NDArray:
    r"""The fixed sinusoidal positional encodings of positions ``0 … num_positions − 1``.

    .. math::

        PE_{(pos, 2i)} = \sin\!\big(pos / 10000^{2i/d_{model}}\big), \qquad
        PE_{(pos, 2i+1)} = \cos\!\big(pos / 10000^{2i/d_{model}}\big)

    Parameters
    ----------
    num_positions : int
        Number of positions.
    d_model : int
        Encoding width; must be even (one sin and one cos per frequency).
    base : float, default 10000.0
        The paper's 10000.
    layout : {"interleaved", "concatenated"}, default "interleaved"
        "interleaved" is the paper's (sin in even columns, cos in odd ones). "concatenated" puts
        all sines first, then all cosines (tensor2tensor, fairseq, many RoPE codes); it is the
        same encoding with its columns permuted.

    Returns
    -------
    pe : (num_positions, d_model) ndarray

    References
    ----------
    .. [1] A. Vaswani et al., "Attention Is All You Need", NeurIPS 2017, arXiv:1706.03762v7, §3.5.

    Examples
    --------
    >>> pe = sinusoidal_positional_encoding(3, 4)
    >>> pe[0]                                  # sin 0 = 0, cos 0 = 1
    array([0., 1., 0., 1.])
    >>> bool(np.isclose(pe[2, 2], np.sin(2 / 100.0)))   # 10000^(2/4) = 100
    True
    """
    check_positive_int("num_positions", num_positions)
    omega = _frequencies(d_model, base)                            # (d_model/2,)  ω_i
    angle = np.arange(num_positions)[:, None] * omega[None, :]     # (P, d_model/2)  pos·ω_i
    return _arrange(np.sin(angle), np.cos(angle), layout)          # (P, d_model)


def sinusoidal_rotation(
    offset: float, d_model: int, base: float = 10000.0, *, layout: str = "interleaved"
) -> NDArray:
    r"""The matrix :math:`R_k` with :math:`PE_{pos+k} = PE_{pos} R_k` for every position.

    .. math::

        R_k = \bigoplus_i \begin{pmatrix} \cos k\omega_i & -\sin k\omega_i \\
                                          \sin k\omega_i & \cos k\omega_i \end{pmatrix},
        \qquad \omega_i = 10000^{-2i/d_{model}}

    acting on each (sin, cos) pair of the row vector :math:`PE_{pos}`.

    Parameters
    ----------
    offset : float
        The shift *k* (any real number).
    d_model : int
        Encoding width (even).
    base : float, default 10000.0
        As in :func:`sinusoidal_positional_encoding`.
    layout : {"interleaved", "concatenated"}, default "interleaved"
        Must match the encoding it acts on.

    Returns
    -------
    R : (d_model, d_model) ndarray
        Orthogonal, block-diagonal (up to the layout's column permutation).

    Examples
    --------
    >>> pe = sinusoidal_positional_encoding(10, 6)
    >>> bool(np.allclose(pe[3] @ sinusoidal_rotation(4, 6), pe[7]))
    True
    """
    if isinstance(offset, bool) or not isinstance(offset, (int, float, np.integer, np.floating)):
        raise TypeError(f"offset must be a real number, got {type(offset).__name__}")
    phi = offset * _frequencies(d_model, base)                     # (d_model/2,)  k·ω_i
    c, s = np.cos(phi), np.sin(phi)
    sin_cols, cos_cols = _columns(d_model, layout)
    R = np.zeros((d_model, d_model))
    # row vector [sin θ, cos θ] @ R = [sin(θ+φ), cos(θ+φ)]
    R[sin_cols, sin_cols], R[cos_cols, sin_cols] = c, s            # sin(θ+φ) = sinθ cosφ + cosθ sinφ
    R[sin_cols, cos_cols], R[cos_cols, cos_cols] = -s, c           # cos(θ+φ) = cosθ cosφ − sinθ sinφ
    return R


def _frequencies(d_model: int, base: float) -> NDArray:
    check_positive_int("d_model", d_model)
    if d_model % 2:
        raise ValueError(f"d_model must be even (a sin and a cos per frequency), got {d_model}")
    if isinstance(base, bool) or not isinstance(base, (int, float, np.integer, np.floating)) or not base > 0:
        raise ValueError(f"base must be a positive real number, got {base!r}")
    two_i = np.arange(0, d_model, 2)                               # 2i
    return np.power(float(base), -two_i / d_model)                 # ω_i = base^{−2i/d_model}


def _columns(d_model: int, layout: str) -> tuple[NDArray, NDArray]:
    check_choice("layout", layout, LAYOUTS)
    half = np.arange(d_model // 2)
    if layout == "interleaved":
        return 2 * half, 2 * half + 1
    return half, half + d_model // 2


def _arrange(sin: NDArray, cos: NDArray, layout: str) -> NDArray:
    d_model = 2 * sin.shape[-1]
    sin_cols, cos_cols = _columns(d_model, layout)
    pe = np.empty((sin.shape[0], d_model))
    pe[:, sin_cols], pe[:, cos_cols] = sin, cos
    return pe


RECORD = Mechanism(
    id="sinusoidal_pe", title="Sinusoidal positional encoding", family="vanilla", section="2.1 (Vaswani §3.5)",
    paper=VASWANI,
    equation=r"PE_{(pos,2i)} = \sin(pos/10000^{2i/d}),\ PE_{(pos,2i+1)} = \cos(pos/10000^{2i/d})",
    time="O(n·d)", memory="O(n·d)", kind="component", function=sinusoidal_positional_encoding, causal=True,
    figure="refattn.figures.vanilla:sinusoidal_pe", exact_options=None, exact_limit="a component (no apply)",
)
