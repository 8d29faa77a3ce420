r"""Extended-precision tier: softmax, attention and their gradients evaluated in mpmath.

    softmax(x)_j = [M_j] e^{x_j − max x} / Σ_{k: M_k} e^{x_k − max x}
    S = Q Kᵀ · scale + B      A = softmax(S) over the allowed keys      O = A V
    ℓ_i = log Σ_j e^{S_ij}    (−inf for a query that sees no key)
    dV = Aᵀ dO    dP = dO Vᵀ    dS = A ⊙ (dP − rowsum(dP ⊙ A))    dQ = scale · dS K    dK = scale · dSᵀ Q

Every function here converts its float64 inputs exactly (``mpf(float(x))``), evaluates the formula
with ``dps`` significant decimal digits (every sum with ``fsum``), and rounds each result to
float64 once, at the end, to nearest (ties to even, subnormals included). The results are the
float64 values of the exact formula to within 1 ulp (see :func:`mp_sdpa`, Notes), so a float64
implementation can be held to a few ulps of them and its error measured rather than guessed.

mpmath is imported when a function is called, not when refattn is imported; it is needed only
here (``pip install mpmath``). The loops are scalar Python: use small shapes (tens of entries per
axis), as tests do.
"""
from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.checks import as_float, broadcast_batch, check_choice, check_qkv
from ..masks import check_mask_shape

__all__ = ["mp_sdpa", "mp_sdpa_vjp", "mp_softmax", "mp_softmax_vjp"]

DEFAULT_DPS = 50
MIN_DPS = 17                                                       # float64 needs 17 digits to round-trip


def mp_softmax(x: ArrayLike, axis: int = -1, mask: ArrayLike | None = None, *, dps: int = DEFAULT_DPS) -> NDArray:
    r"""Softmax along ``axis`` in ``dps``-digit arithmetic, rounded to float64 once.

    .. math::

        \operatorname{softmax}(x)_j =
        \frac{[M_j]\, e^{x_j - \max_{k: M_k} x_k}}{\sum_{k: M_k} e^{x_k - \max_{k: M_k} x_k}}

    Parameters
    ----------
    x : array_like of float
        Logits; every entry that takes part must be finite or ``-inf`` (``-inf`` gets weight 0).
    axis : int, default -1
        Axis to normalise over.
    mask : array_like of bool, optional
        ``True`` where an entry takes part; broadcasts to ``x.shape``. Masked entries are never
        read, whatever they hold.
    dps : int, default 50
        Significant decimal digits of the intermediate arithmetic (at least 17).

    Returns
    -------
    weights : float64 ndarray, same shape as ``x``
        A slice with no entry left (all masked or ``-inf``) is all zeros, refattn's default
        ``fully_masked="zero"``.

    Raises
    ------
    ValueError
        If an entry that takes part is NaN or ``+inf``: there is no exact value to compare with.

    Notes
    -----
    The max shift is not needed for range at this precision (mpmath's exponent is unbounded); it
    is kept so that the tier evaluates the same expression as refattn. Each weight goes through
    ``exp``, one ``fsum`` of positive terms and one division, so it is within 1 ulp of the exact
    value (:func:`mp_sdpa`, Notes).

    Examples
    --------
    >>> mp_softmax([0.0, np.log(3.0)])                # 1 : 3 up to the rounding of ln 3
    array([0.25, 0.75])
    >>> mp_softmax([[1.0, np.nan]], mask=[[True, False]])
    array([[1., 0.]])
    """
    ctx = _context(dps)
    x = as_float("x", x)
    if x.ndim == 0:
        raise ValueError("x must have at least one dimension, got a scalar")
    axis = _check_axis(axis, x.ndim)
    allowed = _bool_mask(mask, x.shape)
    xs = np.moveaxis(x, axis, -1).reshape(-1, x.shape[axis])      # (rows, L)
    keep = np.moveaxis(allowed, axis, -1).reshape(xs.shape)
    out = np.zeros(xs.shape)
    for r in range(xs.shape[0]):
        idx = _used(xs[r], keep[r], "x")
        y = _softmax_row(ctx, [ctx.mpf(float(xs[r, j])) for j in idx])
        out[r, idx] = [_round(ctx, t) for t in y]
    return np.moveaxis(out.reshape(np.moveaxis(x, axis, -1).shape), -1, axis)


def mp_softmax_vjp(
    x: ArrayLike, d_y: ArrayLike, axis: int = -1, mask: ArrayLike | None = None, *, dps: int = DEFAULT_DPS
) -> NDArray:
    r"""Vector-Jacobian product of :func:`mp_softmax`, in ``dps``-digit arithmetic, rounded once.

    .. math::

        \frac{\partial L}{\partial x_j} = y_j \Big(\bar y_j - \sum_{k: M_k} y_k \bar y_k\Big),
        \qquad y = \operatorname{softmax}(x)

    Parameters
    ----------
    x : array_like of float
        Logits, as for :func:`mp_softmax`.
    d_y : array_like of float
        Cotangent :math:`\bar y = \partial L / \partial y`; broadcasts to ``x.shape`` and must be
        finite where an entry takes part (elsewhere it is never read).
    axis : int, default -1
        Axis the softmax normalises over.
    mask : array_like of bool, optional
        As for :func:`mp_softmax`.
    dps : int, default 50
        Significant decimal digits of the intermediate arithmetic.

    Returns
    -------
    d_x : float64 ndarray, same shape as ``x``
        Zero at masked entries and in fully masked slices. The weights :math:`y` enter unrounded.

    Examples
    --------
    >>> mp_softmax_vjp([0.0, 0.0], [1.0, 0.0])        # y = (1/2, 1/2): (1/2 (1 − 1/2), 1/2 (0 − 1/2))
    array([ 0.25, -0.25])
    """
    ctx = _context(dps)
    x = as_float("x", x)
    if x.ndim == 0:
        raise ValueError("x must have at least one dimension, got a scalar")
    d_y = as_float("d_y", d_y)
    if not _broadcasts_to(d_y.shape, x.shape):
        raise ValueError(f"d_y has shape {d_y.shape}, which does not broadcast to x's shape {x.shape}")
    axis = _check_axis(axis, x.ndim)
    allowed = _bool_mask(mask, x.shape)
    moved = np.moveaxis(x, axis, -1).shape
    xs = np.moveaxis(x, axis, -1).reshape(-1, x.shape[axis])      # (rows, L)
    dys = np.moveaxis(np.broadcast_to(d_y, x.shape), axis, -1).reshape(xs.shape)
    keep = np.moveaxis(allowed, axis, -1).reshape(xs.shape)
    out = np.zeros(xs.shape)
    for r in range(xs.shape[0]):
        idx = _used(xs[r], keep[r], "x")
        _check_finite("d_y", dys[r, idx])
        y = _softmax_row(ctx, [ctx.mpf(float(xs[r, j])) for j in idx])
        dy = [ctx.mpf(float(dys[r, j])) for j in idx]
        delta = ctx.fsum(a * b for a, b in zip(y, dy, strict=True))              # Σ_k y_k ȳ_k
        out[r, idx] = [_round(ctx, a * (b - delta)) for a, b in zip(y, dy, strict=True)]   # y_j (ȳ_j − Σ y ȳ)
    return np.moveaxis(out.reshape(moved), -1, axis)


def mp_sdpa(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    mask: ArrayLike | None = None,
    *,
    causal: bool | str = False,
    scale: float | None = None,
    dps: int = DEFAULT_DPS,
) -> tuple[NDArray, NDArray, NDArray]:
    r"""Scaled dot-product attention in ``dps``-digit arithmetic, rounded to float64 once.

    .. math::

        S = Q K^\top \cdot \text{scale} + B, \qquad
        A = \operatorname{softmax}(S), \qquad
        O = A V, \qquad
        \ell_i = \log \sum_j e^{S_{ij}}

    with the softmax and the sum of :math:`\ell` over the keys query *i* may attend to.

    Parameters
    ----------
    q : (..., n, d_k) array_like
        Queries.
    k : (..., m, d_k) array_like
        Keys.
    v : (..., m, d_v) array_like
        Values.
    mask : (..., n, m) array_like of bool or float, optional
        Boolean: ``True`` where query *i* may attend to key *j*. Float: an additive bias :math:`B`
        whose ``-inf`` entries mask. Broadcasts to ``(..., n, m)``; leading dims of ``q``, ``k``,
        ``v`` and ``mask`` broadcast together (the tier loops over them).
    causal : {False, True, "top-left", "bottom-right"}, default False
        ``True``/"top-left": query *i* sees keys ``j <= i``; "bottom-right": ``j <= i + (m - n)``.
        Combined with ``mask`` by logical and.
    scale : float, optional
        Multiplier of :math:`QK^\top`, taken exactly as given. Default: the exact
        :math:`1/\sqrt{d_k}` (evaluated to ``dps`` digits, not its float64 rounding).
    dps : int, default 50
        Significant decimal digits of the intermediate arithmetic (at least 17).

    Returns
    -------
    out : (..., n, d_v) float64 ndarray
        :math:`O`; zero rows for queries that may attend to no key.
    weights : (..., n, m) float64 ndarray
        :math:`A`; exactly 0 where masked, zero rows for queries that see no key.
    lse : (..., n) float64 ndarray
        :math:`\ell`; ``-inf`` for queries that see no key.

    Raises
    ------
    ValueError
        If a value that a computed entry uses is NaN or infinite (a ``-inf`` bias entry masks and is
        fine): the tier measures rounding error, and non-finite inputs have no exact value.

    Notes
    -----
    **What rounding once buys.** At ``dps=50`` mpmath carries :math:`p = 169` bits, unit roundoff
    :math:`u_{mp} = 2^{-169} \approx 10^{-51}`. The inputs are converted exactly; a product of two
    float64 numbers (at most 106 significant bits) is exact; ``fsum`` adds its terms without
    intermediate rounding and rounds once; ``exp``, ``log``, each division and each
    multiplication round once. A result of these small shapes goes through some
    :math:`k \lesssim d + m + n + 10` such roundings, so before the final conversion it lies within
    about :math:`k\,\kappa\,u_{mp}` (relative) of the exact value of the formula on the float64
    inputs, where :math:`\kappa` is the conditioning of the expression: ``exp`` amplifies the
    absolute error of a score, :math:`|S|\,u_{mp}`, and a final sum of mixed signs amplifies by
    :math:`\sum|\text{terms}| / |\text{sum}|`. With :math:`|S| \le 10^{5}` and no final sum
    cancelling by more than 25 orders of magnitude, :math:`\kappa \le 10^{30}` and (with
    :math:`k \le 100`) :math:`k\,\kappa\,u_{mp} \le 10^{-19}` relative, under a thousandth of an
    ulp: rounding to nearest then adds at most half an ulp, so each float64 result is within 1 ulp
    of the exact value (in fact within 0.501 ulp). It *is* the
    correctly rounded value unless the exact value lies within :math:`k\,\kappa\,u_{mp}` of a
    midpoint between two float64 numbers (about :math:`10^{-44}` relative for a result that does
    not cancel), which is also why raising ``dps`` (say to 80) leaves the float64 results
    unchanged. A sum that cancels further, down to (almost) nothing, such as the output of two
    opposite values with equal weights, is within about :math:`k\,u_{mp} \sum|\text{terms}|`
    absolutely instead.

    The conversion rounds to nearest with ties to even, directly onto the subnormal grid below
    :math:`2^{-1022}`; mpmath's own ``float()`` rounds to 53 bits first and then again onto that
    grid, a double rounding that can lose the last subnormal unit.

    Examples
    --------
    Scores 0 and ln 3 give weights 1/4, 3/4, and output 1/4 · 4 + 3/4 · 8 = 7:

    >>> q, k, v = np.array([[1.0]]), np.array([[0.0], [np.log(3.0)]]), np.array([[4.0], [8.0]])
    >>> out, A, lse = mp_sdpa(q, k, v, scale=1.0)
    >>> A, out, lse
    (array([[0.25, 0.75]]), array([[7.]]), array([1.38629436]))
    """
    ctx = _context(dps)
    q, k, v, allowed, bias, sc, batch = _prepare(ctx, q, k, v, mask, causal, scale)
    n, m, d_v = q.shape[-2], k.shape[-2], v.shape[-1]
    out = np.zeros((*batch, n, d_v))
    weights = np.zeros((*batch, n, m))
    lse = np.full((*batch, n), -np.inf)
    for b in np.ndindex(batch):
        f = _forward(ctx, q[b], k[b], v[b], allowed[b], None if bias is None else bias[b], sc)
        for i, keep in enumerate(f.keep):
            if keep:
                weights[b][i, keep] = [_round(ctx, a) for a in f.A[i]]
                out[b][i] = [_round(ctx, t) for t in f.out[i]]
                lse[b][i] = _round(ctx, f.lse[i])
    return out, weights, lse


def mp_sdpa_vjp(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    d_out: ArrayLike,
    mask: ArrayLike | None = None,
    *,
    causal: bool | str = False,
    scale: float | None = None,
    dps: int = DEFAULT_DPS,
) -> tuple[NDArray, NDArray, NDArray, NDArray | None]:
    r"""Gradients of :func:`mp_sdpa`'s output, in ``dps``-digit arithmetic, rounded to float64 once.

    The analytic backward pass of :math:`O = \operatorname{softmax}(QK^\top \cdot s + B)\, V` for a
    cotangent :math:`dO = \partial L / \partial O`:

    .. math::

        dV = A^\top dO, \qquad dP = dO\, V^\top, \qquad
        dS = A \odot \big(dP - \operatorname{rowsum}(dP \odot A)\big),

        dQ = s\, dS\, K, \qquad dK = s\, dS^\top Q, \qquad dB = dS

    Parameters
    ----------
    q, k, v : array_like
        As for :func:`mp_sdpa`.
    d_out : (..., n, d_v) array_like
        Cotangent of the output; the shape of :func:`mp_sdpa`'s ``out``. Rows of queries that see
        no key are never read.
    mask : array_like of bool or float, optional
        As for :func:`mp_sdpa`.
    causal : {False, True, "top-left", "bottom-right"}, default False
        As for :func:`mp_sdpa`.
    scale : float, optional
        As for :func:`mp_sdpa` (default the exact :math:`1/\sqrt{d_k}`).
    dps : int, default 50
        Significant decimal digits of the intermediate arithmetic.

    Returns
    -------
    dq : float64 ndarray, shape of ``q``
    dk : float64 ndarray, shape of ``k``
    dv : float64 ndarray, shape of ``v``
    d_bias : float64 ndarray of ``mask``'s shape, or None
        :math:`dB = dS` for a float ``mask`` (zero where masked), ``None`` for a boolean mask or
        none.

    Notes
    -----
    An input broadcast over leading dims (keys shared by a batch of queries, a bias shared by every
    head) gets the sum of its gradients over those dims, as a VJP must; the sum is taken in
    ``dps``-digit arithmetic before the one rounding. :math:`A` and :math:`dS` enter unrounded.
    The 1-ulp statement of :func:`mp_sdpa` (Notes) holds with :math:`\kappa` the conditioning of
    the sums :math:`dP_{ij} - \sum_l A_{il} dP_{il}` and :math:`\sum_j dS_{ij} k_j`, which do
    cancel: the sum of the entries of a row of :math:`dS` is exactly 0.

    Examples
    --------
    With weights 1/4, 3/4 (the example of :func:`mp_sdpa`) and :math:`dO = 1`,
    :math:`dV = A^\top dO = (1/4, 3/4)`, :math:`dP = (4, 8)`, rowsum :math:`= 7`,
    :math:`dS = (1/4 \cdot (4 - 7), 3/4 \cdot (8 - 7)) = (-3/4, 3/4)`:

    >>> q, k, v = np.array([[1.0]]), np.array([[0.0], [np.log(3.0)]]), np.array([[4.0], [8.0]])
    >>> dq, dk, dv, d_bias = mp_sdpa_vjp(q, k, v, np.ones((1, 1)), np.zeros((1, 2)), scale=1.0)
    >>> dv.ravel(), d_bias
    (array([0.25, 0.75]), array([[-0.75,  0.75]]))
    """
    ctx = _context(dps)
    q_shape, k_shape, v_shape = (np.shape(t) for t in (q, k, v))
    mask_shape = None if mask is None else np.shape(mask)
    q, k, v, allowed, bias, sc, batch = _prepare(ctx, q, k, v, mask, causal, scale)
    n, m, d, d_v = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    d_out = as_float("d_out", d_out)
    if d_out.shape != (*batch, n, d_v):
        raise ValueError(f"d_out has shape {d_out.shape}, but the output has shape {(*batch, n, d_v)}")
    zero = ctx.zero
    dq = np.full((*batch, n, d), zero, dtype=object)
    dk = np.full((*batch, m, d), zero, dtype=object)
    dv = np.full((*batch, m, d_v), zero, dtype=object)
    dS_all = np.full((*batch, n, m), zero, dtype=object)
    for b in np.ndindex(batch):
        qb, kb, vb = q[b], k[b], v[b]
        f = _forward(ctx, qb, kb, vb, allowed[b], None if bias is None else bias[b], sc)
        rows = [i for i, keep in enumerate(f.keep) if keep]
        _check_finite("d_out", d_out[b][rows])
        dO = [[ctx.mpf(float(t)) for t in d_out[b][i]] for i in range(n)]
        Q, K, V = f.Q, f.K, f.V
        dS = [[] for _ in range(n)]
        for i in rows:
            keep, A = f.keep[i], f.A[i]
            dP = [ctx.fsum(dO[i][c] * V[j][c] for c in range(d_v)) for j in keep]    # dP_ij = dO_i · v_j
            delta = ctx.fsum(a * p for a, p in zip(A, dP, strict=True))                          # Σ_j A_ij dP_ij
            dS[i] = [a * (p - delta) for a, p in zip(A, dP, strict=True)]                        # A_ij (dP_ij − δ_i)
            for j, g in zip(keep, dS[i], strict=True):
                dS_all[b][i, j] = g
            for c in range(d):
                dq[b][i, c] = sc * ctx.fsum(g * K[j][c] for j, g in zip(keep, dS[i], strict=True))   # s Σ_j dS_ij k_jc
        users = [[] for _ in range(m)]                                              # (i, position of j in keep_i)
        for i in rows:
            for pos, j in enumerate(f.keep[i]):
                users[j].append((i, pos))
        for j in range(m):
            if not users[j]:
                continue
            for c in range(d_v):
                dv[b][j, c] = ctx.fsum(f.A[i][pos] * dO[i][c] for i, pos in users[j])   # Σ_i A_ij dO_ic
            for c in range(d):
                dk[b][j, c] = sc * ctx.fsum(dS[i][pos] * Q[i][c] for i, pos in users[j])  # s Σ_i dS_ij q_ic
    grads = [_sum_to(ctx, g, shape) for g, shape in ((dq, q_shape), (dk, k_shape), (dv, v_shape))]
    d_bias = None if bias is None else _sum_to(ctx, dS_all, mask_shape)
    return (*(_round_array(ctx, g) for g in grads), None if d_bias is None else _round_array(ctx, d_bias))


# ----------------------------------------------------------------------------------------------
# Helpers


class _Forward:
    """One 2-D attention problem in mp: exact inputs, kept keys per query, unrounded A, lse, out."""

    __slots__ = ("Q", "K", "V", "keep", "A", "lse", "out")


def _forward(ctx, q, k, v, allowed, bias, sc) -> _Forward:
    n, m, d = q.shape[0], k.shape[0], q.shape[1]
    keep = [[j for j in range(m) if allowed[i, j] and (bias is None or bias[i, j] != -np.inf)] for i in range(n)]
    rows = [i for i in range(n) if keep[i]]
    cols = sorted({j for i in rows for j in keep[i]})
    _check_finite("q", q[rows])
    _check_finite("k", k[cols])
    _check_finite("v", v[cols])
    if bias is not None:
        _check_finite("mask (bias)", np.array([bias[i, j] for i in rows for j in keep[i]]))
    f = _Forward()
    f.Q = [[ctx.mpf(float(t)) for t in row] for row in q]          # exact conversions
    f.K = [[ctx.mpf(float(t)) for t in row] for row in k]
    f.V = [[ctx.mpf(float(t)) for t in row] for row in v]
    f.keep, f.A, f.lse, f.out = keep, [[] for _ in range(n)], [None] * n, [[] for _ in range(n)]
    for i in rows:
        S = []
        for j in keep[i]:
            s = ctx.fsum(f.Q[i][c] * f.K[j][c] for c in range(d)) * sc                # S_ij = s q_i · k_j
            S.append(s if bias is None else s + ctx.mpf(float(bias[i, j])))           # + B_ij
        top = max(S)
        e = [ctx.exp(s - top) for s in S]                                             # e^{S_ij − max}
        total = ctx.fsum(e)
        f.A[i] = [t / total for t in e]                                               # A_ij
        f.lse[i] = top + ctx.log(total)                                               # ℓ_i
        f.out[i] = [ctx.fsum(a * f.V[j][c] for a, j in zip(f.A[i], keep[i], strict=True))   # O_ic = Σ_j A_ij v_jc
                    for c in range(v.shape[1])]
    return f


def _softmax_row(ctx, x: list) -> list:
    if not x:
        return []
    top = max(x)
    e = [ctx.exp(t - top) for t in x]                                                 # e^{x_j − max}
    total = ctx.fsum(e)
    return [t / total for t in e]


def _prepare(ctx, q, k, v, mask, causal, scale):
    """Validate; broadcast q, k, v and the mask to the common batch; resolve causal and scale."""
    q, k, v = as_float("q", q), as_float("k", k), as_float("v", v)
    batch = check_qkv(q, k, v)
    n, m, d = q.shape[-2], k.shape[-2], q.shape[-1]
    check_choice("causal", causal, (False, True, "top-left", "bottom-right"))
    bias = None
    allowed = np.ones((n, m), dtype=bool)
    if mask is not None:
        mask = check_mask_shape(mask, n, m)
        batch = broadcast_batch({"q, k, v": batch, "mask": mask.shape[:-2]})
        if mask.dtype == np.bool_:
            allowed = mask
        elif mask.dtype.kind == "f":
            bias = mask.astype(np.float64)
        else:
            raise TypeError(
                f"mask must be bool (True = may attend) or float (additive bias), got dtype "
                f"{mask.dtype} with shape {mask.shape}"
            )
    if causal is not False:
        delta = m - n if causal == "bottom-right" else 0
        allowed = allowed & (np.arange(m)[None, :] <= np.arange(n)[:, None] + delta)   # j <= i + δ
    if scale is None:
        sc = 1 / ctx.sqrt(d)                                                           # exact 1/√d_k
    else:
        if isinstance(scale, bool) or not isinstance(scale, (int, float, np.integer, np.floating)):
            raise TypeError(f"scale must be a real number, got {type(scale).__name__}")
        if not math.isfinite(scale):
            raise ValueError(f"scale must be finite, got {scale!r}")
        sc = ctx.mpf(float(scale))

    def full(x, tail):
        return np.broadcast_to(x, (*batch, *tail))

    q, k, v = full(q, (n, d)), full(k, (m, d)), full(v, (m, v.shape[-1]))
    return q, k, v, full(allowed, (n, m)), None if bias is None else full(bias, (n, m)), sc, batch


def _context(dps):
    try:
        import mpmath
    except ImportError:
        raise ImportError(
            "refattn.oracle.extended evaluates in extended precision with mpmath, which is not "
            "installed; install it with `pip install mpmath`"
        ) from None
    if not isinstance(dps, (int, np.integer)) or isinstance(dps, bool) or dps < MIN_DPS:
        raise ValueError(f"dps must be an int >= {MIN_DPS} (float64 needs 17 digits), got {dps!r}")
    ctx = mpmath.MPContext()                                       # private: the global mp.dps is untouched
    ctx.dps = int(dps)
    return ctx


def _round(ctx, x) -> float:
    """Round an mpf to the nearest float64 (ties to even), subnormals and overflow included."""
    if x == 0 or not ctx.isfinite(x):
        return float(x)
    _, e = ctx.frexp(x)                                            # x = f·2^e, 1/2 <= |f| < 1
    quantum = max(int(e) - 53, -1074)                              # float64 spacing at x
    r = int(ctx.nint(ctx.ldexp(x, -quantum)))                      # nearest multiple, ties to even
    try:
        return math.ldexp(r, quantum)                              # exact: |r| <= 2^53
    except OverflowError:
        return math.copysign(math.inf, r)


def _round_array(ctx, a: NDArray) -> NDArray:
    return np.array([_round(ctx, t) for t in a.ravel()], dtype=np.float64).reshape(a.shape)


def _sum_to(ctx, full: NDArray, shape: tuple[int, ...]) -> NDArray:
    """fsum an object array of mpf over the axes along which an input of ``shape`` was broadcast."""
    lead = full.ndim - len(shape)
    summed = list(range(lead)) + [
        lead + a for a, s in enumerate(shape) if s == 1 and full.shape[lead + a] != 1
    ]
    if not summed:
        return full.reshape(shape)
    kept = [a for a in range(full.ndim) if a not in summed]
    rows = np.transpose(full, kept + summed).reshape(-1, math.prod(full.shape[a] for a in summed))
    out = np.empty(rows.shape[0], dtype=object)
    for r in range(rows.shape[0]):
        out[r] = ctx.fsum(rows[r])
    return out.reshape(shape)


def _used(x_row: NDArray, keep_row: NDArray, name: str) -> list[int]:
    """Indices of a softmax row that take part (allowed and not −inf); they must be finite."""
    idx = [j for j in range(x_row.shape[0]) if keep_row[j] and x_row[j] != -np.inf]
    _check_finite(name, x_row[idx])
    return idx


def _check_finite(name: str, values: NDArray) -> None:
    if not np.all(np.isfinite(values)):
        raise ValueError(
            f"{name} holds a non-finite value ({values[~np.isfinite(values)].ravel()[0]}) where it is "
            "used; the extended-precision tier compares finite inputs only (masked entries are never read)"
        )


def _bool_mask(mask, shape: tuple[int, ...]) -> NDArray:
    if mask is None:
        return np.ones(shape, dtype=bool)
    mask = np.asarray(mask)
    if mask.dtype != np.bool_:
        raise TypeError(f"mask must be a boolean array (True = keep), got dtype {mask.dtype}")
    if not _broadcasts_to(mask.shape, shape):
        raise ValueError(f"mask has shape {mask.shape}, which does not broadcast to x's shape {shape}")
    return np.broadcast_to(mask, shape)


def _broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    try:
        return np.broadcast_shapes(shape, target) == tuple(target)
    except ValueError:
        return False


def _check_axis(axis, ndim: int) -> int:
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool) or not -ndim <= axis < ndim:
        raise ValueError(f"axis must be an int in [{-ndim}, {ndim}), got {axis!r}")
    return int(axis) % ndim
