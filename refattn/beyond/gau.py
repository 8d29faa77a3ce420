r"""Gated attention unit, GAU, and FLASH's mixed chunk attention (Hua et al., 2022, arXiv:2202.10447, §2-§3).

GAU (§2.2, Code 1) merges attention and the feed-forward layer into one gated unit with a single head:

    U = φ(X W_u),  V = φ(X W_v),  Z = φ(X W_z)              φ = SiLU; U, V: (n, e), Z: (n, s), s small (128)
    Q = Z ⊙ γ_q + β_q,  K = Z ⊙ γ_k + β_k                  per-dimension scale and offset of one shared Z
    A = relu²(Q Kᵀ / n)                                     squared ReLU in place of the softmax
    O = (U ⊙ A V) W_o                                       the gate U multiplies the attended values

The scaling follows the paper's pseudo-code (Code 1: ``tf.square(tf.nn.relu(qk / seq_len + bias))``, as
lucidrains/FLASH-pytorch ``GAU`` and JunnYu/FLASHQuad_pytorch ``flash/gau.py`` reproduce it): 1/n inside the
ReLU, where n is the sequence length (here the number of keys m), so A = relu²(QKᵀ)/n². γ is drawn from
N(0, 0.02²) and β is 0 (Code 1's initialisers). The paper adds a relative position bias b inside the ReLU
and rotates Q, K with RoPE; those live in refattn's positional family and are left out here (b = 0).

FLASH's mixed chunk attention (§3.2, Eq. 6-7) splits the sequence into chunks of c positions and uses four
scale-offset pairs of Z: Q, K for a quadratic GAU inside each chunk, Q', K' for linear attention across
chunks. For query i (position p_i, chunk g) and key j (chunk h):

    out_i = Σ_{j: h = g} relu²(q_i·k_j / c) v_j  +  q'_i · Σ_{h ∈ H(g)} Σ_{j ∈ h} k'_j v_jᵀ / m
    H(g) = every chunk (non-causal),  H(g) = {h < g} with j ≤ p_i in the quadratic part (causal)

The linear part is a prefix sum over chunks (an exclusive cumulative sum, as in the paper's pseudo-code), so the
cost is O(n·c·s) + O(n·s·e): linear in n. Scalings: the quadratic part's 1/c and the non-causal linear part's
1/m are lucidrains/FLASH-pytorch's; that code divides its causal linear part by c instead, here it keeps 1/m so
that one ``linear_scale`` serves both forms (pass ``linear_scale=1/c`` for lucidrains' causal scaling).

Positions: query i sits at p_i = i (bottom-right: i + m − n), key j at j; chunk of position p is ⌊p / c⌋ (the
last chunk may be shorter: the official code pads it with zeros, which adds nothing).

**The uniform apply** reads q as Z at the query positions, k as Z at the key positions (the same Z in
self-attention: pass k = q), and v as V; it returns A V (or the mixed chunk form), the part of GAU that mixes
tokens. The gate U multiplies each output channel by a per-token factor, which mixes no tokens, so it is left
to :func:`gated_attention_unit`: ``weights`` is the (..., n, m) matrix M with out = M v (relu² entries, ≥ 0, rows
not summing to 1; the linear part of the chunked form can be negative).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.budget import check_fits
from ..common.checks import as_float, as_rng, causal_alignment, check_bool, check_scale, checked_qkv
from ..common.init import glorot
from ..common.ints import check_positive_int
from ..common.products import weighted_values
from ..draws import given_or_drawn, optional_rng
from ..mechanism import Mechanism

__all__ = [
    "GAU_QK_STD",
    "GauLayerParams",
    "ScaleOffset",
    "gated_attention_unit",
    "gau_attention",
    "init_gau_layer",
    "init_scale_offset",
    "mixed_chunk_weights",
    "scale_offset",
]

HUA = ('W. Hua, Z. Dai, H. Liu, Q. V. Le, 2022, "Transformer Quality in Linear Time", ICML 2022, '
       'arXiv:2202.10447')
#: Standard deviation of the per-dimension scales γ at initialisation (the paper's Code 1).
GAU_QK_STD = 0.02


@dataclass(frozen=True, eq=False)
class ScaleOffset:
    """Per-dimension scales γ and offsets β that make r vectors from one shared Z: ``Z ⊙ γ[t] + β[t]``.

    Attributes
    ----------
    gamma, beta : (r, s) ndarray
        r = 2 for GAU (Q, K) and 4 for FLASH's mixed chunk attention (Q, K of the quadratic part, Q', K' of
        the linear part), in that order.
    """

    gamma: NDArray
    beta: NDArray

    def __post_init__(self) -> None:
        for name in ("gamma", "beta"):
            x = as_float(name, getattr(self, name))
            if x.ndim != 2 or x.shape[0] not in (2, 4):
                raise ValueError(f"{name} must have shape (2, s) or (4, s), got {x.shape}")
            if not np.isfinite(x).all():
                raise ValueError(f"{name} must be finite")
            object.__setattr__(self, name, x)
        if self.gamma.shape != self.beta.shape:
            raise ValueError(f"gamma and beta must have the same shape, got {self.gamma.shape} and {self.beta.shape}")


def init_scale_offset(rng, s: int, *, count: int = 2) -> ScaleOffset:
    r"""γ ~ N(0, 0.02²) and β = 0, ``count`` rows of width s (the paper's Code 1 initialisers).

    Parameters
    ----------
    rng : numpy.random.Generator or int
    s : int
        Width of Z (≥ 0).
    count : {2, 4}, default 2
        2 for GAU, 4 for the mixed chunk attention.

    Returns
    -------
    ScaleOffset

    Examples
    --------
    >>> p = init_scale_offset(0, 8, count=4)
    >>> p.gamma.shape, bool(np.all(p.beta == 0))
    ((4, 8), True)
    """
    rng = as_rng(rng)
    if count not in (2, 4) or isinstance(count, bool):
        raise ValueError(f"count must be 2 (GAU) or 4 (mixed chunk attention), got {count!r}")
    s = int(s)
    return ScaleOffset(GAU_QK_STD * rng.standard_normal((count, s)), np.zeros((count, s)))


def scale_offset(z: ArrayLike, params: ScaleOffset) -> tuple[NDArray, ...]:
    """The r vectors ``z ⊙ γ[t] + β[t]`` of one shared z, t = 0 … r − 1.

    Parameters
    ----------
    z : (..., n, s) array_like
        The shared base Z.
    params : ScaleOffset
        γ, β of r rows.

    Returns
    -------
    tuple of r (..., n, s) ndarrays

    Examples
    --------
    >>> q, k = scale_offset([[1.0, 2.0]], ScaleOffset([[2.0, 2.0], [1.0, -1.0]], [[0.0, 1.0], [0.5, 0.0]]))
    >>> q, k
    (array([[2., 5.]]), array([[ 1.5, -2. ]]))
    """
    z = as_float("z", z, min_ndim=2)
    if z.shape[-1] != params.gamma.shape[1]:
        raise ValueError(f"z has width s={z.shape[-1]} but the scale-offset params have s={params.gamma.shape[1]}")
    return tuple(z * params.gamma[t] + params.beta[t] for t in range(params.gamma.shape[0]))


def _positions(n: int, m: int, causal) -> NDArray:
    """Query positions p_i: i, or i + m − n bottom-right."""
    return np.arange(n) + (m - n if causal_alignment(causal) == "bottom-right" else 0)


def _relu2(x):
    with np.errstate(invalid="ignore"):
        return np.square(np.maximum(x, 0.0))


def mixed_chunk_weights(q: NDArray, k: NDArray, q_lin: NDArray, k_lin: NDArray, *, chunk: int, causal=False,
                        scale: float, linear_scale: float) -> NDArray:
    r"""FLASH's (..., n, m) token-mixing matrix M written out from its definition (for plots and checks).

    .. math::

        M_{ij} = [h_j = g_i]\,[j \le p_i]_{\text{causal}}\ \mathrm{relu}^2(q_i \cdot k_j \cdot \text{scale})
               + [h_j \in H(g_i)]\ q'_i \cdot k'_j \cdot \text{linear\_scale}

    g_i = ⌊p_i / c⌋, h_j = ⌊j / c⌋, H(g) = every chunk (non-causal) or the chunks before g (causal).

    Parameters
    ----------
    q, k : (..., n, s), (..., m, s) ndarray
        Q and K of the quadratic part.
    q_lin, k_lin : (..., n, s), (..., m, s) ndarray
        Q' and K' of the linear part.
    chunk : int
        c.
    causal : {False, True, "top-left", "bottom-right"}, default False
        Query i at p_i = i, or i + m − n bottom-right; causal keeps j ≤ p_i.
    scale, linear_scale : float
        Multipliers of QKᵀ (inside the ReLU) and of Q'K'ᵀ.

    Returns
    -------
    M : (..., n, m) ndarray
        out = M v.
    """
    n, m = q.shape[-2], k.shape[-2]
    check_fits("the mixed chunk weights", (*np.broadcast_shapes(q.shape[:-2], k.shape[:-2]), n, m))
    p = _positions(n, m, causal)
    g, h = np.floor_divide(p, chunk)[:, None], (np.arange(m) // chunk)[None, :]       # (n, 1), (1, m)
    causal_ok = np.ones((n, m), dtype=bool) if causal_alignment(causal) is None else np.arange(m)[None, :] <= p[:, None]
    quad = (g == h) & causal_ok                                                        # (n, m)
    lin = np.ones((n, m), dtype=bool) if causal_alignment(causal) is None else h < g   # (n, m)
    with np.errstate(invalid="ignore"):
        S = q @ np.swapaxes(k, -1, -2) * scale                                         # (..., n, m)
        L = q_lin @ np.swapaxes(k_lin, -1, -2) * linear_scale                          # (..., n, m)
    return np.where(quad, _relu2(S), 0.0) + np.where(lin, L, 0.0)


def _mixed_chunk(q, k, q_lin, k_lin, v, *, chunk, causal, scale, linear_scale) -> NDArray:
    """The chunked algorithm: a quadratic GAU inside each chunk, a prefix sum of K'ᵀV over chunks across them."""
    n, m = q.shape[-2], k.shape[-2]
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    p = _positions(n, m, causal)
    shift = int(p[0]) if n else 0                                  # p_i = i + shift
    is_causal = causal_alignment(causal) is not None
    out = np.zeros((*batch, n, v.shape[-1]))
    chunks = -(-max(m, n + shift, 0) // chunk)                     # chunks holding a key or a query position ≥ 0
    kv = [np.swapaxes(k_lin[..., h * chunk:(h + 1) * chunk, :], -1, -2) @ v[..., h * chunk:(h + 1) * chunk, :]
          * linear_scale for h in range(chunks)]                   # K'_hᵀ V_h / m: (..., s, e) per chunk
    total = sum(kv, np.zeros((*batch, k_lin.shape[-1], v.shape[-1])))
    prefix = np.zeros_like(total)                                  # Σ_{h < g} K'_hᵀ V_h  (exclusive)
    for g in range(chunks):
        lo, hi = max(g * chunk - shift, 0), min((g + 1) * chunk - shift, n)    # queries with p_i in chunk g
        if lo < hi:
            rows = slice(lo, hi)
            keys = slice(g * chunk, min((g + 1) * chunk, m))
            k_g, v_g = k[..., keys, :], v[..., keys, :]
            if k_g.shape[-2]:
                S = q[..., rows, :] @ np.swapaxes(k_g, -1, -2) * scale          # (..., r, c)
                allowed = None
                if is_causal:
                    allowed = np.arange(keys.start, keys.stop)[None, :] <= p[rows][:, None]
                A = _relu2(S) if allowed is None else np.where(allowed, _relu2(S), 0.0)
                empty = np.zeros((hi - lo, 1), dtype=bool)
                out[..., rows, :] += weighted_values(A, np.broadcast_to(v_g, (*A.shape[:-2], *v_g.shape[-2:])),
                                                     allowed, empty, "zero")
            out[..., rows, :] += q_lin[..., rows, :] @ (prefix if is_causal else total)
        if g < len(kv):
            prefix = prefix + kv[g]
    return out


def _gau_checked(q, k, v, params, chunk, causal, alignment, scale, linear_scale, batch, return_weights):
    """:func:`gau_attention` after the checks: (out, weights or None)."""
    n, m = q.shape[-2], k.shape[-2]
    zq, zk = scale_offset(q, params), scale_offset(k, params)
    allowed = None if alignment is None else _positions(n, m, causal)[:, None] >= np.arange(m)[None, :]
    if chunk is None:
        check_fits("the GAU weights", (*batch, n, m))
        S = zq[0] @ np.swapaxes(zk[1], -1, -2) * scale                         # (..., n, m)  Q Kᵀ / n
        A = _relu2(S) if allowed is None else np.where(allowed, _relu2(S), 0.0)  # relu², masked by selection
        empty = np.zeros((n, 1), dtype=bool)
        out = weighted_values(np.broadcast_to(A, (*batch, n, m)), np.broadcast_to(v, (*batch, m, v.shape[-1])),
                              allowed, empty, "zero")
    else:
        out = _mixed_chunk(zq[0], zk[1], zq[2], zk[3], v, chunk=chunk, causal=causal, scale=scale,
                           linear_scale=linear_scale)
        A = mixed_chunk_weights(zq[0], zk[1], zq[2], zk[3], chunk=chunk, causal=causal, scale=scale,
                                linear_scale=linear_scale) if return_weights else None
    return out, (np.broadcast_to(A, (*batch, n, m)) if return_weights else None)


def gau_attention(q: ArrayLike, k: ArrayLike, v: ArrayLike, *, params: ScaleOffset | None = None,
                  rng: np.random.Generator | int | None = None, chunk: int | None = None,
                  causal: bool | str = False, scale: float | None = None, linear_scale: float | None = None,
                  return_weights: bool = False) -> NDArray | tuple[NDArray, NDArray]:
    r"""GAU's token mixing: relu² attention of Q, K made from z by per-dimension scale and offset.

    .. math::

        Q = Z_q \odot \gamma_0 + \beta_0, \quad K = Z_k \odot \gamma_1 + \beta_1, \quad
        \mathrm{out} = \mathrm{relu}^2(Q K^\top \cdot \text{scale})\, V

    or, with ``chunk``, FLASH's mixed chunk attention (see the module).

    Parameters
    ----------
    q : (..., n, s) array_like
        Z at the query positions.
    k : (..., m, s) array_like
        Z at the key positions (the same Z as q in self-attention).
    v : (..., m, e) array_like
        Values V.
    params : ScaleOffset, optional
        γ, β with 2 rows (GAU) or 4 (``chunk``). Drawn from ``rng`` when not given.
    rng : numpy.random.Generator or int, optional
        Draws ``params`` with :func:`init_scale_offset` (not read when ``params`` is given).
    chunk : int, optional
        c: FLASH's mixed chunk attention over chunks of c positions. Default: GAU over the whole sequence.
    causal : {False, True, "top-left", "bottom-right"}, default False
        By selection: j ≤ p_i in the quadratic part, earlier chunks only in the linear part.
    scale : float, optional
        Multiplier of QKᵀ inside the ReLU; default 1/m (GAU, the paper's 1/n) or 1/c (chunks).
    linear_scale : float, optional
        Multiplier of the linear part (chunks only); default 1/m.
    return_weights : bool, default False
        Also return the (..., n, m) matrix M with out = M v.

    Returns
    -------
    out : (..., n, e) ndarray
    weights : (..., n, m) ndarray
        Only if ``return_weights``.

    References
    ----------
    .. [1] W. Hua, Z. Dai, H. Liu, Q. V. Le, "Transformer Quality in Linear Time", ICML 2022, arXiv:2202.10447,
       §2.2 (GAU), §3.2 (mixed chunk attention), Code 1.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> z, v = rng.standard_normal((6, 4)), rng.standard_normal((6, 3))
    >>> identity = ScaleOffset(np.ones((2, 4)), np.zeros((2, 4)))
    >>> out, A = gau_attention(z, z, v, params=identity, causal=True, return_weights=True)
    >>> bool(np.allclose(A, np.tril(np.maximum(z @ z.T / 6, 0) ** 2), rtol=1e-12, atol=1e-12))
    True
    >>> out = gau_attention(z, z, v, rng=1, chunk=2, causal=True)      # quadratic in chunks of 2, linear across
    >>> out.shape
    (6, 3)
    """
    return_weights = check_bool("return_weights", return_weights)
    q, k, v, batch = checked_qkv(q, k, v)
    m, s = k.shape[-2], q.shape[-1]
    count = 2 if chunk is None else 4
    if chunk is not None:
        chunk = check_positive_int("chunk", chunk)
    params = given_or_drawn("gau", "params", params, optional_rng(rng), what="its scale-offset params",
                            draw=lambda r: init_scale_offset(r, s, count=count))
    if not isinstance(params, ScaleOffset):
        raise TypeError(f"params must be a ScaleOffset (init_scale_offset), got {type(params).__name__}")
    if params.gamma.shape != (count, s):
        raise ValueError(f"params must have shape ({count}, s={s}) ({'GAU' if chunk is None else 'mixed chunk'}: "
                         f"{count} scale-offset rows), got {params.gamma.shape}")
    default = 1.0 / (m if chunk is None else chunk) if m else 1.0  # 1/n (GAU), 1/c (chunks); nothing with no key
    scale = default if scale is None else check_scale(scale)
    linear_scale = (1.0 / m if m else 1.0) if linear_scale is None else check_scale(linear_scale, "linear_scale")
    alignment = causal_alignment(causal)
    with np.errstate(invalid="ignore", over="ignore"):             # NaN/Inf inputs: IEEE, in the rows they reach
        out, A = _gau_checked(q, k, v, params, chunk, causal, alignment, scale, linear_scale, batch, return_weights)
    return (out, A) if return_weights else out


@dataclass(frozen=True, eq=False)
class GauLayerParams:
    """The dense layers of a gated attention unit: U = φ(X W_u + b_u), V = φ(X W_v + b_v), Z = φ(X W_z + b_z),
    O = (U ⊙ A V) W_o + b_o; ``qk`` makes Q, K (and Q', K' for chunks) from Z."""

    w_u: NDArray
    b_u: NDArray
    w_v: NDArray
    b_v: NDArray
    w_z: NDArray
    b_z: NDArray
    w_o: NDArray
    b_o: NDArray
    qk: ScaleOffset


def init_gau_layer(rng, d_model: int, *, expansion: int = 2, s: int = 128, chunked: bool = False) -> GauLayerParams:
    """Glorot-uniform dense weights (e = expansion·d_model), zero biases, and :func:`init_scale_offset` for Q, K.

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draws: W_u, W_v, W_z, W_o, then γ.
    d_model : int
        Width d of the layer's input and output.
    expansion : int, default 2
        e / d (the paper's expansion rate 2).
    s : int, default 128
        Width of Z, Q and K (the paper's s = 128).
    chunked : bool, default False
        Draw the 4 scale-offset rows of the mixed chunk attention instead of GAU's 2.

    Returns
    -------
    GauLayerParams

    Notes
    -----
    The paper's Code 1 uses its framework's ``dense`` layers without naming their initialiser; refattn's dense
    layers draw Glorot-uniform weights.

    Examples
    --------
    >>> p = init_gau_layer(0, 8, s=4)
    >>> p.w_u.shape, p.w_z.shape, p.w_o.shape, p.qk.gamma.shape
    ((8, 16), (8, 4), (16, 8), (2, 4))
    """
    rng = as_rng(rng)
    d = check_positive_int("d_model", d_model)
    e = d * check_positive_int("expansion", expansion)
    s = check_positive_int("s", s)
    chunked = check_bool("chunked", chunked)
    w_u, w_v, w_z, w_o = glorot(rng, d, e), glorot(rng, d, e), glorot(rng, d, s), glorot(rng, e, d)
    return GauLayerParams(w_u, np.zeros(e), w_v, np.zeros(e), w_z, np.zeros(s), w_o, np.zeros(d),
                          init_scale_offset(rng, s, count=4 if chunked else 2))


def _silu(x):
    return x / (1.0 + np.exp(-x))


def gated_attention_unit(x: ArrayLike, params: GauLayerParams, *, causal: bool | str = False,
                         chunk: int | None = None, scale: float | None = None,
                         linear_scale: float | None = None) -> NDArray:
    r"""The gated attention unit (FLASH's layer with ``chunk``): gate U times the relu²-attended values.

    .. math::

        O = \big(U \odot \mathrm{relu}^2(Q K^\top / n)\, V\big) W_o, \quad
        U, V, Z = \phi(X W_{u,v,z}), \quad Q, K = Z \odot \gamma_{q,k} + \beta_{q,k}

    Parameters
    ----------
    x : (..., n, d_model) array_like
        The layer input (normalised by the caller; the residual is the caller's too).
    params : GauLayerParams
        :func:`init_gau_layer`.
    causal, chunk, scale, linear_scale
        As in :func:`gau_attention`.

    Returns
    -------
    (..., n, d_model) ndarray

    References
    ----------
    .. [1] W. Hua, Z. Dai, H. Liu, Q. V. Le, "Transformer Quality in Linear Time", ICML 2022, arXiv:2202.10447,
       §2.2, Eq. (1)-(4), Code 1.

    Examples
    --------
    >>> x = np.random.default_rng(0).standard_normal((5, 8))
    >>> gated_attention_unit(x, init_gau_layer(1, 8, s=4), causal=True).shape
    (5, 8)
    """
    if not isinstance(params, GauLayerParams):
        raise TypeError(f"params must be a GauLayerParams (init_gau_layer), got {type(params).__name__}")
    x = as_float("x", x, min_ndim=2)
    if x.shape[-1] != params.w_u.shape[0]:
        raise ValueError(f"x has d_model={x.shape[-1]} but params expect {params.w_u.shape[0]} (x shape {x.shape})")
    u = _silu(x @ params.w_u + params.b_u)                         # (..., n, e)  gate
    v = _silu(x @ params.w_v + params.b_v)                         # (..., n, e)  values
    z = _silu(x @ params.w_z + params.b_z)                         # (..., n, s)  shared base of Q and K
    attended = gau_attention(z, z, v, params=params.qk, chunk=chunk, causal=causal, scale=scale,
                             linear_scale=linear_scale)
    return (u * attended) @ params.w_o + params.b_o                # (..., n, d_model)


RECORD = Mechanism.of(
    gau_attention, function=gated_attention_unit,
    id="gau", title="Gated attention unit (GAU) and FLASH mixed chunk attention", family="beyond",
    section="after the survey (single-head gated attention, linear-time chunks)", paper=HUA,
    equation=r"O = \big(U \odot \mathrm{relu}^2(QK^\top/n)\,V\big)W_o,\quad Q, K = Z\odot\gamma_{q,k} + \beta_{q,k}",
    time="O(n·m·s) (GAU), O(n·c·s + n·s·e) (chunks)", memory="O(n·m) (GAU), O(c² + s·e) per chunk",
    causal=True,
    normalized=False, nonnegative=False,                           # relu² rows need not sum to 1; Q'K'ᵀ may be < 0
    examples=({"chunk": 3}, {"chunk": 2, "scale": 0.7, "linear_scale": 0.3}, {"scale": 2.0}),
    figure="refattn.figures.gau:gau",
    exact_options=None,
    exact_limit="none: relu²(QKᵀ/n) is not a softmax (no normalisation, zero for negative scores)",
    draws=("params",),
)
