"""Compound sparse patterns (survey §4.1.1, Fig. 5): unions of atomic ones, and double loops over the papers' sets."""
from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

from refattn.sparse.attention import sparse_attention
from refattn.sparse.band import band_pattern
from refattn.sparse.bigbird import bigbird_block_layout, bigbird_pattern, draw_bigbird_random_blocks
from refattn.sparse.block_local import block_local_pattern
from refattn.sparse.dilated import dilated_pattern
from refattn.sparse.etc import etc_pattern
from refattn.sparse.global_ import global_pattern
from refattn.sparse.longformer import longformer_pattern, longformer_patterns
from refattn.sparse.pattern import SparsePattern
from refattn.sparse.random import random_pattern
from refattn.sparse.sparse_transformer import sparse_transformer_pattern
from refattn.sparse.star_transformer import star_transformer_pattern
from refattn.sparse.strided import strided_pattern

TIGHT = {"rtol": 1e-12, "atol": 1e-12}


def loop_mask(n, keep):
    """The (n, n) mask {(i, j) : keep(i, j)} by a double Python loop."""
    return np.array([[bool(keep(i, j)) for j in range(n)] for i in range(n)], dtype=bool).reshape(n, n)


def assert_pattern_is(pattern, mask):
    np.testing.assert_array_equal(pattern.to_mask(), mask)


# --- Star-Transformer (Guo et al., 2019, §3.1) ------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 12])
@pytest.mark.parametrize("ring", [True, False])
def test_star_transformer_matches_the_paper_loop(n, ring):
    relay = n

    def keep(i, j):
        if i == relay:                                             # s attends to [s; H]
            return True
        if j == relay or j == i:                                   # radial edge, and h_i itself
            return True
        if ring:
            return (i - j) % n in (1, n - 1)                       # h_{i−1}, h_{i+1} around the ring
        return abs(i - j) == 1 and j < n
    assert_pattern_is(star_transformer_pattern(n, ring=ring), loop_mask(n + 1, keep))


@pytest.mark.parametrize("n", [1, 3, 8])
def test_star_transformer_is_band_plus_relay_plus_wrap(n):
    path = band_pattern(n + 1, 1) | global_pattern(n + 1, [n])
    assert star_transformer_pattern(n, ring=False) == path
    wrap = SparsePattern.from_pairs([0, n - 1], [n - 1, 0], n + 1, n + 1)
    assert star_transformer_pattern(n) == path | wrap


def test_star_transformer_counts():
    p = star_transformer_pattern(10)
    np.testing.assert_array_equal(p.row_counts(), [4] * 10 + [11])
    assert p.nnz == 5 * 10 + 1


# --- Longformer (Beltagy et al., 2020, §3.1) --------------------------------------------------------------------

LONGFORMER_CASES = list(itertools.product([1, 7, 10, 13, 16], [0, 2, 4, 6], [1, 2, 3], [[], [0], [2, 5]]))


@pytest.mark.parametrize(("n", "w", "d", "G"), LONGFORMER_CASES)
@pytest.mark.parametrize("causal", [False, True])
def test_longformer_matches_the_paper_loop(n, w, d, G, causal):
    G = [g for g in G if g < n]

    def keep(i, j):
        window = abs(i - j) <= (w // 2) * d and (i - j) % d == 0  # ½w keys each side, d apart
        return (window or i in G or j in G) and (j <= i or not causal)
    p = longformer_pattern(n, w, dilation=d, global_indices=G, causal=causal)
    assert_pattern_is(p, loop_mask(n, keep))


@pytest.mark.parametrize(("n", "w", "d", "G"), LONGFORMER_CASES)
def test_longformer_is_dilated_window_or_global(n, w, d, G):
    G = [g for g in G if g < n]
    atomic = dilated_pattern(n, w // 2, d)
    if G:
        atomic = atomic | global_pattern(n, G)
    assert longformer_pattern(n, w, dilation=d, global_indices=G) == atomic


@pytest.mark.parametrize("n", [1, 9, 16])
@pytest.mark.parametrize("w", [0, 2, 8, 40])
def test_longformer_dilation_one_is_the_band(n, w):
    assert longformer_pattern(n, w) == band_pattern(n, w // 2)
    assert longformer_pattern(n, w, causal=True) == band_pattern(n, w // 2, causal=True)


def test_longformer_global_rows_and_columns_are_full():
    G = [0, 7, 11]
    mask = longformer_pattern(20, 4, dilation=2, global_indices=G).to_mask()
    assert mask[G, :].all()
    assert mask[:, G].all()


@pytest.mark.parametrize("d", [1, 2, 3])
def test_longformer_causal_keeps_only_the_past(d):
    p = longformer_pattern(17, 6, dilation=d, global_indices=[0, 9], causal=True)
    assert np.all(p.indices <= p.row_ids())
    assert p == longformer_pattern(17, 6, dilation=d, global_indices=[0, 9]).causal()


def test_longformer_per_head_dilations():
    dilations = [1, 1, 2, 4]
    heads = longformer_patterns(30, 4, dilations, global_indices=[3], causal=True)
    assert len(heads) == len(dilations)
    for p, d in zip(heads, dilations, strict=True):
        assert p == longformer_pattern(30, 4, dilation=d, global_indices=[3], causal=True)
    np.testing.assert_array_equal(heads[3].row(20), [3, 12, 16, 20])   # i, i − 4, i − 8 and the global 3


# --- ETC (Ainslie et al., 2020, §3.2) ---------------------------------------------------------------------------

def etc_loop(g, L, r, seg=None, hard_g2l=False, hard_l2g=False):
    def keep(i, j):
        if i < g:                                                  # global query
            if j < g:
                return True                                        # g2g
            return seg[j - g] == i if hard_g2l else True           # g2l
        if j < g:
            return seg[i - g] == j if hard_l2g else True           # l2g
        return abs((i - g) - (j - g)) <= r                         # l2l, radius r
    return loop_mask(g + L, keep)


@pytest.mark.parametrize(("g", "L"), [(0, 1), (0, 9), (1, 1), (1, 6), (3, 12), (4, 5)])
@pytest.mark.parametrize("r", [0, 1, 3, 20])
def test_etc_matches_the_paper_loop(g, L, r):
    assert_pattern_is(etc_pattern(g, L, r), etc_loop(g, L, r))


@pytest.mark.parametrize(("g", "L"), [(1, 6), (3, 12), (4, 5)])
@pytest.mark.parametrize("r", [0, 2])
@pytest.mark.parametrize(("hard_g2l", "hard_l2g"), [(True, False), (False, True), (True, True)])
def test_etc_hard_masks_match_the_official_masks(rng, g, L, r, hard_g2l, hard_l2g):
    for seg in (np.sort(rng.integers(0, g, L)), rng.integers(0, g, L)):   # contiguous sentences, or any
        p = etc_pattern(g, L, r, segment_ids=seg, hard_g2l=hard_g2l, hard_l2g=hard_l2g)
        assert_pattern_is(p, etc_loop(g, L, r, seg, hard_g2l, hard_l2g))


@pytest.mark.parametrize(("g", "L", "r"), [(1, 6, 1), (3, 12, 2), (5, 4, 0)])
def test_etc_is_global_or_band(g, L, r):
    assert etc_pattern(g, L, r) == global_pattern(g + L, np.arange(g)) | band_pattern(g + L, r)


def test_etc_radius_covering_the_input_is_full_attention():
    assert etc_pattern(2, 7, 7) == SparsePattern.full(9, 9)


# --- BigBird (Zaheer et al., 2020, §2, App. D) ------------------------------------------------------------------

def global_blocks(nb, g):
    return list(range((g + 1) // 2)) + list(range(nb - g // 2, nb))


BIGBIRD_CASES = [(nb, b, r, g, w) for nb, b, r, g, w in itertools.product([5, 7, 10], [1, 2, 3], [0, 1, 2],
                                                                         [0, 1, 2, 3], [1, 3, 5])
                 if nb - g - w >= r]


@pytest.mark.parametrize(("nb", "b", "r", "g", "w"), BIGBIRD_CASES)
def test_bigbird_matches_the_paper_loop(nb, b, r, g, w):
    R = draw_bigbird_random_blocks(nb * 100 + r * 10 + g, nb, r, num_window_blocks=w, num_global_blocks=g)
    G = global_blocks(nb, g)

    def keep(i, j):
        I, J = i // b, j // b
        return I in G or J in G or abs(I - J) <= (w - 1) // 2 or J in R[I]
    p = bigbird_pattern(nb * b, block_size=b, num_random_blocks=r, num_global_blocks=g, num_window_blocks=w,
                        random_blocks=R)
    assert_pattern_is(p, loop_mask(nb * b, keep))


@pytest.mark.parametrize(("nb", "b", "r", "g", "w"), BIGBIRD_CASES)
def test_bigbird_token_pattern_is_the_block_layout_expanded(nb, b, r, g, w):
    options = {"num_random_blocks": r, "num_global_blocks": g, "num_window_blocks": w, "rng": 5}
    layout = bigbird_block_layout(nb, **options)
    p = bigbird_pattern(nb * b, block_size=b, **options)
    np.testing.assert_array_equal(p.to_mask(), np.kron(layout, np.ones((b, b), dtype=bool)))


@pytest.mark.parametrize(("nb", "b", "r", "g", "w"), BIGBIRD_CASES)
def test_bigbird_layout_is_window_or_global_or_random(nb, b, r, g, w):
    R = draw_bigbird_random_blocks(3, nb, r, num_window_blocks=w, num_global_blocks=g)
    atomic = band_pattern(nb, (w - 1) // 2) | random_pattern(nb, keys=R)
    if g:
        atomic = atomic | global_pattern(nb, global_blocks(nb, g))
    layout = bigbird_block_layout(nb, num_random_blocks=r, num_global_blocks=g, num_window_blocks=w, random_blocks=R)
    np.testing.assert_array_equal(layout, atomic.to_mask())


@pytest.mark.parametrize(("nb", "r", "g", "w"), [(8, 3, 2, 3), (16, 3, 2, 3), (12, 2, 3, 5), (9, 1, 0, 1)])
def test_bigbird_random_blocks_avoid_window_and_globals_with_exact_counts(nb, r, g, w):
    R = draw_bigbird_random_blocks(np.random.default_rng(11), nb, r, num_window_blocks=w, num_global_blocks=g)
    G = global_blocks(nb, g)
    assert R.shape == (nb, r)
    for I in range(nb):
        if I in G:
            np.testing.assert_array_equal(R[I], -1)
            continue
        assert len(set(R[I].tolist())) == r
        for J in R[I]:
            assert 0 <= J < nb and J not in G and abs(J - I) > (w - 1) // 2, f"row {I} drew block {J}"
    window = {I: {J for J in range(nb) if abs(I - J) <= (w - 1) // 2} for I in range(nb)}
    expected = [nb if I in G else len(window[I] | set(G)) + r for I in range(nb)]
    layout = bigbird_block_layout(nb, num_random_blocks=r, num_global_blocks=g, num_window_blocks=w, random_blocks=R)
    np.testing.assert_array_equal(layout.sum(axis=1), expected)


def test_bigbird_same_seed_same_pattern_and_explicit_draw():
    p = bigbird_pattern(640, block_size=32, rng=123)
    assert bigbird_pattern(640, block_size=32, rng=123) == p
    assert bigbird_pattern(640, block_size=32, rng=np.random.default_rng(123)) == p
    assert bigbird_pattern(640, block_size=32, random_blocks=draw_bigbird_random_blocks(123, 20)) == p
    assert bigbird_pattern(640, block_size=32, rng=124) != p


def test_bigbird_random_draw_is_uniform_over_candidates():
    # Middle row 5 of 12 blocks (G = {0, 11}, window {4, 5, 6}) has 7 candidates, each drawn with
    # probability 3/7. Over 7000 draws a block's count is Binomial(7000, 3/7): sd ≈ 41.4, and
    # |count − 3000| ≤ 5 sd fails for some block with probability < 7 · 5.7e-7.
    rng = np.random.default_rng(2020)
    draws = np.concatenate([draw_bigbird_random_blocks(rng, 12, 3)[5] for _ in range(7000)])
    counts = np.bincount(draws, minlength=12)
    np.testing.assert_array_equal(counts[[0, 4, 5, 6, 11]], 0)
    assert np.all(np.abs(counts[[1, 2, 3, 7, 8, 9, 10]] - 3000) <= 5 * np.sqrt(7000 * 3 / 7 * 4 / 7))


def test_bigbird_official_candidates_reproduce_bigbird_block_rand_mask():
    # bigbird_block_rand_mask: rows 1, 2 and the middle rows exclude their window; rows nb − 3 and
    # nb − 2 draw from all of middle_seq = 1 … nb − 2 ("Missing -3", "Missing -4" in the code).
    nb, r = 10, 3
    rng = np.random.default_rng(0)
    seen = {I: set() for I in range(nb)}
    for _ in range(400):
        R = draw_bigbird_random_blocks(rng, nb, r, candidates="official")
        for I in range(1, nb - 1):
            seen[I] |= set(R[I].tolist())
    assert seen[1] == set(range(3, nb - 1))
    assert seen[2] == set(range(4, nb - 1))
    for I in range(3, nb - 3):
        assert seen[I] == set(range(1, nb - 1)) - {I - 1, I, I + 1}
    assert seen[nb - 3] == seen[nb - 2] == set(range(1, nb - 1))


def test_bigbird_explicit_draw_may_overlap_the_window():
    R = np.full((6, 1), -1)
    R[1:5, 0] = [2, 3, 4, 5]                                       # window or global blocks: no new block
    layout = bigbird_block_layout(6, num_random_blocks=1, random_blocks=R)
    np.testing.assert_array_equal(layout, bigbird_block_layout(6, num_random_blocks=0))


# --- Sparse Transformer (Child et al., 2019, §4.2–4.3) ----------------------------------------------------------

def sparse_transformer_loop(n, l, kind, c=1, part=None, causal=True, local_window="paper", s=0):
    def a1(i, j):                                                  # A⁽¹⁾ᵢ ∋ j
        if kind == "fixed":
            return j // l == i // l                                # ⌊j/l⌋ = ⌊i/l⌋
        if local_window == "official":
            return 0 <= i - j <= l - 1 if causal else abs(i - j) <= l - 1
        return max(0, i - l) <= j <= i if causal else abs(i - j) <= l   # {t, …, i}, t = max(0, i − l)

    def a2(i, j):                                                  # A⁽²⁾ᵢ ∋ j
        if kind == "fixed":
            return j % l in range(l - (s + 1) * c, l - s * c)       # {l − c, …, l − 1} for s = 0
        return (i - j) % l == 0

    def keep(i, j):
        heads = {1: a1(i, j), 2: a2(i, j), None: a1(i, j) or a2(i, j)}
        return heads[part] and (j <= i or not causal)
    return loop_mask(n, keep)


ST_SIZES = [1, 5, 9, 16, 17]


@pytest.mark.parametrize("n", ST_SIZES)
@pytest.mark.parametrize("l", [1, 2, 3, 4])
@pytest.mark.parametrize("part", [None, 1, 2])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("local_window", ["paper", "official"])
def test_sparse_transformer_strided_matches_the_paper_loop(n, l, part, causal, local_window):
    p = sparse_transformer_pattern(n, l, part=part, causal=causal, local_window=local_window)
    assert_pattern_is(p, sparse_transformer_loop(n, l, "strided", part=part, causal=causal,
                                                 local_window=local_window))


@pytest.mark.parametrize("n", ST_SIZES)
@pytest.mark.parametrize(("l", "c", "s"), [(1, 1, 0), (2, 1, 0), (3, 1, 1), (4, 2, 0), (4, 2, 1), (5, 2, 1), (4, 4, 0)])
@pytest.mark.parametrize("part", [None, 1, 2])
@pytest.mark.parametrize("causal", [True, False])
def test_sparse_transformer_fixed_matches_the_paper_loop(n, l, c, s, part, causal):
    p = sparse_transformer_pattern(n, l, kind="fixed", c=c, part=part, causal=causal, subblock=s)
    assert_pattern_is(p, sparse_transformer_loop(n, l, "fixed", c=c, part=part, causal=causal, s=s))


@pytest.mark.parametrize("n", [9, 17])
@pytest.mark.parametrize("l", [2, 3, 4])
@pytest.mark.parametrize("causal", [True, False])
def test_sparse_transformer_heads_are_atomic_and_merged_is_their_union(n, l, causal):
    strided = {p: sparse_transformer_pattern(n, l, part=p, causal=causal) for p in (1, 2)}
    assert strided[1] == band_pattern(n, l, causal=causal)
    assert strided[2] == strided_pattern(n, l, causal=causal)
    assert sparse_transformer_pattern(n, l, causal=causal) == strided[1] | strided[2]
    fixed = {p: sparse_transformer_pattern(n, l, kind="fixed", part=p, causal=causal) for p in (1, 2)}
    assert fixed[1] == block_local_pattern(n, l, causal=causal)
    assert sparse_transformer_pattern(n, l, kind="fixed", causal=causal) == fixed[1] | fixed[2]


@pytest.mark.parametrize("kind", ["strided", "fixed"])
def test_sparse_transformer_every_past_key_is_within_two_hops(kind):
    # The factorisation's defining property (§4.2): every j ≤ i is reached through A⁽¹⁾, A⁽²⁾ or both in turn.
    A1, A2 = (sparse_transformer_pattern(25, 5, kind=kind, part=p).to_mask().astype(int) for p in (1, 2))
    reach = (A1 + A2 + A1 @ A2 + A2 @ A1) > 0
    np.testing.assert_array_equal(reach, np.tril(np.ones((25, 25), dtype=bool)))


# --- sparse_attention over the compound patterns ----------------------------------------------------------------

def compound_patterns():
    R = draw_bigbird_random_blocks(9, 8, 2)
    return {
        "star": star_transformer_pattern(11),                       # n + 1 = 12
        "longformer": longformer_pattern(12, 4, dilation=2, global_indices=[0, 7]),
        "longformer_causal": longformer_pattern(12, 6, global_indices=[3], causal=True),
        "etc": etc_pattern(3, 9, 2),
        "etc_hard": etc_pattern(3, 9, 1, segment_ids=[0, 0, 0, 1, 1, 2, 2, 2, 2], hard_g2l=True, hard_l2g=True),
        "bigbird": bigbird_pattern(16, block_size=2, num_random_blocks=2, random_blocks=R),
        "strided": sparse_transformer_pattern(12, 3),
        "fixed": sparse_transformer_pattern(12, 4, kind="fixed", c=2, causal=False),
    }


@pytest.mark.parametrize("name", list(compound_patterns()))
def test_csr_kernel_equals_equation_path(rng, name):
    p = compound_patterns()[name]
    q, k, v = rng.standard_normal((2, p.n, 5)), rng.standard_normal((2, p.n, 5)), rng.standard_normal((2, p.n, 3))
    out_eq, A = sparse_attention(q, k, v, p, return_weights=True, method="equation")
    out_csr, data = sparse_attention(q, k, v, p, return_weights=True, method="csr")
    np.testing.assert_allclose(out_csr, out_eq, **TIGHT)
    np.testing.assert_allclose(p.to_dense(data), A, **TIGHT)
    np.testing.assert_array_equal(A > 0, np.broadcast_to(p.to_mask(), A.shape))   # weights only on kept pairs


def test_csr_kernel_equals_equation_path_per_head(rng):
    heads = longformer_patterns(14, 4, [1, 2, 3], global_indices=[0])
    q, k, v = rng.standard_normal((3, 2, 3, 14, 4))
    np.testing.assert_allclose(sparse_attention(q, k, v, heads, method="csr"),
                               sparse_attention(q, k, v, heads, method="equation"), **TIGHT)


# --- large n: O(nnz) construction, nnz against closed forms -----------------------------------------------------

def test_longformer_large_n_has_the_closed_form_nnz():
    n, w = 65536, 256
    h = w // 2
    assert longformer_pattern(n, w).nnz == n * (w + 1) - h * (h + 1)             # 2·(1 + … + h) clipped at the ends
    # global 0: row 0 gains the n − (h + 1) keys outside its window, column 0 the n − (h + 1) rows i > h.
    assert longformer_pattern(n, w, global_indices=[0]).nnz == n * (w + 1) - h * (h + 1) + 2 * (n - h - 1)


def test_bigbird_large_n_has_the_closed_form_nnz():
    n, b = 65536, 64
    nb = n // b
    # Global rows keep nb blocks; rows 1 and nb − 2 keep window (3) + the far global (1) + r (3);
    # the nb − 4 other middle rows keep 3 + 2 + 3, as window, global and random blocks are disjoint.
    blocks = 2 * nb + 2 * (3 + 1 + 3) + (nb - 4) * (3 + 2 + 3)
    p = bigbird_pattern(n, rng=0)
    assert p.nnz == b * b * blocks
    np.testing.assert_array_equal(p.row_counts()[[0, b, 2 * b, n - 1]], [n, 7 * b, 8 * b, n])


# --- bad input ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: star_transformer_pattern(-1), ValueError, "n must be a non-negative int, got -1"),
    (lambda: star_transformer_pattern(4, ring="yes"), TypeError, "ring must be True or False, got .yes."),
    (lambda: longformer_pattern(8, 3), ValueError, "window must be even"),
    (lambda: longformer_pattern(8, -2), ValueError, "window must be a non-negative int"),
    (lambda: longformer_pattern(8, 2, dilation=0), ValueError, "dilation must be a positive int, got 0"),
    (lambda: longformer_pattern(8, 2, global_indices=[8]), ValueError, r"global_indices must lie in \[0, n=8\)"),
    (lambda: longformer_pattern(8, 2, global_indices=[0.5]), TypeError,
     "global_indices must be an array of ints, got dtype float64"),
    (lambda: longformer_patterns(8, 2, []), TypeError, "dilations must be a non-empty sequence"),
    (lambda: longformer_patterns(8, 2, [1, 0]), ValueError, r"dilations\[1\] must be a positive int, got 0"),
    (lambda: etc_pattern(2, -1, 1), ValueError, "num_long must be a non-negative int, got -1"),
    (lambda: etc_pattern(-1, 4, 1), ValueError, "num_global must be a non-negative int"),
    (lambda: etc_pattern(2, 4, -1), ValueError, "window must be a non-negative int"),
    (lambda: etc_pattern(2, 4, 1, hard_l2g=True), ValueError, "need segment_ids"),
    (lambda: etc_pattern(2, 4, 1, segment_ids=[0, 0, 1, 1]), ValueError, "segment_ids is only used with"),
    (lambda: etc_pattern(2, 4, 1, segment_ids=[0, 1], hard_g2l=True), ValueError, r"shape \(num_long,\) = \(4,\)"),
    (lambda: etc_pattern(2, 4, 1, segment_ids=[0, 1, 2, 1], hard_g2l=True), ValueError,
     r"segment_ids must lie in \[0, num_global=2\)"),
    (lambda: bigbird_pattern(100, block_size=64, rng=0), ValueError, "n=100 must be a multiple of block_size=64"),
    (lambda: bigbird_pattern(512), ValueError,
     r"^bigbird draws its 3 random blocks per row from rng: pass rng= \(or random_blocks=\)$"),
    (lambda: bigbird_pattern(512, num_window_blocks=2, rng=0), ValueError, "num_window_blocks must be an odd"),
    (lambda: bigbird_pattern(128, num_global_blocks=3, rng=0), ValueError, "num_global_blocks=3 exceeds num_blocks=2"),
    (lambda: bigbird_pattern(384, rng=0), ValueError, "num_random_blocks=3 but block row 1 has only 2 candidate"),
    (lambda: bigbird_pattern(512, rng=0, candidates="hf"), ValueError, "candidates must be one of"),
    (lambda: draw_bigbird_random_blocks(0, 12, 2, num_window_blocks=5, candidates="official"), ValueError,
     "assumes num_window_blocks=3 and num_global_blocks=2"),
    (lambda: bigbird_block_layout(4, num_random_blocks=2, random_blocks=[[-1], [3], [0], [-1]]), ValueError,
     "random_blocks has 1 columns but num_random_blocks=2"),
    (lambda: bigbird_block_layout(4, num_random_blocks=1, random_blocks=[[0], [3], [0], [-1]]), ValueError,
     r"must be -1 in the global rows \[0, 3\]"),
    (lambda: bigbird_block_layout(4, num_random_blocks=1, random_blocks=[[-1], [4], [0], [-1]]), ValueError,
     r"random_blocks must lie in \[0, num_blocks=4\)"),
    (lambda: sparse_transformer_pattern(8, 0), ValueError, "stride must be a positive int, got 0"),
    (lambda: sparse_transformer_pattern(8, 3, kind="local"), ValueError, "kind must be one of"),
    (lambda: sparse_transformer_pattern(8, 3, part=3), ValueError, "part must be one of"),
    (lambda: sparse_transformer_pattern(8, 3, local_window="hf"), ValueError, "local_window must be one of"),
    (lambda: sparse_transformer_pattern(8, 3, kind="fixed", c=4), ValueError,
     r"c must be an int with 1 <= c <= stride=3"),
    (lambda: sparse_transformer_pattern(8, 4, kind="fixed", c=2, subblock=2), ValueError,
     r"subblock=2 needs \(subblock \+ 1\)·c <= stride"),
])
def test_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


# --- lengths: empty where the pattern is defined, refused saying which lengths work where it is not ----------------

def test_self_attention_builders_take_zero_length():
    assert star_transformer_pattern(0) == SparsePattern.full(1, 1)            # the relay alone, reading itself
    for p in (longformer_pattern(0, 4), longformer_pattern(0, 2, global_indices=[], causal=True),
              etc_pattern(0, 0, 1), sparse_transformer_pattern(0, 3), sparse_transformer_pattern(0, 3, kind="fixed")):
        assert p.shape == (0, 0) and p.nnz == 0
    assert etc_pattern(2, 0, 1) == SparsePattern.full(2, 2)                 # global tokens only: g2g
    assert etc_pattern(2, 0, 1, segment_ids=[], hard_g2l=True) == SparsePattern.full(2, 2)


@pytest.mark.parametrize(("r", "g", "w", "candidates"), [
    (1, 2, 3, "disjoint"), (3, 2, 3, "disjoint"), (2, 0, 1, "disjoint"), (2, 3, 5, "disjoint"), (0, 2, 3, "disjoint"),
    (1, 1, 3, "disjoint"), (1, 2, 3, "official"), (3, 2, 3, "official"),
])
def test_bigbird_takes_exactly_the_block_counts_its_refusal_names(r, g, w, candidates):
    def refusal(nb):
        try:
            draw_bigbird_random_blocks(nb, nb, r, num_global_blocks=g, num_window_blocks=w, candidates=candidates)
        except ValueError as error:
            return str(error)
        return None

    refusals = {nb: refusal(nb) for nb in range(1, 60)}
    rules = {message.split("BigBird takes ")[1] for message in refusals.values() if message}
    assert len(rules) == 1                                         # every refusal states the same rule, e.g.
    head, start = rules.pop().split("num_blocks >= ")              # "num_blocks = 2 or num_blocks >= 6"
    isolated = {int(t) for t in re.findall(r"\d+", head)}
    for nb, message in refusals.items():
        assert (message is None) == (nb in isolated or nb >= int(start)), f"num_blocks={nb}: {message}"


@pytest.mark.parametrize("candidates", ["disjoint", "official"])
def test_bigbird_names_the_lengths_it_takes_without_a_count_per_random_block(monkeypatch, candidates):
    """The refusal's rule comes from a few block counts, not one per requested random block (10⁶ took 8 s, 10³⁰
    never returned; above 2**62 the count itself is refused by name)."""
    import refattn.sparse.bigbird as bigbird_module

    looked_at = []
    layout_problem = bigbird_module._layout_problem

    def counted(*args):
        looked_at.append(args[0])
        assert len(looked_at) <= 20, "the refusal looks at a block count per random block"
        return layout_problem(*args)

    monkeypatch.setattr(bigbird_module, "_layout_problem", counted)
    for r in (10**6, 2**62):                                       # 8 blocks of 2 tokens; r + 5 blocks are enough
        looked_at.clear()
        with pytest.raises(ValueError, match=rf"^n=16 makes num_blocks=8: num_random_blocks={r} but block row 1 has "
                                             rf"only 4 candidate blocks .*BigBird takes n = 4 or n >= {2 * (r + 5)}, "
                                             r"a multiple of block_size=2$"):
            bigbird_pattern(16, block_size=2, num_random_blocks=r, rng=0, candidates=candidates)


def test_bigbird_refuses_lengths_naming_n_and_the_lengths_it_takes():
    with pytest.raises(ValueError, match=r"^n=384 makes num_blocks=6: num_random_blocks=3 but block row 1 has only 2 "
                                         r"candidate blocks .*BigBird takes n = 128 or n >= 512, a multiple of "
                                         r"block_size=64$"):
        bigbird_pattern(384, rng=0)
    with pytest.raises(ValueError, match=r"^n=0 holds no block; .* BigBird takes n = 128 or n >= 512"):
        bigbird_pattern(0, rng=0)
    assert bigbird_pattern(128, rng=0) == SparsePattern.full(128, 128)       # two blocks, both global


def test_given_random_blocks_leave_rng_unused():
    keys = np.full((8, 3), -1)
    assert bigbird_pattern(512, rng=0, random_blocks=keys) == bigbird_pattern(512, random_blocks=keys)
