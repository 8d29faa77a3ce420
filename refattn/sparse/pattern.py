r"""Sparsity patterns in CSR form: which keys *j* each query *i* may attend to.

An n × m attention pattern is stored the way ``scipy.sparse.csr_array`` stores a boolean matrix,
without the values: ``indices[indptr[i]:indptr[i + 1]]`` are the keys of query *i*, sorted and
unique. Builders write this form directly, so a band of width 2·128 + 1 at n = 65536 costs
O(nnz) memory and never an n × m array; ``to_mask()`` materialises small patterns for plots and
for the dense equation path.

    pattern ↔ bipartite graph: an edge i → j for every kept (i, j)   (survey §4.1, Fig. 3)

Patterns compose like boolean masks: ``a | b`` keeps the pairs of either (how the survey builds
compound patterns from atomic ones), ``a & b`` the pairs of both.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.budget import check_fits
from ..common.checks import causal_alignment
from ..common.ints import check_non_negative_int
from ..deprecation import renamed

__all__ = ["SparsePattern", "as_indices", "no_causal_form", "query_positions"]

MAX_DENSE = 2**26          # to_mask() refuses larger n·m (64 Mi booleans) unless told otherwise


@dataclass(frozen=True, eq=False)
class SparsePattern:
    """The kept (query, key) pairs of an n × m attention, in CSR form.

    Attributes
    ----------
    indptr : (n + 1,) ndarray of int64
        Row pointers: query *i*'s keys are ``indices[indptr[i]:indptr[i + 1]]``.
    indices : (nnz,) ndarray of int32 (int64 when m >= 2**31)
        Key indices, strictly increasing within each row, in ``[0, m)``. Four bytes per kept
        pair: at n = 65536 a BigBird pattern keeps 4·10⁷ pairs.
    n, m : int
        Number of queries and keys, >= 0 (a pattern of no query or no key is empty).

    The constructor checks every invariant and refuses, rather than casts, anything else: index
    arrays must hold integers (floats, bools and strings are a ``TypeError``, so 1.7 never becomes
    1), and indices are range-checked before they are narrowed to int32.
    """

    indptr: NDArray
    indices: NDArray
    n: int
    m: int

    def __post_init__(self) -> None:
        for name in ("n", "m"):
            object.__setattr__(self, name, check_non_negative_int(name, getattr(self, name)))
        indptr, indices = as_indices("indptr", self.indptr), as_indices("indices", self.indices)
        if indptr.shape != (self.n + 1,):
            raise ValueError(f"indptr must have shape (n + 1,) = ({self.n + 1},), got shape {indptr.shape}")
        if indptr[0] != 0 or indptr[-1] != len(indices) or np.any(np.diff(indptr) < 0):
            raise ValueError("indptr must start at 0, never decrease, and end at len(indices)")
        if len(indices) and (indices.min() < 0 or indices.max() >= self.m):   # before narrowing to int32
            raise ValueError(f"indices must lie in [0, m={self.m}), got values in [{indices.min()}, {indices.max()}]")
        indptr = np.ascontiguousarray(indptr, dtype=np.int64)
        indices = np.ascontiguousarray(indices, dtype=index_dtype(self.m))
        object.__setattr__(self, "indptr", indptr)
        object.__setattr__(self, "indices", indices)
        drops = np.flatnonzero(np.diff(indices) <= 0) + 1          # positions not above their left neighbour
        if drops.size and not np.isin(drops, indptr).all():        # allowed only where a row starts
            raise ValueError("indices must be strictly increasing within each row (sorted, no duplicates)")
        indptr.flags.writeable = False
        indices.flags.writeable = False

    # --- construction ------------------------------------------------------------------------

    @classmethod
    def from_pairs(cls, rows: ArrayLike, cols: ArrayLike, n: int, m: int) -> SparsePattern:
        """The pattern keeping the pairs ``(rows[t], cols[t])``; duplicates are merged.

        Parameters
        ----------
        rows, cols : (nnz,) array_like of int
            Query and key index of every kept pair, in any order.
        n, m : int
            Number of queries and keys.

        Returns
        -------
        SparsePattern
        """
        n, m = check_non_negative_int("n", n), check_non_negative_int("m", m)
        rows = as_indices("rows", rows, ndim=None).astype(np.int64, copy=False).ravel()
        cols = as_indices("cols", cols, ndim=None).astype(np.int64, copy=False).ravel()
        if rows.shape != cols.shape:
            raise ValueError(f"rows and cols must have the same length, got {rows.shape} and {cols.shape}")
        if rows.size and (rows.min() < 0 or rows.max() >= n):
            raise ValueError(f"rows must lie in [0, n={n}), got values in [{rows.min()}, {rows.max()}]")
        if cols.size and (cols.min() < 0 or cols.max() >= m):
            raise ValueError(f"cols must lie in [0, m={m}), got values in [{cols.min()}, {cols.max()}]")
        return cls._from_sorted_keys(_sorted_unique(rows * m + cols), n, m)

    @classmethod
    def from_mask(cls, mask: ArrayLike) -> SparsePattern:
        """The pattern of a boolean (n, m) mask (``True`` = may attend).

        Parameters
        ----------
        mask : (n, m) array_like of bool
            Dense mask.

        Returns
        -------
        SparsePattern

        Examples
        --------
        >>> p = SparsePattern.from_mask([[True, False, True], [False, False, False]])
        >>> p.indptr.tolist(), p.indices.tolist()
        ([0, 2, 2], [0, 2])
        """
        mask = _as_array("mask", mask)
        if mask.dtype != np.bool_ or mask.ndim != 2:
            raise TypeError(f"mask must be a 2-D boolean array, got dtype {mask.dtype} with shape {mask.shape}")
        _, cols = np.nonzero(mask)                                 # row-major: already sorted
        indptr = np.concatenate([[0], np.cumsum(np.count_nonzero(mask, axis=1))])
        return cls(indptr, cols, *mask.shape)

    @classmethod
    def from_row_ranges(cls, start: ArrayLike, stop: ArrayLike, m: int, step: ArrayLike = 1) -> SparsePattern:
        """Query *i* keeps ``range(start[i], stop[i], step[i])`` (clipped to ``[0, m)``): bands, windows, blocks.

        Parameters
        ----------
        start, stop : (n,) array_like of int
            First key and one past the last key of every row (before clipping).
        m : int
            Number of keys.
        step : int or (n,) array_like of int, default 1
            Stride (dilation) within each row, >= 1.

        Returns
        -------
        SparsePattern
            Built in O(nnz) time and memory, without sorting; an index array above the memory
            budget is refused before it is allocated (:func:`refattn.common.check_fits`).
        """
        m = check_non_negative_int("m", m)
        start = as_indices("start", start).astype(np.int64, copy=False)
        stop = as_indices("stop", stop).astype(np.int64, copy=False)
        if stop.shape != start.shape:
            raise ValueError(f"start and stop must have the same (n,) shape, got {start.shape} and {stop.shape}")
        step = as_indices("step", step, ndim=None).astype(np.int64, copy=False)
        if step.ndim and step.shape != start.shape:
            raise ValueError(f"step must be an int or have start's shape {start.shape}, got shape {step.shape}")
        step = np.broadcast_to(step, start.shape)
        if np.any(step < 1):
            raise ValueError(f"step must be >= 1, got minimum {step.min()}")
        lo = np.where(start < 0, start + (-start + step - 1) // step * step, start)   # first kept ≥ 0
        hi = np.minimum(stop, m)
        counts = np.maximum(0, (hi - lo + step - 1) // step)       # len(range(lo, hi, step))
        indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        dtype = index_dtype(max(m, indptr[-1]))                   # in place, in the narrowest type:
        check_fits("the pattern's indices", (int(indptr[-1]),), np.dtype(dtype).itemsize)
        indices = np.arange(indptr[-1], dtype=dtype)               # O(nnz) bytes, two arrays at most
        indices -= np.repeat(indptr[:-1].astype(dtype), counts)    # 0, 1, 2, … within each row
        if np.any(step != 1):
            indices *= np.repeat(step.astype(dtype), counts)
        indices += np.repeat(lo.astype(dtype), counts)             # lo_i + t·step_i
        return cls(indptr, indices, len(start), m)

    @classmethod
    def from_row_segments(cls, start: ArrayLike, stop: ArrayLike, m: int) -> SparsePattern:
        """Query *i* keeps ``range(start[i, t], stop[i, t])`` for every *t*: several windows per row.

        Parameters
        ----------
        start, stop : (n, T) array_like of int
            Segment bounds, within ``[0, m]``; along *t* the segments of a row must be sorted and
            disjoint (empty segments, ``stop <= start``, are allowed).
        m : int
            Number of keys.

        Returns
        -------
        SparsePattern
            Built in O(nnz) time and memory, without sorting; an index array above the memory
            budget is refused before it is allocated.
        """
        m = check_non_negative_int("m", m)
        start = as_indices("start", start, ndim=2).astype(np.int64, copy=False)
        stop = as_indices("stop", stop, ndim=2).astype(np.int64, copy=False)
        if start.shape != stop.shape:
            raise ValueError(f"start and stop must have the same (n, T) shape, got {start.shape} and {stop.shape}")
        lengths = np.maximum(stop - start, 0)                      # (n, T)
        counts = lengths.sum(axis=1)                               # (n,) keys per query
        flat = lengths.ravel()
        seg_ptr = np.concatenate([[0], np.cumsum(flat)]).astype(np.int64)
        check_fits("the pattern's indices", (int(seg_ptr[-1]),))
        within = np.arange(seg_ptr[-1]) - np.repeat(seg_ptr[:-1], flat)   # 0, 1, 2, … inside each segment
        indices = np.repeat(start.ravel(), flat) + within
        return cls(np.concatenate([[0], np.cumsum(counts)]), indices, start.shape[0], m)

    @classmethod
    def full(cls, n: int, m: int) -> SparsePattern:
        """Every pair: dense attention as a pattern."""
        n, m = check_non_negative_int("n", n), check_non_negative_int("m", m)
        return cls.from_row_ranges(np.zeros(n, np.int64), np.full(n, m), m)

    @classmethod
    def _from_sorted_keys(cls, keys: NDArray, n: int, m: int) -> SparsePattern:
        rows = keys // m if m else keys
        indptr = np.searchsorted(rows, np.arange(n + 1), side="left")
        return cls(indptr, keys - rows * m, n, m)

    # --- inspection ----------------------------------------------------------------------------

    @property
    def shape(self) -> tuple[int, int]:
        """(n, m)."""
        return (self.n, self.m)

    @property
    def nnz(self) -> int:
        """Number of kept pairs."""
        return int(self.indptr[-1])

    @property
    def density(self) -> float:
        """nnz / (n·m)."""
        return self.nnz / (self.n * self.m) if self.n and self.m else 0.0

    def row_counts(self) -> NDArray:
        """Keys kept by each query, (n,)."""
        return np.diff(self.indptr)

    def row_ids(self) -> NDArray:
        """The query index of every kept pair, (nnz,)."""
        return np.repeat(np.arange(self.n, dtype=np.int64), np.diff(self.indptr))

    def row(self, i: int) -> NDArray:
        """Keys kept by query *i*, ``0 <= i < n``.

        An ``IndexError`` for any other *i*, as a Python sequence raises for an index past its
        end; negative *i* is refused too (it is a query position, not an offset from the end), and
        a non-integer *i* is a ``TypeError``.
        """
        if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
            raise TypeError(f"row index must be an int, got {type(i).__name__} {i!r}")
        if not 0 <= i < self.n:
            raise IndexError(f"row {i} is out of range for a pattern of n={self.n} queries (0 <= i < n)")
        return self.indices[self.indptr[i]:self.indptr[i + 1]]

    def to_mask(self, *, max_size: int = MAX_DENSE) -> NDArray:
        """The dense (n, m) boolean mask; refused above ``max_size`` entries.

        Parameters
        ----------
        max_size : int, default 2**26
            Largest n·m materialised.

        Returns
        -------
        mask : (n, m) ndarray of bool
        """
        max_size = check_non_negative_int("max_size", max_size)
        if self.n * self.m > max_size:
            raise ValueError(
                f"to_mask() would allocate n·m = {self.n}·{self.m} booleans, above max_size={max_size}; "
                "use the CSR form (indptr, indices) instead"
            )
        mask = np.zeros((self.n, self.m), dtype=bool)
        mask[self.row_ids(), self.indices] = True
        return mask

    def to_dense(self, data: ArrayLike, fill: float = 0.0) -> NDArray:
        """Scatter per-pair values ``data (..., nnz)`` into dense ``(..., n, m)`` arrays (``fill`` elsewhere).

        Parameters
        ----------
        data : (..., nnz) array_like
            One value per kept pair, in CSR order (e.g. sparse attention weights).
        fill : float, default 0.0
            Value of the pairs not kept.

        Returns
        -------
        dense : (..., n, m) ndarray
        """
        data = _as_array("data", data)
        if data.dtype.kind not in "biufc":
            raise TypeError(f"data must be numeric, got dtype {data.dtype} with shape {data.shape}")
        if not isinstance(fill, (int, float, complex, np.number)) or isinstance(fill, (bool, np.bool_)):
            raise TypeError(f"fill must be a number, got {type(fill).__name__} {fill!r}")
        if data.shape[-1:] != (self.nnz,):
            raise ValueError(f"data must have shape (..., nnz={self.nnz}), got {data.shape}")
        dense = np.full((*data.shape[:-1], self.n, self.m), fill, dtype=np.result_type(data, fill))
        dense[..., self.row_ids(), self.indices] = data
        return dense

    # --- algebra -------------------------------------------------------------------------------

    @renamed(alignment="causal")
    def causal(self, causal: bool | str = True) -> SparsePattern:
        """Keep only the causal pairs, ``j <= i`` (top-left) or ``j <= i + m − n`` (bottom-right), in O(nnz).

        Parameters
        ----------
        causal : {True, "top-left", "bottom-right"}, default True
            The alignment, as in :func:`refattn.causal_mask` (the old name ``alignment=`` is deprecated).

        Returns
        -------
        SparsePattern
        """
        alignment = causal_alignment(causal)
        if alignment is None:
            raise ValueError(f"SparsePattern.causal keeps the causal pairs: pass causal=True, 'top-left' or "
                             f"'bottom-right', got causal={causal!r}")
        delta = 0 if alignment == "top-left" else self.m - self.n
        keep = self.indices <= self.row_ids() + delta
        counts = np.bincount(self.row_ids()[keep], minlength=self.n)
        return SparsePattern(np.concatenate([[0], np.cumsum(counts)]), self.indices[keep], self.n, self.m)

    def _keys(self) -> NDArray:
        return self.row_ids() * self.m + self.indices              # sorted, unique

    def _check_same_shape(self, other, op: str) -> None:
        if not isinstance(other, SparsePattern):
            raise TypeError(f"cannot combine SparsePattern with {type(other).__name__} by {op}")
        if other.shape != self.shape:
            raise ValueError(f"patterns of shapes {self.shape} and {other.shape} cannot be combined by {op}")

    def last_rows(self, count: int) -> SparsePattern:
        """The rows of the last ``count`` queries: a self-attention pattern bottom-right aligned.

        For an m × m pattern over positions 0 … m − 1, queries that are the last ``count``
        positions (decoding with a key/value cache) keep its last ``count`` rows; ``count > n``
        prepends ``count − n`` empty rows (queries before the first key, fully masked).

        Parameters
        ----------
        count : int
            Number of queries of the result.

        Returns
        -------
        SparsePattern
            Of shape (count, m).
        """
        count = check_non_negative_int("count", count)
        if count <= self.n:
            start = self.indptr[self.n - count]
            return SparsePattern(self.indptr[self.n - count:] - start, self.indices[start:], count, self.m)
        return SparsePattern(np.concatenate([np.zeros(count - self.n, np.int64), self.indptr]), self.indices,
                             count, self.m)

    def __or__(self, other: SparsePattern) -> SparsePattern:
        self._check_same_shape(other, "|")
        return self._from_sorted_keys(_sorted_unique(np.concatenate([self._keys(), other._keys()])), self.n, self.m)

    def __and__(self, other: SparsePattern) -> SparsePattern:
        self._check_same_shape(other, "&")
        return self._from_sorted_keys(np.intersect1d(self._keys(), other._keys(), assume_unique=True),
                                      self.n, self.m)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SparsePattern):
            return NotImplemented
        return (self.shape == other.shape and np.array_equal(self.indptr, other.indptr)
                and np.array_equal(self.indices, other.indices))

    __hash__ = None

    def __repr__(self) -> str:
        return f"SparsePattern(n={self.n}, m={self.m}, nnz={self.nnz}, density={self.density:.4g})"


def query_positions(n: int, m: int, causal) -> tuple[NDArray, str | None]:
    """Where a pattern builder's n queries sit among the m key positions, and its causal alignment.

    ``causal`` takes the values of every ``causal`` argument (:func:`refattn.common.causal_alignment`):
    ``False``, ``True`` = "top-left", or "bottom-right". Without a causal mask and top-left, query *i*
    is at position *i*. Bottom-right, the n queries are the last n of the m positions: query *i* is
    at *i* + m − n (negative when n > m: such a query comes before the first key and sees none). A
    builder writes its pattern for these positions and, when the alignment is not ``None``, keeps
    only the keys *j* <= position, so that its rows are the last n rows of its causal m × m pattern.

    Parameters
    ----------
    n, m : int
        Number of queries and keys.
    causal : {False, True, "top-left", "bottom-right"}
        The builder's ``causal`` argument.

    Returns
    -------
    positions : (n,) ndarray of int64
    alignment : {None, "top-left", "bottom-right"}
    """
    alignment = causal_alignment(causal)
    offset = m - n if alignment == "bottom-right" else 0
    return np.arange(n, dtype=np.int64) + offset, alignment


def no_causal_form(causal, mechanism: str, reason: str) -> None:
    """Refuse every ``causal`` value but ``False`` for a builder whose paper defines no causal form.

    Parameters
    ----------
    causal : {False, True, "top-left", "bottom-right"}
        The builder's ``causal`` argument; any other value is refused as by
        :func:`refattn.common.causal_alignment`.
    mechanism, reason : str
        Who refuses and why, for the message.
    """
    if causal_alignment(causal) is not None:
        raise ValueError(f"causal={causal!r}, but {mechanism} has no causal form ({reason}); pass causal=False")


def as_indices(name: str, x: ArrayLike, *, ndim: int | None = 1) -> NDArray:
    """``x`` as an integer array, never cast: the check of every index argument of the sparse family.

    Floats (even 1.0), bools, complex numbers and strings are a ``TypeError`` naming ``name``:
    truncating 1.7 to 1 would silently attend to another key. An empty sequence (NumPy reads
    ``[]`` as float64) is an empty int64 array. The values keep their integer dtype; the caller
    range-checks them before narrowing.

    Parameters
    ----------
    name : str
        The argument's name, for the message.
    x : array_like of int
        The indices.
    ndim : int or None, default 1
        The required number of dimensions (``None``: any).

    Returns
    -------
    ndarray of a signed or unsigned integer dtype
    """
    arr = _as_array(name, x)
    if arr.size == 0 and arr.dtype.kind in "biuf":
        arr = arr.astype(np.int64)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an array of ints, got dtype {arr.dtype} with shape {arr.shape}")
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension{'s' if ndim != 1 else ''}, got shape {arr.shape}")
    if arr.dtype == np.uint64 and arr.size and arr.max() > np.iinfo(np.int64).max:
        raise ValueError(f"{name} must fit in int64, got a maximum of {arr.max()}")
    return arr


def _as_array(name: str, x: ArrayLike) -> NDArray:
    """``np.asarray(x)``, with a ragged nested sequence refused by a ``ValueError`` naming ``name``."""
    try:
        return np.asarray(x)
    except ValueError:                                             # NumPy >= 1.24: inhomogeneous shape
        raise ValueError(f"{name} must be a rectangular array, got a ragged sequence {x!r:.80}") from None


def _sorted_unique(keys: NDArray) -> NDArray:
    """Sorted unique values of an int array, by a stable sort.

    ``np.unique``/``np.union1d`` take a hash-based path in NumPy >= 2.3 that is ~40× slower on the
    10⁷ pair codes of a long-sequence pattern; a stable sort of concatenated sorted runs is a
    linear merge.
    """
    keys = np.sort(keys, kind="stable")
    return keys[np.concatenate([[True], keys[1:] != keys[:-1]])] if keys.size else keys


def index_dtype(largest: int):
    """int32 for indices (and positions) below 2**31, else int64: the type builders should write in."""
    return np.int32 if largest < 2**31 else np.int64
