"""The catalogue's record type, :class:`Mechanism`; what every ``apply`` returns; how a record is drawn.

A mechanism's record is declared in its own module, beside its maths, with keyword arguments;
each family package lists its records in one tuple (``RECORDS`` in ``refattn/<family>/__init__.py``)
and :mod:`refattn.registry` gathers the families. Everything else (the command line, the figures,
the README's catalogue, the gallery, the registry-driven tests) iterates the records.
"""
from __future__ import annotations

import ast
import functools
import importlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from .common.checks import as_rng, check_bool, check_choice, checked_qkv
from .deprecation import take_renamed
from .draws import tracing
from .masks import allowed_pairs

__all__ = ["KINDS", "MIXINGS", "AttentionResult", "FigureSpec", "Mechanism", "PerShape", "WhenDrawn", "family"]

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
    figsize : (float, float), optional
        Width and height in inches; default 1 + 3 per panel wide, 8.7 high with the pattern row
        (4.4 without).
    labels : tuple of str, optional
        Tick labels of the rows and of the columns (positions with a name, e.g. a relay token "s").
    split : tuple of int, default ()
        Positions where a group of indices begins (global | local tokens, ...): a line is drawn
        before each, across and down every panel.
    """

    title: str
    panels: tuple[tuple[str, Mapping], ...]
    n: int = 16
    m: int | None = None
    seed: int = 0
    figsize: tuple[float, float] | None = None
    labels: tuple[str, ...] | None = None
    split: tuple[int, ...] = ()


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
        return_draws=False, **options) -> AttentionResult``, built from ``function`` by
        :meth:`Mechanism.of` (the options are the function's parameters, by name) or, for a pattern,
        by :func:`refattn.sparse.pattern_apply`. q, k and v are validated once, by the function
        (before any shape is indexed); the record checks what is its own: ``causal`` against
        :attr:`causal_settings`, shared QK, ``return_draws``. ``apply.__wrapped__`` returns the
        call's draws always (``AttentionResult.draws``); the record keeps them only when asked.
    figure : FigureSpec or str
        How ``python -m refattn figures`` draws it: a :class:`FigureSpec` for the generic template,
        or ``"module:name"`` naming a :class:`FigureSpec` (drawn by the template too) or a function
        that returns a matplotlib Figure (imported only when the figure is drawn, so importing
        refattn loads no plotting).
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
        when it is not given, and returns every one the call used (drawn or given) in
        ``AttentionResult.draws`` when asked (``return_draws=True``): one that another option made
        unnecessary (clustered's hash planes beside an explicit ``assignment``) is absent. Fed back as
        options, they reproduce the result without ``rng``. Empty for a mechanism whose result does
        not depend on ``rng``.
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
        _BY_FUNCTION.setdefault(self.function, []).append(self)
        if self.apply is not None and not hasattr(self.apply, "__wrapped__"):
            object.__setattr__(self, "apply", _validated(self.apply, self.id, self.causal_settings, self.draws,
                                                         self.shared_qk))

    @classmethod
    def of(cls, door: Callable, *, inputs: tuple[str, str, str] | None = None, defaults: Mapping | None = None,
           fixed: Mapping | None = None, options: tuple[str, ...] | None = None, renamed: Mapping | None = None,
           allowed: str | Callable | None = "mask", **facts) -> Mechanism:
        """The record of the mechanism whose public function is ``door``: its ``apply`` calls ``door`` by name.

        ``apply(q, k, v, *, causal=False, rng=None, return_weights=False, return_draws=False, **options)``
        passes q, k, v as ``door``'s first three parameters (or those named by ``inputs``), and every option
        by its own name: the record's options *are* ``door``'s keyword parameters (an unknown one is a
        ``TypeError`` naming it). ``door`` validates its inputs (once per call); ``apply`` only checks the
        choices that belong to the record (``causal`` against :attr:`causal_settings`, shared QK, the
        flags) and gathers what ``door`` noted: the draws of :func:`refattn.draws.given_or_drawn` and the
        pairs of :func:`refattn.draws.note_allowed`. ``rng`` is dropped for a door that draws nothing.

        Parameters
        ----------
        door : callable
            ``door(q, k, v, *, ..., return_weights=False)``, returning ``out`` or ``(out, weights)``.
        inputs : (str, str, str), optional
            The names of door's parameters that take q, k and v (a layer's ``("x_q", "x_kv", "x_v")``).
        defaults : dict, optional
            Demonstration defaults of ``apply`` that differ from door's own (small sizes for the shared
            tests and figures); a :class:`PerShape` value is computed from n and m, a :class:`WhenDrawn` one
            applies only while its draw is not given.
        fixed : dict, optional
            Options set by the record and not taken from the caller (performer's ``kind``).
        options : tuple of str, optional
            The subset of door's options the record takes (a mask record takes sdpa's ``scale`` only).
        renamed : dict, optional
            Old option names of ``apply`` (old -> new), accepted with a ``DeprecationWarning`` for one release.
            Door's own renames (:func:`refattn.deprecation.renamed`) are accepted too.
        allowed : "mask", callable or None, default "mask"
            ``AttentionResult.allowed`` when door notes none: "mask" gives the pairs of the call's ``mask``,
            ``causal`` and ``fully_masked`` options (:func:`refattn.masks.allowed_pairs`); a callable
            ``allowed(call, weights)`` gets the call's options; None: every pair may carry weight.
        **facts
            The record's other fields (``id``, ``title``, ``family``, ...); ``function`` defaults to ``door``.
        """
        facts.setdefault("function", door)
        facts.setdefault("kind", "attention")
        causal_default = facts.get("noncausal", True) is False     # a causal-only record defaults to causal=True
        apply = _door_apply(door, facts["id"], causal_default=causal_default, inputs=inputs,
                            defaults=dict(defaults or {}), fixed=dict(fixed or {}), options=options,
                            renamed=dict(renamed or {}), allowed=allowed)
        record = cls(**facts, apply=apply)
        taken = inspect.signature(apply).parameters
        exact = (record.exact_options,) if isinstance(record.exact_options, Mapping) else ()
        for example in (*record.examples, *exact):
            unknown = sorted(set(example) - set(taken))
            if unknown:
                raise TypeError(f"{record.id}: its examples or exact options name {unknown}, which apply does not take")
        return record

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


_BY_FUNCTION: dict[Callable, list[Mechanism]] = {}


def family(namespace: Mapping[str, Any]) -> tuple[tuple[Mechanism, ...], list[str]]:
    """A family package's ``(RECORDS, __all__)``, from its ``__init__``'s namespace (``globals()``).

    The package lists its mechanism modules once, as star imports in catalogue order
    (``from .performer import *``, between ``# isort: off`` and ``# isort: on``); each module's
    ``__all__`` names its public functions and classes. ``RECORDS`` are the records of those functions,
    module by module in the order of the lines (a function with two records, as Performer's two
    feature maps, gives both, in the order they were declared), and ``__all__`` every name the lines
    brought.

    Parameters
    ----------
    namespace : dict
        The family package's ``globals()``, after its star imports.
    """
    source = Path(namespace["__file__"]).read_text(encoding="utf-8")
    package = namespace["__name__"]
    lines = [node.module for node in ast.parse(source).body if isinstance(node, ast.ImportFrom)
             and node.level == 1 and node.module and [alias.name for alias in node.names] == ["*"]]
    exported: list[str] = []
    records: list[Mechanism] = []
    for module_name in lines:
        module = importlib.import_module(f"{package}.{module_name}")   # not getattr: a star import may
                                                                   # have bound a function of the same name
        for name in getattr(module, "__all__", ()):
            if name not in exported:
                exported.append(name)
            value = getattr(module, name)
            found = _BY_FUNCTION.get(value, ()) if callable(value) else ()
            records += [r for r in found if not any(r is seen for seen in records)]
    return tuple(records), sorted(exported)


class PerShape:
    """A demonstration default computed from the call's n queries and m keys: ``PerShape(lambda n, m: m - m // 3)``."""

    def __init__(self, fn: Callable[[int, int], Any]) -> None:
        self.fn = fn

    def __call__(self, n: int, m: int) -> Any:
        return self.fn(n, m)

    def __repr__(self) -> str:
        return "<depends on n, m>"


class WhenDrawn:
    """A demonstration default that sizes a draw, applied only when the draw is not given (a given draw states
    its own size): ``{"num_features": WhenDrawn("omega", 64)}``."""

    def __init__(self, draw: str, value: Any) -> None:
        self.draw, self.value = draw, value

    def __repr__(self) -> str:
        return f"{self.value!r} (when {self.draw} is drawn)"


_RESERVED = ("causal", "rng", "return_weights", "return_draws")


def _door_apply(door: Callable, name: str, *, causal_default: bool, inputs, defaults: dict, fixed: dict, options,
                renamed: dict, allowed) -> Callable:
    """The uniform ``apply`` of :meth:`Mechanism.of`: ``door`` called by its own parameter names."""
    parameters = inspect.signature(door).parameters
    names = list(parameters)
    inputs = tuple(inputs or names[:3])
    missing = [x for x in inputs if x not in parameters]
    if len(inputs) != 3 or missing:
        raise TypeError(f"{name}: the door {door.__name__} has no input parameters {missing or inputs}")
    takes = {p.name: p for p in parameters.values()
             if p.name not in inputs and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    accepted = [x for x in takes if x not in _RESERVED and x not in fixed and (options is None or x in options)]
    if options is not None and set(options) - set(accepted):
        raise TypeError(f"{name}: {door.__name__} has no options {sorted(set(options) - set(accepted))}")
    for label, table in (("defaults", defaults), ("fixed", fixed)):
        unknown = set(table) - set(takes)
        if unknown:
            raise TypeError(f"{name}: {label} names options {sorted(unknown)} that {door.__name__} does not take")
    renamed = {**getattr(door, "__renamed__", {}), **renamed}
    takes_causal, takes_rng = "causal" in takes, "rng" in takes
    takes_weights = "return_weights" in takes

    def apply(q, k, v, *, causal=causal_default, rng=None, return_weights=False, return_draws=False, **given):
        return_weights = check_bool("return_weights", return_weights)
        return_draws = check_bool("return_draws", return_draws)
        given = take_renamed(name, given, renamed)
        unknown = sorted(set(given) - set(accepted))
        if unknown:
            raise TypeError(f"{name} takes no option {', '.join(map(repr, unknown))}; its options: "
                            f"{', '.join(accepted) or 'none'} (and causal, rng, return_weights, return_draws)")
        if return_weights and not takes_weights:
            raise ValueError(f"{name}: {door.__name__} returns no weights")
        call = {}
        for option, value in defaults.items():
            if isinstance(value, WhenDrawn):
                if option not in given and value.draw not in given:
                    call[option] = value.value
            elif option not in given:
                call[option] = value(*_lengths(q, k)) if isinstance(value, PerShape) else value
        call |= given | fixed
        if takes_causal:
            call["causal"] = causal
        if takes_rng:
            call["rng"] = rng
        elif rng is not None:
            as_rng(rng)                                            # a bad rng is an error even where unused
        if return_weights:
            call["return_weights"] = True
        with tracing(name) as trace:
            result = door(**dict(zip(inputs, (q, k, v), strict=True)), **call)
        if not return_weights:
            return AttentionResult(result, draws=dict(trace.draws))
        if not (isinstance(result, tuple) and len(result) == 2):
            raise RuntimeError(f"{name}: {door.__name__}(return_weights=True) must return (out, weights)")
        out, weights = result
        if trace.allowed_noted:
            pairs = trace.allowed
        elif allowed == "mask":
            pairs = allowed_pairs(call.get("mask"), causal, np.shape(weights), call.get("fully_masked", "zero"))
        elif callable(allowed):
            pairs = allowed(call, weights)
        else:
            pairs = None
        return AttentionResult(out, weights, pairs, dict(trace.draws))

    shown = [inspect.Parameter(x, inspect.Parameter.POSITIONAL_OR_KEYWORD) for x in ("q", "k", "v")]
    flags = (("causal", causal_default), ("rng", None), ("return_weights", False), ("return_draws", False))
    shown += [inspect.Parameter(x, inspect.Parameter.KEYWORD_ONLY, default=d) for x, d in flags]
    shown += [takes[x].replace(kind=inspect.Parameter.KEYWORD_ONLY, default=defaults.get(x, takes[x].default))
              for x in accepted]
    apply.__signature__ = inspect.Signature(shown)                 # type: ignore[attr-defined]
    apply.__doc__ = (f"The registry's uniform apply of {name}: {door.__module__}.{door.__qualname__} with q, k, v as "
                     f"{', '.join(inputs)}" + (f"; fixed {fixed}" if fixed else "") +
                     (f"; demonstration defaults {defaults}" if defaults else "") + ".")
    apply.door = door                                              # type: ignore[attr-defined]
    return apply


def _lengths(q, k) -> tuple[int, int]:
    """n and m of array-like q and k; 0 where a shape is unreadable or lacks the axis (the door names the input)."""
    try:
        shape_q, shape_k = np.shape(q), np.shape(k)
    except (TypeError, ValueError, AttributeError):                # ragged or odd input: the door refuses it
        return 0, 0
    return (shape_q[-2] if len(shape_q) >= 2 else 0), (shape_k[-2] if len(shape_k) >= 2 else 0)


def _validated(apply: Callable, name: str, settings: tuple, draws: tuple[str, ...], shared_qk: bool) -> Callable:
    """``apply`` behind the record's own checks: ``causal`` among its settings, shared QK, the draws it names.

    q, k and v are validated once, by the mechanism's function (or :func:`~refattn.sparse.pattern_apply`).
    """
    accepted = settings + (("top-left",) if True in settings else ())

    @functools.wraps(apply)
    def entry(q, k, v, *, return_draws=False, **options):
        return_draws = check_bool("return_draws", return_draws)
        if shared_qk:                                              # q, k, v named before k is compared with q
            q_, k_, _, _ = checked_qkv(q, k, v)
            if k_.shape != q_.shape or not np.array_equal(k_, q_, equal_nan=True):
                raise ValueError(f"{name} shares QK: its keys are its queries, so k must be q; got q shape "
                                 f"{q_.shape}, k shape {k_.shape}"
                                 + ("" if k_.shape != q_.shape else " with other values"))
        if "causal" in options:
            try:
                check_choice("causal", options["causal"], accepted)
            except ValueError:
                raise ValueError(f"{name} takes causal in {accepted!r}, got {options['causal']!r}") from None
        if "causal" not in options and "causal" in inspect.signature(apply).parameters:
            options["causal"] = inspect.signature(apply).parameters["causal"].default
        result = apply(q, k, v, **options)
        if not return_draws:
            return result._replace(draws=None)
        drawn = dict(result.draws or {})
        if not set(drawn) <= set(draws):                           # the record names every draw apply can make
            raise RuntimeError(f"{name}: apply returned the draws {sorted(drawn)}, its record names {sorted(draws)}")
        return result._replace(draws=drawn)

    return entry
