"""The fidelity atlas: metrics on hand-made cases, exact rows, skip reasons, table, figure and command."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from refattn import registry, scaled_dot_product_attention
from refattn.atlas import (
    TASK_NAMES,
    Atlas,
    AttentionCall,
    Entry,
    TaskInputs,
    atlas_entries,
    atlas_figure,
    atlas_markdown,
    attention_function,
    is_row_distribution,
    mass_kept,
    model_task,
    pareto_front,
    relative_error,
    row_kl,
    run_atlas,
    skip_reason,
    update_readme_atlas,
)
from refattn.atlas.metrics import clamp_round_off
from refattn.atlas.report import ATLAS_END, ATLAS_START, EXACT_BOUND

ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------------------------- metrics

def test_relative_error_hand_made(rng):
    np.testing.assert_equal(relative_error([[3.0, 4.0]], [[3.0, 4.0]]), 0.0)
    np.testing.assert_equal(relative_error([[3.0, 9.0]], [[3.0, 4.0]]), 1.0)          # ‖(0, 5)‖ / ‖(3, 4)‖
    np.testing.assert_equal(relative_error([[0.0, 0.0]], [[0.0, 0.0]]), 0.0)
    np.testing.assert_equal(relative_error([[1.0, 0.0]], [[0.0, 0.0]]), np.inf)
    exact = rng.standard_normal((2, 3, 5, 4))
    np.testing.assert_allclose(relative_error(exact * (1 + 2.5e-3), exact), 2.5e-3, rtol=1e-12)
    with pytest.raises(ValueError, match=r"approx \(2, 3\) and exact \(3, 2\)"):
        relative_error(np.zeros((2, 3)), np.zeros((3, 2)))


def test_mass_kept_hand_made():
    A = np.array([[0.5, 0.5], [0.25, 0.75]])
    np.testing.assert_equal(mass_kept(A, None), 1.0)
    np.testing.assert_equal(mass_kept(A, np.array([[True, False], [False, True]])), (0.5 + 0.75) / 2)
    np.testing.assert_equal(mass_kept(np.stack([A, A[::-1]]), np.array([[True, True], [False, False]])),
                            (1.0 + 0.0 + 1.0 + 0.0) / 4)             # one (n, m) pattern for both batch elements
    with pytest.raises(TypeError, match="allowed must be boolean"):
        mass_kept(A, np.ones((2, 2)))
    with pytest.raises(ValueError, match=r"allowed of shape \(3, 2\) does not broadcast"):
        mass_kept(A, np.ones((3, 2), bool))


def test_row_kl_hand_made():
    expected = 0.5 * math.log(0.5 / 0.25) + 0.5 * math.log(0.5 / 0.75)
    np.testing.assert_allclose(row_kl([[0.5, 0.5]], [[0.25, 0.75]]), expected, rtol=1e-15)
    np.testing.assert_allclose(row_kl([[0.5, 0.5], [1.0, 0.0]], [[0.5, 0.5], [0.5, 0.5]]),
                               (0.0 + math.log(2.0)) / 2, rtol=1e-15)   # 0·log 0 = 0 in the second row
    np.testing.assert_equal(row_kl([[0.5, 0.5]], [[1.0, 0.0]]), np.inf)       # exact mass the approx drops
    np.testing.assert_equal(row_kl([[0.5, 0.5], [0.5, 0.5]], [[0.5, 0.5], [0.0, 0.0]]), np.inf)  # an empty row
    np.testing.assert_equal(row_kl([[0.3, 0.7]], [[0.3, 0.7]]), 0.0)
    with pytest.raises(ValueError, match="not distributions"):
        row_kl([[0.5, 0.5]], [[1.5, -0.5]])
    with pytest.raises(ValueError, match="not distributions"):
        row_kl([[0.5, 0.5]], [[0.5, 0.6]])
    with pytest.raises(ValueError, match=r"\(1, 2\) and \(1, 3\)"):
        row_kl([[0.5, 0.5]], [[0.2, 0.3, 0.5]])
    assert is_row_distribution([[0.2, 0.8], [0.0, 0.0]])
    assert not is_row_distribution([[0.2, 0.9]])


def test_row_kl_is_never_below_zero(rng):
    A = scaled_dot_product_attention(*rng.standard_normal((3, 6, 5)), return_weights=True)[1]
    # Ã = A(1 + 1e-12) is a distribution (rows sum to 1 + 1e-12 <= 1 + ROW_SUM_TOLERANCE) with
    # KL(A ‖ Ã) = −log(1 + 1e-12) < 0 as computed: round-off of the row sums, returned as 0.
    assert row_kl(A, A * (1 + 1e-12)) == 0.0
    np.testing.assert_equal(clamp_round_off([0.5, -2.5e-15, -0.0, np.inf], 1e-12, "row KL"), [0.5, 0.0, 0.0, np.inf])
    assert math.copysign(1.0, clamp_round_off([-0.0], 0.0, "row KL")[0]) == 1.0     # never printed as "-0"
    with pytest.raises(RuntimeError, match=r"row KL -0.001 at \(1,\) is below 0 by more than its round-off bound"):
        clamp_round_off([0.5, -1e-3], 1e-12, "row KL")


def test_pareto_front_hand_made():
    assert pareto_front([3.0, 1.0, 2.0, 2.0, 5.0], [0.1, 1.0, 0.5, 0.2, 0.05]) == [1, 3, 0, 4]
    assert pareto_front([1.0, 1.0], [0.3, 0.3]) == [0]
    with pytest.raises(ValueError, match="1-D of one length"):
        pareto_front([1.0, 2.0], [0.1])


# ----------------------------------------------------------------------------------- rows and skips

def _calls(rng) -> tuple[AttentionCall, ...]:
    """The three kinds of call of the encoder-decoder (self, causal self, cross with n != m), head width 16."""
    def call(name, n, m, causal):
        return AttentionCall(name, rng.standard_normal((2, 2, n, 16)), rng.standard_normal((2, 2, m, 16)),
                             rng.standard_normal((2, 2, m, 16)), causal)
    return call("encoder.0.self", 8, 8, False), call("decoder.0.self", 9, 9, True), call("decoder.0.cross", 9, 8, False)


def test_entries_cover_every_record_that_attends():
    entries = atlas_entries()
    labels = [e.label for e in entries]
    assert len(set(labels)) == len(labels)
    for m in registry.all():
        has_default, has_exact = m.id in labels, f"{m.id} (exact)" in labels
        if m.kind == "component":
            assert not (has_default or has_exact), m.id
            continue
        assert has_exact == (m.exact_options is not None), m.id
        assert has_default == (callable(m.exact_options) or m.exact_options != {}), m.id
    assert "sdpa" not in labels and "sdpa (exact)" in labels          # exact at its defaults: one row
    assert [e.label for e in atlas_entries(["band", "sdpa"], ["default"])] == ["band"]
    with pytest.raises(ValueError, match="softmax is a component"):
        atlas_entries(["softmax"])
    with pytest.raises(ValueError, match="settings"):
        atlas_entries(["band"], ["approximate"])


def test_exact_rows_match_softmax_to_1e12(rng):
    ids = [m.id for m in registry.all() if m.exact_options is not None]
    atlas = run_atlas([TaskInputs("toy", _calls(rng))], ids=ids, settings=["exact"], repeats=1)
    assert [r.label for r in atlas.rows] == [f"{i} (exact)" for i in ids]
    for row in atlas.rows:
        result = row.tasks["toy"]
        assert result.calls_taken >= 1, (row.label, result.skipped)
        assert result.error <= EXACT_BOUND and result.error_random <= EXACT_BOUND, row.label
        if result.mass is not None:                                   # None only where weights map channels
            np.testing.assert_allclose(result.mass, 1.0, rtol=0, atol=1e-12, err_msg=row.label)
        if result.kl is not None:
            assert abs(result.kl) <= 1e-12, row.label


@pytest.mark.parametrize(("record", "call", "reason"), [
    ("multi_head", 0, "takes a layer's inputs"),
    ("talking_heads", 1, "takes a layer's inputs"),
    ("reformer_lsh", 0, "its keys are its queries"),
    ("linformer", 1, "no causal form"),
    ("rfa", 0, "causal only"),
    ("longformer", 2, "self-attention only (n = m); the model's cross-attention has n = 9, m = 8"),
])
def test_skip_reasons(rng, record, call, reason):
    assert reason in skip_reason(Entry(registry.get(record), "default"), _calls(rng)[call])


def test_layer_input_records_take_heads_at_their_exact_limit(rng):
    q, k, v = _calls(rng)[0].q, _calls(rng)[0].k, _calls(rng)[0].v
    for record in (m for m in registry.all() if m.layer_inputs and m.exact_options is not None):
        entry, causal = Entry(record, "exact"), not record.noncausal     # adaptive span is causal only
        assert skip_reason(entry, AttentionCall("x", q, k, v, causal)) is None
        np.testing.assert_allclose(attention_function(entry, 0)(q, k, v, causal=causal),
                                   scaled_dot_product_attention(q, k, v, causal=causal), rtol=1e-12, atol=1e-12,
                                   err_msg=record.id)
    default = attention_function(Entry(registry.get("multi_head"), "default"), 0)(q, k, v)   # its own projections
    assert relative_error(default, scaled_dot_product_attention(q, k, v)) > 0.1


def test_every_call_is_taken_or_has_a_reason(rng):
    ids = ["sdpa", "bp_transformer", "reformer_lsh", "linformer", "band", "multi_head", "fnet", "xcit", "aft"]
    atlas = run_atlas([TaskInputs("toy", _calls(rng))], ids=ids, repeats=1)
    for row in atlas.rows:
        result = row.tasks["toy"]
        skipped = sum(len(calls) for calls in result.skipped.values())
        assert result.calls_taken + skipped == result.calls_total == 3, row.label
    by_label = {r.label: r.tasks["toy"] for r in atlas.rows}
    bp = by_label["bp_transformer"].skipped                          # refused by its own apply: its message kept
    assert any(reason.startswith("ValueError: bp_transformer attends over the n nodes") for reason in bp)
    assert by_label["reformer_lsh"].calls_taken == 0 and by_label["multi_head"].calls_taken == 0
    assert by_label["xcit"].mass is None and "mixing 'channels'" in by_label["xcit"].kl_note
    assert by_label["aft"].kl is None and by_label["aft"].mass == 1.0
    assert by_label["band"].kl == np.inf and 0 < by_label["band"].mass < 1   # the window drops weighted keys


def test_attention_function_refuses_a_mask(rng):
    call = _calls(rng)[0]
    with pytest.raises(ValueError, match=r"takes no mask; got one of shape \(8, 8\)"):
        attention_function(Entry(registry.get("band"), "default"), 0)(call.q, call.k, call.v,
                                                                      mask=np.ones((8, 8), bool))


# ------------------------------------------------------------------------------ table, figure, README

def _toy_atlas(rng) -> Atlas:
    calls = _calls(rng)
    exact = {c.name: scaled_dot_product_attention(c.q, c.k, c.v, causal=c.causal) for c in calls}

    def accuracy(attention):                                          # fraction of calls within 1e-3 of softmax's
        if attention is None:
            return 1.0
        return float(np.mean([relative_error(attention(c.q, c.k, c.v, causal=c.causal), exact[c.name]) < 1e-3
                              for c in calls]))

    return run_atlas([TaskInputs("toy", calls, accuracy, 3)], ids=["sdpa", "band", "topk", "reformer_lsh", "xcit"],
                     repeats=1)


def test_table_is_well_formed(rng):
    atlas = _toy_atlas(rng)
    text = atlas_markdown(atlas)
    table = [line for line in text.splitlines() if line.startswith("|")]
    widths = {line.count("|") - line.count("\\|") for line in table}
    assert len(widths) == 1 and table[1].startswith("|---")
    names = [line.split(" | ")[0].removeprefix("| ") for line in table[2:]]
    assert names == [f"`{r.id}`" + (" (exact)" if r.setting == "exact" else "") for r in atlas.rows if not r.skipped]
    sdpa = table[names.index("`sdpa` (exact)") + 2].removesuffix(" |").split(" | ")
    # error, mass / KL, accuracy: sdpa's own errors are round-off, printed by the figures' rule, never as digits
    assert sdpa[4:7] == ["< 1e-12 / < 1e-12", "1.000 / < 1e-12", "1.000"]
    topk = table[names.index("`topk`") + 2].removesuffix(" |").split(" | ")
    assert all(cell[0].isdigit() or cell in "—∞" for cell in " / ".join(topk[4:6]).split(" / ")), topk
    assert "- its keys are its queries (shared QK); the model's heads have their own keys: `reformer_lsh` " \
           "(toy: all calls)" in text
    assert "xcit" in text and "toy 1.000" in text and "fresh sequences: toy 3" in text


def test_update_readme_atlas_rewrites_only_the_table(rng, tmp_path):
    atlas = _toy_atlas(rng)
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{ATLAS_START}| stale |\n{ATLAS_END}\noutro\n", encoding="utf-8")
    assert update_readme_atlas(readme, atlas) is True
    assert readme.read_text(encoding="utf-8") == f"intro\n{ATLAS_START}{atlas_markdown(atlas)}{ATLAS_END}\noutro\n"
    assert update_readme_atlas(readme, atlas) is False
    (tmp_path / "bare.md").write_text("no markers", encoding="utf-8")
    with pytest.raises(ValueError, match="has no <!-- atlas:start -->"):
        update_readme_atlas(tmp_path / "bare.md", atlas)


def test_readme_has_the_atlas_between_markers():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert text.count(ATLAS_START) == 1 and text.count(ATLAS_END) == 1
    table = text.split(ATLAS_START)[1].split(ATLAS_END)[0]
    assert "| `sdpa` (exact) |" in table and "](figures/atlas.png)" in text


def test_figure_draws_every_task(rng, tmp_path):
    from refattn.viz import save_figure

    fig = atlas_figure(_toy_atlas(rng))
    titles = [ax.get_title() for ax in fig.axes]
    assert "toy: output relative error on the model's q, k, v" in titles and "toy: task accuracy" in titles
    assert save_figure(fig, tmp_path / "atlas.png").stat().st_size > 0
    json.dumps(_toy_atlas(rng).as_dict())                             # serialisable, infinities included


# ------------------------------------------------------------------------------- the trained models

@pytest.fixture(scope="module")
def model_tasks():
    """Both trained models: two sequences' attention calls, accuracy on 16 fresh sequences."""
    return [model_task(t, input_sequences=2, num_sequences=16) for t in TASK_NAMES]


def test_model_calls_are_the_models_attention(model_tasks):
    reverse, induction = model_tasks
    assert [(c.name, c.causal) for c in reverse.calls] == [("encoder.0.self", False), ("decoder.0.self", True),
                                                           ("decoder.0.cross", False)]
    assert [(c.name, c.causal) for c in induction.calls] == [("layer.0", True), ("layer.1", True)]
    cross = reverse.calls[2]
    assert cross.q.shape[:2] == (2, 2) and cross.q.shape[-2] == cross.k.shape[-2] + 1   # [BOS, reversed source]


def test_exact_rows_on_the_trained_models_keep_error_and_accuracy(model_tasks):
    atlas = run_atlas(model_tasks, settings=["exact"], repeats=1)
    assert all(a is not None for a in atlas.baseline.values())
    for row in atlas.rows:
        for task, result in row.tasks.items():
            if result.calls_taken == 0:                               # no causal form, say: listed with its reason
                assert result.skipped, (row.label, task)
                continue
            assert result.error <= EXACT_BOUND and result.error_random <= EXACT_BOUND, (row.label, task)
            if result.calls_taken == result.calls_total:
                assert result.accuracy == atlas.baseline[task], (row.label, task)


def test_tiny_atlas_end_to_end(model_tasks):
    atlas = run_atlas(model_tasks, ids=["sdpa", "band", "linformer", "multi_head"], repeats=1, seed=3)
    rows = {r.label: r.tasks for r in atlas.rows}
    assert list(rows) == ["sdpa (exact)", "band", "band (exact)", "linformer", "linformer (exact)", "multi_head",
                          "multi_head (exact)"]
    for task in TASK_NAMES:
        assert rows["sdpa (exact)"][task].accuracy == atlas.baseline[task]
        assert rows["multi_head (exact)"][task].accuracy == atlas.baseline[task]
        assert rows["multi_head"][task].calls_taken == 0
        band = rows["band"][task]
        assert band.calls_taken == band.calls_total and 0 <= band.accuracy <= 1
        assert band.error > EXACT_BOUND and 0 < band.mass < 1 and band.kl == np.inf
        assert band.time_ratio > 0
    linformer = rows["linformer"]                                     # no causal form
    assert linformer["reverse"].calls_taken == 2 and linformer["reverse"].accuracy is None
    assert linformer["reverse"].skipped == {"no causal form; the model attends causally": ["decoder.0.self"]}
    assert linformer["induction"].calls_taken == 0
    text = atlas_markdown(atlas)
    assert "| `band` | sparse |" in text and "(2 of 3 calls)" in text


ATLAS_OPTIONS = ["--only", "sdpa", "band", "--tasks", "induction", "--num-sequences", "4", "--input-sequences", "2",
                 "--repeats", "1"]


def test_atlas_command(tmp_path, monkeypatch, capsys):
    from refattn.cli import main

    readme = (ROOT / "README.md").read_bytes()
    monkeypatch.chdir(tmp_path)
    assert main(["atlas", *ATLAS_OPTIONS]) == 0                    # default: the current folder
    err = capsys.readouterr().err
    assert "[1/3] sdpa (exact): induction 2/2 calls" in err and "atlas: 3 rows in" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["atlas.json", "atlas.png"]
    assert (tmp_path / "atlas.png").stat().st_size > 0
    data = json.loads((tmp_path / "atlas.json").read_text(encoding="utf-8"))
    assert [r["label"] for r in data["rows"]] == ["sdpa (exact)", "band", "band (exact)"]
    assert data["rows"][0]["tasks"]["induction"]["accuracy"] == data["baseline"]["induction"]
    assert (ROOT / "README.md").read_bytes() == readme              # no README without --update-readme
    out = tmp_path / "atlas"
    assert main(["atlas", "--out", str(out), *ATLAS_OPTIONS]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["atlas.json", "atlas.png"]
    assert main(["atlas", "--out", str(out), "--only", "nope"]) == 2
    assert "no mechanism 'nope'" in capsys.readouterr().err
    assert main(["atlas", "--out", str(out), "--only", "softmax"]) == 2
    assert "softmax is a component" in capsys.readouterr().err


def test_atlas_update_readme_publishes_into_the_checkout(tmp_path, monkeypatch, capsys):
    from refattn import cli

    root = tmp_path / "clone"
    (root / "figures").mkdir(parents=True)
    (root / "README.md").write_text(f"intro\n{ATLAS_START}old\n{ATLAS_END}\n", encoding="utf-8")
    monkeypatch.setattr(cli, "checkout", lambda: root)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["atlas", "--update-readme", *ATLAS_OPTIONS]) == 0
    assert sorted(p.name for p in (root / "figures").iterdir()) == ["atlas.json", "atlas.png"]
    text = (root / "README.md").read_text(encoding="utf-8")
    assert "| `band` | sparse |" in text and "old" not in text
    assert f"updated the atlas table of {root / 'README.md'}" in capsys.readouterr().err
    assert cli.main(["atlas", "--update-readme", "--out", str(tmp_path / "elsewhere"), *ATLAS_OPTIONS]) == 2
    assert f"--update-readme writes into {root / 'figures'}" in capsys.readouterr().err
    monkeypatch.setattr(cli, "checkout", lambda: None)              # an installed copy: no README to update
    assert cli.main(["atlas", "--update-readme", *ATLAS_OPTIONS]) == 2
    assert "--update-readme needs the README of a source checkout" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clone"]  # the refusals wrote nothing
