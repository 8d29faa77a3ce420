r"""Multi-scale multi-head self-attention (Guo, Qiu, Liu, Xue and Zhang, 2020; survey §4.6).

Each head has a fixed scale ω: head i of a layer attends only to the keys within ω_i positions of its query,

    C(x_t, ω) = [x_{t−ω}, …, x_{t+ω}]
    head_i = softmax(q_t C(K W_i^K, ω_i)ᵀ / √d_k) C(V W_i^V, ω_i)
    MSMSA(H, Ω) = Concat(head_1, …, head_h) Wᴼ,   Ω = [ω_1, …, ω_h]

so one layer sees several scales at once, as a bank of convolutions of several widths would. A scale at
least as long as the sequence is an ordinary head: with every ω_i ≥ max(n, m) − 1 this is multi-head
attention. The paper classifies text, with no causal form; ``causal=True`` here keeps the window's past
half (the ω_i previous positions and the query's own), by selection.

Scales across layers: the paper chooses the scales of each layer from an analysis of BERT's heads (the
attention distance of each head, layer by layer): lower layers favour small scales, higher layers larger
ones, and every layer keeps heads of several scales (the survey, §4.6 and its Fig. 13, summarises it so).
:func:`layer_windows` builds such a table from a list of scales; its rule (each layer spreads its heads over
a run of half the scales, the run sliding from the smallest scales at the first layer to the largest at the
last) is this library's reading of that principle, not a table copied from the paper: the paper's exact
per-layer head counts were not available when this was written, and should be checked against its §4
before a result is compared with its experiments. The scale of one head is its half-width ω (the window
holds 2ω + 1 positions), as C(x_t, ω) above.
"""
from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.budget import check_fits
from ..common.checks import as_float, causal_alignment, check_sizes
from ..common.ints import check_positive_int
from ..core.multi_head import (
    MultiHeadParams,
    combine_heads,
    drawn_width,
    init_multi_head,
    layer_inputs,
    project_heads,
    resolve_params,
)
from ..core.sdpa import scaled_dot_product_attention
from ..draws import given_or_drawn, note_allowed, optional_rng
from ..mechanism import Mechanism

__all__ = ["layer_windows", "multi_scale_attention", "multi_scale_mask"]

GUO = ('Q. Guo, X. Qiu, P. Liu, X. Xue, Z. Zhang, 2020, "Multi-Scale Self-Attention for Text Classification", '
       'AAAI 2020, arXiv:1912.00544')


def _check_windows(windows) -> NDArray:
    """The scales as a 1-D array of ints >= 0, one per head."""
    arr = np.atleast_1d(np.asarray(windows))
    if arr.ndim != 1 or arr.size == 0 or arr.dtype.kind not in "iu" and not (
            arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr))):
        raise ValueError(f"windows must be one integer scale per head (a 1-D sequence of ints >= 0), got {windows!r}")
    if np.any(arr < 0):
        raise ValueError(f"windows must be >= 0 (ω, the half-width of each head's window), got {windows!r}")
    return arr.astype(np.int64)


def multi_scale_mask(windows: ArrayLike, n: int, m: int | None = None, *, causal=False) -> NDArray:
    r"""The pairs each head sees: key *r* within :math:`\omega_i` positions of query *t* (and not after it if causal).

    .. math::

        M^{(i)}_{tr} = [\, |t - r| \le \omega_i \,] \;(\wedge\; [\, r \le t \,] \text{ if causal})

    Parameters
    ----------
    windows : (h,) sequence of int
        The scale ω_i of each head (half-width; the window holds 2ω_i + 1 positions).
    n : int
        Number of queries.
    m : int, optional
        Number of keys; default ``n``.
    causal : {False, True, "top-left", "bottom-right"}, default False
        Query *i* sits at position *i*, or at *i* + m − n with "bottom-right"; causal keeps r ≤ t.

    Returns
    -------
    mask : (h, n, m) ndarray of bool

    Examples
    --------
    >>> multi_scale_mask([0, 1], 4).astype(int)[1]
    array([[1, 1, 0, 0],
           [1, 1, 1, 0],
           [0, 1, 1, 1],
           [0, 0, 1, 1]])
    """
    windows = _check_windows(windows)
    n, m = check_sizes(n, m)
    alignment = causal_alignment(causal)
    check_fits("the heads' window masks", (windows.size, n, m), 8)  # the int (n, m) distances and the bool masks
    t = np.arange(n)[:, None] + (m - n if alignment == "bottom-right" else 0)   # (n, 1)  query positions
    x = t - np.arange(m)[None, :]                                  # (n, m)  t − r
    near = np.abs(x)[None] <= windows[:, None, None]               # (h, n, m)  |t − r| ≤ ω_i
    return near & (x >= 0) if alignment is not None else near


def multi_scale_attention(
    x_q: ArrayLike, x_kv: ArrayLike, params: MultiHeadParams | str | None = None, *, num_heads: int,
    windows: ArrayLike | None = None, causal=False, x_v: ArrayLike | None = None, scale: float | None = None,
    rng=None, return_weights: bool = False,
) -> NDArray | tuple[NDArray, NDArray]:
    r"""Multi-scale multi-head self-attention: head i attends within ω_i positions of its query.

    .. math::

        \operatorname{MSMSA}(H, \Omega) = \operatorname{Concat}(\mathrm{head}_1, \dots, \mathrm{head}_h) W^O,
        \quad \mathrm{head}_i = \operatorname{softmax}\Big(\frac{q_t\, C(K W_i^K, \omega_i)^\top}{\sqrt{d_k}}\Big)
        C(V W_i^V, \omega_i)

    Parameters
    ----------
    x_q : (..., n, d_model) array_like
        Query-side input.
    x_kv : (..., m, d_model) array_like
        Key-side input (and value-side unless ``x_v``).
    params : MultiHeadParams, "identity" or None
        Projections, as in :func:`~refattn.multi_head_attention`. ``None``: drawn from ``rng``
        (:func:`~refattn.init_multi_head`, d_model = the width of ``x_q``). ``"identity"``: one head whose
        projections are the identity.
    num_heads : int
        *h*.
    windows : (h,) sequence of int, optional
        Ω: the scale ω_i of each head, the half-width of its window (it sees 2ω_i + 1 positions). Default
        ω_i = 2i + 1 (1, 3, 5, …), a demonstration.
    causal : {False, True, "top-left", "bottom-right"}, default False
        As in :func:`multi_scale_mask` (the paper's heads are not causal).
    x_v : (..., m, d_model) array_like, optional
        Value-side input.
    scale : float, optional
        Default :math:`1/\sqrt{d_k}` with the per-head width.
    rng : numpy.random.Generator or int, optional
        Draws ``params`` when it is omitted.
    return_weights : bool, default False
        Also return every head's weights.

    Returns
    -------
    out : (..., n, d_model) ndarray
    weights : (..., h, n, m) ndarray
        Only if ``return_weights``.

    References
    ----------
    .. [1] Q. Guo et al., "Multi-Scale Self-Attention for Text Classification", AAAI 2020, arXiv:1912.00544v1, §3.

    Examples
    --------
    >>> from refattn import init_multi_head, multi_head_attention
    >>> rng = np.random.default_rng(0)
    >>> params = init_multi_head(rng, d_model=8, num_heads=2)
    >>> x = rng.standard_normal((6, 8))
    >>> out, A = multi_scale_attention(x, x, params, num_heads=2, windows=[1, 5], return_weights=True)
    >>> int((A[0] > 0).sum(axis=-1).max()), int((A[1] > 0).sum(axis=-1).min())    # 2ω + 1 = 3 keys; all 6
    (3, 6)
    >>> wide = multi_scale_attention(x, x, params, num_heads=2, windows=[5, 5])     # ω >= n − 1
    >>> bool(np.allclose(wide, multi_head_attention(x, x, params, num_heads=2), rtol=0, atol=1e-12))
    True
    """
    check_positive_int("num_heads", num_heads)
    x_q = as_float("x_q", x_q, min_ndim=2)                         # its width sizes drawn parameters
    params = given_or_drawn("multi_scale", "params", params, optional_rng(rng),
                            lambda r: init_multi_head(r, drawn_width(x_q), num_heads), what="its parameters")
    params = resolve_params(params, x_q, num_heads, None)   # "identity": one head, identity projections
    windows = _check_windows(default_windows(num_heads) if windows is None else windows)
    if windows.size != num_heads:
        raise ValueError(f"windows has {windows.size} scales but num_heads={num_heads}")
    x_q, x_kv, x_v = layer_inputs(x_q, x_kv, x_v, params.d_model)
    mask = multi_scale_mask(windows, x_q.shape[-2], x_kv.shape[-2], causal=causal)   # (h, n, m)
    Q = project_heads(x_q, params.w_q, params.b_q, num_heads)      # (..., h, n, d_k)  Q W_iᵠ
    K = project_heads(x_kv, params.w_k, params.b_k, num_heads)     # (..., h, m, d_k)  K W_iᴷ
    V = project_heads(x_v, params.w_v, params.b_v, num_heads)      # (..., h, m, d_v)  V W_iⱽ
    result = scaled_dot_product_attention(Q, K, V, mask=mask, causal=causal, scale=scale,   # (..., h, n, d_v)
                                          return_weights=return_weights)
    heads, A = result if return_weights else (result, None)
    out = combine_heads(heads, params.w_o, params.b_o)             # (..., n, d_model)  Concat(·) Wᴼ
    if not return_weights:
        return out
    note_allowed(lambda: np.broadcast_to(mask, A.shape))
    return out, A


def layer_windows(num_layers: int, num_heads: int, scales: ArrayLike) -> NDArray:
    r"""A (layers × heads) table of scales: small scales low in the stack, large ones high, several in every layer.

    With the K scales sorted, layer l (of L) takes the run of :math:`w = \lceil K/2 \rceil` consecutive
    scales starting at :math:`\lfloor l (K - w) / (L - 1) + \tfrac12 \rfloor`, and spreads its heads over that
    run evenly (head j at offset :math:`\lfloor j (w - 1) / (h - 1) + \tfrac12 \rfloor`).

    Parameters
    ----------
    num_layers : int
        *L*.
    num_heads : int
        *h*.
    scales : sequence of int
        The candidate scales ω (half-widths), in any order.

    Returns
    -------
    windows : (L, h) ndarray of int
        ``windows[l]`` is the ``windows`` argument of layer l.

    Notes
    -----
    The principle is Guo et al.'s (lower layers local, higher layers broader, each layer mixing scales,
    from their analysis of BERT); the rule is this library's, see the module's docstring.

    Examples
    --------
    >>> layer_windows(3, 4, [1, 2, 4, 8, 16, 32])
    array([[ 1,  2,  2,  4],
           [ 4,  8,  8, 16],
           [ 8, 16, 16, 32]])
    """
    L = check_positive_int("num_layers", num_layers)
    h = check_positive_int("num_heads", num_heads)
    scales = np.sort(_check_windows(scales))
    K = scales.size
    width = math.ceil(K / 2)
    starts = [_round_half_up(layer * (K - width) / (L - 1)) if L > 1 else 0 for layer in range(L)]
    offsets = [_round_half_up(j * (width - 1) / (h - 1)) if h > 1 else 0 for j in range(h)]
    return np.array([[scales[start + offset] for offset in offsets] for start in starts], dtype=np.int64)


def _round_half_up(x: float) -> int:
    return math.floor(x + 0.5)


def default_windows(num_heads: int) -> NDArray:
    """The demonstration scales ω_i = 2i + 1 (1, 3, 5, …)."""
    return 2 * np.arange(num_heads) + 1


RECORD = Mechanism.of(
    multi_scale_attention, inputs=("x_q", "x_kv", "x_v"), defaults={"num_heads": 2},
    id="multi_scale", title="Multi-scale multi-head self-attention", family="heads", section="4.6", paper=GUO,
    equation=r"\mathrm{head}_i = \operatorname{softmax}\!\Big(\frac{q_t\, C(K W_i^K, \omega_i)^\top}{\sqrt{d_k}}\Big)"
    r" C(V W_i^V, \omega_i),\ C(x_t, \omega) = [x_{t-\omega}, \dots, x_{t+\omega}]",
    time="O(n·m·d + (n+m)·d²)", memory="O(h·n·m)", kind="attention", causal=True, position_dependent=True,
    examples=({"windows": [0, 2]}, {"num_heads": 4, "windows": [0, 1, 2, 100]}),
    figure="refattn.figures.multi_scale:multi_scale",
    exact_options=lambda n, m: {"num_heads": 1, "params": "identity", "windows": [max(n, m)]},
    exact_limit="one head, identity projections, a scale ω >= max(n, m) − 1: softmax attention",
    draws=("params",),
    layer_inputs=True,
)
