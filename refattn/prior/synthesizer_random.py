r"""Random Synthesizer: attention logits that depend on no input (Tay et al., 2021, §3; survey §4.5.4).

    Y = softmax(R) G(X),  R ∈ R^{ℓ×ℓ}     row i: position i's logits over the key positions  ("Random Synthesizer")
    factorised: R = R₁ R₂ᵀ,  R₁, R₂ ∈ R^{ℓ×k},  rank k                                          ("Factorized Models")
    mixture:    Y = softmax(α₁ S₁(X) + … + α_N S_N(X)) G(X)       ("Mixture of Synthesizers"; R+V, R+D in the tables)

R is a parameter, trainable ("Random") or kept at its initial draw ("Fixed Random"): both are in the paper, and
the forward pass is the same. R = 0 is uniform attention. The weights depend on positions only, so permuting
the queries does not permute the outputs.

Sources of the defaults (the paper gives the form, the official code ``mesh_tensorflow/transformer/attention.py``
``synthetic_attention`` the rest):

- Lengths: R is made for a maximum length ℓ and sliced: rows at the queries' positions, the first m columns
  (the official ``random`` mode slices its (ℓ_max, heads, ℓ_max) variable to the lengths, and its incremental
  decoder gathers the row of the current position: ``causal="bottom-right"`` here).
- Initialisation: TensorFlow's Glorot uniform on the official variable's shape (:func:`init_random_synthesizer`).
- Factorised: the paper's R₁R₂ᵀ. The official ``factorized`` mode declares R₁ and R₂ both of shape
  (k, heads, 512) along the keys' axis and contracts them over k into the (length, heads, memory length)
  logits; as ``mtf.einsum`` is documented (broadcast, multiply, sum out what the output lacks) that gives every
  query row the same logits, not R₁R₂ᵀ. refattn follows the paper.
- Mixture weights: the paper's α (Σα = 1, learned). The official ``random_plus_alpha`` mode learns one scalar a
  initialised 0 and uses (1 − σ(a))·QKᵀ + σ(a)·R: equal weights ½, ½ at initialisation (the default here: 1/N
  each); ``random_plus`` adds them with weights 1, 1 (``alpha=(1, 1)``).
- Causal: the decoder masks the synthesized logits like any others (its attention bias), by selection here.
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..mechanism import Mechanism
from .synthesizer import (
    DenseSynthesizer,
    FactorizedDenseSynthesizer,
    FactorizedRandomSynthesizer,
    RandomSynthesizer,
    run_synthesizer,
)
from .synthesizer_dense import SYNTHESIZER

__all__ = ["synthesizer_random_attention"]


def synthesizer_random_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    params: RandomSynthesizer | FactorizedRandomSynthesizer | None = None,
    rng: np.random.Generator | int | None = None,
    max_length: int | None = None,
    rank: int | None = None,
    mix: str | tuple[str, ...] = (),
    dense_params: DenseSynthesizer | FactorizedDenseSynthesizer | None = None,
    factors: tuple[int, int] | None = None,
    alpha: ArrayLike | None = None,
    causal: bool | str = False,
    scale: float | None = None,
    return_weights: bool = False,
) -> NDArray | tuple[NDArray, NDArray]:
    r"""The random synthesizer: the same learned logits R for every input.

    .. math::

        Y = \operatorname{softmax}\Big(\alpha_R R_{P, :m} + \alpha_D B + \alpha_V \frac{QK^\top}{\sqrt{d_k}}\Big)
        V, \qquad P = \text{the queries' positions}

    (the last two terms only when ``mix`` names them).

    Parameters
    ----------
    q : (..., n, d) array_like
        Queries: only their number n is read, unless ``mix`` has "dot" or "dense".
    k : (..., m, d) array_like
        Keys: only their number m is read, unless ``mix`` has "dot".
    v : (..., m, d_v) array_like
        Values, :math:`G(X)`.
    params : RandomSynthesizer or FactorizedRandomSynthesizer, optional
        R (:func:`~refattn.prior.init_random_synthesizer`), of maximum length ℓ covering the queries' positions
        and the m keys; drawn from ``rng`` when absent.
    rng : numpy.random.Generator or int, optional
        Source of the parameters not given (own first); unused when every one is given.
    max_length : int, optional
        ℓ of drawn parameters; default the smallest that fits (R: m and the queries' last position + 1; F: m).
    rank : int, optional
        k: draw the factorised R = R₁R₂ᵀ.
    mix : str or tuple of str, default ()
        Components added to R: "dot" (R+V, the scaled dot product), "dense" (R+D), or both.
    dense_params : DenseSynthesizer or FactorizedDenseSynthesizer, optional
        F, with "dense" in ``mix``; drawn from ``rng`` when absent.
    factors : (int, int), optional
        (a, b): draw the factorised F, ℓ = a·b >= m.
    alpha : (N,) array_like, optional
        The mixture's weights, R's first, then ``mix``'s in its order; default 1/N each (N = 1 + len(mix)).
    causal : {False, True, "top-left", "bottom-right"}, default False
        The causal mask, by selection: query i sees keys j <= i (bottom-right: the last n of m positions, and
        row m − n + i of R).
    scale : float, optional
        The dot product's multiplier (with "dot" in ``mix``), default :math:`1/\sqrt{d_k}`.
    return_weights : bool, default False
        Also return the (..., n, m) weights.

    Returns
    -------
    out : (..., n, d_v) ndarray
    weights : (..., n, m) ndarray
        Only if ``return_weights``.

    Notes
    -----
    **Limits.** R = 0 is uniform attention over the keys each query may see (the causal running mean);
    ``mix="dot", alpha=(0, 1)`` is softmax attention. Time O(n·m·d_v) (and O(ℓ²·k) for R₁R₂ᵀ); memory O(ℓ²).

    References
    ----------
    .. [1] Y. Tay et al., "Synthesizer: Rethinking Self-Attention for Transformer Models", ICML 2021,
       arXiv:2005.00743, §3: "Random Synthesizer", "Factorized Models", "Mixture of Synthesizers".
    .. [2] tensorflow/mesh, ``mesh_tensorflow/transformer/attention.py`` (``synthetic_attention``,
       modes ``random``, ``factorized``, ``random_plus``, ``random_plus_alpha``).

    Examples
    --------
    >>> from refattn.prior import RandomSynthesizer
    >>> v = np.array([[2.0], [4.0], [9.0]])
    >>> zero = RandomSynthesizer(R=np.zeros((3, 3)))
    >>> synthesizer_random_attention(v, v, v, params=zero, causal=True)[:, 0]    # running means 2, 3, 5
    array([2., 3., 5.])
    """
    return run_synthesizer(
        "random", q, k, v, params=params, other_params=dense_params, rng=rng, max_length=max_length,
        factors=factors, rank=rank, mix=mix, alpha=alpha, causal=causal, scale=scale,
        return_weights=return_weights)


RECORD = Mechanism.of(
    synthesizer_random_attention,
    id="synthesizer_random", title="Random Synthesizer", family="prior", section="4.5.4", paper=SYNTHESIZER,
    equation=r"\operatorname{softmax}(R)\, G(X),\quad R \in \mathbb{R}^{\ell \times \ell}",
    time="O(n·m·d_v)", memory="O(ℓ²)", kind="attention",
    causal=True, position_dependent=True,
    examples=({"rank": 2}, {"mix": "dot"}, {"mix": ("dense", "dot"), "alpha": (0.5, 0.25, 0.25)},
              {"max_length": 10}),
    figure="refattn.figures.synthesizer_random:synthesizer_random",
    exact_options={"mix": "dot", "alpha": (0.0, 1.0)},
    exact_limit='mix="dot", alpha=(0, 1): all weight on the dot product (R = 0 alone is uniform attention)',
    draws=("params", "dense_params"),
)
