r"""Causal AFT scan: the running, max-shifted sums of the Attention Free Transformer (Zhai et al., 2021, §3).

For every channel c, query t sees the keys j ≤ p_t = t + δ, each weighed by exp(K_jc + w_tj):

    out_tc = Σ_{j ≤ p_t} exp(K_jc + w_tj) V_jc / Σ_{j ≤ p_t} exp(K_jc + w_tj)

where the position bias w_tj is 0 outside a band of the S keys up to the diagonal (p_t − S < j ≤ p_t;
AFT-simple: S = 0; AFT-local: the window; AFT-conv: the filter's past half; AFT-full: every key). So
the keys before the band are summed once, in a running state carried from query to query, and only
the band's keys are added per query:

    a_c = max of the logits folded so far,  N_c = Σ exp(x − a_c) V_jc,  D_c = Σ exp(x − a_c)
    folding x:  a′ = max(a_c, x),  N_c ← N_c e^{a_c − a′} + e^{x − a′} V_jc,  D_c ← D_c e^{a_c − a′} + e^{x − a′}

O(n·S·d + m·d) time, O(d) state besides the band: nothing n × m unless the band is (AFT-full). The
max-shift keeps every exponent ≤ 0; non-finite logits give NaN exactly where the parallel form's
exp(L − max L) does (a +∞ or NaN logit, a row of −∞), and a −∞ logit still multiplies its value by 0.
"""
from __future__ import annotations

import numpy as np

from .._jit import jit_inline, jit_parallel, prange
from . import check_kernel_arrays, kernel_scalar

__all__ = ["aft_scan"]


def aft_scan(k, v, band, delta, out) -> None:
    """Run the scan after checking every shape it indexes.

    k, v (B, m, d), C-contiguous float64; ``band`` (H, n, S): band[h, t, l] is the bias w_tj of head h
    for key j = t + delta − S + 1 + l (channel c is in head c // (d / H); entries for j < 0 are not
    read); ``delta`` any int (query t sees keys j <= t + delta). Writes out (B, n, d): the normalised
    sums, without the σ(Q) gate.
    """
    sizes = check_kernel_arrays("aft_scan", {"k": (k, "B m d"), "v": (v, "B m d"), "band": (band, "H n S"),
                                             "out": (out, "B n d")}, written=("out",))
    if sizes["H"] == 0 or sizes["d"] % sizes["H"]:
        raise ValueError(f"aft_scan: band has H={sizes['H']} heads, which must divide d={sizes['d']} "
                         f"(band shape {band.shape}, k shape {k.shape})")
    _aft_scan(k, v, band, kernel_scalar("aft_scan", "delta", delta, int), out)


@jit_inline
def _fold(x, value, a, N, D):  # pragma: no cover - jitted
    """One logit x with its value folded into the state (a, N, D); returns the new state."""
    if a == -np.inf and x == -np.inf:                              # every logit so far −∞: weights exactly 0
        return a, N + 0.0 * value, D                               # (0·V: a non-finite value still shows)
    top = x if x > a else a                                        # a′ = max(a, x) (NaN x: a′ = a, e = NaN)
    r = np.exp(a - top)                                            # e^{a − a′} ≤ 1
    e = np.exp(x - top)                                            # e^{x − a′} ≤ 1
    return top, N * r + e * value, D * r + e


@jit_parallel
def _aft_scan(k, v, band, delta, out):  # pragma: no cover - jitted
    """The loops of :func:`aft_scan`."""
    B, m, d = k.shape
    H, n, S = band.shape
    width = d // H                                                 # channels per head
    for b in prange(B):
        a = np.full(d, -np.inf)                                    # state of the keys before the band (w = 0)
        N = np.zeros(d)
        D = np.zeros(d)
        folded = 0                                                 # keys 0 … folded − 1 are in the state
        for t in range(n):
            last = min(t + delta, m - 1)                           # query t sees keys 0 … last
            start = t + delta - S + 1                              # the band: keys start … last
            while folded < min(start, last + 1):                   # keys leaving the band join the state
                for c in range(d):
                    a[c], N[c], D[c] = _fold(k[b, folded, c], v[b, folded, c], a[c], N[c], D[c])
                folded += 1
            for c in range(d):
                h = c // width
                ac, Nc, Dc = a[c], N[c], D[c]
                for j in range(max(start, 0), last + 1):           # the band's keys, with their bias
                    ac, Nc, Dc = _fold(k[b, j, c] + band[h, t, j - start], v[b, j, c], ac, Nc, Dc)
                out[b, t, c] = Nc / Dc if last >= 0 else 0.0       # no key seen: 0
