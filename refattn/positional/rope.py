r"""Rotary position embedding, RoPE (Su et al., 2021, arXiv:2104.09864, §3.4, Eqs. 14-16, 34).

Each pair of dimensions (x₁, x₂) of a query or key at position p is turned by the angle p·θ_i:

    θ_i = base^(−2i/r),  i = 0 … r/2 − 1            base = 10000, r = rotary_dim (default d)
    (x₁, x₂) ↦ (x₁ cos pθ_i − x₂ sin pθ_i,  x₁ sin pθ_i + x₂ cos pθ_i)
    S_ij = (R_{p_i} q_i)ᵀ (R_{p_j} k_j) · scale = q_iᵀ R_{p_j − p_i} k_j · scale

so the score of a pair depends on the positions only through their difference (Eq. 16). The rotated
q and k then go through softmax attention unchanged; values are not rotated.

Named options for the details that differ between implementations:

- ``pairing="interleaved"``: pair i is dimensions (2i, 2i + 1), as in the paper (Eq. 34) and
  GPT-J; ``pairing="half"``: pair i is (i, i + r/2), as in GPT-NeoX and LLaMA (``rotate_half``).
  The two are the same rotation up to a fixed permutation of the dimensions (interleaved dimension
  2i is half-split dimension i, 2i + 1 is i + r/2), so a checkpoint trained with one needs its
  q and k projection rows permuted to run with the other.
- ``rotary_dim``: only the first r dimensions are rotated (GPT-J's ``rotary_dim``, GPT-NeoX's
  ``rotary_pct``); the rest pass through, and θ_i uses r, not d, in its exponent (as both codes).
- ``scaling``: position interpolation (Chen et al., 2023, arXiv:2306.15595): positions are divided
  by the factor s, so a model trained on length L reads length s·L at the angles it saw.

Positions: query i sits at position i (bottom-right: i + m − n, the n queries being the last n of
the m positions), key j at position j; the relative distance is i − j.
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.checks import as_float, causal_alignment, check_bool, check_choice, check_qkv
from ..common.ints import check_non_negative_int
from ..core.sdpa import scaled_dot_product_attention
from ..mechanism import Mechanism

__all__ = ["ROPE_BASE", "ROPE_PAIRINGS", "rope_attention", "rope_frequencies", "rotate"]

SU = ('J. Su, Y. Lu, S. Pan, A. Murtadha, B. Wen, Y. Liu, 2021, "RoFormer: Enhanced Transformer with Rotary '
      'Position Embedding", arXiv:2104.09864')
#: The paper's base of the angles θ_i = base^(−2i/r) (§3.4, Eq. 15).
ROPE_BASE = 10000.0
#: The two ways of pairing dimensions: the paper's and GPT-J's (2i, 2i + 1), GPT-NeoX's and LLaMA's (i, i + r/2).
ROPE_PAIRINGS = ("interleaved", "half")


def _check_positive(name: str, value) -> float:
    """A finite real number > 0, as a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    if not (np.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def _check_rotary_dim(rotary_dim, d: int) -> int:
    """r: d when None; an even integer in 0 … d."""
    if rotary_dim is None:
        if d % 2:
            raise ValueError(f"RoPE rotates pairs of dimensions: d_k={d} is odd; pass an even rotary_dim <= {d}")
        return d
    r = check_non_negative_int("rotary_dim", rotary_dim)
    if r % 2 or r > d:
        raise ValueError(f"rotary_dim must be even and at most d_k={d} (the last axis of the input), got {r}")
    return r


def rope_frequencies(rotary_dim: int, base: float = ROPE_BASE) -> NDArray:
    r"""The angles per unit position, :math:`\theta_i = \mathrm{base}^{-2i/r}` for i = 0 … r/2 − 1 (Eq. 15).

    Parameters
    ----------
    rotary_dim : int
        r, the number of rotated dimensions (even).
    base : float, default 10000
        The paper's 10000.

    Returns
    -------
    theta : (r/2,) ndarray

    Examples
    --------
    >>> rope_frequencies(4, base=100.0)
    array([1. , 0.1])
    """
    r = check_non_negative_int("rotary_dim", rotary_dim)
    if r % 2:
        raise ValueError(f"rotary_dim must be even (RoPE rotates pairs of dimensions), got {r}")
    base = _check_positive("base", base)
    return np.power(base, -2.0 * np.arange(r // 2) / r) if r else np.zeros(0)


def rotate(x: ArrayLike, positions: ArrayLike, *, base: float = ROPE_BASE, pairing: str = "interleaved",
           rotary_dim: int | None = None, scaling: float = 1.0) -> NDArray:
    r"""Rotate each pair of dimensions of x by its position's angle: RoPE's :math:`R^d_{\Theta, p}\, x`.

    .. math::

        \begin{pmatrix} x'_{a} \\ x'_{b} \end{pmatrix} =
        \begin{pmatrix} \cos \phi_i & -\sin \phi_i \\ \sin \phi_i & \cos \phi_i \end{pmatrix}
        \begin{pmatrix} x_{a} \\ x_{b} \end{pmatrix}, \qquad
        \phi_i = \frac{p}{s}\,\mathrm{base}^{-2i/r}

    with (a, b) = (2i, 2i + 1) interleaved or (i, i + r/2) half-split.

    Parameters
    ----------
    x : (..., T, d) array_like
        Queries or keys, one row per position.
    positions : (T,) array_like of int or float
        p, the position of each row (any finite reals; 0 leaves the row unchanged).
    base : float, default 10000
        The base of θ_i.
    pairing : {"interleaved", "half"}, default "interleaved"
        The paper's and GPT-J's (2i, 2i + 1), or GPT-NeoX's and LLaMA's (i, i + r/2).
    rotary_dim : int, optional
        r, rotate only the first r dimensions (even, at most d); default d (d must then be even).
    scaling : float, default 1
        s, position interpolation's factor: the angle of position p is that of p/s.

    Returns
    -------
    (..., T, d) ndarray
        The rotated rows; dimensions r … d − 1 unchanged. Non-finite entries follow IEEE arithmetic
        (an infinite entry turned by an angle whose sine or cosine is 0 gives NaN in its pair), silently.

    References
    ----------
    .. [1] J. Su et al., "RoFormer: Enhanced Transformer with Rotary Position Embedding", 2021,
       arXiv:2104.09864, §3.4, Eqs. 14-15, 34.
    .. [2] S. Chen, S. Wong, L. Chen, Y. Tian, "Extending Context Window of Large Language Models via
       Positional Interpolation", 2023, arXiv:2306.15595, Eq. 3.

    Examples
    --------
    >>> x = np.array([[1.0, 0.0, 1.0, 0.0]])
    >>> np.round(rotate(x, [np.pi / 2], base=1.0), 12) + 0.0     # θ = (1, 1): each pair turns by 90°
    array([[0., 1., 0., 1.]])
    """
    x = as_float("x", x, min_ndim=2)
    positions = _check_positions("positions", positions, "x", x)
    check_choice("pairing", pairing, ROPE_PAIRINGS)
    r = _check_rotary_dim(rotary_dim, x.shape[-1])
    theta = rope_frequencies(r, base)                              # (r/2,)
    phi = (positions / _check_positive("scaling", scaling))[:, None] * theta  # (T, r/2)  φ = (p/s)·θ_i
    cos, sin = np.cos(phi), np.sin(phi)
    a, b = (slice(0, r, 2), slice(1, r, 2)) if pairing == "interleaved" else (slice(0, r // 2), slice(r // 2, r))
    x1, x2 = x[..., a], x[..., b]                                  # (..., T, r/2) each
    out = x.copy()
    with np.errstate(invalid="ignore"):                            # ±inf·0, inf − inf: IEEE NaN, no warning
        out[..., a] = x1 * cos - x2 * sin
        out[..., b] = x1 * sin + x2 * cos
    return out


def _check_positions(name: str, positions, x_name: str, x: NDArray) -> NDArray:
    """``positions`` as finite floats of shape (T,) for ``x`` (..., T, d); errors name both arguments."""
    positions = np.asarray(positions)
    positions = positions.astype(np.float64) if positions.dtype.kind in "iu" else as_float(name, positions)
    if positions.shape != (x.shape[-2],):
        raise ValueError(f"{name} must have shape (T,) = ({x.shape[-2]},) for {x_name} of shape {x.shape} "
                         f"(..., T, d), got {positions.shape}")
    if not np.isfinite(positions).all():
        raise ValueError(f"{name} must be finite, got {positions!r}")
    return positions


def _default_positions(n: int, m: int, causal) -> tuple[NDArray, NDArray]:
    """Query positions i (bottom-right: i + m − n) and key positions j, as floats."""
    shift = m - n if causal_alignment(causal) == "bottom-right" else 0
    return np.arange(n, dtype=np.float64) + shift, np.arange(m, dtype=np.float64)


def rope_attention(q: ArrayLike, k: ArrayLike, v: ArrayLike, *, causal: bool | str = False, base: float = ROPE_BASE,
                   pairing: str = "interleaved", rotary_dim: int | None = None, scaling: float = 1.0,
                   q_positions: ArrayLike | None = None, k_positions: ArrayLike | None = None,
                   scale: float | None = None, return_weights: bool = False) -> NDArray | tuple[NDArray, NDArray]:
    r"""Softmax attention of the rotated queries and keys (RoFormer, Eq. 16).

    .. math::

        \mathrm{out} = \operatorname{softmax}\!\big((R_{p_i} q_i)^\top (R_{p_j} k_j)\cdot
        \mathrm{scale}\big)\, V

    Parameters
    ----------
    q : (..., n, d_k) array_like
    k : (..., m, d_k) array_like
    v : (..., m, d_v) array_like
    causal : {False, True, "top-left", "bottom-right"}, default False
        The causal mask; "bottom-right" also places query i at position i + m − n.
    base, pairing, rotary_dim, scaling
        As in :func:`rotate`.
    q_positions : (n,) array_like, optional
        Default i (bottom-right: i + m − n).
    k_positions : (m,) array_like, optional
        Default j.
    scale : float, optional
        Default :math:`1/\sqrt{d_k}`.
    return_weights : bool, default False
        Also return the (..., n, m) weights.

    Returns
    -------
    out : (..., n, d_v) ndarray
    weights : (..., n, m) ndarray
        Only if ``return_weights``.

    Notes
    -----
    With every position 0 (or ``rotary_dim=0``) nothing turns and this is softmax attention exactly.

    References
    ----------
    .. [1] J. Su et al., "RoFormer: Enhanced Transformer with Rotary Position Embedding", 2021,
       arXiv:2104.09864, §3.4.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 5, 8))
    >>> out = rope_attention(q, k, v, causal=True)
    >>> shifted = rope_attention(q, k, v, causal=True, q_positions=np.arange(5) + 40.0,
    ...                          k_positions=np.arange(5) + 40.0)     # only i − j matters
    >>> bool(np.allclose(out, shifted, rtol=0, atol=1e-12))
    True
    """
    return_weights = check_bool("return_weights", return_weights)
    q, k, v = as_float("q", q, min_ndim=2), as_float("k", k, min_ndim=2), as_float("v", v, min_ndim=2)
    check_qkv(q, k, v)
    p_q, p_k = _default_positions(q.shape[-2], k.shape[-2], causal)
    options = {"base": base, "pairing": pairing, "rotary_dim": rotary_dim, "scaling": scaling}
    p_q = p_q if q_positions is None else _check_positions("q_positions", q_positions, "q", q)
    p_k = p_k if k_positions is None else _check_positions("k_positions", k_positions, "k", k)
    q_rot = rotate(q, p_q, **options)                              # R_{p_i} q_i
    k_rot = rotate(k, p_k, **options)                              # R_{p_j} k_j
    return scaled_dot_product_attention(q_rot, k_rot, v, causal=causal, scale=scale, return_weights=return_weights)


RECORD = Mechanism.of(
    rope_attention,
    id="rope", title="Rotary position embedding (RoPE)", family="positional", section="5.1.3",
    paper=SU,
    equation=r"\operatorname{softmax}\big((R_{\Theta,i}\, q_i)^\top (R_{\Theta,j}\, k_j)/\sqrt{d_k}\big) V,\quad "
             r"\theta_t = \mathrm{base}^{-2t/r}",
    time="O(n·m·d)", memory="O(n·m)", causal=True,
    position_dependent=True, figure="refattn.figures.rope:rope",
    examples=({"pairing": "half"}, {"rotary_dim": 2}, {"scaling": 4.0, "base": 100.0},
              {"pairing": "half", "rotary_dim": 2, "base": 10.0}),
    exact_options={"rotary_dim": 0}, exact_limit="rotary_dim = 0 (nothing rotates; equally, every position 0)",
)
