r"""Average Attention Network (Zhang, Xiong, Su, 2018; survey §4.5.4): a cumulative average in place of self-attention.

The decoder's self-attention sub-layer is replaced by a fixed, uniform distribution over the past:

    g_j = (1/j) Σ_{k ≤ j} y_k                          Eq. (1), the cumulative average (positions from 1)
    g̃_j = FFN(g_j) = max(0, g_j W₁ + b₁) W₂ + b₂       Eq. (1), the feed-forward layer
    i_j, f_j = σ([y_j; g̃_j] W + b)                     Eq. (2), input and forget gates (2d → 2 × d)
    h̃_j = i_j ⊙ y_j + f_j ⊙ g̃_j                        Eq. (2)
    h_j = LayerNorm(y_j + h̃_j)                          Eq. (3), residual connection and layer norm

Its attention matrix is fixed by positions alone (no query or key enters it): the paper's mask
matrix M with M_jk = 1/j on k ≤ j, so that G = M Y. Three forms compute the average:

- the parallel form, G = M Y (the paper's training form; :func:`average_weights` builds M);
- the recurrent form, s_j = s_{j−1} + y_j, g_j = s_j / j (the paper's decoding: a running sum and a
  count, O(d) state per layer; :func:`average_attention_step`);
- the Numba scan of that recurrence over a whole sequence (``method="scan"``, O(n·d) time and
  O(d) state, nothing n × n).

:func:`average_attention` is the averaging core as attention over (q, k, v): uniform weights over
the keys each query may see (causal: 1/(i + 1) on j ≤ i; non-causal: 1/m; bottom-right: the n queries
are the last n of m positions). :func:`average_attention_layer` is the whole sub-layer, with its
parameters from :func:`init_average_attention`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.budget import check_fits
from ..common.checks import as_float, as_rng, causal_alignment, check_bool, check_choice, checked_qkv
from ..common.init import glorot
from ..common.ints import check_positive_int
from ..common.products import weighted_values
from ..core.ffn import FeedForwardParams, feed_forward
from ..core.layer_norm import LayerNormParams, layer_norm
from ..kernels import kernel_rows
from ..mechanism import Mechanism

__all__ = ["AverageAttentionParams", "AverageAttentionState", "average_attention", "average_attention_decode",
           "average_attention_layer", "average_attention_step", "average_weights", "init_average_attention"]

ZHANG = ('B. Zhang, D. Xiong, J. Su, 2018, "Accelerating Neural Transformer via an Average Attention Network", '
         'ACL 2018, arXiv:1805.00631')
METHODS = ("equation", "scan", "auto")
LAYER_NORM_EPS = 1e-6                                              # the official code's layer norm (THUMT)


# --- the averaging core ------------------------------------------------------------------------------

def average_weights(n: int, m: int, causal: bool | str = True) -> tuple[NDArray, NDArray]:
    r"""The paper's mask matrix: uniform weights over the keys each query may see.

    .. math::

        M_{ij} = \frac{1}{|J_i|} \text{ for } j \in J_i, \quad 0 \text{ otherwise}, \qquad
        J_i = \{j : j \le i\} \text{ (causal)}, \ \{0, \dots, m - 1\} \text{ (not)}

    Parameters
    ----------
    n, m : int
        Number of queries and keys.
    causal : {False, True, "top-left", "bottom-right"}, default True
        Which keys each query averages (bottom-right: ``j <= i + m − n``).

    Returns
    -------
    A : (n, m) ndarray
        M; a row that sees no key is 0.
    seen : (n, m) ndarray of bool
        The pairs in :math:`J_i`.

    Examples
    --------
    >>> average_weights(3, 3)[0]
    array([[1.        , 0.        , 0.        ],
           [0.5       , 0.5       , 0.        ],
           [0.33333333, 0.33333333, 0.33333333]])
    """
    alignment = causal_alignment(causal)
    delta = _delta(n, m, alignment)
    seen = np.arange(m) <= np.arange(n)[:, None] + delta           # (n, m)  j ≤ i + δ
    counts = seen.sum(axis=-1, keepdims=True)                      # (n, 1)  |J_i|
    return np.where(seen, 1.0 / np.maximum(counts, 1), 0.0), seen  # (n, m)  1/|J_i| on J_i


def _delta(n: int, m: int, alignment: str | None) -> int:
    """Query i sees keys j <= i + δ."""
    if alignment is None:
        return m                                                   # every key
    return m - n if alignment == "bottom-right" else 0


def average_attention(q: ArrayLike, k: ArrayLike, v: ArrayLike, *, causal: bool | str = True, method: str = "auto",
                      return_weights: bool = False) -> NDArray | tuple[NDArray, NDArray]:
    r"""The average of the values each query may see: attention with fixed, uniform weights.

    .. math::

        g_i = \frac{1}{|J_i|} \sum_{j \in J_i} v_j, \qquad J_i = \{ j : j \le i \} \text{ (causal)}

    This is softmax attention whose scores are all equal (q = 0): the averaging core of the
    Average Attention Network, Eq. (1) of the paper without its feed-forward layer.

    Parameters
    ----------
    q : (..., n, d_k) array_like
        Queries (only their number n enters).
    k : (..., m, d_k) array_like
        Keys (only their number m enters).
    v : (..., m, d_v) array_like
        Values.
    causal : {False, True, "top-left", "bottom-right"}, default True
        Which keys each query averages: all of them (False), ``j <= i`` (True, the paper's decoder),
        ``j <= i + m − n`` (the n queries are the last n of m positions). A query that sees no key
        gets a zero row.
    method : {"equation", "scan", "auto"}, default "auto"
        "equation": the paper's mask matrix times V (n × m). "scan": the running sum and count in
        Numba, O(d_v) state, nothing n × m. "auto": "scan" (the average never needs the matrix).
        The weights, when asked for, are the matrix whatever the method.
    return_weights : bool, default False
        Also return the (n, m) weights.

    Returns
    -------
    out : (..., n, d_v) ndarray
    weights : (..., n, m) ndarray
        Only if ``return_weights``: one (n, m) matrix for every batch index (a read-only broadcast view).

    References
    ----------
    .. [1] B. Zhang, D. Xiong, J. Su, "Accelerating Neural Transformer via an Average Attention Network",
       ACL 2018, arXiv:1805.00631, Eq. (1) and §3 (the mask matrix and the decoding form).

    Examples
    --------
    >>> v = np.array([[2.0], [4.0], [9.0]])
    >>> average_attention(v, v, v)[:, 0]                  # 2, (2 + 4)/2, (2 + 4 + 9)/3
    array([2., 3., 5.])
    >>> average_attention(v, v, v, causal=False, method="equation")[:, 0]
    array([5., 5., 5.])
    """
    check_choice("method", method, METHODS)
    return_weights = check_bool("return_weights", return_weights)
    q, k, v, batch = checked_qkv(q, k, v)
    alignment = causal_alignment(causal)
    n, m = q.shape[-2], k.shape[-2]
    if return_weights or method == "equation":
        check_fits("the weights (return_weights=True)" if return_weights else "the mask matrix (method='equation')",
                   (n, m))
        A, seen = average_weights(n, m, alignment or False)
    if method == "equation":
        empty = ~seen.any(axis=-1, keepdims=True)                  # (n, 1)  rows that see no key
        out = weighted_values(np.broadcast_to(A, (*batch, n, m)), v, seen, empty, "zero")  # (..., n, d_v)  M V
    else:
        out = _scan(v, batch, n, _delta(n, m, alignment))
    return (out, np.broadcast_to(A, (*batch, n, m))) if return_weights else out


def _scan(v: NDArray, batch: tuple[int, ...], n: int, delta: int) -> NDArray:
    from ..kernels.cumulative_average import cumulative_average_scan  # Numba loads on first use only

    m, d_v = v.shape[-2:]
    flat = kernel_rows(v, batch, (m, d_v))                         # (B, m, d_v)
    out = np.empty((flat.shape[0], n, d_v))
    with np.errstate(invalid="ignore", over="ignore"):             # inf − inf in a running sum: IEEE NaN
        cumulative_average_scan(flat, delta, out)
    return out.reshape(*batch, n, d_v)


# --- the whole sub-layer ------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class AverageAttentionParams:
    r"""The AAN sub-layer's parameters; weights act on the right (``x @ w``).

    Attributes
    ----------
    ffn : FeedForwardParams
        :math:`W_1` (d, d_ff), :math:`b_1`, :math:`W_2` (d_ff, d), :math:`b_2` of Eq. (1)'s FFN.
    w_gate : (2 d, 2 d) ndarray
        W of Eq. (2): ``[y; g̃] @ w_gate`` gives the input gate's logits (first d columns) and the
        forget gate's (last d), as the official code's one ``z_project`` matrix.
    b_gate : (2 d,) ndarray
        The gates' bias (the official code has one; the paper's Eq. (2) writes none).
    norm : LayerNormParams
        γ, β of Eq. (3)'s layer norm.
    """

    ffn: FeedForwardParams
    w_gate: NDArray
    b_gate: NDArray
    norm: LayerNormParams

    def __post_init__(self) -> None:
        if not isinstance(self.ffn, FeedForwardParams):
            raise TypeError(f"ffn must be a FeedForwardParams, got {type(self.ffn).__name__}")
        if not isinstance(self.norm, LayerNormParams):
            raise TypeError(f"norm must be a LayerNormParams, got {type(self.norm).__name__}")
        d = self.ffn.w_1.shape[0]
        for name, shape in (("w_gate", (2 * d, 2 * d)), ("b_gate", (2 * d,))):
            value = as_float(name, getattr(self, name))
            if value.shape != shape:
                raise ValueError(f"{name} must have shape {shape} for d_model={d} (ffn.w_1 {self.ffn.w_1.shape}), "
                                 f"got shape {value.shape}")
            object.__setattr__(self, name, value)
        for name in ("gamma", "beta"):
            if np.shape(getattr(self.norm, name)) != (d,):
                raise ValueError(f"norm.{name} must have shape ({d},) for d_model={d}, "
                                 f"got shape {np.shape(getattr(self.norm, name))}")

    @property
    def d_model(self) -> int:
        """d, the width of the sub-layer's input and output."""
        return self.ffn.w_1.shape[0]


def init_average_attention(rng, d_model: int, d_ff: int) -> AverageAttentionParams:
    r"""Draw the AAN sub-layer's parameters as the official code initialises them.

    The official code (THUMT, ``initializer="uniform_unit_scaling"``, gain 1) draws every variable
    from TensorFlow's variance-scaling initialiser, fan_avg, uniform: a matrix from
    :math:`\mathcal{U}(\pm\sqrt{6/(\text{fan}_\text{in} + \text{fan}_\text{out})})` (Glorot), and a
    bias vector of size s, whose fans are both s there, from :math:`\mathcal{U}(\pm\sqrt{3/s})`. The
    layer norm starts at γ = 1, β = 0. The paper states no initialisation.

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw, in the order W₁, b₁, W₂, b₂, W, b.
    d_model : int
        d, the model width (512 in the paper).
    d_ff : int
        The FFN's inner width (the official code's ``filter_size``, 2048).

    Returns
    -------
    AverageAttentionParams

    Examples
    --------
    >>> params = init_average_attention(0, 4, 8)
    >>> params.ffn.w_1.shape, params.w_gate.shape
    ((4, 8), (8, 8))
    """
    rng = as_rng(rng)
    d, d_ff = check_positive_int("d_model", d_model), check_positive_int("d_ff", d_ff)

    def bias(size):
        return rng.uniform(-np.sqrt(3.0 / size), np.sqrt(3.0 / size), size=size)

    w_1 = glorot(rng, d, d_ff)
    b_1 = bias(d_ff)
    w_2 = glorot(rng, d_ff, d)
    b_2 = bias(d)
    ffn = FeedForwardParams(w_1, b_1, w_2, b_2)
    w_gate = glorot(rng, 2 * d, 2 * d)
    return AverageAttentionParams(ffn, w_gate, bias(2 * d), LayerNormParams(np.ones(d), np.zeros(d)))


def _check_layer_input(y, params) -> NDArray:
    if not isinstance(params, AverageAttentionParams):
        raise TypeError(f"params must be an AverageAttentionParams (init_average_attention), "
                        f"got {type(params).__name__}")
    y = as_float("y", y, min_ndim=1)
    if y.shape[-1] != params.d_model:
        raise ValueError(f"y has d_model={y.shape[-1]} (shape {y.shape}) but params have d_model={params.d_model}")
    return y


def _sigmoid(x: NDArray) -> NDArray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))                          # σ(x), without overflow for large |x|


def _gated(y: NDArray, g: NDArray, params: AverageAttentionParams, use_ffn: bool) -> tuple[NDArray, NDArray, NDArray]:
    """Eqs. (1)-(3) after the average: (h, i, f) at each position."""
    d = params.d_model
    g_tilde = feed_forward(g, params.ffn) if use_ffn else g        # (..., d)  g̃ = FFN(g)
    z = np.concatenate([y, g_tilde], axis=-1) @ params.w_gate + params.b_gate   # (..., 2d)  [y; g̃] W + b
    i, f = _sigmoid(z[..., :d]), _sigmoid(z[..., d:])              # (..., d), (..., d)  input, forget gates
    h_tilde = i * y + f * g_tilde                                  # (..., d)  i ⊙ y + f ⊙ g̃
    h = layer_norm(y + h_tilde, params.norm.gamma, params.norm.beta, eps=LAYER_NORM_EPS)  # LayerNorm(y + h̃)
    return h, i, f


def average_attention_layer(y: ArrayLike, params: AverageAttentionParams, *, use_ffn: bool = True,
                            method: str = "auto", return_gates: bool = False
                            ) -> NDArray | tuple[NDArray, NDArray, NDArray]:
    r"""The Average Attention Network sub-layer in its parallel (training) form.

    .. math::

        g_j = \frac{1}{j} \sum_{k \le j} y_k, \quad \tilde g_j = \operatorname{FFN}(g_j), \quad
        i_j, f_j = \sigma([y_j; \tilde g_j] W + b), \quad
        h_j = \operatorname{LayerNorm}(y_j + i_j \odot y_j + f_j \odot \tilde g_j)

    Parameters
    ----------
    y : (..., n, d) array_like
        The sub-layer's input (the decoder's embeddings or the previous layer's output).
    params : AverageAttentionParams
        From :func:`init_average_attention`.
    use_ffn : bool, default True
        Apply Eq. (1)'s FFN to the average (the paper). The official code's default is
        ``use_ffn=False``: its README reports the FFN redundant and recommends leaving it out.
    method : {"equation", "scan", "auto"}, default "auto"
        How the cumulative average runs (:func:`average_attention`).
    return_gates : bool, default False
        Also return the gates i and f.

    Returns
    -------
    h : (..., n, d) ndarray
    i, f : (..., n, d) ndarray
        Only if ``return_gates``.

    Notes
    -----
    Residual and layer norm as Eq. (3) and the official code (post-norm, ``layer_postprocess=
    "layer_norm"``, ε = 1e-6); dropout is left out (it is not part of the function). The official
    code's mask matrix (``aan_mask=True``) and its ``tf.cumsum`` path (``aan_mask=False``) are this
    function's "equation" and "scan" methods.

    References
    ----------
    .. [1] B. Zhang, D. Xiong, J. Su, "Accelerating Neural Transformer via an Average Attention Network",
       ACL 2018, arXiv:1805.00631, Eqs. (1)-(3).

    Examples
    --------
    >>> y = np.random.default_rng(0).standard_normal((5, 4))
    >>> params = init_average_attention(1, 4, 8)
    >>> h = average_attention_layer(y, params)
    >>> bool(np.allclose(h, average_attention_decode(y, params)))
    True
    """
    y = _check_layer_input(y, params)
    use_ffn, return_gates = check_bool("use_ffn", use_ffn), check_bool("return_gates", return_gates)
    if y.ndim < 2:
        raise ValueError(f"y must have shape (..., n, d), got shape {y.shape}")
    g = average_attention(y, y, y, causal=True, method=method)     # (..., n, d)  g_j = (1/j) Σ_{k≤j} y_k
    h, i, f = _gated(y, g, params, use_ffn)
    return (h, i, f) if return_gates else h


class AverageAttentionState(NamedTuple):
    """The recurrent form's state after j steps: the running sum s_j = Σ_{k ≤ j} y_k and the count j."""

    total: NDArray
    count: int


def average_attention_step(state: AverageAttentionState | None, y_t: ArrayLike, params: AverageAttentionParams, *,
                           use_ffn: bool = True) -> tuple[NDArray, AverageAttentionState]:
    r"""One decoding step of the AAN sub-layer: the running sum and count instead of attention over the past.

    .. math::

        s_j = s_{j-1} + y_j, \qquad g_j = s_j / j, \qquad h_j = \text{Eqs. (1)-(3) of } (y_j, g_j)

    Parameters
    ----------
    state : AverageAttentionState or None
        The state after the previous steps; ``None`` before the first.
    y_t : (..., d) array_like
        The new position's input.
    params : AverageAttentionParams
        From :func:`init_average_attention`.
    use_ffn : bool, default True
        As in :func:`average_attention_layer`.

    Returns
    -------
    h_t : (..., d) ndarray
    state : AverageAttentionState
        The state after this step (O(d), whatever the number of steps).
    """
    y_t = _check_layer_input(y_t, params)
    use_ffn = check_bool("use_ffn", use_ffn)
    if state is None:
        state = AverageAttentionState(np.zeros(y_t.shape), 0)
    elif not isinstance(state, AverageAttentionState):
        raise TypeError(f"state must be an AverageAttentionState or None, got {type(state).__name__}")
    total = state.total + y_t                                      # (..., d)  s_j = s_{j−1} + y_j
    count = state.count + 1
    h_t = _gated(y_t, total / count, params, use_ffn)[0]           # g_j = s_j / j
    return h_t, AverageAttentionState(total, count)


def average_attention_decode(y: ArrayLike, params: AverageAttentionParams, *, use_ffn: bool = True) -> NDArray:
    r"""The AAN sub-layer in its recurrent (decoding) form: :func:`average_attention_step` over the positions.

    Parameters
    ----------
    y : (..., n, d) array_like
        The inputs, position by position.
    params : AverageAttentionParams
        From :func:`init_average_attention`.
    use_ffn : bool, default True
        As in :func:`average_attention_layer`.

    Returns
    -------
    h : (..., n, d) ndarray
        Equal to :func:`average_attention_layer` (to rounding).
    """
    y = _check_layer_input(y, params)
    if y.ndim < 2:
        raise ValueError(f"y must have shape (..., n, d), got shape {y.shape}")
    h = np.empty(y.shape)
    state = None
    for t in range(y.shape[-2]):
        h[..., t, :], state = average_attention_step(state, y[..., t, :], params, use_ffn=use_ffn)
    return h


RECORD = Mechanism.of(
    average_attention,
    id="average_attention", title="Average Attention Network (cumulative average)", family="prior",
    section="4.5.4", paper=ZHANG, equation=r"g_i = \frac{1}{i + 1} \sum_{j \le i} v_j",
    time="O(n·d_v)", memory="O(d_v) state", kind="attention", causal=True, methods=METHODS,
    figure="refattn.figures.average_attention:average_attention",
    exact_options=None,
    exact_limit="none: fixed uniform weights; softmax attention gives them when every score is equal (q = 0)",
)
