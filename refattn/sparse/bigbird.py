r"""BigBird block-sparse attention, ITC form (Zaheer et al., 2020; survey §4.1.1, Fig. 5d).

The n tokens are cut into n_b = n / b blocks of b tokens. Block row I keeps the key blocks

    K_I = { 0, …, n_b − 1 }                                   I ∈ G   (global rows: everything)
    K_I = { J : |I − J| ≤ (w_b − 1)/2 }  ∪  G  ∪  R_I          I ∉ G   (window, global, random)

where G are the global blocks (ITC: existing tokens made global; by default the first and the
last block), w_b = 3 window blocks, and R_I are r random blocks drawn outside the row's window
and G. The token pattern is the block layout expanded to b × b tiles:

    mask = layout ⊗ 1_{b×b}            (np.kron(layout, np.ones((b, b))))

:func:`draw_bigbird_random_blocks` is the explicit draw, :func:`bigbird_block_layout` the small
(n_b, n_b) layout, :func:`bigbird_pattern` the token pattern in CSR form.
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.checks import as_rng, check_choice, check_size, check_sizes
from ..common.ints import check_non_negative_int, check_positive_int
from ..draws import missing_draw
from ..mechanism import Mechanism
from ..papers import BIGBIRD
from .attention import pattern_apply
from .pattern import SparsePattern, as_indices, index_dtype, no_causal_form

__all__ = ["bigbird_block_layout", "bigbird_key_counts", "bigbird_pattern", "draw_bigbird_random_blocks"]

CANDIDATES = ("disjoint", "official")
REPEATS = ("once", "count")     # a pair the official kernels hold twice: in the softmax once (a set), or twice


def draw_bigbird_random_blocks(
    rng, num_blocks: int, num_random_blocks: int = 3, *,
    num_window_blocks: int = 3, num_global_blocks: int = 2, candidates: str = "disjoint",
) -> NDArray:
    r"""Draw BigBird's random key blocks: ``num_random_blocks`` distinct blocks per middle block row.

    .. math::

        R_I \subset \{0, \dots, n_b - 1\} \setminus (W_I \cup G), \quad |R_I| = r,
        \quad \text{uniform over } r\text{-subsets}

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw.
    num_blocks : int
        Number of blocks :math:`n_b = n / b`.
    num_random_blocks : int, default 3
        *r*, random key blocks per middle (non-global) block row.
    num_window_blocks : int, default 3
        :math:`w_b`, odd: the row's own block and (w_b − 1)/2 on each side.
    num_global_blocks : int, default 2
        *g*: the first ⌈g/2⌉ and the last ⌊g/2⌋ blocks are global (g = 2: first and last, as the
        official ITC code).
    candidates : {"disjoint", "official"}, default "disjoint"
        "disjoint": every middle row draws from all blocks outside its window and the global
        blocks, so its window, global and random blocks never overlap. "official": the
        candidate sets of the official ``bigbird_block_rand_mask`` (see Notes; needs
        ``num_window_blocks=3`` and ``num_global_blocks=2``).

    Returns
    -------
    random_blocks : (num_blocks, r) ndarray of int64
        Sorted within each row; the global rows are all ``-1`` (they attend to every block).

    Raises
    ------
    ValueError
        If a middle row has fewer than *r* candidate blocks (too few blocks for r); the message
        says which numbers of blocks these settings take.

    Notes
    -----
    The official ``bigbird_block_rand_mask`` (google-research/bigbird,
    ``bigbird/core/attention.py``) draws ``np.random.permutation(candidates)[:r]`` for the rows
    1 … n_b − 2 from ``middle_seq = 1 … n_b − 2`` (so never a global block) minus the row's
    window {I − 1, I, I + 1}, except for the last two middle rows, which draw from all of
    ``middle_seq``: the code's own comments say "Missing -3: should have been sliced till
    last-3" and "Missing -4". There a random block can repeat a window block, and since the
    official kernel concatenates window, global and random keys, such a key enters the softmax
    twice; a pattern (a set) keeps it once (:func:`bigbird_key_counts` and the registry option
    ``repeats="count"`` count it as those kernels do). ``candidates="disjoint"`` (the default) applies the
    intended exclusion to every row; ``"official"`` reproduces the code's candidate sets.
    Neither reproduces NumPy's legacy global RNG stream: to compare with the official code
    exactly, pass its ``rand_attn`` (shape (n_b − 2, r)) to ``random_blocks=`` after adding a
    row of ``-1`` above and below. The official code further restricts where random blocks may
    fall for long inputs (``last_idx=1024`` for n ∈ {1024, 3072, 4096}; otherwise a "plan"
    that samples from the first 2r + 5 blocks, ``bigbird_block_rand_mask_with_head``, which
    also forbids block n_b − 2 to row 1 and block 1 to row n_b − 2); the paper states no such
    restriction, and refattn samples from the whole sequence.

    References
    ----------
    .. [1] M. Zaheer et al., "Big Bird: Transformers for Longer Sequences", arXiv:2007.14062v2,
       §2 (random attention), App. D (random blocks in the block form).

    Examples
    --------
    >>> R = draw_bigbird_random_blocks(0, 8)
    >>> R.shape, R[0].tolist(), R[7].tolist()
    ((8, 3), [-1, -1, -1], [-1, -1, -1])
    >>> bool(np.all(np.abs(R[2:6] - np.arange(2, 6)[:, None]) > 1))      # never in the row's window
    True
    """
    rng = as_rng(rng)
    nb = check_size("num_blocks", num_blocks, positive=True, rows=True)
    r, g, half = _settings(num_random_blocks, num_global_blocks, num_window_blocks, candidates, drawing=True)
    _check_layout(nb, r, g, half, candidates, drawing=True)
    random_blocks = np.full((nb, r), -1, dtype=np.int64)
    if r == 0:
        return random_blocks
    for I in np.flatnonzero(~_is_global(nb, g)):
        pool = _candidates(I, nb, half, g, candidates)                  # ranges, never an array of nb blocks:
        picks = rng.choice(_pool_size(pool), size=r, replace=False)   # as choice(concatenated pool, r)
        random_blocks[I] = np.sort(_pool_items(pool, picks))
    return random_blocks


def bigbird_block_layout(
    num_blocks: int, *, num_random_blocks: int = 3, num_global_blocks: int = 2, num_window_blocks: int = 3,
    rng=None, random_blocks: ArrayLike | None = None, candidates: str = "disjoint",
) -> NDArray:
    r"""BigBird's (n_b, n_b) block layout: ``True`` where block row I attends to key block J.

    .. math::

        \text{layout}_{IJ} = [\, I \in G \ \lor\ J \in G \ \lor\ |I - J| \le (w_b - 1)/2
        \ \lor\ J \in R_I \,]

    Parameters
    ----------
    num_blocks : int
        :math:`n_b`.
    num_random_blocks, num_global_blocks, num_window_blocks : int
        *r*, *g*, :math:`w_b` as in :func:`bigbird_pattern`.
    rng : numpy.random.Generator or int, optional
        Draws the random blocks (:func:`draw_bigbird_random_blocks`).
    random_blocks : (num_blocks, r) array_like of int, optional
        An explicit draw instead of ``rng``: row I lists R_I, ``-1`` for none.
    candidates : {"disjoint", "official"}, default "disjoint"
        Passed to :func:`draw_bigbird_random_blocks` when drawing from ``rng``.

    Returns
    -------
    layout : (num_blocks, num_blocks) ndarray of bool
        Dense but small (n_b = n / b); :func:`bigbird_pattern` never builds it.

    References
    ----------
    .. [1] M. Zaheer et al., "Big Bird", arXiv:2007.14062v2, §2, App. D (block layout).

    Examples
    --------
    >>> bigbird_block_layout(6, num_random_blocks=1, random_blocks=[[-1], [4], [4], [1], [1], [-1]]).astype(int)
    array([[1, 1, 1, 1, 1, 1],
           [1, 1, 1, 0, 1, 1],
           [1, 1, 1, 1, 1, 1],
           [1, 1, 1, 1, 1, 1],
           [1, 1, 0, 1, 1, 1],
           [1, 1, 1, 1, 1, 1]])
    """
    blocks, _ = _block_pattern(num_blocks, num_random_blocks, num_global_blocks, num_window_blocks, rng,
                            random_blocks, candidates)
    return blocks.to_mask()


def bigbird_pattern(
    n: int, *, block_size: int = 64, num_random_blocks: int = 3, num_global_blocks: int = 2,
    num_window_blocks: int = 3, rng=None, random_blocks: ArrayLike | None = None, candidates: str = "disjoint",
    causal: bool | str = False,
) -> SparsePattern:
    r"""BigBird-ITC's token pattern: window, global and random blocks of ``block_size`` tokens.

    .. math::

        J_i = \bigcup_{J \in K_{\lfloor i/b \rfloor}} \{\, Jb, \dots, Jb + b - 1 \,\}, \qquad
        K_I = \begin{cases} \{0, \dots, n_b - 1\} & I \in G \\
        \{J : |I - J| \le \frac{w_b - 1}{2}\} \cup G \cup R_I & I \notin G \end{cases}

    Parameters
    ----------
    n : int
        Sequence length, a positive multiple of ``block_size`` whose n / b blocks can hold the
        global blocks and give every middle row r random candidates (b = 64, r = 3, g = 2:
        n = 128 or n >= 512); any other n is a ``ValueError`` that states which lengths work.
    block_size : int, default 64
        *b*, tokens per block (the paper's base models use 64).
    num_random_blocks : int, default 3
        *r* random key blocks per middle block row.
    num_global_blocks : int, default 2
        *g* global blocks: the first ⌈g/2⌉ and the last ⌊g/2⌋ (g = 2: the first and the last
        block, the official ITC layout). Global blocks attend to, and are attended by, all.
    num_window_blocks : int, default 3
        :math:`w_b`, odd: each block row sees its own block and (w_b − 1)/2 on each side.
    rng : numpy.random.Generator or int, optional
        Draws the random blocks; required unless ``random_blocks`` is given or r = 0.
    random_blocks : (n / b, r) array_like of int, optional
        An explicit draw (e.g. from :func:`draw_bigbird_random_blocks`, or the official
        ``rand_attn`` padded with a ``-1`` row above and below): row I lists R_I, ``-1`` for
        none; global rows must be all ``-1``. Taken as given: a block may repeat within a row or
        be a window or global block (HuggingFace's eval mode gives all zeros); the pattern keeps
        each pair once (see :func:`bigbird_key_counts` for the kernels' multiplicities).
    candidates : {"disjoint", "official"}, default "disjoint"
        Which blocks a middle row may draw (see :func:`draw_bigbird_random_blocks`).
    causal : {False}, default False
        BigBird has no causal form (see Notes); any other value of ``causal`` is a ``ValueError``.

    Returns
    -------
    SparsePattern
        (n, n), nnz = b²·Σ_I |K_I|, written directly in CSR form (no n × n array; at n = 65536
        the defaults keep ≈ 4.2·10⁷ pairs).

    Notes
    -----
    - *Paper vs official code.* The paper's block form (App. D) and the official
      ``bigbird_block_sparse_attention`` agree on the window (3 blocks: I − 1, I, I + 1) and the
      ITC global blocks (first and last); they differ on where random blocks may fall (see
      :func:`draw_bigbird_random_blocks`). In the official kernel the global rows and columns,
      the first/last middle rows ("second" and "second last" products) and the band rows are
      separate computations, but together they keep exactly the layout above.
    - *No causal form.* The paper defines the block form for encoders; its encoder-decoder
      models use BigBird only in the encoder and full attention in the decoder, so refattn
      offers no causal variant.
    - *ETC variant.* BigBird-ETC adds extra global tokens instead of promoting existing ones; see
      :func:`refattn.sparse.etc.etc_pattern` for that global-local layout.

    References
    ----------
    .. [1] M. Zaheer et al., "Big Bird: Transformers for Longer Sequences", NeurIPS 2020,
       arXiv:2007.14062v2, §2 (random, window, global; ITC and ETC), App. D (block form),
       App. E (b = 64, r = 3, g = 2, w_b = 3).

    Examples
    --------
    >>> p = bigbird_pattern(512, rng=0)
    >>> p.shape, p.row_counts()[::64].tolist()
    ((512, 512), [512, 448, 512, 512, 512, 512, 448, 512])
    >>> blocks = draw_bigbird_random_blocks(0, 8)
    >>> bool(np.array_equal(bigbird_block_layout(8, rng=0), bigbird_block_layout(8, random_blocks=blocks)))
    True
    """
    no_causal_form(causal, "BigBird", "the paper uses it in encoders only")
    return _drawn_pattern(n, block_size, num_random_blocks, num_global_blocks, num_window_blocks, rng,
                          random_blocks, candidates)[0]


def _drawn_pattern(n, block_size, num_random_blocks, num_global_blocks, num_window_blocks, rng, random_blocks,
                   candidates) -> tuple[SparsePattern, NDArray]:
    """:func:`bigbird_pattern` (non-causal) and the random blocks it holds: drawn from ``rng``, or as given."""
    n, _ = check_sizes(n, None)
    b = check_positive_int("block_size", block_size)
    drawing = _drawing(num_random_blocks, rng, random_blocks)
    r, g, half = _settings(num_random_blocks, num_global_blocks, num_window_blocks, candidates, drawing)
    _check_layout(n // b, r, g, half, candidates, drawing, n=n, block_size=b)
    blocks, R = _block_pattern(n // b, num_random_blocks, num_global_blocks, num_window_blocks, rng,
                               random_blocks, candidates)
    return _expand_blocks(blocks, b), R


def _block_pattern(num_blocks, num_random_blocks, num_global_blocks, num_window_blocks, rng, random_blocks,
                   candidates) -> tuple[SparsePattern, NDArray]:
    """The block layout as an (n_b, n_b) SparsePattern, built from index lists (no n_b × n_b loop), and its
    random blocks R (drawn, or as given)."""
    nb = check_size("num_blocks", num_blocks, positive=True, rows=True)
    drawing = _drawing(num_random_blocks, rng, random_blocks)
    r, g, half = _settings(num_random_blocks, num_global_blocks, num_window_blocks, candidates, drawing)
    _check_layout(nb, r, g, half, candidates, drawing)
    is_global = _is_global(nb, g)
    G = np.flatnonzero(is_global)
    if random_blocks is None:
        R = (draw_bigbird_random_blocks(rng, nb, r, num_window_blocks=num_window_blocks,
                                        num_global_blocks=num_global_blocks, candidates=candidates)
             if r else np.full((nb, 0), -1, dtype=np.int64))
    else:
        R = _check_random_blocks(random_blocks, nb, r, G)

    I = np.arange(nb)
    middle = I[~is_global]
    window = np.arange(-half, half + 1)
    rows_w = np.repeat(middle, len(window))
    cols_w = (middle[:, None] + window).ravel()
    inside = (cols_w >= 0) & (cols_w < nb)
    kept_r = R[middle] >= 0
    rows = np.concatenate([
        np.repeat(I[is_global], nb),                               # global rows: every block
        np.repeat(middle, len(G)),                                 # global columns
        rows_w[inside],                                            # window |I − J| ≤ (w_b − 1)/2
        np.repeat(middle, R.shape[1])[kept_r.ravel()],             # random R_I
    ])
    cols = np.concatenate([
        np.tile(I, int(is_global.sum())),
        np.tile(G, len(middle)),
        cols_w[inside],
        R[middle][kept_r],
    ])
    return SparsePattern.from_pairs(rows, cols, nb, nb), R


def bigbird_key_counts(
    n: int, random_blocks: ArrayLike, *, block_size: int = 64, num_global_blocks: int = 2,
    num_window_blocks: int = 3,
) -> tuple[SparsePattern, NDArray]:
    r"""BigBird's pattern and how many times the official kernels hold each of its pairs.

    The official ``bigbird_block_sparse_attention`` (google-research/bigbird,
    ``bigbird/core/attention.py``) and HuggingFace's ``BigBirdBlockSparseAttention``
    (``transformers/models/big_bird/modeling_big_bird.py``) concatenate a middle block row's key
    blocks, [first (global), window, random, last (global)], and take one softmax over the
    concatenation. A key block listed twice, a random block repeated within ``R_I`` or one equal
    to a window or global block, then enters that softmax twice. HuggingFace in eval mode
    (``_bigbird_block_rand_mask`` returns ``np.zeros`` when ``not self.training``) makes every
    random block 0, the first global block. Per block pair:

    .. math::

        c_{IJ} = [J \in W_I \cup G] + \#\{t : R_{I,t} = J\}    \quad (I \notin G), \qquad c_{IJ} = 1 \quad (I \in G)

    (the window and global blocks are one set: the rows next to a global block hold it once).
    Attention with these multiplicities is ``sparse_attention(q, k, v, pattern,
    pair_bias=np.log(counts))``: weights :math:`c_{ij} e^{s_{ij}} / \sum_l c_{il} e^{s_{il}}`.

    Parameters
    ----------
    n : int
        Sequence length, a multiple of ``block_size``.
    random_blocks : (n / b, r) array_like of int
        As in :func:`bigbird_pattern` (repeats allowed; ``-1`` for none, global rows all ``-1``).
    block_size, num_global_blocks, num_window_blocks : int
        As in :func:`bigbird_pattern`.

    Returns
    -------
    pattern : SparsePattern
        :func:`bigbird_pattern` for these random blocks (a set: each pair once).
    counts : (nnz,) ndarray of int64
        Each kept pair's multiplicity :math:`c_{ij} \ge 1`, in the pattern's CSR order.

    Examples
    --------
    >>> R = [[-1], [0], [0], [0], [0], [-1]]                      # HuggingFace eval mode, r = 1
    >>> p, c = bigbird_key_counts(6, R, block_size=1)
    >>> p.to_dense(c).astype(int)
    array([[1, 1, 1, 1, 1, 1],
           [2, 1, 1, 0, 0, 1],
           [2, 1, 1, 1, 0, 1],
           [2, 0, 1, 1, 1, 1],
           [2, 0, 0, 1, 1, 1],
           [1, 1, 1, 1, 1, 1]])
    """
    R = as_indices("random_blocks", random_blocks, ndim=2)
    n, _ = check_sizes(n, None)
    b = check_positive_int("block_size", block_size)
    r, g, half = _settings(R.shape[1], num_global_blocks, num_window_blocks, "disjoint", False)
    _check_layout(n // b, r, g, half, "disjoint", False, n=n, block_size=b)
    nb = n // b
    blocks, R = _block_pattern(nb, R.shape[1], num_global_blocks, num_window_blocks, None, R, "disjoint")
    base, _ = _block_pattern(nb, 0, num_global_blocks, num_window_blocks, None, None, "disjoint")
    keys = blocks.row_ids() * nb + blocks.indices                               # (I, J) as one sorted key
    listed = R >= 0
    random_keys = np.sort((np.arange(nb)[:, None] * nb + R)[listed])
    counts = (np.isin(keys, base.row_ids() * nb + base.indices).astype(np.int64)
              + np.searchsorted(random_keys, keys, "right") - np.searchsorted(random_keys, keys, "left"))
    return _expand_blocks(blocks, b, counts)


def _expand_blocks(blocks: SparsePattern, b: int, data: NDArray | None = None):
    """The token pattern layout ⊗ 1_{b×b}, written in CSR form in O(nnz); with ``data`` (one value per
    block pair), also each token pair's value (its block pair's): ``(pattern, values)``."""
    n = blocks.n * b
    template = (blocks.indices[:, None] * b + np.arange(b)).ravel()          # each block row's keys, sorted
    start = blocks.indptr[:-1] * b                                            # block row I's keys in template
    length = blocks.row_counts() * b
    token_block = np.arange(n) // b
    counts = length[token_block]                                              # token row i keeps row ⌊i/b⌋'s keys
    indptr = np.concatenate([[0], np.cumsum(counts)])
    dtype = index_dtype(max(n, indptr[-1]))                                    # in place, narrow: ~12 B/pair
    position = np.arange(indptr[-1], dtype=dtype)
    position += np.repeat((start[token_block] - indptr[:-1]).astype(dtype), counts)   # into the template
    pattern = SparsePattern(indptr, template.astype(dtype)[position], n, n)
    if data is None:
        return pattern
    return pattern, np.repeat(data, b)[position]                             # the template's block pairs


def _half_window(num_window_blocks) -> int:
    if check_positive_int("num_window_blocks", num_window_blocks) % 2 == 0:
        raise ValueError(f"num_window_blocks must be an odd positive int (the block and w on each side), "
                         f"got {num_window_blocks!r}")
    return int(num_window_blocks) // 2


def _drawing(num_random_blocks, rng, random_blocks) -> bool:
    """Whether the random blocks are drawn from ``rng`` (rather than given, or none); given blocks leave ``rng``
    unused, and blocks to draw without ``rng`` get the one missing-draw message."""
    r = check_non_negative_int("num_random_blocks", num_random_blocks)
    if random_blocks is None and r and rng is None:
        raise missing_draw("bigbird", "random_blocks", f"its {r} random blocks per row")
    return random_blocks is None and r > 0


def _settings(num_random_blocks, num_global_blocks, num_window_blocks, candidates, drawing: bool):
    """Validated (r, g, (w_b − 1)/2) and candidates, before any block count is looked at."""
    r = check_non_negative_int("num_random_blocks", num_random_blocks)
    g = check_non_negative_int("num_global_blocks", num_global_blocks)
    half = _half_window(num_window_blocks)
    check_choice("candidates", candidates, CANDIDATES)
    if drawing and candidates == "official" and (half != 1 or g != 2):
        raise ValueError(
            "candidates='official' reproduces bigbird_block_rand_mask, which assumes num_window_blocks=3 and "
            f"num_global_blocks=2; got num_window_blocks={num_window_blocks}, num_global_blocks={num_global_blocks}"
        )
    return r, g, half


def _layout_problem(nb: int, r: int, g: int, half: int, candidates: str, drawing: bool) -> str | None:
    """Why ``nb`` blocks cannot hold BigBird's layout with these settings, or ``None`` if they can."""
    if nb < 1:
        return "there is no block"
    if g > nb:
        return f"num_global_blocks={g} exceeds num_blocks={nb}"
    if not drawing or nb > _surely_enough(r, g, half):
        return None
    for I in _distinct_rows(nb, g, half):
        size = _pool_size(_candidates(I, nb, half, g, candidates))
        if size < r:
            return (f"num_random_blocks={r} but block row {I} has only {size} candidate blocks "
                    f"(num_blocks={nb}, num_window_blocks={2 * half + 1}, num_global_blocks={g}, "
                    f"candidates={candidates!r})")
    return None


def _distinct_rows(nb: int, g: int, half: int) -> NDArray:
    """The middle block rows whose candidate counts may differ: those within half + 3 blocks of either end, and
    one row between them (every row between has the same count, for either candidate set)."""
    lo, hi = (g + 1) // 2, nb - g // 2                             # the middle rows [lo, hi)
    edge = half + 3
    if hi - lo <= 2 * edge + 1:
        return np.arange(lo, hi)
    return np.array([*range(lo, lo + edge + 1), *range(hi - edge, hi)])


def _working_counts(r: int, g: int, half: int, candidates: str, drawing: bool) -> tuple[int, list[int]]:
    """The block counts the layout takes: every count from ``start`` on, and the ``isolated`` ones below it.

    Never a loop over r: a count c in (g, r] has a middle row with at most c − 1 candidates (c − 2 for
    "official"), so besides c = g (no middle row) only counts above r can work; "disjoint" rows have at least
    c − g − (2·half + 1) candidates, and a central row exactly that many.
    """
    if not drawing or r == 0:
        return max(g, 1), []
    if candidates == "disjoint":
        return g + 2 * half + 1 + r, [g] if g >= 1 else []
    top = _surely_enough(r, g, half) + 1                           # "official": g = 2 and half = 1, so ≤ 11 counts
    counts = sorted({g, *range(r + 1, top + 1)})
    works = [c for c in counts if _layout_problem(c, r, g, half, candidates, drawing) is None]
    start = top
    while start - 1 in works:                                      # the run of counts reaching past `top`
        start -= 1
    return start, [c for c in works if c < start]


def _surely_enough(r: int, g: int, half: int) -> int:
    """A block count above which every middle row has r candidates, for both candidate sets.

    "disjoint": at least nb − g − (2·half + 1) candidates per row; "official" (half = 1, g = 2): at
    least nb − 5.
    """
    return g + 2 * half + 1 + r + 4


def _check_layout(nb: int, r: int, g: int, half: int, candidates: str, drawing: bool, *,
                  n: int | None = None, block_size: int | None = None) -> None:
    """Refuse a block count (or a length ``n``) BigBird's layout cannot take, saying which ones it takes."""
    problem = _layout_problem(nb, r, g, half, candidates, drawing)
    if n is not None and n % block_size:
        problem = f"n={n} must be a multiple of block_size={block_size} (BigBird works in whole blocks)"
    elif n is not None and nb == 0:
        problem = "n=0 holds no block"
    elif n is not None and problem is not None:
        problem = f"n={n} makes num_blocks={nb}: {problem}"
    if problem is None:
        return
    start, isolated = _working_counts(r, g, half, candidates, drawing)
    scale, unit = (1, "num_blocks") if n is None else (block_size, "n")
    isolated = [str(c * scale) for c in isolated]
    lengths = (f"{unit} = {' or '.join(isolated)} or " if isolated else "") + f"{unit} >= {start * scale}"
    drawn = (f"num_random_blocks={r} drawn from candidates={candidates!r}" if drawing else
             f"num_random_blocks={r}" + (" given as random_blocks" if r else ""))
    where = "" if n is None else f", a multiple of block_size={block_size}"
    raise ValueError(f"{problem}; with {drawn}, num_global_blocks={g} and num_window_blocks={2 * half + 1}, "
                     f"BigBird takes {lengths}{where}")


def _global_blocks(nb: int, g: int) -> NDArray:
    """The global blocks: the first ⌈g/2⌉ and the last ⌊g/2⌋ (``g <= nb``)."""
    first = (g + 1) // 2
    return np.concatenate([np.arange(first), np.arange(nb - (g - first), nb)]).astype(np.int64)


def _is_global(nb: int, g: int) -> NDArray:
    is_global = np.zeros(nb, dtype=bool)
    is_global[_global_blocks(nb, g)] = True
    return is_global


def _candidates(I: int, nb: int, half: int, g: int, candidates: str) -> tuple[range, ...]:
    """The blocks middle row I may draw its random blocks from, as sorted disjoint ranges (O(1) memory)."""
    if candidates == "official":
        return _official_candidates(I, nb)
    lo, hi = (g + 1) // 2, nb - g // 2                             # the non-global blocks [lo, hi)
    return range(lo, max(lo, I - half)), range(max(lo, I + half + 1), hi)   # outside |J − I| <= half


def _official_candidates(I: int, nb: int) -> tuple[range, ...]:
    """The candidate blocks of row I in bigbird_block_rand_mask (last_idx=-1), quirks included."""
    middle_seq = range(1, nb - 1)                                  # sliced as the code slices its array
    last = nb - 1
    if I == 1:
        return (middle_seq[2:last],)
    if I == 2:
        return (middle_seq[3:last],)
    if I in (nb - 3, nb - 2):
        return (middle_seq[:last],)                                # window not excluded
    return middle_seq[:I - 2], middle_seq[I + 1:last]


def _pool_size(pool: tuple[range, ...]) -> int:
    """How many blocks the ranges hold (``len`` of a range fails above 2⁶³)."""
    return sum(max(0, p.stop - p.start) for p in pool)


def _pool_items(pool: tuple[range, ...], picks: NDArray) -> NDArray:
    """Items ``picks`` of the concatenation of the (step-1) ranges in ``pool``."""
    offsets = np.cumsum([0, *map(len, pool)])
    which = np.searchsorted(offsets, picks, side="right") - 1
    return np.array([p.start for p in pool], dtype=np.int64)[which] + picks - offsets[which]


def _check_random_blocks(random_blocks, nb: int, r: int, G: NDArray) -> NDArray:
    R = as_indices("random_blocks", random_blocks, ndim=2)
    if R.shape[0] != nb:
        raise ValueError(f"random_blocks must have shape (num_blocks={nb}, r), got shape {R.shape}")
    if R.shape[1] != r:
        raise ValueError(f"random_blocks has {R.shape[1]} columns but num_random_blocks={r}")
    R = R.astype(np.int64)
    if np.any((R < -1) | (R >= nb)):
        raise ValueError(f"random_blocks must lie in [0, num_blocks={nb}) (or be -1 for none), "
                         f"got values in [{R.min()}, {R.max()}]")
    if np.any(R[G] >= 0):
        raise ValueError(f"random_blocks must be -1 in the global rows {G.tolist()} (they attend to every block)")
    return R                      # repeats (HuggingFace's eval-mode zeros) and window or global blocks allowed


def _bigbird(n, m, causal, rng, block_size=2, num_random_blocks=1, num_global_blocks=2, num_window_blocks=3,
             random_blocks=None, candidates="disjoint", repeats="once"):
    """blocks of 2, 1 random block per row, from rng; repeats="count": a pair held twice by the official
    kernels' concatenation of window, global and random blocks enters the softmax twice (bigbird_key_counts)"""
    check_choice("repeats", repeats, REPEATS)
    pattern, R = _drawn_pattern(n, block_size, num_random_blocks, num_global_blocks, num_window_blocks,
                                None if random_blocks is not None else rng, random_blocks, candidates)
    if repeats == "once":
        return pattern, {"random_blocks": R}
    _, counts = bigbird_key_counts(n, R, block_size=block_size, num_global_blocks=num_global_blocks,
                                   num_window_blocks=num_window_blocks)
    return pattern, {"random_blocks": R}, np.log(counts)


def _exact(n, m):
    """Four blocks (n/4 tokens each): the window of 3 blocks and the 2 global blocks cover them all."""
    if n % 4:
        raise ValueError(f"bigbird's exact limit here takes n divisible by 4 (four whole blocks), got n={n}")
    return {"block_size": n // 4, "num_random_blocks": 0}


RECORD = Mechanism(
    id="bigbird", title="BigBird (block form: window, global, random blocks)", family="sparse",
    section="4.1.1.2 (Fig. 5d)", paper=BIGBIRD,
    equation=r"J_I = \{I-1, I, I+1\} \cup G \cup R_I \text{ (blocks of } b\text{)}", time="O(n·(3+g+r)·b·d)",
    memory="O(n·(3+g+r)·b)", kind="attention", methods=("equation", "csr", "bsr", "auto"), function=bigbird_pattern,
    apply=pattern_apply(_bigbird, "bigbird", cross=False, causal_ok=False), causal=False, position_dependent=True,
    cross=False, example_length=16, figure="refattn.figures.sparse:bigbird", exact_options=_exact,
    exact_limit="(3 + g + r)·b ≥ n: every block row reaches every block", draws=("random_blocks",),
)
