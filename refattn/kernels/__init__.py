"""Numba cores behind the ``method=`` options of the equation paths (imported lazily: no compile on import)."""
