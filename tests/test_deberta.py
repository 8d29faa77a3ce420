"""DeBERTa's disentangled attention (He et al., 2021): its exact limit, the relative index δ, the log buckets of
v2/v3 against the official code's values, and the two readings of the position-to-content index."""
from __future__ import annotations

import math

import numpy as np
import pytest

from refattn import scaled_dot_product_attention
from refattn.positional import (
    DebertaParams,
    deberta_attention,
    deberta_delta,
    disentangled_scores,
    init_deberta,
    log_bucket_position,
)

TOL = 1e-12


def _inputs(seed=0, n=5, m=7, d=4):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, d)), rng.standard_normal((m, d)), rng.standard_normal((m, 3))


@pytest.mark.parametrize("causal", [False, True, "bottom-right"])
def test_no_position_term_is_sdpa_at_one_over_sqrt_d(causal):
    q, k, v = _inputs(1)
    out, A = deberta_attention(q, k, v, init_deberta(2, 3, 4), terms=(), causal=causal, return_weights=True)
    ref, ref_A = scaled_dot_product_attention(q, k, v, causal=causal, scale=1 / math.sqrt(4), return_weights=True)
    np.testing.assert_allclose(out, ref, rtol=TOL, atol=TOL)
    np.testing.assert_allclose(A, ref_A, rtol=TOL, atol=TOL)


def test_scale_counts_the_position_terms():
    # the official scale_factor: 1 + number of position terms; 1/√(3d) with both (the paper's)
    q, k, _ = _inputs(3)
    params = init_deberta(4, 2, 4)
    for terms, s in (((), 1), (("c2p",), 2), (("p2c",), 2), (("c2p", "p2c"), 3)):
        S = disentangled_scores(q, k, params, terms=terms)
        np.testing.assert_allclose(S["c2c"], q @ k.T / math.sqrt(s * 4), rtol=TOL, atol=TOL)
        assert sorted(S) == sorted(("c2c", *terms))


def test_relative_index_is_the_papers_delta():
    # δ(i, j) = 0 for i − j ≤ −k, 2k − 1 for i − j ≥ k, else i − j + k; written out for k = 2, n = 4, m = 6
    expected = np.array([[2, 1, 0, 0, 0, 0],
                         [3, 2, 1, 0, 0, 0],
                         [3, 3, 2, 1, 0, 0],
                         [3, 3, 3, 2, 1, 0]])
    np.testing.assert_array_equal(deberta_delta(4, 6, 2), expected)
    # the last 4 of 6 positions (bottom-right): query i at i + 2
    np.testing.assert_array_equal(deberta_delta(4, 6, 2, offset=2), np.array([[3, 3, 2, 1, 0, 0],
                                                                              [3, 3, 3, 2, 1, 0],
                                                                              [3, 3, 3, 3, 2, 1],
                                                                              [3, 3, 3, 3, 3, 2]]))


# microsoft/DeBERTa @ 4d7fe0b, DeBERTa/deberta/da_utils.py, make_log_bucket_dict(bucket_size=16, max_position=64)
# read through make_log_bucket_position, for r = 0 … 80 (torch is not installed here: the values were obtained by
# running the function's lines, transcribed op by op, in float32 as torch does and in float64 (they agree), and
# spot-checked by hand: r = 9 → ⌈7·log(9/8)/log(63/8)⌉ + 8 = ⌈0.40⌉ + 8 = 9; r = 10 → ⌈0.76⌉ + 8 = 9).
LOG_BUCKETS_16_64 = [
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 10, 10, 10, 10, 11, 11, 11, 11, 11, 12, 12, 12, 12, 12, 12, 12, 13, 13, 13,
    13, 13, 13, 13, 13, 14, 14, 14, 14, 14, 14, 14, 14, 14, 14, 14, 14, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15,
    15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15]
# The same function with DeBERTa-v3's configuration (position_buckets = 256, max_relative_positions = 512).
LOG_BUCKETS_256_512 = {0: 0, 1: 1, 127: 127, 128: 128, 129: 129, 130: 130, 140: 137, 160: 149, 200: 169, 255: 192,
                       256: 192, 300: 207, 384: 229, 400: 233, 450: 244, 500: 254, 510: 255, 511: 255, 512: 255,
                       600: 255, 1000: 255}


def test_log_buckets_match_the_official_code():
    r = np.arange(81)
    np.testing.assert_array_equal(log_bucket_position(r, 16, 64), LOG_BUCKETS_16_64)
    np.testing.assert_array_equal(log_bucket_position(-r, 16, 64), [-b for b in LOG_BUCKETS_16_64])
    r = np.array(list(LOG_BUCKETS_256_512))
    np.testing.assert_array_equal(log_bucket_position(r, 256, 512), list(LOG_BUCKETS_256_512.values()))
    # δ with buckets: clip(bucket(i − j) + position_buckets, 0, 2·position_buckets − 1)
    delta = deberta_delta(1, 81, 99, offset=80, position_buckets=16, max_position=64)   # i − j = 80 … 0
    np.testing.assert_array_equal(delta[0, ::-1], np.minimum(np.array(LOG_BUCKETS_16_64) + 16, 31))


def test_p2c_index_paper_and_official():
    q, k, v = _inputs(5, n=4, m=6)
    params = init_deberta(6, 2, 4)
    s = 1 / math.sqrt(3 * 4)
    r = np.arange(4)[:, None] - np.arange(6)[None, :]              # i − j
    clip = lambda x: np.clip(x + 2, 0, 3)                          # noqa: E731  the paper's δ for k = 2
    # the official code (current): gather (Q^r K^cᵀ) along its rows at c2p_pos = clip(i − j + k)
    official = (params.pos_query @ k.T * s)[clip(r), np.arange(6)[None, :]]
    paper = np.einsum("jc,ijc->ij", k, params.pos_query[clip(-r)]) * s     # k_j · Q^r[δ(j, i)]
    got_official = disentangled_scores(q, k, params, p2c_index="official")["p2c"]
    got_paper = disentangled_scores(q, k, params)["p2c"]
    np.testing.assert_allclose(got_official, official, rtol=TOL, atol=TOL)
    np.testing.assert_allclose(got_paper, paper, rtol=TOL, atol=TOL)
    np.testing.assert_array_equal(deberta_delta(6, 4, 2, offset=-1).T, clip(-(r + 1)))   # δ(j, i), query at i + 1
    assert np.max(np.abs(got_paper - got_official)) > 0.1          # the two readings are different models
    c2p = np.einsum("ic,ijc->ij", q, params.pos_key[clip(r)]) * s  # q_i · K^r[δ(i, j)]
    np.testing.assert_allclose(disentangled_scores(q, k, params)["c2p"], c2p, rtol=TOL, atol=TOL)


def test_position_terms_depend_on_i_minus_j_only():
    # equal query rows and equal key rows: c2p and p2c are constant along each diagonal i − j
    rng = np.random.default_rng(7)
    q = np.tile(rng.standard_normal(4), (5, 1))
    k = np.tile(rng.standard_normal(4), (8, 1))
    S = disentangled_scores(q, k, init_deberta(8, 3, 4))
    for term in ("c2p", "p2c"):
        for diag in range(-7, 5):
            values = np.diagonal(S[term], offset=-diag)
            np.testing.assert_allclose(values, values[0], rtol=TOL, atol=TOL)


def test_heads_take_their_own_table():
    rng = np.random.default_rng(9)
    q, k, v = rng.standard_normal((2, 5, 4)), rng.standard_normal((2, 6, 4)), rng.standard_normal((2, 6, 3))
    params = DebertaParams(rng.standard_normal((2, 4, 4)), rng.standard_normal((2, 4, 4)))
    out = deberta_attention(q, k, v, params)
    for h in range(2):
        one = deberta_attention(q[h], k[h], v[h], DebertaParams(params.pos_key[h], params.pos_query[h]))
        np.testing.assert_allclose(out[h], one, rtol=TOL, atol=TOL)


def test_bad_input_names_the_argument():
    q, k, v = _inputs(0)
    params = init_deberta(0, 2, 4)
    with pytest.raises(ValueError, match="position_buckets=4 .* 8 rows"):
        deberta_attention(q, k, v, params, position_buckets=4, max_position=8)
    with pytest.raises(ValueError, match="both position_buckets and max_position"):
        deberta_attention(q, k, v, params, position_buckets=2)
    with pytest.raises(ValueError, match="terms"):
        deberta_attention(q, k, v, params, terms=("p2p",))
    with pytest.raises(TypeError, match="terms"):
        deberta_attention(q, k, v, params, terms="c2p")
    with pytest.raises(ValueError, match="p2c_index"):
        deberta_attention(q, k, v, params, p2c_index="hf")
    with pytest.raises(ValueError, match=r"d=5"):
        deberta_attention(np.ones((2, 5)), np.ones((3, 5)), np.ones((3, 2)), params)
    with pytest.raises(ValueError, match="2k rows"):
        DebertaParams(np.ones((3, 4)), np.ones((3, 4)))
    with pytest.raises(ValueError, match="d_k"):
        deberta_attention(np.ones((2, 0)), np.ones((3, 0)), np.ones((3, 2)), init_deberta(0, 2, 0))
