"""pattern_aux_loss: the predefined patterns, the guidance loss against a loop, its zero and its gradients."""
import numpy as np
import pytest

import refattn as ra
from refattn.heads import guide_pattern, guide_patterns, pattern_loss, pattern_loss_grad, pattern_loss_score_grad

# Central differences, step H = 1e-5. The loss is quadratic in A (f''' = 0): rounding only,
# eps·|f|/H ≈ 2.2e-16·10/1e-5 ≈ 2e-10. Through the softmax, |f'''| ≲ 10 gives truncation H²/6·10 ≈ 2e-10.
# Tolerance 1e-8 is 50× above both and far below the gradients' size (≳ 1e-2).
H, FD_TOL = 1e-5, 1e-8


def naive_pattern(name, n, delimiters=(None,)):
    P = [[0.0] * n for _ in range(n)]
    for i in range(n):
        if name == "next":
            P[i][min(i + 1, n - 1)] = 1.0
        elif name == "previous":
            P[i][max(i - 1, 0)] = 1.0
        elif name == "first":
            P[i][0] = 1.0
        elif name == "uniform":
            for j in range(n):
                P[i][j] = 1.0 / n
        else:
            ds = sorted(set(n - 1 if d is None else d for d in delimiters))
            for d in ds:
                P[i][d] = 1.0 / len(ds)
    return np.array(P)


def naive_loss(A, P, guided, lam):
    total = 0.0
    h, n, m = A.shape
    for k in range(h):
        if guided[k]:
            for i in range(n):
                for j in range(m):
                    total += (A[k, i, j] - P[k, i, j]) ** 2
    return lam * total


def central(f, x):
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[idx] = H
        g[idx] = (f(x + e) - f(x - e)) / (2 * H)
    return g


@pytest.mark.parametrize("name", ["next", "previous", "first", "delimiter", "uniform"])
def test_patterns_equal_the_loops_and_are_row_stochastic(name):
    P = guide_pattern(name, 6)
    assert np.array_equal(P, naive_pattern(name, 6))
    assert np.max(np.abs(P.sum(axis=-1) - 1.0)) < 1e-15


def test_delimiter_positions():
    P = guide_pattern("delimiter", 6, delimiters=[2, 5, 2])
    assert np.array_equal(P, naive_pattern("delimiter", 6, delimiters=(2, 5)))
    with pytest.raises(ValueError, match="delimiters"):
        guide_pattern("delimiter", 6, delimiters=[6])
    with pytest.raises(ValueError, match="delimiters"):
        guide_pattern("next", 6, delimiters=[1])


def test_loss_equals_the_loop():
    rng = np.random.default_rng(0)
    A = ra.softmax(rng.standard_normal((4, 5, 5)))
    P, guided = guide_patterns(["next", "previous", None, "first"], 5)
    assert abs(float(pattern_loss(A, P, guided=guided, lam=0.3)) - naive_loss(A, P, guided, 0.3)) < 1e-14


def test_loss_is_zero_at_the_pattern_and_positive_elsewhere():
    P, guided = guide_patterns(["next", "previous", "first", "delimiter", "uniform"], 5)
    assert float(pattern_loss(P, P, guided=guided)) == 0.0
    assert np.max(np.abs(pattern_loss_grad(P, P, guided=guided))) == 0.0
    A = ra.softmax(np.random.default_rng(1).standard_normal((5, 5, 5)))
    assert float(pattern_loss(A, P, guided=guided)) > 0.1


def test_unguided_heads_are_free():
    P, guided = guide_patterns(["next", None], 4)
    A = np.stack([P[0], np.full((4, 4), 0.25)])
    assert float(pattern_loss(A, P, guided=guided)) == 0.0
    assert np.max(np.abs(pattern_loss_grad(A, P, guided=guided)[1])) == 0.0


def test_gradient_wrt_weights_matches_central_differences():
    rng = np.random.default_rng(2)
    A = ra.softmax(rng.standard_normal((3, 4, 4)))
    P, guided = guide_patterns(["next", None, "first"], 4)
    analytic = pattern_loss_grad(A, P, guided=guided, lam=0.7)
    numeric = central(lambda a: float(pattern_loss(a, P, guided=guided, lam=0.7)), A)
    assert np.max(np.abs(analytic - numeric)) < FD_TOL
    assert np.max(np.abs(analytic)) > 1e-2


def test_gradient_wrt_scores_matches_central_differences():
    rng = np.random.default_rng(3)
    S = rng.standard_normal((2, 2, 4, 4))                          # batch 2, 2 heads
    P, guided = guide_patterns(["previous", "delimiter"], 4)
    analytic = pattern_loss_score_grad(S, P, guided=guided)
    numeric = central(lambda s: float(pattern_loss(ra.softmax(s), P, guided=guided).sum()), S)
    assert np.max(np.abs(analytic - numeric)) < FD_TOL
    assert np.max(np.abs(analytic.sum(axis=-1))) < 1e-15           # a shift of a row changes nothing


def test_bad_input_raises():
    P, _ = guide_patterns(["next", "first"], 4)
    with pytest.raises(ValueError, match="patterns"):
        pattern_loss(np.ones((2, 3, 3)), P)
    with pytest.raises(ValueError, match="guided"):
        pattern_loss(P, P, guided=[True])
    with pytest.raises(ValueError, match="lam"):
        pattern_loss(P, P, lam=-1.0)
    with pytest.raises(ValueError, match="name"):
        guide_pattern("diagonal", 4)
