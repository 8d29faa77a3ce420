"""Command line: ``python -m refattn {list, figures, bench, export, vectors, check, train, atlas}``.

- ``list [--json | --markdown]``: the catalogue (one line per mechanism, a JSON list of records, or
  the README's Markdown table).
- ``figures [--out DIR] [--only ID ...]``: regenerate the PNGs of ``figures/`` (seeded, byte-stable) and,
  when writing the checkout's own ``figures/``, the README's catalogue table. Without ``--out``: the
  ``figures/`` of the source checkout refattn runs from, or ``./figures`` for an installed copy.
- ``bench FAMILY [...]``: speed and memory benchmarks, e.g. ``bench sparse``; a plot only with ``--plot FILE``,
  and the default extra targets only when ``--sizes`` is not given.
- ``export --case NAME --out FILE.npz [--layout bnhd]`` / ``export --list``: write a fixture (inputs,
  conventions, refattn's outputs and gradients) for another implementation's tests.
  ``export --mechanism ID [--case default|causal|bottom_right] --out FILE.npz``: the test vector of any
  registered attention mechanism (inputs, draws, options, output, weights, gradients where refattn has them).
- ``vectors --out DIR [--only ID ...]``: the whole suite of test vectors (each id's default case and its causal
  one) and ``DIR/manifest.json``.
- ``atlas [--out DIR | --update-readme] [--only ID ...] [--tasks TASK ...] [--num-sequences N] [--repeats R]``:
  the fidelity atlas: every registry entry in place of the trained models' softmax attention; writes
  ``atlas.png`` and ``atlas.json`` to ``--out`` (default the current folder), one line per row on stderr.
  ``--update-readme`` publishes the run: the files into the checkout's ``figures/`` and the table into its
  README.
- ``check FILE.npz [--rule ratio|table|ulp] [--table NAME] [--max-ulps N] [--memory-budget GIB]``: compare
  the candidate's results stored in the file with the oracle; exit 0 on pass, 1 on fail, 2 on a malformed file.
- ``train TASK [--out FILE] [--seed S] [--steps N] [--check [--strict]] [--record FILE]``: train the small
  Transformer of a task (``reverse``, ``induction``) with refattn's own gradients, showing progress on stderr;
  print the time and the accuracy on fresh sequences, and write the weights. ``--check`` says whether they are
  the shipped weights bit for bit and, separately, whether the model is as accurate as the shipped one on the
  same fresh sequences (exit 0 when it is, 1 when not); ``--strict`` also asks for the bits (exit 1 when they
  differ, which another BLAS kernel's rounding is enough for).

Every subcommand exits 2 with a one-line error for bad arguments (numbers out of range, an output
path that is an existing file where a folder is needed or the reverse, a file in a folder that does not
exist, benchmark sizes that do not fit in memory or that a pattern cannot take). No command writes into
the checkout unless told to (``figures`` is told by its purpose); nothing writes into an installed package.
A reader that closes stdout early (``list --json | head``) ends the command quietly with exit status 141.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

from . import registry
from .argtypes import non_negative_float, non_negative_int, output_file, output_folder, positive_float, positive_int

__all__ = ["SIGPIPE_EXIT", "checkout", "default_figures_folder", "main", "non_negative_float", "non_negative_int",
           "output_file", "output_folder", "positive_float", "positive_int"]

PACKAGE = Path(__file__).resolve().parent

SIGPIPE_EXIT = 141
"""The exit status when the reader of stdout closes it early: 128 + SIGPIPE (13), what the shell reports
for ``cat`` or ``yes`` killed by the signal in the same place. Not 0: the output was not all delivered, and
a script with ``set -o pipefail`` should see that as it does for those tools."""


def checkout(package: Path = PACKAGE) -> Path | None:
    """The source checkout the package at ``package`` belongs to, or None for an installed copy.

    A checkout is the folder just above the package when it holds ``README.md`` and a ``pyproject.toml``
    naming the project ``refattn``: a clone, run in place or installed editable. A copy installed by
    ``pip install .`` sits in site-packages, which holds neither.

    Parameters
    ----------
    package : pathlib.Path
        The folder of the ``refattn`` package (default this one).

    Returns
    -------
    pathlib.Path or None
    """
    root = package.resolve().parent
    project = root / "pyproject.toml"
    if not (root / "README.md").is_file() or not project.is_file():
        return None
    named = re.search(r'^name\s*=\s*"refattn"\s*$', project.read_text(encoding="utf-8"), re.MULTILINE)
    return root if named else None


def default_figures_folder() -> Path:
    """Where ``figures`` writes without ``--out``: the checkout's ``figures/``, else ``./figures`` (installed copy)."""
    root = checkout()
    return Path("figures") if root is None else root / "figures"


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit code (:data:`SIGPIPE_EXIT` when stdout's reader closed it early)."""
    try:
        code = _main(argv)
        sys.stdout.flush()                                         # a closed pipe shows here at the latest
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)                 # Python's own flush at exit must not
        os.dup2(devnull, sys.stdout.fileno())                      # meet the pipe again (and print a traceback)
        os.close(devnull)
        return SIGPIPE_EXIT
    return code


def _main(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="python -m refattn", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p_list = sub.add_parser("list", help="print the catalogue of mechanisms")
    fmt = p_list.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="a JSON list of records")
    fmt.add_argument("--markdown", action="store_true", help="the README's catalogue table")

    p_fig = sub.add_parser("figures", help="regenerate the figures (one PNG per mechanism) and, writing the "
                           "checkout's own figures/, the README's catalogue table")
    p_fig.add_argument("--out", type=output_folder, default=default_figures_folder(),
                       help="output folder, created if missing (default: figures/ of the source checkout refattn "
                            "runs from; for an installed copy, figures/ under the current folder)")
    p_fig.add_argument("--only", nargs="+", metavar="ID", help="only these mechanism ids or sheet names")

    p_bench = sub.add_parser("bench", help="speed and memory benchmarks (ratios measured in one process)")
    families = p_bench.add_subparsers(dest="family", required=True)
    bench_parsers = {}
    for name, module in _bench_families().items():
        bench_parsers[name] = families.add_parser(name, help=module.__doc__.splitlines()[0])
        module.add_arguments(bench_parsers[name])

    p_export = sub.add_parser("export", help="write a fixture .npz (inputs, conventions, refattn's results)")
    p_export.add_argument("--list", action="store_true", help="list the cases and exit")
    p_export.add_argument("--case", metavar="NAME", help="the case to write (see --list; with --mechanism: default, "
                          "causal or bottom_right, default 'default')")
    p_export.add_argument("--mechanism", metavar="ID", help="write the test vector of this registered mechanism")
    p_export.add_argument("--out", type=Path, metavar="FILE.npz", help="the file to write (exactly this name)")
    p_export.add_argument("--layout", choices=("bhnd", "bnhd"), default="bhnd",
                          help="axis order of q, k, v and the results: (b, h, n, d) or (b, n, h, d)")

    p_vectors = sub.add_parser("vectors", help="write the test vectors of every registered attention mechanism "
                               "and their manifest.json")
    p_vectors.add_argument("--out", type=output_folder, required=True, metavar="DIR",
                           help="output folder, created if missing")
    p_vectors.add_argument("--only", nargs="+", metavar="ID", help="only these mechanism ids")

    p_atlas = sub.add_parser("atlas", help="the fidelity atlas: every registry entry in place of the trained "
                             "models' softmax attention; writes atlas.png and atlas.json")
    p_atlas.add_argument("--out", type=output_folder, default=None,
                         help="output folder, created if missing (default the current folder; with --update-readme "
                              "the checkout's figures/)")
    p_atlas.add_argument("--update-readme", action="store_true",
                         help="publish the run: atlas.png and atlas.json into the checkout's figures/ and the table "
                              "into its README.md (needs a source checkout)")
    p_atlas.add_argument("--only", nargs="+", metavar="ID", help="only these mechanism ids")
    p_atlas.add_argument("--tasks", nargs="+", choices=_task_names(), default=list(_task_names()),
                         help="the trained models to run (default both)")
    p_atlas.add_argument("--num-sequences", type=non_negative_int, default=200, metavar="N",
                         help="fresh sequences per accuracy (default 200; 0: no accuracy)")
    p_atlas.add_argument("--input-sequences", type=positive_int, default=8, metavar="N",
                         help="sequences whose attention calls are measured (default 8)")
    p_atlas.add_argument("--repeats", type=positive_int, default=3, metavar="R",
                         help="timed runs of each call, the best counts (default 3)")
    p_atlas.add_argument("--seed", type=non_negative_int, default=0, metavar="S",
                         help="seed of the random inputs, the mechanisms' draws and (offset) the sequences")

    p_check = sub.add_parser("check", help="check a candidate's results stored in an .npz against the oracle")
    p_check.add_argument("file", type=Path, metavar="FILE.npz", help="inputs, conventions and candidate_* arrays")
    p_check.add_argument("--rule", choices=("ratio", "table", "ulp"), default=None,
                         help="tolerance rule (default ratio; table with --table, ulp with --max-ulps)")
    p_check.add_argument("--table", choices=("torch-default", "xformers", "jax"), default=None,
                         help="tolerance table of rule 'table' (default torch-default)")
    p_check.add_argument("--max-ulps", type=non_negative_float, default=None, metavar="N",
                         help="N of rule 'ulp' (default 64)")
    p_check.add_argument("--memory-budget", type=positive_float, default=None, metavar="GIB",
                         help="GiB the oracle's (..., n, m) arrays may take (default 4); above it the output is "
                              "computed by blocks of query rows and gradients are refused")

    p_train = sub.add_parser("train", help="train a task's small Transformer in NumPy and write its weights")
    p_train.add_argument("task", choices=_task_names(), help="the task")
    p_train.add_argument("--out", type=output_file, default=None, metavar="FILE",
                         help="where to write the weights (default TASK.npz in the current folder; without "
                              "--out, --check writes nothing)")
    p_train.add_argument("--seed", type=non_negative_int, default=None, metavar="S",
                         help="seed of the initial weights and the batches (default: the shipped weights')")
    p_train.add_argument("--steps", type=positive_int, default=None, metavar="N",
                         help="Adam steps (default: the shipped weights')")
    p_train.add_argument("--check", action="store_true",
                         help="say whether the trained weights are the shipped ones bit for bit and whether the model "
                              "is as accurate as the shipped one on the same fresh sequences; exit 1 if it is less "
                              "accurate")
    p_train.add_argument("--strict", action="store_true",
                         help="with --check (implied): exit 1 also when the bits differ (another BLAS kernel's "
                              "rounding is enough for that)")
    p_train.add_argument("--record", type=output_file, default=None, metavar="FILE",
                         help="also write the run's record (curves; attention and head scores at checkpoints) there")

    args = parser.parse_args(argv)
    if args.command == "list":
        return _list(args)
    if args.command == "bench":
        module = _bench_families()[args.family]
        try:
            module.check_arguments(args)                           # sizes that fit memory and the patterns
        except ValueError as error:
            bench_parsers[args.family].error(str(error))           # usage and one error line, exit 2
        return module.run(args)
    if args.command == "export":
        return _export(args)
    if args.command == "vectors":
        return _vectors(args)
    if args.command == "check":
        return _check(args)
    if args.command == "train":
        return _train(args)
    if args.command == "atlas":
        return _atlas(args)
    return _figures(args)


def _bench_families() -> dict:
    from .bench import FAMILIES

    return FAMILIES


def _task_names() -> tuple[str, ...]:
    from .training.tasks import TASKS

    return tuple(TASKS)


def _train(args) -> int:
    from .training.loop import History, compare_params, pretrained, save_params, train
    from .training.record import record_training, save_record
    from .training.tasks import EVAL_SEED, evaluate, get_task
    from .training.tree import leaf_names

    task = get_task(args.task)
    check = args.check or args.strict
    out = args.out if args.out is not None or check else Path(f"{task.name}.npz")
    seed = task.seed if args.seed is None else args.seed
    steps = task.steps if args.steps is None else args.steps
    try:
        if args.record is None:
            params, history = train(task, seed=seed, steps=steps, out=out)
        else:
            params, record = record_training(task, seed=seed, steps=steps)
            history = History(record.loss, record.accuracy, float("nan"))
            save_record(args.record, record)
            if out is not None:
                save_params(out, params)
    except OSError as error:
        print(f"error: cannot write {error.filename or out}: {error.strerror or error}", file=sys.stderr)
        return 2
    fresh = dict(num_sequences=1000, rng=EVAL_SEED)
    accuracy = evaluate(task, params, **fresh)
    timing = "" if args.record else f" in {history.seconds:.1f} s ({steps / history.seconds:.0f} steps/s)"
    print(f"{task.name}: seed {seed}, {steps} steps{timing}; final loss {history.loss[-1]:.3g}; accuracy on "
          f"{fresh['num_sequences']} fresh sequences {accuracy:.4f}")
    for written in (out, args.record):
        if written is not None:
            print(f"wrote {written}")
    if not check:
        return 0
    shipped = pretrained(task)
    differences = compare_params(params, shipped)
    recipe = f"seed {task.seed}, {task.steps} steps"
    if differences:
        name, delta = max(differences, key=lambda item: item[1])
        print(f"bits: differ from the shipped weights ({recipe}) in {len(differences)} of {len(leaf_names(params))} "
              f"arrays, largest |Δ| {delta:.3g} in {name} (expected where BLAS rounds the products otherwise: "
              "another kernel, another thread count)")
    else:
        print(f"bits: identical to the shipped weights ({recipe})")
    shipped_accuracy = evaluate(task, shipped, **fresh)
    as_good = accuracy >= shipped_accuracy
    print(f"accuracy: {accuracy:.4f} against the shipped model's {shipped_accuracy:.4f} on the same "
          f"{fresh['num_sequences']} fresh sequences: {'as good' if as_good else 'WORSE'}")
    if not as_good:
        return 1
    if args.strict and differences:
        print("--strict: the bits differ")
        return 1
    return 0


def _list(args) -> int:
    mechanisms = registry.all()
    if args.json:
        json.dump([m.as_dict() for m in mechanisms], sys.stdout, indent=2)   # ASCII (\u escapes): any stdout encoding
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
        print(f"error: unknown figure(s): {', '.join(unknown)}; known: {', '.join(known)}", file=sys.stderr)
        return 2
    try:
        write_figures(args.out, names, progress=True)
    except OSError as error:
        print(f"error: cannot write figures to {args.out}: {error.strerror or error}", file=sys.stderr)
        return 2
    root = checkout()
    own = root is not None and args.out.resolve() == (root / "figures").resolve()   # the checkout's own figures
    if own and registry.update_readme_catalogue(root / "README.md"):
        print(f"updated the catalogue table of {root / 'README.md'}", file=sys.stderr)
    return 0


def _atlas_folder(args) -> tuple[Path, Path | None]:
    """(folder of atlas.png and atlas.json, README to update or None); a ``ValueError`` naming what is missing."""
    if not args.update_readme:
        return (Path(".") if args.out is None else args.out), None
    root = checkout()
    if root is None:
        raise ValueError(f"--update-readme needs the README of a source checkout; refattn runs from {PACKAGE}, "
                         "which has none beside it (write the atlas with --out DIR instead)")
    figures = root / "figures"
    if args.out is not None and args.out.resolve() != figures.resolve():
        raise ValueError(f"--update-readme writes into {figures}, where the README's atlas.png is; got --out "
                         f"{args.out}")
    return figures, root / "README.md"


def _atlas(args) -> int:
    import time

    from .atlas import model_task, run_atlas
    from .atlas.report import atlas_figure, update_readme_atlas
    from .viz import save_figure

    start = time.perf_counter()
    try:
        out, readme = _atlas_folder(args)                          # before the run, not after it
        ids = None if args.only is None else [registry.get(i).id for i in args.only]
        tasks = [model_task(t, input_sequences=args.input_sequences, num_sequences=args.num_sequences,
                            seed=args.seed) for t in args.tasks]
        atlas = run_atlas(tasks, ids=ids, repeats=args.repeats, seed=args.seed, progress=True)
    except (KeyError, ValueError) as error:
        print(f"error: {error.args[0] if isinstance(error, KeyError) else error}", file=sys.stderr)
        return 2
    try:
        out.mkdir(parents=True, exist_ok=True)
        save_figure(atlas_figure(atlas), out / "atlas.png")
        (out / "atlas.json").write_text(json.dumps(atlas.as_dict(), indent=1, ensure_ascii=False) + "\n",
                                        encoding="utf-8")
    except OSError as error:
        print(f"error: cannot write the atlas to {out}: {error.strerror or error}", file=sys.stderr)
        return 2
    print(f"wrote {out / 'atlas.png'} and {out / 'atlas.json'}", file=sys.stderr)
    if readme is not None and update_readme_atlas(readme, atlas):
        print(f"updated the atlas table of {readme}", file=sys.stderr)
    print(f"atlas: {len(atlas.rows)} rows in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    return 0


def _export(args) -> int:
    from .oracle.fixtures import CASES, export_case

    if args.mechanism is not None:
        return _export_vector(args)
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


def _export_vector(args) -> int:
    from .oracle.vectors import export_vector, vector_cases, vector_ids

    if args.out is None or args.list:
        print("error: export --mechanism ID needs --out FILE.npz (and takes no --list)", file=sys.stderr)
        return 2
    if args.mechanism not in vector_ids():
        print(f"error: no registered attention mechanism {args.mechanism!r}; known: {', '.join(vector_ids())}",
              file=sys.stderr)
        return 2
    case = args.case or "default"
    if case not in vector_cases(args.mechanism):
        print(f"error: {args.mechanism} has the cases {', '.join(vector_cases(args.mechanism))}; got {case!r}",
              file=sys.stderr)
        return 2
    if args.layout != "bhnd":
        print("error: --layout is for the sdpa fixtures (--case without --mechanism)", file=sys.stderr)
        return 2
    try:
        export_vector(args.mechanism, args.out, case)
    except OSError as error:
        print(f"error: cannot write {args.out}: {error.strerror or error}", file=sys.stderr)
        return 2
    return 0


def _vectors(args) -> int:
    from .oracle.vectors import vector_ids, write_suite

    unknown = [i for i in args.only or () if i not in vector_ids()]
    if unknown:
        print(f"error: no registered attention mechanism {', '.join(map(repr, unknown))}; known: "
              f"{', '.join(vector_ids())}", file=sys.stderr)
        return 2
    try:
        manifest = write_suite(args.out, args.only, progress=True)
    except OSError as error:
        print(f"error: cannot write the vectors to {args.out}: {error.strerror or error}", file=sys.stderr)
        return 2
    print(f"wrote {len(manifest['files'])} vectors and {args.out / 'manifest.json'}", file=sys.stderr)
    return 0


def _check(args) -> int:
    from .oracle.checkfile import FixtureError, check_file

    rule = args.rule or ("table" if args.table else "ulp" if args.max_ulps is not None else "ratio")
    budget = {} if args.memory_budget is None else {"memory_budget": max(1, int(args.memory_budget * 2**30))}
    try:
        report = check_file(args.file, rule=rule, table=args.table, max_ulps=args.max_ulps, **budget)
    except FixtureError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except Exception as error:  # noqa: BLE001 - a malformed file must never end in a traceback
        message = " ".join(str(error).split())
        print(f"error: {args.file}: {type(error).__name__}: {message}", file=sys.stderr)
        return 2
    print(report)
    return 0 if report.passed else 1
