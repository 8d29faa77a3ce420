"""API parity of the linear family with the official code, against a NumPy transcription of it
(torch and JAX are never imported)."""
from __future__ import annotations

import numpy as np
import pytest

from refattn.linear import performer_attention

TIGHT = {"rtol": 1e-12, "atol": 1e-12}
STABILIZER = 1e-6          # numerical_stabilizer's default in make_fast_softmax_attention


def official_features(data, projection_matrix, eps=STABILIZER):
    """google-research performer/fast_attention/jax/fast_attention.py ``softmax_kernel_transformation``:
    ratio · (exp(data_dash − diag_data) + eps) with data_normalizer d^(-1/4) and ratio 1/√r; its
    max-subtraction is left out (refattn's ``stabilize=False``)."""
    data_normalizer = 1.0 / np.sqrt(np.sqrt(data.shape[-1]))
    ratio = 1.0 / np.sqrt(projection_matrix.shape[0])
    data_dash = np.einsum("...ld,md->...lm", data_normalizer * data, projection_matrix)
    diag_data = np.sum(data ** 2, axis=-1, keepdims=True) / 2.0 * data_normalizer ** 2
    return ratio * (np.exp(data_dash - diag_data) + eps)


def official_causal_attention(query_prime, key_prime, value, numerical_stabilizer=STABILIZER):
    """``FastAttentionviaLowRankDecomposition.dot_product_attention`` with ``unidirectional=True``,
    transcribed: W from the prefix sums of k'vᵀ (``_numerator``), R from those of k' (``_denominator``),
    then ``R = R + 2 * numerical_stabilizer * (abs(R) <= numerical_stabilizer)`` and ``W * (1/R)``."""
    W, R = [], []
    sums_kv = np.zeros(key_prime.shape[:-2] + (key_prime.shape[-1], value.shape[-1]))
    sums_k = np.zeros(key_prime.shape[:-2] + (key_prime.shape[-1],))
    for index in range(query_prime.shape[-2]):
        sums_kv = sums_kv + np.einsum("...m,...d->...md", key_prime[..., index, :], value[..., index, :])
        sums_k = sums_k + key_prime[..., index, :]
        W.append(np.einsum("...md,...m->...d", sums_kv, query_prime[..., index, :]))
        R.append(np.sum(query_prime[..., index, :] * sums_k, axis=-1))
    W, R = np.stack(W, axis=-2), np.stack(R, axis=-1)
    guarded = R + 2 * numerical_stabilizer * (np.abs(R) <= numerical_stabilizer)
    return W * np.reciprocal(guarded)[..., None], R


@pytest.mark.parametrize("method", ["equation", "scan", "auto"])
def test_performer_causal_denominator_eps_is_the_official_guard(rng, method):
    n, d, r = 10, 4, 8
    q, k, v = 3.0 * rng.standard_normal((2, n, d)), 3.0 * rng.standard_normal((2, n, d)), rng.standard_normal((2, n, 3))
    omega = rng.standard_normal((r, d))
    expected, R = official_causal_attention(official_features(q, omega), official_features(k, omega), v)
    assert (np.abs(R) <= STABILIZER).any() and (np.abs(R) > STABILIZER).any()   # the guard acts on some rows only
    out = performer_attention(q, k, v, omega=omega, causal=True, stabilize=False, eps=STABILIZER,
                              denominator_eps=STABILIZER, method=method)
    np.testing.assert_allclose(out, expected, **TIGHT)
    unguarded = performer_attention(q, k, v, omega=omega, causal=True, stabilize=False, eps=STABILIZER, method=method)
    assert np.abs(unguarded - expected).max() > 1e-3


def test_performer_denominator_eps_weights_reproduce_the_output_and_bad_values_are_refused(rng):
    q, k, v = 3.0 * rng.standard_normal((3, 6, 4))
    omega = rng.standard_normal((8, 4))
    out, A = performer_attention(q, k, v, omega=omega, causal=True, eps=STABILIZER, denominator_eps=STABILIZER,
                                 return_weights=True)
    np.testing.assert_allclose(A @ v, out, **TIGHT)
    with pytest.raises(ValueError, match="denominator_eps must be a finite non-negative real number, got -1"):
        performer_attention(q, k, v, omega=omega, denominator_eps=-1)
    with pytest.raises(ValueError, match="kind='trig' takes none"):
        performer_attention(q, k, v, omega=omega, kind="trig", denominator_eps=1e-6)
