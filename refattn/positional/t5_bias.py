r"""T5's relative position buckets: a learned scalar per bucket and head added to the scores (Raffel et al., 2020).

Each pair (i, j) falls in a bucket of its relative position; each head learns one scalar per bucket,
added to the scores before the softmax:

    S = Q Kᵀ · scale + B,   B_ij = b[bucket(j − p_i)]            b: (num_buckets,) per head, learned
    A = softmax(S),   out = A V

Positions: query i sits at p_i = i (bottom-right causal: i + m − n), key j at j. The official
code's relative position is memory position − query position, r = j − p_i (so r < 0 is a key in
the past); its distance n = −r = p_i − j.

The bucket of r (mesh_tensorflow ``_relative_position_bucket``, defaults num_buckets = 32,
max_distance = 128):

    bidirectional:  half the buckets for keys in the past or here (r ≤ 0), half (offset by
                    num_buckets/2) for keys in the future (r > 0); n = |r|, B = num_buckets/2
    causal:         n = max(−r, 0) (every future key shares bucket 0), B = num_buckets
    then, with e = B // 2 exact buckets:
        bucket(n) = n                                                n < e
        bucket(n) = min(e + ⌊log(n/e) / log(max_distance/e) · (B − e)⌋, B − 1)   n ≥ e

Small distances get a bucket each; larger ones share logarithmically wider buckets; every
distance ≥ max_distance shares the last. The official code chooses bidirectional = not causal
(the encoder's table, or the decoder's); ``bidirectional=None`` does the same here.

A zero table adds B = 0 exactly: softmax attention.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.budget import check_fits
from ..common.checks import (
    ALIGNMENTS,
    as_float,
    as_rng,
    broadcast_batch,
    causal_alignment,
    check_bool,
    check_choice,
    check_scale,
    checked_qkv,
    default_scale,
)
from ..common.init import glorot
from ..common.ints import check_non_negative_int, check_positive_int
from ..core.sdpa import scaled_dot_product_attention
from ..deprecation import renamed
from ..draws import given_or_drawn, optional_rng
from ..mechanism import Mechanism

__all__ = ["T5BiasParams", "T5_MAX_DISTANCE", "T5_NUM_BUCKETS", "init_t5_bias", "relative_positions", "t5_bias",
           "t5_bias_attention", "t5_relative_position_bucket"]

RAFFEL = ('C. Raffel, N. Shazeer, A. Roberts, K. Lee, S. Narang, M. Matena, Y. Zhou, W. Li, P. J. Liu, 2020, '
          '"Exploring the Limits of Transfer Learning with a Unified Text-to-Text Transformer", JMLR 21(140), '
          'arXiv:1910.10683')
#: The official code's defaults (mesh_tensorflow ``_relative_position_bucket``; the paper §2.1: 32 buckets,
#: "up to a distance of 128 beyond which all relative positions are assigned to the same embedding").
T5_NUM_BUCKETS, T5_MAX_DISTANCE = 32, 128
METHODS = ("equation", "blocked", "auto")


@renamed(alignment="causal")
def relative_positions(n: int, m: int, causal: bool | str | None = False) -> NDArray:
    """(n, m) integer matrix r_ij = j − p_i, the key's position minus the query's.

    Query i sits at p_i = i, or i + m − n with ``causal="bottom-right"`` (the n queries are the
    last n of the m positions); key j at j.

    Parameters
    ----------
    n, m : int
        Number of queries and keys.
    causal : {False, True, "top-left", "bottom-right"}, default False
        Where the queries sit (only the positions: nothing is masked). ``None`` reads as False (what
        :func:`refattn.common.causal_alignment` returns for it). The old name ``alignment=`` is deprecated.

    Returns
    -------
    (n, m) ndarray of int64

    Examples
    --------
    >>> relative_positions(2, 3, "bottom-right")
    array([[-1,  0,  1],
           [-2, -1,  0]])
    """
    n, m = check_non_negative_int("n", n), check_non_negative_int("m", m)
    check_choice("causal", causal, (None, False, True, *ALIGNMENTS))
    offset = m - n if causal == "bottom-right" else 0
    return np.arange(m, dtype=np.int64)[None, :] - (np.arange(n, dtype=np.int64) + offset)[:, None]


def _check_bucketing(num_buckets, max_distance, bidirectional):
    num_buckets = check_positive_int("num_buckets", num_buckets)
    max_distance = check_positive_int("max_distance", max_distance)
    bidirectional = check_bool("bidirectional", bidirectional)
    exact = (num_buckets // 2 if bidirectional else num_buckets) // 2
    if exact < 1 or max_distance <= exact:
        raise ValueError(f"num_buckets={num_buckets} (bidirectional={bidirectional}) gives {exact} exact buckets and "
                         f"max_distance={max_distance}: need at least 1 exact bucket and max_distance > {exact}")
    return num_buckets, max_distance, bidirectional


def t5_relative_position_bucket(relative_position: ArrayLike, *, bidirectional: bool = True,
                                num_buckets: int = T5_NUM_BUCKETS, max_distance: int = T5_MAX_DISTANCE) -> NDArray:
    r"""The bucket of each relative position r = (key position) − (query position), as T5's official code.

    .. math::

        \text{bucket}(n) = \begin{cases} n & n < e \\
            \min\!\Big(e + \Big\lfloor \frac{\log(n/e)}{\log(\text{max\_distance}/e)}\,(B - e)\Big\rfloor,\ B - 1\Big)
            & n \ge e \end{cases}

    with n = |r| and B = num_buckets/2 (plus B for r > 0) when bidirectional, n = max(−r, 0) and
    B = num_buckets when not; e = B // 2.

    Parameters
    ----------
    relative_position : array_like of int
        r = j − p_i (memory position minus query position): negative for a key in the past.
    bidirectional : bool, default True
        Separate buckets for keys in the future (the encoder's table); ``False`` puts every key in
        the future in bucket 0 (the decoder's table).
    num_buckets : int, default 32
    max_distance : int, default 128
        Distances ≥ max_distance share the last bucket (of their side).

    Returns
    -------
    ndarray of int64, the shape of ``relative_position``, in [0, num_buckets)

    Notes
    -----
    Transcribes mesh_tensorflow's ``_relative_position_bucket``
    (mesh_tensorflow/transformer/transformer_layers.py). The official arithmetic is in float32; in
    float64 it gives the same buckets (every distance a bucket boundary hits exactly, 16, 32, 64
    and 128 at the defaults, has an exact logarithm ratio in both).

    Examples
    --------
    >>> t5_relative_position_bucket([-200, -20, -3, 0, 3, 20, 200])
    array([15, 10,  3,  0, 19, 26, 31])
    >>> t5_relative_position_bucket([-200, -20, -3, 0, 3, 20, 200], bidirectional=False)
    array([31, 17,  3,  0,  0,  0,  0])
    """
    num_buckets, max_distance, bidirectional = _check_bucketing(num_buckets, max_distance, bidirectional)
    r = np.asarray(relative_position)
    if r.dtype == bool or not np.issubdtype(r.dtype, np.integer):
        raise TypeError(f"relative_position must be integers, got dtype {r.dtype} (shape {r.shape})")
    r = r.astype(np.int64)
    distance = -r                                                  # n = query position − memory position
    bucket = np.zeros(r.shape, dtype=np.int64)
    if bidirectional:
        num_buckets //= 2
        bucket += np.where(distance < 0, num_buckets, 0)           # keys in the future: the upper half
        distance = np.abs(distance)
    else:
        distance = np.maximum(distance, 0)                         # keys in the future: bucket 0
    exact = num_buckets // 2
    with np.errstate(divide="ignore"):                             # log(0) where n = 0 (an exact bucket anyway)
        large = exact + np.floor(np.log(distance / exact) / math.log(max_distance / exact)
                                 * (num_buckets - exact))          # e + ⌊log(n/e)/log(max_distance/e)·(B − e)⌋
    large = np.minimum(np.where(distance < exact, 0, large), num_buckets - 1).astype(np.int64)
    return bucket + np.where(distance < exact, distance, large)


@dataclass(frozen=True, eq=False)
class T5BiasParams:
    """The learned scalars, one per bucket and head.

    Attributes
    ----------
    table : (num_buckets,) or (h, num_buckets) ndarray
        b[bucket] for one head, or one row per head (the official variable "relative_attention_bias"
        of shape heads × buckets). Each head's bias then has shape (h, n, m): heads are the axis −3
        of q, k and v.
    """

    table: NDArray

    def __post_init__(self) -> None:
        object.__setattr__(self, "table", as_float("table", self.table))
        if self.table.ndim not in (1, 2) or self.table.shape[-1] < 1:
            raise ValueError(f"table must be (num_buckets,) or (h, num_buckets) with num_buckets ≥ 1, got shape "
                             f"{self.table.shape}")

    @property
    def num_buckets(self) -> int:
        """The number of buckets, the table's last axis."""
        return self.table.shape[-1]


def init_t5_bias(rng, num_heads: int | None = None, num_buckets: int = T5_NUM_BUCKETS) -> T5BiasParams:
    r"""Draw the table as the official code does: TensorFlow's default Glorot uniform over (heads, buckets).

    .. math::

        b \sim \mathcal{U}\Big(\pm\sqrt{6/(h + \text{num\_buckets})}\Big)^{h \times \text{num\_buckets}}

    Parameters
    ----------
    rng : numpy.random.Generator or int
    num_heads : int, optional
        h. Default: one head, a (num_buckets,) table (drawn as h = 1).
    num_buckets : int, default 32

    Returns
    -------
    T5BiasParams

    Notes
    -----
    mesh_tensorflow creates "relative_attention_bias" with ``mtf.get_variable`` and no
    initializer, which falls back to TensorFlow's ``glorot_uniform_initializer``.

    Examples
    --------
    >>> init_t5_bias(0, num_heads=4).table.shape
    (4, 32)
    """
    rng = as_rng(rng)
    num_buckets = check_positive_int("num_buckets", num_buckets)
    if num_heads is None:
        return T5BiasParams(glorot(rng, 1, num_buckets)[0])
    return T5BiasParams(glorot(rng, check_positive_int("num_heads", num_heads), num_buckets))


def _check_params(params) -> None:
    if not isinstance(params, T5BiasParams):
        raise TypeError(f"params must be a T5BiasParams (init_t5_bias), got {type(params).__name__}")


def t5_bias(params: T5BiasParams, n: int, m: int, *, causal: bool | str = False, bidirectional: bool | None = None,
            max_distance: int = T5_MAX_DISTANCE) -> NDArray:
    r"""The bias :math:`B_{ij} = b[\text{bucket}(j - p_i)]` over n queries and m keys.

    Parameters
    ----------
    params : T5BiasParams
        The table (:func:`init_t5_bias`); its last axis is num_buckets.
    n, m : int
        Number of queries and keys.
    causal : {False, True, "top-left", "bottom-right"}, default False
        Places the queries: p_i = i, or i + m − n for "bottom-right" (the mask itself is not applied
        here).
    bidirectional : bool, optional
        The bucketing (:func:`t5_relative_position_bucket`); default ``not causal``, as the official
        code (the encoder's table without a causal mask, the decoder's with one).
    max_distance : int, default 128

    Returns
    -------
    (n, m) or (h, n, m) ndarray

    Examples
    --------
    >>> t5_bias(T5BiasParams(np.arange(32.0)), 3, 3)
    array([[ 0., 17., 18.],
           [ 1.,  0., 17.],
           [ 2.,  1.,  0.]])
    """
    _check_params(params)
    alignment = causal_alignment(causal)
    bidirectional = alignment is None if bidirectional is None else bidirectional
    buckets = t5_relative_position_bucket(relative_positions(n, m, alignment), bidirectional=bidirectional,
                                          num_buckets=params.num_buckets, max_distance=max_distance)
    check_fits("the T5 bias", (*params.table.shape[:-1], n, m))
    return np.take(params.table, buckets, axis=-1)                 # (..., n, m)  b[bucket(j − p_i)]


def t5_bias_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    params: T5BiasParams | None = None,
    rng: np.random.Generator | int | None = None,
    num_heads: int | None = None,
    causal: bool | str = False,
    bidirectional: bool | None = None,
    max_distance: int = T5_MAX_DISTANCE,
    scale: float | None = None,
    method: str = "auto",
    return_weights: bool = False,
) -> NDArray | tuple[NDArray, NDArray]:
    r"""Softmax attention with T5's bucketed relative position bias.

    .. math::

        \operatorname{softmax}\big(QK^\top \cdot \text{scale} + B\big) V, \qquad
        B_{ij} = b_h[\text{bucket}(j - p_i)]

    Parameters
    ----------
    q : (..., n, d_k) array_like
        Queries (with h heads: (..., h, n, d_k)).
    k : (..., m, d_k) array_like
        Keys.
    v : (..., m, d_v) array_like
        Values.
    params : T5BiasParams, optional
        The learned table (:func:`init_t5_bias`); drawn from ``rng`` when not given.
    rng : numpy.random.Generator or int, optional
        Draws ``params`` with :func:`init_t5_bias` (``num_heads`` heads, 32 buckets); unused with ``params``.
    num_heads : int, optional
        Heads of the drawn table (only with ``rng``); default one head.
    causal : {False, True, "top-left", "bottom-right"}, default False
        The decoder's mask (by selection), and where the queries sit (p_i = i + m − n bottom-right).
    bidirectional : bool, optional
        Default ``not causal`` (the official code's choice).
    max_distance : int, default 128
    scale : float, optional
        Multiplier of :math:`QK^\top`; default :math:`1/\sqrt{d_k}`. T5 itself uses 1 (it folds
        :math:`1/\sqrt{d_k}` into the initialisation of the query projection). B is added unscaled.
    method : {"equation", "blocked", "auto"}, default "auto"
        :func:`~refattn.scaled_dot_product_attention`'s path (B itself is n × m whatever the path).
    return_weights : bool, default False

    Returns
    -------
    out : (..., n, d_v) ndarray
    weights : (..., n, m) ndarray
        Only if ``return_weights``.

    Notes
    -----
    **Exact limit.** A zero table adds 0 to every score: softmax attention exactly.

    **Heads.** A (h, num_buckets) table gives an (h, n, m) bias, broadcast against the leading
    axes of q, k and v (heads on axis −3). The paper shares the table across the layers of a stack;
    here it is one argument, to pass to each layer.

    Complexity: O(n·m·(d_k + d_v)) time, O(h·n·m) memory for B.

    References
    ----------
    .. [1] C. Raffel et al., "Exploring the Limits of Transfer Learning with a Unified Text-to-Text
       Transformer", JMLR 2020, arXiv:1910.10683, §2.1 (Position embeddings).
    .. [2] mesh_tensorflow, mesh_tensorflow/transformer/transformer_layers.py,
       ``_relative_position_bucket`` and the "relative_attention_bias" variable.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 2, 6, 4))                # 2 heads
    >>> out, A = t5_bias_attention(q, k, v, rng=1, num_heads=2, return_weights=True)
    >>> out.shape, A.shape
    ((2, 6, 4), (2, 6, 6))
    >>> zero = T5BiasParams(np.zeros((2, 32)))
    >>> bool(np.allclose(t5_bias_attention(q, k, v, params=zero), scaled_dot_product_attention(q, k, v),
    ...                  rtol=1e-12, atol=1e-12))
    True
    """
    if params is not None and num_heads is not None:
        raise ValueError("num_heads= only chooses the heads of a drawn table; params= brings its own")
    check_choice("method", method, METHODS)
    return_weights = check_bool("return_weights", return_weights)
    q, k, v, batch = checked_qkv(q, k, v)
    n, m, d_k = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = default_scale(d_k) if scale is None else check_scale(scale)
    params = given_or_drawn("t5_bias", "params", params, optional_rng(rng), lambda r: init_t5_bias(r, num_heads),
                            what="its table")
    _check_params(params)
    batch = broadcast_batch({"q, k, v": batch, "params.table heads": params.table.shape[:-1]})
    check_fits("the T5 bias", (*batch, n, m))
    B = t5_bias(params, n, m, causal=causal, bidirectional=bidirectional, max_distance=max_distance)
    if not return_weights:
        return scaled_dot_product_attention(q, k, v, B, causal=causal, scale=scale, method=method)
    out, A = scaled_dot_product_attention(q, k, v, B, causal=causal, scale=scale, method="equation",
                                          return_weights=True)     # softmax(QKᵀ·scale + B), its V
    if method == "blocked":
        out = scaled_dot_product_attention(q, k, v, B, causal=causal, scale=scale, method="blocked")
    return out, A


RECORD = Mechanism.of(
    t5_bias_attention,
    id="t5_bias", title="T5 relative position buckets (a learned bias per bucket and head)", family="positional",
    section="5.1.2", paper=RAFFEL,
    equation=r"\operatorname{softmax}\!\big(QK^\top\cdot\text{scale} + B\big) V,\quad "
             r"B_{ij} = b_h[\operatorname{bucket}(j - i)]",
    time="O(n·m·d)", memory="O(h·n·m)", kind="attention", methods=METHODS, causal=True, position_dependent=True,
    examples=({"bidirectional": True}, {"max_distance": 20}),
    figure="refattn.figures.t5_bias:t5_bias",
    exact_options=lambda n, m: {"params": T5BiasParams(np.zeros(T5_NUM_BUCKETS))},
    exact_limit="a zero table (B = 0)",
    draws=("params",),
)
