"""What every family shares: input checks, the ``causal`` and ``scale`` arguments, seeded draws, masked values.

Every public function validates at its top with these helpers, so that bad input gets a
``TypeError``/``ValueError`` naming the argument and the shapes seen, never an obscure NumPy
broadcasting error three calls deeper. They are public so that a new mechanism module, wherever it
lives, uses the same checks and the same words as the others.
"""
from __future__ import annotations

import io
import math
import os
import zipfile
from collections.abc import Iterable
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "ALIGNMENTS",
    "MAX_SIZE",
    "MemoryBudgetError",
    "check_fits",
    "memory_budget",
    "set_memory_budget",
    "temporary_memory_budget",
    "as_float",
    "as_rng",
    "broadcast_batch",
    "causal_alignment",
    "check_bool",
    "check_choice",
    "check_non_negative",
    "check_non_negative_int",
    "check_positive_int",
    "check_qkv",
    "check_scale",
    "check_size",
    "check_sizes",
    "check_window",
    "compute_dtype",
    "default_scale",
    "glorot",
    "grouped_kv",
    "kv_groups",
    "repeat_over_groups",
    "sum_over_groups",
    "split_scale",
    "write_npz",
    "weighted_values",
]

ALIGNMENTS = ("top-left", "bottom-right")
_COMPUTE_DTYPES = (np.float16, np.float32, np.float64)
MEMORY_BUDGET_ENV = "REFATTN_MEMORY_BUDGET"
DEFAULT_MEMORY_BUDGET = 4 * 2**30
#: The largest size or count taken (a length, a number of blocks, features or draws): an index must fit in int64.
MAX_SIZE = 2**62
_budget: list[int | None] = [None]                                  # set_memory_budget's value, if any


# --- dtypes and arrays ------------------------------------------------------------------------------

def compute_dtype(dtype) -> np.dtype:
    """Return ``dtype`` as a NumPy float dtype, or raise ``TypeError`` naming it.

    Parameters
    ----------
    dtype : numpy dtype or type
        float16, float32 or float64.

    Returns
    -------
    numpy.dtype
    """
    dt = np.dtype(dtype)
    if dt.type not in _COMPUTE_DTYPES:
        raise TypeError(f"dtype must be float16, float32 or float64, got {dt}")
    return dt


def as_float(name: str, x: ArrayLike, dtype=np.float64, *, min_ndim: int = 0) -> NDArray:
    """Convert ``x`` to a float array of ``dtype`` (float64 by default).

    Real floating inputs of any precision (and CPU tensors of other frameworks, through
    ``np.asarray``) are accepted. Booleans, integers and complex numbers are refused with a
    ``TypeError`` rather than silently cast: an integer array passed as queries is almost always a
    bug (token ids instead of embeddings), and attention over complex numbers is not defined here.

    Parameters
    ----------
    name : str
        The argument's name, for the message.
    x : array_like
        Real floating-point values.
    dtype : numpy dtype, default float64
        The compute dtype (float16, float32 or float64).
    min_ndim : int, default 0
        ``ValueError`` for fewer dimensions.

    Returns
    -------
    ndarray
    """
    try:
        arr = np.asarray(x)
    except (ValueError, TypeError) as err:                          # ragged nested lists, odd objects
        raise ValueError(f"{name} must be a rectangular array of real numbers: {err}") from None
    if arr.dtype.kind != "f":
        raise TypeError(
            f"{name} must be a real floating-point array, got dtype {arr.dtype} "
            f"with shape {arr.shape}"
        )
    if arr.ndim < min_ndim:
        raise ValueError(f"{name} must have at least {min_ndim} dimensions, got shape {arr.shape}")
    return arr.astype(compute_dtype(dtype), copy=False)


def broadcast_batch(named_shapes: dict[str, tuple[int, ...]]) -> tuple[int, ...]:
    """Broadcast the leading (batch) dims of several arrays, naming them if they clash.

    Parameters
    ----------
    named_shapes : dict of str to tuple of int
        Each argument's name and its leading dimensions.

    Returns
    -------
    tuple of int
    """
    try:
        return np.broadcast_shapes(*named_shapes.values())
    except ValueError:
        seen = ", ".join(f"{n} {s}" for n, s in named_shapes.items())
        raise ValueError(f"leading (batch) dimensions do not broadcast: {seen}") from None


def check_qkv(q: NDArray, k: NDArray, v: NDArray) -> tuple[int, ...]:
    """Check ``q (..., n, d_k)``, ``k (..., m, d_k)``, ``v (..., m, d_v)``; return the batch shape.

    Parameters
    ----------
    q, k, v : ndarray
        Queries, keys and values.

    Returns
    -------
    tuple of int
        Their broadcast leading dimensions.
    """
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.ndim < 2:
            raise ValueError(f"{name} must have shape (..., length, dim), got shape {x.shape}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q has d_k={q.shape[-1]} but k has d_k={k.shape[-1]} "
            f"(q shape {q.shape}, k shape {k.shape})"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k has m={k.shape[-2]} keys but v has m={v.shape[-2]} values "
            f"(k shape {k.shape}, v shape {v.shape})"
        )
    return broadcast_batch({"q": q.shape[:-2], "k": k.shape[:-2], "v": v.shape[:-2]})


# --- grouped-query heads ---------------------------------------------------------------------------


def kv_groups(q: NDArray, k: NDArray, v: NDArray) -> int:
    """Query heads per key/value head (1 without grouped-query attention); arrays in (..., h, n, d).

    Grouped-query attention (Ainslie et al., 2023, arXiv:2305.13245v3): ``h`` query heads share
    ``h_kv`` key/value heads, query head ``i`` reading head ``i // (h / h_kv)`` (PyTorch's
    ``repeat_interleave`` under ``enable_gqa``, FlashAttention); the oracle and
    :func:`~refattn.scaled_dot_product_attention` use this one rule.

    Parameters
    ----------
    q : (..., h, n, d_k) ndarray
        Queries.
    k : (..., h_kv, m, d_k) ndarray
        Keys.
    v : (..., h_kv, m, d_v) ndarray
        Values.

    Returns
    -------
    int
        ``h // h_kv``; 1 when the heads are equal or an array has no head axis. Raises
        ``ValueError`` when ``k`` and ``v`` have different heads or ``h`` is not a multiple of ``h_kv``.
    """
    if q.ndim < 3 or k.ndim < 3 or k.shape[-3] == q.shape[-3]:
        return 1
    h, h_kv = q.shape[-3], k.shape[-3]
    if v.ndim < 3 or v.shape[-3] != h_kv:
        raise ValueError(f"k has h_kv={h_kv} heads but v has shape {v.shape}; they must have the same heads")
    if h % h_kv:
        raise ValueError(
            f"q has h={h} heads but k has h_kv={h_kv} (q shape {q.shape}, k shape {k.shape}): grouped-query "
            "attention needs h divisible by h_kv"
        )
    return h // h_kv


def repeat_over_groups(x: NDArray, groups: int) -> NDArray:
    """(..., h_kv, m, d) → (..., h, m, d): each key/value head repeated for its group (``repeat_interleave``).

    Parameters
    ----------
    x : (..., h_kv, m, d) ndarray
        Keys or values.
    groups : int
        Query heads per key/value head (:func:`kv_groups`).

    Returns
    -------
    (..., h_kv·groups, m, d) ndarray
    """
    return x if groups == 1 else np.repeat(x, groups, axis=-3)


def sum_over_groups(g: NDArray, groups: int) -> NDArray:
    """(..., h, m, d) gradient of :func:`repeat_over_groups`'s output → (..., h_kv, m, d), summed over each group.

    Parameters
    ----------
    g : (..., h, m, d) ndarray
        Gradient with respect to the repeated keys or values.
    groups : int
        Query heads per key/value head (:func:`kv_groups`).

    Returns
    -------
    (..., h // groups, m, d) ndarray
    """
    if groups == 1:
        return g
    return g.reshape(*g.shape[:-3], g.shape[-3] // groups, groups, *g.shape[-2:]).sum(axis=-3)


def grouped_kv(q: NDArray, k: NDArray, v: NDArray) -> tuple[NDArray, NDArray, int]:
    """``(k, v, groups)`` with the key/value heads repeated over their query groups (``enable_gqa=True``).

    Parameters
    ----------
    q : (..., h, n, d_k) ndarray
        Queries.
    k : (..., h_kv, m, d_k) ndarray
        Keys, ``h`` divisible by ``h_kv`` (:func:`kv_groups`).
    v : (..., h_kv, m, d_v) ndarray
        Values.

    Returns
    -------
    (k, v, groups)
        Keys and values with ``h`` heads, and ``h // h_kv``. A ``ValueError`` naming the shapes for
        arrays without a head axis.
    """
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.ndim < 3:
            raise ValueError(f"enable_gqa=True needs {name} with a head axis, (..., h, length, dim), "
                             f"got shape {x.shape}")
    groups = kv_groups(q, k, v)
    return repeat_over_groups(k, groups), repeat_over_groups(v, groups), groups


# --- scalar options ---------------------------------------------------------------------------------

def check_choice(name: str, value, choices: Iterable) -> None:
    """Raise ``ValueError`` unless ``value`` is one of ``choices`` (compared by type too: 1 is not True).

    Parameters
    ----------
    name : str
        The argument's name, for the message.
    value : object
        What was passed.
    choices : iterable
        The allowed values.
    """
    choices = tuple(choices)
    # ``value in choices`` would accept 1 for True; compare types too.
    if not any(value is c or (type(value) is type(c) and value == c) for c in choices):
        raise ValueError(f"{name} must be one of {choices!r}, got {value!r}")


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _below_max_size(name: str, value) -> int:
    """``int(value)``, or a ``ValueError`` naming it above :data:`MAX_SIZE`: a count, size or number of iterations
    that large cannot index an array, and would fail deep inside NumPy (or run for ever) without naming it."""
    if value > MAX_SIZE:
        raise ValueError(f"{name}={value} is too large: sizes and counts must be at most 2**62 (an index must fit "
                         "in int64)")
    return int(value)


def check_positive_int(name: str, value) -> int:
    """Return ``value`` as an int, or raise ``ValueError`` unless it is an int >= 1 (bools refused), at most
    :data:`MAX_SIZE`.

    Parameters
    ----------
    name : str
        The argument's name, for the message.
    value : object
        What was passed.

    Returns
    -------
    int
    """
    if not _is_int(value) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return _below_max_size(name, value)


def check_non_negative_int(name: str, value) -> int:
    """Return ``value`` as an int, or raise ``ValueError`` unless it is an int >= 0 (a window, count or offset), at
    most :data:`MAX_SIZE`.

    Parameters
    ----------
    name : str
        The argument's name, for the message.
    value : object
        What was passed.

    Returns
    -------
    int
    """
    if not _is_int(value) or value < 0:
        raise ValueError(f"{name} must be a non-negative int, got {value!r}")
    return _below_max_size(name, value)


def check_non_negative(name: str, value) -> float:
    """Return ``value`` as a float, or raise ``ValueError`` unless it is a real number >= 0 (a layer norm's ε).

    Parameters
    ----------
    name : str
        The argument's name, for the message.
    value : object
        What was passed.

    Returns
    -------
    float
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or not value >= 0:
        raise ValueError(f"{name} must be a non-negative number, got {value!r}")
    return float(value)


def check_bool(name: str, value) -> bool:
    """Return ``value`` as a bool, or raise ``TypeError`` unless it is one (``1`` and ``"yes"`` are refused).

    Parameters
    ----------
    name : str
        The argument's name, for the message.
    value : object
        What was passed.

    Returns
    -------
    bool
    """
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def check_size(name: str, value, *, positive: bool = False, rows: bool = False) -> int:
    """Return a size or count as an int, or raise ``ValueError`` naming it and its value.

    A size is an int >= 0 (>= 1 with ``positive``; bools refused) of at most :data:`MAX_SIZE`: a
    larger one cannot index a NumPy array, and would otherwise fail deep inside NumPy ("Maximum
    allowed size exceeded", ``OverflowError``) without naming the argument.

    Parameters
    ----------
    name : str
        The argument's name, for the message.
    value : object
        What was passed.
    positive : bool, default False
        Refuse 0.
    rows : bool, default False
        ``value`` counts the rows of a pattern: its (value + 1,) int64 row pointers must also fit the
        memory budget (:class:`MemoryBudgetError` naming the argument otherwise).

    Returns
    -------
    int
    """
    value = check_positive_int(name, value) if positive else check_non_negative_int(name, value)
    if rows:
        check_fits(f"{name}={value}: the row pointers", (value + 1,))
    return value


def check_window(name: str, value, everything: int, *, positive: bool = False) -> int:
    """Return a window, reach or stride as an int, clamped to ``everything``, the value from which it keeps the same
    pairs (a band of width ``w >= max(n, m)`` keeps every pair); ``ValueError`` naming it unless it is an int >= 0
    (>= 1 with ``positive``).

    Parameters
    ----------
    name : str
        The argument's name, for the message.
    value : object
        What was passed; any size, 10**30 included.
    everything : int
        The clamp.
    positive : bool, default False
        Refuse 0.

    Returns
    -------
    int
    """
    if not _is_int(value) or value < (1 if positive else 0):
        raise ValueError(f"{name} must be a {'positive' if positive else 'non-negative'} int, got {value!r}")
    return int(min(value, everything))


def check_sizes(n, m) -> tuple[int, int]:
    """Validate the query count ``n`` and the optional key count ``m`` (default ``n``) of a pattern.

    Zero is allowed: a pattern of no query (or no key) is empty, and attention over it follows the
    edge-size rule (n = 0: no output row; m = 0: every query sees no key). Both are sizes
    (:func:`check_size`), and n's row pointers must fit the memory budget.

    Parameters
    ----------
    n : int
        Number of queries, >= 0.
    m : int or None
        Number of keys, >= 0; ``None`` for ``n``.

    Returns
    -------
    (int, int)
    """
    m = n if m is None else m
    return check_size("n", n, rows=True), check_size("m", m)


def causal_alignment(causal) -> str | None:
    """Normalise ``causal``: ``None`` (no causal mask), "top-left" (``True``) or "bottom-right".

    Every function with a ``causal`` argument takes the same four values: ``False``, ``True``
    (= "top-left": query *i* sees keys *j* ≤ *i*) and "bottom-right" (the n queries are the last n
    of the m positions: *j* ≤ *i* + m − n).

    Parameters
    ----------
    causal : {False, True, "top-left", "bottom-right"}
        The argument as given.

    Returns
    -------
    str or None
    """
    check_choice("causal", causal, (False, True, *ALIGNMENTS))
    if causal is False:
        return None
    return "top-left" if causal is True else causal


def default_scale(d_k: int) -> float:
    """The paper's scale 1/√d_k, as a Python float (so it keeps float16/float32 computations).

    Parameters
    ----------
    d_k : int
        Width of the queries and keys; ``d_k < 1`` (empty vectors, where the default is undefined)
        raises ``ValueError``.

    Returns
    -------
    float
    """
    if d_k < 1:
        raise ValueError(f"the default scale 1/sqrt(d_k) needs d_k >= 1, got d_k={d_k} (the last axis of q and k); "
                         "pass scale= explicitly")
    return 1.0 / float(np.sqrt(d_k))


def check_scale(scale, name: str = "scale") -> float:
    """Return a user ``scale`` (or another finite real option) as a float; ``TypeError``/``ValueError`` naming it
    unless it is a finite real number.

    Parameters
    ----------
    scale : float
        The multiplier of the scores, or the option called ``name``.
    name : str, default "scale"
        The argument's name, for the message.

    Returns
    -------
    float
    """
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number, got {type(scale).__name__}")
    if not (abs(scale) <= float(np.finfo(np.float64).max)):         # NaN, ±inf, and ints beyond float64 (10**400)
        raise ValueError(f"{name} must be finite, got {scale!r}")
    return float(scale)


def split_scale(q: np.ndarray, k: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """Share a score scale s between queries and keys: q̃ = sign(s)·√|s|·q and k̃ = √|s|·k, so q̃·k̃ = s·q·k.

    With s = 1/√d this is q/d^{1/4} and k/d^{1/4}, what kernels of q and k apart (random features, a Gaussian
    kernel, hashing) read in place of q·k/√d.

    Parameters
    ----------
    q, k : ndarray
        Queries and keys.
    scale : float
        s, a checked scale (:func:`check_scale`, :func:`default_scale`).

    Returns
    -------
    q_tilde, k_tilde : ndarray
    """
    root = np.sqrt(abs(scale))
    return q * (np.sign(scale) * root), k * root


# --- seeded draws -----------------------------------------------------------------------------------

def as_rng(rng) -> np.random.Generator:
    """Return a ``numpy.random.Generator`` from a Generator or an int seed.

    ``None`` is refused: a reference implementation never draws from an unseeded source, so that
    the same call gives the same numbers on every machine.

    Parameters
    ----------
    rng : numpy.random.Generator or int
        A generator (returned as it is) or a seed.

    Returns
    -------
    numpy.random.Generator
    """
    if isinstance(rng, np.random.Generator):
        return rng
    if _is_int(rng):
        if rng < 0:
            raise ValueError(f"rng as an int seed must be >= 0, got {rng}")
        return np.random.default_rng(int(rng))
    raise TypeError(
        f"rng must be a numpy.random.Generator or an int seed, got {type(rng).__name__}"
    )


def glorot(rng: np.random.Generator, fan_in: int, fan_out: int) -> NDArray:
    """A (fan_in, fan_out) matrix from Glorot/Xavier uniform, U(±√(6/(fan_in + fan_out))).

    Parameters
    ----------
    rng : numpy.random.Generator
        Source of the draw.
    fan_in, fan_out : int
        The matrix's shape.

    Returns
    -------
    ndarray
    """
    bound = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-bound, bound, size=(fan_in, fan_out))


# --- masking by selection ---------------------------------------------------------------------------

def weighted_values(
    A: NDArray, v: NDArray, allowed: NDArray | None, empty: NDArray, fully_masked: str
) -> NDArray:
    """``A @ v``, except that a non-finite value reaches only the rows that may attend to it.

    A plain matmul would spread a NaN in ``v[j]`` to every row, even those whose weight on key *j*
    is an exact 0 because *j* is masked (0 · NaN = NaN). Here the finite part goes through the
    matmul and each non-finite value is added, IEEE-style, to the rows that may use it.

    Parameters
    ----------
    A : (..., n, m) ndarray
        Attention weights (exact zeros where masked).
    v : (..., m, d_v) ndarray
        Values.
    allowed : (..., n, m) ndarray of bool or None
        The pairs each row may see (``None``: all).
    empty : (..., n, 1) ndarray of bool
        Rows that see no key (fully masked).
    fully_masked : {"zero", "nan", "uniform"}
        The policy for those rows; "uniform" rows use every key. With no key at all (m = 0) every
        row is 0 under "zero" and "uniform" (the empty sum) and NaN under "nan".

    Returns
    -------
    (..., n, d_v) ndarray
    """
    if A.shape[-1] == 0:                                           # no key at all: every row is fully masked
        fill = np.nan if fully_masked == "nan" else 0.0            # "uniform": a mean over no key, the empty sum
        return np.full((*A.shape[:-1], v.shape[-1]), fill, dtype=A.dtype)
    finite = np.isfinite(v)
    if finite.all():
        return A @ v                                               # (..., n, d_v)
    out = A @ np.where(finite, v, 0)
    m = v.shape[-2]
    used = np.ones(A.shape, dtype=bool) if allowed is None else np.broadcast_to(allowed, A.shape)
    if fully_masked == "uniform":
        used = used | empty                                        # uniform rows use every key
    bad = np.flatnonzero(~finite.reshape(-1, m, v.shape[-1]).all(axis=(0, 2)))  # key indices
    v_bad = v[..., bad, :]                                         # (..., b, d_v)
    use = used[..., bad][..., None] & ~np.isfinite(v_bad)[..., None, :, :]  # (..., n, b, d_v)
    with np.errstate(invalid="ignore"):                            # 0·inf where masked: dropped below
        terms = A[..., bad][..., None] * v_bad[..., None, :, :]    # (..., n, b, d_v)  α_ij v_j
    return out + np.sum(np.where(use, terms, 0), axis=-2)


# --- memory ------------------------------------------------------------------------------------------

class MemoryBudgetError(ValueError, MemoryError):
    """An array refattn was asked for would exceed the memory budget; raised before allocating it."""


def memory_budget() -> int:
    """The bytes one dense intermediate may take before refattn streams instead (or refuses).

    The default methods switch to their streaming paths (blocked, csr, scan) where a dense n × m
    array would exceed it, and asking for such an array (``return_weights=True``) raises
    :class:`MemoryBudgetError` before allocating. It is :data:`DEFAULT_MEMORY_BUDGET` (4 GiB), or
    the environment variable ``REFATTN_MEMORY_BUDGET`` (bytes, read at each call), or what
    :func:`set_memory_budget` set, in increasing order of precedence.

    Returns
    -------
    int
    """
    if _budget[0] is not None:
        return _budget[0]
    text = os.environ.get(MEMORY_BUDGET_ENV)
    if text is None:
        return DEFAULT_MEMORY_BUDGET
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{MEMORY_BUDGET_ENV} must be a whole number of bytes, got {text!r}") from None
    return check_positive_int(MEMORY_BUDGET_ENV, value)


def set_memory_budget(nbytes: int | None) -> int | None:
    """Set the memory budget (bytes), or ``None`` to fall back to the environment and the default.

    Parameters
    ----------
    nbytes : int or None
        The new budget.

    Returns
    -------
    int or None
        The previous setting, so that a caller can restore it.
    """
    previous = _budget[0]
    _budget[0] = None if nbytes is None else check_positive_int("nbytes", nbytes)
    return previous


@contextmanager
def temporary_memory_budget(nbytes: int | None):
    """Set the memory budget for the duration of a ``with`` block, then restore the previous setting.

    Parameters
    ----------
    nbytes : int or None
        The budget inside the block (``None``: the environment's or the default).

    Returns
    -------
    context manager
        Restores the previous setting on leaving the block, however it is left.

    Examples
    --------
    >>> with temporary_memory_budget(1024):
    ...     memory_budget()
    1024
    """
    previous = set_memory_budget(nbytes)
    try:
        yield
    finally:
        set_memory_budget(previous)


def check_fits(what: str, shape: tuple[int, ...], itemsize: int = 8) -> None:
    """Raise :class:`MemoryBudgetError` before allocating an array of ``shape`` that exceeds the budget.

    Parameters
    ----------
    what : str
        What the array is, for the message (e.g. "the weights (return_weights=True)").
    shape : tuple of int
        Its shape.
    itemsize : int, default 8
        Bytes per entry.
    """
    nbytes = math.prod(shape) * itemsize
    budget = memory_budget()
    if nbytes > budget:
        raise MemoryBudgetError(
            f"{what} of shape {tuple(shape)} would take {nbytes / 2**30:.3g} GiB, above the memory budget of "
            f"{budget / 2**30:.3g} GiB (refattn.common.set_memory_budget or {MEMORY_BUDGET_ENV} raise it)"
        )



# --- files ----------------------------------------------------------------------------------------------

_ZIP_DATE = (1980, 1, 1, 0, 0, 0)                                  # zip's earliest date: the same bytes every run


def write_npz(path, arrays: dict) -> bytes:
    """Write named arrays to ``path`` as an uncompressed ``.npz`` with fixed zip dates: the same arrays give the
    same bytes on every run (``np.savez`` stamps the current time).

    Parameters
    ----------
    path : str or Path
        The file (its folder must exist).
    arrays : dict of str to array_like
        The arrays, by name (no object arrays: the file is read with ``allow_pickle=False``).

    Returns
    -------
    bytes
        The bytes written.
    """
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        for name, value in arrays.items():
            member = io.BytesIO()
            np.lib.format.write_array(member, np.asarray(value), allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=_ZIP_DATE)
            info.external_attr = 0o644 << 16
            archive.writestr(info, member.getvalue())
    data = buffer.getvalue()
    Path(path).write_bytes(data)
    return data
