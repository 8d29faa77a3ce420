r"""Figure of Nyströmformer (survey §4.4.2): the factors, their product beside softmax, the pseudoinverse iteration.

The input has the structure that makes landmarks useful: n = 22 tokens whose queries and keys
follow one random walk in R^8 (q_t, k_t = w_t + 0.15 ε, w_t = w_{t−1} + 0.6 ε'), so that the
tokens of a segment are alike, and v ~ N(0, I) (seed 0). l = 5 landmarks split the 22 tokens into
segments of 4, 4, 4, 5 and 5 (:func:`~refattn.lowrank.landmark_segments`): each query's and key's
segment is the colour strip beside its row or column, and each landmark's colour is that of its
segment. Top: F̃ (n × l), Ã⁺ (l × l, the official 6 steps), B̃ (l × m), their product Ŝ and exact
softmax S. Bottom: Ŝ − S with the exact pseudoinverse and with 6 steps, each row's sum, and the
iteration's error step by step, for this Ã with the paper's per-matrix initial coefficient and with
the official one shared with a second head whose landmarks all attend to one key (‖Ã‖₁ ≈ l).
Rows = queries *i*, columns = keys *j*.
"""
from __future__ import annotations

import math

import matplotlib.style
import numpy as np
from matplotlib.colors import Normalize, PowerNorm
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator
from numpy.typing import NDArray

from .. import registry, scaled_dot_product_attention
from ..lowrank import exact_pinv, iterative_pinv, landmark_segments, nystrom_factors
from ..viz import (
    SIGNED_CMAP,
    STYLE_PATH,
    WEIGHTS_CMAP,
    WEIGHTS_GAMMA,
    draw_attention,
    figure,
    roundoff,
    roundoff_text,
    shade_roundoff,
)
from .common import GROUP_COLORS, group_strips

__all__ = ["nystromformer"]

N, D, L, SEED = 22, 8, 5, 0
STEPS = 16                                          # iterations drawn in the convergence panel
OFFICIAL_STEPS = 6


def walk_qkv(seed: int = SEED, n: int = N, d: int = D) -> tuple[NDArray, NDArray, NDArray]:
    """q, k near one random walk (neighbouring tokens alike), v ~ N(0, I); the walk is centred."""
    rng = np.random.default_rng(seed)
    walk = np.cumsum(0.6 * rng.standard_normal((n, d)), axis=0)
    walk -= walk.mean(axis=0)
    return (walk + 0.15 * rng.standard_normal((n, d)), walk + 0.15 * rng.standard_normal((n, d)),
            rng.standard_normal((n, d)))


def token_groups(bounds: NDArray, n: int) -> NDArray:
    """Each token's landmark (segment or window) index from the bounds; −1 for a token in none."""
    groups = np.full(n, -1)
    for j, (start, stop) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        groups[start:stop] = j
    return groups


def draw_blocks(container, A_tilde, B_tilde, F_tilde, S_hat, groups, *, vmax: float, product: str) -> None:
    """The Nyström block picture [[Ã, B̃], [F̃, Ŝ]]: B̃'s columns are Ŝ's keys, F̃'s rows its queries, Ã the landmarks'
    own block; the factors on the weights scale, Ŝ on a signed one up to ``vmax``. Strips: each token's segment (F̃'s
    rows, B̃'s columns) and each landmark's colour (Ã's rows and columns)."""
    l_q, l_k = A_tilde.shape
    n, m = S_hat.shape
    grid = container.add_gridspec(2, 2, width_ratios=[l_k, m], height_ratios=[l_q, n])
    ax_S = container.add_subplot(grid[1, 1])
    ax_F = container.add_subplot(grid[1, 0], sharey=ax_S)
    ax_B = container.add_subplot(grid[0, 1], sharex=ax_S)
    ax_A = container.add_subplot(grid[0, 0], sharex=ax_F, sharey=ax_B)
    weights = PowerNorm(WEIGHTS_GAMMA, 0.0, max(F_tilde.max(), A_tilde.max(), B_tilde.max()))
    signed = Normalize(-vmax, vmax)
    for ax, X, norm, cmap, title in ((ax_A, A_tilde, weights, WEIGHTS_CMAP, "Ã = softmax(Q̃K̃ᵀ/√d)"),
                                     (ax_B, B_tilde, weights, WEIGHTS_CMAP, "B̃ = softmax(Q̃Kᵀ/√d)"),
                                     (ax_F, F_tilde, weights, WEIGHTS_CMAP, "F̃ = softmax(QK̃ᵀ/√d)"),
                                     (ax_S, S_hat, signed, SIGNED_CMAP, product)):
        ax.imshow(X, cmap=cmap, norm=norm, aspect="auto", interpolation="nearest")
        ax.set_title(title, fontsize=9)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    group_strips(ax_F, groups)
    group_strips(ax_B, None, groups)
    group_strips(ax_A, np.arange(l_q), np.arange(l_k))
    ax_A.set(xticks=range(l_k), yticks=range(l_q))
    ax_B.yaxis.set_label_position("right")
    ax_B.set_ylabel("landmark query")
    ax_F.set(xlabel="landmark key", ylabel="query i")
    ax_S.set(xlabel="key j")
    for ax in (ax_A, ax_B):
        ax.tick_params(labelbottom=False)
    for ax in (ax_B, ax_S):
        ax.tick_params(labelleft=False)
    container.colorbar(ax_F.images[0], ax=[ax_A, ax_F], location="left", shrink=0.8, pad=0.1, label="weights")
    container.colorbar(ax_S.images[0], ax=[ax_B, ax_S], shrink=0.8, pad=0.02)


def _sunk_head(q: NDArray, k: NDArray) -> tuple[NDArray, NDArray]:
    """A second head whose landmark queries all align with one strong key: its Ã puts ~all mass on one column."""
    q2, k2 = np.zeros_like(q), 0.3 * k
    q2[:, 0], k2[:, 0] = 2.0, 0.0
    k2[: N // L, 0] = 8.0                                          # the first segment's keys: landmark key 0
    return np.stack([q, q2]), np.stack([k, k2])


def _convergence(ax, q: NDArray, k: NDArray) -> None:
    """‖Z_j − Ã⁺‖/‖Ã⁺‖ (largest entries) for this Ã: the paper's coefficient, and the official one shared with a
    sunk head; the count ⌈log(1/δ)/log(13/4)⌉ + 3 and the official 6 steps marked."""
    qb, kb = _sunk_head(q, k)
    A = nystrom_factors(qb, kb, num_landmarks=L, pinv="exact").A_tilde   # (2, l, l)
    P = exact_pinv(A[0])
    kappa = float(roundoff(np.linalg.cond(A[0])))                    # Ã⁺ is exact to about κ·eps
    steps = np.arange(STEPS + 1)
    for init, color, label in (("paper", GROUP_COLORS[0], "per-matrix Z₀ (paper)"),
                               ("official", GROUP_COLORS[1], "global Z₀ (official code),\nshared with a head of "
                                f"‖Ã‖₁ = {roundoff_text(np.abs(A[1]).sum(axis=0).max(), '.1f')}")):
        error = [np.abs(iterative_pinv(A, j, init=init)[0] - P).max() / np.abs(P).max() for j in steps]
        ax.semilogy(steps, roundoff(error, scale=kappa), "o-", color=color, markersize=3, label=label)
    sigma_min = np.linalg.svd(A[0], compute_uv=False)[-1]
    delta = sigma_min**2 / (np.abs(A[0]).sum(axis=0).max() * np.abs(A[0]).sum(axis=1).max())
    predicted = math.ceil(math.log(1 / delta) / math.log(13 / 4)) + 3
    ax.axvline(OFFICIAL_STEPS, color="black", linestyle=":", linewidth=1, label="the official 6 steps")
    ax.axvline(predicted, color=GROUP_COLORS[0], linestyle="--", linewidth=1,
               label=f"⌈log(1/δ)/log(13/4)⌉ + 3 = {predicted},\nδ = σ²_min/(‖Ã‖₁‖Ã‖∞)")
    shade_roundoff(ax, scale=kappa)
    ax.set(xlabel="iteration j", ylabel="max |Z_j − Ã⁺| / max |Ã⁺|", ylim=(None, 10), xticks=steps[::2],
           title=f"Z_(j+1) = ¼ Z_j (13I − ÃZ_j (15I − ÃZ_j (7I − ÃZ_j)))\nthis Ã: κ = {roundoff_text(kappa, '.0f')}")
    ax.legend(loc="upper right", fontsize=7)


@matplotlib.style.context(STYLE_PATH)
def nystromformer() -> Figure:
    """The factors F̃, Ã⁺, B̃ and their product beside softmax; the errors, row sums and the pinv iteration.

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    q, k, v = walk_qkv()
    groups = token_groups(landmark_segments(N, L), N)
    six = nystrom_factors(q, k, num_landmarks=L)
    out, S = scaled_dot_product_attention(q, k, v, return_weights=True)
    record = registry.get("nystromformer")
    runs = {pinv: record.apply(q, k, v, num_landmarks=L, pinv=pinv, return_weights=True)
            for pinv in ("exact", "iterative")}
    S_six = six.F_tilde @ six.A_tilde_pinv @ six.B_tilde
    if not np.allclose(runs["iterative"].weights, S_six, rtol=1e-12, atol=1e-12):
        raise ValueError("nystromformer: the figure's factors and the record's apply disagree")
    errors = {pinv: np.linalg.norm(r.output - out) / np.linalg.norm(out) for pinv, r in runs.items()}

    fig = figure((14.0, 10.6))
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.15, 1.0])
    blocks, exact, pinv = top.subfigures(1, 3, width_ratios=[1.25, 1.0, 0.6])
    vmax = float(np.abs(np.stack([S_six, S])).max())
    draw_blocks(blocks, six.A_tilde, six.B_tilde, six.F_tilde, S_six, groups, vmax=vmax,
                product=f"Ŝ = F̃ Ã⁺ B̃, Ã⁺ by {OFFICIAL_STEPS} steps")
    ax = draw_attention(exact, S, signed=True, vmax=vmax, annotate=False, titles="S = softmax(QKᵀ/√d), exact")[0, 0]
    group_strips(ax, groups, groups)
    ax = draw_attention(pinv, six.A_tilde_pinv, signed=True, xlabel="landmark query", ylabel="landmark key",
                        titles=f"Ã⁺, {OFFICIAL_STEPS} steps")[0, 0]
    group_strips(ax, np.arange(L), np.arange(L))
    diff, sums, curve = bottom.subfigures(1, 3, width_ratios=[1.25, 0.55, 0.85])
    axes = draw_attention(diff, np.stack([runs["exact"].weights - S, S_six - S]), signed=True, annotate=False,
                          titles=["Ŝ − S, exact Ã⁺ (scipy)", f"Ŝ − S, {OFFICIAL_STEPS} steps"])
    for ax in axes.ravel():
        group_strips(ax, groups, groups)
    ax = sums.add_subplot()
    rows = np.arange(N)
    for W, marker, color, label in ((runs["exact"].weights, "o", GROUP_COLORS[0], "exact Ã⁺ (Ã1 = 1 ⇒ Ŝ1 = 1)"),
                                    (S_six, "s", GROUP_COLORS[1], f"{OFFICIAL_STEPS} steps")):
        ax.semilogx(roundoff(np.abs(W.sum(axis=-1) - 1)), rows, marker, color=color, markersize=4, label=label)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    shade_roundoff(ax, axis="x")
    ax.set(xlabel="|Σ_j Ŝ_ij − 1|", ylabel="query i", ylim=(N - 0.5, -0.5), xlim=(None, 1),
           title=f"row sums (issue #14)\nmin Ŝ_ij = {roundoff_text(runs['exact'].weights.min(), '.3f')} < 0")
    ax.legend(loc="center right", fontsize=7)
    _convergence(curve.add_subplot(), q, k)
    fig.suptitle(f"Nyströmformer (Xiong et al., 2021): n = m = {N}, d = {D}, l = {L} landmarks, the means of segments "
                 f"of {', '.join(map(str, np.diff(landmark_segments(N, L))))} tokens (strips: each token's segment)\n"
                 f"relative output error ‖y − y_sm‖/‖y_sm‖: {roundoff_text(errors['exact'], '.3f')} with the exact "
                 f"Ã⁺, {roundoff_text(errors['iterative'], '.3f')} with {OFFICIAL_STEPS} steps")
    return fig
