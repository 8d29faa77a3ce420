"""Reformer's LSH attention: the exact limit, the multi-round merge, the pair sets, the causal dependence on later
tokens, the hash and its collision probability, the memory of the csr path, bad input."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom

from refattn import registry, scaled_dot_product_attention
from refattn.common import MemoryBudgetError, temporary_memory_budget
from refattn.sparse import (
    draw_lsh_rotations,
    lsh_buckets,
    lsh_chunks,
    lsh_collision_probability,
    reformer_lsh_attention,
)

from .naive import lsh_rounds, lsh_union, reformer_lsh

TIGHT = {"rtol": 1e-12, "atol": 1e-12}
METHODS = ("equation", "csr")


def _unit(qk):
    """k_j = q_j/‖q_j‖, computed here (not by the module under test)."""
    return qk / np.linalg.norm(qk, axis=-1, keepdims=True)


def _shared_qk_attention(qk, v, causal, allowed=None, bias=None):
    """Softmax attention of the queries over their unit vectors: sdpa(q, q/‖q‖, v) with self removed unless a row
    has nothing else (causal row 0), or over ``allowed``; ``bias`` adds log-counts."""
    n = qk.shape[-2]
    if allowed is None:
        allowed = ~np.eye(n, dtype=bool)
        if causal:
            allowed &= np.tril(np.ones((n, n), dtype=bool))
            allowed[0, 0] = True                                   # the first token has no other key
    mask = allowed if bias is None else np.where(allowed, bias, -np.inf)
    return scaled_dot_product_attention(qk, _unit(qk), v, mask=mask, return_weights=True)


# --- the exact limit ----------------------------------------------------------------------------------

@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize(("num_rounds", "duplicates"), [(1, False), (3, False), (3, True)])
def test_one_bucket_one_chunk_is_shared_qk_full_attention_without_self(rng, causal, method, num_rounds, duplicates):
    """b = 1 and c ≥ n: every round pairs every token with every other; with the count each pair weighs once,
    without it every pair weighs num_rounds times, which cancels in the softmax."""
    qk, v = rng.standard_normal((2, 3, 9, 4))
    out, A, allowed = reformer_lsh_attention(qk, v, num_buckets=1, num_rounds=num_rounds, causal=causal, rng=0,
                                             method=method, allow_duplicate_attention=duplicates,
                                             return_weights=True)
    expected, expected_A = _shared_qk_attention(qk, v, causal)
    np.testing.assert_allclose(out, expected, **TIGHT)
    np.testing.assert_allclose(A, expected_A, **TIGHT)
    np.testing.assert_array_equal(allowed, expected_A > 0)


def test_the_default_chunk_of_one_bucket_covers_the_sequence(rng):
    """The paper's c = 2n/b is 2n for one bucket: one chunk, whatever n."""
    for n in (1, 2, 5):
        qk, v = rng.standard_normal((2, n, 3))
        out = reformer_lsh_attention(qk, v, num_buckets=1, num_rounds=1, rng=1)
        np.testing.assert_allclose(out, _shared_qk_attention(qk, v, False)[0] if n > 1 else v, **TIGHT)


# --- the rounds and their merge -----------------------------------------------------------------------

@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("method", METHODS)
def test_counted_rounds_are_softmax_over_the_union_of_their_pairs(rng, causal, method):
    """With log N_ij subtracted, the LSE merge of the rounds is exactly attention over U_i, each pair once."""
    qk, v = rng.standard_normal((2, 2, 16, 4))
    out, A, allowed = reformer_lsh_attention(qk, v, num_buckets=4, num_rounds=3, chunk_length=4, causal=causal,
                                             rng=5, method=method, return_weights=True)
    assert allowed.sum() < allowed.size * 0.8                      # a proper subset of the pairs
    expected, expected_A = _shared_qk_attention(qk, v, causal, allowed=allowed)
    np.testing.assert_allclose(out, expected, **TIGHT)
    np.testing.assert_allclose(A, expected_A, **TIGHT)


@pytest.mark.parametrize("causal", [False, True])
def test_allowed_duplicates_weigh_a_pair_by_the_rounds_that_hold_it(rng, causal):
    """Without the count, a pair computed in N_ij rounds weighs N_ij e^{s_ij}: softmax with a bias log N_ij.
    Across buckets nobody but the causal first token is alone, so N is the sum of the one-round pair sets."""
    qk, v = rng.standard_normal((2, 12, 4))
    rotations = draw_lsh_rotations(2, 4, 4, num_rounds=3)
    options = {"chunk_length": 3, "causal": causal, "attend_across_buckets": True}
    out, A, allowed = reformer_lsh_attention(qk, v, rotations=rotations, allow_duplicate_attention=True,
                                             return_weights=True, **options)
    N = sum(reformer_lsh_attention(qk, v, rotations=rotations[r:r + 1], return_weights=True, **options)[2]
            for r in range(3)).astype(float)
    assert N.max() == 3 and np.any(N == 2)                         # duplicates that matter
    expected, expected_A = _shared_qk_attention(qk, v, causal, allowed=N > 0, bias=np.log(np.maximum(N, 1)))
    np.testing.assert_allclose(out, expected, **TIGHT)
    np.testing.assert_allclose(A, expected_A, **TIGHT)


def test_allowed_is_the_union_of_the_paper_pair_sets(rng):
    """U_i from the loops of tests/naive.py (the paper's sets, token by token) for each option."""
    qk, v = rng.standard_normal((2, 11, 4))
    rotations = rng.standard_normal((2, 4, 2))
    for causal in (False, True):
        for options in ({}, {"wrap": True, "chunk_length": 3}, {"attend_across_buckets": True, "chunk_length": 2}):
            _, in_round, rounds = lsh_rounds(qk, causal, rotations, **options)
            expected = np.array([[j in lsh_union(11, in_round, rounds, i) for j in range(11)] for i in range(11)])
            for method in METHODS:
                allowed = reformer_lsh_attention(qk, v, rotations=rotations, causal=causal, method=method,
                                                 return_weights=True, **options)[2]
                np.testing.assert_array_equal(allowed, expected, err_msg=f"{options} causal={causal} {method}")


@pytest.mark.parametrize("options", [{}, {"wrap": True, "chunk_length": 3}, {"num_buckets": 2, "chunk_length": 5},
                                     {"attend_across_buckets": True, "allow_duplicate_attention": True}])
def test_csr_path_equals_the_naive_loops(rng, options):
    """The chunk windows listed as pairs for the CSR kernel, against the token-by-token sets; n = 13 leaves a short
    last chunk."""
    qk, v = rng.standard_normal((2, 13, 4))
    rotations = rng.standard_normal((3, 4, options.pop("num_buckets", 4) // 2))
    for causal in (False, True):
        out = reformer_lsh_attention(qk, v, rotations=rotations, causal=causal, method="csr", **options)
        np.testing.assert_allclose(out, reformer_lsh(qk, qk, v, causal, rotations, **options), **TIGHT)


@pytest.mark.parametrize("options", [
    {"num_buckets": 4, "num_rounds": 2},
    {"num_buckets": 8, "num_rounds": 3, "chunk_length": 3, "wrap": True},
    {"num_buckets": 2, "num_rounds": 1, "chunk_length": 64},                     # one chunk, wrap ignored
    {"num_buckets": 6, "num_rounds": 2, "chunk_length": 5, "wrap": True, "attend_across_buckets": True},
])
def test_methods_agree_with_batch_dims_and_rotations_per_head(rng, options):
    qk = rng.standard_normal((2, 3, 17, 4))
    v = rng.standard_normal((3, 17, 2))                            # broadcast over the first batch dim
    per_head = rng.standard_normal((3, options["num_rounds"], 4, options["num_buckets"] // 2))
    settings = {k: x for k, x in options.items() if k not in ("num_buckets", "num_rounds")}
    for causal in (False, True):
        results = [reformer_lsh_attention(qk, v, rotations=per_head, causal=causal, method=method,
                                          return_weights=True, **settings) for method in METHODS]
        for a, b in zip(*results, strict=True):
            np.testing.assert_allclose(a, b, **TIGHT)
        for h in range(3):                                         # head h hashed with its own rotations
            single = reformer_lsh_attention(qk[1, h], v[h], rotations=per_head[h], causal=causal, **settings)
            np.testing.assert_allclose(results[1][0][1, h], single, **TIGHT)


def test_a_token_attends_itself_only_when_alone():
    """b = 2 with R = e_0: the bucket is the sign of x_0; token 2 is alone in its bucket and sees only itself;
    the others never see themselves."""
    qk = np.array([[-1.0, 0.3], [-0.5, -1.0], [2.0, 0.1], [-1.2, 0.8], [-0.7, 0.2]])
    v = np.arange(10.0).reshape(5, 2)
    out, A, allowed = reformer_lsh_attention(qk, v, rotations=np.array([[[1.0], [0.0]]]), return_weights=True)
    assert A[2, 2] == 1.0 and allowed[2].sum() == 1
    np.testing.assert_array_equal(out[2], v[2])
    np.testing.assert_array_equal(np.diag(A)[[0, 1, 3, 4]], 0.0)
    np.testing.assert_array_equal(allowed[[0, 1, 3, 4]][:, 2], False)


# --- causality --------------------------------------------------------------------------------------------

def test_causal_output_depends_on_later_tokens_through_the_chunks():
    """b = 2 with R = e_0 (bucket 1 where x_0 < 0), c = 2, causal. Tokens 0-4 are in bucket 1. If token 5 is in
    bucket 1 too, the sorted order is 0 … 5 and token 3 (chunk 1) sees its chunk and chunk 0: keys 0, 1, 2. If
    token 5 is in bucket 0 it sorts first, every rank moves up by one, token 3 falls in chunk 2 and sees keys
    1, 2 only. Token 5 itself gets zero weight either way, yet output 3 changes; the prefix alone (a decoder with
    a key/value cache) sorts as in the first case, so it does not reproduce the second."""
    qk = np.array([[-1.0, 0.5], [-0.8, -0.3], [-1.2, 0.9], [-0.6, -1.1], [-0.9, 0.2], [-1.0, 0.4]])
    v = np.arange(12.0).reshape(6, 2) ** 1.5
    options = {"rotations": np.array([[[1.0], [0.0]]]), "causal": True, "chunk_length": 2, "return_weights": True}
    flipped = qk.copy()
    flipped[5, 0] = 1.0                                            # token 5 moves to bucket 0
    for method in METHODS:
        out, A, allowed = reformer_lsh_attention(qk, v, method=method, **options)
        moved, A2, allowed2 = reformer_lsh_attention(flipped, v, method=method, **options)
        np.testing.assert_array_equal(np.flatnonzero(allowed[3]), [0, 1, 2])
        np.testing.assert_array_equal(np.flatnonzero(allowed2[3]), [1, 2])
        np.testing.assert_array_equal(A[np.triu_indices(6, 1)], 0.0)
        np.testing.assert_array_equal(A2[np.triu_indices(6, 1)], 0.0)
        assert not np.allclose(moved[3], out[3], rtol=1e-12, atol=1e-12)
        prefix = reformer_lsh_attention(flipped[:5], v[:5], method=method, **options)[0]
        np.testing.assert_allclose(prefix, out[:5], **TIGHT)
        assert not np.allclose(prefix[3], moved[3], rtol=1e-12, atol=1e-12)
        v_later = v.copy()
        v_later[5] = np.nan                                        # a later value never reaches the output
        np.testing.assert_array_equal(reformer_lsh_attention(flipped, v_later, method=method, **options)[0][:5],
                                      moved[:5])


# --- the hash ----------------------------------------------------------------------------------------------

def test_buckets_are_the_argmax_of_the_signed_projections():
    # R = I (b = 4): x = (3, −1) projects to [3, −1 | −3, 1] → bucket 0; (−1, −3) to [−1, −3 | 1, 3] → 3;
    # (0.5, 2) to [0.5, 2 | −0.5, −2] → 1; (−2, 1) to [−2, 1 | 2, −1] → 2.
    x = np.array([[3.0, -1.0], [-1.0, -3.0], [0.5, 2.0], [-2.0, 1.0]])
    np.testing.assert_array_equal(lsh_buckets(x, np.eye(2)[None]), [[0, 3, 1, 2]])
    np.testing.assert_array_equal(lsh_buckets(x, np.zeros((2, 2, 0))), np.zeros((2, 4)))   # b = 1
    np.testing.assert_array_equal(lsh_buckets(5 * x, np.eye(2)[None]), [[0, 3, 1, 2]])    # scale-invariant
    # factors (2, 2): h = h_1 + 2 h_2 with h_1 the sign bucket of x_0, h_2 that of x_1 (1 where negative)
    np.testing.assert_array_equal(lsh_buckets(x, np.eye(2)[None], (2, 2)), [[2, 3, 0, 1]])
    with pytest.raises(ValueError, match=r"num_buckets=\(2, 4\) needs rotations with 3 columns"):
        lsh_buckets(x, np.eye(2)[None], (2, 4))


def test_given_rotations_leave_rng_unused_and_the_old_names_warn(rng):
    qk, v = rng.standard_normal((2, 9, 4))
    rotations = draw_lsh_rotations(3, 4, 4, num_rounds=2)
    np.testing.assert_array_equal(reformer_lsh_attention(qk, v, rotations=rotations, rng=0),
                                  reformer_lsh_attention(qk, v, rotations=rotations))
    new = reformer_lsh_attention(qk, v, num_buckets=4, num_rounds=2, rng=3)
    with pytest.warns(DeprecationWarning, match=r"n_buckets= is renamed num_buckets="):
        np.testing.assert_array_equal(reformer_lsh_attention(qk, v, n_buckets=4, num_rounds=2, rng=3), new)
    with pytest.warns(DeprecationWarning, match=r"n_rounds= is renamed num_rounds="):
        np.testing.assert_array_equal(registry.get("reformer_lsh").apply(qk, qk, v, num_buckets=4, n_rounds=2,
                                                                         rng=3).output, new)
    with pytest.warns(DeprecationWarning, match=r"n_(buckets|rounds)= is renamed num_(buckets|rounds)="):
        np.testing.assert_array_equal(draw_lsh_rotations(3, 4, n_buckets=4, n_rounds=2), rotations)
    with pytest.warns(DeprecationWarning, match=r"n_buckets= is renamed num_buckets="):
        np.testing.assert_array_equal(lsh_buckets(qk, rotations, n_buckets=4), lsh_buckets(qk, rotations, 4))
    with pytest.warns(DeprecationWarning, match=r"n_buckets= is renamed num_buckets="):
        np.testing.assert_array_equal(lsh_collision_probability([0.5, 1.0], n_buckets=4),
                                      lsh_collision_probability([0.5, 1.0], 4))


def test_the_function_returns_the_pairs_or_leaves_them_to_the_record(rng):
    qk, v = rng.standard_normal((2, 9, 4))
    out, A, allowed = reformer_lsh_attention(qk, v, num_buckets=4, rng=3, return_weights=True)
    pair = reformer_lsh_attention(qk, v, num_buckets=4, rng=3, return_weights=True, return_allowed=False)
    np.testing.assert_array_equal(pair[0], out)
    np.testing.assert_array_equal(pair[1], A)
    assert len(pair) == 2
    result = registry.get("reformer_lsh").apply(qk, qk, v, num_buckets=4, rng=3, return_weights=True)
    np.testing.assert_array_equal(result.allowed, allowed)
    assert not allowed.all()


def test_chunks_of_the_order_by_bucket_then_position():
    order, chunk = lsh_chunks(np.array([[2, 0, 1, 0, 2, 1, 0]]), 3)
    np.testing.assert_array_equal(order, [[1, 3, 6, 2, 5, 0, 4]])  # bucket 0: 1, 3, 6; bucket 1: 2, 5; 2: 0, 4
    np.testing.assert_array_equal(chunk, [[1, 0, 1, 0, 2, 1, 0]])  # ranks 0-2, 3-5, and a short last chunk 6


def test_default_buckets_follow_trax_for_chunks_of_128():
    """b = 2·max(1, ⌊n/128⌋) (trax LSHSelfAttention), in two factors above 128: the registry entry draws that many
    columns, reads them back as that hash, and reads rotations of another width as a flat hash."""
    mech = registry.get("reformer_lsh")
    for n, columns in ((7, 1), (300, 2), (8320, 12)):              # b = 2, 4, and (16, 8): 8 + 4 columns
        qk = np.random.default_rng(n).standard_normal((n, 4))
        result = mech.apply(qk, qk, qk, rng=0, return_draws=True)
        assert result.draws["rotations"].shape == (2, 4, columns), n
        if n == 8320:                                              # factored: not the flat hash of 24 buckets
            flat = mech.apply(qk, qk, qk, num_buckets=24, **result.draws)
            assert not np.allclose(flat.output, result.output, rtol=1e-12, atol=1e-12)
            factored = mech.apply(qk, qk, qk, num_buckets=(16, 8), **result.draws)
            np.testing.assert_array_equal(factored.output, result.output)
        else:
            np.testing.assert_array_equal(reformer_lsh_attention(qk, qk, rng=0), result.output)
    qk = np.random.default_rng(1).standard_normal((300, 4))
    rotations = np.random.default_rng(2).standard_normal((2, 4, 3))
    np.testing.assert_array_equal(mech.apply(qk, qk, qk, rotations=rotations).output,
                                  mech.apply(qk, qk, qk, rotations=rotations, num_buckets=6).output)


def test_default_chunk_is_twice_the_average_bucket(rng):
    """c = ⌈2n/b⌉ (the paper's m = 2l/num_buckets): n = 10, b = 4 gives chunks of 5."""
    qk, v = rng.standard_normal((2, 10, 4))
    rotations = rng.standard_normal((2, 4, 2))
    np.testing.assert_array_equal(reformer_lsh_attention(qk, v, rotations=rotations),
                                  reformer_lsh_attention(qk, v, rotations=rotations, chunk_length=5))


# --- the collision probability ------------------------------------------------------------------------

def test_collision_probability_closed_forms_and_limits():
    theta = np.linspace(0, np.pi, 13)
    np.testing.assert_allclose(lsh_collision_probability(theta, 2), 1 - theta / np.pi, rtol=1e-15, atol=0)
    np.testing.assert_allclose(lsh_collision_probability(theta, 4), (1 - theta / np.pi) ** 2, rtol=1e-15, atol=0)
    np.testing.assert_array_equal(lsh_collision_probability(theta, 1), 1.0)
    np.testing.assert_allclose(lsh_collision_probability(theta, (2, 4)), (1 - theta / np.pi) ** 3, rtol=1e-15, atol=0)
    for b in (6, 8, 16, 64, 1024):
        p = lsh_collision_probability(theta, b)
        assert p[0] == 1.0 and p[-1] == 0.0 and np.all(np.diff(p) < 0), b
        # at a right angle the projections of x and y are independent: each bucket equally likely, 1/b
        np.testing.assert_allclose(lsh_collision_probability(np.pi / 2, b), 1 / b, rtol=1e-12, atol=0)
    assert np.all(lsh_collision_probability(theta[1:-1], 8) < lsh_collision_probability(theta[1:-1], 6))


@pytest.mark.parametrize(("num_buckets", "d"), [(2, 3), (4, 16), (6, 5), (8, 8), (16, 3), ((4, 6), 4)])
def test_collision_frequency_matches_the_probability(num_buckets, d):
    """100 000 independent rotations hash two unit vectors at each angle; the number of collisions must fall in
    the two-sided binomial interval of false-alarm rate 1e-6 around the formula's probability (18 checks: at
    most 1.8e-5 overall; the seed is fixed, so the outcome is too). Width ≈ 0.016 at p = 1/2. Factors (4, 6)
    hash into 24 buckets with independent blocks of columns: the product of the two probabilities."""
    rng = np.random.default_rng(d)
    draws = 100_000
    for theta in (np.pi / 5, np.pi / 2, 2 * np.pi / 3):
        x, y = np.zeros(d), np.zeros(d)
        x[0], y[0], y[1] = 1.0, math.cos(theta), math.sin(theta)
        rotation = np.linalg.qr(rng.standard_normal((d, d)))[0]    # any orientation: the law is rotation-invariant
        buckets = lsh_buckets(np.stack([x, y]) @ rotation, draw_lsh_rotations(rng, d, num_buckets, draws), num_buckets)
        collisions = int(np.sum(buckets[:, 0] == buckets[:, 1]))
        p = float(lsh_collision_probability(theta, num_buckets))
        low, high = binom.interval(1 - 1e-6, draws, p)
        assert low <= collisions <= high, f"b={num_buckets} θ={theta:.3f}: {collisions}/{draws}, expected p={p:.6f}"


# --- non-finite input, memory, bad input ---------------------------------------------------------------------

def test_a_nan_token_reaches_only_the_rows_that_pair_with_it(rng):
    qk, v = rng.standard_normal((2, 16, 4))
    qk[5] = np.nan
    for method in METHODS:
        out, A, allowed = reformer_lsh_attention(qk, v, rotations=rng.standard_normal((2, 4, 2)), chunk_length=4,
                                                 method=method, return_weights=True)
        sees = allowed[:, 5].copy()
        sees[5] = True                                             # its own row: a NaN query
        assert sees.sum() > 1 and not sees.all()
        assert np.all(np.isnan(out[sees])) and np.all(np.isfinite(out[~sees]))
        np.testing.assert_array_equal(A[~allowed], 0.0)


def test_a_zero_query_has_a_zero_key(rng):
    qk, v = rng.standard_normal((2, 6, 3))
    qk[2] = 0.0
    out, A, _ = reformer_lsh_attention(qk, v, num_buckets=1, num_rounds=1, rng=0, return_weights=True)
    expected = scaled_dot_product_attention(qk, np.where(np.arange(6)[:, None] == 2, 0.0, _unit(
        np.where(np.arange(6)[:, None] == 2, 1.0, qk))), v, mask=~np.eye(6, dtype=bool))
    np.testing.assert_allclose(out, expected, **TIGHT)
    np.testing.assert_allclose(A[2], np.where(np.arange(6) == 2, 0.0, 1 / 5), **TIGHT)   # scores 0: uniform


def test_csr_path_holds_nothing_n_by_n(rng):
    """Under a 1 MiB budget the n × n equation path is refused before allocating, and "auto" streams."""
    qk, v = rng.standard_normal((2, 1024, 4))
    rotations = draw_lsh_rotations(0, 4, 64, num_rounds=2)
    expected = reformer_lsh_attention(qk, v, rotations=rotations, method="equation")
    with temporary_memory_budget(2**20):
        with pytest.raises(MemoryBudgetError, match="GiB"):
            reformer_lsh_attention(qk, v, rotations=rotations, method="equation")
        np.testing.assert_allclose(reformer_lsh_attention(qk, v, rotations=rotations), expected, **TIGHT)


@pytest.mark.parametrize(("options", "error", "match"), [
    ({"rng": 0, "num_buckets": 3}, ValueError, "num_buckets must be even"),
    ({"rng": 0, "num_buckets": 0}, ValueError, "num_buckets"),
    ({"rng": 0, "num_rounds": 0}, ValueError, "num_rounds"),
    ({"rng": 0, "chunk_length": 0}, ValueError, "chunk_length"),
    ({}, ValueError, r"^reformer_lsh draws its hash rotations from rng: pass rng= \(or rotations=\)$"),
    ({"rotations": np.ones((1, 3, 2))}, ValueError, r"rotations must have shape \(..., num_rounds, d=4, b/2\)"),
    ({"rotations": np.ones((1, 4, 2)), "num_buckets": 8}, ValueError, "num_buckets=8 needs rotations with 4 columns"),
    ({"rotations": np.ones((1, 4, 2)), "num_rounds": 2}, ValueError, "num_rounds=2 but rotations holds 1"),
    ({"rotations": np.full((1, 4, 2), np.nan)}, ValueError, "rotations must be finite"),
    ({"rotations": np.ones((1, 4, 2), dtype=int)}, TypeError, "rotations"),
    ({"rng": 0, "method": "dense"}, ValueError, "method"),
    ({"rng": 0, "wrap": 1}, TypeError, "wrap"),
])
def test_bad_input_is_named(options, error, match):
    qk, v = np.ones((2, 5, 4))
    with pytest.raises(error, match=match):
        reformer_lsh_attention(qk, v, **options)


def test_bad_shapes_and_the_registry_entry_need_the_keys_to_be_the_queries(rng):
    qk = rng.standard_normal((5, 4))
    with pytest.raises(ValueError, match="qk has n=5 tokens but v has 4"):
        reformer_lsh_attention(qk, np.ones((4, 2)), rng=0)
    mech = registry.get("reformer_lsh")
    with pytest.raises(ValueError, match="k must be q"):
        mech.apply(qk, qk + 1.0, np.ones((5, 2)), rng=0)
    with pytest.raises(ValueError, match="rotations"):
        mech.apply(qk, qk, np.ones((5, 2)))
    with pytest.raises(ValueError, match="theta must lie in"):
        lsh_collision_probability(4.0, 4)
