r"""KERPLE: kernelized relative positional embedding, a learned conditionally positive definite bias (Chi et al., 2022).

A bias that depends only on the distance |i − j| is added to the scores before the softmax; the
paper derives it from conditionally positive definite (CPD) kernels, shifted by a constant that the
softmax cancels:

    S = Q Kᵀ · scale + B,   A = softmax(S),   out = A V
    log variant      B_ij = −r1 · log(1 + r2 |i − j|)        r1, r2 > 0
    power variant    B_ij = −r1 · |i − j|^r2                 r1 > 0, 0 < r2 ≤ 2

(r1, r2) are learned, one pair per head. The constraints are the paper's: they keep −|i − j|^r2
(power, 0 < r2 ≤ 2) and −log(1 + r2|i − j|) CPD (§3). Both biases are 0 on the
diagonal and fall as keys recede, so each head's attention decays with distance, slowly
(logarithmically) or at a learned power. ALiBi is the power variant with r2 = 1.

Positions: query i sits at i (bottom-right causal: i + m − n), key j at j. The paper trains causal
language models (the bias with the decoder's mask); without a mask the bias is symmetric in i − j.

r1 = 0 is the limit where the bias vanishes (B = −0.0): softmax attention exactly.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.budget import check_fits
from ..common.checks import (
    as_float,
    as_rng,
    broadcast_batch,
    causal_alignment,
    check_bool,
    check_choice,
    check_scale,
    checked_qkv,
    default_scale,
)
from ..common.ints import check_positive_int
from ..core.sdpa import scaled_dot_product_attention
from ..deprecation import renamed
from ..draws import given_or_drawn, optional_rng
from ..mechanism import Mechanism
from .t5_bias import relative_positions

__all__ = ["KERPLE_VARIANTS", "KerpleParams", "init_kerple", "kerple_attention", "kerple_bias"]

CHI = ('T.-C. Chi, T.-H. Fan, P. J. Ramadge, A. I. Rudnicky, 2022, "KERPLE: Kernelized Relative Positional Embedding '
       'for Length Extrapolation", NeurIPS 2022, arXiv:2205.09921')
#: The two kernels of the paper (§3): the logarithmic and the power CPD kernel.
KERPLE_VARIANTS = ("log", "power")
METHODS = ("equation", "blocked", "auto")


@dataclass(frozen=True, eq=False)
class KerpleParams:
    """The learned kernel parameters, one pair per head.

    Attributes
    ----------
    r1 : () or (h,) ndarray
        The kernel's scale, ≥ 0 (the paper: > 0; 0 is the limit where the bias vanishes).
    r2 : () or (h,) ndarray
        The kernel's rate (log) or power (power), > 0; the power variant also needs r2 ≤ 2
        (checked where the variant is known, :func:`kerple_bias`).

    With (h,) parameters the bias has shape (h, n, m): heads are the axis −3 of q, k and v.
    """

    r1: NDArray
    r2: NDArray

    def __post_init__(self) -> None:
        for name in ("r1", "r2"):
            object.__setattr__(self, name, as_float(name, getattr(self, name)))
            if getattr(self, name).ndim > 1:
                raise ValueError(f"{name} must be a number or one per head (h,), got shape {getattr(self, name).shape}")
        if self.r1.shape != self.r2.shape:
            raise ValueError(f"r1 and r2 must have the same shape (one pair per head), got {self.r1.shape} and "
                             f"{self.r2.shape}")
        if not np.all((self.r1 >= 0) & np.isfinite(self.r1)):      # NaN fails too
            raise ValueError(f"r1 must be finite and ≥ 0 (the paper's r1 > 0; 0 removes the bias), got {self.r1}")
        if not np.all((self.r2 > 0) & np.isfinite(self.r2)):
            raise ValueError(f"r2 must be finite and > 0 (the paper's constraint), got {self.r2}")


def init_kerple(rng, num_heads: int | None = None) -> KerpleParams:
    r"""Draw r1 ~ U(0, 2) and r2 ~ U(0, 1) per head, as the authors' code initialises them.

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw, r1 first.
    num_heads : int, optional
        h. Default: one head (scalars).

    Returns
    -------
    KerpleParams

    Notes
    -----
    The authors' GPT-NeoX code (chijames/KERPLE, megatron/model/positional_embeddings.py) draws
    ``bias_p`` (r1) as 2·U(0, 1) and ``bias_a`` (r2) as U(0, 1) per head, and after each step clamps
    them at ε = 0.01 (a training detail, not applied here). A U(0, 1) draw of 0 exactly, which
    the paper's r2 > 0 forbids, is moved to the smallest positive float.

    Examples
    --------
    >>> params = init_kerple(0, num_heads=4)
    >>> params.r1.shape, bool(np.all((0 < params.r2) & (params.r2 < 1)))
    ((4,), True)
    """
    rng = as_rng(rng)
    shape = () if num_heads is None else (check_positive_int("num_heads", num_heads),)
    r1 = 2.0 * rng.uniform(0.0, 1.0, size=shape)
    r2 = np.maximum(rng.uniform(0.0, 1.0, size=shape), np.finfo(np.float64).tiny)
    return KerpleParams(r1, r2)


def _check_params(params, kind: str) -> None:
    if not isinstance(params, KerpleParams):
        raise TypeError(f"params must be a KerpleParams (init_kerple), got {type(params).__name__}")
    if kind == "power" and not np.all(params.r2 <= 2):
        raise ValueError(f"the power variant needs 0 < r2 ≤ 2 (the paper's constraint), got r2 = {params.r2}")


@renamed(variant="kind")
def kerple_bias(params: KerpleParams, n: int, m: int, *, kind: str = "log",
                causal: bool | str = False) -> NDArray:
    r"""The bias over n queries and m keys: :math:`-r_1\log(1 + r_2|i - j|)` or :math:`-r_1|i - j|^{r_2}`.

    Parameters
    ----------
    params : KerpleParams
        r1, r2 (:func:`init_kerple`).
    n, m : int
        Number of queries and keys.
    kind : {"log", "power"}, default "log"
    causal : {False, True, "top-left", "bottom-right"}, default False
        Places the queries: at i, or at i + m − n for "bottom-right" (the mask itself is not applied
        here).

    Returns
    -------
    (n, m) or (h, n, m) ndarray
        ≤ 0, 0 (−0.0) where i = j.

    Examples
    --------
    >>> kerple_bias(KerpleParams(1.0, 1.0), 1, 4, kind="power", causal="bottom-right")
    array([[-3., -2., -1., -0.]])
    >>> kerple_bias(KerpleParams(2.0, np.e - 1), 1, 2, causal="bottom-right")     # −2·log(1 + (e − 1)·1) = −2
    array([[-2., -0.]])
    """
    check_choice("kind", kind, KERPLE_VARIANTS)
    _check_params(params, kind)
    alignment = causal_alignment(causal)
    distance = np.abs(relative_positions(n, m, alignment)).astype(np.float64)   # (n, m)  |i − j|
    r1, r2 = params.r1[..., None, None], params.r2[..., None, None]            # (..., 1, 1)
    check_fits("the KERPLE bias", (*params.r1.shape, n, m))
    if kind == "log":
        return -r1 * np.log1p(r2 * distance)                       # (..., n, m)  −r1·log(1 + r2|i − j|)
    return -r1 * distance ** r2                                    # (..., n, m)  −r1·|i − j|^r2


@renamed(variant="kind")
def kerple_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    params: KerpleParams | None = None,
    rng: np.random.Generator | int | None = None,
    num_heads: int | None = None,
    kind: str = "log",
    causal: bool | str = False,
    scale: float | None = None,
    method: str = "auto",
    return_weights: bool = False,
) -> NDArray | tuple[NDArray, NDArray]:
    r"""Softmax attention with KERPLE's kernelized distance bias.

    .. math::

        \operatorname{softmax}\big(QK^\top \cdot \text{scale} + B\big) V, \qquad
        B_{ij} = \begin{cases} -r_1 \log(1 + r_2 |i - j|) & \text{log} \\
                               -r_1 |i - j|^{r_2} & \text{power} \end{cases}

    Parameters
    ----------
    q : (..., n, d_k) array_like
        Queries (with h heads: (..., h, n, d_k)).
    k : (..., m, d_k) array_like
        Keys.
    v : (..., m, d_v) array_like
        Values.
    params : KerpleParams, optional
        r1, r2 (:func:`init_kerple`); drawn from ``rng`` when not given.
    rng : numpy.random.Generator or int, optional
        Draws ``params`` with :func:`init_kerple`; unused with ``params``.
    num_heads : int, optional
        Heads of the drawn parameters (only with ``rng``); default one head.
    kind : {"log", "power"}, default "log"
        The kernel (the paper's best is "log").
    causal : {False, True, "top-left", "bottom-right"}, default False
        The decoder's mask (by selection; the paper's setting), and where the queries sit.
    scale : float, optional
        Multiplier of :math:`QK^\top`; default :math:`1/\sqrt{d_k}`. B is added unscaled.
    method : {"equation", "blocked", "auto"}, default "auto"
        :func:`~refattn.scaled_dot_product_attention`'s path (B itself is n × m whatever the path).
    return_weights : bool, default False

    Returns
    -------
    out : (..., n, d_v) ndarray
    weights : (..., n, m) ndarray
        Only if ``return_weights``.

    Notes
    -----
    **Constraints.** r1 > 0 and r2 > 0 for both kernels, r2 ≤ 2 for the power kernel (the paper,
    §3); a bad value raises ValueError. **Exact limit.** r1 = 0 gives B = −0.0: softmax attention
    exactly. (In the power variant r2 → 0 only shifts every score by −r1, which the softmax also
    cancels, up to rounding.)

    Complexity: O(n·m·(d_k + d_v)) time, O(h·n·m) memory for B.

    References
    ----------
    .. [1] T.-C. Chi, T.-H. Fan, P. J. Ramadge, A. I. Rudnicky, "KERPLE: Kernelized Relative
       Positional Embedding for Length Extrapolation", NeurIPS 2022, arXiv:2205.09921, §3.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 2, 6, 4))                # 2 heads
    >>> out, A = kerple_attention(q, k, v, rng=1, num_heads=2, causal=True, return_weights=True)
    >>> out.shape, bool(np.all(np.triu(A[0], 1) == 0))
    ((2, 6, 4), True)
    >>> off = KerpleParams(np.zeros(2), np.ones(2))
    >>> bool(np.allclose(kerple_attention(q, k, v, params=off, kind="power"), scaled_dot_product_attention(q, k, v),
    ...                  rtol=1e-12, atol=1e-12))
    True
    """
    if params is not None and num_heads is not None:
        raise ValueError("num_heads= only chooses the heads of drawn parameters; params= brings its own")
    check_choice("method", method, METHODS)
    check_choice("kind", kind, KERPLE_VARIANTS)
    return_weights = check_bool("return_weights", return_weights)
    q, k, v, batch = checked_qkv(q, k, v)
    n, m, d_k = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = default_scale(d_k) if scale is None else check_scale(scale)
    params = given_or_drawn("kerple", "params", params, optional_rng(rng), lambda r: init_kerple(r, num_heads),
                            what="r1 and r2")
    _check_params(params, kind)
    batch = broadcast_batch({"q, k, v": batch, "params heads": params.r1.shape})
    check_fits("the KERPLE bias", (*batch, n, m))
    B = kerple_bias(params, n, m, kind=kind, causal=causal)
    if not return_weights:
        return scaled_dot_product_attention(q, k, v, B, causal=causal, scale=scale, method=method)
    out, A = scaled_dot_product_attention(q, k, v, B, causal=causal, scale=scale, method="equation",
                                          return_weights=True)     # softmax(QKᵀ·scale + B), its V
    if method == "blocked":
        out = scaled_dot_product_attention(q, k, v, B, causal=causal, scale=scale, method="blocked")
    return out, A


RECORD = Mechanism.of(
    kerple_attention,
    id="kerple", title="KERPLE kernelized relative position bias (log and power)", family="positional",
    section="after the survey (relative position, cf. §5.1.2)", paper=CHI,
    equation=r"\operatorname{softmax}\!\big(QK^\top\cdot\text{scale} + B\big) V,\quad "
             r"B_{ij} = -r_1\log(1 + r_2|i - j|)\ \text{or}\ -r_1|i - j|^{r_2}",
    time="O(n·m·d)", memory="O(h·n·m)", kind="attention", methods=METHODS, causal=True, position_dependent=True,
    examples=({"kind": "power"},),
    figure="refattn.figures.kerple:kerple",
    exact_options=lambda n, m: {"params": KerpleParams(0.0, 1.0)},
    exact_limit="r1 = 0 (the bias vanishes)",
    draws=("params",),
)
