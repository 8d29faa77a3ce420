"""AFT (Zhai et al., 2021): AFT-simple's closed form, the scan against the parallel form, the per-channel weights,
the limits between the variants, the paper's matrix-product form, stability and the errors."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.special import expit, softmax

from refattn.beyond import (
    AFTConvFilter,
    AFTPositionBias,
    aft_attention,
    aft_conv,
    aft_full,
    aft_local,
    aft_position_bias,
    aft_simple,
    init_aft_conv_filter,
    init_aft_position_bias,
)
from refattn.kernels.aft_scan import aft_scan

from .naive import naive_aft

TIGHT = {"rtol": 1e-12, "atol": 1e-12}
SETTINGS = [("full", {}), ("local", {"window": 3}), ("simple", {}), ("conv", {"kernel_size": 5, "num_heads": 2}),
            ("conv", {"kernel_size": 3, "num_heads": 4, "image_width": 4})]


def _qkv(seed, n=5, m=7, d=4, batch=(2,)):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((*batch, n, d)), rng.standard_normal((*batch, m, d)),
            rng.standard_normal((*batch, m, d)))


def _params(kind, seed, length=12, heads=2, s=3):
    """Parameters large enough to matter: u, u′ ~ N(0, 1), or filters with γ, β drawn."""
    rng = np.random.default_rng(seed)
    if kind == "conv":
        return AFTConvFilter(rng.standard_normal((heads, s)), rng.standard_normal(heads), rng.standard_normal(heads))
    return AFTPositionBias(rng.standard_normal((length, 3)), rng.standard_normal((length, 3)))


def test_simple_equals_its_closed_form():
    """AFT-simple (§3.2): σ(Q_t) ⊙ Σ_t′ softmax(K)_t′ ⊙ V_t′, the same for every query; n != m."""
    q, k, v = _qkv(0, n=5, m=7)
    closed = expit(q) * (softmax(k, axis=-2) * v).sum(axis=-2, keepdims=True)   # (2, 5, 4)
    np.testing.assert_allclose(aft_attention(q, k, v, kind="simple"), closed, **TIGHT)


def test_causal_simple_equals_its_cumulative_closed_form():
    """Causal AFT-simple: σ(Q_t) ⊙ Σ_{t′≤t} e^{K_t′} V_t′ / Σ_{t′≤t} e^{K_t′}, by cumulative sums (|K| small)."""
    q, k, v = _qkv(1, n=6, m=6)
    closed = expit(q) * np.cumsum(np.exp(k) * v, axis=-2) / np.cumsum(np.exp(k), axis=-2)
    for method in ("equation", "scan"):
        np.testing.assert_allclose(aft_attention(q, k, v, kind="simple", causal=True, method=method), closed,
                                   **TIGHT)


@pytest.mark.parametrize(("kind", "options"), SETTINGS, ids=lambda x: str(x))
@pytest.mark.parametrize(("causal", "n", "m"), [(True, 9, 9), (True, 5, 8), (True, 10, 8), ("bottom-right", 3, 9),
                                                ("bottom-right", 11, 9)])
def test_scan_equals_the_parallel_form(kind, options, causal, n, m):
    q, k, v = _qkv(2, n=n, m=m, d=4)
    parallel = aft_attention(q, k, v, kind=kind, rng=5, causal=causal, **options)
    scan = aft_attention(q, k, v, kind=kind, rng=5, causal=causal, method="scan", **options)
    np.testing.assert_allclose(scan, parallel, **TIGHT)


def test_scan_with_a_dominant_band_key_and_huge_logits_is_finite_and_equal():
    """Max-shifted on both sides: K ~ ±700 would overflow e^K; a band key far below the others adds nothing."""
    q, k, v = _qkv(3, n=8, m=8)
    k = 700.0 * np.sign(k)
    out = aft_attention(q, k, v, kind="local", window=2, rng=1, causal=True)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(aft_attention(q, k, v, kind="local", window=2, rng=1, causal=True, method="scan"),
                               out, **TIGHT)


@pytest.mark.parametrize("causal", [False, True])
def test_the_output_is_shift_invariant_in_the_keys_per_channel(causal):
    """e^{K + a_c} = e^{a_c} e^K cancels: adding 800 to a channel (e^800 overflows) changes nothing."""
    q, k, v = _qkv(4, n=6, m=6)
    shift = np.array([0.0, 800.0, -800.0, 3.0])
    for method in ("equation",) + (("scan",) if causal else ()):
        base = aft_attention(q, k, v, kind="full", rng=2, causal=causal, method=method)
        np.testing.assert_allclose(aft_attention(q, k + shift, v, kind="full", rng=2, causal=causal, method=method),
                                   base, rtol=1e-12, atol=1e-12)


def test_full_equals_the_papers_matrix_product_form():
    """§3.1's efficient form without the max-shift: σ(Q) ⊙ (e^w @ (e^K ⊙ V)) / (e^w @ e^K), w = u u′ᵀ; n != m."""
    q, k, v = _qkv(5, n=5, m=7, batch=())
    params = _params("full", 6, length=7)
    w = params.u[:5] @ params.u_prime[:7].T                         # (5, 7)
    expected = expit(q) * (np.exp(w) @ (np.exp(k) * v)) / (np.exp(w) @ np.exp(k))
    np.testing.assert_allclose(aft_attention(q, k, v, params=params), expected, **TIGHT)


@pytest.mark.parametrize(("kind", "options"), SETTINGS, ids=lambda x: str(x))
@pytest.mark.parametrize("causal", [False, True])
def test_weights_are_per_channel_reproduce_the_output_and_rows_sum_to_the_gate(kind, options, causal):
    q, k, v = _qkv(7, n=6, m=6 if causal else 8, batch=(3,))
    out, A = aft_attention(q, k, v, kind=kind, rng=4, causal=causal, return_weights=True, **options)
    assert A.shape == (3, 4, 6, v.shape[-2])                       # (..., d, n, m)
    np.testing.assert_allclose(np.einsum("bctj,bjc->btc", A, v), out, **TIGHT)
    np.testing.assert_allclose(A.sum(axis=-1), np.moveaxis(expit(q), -1, -2), **TIGHT)
    if causal:
        np.testing.assert_array_equal(A[..., np.triu_indices(6, 1)[0], np.triu_indices(6, 1)[1]], 0.0)


def test_local_limits_are_simple_and_full():
    """s = 0 learns no bias (AFT-simple); s beyond every |t − t′| keeps the whole of w (AFT-full)."""
    q, k, v = _qkv(8, n=5, m=7)
    params = _params("local", 9, length=7)
    for causal in (False, True):
        np.testing.assert_allclose(aft_attention(q, k, v, kind="local", window=0, params=params, causal=causal),
                                   aft_attention(q, k, v, kind="simple", causal=causal), **TIGHT)
        np.testing.assert_allclose(aft_attention(q, k, v, kind="local", window=7, params=params, causal=causal),
                                   aft_attention(q, k, v, kind="full", params=params, causal=causal), **TIGHT)
    assert not np.allclose(aft_attention(q, k, v, kind="local", window=2, params=params),
                           aft_attention(q, k, v, kind="full", params=params))


def test_local_bias_is_zero_not_masked_outside_the_window():
    """Global connectivity: outside |t − t′| < s the bias is 0 and the key still carries weight."""
    params = _params("local", 10, length=6)
    w = aft_position_bias("local", 6, params=params, window=2)[0]
    full = params.u[:6] @ params.u_prime[:6].T
    near = np.abs(np.arange(6)[:, None] - np.arange(6)[None, :]) < 2
    np.testing.assert_array_equal(w, np.where(near, full, 0.0))
    q, k, v = _qkv(11, n=6, m=6, batch=())
    A = aft_attention(q, k, v, kind="local", window=2, params=params, return_weights=True)[1]
    assert (A[:, ~near] > 0).all()


def test_conv_at_initialisation_is_simple_and_its_bias_is_the_filter_on_the_offsets():
    q, k, v = _qkv(12, n=6, m=6)
    np.testing.assert_allclose(aft_attention(q, k, v, kind="conv", kernel_size=3, num_heads=2, rng=0),
                               aft_attention(q, k, v, kind="simple"), **TIGHT)
    f = AFTConvFilter(np.array([[1.0, 2.0, 6.0]]), gamma=np.array([2.0]), beta=np.array([0.5]))
    w_hat = 2.0 * (np.array([1.0, 2.0, 6.0]) - 3.0) / np.sqrt(14.0 / 3.0) + 0.5   # population std of (1, 2, 6)
    np.testing.assert_allclose(f.normalized()[0], w_hat, **TIGHT)
    expected = np.zeros((5, 5))
    for t in range(5):
        for tap, offset in enumerate((-1, 0, 1)):                  # tap r weighs key t + r − 1
            if 0 <= t + offset < 5:
                expected[t, t + offset] = w_hat[tap]
    np.testing.assert_allclose(aft_position_bias("conv", 5, params=f)[0], expected, **TIGHT)


def test_conv_on_an_image_is_the_s_by_s_filter_over_row_and_column_offsets():
    f = AFTConvFilter(np.arange(9.0).reshape(1, 3, 3), gamma=np.ones(1), beta=np.zeros(1))
    w = aft_position_bias("conv", 9, params=f, image_width=3)[0]    # a 3 × 3 image, row-major
    w_hat = f.normalized()[0]
    np.testing.assert_allclose(w[4].reshape(3, 3), w_hat, **TIGHT)  # the centre pixel sees the whole filter
    np.testing.assert_allclose(w[0].reshape(3, 3), [[w_hat[1, 1], w_hat[1, 2], 0], [w_hat[2, 1], w_hat[2, 2], 0],
                                                    [0, 0, 0]], **TIGHT)


def test_conv_heads_use_their_own_filter():
    """Channels 0, 1 follow head 0's filter, channels 2, 3 head 1's: swapping the filters swaps the channel pairs."""
    q, k, v = _qkv(13, n=6, m=6, batch=())
    f = _params("conv", 14)
    swapped = AFTConvFilter(f.w[::-1].copy(), f.gamma[::-1].copy(), f.beta[::-1].copy())
    out = aft_attention(q, k, v, kind="conv", params=f)
    out_swapped = aft_attention(q[:, [2, 3, 0, 1]], k[:, [2, 3, 0, 1]], v[:, [2, 3, 0, 1]], kind="conv",
                                params=swapped)
    np.testing.assert_allclose(out_swapped[:, [2, 3, 0, 1]], out, **TIGHT)


def test_bottom_right_places_the_queries_at_the_last_positions():
    q, k, v = _qkv(15, n=8, m=8, batch=())
    params = _params("full", 16, length=8)
    full = aft_attention(q, k, v, params=params, causal=True)
    last = aft_attention(q[-3:], k, v, params=params, causal="bottom-right")
    np.testing.assert_allclose(last, full[-3:], **TIGHT)


def test_initialisations():
    b = init_aft_position_bias(0, 40, bias_dim=128)
    assert b.u.shape == b.u_prime.shape == (40, 128)
    assert 0.009 < b.u.std() < 0.011                                # N(0, 0.01²), 5120 draws: ±1.5 % at 1σ
    f = init_aft_conv_filter(0, 3, 5, image=True)
    assert f.w.shape == (3, 5, 5)
    np.testing.assert_array_equal(f.gamma, 0.0)
    np.testing.assert_array_equal(f.beta, 0.0)


def test_drawn_params_are_returned_and_reproduce():
    from refattn import registry
    q, k, v = _qkv(17, n=5, m=7)
    result = registry.get("aft").apply(q, k, v, rng=3, return_draws=True)
    params = result.draws["params"]
    assert isinstance(params, AFTPositionBias) and params.u.shape == (7, 128)   # ℓ = max(n, m), d′ = 128
    np.testing.assert_array_equal(aft_attention(q, k, v, params=params), result.output)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"kind": "full", "rng": 0, "v": np.zeros((7, 3))}, "d_v"),
    ({"kind": "full", "rng": 0, "method": "scan"}, "method"),
    ({"kind": "local", "rng": 0}, "window"),
    ({"kind": "full", "rng": 0, "window": 2}, "window"),
    ({"kind": "simple", "params": AFTPositionBias(np.zeros((7, 2)), np.zeros((7, 2)))}, "params"),
    ({"kind": "full"}, "rng"),
    ({"kind": "full", "params": AFTPositionBias(np.zeros((6, 2)), np.zeros((6, 2)))}, "params covers"),
    ({"kind": "conv", "rng": 0, "kernel_size": 3, "num_heads": 3}, "num_heads"),
    ({"kind": "conv", "rng": 0}, "kernel_size"),
    ({"kind": "conv", "rng": 0, "kernel_size": 4}, "kernel_size"),
    ({"kind": "mixer"}, "kind"),
])
def test_bad_settings_are_named(kwargs, match):
    q, k, v = _qkv(18, n=5, m=7, batch=())
    kwargs = dict(kwargs)
    v = kwargs.pop("v", v)
    with pytest.raises((ValueError, TypeError), match=match):
        aft_attention(q, k, v, **kwargs)


def test_bad_params_are_named():
    with pytest.raises(TypeError, match="AFTConvFilter"):
        aft_attention(*_qkv(19, batch=()), kind="conv", params=_params("full", 0))
    with pytest.raises(ValueError, match="constant"):
        AFTConvFilter(np.ones((2, 3)), np.zeros(2), np.zeros(2))
    with pytest.raises(ValueError, match="params.u"):
        AFTPositionBias(np.zeros((4, 2)), np.zeros((5, 2)))
    with pytest.raises(ValueError, match="finite"):
        AFTPositionBias(np.full((4, 2), np.nan), np.zeros((4, 2)))


def test_the_kernel_checks_what_it_indexes():
    k = np.zeros((1, 4, 4))
    with pytest.raises(ValueError, match="aft_scan: band"):
        aft_scan(k, k.copy(), np.zeros((3, 4, 2)), 0, np.empty((1, 4, 4)))   # 3 heads do not divide d = 4
    with pytest.raises(ValueError, match="aft_scan: out"):
        aft_scan(k, k.copy(), np.zeros((1, 4, 2)), 0, np.empty((1, 5, 4)))   # n of out is not n of the band


@pytest.mark.parametrize(("kind", "options"), SETTINGS, ids=[f"{v}-{i}" for i, (v, _) in enumerate(SETTINGS)])
@pytest.mark.parametrize("causal", [False, True, "bottom-right"])
def test_the_equation_path_in_blocks_of_query_rows_equals_one_block(monkeypatch, kind, options, causal):
    """Without weights the equation path takes the query rows in blocks; 3 rows per block (two full blocks and
    a short one over n = 8) gives the same numbers bit for bit as one block (the weights path, unblocked)."""
    import refattn.beyond.aft as aft_module

    q, k, v = _qkv(11, n=8, m=6, batch=(2,))
    whole = aft_attention(q, k, v, kind=kind, rng=5, causal=causal, return_weights=True, **options)[0]
    monkeypatch.setattr(aft_module, "BLOCK_BYTES", 8 * 2 * 6 * 4 * 3)      # batch 2 × m 6 × d 4, 3 rows
    blocked = aft_attention(q, k, v, kind=kind, rng=5, causal=causal, **options)
    np.testing.assert_array_equal(blocked, whole)


def test_variant_and_alignment_are_the_deprecated_names_of_kind_and_causal():
    q, k, v = _qkv(0, n=5, m=5)
    with pytest.warns(DeprecationWarning, match=r"aft_attention: option variant= is renamed kind="):
        old = aft_attention(q, k, v, variant="simple")
    np.testing.assert_array_equal(old, aft_attention(q, k, v, kind="simple"))
    params = _params("full", 3, length=6)
    with pytest.warns(DeprecationWarning, match=r"aft_position_bias: option alignment= is renamed causal="):
        old = aft_position_bias("full", 2, 5, params=params, alignment="bottom-right")
    np.testing.assert_array_equal(old, aft_position_bias("full", 2, 5, params=params, causal="bottom-right"))


# --- one function per kind: each is aft_attention(kind=...) bit for bit, and its naive twin ------------------------

KIND_CALLS = [                                                      # (function, kind, options, naive's options)
    (aft_full, "full", {}, {}),
    (aft_local, "local", {"window": 2}, {"window": 2}),
    (aft_simple, "simple", {}, {}),
    (aft_conv, "conv", {}, {}),
    (aft_conv, "conv", {"image_width": 3}, {"image_width": 3}),
]


def _given_params(kind, options, seed):
    """Params large enough to matter (u, u′ ~ N(0, 1) over 12 positions, or 2 filters with γ, β drawn)."""
    if kind == "simple":
        return {}
    if kind == "conv" and "image_width" in options:
        rng = np.random.default_rng(seed)
        return {"params": AFTConvFilter(rng.standard_normal((2, 3, 3)), rng.standard_normal(2),
                                        rng.standard_normal(2))}
    return {"params": _params(kind, seed)}


@pytest.mark.parametrize(("function", "kind", "options", "naive_options"), KIND_CALLS,
                         ids=[f"{f.__name__}-{i}" for i, (f, *_) in enumerate(KIND_CALLS)])
@pytest.mark.parametrize(("causal", "n", "m"), [(False, 5, 9), (True, 9, 9), ("bottom-right", 4, 9),
                                                ("bottom-right", 9, 6)])
def test_each_kind_is_the_door_with_that_kind_bit_for_bit_and_its_naive_twin(function, kind, options, naive_options,
                                                                            causal, n, m):
    q, k, v = _qkv(20, n=n, m=m, batch=())
    options = {**options, **_given_params(kind, options, 21)}
    for method in ("equation", "scan") if causal is not False else ("equation",):
        out = function(q, k, v, causal=causal, method=method, **options)
        np.testing.assert_array_equal(out, aft_attention(q, k, v, kind=kind, causal=causal, method=method, **options))
        np.testing.assert_allclose(out, naive_aft(q, k, v, causal, kind, options.get("params"), **naive_options),
                                   **TIGHT)
    out, A = function(q, k, v, causal=causal, return_weights=True, **options)
    door_out, door_A = aft_attention(q, k, v, kind=kind, causal=causal, return_weights=True, **options)
    np.testing.assert_array_equal(out, door_out)
    np.testing.assert_array_equal(A, door_A)


@pytest.mark.parametrize(("function", "kind", "options"), [
    (aft_full, "full", {"bias_dim": 4}), (aft_local, "local", {"window": 3}),
    (aft_conv, "conv", {"kernel_size": 3, "num_heads": 2}), (aft_conv, "conv", {"kernel_size": 5, "image_width": 3}),
])
def test_each_kind_draws_its_params_as_the_door_does(function, kind, options):
    q, k, v = _qkv(22, n=6, m=9)
    np.testing.assert_array_equal(function(q, k, v, rng=4, causal=True, **options),
                                  aft_attention(q, k, v, kind=kind, rng=4, causal=True, **options))


def test_the_door_refuses_an_option_its_kind_has_no_use_for_and_ignores_rng_where_nothing_is_drawn():
    q, k, v = _qkv(23, n=5, m=7, batch=())
    with pytest.raises(ValueError, match=r"kernel_size has no meaning for kind='full' \(got 3\)"):
        aft_attention(q, k, v, kind="full", rng=0, kernel_size=3)
    with pytest.raises(TypeError, match="window"):
        aft_local(q, k, v, rng=0)                                   # a kind's own required option
    np.testing.assert_array_equal(aft_attention(q, k, v, kind="simple", rng=0), aft_simple(q, k, v))
