"""Command line: ``python -m refattn {list, figures, bench, export, check}``.

- ``list [--json | --markdown]``: the catalogue (one line per mechanism, a JSON list of records, or
  the README's Markdown table).
- ``figures [--out DIR] [--only ID ...]``: regenerate the PNGs of ``figures/`` (seeded, byte-stable) and,
  when writing the repository's own ``figures/``, the README's catalogue table.
- ``bench FAMILY [...]``: speed and memory benchmarks, e.g. ``bench sparse``.
- ``export --case NAME --out FILE.npz [--layout bnhd]`` / ``export --list``: write a fixture (inputs,
  conventions, refattn's outputs and gradients) for another implementation's tests.
- ``check FILE.npz [--rule ratio|table|ulp] [--table NAME] [--max-ulps N]``: compare the candidate's
  results stored in the file with the oracle; exit 0 on pass, 1 on fail, 2 on a malformed file.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import registry

__all__ = ["main"]

FIGURES_DIR = Path(__file__).resolve().parent.parent / "figures"
README = FIGURES_DIR.parent / "README.md"


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    parser = argparse.ArgumentParser(prog="python -m refattn", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p_list = sub.add_parser("list", help="print the catalogue of mechanisms")
    fmt = p_list.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="a JSON list of records")
    fmt.add_argument("--markdown", action="store_true", help="the README's catalogue table")

    p_fig = sub.add_parser("figures", help="regenerate the figures (one PNG per mechanism) and, writing the "
                           "repository's own figures/, the README's catalogue table")
    p_fig.add_argument("--out", type=Path, default=FIGURES_DIR, help=f"output folder (default {FIGURES_DIR})")
    p_fig.add_argument("--only", nargs="+", metavar="ID", help="only these mechanism ids or sheet names")

    p_bench = sub.add_parser("bench", help="speed and memory benchmarks (ratios measured in one process)")
    families = p_bench.add_subparsers(dest="family", required=True)
    for name, module in _bench_families().items():
        module.add_arguments(families.add_parser(name, help=module.__doc__.splitlines()[0]))

    p_export = sub.add_parser("export", help="write a fixture .npz (inputs, conventions, refattn's results)")
    p_export.add_argument("--list", action="store_true", help="list the cases and exit")
    p_export.add_argument("--case", metavar="NAME", help="the case to write (see --list)")
    p_export.add_argument("--out", type=Path, metavar="FILE.npz", help="the file to write (exactly this name)")
    p_export.add_argument("--layout", choices=("bhnd", "bnhd"), default="bhnd",
                          help="axis order of q, k, v and the results: (b, h, n, d) or (b, n, h, d)")

    p_check = sub.add_parser("check", help="check a candidate's results stored in an .npz against the oracle")
    p_check.add_argument("file", type=Path, metavar="FILE.npz", help="inputs, conventions and candidate_* arrays")
    p_check.add_argument("--rule", choices=("ratio", "table", "ulp"), default=None,
                         help="tolerance rule (default ratio; table with --table, ulp with --max-ulps)")
    p_check.add_argument("--table", choices=("torch-default", "xformers", "jax"), default=None,
                         help="tolerance table of rule 'table' (default torch-default)")
    p_check.add_argument("--max-ulps", type=float, default=None, metavar="N", help="N of rule 'ulp' (default 64)")

    args = parser.parse_args(argv)
    if args.command == "list":
        return _list(args)
    if args.command == "bench":
        return _bench_families()[args.family].run(args)
    if args.command == "export":
        return _export(args)
    if args.command == "check":
        return _check(args)
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
    from .figures import figure_names, write_figures  # matplotlib only when drawing

    known = figure_names()
    names = args.only or known
    unknown = [n for n in names if n not in known]
    if unknown:
        print(f"unknown figure(s): {', '.join(unknown)}; known: {', '.join(known)}", file=sys.stderr)
        return 2
    write_figures(args.out, names, progress=True)
    if args.out.resolve() == FIGURES_DIR and README.is_file() and registry.update_readme_catalogue(README):
        print(f"updated the catalogue table of {README}", file=sys.stderr)   # the repository's own figures
    return 0


def _export(args) -> int:
    from .oracle.fixtures import CASES, export_case

    if args.list:
        width = max(len(name) for name in CASES)
        for case in CASES.values():
            print(f"{case.name:<{width}}  {case.description}")
        return 0
    if args.case is None or args.out is None:
        print("error: export needs --case NAME and --out FILE.npz (or --list)", file=sys.stderr)
        return 2
    if args.case not in CASES:
        print(f"error: unknown case {args.case!r}; known: {', '.join(CASES)}", file=sys.stderr)
        return 2
    try:
        export_case(args.case, args.out, layout=args.layout)
    except OSError as error:
        print(f"error: cannot write {args.out}: {error.strerror or error}", file=sys.stderr)
        return 2
    return 0


def _check(args) -> int:
    from .oracle.fixtures import FixtureError, check_file

    rule = args.rule or ("table" if args.table else "ulp" if args.max_ulps is not None else "ratio")
    try:
        report = check_file(args.file, rule=rule, table=args.table, max_ulps=args.max_ulps)
    except FixtureError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except Exception as error:  # noqa: BLE001 - a malformed file must never end in a traceback
        message = " ".join(str(error).split())
        print(f"error: {args.file}: {type(error).__name__}: {message}", file=sys.stderr)
        return 2
    print(report)
    return 0 if report.passed else 1
