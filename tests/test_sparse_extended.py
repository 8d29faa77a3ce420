"""Extended sparse patterns (survey §4.1.1, Fig. 6): BP-Transformer, Image Transformer, axial attention.

Each builder is held to an independent formulation: a double loop over (query, key) transcribed from
the paper's definition, a transcription of the official code's loop, or a structural fact of the
paper (the context of a BPT token tiles the sequence once; two axial layers reach every pixel).
"""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from refattn import registry
from refattn.sparse.attention import sparse_attention
from refattn.sparse.axial import axial_attention, axial_pattern, axial_patterns
from refattn.sparse.band import band_pattern
from refattn.sparse.block_local import block_local_pattern
from refattn.sparse.bp_transformer import bp_transformer_pattern, bp_tree_spans
from refattn.sparse.image_transformer import image_transformer_1d_pattern, image_transformer_pattern
from refattn.sparse.pattern import SparsePattern


def loop_mask(n, m, keep):
    """The mask {(i, j) : keep(i, j)} by a double Python loop."""
    return np.array([[bool(keep(i, j)) for j in range(m)] for i in range(n)]).reshape(n, m)


def random_qkv(rng, n, d=4, batch=(2,)):
    return rng.standard_normal((3, *batch, n, d))


# --- BP-Transformer ------------------------------------------------------------------------------

def official_bpt_edges(length, step, triu=False):
    """(number of nodes, query ids, key ids) of yzh119/BPT ``graph_builder/builder.pyx``, line by line.

    ``SegmentTree.build_graph``: its edges are (src, dst) and the attention lets dst query src, so
    dst is our query (row) and src our key (column).
    """
    n, n_lvl, shift, n_nodes_arr, n_nodes = length, 1, [0], [], 0
    while n >= 2:
        n_nodes_arr.append(n)
        n_nodes += n
        shift.append(n_nodes)
        n_lvl += 1
        n = (n + 1) >> 1
    n_nodes_arr.append(1)
    n_nodes += 1
    src, dst = [], []
    for i in range(length):
        v, sh = i, 0
        l_ptr, r_ptr = v - 1, v + 1
        l_overlap = r_overlap = False
        for j in range(n_lvl):
            for _ in range(step):
                if (not triu) and r_ptr < n_nodes_arr[j]:
                    src.append(shift[j - 1] + ((r_ptr << 1) + 1) if r_overlap else shift[j] + r_ptr)
                    dst.append(i)
                    r_overlap = False
                r_ptr += 1
                if l_ptr >= 0:
                    src.append(shift[j - 1] + (l_ptr << 1) if l_overlap else shift[j] + l_ptr)
                    dst.append(i)
                    l_overlap = False
                l_ptr -= 1
            if l_ptr & 1 == 0:
                l_overlap = True
            if r_ptr & 1 == 1:
                r_overlap = True
            r_ptr >>= 1
            l_ptr >>= 1
            src.append(i)                                          # self / bottom-up connection
            dst.append(sh + v)
            sh += n_nodes_arr[j]
            v >>= 1
    return n_nodes, np.array(dst), np.array(src)


BPT_SIZES = [1, 2, 3, 5, 8, 11, 16, 23, 32]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 8, 16, 31, 32, 33, 100])
def test_bp_tree_node_counts(n):
    spans = bp_tree_spans(n)
    levels = math.ceil(math.log2(n)) + 1 if n > 1 else 1
    assert len(spans) == sum(math.ceil(n / 2**level) for level in range(levels))
    assert [s for s in spans if s[0] == 0] == [(0, i, i + 1) for i in range(n)]    # the n leaves come first
    assert spans[-1] == (levels - 1, 0, n)                                          # the root spans everything
    if n & (n - 1) == 0:                                                            # perfect binary tree
        assert len(spans) == 2 * n - 1
        assert all(stop - start == 2**level for level, start, stop in spans)


@pytest.mark.parametrize("n", [2, 3, 5, 8, 13, 32])
def test_bp_tree_span_is_the_union_of_its_children(n):
    spans = bp_tree_spans(n)
    by_level = {}
    for level, start, stop in spans:
        by_level.setdefault(level, []).append((start, stop))
    for level in range(1, max(by_level) + 1):
        for p, (start, stop) in enumerate(by_level[level]):
            children = by_level[level - 1][2 * p:2 * p + 2]        # one child at a ragged right edge
            assert children[0][0] == start and children[-1][1] == stop
            assert children[0][1] == children[-1][0] or len(children) == 1


@pytest.mark.parametrize("n", [1, 2, 4, 8, 16, 32, 64])
@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("causal", [False, True])
def test_bp_equals_the_official_builder_for_powers_of_two(n, k, causal):
    N, rows, cols = official_bpt_edges(n, k, triu=causal)
    assert bp_transformer_pattern(n, k, causal=causal) == SparsePattern.from_pairs(rows, cols, N, N)


def test_bp_official_walk_names_a_wrong_node_off_powers_of_two():
    # n = 5, k = 1 (Notes): the official right pointer runs past level 1 (3 nodes) and comes back at
    # level 2, where its "overlap" child 2·1 + 1 = 3 of level 1 does not exist: it lands on node 8,
    # the span [0, 4), which contains token 2 itself. Here token 2 reads [4, 5) at level 1 instead.
    N, rows, cols = official_bpt_edges(5, 1)
    spans = bp_tree_spans(5)
    assert spans[8] == (2, 0, 4) and spans[7] == (1, 4, 5)
    assert 8 in cols[rows == 2]
    assert 8 not in bp_transformer_pattern(5, 1).row(2) and 7 in bp_transformer_pattern(5, 1).row(2)


@pytest.mark.parametrize("n", BPT_SIZES + [64, 100])
@pytest.mark.parametrize("k", [1, 2, 3, 5])
@pytest.mark.parametrize("causal", [False, True])
def test_bp_token_context_covers_the_sequence_exactly_once(n, k, causal):
    # Fine-to-coarse: self + context nodes of token i tile [0, n) (causal: [0, i]) without overlap.
    pattern, spans = bp_transformer_pattern(n, k, causal=causal), bp_tree_spans(n)
    for i in range(n):
        cover = np.zeros(n, dtype=int)
        for node in pattern.row(i):
            _, start, stop = spans[node]
            cover[start:stop] += 1
        want = np.ones(n, dtype=int) if not causal else (np.arange(n) <= i).astype(int)
        np.testing.assert_array_equal(cover, want, err_msg=f"token {i}")


@pytest.mark.parametrize("n", [8, 13, 32, 100])
@pytest.mark.parametrize("k", [1, 2, 4])
def test_bp_context_is_k_per_level_and_coarsens_with_distance(n, k):
    pattern, spans = bp_transformer_pattern(n, k), bp_tree_spans(n)
    for i in range(n):
        for side in (-1, 1):
            nodes = [spans[u] for u in pattern.row(i) if u != i and (spans[u][1] <= i if side < 0 else spans[u][1] > i)]
            nodes.sort(key=lambda s: side * s[1])                  # outwards from i
            levels = [level for level, _, _ in nodes]
            assert levels == sorted(levels), f"token {i}: levels {levels} are not fine-to-coarse"
            assert max(np.bincount(levels), default=0) <= k + 1   # k per walk level, one spilling over
    # level 0 is the band of width k; at most one more token per side (the first, finer node of level 1)
    tokens = pattern.to_mask()[:n, :n]
    assert np.all(tokens >= band_pattern(n, k).to_mask())
    assert np.all(tokens <= band_pattern(n, k + 1).to_mask())


@pytest.mark.parametrize("n", BPT_SIZES)
def test_bp_span_nodes_attend_to_exactly_their_tokens(n):
    pattern, spans = bp_transformer_pattern(n, 2), bp_tree_spans(n)
    for node, (level, start, stop) in enumerate(spans):
        if level > 0:
            np.testing.assert_array_equal(pattern.row(node), np.arange(start, stop))


@pytest.mark.parametrize("k", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("n", [8, 9, 16, 50, 64, 100, 128, 257, 1000])
def test_bp_edge_count_bound(n, k):
    # Notes of bp_transformer_pattern: n self loops, n·⌈log₂ n⌉ affiliated edges, and per side at most
    # k nodes on each of at most log₂(n/k) + 2 levels; ≤ 6·k·n·log₂(n/k) once n ≥ 4k.
    nnz = bp_transformer_pattern(n, k).nnz
    assert nnz <= n * (1 + math.ceil(math.log2(n))) + 2 * k * n * (math.log2(n / k) + 2)
    if n >= 4 * k:
        assert nnz <= 6 * k * n * math.log2(n / k)


@pytest.mark.parametrize("k", [1, 4])
def test_bp_edge_count_grows_as_k_n_log_n_over_k(k):
    sizes = [256, 512, 1024, 2048, 4096, 8192]
    ratios = np.array([bp_transformer_pattern(n, k).nnz / (k * n * math.log2(n / k)) for n in sizes])
    assert np.all(ratios <= 6)
    # an extra log factor (or n²) would grow the ratio by ≥ log₂ 8192 / log₂ 256 = 1.6 over these sizes
    assert ratios[-1] / ratios[0] < 1.1, ratios


@pytest.mark.parametrize("n", [5, 8, 13])
def test_bp_causal_tokens_ignore_later_tokens(rng, n):
    pattern, spans = bp_transformer_pattern(n, 2, causal=True), bp_tree_spans(n)
    q, k, v = random_qkv(rng, len(spans))
    out = sparse_attention(q, k, v, pattern)
    for t in range(n):
        later = np.array([stop > t + 1 for _, _, stop in spans])   # nodes that contain a token after t
        k2, v2 = k.copy(), v.copy()
        k2[..., later, :] = rng.standard_normal(k2[..., later, :].shape)
        v2[..., later, :] = rng.standard_normal(v2[..., later, :].shape)
        np.testing.assert_array_equal(sparse_attention(q, k2, v2, pattern)[..., :t + 1, :], out[..., :t + 1, :])


# --- Image Transformer ---------------------------------------------------------------------------

def image_keep(H, W, query_block, memory_flange, causal=False, flange="past", order="block-raster"):
    """keep(i, j) of 2-D local attention, from the paper's §3.3 sentences, one pair at a time."""
    (h_q, w_q), (h_m, w_m) = query_block, memory_flange

    def rank(r, c):                                                # generation order
        return (r // h_q, c // w_q, r, c) if order == "block-raster" else (r, c)

    def keep(i, j):
        (r, c), (rr, cc) = divmod(i, W), divmod(j, W)
        a, b = r // h_q, c // w_q
        below = h_m if flange == "both" else 0
        inside = a * h_q - h_m <= rr < (a + 1) * h_q + below and b * w_q - w_m <= cc < (b + 1) * w_q + w_m
        return inside and (not causal or rank(rr, cc) <= rank(r, c))
    return keep


IMAGES = [(4, 4), (5, 7), (6, 5), (1, 3), (7, 1)]
BLOCKS = [(2, 2), (2, 3), (3, 1), (8, 16)]
FLANGES = [(0, 0), (1, 1), (2, 1), (0, 2)]
MODES = [dict(), dict(flange="both"), dict(causal=True), dict(causal=True, order="raster"),
         dict(causal=True, flange="both")]


@pytest.mark.parametrize(("H", "W"), IMAGES)
@pytest.mark.parametrize(("query_block", "memory_flange"), list(itertools.product(BLOCKS[:3], FLANGES)))
@pytest.mark.parametrize("mode", MODES, ids=lambda d: ",".join(f"{a}={b}" for a, b in d.items()) or "default")
def test_image_2d_matches_double_loop(H, W, query_block, memory_flange, mode):
    pattern = image_transformer_pattern(H, W, query_block=query_block, memory_flange=memory_flange, **mode)
    np.testing.assert_array_equal(pattern.to_mask(),
                                  loop_mask(H * W, H * W, image_keep(H, W, query_block, memory_flange, **mode)))


@pytest.mark.parametrize(("H", "W"), [(5, 7), (9, 20)])
def test_image_2d_default_blocks_match_double_loop(H, W):
    keep = image_keep(H, W, (8, 16), (8, 16), causal=True)
    np.testing.assert_array_equal(image_transformer_pattern(H, W, causal=True).to_mask(), loop_mask(H * W, H * W, keep))


def tensor2tensor_masked_2d_mask(H, W, query_block, memory_flange):
    """The kept pairs of tensor2tensor ``masked_local_attention_2d``, region by region (H, W divisible).

    ``get_memory_region``: the top region (h_m rows above, w_q + 2·w_m columns) and the left region
    (the block's rows, w_m columns on its left) are visible except padding (keys outside the image);
    the query block itself ("center") is under a lower triangle in the block's flattened order.
    """
    (h_q, w_q), (h_m, w_m) = query_block, memory_flange
    mask = np.zeros((H * W, H * W), bool)
    for r0 in range(0, H, h_q):
        for c0 in range(0, W, w_q):
            top = [(r, c) for r in range(r0 - h_m, r0) for c in range(c0 - w_m, c0 + w_q + w_m)]
            left = [(r, c) for r in range(r0, r0 + h_q) for c in range(c0 - w_m, c0)]
            center = [(r, c) for r in range(r0, r0 + h_q) for c in range(c0, c0 + w_q)]
            flange = [(r, c) for r, c in top + left if 0 <= r < H and 0 <= c < W]   # padding masked
            for t, (r, c) in enumerate(center):
                for rr, cc in flange + center[:t + 1]:
                    mask[r * W + c, rr * W + cc] = True
    return mask


@pytest.mark.parametrize(("H", "W", "query_block"), [(4, 4, (2, 2)), (6, 6, (2, 3)), (6, 4, (3, 1)), (4, 8, (4, 8))])
@pytest.mark.parametrize("memory_flange", FLANGES)
def test_image_2d_causal_equals_tensor2tensor_regions(H, W, query_block, memory_flange):
    p = image_transformer_pattern(H, W, query_block=query_block, memory_flange=memory_flange, causal=True)
    np.testing.assert_array_equal(p.to_mask(), tensor2tensor_masked_2d_mask(H, W, query_block, memory_flange))


@pytest.mark.parametrize(("H", "W"), IMAGES)
@pytest.mark.parametrize("query_block", BLOCKS)
@pytest.mark.parametrize("memory_flange", FLANGES)
def test_image_2d_memory_block_contains_the_query_block(H, W, query_block, memory_flange):
    mask = image_transformer_pattern(H, W, query_block=query_block, memory_flange=memory_flange).to_mask()
    causal = image_transformer_pattern(H, W, query_block=query_block, memory_flange=memory_flange,
                                       causal=True).to_mask()
    h_q, w_q = query_block
    r, c = np.divmod(np.arange(H * W), W)
    same_block = (r[:, None] // h_q == r[None, :] // h_q) & (c[:, None] // w_q == c[None, :] // w_q)
    assert np.all(mask[same_block])
    assert np.all(causal <= mask) and np.all(np.diag(causal))


@pytest.mark.parametrize(("H", "W"), IMAGES)
@pytest.mark.parametrize("query_block", BLOCKS)
def test_image_2d_causal_keeps_generation_order(H, W, query_block):
    h_q, w_q = query_block
    r, c = np.divmod(np.arange(H * W), W)
    rank = np.lexsort((c, r, c // w_q, r // h_q)).argsort()       # position in block-raster order
    p = image_transformer_pattern(H, W, query_block=query_block, memory_flange=(2, 2), causal=True)
    assert np.all(rank[p.indices] <= rank[p.row_ids()])
    p = image_transformer_pattern(H, W, query_block=query_block, memory_flange=(2, 2), causal=True, order="raster")
    assert np.all(p.indices <= p.row_ids())                        # raster: j ≤ i in the row-major index


@pytest.mark.parametrize(("H", "W"), IMAGES)
def test_image_2d_one_block_is_full_attention(H, W):
    # exact limit: a query block as large as the image; causally, its in-block raster order is the
    # image's raster order, so the pattern is the causal mask
    assert image_transformer_pattern(H, W, query_block=(H, W), memory_flange=(3, 3)) == SparsePattern.full(H * W, H * W)
    causal = image_transformer_pattern(H, W, query_block=(H, W), memory_flange=(0, 0), causal=True)
    np.testing.assert_array_equal(causal.to_mask(), np.tril(np.ones((H * W, H * W), bool)))


@pytest.mark.parametrize(("H", "W"), IMAGES)
@pytest.mark.parametrize("h_q", [1, 2, 3])
@pytest.mark.parametrize("causal", [False, True])
def test_image_2d_full_width_blocks_without_flange_are_block_local(H, W, h_q, causal):
    # query blocks of whole rows are contiguous in raster order: the 1-D block-local pattern
    assert (image_transformer_pattern(H, W, query_block=(h_q, W), memory_flange=(0, 0), causal=causal)
            == block_local_pattern(H * W, h_q * W, causal=causal))


def test_image_2d_blocks_that_do_not_divide_the_image_are_clipped():
    # 5 × 5 image, 2 × 2 blocks, no flange: the corner (4, 4) is a 1 × 1 block, (4, 0) a 1 × 2 block
    p = image_transformer_pattern(5, 5, query_block=(2, 2), memory_flange=(0, 0))
    np.testing.assert_array_equal(p.row(4 * 5 + 4), [24])
    np.testing.assert_array_equal(p.row(4 * 5 + 0), [20, 21])
    np.testing.assert_array_equal(p.row(0), [0, 1, 5, 6])


@pytest.mark.parametrize("order", ["block-raster", "raster"])
def test_image_2d_causal_outputs_ignore_later_positions(rng, order):
    H, W, block = 5, 6, (2, 3)
    p = image_transformer_pattern(H, W, query_block=block, memory_flange=(1, 2), causal=True, order=order)
    r, c = np.divmod(np.arange(H * W), W)
    rank = (np.lexsort((c, r, c // block[1], r // block[0])).argsort() if order == "block-raster"
            else np.arange(H * W))
    q, k, v = random_qkv(rng, H * W)
    out = sparse_attention(q, k, v, p)
    for t in range(0, H * W, 7):
        later = rank > t
        k2, v2 = k.copy(), v.copy()
        k2[..., later, :] = rng.standard_normal(k2[..., later, :].shape)
        v2[..., later, :] = rng.standard_normal(v2[..., later, :].shape)
        out2 = sparse_attention(q, k2, v2, p)
        np.testing.assert_array_equal(out2[..., ~later, :], out[..., ~later, :])


@pytest.mark.parametrize("n", [1, 7, 12, 13])
@pytest.mark.parametrize(("l_q", "l_m"), [(1, 0), (1, 3), (3, 0), (3, 2), (4, 4), (5, 9)])
@pytest.mark.parametrize("mode", [dict(), dict(flange="both"), dict(causal=True), dict(causal=True, flange="both")],
                         ids=lambda d: ",".join(f"{a}={b}" for a, b in d.items()) or "default")
def test_image_1d_matches_double_loop(n, l_q, l_m, mode):
    after = l_m if mode.get("flange") == "both" else 0

    def keep(i, j):
        b = i // l_q
        return b * l_q - l_m <= j < (b + 1) * l_q + after and (j <= i or not mode.get("causal"))
    np.testing.assert_array_equal(image_transformer_1d_pattern(n, l_q, l_m, **mode).to_mask(), loop_mask(n, n, keep))


@pytest.mark.parametrize("n", [1, 7, 12, 13])
@pytest.mark.parametrize("causal", [False, True])
def test_image_1d_limits_are_block_local_and_band(n, causal):
    for l_q in (1, 3, 5):
        assert image_transformer_1d_pattern(n, l_q, 0, causal=causal) == block_local_pattern(n, l_q, causal=causal)
    for l_m in (0, 2, 20):
        assert image_transformer_1d_pattern(n, 1, l_m, causal=True) == band_pattern(n, l_m, causal=True)


# --- Axial attention -----------------------------------------------------------------------------

LAYOUTS = [(1, 1), (3, 4), (4, 3), (5, 5), (1, 6), (6, 1)]


@pytest.mark.parametrize(("H", "W"), LAYOUTS)
@pytest.mark.parametrize("axis", ["row", "column"])
@pytest.mark.parametrize("causal", [False, True])
def test_axial_matches_double_loop(H, W, axis, causal):
    def keep(i, j):
        (r, c), (rr, cc) = divmod(i, W), divmod(j, W)
        if axis == "row":
            return rr == r and (cc <= c or not causal)
        return cc == c and (rr <= r or not causal)
    np.testing.assert_array_equal(axial_pattern(H, W, axis=axis, causal=causal).to_mask(),
                                  loop_mask(H * W, H * W, keep))


@pytest.mark.parametrize(("H", "W"), LAYOUTS)
@pytest.mark.parametrize("causal", [False, True])
def test_axial_patterns_is_the_row_and_column_pair(H, W, causal):
    row, col = axial_patterns(H, W, causal=causal)
    assert row == axial_pattern(H, W, axis="row", causal=causal)
    assert col == axial_pattern(H, W, axis="column", causal=causal)
    counts = (W, H) if not causal else ((np.arange(H * W) % W) + 1, (np.arange(H * W) // W) + 1)
    np.testing.assert_array_equal(row.row_counts(), np.broadcast_to(counts[0], H * W))
    np.testing.assert_array_equal(col.row_counts(), np.broadcast_to(counts[1], H * W))
    if causal:                                                     # masked axial attention is raster-causal
        assert np.all(row.indices <= row.row_ids()) and np.all(col.indices <= col.row_ids())


@pytest.mark.parametrize("axis", ["row", "column"])
def test_axial_output_depends_only_on_its_row_or_column(rng, axis):
    H, W = 4, 5
    pattern = axial_pattern(H, W, axis=axis)
    q, k, v = random_qkv(rng, H * W)
    out = sparse_attention(q, k, v, pattern)
    r, c = np.divmod(np.arange(H * W), W)
    for line in range(H if axis == "row" else W):
        mine = (r if axis == "row" else c) == line
        k2, v2 = k.copy(), v.copy()
        k2[..., ~mine, :] = rng.standard_normal(k2[..., ~mine, :].shape)
        v2[..., ~mine, :] = np.nan                                 # not even NaN leaks in
        np.testing.assert_array_equal(sparse_attention(q, k2, v2, pattern)[..., mine, :], out[..., mine, :])
        np.testing.assert_array_equal(sparse_attention(q, k2, v2, pattern, method="csr")[..., mine, :],
                                      sparse_attention(q, k, v, pattern, method="csr")[..., mine, :])


@pytest.mark.parametrize(("H", "W"), [(2, 2), (3, 4), (4, 3), (5, 5)])
def test_two_axial_layers_reach_every_position(H, W):
    row, col = (p.to_mask().astype(int) for p in axial_patterns(H, W))
    assert not row.all() and not col.all()                         # one layer does not
    assert (col @ row > 0).all() and (row @ col > 0).all()         # row then column (or back) does


# --- all patterns: the CSR kernel equals the dense equation path ---------------------------------

PATTERNS = {
    "bpt": lambda: bp_transformer_pattern(13, 2),
    "bpt-k1-pow2": lambda: bp_transformer_pattern(16, 1),
    "bpt-causal": lambda: bp_transformer_pattern(11, 3, causal=True),
    "image2d": lambda: image_transformer_pattern(5, 7, query_block=(2, 3), memory_flange=(1, 2)),
    "image2d-both": lambda: image_transformer_pattern(5, 7, query_block=(2, 3), memory_flange=(1, 2), flange="both"),
    "image2d-causal": lambda: image_transformer_pattern(6, 5, query_block=(2, 2), memory_flange=(2, 1), causal=True),
    "image2d-raster": lambda: image_transformer_pattern(6, 5, query_block=(3, 2), memory_flange=(1, 1),
                                                        causal=True, order="raster"),
    "image1d": lambda: image_transformer_1d_pattern(17, 4, 3),
    "image1d-causal": lambda: image_transformer_1d_pattern(17, 4, 3, causal=True),
    "axial-row": lambda: axial_pattern(4, 6, axis="row"),
    "axial-column-causal": lambda: axial_pattern(4, 6, axis="column", causal=True),
}


@pytest.mark.parametrize("name", PATTERNS)
def test_csr_kernel_equals_equation_path(rng, name):
    pattern = PATTERNS[name]()
    q, k, v = random_qkv(rng, pattern.n, batch=(2, 3))
    out, A = sparse_attention(q, k, v, pattern, return_weights=True)
    out_csr, w_csr = sparse_attention(q, k, v, pattern, method="csr", return_weights=True)
    np.testing.assert_allclose(out_csr, out, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(pattern.to_dense(w_csr), A, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(A.sum(axis=-1), 1.0, rtol=1e-12)    # no pattern leaves a query without keys


# --- bad input -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: bp_tree_spans(0), ValueError, "n must be a positive int, got 0"),
    (lambda: bp_transformer_pattern(0, 1), ValueError, "n must be a positive int, got 0"),
    (lambda: bp_transformer_pattern(8, 0), ValueError, "k must be a positive int, got 0"),
    (lambda: bp_transformer_pattern(8, 1.5), ValueError, "k must be a positive int, got 1.5"),
    (lambda: bp_transformer_pattern(8, 2, causal="yes"), ValueError,
     r"causal must be one of \(False, True, 'top-left', 'bottom-right'\), got 'yes'"),
    (lambda: image_transformer_pattern(-1, 4), ValueError, "height must be a non-negative int, got -1"),
    (lambda: image_transformer_pattern(4, 0), ValueError, "width must be a positive int, got 0"),
    (lambda: image_transformer_pattern(4, -1), ValueError, "width must be a positive int, got -1"),
    (lambda: image_transformer_pattern(4, 4, query_block=3), TypeError, r"query_block must be a pair .* got 3"),
    (lambda: image_transformer_pattern(4, 4, query_block=(2, 0)), ValueError, r"query_block\[1\] must be a positive"),
    (lambda: image_transformer_pattern(4, 4, memory_flange=(-1, 0)), ValueError,
     r"memory_flange\[0\] must be a non-negative int, got -1"),
    (lambda: image_transformer_pattern(4, 4, flange="up"), ValueError, "flange must be one of"),
    (lambda: image_transformer_pattern(4, 4, causal=True, order="zigzag"), ValueError, "order must be one of"),
    (lambda: image_transformer_pattern(4, 4, causal=1), ValueError,
     r"causal must be one of \(False, True, 'top-left', 'bottom-right'\), got 1"),
    (lambda: image_transformer_1d_pattern(8, 0), ValueError, "query_block must be a positive int, got 0"),
    (lambda: image_transformer_1d_pattern(8, 2, -3), ValueError, "memory_length must be a non-negative int, got -3"),
    (lambda: axial_pattern(3, 4, axis="diagonal"), ValueError, "axis must be one of"),
    (lambda: axial_pattern(3, 4, axis=0), ValueError, "axis must be one of"),
    (lambda: axial_pattern(-1, 4, axis="row"), ValueError, "height must be a non-negative int, got -1"),
    (lambda: axial_pattern(4, 0, axis="row"), ValueError, "width must be a positive int, got 0"),
    (lambda: axial_patterns(3, 4, causal="no"), ValueError,
     r"causal must be one of \(False, True, 'top-left', 'bottom-right'\), got 'no'"),
])
def test_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


# --- lengths ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("causal", [False, True])
def test_an_image_of_no_row_is_an_empty_pattern(causal):
    for p in (image_transformer_pattern(0, 5, query_block=(2, 2), memory_flange=(1, 1), causal=causal),
              image_transformer_1d_pattern(0, 4, 2, causal=causal),
              axial_pattern(0, 5, axis="row", causal=causal), axial_pattern(0, 5, axis="column", causal=causal)):
        assert p.shape == (0, 0) and p.nnz == 0


def test_the_bp_registry_entry_maps_each_node_count_to_its_tree():
    from refattn.sparse.bp_transformer import _bp_tokens

    counts = {len(bp_tree_spans(t)): t for t in range(1, 200)}    # node count of the tree of t tokens
    for nodes in range(1, max(counts)):
        if nodes in counts:
            assert _bp_tokens(nodes) == counts[nodes]
        else:
            with pytest.raises(ValueError, match=rf"n={nodes} is no such count \(nearest: \d+ and \d+\)"):
                _bp_tokens(nodes)
    assert _bp_tokens(131071) == 65536                               # by bisection, not a scan of every tree


@pytest.mark.parametrize("causal", [False, True])
def test_axial_attention_is_row_then_column_attention_and_the_records_door(causal):
    rng = np.random.default_rng(4)
    q, k, v = rng.standard_normal((2, 12, 3)), rng.standard_normal((2, 12, 3)), rng.standard_normal((2, 12, 2))
    row, column = axial_patterns(3, 4, causal=causal)
    mid = sparse_attention(q, k, v, row, method="equation")
    expected = sparse_attention(q, k, mid, column, method="equation")
    out, A = axial_attention(q, k, v, width=4, causal=causal, method="equation", return_weights=True)
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_allclose(A @ v, out, rtol=1e-12, atol=1e-12)
    result = registry.get("axial").apply(q, k, v, width=4, causal=causal, return_weights=True)
    np.testing.assert_array_equal(result.output, out)
    assert not (A != 0)[~result.allowed].any()                     # weight only on the pairs reached
    assert result.allowed.all() == (not causal)                    # in two steps: all of them, or the past only
    with pytest.raises(ValueError, match="axial attention is self-attention over an image"):
        axial_attention(q, k, v, causal="bottom-right")
