r"""FNet: token mixing by the discrete Fourier transform, no q and no k (Lee-Thorp et al., 2022, §3.2).

The attention sublayer of an encoder is replaced by a parameter-free 2-D DFT of its (sequence, hidden)
input, of which the real part is kept:

    y = Re(F_seq(F_hidden(x)))                                      the paper's Eq. (3)
      = Re(F_n X F_d),   (F_N)_jk = e^{−2πi·jk/N}                   the same, written with the DFT matrices
      = Re(F_n) X Re(F_d) − Im(F_n) X Im(F_d)                       F_d is symmetric, and Re(ab) = Re a Re b − Im a Im b
    y_ic = Σ_j Σ_c′ cos(2π(ij/n + c′c/d)) x_jc′                     one entry

So the token-mixing matrix is the complex DFT matrix F_n: every output position reads every input position
with weight of modulus 1, whatever the input.

The mixer has no queries and no keys: in the registry's uniform ``apply`` it mixes the values v (x = v,
n = m, d = d_v); q gives only the number of outputs (it must equal m) and k is not read. The weights it
returns are F_n's two real planes, ``(..., 2, n, m)`` = (Re F_n, Im F_n), with which
``out = W₀ V Re(F_d) − W₁ V Im(F_d)`` exactly; their rows do not sum to 1 and they are signed.

Sources of the details (the official code is google-research/google-research ``f_net``):

- The transform is unnormalised (``jnp.fft.fftn`` over the last two axes in ``models.py``
  ``_init_fourier_transform``; ``FourierTransform`` in ``layers.py`` keeps ``.real``).
- The DFT-matrix path is the official code's choice on TPUs for short sequences: ``scipy.linalg.dft`` matrices
  applied by ``fourier.two_dim_matmul``, einsum ``"ij,jk,ni->nk"`` = F_n X F_d (``method="matrix"`` here).
- No mask: the official ``FourierTransform`` ignores its padding mask, so padded positions are mixed in like
  any others; there is no causal form (the DFT sends every position to every output; the paper's models are
  encoders).
- Non-finite input: every output reads every input, and inf − inf has no value, so a NaN or ±Inf anywhere in a
  sequence's values makes that sequence's whole output NaN, by either method (an FFT and a matrix product would
  otherwise place NaN and ±Inf differently).
"""
from __future__ import annotations

import numpy as np
import scipy.fft
from numpy.typing import ArrayLike, NDArray

from ..common.budget import check_fits
from ..common.checks import as_float, check_bool, check_choice, checked_qkv
from ..common.ints import check_non_negative_int
from ..mechanism import Mechanism

__all__ = ["FNET_METHODS", "dft_matrix", "fnet_attention", "fnet_mixing"]

LEE_THORP = ('J. Lee-Thorp, J. Ainslie, I. Eckstein, S. Ontañón, 2022, "FNet: Mixing Tokens with Fourier '
             'Transforms", NAACL 2022, arXiv:2105.03824')
#: "fft": scipy.fft over the hidden then the sequence axis; "matrix": the DFT matrices' products.
FNET_METHODS = ("fft", "matrix")


def dft_matrix(n: int) -> NDArray:
    r"""The unnormalised DFT matrix :math:`(F_n)_{jk} = e^{-2\pi i\, jk/n}`, as ``scipy.linalg.dft(n)``.

    The phase is reduced first, :math:`jk \bmod n`, so that the entries are as exact at large n as at small.

    Parameters
    ----------
    n : int
        Size, >= 0.

    Returns
    -------
    F : (n, n) ndarray of complex128
        Symmetric; :math:`F x` is the DFT of the column x.

    Examples
    --------
    >>> np.round(dft_matrix(4), 12)
    array([[ 1.+0.j,  1.+0.j,  1.+0.j,  1.+0.j],
           [ 1.+0.j,  0.-1.j, -1.-0.j, -0.+1.j],
           [ 1.+0.j, -1.-0.j,  1.+0.j, -1.-0.j],
           [ 1.+0.j, -0.+1.j, -1.-0.j,  0.-1.j]])
    """
    n = check_non_negative_int("n", n)
    check_fits("the DFT matrix", (n, n), 16)
    jk = np.outer(np.arange(n), np.arange(n)) % max(n, 1)           # (n, n)  jk mod n
    return np.exp(-2j * np.pi * jk / max(n, 1))                     # (n, n)  e^{−2πi jk/n}


def _mix(x: NDArray, method: str) -> NDArray:
    """Re(F_n X F_d) over the last two axes of a finite, non-empty x."""
    if method == "fft":
        return scipy.fft.fft(scipy.fft.fft(x, axis=-1), axis=-2).real  # Re(F_seq(F_hidden(x)))
    F_n, F_d = dft_matrix(x.shape[-2]), dft_matrix(x.shape[-1])
    return (F_n @ x @ F_d).real                                     # (..., n, d)  Re(F_n X F_d)


def fnet_mixing(x: ArrayLike, *, method: str = "fft") -> NDArray:
    r"""FNet's Fourier sublayer: the real part of the 2-D DFT over (sequence, hidden).

    .. math::

        y = \Re\big(\mathcal F_{\mathrm{seq}}(\mathcal F_{\mathrm h}(x))\big) = \Re(F_n\, X\, F_d)

    Parameters
    ----------
    x : (..., n, d) array_like
        The sublayer's input, one sequence per leading index (no mask: every position is mixed).
    method : {"fft", "matrix"}, default "fft"
        ``scipy.fft`` along the hidden axis then the sequence axis, O(n·d·(log n + log d)); or the products with
        the DFT matrices (:func:`dft_matrix`), O(n·d·(n + d)), the official code's TPU path.

    Returns
    -------
    y : (..., n, d) ndarray
        Real. A sequence with a NaN or ±Inf anywhere gives NaN everywhere (every output reads every input).

    Notes
    -----
    No parameters, no normalisation (the official code's ``jnp.fft.fftn``), no causal form. Entry by entry,
    :math:`y_{ic} = \sum_j \sum_{c'} \cos\big(2\pi(ij/n + c'c/d)\big)\, x_{jc'}`.

    References
    ----------
    .. [1] J. Lee-Thorp, J. Ainslie, I. Eckstein, S. Ontañón, "FNet: Mixing Tokens with Fourier Transforms",
       NAACL 2022, arXiv:2105.03824v4, §3.2, Eq. (3).
    .. [2] google-research/google-research, ``f_net/models.py`` (``_init_fourier_transform``),
       ``f_net/fourier.py`` (``two_dim_matmul``), ``f_net/layers.py`` (``FourierTransform``).

    Examples
    --------
    >>> x = np.ones((4, 3))                                         # a constant: all of it at frequency (0, 0)
    >>> fnet_mixing(x)
    array([[12.,  0.,  0.],
           [ 0.,  0.,  0.],
           [ 0.,  0.,  0.],
           [ 0.,  0.,  0.]])
    >>> x = np.random.default_rng(0).standard_normal((2, 5, 4))
    >>> bool(np.allclose(fnet_mixing(x), fnet_mixing(x, method="matrix")))
    True
    """
    x = as_float("x", x, min_ndim=2)
    check_choice("method", method, FNET_METHODS)
    if x.size == 0:                                                 # n, d or a batch dim 0: nothing to mix
        return np.zeros(x.shape)
    finite = np.isfinite(x).all(axis=(-2, -1), keepdims=True)      # (..., 1, 1)  sequences without NaN/Inf
    y = _mix(np.where(finite, x, 0.0), method)                      # (..., n, d)
    return np.where(finite, y, np.nan)


def _weights(n: int, batch: tuple[int, ...]) -> NDArray:
    """The (..., 2, n, n) real planes (Re F_n, Im F_n) of FNet's token-mixing matrix."""
    check_fits("FNet's mixing matrix", (*batch, 2, n, n))
    F = dft_matrix(n)
    return np.broadcast_to(np.stack([F.real, F.imag]), (*batch, 2, n, n)).copy()


def fnet_attention(q: ArrayLike, k: ArrayLike, v: ArrayLike, *, method: str = "fft",
                   return_weights: bool = False) -> NDArray | tuple[NDArray, NDArray]:
    r"""FNet as attention over (q, k, v): :func:`fnet_mixing` of the values, x = v; q gives n = m, k is not read.

    .. math::

        \mathrm{out} = \Re(F_m\, V F_{d_v}) = W_0 V \Re(F_{d_v}) - W_1 V \Im(F_{d_v}),
        \qquad W = (\Re F_m, \Im F_m)

    Parameters
    ----------
    q : (..., n, d_k) array_like
        Queries: only their number n (which must be m) and batch dims are read.
    k : (..., m, d_k) array_like
        Keys: checked, not read.
    v : (..., m, d_v) array_like
        Values, the mixer's input.
    method : {"fft", "matrix"}, default "fft"
        As in :func:`fnet_mixing`.
    return_weights : bool, default False
        Also return the (..., 2, m, m) real planes (Re F_m, Im F_m) of the token-mixing matrix.

    Returns
    -------
    out : (..., m, d_v) ndarray
    weights : (..., 2, m, m) ndarray
        Only if ``return_weights``.
    """
    return_weights = check_bool("return_weights", return_weights)
    q, k, v, batch = checked_qkv(q, k, v)
    check_choice("method", method, FNET_METHODS)
    n, m = q.shape[-2], v.shape[-2]
    if n != m:
        raise ValueError(f"fnet mixes the m values into m outputs, so q must have m rows (n = m); got q shape "
                         f"{q.shape}, v shape {v.shape}")
    out = fnet_mixing(np.broadcast_to(v, (*batch, *v.shape[-2:])), method=method)
    return (out, _weights(n, batch)) if return_weights else out


RECORD = Mechanism.of(
    fnet_attention, function=fnet_mixing, mixing="fourier",
    id="fnet", title="FNet (Fourier token mixing)", family="beyond", section="after the survey (attention-free)",
    paper=LEE_THORP,
    equation=r"\Re\big(F_n\, V F_d\big),\quad (F_N)_{jk} = e^{-2\pi i\, jk/N}\quad\text{(mixes } v\text{; no } q, k)",
    time="O(n·d·log(n·d))", memory="O(n·d)", causal=False,
    cross=False, position_dependent=True, normalized=False, nonnegative=False, methods=FNET_METHODS,
    example_length=6, figure="refattn.figures.fnet:fnet",
    exact_options=None,
    exact_limit="none: a fixed complex DFT of the values, whatever q and k; its weights have modulus 1, not a softmax",
)
