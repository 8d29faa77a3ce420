"""RoPE: scores depend on positions only through i − j for every pairing, interleaved and half-split pairing are one
rotation up to a fixed permutation of dimensions, no rotation (or every position equal) is softmax attention,
partial rotary dimensions, position interpolation, the paper's frequencies, and bad input."""
from __future__ import annotations

import numpy as np
import pytest

from refattn import registry, scaled_dot_product_attention
from refattn.positional import rope_attention, rope_frequencies, rotate

TIGHT = {"rtol": 1e-12, "atol": 1e-12}
APPLY = registry.get("rope").apply
SETTINGS = [
    {"pairing": "interleaved"},
    {"pairing": "half"},
    {"pairing": "interleaved", "rotary_dim": 4},
    {"pairing": "half", "rotary_dim": 6, "base": 500.0},
    {"pairing": "half", "scaling": 4.0},
]


def _interleaved_to_half(r, d):
    """The permutation taking interleaved dimension 2t to half-split dimension t and 2t + 1 to t + r/2."""
    return np.concatenate([np.arange(0, r, 2), np.arange(1, r, 2), np.arange(r, d)])


@pytest.mark.parametrize("options", SETTINGS, ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()))
def test_scores_depend_on_positions_only_through_their_difference(rng, options):
    """(R_i q)ᵀ(R_j k) = qᵀ R_{j − i} k: the (P, P) score map of one q and one k at every position is Toeplitz, and
    each entry equals q against k turned by j − i alone."""
    P, d = 40, 8
    q, k = rng.standard_normal(d), rng.standard_normal(d)
    positions = np.arange(P, dtype=float)
    Q = rotate(np.tile(q, (P, 1)), positions, **options)
    K = rotate(np.tile(k, (P, 1)), positions, **options)
    S = Q @ K.T                                                   # S_ij = (R_i q)ᵀ (R_j k)
    np.testing.assert_allclose(S[1:, 1:], S[:-1, :-1], **TIGHT)  # constant along every diagonal
    relative = np.array([[q @ rotate(k[None], [float(j - i)], **options)[0] for j in range(P)] for i in range(P)])
    np.testing.assert_allclose(S, relative, **TIGHT)
    assert np.ptp(S) > 0.1                                         # the positions do change the scores


@pytest.mark.parametrize("rotary_dim", [8, 4])
def test_interleaved_and_half_split_are_one_rotation_up_to_a_permutation(rng, rotary_dim):
    x, positions = rng.standard_normal((2, 5, 8)), rng.uniform(-20, 20, size=5)
    perm = _interleaved_to_half(rotary_dim, 8)
    interleaved = rotate(x, positions, pairing="interleaved", rotary_dim=rotary_dim)
    half = rotate(x[..., perm], positions, pairing="half", rotary_dim=rotary_dim)
    np.testing.assert_array_equal(half, interleaved[..., perm])
    q, k, v = rng.standard_normal((3, 6, 8))
    np.testing.assert_allclose(rope_attention(q[:, perm], k[:, perm], v, causal=True, pairing="half",
                                              rotary_dim=rotary_dim),
                               rope_attention(q, k, v, causal=True, rotary_dim=rotary_dim), **TIGHT)
    assert np.abs(rotate(x, positions, pairing="half") - interleaved).max() > 0.1   # the pairings differ as such


@pytest.mark.parametrize("causal", [False, True, "bottom-right"])
def test_no_rotation_or_equal_positions_is_softmax_attention(rng, causal):
    q, k, v = rng.standard_normal((5, 8)), rng.standard_normal((7, 8)), rng.standard_normal((7, 3))
    x = rng.standard_normal((4, 6))
    np.testing.assert_array_equal(rotate(x, np.zeros(4)), x)                   # position 0 turns nothing
    expected = scaled_dot_product_attention(q, k, v, causal=causal)
    for pairing in ("interleaved", "half"):
        for positions in (0.0, 13.0):                                          # every pair at distance 0
            out = rope_attention(q, k, v, causal=causal, pairing=pairing, q_positions=np.full(5, positions),
                                 k_positions=np.full(7, positions))
            np.testing.assert_allclose(out, expected, **TIGHT)
        np.testing.assert_array_equal(rope_attention(q, k, v, causal=causal, pairing=pairing, rotary_dim=0), expected)


def test_partial_rotary_dimensions_rotate_the_first_r_with_their_own_frequencies(rng):
    """GPT-J / GPT-NeoX: the first r dimensions are rotated as an r-dimensional vector (θ_t = base^(−2t/r)), the
    rest pass through unchanged."""
    x, positions = rng.standard_normal((3, 7, 10)), np.arange(7.0)
    for pairing in ("interleaved", "half"):
        y = rotate(x, positions, pairing=pairing, rotary_dim=4)
        np.testing.assert_array_equal(y[..., 4:], x[..., 4:])
        np.testing.assert_array_equal(y[..., :4], rotate(x[..., :4], positions, pairing=pairing))


def test_position_interpolation_divides_the_positions_by_the_factor(rng):
    x, positions = rng.standard_normal((6, 8)), np.arange(6.0) * 3
    np.testing.assert_allclose(rotate(x, positions, scaling=4.0), rotate(x, positions / 4.0), **TIGHT)
    q, k, v = rng.standard_normal((3, 6, 8))
    np.testing.assert_allclose(rope_attention(q, k, v, scaling=2.0),
                               rope_attention(q, k, v, q_positions=np.arange(6) / 2, k_positions=np.arange(6) / 2),
                               **TIGHT)


def test_the_papers_frequencies_and_a_rotation_preserves_norms(rng):
    """θ_t = 10000^(−2t/d) (Eq. 15): d = 8 gives 1, 10^−1, 10^−2, 10^−3."""
    np.testing.assert_allclose(rope_frequencies(8), [1.0, 1e-1, 1e-2, 1e-3], **TIGHT)
    x = rng.standard_normal((5, 8))
    y = rotate(x, rng.uniform(0, 1000, size=5), pairing="half")
    np.testing.assert_allclose(np.linalg.norm(y, axis=-1), np.linalg.norm(x, axis=-1), **TIGHT)


@pytest.mark.parametrize(("n", "m"), [(3, 7), (7, 7)])
def test_bottom_right_places_query_i_at_position_i_plus_m_minus_n(rng, n, m):
    q, k, v = rng.standard_normal((n, 8)), rng.standard_normal((m, 8)), rng.standard_normal((m, 2))
    rotated = scaled_dot_product_attention(rotate(q, np.arange(n) + m - n), rotate(k, np.arange(m)), v,
                                           causal="bottom-right")
    np.testing.assert_allclose(APPLY(q, k, v, causal="bottom-right").output, rotated, **TIGHT)


def test_decoding_one_query_at_a_time_reproduces_the_full_causal_result(rng):
    q, k, v = rng.standard_normal((3, 6, 8))
    full = APPLY(q, k, v, causal=True, pairing="half").output
    for t in range(6):
        step = APPLY(q[t:t + 1], k[:t + 1], v[:t + 1], causal="bottom-right", pairing="half").output
        np.testing.assert_allclose(step[0], full[t], **TIGHT)


@pytest.mark.parametrize(("call", "match"), [
    (lambda x: rotate(x[..., :7], np.arange(5.0)), "d_k=7 is odd"),
    (lambda x: rotate(x, np.arange(5.0), rotary_dim=3), "rotary_dim must be even"),
    (lambda x: rotate(x, np.arange(5.0), rotary_dim=10), "at most d_k=8"),
    (lambda x: rotate(x, np.arange(4.0)), r"positions must have shape \(T,\) = \(5,\)"),
    (lambda x: rotate(x, np.full(5, np.nan)), "positions must be finite"),
    (lambda x: rotate(x, np.arange(5.0), pairing="neox"), "pairing"),
    (lambda x: rotate(x, np.arange(5.0), scaling=0.0), "scaling must be a finite number > 0"),
    (lambda x: rotate(x, np.arange(5.0), base=-1.0), "base must be a finite number > 0"),
    (lambda x: rotate(x, np.ones(5, dtype=bool)), "positions must be a real floating-point array"),
])
def test_bad_input_is_refused_naming_the_argument(rng, call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call(rng.standard_normal((5, 8)))


def test_position_errors_name_q_positions_and_k_positions():
    """rotate's checks said "positions" whichever argument of rope_attention was wrong."""
    q = np.ones((4, 2))
    with pytest.raises(ValueError, match=r"^q_positions must have shape \(T,\) = \(4,\) for q of shape \(4, 2\)"):
        rope_attention(q, q, q, q_positions=[1, 2])
    with pytest.raises(ValueError, match=r"^k_positions must be finite"):
        rope_attention(q, q, q, k_positions=[1.0, 2.0, 3.0, np.nan])
