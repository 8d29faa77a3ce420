"""refattn.figures: every registered id drawn, byte-stable files, the CLI, the generic template."""
from __future__ import annotations

import dataclasses
import importlib

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import Normalize, PowerNorm

import refattn as ra
from refattn import cli, registry
from refattn.figures import SHEETS, draw_figure, figure_names, sparse, write_figures
from refattn.figures.template import draw_spec
from refattn.mechanism import FigureSpec, Mechanism
from refattn.viz import SIGNED_CMAP, WEIGHTS_CMAP, save_figure

CHEAP = ["sdpa", "causal_mask", "band"]


@pytest.mark.parametrize("mech", registry.all(), ids=lambda m: m.id)
def test_every_registered_id_says_how_it_is_drawn(mech):
    """A spec for the generic template (given or named), or a function that exists (imported only when drawing)."""
    how = mech.figure
    if isinstance(how, str):
        module, name = how.split(":")
        how = getattr(importlib.import_module(module), name)
    if isinstance(how, FigureSpec):
        assert how.panels and mech.apply is not None, mech.id
    else:
        assert callable(how), mech.figure


def test_figure_names_are_the_registry_then_the_sheets():
    assert figure_names() == [*registry.ids(), *SHEETS]
    assert not set(SHEETS) & set(registry.ids())


def test_a_record_without_a_figure_is_refused():
    with pytest.raises(TypeError, match="figure must be a FigureSpec or 'module:function'"):
        Mechanism(id="x", title="x", family="vanilla", section="1", paper="p", equation="e", time="t", memory="m",
                  kind="component", function=print, causal=False, figure=None, exact_options=None,
                  exact_limit="none")


def test_template_refuses_weight_outside_the_reported_pattern():
    """The generic figure draws apply's allowed pairs beside its weights; a mismatch is an error, not a picture."""
    band = registry.get("band")

    def leaky(q, k, v, **options):
        result = band.apply(q, k, v, **options)
        return result._replace(weights=np.full(result.weights.shape, 1 / result.weights.shape[-1]))

    record = dataclasses.replace(band, apply=leaky)
    with pytest.raises(ValueError, match="band: apply put weight outside the pattern"):
        draw_spec(record)


def test_a_spec_named_by_module_and_name_is_drawn_by_the_template():
    """``figure="refattn.figures.sparse:etc"`` names a FigureSpec: the runner draws it with the template."""
    spec = sparse.etc
    assert registry.get("etc").figure == "refattn.figures.sparse:etc" and isinstance(spec, FigureSpec)
    drawn = draw_figure("etc")
    assert drawn.get_suptitle() == spec.title
    assert tuple(drawn.get_size_inches()) == spec.figsize


def test_write_figures_is_byte_stable(tmp_path):
    first = write_figures(tmp_path / "a", CHEAP)
    second = write_figures(tmp_path / "b", CHEAP)
    assert [p.name for p in first] == ["sdpa.png", "causal_mask.png", "band.png"]
    for a, b in zip(first, second, strict=True):
        assert a.read_bytes() == b.read_bytes(), a.name


def test_write_figures_progress_and_unknown_name(tmp_path, capsys):
    write_figures(tmp_path, ["multi_head"], progress=True)
    assert capsys.readouterr().err.strip() == f"wrote {tmp_path / 'multi_head.png'}"
    with pytest.raises(KeyError, match="unknown figure"):
        write_figures(tmp_path, ["nope"])


def test_cli_writes_one_figure(tmp_path):
    assert cli.main(["figures", "--out", str(tmp_path), "--only", "sdpa"]) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["sdpa.png"]


def test_cli_unknown_figure(tmp_path, capsys):
    assert cli.main(["figures", "--out", str(tmp_path), "--only", "no_such_mechanism"]) == 2
    assert "unknown figure(s): no_such_mechanism" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("name", figure_names())
def test_figure_text_stays_on_the_canvas(name, tmp_path):
    """Every figure draws, and no panel, label, colour bar or title is cut by the canvas edge."""
    fig = draw_figure(name)
    FigureCanvasAgg(fig)
    save_figure(fig, tmp_path / f"{name}.png")                  # runs the layout
    renderer = fig.canvas.get_renderer()
    width, height = fig.bbox.width, fig.bbox.height
    titles = [t for t in [fig._suptitle, *(sub._suptitle for sub in fig.subfigs)] if t is not None]
    boxes = [ax.get_tightbbox(renderer) for ax in fig.axes] + [t.get_window_extent(renderer) for t in titles]
    for box in boxes:                                            # 1 px slack for anti-aliasing
        assert box.x0 >= -1 and box.y0 >= -1 and box.x1 <= width + 1 and box.y1 <= height + 1, (name, box)
    assert width <= 1400


def test_sparse_weights_must_stay_on_the_drawn_pattern():
    """The sparse figures draw a builder's pattern beside apply's weights; a mismatch is refused."""
    mask = np.eye(3, dtype=bool)
    assert np.isnan(sparse._on_pattern(np.eye(3), mask)[0, 1])
    with pytest.raises(ValueError, match="outside the drawn pattern"):
        sparse._on_pattern(np.full((3, 3), 1 / 3), mask)


def _panels(fig) -> list:
    """The matrix panels of a figure: (title, mask of the grey cells, image)."""
    return [(ax.get_title(), np.ma.getmaskarray(ax.images[0].get_array()), ax.images[0])
            for ax in fig.axes if ax.images]


def test_vanilla_overview_draws_masked_pairs_grey_on_one_weights_scale():
    panels = _panels(draw_figure("vanilla_overview"))
    assert len(panels) == 8
    grey = {"causal top-left, 5 × 8": ~ra.causal_mask(5, 8),
            "causal bottom-right, 8 × 5\n(rows 0–2: no key, weights 0)":
                ~ra.causal_mask(8, 5, causal="bottom-right"),
            "key padding, ℓ = 3 of 9": np.broadcast_to(np.arange(9) >= 3, (5, 9)),
            "trained decoder causal self-attn, head 1": ~ra.causal_mask(9)}
    for title, masked, image in panels:
        np.testing.assert_array_equal(masked, grey.get(title, np.zeros_like(masked)), err_msg=title)
        assert image.get_clim() == (0.0, 1.0) and isinstance(image.norm, PowerNorm), title
        assert image.get_cmap().name.startswith(WEIGHTS_CMAP), title
        assert image.axes.texts, title                                  # small panels: values printed


def test_vanilla_figures_draw_masked_pairs_grey():
    decoder = _panels(draw_figure("decoder_layer"))
    heads = [masked for _, masked, _ in decoder if masked.shape == (9, 9)]
    assert len(heads) == 2                                              # the trained model's 2 heads, n = 9
    for masked in heads:
        np.testing.assert_array_equal(masked, ~ra.causal_mask(9))
    padding = [masked for title, masked, _ in _panels(draw_figure("padding_mask")) if "weights" in title]
    for masked, length in zip(padding, (9, 6, 3), strict=True):
        np.testing.assert_array_equal(masked, np.broadcast_to(np.arange(9) >= length, (5, 9)))


def test_linear_overview_weights_one_sided_and_readable():
    """Weights on the one-sided scale, clipped nowhere but the causal rows 0–1; only trig is signed."""
    panels = _panels(draw_figure("linear_overview"))
    assert sum(title.startswith("performer_trig") for title, _, _ in panels) == 2
    for title, masked, image in panels:
        lo, hi = image.get_clim()
        causal = bool(masked.any())
        if causal:
            np.testing.assert_array_equal(masked, ~ra.causal_mask(24), err_msg=title)
        if title.startswith("performer_trig"):                          # signed weights: diverging
            assert type(image.norm) is Normalize and lo == -hi, title
            assert image.get_cmap().name.startswith(SIGNED_CMAP), title
            continue
        assert lo == 0.0 and isinstance(image.norm, PowerNorm), title
        assert image.get_cmap().name.startswith(WEIGHTS_CMAP), title
        A = image.get_array().filled(np.nan)
        body = A[2:] if causal else A
        assert np.nanmin(A) >= 0.0 and np.nanmax(body) <= hi, title
