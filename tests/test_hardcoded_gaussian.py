"""Hard-coded Gaussian attention: σ → ∞ is uniform attention, σ → 0 copies the value at i + offset, the official
code's density form, the paper's heads, causality, and the blocked rows against one block."""
from __future__ import annotations

import math

import numpy as np
import pytest

from refattn import registry, scaled_dot_product_attention
from refattn.prior import (
    HARDCODED_OFFSETS,
    hardcoded_gaussian_attention,
    hardcoded_gaussian_weights,
    hardcoded_offsets,
)
from refattn.prior import hardcoded_gaussian as module

TIGHT = {"rtol": 1e-12, "atol": 1e-12}
APPLY = registry.get("hardcoded_gaussian").apply


@pytest.mark.parametrize("causal", [False, True, "bottom-right"])
@pytest.mark.parametrize(("n", "m"), [(4, 7), (7, 4)])
def test_infinite_sigma_is_uniform_attention(rng, causal, n, m):
    """σ = ∞: every −(j − c)²/(2σ²) is 0, so the weights are softmax's with q = 0 (uniform over the keys seen),
    whatever the offset."""
    q, k, v = np.zeros((2, n, 3)), rng.standard_normal((2, m, 3)), rng.standard_normal((2, m, 2))
    expected, A = scaled_dot_product_attention(q, k, v, causal=causal, return_weights=True)
    for offset in (0, -1, 3):
        got = APPLY(q, k, v, causal=causal, sigma=np.inf, offsets=offset, return_weights=True)
        np.testing.assert_allclose(got.output, expected, **TIGHT)
        np.testing.assert_allclose(got.weights, A, **TIGHT)


def test_queries_and_keys_do_not_enter(rng):
    v = rng.standard_normal((6, 2))
    out = APPLY(rng.standard_normal((6, 3)), rng.standard_normal((6, 3)), v, offsets=1).output
    np.testing.assert_array_equal(APPLY(np.zeros((6, 3)), np.ones((6, 3)), v, offsets=1).output, out)


def test_tiny_sigma_copies_the_value_at_the_offset(rng):
    """σ = 1e-3: the neighbours' weights e^{−1/(2·10⁻⁶)} underflow to exactly 0, so query i reads v[i + o] where that
    key exists; at the ends the nearest key takes all the weight."""
    v = rng.standard_normal((8, 3))
    for offset in (-1, 0, 2):
        out = APPLY(v, v, v, offsets=offset, sigma=1e-3).output
        np.testing.assert_array_equal(out, v[np.clip(np.arange(8) + offset, 0, 7)])


def test_density_is_the_official_codes_unnormalised_normal_density():
    """normalize='density': N(j; i + o, σ²) = e^{−(j − i − o)²/(2σ²)}/(σ√(2π)), causal entries zeroed, no
    renormalisation; 'keys' is the same row divided by its sum."""
    sigma, offset = 1.3, -1
    A, allowed = hardcoded_gaussian_weights(9, offsets=(offset,), sigma=sigma, causal=True, normalize="density")
    B, _ = hardcoded_gaussian_weights(9, offsets=(offset,), sigma=sigma, causal=True)
    for i in range(9):
        for j in range(9):
            expected = math.exp(-((j - i - offset) ** 2) / (2 * sigma**2)) / (sigma * math.sqrt(2 * math.pi))
            np.testing.assert_allclose(A[0, i, j], expected if j <= i else 0.0, rtol=1e-14, atol=0)
    np.testing.assert_allclose(B[0], A[0] / A[0].sum(axis=-1, keepdims=True), **TIGHT)
    np.testing.assert_array_equal(allowed, np.tril(np.ones((9, 9), dtype=bool)))


def test_density_rows_sum_to_one_away_from_the_ends():
    """Σ_{j∈ℤ} N(j; c, 1) = 1 + 2Σ_k e^{−2π²k²} cos(2πkc) (Poisson summation), within 2e^{−2π²} ≈ 5.4e-9 of 1; rows
    whose centre is 12σ inside both ends lose less than 1e-30 more."""
    A, _ = hardcoded_gaussian_weights(40, offsets=(-1, 1), normalize="density")
    sums = A[:, 12:28].sum(axis=-1)
    np.testing.assert_allclose(sums, 1.0, rtol=0, atol=2 * math.exp(-2 * math.pi**2) * 1.01)
    assert np.all(A[:, 0].sum(axis=-1) < 0.95)                     # the first row loses the half-line j < 0


def test_heads_with_the_papers_offsets_are_single_head_calls(rng):
    h, m, d_v = 4, 9, 3
    v = rng.standard_normal((2, h, m, d_v))
    offsets = hardcoded_offsets("decoder", h)
    assert offsets == (-1, 0, -1, 0)
    out, A = hardcoded_gaussian_attention(v, offsets=offsets, causal=True, return_weights=True)
    assert out.shape == (2, h, m, d_v) and A.shape == (h, m, m)
    for head, offset in enumerate(offsets):
        q = np.zeros((2, m, 1))
        np.testing.assert_allclose(out[:, head], APPLY(q, q, v[:, head], causal=True, offsets=offset).output, **TIGHT)


def test_paper_offsets():
    assert HARDCODED_OFFSETS == {"encoder": (-1, 1), "decoder": (-1, 0), "cross": (-1, 1)}
    assert hardcoded_offsets("encoder", 8) == (-1, 1) * 4
    with pytest.raises(ValueError, match="num_heads must be a multiple of 2"):
        hardcoded_offsets("encoder", 3)
    with pytest.raises(ValueError, match="role"):
        hardcoded_offsets("self", 2)


def test_cross_attention_centres_at_ratio_times_i():
    A, _ = hardcoded_gaussian_weights(4, 12, offsets=(1,), ratio=2.5, sigma=1e-3)
    np.testing.assert_array_equal(A[0, :3].argmax(axis=-1), [1, 3, 6])  # 2.5·i + 1 = 1, 3.5, 6 (3.5: 3 and 4 tie)
    np.testing.assert_allclose(A[0, 1, 3:5], [0.5, 0.5], **TIGHT)
    np.testing.assert_allclose(A[0, 3, 8:10], [0.5, 0.5], **TIGHT)  # c = 8.5: keys 8 and 9 share the weight


def test_causal_rows_ignore_later_keys_and_renormalise_over_the_past(rng):
    v = rng.standard_normal((10, 2))
    q = np.zeros((10, 1))
    out = APPLY(q, q, v, causal=True, offsets=0, sigma=2.0, return_weights=True)
    free = APPLY(q, q, v, offsets=0, sigma=2.0, return_weights=True).weights
    expected = np.tril(free) / np.tril(free).sum(axis=-1, keepdims=True)
    np.testing.assert_allclose(out.weights, expected, **TIGHT)
    v[6:] = np.nan
    np.testing.assert_array_equal(APPLY(q, q, v, causal=True, offsets=0, sigma=2.0).output[:6], out.output[:6])


def test_blocks_of_rows_equal_one_block(rng, monkeypatch):
    v = rng.standard_normal((3, 2, 13, 4))
    whole = hardcoded_gaussian_attention(v, n=11, offsets=(-1, 1), causal="bottom-right", sigma=1.7)
    monkeypatch.setattr(module, "BLOCK_ENTRIES", 2 * 13 * 3)       # blocks of 3 query rows
    np.testing.assert_allclose(
        hardcoded_gaussian_attention(v, n=11, offsets=(-1, 1), causal="bottom-right", sigma=1.7), whole, **TIGHT)


@pytest.mark.parametrize(("causal", "n", "sigma", "ratio"), [
    (False, 300, 1.0, 1.0), (True, 300, 0.3, 1.0), ("bottom-right", 200, 2.0, 1.0), (False, 100, 1.5, 2.7),
    (True, 300, 1e-3, 1.0)])
@pytest.mark.parametrize("normalize", ["keys", "density"])
def test_keys_read_are_those_of_nonzero_weight(rng, monkeypatch, causal, n, sigma, ratio, normalize):
    """The output reads only the keys within √(d² + 2σ²·746) of each centre; it equals the full weights (every
    key) times V, and the weights it returns are those full weights, exact zeros included."""
    monkeypatch.setattr(module, "BLOCK_ENTRIES", 2 * 300 * 16)     # blocks of 16 rows: windows well inside m
    m, offsets = 300, (-1, 4)
    v = rng.standard_normal((2, m, 3))
    options = {"offsets": offsets, "sigma": sigma, "causal": causal, "normalize": normalize, "ratio": ratio}
    full, _ = hardcoded_gaussian_weights(n, m, **options)
    out, A = hardcoded_gaussian_attention(v, n=n, return_weights=True, **options)
    np.testing.assert_allclose(out, full @ v, **TIGHT)
    np.testing.assert_allclose(A, full, **TIGHT)
    np.testing.assert_array_equal(A == 0, full == 0)
    far = n - 1                                                    # centred ≥ 198 keys from key 0: weight 0
    assert np.all(full[:, far, 0] == 0)
    v[:, 0] = np.nan
    np.testing.assert_array_equal(hardcoded_gaussian_attention(v, n=n, **options)[:, far], out[:, far])


@pytest.mark.parametrize(("options", "error", "match"), [
    ({"sigma": 0.0}, ValueError, "sigma must be > 0"),
    ({"sigma": -1.0}, ValueError, "sigma must be > 0"),
    ({"sigma": np.nan}, ValueError, "sigma must be"),
    ({"sigma": "1"}, TypeError, "sigma must be a real number"),
    ({"normalize": "softmax"}, ValueError, "normalize"),
    ({"offsets": ()}, ValueError, "offsets must be a non-empty"),
    ({"offsets": (1, 2, 3)}, ValueError, "v has 2 heads"),
    ({"ratio": np.inf}, ValueError, "ratio must be finite"),
])
def test_bad_options_are_named(options, error, match):
    with pytest.raises(error, match=match):
        hardcoded_gaussian_attention(np.ones((2, 5, 3)), **options)


def test_bad_offset_of_the_registry_entry_is_named():
    x = np.ones((3, 2))
    with pytest.raises(TypeError, match="offsets must be a real number"):
        APPLY(x, x, x, offsets=True)
    with pytest.raises(ValueError, match="offsets must be finite"):
        APPLY(x, x, x, offsets=np.inf)


def test_the_registry_option_offset_is_the_deprecated_name_of_offsets(rng):
    """The registry called the one head's offset ``offset``, the function ``offsets``: the old name warns and gives the
    same result."""
    q, v = rng.standard_normal((2, 6, 3))
    with pytest.warns(DeprecationWarning, match="offset= is renamed offsets="):
        old = APPLY(q, q, v, offset=2, sigma=0.8, return_weights=True)
    new = APPLY(q, q, v, offsets=2, sigma=0.8, return_weights=True)
    np.testing.assert_array_equal(old.output, new.output)
    np.testing.assert_array_equal(old.weights, new.weights)
    assert not np.array_equal(new.output, APPLY(q, q, v, sigma=0.8).output)       # the offset took effect


def test_a_scalar_offset_is_one_head_without_a_head_axis(rng):
    """offsets=o (a number) is offsets=(o,) on v with a head axis of one, without the axis; q and k give n and the
    batch (the registry's call), their values unread."""
    v = rng.standard_normal((2, 7, 3))                             # (B, m, d_v)
    out, A = hardcoded_gaussian_attention(v, offsets=1.5, sigma=1.2, causal=True, return_weights=True)
    heads, A_heads = hardcoded_gaussian_attention(v[:, None], offsets=(1.5,), sigma=1.2, causal=True,
                                                  return_weights=True)
    np.testing.assert_array_equal(out, heads[:, 0])
    assert A.shape == (2, 7, 7)
    np.testing.assert_array_equal(A, np.broadcast_to(A_heads[0], A.shape))
    q, k = rng.standard_normal((4, 1, 5, 2)), rng.standard_normal((1, 7, 2))    # batch (4, 2), n = 5
    got = hardcoded_gaussian_attention(v, q=q, k=k, offsets=1.5, sigma=1.2, causal="bottom-right")
    shorter = hardcoded_gaussian_attention(v, n=5, offsets=1.5, sigma=1.2, causal="bottom-right")
    assert got.shape == (4, 2, 5, 3)
    np.testing.assert_array_equal(got, np.broadcast_to(shorter, got.shape))
    with pytest.raises(ValueError, match="n=4 but q has 5 queries"):
        hardcoded_gaussian_attention(v, n=4, q=q, k=k, offsets=1.5)
    with pytest.raises(TypeError, match="q and k together"):
        hardcoded_gaussian_attention(v, q=q, offsets=1.5)


@pytest.mark.parametrize("causal", [False, True])
def test_a_sigma_whose_square_underflows_gives_the_limit_of_sigma_to_zero(causal):
    """σ = 1e-300: σ² is 0, and −(j − c)²/2σ² was 0/0 = NaN at the key on the centre (3 of 4 rows). The limit σ → 0
    puts the whole row on the nearest key it sees (row 0's centre −1 is nearest key 0), shared on a tie."""
    v = np.eye(4)[None]                                            # one head, values = one-hot positions
    nearest = [[1, 0, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0]]
    np.testing.assert_array_equal(hardcoded_gaussian_attention(v, sigma=1e-300, offsets=(-1,), causal=causal),
                                  [nearest])
    halves = [[1, 0, 0, 0], [0.5, 0.5, 0, 0], [0, 0.5, 0.5, 0], [0, 0, 0.5, 0.5]]   # centres i − 1/2: two nearest
    np.testing.assert_array_equal(hardcoded_gaussian_attention(v, sigma=1e-300, offsets=(-0.5,), causal=causal),
                                  [halves])
    density = hardcoded_gaussian_attention(v, sigma=1e-300, offsets=(-1,), causal=causal, normalize="density")
    np.testing.assert_allclose(density, [np.array(nearest) * np.where(np.arange(4) > 0, 1.0, 0.0)[:, None]
                                         / (1e-300 * np.sqrt(2 * np.pi))], rtol=1e-15)   # N(0; 0, σ²) on a hit


def test_a_sigma_or_ratio_beyond_the_key_window_reads_every_key():
    """σ = 1e300 (σ² overflows) and ratio = 1e300 (centres far past the last key) raised OverflowError while
    sizing the key window. σ → ∞ is uniform; centres past the end put each row on the last key, which is nearest
    ((j − c)² − (j* − c)² is formed as (j − j*)(j + j* − 2c), so no square rounds the 1e300 away)."""
    v = np.eye(4)[None]
    np.testing.assert_allclose(hardcoded_gaussian_attention(v, sigma=1e300, offsets=(-1,)), np.full((1, 4, 4), 0.25),
                               rtol=1e-15)
    out = hardcoded_gaussian_attention(v, ratio=1e300, offsets=(-1,))
    np.testing.assert_array_equal(out[0, 1:], np.tile([0.0, 0.0, 0.0, 1.0], (3, 1)))   # centres 1e300·i − 1
    E = np.exp(-0.5 * np.arange(1.0, 5.0) ** 2)                    # row 0: centre −1, an ordinary Gaussian
    np.testing.assert_allclose(out[0, 0], E / E.sum(), rtol=1e-15)
