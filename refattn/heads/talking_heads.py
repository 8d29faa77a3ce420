r"""Talking-heads attention (Shazeer, Lan, Cheng, Ding, Hou, 2020, arXiv:2003.02436v1, §4; survey §4.6).

Multi-head attention with two learned linear maps across the heads, one just before the softmax and one
just after it. In the paper's pseudocode (§4), with its names and shapes (one sequence; X the queries' input,
M the keys' and values' input):

    Q[n, d_k, h_k] = einsum(X[n, d_X], P_q[d_X, d_k, h_k])            queries
    K[m, d_k, h_k] = einsum(M[m, d_M], P_k[d_M, d_k, h_k])            keys
    V[m, d_v, h_v] = einsum(M[m, d_M], P_v[d_M, d_v, h_v])            values
    J[n, m, h_k]   = einsum(Q[n, d_k, h_k], K[m, d_k, h_k])           dot products
    L[n, m, h]     = einsum(J[n, m, h_k], P_l[h_k, h])                talking-heads projection of the logits
    W[n, m, h]     = softmax(L[n, m, h], reduced_dim=m)               attention weights
    U[n, m, h_v]   = einsum(W[n, m, h], P_w[h, h_v])                  talking-heads projection of the weights
    O[n, d_v, h_v] = einsum(U[n, m, h_v], V[m, d_v, h_v])
    Y[n, d_Y]      = einsum(O[n, d_v, h_v], P_o[d_Y, d_v, h_v])       output

Three head counts: h_k heads of queries and keys, h heads of logits and weights (the softmax heads), h_v
heads of values. With h_k = h = h_v and P_l = P_w = I this is multi-head attention. The projections of the
inputs are stored as in :class:`~refattn.MultiHeadParams` (P_q as w_q of shape (d_X, h_k·d_k), head i owning
columns i·d_k … (i+1)·d_k − 1; P_o as w_o of shape (h_v·d_v, d_Y)).

U is the matrix that weighs the values: its rows need not sum to 1 (they sum to Σ_h P_w[h, ·]) nor be ≥ 0.

Scale and mask, which the pseudocode leaves out. The official code (Mesh TensorFlow,
``transformer_layers.TalkingHeadsSelfAttention.attention_internal``) has no explicit 1/√d_k: it folds it into
P_q's initialisation (``compute_q``, variance 1/(d_model·d_k)); refattn multiplies J by ``scale`` (default
1/√d_k), which is the same thing, P_l being linear. The official code adds its mask (a visibility bias) to the
logits L, after P_l and before the softmax; refattn masks L there too, by selection: a masked pair of (i, j)
is left out of every softmax head whatever P_l mixed into it, so its weight W is exactly 0 in every head h, and
U, a mix of W over h, is 0 there too. Masking J before P_l instead would mix a masked logit into the others.
The causal form is therefore exact: query i's output does not depend on keys after i.

Names: the survey (§4.6.1) calls the softmax heads h_k and the query/key heads h; refattn keeps the paper's
names above (h_k for queries and keys, h for the softmax, h_v for values).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.budget import check_fits
from ..common.checks import as_float, as_rng, check_choice, check_scale, default_scale
from ..common.ints import check_positive_int
from ..common.products import scores, weighted_values
from ..core.multi_head import (
    MultiHeadParams,
    combine_heads,
    drawn_width,
    head_shared,
    init_multi_head,
    layer_inputs,
    project_heads,
)
from ..core.softmax import FULLY_MASKED_POLICIES, masked_softmax
from ..draws import given_or_drawn, note_allowed, optional_rng
from ..masks import allowed_pairs, attention_mask
from ..mechanism import Mechanism

__all__ = ["TalkingHeadsParams", "init_talking_heads", "talking_heads_attention"]

TALKING_HEADS = ('N. Shazeer, Z. Lan, Y. Cheng, N. Ding, L. Hou, 2020, "Talking-Heads Attention", '
                 'arXiv:2003.02436')


@dataclass(frozen=True)
class TalkingHeadsParams:
    """Parameters of talking-heads attention.

    Attributes
    ----------
    projections : MultiHeadParams
        P_q, P_k as ``w_q``, ``w_k`` (d_model, h_k·d_k); P_v as ``w_v`` (d_model, h_v·d_v); P_o as ``w_o``
        (h_v·d_v, d_model); biases as in multi-head attention (the paper's layer has none).
    P_l : (h_k, h) ndarray
        Talking-heads projection of the logits: ``L[..., h] = Σ_hk J[..., hk] P_l[hk, h]``.
    P_w : (h, h_v) ndarray
        Talking-heads projection of the weights: ``U[..., hv] = Σ_h W[..., h] P_w[h, hv]``.
    """

    projections: MultiHeadParams
    P_l: NDArray
    P_w: NDArray

    def __post_init__(self) -> None:
        if not isinstance(self.projections, MultiHeadParams):
            raise TypeError(f"projections must be MultiHeadParams, got {type(self.projections).__name__}")
        P_l, P_w = as_float("P_l", self.P_l), as_float("P_w", self.P_w)
        if P_l.ndim != 2 or P_w.ndim != 2:
            raise ValueError(f"P_l and P_w must be 2-D (h_k, h) and (h, h_v), got shapes {P_l.shape} and {P_w.shape}")
        if P_l.shape[1] != P_w.shape[0]:
            raise ValueError(f"P_l has shape {P_l.shape} (h_k, h) but P_w has shape {P_w.shape} (h, h_v): h differs")
        h_k, h_v = P_l.shape[0], P_w.shape[1]
        if min(h_k, P_l.shape[1], h_v) < 1:
            raise ValueError(f"P_l {P_l.shape} and P_w {P_w.shape} need at least one head of each kind")
        w_q, w_v = self.projections.w_q, self.projections.w_v
        if w_q.shape[1] % h_k or w_v.shape[1] % h_v:
            raise ValueError(f"w_q {w_q.shape} must split into h_k={h_k} heads and w_v {w_v.shape} into h_v={h_v} "
                             f"heads (P_l {P_l.shape}, P_w {P_w.shape})")
        object.__setattr__(self, "P_l", P_l)
        object.__setattr__(self, "P_w", P_w)

    @property
    def key_heads(self) -> int:
        """h_k: heads of queries and keys."""
        return self.P_l.shape[0]

    @property
    def num_heads(self) -> int:
        """h: heads of logits and weights (the softmax heads)."""
        return self.P_l.shape[1]

    @property
    def value_heads(self) -> int:
        """h_v: heads of values."""
        return self.P_w.shape[1]


def init_talking_heads(
    rng, d_model: int, num_heads: int, *, key_heads: int | None = None, value_heads: int | None = None,
    d_k: int | None = None, d_v: int | None = None, bias: bool = False,
) -> TalkingHeadsParams:
    r"""Draw talking-heads parameters.

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw.
    d_model : int
        Model width (d_X = d_M = d_Y in the paper).
    num_heads : int
        *h*, the heads of logits and weights.
    key_heads, value_heads : int, optional
        *h_k*, *h_v*. Default ``num_heads``.
    d_k : int, optional
        Query/key width per head. Default ``d_model // h_k`` (d_model must be divisible by h_k).
    d_v : int, optional
        Value width per head. Default ``d_model // h_v`` (d_model must be divisible by h_v).
    bias : bool, default False
        Give the four input/output projections zero biases (the paper's layer has none).

    Returns
    -------
    TalkingHeadsParams

    Notes
    -----
    P_q, P_k, P_v, P_o: Glorot uniform as :func:`~refattn.init_multi_head` (drawn in that order).
    P_l, P_w: the official code's ``VarianceScalingInitializer`` (Mesh TensorFlow ``layers.py``, scale 1,
    fan-in): a normal of standard deviation :math:`1/\sqrt{h_k}` for P_l and :math:`1/\sqrt{h}` for P_w,
    truncated at two standard deviations (entries beyond are drawn again, as TensorFlow's truncated normal).
    """
    rng = as_rng(rng)
    check_positive_int("d_model", d_model)
    h = check_positive_int("num_heads", num_heads)
    h_k = h if key_heads is None else check_positive_int("key_heads", key_heads)
    h_v = h if value_heads is None else check_positive_int("value_heads", value_heads)
    d_k = _head_width("d_k", d_k, d_model, h_k, "key_heads" if key_heads is not None else "num_heads")
    d_v = _head_width("d_v", d_v, d_model, h_v, "value_heads" if value_heads is not None else "num_heads")
    projections = init_multi_head(rng, d_model, 1, bias=bias, d_k=h_k * d_k, d_v=h_v * d_v)
    P_l = _truncated_normal(rng, (h_k, h), 1.0 / np.sqrt(h_k))
    P_w = _truncated_normal(rng, (h, h_v), 1.0 / np.sqrt(h))
    return TalkingHeadsParams(projections, P_l, P_w)


def _head_width(name: str, width: int | None, d_model: int, heads: int, heads_name: str) -> int:
    """The given width, else d_model / heads; ``heads_name`` is the argument the head count came from."""
    if width is not None:
        return check_positive_int(name, width)
    if d_model % heads:
        raise ValueError(f"d_model={d_model} is not divisible by {heads_name}={heads}; pass {name} explicitly")
    return d_model // heads


def _truncated_normal(rng: np.random.Generator, shape: tuple[int, int], std: float) -> NDArray:
    """N(0, std²) entries, each beyond ±2 std drawn again (TensorFlow's truncated normal)."""
    x = rng.standard_normal(shape)
    while np.any(far := np.abs(x) > 2.0):
        x[far] = rng.standard_normal(int(far.sum()))
    return std * x


def talking_heads_attention(
    x_q: ArrayLike,
    x_kv: ArrayLike,
    params: TalkingHeadsParams | str | None = None,
    *,
    num_heads: int | None = None,
    key_heads: int | None = None,
    value_heads: int | None = None,
    rng=None,
    mask: ArrayLike | None = None,
    causal: bool | str = False,
    scale: float | None = None,
    fully_masked: str = "zero",
    x_v: ArrayLike | None = None,
    return_weights: bool = False,
) -> NDArray | tuple[NDArray, NDArray]:
    r"""Talking-heads attention: logits mixed across heads before the softmax, weights mixed after it.

    .. math::

        J_{k} = \mathrm{scale}\cdot Q_k K_k^\top, \quad
        L_h = \sum_{k=1}^{h_k} P_l[k, h]\, J_k, \quad
        W_h = \operatorname{softmax}(L_h), \quad
        U_v = \sum_{h=1}^{h} P_w[h, v]\, W_h, \quad
        Y = \operatorname{Concat}(U_1 V_1, \dots, U_{h_v} V_{h_v})\, P_o

    Parameters
    ----------
    x_q : (..., n, d_model) array_like
        Query-side input X.
    x_kv : (..., m, d_model) array_like
        Key-side input M (and value-side unless ``x_v`` is given).
    params : TalkingHeadsParams, "identity" or None
        Projections and the two talking-heads maps; h_k, h, h_v are read from P_l and P_w. ``None``: drawn
        from ``rng`` (:func:`init_talking_heads`, d_model = the width of ``x_q``, h = ``num_heads``,
        h_k = ``key_heads``, h_v = ``value_heads``). ``"identity"``: one head of each kind, identity
        projections and P_l = P_w = [[1]], which is scaled dot-product attention itself.
    num_heads, key_heads, value_heads : int, optional
        *h*, *h_k*, *h_v* of the parameters drawn from ``rng`` (``num_heads`` is then required; h_k and h_v
        default to it); ``"identity"`` takes one of each. Unused with given ``params`` (P_l and P_w fix them).
    rng : numpy.random.Generator or int, optional
        Draws ``params`` when it is omitted.
    mask : (..., n, m) array_like of bool or float, optional
        As in :func:`~refattn.scaled_dot_product_attention`, shared by all heads, applied to the logits L
        (after P_l): a float mask is added to L, ``False`` and ``-inf`` entries are left out of every softmax head.
    causal : {False, True, "top-left", "bottom-right"}, default False
        As in :func:`~refattn.scaled_dot_product_attention`, applied to L like ``mask``.
    scale : float, optional
        Multiplier of the dot products J. Default :math:`1/\sqrt{d_k}`.
    fully_masked : {"zero", "nan", "uniform"}, default "zero"
        Weights W of a query that may attend to no key, as in :func:`~refattn.scaled_dot_product_attention`
        (then mixed by P_w like any other).
    x_v : (..., m, d_model) array_like, optional
        Value-side input when it differs from ``x_kv``.
    return_weights : bool, default False
        Also return U, the matrices that weigh each value head's values.

    Returns
    -------
    out : (..., n, d_model) ndarray
    weights : (..., h_v, n, m) ndarray
        Only if ``return_weights``: U, ``out = Concat_v(U_v V_v) P_o (+ b_o)``.

    Notes
    -----
    Time :math:`O(n m (h_k d_k + h_k h + h h_v + h_v d_v))`; memory :math:`O(\max(h_k, h, h_v)\, n m)`: the
    logits of all heads at (i, j) are needed together, so the layer holds them all (a
    :class:`~refattn.common.MemoryBudgetError` is raised before allocating beyond the memory budget).

    References
    ----------
    .. [1] N. Shazeer, Z. Lan, Y. Cheng, N. Ding, L. Hou, "Talking-Heads Attention", arXiv:2003.02436v1, §4
       (pseudocode) and Mesh TensorFlow, ``transformer_layers.TalkingHeadsSelfAttention``.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> params = init_talking_heads(rng, d_model=8, num_heads=4, key_heads=2, value_heads=2)
    >>> params.P_l.shape, params.P_w.shape
    ((2, 4), (4, 2))
    >>> x = rng.standard_normal((5, 8))
    >>> out, U = talking_heads_attention(x, x, params, causal=True, return_weights=True)
    >>> out.shape, U.shape
    ((5, 8), (2, 5, 5))
    >>> bool(np.all(np.triu(U, 1) == 0))              # masked after P_l: no weight on the future
    True
    """
    check_choice("fully_masked", fully_masked, FULLY_MASKED_POLICIES)
    x_q = as_float("x_q", x_q, min_ndim=2)                         # its width sizes drawn parameters
    params = _talking_heads_params(params, x_q, num_heads, key_heads, value_heads, rng)
    x_q, x_kv, x_v = layer_inputs(x_q, x_kv, x_v, params.projections.d_model)
    p = params.projections
    h_k, h, h_v = params.key_heads, params.num_heads, params.value_heads
    n, m = x_q.shape[-2], x_kv.shape[-2]
    scale = default_scale(p.w_q.shape[1] // h_k) if scale is None else check_scale(scale)
    allowed, bias = attention_mask(head_shared(mask), causal, n, m, np.float64)
    batch = np.broadcast_shapes(x_q.shape[:-2], x_kv.shape[:-2], x_v.shape[:-2])
    check_fits(f"the logits of every head (h_k={h_k}, h={h}, h_v={h_v})", (*batch, max(h_k, h, h_v), n, m))

    Q = project_heads(x_q, p.w_q, p.b_q, h_k)                      # (..., h_k, n, d_k)  Q[n, d_k, h_k]
    K = project_heads(x_kv, p.w_k, p.b_k, h_k)                     # (..., h_k, m, d_k)  K[m, d_k, h_k]
    V = project_heads(x_v, p.w_v, p.b_v, h_v)                      # (..., h_v, m, d_v)  V[m, d_v, h_v]
    J = scores(Q, K, scale)                                        # (..., h_k, n, m)    J = scale·Q Kᵀ
    with np.errstate(invalid="ignore", over="ignore"):             # a sum of overflowed products may be inf − inf
        L = np.einsum("...knm,kh->...hnm", J, params.P_l)          # (..., h, n, m)      L = J P_l
    if bias is not None:
        L = L + bias                                               # (..., h, n, m)      L + B (after P_l)
    W, empty = masked_softmax(L, allowed, fully_masked)            # (..., h, n, m)      W = softmax_m(L)
    U = np.einsum("...hnm,hv->...vnm", W, params.P_w)              # (..., h_v, n, m)    U = W P_w
    O = weighted_values(U, V, allowed, empty[..., :1, :, :], fully_masked)   # (..., h_v, n, d_v)  O = U V
    out = combine_heads(O, p.w_o, p.b_o)                           # (..., n, d_model)   Y = O P_o
    if not return_weights:
        return out
    note_allowed(lambda: allowed_pairs(head_shared(mask), causal, U.shape, fully_masked))
    return out, U


def _talking_heads_params(params, x_q: NDArray, num_heads, key_heads, value_heads, rng) -> TalkingHeadsParams:
    """``params`` as given, drawn from ``rng`` with the head counts given, or ``"identity"``."""
    if params is None and rng is not None and num_heads is None:   # rng missing too: given_or_drawn says so
        raise ValueError("talking_heads needs num_heads= to draw params from rng (or params=)")
    params = given_or_drawn("talking_heads", "params", params, optional_rng(rng), lambda r: init_talking_heads(
        r, drawn_width(x_q), num_heads, key_heads=key_heads, value_heads=value_heads), what="its parameters")
    if isinstance(params, str):
        if params != "identity" or any(c not in (None, 1) for c in (num_heads, key_heads, value_heads)):
            raise ValueError(f"params must be TalkingHeadsParams, None or 'identity' (with one head of each kind), "
                             f"got {params!r} with num_heads={num_heads}, key_heads={key_heads}, "
                             f"value_heads={value_heads}")
        eye = np.eye(x_q.shape[-1])
        return TalkingHeadsParams(MultiHeadParams(eye, eye, eye, eye), np.ones((1, 1)), np.ones((1, 1)))
    if not isinstance(params, TalkingHeadsParams):
        raise TypeError(f"params must be TalkingHeadsParams (see init_talking_heads), None or 'identity', got "
                        f"{type(params).__name__}")
    return params


RECORD = Mechanism.of(
    talking_heads_attention, inputs=("x_q", "x_kv", "x_v"), defaults={"num_heads": 2},
    id="talking_heads", title="Talking-heads attention", family="heads", section="4.6.1", paper=TALKING_HEADS,
    equation=r"L_h = \sum_k P_l[k,h]\, \tfrac{Q_k K_k^\top}{\sqrt{d_k}},\ W_h = \operatorname{softmax}(L_h),\ "
    r"U_v = \sum_h P_w[h,v]\, W_h,\ Y = \operatorname{Concat}_v(U_v V_v) P_o",
    time="O(n·m·(h_k·d_k + h_k·h + h·h_v + h_v·d_v))", memory="O(max(h_k, h, h_v)·n·m)", kind="attention",
    causal=True, normalized=False, nonnegative=False,
    examples=({"num_heads": 4, "key_heads": 2, "value_heads": 1}, {"num_heads": 1, "key_heads": 4}),
    figure="refattn.figures.talking_heads:talking_heads", exact_options={"num_heads": 1, "params": "identity"},
    exact_limit="one head of each kind, identity projections, P_l = P_w = [[1]]; with h_k = h = h_v and "
    "P_l = P_w = I it is multi_head with the same projections", draws=("params",),
    layer_inputs=True,
)
