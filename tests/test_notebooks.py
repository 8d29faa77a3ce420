"""Each notebook has a text twin (jupytext py:percent), and the two hold the same cells.

The notebooks are reviewed and edited as ``notebooks/NAME.py``; ``notebooks/NAME.ipynb`` is the
executed copy that code hosts render. ``jupytext --sync notebooks/*.ipynb`` copies the inputs of
the more recently edited side to the other. These tests fail when one side was edited and the
sync was forgotten: the .ipynb side is read as plain JSON, the .py side by jupytext, so the check
does not rest on jupytext reading its own output back.
"""
from __future__ import annotations

import json
from pathlib import Path

import jupytext
import pytest
from jupytext.config import load_jupytext_config
from jupytext.paired_paths import paired_paths

NOTEBOOKS_DIR = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))
NOT_TWINS = {"conftest.py"}                     # pytest's collection settings for notebooks/


def ipynb_cells(path: Path) -> list[tuple[str, str]]:
    """(cell type, source) of every cell, read from the notebook's JSON."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return [(cell["cell_type"], "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"])
            for cell in cells]


def text_cells(path: Path) -> list[tuple[str, str]]:
    """(cell type, source) of every cell of a py:percent file, as jupytext reads it."""
    notebook = jupytext.read(path, fmt="py:percent")
    return [(cell.cell_type, cell.source) for cell in notebook.cells]


def test_notebooks_exist():
    assert len(NOTEBOOKS) >= 6, [p.name for p in NOTEBOOKS]


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_config_pairs_notebook_with_its_text_form(notebook):
    # what `jupytext --sync` reads: the repository's config pairs NAME.ipynb with NAME.py (py:percent)
    formats = load_jupytext_config(str(NOTEBOOKS_DIR)).default_formats(str(notebook))
    paired = dict(paired_paths(str(notebook), "ipynb", formats))
    assert paired == {str(notebook): {"extension": ".ipynb"},
                      str(notebook.with_suffix(".py")): {"extension": ".py", "format_name": "percent"}}


def test_every_notebook_has_a_twin_and_every_twin_a_notebook():
    stems_ipynb = {p.stem for p in NOTEBOOKS}
    stems_py = {p.stem for p in NOTEBOOKS_DIR.glob("*.py") if p.name not in NOT_TWINS}
    assert stems_ipynb - stems_py == set(), "notebooks without a .py twin (run jupytext --sync)"
    assert stems_py - stems_ipynb == set(), ".py files in notebooks/ without a notebook"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_twin_has_the_same_cells(notebook):
    twin = notebook.with_suffix(".py")
    assert twin.is_file(), f"{twin.name} is missing: run `jupytext --sync notebooks/{notebook.name}`"
    expected, actual = ipynb_cells(notebook), text_cells(twin)
    for index, (cell_nb, cell_py) in enumerate(zip(expected, actual, strict=False)):
        assert cell_py == cell_nb, (
            f"cell {index} differs between {notebook.name} and {twin.name}; "
            f"run `jupytext --sync notebooks/{notebook.name}` (the more recently edited side wins)")
    assert len(actual) == len(expected), (
        f"{notebook.name} has {len(expected)} cells, {twin.name} has {len(actual)}; run jupytext --sync")
