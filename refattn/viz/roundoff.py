"""Computed quantities as a figure shows them: round-off level at a floor, the rest rounded to a few digits."""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.checks import check_bool, check_choice
from .style import ROUNDOFF, SIGNIFICANT_DIGITS

__all__ = ["roundoff", "roundoff_text", "shade_roundoff"]


def roundoff(values: ArrayLike, *, scale: float = 1.0, below: str = "floor") -> NDArray:
    r"""Computed quantities as a figure shows them: round-off level at the floor, the rest rounded.

    Every number a figure computes and then draws on a logarithmic axis or prints into a label (an
    error, a residual, a deviation from 1, a singular value near zero) passes through this rule:

    - \|value\| below the **floor** (zero in exact arithmetic, or as good as the arithmetic can
      tell) becomes the floor (``below="floor"``: drawn at it, its label reads "< 1e-12") or NaN
      (``below="nan"``: left off the axis);
    - any other value is rounded to :data:`SIGNIFICANT_DIGITS` significant digits, but to no finer
      a step than the floor (a value of 5.8e-12 against a floor of 1e-12 keeps one digit: 6e-12).

    The floor is the power of ten at or above :data:`ROUNDOFF` · ``scale`` (1e-12 for a quantity of
    scale 1, such as a relative error, a row sum's deviation from 1 or σ_i/σ_1).

    Parameters
    ----------
    values : array_like of float
        The computed quantities (NaN and ±inf are kept).
    scale : float, default 1.0
        The size of the numbers the quantity is computed from, relative to which its rounding
        error is measured: 1 for a relative error; κ(A) for an error against ``pinv(A)``; σ_1
        for singular values. A positive finite number (its own last bits move the floor only if
        ROUNDOFF · scale lies within them of a power of ten).
    below : {"floor", "nan"}, default "floor"
        What a value below the floor becomes: the floor, with the sign of the value, or NaN.

    Returns
    -------
    shown : ndarray of float
        The same shape as ``values``.

    Notes
    -----
    Why :data:`ROUNDOFF` = 1e-12, about 4500 float64 eps (2.2e-16): a quantity computed from *n*
    numbers of size ``scale`` is exact to about n·eps·scale, and which of those last bits come
    out depends on the machine: the BLAS kernel and its thread count (OpenBLAS picks SkylakeX,
    Haswell, Sandybridge, Prescott ... by CPU) sum in another order, and NumPy's ``exp``/``log``
    loops differ by instruction set. Between those, refattn's figure quantities differ by up to
    2.5e-15·scale (Skyformer's Nyström error on all 32 points: 8.0e-15 with SkylakeX, 1.05e-14
    with Haswell; a Sinkhorn row sum's deviation: 2.2e-16 or 4.4e-16). Drawn as data on a log axis
    they move points by a tenth of a decade, and printed they read "8e-15" on one machine and
    "1e-14" on another. A floor 400 times that noise puts every such value below it on every
    machine, and a value rounded in steps of at least the floor (and at least 1e-6 of the value)
    lands on the other side of a rounding boundary only if the noise carries it there, with a
    probability of about noise / step: 2.5e-3 just above the floor, 2.5e-9 for values near 1.
    1e-12 is also the tolerance at which refattn's tests call two float64 results equal.

    Examples
    --------
    >>> roundoff([0.0, 8.0e-15, 5.83e-12, 0.123456789])
    array([1.00000e-12, 1.00000e-12, 6.00000e-12, 1.23457e-01])
    >>> roundoff([3e-16, 0.5], below="nan")
    array([nan, 0.5])
    >>> roundoff([3e-16, 2.1e-11], scale=7.0)              # an error against pinv(A), κ(A) = 7
    array([1.e-11, 2.e-11])
    """
    check_choice("below", below, ("floor", "nan"))
    floor, exponent = _roundoff_floor(scale)
    x = np.asarray(values)
    if x.dtype.kind not in "fiu":
        raise TypeError(f"values must be real numbers, got dtype {x.dtype}")
    x = x.astype(np.float64)                                       # a copy
    finite = np.isfinite(x)
    small = finite & (np.abs(x) < floor)
    rest = finite & ~small
    x[rest] = [_significant(v, exponent) for v in x[rest]]
    x[small] = np.where(x[small] < 0, -floor, floor) if below == "floor" else np.nan
    return x + 0.0                                                 # −0.0 made 0.0


def roundoff_text(value: float, spec: str = ".2g", *, scale: float = 1.0, equals: bool = False) -> str:
    r"""A computed number for a label, legend or title: :func:`roundoff`'s value, then ``format(value, spec)``.

    Parameters
    ----------
    value : float
        The computed number (finite).
    spec : str, default ".2g"
        Format specification of the shown value (``".2f"``, ``".1e"``, ...).
    scale : float, default 1.0
        As in :func:`roundoff`.
    equals : bool, default False
        Write "= " before a value at or above the floor, so that the text reads as a relation
        either way ("error = 0.31", "error < 1e-12").

    Returns
    -------
    text : str
        "< 1e-12" (the floor) for a value below the floor, "> −1e-12" for a negative one; otherwise
        the rounded value formatted, with a minus sign (−) for a negative one and no sign on 0.

    Examples
    --------
    >>> roundoff_text(8.0e-15), roundoff_text(0.48731, ".3f"), roundoff_text(-0.0091, ".3f")
    ('< 1e-12', '0.487', '−0.009')
    >>> roundoff_text(0.125 + 1e-17, ".2f"), roundoff_text(0.125 - 1e-17, ".2f")   # a tie, broken one way
    ('0.12', '0.12')
    >>> [f"max |row sum − 1| {roundoff_text(x, equals=True)}" for x in (0.18, 4e-16)]
    ['max |row sum − 1| = 0.18', 'max |row sum − 1| < 1e-12']
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not np.isfinite(value):
        raise ValueError(f"value must be a finite real number, got {value!r}")
    check_bool("equals", equals)
    floor, _ = _roundoff_floor(scale)
    if abs(value) < floor:
        return f"< {floor:.0e}" if value >= 0 else f"> \u2212{floor:.0e}"
    text = format(float(roundoff([value], scale=scale)[0]), spec)
    if text.startswith("-"):
        text = text[1:] if float(text) == 0 else "\u2212" + text[1:]
    return f"= {text}" if equals else text


def shade_roundoff(ax, *, scale: float = 1.0, axis: str = "y") -> float:
    r"""Shade the decade below :func:`roundoff`'s floor on a log axis, where values at the floor sit.

    The axis' lower limit becomes a tenth of the floor and the band from there to the floor is
    light grey, with a legend entry "round-off (< 1e-12, drawn at 1e-12)".

    Parameters
    ----------
    ax : matplotlib.axes.Axes
        Axes whose ``axis`` is logarithmic.
    scale : float, default 1.0
        As in :func:`roundoff`: the same as for the values drawn.
    axis : {"x", "y"}, default "y"
        The logarithmic axis.

    Returns
    -------
    floor : float
    """
    check_choice("axis", axis, ("x", "y"))
    if getattr(ax, f"get_{axis}scale")() != "log":
        raise ValueError(f"shade_roundoff needs a log {axis} axis, got {getattr(ax, f'get_{axis}scale')()!r}")
    floor, _ = _roundoff_floor(scale)
    label = f"round-off (< {floor:.0e}, drawn at {floor:.0e})"
    span = ax.axhspan if axis == "y" else ax.axvspan
    span(floor / 10, floor, facecolor="0.9", edgecolor="none", zorder=0, label=label)
    getattr(ax, f"set_{axis}lim")(floor / 10, None)
    return floor


def _roundoff_floor(scale) -> tuple[float, int]:
    """(floor, its decimal exponent): the smallest power of ten at or above ROUNDOFF · scale."""
    if isinstance(scale, (bool, np.bool_)) or not isinstance(scale, (int, float, np.integer, np.floating)) \
            or not 0 < scale < np.inf:
        raise ValueError(f"scale must be a positive finite number, got {scale!r}")
    bound = ROUNDOFF * float(scale)
    exponent = int(f"{bound:e}".split("e")[1])                    # bound = d.ddd × 10^exponent
    if float(f"1e{exponent}") < bound:
        exponent += 1
    return float(f"1e{exponent}"), exponent


def _significant(value: float, floor_exponent: int) -> float:
    """``value`` (≥ the floor in magnitude) to SIGNIFICANT_DIGITS significant digits, in steps of at least the
    floor; decimal formatting and parsing are correctly rounded, so every IEEE 754 machine gets the same double."""
    exponent = int(f"{value:.{SIGNIFICANT_DIGITS - 1}e}".split("e")[1])
    digits = min(SIGNIFICANT_DIGITS, exponent - floor_exponent + 1)
    return float(f"{value:.{digits - 1}e}")
