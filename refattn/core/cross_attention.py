r"""Encoder–decoder (cross) attention (Vaswani et al., 2017, §3.2.3).

    CrossAttn(Y, M) = MultiHead(Y, M, M)        Y (n, d_model) decoder states, M (m, d_model) encoder output

The decoder's n queries attend to the encoder's m keys and values, with no causal mask (the whole
source is known) and n, m free. It is :func:`~refattn.multi_head_attention` with queries from one
sequence and keys and values from another; this module is its catalogue record.
"""
from __future__ import annotations

from ..mechanism import Mechanism
from ..papers import VASWANI
from .multi_head import RECORD_OPTIONS, multi_head_attention

__all__: list[str] = []                                            # multi_head_attention is multi_head's


RECORD = Mechanism.of(
    multi_head_attention, inputs=("x_q", "x_kv", "x_v"), defaults={"num_heads": 2},
    options=RECORD_OPTIONS,
    id="cross_attention", title="Encoder–decoder (cross) attention", family="vanilla", section="2.2 (Vaswani §3.2.3)",
    paper=VASWANI,
    equation=r"\operatorname{MultiHead}(Y, M, M),\ Y \in \mathbb{R}^{n \times d},\ M \in \mathbb{R}^{m \times d}",
    time="O(n·m·d + (n+m)·d²)", memory="O(h·n·m)", kind="attention",
    causal=False, figure="refattn.figures.vanilla:cross_attention",
    exact_options={"num_heads": 1, "params": "identity"}, exact_limit="one head, identity projections",
    draws=("params",),
    layer_inputs=True,
)
