r"""Attention restricted to a sparsity pattern (survey §4.1, Eq. 9).

    Â_ij = q_i k_jᵀ / √d   if (i, j) is kept,   −∞ otherwise
    out_i = Σ_{j kept} softmax(Â_i)_j v_j

Three paths that the tests hold equal: ``method="equation"`` is exactly
:func:`~refattn.scaled_dot_product_attention` under the pattern's dense mask (the definition,
for small n); ``method="csr"`` is a Numba kernel that visits only the kept pairs, so its time
is O(nnz·d) and its memory O(nnz) for the pattern plus O(n·d) for the inputs; ``method="bsr"``
computes the same pairs as b × b tiles through BLAS, for patterns made of blocks.
"""
from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.budget import check_fits, memory_budget
from ..common.checks import (
    as_float,
    broadcast_batch,
    causal_alignment,
    check_bool,
    check_choice,
    check_scale,
    checked_qkv,
    default_scale,
)
from ..core.sdpa import scaled_dot_product_attention
from ..core.softmax import FULLY_MASKED_POLICIES
from ..deprecation import take_renamed
from ..draws import tracing
from ..kernels import kernel_rows
from ..masks import check_key_lengths, check_mask_shape
from ..mechanism import AttentionResult
from .pattern import SparsePattern

__all__ = ["attend_pattern", "block_structure", "pattern_apply", "sparse_attention"]

METHODS = ("equation", "csr", "bsr", "auto")

BLOCK_FILL = 0.5
"""``method="auto"`` takes the bsr kernel when the pattern's kept pairs fill at least this fraction of its tiles."""


def sparse_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    pattern: SparsePattern | Sequence,
    *,
    mask: ArrayLike | None = None,
    key_lengths: ArrayLike | None = None,
    pair_bias: ArrayLike | None = None,
    scale: float | None = None,
    fully_masked: str = "zero",
    return_weights: bool = False,
    method: str = "auto",
) -> NDArray | tuple[NDArray, NDArray]:
    r"""Scaled dot-product attention over the (query, key) pairs that ``pattern`` keeps.

    .. math::

        \operatorname{out}_i = \sum_{j \in J_i}
        \frac{\exp(q_i k_j^\top / \sqrt{d} + B_{ij})}{\sum_{l \in J_i} \exp(q_i k_l^\top / \sqrt{d} + B_{il})}\, v_j

    where :math:`J_i` is the pattern's row *i* less the pairs that ``mask`` or ``key_lengths``
    hide, and :math:`B` the additive bias of a float ``mask`` plus ``pair_bias`` (0 without them).

    Parameters
    ----------
    q : (..., n, d) array_like
        Queries.
    k : (..., m, d) array_like
        Keys.
    v : (..., m, d_v) array_like
        Values.
    pattern : SparsePattern, or a (nested) sequence of them
        The kept pairs :math:`J_i` of an n × m attention, shared by all leading dims; or a grid
        of patterns, one per leading index: a sequence of H patterns is one per head (axis −3,
        e.g. Longformer's per-head dilation), a nested ``[[p_00, p_01, ...], ...]`` of shape
        (B, H) one per batch entry and head, a grid of shape (B, 1) one per batch entry shared by
        the heads. The grid lines up with the last leading dims of q, k, v (and ``mask``,
        ``key_lengths``), each of its dims equal to theirs or 1.
    mask : (..., n, m) array_like of bool or float, optional
        As in :func:`~refattn.scaled_dot_product_attention`, combined with the pattern: boolean,
        ``True`` where query *i* may attend to key *j* (a pair is kept when the pattern and the
        mask both keep it); float, an additive bias :math:`B` on the kept pairs whose ``-inf``
        entries leave the pair out. Any shape that broadcasts to ``(..., n, m)``.
    key_lengths : (...) array_like of int, optional
        Key padding as lengths, as in :func:`~refattn.scaled_dot_product_attention`: the rows of
        batch index ``b`` keep only keys ``j < key_lengths[b]``; its shape broadcasts against the
        leading dims from the right (``lengths[:, None]`` for ``(B, H, n, d)`` inputs).
    pair_bias : (..., nnz) array_like of float, optional
        An additive bias per kept pair of one pattern, in its CSR order (e.g. the log of each
        pair's multiplicity, :func:`~refattn.sparse.bigbird_key_counts`); ``-inf`` leaves the
        pair out. Its leading dims broadcast against those of q, k, v. One pattern only.
    scale : float, optional
        Default :math:`1/\sqrt{d}`.
    fully_masked : {"zero", "nan", "uniform"}, default "zero"
        Output of a query whose row keeps no key (after ``mask`` and ``key_lengths``), as in
        :func:`~refattn.scaled_dot_product_attention`.
    return_weights : bool, default False
        Also return the weights: dense ``(..., n, m)`` for ``method="equation"``; for
        ``method="csr"`` and ``"bsr"`` one value per pair of the pattern, ``(..., nnz)`` in CSR order (0 for a
        pair that ``mask`` or ``key_lengths`` hides; densify small ones with
        ``pattern.to_dense(w)``; a "uniform" empty row has no stored pair to show), and with a
        grid of patterns a nested list of the grid's shape holding each pattern's array.
    method : {"equation", "csr", "bsr", "auto"}, default "auto"
        "equation": dense masked softmax (materialises n × m; the definition). "csr": the Numba
        kernel, O(nnz·d) time and O(nnz) memory (a ``mask`` is read only at the kept pairs).
        "bsr": the block-sparse kernel (:mod:`refattn.kernels.bsr`): the pattern's b × b tiles
        that hold a kept pair go through BLAS with an online softmax across a row's tiles,
        partial tiles masked pair by pair; the same pairs and results as "csr", several times
        faster for patterns made of blocks (BigBird, block local, windows), slower for scattered
        pairs (:func:`block_structure` measures the fill). "auto": "equation" while its dense
        (..., n, m) scores fit the memory budget (:func:`refattn.common.memory_budget`), else
        "bsr" when the kept pairs fill at least :data:`BLOCK_FILL` of the tiles, "csr" otherwise;
        with ``return_weights`` always "equation" (dense weights, refused over the budget).

    Returns
    -------
    out : (..., n, d_v) ndarray
    weights : ndarray or list
        Only if ``return_weights``.

    Notes
    -----
    Both methods follow :func:`~refattn.scaled_dot_product_attention`'s rules for edge sizes
    (m = 0: every row follows ``fully_masked``, 0 under "zero" and "uniform", NaN under "nan"), for
    masking by selection (NaN or Inf in a hidden key or value never reaches the output) and for a
    kept score that is not finite (Inf/NaN in its query or key, or an overflowing dot product):
    its row is NaN.

    References
    ----------
    .. [1] T. Lin et al., "A Survey of Transformers", arXiv:2106.04554v2, §4.1, Eq. (9).

    Examples
    --------
    >>> from refattn.sparse import band_pattern
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 6, 4))
    >>> out = sparse_attention(q, k, v, band_pattern(6, 1))
    >>> bool(np.allclose(out, sparse_attention(q, k, v, band_pattern(6, 1), method="csr")))
    True
    >>> lengths = sparse_attention(q, k, v, band_pattern(6, 1), key_lengths=4, method="csr")
    >>> bool(np.allclose(lengths, sparse_attention(q, k, v, band_pattern(6, 1), mask=np.arange(6) < 4)))
    True
    """
    check_choice("method", method, METHODS)
    check_choice("fully_masked", fully_masked, FULLY_MASKED_POLICIES)
    return_weights = check_bool("return_weights", return_weights)
    q, k, v, batch = checked_qkv(q, k, v)
    n, m = q.shape[-2], k.shape[-2]
    scale = default_scale(q.shape[-1]) if scale is None else check_scale(scale)
    options = {"scale": scale, "fully_masked": fully_masked, "return_weights": return_weights}
    if mask is not None:
        mask = check_mask_shape(mask, n, m)
        if mask.dtype.kind not in "bf":
            raise TypeError(f"mask must be bool (True = may attend) or float (additive bias), got dtype "
                            f"{mask.dtype} with shape {mask.shape}")
        batch = broadcast_batch({"q, k, v": batch, "mask": mask.shape[:-2]})
    if key_lengths is not None:
        key_lengths = check_key_lengths(key_lengths, m)
        batch = broadcast_batch({"q, k, v (and mask)": batch, "key_lengths": key_lengths.shape})
    patterns = _check_patterns(pattern, n, m, batch)              # object array: the grid, 0-d for one
    if pair_bias is not None:
        pair_bias = _check_pair_bias(pair_bias, patterns)
        batch = broadcast_batch({"q, k, v (and mask, key_lengths)": batch, "pair_bias": pair_bias.shape[:-1]})

    if method == "auto":
        dense = 4 * 8 * math.prod((*batch, n, m))                 # the equation path peaks near 4× its scores
        method = "equation" if return_weights or dense <= memory_budget() else "auto"   # auto: bsr or csr
    if method == "equation":
        kept = np.stack([p.to_mask() for p in patterns.ravel()]).reshape(*patterns.shape, n, m)
        if pair_bias is not None:                                  # float: the pattern's pairs carry their bias
            kept = patterns[()].to_dense(pair_bias, fill=-np.inf)
        if mask is None:
            mask = kept
        else:
            mask = _combined(kept, mask)
        return scaled_dot_product_attention(q, k, v, mask, key_lengths=key_lengths, method="equation", **options)
    if patterns.ndim == 0:
        return _csr(q, k, v, patterns[()], mask, key_lengths, pair_bias, batch, method, **options)
    return _csr_grid(q, k, v, patterns, mask, key_lengths, batch, method, options)


def _combined(kept: NDArray, mask: NDArray) -> NDArray:
    """The pattern (bool, or float with −∞ off it) and a boolean or float ``mask`` as one mask for sdpa."""
    if kept.dtype == np.bool_:
        return kept & mask if mask.dtype == np.bool_ else np.where(kept, mask, -np.inf)
    return np.where(mask, kept, -np.inf) if mask.dtype == np.bool_ else kept + mask


def _check_pair_bias(pair_bias, patterns: NDArray) -> NDArray:
    """``pair_bias`` as a float array (..., nnz) of the one pattern given, or a named error."""
    if patterns.ndim:
        raise ValueError(f"pair_bias needs one pattern (its pairs' CSR order), got a grid of shape {patterns.shape}")
    pair_bias = as_float("pair_bias", pair_bias)
    nnz = patterns[()].nnz
    if pair_bias.shape[-1:] != (nnz,):
        raise ValueError(f"pair_bias must have shape (..., nnz={nnz}), got shape {pair_bias.shape}")
    return pair_bias


def block_structure(pattern: SparsePattern, d_k: int, d_v: int) -> tuple[int, tuple[NDArray, NDArray], float]:
    """The block size ``b`` the bsr kernel tiles ``pattern`` with, its block layout, and the fill ``nnz / area``.

    Tries the dense kernel's tile ``b`` (:func:`~refattn.kernels.tiles.default_block_size`: 64 for
    d <= 64), and ``b / 2`` when the kept pairs fill less than :data:`BLOCK_FILL` of b's tiles,
    keeping the better filled (the larger on a tie). ``area`` counts the (query, key) entries of
    the tiles holding a kept pair (:func:`~refattn.kernels.bsr.block_layout`), so the fill is 1
    for a pattern made of whole b × b blocks (BigBird with b = 64), about 2/3 for a band of
    half-width w = b, and small for a scattered pattern. O(nnz) in Numba, no n × m array.

    Parameters
    ----------
    pattern : SparsePattern
        The kept pairs.
    d_k, d_v : int
        Widths of the queries and values (they set the tile size).

    Returns
    -------
    block_size : int
    layout : (block_indptr, block_indices)
        Per block row, the block columns holding a kept pair.
    fill : float
        ``nnz / area`` (1.0 for an empty pattern).
    """
    from ..kernels.bsr import block_layout
    from ..kernels.tiles import default_block_size

    tile = default_block_size(d_k, d_v)[0]
    best = None
    for b in (tile, max(tile // 2, 1)):
        block_indptr, block_indices, area = block_layout(pattern.indptr, pattern.indices, pattern.n, pattern.m, b)
        fill = pattern.nnz / area if area else 1.0
        if best is None or fill > best[2]:
            best = (b, (block_indptr, block_indices), fill)
        if fill >= BLOCK_FILL:                                     # the larger tile will do
            break
    return best


def _csr(q, k, v, pattern, mask, key_lengths, pair_bias, batch, method, *, scale, fully_masked, return_weights):
    """The csr or bsr kernel over flattened batch rows; ``method="auto"``: bsr when the pattern fills its tiles."""
    from ..kernels import POLICY_CODES
    from ..kernels.bsr import sparse_attention_bsr
    from ..kernels.csr import sparse_attention_csr  # Numba loads on first use only

    n, d_v = q.shape[-2], v.shape[-1]
    flat = [kernel_rows(x, batch, x.shape[-2:]) for x in (q, k, v)]   # (B, ·, ·)
    B = flat[0].shape[0]
    out = np.empty((B, n, d_v))
    weights = np.empty((B, pattern.nnz if return_weights else 0))
    bias = _pair_bias(pattern, mask, key_lengths, batch)
    if pair_bias is not None:
        bias = np.broadcast_to(pair_bias, (*batch, pattern.nnz)) + (0.0 if bias is None else bias)
    bias = None if bias is None else bias.reshape(B, pattern.nnz)
    if method != "csr":
        block_size, layout, fill = block_structure(pattern, q.shape[-1], d_v)
        method = "bsr" if method == "bsr" or fill >= BLOCK_FILL else "csr"
    if method == "bsr":
        sparse_attention_bsr(*flat, (pattern.indptr, pattern.indices), (*layout, block_size), scale,
                             POLICY_CODES[fully_masked], out, weights, bias)
    else:
        sparse_attention_csr(*flat, (pattern.indptr, pattern.indices), scale, POLICY_CODES[fully_masked], out,
                             weights, bias)
    out = out.reshape(*batch, n, d_v)
    return (out, weights.reshape(*batch, pattern.nnz)) if return_weights else out


def _pair_bias(pattern, mask, key_lengths, batch) -> NDArray | None:
    """The additive bias of every kept pair, ``(*batch, nnz)`` (−∞: hidden by ``mask`` or ``key_lengths``); None
    without either.

    Reads ``mask`` at the kept pairs only: O(batch · nnz), never n × m.
    """
    if mask is None and key_lengths is None:
        return None
    rows, cols = pattern.row_ids(), pattern.indices
    bias = np.zeros((*batch, pattern.nnz))
    if mask is not None:
        at_pairs = np.broadcast_to(mask, (*batch, *pattern.shape))[..., rows, cols]   # (*batch, nnz), a view read
        if mask.dtype == np.bool_:
            bias[~at_pairs] = -np.inf
        else:
            bias[...] = at_pairs
    if key_lengths is not None:
        bias[cols >= np.broadcast_to(key_lengths, batch)[..., None]] = -np.inf
    return bias


def _csr_grid(q, k, v, patterns, mask, key_lengths, batch, method, options):
    """A grid of patterns over the last leading dims: attend cell by cell and put the cells back."""
    p = patterns.ndim
    grid = batch[len(batch) - p:]
    patterns = np.broadcast_to(patterns, grid)
    out = np.empty((*batch, q.shape[-2], v.shape[-1]))
    weights = np.empty(grid, dtype=object)

    def part(x, core, at):
        """x's slice at the grid cell ``at`` (its last ``core`` axes whole), broadcast over the batch first."""
        whole = np.broadcast_to(x, (*batch, *x.shape[x.ndim - core:])) if x is not None else None
        return None if whole is None else whole[(*at, *(slice(None),) * core)]

    for cell in np.ndindex(grid):
        at = (Ellipsis, *cell)
        result = _csr(part(q, 2, at), part(k, 2, at), part(v, 2, at), patterns[cell], part(mask, 2, at),
                      part(key_lengths, 0, at), None,
                      batch[:len(batch) - p], method, **options)
        out[(*at, slice(None), slice(None))], weights[cell] = result if options["return_weights"] else (result, None)
    return (out, weights.tolist()) if options["return_weights"] else out


def _check_patterns(pattern, n: int, m: int, batch: tuple[int, ...]) -> NDArray:
    """``pattern`` as an object array of SparsePatterns (0-d for one), its grid lined up with ``batch``."""
    if isinstance(pattern, SparsePattern):
        _check_pattern(pattern, n, m, "pattern")
        return np.array(pattern, dtype=object)
    grid = np.empty(0, dtype=object) if isinstance(pattern, (str, bytes)) else np.array(pattern, dtype=object)
    if grid.size == 0 or grid.ndim == 0 or not all(isinstance(p, SparsePattern) for p in grid.ravel()):
        raise TypeError("pattern must be a SparsePattern or a non-empty sequence of them (one per head), or a "
                        "nested sequence of them (one per batch entry and head)")
    p = grid.ndim
    if p == 1 and grid.shape[0] != (batch[-1] if batch else None):
        raise ValueError(
            f"{grid.shape[0]} patterns given, one per head, but the head axis (−3) of q, k, v has size "
            f"{batch[-1] if batch else None} (batch shape {batch})"
        )
    if p > len(batch) or any(g not in (1, b) for g, b in zip(grid.shape, batch[len(batch) - p:], strict=True)):
        raise ValueError(
            f"patterns given in a grid of shape {grid.shape}, one per leading index, but the leading (batch) "
            f"dims of q, k, v (and mask, key_lengths) are {batch}: the grid must match their last {p} dims "
            "(or be 1 there)"
        )
    for cell in np.ndindex(grid.shape):
        _check_pattern(grid[cell], n, m, f"pattern{list(cell)}")
    return grid


def _check_pattern(pattern: SparsePattern, n: int, m: int, name: str) -> None:
    if pattern.shape != (n, m):
        raise ValueError(f"{name} has shape {pattern.shape} but q has n={n} queries and k has m={m} keys")


def attend_pattern(q, k, v, pattern: SparsePattern, *, method: str = "auto",
                   return_weights: bool = False, pair_bias: NDArray | None = None) -> AttentionResult:
    """Sparse attention over ``pattern`` as an :class:`~refattn.mechanism.AttentionResult`.

    With ``return_weights``, the weights are dense (n × m, for plots and error measurements), exactly
    0 outside the pattern in both methods (also in a row that a non-finite kept score makes NaN),
    and ``allowed`` is the pattern's mask; weights above the memory budget raise
    :class:`~refattn.common.MemoryBudgetError` before anything is allocated. Without, the csr
    method never holds an n × m array.

    Parameters
    ----------
    q, k, v : array_like
        As in :func:`sparse_attention`; checked before anything else.
    pattern : SparsePattern
        The kept pairs.
    method : {"equation", "csr", "bsr", "auto"}, default "auto"
        As in :func:`sparse_attention`.
    return_weights : bool, default False
        Also return the dense weights and the pattern's mask.
    pair_bias : (nnz,) ndarray, optional
        An additive bias per kept pair, as in :func:`sparse_attention`.

    Returns
    -------
    AttentionResult
    """
    q, k, v, batch = checked_qkv(q, k, v)
    check_choice("method", method, METHODS)
    if not isinstance(pattern, SparsePattern):
        raise TypeError(f"pattern must be a SparsePattern, got {type(pattern).__name__}")
    _check_pattern(pattern, q.shape[-2], k.shape[-2], "pattern")
    if not check_bool("return_weights", return_weights):
        return AttentionResult(sparse_attention(q, k, v, pattern, pair_bias=pair_bias, method=method))
    check_weights_fit(batch, pattern.n, pattern.m)
    out, w = sparse_attention(q, k, v, pattern, pair_bias=pair_bias, method=method, return_weights=True)
    mask = pattern.to_mask(max_size=pattern.n * pattern.m)         # within budget: 1/8 of the weights
    if method in ("csr", "bsr"):                                   # weights per kept pair, in CSR order
        w = pattern.to_dense(w)
    else:                                                          # "auto" with weights is "equation"
        np.copyto(w, 0.0, where=~mask)                             # a NaN row (non-finite kept score) too
    return AttentionResult(out, w, np.broadcast_to(mask, (*out.shape[:-1], pattern.m)))


def pattern_apply(make: Callable[..., SparsePattern], name: str, *, cross: bool = True,
                  causal_ok: bool = True, renamed: Mapping[str, str] | None = None) -> Callable:
    """The registry's uniform ``apply`` of a pattern, from ``make(n, m, causal, rng, **options) -> SparsePattern``.

    A maker that draws from ``rng`` returns ``(pattern, draws)`` instead: ``draws`` maps each of its
    options holding a random draw to the draw it made (or was given), as the record's ``draws``
    names them; ``(pattern, draws, pair_bias)`` adds a bias per kept pair (:func:`sparse_attention`).

    ``make`` builds the pattern for n queries and m keys with small demonstration defaults; its
    docstring says which, and its keyword parameters after ``rng`` are the entry's options (any
    other option is a ``TypeError`` naming it and the mechanism). ``causal="bottom-right"`` makes
    the n queries the last n of m positions: the last n rows of the causal m × m pattern (decoding
    with a key/value cache). ``cross=False``: the pattern is self-attention over one sequence, so n
    must equal m (except bottom-right). ``causal_ok=False``: the paper has no causal form, and
    ``causal`` must be False.

    q, k and v are checked before any shape is read, then ``method``, ``return_weights`` and the
    options; with ``return_weights=True`` the dense weights must fit the memory budget, checked
    before the pattern is built. n = 0 or m = 0 give an empty pattern where the maker defines one
    (n = 0: no output row; m = 0: zero rows, ``fully_masked="zero"``); makers whose structure needs
    some positions (a relay node, global tokens, whole blocks, a tree) refuse with a ``ValueError``
    saying which lengths work, for every method alike.

    Parameters
    ----------
    make : callable
        ``make(n, m, causal, rng, **options) -> SparsePattern`` (or ``(SparsePattern, draws)``),
        ``causal`` a bool.
    name : str
        The mechanism's id, for messages.
    cross : bool, default True
        The pattern takes n != m queries and keys.
    causal_ok : bool, default True
        The pattern has a causal form.
    renamed : dict, optional
        Old option names (old -> new), accepted with a ``DeprecationWarning`` for one release.

    Returns
    -------
    callable
        ``apply(q, k, v, *, causal=False, rng=None, return_weights=False, method="auto", **options)``,
        whose signature lists ``make``'s options.
    """
    option_parameters = list(inspect.signature(make).parameters.values())[4:]   # after (n, m, causal, rng)
    accepted = tuple(p.name for p in option_parameters)

    def apply(q, k, v, *, causal=False, rng=None, return_weights=False, method="auto", **options):
        q, k, v, batch = checked_qkv(q, k, v)
        check_choice("method", method, METHODS)
        return_weights = check_bool("return_weights", return_weights)
        options = take_renamed(name, options, renamed or {})
        check_options(name, options, accepted)
        n, m = q.shape[-2], k.shape[-2]
        alignment = causal_alignment(causal)
        if alignment is not None and not causal_ok:
            raise ValueError(f"{name} has no causal variant in its paper; pass causal=False, got causal={causal!r}")
        if not cross and n != m and alignment != "bottom-right":
            raise ValueError(
                f"{name} is self-attention over one sequence: q has n={n} queries but k has m={m} keys "
                "(causal='bottom-right' takes the last n of m positions)"
            )
        if return_weights:
            check_weights_fit(batch, n, m)
        with tracing(name):                                        # a missing draw's message names the id
            made = make(m, m, True, rng, **options) if alignment == "bottom-right" else \
                make(n, m, alignment is not None, rng, **options)
        if alignment == "bottom-right":
            pattern, draws, pair_bias = _made(made)
            if pair_bias is not None:                              # the last n rows' pairs: the CSR tail
                pair_bias = pair_bias[pattern.indptr[m - n]:]
            pattern = pattern.last_rows(n)
        else:
            pattern, draws, pair_bias = _made(made)
        result = attend_pattern(q, k, v, pattern, method=method, return_weights=return_weights, pair_bias=pair_bias)
        return result._replace(draws=draws)

    own = [p for p in inspect.signature(apply).parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    apply.__signature__ = inspect.Signature(own + [p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
                                                   for p in option_parameters])
    apply.__doc__ = f"The registry's uniform apply: attention over {name}'s pattern ({make.__doc__})"
    return apply


def _made(made) -> tuple[SparsePattern, dict, NDArray | None]:
    """A maker's pattern, the draws it reports (none when it returns the pattern alone) and its per-pair bias."""
    if isinstance(made, SparsePattern):
        return made, {}, None
    return (*made, None) if len(made) == 2 else made


def check_options(name: str, options: dict, accepted: Iterable[str]) -> None:
    """Refuse an option a registry entry does not take, naming it and the mechanism.

    Parameters
    ----------
    name : str
        The mechanism's id.
    options : dict
        The options given.
    accepted : iterable of str
        The options it takes.
    """
    accepted = tuple(accepted)
    unknown = [option for option in options if option not in accepted]
    if unknown:
        raise TypeError(f"{name} has no option {unknown[0]!r}; its options are: {', '.join(accepted) or 'none'}")


def check_weights_fit(batch: tuple[int, ...], n: int, m: int) -> None:
    """MemoryBudgetError, before allocating, if the dense (..., n, m) weights exceed the memory budget."""
    check_fits("the dense weights (return_weights=True)", (*batch, n, m))
