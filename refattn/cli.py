"""Command line: ``python -m refattn {list, figures, bench}``.

- ``list [--json | --markdown]``: the catalogue (one line per mechanism, a JSON list of records, or
  the README's Markdown table).
- ``figures [--out DIR] [--only ID ...]``: regenerate the PNGs of ``figures/`` (seeded, byte-stable).
- ``bench FAMILY [...]``: speed and memory benchmarks, e.g. ``bench sparse``.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import registry

__all__ = ["main"]

FIGURES_DIR = Path(__file__).resolve().parent.parent / "figures"


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    parser = argparse.ArgumentParser(prog="python -m refattn", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p_list = sub.add_parser("list", help="print the catalogue of mechanisms")
    fmt = p_list.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="a JSON list of records")
    fmt.add_argument("--markdown", action="store_true", help="the README's catalogue table")

    p_fig = sub.add_parser("figures", help="regenerate the figures (one PNG per mechanism)")
    p_fig.add_argument("--out", type=Path, default=FIGURES_DIR, help=f"output folder (default {FIGURES_DIR})")
    p_fig.add_argument("--only", nargs="+", metavar="ID", help="only these mechanism ids or sheet names")

    p_bench = sub.add_parser("bench", help="speed and memory benchmarks (ratios measured in one process)")
    families = p_bench.add_subparsers(dest="family", required=True)
    for name, module in _bench_families().items():
        module.add_arguments(families.add_parser(name, help=module.__doc__.splitlines()[0]))

    args = parser.parse_args(argv)
    if args.command == "list":
        return _list(args)
    if args.command == "bench":
        return _bench_families()[args.family].run(args)
    return _figures(args)


def _bench_families() -> dict:
    from .bench import FAMILIES

    return FAMILIES


def _list(args) -> int:
    mechanisms = registry.all()
    if args.json:
        json.dump([m.as_dict() for m in mechanisms], sys.stdout, indent=2, ensure_ascii=False)
        sys.stdout.write("\n")
    elif args.markdown:
        sys.stdout.write(registry.catalogue_markdown())
    else:
        width = max(len(m.id) for m in mechanisms)
        for m in mechanisms:
            print(f"{m.id:<{width}}  {m.family:<8}  {m.kind:<9}  {'causal' if m.causal else '      '}  {m.title}")
    return 0


def _figures(args) -> int:
    from .figures import FIGURES, write_figures  # matplotlib only when drawing

    names = args.only or list(FIGURES)
    unknown = [n for n in names if n not in FIGURES]
    if unknown:
        print(f"unknown figure(s): {', '.join(unknown)}; known: {', '.join(FIGURES)}", file=sys.stderr)
        return 2
    write_figures(args.out, names, progress=True)
    return 0
