r"""Hard-coded Gaussian attention (You, Sun, Iyyer, 2020; survey §4.5.4): fixed Gaussians over positions, no q or k.

Each head h replaces learned attention with a Gaussian over the key positions, centred near the
query's own position:

    c_{h,i} = p_i·r + o_h                 p_i the query's position, o_h the head's offset, r = 1 in self-attention
    A_{h,ij} ∝ exp(−(j − c_{h,i})² / (2σ²))   over the keys j that query i may see
    out_{h,i} = Σ_j A_{h,ij} v_{h,j}

Nothing depends on the input: the weights are the same for every sentence, and no query or key is
computed (the official code projects only the values, then the output). The paper's heads:

    encoder self-attention   o ∈ {−1, +1}   (half the heads look one token left, half one right)
    decoder self-attention   o ∈ {−1, 0}    (the decoder may not look ahead)
    cross-attention          o ∈ {−1, +1}   centred at i·r, r the corpus's source/target length ratio
    σ = 1

Two normalisations (``normalize``): "keys" (default) divides by the sum over the keys each query may
see, which is the Gaussian as a distribution over those keys, equal to a softmax of
−(j − c)²/(2σ²); σ → ∞ makes it uniform over them. "density" is what the official code computes:
the normal density N(j; c, σ²) itself at each key, multiplied by the causal mask and not
renormalised, so a row sums to ≈ 1 away from the edges (Σ_{j∈ℤ} N(j; c, 1) = 1 to 1e-8) and to
less near them and under the mask.
"""
from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.budget import check_fits
from ..common.checks import as_float, causal_alignment, check_bool, check_choice, check_qkv
from ..common.ints import check_non_negative_int, check_positive_int
from ..common.products import weighted_values
from ..core.softmax import softmax
from ..mechanism import Mechanism

__all__ = ["HARDCODED_OFFSETS", "HARDCODED_SIGMA", "hardcoded_gaussian_attention", "hardcoded_gaussian_weights",
           "hardcoded_offsets"]

YOU = ('W. You, S. Sun, M. Iyyer, 2020, "Hard-Coded Gaussian Attention for Neural Machine Translation", ACL 2020, '
       'arXiv:2005.00742')
#: The paper's head offsets by attention type (the official README's commands: --enc-attn-offset -1 1,
#: --dec-attn-offset -1 0, --enc-dec-attn-offset -1 1).
HARDCODED_OFFSETS = {"encoder": (-1, 1), "decoder": (-1, 0), "cross": (-1, 1)}
#: The paper's standard deviation (the official code's default --*-attn-std 1).
HARDCODED_SIGMA = 1.0
NORMALIZATIONS = ("keys", "density")
BLOCK_ENTRIES = 2**22                                              # weights computed per block of query rows
UNDERFLOW = 746.0                                                  # e^{−746} is 0 in float64


def hardcoded_offsets(role: str, num_heads: int) -> tuple[int, ...]:
    """The paper's offsets for ``num_heads`` heads, cycled as the official code does (8 heads: −1, 1, −1, 1, ...).

    Parameters
    ----------
    role : {"encoder", "decoder", "cross"}
        Encoder self-attention, decoder self-attention or cross-attention.
    num_heads : int
        Number of heads, a multiple of 2.

    Returns
    -------
    tuple of int

    Examples
    --------
    >>> hardcoded_offsets("decoder", 4)
    (-1, 0, -1, 0)
    """
    check_choice("role", role, tuple(HARDCODED_OFFSETS))
    num_heads = check_positive_int("num_heads", num_heads)
    base = HARDCODED_OFFSETS[role]
    if num_heads % len(base):
        raise ValueError(f"num_heads must be a multiple of {len(base)} to cycle the offsets {base}, got {num_heads}")
    return base * (num_heads // len(base))


def _check_real(name: str, value, *, positive: bool = False, allow_inf: bool = False) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    value = float(value)
    if math.isnan(value) or (math.isinf(value) and not allow_inf):
        raise ValueError(f"{name} must be {'a real number or inf' if allow_inf else 'finite'}, got {value!r}")
    if positive and not value > 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return value


def _check_offsets(offsets) -> NDArray:
    values = np.asarray(offsets)
    if values.ndim != 1 or values.size == 0 or values.dtype.kind not in "iuf":
        raise ValueError(f"offsets must be a non-empty sequence of real numbers, one per head, got {offsets!r}")
    values = values.astype(np.float64)
    if not np.all(np.isfinite(values)):
        raise ValueError(f"offsets must be finite, got {offsets!r}")
    return values


def _gaussian_rows(rows: NDArray, m: int, offsets: NDArray, sigma: float, ratio: float, delta: int | None,
                   normalize: str, keys: tuple[int, int] | None = None) -> tuple[NDArray, NDArray]:
    """(A, allowed) for the query rows ``rows`` and the keys ``lo … hi − 1`` (default all m): A (h, r, w),
    allowed (r, w)."""
    lo, hi = (0, m) if keys is None else keys
    j = np.arange(lo, hi)                                                         # (w,)
    position = rows.astype(np.float64) + (0 if delta is None else delta)          # p_i (bottom-right: i + m − n)
    centre = position[None, :, None] * ratio + offsets[:, None, None]             # (h, r, 1)  c = p_i·r + o_h
    allowed = np.ones((rows.size, j.size), dtype=bool) if delta is None else \
        j <= rows[:, None] + delta                                                # (r, w)  j ≤ p_i
    dist = np.abs(j - centre)                                                     # (h, r, w)  |j − c|
    if normalize == "density":
        with np.errstate(over="ignore"):                           # (j − c)²/σ² = inf: a density of exactly 0
            density = np.exp(-0.5 * (dist / sigma) ** 2) / (sigma * math.sqrt(2.0 * math.pi))   # N(j; c, σ²)
        return np.where(allowed, density, 0.0), allowed            # masked by selection, not renormalised
    # e^{−(j − c)²/2σ²} over the keys seen, shifted by the nearest one's, j*: (j − c)² − (j* − c)² =
    # (j − j*)(j + j* − 2c) has no rounding of a square, and each factor meets σ alone, so that σ² underflowing
    # to 0 gives the σ → 0 limit (the nearest keys share the row), never 0/0
    if j.size == 0:                                                # no key in the window: every row is empty
        return np.zeros(dist.shape), allowed
    nearest = j[np.argmin(np.where(allowed, dist, np.inf), axis=-1)][..., None]   # (h, r, 1)  j*
    with np.errstate(invalid="ignore", over="ignore"):             # −inf: a weight of exactly 0; no key: masked
        S = -0.5 * ((j - nearest) / sigma) * ((j + nearest - 2.0 * centre) / sigma)   # −((j − c)² − (j* − c)²)/2σ²
    S = np.where(j == nearest, 0.0, S)                             # 0·inf at j* itself when σ underflows
    return softmax(S, mask=allowed), allowed                       # (h, r, w)  ∝ e^S over the keys seen


def _key_window(rows: NDArray, m: int, offsets: NDArray, sigma: float, ratio: float, delta: int | None
                ) -> tuple[int, int]:
    """(lo, hi): the keys lo … hi − 1 hold every weight of these rows that is not exactly 0 in float64.

    Let d be the distance from a centre c to its nearest visible key. A key with (j − c)² > d² + 2σ²·746
    has e^{−(j − c)²/2σ²} below e^{−746}·e^{−d²/2σ²}: relative to the row's largest term (the softmax's
    shift) and on its own (the density) that underflows to exactly 0 (e^{−745.2} is the last subnormal).
    """
    if not math.isfinite(sigma) or rows.size == 0 or m == 0:
        return 0, m
    last = np.full(rows.size, m - 1) if delta is None else np.minimum(rows + delta, m - 1)   # (r,)
    visible = last >= 0
    if not visible.any():
        return 0, 0                                                # no row sees a key
    position = rows[visible].astype(np.float64) + (0 if delta is None else delta)
    centre = position[None, :] * ratio + offsets[:, None]                         # (h, r')  c
    nearest = np.clip(np.rint(centre), 0, last[visible])                          # the visible key nearest c
    with np.errstate(over="ignore", invalid="ignore"):             # a reach beyond float64: every key
        reach = np.sqrt((nearest - centre) ** 2 + 2.0 * np.square(sigma) * UNDERFLOW)   # √(d² + 2σ²·746)
        lo, hi = np.floor((centre - reach).min()), np.ceil((centre + reach).max()) + 1
    return (0, m) if not (np.isfinite(lo) and np.isfinite(hi)) else (int(np.clip(lo, 0, m)), int(np.clip(hi, 0, m)))


def hardcoded_gaussian_weights(n: int, m: int | None = None, *, offsets=(-1, 1), sigma: float = HARDCODED_SIGMA,
                               causal: bool | str = False, normalize: str = "keys", ratio: float = 1.0
                               ) -> tuple[NDArray, NDArray]:
    r"""Each head's fixed Gaussian weights over the key positions.

    .. math::

        c_{h,i} = p_i\, r + o_h, \qquad
        A_{h,ij} = \frac{\exp(-(j - c_{h,i})^2 / 2\sigma^2)}{\sum_{l \in J_i} \exp(-(l - c_{h,i})^2 / 2\sigma^2)}
        \ (j \in J_i)

    Parameters
    ----------
    n : int
        Number of queries.
    m : int, optional
        Number of keys; default n.
    offsets : sequence of float, default (-1, 1)
        :math:`o_h`, one per head (:data:`HARDCODED_OFFSETS`, :func:`hardcoded_offsets`).
    sigma : float, default 1.0
        σ > 0, shared by the heads; ``np.inf`` gives uniform weights over the keys each query sees
        (under ``normalize="keys"``), and a σ whose square underflows (1e-300) the limit σ → 0: the nearest
        key(s) each query sees share its row.
    causal : {False, True, "top-left", "bottom-right"}, default False
        :math:`J_i`: every key, or ``j <= p_i`` with :math:`p_i = i` (top-left) or ``i + m − n``
        (bottom-right, the n queries are the last n of m positions, which also moves their centres).
        A query that sees no key gets a zero row.
    normalize : {"keys", "density"}, default "keys"
        "keys": the Gaussian normalised over :math:`J_i` (a softmax of :math:`-(j - c)^2/2\sigma^2`).
        "density": the official code's unnormalised density
        :math:`\mathcal N(j; c, \sigma^2) = e^{-(j - c)^2/2\sigma^2} / (\sigma\sqrt{2\pi})` on :math:`J_i`.
    ratio : float, default 1.0
        r: the query position's scale (cross-attention: the source/target length ratio; the official
        code uses the corpus's average word-count ratio).

    Returns
    -------
    A : (h, n, m) ndarray
    allowed : (n, m) ndarray of bool
        :math:`J_i`.

    Examples
    --------
    >>> A, _ = hardcoded_gaussian_weights(5, offsets=(0,), sigma=np.inf, causal=True)
    >>> A[0, 3]
    array([0.25, 0.25, 0.25, 0.25, 0.  ])
    """
    n = check_non_negative_int("n", n)
    m = n if m is None else check_non_negative_int("m", m)
    offsets, sigma, ratio, delta = _check_options(offsets, sigma, normalize, ratio, causal, n, m)
    check_fits("the weights", (offsets.size, n, m))
    return _gaussian_rows(np.arange(n), m, offsets, sigma, ratio, delta, normalize)


def _check_options(offsets, sigma, normalize, ratio, causal, n, m):
    """Checked (offsets, σ, r, δ): query i sees keys j <= i + δ (δ None: every key)."""
    offsets = _check_offsets(offsets)
    sigma = _check_real("sigma", sigma, positive=True, allow_inf=True)
    check_choice("normalize", normalize, NORMALIZATIONS)
    ratio = _check_real("ratio", ratio)
    alignment = causal_alignment(causal)
    delta = None if alignment is None else (m - n if alignment == "bottom-right" else 0)
    return offsets, sigma, ratio, delta


def hardcoded_gaussian_attention(v: ArrayLike, *, n: int | None = None, q: ArrayLike | None = None,
                                 k: ArrayLike | None = None, offsets=(-1, 1), sigma: float = HARDCODED_SIGMA,
                                 causal: bool | str = False, normalize: str = "keys", ratio: float = 1.0,
                                 return_weights: bool = False) -> NDArray | tuple[NDArray, NDArray]:
    r"""Hard-coded Gaussian attention: each head averages its values under a fixed Gaussian over positions.

    .. math::

        \mathrm{out}_{h,i} = \sum_{j \in J_i} A_{h,ij}\, v_{h,j}, \qquad
        A_{h,ij} \propto \exp\!\Big(-\frac{(j - p_i r - o_h)^2}{2\sigma^2}\Big)

    No query or key enters: only the number of queries n and the values.

    Parameters
    ----------
    v : (..., h, m, d_v) array_like
        Each head's values (the official code projects the layer input with one matrix and splits
        it into heads; no query or key projection exists); (..., m, d_v) with one scalar offset.
    n : int, optional
        Number of queries; default m, or q's.
    q, k : (..., n, d_k), (..., m, d_k) array_like, optional
        Queries and keys, as attention takes them (the registry's call): only q's length n and the
        batch shape enter, checked against v as in :func:`~refattn.scaled_dot_product_attention`
        (d_k agreeing, k's length v's m, batch dims broadcasting); the output is broadcast to their
        batch. Their values are never read.
    offsets : float or sequence of float, default (-1, 1)
        :math:`o_h`, one per head: h = ``len(offsets)`` must match v's head axis. The default is the
        paper's encoder self-attention; :data:`HARDCODED_OFFSETS` holds the others. A real number:
        one head, and v has no head axis.
    sigma, causal, normalize, ratio
        As in :func:`hardcoded_gaussian_weights`.
    return_weights : bool, default False
        Also return the weights.

    Returns
    -------
    out : (..., [h,] n, d_v) ndarray
    weights : (h, n, m) or (..., n, m) ndarray
        Only if ``return_weights``: (h, n, m) for a sequence of offsets; for one scalar offset, its
        (n, m) matrix broadcast over the batch (a read-only view).

    Notes
    -----
    The weights are computed a block of query rows at a time, and only over the keys where they
    are not exactly 0 in float64: beyond :math:`\sqrt{d^2 + 2\sigma^2 \cdot 746}` of a centre
    (d the distance to its nearest visible key), :math:`e^{-(j - c)^2/2\sigma^2}` underflows to 0
    relative to the row's largest term. With finite σ a row reads about 77σ keys: O(n·σ·d_v) time and
    O(block·σ + n·d_v) memory whatever n (σ = ∞ reads every key). A key whose weight is exactly 0 is
    not read, so a NaN there does not reach the row. Asking for the weights allocates (h, n, m).

    **Official code.** ``models/new_attention.py`` of the authors' repository computes
    ``1/(σ√(2π)) exp(−½((j − i·r − o)/σ)²)`` (the density, ``normalize="density"``), multiplies
    it by the decoder's causal mask and does not renormalise; its ``attn_threshold`` option (off by
    default) zeroes weights below a threshold and is not reproduced here. The default here,
    ``normalize="keys"``, reads the paper's "Gaussian distribution" as a distribution over the keys
    the query may see, so that every row sums to 1 as attention's do, and σ → ∞ gives uniform
    attention; the two agree to 1e-8 on rows farther than about 6σ from both ends and the mask.

    References
    ----------
    .. [1] W. You, S. Sun, M. Iyyer, "Hard-Coded Gaussian Attention for Neural Machine Translation",
       ACL 2020, arXiv:2005.00742v1, §2-3; official code github.com/fallcat/stupidNMT.

    Examples
    --------
    >>> v = np.eye(6)[None]                                 # one head, values = one-hot positions
    >>> out = hardcoded_gaussian_attention(v, offsets=(1,), sigma=1e-3)
    >>> out[0].argmax(axis=-1)                              # σ → 0: each query copies the value at i + 1
    array([1, 2, 3, 4, 5, 5])
    """
    return_weights = check_bool("return_weights", return_weights)
    one_head = np.ndim(offsets) == 0
    if one_head:                                                   # one head: no head axis
        offsets = (_check_real("offsets", offsets),)
    v = as_float("v", v, min_ndim=2 if one_head else 3)
    batch = v.shape[:-2]
    if q is not None or k is not None:
        if q is None or k is None:
            raise TypeError("hardcoded_gaussian_attention takes q and k together, got only "
                            f"{'q' if k is None else 'k'}")
        q, k = as_float("q", q), as_float("k", k)
        batch = check_qkv(q, k, v)
        if n is not None and check_non_negative_int("n", n) != q.shape[-2]:
            raise ValueError(f"n={n} but q has {q.shape[-2]} queries (shape {q.shape})")
        n = q.shape[-2]
    out, A = _hardcoded(v[..., None, :, :] if one_head else v, n=n, offsets=offsets, sigma=sigma, causal=causal,
                        normalize=normalize, ratio=ratio, return_weights=return_weights)
    if one_head:
        out, A = out[..., 0, :, :], None if A is None else A[0]    # (..., n, d_v), (n, m)
    if one_head or out.shape[:-2] != batch:                        # q and k may broadcast the batch
        out = np.array(np.broadcast_to(out, (*batch, *out.shape[-2:])))
    if not return_weights:
        return out
    return out, (np.broadcast_to(A, (*batch, *A.shape)) if one_head else A)


def _hardcoded(v, *, n, offsets, sigma, causal, normalize, ratio, return_weights) -> tuple[NDArray, NDArray | None]:
    """Checked hard-coded attention over v (..., h, m, d_v): out (..., h, n, d_v) and the weights (h, n, m) or None."""
    m = v.shape[-2]
    n = m if n is None else check_non_negative_int("n", n)
    offsets, sigma, ratio, delta = _check_options(offsets, sigma, normalize, ratio, causal, n, m)
    h = offsets.size
    if v.shape[-3] != h:
        raise ValueError(f"v has {v.shape[-3]} heads (shape {v.shape}, (..., h, m, d_v)) but offsets has {h}")
    batch = v.shape[:-3]
    A = None
    if return_weights:
        check_fits("the weights (return_weights=True)", (h, n, m))
        A = np.zeros((h, n, m))
    out = np.empty((*batch, h, n, v.shape[-1]))
    block = max(1, BLOCK_ENTRIES // max(h * m, 1))
    for start in range(0, n, block):
        stop = min(start + block, n)
        rows = np.arange(start, stop)
        lo, hi = _key_window(rows, m, offsets, sigma, ratio, delta)                   # keys with weight > 0
        A_rows, seen = _gaussian_rows(rows, m, offsets, sigma, ratio, delta, normalize, (lo, hi))  # (h, r, w)
        empty = ~seen.any(axis=-1, keepdims=True)                                      # (r, 1)
        out[..., start:stop, :] = weighted_values(np.broadcast_to(A_rows, (*batch, h, rows.size, hi - lo)),
                                                  v[..., lo:hi, :], seen if delta is not None else None, empty,
                                                  "zero")                              # (..., h, r, d_v)  A V
        if return_weights:
            A[:, start:stop, lo:hi] = A_rows
    return out, A


RECORD = Mechanism.of(
    hardcoded_gaussian_attention,
    inputs=("q", "k", "v"), options=("offsets", "sigma", "normalize", "ratio"), defaults={"offsets": 0},
    renamed={"offset": "offsets"},
    id="hardcoded_gaussian", title="Hard-coded Gaussian attention", family="prior", section="4.5.4", paper=YOU,
    equation=r"A_{ij} \propto \exp\!\big(-(j - i - o)^2 / 2\sigma^2\big), \quad \mathrm{out} = A V",
    time="O(n·σ·d_v) (σ = ∞: O(n·m·d_v))", memory="O(block·σ + n·d_v)", kind="attention",
    causal=True, position_dependent=True,
    examples=({"offsets": -1}, {"offsets": 1, "sigma": 2.5}, {"sigma": np.inf}, {"normalize": "density"}),
    figure="refattn.figures.hardcoded_gaussian:hardcoded_gaussian", exact_options=None,
    exact_limit="none: fixed weights over positions; σ → ∞ (normalize='keys') is uniform attention, softmax "
                "attention's when every score is equal (q = 0)",
)
