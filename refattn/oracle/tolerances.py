r"""Tolerances for comparing another attention implementation with refattn: the three rules.

    ratio   max|c − o| ≤ f · max|b − o| + floor      f = 2 (output), 3 (gradients)     FlashAttention
    table   |c − o| ≤ atol + rtol · |o|               per element, a named table's (rtol, atol)
    ulp     |c − o| ≤ N · ulp(max|o|)                 ULPs of the candidate's dtype at the array's scale

``c`` is the candidate, ``o`` the float64 oracle, ``b`` the same-dtype baseline (refattn's own
equation path run in the candidate's dtype). The ``floor`` of the ratio rule is the first-order
rounding noise of one rounding per score, weight and product in the candidate's dtype (see
:func:`forward_noise` and :func:`gradient_noise`); the named tables are copied from their sources,
cited in :data:`TABLES`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ..common.checks import check_choice

__all__ = [
    "DEFAULT_MAX_ULPS",
    "DEFAULT_TABLE",
    "OUTPUT_FLOORS",
    "RATIO_FACTORS",
    "RULES",
    "TABLES",
    "RuleSpec",
    "Table",
    "floor_spec",
    "forward_noise",
    "gradient_noise",
    "rule_spec",
    "table_tolerance",
]

RULES = ("ratio", "table", "ulp")
COMBINES = ("abs", "rss")

RATIO_FACTORS = {"out": 2.0, "dq": 3.0, "dk": 3.0, "dv": 3.0}
"""FlashAttention's factors: output error ≤ 2×, gradient errors ≤ 3× the baseline's.

FlashAttention 2's tests (Dao-AILab/flash-attention, ``tests/test_flash_attn.py``):
``(out - out_ref).abs().max() <= 2 * (out_pt - out_ref).abs().max()`` and ``3 *`` for ``dq``,
``dk``, ``dv``, where ``out_ref`` is the float32 reference and ``out_pt`` the same PyTorch code run
in the low-precision dtype. FlashAttention 3's tests (``hopper/test_flash_attn.py``) add a floor,
``2 * (out_ref + 0.3 - 0.3 - out_ref).abs().max()``: the noise of one arithmetic operation.
"""

DEFAULT_MAX_ULPS = 64
"""Default N of the "ulp" rule: 64 ulps of the candidate's dtype at the array's largest |oracle|.

Measured on 200 random problems per row (standard-normal q, k, v; n < 64, m < 512, d_k ≤ 128), a
correct blocked online-softmax implementation stayed within 8 (float32), 11 (float16) and 22
(float64) such ulps of the float64 result, so 64 leaves a margin of three or more. With q and k
scaled by 3 the maxima were 34 / 10 / 104 ulps, scaled by 10 (logits in the hundreds) 409 / 113 /
900: the ulp rule is blind to the problem's conditioning, which is why "ratio" is the default.
"""

DEFAULT_TABLE = "torch-default"


@dataclass(frozen=True)
class Table:
    """A named tolerance table: ``(rtol, atol)`` per dtype name, for outputs and for gradients.

    Attributes
    ----------
    name : str
    source : str
        Where the numbers come from (repository, file, commit).
    forward : dict
        ``{dtype name: (rtol, atol)}`` for the attention output.
    backward : dict
        ``{dtype name: (rtol, atol)}`` for ``dq``, ``dk``, ``dv``.
    """

    name: str
    source: str
    forward: dict
    backward: dict


_TORCH = {"float16": (1e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5), "float32": (1.3e-6, 1e-5), "float64": (1e-7, 1e-7)}
_JAX = {"bfloat16": (1e-2, 1e-2), "float16": (1e-3, 1e-3), "float32": (1e-6, 1e-6), "float64": (1e-15, 1e-15)}
_JAX_GRAD = {"bfloat16": (1e-1, 1e-1), "float16": (1e-2, 1e-2), "float32": (2e-3, 2e-3), "float64": (1e-5, 1e-5)}

TABLES = {
    "torch-default": Table(
        "torch-default",
        "torch.testing.assert_close defaults, _DTYPE_PRECISIONS in pytorch/pytorch "
        "torch/testing/_comparison.py (|actual − expected| ≤ atol + rtol·|expected|); the same "
        "table for gradients",
        _TORCH,
        _TORCH,
    ),
    "xformers": Table(
        "xformers",
        "facebookresearch/xformers xformers/ops/fmha/common.py (commit a9e2e7b3): "
        "AttentionFwOpBase.ERROR_ATOL/ERROR_RTOL for the output, AttentionBwOpBase's for gradients, "
        "compared by torch.allclose in tests/test_mem_eff_attention.py; no float64 entry (xFormers' "
        "kernels have none)",
        {"float32": (2e-5, 3e-4), "float16": (4e-4, 4e-3), "bfloat16": (5e-3, 2e-2)},
        {"float32": (1e-4, 9e-4), "float16": (2e-2, 0.2), "bfloat16": (0.1, 0.9)},
    ),
    "jax": Table(
        "jax",
        "jax-ml/jax jax/_src/public_test_util.py: _default_tolerance (used as both atol and rtol "
        "by JaxTestCase.assertAllClose through np.testing.assert_allclose) for the output, "
        "default_gradient_tolerance (check_grads) for gradients",
        _JAX,
        _JAX_GRAD,
    ),
}


def table_tolerance(table: str, dtype: np.dtype, gradient: bool) -> tuple[float, float]:
    """``(rtol, atol)`` of ``table`` for ``dtype``, or a ``ValueError`` naming what is missing."""
    if table not in TABLES:
        raise ValueError(f"table must be one of {tuple(TABLES)!r}, got {table!r}")
    entries = TABLES[table].backward if gradient else TABLES[table].forward
    name = dtype if isinstance(dtype, str) else np.dtype(dtype).name
    if name not in entries:
        raise ValueError(
            f"table {table!r} has no entry for the candidate's dtype {name} (it lists {', '.join(entries)})"
        )
    return entries[name]


@dataclass(frozen=True)
class RuleSpec:
    """A rule with its settings: ``table`` for "table", ``max_ulps`` for "ulp", and the rule in words."""

    rule: str
    table: str | None
    max_ulps: float
    detail: str


def rule_spec(rule: str, table: str | None, max_ulps) -> RuleSpec:
    """Validate a check's ``rule``, ``table`` and ``max_ulps`` together; fill in the defaults."""
    check_choice("rule", rule, RULES)
    if rule != "table" and table is not None:
        raise ValueError(f"table={table!r} is only used with rule='table', got rule={rule!r}")
    if rule != "ulp" and max_ulps is not None:
        raise ValueError(f"max_ulps={max_ulps!r} is only used with rule='ulp', got rule={rule!r}")
    if rule == "ratio":
        detail = ("FlashAttention's: max|c − o| ≤ 2 × max|b − o| (output), 3 × (gradients), + a rounding-noise "
                  "floor; o the float64 oracle, b refattn's equation path run in the candidate's dtype")
        return RuleSpec(rule, None, 0.0, detail)
    if rule == "table":
        table = DEFAULT_TABLE if table is None else table
        check_choice("table", table, TABLES)
        return RuleSpec(rule, table, 0.0, f"|c − o| ≤ atol + rtol·|o| per element, table {table!r}: "
                                          f"{TABLES[table].source}")
    max_ulps = DEFAULT_MAX_ULPS if max_ulps is None else max_ulps
    if isinstance(max_ulps, bool) or not isinstance(max_ulps, (int, float, np.integer, np.floating)) \
            or not np.isfinite(max_ulps) or max_ulps < 0:
        raise ValueError(f"max_ulps must be a finite number >= 0, got {max_ulps!r}")
    return RuleSpec(rule, None, float(max_ulps), f"|c − o| ≤ {float(max_ulps):g} ulp of the candidate's dtype at "
                                                 "the array's largest |o| (spacing of max|o|)")


OUTPUT_FLOORS = {"float32": 0.25, "float16": 0.125, "bfloat16": 0.125}
"""The ratio rule's floor coefficient :math:`c` for outputs (gradients keep :math:`c = 1`); see :func:`floor_spec`."""


def floor_spec(dtype, gradient: bool = False) -> tuple[float, str]:
    r"""``(c, combine)`` of the ratio rule's floor :math:`c\,\varepsilon \max \kappa` for a candidate dtype.

    ``dtype``: a NumPy float dtype or a format name ("bfloat16" included); ``gradient``: the floor
    of dq, dk, dv rather than of the output.

    float16 and bfloat16: ``combine="rss"``. The errors that matter there are the roundings of
    the weights and outputs, which the baseline makes too (NumPy's float16 matmul accumulates in
    float32, as FlashAttention's kernels do, and the bfloat16 baseline rounds where a bfloat16
    kernel stores); the floor only guards against a *lucky* baseline, so it is the root-sum-square
    of one independent rounding per term (the probabilistic model of Higham & Mary, SIAM J. Sci.
    Comput. 41(5), 2019): a typical error.

    float32: ``combine="abs"``. Here the scores' rounding dominates, and the baseline computes one
    score matrix for its weights and their normaliser, whose rounding errors cancel; an
    implementation that recomputes the scores in another order (every FlashAttention backward pass
    does) does not get that cancellation. The first-order worst case over every term covers it.

    float64: ``(2, "abs")``. The baseline is the oracle itself (error 0), so the floor is the whole
    threshold: the worst case, doubled as the rule doubles the baseline.

    **Outputs** take :math:`c` from :data:`OUTPUT_FLOORS`: 1/4 (float32), 1/8 (float16, bfloat16),
    so that the threshold is FlashAttention's 2× the baseline's error plus a small floor: with
    :math:`c = 1` the floor made up a median 91% (float32) and 73% (float16) of the threshold and
    accepted 10-12× the baseline's error. Measured over 2400 random problems of
    ``python -m refattn bench oracle`` (seeds 1 and 2; mixed shapes, masks, logit scales): an
    independent online softmax in float32 (key blocks in another order) exceeded 2× the baseline's
    error only where the baseline was lucky (a few keys, up to 3.4×) and needed at most 0.10 of the
    :math:`c = 1` floor (so 1/4 leaves a margin of 2.5); in float16 (float32 accumulators) and
    bfloat16 at most 0.003 (so 1/8 leaves more than 40). ``python -m refattn bench oracle`` measures
    the false-rejection and detection rates under these floors.

    **Gradients** keep :math:`c = 1`. Measured on 250 random problems (n < 40, m < 150, d_k ≤ 128,
    logits up to ~100, |v| from 1e-3 to 100): a FlashAttention-2 backward (weights recomputed from
    the log-sum-exp, keys in blocks), float32 accumulators for float16 inputs, used at most 0.29
    (float16) and 0.50 (float32) of the threshold; a float64 blocked forward and backward at most
    0.74, a float64 sequential online softmax over up to 8000 keys at most 0.47. A float16 softmax
    whose sums over keys are accumulated key by key in float16 fails (m = 64 to 1024 keys).
    """
    name = dtype if isinstance(dtype, str) else np.dtype(dtype).name
    if name == "float64":
        return 2.0, "abs"
    return (1.0 if gradient else OUTPUT_FLOORS[name]), ("abs" if name == "float32" else "rss")


def _finite(x: NDArray) -> NDArray:
    """``|x|`` with non-finite entries set to 0 (they are judged separately, never by a tolerance)."""
    x = np.abs(x)
    return np.where(np.isfinite(x), x, 0.0)


def _combine(terms, combine: str) -> NDArray:
    """Σ of the (non-negative) terms, or √Σ of their squares: ``terms`` are (weights, values) matmul pairs."""
    if combine == "abs":
        return sum(w @ x for w, x in terms)
    return np.sqrt(sum((w * w) @ (x * x) for w, x in terms))


def forward_noise(q: NDArray, k: NDArray, v: NDArray, A: NDArray, out: NDArray, bias: NDArray | None,
                  used: NDArray, scale: float, combine: str = "abs") -> tuple[NDArray, NDArray]:
    r"""First-order rounding noise of attention's output, per element, in units of the relative error.

    .. math::

        \sigma_{ij} = |s| \sum_l |q_{il}||k_{jl}| + |B_{ij}|, \qquad
        W_{ij} = A_{ij}\Big(\sigma_{ij} + \sum_l A_{il}\sigma_{il} + 1\Big)

        \kappa^O_{ie} = \sum_j (W_{ij} + A_{ij}) |v_{je}| + \Big(\sum_j W_{ij}\Big) |O_{ie}|

    If every term of every score carries a relative error ε (so the score moves by up to
    :math:`arepsilon\sigma_{ij}`, large logits and cancellation included), every weight and every
    product :math:`A_{ij} v_{je}` one more, the weights move by up to :math:`arepsilon W` and the
    output by up to :math:`arepsilon \kappa^O` to first order (using :math:`|v_j - O_i| \le |v_j|
    + |O_i|`). With ``combine="rss"`` every sum of independent error terms becomes the root of the
    sum of their squares (:math:`\sigma` from :math:`q^2 k^2`, :math:`W` from :math:`\sigma^2`,
    :math:`\kappa` from :math:`W^2 v^2`): the typical size instead of the worst case.

    Parameters
    ----------
    q, k, v : (..., n, d_k), (..., m, d_k), (..., m, d_v) ndarray
        The inputs (float64, broadcast against each other).
    A : (..., n, m) ndarray
        The oracle's weights.
    out : (..., n, d_v) ndarray
        The oracle's output.
    bias : ndarray or None
        The additive float bias, if any.
    used : (..., n, m) ndarray of bool
        Pairs whose weight enters the output.
    scale : float
    combine : {"abs", "rss"}, default "abs"

    Returns
    -------
    kappa_out : (..., n, d_v) ndarray
    W : (..., n, m) ndarray
        The weights' noise, reused by :func:`gradient_noise`.
    """
    check_choice("combine", combine, COMBINES)
    A = np.where(used, _finite(A), 0.0)
    Q, K = _finite(q), _finite(k)
    with np.errstate(invalid="ignore", over="ignore"):
        if combine == "abs":
            sigma = abs(scale) * (Q @ np.swapaxes(K, -1, -2))                  # (..., n, m)  |s|·|Q||K|ᵀ
            sigma = sigma if bias is None else sigma + _finite(bias)
        else:
            sigma = scale * scale * ((Q * Q) @ np.swapaxes(K * K, -1, -2))     # (..., n, m)  s²·Q²K²ᵀ
            sigma = np.sqrt(sigma if bias is None else sigma + _finite(bias) ** 2)
    sigma = np.where(used & np.isfinite(sigma), sigma, 0.0)
    if combine == "abs":
        W = A * (sigma + np.sum(A * sigma, axis=-1, keepdims=True) + 1.0)      # (..., n, m)
        kappa = (W + A) @ _finite(v) + W.sum(axis=-1, keepdims=True) * _finite(out)
    else:
        W = A * np.sqrt(sigma**2 + np.sum((A * sigma) ** 2, axis=-1, keepdims=True) + 1.0)
        V, O = _finite(v), _finite(out)
        kappa = np.sqrt((W * W + A * A) @ (V * V) + np.sum(W * W, axis=-1, keepdims=True) * O * O)
    return kappa, W


def gradient_noise(q: NDArray, k: NDArray, v: NDArray, d_out: NDArray, A: NDArray, out: NDArray,
                   W: NDArray, used: NDArray, scale: float, combine: str = "abs") -> tuple[NDArray, NDArray, NDArray]:
    r"""First-order rounding noise of dq, dk, dv, per element, in units of the relative error.

    .. math::

        G_{ij} = \sum_e |ar O_{ie}||v_{je}| + \sum_e |ar O_{ie}||O_{ie}|, \qquad
        T = (W + 2A) \odot G

        \kappa^{dV} = (W + A)^	op |ar O|, \qquad
        \kappa^{dQ} = |s|\, T |K|, \qquad \kappa^{dK} = |s|\, T^	op |Q|

    with :math:`W` from :func:`forward_noise` (the weights' noise). :math:`G` bounds
    :math:`|ar A_{ij} - \mathrm{rowsum}_i|` and the noise of its two terms, so :math:`T` bounds the
    noise of :math:`ar S = A \odot (ar A - \mathrm{rowsum})` plus one rounding of it. With
    ``combine="rss"``, roots of sums of squares as in :func:`forward_noise`
    (:math:`T = \sqrt{W^2 + 3A^2} \odot G`).

    Returns
    -------
    kappa_dq : (..., n, d_k) ndarray
    kappa_dk : (..., m, d_k) ndarray
        Per broadcast key; sum (``"abs"``) or root-sum-square (``"rss"``) over the axes ``k`` was
        broadcast along to get its own shape.
    kappa_dv : (..., m, d_v) ndarray
    """
    check_choice("combine", combine, COMBINES)
    A = np.where(used, _finite(A), 0.0)
    dO, V, O, Q, K = _finite(d_out), _finite(v), _finite(out), _finite(q), _finite(k)
    if combine == "abs":
        G = dO @ np.swapaxes(V, -1, -2) + np.sum(dO * O, axis=-1, keepdims=True)          # (..., n, m)
        T = np.where(used, (W + 2.0 * A) * G, 0.0)
    else:
        G = np.sqrt((dO * dO) @ np.swapaxes(V * V, -1, -2) + np.sum((dO * O) ** 2, axis=-1, keepdims=True))
        T = np.where(used, np.sqrt(W * W + 3.0 * A * A) * G, 0.0)
    kappa_dv = _combine([(np.swapaxes(W, -1, -2), dO), (np.swapaxes(A, -1, -2), dO)], combine)   # (..., m, d_v)
    kappa_dq = abs(scale) * _combine([(T, K)], combine)                                         # (..., n, d_k)
    kappa_dk = abs(scale) * _combine([(np.swapaxes(T, -1, -2), Q)], combine)                    # (..., m, d_k)
    return kappa_dq, kappa_dk, kappa_dv
