"""disagreement_reg: the three terms of Li et al. (2018) against loops, their extremes and their gradients."""
import math

import numpy as np
import pytest

import refattn as ra
from refattn.heads import (
    cosine_disagreement,
    cosine_disagreement_grad,
    disagreement,
    output_disagreement,
    position_disagreement,
    position_disagreement_grad,
    subspace_disagreement,
)

# Central differences, step H = 1e-5: truncation H²/6·|f'''| with |f'''| ≲ 10 for these inputs (unit-scale
# vectors, norms ≥ 0.3) gives ≲ 2e-10; rounding eps·|f|/H ≈ 2.2e-16·1/1e-5 ≈ 2e-11. Tolerance 1e-8 is 50×
# above both, far below the gradients' own size (≳ 1e-2).
H, FD_TOL = 1e-5, 1e-8


def naive_cosine(x):
    """-1/(n h²) Σ_t Σ_i Σ_j cos(x_i,t, x_j,t), with Python loops and math.sqrt."""
    h, n, d = x.shape
    total = 0.0
    for t in range(n):
        for i in range(h):
            for j in range(h):
                dot = sum(x[i, t, c] * x[j, t, c] for c in range(d))
                ni = math.sqrt(sum(x[i, t, c] ** 2 for c in range(d)))
                nj = math.sqrt(sum(x[j, t, c] ** 2 for c in range(d)))
                total += dot / (ni * nj)
    return -total / (n * h * h)


def naive_position(a):
    """-1/h² Σ_i Σ_j Σ_ts |A^i_ts A^j_ts|, with loops."""
    h, n, m = a.shape
    total = 0.0
    for i in range(h):
        for j in range(h):
            for t in range(n):
                for s in range(m):
                    total += abs(a[i, t, s] * a[j, t, s])
    return -total / (h * h)


def central(f, x):
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[idx] = H
        g[idx] = (f(x + e) - f(x - e)) / (2 * H)
    return g


def heads(seed, h=3, n=4, d=5):
    return np.random.default_rng(seed).standard_normal((h, n, d))


def test_cosine_terms_equal_the_loops():
    x = heads(0)
    assert abs(float(cosine_disagreement(x)) - naive_cosine(x)) < 1e-14
    assert float(subspace_disagreement(x)) == float(cosine_disagreement(x))
    assert float(output_disagreement(x)) == float(cosine_disagreement(x))


def test_position_term_equals_the_loop():
    a = ra.softmax(np.random.default_rng(1).standard_normal((3, 4, 6)))
    assert abs(float(position_disagreement(a)) - naive_position(a)) < 1e-14


def test_batch_axes_are_independent():
    x = np.random.default_rng(2).standard_normal((2, 3, 4, 5))
    D = cosine_disagreement(x)
    assert D.shape == (2,)
    for b in range(2):
        assert abs(D[b] - naive_cosine(x[b])) < 1e-14


def test_identical_heads_reach_the_minimum_minus_one():
    one = np.random.default_rng(3).standard_normal((1, 4, 5))
    same = np.concatenate([one, 2.0 * one, 0.5 * one])             # identical up to a positive factor
    assert abs(float(cosine_disagreement(same)) + 1.0) < 1e-15
    assert np.max(np.abs(cosine_disagreement_grad(same))) < 1e-15  # the minimum is flat
    # random heads lie strictly between the extremes
    assert -1.0 < float(cosine_disagreement(heads(4))) < 0.0


def test_orthogonal_heads_give_minus_one_over_h():
    # the paper's mean includes i = j, so only the h diagonal cosines (1 each) remain
    q, _ = np.linalg.qr(np.random.default_rng(5).standard_normal((6, 6)))
    x = np.stack([np.tile(q[:, i], (4, 1)) for i in range(3)])     # (3, 4, 6), heads orthogonal at each t
    assert abs(float(cosine_disagreement(x)) + 1.0 / 3.0) < 1e-15


def test_opposite_heads_reach_the_maximum_zero():
    one = heads(6, h=1)
    assert abs(float(cosine_disagreement(np.concatenate([one, -one])))) < 1e-15


def test_position_extremes():
    eye = np.eye(4)
    assert float(position_disagreement(np.stack([eye, eye, eye]))) == -4.0       # identical one-hot: −n
    disjoint = np.stack([eye, np.roll(eye, 1, axis=1), np.roll(eye, 2, axis=1)])
    assert float(position_disagreement(disjoint)) == -4.0 / 3.0                   # diagonal pairs: −n/h


def test_cosine_gradient_matches_central_differences():
    x = heads(7)
    analytic = cosine_disagreement_grad(x)
    numeric = central(lambda y: float(cosine_disagreement(y)), x)
    assert np.max(np.abs(analytic - numeric)) < FD_TOL
    assert np.max(np.abs(analytic)) > 1e-2


def test_position_gradient_matches_central_differences():
    a = ra.softmax(np.random.default_rng(8).standard_normal((3, 4, 5)))
    analytic = position_disagreement_grad(a)
    # the term is quadratic in A (f''' = 0): only rounding, eps·|f|/H ≈ 2.2e-16·2/1e-5 ≈ 5e-11
    numeric = central(lambda y: float(position_disagreement(y)), a)
    assert np.max(np.abs(analytic - numeric)) < FD_TOL
    assert np.max(np.abs(analytic + 2.0 / 9.0 * a.sum(axis=0))) < 1e-15        # −2/h² Σ_j A^j


def test_terms_from_a_multi_head_layer():
    from refattn.core.multi_head import init_multi_head, project_heads
    rng = np.random.default_rng(9)
    x = rng.standard_normal((5, 8))
    p = init_multi_head(rng, 8, 2)
    v = project_heads(x, p.w_v, p.b_v, 2)                          # (2, 5, 4)
    out = disagreement(values=v, weights=ra.softmax(rng.standard_normal((2, 5, 5))), outputs=v)
    assert list(out) == ["subspace", "position", "output"]
    assert abs(float(out["subspace"]) - naive_cosine(v)) < 1e-14


@pytest.mark.parametrize(("bad", "match"), [(np.ones((2, 3)), "x"), (np.zeros((2, 3, 4)), "zero vector"),
                                        (np.ones((0, 3, 4)), "at least one head")])
def test_bad_heads_raise(bad, match):
    with pytest.raises(ValueError, match=match):
        cosine_disagreement(bad)


def test_no_tensor_raises():
    with pytest.raises(ValueError, match="at least one of values, weights, outputs"):
        disagreement()
