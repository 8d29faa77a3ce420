"""refattn.viz: grid layout, colour scales, masked cells, printed values, validation, stepping, stable files."""
from __future__ import annotations

import io
import subprocess
import sys

import matplotlib.colors
import numpy as np
import pytest
from matplotlib.colors import Normalize, PowerNorm
from matplotlib.figure import Figure

from refattn import viz

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def weights(rng) -> np.ndarray:
    """A (2, 3, 5, 7) grid of row-stochastic matrices (n != m)."""
    x = rng.random((2, 3, 5, 7))
    return x / x.sum(axis=-1, keepdims=True)


# --- plot_attention -------------------------------------------------------------------------------

@pytest.mark.parametrize(("index", "panels"), [((0, 0), 1), ((0,), 3), ((), 6)])
@pytest.mark.parametrize("colorbar", [True, False])
def test_grid_shape_gives_one_axes_per_panel(weights, index, panels, colorbar):
    fig = viz.plot_attention(weights[index], colorbar=colorbar)
    assert isinstance(fig, Figure)
    assert len(fig.axes) == panels + colorbar
    assert all(len(ax.images) == 1 for ax in fig.axes[:panels])


def test_panels_share_one_colour_scale(weights):
    fig = viz.plot_attention(weights)
    clims = {ax.images[0].get_clim() for ax in fig.axes[:6]}
    assert clims == {(0.0, weights.max())}
    assert viz.plot_attention(weights, vmin=None, vmax=0.5).axes[0].images[0].get_clim() == (weights.min(), 0.5)


def test_nan_entries_are_masked_and_drawn_grey(weights):
    A = weights[0, 0].copy()
    A[2, 3] = np.nan
    image = viz.plot_attention(A).axes[0].images[0]
    assert image.get_clim() == (0.0, np.nanmax(A))           # NaN ignored by the default vmax
    assert np.ma.getmaskarray(image.get_array())[2, 3]
    assert np.ma.getmaskarray(image.get_array()).sum() == 1
    np.testing.assert_array_equal(image.get_cmap().get_bad(), matplotlib.colors.to_rgba(viz.BAD_COLOR))


def test_all_nan_and_constant_inputs_still_draw():
    assert viz.plot_attention(np.full((3, 4), np.nan)).axes[0].images[0].get_clim() == (0.0, 1.0)
    assert viz.plot_attention(np.zeros((3, 4))).axes[0].images[0].get_clim() == (0.0, 1.0)


def test_token_labels_and_titles(weights):
    rows, cols = list("abcde"), [f"tok{j}" for j in range(7)]
    fig = viz.plot_attention(weights[0], row_labels=rows, col_labels=cols, titles=["h1", "h2", "h3"],
                             suptitle="sheet")
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == cols
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == rows
    assert [ax.get_title() for ax in fig.axes[:3]] == ["h1", "h2", "h3"]
    assert fig.get_suptitle() == "sheet"
    nested = viz.plot_attention(weights, titles=[["a", "b", "c"], ["d", "e", "f"]])
    assert [ax.get_title() for ax in nested.axes[:6]] == list("abcdef")


def test_bool_input_is_drawn_as_zero_one():
    image = viz.plot_attention(np.eye(3, dtype=bool)).axes[0].images[0]
    np.testing.assert_array_equal(image.get_array(), np.eye(3))


@pytest.mark.parametrize(("A", "kwargs", "error", "match"), [
    (np.ones(4), {}, ValueError, r"A must have shape \(n, m\).*got shape \(4,\)"),
    (np.ones((1, 1, 1, 2, 2)), {}, ValueError, r"got shape \(1, 1, 1, 2, 2\)"),
    (np.ones((0, 3)), {}, ValueError, r"no empty axis, got shape \(0, 3\)"),
    (np.ones((2, 3), dtype=int), {}, TypeError, r"A must be a real floating-point or bool array, got dtype int"),
    (np.ones((2, 3), dtype=complex), {}, TypeError, "got dtype complex128 with shape"),
    (np.ones((5, 7)), {"row_labels": list("abcd")}, ValueError, r"row_labels has 4 entries but the panels have n=5"),
    (np.ones((5, 7)), {"col_labels": "abcdefg"}, TypeError, "col_labels must be a sequence of labels"),
    (np.ones((3, 5, 7)), {"titles": ["a", "b"]}, ValueError, r"titles has 2 entries but the grid has 1×3 = 3"),
    (np.ones((5, 7)), {"vmin": 0.5, "vmax": 0.5}, ValueError, r"vmax=0.5 must be greater than vmin=0.5"),
    (np.ones((5, 7)), {"cmap": "no-such-map"}, ValueError, "cmap 'no-such-map' is not a matplotlib colormap"),
    (np.ones((5, 7)), {"size": 0}, ValueError, "size must be a positive number of inches"),
])
def test_plot_attention_rejects_bad_input(A, kwargs, error, match):
    with pytest.raises(error, match=match):
        viz.plot_attention(A, **kwargs)


# --- colour scales --------------------------------------------------------------------------------

def test_weights_scale_is_one_sided_square_root_from_zero(weights):
    image = viz.plot_attention(weights).axes[0].images[0]
    assert isinstance(image.norm, PowerNorm) and image.norm.gamma == viz.WEIGHTS_GAMMA == 0.5
    assert image.get_cmap().name.startswith(viz.WEIGHTS_CMAP)
    assert image.get_clim() == (0.0, weights.max())
    # a weight of 1 % of the top is a tenth of the way up the colour scale, not lost at the bottom
    np.testing.assert_allclose(image.norm(0.01 * weights.max()), 0.1, rtol=1e-12)


def test_weights_scale_bottom_colour_is_light():
    bottom = matplotlib.colors.to_rgba(viz.plot_attention(np.eye(3)).axes[0].images[0].get_cmap()(0.0))
    assert viz.draw._luminance(bottom) > 0.9                          # not near-black, as viridis' start is


def test_own_cmap_is_linear_unless_gamma_given(weights):
    assert type(viz.plot_attention(weights, cmap="viridis").axes[0].images[0].norm) is Normalize
    norm = viz.plot_attention(weights, cmap="viridis", gamma=0.25).axes[0].images[0].norm
    assert isinstance(norm, PowerNorm) and norm.gamma == 0.25
    assert type(viz.plot_attention(weights, gamma=1).axes[0].images[0].norm) is Normalize


def test_signed_scale_is_linear_and_centred_on_zero(rng):
    X = rng.standard_normal((3, 4))
    image = viz.plot_attention(X, signed=True).axes[0].images[0]
    top = np.abs(X).max()
    assert type(image.norm) is Normalize
    assert image.get_clim() == (-top, top)
    assert image.get_cmap().name.startswith(viz.SIGNED_CMAP)
    assert viz.plot_attention(X, signed=True, vmax=0.5).axes[0].images[0].get_clim() == (-0.5, 0.5)


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"signed": True, "vmin": -1.0}, ValueError, r"signed scale is centred on 0.*give vmax only, got vmin=-1.0"),
    ({"signed": True, "vmax": -1.0}, ValueError, r"vmax=-1.0 must be positive on a signed scale"),
    ({"signed": True, "gamma": 0.5}, ValueError, r"gamma=0.5 applies to one-sided scales"),
    ({"signed": 1}, TypeError, "signed must be True or False"),
    ({"gamma": 0}, ValueError, "gamma must be a positive number, got 0"),
    ({"gamma": True}, ValueError, "gamma must be a positive number, got True"),
    ({"annotate": "yes"}, TypeError, "annotate must be True or False"),
])
def test_scale_options_reject_bad_input(kwargs, error, match):
    with pytest.raises(error, match=match):
        viz.plot_attention(np.full((3, 4), 0.25), **kwargs)


@pytest.mark.parametrize(("vmin", "vmax", "signed", "extend"), [
    (0.0, None, False, "neither"), (0.0, 0.5, False, "max"), (0.2, None, False, "min"), (0.2, 0.5, False, "both"),
    (0.0, 0.5, True, "both"),
])
def test_colour_bar_arrow_marks_entries_beyond_the_scale(vmin, vmax, signed, extend):
    A = np.array([[0.0, 0.1], [0.7, -0.6 if signed else 0.3]])
    fig = viz.plot_attention(A, vmin=vmin, vmax=vmax, signed=signed)
    assert fig.axes[1]._colorbar.extend == extend


# --- masked cells: allowed= -----------------------------------------------------------------------

def test_cells_outside_allowed_are_drawn_grey_whatever_their_value(weights):
    causal = np.tril(np.ones((5, 7), dtype=bool))
    fig = viz.plot_attention(weights[0], allowed=causal)             # one (n, m) mask for 3 panels
    for ax, panel in zip(fig.axes[:3], weights[0], strict=True):
        image = ax.images[0]
        np.testing.assert_array_equal(np.ma.getmaskarray(image.get_array()), ~causal)
        np.testing.assert_array_equal(image.get_array()[causal], panel[causal])
        np.testing.assert_array_equal(image.get_cmap().get_bad(), matplotlib.colors.to_rgba(viz.BAD_COLOR))
        assert [t.get_text() for t in ax.texts if not t.get_text()] == [""] * int((~causal).sum())
    assert fig.axes[0].images[0].get_clim() == (0.0, weights[0][:, causal].max())  # masked cells: not in the range


def test_allowed_broadcasts_per_panel_and_from_a_key_mask(weights):
    keys = np.array([True, True, True, False, False, True, False])            # (m,), e.g. a padding mask row
    image = viz.plot_attention(weights[0, 0], allowed=keys).axes[0].images[0]
    np.testing.assert_array_equal(np.ma.getmaskarray(image.get_array()), np.broadcast_to(~keys, (5, 7)))
    per_panel = np.zeros((2, 3, 5, 7), dtype=bool)
    per_panel[1, 2] = True
    fig = viz.plot_attention(weights, allowed=per_panel)
    assert [bool(np.ma.getmaskarray(ax.images[0].get_array()).all()) for ax in fig.axes[:6]] == [True] * 5 + [False]


def test_draw_attention_takes_allowed():
    fig = viz.figure((4.0, 3.0))
    axes = viz.draw_attention(fig, np.full((4, 4), 0.25), allowed=np.eye(4, dtype=bool))
    np.testing.assert_array_equal(np.ma.getmaskarray(axes[0, 0].images[0].get_array()), ~np.eye(4, dtype=bool))


@pytest.mark.parametrize(("allowed", "error", "match"), [
    (np.ones((5, 7)), TypeError, r"allowed must be a boolean \(True = may attend\) array, got dtype float64"),
    (np.ones((5, 6), dtype=bool), ValueError, r"allowed has shape \(5, 6\), which does not broadcast to the "
                                              r"matrices' shape \(3, 5, 7\)"),
    (np.ones((4, 3, 5, 7), dtype=bool), ValueError, r"allowed has shape \(4, 3, 5, 7\)"),
])
def test_allowed_rejects_bad_input(weights, allowed, error, match):
    with pytest.raises(error, match=match):
        viz.plot_attention(weights[0], allowed=allowed)


# --- small panels: labels and printed values ------------------------------------------------------

def test_small_panels_print_every_value_with_contrasting_text():
    A = np.array([[1.0, 0.0, 0.125], [0.25, 0.5, 0.005]])
    ax = viz.plot_attention(A).axes[0]
    assert [t.get_text() for t in ax.texts] == ["1.00", "0.00", "0.12", "0.25", "0.50", "0.01"]
    assert [tuple(t.get_position()) for t in ax.texts[:4]] == [(0, 0), (1, 0), (2, 0), (0, 1)]   # (column j, row i)
    image = ax.images[0]
    for text, value in zip(ax.texts, A.ravel(), strict=True):           # white on dark cells, black on light
        dark = viz.draw._luminance(image.cmap(image.norm(value))) < 0.179
        assert matplotlib.colors.to_hex(text.get_color()) == ("#ffffff" if dark else "#000000"), value
    assert {t.get_color() for t in ax.texts[:2]} == {"white", "black"}   # 1.0 is navy, 0.0 pale


def test_printed_values_use_a_typographic_minus_and_no_negative_zero():
    ax = viz.plot_attention(np.array([[-0.5, -0.001], [0.25, 0.0]]), signed=True).axes[0]
    assert [t.get_text() for t in ax.texts] == ["\u22120.50", "0.00", "0.25", "0.00"]


def test_every_position_labelled_on_small_panels_only():
    small = viz.plot_attention(np.full((12, 3), 1 / 3)).axes[0]
    assert [t.get_text() for t in small.get_yticklabels()] == [str(i) for i in range(12)]
    assert [t.get_text() for t in small.get_xticklabels()] == ["0", "1", "2"]
    assert len(small.texts) == 36
    large = viz.plot_attention(np.full((13, 3), 1 / 3)).axes[0]
    assert len(large.get_yticks()) < 13 and not large.texts             # sparse ticks, no values


def test_annotate_overrides_the_default():
    assert not viz.plot_attention(np.eye(3), annotate=False).axes[0].texts
    assert len(viz.plot_attention(np.eye(14), annotate=True).axes[0].texts) == 14 * 14
    assert not viz.plot_attention(np.eye(3), cmap="viridis").axes[0].texts          # own map: e.g. codes
    assert not viz.plot_attention(np.eye(3), size=0.3).axes[0].texts               # cells too small to read


# --- plot_pattern ---------------------------------------------------------------------------------

def test_pattern_grid_titles_carry_density():
    masks = np.tril(np.ones((5, 8), dtype=bool))[None, None].repeat(2, axis=0).repeat(3, axis=1)  # (2, 3, 5, 8)
    fig = viz.plot_pattern(masks, titles=[f"p{i}" for i in range(6)])
    assert len(fig.axes) == 6                                   # no colour bar for patterns
    assert fig.axes[4].get_title() == "p4\nnnz=15, density=0.38"
    assert fig.axes[0].images[0].get_clim() == (0.0, 1.0)
    plain = viz.plot_pattern(masks[0, 0], annotate_density=False)
    assert plain.axes[0].get_title() == ""


@pytest.mark.parametrize("mask", [np.ones((3, 4)), np.ones((3, 4), dtype=np.int8)])
def test_pattern_needs_bool(mask):
    with pytest.raises(TypeError, match=r"mask must be a boolean \(True = may attend\) array, got dtype"):
        viz.plot_pattern(mask)


def test_draw_into_subfigures():
    fig = viz.figure((8.0, 3.0))
    left, right = fig.subfigures(1, 2)
    assert viz.draw_attention(left, np.full((2, 4, 6), 0.25)).shape == (1, 2)
    assert viz.draw_pattern(right, np.eye(4, dtype=bool)).shape == (1, 1)
    assert len(fig.axes) == 4                                    # 2 panels + colour bar + 1 pattern


# --- step_through ---------------------------------------------------------------------------------

def _reveal_rows(A: np.ndarray) -> np.ndarray:
    """Frame t shows rows <= t of A, the rest NaN: (n, n, m)."""
    n = len(A)
    return np.where(np.tril(np.ones((n, n), dtype=bool))[:, :, None], A, np.nan)


def test_step_through_html_is_deterministic_and_offline(weights):
    pytest.importorskip("IPython")
    frames = _reveal_rows(weights[0, 0])                          # T = 5
    first, second = viz.step_through(frames), viz.step_through(frames)
    assert first.data == second.data
    assert first.data.count("data:image/png;base64,") == 5
    assert "new Array(5)" in first.data
    assert "font-awesome" not in first.data and 'class="fa ' not in first.data
    other = viz.step_through(frames[:4])
    assert other.data.count("data:image/png;base64,") == 4
    ids = {html.data.split('id="_anim_img', 1)[1][:32] for html in (first, other)}
    assert len(ids) == 2                                          # the id follows the content


def test_step_through_pattern_frames():
    pytest.importorskip("IPython")
    frames = np.stack([np.tril(np.ones((4, 6), dtype=bool), k) for k in range(3)])
    html = viz.step_through(frames, kind="pattern", titles=["k=0", "k=1", "k=2"], interval=200)
    assert html.data.count("data:image/png;base64,") == 3


def test_step_through_widget_redraws_on_slider(weights):
    widgets = pytest.importorskip("ipywidgets")
    box = viz.step_through(_reveal_rows(weights[0, 0]), mode="widget")
    assert isinstance(box, widgets.VBox)
    controls, image = box.children
    slider = next(w for w in controls.children if isinstance(w, widgets.IntSlider))
    assert (slider.min, slider.max) == (0, 4)
    frame_0 = bytes(image.value)
    assert frame_0.startswith(PNG_SIGNATURE)
    slider.value = 4
    assert bytes(image.value) != frame_0


def test_step_through_frames_rewrite_values_and_keep_allowed():
    frames = np.stack([np.full((3, 3), t / 10) for t in range(1, 4)])
    causal = np.tril(np.ones((3, 3), dtype=bool))
    fig, show = viz.player._frame_player(frames, None, "attention", {"allowed": causal})
    ax = fig.axes[0]
    show(2)
    assert [t.get_text() for t in ax.texts] == ["0.30", "", "", "0.30", "0.30", "", "0.30", "0.30", "0.30"]
    np.testing.assert_array_equal(np.ma.getmaskarray(ax.images[0].get_array()), ~causal)
    assert ax.get_title() == "3 / 3"


def test_step_through_widget_without_ipywidgets(monkeypatch):
    monkeypatch.setitem(sys.modules, "ipywidgets", None)         # import fails as if not installed
    with pytest.raises(ImportError, match=r"mode='widget'\) needs the ipywidgets package"):
        viz.step_through(np.zeros((2, 3, 3)), mode="widget")


@pytest.mark.parametrize(("frames", "kwargs", "error", "match"), [
    (np.zeros((2, 3, 3)), {"mode": "video"}, ValueError, r"mode must be one of \('html', 'widget'\), got 'video'"),
    (np.zeros((2, 3, 3)), {"kind": "lines"}, ValueError, "kind must be one of"),
    (np.zeros((3, 3)), {}, ValueError, r"frames must have shape \(T, n, m\).*got shape \(3, 3\)"),
    (np.zeros((2, 3, 3)), {"titles": ["only one"]}, ValueError, "titles has 1 entries but frames has T=2"),
    (np.zeros((2, 3, 3)), {"interval": 0}, ValueError, "interval must be a positive int"),
    (np.zeros((2, 3, 3)), {"kind": "pattern"}, TypeError, "frames must be a boolean"),
])
def test_step_through_rejects_bad_input(frames, kwargs, error, match):
    with pytest.raises(error, match=match):
        viz.step_through(frames, **kwargs)


# --- files and display ----------------------------------------------------------------------------

def test_save_figure_is_byte_stable(tmp_path, weights):
    first = viz.save_figure(viz.plot_attention(weights), tmp_path / "new" / "dir" / "a.png")
    second = viz.save_figure(viz.plot_attention(weights), tmp_path / "b.png")
    assert first == tmp_path / "new" / "dir" / "a.png"
    data = first.read_bytes()
    assert data.startswith(PNG_SIGNATURE)
    assert data == second.read_bytes()
    assert b"Matplotlib" not in data                             # no Software text chunk


def test_rounding_to_significant_digits():
    x = np.array([0.123456789, -1.0e-17, 1.0e-17, 0.0, np.nan, np.inf])
    np.testing.assert_array_equal(viz.stable._rounded(x), [0.123457, 0.0, 0.0, 0.0, np.nan, np.inf])
    assert not np.signbit(viz.stable._rounded(x)[1])                              # noise around 0 becomes +0.0
    np.testing.assert_array_equal(viz.stable._rounded([1234.5678, 0.00123456789]), [1234.57, 0.0])   # step 1e-2
    np.testing.assert_array_equal(viz.stable._rounded([1234.5678, 0.00123456789], relative=True), [1234.57, 0.00123457])
    # the step follows the largest value as rounded (999999.7 → 1.00000e6: step 10), so that keeps 6 digits
    np.testing.assert_array_equal(viz.stable._rounded([999999.7, 12.34]), [1000000.0, 10.0])
    assert viz.SIGNIFICANT_DIGITS == 6


def test_last_bit_differences_draw_identical_png_bytes(tmp_path):
    # 0.25 sits on a colour-level boundary of the square-root scale (√0.25 = 0.5: level 128 of 256);
    # one unit in the last place below it is level 127, another colour, unless rounded first.
    A = np.array([[0.25, 1.0], [0.0, 0.5]])
    B = A.copy()
    B[0, 0] = np.nextafter(0.25, 0.0)
    image = viz.plot_attention(A).axes[0].images[0]
    assert not np.array_equal(image.cmap(image.norm(A)), image.cmap(image.norm(B)))
    for annotate in (True, False):
        a = viz.save_figure(viz.plot_attention(A, annotate=annotate), tmp_path / "a.png").read_bytes()
        b = viz.save_figure(viz.plot_attention(B, annotate=annotate), tmp_path / "b.png").read_bytes()
        assert a == b, annotate


def test_last_bit_differences_in_a_line_plot_draw_identical_png_bytes():
    # A straight dashed line on log-log axes, as Lemma 2's MSE against m in the Performer figures:
    # without the rounding, one unit in the last place of every point moves its dashes' pixels
    # (matplotlib 3.11's Agg backend).
    def png(y) -> bytes:
        fig = viz.figure((3.0, 2.0))
        ax = fig.add_subplot()
        ax.plot(2.0 ** np.arange(2, 11), y, "--")
        ax.set(xscale="log", yscale="log")
        buffer = io.BytesIO()
        viz.stable._savefig(fig, buffer, "png")
        return buffer.getvalue()

    y = 1.3 / 2.0 ** np.arange(2, 11)
    noisy = np.nextafter(y, np.inf)
    assert np.all(noisy != y)
    assert png(y) == png(noisy)


def test_saving_rounds_every_drawn_value_in_place(tmp_path):
    fig = viz.figure((4.0, 3.0))
    left, right = fig.subfigures(1, 2)
    viz.draw_attention(left, np.full((2, 2), 1 / 3))
    ax = right.add_subplot()
    ax.plot([0.0, 1 / 3], [2 / 3, 1 / 7])
    ax.bar([0.0], [1 / 3])
    ax.fill_between([0.0, 1.0], [0.0, 0.0], [1 / 3, 1 / 3])
    ax.scatter([1 / 3], [1 / 3])
    viz.save_figure(fig, tmp_path / "sheet.png")
    np.testing.assert_array_equal(fig.axes[0].images[0].get_array(), np.full((2, 2), 0.333333))
    assert fig.axes[0].images[0].get_clim() == (0.0, 0.333333)
    np.testing.assert_array_equal(ax.lines[0].get_ydata(), [0.666667, 0.142857])
    assert ax.patches[0].get_height() == 0.333333
    assert set(np.round(ax.collections[0].get_paths()[0].vertices[:, 1], 12)) == {0.0, 0.333333}
    np.testing.assert_array_equal(ax.collections[1].get_offsets(), [[0.333333, 0.333333]])
    assert ax.dataLim.intervaly[1] == 0.666667


def test_figure_displays_as_one_png_without_pyplot(weights):
    formatters = pytest.importorskip("IPython.core.formatters")
    png = formatters.PNGFormatter()(viz.plot_attention(weights))
    assert png.startswith(PNG_SIGNATURE)


def test_viz_never_imports_pyplot():
    code = ("import sys, numpy as np, refattn.viz as viz; viz.plot_attention(np.eye(3)); "
            "viz.plot_pattern(np.eye(3, dtype=bool)); assert 'matplotlib.pyplot' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_step_through_frames_carry_no_software_version():
    # Otherwise a matplotlib upgrade would change every committed notebook's bytes.
    import base64
    import re

    pytest.importorskip("IPython")
    html = viz.step_through(np.random.default_rng(0).random((2, 3, 4))).data
    frames = [base64.b64decode(f) for f in re.findall(r"data:image/png;base64,([^\"']+)", html)]
    assert frames and not any(b"Matplotlib" in f or b"Software" in f for f in frames)


# --- round-off quantities -------------------------------------------------------------------------

def test_roundoff_draws_round_off_at_the_floor_and_rounds_the_rest():
    x = [0.0, 8.0e-15, 1.04535e-14, 5.83e-12, 4.13821e-8, 0.123456789, np.nan, np.inf]
    np.testing.assert_array_equal(viz.roundoff(x), [1e-12, 1e-12, 1e-12, 6e-12, 4.1382e-8, 0.123457, np.nan, np.inf])
    np.testing.assert_array_equal(viz.roundoff(x, below="nan")[:4], [np.nan, np.nan, np.nan, 6e-12])
    # the sign kept; steps of the floor (1e-12) up to 1e-7, where 6 significant digits take over
    np.testing.assert_array_equal(viz.roundoff([-3e-16, -0.0, -2.54e-11]), [-1e-12, 1e-12, -2.5e-11])
    assert viz.ROUNDOFF == 1e-12
    assert viz.roundoff(0.5).shape == ()


@pytest.mark.parametrize(("scale", "floor"), [(1.0, 1e-12), (7.0, 1e-11), (0.5, 1e-12), (10.0, 1e-11), (2e3, 1e-8)])
def test_roundoff_floor_is_the_power_of_ten_at_or_above_roundoff_times_scale(scale, floor):
    np.testing.assert_array_equal(viz.roundoff([0.99 * floor, floor, 23.4 * floor], scale=scale),
                                  [floor, floor, float(f"{23 * floor:.1e}")])              # steps of the floor
    assert viz.roundoff_text(0.99 * floor, scale=scale) == f"< {floor:.0e}"


def test_roundoff_turns_the_noise_between_machines_into_one_value():
    # Skyformer's Nyström error on all 32 points: 8.0e-15 with OpenBLAS' SkylakeX kernel, 1.05e-14 with
    # Haswell's; a row sum's deviation from 1: 2.2e-16 or 4.4e-16; noise of 2.5e-15 on larger values.
    eps = np.finfo(np.float64).eps
    pairs = [(7.98056e-15, 1.04535e-14), (eps, 2 * eps), (0.0, 4 * eps), (4.13821e-8, 4.13821e-8 + 2.5e-15),
             (0.487312, 0.487312 * (1 + 4 * eps))]
    for a, b in pairs:
        assert viz.roundoff(a) == viz.roundoff(b), (a, b)
        assert viz.roundoff_text(a, ".1e") == viz.roundoff_text(b, ".1e"), (a, b)


def test_roundoff_text_reads_as_a_relation_and_prints_a_minus_sign():
    assert viz.roundoff_text(8.0e-15) == "< 1e-12"
    assert viz.roundoff_text(-8.0e-15) == "> \u22121e-12"
    assert viz.roundoff_text(0.48731, ".3f") == "0.487"
    assert viz.roundoff_text(-0.0091, ".3f") == "\u22120.009"
    assert viz.roundoff_text(-0.0004, ".3f") == "0.000"                 # no negative zero
    assert viz.roundoff_text(0.18, ".2g", equals=True) == "= 0.18"
    assert viz.roundoff_text(4e-16, ".2g", equals=True) == "< 1e-12"
    assert viz.roundoff_text(0.125 + 1e-17, ".2f") == viz.roundoff_text(0.125 - 1e-17, ".2f") == "0.12"
    assert viz.roundoff_text(0.57, ".0%") == "57%"


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: viz.roundoff([1.0], scale=0.0), ValueError, "scale must be a positive finite number, got 0.0"),
    (lambda: viz.roundoff([1.0], scale=np.inf), ValueError, "scale must be a positive finite number, got inf"),
    (lambda: viz.roundoff([1.0], below="zero"), ValueError, r"below must be one of \('floor', 'nan'\), got 'zero'"),
    (lambda: viz.roundoff(["a"]), TypeError, "values must be real numbers, got dtype <U1"),
    (lambda: viz.roundoff([1 + 2j]), TypeError, "values must be real numbers, got dtype complex128"),
    (lambda: viz.roundoff_text(np.nan), ValueError, "value must be a finite real number, got nan"),
    (lambda: viz.roundoff_text(True), ValueError, "value must be a finite real number, got True"),
    (lambda: viz.roundoff_text(1.0, equals=1), TypeError, "equals must be True or False, got 1"),
])
def test_roundoff_rejects_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_shade_roundoff_marks_the_decade_below_the_floor():
    ax = viz.figure((3.0, 2.0)).add_subplot()
    ax.semilogy([1, 2, 3], viz.roundoff([0.5, 1e-3, 0.0], scale=7.0))
    assert viz.shade_roundoff(ax, scale=7.0) == 1e-11
    assert ax.get_ylim()[0] == 1e-12
    band = ax.patches[0]
    assert (band.get_y(), band.get_y() + band.get_height()) == pytest.approx((1e-12, 1e-11), rel=1e-12)
    assert band.get_label() == "round-off (< 1e-11, drawn at 1e-11)"
    ax = viz.figure((3.0, 2.0)).add_subplot()
    ax.semilogx([1e-3, 1e-12], [0, 1])
    assert viz.shade_roundoff(ax, axis="x") == 1e-12 and ax.get_xlim()[0] == 1e-13
    with pytest.raises(ValueError, match="shade_roundoff needs a log y axis, got 'linear'"):
        viz.shade_roundoff(viz.figure((3.0, 2.0)).add_subplot())


def test_round_off_drawn_through_roundoff_gives_identical_png_bytes():
    # The error of Skyformer's figure on two machines: drawn as data, the point moves by a tenth of a decade.
    def png(error) -> bytes:
        fig = viz.figure((3.0, 2.0))
        ax = fig.add_subplot()
        ax.semilogy([1.0, 2.0], [0.3, error], "o-")
        buffer = io.BytesIO()
        viz.stable._savefig(fig, buffer, "png")
        return buffer.getvalue()

    skylake, haswell = 7.98056e-15, 1.04535e-14
    assert png(skylake) != png(haswell)
    assert png(viz.roundoff(skylake)) == png(viz.roundoff(haswell))
