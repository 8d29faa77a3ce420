"""Naive oracles: loops transcribed from the papers' sums, one scalar at a time, and ``NAIVE``, their table by id.

They share no code with refattn (no vectorised softmax, no pattern builder, no feature map, no scan), so
agreement with them is evidence, not tautology. Use them on small shapes only.

``NAIVE[id]`` is the naive twin of the registry's mechanism ``id``: ``fn(q, k, v, causal, **options)`` returns
the (n, d_v) output for one sequence, and each of its ``options`` makes one setting: the options passed to both
``apply`` and ``fn``, every random draw among them (random keys and blocks, ω, gates, β, projections), so that
the two sides see the same draw. ``causal="bottom-right"`` makes the n queries the last n of the m positions;
queries before the first key are zero rows.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from refattn import LayerNormParams, MultiHeadParams
from refattn.beyond import AFTConvFilter, AFTPositionBias, LongShortParams, ScaleOffset, SpatialGatingParams, XcitParams
from refattn.compressed import MemoryCompression, PoolingformerParams
from refattn.heads import CapsuleRoutingParams, CollaborativeParams, MultiQueryParams, TalkingHeadsParams
from refattn.lowrank import LowRankBandParams
from refattn.positional import DebertaParams, KerpleParams, RelativeEmbeddings, T5BiasParams, TransformerXLParams
from refattn.prior import (
    AttentionConv,
    CamtlParams,
    DenseSynthesizer,
    FactorizedDenseSynthesizer,
    FactorizedRandomSynthesizer,
    GaussianPriorParams,
    GaussianTransformerParams,
    RandomSynthesizer,
    StackProjections,
)
from refattn.sparse import SacPredictor, SortNetParams

# ------------------------------------------------------------------------------ softmax attention and masks


def naive_sdpa(q, k, v, allowed=None, bias=None, scale=None):
    """Per-query loop of Attention(Q, K, V)_i = Σ_j α_ij v_j, α_ij = e^{s_ij} / Σ_l e^{s_il}.

    q (n, d), k (m, d), v (m, d_v); ``allowed`` (n, m) bool, ``bias`` (n, m) float. A query with no
    allowed key gets a zero row (refattn's default ``fully_masked="zero"``). Returns (out, weights).
    """
    n, d = q.shape
    m, d_v = v.shape
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    out = np.zeros((n, d_v))
    weights = np.zeros((n, m))
    for i in range(n):
        scores = {}
        for j in range(m):
            if allowed is not None and not allowed[i, j]:
                continue
            s = sum(q[i, c] * k[j, c] for c in range(d)) * scale
            if bias is not None:
                s += bias[i, j]
            if s != -math.inf:
                scores[j] = s
        if not scores:
            continue
        top = max(scores.values())
        total = sum(math.exp(s - top) for s in scores.values())
        for j, s in scores.items():
            weights[i, j] = math.exp(s - top) / total
            for c in range(d_v):
                out[i, c] += weights[i, j] * v[j, c]
    return out, weights


def naive_causal_allowed(n, m, alignment="top-left"):
    """Python loop version of the causal mask: j <= i (+ m − n for bottom-right)."""
    delta = 0 if alignment == "top-left" else m - n
    return np.array([[j <= i + delta for j in range(m)] for i in range(n)], dtype=bool).reshape(n, m)


def loop_mask(n, m, keep):
    """The (n, m) mask {(i, j) : keep(i, j)} by a double Python loop."""
    return np.array([[bool(keep(i, j)) for j in range(m)] for i in range(n)], dtype=bool).reshape(n, m)


def causal_allowed(n, m, causal):
    """The pairs ``causal`` (False, True or "bottom-right") lets query i see, or None for all."""
    if causal is False:
        return None
    return naive_causal_allowed(n, m, "bottom-right" if causal == "bottom-right" else "top-left")


def both(a, b):
    """The pairs two optional masks both allow (None allows every pair)."""
    return b if a is None else a if b is None else a & b


def sdpa(q, k, v, causal, mask=None, scale=None):
    """Vaswani et al. Eq. 1 under the causal mask (§3.2.3) and a boolean mask."""
    return naive_sdpa(q, k, v, allowed=both(causal_allowed(len(q), len(k), causal), mask), scale=scale)[0]


def padding_mask(q, k, v, causal, key_lengths=None, scale=None):
    """Keys j ≥ ℓ are padding (Vaswani §3.2.3); refattn's demonstration default is ℓ = m − ⌊m/3⌋."""
    m = len(k)
    lengths = m - m // 3 if key_lengths is None else key_lengths
    padding = loop_mask(len(q), m, lambda i, j: j < lengths)
    return naive_sdpa(q, k, v, allowed=both(causal_allowed(len(q), m, causal), padding), scale=scale)[0]


def random_params(rng, d_model, num_heads, d_k, d_v=None):
    """Parameters with random, non-zero weights *and* biases (init gives zero biases)."""
    d_v = d_k if d_v is None else d_v
    h = num_heads
    return MultiHeadParams(
        w_q=rng.standard_normal((d_model, h * d_k)) / np.sqrt(d_model),
        w_k=rng.standard_normal((d_model, h * d_k)) / np.sqrt(d_model),
        w_v=rng.standard_normal((d_model, h * d_v)) / np.sqrt(d_model),
        w_o=rng.standard_normal((h * d_v, d_model)) / np.sqrt(h * d_v),
        b_q=rng.standard_normal(h * d_k),
        b_k=rng.standard_normal(h * d_k),
        b_v=rng.standard_normal(h * d_v),
        b_o=rng.standard_normal(d_model),
    )


def per_head_loop(x_q, x_kv, params, num_heads, x_v=None, allowed=None):
    """MultiHead(Q, K, V) for one sequence (no batch dims), head by head with naive_sdpa.

    W_iᵠ = w_q[:, i·d_k:(i+1)·d_k] etc.; heads concatenated, then Wᴼ, then bᴼ. Returns
    (out (n, d_model), weights (h, n, m), heads list).
    """
    x_v = x_kv if x_v is None else x_v
    d_k = params.w_q.shape[1] // num_heads
    d_v = params.w_v.shape[1] // num_heads
    heads, weights = [], []
    for i in range(num_heads):
        qs = ks = slice(i * d_k, (i + 1) * d_k)
        vs = slice(i * d_v, (i + 1) * d_v)
        Q_i = x_q @ params.w_q[:, qs] + params.b_q[qs]
        K_i = x_kv @ params.w_k[:, ks] + params.b_k[ks]
        V_i = x_v @ params.w_v[:, vs] + params.b_v[vs]
        head, A = naive_sdpa(Q_i, K_i, V_i, allowed=allowed)
        heads.append(head)
        weights.append(A)
    out = np.concatenate(heads, axis=-1) @ params.w_o + params.b_o
    return out, np.stack(weights), heads


def multi_head(q, k, v, causal, params, num_heads=2, mask=None):
    """Vaswani §3.2.2: Concat(head_1, …, head_h) Wᴼ, head_i = Attention(Q W_iᵠ, K W_iᴷ, V W_iⱽ)."""
    allowed = both(causal_allowed(len(q), len(k), causal), mask)
    return per_head_loop(q, k, params, num_heads, x_v=v, allowed=allowed)[0]


# ------------------------------------------------------------------------------ sparse patterns (survey §4.1)
# keep(i, j, n, m, causal, **options): does query i see key j, by the paper's definition of the set? causal is
# a bool here; pattern() turns "bottom-right" into row i + m − n of the m × m causal pattern. The keyword
# defaults are the small demonstration defaults of each record's apply.


def global_keep(i, j, n, m, causal, global_indices=(0,)):
    """Longformer §3.1, BigBird §2: a global token attends to every token and every token to it."""
    return (i in global_indices or j in global_indices) and (not causal or j <= i)


def band_keep(i, j, n, m, causal, window=2):
    """Longformer §3.1 sliding window: |i − j| ≤ w (causal: 0 ≤ i − j ≤ w), w = window."""
    return abs(i - j) <= window and (not causal or j <= i)


def dilated_keep(i, j, n, m, causal, window=2, dilation=2):
    """Longformer §3.1 dilated window: w = window keys each side, ``dilation`` apart: |i − j| ≤ w·d, d | i − j."""
    return abs(i - j) <= window * dilation and (i - j) % dilation == 0 and (not causal or j <= i)


def strided_keep(i, j, n, m, causal, stride=3):
    """Child et al. §4.2, A⁽²⁾: every ``stride``-th key, (i − j) mod l = 0."""
    return (i - j) % stride == 0 and (not causal or j <= i)


def random_keep(i, j, n, m, causal, keys):
    """BigBird §2: query i attends to its drawn keys ``keys[i]``."""
    return j in keys[i] and (not causal or j <= i)


def block_local_keep(i, j, n, m, causal, block=3):
    """Survey §4.1.1 (Image Transformer 1-D blocks): the keys of the query's own block, ⌊i/b⌋ = ⌊j/b⌋."""
    return i // block == j // block and (not causal or j <= i)


def star_keep(i, j, n, m, causal, ring=True):
    """Guo et al. §3.1: satellites 0 … n − 2 read h_{i−1}, h_i, h_{i+1} (a ring) and the relay n − 1; the
    relay reads everything."""
    relay, s = n - 1, n - 1
    if i == relay or j == relay or i == j:
        return True
    return (i - j) % s in (1, s - 1) if ring else abs(i - j) == 1


def longformer_keep(i, j, n, m, causal, window=4, dilation=1, global_indices=(0,)):
    """Longformer §3.1: w/2 keys each side of i, ``dilation`` apart, plus symmetric global attention."""
    in_window = abs(i - j) <= window // 2 * dilation and (i - j) % dilation == 0
    return (in_window or i in global_indices or j in global_indices) and (not causal or j <= i)


def etc_keep(i, j, n, m, causal, num_global=2, window=1, segment_ids=None, hard_g2l=False, hard_l2g=False):
    """Ainslie et al. §3.2 on [global; long]: g2g, g2l, l2g full (§3.4 hard masks: a global token and the
    long tokens of its segment only), l2l within the radius."""
    g = num_global
    if i < g and j < g:
        return True                                                  # g2g
    if i < g:
        return segment_ids[j - g] == i if hard_g2l else True           # g2l
    if j < g:
        return segment_ids[i - g] == j if hard_l2g else True           # l2g
    return abs(i - j) <= window                                      # l2l


def _bigbird_global(I, nb, g):
    """ITC global blocks: the first ⌈g/2⌉ and the last ⌊g/2⌋ (g = 2: the first and the last)."""
    return I < (g + 1) // 2 or I >= nb - g // 2


def bigbird_keep(i, j, n, m, causal, block_size=2, num_random_blocks=1, num_global_blocks=2,
                 num_window_blocks=3, random_blocks=None):
    """Zaheer et al. §2, App. D: block I sees the window |I − J| ≤ (w_b − 1)/2, the global blocks, its random
    blocks R_I; global blocks see everything."""
    b, nb = block_size, n // block_size
    I, J = i // b, j // b
    return (_bigbird_global(I, nb, num_global_blocks) or _bigbird_global(J, nb, num_global_blocks)
            or abs(I - J) <= (num_window_blocks - 1) // 2 or (random_blocks is not None and J in random_blocks[I]))


def sparse_transformer_keep(i, j, n, m, causal, stride=3, kind="strided", c=1, part=None, local_window="paper",
                            subblock=0):
    """Child et al. §4.2–4.3: strided A⁽¹⁾ = {i − l, …, i} (the official code: l − 1 back), A⁽²⁾ every l-th key;
    fixed A⁽¹⁾ the query's block of l, A⁽²⁾ the c summary keys per block (head ``subblock`` from the end)."""
    l = stride
    if kind == "strided":
        a1 = abs(i - j) <= (l if local_window == "paper" else l - 1)
        a2 = (i - j) % l == 0
    else:
        a1 = i // l == j // l
        a2 = l - (subblock + 1) * c <= j % l < l - subblock * c
    return {None: a1 or a2, 1: a1, 2: a2}[part] and (not causal or j <= i)


def bp_nodes(n):
    """Ye et al. §3.1: the binary partition of n tokens, node (level, first token, one past the last).

    Tokens first, then each level's spans left to right, level l halving level l − 1 (a lone last node
    keeps its single child's span), the root last."""
    nodes = [(0, t, t + 1) for t in range(n)]
    level, count = 0, n
    while count > 1:
        level, count = level + 1, (count + 1) // 2
        nodes += [(level, p * 2**level, min((p + 1) * 2**level, n)) for p in range(count)]
    return nodes


def bp_token_reads(t, n, k):
    """The nodes (level, first token) token t reads (Ye et al. §3.1): itself, and on each side k nodes per
    level, finest next to t, tiling that side once (a level-l step that does not start on a multiple of 2^l
    takes the level-(l − 1) node first)."""
    reads = {(0, t)}
    start = t + 1                                                    # right: tile [t + 1, n) left to right
    for level in range(n.bit_length() + 1):
        for _ in range(k):
            if start < n:
                size = 2**level if start % 2**level == 0 else 2 ** (level - 1)
                reads.add((size.bit_length() - 1, start))
                start += size
    end = t                                                          # left: tile [0, t) right to left
    for level in range(n.bit_length() + 1):
        for _ in range(k):
            if end > 0:
                size = 2**level if end % 2**level == 0 else 2 ** (level - 1)
                reads.add((size.bit_length() - 1, end - size))
                end -= size
    return reads


def bp_keep(i, j, n, m, causal, nodes_per_level=1):
    """BP-Transformer over the nodes of ``bp_nodes`` (n of them): a token reads ``bp_token_reads``
    (contextual edges), a span node its own tokens (affiliated edges)."""
    tokens = next(t for t in range(1, n + 1) if len(bp_nodes(t)) == n)
    nodes = bp_nodes(tokens)
    (level_i, first_i, stop_i), (level_j, first_j, _) = nodes[i], nodes[j]
    if level_i > 0:
        return level_j == 0 and first_i <= first_j < stop_i
    return (level_j, first_j) in bp_token_reads(first_i, tokens, nodes_per_level)


def image_width(n):
    """The most square image of n positions: the widest divisor of n with width² ≤ n."""
    return max(w for w in range(1, n + 1) if n % w == 0 and w * w <= n)


def image_transformer_keep(i, j, n, m, causal, width=None, query_block=(2, 2), memory_flange=(1, 1), order="raster",
                           flange="past"):
    """Parmar et al. §3.3 2-D local attention, raster-scanned: the query block of (r, c) plus h_m rows above and
    w_m columns either side ("both": h_m rows below too); causal in raster or block-raster generation order."""
    W = image_width(n) if width is None else width
    (r, c), (rj, cj) = divmod(i, W), divmod(j, W)
    (h_q, w_q), (h_m, w_m) = query_block, memory_flange
    a, b = r // h_q, c // w_q
    below = h_m if flange == "both" else 0
    in_memory = a * h_q - h_m <= rj < (a + 1) * h_q + below and b * w_q - w_m <= cj < (b + 1) * w_q + w_m
    if not causal:
        return in_memory
    if order == "raster":
        return in_memory and j <= i
    return in_memory and (rj // h_q, cj // w_q, rj, cj) <= (a, b, r, c)   # blocks in raster order, then in-block


def pattern(keep):
    """Sparse attention (survey §4.1, Eq. 9): naive_sdpa over {(i, j) : keep}; bottom-right query i is
    position i + m − n of the causal m × m pattern (none before the first key)."""
    def fn(q, k, v, causal, **options):
        n, m = len(q), len(k)
        if causal == "bottom-right":
            shift = m - n
            allowed = loop_mask(n, m, lambda i, j: i + shift >= 0 and keep(i + shift, j, m, m, True, **options))
        else:
            allowed = loop_mask(n, m, lambda i, j: keep(i, j, n, m, causal is not False, **options))
        return naive_sdpa(q, k, v, allowed=allowed)[0]

    fn.__doc__ = keep.__doc__
    return fn


def axial(q, k, v, causal, width=None):
    """Ho et al. §3: attention along the row (c' ≤ c if masked), then along the column (r' ≤ r) over its output."""
    n = len(q)
    W = image_width(n) if width is None else width
    row = loop_mask(n, n, lambda i, j: j // W == i // W and (causal is False or j <= i))
    column = loop_mask(n, n, lambda i, j: j % W == i % W and (causal is False or j <= i))
    return naive_sdpa(q, k, naive_sdpa(q, k, v, allowed=row)[0], allowed=column)[0]


def naive_direction(x):
    """x / ‖x‖ as a list (a zero vector stays 0), or None for a vector with a NaN or Inf component."""
    if not all(math.isfinite(t) for t in x):
        return None
    norm = math.sqrt(sum(t * t for t in x))
    return [t / norm if norm > 0 else 0.0 for t in x]


def naive_centroid_distances(x, centroids):
    """Roy et al. §4.1: ‖x̂_t − μ_c‖² for every token t and centroid c (None for a token without a direction)."""
    distances = []
    for row in x:
        u = naive_direction(list(row))
        distances.append(None if u is None else [sum((u[a] - mu[a]) ** 2 for a in range(len(u))) for mu in centroids])
    return distances


def naive_routing_groups(q, k, centroids, balanced):
    """The clusters as (queries, keys) sets: every token to its nearest centroid (ties to the lower index), or,
    balanced, each centroid's ⌈L/k⌉ nearest tokens (ties to the earlier position)."""
    C = len(centroids)
    dq, dk = naive_centroid_distances(q, centroids), naive_centroid_distances(k, centroids)
    if not balanced:
        def nearest(dist):
            return [None if dt is None else min(range(C), key=lambda c, dt=dt: (dt[c], c)) for dt in dist]
        cq, ck = nearest(dq), nearest(dk)
        return [({i for i in range(len(q)) if cq[i] == c}, {j for j in range(len(k)) if ck[j] == c}) for c in range(C)]

    def window(dist, c):
        w = -(-len(dist) // C)
        ranked = sorted((t for t in range(len(dist)) if dist[t] is not None), key=lambda t: (dist[t][c], t))
        return set(ranked[:w])

    return [(window(dq, c), window(dk, c)) for c in range(C)]


def routing(q, k, v, causal, centroids, balanced=False):
    """Routing attention (Roy et al. 2021, §4.1): per cluster, softmax over its keys (causal: j ≤ i by position);
    a query averages the outputs of the clusters where it sees a key, and is a zero row where it sees none."""
    n, m = len(q), len(k)
    out, count = np.zeros((n, v.shape[1])), [0] * n
    for Q_c, K_c in naive_routing_groups(q, k, centroids, balanced):
        allowed = both(loop_mask(n, m, lambda i, j, Q_c=Q_c, K_c=K_c: i in Q_c and j in K_c),
                       causal_allowed(n, m, causal))
        o = naive_sdpa(q, k, v, allowed=allowed)[0]
        for i in range(n):
            if any(allowed[i]):
                out[i] += o[i]
                count[i] += 1
    for i in range(n):
        if count[i]:
            out[i] /= count[i]
    return out


def naive_update_centroids(centroids, q, k, decay):
    """Roy et al. §4.1: μ_c ← λμ_c + (1 − λ)/2 (Σ_{i : c(q_i) = c} q̂_i + Σ_{j : c(k_j) = c} k̂_j), by loops."""
    C, d = len(centroids), len(centroids[0])
    new = [[decay * centroids[c][a] for a in range(d)] for c in range(C)]
    for x in (q, k):
        for row, dist in zip(x, naive_centroid_distances(x, centroids), strict=True):
            if dist is None:
                continue
            c = min(range(C), key=lambda s, dist=dist: (dist[s], s))
            u = naive_direction(list(row))
            for a in range(d):
                new[c][a] += (1.0 - decay) / 2.0 * u[a]
    return np.array(new)


def lsh_bucket(x, rotation):
    """Kitaev et al. §2: h(x) = argmax([xR; −xR]), the first largest of the b signed projections (0 for b = 1)."""
    projections = [sum(x[c] * rotation[c][t] for c in range(len(x))) for t in range(rotation.shape[1])]
    signed = projections + [-p for p in projections]
    best = 0
    for t in range(len(signed)):
        if signed[t] > signed[best]:
            best = t
    return best


def lsh_rounds(q, causal, rotations, chunk_length=None, attend_across_buckets=False, wrap=False, num_buckets=None):
    """Kitaev et al. §2, the pairs: keys k_j = q_j/‖q_j‖; per round the bucket h(k_j) (with factors f_1, f_2, …
    of num_buckets, trax's hierarchical hash: h = h_1 + f_1·h_2 + …, h_i from the next f_i/2 columns), the
    order by (bucket, position), chunks of c = ⌈2n/b⌉ tokens, and ``in_round(r, i, j)``: j in i's bucket (any
    bucket, across buckets), in i's chunk or the one before (before the first: the last, with wrap), j ≤ i if
    causal. Returns (unit keys, in_round, number of rounds)."""
    n, d = q.shape
    columns = rotations.shape[-1]
    factors = ([2 * columns] if columns else []) if num_buckets is None else \
        list(num_buckets) if isinstance(num_buckets, tuple) else ([num_buckets] if num_buckets > 1 else [])
    rounds, b = len(rotations), math.prod(factors)
    c = chunk_length if chunk_length is not None else max(1, math.ceil(2 * n / b))
    unit = []
    for j in range(n):
        norm = math.sqrt(sum(q[j][t] ** 2 for t in range(d)))
        unit.append([q[j][t] / norm if norm else 0.0 for t in range(d)])
    bucket, chunk = [], []
    for r in range(rounds):
        bucket.append([0] * n)
        first, offset = 0, 1
        for f in factors:
            for j in range(n):
                bucket[r][j] += offset * lsh_bucket(unit[j], rotations[r][:, first:first + f // 2])
            first, offset = first + f // 2, offset * f
        order = sorted(range(n), key=lambda j, r=r: (bucket[r][j], j))
        chunk.append({j: s // c for s, j in enumerate(order)})
    last = (n - 1) // c

    def in_round(r, i, j):
        ci, cj = chunk[r][i], chunk[r][j]
        near = cj in (ci, ci - 1) or (wrap and ci == 0 and cj == last)
        return near and (attend_across_buckets or bucket[r][i] == bucket[r][j]) and (not causal or j <= i)

    return unit, in_round, rounds


def lsh_union(n, in_round, rounds, i):
    """U_i: the keys some round pairs with i, without i unless nothing else is left (§2, "Causal masking")."""
    union = {j for r in range(rounds) for j in range(n) if in_round(r, i, j)}
    return union - {i} or {i}


def reformer_lsh(q, k, v, causal, rotations, chunk_length=None, attend_across_buckets=False,
                 allow_duplicate_attention=False, wrap=False, scale=None, num_buckets=None):
    """Kitaev et al. §2 token by token over the pairs of ``lsh_rounds``: per round a softmax of s_ij − log N_ij
    (N_ij: the rounds holding the pair; not subtracted if duplicates are allowed) and its log-sum-exp z_r, the
    rounds weighted by exp(z_r − log Σ_r exp z_r) ("Multi-round LSH attention"). ``k`` is q (shared QK)."""
    n, d = q.shape
    unit, in_round, rounds = lsh_rounds(q, causal, rotations, chunk_length, attend_across_buckets, wrap, num_buckets)
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    out = np.zeros((n, v.shape[1]))
    for i in range(n):
        keep = lsh_union(n, in_round, rounds, i)
        parts = []
        for r in range(rounds):
            s = {}
            for j in keep:
                if in_round(r, i, j):
                    s[j] = scale * sum(q[i][t] * unit[j][t] for t in range(d))
                    if not allow_duplicate_attention:
                        s[j] -= math.log(sum(in_round(r2, i, j) for r2 in range(rounds)))
            if s:
                top = max(s.values())
                z = top + math.log(sum(math.exp(x - top) for x in s.values()))
                parts.append((z, [sum(math.exp(s[j] - z) * v[j][t] for j in s) for t in range(v.shape[1])]))
        top = max(z for z, _ in parts)
        Z = top + math.log(sum(math.exp(z - top) for z, _ in parts))
        for z, o in parts:
            for t in range(len(o)):
                out[i][t] += math.exp(z - Z) * o[t]
    return out


# ------------------------------------------------------------------------------ linearised attention (survey §4.2)


def elu_plus_one(x):
    """Katharopoulos et al. §3.2.1: φ(x) = elu(x) + 1, component by component."""
    return [t + 1.0 if t > 0 else math.exp(t) for t in x]


def naive_linear(q, k, v, phi, allowed=None):
    """V'_i = Σ_j sim_ij v_j / Σ_j sim_ij with sim_ij = φ(q_i)·φ(k_j), by Python loops (Katharopoulos Eq. 2)."""
    n, m = len(q), len(k)
    out = np.zeros((n, v.shape[1]))
    for i in range(n):
        pq = phi(q[i])
        sims = {j: float(sum(a * b for a, b in zip(pq, phi(k[j]), strict=True)))
                for j in range(m) if allowed is None or allowed[i, j]}
        total = sum(sims.values())
        for j, s in sims.items():
            out[i] += s / total * v[j]
    return out


def linear_elu(q, k, v, causal):
    """Katharopoulos et al. Eq. 2 with φ = elu + 1 (causal: Eq. 8, j ≤ i)."""
    return naive_linear(q, k, v, elu_plus_one, causal_allowed(len(q), len(k), causal))


def naive_efficient(q, k, v):
    """out_i = Σ_c ρ_q(Q)_ic Σ_j ρ_k(K)_jc v_j, softmaxes written out with math.exp (Shen et al., §3)."""
    n, d = q.shape
    m = k.shape[0]
    rho_q = [[math.exp(q[i, c]) / sum(math.exp(q[i, e]) for e in range(d)) for c in range(d)] for i in range(n)]
    rho_k = [[math.exp(k[j, c]) / sum(math.exp(k[l, c]) for l in range(m)) for c in range(d)] for j in range(m)]
    out = np.zeros((n, v.shape[1]))
    A = np.zeros((n, m))
    for i in range(n):
        for j in range(m):
            A[i, j] = sum(rho_q[i][c] * rho_k[j][c] for c in range(d))
            out[i] += A[i, j] * v[j]
    return out, A


def performer(kind):
    """Choromanski et al. Eq. 4 with the FAVOR features of Lemma 1 / §2.3 (Eq. 5), r = len(omega) projections:

        positive  φ(x) = e^{−‖x‖²/2}/√r · [e^{ω_1·x}, …, e^{ω_r·x}]
        trig      φ(x) = e^{+‖x‖²/2}/√r · [sin ω_1·x, …, sin ω_r·x, cos ω_1·x, …, cos ω_r·x]

    applied to q/d^{1/4} and k/d^{1/4}, as refattn's performer_attention says it does (Q' = φ(Q/d^{1/4}),
    K' = φ(K/d^{1/4})), so that φ(q̃)·φ(k̃) estimates exp(q·k/√d), the softmax score; then the naive
    linear-attention loop.
    """
    def fn(q, k, v, causal, omega):
        d, r = q.shape[1], len(omega)

        def phi(x):
            x = [t / d**0.25 for t in x]
            half_sq = sum(t * t for t in x) / 2
            u = [sum(w[c] * x[c] for c in range(d)) for w in omega]                   # ω_i·x
            if kind == "positive":
                return [math.exp(u_i - half_sq) / math.sqrt(r) for u_i in u]
            return [math.exp(half_sq) * f(u_i) / math.sqrt(r) for f in (math.sin, math.cos) for u_i in u]

        return naive_linear(q, k, v, phi, causal_allowed(len(q), len(k), causal))

    return fn


def naive_rfa(q, k, v, g, phi, coupled=True):
    """Peng et al. Eq. 7 step by step for one sequence: S_t = g_t S_{t−1} + (1 − g_t) φ(k_t) ⊗ v_t, ...

    The n queries read after the last n of the m = len(k) steps (n = m: query t after step t; bottom-right
    otherwise, and queries before the first step are zero rows).
    """
    n, m, d_v = len(q), len(k), v.shape[1]
    F = len(phi(k[0]))
    S = [[0.0] * d_v for _ in range(F)]
    z = [0.0] * F
    out = np.zeros((n, d_v))
    for t in range(m):
        pk = phi(k[t])
        w = 1.0 - g[t] if coupled else 1.0
        for f in range(F):
            z[f] = g[t] * z[f] + w * pk[f]
            for c in range(d_v):
                S[f][c] = g[t] * S[f][c] + w * pk[f] * v[t, c]
        i = t - (m - n)                                              # the query that reads after step t
        if i < 0:
            continue
        pq = phi(q[i])
        den = sum(pq[f] * z[f] for f in range(F))
        for c in range(d_v):
            out[i, c] = sum(pq[f] * S[f][c] for f in range(F)) / den
    return out


def naive_rfa_weights(q, k, g, phi):
    """A_ij = c_ij φ(q_i)·φ(k_j) / Σ_l c_il φ(q_i)·φ(k_l), c_ij = (1 − g_j) Π_{l=j+1..i} g_l, by explicit products."""
    n = len(q)
    A = np.zeros((n, n))
    for i in range(n):
        row = []
        for j in range(i + 1):
            c = 1.0 - g[j]
            for l in range(j + 1, i + 1):
                c *= g[l]
            row.append(c * float(phi(q[i]) @ phi(k[j])))
        A[i, : i + 1] = np.array(row) / sum(row)
    return A


def rfa(q, k, v, causal, gates, gate_form="paper"):
    """Peng et al. Eq. 7 with φ = elu + 1 (refattn's default map); "decay": S_t = g_t S_{t−1} + φ(k_t) ⊗ v_t."""
    return naive_rfa(q, k, v, gates, elu_plus_one, coupled=gate_form == "paper")


def naive_delta(q, k, v, beta, phi, normalize=True):
    """Schlag et al. §4.2 step by step for one sequence, W as a list of rows (d_v × F).

    The n queries read after the last n of the m = len(k) steps, as in :func:`naive_rfa`.
    """
    def feat(x):
        f = phi(x)
        return [t / sum(f) for t in f] if normalize else f

    n, m, d_v = len(q), len(k), v.shape[1]
    F = len(feat(k[0]))
    W = [[0.0] * F for _ in range(d_v)]
    out = np.zeros((n, d_v))
    for t in range(m):
        pk = feat(k[t])
        v_bar = [sum(W[c][f] * pk[f] for f in range(F)) for c in range(d_v)]        # v̄ = W φ(k)
        for c in range(d_v):
            for f in range(F):
                W[c][f] += beta[t] * (v[t, c] - v_bar[c]) * pk[f]                  # W += β(v − v̄) ⊗ φ(k)
        i = t - (m - n)
        if i < 0:
            continue
        pq = feat(q[i])
        for c in range(d_v):
            out[i, c] = sum(W[c][f] * pq[f] for f in range(F))                     # y = W φ(q)
    return out


def delta_rule(q, k, v, causal, beta, normalize=True):
    """Schlag et al. §4.2 with φ = elu + 1 normalised by its sum (refattn's default map)."""
    return naive_delta(q, k, v, beta, elu_plus_one, normalize)


# ------------------------------------------------------------------------------ content-based sparse attention (§4.1.2)


def naive_sac(q, k, v, causal, predictor, r=2):
    """Li et al. (2020): the edges are the r keys of largest score q_i W k_j for each query (ties: the smaller j;
    causal: among the keys it may see), then softmax attention over each query's edges (Eq. 9 of the survey)."""
    n, d = q.shape
    m = len(k)
    offset = m - n if causal == "bottom-right" else 0
    edges = np.zeros((n, m), dtype=bool)
    for i in range(n):
        candidates = [j for j in range(m) if causal is False or j <= i + offset]
        score = {j: sum(q[i, a] * predictor.w[a, c] * k[j, c] for a in range(d) for c in range(d)) for j in candidates}
        for j in sorted(candidates, key=lambda j: (-score[j], j))[:r]:
            edges[i, j] = True
    return naive_sdpa(q, k, v, allowed=edges)[0]


def naive_sinkhorn(q, k, v, causal, sort_net, gumbel, block_size=None, temperature=0.75, iterations=7,
                   sortcut=None):
    """Tay et al. (2020) §3 one scalar at a time, for one sequence.

    Blocks of b keys (default: the smallest divisor of m with b² ≥ m); block sums x'_I (causal: the running sum up
    to each block's first token); the sorting network R_IJ = relu(Σ_a relu(Σ_c x'_Ic W_P[c, a] + b_P[a]) W_B[a, J]
    + b_B[J]); S = exp((R + ε)/τ) on the pairs J < I when causal (else all), then k rounds of dividing each row by
    its sum and each column by its sum (not in the log domain); sorted blocks K̃_I = Σ_J S_IJ K_J; and one softmax
    per query over the sorted block and its own block (causal: its own keys up to itself, and block 0 has no sorted
    block), or over the first c sorted blocks (SortCut).
    """
    n, d = q.shape
    m, d_v = v.shape
    b = block_size or next((c for c in range(1, m + 1) if m % c == 0 and c * c >= m), 1)
    N = m // b
    w_p, b_p, w_b, b_b = sort_net.w_p, sort_net.b_p, sort_net.w_b, sort_net.b_b
    eps = np.broadcast_to(gumbel, (N, N))
    x = [[sum(k[j, c] for j in (range(I * b + 1) if causal else range(I * b, I * b + b))) for c in range(d)]
         for I in range(N)]
    S = [[0.0] * N for _ in range(N)]
    for I in range(N):
        hidden = [max(0.0, sum(x[I][c] * w_p[c, a] for c in range(d)) + b_p[a]) for a in range(len(b_p))]
        for J in range(N):
            if causal and J >= I:
                continue
            R = max(0.0, sum(hidden[a] * w_b[a, J] for a in range(len(b_p))) + b_b[J])
            S[I][J] = math.exp((R + eps[I, J]) / temperature)
    for _ in range(iterations):
        for I in range(N):
            total = sum(S[I])
            S[I] = [s / total for s in S[I]] if total else S[I]
        for J in range(N):
            total = sum(S[I][J] for I in range(N))
            for I in range(N):
                S[I][J] = S[I][J] / total if total else S[I][J]
    sorted_k = [[[sum(S[I][J] * k[J * b + s, c] for J in range(N)) for c in range(d)] for s in range(b)]
                for I in range(N)]
    sorted_v = [[[sum(S[I][J] * v[J * b + s, c] for J in range(N)) for c in range(d_v)] for s in range(b)]
                for I in range(N)]
    out = np.zeros((n, d_v))
    for i in range(n):
        p = i + (m - n if causal == "bottom-right" else 0)           # the query's position among the m
        if p < 0:
            continue
        I, t = divmod(p, b)
        if sortcut:
            seen = [(sorted_k[J][s], sorted_v[J][s]) for J in range(sortcut) for s in range(b)]
        else:
            seen = [(sorted_k[I][s], sorted_v[I][s]) for s in range(b)] if not causal or I > 0 else []
            seen += [(k[I * b + s], v[I * b + s]) for s in range(b) if not causal or s <= t]
        scores = [sum(q[i, c] * key[c] for c in range(d)) / math.sqrt(d) for key, _ in seen]
        top = max(scores)
        weights = [math.exp(s - top) for s in scores]
        for w, (_, value) in zip(weights, seen, strict=True):
            for c in range(d_v):
                out[i, c] += w / sum(weights) * value[c]
    return out


# ------------------------------------------------------------------------------ query prototypes (survey §4.3)


def naive_informer(q, k, v, causal, sampled_keys, factor=1, num_top=None, counts="paper", measure="paper",
                   lazy="paper", sample_from="all"):
    """Zhou et al. §3.2 and Algorithm 1 for one sequence, with the sample K given: for each query, the max minus
    the mean of its sampled scores (or the sum over m, the official code's); the u largest attend (softmax over
    j <= i if causal), ties to the lower position; the others output the mean of the values they may see (or,
    causal "official", their sum). u = ⌈c ln n⌉, or c⌈ln n⌉ ("official"), or c⌈ln m⌉ (the first release).
    ``sample_from`` says where the given sample was drawn from, and changes nothing here."""
    n, d = q.shape
    m, d_v = v.shape
    scale = 1.0 / math.sqrt(d)
    if num_top is not None:
        u = num_top
    elif counts == "paper":
        u = min(n, math.ceil(factor * math.log(n)))
    else:
        u = min(n, factor * math.ceil(math.log(n if counts == "official" else m)))
    M = []
    for i in range(n):
        s = [sum(q[i, c] * k[j, c] for c in range(d)) * scale for j in sampled_keys[i]]
        M.append(max(s) - sum(s) / (len(s) if measure == "paper" else m))
    active = sorted(range(n), key=lambda i: (-M[i], i))[:u]
    out = np.zeros((n, d_v))
    for i in range(n):
        seen = [j for j in range(m) if not causal or j <= i]
        if i in active:
            allowed = np.array([[j in seen for j in range(m)]])
            out[i] = naive_sdpa(q[i:i + 1], k, v, allowed=allowed)[0][0]
            continue
        count = 1 if causal and lazy == "official" else len(seen)
        for c in range(d_v):
            out[i, c] = sum(v[j, c] for j in seen) / count
    return out


# ------------------------------------------------------------------------------ clustered attention (Vyas et al.)


def naive_hash(x, planes):
    """The B-bit code of one query: bit b is [a_b·x > t_b], row b of ``planes`` being (a_b, t_b)."""
    d = len(x)
    return tuple(sum(planes[b][c] * x[c] for c in range(d)) > planes[b][d] for b in range(len(planes)))


def naive_hamming_kmeans(hashes, initial, iterations):
    """Lloyd's iterations on bit tuples, from the codes of the queries ``initial``: each code goes to the nearest
    centroid by Hamming distance (the first on a tie), each centroid bit becomes its members' majority (0 on an
    even split; a cluster without members keeps its code); ``iterations`` assignments in all."""
    centroids = [hashes[i] for i in initial]

    def assign():
        clusters = []
        for h in hashes:
            best, best_distance = -1, math.inf
            for j, c in enumerate(centroids):
                distance = sum(1 for a, b in zip(h, c, strict=True) if a != b)
                if distance < best_distance:
                    best, best_distance = j, distance
            clusters.append(best)
        return clusters

    for _ in range(iterations - 1):
        clusters = assign()
        for j in range(len(centroids)):
            members = [h for h, c in zip(hashes, clusters, strict=True) if c == j]
            if members:
                ones = [sum(1 for h in members if h[b]) for b in range(len(centroids[j]))]
                centroids[j] = tuple(ones[b] > len(members) - ones[b] for b in range(len(centroids[j])))
    return assign()


def _naive_clusters(q, planes, initial, assignment, iterations):
    """Each query's cluster: the explicit ``assignment``, else hash and Hamming K-means."""
    if assignment is not None:
        return [int(c) for c in assignment]
    return naive_hamming_kmeans([naive_hash(x, planes) for x in q], [int(i) for i in initial], iterations)


def _naive_centroid(q, k, members, scale):
    """Scores and softmax weights of one cluster's centroid Q^c_j = Σ_{i ∈ j} Q_i / |j| over every key."""
    d, m = q.shape[1], k.shape[0]
    centroid = [sum(q[i, c] for i in members) / len(members) for c in range(d)]
    scores = [sum(centroid[c] * k[l, c] for c in range(d)) * scale for l in range(m)]
    top = max(scores, default=0.0)
    e = [math.exp(s - top) for s in scores]
    return scores, [x / sum(e) for x in e]


def naive_clustered(q, k, v, causal, planes=None, initial=None, assignment=None, iterations=10, scale=None,
                    top_k=None):
    """Clustered attention by loops (§3.2): V̂_i = Σ_l A^c_{c(i) l} v_l, A^c the softmax of each centroid's scores.
    With ``top_k`` (improved, §3.3): on the k keys of largest A^c_jl (the lower index first on a tie) query i
    weighs m̂_j · e^{s_il} / Σ_{r ∈ T_j} e^{s_ir}, m̂_j = Σ_{l ∈ T_j} A^c_jl; elsewhere A^c_jl."""
    assert causal is False, "clustered attention has no causal form"
    n, d = q.shape
    m, d_v = v.shape
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    clusters = _naive_clusters(q, planes, initial, assignment, iterations)
    out = np.zeros((n, d_v))
    for j in sorted(set(clusters)):
        members = [i for i in range(n) if clusters[i] == j]
        scores, A_c = _naive_centroid(q, k, members, scale)
        T = sorted(range(m), key=lambda l: (-scores[l], l))[:top_k or 0]
        m_hat = sum(A_c[l] for l in T)
        for i in members:
            weights = list(A_c)
            if T:
                s = {l: sum(q[i, c] * k[l, c] for c in range(d)) * scale for l in T}
                top = max(s.values())
                total = sum(math.exp(x - top) for x in s.values())
                for l in T:
                    weights[l] = m_hat * math.exp(s[l] - top) / total
            for c in range(d_v):
                out[i, c] = sum(weights[l] * v[l, c] for l in range(m))
    return out


def naive_improved_clustered(q, k, v, causal, top_k=2, **options):
    """Improved clustered attention by loops (§3.3), top_k = 2 as the registry's apply."""
    return naive_clustered(q, k, v, causal, top_k=top_k, **options)


def _hash_draws(bits, clusters, through_origin=False, **fixed_options):
    """Explicit hash planes (B, d + 1) and ``clusters`` initial queries (fewer if n is smaller), and the
    ``fixed_options``."""
    def options(rng, n, m, d, causal):
        planes = rng.standard_normal((bits, d + 1))
        if through_origin:
            planes[:, -1] = 0.0
        initial = rng.choice(n, size=min(clusters, n), replace=False)
        return {"planes": planes, "initial": initial} | fixed_options

    return options


# ------------------------------------------------------------------------------ compressed key/value memory (§4.3.2)


def naive_linformer(q, k, v, causal, E, F=None, sharing="none"):
    """Wang et al. Eq. (7) for one sequence, in the other order: the projected keys (E K)_r = Σ_j E_rj k_j, the
    n × k softmax P̄_ir of q_i·(E K)_r/√d, then the effective weights W_ij = Σ_r P̄_ir F_rj and out_i = Σ_j W_ij v_j
    (refattn computes P̄ (F V)). F = E when not given (key-value sharing); ``sharing`` changes nothing here."""
    assert causal is False, "Linformer has no causal form"
    F = E if F is None else F
    n, d = q.shape
    m, d_v = v.shape
    r_count = len(E)
    EK = [[sum(E[r][j] * k[j, c] for j in range(m)) for c in range(d)] for r in range(r_count)]
    out = np.zeros((n, d_v))
    for i in range(n):
        s = [sum(q[i, c] * EK[r][c] for c in range(d)) / math.sqrt(d) for r in range(r_count)]
        top = max(s)
        e = [math.exp(x - top) for x in s]
        P = [x / sum(e) for x in e]
        for j in range(m):
            w = sum(P[r] * F[r][j] for r in range(r_count))
            for c in range(d_v):
                out[i, c] += w * v[j, c]
    return out


def naive_mca(q, k, v, causal, params=None, channels=None, memory="paper", remainder="drop", mode="compressed",
              block=3):
    """Liu et al. §4.2.3 for one sequence by loops. Compressed: block r holds the positions rc + t − p (t < c, p the
    zeros before position 0 with remainder "pad", else 0, and the last m mod c positions in no block with "drop");
    its key is Σ_t k_{rc+t−p} W_t (a d × d tap, or a scalar tap times k); query i at position p_i (i, or i + m − n
    bottom-right) attends to the blocks whose last position is ≤ p_i ("paper") or < p_i after the first token,
    seen from p_i ≥ 0 ("tensor2tensor"), to all when not causal; none: a zero row. Local: the keys of p_i's block of
    ``block`` tokens (causal: j ≤ p_i). ``channels`` names the kind of ``params``' taps (the loop reads it from
    them)."""
    n, d = q.shape
    m, d_v = v.shape
    delta = m - n if causal == "bottom-right" else 0
    out = np.zeros((n, d_v))
    if mode == "local":
        for i in range(n):
            pos = i + delta
            keys = [j for j in range(m) if j // block == pos // block and (not causal or j <= pos)]
            if keys:
                allowed = np.array([[j in keys for j in range(m)]])
                out[i] = naive_sdpa(q[i:i + 1], k, v, allowed=allowed)[0][0]
        return out
    c = len(params.w_k)
    pad = (-m) % c if remainder == "pad" else 0
    items = []                                                     # (key, value, last position, seen strictly)
    if memory == "tensor2tensor" and m:
        items.append((list(k[0]), list(v[0]), 0, False))
    for r in range((m + pad) // c):
        tokens = [(t, r * c + t - pad) for t in range(c) if r * c + t - pad >= 0]

        def conv(x, w, width, tokens=tokens):
            if w.ndim == 1:
                return [sum(w[t] * x[j, o] for t, j in tokens) for o in range(width)]
            return [sum(x[j, a] * w[t, a, o] for t, j in tokens for a in range(width)) for o in range(width)]

        items.append((conv(k, params.w_k, d), conv(v, params.w_v, d_v), r * c + c - 1 - pad, memory != "paper"))
    for i in range(n):
        pos = i + delta
        seen = [it for it in items if not causal or (it[2] < pos if it[3] else it[2] <= pos)]
        if not seen:
            continue
        s = [sum(q[i, a] * key[a] for a in range(d)) / math.sqrt(d) for key, _, _, _ in seen]
        top = max(s)
        e = [math.exp(x - top) for x in s]
        for (_, value, _, _), x in zip(seen, e, strict=True):
            for o in range(d_v):
                out[i, o] += x / sum(e) * value[o]
    return out
# ------------------------------------------------------------------ learned extra tokens (Set Transformer, Luna)


def naive_induced(q, k, v, inducing, scale=None):
    """Inducing-point attention by loops: H_a = Σ_j softmax_j(s I_a·k_j) (k_j, v_j), then out_i = Σ_a softmax_a(s q_i·
    H_K,a) H_V,a (Set Transformer's ISAB path; Luna's non-causal pack and unpack)."""
    n, d = q.shape
    m, d_v = v.shape
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    H_K, H_V = [], []
    for a in range(len(inducing)):                                 # each inducing point attends every key
        w = _softmax_list([scale * sum(inducing[a, c] * k[j, c] for c in range(d)) for j in range(m)])
        H_K.append([sum(w[j] * k[j, c] for j in range(m)) for c in range(d)])
        H_V.append([sum(w[j] * v[j, c] for j in range(m)) for c in range(d_v)])
    out = np.zeros((n, d_v))
    for i in range(n):                                             # each query attends the ℓ memory slots
        w = _softmax_list([scale * sum(q[i, c] * H_K[a][c] for c in range(d)) for a in range(len(inducing))])
        for c in range(d_v):
            out[i, c] = sum(w[a] * H_V[a][c] for a in range(len(inducing)))
    return out


def _softmax_list(scores):
    """e^{s_j − max} / Σ e^{s − max} over a Python list; an empty list gives an empty list."""
    if not scores:
        return []
    top = max(scores)
    e = [math.exp(s - top) for s in scores]
    total = sum(e)
    return [x / total for x in e]


def naive_set_transformer(q, k, v, causal, inducing, scale=None, num_inducing=None):
    """Set Transformer's inducing-point attention (§3.1, ISAB's two attentions), by loops; no causal form."""
    assert causal is False, "a set has no order"
    return naive_induced(q, k, v, inducing, scale)


def _softplus_ln2(x):
    """ln(1 + e^{x ln 2}) / ln 2, written as max(y, 0) + ln(1 + e^{−|y|}) with y = x ln 2."""
    y = x * math.log(2.0)
    return (max(y, 0.0) + math.log1p(math.exp(-abs(y)))) / math.log(2.0)


def naive_luna(q, k, v, causal, pack, scale=None, pack_length=None):
    """Luna by loops: non-causal, the pack and unpack attentions; causal, for each position t the packed keys and
    values (1/(t+1)) Σ_{j≤t} softplus_{ln 2}(s k_j·P_l) (k_j, v_j), then the query's softmax over the l tokens."""
    if causal is False:
        return naive_induced(q, k, v, pack, scale)
    n, d = q.shape
    m, d_v = v.shape
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    delta = m - n if causal == "bottom-right" else 0
    F = [[_softplus_ln2(scale * sum(k[j, c] * pack[a, c] for c in range(d))) for a in range(len(pack))]
         for j in range(m)]
    out = np.zeros((n, d_v))
    for i in range(n):
        seen = min(i + delta + 1, m)                               # keys j <= t
        if seen <= 0:
            continue                                               # before every key: a zero row
        P_K = [[sum(F[j][a] * k[j, c] for j in range(seen)) / seen for c in range(d)] for a in range(len(pack))]
        P_V = [[sum(F[j][a] * v[j, c] for j in range(seen)) / seen for c in range(d_v)] for a in range(len(pack))]
        w = _softmax_list([scale * sum(q[i, c] * P_K[a][c] for c in range(d)) for a in range(len(pack))])
        for c in range(d_v):
            out[i, c] = sum(w[a] * P_V[a][c] for a in range(len(pack)))
    return out
# ------------------------------------------------------------------------ compressed memory, low rank (§4.3.2, §4.4)


def naive_softmax(scores):
    """{key: weight} from {key: score}, max-shifted, by math.exp ({} for no key)."""
    if not scores:
        return {}
    top = max(scores.values())
    total = sum(math.exp(s - top) for s in scores.values())
    return {j: math.exp(s - top) / total for j, s in scores.items()}


def naive_poolingformer(q, k, v, causal, params, window=1, pool_window=3, kernel_size=3, stride=2, pooling="conv",
                        residual=True, scale=None):
    """Zhang et al. 2021 for one sequence by loops. First level: y_i = Σ softmax(q_i·k_j/√d) v_j over |i − j| ≤ w₁
    (no key: y_i = 0). Second level, query by query: its window [i − w₂, i + w₂] cut into the segments
    s = i − w₂ + tξ (t while s + κ − 1 ≤ i + w₂) of κ positions, those in [0, n) kept; each segment pooled: the mean,
    the channel max (keys: the max of y_l W_K), or LDConv (weights softmax over the segment of ȳ·W_δ[:, l − s], ȳ its
    mean); z_i = Σ softmax((y_i W_Q)·(ỹ W_K)/√d) ỹ over the segments; out_i = y_i + z_i (z_i without residual)."""
    n, d = q.shape
    m, d_v = v.shape
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    w_q, w_k, w_kernel = params.w_q, params.w_k, params.w_kernel
    y = [[0.0] * d_v for _ in range(n)]
    for i in range(n):
        a = naive_softmax({j: sum(q[i, c] * k[j, c] for c in range(d)) * scale
                           for j in range(m) if abs(i - j) <= window})
        for j, weight in a.items():
            for c in range(d_v):
                y[i][c] += weight * v[j, c]
    out = np.zeros((n, d_v))
    for i in range(n):
        q2 = [sum(y[i][a] * w_q[a, c] for a in range(d_v)) for c in range(d)]
        keys, values = [], []
        s = i - pool_window
        while s + kernel_size - 1 <= i + pool_window:
            S = [l for l in range(s, s + kernel_size) if 0 <= l < n]
            if S and pooling == "max":
                values.append([max(y[l][c] for l in S) for c in range(d_v)])
                keys.append([max(sum(y[l][a] * w_k[a, c] for a in range(d_v)) for l in S) for c in range(d)])
            elif S:
                if pooling == "mean":
                    delta = {l: 1.0 / len(S) for l in S}
                else:
                    mean = [sum(y[l][a] for l in S) / len(S) for a in range(d_v)]
                    delta = naive_softmax({l: sum(mean[a] * w_kernel[a, l - s] for a in range(d_v)) for l in S})
                pooled = [sum(delta[l] * y[l][c] for l in S) for c in range(d_v)]
                values.append(pooled)
                keys.append([sum(pooled[a] * w_k[a, c] for a in range(d_v)) for c in range(d)])
            s += stride
        b = naive_softmax({t: sum(q2[c] * key[c] for c in range(d)) * scale for t, key in enumerate(keys)})
        for c in range(d_v):
            z = sum(weight * values[t][c] for t, weight in b.items())
            out[i, c] = y[i][c] + z if residual else z
    return out


def naive_lowrank_band(q, k, v, causal, params, alpha=0.5, window=1, scale=None):
    """Guo et al. 2019 for one sequence by loops: the low-rank module softmaxes (q_i W_q)·(k_j W_k)/√D_k over every
    key, the band module q_i·k_j/√d over |p − j| ≤ w (p = i, or i + m − n bottom-right), both under j ≤ p when
    causal; out_i = α Σ_j a_ij v_j + (1 − α) Σ_j b_ij v_j."""
    n, d = q.shape
    m, d_v = v.shape
    rank = params.w_q.shape[1]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    qr = [[sum(q[i, a] * params.w_q[a, c] for a in range(d)) for c in range(rank)] for i in range(n)]
    kr = [[sum(k[j, a] * params.w_k[a, c] for a in range(d)) for c in range(rank)] for j in range(m)]
    out = np.zeros((n, d_v))
    for i in range(n):
        p = i + (m - n if causal == "bottom-right" else 0)
        seen = [j for j in range(m) if causal is False or j <= p]
        low = naive_softmax({j: sum(qr[i][c] * kr[j][c] for c in range(rank)) / math.sqrt(rank) for j in seen})
        band = naive_softmax({j: sum(q[i, c] * k[j, c] for c in range(d)) * scale for j in seen
                              if abs(p - j) <= window})
        for c in range(d_v):
            out[i, c] = (alpha * sum(a * v[j, c] for j, a in low.items())
                         + (1 - alpha) * sum(b * v[j, c] for j, b in band.items()))
    return out


# ------------------------------------------------------------------------------ low rank: Nyström (survey §4.4.2)


def naive_softmax_row(scores):
    """One softmax row by math.exp, max-shifted."""
    top = max(scores)
    e = [math.exp(s - top) for s in scores]
    return [x / sum(e) for x in e]


def naive_dot_softmax(a, b, scale):
    """softmax(a bᵀ · scale) row by row, as a list of lists."""
    return [naive_softmax_row([sum(x * y for x, y in zip(row, col, strict=True)) * scale for col in b]) for row in a]


def naive_matmul(A, B):
    """(r × s)(s × c) by three loops on lists of lists."""
    return [[sum(A[i][t] * B[t][j] for t in range(len(B))) for j in range(len(B[0]))] for i in range(len(A))]


def naive_inverse(A):
    """Gauss-Jordan elimination with partial pivoting on a list of lists (an invertible square matrix)."""
    size = len(A)
    rows = [list(A[i]) + [float(i == j) for j in range(size)] for i in range(size)]
    for c in range(size):
        pivot = max(range(c, size), key=lambda r: abs(rows[r][c]))
        rows[c], rows[pivot] = rows[pivot], rows[c]
        head = rows[c][c]
        rows[c] = [x / head for x in rows[c]]
        for r in range(size):
            if r != c and rows[r][c] != 0.0:
                factor = rows[r][c]
                rows[r] = [x - factor * y for x, y in zip(rows[r], rows[c], strict=True)]
    return [row[size:] for row in rows]


def naive_segments(n, l):
    """Nyströmformer's segments (the official T2T-ViT code's extension): the first l − n mod l hold ⌊n/l⌋ tokens,
    the others one more; as lists of positions."""
    out, start = [], 0
    for j in range(l):
        length = n // l + (1 if j >= l - n % l else 0)
        out.append(list(range(start, start + length)))
        start += length
    return out


def naive_means(x, groups):
    """The mean of the rows of x in each group of positions."""
    return [[sum(x[i][c] for i in g) / len(g) for c in range(len(x[0]))] for g in groups]


def naive_iterative_pinv(M, iterations, init):
    """Z₀ = Mᵀ/(‖M‖₁‖M‖∞) (the paper) or Mᵀ/max column sum (the official code, one matrix here), then
    Z ← ¼ Z(13I − MZ(15I − MZ(7I − MZ))), all by loops."""
    size = len(M)
    col_sums = [sum(abs(M[i][j]) for i in range(size)) for j in range(size)]
    row_sums = [sum(abs(M[i][j]) for j in range(size)) for i in range(size)]
    alpha = 1.0 / (max(col_sums) * max(row_sums)) if init == "paper" else \
        1.0 / max(sum(M[i][j] for i in range(size)) for j in range(size))
    Z = [[alpha * M[j][i] for j in range(size)] for i in range(size)]
    eye = [[float(i == j) for j in range(size)] for i in range(size)]

    def minus(c, X):                                               # c·I − X
        return [[c * eye[i][j] - X[i][j] for j in range(size)] for i in range(size)]

    for _ in range(iterations):
        MZ = naive_matmul(M, Z)
        inner = naive_matmul(MZ, minus(15.0, naive_matmul(MZ, minus(7.0, MZ))))
        Z = [[0.25 * x for x in row] for row in naive_matmul(Z, minus(13.0, inner))]
    return Z


def naive_nystrom_rows(q, k, v, Q_tilde, K_tilde, middle, scale):
    """out_i = Σ_j Ŝ_ij v_j with Ŝ formed row by row: Ŝ_ij = Σ_a Σ_b F̃_ia Mid_ab B̃_bj."""
    F = naive_dot_softmax(q, K_tilde, scale)
    B = naive_dot_softmax(Q_tilde, k, scale)
    l, m, d_v = len(middle), len(k), v.shape[1]
    out = np.zeros((len(q), d_v))
    for i in range(len(q)):
        row = [sum(F[i][a] * middle[a][b] * B[b][j] for a in range(l) for b in range(l)) for j in range(m)]
        for c in range(d_v):
            out[i, c] = sum(row[j] * v[j, c] for j in range(m))
    return out


def naive_nystromformer(q, k, v, causal, num_landmarks=3, pinv="iterative", iterations=6, init="paper",
                        conv_weights=None):
    """Xiong et al.: landmarks the segment means, Ã = softmax(Q̃K̃ᵀ/√d), its pseudoinverse by the iteration or (the
    naive tests' Ã being invertible) by Gauss-Jordan, Ŝ row by row; the skip Σ_t w_t v_{i+t−K//2} by loops."""
    assert causal is False, "Nyströmformer has no causal form"
    n, d = q.shape
    scale = 1.0 / math.sqrt(d)
    Q_tilde = naive_means(q, naive_segments(n, num_landmarks))
    K_tilde = naive_means(k, naive_segments(len(k), num_landmarks))
    A = naive_dot_softmax(Q_tilde, K_tilde, scale)
    middle = naive_inverse(A) if pinv == "exact" else naive_iterative_pinv(A, iterations, init)
    out = naive_nystrom_rows(q, k, v, Q_tilde, K_tilde, middle, scale)
    if conv_weights is not None:
        half = len(conv_weights) // 2
        for i in range(n):
            for t, w in enumerate(conv_weights):
                if 0 <= i + t - half < n:
                    out[i] += w * v[i + t - half]
    return out


def naive_csalr(q, k, v, causal, pool=2, eps=1.0):
    """Chen et al. (CSALR): landmarks the means of windows of ``pool`` tokens (stride ``pool``, the trailing
    tokens in none), the middle factor (Ã + εI)⁻¹ by Gauss-Jordan, Ŝ row by row."""
    assert causal is False, "CSALR has no causal form"
    n, d = q.shape
    scale = 1.0 / math.sqrt(d)
    windows = [list(range(j * pool, (j + 1) * pool)) for j in range(n // pool)]
    Q_tilde, K_tilde = naive_means(q, windows), naive_means(k, windows)
    A = naive_dot_softmax(Q_tilde, K_tilde, scale)
    middle = naive_inverse([[A[i][j] + (eps if i == j else 0.0) for j in range(len(A))] for i in range(len(A))])
    return naive_nystrom_rows(q, k, v, Q_tilde, K_tilde, middle, scale)


# ------------------------------------------------------------------------------ attention with prior (survey §4.5)


def naive_sigmoid(x):
    """1 / (1 + e^{−x}) by math.exp."""
    return 1.0 / (1.0 + math.exp(-x))


def naive_gaussian_prior(q, k, v, causal, params, window="query", scale=None):
    """Yang et al. (2018) row by row: query i sees I_i keys (m, or j <= i (+ m − n bottom-right) when causal),
    P_i = I_i·sigmoid(v_p·tanh(q_i W_p)); D_i = I_i·sigmoid(v_d·tanh(q_i W_p)) ("query"),
    I_i·sigmoid(u_d·tanh(K̄_i W_d)) with K̄_i the mean of the I_i first keys ("layer"), or the number given;
    G_ij = −((j + 1) − P_i)²/(2 (D_i/2)²) on positions 1 … m, added to the scores."""
    n, d = q.shape
    m = k.shape[0]
    h = len(params.v_p)
    delta = m - n if causal == "bottom-right" else 0
    allowed = causal_allowed(n, m, causal)
    bias = np.zeros((n, m))
    for i in range(n):
        I = m if causal is False else max(0, min(m, i + delta + 1))
        if I == 0:
            continue                                               # sees no key: a zero row
        hidden = [math.tanh(sum(q[i, a] * params.w_p[a, c] for a in range(d))) for c in range(h)]
        P = I * naive_sigmoid(sum(params.v_p[c] * hidden[c] for c in range(h)))
        if window == "query":
            D = I * naive_sigmoid(sum(params.v_d[c] * hidden[c] for c in range(h)))
        elif window == "layer":
            K_bar = [sum(k[j, a] for j in range(I)) / I for a in range(d)]
            z = sum(params.u_d[c] * math.tanh(sum(K_bar[a] * params.w_d[a, c] for a in range(d))) for c in range(h))
            D = I * naive_sigmoid(z)
        else:
            D = window
        sigma = D / 2
        for j in range(m):
            bias[i, j] = -((j + 1) - P) ** 2 / (2 * sigma ** 2)
    return naive_sdpa(q, k, v, allowed, bias, scale)[0]


def _query_positions(n, m, causal):
    """Query i sits at position i, or i + m − n when the n queries are the last n of m positions."""
    return [i + (m - n if causal == "bottom-right" else 0) for i in range(n)]


def naive_gaussian_transformer(q, k, v, causal, params, mask_diagonal=False, scale=None):
    """Guo et al. (2019): s_ij = q_i·k_j/√d − |w (i − j)² + b| over the keys i may see (j ≠ i with
    ``mask_diagonal``), softmax per row."""
    n, m = len(q), len(k)
    w, b = float(params.w), float(params.b)
    rows = _query_positions(n, m, causal)
    bias = np.zeros((n, m))
    for i in range(n):
        for j in range(m):
            bias[i, j] = -abs(w * (rows[i] - j) ** 2 + b)
    allowed = loop_mask(n, m, lambda i, j: (causal is False or j <= rows[i]) and not (mask_diagonal and j == rows[i]))
    return naive_sdpa(q, k, v, allowed=allowed, bias=bias, scale=scale)[0]


def naive_camtl_prior(params, task_id=0, task_embedding=None):
    """CAMTL/CA-MTL's CBDA entry by entry: z = E[t] W_t + b_t (or z given), [γ | β] = z W_f + b_f, then row r of
    A ⊙ (1 + γ) + β placed in columns ⌊r/c⌋·c + col of the L × L prior, the columns from L on cut off."""
    L, c = params.A.shape
    d_z = params.task_embeddings.shape[1]
    if task_embedding is None:
        z = [sum(params.task_embeddings[task_id, r] * params.w_task[r, col] for r in range(d_z)) + params.b_task[col]
             for col in range(d_z)]
    else:
        z = list(task_embedding)
    gb = [sum(z[r] * params.w_film[r, col] for r in range(d_z)) + params.b_film[col] for col in range(2 * c)]
    gamma, beta = gb[:c], gb[c:]
    M = np.zeros((L, L))
    for r in range(L):
        start = (r // c) * c                                       # the first row (and column) of r's block
        for col in range(c):
            if start + col < L:
                M[r, start + col] = params.A[r, col] * (1.0 + gamma[col]) + beta[col]
    return M


def naive_camtl(q, k, v, causal, params, task_id=None, task_embedding=None, scale=None):
    """Pilault et al. (2021) Eq. 1: softmax(q_i·k_j/√d + M_{p_i j}) over the keys i may see, M the task's
    block-diagonal prior; a sequence shorter than L uses the prior's top-left corner (padded keys masked)."""
    n, m = len(q), len(k)
    M = naive_camtl_prior(params, 0 if task_id is None else task_id, task_embedding)
    rows = _query_positions(n, m, causal)
    bias = np.zeros((n, m))
    for i in range(n):
        for j in range(m):
            bias[i, j] = M[rows[i], j] if rows[i] >= 0 else 0.0
    allowed = causal_allowed(n, m, causal)
    return naive_sdpa(q, k, v, allowed=allowed, bias=bias, scale=scale)[0]
# ------------------------------------------------------------------------------ attention with prior


def naive_last_key(i, n, m, causal):
    """The last key query i may see: m − 1 (none), i (top-left), i + m − n (bottom-right); < 0 sees none."""
    if causal is False:
        return m - 1
    return i + (m - n if causal == "bottom-right" else 0)


def naive_average(q, k, v, causal, method="auto"):
    """Zhang et al. (2018), Eq. 1: g_i = (1/|J_i|) Σ_{j ∈ J_i} v_j over the keys query i may see (none: 0)."""
    n, (m, d_v) = len(q), v.shape
    out = np.zeros((n, d_v))
    for i in range(n):
        seen = list(range(min(naive_last_key(i, n, m, causal), m - 1) + 1))
        for j in seen:
            for c in range(d_v):
                out[i, c] += v[j, c] / len(seen)
    return out


def naive_hardcoded_gaussian(q, k, v, causal, offsets=0, sigma=1.0, normalize="keys", ratio=1.0):
    """You et al. (2020): weights exp(−(j − c)²/(2σ²)) around c = p_i·r + o over the keys query i may see,
    divided by their sum ("keys") or by σ√(2π) (the density, "density"); p_i = i, or i + m − n bottom-right."""
    n, (m, d_v) = len(q), v.shape
    out = np.zeros((n, d_v))
    for i in range(n):
        position = i + (m - n if causal == "bottom-right" else 0)
        centre = position * ratio + offsets
        seen = list(range(min(naive_last_key(i, n, m, causal), m - 1) + 1))
        w = {j: math.exp(-((j - centre) ** 2) / (2 * sigma * sigma)) for j in seen}     # σ = ∞: e^{−0} = 1
        total = sum(w.values()) if normalize == "keys" else sigma * math.sqrt(2 * math.pi)
        for j in seen:
            for c in range(d_v):
                out[i, c] += w[j] / total * v[j, c]
    return out
# ------------------------------------------------------------------------------ multi-head variants (survey §4.6)


def naive_multi_query(q, k, v, causal, params, num_heads=2, num_kv_heads=None, mask=None):
    """Shazeer 2019 §3, Ainslie et al. 2023 §2.2: head i = Attention(Q W_iᵠ, K W_jᴷ, V W_jⱽ) with j = ⌊i / r⌋,
    r = h / g, heads concatenated, then Wᴼ and bᴼ. ``num_kv_heads`` (g) only names what the widths say."""
    h = num_heads
    d_k, d_v = params.w_q.shape[1] // h, params.w_o.shape[0] // h
    g = params.w_k.shape[1] // d_k
    assert num_kv_heads in (None, g)
    r = h // g
    allowed = both(causal_allowed(len(q), len(k), causal), mask)
    heads = []
    for i in range(h):
        j = i // r                                                 # the key/value head query head i reads
        qs, ks, vs = slice(i * d_k, (i + 1) * d_k), slice(j * d_k, (j + 1) * d_k), slice(j * d_v, (j + 1) * d_v)
        Q_i = q @ params.w_q[:, qs] + params.b_q[qs]
        K_j = k @ params.w_k[:, ks] + params.b_k[ks]
        V_j = v @ params.w_v[:, vs] + params.b_v[vs]
        heads.append(naive_sdpa(Q_i, K_j, V_j, allowed=allowed)[0])
    return np.concatenate(heads, axis=-1) @ params.w_o + params.b_o


def random_gqa_params(rng, d_model, num_heads, num_kv_heads, d_k, d_v):
    """Grouped-query parameters with random, non-zero weights and biases: h query heads, g key/value heads."""
    h, g = num_heads, num_kv_heads
    return MultiQueryParams(
        w_q=rng.standard_normal((d_model, h * d_k)) / np.sqrt(d_model),
        w_k=rng.standard_normal((d_model, g * d_k)) / np.sqrt(d_model),
        w_v=rng.standard_normal((d_model, g * d_v)) / np.sqrt(d_model),
        w_o=rng.standard_normal((h * d_v, d_model)) / np.sqrt(h * d_v),
        b_q=rng.standard_normal(h * d_k), b_k=rng.standard_normal(g * d_k), b_v=rng.standard_normal(g * d_v),
        b_o=rng.standard_normal(d_model),
    )


def _gqa(num_heads, num_kv_heads, mask=False, name_g=False):
    """Grouped-query settings: random parameters (d_k = 3, d_v = 2 per head), h and g, optionally a shared mask."""
    def options(rng, n, m, d, causal):
        drawn = {"params": random_gqa_params(rng, d, num_heads, num_kv_heads, d_k=3, d_v=2), "num_heads": num_heads}
        drawn |= {"num_kv_heads": num_kv_heads} if name_g else {}
        return drawn | ({"mask": rng.random((n, m)) < 0.7} if mask else {})

    return options


def naive_head_size(q, k, v, causal, params, num_heads=2, head_size=None, mask=None):
    """Bhojanapalli et al. 2020 §4: head_i = softmax(X W_iᵠ (X W_iᴷ)ᵀ / √d_p) X W_iⱽ with W_i of d_model × d_p, d_p
    free; Concat(head_i) Wᴼ with Wᴼ of h·d_p × d_model. ``head_size`` (d_p) only names what the widths say."""
    assert head_size in (None, params.w_q.shape[1] // num_heads)
    allowed = both(causal_allowed(len(q), len(k), causal), mask)
    return per_head_loop(q, k, params, num_heads, x_v=v, allowed=allowed)[0]


def _head_size(num_heads, head_size, mask=False):
    """Fixed-head-size settings: random parameters with heads of d_p = ``head_size`` (keys and values alike)."""
    def options(rng, n, m, d, causal):
        drawn = {"params": random_params(rng, d, num_heads, d_k=head_size), "num_heads": num_heads,
                 "head_size": head_size}
        return drawn | ({"mask": rng.random((n, m)) < 0.7} if mask else {})

    return options
# ------------------------------------------------------------------------------ multi-head variants (survey §4.6)


def _head_inputs(x_q, x_kv, x_v, params, num_heads, i):
    """Head i's Q_i = x_q W_iᵠ + b_iᵠ, K_i, V_i, sliced from the side-by-side projections."""
    d_k, d_v = params.w_q.shape[1] // num_heads, params.w_v.shape[1] // num_heads
    ks, vs = slice(i * d_k, (i + 1) * d_k), slice(i * d_v, (i + 1) * d_v)

    def bias(b, cols):
        return 0.0 if b is None else b[cols]

    return (x_q @ params.w_q[:, ks] + bias(params.b_q, ks), x_kv @ params.w_k[:, ks] + bias(params.b_k, ks),
            x_v @ params.w_v[:, vs] + bias(params.b_v, vs))


def _concat_project(heads, params):
    """Concat(head_1, …, head_h) Wᴼ + bᴼ."""
    out = np.concatenate(heads, axis=-1) @ params.w_o
    return out if params.b_o is None else out + params.b_o


def naive_adaptive_span(q, k, v, causal, params, num_heads=2, z=None, max_span=None, ramp=2, include_current=True,
                        eps=0.0, scale=None):
    """Sukhbaatar et al. 2019, Eq. 1-2, head by head, as the official code computes it: the softmax over the S
    positions t − S + 1 … t (t − S … t − 1 without the current one, the distance then counted from the nearest),
    each weight times m_z(x) = min(max((R + z − x)/R, 0), 1), renormalised (+ ε). apply's defaults: z_i = 0.5 + 2i,
    R = 2, S = max(n, m)."""
    n, m = len(q), len(k)
    spans = [0.5 + 2 * i for i in range(num_heads)] if z is None else [float(x) for x in np.atleast_1d(z)]
    spans = spans * num_heads if len(spans) == 1 else spans
    S = max(n, m, 1) if max_span is None else max_span
    delta = m - n if causal == "bottom-right" else 0
    heads = []
    for i in range(num_heads):
        Q, K, V = _head_inputs(q, k, v, params, num_heads, i)
        sc = 1.0 / math.sqrt(Q.shape[1]) if scale is None else scale
        head = np.zeros((n, V.shape[1]))
        for t in range(n):
            window = {}
            for r in range(m):
                x = t + delta - r - (0 if include_current else 1)
                if 0 <= x < S:
                    mask = min(max((ramp + spans[i] - x) / ramp, 0.0), 1.0)
                    window[r] = (mask, sum(Q[t, c] * K[r, c] for c in range(Q.shape[1])) * sc)
            if not window:
                continue
            top = max(s for _, s in window.values())
            Z = sum(math.exp(s - top) for _, s in window.values())
            masked = {r: mask * math.exp(s - top) / Z for r, (mask, s) in window.items()}
            total = sum(masked.values()) + eps
            for r, w in masked.items():
                for c in range(V.shape[1]):
                    head[t, c] += w / total * V[r, c]
        heads.append(head)
    return _concat_project(heads, params)


def naive_multi_scale(q, k, v, causal, params, num_heads=2, windows=None, scale=None):
    """Guo et al. 2020: head i attends to C(x_t, ω_i) = [x_{t−ω_i}, …, x_{t+ω_i}] (its past half when causal),
    then Concat(head_1, …, head_h) Wᴼ; apply's default scales ω_i = 2i + 1."""
    n, m = len(q), len(k)
    windows = [2 * i + 1 for i in range(num_heads)] if windows is None else list(windows)
    delta = m - n if causal == "bottom-right" else 0
    heads = []
    for i in range(num_heads):
        Q, K, V = _head_inputs(q, k, v, params, num_heads, i)
        allowed = loop_mask(n, m, lambda t, r, w=windows[i]: abs(t + delta - r) <= w and (not causal or r <= t + delta))
        heads.append(naive_sdpa(Q, K, V, allowed=allowed, scale=scale)[0])
    return _concat_project(heads, params)
# ------------------------------------------------------------------------------ multi-head variants (survey §4.6)


def naive_talking_heads(q, k, v, causal, params, mask=None):
    """Shazeer et al. 2020, §4's pseudocode one scalar at a time: J = Q_k·K_k/√d_k per key head,
    L_h = Σ_k J_k P_l[k, h], W_h = softmax of L_h over the keys query i may see (masked after P_l),
    U_v = Σ_h W_h P_w[h, v], O_v = Σ_j U_v V_v, Y = Concat(O_v) P_o + b_o. q, k, v are the layer inputs X, M, M_v."""
    proj = params.projections
    (h_k, h), h_v = params.P_l.shape, params.P_w.shape[1]
    d_k, d_v = proj.w_q.shape[1] // h_k, proj.w_v.shape[1] // h_v
    n, m = len(q), len(k)
    allowed = both(causal_allowed(n, m, causal), mask)
    Q, K, V = q @ proj.w_q + proj.b_q, k @ proj.w_k + proj.b_k, v @ proj.w_v + proj.b_v
    concat = np.zeros((n, h_v * d_v))
    for i in range(n):
        keys = [j for j in range(m) if allowed is None or allowed[i, j]]
        J = [[sum(Q[i, a * d_k + c] * K[j, a * d_k + c] for c in range(d_k)) / math.sqrt(d_k) for j in keys]
             for a in range(h_k)]
        W = []
        for b in range(h):
            L = [sum(J[a][t] * params.P_l[a, b] for a in range(h_k)) for t in range(len(keys))]
            top = max(L, default=0.0)
            total = sum(math.exp(x - top) for x in L)
            W.append([math.exp(x - top) / total for x in L])
        for e in range(h_v):
            U = [sum(W[b][t] * params.P_w[b, e] for b in range(h)) for t in range(len(keys))]
            for c in range(d_v):
                concat[i, e * d_v + c] = sum(U[t] * V[j, e * d_v + c] for t, j in enumerate(keys))
    return concat @ proj.w_o + proj.b_o


def naive_collaborative(q, k, v, causal, params, mask=None):
    """Cordonnier et al. 2020, §3, head by head: scores x_i W̃_Q diag(m_i) W̃_Kᵀ y_jᵀ + y_j·c_i, times √(h/D̃_k) (the
    official layer's 1/√(D̃_k/h)), softmax over the keys query i may see, values Y W_V^i + b_V^i, Concat W_O + b_O."""
    h, shared = params.mixing.shape
    d_v = params.w_v.shape[1] // h
    n, m = len(q), len(k)
    scale = math.sqrt(h / shared)
    allowed = both(causal_allowed(n, m, causal), mask)
    Q_shared, K_shared = q @ params.w_q, k @ params.w_k
    heads = []
    for i in range(h):
        Q_i = np.array([[Q_shared[t, r] * params.mixing[i, r] for r in range(shared)] for t in range(n)])
        Q_i = Q_i.reshape(n, shared)
        content = [0.0 if params.content_bias is None else
                   sum(k[j, c] * params.content_bias[c, i] for c in range(k.shape[1])) for j in range(m)]
        bias = np.array([[content[j] * scale for j in range(m)] for _ in range(n)]).reshape(n, m)
        V_i = v @ params.w_v[:, i * d_v:(i + 1) * d_v] + (0.0 if params.b_v is None else
                                                           params.b_v[i * d_v:(i + 1) * d_v])
        heads.append(naive_sdpa(Q_i, K_shared, V_i, allowed=allowed, bias=bias, scale=scale)[0])
    return np.concatenate(heads, axis=-1) @ params.w_o + (0.0 if params.b_o is None else params.b_o)


# ------------------------------------------------------------------------------ the table


# ------------------------------------------------------------------------------ attention with prior (§4.5)


def naive_dense_synthesizer_row(x, p):
    """Tay et al. (2021), "Dense Synthesizer": F(x) = W₂ ReLU(W₁ x + b₁) + b₂ for one token x (d,), by loops;
    "Factorized Models" for the factorised form: C[p·a + r] = A[r]·B[p] (A tiled b times, each entry of B repeated
    a times)."""
    if isinstance(p, FactorizedDenseSynthesizer):
        A, B = naive_dense_synthesizer_row(x, p.A), naive_dense_synthesizer_row(x, p.B)
        return [A[j % len(A)] * B[j // len(A)] for j in range(len(A) * len(B))]
    d = len(x)
    hidden = [max(0.0, sum(x[c] * p.W1[c, h] for c in range(d)) + p.b1[h]) for h in range(d)]
    return [sum(hidden[h] * p.W2[h, j] for h in range(d)) + p.b2[j] for j in range(p.W2.shape[1])]


def naive_random_synthesizer_row(p, position):
    """Tay et al. (2021) §3, Random Synthesizer: row ``position`` of R, or of R₁R₂ᵀ (factorised), by loops."""
    if isinstance(p, FactorizedRandomSynthesizer):
        rank = p.R1.shape[1]
        return [sum(p.R1[position, t] * p.R2[j, t] for t in range(rank)) for j in range(p.R1.shape[0])]
    return [p.R[position, j] for j in range(p.R.shape[1])]


def naive_synthesizer(own):
    """Tay et al. (2021), "Mixture of Synthesizers": softmax(Σ_c α_c S_c) V over the components ``own`` and ``mix``
    (dense, random, the scaled dot product), under the causal mask; query i sits at position i (bottom-right:
    i + m − n)."""
    other = "random" if own == "dense" else "dense"

    def fn(q, k, v, causal, params, mix=(), alpha=None, scale=None, **others):
        mix = (mix,) if isinstance(mix, str) else tuple(mix)
        names = (own, *mix)
        alpha = [1.0 / len(names)] * len(names) if alpha is None else list(alpha)
        weight = dict(zip(names, alpha, strict=True))
        found = {own: params, other: others.get(f"{other}_params")}
        n, m = len(q), len(k)
        shift = m - n if causal == "bottom-right" else 0
        bias = np.zeros((n, m))
        for i in range(n):
            dense = naive_dense_synthesizer_row(q[i], found["dense"]) if "dense" in weight else None
            rand = naive_random_synthesizer_row(found["random"], max(i + shift, 0)) if "random" in weight else None
            for j in range(m):
                if dense is not None:
                    bias[i, j] += weight["dense"] * dense[j]
                if rand is not None:
                    bias[i, j] += weight["random"] * rand[j]
        if "dot" in weight:
            dot_scale = weight["dot"] * (1.0 / math.sqrt(q.shape[1]) if scale is None else scale)
        else:
            dot_scale = 0.0
        return naive_sdpa(q, k, v, allowed=causal_allowed(n, m, causal), bias=bias, scale=dot_scale)[0]

    return fn


def _dense_params(rng, d, length):
    """A dense synthesizer with random, non-zero weights and biases."""
    return DenseSynthesizer(W1=rng.standard_normal((d, d)) / math.sqrt(d), b1=rng.standard_normal(d),
                            W2=rng.standard_normal((d, length)) / math.sqrt(d), b2=rng.standard_normal(length))


def _random_length(n, m, causal):
    """A maximum length covering the queries' positions and the keys, plus one unused position."""
    return 1 + (m if causal == "bottom-right" else max(n, m))


# ------------------------------------------------------------------------------ positional encodings


def naive_query_position(i, n, m, causal):
    """Query i sits at position i, or i + m − n when the n queries are the last n of m (bottom-right)."""
    return i + (m - n if causal == "bottom-right" else 0)


def naive_alibi(q, k, v, causal, slopes=0.5, form="causal", scale=None):
    """Press et al. (2022), §3: s_ij = q_i·k_j·scale − m·(p_i − j), or − m·|p_i − j| (symmetric); one head, m = slopes.
    """
    n, m = len(q), len(k)
    bias = np.zeros((n, m))
    for i in range(n):
        for j in range(m):
            distance = naive_query_position(i, n, m, causal) - j
            bias[i, j] = -slopes * (abs(distance) if form == "symmetric" else distance)
    allowed = None if causal is False else naive_causal_allowed(n, m, "top-left" if causal is True else causal)
    return naive_sdpa(q, k, v, allowed, bias, scale)[0]


def naive_rotate(x, positions, base, pairing, rotary_dim, scaling):
    """Su et al. (2021), Eq. 34: pair t of dimensions turned by (p/s)·base^(−2t/r), one scalar at a time."""
    rows, d = x.shape
    r = d if rotary_dim is None else rotary_dim
    out = x.copy()
    for row in range(rows):
        for t in range(r // 2):
            a, b = (2 * t, 2 * t + 1) if pairing == "interleaved" else (t, t + r // 2)
            angle = positions[row] / scaling * base ** (-2 * t / r)
            out[row, a] = x[row, a] * math.cos(angle) - x[row, b] * math.sin(angle)
            out[row, b] = x[row, a] * math.sin(angle) + x[row, b] * math.cos(angle)
    return out


def naive_rope(q, k, v, causal, base=10000.0, pairing="interleaved", rotary_dim=None, scaling=1.0, scale=None):
    """RoFormer: softmax attention of q_i and k_j rotated by their positions p_i and j."""
    n, m = len(q), len(k)
    q_rot = naive_rotate(q, [naive_query_position(i, n, m, causal) for i in range(n)], base, pairing, rotary_dim,
                         scaling)
    k_rot = naive_rotate(k, list(range(m)), base, pairing, rotary_dim, scaling)
    allowed = None if causal is False else naive_causal_allowed(n, m, "top-left" if causal is True else causal)
    return naive_sdpa(q_rot, k_rot, v, allowed, None, scale)[0]
def naive_deberta_delta(r, k, position_buckets=None, max_position=None):
    """The paper's δ for a distance r = i − j: 0 if r ≤ −k, 2k − 1 if r ≥ k, else r + k; with log buckets r is
    first replaced by its bucket (microsoft/DeBERTa da_utils.make_log_bucket_dict, written out: |r| ≤ mid
    stays, beyond it sign(r)·(⌈log(|r|/mid)/log((max_position − 1)/mid)·(mid − 1)⌉ + mid), r clipped to
    ±(max_position − 1)) and k is position_buckets."""
    if position_buckets is not None:
        k = position_buckets
        r = max(-(max_position - 1), min(max_position - 1, r))
        mid = position_buckets // 2
        if abs(r) > mid:
            size = math.ceil(math.log(abs(r) / mid) / math.log((max_position - 1) / mid) * (mid - 1)) + mid
            r = size if r > 0 else -size
    if r <= -k:
        return 0
    if r >= k:
        return 2 * k - 1
    return r + k


def naive_deberta(q, k, v, causal, params, terms=("c2p", "p2c"), p2c_index="paper", position_buckets=None,
                  max_position=None, scale=None):
    """He et al. (2021) Eq. 4 pair by pair: Ã_ij = q_i·k_j + q_i·K^r[δ(i, j)] + k_j·Q^r[δ(j, i)] (δ(i, j) with the
    official code's p2c index), all over √((1 + #terms)·d); query i at position i (+ m − n bottom-right)."""
    n, d = q.shape
    m = k.shape[0]
    span = params.pos_key.shape[0] // 2
    shift = m - n if causal == "bottom-right" else 0
    scale = 1.0 / math.sqrt((1 + len(terms)) * d) if scale is None else scale
    bias = np.zeros((n, m))
    for i in range(n):
        for j in range(m):
            r = i + shift - j
            s = 0.0
            if "c2p" in terms:
                row = naive_deberta_delta(r, span, position_buckets, max_position)
                s += sum(q[i, c] * params.pos_key[row, c] for c in range(d))
            if "p2c" in terms:
                row = naive_deberta_delta(r if p2c_index == "official" else -r, span, position_buckets, max_position)
                s += sum(k[j, c] * params.pos_query[row, c] for c in range(d))
            bias[i, j] = s * scale
    return naive_sdpa(q, k, v, causal_allowed(n, m, causal), bias, scale)[0]


def _deberta_params(span, **fixed_options):
    """K^r and Q^r (2·span rows) drawn at random, and the setting's other options."""
    def options(rng, n, m, d, causal):
        return {"params": DebertaParams(rng.standard_normal((2 * span, d)), rng.standard_normal((2 * span, d)))} \
            | fixed_options

    return options


# ------------------------------------------------------------------------------ beyond pairwise attention


def naive_layer_norm(row, gamma, beta, eps=1e-5):
    """LayerNorm of one row by loops: γ_c (x_c − μ)/√(σ² + ε) + β_c, σ² the biased variance."""
    d = len(row)
    mu = sum(row) / d
    var = sum((x - mu) ** 2 for x in row) / d
    return [gamma[c] * (row[c] - mu) / math.sqrt(var + eps) + beta[c] for c in range(d)]


def naive_long_short(q, k, v, causal, params, window=2, segment=None, dual_ln="keys", projection_input="raw",
                     scale=None):
    """Zhu et al. 2021 for one sequence by loops. Window (official code): the query at position p (i, or i + m − n
    bottom-right) sees keys s·w − e ≤ j < (s + 1)·w + e, s = ⌊p / w⌋, e = max(⌊w/2⌋, 1); causal p − w < j ≤ p.
    Projection: ρ-th projected key Σ_j P_jρ k_j with P_jρ = e^{(k_j W^P)_ρ} / Σ_l e^{(k_l W^P)_ρ} over all keys, or
    causal over each segment of l keys, seen by the queries of later segments only. DualLN: LN_L on the window's
    keys (and values), LN_G on the projected ones. One softmax over both: out_i = Σ a_iρ v̄_ρ + Σ_j b_ij ṽ_j."""
    n, d = q.shape
    m, d_v = v.shape
    r = params.w_proj.shape[1]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    segment = window if segment is None else segment
    short, long_ = params.ln_short, params.ln_long
    keys = [list(k[j]) if dual_ln == "none" else naive_layer_norm(list(k[j]), short.gamma, short.beta)
            for j in range(m)]
    values = [naive_layer_norm(list(v[j]), short.gamma, short.beta) if dual_ln == "keys_values" else list(v[j])
              for j in range(m)]
    src_k, src_v = (keys, values) if projection_input == "normalized" else ([list(x) for x in k], [list(x) for x in v])
    groups = [] if r == 0 or m == 0 else [list(range(m))] if causal is False else \
        [list(range(s * segment, (s + 1) * segment)) for s in range(m // segment)]
    projected = []                                                 # (first segment after it, key, value)
    for number, group in enumerate(groups):
        for rho in range(r):
            P = naive_softmax({j: sum(k[j, a] * params.w_proj[a, rho] for a in range(d)) for j in group})
            key = [sum(P[j] * src_k[j][c] for j in group) for c in range(d)]
            value = [sum(P[j] * src_v[j][c] for j in group) for c in range(d_v)]
            if dual_ln != "none":
                key = naive_layer_norm(key, long_.gamma, long_.beta)
            if dual_ln == "keys_values":
                value = naive_layer_norm(value, long_.gamma, long_.beta)
            projected.append((number + 1, key, value))
    out = np.zeros((n, d_v))
    for i in range(n):
        p = i + (m - n if causal == "bottom-right" else 0)
        if causal is False:
            e, first = max(window // 2, 1), p // window * window
            window_keys = [j for j in range(m) if first - e <= j < first + window + e]
        else:
            window_keys = [j for j in range(m) if p - window < j <= p]
        scores = {("window", j): sum(q[i, c] * keys[j][c] for c in range(d)) * scale for j in window_keys}
        for t, (after, key, _) in enumerate(projected):
            if causal is False or after <= p // segment:
                scores[("projected", t)] = sum(q[i, c] * key[c] for c in range(d)) * scale
        for (kind, j), a in naive_softmax(scores).items():
            row = values[j] if kind == "window" else projected[j][2]
            for c in range(d_v):
                out[i, c] += a * row[c]
    return out


def _long_short_params(rank, **fixed_options):
    """W^P of unit-variance entries (P far from uniform) and layer norms with drawn γ near 1 and β near 0."""
    def options(rng, n, m, d, causal):
        def ln():
            return LayerNormParams(1.0 + 0.3 * rng.standard_normal(d), 0.3 * rng.standard_normal(d))
        return {"params": LongShortParams(rng.standard_normal((d, rank)), ln(), ln())} | fixed_options

    return options
# ------------------------------------------------------------------------------ beyond: top-k and Sinkformer


def naive_topk(q, k, v, causal, top_k=8, ties="threshold", mask=None, scale=None, method=None, chunk_size=None):
    """Zhao et al. (2019) Eq. 5-6 row by row: the scores a row may see, sorted largest first (a NaN score above
    every number; equal scores by key index), the first k kept ("threshold": and every score equal to the k-th),
    then softmax over the kept keys only. ``method`` and ``chunk_size`` say how refattn computes it (Gupta et
    al.'s query chunks give the same rows): nothing here."""
    n, d = q.shape
    m = k.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    visible = both(causal_allowed(n, m, causal), mask)
    kept = np.zeros((n, m), dtype=bool)
    for i in range(n):
        row = []
        for j in range(m):
            if visible is None or visible[i, j]:
                s = sum(q[i, c] * k[j, c] for c in range(d)) * scale
                row.append((math.inf if math.isnan(s) or math.isinf(s) else s, j))
        row.sort(key=lambda pair: (-pair[0], pair[1]))
        if not row:
            continue
        last = min(top_k, len(row)) - 1
        for rank, (s, j) in enumerate(row):
            if rank <= last or (ties == "threshold" and s == row[last][0]):
                kept[i, j] = True
    return naive_sdpa(q, k, v, kept, None, scale)[0]



def naive_sinkformer(q, k, v, causal, iterations=3, scale=None):
    """Sander et al. (2022): K⁰_ij = exp(q_i·k_j·scale), then T single steps, rows first: each row divided by
    its sum, each column scaled to sum n/m; out_i = Σ_j K_ij v_j."""
    n, d = q.shape
    m, d_v = v.shape
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    K = [[math.exp(sum(q[i, c] * k[j, c] for c in range(d)) * scale) for j in range(m)] for i in range(n)]
    for t in range(iterations):
        if t % 2 == 0:
            for i in range(n):
                total = sum(K[i])
                K[i] = [x / total for x in K[i]]
        else:
            for j in range(m):
                total = sum(K[i][j] for i in range(n))
                for i in range(n):
                    K[i][j] = K[i][j] * (n / m) / total
    return np.array([[sum(K[i][j] * v[j, c] for j in range(m)) for c in range(d_v)] for i in range(n)])


@dataclass(frozen=True)
class NaiveCase:
    """The naive twin of one registered mechanism.

    Attributes
    ----------
    fn : callable
        ``fn(q, k, v, causal, **options) -> (n, d_v)`` for one sequence (``causal`` as ``apply`` takes it).
    options : tuple of callables
        One per setting tried: ``options(rng, n, m, d, causal) -> dict``, passed to ``apply`` and ``fn``.
    lengths : tuple of int
        Self-attention lengths tried besides the record's ``example_length`` (edge cases of the definition).
    value_width_d : bool
        v has q's width d (multi-head's value-side input has d_model columns).
    """

    fn: Callable[..., np.ndarray]
    options: tuple[Callable[..., dict], ...]
    lengths: tuple[int, ...] = ()
    value_width_d: bool = False


def fixed(**options):
    """A setting without draws: the same options at every shape."""
    return lambda rng, n, m, d, causal: dict(options)


DEFAULTS = fixed()


def _keys(rng, n, m, causal, r):
    """r distinct keys per row, drawn uniformly; bottom-right draws the rows of the m × m pattern."""
    rows = m if causal == "bottom-right" else n
    return np.array([np.sort(rng.choice(m, size=r, replace=False)) for _ in range(rows)])


def _random_blocks(rng, n, block_size=2, num_random_blocks=1, num_global_blocks=2, num_window_blocks=3):
    """BigBird's R_I: r blocks per non-global row, outside its window and the global blocks (-1 for none)."""
    nb = n // block_size
    R = np.full((nb, num_random_blocks), -1)
    for I in range(nb):
        if not _bigbird_global(I, nb, num_global_blocks):
            pool = [J for J in range(nb) if not _bigbird_global(J, nb, num_global_blocks)
                    and abs(I - J) > (num_window_blocks - 1) // 2]
            R[I] = np.sort(rng.choice(pool, size=num_random_blocks, replace=False))
    return R


def _heads(num_heads=None, mask=False):
    """Multi-head settings: random projections with biases (d_k = 3, d_v = 2 per head), ``num_heads``
    (None: apply's default, 2) and, with ``mask``, a random boolean mask shared by the heads."""
    def options(rng, n, m, d, causal):
        drawn = {"params": random_params(rng, d, 2 if num_heads is None else num_heads, d_k=3, d_v=2)}
        drawn |= {} if num_heads is None else {"num_heads": num_heads}
        return drawn | ({"mask": rng.random((n, m)) < 0.7} if mask else {})

    return options


def _sinkhorn_options(block_size=None, extra_columns=0, **fixed_options):
    """A random sorting network with biases and Gumbel noise for the N = m / b blocks (b: the given or default size);
    ``extra_columns`` more output columns than blocks (only the first N are used)."""
    def options(rng, n, m, d, causal):
        b = block_size or next(c for c in range(1, m + 1) if m % c == 0 and c * c >= m)
        N, h = m // b, 3
        net = SortNetParams(rng.standard_normal((d, h)) / 2, rng.standard_normal(h) / 4,
                            rng.standard_normal((h, N + extra_columns)) / 2, rng.standard_normal(N + extra_columns) / 4)
        drawn = {"sort_net": net, "gumbel": rng.gumbel(size=(N, N))} | fixed_options
        return drawn | ({} if block_size is None else {"block_size": block_size})

    return options


def _informer_sample(r, visible=False):
    """r keys per query, uniform with replacement; ``visible``: causal query i draws from j <= i only."""
    def options(rng, n, m, d, causal):
        high = [min(i + 1, m) if visible and causal else m for i in range(n)]
        return {"sampled_keys": np.array([rng.integers(0, h, size=r) for h in high]).reshape(n, r)}

    return options


def _sortcut(rng, n, m, d, causal):
    """SortCut c = 2 (no causal form: the causal settings try one iteration instead)."""
    return _sinkhorn_options()(rng, n, m, d, causal) | ({"iterations": 1} if causal else {"sortcut": 2})


def _pooling_params(kernel_size, **fixed_options):
    """Poolingformer's second-level parameters drawn at random (d_v = d), and the setting's other options."""
    def options(rng, n, m, d, causal):
        params = PoolingformerParams(rng.standard_normal((d, d)) / 2, rng.standard_normal((d, d)) / 2,
                                     rng.standard_normal((d, kernel_size)))
        return {"params": params, "kernel_size": kernel_size} | fixed_options

    return options


def _lowrank_params(rank, **fixed_options):
    """The low-rank module's projections W_q, W_k (d × rank) drawn at random, and the setting's other options."""
    def options(rng, n, m, d, causal):
        return {"params": LowRankBandParams(rng.standard_normal((d, rank)), rng.standard_normal((d, rank)))} | \
            fixed_options

    return options


def _gaussian_params(hidden, **fixed_options):
    """The centre and window predictors (W_p, v_p, v_d, W_d, u_d; width ``hidden``) drawn at random, and the
    setting's other options."""
    def options(rng, n, m, d, causal):
        return {"params": GaussianPriorParams(rng.standard_normal((d, hidden)), rng.standard_normal(hidden),
                                              rng.standard_normal(hidden), rng.standard_normal((d, hidden)),
                                              rng.standard_normal(hidden))} | fixed_options

    return options


def _talking(key_heads, num_heads, value_heads, mask=False):
    """Talking-heads parameters: random projections with biases (d_k = 3, d_v = 2 per head), P_l (h_k × h) and
    P_w (h × h_v) standard normal; with ``mask``, a random boolean mask shared by the heads."""
    def options(rng, n, m, d, causal):
        proj = random_params(rng, d, 1, d_k=3 * key_heads, d_v=2 * value_heads)
        params = TalkingHeadsParams(proj, rng.standard_normal((key_heads, num_heads)),
                                    rng.standard_normal((num_heads, value_heads)))
        return {"params": params} | ({"mask": rng.random((n, m)) < 0.7} if mask else {})

    return options


def _gaussian_transformer_params(w_high=1.0, b_low=-2.0, **fixed_options):
    """Gaussian Transformer's w ~ U[0, w_high), b ~ U(b_low, 0], and the setting's other options."""
    def options(rng, n, m, d, causal):
        return {"params": GaussianTransformerParams(rng.uniform(0, w_high), -rng.uniform(0, -b_low))} | fixed_options

    return options


def _collaborative(num_heads, shared_dim, mask=False, content=True):
    """Collaborative parameters: W̃_Q, W̃_K (d × D̃_k), mixing (h × D̃_k), values (d_v = 2 per head), output and biases
    standard normal; ``content``: a content bias too; ``mask``: a random boolean mask shared by the heads."""
    def options(rng, n, m, d, causal):
        h = num_heads
        params = CollaborativeParams(
            rng.standard_normal((d, shared_dim)) / 2, rng.standard_normal((d, shared_dim)) / 2,
            rng.standard_normal((h, shared_dim)), rng.standard_normal((d, 2 * h)) / 2,
            rng.standard_normal((2 * h, d)) / 2, rng.standard_normal((d, h)) if content else None,
            rng.standard_normal(2 * h), rng.standard_normal(d))
        return {"params": params} | ({"mask": rng.random((n, m)) < 0.7} if mask else {})

    return options


def _camtl_params(extra, block_size, *, embedding=False, **fixed_options):
    """CA-MTL parameters of unit scale (a trained prior: A, the FiLM and its biases all random), L = m + extra, block
    width c (None: L, one block), three tasks, task 2 (or z itself with ``embedding``), and the other options."""
    def options(rng, n, m, d, causal):
        L, d_z = m + extra, 3
        c = L if block_size is None else block_size
        params = CamtlParams(rng.standard_normal((3, d_z)), rng.standard_normal((d_z, d_z)), rng.standard_normal(d_z),
                             rng.standard_normal((d_z, 2 * c)), rng.standard_normal(2 * c),
                             rng.standard_normal((L, c)))
        chosen = {"task_embedding": rng.standard_normal(d_z)} if embedding else {"task_id": 2}
        return {"params": params} | chosen | fixed_options

    return options


# ------------------------------------------------------------------------------ prior from lower layers (§4.5.2)


def naive_map_stack(q, k, v, causal, projections, combine, scale=None):
    """An attention-only stack by loops: layer 1 reads q and k, layer l ≥ 2 reads q W_q⁽ˡ⁾ and k W_k⁽ˡ⁾; its map
    Â⁽ˡ⁾_ij = combine(l, i, j, s_ij, Â⁽ˡ⁻¹⁾) from its score s_ij = Σ_c q_ic k_jc · scale (Â⁽¹⁾ = S⁽¹⁾); the output
    is Σ_j softmax_j(Â⁽ᴸ⁾_ij) v_j over the keys row i may see (none: a zero row)."""
    n, d = q.shape
    m, d_v = v.shape
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    allowed = causal_allowed(n, m, causal)
    below = None
    for l in range(np.shape(projections.w_q)[0] + 1):
        if l == 0:
            ql, kl = q, k
        else:
            wq, wk = projections.w_q[l - 1], projections.w_k[l - 1]
            ql = np.array([[sum(q[i, c] * wq[c, e] for c in range(d)) for e in range(d)] for i in range(n)])
            kl = np.array([[sum(k[j, c] * wk[c, e] for c in range(d)) for e in range(d)] for j in range(m)])
        A_hat = np.zeros((n, m))
        for i in range(n):
            for j in range(m):
                s = sum(ql[i, c] * kl[j, c] for c in range(d)) * scale
                A_hat[i, j] = s if l == 0 else combine(l, i, j, s, below)
        below = A_hat
    out = np.zeros((n, d_v))
    for i in range(n):
        seen = [j for j in range(m) if allowed is None or allowed[i, j]]
        for j, a in zip(seen, _softmax_list([below[i, j] for j in seen]), strict=True):
            for c in range(d_v):
                out[i, c] += a * v[j, c]
    return out


def naive_realformer(q, k, v, causal, projections, layers=None, scale=None):
    """RealFormer (He et al. 2021, §3): Â⁽ˡ⁾_ij = s⁽ˡ⁾_ij + Â⁽ˡ⁻¹⁾_ij, the raw scores' residual."""
    return naive_map_stack(q, k, v, causal, projections, lambda l, i, j, s, below: s + below[i, j], scale)


def naive_lazyformer(q, k, v, causal, projections, layers=None, block=2, scale=None):
    """Lazyformer (Ying et al. 2021): the first layer of each block of ``block`` layers computes its map, the
    others reuse the map below unchanged."""
    return naive_map_stack(q, k, v, causal, projections,
                           lambda l, i, j, s, below: s if l % block == 0 else below[i, j], scale)


def naive_conv(A, kernel, bias, i, j, activation="relu"):
    """Entry (i, j) of a one-channel "same" convolution by its taps: b + Σ_{a,b} K_ab · A[i + a − p, j + b − p] (0
    outside the map), then ReLU."""
    n, m = A.shape
    k_h, k_w = kernel.shape
    total = bias
    for a in range(k_h):
        for b in range(k_w):
            r, c = i + a - k_h // 2, j + b - k_w // 2
            if 0 <= r < n and 0 <= c < m:
                total += kernel[a, b] * A[r, c]
    return max(total, 0.0) if activation == "relu" else total


def naive_predictive(q, k, v, causal, projections, convs, layers=None, alpha=0.5, activation="relu", scale=None):
    """Predictive Attention (Wang et al. 2021; survey §4.5.2): Â⁽ˡ⁾_ij = α s_ij + (1 − α) conv⁽ˡ⁾(Â⁽ˡ⁻¹⁾)_ij, one
    channel; no causal form."""
    assert causal is False, "no causal form"

    def combine(l, i, j, s, below):
        conv = convs[l - 1]
        return alpha * s + (1 - alpha) * naive_conv(below, conv.kernel[0, 0], conv.bias[0], i, j, activation)
    return naive_map_stack(q, k, v, causal, projections, combine, scale)


def _predictive(layers, **options):
    """Random projections and one-channel 3 × 3 convolutions (N(0, 1/3) taps, N(0, 1) biases) for ``layers``."""
    def draw(rng, n, m, d, causal):
        convs = tuple(AttentionConv(rng.standard_normal((1, 1, 3, 3)) / math.sqrt(3), rng.standard_normal(1))
                      for _ in range(layers - 1))
        return _stack_projections(layers)(rng, n, m, d, causal) | {"convs": convs} | options
    return draw


def _stack_projections(layers, d_scale=1.0):
    """Random per-layer projections for ``layers`` layers (N(0, 1/d) entries, times ``d_scale``)."""
    def options(rng, n, m, d, causal):
        shape = (layers - 1, d, d)
        return {"projections": StackProjections(d_scale * rng.standard_normal(shape) / math.sqrt(d),
                                                d_scale * rng.standard_normal(shape) / math.sqrt(d))}
    return options


# ------------------------------------------------------------------------------ multi-head variants (survey §4.6)


def naive_squash(s):
    """Sabour et al. Eq. (1): ‖s‖² / (1 + ‖s‖²) · s / ‖s‖, one coordinate at a time (0 for s = 0)."""
    norm2 = sum(x * x for x in s)
    if norm2 == 0.0:
        return [0.0 for _ in s]
    return [norm2 / (1.0 + norm2) * x / math.sqrt(norm2) for x in s]


def naive_dynamic_routing(u, iterations):
    """Sabour et al. Procedure 1 for one position; u[i][j] is the vote (a list) of input i for output j."""
    h, N, d = len(u), len(u[0]), len(u[0][0])
    b = [[0.0] * N for _ in range(h)]
    for _ in range(iterations):
        c = []
        for i in range(h):
            z = sum(math.exp(b[i][j]) for j in range(N))
            c.append([math.exp(b[i][j]) / z for j in range(N)])
        v = [naive_squash([sum(c[i][j] * u[i][j][e] for i in range(h)) for e in range(d)]) for j in range(N)]
        for i in range(h):
            for j in range(N):
                b[i][j] += sum(u[i][j][e] * v[j][e] for e in range(d))
    return v


def naive_em_routing(u, beta_u, beta_a, iterations, inverse_temperature=1.0, eps=1e-8):
    """Hinton et al. Procedure 1 for one position, every input activation 1, no E-step after the last M-step."""
    h, N, d = len(u), len(u[0]), len(u[0][0])
    R = [[1.0 / N] * N for _ in range(h)]
    for t in range(iterations):
        mu, var, a = [], [], []
        for j in range(N):
            r = sum(R[i][j] for i in range(h))
            mu_j = [sum(R[i][j] * u[i][j][e] for i in range(h)) / r for e in range(d)]
            var_j = [sum(R[i][j] * (u[i][j][e] - mu_j[e]) ** 2 for i in range(h)) / r + eps for e in range(d)]
            cost = sum((beta_u[j] + math.log(math.sqrt(var_j[e]))) * r for e in range(d))
            a.append(1.0 / (1.0 + math.exp(-inverse_temperature * (beta_a[j] - cost))))
            mu.append(mu_j)
            var.append(var_j)
        if t == iterations - 1:
            break
        for i in range(h):
            p = [a[j] * math.prod(math.exp(-(u[i][j][e] - mu[j][e]) ** 2 / (2 * var[j][e]))
                                  / math.sqrt(2 * math.pi * var[j][e]) for e in range(d)) for j in range(N)]
            R[i] = [p[j] / sum(p) for j in range(N)]
    return [[a[j] * x for x in mu[j]] for j in range(N)]


def capsule_routing(q, k, v, causal, params, num_heads=2, routing="dynamic", iterations=3, mask=None):
    """Li et al. §3: heads (naive_sdpa per head) as input capsules, votes head_i W_ij, routed per position,
    output capsules concatenated and projected: Concat(Ω_1, …, Ω_N) Wᴼ + bᴼ."""
    allowed = both(causal_allowed(len(q), len(k), causal), mask)
    h, N, d_v, d_cap = params.w_votes.shape
    d_k = params.w_q.shape[1] // h
    heads = []
    for i in range(h):
        ks, vs = slice(i * d_k, (i + 1) * d_k), slice(i * d_v, (i + 1) * d_v)
        heads.append(naive_sdpa(q @ params.w_q[:, ks] + params.b_q[ks], k @ params.w_k[:, ks] + params.b_k[ks],
                                v @ params.w_v[:, vs] + params.b_v[vs], allowed=allowed)[0])
    out = np.zeros((len(q), params.w_o.shape[1]))
    for t in range(len(q)):
        u = [[[sum(heads[i][t, c] * params.w_votes[i, j, c, e] for c in range(d_v)) for e in range(d_cap)]
              for j in range(N)] for i in range(h)]
        if routing == "dynamic":
            capsules = naive_dynamic_routing(u, iterations)
        else:
            capsules = naive_em_routing(u, params.beta_u, params.beta_a, iterations)
        concat = [x for capsule in capsules for x in capsule]
        for c in range(params.w_o.shape[1]):
            out[t, c] = sum(concat[r] * params.w_o[r, c] for r in range(len(concat))) + params.b_o[c]
    return out


def _capsules(num_heads=2, num_capsules=3, d_capsule=2, mask=False, **fixed_options):
    """Capsule routing settings: random projections, vote transforms and β with biases (d_k = 3, d_v = 2),
    N output capsules of width d_capsule, and with ``mask`` a random boolean mask shared by the heads."""
    def options(rng, n, m, d, causal):
        h, N = num_heads, num_capsules
        heads = random_params(rng, d, h, d_k=3, d_v=2)
        params = CapsuleRoutingParams(
            heads.w_q, heads.w_k, heads.w_v, rng.standard_normal((h, N, 2, d_capsule)),
            rng.standard_normal((N * d_capsule, d)) / math.sqrt(N * d_capsule), rng.standard_normal(N),
            rng.standard_normal(N), heads.b_q, heads.b_k, heads.b_v, rng.standard_normal(d))
        drawn = {"params": params, "num_heads": h} | fixed_options
        return drawn | ({"mask": rng.random((n, m)) < 0.7} if mask else {})

    return options


# ------------------------------------------------------------------------------ positional encodings


def naive_t5_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    """mesh_tensorflow's ``_relative_position_bucket`` (transformer/transformer_layers.py) for one integer
    r = memory position − query position, in scalar Python."""
    ret, n = 0, -relative_position
    if bidirectional:
        num_buckets //= 2
        ret += num_buckets if n < 0 else 0
        n = abs(n)
    else:
        n = max(n, 0)
    max_exact = num_buckets // 2
    if n < max_exact:
        return ret + n
    large = max_exact + int(math.log(n / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact))
    return ret + min(large, num_buckets - 1)


def naive_t5_bias(q, k, v, causal, params, bidirectional=None, max_distance=128, scale=None):
    """Raffel et al. (2020) §2.1: s_ij = q_i·k_j·scale + b[bucket(j − p_i)], p_i = i (+ m − n bottom-right),
    bidirectional buckets without a causal mask unless told."""
    n, m = len(q), len(k)
    offset = m - n if causal == "bottom-right" else 0
    bidirectional = causal is False if bidirectional is None else bidirectional
    table = [float(x) for x in params.table]
    bias = np.array([[table[naive_t5_bucket(j - (i + offset), bidirectional, len(table), max_distance)]
                      for j in range(m)] for i in range(n)]).reshape(n, m)
    return naive_sdpa(q, k, v, allowed=causal_allowed(n, m, causal), bias=bias, scale=scale)[0]


def naive_kerple(q, k, v, causal, params, kind="log", scale=None):
    """Chi et al. (2022) §3: s_ij = q_i·k_j·scale − r1·log(1 + r2|p_i − j|) ("log") or − r1·|p_i − j|^r2
    ("power"), p_i = i (+ m − n bottom-right)."""
    n, m = len(q), len(k)
    offset = m - n if causal == "bottom-right" else 0
    r1, r2 = float(params.r1), float(params.r2)
    kernel = (lambda t: -r1 * math.log(1 + r2 * t)) if kind == "log" else (lambda t: -r1 * t ** r2)
    bias = np.array([[kernel(abs(i + offset - j)) for j in range(m)] for i in range(n)]).reshape(n, m)
    return naive_sdpa(q, k, v, allowed=causal_allowed(n, m, causal), bias=bias, scale=scale)[0]


def _t5_table(num_buckets=32, **fixed_options):
    """A random one-head table of ``num_buckets`` scalars, wide enough (±3) to move the weights."""
    return lambda rng, n, m, d, causal: {"params": T5BiasParams(rng.uniform(-3.0, 3.0, num_buckets))} | fixed_options


def _kerple(kind="log", r1_high=2.0, r2_high=1.0, **fixed_options):
    """Random one-head r1 ∈ (0, r1_high), r2 ∈ (0, r2_high) for ``kind``."""
    return lambda rng, n, m, d, causal: {
        "params": KerpleParams(rng.uniform(0.01, r1_high), rng.uniform(0.01, r2_high)), "kind": kind,
    } | fixed_options
# ------------------------------------------------------------------------------ positional (survey §5.1)


def _query_position(i, n, m, causal):
    """Position of query i: i, or i + m − n for the last n of m positions."""
    return i + (m - n if causal == "bottom-right" else 0)


def naive_relative_pe(q, k, v, causal, embeddings, max_distance=None):
    """Shaw et al. 2018, Eqs. (3)-(6): e_ij = q_i(k_j + a^K_ij)ᵀ/√d, z_i = Σ_j α_ij (v_j + a^V_ij),
    a_ij = w_clip(j − i, k), one pair at a time."""
    n, d = q.shape
    m, d_v = v.shape
    w_K, w_V = np.asarray(embeddings.keys), np.asarray(embeddings.values)
    K = (w_K.shape[0] - 1) // 2
    out = np.zeros((n, d_v))
    for i in range(n):
        pos = _query_position(i, n, m, causal)
        scores = {}
        for j in range(m):
            if causal is not False and j > pos:
                continue
            r = max(-K, min(K, j - pos)) + K
            scores[j] = sum(q[i, c] * (k[j, c] + w_K[r, c]) for c in range(d)) / math.sqrt(d)
        if not scores:
            continue
        top = max(scores.values())
        total = sum(math.exp(s - top) for s in scores.values())
        for j, s in scores.items():
            r = max(-K, min(K, j - pos)) + K
            for c in range(d_v):
                out[i, c] += math.exp(s - top) / total * (v[j, c] + w_V[r, c])
    return out


def _shaw(max_distance):
    def options(rng, n, m, d, causal):
        size = 2 * max_distance + 1
        return {"embeddings": RelativeEmbeddings(rng.standard_normal((size, d)), rng.standard_normal((size, 3)))}
    return options


def naive_sinusoid(p, d_r):
    """Transformer-XL's R_p: [sin(p f_0), …, sin(p f_{d_r/2−1}), cos(p f_0), …], f_c = 10000^(−2c/d_r)."""
    freqs = [10000.0 ** (-(2 * c) / d_r) for c in range(d_r // 2)]
    return [math.sin(p * f) for f in freqs] + [math.cos(p * f) for f in freqs]


def naive_transformer_xl(q, k, v, causal, params, clamp_len=None, method="direct", scale=None):
    """Dai et al. 2019, §3.3: A_ij = q_iᵀk_j + q_iᵀW_R R_{i−j} + uᵀk_j + vᵀW_R R_{i−j} (distance i + mlen − j,
    clamped at clamp_len), softmax over j ≤ i + mlen, one pair at a time (``method`` is the same maths)."""
    n, d = q.shape
    m, d_v = v.shape
    u, vb, W_r = (np.asarray(x) for x in (params.u, params.v, params.W_r))
    d_r = W_r.shape[0]
    out = np.zeros((n, d_v))
    for i in range(n):
        pos = _query_position(i, n, m, causal)
        scores = {}
        for j in range(pos + 1 if pos + 1 < m else m):
            p = pos - j if clamp_len is None else min(pos - j, clamp_len)
            R = naive_sinusoid(p, d_r)
            r = [sum(R[t] * W_r[t, c] for t in range(d_r)) for c in range(d)]
            s = sum((q[i, c] + u[c]) * k[j, c] + (q[i, c] + vb[c]) * r[c] for c in range(d))
            scores[j] = s / math.sqrt(d)
        if not scores:
            continue
        top = max(scores.values())
        total = sum(math.exp(s - top) for s in scores.values())
        for j, s in scores.items():
            for c in range(d_v):
                out[i, c] += math.exp(s - top) / total * v[j, c]
    return out


def _xl(**fixed_options):
    def options(rng, n, m, d, causal):
        d_r = d + d % 2 + 2                                        # R wider than the heads: W_R is not square
        return {"params": TransformerXLParams(rng.standard_normal(d), rng.standard_normal(d),
                                              rng.standard_normal((d_r, d))), **fixed_options}
    return options


# ------------------------------------------------------------------------------ attention-free mixers (beyond)


def naive_fnet(q, k, v, causal, method="fft"):
    """Lee-Thorp et al. (2022), Eq. (3) entry by entry: y_ic = Re Σ_j Σ_c′ e^{−2πi ij/m} v_jc′ e^{−2πi c′c/d}
    = Σ_j Σ_c′ cos(2π(ij/m + c′c/d)) v_jc′ (the two phases reduced mod 1 first); q and k are not read."""
    m, d = v.shape
    out = np.zeros((m, d))
    for i in range(m):
        for c in range(d):
            out[i, c] = sum(math.cos(2 * math.pi * ((i * j % m) / m + (c2 * c % d) / d)) * v[j, c2]
                            for j in range(m) for c2 in range(d))
    return out


def naive_layer_norm_row(x, eps=1e-5):
    """(x − μ)/√(σ² + ε) of one row, σ² the biased variance (Ba et al. 2016, gain 1, offset 0)."""
    e = len(x)
    mu = sum(x) / e
    var = sum((x_c - mu) ** 2 for x_c in x) / e
    return [(x_c - mu) / math.sqrt(var + eps) for x_c in x]


def naive_gmlp(q, k, v, causal, params, norm=True, tiny_attention=False, scale=None):
    """Liu et al. (2021), Eqs. (2)-(4) with Z₁ = q, Z₂ = v: out_ic = q_ic (Σ_j W_{p_i j} v̂_jc + b_{p_i}), j ≤ p_i
    when causal, v̂ = LayerNorm(v) (Fig. 1); aMLP (§4) adds Σ_j A_ij v̂_jc, A the softmax of q kᵀ·scale. A query
    before the first key (p_i < 0) has no row of W: 0."""
    n, m, e = len(q), len(v), v.shape[1]
    v_hat = np.array([naive_layer_norm_row(list(v[j])) if norm else list(v[j]) for j in range(m)]).reshape(m, e)
    allowed = None if causal is False else naive_causal_allowed(n, m, "top-left" if causal is True else causal)
    attention = naive_sdpa(q, k, v_hat, allowed, None, scale)[0] if tiny_attention else None
    out = np.zeros((n, e))
    for i in range(n):
        p = naive_query_position(i, n, m, causal)
        if p < 0:
            continue
        for c in range(e):
            gate = params.b[p]
            for j in range(m):
                if causal is False or j <= p:
                    gate += params.W[p, j] * v_hat[j, c]
            if attention is not None:
                gate += attention[i, c]
            out[i, c] = q[i, c] * gate
    return out


def _spatial_gating(**fixed_options):
    """W and b of unit scale (a trained unit, not the near-identity initialisation), ℓ = m + 2 > m."""
    def options(rng, n, m, d, causal):
        L = m + 2
        return {"params": SpatialGatingParams(rng.standard_normal((L, L)), rng.standard_normal(L)), **fixed_options}
    return options
# ------------------------------------------------------------------------------ attention-free mixers and hybrids


def naive_aft_bias(kind, params, i, j, n, m, causal, window, image_width):
    """Zhai et al. (2021), §3.2: w_tt′ of AFT-full/local (Σ_e u_te u′_t′e, local only for |t − t′| < s) for one
    pair; AFT-simple and AFT-conv have none here (conv's filter enters through its convolution)."""
    if kind not in ("full", "local"):
        return 0.0
    p = max(naive_query_position(i, n, m, causal), 0)
    if kind == "local" and not abs(p - j) < window:
        return 0.0
    return sum(params.u[p, e] * params.u_prime[j, e] for e in range(params.u.shape[1]))


def naive_aft_filters(params):
    """ŵ^i = γ_i (w^i − mean w^i)/std w^i + β_i, per head, by sums (the population std)."""
    heads, taps = params.w.shape[0], params.w[0].size
    out = []
    for h in range(heads):
        values = list(params.w[h].ravel())
        mean = sum(values) / taps
        std = math.sqrt(sum((x - mean) ** 2 for x in values) / taps)
        out.append([params.gamma[h] * (x - mean) / std + params.beta[h] for x in values])
    return out


def naive_aft(q, k, v, causal, kind="full", params=None, window=None, image_width=None):
    """Zhai et al. (2021), §3.1-§3.2, one scalar at a time: Y_tc = σ(Q_tc) Σ_t′ e^{K_t′c + w_tt′} V_t′c /
    Σ_t′ e^{K_t′c + w_tt′} over the keys t′ ≤ p_t the query sees. AFT-conv as the paper writes it:
    [conv(e^K ⊙ V, e^ŵ − 1) + Σ e^K ⊙ V] / [conv(e^K, e^ŵ − 1) + Σ e^K], the head's filter over the offsets
    t′ − p_t (image: the row and column offsets), its taps on keys the query sees."""
    n, d = q.shape
    m = len(k)
    filters = naive_aft_filters(params) if kind == "conv" else None
    out = np.zeros((n, d))
    for i in range(n):
        p = naive_query_position(i, n, m, causal)
        seen = [j for j in range(m) if causal is False or j <= p]
        if not seen:
            continue
        for c in range(d):
            if kind == "conv":
                heads = len(filters)
                h, s = c // (d // heads), params.w.shape[1]
                num = sum(math.exp(k[j, c]) * v[j, c] for j in seen)             # Σ e^K ⊙ V
                den = sum(math.exp(k[j, c]) for j in seen)                      # Σ e^K
                for j in seen:
                    if image_width is None:
                        r = j - p + s // 2
                        tap = r if 0 <= r < s else None
                    else:
                        dr = j // image_width - p // image_width + s // 2
                        dc = j % image_width - p % image_width + s // 2
                        tap = dr * s + dc if 0 <= dr < s and 0 <= dc < s else None
                    if tap is not None:
                        extra = math.exp(filters[h][tap]) - 1.0                 # e^ŵ − 1
                        num += extra * math.exp(k[j, c]) * v[j, c]
                        den += extra * math.exp(k[j, c])
            else:
                logits = {j: k[j, c] + naive_aft_bias(kind, params, i, j, n, m, causal, window, image_width)
                          for j in seen}
                top = max(logits.values())
                num = sum(math.exp(x - top) * v[j, c] for j, x in logits.items())
                den = sum(math.exp(x - top) for x in logits.values())
            out[i, c] = 1.0 / (1.0 + math.exp(-q[i, c])) * num / den
    return out


def _aft_params(kind, std=0.5, **options):
    """AFT settings with their parameters drawn here: u, u′ ~ N(0, std²) covering every position, or filters with
    γ, β drawn (not the initial 0, so the filter shows)."""
    def draw(rng, n, m, d, causal):
        options_here = dict(options)
        if kind == "simple":
            return {"kind": kind, **options}
        if kind == "conv":
            heads, s = options_here.pop("num_heads"), options_here.pop("kernel_size")
            w = rng.standard_normal((heads, s, s) if options_here.get("image_width") else (heads, s))
            params = AFTConvFilter(w, rng.standard_normal(heads), rng.standard_normal(heads))
            return {"kind": kind, "params": params, **options_here}
        length = max(n + (m - n if causal == "bottom-right" else 0), m, 1)
        params = AFTPositionBias(std * rng.standard_normal((length, 3)), std * rng.standard_normal((length, 3)))
        return {"kind": kind, "params": params, **options}
    return draw
# ------------------------------------------------------------------------------ Skyformer, Scatterbrain (§8)


def naive_skyformer(q, k, v, causal, landmarks, num_landmarks=None, gamma=0.1, pinv="iterative", iterations=6,
                    init="paper", scale=None):
    """Chen, Zeng et al. (Skyformer) Eq. (3)-(6) and §4.4: κ(x, y) = exp(−‖x − y‖²/2) by loops on the points
    q/d^{1/4}, k/d^{1/4}; the landmarks X_L = the listed points of [Q̃; K̃]; M = κ(X_L, X_L) + γI, D = diag(M1);
    Z the iteration's (or Gauss-Jordan's) inverse of D^{−1/2} M D^{−1/2};
    out_i = Σ_j Σ_ab κ(q̃_i, x_a) W_ab κ(x_b, k̃_j) v_j with W = D^{−1/2} Z D^{−1/2}."""
    assert causal is False, "Skyformer has no causal form"
    assert num_landmarks in (None, len(landmarks)), "num_landmarks counts the given landmarks"
    n, d = q.shape
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    root = math.sqrt(abs(scale))
    sign = 1.0 if scale >= 0 else -1.0
    points = [[sign * root * t for t in row] for row in q] + [[root * t for t in row] for row in k]

    def kappa(x, y):
        return math.exp(-sum((a - b) ** 2 for a, b in zip(x, y, strict=True)) / 2)

    X_L = [points[t] for t in landmarks]
    size = len(X_L)
    M = [[kappa(X_L[a], X_L[b]) + (gamma if a == b else 0.0) for b in range(size)] for a in range(size)]
    D = [1.0 / math.sqrt(sum(row)) for row in M]
    M_hat = [[D[a] * M[a][b] * D[b] for b in range(size)] for a in range(size)]
    Z = naive_inverse(M_hat) if pinv == "exact" else naive_iterative_pinv(M_hat, iterations, init)
    W = [[D[a] * Z[a][b] * D[b] for b in range(size)] for a in range(size)]
    out = np.zeros((n, v.shape[1]))
    for i in range(n):
        left = [kappa(points[i], X_L[a]) for a in range(size)]
        for j in range(len(k)):
            c = sum(left[a] * W[a][b] * kappa(X_L[b], points[n + j]) for a in range(size) for b in range(size))
            out[i] += c * v[j]
    return out


def naive_scatterbrain(q, k, v, causal, rotations, omega, num_buckets=None, kind="hyperbolic", scale=None):
    """Chen, Dao et al. (Scatterbrain) Algorithm 1 pair by pair: L_ij = φ(q̃_i)·φ(k̃_j) with Performer's features
    (hyperbolic: e^{−‖x‖²/2}/√(2r)·[e^{ω·x}, e^{−ω·x}]; positive: e^{−‖x‖²/2}/√r·[e^{ω·x}]); the pair is in the
    support when some round's angular hash argmax([xR; −xR]) agrees; there L_ij + (exp(q̃_i·k̃_j) − L_ij); the rows
    normalised by their sums over the pairs causal allows (a row with none: 0)."""
    n, d = q.shape
    m = len(k)
    assert num_buckets in (None, max(2 * len(rotations[0][0]), 1)), "num_buckets counts the rotations' buckets"
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    root = math.sqrt(abs(scale))
    q_t = [[(1.0 if scale >= 0 else -1.0) * root * t for t in row] for row in q]
    k_t = [[root * t for t in row] for row in k]
    r = len(omega)

    def phi(x):
        half_sq = sum(t * t for t in x) / 2
        u = [sum(w[c] * x[c] for c in range(d)) for w in omega]
        signs = (1.0, -1.0) if kind == "hyperbolic" else (1.0,)
        return [math.exp(sgn * u_i - half_sq) / math.sqrt(len(signs) * r) for sgn in signs for u_i in u]

    def bucket(x, R):
        u = [sum(x[c] * R[c][t] for c in range(d)) for t in range(len(R[0]) if d else 0)]
        both_ways = u + [-t for t in u]
        return max(range(len(both_ways)), key=lambda t: (both_ways[t], -t)) if both_ways else 0

    allowed = causal_allowed(n, m, causal)
    out = np.zeros((n, v.shape[1]))
    for i in range(n):
        total, acc = 0.0, np.zeros(v.shape[1])
        for j in range(m):
            if allowed is not None and not allowed[i, j]:
                continue
            a = sum(x * y for x, y in zip(phi(q_t[i]), phi(k_t[j]), strict=True))
            if any(bucket(q_t[i], R) == bucket(k_t[j], R) for R in rotations):
                a += math.exp(sum(x * y for x, y in zip(q_t[i], k_t[j], strict=True))) - a
            total += a
            acc += a * v[j]
        if total != 0.0:
            out[i] = acc / total
    return out


def _sb_draws(rounds, columns, r, **options):
    """Scatterbrain's draws: ``rounds`` LSH projections of ``columns`` columns (2·columns buckets) and r rows of ω."""
    return lambda rng, n, m, d, causal: {"rotations": rng.standard_normal((rounds, d, columns)),
                                         "num_buckets": max(2 * columns, 1), "omega": rng.standard_normal((r, d)),
                                         **options}


NAIVE: dict[str, NaiveCase] = {
    "sdpa": NaiveCase(sdpa, (DEFAULTS, lambda rng, n, m, d, causal: {"mask": rng.random((n, m)) < 0.7, "scale": 0.3})),
    "causal_mask": NaiveCase(sdpa, (DEFAULTS, fixed(scale=0.3))),
    "padding_mask": NaiveCase(padding_mask, (DEFAULTS, lambda rng, n, m, d, causal:
                                             {"key_lengths": int(rng.integers(1, m))})),
    "multi_head": NaiveCase(multi_head, (_heads(), _heads(num_heads=1, mask=True)), value_width_d=True),
    "cross_attention": NaiveCase(multi_head, (_heads(), _heads(num_heads=3, mask=True)), value_width_d=True),
    "global": NaiveCase(pattern(global_keep), (DEFAULTS, fixed(global_indices=(1, 4)))),
    "band": NaiveCase(pattern(band_keep), (DEFAULTS, fixed(window=1))),
    "dilated": NaiveCase(pattern(dilated_keep), (DEFAULTS, fixed(window=1, dilation=3))),
    "strided": NaiveCase(pattern(strided_keep), (DEFAULTS, fixed(stride=2))),
    "random": NaiveCase(pattern(random_keep), (lambda rng, n, m, d, causal: {"keys": _keys(rng, n, m, causal, 2)},
                                              lambda rng, n, m, d, causal: {"keys": _keys(rng, n, m, causal, 3)})),
    "block_local": NaiveCase(pattern(block_local_keep), (DEFAULTS, fixed(block=2))),
    "star_transformer": NaiveCase(pattern(star_keep), (DEFAULTS, fixed(ring=False)), lengths=(3, 4)),
    "longformer": NaiveCase(pattern(longformer_keep), (DEFAULTS, fixed(window=2, dilation=2, global_indices=(3,)))),
    "etc": NaiveCase(pattern(etc_keep), (
        DEFAULTS, fixed(num_global=1, window=2),
        lambda rng, n, m, d, causal: {"segment_ids": np.sort(rng.integers(0, 2, n - 2)), "hard_g2l": True,
                                      "hard_l2g": True}), lengths=(9,)),
    "bigbird": NaiveCase(pattern(bigbird_keep), (
        lambda rng, n, m, d, causal: {"random_blocks": _random_blocks(rng, n)},
        lambda rng, n, m, d, causal: {"num_random_blocks": 2, "num_global_blocks": 1, "random_blocks":
                                      _random_blocks(rng, n, num_random_blocks=2, num_global_blocks=1)},
        fixed(block_size=4, num_random_blocks=0, num_window_blocks=1)), lengths=(12,)),
    "sparse_transformer": NaiveCase(pattern(sparse_transformer_keep), (
        DEFAULTS, fixed(kind="fixed", c=2), fixed(local_window="official", part=1),
        fixed(kind="fixed", stride=4, c=1, subblock=1, part=2))),
    "bp_transformer": NaiveCase(pattern(bp_keep), (DEFAULTS, fixed(nodes_per_level=2), fixed(nodes_per_level=3)),
                                lengths=(6, 11)),
    "image_transformer": NaiveCase(pattern(image_transformer_keep), (
        DEFAULTS, fixed(order="block-raster"), fixed(flange="both", query_block=(2, 3), memory_flange=(1, 0)),
        fixed(order="block-raster", query_block=(1, 3), memory_flange=(2, 1))), lengths=(12,)),
    "axial": NaiveCase(axial, (DEFAULTS, fixed(width=2)), lengths=(12,)),
    "routing": NaiveCase(routing, (lambda rng, n, m, d, causal: {"centroids": rng.standard_normal((3, d))},
                                   lambda rng, n, m, d, causal: {"centroids": rng.standard_normal((2, d)),
                                                                 "balanced": True})),
    "reformer_lsh": NaiveCase(reformer_lsh, (
        lambda rng, n, m, d, causal: {"rotations": rng.standard_normal((2, d, 2)), "num_buckets": 4},
        lambda rng, n, m, d, causal: {"rotations": rng.standard_normal((3, d, 1)), "num_buckets": 2, "chunk_length": 2},
        lambda rng, n, m, d, causal: {"rotations": rng.standard_normal((2, d, 2)), "num_buckets": 4, "chunk_length": 3,
                                      "attend_across_buckets": True, "allow_duplicate_attention": True, "wrap": True},
        lambda rng, n, m, d, causal: {"rotations": rng.standard_normal((2, d, 1)), "num_buckets": 2, "wrap": True,
                                      "scale": 1.0},
        lambda rng, n, m, d, causal: {"rotations": rng.standard_normal((2, d, 0)), "num_buckets": 1},
        lambda rng, n, m, d, causal: {"rotations": rng.standard_normal((2, d, 3)), "num_buckets": (2, 4)}),
        lengths=(1, 12)),
    "linear_elu": NaiveCase(linear_elu, (DEFAULTS,)),
    "performer_positive": NaiveCase(performer("positive"), (lambda rng, n, m, d, causal:
                                                            {"omega": rng.standard_normal((16, d))},)),
    "performer_trig": NaiveCase(performer("trig"), (lambda rng, n, m, d, causal:
                                                    {"omega": rng.standard_normal((16, d))},)),
    "efficient_attention": NaiveCase(lambda q, k, v, causal: naive_efficient(q, k, v)[0], (DEFAULTS,)),
    "rfa": NaiveCase(rfa, (lambda rng, n, m, d, causal: {"gates": rng.uniform(size=m)},
                           lambda rng, n, m, d, causal: {"gates": rng.uniform(size=m), "gate_form": "decay"})),
    # Unnormalised φ has ‖φ‖² of a few units: β ≤ 0.1 keeps I − βφφᵀ a contraction (no growth to amplify rounding).
    "delta_rule": NaiveCase(delta_rule, (lambda rng, n, m, d, causal: {"beta": rng.uniform(size=m)},
                                         lambda rng, n, m, d, causal: {"beta": rng.uniform(0, 0.1, size=m),
                                                                       "normalize": False})),
    "sac": NaiveCase(naive_sac, (lambda rng, n, m, d, causal: {"predictor": SacPredictor(rng.standard_normal((d, d)))},
                                 lambda rng, n, m, d, causal: {"predictor": SacPredictor(rng.standard_normal((d, d))),
                                                               "r": 3})),
    "sinkhorn": NaiveCase(naive_sinkhorn, (
        _sinkhorn_options(), _sinkhorn_options(block_size=2, extra_columns=2, iterations=3, temperature=1.0),
        _sortcut), lengths=(12,)),
    # 8 bits leave some codes equal or equidistant: the ties of the K-means are exercised too.
    "clustered": NaiveCase(naive_clustered, (
        _hash_draws(8, 3), _hash_draws(63, 2, through_origin=True, iterations=3),
        lambda rng, n, m, d, causal: {"assignment": rng.integers(0, 3, size=n), "scale": 0.7})),
    "improved_clustered": NaiveCase(naive_improved_clustered, (
        _hash_draws(8, 3), _hash_draws(63, 2, top_k=4),
        lambda rng, n, m, d, causal: {"assignment": rng.integers(0, 3, size=n), "top_k": 1, "scale": 0.7})),
    "informer": NaiveCase(naive_informer, (
        _informer_sample(3),
        lambda rng, n, m, d, causal: _informer_sample(2)(rng, n, m, d, causal) | {
            "factor": 2, "counts": "official", "measure": "official", "lazy": "official"},
        lambda rng, n, m, d, causal: _informer_sample(4, visible=True)(rng, n, m, d, causal) | {
            "sample_from": "visible", "num_top": 3},
        lambda rng, n, m, d, causal: _informer_sample(1)(rng, n, m, d, causal) | {"counts": "official-v1"})),
    "mca": NaiveCase(naive_mca, (
        lambda rng, n, m, d, causal: {"params": MemoryCompression(rng.standard_normal(3), rng.standard_normal(3))},
        lambda rng, n, m, d, causal: {"params": MemoryCompression(rng.standard_normal(2), rng.standard_normal(2)),
                                      "memory": "tensor2tensor"},
        lambda rng, n, m, d, causal: {"params": MemoryCompression(rng.standard_normal((2, d, d)) / 2,
                                                                  rng.standard_normal((2, 3, 3)) / 2),
                                      "channels": "full", "remainder": "pad"},
        fixed(mode="local", block=2))),
    "linformer": NaiveCase(naive_linformer, (
        lambda rng, n, m, d, causal: {"E": rng.standard_normal((3, m)) / math.sqrt(3),
                                      "F": rng.standard_normal((3, m)) / math.sqrt(3)},
        lambda rng, n, m, d, causal: {"E": rng.standard_normal((9, m)) / 3, "sharing": "kv"})),
    "set_transformer": NaiveCase(naive_set_transformer, (
        lambda rng, n, m, d, causal: {"inducing": rng.standard_normal((3, d))},
        lambda rng, n, m, d, causal: {"inducing": rng.standard_normal((1, d)), "num_inducing": 1},
        lambda rng, n, m, d, causal: {"inducing": 2.0 * rng.standard_normal((9, d)), "scale": 0.7})),
    "luna": NaiveCase(naive_luna, (
        lambda rng, n, m, d, causal: {"pack": rng.standard_normal((3, d))},
        lambda rng, n, m, d, causal: {"pack": rng.standard_normal((1, d)), "pack_length": 1},
        lambda rng, n, m, d, causal: {"pack": 2.0 * rng.standard_normal((9, d)), "scale": 0.7})),
    # κ < ξ leaves gaps between segments, κ > ξ overlaps them; w₂ = 4 at n = 5 reaches past both ends.
    "poolingformer": NaiveCase(naive_poolingformer, (
        _pooling_params(3),
        _pooling_params(2, pooling="mean", residual=False, window=0, pool_window=2, stride=1),
        _pooling_params(2, pooling="max", window=2, pool_window=4, stride=3),
        _pooling_params(4, pool_window=4, stride=2, scale=0.7)), value_width_d=True),
    "lowrank_band": NaiveCase(naive_lowrank_band, (
        _lowrank_params(2), _lowrank_params(1, alpha=0.2, window=2), _lowrank_params(3, alpha=1.0, scale=0.7),
        _lowrank_params(2, alpha=0.0, window=0, scale=0.6))),
    "nystrom_csalr": NaiveCase(naive_csalr, (DEFAULTS, fixed(pool=3, eps=0.25), fixed(pool=1, eps=0.0)), lengths=(8,)),
    "nystromformer": NaiveCase(naive_nystromformer, (
        DEFAULTS, fixed(num_landmarks=2, pinv="exact"), fixed(num_landmarks=4, init="official", iterations=10),
        lambda rng, n, m, d, causal: {"conv_weights": rng.standard_normal(5)}), lengths=(6, 12)),
    "gaussian_prior": NaiveCase(naive_gaussian_prior, (
        _gaussian_params(4), _gaussian_params(3, window="layer"), _gaussian_params(2, window=2.5, scale=0.7),
        _gaussian_params(4, window=math.inf))),
    "gaussian_transformer": NaiveCase(naive_gaussian_transformer, (
        _gaussian_transformer_params(), _gaussian_transformer_params(mask_diagonal=True),
        _gaussian_transformer_params(w_high=4.0, b_low=-6.0, scale=0.6)),
        lengths=(1, 4)),
    "camtl": NaiveCase(naive_camtl, (
        _camtl_params(2, 4), _camtl_params(0, 2, embedding=True), _camtl_params(0, None, scale=0.6),
        _camtl_params(3, 1)), lengths=(6,)),
    "synthesizer_dense": NaiveCase(naive_synthesizer("dense"), (
        lambda rng, n, m, d, causal: {"params": _dense_params(rng, d, m)},
        lambda rng, n, m, d, causal: {"params": FactorizedDenseSynthesizer(A=_dense_params(rng, d, 2),
                                                                           B=_dense_params(rng, d, 4))},
        lambda rng, n, m, d, causal: {"params": _dense_params(rng, d, m + 2), "mix": ("random", "dot"),
                                      "alpha": (0.7, 0.5, -0.2), "scale": 0.4,
                                      "random_params": RandomSynthesizer(
                                          rng.standard_normal((_random_length(n, m, causal),) * 2))})),
    "synthesizer_random": NaiveCase(naive_synthesizer("random"), (
        lambda rng, n, m, d, causal: {"params": RandomSynthesizer(
            rng.standard_normal((_random_length(n, m, causal),) * 2))},
        lambda rng, n, m, d, causal: {"params": FactorizedRandomSynthesizer(
            *rng.standard_normal((2, _random_length(n, m, causal), 2)))},
        lambda rng, n, m, d, causal: {"params": RandomSynthesizer(
            rng.standard_normal((_random_length(n, m, causal),) * 2)), "mix": "dot", "alpha": (0.3, 0.7)},
        lambda rng, n, m, d, causal: {"params": RandomSynthesizer(
            rng.standard_normal((_random_length(n, m, causal),) * 2)), "mix": ("dense",),
            "dense_params": FactorizedDenseSynthesizer(A=_dense_params(rng, d, 3), B=_dense_params(rng, d, 3))})),
    "average_attention": NaiveCase(naive_average, (DEFAULTS, fixed(method="equation"))),
    "hardcoded_gaussian": NaiveCase(naive_hardcoded_gaussian, (
        DEFAULTS, fixed(offsets=-1, sigma=0.7), fixed(offsets=1, sigma=2.0, normalize="density"),
        fixed(sigma=math.inf), fixed(offsets=-1, ratio=1.5))),
    "realformer": NaiveCase(naive_realformer, (
        _stack_projections(3), _stack_projections(1),
        lambda rng, n, m, d, causal: _stack_projections(4, 1.5)(rng, n, m, d, causal) | {"layers": 4, "scale": 0.7})),
    "lazyformer": NaiveCase(naive_lazyformer, (
        _stack_projections(4), lambda rng, n, m, d, causal: _stack_projections(4)(rng, n, m, d, causal) | {"block": 1},
        lambda rng, n, m, d, causal: _stack_projections(5)(rng, n, m, d, causal) | {"block": 3, "scale": 0.7})),
    "predictive_attention": NaiveCase(naive_predictive, (
        _predictive(3), _predictive(2, alpha=0.2, activation="none"), _predictive(4, alpha=0.7, scale=0.6),
        _predictive(1))),
    "multi_query": NaiveCase(naive_multi_query, (_gqa(2, 1), _gqa(4, 2, mask=True, name_g=True), _gqa(3, 3)),
                             value_width_d=True),
    "head_size": NaiveCase(naive_head_size, (_head_size(2, 5), _head_size(4, 1, mask=True), _head_size(1, 7)),
                           value_width_d=True),
    "adaptive_span": NaiveCase(naive_adaptive_span, (
        _heads(),
        lambda rng, n, m, d, causal: _heads()(rng, n, m, d, causal) | {
            "z": rng.uniform(0.0, 4.0, size=2), "max_span": 4, "ramp": 1.5},
        lambda rng, n, m, d, causal: _heads()(rng, n, m, d, causal) | {
            "z": np.array([0.0, 1.3]), "include_current": False, "eps": 1e-8, "scale": 0.7},
        lambda rng, n, m, d, causal: _heads(num_heads=1)(rng, n, m, d, causal) | {
            "z": np.array([2.7]), "max_span": 3, "ramp": 3}), value_width_d=True),
    "multi_scale": NaiveCase(naive_multi_scale, (
        _heads(), lambda rng, n, m, d, causal: _heads()(rng, n, m, d, causal) | {"windows": [0, 2]},
        lambda rng, n, m, d, causal: _heads(num_heads=3)(rng, n, m, d, causal) | {"windows": [1, 0, 10],
                                                                                  "scale": 0.6}),
        value_width_d=True),
    "talking_heads": NaiveCase(naive_talking_heads, (_talking(2, 3, 2), _talking(3, 1, 4, mask=True),
                                                     _talking(2, 2, 2)), value_width_d=True),
    "collaborative_heads": NaiveCase(naive_collaborative, (
        _collaborative(2, 3), _collaborative(3, 5, mask=True), _collaborative(1, 2, content=False)),
        value_width_d=True),
    "capsule_routing": NaiveCase(capsule_routing, (
        _capsules(), _capsules(routing="em"),
        _capsules(num_heads=3, num_capsules=2, routing="em", iterations=5, mask=True),
        _capsules(num_heads=1, num_capsules=2, iterations=1, mask=True)), value_width_d=True),
    "alibi": NaiveCase(naive_alibi, (
        DEFAULTS, fixed(form="symmetric"), fixed(slopes=2.0, scale=0.6), fixed(slopes=0.3, form="symmetric"))),
    "rope": NaiveCase(naive_rope, (
        DEFAULTS, fixed(pairing="half"), fixed(rotary_dim=2, base=100.0), fixed(pairing="half", base=10.0, scaling=2.5),
        fixed(scaling=0.5, base=3.0, scale=0.7))),
    "t5_bias": NaiveCase(naive_t5_bias, (
        _t5_table(), _t5_table(bidirectional=True), _t5_table(num_buckets=8, max_distance=6, scale=0.7),
        _t5_table(num_buckets=6, bidirectional=False, max_distance=5))),
    "kerple": NaiveCase(naive_kerple, (
        _kerple(), _kerple("power", r2_high=2.0), _kerple("log", r1_high=5.0, r2_high=3.0, scale=0.6),
        _kerple("power", r1_high=3.0, r2_high=0.5))),
    "relative_pe": NaiveCase(naive_relative_pe, (_shaw(1), _shaw(0), _shaw(8))),
    "transformer_xl": NaiveCase(naive_transformer_xl, (_xl(), _xl(method="shift"), _xl(clamp_len=2),
                                                       _xl(clamp_len=1, method="shift"))),
    "deberta": NaiveCase(naive_deberta, (
        _deberta_params(2), _deberta_params(3, p2c_index="official"), _deberta_params(1, terms=("p2c",), scale=0.7),
        _deberta_params(4, position_buckets=4, max_position=6), _deberta_params(2, terms=()))),
    # w = 1 and l = 3 at m = 7 leave a shorter last segment; r = 0 is the window alone.
    "long_short": NaiveCase(naive_long_short, (
        _long_short_params(1), _long_short_params(2, window=3, projection_input="normalized"),
        _long_short_params(2, window=1, segment=3, dual_ln="keys_values"),
        _long_short_params(3, window=2, segment=2, dual_ln="keys_values", projection_input="normalized", scale=0.7),
        _long_short_params(0, window=4, dual_ln="none")), value_width_d=True),
    "topk": NaiveCase(naive_topk, (
        fixed(top_k=2), fixed(top_k=3, ties="first"), fixed(top_k=1, scale=0.7), DEFAULTS,
        lambda rng, n, m, d, causal: {"top_k": 2, "mask": rng.random((n, m)) < 0.6},
        fixed(top_k=2, method="chunk", chunk_size=2))),
    "sinkformer": NaiveCase(naive_sinkformer, (
        DEFAULTS, fixed(iterations=1), fixed(iterations=2), fixed(iterations=6, scale=0.7), fixed(iterations=15))),
    "fnet": NaiveCase(naive_fnet, (DEFAULTS, fixed(method="matrix")), lengths=(1, 5)),
    "gmlp": NaiveCase(naive_gmlp, (
        _spatial_gating(), _spatial_gating(tiny_attention=True), _spatial_gating(norm=False),
        _spatial_gating(tiny_attention=True, norm=False, scale=0.6)), lengths=(1,), value_width_d=True),
    "aft": NaiveCase(naive_aft, (
        _aft_params("full"), _aft_params("local", window=2), _aft_params("simple"),
        _aft_params("conv", num_heads=2, kernel_size=3), _aft_params("conv", num_heads=1, kernel_size=3, image_width=3),
        _aft_params("local", std=1.0, window=0)), value_width_d=True),
    "skyformer": NaiveCase(naive_skyformer, (
        lambda rng, n, m, d, causal: {"landmarks": rng.integers(0, n + m, size=4)},
        lambda rng, n, m, d, causal: {"landmarks": rng.permutation(n + m)[:5], "num_landmarks": 5, "gamma": 0.0,
                                      "pinv": "exact"},
        lambda rng, n, m, d, causal: {"landmarks": rng.integers(0, n + m, size=6), "num_landmarks": 6,
                                      "init": "official", "iterations": 10, "scale": 0.7},
        lambda rng, n, m, d, causal: {"landmarks": rng.integers(0, n + m, size=3), "num_landmarks": 3, "gamma": 1.0,
                                      "pinv": "exact", "scale": -0.4})),
    "scatterbrain": NaiveCase(naive_scatterbrain, (
        _sb_draws(2, 1, 3), _sb_draws(3, 2, 2, kind="positive", scale=0.7), _sb_draws(1, 0, 4),
        _sb_draws(2, 1, 3, scale=-0.5))),
}


# ------------------------------------------------------------------------------ beyond: XCiT, GAU / FLASH


def naive_xcit(q, k, v, causal, params=None, eps=1e-12):
    """El-Nouby et al. (2021) Eq. 2 as the official XCA computes it: channel i of q and j of k divided by their
    norms over the N tokens (floored at eps), A_ij = softmax over j of τ Σ_t q̂_ti k̂_tj, out_ti = Σ_j A_ij v_tj."""
    N, d = q.shape
    tau = 1.0 if params is None else float(params.temperature)
    q_norm = [max(math.sqrt(sum(q[t, i] ** 2 for t in range(N))), eps) for i in range(d)]
    k_norm = [max(math.sqrt(sum(k[t, j] ** 2 for t in range(N))), eps) for j in range(d)]
    out = np.zeros((N, d))
    for i in range(d):
        logits = [tau * sum(q[t, i] / q_norm[i] * k[t, j] / k_norm[j] for t in range(N)) for j in range(d)]
        top = max(logits)
        e = [math.exp(x - top) for x in logits]
        total = sum(e)
        for t in range(N):
            out[t, i] = sum(e[j] / total * v[t, j] for j in range(d))
    return out


NAIVE["xcit"] = NaiveCase(naive_xcit, (
    DEFAULTS, fixed(params=XcitParams(2.5)), fixed(params=XcitParams(0.3), eps=3.0)), lengths=(1, 2),
    value_width_d=True)


def naive_gau(q, k, v, causal, params, chunk=None, scale=None, linear_scale=None):
    """Hua et al. (2022): Q = z⊙γ₀ + β₀, K = z⊙γ₁ + β₁; GAU's weight relu²(q_i·k_j·scale), scale 1/m (Code 1's
    1/seq_len); with chunks of c positions (§3.2), that weight (scale 1/c) only for j in query i's chunk, plus
    q'_i·k'_j·linear_scale (1/m; Q' = z⊙γ₂ + β₂, K' = z⊙γ₃ + β₃) for j in any chunk, or (causal) an earlier one."""
    n, m, s, e = len(q), len(k), q.shape[1], v.shape[1]

    def made(z, t):                                                # z ⊙ γ_t + β_t
        return [float(z[c]) * float(params.gamma[t, c]) + float(params.beta[t, c]) for c in range(s)]

    quad_scale = scale if scale is not None else (1.0 / (m if chunk is None else chunk) if m else 1.0)
    lin_scale = linear_scale if linear_scale is not None else (1.0 / m if m else 1.0)
    offset = m - n if causal == "bottom-right" else 0
    out = np.zeros((n, e))
    for i in range(n):
        p = i + offset
        q_i = made(q[i], 0)
        for j in range(m):
            if causal is not False and j > p:
                continue
            k_j = made(k[j], 1)
            weight = 0.0
            if chunk is None or j // chunk == math.floor(p / chunk):
                weight += max(sum(q_i[c] * k_j[c] for c in range(s)) * quad_scale, 0.0) ** 2
            if chunk is not None and (causal is False or j // chunk < math.floor(p / chunk)):
                q_lin, k_lin = made(q[i], 2), made(k[j], 3)
                weight += sum(q_lin[c] * k_lin[c] for c in range(s)) * lin_scale
            for c in range(e):
                out[i, c] += weight * v[j, c]
    return out


def _scale_offset(rows, **fixed_options):
    """γ, β ~ N(0, 1) (wider than the 0.02 of the initialisation, so that relu² is far from 0)."""
    return lambda rng, n, m, d, causal: {
        "params": ScaleOffset(rng.standard_normal((rows, d)), rng.standard_normal((rows, d)))} | fixed_options


NAIVE["gau"] = NaiveCase(naive_gau, (
    _scale_offset(2), _scale_offset(2, scale=0.3), _scale_offset(4, chunk=3), _scale_offset(4, chunk=2, scale=0.5,
                                                                                             linear_scale=0.2),
    _scale_offset(4, chunk=1), _scale_offset(4, chunk=8)))
