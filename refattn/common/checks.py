"""Input checks every public function runs at its top: arrays, sizes, choices, ``causal``, ``scale``, ``rng``.

Bad input gets a ``TypeError``/``ValueError`` naming the argument and the shapes seen, never an obscure
NumPy broadcasting error three calls deeper; a new mechanism module uses the same checks and words.
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .budget import check_fits
from .ints import check_non_negative_int, check_positive_int, is_int

__all__ = [
    "ALIGNMENTS",
    "as_float",
    "as_rng",
    "broadcast_batch",
    "causal_alignment",
    "check_bool",
    "check_choice",
    "check_non_negative",
    "check_qkv",
    "check_scale",
    "check_size",
    "check_sizes",
    "check_window",
    "checked_qkv",
    "compute_dtype",
    "default_scale",
]


ALIGNMENTS = ("top-left", "bottom-right")


_COMPUTE_DTYPES = (np.float16, np.float32, np.float64)


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


def checked_qkv(q: ArrayLike, k: ArrayLike, v: ArrayLike, dtype=np.float64) -> tuple[NDArray, NDArray, NDArray,
                                                                                 tuple[int, ...]]:
    """q, k, v as float arrays of compatible shapes (:func:`check_qkv`), and their broadcast batch shape.

    The preamble of every attention function over one head's (..., n, d) inputs; named errors otherwise.

    Parameters
    ----------
    q, k, v : array_like
        Queries (..., n, d_k), keys (..., m, d_k) and values (..., m, d_v).
    dtype : float dtype, default float64
        What they are converted to.

    Returns
    -------
    q, k, v : ndarray
    batch : tuple of int
        The broadcast shape of their leading dims.
    """
    q, k, v = (as_float(name, x, dtype) for name, x in (("q", q), ("k", k), ("v", v)))
    return q, k, v, check_qkv(q, k, v)


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
    if not is_int(value) or value < (1 if positive else 0):
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
    if is_int(rng):
        if rng < 0:
            raise ValueError(f"rng as an int seed must be >= 0, got {rng}")
        return np.random.default_rng(int(rng))
    raise TypeError(
        f"rng must be a numpy.random.Generator or an int seed, got {type(rng).__name__}"
    )
