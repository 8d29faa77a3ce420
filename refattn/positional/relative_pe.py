r"""Relative position representations (Shaw, Uszkoreit, Vaswani, 2018, arXiv:1803.02155v2, §3; survey §5.1.2).

    e_ij = q_i (k_j + a^K_ij)ᵀ / √d                      Eq. (4): the key term
    α_ij = softmax_j(e_ij)
    z_i  = Σ_j α_ij (v_j + a^V_ij)                        Eq. (3): the value term
    a^K_ij = w^K_clip(j − i, k),  a^V_ij = w^V_clip(j − i, k),  clip(x, k) = max(−k, min(k, x))   Eq. (5)-(6)

Each of the 2k + 1 clipped distances −k … k has a learned key vector w^K and a learned value vector
w^V (the tables ``keys`` and ``values``, row r for distance r − k), shared across heads (§3.3);
distances beyond k share the vector of ±k. Positions: query i sits at position i (with
``causal="bottom-right"`` at i + m − n, the last n of the m positions), key j at j; the index of
a pair is the clipped j − i (the paper's order: a later key has a positive index).

With every embedding zero both terms vanish and this is softmax attention exactly. The score term is
an additive bias B_ij = q_i·a^K_ij/√d, so the weights come from
:func:`~refattn.scaled_dot_product_attention` with B as its float mask (causal masking by
selection); the value term adds Σ_j α_ij a^V_ij = Σ_r (Σ_{j: idx_ij = r} α_ij) w^V_r, the weight each
row puts on each clipped distance times its vector.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.budget import check_fits
from ..common.checks import as_float, as_rng, causal_alignment, check_qkv, check_scale, default_scale
from ..common.init import glorot
from ..common.ints import check_non_negative_int
from ..core.sdpa import scaled_dot_product_attention
from ..draws import given_or_drawn, optional_rng
from ..mechanism import Mechanism

__all__ = ["RelativeEmbeddings", "init_relative_embeddings", "relative_attention", "relative_index"]

SHAW = ('P. Shaw, J. Uszkoreit, A. Vaswani, 2018, "Self-Attention with Relative Position Representations", '
        'NAACL 2018, arXiv:1803.02155')
#: k of the paper's experiments (§4.2: k = 16; "k ≥ 2" made little difference, Table 3).
DEFAULT_MAX_DISTANCE = 16


@dataclass(frozen=True)
class RelativeEmbeddings:
    """The learned relative position representations, shared across heads.

    Attributes
    ----------
    keys : (2k + 1, d_k) ndarray
        w^K_{−k} … w^K_{k}: row r is the key vector of the clipped distance r − k.
    values : (2k + 1, d_v) ndarray
        w^V_{−k} … w^V_{k}.
    """

    keys: NDArray
    values: NDArray

    def __post_init__(self) -> None:
        keys = as_float("keys", self.keys, min_ndim=2)
        values = as_float("values", self.values, min_ndim=2)
        if keys.ndim != 2 or values.ndim != 2 or keys.shape[0] != values.shape[0] or keys.shape[0] % 2 != 1:
            raise ValueError(f"keys and values must be (2k + 1, d_k) and (2k + 1, d_v), got keys {keys.shape}, "
                             f"values {values.shape}")
        object.__setattr__(self, "keys", keys)
        object.__setattr__(self, "values", values)

    @property
    def max_distance(self) -> int:
        """k, the clipping distance."""
        return (self.keys.shape[0] - 1) // 2


def init_relative_embeddings(rng, max_distance: int, d_k: int, d_v: int) -> RelativeEmbeddings:
    """Draw the two (2k + 1)-row tables, each Glorot-uniform.

    tensor2tensor's ``_generate_relative_positions_embeddings`` (common_attention.py) creates each
    table with ``tf.get_variable`` and no initializer, i.e. TensorFlow's default Glorot uniform.

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw.
    max_distance : int
        k; each table has 2k + 1 rows.
    d_k, d_v : int
        Widths of the key and value vectors.

    Returns
    -------
    RelativeEmbeddings
    """
    rng = as_rng(rng)
    size = 2 * check_non_negative_int("max_distance", max_distance) + 1
    return RelativeEmbeddings(glorot(rng, size, d_k), glorot(rng, size, d_v))


def relative_index(n: int, m: int, max_distance: int, *, offset: int = 0) -> NDArray:
    """The (n, m) table idx_ij = clip(j − (i + offset), k) + k, the row of each pair's embedding.

    Parameters
    ----------
    n, m : int
        Numbers of queries and keys.
    max_distance : int
        k.
    offset : int, default 0
        The position of query 0 (m − n for the last n of m positions).

    Returns
    -------
    (n, m) ndarray of int
    """
    k = check_non_negative_int("max_distance", max_distance)
    distance = np.arange(m)[None, :] - (np.arange(n)[:, None] + offset)  # (n, m)  j − i
    return np.clip(distance, -k, k) + k


def relative_attention(
    q: ArrayLike, k: ArrayLike, v: ArrayLike, embeddings: RelativeEmbeddings | str | None = None, *,
    rng: np.random.Generator | int | None = None, max_distance: int = DEFAULT_MAX_DISTANCE,
    causal: bool | str = False, scale: float | None = None, return_weights: bool = False,
) -> NDArray | tuple[NDArray, NDArray]:
    r"""Self-attention with relative position representations clipped at distance k.

    .. math::

        e_{ij} = \frac{q_i (k_j + a^K_{ij})^\top}{\sqrt{d}}, \qquad
        z_i = \sum_j \alpha_{ij} (v_j + a^V_{ij}), \qquad
        a^{K,V}_{ij} = w^{K,V}_{\operatorname{clip}(j - i, k)}

    Parameters
    ----------
    q : (..., n, d_k) array_like
        Queries (one head per leading index; the tables are shared across heads).
    k : (..., m, d_k) array_like
        Keys.
    v : (..., m, d_v) array_like
        Values.
    embeddings : RelativeEmbeddings or "zero", optional
        The tables w^K (2k + 1, d_k) and w^V (2k + 1, d_v); :func:`init_relative_embeddings`. Drawn from
        ``rng`` when not given (Glorot, k = ``max_distance``); "zero": all-zero tables of k = ``max_distance``
        (softmax attention exactly).
    rng : numpy.random.Generator or int, optional
        Draws ``embeddings`` when not given; unused otherwise.
    max_distance : int, default 16
        k of drawn or "zero" tables (given tables bring their own).
    causal : {False, True, "top-left", "bottom-right"}, default False
        By selection. With "bottom-right" the queries are the last n of the m positions, and their
        distances j − i count from there.
    scale : float, optional
        Default :math:`1/\sqrt{d_k}`, applied to both score terms.
    return_weights : bool, default False
        Also return α.

    Returns
    -------
    out : (..., n, d_v) ndarray
    weights : (..., n, m) ndarray
        Only if ``return_weights``.

    Notes
    -----
    Time O(n·m·(d + k)), memory O(n·m) (the value term sums α over each clipped distance in turn).
    With every embedding zero, softmax attention exactly.

    References
    ----------
    .. [1] P. Shaw, J. Uszkoreit, A. Vaswani, "Self-Attention with Relative Position
       Representations", NAACL 2018, arXiv:1803.02155v2, §3.1-3.2, Eqs. (3)-(6).

    Examples
    --------
    >>> import numpy as np
    >>> from refattn import scaled_dot_product_attention
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 5, 4))
    >>> zero = RelativeEmbeddings(np.zeros((5, 4)), np.zeros((5, 4)))     # k = 2, every vector 0
    >>> bool(np.allclose(relative_attention(q, k, v, zero), scaled_dot_product_attention(q, k, v)))
    True
    >>> out, A = relative_attention(q, k, v, init_relative_embeddings(rng, 2, 4, 4), causal=True,
    ...                             return_weights=True)
    >>> bool(np.allclose(A.sum(axis=-1), 1.0)), bool(np.all(np.triu(A, 1) == 0))
    (True, True)
    """
    q, k, v = (as_float(label, x, min_ndim=2) for label, x in (("q", q), ("k", k), ("v", v)))
    check_qkv(q, k, v)
    if isinstance(embeddings, str):
        if embeddings != "zero":
            raise ValueError(f"embeddings must be RelativeEmbeddings, None or 'zero', got {embeddings!r}")
        size = 2 * check_non_negative_int("max_distance", max_distance) + 1
        embeddings = RelativeEmbeddings(np.zeros((size, q.shape[-1])), np.zeros((size, v.shape[-1])))
    embeddings = given_or_drawn("relative_pe", "embeddings", embeddings, optional_rng(rng),
                                lambda r: init_relative_embeddings(r, max_distance, q.shape[-1], v.shape[-1]),
                                what="its tables")
    if not isinstance(embeddings, RelativeEmbeddings):
        raise TypeError(f"embeddings must be RelativeEmbeddings, got {type(embeddings).__name__}")
    w_K, w_V = embeddings.keys, embeddings.values
    if w_K.shape[1] != q.shape[-1] or w_V.shape[1] != v.shape[-1]:
        raise ValueError(f"embeddings must be (2k + 1, d_k={q.shape[-1]}) and (2k + 1, d_v={v.shape[-1]}), got keys "
                         f"{w_K.shape}, values {w_V.shape}")
    alignment = causal_alignment(causal)
    scale = default_scale(q.shape[-1]) if scale is None else check_scale(scale)
    n, m = q.shape[-2], k.shape[-2]
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    check_fits("relative attention's (..., n, m) biases", (*batch, n, m))
    idx = relative_index(n, m, embeddings.max_distance, offset=m - n if alignment == "bottom-right" else 0)
    qa = (q @ w_K.T) * scale                                       # (..., n, 2k+1)  q_i·w^K_r/√d
    bias = np.take_along_axis(qa, np.broadcast_to(idx, (*qa.shape[:-2], n, m)), axis=-1)  # (..., n, m)  q_i·a^K_ij/√d
    out, A = scaled_dot_product_attention(q, k, v, mask=bias, causal=causal, scale=scale, return_weights=True)
    per_distance = np.stack([np.where(idx == r, A, 0.0).sum(axis=-1) for r in range(w_K.shape[0])],
                            axis=-1)                               # (..., n, 2k+1)  Σ_{j: idx_ij = r} α_ij
    out = out + per_distance @ w_V                                 # (..., n, d_v)  + Σ_j α_ij a^V_ij
    return (out, A) if return_weights else out


RECORD = Mechanism.of(
    relative_attention,
    id="relative_pe", title="Relative position representations (Shaw et al.)", family="positional",
    section="5.1.2", paper=SHAW,
    equation=r"e_{ij} = \frac{q_i (k_j + a^K_{ij})^\top}{\sqrt{d}},\quad z_i = \sum_j \alpha_{ij}(v_j + a^V_{ij}),"
             r"\quad a_{ij} = w_{\operatorname{clip}(j-i,\,k)}",
    time="O(n·m·(d + k))", memory="O(n·m)", causal=True, position_dependent=True,
    figure="refattn.figures.relative_pe:relative_pe",
    examples=({"max_distance": 1}, {"max_distance": 0}),
    exact_options={"embeddings": "zero"}, exact_limit="every relative embedding zero (a^K = a^V = 0)",
    draws=("embeddings",),
)
