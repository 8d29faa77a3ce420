r"""Cross-covariance attention, XCA, of XCiT (El-Nouby et al., 2021, arXiv:2106.09681, §3.1, Eq. 2).

Attention across channels instead of tokens. Each channel of q and k is L2-normalised along the N
tokens, and the d × d cross-covariance of the normalised channels, scaled by a learned per-head
temperature, is turned into weights by a softmax over the key channels:

    Q̂[:, i] = Q[:, i] / max(‖Q[:, i]‖₂, ε),   K̂[:, j] = K[:, j] / max(‖K[:, j]‖₂, ε)      norms over the tokens
    A = softmax_j(τ · Q̂ᵀK̂)                 (d, d)   A_ij = softmax over j of τ Σ_t Q̂_ti K̂_tj
    out = V Aᵀ                              (N, d)   out_ti = Σ_j A_ij V_tj

Which side is transposed, and how τ enters, follow the official code (facebookresearch/xcit, ``xcit.py``,
class ``XCA``): q, k, v are transposed to (h, d, N), ``F.normalize(·, dim=-1)`` normalises along the tokens
with ε = 1e-12, ``attn = (q @ k.transpose(-2, -1)) * self.temperature`` is Q̂ᵀK̂ (rows: query channels,
columns: key channels), the softmax runs over its last axis (the key channels) and ``attn @ v`` mixes the
value channels. The paper writes the same map as V·softmax(K̂ᵀQ̂/τ) (its transpose, normalised over the
key channels) with τ dividing; the code multiplies by ``temperature``, a parameter of shape (h, 1, 1)
initialised to 1, so the paper's τ is 1/temperature. Here ``temperature`` multiplies, as in the code.

The map A is d × d whatever N: the cost is O(N·d²) time and O(d²) memory, linear in the tokens. No
token is mixed with another by A: out = V Aᵀ mixes each token's channels. The tokens meet only through
the sums over t that build Q̂ᵀK̂ (token t of q is paired with token t of k, so q, k and v have the same
number of tokens, and the value width must be the key width d). Permuting the tokens of q, k and v
together permutes the output the same way; permuting the queries alone changes Q̂ᵀK̂.

**What ``weights`` holds.** The uniform ``apply`` returns A, the (..., d, d) channel map (rows: output
channels, columns: value channels, each row summing to 1), with out = v @ Aᵀ; its record says so
(``mixing="channels"``). There is no n × m token-mixing matrix M with out = M v in general.

There is no causal form: the norms and Q̂ᵀK̂ sum over every token.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.checks import as_float, check_bool, checked_qkv
from ..common.ints import check_positive_int
from ..core.softmax import softmax
from ..draws import note_draw
from ..mechanism import Mechanism

__all__ = ["XCIT_EPS", "XcitParams", "cross_covariance_attention", "init_xcit", "normalize_tokens"]

EL_NOUBY = ('A. El-Nouby, H. Touvron, M. Caron, P. Bojanowski, M. Douze, A. Joulin, I. Laptev, N. Neverova, '
            'G. Synnaeve, J. Verbeek, H. Jégou, 2021, "XCiT: Cross-Covariance Image Transformers", NeurIPS 2021, '
            'arXiv:2106.09681')
#: ``torch.nn.functional.normalize``'s default ε, which the official XCA uses: x / max(‖x‖₂, ε).
XCIT_EPS = 1e-12


@dataclass(frozen=True, eq=False)
class XcitParams:
    """The learned temperature of cross-covariance attention, one per head.

    Attributes
    ----------
    temperature : () or (h,) ndarray
        Finite and > 0; multiplies Q̂ᵀK̂ (the paper's 1/τ). With (h,) temperatures the heads are the axis −3
        of q, k and v.
    """

    temperature: NDArray

    def __post_init__(self) -> None:
        t = as_float("temperature", self.temperature)
        if t.ndim > 1:
            raise ValueError(f"temperature must be a number or one per head (h,), got shape {t.shape}")
        if not np.all(np.isfinite(t) & (t > 0)):                   # NaN fails too
            raise ValueError(f"temperature must be finite and > 0, got {t}")
        object.__setattr__(self, "temperature", t)


def init_xcit(num_heads: int | None = None) -> XcitParams:
    """The official initialisation: every head's temperature is 1 (``torch.ones(num_heads, 1, 1)``).

    Parameters
    ----------
    num_heads : int, optional
        h. Default: one head (a scalar temperature).

    Returns
    -------
    XcitParams

    Notes
    -----
    The initialisation draws nothing (no ``rng``); the temperature is learned from there (the official
    code excludes it from weight decay).

    Examples
    --------
    >>> init_xcit(3).temperature
    array([1., 1., 1.])
    """
    shape = () if num_heads is None else (check_positive_int("num_heads", num_heads),)
    return XcitParams(np.ones(shape))


def normalize_tokens(x: ArrayLike, eps: float = XCIT_EPS) -> NDArray:
    r"""Each channel divided by its L2 norm over the tokens: :math:`x_{:, i} / \max(\lVert x_{:, i}\rVert_2, ε)`.

    Parameters
    ----------
    x : (..., N, d) array_like
        Tokens along axis −2, channels along axis −1.
    eps : float, default 1e-12
        Floor of the norm (``torch.nn.functional.normalize``'s): a zero channel stays zero.

    Returns
    -------
    (..., N, d) ndarray

    Examples
    --------
    >>> normalize_tokens([[3.0, 0.0], [4.0, 0.0]])
    array([[0.6, 0. ],
           [0.8, 0. ]])
    """
    x = as_float("x", x, min_ndim=2)
    norm = np.sqrt(np.sum(x * x, axis=-2, keepdims=True))          # (..., 1, d)  ‖x[:, i]‖₂ over the tokens
    return x / np.maximum(norm, eps)


def _check_eps(eps) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float, np.integer, np.floating)):
        raise TypeError(f"eps must be a real number, got {type(eps).__name__}")
    if not (np.isfinite(eps) and eps > 0):
        raise ValueError(f"eps must be finite and > 0, got {eps!r}")
    return float(eps)


def _xca(q, k, v, params, eps) -> tuple[NDArray, NDArray]:
    """Checked cross-covariance attention: (out, the (..., d, d) channel map)."""
    q, k, v, _ = checked_qkv(q, k, v)
    if q.shape[-2] != k.shape[-2]:
        raise ValueError(f"cross-covariance attention pairs token t of q with token t of k: q and k need the same "
                         f"number of tokens, got q shape {q.shape} and k shape {k.shape}")
    if v.shape[-1] != k.shape[-1]:
        raise ValueError(f"cross-covariance attention mixes the value channels by a d_k × d_k map: v needs d_v = "
                         f"d_k, got d_v={v.shape[-1]} and d_k={k.shape[-1]} (v shape {v.shape}, k shape {k.shape})")
    eps = _check_eps(eps)
    if params is None:
        params = init_xcit()                                       # τ = 1: not random, but the registry returns it
    note_draw("params", params)
    if not isinstance(params, XcitParams):
        raise TypeError(f"params must be an XcitParams (init_xcit), got {type(params).__name__}")
    t = params.temperature
    if t.ndim == 1 and q.ndim < 3:
        raise ValueError(f"params has {t.size} heads but q has no head axis (shape {q.shape}; heads are axis -3)")
    if t.ndim == 1 and q.shape[-3] not in (1, t.size):
        raise ValueError(f"params has {t.size} heads but q has {q.shape[-3]} (shape {q.shape}; heads are axis -3)")
    with np.errstate(invalid="ignore", over="ignore"):             # NaN/Inf inputs: IEEE, in every row they reach
        q_hat, k_hat = normalize_tokens(q, eps), normalize_tokens(k, eps)     # (..., N, d)
        scores = np.swapaxes(q_hat, -1, -2) @ k_hat                           # (..., d, d)  Q̂ᵀK̂
        A = softmax(scores * t[..., None, None], axis=-1)                     # (..., d, d)  softmax over key channels
        out = v @ np.swapaxes(A, -1, -2)                                      # (..., N, d)  V Aᵀ
    return out, A


def cross_covariance_attention(q: ArrayLike, k: ArrayLike, v: ArrayLike, *, params: XcitParams | None = None,
                               eps: float = XCIT_EPS,
                               return_weights: bool = False) -> NDArray | tuple[NDArray, NDArray]:
    r"""Cross-covariance attention: a softmax over channels of the token-normalised cross-covariance.

    .. math::

        A = \operatorname{softmax}_j\big(\tau\, \hat Q^\top \hat K\big) \in \mathbb{R}^{d \times d}, \qquad
        \mathrm{out} = V A^\top, \qquad
        \hat Q_{:, i} = \frac{Q_{:, i}}{\max(\lVert Q_{:, i}\rVert_2, \varepsilon)}

    Parameters
    ----------
    q : (..., N, d) array_like
        Queries (with h heads: (..., h, N, d)).
    k : (..., N, d) array_like
        Keys, as many tokens as q.
    v : (..., N, d) array_like
        Values, as wide as the keys.
    params : XcitParams, optional
        The temperature τ (one, or one per head); default :func:`init_xcit`, τ = 1.
    eps : float, default 1e-12
        Floor of the channel norms.
    return_weights : bool, default False
        Also return the channel map A.

    Returns
    -------
    out : (..., N, d) ndarray
    weights : (..., d, d) ndarray
        Only if ``return_weights``: A, rows = output channels, columns = value channels, rows summing to 1;
        out = v @ Aᵀ.

    Notes
    -----
    A is d × d whatever N: O(N·d²) time, O(d²) memory. There is no causal form (the norms and Q̂ᵀK̂ sum
    over all tokens). The official code's temperature multiplies (the paper's τ divides); see the module.

    References
    ----------
    .. [1] A. El-Nouby et al., "XCiT: Cross-Covariance Image Transformers", NeurIPS 2021, arXiv:2106.09681,
       §3.1, Eq. (2); official code github.com/facebookresearch/xcit, ``xcit.py``, class ``XCA``.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 2, 100, 4))               # 2 heads, N = 100 tokens, d = 4
    >>> out, A = cross_covariance_attention(q, k, v, params=XcitParams([1.0, 2.0]), return_weights=True)
    >>> out.shape, A.shape                                          # A is d × d, not N × N
    ((2, 100, 4), (2, 4, 4))
    >>> bool(np.allclose(A.sum(axis=-1), 1.0, rtol=1e-12, atol=1e-12))
    True
    """
    return_weights = check_bool("return_weights", return_weights)
    out, A = _xca(q, k, v, params, eps)
    return (out, A) if return_weights else out


RECORD = Mechanism.of(
    cross_covariance_attention,
    id="xcit", title="Cross-covariance attention (XCiT)", family="beyond",
    section="after the survey (attention across channels)", paper=EL_NOUBY,
    equation=r"V\,\operatorname{softmax}_j\!\big(\tau\,\hat Q^\top \hat K\big)^{\!\top},\quad "
             r"\hat Q_{:,i} = Q_{:,i}/\lVert Q_{:,i}\rVert_2",
    time="O(N·d²)", memory="O(d²)", causal=False,
    cross=False, position_dependent=True,   # q's token t pairs with k's token t: no query permutation
    mixing="channels", examples=({"params": XcitParams(4.0)}, {"eps": 1e-3}),
    figure="refattn.figures.xcit:xcit",
    exact_options=None,
    exact_limit="none: A mixes channels (d × d), not tokens; no setting is softmax attention over tokens",
    draws=("params",),
)
