"""The command line, run as a user would run it (``python -m refattn ...``)."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from refattn import cli, registry
from refattn.bench import _measure
from refattn.cli import main

ROOT = Path(__file__).resolve().parents[1]


def run(*args):
    return subprocess.run([sys.executable, "-m", "refattn", *args], capture_output=True, text=True, check=False)


def test_list_prints_every_id():
    result = run("list")
    assert result.returncode == 0, result.stderr
    assert [line.split()[0] for line in result.stdout.splitlines()] == registry.ids()


def test_list_json_has_the_mechanism_fields():
    result = run("list", "--json")
    assert result.returncode == 0, result.stderr
    records = json.loads(result.stdout)
    assert [r["id"] for r in records] == registry.ids()
    fields = {"id", "title", "family", "section", "paper", "equation", "time", "memory", "causal"}
    assert all(fields <= set(r) for r in records)
    assert records[1]["causal"] is True


def test_list_json_is_ascii_whatever_the_output_encoding():
    result = subprocess.run([sys.executable, "-m", "refattn", "list", "--json"], capture_output=True, check=False,
                            env={**os.environ, "PYTHONIOENCODING": "ascii"})
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    records = json.loads(result.stdout.decode("ascii"))
    assert [r["id"] for r in records] == registry.ids()
    assert any(not r["section"].isascii() for r in records)       # § and the like arrive as \u escapes


def test_the_command_line_loads_numba_only_for_what_runs_a_kernel():
    code = ("import sys, io, contextlib; from refattn.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    assert main(['list', '--json']) == 0\n"
            "assert 'numba' not in sys.modules and 'llvmlite' not in sys.modules, 'numba loaded'")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_list_markdown_is_the_catalogue(capsys):
    assert main(["list", "--markdown"]) == 0
    assert capsys.readouterr().out == registry.catalogue_markdown()


def test_unknown_command_exits_2():
    result = run("frobnicate")
    assert result.returncode == 2
    assert "invalid choice" in result.stderr


def test_export_list_names_every_case():
    from refattn.oracle.fixtures import CASES

    result = run("export", "--list")
    assert result.returncode == 0, result.stderr
    assert [line.split()[0] for line in result.stdout.splitlines()] == list(CASES)


def test_export_errors_are_one_line_and_exit_2(tmp_path, capsys):
    assert main(["export", "--case", "basic"]) == 2
    assert main(["export", "--case", "no_such_case", "--out", str(tmp_path / "x.npz")]) == 2
    assert main(["export", "--case", "basic", "--out", str(tmp_path / "missing-dir" / "x.npz")]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3 and all(line.startswith("error: ") for line in lines)
    assert "needs --case NAME and --out" in lines[0] and "unknown case 'no_such_case'" in lines[1]
    assert "cannot write" in lines[2]


def test_check_exit_codes(tmp_path, capsys):
    import numpy as np

    path = tmp_path / "basic.npz"
    assert main(["export", "--case", "basic", "--out", str(path)]) == 0
    with np.load(path, allow_pickle=False) as archive:
        arrays = dict(archive)
    arrays["candidate_out"] = arrays["out"].astype(np.float32)
    np.savez(tmp_path / "pass.npz", **arrays)
    arrays["candidate_out"] = arrays["candidate_out"][..., ::-1]    # values in the wrong order
    np.savez(tmp_path / "fail.npz", **arrays)
    assert main(["check", str(tmp_path / "pass.npz")]) == 0
    assert main(["check", str(tmp_path / "fail.npz"), "--rule", "ulp"]) == 1
    assert main(["check", str(path)]) == 2                          # a fixture without candidate_out
    captured = capsys.readouterr()
    assert "PASSED" in captured.out and "FAILED" in captured.out
    assert captured.err.splitlines() == [f"error: {path}: missing array 'candidate_out' (has: "
                                         + ", ".join(sorted(a for a in arrays if a != "candidate_out")) + ")"]


def bad_argument_lists(tmp_path):
    """Each subcommand with arguments it must refuse, and a piece of the error line it must print."""
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    fixture = tmp_path / "basic.npz"
    return [
        (["list", "--yaml"], "unrecognized arguments: --yaml"),
        (["figures", "--out", str(a_file)], f"argument --out: '{a_file}' cannot be a folder: '{a_file}' is an "
                                            "existing file"),
        (["figures", "--out", str(a_file / "sub")], f"'{a_file}' is an existing file"),
        (["export", "--case", "basic", "--out", str(fixture), "--layout", "nhd"], "argument --layout: invalid choice"),
        (["check", str(fixture), "--max-ulps", "-1"], "argument --max-ulps: must be a finite number >= 0, got -1"),
        (["check", str(fixture), "--max-ulps", "nan"], "argument --max-ulps: must be a finite number >= 0, got nan"),
        (["check", str(fixture), "--memory-budget", "0"], "argument --memory-budget: must be a finite number > 0"),
        (["bench", "sdpa", "--sizes", "0"], "argument --sizes: must be >= 1, got 0"),
        (["bench", "sdpa", "--sizes", "64", "-5"], "argument --sizes: must be >= 1, got -5"),
        (["bench", "sdpa", "--sizes", "1e3"], "argument --sizes: expected an integer, got '1e3'"),
        (["bench", "sdpa", "--sizes", str(10**12)], f"n={10**12} needs about "),
        (["bench", "sdpa", "--d", "0"], "argument --d: must be >= 1, got 0"),
        (["bench", "sdpa", "--heads", "0"], "argument --heads: must be >= 1, got 0"),
        (["bench", "sdpa", "--repeat", "0"], "argument --repeat: must be >= 1, got 0"),
        (["bench", "sdpa", "--equation-max", "-1"], "argument --equation-max: must be >= 0, got -1"),
        (["bench", "sdpa", "--memory-n", str(10**12)], f"--memory-n {10**12} needs about "),
        (["bench", "sdpa", "--plot", str(tmp_path)], f"argument --plot: '{tmp_path}' is an existing folder"),
        (["bench", "sdpa", "--plot", str(a_file / "c.png")], f"'{a_file}' is an existing file"),
        (["bench", "sparse", "--sizes", "64", "128"], "pattern 'bigbird b=64' cannot take n=64: num_global_blocks=2 "
                                                      "exceeds num_blocks=1"),
        (["bench", "sparse", "--sizes", "192"], "pattern 'bigbird b=64' cannot take n=192: num_random_blocks=3"),
        (["bench", "sparse", "--sizes", "100"], "cannot take n=100: n=100 is not a multiple of the block size 64"),
        (["bench", "sparse", "--sizes", str(10**12)], f"n={10**12} needs about "),
        (["bench", "sparse", "--repeat", "0"], "argument --repeat: must be >= 1, got 0"),
        (["bench", "sparse", "--dense-max", "x"], "argument --dense-max: expected an integer, got 'x'"),
        (["bench", "linear", "--sizes", "0"], "argument --sizes: must be >= 1, got 0"),
        (["bench", "linear", "--d", "-3"], "argument --d: must be >= 1, got -3"),
        (["bench", "linear", "--quadratic-max", "-1"], "argument --quadratic-max: must be >= 0, got -1"),
        (["bench", "linear", "--sizes", str(10**12)], f"n={10**12} needs about "),
    ]


def test_bad_arguments_exit_2_with_one_error_line(tmp_path, capsys):
    assert main(["export", "--case", "basic", "--out", str(tmp_path / "basic.npz")]) == 0
    for argv, message in bad_argument_lists(tmp_path):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        captured = capsys.readouterr()
        errors = [line for line in captured.err.splitlines() if "error:" in line]
        assert exit_info.value.code == 2, argv
        assert captured.out == "" and "Traceback" not in captured.err, argv
        assert len(errors) == 1 and errors[0] == captured.err.splitlines()[-1], (argv, captured.err)
        assert errors[0].startswith("python -m refattn") and ": error: " in errors[0], (argv, errors[0])
        assert message in errors[0], (argv, errors[0])


def test_bench_sizes_that_do_not_fit_are_refused_naming_the_gib(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(_measure, "available_memory", lambda: 2**30)
    with pytest.raises(SystemExit) as exit_info:                    # 5 (8, 8192, 8192) float64 score arrays
        main(["bench", "sdpa", "--sizes", "1024", "8192", "--equation-max", "8192", "--memory-n", "0"])
    error = capsys.readouterr().err.splitlines()[-1]
    assert exit_info.value.code == 2
    assert ("error: n=8192 needs about 20.2 GiB (inputs and outputs 0.25, equation path's scores 20 GiB), more than "
            "the 1 GiB of memory available now; lower --sizes") in error
    with pytest.raises(SystemExit):                                 # the plot's band pattern counts only with --plot
        main(["bench", "sdpa", "--sizes", "8192", "--equation-max", "8192", "--plot", str(tmp_path / "c.png")])
    assert "(inputs and outputs 0.25, band pattern 0.125, equation path's scores 20 GiB)" in capsys.readouterr().err
    monkeypatch.setattr(_measure, "available_memory", lambda: None)   # unknown (not Linux): not refused
    assert _measure.check_memory({"n=1": {"everything": 2**60}}, "") is None


def test_figures_out_must_be_a_folder(tmp_path, capsys):
    (tmp_path / "taken").write_text("")
    assert cli.output_folder(str(tmp_path / "new" / "sub")) == tmp_path / "new" / "sub"   # created when drawn
    with pytest.raises(SystemExit):
        main(["figures", "--out", str(tmp_path / "taken"), "--only", "softmax"])
    assert (tmp_path / "taken").read_text() == ""                   # left alone
    assert "error: argument --out" in capsys.readouterr().err


def test_list_into_a_reader_that_closes_early_exits_quietly():
    read_end, write_end = os.pipe()
    os.close(read_end)                                             # the reader is gone before the first write
    with os.fdopen(write_end, "wb") as stdout:
        closed = subprocess.run([sys.executable, "-m", "refattn", "list", "--json"], stdout=stdout,
                                stderr=subprocess.PIPE, text=True, check=False)
    assert closed.returncode == cli.SIGPIPE_EXIT and closed.stderr == ""
    # `list --json | head -n 1`: the JSON (90 KB) is more than the pipe holds, so head's exit breaks it mid-write
    writer = subprocess.Popen([sys.executable, "-m", "refattn", "list", "--json"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    head = subprocess.run(["head", "-n", "1"], stdin=writer.stdout, capture_output=True, text=True, check=False)
    writer.stdout.close()
    errors = writer.stderr.read().decode()
    writer.stderr.close()
    assert writer.wait() == cli.SIGPIPE_EXIT and errors == ""
    assert head.stdout == "[\n"


def fake_checkout(root, name="refattn"):
    """A folder laid out as a source checkout: pyproject.toml naming ``name``, README.md with the markers."""
    from refattn.atlas.report import ATLAS_END, ATLAS_START

    (root / "refattn").mkdir(parents=True)
    (root / "pyproject.toml").write_text(f'[project]\nname = "{name}"\n', encoding="utf-8")
    (root / "README.md").write_text(f"{registry.CATALOGUE_START}old\n{registry.CATALOGUE_END}\n"
                                    f"{ATLAS_START}old\n{ATLAS_END}\n", encoding="utf-8")
    return root


def test_checkout_is_the_folder_with_refattns_pyproject_and_readme(tmp_path):
    assert cli.checkout() == ROOT                                  # the tests run from a checkout
    root = fake_checkout(tmp_path / "clone")
    assert cli.checkout(root / "refattn") == root
    other = fake_checkout(tmp_path / "other", name="not-refattn")
    assert cli.checkout(other / "refattn") is None
    (root / "README.md").unlink()
    assert cli.checkout(root / "refattn") is None
    site = tmp_path / "site-packages"                              # an installed copy: nothing beside the package
    (site / "refattn").mkdir(parents=True)
    assert cli.checkout(site / "refattn") is None


def test_figures_of_an_installed_copy_go_to_figures_under_the_current_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cli, "checkout", lambda: None)
    monkeypatch.chdir(tmp_path)
    assert main(["figures", "--only", "softmax"]) == 0
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == ["figures",
                                                                                       "figures/softmax.png"]
    assert "catalogue" not in capsys.readouterr().err


def test_figures_of_a_checkout_go_to_its_figures_with_the_catalogue(tmp_path, monkeypatch, capsys):
    root = fake_checkout(tmp_path / "clone")
    monkeypatch.setattr(cli, "checkout", lambda: root)
    monkeypatch.chdir(tmp_path)
    assert main(["figures", "--only", "softmax"]) == 0
    assert (root / "figures" / "softmax.png").is_file()
    assert registry.catalogue_markdown() in (root / "README.md").read_text(encoding="utf-8")
    assert f"updated the catalogue table of {root / 'README.md'}" in capsys.readouterr().err
    readme = (root / "README.md").read_bytes()
    assert main(["figures", "--only", "softmax", "--out", str(tmp_path / "elsewhere")]) == 0
    assert (tmp_path / "elsewhere" / "softmax.png").is_file() and (root / "README.md").read_bytes() == readme


def test_output_files_must_be_in_an_existing_folder(tmp_path):
    with pytest.raises(argparse.ArgumentTypeError, match=r"the folder '.*missing' does not exist"):
        cli.output_file(str(tmp_path / "missing" / "w.npz"))
    assert cli.output_file(str(tmp_path / "w.npz")) == tmp_path / "w.npz"
    assert cli.output_file("w.npz") == Path("w.npz")                # the current folder
    assert cli.output_file("") is None
