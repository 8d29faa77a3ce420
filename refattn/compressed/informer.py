r"""Informer's ProbSparse attention (Zhou et al., 2021, arXiv:2012.07436v3, §3.2; survey §4.3.1).

    s_ij = q_i·k_j / √d                                                  scores
    M(q_i, K) = ln Σ_j e^{s_ij} − (1/m) Σ_j s_ij                         query sparsity measure    (Eq. 2)
    M̄(q_i, K) = max_j s_ij − (1/m) Σ_j s_ij                              its max-mean bound        (Eq. 4)
    K_i = (K_i1 … K_iU), U = ⌈c ln m⌉ keys drawn uniformly, with replacement     query i's sample
    M̄_i = max_t s_{i,K_it} − (1/U) Σ_t s_{i,K_it}                        M̄ on the sample (Algorithm 1)
    Top = the u = ⌈c ln n⌉ queries of largest M̄_i                       the active queries
    out_i = Σ_j softmax_j(s_ij) v_j                  i ∈ Top             (Eq. 3)
    out_i = (1/m) Σ_j v_j                            i ∉ Top             the lazy queries

    causal (the decoder's masked form): an active row's softmax runs over j ≤ i, a lazy row outputs
    the running mean (1/(i+1)) Σ_{j≤i} v_j; the sample and the choice of the u active queries are
    the same as above, over all positions.

Lemma 1 bounds the measure, ln m ≤ M(q_i, K) ≤ M̄(q_i, K) + ln m: a query far from uniform
attention (a large measure) is one that the max-mean picks out, and the max-mean needs only a
few scores per query. The queries whose attention is close to uniform are replaced by the uniform
answer, the mean of the values: their output is one shared prototype (the survey's §4.3.1, query
prototyping), and only u ≈ c ln n rows of n × m scores are computed.

Every random draw is explicit: :func:`draw_sampled_keys` draws the sample K (one (n, U) array of key
indices, shared by every batch element and head, as the official code draws it), and
:func:`informer_attention` takes it back as ``sampled_keys=``. :func:`query_sparsity` and
:func:`top_queries` are the measure and the choice on their own, for plots and for comparing
another implementation's choice.
"""
from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.budget import check_fits
from ..common.checks import (
    as_float,
    as_rng,
    causal_alignment,
    check_bool,
    check_choice,
    check_qkv,
    check_scale,
    check_sizes,
    checked_qkv,
    default_scale,
)
from ..common.ints import check_non_negative_int, check_positive_int
from ..common.products import scores
from ..core.sdpa import scaled_dot_product_attention
from ..draws import given_or_drawn, optional_rng
from ..mechanism import Mechanism
from ..sparse.pattern import as_indices

__all__ = ["draw_sampled_keys", "informer_attention", "informer_counts", "query_sparsity", "top_queries"]

INFORMER = ('H. Zhou et al., 2021, "Informer: Beyond Efficient Transformer for Long Sequence Time-Series '
            'Forecasting", arXiv:2012.07436')
COUNTS = ("paper", "official", "official-v1")
MEASURES = ("paper", "official")
LAZY = ("paper", "official")
SAMPLE_FROM = ("all", "visible")
KINDS = ("max_mean", "lse")
METHODS = ("equation", "blocked", "auto")


def informer_counts(n: int, m: int, *, factor: int = 5, counts: str = "paper") -> tuple[int, int]:
    r"""The number of active queries *u* and of sampled keys per query *U*, from the sampling factor *c*.

    .. math::

        u = \min(n, \lceil c \ln n \rceil), \qquad U = \min(m, \max(1, \lceil c \ln m \rceil))

    Parameters
    ----------
    n : int
        Number of queries (:math:`L_Q` in the paper).
    m : int
        Number of keys (:math:`L_K`).
    factor : int, default 5
        The sampling factor *c* (the official ``factor``, 5 by default there too).
    counts : {"paper", "official", "official-v1"}, default "paper"
        "paper": as above. "official": :math:`u = c \lceil \ln n \rceil` and
        :math:`U = c \lceil \ln m \rceil` (``ProbAttention.forward`` in ``models/attn.py``).
        "official-v1": the first release's counts, with *n* and *m* exchanged,
        :math:`u = c \lceil \ln m \rceil` and :math:`U = c \lceil \ln n \rceil` (Informer2020
        issue #35; see Notes). Every form is capped at *n* and *m* and keeps :math:`U \ge 1` when
        :math:`m \ge 1`.

    Returns
    -------
    u : int
        Active queries, ``0 <= u <= n``.
    U : int
        Sampled keys per query, ``1 <= U <= m`` (0 when m = 0).

    Notes
    -----
    The paper sets :math:`u = c \ln L_Q` (§3.2) without saying how it is rounded, and counts the
    sampled scores in total: :math:`U = L_K \ln L_Q` pairs (§3.2). The official code draws
    :math:`c \lceil \ln L_K \rceil` keys for every query, with the same factor *c*, and rounds
    both counts as "official" does; the caps come from the same code (commit 7b737c3). With
    :math:`m = 1` its :math:`c \lceil \ln 1 \rceil = 0` leaves the measure without a score; one
    key is drawn here.

    The first release (Informer2020 commit 89aca08, until b1db53f of 2021-02-26) passed the two
    counts to ``_prob_QK`` in each other's places: ``n_top`` (the active queries) was
    :math:`c \lceil \ln L_K \rceil` and ``sample_k`` :math:`c \lceil \ln L_Q \rceil`. Issue #35
    reported it and the authors answered "Setting u to n_top is correct, and that is our mistake".
    The two forms differ only when L_Q != L_K, the case where, as issue #257 reports, the official
    ``_prob_QK`` breaks; "official-v1" reproduces that release's counts (capped: its
    ``torch.topk`` raised when :math:`c \lceil \ln L_K \rceil > L_Q`).

    References
    ----------
    .. [1] H. Zhou et al., "Informer: Beyond Efficient Transformer for Long Sequence Time-Series
       Forecasting", AAAI 2021, arXiv:2012.07436v3, §3.2.
    .. [2] zhouhaoyi/Informer2020, ``models/attn.py``, ``ProbAttention.forward``; issue #35.

    Examples
    --------
    Informer's encoder input of 96 steps:

    >>> informer_counts(96, 96), informer_counts(96, 96, counts="official")
    ((23, 23), (25, 25))
    >>> informer_counts(48, 96, counts="official"), informer_counts(48, 96, counts="official-v1")
    ((20, 25), (25, 20))
    """
    n, m = check_sizes(n, m)
    factor = check_positive_int("factor", factor)
    check_choice("counts", counts, COUNTS)
    if counts == "paper":
        u, U = math.ceil(factor * _ln(n)), math.ceil(factor * _ln(m))   # ⌈c ln n⌉, ⌈c ln m⌉
    else:
        u, U = factor * math.ceil(_ln(n)), factor * math.ceil(_ln(m))   # c⌈ln n⌉, c⌈ln m⌉
        if counts == "official-v1":
            u, U = U, u
    return min(u, n), min(max(U, 1), m)


def _ln(x: int) -> float:
    """ln x for a length, 0 for an empty one (which has nothing to count)."""
    return math.log(x) if x else 0.0


def draw_sampled_keys(rng, n: int, m: int, num_samples: int, *, causal: bool | str = False,
                      sample_from: str = "all") -> NDArray:
    r"""Draw the keys each query's sparsity measure is evaluated on: uniform, with replacement.

    .. math::

        K_{it} \sim \mathcal{U}\{0, \dots, m - 1\}, \quad t = 1 \dots U, \text{ independently}

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw.
    n : int
        Number of queries.
    m : int
        Number of keys.
    num_samples : int
        *U*, keys per query (with replacement: a key may appear more than once in a row).
    causal : {False, True, "top-left"}, default False
        With ``sample_from="visible"``, query *i* draws from the keys ``j <= i`` only.
    sample_from : {"all", "visible"}, default "all"
        "all": every query draws from all *m* keys, later ones too in the causal form (the paper
        and the official code). "visible": from the keys the query may attend to (``j <= i`` when
        causal; all keys otherwise).

    Returns
    -------
    sampled_keys : (n, U) ndarray of int64

    Notes
    -----
    The draw is ``rng.integers(0, high, size=(n, U))`` with ``high = m`` ("all") or ``high[i] =
    min(i + 1, m)`` ("visible", causal), so another implementation can reproduce it from the same
    ``numpy.random.Generator``. The official code draws ``torch.randint(L_K, (L_Q, sample_k))``:
    uniform with replacement, one array shared by every batch element and head, as here. Nothing
    is drawn (and ``rng`` is not advanced) when n, U or m is 0.

    Examples
    --------
    >>> draw_sampled_keys(0, 4, 6, 3).shape
    (4, 3)
    >>> S = draw_sampled_keys(0, 5, 5, 4, causal=True, sample_from="visible")
    >>> bool(np.all(S <= np.arange(5)[:, None]))
    True
    """
    rng = as_rng(rng)
    n, m = check_sizes(n, m)
    U = check_non_negative_int("num_samples", num_samples)
    alignment = _top_left(causal)
    check_choice("sample_from", sample_from, SAMPLE_FROM)
    if n == 0 or U == 0:
        return np.zeros((n, U), dtype=np.int64)
    if m == 0:
        raise ValueError(f"cannot draw num_samples={U} keys per query from m=0 keys")
    high = np.minimum(np.arange(n) + 1, m)[:, None] if alignment and sample_from == "visible" else m
    return rng.integers(0, high, size=(n, U), dtype=np.int64)


def query_sparsity(q: ArrayLike, k: ArrayLike, sampled_keys: ArrayLike | None = None, *, kind: str = "max_mean",
                   measure: str = "paper", scale: float | None = None) -> NDArray:
    r"""The query sparsity measure of every query: exact (Eq. 2), its max-mean bound (Eq. 4), or sampled.

    .. math::

        M(q_i, K) = \ln \sum_{j=1}^{m} e^{s_{ij}} - \frac{1}{m} \sum_{j=1}^{m} s_{ij}, \qquad
        \bar M(q_i, K) = \max_j s_{ij} - \frac{1}{m} \sum_{j=1}^{m} s_{ij}, \qquad
        s_{ij} = \mathrm{scale} \cdot q_i \cdot k_j

    and with a sample, :math:`\bar M_i = \max_t s_{i,K_{it}} - \frac{1}{U} \sum_t s_{i,K_{it}}`.

    Parameters
    ----------
    q : (..., n, d) array_like
        Queries.
    k : (..., m, d) array_like
        Keys, m >= 1.
    sampled_keys : (n, U) array_like of int, optional
        Each query's sampled keys (:func:`draw_sampled_keys`); default every key once (the
        dense definitions, which hold n × m scores).
    kind : {"max_mean", "lse"}, default "max_mean"
        :math:`\bar M` (Eq. 4) or :math:`M` (Eq. 2, the Kullback-Leibler divergence of the query's
        attention from uniform up to the constant ln m; every key, no sample).
    measure : {"paper", "official"}, default "paper"
        With a sample, the mean of its U scores ("paper"), or their sum divided by m
        ("official", see :func:`informer_attention`).
    scale : float, optional
        Multiplier of the dot products; default :math:`1/\sqrt{d}`.

    Returns
    -------
    M : (..., n) ndarray
        NaN where a score is not finite (an Inf or NaN in the query or a key it reads, or an
        overflowing dot product).

    References
    ----------
    .. [1] H. Zhou et al., "Informer: Beyond Efficient Transformer for Long Sequence Time-Series
       Forecasting", AAAI 2021, arXiv:2012.07436v3, §3.2, Eq. (2), Lemma 1, Eq. (4).

    Examples
    --------
    Lemma 1: ln m ≤ M ≤ M̄ + ln m.

    >>> rng = np.random.default_rng(0)
    >>> q, k = rng.standard_normal((2, 6, 4))
    >>> M, Mbar = query_sparsity(q, k, kind="lse"), query_sparsity(q, k)
    >>> bool(np.all(np.log(6) <= M) and np.all(M <= Mbar + np.log(6)))
    True
    """
    check_choice("kind", kind, KINDS)
    check_choice("measure", measure, MEASURES)
    q, k = as_float("q", q, min_ndim=2), as_float("k", k, min_ndim=2)
    check_qkv(q, k, k)
    n, m = q.shape[-2], k.shape[-2]
    if m == 0:
        raise ValueError(f"the query sparsity measure needs at least one key, got k shape {k.shape}")
    scale = default_scale(q.shape[-1]) if scale is None else check_scale(scale)
    if sampled_keys is not None:
        if kind != "max_mean":
            raise ValueError(f"kind={kind!r} is defined over every key: pass sampled_keys=None, or kind='max_mean'")
        return _sampled_measure(q, k, _check_sample(sampled_keys, n, m, None, "all"), scale, measure)
    check_fits("the scores of every query and key (sampled_keys=None)", (*np.broadcast_shapes(q.shape[:-2],
               k.shape[:-2]), n, m))
    s = scores(q, k, scale)                                        # (..., n, m)  s_ij = q_i·k_j/√d
    mean = s.mean(axis=-1)                                         # (..., n)  (1/m) Σ_j s_ij
    top = s.max(axis=-1)                                           # (..., n)  max_j s_ij
    if kind == "max_mean":
        return top - mean
    return top + np.log(np.exp(s - top[..., None]).sum(axis=-1)) - mean   # ln Σ_j e^{s_ij} − mean


def top_queries(M: ArrayLike, u: int) -> NDArray:
    r"""The u queries of largest sparsity measure, in increasing order of position.

    .. math::

        \mathrm{Top} = \operatorname{arg\,top}_u \{ \bar M_i : i = 0 \dots n - 1 \}

    Parameters
    ----------
    M : (..., n) array_like
        The measure of each query (per batch element and head).
    u : int
        How many to choose, ``0 <= u <= n``.

    Returns
    -------
    top : (..., u) ndarray of int64
        Sorted. A NaN measure ranks above every number (as ``torch.topk``, which the official code
        uses, ranks it), so a query with a non-finite score is active and its row is NaN rather
        than hidden behind the mean of the values; equal measures go to the lower position first.

    Examples
    --------
    >>> top_queries([0.5, 2.0, np.nan, 2.0, 1.0], 3)
    array([1, 2, 3])
    """
    M = as_float("M", M, min_ndim=1)
    u = check_non_negative_int("u", u)
    n = M.shape[-1]
    if u > n:
        raise ValueError(f"u={u} is more queries than there are: M has n={n} (shape {M.shape})")
    key = np.where(np.isnan(M), np.inf, M)                         # NaN first, as torch.topk
    order = np.argsort(-key, axis=-1, kind="stable")[..., :u]      # ties: the lower position first
    return np.sort(order, axis=-1).astype(np.int64)


def informer_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    factor: int = 5,
    num_top: int | None = None,
    num_samples: int | None = None,
    rng: np.random.Generator | int | None = None,
    sampled_keys: ArrayLike | None = None,
    causal: bool | str = False,
    counts: str = "paper",
    measure: str = "paper",
    lazy: str = "paper",
    sample_from: str = "all",
    scale: float | None = None,
    method: str = "auto",
    return_weights: bool = False,
) -> NDArray | tuple[NDArray, NDArray]:
    r"""ProbSparse attention: the u queries of largest sparsity measure attend, the others output mean(V).

    .. math::

        \mathrm{out}_i = \begin{cases}
            \sum_j \operatorname{softmax}_j(s_{ij})\, v_j & i \in \mathrm{Top} \\
            \frac{1}{m} \sum_j v_j & \text{otherwise}
        \end{cases}, \qquad
        \mathrm{Top} = \operatorname{arg\,top}_u \Big( \max_t s_{i,K_{it}}
            - \frac{1}{U}\sum_t s_{i,K_{it}} \Big)

    with :math:`s_{ij} = q_i \cdot k_j / \sqrt{d}`, U keys :math:`K_{it}` drawn per query (Eq. 3,
    Eq. 4 on a sample, Algorithm 1). Causal: an active row's softmax runs over ``j <= i`` and a
    lazy row outputs :math:`\frac{1}{i+1}\sum_{j \le i} v_j`.

    Parameters
    ----------
    q : (..., n, d_k) array_like
        Queries.
    k : (..., m, d_k) array_like
        Keys.
    v : (..., m, d_v) array_like
        Values.
    factor : int, default 5
        The sampling factor *c* of :func:`informer_counts`.
    num_top : int, optional
        *u*, the active queries, ``0 <= num_top <= n``; default from ``factor``. ``num_top = n``
        is exact softmax attention.
    num_samples : int, optional
        *U*, sampled keys per query (>= 1); default from ``factor``, or the columns of
        ``sampled_keys``.
    rng : numpy.random.Generator or int, optional
        Source of the sample (:func:`draw_sampled_keys`) when ``sampled_keys`` is not given
        (unused when it is).
    sampled_keys : (n, U) array_like of int, optional
        An explicit sample: row *i* holds the keys query *i*'s measure is evaluated on (repeats
        allowed), in ``[0, m)``; shared by every batch element and head.
    causal : {False, True, "top-left"}, default False
        The decoder's masked form: query *i* attends to keys ``j <= i``. There is no
        "bottom-right" form (see Notes).
    counts : {"paper", "official", "official-v1"}, default "paper"
        How *u* and *U* follow from ``factor`` (:func:`informer_counts`).
    measure : {"paper", "official"}, default "paper"
        "paper": the sample's max minus the sample's mean. "official": the sample's max minus the
        sample's sum divided by *m* (see Notes).
    lazy : {"paper", "official"}, default "paper"
        The lazy rows of the causal form: "paper" the running mean
        :math:`\frac{1}{i+1}\sum_{j \le i} v_j`, "official" the running sum
        :math:`\sum_{j \le i} v_j` (whose effective rows do not sum to 1). Non-causal lazy rows are
        mean(V) in both.
    sample_from : {"all", "visible"}, default "all"
        Where each query's sample is drawn from (:func:`draw_sampled_keys`): all *m* keys, later
        ones too in the causal form (the paper and the official code), or only the keys it may
        attend to.
    scale : float, optional
        Multiplier of the dot products; default :math:`1/\sqrt{d_k}`.
    method : {"equation", "blocked", "auto"}, default "auto"
        How the active rows attend: :func:`~refattn.scaled_dot_product_attention`'s paths on the
        u gathered queries (u × m scores; "auto" streams them beyond the memory budget). The
        weights, when asked for, come from "equation" whatever the method.
    return_weights : bool, default False
        Also return the effective (..., n, m) matrix: softmax rows for the active queries, 1/m
        (causal: 1/(i+1) on ``j <= i``, or 1 with ``lazy="official"``) for the lazy ones.

    Returns
    -------
    out : (..., n, d_v) ndarray
    weights : (..., n, m) ndarray
        Only if ``return_weights``.

    Notes
    -----
    **Paper versus official code** (zhouhaoyi/Informer2020, ``models/attn.py``, ``ProbAttention``):

    * *The counts* u and U: :func:`informer_counts` (``counts``; the first release's exchanged
      counts, issue #35, are ``counts="official-v1"``).
    * *The mean in the measure.* Eq. (4) divides the sum of a query's scores over all *m* keys by
      *m*; §3.2 evaluates it on the sampled pairs, "filling other pairs with zero", and the
      appendix's Algorithm 1 computes "M = max(S̄) − mean(S̄) by row" on the sampled scores S̄.
      ``measure="paper"`` follows Algorithm 1: the sample's mean estimates Eq. (4)'s mean over
      every key. The official ``_prob_QK`` computes ``Q_K_sample.max(-1)[0] -
      torch.div(Q_K_sample.sum(-1), L_K)``: the sample's sum over *m*, the zero-filled mean of
      §3.2 (whose max, taken literally, would include the zeros too; the code's does not):
      ``measure="official"``. Issues #211 and #582 asked about it; the authors answered that
      dividing by the sample size would also do and changes little in the choice.
    * *The lazy rows.* Algorithm 1 sets them to mean(V); "the masked version can be achieved by
      applying positional mask on step 6 and using cumsum() in mean() of step 7. In the practice,
      we can use sum() as the simpler implement of mean()". The official code outputs
      ``V.mean(dim=-2)`` without the mask (the first release used ``V.sum``) and ``V.cumsum(dim=-2)``
      with it, the running sum: ``lazy="official"``.
    * *The sample* is uniform with replacement per query, one draw shared by the batch and the
      heads (``torch.randint(L_K, (L_Q, sample_k))``), as here; ``torch.topk`` chooses per batch
      element and head, as here (NaN first as in :func:`top_queries`; ties, which ``torch.topk``
      leaves unspecified, to the lower position).
    * *L_Q != L_K* (n != m). The official masked form asserts ``L_Q == L_V``, and its returned
      attention map (``output_attention``) is L_V × L_V whatever L_Q; issue #257 reports
      ``_prob_QK`` breaking when L_Q != L_K. Here every form takes n != m (causal: top-left, query
      *i* sees ``j <= i``); the first release's counts at n != m are ``counts="official-v1"``.

    **The causal form depends on later tokens.** The u active queries are the largest measures
    among all n queries, and (``sample_from="all"``, the paper's and the official masked form) a
    query's sample contains later keys. So output *i* depends on tokens after *i* through
    *which* rows are active: change a later key and query *i* may fall out of the top u (or come
    in), and its row switches between the softmax over ``j <= i`` and the running mean. Later
    keys still carry zero weight in row *i*, and later values never reach it. ``sample_from=
    "visible"`` keeps the keys after *i* out of query *i*'s own measure, but the choice still
    compares query *i* with the later queries (whose measures read later keys), and a later
    query with a larger measure takes its place. A decoder with a key/value cache therefore does
    not reproduce the full-sequence result, and there is no ``causal="bottom-right"`` form.

    **The choice is discontinuous.** Two implementations whose measures differ by rounding choose
    differently when the u-th and (u+1)-th measures are that close; compare on well-separated
    measures (:func:`query_sparsity` shows them), or feed the same choice.

    The default ``factor = 5`` makes every query active up to n = 14 (⌈5 ln 14⌉ = 14; at n = 15,
    14 of 15): short sequences are exact attention.

    Complexity: the measure takes O(n·U·d) time and O(n·U) memory beyond the inputs, the active
    rows O(u·m·d) time and the u × m scores (streamed in tiles by ``method="blocked"``), the lazy
    rows O(m·d_v); nothing is n × m unless ``return_weights``.

    References
    ----------
    .. [1] H. Zhou et al., "Informer: Beyond Efficient Transformer for Long Sequence Time-Series
       Forecasting", AAAI 2021, arXiv:2012.07436v3, §3.2, Eq. (2)–(4), Lemma 1, Algorithm 1.
    .. [2] zhouhaoyi/Informer2020, ``models/attn.py`` (``ProbAttention``), ``utils/masking.py``
       (``ProbMask``); issues #35, #211, #257, #582.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 40, 8))
    >>> out, A = informer_attention(q, k, v, rng=1, return_weights=True)
    >>> out.shape, int(np.sum(~np.isclose(A, 1 / 40).all(axis=-1)))   # ⌈5 ln 40⌉ = 19 active rows
    ((40, 8), 19)
    >>> exact = informer_attention(q, k, v, rng=1, num_top=40)
    >>> bool(np.allclose(exact, scaled_dot_product_attention(q, k, v)))
    True
    """
    q, k, v, batch = checked_qkv(q, k, v)
    n, m = q.shape[-2], k.shape[-2]
    scale = default_scale(q.shape[-1]) if scale is None else check_scale(scale)
    causal = _top_left(causal) is not None
    for name, value, choices in (("counts", counts, COUNTS), ("measure", measure, MEASURES), ("lazy", lazy, LAZY),
                                 ("sample_from", sample_from, SAMPLE_FROM), ("method", method, METHODS)):
        check_choice(name, value, choices)
    return_weights = check_bool("return_weights", return_weights)
    u, U = informer_counts(n, m, factor=factor, counts=counts)
    if num_top is not None:
        u = check_non_negative_int("num_top", num_top)
        if u > n:
            raise ValueError(f"num_top={u} is more active queries than there are: q has n={n} (shape {q.shape})")
    if num_samples is not None:
        U = check_positive_int("num_samples", num_samples) if m else 0
    sample = given_or_drawn("informer", "sampled_keys", sampled_keys, optional_rng(rng),
                            lambda r: draw_sampled_keys(r, n, m, U, causal=causal, sample_from=sample_from),
                            what="its sampled keys")
    if sampled_keys is not None:
        sample = _check_sample(sampled_keys, n, m, causal, sample_from)
        if num_samples is not None and sample.shape[1] != num_samples:
            raise ValueError(f"sampled_keys has {sample.shape[1]} keys per query but num_samples={num_samples}")
    if return_weights:
        check_fits("the weights (return_weights=True)", (*batch, n, m))
    out, weights = _attend(q, k, v, batch, u, sample, scale, causal, measure, lazy, method, return_weights)
    return (out, weights) if return_weights else out


def _top_left(causal) -> str | None:
    """``causal`` as "top-left" or None; "bottom-right" refused (the choice of queries is global)."""
    alignment = causal_alignment(causal)
    if alignment == "bottom-right":
        raise ValueError("Informer has no causal='bottom-right' (key/value-cache) form: its active queries are "
                         "the top u of all n queries, so the last n queries alone choose differently; pass "
                         "causal=True")
    return alignment


def _check_sample(sampled_keys, n: int, m: int, causal: bool | None, sample_from: str) -> NDArray:
    """An explicit sample as (n, U) int64 in [0, m) (``j <= i`` with causal "visible"), or a named error."""
    sample = as_indices("sampled_keys", sampled_keys, ndim=2)
    if sample.shape[0] != n:
        raise ValueError(f"sampled_keys must have shape (n={n}, U), got shape {sample.shape}")
    if sample.size and (sample.min() < 0 or sample.max() >= m):
        raise ValueError(f"sampled_keys must lie in [0, m={m}), got values in [{sample.min()}, {sample.max()}]")
    if n and m and sample.shape[1] == 0:
        raise ValueError(f"sampled_keys needs at least one key per query to measure it, got shape {sample.shape}")
    sample = sample.astype(np.int64)
    if causal and sample_from == "visible" and np.any(sample > np.arange(n)[:, None]):
        row = int(np.flatnonzero(np.any(sample > np.arange(n)[:, None], axis=1))[0])
        raise ValueError(f"sampled_keys row {row} holds a key after its query, {sample[row].tolist()}, but "
                         "sample_from='visible' draws causal queries' samples from j <= i")
    return sample


def _sampled_measure(q: NDArray, k: NDArray, sample: NDArray, scale: float, measure: str) -> NDArray:
    """M̄_i = max_t s_{i,K_it} − mean_t s_{i,K_it} (or sum/m), one sampled column at a time: O(n·d) memory."""
    m, U = k.shape[-2], sample.shape[1]
    top = total = None
    for t in range(U):
        with np.errstate(invalid="ignore", over="ignore"):
            s = np.sum(q * k[..., sample[:, t], :], axis=-1) * scale   # (..., n)  s_{i,K_it} = q_i·k_{K_it}/√d
        s = np.where(np.isfinite(s), s, np.nan)                    # Inf/NaN in q_i, k_j or overflow: undefined
        top = s if top is None else np.maximum(top, s)             # max_t, NaN propagates
        total = s if total is None else total + s                  # Σ_t
    return top - total / (U if measure == "paper" else m)          # (..., n)  M̄_i


def _attend(q, k, v, batch, u, sample, scale, causal, measure, lazy, method, return_weights):
    """The lazy rows, then the u active rows through sdpa on the gathered queries: ``(out, weights)``."""
    n, m, d_v = q.shape[-2], k.shape[-2], v.shape[-1]
    out = np.zeros((*batch, n, d_v))
    weights = np.zeros((*batch, n, m)) if return_weights else None
    if n == 0 or m == 0:                                           # m = 0: no key to see, zero rows
        return out, weights
    out[...] = _lazy(v, n, m, causal, lazy)
    if return_weights:
        weights[...] = _lazy_weights(n, m, causal, lazy)
    if u == 0:
        return out, weights
    if u == n:                                                     # every query active: no measure needed
        top = np.broadcast_to(np.arange(n), (*batch, n))
    else:
        M = np.broadcast_to(_sampled_measure(q, k, sample, scale, measure), (*batch, n))   # (..., n)
        top = top_queries(M, u)                                    # (..., u)  Top
    index = top[..., None]                                         # (..., u, 1)
    q_top = np.take_along_axis(np.broadcast_to(q, (*batch, *q.shape[-2:])), index, axis=-2)   # (..., u, d_k)
    mask = index >= np.arange(m) if causal else None               # (..., u, m)  j <= i
    if return_weights:                                             # the weights from the equation path
        active, A = scaled_dot_product_attention(q_top, k, v, mask, scale=scale, method="equation",
                                                 return_weights=True)  # (..., u, d_v), (..., u, m)
        np.put_along_axis(weights, index, A, axis=-2)              # (..., n, m)  softmax rows of Top
    if method == "blocked" or not return_weights:
        active = scaled_dot_product_attention(q_top, k, v, mask, scale=scale, method=method)   # (..., u, d_v)
    np.put_along_axis(out, index, active, axis=-2)                 # (..., n, d_v)
    return out, weights


def _lazy(v: NDArray, n: int, m: int, causal: bool, lazy: str) -> NDArray:
    """The lazy rows' output (..., n, d_v): mean(V), or its running form (mean or sum over j <= i)."""
    with np.errstate(invalid="ignore"):                            # inf − inf in a sum: NaN, as IEEE says
        if not causal:
            return v.mean(axis=-2, keepdims=True)                  # (..., 1, d_v)  (1/m) Σ_j v_j
        last = np.minimum(np.arange(n), m - 1)                     # (n,)  the last key row i sees
        running = np.cumsum(v, axis=-2)[..., last, :]              # (..., n, d_v)  Σ_{j≤i} v_j
    return running if lazy == "official" else running / (last + 1)[:, None]


def _lazy_weights(n: int, m: int, causal: bool, lazy: str) -> NDArray:
    """The lazy rows' effective (n, m) weights: 1/m, or 1/(i+1) (or 1) on j <= i."""
    if not causal:
        return np.full((n, m), 1.0 / m)
    seen = np.arange(m) <= np.arange(n)[:, None]                   # (n, m)  j <= i
    return seen.astype(np.float64) if lazy == "official" else seen / np.minimum(np.arange(n) + 1, m)[:, None]


RECORD = Mechanism.of(
    informer_attention, defaults={"factor": 1},          # c = 5 makes every query of a short sequence active
    id="informer", title="Informer ProbSparse attention", family="compressed", section="4.3.1", paper=INFORMER,
    equation=r"\mathrm{out}_i = \begin{cases} \operatorname{softmax}(q_i K^\top/\sqrt{d})\,V & i \in "
             r"\operatorname{top}_u \big(\max_t s_{i,K_{it}} - \operatorname{mean}_t s_{i,K_{it}}\big) \\ "
             r"\tfrac{1}{m}\sum_j v_j & \text{otherwise} \end{cases}",
    time="O((n·U + u·m)·d), u, U ≈ c ln n", memory="O(n·U + u·m)", kind="attention",
    methods=("equation", "blocked", "auto"), causal=True,
    incremental=False, position_dependent=True, content_selected=True, future_independent=False,
    examples=({"counts": "official", "measure": "official", "lazy": "official"},
              {"counts": "official-v1", "factor": 2}, {"sample_from": "visible", "factor": 3}),
    figure="refattn.figures.informer:informer", exact_options=lambda n, m: {"num_top": n},
    exact_limit="u = n (every query active)", draws=("sampled_keys",),
)
