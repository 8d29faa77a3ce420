r"""The catalogue: one :class:`Mechanism` record per mechanism, gathered family by family.

This is the single list that the command line (``python -m refattn list``), the figures, the
README's catalogue table, the gallery and the registry-driven tests iterate. Each record is
declared beside its maths, in its mechanism's module (``refattn/<family>/<id>.py``); each family
package lists its records in one tuple, ``RECORDS``; the families are gathered here explicitly, in
catalogue order: no import-time discovery.

Every record with ``kind == "attention"`` or ``"mask"`` has a uniform ``apply``::

    apply(q, k, v, *, causal=False, rng=None, return_weights=False, **options) -> AttentionResult

where, with ``return_weights=True``, ``AttentionResult.weights`` is the effective dense
(..., [h,] n, m) attention matrix and ``AttentionResult.allowed`` the pairs each query may see.
Building blocks that are not an attention map of (q, k, v) (``softmax``, ``layer_norm``, ``ffn``,
positional encodings, whole layers and models) have ``kind == "component"`` and ``apply=None``;
their natural function is ``function``.
"""
from __future__ import annotations

from . import beyond, compressed, core, heads, linear, lowrank, positional, prior, sparse
from .mechanism import AttentionResult, FigureSpec, Mechanism

FAMILIES = {"vanilla": core.RECORDS, "sparse": sparse.RECORDS, "linear": linear.RECORDS,
            "compressed": compressed.RECORDS, "lowrank": lowrank.RECORDS, "prior": prior.RECORDS,
            "heads": heads.RECORDS, "positional": positional.RECORDS,
            "beyond": beyond.RECORDS}

__all__ = ["FAMILIES", "AttentionResult", "FigureSpec", "Mechanism", "all", "catalogue_markdown", "get", "ids",
           "update_readme_catalogue"]

_MECHANISMS = tuple(record for records in FAMILIES.values() for record in records)
_BY_ID = {m.id: m for m in _MECHANISMS}
if len(_BY_ID) != len(_MECHANISMS):
    raise RuntimeError("duplicate mechanism ids in the registry")
_WRONG_FAMILY = [m.id for family, records in FAMILIES.items() for m in records if m.family != family]
if _WRONG_FAMILY:
    raise RuntimeError(f"records listed under another family than their own: {_WRONG_FAMILY}")


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


CATALOGUE_START, CATALOGUE_END = "<!-- catalogue:start -->\n", "<!-- catalogue:end -->"


def update_readme_catalogue(path) -> bool:
    """Rewrite the catalogue table between the ``<!-- catalogue:start/end -->`` markers of the README at ``path``.

    Parameters
    ----------
    path : str or pathlib.Path
        The README (Markdown) holding the two markers.

    Returns
    -------
    bool
        Whether the file changed.
    """
    from pathlib import Path

    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if CATALOGUE_START not in text or CATALOGUE_END not in text:
        raise ValueError(f"{path} has no {CATALOGUE_START.strip()} … {CATALOGUE_END} markers")
    head, rest = text.split(CATALOGUE_START, 1)
    new = head + CATALOGUE_START + catalogue_markdown() + CATALOGUE_END + rest.split(CATALOGUE_END, 1)[1]
    if new != text:
        path.write_text(new, encoding="utf-8")
    return new != text
