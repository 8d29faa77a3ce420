r"""Figures of linearised attention (survey §4.2): effective matrix beside softmax and the feature maps' estimates.

One function per linear registry id, plus the sheet :func:`linear_overview`. Every figure uses the
same seeded input (:func:`_qkv`: n = 24 positions, d = 16, q and k ~ N(0, 0.7²), v ~ N(0, 1)) and
draws the effective attention matrix from the registry record's ``apply`` (its random draws, ω
and the gate parameters, from the fixed seed ``DRAW``) next to exact softmax attention
:func:`refattn.scaled_dot_product_attention` on the same q, k, and their difference. Row titles
give the relative output error ‖y − y_sm‖ / ‖y_sm‖ (Frobenius norms, y = A v). The conventions
are :mod:`refattn.viz`'s: weights on the one-sided weights scale from 0; signed matrices
(differences, trigonometric Performer weights, and any matrix with a negative entry) on a diverging
scale centred on 0; in causal matrices the masked pairs j > i grey. Causal colour scales leave out
rows 0–1 (weights 1 and about ½ there), which saturate, marked by an arrow on the colour bar.
Rows = queries *i*, columns = keys *j*.
"""
from __future__ import annotations

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from numpy.typing import NDArray

import refattn as ra

from .. import registry
from ..linear import (
    delta_beta,
    draw_omega,
    favor_features,
    favor_mse,
    init_delta_beta,
    init_rfa_gate,
    rfa_gates,
)
from ..viz import STYLE_PATH, draw_attention, figure, roundoff_text

__all__ = [
    "linear_elu", "performer_positive", "performer_trig", "efficient_attention", "rfa", "delta_rule",
    "linear_overview",
]

N, D, SCALE = 24, 16, 0.7                          # positions, width, std of q and k
SEED, DRAW = 40, 41                                # the input; ω and the gate parameters
FEATURES = 4 * 2 ** np.arange(9)                   # r = 4, 8, …, 1024 random projections
ERROR = "relative output error ‖y − y_sm‖/‖y_sm‖"


_styled = matplotlib.style.context(STYLE_PATH)     # decorator: every artist of a sheet in refattn's style


def _qkv() -> tuple[NDArray, NDArray, NDArray]:
    """The seeded input of every figure: q, k ~ N(0, 0.7²) of shape (24, 16), v ~ N(0, 1)."""
    rng = np.random.default_rng(SEED)
    return SCALE * rng.standard_normal((N, D)), SCALE * rng.standard_normal((N, D)), rng.standard_normal((N, D))


def _softmax(causal: bool) -> tuple[NDArray, NDArray]:
    """Exact softmax attention on the example: (output, weights)."""
    q, k, v = _qkv()
    return ra.scaled_dot_product_attention(q, k, v, causal=causal, return_weights=True)


def _error(out: NDArray, exact: NDArray) -> float:
    return float(np.linalg.norm(out - exact) / np.linalg.norm(exact))


def _run(mechanism: str, causal: bool, **options) -> tuple[NDArray, float]:
    """The effective matrix of the record's ``apply`` on the example, and its relative output error."""
    q, k, v = _qkv()
    result = registry.get(mechanism).apply(q, k, v, causal=causal, rng=DRAW, return_weights=True, **options)
    return result.weights, _error(result.output, _softmax(causal)[0])


def _same(figure_side: NDArray, apply_side: NDArray, what: str) -> None:
    """Refuse to draw when the figure's recomputation and the record's ``apply`` disagree."""
    if not np.allclose(figure_side, apply_side, rtol=1e-12, atol=1e-14):
        raise ValueError(f"{what}: the figure's recomputation and the record's apply disagree")


# --- matrices ---------------------------------------------------------------------------------------

def _limit(*matrices: NDArray, causal: bool = False) -> float:
    """Top of a colour scale: the largest |entry|, ignoring causal rows 0–1 (weights 1 and ≈ ½ there)."""
    return float(max(np.max(np.abs(A[2:] if causal else A)) for A in matrices))


def _draw(container, A: NDArray, *, causal: bool = False, signed: bool = False, limit: float | None = None,
          **kwargs) -> NDArray:
    """Weights on the weights scale from 0, or ``signed`` on the diverging scale, up to ``limit``
    (default the largest |entry|; an arrow on the colour bar marks entries beyond it); ``causal``:
    the masked pairs j > i grey."""
    return draw_attention(container, A, allowed=ra.causal_mask(N) if causal else None, signed=signed, vmax=limit,
                          **kwargs)


def _versus(container, A: NDArray, err: float, name: str, causal: bool, *, signed: bool = False,
            own_scale: bool = False, title: str | None = None) -> None:
    """[A | softmax] on one colour scale (or each on its own), then A − softmax, diverging."""
    S = _softmax(causal)[1]
    label = "causal, j ≤ i" if causal else "non-causal"
    pair, diff = container.subfigures(1, 2, width_ratios=[2.0 if own_scale else 1.85, 1.0])
    if own_scale:
        left, right = pair.subfigures(1, 2)
        _draw(left, A, causal=causal, signed=signed, limit=_limit(A, causal=causal), titles=name)
        _draw(right, S, causal=causal, limit=_limit(S, causal=causal), titles="softmax", ylabel="")
    else:
        _draw(pair, np.stack([A, S]), causal=causal, signed=signed, limit=_limit(A, S, causal=causal),
              titles=[name, "softmax"])
    _draw(diff, A - S, causal=causal, signed=True, limit=_limit(A - S, causal=causal), titles=f"{name} − softmax",
          ylabel="")
    saturate = "; colours saturate in rows 0–1 (arrow)" if causal else ""
    container.suptitle(title or f"{label}: {ERROR} = {roundoff_text(err, '.2f')}{saturate}")


def _line_axes(container, title: str, xlabel: str, ylabel: str):
    ax = container.add_subplot()
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    return ax


# --- random-feature studies (Performer) -------------------------------------------------------------

def _pair(theta_deg, norm: float = 1.0) -> tuple[NDArray, NDArray]:
    """x, y ∈ R^d with ‖x‖ = ‖y‖ = ``norm`` at angle θ (the MSE depends on nothing else); (..., d) for θ (...)."""
    theta = np.deg2rad(np.asarray(theta_deg, dtype=np.float64))[..., None]
    e_1, e_2 = np.eye(D)[:2]
    return norm * e_1 * np.ones_like(theta), norm * (np.cos(theta) * e_1 + np.sin(theta) * e_2)


def _omegas(r: int, *, orthogonal: bool) -> NDArray:
    """Seeded draws of r projections, (draws, r, d), from one :func:`draw_omega` call.

    At most 1000 draws and 2¹⁷ rows (i.i.d.) or 2¹⁵ rows (orthogonal: one QR per d rows).

    I.i.d. rows: any r of them are a draw. Orthogonal: consecutive r rows are a valid orthogonal
    draw (whole blocks of d when d | r; part of one block when r < d, where neighbouring draws
    share a block: dependent, but each has the right distribution, so mean errors are unbiased).
    """
    draws = min(1000, 2**15 // r if orthogonal else 2**17 // r)
    return draw_omega(r + int(orthogonal), draws * r, D, orthogonal=orthogonal).reshape(draws, r, D)


def _empirical_mse(pairs, r: int, *, kind: str, orthogonal: bool) -> list[float]:
    """For each (x, y) of ``pairs``: the mean over the draws of ω of (φ(x)ᵀφ(y) − exp(xᵀy))²."""
    omega = _omegas(r, orthogonal=orthogonal)
    mse = []
    for x, y in pairs:
        estimate = np.sum(favor_features(x[None], omega, kind=kind) * favor_features(y[None], omega, kind=kind),
                          axis=-1)[:, 0]                                   # (draws,)  φ(x)ᵀφ(y)
        mse.append(float(np.mean((estimate - np.exp(x @ y)) ** 2)))
    return mse


def _log_r_axis(ax, ylabel: str) -> None:
    ax.set(xscale="log", yscale="log", ylabel=ylabel)
    ax.set_xticks(FEATURES[::2], labels=[str(r) for r in FEATURES[::2]])
    ax.minorticks_off()


def _mse_panel(ax, pairs: dict[str, tuple[NDArray, NDArray]], kinds: tuple[str, ...]) -> None:
    """Lemma 2's MSE against r (lines: one style per kind, one colour per pair) and the empirical MSE
    of the first kind (markers: filled i.i.d., open orthogonal ω; up to 1000 draws per r)."""
    colors = [f"C{i}" for i in range(len(pairs))]
    empirical = {orthogonal: np.array([_empirical_mse(pairs.values(), int(r), kind=kinds[0], orthogonal=orthogonal)
                                       for r in FEATURES]) for orthogonal in (False, True)}    # (len(FEATURES), pairs)
    for p, ((x, y), color) in enumerate(zip(pairs.values(), colors, strict=True)):
        for kind, style in zip(kinds, ("-", "--"), strict=False):
            ax.plot(FEATURES, [favor_mse(x, y, int(r), kind=kind) for r in FEATURES], style, color=color)
        ax.plot(FEATURES, empirical[False][:, p], "o", color=color)
        ax.plot(FEATURES, empirical[True][:, p], "s", color=color, mfc="none")
    shown = pairs if len(pairs) > 1 else {}                     # one pair: its colour needs no entry
    handles = [*(Line2D([], [], color=c, label=label) for label, c in zip(shown, colors, strict=False)),
               *(Line2D([], [], color="0.2", ls=style, label=f"{kind}: Lemma 2 (i.i.d. ω)")
                 for kind, style in zip(kinds, ("-", "--"), strict=False)),
               Line2D([], [], color="0.2", ls="", marker="o", label=f"{kinds[0]}: empirical, i.i.d. ω"),
               Line2D([], [], color="0.2", ls="", marker="s", mfc="none", label=f"{kinds[0]}: empirical, orthogonal ω")]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncols=2)
    _log_r_axis(ax, "MSE of φ(x)ᵀφ(y) for exp(xᵀy)")
    ax.set_xlabel("number of random projections r")


def _feature_sweep(ax, seeds: int = 8) -> None:
    """Relative output error of positive Performer attention against r, i.i.d. and orthogonal ω."""
    q, k, v = _qkv()
    exact = _softmax(False)[0]
    record = registry.get("performer_positive")
    mean = {}
    for orthogonal, color in ((False, "C0"), (True, "C1")):
        errors = np.array([[_error(record.apply(q, k, v, rng=seed, num_features=int(r), orthogonal=orthogonal).output,
                                   exact) for seed in range(seeds)] for r in FEATURES])     # (len(FEATURES), seeds)
        ax.fill_between(FEATURES, errors.min(axis=1), errors.max(axis=1), color=color, alpha=0.2, lw=0)
        mean[orthogonal] = errors.mean(axis=1)
        ax.plot(FEATURES, mean[orthogonal], "o-", color=color,
                label=f"{'orthogonal' if orthogonal else 'i.i.d.'} ω: mean; band: min–max of {seeds} seeds")
    tail = FEATURES[FEATURES >= 64]
    ax.plot(tail, mean[False][-1] * np.sqrt(FEATURES[-1] / tail), ":", color="0.2", label="∝ r^(−1/2)")
    ax.axhline(_run("linear_elu", False)[1], color="C2", lw=1.0, ls="--", label="linear_elu (φ = elu + 1)")
    ax.axhline(_error(np.broadcast_to(v.mean(axis=0), v.shape), exact), color="0.55", lw=1.0, ls="-.",
               label="uniform weights 1/n")
    _log_r_axis(ax, "relative output error")
    ax.set_yticks([0.2, 0.3, 0.5, 1.0, 2.0], labels=["0.2", "0.3", "0.5", "1", "2"])
    ax.set(xlabel="number of random projections r",
           title="non-causal attention on the example: error against r;\nbelow uniform weights only from r ≈ 100")
    ax.legend(loc="lower left")


def _trig_over_positive(ax) -> None:
    """MSE_trig / MSE_positive from Lemma 2 against the angle between x and y, for several norms."""
    thetas = np.linspace(2.0, 178.0, 177)
    for norm in (0.5, 1.0, 1.5, 2.0):
        x, y = _pair(thetas, norm)                   # (T, d) each, one pair per angle
        ratio = favor_mse(x, y, 64, kind="trig") / favor_mse(x, y, 64, kind="positive")
        ax.plot(thetas, ratio, label=f"‖x‖ = ‖y‖ = {norm:g}" + (" (≈ the example)" if norm == 1.5 else ""))
    q, k, _ = _qkv()
    cosines = (q @ k.T) / np.outer(np.linalg.norm(q, axis=1), np.linalg.norm(k, axis=1))
    low, high = np.percentile(np.rad2deg(np.arccos(cosines)), [5, 95])
    ax.axvspan(low, high, color="0.87", lw=0, label="the example's angles (q_i, k_j), 5–95 %")
    ax.axhline(1.0, color="0.3", lw=0.8)
    ax.text(4, 2.0, "trig worse ↑", va="bottom")
    ax.text(4, 0.5, "trig better ↓", va="top")
    ax.set(yscale="log", ylim=(1e-8, 1e8), xlim=(0, 180), xticks=range(0, 181, 30),
           xlabel="angle θ between x and y (degrees)", ylabel="MSE_trig / MSE_positive (any r)",
           title="Lemma 2 for the same r: trig wins for aligned x, y and blows up\n"
                 "as x → −y, where exp(xᵀy) is small (most softmax weights)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncols=2)


def _scatter(ax, A: NDArray, S: NDArray, name: str) -> None:
    """Each weight A_ij against the softmax weight S_ij of the same pair (non-causal)."""
    ax.plot(S.ravel(), A.ravel(), ".", ms=3, alpha=0.6, label=f"{name} pairs (i, j)")
    top = max(S.max(), A.max()) * 1.05
    ax.plot([0, top], [0, top], color="0.3", lw=0.8, label="A = softmax")
    ax.axhline(1 / N, color="0.55", lw=0.8, ls="-.", label=f"uniform 1/n = 1/{N}")
    ax.set(xlim=(0, top), ylim=(0, top), aspect="equal", xlabel="softmax weight", ylabel=f"{name} weight")
    ax.legend(loc="upper left")


# --- one figure per registry id ---------------------------------------------------------------------

@_styled
def linear_elu() -> Figure:
    """φ(x) = elu(x) + 1 against softmax, non-causal and causal, and each weight against softmax's."""
    fig = figure((12.8, 7.6))
    rows, side = fig.subfigures(1, 2, width_ratios=[3.0, 1.0])
    for sub, causal in zip(rows.subfigures(2, 1), (False, True), strict=True):
        _versus(sub, *_run("linear_elu", causal), "linear_elu", causal)
    _scatter(_line_axes(side, "non-causal, pair by pair: the\nweights vary far less than softmax's", "", ""),
             _run("linear_elu", False)[0], _softmax(False)[1], "linear_elu")
    fig.suptitle("Linear Transformer (Katharopoulos et al., 2020), φ = elu + 1: a different kernel with flatter rows; "
                 f"n = {N}, d = {D}, q, k ~ N(0, {SCALE}²)")
    return fig


@_styled
def performer_positive() -> Figure:
    """FAVOR+ (64 orthogonal features) against softmax; error against r; Lemma 2's MSE against sampling."""
    fig = figure((12.4, 12.2))
    top, middle, bottom = fig.subfigures(3, 1, height_ratios=[1.0, 1.0, 1.35])
    for sub, causal in ((top, False), (middle, True)):
        _versus(sub, *_run("performer_positive", causal), "performer_positive", causal)
    left, right = bottom.subfigures(1, 2)
    _feature_sweep(left.add_subplot())
    ax = right.add_subplot()
    _mse_panel(ax, {"θ = 90°": _pair(90.0, 0.75)}, ("positive",))
    ax.set_title("kernel estimate for one pair x ⊥ y ∈ R¹⁶, ‖x‖ = ‖y‖ = 0.75:\n"
                 "Lemma 2 against sampling; orthogonal ω helps little here")
    fig.suptitle("Performer FAVOR+, positive random features (Choromanski et al., 2020): "
                 f"r = 64 orthogonal ω (seed {DRAW}), n = {N}, d = {D}")
    return fig


@_styled
def performer_trig() -> Figure:
    """Trigonometric features (signed weights) against softmax; Lemma 2: where trig loses to positive."""
    fig = figure((12.4, 12.2))
    top, middle, bottom = fig.subfigures(3, 1, height_ratios=[1.0, 1.0, 1.35])
    for sub, causal in ((top, False), (middle, True)):
        A, err = _run("performer_trig", causal)
        _versus(sub, A, err, "performer_trig", causal, signed=True,
                title=f"{'causal, j ≤ i' if causal else 'non-causal'}: {ERROR} = {roundoff_text(err, '.2f')}; "
                      f"weights can be negative (min {roundoff_text(A.min(), '.2f')}): diverging scale")
    left, right = bottom.subfigures(1, 2)
    ax = left.add_subplot()
    _mse_panel(ax, {"θ = 45°": _pair(45.0), "θ = 135°": _pair(135.0)}, ("trig", "positive"))
    ax.set_title("kernel estimate for two pairs, ‖x‖ = ‖y‖ = 1:\ntrig beats positive at 45° and loses at 135°")
    _trig_over_positive(right.add_subplot())
    fig.suptitle("Performer, trigonometric random features [sin ωᵀx, cos ωᵀx] (Choromanski et al., 2020): "
                 f"r = 64 orthogonal ω (seed {DRAW}), n = {N}, d = {D}")
    return fig


@_styled
def efficient_attention() -> Figure:
    """ρ_q(Q), ρ_k(K)ᵀ and their product, then the product against softmax (no causal form)."""
    q, k, _ = _qkv()
    rho_q, rho_k = ra.softmax(q, axis=-1), ra.softmax(k, axis=0)   # rows of Q, columns of K
    A, err = _run("efficient_attention", False)
    _same(rho_q @ rho_k.T, A, "efficient_attention")
    fig = figure((12.0, 9.0))
    top, bottom = fig.subfigures(2, 1)
    parts = top.subfigures(1, 3, width_ratios=[0.95, 1.25, 1.2])
    _draw(parts[0], rho_q, titles="ρ_q(Q): each row of Q\nsoftmaxed over the d features", xlabel="feature c")
    _draw(parts[1], rho_k.T, titles="ρ_k(K)ᵀ: each column of K softmaxed\nover the n positions, transposed",
          ylabel="feature c")
    _draw(parts[2], A, titles="A = ρ_q(Q) ρ_k(K)ᵀ: rows sum to 1,\nrank ≤ d")
    _versus(bottom, A, err, "efficient_attention", False,
            title=f"non-causal only (ρ_k normalises over every position): {ERROR} = {roundoff_text(err, '.2f')}")
    fig.suptitle(f"Efficient Attention (Shen et al., 2018): ρ_q(Q) (ρ_k(K)ᵀ V), no 1/√d; n = {N}, d = {D}")
    return fig


@_styled
def rfa() -> Figure:
    """The gates apply draws and their matrix against softmax; the limits g ≡ 0, constant g, decay form g ≡ 1."""
    _, k, _ = _qkv()
    params = init_rfa_gate(DRAW, D)                                  # what apply draws from rng=DRAW
    gates = rfa_gates(k, params.w_g, params.b_g)
    A, err = _run("rfa", True)
    _same(_run("rfa", True, gates=gates)[0], A, "rfa gates")
    limits = [
        ("g ≡ 0 (paper form): A = I,\nmemory reset, y_t = v_t", {"gates": np.zeros(N)}),
        ("g ≡ 0.8: recency bias,\nc_ij = 0.2 · 0.8^(i−j)", {"gates": np.full(N, 0.8)}),
        ("decay form, g ≡ 1: S_t = S_(t−1) + φ(k_t)v_tᵀ,\ncausal linear attention", {"gates": np.ones(N),
                                                                                  "gate_form": "decay"}),
    ]
    runs = [_run("rfa", True, **options) for _, options in limits]
    _same(runs[0][0], np.eye(N), "rfa, g ≡ 0")
    linear, linear_err = _run("linear_elu", True)
    _same(runs[2][0], linear, "rfa, decay form g ≡ 1, and linear_elu")
    fig = figure((12.6, 9.2))
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.0, 1.1])
    left, right = top.subfigures(1, 2, width_ratios=[1.0, 3.0])
    ax = _line_axes(left, "", "step t", "g_t")
    left.suptitle(f"gates g_t = σ(w_g·k_t + b_g)\n(apply, rng = {DRAW}: w_g Glorot, b_g = 0)")
    ax.bar(np.arange(N), gates, color="C0", width=0.8)
    ax.set(ylim=(0, 1), xlim=(-1, N))
    _versus(right, A, err, "rfa", True,
            title=f"c_ij = (1 − g_j) Π g_l over l = j+1 … i, the gates on the left:\n"
                  f"{ERROR} = {roundoff_text(err, '.2f')}")
    matrices = np.stack([*(R for R, _ in runs), linear])
    titles = [*(f"{t}\nerror {roundoff_text(e, '.2f')}" for (t, _), (_, e) in zip(limits, runs, strict=True)),
              f"linear_elu, causal: the same\n(equal to 1e-12)\nerror {roundoff_text(linear_err, '.2f')}"]
    _draw(bottom, matrices, causal=True, titles=titles, limit=_limit(*matrices[1:], causal=True))
    bottom.suptitle("limits of the gate (paper form unless stated; φ = elu + 1)")
    fig.suptitle(f"Random Feature Attention with a gate (Peng et al., 2021): causal only, n = {N}, d = {D}; "
                 "colours saturate in rows 0–1 (arrows)")
    return fig


@_styled
def delta_rule() -> Figure:
    """Effective matrices for the β apply draws and for β ≡ 1 against softmax; row sums (not 1) and the rates."""
    _, k, _ = _qkv()
    params = init_delta_beta(DRAW, D)                                # what apply draws from rng=DRAW
    beta = delta_beta(k, params.w, params.b)
    drawn, ones = _run("delta_rule", True), _run("delta_rule", True, beta=np.ones(N))
    _same(_run("delta_rule", True, beta=beta)[0], drawn[0], "delta_rule β")
    fig = figure((12.6, 12.4))
    top, middle, bottom = fig.subfigures(3, 1, height_ratios=[0.8, 1.0, 1.0])
    left, right = top.subfigures(1, 2)
    ax = _line_axes(left, f"learning rates β_i = σ(w·k_i), w Glorot (seed {DRAW}), no bias", "step i", "β_i")
    ax.bar(np.arange(N), beta, color="C0", width=0.8, label=f"β of apply (rng = {DRAW})")
    ax.axhline(1.0, color="C1", label="β ≡ 1")
    ax.set(ylim=(0, 1.35), xlim=(-1, N))
    ax.legend(loc="upper center", ncols=2)
    ax = _line_axes(right, "row sums Σ_j A_ij: not 1 (no normaliser)", "query i", "Σ_j A_ij")
    ax.plot(drawn[0].sum(axis=1), "o-", label=f"β of apply (rng = {DRAW})")
    ax.plot(ones[0].sum(axis=1), "s-", label="β ≡ 1")
    ax.axhline(1.0, color="0.5", lw=0.8, ls="--", label="softmax (every row)")
    ax.set_ylim(0, 1.1)
    ax.legend(loc="lower right")
    for sub, (A, err), what in ((middle, drawn, f"β of apply (rng = {DRAW})"), (bottom, ones, "β ≡ 1")):
        sign = "signed: diverging scale" if A.min() < 0 else "all ≥ 0 here, though the rule allows negative weights"
        _versus(sub, A, err, "delta_rule", True, own_scale=True, signed=bool(A.min() < 0),
                title=f"{what}: {ERROR} = {roundoff_text(err, '.2f')}; A on its own scale ({sign})")
    fig.suptitle("Fast-weight delta rule (Schlag et al., 2021), φ = (elu + 1)/Σ(elu + 1), normalised by its sum: "
                 f"causal only, n = {N}, d = {D}")
    return fig


# --- overview sheet ---------------------------------------------------------------------------------

@_styled
def linear_overview() -> Figure:
    """Every linear mechanism's effective matrix beside softmax: the weights on one-sided scales,
    the signed trigonometric Performer on a diverging one; causal pairs j > i grey."""
    rows = {
        False: ["linear_elu", "performer_positive", "efficient_attention"],
        True: ["linear_elu", "performer_positive", "rfa", "delta_rule"],
    }
    notes = {"delta_rule": " (rows sum < 1)"}
    fig = figure((13.6, 7.4))
    for sub, (causal, names) in zip(fig.subfigures(2, 1), rows.items(), strict=True):
        runs = [_run(name, causal) for name in names]
        panels = [_softmax(causal)[1], *(A for A, _ in runs)]
        titles = ["softmax (exact)", *(f"{name}{notes.get(name, '')}\nerror {roundoff_text(err, '.2f')}"
                                       for name, (_, err) in zip(names, runs, strict=True))]
        blank = 5 - len(panels)                                    # non-causal: a note in the fifth slot
        weights, trig = sub.subfigures(1, 2, width_ratios=[5.0, 1.25])
        axes = _draw(weights, np.stack([*panels, *[np.full((N, N), np.nan)] * blank]), causal=causal,
                     limit=_limit(*panels, causal=causal), titles=titles + [""] * blank)
        for ax in axes[0, len(panels):]:
            ax.images[0].remove()
            ax.axis("off")
            ax.text(0.5, 0.5, "rfa, delta_rule:\ncausal recurrences,\nno non-causal form", ha="center",
                    va="center", transform=ax.transAxes)
        A, err = _run("performer_trig", causal)
        _draw(trig, A, causal=causal, signed=True, limit=_limit(A, causal=causal),
              titles=f"performer_trig\nerror {roundoff_text(err, '.2f')}", ylabel="")
        sub.suptitle("causal, j ≤ i (efficient_attention has no causal form)" if causal else "non-causal")
    fig.suptitle(f"Linearised attention beside softmax, n = {N}, d = {D}: weights on a one-sided scale from 0 "
                 "(square root), the trigonometric\nPerformer's signed weights on a diverging one; grey = masked pair "
                 f"(j > i); colours saturate in rows 0–1 (arrows); error = {ERROR}")
    return fig
