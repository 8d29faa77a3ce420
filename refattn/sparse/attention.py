r"""Attention restricted to a sparsity pattern (survey §4.1, Eq. 9).

    Â_ij = q_i k_jᵀ / √d   if (i, j) is kept,   −∞ otherwise
    out_i = Σ_{j kept} softmax(Â_i)_j v_j

Two paths that the tests hold equal: ``method="equation"`` is exactly
:func:`~refattn.scaled_dot_product_attention` under the pattern's dense mask (the definition,
for small n), and ``method="csr"`` is a Numba kernel that visits only the kept pairs, so its time
is O(nnz·d) and its memory O(nnz) for the pattern plus O(n·d) for the inputs.
"""
from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterable, Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common import (
    as_float,
    causal_alignment,
    check_bool,
    check_choice,
    check_fits,
    check_qkv,
    check_scale,
    default_scale,
    memory_budget,
)
from ..core.sdpa import scaled_dot_product_attention
from ..core.softmax import FULLY_MASKED_POLICIES
from ..kernels import kernel_rows
from ..mechanism import AttentionResult
from .pattern import SparsePattern

__all__ = ["attend_pattern", "pattern_apply", "sparse_attention"]

METHODS = ("equation", "csr", "auto")


def sparse_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    pattern: SparsePattern | Sequence[SparsePattern],
    *,
    scale: float | None = None,
    fully_masked: str = "zero",
    return_weights: bool = False,
    method: str = "auto",
) -> NDArray | tuple[NDArray, NDArray]:
    r"""Scaled dot-product attention over the (query, key) pairs that ``pattern`` keeps.

    .. math::

        \operatorname{out}_i = \sum_{j \in J_i}
        \frac{\exp(q_i k_j^\top / \sqrt{d})}{\sum_{l \in J_i} \exp(q_i k_l^\top / \sqrt{d})}\, v_j

    Parameters
    ----------
    q : (..., n, d) array_like
        Queries.
    k : (..., m, d) array_like
        Keys.
    v : (..., m, d_v) array_like
        Values.
    pattern : SparsePattern or sequence of SparsePattern
        The kept pairs :math:`J_i` of an n × m attention, shared by all leading dims; or one
        pattern per head, ``len(pattern) == q.shape[-3]`` (e.g. Longformer's per-head dilation).
    scale : float, optional
        Default :math:`1/\sqrt{d}`.
    fully_masked : {"zero", "nan", "uniform"}, default "zero"
        Output of a query whose row keeps no key, as in
        :func:`~refattn.scaled_dot_product_attention`.
    return_weights : bool, default False
        Also return the weights: dense ``(..., n, m)`` for ``method="equation"``; for
        ``method="csr"`` one value per kept pair, ``(..., nnz)`` in CSR order (densify small ones
        with ``pattern.to_dense(w)``; a "uniform" empty row has no stored pair to show), and with
        one pattern per head a list of the heads' arrays.
    method : {"equation", "csr", "auto"}, default "auto"
        "equation": dense masked softmax (materialises n × m; the definition). "csr": the Numba
        kernel, O(nnz·d) time and O(nnz) memory.
        "auto": "equation" while its dense (..., n, m) scores fit the memory budget
        (:func:`refattn.common.memory_budget`), else "csr"; with ``return_weights`` always
        "equation" (dense weights, refused over the budget).

    Returns
    -------
    out : (..., n, d_v) ndarray
    weights : ndarray
        Only if ``return_weights``.

    Notes
    -----
    Both methods follow :func:`~refattn.scaled_dot_product_attention`'s rules for edge sizes
    (m = 0: every row follows ``fully_masked``, 0 under "zero" and "uniform", NaN under "nan") and
    for a kept score that is not finite (Inf/NaN in its query or key, or an overflowing dot
    product): its row is NaN.

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
    """
    check_choice("method", method, METHODS)
    check_choice("fully_masked", fully_masked, FULLY_MASKED_POLICIES)
    return_weights = check_bool("return_weights", return_weights)
    q, k, v = (as_float(name, x) for name, x in (("q", q), ("k", k), ("v", v)))
    batch = check_qkv(q, k, v)
    n, m = q.shape[-2], k.shape[-2]
    scale = default_scale(q.shape[-1]) if scale is None else check_scale(scale)
    options = {"scale": scale, "fully_masked": fully_masked, "return_weights": return_weights}

    if method == "auto":
        dense = 4 * 8 * math.prod((*batch, n, m))                 # the equation path peaks near 4× its scores
        method = "equation" if return_weights or dense <= memory_budget() else "csr"
    if not isinstance(pattern, SparsePattern):
        return _per_head(q, k, v, _check_patterns(pattern, n, m, batch), batch, method, options)
    _check_pattern(pattern, n, m, "pattern")
    if method == "equation":
        return scaled_dot_product_attention(q, k, v, pattern.to_mask(), method="equation", **options)
    return _csr(q, k, v, pattern, batch, **options)


def _csr(q, k, v, pattern, batch, *, scale, fully_masked, return_weights):
    from ..kernels import POLICY_CODES
    from ..kernels.csr import sparse_attention_csr  # Numba loads on first use only

    n, d_v = q.shape[-2], v.shape[-1]
    flat = [kernel_rows(x, batch, x.shape[-2:]) for x in (q, k, v)]   # (B, ·, ·)
    B = flat[0].shape[0]
    out = np.empty((B, n, d_v))
    weights = np.empty((B, pattern.nnz if return_weights else 0))
    sparse_attention_csr(*flat, (pattern.indptr, pattern.indices), scale, POLICY_CODES[fully_masked], out, weights)
    out = out.reshape(*batch, n, d_v)
    return (out, weights.reshape(*batch, pattern.nnz)) if return_weights else out


def _per_head(q, k, v, patterns, batch, method, options):
    """One pattern per head (axis −3): attend head by head and stack the heads back."""
    q, k, v = (np.broadcast_to(x, (*batch, *x.shape[-2:])) for x in (q, k, v))
    results = [sparse_attention(q[..., h, :, :], k[..., h, :, :], v[..., h, :, :], p, method=method, **options)
               for h, p in enumerate(patterns)]
    if not options["return_weights"]:
        return np.stack(results, axis=-3)                          # (..., H, n, d_v)
    out = np.stack([r[0] for r in results], axis=-3)
    weights = [r[1] for r in results]                              # csr: (..., nnz_h), nnz differs by head
    return out, (np.stack(weights, axis=-3) if method == "equation" else weights)


def _check_patterns(patterns, n: int, m: int, batch: tuple[int, ...]) -> list[SparsePattern]:
    patterns = list(patterns)
    if not patterns or not all(isinstance(p, SparsePattern) for p in patterns):
        raise TypeError("pattern must be a SparsePattern or a non-empty sequence of them (one per head)")
    heads = batch[-1] if batch else None
    if heads != len(patterns):
        raise ValueError(
            f"{len(patterns)} patterns given, one per head, but the head axis (−3) of q, k, v has size "
            f"{heads} (batch shape {batch})"
        )
    for h, p in enumerate(patterns):
        _check_pattern(p, n, m, f"pattern[{h}]")
    return patterns


def _check_pattern(pattern: SparsePattern, n: int, m: int, name: str) -> None:
    if pattern.shape != (n, m):
        raise ValueError(f"{name} has shape {pattern.shape} but q has n={n} queries and k has m={m} keys")


def attend_pattern(q, k, v, pattern: SparsePattern, *, method: str = "auto",
                   return_weights: bool = False) -> AttentionResult:
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
    method : {"equation", "csr", "auto"}, default "auto"
        As in :func:`sparse_attention`.
    return_weights : bool, default False
        Also return the dense weights and the pattern's mask.

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
        return AttentionResult(sparse_attention(q, k, v, pattern, method=method))
    check_weights_fit(batch, pattern.n, pattern.m)
    out, w = sparse_attention(q, k, v, pattern, method=method, return_weights=True)
    mask = pattern.to_mask(max_size=pattern.n * pattern.m)         # within budget: 1/8 of the weights
    if method != "csr":                                            # "auto" with weights is "equation"
        np.copyto(w, 0.0, where=~mask)                             # a NaN row (non-finite kept score) too
    else:
        w = pattern.to_dense(w)
    return AttentionResult(out, w, np.broadcast_to(mask, (*out.shape[:-1], pattern.m)))


def pattern_apply(make: Callable[..., SparsePattern], name: str, *, cross: bool = True,
                  causal_ok: bool = True) -> Callable:
    """The registry's uniform ``apply`` of a pattern, from ``make(n, m, causal, rng, **options) -> SparsePattern``.

    A maker that draws from ``rng`` returns ``(pattern, draws)`` instead: ``draws`` maps each of its
    options holding a random draw to the draw it made (or was given), as the record's ``draws``
    names them.

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
        if alignment == "bottom-right":
            pattern, draws = _made(make(m, m, True, rng, **options))
            pattern = pattern.last_rows(n)
        else:
            pattern, draws = _made(make(n, m, alignment is not None, rng, **options))
        result = attend_pattern(q, k, v, pattern, method=method, return_weights=return_weights)
        return result._replace(draws=draws)

    own = [p for p in inspect.signature(apply).parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    apply.__signature__ = inspect.Signature(own + [p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
                                                   for p in option_parameters])
    apply.__doc__ = f"The registry's uniform apply: attention over {name}'s pattern ({make.__doc__})"
    return apply


def _made(made) -> tuple[SparsePattern, dict]:
    """A maker's pattern and the draws it reports (none when it returns the pattern alone)."""
    return (made, {}) if isinstance(made, SparsePattern) else made


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


def checked_qkv(q, k, v) -> tuple[NDArray, NDArray, NDArray, tuple[int, ...]]:
    """q, k, v as float64 arrays of compatible shapes, and their batch shape; named errors otherwise."""
    q, k, v = (as_float(name, x) for name, x in (("q", q), ("k", k), ("v", v)))
    return q, k, v, check_qkv(q, k, v)


def check_weights_fit(batch: tuple[int, ...], n: int, m: int) -> None:
    """MemoryBudgetError, before allocating, if the dense (..., n, m) weights exceed the memory budget."""
    check_fits("the dense weights (return_weights=True)", (*batch, n, m))
