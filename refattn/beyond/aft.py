r"""Attention Free Transformer, AFT (Zhai et al., 2021, arXiv:2105.14103v2, §3.1-§3.2).

No query-key dot product: keys and learned position biases weigh the values, channel by channel, and the
query gates the result elementwise:

    Y_t = σ(Q_t) ⊙ Σ_t′ exp(K_t′ + w_tt′) ⊙ V_t′ / Σ_t′ exp(K_t′ + w_tt′)          AFT-full (§3.1)
    w_tt′ = u_tᵀ u′_t′,   u, u′ ∈ R^{T×d′}                                          its factorised w (§3.2)
    AFT-local:  w_tt′ = u_tᵀ u′_t′ if |t − t′| < s, else 0                           (§3.2)
    AFT-simple: s = 0, no position bias:  Y_t = σ(Q_t) ⊙ Σ_t′ (softmax(K) ⊙ V)_t′    (§3.2; softmax over t′)
    AFT-conv:   per head i (d/h channels), a filter w^i of size s shared by the head's channels:  (§3.2)
        Y^i_t = σ(Q^i_t) ⊙ [conv(e^{K^i} ⊙ V^i, e^{ŵ^i} − 1) + Σ_t′ e^{K^i_t′} ⊙ V^i_t′]
                         / [conv(e^{K^i}, e^{ŵ^i} − 1) + Σ_t′ e^{K^i_t′}]
        ŵ^i = γ_i (w^i − mean(w^i)) / std(w^i) + β_i,   γ, β ∈ R^h initialised to 0    (its re-parameterisation)

The four are one equation with four position biases. Outside AFT-local's window the bias is 0, not −∞: every
key is still seen ("global connectivity"), only without a learned bias. AFT-conv is AFT-local with a bias that
depends on the offset t′ − t alone, per head: the convolution with e^{ŵ} − 1 adds the filter's part to the
global sums, e^{K+ŵ} = e^K + (e^{ŵ} − 1) e^K on the filter's support.

Implicit attention. Per channel c, Y_tc = Σ_t′ A^c_tt′ V_t′c with A^c_tt′ = σ(Q_tc) exp(K_t′c + w_tt′) /
Σ_t″ exp(K_t″c + w_tt″) (the paper's rearranged form: "as many heads as feature dimensions"). So AFT has no
single n × m matrix: ``return_weights`` gives the (..., d, n, m) stack A^c, one matrix per channel, σ(Q)
included (rows sum to σ(Q_tc) < 1, not 1), and ``out[..., t, c] = (A[..., c, :, :] @ v[..., :, c])[t]``.
AFT reads q only through the gate σ(Q), k only through the weights e^K, and v as the values; K and V meet
elementwise, so v has k's width d.

Positions: query t sits at position p_t = t (bottom-right: t + m − n), key t′ at t′; u is indexed by p_t,
u′ by t′. Causal (the paper's autoregressive models, CIFAR-10 pixels and enwik8): the sums run over t′ ≤ p_t,
by selection. AFT-conv's filter is a cross-correlation, as a deep-learning conv: tap r weighs the key at
offset t′ − p_t = r − ⌊s/2⌋ (s odd); on an image of width W (``image_width``, tokens in row-major order) the
filter is s × s over the row and column offsets, as the paper's conv2d.

Numerics: the exponents are max-shifted per row and channel (the maximum over t′ of K_t′c + w_tt′), so no
exp overflows; the paper's e^{w} @ (e^K ⊙ V) matrix product is the same sum without that shift.

Sources of the defaults: the paper gives the equations, the factorisation (d′ "e.g. 128"), and γ = β = 0 at
initialisation (so AFT-conv starts as AFT-simple). It gives no initialisation of u, u′ or of the raw filters
(AFT has no official code): u, u′ ~ N(0, 0.01²) here (a small w, so AFT-full starts near AFT-simple; the
value of the comvex implementation), raw filters ~ N(0, 1) (any non-constant filter: γ = 0 ignores it).
std(w^i) is the population standard deviation (the paper does not say which).

Forms: ``method="equation"`` is the parallel form over the (..., n, m, d) logits, taken a block of query rows
at a time (32 MiB of logits) unless the per-channel weights are asked for; ``method="scan"`` (causal
only) is :mod:`refattn.kernels.aft_scan`, the running sums of the keys outside the bias band plus the band's
keys per query: O(n·d) for AFT-simple, O(n·s·d) for AFT-local, O(n²·d) for AFT-full, O(d) state.

Functions: one per kind, each its equation over the two forms (:func:`aft_full`, :func:`aft_local`,
:func:`aft_simple`, :func:`aft_conv`), and :func:`aft_attention` (``kind=``), the registry's door, which calls
them. Their checks are in one place at the end of the module (``_checked``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import expit

from ..common.budget import check_fits
from ..common.checks import as_float, as_rng, causal_alignment, check_bool, check_choice, checked_qkv
from ..common.ints import check_non_negative_int, check_positive_int
from ..deprecation import renamed
from ..draws import given_or_drawn, note_draw, optional_rng
from ..kernels import kernel_rows
from ..mechanism import Mechanism

__all__ = ["AFT_VARIANTS", "AFTConvFilter", "AFTPositionBias", "aft_attention", "aft_conv", "aft_full", "aft_local",
           "aft_position_bias", "aft_simple", "init_aft_conv_filter", "init_aft_position_bias"]

ZHAI = ('S. Zhai, W. Talbott, N. Srivastava, C. Huang, H. Goh, R. Zhang, J. Susskind, 2021, "An Attention Free '
        'Transformer", arXiv:2105.14103')
#: AFT-full, AFT-local, AFT-simple, AFT-conv (§3.2).
AFT_VARIANTS = ("full", "local", "simple", "conv")
METHODS = ("equation", "scan")
BIAS_DIM = 128                                                     # d′, "e.g., 128" (§3.2)
BIAS_STD = 0.01                                                    # u, u′ ~ N(0, 0.01²): see the module docstring
#: Bytes of one (…, rows, m, d) block of the equation path's logits: without weights, the query rows go through
#: the parallel form in blocks this size (each row's sums are independent of the others).
BLOCK_BYTES = 32 * 2**20


# --- parameters ------------------------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class AFTPositionBias:
    r"""AFT-full's and AFT-local's factorised position biases, :math:`w_{tt'} = u_t^\top u'_{t'}` (§3.2).

    Attributes
    ----------
    u : (ℓ, d′) ndarray
        One row per query position.
    u_prime : (ℓ, d′) ndarray
        One row per key position.
    """

    u: NDArray
    u_prime: NDArray

    def __post_init__(self) -> None:
        u, u_prime = as_float("params.u", self.u), as_float("params.u_prime", self.u_prime)
        if u.ndim != 2 or u.shape != u_prime.shape:
            raise ValueError(f"params.u and params.u_prime must both have shape (ℓ, d′), got {u.shape} and "
                             f"{u_prime.shape}")
        if not (np.isfinite(u).all() and np.isfinite(u_prime).all()):
            raise ValueError(f"params.u and params.u_prime must be finite (shape {u.shape})")
        object.__setattr__(self, "u", u)
        object.__setattr__(self, "u_prime", u_prime)

    @property
    def max_length(self) -> int:
        """ℓ, the number of positions covered."""
        return self.u.shape[0]


@dataclass(frozen=True, eq=False)
class AFTConvFilter:
    r"""AFT-conv's per-head filters and their re-parameterisation :math:`\hat w^i = \gamma_i (w^i - \bar w^i) /
    \operatorname{std}(w^i) + \beta_i` (§3.2).

    Attributes
    ----------
    w : (h, s) or (h, s, s) ndarray
        The raw filters, one per head, s odd >= 3: 1-D over a sequence, s × s over an image.
    gamma, beta : (h,) ndarray
        Gain and bias of each head's standardised filter (0 at initialisation).
    """

    w: NDArray
    gamma: NDArray
    beta: NDArray

    def __post_init__(self) -> None:
        w = as_float("params.w", self.w)
        gamma, beta = as_float("params.gamma", self.gamma), as_float("params.beta", self.beta)
        s = w.shape[1] if w.ndim in (2, 3) else 0
        if w.ndim not in (2, 3) or w.shape[0] < 1 or s < 3 or s % 2 == 0 or (w.ndim == 3 and w.shape[2] != s):
            raise ValueError(f"params.w must have shape (h, s) or (h, s, s) with h >= 1 and s odd >= 3, got {w.shape}")
        if gamma.shape != (w.shape[0],) or beta.shape != (w.shape[0],):
            raise ValueError(f"params.gamma and params.beta must have shape ({w.shape[0]},) (one per head of "
                             f"params.w {w.shape}), got {gamma.shape} and {beta.shape}")
        if not (np.isfinite(w).all() and np.isfinite(gamma).all() and np.isfinite(beta).all()):
            raise ValueError("params.w, params.gamma and params.beta must be finite")
        spread = w.reshape(w.shape[0], -1).std(axis=-1)
        if (spread == 0).any():
            raise ValueError(f"params.w: the filters of heads {np.flatnonzero(spread == 0).tolist()} are constant, "
                             f"so (w − mean)/std is undefined")
        for name, x in (("w", w), ("gamma", gamma), ("beta", beta)):
            object.__setattr__(self, name, x)

    @property
    def num_heads(self) -> int:
        """h."""
        return self.w.shape[0]

    @property
    def kernel_size(self) -> int:
        """s."""
        return self.w.shape[1]

    def normalized(self) -> NDArray:
        r"""The filters in use, :math:`\hat w^i = \gamma_i (w^i - \operatorname{mean} w^i) / \operatorname{std} w^i
        + \beta_i`, shaped as ``w``."""
        axes = tuple(range(1, self.w.ndim))
        standard = (self.w - self.w.mean(axis=axes, keepdims=True)) / self.w.std(axis=axes, keepdims=True)
        return self.gamma.reshape(-1, *[1] * len(axes)) * standard + self.beta.reshape(-1, *[1] * len(axes))


def init_aft_position_bias(rng: np.random.Generator | int, max_length: int, *, bias_dim: int = BIAS_DIM,
                           std: float = BIAS_STD) -> AFTPositionBias:
    r"""Draw :math:`u, u' \sim \mathcal N(0, \mathrm{std}^2)` of shape (ℓ, d′).

    Parameters
    ----------
    rng : numpy.random.Generator or int
    max_length : int
        ℓ, the positions covered (>= 1).
    bias_dim : int, default 128
        d′ (the paper's "e.g., 128").
    std : float, default 0.01
        Standard deviation (the paper gives none; see the module docstring).

    Returns
    -------
    AFTPositionBias

    Examples
    --------
    >>> init_aft_position_bias(0, 6, bias_dim=3).u.shape
    (6, 3)
    """
    rng = as_rng(rng)
    length, dim = check_positive_int("max_length", max_length), check_positive_int("bias_dim", bias_dim)
    if isinstance(std, bool) or not isinstance(std, (int, float, np.integer, np.floating)) or not std >= 0 \
            or not np.isfinite(std):
        raise ValueError(f"std must be a finite number >= 0, got {std!r}")
    return AFTPositionBias(std * rng.standard_normal((length, dim)), std * rng.standard_normal((length, dim)))


def init_aft_conv_filter(rng: np.random.Generator | int, num_heads: int, kernel_size: int, *,
                         image: bool = False) -> AFTConvFilter:
    r"""Draw AFT-conv's raw filters ~ N(0, 1) with γ = β = 0 (the paper's initialisation of γ and β).

    Parameters
    ----------
    rng : numpy.random.Generator or int
    num_heads : int
        h.
    kernel_size : int
        s, odd >= 3.
    image : bool, default False
        s × s filters (over an image) instead of length-s ones.

    Returns
    -------
    AFTConvFilter

    Examples
    --------
    >>> f = init_aft_conv_filter(0, 2, 3)
    >>> f.w.shape, bool((f.normalized() == 0).all())             # γ = β = 0: ŵ = 0, AFT-conv = AFT-simple
    ((2, 3), True)
    """
    rng = as_rng(rng)
    h, s = check_positive_int("num_heads", num_heads), check_positive_int("kernel_size", kernel_size)
    if s < 3 or s % 2 == 0:
        raise ValueError(f"kernel_size must be odd and >= 3 (a centred filter with a spread), got {s}")
    w = rng.standard_normal((h, s, s) if check_bool("image", image) else (h, s))
    return AFTConvFilter(w, np.zeros(h), np.zeros(h))


# --- the four kinds: one equation each, over the shared parallel form and scan --------------------------------------

def aft_full(q: ArrayLike, k: ArrayLike, v: ArrayLike, *, params: AFTPositionBias | None = None,
             rng: np.random.Generator | int | None = None, max_length: int | None = None,
             bias_dim: int | None = None, causal: bool | str = False, method: str = "equation",
             return_weights: bool = False) -> NDArray | tuple[NDArray, NDArray]:
    r"""AFT-full: a learned, factorised bias for every pair of positions (§3.1-§3.2).

    .. math::

        Y_t = \sigma(Q_t) \odot \frac{\sum_{t'} \exp(K_{t'} + w_{tt'}) \odot V_{t'}}{\sum_{t'} \exp(K_{t'} + w_{tt'})},
        \qquad w_{tt'} = u_t^\top u'_{t'}

    Parameters
    ----------
    q : (..., n, d) array_like
        Queries Q: read only through the gate σ(Q).
    k : (..., m, d) array_like
        Keys K.
    v : (..., m, d) array_like
        Values V, of the keys' width d (K and V meet elementwise).
    params : AFTPositionBias, optional
        u, u′ (:func:`init_aft_position_bias`); drawn from ``rng`` when absent.
    rng : numpy.random.Generator or int, optional
        Source of the drawn u, u′.
    max_length, bias_dim : int, optional
        ℓ and d′ of drawn u, u′; default the positions used (max(n + shift, m)) and 128.
    causal : {False, True, "top-left", "bottom-right"}, default False
        Sum over t′ <= p_t only, by selection; a query that sees no key gets 0.
    method : {"equation", "scan"}, default "equation"
        The parallel form, or the causal scan (causal only; O(n²·d) here, every key being in the bias band).
    return_weights : bool, default False
        Also return the per-channel implicit attention.

    Returns
    -------
    out : (..., n, d) ndarray
    weights : (..., d, n, m) ndarray
        Only if ``return_weights``: :math:`A^c_{tt'} = \sigma(Q_{tc}) e^{K_{t'c} + w_{tt'}} / \sum_{t''}
        e^{K_{t''c} + w_{tt''}}`, so that ``out[..., :, c] = A[..., c, :, :] @ v[..., :, c]``.

    References
    ----------
    .. [1] S. Zhai et al., "An Attention Free Transformer", arXiv:2105.14103v2, 2021, §3.1 (AFT) and §3.2 (the
       factorised w).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 5, 4))
    >>> params = init_aft_position_bias(1, 5, bias_dim=3)
    >>> w = params.u @ params.u_prime.T                            # (5, 5)  w_tt′ = u_tᵀ u′_t′
    >>> expected = 1 / (1 + np.exp(-q)) * (np.exp(w) @ (np.exp(k) * v)) / (np.exp(w) @ np.exp(k))   # §3.1's form
    >>> bool(np.allclose(aft_full(q, k, v, params=params), expected))
    True
    """
    q, k, v, call = _checked("full", q, k, v, params=params, rng=rng, max_length=max_length, bias_dim=bias_dim,
                             causal=causal, method=method, return_weights=return_weights)
    return _aft(q, k, v, call, partial(_full_bias, call.params),
                band=int(call.p.max(initial=-1)) + 1)              # the scan's band: every key up to p_t


def aft_local(q: ArrayLike, k: ArrayLike, v: ArrayLike, *, window: int, params: AFTPositionBias | None = None,
              rng: np.random.Generator | int | None = None, max_length: int | None = None,
              bias_dim: int | None = None, causal: bool | str = False, method: str = "equation",
              return_weights: bool = False) -> NDArray | tuple[NDArray, NDArray]:
    r"""AFT-local: AFT-full's bias inside a window, none outside it (§3.2).

    .. math::

        Y_t = \sigma(Q_t) \odot \frac{\sum_{t'} \exp(K_{t'} + w_{tt'}) \odot V_{t'}}{\sum_{t'} \exp(K_{t'} + w_{tt'})},
        \qquad w_{tt'} = \begin{cases} u_t^\top u'_{t'} & |t - t'| < s \\ 0 & \text{otherwise} \end{cases}

    Outside the window the bias is 0, not −∞: every key still counts ("global connectivity").

    Parameters
    ----------
    q : (..., n, d) array_like
        Queries Q: read only through the gate σ(Q).
    k : (..., m, d) array_like
        Keys K.
    v : (..., m, d) array_like
        Values V, of the keys' width d.
    window : int
        s >= 0, a half-width: the bias is learned for |t − t′| < s (2s − 1 keys; s of them under ``causal``).
        s = 0 is AFT-simple, s beyond every |t − t′| AFT-full.
    params : AFTPositionBias, optional
        u, u′ (:func:`init_aft_position_bias`); drawn from ``rng`` when absent.
    rng : numpy.random.Generator or int, optional
        Source of the drawn u, u′.
    max_length, bias_dim : int, optional
        ℓ and d′ of drawn u, u′; default the positions used (max(n + shift, m)) and 128.
    causal : {False, True, "top-left", "bottom-right"}, default False
        Sum over t′ <= p_t only, by selection; a query that sees no key gets 0.
    method : {"equation", "scan"}, default "equation"
        The parallel form, or the causal scan (causal only; O(n·s·d)).
    return_weights : bool, default False
        Also return the per-channel implicit attention.

    Returns
    -------
    out : (..., n, d) ndarray
    weights : (..., d, n, m) ndarray
        Only if ``return_weights``: one matrix per channel, as :func:`aft_full`'s.

    References
    ----------
    .. [1] S. Zhai et al., "An Attention Free Transformer", arXiv:2105.14103v2, 2021, §3.2 (AFT-local).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 6, 4))
    >>> params = init_aft_position_bias(1, 6, std=1.0)
    >>> bool(np.allclose(aft_local(q, k, v, window=0, params=params), aft_simple(q, k, v)))
    True
    >>> bool(np.allclose(aft_local(q, k, v, window=6, params=params), aft_full(q, k, v, params=params)))
    True
    """
    q, k, v, call = _checked("local", q, k, v, params=params, rng=rng, window=window, max_length=max_length,
                             bias_dim=bias_dim, causal=causal, method=method, return_weights=return_weights)
    return _aft(q, k, v, call, partial(_local_bias, call.params, call.window),
                band=call.window)                                  # the scan's band: the s keys p_t − s < t′ <= p_t


def aft_simple(q: ArrayLike, k: ArrayLike, v: ArrayLike, *, causal: bool | str = False, method: str = "equation",
               return_weights: bool = False) -> NDArray | tuple[NDArray, NDArray]:
    r"""AFT-simple: no position bias, one softmax of the keys over the positions (§3.2).

    .. math::

        Y_t = \sigma(Q_t) \odot \sum_{t'} \operatorname{softmax}(K)_{t'} \odot V_{t'},
        \qquad w_{tt'} = 0

    the softmax taken over t′ per channel (over t′ <= p_t under ``causal``).

    Parameters
    ----------
    q : (..., n, d) array_like
        Queries Q: read only through the gate σ(Q).
    k : (..., m, d) array_like
        Keys K.
    v : (..., m, d) array_like
        Values V, of the keys' width d.
    causal : {False, True, "top-left", "bottom-right"}, default False
        Sum over t′ <= p_t only, by selection; a query that sees no key gets 0.
    method : {"equation", "scan"}, default "equation"
        The parallel form, or the causal scan (causal only; O(n·d), the running sums).
    return_weights : bool, default False
        Also return the per-channel implicit attention.

    Returns
    -------
    out : (..., n, d) ndarray
    weights : (..., d, n, m) ndarray
        Only if ``return_weights``: one matrix per channel, as :func:`aft_full`'s.

    References
    ----------
    .. [1] S. Zhai et al., "An Attention Free Transformer", arXiv:2105.14103v2, 2021, §3.2 (AFT-simple).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 5, 4))
    >>> e = np.exp(k - k.max(axis=0))                              # softmax(K) over t′, per channel
    >>> bool(np.allclose(aft_simple(q, k, v), 1 / (1 + np.exp(-q)) * (e * v).sum(axis=0) / e.sum(axis=0)))
    True
    """
    q, k, v, call = _checked("simple", q, k, v, causal=causal, method=method, return_weights=return_weights)
    return _aft(q, k, v, call, _simple_bias, band=0)               # the scan's band: none, the running sums alone


def aft_conv(q: ArrayLike, k: ArrayLike, v: ArrayLike, *, params: AFTConvFilter | None = None,
             rng: np.random.Generator | int | None = None, kernel_size: int | None = None,
             num_heads: int | None = None, image_width: int | None = None, causal: bool | str = False,
             method: str = "equation", return_weights: bool = False) -> NDArray | tuple[NDArray, NDArray]:
    r"""AFT-conv: per head, a filter over the offsets t′ − t adds its part to AFT-simple's sums (§3.2).

    .. math::

        Y^i_t = \sigma(Q^i_t) \odot \frac{\operatorname{conv}(e^{K^i} \odot V^i, e^{\hat w^i} - 1)_t
        + \sum_{t'} e^{K^i_{t'}} \odot V^i_{t'}}{\operatorname{conv}(e^{K^i}, e^{\hat w^i} - 1)_t
        + \sum_{t'} e^{K^i_{t'}}},
        \qquad w_{tt'} = \hat w^i_{t' - t + \lfloor s/2 \rfloor}

    for the channels of head i, :math:`\hat w^i` the re-parameterised filter (:meth:`AFTConvFilter.normalized`):
    AFT-full's equation with a bias that depends on the offset alone, 0 off the filter's s taps.

    Parameters
    ----------
    q : (..., n, d) array_like
        Queries Q: read only through the gate σ(Q).
    k : (..., m, d) array_like
        Keys K.
    v : (..., m, d) array_like
        Values V, of the keys' width d.
    params : AFTConvFilter, optional
        The filters (:func:`init_aft_conv_filter`); drawn from ``rng`` when absent.
    rng : numpy.random.Generator or int, optional
        Source of the drawn filters.
    kernel_size, num_heads : int, optional
        s (odd >= 3) and h of drawn filters (h default 1; h divides d).
    image_width : int, optional
        Over an image of this width, tokens in row-major order: s × s filters over the row and column offsets
        (the paper's conv2d).
    causal : {False, True, "top-left", "bottom-right"}, default False
        Sum over t′ <= p_t only, by selection (the filter's past taps); a query that sees no key gets 0.
    method : {"equation", "scan"}, default "equation"
        The parallel form, or the causal scan (causal only; O(n·s·d), O(n·s·W·d) over an image).
    return_weights : bool, default False
        Also return the per-channel implicit attention.

    Returns
    -------
    out : (..., n, d) ndarray
    weights : (..., d, n, m) ndarray
        Only if ``return_weights``: one matrix per channel, as :func:`aft_full`'s.

    References
    ----------
    .. [1] S. Zhai et al., "An Attention Free Transformer", arXiv:2105.14103v2, 2021, §3.2 (AFT-conv and its
       re-parameterisation).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 5, 4))
    >>> out = aft_conv(q, k, v, rng=1, kernel_size=3, num_heads=2)   # γ = β = 0 at initialisation: AFT-simple
    >>> bool(np.allclose(out, aft_simple(q, k, v)))
    True
    """
    q, k, v, call = _checked("conv", q, k, v, params=params, rng=rng, kernel_size=kernel_size, num_heads=num_heads,
                             image_width=image_width, causal=causal, method=method, return_weights=return_weights)
    half, width = call.params.kernel_size // 2, call.image_width
    return _aft(q, k, v, call, partial(_conv_bias, call.params, width),
                band=half + 1 if width is None else half * width + half + 1)   # the scan's band: the past taps


# --- their position biases w: (H, n, ·) at query positions p (n, 1) and keys j (1, m) or (n, S), both >= 0 ------

def _simple_bias(p: NDArray, j: NDArray) -> NDArray:
    """AFT-simple: w = 0."""
    return np.zeros((1, *np.broadcast_shapes(p.shape, j.shape)))


def _full_bias(params: AFTPositionBias, p: NDArray, j: NDArray) -> NDArray:
    """AFT-full: w_tt′ = u_tᵀ u′_t′."""
    u = params.u[p[:, 0]]                                          # (n, d′)  u_t at query positions
    if j.shape[0] == 1:
        return (u @ params.u_prime[j[0]].T)[None]                  # (1, n, m)  w_tt′ = u_tᵀ u′_t′
    return np.einsum("nd,nsd->ns", u, params.u_prime[j])[None]     # (1, n, S)  the same, in a band


def _local_bias(params: AFTPositionBias, window: int, p: NDArray, j: NDArray) -> NDArray:
    """AFT-local: AFT-full's w_tt′ for |t − t′| < s, 0 outside (not masked)."""
    return np.where(np.abs(p - j) < window, _full_bias(params, p, j), 0.0)


def _conv_bias(params: AFTConvFilter, image_width: int | None, p: NDArray, j: NDArray) -> NDArray:
    """AFT-conv: head i's filter ŵ^i at the offset j − p (row and column offsets on an image), 0 off its taps."""
    w_hat, half = params.normalized(), params.kernel_size // 2
    if image_width is None:
        r = j - p + half                                           # tap r weighs key p + r − ⌊s/2⌋
        inside = (r >= 0) & (r < params.kernel_size)
        return np.where(inside, w_hat[:, np.clip(r, 0, params.kernel_size - 1)], 0.0)
    rows, cols = j // image_width - p // image_width, j % image_width - p % image_width
    inside = (np.abs(rows) <= half) & (np.abs(cols) <= half)
    rows, cols = np.clip(rows + half, 0, 2 * half), np.clip(cols + half, 0, 2 * half)
    return np.where(inside, w_hat[:, rows, cols], 0.0)


# --- the door ------------------------------------------------------------------------------------------------------

#: The function of each kind, and the options it takes besides q, k, v, causal, method and return_weights.
KINDS = {"full": aft_full, "local": aft_local, "simple": aft_simple, "conv": aft_conv}
KIND_OPTIONS = {"full": ("params", "rng", "max_length", "bias_dim"),
                "local": ("window", "params", "rng", "max_length", "bias_dim"),
                "simple": (),
                "conv": ("params", "rng", "kernel_size", "num_heads", "image_width")}


@renamed(variant="kind")
def aft_attention(q: ArrayLike, k: ArrayLike, v: ArrayLike, *, kind: str = "full", params=None,
                  rng: np.random.Generator | int | None = None, window: int | None = None,
                  kernel_size: int | None = None, num_heads: int | None = None, image_width: int | None = None,
                  max_length: int | None = None, bias_dim: int | None = None, causal: bool | str = False,
                  method: str = "equation", return_weights: bool = False) -> NDArray | tuple[NDArray, NDArray]:
    r"""The Attention Free Transformer: keys and position biases weigh the values per channel, the query gates.

    .. math::

        Y_t = \sigma(Q_t) \odot \frac{\sum_{t'} \exp(K_{t'} + w_{tt'}) \odot V_{t'}}{\sum_{t'} \exp(K_{t'} + w_{tt'})}

    with :math:`w` of the ``kind``: :func:`aft_full`, :func:`aft_local`, :func:`aft_simple` or :func:`aft_conv`
    (this function calls it with the options it takes; an option the kind has no use for is an error, except
    ``rng`` where the kind draws nothing).

    Parameters
    ----------
    q : (..., n, d) array_like
        Queries Q: read only through the gate σ(Q).
    k : (..., m, d) array_like
        Keys K.
    v : (..., m, d) array_like
        Values V, of the keys' width d (K and V meet elementwise).
    kind : {"full", "local", "simple", "conv"}, default "full"
        AFT-full, AFT-local, AFT-simple or AFT-conv.
    params : AFTPositionBias or AFTConvFilter, optional
        u, u′ (full, local; :func:`init_aft_position_bias`) or the filters (conv; :func:`init_aft_conv_filter`);
        drawn from ``rng`` when absent; none for "simple".
    rng : numpy.random.Generator or int, optional
        Source of the drawn params.
    window : int, optional
        s of AFT-local (required there), a half-width: the bias is learned for |t − t′| < s.
    kernel_size, num_heads : int, optional
        s (odd >= 3) and h of drawn AFT-conv filters (h default 1; h divides d).
    image_width : int, optional
        AFT-conv over an image of this width, tokens in row-major order: s × s filters (the paper's conv2d).
    max_length, bias_dim : int, optional
        ℓ and d′ of drawn u, u′; default the positions used (max(n + shift, m)) and 128.
    causal : {False, True, "top-left", "bottom-right"}, default False
        Sum over t′ <= p_t only, by selection; a query that sees no key gets 0.
    method : {"equation", "scan"}, default "equation"
        The parallel form, or the causal scan (:mod:`refattn.kernels.aft_scan`; causal only).
    return_weights : bool, default False
        Also return the per-channel implicit attention.

    Returns
    -------
    out : (..., n, d) ndarray
    weights : (..., d, n, m) ndarray
        Only if ``return_weights``: :math:`A^c_{tt'} = \sigma(Q_{tc}) e^{K_{t'c} + w_{tt'}} / \sum_{t''}
        e^{K_{t''c} + w_{tt''}}`, so that ``out[..., :, c] = A[..., c, :, :] @ v[..., :, c]``.

    Notes
    -----
    There is no exact limit equal to softmax attention: the weights come from the keys alone, per channel, and
    σ(Q) scales each row. AFT-local with s = 0 is AFT-simple, and with s > every |t − t′| is AFT-full; AFT-conv
    at its initialisation (γ = β = 0) is AFT-simple. Time O(n·m·d) (AFT-simple O((n + m)·d) by its closed
    form, which the scan is); memory O(n·m) for the position biases, the logits taking O(rows·m·d) in query
    blocks of at most 32 MiB (O(n·m·d) with ``return_weights``, the per-channel matrices).

    References
    ----------
    .. [1] S. Zhai et al., "An Attention Free Transformer", arXiv:2105.14103v2, 2021, §3.1 (AFT, its
       rearranged form as per-channel attention) and §3.2 (AFT-local, AFT-simple, AFT-conv, parameterisation).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 5, 4))
    >>> out = aft_attention(q, k, v, kind="simple")
    >>> e = np.exp(k - k.max(axis=0))                              # AFT-simple's closed form: σ(Q) ⊙ Σ softmax(K) ⊙ V
    >>> bool(np.allclose(out, 1 / (1 + np.exp(-q)) * (e * v).sum(axis=0) / e.sum(axis=0)))
    True
    >>> out, A = aft_attention(q, k, v, rng=1, causal=True, return_weights=True)
    >>> A.shape, bool(np.allclose(out, aft_attention(q, k, v, rng=1, causal=True, method="scan")))
    ((4, 5, 5), True)
    """
    options = {"window": window, "kernel_size": kernel_size, "num_heads": num_heads, "image_width": image_width,
               "bias_dim": bias_dim, "max_length": max_length, "params": params, "rng": rng}
    _check_kind(kind, **options)
    taken = {name: options[name] for name in KIND_OPTIONS[kind]}
    return KINDS[kind](q, k, v, causal=causal, method=method, return_weights=return_weights, **taken)


# --- the two forms -------------------------------------------------------------------------------------------------

def _aft(q: NDArray, k: NDArray, v: NDArray, call: _Call, bias, band: int) -> NDArray | tuple[NDArray, NDArray]:
    """Y_t = σ(Q_t) ⊙ Σ_t′ e^{K_t′ + w_tt′} V_t′ / Σ_t′ e^{K_t′ + w_tt′}, w = bias(p, j): by the parallel form, or
    by the causal scan over the ``band`` keys up to each query's position."""
    n, (m, d) = q.shape[-2], k.shape[-2:]
    if call.return_weights or call.method == "equation":
        if call.return_weights:
            check_fits("the AFT weights (…, d, n, m)", (*call.batch, d, n, m))
        w = bias(call.p[:, None], np.arange(m)[None, :])           # (H, n, m)
        visible = None if call.delta is None else np.arange(m)[None, :] <= np.arange(n)[:, None] + call.delta
        if call.return_weights:
            out, A = _parallel(q, k, v, w, visible, True)
        else:
            out = _parallel_blocks(q, k, v, w, visible, call.batch)
    if call.method == "scan":
        out = _scan(q, k, v, call, bias, band)
    return (out, A) if call.return_weights else out


def _parallel_blocks(q, k, v, w, visible, batch) -> NDArray:
    """The parallel form's output, query rows in blocks whose (…, rows, m, d) logits take at most BLOCK_BYTES."""
    n, (m, d) = q.shape[-2], k.shape[-2:]
    rows = max(1, BLOCK_BYTES // (8 * max(1, math.prod(batch) * m * d)))
    out = np.empty((*batch, n, d))
    for start in range(0, n, rows):
        stop = min(start + rows, n)
        out[..., start:stop, :] = _parallel(q[..., start:stop, :], k, v, w[:, start:stop],
                                            None if visible is None else visible[start:stop], False)[0]
    return out


def _parallel(q, k, v, w, visible, return_weights):
    """The parallel form over the (..., n, m, d) logits L = K_t′ + w_tt′, max-shifted per (t, c)."""
    H, n, m = w.shape
    d = k.shape[-1]
    w_c = np.repeat(w, d // H, axis=0) if d else np.zeros((0, n, m))   # (d, n, m)  channel c has its head's w
    L = k[..., None, :, :] + np.moveaxis(w_c, 0, -1)              # (..., n, m, d)  K_t′c + w_tt′
    seen = np.ones((n, 1, 1), dtype=bool) if visible is None else visible.any(axis=-1)[:, None, None]  # (n, 1, 1)
    if visible is not None:
        L = np.where(visible[:, :, None], L, -np.inf)              # masked by selection
    with np.errstate(invalid="ignore", over="ignore"):             # ∞ − ∞: IEEE NaN, as exp(L − max L) says
        top = np.where(seen, L.max(axis=-2, keepdims=True, initial=-np.inf), 0.0)   # (..., n, 1, d)  max_t′
        E = np.exp(L - top)                                        # (..., n, m, d)  e^{K + w − max}
        EV = E * v[..., None, :, :]                                # (..., n, m, d)
        if visible is not None:
            EV = np.where(visible[:, :, None], EV, 0.0)            # a masked value never enters the sum
        num, den = EV.sum(axis=-2), E.sum(axis=-2)                 # (..., n, d)
        gate = expit(q)                                            # (..., n, d)  σ(Q)
        average = np.where(seen[:, :, 0], num / np.where(seen[:, :, 0], den, 1.0), 0.0)   # no key seen: 0
        out = gate * average                                       # (..., n, d)  σ(Q) ⊙ Σ e^{K+w} V / Σ e^{K+w}
        A = None
        if return_weights:
            A = gate[..., :, None, :] * E / np.where(seen, den[..., :, None, :], 1.0)   # (..., n, m, d)
            A = np.moveaxis(np.where(seen, A, 0.0), -1, -3)         # (..., d, n, m)  one matrix per channel
    return out, A


def _scan(q, k, v, call: _Call, bias, band: int) -> NDArray:
    """The causal scan: the bias over the ``band`` S keys up to each query's position, and the kernel."""
    from ..kernels.aft_scan import aft_scan  # Numba loads on first use only

    n, (m, d) = q.shape[-2], k.shape[-2:]
    j = call.p[:, None] - band + 1 + np.arange(band)[None, :]      # (n, S)  the band's keys
    check_fits("the AFT bias band (h, n, S)", (call.heads, n, band))
    w = np.where(j >= 0, bias(call.p[:, None], np.maximum(j, 0)), 0.0)
    w = np.ascontiguousarray(w)                                    # (H, n, S)
    flat_k, flat_v = kernel_rows(k, call.batch, (m, d)), kernel_rows(v, call.batch, (m, d))
    out = np.empty((flat_k.shape[0], n, d))
    with np.errstate(invalid="ignore", over="ignore"):
        aft_scan(flat_k, flat_v, w, call.delta, out)
        return expit(q) * out.reshape(*call.batch, n, d)           # σ(Q) ⊙ the normalised sums


# --- the biases as matrices ----------------------------------------------------------------------------------------

@renamed(variant="kind", alignment="causal")
def aft_position_bias(kind: str, n: int, m: int | None = None, *, params=None, window: int | None = None,
                      image_width: int | None = None, causal: bool | str = False) -> NDArray:
    r"""The position biases :math:`w_{tt'}` of every head: (1, n, m) for AFT-full/local/simple, (h, n, m) for AFT-conv.

    Parameters
    ----------
    kind : {"full", "local", "simple", "conv"}
    n : int
        Number of queries.
    m : int, optional
        Number of keys; default n.
    params : AFTPositionBias or AFTConvFilter, optional
        The kind's parameters (none for "simple").
    window : int, optional
        s of AFT-local, a half-width: |t − t′| < s.
    image_width : int, optional
        AFT-conv over an image of this width (s × s filters).
    causal : {False, True, "top-left", "bottom-right"}, default False
        The alignment, as every ``causal`` argument spells it: query t at position t (False, True,
        "top-left"), or t + m − n ("bottom-right"); the biases mask nothing. (The old name
        ``alignment=`` is deprecated.)

    Returns
    -------
    w : (H, n, m) ndarray
        Entries of queries before position 0 (bottom-right, n > m) are those of position 0.

    Examples
    --------
    >>> f = AFTConvFilter(np.array([[0.0, 1.0, 2.0]]), gamma=np.ones(1), beta=np.zeros(1))
    >>> aft_position_bias("conv", 4, params=f)[0].round(3)       # ŵ = (w − 1)/std = (−1.225, 0, 1.225) on j − t
    array([[ 0.   ,  1.225,  0.   ,  0.   ],
           [-1.225,  0.   ,  1.225,  0.   ],
           [ 0.   , -1.225,  0.   ,  1.225],
           [ 0.   ,  0.   , -1.225,  0.   ]])
    """
    n = check_non_negative_int("n", n)
    m = n if m is None else check_non_negative_int("m", m)
    alignment = causal_alignment(causal)
    _check_kind(kind, window=window, image_width=image_width, params=params)
    window, image_width = _check_options(kind, params, window, None, None, image_width, None, None)
    if kind != "simple" and params is None:
        raise ValueError(f"kind={kind!r} needs params")
    p = _positions(n, m, alignment)
    _check_length(kind, params, p, m)
    check_fits("the position biases", (params.num_heads if kind == "conv" else 1, n, m))
    bias = {"simple": _simple_bias, "full": partial(_full_bias, params), "local": partial(_local_bias, params, window),
            "conv": partial(_conv_bias, params, image_width)}[kind]
    return bias(p[:, None], np.arange(m)[None, :])


# --- the checks ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Call:
    """One checked call of a kind: its options, its params (given or drawn) and where its queries sit."""

    method: str
    return_weights: bool
    batch: tuple[int, ...]                                         # the broadcast batch shape of q, k, v
    p: NDArray                                                     # (n,)  p_t, the query positions
    delta: int | None                                              # key t′ visible to query t iff t′ <= t + delta
    params: AFTPositionBias | AFTConvFilter | None
    heads: int                                                     # H, the biases' heads (h of AFT-conv, else 1)
    window: int | None
    image_width: int | None


def _check_kind(kind, **options) -> None:
    """``kind`` is one of the four and has a use for every option given (``rng`` may go unused)."""
    check_choice("kind", kind, AFT_VARIANTS)
    for name, value in options.items():
        if value is not None and name != "rng" and name not in KIND_OPTIONS[kind]:
            raise ValueError(f"{name} has no meaning for kind={kind!r} (got {value!r})")


def _check_options(kind, params, window, kernel_size, num_heads, image_width, bias_dim, max_length):
    """Check the kind's own options and given params; return (window, image_width)."""
    if kind == "local":
        if window is None:
            raise ValueError("kind='local' needs window, the s of |t − t′| < s (0 gives AFT-simple)")
        window = check_non_negative_int("window", window)
    if kind == "conv" and image_width is not None:
        image_width = check_positive_int("image_width", image_width)
    wanted = {"full": AFTPositionBias, "local": AFTPositionBias, "conv": AFTConvFilter}.get(kind)
    if params is not None and not isinstance(params, wanted):
        raise TypeError(f"params of kind={kind!r} must be a {wanted.__name__}, got {type(params).__name__}")
    if params is not None:
        if kind == "conv":
            if (kernel_size, num_heads) != (None, None):
                raise ValueError("kernel_size and num_heads are those of params: give them only to draw the filters")
            if (params.w.ndim == 3) != (image_width is not None):
                raise ValueError(f"params.w of shape {params.w.shape} is for "
                                 f"{'an image: give image_width' if params.w.ndim == 3 else 'a sequence'}"
                                 f"{'' if params.w.ndim == 3 else ', not image_width'}")
        elif (bias_dim, max_length) != (None, None):
            raise ValueError("bias_dim and max_length are those of params: give them only to draw u and u′")
    return window, image_width


def _checked(kind: str, q, k, v, *, causal, method, return_weights, params=None, rng=None, window=None,
             kernel_size=None, num_heads=None, image_width=None, max_length=None, bias_dim=None):
    """Every check of a call of ``kind``, then its params drawn where not given: (q, k, v, call)."""
    check_choice("method", method, METHODS)
    return_weights = check_bool("return_weights", return_weights)
    q, k, v, batch = checked_qkv(q, k, v)
    n, m, d = q.shape[-2], k.shape[-2], k.shape[-1]
    if v.shape[-1] != d:
        raise ValueError(f"AFT multiplies K and V elementwise: v must have d_v = d_k = {d}, got d_v={v.shape[-1]} "
                         f"(k shape {k.shape}, v shape {v.shape})")
    alignment = causal_alignment(causal)
    if method == "scan" and alignment is None:
        raise ValueError("method='scan' is the causal scan: it takes causal=True or 'bottom-right', not causal=False")
    window, image_width = _check_options(kind, params, window, kernel_size, num_heads, image_width, bias_dim,
                                         max_length)
    if kind == "conv":
        heads = params.num_heads if params is not None else (1 if num_heads is None else
                                                              check_positive_int("num_heads", num_heads))
        if d % heads:
            raise ValueError(f"num_heads={heads} must divide the width d={d} of q, k and v (each head has d/h "
                             f"channels)")
    p = _positions(n, m, alignment)
    if kind == "simple":                                           # w = 0: no params
        note_draw("params", None)
    elif kind == "conv":
        if params is None and kernel_size is None and rng is not None:
            raise ValueError("kind='conv' needs kernel_size (odd >= 3) to draw its filters, or params")
        params = given_or_drawn("aft", "params", params, optional_rng(rng), what="its filters", draw=lambda r:
                                init_aft_conv_filter(r, 1 if num_heads is None else num_heads, kernel_size,
                                                     image=image_width is not None))
    else:
        length = max(int(p.max(initial=-1)) + 1, m, 1) if max_length is None else max_length
        params = given_or_drawn("aft", "params", params, optional_rng(rng), what="its position biases", draw=lambda r:
                                init_aft_position_bias(r, length, bias_dim=BIAS_DIM if bias_dim is None else bias_dim))
    _check_length(kind, params, p, m)
    delta = None if alignment is None else (m - n if alignment == "bottom-right" else 0)
    return q, k, v, _Call(method, return_weights, batch, p, delta, params,
                          params.num_heads if kind == "conv" else 1, window, image_width)


def _positions(n: int, m: int, alignment: str | None) -> NDArray:
    """p_t = t (+ m − n bottom-right), clipped at 0 (earlier queries see no key under the causal mask)."""
    shift = m - n if alignment == "bottom-right" else 0
    return np.maximum(np.arange(n) + shift, 0)


def _check_length(kind, params, p: NDArray, m: int) -> None:
    """u covers every query position and u′ every key."""
    if kind in ("full", "local"):
        needed = max(int(p.max(initial=-1)) + 1, m)
        if params.max_length < needed:
            raise ValueError(f"params covers ℓ={params.max_length} positions (u shape {params.u.shape}) but the "
                             f"queries and keys reach position {needed - 1}")


RECORD = Mechanism.of(
    aft_attention, mixing="per_channel",
    id="aft", title="Attention Free Transformer (AFT)", family="beyond",
    section="after the survey (attention-free, cf. §4.2)", paper=ZHAI,
    equation=r"Y_t = \sigma(Q_t) \odot \frac{\sum_{t'} \exp(K_{t'} + w_{tt'}) \odot V_{t'}}"
             r"{\sum_{t'} \exp(K_{t'} + w_{tt'})}",
    time="O(n·m·d); AFT-simple O((n + m)·d)", memory="O(n·m) parallel (blocks of query rows), O(n·s + d) scan",
    causal=True, position_dependent=True, normalized=False,
    methods=METHODS, figure="refattn.figures.aft:aft",
    examples=({"kind": "local", "window": 2}, {"kind": "simple"},
              {"kind": "conv", "kernel_size": 3, "num_heads": 2}),
    exact_options=None,
    exact_limit="none: the weights come from the keys alone, per channel, and σ(Q) scales each row "
                "(no setting is softmax attention)",
    draws=("params",),
)
