"""The catalogue's record type: :class:`Mechanism`, and what every ``apply`` returns."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from numpy.typing import NDArray

__all__ = ["KINDS", "AttentionResult", "Mechanism"]

KINDS = ("attention", "mask", "component")


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
    cross : bool
        ``apply`` accepts queries and keys of different lengths (n != m) with ``causal=False``;
        self-attention-only patterns take n == m (and any n with ``causal="bottom-right"``).
    incremental : bool
        With ``causal``, ``apply`` also takes n new queries as the last n of m positions
        (``causal="bottom-right"``, decoding with a key/value cache).
    normalized : bool
        Each row of the effective matrix sums to 1 (the fast-weight delta rule has no
        normaliser: its rows do not).
    nonnegative : bool
        The effective weights are >= 0 (trigonometric random features, for one, can weigh a key
        negatively).
    example_length : int
        A sequence length at which ``apply`` is defined (some patterns exist only at particular
        lengths: a multiple of a block size, the node count of a tree), used by the shared tests.
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
    cross: bool = True
    incremental: bool = True
    normalized: bool = True
    nonnegative: bool = True
    example_length: int = 7

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if (self.apply is None) != (self.kind == "component"):
            raise ValueError(f"{self.id}: components, and only components, have apply=None")
        if self.incremental and not self.causal:
            object.__setattr__(self, "incremental", False)             # nothing to decode without causality

    def as_dict(self) -> dict:
        """The JSON-serialisable fields (everything but the callables)."""
        fields = ("id", "title", "family", "section", "paper", "equation", "time", "memory",
                  "causal", "kind", "exact_limit", "position_dependent", "cross", "incremental",
                  "normalized", "nonnegative", "example_length")
        return {name: getattr(self, name) for name in fields} | {
            "function": f"{self.function.__module__}.{self.function.__qualname__}"
        }
