r"""The catalogue: one :class:`Mechanism` record per id of MECHANISMS.md.

This is the single list that the command line (``python -m refattn list``), the figures, the
README's catalogue table and the shared property tests iterate. Each family's records are written
out explicitly in ``refattn/catalogue/<family>.py``, importing each mechanism's function by name,
and listed here in catalogue order: no auto-discovery.

Every record with ``kind == "attention"`` or ``"mask"`` has a uniform ``apply``::

    apply(q, k, v, *, causal=False, rng=None, **options) -> AttentionResult

where ``AttentionResult.weights`` is the effective dense (..., [h,] n, m) attention matrix.
Building blocks that are not an attention map of (q, k, v) (``softmax``, ``layer_norm``, ``ffn``,
positional encodings, whole layers and models) have ``kind == "component"`` and ``apply=None``;
their natural function is ``function``.
"""
from __future__ import annotations

from .catalogue import linear, sparse, vanilla
from .mechanism import AttentionResult, Mechanism

__all__ = ["AttentionResult", "Mechanism", "all", "get", "ids", "catalogue_markdown"]

_MECHANISMS = (*vanilla.RECORDS, *sparse.RECORDS, *linear.RECORDS)
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
