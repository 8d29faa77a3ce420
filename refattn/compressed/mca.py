r"""Memory-compressed attention and local attention (Liu et al., 2018, arXiv:1801.10198v1, §4.2.3; survey §4.3.2).

T-DMCA, the decoder-only Transformer of "Generating Wikipedia by Summarizing Long Sequences",
interleaves two kinds of attention layer:

  memory-compressed: a strided convolution, kernel = stride = c, shortens the keys and the values;
  the n queries are kept

    K̃_r = Σ_{t<c} K_{rc+t} W^K_t,   Ṽ_r = Σ_{t<c} V_{rc+t} W^V_t,        r = 0 … M − 1, M = ⌊m/c⌋
    out = softmax(Q K̃ᵀ / √d_k) Ṽ                                         (n × M scores)

  local: the sequence is cut into blocks of b tokens and attention runs within each block

    out_i = Σ_{j: ⌊j/b⌋ = ⌊i/b⌋} softmax_j(q_i·k_j / √d_k) v_j

The kernel taps W_t are d × d matrices (a convolution mixing the channels, as the paper's
convolution layer) or scalars w_t shared by the channels. With scalars the convolution is a matrix
along the sequence, K̃ = C^K K and Ṽ = C^V V with C_{r, rc+t} = w_t (a Linformer projection
with a strided band structure), and the effective n × m matrix is W = P C^V, P = softmax(QK̃ᵀ/√d_k);
with d × d taps the output mixes the values' channels and no n × m matrix gives it.

The decoder is causal: query i sees the compressed blocks all of whose tokens are at or before i
(block r ends at rc + c − 1 ≤ i), so output i never depends on a later token; in local attention
it sees the keys j ≤ i of its own block. Queries before the end of the first block see no block:
their output is 0 (the official code prepends the first token to the memory instead; see
:func:`memory_compressed_attention`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.budget import check_fits, memory_budget
from ..common.checks import (
    as_float,
    as_rng,
    broadcast_batch,
    causal_alignment,
    check_bool,
    check_choice,
    check_scale,
    checked_qkv,
    default_scale,
)
from ..common.ints import check_non_negative_int, check_positive_int
from ..core.sdpa import scaled_dot_product_attention
from ..draws import given_or_drawn, note_allowed, note_draw, optional_rng
from ..mechanism import AttentionResult, Mechanism
from ..sparse.attention import attend_pattern
from ..sparse.block_local import block_local_pattern

__all__ = [
    "MemoryCompression",
    "blockwise_local_attention",
    "compress_memory",
    "compression_matrix",
    "init_memory_compression",
    "memory_compressed_attention",
]

LIU = ('P. J. Liu et al., 2018, "Generating Wikipedia by Summarizing Long Sequences", arXiv:1801.10198')
CHANNELS = ("full", "shared")
MEMORIES = ("paper", "tensor2tensor")
REMAINDERS = ("drop", "pad")
MODES = ("compressed", "local")
METHODS = ("equation", "blocked", "auto")
LOCAL_METHODS = {"equation": "equation", "blocked": "csr", "auto": "auto"}
EQUATION_ARRAYS = 4              # arrays of the scores' size a causal chunk holds at its peak (as sdpa's rows)


@dataclass(frozen=True, eq=False)
class MemoryCompression:
    r"""The kernels of the two strided convolutions, over the keys (W^K) and over the values (W^V).

    Attributes
    ----------
    w_k : (c,) or (c, d_k, d_k) ndarray
        Tap *t* of the key convolution: a scalar shared by the channels, or a d_k × d_k matrix
        acting on the right (:math:`\tilde K_r = \sum_t K_{rc+t} W^K_t`).
    w_v : (c,) or (c, d_v, d_v) ndarray
        The value convolution, of the same kind and the same *c*.

    The kernel size (= stride) *c* is the taps' count. A PyTorch ``nn.Conv1d(d, d, c, stride=c)``
    weight ``w`` of shape (d_out, d_in, c) is ``w.permute(2, 1, 0)`` here; its bias is not part
    of the mechanism (see :func:`memory_compressed_attention`, Notes).
    """

    w_k: NDArray
    w_v: NDArray

    def __post_init__(self) -> None:
        for name in ("w_k", "w_v"):
            w = as_float(name, getattr(self, name))
            if w.ndim not in (1, 3) or w.shape[0] == 0 or (w.ndim == 3 and w.shape[1] != w.shape[2]):
                raise ValueError(f"{name} must have shape (c,) (taps shared by the channels) or (c, d, d), c >= 1, "
                                 f"got shape {w.shape}")
            object.__setattr__(self, name, w)
        if self.w_k.ndim != self.w_v.ndim or self.w_k.shape[0] != self.w_v.shape[0]:
            raise ValueError(f"w_k and w_v must be of one kind and one kernel size c, got shapes {self.w_k.shape} "
                             f"and {self.w_v.shape}")

    @property
    def factor(self) -> int:
        """The kernel size = stride *c*."""
        return self.w_k.shape[0]

    @property
    def channels(self) -> str:
        """The taps' kind: "shared" (scalars) or "full" (d × d matrices)."""
        return "shared" if self.w_k.ndim == 1 else "full"


def init_memory_compression(rng, factor: int, *, d_k: int | None = None, d_v: int | None = None,
                            channels: str = "full") -> MemoryCompression:
    r"""Draw the two convolutions' kernels, Glorot/Xavier uniform as the official code's convolution layer.

    .. math::

        (W_t)_{io} \sim \mathcal{U}\Big(\pm\sqrt{\tfrac{6}{c\,d_\text{in} + c\,d_\text{out}}}\Big)

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw.
    factor : int
        *c*, the kernel size and stride (3 in the paper).
    d_k, d_v : int, optional
        Widths of the keys and values; required with ``channels="full"``.
    channels : {"full", "shared"}, default "full"
        "full": d × d taps (the paper's convolution layer). "shared": one scalar per tap for every
        channel (:math:`d_\text{in} = d_\text{out} = 1` in the bound).

    Returns
    -------
    MemoryCompression

    Notes
    -----
    tensor2tensor's ``conv_elems_1d`` is a ``Conv2D`` with ``kernel_size=(1, c)``, ``strides=(1, c)``
    and Keras's default ``glorot_uniform`` kernel initialiser, whose fans are c·d_in and c·d_out,
    and a zero-initialised bias. The draws come in the order w_k, w_v.

    Examples
    --------
    >>> params = init_memory_compression(0, 3, d_k=4, d_v=2)
    >>> params.w_k.shape, params.w_v.shape, params.factor
    ((3, 4, 4), (3, 2, 2), 3)
    """
    rng = as_rng(rng)
    c = check_positive_int("factor", factor)
    check_choice("channels", channels, CHANNELS)
    if channels == "shared":
        bound = math.sqrt(3.0 / c)
        return MemoryCompression(rng.uniform(-bound, bound, c), rng.uniform(-bound, bound, c))
    if d_k is None or d_v is None:
        raise ValueError("channels='full' draws d × d taps: pass d_k= and d_v=")
    kernels = []
    for d in (check_non_negative_int("d_k", d_k), check_non_negative_int("d_v", d_v)):
        bound = math.sqrt(6.0 / (2 * c * d)) if d else 0.0
        kernels.append(rng.uniform(-bound, bound, (c, d, d)))
    return MemoryCompression(*kernels)


def compress_memory(x: ArrayLike, kernel: ArrayLike, *, remainder: str = "drop") -> NDArray:
    r"""The strided convolution along the sequence, kernel = stride = c.

    .. math::

        \tilde X_r = \sum_{t=0}^{c-1} X_{rc+t} W_t, \qquad r = 0, \dots, M - 1

    Parameters
    ----------
    x : (..., m, d) array_like
        Keys or values.
    kernel : (c,) or (c, d, d) array_like
        The taps: scalars shared by the channels, or d × d matrices acting on the right.
    remainder : {"drop", "pad"}, default "drop"
        When c does not divide m: "drop" the last m mod c positions, which no block holds
        (tensor2tensor's "valid" convolution), M = ⌊m/c⌋; or "pad" with zeros before position 0
        (lucidrains/memory-compressed-attention), so the first block holds fewer tokens,
        M = ⌈m/c⌉.

    Returns
    -------
    (..., M, d) ndarray

    Examples
    --------
    >>> x = np.arange(1.0, 8.0)[:, None]                  # 1 … 7 at positions 0 … 6
    >>> compress_memory(x, [1.0, 1.0, 1.0])              # sums of 3; 7 is in no block
    array([[ 6.],
           [15.]])
    >>> compress_memory(x, [1.0, 1.0, 1.0], remainder="pad")   # two zeros before 1
    array([[ 1.],
           [ 9.],
           [18.]])
    """
    x = as_float("x", x, min_ndim=2)
    kernel = as_float("kernel", kernel)
    check_choice("remainder", remainder, REMAINDERS)
    if kernel.ndim not in (1, 3) or kernel.shape[0] == 0 or (kernel.ndim == 3 and kernel.shape[1:] !=
                                                            (x.shape[-1],) * 2):
        raise ValueError(f"kernel must have shape (c,) or (c, d, d) with d = x's width {x.shape[-1]}, c >= 1, "
                         f"got shape {kernel.shape}")
    return _compress(x, kernel, remainder)


def _layout(m: int, c: int, remainder: str) -> tuple[int, int]:
    """(M, pad): the number of blocks and the zeros put before position 0."""
    pad = (-m) % c if remainder == "pad" else 0
    return (m + pad) // c, pad


def _compress(x: NDArray, kernel: NDArray, remainder: str) -> NDArray:
    """:func:`compress_memory` on checked arrays: one product of the (..., M, c·d) blocks with the kernel."""
    c, (m, d) = kernel.shape[0], x.shape[-2:]
    M, pad = _layout(m, c, remainder)
    if pad:
        x = np.concatenate([np.zeros((*x.shape[:-2], pad, d)), x], axis=-2)
    blocks = x[..., :M * c, :].reshape(*x.shape[:-2], M, c, d)     # (..., M, c, d)  X_{rc+t}
    with np.errstate(invalid="ignore", over="ignore"):             # Inf in a block: NaN/Inf there, as IEEE says
        if kernel.ndim == 1:
            return np.swapaxes(blocks, -1, -2) @ kernel            # (..., M, d)  Σ_t w_t X_{rc+t}
        return blocks.reshape(*blocks.shape[:-2], c * d) @ kernel.reshape(c * d, d)   # Σ_t X_{rc+t} W_t


def compression_matrix(m: int, taps: ArrayLike, *, remainder: str = "drop") -> NDArray:
    r"""The (M, m) matrix C of a convolution with scalar taps: :math:`\tilde X = C X`, :math:`C_{r, rc+t} = w_t`.

    Parameters
    ----------
    m : int
        Sequence length.
    taps : (c,) array_like
        The scalar taps :math:`w_0 \dots w_{c-1}`.
    remainder : {"drop", "pad"}, default "drop"
        As in :func:`compress_memory` ("pad": :math:`C_{r, rc+t-p} = w_t` for the p = (−m) mod c
        zeros before position 0, columns < 0 left out).

    Returns
    -------
    C : (M, m) ndarray

    Examples
    --------
    >>> compression_matrix(5, [0.5, 0.5])
    array([[0.5, 0.5, 0. , 0. , 0. ],
           [0. , 0. , 0.5, 0.5, 0. ]])
    """
    taps = as_float("taps", taps)
    if taps.ndim != 1 or taps.size == 0:
        raise ValueError(f"taps must have shape (c,), c >= 1, got shape {taps.shape}")
    check_choice("remainder", remainder, REMAINDERS)
    m = check_non_negative_int("m", m)
    M, _ = _layout(m, taps.size, remainder)
    return _effective(np.eye(M), m, taps.size, remainder, taps, False)    # the weights of P = I


def memory_compressed_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    factor: int | None = None,
    params: MemoryCompression | None = None,
    rng: np.random.Generator | int | None = None,
    channels: str | None = None,
    memory: str = "paper",
    remainder: str = "drop",
    causal: bool | str = False,
    scale: float | None = None,
    method: str = "auto",
    mode: str = "compressed",
    block: int = 256,
    return_weights: bool = False,
) -> NDArray | tuple[NDArray, NDArray]:
    r"""Memory-compressed attention: the queries attend to keys and values shortened by a strided convolution.

    .. math::

        \tilde K_r = \sum_{t=0}^{c-1} K_{rc+t} W^K_t, \quad
        \tilde V_r = \sum_{t=0}^{c-1} V_{rc+t} W^V_t, \quad
        \mathrm{out} = \operatorname{softmax}\Big(\frac{Q \tilde K^\top}{\sqrt{d_k}}\Big) \tilde V

    Parameters
    ----------
    q : (..., n, d_k) array_like
        Queries.
    k : (..., m, d_k) array_like
        Keys.
    v : (..., m, d_v) array_like
        Values.
    factor : int, optional
        *c*, the kernel size and stride: 3 (the paper's) when drawing, ``params.factor`` when
        given (and then it must agree).
    params : MemoryCompression, optional
        The kernels W^K, W^V; drawn from ``rng`` when not given.
    rng : numpy.random.Generator or int, optional
        Source of the kernels (:func:`init_memory_compression`) when ``params`` is not given
        (unused when it is).
    channels : {"full", "shared"}, optional
        The kernels' kind: d × d taps mixing the channels ("full", the default when drawing) or
        scalar taps shared by the channels ("shared"); with ``params``, theirs (and it must agree).
    memory : {"paper", "tensor2tensor"}, default "paper"
        "paper": the memory is the M compressed blocks; causal query *i* sees the blocks that end
        at or before *i*. "tensor2tensor": the official code's memory, the first token's key and
        value (uncompressed, seen by every query) followed by the blocks; causal query *i* sees
        the blocks that end before *i* (see Notes).
    remainder : {"drop", "pad"}, default "drop"
        When c does not divide m (:func:`compress_memory`): the last m mod c tokens are in no
        block (the official code), or zeros are put before position 0.
    causal : {False, True, "top-left", "bottom-right"}, default False
        The decoder's form (see Notes); "bottom-right": the n queries are the last n of the m
        positions (decoding with a key/value cache), query *i* at position i + m − n.
    scale : float, optional
        Multiplier of the scores; default :math:`1/\sqrt{d_k}`.
    method : {"equation", "blocked", "auto"}, default "auto"
        :func:`~refattn.scaled_dot_product_attention`'s path over the n × M scores (causal: over
        chunks of query rows whose scores fit a quarter of the memory budget, each against the
        blocks its last row sees). The weights, when asked
        for, come from "equation" whatever the method.
    mode : {"compressed", "local"}, default "compressed"
        Which of T-DMCA's two attention layers: this one, or its local attention within blocks of
        ``block`` tokens (:func:`blockwise_local_attention`, which takes ``causal`` and ``method``
        and none of the compression's options: ``scale`` is refused, the others unused).
    block : int, default 256
        *b*, tokens per block of ``mode="local"`` (the paper's 256).
    return_weights : bool, default False
        Also return the effective (..., n, m) matrix :math:`W = P C^V` (plus :math:`P_{i0}` on
        column 0 for the first token of "tensor2tensor"), ``out = W @ v``; scalar taps only.

    Returns
    -------
    out : (..., n, d_v) ndarray
        A query that sees no block (causal, before the end of the first block, "paper") is 0.
    weights : (..., n, m) ndarray
        Only if ``return_weights``: :math:`W_{ij} = P_{i,r} w^V_t` for j = rc + t; 0 on the
        tokens the query's visible memory does not hold. Its rows sum to
        :math:`\sum_t w^V_t` (1 only for taps that sum to 1, such as mean pooling) and may be
        negative.

    Notes
    -----
    **The paper** (§4.2.3): "after projecting the tokens into the query, key, and value
    embeddings, we reduce the number of keys and values by using a strided convolution. The
    number of queries remains unchanged. ... we use convolution kernels of size 3 with stride 3."
    The model is a decoder (T-DMCA) whose layers alternate local and memory-compressed attention;
    the paper does not spell out the mask on the compressed memory. ``memory="paper"`` takes the
    strictest one that keeps every token a query sees at or before it: block *r* (tokens
    rc … rc + c − 1) is visible to query *i* iff rc + c − 1 ≤ i, so output *i* does not depend
    on later tokens, and c = 1 with the tap 1 is exact causal softmax attention.

    **The official code** (tensor2tensor, ``common_attention.multihead_self_attention_reduced``
    with ``conv_elems_1d``, the layers "red" and "redm" of ``get_standardized_layers``):

    * it convolves the layer's input X before the key and value projections, one convolution for
      both (:math:`\tilde K = \mathrm{conv}(X) W^K`, the same kind of map: a convolution with
      the taps :math:`W_t W^K`), with a bias;
    * "valid" padding: "the last block won't be computed (not attended anyway)", so the last
      m mod c tokens are in no block, also without the mask (``remainder="drop"``);
    * it prepends the first token to the memory, "to make it attendable by everyone (otherwise
      the first block cannot attend to anything)", with and without the mask;
    * its mask hides memory position *p* (the first token at *p* = 0, block *r* at *p* = r + 1)
      from query *i* iff p·c > i: block *r* is visible iff (r + 1)c ≤ i, strictly before *i*
      ("the last tokens of a block cannot attend the block").

    ``memory="tensor2tensor"`` reproduces the last two (the memory and its mask). Its c = 1 is not
    exact attention: the first token is there twice, and the causal query *i* does not see
    itself. lucidrains/memory-compressed-attention instead pads the front with zeros
    (``remainder="pad"``), prepends a learned null key and value, and shows a block once its
    last token is at or before *i*, as "paper" does.

    **Biases.** A bias :math:`b^K` of the key convolution adds :math:`q_i \cdot b^K` to every
    score of query *i*, which cancels in the softmax; a bias :math:`b^V` of the value
    convolution adds :math:`b^V` to every output row that sees some block (the rows of P sum to
    1). Neither changes which tokens a query sees, so neither is a parameter here.

    Complexity: O(m·c·d²) ("full") or O(m·d) ("shared") for the convolutions, O(n·(m/c)·d)
    for the attention; the n × M scores (streamed by "blocked" and, above the memory budget, by
    "auto"; causal, in chunks of query rows within the budget); nothing n × m unless
    ``return_weights``.

    References
    ----------
    .. [1] P. J. Liu et al., "Generating Wikipedia by Summarizing Long Sequences", ICLR 2018,
       arXiv:1801.10198v1, §4.2.3, Fig. 1.
    .. [2] tensorflow/tensor2tensor, ``tensor2tensor/layers/common_attention.py``
       (``multihead_self_attention_reduced``, ``conv_elems_1d``).
    .. [3] lucidrains/memory-compressed-attention, ``memory_compressed_attention.py``.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 9, 4))
    >>> memory_compressed_attention(q, k, v, rng=1).shape            # 3 blocks of 3 tokens
    (9, 4)
    >>> out, W = memory_compressed_attention(q, k, v, rng=1, channels="shared", causal=True,
    ...                                      return_weights=True)
    >>> bool(np.allclose(W @ v, out)), bool(np.all(W[np.triu_indices(9, 1)] == 0))
    (True, True)
    >>> one = MemoryCompression(np.ones(1), np.ones(1))               # c = 1, the tap 1
    >>> exact = memory_compressed_attention(q, k, v, params=one, causal=True)
    >>> bool(np.allclose(exact, scaled_dot_product_attention(q, k, v, causal=True)))
    True
    """
    check_choice("mode", mode, MODES)
    if mode == "local":                                            # no kernels: params noted as given, None or not
        if scale is not None:
            raise ValueError("scale is an option of mode='compressed'; the local blocks use 1/sqrt(d_k)")
        note_draw("params", params)
        result = _local(q, k, v, block=block, causal=causal, method=method, return_weights=return_weights)
        if not return_weights:
            return result.output
        note_allowed(result.allowed)
        return result.output, result.weights
    q, k, v, batch = checked_qkv(q, k, v)
    (n, d_k), (m, d_v) = q.shape[-2:], v.shape[-2:]
    alignment = causal_alignment(causal)
    channels_given, channels = channels is not None, channels or "full"
    for name, value, choices in (("channels", channels, CHANNELS), ("memory", memory, MEMORIES),
                                 ("remainder", remainder, REMAINDERS), ("method", method, METHODS)):
        check_choice(name, value, choices)
    return_weights = check_bool("return_weights", return_weights)
    scale = default_scale(d_k) if scale is None else check_scale(scale)
    params = given_or_drawn("mca", "params", params, optional_rng(rng), what="its kernels",
                            draw=lambda r: init_memory_compression(r, 3 if factor is None else
                                                                   check_positive_int("factor", factor),
                                                                   d_k=d_k, d_v=d_v, channels=channels))
    params = _check_params(params, factor, channels, channels_given, d_k, d_v)
    if return_weights and params.channels == "full":
        raise ValueError("return_weights=True needs channels='shared' (scalar taps): with d × d taps the output "
                         "Σ_r P_ir Σ_t v_{rc+t} W_t mixes the values' channels, and no n × m matrix gives it")
    if return_weights:
        check_fits("the weights (return_weights=True)", (*batch, n, m))
    c = params.factor
    K_mem, V_mem = _compress(k, params.w_k, remainder), _compress(v, params.w_v, remainder)   # (..., M, d)
    first = memory == "tensor2tensor" and m > 0
    if first:                                                      # the first token, seen by every query
        K_mem = np.concatenate([k[..., :1, :], K_mem], axis=-2)
        V_mem = np.concatenate([v[..., :1, :], V_mem], axis=-2)
    visible = _visible(n, m, c, alignment, memory, remainder)
    out, P = _attend_memory(q, K_mem, V_mem, visible, scale, method, return_weights)
    if not return_weights:
        return out
    weights = _effective(P, m, c, remainder, params.w_v, first)
    note_allowed(lambda: _allowed(n, m, c, remainder, visible, first, weights.shape))
    return out, weights


def _check_params(params, factor, channels, channels_given, d_k, d_v) -> MemoryCompression:
    """The kernels (drawn or given), checked against ``factor``, ``channels`` and d."""
    if not isinstance(params, MemoryCompression):
        raise TypeError(f"params must be a MemoryCompression, got {type(params).__name__}")
    if factor is not None and check_positive_int("factor", factor) != params.factor:
        raise ValueError(f"factor={factor} but params has c={params.factor} taps (w_k shape {params.w_k.shape})")
    if channels_given and channels != params.channels:
        raise ValueError(f"channels={channels!r} but params has {params.channels!r} taps (w_k shape "
                         f"{params.w_k.shape})")
    if params.channels == "full" and (params.w_k.shape[1] != d_k or params.w_v.shape[1] != d_v):
        raise ValueError(f"params has w_k shape {params.w_k.shape} and w_v shape {params.w_v.shape}, but the keys "
                         f"have d_k={d_k} and the values d_v={d_v}")
    return params


def _visible(n: int, m: int, c: int, alignment, memory: str, remainder: str) -> NDArray | None:
    """How many memory items (the first token, then the blocks) each query sees: (n,), nondecreasing; None: all."""
    if alignment is None:
        return None
    M, pad = _layout(m, c, remainder)
    p = np.arange(n) + (0 if alignment == "top-left" else m - n)  # (n,)  query positions
    ends = np.arange(1, M + 1) * c - 1 - pad                       # (M,)  block r's last position
    if memory == "paper":
        return np.searchsorted(ends, p, side="right")              # blocks with rc + c − 1 ≤ i
    first = (p >= 0) if m > 0 else np.zeros(n, dtype=bool)
    return first + np.searchsorted(ends, p, side="left")          # the first token; blocks with rc + c − 1 < i


def _attend_memory(q, K, V, visible, scale, method, return_weights) -> tuple[NDArray, NDArray | None]:
    """softmax(Q K̃ᵀ·scale) Ṽ over the memory items each query sees (a prefix): ``(out, P or None)``."""
    P = None
    if return_weights:                                             # the weights from the equation path
        mask = None if visible is None else np.arange(K.shape[-2]) < visible[:, None]   # (n, M')
        out, P = scaled_dot_product_attention(q, K, V, mask, scale=scale, method="equation", return_weights=True)
        if method == "equation":
            return out, P
    if visible is None:
        return scaled_dot_product_attention(q, K, V, scale=scale, method=method), P
    batch = broadcast_batch({"q": q.shape[:-2], "memory": K.shape[:-2]})
    n = q.shape[-2]
    out = np.empty((*batch, n, V.shape[-1]))
    step = max(1, memory_budget() // (EQUATION_ARRAYS * 8 * max(1, math.prod(batch) * K.shape[-2])))
    for i0 in range(0, n, step):                                   # rows i0 … i1 − 1 see at most visible[i1 − 1]
        i1 = min(n, i0 + step)
        seen = int(visible[i1 - 1])
        mask = np.arange(seen) < visible[i0:i1, None]              # (rows, seen)
        out[..., i0:i1, :] = scaled_dot_product_attention(q[..., i0:i1, :], K[..., :seen, :], V[..., :seen, :], mask,
                                                          scale=scale, method=method)
    return out, P


def _effective(P: NDArray, m: int, c: int, remainder: str, taps: NDArray, first: bool) -> NDArray:
    """W = P C^V on the tokens: W_ij = P_{i,r} w_t for j = rc + t (− pad), plus P_{i0} on column 0 for the first
    token."""
    M, pad = _layout(m, c, remainder)
    blocks = P[..., int(first):]                                   # (..., n, M)
    spread = (blocks[..., None] * taps).reshape(*P.shape[:-1], M * c)   # (..., n, M·c)  P_ir w_t at rc + t
    W = np.zeros((*P.shape[:-1], m))
    W[..., :M * c - pad] = spread[..., pad:]
    if first:
        W[..., 0] += P[..., 0]
    return W


def _allowed(n: int, m: int, c: int, remainder: str, visible, first: bool, shape) -> NDArray | None:
    """The (query, token) pairs whose memory item the query sees; None when every query sees every token."""
    M, pad = _layout(m, c, remainder)
    j = np.arange(m)
    block = np.where(j + pad < M * c, (j + pad) // c, M)           # (m,)  token j's block (M: none)
    if visible is None:
        held = (block < M) | (first & (j == 0))
        return None if held.all() else np.broadcast_to(held, shape)
    blocks_seen = np.maximum(visible - first, 0)                  # (n,)  the first token comes first
    allowed = block < blocks_seen[:, None]                         # (n, m)
    if first:
        allowed[:, 0] |= visible > 0
    return np.broadcast_to(allowed, shape)


def blockwise_local_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    block: int = 256,
    causal: bool | str = False,
    method: str = "auto",
    return_weights: bool = False,
) -> NDArray | tuple[NDArray, NDArray]:
    r"""T-DMCA's local attention: blocks of b tokens, each attending within itself.

    .. math::

        \mathrm{out}_i = \sum_{j \in J_i} \operatorname{softmax}_j\Big(\frac{q_i \cdot k_j}{\sqrt{d_k}}\Big) v_j,
        \qquad J_i = \{ j : \lfloor j / b \rfloor = \lfloor i / b \rfloor \}\ (\text{causal: and } j \le i)

    Parameters
    ----------
    q : (..., n, d_k) array_like
        Queries.
    k : (..., m, d_k) array_like
        Keys.
    v : (..., m, d_v) array_like
        Values.
    block : int, default 256
        *b*, tokens per block (256 in the paper; the last block may be shorter).
    causal : {False, True, "top-left", "bottom-right"}, default False
        The decoder's form: ``j <= i`` within the block ("bottom-right": the n queries are the
        last n of the m positions).
    method : {"equation", "blocked", "auto"}, default "auto"
        "equation": the dense masked softmax; "blocked": the sparse kernel over the kept pairs
        (O(n·b) memory); "auto": "equation" while the dense scores fit the memory budget.
    return_weights : bool, default False
        Also return the dense (..., n, m) weights (block diagonal).

    Returns
    -------
    out : (..., n, d_v) ndarray
    weights : (..., n, m) ndarray
        Only if ``return_weights``.

    Notes
    -----
    §4.2.3: "Sequence tokens are divided into blocks of similar length and attention is performed
    in each block independently. ... we choose to have blocks of 256 tokens." This is the
    pattern of :func:`~refattn.sparse.block_local_pattern` (survey §4.1.1). tensor2tensor's
    ``masked_within_block_local_attention_1d`` is this causal form; its ``local_mask_right``
    layers ("locm") also see the previous block.

    References
    ----------
    .. [1] P. J. Liu et al., "Generating Wikipedia by Summarizing Long Sequences", ICLR 2018,
       arXiv:1801.10198v1, §4.2.3.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 5, 4))
    >>> out, W = blockwise_local_attention(q, k, v, block=2, return_weights=True)
    >>> (W > 0).astype(int)
    array([[1, 1, 0, 0, 0],
           [1, 1, 0, 0, 0],
           [0, 0, 1, 1, 0],
           [0, 0, 1, 1, 0],
           [0, 0, 0, 0, 1]])
    """
    result = _local(q, k, v, block=block, causal=causal, method=method, return_weights=return_weights)
    return (result.output, result.weights) if return_weights else result.output


def _local(q, k, v, *, block, causal, method, return_weights) -> AttentionResult:
    """The block-local pattern of b = ``block`` through the sparse path."""
    q, k, v, _ = checked_qkv(q, k, v)
    check_choice("method", method, METHODS)
    pattern = block_local_pattern(q.shape[-2], block, m=k.shape[-2], causal=causal)
    return attend_pattern(q, k, v, pattern, method=LOCAL_METHODS[method], return_weights=return_weights)


RECORD = Mechanism.of(
    memory_compressed_attention,                   # scalar taps, so that the effective matrix exists; short blocks
    defaults={"channels": "shared", "block": 3},
    id="mca", title="Memory-compressed attention", family="compressed", section="4.3.2", paper=LIU,
    equation=r"\operatorname{softmax}\!\Big(\frac{Q \tilde K^\top}{\sqrt{d_k}}\Big) \tilde V,\quad "
             r"\tilde K_r = \sum_{t<c} K_{rc+t} W^K_t,\ \tilde V_r = \sum_{t<c} V_{rc+t} W^V_t",
    time="O(n·(m/c)·d + m·d²)", memory="O(n·m/c), O((n + m)·d) blocked", kind="attention",
    methods=("equation", "blocked", "auto"), causal=True,
    position_dependent=True, normalized=False, nonnegative=False,
    examples=({"memory": "tensor2tensor"}, {"remainder": "pad", "factor": 2}, {"mode": "local"},
              {"mode": "local", "block": 2}),
    figure="refattn.figures.mca:mca",
    exact_options={"params": MemoryCompression(np.ones(1), np.ones(1))},
    exact_limit="c = 1 with the tap 1 (the identity kernel)", draws=("params",),
)
