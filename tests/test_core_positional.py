"""Sinusoidal positional encoding (Vaswani et al., 2017, §3.5) and its rotation identity."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refattn import sinusoidal_positional_encoding, sinusoidal_rotation

EPS = np.finfo(np.float64).eps


def paper_pe(num_positions, d_model, base=10000.0):
    """PE(pos, 2i) = sin(pos / base^{2i/d_model}), PE(pos, 2i+1) = cos(…), one scalar at a time."""
    pe = [[0.0] * d_model for _ in range(num_positions)]
    for pos in range(num_positions):
        for i in range(d_model // 2):
            angle = pos / base ** (2 * i / d_model)
            pe[pos][2 * i] = math.sin(angle)
            pe[pos][2 * i + 1] = math.cos(angle)
    return np.array(pe)


def paper_pe_at(pos, d_model, base=10000.0):
    """The same formula at a real-valued position (interleaved layout)."""
    row = []
    for i in range(d_model // 2):
        angle = pos / base ** (2 * i / d_model)
        row += [math.sin(angle), math.cos(angle)]
    return np.array(row)


def angle_atol(max_angle):
    # sin/cos of a computed angle θ: θ itself is rounded (pos·ω vs pos/base^{…}: a few units of
    # relative error, i.e. ≈ |θ|·eps absolute), and sin/cos then add ≈ 1 ulp. So the absolute error
    # of one entry is ≲ (|θ| + 1)·eps; a factor 4 covers both sides of a comparison plus the
    # multiply-add of a rotation.
    return 4 * (max_angle + 1) * EPS


@pytest.mark.parametrize(("num_positions", "d_model", "base"), [(50, 16, 10000.0), (7, 6, 10000.0),
                                                         (20, 10, 100.0), (9, 4, 2.5)])
def test_interleaved_matches_paper_formula(num_positions, d_model, base):
    pe = sinusoidal_positional_encoding(num_positions, d_model, base)
    assert pe.shape == (num_positions, d_model) and pe.dtype == np.float64
    # largest angle is pos·ω_0 = pos (ω_0 = base⁰ = 1)
    np.testing.assert_allclose(pe, paper_pe(num_positions, d_model, base),
                               rtol=0, atol=angle_atol(num_positions))


def test_base_is_honoured():
    # with base = 4 and d_model = 4, ω = (1, 4^{-1/2}) = (1, 1/2): exact small cases by hand
    pe = sinusoidal_positional_encoding(3, 4, base=4.0)
    expected = [[0.0, 1.0, 0.0, 1.0],
                [math.sin(1), math.cos(1), math.sin(0.5), math.cos(0.5)],
                [math.sin(2), math.cos(2), math.sin(1), math.cos(1)]]
    np.testing.assert_allclose(pe, expected, rtol=0, atol=4 * EPS)
    assert np.abs(pe - sinusoidal_positional_encoding(3, 4)).max() > 0.1   # default base differs


def test_position_zero_and_first_pair():
    pe = sinusoidal_positional_encoding(5, 8)
    np.testing.assert_array_equal(pe[0], np.tile([0.0, 1.0], 4))      # sin 0, cos 0
    np.testing.assert_array_equal(pe[:, 0], np.sin(np.arange(5.0)))   # ω_0 = 1


@pytest.mark.parametrize("d_model", [2, 6, 16])
def test_concatenated_is_a_column_permutation(d_model):
    inter = sinusoidal_positional_encoding(13, d_model, layout="interleaved")
    cat = sinusoidal_positional_encoding(13, d_model, layout="concatenated")
    half = d_model // 2
    perm = [half + c // 2 if c % 2 else c // 2 for c in range(d_model)]  # column of cat for inter's c
    np.testing.assert_array_equal(cat[:, perm], inter)
    np.testing.assert_array_equal(cat[:, :half], inter[:, 0::2])     # all sines first
    np.testing.assert_array_equal(cat[:, half:], inter[:, 1::2])     # then all cosines
    P = np.eye(d_model)[:, perm]                                       # inter = cat @ P
    for k in (3, -1.5):
        R_i = sinusoidal_rotation(k, d_model)
        R_c = sinusoidal_rotation(k, d_model, layout="concatenated")
        np.testing.assert_array_equal(P.T @ R_c @ P, R_i)


@pytest.mark.parametrize("layout", ["interleaved", "concatenated"])
@pytest.mark.parametrize("k", [1, 2, 7, 37, -1, -5, 0, 0.5, -2.25, 3.7])
def test_shift_is_a_rotation(layout, k):
    P, d_model = 100, 16
    pe = sinusoidal_positional_encoding(P, d_model, layout=layout)
    R = sinusoidal_rotation(k, d_model, layout=layout)
    if float(k).is_integer():
        k = int(k)
        lo, hi = max(0, -k), min(P, P - k)                             # pos and pos + k in range
        shifted = pe[lo:hi] @ R
        np.testing.assert_allclose(shifted, pe[lo + k:hi + k], rtol=0, atol=angle_atol(P + abs(k)))
    else:
        # non-integer offset: compare with the paper's formula evaluated at pos + k
        ref = np.array([paper_pe_at(pos + k, d_model) for pos in range(P)])
        if layout == "concatenated":
            ref = np.concatenate([ref[:, 0::2], ref[:, 1::2]], axis=1)
        np.testing.assert_allclose(pe @ R, ref, rtol=0, atol=angle_atol(P + abs(k)))


@settings(max_examples=40)
@given(k1=st.floats(-50, 50), k2=st.floats(-50, 50), half=st.integers(1, 8))
def test_rotations_compose_and_are_orthogonal(k1, k2, half):
    d_model = 2 * half
    R1, R2 = sinusoidal_rotation(k1, d_model), sinusoidal_rotation(k2, d_model)
    # cos²+sin² = 1 up to ≈ 2 ulp per entry
    np.testing.assert_allclose(R1 @ R1.T, np.eye(d_model), rtol=0, atol=4 * EPS)
    np.testing.assert_allclose(R1.T @ R1, np.eye(d_model), rtol=0, atol=4 * EPS)
    # R_{k1} R_{k2} = R_{k1+k2} (angle addition); angles up to |k1| + |k2| ≤ 100 rad
    np.testing.assert_allclose(R1 @ R2, sinusoidal_rotation(k1 + k2, d_model),
                               rtol=0, atol=angle_atol(abs(k1) + abs(k2)))
    np.testing.assert_allclose(sinusoidal_rotation(-k1, d_model), R1.T, rtol=0, atol=2 * EPS)


def test_rotation_zero_is_identity_and_structure():
    np.testing.assert_array_equal(sinusoidal_rotation(0, 8), np.eye(8))
    R = sinusoidal_rotation(2.0, 4, base=4.0)                         # ω = (1, 1/2) → φ = (2, 1)
    c0, s0, c1, s1 = math.cos(2), math.sin(2), math.cos(1), math.sin(1)
    expected = [[c0, -s0, 0, 0], [s0, c0, 0, 0], [0, 0, c1, -s1], [0, 0, s1, c1]]
    np.testing.assert_allclose(R, expected, rtol=0, atol=2 * EPS)


@pytest.mark.parametrize("k", [0, 1, 4, 11])
def test_inner_product_depends_only_on_offset(k):
    # PE(p)·PE(p+k) = Σ_i sin(pω)sin((p+k)ω) + cos(pω)cos((p+k)ω) = Σ_i cos(k ω_i)
    P, d_model = 60, 12
    pe = sinusoidal_positional_encoding(P, d_model)
    dots = np.einsum("pd,pd->p", pe[:P - k], pe[k:])
    closed = sum(math.cos(k / 10000.0 ** (2 * i / d_model)) for i in range(d_model // 2))
    # d_model/2 terms, each with error ≲ angle_atol(P)
    np.testing.assert_allclose(dots, np.full(P - k, closed), rtol=0, atol=d_model * angle_atol(P))


@pytest.mark.parametrize("d_model", [1, 3, 17])
def test_odd_d_model_raises(d_model):
    with pytest.raises(ValueError, match=rf"d_model must be even.*got {d_model}"):
        sinusoidal_positional_encoding(4, d_model)
    with pytest.raises(ValueError, match=rf"d_model must be even.*got {d_model}"):
        sinusoidal_rotation(1, d_model)


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"layout must be one of.*'diagonal'"):
        sinusoidal_positional_encoding(4, 8, layout="diagonal")
    with pytest.raises(ValueError, match=r"layout must be one of"):
        sinusoidal_rotation(1, 8, layout="Interleaved")
    with pytest.raises(ValueError, match=r"base must be a positive real number"):
        sinusoidal_positional_encoding(4, 8, base=0.0)
    with pytest.raises(ValueError, match=r"base must be a positive real number"):
        sinusoidal_positional_encoding(4, 8, base=-10.0)
    with pytest.raises(ValueError, match=r"num_positions must be a positive int"):
        sinusoidal_positional_encoding(0, 8)
    with pytest.raises(ValueError, match=r"d_model must be a positive int"):
        sinusoidal_positional_encoding(4, 0)
    with pytest.raises(TypeError, match=r"offset must be a real number"):
        sinusoidal_rotation("1", 8)
    with pytest.raises(TypeError, match=r"offset must be a real number"):
        sinusoidal_rotation(True, 8)
