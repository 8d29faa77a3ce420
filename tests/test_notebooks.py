"""Each notebook has a text twin (jupytext py:percent), and the two hold the same cells.

The notebooks are reviewed and edited as ``notebooks/NAME.py``; ``notebooks/NAME.ipynb`` is the
executed copy that code hosts render. ``jupytext --sync notebooks/*.ipynb`` copies the inputs of
the more recently edited side to the other. These tests fail when one side was edited and the
sync was forgotten: the .ipynb side is read as plain JSON, the .py side by jupytext, so the check
does not rest on jupytext reading its own output back.

The committed outputs must also come out the same when the README's command re-executes them on
another machine (another BLAS kernel, thread count or SIMD loop). A printed round-off quantity
("8.9e-16") or a float printed to all its digits changes there; the last tests find such numbers
in the committed text outputs without executing anything.
"""
from __future__ import annotations

import json
import re
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


# A number of magnitude 1e-13 or below in scientific notation (a round-off quantity: refattn.viz.roundoff's
# floor is 1e-12), or one printed with 9 or more significant digits (its last digits are the machine's).
# Digits right after ':' or '/' are identifiers (arXiv:1706.03762, URLs), not measurements.
ROUNDOFF_NUMBER = re.compile(r"(?<![\w.:/])\d(?:\.\d+)?e-(?:1[3-9]|[2-9]\d|\d{3,})(?!\d)")
DECIMAL_NUMBER = re.compile(r"(?<![\w.:/])\d+\.\d+")
MAX_SIGNIFICANT_DIGITS = 8
PRINTED = ("text/plain", "text/markdown")          # not text/html: the step-through players embed base64 PNGs
REPORT_PRINTS_MACHINE_DIGITS = pytest.mark.xfail(
    strict=True, reason="refattn.oracle's reports print float32 errors and float64 oracle values to all their "
                        "digits, which depend on the BLAS kernel")


def machine_dependent_numbers(text: str) -> list[str]:
    """The numbers in ``text`` whose printed digits depend on the machine's rounding."""
    tiny = ROUNDOFF_NUMBER.findall(text)
    long = [number for number in DECIMAL_NUMBER.findall(text)
            if len(number.replace(".", "").lstrip("0")) > MAX_SIGNIFICANT_DIGITS]
    return tiny + long


def printed_outputs(path: Path) -> list[tuple[int, str]]:
    """(cell index, text) of every printed output of a notebook: streams, plain text, Markdown."""
    found = []
    for index, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
        for output in cell.get("outputs", []):
            texts = [output.get("text", "")] + [output.get("data", {}).get(mime, "") for mime in PRINTED]
            found += [(index, "".join(text) if isinstance(text, list) else text) for text in texts if text]
    return found


@pytest.mark.parametrize(("text", "expected"), [
    ("β‖φ(k)‖² = 1:   read-back error 8.881784197001252e-16", ["8.881784197001252e-16", "8.881784197001252"]),
    ("      (4, 4)          True            6.7e-16               8.9e-16", ["6.7e-16", "8.9e-16"]),
    ("relative error of the heads' products 1.35e-14", ["1.35e-14"]),
    ("EM: ['5e-01' '2e-06' '3e-136' '0e+00']", ["3e-136"]),
    ("the pairings differ by 0.7918228568513238", ["0.7918228568513238"]),
    ("analytic -0.0184981671, central difference -0.0184981670", ["0.0184981671", "0.0184981670"]),
    ("κ(Ã): [      29.839        7.771        2.013 20607444.96 ]", ["20607444.96"]),
    ("max |row sum − 1| < 1e-12; κ(S) = 6.3e+08; loss 2.9849; 0.12345678 of 1000000", []),
    ("Vaswani et al., arXiv:1706.03762, https://arxiv.org/abs/2106.04554", []),
    ("ε·κ(S) = 1.4e-07, error 1.2e-12, x1e-13", []),
])
def test_machine_dependent_numbers(text, expected):
    assert machine_dependent_numbers(text) == expected


@pytest.mark.parametrize("notebook", [pytest.param(path, marks=REPORT_PRINTS_MACHINE_DIGITS)
                                      if path.name == "90_refattn_as_oracle.ipynb" else path
                                      for path in NOTEBOOKS], ids=lambda p: p.name)
def test_outputs_print_no_machine_dependent_digits(notebook):
    # what refattn.viz.roundoff_text is for: "< 1e-12" for a round-off quantity, a few digits for the rest
    found = [f"cell {index}: {number!r} in {line.strip()!r}" for index, text in printed_outputs(notebook)
             for line in text.splitlines() for number in machine_dependent_numbers(line)]
    assert not found, (f"{notebook.name} prints digits that another machine's rounding changes "
                       f"(show them with refattn.viz.roundoff_text or fewer digits): " + "; ".join(found[:6]))
