"""The threshold plot (Self-RAG Fig. 3c): δ labels never overprint each other or the markers."""

from __future__ import annotations

import itertools

import matplotlib.pyplot as plt
from PIL import Image

from raypipe.eval.plots import _coincident, _delta_label, _overlap_area, place_labels, plot_threshold_sweep

THRESHOLDS = [0.0, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0]


def _sweep(freqs, accs):
    return [{"threshold": t, "retrieval_frequency": f, "accuracy": a} for t, f, a in zip(THRESHOLDS, freqs, accs, strict=True)]


def test_coincident_points_share_one_label():
    groups = _coincident([100, 100.2, 100, 40], [30, 30, 30, 10], [0.0, 0.2, 0.5, 1.0])
    assert list(groups.values()) == [[0.0, 0.2, 0.5], [1.0]]
    assert _delta_label([0.0, 0.2, 0.5]) == "δ=0, 0.2, 0.5"
    assert _delta_label(THRESHOLDS) == "δ=0–1"


def test_crowded_labels_do_not_overlap_and_stay_inside_the_axes():
    fig, ax = plt.subplots(figsize=(5, 4))
    ax.set(xlim=(-5, 105), ylim=(-5, 105))
    # twelve labels around two nearly coincident spots, the case that overprinted before
    labels = [(100 - i % 2, 40 + 0.5 * i, f"δ={i / 10:g}, long label {i}", "C0") for i in range(12)]
    fig.tight_layout()
    notes = place_labels(ax, labels)
    renderer = fig.canvas.get_renderer()
    boxes = [n.get_window_extent(renderer) for n in notes]
    frame = ax.get_window_extent(renderer)
    assert len(boxes) == 12
    for a, b in itertools.combinations(boxes, 2):
        assert _overlap_area(a, [[b.x0, b.y0, b.x1, b.y1]]) == 0, (a, b)
    markers = ax.transData.transform([(x, y) for x, y, _, _ in labels])
    assert not any(b.contains(mx, my) for b in boxes for mx, my in markers)
    assert all(frame.x0 <= b.x0 and b.x1 <= frame.x1 and frame.y0 <= b.y0 and b.y1 <= frame.y1 for b in boxes)
    plt.close(fig)


def test_threshold_plot_draws_sets_without_accuracy(tmp_path):
    points = {"qa": _sweep([1, 1, 1, 0.96, 0.8, 0.4, 0], [0.4, 0.4, 0.4, 0.38, 0.3, 0.16, 0.04]),
              "noret": _sweep([1, 0.9, 0.7, 0.2, 0.05, 0, 0], [None] * 7)}
    path = plot_threshold_sweep(points, tmp_path / "t.png")
    with Image.open(path) as image:
        assert image.size[0] > image.size[1] > 300


def test_weight_plot_skips_sets_without_accuracy(tmp_path):
    from raypipe.eval.plots import plot_weight_sweep

    points = {"qa": [{"w_is_sup": w, "accuracy": 0.3, "is_sup": 0.5} for w in (0.0, 1.0)],
              "noret": [{"w_is_sup": w, "accuracy": None, "is_sup": None} for w in (0.0, 1.0)]}
    assert plot_weight_sweep(points, tmp_path / "w.png").is_file()


def _says_nothing(ax) -> bool:
    return any(t.get_text().startswith("nothing to show") for t in ax.texts)


def test_a_panel_with_nothing_to_draw_says_so_instead_of_drawing_empty_axes():
    from raypipe.eval.plots import weight_sweep_figure

    # issue 31's generator never wrote IsSup: every support value is None, at every weight
    no_support = {name: [{"w_is_sup": w, "accuracy": 0.42, "is_sup": None} for w in (0.0, 1.0)]
                  for name in ("heldout_qa", "heldout_fact")}
    fig = weight_sweep_figure(no_support)
    acc_ax, sup_ax = fig.axes
    assert len(acc_ax.lines) == 2 and not _says_nothing(acc_ax) and acc_ax.get_legend() is not None
    assert not sup_ax.lines and _says_nothing(sup_ax) and sup_ax.get_legend() is None
    assert "IsSup" in next(t.get_text() for t in sup_ax.texts) and sup_ax.get_title() == "Support"
    plt.close(fig)
    with_support = {"heldout_qa": [{"w_is_sup": w, "accuracy": 0.4, "is_sup": s} for w, s in ((0.0, 0.2), (1.0, 0.6))]}
    fig = weight_sweep_figure(with_support)
    assert not any(_says_nothing(ax) for ax in fig.axes) and len(fig.axes[1].lines) == 1
    plt.close(fig)


def test_threshold_and_robustness_panels_without_values_say_so():
    from raypipe.eval.plots import robustness_figure, threshold_sweep_figure

    fig, acc_ax, labels = threshold_sweep_figure({"noret": _sweep([1, 0.9, 0.7, 0.2, 0.05, 0, 0], [None] * 7)})
    freq_ax = fig.axes[0]
    assert _says_nothing(acc_ax) and not labels and not _says_nothing(freq_ax)
    plt.close(fig)
    robustness = {"curves": {"qa": {"selfrag": [{"rate": r, "value": None} for r in (0.0, 0.5)]},
                             "fact": {"selfrag": [{"rate": r, "value": 0.5} for r in (0.0, 0.5)]}},
                  "no_retrieval": {}, "metric": {"qa": "accuracy", "fact": "accuracy"}}
    fig = robustness_figure(robustness)
    by_title = {ax.get_title(): ax for ax in fig.axes}
    assert _says_nothing(by_title["qa"]) and not by_title["qa"].lines
    assert not _says_nothing(by_title["fact"]) and len(by_title["fact"].lines) == 1
    plt.close(fig)
