r"""Learned absolute positional embeddings: a table of one trained vector per position, added to the inputs.

BERT (Devlin et al., 2019) and GPT-2 (Radford et al., 2019), like the learned variant the Transformer
paper compared with its sinusoids (Vaswani et al., 2017, §3.5: "nearly identical results"), keep a
table P of max_len rows and add row t to the input at position t:

    x'_t = x_t + P[t],     P ∈ ℝ^{max_len × d_model},  t = 0 … n − 1.

The table is a parameter like any other, so it knows no position beyond its last row: a sequence
longer than max_len has no encoding (BERT's code asserts ``seq_length <= max_position_embeddings``),
and here it raises a ValueError naming both lengths. Before training its rows are independent draws:
unlike sinusoids, nearby positions are no more alike than distant ones.

Initialisation (``init``):
- "bert": truncated normal, standard deviation 0.02, values beyond two standard deviations redrawn
  (google-research/bert, modeling.py: ``full_position_embeddings`` with
  ``create_initializer(initializer_range)`` = ``tf.truncated_normal_initializer(stddev=0.02)``);
- "gpt2": normal, standard deviation 0.01 (openai/gpt-2, src/model.py: ``wpe`` with
  ``tf.random_normal_initializer(stddev=0.01)``; Hugging Face's port draws 0.02 instead).
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..common.checks import as_float, as_rng, check_choice
from ..common.ints import check_non_negative_int, check_positive_int
from ..mechanism import Mechanism

__all__ = ["init_learned_pe", "learned_positional_encoding"]

DEVLIN = ('J. Devlin, M.-W. Chang, K. Lee, K. Toutanova, 2019, "BERT: Pre-training of Deep Bidirectional '
          'Transformers for Language Understanding", NAACL 2019, arXiv:1810.04805; A. Radford et al., 2019, '
          '"Language Models are Unsupervised Multitask Learners" (GPT-2)')
INITS = {"bert": 0.02, "gpt2": 0.01}


def init_learned_pe(rng, max_len: int, d_model: int, *, init: str = "bert") -> NDArray:
    r"""Draw the table P, (max_len, d_model), as BERT or GPT-2 initialise it.

    Parameters
    ----------
    rng : numpy.random.Generator or int
        Source of the draw (row by row, then the redraws of the truncated normal in order).
    max_len : int
        Number of positions (BERT's ``max_position_embeddings`` = 512, GPT-2's ``n_ctx`` = 1024).
    d_model : int
        Width of the embeddings.
    init : {"bert", "gpt2"}, default "bert"
        "bert": truncated :math:`\mathcal{N}(0, 0.02^2)`, |P| ≤ 0.04 (values beyond redrawn);
        "gpt2": :math:`\mathcal{N}(0, 0.01^2)`.

    Returns
    -------
    P : (max_len, d_model) ndarray

    Examples
    --------
    >>> P = init_learned_pe(0, 512, 768)
    >>> P.shape, bool(np.abs(P).max() <= 0.04), round(float(P.std()), 3)
    ((512, 768), True, 0.018)
    """
    rng = as_rng(rng)
    max_len = check_positive_int("max_len", max_len)
    d_model = check_non_negative_int("d_model", d_model)
    check_choice("init", init, tuple(INITS))
    std = INITS[init]
    P = rng.standard_normal((max_len, d_model)) * std
    if init == "bert":                                             # TF's truncated normal: redraw beyond 2σ
        outside = np.abs(P) > 2 * std
        while outside.any():
            P[outside] = rng.standard_normal(int(outside.sum())) * std
            outside = np.abs(P) > 2 * std
    return P


def learned_positional_encoding(x: ArrayLike, table: ArrayLike, *, offset: int = 0) -> NDArray:
    r"""Add the learned embedding of each position to the inputs: :math:`x'_t = x_t + P[\text{offset} + t]`.

    Parameters
    ----------
    x : (..., n, d_model) array_like
        Inputs (token embeddings), position t in row t.
    table : (max_len, d_model) array_like
        P (:func:`init_learned_pe`, or a trained table).
    offset : int, default 0
        Position of row 0 (a decoder step with a cache of ``offset`` earlier tokens).

    Returns
    -------
    (..., n, d_model) ndarray

    Raises
    ------
    ValueError
        When offset + n > max_len: the table has no row for the later positions.

    Examples
    --------
    >>> P = init_learned_pe(0, 8, 4)
    >>> x = np.zeros((5, 4))
    >>> bool(np.array_equal(learned_positional_encoding(x, P), P[:5]))
    True
    >>> learned_positional_encoding(np.zeros((9, 4)), P)
    Traceback (most recent call last):
    ...
    ValueError: the learned table has max_len=8 positions, but x has n=9 (offset 0): no row for position 8 on
    """
    x = as_float("x", x, min_ndim=2)
    table = as_float("table", table, min_ndim=2)
    if table.ndim != 2:
        raise ValueError(f"table must be a (max_len, d_model) matrix, got shape {table.shape}")
    if table.shape[1] != x.shape[-1]:
        raise ValueError(f"table has d_model={table.shape[1]} (shape {table.shape}) but x has d_model={x.shape[-1]} "
                         f"(shape {x.shape})")
    offset = check_non_negative_int("offset", offset)
    n, max_len = x.shape[-2], table.shape[0]
    if offset + n > max_len:
        raise ValueError(f"the learned table has max_len={max_len} positions, but x has n={n} (offset {offset}): "
                         f"no row for position {max_len} on")
    return x + table[offset:offset + n]                            # (..., n, d_model)  x_t + P[offset + t]


RECORD = Mechanism(
    id="learned_pe", title="Learned absolute positional embeddings (BERT, GPT-2)", family="positional",
    section="5.1.1", paper=DEVLIN, equation=r"x'_t = x_t + P_t,\quad P \in \mathbb{R}^{L_{\max} \times d}",
    time="O(n·d)", memory="O(L_max·d)", kind="component", function=learned_positional_encoding, causal=True,
    figure="refattn.figures.learned_pe:learned_pe", exact_options=None, exact_limit="a component (no apply)",
)
