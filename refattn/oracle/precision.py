r"""The number formats a candidate can come in, bfloat16 included, and other frameworks' tensors.

    float16, float32, float64   NumPy's own dtypes
    bfloat16                    8 exponent bits like float32, 8 significand bits (7 stored), eps 2⁻⁷;
                                held in float32 arrays whose values are bfloat16 numbers, and made by
                                exact round-to-nearest-even emulation (:func:`round_bfloat16`)

NumPy has no bfloat16 dtype. Rather than depend on ``ml_dtypes`` (the NumPy bfloat16 type JAX
uses), bfloat16 is emulated on float32: bfloat16 is float32 with its low 16 bits cut, so rounding a
float32 to the nearest bfloat16 (ties to even) is an integer operation on the bits, exact for every
value, subnormals, infinities and overflow included (:func:`round_bfloat16`). Arithmetic then runs
in float32 and is rounded to bfloat16 wherever a bfloat16 tensor would be written, which is what
bfloat16 kernels do: matrix products and softmax accumulate in float32 and store bfloat16. Nothing
of that needs ``ml_dtypes``, which keeps refattn's runtime dependencies to NumPy, SciPy, Numba and
Matplotlib, and keeps the rounding points explicit in the code. An ``ml_dtypes`` (JAX) bfloat16
array is still accepted as input: its values are converted to float32 exactly.

Tensors of other frameworks are read by duck typing (:func:`host_array`), without importing them:
``.detach()`` and ``.cpu()`` when present, ``.float()`` for a bfloat16 tensor (NumPy cannot hold
one), then ``__dlpack__``, ``__array__`` or ``.numpy()``.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.products import weighted_values
from ..core.softmax import masked_softmax
from ..masks import attention_mask

__all__ = ["BFLOAT16", "FORMATS", "Format", "bfloat16_values", "host_array", "number_format", "round_bfloat16",
           "sdpa_bfloat16", "spacing"]

BFLOAT16 = "bfloat16"


class Format(NamedTuple):
    """A floating-point format: its name, machine epsilon, largest finite value and the NumPy dtype holding it."""

    name: str
    eps: float
    max: float
    storage: np.dtype


def _numpy_format(dtype) -> Format:
    info = np.finfo(dtype)
    return Format(info.dtype.name, float(info.eps), float(info.max), info.dtype)


FORMATS = {
    **{f.name: f for f in (_numpy_format(t) for t in (np.float16, np.float32, np.float64))},
    BFLOAT16: Format(BFLOAT16, 2.0**-7, float((2 - 2.0**-7) * 2.0**127), np.dtype(np.float32)),
}
"""Every format a candidate may have, by name."""


def number_format(dtype) -> Format:
    """The :class:`Format` of a dtype or format name ("bfloat16" included), or ``TypeError`` naming it."""
    name = dtype if isinstance(dtype, str) else np.dtype(dtype).name
    if name not in FORMATS:
        raise TypeError(f"dtype must be float16, float32, float64 or bfloat16, got {name}")
    return FORMATS[name]


def round_bfloat16(x: ArrayLike) -> NDArray:
    """``x`` rounded to the nearest bfloat16 (ties to even), as a float32 array holding bfloat16 values.

    ``x`` is first rounded to float32 (a float64 input thus rounds twice, as ``torch.Tensor.to``
    does through float32). Rounding adds ``0x7FFF`` plus the lowest kept bit to the float32 bits and
    cuts the low 16: a carry into the exponent is the correct rounding up, up to ``inf`` past the
    largest bfloat16 (3.39e38). NaN stays NaN (its payload could otherwise round to ``inf``).

    Examples
    --------
    >>> round_bfloat16([1.0 + 2**-8, 1.0 + 3 * 2**-8, 3.4e38, 1e-40]).tolist()   # ties to even, overflow, subnormal
    [1.0, 1.015625, inf, 9.183549615799121e-41]
    """
    x = np.asarray(x, dtype=np.float32)
    bits = x.view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    out = bits.astype(np.uint32).view(np.float32)
    return np.where(np.isnan(x), np.float32(np.nan), out)


def spacing(x: ArrayLike, fmt: Format) -> NDArray:
    """The gap from ``|x|`` (rounded to ``fmt``) to the next larger number of ``fmt``: one ulp there."""
    if fmt.name != BFLOAT16:
        with np.errstate(over="ignore"):
            return np.abs(np.spacing(np.asarray(x).astype(fmt.storage)))
    with np.errstate(over="ignore"):                               # float32 spacing × 2¹⁶: 16 fewer significand bits
        return np.abs(np.spacing(round_bfloat16(np.abs(x)))) * np.float32(2.0**16)


def host_array(name: str, x) -> tuple[NDArray, str | None]:
    """``(array, "bfloat16" or None)``: ``x`` as a NumPy array, read by duck typing if it is another framework's.

    A NumPy array (or list, scalar) is used as it is; an ``ml_dtypes`` bfloat16 array becomes the
    float32 array of its values. Any other object is read as a tensor: ``.detach()`` and ``.cpu()``
    when it has them (PyTorch), ``.float()`` when its ``dtype`` is bfloat16 (exact), then
    ``__dlpack__`` (``np.from_dlpack``), ``__array__`` or ``.numpy()``. The second element says
    whether the values came as bfloat16.
    """
    if not isinstance(x, np.ndarray) and not np.isscalar(x) and not isinstance(x, (list, tuple)):
        for method in ("detach", "cpu"):
            if callable(getattr(x, method, None)):
                x = getattr(x, method)()
        bf16 = str(getattr(x, "dtype", "")).rpartition(".")[2] == BFLOAT16
        if bf16 and callable(getattr(x, "float", None)):
            x = x.float()
        if hasattr(x, "__dlpack__") and not hasattr(x, "__array__"):
            x = np.from_dlpack(x)
        elif not hasattr(x, "__array__") and callable(getattr(x, "numpy", None)):
            x = x.numpy()
        arr = _as_array(name, x)
        if bf16:
            return bfloat16_values(name, arr), BFLOAT16
    arr = _as_array(name, x)
    if arr.dtype.name == BFLOAT16:                                 # ml_dtypes (JAX) bfloat16: exact in float32
        return arr.astype(np.float32), BFLOAT16
    return arr, None


def _as_array(name: str, x) -> NDArray:
    try:
        return np.asarray(x)
    except (ValueError, TypeError, RuntimeError) as err:          # ragged lists, tensors NumPy cannot read
        raise TypeError(f"{name} could not be read as a NumPy array ({type(x).__name__}): {err}") from None


def bfloat16_values(name: str, arr: NDArray) -> NDArray:
    """``arr`` as float32, or ``ValueError`` if a value is not a bfloat16 number (the data is not bfloat16)."""
    if arr.dtype.kind != "f":
        raise TypeError(f"{name} was declared bfloat16 but holds dtype {arr.dtype} with shape {arr.shape}")
    f32 = arr.astype(np.float32)
    exact = (f32 == arr) | np.isnan(arr)
    exact &= (round_bfloat16(f32) == f32) | np.isnan(f32)
    if not exact.all():
        i = tuple(int(j) for j in np.argwhere(~exact)[0])
        raise ValueError(f"{name} is said to be bfloat16 but {name}[{', '.join(map(str, i))}] = {arr[i]!r} is not a "
                         f"bfloat16 number (shape {arr.shape}); pass the bfloat16 tensor itself or its .float()")
    return f32


def sdpa_bfloat16(q: NDArray, k: NDArray, v: NDArray, mask, *, causal, scale: float,
                  fully_masked: str) -> tuple[NDArray, NDArray, NDArray]:
    r"""``(out, weights, lse)`` of refattn's equation path with bfloat16 rounding (the bfloat16 baseline).

    .. math::

        \hat S = \mathrm{bf}\big(\mathrm{bf}(\hat Q \hat K^\top)\, s\big) \;(+\, \mathrm{bf}(B)), \qquad
        \hat A = \mathrm{bf}(\operatorname{softmax}(\hat S)), \qquad \hat O = \mathrm{bf}(\hat A \hat V)

    with :math:`\hat Q, \hat K, \hat V` the inputs rounded to bfloat16 and :math:`\mathrm{bf}` the
    rounding of :func:`round_bfloat16`: each matrix product and the softmax run in float32 and their
    results are rounded where a bfloat16 tensor is stored, as PyTorch's bfloat16 operations (the
    "same code run in the low-precision dtype" of FlashAttention's tests) do. Masking is by
    selection, as in :func:`refattn.scaled_dot_product_attention`, whose equation path this is.
    Inputs are float64 arrays already checked by the caller.
    """
    q, k, v = round_bfloat16(q), round_bfloat16(k), round_bfloat16(v)
    n, m = q.shape[-2], k.shape[-2]
    allowed, bias = attention_mask(mask, causal, n, m, np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        S = round_bfloat16(round_bfloat16(q @ np.swapaxes(k, -1, -2)) * np.float32(scale))   # (..., n, m)
    S[~np.isfinite(S)] = np.nan                                    # as the equation path: undefined scores
    if bias is not None:
        S = round_bfloat16(S + round_bfloat16(bias))               # (..., n, m)  S + B
    A, empty, lse = masked_softmax(S, allowed, fully_masked, return_lse=True)
    A = round_bfloat16(A)                                          # (..., n, m)  the weights, stored in bfloat16
    out = round_bfloat16(weighted_values(A, v, allowed, empty, fully_masked))   # (..., n, d_v)
    return out, A, lse
