"""causal_mask and padding_mask: against Python loops, both alignments, n != m."""
from __future__ import annotations

import numpy as np
import pytest

from refattn import causal_mask, padding_mask

from .naive import naive_causal_allowed


@pytest.mark.parametrize(("n", "m"), [(5, 5), (3, 7), (7, 3), (1, 4), (4, 1), (0, 3)])
@pytest.mark.parametrize("alignment", ["top-left", "bottom-right"])
def test_causal_mask_matches_loop(n, m, alignment):
    np.testing.assert_array_equal(causal_mask(n, m, causal=alignment), naive_causal_allowed(n, m, alignment))


def test_alignments_agree_when_square():
    np.testing.assert_array_equal(causal_mask(6), causal_mask(6, 6, causal="bottom-right"))


def test_bottom_right_with_more_queries_than_keys_has_empty_first_rows():
    # n = 5 queries, m = 3 keys: the last query sees all 3 keys, query i sees i − 1 keys.
    mask = causal_mask(5, 3, causal="bottom-right")
    np.testing.assert_array_equal(mask.sum(axis=1), [0, 0, 1, 2, 3])


def test_padding_mask_values_and_shape():
    mask = padding_mask(np.array([[2, 0], [4, 1]]), 4)
    assert mask.shape == (2, 2, 1, 4)
    np.testing.assert_array_equal(mask[..., 0, :].sum(axis=-1), [[2, 0], [4, 1]])
    np.testing.assert_array_equal(mask[0, 0, 0], [True, True, False, False])


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: causal_mask(3, 4, causal="top-right"), ValueError, "causal must be one of"),
    (lambda: causal_mask(3, 4, causal=False), ValueError, r"causal_mask is the causal mask: pass causal=True"),
    (lambda: causal_mask(-1), ValueError, "n must be a non-negative int"),
    (lambda: causal_mask(3, 2.0), ValueError, "m must be a non-negative int"),
    (lambda: padding_mask([1.5, 2.0], 4), TypeError, "lengths must be an integer array"),
    (lambda: padding_mask([1, 5], 4), ValueError, r"lengths must lie in \[0, m=4\], got values in \[1, 5\]"),
])
def test_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_alignment_is_the_deprecated_name_of_causal():
    with pytest.warns(DeprecationWarning, match=r"causal_mask: option alignment= is renamed causal="):
        old = causal_mask(3, 5, alignment="bottom-right")
    np.testing.assert_array_equal(old, causal_mask(3, 5, causal="bottom-right"))
