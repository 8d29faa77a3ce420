r"""Collaborative multi-head attention (Cordonnier, Loukas, Jaggi, 2020, arXiv:2006.16362v2, §3-§4; survey §4.6.1).

The heads share one query and one key projection, W̃_Q and W̃_K of width D̃_k, and head i re-weighs the D̃_k
shared dimensions with its own mixing vector m_i ∈ R^{D̃_k}:

    head_i = softmax((X W̃_Q diag(m_i) W̃_Kᵀ Yᵀ + 1 (Y c_i)ᵀ) · scale) · Y W_V^i
    CollabMultiHead(X, Y) = Concat(head_1, …, head_h) W_O

(X the queries' input, Y the keys' and values' input; c_i the content bias of head i, which carries a trained
query bias: see below). Concatenated heads are the special case D̃_k = h·d_k, W̃_Q = [W_Q^1 … W_Q^h],
W̃_K = [W_K^1 … W_K^h] and m_i the indicator of head i's block of d_k columns: the scores of head i are then
X W_Q^i W_K^iᵀ Yᵀ, multi-head attention's. Sharing lets D̃_k be smaller than h·d_k.

Re-parameterising a trained multi-head layer (§4; official code ``swap.py``). Stack the products of every head,
T[:, i, :] = W_Q^i W_K^iᵀ (d_model × h × d_model), and decompose T into D̃_k rank-one terms (CP/PARAFAC):

    T ≈ Σ_r W̃_Q[:, r] ∘ M[:, r] ∘ W̃_K[:, r],   i.e.   W_Q^i W_K^iᵀ ≈ W̃_Q diag(m_i) W̃_Kᵀ,   m_i = M[i, :]

The official code calls tensorly's ``parafac`` (alternating least squares, random initialisation, tolerance
1e-6 on the change of the relative error, at most 100 sweeps) when D̃_k < h·d_k, and copies the concatenated
matrices with one-hot block mixing when D̃_k = h·d_k; :func:`cp_decomposition` is that ALS written out.
Biases: the key bias only adds q_i·b_K^i to every score of row i, which the softmax ignores, so it is dropped;
the query bias adds b_Q^i W_K^iᵀ y_j, a score per key: the content bias c_i = W_K^i b_Q^iᵀ (official
``content_bias``). Values and the output projection are copied.

Compression: with D̃_k = h·d_k the scores are reproduced exactly. Below it they are reproduced exactly only when
T has CP rank ≤ D̃_k. For generic heads (random, or trained ones without redundancy) with d_model ≥ h·d_k, the
mode-1 unfolding of T, [W_Q^1 W_K^1ᵀ … W_Q^h W_K^hᵀ] = [W_Q^1 … W_Q^h] · blockdiag(W_K^iᵀ), has rank h·d_k, and a CP
rank is at least the rank of every unfolding: no D̃_k < h·d_k is exact, and the error grows as D̃_k falls.
Heads that share query/key directions (the redundancy the paper measures in trained models, §2) have a lower
CP rank, and their product tensor is reproduced exactly at that rank, once ALS has converged: the official
stopping rule (1e-6, 100 sweeps) can stop several digits short, ALS from a random start can stall in a local
minimum, and with more terms than the CP rank it converges slowly (tests/test_collaborative_heads.py and the
figure measure these).

Scale: the official layer divides the scores by √(D̃_k / h) (``attention_head_size = dim_key_query_all /
num_attention_heads``), which is multi-head attention's √d_k when D̃_k = h·d_k; a layer re-parameterised to a
smaller D̃_k keeps its trained temperature only with ``scale=1/√d_k`` (the official code keeps √(D̃_k/h) and
fine-tunes afterwards).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.checks import as_float, as_rng, check_scale
from ..common.ints import check_non_negative_int, check_positive_int
from ..core.multi_head import (
    MultiHeadParams,
    combine_heads,
    drawn_width,
    head_shared,
    layer_inputs,
    project_heads,
    split_heads,
)
from ..core.sdpa import scaled_dot_product_attention
from ..draws import given_or_drawn, note_allowed, optional_rng
from ..masks import allowed_pairs, check_mask_shape
from ..mechanism import Mechanism

__all__ = [
    "CPDecomposition",
    "CollaborativeParams",
    "block_mixing",
    "collaborative_attention",
    "collaborative_from_multi_head",
    "cp_decomposition",
    "head_products",
    "init_collaborative",
]

COLLABORATIVE = ('J.-B. Cordonnier, A. Loukas, M. Jaggi, 2020, "Multi-Head Attention: Collaborate Instead of '
                 'Concatenate", arXiv:2006.16362')
MIXING_STD = 0.2     # official MixingMatrixInit.UNIFORM: mixing.normal_(std=0.2)


@dataclass(frozen=True)
class CollaborativeParams:
    """Parameters of collaborative multi-head attention; weights act on the right (``x @ w``).

    Attributes
    ----------
    w_q, w_k : (d_model, D̃_k) ndarray
        The shared projections W̃_Q, W̃_K.
    mixing : (h, D̃_k) ndarray
        Row i is head i's mixing vector m_i.
    w_v : (d_model, h·d_v) ndarray
        The values' projections W_V^i side by side, as in :class:`~refattn.MultiHeadParams`.
    w_o : (h·d_v, d_model) ndarray
        W_O.
    content_bias : (d_model, h) ndarray or None
        Column i is c_i: key j gets the score y_j·c_i in head i (a trained query bias, re-parameterised).
    b_v, b_o : ndarray or None
        Biases of the values and the output.
    """

    w_q: NDArray
    w_k: NDArray
    mixing: NDArray
    w_v: NDArray
    w_o: NDArray
    content_bias: NDArray | None = None
    b_v: NDArray | None = None
    b_o: NDArray | None = None

    def __post_init__(self) -> None:
        for name in ("w_q", "w_k", "mixing", "w_v", "w_o", "content_bias", "b_v", "b_o"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, as_float(name, value))
        for name in ("w_q", "w_k", "mixing", "w_v", "w_o"):
            if getattr(self, name).ndim != 2:
                raise ValueError(f"{name} must be a 2-D matrix, got shape {getattr(self, name).shape}")
        d_model, shared = self.w_q.shape
        h = self.mixing.shape[0]
        if self.w_k.shape != self.w_q.shape or self.mixing.shape[1] != shared:
            raise ValueError(f"w_q {self.w_q.shape}, w_k {self.w_k.shape} and mixing {self.mixing.shape} must be "
                             f"(d_model, D̃_k), (d_model, D̃_k) and (h, D̃_k)")
        if h < 1 or self.w_v.shape[0] != d_model or self.w_v.shape[1] % h:
            raise ValueError(f"w_v has shape {self.w_v.shape}; expected ({d_model}, h·d_v) with h={h} (mixing "
                             f"{self.mixing.shape})")
        if self.w_o.shape != (self.w_v.shape[1], d_model):
            raise ValueError(f"w_o has shape {self.w_o.shape}; expected (h·d_v, d_model) = "
                             f"({self.w_v.shape[1]}, {d_model})")
        for name, shape in (("content_bias", (d_model, h)), ("b_v", (self.w_v.shape[1],)), ("b_o", (d_model,))):
            value = getattr(self, name)
            if value is not None and value.shape != shape:
                raise ValueError(f"{name} has shape {value.shape}; expected {shape}")

    @property
    def num_heads(self) -> int:
        """h: rows of ``mixing``."""
        return self.mixing.shape[0]

    @property
    def shared_dim(self) -> int:
        """D̃_k: the shared query/key width."""
        return self.mixing.shape[1]

    @property
    def d_model(self) -> int:
        """Model width: rows of ``w_q``."""
        return self.w_q.shape[0]


def init_collaborative(rng, d_model: int, num_heads: int, *, shared_dim: int | None = None,
                       d_v: int | None = None) -> CollaborativeParams:
    r"""Draw collaborative-attention parameters as the official layer initialises them.

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw.
    d_model : int
        Model width.
    num_heads : int
        *h*.
    shared_dim : int, optional
        D̃_k. Default ``d_model`` (h·d_k with the usual d_k = d_model / h).
    d_v : int, optional
        Value width per head. Default ``d_model // num_heads``.

    Returns
    -------
    CollaborativeParams

    Notes
    -----
    The official ``CollaborativeAttention`` builds W̃_Q, W̃_K, the content bias, the values and the output as
    PyTorch ``nn.Linear`` layers, whose default draws every weight from
    :math:`U(\pm 1/\sqrt{\text{fan}_\text{in}})`, and so does this; its default mixing initialisation
    (``MixingMatrixInit.UNIFORM``) draws :math:`m_i \sim N(0, 0.2^2)` entries, and so does this. The biases of
    the values and the output start at zero, as :func:`~refattn.init_multi_head`'s (``nn.Linear`` would draw
    them too), so that a query that sees no key outputs 0. Drawn in the order W̃_Q, W̃_K, mixing, content bias,
    W_V, W_O.
    """
    rng = as_rng(rng)
    check_positive_int("d_model", d_model)
    h = check_positive_int("num_heads", num_heads)
    shared = d_model if shared_dim is None else check_positive_int("shared_dim", shared_dim)
    if d_v is None:
        if d_model % h:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={h}; pass d_v explicitly")
        d_v = d_model // h
    check_positive_int("d_v", d_v)

    def linear(fan_in, *shape):
        bound = 1.0 / math.sqrt(fan_in)
        return rng.uniform(-bound, bound, size=shape)

    w_q, w_k = linear(d_model, d_model, shared), linear(d_model, d_model, shared)
    mixing = MIXING_STD * rng.standard_normal((h, shared))
    content_bias = linear(d_model, d_model, h)
    w_v, w_o = linear(d_model, d_model, h * d_v), linear(h * d_v, h * d_v, d_model)
    return CollaborativeParams(w_q, w_k, mixing, w_v, w_o, content_bias, np.zeros(h * d_v), np.zeros(d_model))


def collaborative_attention(
    x_q: ArrayLike,
    x_kv: ArrayLike,
    params: CollaborativeParams | str | None = None,
    *,
    num_heads: int | None = None,
    shared_dim: int | None = None,
    rng=None,
    mask: ArrayLike | None = None,
    causal: bool | str = False,
    scale: float | None = None,
    fully_masked: str = "zero",
    x_v: ArrayLike | None = None,
    return_weights: bool = False,
) -> NDArray | tuple[NDArray, NDArray]:
    r"""Collaborative multi-head attention: shared W̃_Q, W̃_K, head i's scores through diag(m_i).

    .. math::

        \mathrm{head}_i = \operatorname{softmax}\big((X \tilde W_Q \operatorname{diag}(m_i) \tilde W_K^\top
        Y^\top + \mathbf{1} (Y c_i)^\top) \cdot \mathrm{scale}\big)\, Y W_V^i, \qquad
        \operatorname{Concat}(\mathrm{head}_1, \dots, \mathrm{head}_h) W_O

    Parameters
    ----------
    x_q : (..., n, d_model) array_like
        Query-side input X.
    x_kv : (..., m, d_model) array_like
        Key-side input Y (and value-side unless ``x_v`` is given).
    params : CollaborativeParams, "identity" or None
        The shared projections, the mixing vectors and the per-head values. ``None``: drawn from ``rng``
        (:func:`init_collaborative`, d_model = the width of ``x_q``). ``"identity"``: one head, identity
        projections, m_1 = 1 and no biases, which is scaled dot-product attention itself.
    num_heads, shared_dim : int, optional
        *h* and D̃_k of the parameters drawn from ``rng`` (``num_heads`` is then required; D̃_k defaults to
        d_model); ``"identity"`` takes h = 1 and D̃_k = d_model. Unused with given ``params``.
    rng : numpy.random.Generator or int, optional
        Draws ``params`` when it is omitted.
    mask : (..., n, m) array_like of bool or float, optional
        As in :func:`~refattn.scaled_dot_product_attention`, shared by all heads; a float mask is added to the
        scaled scores.
    causal : {False, True, "top-left", "bottom-right"}, default False
        As in :func:`~refattn.scaled_dot_product_attention` (masking by selection).
    scale : float, optional
        Multiplier of the scores. Default :math:`1/\sqrt{\tilde D_k / h}`, the official layer's (multi-head
        attention's :math:`1/\sqrt{d_k}` when :math:`\tilde D_k = h d_k`).
    fully_masked : {"zero", "nan", "uniform"}, default "zero"
        As in :func:`~refattn.scaled_dot_product_attention`.
    x_v : (..., m, d_model) array_like, optional
        Value-side input when it differs from ``x_kv``.
    return_weights : bool, default False
        Also return every head's attention matrix.

    Returns
    -------
    out : (..., n, d_model) ndarray
    weights : (..., h, n, m) ndarray
        Only if ``return_weights``.

    Notes
    -----
    Time :math:`O((n + m) d_\text{model} \tilde D_k + h\, n m (\tilde D_k + d_v))`; the key projection is
    computed once for all heads (h·d_k columns of keys become D̃_k).

    References
    ----------
    .. [1] J.-B. Cordonnier, A. Loukas, M. Jaggi, "Multi-Head Attention: Collaborate Instead of Concatenate",
       arXiv:2006.16362v2, §3 (collaborative heads), and the official code (epfml/collaborative-attention,
       ``collaborative_attention.py``).

    Examples
    --------
    >>> from refattn import init_multi_head, multi_head_attention
    >>> rng = np.random.default_rng(0)
    >>> mh = init_multi_head(rng, d_model=8, num_heads=2)
    >>> x = rng.standard_normal((5, 8))
    >>> collab = collaborative_from_multi_head(mh, num_heads=2)      # D̃_k = h·d_k: one-hot block mixing
    >>> collab.mixing
    array([[1., 1., 1., 1., 0., 0., 0., 0.],
           [0., 0., 0., 0., 1., 1., 1., 1.]])
    >>> bool(np.allclose(collaborative_attention(x, x, collab), multi_head_attention(x, x, mh, num_heads=2),
    ...                  rtol=1e-12, atol=1e-12))
    True
    """
    x_q = as_float("x_q", x_q, min_ndim=2)                         # its width sizes drawn parameters
    params = _collaborative_params(params, x_q, num_heads, shared_dim, rng)
    x_q, x_kv, x_v = layer_inputs(x_q, x_kv, x_v, params.d_model)
    h, n, m = params.num_heads, x_q.shape[-2], x_kv.shape[-2]
    scale = math.sqrt(h / params.shared_dim) if scale is None else check_scale(scale)
    if mask is not None:
        mask = head_shared(check_mask_shape(mask, n, m))           # (..., 1, n, m): every head
    given_mask = mask                                              # the pairs it lets through (before the bias)
    if params.content_bias is not None:
        with np.errstate(invalid="ignore", over="ignore"):
            c = np.swapaxes(x_kv @ params.content_bias, -1, -2)[..., None, :] * scale   # (..., h, 1, m)  y_j·c_i
        if mask is None:
            mask = c
        elif mask.dtype == np.bool_:
            mask = np.where(mask, c, -np.inf)                      # (..., h, n, m)  masked pairs: −inf
        else:
            mask = c + mask

    Q_shared = x_q @ params.w_q                                    # (..., n, D̃_k)      X W̃_Q
    Q = Q_shared[..., None, :, :] * params.mixing[:, None, :]      # (..., h, n, D̃_k)   X W̃_Q diag(m_i)
    K = (x_kv @ params.w_k)[..., None, :, :]                       # (..., 1, m, D̃_k)   Y W̃_K, shared
    V = project_heads(x_v, params.w_v, params.b_v, h)              # (..., h, m, d_v)    Y W_V^i
    result = scaled_dot_product_attention(Q, K, V, mask=mask, causal=causal, scale=scale, fully_masked=fully_masked,
                                          return_weights=return_weights)
    heads, A = result if return_weights else (result, None)       # (..., h, n, d_v) [, (..., h, n, m)]
    out = combine_heads(heads, params.w_o, params.b_o)             # (..., n, d_model)   Concat(head_i) W_O
    if not return_weights:
        return out
    note_allowed(lambda: allowed_pairs(given_mask, causal, A.shape, fully_masked))
    return out, A


def block_mixing(num_heads: int, d_k: int) -> NDArray:
    """The (h, h·d_k) one-hot block mixing: m_i is the indicator of head i's columns i·d_k … (i+1)·d_k − 1.

    Parameters
    ----------
    num_heads : int
        *h*.
    d_k : int
        Query/key width per head.

    Returns
    -------
    (h, h·d_k) ndarray
    """
    check_positive_int("num_heads", num_heads)
    check_non_negative_int("d_k", d_k)
    return np.kron(np.eye(num_heads), np.ones((1, d_k)))


def head_products(params: MultiHeadParams, num_heads: int) -> NDArray:
    """T[:, i, :] = W_Q^i W_K^iᵀ, the (d_model, h, d_model) tensor of every head's query-key product.

    Parameters
    ----------
    params : MultiHeadParams
        A multi-head layer.
    num_heads : int
        *h*.

    Returns
    -------
    (d_model, h, d_model) ndarray
        The official code's ``einsum("hdq,hdk->qhk", WQ_per_head, WK_per_head)``.
    """
    check_positive_int("num_heads", num_heads)
    W_Q = split_heads(params.w_q, num_heads)                      # (h, d_model, d_k)
    W_K = split_heads(params.w_k, num_heads)
    return np.einsum("iak,ibk->aib", W_Q, W_K)                     # (d_model, h, d_model)


class CPDecomposition(NamedTuple):
    """T ≈ Σ_r A[:, r] ∘ B[:, r] ∘ C[:, r], from :func:`cp_decomposition`.

    Attributes
    ----------
    A, B, C : ndarray
        The factors, (I, R), (J, R), (K, R).
    error : float
        ‖T − T̂‖_F / ‖T‖_F after the last sweep.
    sweeps : int
        ALS sweeps run.
    """

    A: NDArray
    B: NDArray
    C: NDArray
    error: float
    sweeps: int


def cp_decomposition(T: ArrayLike, rank: int, *, rng=None, max_sweeps: int = 100, tol: float = 1e-6) -> CPDecomposition:
    r"""CP (CANDECOMP/PARAFAC) decomposition of a 3-way tensor by alternating least squares.

    .. math::

        T_{abc} \approx \sum_{r=1}^{R} A_{ar} B_{br} C_{cr}

    Each sweep solves for one factor with the other two fixed, e.g.
    :math:`A \leftarrow T_{(1)} (C \odot B) \big((B^\top B) * (C^\top C)\big)^{+}`, in the order A, B, C.

    Parameters
    ----------
    T : (I, J, K) array_like
        The tensor.
    rank : int
        *R*, the number of rank-one terms.
    rng : numpy.random.Generator or int
        Source of the initial factors: uniform on [0, 1), as tensorly's ``init="random"``.
    max_sweeps : int, default 100
        Sweeps at most (tensorly's ``n_iter_max``).
    tol : float, default 1e-6
        Stop when the relative error changes by less than this between two sweeps (the official code's
        ``tol``); 0 runs every sweep.

    Returns
    -------
    CPDecomposition

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> A, B, C = rng.standard_normal((3, 5, 2))
    >>> T = np.einsum("ar,br,cr->abc", A, B, C)                     # CP rank 2
    >>> cp = cp_decomposition(T, 2, rng=1, max_sweeps=500, tol=0.0)
    >>> bool(cp.error < 1e-10)
    True
    """
    T = as_float("T", T)
    if T.ndim != 3:
        raise ValueError(f"T must be a 3-way tensor, got shape {T.shape}")
    R = check_positive_int("rank", rank)
    max_sweeps = check_positive_int("max_sweeps", max_sweeps)
    if isinstance(tol, bool) or not isinstance(tol, (int, float, np.integer, np.floating)) or not tol >= 0:
        raise ValueError(f"tol must be a number >= 0, got {tol!r}")
    rng = as_rng(rng)
    I, J, K = T.shape
    A, B, C = rng.random((I, R)), rng.random((J, R)), rng.random((K, R))
    norm = np.linalg.norm(T)
    error, previous, sweeps = np.inf, np.inf, 0
    while sweeps < max_sweeps:
        sweeps += 1
        A = _solve(np.einsum("abc,br,cr->ar", T, B, C), (B.T @ B) * (C.T @ C))   # T_(1) (C ⊙ B) (BᵀB * CᵀC)⁺
        B = _solve(np.einsum("abc,ar,cr->br", T, A, C), (A.T @ A) * (C.T @ C))
        C = _solve(np.einsum("abc,ar,br->cr", T, A, B), (A.T @ A) * (B.T @ B))
        error = np.linalg.norm(T - np.einsum("ar,br,cr->abc", A, B, C)) / (norm if norm > 0 else 1.0)
        if abs(previous - error) < tol:
            break
        previous = error
    return CPDecomposition(A, B, C, float(error), sweeps)


def _solve(mttkrp: NDArray, gram: NDArray) -> NDArray:
    """mttkrp · gram⁺ (gram symmetric R × R), by least squares so that a singular gram is no error."""
    return np.linalg.lstsq(gram, mttkrp.T, rcond=None)[0].T


def collaborative_from_multi_head(params: MultiHeadParams, num_heads: int, shared_dim: int | None = None, *,
                                  rng=None, max_sweeps: int = 100, tol: float = 1e-6) -> CollaborativeParams:
    r"""Re-parameterise a multi-head layer into collaborative heads of shared width D̃_k (the paper's §4).

    With D̃_k = h·d_k (the default) the concatenated W_Q, W_K are copied and the mixing is one-hot by block
    (:func:`block_mixing`): exactly the same layer. With D̃_k < h·d_k the tensor of head products
    (:func:`head_products`) is decomposed by :func:`cp_decomposition` into W̃_Q, the mixing matrix and W̃_K.
    In both cases the key bias is dropped (the softmax ignores it), the query bias becomes the content bias
    c_i = W_K^i b_Q^iᵀ, and the values and the output projection are copied.

    Parameters
    ----------
    params : MultiHeadParams
        The trained layer.
    num_heads : int
        *h*.
    shared_dim : int, optional
        D̃_k, at most h·d_k. Default h·d_k.
    rng : numpy.random.Generator or int, optional
        The decomposition's random initialisation (needed when D̃_k < h·d_k).
    max_sweeps, tol : int, float
        As in :func:`cp_decomposition`; the defaults are the official code's.

    Returns
    -------
    CollaborativeParams
        Use it with ``scale=1/√d_k`` to keep the layer's temperature when D̃_k < h·d_k (see the module notes).
    """
    if not isinstance(params, MultiHeadParams):
        raise TypeError(f"params must be MultiHeadParams, got {type(params).__name__}")
    h = check_positive_int("num_heads", num_heads)
    if params.w_q.shape[1] % h:
        raise ValueError(f"w_q {params.w_q.shape} does not split into num_heads={h} heads")
    full = params.w_q.shape[1]
    d_k = full // h
    shared = full if shared_dim is None else check_positive_int("shared_dim", shared_dim)
    if shared > full:
        raise ValueError(f"shared_dim={shared} exceeds h·d_k={full} (w_q {params.w_q.shape}): nothing to compress")
    if shared == full:
        w_q, w_k, mixing = params.w_q, params.w_k, block_mixing(h, d_k)
    else:
        if rng is None:
            raise ValueError(f"shared_dim={shared} < h·d_k={full} needs rng= for the decomposition's initialisation")
        cp = cp_decomposition(head_products(params, h), shared, rng=rng, max_sweeps=max_sweeps, tol=tol)
        w_q, mixing, w_k = cp.A, cp.B, cp.C
    content_bias = None
    if params.b_q is not None:
        W_K = split_heads(params.w_k, h)                          # (h, d_model, d_k)
        b_Q = params.b_q.reshape(h, d_k)
        content_bias = np.einsum("iak,ik->ai", W_K, b_Q)           # (d_model, h)  c_i = W_K^i b_Q^iᵀ
    return CollaborativeParams(w_q, w_k, mixing, params.w_v, params.w_o, content_bias, params.b_v, params.b_o)


def _collaborative_params(params, x_q: NDArray, num_heads, shared_dim, rng) -> CollaborativeParams:
    """``params`` as given, drawn from ``rng`` with ``num_heads`` and ``shared_dim``, or ``"identity"``."""
    if params is None and rng is not None and num_heads is None:   # rng missing too: given_or_drawn says so
        raise ValueError("collaborative_heads needs num_heads= to draw params from rng (or params=)")
    params = given_or_drawn("collaborative_heads", "params", params, optional_rng(rng), lambda r: init_collaborative(
        r, drawn_width(x_q), num_heads, shared_dim=shared_dim), what="its parameters")
    if isinstance(params, str):
        if params != "identity" or num_heads not in (None, 1) or shared_dim not in (None, x_q.shape[-1]):
            raise ValueError(f"params must be CollaborativeParams, None or 'identity' (with num_heads=1), got "
                             f"{params!r} with num_heads={num_heads}, shared_dim={shared_dim}")
        eye = np.eye(x_q.shape[-1])
        return CollaborativeParams(eye, eye, np.ones((1, x_q.shape[-1])), eye, eye)
    if not isinstance(params, CollaborativeParams):
        raise TypeError(f"params must be CollaborativeParams (see init_collaborative), None or 'identity', got "
                        f"{type(params).__name__}")
    return params


RECORD = Mechanism.of(
    collaborative_attention, inputs=("x_q", "x_kv", "x_v"), defaults={"num_heads": 2},
    id="collaborative_heads", title="Collaborative multi-head attention", family="heads", section="4.6.1",
    paper=COLLABORATIVE,
    equation=r"\mathrm{head}_i = \operatorname{softmax}\big(X \tilde W_Q \operatorname{diag}(m_i) \tilde W_K^\top "
    r"Y^\top / \sqrt{\tilde D_k / h}\big)\, Y W_V^i",
    time="O((n+m)·d·D̃_k + h·n·m·(D̃_k + d_v))", memory="O(h·n·m)", kind="attention",
    causal=True,
    examples=({"num_heads": 4, "shared_dim": 2}, {"num_heads": 1, "shared_dim": 8}),
    figure="refattn.figures.collaborative_heads:collaborative_heads",
    exact_options={"num_heads": 1, "params": "identity"},
    exact_limit="one head, identity projections, m_1 = 1; with D̃_k = h·d_k and one-hot block mixing it is "
    "multi_head with the same projections", draws=("params",),
    layer_inputs=True,
)
