"""One ``causal`` argument for every pattern builder: False, True = "top-left", "bottom-right".

A causal pattern is its non-causal pattern, for the queries at their positions, and the causal
mask: ``pattern(causal=a) == pattern(causal=False) & causal_mask(n, m, causal=a)``. With
"bottom-right" the n queries are the last n of the m positions, so their non-causal rows are the
last n rows of the m × m pattern. Builders that take one length are self-attention, where both
alignments agree; builders whose paper has no causal form refuse every value but False.
"""
from __future__ import annotations

import numpy as np
import pytest

from refattn import causal_mask
from refattn.sparse import (
    axial_pattern,
    axial_patterns,
    band_pattern,
    bigbird_pattern,
    block_local_pattern,
    bp_transformer_pattern,
    dilated_pattern,
    draw_random_keys,
    etc_pattern,
    global_pattern,
    image_transformer_1d_pattern,
    image_transformer_pattern,
    longformer_pattern,
    longformer_patterns,
    random_pattern,
    sparse_transformer_pattern,
    star_transformer_pattern,
    strided_pattern,
)

ALIGNED = [True, "top-left", "bottom-right"]
SIZES = [(6, 10), (10, 6), (1, 9), (7, 7)]                       # n != m first: equal lengths hide alignment bugs

# Builders of an n × m pattern: build(n, m, causal).
CROSS = {
    "band": lambda n, m, causal: band_pattern(n, 2, m=m, causal=causal),
    "dilated": lambda n, m, causal: dilated_pattern(n, 2, 3, m=m, causal=causal),
    "strided": lambda n, m, causal: strided_pattern(n, 3, m=m, causal=causal),
    "block_local": lambda n, m, causal: block_local_pattern(n, 3, m=m, causal=causal),
    "global": lambda n, m, causal: global_pattern(n, [1, 4], m=m, causal=causal),
}

# Self-attention builders with a causal form that is "keep j <= i": build(causal) -> (N, N).
SELF = {
    "longformer": lambda causal: longformer_pattern(13, 4, dilation=2, global_indices=[0, 6], causal=causal),
    "sparse_transformer strided": lambda causal: sparse_transformer_pattern(13, 3, causal=causal),
    "sparse_transformer fixed": lambda causal: sparse_transformer_pattern(13, 4, kind="fixed", c=2, causal=causal),
    "axial row": lambda causal: axial_pattern(3, 4, axis="row", causal=causal),
    "axial column": lambda causal: axial_pattern(3, 4, axis="column", causal=causal),
    "image_transformer_1d": lambda causal: image_transformer_1d_pattern(13, 3, 2, causal=causal, flange="both"),
    "image_transformer raster": lambda causal: image_transformer_pattern(
        5, 6, query_block=(2, 3), memory_flange=(1, 1), causal=causal, order="raster", flange="both"),
}

# Self-attention builders whose causal form is another order than j <= i (tokens before span
# nodes; block-raster generation): every causal value gives the same pattern.
OWN_ORDER = {
    "bp_transformer": lambda causal: bp_transformer_pattern(11, 2, causal=causal),
    "image_transformer block-raster": lambda causal: image_transformer_pattern(
        5, 6, query_block=(2, 3), memory_flange=(1, 1), causal=causal),
}

NO_CAUSAL_FORM = {
    "star_transformer": (lambda causal: star_transformer_pattern(6, causal=causal), "Star-Transformer"),
    "etc": (lambda causal: etc_pattern(2, 6, 1, causal=causal), "ETC"),
    "bigbird": (lambda causal: bigbird_pattern(8, block_size=2, num_random_blocks=0, causal=causal), "BigBird"),
}


def noncausal_rows(build, n, m, alignment):
    """The non-causal rows of the n queries at their positions: rows 0 … n − 1, or the last n of m × m."""
    if alignment == "bottom-right":
        return build(m, m, False).last_rows(n).to_mask()
    return build(n, m, False).to_mask()


@pytest.mark.parametrize("name", CROSS)
@pytest.mark.parametrize(("n", "m"), SIZES)
@pytest.mark.parametrize("causal", ALIGNED)
def test_cross_pattern_is_the_noncausal_pattern_and_the_causal_mask(name, n, m, causal):
    build = CROSS[name]
    alignment = "top-left" if causal is True else causal
    expected = noncausal_rows(build, n, m, alignment) & causal_mask(n, m, causal=alignment)
    np.testing.assert_array_equal(build(n, m, causal).to_mask(), expected)


@pytest.mark.parametrize("name", CROSS)
@pytest.mark.parametrize(("n", "m"), SIZES)
def test_bottom_right_is_the_last_rows_of_the_causal_square(name, n, m):
    build = CROSS[name]
    assert build(n, m, "bottom-right") == build(m, m, True).last_rows(n)


@pytest.mark.parametrize(("n", "m"), SIZES)
@pytest.mark.parametrize("causal", ALIGNED)
def test_random_given_keys_is_the_noncausal_pattern_and_the_causal_mask(n, m, causal):
    keys = draw_random_keys(5, n, min(3, m), m=m)                   # explicit draw: no position in it
    alignment = "top-left" if causal is True else causal
    expected = random_pattern(n, m=m, keys=keys).to_mask() & causal_mask(n, m, causal=alignment)
    np.testing.assert_array_equal(random_pattern(n, m=m, keys=keys, causal=causal).to_mask(), expected)


@pytest.mark.parametrize("name", SELF)
@pytest.mark.parametrize("causal", ALIGNED)
def test_self_attention_pattern_is_the_noncausal_pattern_and_the_causal_mask(name, causal):
    build = SELF[name]
    full = build(False)
    assert full.n == full.m
    alignment = "top-left" if causal is True else causal
    np.testing.assert_array_equal(build(causal).to_mask(), full.to_mask() & causal_mask(full.n, causal=alignment))


@pytest.mark.parametrize("causal", ALIGNED)
def test_per_head_builders_take_every_causal_value(causal):
    heads = longformer_patterns(13, 4, [1, 2], global_indices=[3], causal=causal)
    assert heads == longformer_patterns(13, 4, [1, 2], global_indices=[3], causal=True)
    assert axial_patterns(3, 4, causal=causal) == axial_patterns(3, 4, causal=True)


@pytest.mark.parametrize("name", OWN_ORDER)
def test_own_order_builders_agree_on_every_causal_value(name):
    build = OWN_ORDER[name]
    causal, full = build(True), build(False)
    assert causal != full                                          # the causal form drops pairs
    for value in ALIGNED[1:]:
        assert build(value) == causal


@pytest.mark.parametrize("name", NO_CAUSAL_FORM)
@pytest.mark.parametrize("causal", ALIGNED)
def test_builders_without_a_causal_form_refuse_causal(name, causal):
    build, mechanism = NO_CAUSAL_FORM[name]
    build(False)
    with pytest.raises(ValueError, match=rf"causal={causal!r}, but (the )?{mechanism} has no causal form"):
        build(causal)


def at_5_by_7(build):
    return lambda causal: build(5, 7, causal)


ALL = {**{name: at_5_by_7(build) for name, build in CROSS.items()},
       "random": lambda causal: random_pattern(5, 2, m=7, rng=0, causal=causal),
       "draw_random_keys": lambda causal: draw_random_keys(0, 5, 2, m=7, causal=causal),
       **SELF, **OWN_ORDER, **{k: b for k, (b, _) in NO_CAUSAL_FORM.items()}}


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("causal", [1, 0, "yes", "bottom_right", None])
def test_every_builder_refuses_other_causal_values(name, causal):
    with pytest.raises(ValueError, match=r"causal must be one of \(False, True, 'top-left', 'bottom-right'\)"):
        ALL[name](causal)
