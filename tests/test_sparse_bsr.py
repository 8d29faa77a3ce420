"""The block-sparse (bsr) kernel equals the csr kernel to 1e-12, and method="auto" takes it for block patterns."""
from __future__ import annotations

import numpy as np
import pytest

from refattn.sparse import SparsePattern, band_pattern, sparse_attention
from refattn.sparse.attention import BLOCK_FILL, block_structure

TOL = {"rtol": 1e-12, "atol": 1e-12}


def _blocks(n, m, b, blocks) -> SparsePattern:
    """Whole b × b blocks (block row, block column), cut to n × m: written out pair by pair, no refattn maker."""
    rows, cols = [], []
    for bi, bj in blocks:
        for i in range(bi * b, min(n, bi * b + b)):
            for j in range(bj * b, min(m, bj * b + b)):
                rows.append(i)
                cols.append(j)
    return SparsePattern.from_pairs(rows, cols, n, m)


def _both(q, k, v, pattern, **options):
    csr = sparse_attention(q, k, v, pattern, method="csr", return_weights=True, **options)
    bsr = sparse_attention(q, k, v, pattern, method="bsr", return_weights=True, **options)
    return csr, bsr


def _assert_same(csr, bsr):
    np.testing.assert_allclose(bsr[0], csr[0], **TOL)
    np.testing.assert_allclose(bsr[1], csr[1], **TOL)


@pytest.fixture
def rng():
    return np.random.default_rng(20)


@pytest.mark.parametrize(("n", "m"), [(130, 130), (100, 77), (40, 150)])
def test_bsr_equals_csr_on_whole_and_cut_blocks_with_n_not_m(rng, n, m):
    b = 32                                                         # d = 16: tile 64, then 32
    blocks = [(i, j) for i in range(-(-n // b)) for j in range(-(-m // b)) if (i + 2 * j) % 3 == 0]
    pattern = _blocks(n, m, b, blocks)
    q, k = rng.standard_normal((2, 3, n, 16)), rng.standard_normal((2, 3, m, 16))
    v = rng.standard_normal((2, 3, m, 5))
    _assert_same(*_both(q, k, v, pattern))


def test_bsr_equals_csr_on_partial_blocks_and_empty_rows(rng):
    n = m = 150
    band = band_pattern(n, 20)                                     # diagonal tiles partly kept
    keep = np.ones(n, bool)
    keep[[0, 7, 64, 65, 149]] = False                              # rows with no pair at all
    rows, cols = band.row_ids(), band.indices
    pattern = SparsePattern.from_pairs(rows[keep[rows]], cols[keep[rows]], n, m)
    assert pattern.row_counts()[~keep].sum() == 0
    q, k, v = rng.standard_normal((3, 2, n, 8))
    for policy in ("zero", "nan", "uniform"):
        csr, bsr = _both(q, k, v, pattern, fully_masked=policy)
        _assert_same(csr, bsr)
        expected = {"zero": 0.0, "nan": np.nan, "uniform": v.mean(axis=-2)[..., None, :]}[policy]
        np.testing.assert_allclose(bsr[0][..., ~keep, :], np.broadcast_to(expected, bsr[0][..., ~keep, :].shape),
                                   **TOL)


def test_bsr_equals_csr_with_mask_key_lengths_and_pair_bias(rng):
    n, m = 96, 112
    pattern = _blocks(n, m, 32, [(0, 0), (0, 3), (1, 1), (1, 2), (2, 0), (2, 3)])
    q, k = rng.standard_normal((2, 2, n, 8)), rng.standard_normal((2, 2, m, 8))
    v = rng.standard_normal((2, 2, m, 3))
    bool_mask = rng.random((n, m)) < 0.8
    float_mask = np.where(rng.random((2, 1, n, m)) < 0.1, -np.inf, rng.standard_normal((2, 1, n, m)))
    lengths = np.array([[70, 112], [0, 33]])
    pair_bias = rng.standard_normal(pattern.nnz)
    pair_bias[::7] = -np.inf
    for options in ({"mask": bool_mask}, {"mask": float_mask}, {"key_lengths": lengths},
                    {"pair_bias": pair_bias, "key_lengths": lengths, "fully_masked": "uniform"},
                    {"mask": bool_mask, "fully_masked": "nan", "scale": 0.7}):
        csr, bsr = _both(q, k, v, pattern, **options)
        _assert_same(csr, bsr)
        np.testing.assert_allclose(sparse_attention(q, k, v, pattern, method="bsr", **options),
                                   sparse_attention(q, k, v, pattern, method="equation", **options), **TOL)


def test_bsr_with_one_pattern_per_head(rng):
    n = 64
    heads = [_blocks(n, n, 32, [(0, 0), (1, 1)]), band_pattern(n, 5)]
    q, k, v = rng.standard_normal((3, 2, 2, n, 4))
    out = sparse_attention(q, k, v, heads, method="bsr")
    np.testing.assert_allclose(out, sparse_attention(q, k, v, heads, method="equation"), **TOL)


def test_hidden_nan_never_reaches_the_output_and_a_kept_one_makes_its_row_nan(rng):
    n = 64
    pattern = band_pattern(n, 3)
    q, k, v = rng.standard_normal((3, n, 4))
    v[40] = np.nan                                                 # kept by rows 37..43 only
    k[10] = np.inf                                                 # kept by rows 7..13 only
    csr, bsr = _both(q, k, v, pattern)
    _assert_same(csr, bsr)
    bad = np.zeros(n, bool)
    bad[37:44] = bad[7:14] = True
    assert np.isnan(bsr[0][bad]).all()
    assert np.isfinite(bsr[0][~bad]).all()


@pytest.mark.parametrize(("n", "m", "d", "d_v"), [(0, 5, 4, 3), (5, 0, 4, 3), (5, 6, 4, 0), (5, 6, 0, 3)])
def test_edge_sizes_agree_with_csr(rng, n, m, d, d_v):
    q, k, v = rng.standard_normal((n, d)), rng.standard_normal((m, d)), rng.standard_normal((m, d_v))
    pattern = SparsePattern.full(n, m)
    for policy in ("zero", "nan", "uniform"):
        csr, bsr = _both(q, k, v, pattern, scale=1.0, fully_masked=policy)
        _assert_same(csr, bsr)


def test_block_structure_reads_the_fill_from_the_pattern():
    whole = _blocks(256, 256, 64, [(0, 0), (1, 3), (2, 2), (3, 0)])
    b, (block_indptr, block_indices), fill = block_structure(whole, 64, 64)
    assert (b, fill) == (64, 1.0)
    np.testing.assert_array_equal(block_indptr, [0, 1, 2, 3, 4])
    np.testing.assert_array_equal(block_indices, [0, 3, 2, 0])
    scattered = SparsePattern.from_pairs(np.arange(256), (np.arange(256) * 37) % 256, 256, 256)
    assert block_structure(scattered, 64, 64)[2] < BLOCK_FILL


def test_auto_beyond_the_budget_takes_bsr_for_blocks_and_csr_for_scattered_pairs(rng, monkeypatch):
    from refattn.common import set_memory_budget
    from refattn.kernels import bsr, csr

    calls = []
    monkeypatch.setattr(bsr, "_bsr_loop", lambda *a: calls.append("bsr"))
    monkeypatch.setattr(csr, "_csr_loop", lambda *a: calls.append("csr"))
    q, k, v = rng.standard_normal((3, 128, 8))
    whole = _blocks(128, 128, 64, [(0, 0), (1, 0), (1, 1)])
    scattered = SparsePattern.from_pairs(np.arange(128), (np.arange(128) * 37) % 128, 128, 128)
    previous = set_memory_budget(1000)
    try:
        sparse_attention(q, k, v, whole)
        sparse_attention(q, k, v, scattered)
    finally:
        set_memory_budget(previous)
    assert calls == ["bsr", "csr"]


def test_kernel_refuses_a_layout_that_does_not_fit_the_pattern(rng):
    from refattn.kernels.bsr import sparse_attention_bsr

    pattern = band_pattern(8, 1)
    q, k, v = rng.standard_normal((3, 1, 8, 4))
    out, weights = np.empty((1, 8, 4)), np.empty((1, 0))
    with pytest.raises(ValueError, match=r"block_indices must lie in \[0, 1\]"):
        sparse_attention_bsr(q, k, v, (pattern.indptr, pattern.indices),
                             (np.array([0, 1, 2]), np.array([0, 5]), 4), 1.0, 0, out, weights)
    with pytest.raises(ValueError, match=r"block_indptr must have shape \(3,\)"):
        sparse_attention_bsr(q, k, v, (pattern.indptr, pattern.indices),
                             (np.array([0, 2]), np.array([0, 1]), 4), 1.0, 0, out, weights)
