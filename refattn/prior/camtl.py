r"""CA-MTL's conditional attention: a block-diagonal prior from a task embedding (Pilault et al., 2021; survey §4.5.3).

    Attention(Q, K, V, z) = softmax(QKᵀ/√d + M(z)) V                          (paper §2.1)
    M(z) = ⊕_j A'_j(z)                 block-diagonal, zero off the blocks
    A'_j(z) = A_j ⊙ (1 + γ(z)) + β(z)  γ(z), β(z): one FiLM of z, a scale and a shift per column

The prior depends on the task alone (no query or key enters it): a multi-task adapter that moves
the attention of a pretrained Transformer's upper layers task by task. What follows is the official
code (CAMTL/CA-MTL, ``src/model/encoders/conditional_modules.py``, class ``CBDA``, and
``ca_mtl_base.py``, class ``MyBertSelfAttention9``):

    z = E[task] W_t + b_t              task embedding table E, then a shared linear "task transformation"
    [γ | β] = z W_f + b_f              one FiLM: 2c numbers, γ the first c, β the last c
    N = d_model // L                   blocks requested; d_model must be a multiple of L (asserted there)
    c = ⌈L / N⌉                        block width; A is an L × c matrix
    M = blockdiag(rows [0, c), [c, 2c), …, [(N'−1)c, L) of A ⊙ (1 + γ) + β)[:, :L]

L is the maximum sequence length (``max_seq_length``). Block *j* holds rows [jc, min(jc + c, L)) of
the modulated A, and the same columns of M (the last block is cut to a square when c does not
divide L). ``torch.chunk`` makes N' = ⌈L/c⌉ blocks, which can be fewer than N (L = 6, N = 4: c = 2,
three blocks). γ and β are shared by every block (the FiLM acts on A's columns before it is cut
into blocks), and enter as (1 + γ), the code's FiLM; the survey writes A_j γ_j(z) + β_j(z), with a
FiLM per block whose output has the block's size.

Sequence length: the official code pads (or truncates) every input to L tokens and masks the padded
keys, so a sequence of n < L tokens sees the top-left n × n corner of M; n > L does not fit (a
``ValueError`` naming both). Initialisation as the official code: E, W_t, W_f ~ N(0, 0.02²)
(BERT's ``initializer_range``), b_t = b_f = 0, and A = 0 (``random_weight_matrix`` is
``torch.zeros``), so at initialisation M(z) is β(z) repeated down each block.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.budget import check_fits
from ..common.checks import (
    as_float,
    as_rng,
    broadcast_batch,
    causal_alignment,
    check_bool,
    check_scale,
    checked_qkv,
    default_scale,
)
from ..common.ints import check_non_negative_int, check_positive_int
from ..core.sdpa import scaled_dot_product_attention
from ..draws import given_or_drawn, optional_rng
from ..mechanism import Mechanism

__all__ = ["CamtlParams", "camtl_attention", "camtl_prior", "init_camtl"]

CAMTL = ('J. Pilault, A. Elhattami, C. Pal, 2021, "Conditionally Adaptive Multi-Task Learning: Improving Transfer '
         'Learning in NLP Using Fewer Parameters & Less Data", ICLR 2021, arXiv:2009.09139')
INIT_STD = 0.02                                                    # BERT's initializer_range


@dataclass(frozen=True, eq=False)
class CamtlParams:
    r"""CA-MTL's conditional attention parameters; weights act on the right (``z @ w_task``).

    Attributes
    ----------
    task_embeddings : (num_tasks, d_z) ndarray
        The task embedding table E (``nn.Embedding(num_tasks, hidden_size)``), one row per task.
    w_task, b_task : (d_z, d_z), (d_z,) ndarray
        The task transformation :math:`z = E[t] W_t + b_t`, shared by every layer.
    w_film, b_film : (d_z, 2c), (2c,) ndarray
        The FiLM :math:`[\gamma \,|\, \beta] = z W_f + b_f`: γ the first c columns, β the last c.
    A : (L, c) ndarray
        The trainable matrix cut into the diagonal blocks; L is the maximum sequence length and c
        the block width.
    """

    task_embeddings: NDArray
    w_task: NDArray
    b_task: NDArray
    w_film: NDArray
    b_film: NDArray
    A: NDArray

    def __post_init__(self) -> None:
        for name, ndim in (("task_embeddings", 2), ("w_task", 2), ("b_task", 1), ("w_film", 2), ("b_film", 1),
                           ("A", 2)):
            x = as_float(name, getattr(self, name))
            if x.ndim != ndim:
                raise ValueError(f"{name} must have {ndim} dimensions, got shape {x.shape}")
            object.__setattr__(self, name, x)
        d_z = self.task_embeddings.shape[1]
        L, c = self.A.shape
        expected = {"w_task": (d_z, d_z), "b_task": (d_z,), "w_film": (d_z, 2 * c), "b_film": (2 * c,)}
        for name, shape in expected.items():
            if getattr(self, name).shape != shape:
                raise ValueError(f"{name} must have shape {shape} (d_z={d_z} from task_embeddings, c={c} from A "
                                 f"of shape {self.A.shape}), got shape {getattr(self, name).shape}")
        if L < 1 or c < 1 or c > L:
            raise ValueError(f"A must have shape (L, c) with 1 <= c <= L (max_len L, block width c), got shape "
                             f"{self.A.shape}")

    @property
    def max_len(self) -> int:
        """L, the maximum sequence length (A's rows)."""
        return self.A.shape[0]

    @property
    def block_size(self) -> int:
        """c, the width of a block (the last one may be narrower)."""
        return self.A.shape[1]

    @property
    def num_blocks(self) -> int:
        """N' = ⌈L / c⌉, the number of diagonal blocks."""
        return -(-self.max_len // self.block_size)

    @property
    def num_tasks(self) -> int:
        """The rows of the task embedding table."""
        return self.task_embeddings.shape[0]


def init_camtl(rng, max_len: int, d_model: int, *, num_tasks: int = 1, num_blocks: int | None = None,
               a_std: float = 0.0) -> CamtlParams:
    r"""Draw CA-MTL's conditional attention parameters as the official code initialises them.

    .. math::

        E, W_t, W_f \sim \mathcal{N}(0, 0.02^2), \quad b_t = b_f = 0, \quad A = 0 \in \mathbb{R}^{L \times c},
        \quad c = \lceil L / N \rceil, \quad N = d_{model} / L

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw, in the order E, W_t, W_f (then A when ``a_std`` > 0).
    max_len : int
        L, the maximum sequence length (``max_seq_length``), >= 1.
    d_model : int
        :math:`d_z`, the width of the task embedding (``hidden_size`` in the official code), >= 1.
    num_tasks : int, default 1
        Rows of the task embedding table.
    num_blocks : int, optional
        N, the blocks requested. Default: the official code's ``hidden_size // max_seq_length``,
        which requires ``d_model`` to be a positive multiple of ``max_len`` (asserted there; a
        ``ValueError`` here). Blocks have width c = ⌈L/N⌉; when fewer than N of them cover L there
        are fewer (:attr:`CamtlParams.num_blocks`), as ``torch.chunk`` gives, and N >= L gives
        c = 1, a diagonal prior.
    a_std : float, default 0.0
        0 gives the official code's A = 0 (``random_weight_matrix = torch.zeros``); a positive
        value draws A ~ N(0, a_std²) instead (a prior that shows, as after training).

    Returns
    -------
    CamtlParams

    Examples
    --------
    >>> p = init_camtl(0, max_len=8, d_model=16)          # N = 16 // 8 = 2 blocks of width 4
    >>> p.A.shape, p.num_blocks, bool(np.all(p.A == 0))
    ((8, 4), 2, True)
    """
    rng = as_rng(rng)
    L = check_positive_int("max_len", max_len)
    d_z = check_positive_int("d_model", d_model)
    num_tasks = check_positive_int("num_tasks", num_tasks)
    if num_blocks is None:
        if d_z % L:
            raise ValueError(f"the official code takes N = d_model // max_len blocks and needs d_model to be a "
                             f"multiple of max_len: got d_model={d_z}, max_len={L} (or pass num_blocks=)")
        num_blocks = d_z // L
    N = check_positive_int("num_blocks", num_blocks)
    if isinstance(a_std, bool) or not isinstance(a_std, (int, float, np.integer, np.floating)):
        raise TypeError(f"a_std must be a real number, got {type(a_std).__name__}")
    if not 0.0 <= a_std < np.inf:
        raise ValueError(f"a_std must be finite and >= 0, got {a_std!r}")
    c = math.ceil(L / N)
    task_embeddings = INIT_STD * rng.standard_normal((num_tasks, d_z))   # nn.Embedding, BERT init
    w_task = INIT_STD * rng.standard_normal((d_z, d_z))            # task_transformation (Linear d → d)
    w_film = INIT_STD * rng.standard_normal((d_z, 2 * c))          # CBDA.gb_weights (Linear d → 2c)
    A = a_std * rng.standard_normal((L, c)) if a_std else np.zeros((L, c))
    return CamtlParams(task_embeddings, w_task, np.zeros(d_z), w_film, np.zeros(2 * c), A)


def _conditioning(params: CamtlParams, task_id, task_embedding) -> NDArray:
    """z (..., d_z): the given task embedding, or E[task_id] W_t + b_t (task 0 when neither is given)."""
    if task_embedding is not None:
        if task_id is not None:
            raise ValueError("pass task_id= or task_embedding= (z itself), not both")
        z = as_float("task_embedding", task_embedding, min_ndim=1)
        if z.shape[-1] != params.task_embeddings.shape[1]:
            raise ValueError(f"task_embedding must have shape (..., d_z={params.task_embeddings.shape[1]}), got "
                             f"shape {z.shape}")
        return z
    task_id = np.asarray(0 if task_id is None else task_id)
    if task_id.dtype.kind not in "iu":
        raise TypeError(f"task_id must be an integer or an integer array, got dtype {task_id.dtype}")
    if task_id.size and (task_id.min() < 0 or task_id.max() >= params.num_tasks):
        raise ValueError(f"task_id must lie in [0, num_tasks={params.num_tasks}), got values in "
                         f"[{task_id.min()}, {task_id.max()}]")
    return params.task_embeddings[task_id] @ params.w_task + params.b_task   # (..., d_z)  z = E[t] W_t + b_t


def camtl_prior(params: CamtlParams, *, task_id: ArrayLike | None = None,
                task_embedding: ArrayLike | None = None) -> NDArray:
    r"""The block-diagonal prior :math:`M(z) = \bigoplus_j \big(A_j \odot (1 + \gamma(z)) + \beta(z)\big)`.

    Parameters
    ----------
    params : CamtlParams
        From :func:`init_camtl`.
    task_id : int or array_like of int, optional
        The task, or one per batch element (any shape); z = E[task_id] W_t + b_t. Default task 0.
    task_embedding : (..., d_z) array_like, optional
        z itself, the vector the FiLM reads (instead of ``task_id``).

    Returns
    -------
    M : (..., L, L) ndarray
        Zero off the diagonal blocks (exactly); the leading dims are those of ``task_id`` or of
        ``task_embedding``.

    Examples
    --------
    >>> p = init_camtl(0, max_len=6, d_model=12, a_std=1.0)   # 2 blocks of width 3
    >>> M = camtl_prior(p)
    >>> M.shape, bool(np.all(M[:3, 3:] == 0)), bool(np.all(M[3:, :3] == 0))
    ((6, 6), True, True)
    """
    if not isinstance(params, CamtlParams):
        raise TypeError(f"params must be a CamtlParams (init_camtl), got {type(params).__name__}")
    z = _conditioning(params, task_id, task_embedding)             # (..., d_z)
    L, c = params.A.shape
    gb = z @ params.w_film + params.b_film                         # (..., 2c)  [γ | β] = z W_f + b_f
    gamma, beta = gb[..., None, :c], gb[..., None, c:]             # (..., 1, c)
    A_mod = params.A * (1.0 + gamma) + beta                        # (..., L, c)  A ⊙ (1 + γ) + β
    M = np.zeros((*z.shape[:-1], L, L))                            # (..., L, L)
    for start in range(0, L, c):                                   # block j: rows and columns [jc, jc + c) ∩ [0, L)
        stop = min(start + c, L)
        M[..., start:stop, start:stop] = A_mod[..., start:stop, : stop - start]
    return M


def camtl_attention(
    q: ArrayLike,
    k: ArrayLike,
    v: ArrayLike,
    *,
    params: CamtlParams | None = None,
    rng: np.random.Generator | int | None = None,
    task_id: ArrayLike | None = None,
    task_embedding: ArrayLike | None = None,
    max_len: int | None = None,
    d_model: int | None = None,
    num_blocks: int | None = None,
    causal: bool | str = False,
    scale: float | None = None,
    return_weights: bool = False,
) -> NDArray | tuple[NDArray, NDArray]:
    r"""CA-MTL's conditional attention: softmax attention plus the task's block-diagonal prior.

    .. math::

        \operatorname{Attention}(Q, K, V, z) = \operatorname{softmax}\Big(\frac{Q K^\top}{\sqrt{d_k}}
        + M(z)\Big) V, \qquad M(z) = \bigoplus_{j} \big(A_j \odot (1 + \gamma(z)) + \beta(z)\big)

    Parameters
    ----------
    q : (..., n, d_k) array_like
        Queries.
    k : (..., m, d_k) array_like
        Keys of the same sequence (n = m; ``causal="bottom-right"``: the n queries are the last n
        of the m positions).
    v : (..., m, d_v) array_like
        Values.
    params : CamtlParams, optional
        The parameters (:func:`init_camtl`); drawn from ``rng`` when not given.
    rng : numpy.random.Generator or int, optional
        Source of the parameters, drawn by :func:`init_camtl` with ``max_len``, ``d_model`` and
        ``num_blocks``; unused when ``params`` is given.
    task_id : int or array_like of int, optional
        The task, or one per batch element: its shape broadcasts against the leading dims of q,
        k, v from the right, so for (B, H, n, d) inputs pass ``task_id[:, None]`` (the official
        code adds one prior to every head). Default task 0.
    task_embedding : (..., d_z) array_like, optional
        z itself, instead of ``task_id``; its leading dims broadcast like ``task_id``.
    max_len : int, optional
        L for the draw; default m, the keys' length. With ``params``, it must be theirs.
    d_model : int, optional
        :math:`d_z` for the draw; default 2L (so N = 2 blocks, the official rule N = d_model // L).
        Only with ``rng``.
    num_blocks : int, optional
        N for the draw (:func:`init_camtl`). Only with ``rng``.
    causal : {False, True, "top-left", "bottom-right"}, default False
        CA-MTL is an encoder; the official code's decoder setting (``config.is_decoder``) masks
        the future as well. Causal masking is by selection: row *i* sees keys j <= i (+ m − n
        bottom-right) and the prior at those pairs only.
    scale : float, optional
        Multiplier of the scores; default :math:`1/\sqrt{d_k}`.
    return_weights : bool, default False
        Also return the weights.

    Returns
    -------
    out : (..., n, d_v) ndarray
    weights : (..., n, m) ndarray
        Only if ``return_weights``.

    Notes
    -----
    **Lengths.** The prior covers L positions. Query *i* sits at position *i* (``"bottom-right"``:
    *i* + m − n) and key *j* at *j*; the prior added to their score is :math:`M_{ij}`. The
    official code pads every sequence to L tokens and masks the padded keys, which is the
    top-left m × m corner of M for a sequence of m < L tokens; m > L is a ``ValueError`` (the
    official code truncates its inputs to L and the addition of an L × L prior fails otherwise).
    Self-attention only: n != m is refused except with ``causal="bottom-right"``.

    **Exact limit.** A = 0 and β(z) = 0 (the β columns of W_f and b_f zero, or z = 0 with the
    initial b_f = 0) make M = 0: softmax attention, whatever γ.

    Time O(n·m·d + L²), memory O(n·m + L²).

    References
    ----------
    .. [1] J. Pilault, A. Elhattami, C. Pal, "Conditionally Adaptive Multi-Task Learning: Improving
       Transfer Learning in NLP Using Fewer Parameters & Less Data", ICLR 2021, arXiv:2009.09139v3,
       §2.1 (conditional attention).
    .. [2] CAMTL/CA-MTL, ``src/model/encoders/conditional_modules.py`` (``CBDA``),
       ``src/model/encoders/ca_mtl_base.py`` (``MyBertSelfAttention9``, ``CaMtlBaseEncoder``).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = rng.standard_normal((3, 6, 4))
    >>> p = init_camtl(1, max_len=8, d_model=16, num_tasks=3, a_std=1.0)
    >>> out, A = camtl_attention(q, k, v, params=p, task_id=2, return_weights=True)
    >>> out.shape, bool(np.allclose(A.sum(axis=-1), 1.0))
    ((6, 4), True)
    >>> flat = CamtlParams(p.task_embeddings, p.w_task, p.b_task, p.w_film, p.b_film, 0 * p.A)
    >>> z0 = np.zeros(16)                                  # β(0) = b_f = 0 and A = 0: M = 0
    >>> bool(np.allclose(camtl_attention(q, k, v, params=flat, task_embedding=z0),
    ...                  scaled_dot_product_attention(q, k, v), rtol=1e-12, atol=1e-12))
    True
    """
    q, k, v, batch = checked_qkv(q, k, v)
    alignment = causal_alignment(causal)
    return_weights = check_bool("return_weights", return_weights)
    rng = optional_rng(rng)
    n, m = q.shape[-2], k.shape[-2]
    if n != m and alignment != "bottom-right":
        raise ValueError(f"camtl is self-attention over one sequence: q has n={n} queries but k has m={m} keys "
                         "(causal='bottom-right' takes the last n of m positions)")
    scale = default_scale(q.shape[-1]) if scale is None else check_scale(scale)
    if params is not None:
        if not isinstance(params, CamtlParams):
            raise TypeError(f"params must be a CamtlParams (init_camtl), got {type(params).__name__}")
        if max_len is not None and check_non_negative_int("max_len", max_len) != params.max_len:
            raise ValueError(f"max_len={max_len} but params has A of shape {params.A.shape} "
                             f"(max_len={params.max_len})")
        if d_model is not None or num_blocks is not None:
            raise ValueError("d_model= and num_blocks= shape the draw from rng; params= fixes them already (d_model="
                             f"{params.task_embeddings.shape[1]}, {params.num_blocks} blocks of width "
                             f"{params.block_size})")
    L = max(m, 1) if max_len is None else check_positive_int("max_len", max_len)
    params = given_or_drawn("camtl", "params", params, rng,
                            lambda r: init_camtl(r, L, 2 * L if d_model is None else d_model, num_blocks=num_blocks),
                            what="its params")
    if m > params.max_len:
        raise ValueError(f"camtl's prior covers max_len={params.max_len} positions, but k has m={m} keys (the "
                         "official code pads or truncates every sequence to max_len tokens)")
    M = camtl_prior(params, task_id=task_id, task_embedding=task_embedding)   # (..., L, L)
    batch = broadcast_batch({"q, k, v": batch, "task_id or task_embedding": M.shape[:-2]})
    if return_weights:
        check_fits("the weights (return_weights=True)", (*batch, n, m))
    rows = np.arange(n) + (m - n if alignment == "bottom-right" else 0)   # query positions (< 0: sees no key)
    prior = M[..., np.maximum(rows, 0), :m]                        # (..., n, m)  M_{p_i j}
    return scaled_dot_product_attention(q, k, v, mask=prior, causal=alignment or False, scale=scale,
                                        method="equation", return_weights=return_weights)


def _trained(n: int, m: int) -> dict:
    """An example setting: three tasks, A and the FiLM of unit scale (a trained-looking prior), task 1."""
    rng = np.random.default_rng(5)
    L, d_z, c = m + 2, 4, 3                                        # L not a multiple of c, sequences below L
    params = CamtlParams(rng.standard_normal((3, d_z)), rng.standard_normal((d_z, d_z)), rng.standard_normal(d_z),
                         rng.standard_normal((d_z, 2 * c)), rng.standard_normal(2 * c),
                         rng.standard_normal((L, c)))
    return {"params": params, "task_id": 1}


def _exact(n: int, m: int) -> dict:
    """A = 0 and β = 0 (W_f's β columns and b_f's β half zero), with random γ and task embeddings: M = 0."""
    options = _trained(n, m)
    p = options["params"]
    c = p.block_size
    w_film, b_film = p.w_film.copy(), p.b_film.copy()
    w_film[:, c:], b_film[c:] = 0.0, 0.0
    options["params"] = CamtlParams(p.task_embeddings, p.w_task, p.b_task, w_film, b_film, np.zeros_like(p.A))
    return options


RECORD = Mechanism.of(
    camtl_attention,
    id="camtl", title="CA-MTL conditional attention (block-diagonal task prior)", family="prior", section="4.5.3",
    paper=CAMTL,
    equation=r"\operatorname{softmax}\!\Big(\frac{QK^\top}{\sqrt{d_k}} + \bigoplus_j \big(A_j \odot (1 + "
             r"\gamma(z)) + \beta(z)\big)\Big) V",
    time="O(n·m·d + L²)", memory="O(n·m + L²)", kind="attention", causal=True, position_dependent=True, cross=False,
    examples=(_trained(7, 7), {"num_blocks": 3, "max_len": 9}),
    figure="refattn.figures.camtl:camtl",
    exact_options=_exact, exact_limit="A = 0 and β(z) = 0 (M = 0, whatever γ)",
    draws=("params",),
)
