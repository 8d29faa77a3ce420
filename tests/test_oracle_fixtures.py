"""Fixtures: export -> modify -> check round trips for every case, and malformed files exit 2 in one line."""
from __future__ import annotations

import subprocess
import sys
import zipfile

import numpy as np
import pytest

from refattn import scaled_dot_product_attention
from refattn.cli import main
from refattn.oracle.check import check
from refattn.oracle.fixtures import CASES, FixtureError, check_file, load_check_file, make_case

CASE_NAMES = ["basic", "causal_n_ne_m", "bottom_right", "padding", "empty_rows", "gqa", "extreme_logits", "float_bias"]


def load(path):
    with np.load(path, allow_pickle=False) as archive:
        return dict(archive)


def save(path, arrays):
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    return str(path)


def with_candidate(arrays, dtype=np.float32, grads=True):
    arrays = dict(arrays)
    arrays["candidate_out"] = arrays["out"].astype(dtype)
    if grads:
        for g in ("dq", "dk", "dv"):
            arrays[f"candidate_{g}"] = arrays[g].astype(dtype)
    return arrays


def test_the_cases():
    assert list(CASES) == CASE_NAMES


@pytest.mark.parametrize("name", CASE_NAMES)
def test_case_contents(name):
    arrays = make_case(name)
    for key in ("q", "k", "v", "d_out"):                           # exact in float16 (and bfloat16)
        x = arrays[key]
        assert x.dtype == np.float64
        np.testing.assert_array_equal(x.astype(np.float16).astype(np.float64), x, err_msg=key)
    for key in ("causal", "fully_masked", "layout", "case", "format"):
        assert arrays[key].shape == () and arrays[key].dtype.kind == "U", key
    assert arrays["scale"].shape == () and arrays["scale"].dtype == np.float64
    assert str(arrays["case"]) == name
    b, h, n, _ = arrays["q"].shape
    assert arrays["out"].shape == (b, h, n, arrays["v"].shape[-1]) and arrays["lse"].shape == (b, h, n)
    for g, x in (("dq", "q"), ("dk", "k"), ("dv", "v")):
        assert arrays[g].shape == arrays[x].shape
    kwargs = load_check_file_from(arrays)
    kwargs["candidate"] = arrays["out"]
    assert check(**kwargs).passed                                  # the stored results are the oracle's


def load_check_file_from(arrays):
    options = {"mask": arrays.get("mask"), "scale": float(arrays["scale"]), "fully_masked": str(arrays["fully_masked"]),
               "layout": str(arrays["layout"])}
    causal = str(arrays["causal"])
    options["causal"] = False if causal == "none" else causal
    return {"q": arrays["q"], "k": arrays["k"], "v": arrays["v"], **options}


def test_case_specifics():
    assert str(make_case("causal_n_ne_m")["causal"]) == "top-left"
    assert str(make_case("bottom_right")["causal"]) == "bottom-right"
    empty = make_case("empty_rows")
    assert np.sum(empty["lse"] == -np.inf) == 3 * 3                # 3 rows, broadcast over h = 3 heads
    np.testing.assert_array_equal(empty["out"][empty["lse"] == -np.inf], 0.0)
    gqa = make_case("gqa")
    assert gqa["q"].shape[1] == 4 and gqa["k"].shape[1] == 2
    assert np.abs(make_case("extreme_logits")["q"]).max() > 50
    bias = make_case("float_bias")
    assert bias["mask"].dtype == np.float64 and np.isinf(bias["mask"]).any() and "d_bias" in bias
    padding = make_case("padding")
    assert padding["mask"].dtype == np.bool_ and padding["mask"].shape == (2, 1, 1, 9)


@pytest.mark.parametrize("name", CASE_NAMES)
def test_export_modify_check_round_trip(tmp_path, capsys, name):
    fixture = tmp_path / f"{name}.npz"
    assert main(["export", "--case", name, "--out", str(fixture)]) == 0
    arrays = load(fixture)
    good = save(tmp_path / "good.npz", with_candidate(arrays))     # refattn's own results, cast to float32
    assert main(["check", good]) == 0
    assert "PASSED" in capsys.readouterr().out
    bad = with_candidate(arrays)
    index = np.unravel_index(np.argmax(np.abs(arrays["out"])), arrays["out"].shape)
    bad["candidate_out"][index] *= 1.01                            # 1 % off at one element
    assert main(["check", save(tmp_path / "bad.npz", bad)]) == 1
    out = capsys.readouterr().out
    assert "FAILED" in out and "1 of" in out


def test_bnhd_layout_round_trip_and_rules(tmp_path, capsys):
    fixture = tmp_path / "gqa_bnhd.npz"
    assert main(["export", "--case", "gqa", "--out", str(fixture), "--layout", "bnhd"]) == 0
    arrays = load(fixture)
    assert arrays["q"].shape == (2, 5, 4, 8) and arrays["k"].shape == (2, 8, 2, 8) and arrays["lse"].shape == (2, 5, 4)
    path = save(tmp_path / "c.npz", with_candidate(arrays))
    for args in ([], ["--rule", "ulp"], ["--table", "jax"], ["--rule", "table", "--table", "xformers"]):
        assert main(["check", path, *args]) == 0, args
    assert "table 'xformers'" in capsys.readouterr().out
    transposed = with_candidate(arrays, grads=False)
    transposed["candidate_out"] = np.swapaxes(transposed["candidate_out"], 1, 2)   # (b, h, n, d_v) by mistake
    assert main(["check", save(tmp_path / "t.npz", transposed)]) == 1
    assert "matches if the candidate's outputs are in layout 'bhnd'" in capsys.readouterr().out


def test_check_file_api(tmp_path):
    path = tmp_path / "basic.npz"
    main(["export", "--case", "basic", "--out", str(path)])
    save(path, with_candidate(load(path), np.float16, grads=False))
    report = check_file(path)
    assert report.passed and report.dtype == "float16"
    assert set(load_check_file(path)) == {"candidate", "q", "k", "v", "d_out", "causal", "scale", "fully_masked",
                                          "layout"}


def _write_text(path):
    path.write_text("not an archive\n")
    return str(path)


def _npy(path):
    with open(path, "wb") as f:
        np.save(f, np.zeros(3))
    return str(path)


def _modified(change):
    def write(path):
        arrays = with_candidate(make_case("basic"), grads=False)
        change(arrays)
        return save(path, arrays)
    return write


def _pickled(path):
    arrays = with_candidate(make_case("basic"), grads=False)
    arrays["mask"] = np.array([None, 1], dtype=object)
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    return str(path)


def _raw_member(key, raw):
    """The basic case with member ``key`` replaced by the bytes ``raw`` (no .npy format check on the way)."""
    def write(path):
        good = save(path.with_suffix(".good.npz"), with_candidate(make_case("basic"), grads=False))
        with zipfile.ZipFile(good) as source, zipfile.ZipFile(path, "w") as target:
            for item in source.namelist():
                target.writestr(item, raw if item == f"{key}.npy" else source.read(item))
        return str(path)
    return write


_UNFINISHED_HEADER = b"{'descr': '<f8', 'fortran_order': False, 'shape': (2,), ".ljust(63) + b"\n"


MALFORMED = {
    "not an npz": (_write_text, "not an npz archive"),
    "a .npy": (_npy, "single .npy array"),
    "no file": (lambda path: str(path) + ".missing", "no such file"),
    "missing q": (_modified(lambda a: a.pop("q")), "missing array 'q'"),
    "missing candidate": (_modified(lambda a: a.pop("candidate_out")), "missing array 'candidate_out'"),
    "wrong d_k": (_modified(lambda a: a.update(k=a["k"][..., :5])), "q has d_k=8 but k has d_k=5"),
    "wrong candidate shape": (_modified(lambda a: a.update(candidate_out=a["candidate_out"][..., :4])),
                              "candidate_out has shape (2, 3, 5, 4) but the inputs give (2, 3, 5, 6)"),
    "unknown causal": (_modified(lambda a: a.update(causal=np.array("diagonal"))), "unknown causal 'diagonal'"),
    "unknown layout": (_modified(lambda a: a.update(layout=np.array("nhd"))), "unknown layout 'nhd'"),
    "unknown policy": (_modified(lambda a: a.update(fully_masked=np.array("skip"))), "unknown fully_masked 'skip'"),
    "causal not a string": (_modified(lambda a: a.update(causal=np.array([1, 2]))), "'causal' must be a 0-d string"),
    "bad scale": (_modified(lambda a: a.update(scale=np.array(np.nan))), "'scale' must be a finite 0-d number"),
    "integer q": (_modified(lambda a: a.update(q=a["q"].astype(int))), "'q' must be a float array"),
    "typo key": (_modified(lambda a: a.update(candidate_dQ=a["dq"])), "unknown key 'candidate_dQ'"),
    "grads without d_out": (_modified(lambda a: (a.pop("d_out"), a.update(candidate_dq=a["dq"]))), "need 'd_out'"),
    "object array": (_pickled, "member 'mask' is not a .npy array readable without pickle (ValueError: Object "
                               "arrays cannot be loaded when allow_pickle=False)"),
    "member of text": (_raw_member("q", b"hello"), "member 'q' is not a .npy array (5 bytes without the .npy header)"),
    "empty member": (_raw_member("causal", b""), "member 'causal' is not a .npy array (0 bytes without the .npy"),
    "broken .npy header": (_raw_member("scale", b"\x93NUMPY\x01\x00\x40\x00" + _UNFINISHED_HEADER),
                           "member 'scale' is not a .npy array readable without pickle ("),
    "scale not 0-d": (_modified(lambda a: a.update(scale=np.ones((2, 3)))),
                      "'scale' must be a finite 0-d number, got dtype float64, shape (2, 3)"),
    "0-d q": (_modified(lambda a: a.update(q=np.array(1.0))), "q must have at least 2 dimensions, got shape ()"),
    "int mask": (_modified(lambda a: a.update(mask=np.ones((5, 7), int))), "'mask' must be bool"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_files_exit_2_with_one_line(tmp_path, capsys, case):
    write, message = MALFORMED[case]
    path = write(tmp_path / "file.npz")
    assert main(["check", path]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err
    assert lines[0].startswith("error: ") and message in lines[0], lines[0]
    if case not in ("no file",):
        with pytest.raises(FixtureError):
            check_file(path)


def test_command_line_as_a_user_runs_it(tmp_path):
    fixture = tmp_path / "padding.npz"
    result = subprocess.run([sys.executable, "-m", "refattn", "export", "--case", "padding", "--out", str(fixture)],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    arrays = with_candidate(load(fixture))
    out = scaled_dot_product_attention(arrays["q"], arrays["k"], arrays["v"], arrays["mask"], causal=True)
    arrays["candidate_out"] = out.astype(np.float32)                # a causal mask that should not be there
    path = save(tmp_path / "c.npz", arrays)
    result = subprocess.run([sys.executable, "-m", "refattn", "check", path], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 1, result.stderr                   # its (non-causal) gradients disagree
    assert 'partly: out match if causal="top-left"' in result.stdout and "(dq, dk, dv still fail)" in result.stdout
    for g in ("dq", "dk", "dv"):
        del arrays[f"candidate_{g}"]
    result = subprocess.run([sys.executable, "-m", "refattn", "check", save(tmp_path / "d.npz", arrays)],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 1, result.stderr
    assert 'matches if causal="top-left"' in result.stdout
    result = subprocess.run([sys.executable, "-m", "refattn", "check", _write_text(tmp_path / "x.npz")],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr
