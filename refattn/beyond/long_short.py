r"""Long-Short Transformer attention (Zhu et al., 2021, arXiv:2107.02192v3, §3): a short-term sliding window and
a long-range dynamic projection under one softmax, with DualLN.

    K̃, Ṽ = LN_L(K), LN_L(V)                          short branch: keys and values of the window, normalised
    P = softmax_j(K W^P) ∈ R^{m × r}                   dynamic projection, each column a softmax over the keys
    K̄, V̄ = LN_G(Pᵀ K), LN_G(Pᵀ V) ∈ R^{r × d}          long branch: r projected keys and values, normalised
    A = softmax([Q K̄ᵀ, Q K̃ᵀ_window] / √d_k)          one softmax over the r projected keys and the window
    out = A_long V̄ + A_short Ṽ

Short-term window (segment-wise; NVIDIA/transformer-ls, Transformer-LS-LRA/attention_transformer_ls.py
``get_tiles_v2``): the queries are cut into segments of w positions; the queries of segment s = ⌊i / w⌋ see the
keys of their own segment and e = max(⌊w/2⌋, 1) keys on either side of it, keys s·w − e … (s + 1)·w + e − 1
(positions outside 0 … m − 1 are the official code's zero padding, masked). Causal (autoregressive/model_lib/
layer.py ``get_tiles``/``get_diagonals``): query i sees the w keys i − w + 1 … i.

Causal long branch, segment-wise dynamic projection (§3.2; the same file's ``compress_chunks`` and model.py's
``chunk_attn_mask``): the keys are cut into segments of l positions, each projected on its own,
P_s = softmax_j(K_s W^P) ∈ R^{l × r}, K̄_s = LN_G(P_sᵀ K_s); query i sees the r projected keys of every segment
that ends before its own segment starts, s < ⌊i / l⌋, so no row sees a later token.

The output is A_short Ṽ + A_long V̄: with the values normalised (``dual_ln="keys_values"``, the paper's DualLN)
it is not linear in v, and no n × m matrix gives it. With the values as given (``dual_ln="keys"``: the keys of
both branches normalised, which sets the weights; or ``"none"``) it is out = W V with the token-mixing matrix

    W = A_short + A_long Pᵀ            (causal: Σ_s A_{long,s} P_sᵀ placed at segment s's columns)

whose rows sum to 1 and are >= 0: the window part and the projection part. The registry's entry uses
``dual_ln="keys"`` by default so that it can return W; the natural function defaults to the paper's DualLN.

Edge sizes: n = 0 gives (..., 0, d_v); m = 0 leaves every query with no key (no window key and no projection:
a softmax over no key is not defined), a zero row; d_k = 0 with the default scale is a ValueError naming d_k
(an explicit scale gives scores 0); d_v = 0 gives (..., n, 0); a batch of 0 gives empty results.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.checks import (
    as_float,
    as_rng,
    causal_alignment,
    check_bool,
    check_choice,
    check_scale,
    check_sizes,
    checked_qkv,
    default_scale,
)
from ..common.ints import check_non_negative_int, check_positive_int
from ..common.products import weighted_values
from ..core.layer_norm import LayerNormParams, layer_norm
from ..core.softmax import softmax
from ..draws import given_or_drawn, note_allowed, optional_rng
from ..mechanism import Mechanism
from ..sparse.attention import check_weights_fit, sparse_attention
from ..sparse.pattern import SparsePattern, query_positions

__all__ = ["LongShortParams", "init_long_short", "long_short_attention", "long_short_window_pattern"]

ZHU = ('C. Zhu, W. Ping, C. Xiao, M. Shoeybi, T. Goldstein, A. Anandkumar, B. Catanzaro, 2021, "Long-Short '
       'Transformer: Efficient Transformers for Language and Vision", NeurIPS 2021, arXiv:2107.02192')
METHODS = ("equation", "csr", "auto")
DUAL_LN = ("keys_values", "keys", "none")
PROJECTION_INPUTS = ("raw", "normalized")
PROJECTION_STD = 0.02                                              # official init of W^P: N(0, 0.02²)


@dataclass(frozen=True, eq=False)
class LongShortParams:
    r"""The learned parameters of one head: the dynamic projection :math:`W^P` and the two layer norms of DualLN.

    Attributes
    ----------
    w_proj : (d_k, r) ndarray
        :math:`W^P`: ``P = softmax(k @ w_proj)`` over the keys, r >= 0 projected keys (r = 0: no long branch).
    ln_short : LayerNormParams
        :math:`LN_L`'s gain and bias, each (d_k,): the window branch's keys (and values).
    ln_long : LayerNormParams
        :math:`LN_G`'s gain and bias, each (d_k,): the projected keys (and values).

    One layer norm per branch normalises that branch's keys and values alike, as the official code does
    (``dual_ln_full`` / ``dual_ln_dp``), so normalising the values needs d_v = d_k.
    """

    w_proj: NDArray
    ln_short: LayerNormParams
    ln_long: LayerNormParams

    def __post_init__(self) -> None:
        w = as_float("w_proj", self.w_proj)
        if w.ndim != 2:
            raise ValueError(f"w_proj must be a (d_k, r) matrix, got shape {w.shape}")
        object.__setattr__(self, "w_proj", w)
        for name in ("ln_short", "ln_long"):
            ln = getattr(self, name)
            if not isinstance(ln, LayerNormParams):
                raise TypeError(f"{name} must be a LayerNormParams, got {type(ln).__name__}")
            gamma, beta = as_float(f"{name}.gamma", ln.gamma), as_float(f"{name}.beta", ln.beta)
            if gamma.shape != (w.shape[0],) or beta.shape != (w.shape[0],):
                raise ValueError(f"{name} has gamma of shape {gamma.shape} and beta of shape {beta.shape}, but "
                                 f"w_proj has d_k={w.shape[0]}: expected ({w.shape[0]},) each")
            object.__setattr__(self, name, LayerNormParams(gamma, beta))

    @property
    def rank(self) -> int:
        """r, the number of projected keys (per segment when causal)."""
        return self.w_proj.shape[1]


def init_long_short(rng, d_k: int, rank: int) -> LongShortParams:
    r"""Draw :math:`W^P` and set DualLN's layer norms as the official code initialises them.

    .. math::

        W^P_{ab} \sim \mathcal{N}(0, 0.02^2), \qquad \gamma_L = \gamma_G = 1, \quad \beta_L = \beta_G = 0

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of :math:`W^P`.
    d_k : int
        Width of the keys.
    rank : int
        r, the number of projected keys, >= 0.

    Returns
    -------
    LongShortParams

    Notes
    -----
    NVIDIA/transformer-ls initialises every linear layer N(0, 0.02²) with bias 0 and every layer norm
    γ = 1, β = 0 (Transformer-LS-ImageNet/models/msvit.py ``_init_weights``: ``trunc_normal_(std=.02)``, whose
    cut at ±2 is ±100 standard deviations; autoregressive/model_lib/model.py: ``normal_(0.0, 0.02)``). The bias of
    ``to_dynamic_projection`` is left out: it adds a constant along the keys, which the softmax over the keys
    cancels.

    Examples
    --------
    >>> params = init_long_short(0, 8, 3)
    >>> params.w_proj.shape, params.ln_long.gamma.tolist() == [1.0] * 8
    ((8, 3), True)
    """
    rng = as_rng(rng)
    d_k, rank = check_non_negative_int("d_k", d_k), check_non_negative_int("rank", rank)
    w_proj = rng.normal(0.0, PROJECTION_STD, size=(d_k, rank))
    return LongShortParams(w_proj, LayerNormParams(np.ones(d_k), np.zeros(d_k)),
                           LayerNormParams(np.ones(d_k), np.zeros(d_k)))


def long_short_window_pattern(n: int, window: int, *, m: int | None = None, causal: bool | str = False
                              ) -> SparsePattern:
    r"""The short-term window: segment-wise (bidirectional) or the last w keys (causal).

    .. math::

        J_i = \{\, j : s w - e \le j < (s + 1) w + e \,\},\ s = \lfloor i / w \rfloor,\ e = \max(\lfloor w/2
        \rfloor, 1) \quad\text{or, causal,}\quad J_i = \{\, j : i - w < j \le i \,\}

    Parameters
    ----------
    n : int
        Number of queries.
    window : int
        w >= 1: the segment length (bidirectional; each query sees w + 2e keys) or the number of keys seen
        (causal, itself included).
    m : int, optional
        Number of keys; default ``n``.
    causal : {False, True, "top-left", "bottom-right"}, default False
        The causal window (``True``, "top-left"); "bottom-right": the n queries are the last n of the m
        positions, query *i* at position i + m − n.

    Returns
    -------
    SparsePattern
        nnz ≤ n·(w + 2e), built in O(nnz).

    References
    ----------
    .. [1] C. Zhu et al., "Long-Short Transformer: Efficient Transformers for Language and Vision",
       arXiv:2107.02192v3, §3.1; NVIDIA/transformer-ls, Transformer-LS-LRA/attention_transformer_ls.py
       (``get_tiles_v2``: segments with ``max(w // 2, 1)`` keys of padding on each side) and
       autoregressive/model_lib/layer.py (``get_diagonals``: the w keys up to the query).

    Examples
    --------
    >>> long_short_window_pattern(6, 2).to_mask().astype(int)
    array([[1, 1, 1, 0, 0, 0],
           [1, 1, 1, 0, 0, 0],
           [0, 1, 1, 1, 1, 0],
           [0, 1, 1, 1, 1, 0],
           [0, 0, 0, 1, 1, 1],
           [0, 0, 0, 1, 1, 1]])
    """
    n, m = check_sizes(n, m)
    window = check_positive_int("window", window)
    start, stop = _window_ranges(*query_positions(n, m, causal), window, m)
    return SparsePattern.from_row_ranges(start, stop, m)


def _window_ranges(t: NDArray, alignment: str | None, window: int, m: int) -> tuple[NDArray, NDArray]:
    """Each query's window [start, stop) of keys, clipped to [0, m]; t the query positions."""
    if alignment is None:
        e = max(window // 2, 1)
        first = t // window * window                              # the query's segment starts here
        start, stop = first - e, first + window + e
    else:
        start, stop = t - window + 1, t + 1
    start = np.clip(start, 0, m)
    return start, np.clip(stop, start, m)


def long_short_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    window: int,
    rank: int | None = None,
    segment: int | None = None,
    params: LongShortParams | None = None,
    rng: np.random.Generator | int | None = None,
    dual_ln: str = "keys_values",
    projection_input: str = "raw",
    causal: bool | str = False,
    scale: float | None = None,
    method: str = "auto",
    return_weights: bool = False,
) -> NDArray | tuple[NDArray, NDArray]:
    r"""Long-Short attention: a window and r dynamically projected keys under one softmax, with DualLN.

    .. math::

        P = \operatorname{softmax}_j(K W^P), \quad
        \bar{A} = \operatorname{softmax}\Big(\frac{Q\,[LN_G(P^\top K);\ LN_L(\tilde{K})]^\top}{\sqrt{d_k}}\Big),
        \quad \mathrm{out} = \bar{A}\,[LN_G(P^\top V);\ LN_L(\tilde{V})]

    where :math:`\tilde{K}, \tilde{V}` are the keys and values of the query's window.

    Parameters
    ----------
    q : (..., n, d_k) array_like
        Queries (already projected: :math:`Q W^Q`).
    k : (..., m, d_k) array_like
        Keys (:math:`K W^K`); the projection :math:`P = \operatorname{softmax}(K W^P)` reads them too.
    v : (..., m, d_v) array_like
        Values (:math:`V W^V`).
    window : int
        w >= 1 (:func:`long_short_window_pattern`): the segment length of the bidirectional window, or the
        number of keys up to the query seen causally.
    rank : int, optional
        r >= 0, the number of projected keys (per segment when causal); 0 switches the long branch off.
        Drawn ``params`` have this width (default 1); with ``params`` given, their width (checked if given).
    segment : int, optional
        l >= 1, the segment length of the causal, segment-wise projection; default w. The bidirectional
        projection spans all m keys and does not use it.
    params : LongShortParams, optional
        :math:`W^P` and the layer norms (:func:`init_long_short`); drawn from ``rng`` when not given.
    rng : numpy.random.Generator or int, optional
        Draws ``params`` with :func:`init_long_short` (not read when ``params`` is given).
    dual_ln : {"keys_values", "keys", "none"}, default "keys_values"
        "keys_values": the paper's DualLN, :math:`LN_L` on the window's keys and values and :math:`LN_G` on the
        projected ones (needs d_v = d_k: one layer norm per branch, as the official code). "keys": the keys
        only, the values mixed as given (so that out = W V, and ``return_weights`` can give W). "none": no layer
        norm.
    projection_input : {"raw", "normalized"}, default "raw"
        What P projects: the keys and values as given (the paper's equation; the official autoregressive code)
        or the short branch's, after :math:`LN_L` (the official LRA and ImageNet code project the normalised
        ``K``, ``V``). P itself is computed from the keys as given either way.
    causal : {False, True, "top-left", "bottom-right"}, default False
        The causal window and the segment-wise projection; "bottom-right": the n queries are the last n of the m
        positions (query *i* at position i + m − n), decoding with a key/value cache.
    scale : float, optional
        Multiplier of the scores; default :math:`1/\sqrt{d_k}`.
    method : {"equation", "csr", "auto"}, default "auto"
        How the softmax over the window and the projected keys runs (:func:`~refattn.sparse.sparse_attention`
        over the m + R keys): dense masked, or the CSR kernel (O(n·(w + r)) pairs); "auto" dense while it fits
        the memory budget. The weights, when asked for, come from "equation".
    return_weights : bool, default False
        Also return the n × m token-mixing matrix W = A_short + A_long Pᵀ (out = W V); only with values not
        normalised (``dual_ln`` "keys" or "none"): a ValueError otherwise.

    Returns
    -------
    out : (..., n, d_v) ndarray
    weights : (..., n, m) ndarray
        Only if ``return_weights``.

    Notes
    -----
    **Short branch.** Bidirectional: segments of w queries, each seeing its segment and e = max(⌊w/2⌋, 1) keys on
    either side (the paper's "w/2 tokens to the left and right", with the official code's ``max(·, 1)``).
    Causal: the w keys i − w + 1 … i, as the official autoregressive code (``get_diagonals``).

    **Long branch.** Bidirectional: one P over all m keys, r projected keys seen by every query. Causal: segments
    of l keys, each projected on its own (:math:`P_s` is a softmax over segment s only), and query *i* sees the
    r projected keys of each segment s < ⌊i / l⌋ (model.py's ``chunk_attn_mask``), all of whose keys precede the
    query's segment: the output at *i* depends on no later token, and bottom-right decoding with a cache gives
    the last rows of the full causal computation. A segment shorter than l at the end is never seen.

    **DualLN.** :math:`LN_L` and :math:`LN_G` (ε = 1e-5, PyTorch's default) normalise each key (and value) row
    of their branch over its d_k features: the paper's remedy for the projected keys' norms differing from the
    window keys', which would otherwise let one branch take all the weight. The official code normalises over
    all heads' features at once; here one head's.

    **Exact limit.** w >= max(n, m) with r = 0 and ``dual_ln="none"`` is softmax attention (causal too): the one
    segment's window covers every key, the causal window every earlier key.

    Complexity: O(n·(w + r)·d) for the attention and O(m·r·d) for the projection (causal: O(n·(w + r·m/l)·d));
    memory O(n·(w + r) + m·r) with ``method="csr"``.

    References
    ----------
    .. [1] C. Zhu, W. Ping, C. Xiao, M. Shoeybi, T. Goldstein, A. Anandkumar, B. Catanzaro, "Long-Short
       Transformer: Efficient Transformers for Language and Vision", NeurIPS 2021, arXiv:2107.02192v3, §3.1
       (segment-wise sliding window), §3.2 (dynamic projection, its segment-wise causal form), §3.3 (DualLN).
    .. [2] NVIDIA/transformer-ls: Transformer-LS-LRA/attention_transformer_ls.py and
       Transformer-LS-ImageNet/models/layers/transformer_ls.py (``AttentionLS``, bidirectional),
       autoregressive/model_lib/layer.py (``ChunkedLSAttention``, causal).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 10, 4))
    >>> out, W = long_short_attention(q, k, v, window=2, rank=3, rng=1, dual_ln="keys", return_weights=True)
    >>> bool(np.allclose(out, W @ v)), bool(np.allclose(W.sum(axis=-1), 1.0))
    (True, True)
    >>> from refattn import scaled_dot_product_attention
    >>> exact = long_short_attention(q, k, v, window=10, rank=0, rng=1, dual_ln="none")
    >>> bool(np.allclose(exact, scaled_dot_product_attention(q, k, v)))
    True
    """
    for name, value, choices in (("method", method, METHODS), ("dual_ln", dual_ln, DUAL_LN),
                                 ("projection_input", projection_input, PROJECTION_INPUTS)):
        check_choice(name, value, choices)
    return_weights = check_bool("return_weights", return_weights)
    q, k, v, batch = checked_qkv(q, k, v)
    alignment = causal_alignment(causal)
    window = check_positive_int("window", window)
    segment = window if segment is None else check_positive_int("segment", segment)
    (n, d_k), (m, d_v) = q.shape[-2:], v.shape[-2:]
    scale = default_scale(d_k) if scale is None else check_scale(scale)
    params = _resolve_params(params, rank, optional_rng(rng), d_k)
    if dual_ln == "keys_values" and d_v != d_k:
        raise ValueError(f"dual_ln='keys_values' normalises keys and values with one layer norm per branch, so "
                         f"d_v must equal d_k; got d_k={d_k}, d_v={d_v} (use dual_ln='keys')")
    if return_weights and dual_ln == "keys_values":
        raise ValueError("return_weights=True needs values mixed as given (dual_ln='keys' or 'none'): with "
                         "dual_ln='keys_values' the output A_short LN_L(V) + A_long LN_G(PᵀV) is not linear in v, "
                         "and no n × m matrix gives it")
    if return_weights:
        check_weights_fit(batch, n, m)

    keys, values = _short_branch(k, v, params.ln_short, dual_ln)
    P, k_bar, v_bar = _long_branch(k, v, keys, values, params, dual_ln, projection_input, alignment, segment, m)
    t, _ = query_positions(n, m, causal)
    start, stop = _window_ranges(t, alignment, window, m)
    R = k_bar.shape[-2]
    if alignment is None:                                          # every query sees the R = r projected keys
        seen, cover = np.full(n, R), np.full(n, m if R else 0)
    else:                                                          # the segments s < ⌊t / l⌋
        before = np.clip(t // segment, 0, R // max(params.rank, 1))
        seen, cover = params.rank * before, segment * before       # projected keys seen; keys they cover
    pattern = SparsePattern.from_row_segments(np.stack([start, np.full(n, m)], axis=1),
                                              np.stack([stop, m + seen], axis=1), m + R)
    common = np.broadcast_shapes(k.shape[:-2], v.shape[:-2])
    k_ext = np.concatenate([keys, k_bar], axis=-2)                 # (..., m + R, d_k)  [K̃; K̄]
    v_ext = np.concatenate([np.broadcast_to(values, (*common, m, d_v)),
                            np.broadcast_to(v_bar, (*common, R, d_v))], axis=-2)   # (..., m + R, d_v)  [Ṽ; V̄]
    if not return_weights:
        return sparse_attention(q, k_ext, v_ext, pattern, scale=scale, method=method)
    out, A_ext = sparse_attention(q, k_ext, v_ext, pattern, scale=scale, method="equation", return_weights=True)
    if method == "csr":
        out = sparse_attention(q, k_ext, v_ext, pattern, scale=scale, method="csr")
    mask = pattern.to_mask()                                       # (n, m + R)
    empty = ~mask.any(axis=-1, keepdims=True)
    W = A_ext[..., :m] + weighted_values(A_ext[..., m:], _placed(P, alignment, segment, m), mask[:, m:], empty,
                                         "zero")                   # (..., n, m)  A_short + A_long Pᵀ
    key = np.arange(m)
    allowed = ((key >= start[:, None]) & (key < stop[:, None])) | (key < cover[:, None])    # window ∪ covered
    note_allowed(lambda: np.broadcast_to(allowed, W.shape))
    return out, W


def _resolve_params(params, rank, rng, d_k: int) -> LongShortParams:
    """The given params, checked against d_k and rank, or params of width rank drawn from rng."""
    if rank is not None:
        rank = check_non_negative_int("rank", rank)
    if params is not None:
        if not isinstance(params, LongShortParams):
            raise TypeError(f"params must be a LongShortParams (init_long_short), got {type(params).__name__}")
        if params.w_proj.shape[0] != d_k or rank not in (None, params.rank):
            raise ValueError(f"params has w_proj of shape {params.w_proj.shape}, but q has d_k={d_k}"
                             + ("" if rank is None else f" and rank={rank}") + f": expected ({d_k}, {rank or 'r'})")
    return given_or_drawn("long_short", "params", params, rng, what="its parameters",
                          draw=lambda r: init_long_short(r, d_k, 1 if rank is None else rank))


def _ln(x: NDArray, ln: LayerNormParams) -> NDArray:
    """LayerNorm over the rows' features (a row of width 0 stays empty; a non-finite row becomes NaN alone)."""
    if x.shape[-1] == 0:
        return x
    with np.errstate(invalid="ignore", over="ignore"):
        return layer_norm(x, ln.gamma, ln.beta)


def _short_branch(k, v, ln_short, dual_ln):
    """K̃ = LN_L(K) and Ṽ = LN_L(V) (or as given) for the window."""
    keys = k if dual_ln == "none" else _ln(k, ln_short)
    values = _ln(v, ln_short) if dual_ln == "keys_values" else v
    return keys, values


def _long_branch(k, v, keys, values, params, dual_ln, projection_input, alignment, segment, m):
    """``(P, K̄, V̄)``: the projection (None without a long branch) and the r projected keys and values
    (causal: r per complete segment, S·r)."""
    r = params.rank
    src_k, src_v = (keys, values) if projection_input == "normalized" else (k, v)
    norm_k = dual_ln != "none"
    norm_v = dual_ln == "keys_values"
    if alignment is None:
        if r == 0 or m == 0:                                       # no long branch: no projected key
            return None, k[..., :0, :], v[..., :0, :]
        with np.errstate(invalid="ignore", over="ignore"):
            P = softmax(k @ params.w_proj, axis=-2)                # (..., m, r)  softmax over the keys
            k_bar = np.swapaxes(P, -1, -2) @ src_k                 # (..., r, d_k)  Pᵀ K
            v_bar = np.swapaxes(P, -1, -2) @ src_v                 # (..., r, d_v)  Pᵀ V
    else:
        S = m // segment if r else 0                               # complete segments; a shorter tail is never seen
        lead = k.shape[:-2]
        k_s = k[..., :S * segment, :].reshape(*lead, S, segment, k.shape[-1])             # (..., S, l, d_k)
        with np.errstate(invalid="ignore", over="ignore"):
            P = softmax(k_s @ params.w_proj, axis=-2)              # (..., S, l, r)  softmax within each segment
            k_bar = _project_segments(P, src_k, S, segment)        # (..., S·r, d_k)  P_sᵀ K_s
            v_bar = _project_segments(P, src_v, S, segment)        # (..., S·r, d_v)  P_sᵀ V_s
    k_bar = _ln(k_bar, params.ln_long) if norm_k else k_bar        # LN_G(Pᵀ K)
    v_bar = _ln(v_bar, params.ln_long) if norm_v else v_bar        # LN_G(Pᵀ V)
    return P, k_bar, v_bar


def _project_segments(P: NDArray, x: NDArray, S: int, segment: int) -> NDArray:
    """P_sᵀ X_s for every segment s, stacked: (..., S·r, d)."""
    x_s = x[..., :S * segment, :].reshape(*x.shape[:-2], S, segment, x.shape[-1])
    out = np.swapaxes(P, -1, -2) @ x_s                             # (..., S, r, d)
    return out.reshape(*out.shape[:-3], S * P.shape[-1], x.shape[-1])


def _placed(P: NDArray | None, alignment, segment: int, m: int) -> NDArray:
    """Pᵀ as a (..., R, m) matrix: row ρ of projected key ρ holds its weights over the m keys."""
    if P is None:
        return np.zeros((0, m))
    if alignment is None:
        return np.swapaxes(P, -1, -2)                              # (..., r, m)
    *lead, S, l, r = P.shape
    placed = np.zeros((*lead, S, r, m))
    for s in range(S):
        placed[..., s, :, s * l:(s + 1) * l] = np.swapaxes(P[..., s, :, :], -1, -2)   # P_sᵀ at segment s's keys
    return placed.reshape(*lead, S * r, m)


RECORD = Mechanism.of(
    long_short_attention, defaults={"window": 2, "dual_ln": "keys"},   # values as given, so that the weights exist
    id="long_short", title="Long-Short Transformer (window + dynamic projection, DualLN)", family="beyond",
    section="after the survey (window, cf. §4.1.1; projection, cf. §4.3.2)", paper=ZHU,
    equation=r"\operatorname{softmax}\!\Big(\frac{Q\,[LN_G(P^\top K);\ LN_L(\tilde K)]^\top}{\sqrt{d_k}}\Big)"
             r"[LN_G(P^\top V);\ LN_L(\tilde V)],\quad P = \operatorname{softmax}(K W^P)",
    time="O(n·(w + r)·d + m·r·d)", memory="O(n·(w + r) + m·r)", methods=METHODS, causal=True, position_dependent=True,
    examples=({"rank": 2, "window": 3, "projection_input": "normalized"}, {"dual_ln": "none", "window": 1,
                                                                            "segment": 3},
              {"rank": 0, "window": 4}),
    figure="refattn.figures.long_short:long_short",
    exact_options=lambda n, m: {"window": max(n, m, 1), "rank": 0, "dual_ln": "none"},
    exact_limit="w ≥ max(n, m), r = 0 (no projection) and no layer norm",
    draws=("params",),
)
