r"""Set Transformer (Lee et al., 2019, arXiv:1810.00825v3, §2.2 and §3; survey §4.3.2).

    Att(Q, K, V; ω) = ω(QKᵀ) V,   ω(·) = softmax(·/√d)                             scaled softmax
    Multihead(Q, K, V) = concat(O_1, …, O_h) Wᴼ,   O_j = Att(QW_jᵠ, KW_jᴷ, VW_jⱽ)
    MAB(X, Y) = LayerNorm(H + rFF(H)),   H = LayerNorm(X + Multihead(X, Y, Y))     multihead attention block
    SAB(X) = MAB(X, X)                                                               set attention block
    ISAB_ℓ(X) = MAB(X, H),   H = MAB(I, X)              I (ℓ × d) learned inducing points
    PMA_k(Z) = MAB(S, rFF(Z))                            S (k × d) learned seed vectors

rFF is a row-wise feed-forward layer: it acts on every element of the set alone. No positional
encoding enters anywhere, so a MAB is permutation-equivariant in X and invariant in Y, SAB and
ISAB are equivariant and PMA is invariant (§3: "permutation equivariant", "permutation
invariant"). ISAB costs O(n·ℓ·d) instead of SAB's O(n²·d): the set attends ℓ inducing points,
which first attended the set.

The inducing-point attention path. With the blocks' residuals, layer norms and rFFs taken out,
one head of ISAB is two attentions in a row, the inducing points attending the keys and the
queries attending what they gathered:

    A_IK = softmax(I K_Iᵀ · s)           (ℓ × m)   inducing points attend the keys
    H_K = A_IK K,   H_V = A_IK V         (ℓ × d)   the memory: ℓ mixtures of the keys and values
    A_QH = softmax(Q H_Kᵀ · s)           (n × ℓ)   queries attend the memory
    out = A_QH H_V = (A_QH A_IK) V = W V (n × m)   the effective matrix W = A_QH A_IK

Both maps are row-stochastic, so W is too; its rank is at most ℓ. This is what the registry's
uniform ``apply`` computes (:func:`induced_attention`), with I drawn from ``rng`` or given.

The official code (juho-lee/set_transformer, ``modules.py``) departs from the paper's MAB in four
ways, each a named option here with the paper's equations by default: it scales the scores by
1/√dim_V, the model width, rather than per head (``scale_by="model"``); it has no output
projection Wᴼ and adds the *projected* queries to the heads, ``O = Q_ + A.bmm(V_)``, with the rFF
``O + relu(fc_o(O))`` (``form="official"``, issue #8); its layer norms are off by default,
``ln=False`` (``layer_norm=False``; issue #9: ISAB stacks did not train with them on some data);
and its PMA has no rFF on Z (``PMAParams.rff=None``, issue #11).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.budget import check_fits
from ..common.checks import (
    as_float,
    as_rng,
    broadcast_batch,
    check_bool,
    check_choice,
    check_qkv,
    check_scale,
    default_scale,
)
from ..common.ints import check_non_negative_int, check_positive_int
from ..core.ffn import FeedForwardParams, feed_forward, init_feed_forward
from ..core.layer_norm import LayerNormParams, init_layer_norm
from ..core.layer_norm import layer_norm as normalise
from ..core.multi_head import MultiHeadParams, init_multi_head, multi_head_attention
from ..core.sdpa import scaled_dot_product_attention
from ..draws import given_or_drawn, optional_rng
from ..mechanism import Mechanism

__all__ = [
    "ISABParams",
    "MABParams",
    "PMAParams",
    "draw_inducing_points",
    "induced_attention",
    "induced_maps",
    "init_isab",
    "init_mab",
    "init_pma",
    "isab",
    "mab",
    "pma",
    "sab",
]

SET_TRANSFORMER = ('J. Lee et al., 2019, "Set Transformer: A Framework for Attention-based Permutation-Invariant '
                   'Neural Networks", arXiv:1810.00825')
FORMS = ("paper", "official")
SCALE_BY = ("head", "model")
INDUCING = 4                                                       # ℓ drawn when not given (a demonstration size)


# --- the inducing-point attention path (the registry's apply) -------------------------------------

def draw_inducing_points(rng, num_inducing: int, d: int) -> NDArray:
    r"""Draw ℓ inducing points as the attention path sees them, already projected: :math:`I W^Q \sim \mathcal{N}(0, 1)`.

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw.
    num_inducing : int
        ℓ, the number of inducing points (*m* in the paper).
    d : int
        Their width, the queries' and keys' d_k.

    Returns
    -------
    inducing : (ℓ, d) ndarray
        ``rng.standard_normal((num_inducing, d))``, the scale of the test queries.

    Examples
    --------
    >>> draw_inducing_points(0, 4, 8).shape
    (4, 8)
    """
    rng = as_rng(rng)
    return rng.standard_normal((check_positive_int("num_inducing", num_inducing), check_non_negative_int("d", d)))


def induced_maps(q: ArrayLike, k: ArrayLike, inducing: ArrayLike, *, inducing_keys: ArrayLike | None = None,
                 scale: float | None = None) -> tuple[NDArray, NDArray]:
    r"""The two attention maps of the inducing-point path: the inducing points on the keys, the queries on the memory.

    .. math::

        A_{IK} = \operatorname{softmax}(s\, I K_I^\top), \qquad
        A_{QH} = \operatorname{softmax}(s\, Q (A_{IK} K)^\top)

    Parameters
    ----------
    q : (..., n, d_k) array_like
        Queries.
    k : (..., m, d_k) array_like
        Keys; the memory's keys are :math:`H_K = A_{IK} K`.
    inducing : (..., ℓ, d_k) array_like
        The inducing points :math:`I` (projected to the query space).
    inducing_keys : (..., m, d_k) array_like, optional
        :math:`K_I`, the keys the inducing points read; default ``k``.
    scale : float, optional
        :math:`s`, multiplier of both score matrices; default :math:`1/\sqrt{d_k}`.

    Returns
    -------
    A_QH : (..., n, ℓ) ndarray
        Each query's weights on the ℓ memory slots.
    A_IK : (..., ℓ, m) ndarray
        Each inducing point's weights on the m keys; ``A_QH @ A_IK`` is the effective matrix.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, I = rng.standard_normal((5, 4)), rng.standard_normal((7, 4)), rng.standard_normal((3, 4))
    >>> A_QH, A_IK = induced_maps(q, k, I)
    >>> A_QH.shape, A_IK.shape, bool(np.allclose((A_QH @ A_IK).sum(axis=-1), 1.0))
    ((5, 3), (3, 7), True)
    """
    q, k, _, inducing, inducing_keys, scale = check_induced(q, k, None, inducing, inducing_keys, scale)
    _, A_QH, A_IK = induced_path(q, k, k[..., :0], inducing, inducing_keys, scale)
    return A_QH, A_IK


def induced_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    inducing: ArrayLike | None = None,
    *,
    num_inducing: int | None = None,
    rng: np.random.Generator | int | None = None,
    inducing_keys: ArrayLike | None = None,
    causal: bool = False,
    scale: float | None = None,
    return_weights: bool = False,
) -> NDArray | tuple[NDArray, NDArray]:
    r"""Inducing-point attention, ISAB's attention path: the queries attend what ℓ inducing points gathered.

    .. math::

        A_{IK} = \operatorname{softmax}(s\, I K_I^\top), \quad
        H_K = A_{IK} K, \quad H_V = A_{IK} V, \quad
        \mathrm{out} = \operatorname{softmax}(s\, Q H_K^\top)\, H_V = (A_{QH} A_{IK})\, V

    Parameters
    ----------
    q : (..., n, d_k) array_like
        Queries :math:`Q` (the set, projected: :math:`XW^Q` of the second MAB).
    k : (..., m, d_k) array_like
        Keys; the memory's keys are their mixtures :math:`H_K = A_{IK} K`.
    v : (..., m, d_v) array_like
        Values; the memory's values are :math:`H_V = A_{IK} V`.
    inducing : (..., ℓ, d_k) array_like, optional
        The inducing points :math:`I`, as queries of the first attention; drawn from ``rng``
        (:func:`draw_inducing_points`) when not given.
    num_inducing : int, optional
        ℓ, when drawing ``inducing``: default 4 (a small demonstration size); when it is given, its
        rows (and ``num_inducing``, if given too, must agree).
    rng : numpy.random.Generator or int, optional
        Source of ``inducing`` when it is not given (unused when it is).
    inducing_keys : (..., m, d_k) array_like, optional
        :math:`K_I`, the keys the inducing points read; default ``k`` (see Notes).
    causal : bool, default False
        Must be False: a set has no order, and the inducing points read every element.
    scale : float, optional
        :math:`s`, multiplier of both score matrices; default :math:`1/\sqrt{d_k}`.
    return_weights : bool, default False
        Also return the effective matrix :math:`W = A_{QH} A_{IK}`.

    Returns
    -------
    out : (..., n, d_v) ndarray
    weights : (..., n, m) ndarray
        Only if ``return_weights``; rows sum to 1 and ``out == weights @ v``.

    Notes
    -----
    One head of ISAB_ℓ(X) = MAB(X, MAB(I, X)) with the blocks' residuals, layer norms and rFFs
    removed is exactly this, with ``q`` = :math:`XW^Q_2`, ``inducing_keys`` = :math:`XW^K_1`,
    ``k`` = :math:`XW^V_1 W^O_1 W^K_2` and ``v`` = :math:`XW^V_1 W^O_1 W^V_2`, ``inducing`` =
    :math:`IW^Q_1`: a product of linear maps after the first attention's weights is the same
    weights on the product, so the memory's keys and values are :math:`A_{IK}` applied to two
    projections of X. The registry's ``apply`` takes ``inducing_keys = k`` (three projections of
    the set become the two it is given). In the full block the second attention's keys and values
    are projections of MAB(I, X), whose residual, layer norm and rFF are not linear: the full ISAB
    has no n × m matrix, and this path is its attention, not the block (:func:`isab` is the block).

    No exact limit: every memory slot is a softmax mixture of all m keys with positive weights, so
    W equals softmax attention only in the limit of one inducing point per key with infinite
    scores on it (:math:`A_{IK} \to I`), never at finite inducing points that do not depend on the
    keys. Cost O((n + m)·ℓ·d), memory O((n + m)·ℓ): nothing n × m unless ``return_weights``.

    References
    ----------
    .. [1] J. Lee et al., "Set Transformer: A Framework for Attention-based Permutation-Invariant
       Neural Networks", ICML 2019, arXiv:1810.00825v3, §3.1 (ISAB).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 6, 4))
    >>> out, W = induced_attention(q, k, v, draw_inducing_points(1, 2, 4), return_weights=True)
    >>> out.shape, int(np.linalg.matrix_rank(W)), bool(np.allclose(out, W @ v))
    ((6, 4), 2, True)
    """
    if causal is not False:
        raise ValueError(f"induced_attention has no causal form (causal must be False, got {causal!r}): the inducing "
                         "points attend every element of the set, and a set has no order")
    return_weights = check_bool("return_weights", return_weights)
    inducing = given_points("set_transformer", ("inducing", "num_inducing"), inducing, num_inducing, rng, q)
    q, k, v, inducing, inducing_keys, scale = check_induced(q, k, v, inducing, inducing_keys, scale)
    if return_weights:
        check_fits("the weights (return_weights=True)", (*broadcast_batch(
            {"q": q.shape[:-2], "k": k.shape[:-2], "v": v.shape[:-2], "inducing": inducing.shape[:-2]}),
            q.shape[-2], k.shape[-2]))
    out, A_QH, A_IK = induced_path(q, k, v, inducing, inducing_keys, scale)
    return (out, A_QH @ A_IK) if return_weights else out


def given_points(by: str, names: tuple[str, str], points, count, rng, q, draw=None,
                 what: str = "inducing points") -> ArrayLike:
    """The inducing points (Luna: the pack) ``points``, or ``count`` of them (``INDUCING`` by default) drawn from
    ``rng`` at q's width by ``draw(rng, count, d)`` (default :func:`draw_inducing_points`), through
    :func:`~refattn.draws.given_or_drawn`; ``names`` are the points' and the count's options."""
    if count is not None:
        count = check_positive_int(names[1], count)
        if points is not None and np.shape(points)[-2:-1] != (count,):
            raise ValueError(f"{names[0]} has shape {np.shape(points)} but {names[1]}={count}")
    draw = draw or draw_inducing_points
    return given_or_drawn(by, names[0], points, optional_rng(rng), what=f"its {what}",
                          draw=lambda r: draw(r, INDUCING if count is None else count,
                                              as_float("q", q, min_ndim=2).shape[-1]))


def check_induced(q, k, v, inducing, inducing_keys, scale, names: tuple[str, str] = ("inducing", "inducing_keys")):
    """q, k, v (``v=None``: not checked) as float64, the inducing points and their keys checked against them (named
    ``names`` in the messages: Luna calls them its pack), ``scale`` resolved: ``(q, k, v, inducing, keys, scale)``."""
    q, k = as_float("q", q), as_float("k", k)
    v = None if v is None else as_float("v", v)
    check_qkv(q, k, k if v is None else v)
    inducing = as_float(names[0], inducing, min_ndim=2)
    if inducing.shape[-1] != q.shape[-1]:
        raise ValueError(f"{names[0]} has d_k={inducing.shape[-1]} (shape {inducing.shape}) but q has "
                         f"d_k={q.shape[-1]} (shape {q.shape})")
    if inducing.shape[-2] == 0:
        raise ValueError(f"{names[0]} must hold at least one row, got shape {inducing.shape}")
    if inducing_keys is None:
        inducing_keys = k
    else:
        inducing_keys = as_float(names[1], inducing_keys, min_ndim=2)
        if inducing_keys.shape[-2:] != k.shape[-2:]:
            raise ValueError(f"{names[1]} must have k's (m, d_k) = {k.shape[-2:]}, got shape {inducing_keys.shape}")
    broadcast_batch({"q": q.shape[:-2], "k": k.shape[:-2], names[0]: inducing.shape[:-2],
                     names[1]: inducing_keys.shape[:-2]})
    scale = default_scale(q.shape[-1]) if scale is None else check_scale(scale)
    return q, k, v, inducing, inducing_keys, scale


def induced_path(q: NDArray, k: NDArray, v: NDArray, inducing: NDArray, inducing_keys: NDArray,
                 scale: float) -> tuple[NDArray, NDArray, NDArray]:
    """``(out, A_QH, A_IK)`` on checked input: both attentions through sdpa, the memory's keys and values gathered
    by one pass of the inducing points (Luna's non-causal pack and unpack are this path too)."""
    d_k = k.shape[-1]
    lead = broadcast_batch({"k": k.shape[:-2], "v": v.shape[:-2]})
    kv = np.concatenate([np.broadcast_to(k, (*lead, *k.shape[-2:])),
                         np.broadcast_to(v, (*lead, *v.shape[-2:]))], axis=-1)   # (..., m, d_k + d_v)  [K | V]
    H, A_IK = scaled_dot_product_attention(inducing, inducing_keys, kv, scale=scale,
                                           return_weights=True)    # (..., ℓ, d_k + d_v), (..., ℓ, m)
    H_K, H_V = H[..., :d_k], H[..., d_k:]                          # (..., ℓ, d_k), (..., ℓ, d_v)  A_IK K, A_IK V
    out, A_QH = scaled_dot_product_attention(q, H_K, H_V, scale=scale,
                                             return_weights=True)  # (..., n, d_v), (..., n, ℓ)
    return out, A_QH, A_IK


# --- the blocks -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class MABParams:
    """Parameters of one multihead attention block.

    Attributes
    ----------
    attention : MultiHeadParams
        :math:`W^Q_j, W^K_j, W^V_j, W^O` (``form="official"`` uses no :math:`W^O`).
    rff : FeedForwardParams
        The row-wise feed-forward layer (``form="official"``: one layer and a ReLU, stored as
        ``w_2 = I``, ``b_2 = 0``).
    norm_1, norm_2 : LayerNormParams
        The two layer norms.
    """

    attention: MultiHeadParams
    rff: FeedForwardParams
    norm_1: LayerNormParams
    norm_2: LayerNormParams


@dataclass(frozen=True)
class ISABParams:
    """The inducing points :math:`I` (ℓ, d_model) and the blocks MAB(I, X) (``mab_1``) and MAB(X, H) (``mab_2``)."""

    inducing: NDArray
    mab_1: MABParams
    mab_2: MABParams


@dataclass(frozen=True)
class PMAParams:
    """The seeds :math:`S` (k, d_model), the block MAB(S, ·) and the rFF on Z (``None``: the official code's none)."""

    seeds: NDArray
    mab: MABParams
    rff: FeedForwardParams | None


def init_mab(rng, d_model: int, num_heads: int, *, d_ff: int | None = None, form: str = "paper") -> MABParams:
    r"""Draw a MAB: multi-head attention (Glorot), the rFF, layer norms at γ = 1, β = 0.

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw (attention first, then the rFF).
    d_model : int
        Width d of the set's elements.
    num_heads : int
        *h*.
    d_ff : int, optional
        Inner width of the paper's two-layer rFF; default ``d_model``.
    form : {"paper", "official"}, default "paper"
        "paper": :func:`~refattn.feed_forward` with ReLU between two layers (the paper leaves the
        rFF open: "any row-wise feedforward layer"). "official": one d_model × d_model layer and a
        ReLU, ``relu(fc_o(O))``, stored with ``w_2 = I`` (``d_ff`` must be None).

    Returns
    -------
    MABParams
    """
    rng = as_rng(rng)
    check_choice("form", form, FORMS)
    attention = init_multi_head(rng, d_model, num_heads)
    if form == "official":
        if d_ff is not None:
            raise ValueError(f"form='official' has a one-layer rFF of width d_model: d_ff must be None, got {d_ff!r}")
        one = init_feed_forward(rng, d_model, d_model)
        rff = FeedForwardParams(one.w_1, one.b_1, np.eye(d_model), np.zeros(d_model))   # relu(O W + b)
    else:
        rff = init_feed_forward(rng, d_model, d_model if d_ff is None else d_ff)
    return MABParams(attention, rff, init_layer_norm(d_model), init_layer_norm(d_model))


def _xavier_rows(rng: np.random.Generator, rows: int, d_model: int) -> NDArray:
    """(rows, d) from U(±√(6 / ((rows + 1)·d))): the official ``nn.init.xavier_uniform_`` of a (1, rows, d) tensor."""
    bound = math.sqrt(6.0 / ((rows + 1) * d_model))
    return rng.uniform(-bound, bound, size=(rows, d_model))


def init_isab(rng, d_model: int, num_heads: int, num_inducing: int, *, d_ff: int | None = None,
              form: str = "paper") -> ISABParams:
    r"""Draw an ISAB: ℓ inducing points, then MAB(I, X), then MAB(X, H).

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw, in that order.
    d_model : int
        Width d.
    num_heads : int
        *h*.
    num_inducing : int
        ℓ (*m* in the paper).
    d_ff : int, optional
        As in :func:`init_mab`.
    form : {"paper", "official"}, default "paper"
        As in :func:`init_mab`.

    Returns
    -------
    ISABParams
        The inducing points from U(±√(6/((ℓ + 1)·d))), as the official ``xavier_uniform_`` draws its
        (1, ℓ, d) parameter.
    """
    rng = as_rng(rng)
    inducing = _xavier_rows(rng, check_positive_int("num_inducing", num_inducing), check_positive_int("d_model",
                                                                                                      d_model))
    return ISABParams(inducing, init_mab(rng, d_model, num_heads, d_ff=d_ff, form=form),
                      init_mab(rng, d_model, num_heads, d_ff=d_ff, form=form))


def init_pma(rng, d_model: int, num_heads: int, num_seeds: int, *, d_ff: int | None = None,
             form: str = "paper") -> PMAParams:
    r"""Draw a PMA: k seed vectors, MAB(S, ·), and the rFF on Z (none with ``form="official"``).

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw, in that order.
    d_model : int
        Width d.
    num_heads : int
        *h*.
    num_seeds : int
        *k*, the number of outputs.
    d_ff : int, optional
        As in :func:`init_mab` (also the inner width of the rFF on Z).
    form : {"paper", "official"}, default "paper"
        As in :func:`init_mab`; "official" also leaves out the rFF on Z (``rff=None``).

    Returns
    -------
    PMAParams
    """
    rng = as_rng(rng)
    seeds = _xavier_rows(rng, check_positive_int("num_seeds", num_seeds), check_positive_int("d_model", d_model))
    block = init_mab(rng, d_model, num_heads, d_ff=d_ff, form=form)
    rff = None if form == "official" else init_feed_forward(rng, d_model, d_model if d_ff is None else d_ff)
    return PMAParams(seeds, block, rff)


def mab(x: ArrayLike, y: ArrayLike, params: MABParams, *, num_heads: int, form: str = "paper",
        scale_by: str = "head", layer_norm: bool = True, eps: float = 1e-5) -> NDArray:
    r"""Multihead attention block: X attends Y, then a residual rFF (§3.1).

    .. math::

        \operatorname{MAB}(X, Y) = \operatorname{LayerNorm}(H + \operatorname{rFF}(H)), \qquad
        H = \operatorname{LayerNorm}(X + \operatorname{Multihead}(X, Y, Y))

    Parameters
    ----------
    x : (..., n, d_model) array_like
        The attending set X.
    y : (..., m, d_model) array_like
        The attended set Y.
    params : MABParams
        From :func:`init_mab`.
    num_heads : int
        *h*.
    form : {"paper", "official"}, default "paper"
        "official": the official ``MAB.forward``, with no :math:`W^O` and the projected queries
        in the residual, :math:`O = XW^Q + b^Q + \operatorname{concat}_j(A_j V_j)`, then
        :math:`O + \operatorname{rFF}(O)` (its rFF: ``relu(fc_o(O))``, see :func:`init_mab`);
        ``params.attention.w_o`` and ``b_o`` are not used, and h·d_v must equal d_model.
    scale_by : {"head", "model"}, default "head"
        Scores scaled by :math:`1/\sqrt{d_k}` with the per-head width (see Notes), or by
        :math:`1/\sqrt{h\, d_k}`, the official code's ``math.sqrt(self.dim_V)``.
    layer_norm : bool, default True
        Apply the two layer norms (the paper); the official ``MAB`` has ``ln=False`` by default.
    eps : float, default 1e-5
        Layer-norm epsilon.

    Returns
    -------
    out : (..., n, d_model) ndarray
        Permutation-equivariant in X (row *i* depends on x_i and the set Y), invariant in Y.

    Notes
    -----
    The paper's activation is the "scaled softmax" :math:`\operatorname{softmax}(\cdot/\sqrt{d})`
    without saying which width d is; the MAB is stated to adapt the Transformer's encoder block,
    whose heads each scale by their own :math:`\sqrt{d_k}`, and :func:`~refattn.multi_head_attention`
    does so: ``scale_by="head"`` is the default. The official code divides every head's scores by
    :math:`\sqrt{\dim_V}`, the width of all heads together (issue #8 discusses its other
    departures): ``scale_by="model"``. With one head the two agree.

    References
    ----------
    .. [1] J. Lee et al., "Set Transformer", ICML 2019, arXiv:1810.00825v3, §2.2, §3.1.
    .. [2] juho-lee/set_transformer, ``modules.py`` (``MAB``); issues #8, #9.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> params = init_mab(rng, d_model=8, num_heads=2)
    >>> x, y = rng.standard_normal((5, 8)), rng.standard_normal((7, 8))
    >>> out = mab(x, y, params, num_heads=2)
    >>> out.shape, bool(np.allclose(mab(x, y[::-1], params, num_heads=2), out))
    ((5, 8), True)
    """
    check_choice("form", form, FORMS)
    check_choice("scale_by", scale_by, SCALE_BY)
    layer_norm = check_bool("layer_norm", layer_norm)
    if not isinstance(params, MABParams):
        raise TypeError(f"params must be MABParams (see init_mab), got {type(params).__name__}")
    x, y = as_float("x", x, min_ndim=2), as_float("y", y, min_ndim=2)
    att = params.attention
    scale = None if scale_by == "head" else 1.0 / math.sqrt(att.w_q.shape[1])   # 1/√d_k or 1/√(h·d_k)

    def norm(z: NDArray, p: LayerNormParams) -> NDArray:
        return normalise(z, p.gamma, p.beta, eps) if layer_norm else z

    if form == "paper":
        H = norm(x + multi_head_attention(x, y, att, num_heads=num_heads, scale=scale), params.norm_1)
    else:
        if att.w_q.shape[1] != att.d_model or att.w_v.shape[1] != att.d_model:
            raise ValueError(f"form='official' adds concat(heads) to the projected queries, so h·d_k and h·d_v "
                             f"must be d_model={att.d_model}; got w_q shape {att.w_q.shape}, w_v shape "
                             f"{att.w_v.shape}")
        concat = replace(att, w_o=np.eye(att.d_model), b_o=None)  # concat(A_j V_j), no Wᴼ
        heads = multi_head_attention(x, y, concat, num_heads=num_heads, scale=scale)   # (..., n, h·d_v)
        Q_ = x @ att.w_q + (0.0 if att.b_q is None else att.b_q)  # (..., n, h·d_k)  fc_q(Q)
        H = norm(Q_ + heads, params.norm_1)                        # O = Q_ + concat(A_j V_j)
    return norm(H + feed_forward(H, params.rff), params.norm_2)   # (..., n, d_model)


def sab(x: ArrayLike, params: MABParams, *, num_heads: int, form: str = "paper", scale_by: str = "head",
        layer_norm: bool = True, eps: float = 1e-5) -> NDArray:
    r"""Set attention block, :math:`\operatorname{SAB}(X) = \operatorname{MAB}(X, X)`: O(n²) self-attention on the set.

    Parameters
    ----------
    x : (..., n, d_model) array_like
        The set.
    params : MABParams
        From :func:`init_mab`.
    num_heads : int
        *h*.
    form, scale_by, layer_norm, eps
        As in :func:`mab`.

    Returns
    -------
    out : (..., n, d_model) ndarray
    """
    return mab(x, x, params, num_heads=num_heads, form=form, scale_by=scale_by, layer_norm=layer_norm, eps=eps)


def isab(x: ArrayLike, params: ISABParams, *, num_heads: int, form: str = "paper", scale_by: str = "head",
         layer_norm: bool = True, eps: float = 1e-5) -> NDArray:
    r"""Induced set attention block: ℓ inducing points attend the set, the set attends them (§3.1).

    .. math::

        \operatorname{ISAB}_\ell(X) = \operatorname{MAB}(X, H), \qquad H = \operatorname{MAB}(I, X)

    Parameters
    ----------
    x : (..., n, d_model) array_like
        The set.
    params : ISABParams
        From :func:`init_isab`.
    num_heads : int
        *h*.
    form, scale_by, layer_norm, eps
        As in :func:`mab`.

    Returns
    -------
    out : (..., n, d_model) ndarray
        Permutation-equivariant in X; O(n·ℓ·d) time.

    References
    ----------
    .. [1] J. Lee et al., "Set Transformer", ICML 2019, arXiv:1810.00825v3, §3.1.
    .. [2] juho-lee/set_transformer, ``modules.py`` (``ISAB``).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> params = init_isab(rng, d_model=8, num_heads=2, num_inducing=3)
    >>> x = rng.standard_normal((6, 8))
    >>> perm = rng.permutation(6)
    >>> bool(np.allclose(isab(x[perm], params, num_heads=2), isab(x, params, num_heads=2)[perm]))
    True
    """
    if not isinstance(params, ISABParams):
        raise TypeError(f"params must be ISABParams (see init_isab), got {type(params).__name__}")
    options = {"num_heads": num_heads, "form": form, "scale_by": scale_by, "layer_norm": layer_norm, "eps": eps}
    H = mab(params.inducing, x, params.mab_1, **options)           # (..., ℓ, d)  MAB(I, X)
    return mab(x, H, params.mab_2, **options)                      # (..., n, d)  MAB(X, H)


def pma(z: ArrayLike, params: PMAParams, *, num_heads: int, form: str = "paper", scale_by: str = "head",
        layer_norm: bool = True, eps: float = 1e-5) -> NDArray:
    r"""Pooling by multihead attention: k seed vectors attend the set (§3.2).

    .. math::

        \operatorname{PMA}_k(Z) = \operatorname{MAB}(S, \operatorname{rFF}(Z))

    Parameters
    ----------
    z : (..., n, d_model) array_like
        The encoded set Z.
    params : PMAParams
        From :func:`init_pma`; ``params.rff=None`` pools Z itself, as the official ``PMA`` does
        (issue #11: "the implementation there slightly diverges from what we described in the paper").
    num_heads : int
        *h*.
    form, scale_by, layer_norm, eps
        As in :func:`mab`.

    Returns
    -------
    out : (..., k, d_model) ndarray
        Permutation-invariant in Z.

    References
    ----------
    .. [1] J. Lee et al., "Set Transformer", ICML 2019, arXiv:1810.00825v3, §3.2.
    .. [2] juho-lee/set_transformer, ``modules.py`` (``PMA``); issue #11.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> params = init_pma(rng, d_model=8, num_heads=2, num_seeds=1)
    >>> z = rng.standard_normal((6, 8))
    >>> bool(np.allclose(pma(z[::-1], params, num_heads=2), pma(z, params, num_heads=2)))
    True
    """
    if not isinstance(params, PMAParams):
        raise TypeError(f"params must be PMAParams (see init_pma), got {type(params).__name__}")
    z = as_float("z", z, min_ndim=2)
    memory = z if params.rff is None else feed_forward(z, params.rff)   # (..., n, d)  rFF(Z)
    return mab(params.seeds, memory, params.mab, num_heads=num_heads, form=form, scale_by=scale_by,
               layer_norm=layer_norm, eps=eps)                     # (..., k, d)  MAB(S, rFF(Z))


RECORD = Mechanism.of(
    induced_attention, allowed=None,
    id="set_transformer", title="Set Transformer inducing-point attention (ISAB)", family="compressed",
    section="4.3.2", paper=SET_TRANSFORMER,
    equation=r"\operatorname{softmax}\!\big(Q (A_{IK}K)^\top/\sqrt{d}\big)\, A_{IK} V,\ "
             r"A_{IK} = \operatorname{softmax}(I K^\top/\sqrt{d})",
    time="O((n + m)·ℓ·d)", memory="O((n + m)·ℓ)", kind="attention",
    causal=False, examples=({"num_inducing": 1}, {"num_inducing": 9}, {"scale": 2.0}),
    figure="refattn.figures.set_transformer:set_transformer", exact_options=None,
    exact_limit="none: each of the ℓ memory slots is a softmax mixture of every key, so W = A_QH·A_IK has rank "
                "≤ ℓ and reaches softmax attention only as one inducing point per key takes infinite scores on it",
    draws=("inducing",),
)
