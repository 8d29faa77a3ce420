"""Catalogue records of linearised attention (MECHANISMS.md §3; survey §3.2).

Doors draw what the mechanism needs from ``rng`` (Performer's ω, RFA's gate and the delta rule's
β parameters, applied to the keys as the token inputs) and return the effective attention matrix,
so the approximations can be plotted and measured against softmax attention.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..common import as_rng, causal_alignment
from ..linear.attention import linear_attention
from ..linear.delta_rule import delta_beta, delta_rule_attention, init_delta_beta
from ..linear.efficient_attention import efficient_attention
from ..linear.feature_maps import elu_feature_map
from ..linear.performer import performer_attention
from ..linear.rfa import init_rfa_gate, rfa_attention, rfa_gates
from ..mechanism import AttentionResult, Mechanism

__all__ = ["RECORDS"]

KATHAROPOULOS = ('A. Katharopoulos et al., 2020, "Transformers are RNNs: Fast Autoregressive Transformers with '
                 'Linear Attention", arXiv:2006.16236')
PERFORMER = 'K. Choromanski et al., 2020, "Rethinking Attention with Performers", arXiv:2009.14794'
LINEAR_EQ = r"\frac{\phi(q_i) \sum_j \phi(k_j)^\top v_j}{\phi(q_i) \sum_j \phi(k_j)^\top}"


def _apply_linear_elu(q, k, v, *, causal=False, rng=None, method="equation", eps=0.0):
    out, A = linear_attention(q, k, v, elu_feature_map, causal=causal, method=method, eps=eps, return_weights=True)
    return AttentionResult(out, A)


def _performer_door(kind: str) -> Callable:
    def apply(q, k, v, *, causal=False, rng=None, method="equation", num_features=64, **options):
        if rng is None and "omega" not in options:
            raise ValueError(f"performer_{kind} draws ω from rng: pass rng= (or omega=)")
        out, A = performer_attention(q, k, v, num_features=None if "omega" in options else num_features,
                                     rng=rng if "omega" not in options else None, kind=kind, causal=causal,
                                     method=method, return_weights=True, **options)
        return AttentionResult(out, A)

    apply.__doc__ = f"Uniform door of performer_attention(kind={kind!r}), 64 features drawn from rng."
    return apply


def _apply_efficient(q, k, v, *, causal=False, rng=None):
    if causal is not False:
        raise ValueError("efficient attention normalises K over all positions: it has no causal form")
    out, A = efficient_attention(q, k, v, return_weights=True)
    return AttentionResult(out, A)


def _recurrence_door(run: Callable) -> Callable:
    """``apply`` for a causal recurrence over one sequence, ``run(q, k, v, rng, method, **options)``.

    Bottom-right alignment: the n queries are the last n of the m positions. Output i depends on
    its own query and on the keys, values and gates up to i only, so the recurrence runs over all m
    positions (earlier queries, whose outputs are dropped, are zeros) and the last rows are kept.
    """
    def apply(q, k, v, *, causal=True, rng=None, method="equation", **options):
        alignment = causal_alignment(causal)
        if alignment is None:
            raise ValueError(f"{run.__name__[1:]} is a causal recurrence: pass causal=True or 'bottom-right'")
        n, m = np.shape(q)[-2], np.shape(k)[-2]
        if n == m:
            return AttentionResult(*run(q, k, v, rng, method, **options))
        if alignment == "top-left":
            raise ValueError(f"{run.__name__[1:]} is self-attention over one sequence: q has n={n}, k has m={m} "
                             "(causal='bottom-right' takes the last n of m positions)")
        keep = min(n, m)
        q = np.asarray(q, dtype=np.float64)
        q_all = np.zeros((*q.shape[:-2], m, q.shape[-1]))
        q_all[..., m - keep:, :] = q[..., n - keep:, :]
        out, A = run(q_all, k, v, rng, method, **options)
        lead = (*out.shape[:-2], n - keep)                         # queries before the first key: no key
        return AttentionResult(np.concatenate([np.zeros((*lead, out.shape[-1])), out[..., m - keep:, :]], axis=-2),
                               np.concatenate([np.zeros((*lead, m)), A[..., m - keep:, :]], axis=-2))

    apply.__doc__ = f"Uniform door of {run.__name__[1:]} ({run.__doc__})"
    return apply


def _rfa(q, k, v, rng, method, gates=None, feature_map=elu_feature_map, **options):
    """gates σ(k·w_g + b_g) with w_g drawn from rng, φ = elu + 1"""
    if gates is None:
        params = init_rfa_gate(as_rng(_needs(rng, "rfa")), np.shape(k)[-1])
        gates = rfa_gates(k, params.w_g, params.b_g)
    return rfa_attention(q, k, v, gates, feature_map, method=method, return_weights=True, **options)


def _delta_rule(q, k, v, rng, method, beta=None, feature_map=elu_feature_map, **options):
    """β = σ(k·w + b) with w drawn from rng, φ = elu + 1 normalised by its sum"""
    if beta is None:
        params = init_delta_beta(as_rng(_needs(rng, "delta_rule")), np.shape(k)[-1])
        beta = delta_beta(k, params.w, params.b)
    return delta_rule_attention(q, k, v, beta, feature_map, method=method, return_weights=True, **options)


def _needs(rng, who: str):
    if rng is None:
        raise ValueError(f"{who} draws its gate parameters from rng: pass rng= (or the gates explicitly)")
    return rng


RECORDS = (
    Mechanism("linear_elu", "Linear Transformer (φ = elu + 1)", "linear", "3.2", KATHAROPOULOS, LINEAR_EQ,
              "O((n + m)·F·d_v)", "O(F·d_v) state", True, "attention", linear_attention, _apply_linear_elu,
              exact_limit="none (a different kernel)"),
    Mechanism("performer_positive", "Performer FAVOR+ positive random features", "linear", "3.2 (3.4.2)",
              PERFORMER, r"\phi(x) = \tfrac{e^{-\|x\|^2/2}}{\sqrt{m}} \big[e^{\omega_i^\top x}\big]_{i=1}^m",
              "O((n + m)·m_F·d)", "O(m_F·d) state", True, "attention", performer_attention, _performer_door("positive"),
              exact_limit="m_F → ∞ (unbiased for exp(q·k/√d))"),
    Mechanism("performer_trig", "Performer trigonometric random features", "linear", "3.2 (3.4.2)", PERFORMER,
              r"\phi(x) = \tfrac{e^{\|x\|^2/2}}{\sqrt{m}} \big[\sin \omega_i^\top x, \cos \omega_i^\top x\big]",
              "O((n + m)·m_F·d)", "O(m_F·d) state", True, "attention", performer_attention, _performer_door("trig"),
              exact_limit="m_F → ∞ (unbiased for exp(q·k/√d))", nonnegative=False),
    Mechanism("efficient_attention", "Efficient Attention (softmax over Q's features and K's positions)", "linear",
              "3.2", 'Z. Shen et al., 2018, "Efficient Attention: Attention with Linear Complexities", '
              "arXiv:1812.01243", r"\rho_q(Q)\,\big(\rho_k(K)^\top V\big)", "O((n + m)·d·d_v)", "O(d·d_v)", False,
              "attention", efficient_attention, _apply_efficient, exact_limit="none (a different normalisation)"),
    Mechanism("rfa", "Random Feature Attention with gating", "linear", "3.2",
              'H. Peng et al., 2021, "Random Feature Attention", arXiv:2103.02143',
              r"S_t = g_t S_{t-1} + (1 - g_t)\,\phi(k_t) \otimes v_t", "O(n·F·d_v)", "O(F·d_v) state", True,
              "attention", rfa_attention, _recurrence_door(_rfa), exact_limit="decay form, g ≡ 1: causal linear",
              position_dependent=True, cross=False),
    Mechanism("delta_rule", "Fast-weight delta rule", "linear", "3.2",
              'I. Schlag, K. Irie, J. Schmidhuber, 2021, "Linear Transformers Are Secretly Fast Weight Programmers", '
              "arXiv:2102.11174", r"W_i = W_{i-1} + \beta_i (v_i - W_{i-1}\phi(k_i)) \otimes \phi(k_i)",
              "O(n·F·d_v)", "O(F·d_v) state", True, "attention", delta_rule_attention,
              _recurrence_door(_delta_rule), exact_limit="none (β = 0: empty memory)", position_dependent=True,
              cross=False, normalized=False, nonnegative=False),
)
