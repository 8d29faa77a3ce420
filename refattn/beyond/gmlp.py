r"""gMLP's spatial gating unit, with aMLP's tiny attention as an option (Liu et al., 2021, §2.1, §4).

gMLP mixes tokens with one learned n × n matrix W instead of attention, inside a multiplicative gate:

    s(Z) = Z₁ ⊙ f_{W,b}(Ẑ₂),   f_{W,b}(Ẑ₂) = W Ẑ₂ + b     Eqs. (2)-(4), Z = [Z₁, Z₂] split by channels
    Ẑ₂ = LayerNorm(Z₂)                                     the paper's pseudo-code (Fig. 1, ``norm(v)``)
    aMLP:  s(Z) = Z₁ ⊙ (W Ẑ₂ + b + TinyAttn(x))           §4: the tiny attention's output joins the gate

W ∈ R^{n×n} acts along the sequence (its row i says how position i reads positions j), b ∈ R^n is one offset per
position. "We initialize W as near-zero values and b as ones, meaning that f_{W,b}(Z) ≈ 1 and therefore
s(Z) ≈ Z [Z₁] at the beginning of training" (§2.1): at initialisation the unit is close to identity gating,
each token processed on its own.

**The bound at initialisation.** With |W_ij| ≤ ε/ℓ (the draw below), b = 1 and the layer norm (every entry of
a normalised row of width e is at most √(e − 1) in modulus), a query that reads at most ℓ positions gets

    |s(Z)_ic − (Z₁)_ic| = |(Z₁)_ic| · |Σ_j W_ij (Ẑ₂)_jc| ≤ ε·√(e − 1) · |(Z₁)_ic|,

whatever the input and the length (ε = 10⁻³: a relative change of at most 10⁻³·√(e − 1)). Without the layer norm
(``norm=False``) the bound is ε·max_j |(Z₂)_jc| · |(Z₁)_ic|. aMLP's tiny attention is not small at
initialisation: it adds a softmax average to the gate.

**The uniform apply.** gMLP has no queries and no keys; in the registry's ``apply`` the gated half Z₁ is q (the
stream at the output's own position, d_k = d_v), the half W mixes, Z₂, is v, and k is read only by the tiny
attention:

    out_i = q_i ⊙ (Σ_j M_ij v̂_j + b_{p_i}),   M = W (+ A),  v̂ = LayerNorm(v),  A = softmax(q kᵀ·scale)

aMLP's tiny attention has its own projections of the block's normalised input in the paper; here it is
single-head softmax attention of q and k over the same normalised values v̂, so that its matrix adds to W.
``return_weights`` gives M, the (..., n, m) token-mixing matrix with which the formula above reproduces the
output exactly; it is signed, and its rows do not sum to 1.

Positions and the causal form: query i sits at position p_i = i (bottom-right: i + m − n), key j at j; row p_i
and the first m columns of W are used, with b_{p_i}. The paper gives no causal form; the causal masking of W
(j ≤ p_i, by selection) follows lucidrains/g-mlp-pytorch (``SpatialGatingUnit``, ``causal=True``), whose
tiny attention is causal too. A query before the first key (bottom-right with n > m) has no row of W: its
output is 0, as every fully masked row.

Sources of the defaults: the paper gives the form and "near-zero" W, b = 1. The near-zero range, W ~ U(±ε/ℓ) with
ε = 10⁻³ and ℓ the sequence length, and the layer norm's ε = 10⁻⁵ (PyTorch's ``nn.LayerNorm`` default, gain 1 and
offset 0 as at initialisation) are lucidrains/g-mlp-pytorch's (``init_eps = 1e-3``, ``init_eps /= dim_seq``); no
official code was released with the paper.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.budget import check_fits
from ..common.checks import as_float, as_rng, causal_alignment, check_bool, check_scale, checked_qkv
from ..common.ints import check_non_negative_int
from ..common.products import weighted_values
from ..core.causal_mask import causal_mask
from ..core.layer_norm import layer_norm
from ..core.sdpa import scaled_dot_product_attention
from ..draws import given_or_drawn, optional_rng
from ..mechanism import Mechanism

__all__ = ["GMLP_INIT_EPS", "GMLP_NORM_EPS", "SpatialGatingParams", "gmlp_attention", "init_spatial_gating",
           "spatial_gating_unit"]

LIU = ('H. Liu, Z. Dai, D. R. So, Q. V. Le, 2021, "Pay Attention to MLPs", NeurIPS 2021, arXiv:2105.08050')
#: ε of W's initial range U(±ε/ℓ) (lucidrains/g-mlp-pytorch's ``init_eps``).
GMLP_INIT_EPS = 1e-3
#: The layer norm's ε on Z₂ (PyTorch's ``nn.LayerNorm`` default).
GMLP_NORM_EPS = 1e-5


@dataclass(frozen=True, eq=False)
class SpatialGatingParams:
    r"""The spatial projection :math:`f_{W,b}(Z) = WZ + b` of gMLP, for sequences up to length ℓ.

    Attributes
    ----------
    W : (ℓ, ℓ) ndarray
        Row i: how position i reads positions j (it acts along the sequence, on the left).
    b : (ℓ,) ndarray
        One offset per position.
    """

    W: NDArray
    b: NDArray

    @property
    def length(self) -> int:
        """ℓ, the longest sequence the parameters cover."""
        return self.W.shape[0]


def init_spatial_gating(rng, length: int, *, init_eps: float = GMLP_INIT_EPS) -> SpatialGatingParams:
    r"""Draw W near 0 and set b to 1, as the paper initialises the spatial gating unit.

    :math:`W_{ij} \sim \mathcal U(-\varepsilon/\ell, \varepsilon/\ell)` (lucidrains/g-mlp-pytorch's range; the
    paper says "near-zero"), :math:`b = 1`.

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of W.
    length : int
        ℓ, the sequence length (>= 0).
    init_eps : float, default 1e-3
        ε, >= 0.

    Returns
    -------
    SpatialGatingParams

    Examples
    --------
    >>> p = init_spatial_gating(0, 4)
    >>> p.W.shape, bool(np.abs(p.W).max() <= 1e-3 / 4), p.b
    ((4, 4), True, array([1., 1., 1., 1.]))
    """
    rng = as_rng(rng)
    L = check_non_negative_int("length", length)
    init_eps = check_scale(init_eps, "init_eps")
    if init_eps < 0:
        raise ValueError(f"init_eps must be >= 0, got {init_eps!r}")
    check_fits("gMLP's W", (L, L))
    bound = init_eps / max(L, 1)
    return SpatialGatingParams(W=rng.uniform(-bound, bound, size=(L, L)), b=np.ones(L))


def _check_params(params, m: int) -> SpatialGatingParams:
    if not isinstance(params, SpatialGatingParams):
        raise TypeError(f"params must be SpatialGatingParams (init_spatial_gating), got {type(params).__name__}")
    W, b = np.asarray(params.W), np.asarray(params.b)
    if W.ndim != 2 or W.shape[0] != W.shape[1] or b.shape != (W.shape[0],):
        raise ValueError(f"params must hold W (ℓ, ℓ) and b (ℓ,), got W shape {W.shape}, b shape {b.shape}")
    if W.shape[0] < m:
        raise ValueError(f"params cover ℓ = {W.shape[0]} positions but the sequence has m = {m} (v shape (..., m, "
                         "d_v)): draw them for the longest sequence")
    return params


def _gate(z1: NDArray, z2: NDArray, params: SpatialGatingParams, *, causal, norm: bool, eps: float,
          attention: tuple | None = None, gate_res: NDArray | None = None):
    """out = z₁ ⊙ (M ẑ₂ + b [+ gate_res]) over z₁ (..., n, e), z₂ (..., m, e), M = W [+ softmax(q kᵀ·scale) for
    ``attention`` = (q, k, scale)]; returns (out, M, allowed or None)."""
    n, m, e = z1.shape[-2], z2.shape[-2], z2.shape[-1]
    alignment = causal_alignment(causal)
    positions = np.arange(n) + (m - n if alignment == "bottom-right" else 0)           # p_i
    placed = positions >= 0                                                             # queries with a row of W
    allowed = None if alignment is None else causal_mask(n, m, causal=alignment)     # (n, m)  j ≤ p_i
    W = np.zeros((n, m))
    W[placed] = np.asarray(params.W, dtype=np.float64)[positions[placed], :m]           # (n, m)  rows p_i of W
    if allowed is not None:
        W = np.where(allowed, W, 0.0)                                                   # masked by selection
    b = np.zeros(n)
    b[placed] = np.asarray(params.b, dtype=np.float64)[positions[placed]]              # (n,)  b_{p_i}
    with np.errstate(invalid="ignore"):                                                 # Inf − Inf: NaN in its row
        z2_hat = layer_norm(z2, eps=eps) if norm and e > 0 else z2                      # (..., m, e)  Ẑ₂
    M = W
    if attention is not None:                                                           # aMLP: + softmax(q kᵀ·scale)
        q, k, scale = attention
        _, A = scaled_dot_product_attention(q, k, z2_hat, causal=causal, scale=scale, return_weights=True)
        M = W + A                                                                       # (..., n, m)
    batch = np.broadcast_shapes(z1.shape[:-2], z2.shape[:-2], M.shape[:-2])
    empty = np.zeros((n, 1), dtype=bool) if allowed is None else ~allowed.any(axis=-1, keepdims=True)
    mixed = weighted_values(np.broadcast_to(M, (*batch, n, m)), np.broadcast_to(z2_hat, (*batch, m, e)), allowed,
                            empty, "zero")                                              # (..., n, e)  M ẑ₂
    gate = mixed + b[:, None] + (0.0 if gate_res is None else gate_res)                 # (..., n, e)  M ẑ₂ + b
    out = z1 * gate                                                                     # (..., n, e)  z₁ ⊙ gate
    out = np.where(placed[:, None], out, 0.0)                                           # no row of W: a zero row
    return out, M, allowed


def spatial_gating_unit(z: ArrayLike, *, params: SpatialGatingParams | None = None,
                        rng: np.random.Generator | int | None = None, gate_res: ArrayLike | None = None,
                        causal: bool = False, norm: bool = True, eps: float = GMLP_NORM_EPS,
                        return_weights: bool = False) -> NDArray | tuple[NDArray, NDArray]:
    r"""gMLP's spatial gating unit on one input Z, split by channels into the gated half and the mixed half.

    .. math::

        s(Z) = Z_1 \odot \big(W\, \mathrm{LayerNorm}(Z_2) + b\big), \qquad Z = [Z_1, Z_2]

    (aMLP: ``gate_res``, the tiny attention's output, is added inside the bracket).

    Parameters
    ----------
    z : (..., n, 2e) array_like
        The unit's input (in gMLP, GeLU(X U) of the block's normalised input); its first e channels are
        :math:`Z_1`, its last e :math:`Z_2`.
    params : SpatialGatingParams, optional
        W and b (:func:`init_spatial_gating`) for ℓ >= n positions (the first n rows and columns are used).
    rng : numpy.random.Generator or int, optional
        Draws the paper's initialisation (ℓ = n) when ``params`` is absent (unused when it is given).
    gate_res : (..., n, e) array_like, optional
        aMLP's tiny attention output, added to the gate (``gate_res`` of the paper's aMLP pseudo-code).
    causal : bool, default False
        Keep :math:`W_{ij}` for j <= i only (lucidrains/g-mlp-pytorch's causal form; not in the paper).
    norm : bool, default True
        Normalise :math:`Z_2` over its channels first, as the paper's pseudo-code.
    eps : float, default 1e-5
        The layer norm's ε.
    return_weights : bool, default False
        Also return the (n, n) token-mixing matrix W as used (masked when causal).

    Returns
    -------
    s : (..., n, e) ndarray
    weights : (n, n) ndarray
        Only if ``return_weights``.

    Notes
    -----
    At initialisation (:math:`|W_{ij}| \le \varepsilon/\ell`, b = 1, ``norm=True``, no ``gate_res``),
    :math:`|s(Z) - Z_1| \le \varepsilon \sqrt{e - 1}\, |Z_1|` entry by entry: close to identity gating.
    Time O(n²·e), memory O(n²) for W.

    References
    ----------
    .. [1] H. Liu, Z. Dai, D. R. So, Q. V. Le, "Pay Attention to MLPs", NeurIPS 2021, arXiv:2105.08050v2,
       §2.1, Eqs. (2)-(4) and Fig. 1's pseudo-code; §4 (aMLP's tiny attention).
    .. [2] lucidrains/g-mlp-pytorch, ``g_mlp_pytorch/g_mlp_pytorch.py`` (``SpatialGatingUnit``: the initial
       range of W and the causal mask).

    Examples
    --------
    >>> z = np.random.default_rng(0).standard_normal((5, 8))
    >>> s = spatial_gating_unit(z, rng=1)                           # at initialisation: close to Z₁
    >>> s.shape, bool(np.all(np.abs(s - z[:, :4]) <= 1e-3 * np.sqrt(3) * np.abs(z[:, :4])))
    ((5, 4), True)
    """
    z = as_float("z", z, min_ndim=2)
    if z.shape[-1] % 2:
        raise ValueError(f"z must have an even number of channels (Z₁ and Z₂ of e each), got shape {z.shape}")
    if causal not in (False, True) or isinstance(causal, np.bool_):
        raise ValueError(f"causal must be False or True, got {causal!r}")
    norm, return_weights = check_bool("norm", norm), check_bool("return_weights", return_weights)
    eps = check_scale(eps, "eps")
    n, e = z.shape[-2], z.shape[-1] // 2
    params = given_or_drawn("gmlp", "params", params, optional_rng(rng),
                            lambda r: init_spatial_gating(r, n), what="its spatial projection")
    params = _check_params(params, n)
    if gate_res is not None:
        gate_res = as_float("gate_res", gate_res)
        try:
            np.broadcast_shapes(gate_res.shape, (*z.shape[:-1], e))
        except ValueError:
            raise ValueError(f"gate_res must broadcast to (..., n, e) = {(*z.shape[:-1], e)}, got shape "
                             f"{gate_res.shape}") from None
    out, W, _ = _gate(z[..., :e], z[..., e:], params, causal=causal, norm=norm, eps=eps, gate_res=gate_res)
    return (out, W) if return_weights else out


def gmlp_attention(q: ArrayLike, k: ArrayLike, v: ArrayLike, *, params: SpatialGatingParams | None = None,
                   rng: np.random.Generator | int | None = None, causal: bool | str = False, norm: bool = True,
                   tiny_attention: bool = False, scale: float | None = None,
                   return_weights: bool = False) -> NDArray | tuple[NDArray, NDArray]:
    r"""The spatial gating unit over (q, k, v): Z₁ = q gated by the mixed values, Z₂ = v (aMLP: + tiny attention).

    .. math::

        \mathrm{out} = q \odot (M\, \hat V + b), \qquad M = W\ \big[+ \operatorname{softmax}(QK^\top \cdot
        \mathrm{scale})\big], \qquad \hat V = \mathrm{LayerNorm}(V)

    Parameters
    ----------
    q : (..., n, e) array_like
        The gated half Z₁, as wide as v.
    k : (..., m, d_k) array_like
        Keys, read only by the tiny attention.
    v : (..., m, e) array_like
        The mixed half Z₂; n = m unless ``causal="bottom-right"`` (the last n of m positions).
    params : SpatialGatingParams, optional
        W and b for ℓ >= m positions; drawn from ``rng`` (:func:`init_spatial_gating`, ℓ = m) when absent.
    rng : numpy.random.Generator or int, optional
        Draws ``params`` when they are not given.
    causal : {False, True, "top-left", "bottom-right"}, default False
        Keep :math:`W_{ij}` for the keys j each query may see (and mask the tiny attention alike).
    norm : bool, default True
        Layer-normalise v over its channels first.
    tiny_attention : bool, default False
        aMLP: add :math:`\operatorname{softmax}(QK^\top \cdot \mathrm{scale})` to W.
    scale : float, optional
        The tiny attention's multiplier of :math:`QK^\top`; default :math:`1/\sqrt{d_k}`.
    return_weights : bool, default False
        Also return M, (..., n, m).

    Returns
    -------
    out : (..., n, e) ndarray
    weights : (..., n, m) ndarray
        Only if ``return_weights``.
    """
    return_weights = check_bool("return_weights", return_weights)
    q, k, v, batch = checked_qkv(q, k, v)
    n, m = q.shape[-2], v.shape[-2]
    if q.shape[-1] != v.shape[-1]:
        raise ValueError(f"gmlp gates q by the mixed values, q ⊙ (W v̂ + b): q and v must have the same width, got "
                         f"q shape {q.shape}, v shape {v.shape}")
    alignment = causal_alignment(causal)
    if n != m and alignment != "bottom-right":
        raise ValueError(f"gmlp's W is a square matrix over one sequence: q and v must have the same length n = m "
                         f"(or causal='bottom-right'), got q shape {q.shape}, v shape {v.shape}")
    norm, tiny_attention = check_bool("norm", norm), check_bool("tiny_attention", tiny_attention)
    if scale is not None:
        scale = check_scale(scale)
    if params is not None:
        _check_params(params, m)
    params = given_or_drawn("gmlp", "params", params, optional_rng(rng), lambda r: init_spatial_gating(r, m),
                            what="its spatial gating params W, b")
    z1, z2 = (np.broadcast_to(x, (*batch, *x.shape[-2:])) for x in (q, v))
    attention = (q, k, scale) if tiny_attention else None
    out, M, _ = _gate(z1, z2, params, causal=causal, norm=norm, eps=GMLP_NORM_EPS, attention=attention)
    return (out, np.broadcast_to(M, (*batch, n, m)).copy()) if return_weights else out


RECORD = Mechanism.of(
    gmlp_attention, function=spatial_gating_unit,
    id="gmlp", title="gMLP spatial gating unit (aMLP's tiny attention optional)", family="beyond",
    section="after the survey (attention-free)", paper=LIU,
    equation=r"q \odot \big(W\,\mathrm{LN}(V) + b\big)\quad(Z_1 = q,\ Z_2 = v;\ "
             r"\text{aMLP: } W + \operatorname{softmax}(QK^\top/\sqrt{d}))",
    time="O(n·m·d)", memory="O(n·m)", causal=True,
    cross=False, position_dependent=True, normalized=False, nonnegative=False,
    examples=({"tiny_attention": True}, {"norm": False}, {"tiny_attention": True, "norm": False, "scale": 0.5}),
    figure="refattn.figures.gmlp:gmlp", draws=("params",),
    exact_options=None,
    exact_limit="none: the output is a gate on the query, q ⊙ (W v̂ + b), never a convex mix of the values",
)
