r"""Luna: linear unified nested attention (Ma et al., 2021, arXiv:2106.01540v2, §3; survey §4.3.2).

    Y_P = Attn(P, C)            pack: l extra tokens P attend the context C           (l × d)
    Y_X = Attn(X, Y_P)          unpack: the sequence X attends the packed context     (n × d)
    LunaAttn(X, P, C) = (Y_X, Y_P); a Luna layer passes LayerNorm(Y_P + P) on as the next layer's P

P is a learned sequence of a fixed length l (the first layer's is an embedding; the official
encoder draws it N(0, 1/d) and scales it by √d), so both attentions cost O(l·n·d): linear in
the sequence length. With each attention's projections written out, one head is

    A_pack = softmax(s · P_Q K_Pᵀ)                    (l × m)   P_Q = P W_Pᵠ,  K_P = C W_Pᴷ
    P'_K = A_pack K,   P'_V = A_pack V                (l × d)   the packed context's keys and values
    A_unpack = softmax(s · Q P'_Kᵀ)                   (n × l)   Q = X Wᵠ
    out = A_unpack P'_V = (A_unpack A_pack) V = W V   (n × m)   the effective matrix W

because the unpack's keys and values are projections of Y_P = A_pack (C W_Pⱽ): a linear map after
the pack's weights is the same weights on the mapped context, so K = C W_Pⱽ Wᴷ and V = C W_Pⱽ Wⱽ
are two projections of the context that A_pack mixes. That is the registry's uniform
``apply(q, k, v)``: ``q`` the unpack's queries, ``k`` and ``v`` the context's projections that
the pack mixes into the packed keys and values, the pack queries ``pack`` (P_Q, drawn from
``rng``), and the pack reading ``k`` as its keys (``pack_keys`` of :func:`luna_attention` takes a
third projection K_P). The non-causal core is Set Transformer's inducing-point attention path
(:func:`~refattn.compressed.induced_attention`) with P for the inducing points; Luna's P′ goes on
to the next layer where ISAB's inducing points are fixed parameters of each block.

The causal form (the official ``LunarCausalAttention``): a softmax over the whole sequence would
let position t read later tokens, so the pack weights become an elementwise activation and the
packed context at t is the mean over the first t + 1 positions:

    F_jl = softplus_β(s · k_P,j · P_Q,l),   softplus_β(x) = ln(1 + e^{βx})/β,  β = ln 2   (F ≥ 0, F(0) = 1)
    P'_K,t = (1/(t+1)) Σ_{j≤t} F_j k_jᵀ,   P'_V,t = (1/(t+1)) Σ_{j≤t} F_j v_jᵀ           (l × d each)
    out_t = softmax_l(s · P'_K,t q_t)ᵀ P'_V,t
    W_tj = (1/(t+1)) Σ_l softmax_l(s · P'_K,t q_t)_l F_jl  for j ≤ t,  0 after              (n × m)

W_tj ≥ 0 but its rows do not sum to 1 (F is not normalised). Output t reads only positions ≤ t,
and a decoder keeps the running sums Σ F_j k_jᵀ and Σ F_j v_jᵀ (the official
``incremental_causal_attention``), so the bottom-right (key/value-cache) form is the same sums.
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.budget import check_fits
from ..common.checks import as_rng, broadcast_batch, causal_alignment, check_bool
from ..common.ints import check_non_negative_int, check_positive_int
from ..core.softmax import softmax
from ..mechanism import Mechanism
from .set_transformer import check_induced, given_points, induced_path

__all__ = ["draw_pack", "luna_attention", "luna_maps", "pack_activation"]

LUNA = ('X. Ma et al., 2021, "Luna: Linear Unified Nested Attention", arXiv:2106.01540')
BETA = np.log(2.0)                                                 # the official softplus's beta


def draw_pack(rng, pack_length: int, d: int) -> NDArray:
    r"""Draw the pack queries as the attention sees them, already projected: :math:`P W_P^Q \sim \mathcal{N}(0, 1)`.

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw.
    pack_length : int
        *l*, the length of the extra sequence P.
    d : int
        Width d_k of the queries and keys.

    Returns
    -------
    pack : (l, d) ndarray
        ``rng.standard_normal((pack_length, d))``: the official encoder's P is N(0, 1/d) times √d.

    Examples
    --------
    >>> draw_pack(0, 4, 8).shape
    (4, 8)
    """
    rng = as_rng(rng)
    return rng.standard_normal((check_positive_int("pack_length", pack_length), check_non_negative_int("d", d)))


def pack_activation(x: ArrayLike) -> NDArray:
    r"""The causal pack's activation, softplus with :math:`\beta = \ln 2`: :math:`\log_2(1 + 2^x)`.

    .. math::

        \operatorname{softplus}_\beta(x) = \frac{1}{\beta} \ln(1 + e^{\beta x}), \qquad \beta = \ln 2

    Parameters
    ----------
    x : array_like of float
        Scaled pack scores.

    Returns
    -------
    F : ndarray
        Positive, 1 at x = 0, close to x for large x (the official ``F.softplus(pattn, beta=math.log(2.0))``).

    Examples
    --------
    >>> pack_activation([0.0, 1.0, -1.0])
    array([1.       , 1.5849625, 0.5849625])
    """
    x = np.asarray(x, dtype=np.float64)
    return np.logaddexp(0.0, BETA * x) / BETA                      # ln(1 + e^{βx})/β


def luna_maps(q: ArrayLike, k: ArrayLike, pack: ArrayLike, *, pack_keys: ArrayLike | None = None,
              causal: bool | str = False, scale: float | None = None) -> tuple[NDArray, NDArray]:
    r"""Luna's two maps: the unpack's weights on the l packed tokens, and the pack's weights on the keys.

    .. math::

        A_\mathrm{pack} = \operatorname{softmax}(s\, P_Q K_P^\top), \qquad
        A_\mathrm{unpack} = \operatorname{softmax}(s\, Q (A_\mathrm{pack} K)^\top)

    and causal, :math:`F^\top` with :math:`F_{jl} = \operatorname{softplus}_\beta(s\, k_{P,j} \cdot
    P_{Q,l})` in place of :math:`A_\mathrm{pack}`, and row *t* of :math:`A_\mathrm{unpack}` the
    softmax over the packed context of the first t + 1 positions.

    Parameters
    ----------
    q : (..., n, d_k) array_like
        The unpack's queries.
    k : (..., m, d_k) array_like
        Keys (the source of the packed keys, and the pack's keys unless ``pack_keys``).
    pack : (..., l, d_k) array_like
        The pack queries :math:`P_Q` (:func:`draw_pack`).
    pack_keys : (..., m, d_k) array_like, optional
        :math:`K_P`, the keys the pack reads; default ``k``.
    causal : {False, True, "top-left", "bottom-right"}, default False
        As in :func:`luna_attention`.
    scale : float, optional
        :math:`s`; default :math:`1/\sqrt{d_k}`.

    Returns
    -------
    A_unpack : (..., n, l) ndarray
        Rows sum to 1 (causal: 0 for a query before every key).
    A_pack : (..., l, m) ndarray
        Non-causal: rows sum to 1, and ``A_unpack @ A_pack`` is the effective matrix. Causal: the
        activations :math:`F^\top`, unnormalised (see :func:`luna_attention` for the matrix).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, P = rng.standard_normal((5, 4)), rng.standard_normal((7, 4)), rng.standard_normal((3, 4))
    >>> A_unpack, A_pack = luna_maps(q, k, P)
    >>> A_unpack.shape, A_pack.shape
    ((5, 3), (3, 7))
    """
    q, k, _, pack, pack_keys, scale = check_induced(q, k, None, pack, pack_keys, scale, names=("pack", "pack_keys"))
    alignment = causal_alignment(causal)
    if alignment is None:
        _, A_unpack, A_pack = induced_path(q, k, k[..., :0], pack, pack_keys, scale)
        return A_unpack, A_pack
    _, A_unpack, F, _ = _causal(q, k, k[..., :0], pack, pack_keys, scale, alignment)
    return A_unpack, np.swapaxes(F, -1, -2)


def luna_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    pack: ArrayLike | None = None,
    *,
    pack_length: int | None = None,
    rng: np.random.Generator | int | None = None,
    pack_keys: ArrayLike | None = None,
    causal: bool | str = False,
    scale: float | None = None,
    return_weights: bool = False,
) -> NDArray | tuple[NDArray, NDArray]:
    r"""Luna's pack and unpack attention: l pack tokens attend the keys, the queries attend the packed context.

    .. math::

        A_\mathrm{pack} = \operatorname{softmax}(s\, P_Q K_P^\top), \quad
        \mathrm{out} = \operatorname{softmax}\big(s\, Q (A_\mathrm{pack} K)^\top\big)\, A_\mathrm{pack} V
        = (A_\mathrm{unpack} A_\mathrm{pack})\, V

    Causal (top-left: position *t* = query *i*; bottom-right: *t* = i + m − n):

    .. math::

        \mathrm{out}_t = \sum_l \operatorname{softmax}_l\Big(s\, q_t \cdot \tfrac{1}{t+1}
        \textstyle\sum_{j \le t} F_{jl} k_j\Big)\, \tfrac{1}{t+1} \sum_{j \le t} F_{jl} v_j,
        \qquad F_{jl} = \operatorname{softplus}_{\ln 2}(s\, k_{P,j} \cdot P_{Q,l})

    Parameters
    ----------
    q : (..., n, d_k) array_like
        The unpack's queries, :math:`X W^Q`.
    k : (..., m, d_k) array_like
        The context's keys: the packed keys are their mixtures :math:`A_\mathrm{pack} K` (see the
        module's notes for how Luna's projections map onto k and v).
    v : (..., m, d_v) array_like
        The context's values: the packed values are :math:`A_\mathrm{pack} V`.
    pack : (..., l, d_k) array_like, optional
        The pack queries :math:`P_Q = P W^Q_P`; drawn from ``rng`` (:func:`draw_pack`) when not given.
    pack_length : int, optional
        *l*, when drawing ``pack``: default 4 (a small demonstration size); when it is given, its
        rows (and ``pack_length``, if given too, must agree).
    rng : numpy.random.Generator or int, optional
        Source of ``pack`` when it is not given (unused when it is).
    pack_keys : (..., m, d_k) array_like, optional
        :math:`K_P`, the keys the pack tokens read; default ``k`` (the registry's ``apply``).
    causal : {False, True, "top-left", "bottom-right"}, default False
        The causal form: output *t* reads positions ``j <= t`` only, through the running means of
        :math:`F_j k_j^\top` and :math:`F_j v_j^\top`. A query before every key (bottom-right with
        n > m) outputs 0.
    scale : float, optional
        :math:`s`, multiplier of the pack's and the unpack's scores; default :math:`1/\sqrt{d_k}`.
    return_weights : bool, default False
        Also return the effective matrix W, ``out == W @ v``.

    Returns
    -------
    out : (..., n, d_v) ndarray
    weights : (..., n, m) ndarray
        Only if ``return_weights``. Non-causal: :math:`A_\mathrm{unpack} A_\mathrm{pack}`, rows
        summing to 1. Causal: :math:`W_{tj} = \frac{1}{t+1} \sum_l A_{\mathrm{unpack},tl} F_{jl}`
        on ``j <= t``, 0 after; >= 0, rows not normalised.

    Notes
    -----
    *Paper and official code.* The pack and the unpack are the paper's Attn, a scaled-softmax
    attention; the official ``LunarMultiheadAttention`` ties each attention's keys and values to
    one projection by default (``tie_kv``): pass ``pack_keys`` and ``k`` accordingly. Its causal
    form is the official ``LunarCausalAttention`` (``efficient_causal_attention_parallel`` and, one
    step at a time, ``incremental_causal_attention``): the activation ``F.softplus(·,
    beta=math.log(2.0))`` on the scaled pack scores, and the mean over the t + 1 positions seen,
    ``.div(i + 1.)``. With n != m and ``causal=True`` a query *t* >= m sees all m keys and the
    mean is over m.

    No exact limit: the unpack attends l mixtures of all the keys (positive softmax weights,
    causal: positive activations), so W reaches softmax attention only as the pack tokens become
    one per key with infinite scores (:math:`A_\mathrm{pack} \to I`), which depends on the keys.
    Cost O((n + m)·l·d) time; memory O((n + m)·l) non-causal, O(m·l·d) for the causal running
    sums; nothing n × m unless ``return_weights``.

    References
    ----------
    .. [1] X. Ma et al., "Luna: Linear Unified Nested Attention", NeurIPS 2021, arXiv:2106.01540v2, §3.
    .. [2] XuezheMax/fairseq-apollo, ``fairseq/modules/luna_attention.py`` (``LunarMultiheadAttention``,
       ``LunarCausalAttention``), ``fairseq/models/luna.py`` (the projected embeddings P).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 6, 4))
    >>> P = draw_pack(1, 2, 4)
    >>> out, W = luna_attention(q, k, v, P, return_weights=True)
    >>> int(np.linalg.matrix_rank(W)), bool(np.allclose(W.sum(axis=-1), 1.0)), bool(np.allclose(out, W @ v))
    (2, True, True)
    >>> out, W = luna_attention(q, k, v, P, causal=True, return_weights=True)
    >>> bool(np.all(np.triu(W, 1) == 0)), bool(np.allclose(out, W @ v))
    (True, True)
    """
    alignment = causal_alignment(causal)
    return_weights = check_bool("return_weights", return_weights)
    pack = given_points("luna", ("pack", "pack_length"), pack, pack_length, rng, q, draw=draw_pack,
                        what="pack queries")
    q, k, v, pack, pack_keys, scale = check_induced(q, k, v, pack, pack_keys, scale, names=("pack", "pack_keys"))
    batch = broadcast_batch({"q": q.shape[:-2], "k": k.shape[:-2], "v": v.shape[:-2], "pack": pack.shape[:-2],
                             "pack_keys": pack_keys.shape[:-2]})
    n, m = q.shape[-2], k.shape[-2]
    if return_weights:
        check_fits("the weights (return_weights=True)", (*batch, n, m))
    if alignment is None:
        out, A_unpack, A_pack = induced_path(q, k, v, pack, pack_keys, scale)
        return (out, A_unpack @ A_pack) if return_weights else out
    out, A_unpack, F, count = _causal(q, k, v, pack, pack_keys, scale, alignment)
    if not return_weights:
        return out
    seen = np.arange(m) < count[:, None]                           # (n, m)  j <= t
    with np.errstate(invalid="ignore"):
        W = (A_unpack @ np.swapaxes(F, -1, -2)) / np.maximum(count, 1)[:, None]   # (..., n, m)
    return out, np.where(seen, W, 0.0)                             # later keys: 0 by selection


def _causal(q, k, v, pack, pack_keys, scale, alignment):
    """``(out, A_unpack, F, count)``: the causal form by running sums; ``count[i]`` = positions query i sees."""
    n, m, l = q.shape[-2], k.shape[-2], pack.shape[-2]
    t = np.arange(n) + (m - n if alignment == "bottom-right" else 0)   # (n,)  each query's position
    count = np.clip(t + 1, 0, m)                                   # (n,)  keys j <= t
    with np.errstate(invalid="ignore", over="ignore"):
        F = pack_activation(scale * (pack_keys @ np.swapaxes(pack, -1, -2)))   # (..., m, l)  softplus(s k_P·P_Q)
        S_K = np.cumsum(F[..., :, :, None] * k[..., :, None, :], axis=-3)      # (..., m, l, d_k)  Σ_{j≤t} F_j k_jᵀ
        S_V = np.cumsum(F[..., :, :, None] * v[..., :, None, :], axis=-3)      # (..., m, l, d_v)  Σ_{j≤t} F_j v_jᵀ
    batch = broadcast_batch({"q": q.shape[:-2], "k, v, pack": S_V.shape[:-3]})
    if m == 0 or n == 0:                                           # no key (or no query): zero rows
        return (np.zeros((*batch, n, v.shape[-1])), np.zeros((*batch, n, l)), np.broadcast_to(F, (*batch, m, l)),
                count)
    last = np.maximum(count - 1, 0)                                # (n,)  the running sums at position t
    mean = np.maximum(count, 1)[:, None, None]                     # (n, 1, 1)  t + 1
    P_K = S_K[..., last, :, :] / mean                              # (..., n, l, d_k)  P'_K,t
    P_V = S_V[..., last, :, :] / mean                              # (..., n, l, d_v)  P'_V,t
    with np.errstate(invalid="ignore", over="ignore"):
        S = scale * np.einsum("...nd,...nld->...nl", q, P_K)       # (..., n, l)  s q_t·P'_K,t
    S[~np.isfinite(S)] = np.nan                                    # Inf/NaN read, or overflow: undefined
    A_unpack = softmax(S, mask=(count > 0)[:, None])               # (..., n, l)  0 before every key
    with np.errstate(invalid="ignore"):
        out = np.einsum("...nl,...nld->...nd", A_unpack, P_V)      # (..., n, d_v)
    out[..., count == 0, :] = 0.0                                  # a query before every key: 0
    return out, A_unpack, np.broadcast_to(F, (*batch, m, l)), count


RECORD = Mechanism.of(
    luna_attention,
    id="luna", title="Luna pack and unpack attention", family="compressed", section="4.3.2", paper=LUNA,
    equation=r"\operatorname{softmax}\!\big(Q (A_P K)^\top/\sqrt{d}\big)\, A_P V,\ "
             r"A_P = \operatorname{softmax}(P K^\top/\sqrt{d})",
    time="O((n + m)·l·d)", memory="O((n + m)·l), causal O(m·l·d)", kind="attention",
    causal=True, normalized=False,
    examples=({"pack_length": 1}, {"pack_length": 9}, {"scale": 2.0}),
    figure="refattn.figures.luna:luna", exact_options=None,
    exact_limit="none: the queries attend l packed tokens, each a positive mixture of every key, so W = "
                "A_unpack·A_pack has rank ≤ l and reaches softmax attention only as the pack becomes one token per "
                "key with infinite scores on it",
    draws=("pack",),
)
