r"""Gaussian Transformer's self-attention: a learned locality prior on the scores (Guo et al., 2019; survey §4.5.1).

    G_ij = −|w (i − j)² + b|,   w ≥ 0, b ≤ 0                the prior: centred on the query's own position
    Attention(Q, K, V) = softmax(QKᵀ/√d + G) V

Adding G to the scores multiplies each softmax weight by e^{G_ij} and renormalises: a Gaussian-shaped
(in the exponent, quadratic in the distance i − j) preference for nearby tokens. w sets its width
(w = 0: flat); b ≤ 0 lowers the centre: G_ii = b, and G reaches its maximum 0 at the distance
|i − j| = √(−b/w), so a negative b moves the preferred neighbours away from the token itself. w = 0,
b = 0 makes G = 0: softmax attention.

w and b are scalars learned per layer (or arrays, one per head, broadcast against the leading dims).
The constraint w ≥ 0, b ≤ 0 is checked (:class:`GaussianTransformerParams` refuses anything else);
a training loop would keep it by a parameterisation such as w = softplus(ŵ), b = −softplus(b̂).
The paper gives no initialisation and there is no official code: :func:`init_gaussian_transformer`
draws w ~ U[0, 1), b ~ U(−1, 0], so that both constraints are active and the prior is visibly local
at ten-odd tokens.
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
    check_scale,
    checked_qkv,
    default_scale,
)
from ..common.ints import check_non_negative_int
from ..core.sdpa import scaled_dot_product_attention
from ..draws import given_or_drawn, note_allowed, optional_rng
from ..mechanism import Mechanism

__all__ = ["GaussianTransformerParams", "gaussian_transformer_attention", "gaussian_transformer_prior",
           "init_gaussian_transformer"]

GUO = ('M. Guo, Y. Zhang, T. Liu, 2019, "Gaussian Transformer: A Lightweight Approach for Natural Language '
       'Inference", AAAI 2019, doi:10.1609/aaai.v33i01.33016489 (no arXiv version; in the survey, '
       'arXiv:2106.04554, §4.5.1)')


@dataclass(frozen=True, eq=False)
class GaussianTransformerParams:
    r"""The prior's learned scalars (or arrays of them, one per head), checked to keep their signs.

    Attributes
    ----------
    w : float or ndarray
        The width parameter, :math:`w \ge 0` (0: a flat prior).
    b : float or ndarray
        The centre's offset, :math:`b \le 0`.
    """

    w: NDArray
    b: NDArray

    def __post_init__(self) -> None:
        for name, sign in (("w", 1.0), ("b", -1.0)):
            x = as_float(name, getattr(self, name))
            if not np.all(np.isfinite(x)) or np.any(sign * x < 0):
                raise ValueError(f"{name} must be finite and {'>=' if sign > 0 else '<='} 0 (the paper's constraint "
                                 f"w >= 0, b <= 0), got {x!r}")
            object.__setattr__(self, name, x)
        try:
            np.broadcast_shapes(self.w.shape, self.b.shape)
        except ValueError:
            raise ValueError(f"w and b must broadcast together, got shapes {self.w.shape} and {self.b.shape}") from None


def init_gaussian_transformer(rng, num_heads: int | None = None) -> GaussianTransformerParams:
    r"""Draw w ~ U[0, 1) and b ~ U(−1, 0] (the paper states no initialisation).

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw, in the order w, b.
    num_heads : int, optional
        Draw one (w, b) per head, of shape (h,), for inputs with the heads on axis −3.
        Default: one scalar pair.

    Returns
    -------
    GaussianTransformerParams

    Examples
    --------
    >>> p = init_gaussian_transformer(0)
    >>> bool(p.w >= 0), bool(p.b <= 0), p.w.shape
    (True, True, ())
    """
    rng = as_rng(rng)
    shape = () if num_heads is None else (check_non_negative_int("num_heads", num_heads),)
    w = rng.uniform(0.0, 1.0, size=shape)                          # [0, 1)
    b = -rng.uniform(0.0, 1.0, size=shape)                         # (−1, 0]
    return GaussianTransformerParams(w, b)


def gaussian_transformer_prior(params: GaussianTransformerParams, n: int, m: int | None = None, *,
                               causal: bool | str = False) -> NDArray:
    r"""The prior :math:`G_{ij} = -|w (p_i - j)^2 + b|` at query positions :math:`p_i` and key positions j.

    Parameters
    ----------
    params : GaussianTransformerParams
        w and b.
    n : int
        Number of queries.
    m : int, optional
        Number of keys; default n.
    causal : {False, True, "top-left", "bottom-right"}, default False
        Only "bottom-right" changes the prior: the queries are the last n of m positions,
        :math:`p_i = i + m - n`; otherwise :math:`p_i = i`.

    Returns
    -------
    G : (..., n, m) ndarray
        ``...`` the broadcast shape of w and b. :math:`G \le 0`, with :math:`G_{ii} = b`.

    Examples
    --------
    >>> G = gaussian_transformer_prior(GaussianTransformerParams(0.25, -1.0), 5)
    >>> G[2]                                      # −|(2 − j)²/4 − 1|: 0 at distance 2 = √(−b/w)
    array([-0.  , -0.75, -1.  , -0.75, -0.  ])
    """
    if not isinstance(params, GaussianTransformerParams):
        raise TypeError(f"params must be a GaussianTransformerParams (init_gaussian_transformer), got "
                        f"{type(params).__name__}")
    n = check_non_negative_int("n", n)
    m = n if m is None else check_non_negative_int("m", m)
    alignment = causal_alignment(causal)
    p = np.arange(n) + (m - n if alignment == "bottom-right" else 0)   # (n,)  query positions
    d2 = (p[:, None] - np.arange(m)[None, :]).astype(np.float64) ** 2   # (n, m)  (p_i − j)²
    w, b = params.w[..., None, None], params.b[..., None, None]
    return -np.abs(w * d2 + b)                                     # (..., n, m)  G = −|w (i − j)² + b|


def gaussian_transformer_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    params: GaussianTransformerParams | None = None,
    rng: np.random.Generator | int | None = None,
    causal: bool | str = False,
    mask_diagonal: bool = False,
    scale: float | None = None,
    return_weights: bool = False,
) -> NDArray | tuple[NDArray, NDArray]:
    r"""Gaussian self-attention: softmax attention with the prior :math:`-|w (i - j)^2 + b|` on the scores.

    .. math::

        \operatorname{Attention}(Q, K, V) = \operatorname{softmax}\Big(\frac{Q K^\top}{\sqrt{d_k}} + G\Big) V,
        \qquad G_{ij} = -\big|w (i - j)^2 + b\big|, \quad w \ge 0,\ b \le 0

    Parameters
    ----------
    q : (..., n, d_k) array_like
        Queries.
    k : (..., m, d_k) array_like
        Keys of the same sequence (n = m; ``causal="bottom-right"``: the n queries are the last n
        of the m positions).
    v : (..., m, d_v) array_like
        Values.
    params : GaussianTransformerParams, optional
        w and b; their shape broadcasts against the leading dims of q, k, v (one per head: shape
        (h,) against inputs (..., h, n, d), as :func:`init_gaussian_transformer` draws with
        ``num_heads``). Drawn from ``rng`` when not given.
    rng : numpy.random.Generator or int, optional
        Source of w and b (:func:`init_gaussian_transformer`, one scalar pair); unused when ``params`` is given.
    causal : {False, True, "top-left", "bottom-right"}, default False
        Mask the future by selection (row *i* sees keys j <= i, + m − n bottom-right); the prior
        depends on positions only, so a causal row never depends on later tokens.
    mask_diagonal : bool, default False
        Also mask j = i (each token attends to the others only, by selection). A row that then
        sees no key (n = 1, or the first row under ``causal``) is zero.
    scale : float, optional
        Multiplier of :math:`QK^\top`; default :math:`1/\sqrt{d_k}`. G is added unscaled.
    return_weights : bool, default False
        Also return the weights.

    Returns
    -------
    out : (..., n, d_v) ndarray
    weights : (..., n, m) ndarray
        Only if ``return_weights``.

    Notes
    -----
    **Sources.** The prior and its constraint (w a non-negative scalar controlling the deviation,
    b a negative scalar lowering the central position) are the paper's, as the survey (Lin et al.,
    arXiv:2106.04554, §4.5.1) states them. No official code exists. G is added to the scaled
    scores, as the survey's rule for priors has it. The default keeps j = i, the reading in which
    b lowers the central position; ``mask_diagonal=True`` excludes it instead. A public
    re-implementation (lzy1732008/GaussionTransformer) differs on three counts: it drops the
    absolute value, divides G by √d with the scores, and masks no diagonal.

    **Exact limit.** w = 0, b = 0 give G = 0: softmax attention.

    Time O(n·m·d), memory O(n·m).

    References
    ----------
    .. [1] M. Guo, Y. Zhang, T. Liu, "Gaussian Transformer: A Lightweight Approach for Natural
       Language Inference", AAAI 2019, 33(01):6489-6496, doi:10.1609/aaai.v33i01.33016489
       (Gaussian self-attention).
    .. [2] T. Lin, Y. Wang, X. Liu, X. Qiu, "A Survey of Transformers", arXiv:2106.04554v2, §4.5.1.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 6, 4))
    >>> out, A = gaussian_transformer_attention(q, k, v, params=GaussianTransformerParams(0.5, -0.2),
    ...                                         return_weights=True)
    >>> out.shape, bool(np.allclose(A.sum(axis=-1), 1.0))
    ((6, 4), True)
    >>> flat = gaussian_transformer_attention(q, k, v, params=GaussianTransformerParams(0.0, 0.0))
    >>> bool(np.allclose(flat, scaled_dot_product_attention(q, k, v), rtol=1e-12, atol=1e-12))
    True
    """
    q, k, v, batch = checked_qkv(q, k, v)
    alignment = causal_alignment(causal)
    mask_diagonal = check_bool("mask_diagonal", mask_diagonal)
    return_weights = check_bool("return_weights", return_weights)
    rng = optional_rng(rng)
    n, m = q.shape[-2], k.shape[-2]
    if n != m and alignment != "bottom-right":
        raise ValueError(f"gaussian_transformer is self-attention over one sequence: q has n={n} queries but k has "
                         f"m={m} keys (causal='bottom-right' takes the last n of m positions)")
    scale = default_scale(q.shape[-1]) if scale is None else check_scale(scale)
    params = given_or_drawn("gaussian_transformer", "params", params, rng, init_gaussian_transformer, what="w and b")
    if not isinstance(params, GaussianTransformerParams):
        raise TypeError(f"params must be a GaussianTransformerParams (init_gaussian_transformer), got "
                        f"{type(params).__name__}")
    G = gaussian_transformer_prior(params, n, m, causal=causal)    # (..., n, m)
    batch = broadcast_batch({"q, k, v": batch, "params (w, b)": G.shape[:-2]})
    if return_weights:
        check_fits("the weights (return_weights=True)", (*batch, n, m))
    rows = np.arange(n) + (m - n if alignment == "bottom-right" else 0)
    seen = np.ones((n, m), dtype=bool)                             # (n, m)  the pairs that carry weight
    if alignment is not None:
        seen &= np.arange(m) <= rows[:, None]
    if mask_diagonal:
        seen &= np.arange(m) != rows[:, None]
    bias = np.where(seen, G, -np.inf) if mask_diagonal else G      # −inf masks by selection
    result = scaled_dot_product_attention(q, k, v, mask=bias, causal=alignment or False, scale=scale,
                                          method="equation", return_weights=return_weights)
    if return_weights:
        note_allowed(lambda: None if seen.all() else np.broadcast_to(seen, result[1].shape))
    return result


RECORD = Mechanism.of(
    gaussian_transformer_attention,
    id="gaussian_transformer", title="Gaussian Transformer (Gaussian self-attention)", family="prior",
    section="4.5.1", paper=GUO,
    equation=r"\operatorname{softmax}\!\Big(\frac{QK^\top}{\sqrt{d_k}} - \big|w (i - j)^2 + b\big|\Big) V,"
             r"\quad w \ge 0,\ b \le 0",
    time="O(n·m·d)", memory="O(n·m)", kind="attention", causal=True, position_dependent=True, cross=False,
    examples=({"mask_diagonal": True}, {"params": GaussianTransformerParams(2.0, -3.0), "scale": 0.5}),
    figure="refattn.figures.gaussian_transformer:gaussian_transformer",
    exact_options={"params": GaussianTransformerParams(0.0, 0.0)}, exact_limit="w = 0, b = 0 (G = 0)",
    draws=("params",),
)
