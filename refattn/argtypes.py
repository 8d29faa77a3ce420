"""argparse ``type`` converters shared by the command line and the benchmarks.

argparse turns an ``ArgumentTypeError`` into "usage ... error: argument --name: <message>" and exit 2,
so every converter refuses a bad value with a one-line message naming the value seen.
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path

__all__ = ["non_negative_float", "non_negative_int", "output_file", "output_folder", "positive_float", "positive_int"]


def _number(text: str, kind: type, low: float, strict: bool):
    """``text`` as ``kind``, finite and >= ``low`` (> with ``strict``), or an ``ArgumentTypeError``."""
    what = "an integer" if kind is int else "a number"
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if not math.isfinite(value) or value < low or (strict and value == low):
        finite = "" if kind is int else "a finite number "
        raise argparse.ArgumentTypeError(f"must be {finite}{'>' if strict else '>='} {low:g}, got {text}")
    return value


def positive_int(text: str) -> int:
    """An argparse ``type``: an integer >= 1."""
    return _number(text, int, 1, False)


def non_negative_int(text: str) -> int:
    """An argparse ``type``: an integer >= 0."""
    return _number(text, int, 0, False)


def positive_float(text: str) -> float:
    """An argparse ``type``: a finite number > 0."""
    return _number(text, float, 0.0, True)


def non_negative_float(text: str) -> float:
    """An argparse ``type``: a finite number >= 0."""
    return _number(text, float, 0.0, False)


def _existing_file_above(path: Path) -> Path | None:
    """The first of ``path``'s parents that exists as something other than a folder, if any."""
    for parent in path.parents:
        if parent.exists():
            return None if parent.is_dir() else parent
    return None


def output_folder(text: str) -> Path:
    """An argparse ``type``: a folder that exists or can be created (no part of it is an existing file)."""
    path = Path(text)
    blocker = path if path.exists() and not path.is_dir() else _existing_file_above(path)
    if blocker is not None:
        raise argparse.ArgumentTypeError(f"{text!r} cannot be a folder: {str(blocker)!r} is an existing file")
    return path


def output_file(text: str) -> Path | None:
    """An argparse ``type``: a file path in an existing folder, not itself a folder; '' is None.

    Refused at once, so that a command refuses before it works rather than when it writes.
    """
    if not text:
        return None
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is an existing folder, not a file name")
    blocker = _existing_file_above(path)
    if blocker is not None:
        raise argparse.ArgumentTypeError(f"{text!r} cannot be written: {str(blocker)!r} is an existing file")
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} cannot be written: the folder {str(path.parent)!r} does not exist")
    return path
