"""The one place Numba's flags are set (imported only by refattn.kernels, never on ``import refattn``).

``cache=True`` writes compiled machine code to Numba's cache (``NUMBA_CACHE_DIR`` if set), so a
kernel compiles once per machine, not once per process. Numba revalidates a cached kernel against
its own source file only: after editing a helper that it calls from another module (such as
``kernels/vexp.py``), delete the cache (``__pycache__/*.nbi``, ``*.nbc``) or use a fresh
``NUMBA_CACHE_DIR``. ``fastmath`` stays off: reassociating sums changes results, and refattn is an
oracle. ``parallel`` kernels split only independent rows (``prange``), so their results do not
depend on the number of threads. ``jit_inline`` helpers are inlined into their callers by Numba
itself: the fields of a NamedTuple argument (the blocked kernel's ``Visibility``) then become
plain locals of the caller's loop, which measured 2× faster than a call per pair.
"""
from __future__ import annotations

import numba

__all__ = ["jit", "jit_inline", "jit_parallel", "prange"]

jit = numba.njit(cache=True)
jit_inline = numba.njit(cache=True, inline="always")
jit_parallel = numba.njit(cache=True, parallel=True)
prange = numba.prange
