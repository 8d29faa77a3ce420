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

from ..common import ALIGNMENTS, check_choice

__all__ = ["SparsePattern"]

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
        Number of queries and keys.
    """

    indptr: NDArray
    indices: NDArray
    n: int
    m: int

    def __post_init__(self) -> None:
        for name in ("n", "m"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be a non-negative int, got {value!r}")
            object.__setattr__(self, name, int(value))
        indptr = np.ascontiguousarray(self.indptr, dtype=np.int64)
        indices = np.ascontiguousarray(self.indices, dtype=index_dtype(self.m))
        object.__setattr__(self, "indptr", indptr)
        object.__setattr__(self, "indices", indices)
        if indptr.shape != (self.n + 1,) or indices.ndim != 1:
            raise ValueError(
                f"indptr must have shape (n + 1,) = ({self.n + 1},) and indices one dimension; got "
                f"indptr shape {indptr.shape}, indices shape {indices.shape}"
            )
        if indptr[0] != 0 or indptr[-1] != len(indices) or np.any(np.diff(indptr) < 0):
            raise ValueError("indptr must start at 0, never decrease, and end at len(indices)")
        if len(indices) and (indices.min() < 0 or indices.max() >= self.m):
            raise ValueError(f"indices must lie in [0, m={self.m}), got values in [{indices.min()}, {indices.max()}]")
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
        rows = np.asarray(rows, dtype=np.int64).ravel()
        cols = np.asarray(cols, dtype=np.int64).ravel()
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
        mask = np.asarray(mask)
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
            Built in O(nnz) time and memory, without sorting.
        """
        start = np.asarray(start, dtype=np.int64)
        stop = np.asarray(stop, dtype=np.int64)
        step = np.broadcast_to(np.asarray(step, dtype=np.int64), start.shape)
        if np.any(step < 1):
            raise ValueError(f"step must be >= 1, got minimum {step.min()}")
        lo = np.where(start < 0, start + (-start + step - 1) // step * step, start)   # first kept ≥ 0
        hi = np.minimum(stop, m)
        counts = np.maximum(0, (hi - lo + step - 1) // step)       # len(range(lo, hi, step))
        indptr = np.concatenate([[0], np.cumsum(counts)])
        dtype = index_dtype(max(m, indptr[-1]))                   # in place, in the narrowest type:
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
            Built in O(nnz) time and memory, without sorting.
        """
        start = np.asarray(start, dtype=np.int64)
        stop = np.asarray(stop, dtype=np.int64)
        if start.ndim != 2 or start.shape != stop.shape:
            raise ValueError(f"start and stop must have the same (n, T) shape, got {start.shape} and {stop.shape}")
        lengths = np.maximum(stop - start, 0)                      # (n, T)
        counts = lengths.sum(axis=1)                               # (n,) keys per query
        flat = lengths.ravel()
        seg_ptr = np.concatenate([[0], np.cumsum(flat)])
        within = np.arange(seg_ptr[-1]) - np.repeat(seg_ptr[:-1], flat)   # 0, 1, 2, … inside each segment
        indices = np.repeat(start.ravel(), flat) + within
        return cls(np.concatenate([[0], np.cumsum(counts)]), indices, start.shape[0], m)

    @classmethod
    def full(cls, n: int, m: int) -> SparsePattern:
        """Every pair: dense attention as a pattern."""
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
        """Keys kept by query *i*."""
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
        data = np.asarray(data)
        if data.shape[-1:] != (self.nnz,):
            raise ValueError(f"data must have shape (..., nnz={self.nnz}), got {data.shape}")
        dense = np.full((*data.shape[:-1], self.n, self.m), fill, dtype=np.result_type(data, fill))
        dense[..., self.row_ids(), self.indices] = data
        return dense

    # --- algebra -------------------------------------------------------------------------------

    def causal(self, alignment: str = "top-left") -> SparsePattern:
        """Keep only the causal pairs, ``j <= i`` (top-left) or ``j <= i + m − n`` (bottom-right), in O(nnz).

        Parameters
        ----------
        alignment : {"top-left", "bottom-right"}, default "top-left"
            As in :func:`refattn.causal_mask`.

        Returns
        -------
        SparsePattern
        """
        check_choice("alignment", alignment, ALIGNMENTS)
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
        if not isinstance(count, (int, np.integer)) or isinstance(count, bool) or count < 0:
            raise ValueError(f"count must be a non-negative int, got {count!r}")
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
