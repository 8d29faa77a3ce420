r"""Figure of memory-compressed and local attention (Liu et al. 2018, §4.2.3): the convolutions as matrices, the error.

Seeded input (:func:`~refattn.figures.common.seeded_qkv`: n = m = 16, d = 8, seed 5) and the registry
record's ``apply``: c = 3 with scalar taps drawn from the fixed seed (Glorot uniform), so that the
effective matrix exists. Top: the two convolutions as (M × m) matrices C^K and C^V (C_{r, 3r+t} = w_t;
token 15 is in no block and is dropped, as in the official code) and the compressed memory
K̃ = C^K K and Ṽ = C^V V (M × d). Middle: the effective matrix W = P C^V (out = W V), the local attention
of blocks of b = 4 tokens (``mode="local"``) and exact softmax attention, non-causal and causal, on one
signed scale; grey = pairs the mechanism does not let the query see (causal: block r is seen from the
end of the block on). Bottom: the relative output error against softmax as c grows, n = m = 64, with
mean-pooling taps (w_t = 1/c, exact at c = 1), on i.i.d. input and on input that varies smoothly along
the sequence.
"""
from __future__ import annotations

import matplotlib.style
import numpy as np
from matplotlib.figure import Figure

import refattn as ra

from .. import registry
from ..compressed import MemoryCompression, compress_memory, compression_matrix, memory_compressed_attention
from ..viz import STYLE_PATH, draw_attention, figure, roundoff, roundoff_text
from .common import seeded_qkv
from .linformer import smooth_qkv

__all__ = ["mca"]

N, C, BLOCK, SEED = 16, 3, 4, 5
SWEEP_N, SWEEP_C = 64, (1, 2, 4, 8, 16, 32)


@matplotlib.style.context(STYLE_PATH)
def mca() -> Figure:
    """The convolutions and the compressed memory; W = P C^V and local attention beside softmax; error against c.

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    q, k, v = seeded_qkv(SEED, N)
    record = registry.get("mca")
    runs = {causal: record.apply(q, k, v, causal=causal, rng=SEED, return_weights=True, return_draws=True)
            for causal in (False, True)}
    params = runs[False].draws["params"]
    CK, CV = compression_matrix(N, params.w_k), compression_matrix(N, params.w_v)
    if not np.allclose(CV @ v, compress_memory(v, params.w_v), rtol=1e-12, atol=1e-12):
        raise ValueError("mca: the figure's compression matrix and the record's convolution disagree")

    fig = figure((13.6, 13.0))
    top, middle, bottom = fig.subfigures(3, 1, height_ratios=[0.5, 1.45, 0.85])
    kernels, memory = top.subfigures(1, 2, width_ratios=[2.2, 1.0])
    draw_attention(kernels, np.stack([CK, CV]), signed=True, annotate=False, xlabel="position j", ylabel="block r",
                   titles=[f"C^K: taps {_taps(params.w_k)}", f"C^V: taps {_taps(params.w_v)}"])
    draw_attention(memory, np.stack([CK @ k, CV @ v]), signed=True, annotate=False, xlabel="channel",
                   ylabel="block r", titles=["K̃ = C^K K", "Ṽ = C^V V"])
    _matrices(middle, q, k, v, runs)
    _error_panel(bottom.add_subplot())
    fig.suptitle(f"Memory-compressed attention (Liu et al., 2018): a strided convolution, kernel = stride = c = {C}, "
                 f"over keys and values, n = m = {N} (seed {SEED})")
    return fig


def _taps(w) -> str:
    return "(" + ", ".join(f"{x:.2f}" for x in w) + ")"


def _matrices(container, q, k, v, runs) -> None:
    """Rows non-causal, causal: [W = P C^V | local, b = 4 | softmax] with each one's allowed pairs."""
    record = registry.get("mca")
    grid, allowed, titles = [], [], []
    for causal in (False, True):
        local = record.apply(q, k, v, causal=causal, mode="local", block=BLOCK, return_weights=True)
        out, S = ra.scaled_dot_product_attention(q, k, v, causal=causal, return_weights=True)
        mask = ra.causal_mask(N) if causal else np.ones((N, N), dtype=bool)
        grid.append([runs[causal].weights, local.weights, S])
        allowed.append([np.ones((N, N), dtype=bool) if runs[causal].allowed is None else runs[causal].allowed,
                        local.allowed, mask])
        errors = [np.linalg.norm(r.output - out) / np.linalg.norm(out) for r in (runs[causal], local)]
        form = "causal" if causal else "non-causal"
        titles.append([f"{form}: W = P C^V (error {roundoff_text(errors[0], '.2f')})", f"{form}: local, b = {BLOCK} "
                       f"(error {roundoff_text(errors[1], '.2f')})", f"{form}: softmax"])
    draw_attention(container, np.array(grid), allowed=np.array(allowed), signed=True, annotate=False, titles=titles,
                   suptitle="the effective matrices (out = W V) beside softmax, one signed scale; "
                            "error = ‖y − y_sm‖/‖y_sm‖; grey: pairs not seen")


def _error_panel(ax) -> None:
    """‖y − y_sm‖/‖y_sm‖ against c with mean-pooling taps: i.i.d. and smooth input, non-causal and causal."""
    inputs = {"i.i.d. input": seeded_qkv(SEED, SWEEP_N), "smooth input": smooth_qkv(SEED, SWEEP_N)}
    for (label, (q, k, v)), color in zip(inputs.items(), ("#4e79a7", "#f28e2b"), strict=True):
        for causal, style in ((False, "o-"), (True, "s--")):
            exact = ra.scaled_dot_product_attention(q, k, v, causal=causal)
            errors = []
            for c in SWEEP_C:
                mean = MemoryCompression(np.full(c, 1.0 / c), np.full(c, 1.0 / c))
                out = memory_compressed_attention(q, k, v, params=mean, causal=causal)
                errors.append(np.linalg.norm(out - exact) / np.linalg.norm(exact))
            ax.plot(SWEEP_C, roundoff(errors, below="nan"), style, color=color,      # c = 1: exact, off the log axis
                    label=f"{label}, {'causal' if causal else 'non-causal'}")
    ax.set(xscale="log", yscale="log", xlabel="c (kernel = stride)", ylabel="relative output error",
           xticks=SWEEP_C, xticklabels=[str(c) for c in SWEEP_C], xlim=(0.8, 40))
    ax.set_title(f"error against softmax as c grows, mean-pooling taps w_t = 1/c (n = m = {SWEEP_N}; exact at c = 1, "
                 "off the axis); causal: the queries before the end of their block see less")
    ax.minorticks_off()
    ax.legend(loc="lower right", fontsize=8, frameon=False)
