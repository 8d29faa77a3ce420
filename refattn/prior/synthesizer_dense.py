r"""Dense Synthesizer: attention logits synthesized from each token alone (Tay et al., 2021, §3; survey §4.5.4).

    B_i = F(X_i) = W₂ σ_R(W₁ X_i + b₁) + b₂ ∈ R^ℓ     one row of logits per token, no key in it  ("Dense Synthesizer")
    Y = softmax(B) G(X)                                G(X) = the values V in the uniform apply
    factorised: C_i = H_A(F_A(X_i)) ∗ H_B(F_B(X_i)),  a·b = ℓ                                   ("Factorized Models")
    mixture:    Y = softmax(α₁ S₁(X) + … + α_N S_N(X)) G(X)       ("Mixture of Synthesizers"; D+V, R+D in the tables)

Query i's weights over the keys come from its own representation only: no query-key dot product. Key
position j is the j-th output of F, so F is made for a maximum length ℓ and its first m outputs are used
(the official Mesh TensorFlow code slices its (d, ℓ_max) layer to the keys' length the same way).

Sources of the defaults (the paper gives the form, the official code ``mesh_tensorflow/transformer/attention.py``
``synthetic_attention`` the rest):

- Initialisation: W₁, W₂ as ``mtf.layers.dense`` draws by default (truncated normal, σ = 1/√d, cut at ±2σ);
  b₁ = b₂ = 0. The official ``dense_minus`` mode has no biases and no W₁ of its own: it applies the ReLU to the
  head's projected query, ``W₂ ReLU(W_Q x)``, which is this F with W₁ = W_Q and b = 0.
- The token's representation X_i: the queries q_i in the uniform ``apply`` (the official code reads the
  projected queries too).
- Mixture weights: the paper's α (Σα = 1, learned). The official ``dense_plus_alpha`` mode learns one scalar a
  initialised 0 and uses (1 − σ(a))·QKᵀ + σ(a)·B: equal weights ½, ½ at initialisation (the default here:
  1/N each); ``dense_plus`` adds them with weights 1, 1 (``alpha=(1, 1)``).
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

__all__ = ["synthesizer_dense_attention"]

SYNTHESIZER = ('Y. Tay, D. Bahri, D. Metzler, D.-C. Juan, Z. Zhao, C. Zheng, 2021, "Synthesizer: Rethinking '
               'Self-Attention for Transformer Models", ICML, arXiv:2005.00743')


def synthesizer_dense_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    params: DenseSynthesizer | FactorizedDenseSynthesizer | None = None,
    rng: np.random.Generator | int | None = None,
    max_length: int | None = None,
    factors: tuple[int, int] | None = None,
    mix: str | tuple[str, ...] = (),
    random_params: RandomSynthesizer | FactorizedRandomSynthesizer | None = None,
    rank: int | None = None,
    alpha: ArrayLike | None = None,
    causal: bool | str = False,
    scale: float | None = None,
    return_weights: bool = False,
) -> NDArray | tuple[NDArray, NDArray]:
    r"""The dense synthesizer: each query's logits over the key positions from its own representation.

    .. math::

        B_i = W_2\,\mathrm{ReLU}(W_1 q_i + b_1) + b_2, \qquad
        Y = \operatorname{softmax}\Big(\alpha_D B_{:, :m} + \alpha_R R + \alpha_V \frac{QK^\top}{\sqrt{d_k}}\Big) V

    (the last two terms only when ``mix`` names them).

    Parameters
    ----------
    q : (..., n, d) array_like
        Queries: the tokens' representations :math:`X_i` that F reads (and the dot product's queries).
    k : (..., m, d) array_like
        Keys: only their number m is read, unless ``mix`` has "dot".
    v : (..., m, d_v) array_like
        Values, :math:`G(X)`.
    params : DenseSynthesizer or FactorizedDenseSynthesizer, optional
        F (:func:`~refattn.prior.init_dense_synthesizer`), of maximum length ℓ >= m; drawn from ``rng`` when
        absent.
    rng : numpy.random.Generator or int, optional
        Source of the parameters not given (own first); unused when every one is given.
    max_length : int, optional
        ℓ of drawn parameters (unfactorised F, and R when mixed); default the smallest that fits (m; R: also
        the queries' last position + 1).
    factors : (int, int), optional
        (a, b): draw the factorised F, ℓ = a·b >= m.
    mix : str or tuple of str, default ()
        Components added to B: "dot" (D+V, the scaled dot product), "random" (R+D), or both.
    random_params : RandomSynthesizer or FactorizedRandomSynthesizer, optional
        R, with "random" in ``mix``; drawn from ``rng`` when absent.
    rank : int, optional
        k: draw the factorised R = R₁R₂ᵀ.
    alpha : (N,) array_like, optional
        The mixture's weights, B's first, then ``mix``'s in its order; default 1/N each (N = 1 + len(mix)).
    causal : {False, True, "top-left", "bottom-right"}, default False
        The causal mask, by selection: query i sees keys j <= i (bottom-right: the last n of m positions).
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
    **Exact limit.** ``mix="dot", alpha=(0, 1)`` is softmax attention (the synthesized logits weigh 0).
    Without the dot product, a NaN or Inf key changes nothing (keys are not read); m still sets the slice.
    Time O(n·d·(d + ℓ)) for F and O(n·m·d_v) for the output; memory O(n·ℓ) for the logits.

    References
    ----------
    .. [1] Y. Tay et al., "Synthesizer: Rethinking Self-Attention for Transformer Models", ICML 2021,
       arXiv:2005.00743, §3: "Dense Synthesizer", "Factorized Models", "Mixture of Synthesizers".
    .. [2] tensorflow/mesh, ``mesh_tensorflow/transformer/attention.py`` (``synthetic_attention``,
       modes ``dense_minus``, ``dense_plus``, ``dense_plus_alpha``).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 5, 4))
    >>> out, A = synthesizer_dense_attention(q, k, v, rng=1, return_weights=True)
    >>> out.shape, bool(np.allclose(A.sum(axis=-1), 1.0)), bool(np.allclose(A @ v, out))
    ((5, 4), True, True)
    >>> import refattn as ra
    >>> exact = synthesizer_dense_attention(q, k, v, rng=1, mix="dot", alpha=(0.0, 1.0))
    >>> bool(np.allclose(exact, ra.scaled_dot_product_attention(q, k, v)))
    True
    """
    return run_synthesizer(
        "dense", q, k, v, params=params, other_params=random_params, rng=rng, max_length=max_length,
        factors=factors, rank=rank, mix=mix, alpha=alpha, causal=causal, scale=scale,
        return_weights=return_weights)


RECORD = Mechanism.of(
    synthesizer_dense_attention,
    id="synthesizer_dense", title="Dense Synthesizer", family="prior", section="4.5.4", paper=SYNTHESIZER,
    equation=r"\operatorname{softmax}\big(W_2\,\mathrm{ReLU}(W_1 X + b_1) + b_2\big)\, G(X)",
    time="O(n·d·(d + ℓ) + n·m·d_v)", memory="O(n·ℓ)", kind="attention",
    causal=True,
    examples=({"factors": (2, 4)}, {"mix": "dot"}, {"mix": ("random", "dot"), "alpha": (0.5, 0.25, 0.25)},
              {"max_length": 9}),
    figure="refattn.figures.synthesizer_dense:synthesizer_dense",
    exact_options={"mix": "dot", "alpha": (0.0, 1.0)},
    exact_limit='mix="dot", alpha=(0, 1): all weight on the dot product',
    draws=("params", "random_params"),
)
