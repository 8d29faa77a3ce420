r"""Reformer's LSH attention (Kitaev, Kaiser & Levskaya 2020, §2; survey §4.1.2, content-based sparsity).

Shared-QK attention within hash buckets: the tokens are sorted by bucket, cut into chunks, and each
chunk attends its own chunk and the one before it; several hash rounds are merged by their log-sum-exp.

    k_j = q_j / ‖q_j‖                                      shared QK: the keys are the unit queries
    h(x) = argmax([xR; −xR]),  R ∈ ℝ^{d×b/2}               angular LSH, one R per round, b buckets
    s_i = rank of (h(k_i), i) in sorted order               sort by bucket, then by position
    P̃_i = {j : ⌊s_i/c⌋ − 1 ≤ ⌊s_j/c⌋ ≤ ⌊s_i/c⌋}              chunks of length c: own chunk and the previous
    P_i^(r) = {j ∈ P̃_i^(r) : h^(r)(k_j) = h^(r)(k_i)}      the same bucket (causal: and j ≤ i)
    U_i = ∪_r P_i^(r) without i, or {i} if that is empty     a token attends itself only when alone
    N_ij = |{r : j ∈ P_i^(r) ∩ U_i}|                        how many rounds computed the pair
    z_i^(r) = log Σ_{j ∈ P_i^(r) ∩ U_i} exp(s_ij − log N_ij),   s_ij = scale · q_i·k_j
    o_i^(r) = Σ_{j ∈ P_i^(r) ∩ U_i} exp(s_ij − log N_ij − z_i^(r)) v_j
    o_i = Σ_r exp(z_i^(r) − z_i) o_i^(r),    z_i = log Σ_r exp(z_i^(r))     rounds merged by their LSE

With the count N_ij subtracted, the merge is exactly softmax attention of q_i over U_i, each pair
once: the merged weight of (i, j) is Σ_{r holding (i, j)} e^{s_ij − log N_ij − z_i} = e^{s_ij − z_i}.
The official code's ``allow_duplicate_attention=True`` drops the count, which weighs a pair by N_ij.
With one bucket and one chunk every round holds every pair, and the result is shared-QK softmax
attention with self excluded (the exact limit; ``softmax(q kᵀ)`` itself has no exact setting).

The choice of pairs depends on every token: under ``causal=True`` the keys after i carry zero weight,
but their buckets move the chunk boundaries, so output i changes when later tokens change (a decoder
with a key/value cache does not reproduce the full-sequence result).
"""
from __future__ import annotations

import math

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
    check_size,
    default_scale,
)
from ..common.ints import check_positive_int
from ..common.products import weighted_values
from ..core.softmax import masked_softmax
from ..deprecation import renamed
from ..draws import given_or_drawn, note_allowed, optional_rng
from ..mechanism import Mechanism
from ..oracle.merge import merge_attention

__all__ = [
    "draw_lsh_rotations",
    "lsh_buckets",
    "lsh_chunks",
    "lsh_collision_probability",
    "reformer_lsh_attention",
]

METHODS = ("equation", "csr", "auto")
DEFAULT_ROUNDS, TRAX_CHUNK = 2, 128
_GROUP_BYTES = 32 * 2**20                                          # one block of hashed rows, one group of windows


@renamed(n_buckets="num_buckets", n_rounds="num_rounds")
def draw_lsh_rotations(rng, d_k: int, num_buckets, num_rounds: int = 1) -> NDArray:
    r"""Draw the random projections R of angular LSH, one (d_k, b/2) matrix per hash round.

    .. math::

        R^{(r)}_{ct} \sim \mathcal{N}(0, 1)\ \text{i.i.d.}, \qquad r < n_\text{rounds},\ c < d_k,\ t < b/2

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw.
    d_k : int
        Width of the queries (and keys).
    num_buckets : int or sequence of int
        *b*: even, or 1 (no hashing: R has no column); or even factors :math:`(f_1, \dots, f_k)` of
        a hierarchical hash with :math:`b = \prod f_i` buckets and :math:`\sum f_i/2` columns
        (:func:`lsh_buckets`).
    num_rounds : int, default 1
        Number of hash rounds (the official code's ``n_hashes``).

    Returns
    -------
    rotations : (num_rounds, d_k, b/2) ndarray
        (:math:`\sum f_i/2` columns for factors.)

    Notes
    -----
    The paper calls R a "random rotation"; the official code (trax ``hash_vecs``, and the
    PyTorch port) draws it with i.i.d. standard normal entries, as here. With Gaussian entries the
    projections of two unit vectors on a column are a standard bivariate normal pair whatever d_k is,
    which makes :func:`lsh_collision_probability` independent of d_k.

    Examples
    --------
    >>> draw_lsh_rotations(0, 8, 4, num_rounds=2).shape
    (2, 8, 2)
    >>> draw_lsh_rotations(0, 8, (8, 16)).shape                     # 128 buckets from 4 + 8 columns
    (1, 8, 12)
    """
    rng = as_rng(rng)
    d_k = check_size("d_k", d_k)
    factors, num_rounds = _bucket_factors(num_buckets), check_size("num_rounds", num_rounds, positive=True)
    shape = (num_rounds, d_k, sum(f // 2 for f in factors))
    check_fits(f"the rotations (num_rounds={num_rounds}, d_k={d_k}, num_buckets={num_buckets!r})", shape)
    return rng.standard_normal(shape)


@renamed(n_buckets="num_buckets")
def lsh_buckets(x: ArrayLike, rotations: ArrayLike, num_buckets=None) -> NDArray:
    r"""The bucket of every vector in every hash round: :math:`h(x) = \arg\max([xR;\, -xR])`.

    Parameters
    ----------
    x : (..., n, d) array_like
        Vectors to hash (Reformer hashes the unit keys; the bucket is the same for any positive
        multiple of x).
    rotations : (..., num_rounds, d, b/2) array_like
        One projection matrix per round (:func:`draw_lsh_rotations`); leading dims broadcast with x's.
    num_buckets : int or sequence of int, optional
        Default: :math:`b = 2 \times` the columns of R (1 with none). Even factors
        :math:`(f_1, \dots, f_k)` split R's columns into blocks of :math:`f_i/2` and combine the
        blocks' buckets :math:`h_i` into :math:`h = \sum_i h_i \prod_{l<i} f_l` (trax's hierarchical
        hash, which ``LSHSelfAttention`` uses above 128 buckets).

    Returns
    -------
    buckets : (..., num_rounds, n) ndarray of int64
        In [0, b): column t of xR is bucket t, column t of −xR is bucket t + b/2. With no column
        (b = 1) every vector is in bucket 0. A row of xR that holds NaN (a non-finite x) goes to the
        bucket of its first NaN (``np.argmax``), 0 for a NaN vector.

    Notes
    -----
    Hashing costs O(n·d·Σ f_i/2) a round; the vectors are hashed a block of rows at a time, so the
    projections take at most 32 MiB whatever n and b.

    Examples
    --------
    >>> x = np.array([[1.0, 0.0], [-1.0, 0.0], [0.9, 0.1]])
    >>> lsh_buckets(x, np.array([[[1.0], [0.0]]]))                  # b = 2: the sign of x·r
    array([[0, 1, 0]])
    """
    x, rotations = as_float("x", x, min_ndim=2), as_float("rotations", rotations, min_ndim=3)
    if rotations.shape[-2] != x.shape[-1]:
        raise ValueError(f"rotations must have shape (..., num_rounds, d={x.shape[-1]}, b/2) for x of shape {x.shape}, "
                         f"got shape {rotations.shape}")
    batch = broadcast_batch({"x": x.shape[:-2], "rotations": rotations.shape[:-3]})
    factors = _factors_of(num_buckets, rotations.shape)
    n, R = x.shape[-2], rotations.shape[-3]
    buckets = np.zeros((*batch, R, n), dtype=np.int64)
    rows = max(1, _GROUP_BYTES // (16 * max(1, math.prod(batch) * R * rotations.shape[-1])))
    for start in range(0, n, rows):
        rotated = x[..., None, start:start + rows, :] @ rotations          # (..., R, rows, Σ f/2)  xR
        column, offset = 0, 1
        for f in factors:
            part = rotated[..., column:column + f // 2]
            h = np.argmax(np.concatenate([part, -part], axis=-1), axis=-1)  # argmax [xR; −xR]
            buckets[..., start:start + rows] += offset * h
            column, offset = column + f // 2, offset * f
    return buckets


def lsh_chunks(buckets: ArrayLike, chunk_length: int) -> tuple[NDArray, NDArray]:
    r"""Sort the tokens by bucket, then by position, and cut the sorted order into chunks.

    Parameters
    ----------
    buckets : (..., n) array_like of int
        Each token's bucket in one or more rounds (:func:`lsh_buckets`).
    chunk_length : int
        *c*, tokens per chunk; the last chunk is shorter when c does not divide n.

    Returns
    -------
    order : (..., n) ndarray of int64
        The positions in sorted order: ``order[s]`` is the token at rank *s*.
    chunk : (..., n) ndarray of int64
        Each token's chunk, :math:`\lfloor s_i / c \rfloor` (indexed by position).

    Examples
    --------
    >>> order, chunk = lsh_chunks(np.array([1, 0, 1, 0, 2]), 2)
    >>> order, chunk
    (array([1, 3, 0, 2, 4]), array([1, 0, 1, 0, 2]))
    """
    buckets = np.asarray(buckets)
    if buckets.dtype.kind not in "iu" or buckets.ndim < 1:
        raise TypeError(f"buckets must be an integer array of at least 1 dimension, got dtype {buckets.dtype} "
                        f"with shape {buckets.shape}")
    chunk_length = check_positive_int("chunk_length", chunk_length)
    order = np.argsort(buckets, axis=-1, kind="stable").astype(np.int64)   # by bucket, ties by position
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(buckets.shape[-1]), axis=-1)  # s_i
    return order, rank // chunk_length


@renamed(n_buckets="num_buckets")
def lsh_collision_probability(theta: ArrayLike, num_buckets) -> NDArray:
    r"""Probability that two unit vectors at angle θ share a bucket in one hash round.

    For :math:`h(x) = \arg\max([xR;\, -xR])` with R of i.i.d. standard normal entries (b/2 columns):

    .. math::

        P_2 = 1 - \frac{\theta}{\pi}, \qquad P_4 = \Big(1 - \frac{\theta}{\pi}\Big)^2, \qquad
        P_b = \frac{b}{\pi} \int_{\theta/2}^{\pi/2} \!\! d\varphi
            \int_0^\infty r\, e^{-r^2/2}\, G\big(r\cos\varphi,\; r\cos(\varphi - \theta)\big)^{b/2 - 1} dr

    where :math:`G(x, y) = P(|X| < x,\ |Y| < y)` for a standard bivariate normal pair (X, Y) of
    correlation cos θ.

    Parameters
    ----------
    theta : array_like
        Angles in [0, π].
    num_buckets : int or sequence of int
        *b*: 1 (always the same bucket) or even; or the even factors of a hierarchical hash
        (:func:`lsh_buckets`), whose blocks of columns are independent: the product of their
        probabilities.

    Returns
    -------
    ndarray
        The probability, of theta's shape.

    Notes
    -----
    Derivation. Column t of R gives the pair :math:`(X_t, Y_t) = (x\cdot r_t,\ y\cdot r_t)`, a
    standard bivariate normal pair of correlation :math:`x\cdot y = \cos\theta`, independent across
    columns and whatever d is. The bucket of x is the column of largest :math:`|X_t|` with the sign of
    :math:`X_t` there. By the symmetry of the b buckets the collision probability is b times that of
    both vectors landing in bucket 0:
    :math:`b\,P(X_0 > |X_t|,\ Y_0 > |Y_t|\ \forall t > 0) = b\,E\big[1\{X_0, Y_0 > 0\}\, G(X_0, Y_0)^{b/2-1}\big]`.

    - b = 2: :math:`2\,P(X_0 > 0, Y_0 > 0) = 1 - \theta/\pi` (Charikar's random hyperplane).
    - b = 4: the four differences :math:`X_0 \mp X_1`, :math:`Y_0 \mp Y_1` form two independent pairs
      :math:`(X_0 - X_1, Y_0 - Y_1)` and :math:`(X_0 + X_1, Y_0 + Y_1)`, each of correlation cos θ, so
      :math:`P_4 = 4\,\big(\tfrac{\pi - \theta}{2\pi}\big)^2 = (1 - \theta/\pi)^2`.
    - b ≥ 6: with :math:`X_0 = r\cos\varphi`, :math:`Y_0 = r\cos(\varphi - \theta)` (polar
      coordinates of the independent normals behind them, density :math:`r e^{-r^2/2}/2\pi`), the
      quadrant is :math:`\theta - \pi/2 < \varphi < \pi/2`, symmetric about θ/2 (swapping x and y).
      G comes from Owen's T function, whose arguments in these coordinates are
      :math:`\tan\varphi`, :math:`\tan(\theta - \varphi)` and, for the opposite orthant, the same
      plus :math:`2\cot\theta` (no cancellation as θ → 0); the integral is a 96 × 192 Gauss–Legendre
      rule over φ and r ∈ [0, 12] (beyond, the density is below 1e-31). Against 300 × 600-point rules
      the absolute error is below 1e-12 for b ≤ 4096 and every θ; at θ = π/2 the value is 1/b
      (independent projections), the tests' check.

    This is one round; a pair meets in at least one of :math:`n_\text{rounds}` independent rounds
    with probability :math:`1 - (1 - P_b)^{n_\text{rounds}}`.

    References
    ----------
    .. [1] N. Kitaev, Ł. Kaiser, A. Levskaya, "Reformer: The Efficient Transformer", ICLR 2020,
       arXiv:2001.04451v2, §2 and Fig. 1.
    .. [2] A. Andoni et al., "Practical and Optimal LSH for Angular Distance", NeurIPS 2015,
       arXiv:1509.02897v1 (the hash: argmax over the signed projections).
    .. [3] M. Charikar, "Similarity Estimation Techniques from Rounding Algorithms", STOC 2002.
    .. [4] D. B. Owen, "Tables for computing bivariate normal probabilities", Ann. Math. Statist.
       27 (1956), 1075–1090.

    Examples
    --------
    >>> float(lsh_collision_probability(np.pi / 3, 2))
    0.6666666666666667
    >>> round(float(lsh_collision_probability(np.pi / 2, 8)), 12)    # independent at a right angle: 1/b
    0.125
    """
    from scipy.special import ndtr, owens_t

    theta = as_float("theta", theta)
    if not np.all(np.abs(theta - np.pi / 2) <= np.pi / 2):
        raise ValueError(f"theta must lie in [0, pi], got {theta[~(np.abs(theta - np.pi / 2) <= np.pi / 2)][:3]}")
    probability = np.ones_like(theta)
    for f in _bucket_factors(num_buckets):                          # independent blocks of columns
        probability = probability * _collision(theta, f, ndtr, owens_t)
    return probability


def _collision(theta: NDArray, b: int, ndtr, owens_t) -> NDArray:
    """One flat hash of b buckets: the closed forms for b ≤ 4, else the integral."""
    if b <= 4:
        return (1.0 - theta / np.pi) ** (b // 2)                   # b = 2: 1 − θ/π, b = 4: (1 − θ/π)²
    phi_rule, r_rule = np.polynomial.legendre.leggauss(96), np.polynomial.legendre.leggauss(192)
    result = np.empty(theta.shape)
    for index, t in np.ndenumerate(theta):
        if t in (0.0, np.pi):                                      # the same vector, or opposite ones
            result[index] = 1.0 if t == 0.0 else 0.0
            continue
        half = (np.pi / 2 - t / 2) / 2                             # φ ∈ [θ/2, π/2]
        phi = (t / 2 + half * (phi_rule[0] + 1))[:, None]          # (96, 1)
        r = (6.0 * (r_rule[0] + 1))[None, :]                       # (1, 192)  r ∈ [0, 12]
        x, y = r * np.cos(phi), r * np.cos(phi - t)                # X_0, Y_0
        a, c = (np.tan(phi), np.tan(t - phi)), 2 / math.tan(t)
        tails = 0.5 * (ndtr(-x) + ndtr(-y))
        same = tails - owens_t(x, a[0]) - owens_t(y, a[1])         # P(X > x, Y > y), correlation cos θ
        opposite = tails - owens_t(x, c + a[0]) - owens_t(y, c + a[1])   # P(X > x, −Y > y)
        G = np.clip(1 - 2 * ndtr(-x) - 2 * ndtr(-y) + 2 * (same + opposite), 0.0, 1.0)   # P(|X| < x, |Y| < y)
        inner = (r * np.exp(-r * r / 2) * G ** (b // 2 - 1)) @ (6.0 * r_rule[1])      # ∫ dr
        result[index] = 2 * b / (2 * np.pi) * half * (inner @ phi_rule[1])   # both halves of φ, density 1/2π
    return result


@renamed(n_buckets="num_buckets", n_rounds="num_rounds")
def reformer_lsh_attention(
    qk: ArrayLike,
    v: ArrayLike,
    *,
    num_buckets=None,
    num_rounds: int | None = None,
    chunk_length: int | None = None,
    causal: bool | str = False,
    scale: float | None = None,
    rng: np.random.Generator | int | None = None,
    rotations: ArrayLike | None = None,
    attend_across_buckets: bool = False,
    allow_duplicate_attention: bool = False,
    wrap: bool = False,
    method: str = "auto",
    return_weights: bool = False,
    return_allowed: bool = True,
) -> NDArray | tuple[NDArray, NDArray, NDArray] | tuple[NDArray, NDArray]:
    r"""Reformer's multi-round LSH attention with shared queries and keys.

    .. math::

        o_i = \sum_r e^{z_i^{(r)} - z_i} \sum_{j \in P_i^{(r)} \cap U_i}
              e^{s_{ij} - \log N_{ij} - z_i^{(r)}}\, v_j, \qquad
        s_{ij} = \text{scale}\cdot q_i \cdot \frac{q_j}{\|q_j\|}

    (the module docstring defines the sets: same bucket, same or previous chunk of the sorted
    order, self only when alone, N_ij the number of rounds that computed the pair).

    Parameters
    ----------
    qk : (..., n, d) array_like
        The shared queries; the keys are :math:`k_j = q_j/\|q_j\|` (0 for a zero query).
    v : (..., n, d_v) array_like
        Values.
    num_buckets : int or sequence of int, optional
        *b*: even, or 1 (one bucket: no hashing); or a sequence of even factors, hashed
        hierarchically (:func:`lsh_buckets`) into their product at the cost O(n·d·Σ f_i) instead of
        O(n·d·b). Default: trax's ``LSHSelfAttention`` rule for its chunks of 128,
        :math:`b = 2\max(1, \lfloor n/128 \rfloor)`, factored above 128 buckets into
        :math:`(2^{\lceil \log_2 \sqrt b \rceil},\ 2\lfloor b / 2^{\lceil \log_2 \sqrt b \rceil + 1}
        \rfloor)`, so that c stays near 128 as n grows; with ``rotations`` given, that count if they
        hold its columns (so a draw fed back is read as drawn), else a flat hash of twice their
        columns.
    num_rounds : int, optional
        Hash rounds (the official code's ``n_hashes``). Default 2, or the number ``rotations`` holds.
    chunk_length : int, optional
        *c*. Default :math:`\lceil 2n/b \rceil`, the paper's :math:`m = 2l/n_\text{buckets}` (twice
        the average bucket). Any n works: the last chunk of the sorted order is shorter.
    causal : {False, True, "top-left", "bottom-right"}, default False
        Mask the keys after each query by original position (§2, "Causal masking"); with one
        sequence both alignments are the same mask.
    scale : float, optional
        Multiplier of :math:`q_i \cdot k_j`. Default :math:`1/\sqrt{d}`, Eq. (1) of the paper
        applied to the unit keys (the PyTorch port's choice); the trax code's scores are
        :math:`q_i\cdot k_j` with the unit keys unscaled: ``scale=1.0``.
    rng : numpy.random.Generator or int, optional
        Source of the rotations when ``rotations`` is not given (unused otherwise).
    rotations : (..., num_rounds, d, b/2) array_like, optional
        An explicit draw (:func:`draw_lsh_rotations`); leading dims broadcast with qk's (one draw
        per head, say). Finite.
    attend_across_buckets : bool, default False
        False: the paper's :math:`P_i = \{j : h(k_j) = h(k_i)\}` within the chunks. True: every
        pair of the two chunks (trax's ``LSHSelfAttention`` and the PyTorch port's default).
    allow_duplicate_attention : bool, default False
        False: subtract :math:`\log N_{ij}` (the paper's multi-round formula and the first trax
        code's default). True: count a pair once per round that computed it (trax's
        ``LSHSelfAttention`` and the PyTorch port's default).
    wrap : bool, default False
        False: the first chunk of the sorted order attends only itself (the paper's
        :math:`\tilde P_i`). True: it also attends the round's last chunk, as the official code's
        wrap-around "look one back" does (with one chunk, nothing changes).
    method : {"equation", "csr", "auto"}, default "auto"
        "equation": every round's dense n × n pair sets, a masked softmax per round and the rounds'
        LSE merge (the paper's formula; small n). "csr": the pairs each chunk's window computes,
        listed in O(num_rounds·n·c) and attended by the CSR kernel (their LSE merge with the count is
        softmax over their union), never n × n. "auto" is "csr": the paper's algorithm is the
        cheaper one at every n (the dense path holds num_rounds + 4 arrays of n × n).
    return_weights : bool, default False
        Also return the effective (..., n, n) weights and the pairs computed in any round.
    return_allowed : bool, default True
        With ``return_weights``, also return those pairs (False: ``(out, weights)``, the pairs noted for the
        registry's ``AttentionResult.allowed``, as its record asks).

    Returns
    -------
    out : (..., n, d_v) ndarray
    weights : (..., n, n) ndarray
        Only with ``return_weights``: the rounds' weights merged as the outputs are, exactly 0
        outside ``allowed``. Rows sum to 1.
    allowed : (..., n, n) ndarray of bool
        Only with ``return_weights`` and ``return_allowed``: :math:`U_i`, the pairs some round computed
        (after the rule on self).

    Notes
    -----
    Paper and official code (google/trax ``trax/layers/research/efficient_attention.py``: the first
    ``LSHCausalAttention``, released with the paper and removed in April 2020, and its successor
    ``LSHSelfAttention``; and lucidrains/reformer-pytorch ``LSHAttention``):

    - *Self.* The code subtracts 1e5 from the score of a token with itself (the PyTorch port 5e4),
      so self weighs :math:`e^{-10^5}`, 0 in floating point, wherever the token has another key, in
      its own round or, through the merge, in another one. Here the pair is removed by selection
      unless the token has no other pair in any round: the same result without a magic number. With
      ``causal``, the first token always attends itself.
    - *Scale and normalisation.* Keys only are normalised; the code's comment: unnormalised
      queries "effectively provide a learnable temperature". trax divides the keys by
      :math:`\sqrt{\operatorname{mean}(q^2) + 10^{-6}}` and then by :math:`\sqrt d`, i.e. unit
      keys unscaled; the PyTorch port scales the unit keys' scores by :math:`1/\sqrt d`.
    - *Chunks.* trax ``LSHSelfAttention`` has ``chunk_len=128`` and derives
      :math:`b = 2\max(1, \lfloor n/c \rfloor)`, the paper's c = 2n/b; the first trax code
      (``n_bins = num_buckets = 64``: 64 chunks a round) and the PyTorch port (``bucket_size=64`` = c,
      b = n/64) use c = n/b. The official code concatenates the rounds before chunking, so its
      first chunk of round r looks back into the last chunk of round r − 1 (and the very first
      into the last of the last round). Under the paper's same-bucket rule those pairs are masked
      (bucket ids differ by round) and ``wrap=True`` chunks as that code does; across buckets
      (trax ``LSHSelfAttention``, the port's default) the code also attends those pairs of two
      rounds, which refattn does not reproduce (with one round it does). The code needs c to divide
      n (a reshape; the port asserts it); here the last chunk is shorter.
    - *Rounds.* trax ``n_hashes=1``, the PyTorch port 8 (4 in ``ReformerLM``); the paper's
      experiments use 1 to 8 (§5, Fig. 4). The default here, 2, shows the merge. The default
      bucket count is trax's (chunks of about 128); the PyTorch port fixes c = 64 instead.

    Cost: hashing O(num_rounds·n·d·Σ f_i) (b for a flat hash), sorting O(num_rounds·n log n), attention
    O(num_rounds·n·c·d): with c fixed and b ∝ n in two factors of order √n, O(n·√n·d) for the hash,
    O(n log n) for the sort and O(n) for the attention.

    Non-finite input: a query with NaN or Inf gives a NaN key; it is hashed to bucket 0 and reaches
    exactly the rows whose ``allowed`` holds it, which are NaN. A visible score that is not finite
    makes its row NaN. Changing later tokens changes output i under ``causal=True`` (the chunk
    boundaries move), though their weights stay exactly 0.

    References
    ----------
    .. [1] N. Kitaev, Ł. Kaiser, A. Levskaya, "Reformer: The Efficient Transformer", ICLR 2020,
       arXiv:2001.04451v2, §2 (LSH attention, multi-round LSH attention, causal masking for
       shared-QK attention) and §5 (Fig. 4).
    .. [2] T. Lin et al., "A Survey of Transformers", arXiv:2106.04554v2, §4.1.2.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> qk, v = rng.standard_normal((2, 12, 4))
    >>> out, A, allowed = reformer_lsh_attention(qk, v, num_buckets=4, num_rounds=2, rng=1, return_weights=True)
    >>> out.shape, bool(np.allclose(A.sum(axis=-1), 1.0)), bool(np.all(A[~allowed] == 0))
    ((12, 4), True, True)
    >>> full, A1, _ = reformer_lsh_attention(qk, v, num_buckets=1, num_rounds=1, rng=1, return_weights=True)
    >>> bool(np.all(np.diag(A1) == 0))                             # one bucket, one chunk: all but self
    True
    """
    check_choice("method", method, METHODS)
    return_weights = check_bool("return_weights", return_weights)
    return_allowed = check_bool("return_allowed", return_allowed)
    options = {name: check_bool(name, value) for name, value in (
        ("attend_across_buckets", attend_across_buckets), ("allow_duplicate_attention", allow_duplicate_attention),
        ("wrap", wrap))}
    alignment = causal_alignment(causal)
    qk, v = as_float("qk", qk), as_float("v", v)
    for name, x in (("qk", qk), ("v", v)):
        if x.ndim < 2:
            raise ValueError(f"{name} must have shape (..., n, dim), got shape {x.shape}")
    if qk.shape[-2] != v.shape[-2]:
        raise ValueError(f"qk has n={qk.shape[-2]} tokens but v has {v.shape[-2]} (qk shape {qk.shape}, "
                         f"v shape {v.shape})")
    n, d = qk.shape[-2:]
    scale = default_scale(d) if scale is None else check_scale(scale)
    if num_buckets is None and rotations is None:
        num_buckets = _default_buckets(n)
    rotations = _checked_rotations(given_or_drawn(
        "reformer_lsh", "rotations", rotations, optional_rng(rng), what="its hash rotations",
        draw=lambda r: draw_lsh_rotations(r, d, num_buckets, DEFAULT_ROUNDS if num_rounds is None else num_rounds)),
        d, num_buckets, num_rounds)
    batch = broadcast_batch({"qk": qk.shape[:-2], "v": v.shape[:-2], "rotations": rotations.shape[:-3]})
    factors = _factors_of(num_buckets, rotations.shape, n)
    b = math.prod(factors)
    c = max(1, math.ceil(2 * n / b)) if chunk_length is None else check_positive_int("chunk_length", chunk_length)
    R = rotations.shape[-3]
    if return_weights:
        check_fits("the dense weights (return_weights=True)", (*batch, n, n))
    method = "csr" if method == "auto" else method
    if method == "equation":
        check_fits("the dense per-round scores (method='equation')", (*batch, R, n, n))

    B = math.prod(batch)
    qk = np.broadcast_to(qk, (*batch, n, d)).reshape(B, n, d)
    v = np.broadcast_to(v, (*batch, n, v.shape[-1])).reshape(B, n, v.shape[-1])
    rotations = np.broadcast_to(rotations, (*batch, *rotations.shape[-3:])).reshape(B, *rotations.shape[-3:])
    norm = np.sqrt(np.sum(qk * qk, axis=-1, keepdims=True))        # (B, n, 1)  ‖q_j‖
    with np.errstate(invalid="ignore", divide="ignore"):
        k = np.where(norm == 0, 0.0, qk / np.where(norm == 0, 1.0, norm))   # (B, n, d)  k_j = q_j/‖q_j‖
    buckets = lsh_buckets(k, rotations, factors or 1)              # (B, R, n)  h^(r)(k_j)
    order, chunk = lsh_chunks(buckets, c)                          # (B, R, n) each
    rounds = _Rounds(buckets, chunk, c, -(-n // c), alignment is not None, **options)
    run = _equation if method == "equation" else _csr
    with np.errstate(invalid="ignore", over="ignore"):             # non-finite input: NaN rows, as documented
        out, weights, allowed = run(qk, k, v, order, rounds, scale, return_weights)
    out = out.reshape(*batch, n, v.shape[-1])
    if not return_weights:
        return out
    weights, allowed = weights.reshape(*batch, n, n), allowed.reshape(*batch, n, n)
    if return_allowed:
        return out, weights, allowed
    note_allowed(allowed)
    return out, weights


class _Rounds:
    """Which pairs each hash round computes, from every token's bucket and chunk in every round."""

    def __init__(self, buckets, chunk, chunk_length, n_chunks, causal, *, attend_across_buckets,
                 allow_duplicate_attention, wrap):
        self.buckets, self.chunk, self.causal = buckets, chunk, causal                # (B, R, n) each
        self.chunk_length, self.n_chunks = chunk_length, n_chunks
        self.across, self.duplicates, self.wrap = attend_across_buckets, allow_duplicate_attention, wrap

    def together(self, r, i, j):
        """Round r computes (query i, key j), positions as index arrays (B, ...): j's chunk is i's or the one
        before it (with ``wrap``, the last before the first), j is in i's bucket unless across buckets, and
        j ≤ i if causal. The rule on self is the caller's."""
        c_i, c_j = _at(self.chunk[:, r], i), _at(self.chunk[:, r], j)
        pair = (c_j == c_i) | (c_j == c_i - 1)                     # ⌊s_i/c⌋ − 1 ≤ ⌊s_j/c⌋ ≤ ⌊s_i/c⌋
        if self.wrap:
            pair |= (c_i == 0) & (c_j == self.n_chunks - 1)
        if not self.across:
            pair &= _at(self.buckets[:, r], i) == _at(self.buckets[:, r], j)   # h(k_i) = h(k_j)
        return pair & (j <= i) if self.causal else pair

    def element(self, b):
        """The same rounds for batch element b alone."""
        return _Rounds(self.buckets[b:b + 1], self.chunk[b:b + 1], self.chunk_length, self.n_chunks, self.causal,
                       attend_across_buckets=self.across, allow_duplicate_attention=self.duplicates, wrap=self.wrap)

    def row_pairs(self, windows, i):
        """For one batch element (``element``) and its rows i (1, rows, 1): every round's keys j of the row's chunk
        window, side by side (1, rows, R·2c), and the pairs kept: computed by the round, self only when the row has
        nothing else, each pair once unless duplicates are allowed (then once per round that computes it).
        ``windows`` (R, T, 2c) from :func:`_windows`."""
        n = self.chunk.shape[-1]
        j, pairs = [], []
        for r in range(len(windows)):
            window = windows[r][self.chunk[0, r, i[0, :, 0]]][None]   # (1, rows, 2c)  the chunk's window
            j.append(np.maximum(window, 0))
            pairs.append((window >= 0) & self.together(r, i, j[-1]))
        j, pairs = np.concatenate(j, axis=-1), np.concatenate(pairs, axis=-1)
        others = np.any(pairs & (j != i), axis=-1, keepdims=True)  # a pair besides self in some round
        pairs &= (j != i) | ~others                                # self only when alone
        if not self.duplicates:                                    # each pair once: sort the row, drop repeats
            j = np.sort(np.where(pairs, j, n), axis=-1)
            pairs = j < n
            pairs[..., 1:] &= j[..., 1:] != j[..., :-1]
        return j, pairs


def _equation(qk, k, v, order, rounds, scale, return_weights):
    """Every round's pairs as dense n × n sets, a masked softmax of s_ij − log N_ij per round, the rounds merged
    by their LSE."""
    B, n = qk.shape[:2]
    i = np.broadcast_to(np.arange(n)[:, None], (B, n, 1))
    j = np.broadcast_to(np.arange(n)[None, :], (B, 1, n))
    R = rounds.buckets.shape[1]
    pairs = np.stack([rounds.together(r, i, j) for r in range(R)])             # (R, B, n, n)  P^(r)
    others = np.any(pairs & (i != j), axis=(0, -1))                # (B, n)  a pair besides self in some round
    pairs &= (i != j) | ~others[..., None]                         # self only when alone
    S = scale * (qk @ np.swapaxes(k, -1, -2))                      # (B, n, n)  s_ij = scale · q_i·k_j
    S = np.where(np.isfinite(S), S, np.nan)                        # a score that is not finite: NaN
    if not rounds.duplicates:
        S = S - np.log(np.maximum(pairs.sum(axis=0), 1))           # s_ij − log N_ij
    parts = []
    for r in range(R):
        A, empty, lse = masked_softmax(S, pairs[r], "zero", return_lse=True)   # (B, n, n), (B, n)
        parts.append((weighted_values(A, v, pairs[r], empty, "zero"), lse, A))  # o^(r), z^(r)
    out, _ = _merge([(o, z) for o, z, _ in parts])
    if not return_weights:
        return out, None, None
    allowed = pairs.any(axis=0)                                    # U_i
    weights, _ = _merge([(A, z) for _, z, A in parts])             # the weights merge as the outputs do
    return out, np.where(allowed, weights, 0.0), allowed


def _csr(qk, k, v, order, rounds, scale, return_weights):
    """The pairs of every round, gathered row by row from each row's chunk window in O(num_rounds·n·c), then the CSR
    kernel over them as one block-diagonal pattern of the flattened batch. With the count (the default), the LSE
    merge of the rounds is softmax over their union (module docstring), so each pair is listed once; with
    duplicates allowed a pair is listed once per round that computes it, and N_ij copies weigh N_ij e^{s_ij}."""
    from ..kernels import POLICY_CODES
    from ..kernels.csr import sparse_attention_csr  # Numba loads on first use only

    B, n, d = qk.shape
    windows = _windows(order, rounds)                              # (B, R, T, 2c)
    counts, indices = [], []
    rows, index = _rows_per_block(rounds), np.int32 if B * n < 2**31 else np.int64   # the kernel takes either
    for b in range(B):                                             # rows in order: b, then position i
        one = rounds.element(b)
        for start in range(0, n, rows):
            i = np.arange(start, min(start + rows, n))[None, :, None]   # (1, rows, 1)
            j, pairs = one.row_pairs(windows[b], i)                # (1, rows, R·2c) each
            counts.append(pairs.sum(axis=-1).ravel())
            indices.append((b * n + j[pairs]).astype(index))
    indptr = np.concatenate([[0], np.cumsum(np.concatenate(counts) if counts else [])]).astype(np.int64)
    cols = np.concatenate(indices) if indices else np.zeros(0, dtype=index)
    out = np.empty((1, B * n, v.shape[-1]))
    w = np.empty((1, cols.size if return_weights else 0))
    flat = [np.ascontiguousarray(x.reshape(1, B * n, x.shape[-1])) for x in (qk, k, v)]
    sparse_attention_csr(*flat, (indptr, cols), scale, POLICY_CODES["zero"], out, w)
    out = out.reshape(B, n, v.shape[-1])
    if not return_weights:
        return out, None, None
    rows = np.repeat(np.arange(B * n), np.diff(indptr))
    dense = rows * n + cols % n                                    # (b, i, j) in the (B, n, n) weights
    weights, allowed = np.zeros(B * n * n), np.zeros(B * n * n, dtype=bool)
    np.add.at(weights, dense, w[0])                                # copies of a pair add up
    allowed[dense] = True
    return out, weights.reshape(B, n, n), allowed.reshape(B, n, n)


def _windows(order, rounds) -> NDArray:
    """Each chunk's keys, its own chunk and the previous one of the sorted order (the last before the first with
    ``wrap``): (B, R, T, 2c) positions, −1 past the end or before the first chunk."""
    B, R, n = order.shape
    T, c = rounds.n_chunks, rounds.chunk_length
    blocks = np.full((B, R, T * c), -1, dtype=np.int64)
    blocks[..., :n] = order
    blocks = blocks.reshape(B, R, T, c)                            # positions chunk by chunk
    before = np.full_like(blocks, -1)
    before[:, :, 1:] = blocks[:, :, :-1]
    if rounds.wrap and T > 1:
        before[:, :, 0] = blocks[:, :, -1]
    return np.concatenate([before, blocks], axis=-1)


def _rows_per_block(rounds) -> int:
    """Rows gathered at a time, so that their (rows, R·2c) index arrays stay within 32 MiB."""
    return max(1, _GROUP_BYTES // (8 * 4 * rounds.buckets.shape[1] * 2 * rounds.chunk_length))


def _merge(parts):
    """Fold (output, lse) pairs of the rounds with the log-sum-exp merge."""
    out, lse = parts[0]
    for out_r, lse_r in parts[1:]:
        out, lse = merge_attention(out, lse, out_r, lse_r)
    return out, lse


def _at(table: NDArray, index: NDArray) -> NDArray:
    """``table[b, index[b, ...]]`` for a per-batch table (B, n) and an index array (B, ...)."""
    B, rest = table.shape[0], index.shape[1:]
    flat = np.broadcast_to(index, (B, *rest)).reshape(B, math.prod(rest))
    return np.take_along_axis(table, flat, axis=1).reshape(B, *rest)


def _bucket_factors(num_buckets) -> tuple[int, ...]:
    """The factors of a bucket count: () for 1, (b,) for an even int, the sequence itself if all even."""
    if isinstance(num_buckets, (list, tuple)):
        factors = tuple(check_size("num_buckets", f, positive=True) for f in num_buckets)
        if not factors or any(f % 2 for f in factors):
            raise ValueError(f"num_buckets as factors must be a non-empty sequence of even ints, got {num_buckets!r}")
        return factors
    b = check_size("num_buckets", num_buckets, positive=True)
    if b != 1 and b % 2:
        raise ValueError(f"num_buckets must be even (argmax over [xR; −xR], b/2 columns) or 1, got {b}")
    return () if b == 1 else (b,)


def _factors_of(num_buckets, shape: tuple[int, ...], n: int | None = None) -> tuple[int, ...]:
    """The factors of the hash that rotations of ``shape`` (…, R, d, columns) carry out: ``num_buckets``'s, checked
    against the columns; without it, the default count at length n if the rotations hold its columns, else a flat
    hash of twice their columns."""
    if num_buckets is None:
        default = () if n is None else _bucket_factors(_default_buckets(n))
        if n is not None and sum(f // 2 for f in default) == shape[-1]:
            return default
        return (2 * shape[-1],) if shape[-1] else ()
    factors = _bucket_factors(num_buckets)
    if sum(f // 2 for f in factors) != shape[-1]:
        raise ValueError(f"num_buckets={num_buckets!r} needs rotations with {sum(f // 2 for f in factors)} columns, "
                         f"got shape {shape}")
    return factors


def _default_buckets(n: int):
    """trax ``LSHSelfAttention.hash_vectors``' bucket count for chunks of 128: 2·max(1, ⌊n/128⌋), in two even
    factors above 128."""
    b = 2 * max(1, n // TRAX_CHUNK)
    if b <= 128:
        return b
    first = 2 ** math.ceil(math.log2(math.sqrt(b)))
    return (first, 2 * (b // (2 * first)))


def _checked_rotations(rotations, d: int, num_buckets, num_rounds) -> NDArray:
    """The rotations (given or drawn) checked against d, num_buckets and num_rounds."""
    rotations = as_float("rotations", rotations, min_ndim=3)
    if rotations.shape[-2] != d:
        raise ValueError(f"rotations must have shape (..., num_rounds, d={d}, b/2), got shape {rotations.shape}")
    if not np.all(np.isfinite(rotations)):
        raise ValueError(f"rotations must be finite (shape {rotations.shape})")
    if num_buckets is not None:
        _factors_of(num_buckets, rotations.shape)
    if num_rounds is not None and check_positive_int("num_rounds", num_rounds) != rotations.shape[-3]:
        raise ValueError(f"num_rounds={num_rounds} but rotations holds {rotations.shape[-3]} rounds "
                         f"(shape {rotations.shape})")
    if rotations.shape[-3] == 0:
        raise ValueError(f"rotations must hold at least one round, got shape {rotations.shape}")
    return rotations


RECORD = Mechanism.of(
    reformer_lsh_attention, inputs=("qk", "qk", "v"),               # k is q (shared QK, checked by the record)
    fixed={"return_allowed": False},
    id="reformer_lsh", title="Reformer LSH attention", family="sparse", section="4.1.2",
    paper='N. Kitaev, Ł. Kaiser, A. Levskaya, 2020, "Reformer: The Efficient Transformer", arXiv:2001.04451',
    equation=r"o_i = \sum_r e^{z_i^{(r)} - z_i} \sum_{j \in P_i^{(r)}} e^{q_i \cdot k_j - \log N_{ij} - z_i^{(r)}} v_j,"
             r"\ h(x) = \arg\max [xR; -xR],\ k_j = q_j/\|q_j\|",
    time="O(num_rounds·n·(c·d + log n + d·Σf))", memory="O(num_rounds·n·c)", kind="attention",
    methods=("equation", "csr", "auto"),
    examples=({"num_rounds": 1, "num_buckets": 2, "chunk_length": 3},
              {"attend_across_buckets": True, "allow_duplicate_attention": True, "wrap": True, "num_buckets": 4,
               "chunk_length": 2},
              {"num_rounds": 3, "scale": 1.0, "num_buckets": (2, 4)}),
    causal=True, incremental=False, cross=False,
    position_dependent=True, shared_qk=True, content_selected=True, future_independent=False,
    figure="refattn.figures.reformer_lsh:reformer_lsh",
    exact_options=None,
    exact_limit="none as softmax(q kᵀ) on (q, k, v): the keys are q/‖q‖ and self is excluded; with one bucket "
                "and one chunk it equals shared-QK full attention with the same exclusion",
    draws=("rotations",),
)
