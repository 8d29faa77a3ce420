"""Learned absolute positional embeddings: the table's draw (BERT's truncated normal, GPT-2's normal), the sum with
the inputs, and the error past the table's last position."""
from __future__ import annotations

import numpy as np
import pytest

from refattn import registry
from refattn.positional import init_learned_pe, learned_positional_encoding


def test_bert_draw_is_a_truncated_normal_of_std_002():
    P = init_learned_pe(0, 256, 64)
    assert P.shape == (256, 64)
    assert np.abs(P).max() <= 0.04                                 # nothing beyond two standard deviations
    # a normal of std 0.02 cut at ±2σ has std 0.02·0.8796 = 0.01759; 16384 draws: standard error ≈ 1e-4
    assert abs(P.std() - 0.02 * 0.8796) < 6e-4
    np.testing.assert_array_equal(P, init_learned_pe(np.random.default_rng(0), 256, 64))


def test_gpt2_draw_is_a_normal_of_std_001():
    P = init_learned_pe(1, 256, 64, init="gpt2")
    np.testing.assert_array_equal(P, np.random.default_rng(1).standard_normal((256, 64)) * 0.01)


def test_adds_row_t_to_position_t():
    rng = np.random.default_rng(2)
    P, x = init_learned_pe(3, 10, 6), rng.standard_normal((2, 4, 6))
    out = learned_positional_encoding(x, P)
    for b in range(2):
        for t in range(4):
            np.testing.assert_array_equal(out[b, t], x[b, t] + P[t])
    np.testing.assert_array_equal(learned_positional_encoding(x, P, offset=6), x + P[6:10])


def test_past_the_table_raises_naming_the_lengths():
    P = init_learned_pe(0, 8, 4)
    with pytest.raises(ValueError, match=r"max_len=8 .* n=9 \(offset 0\)"):
        learned_positional_encoding(np.zeros((9, 4)), P)
    with pytest.raises(ValueError, match=r"max_len=8 .* n=3 \(offset 6\)"):
        learned_positional_encoding(np.zeros((3, 4)), P, offset=6)
    with pytest.raises(ValueError, match=r"d_model=5 .* d_model=4"):
        learned_positional_encoding(np.zeros((3, 4)), np.zeros((8, 5)))
    with pytest.raises(ValueError, match="init"):
        init_learned_pe(0, 8, 4, init="xavier")


def test_record_is_a_component():
    record = registry.get("learned_pe")
    assert record.kind == "component" and record.apply is None
    assert record.function is learned_positional_encoding
