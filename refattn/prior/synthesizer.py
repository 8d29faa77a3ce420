r"""What the two Synthesizers share: their parameters, their logits, and the mixture with dot-product attention.

Tay et al. (2021), "Synthesizer: Rethinking Self-Attention for Transformer Models", ICML, arXiv:2005.00743,
§3 (its subsections "Dense Synthesizer", "Random Synthesizer", "Factorized Models", "Mixture of Synthesizers"):

    dense       B_i = F(X_i) = W₂ σ_R(W₁ X_i + b₁) + b₂ ∈ R^ℓ           one row of logits per token
    fact. dense C_i = H_A(F_A(X_i)) ∗ H_B(F_B(X_i)),  a·b = ℓ            tiled, multiplied entrywise
    random      R ∈ R^{ℓ×ℓ}                                               no input at all
    fact. rand. R = R₁ R₂ᵀ,  R₁, R₂ ∈ R^{ℓ×k}                             rank k
    mixture     Y = softmax(α₁ S₁(X) + … + α_N S_N(X)) G(X)               S: synthesized or dot-product logits

:func:`synthesized_attention` computes the mixture of any of the three logits (dense, random, the scaled dot
product QKᵀ/√d_k) through :func:`~refattn.scaled_dot_product_attention`, the synthesized part as its float
mask, so that a causal mask selects (a masked pair carries weight 0 exactly, whatever its logit).

Lengths: the parameters are made for a maximum length ℓ and sliced, as the official Mesh TensorFlow code
(``mesh_tensorflow/transformer/attention.py``, ``synthetic_attention``) slices its variables: the first m
columns (keys), and for the random logits the rows of the queries' positions (0..n−1; the last n of m
positions with ``causal="bottom-right"``, where the official incremental decoder gathers the row of its
position).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.budget import check_fits
from ..common.checks import as_float, as_rng, causal_alignment, check_scale, checked_qkv, default_scale
from ..common.ints import check_non_negative_int, check_positive_int
from ..core.sdpa import scaled_dot_product_attention
from ..draws import given_or_drawn, note_draw, optional_rng
from ..masks import allowed_pairs

__all__ = [
    "DenseSynthesizer",
    "FactorizedDenseSynthesizer",
    "FactorizedRandomSynthesizer",
    "RandomSynthesizer",
    "dense_logits",
    "init_dense_synthesizer",
    "init_random_synthesizer",
    "random_logits",
]

#: The logits a mixture may add: the two synthesized ones and the scaled dot product QKᵀ·scale.
COMPONENTS = ("dense", "random", "dot")


@dataclass(frozen=True, eq=False)
class DenseSynthesizer:
    r"""The dense synthesizer's two-layer network :math:`F(x) = W_2\,\mathrm{ReLU}(W_1 x + b_1) + b_2`.

    Attributes
    ----------
    W1 : (d, d) ndarray
        First layer (row vectors: ``x @ W1``).
    b1 : (d,) ndarray
    W2 : (d, ℓ) ndarray
        Second layer, to one logit per key position up to the maximum length ℓ.
    b2 : (ℓ,) ndarray
    """

    W1: NDArray
    b1: NDArray
    W2: NDArray
    b2: NDArray

    @property
    def length(self) -> int:
        """ℓ, the maximum key length."""
        return self.W2.shape[1]


@dataclass(frozen=True, eq=False)
class FactorizedDenseSynthesizer:
    r"""The factorised dense synthesizer: :math:`F_A` to a logits, :math:`F_B` to b, tiled to ℓ = a·b.

    Attributes
    ----------
    A : DenseSynthesizer
        :math:`F_A`, of output width a.
    B : DenseSynthesizer
        :math:`F_B`, of output width b.
    """

    A: DenseSynthesizer
    B: DenseSynthesizer

    @property
    def length(self) -> int:
        """ℓ = a·b, the maximum key length."""
        return self.A.length * self.B.length


@dataclass(frozen=True, eq=False)
class RandomSynthesizer:
    """The random synthesizer's logits, one matrix R (ℓ × ℓ): row i holds query position i's logits.

    Attributes
    ----------
    R : (ℓ, ℓ) ndarray
    """

    R: NDArray

    @property
    def length(self) -> int:
        """ℓ, the maximum length."""
        return self.R.shape[0]


@dataclass(frozen=True, eq=False)
class FactorizedRandomSynthesizer:
    """The factorised random synthesizer, R = R1 R2ᵀ of rank k.

    Attributes
    ----------
    R1, R2 : (ℓ, k) ndarray
    """

    R1: NDArray
    R2: NDArray

    @property
    def length(self) -> int:
        """ℓ, the maximum length."""
        return self.R1.shape[0]


def _truncated_normal(rng: np.random.Generator, shape: tuple[int, ...], std: float) -> NDArray:
    """N(0, std²) cut at ±2·std by redrawing, as TensorFlow's ``truncated_normal_initializer``."""
    z = rng.standard_normal(shape)
    out = np.abs(z) > 2.0
    while out.any():
        z[out] = rng.standard_normal(int(out.sum()))
        out = np.abs(z) > 2.0
    return std * z


def _dense_layer_pair(rng: np.random.Generator, d: int, width: int) -> DenseSynthesizer:
    std = 1.0 / np.sqrt(max(1, d))                                 # fan_in = d for both layers
    W1 = _truncated_normal(rng, (d, d), std)
    W2 = _truncated_normal(rng, (d, width), std)
    return DenseSynthesizer(W1=W1, b1=np.zeros(d), W2=W2, b2=np.zeros(width))


def init_dense_synthesizer(rng, d: int, length: int | None = None, *,
                           factors: tuple[int, int] | None = None) -> DenseSynthesizer | FactorizedDenseSynthesizer:
    r"""Draw the dense synthesizer's network, or its factorised form.

    Both layers as ``mtf.layers.dense`` draws a kernel by default (the official ``dense_minus`` mode): a
    truncated normal, :math:`\sigma = 1/\sqrt{\text{fan in}}` = :math:`1/\sqrt d`, cut at :math:`\pm 2\sigma`;
    biases 0 (the official layers have none, which is b = 0 here).

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw.
    d : int
        Width of a token's representation (the queries' d_k in the uniform ``apply``), >= 0.
    length : int, optional
        ℓ, the maximum key length (unfactorised), >= 0.
    factors : (int, int), optional
        (a, b) for the factorised form, ℓ = a·b; exactly one of ``length`` and ``factors``.

    Returns
    -------
    DenseSynthesizer or FactorizedDenseSynthesizer
        Drawn in this order: W1, W2 (of F, or of F_A then F_B).

    Examples
    --------
    >>> p = init_dense_synthesizer(0, 4, 6)
    >>> p.W1.shape, p.W2.shape, p.length
    ((4, 4), (4, 6), 6)
    >>> init_dense_synthesizer(0, 4, factors=(2, 3)).length
    6
    """
    rng = as_rng(rng)
    d = check_non_negative_int("d", d)
    if (length is None) == (factors is None):
        raise ValueError("init_dense_synthesizer needs exactly one of length= (dense) and factors= (factorised)")
    if factors is None:
        return _dense_layer_pair(rng, d, check_non_negative_int("length", length))
    a, b = _factors(factors)
    return FactorizedDenseSynthesizer(A=_dense_layer_pair(rng, d, a), B=_dense_layer_pair(rng, d, b))


def init_random_synthesizer(rng, length: int, *, rank: int | None = None
                            ) -> RandomSynthesizer | FactorizedRandomSynthesizer:
    r"""Draw the random synthesizer's R (ℓ × ℓ), or R1, R2 (ℓ × k) of its factorised form.

    As the official code draws them (``mtf.get_variable`` with no initializer: TensorFlow's Glorot uniform on
    the variable's shape with one head): R of shape (ℓ, heads, ℓ) has fan in ℓ and fan out ℓ², so
    :math:`R_{ij} \sim \mathcal U\big(\pm\sqrt{6/(\ell + \ell^2)}\big)`; R1 and R2, of shape (k, heads, ℓ) there,
    have fan in k and fan out k·ℓ, so :math:`\mathcal U\big(\pm\sqrt{6/(k(1 + \ell))}\big)`. Trainable and
    fixed R (both in the paper) differ only in training; the forward pass is the same.

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw.
    length : int
        ℓ, the maximum length, >= 0.
    rank : int, optional
        k, for the factorised form R = R1 R2ᵀ.

    Returns
    -------
    RandomSynthesizer or FactorizedRandomSynthesizer
        Drawn in this order: R, or R1 then R2.

    Examples
    --------
    >>> init_random_synthesizer(0, 5).R.shape
    (5, 5)
    >>> p = init_random_synthesizer(0, 5, rank=2)
    >>> p.R1.shape, int(np.linalg.matrix_rank(random_logits(p)))
    ((5, 2), 2)
    """
    rng = as_rng(rng)
    L = check_non_negative_int("length", length)
    if rank is None:
        check_fits("the random synthesizer's R", (L, L))
        bound = np.sqrt(6.0 / max(1, L + L * L))
        return RandomSynthesizer(R=rng.uniform(-bound, bound, size=(L, L)))
    k = check_positive_int("rank", rank)
    bound = np.sqrt(6.0 / (k * (1 + L)))
    R1 = rng.uniform(-bound, bound, size=(L, k))
    R2 = rng.uniform(-bound, bound, size=(L, k))
    return FactorizedRandomSynthesizer(R1=R1, R2=R2)


def _factors(factors) -> tuple[int, int]:
    if not isinstance(factors, Sequence) or isinstance(factors, str) or len(factors) != 2:
        raise TypeError(f"factors must be a pair (a, b) of positive ints, got {factors!r}")
    return check_positive_int("factors[0] (a)", factors[0]), check_positive_int("factors[1] (b)", factors[1])


def _check_dense_layers(name: str, p, d: int) -> None:
    if not isinstance(p, DenseSynthesizer):
        raise TypeError(f"{name} must be a DenseSynthesizer, got {type(p).__name__}")
    shapes = tuple(np.shape(x) for x in (p.W1, p.b1, p.W2, p.b2))
    L = shapes[2][1] if len(shapes[2]) == 2 else -1
    if shapes != ((d, d), (d,), (d, L), (L,)):
        raise ValueError(f"{name} must hold W1 (d, d), b1 (d,), W2 (d, ℓ), b2 (ℓ,) with d = {d} (the queries' "
                         f"width), got shapes {shapes}")


def dense_logits(x: ArrayLike, params: DenseSynthesizer | FactorizedDenseSynthesizer) -> NDArray:
    r"""The dense synthesizer's logits for every token, (..., n, ℓ).

    .. math::

        B_i = W_2\,\mathrm{ReLU}(W_1 x_i + b_1) + b_2, \qquad
        C_i = H_A(A_i) \ast H_B(B_i), \quad C_{i,\,p a + r} = (A_i)_r (B_i)_p

    In the factorised form :math:`H_A` tiles :math:`A_i \in \mathbb R^a` b times (``np.tile``) and :math:`H_B`
    repeats each entry of :math:`B_i \in \mathbb R^b` a times (``np.repeat``), so that every product
    :math:`(A_i)_r (B_i)_p` appears once in the row (§3, "Factorized Models": "to avoid having similar values
    within the same block, we compose the outputs of H_A and H_B"): :math:`C_i` reshaped to b × a is the outer product
    :math:`B_i A_i^\top`, rank one. (Tiling both, as some third-party code does, repeats the products
    with period lcm(a, b).)

    Parameters
    ----------
    x : (..., n, d) array_like
        The tokens' representations.
    params : DenseSynthesizer or FactorizedDenseSynthesizer

    Returns
    -------
    (..., n, ℓ) ndarray

    Examples
    --------
    >>> p = init_dense_synthesizer(0, 3, factors=(2, 3))
    >>> C = dense_logits(np.ones((1, 3)), p)[0]
    >>> int(np.linalg.matrix_rank(C.reshape(3, 2)))       # b × a: the outer product of B and A
    1
    """
    x = as_float("x", x, min_ndim=2)
    d = x.shape[-1]
    if isinstance(params, FactorizedDenseSynthesizer):
        _check_dense_layers("params.A", params.A, d)
        _check_dense_layers("params.B", params.B, d)
        A, B = _two_layers(x, params.A), _two_layers(x, params.B)   # (..., n, a), (..., n, b)
        a, b = A.shape[-1], B.shape[-1]
        return np.tile(A, b) * np.repeat(B, a, axis=-1)            # (..., n, a·b)  H_A(A) ∗ H_B(B)
    _check_dense_layers("params", params, d)
    return _two_layers(x, params)


def _two_layers(x: NDArray, p: DenseSynthesizer) -> NDArray:
    with np.errstate(invalid="ignore", over="ignore"):             # NaN/Inf tokens give NaN/Inf rows
        return np.maximum(x @ p.W1 + p.b1, 0.0) @ p.W2 + p.b2      # (..., n, ℓ)  W₂ ReLU(W₁x + b₁) + b₂


def random_logits(params: RandomSynthesizer | FactorizedRandomSynthesizer) -> NDArray:
    """The random synthesizer's logits, R or R1 R2ᵀ, (ℓ, ℓ).

    Parameters
    ----------
    params : RandomSynthesizer or FactorizedRandomSynthesizer

    Returns
    -------
    (ℓ, ℓ) ndarray
    """
    return _random_rows(params, np.arange(_random_length(params)), _random_length(params))


def _random_length(params) -> int:
    """ℓ of checked random-synthesizer parameters (named errors otherwise)."""
    if isinstance(params, FactorizedRandomSynthesizer):
        R1, R2 = as_float("params.R1", params.R1), as_float("params.R2", params.R2)
        if R1.ndim != 2 or R1.shape != R2.shape:
            raise ValueError(f"params.R1 and params.R2 must both be (ℓ, k), got shapes {R1.shape} and {R2.shape}")
        return R1.shape[0]
    if not isinstance(params, RandomSynthesizer):
        raise TypeError(f"params must be a RandomSynthesizer or FactorizedRandomSynthesizer, got "
                        f"{type(params).__name__}")
    R = as_float("params.R", params.R)
    if R.ndim != 2 or R.shape[0] != R.shape[1]:
        raise ValueError(f"params.R must be square (ℓ, ℓ), got shape {R.shape}")
    return R.shape[0]


def _random_rows(params, rows: NDArray, m: int) -> NDArray:
    """Rows ``rows`` of R (or R₁R₂ᵀ), first m columns: (len(rows), m), without forming ℓ × ℓ when factorised."""
    if isinstance(params, FactorizedRandomSynthesizer):
        return np.asarray(params.R1, dtype=np.float64)[rows] @ np.asarray(params.R2, dtype=np.float64)[:m].T
    return np.asarray(params.R, dtype=np.float64)[rows][:, :m]


def query_positions(n: int, m: int, causal) -> NDArray:
    """The positions of the n queries: 0..n−1, or the last n of m positions with ``causal="bottom-right"``."""
    offset = m - n if causal_alignment(causal) == "bottom-right" else 0
    return np.arange(n) + offset


def check_mix(own: str, mix) -> tuple[str, ...]:
    """``mix`` as a tuple of other components (a name or a sequence of names), each once, never ``own``."""
    names = (mix,) if isinstance(mix, str) else mix
    if not isinstance(names, Sequence) or not all(isinstance(c, str) for c in names):
        raise TypeError(f"mix must be a component name or a sequence of them, from {COMPONENTS}, got {mix!r}")
    others = tuple(c for c in COMPONENTS if c != own)
    if any(c not in others for c in names) or len(set(names)) != len(names):
        raise ValueError(f"mix names other components to add to {own!r}, each once, from {others}, got {mix!r}")
    return tuple(names)


def check_alpha(alpha, count: int) -> NDArray:
    """The mixture's weights, ``count`` finite reals (integers are taken as reals); default equal weights 1/count."""
    if alpha is None:
        return np.full(count, 1.0 / count)
    weights = np.asarray(alpha)
    if weights.dtype.kind in "iu":                                 # alpha=(0, 1) means (0.0, 1.0)
        weights = weights.astype(np.float64)
    weights = as_float("alpha", weights)
    if weights.shape != (count,):
        raise ValueError(f"alpha must hold one weight per component ({count}: the synthesizer's, then mix's), "
                         f"got shape {weights.shape}")
    if not np.all(np.isfinite(weights)):
        raise ValueError(f"alpha must be finite, got {alpha!r}")
    return weights


def synthesized_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    dense: DenseSynthesizer | FactorizedDenseSynthesizer | None = None,
    random: RandomSynthesizer | FactorizedRandomSynthesizer | None = None,
    dot: bool = False,
    alpha: ArrayLike,
    causal: bool | str = False,
    scale: float | None = None,
    return_weights: bool = False,
) -> tuple[NDArray, NDArray | None, NDArray | None]:
    r"""Any mixture of dense, random and dot-product logits: :math:`\operatorname{softmax}(\sum_c \alpha_c S_c)\,V`.

    Parameters
    ----------
    q : (..., n, d_k) array_like
        Queries: the dense synthesizer's token representations, and the dot product's queries.
    k : (..., m, d_k) array_like
        Keys (read only by the dot product; m fixes the slice of the synthesized logits).
    v : (..., m, d_v) array_like
        Values, G(X).
    dense, random : parameters, optional
        The synthesized components present.
    dot : bool, default False
        Whether the dot-product logits QKᵀ·scale are a component.
    alpha : (N,) array_like
        One weight per component present, in the order dense, random, dot.
    causal : {False, True, "top-left", "bottom-right"}, default False
        The causal mask, by selection.
    scale : float, optional
        The dot product's multiplier, default :math:`1/\sqrt{d_k}`; only with ``dot``.
    return_weights : bool, default False
        Also return the (..., n, m) weights and the allowed pairs.

    Returns
    -------
    out : (..., n, d_v) ndarray
    weights : (..., n, m) ndarray or None
    allowed : (..., n, m) ndarray of bool or None
        The causal pairs (None when not causal), when ``return_weights``.
    """
    q, k, v, batch = checked_qkv(q, k, v)
    n, m = q.shape[-2], k.shape[-2]
    causal_alignment(causal)                                       # checked before any shape is used
    check_fits("the synthesized logits", (*batch, n, m))           # n × m by definition: no streamed form
    weights = iter(alpha)
    bias = np.zeros((n, m))
    if dense is not None:
        B = dense_logits(q, dense)                                 # (..., n, ℓ)
        if B.shape[-1] < m:
            raise ValueError(f"the dense synthesizer's params have maximum length ℓ = {B.shape[-1]} < m = {m} "
                             "keys (draw them for a longer max_length)")
        with np.errstate(invalid="ignore", over="ignore"):
            bias = bias + next(weights) * B[..., :m]               # (..., n, m)  α_D B, first m key positions
    if random is not None:
        L = _random_length(random)
        rows = query_positions(n, m, causal)
        need = max(m, int(rows.max()) + 1 if n else 0)
        if L < need:
            raise ValueError(f"the random synthesizer's params have maximum length ℓ = {L}, but n = {n} queries "
                             f"at positions up to {need - 1} and m = {m} keys need ℓ >= {need}")
        R_nm = _random_rows(random, np.maximum(rows, 0), m)        # (n, m); rows before position 0 are masked
        bias = bias + next(weights) * R_nm                         # α_R R, rows of the queries' positions
    if dot:
        scale = default_scale(q.shape[-1]) if scale is None else check_scale(scale)
        scale = next(weights) * scale                              # α_V QKᵀ·scale
    else:
        if scale is not None:
            raise ValueError("scale multiplies the dot-product logits: mix has no 'dot'")
        q, k, scale = q[..., :0], k[..., :0], 1.0                  # no dot product: scores 0 + the synthesized bias
    if not return_weights:
        out = scaled_dot_product_attention(q, k, v, bias, causal=causal, scale=scale)
        return out, None, None
    out, A = scaled_dot_product_attention(q, k, v, bias, causal=causal, scale=scale, return_weights=True)
    return out, A, allowed_pairs(None, causal, A.shape)


def run_synthesizer(own: str, q, k, v, *, params, other_params, rng, max_length, factors, rank, mix, alpha,
                    causal, scale, return_weights) -> NDArray | tuple[NDArray, NDArray]:
    """The synthesizers' shared body: check, draw what is missing, attend; ``out`` or ``(out, weights)``.

    ``own`` is "dense" or "random"; ``other_params`` are the parameters of the other synthesizer when ``mix``
    names it (else None). Parameters not given are drawn from ``rng`` (:func:`refattn.draws.given_or_drawn`),
    own first, for ℓ = ``max_length``, default the smallest that fits (dense: m; random: m and the queries' last
    position + 1), or ℓ = a·b with ``factors``.
    """
    q, k, v, _ = checked_qkv(q, k, v)
    n, m, d = q.shape[-2], k.shape[-2], q.shape[-1]
    causal_alignment(causal)                                       # checked before any shape is used
    mix = check_mix(own, mix)
    other = next((c for c in mix if c != "dot"), None)
    alpha = check_alpha(alpha, 1 + len(mix))
    if max_length is not None:
        max_length = check_non_negative_int("max_length", max_length)
    if factors is not None:
        factors = _factors(factors)
    if rank is not None:
        rank = check_positive_int("rank", rank)
    if other is None and other_params is not None:
        raise ValueError(f"{_other_params(own)} is given but mix={mix!r} names no {_other(own)!r} component")
    rng = optional_rng(rng)
    rows = query_positions(n, m, causal)
    last = int(rows.max()) + 1 if n else 0
    dense_length = None if factors else m if max_length is None else max_length
    random_length = max(m, last) if max_length is None else max_length
    draw = {"dense": lambda r: init_dense_synthesizer(r, d, dense_length, factors=factors),
            "random": lambda r: init_random_synthesizer(r, random_length, rank=rank)}
    by = f"synthesizer_{own}"
    params = given_or_drawn(by, "params", params, rng, draw[own], what=f"the {own} synthesizer's parameters")
    if other is None:
        note_draw(_other_params(own), None)
    else:
        other_params = given_or_drawn(by, _other_params(own), other_params, rng, draw[other],
                                      what=f"the {other} synthesizer's parameters")
    by_name = {own: params, other: other_params}
    out, weights, _ = synthesized_attention(q, k, v, dense=by_name.get("dense"), random=by_name.get("random"),
                                            dot="dot" in mix, alpha=_in_component_order(own, mix, alpha),
                                            causal=causal, scale=scale, return_weights=return_weights)
    return (out, weights) if return_weights else out


def _other(own: str) -> str:
    """The other synthesizer."""
    return "random" if own == "dense" else "dense"


def _other_params(own: str) -> str:
    """The option naming the other synthesizer's parameters: "random_params" or "dense_params"."""
    return f"{_other(own)}_params"


def _in_component_order(own: str, mix: tuple[str, ...], alpha: NDArray) -> NDArray:
    """alpha (own first, then mix's order) reordered to :func:`synthesized_attention`'s: dense, random, dot."""
    given = dict(zip((own, *mix), alpha, strict=True))
    return np.array([given[c] for c in COMPONENTS if c in given])
