"""The package as a user installs it: metadata, what the wheel and sdist carry, and the CLI run from a
non-editable install in another folder, writing only where it is told."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from hatchling.builders.sdist import SdistBuilder
from hatchling.builders.wheel import WheelBuilder

import refattn

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel `pip install .` would build, from this checkout."""
    out = tmp_path_factory.mktemp("dist")
    (path,) = WheelBuilder(str(ROOT)).build(directory=str(out), versions=["standard"])
    return Path(path)


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """The wheel installed (no dependencies: they are this environment's) into a folder of its own."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                    "--disable-pip-version-check", "--target", str(target), str(wheel)], check=True)
    return target


def _metadata(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as z:
        (name,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        return z.read(name).decode()


def test_wheel_carries_the_license_the_type_marker_and_the_package_data(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    version = refattn.__version__
    assert f"refattn-{version}.dist-info/licenses/LICENSE" in names
    for data in ["refattn/py.typed", "refattn/refattn.mplstyle", "refattn/training/weights/reverse.npz",
                 "refattn/training/weights/induction.record.npz"]:
        assert data in names, data
    assert not [n for n in names if n.startswith(("tests/", "notebooks/", "figures/"))]


def test_metadata_names_version_license_urls_and_classifiers(wheel):
    meta = _metadata(wheel)
    assert re.search(r"^Version: (.+)$", meta, re.M)[1] == refattn.__version__
    assert "License-Expression: MIT" in meta
    assert "Classifier: Typing :: Typed" in meta
    assert re.findall(r"^Project-URL: ", meta, re.M)
    assert re.findall(r"^Classifier: Programming Language :: Python :: 3\.\d+$", meta, re.M)
    extras = dict.fromkeys(re.findall(r"^Provides-Extra: (\S+)$", meta, re.M))
    assert list(extras) == ["notebooks", "test"]


def test_sdist_carries_license_changelog_and_citation(tmp_path):
    (path,) = SdistBuilder(str(ROOT)).build(directory=str(tmp_path), versions=["standard"])
    with tarfile.open(path) as t:
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    assert {"LICENSE", "CHANGELOG.md", "CITATION.cff", "README.md", "pyproject.toml", "refattn/py.typed"} <= names


def test_changelog_and_citation_name_this_version():
    version = refattn.__version__
    assert re.search(rf"^## {re.escape(version)} \(\d{{4}}-\d\d-\d\d", (ROOT / "CHANGELOG.md").read_text(), re.M)
    citation = (ROOT / "CITATION.cff").read_text()
    assert f'version: "{version}"' in citation
    assert "cff-version: 1.2.0" in citation and "license: MIT" in citation


def test_ci_runs_the_readme_test_command_and_the_main_job_installs_only_the_core():
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"## Set up, in two commands.*?```bash\n(.*?)```", readme, re.S)[1]
    commands = [line for line in block.splitlines() if line and not line.startswith("#")]
    assert commands == ["pip install -e . && python -m refattn figures",
                        'pip install -e ".[test]" && ruff check && mypy && python -m pytest']
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert commands[1] in ci


def _run(args, cwd, site, env_extra=None):
    """``python -m refattn ARGS`` from the installed copy, in ``cwd``, importing nothing from the checkout."""
    env = {**os.environ, "PYTHONPATH": str(site), "PYTHONDONTWRITEBYTECODE": "1", "MPLBACKEND": "Agg",
           **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "refattn", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


def _tree(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}


def test_installed_cli_works_from_another_folder_and_writes_only_where_told(installed, tmp_path):
    """`pip install .` then the commands from elsewhere: they import the installed copy, write into the
    current folder or --out, and leave the installed package and the checkout alone."""
    work = tmp_path / "work"
    work.mkdir()
    env = {"NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    site_before, checkout_before = _tree(installed), _tree(ROOT / "figures")

    where = subprocess.run([sys.executable, "-c", "import refattn; print(refattn.__file__)"], cwd=work,
                           env={**os.environ, "PYTHONPATH": str(installed), "PYTHONDONTWRITEBYTECODE": "1"},
                           capture_output=True, text=True, check=True).stdout.strip()
    assert Path(where).is_relative_to(installed), where

    listed = _run(["list", "--json"], work, installed, env)
    assert listed.returncode == 0, listed.stderr
    assert len(json.loads(listed.stdout)) == len(refattn.registry.all())

    drawn = _run(["figures", "--only", "sdpa"], work, installed, env)
    assert drawn.returncode == 0, drawn.stderr
    assert sorted(p.relative_to(work).as_posix() for p in work.rglob("*")) == ["figures", "figures/sdpa.png"]

    exported = _run(["export", "--case", "causal_n_ne_m", "--out", str(tmp_path / "case.npz")], work, installed, env)
    assert exported.returncode == 0, exported.stderr
    assert (tmp_path / "case.npz").is_file()

    assert _tree(installed) == site_before, "a command wrote into the installed package"
    assert _tree(ROOT / "figures") == checkout_before, "a command wrote into the checkout's figures/"
