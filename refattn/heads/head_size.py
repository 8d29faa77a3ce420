r"""Head size chosen independently of the number of heads (Bhojanapalli et al., 2020; survey §4.6).

Multi-head attention usually ties the head size to the head count, d_p = d_model / h. A head's scores

    S_i = (X W_iᵠ)(X W_iᴷ)ᵀ / √d_p          (n × n, X of n tokens, W_iᵠ, W_iᴷ of d_model × d_p)

are a product through d_p columns, so rank(S_i) ≤ d_p. The attention matrix P = softmax(S_i) fixes S_i
up to one constant per row (S_i = log P + c 1ᵀ), and a row constant moves the rank by at most 1: a head
of size d_p ≤ n − 2 cannot express a P whose log P has rank n (softmax(α I), each token on itself,
for one). This is the low-rank bottleneck (§3): adding heads at a fixed d_model shrinks every head
below n. Conversely, with d_p ≥ n and X of rank n (d_model ≥ n), every positive row-stochastic P is
some head's softmax(S_i) (the representation theorem of §3; :func:`represent_attention` builds the
head).

The remedy (§4): choose d_p by itself ("set the head size of an attention unit to input sequence
length"). The projections have width h·d_p and Wᴼ (h·d_p × d_model) maps back to d_model:

    head_i = softmax(X W_iᵠ (X W_iᴷ)ᵀ / √d_p) X W_iⱽ,    out = Concat(head_1, …, head_h) Wᴼ

which is multi-head attention (:func:`~refattn.multi_head_attention` takes any per-head width) with
d_p = d_model / h as the special case. :func:`head_scores` gives the per-head S_i whose rank the tests
and the figure measure.
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.budget import check_fits
from ..common.checks import as_float, check_scale, default_scale
from ..common.ints import check_positive_int
from ..core.multi_head import (
    MultiHeadParams,
    drawn_width,
    head_shared,
    init_multi_head,
    multi_head_attention,
    project_heads,
    resolve_params,
)
from ..draws import given_or_drawn, note_allowed, optional_rng
from ..masks import allowed_pairs
from ..mechanism import Mechanism

__all__ = ["head_scores", "head_size_attention", "represent_attention"]

BHOJANAPALLI = ('S. Bhojanapalli, C. Yun, A. S. Rawat, S. J. Reddi, S. Kumar, 2020, "Low-Rank Bottleneck in '
                'Multi-head Attention Models", ICML 2020, arXiv:2002.07028')


def _check_head_size(params, num_heads: int, head_size: int | None) -> int:
    """The per-head width d_p of ``params`` with ``num_heads`` heads; ``head_size`` must agree when given."""
    if not isinstance(params, MultiHeadParams):
        raise TypeError(f"params must be MultiHeadParams (see refattn.init_multi_head with d_k=head_size), got "
                        f"{type(params).__name__}")
    h = check_positive_int("num_heads", num_heads)
    if params.w_q.shape[1] % h:
        raise ValueError(f"num_heads={h} does not divide the projection width h·d_p = {params.w_q.shape[1]} "
                         f"(w_q shape {params.w_q.shape})")
    d_p = params.w_q.shape[1] // h
    if head_size is not None and check_positive_int("head_size", head_size) != d_p:
        raise ValueError(f"head_size={head_size} but params have w_q {params.w_q.shape}: {h} heads of d_p = {d_p}")
    return d_p


def head_size_attention(
    x_q: ArrayLike,
    x_kv: ArrayLike,
    params: MultiHeadParams | str | None = None,
    *,
    num_heads: int,
    head_size: int | None = None,
    rng=None,
    mask: ArrayLike | None = None,
    causal: bool | str = False,
    scale: float | None = None,
    fully_masked: str = "zero",
    x_v: ArrayLike | None = None,
    return_weights: bool = False,
) -> NDArray | tuple[NDArray, NDArray]:
    r"""Multi-head attention with heads of size d_p, independent of d_model / h.

    .. math::

        \mathrm{head}_i = \operatorname{softmax}\Big(\frac{X W_i^Q (X W_i^K)^\top}{\sqrt{d_p}}\Big) X W_i^V,
        \qquad \operatorname{Concat}(\mathrm{head}_1, \dots, \mathrm{head}_h)\, W^O,
        \qquad W_i^{Q,K,V} \in \mathbb{R}^{d_\text{model} \times d_p},\ W^O \in \mathbb{R}^{h d_p \times d_\text{model}}

    Parameters
    ----------
    x_q : (..., n, d_model) array_like
        Query-side input.
    x_kv : (..., m, d_model) array_like
        Key-side input (and value-side unless ``x_v`` is given).
    params : MultiHeadParams, "identity" or None
        Projections of width h·d_p (``refattn.init_multi_head(rng, d_model, h, d_k=d_p)``). ``None``: drawn
        from ``rng`` so (d_model = the width of ``x_q``). ``"identity"``: one head whose projections are the
        identity (d_p = d_model), which is scaled dot-product attention itself.
    num_heads : int
        h.
    head_size : int, optional
        d_p; checked against ``params`` when given (the paper's choice: the sequence length n). Drawn
        parameters have heads of ``head_size``, default the key count m (at least 1).
    rng : numpy.random.Generator or int, optional
        Draws ``params`` when it is omitted.
    mask : (..., n, m) array_like of bool or float, optional
        As in :func:`~refattn.scaled_dot_product_attention`, shared by all heads.
    causal : {False, True, "top-left", "bottom-right"}, default False
        As in :func:`~refattn.scaled_dot_product_attention`.
    scale : float, optional
        Default :math:`1/\sqrt{d_p}`.
    fully_masked : {"zero", "nan", "uniform"}, default "zero"
        As in :func:`~refattn.scaled_dot_product_attention`.
    x_v : (..., m, d_model) array_like, optional
        Value-side input when it differs from ``x_kv``.
    return_weights : bool, default False
        Also return every head's attention matrix.

    Returns
    -------
    out : (..., n, d_model) ndarray
    weights : (..., h, n, m) ndarray
        Only if ``return_weights``.

    Notes
    -----
    The arithmetic is :func:`~refattn.multi_head_attention`'s, which never assumed d_p = d_model / h;
    what changes is the parameter count, 4·h·d_p·d_model instead of 4·d_model², and each head's
    scores, of rank up to d_p instead of d_model / h.

    References
    ----------
    .. [1] S. Bhojanapalli, C. Yun, A. S. Rawat, S. J. Reddi, S. Kumar, "Low-Rank Bottleneck in Multi-head
       Attention Models", ICML 2020, arXiv:2002.07028v1, §3 (the bottleneck), §4 (fixed head size).

    Examples
    --------
    >>> from refattn import init_multi_head
    >>> rng = np.random.default_rng(0)
    >>> x = rng.standard_normal((12, 16))                          # n = 12 tokens, d_model = 16
    >>> tied = init_multi_head(rng, 16, num_heads=8)               # d_p = 16 / 8 = 2
    >>> fixed = init_multi_head(rng, 16, num_heads=8, d_k=12)      # d_p = n = 12
    >>> [int(np.linalg.matrix_rank(head_scores(x, x, p, num_heads=8)[0])) for p in (tied, fixed)]
    [2, 12]
    >>> head_size_attention(x, x, fixed, num_heads=8, head_size=12).shape
    (12, 16)
    """
    x_q, x_kv = as_float("x_q", x_q, min_ndim=2), as_float("x_kv", x_kv, min_ndim=2)   # they size drawn params
    params = given_or_drawn("head_size", "params", params, optional_rng(rng),
                            lambda r: _draw_params(r, x_q, x_kv, num_heads, head_size), what="its parameters")
    params = resolve_params(params, x_q, num_heads, None)   # "identity": one head, identity projections
    _check_head_size(params, num_heads, head_size)
    result = multi_head_attention(x_q, x_kv, params, num_heads=num_heads, mask=mask, causal=causal, scale=scale,
                                  fully_masked=fully_masked, x_v=x_v, return_weights=return_weights)
    if return_weights:
        note_allowed(lambda: allowed_pairs(head_shared(mask), causal, result[1].shape, fully_masked))
    return result


def _draw_params(rng: np.random.Generator, x_q: NDArray, x_kv: NDArray, num_heads: int,
                 head_size: int | None) -> MultiHeadParams:
    """``init_multi_head(rng, d_model, h, d_k=d_p)`` with d_p = ``head_size`` or m, once the layer fits the budget."""
    d_model = drawn_width(x_q)
    d_p = max(x_kv.shape[-2], 1) if head_size is None else check_positive_int("head_size", head_size)
    h = check_positive_int("num_heads", num_heads)
    n, m = x_q.shape[-2], x_kv.shape[-2]                           # d_p = m makes the heads grow as n·m
    check_fits(f"the projections of head_size={d_p} (d_model = {d_model}, h = {h})", (4, d_model, h * d_p))
    check_fits(f"the projected queries, keys and values of head_size={d_p} (h = {h})", (h, n + 2 * m, d_p))
    return init_multi_head(rng, d_model, h, d_k=d_p)


def head_scores(
    x_q: ArrayLike, x_kv: ArrayLike, params: MultiHeadParams, *, num_heads: int, scale: float | None = None,
) -> NDArray:
    r"""Every head's scores before the softmax, :math:`S_i = (X_q W_i^Q + b_i^Q)(X_{kv} W_i^K + b_i^K)^\top s`.

    Parameters
    ----------
    x_q : (..., n, d_model) array_like
        Query-side input.
    x_kv : (..., m, d_model) array_like
        Key-side input.
    params : MultiHeadParams
        Projections of width h·d_p.
    num_heads : int
        h.
    scale : float, optional
        s; default :math:`1/\sqrt{d_p}`.

    Returns
    -------
    scores : (..., h, n, m) ndarray
        Head i's at ``scores[..., i, :, :]``, a product through d_p columns: rank ≤ d_p.
    """
    d_p = _check_head_size(params, num_heads, None)
    x_q = as_float("x_q", x_q, min_ndim=2)
    x_kv = as_float("x_kv", x_kv, min_ndim=2)
    for name, x in (("x_q", x_q), ("x_kv", x_kv)):
        if x.shape[-1] != params.d_model:
            raise ValueError(f"{name} has d_model={x.shape[-1]} (shape {x.shape}) but params have "
                             f"d_model={params.d_model}")
    scale = default_scale(d_p) if scale is None else check_scale(scale)
    Q = project_heads(x_q, params.w_q, params.b_q, num_heads)      # (..., h, n, d_p)  X W_iᵠ
    K = project_heads(x_kv, params.w_k, params.b_k, num_heads)     # (..., h, m, d_p)  X W_iᴷ
    return (Q @ np.swapaxes(K, -1, -2)) * scale                    # (..., h, n, m)    S_i, rank ≤ d_p


def represent_attention(x: ArrayLike, weights: ArrayLike, head_size: int) -> tuple[NDArray, NDArray]:
    r"""A head of size d_p whose attention on ``x`` is ``weights`` (d_p ≥ n), or the best rank-d_p logits (d_p < n).

    The construction of the representation theorem: with :math:`X^+` the pseudoinverse of X (n × d_model,
    rank n, so :math:`X X^+ = I_n`) and :math:`L = \sqrt{d_p}\,(\log P - \bar{\ell}\,1^\top)` the logits of
    P with each row's mean :math:`\bar\ell_i` taken out (softmax ignores row constants),

    .. math::

        W^Q = X^+ U_{d_p} \Sigma_{d_p}, \quad W^K = X^+ V_{d_p}, \qquad
        X W^Q (X W^K)^\top / \sqrt{d_p} = U_{d_p} \Sigma_{d_p} V_{d_p}^\top / \sqrt{d_p}

    from the singular value decomposition :math:`L = U \Sigma V^\top` (padded with zero columns when
    d_p > n). For d_p ≥ n that is L itself and the head's softmax is P exactly; for d_p < n it is the
    best rank-d_p approximation of L (Eckart–Young): a head the bottleneck allows, close to P in its
    logits (not necessarily the closest in its weights).

    Parameters
    ----------
    x : (n, d_model) array_like
        The n tokens, of rank n (so d_model ≥ n).
    weights : (n, n) array_like
        P: positive entries, rows summing to 1.
    head_size : int
        d_p.

    Returns
    -------
    w_q, w_k : (d_model, d_p) ndarray
        The head's query and key projections (no biases).

    References
    ----------
    .. [1] S. Bhojanapalli et al., arXiv:2002.07028v1, §3 (representation with d_p ≥ n).

    Examples
    --------
    >>> from refattn import softmax
    >>> rng = np.random.default_rng(1)
    >>> x, P = rng.standard_normal((4, 6)), softmax(rng.standard_normal((4, 4)))
    >>> w_q, w_k = represent_attention(x, P, head_size=4)
    >>> bool(np.allclose(softmax((x @ w_q) @ (x @ w_k).T / 2.0), P, rtol=1e-12, atol=1e-12))
    True
    """
    x = as_float("x", x)
    P = as_float("weights", weights)
    d_p = check_positive_int("head_size", head_size)
    if x.ndim != 2:
        raise ValueError(f"x must be (n, d_model), got shape {x.shape}")
    n = x.shape[0]
    if P.shape != (n, n):
        raise ValueError(f"weights must be (n, n) = ({n}, {n}) for x of shape {x.shape}, got shape {P.shape}")
    if not np.all(P > 0) or not np.all(np.isfinite(P)):
        raise ValueError("weights must be finite and positive: a softmax never reaches 0")
    if not np.allclose(P.sum(axis=-1), 1.0, rtol=0, atol=1e-12 * n):
        raise ValueError(f"the rows of weights must sum to 1, got sums {P.sum(axis=-1)}")
    x_pinv = np.linalg.pinv(x)                                     # (d_model, n)  X⁺
    if not np.allclose(x @ x_pinv, np.eye(n), rtol=0, atol=1e-9):
        raise ValueError(f"x must have rank n = {n} (needs d_model >= n; shape {x.shape}, rank "
                         f"{np.linalg.matrix_rank(x)}) for a head to reach any attention matrix")
    log_P = np.log(P)
    L = np.sqrt(d_p) * (log_P - log_P.mean(axis=-1, keepdims=True))   # (n, n)  logits, row means out
    U, sigma, Vt = np.linalg.svd(L)
    r = min(d_p, n)
    factor_q = np.zeros((n, d_p))
    factor_k = np.zeros((n, d_p))
    factor_q[:, :r] = U[:, :r] * sigma[:r]                         # (n, d_p)  U Σ, zero columns past n
    factor_k[:, :r] = Vt[:r].T                                     # (n, d_p)  V
    return x_pinv @ factor_q, x_pinv @ factor_k                    # X W^Q = U Σ, X W^K = V


RECORD = Mechanism.of(
    head_size_attention, inputs=("x_q", "x_kv", "x_v"), defaults={"num_heads": 2},
    id="head_size", title="Head size independent of the head count", family="heads",
    section="4.6", paper=BHOJANAPALLI,
    equation=r"\operatorname{Concat}_i\Big(\operatorname{softmax}\big(XW_i^Q (XW_i^K)^\top/\sqrt{d_p}\big) "
    r"XW_i^V\Big) W^O,\ W_i \in \mathbb{R}^{d \times d_p}",
    time="O(h·n·m·d_p + (n+m)·d·h·d_p)", memory="O(h·n·m)", kind="attention",
    examples=({"num_heads": 2, "head_size": 1}, {"num_heads": 4, "head_size": 8}),
    causal=True, figure="refattn.figures.head_size:head_size",
    exact_options={"num_heads": 1, "params": "identity"},
    exact_limit="one head, identity projections (d_p = d_model); d_p = d_model / h is multi-head attention",
    draws=("params",),
    layer_inputs=True,
)
