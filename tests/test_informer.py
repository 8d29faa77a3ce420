"""Informer's ProbSparse attention: hand-computed cases, the measure against Eq. 2/4 and Lemma 1, the choice, the
lazy rows, the exact limit, the draw, the paper-versus-official options, the causal form's dependence on later
tokens, memory, and bad input. The naive loop of tests/naive.py and the registry-driven tests cover the rest."""
from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest

from refattn import registry, scaled_dot_product_attention
from refattn.common import MemoryBudgetError, temporary_memory_budget
from refattn.compressed import (
    draw_sampled_keys,
    informer_attention,
    informer_counts,
    query_sparsity,
    top_queries,
)

TIGHT = {"rtol": 1e-12, "atol": 1e-12}
LN3, E = math.log(3.0), math.e


# --- hand-computed cases -----------------------------------------------------------------------------

def _hand():
    """d = 1, scale 1: scores s_ij = q_i k_j; every query samples both keys (U = m = 2).

    q = (1, 0, ln 3), k = (0, 1): s = [0, 1], [0, 0], [0, ln 3], so M̄ = 1/2, 0, (ln 3)/2 ≈ 0.549.
    softmax([0, ln 3]) = (1/4, 3/4) → 4/4 + 8·3/4 = 7; softmax([0, 1]) = (1, e)/(1 + e); mean(V) = 6.
    """
    q, k, v = np.array([[1.0], [0.0], [LN3]]), np.array([[0.0], [1.0]]), np.array([[4.0], [8.0]])
    return q, k, v, np.array([[0, 1]] * 3)


def test_hand_computed_measure_choice_and_rows():
    q, k, v, sample = _hand()
    np.testing.assert_allclose(query_sparsity(q, k, sample, scale=1.0), [0.5, 0.0, LN3 / 2], rtol=1e-15)
    out, A = informer_attention(q, k, v, sampled_keys=sample, num_top=1, scale=1.0, return_weights=True)
    np.testing.assert_allclose(out, [[6.0], [6.0], [7.0]], rtol=1e-15)
    np.testing.assert_allclose(A, [[0.5, 0.5], [0.5, 0.5], [0.25, 0.75]], rtol=1e-15)
    out = informer_attention(q, k, v, sampled_keys=sample, num_top=2, scale=1.0)
    np.testing.assert_allclose(out, [[(4 + 8 * E) / (1 + E)], [6.0], [7.0]], rtol=1e-15)


def test_hand_computed_paper_and_official_means_choose_differently():
    """One sampled key (key 1) per query: the paper's max − mean is 0 for every query (ties: query 0 first); the
    official max − sum/m is s/2 = 1/2, 0, (ln 3)/2, which picks query 2."""
    q, k, v, _ = _hand()
    sample = np.array([[1]] * 3)
    np.testing.assert_array_equal(query_sparsity(q, k, sample, scale=1.0), [0.0, 0.0, 0.0])
    np.testing.assert_allclose(query_sparsity(q, k, sample, scale=1.0, measure="official"), [0.5, 0.0, LN3 / 2],
                               rtol=1e-15)
    paper = informer_attention(q, k, v, sampled_keys=sample, num_top=1, scale=1.0)
    official = informer_attention(q, k, v, sampled_keys=sample, num_top=1, scale=1.0, measure="official")
    np.testing.assert_allclose(paper, [[(4 + 8 * E) / (1 + E)], [6.0], [6.0]], rtol=1e-15)
    np.testing.assert_allclose(official, [[6.0], [6.0], [7.0]], rtol=1e-15)


def test_hand_computed_causal_rows_running_mean_and_the_official_running_sum():
    """q = (1, 1, 0), k = (0, ln 3, 5), v = (4, 8, 100), all three keys sampled. Queries 0 and 1 tie on the largest
    measure (5 − (5 + ln 3)/3, the future key 5 included), query 2 has 0: with u = 2 rows 0, 1 are active. Row 0:
    softmax over j ≤ 0 → 4; row 1: softmax([0, ln 3]) → 7; row 2 lazy: (4 + 8 + 100)/3, or the sum 112."""
    q, k, v = np.array([[1.0], [1.0], [0.0]]), np.array([[0.0], [LN3], [5.0]]), np.array([[4.0], [8.0], [100.0]])
    sample = np.array([[0, 1, 2]] * 3)
    M = query_sparsity(q, k, sample, scale=1.0)
    np.testing.assert_allclose(M, [5 - (5 + LN3) / 3] * 2 + [0.0], rtol=1e-15)
    out, A = informer_attention(q, k, v, sampled_keys=sample, num_top=2, scale=1.0, causal=True,
                                return_weights=True)
    np.testing.assert_allclose(out, [[4.0], [7.0], [112 / 3]], rtol=1e-15)
    np.testing.assert_allclose(A, [[1, 0, 0], [0.25, 0.75, 0], [1 / 3, 1 / 3, 1 / 3]], rtol=1e-15)
    out, A = informer_attention(q, k, v, sampled_keys=sample, num_top=1, scale=1.0, causal=True, lazy="official",
                                return_weights=True)
    np.testing.assert_allclose(out, [[4.0], [12.0], [112.0]], rtol=1e-15)       # row 1 now lazy: 4 + 8
    np.testing.assert_array_equal(A, [[1, 0, 0], [1, 1, 0], [1, 1, 1]])


# --- the measure -------------------------------------------------------------------------------------

def test_sampling_every_key_once_gives_eq_4_and_lemma_1_holds(rng):
    """A sample holding each key once is Eq. 4's max-mean exactly (under both means: U = m); Lemma 1 bounds the
    exact measure by it, ln m ≤ M ≤ M̄ + ln m."""
    q, k = rng.standard_normal((2, 3, 9, 5)) * 1.5
    k = k[..., :7, :]
    every = np.tile(np.arange(7), (9, 1))
    Mbar = query_sparsity(q, k)
    for measure in ("paper", "official"):
        np.testing.assert_allclose(query_sparsity(q, k, every, measure=measure), Mbar, **TIGHT)
    M = query_sparsity(q, k, kind="lse")
    assert np.all(np.log(7) <= M) and np.all(M <= Mbar + np.log(7))


def test_exact_measure_is_the_kl_divergence_from_uniform_plus_ln_m(rng):
    """Eq. 2 comes from KL(uniform ‖ p_i), p_i = softmax of query i's scores: M(q_i, K) = KL + ln m."""
    q, k = rng.standard_normal((5, 4)), rng.standard_normal((6, 4))
    p = scaled_dot_product_attention(q, k, np.eye(6), return_weights=True)[1]
    kl = np.sum((1 / 6) * np.log((1 / 6) / p), axis=-1)
    np.testing.assert_allclose(query_sparsity(q, k, kind="lse"), kl + np.log(6), **TIGHT)


def test_a_non_finite_score_makes_the_measure_nan_and_its_query_active(rng):
    """torch.topk ranks NaN first: the query with an Inf is active and its row NaN, not hidden behind mean(V)."""
    q, k, v = rng.standard_normal((6, 4)), rng.standard_normal((6, 4)), rng.standard_normal((6, 3))
    q[4, 0] = np.inf
    sample = draw_sampled_keys(0, 6, 6, 3)
    M = query_sparsity(q, k, sample)
    assert np.isnan(M[4]) and np.all(np.isfinite(np.delete(M, 4)))
    out = informer_attention(q, k, v, sampled_keys=sample, num_top=1)
    assert np.all(np.isnan(out[4])) and np.all(np.isfinite(np.delete(out, 4, axis=0)))


def test_top_queries_ranks_nan_first_then_largest_then_lower_position():
    np.testing.assert_array_equal(top_queries([0.5, 2.0, np.nan, 2.0, 1.0], 3), [1, 2, 3])
    np.testing.assert_array_equal(top_queries([0.0, 0.0, 0.0, 0.0], 2), [0, 1])
    np.testing.assert_array_equal(top_queries([[3.0, 1.0, 2.0], [1.0, 2.0, 3.0]], 1), [[0], [2]])
    assert top_queries([1.0, 2.0], 0).shape == (0,)
    with pytest.raises(ValueError, match="u=3 is more queries than there are"):
        top_queries([1.0, 2.0], 3)


# --- counts, draws, exact limits --------------------------------------------------------------------

def test_counts_of_the_paper_the_official_code_and_its_first_release():
    assert informer_counts(96, 96) == (23, 23)                            # ⌈5 ln 96⌉ = ⌈22.8⌉
    assert informer_counts(96, 96, counts="official") == (25, 25)         # 5⌈ln 96⌉ = 5·5
    assert informer_counts(10, 720, factor=3, counts="official") == (9, 21)
    assert informer_counts(10, 720, factor=3, counts="official-v1") == (10, 9)   # u = 3⌈ln 720⌉ = 21, capped
    assert informer_counts(14, 14) == (14, 14) and informer_counts(15, 15) == (14, 14)   # ⌈5 ln 14⌉ = 14
    assert informer_counts(1, 1) == (0, 1)                                # ln 1 = 0, but one key is measured
    assert informer_counts(0, 0) == (0, 0) and informer_counts(4, 0) == (4, 0)
    with pytest.raises(ValueError, match="factor must be a positive int"):
        informer_counts(5, 5, factor=0)


def test_the_draw_is_documented_uniform_with_replacement_and_reproduced_from_rng():
    S = draw_sampled_keys(7, 50, 6, 8)
    np.testing.assert_array_equal(S, np.random.default_rng(7).integers(0, 6, size=(50, 8)))
    assert S.dtype == np.int64 and S.min() >= 0 and S.max() <= 5
    assert any(len(set(row)) < 8 for row in S.tolist())                   # 8 draws from 6 keys: repeats
    visible = draw_sampled_keys(7, 9, 6, 4, causal=True, sample_from="visible")
    np.testing.assert_array_equal(visible, np.random.default_rng(7).integers(
        0, np.minimum(np.arange(9) + 1, 6)[:, None], size=(9, 4)))
    np.testing.assert_array_equal(draw_sampled_keys(7, 9, 6, 4, sample_from="visible"), draw_sampled_keys(7, 9, 6, 4))
    assert draw_sampled_keys(7, 3, 0, 0).shape == (3, 0)
    with pytest.raises(ValueError, match="from m=0 keys"):
        draw_sampled_keys(7, 3, 0, 2)


def test_rng_and_its_explicit_draw_give_the_same_result(rng):
    q, k, v = rng.standard_normal((3, 2, 30, 4))
    u, U = informer_counts(30, 30)
    sample = draw_sampled_keys(5, 30, 30, U)
    np.testing.assert_array_equal(informer_attention(q, k, v, rng=5), informer_attention(q, k, v, sampled_keys=sample))
    result = registry.get("informer").apply(q, k, v, rng=5, factor=5, return_draws=True)
    np.testing.assert_array_equal(result.draws["sampled_keys"], sample)
    np.testing.assert_array_equal(result.output, informer_attention(q, k, v, rng=5))


@pytest.mark.parametrize("causal", [False, True])
def test_every_query_active_is_softmax_attention(rng, causal):
    """u = n exactly, and the default c = 5 at n = 12 (⌈5 ln 12⌉ = 13, capped at n), with heads and n != m."""
    q, k, v = rng.standard_normal((2, 3, 12, 4)), rng.standard_normal((2, 3, 9, 4)), rng.standard_normal((2, 3, 9, 5))
    out, A = scaled_dot_product_attention(q, k, v, causal=causal, return_weights=True)
    for options in ({"num_top": 12, "factor": 1}, {}):
        got, W = informer_attention(q, k, v, rng=0, causal=causal, return_weights=True, **options)
        np.testing.assert_allclose(got, out, **TIGHT, err_msg=str(options))
        np.testing.assert_allclose(W, A, **TIGHT)


def test_lazy_rows_are_the_mean_of_the_values_and_one_query_has_none_active(rng):
    """n = 1: u = ⌈5 ln 1⌉ = 0, the one query outputs mean(V); non-causal lazy rows weigh every key 1/m."""
    q, k, v = rng.standard_normal((1, 4)), rng.standard_normal((8, 4)), rng.standard_normal((8, 3))
    out, A = informer_attention(q, k, v, rng=0, return_weights=True)
    np.testing.assert_allclose(out, v.mean(axis=0, keepdims=True), **TIGHT)
    np.testing.assert_array_equal(A, np.full((1, 8), 1 / 8))


def test_heads_choose_their_own_queries_from_one_shared_sample(rng):
    q, k, v = rng.standard_normal((3, 2, 20, 4))
    sample = draw_sampled_keys(1, 20, 20, 4)
    out = informer_attention(q, k, v, sampled_keys=sample, num_top=5)
    chosen = top_queries(query_sparsity(q, k, sample), 5)
    assert not np.array_equal(chosen[0], chosen[1])                        # the heads differ
    for h in range(2):
        np.testing.assert_array_equal(out[h], informer_attention(q[h], k[h], v[h], sampled_keys=sample, num_top=5))
        A = informer_attention(q[h], k[h], v[h], sampled_keys=sample, num_top=5, return_weights=True)[1]
        np.testing.assert_array_equal(np.flatnonzero(~np.all(A == 1 / 20, axis=-1)), chosen[h])


@pytest.mark.parametrize("causal", [False, True])
def test_methods_agree(rng, causal):
    q, k, v = rng.standard_normal((2, 40, 4)), rng.standard_normal((2, 33, 4)), rng.standard_normal((2, 33, 3))
    reference = informer_attention(q, k, v, rng=2, causal=causal, method="equation", return_weights=True)
    for method in ("blocked", "auto"):
        for return_weights in (False, True):
            got = informer_attention(q, k, v, rng=2, causal=causal, method=method, return_weights=return_weights)
            np.testing.assert_allclose(got[0] if return_weights else got, reference[0], **TIGHT)
            if return_weights:
                np.testing.assert_array_equal(got[1], reference[1])


# --- the causal form and later tokens ----------------------------------------------------------------

def _one_query_stands_out(rng):
    """n = m = 6, scale 1, one active query; every query samples keys 0 and 5. Only q_1 is non-zero, so M̄_1 =
    |k_5·q_1 − k_0·q_1|/2 > 0 = M̄_i (i ≠ 1): query 1 is active."""
    q = np.zeros((6, 2))
    q[1] = [1.0, 0.0]
    k, v = rng.standard_normal((6, 2)), rng.standard_normal((6, 3))
    k[5, 0] = k[0, 0] + 1.0
    return q, k, v, {"sampled_keys": np.array([[0, 5]] * 6), "num_top": 1, "scale": 1.0, "causal": True}


def test_causal_output_depends_on_a_later_key_through_the_choice(rng):
    """Making k_5 equal k_0 (a key after query 1) sets M̄_1 = 0: every measure ties, query 0 takes the place, and
    row 1 switches from its softmax over j ≤ 1 to the running mean (v_0 + v_1)/2. Key 5 carries no weight in
    row 1 either way. This is why a decoder with a key/value cache does not reproduce the full sequence."""
    q, k, v, options = _one_query_stands_out(rng)
    before, A = informer_attention(q, k, v, return_weights=True, **options)
    np.testing.assert_allclose(before[1], scaled_dot_product_attention(q[1:2], k[:2], v[:2], scale=1.0)[0], **TIGHT)
    k[5] = k[0]
    after, B = informer_attention(q, k, v, return_weights=True, **options)
    np.testing.assert_allclose(after[1], (v[0] + v[1]) / 2, **TIGHT)
    assert np.max(np.abs(after[1] - before[1])) > 0.01
    np.testing.assert_array_equal(A[1, 2:], 0.0)
    np.testing.assert_array_equal(B[1, 2:], 0.0)


def test_visible_samples_keep_later_keys_out_of_a_measure_but_a_later_query_still_displaces(rng):
    """sample_from="visible": query i samples keys 0 and i (j ≤ i), so changing key 5 and value 5 leaves every
    earlier measure and rows 0-4 as they were; but a later query with a larger measure (q_5 = 10 q_1, M̄_5 =
    10 M̄_1) still takes query 1's place, and row 1 becomes the running mean (v_0 + v_1)/2."""
    q, k, v, options = _one_query_stands_out(rng)
    k[1, 0] = k[0, 0] + 1.0                                               # M̄_1 = |k_1·q_1 − k_0·q_1|/2 = 1/2
    options |= {"sampled_keys": np.array([[0, i] for i in range(6)]), "sample_from": "visible"}
    M = query_sparsity(q, k, options["sampled_keys"], scale=1.0)
    np.testing.assert_allclose(M, [0, 0.5, 0, 0, 0, 0], **TIGHT)
    before = informer_attention(q, k, v, **options)
    k2, v2 = k.copy(), v.copy()
    k2[5], v2[5] = rng.standard_normal(2), rng.standard_normal(3)
    np.testing.assert_array_equal(query_sparsity(q, k2, options["sampled_keys"], scale=1.0)[:5], M[:5])
    np.testing.assert_array_equal(informer_attention(q, k2, v2, **options)[:5], before[:5])
    q[5] = 10 * q[1]
    after = informer_attention(q, k, v, **options)
    np.testing.assert_allclose(after[1], (v[0] + v[1]) / 2, **TIGHT)
    assert np.max(np.abs(after[1] - before[1])) > 0.01


def test_no_key_value_cache_form():
    q = np.zeros((2, 4))
    with pytest.raises(ValueError, match="no causal='bottom-right'"):
        informer_attention(q, np.zeros((5, 4)), np.zeros((5, 4)), rng=0, causal="bottom-right")
    with pytest.raises(ValueError, match="informer takes causal in"):
        registry.get("informer").apply(q, np.zeros((5, 4)), np.zeros((5, 4)), rng=0, causal="bottom-right")


# --- memory, edge sizes, bad input -------------------------------------------------------------------

@pytest.mark.parametrize("causal", [False, True])
def test_nothing_n_by_m_without_weights(causal):
    """n = m = 2048 (an n × m float64 array is 32 MiB): the measure holds n × U, the active rows u × m (measured
    peaks: 2.6 MiB, causal 3.3 MiB)."""
    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((3, 2048, 8))
    tracemalloc.start()
    out = informer_attention(q, k, v, rng=0, causal=causal)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert out.shape == (2048, 8) and peak < 2048 * 2048 * 8 / 8, f"peak {peak / 2**20:.1f} MiB"
    with temporary_memory_budget(2048 * 2048 * 8 - 1), pytest.raises(MemoryBudgetError, match="return_weights"):
        informer_attention(q, k, v, rng=0, return_weights=True)


@pytest.mark.parametrize("causal", [False, True])
def test_edge_sizes(causal):
    z = np.zeros
    out, A = informer_attention(z((0, 4)), z((5, 4)), z((5, 3)), rng=0, causal=causal, return_weights=True)
    assert out.shape == (0, 3) and A.shape == (0, 5)
    out, A = informer_attention(np.ones((4, 4)), z((0, 4)), z((0, 3)), rng=0, causal=causal, return_weights=True)
    np.testing.assert_array_equal(out, z((4, 3)))                         # no key: zero rows
    assert A.shape == (4, 0)
    assert informer_attention(np.ones((4, 4)), np.ones((5, 4)), z((5, 0)), rng=0, causal=causal).shape == (4, 0)
    assert informer_attention(z((0, 4, 4)), z((0, 5, 4)), z((0, 5, 3)), rng=0, causal=causal).shape == (0, 4, 3)
    with pytest.raises(ValueError, match="d_k"):
        informer_attention(z((4, 0)), z((5, 0)), z((5, 3)), rng=0, causal=causal)
    v = np.arange(15.0).reshape(5, 3)                                     # d_k = 0, scale given: uniform rows
    np.testing.assert_allclose(informer_attention(z((5, 0)), z((5, 0)), v, rng=0, causal=causal, scale=1.0, num_top=5),
                               scaled_dot_product_attention(z((5, 0)), z((5, 0)), v, causal=causal, scale=1.0), **TIGHT)


@pytest.mark.parametrize(("options", "error", "match"), [
    ({}, ValueError, r"informer draws its sampled keys from rng: pass rng= \(or sampled_keys=\)"),
    ({"sampled_keys": np.zeros((4, 2))}, TypeError, "sampled_keys must be an array of ints"),
    ({"sampled_keys": np.zeros((3, 2), dtype=int)}, ValueError, r"sampled_keys must have shape \(n=4, U\)"),
    ({"sampled_keys": np.full((4, 2), 5)}, ValueError, r"sampled_keys must lie in \[0, m=5\)"),
    ({"sampled_keys": np.zeros((4, 0), dtype=int)}, ValueError, "at least one key per query"),
    ({"sampled_keys": np.full((4, 2), 3), "causal": True, "sample_from": "visible"}, ValueError,
     "row 0 holds a key after its query"),
    ({"sampled_keys": np.zeros((4, 2), dtype=int), "num_samples": 3}, ValueError, "but num_samples=3"),
    ({"rng": 0, "num_top": 5}, ValueError, "num_top=5 is more active queries than there are"),
    ({"rng": 0, "num_top": -1}, ValueError, "num_top must be a non-negative int"),
    ({"rng": 0, "num_samples": 0}, ValueError, "num_samples must be a positive int"),
    ({"rng": 0, "factor": 2.5}, ValueError, "factor must be a positive int"),
    ({"rng": 0, "counts": "v1"}, ValueError, "counts must be one of"),
    ({"rng": 0, "measure": "zero"}, ValueError, "measure must be one of"),
    ({"rng": 0, "lazy": "sum"}, ValueError, "lazy must be one of"),
    ({"rng": 0, "sample_from": "past"}, ValueError, "sample_from must be one of"),
    ({"rng": 0, "method": "csr"}, ValueError, "method must be one of"),
    ({"rng": 0, "causal": "yes"}, ValueError, "causal must be one of"),
    ({"rng": "seed"}, TypeError, "rng must be a numpy.random.Generator or an int seed"),
])
def test_bad_input_is_named(options, error, match):
    q, k, v = np.ones((4, 3)), np.ones((5, 3)), np.ones((5, 2))
    with pytest.raises(error, match=match):
        informer_attention(q, k, v, **options)


def test_rng_is_unused_with_a_given_sample():
    """A registry passes rng always: with sampled_keys it draws nothing and the result is the sample's."""
    rng = np.random.default_rng(3)
    q, k, v = rng.standard_normal((3, 9, 4))
    sample = draw_sampled_keys(1, 9, 9, 3)
    np.testing.assert_array_equal(informer_attention(q, k, v, factor=1, rng=0, sampled_keys=sample),
                                  informer_attention(q, k, v, factor=1, sampled_keys=sample))


def test_query_sparsity_bad_input():
    q, k = np.ones((4, 3)), np.ones((5, 3))
    with pytest.raises(ValueError, match="defined over every key"):
        query_sparsity(q, k, np.zeros((4, 2), dtype=int), kind="lse")
    with pytest.raises(ValueError, match="at least one key"):
        query_sparsity(q, np.ones((0, 3)))
    with pytest.raises(ValueError, match="q has d_k=3 but k has d_k=2"):
        query_sparsity(q, np.ones((5, 2)))
