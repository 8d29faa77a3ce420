r"""Named scaled dot-product test cases (fixtures) written to ``.npz`` files.

A fixture holds the inputs, the conventions and refattn's float64 outputs and gradients of one
case, for another implementation's test suite to load (``python -m refattn export``); its keys are
those of :mod:`refattn.oracle.npz`. The reader (``python -m refattn check``) is
:mod:`refattn.oracle.checkfile`.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..common.npz import write_npz
from ..core.padding_mask import padding_mask
from ..core.sdpa import scaled_dot_product_attention
from .checkfile import FixtureError, check_file, load_check_file  # their home before checkfile.py: kept importable
from .npz import FIXTURE_CAUSAL, representable
from .shapes import LAYOUTS, kv_groups, repeat_over_groups, sum_over_groups, swap_heads
from .vjp import sdpa_vjp

__all__ = ["CASES", "FORMAT", "Case", "FixtureError", "check_file", "export_case", "load_check_file", "make_case"]

FORMAT = "refattn-fixture-1"


@dataclass(frozen=True)
class Case:
    """A named fixture case.

    Attributes
    ----------
    name : str
    description : str
        One line: what the case exercises.
    build : callable
        ``build(rng) -> dict`` of inputs (``q, k, v, d_out``, optional ``mask``) and conventions
        (``causal``, ``scale``, ``fully_masked``), in layout "bhnd".
    seed : int
        The case's own seed: the same file on every machine.
    """

    name: str
    description: str
    build: Callable
    seed: int


def _qkv(rng, b=2, h=3, n=5, m=7, d_k=8, d_v=6, h_kv=None, amp=1.0):
    h_kv = h if h_kv is None else h_kv
    return {
        "q": representable(amp * rng.standard_normal((b, h, n, d_k))),
        "k": representable(amp * rng.standard_normal((b, h_kv, m, d_k))),
        "v": representable(rng.standard_normal((b, h_kv, m, d_v))),
        "d_out": representable(rng.standard_normal((b, h, n, d_v))),
    }


def _basic(rng):
    return _qkv(rng)


def _causal_n_ne_m(rng):
    return {**_qkv(rng, n=6, m=9), "causal": "top-left"}


def _bottom_right(rng):
    return {**_qkv(rng, n=5, m=9), "causal": "bottom-right"}


def _padding(rng):
    return {**_qkv(rng, n=6, m=9), "mask": padding_mask(np.array([9, 5]), 9)[:, None]}   # (b, 1, 1, m)


def _empty_rows(rng):
    arrays = _qkv(rng, n=6, m=8)
    mask = rng.random((2, 1, 6, 8)) < 0.7
    mask[..., 0] = True                                            # every row sees key 0 ...
    mask[0, 0, [1, 4], :] = False                                  # ... except these three,
    mask[1, 0, 0, :] = False                                       # which see no key at all
    return {**arrays, "mask": mask, "fully_masked": "zero"}


def _gqa(rng):
    return {**_qkv(rng, h=4, h_kv=2, n=5, m=8), "causal": "top-left"}


def _extreme_logits(rng):
    return _qkv(rng, amp=30.0)                                     # |S| up to ~10³: e^S overflows unshifted


def _float_bias(rng):
    arrays = _qkv(rng)
    slopes = 2.0 ** -np.arange(1, 4)[:, None, None]                # (h, 1, 1)  ALiBi's geometric slopes
    i, j = np.arange(5)[:, None], np.arange(7)[None, :]
    bias = representable(-slopes * np.abs(i - j) + 0.5 * rng.standard_normal((2, 3, 5, 7)))
    bias[0, 1, 2, [0, 3, 6]] = -np.inf                             # a few masked pairs, no empty row
    bias[1, 2, :, 5] = -np.inf
    return {**arrays, "mask": bias}


CASES = {case.name: case for case in (
    Case("basic", "b=2, h=3, n=5, m=7, d_k=8, d_v=6: no mask, not causal", _basic, 1),
    Case("causal_n_ne_m", "causal top-left with n=6 < m=9 (query i sees keys j <= i)", _causal_n_ne_m, 2),
    Case("bottom_right", "causal bottom-right with n=5 < m=9 (query i sees keys j <= i + 4)", _bottom_right, 3),
    Case("padding", "key padding mask (b, 1, 1, m): lengths 9 and 5 of m=9", _padding, 4),
    Case("empty_rows", "bool mask with 3 fully masked query rows, fully_masked='zero'", _empty_rows, 5),
    Case("gqa", "grouped-query: h=4 query heads, h_kv=2 key/value heads (head i reads kv head i // 2), causal",
         _gqa, 6),
    Case("extreme_logits", "q and k scaled by 30: scores up to ~10^3, softmax nearly one-hot", _extreme_logits, 7),
    Case("float_bias", "float additive bias (ALiBi slopes + noise) with some -inf entries", _float_bias, 8),
)}


def make_case(name: str, *, layout: str = "bhnd") -> dict:
    r"""The arrays of fixture case ``name``: inputs, conventions and refattn's float64 results.

    Parameters
    ----------
    name : str
        One of :data:`CASES`.
    layout : {"bhnd", "bnhd"}, default "bhnd"
        Axis order of ``q, k, v, d_out`` and of the results.

    Returns
    -------
    dict of str to ndarray
        The keys of :mod:`refattn.oracle.npz`; strings as 0-d unicode arrays, ``scale`` as a 0-d
        float64 array (always written out, default or not).

    Examples
    --------
    >>> arrays = make_case("gqa")
    >>> arrays["q"].shape, arrays["k"].shape, arrays["dk"].shape, str(arrays["causal"])
    ((2, 4, 5, 8), (2, 2, 8, 8), (2, 2, 8, 8), 'top-left')
    """
    if name not in CASES:
        raise ValueError(f"unknown case {name!r}; known: {', '.join(CASES)}")
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be 'bhnd' or 'bnhd', got {layout!r}")
    case = CASES[name]
    spec = case.build(np.random.default_rng(case.seed))
    q, k, v, d_out, mask = spec["q"], spec["k"], spec["v"], spec["d_out"], spec.get("mask")
    causal = spec.get("causal", "none")
    scale = spec.get("scale", 1.0 / float(np.sqrt(q.shape[-1])))
    fully_masked = spec.get("fully_masked", "zero")
    groups = kv_groups(q, k, v)
    k_full, v_full = repeat_over_groups(k, groups), repeat_over_groups(v, groups)
    options = {"causal": FIXTURE_CAUSAL[causal], "scale": scale, "fully_masked": fully_masked}
    out, lse = scaled_dot_product_attention(q, k_full, v_full, mask, return_lse=True, **options)
    grads = sdpa_vjp(q, k_full, v_full, d_out, mask, **options)
    arrays = {"q": q, "k": k, "v": v, "d_out": d_out, "out": out, "dq": grads.dq,
              "dk": sum_over_groups(grads.dk, groups), "dv": sum_over_groups(grads.dv, groups)}
    if layout == "bnhd":
        arrays = {key: swap_heads(x) for key, x in arrays.items()}
        lse = np.swapaxes(lse, -1, -2)
    arrays["lse"] = lse
    if mask is not None:
        arrays["mask"] = mask
        if grads.d_bias is not None:
            arrays["d_bias"] = grads.d_bias
    arrays.update(causal=np.array(causal), scale=np.array(scale, dtype=np.float64),
                  fully_masked=np.array(fully_masked), layout=np.array(layout), case=np.array(name),
                  format=np.array(FORMAT), description=np.array(case.description))
    return arrays


def export_case(name: str, path: str | Path, *, layout: str = "bhnd") -> dict:
    """Write :func:`make_case` ``(name, layout=layout)`` to ``path`` (exactly that name); return the arrays.

    Parameters
    ----------
    name : str
        One of :data:`CASES`.
    path : str or Path
        The ``.npz`` file to write.
    layout : {"bhnd", "bnhd"}, default "bhnd"
        Axis order of q, k, v and the outputs.

    Returns
    -------
    dict
        The arrays written.
    """
    arrays = make_case(name, layout=layout)
    write_npz(path, arrays)
    return arrays
