"""Scatterbrain (Chen, Dao et al. 2021): exact on the LSH support and low-rank elsewhere, softmax attention with a
full support, the two methods agreeing, the unbiased estimate, and the refusals."""
from __future__ import annotations

import numpy as np
import pytest

from refattn import registry, scaled_dot_product_attention
from refattn.beyond import lsh_support, scatterbrain_attention, scatterbrain_parts
from refattn.linear import draw_omega
from refattn.sparse import draw_lsh_rotations

TIGHT = {"rtol": 1e-12, "atol": 1e-12}


def _qkv(seed, n=6, m=9, d=4, batch=()):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((*batch, n, d)), rng.standard_normal((*batch, m, d)),
            rng.standard_normal((*batch, m, 3)))


@pytest.mark.parametrize("causal", [False, True, "bottom-right"])
@pytest.mark.parametrize("kind", ["hyperbolic", "positive"])
def test_a_support_covering_every_pair_is_softmax_attention(causal, kind):
    q, k, v = _qkv(0, n=5 if causal is not True else 9, batch=(2,))
    for method in ("equation", "pairs"):
        out, W = scatterbrain_attention(q, k, v, rng=1, num_buckets=1, kind=kind, causal=causal, method=method,
                                        return_weights=True)
        expected, A = scaled_dot_product_attention(q, k, v, causal=causal, return_weights=True)
        np.testing.assert_allclose(out, expected, **TIGHT)
        np.testing.assert_allclose(W, A, **TIGHT)


def test_exact_on_the_support_and_performer_elsewhere():
    """Â = L + S equals exp(q̃·k̃) on the support and φ(q̃)·φ(k̃) off it, φ written out here (hyperbolic)."""
    q, k, _ = _qkv(1)
    rotations, omega = draw_lsh_rotations(2, 4, 4, 2), draw_omega(3, 5, 4)
    parts = scatterbrain_parts(q, k, rotations, omega)
    q_t, k_t = q / 2 ** 0.5, k / 2 ** 0.5                          # d = 4: q/d^{1/4}

    def phi(x):
        u = x @ omega.T
        return np.exp(np.concatenate([u, -u], axis=-1) - np.sum(x * x, axis=-1, keepdims=True) / 2) / np.sqrt(10)

    L = phi(q_t) @ phi(k_t).T
    E = np.exp(q_t @ k_t.T)
    A_hat = parts.low_rank + parts.sparse
    assert 0 < parts.support.sum() < parts.support.size
    np.testing.assert_allclose(A_hat, np.where(parts.support, E, L), **TIGHT)
    np.testing.assert_allclose(parts.weights, A_hat / A_hat.sum(axis=-1, keepdims=True), **TIGHT)


def test_support_is_a_collision_in_some_round():
    q, k, _ = _qkv(2)
    rotations = draw_lsh_rotations(4, 4, 6, 3)
    support = lsh_support(q, k, rotations)

    def buckets(x, R):                                             # argmax [xR; −xR], written out
        u = x @ R
        return np.argmax(np.concatenate([u, -u], axis=-1), axis=-1)

    expected = np.zeros((6, 9), dtype=bool)
    for R in rotations:
        expected |= buckets(q, R)[:, None] == buckets(k, R)[None, :]
    np.testing.assert_array_equal(support, expected)


@pytest.mark.parametrize("causal", [False, True, "bottom-right"])
def test_the_pair_list_equals_the_dense_equation(causal):
    q, k, v = _qkv(3, n=11 if causal == "bottom-right" else 9, batch=(2, 1))
    options = {"rng": 4, "num_buckets": 4, "num_rounds": 2, "num_features": 3, "causal": causal, "return_weights": True}
    dense = scatterbrain_attention(q, k, v, method="equation", **options)
    pairs = scatterbrain_attention(q, k, v, method="pairs", **options)
    np.testing.assert_allclose(pairs[0], dense[0], **TIGHT)
    np.testing.assert_allclose(pairs[1], dense[1], **TIGHT)
    np.testing.assert_allclose(dense[0], dense[1] @ v, **TIGHT)


def test_the_estimate_is_unbiased():
    """E[Â] = exp(q̃·k̃) over ω (Theorem 1): the mean of 4000 draws within 5 standard errors, entry by entry."""
    q, k, _ = _qkv(5, n=4, m=5)
    rotations = draw_lsh_rotations(6, 4, 4, 1)
    rng = np.random.default_rng(7)
    omega = np.stack([draw_omega(rng, 4, 4) for _ in range(4000)])  # (4000, r, d)
    parts = scatterbrain_parts(q, k, rotations, omega)
    A_hat = parts.low_rank + parts.sparse                          # (4000, n, m)
    support = parts.support                                       # (n, m): the hash does not depend on ω
    off = ~support                                                 # the random part: off the support
    mean, se = A_hat[:, off].mean(axis=0), A_hat[:, off].std(axis=0, ddof=1) / np.sqrt(len(A_hat))
    E = np.exp(q @ k.T / 2)
    # False-alarm rate: by the CLT at 4000 draws the mean is normal to a good approximation, so a correct
    # estimator leaves 5 standard errors with probability 5.7e-7 per entry, below 1.2e-5 over the n·m = 20
    # entries (union bound). The seed is fixed, so the test is deterministic; the rate says what a failure means.
    assert off.sum() >= 5 and np.all(np.abs(mean - E[off]) <= 5 * se)
    np.testing.assert_allclose(A_hat[:, support], np.broadcast_to(E[support], A_hat[:, support].shape), **TIGHT)


def test_rows_are_decided_by_their_own_pairs():
    """The support of (i, j) depends on q_i and k_j alone: permuting the keys permutes the columns."""
    q, k, v = _qkv(8)
    perm = np.random.default_rng(0).permutation(9)
    _, W = scatterbrain_attention(q, k, v, rng=2, num_buckets=4, return_weights=True)
    _, W_perm = scatterbrain_attention(q, k[perm], v[perm], rng=2, num_buckets=4, return_weights=True)
    np.testing.assert_allclose(W_perm, W[:, perm], **TIGHT)


def test_refusals_name_the_argument():
    q, k, v = _qkv(9)
    rotations, omega = draw_lsh_rotations(0, 4, 4, 2), draw_omega(0, 3, 4)
    with pytest.raises(ValueError, match=r"scatterbrain draws its LSH rotations from rng: pass rng= \(or rotations=\)"):
        scatterbrain_attention(q, k, v)
    with pytest.raises(ValueError, match=r"scatterbrain draws Performer's projections ω from rng: pass rng= "
                                         r"\(or omega=\)"):
        scatterbrain_attention(q, k, v, rotations=rotations)
    with pytest.raises(ValueError, match="num_buckets=8 needs rotations with 4 columns"):   # lsh_buckets' message
        scatterbrain_attention(q, k, v, rotations=rotations, omega=omega, num_buckets=8)
    with pytest.raises(ValueError, match="omega"):
        scatterbrain_attention(q, k, v, rotations=rotations, omega=draw_omega(0, 3, 5))
    with pytest.raises(ValueError, match="kind"):
        scatterbrain_attention(q, k, v, rng=0, kind="trig")
    with pytest.raises(ValueError, match="method"):
        scatterbrain_attention(q, k, v, rng=0, method="scan")


@pytest.mark.parametrize("causal", [False, True, "bottom-right"])
def test_the_pairs_path_in_blocks_of_pairs_equals_one_block(monkeypatch, causal):
    """The pairs path gathers the rows of PAIR_BLOCK pairs at a time; blocks of 7 pairs give the same numbers bit
    for bit as one block."""
    import refattn.beyond.scatterbrain as scatterbrain_module

    q, k, v = _qkv(21, n=12, m=15, batch=(2,))
    options = {"rng": 3, "num_buckets": 2, "method": "pairs", "causal": causal}
    whole = scatterbrain_attention(q, k, v, **options)
    monkeypatch.setattr(scatterbrain_module, "PAIR_BLOCK", 7)
    np.testing.assert_array_equal(scatterbrain_attention(q, k, v, **options), whole)


@pytest.mark.parametrize("method", ["equation", "pairs"])
@pytest.mark.parametrize("causal", [False, True])
def test_scores_beyond_the_exponent_range_are_shifted_by_the_row_maximum(method, causal):
    """exp(27²) overflows float64: each row is computed as Â·e^{−c_i}, a factor that cancels in its normalisation,
    so one key gives weight 1 and a full support is softmax attention at any magnitude."""
    out = scatterbrain_attention([[27.0]], [[27.0]], [[1.0]], rng=0, num_buckets=1, scale=1.0, method=method,
                                 causal=causal)
    np.testing.assert_array_equal(out, [[1.0]])
    q, k, v = _qkv(30, batch=(2,))
    for magnitude in (30.0, -1e3):                                 # scores ±1e3 and ±1e6: exp over- and underflows
        out, W = scatterbrain_attention(magnitude * q, magnitude * k, v, rng=1, num_buckets=1, method=method,
                                        causal=causal, return_weights=True)
        expected, A = scaled_dot_product_attention(magnitude * q, magnitude * k, v, causal=causal, return_weights=True)
        np.testing.assert_allclose(out, expected, **TIGHT)
        np.testing.assert_allclose(W, A, **TIGHT)


@pytest.mark.parametrize("causal", [False, True, "bottom-right"])
@pytest.mark.parametrize("where", ["q", "k", "v"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_the_two_methods_agree_on_non_finite_inputs(causal, where, bad):
    """A NaN or inf reaches the same entries by either method, and with a full support the rows softmax attention
    makes NaN (an inf value: ±inf where its weight is positive, as A V gives)."""
    q, k, v = _qkv(31, batch=(2,))
    {"q": q, "k": k, "v": v}[where][0, 3, 1] = bad
    for num_buckets in (1, 2):
        options = {"rng": 1, "num_buckets": num_buckets, "causal": causal, "return_weights": True}
        out, W = scatterbrain_attention(q, k, v, method="equation", **options)
        out_pairs, W_pairs = scatterbrain_attention(q, k, v, method="pairs", **options)
        np.testing.assert_allclose(out_pairs, out, **TIGHT)        # NaN where the other has NaN
        np.testing.assert_allclose(W_pairs, W, **TIGHT)
        assert np.isfinite(out[1]).all()                           # the other batch row is untouched
        if num_buckets == 1:
            expected = scaled_dot_product_attention(q, k, v, causal=causal)
            np.testing.assert_array_equal(np.isnan(out), np.isnan(expected))
            np.testing.assert_allclose(out, expected, **TIGHT)


def test_n_buckets_and_n_rounds_are_the_deprecated_names_of_num_buckets_and_num_rounds():
    q, k, v = _qkv(6)
    new = scatterbrain_attention(q, k, v, rng=2, num_buckets=4, num_rounds=3, num_features=3, return_weights=True)
    with pytest.warns(DeprecationWarning, match="n_buckets= is renamed num_buckets="):
        old = scatterbrain_attention(q, k, v, rng=2, n_buckets=4, num_rounds=3, num_features=3, return_weights=True)
    np.testing.assert_array_equal(old[1], new[1])
    with pytest.warns(DeprecationWarning, match="n_rounds= is renamed num_rounds="):
        old = scatterbrain_attention(q, k, v, rng=2, num_buckets=4, n_rounds=3, num_features=3, return_weights=True)
    np.testing.assert_array_equal(old[1], new[1])
    with pytest.warns(DeprecationWarning, match="n_buckets= is renamed num_buckets="):
        result = registry.get("scatterbrain").apply(q, k, v, rng=2, n_buckets=4, num_rounds=3, num_features=3,
                                                    return_weights=True)
    np.testing.assert_array_equal(result.weights, new[1])
    rotations = draw_lsh_rotations(0, 4, 4, 2)
    with pytest.warns(DeprecationWarning, match="n_buckets= is renamed num_buckets="):
        support = lsh_support(q, k, rotations, n_buckets=4)
    np.testing.assert_array_equal(support, lsh_support(q, k, rotations, num_buckets=4))
    with pytest.raises(TypeError, match="both n_buckets="):
        scatterbrain_attention(q, k, v, rng=2, n_buckets=4, num_buckets=4)
