"""The benchmark entry points run (tiny sizes; no timing is asserted: targets live in the bench itself)."""
from __future__ import annotations

import pytest

from refattn.bench import backward, linear, sdpa
from refattn.cli import main


def test_bench_sdpa_runs_and_writes_its_plot(tmp_path, capsys):
    plot = tmp_path / "complexity.png"
    assert main(["bench", "sdpa", "--sizes", "64", "128", "--heads", "2", "--d", "8", "--repeat", "1",
                 "--memory-n", "0", "--plot", str(plot)]) == 0
    out = capsys.readouterr().out
    assert "blocked" in out and "equation" in out
    assert out.startswith("CPU ") and "; BLAS " in out.splitlines()[0]          # the machine, named first
    assert plot.stat().st_size > 0


def test_bench_sparse_and_linear_run(capsys):
    assert main(["bench", "sparse", "--sizes", "1024", "2048", "--repeat", "1", "--dense-max", "1024"]) == 0
    assert main(["bench", "linear", "--sizes", "64", "128", "--repeat", "1", "--quadratic-max", "64"]) == 0
    out = capsys.readouterr().out
    assert "band w=128" in out and "scan" in out


def test_bench_sdpa_plot_can_be_skipped(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "sdpa", "--sizes", "64", "--heads", "1", "--d", "8", "--repeat", "1",
                 "--memory-n", "0", "--plot", ""]) == 0
    assert "wrote" not in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []


def test_bench_sdpa_runs_below_the_warm_up_size(capsys):
    assert main(["bench", "sdpa", "--sizes", "1", "3", "--heads", "1", "--d", "2", "--repeat", "1",
                 "--memory-n", "2", "--plot", ""]) == 0
    assert "target: peak memory at n = 2" in capsys.readouterr().out


def test_bench_sparse_runs_every_size_its_patterns_take(capsys):
    assert main(["bench", "sparse", "--sizes", "128", "512", "--d", "4", "--repeat", "1", "--dense-max", "128"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("bigbird")]
    assert [(row[2], row[3]) for row in rows] == [("128", "16384"), ("512", "253952")]   # n = 128: 2 global blocks


def test_bench_memory_measures_a_call_in_its_own_process_and_reports_a_refusal():
    from refattn.bench import memory

    done = memory._measure("x = np.ones(10)", "None", "np.zeros(2**20)")           # 8 MiB
    assert done["error"] is None and done["peak"] >= done["before"] > 0 and done["seconds"] >= 0
    refused = memory._measure("pass", "None", "refattn.common.check_fits('a test array', (2**40,))")
    assert refused["error"].startswith("a test array of shape (1099511627776,) would take 8.19e+03 GiB")


def test_bench_content_runs_routing_and_reformer_as_n_doubles(capsys):
    assert main(["bench", "content", "--sizes", "128", "256", "--d", "8", "--repeat", "1"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.split()[:1] in (["routing"],
                                                                                                 ["reformer_lsh"])]
    assert [(row[0], row[1]) for row in rows] == [("routing", "128"), ("routing", "256"), ("reformer_lsh", "128"),
                                                 ("reformer_lsh", "256")]


def test_bench_lowrank_runs_nystromformer_as_n_doubles(capsys):
    assert main(["bench", "lowrank", "--sizes", "128", "256", "--d", "8", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert [line.split()[1] for line in out.splitlines() if line.startswith("nystromformer ")] == ["128", "256"]
    assert "target: " not in out                                   # the target is stated at n = 65536 only


def test_bench_beyond_runs_every_mixer_beside_softmax(capsys):
    assert main(["bench", "beyond", "--sizes", "128", "256", "--d", "8", "--repeat", "1"]) == 0
    printed = capsys.readouterr().out
    for name in ("softmax", "fnet", "aft-simple", "topk", "xcit", "skyformer", "scatterbrain", "long_short", "flash"):
        assert name in printed
    assert "time over softmax's" in printed


def test_bench_sdpa_writes_nothing_and_times_only_sdpa_without_plot(tmp_path, monkeypatch, capsys):
    def not_asked(*args):
        raise AssertionError("timed for the figure, which was not asked for")
    monkeypatch.setattr(sdpa, "_band_time", not_asked)
    monkeypatch.setattr(sdpa, "_scan_time", not_asked)
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "sdpa", "--sizes", "8", "16", "--heads", "1", "--d", "4", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert list(tmp_path.iterdir()) == [] and "wrote" not in out
    assert "target: peak memory" not in out                        # --sizes runs only the sizes asked for


@pytest.mark.parametrize(("module", "extra", "small", "line"), [
    (sdpa, "MEMORY_N", 16, "target: peak memory at n = 16,"),
    (backward, "MEMORY_N", 16, "target: peak memory of the blocked backward at n = 16,"),
    (linear, "SWEEP", (4, 8), "chunk size at n = 16: C = 4"),
])
def test_bench_sizes_leave_out_the_default_extra_targets(module, extra, small, line, monkeypatch, capsys):
    monkeypatch.setattr(module, "DEFAULT_SIZES", (16,))            # the defaults, made small
    monkeypatch.setattr(module, extra, small)
    family = module.__name__.rpartition(".")[2]
    options = ["--d", "4", "--repeat", "1"] + (["--heads", "1"] if module is not linear else [])
    assert main(["bench", family, *options]) == 0
    assert line in capsys.readouterr().out                         # no --sizes: the default extra target runs
    assert main(["bench", family, "--sizes", "16", *options]) == 0
    assert line not in capsys.readouterr().out                     # --sizes: only what was asked


def test_bench_plot_needs_an_existing_folder(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "sdpa", "--sizes", "8", "--plot", str(tmp_path / "missing" / "c.png")])
    assert exit_info.value.code == 2 and "does not exist" in capsys.readouterr().err
