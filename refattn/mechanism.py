"""The catalogue's record type, :class:`Mechanism`; what every ``apply`` returns; how a record is drawn.

A mechanism's record is declared in its own module, beside its maths, with keyword arguments;
each family package lists its records in one tuple (``RECORDS`` in ``refattn/<family>/__init__.py``)
and :mod:`refattn.registry` gathers the families. Everything else (the command line, the figures,
the README's catalogue, the gallery, the registry-driven tests) iterates the records.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

from .common import as_float, as_rng, check_bool, check_choice, check_qkv

__all__ = ["KINDS", "MIXINGS", "AttentionResult", "FigureSpec", "Mechanism"]

KINDS = ("attention", "mask", "component")
#: What the rows and columns of ``AttentionResult.weights`` index: queries × keys, or output × value channels.
MIXINGS = ("tokens", "channels", "per_channel", "fourier")


class AttentionResult(NamedTuple):
    """What ``apply`` returns.

    Attributes
    ----------
    output : (..., n, d_v) ndarray
        The attention output.
    weights : (..., [h,] n, m) ndarray or None
        The effective dense attention matrix, only when ``apply`` was asked for it
        (``return_weights=True``): out = weights @ v. A record whose ``mixing`` is not "tokens" returns
        what reproduces its output instead (see :class:`Mechanism`'s ``mixing``).
    allowed : (..., [h,] n, m) ndarray of bool or None
        The pairs (query *i*, key *j*) the mechanism lets each query see (its mask or sparsity
        pattern, causal mask included), when it has one and ``return_weights=True``; ``None`` when
        every pair may carry weight. Figures draw the pairs outside it in a neutral colour.
    draws : dict or None
        Every random draw the mechanism used (hash rotations, centroids, sampled keys, projection
        matrices, parameters drawn from ``rng``), keyed by the ``apply`` option that takes it back,
        only when ``apply`` was asked for it (``return_draws=True``): ``apply(q, k, v, **draws)``
        (same other options, no ``rng``) reproduces the result, and another implementation can be
        fed the same draws. ``{}`` for a mechanism that draws nothing.
    """

    output: NDArray
    weights: NDArray | None = None
    allowed: NDArray | None = None
    draws: Mapping | None = None


@dataclass(frozen=True, kw_only=True)
class FigureSpec:
    """How the generic figure template draws a mechanism: its weights on seeded input, panel by panel.

    Attributes
    ----------
    title : str
        The figure's title.
    panels : tuple of (str, dict)
        One panel per entry: its title and the options passed to ``apply`` (``causal`` included).
    n : int, default 16
        Number of queries.
    m : int, optional
        Number of keys; default ``n``.
    seed : int, default 0
        Seed of q, k, v (and of ``rng`` for the mechanism's own draws).
    """

    title: str
    panels: tuple[tuple[str, Mapping], ...]
    n: int = 16
    m: int | None = None
    seed: int = 0


@dataclass(frozen=True, kw_only=True)
class Mechanism:
    """One catalogue entry, declared in the mechanism's own module.

    Attributes
    ----------
    id : str
        The catalogue id (``python -m refattn list``).
    title : str
        Human-readable name.
    family : str
        "vanilla", "sparse", "linear", "compressed", "lowrank", "prior", "heads", ...
    section : str
        Section of the survey (T. Lin et al., arXiv:2106.04554, its own §4.x numbering) or of the
        vanilla Transformer paper.
    paper : str
        Authors, year, title, arXiv id.
    equation : str
        LaTeX of the defining equation.
    time, memory : str
        Complexity for n queries, m keys, width d.
    kind : {"attention", "mask", "component"}
        What ``apply`` computes; components have no ``apply``.
    function : callable
        The mechanism's own, natural function (with its own parameters).
    apply : callable or None
        The uniform entry, ``apply(q, k, v, *, causal=False, rng=None, return_weights=False,
        return_draws=False, **options) -> AttentionResult``. The record stores it behind one
        validation layer: q, k, v are checked (real floating point, at least 2-D, d_k and m
        agreeing, batch dims broadcasting) and converted to float64, ``causal`` is checked against
        :attr:`causal_settings`, ``rng``, ``return_weights`` and ``return_draws`` are checked, all
        before the mechanism's own code indexes a shape; ``apply.__wrapped__`` is the mechanism's
        own, which returns its draws always (``AttentionResult.draws``) and leaves it to this
        layer to keep them only when asked.
    figure : FigureSpec or str
        How ``python -m refattn figures`` draws it: a :class:`FigureSpec` for the generic template,
        or ``"module:function"`` naming a function that returns a matplotlib Figure (imported only
        when the figure is drawn, so importing refattn loads no plotting).
    exact_options : dict, callable or None
        Options with which ``apply(q, k, v, causal=c, **exact_options)`` equals
        ``scaled_dot_product_attention(q, k, v, causal=c)`` to 1e-12 in float64, for every causal
        setting the record supports (and with n != m where it is ``cross``): a dict, or a function
        of ``(n, m)`` returning one. ``None`` when no setting of the mechanism is exact attention.
    exact_limit : str
        The exact limit in words ("exact" for exact attention); with ``exact_options=None``, why
        there is none.
    noncausal : bool, default True
        ``apply`` takes ``causal=False`` (a causal recurrence does not).
    causal : bool
        ``apply`` takes ``causal=True`` (top-left alignment).
    incremental : bool, default True
        With ``causal``, ``apply`` also takes n new queries as the last n of m positions
        (``causal="bottom-right"``, decoding with a key/value cache).
    position_dependent : bool, default False
        ``apply``'s output depends on token positions (a fixed mask or pattern), so permuting the
        queries does not simply permute the outputs.
    cross : bool, default True
        ``apply`` accepts queries and keys of different lengths (n != m) with ``causal=False``;
        self-attention-only patterns take n == m (and any n with ``causal="bottom-right"``).
    normalized : bool, default True
        Each row of the effective matrix sums to 1 (the fast-weight delta rule has no
        normaliser: its rows do not).
    nonnegative : bool, default True
        The effective weights are >= 0 (trigonometric random features, for one, can weigh a key
        negatively).
    examples : tuple of dict, default ()
        Option settings of ``apply`` that the registry-driven tests try besides the defaults (the
        variants and switches a user may flip: a stabiliser, another policy, another form).
    methods : tuple of str, default ()
        The values of ``apply``'s ``method`` option, the readable ``"equation"`` path first; the
        tests hold every method to the same results (a method that cannot take a setting, such as a
        causal scan asked for non-causal attention, refuses it with a ValueError).
    example_length : int, default 7
        A sequence length at which ``apply`` is defined (some patterns exist only at particular
        lengths: a multiple of a block size, the node count of a tree), used by the shared tests.
    draws : tuple of str, default ()
        The options of ``apply`` that hold its random draws. ``apply`` draws each one from ``rng``
        when it is not given, and returns them all in ``AttentionResult.draws`` when asked
        (``return_draws=True``); fed back as options, they reproduce the result without ``rng``.
        Empty for a mechanism whose result does not depend on ``rng``.
    shared_qk : bool, default False
        ``apply`` takes its keys from its queries (Reformer's shared-QK attention): ``k`` must be
        ``q`` (the same values), so n == m and there is no bottom-right form (``incremental`` is
        False).
    content_selected : bool, default False
        Which pairs get weight is chosen from the values of q and k (clusters, hash buckets,
        sorted blocks, a top-k, a sampled measure), not from positions alone, so a NaN or Inf in a
        key can move it into another query's selection; masking by selection still keeps it out
        of every row that the call's own ``allowed`` hides it from.
    layer_inputs : bool, default False
        ``apply`` takes a layer's inputs x_q, x_kv, x_v (width d_model) and projects them into heads with its own
        parameters (``num_heads``, ``params``), as ``multi_head`` does, rather than one head's q, k, v: a trained
        model's per-head q, k, v are not what its default options expect (its exact limit, one head with identity
        projections, still takes them).
    mixing : {"tokens", "channels", "per_channel", "fourier"}, default "tokens"
        What ``weights`` maps. "tokens": the (..., [h,] n, m) matrix over queries and keys, out = weights @ v.
        "channels": a (..., [h,] d_v, d_v) map over channels, out = v @ weightsᵀ, for a mechanism that mixes
        each token's channels and no tokens (XCiT's cross-covariance attention); its rows are the output
        channels and ``normalized`` and ``nonnegative`` speak of them. "per_channel": one (n, m) matrix per
        channel, (..., d_v, n, m), out[..., :, c] = weights[..., c, :, :] @ v[..., :, c] (AFT). "fourier":
        the real and imaginary planes of the token DFT F_n, (..., 2, n, m), with the channel DFT F_d
        applied as well: out = weights[0] v Re F_d − weights[1] v Im F_d (FNet).
    future_independent : bool, default True
        With ``causal``, output *i* is unchanged when keys and values after *i* change. False where
        the paper's algorithm lets the *choice* of past pairs depend on later tokens (Reformer's
        sorted chunks, Informer's top-u queries): the later keys still carry zero weight and the
        later values never reach the output, but a decoder with a key/value cache does not
        reproduce the full-sequence result.
    """

    id: str
    title: str
    family: str
    section: str
    paper: str
    equation: str
    time: str
    memory: str
    kind: str
    function: Callable = field(repr=False)
    apply: Callable | None = field(default=None, repr=False)
    figure: FigureSpec | str
    exact_options: Mapping | Callable[[int, int], Mapping] | None
    exact_limit: str
    noncausal: bool = True
    causal: bool
    incremental: bool = True
    position_dependent: bool = False
    cross: bool = True
    normalized: bool = True
    nonnegative: bool = True
    examples: tuple[Mapping, ...] = ()
    methods: tuple[str, ...] = ()
    example_length: int = 7
    draws: tuple[str, ...] = ()
    shared_qk: bool = False
    content_selected: bool = False
    future_independent: bool = True
    layer_inputs: bool = False
    mixing: str = "tokens"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"{self.id}: kind must be one of {KINDS}, got {self.kind!r}")
        if (self.apply is None) != (self.kind == "component"):
            raise ValueError(f"{self.id}: components, and only components, have apply=None")
        if not isinstance(self.figure, (FigureSpec, str)) or (isinstance(self.figure, str) and ":" not in self.figure):
            raise TypeError(f"{self.id}: figure must be a FigureSpec or 'module:function', got {self.figure!r}")
        if self.exact_options is not None and self.apply is None:
            raise ValueError(f"{self.id}: a component has no exact_options (it has no apply)")
        if self.mixing not in MIXINGS:
            raise ValueError(f"{self.id}: mixing must be one of {MIXINGS}, got {self.mixing!r}")
        if self.incremental and not self.causal:
            object.__setattr__(self, "incremental", False)             # nothing to decode without causality
        if self.shared_qk and (self.incremental or self.cross):
            raise ValueError(f"{self.id}: shared-QK attention takes k = q: it is neither cross nor incremental")
        if self.draws and self.apply is None:
            raise ValueError(f"{self.id}: a component has no draws (it has no apply)")
        if self.apply is not None and not hasattr(self.apply, "__wrapped__"):
            object.__setattr__(self, "apply", _validated(self.apply, self.id, self.causal_settings, self.draws,
                                                         self.shared_qk))

    @property
    def causal_settings(self) -> tuple:
        """The ``causal`` values ``apply`` takes: False, True and "bottom-right" as supported."""
        return ((False,) if self.noncausal else ()) + ((True,) if self.causal else ()) + \
            (("bottom-right",) if self.incremental else ())

    def exact(self, n: int, m: int) -> dict | None:
        """The options of the exact limit at n queries and m keys (``None``: no exact limit)."""
        if self.exact_options is None:
            return None
        return dict(self.exact_options(n, m) if callable(self.exact_options) else self.exact_options)

    def as_dict(self) -> dict:
        """The JSON-serialisable fields (everything but the callables)."""
        fields = ("id", "title", "family", "section", "paper", "equation", "time", "memory", "kind",
                  "exact_limit", "noncausal", "causal", "incremental", "position_dependent", "cross", "normalized",
                  "nonnegative", "example_length", "draws", "shared_qk", "content_selected", "future_independent",
                  "layer_inputs", "mixing")
        return {name: getattr(self, name) for name in fields} | {
            "function": f"{self.function.__module__}.{self.function.__qualname__}",
            "has_exact_options": self.exact_options is not None,
        }


def _validated(apply: Callable, name: str, settings: tuple, draws: tuple[str, ...], shared_qk: bool) -> Callable:
    """``apply`` behind the checks every registry entry shares, run before any shape is indexed."""
    accepted = settings + (("top-left",) if True in settings else ())

    @functools.wraps(apply)
    def entry(q, k, v, *, return_draws=False, **options):
        return_draws = check_bool("return_draws", return_draws)
        q, k, v = (as_float(label, x) for label, x in (("q", q), ("k", k), ("v", v)))
        check_qkv(q, k, v)
        if shared_qk and (k.shape != q.shape or not np.array_equal(k, q, equal_nan=True)):
            raise ValueError(f"{name} shares QK: its keys are its queries, so k must be q; got q shape {q.shape}, "
                             f"k shape {k.shape}" + ("" if k.shape != q.shape else " with other values"))
        if "causal" in options:
            try:
                check_choice("causal", options["causal"], accepted)
            except ValueError:
                raise ValueError(f"{name} takes causal in {accepted!r}, got {options['causal']!r}") from None
        if options.get("rng") is not None:
            as_rng(options["rng"])
        if "return_weights" in options:
            check_bool("return_weights", options["return_weights"])
        result = apply(q, k, v, **options)
        if not return_draws:
            return result._replace(draws=None)
        drawn = dict(result.draws or {})
        if set(drawn) != set(draws):                               # the record and its apply must agree
            raise RuntimeError(f"{name}: apply returned the draws {sorted(drawn)}, its record names {sorted(draws)}")
        return result._replace(draws=drawn)

    return entry

