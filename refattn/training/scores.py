r"""Head scores: what a trained head does, measured on its attention weights.

    previous-token score(h) = mean_i  A_h[i, i − 1]
    induction score(h)      = mean_i  Σ_{k ∈ P(i)} A_h[i, k],   P(i) = { j + 1 : j < i, t_j = t_i }
    anti-diagonal mass(h)   = mean_t  A_h[t, m − 1 − t],        t < min(T, m)

The previous-token and induction scores follow Olsson et al. (2022): a previous-token head attends
to the token before the current one; an induction head does *prefix matching*: it attends to a
token that was preceded by the current token, i.e. to the token right after an earlier occurrence
of the current token (P(i), the set of such positions; on a sequence without repeats in its first
copy, P(i) holds one position). Each is a mean over the query rows that have a target (rows 1 …
for the previous token; rows with an earlier occurrence for induction) and over the batch,
restricted further by ``query_mask`` (e.g. to leave out padding), so a score is the average
attention mass a head puts where the pattern says: 1 for a perfect head, about 1/i for uniform
attention.

The anti-diagonal mass scores the cross-attention of the ``"reverse"`` model: decoder row *t*
predicts source token m − 1 − t, so a head that looks up the token it must copy puts its mass on
the mirrored position.

References
----------
.. [1] C. Olsson et al., 2022, "In-context Learning and Induction Heads", Transformer Circuits
   Thread, arXiv:2209.11895 (§ "Definitions": previous token heads, prefix matching).
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.checks import as_rng
from ..common.ints import check_positive_int
from .model import decoder_logits, seq2seq_logits
from .tasks import PAD, get_task

__all__ = ["antidiagonal_mass", "head_scores", "induction_score", "previous_token_score"]


def previous_token_score(weights: ArrayLike, *, query_mask: ArrayLike | None = None) -> NDArray:
    r"""Attention each head pays to the previous token, averaged over query rows 1 … n − 1 and the batch.

    Parameters
    ----------
    weights : (..., h, n, n) array_like
        Self-attention weights of *h* heads (rows = queries).
    query_mask : (..., n) array_like of bool, optional
        Query rows to count (broadcast against the batch axes); default all. Row 0 (no previous
        token) never counts.

    Returns
    -------
    score : (h,) ndarray
        In [0, 1] for weights in [0, 1]; NaN if no row counts.

    Examples
    --------
    >>> A = np.eye(4, k=-1)[None]; A[0, 0, 0] = 1.0         # one head, a perfect previous-token map
    >>> previous_token_score(A)
    array([1.])
    """
    A, rows = _self_attention(weights, query_mask)
    n = A.shape[-1]
    target = np.eye(n, k=-1, dtype=bool)                               # (n, n)  k = i − 1
    return _mean_mass(A, np.broadcast_to(target, A.shape[:-3] + (n, n)), rows & (np.arange(n) >= 1))


def induction_score(weights: ArrayLike, tokens: ArrayLike, *, query_mask: ArrayLike | None = None) -> NDArray:
    r"""Attention each head pays to the tokens right after earlier occurrences of the current token.

    Parameters
    ----------
    weights : (..., h, n, n) array_like
        Self-attention weights of *h* heads (rows = queries).
    tokens : (..., n) array_like of int
        The ids the model read, one per query row (batch axes as those of ``weights``).
    query_mask : (..., n) array_like of bool, optional
        Query rows to count (broadcast against the batch axes); default all. Only rows whose token
        occurred before count in any case.

    Returns
    -------
    score : (h,) ndarray
        Mean over counted rows of the mass on P(i) = {j + 1 : j < i, t_j = t_i}; NaN if no row counts.

    Examples
    --------
    Tokens ``a b a b``: row 2 (``a``) should look at 1 (``b`` came after the earlier ``a``), row 3
    at 2.

    >>> A = np.zeros((1, 4, 4)); A[0, 2, 1] = 1.0; A[0, 3, 2] = 0.5; A[0, 3, 3] = 0.5
    >>> induction_score(A, [0, 1, 0, 1])
    array([0.75])
    """
    A, rows = _self_attention(weights, query_mask)
    tokens = np.asarray(tokens)
    n = A.shape[-1]
    if tokens.dtype.kind not in "iu" or tokens.shape[-1:] != (n,):
        raise ValueError(f"tokens must be integer ids of shape (..., n) with n = {n} (weights {A.shape}), got "
                         f"dtype {tokens.dtype} with shape {tokens.shape}")
    same = tokens[..., :, None] == tokens[..., None, :]                # (..., n, n)  t_i = t_j
    earlier = same & np.tri(n, k=-1, dtype=bool)                       # j < i
    target = np.zeros(same.shape, dtype=bool)
    target[..., 1:] = earlier[..., :-1]                                # k = j + 1
    try:
        target = np.broadcast_to(target, A.shape[:-3] + (n, n))           # tokens' batch axes against weights'
    except ValueError:
        raise ValueError(f"tokens with shape {tokens.shape} do not fit weights with shape {A.shape}") from None
    return _mean_mass(A, target, rows & target.any(axis=-1))


def antidiagonal_mass(weights: ArrayLike) -> NDArray:
    r"""Cross-attention mass each head puts on the mirrored source position m − 1 − t, over rows t < min(T, m).

    Parameters
    ----------
    weights : (..., h, T, m) array_like
        Cross-attention weights of *h* heads: *T* decoder rows, *m* source positions.

    Returns
    -------
    mass : (h,) ndarray
        Mean over the batch and the rows t = 0 … min(T, m) − 1 of ``weights[..., t, m - 1 - t]``;
        rows past the source length (the ``EOS`` step of ``"reverse"``) have no mirror and are left
        out.

    Examples
    --------
    >>> A = np.stack([np.eye(3)[::-1], np.full((3, 3), 1 / 3)])     # head 0 anti-diagonal, head 1 uniform
    >>> antidiagonal_mass(A)
    array([1.        , 0.33333333])
    """
    A = _weights(weights)
    T, m = A.shape[-2:]
    rows = np.arange(min(T, m))
    if rows.size == 0:
        raise ValueError(f"weights must have at least one row and one column, got shape {A.shape}")
    mirrored = A[..., rows, m - 1 - rows]                              # (..., h, min(T, m))
    return mirrored.mean(axis=-1).reshape(-1, A.shape[-3]).mean(axis=0)


def head_scores(task, params, *, num_sequences: int, rng) -> dict[str, dict[str, NDArray]]:
    r"""The scores of every head of a trained model of ``task`` on fresh sequences.

    Parameters
    ----------
    task : str or Task
        ``"reverse"`` or ``"induction"``.
    params : Seq2SeqParams or DecoderOnlyParams
        The model.
    num_sequences : int
        Sequences drawn from ``rng`` with the task's generator (teacher forcing).
    rng : numpy.random.Generator or int
        Source of the sequences.

    Returns
    -------
    dict
        ``"reverse"``: ``{"decoder.{l}.cross": {"antidiagonal": (h,)}}`` for every decoder layer;
        ``"induction"``: ``{"layer.{l}": {"previous_token": (h,), "induction": (h,)}}`` for every layer,
        counting the rows of real tokens (not ``PAD``).

    Examples
    --------
    >>> from refattn.training import pretrained
    >>> {name: s["induction"].round(2) for name, s in head_scores("induction", pretrained("induction"),
    ...                                                            num_sequences=50, rng=0).items()}
    {'layer.0': array([0.01]), 'layer.1': array([1.])}
    """
    task = get_task(task)
    batch = task.draw(as_rng(rng), check_positive_int("num_sequences", num_sequences))
    if task.kind == "seq2seq":
        _, weights = seq2seq_logits(params, batch.src, batch.inputs, return_weights=True)
        return {name: {"antidiagonal": antidiagonal_mass(A)} for name, A in weights.items() if name.endswith(".cross")}
    _, weights = decoder_logits(params, batch.inputs, return_weights=True)
    real = batch.inputs != PAD
    return {name: {"previous_token": previous_token_score(A, query_mask=real),
                   "induction": induction_score(A, batch.inputs, query_mask=real)} for name, A in weights.items()}


def _weights(weights: ArrayLike) -> NDArray:
    A = np.asarray(weights)
    if A.dtype.kind not in "fiu" or A.ndim < 3:
        raise ValueError(f"weights must be real attention weights of shape (..., h, n, m), got dtype {A.dtype} "
                         f"with shape {A.shape}")
    return A.astype(np.float64, copy=False)


def _self_attention(weights: ArrayLike, query_mask: ArrayLike | None) -> tuple[NDArray, NDArray]:
    """``weights`` as float64 (..., h, n, n) and the counted query rows, (..., n) over the batch axes."""
    A = _weights(weights)
    n = A.shape[-1]
    if A.shape[-2] != n:
        raise ValueError(f"weights must be self-attention (..., h, n, n), got shape {A.shape}")
    batch = A.shape[:-3]
    if query_mask is None:
        return A, np.ones(batch + (n,), dtype=bool)
    mask = np.asarray(query_mask)
    if mask.dtype != bool:
        raise TypeError(f"query_mask must be boolean, got dtype {mask.dtype}")
    try:
        return A, np.broadcast_to(mask, batch + (n,))
    except ValueError:
        raise ValueError(f"query_mask with shape {mask.shape} does not fit weights with shape {A.shape}") from None


def _mean_mass(A: NDArray, target: NDArray, rows: NDArray) -> NDArray:
    """Per head: mean over counted rows (…, n) of Σ_k A[…, h, i, k]·target[…, i, k]."""
    mass = np.einsum("...hik,...ik->...hi", A, target.astype(np.float64))   # (..., h, n)
    rows = rows[..., None, :]                                                # (..., 1, n)
    rows = np.broadcast_to(rows, mass.shape)
    h = A.shape[-3]
    counted = np.moveaxis(rows, -2, 0).reshape(h, -1)                        # (h, rows)
    values = np.moveaxis(mass, -2, 0).reshape(h, -1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counted, values, 0.0).sum(axis=1) / counted.sum(axis=1)
