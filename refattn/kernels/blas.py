"""The OpenBLAS libraries of this process, and a context that runs them on one thread.

The parallel kernels call BLAS (``np.dot`` inside Numba, or :func:`refattn.kernels.gemm.gemm`:
both SciPy's OpenBLAS) from each of their own threads, on tiles and chunks. OpenBLAS threads a
product once it is large enough (M·N·K above 4·65536 in its defaults: a 64 × 64 × 128 product
already is), and a threaded product started from several threads at once waits on one pool:
measured here, chunkwise linear attention at d = 128 and C = 64 took 2.2–4× the time of the same
kernel with one BLAS thread. :func:`serial_blas` sets every loaded OpenBLAS to one thread for the
length of a kernel call and restores the previous counts afterwards. The setting is process-wide:
BLAS called meanwhile from another Python thread also runs on one thread. Libraries other than
OpenBLAS are left alone. Plain Python (ctypes): the bench reads the libraries from here without
loading Numba.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
from typing import NamedTuple

__all__ = ["OpenBLAS", "openblas_libraries", "serial_blas"]


class OpenBLAS(NamedTuple):
    """One loaded OpenBLAS: its path, the library, and the prefix and suffix of its exported names."""

    path: str
    library: ctypes.CDLL
    prefix: str
    suffix: str

    def function(self, name: str):
        """The exported function ``name`` (``get_config``, ``get_num_threads``, …) of this build."""
        return getattr(self.library, f"{self.prefix}{name}{self.suffix}")


def openblas_libraries() -> list[OpenBLAS]:
    """Every OpenBLAS mapped into this process now (NumPy's and SciPy's wheels each bring one); [] off Linux."""
    try:
        with open("/proc/self/maps") as maps:
            paths = sorted({line.split()[-1] for line in maps if "openblas" in line.lower() and "/" in line})
    except OSError:
        return []
    return [found for path in paths if (found := _open(path)) is not None]


@functools.cache
def _open(path: str) -> OpenBLAS | None:
    """The library at ``path`` if it exports OpenBLAS's functions under one of the wheels' names."""
    library = ctypes.CDLL(path)
    for prefix in ("scipy_openblas_", "openblas_"):
        for suffix in ("64_", ""):
            if all(hasattr(library, f"{prefix}{name}{suffix}")
                   for name in ("get_config", "get_num_threads", "set_num_threads")):
                return OpenBLAS(path, library, prefix, suffix)
    return None


@functools.cache
def _kernel_libraries() -> tuple[OpenBLAS, ...]:
    """The OpenBLAS libraries once the BLAS behind Numba's ``np.dot`` (SciPy's) is loaded."""
    import scipy.linalg.cython_blas  # noqa: F401  (Numba's np.dot calls it: load it before looking)

    return tuple(openblas_libraries())


@contextlib.contextmanager
def serial_blas():
    """Every loaded OpenBLAS on one thread inside the ``with`` block; the previous counts restored after."""
    libraries = _kernel_libraries()
    before = [library.function("get_num_threads")() for library in libraries]
    for library in libraries:
        library.function("set_num_threads")(1)
    try:
        yield
    finally:
        for library, threads in zip(libraries, before, strict=True):
            library.function("set_num_threads")(threads)

