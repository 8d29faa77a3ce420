"""Test vectors: every registered attention mechanism's file round-trips through ``check``, fails a perturbed output,
reproduces its output from the stored draws and options, and is listed in a well-formed manifest."""
from __future__ import annotations

import hashlib
import json
import zipfile

import numpy as np
import pytest

from refattn import registry
from refattn.cli import main
from refattn.oracle.fixtures import FixtureError, check_file
from refattn.oracle.vectors import (
    FORMAT,
    export_vector,
    load_vector,
    make_vector,
    replay,
    vector_cases,
    vector_ids,
    write_npz,
    write_suite,
)
from refattn.oracle.vjp import GRADIENT_IDS

IDS = vector_ids()
SUITE = [(i, c) for i in IDS for c in vector_cases(i) if c in ("default", "causal")]


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    """The whole suite, written once: (folder, manifest)."""
    folder = tmp_path_factory.mktemp("vectors")
    return folder, write_suite(folder)


def _with_candidate(folder, name, **candidates):
    """A copy of vector ``name`` with ``candidate_*`` arrays added; its path."""
    with np.load(folder / name, allow_pickle=False) as archive:
        arrays = {key: archive[key] for key in archive.files}
    path = folder / f"check-{name}"
    write_npz(path, arrays | {f"candidate_{key}": value for key, value in candidates.items()})
    return path


def test_every_attention_id_has_vectors_and_only_those():
    assert IDS == [m.id for m in registry.all() if m.apply is not None]
    assert "softmax" not in IDS and "transformer" not in IDS            # components have no apply
    for m in registry.all():
        if m.apply is not None:
            assert vector_cases(m.id)[0] == "default"
            assert ("causal" in vector_cases(m.id)) == (m.noncausal and m.causal)


@pytest.mark.parametrize(("mech_id", "case"), SUITE)
def test_vector_round_trips_and_fails_a_perturbed_output(suite, mech_id, case):
    folder, _ = suite
    name = f"{mech_id}-{case}.npz"
    out = load_vector(folder / name)["out"]
    assert check_file(_with_candidate(folder, name, out=out)).passed
    report = check_file(_with_candidate(folder, name, out=out * (1 + 1e-3) + 1e-3 * (out == 0)))
    assert not report.passed
    assert report["out"].n_failing > 0


@pytest.mark.parametrize(("mech_id", "case"), [(i, c) for i in IDS for c in vector_cases(i)])
def test_stored_draws_and_options_reproduce_out_bit_for_bit(tmp_path, mech_id, case):
    export_vector(mech_id, tmp_path / "v.npz", case)
    vector = load_vector(tmp_path / "v.npz")
    assert set(vector["draws"]) == set(registry.get(mech_id).draws)
    result = replay(vector)                                        # no rng: every draw comes from the file
    if case == "bottom_right":                                     # 3 new queries, the last 3 of m positions
        assert vector["q"].shape[-2] == 3 and vector["causal"] == "bottom-right"
    np.testing.assert_array_equal(result.output, vector["out"])
    if "weights" in vector:
        np.testing.assert_array_equal(result.weights, vector["weights"])


def test_manifest_is_well_formed_and_its_hashes_match(suite):
    folder, manifest = suite
    on_disk = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    assert on_disk == manifest and on_disk["format"] == FORMAT
    assert [(e["id"], e["case"]) for e in on_disk["files"]] == SUITE
    assert len({e["file"] for e in on_disk["files"]}) == len(SUITE)
    for entry in on_disk["files"]:
        assert set(entry) == {"id", "case", "file", "sha256", "format", "arrays"}
        assert entry["format"] == FORMAT
        data = (folder / entry["file"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == entry["sha256"], entry["file"]
        with np.load(folder / entry["file"], allow_pickle=False) as archive:
            assert sorted(archive.files) == sorted(entry["arrays"])
            for key, spec in entry["arrays"].items():
                x = archive[key]
                assert list(x.shape) == spec["shape"], (entry["file"], key)
                assert (x.dtype.name if x.dtype.kind != "U" else x.dtype.str[1:]) == spec["dtype"]
                assert x.dtype.kind in "biufU", (entry["file"], key)          # numeric, bool or strings
                assert x.dtype.kind != "U" or x.shape == (), (entry["file"], key)


def test_vectors_are_the_same_bytes_on_every_run(tmp_path):
    for mech_id in ("performer_positive", "multi_head"):
        first, second = tmp_path / "a.npz", tmp_path / "b.npz"
        export_vector(mech_id, first)
        export_vector(mech_id, second)
        assert first.read_bytes() == second.read_bytes()
        with zipfile.ZipFile(first) as archive:                    # plain npz: one stored .npy per member
            assert all(i.filename.endswith(".npy") and i.compress_type == zipfile.ZIP_STORED
                       for i in archive.infolist())


def test_vector_layout_of_a_drawn_parameter_tree():
    arrays = make_vector("predictive_attention")
    draws = json.loads(str(arrays["draws"]))
    assert draws["convs"]["tuple"][1] == {"dataclass": "refattn.prior.predictive_attention:AttentionConv",
                                          "fields": {"kernel": {"array": "draw.convs.1.kernel"},
                                                     "bias": {"array": "draw.convs.1.bias"}}}
    assert arrays["draw.projections.w_q"].shape == (2, 4, 4)
    assert json.loads(str(arrays["options"])) == {}
    assert json.loads(str(arrays["defaults"])) == {"layers": None, "alpha": 0.5, "activation": "relu",
                                                   "num_heads": None, "scale": None}   # apply's signature


@pytest.mark.parametrize("mech_id", GRADIENT_IDS)
def test_gradient_vectors_round_trip_and_fail_a_perturbed_gradient(tmp_path, mech_id):
    path = tmp_path / f"{mech_id}.npz"
    arrays = export_vector(mech_id, path, "causal" if mech_id != "cross_attention" else "default")
    grads = {key: arrays[key] for key in ("dq", "dk", "dv")}
    assert check_file(_with_candidate(tmp_path, path.name, out=arrays["out"], **grads)).passed
    bad = grads | {"dk": grads["dk"] * (1 + 1e-3)}
    report = check_file(_with_candidate(tmp_path, path.name, out=arrays["out"], **bad))
    assert not report.passed and report["out"].passed and not report["dk"].passed


def test_a_float32_candidate_passes_and_the_wrong_causal_setting_is_named(tmp_path):
    path = tmp_path / "performer.npz"
    arrays = export_vector("performer_positive", path, "causal")
    assert check_file(_with_candidate(tmp_path, path.name, out=arrays["out"].astype(np.float32))).passed
    vector = load_vector(path)
    plain = registry.get("performer_positive").apply(vector["q"], vector["k"], vector["v"], **vector["draws"])
    report = check_file(_with_candidate(tmp_path, path.name, out=plain.output.astype(np.float32)))
    assert not report.passed
    assert "causal=False instead of True" in report.alternatives


def test_bad_vectors_are_one_line_errors(tmp_path):
    path = tmp_path / "v.npz"
    arrays = make_vector("rope")
    write_npz(path, arrays | {"candidate_out": arrays["out"][:, :-1]})
    with pytest.raises(FixtureError, match="candidate_out has shape"):
        check_file(path)
    write_npz(path, arrays | {"candidate_out": arrays["out"], "mechanism": np.array("flash")})
    with pytest.raises(FixtureError, match="unknown mechanism 'flash'"):
        check_file(path)
    write_npz(path, arrays | {"candidate_out": arrays["out"], "draws": np.array('{"x": {"array": "nope"}}')})
    with pytest.raises(FixtureError, match="'draws' is not a readable tree"):
        check_file(path)
    write_npz(path, arrays | {"candidate_out": arrays["out"], "candidate_dq": arrays["q"], "d_out": arrays["out"]})
    with pytest.raises(FixtureError, match="gradients of sdpa, multi_head"):
        check_file(path)


def test_cli_export_vectors_and_check_exit_codes(tmp_path, capsys):
    path = tmp_path / "alibi.npz"
    assert main(["export", "--mechanism", "alibi", "--case", "causal", "--out", str(path)]) == 0
    assert str(load_vector(path)["case"]) == "causal"
    arrays = dict(np.load(path, allow_pickle=False))
    good, bad = tmp_path / "good.npz", tmp_path / "bad.npz"
    write_npz(good, arrays | {"candidate_out": arrays["out"].astype(np.float32)})
    write_npz(bad, arrays | {"candidate_out": arrays["out"] * 1.001})
    assert main(["check", str(good)]) == 0
    assert "PASSED" in capsys.readouterr().out
    assert main(["check", str(bad)]) == 1
    assert "conventions: mechanism=alibi" in capsys.readouterr().out
    assert main(["check", str(path)]) == 2                          # no candidate_out
    assert main(["export", "--mechanism", "softmax", "--out", str(path)]) == 2          # a component
    assert main(["export", "--mechanism", "rfa", "--case", "causal", "--out", str(path)]) == 2   # causal only
    assert main(["vectors", "--out", str(tmp_path / "suite"), "--only", "alibi", "rope"]) == 0
    manifest = json.loads((tmp_path / "suite" / "manifest.json").read_text(encoding="utf-8"))
    assert [e["file"] for e in manifest["files"]] == ["alibi-default.npz", "alibi-causal.npz", "rope-default.npz",
                                                       "rope-causal.npz"]
    assert main(["vectors", "--out", str(tmp_path / "x"), "--only", "flash"]) == 2
    assert "no registered attention mechanism 'flash'" in capsys.readouterr().err
