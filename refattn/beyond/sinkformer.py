r"""Sinkformer (Sander et al., 2022, arXiv:2110.11773): attention made doubly stochastic by Sinkhorn's algorithm.

Softmax normalises the rows of exp(S) only. Sinkformer alternates row and column normalisations of it:

    S = Q Kᵀ · scale,       K⁰ = exp(S)
    K^{t+1} = N_R(K^t)  for t even,   N_C(K^t)  for t odd,    t = 0 … T − 1
    N_R(K) = K ⊘ (K 1 1ᵀ)         each row divided by its sum
    N_C(K) = (n/m) · K ⊘ (1 1ᵀ K)  each column scaled to sum n/m (1 for self-attention, n = m)
    out = K^T V

T counts the single steps, as the official code's ``n_it`` does, starting with the rows: T = 1 is softmax
attention exactly, and every odd T leaves rows that sum to 1 (a convex combination of values per query)
with columns near n/m; as T grows K^T tends to the unique matrix D₁ exp(S) D₂ (D diagonal) with both.
The steps run in the log domain (X ← X − logsumexp along rows, then columns), so nothing overflows.

With n ≠ m the column target n/m keeps the total mass n of the rows (a doubly stochastic n × m matrix does
not exist): the official code, written for self-attention, uses the marginals 1/n and 1/m and multiplies
the plan by m, which for n = m is the same matrix and for n ≠ m leaves rows that sum to m/n, so that one
row step would not be softmax; here the plan is multiplied by n instead.

The column steps sum over every query, so query i's weights depend on all the other queries: there is no
causal form (see :func:`sinkformer_attention`).
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.budget import check_fits
from ..common.checks import as_float, broadcast_batch, check_bool, check_qkv, check_scale, default_scale
from ..common.ints import check_positive_int
from ..common.products import scores, weighted_values
from ..masks import check_mask_shape
from ..mechanism import Mechanism
from ..sparse.sinkhorn import masked_logsumexp

__all__ = ["SINKFORMER_ITERATIONS", "sinkformer_attention", "sinkformer_weights"]

SANDER = ('M. E. Sander, P. Ablin, M. Blondel, G. Peyré, 2022, "Sinkformers: Transformers with Doubly Stochastic '
          'Attention", AISTATS 2022, arXiv:2110.11773')
#: The default number of single (row or column) steps: ``--n_it`` of the official code's text classification
#: and ViT experiments (michaelsdr/sinkformers, ``nlp-tutorial/text-classification-transformer/one_expe.py``
#: and ``vit-pytorch/one_expe.py``: 3); its MNIST ViT and README toy use 5, its point clouds 7 and 10.
SINKFORMER_ITERATIONS = 3


def sinkformer_weights(scores: ArrayLike, iterations: int = SINKFORMER_ITERATIONS, *,
                       mask: ArrayLike | None = None) -> NDArray:
    r"""Sinkhorn's single steps on :math:`\exp(S)`: rows to 1, then columns to n/m, alternately, T in all.

    .. math::

        K^0 = \exp(S), \qquad K^{t+1} = \begin{cases} N_R(K^t) & t \text{ even} \\
        N_C(K^t) & t \text{ odd} \end{cases}

    Parameters
    ----------
    scores : (..., n, m) array_like
        S. A NaN score makes every row and column it is balanced with NaN (IEEE: the sums read it).
    iterations : int, default 3
        T >= 1 single steps, rows first (T = 1: softmax).
    mask : (..., n, m) array_like of bool, optional
        ``True`` = the pair takes part; the others are 0 and left out of every sum. With a mask, the rows and
        columns that have a pair are balanced: rows to 1, columns to r/s (r rows and s columns with a pair, the
        same total mass r); a row or column with none stays 0.

    Returns
    -------
    K : (..., n, m) ndarray
        :math:`K^T`. Odd T: rows sum to 1 up to rounding; even T: columns sum to n/m (r/s).

    Notes
    -----
    **Tolerance of T steps.** Let Δ be the largest log cross-ratio of the scores (no mask),
    :math:`\Delta = \max_{i, j, p, q} (S_{ip} + S_{jq} - S_{jp} - S_{iq})`, and :math:`\kappa =
    \tanh(\Delta/4) < 1`. After T >= 2 steps, the sums of the side the last step did not normalise (columns
    after a row step, rows after a column step) are all within a factor :math:`e^{\kappa^{T-2}\Delta}` of
    their target (n/m, or 1), so their largest relative error is at most :math:`e^{\kappa^{T-2}\Delta} - 1`
    (Birkhoff's contraction of the Hilbert metric, as in :func:`~refattn.sparse.sinkhorn_normalize`: each
    step is a ratio of images of K or Kᵀ, each application contracts by κ, and the first ratio lies in an
    image of diameter Δ; the sums' mean is the target, so the target lies between their extremes). It falls
    geometrically in T, slowly when Δ is large (peaked scores: κ near 1).

    References
    ----------
    .. [1] M. E. Sander, P. Ablin, M. Blondel, G. Peyré, "Sinkformers: Transformers with Doubly Stochastic
       Attention", AISTATS 2022, arXiv:2110.11773v2 (the Sinkhorn iterations :math:`K^{l+1} = N_R(K^l)` for l
       even, :math:`N_C(K^l)` for l odd).
    .. [2] R. Sinkhorn, P. Knopp, "Concerning nonnegative matrices and doubly stochastic matrices", Pacific J.
       Math. 21 (1967).

    Examples
    --------
    >>> S = np.random.default_rng(0).standard_normal((4, 4))
    >>> K = sinkformer_weights(S, 1)                               # one row step: softmax
    >>> bool(np.allclose(K, np.exp(S) / np.exp(S).sum(axis=1, keepdims=True)))
    True
    >>> K = sinkformer_weights(S, 21)
    >>> bool(np.allclose(K.sum(axis=1), 1.0) and np.allclose(K.sum(axis=0), 1.0, atol=1e-9))
    True
    """
    S = as_float("scores", scores, min_ndim=2)
    iterations = check_positive_int("iterations", iterations)
    n, m = S.shape[-2:]
    if mask is None:
        allowed = np.ones((1, 1), dtype=bool)
    else:
        allowed = check_mask_shape(mask, n, m)
        if allowed.dtype != np.bool_:
            raise TypeError(f"mask must be a boolean array (True = may attend), got dtype {allowed.dtype} with "
                            f"shape {allowed.shape}")
        broadcast_batch({"scores": S.shape[:-2], "mask": allowed.shape[:-2]})
    allowed = np.broadcast_to(allowed, np.broadcast_shapes(S.shape, allowed.shape))
    rows = np.sum(np.any(allowed, axis=-1, keepdims=True), axis=-2, keepdims=True)   # (..., 1, 1)  r
    cols = np.sum(np.any(allowed, axis=-2, keepdims=True), axis=-1, keepdims=True)   # (..., 1, 1)  s
    with np.errstate(divide="ignore"):
        log_target = np.where(cols > 0, np.log(np.where(cols > 0, rows, 1) / np.maximum(cols, 1)), 0.0)  # log r/s
    X = np.where(allowed, S, -np.inf)                              # (..., n, m)  log K⁰ = S, masked: exp(−∞) = 0
    with np.errstate(invalid="ignore", over="ignore"):             # ∞ − ∞ from an Inf score: NaN, as IEEE says
        for t in range(iterations):
            if t % 2 == 0:
                X = X - masked_logsumexp(X, allowed, axis=-1)      # N_R: rows to 1
            else:
                X = X - (masked_logsumexp(X, allowed, axis=-2) - log_target)   # N_C: columns to r/s
        return np.where(allowed, np.exp(X), 0.0)                   # (..., n, m)  K^T


def sinkformer_attention(
    q: ArrayLike, k: ArrayLike, v: ArrayLike, mask: ArrayLike | None = None, *,
    iterations: int = SINKFORMER_ITERATIONS,
    scale: float | None = None,
    return_weights: bool = False,
) -> NDArray | tuple[NDArray, NDArray]:
    r"""Sinkformer attention: Sinkhorn's alternating row and column steps on :math:`\exp(QK^\top/\sqrt{d_k})`.

    .. math::

        \mathrm{out} = K^T V, \qquad K^0 = \exp\Big(\frac{QK^\top}{\sqrt{d_k}}\Big), \quad
        K^{t+1} = N_R(K^t)\ (t \text{ even}),\ N_C(K^t)\ (t \text{ odd})

    Parameters
    ----------
    q : (..., n, d_k) array_like
        Queries.
    k : (..., m, d_k) array_like
        Keys.
    v : (..., m, d_v) array_like
        Values.
    mask : (..., n, m) array_like of bool, optional
        ``True`` = may attend (:func:`sinkformer_weights`); a row with no key is a zero row.
    iterations : int, default 3
        T >= 1 single steps, rows first (the official code's ``n_it``; 1 = softmax attention).
    scale : float, optional
        Multiplier of :math:`QK^\top`; default :math:`1/\sqrt{d_k}`.
    return_weights : bool, default False
        Also return :math:`K^T`.

    Returns
    -------
    out : (..., n, d_v) ndarray
    weights : (..., n, m) ndarray
        Only if ``return_weights``.

    Notes
    -----
    Time :math:`O(n m (d_k + d_v + T))`, memory :math:`O(n m)`: the column sums need the whole matrix, so
    there is no streaming form.

    **No causal form.** The paper uses Sinkformers in encoders (ViT, set transformers, text classification).
    Under a causal mask (pass ``mask``), the column steps divide key j's column by a sum over the queries
    i >= j, so query i's weights depend on later queries; and the only matrix with rows and columns summing
    to 1 on the lower triangle is the identity (column n − 1 holds one entry, which must be 1, and so on), to
    which the balancing tends as T grows: each query attends itself alone.

    **Paper and code.** The official code (michaelsdr/sinkformers,
    ``nlp-tutorial/text-classification-transformer/sinkhorn.py`` and ``vit-pytorch/vit_pytorch/sinkhorn.py``,
    ``SinkhornDistance`` with ε = 1) updates the row potential at even steps and the column potential at odd
    ones, in the log domain, and multiplies the plan by m; it also stops early once the row potentials change
    by less than 1e-12 (summed over rows, averaged over the batch), which a fixed T does not do here, and
    masks by filling scores with −1e9 (a masked column then gets a potential above 9·10⁸ that it resets to 0),
    where here masked pairs are left out of every sum. Its default ``n_it`` varies by experiment; the default
    T = 3 is that of its text classification and ViT experiments.

    References
    ----------
    .. [1] M. E. Sander, P. Ablin, M. Blondel, G. Peyré, "Sinkformers: Transformers with Doubly Stochastic
       Attention", AISTATS 2022, arXiv:2110.11773v2.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 6, 4))
    >>> out, K = sinkformer_attention(q, k, v, iterations=31, return_weights=True)
    >>> bool(np.allclose(K.sum(axis=-1), 1.0) and np.allclose(K.sum(axis=-2), 1.0))
    True
    >>> from refattn import scaled_dot_product_attention
    >>> bool(np.allclose(sinkformer_attention(q, k, v, iterations=1), scaled_dot_product_attention(q, k, v)))
    True
    """
    return_weights = check_bool("return_weights", return_weights)
    q, k, v = (as_float(name, x) for name, x in (("q", q), ("k", k), ("v", v)))
    out, K = _sinkformer(q, k, v, mask, iterations, scale, return_weights)
    return (out, K) if return_weights else out


def _sinkformer(q, k, v, mask, iterations, scale, return_weights):
    """(out, weights or None), after the checks every path shares."""
    batch = check_qkv(q, k, v)
    n, m = q.shape[-2], k.shape[-2]
    scale = default_scale(q.shape[-1]) if scale is None else check_scale(scale)
    iterations = check_positive_int("iterations", iterations)
    if mask is not None:
        mask = check_mask_shape(mask, n, m)
        batch = broadcast_batch({"q, k, v": batch, "mask": mask.shape[:-2]})
    check_fits("the Sinkformer matrix (the column steps need all of it)", (*batch, n, m))
    S = scores(q, k, scale)                                        # (..., n, m)  QKᵀ·scale, non-finite: NaN
    K = sinkformer_weights(S, iterations, mask=mask)               # (..., n, m)  K^T
    allowed = None if mask is None else np.broadcast_to(mask, K.shape)
    empty = np.zeros((*K.shape[:-1], 1), dtype=bool) if allowed is None else ~allowed.any(axis=-1, keepdims=True)
    out = weighted_values(K, v, allowed, empty, "zero")            # (..., n, d_v)  K^T V
    return out, (K if return_weights else None)


RECORD = Mechanism.of(
    sinkformer_attention,
    id="sinkformer", title="Sinkformer (doubly stochastic attention)", family="beyond",
    section="after the survey (a change of normalisation)", paper=SANDER,
    equation=r"K^T V,\ K^0 = \exp(QK^\top/\sqrt{d_k}),\ K^{t+1} = N_R(K^t)\ (t\ \text{even}),\ "
             r"N_C(K^t)\ (t\ \text{odd})",
    time="O(n·m·(d + T))", memory="O(n·m)", causal=False, figure="refattn.figures.sinkformer:sinkformer",
    examples=({"iterations": 2}, {"iterations": 8, "scale": 0.7}),
    exact_options={"iterations": 1}, exact_limit="one row step (T = 1): softmax",
)
