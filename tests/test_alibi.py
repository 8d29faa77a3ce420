"""ALiBi: the slopes of the official code for h = 8, 12 and 16 as literal tables, attention with ALiBi equals sdpa
with the bias written out as an explicit float mask (both forms, every causal setting), the official code's m·j form,
slope 0, and bad input."""
from __future__ import annotations

import numpy as np
import pytest

from refattn import registry, scaled_dot_product_attention
from refattn.positional import alibi_attention, alibi_bias, alibi_slopes

TIGHT = {"rtol": 1e-12, "atol": 1e-12}
APPLY = registry.get("alibi").apply

# The slopes of get_slopes(n) in TransformerDecoder.__init__ of fairseq/models/transformer.py, official code
# github.com/ofirpress/attention_with_linear_biases (commit 3b7c2eca): for a power of two n,
# start = 2^(−2^−(log2 n − 3)) = 2^(−8/n) and start·start^i; otherwise the slopes of the closest power of two
# below, then get_slopes(2·closest)[0::2][:n − closest]. Written out by hand from that rule: 2^−k as exact binary
# fractions, 2^−(k + 1/2) to 16 digits.
OFFICIAL_SLOPES = {
    8: [0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625],
    12: [0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625,                       # h' = 8
         0.7071067811865476, 0.3535533905932738, 0.1767766952966369, 0.08838834764831845],       # 16's 1st, 3rd, ...
    16: [0.7071067811865476, 0.5, 0.3535533905932738, 0.25, 0.1767766952966369, 0.125, 0.08838834764831845, 0.0625,
         0.04419417382415922, 0.03125, 0.02209708691207961, 0.015625, 0.011048543456039806, 0.0078125,
         0.005524271728019903, 0.00390625],
}


@pytest.mark.parametrize("h", sorted(OFFICIAL_SLOPES))
def test_slopes_match_the_official_code(h):
    np.testing.assert_allclose(alibi_slopes(h), OFFICIAL_SLOPES[h], rtol=1e-15, atol=0)


def test_slopes_of_small_head_counts():
    """h = 1: 2^−8 (start = 2^(−2^3)); h = 3: 2^−4, 2^−8, then 2^−2 (every other slope of h = 4)."""
    np.testing.assert_array_equal(alibi_slopes(1), [2.0**-8])
    np.testing.assert_array_equal(alibi_slopes(3), [2.0**-4, 2.0**-8, 2.0**-2])


def _explicit_bias(slopes, n, m, form, shift):
    """The bias −m_h·(i + shift − j) (or its absolute value) entry by entry, as nested lists."""
    return np.array([[[-s * (abs(i + shift - j) if form == "symmetric" else i + shift - j) for j in range(m)]
                      for i in range(n)] for s in slopes])


@pytest.mark.parametrize("form", ["causal", "symmetric"])
@pytest.mark.parametrize(("causal", "n", "m"), [(False, 5, 7), (True, 6, 6), (True, 7, 4), ("bottom-right", 3, 7),
                                                ("bottom-right", 7, 5)])
def test_alibi_equals_sdpa_with_the_bias_as_an_explicit_float_mask(rng, form, causal, n, m):
    h = 6
    q, k, v = rng.standard_normal((2, h, n, 4)), rng.standard_normal((2, h, m, 4)), rng.standard_normal((2, h, m, 3))
    shift = m - n if causal == "bottom-right" else 0
    mask = _explicit_bias(OFFICIAL_SLOPES[12][:4] + [2.0, 1.0], n, m, form, shift)      # 6 heads' slopes, given
    out, A = alibi_attention(q, k, v, slopes=OFFICIAL_SLOPES[12][:4] + [2.0, 1.0], form=form, causal=causal,
                             return_weights=True)
    expected, A_expected = scaled_dot_product_attention(q, k, v, mask, causal=causal, return_weights=True)
    np.testing.assert_allclose(out, expected, **TIGHT)
    np.testing.assert_allclose(A, A_expected, **TIGHT)
    np.testing.assert_allclose(alibi_bias(n, m, slopes=OFFICIAL_SLOPES[12][:4] + [2.0, 1.0], form=form,
                                          causal="bottom-right" if shift else False), mask, **TIGHT)


def test_default_slopes_are_the_papers_for_the_head_count(rng):
    q, k, v = rng.standard_normal((3, 8, 5, 4))
    np.testing.assert_array_equal(alibi_attention(q, k, v, causal=True),
                                  alibi_attention(q, k, v, causal=True, slopes=OFFICIAL_SLOPES[8]))


def test_the_official_codes_key_position_bias_gives_the_same_causal_weights(rng):
    """The official code adds m·j (one row for every query): it differs from −m·(i − j) by m·i along row i, which
    softmax ignores."""
    h, n = 8, 6
    q, k, v = rng.standard_normal((3, h, n, 4))
    official = np.array([[[s * j for j in range(n)] for _ in range(n)] for s in OFFICIAL_SLOPES[8]])
    expected = scaled_dot_product_attention(q, k, v, official, causal=True)
    np.testing.assert_allclose(alibi_attention(q, k, v, causal=True), expected, **TIGHT)


def test_the_bias_over_i_and_j_for_one_head():
    np.testing.assert_array_equal(alibi_bias(3, 4, slopes=[0.5])[0],
                                  [[0.0, 0.5, 1.0, 1.5], [-0.5, 0.0, 0.5, 1.0], [-1.0, -0.5, 0.0, 0.5]])
    np.testing.assert_array_equal(alibi_bias(2, 4, slopes=[0.25], form="symmetric", causal="bottom-right")[0],
                                  [[-0.5, -0.25, 0.0, -0.25], [-0.75, -0.5, -0.25, 0.0]])


@pytest.mark.parametrize("causal", [False, True, "bottom-right"])
def test_slope_zero_is_softmax_attention_and_a_scalar_slope_is_one_head(rng, causal):
    q, k, v = rng.standard_normal((4, 8)), rng.standard_normal((6, 8)), rng.standard_normal((6, 3))
    np.testing.assert_array_equal(APPLY(q, k, v, causal=causal, slopes=0.0).output,
                                  scaled_dot_product_attention(q, k, v, causal=causal))
    heads = alibi_attention(q[None], k[None], v[None], slopes=[0.25], form="symmetric", causal=causal,
                            return_weights=True)
    one = alibi_attention(q, k, v, slopes=0.25, form="symmetric", causal=causal, return_weights=True)
    np.testing.assert_allclose(one[0], heads[0][0], **TIGHT)
    np.testing.assert_allclose(one[1], heads[1][0], **TIGHT)
    np.testing.assert_array_equal(APPLY(q, k, v, causal=causal, slopes=0.25, form="symmetric").output, one[0])


def test_the_old_names_slope_and_alignment_warn_and_give_the_same_result(rng):
    q, k, v = rng.standard_normal((4, 8)), rng.standard_normal((6, 8)), rng.standard_normal((6, 3))
    with pytest.warns(DeprecationWarning, match=r"slope= is renamed slopes="):
        old = APPLY(q, k, v, causal="bottom-right", slope=0.25).output
    np.testing.assert_array_equal(old, APPLY(q, k, v, causal="bottom-right", slopes=0.25).output)
    with pytest.warns(DeprecationWarning, match=r"alignment= is renamed causal="):
        old = alibi_bias(2, 4, slopes=[0.25], alignment="bottom-right")
    np.testing.assert_array_equal(old, alibi_bias(2, 4, slopes=[0.25], causal="bottom-right"))


def test_extrapolation_far_keys_fade_with_the_slope(rng):
    """With equal content scores a query's weights decay geometrically: A_{i,j} ∝ e^{−m(i − j)}."""
    n = 9
    q, k, v = np.zeros((1, n, 4)), rng.standard_normal((1, n, 4)), rng.standard_normal((1, n, 2))
    _, A = alibi_attention(q, k, v, slopes=[0.5], causal=True, return_weights=True)
    np.testing.assert_allclose(A[0, -1, 1:] / A[0, -1, :-1], np.full(n - 1, np.exp(0.5)), **TIGHT)


@pytest.mark.parametrize(("call", "match"), [
    (lambda: alibi_slopes(0), "num_heads"),
    (lambda: alibi_bias(3, slopes=[-0.5]), "slopes must be a 1-D array of finite numbers >= 0"),
    (lambda: alibi_bias(3, slopes=[[0.5]]), r"got shape \(1, 1\)"),
    (lambda: alibi_bias(3, slopes=[0.5], form="encoder"), "form"),
    (lambda: alibi_attention(np.ones((2, 3, 4)), np.ones((2, 3, 4)), np.ones((2, 3, 4)), slopes=[0.5]),
     r"slopes has 1 entries but q has 2 heads \(shape \(2, 3, 4\)"),
    (lambda: alibi_attention(np.ones((3, 4)), np.ones((3, 4)), np.ones((3, 4))),
     "q must have at least 3 dimensions"),
    (lambda: APPLY(np.ones((3, 4)), np.ones((3, 4)), np.ones((3, 4)), slopes=np.inf),
     "slopes must be a finite number >= 0"),
    (lambda: APPLY(np.ones((3, 4)), np.ones((3, 4)), np.ones((3, 4)), slopes="1"), "slopes must be a real number"),
    (lambda: alibi_attention(np.ones(4), np.ones((3, 4)), np.ones((3, 4)), slopes=0.5),
     "q must have at least 2 dimensions"),
    (lambda: alibi_bias(3, slopes=[0.5], causal="top-right"), "causal must be one of"),
])
def test_bad_input_is_refused_naming_the_argument(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()
