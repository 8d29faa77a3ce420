r"""Linformer: keys and values projected along the sequence (Wang et al., 2020, arXiv:2006.04768v3, §4; survey §4.3.2).

    head = Attention(Q, E K, F V) = softmax(Q (E K)ᵀ / √d_k) · F V        E, F ∈ R^{k×m}      (Eq. 7)
    P̄ = softmax(Q (E K)ᵀ / √d_k)                                        (n × k) context mapping
    W = P̄ F                                                             (n × m) effective matrix: out = W V

E and F project the m keys and the m values onto k ≪ m rows, each row a weighted sum of every
position; the n queries then attend to the k projected keys. Time O(n·k·d + k·m·d) instead of
O(n·m·d). The effective matrix W is a softmax matrix times F: its rows need not sum to 1 nor be
≥ 0 (unless F's are), and E = F = I (k = m) is exact softmax attention.

Sharing of the projections between heads and layers (§4, "Parameter sharing between projections"),
as :func:`draw_projections` draws them:

    none        E_{l,i}, F_{l,i}: two matrices per head i of every layer l
    headwise    E_{l,i} = E_l, F_{l,i} = F_l: two per layer, shared by its heads
    kv          E_{l,i} = F_{l,i} = E_l: one per layer (key-value sharing)
    layerwise   E_{l,i} = F_{l,i} = E: one for every head of every layer

There is no causal form: every projected key E K mixes all m positions, later ones included, so no
mask on the n × k scores can keep the future out (lucidrains/linformer issue #4).
"""
from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.budget import check_fits
from ..common.checks import (
    as_float,
    as_rng,
    broadcast_batch,
    check_bool,
    check_choice,
    check_scale,
    checked_qkv,
    default_scale,
)
from ..common.ints import check_non_negative_int, check_positive_int
from ..core.sdpa import scaled_dot_product_attention
from ..draws import given_or_drawn, note_draw, optional_rng
from ..mechanism import Mechanism
from ..sparse.pattern import no_causal_form

__all__ = ["draw_projections", "linformer_attention"]

LINFORMER = ('S. Wang, B. Z. Li, M. Khabsa, H. Fang, H. Ma, 2020, "Linformer: Self-Attention with Linear '
             'Complexity", arXiv:2006.04768')
SHARINGS = ("none", "headwise", "kv", "layerwise")
INITS = ("paper", "official")
METHODS = ("equation", "blocked", "auto")
PROJ_DIM = 4                     # k drawn when proj_dim is not given (a demonstration size; the paper's go to 256)
NO_CAUSAL = ("E K and F V mix all m positions, later ones included, so every projected key and value depends on "
             "the future and no mask on the n × k scores can hide it; lucidrains/linformer issue #4")


def draw_projections(rng, m: int, proj_dim: int, *, sharing: str = "none", num_heads: int = 1, num_layers: int = 1,
                     init: str = "paper") -> tuple[NDArray, NDArray]:
    r"""Draw Linformer's projections :math:`E_{l,i}, F_{l,i} \in \mathbb{R}^{k \times m}` for every layer and head.

    .. math::

        (E_{l,i})_{rj},\, (F_{l,i})_{rj} \sim \mathcal{N}(0, 1/k) \quad \text{("paper")}, \qquad
        \mathcal{U}\big(\pm\sqrt{3/(k + m)}\big) \quad \text{("official")}

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw.
    m : int
        Sequence length *n* in the paper (the keys' and values' length), >= 0.
    proj_dim : int
        *k*, the projected length.
    sharing : {"none", "headwise", "kv", "layerwise"}, default "none"
        Which matrices are one and the same (§4): "none", two per head of every layer;
        "headwise", two per layer, shared by its heads; "kv" (key-value sharing), one per layer,
        E = F; "layerwise", one for every head of every layer, E = F.
    num_heads : int, default 1
        *h*, heads per layer.
    num_layers : int, default 1
        *L*, layers.
    init : {"paper", "official"}, default "paper"
        "paper": i.i.d. :math:`\mathcal{N}(0, 1/k)`, the random projection R of the proof of
        Theorem 2 (E = δR, F = e^{−δ}R there). "official": fairseq's
        ``nn.init.xavier_uniform_(compress_k.weight, gain=1/√2)`` on the (k, m) weight,
        :math:`\mathcal{U}(\pm\tfrac{1}{\sqrt 2}\sqrt{6/(k + m)})`.

    Returns
    -------
    E, F : (num_layers, num_heads, k, m) ndarray
        Layer *l*, head *i* uses ``E[l, i]`` and ``F[l, i]``. Shared matrices are one array
        (read-only broadcast views: ``E[l, i]`` and ``E[l, 0]`` share memory under "headwise";
        ``F is E`` under "kv" and "layerwise"; ``E[l]`` and ``E[0]`` share memory under
        "layerwise").

    Notes
    -----
    The draw order is part of the contract: one array ``G`` of shape ``(*distinct, k, m)`` is
    drawn (``rng.standard_normal(...) / sqrt(k)`` or ``rng.uniform(-b, b, ...)``), with
    ``distinct`` = (L, h, 2) for "none", (L, 1, 2) for "headwise", (L, 1, 1) for "kv" and
    (1, 1, 1) for "layerwise"; E is ``G[..., 0, :, :]`` and F is ``G[..., -1, :, :]``, broadcast
    to (L, h, k, m). One layer's single head ("none", the default) is thus
    ``G = rng.standard_normal((1, 1, 2, k, m)) / sqrt(k)``.

    The official code (fairseq ``examples/linformer``, ``MultiheadLinearAttention``) holds E as the
    weight of ``nn.Linear(max_seq_len, k, bias=False)``, one per layer, shared by the heads (it
    projects the layer's input before the key projection, which is the same product since both
    are linear); ``shared_kv_compressed=1`` is "kv", ``shared_layer_kv_compressed=1`` "layerwise".
    It uses the first m columns, ``weight[:, :m]``, for a sequence shorter than ``max_seq_len``:
    draw with ``m = max_seq_len`` and slice ``[..., :m]`` to follow it. lucidrains/linformer
    draws each (m, k) matrix (its E transposed) from :math:`\mathcal{U}(\pm 1/\sqrt{k})`.

    References
    ----------
    .. [1] S. Wang et al., "Linformer: Self-Attention with Linear Complexity", arXiv:2006.04768v3,
       §4 (parameter sharing), Theorem 2 and its proof.
    .. [2] facebookresearch/fairseq, ``examples/linformer/linformer_src/modules/multihead_linear_attention.py``.

    Examples
    --------
    >>> E, F = draw_projections(0, 6, 2, sharing="headwise", num_heads=3, num_layers=2)
    >>> E.shape, bool(np.array_equal(E[1, 0], E[1, 2])), bool(np.array_equal(E[0, 0], E[1, 0]))
    ((2, 3, 2, 6), True, False)
    >>> E, F = draw_projections(0, 6, 2, sharing="layerwise", num_layers=2)
    >>> F is E, bool(np.array_equal(E[0], E[1]))
    (True, True)
    """
    rng = as_rng(rng)
    m = check_non_negative_int("m", m)
    k = check_positive_int("proj_dim", proj_dim)
    L, h = check_positive_int("num_layers", num_layers), check_positive_int("num_heads", num_heads)
    check_choice("sharing", sharing, SHARINGS)
    check_choice("init", init, INITS)
    distinct = {"none": (L, h, 2), "headwise": (L, 1, 2), "kv": (L, 1, 1), "layerwise": (1, 1, 1)}[sharing]
    shape = (*distinct, k, m)
    if init == "paper":
        G = rng.standard_normal(shape) / math.sqrt(k)              # N(0, 1/k)
    else:
        bound = math.sqrt(3.0 / (k + m))                           # (1/√2)·√(6/(fan_in + fan_out))
        G = rng.uniform(-bound, bound, size=shape)
    E = np.broadcast_to(G[..., 0, :, :], (L, h, k, m))
    F = E if distinct[2] == 1 else np.broadcast_to(G[..., 1, :, :], (L, h, k, m))
    return E, F


def linformer_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    E: ArrayLike | None = None,
    F: ArrayLike | None = None,
    proj_dim: int | None = None,
    rng: np.random.Generator | int | None = None,
    sharing: str = "none",
    num_heads: int | None = None,
    init: str = "paper",
    causal: bool | str = False,
    scale: float | None = None,
    method: str = "auto",
    return_weights: bool = False,
) -> NDArray | tuple[NDArray, NDArray]:
    r"""Linformer's linear self-attention: the queries attend to k projected keys and values.

    .. math::

        \overline{\mathrm{head}} = \operatorname{softmax}\Big(\frac{Q (E K)^\top}{\sqrt{d_k}}\Big) F V
        = \bar P F V, \qquad E, F \in \mathbb{R}^{k \times m}

    Parameters
    ----------
    q : (..., n, d_k) array_like
        Queries.
    k : (..., m, d_k) array_like
        Keys.
    v : (..., m, d_v) array_like
        Values.
    E : (..., k, m) array_like, optional
        The key projection; its leading dims broadcast against those of q, k, v (one matrix per
        head: shape (h, k, m) against inputs (..., h, n, d)). Drawn with F from ``rng`` when not
        given.
    F : (..., k, m) array_like, optional
        The value projection, of E's k and m. Default E, which ``sharing`` "kv" and "layerwise"
        require (F must then equal E); "none" and "headwise" need it.
    proj_dim : int, optional
        *k*, the projected length: default 4 (a small demonstration size) when drawing; with ``E``
        it must be E's number of rows.
    rng : numpy.random.Generator or int, optional
        Source of E and F (:func:`draw_projections`, one layer) when ``E`` is not given (unused
        when it is).
    sharing : {"none", "headwise", "kv", "layerwise"}, default "none"
        §4's sharing (see :func:`draw_projections`). Within one attention call "headwise" is
        "none" drawn once for every head, and "layerwise" is "kv"; the layers' sharing is in the
        draw of :func:`draw_projections` for all layers.
    num_heads : int, optional
        With ``rng``: the inputs' axis −3 holds *h* heads, and E and F are drawn of shape
        (h, k, m), per head under "none", the same matrix for every head otherwise. Default: one
        (k, m) pair for every leading index.
    init : {"paper", "official"}, default "paper"
        The draw's distribution (:func:`draw_projections`).
    causal : {False}, default False
        Linformer has no causal form: any other value is a ``ValueError`` saying why (see Notes).
    scale : float, optional
        Multiplier of the scores; default :math:`1/\sqrt{d_k}`.
    method : {"equation", "blocked", "auto"}, default "auto"
        :func:`~refattn.scaled_dot_product_attention`'s path over the n × k scores. The weights,
        when asked for, come from "equation" whatever the method.
    return_weights : bool, default False
        Also return the effective (..., n, m) matrix :math:`W = \bar P F`, with
        ``out = W @ v`` (to rounding).

    Returns
    -------
    out : (..., n, d_v) ndarray
    weights : (..., n, m) ndarray
        Only if ``return_weights``: :math:`\bar P F`. Its rows sum to the rows of
        :math:`\bar P F \mathbf{1}` (1 only when every row of F sums to 1) and may be negative.

    Notes
    -----
    **No causal form.** Row *r* of E K is :math:`\sum_j E_{rj} k_j` over all *m* positions, so
    every projected key and value carries the later tokens, and masking the n × k scores cannot
    remove them: query *i* depends on :math:`k_j, v_j` for *j* > *i* through every column. The
    paper gives no causal variant; lucidrains/linformer issue #4: "It's not possible to enforce
    that the past does not see the future when you project along the sequence dimension".

    **Exact limit.** E = F = I (k = m) gives :math:`\operatorname{softmax}(QK^\top/\sqrt{d_k})V`.

    **Paper versus official code.** The official code (fairseq ``examples/linformer``) projects
    the layer's input X before the key and value projections: its keys are
    :math:`(EX)W^K + \mathbf{1}b^{K\top}`, where Eq. (7) with biased keys gives
    :math:`E(XW^K + \mathbf{1}b^{K\top})`. Without biases the two are the same product. With
    them, pass k and v without their biases: the official output is this function's plus
    :math:`b^V` (the rows of :math:`\bar P` sum to 1), and its key bias shifts each query's
    scores by one constant, which cancels in the softmax. Its E is one per layer, shared by the
    heads, sliced to the sequence's length (:func:`draw_projections`).

    Complexity: O(k·m·(d_k + d_v)) for E K and F V, O(n·k·(d_k + d_v)) for the attention, and the
    n × k scores (streamed by "blocked"); nothing n × m unless ``return_weights``.

    References
    ----------
    .. [1] S. Wang, B. Z. Li, M. Khabsa, H. Fang, H. Ma, "Linformer: Self-Attention with Linear
       Complexity", arXiv:2006.04768v3, §4, Eq. (7).
    .. [2] facebookresearch/fairseq, ``examples/linformer`` (``MultiheadLinearAttention``);
       lucidrains/linformer, issue #4.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 10, 4))
    >>> out, W = linformer_attention(q, k, v, proj_dim=3, rng=1, return_weights=True)
    >>> out.shape, W.shape, bool(np.allclose(W @ v, out))
    ((10, 4), (10, 10), True)
    >>> exact = linformer_attention(q, k, v, E=np.eye(10), F=np.eye(10))
    >>> bool(np.allclose(exact, scaled_dot_product_attention(q, k, v)))
    True
    """
    no_causal_form(causal, "Linformer", NO_CAUSAL)
    q, k, v, batch = checked_qkv(q, k, v)
    m = k.shape[-2]
    check_choice("sharing", sharing, SHARINGS)
    check_choice("init", init, INITS)
    check_choice("method", method, METHODS)
    return_weights = check_bool("return_weights", return_weights)
    if E is None:                                                  # drawn together (F is E where shared)
        E, F = given_or_drawn("linformer", "E", None, optional_rng(rng), what="E and F",
                              draw=lambda r: _drawn(r, m, proj_dim, sharing, num_heads, init))
    else:
        E, F = _given(E, F, m, proj_dim, sharing)
    for name, value in (("E", E), ("F", F)):
        note_draw(name, value)                                     # the call's draws: E and F
    batch = broadcast_batch({"q, k, v": batch, "E": E.shape[:-2], "F": F.shape[:-2]})
    scale = default_scale(q.shape[-1]) if scale is None else check_scale(scale)
    n = q.shape[-2]
    if return_weights:
        check_fits("the weights (return_weights=True)", (*batch, n, m))
    with np.errstate(invalid="ignore", over="ignore"):             # Inf keys: NaN/Inf rows, as IEEE says
        K_bar = E @ k                                              # (..., k, d_k)  E K
        V_bar = F @ v                                              # (..., k, d_v)  F V
    weights = None
    if return_weights:
        out, P = scaled_dot_product_attention(q, K_bar, V_bar, scale=scale, method="equation",
                                              return_weights=True)   # (..., n, d_v), (..., n, k)  P̄
        weights = P @ F                                            # (..., n, m)  W = P̄ F
    if method != "equation" or not return_weights:
        out = scaled_dot_product_attention(q, K_bar, V_bar, scale=scale, method=method)   # (..., n, d_v)  P̄ (F V)
    return (out, weights) if return_weights else out


def _drawn(rng, m: int, proj_dim, sharing: str, num_heads, init: str) -> tuple[NDArray, NDArray]:
    """One layer's E and F from :func:`draw_projections`: (k, m), or (h, k, m) with ``num_heads``."""
    proj_dim = PROJ_DIM if proj_dim is None else proj_dim
    h = 1 if num_heads is None else check_positive_int("num_heads", num_heads)
    E, F = draw_projections(rng, m, proj_dim, sharing=sharing, num_heads=h, init=init)
    index = 0 if num_heads is not None else (0, 0)
    return (E[index],) * 2 if F is E else (E[index], F[index])


def _given(E, F, m: int, proj_dim, sharing: str) -> tuple[NDArray, NDArray]:
    """Explicit E and F as float arrays of shape (..., k, m), F = E where shared; named errors otherwise."""
    E = as_float("E", E, min_ndim=2)
    if E.shape[-1] != m:
        raise ValueError(f"E must have shape (..., k, m={m}) (the keys' length), got shape {E.shape}")
    if proj_dim is not None and check_positive_int("proj_dim", proj_dim) != E.shape[-2]:
        raise ValueError(f"proj_dim={proj_dim} but E has k={E.shape[-2]} rows (shape {E.shape})")
    shared = sharing in ("kv", "layerwise")
    if F is None:
        if not shared:
            raise ValueError(f"sharing={sharing!r} projects keys and values separately: pass F= too (or "
                             "sharing='kv' for F = E)")
        return E, E
    F = as_float("F", F, min_ndim=2)
    if F.shape[-2:] != E.shape[-2:]:
        raise ValueError(f"F must have E's (k, m) = {E.shape[-2:]}, got F shape {F.shape}")
    if shared and (F.shape != E.shape or not np.array_equal(F, E, equal_nan=True)):
        raise ValueError(f"sharing={sharing!r} uses one matrix for keys and values, but F differs from E (pass "
                         "F=None, or sharing='none')")
    return E, F


RECORD = Mechanism.of(
    linformer_attention, allowed=None,
    id="linformer", title="Linformer", family="compressed", section="4.3.2", paper=LINFORMER,
    equation=r"\operatorname{softmax}\!\Big(\frac{Q (E K)^\top}{\sqrt{d_k}}\Big) F V,\quad "
             r"E, F \in \mathbb{R}^{k \times m}",
    time="O((n + m)·k·d)", memory="O(n·k + k·d), O(k·d) blocked", kind="attention",
    methods=("equation", "blocked", "auto"), causal=False,
    normalized=False, nonnegative=False,
    examples=({"sharing": "kv"}, {"init": "official", "proj_dim": 9}),
    figure="refattn.figures.linformer:linformer",
    exact_options=lambda n, m: {"E": np.eye(m), "F": np.eye(m)}, exact_limit="E = F = I (k = m)",
    draws=("E", "F"),
)
