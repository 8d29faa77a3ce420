"""The command line, run as a user would run it (``python -m refattn ...``)."""
from __future__ import annotations

import json
import subprocess
import sys

from refattn import registry
from refattn.cli import main


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
