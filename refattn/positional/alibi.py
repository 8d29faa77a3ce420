r"""Attention with linear biases, ALiBi (Press et al., 2022, arXiv:2108.12409, §3, Fig. 3).

No position is added to the inputs; each head h adds to its scores a penalty linear in the distance:

    S_ij = q_iᵀk_j · scale − m_h·(i − j)          the paper's causal form (j ≤ i)
    S_ij = q_iᵀk_j · scale − m_h·|i − j|          the symmetric form for encoders (``form="symmetric"``)

with fixed slopes m_h. For h a power of two they are the geometric sequence 2^(−8/h), 2^(−16/h), …,
2^(−8) (§3); for other h the official code (``get_slopes`` in ``fairseq/models/transformer.py`` of
ofirpress/attention_with_linear_biases) takes the slopes of the closest power of two below, h' = 2^⌊log₂ h⌋,
then every other slope of 2h' (2^(−8/2h'·1), 2^(−8/2h'·3), …) until there are h.

ALiBi appeared after the survey (its §5.1 covers positional representations up to mid-2021); it is
filed under that section.

Positions: query i sits at position i (bottom-right: i + m − n, the n queries being the last n of
the m positions), key j at position j; the relative distance is i − j.

The official causal code adds m_h·j instead of −m_h·(i − j): the two differ by m_h·i, a constant
along each row, so softmax gives the same weights (the code's own comment says so). The causal form
is meant with the causal mask; without it the bias −m_h·(i − j) also rewards the future keys j > i,
which is what the equation says and rarely what is wanted (use the symmetric form).
"""
from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.budget import check_fits
from ..common.checks import as_float, causal_alignment, check_bool, check_choice, check_qkv
from ..common.ints import check_non_negative_int, check_positive_int
from ..core.sdpa import scaled_dot_product_attention
from ..deprecation import renamed
from ..mechanism import Mechanism

__all__ = ["ALIBI_FORMS", "alibi_attention", "alibi_bias", "alibi_slopes"]

PRESS = ('O. Press, N. A. Smith, M. Lewis, 2022, "Train Short, Test Long: Attention with Linear Biases Enables '
         'Input Length Extrapolation", ICLR 2022, arXiv:2108.12409')
#: The causal form −m·(i − j) of the paper and the symmetric form −m·|i − j| for encoders.
ALIBI_FORMS = ("causal", "symmetric")
#: The registry's default slope: the first head's of an 8-head model, 2^(−8/8).
DEFAULT_SLOPE = 0.5


def alibi_slopes(num_heads: int) -> NDArray:
    r"""The slopes :math:`m_1 … m_h` of the paper (§3) and the official code's rule for other h.

    .. math::

        m_t = 2^{-8t/h}, \quad t = 1 … h \qquad (h = 2^a)

    Otherwise, with h' = 2^⌊log₂ h⌋: the h' slopes of h', then
    :math:`2^{-8(2t - 1)/(2h')}` for t = 1 … h − h' (every other slope of 2h').

    Parameters
    ----------
    num_heads : int
        h ≥ 1.

    Returns
    -------
    (h,) ndarray

    References
    ----------
    .. [1] O. Press, N. A. Smith, M. Lewis, "Train Short, Test Long", ICLR 2022, arXiv:2108.12409, §3;
       official code github.com/ofirpress/attention_with_linear_biases, ``fairseq/models/transformer.py``,
       ``TransformerDecoder.__init__``'s ``get_slopes``.

    Examples
    --------
    >>> alibi_slopes(4)
    array([0.25      , 0.0625    , 0.015625  , 0.00390625])
    >>> alibi_slopes(6)[4:]                                        # 2^(−8·1/8), 2^(−8·3/8): every other of h = 8
    array([0.5  , 0.125])
    """
    h = check_positive_int("num_heads", num_heads)
    closest = 2 ** int(math.floor(math.log2(h)))                   # h', the power of two at most h
    first = np.power(2.0, -8.0 * np.arange(1, closest + 1) / closest)          # 2^(−8t/h'), t = 1 … h'
    odd = np.arange(1, 2 * (h - closest), 2)                                   # 1, 3, 5, … of 2h'
    return np.concatenate([first, np.power(2.0, -8.0 * odd / (2 * closest))])


def _check_slopes(slopes) -> NDArray:
    """(h,) finite slopes >= 0."""
    slopes = as_float("slopes", slopes)
    if slopes.ndim != 1 or not np.isfinite(slopes).all() or (slopes < 0).any():
        raise ValueError(f"slopes must be a 1-D array of finite numbers >= 0 (one per head), got shape "
                         f"{slopes.shape}")
    return slopes


@renamed(alignment="causal")
def alibi_bias(n: int, m: int | None = None, *, slopes: ArrayLike, form: str = "causal",
               causal: bool | str = False) -> NDArray:
    r"""The (h, n, m) bias :math:`B_{h,ij} = -m_h (p_i - j)` or :math:`-m_h |p_i - j|`.

    Parameters
    ----------
    n : int
        Number of queries.
    m : int, optional
        Number of keys; default n.
    slopes : (h,) array_like
        :math:`m_h`, e.g. :func:`alibi_slopes`.
    form : {"causal", "symmetric"}, default "causal"
        −m·(i − j) (the paper's, with the causal mask) or −m·|i − j| (encoders).
    causal : {False, True, "top-left", "bottom-right"}, default False
        Where the queries sit: query i at position p_i = i, or i + m − n with "bottom-right". Only the
        positions: the bias masks nothing. (The old name ``alignment=`` is deprecated.)

    Returns
    -------
    B : (h, n, m) ndarray

    Examples
    --------
    >>> alibi_bias(3, slopes=[0.5], form="symmetric")[0]
    array([[-0. , -0.5, -1. ],
           [-0.5, -0. , -0.5],
           [-1. , -0.5, -0. ]])
    """
    n = check_non_negative_int("n", n)
    m = n if m is None else check_non_negative_int("m", m)
    slopes = _check_slopes(slopes)
    check_choice("form", form, ALIBI_FORMS)
    shift = m - n if causal_alignment(causal) == "bottom-right" else 0
    check_fits("the ALiBi bias", (slopes.size, n, m))
    distance = (np.arange(n) + shift)[:, None] - np.arange(m)[None, :]        # (n, m)  i − j
    if form == "symmetric":
        distance = np.abs(distance)                                            # |i − j|
    return -slopes[:, None, None] * distance                                   # (h, n, m)  −m_h·(i − j)


def alibi_attention(q: ArrayLike, k: ArrayLike, v: ArrayLike, *, slopes: ArrayLike | float | None = None,
                    form: str = "causal", causal: bool | str = False, scale: float | None = None,
                    return_weights: bool = False) -> NDArray | tuple[NDArray, NDArray]:
    r"""Multi-head softmax attention with ALiBi's per-head linear distance penalty.

    .. math::

        \mathrm{out}_h = \operatorname{softmax}\big(Q_h K_h^\top \cdot \mathrm{scale} + B_h\big)\, V_h,
        \qquad B_{h,ij} = -m_h\,(i - j)

    Parameters
    ----------
    q : (..., h, n, d_k) array_like
        Each head's queries (the head axis is third from last); (..., n, d_k) for one head with a scalar
        ``slopes``.
    k : (..., h, m, d_k) array_like
    v : (..., h, m, d_v) array_like
    slopes : (h,) array_like or float, optional
        Default :func:`alibi_slopes` (h). A number is the slope of one head: q, k, v are then one head's,
        (..., n, d_k), (..., m, d_k), (..., m, d_v), with no head axis (the registry's form).
    form : {"causal", "symmetric"}, default "causal"
        As in :func:`alibi_bias`.
    causal : {False, True, "top-left", "bottom-right"}, default False
        The causal mask, by selection; "bottom-right" also places query i at position i + m − n.
    scale : float, optional
        Default :math:`1/\sqrt{d_k}`.
    return_weights : bool, default False
        Also return the (..., h, n, m) weights.

    Returns
    -------
    out : (..., h, n, d_v) ndarray
        (..., n, d_v) for a scalar ``slopes``.
    weights : (..., h, n, m) ndarray
        Only if ``return_weights``; (..., n, m) for a scalar ``slopes``.

    Notes
    -----
    With every slope 0 this is softmax attention exactly.

    References
    ----------
    .. [1] O. Press, N. A. Smith, M. Lewis, "Train Short, Test Long", ICLR 2022, arXiv:2108.12409, §3.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 2, 8, 4, 16))            # batch 2, 8 heads, n = m = 4
    >>> out, A = alibi_attention(q, k, v, causal=True, return_weights=True)
    >>> out.shape, A.shape
    ((2, 8, 4, 16), (2, 8, 4, 4))
    """
    return_weights = check_bool("return_weights", return_weights)
    one_head = slopes is not None and np.ndim(slopes) == 0
    min_ndim = 2 if one_head else 3
    q, k, v = (as_float(x, y, min_ndim=min_ndim) for x, y in (("q", q), ("k", k), ("v", v)))
    check_qkv(q, k, v)
    if one_head:
        slopes = np.array([_check_slope(slopes)])                             # (1,)
    else:
        h = q.shape[-3]
        slopes = alibi_slopes(h) if slopes is None else _check_slopes(slopes)
        if slopes.size != h:
            raise ValueError(f"slopes has {slopes.size} entries but q has {h} heads (shape {q.shape}, "
                             f"(..., h, n, d_k))")
    B = alibi_bias(q.shape[-2], k.shape[-2], slopes=slopes, form=form, causal=causal)   # (h, n, m)
    if one_head:
        B = B[0]                                                                   # (n, m)
    return scaled_dot_product_attention(q, k, v, B, causal=causal, scale=scale, return_weights=return_weights)


def _check_slope(slope) -> float:
    """One head's slope: a finite number >= 0."""
    if isinstance(slope, bool) or not isinstance(slope, (int, float, np.integer, np.floating, np.ndarray)):
        raise TypeError(f"slopes must be a real number (one head) or an array (one per head), got "
                        f"{type(slope).__name__}")
    if not (np.isreal(slope) and np.isfinite(slope) and slope >= 0):
        raise ValueError(f"slopes must be a finite number >= 0, got {slope!r}")
    return float(slope)


RECORD = Mechanism.of(
    alibi_attention, defaults={"slopes": DEFAULT_SLOPE}, renamed={"slope": "slopes"},   # one head, slope 1/2
    id="alibi", title="Attention with linear biases (ALiBi)", family="positional", section="5.1",
    paper=PRESS,
    equation=r"\operatorname{softmax}\big(q_i^\top k_j/\sqrt{d_k} - m_h\,(i - j)\big),\quad m_t = 2^{-8t/h}",
    time="O(h·n·m·d)", memory="O(h·n·m)", causal=True,
    position_dependent=True, figure="refattn.figures.alibi:alibi",
    examples=({"form": "symmetric"}, {"slopes": 2.0**-8}, {"slopes": 2.0, "form": "symmetric"}),
    exact_options={"slopes": 0.0}, exact_limit="slope 0 (no bias)",
)
