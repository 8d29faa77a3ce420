"""FNet (Lee-Thorp et al. 2022): the 2-D DFT's real part, its explicit DFT-matrix form, its weights, its edges."""
from __future__ import annotations

import numpy as np
import pytest

from refattn import registry
from refattn.beyond import dft_matrix, fnet_mixing

TIGHT = {"rtol": 1e-12, "atol": 1e-12}
FNET = registry.get("fnet")


def _dft(n):
    """F_jk = e^{−2πi jk/n} by a double loop of cos and sin (no refattn code)."""
    F = np.empty((n, n), dtype=complex)
    for j in range(n):
        for k in range(n):
            angle = 2 * np.pi * ((j * k) % n) / n
            F[j, k] = complex(np.cos(angle), -np.sin(angle))
    return F


@pytest.mark.parametrize("shape", [(6, 4), (2, 7, 5), (3, 1, 16, 8)])
@pytest.mark.parametrize("method", ["fft", "matrix"])
def test_output_equals_the_explicit_dft_matrix_form(shape, method):
    """y = Re(F_n X F_d), F built entry by entry, to 1e-12."""
    x = np.random.default_rng(0).standard_normal(shape)
    n, d = shape[-2:]
    expected = (_dft(n) @ x @ _dft(d)).real
    np.testing.assert_allclose(fnet_mixing(x, method=method), expected, **TIGHT)


def test_dft_matrix_is_the_loop_matrix_and_symmetric():
    for n in (0, 1, 2, 5, 12):
        F = dft_matrix(n)
        np.testing.assert_allclose(F, _dft(n), **TIGHT)
        np.testing.assert_array_equal(F, F.T)


def test_a_constant_lands_entirely_on_frequency_zero():
    out = fnet_mixing(np.full((5, 3), 2.0))
    expected = np.zeros((5, 3))
    expected[0, 0] = 2.0 * 5 * 3                                   # Σ_j Σ_c 2
    np.testing.assert_allclose(out, expected, **TIGHT)


def test_mixing_is_linear_and_reads_neither_q_nor_k():
    rng = np.random.default_rng(1)
    v1, v2, q, k = rng.standard_normal((4, 6, 4))
    np.testing.assert_allclose(fnet_mixing(2.0 * v1 - 3.0 * v2), 2.0 * fnet_mixing(v1) - 3.0 * fnet_mixing(v2), **TIGHT)
    out = FNET.apply(q, k, v1).output
    np.testing.assert_array_equal(FNET.apply(-q, 5.0 * k, v1).output, out)
    np.testing.assert_array_equal(out, fnet_mixing(v1))


def test_weights_are_the_real_and_imaginary_planes_of_f_n_and_reproduce_the_output():
    """out = W₀ V Re(F_d) − W₁ V Im(F_d), with (W₀, W₁) = (Re F_n, Im F_n)."""
    rng = np.random.default_rng(2)
    q, v = rng.standard_normal((2, 3, 7, 5))
    result = FNET.apply(q, q, v, return_weights=True)
    assert result.weights.shape == (3, 2, 7, 7) and result.allowed is None
    F_n, F_d = _dft(7), _dft(5)
    np.testing.assert_allclose(result.weights[:, 0], np.broadcast_to(F_n.real, (3, 7, 7)), **TIGHT)
    np.testing.assert_allclose(result.weights[:, 1], np.broadcast_to(F_n.imag, (3, 7, 7)), **TIGHT)
    W = result.weights
    np.testing.assert_allclose(W[:, 0] @ v @ F_d.real - W[:, 1] @ v @ F_d.imag, result.output, **TIGHT)


def test_methods_agree():
    x = np.random.default_rng(3).standard_normal((4, 9, 6))
    np.testing.assert_allclose(fnet_mixing(x, method="matrix"), fnet_mixing(x), **TIGHT)


@pytest.mark.parametrize("method", ["fft", "matrix"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_non_finite_value_makes_its_whole_sequence_nan_and_no_other(method, bad):
    x = np.random.default_rng(4).standard_normal((3, 5, 4))
    clean = fnet_mixing(x, method=method)
    x[1, 2, 3] = bad
    out = fnet_mixing(x, method=method)
    assert np.isnan(out[1]).all()
    np.testing.assert_array_equal(out[[0, 2]], clean[[0, 2]])


@pytest.mark.parametrize(("shape", "expected"), [((0, 4), (0, 4)), ((5, 0), (5, 0)), ((0, 6, 4), (0, 6, 4))])
def test_empty_inputs_give_empty_outputs(shape, expected):
    for method in ("fft", "matrix"):
        assert fnet_mixing(np.zeros(shape), method=method).shape == expected
    q = np.zeros((*shape[:-1], 3))
    assert FNET.apply(q, q, np.zeros(shape), return_weights=True).output.shape == expected


def test_bad_input_is_refused_with_the_argument_named():
    rng = np.random.default_rng(5)
    q, v = rng.standard_normal((6, 4)), rng.standard_normal((6, 4))
    with pytest.raises(ValueError, match=r"q must have m rows \(n = m\); got q shape \(5, 4\), v shape \(6, 4\)"):
        FNET.apply(q[:5], q, v)
    with pytest.raises(ValueError, match="fnet takes causal in"):
        FNET.apply(q, q, v, causal=True)
    with pytest.raises(ValueError, match="method"):
        fnet_mixing(v, method="dft")
    with pytest.raises(ValueError, match="x"):
        fnet_mixing(np.ones(3))
    with pytest.raises(TypeError, match="x"):
        fnet_mixing(np.ones((3, 2), dtype=complex))
