r"""The catalogue: one :class:`Mechanism` record per id of MECHANISMS.md.

This is the single list that the command line (``python -m refattn list``), the figures, the
README's catalogue table and the shared property tests iterate. Records are written out
explicitly, one per id, importing each mechanism's function by name: no auto-discovery.

Every record with ``kind == "attention"`` or ``"mask"`` has a uniform ``apply``::

    apply(q, k, v, *, causal=False, rng=None, **options) -> AttentionResult

where ``AttentionResult.weights`` is the effective dense (..., [h,] n, m) attention matrix.
Building blocks that are not an attention map of (q, k, v) (``softmax``, ``layer_norm``, ``ffn``,
positional encodings, whole layers and models) have ``kind == "component"`` and ``apply=None``;
their natural function is ``function``.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

from ._random import as_rng
from .core.encoder_decoder import decoder_layer, encoder_layer
from .core.layers import feed_forward, layer_norm
from .core.masks import causal_mask, padding_mask
from .core.multi_head import init_multi_head, multi_head_attention
from .core.positional import sinusoidal_positional_encoding
from .core.sdpa import scaled_dot_product_attention
from .core.softmax import softmax
from .core.transformer import transformer

__all__ = ["AttentionResult", "Mechanism", "all", "get", "ids", "catalogue_markdown"]

KINDS = ("attention", "mask", "component")
VASWANI = 'A. Vaswani et al., 2017, "Attention Is All You Need", arXiv:1706.03762'


class AttentionResult(NamedTuple):
    """Output ``(..., n, d_v)`` and the effective attention matrix (or ``None``)."""

    output: NDArray
    weights: NDArray | None


@dataclass(frozen=True)
class Mechanism:
    """One catalogue entry.

    Attributes
    ----------
    id : str
        The id in MECHANISMS.md.
    title : str
        Human-readable name.
    family : str
        "vanilla", "sparse", "linear", "compressed", "lowrank", "prior", "heads", ...
    section : str
        Section of the survey (seeds/000) or of the vanilla Transformer paper.
    paper : str
        Authors, year, title, arXiv id.
    equation : str
        LaTeX of the defining equation.
    time, memory : str
        Complexity for n queries, m keys, width d.
    causal : bool
        Supports causal use (``apply(..., causal=True)``).
    kind : {"attention", "mask", "component"}
        What ``apply`` computes; components have no ``apply``.
    function : callable
        The mechanism's own, natural function (with its own parameters).
    apply : callable or None
        The uniform door, ``apply(q, k, v, *, causal=False, rng=None, **options)``.
    exact_limit : str
        Where the mechanism equals exact attention, or "exact" when it is exact attention.
    position_dependent : bool
        ``apply``'s output depends on token positions (a fixed mask or pattern), so permuting the
        queries does not simply permute the outputs.
    """

    id: str
    title: str
    family: str
    section: str
    paper: str
    equation: str
    time: str
    memory: str
    causal: bool
    kind: str
    function: Callable = field(repr=False)
    apply: Callable | None = field(default=None, repr=False)
    exact_limit: str = "exact"
    position_dependent: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if (self.apply is None) != (self.kind == "component"):
            raise ValueError(f"{self.id}: components, and only components, have apply=None")

    def as_dict(self) -> dict:
        """The JSON-serialisable fields (everything but the callables)."""
        fields = ("id", "title", "family", "section", "paper", "equation", "time", "memory",
                  "causal", "kind", "exact_limit", "position_dependent")
        return {name: getattr(self, name) for name in fields} | {
            "function": f"{self.function.__module__}.{self.function.__qualname__}"
        }


# --- uniform doors -------------------------------------------------------------------------------

def _apply_sdpa(q, k, v, *, causal=False, rng=None, mask=None, scale=None, fully_masked="zero"):
    out, A = scaled_dot_product_attention(q, k, v, mask, causal=causal, scale=scale,
                                          fully_masked=fully_masked, return_weights=True)
    return AttentionResult(out, A)


def _apply_causal_mask(q, k, v, *, causal=True, rng=None, scale=None):
    """sdpa under the look-ahead mask; ``causal`` picks the alignment (True = top-left)."""
    if causal is False:
        raise ValueError("the causal_mask mechanism is causal by definition; pass causal=True or an alignment")
    return _apply_sdpa(q, k, v, causal=causal, scale=scale)


def _apply_padding_mask(q, k, v, *, causal=False, rng=None, lengths=None, scale=None):
    """sdpa with a key padding mask; ``lengths`` (batch shape) given or drawn from ``rng`` in [1, m]."""
    m = np.shape(k)[-2]
    batch = np.broadcast_shapes(np.shape(q)[:-2], np.shape(k)[:-2], np.shape(v)[:-2])
    if lengths is None:
        if rng is None:
            raise ValueError("padding_mask needs lengths= or rng= to draw them")
        lengths = as_rng(rng).integers(1, m + 1, size=batch)
    return _apply_sdpa(q, k, v, causal=causal, mask=padding_mask(lengths, m), scale=scale)


def _apply_multi_head(q, k, v, *, causal=False, rng=None, num_heads=2, params=None, mask=None):
    """MultiHead(Q, K, V) with parameters ``params`` or drawn from ``rng`` (d_model = q's width)."""
    if params is None:
        if rng is None:
            raise ValueError("multi-head attention needs params= or rng= to draw them")
        params = init_multi_head(rng, np.shape(q)[-1], num_heads)
    out, A = multi_head_attention(q, k, params, num_heads=num_heads, x_v=v, mask=mask,
                                  causal=causal, return_weights=True)
    return AttentionResult(out, A)


def _apply_cross_attention(q, k, v, *, causal=False, rng=None, **options):
    """Decoder queries attend to encoder keys/values: no causal mask, n and m free."""
    if causal is not False:
        raise ValueError("cross-attention is not causal: the decoder may see the whole source")
    return _apply_multi_head(q, k, v, rng=rng, **options)


# --- the catalogue -------------------------------------------------------------------------------

_MECHANISMS = (
    Mechanism(
        "softmax", "Numerically stable masked softmax", "vanilla", "2 (Vaswani §3.2.1)", VASWANI,
        r"\operatorname{softmax}(x)_j = \frac{e^{x_j - \max_k x_k}}{\sum_k e^{x_k - \max_k x_k}}",
        "O(n·m)", "O(n·m)", True, "component", softmax,
    ),
    Mechanism(
        "sdpa", "Scaled dot-product attention", "vanilla", "2 (Vaswani §3.2.1)", VASWANI,
        r"\operatorname{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}} + B\right) V",
        "O(n·m·d)", "O(n·m)", True, "attention", scaled_dot_product_attention, _apply_sdpa,
    ),
    Mechanism(
        "causal_mask", "Decoder (look-ahead) mask, top-left and bottom-right", "vanilla",
        "2 (Vaswani §3.2.3)", VASWANI,
        r"M_{ij} = [\,j \le i + \delta\,],\ \delta \in \{0,\ m - n\}",
        "O(n·m·d)", "O(n·m)", True, "mask", causal_mask, _apply_causal_mask, position_dependent=True,
    ),
    Mechanism(
        "padding_mask", "Key padding mask", "vanilla", "2 (Vaswani §3.2.3)", VASWANI,
        r"M_{b,1,j} = [\,j < \ell_b\,]",
        "O(n·m·d)", "O(n·m)", True, "mask", padding_mask, _apply_padding_mask,
    ),
    Mechanism(
        "multi_head", "Multi-head attention", "vanilla", "2.1 (Vaswani §3.2.2)", VASWANI,
        r"\operatorname{Concat}(\mathrm{head}_1, \dots, \mathrm{head}_h) W^O,\ "
        r"\mathrm{head}_i = \operatorname{Attention}(QW_i^Q, KW_i^K, VW_i^V)",
        "O(n·m·d + (n+m)·d²)", "O(h·n·m)", True, "attention", multi_head_attention, _apply_multi_head,
    ),
    Mechanism(
        "cross_attention", "Encoder–decoder (cross) attention", "vanilla", "2.2 (Vaswani §3.2.3)", VASWANI,
        r"\operatorname{MultiHead}(Y, M, M),\ Y \in \mathbb{R}^{n \times d},\ M \in \mathbb{R}^{m \times d}",
        "O(n·m·d + (n+m)·d²)", "O(h·n·m)", False, "attention", multi_head_attention, _apply_cross_attention,
    ),
    Mechanism(
        "sinusoidal_pe", "Sinusoidal positional encoding", "vanilla", "2.1 (Vaswani §3.5)", VASWANI,
        r"PE_{(pos,2i)} = \sin(pos/10000^{2i/d}),\ PE_{(pos,2i+1)} = \cos(pos/10000^{2i/d})",
        "O(n·d)", "O(n·d)", True, "component", sinusoidal_positional_encoding,
    ),
    Mechanism(
        "layer_norm", "Layer normalisation with residual (post-LN and pre-LN)", "vanilla",
        "2.1 (Vaswani §3.1)", VASWANI,
        r"\operatorname{LayerNorm}(x + \operatorname{Sublayer}(x))",
        "O(n·d)", "O(n·d)", True, "component", layer_norm,
    ),
    Mechanism(
        "ffn", "Position-wise feed-forward network", "vanilla", "2.1 (Vaswani §3.3)", VASWANI,
        r"\max(0, xW_1 + b_1) W_2 + b_2",
        "O(n·d·d_ff)", "O(n·d_ff)", True, "component", feed_forward,
    ),
    Mechanism(
        "encoder_layer", "Transformer encoder layer", "vanilla", "2.1 (Vaswani §3.1)", VASWANI,
        r"x' = \operatorname{LN}(x + \operatorname{MultiHead}(x,x,x)),\ "
        r"\operatorname{LN}(x' + \operatorname{FFN}(x'))",
        "O(n²·d + n·d·d_ff)", "O(h·n²)", False, "component", encoder_layer,
    ),
    Mechanism(
        "decoder_layer", "Transformer decoder layer (with key/value cache)", "vanilla",
        "2.1 (Vaswani §3.1)", VASWANI,
        r"\operatorname{LN}\circ(\text{causal self-attn},\ \text{cross-attn},\ \operatorname{FFN})",
        "O(n²·d + n·m·d + n·d·d_ff)", "O(h·n·(n+m))", True, "component", decoder_layer,
    ),
    Mechanism(
        "transformer", "Encoder–decoder Transformer with greedy decoding", "vanilla",
        "2 (Vaswani §3)", VASWANI,
        r"\operatorname{softmax}(\operatorname{Decoder}(E[y]\sqrt{d} + PE,\ "
        r"\operatorname{Encoder}(E[x]\sqrt{d} + PE))\,W_{out})",
        "O(N·(n²+m²+nm)·d)", "O(h·(n²+m²+nm))", True, "component", transformer,
    ),
)

_BY_ID = {m.id: m for m in _MECHANISMS}
if len(_BY_ID) != len(_MECHANISMS):
    raise RuntimeError("duplicate mechanism ids in the registry")


def all() -> list[Mechanism]:  # noqa: A001 - the catalogue's documented name
    """Every registered mechanism, in catalogue order."""
    return list(_MECHANISMS)


def ids() -> list[str]:
    """Every registered id, in catalogue order."""
    return [m.id for m in _MECHANISMS]


def get(id: str) -> Mechanism:  # noqa: A002 - "id" is the catalogue's word
    """The mechanism registered under ``id``; ``KeyError`` listing the known ids otherwise."""
    try:
        return _BY_ID[id]
    except KeyError:
        raise KeyError(f"no mechanism {id!r}; known ids: {', '.join(_BY_ID)}") from None


def catalogue_markdown() -> str:
    """The README's catalogue table, generated from the records."""
    lines = [
        "| id | mechanism | family | paper | kind | causal | exact limit |",
        "|---|---|---|---|---|---|---|",
    ]
    for m in _MECHANISMS:
        lines.append(
            f"| `{m.id}` | {m.title} | {m.family} ({m.section}) | {m.paper} | {m.kind} | "
            f"{'yes' if m.causal else 'no'} | {m.exact_limit} |"
        )
    return "\n".join(lines) + "\n"
