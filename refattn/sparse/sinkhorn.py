r"""Sparse Sinkhorn attention (Tay et al., 2020, arXiv:2002.11296; survey §4.1.2): attention over softly sorted blocks.

The m keys are cut into N = m / b blocks of b. A small sorting network scores, from a summary of
each block, which block should take which place; Sinkhorn balancing turns the scores into a soft
permutation P, and each block of queries attends its own block and the block P sorts into its place.

    summaries   x'_I = Σ_s k_{Ib+s}                                   (ψ_P: the sum of block I)
                causal: x'_I = Σ_{j ≤ Ib} k_j                         (up to the block's first token)
    sort net    R_I = σ(σ(x'_I W_P + b_P) W_B + b_B),  σ = ReLU       (R: N × N, row I from block I)
    Sinkhorn    S⁰ = exp((R + ε)/τ),   S^t = F_c(F_r(S^{t−1})),   P = S^k
                F_r: each row divided by its sum;  F_c: each column by its sum;  ε ~ Gumbel(0, 1)
                causal: only the pairs J < I (block I sorts earlier blocks); sums over those
    sorted      K̃_I = Σ_J P_IJ K_J,   Ṽ_I = Σ_J P_IJ V_J                (a soft permutation of blocks)
    attention   query t of block I: one softmax over [K̃_I; K_I]   (2b keys; causal: K_I's s ≤ t,
                and block 0 has no sorted block)
    SortCut     every query attends K̃_0 … K̃_{c−1}: the first c sorted blocks only

By linearity the effective weight of query i (block I) on key j = Jb + s is

    A_ij = [J = I] α^local_{i,s} + α^sorted_{i,s} P_IJ

which ``return_weights`` scatters back to n × m. The rows of A sum to Σ_s α^local + Σ_s α^sorted
Σ_J P_IJ: to 1 up to how far P's rows are from 1 after k iterations (:func:`sinkhorn_normalize`).
"""
from __future__ import annotations

import math
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
    check_size,
    checked_qkv,
    default_scale,
)
from ..common.init import glorot
from ..common.ints import check_non_negative_int, check_positive_int
from ..common.products import weighted_values
from ..draws import given_or_drawn, note_allowed
from ..mechanism import Mechanism
from .attention import METHODS, attend_pattern, check_weights_fit
from .pattern import SparsePattern, query_positions

__all__ = [
    "SortNetParams",
    "block_summaries",
    "default_block_size",
    "draw_gumbel",
    "init_sort_net",
    "masked_logsumexp",
    "sinkhorn_attention",
    "sinkhorn_normalize",
    "sort_net_scores",
    "sorting_matrix",
]

PAPER = ('Y. Tay, D. Bahri, L. Yang, D. Metzler, D.-C. Juan, 2020, "Sparse Sinkhorn Attention", '
         'arXiv:2002.11296')


@dataclass(frozen=True)
class SortNetParams:
    r"""The sorting network *P* of Sparse Sinkhorn attention: two ReLU layers from a block summary to N scores.

    .. math::

        R_I = \sigma(\sigma(x'_I W_P + b_P)\, W_B + b_B), \qquad \sigma = \mathrm{ReLU}

    Attributes
    ----------
    w_p : (d, h) ndarray
        :math:`W_P`.
    b_p : (h,) ndarray
        :math:`b_P`.
    w_b : (h, N_max) ndarray
        :math:`W_B`; its first N columns score the N blocks of a sequence (N ≤ N_max, as the Long
        Range Arena code's ``max_num_blocks``).
    b_b : (N_max,) ndarray
        :math:`b_B`.
    """

    w_p: NDArray
    b_p: NDArray
    w_b: NDArray
    b_b: NDArray


def init_sort_net(rng, d: int, num_blocks: int, *, hidden: int | None = None) -> SortNetParams:
    r"""Draw a sorting network: Glorot-uniform :math:`W_P` then :math:`W_B`, zero biases.

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw (``W_P`` first, then ``W_B``).
    d : int
        Width of the block summaries (the keys' d_k).
    num_blocks : int
        N, the number of blocks it scores (>= 0).
    hidden : int, optional
        Width h of the hidden layer; default ``max(d, 1)`` (the paper's :math:`W_P \in \mathbb{R}^{d \times d}`).

    Returns
    -------
    SortNetParams

    Examples
    --------
    >>> p = init_sort_net(0, 4, 3)
    >>> p.w_p.shape, p.w_b.shape
    ((4, 4), (4, 3))
    """
    rng = as_rng(rng)
    d = check_size("d", d)
    num_blocks = check_size("num_blocks", num_blocks)
    hidden = max(d, 1) if hidden is None else check_size("hidden", hidden, positive=True)
    check_fits(f"the sort net's weights (d={d}, hidden={hidden}, num_blocks={num_blocks})",
               (d + num_blocks + 2, hidden))
    w_p = glorot(rng, d, hidden)
    w_b = glorot(rng, hidden, num_blocks)
    return SortNetParams(w_p, np.zeros(hidden), w_b, np.zeros(num_blocks))


def draw_gumbel(rng, num_blocks: int) -> NDArray:
    r"""Gumbel(0, 1) noise ε for the N × N sorting scores: ``rng.gumbel(size=(N, N))``.

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw.
    num_blocks : int
        N.

    Returns
    -------
    (N, N) ndarray
    """
    num_blocks = check_size("num_blocks", num_blocks)
    check_fits(f"the Gumbel noise of num_blocks={num_blocks}", (num_blocks, num_blocks))
    return as_rng(rng).gumbel(size=(num_blocks, num_blocks))


def default_block_size(m: int) -> int:
    r"""The block size b that :func:`sinkhorn_attention` takes by default: the smallest divisor of m with b² ≥ m.

    Then N = m / b ≤ √m blocks, so the N × N sorting matrix holds at most m entries, and each query
    attends 2b ≤ 2·(the smallest divisor ≥ √m) keys (m = 16: b = 4; m = 65536: b = 256; a prime m:
    one block of m). m = 0 gives 1.

    Parameters
    ----------
    m : int
        Number of keys.

    Returns
    -------
    int

    Examples
    --------
    >>> [default_block_size(m) for m in (0, 7, 8, 16, 18)]
    [1, 7, 4, 4, 6]
    """
    m = check_non_negative_int("m", m)
    return next((b for b in range(math.isqrt(m), m + 1) if b and m % b == 0 and b * b >= m), 1)


def block_summaries(k: ArrayLike, block_size: int, *, causal: bool = False) -> NDArray:
    r"""The blocks' summaries :math:`x'_I` that the sorting network reads (ψ_P in the paper).

    .. math::

        x'_I = \sum_{s=0}^{b-1} k_{Ib+s} \quad\text{or, causal,}\quad x'_I = \sum_{j \le Ib} k_j

    The causal summary stops at the block's first token, which every query of the block may see.

    Parameters
    ----------
    k : (..., m, d) array_like
        Keys; m a multiple of ``block_size``.
    block_size : int
        b.
    causal : bool, default False
        The cumulative summary.

    Returns
    -------
    (..., m / b, d) ndarray
    """
    k = as_float("k", k, min_ndim=2)
    b = check_positive_int("block_size", block_size)
    m, d = k.shape[-2:]
    if m % b:
        raise ValueError(f"m={m} keys do not fill whole blocks of block_size={b}")
    if check_bool("causal", causal):
        return np.cumsum(k, axis=-2)[..., ::b, :]                  # (..., N, d)  Σ_{j ≤ Ib} k_j
    return k.reshape(*k.shape[:-2], m // b, b, d).sum(axis=-2)     # (..., N, d)  Σ_s k_{Ib+s}


def sort_net_scores(summaries: ArrayLike, params: SortNetParams) -> NDArray:
    r"""The sorting scores :math:`R_I = \sigma(\sigma(x'_I W_P + b_P) W_B + b_B)`, ReLU σ, for N blocks.

    Parameters
    ----------
    summaries : (..., N, d) array_like
        :math:`x'` from :func:`block_summaries`.
    params : SortNetParams
        The network; ``w_b`` needs at least N columns (the first N are used).

    Returns
    -------
    R : (..., N, N) ndarray
        Row I: block I's scores for the N places (non-negative).
    """
    x = as_float("summaries", summaries, min_ndim=2)
    _check_sort_net(params, *x.shape[-2:])
    N = x.shape[-2]
    with np.errstate(invalid="ignore", over="ignore"):             # NaN/Inf keys: IEEE, in the rows they reach
        hidden = np.maximum(x @ params.w_p + params.b_p, 0.0)      # (..., N, h)  σ(x' W_P + b_P)
        return np.maximum(hidden @ params.w_b[:, :N] + params.b_b[:N], 0.0)   # (..., N, N)  σ(· W_B + b_B)


def sinkhorn_normalize(log_alpha: ArrayLike, iterations: int, *, mask: ArrayLike | None = None) -> NDArray:
    r"""Sinkhorn balancing in the log domain: alternately normalise rows and columns of :math:`\exp(X)`.

    .. math::

        S^0 = \exp(X), \qquad S^t = F_c(F_r(S^{t-1})), \qquad
        F_r(S) = S \oslash (S \mathbf{1}\mathbf{1}^\top), \quad F_c(S) = S \oslash (\mathbf{1}\mathbf{1}^\top S)

    computed as :math:`X \leftarrow X - \operatorname{logsumexp}` along rows, then columns.

    Parameters
    ----------
    log_alpha : (..., N, N) array_like
        X, e.g. :math:`(R + \varepsilon)/\tau`.
    iterations : int
        k >= 0 (0: :math:`\exp(X)` unnormalised).
    mask : (..., N, N) array_like of bool, optional
        The pairs that take part (causal balancing: J < I); the others are 0 in the result and left
        out of every sum. A row or column with no pair stays 0.

    Returns
    -------
    P : (..., N, N) ndarray
        After k >= 1 iterations the columns (with a pair) sum to 1 up to rounding, and the rows
        approach 1 (see Notes).

    Notes
    -----
    **Tolerance of k iterations.** For a positive matrix :math:`K = \exp(X)` (no mask), the row
    sums :math:`r^{(k)}` after k iterations obey (Birkhoff's contraction of the Hilbert projective
    metric :math:`d_H(x, y) = \log \max_i (x_i/y_i) - \log \min_i (x_i/y_i)` under a positive
    matrix; Franklin & Lorenz, 1989)

    .. math::

        d_H(r^{(k)}, \mathbf{1}) \le \kappa^{2(k-1)}\, \Delta, \qquad
        \kappa = \tanh(\Delta/4), \qquad
        \Delta = \max_{i,j,p,q} \log \frac{K_{ip} K_{jq}}{K_{jp} K_{iq}}

    (with :math:`u^{(t)} = 1 \oslash K v^{(t-1)}`, :math:`v^{(t)} = 1 \oslash K^\top u^{(t)}`:
    :math:`r^{(t)} = K v^{(t)} \oslash K v^{(t-1)}`, each of :math:`K` and :math:`K^\top` contracts
    :math:`d_H` by κ, and :math:`K`'s image has diameter Δ). As the columns sum to 1, the rows'
    sum is N, so :math:`\min_i r_i \le 1 \le \max_i r_i` and
    :math:`\max_i |r^{(k)}_i - 1| \le e^{\kappa^{2(k-1)}\Delta} - 1`. The causal mask has zeros
    (κ = 1): no such bound. Its support (J < I) holds exactly one matrix with unit row sums
    (rows 1 … N − 1) and column sums (columns 0 … N − 2), the shift :math:`P_{I, I-1} = 1`, which
    is where causal balancing converges as k grows: every block then takes the block before it
    whatever the content.

    References
    ----------
    .. [1] R. Sinkhorn, P. Knopp, "Concerning nonnegative matrices and doubly stochastic matrices",
       Pacific J. Math. 21 (1967).
    .. [2] J. Franklin, J. Lorenz, "On the scaling of multidimensional matrices", Linear Algebra
       Appl. 114/115 (1989), §2 (Birkhoff's contraction).
    .. [3] G. Mena et al., "Learning Latent Permutations with Gumbel-Sinkhorn Networks",
       arXiv:1802.08665v1, §2, Eq. (1).

    Examples
    --------
    >>> P = sinkhorn_normalize(np.random.default_rng(0).standard_normal((4, 4)), 20)
    >>> bool(np.allclose(P.sum(axis=0), 1.0) and np.allclose(P.sum(axis=1), 1.0, atol=1e-6))
    True
    """
    X = as_float("log_alpha", log_alpha, min_ndim=2)
    if X.shape[-1] != X.shape[-2]:
        raise ValueError(f"log_alpha must be square (..., N, N), got shape {X.shape}")
    iterations = check_non_negative_int("iterations", iterations)
    if mask is None:
        allowed = np.ones(X.shape[-2:], dtype=bool)
    else:
        allowed = np.asarray(mask)
        if allowed.dtype != np.bool_:
            raise TypeError(f"mask must be a boolean array, got dtype {allowed.dtype} with shape {allowed.shape}")
        try:
            allowed = np.broadcast_to(allowed, X.shape)
        except ValueError:
            raise ValueError(f"mask of shape {allowed.shape} does not broadcast to log_alpha's {X.shape}") from None
    X = np.where(allowed, X, -np.inf)                              # masked pairs: exp(−∞) = 0
    with np.errstate(invalid="ignore", over="ignore"):             # ∞ − ∞ from an Inf score: NaN, as IEEE says
        for _ in range(iterations):
            X = X - masked_logsumexp(X, allowed, axis=-1)         # F_r: rows
            X = X - masked_logsumexp(X, allowed, axis=-2)         # F_c: columns
        return np.where(allowed, np.exp(X), 0.0)


def masked_logsumexp(X: NDArray, allowed: NDArray, axis: int) -> NDArray:
    r"""One Sinkhorn step's normaliser in the log domain: :math:`\log \sum \exp(X)` over the allowed entries.

    Subtracting it from X along rows (``axis=-1``) or columns (``axis=-2``) makes the rows or columns of
    :math:`\exp(X)` sum to 1 over their allowed entries; :func:`sinkhorn_normalize` alternates the two, and
    Sinkformer (:mod:`refattn.beyond.sinkformer`) steps them one at a time.

    Parameters
    ----------
    X : (..., N, M) ndarray
        Log-domain entries; a NaN among the allowed ones makes its slice NaN (IEEE).
    allowed : ndarray of bool
        The entries that take part, broadcastable to X.
    axis : int
        The axis summed over (kept, with length 1).

    Returns
    -------
    ndarray
        Max-shifted log-sum-exp; 0 for a slice with no allowed entry (nothing to scale).

    Examples
    --------
    >>> X = np.log([[1.0, 3.0], [2.0, 2.0]])
    >>> np.exp(masked_logsumexp(X, np.ones((2, 2), dtype=bool), axis=-1)).ravel()
    array([4., 4.])
    """
    top = np.max(X, axis=axis, keepdims=True, initial=-np.inf, where=allowed)
    shift = np.where(np.isfinite(top), top, 0.0)                   # NaN stays in X, so it still propagates
    with np.errstate(divide="ignore"):
        total = np.sum(np.exp(X - shift), axis=axis, keepdims=True, where=allowed)
        lse = shift + np.log(total)
    return np.where(np.any(allowed, axis=axis, keepdims=True), lse, 0.0)


def sorting_matrix(
    k: ArrayLike, block_size: int, sort_net: SortNetParams, gumbel: ArrayLike, *,
    temperature: float = 0.75, iterations: int = 7, causal: bool = False,
) -> NDArray:
    r"""The soft permutation of blocks: :math:`P = S^k((R + \varepsilon)/\tau)` from the keys' block summaries.

    Parameters
    ----------
    k : (..., m, d) array_like
        Keys; m a multiple of ``block_size``.
    block_size : int
        b.
    sort_net : SortNetParams
        The sorting network (:func:`init_sort_net`).
    gumbel : array_like
        ε, broadcastable to (..., N, N) (:func:`draw_gumbel`; 0.0 for none).
    temperature : float, default 0.75
        τ > 0.
    iterations : int, default 7
        k, Sinkhorn iterations (:func:`sinkhorn_normalize`).
    causal : bool, default False
        Cumulative summaries and causal balancing: only pairs J < I.

    Returns
    -------
    P : (..., N, N) ndarray
        Row I: how much of each block J is sorted into place I.

    Examples
    --------
    >>> k = np.random.default_rng(0).standard_normal((12, 4))
    >>> P = sorting_matrix(k, 3, init_sort_net(1, 4, 4), 0.0, iterations=30)
    >>> bool(np.allclose(P.sum(axis=0), 1.0))
    True
    """
    causal = check_bool("causal", causal)
    x = block_summaries(k, block_size, causal=causal)              # (..., N, d)
    N = x.shape[-2]
    R = sort_net_scores(x, sort_net)                               # (..., N, N)
    eps = _check_gumbel(gumbel, R.shape)
    tau = _check_temperature(temperature)
    with np.errstate(invalid="ignore"):
        log_alpha = (R + eps) / tau                                # (..., N, N)  (R + ε)/τ
    return sinkhorn_normalize(log_alpha, iterations, mask=np.tri(N, k=-1, dtype=bool) if causal else None)


def sinkhorn_attention(
    q: ArrayLike, k: ArrayLike, v: ArrayLike, *,
    block_size: int | None = None,
    rng=None,
    sort_net: SortNetParams | None = None,
    gumbel: ArrayLike | None = None,
    temperature: float = 0.75,
    iterations: int = 7,
    sortcut: int | None = None,
    causal: bool | str = False,
    method: str = "auto",
    return_weights: bool = False,
) -> NDArray | tuple[NDArray, NDArray]:
    r"""Sparse Sinkhorn attention: each block of queries attends its own block and a softly sorted block.

    .. math::

        P = S^k\Big(\frac{R + \varepsilon}{\tau}\Big), \qquad \tilde K_I = \sum_J P_{IJ} K_J, \quad
        \tilde V_I = \sum_J P_{IJ} V_J, \qquad
        \operatorname{out}_i = \operatorname{softmax}\Big(\frac{q_i [\tilde K_I; K_I]^\top}{\sqrt{d}}\Big)
        [\tilde V_I; V_I]

    for query *i* in block *I* (the module docstring has the sorting network, the causal form and SortCut).

    Parameters
    ----------
    q : (..., n, d) array_like
        Queries; n = m (one sequence), or any n with ``causal="bottom-right"``.
    k : (..., m, d) array_like
        Keys.
    v : (..., m, d_v) array_like
        Values.
    block_size : int, optional
        b, a divisor of m; default :func:`default_block_size` (the smallest divisor with b² ≥ m).
    rng : numpy.random.Generator or int, optional
        Source of the draws not given (``sort_net`` first, then ``gumbel``); needed when one of them
        is missing, unused otherwise. A Generator is one stream for both; a seed seeds each draw.
    sort_net : SortNetParams, optional
        The sorting network (:func:`init_sort_net`, at least N = m / b output columns).
    gumbel : array_like, optional
        ε broadcastable to (..., N, N) (:func:`draw_gumbel`); 0.0 for no noise.
    temperature : float, default 0.75
        τ > 0.
    iterations : int, default 7
        k, Sinkhorn iterations (:func:`sinkhorn_normalize`).
    sortcut : int, optional
        c: attend only the first c sorted blocks (SortCut, 1 <= c <= N); no causal form.
    causal : {False, True, "top-left", "bottom-right"}, default False
        Causal Sinkhorn balancing (see Notes); "bottom-right": the n queries are the last n of the
        m positions.
    method : {"equation", "csr", "auto"}, default "auto"
        How the attention over the sorted and local keys runs (:func:`~refattn.sparse.sparse_attention`).
    return_weights : bool, default False
        Also return the effective (..., n, m) weights :math:`A_{ij}` (module docstring).

    Returns
    -------
    out : (..., n, d_v) ndarray
    weights : (..., n, m) ndarray
        Only if ``return_weights``.

    Notes
    -----
    Time :math:`O(n \cdot 2b \cdot d + k N^2 + N^2 b d)`, memory :math:`O(n b + N^2)` beyond the
    inputs; nothing n × m unless ``return_weights``.

    **Causal form.** The paper's Causal Sinkhorn Balancing masks the balancing so that a block
    sorts only blocks before it. Here the mask keeps J < I strictly (block 0 has no sorted block):
    with J = I, block I's own tokens after query *t* would reach it through its sorted block
    (lucidrains's causal sort nets likewise sort earlier blocks only). The summaries are cumulative
    sums up to each block's first token, which every query of the block may see (the LRA code takes
    the block's first token alone, lucidrains's ``CausalSimpleSortNet`` the running mean up to it).
    The column sums of the balancing still run over the rows of *later*
    blocks, so the *choice* of the past blocks depends on later keys: future keys carry zero weight
    and future values never reach the output, but changing a later key changes earlier outputs (a
    non-finite later key makes every sorted block NaN, which is why the registry entry reports every
    pair in ``allowed``: any key may reach any row), and a decoder with a key/value cache does not
    reproduce the full-sequence result. With many iterations causal balancing tends to the
    fixed shift "block I takes block I − 1" (:func:`sinkhorn_normalize`).

    **Paper and code.** The keys' block summaries feed the sorting network (the Long Range Arena
    code, ``lra_benchmarks/models/sinkhorn_transformer/sinkhorn_attention.py``, sums the key
    blocks; the paper pools the layer's input). The defaults k = 7 and τ = 0.75 are the values
    lucidrains/sinkhorn-transformer's README gives as the paper's best. The sorted and the local
    block share one softmax, as the paper's attention matrix lists both for each block row; the LRA
    code instead adds two separately normalised outputs, and its default sorting activation is a
    plain softmax, not Sinkhorn (neither is offered here). The paper uses the soft P throughout;
    there is no hard (argmax) sort in the paper or the codes above.

    References
    ----------
    .. [1] Y. Tay et al., "Sparse Sinkhorn Attention", ICML 2020, arXiv:2002.11296v1, §3.
    .. [2] G. Mena et al., "Learning Latent Permutations with Gumbel-Sinkhorn Networks", arXiv:1802.08665v1.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 8, 4))
    >>> out, A = sinkhorn_attention(q, k, v, block_size=2, rng=0, return_weights=True)
    >>> out.shape, A.shape
    ((8, 4), (8, 8))
    >>> bool(np.allclose(out, A @ v))                              # the effective matrix is the mechanism
    True
    >>> from refattn import scaled_dot_product_attention
    >>> exact = sinkhorn_attention(q, k, v, block_size=8, rng=0)   # one block: softmax attention
    >>> bool(np.allclose(exact, scaled_dot_product_attention(q, k, v)))
    True
    """
    check_choice("method", method, METHODS)
    return_weights = check_bool("return_weights", return_weights)
    q, k, v, batch = checked_qkv(q, k, v)
    b = _check_layout(q, k, block_size, sortcut, causal, "sinkhorn")
    N = k.shape[-2] // b
    # The sorting network first, then ε, each from rng as given: a Generator is one stream, a seed seeds each draw.
    sort_net = given_or_drawn("sinkhorn", "sort_net", sort_net, rng, lambda g: init_sort_net(g, k.shape[-1], N),
                              what="its sorting network")
    gumbel = given_or_drawn("sinkhorn", "gumbel", gumbel, rng, lambda g: draw_gumbel(g, N), what="its Gumbel noise")
    out, weights, allowed = _sinkhorn(q, k, v, batch, b, sort_net, gumbel, temperature, iterations, sortcut, causal,
                                      method, return_weights)
    if not return_weights:
        return out
    note_allowed(allowed)
    return out, weights


def _check_layout(q: NDArray, k: NDArray, block_size, sortcut, causal, name: str) -> int:
    """Validate what the block layout needs, in one order for every method; return b."""
    alignment = causal_alignment(causal)
    n, m = q.shape[-2], k.shape[-2]
    default_scale(q.shape[-1])                                     # d_k = 0: the same error whatever follows
    if n != m and alignment != "bottom-right":
        raise ValueError(f"{name} is self-attention over one sequence: q has n={n} queries but k has m={m} keys "
                         "(causal='bottom-right' takes the last n of m positions)")
    b = default_block_size(m) if block_size is None else check_positive_int("block_size", block_size)
    if m % b:
        raise ValueError(f"m={m} keys do not fill whole blocks of block_size={b}: block_size must divide m")
    if sortcut is not None:
        sortcut = check_positive_int("sortcut", sortcut)
        if alignment is not None:
            raise ValueError(f"sortcut={sortcut} has no causal form (the first sorted blocks mix every block); "
                             f"pass causal=False, got causal={causal!r}")
        if sortcut > m // b:
            raise ValueError(f"sortcut={sortcut} exceeds the N={m // b} blocks of m={m} keys (block_size={b})")
    return b


def _check_temperature(temperature) -> float:
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float, np.integer, np.floating)):
        raise TypeError(f"temperature must be a real number, got {type(temperature).__name__}")
    if not (np.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature must be a positive finite number, got {temperature!r}")
    return float(temperature)


def _check_gumbel(gumbel, shape: tuple[int, ...]) -> NDArray:
    eps = as_float("gumbel", gumbel)
    try:
        np.broadcast_shapes(eps.shape, shape)
    except ValueError:
        raise ValueError(f"gumbel must broadcast to the sorting scores' shape (..., N, N) = {shape}, "
                         f"got shape {eps.shape}") from None
    return eps


def _check_sort_net(params, N: int, d: int) -> None:
    if not isinstance(params, SortNetParams):
        raise TypeError(f"sort_net must be a SortNetParams (init_sort_net), got {type(params).__name__}")
    arrays = {name: as_float(f"sort_net.{name}", getattr(params, name)) for name in ("w_p", "b_p", "w_b", "b_b")}
    w_p, b_p, w_b, b_b = arrays.values()
    if (w_p.ndim, w_b.ndim, b_p.ndim, b_b.ndim) != (2, 2, 1, 1) or w_p.shape[0] != d or \
            b_p.shape != (w_p.shape[1],) or w_b.shape[0] != w_p.shape[1] or b_b.shape != (w_b.shape[1],):
        raise ValueError(f"sort_net must map d={d} to h to N_max scores: w_p (d, h), b_p (h,), w_b (h, N_max), "
                         f"b_b (N_max,); got shapes {w_p.shape}, {b_p.shape}, {w_b.shape}, {b_b.shape}")
    if w_b.shape[1] < N:
        raise ValueError(f"sort_net scores N_max={w_b.shape[1]} places but the keys make N={N} blocks")


def _sinkhorn(q, k, v, batch, b, sort_net, gumbel, temperature, iterations, sortcut, causal, method,
              return_weights):
    """(out, weights or None, allowed or None): the sorting, then attention over the sorted and local keys."""
    iterations = check_non_negative_int("iterations", iterations)
    alignment = causal_alignment(causal)
    n, m = q.shape[-2], k.shape[-2]
    N, d, d_v = m // b, k.shape[-1], v.shape[-1]
    if return_weights:
        check_weights_fit(batch, n, m)
    check_fits("the sorting matrix", (*k.shape[:-2], N, N))
    P = sorting_matrix(k, b, sort_net, gumbel, temperature=temperature, iterations=iterations,
                       causal=alignment is not None)               # (..., N, N)
    mask = np.tri(N, k=-1, dtype=bool) if alignment is not None else None
    K_sorted = _mix(P, k.reshape(*k.shape[:-2], N, b, d), mask)    # (..., N, b, d)    K̃_I = Σ_J P_IJ K_J
    V_sorted = _mix(P, v.reshape(*v.shape[:-2], N, b, d_v), mask)  # (..., N, b, d_v)  Ṽ_I = Σ_J P_IJ V_J
    if sortcut is not None:
        Z = K_sorted[..., :sortcut, :, :].reshape(*K_sorted.shape[:-3], sortcut * b, d)        # (..., c·b, d)
        Y = V_sorted[..., :sortcut, :, :].reshape(*V_sorted.shape[:-3], sortcut * b, d_v)
    else:                                                          # per block [K̃_I; K_I]: (..., 2m, d)
        Z = _interleave(K_sorted, k.reshape(*k.shape[:-2], N, b, d))
        Y = _interleave(V_sorted, v.reshape(*v.shape[:-2], N, b, d_v))
    pattern = _block_pattern(n, m, b, alignment, sortcut)
    result = attend_pattern(q, Z, Y, pattern, method=method, return_weights=return_weights)
    if not return_weights:
        return result.output, None, None
    W = result.weights                                             # (..., n, 2m) or (..., n, c·b)
    if sortcut is not None:
        W_sorted, W_local = W.reshape(*W.shape[:-1], sortcut, b), 0.0
        P = P[..., :sortcut, :]
    else:
        W = W.reshape(*W.shape[:-1], N, 2, b)
        W_sorted, W_local = W[..., 0, :], W[..., 1, :]             # (..., n, N, b)
    A = W_local + np.einsum("...nis,...ij->...njs", W_sorted, P)   # A_ij = [J = I] α_loc + Σ_I α_sorted P_IJ
    A = A.reshape(*A.shape[:-2], m)                                # (..., n, m)
    allowed = np.ones(A.shape, dtype=bool)
    return result.output, A, allowed


def _mix(P: NDArray, blocks: NDArray, mask: NDArray | None) -> NDArray:
    """Σ_J P_IJ X_J over blocks X (..., N, b, w), by selection: a pair outside ``mask`` never reads X_J."""
    N, b, w = blocks.shape[-3:]
    flat = blocks.reshape(*blocks.shape[:-3], N, b * w)            # (..., N, b·w)
    empty = np.zeros((N, 1), dtype=bool) if mask is None else ~mask.any(axis=-1, keepdims=True)
    P = np.broadcast_to(P, (*broadcast_batch({"P": P.shape[:-2], "blocks": flat.shape[:-2]}), N, N))
    mixed = weighted_values(P, flat, mask, empty, "zero")          # (..., N, b·w)
    return mixed.reshape(*mixed.shape[:-1], b, w)


def _interleave(sorted_blocks: NDArray, local_blocks: NDArray) -> NDArray:
    """(..., N, b, w) twice → (..., 2Nb, w): block I's sorted keys, then its own, for I = 0 … N − 1."""
    shape = np.broadcast_shapes(sorted_blocks.shape, local_blocks.shape)
    both = np.stack([np.broadcast_to(sorted_blocks, shape), np.broadcast_to(local_blocks, shape)], axis=-3)
    return both.reshape(*shape[:-3], 2 * shape[-3] * shape[-2], shape[-1])


def _block_pattern(n: int, m: int, b: int, alignment, sortcut) -> SparsePattern:
    """Which of the laid-out keys each query attends: [K̃_I; K_I] of its block I (2Ib …), or the c·b SortCut keys."""
    position, alignment = query_positions(n, m, alignment or False)   # (n,) query i's position among the m
    if sortcut is not None:
        return SparsePattern.from_row_ranges(np.zeros(n, np.int64), np.full(n, sortcut * b), sortcut * b)
    I, t = position // b, position % b
    start = 2 * I * b                                              # block I's sorted keys, then its own
    stop = start + 2 * b
    if alignment is not None:                                      # own keys s ≤ t; block 0 sorts nothing
        start = np.where(I == 0, start + b, start)
        stop = start + np.where(I == 0, 0, b) + t + 1
    before = position < 0                                          # bottom-right, n > m: no key yet
    return SparsePattern.from_row_ranges(np.where(before, 0, start), np.where(before, 0, stop), 2 * m)


RECORD = Mechanism.of(
    sinkhorn_attention,
    id="sinkhorn", title="Sparse Sinkhorn attention", family="sparse", section="4.1.2", paper=PAPER,
    equation=r"P = S^k\big((R + \varepsilon)/\tau\big),\ \operatorname{out}_i = \operatorname{softmax}"
             r"\big(q_i [\textstyle\sum_J P_{IJ} K_J;\, K_I]^\top/\sqrt{d}\big)[\textstyle\sum_J P_{IJ} V_J;\, V_I]",
    time="O(n·b·d + N²·(k + b·d))", memory="O(n·b + N²)", kind="attention", methods=("equation", "csr", "bsr", "auto"),
    figure="refattn.figures.sinkhorn:sinkhorn",
    causal=True, position_dependent=True, cross=False, normalized=False, content_selected=True,
    future_independent=False, example_length=16, draws=("sort_net", "gumbel"),
    examples=({"block_size": 2, "iterations": 2, "temperature": 1.0},),
    exact_options=lambda n, m: {"block_size": m},
    exact_limit="one block (b = m): the sorted block is the block itself, so each key is counted twice in one "
                "softmax (causal: block 0 has no sorted block)",
)
