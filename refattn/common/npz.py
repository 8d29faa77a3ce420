"""Byte-stable ``.npz`` writing: the same arrays give the same bytes on every run and machine."""
from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np

__all__ = ["write_npz"]


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
