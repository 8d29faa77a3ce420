r"""Figure of CA-MTL's conditional attention (Pilault et al., 2021): the block-diagonal task prior beside the scores.

Seeded input (:func:`~refattn.figures.common.seeded_qkv`: n = m = 14, d = 8, seed 4) and parameters
drawn from the same seed at a trained-looking scale: A and two task embeddings N(0, 1), the task
transformation and the FiLM N(0, 1/d_model), zero biases (the official initialisation, A = 0 and
weights N(0, 0.02²), gives a prior too faint to see). L = 14 with d_model = 42 gives the official
code's N = 42 // 14 = 3 blocks of width ⌈14/3⌉ = 5, the last one cut to 4. Top: the prior M(z) of
task 0 and of task 1 on one signed scale (zero off the blocks), the scores QKᵀ/√d, and the scores
plus task 0's prior. Bottom: softmax attention without the prior, then the weights with each task's
prior.
"""
from __future__ import annotations

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure

from .. import registry, scaled_dot_product_attention
from ..prior import CamtlParams, camtl_prior
from ..viz import STYLE_PATH, draw_attention, figure
from .common import seeded_qkv

__all__ = ["camtl"]

N, SEED, D_MODEL, TASKS = 14, 4, 42, 2


def _params(seed: int) -> CamtlParams:
    """Unit-scale parameters in the official shapes: L = N, c = ⌈L / (d_model // L)⌉."""
    rng = np.random.default_rng(seed)
    c = -(-N // (D_MODEL // N))
    width = 1.0 / np.sqrt(D_MODEL)
    return CamtlParams(rng.standard_normal((TASKS, D_MODEL)), width * rng.standard_normal((D_MODEL, D_MODEL)),
                       np.zeros(D_MODEL), width * rng.standard_normal((D_MODEL, 2 * c)), np.zeros(2 * c),
                       rng.standard_normal((N, c)))


@matplotlib.style.context(STYLE_PATH)
def camtl() -> Figure:
    """The priors of two tasks, the scores with and without one, and the weights with and without each.

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    q, k, v = seeded_qkv(SEED, N)
    params = _params(SEED)
    record = registry.get("camtl")
    weights = [record.apply(q, k, v, params=params, task_id=t, return_weights=True).weights for t in range(TASKS)]
    M = np.stack([camtl_prior(params, task_id=t) for t in range(TASKS)])
    S = q @ k.T / np.sqrt(q.shape[-1])
    plain = scaled_dot_product_attention(q, k, v, return_weights=True)[1]
    for t in range(TASKS):
        with_prior = scaled_dot_product_attention(q, k, v, mask=M[t], return_weights=True)[1]
        if not np.allclose(weights[t], with_prior, rtol=1e-12, atol=1e-12):
            raise ValueError("camtl: the figure's prior and the record's apply disagree")

    fig = figure((13.6, 8.4))
    top, bottom = fig.subfigures(2, 1)
    priors, scores = top.subfigures(1, 2)
    limit = float(np.abs(np.concatenate([M.ravel(), S.ravel(), (S + M[0]).ravel()])).max())
    draw_attention(priors, M, signed=True, vmin=None, vmax=limit, annotate=False,
                   titles=[f"prior M(z), task {t}" for t in range(TASKS)])
    draw_attention(scores, np.stack([S, S + M[0]]), signed=True, vmin=None, vmax=limit, annotate=False,
                   titles=["scores QKᵀ/√d", "QKᵀ/√d + M(z), task 0"])
    draw_attention(bottom, np.stack([plain, *weights]), annotate=False,
                   titles=["softmax(QKᵀ/√d), no prior", *(f"with task {t}'s prior" for t in range(TASKS))])
    fig.suptitle(f"CA-MTL conditional attention (Pilault et al., 2021): a block-diagonal prior per task\n"
                 f"L = {N}, d_model = {D_MODEL}: {params.num_blocks} blocks of width {params.block_size} (the last "
                 f"{N - (params.num_blocks - 1) * params.block_size}); n = m = {N}, d = 8, seed {SEED}")
    return fig
