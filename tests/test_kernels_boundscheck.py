"""The Numba kernels (blocked sdpa forward and backward, CSR and BSR sparse attention) run once with bounds checks.

Compiled kernels index their arrays without checks, so an index past the end reads garbage or
crashes the interpreter instead of raising. Here a fresh interpreter with ``NUMBA_BOUNDSCHECK=1``
(and its own, empty ``NUMBA_CACHE_DIR``, so that nothing compiled without the checks is reused)
drives the kernels through their public wrappers over edge sizes, masks, biases, key lengths,
causal alignments, policies and tile sizes, compares them with the equation path, and checks that
an out-of-range index does raise. Inside a ``prange`` loop Numba drops the exception of a failed
bounds check (numba/numba#2811, #9380), so the script compiles the kernels' loops serially
(``njit`` of the same Python source: ``prange`` is then ``range``), with the helpers they call
checked too. Compiling takes most of its ~10 s.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import refattn

SCRIPT = r'''
import numba
import numpy as np
import pytest

from refattn import scaled_dot_product_attention as sdpa
from refattn.kernels import blocked, blocked_bwd, bsr, csr
from refattn.oracle.vjp import sdpa_vjp
from refattn.sparse import SparsePattern, sparse_attention

assert numba.config.BOUNDSCHECK
blocked._blocked_loop = numba.njit(blocked._blocked_loop.py_func)   # serial: checks raise (see above)
csr._csr_loop = numba.njit(csr._csr_loop.py_func)
blocked_bwd._backward_loop = numba.njit(blocked_bwd._backward_loop.py_func)
bsr._bsr_loop = numba.njit(bsr._bsr_loop.py_func)
rng = np.random.default_rng(0)
for batch, n, m, d, d_v in [((2,), 5, 7, 3, 2), ((2,), 7, 5, 3, 2), ((1,), 0, 4, 3, 2), ((2,), 3, 0, 3, 2),
                            ((0, 2), 3, 4, 3, 2), ((2,), 3, 4, 3, 0), ((2,), 3, 4, 0, 2), ((3,), 9, 9, 4, 3)]:
    q, k, v = (rng.standard_normal((*batch, t, w)) for t, w in ((n, d), (m, d), (m, d_v)))
    mask = rng.random((n, m)) < 0.5
    bias = np.where(mask, rng.standard_normal((n, m)), -np.inf)
    lengths = rng.integers(0, m + 1, size=batch[-1])
    for options in ({}, {"mask": mask}, {"mask": bias}, {"key_lengths": lengths}, {"mask": mask, "causal": True},
                    {"mask": bias, "causal": "bottom-right", "key_lengths": lengths}):
        for policy in ("zero", "nan", "uniform"):
            for block_size in (1, (2, 3), 64):
                got = sdpa(q, k, v, scale=0.5, fully_masked=policy, method="blocked", block_size=block_size,
                           return_lse=True, **options)
                expected = sdpa(q, k, v, scale=0.5, fully_masked=policy, method="equation", return_lse=True,
                                **options)
                for a, b in zip(got, expected):
                    np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-13)
            d_out = rng.standard_normal((*batch, n, d_v))
            for block_size in (1, (2, 3), 64):
                got = sdpa_vjp(q, k, v, d_out, scale=0.5, fully_masked=policy, method="blocked",
                               block_size=block_size, **options)
                expected = sdpa_vjp(q, k, v, d_out, scale=0.5, fully_masked=policy, method="equation", **options)
                for a, b in zip(got, expected):
                    if b is not None:
                        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
            pattern = SparsePattern.from_mask(mask)
            ref = sparse_attention(q, k, v, pattern, scale=0.5, fully_masked=policy)
            for method in ("csr", "bsr"):
                out, w = sparse_attention(q, k, v, pattern, scale=0.5, fully_masked=policy, method=method,
                                          return_weights=True)
                np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-12)
                assert w.shape == (*batch, pattern.nnz)

q = np.ones((1, 2, 3))
indptr, indices = np.array([0, 1, 2]), np.array([0, 5], dtype=np.int32)   # key 5 of 2: out of bounds
with pytest.raises(IndexError):
    csr._csr_loop(q, q, q, (indptr, indices), 1.0, 0, np.empty((1, 2, 3)), np.empty((1, 0)), np.empty((1, 0)))
'''


def test_kernels_under_numba_boundscheck(tmp_path):
    root = str(Path(refattn.__file__).resolve().parent.parent)     # this checkout's refattn, not another one
    env = {**os.environ, "NUMBA_BOUNDSCHECK": "1", "NUMBA_CACHE_DIR": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    env.pop("NUMBA_DISABLE_JIT", None)                             # bounds checks need compiled code
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, cwd=root, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
