"""Documentation stays true: README catalogue, docstring parameters, no work on the import path."""
from __future__ import annotations

import importlib
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

from refattn import registry

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def test_readme_catalogue_is_current():
    text = README.read_text(encoding="utf-8")
    start, end = "<!-- catalogue:start -->\n", "<!-- catalogue:end -->"
    assert start in text and end in text, "README lacks the catalogue markers"
    table = text.split(start)[1].split(end)[0]
    assert table == registry.catalogue_markdown(), (
        "README catalogue is stale: `python -m refattn figures` rewrites it (or `python -m refattn list --markdown`)"
    )


def test_update_readme_catalogue_rewrites_only_the_table(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("intro\n<!-- catalogue:start -->\n| stale |\n<!-- catalogue:end -->\noutro\n", encoding="utf-8")
    assert registry.update_readme_catalogue(readme) is True
    text = readme.read_text(encoding="utf-8")
    assert text == f"intro\n<!-- catalogue:start -->\n{registry.catalogue_markdown()}<!-- catalogue:end -->\noutro\n"
    assert registry.update_readme_catalogue(readme) is False
    (tmp_path / "bare.md").write_text("no markers", encoding="utf-8")
    with pytest.raises(ValueError, match="has no <!-- catalogue:start -->"):
        registry.update_readme_catalogue(tmp_path / "bare.md")


def test_readme_embeds_figures_that_exist():
    images = re.findall(r"\]\((figures/[^)]+\.png)\)", README.read_text(encoding="utf-8"))
    assert images, "README embeds no figure"
    for image in images:
        assert (ROOT / image).is_file(), image


def _documented_parameters(doc: str) -> list[str]:
    section = doc.split("Parameters\n")[1].split("\n\n    Returns")[0] if "Parameters\n" in doc else ""
    names = []
    for line in section.splitlines():
        match = re.match(r"^    \*{0,2}(\w+(?:, \w+)*)(?: :|$)", line)
        if match:
            names += match.group(1).split(", ")
    return names


def _documented_modules() -> list:
    """The package APIs, and every module a registry record points into (its function's and its apply's), so
    that no family can be left out by omission."""
    names = {"refattn", "refattn.common", "refattn.oracle", "refattn.viz", "refattn.figures", "refattn.training",
             "refattn.atlas"}
    for m in registry.all():
        names |= {m.function.__module__} | ({m.apply.__module__} if m.apply is not None else set())
    return [importlib.import_module(name) for name in sorted(names)]


PUBLIC_FUNCTIONS = list({id(f): f for module in _documented_modules() for n in getattr(module, "__all__", ())
                         if inspect.isfunction(f := getattr(module, n))}.values())


@pytest.mark.parametrize("fn", PUBLIC_FUNCTIONS, ids=lambda f: f.__name__)
def test_docstring_parameters_match_the_signature(fn):
    signature = [p for p in inspect.signature(fn).parameters]
    assert _documented_parameters(inspect.getdoc(fn) and fn.__doc__) == signature


def test_import_compiles_nothing_and_loads_no_plotting():
    code = ("import sys, refattn; "
            "bad = [m for m in ('matplotlib', 'numba', 'IPython') if m in sys.modules]; "
            "print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "", f"importing refattn loaded {out.strip()}"
