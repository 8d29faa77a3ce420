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
