"""The papers' inference-time analysis plots, redrawn from eval sweeps (PNG, headless).

- Figure 3c: retrieval frequency vs accuracy as the adaptive threshold δ varies, one line per set,
  beside retrieval frequency against δ (with a no-retrieval set, the trade-off: retrieval that stops
  on instructions that need none and goes on where knowledge is asked for);
- Figure 3b: the effect of the IsSup weight, here on accuracy and on the mean s_IsSup of outputs
  (the support the weight buys; the paper shows citation precision and MAUVE on ASQA);
- CRAG's Figure 3: each method's score as accurate retrieval results are removed, against no
  retrieval (raypipe.eval.robustness).

A panel with nothing to draw (no judged item, no IsSup score at any weight) says so in words: empty
axes read as a plotting bug, and the reason is the finding (issue 31's generator never wrote IsSup).
Each plot is a `*_figure` function (what the tests inspect) and a `plot_*` that saves it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib
import numpy as np

matplotlib.use("Agg")  # no display on cluster nodes; must precede pyplot
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.transforms import Bbox  # noqa: E402

#: one sweep point: the swept value and the metrics measured there
Point = dict[str, float | None]
_MARKERS = ("o", "s", "^", "D", "v", "P")


def _nothing_to_show(ax: plt.Axes, why: str) -> None:
    """The panel keeps its title and says why it is empty instead of drawing bare axes."""
    ax.set_xticks([])
    ax.set_yticks([])
    ax.text(0.5, 0.5, f"nothing to show:\n{why}", transform=ax.transAxes, ha="center", va="center",
            fontsize=9, color="0.35", wrap=True)


def _finish(ax: plt.Axes, why_empty: str, **legend: Any) -> None:
    """Grid and legend on a panel with lines; the reason on one without."""
    if not ax.lines:
        _nothing_to_show(ax, why_empty)
        return
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, **legend)


def plot_threshold_sweep(points: dict[str, list[Point]], path: str | Path) -> Path:
    """Fig. 3c and the retrieval frequency per set (`threshold_sweep_figure`), saved to `path`."""
    fig, acc_ax, labels = threshold_sweep_figure(points)
    fig.tight_layout()
    place_labels(acc_ax, labels)
    return _save(fig, path, layout=False)


def threshold_sweep_figure(points: dict[str, list[Point]]) -> tuple[plt.Figure, plt.Axes, list[tuple[float, float, str, str]]]:
    """`points[set]`: dicts with threshold, retrieval_frequency and accuracy (None for a set with no
    judged item, e.g. creative instructions only).

    Left: retrieval frequency per set as δ varies; with a set of instructions that need no retrieval
    beside the knowledge sets, this is where adaptivity shows (retrieval should stop on the one and
    go on on the others). Right: Fig. 3c, accuracy against retrieval frequency, each point labelled
    by its δ (coincident points share one label; the labels are returned, to be placed once the
    figure's layout is final)."""
    fig, (freq_ax, acc_ax) = plt.subplots(1, 2, figsize=(10, 4.2))
    labels: list[tuple[float, float, str, str]] = []
    for k, (name, rows) in enumerate(sorted(points.items())):
        rows = sorted(rows, key=lambda r: r["threshold"])
        # shrinking markers of different shapes keep sets that coincide (a flat sweep) visible
        style = {"marker": _MARKERS[k % len(_MARKERS)], "markersize": max(3.0, 9.0 - 2 * k), "label": name}
        line, = freq_ax.plot([r["threshold"] for r in rows], [100 * r["retrieval_frequency"] for r in rows], **style)
        judged = [r for r in rows if r["accuracy"] is not None]
        if not judged:
            continue
        xs = [100 * r["retrieval_frequency"] for r in judged]
        ys = [100 * r["accuracy"] for r in judged]
        acc_ax.plot(xs, ys, color=line.get_color(), **style)
        for (x, y), deltas in _coincident(xs, ys, [r["threshold"] for r in judged]).items():
            labels.append((x, y, _delta_label(deltas), line.get_color()))
    freq_ax.set(xlabel="threshold δ (retrieve when p([Retrieval]) > δ)", ylabel="retrieval frequency (%)",
                ylim=(-5, 105), title="Retrieval frequency by eval set")
    acc_ax.set(xlabel="retrieval frequency (%)", ylabel="accuracy (%)", xlim=(-5, 105), ylim=(-5, 105),
               title="Frequency vs accuracy (Self-RAG Fig. 3c)")
    _finish(freq_ax, "no sweep point", loc="best")
    _finish(acc_ax, "no eval set has a judged item", loc="best")
    return fig, acc_ax, labels


def plot_weight_sweep(points: dict[str, list[Point]], path: str | Path) -> Path:
    """Fig. 3b's analogue (`weight_sweep_figure`), saved to `path`."""
    return _save(weight_sweep_figure(points), path)


def weight_sweep_figure(points: dict[str, list[Point]]) -> plt.Figure:
    """`points[set]`: dicts with w_is_sup, accuracy and is_sup (None when no cited segment has an
    IsSup score: nothing retrieved, or the generator wrote no IsSup token)."""
    fig, (acc_ax, sup_ax) = plt.subplots(1, 2, figsize=(9, 4))
    for name, rows in sorted(points.items()):
        rows = sorted(rows, key=lambda r: r["w_is_sup"])
        judged = [r for r in rows if r["accuracy"] is not None]  # a set of creative instructions has none
        with_sup = [r for r in rows if r["is_sup"] is not None]
        if judged:
            acc_ax.plot([r["w_is_sup"] for r in judged], [100 * r["accuracy"] for r in judged], marker="o", label=name)
        if with_sup:
            sup_ax.plot([r["w_is_sup"] for r in with_sup], [r["is_sup"] for r in with_sup], marker="s", label=name)
    acc_ax.set(xlabel="IsSup weight", ylabel="accuracy (%)", ylim=(-5, 105), title="Accuracy")
    sup_ax.set(xlabel="IsSup weight", ylabel="mean s_IsSup of chosen segments", ylim=(-0.05, 1.05), title="Support")
    _finish(acc_ax, "no eval set has a judged item")
    _finish(sup_ax, "no cited segment has an IsSup score at any\nweight (nothing retrieved, or the\ngenerator wrote no IsSup token)")
    fig.suptitle("Effect of the IsSup weight (soft constraint)")
    return fig


def plot_robustness(robustness: dict[str, Any], path: str | Path) -> Path:
    """CRAG Fig. 3 (`robustness_figure`), saved to `path`."""
    return _save(robustness_figure(robustness), path)


def robustness_figure(robustness: dict[str, Any]) -> plt.Figure:
    """CRAG Fig. 3, one panel per eval set: each method's score (`robustness["curves"][set][method]`:
    rate and value) against the share of accurate retrieval results removed, and a dashed horizontal
    line for each no-retrieval variant (`robustness["no_retrieval"][set]`)."""
    sets = sorted(robustness["curves"])
    fig, axes = plt.subplots(1, max(1, len(sets)), figsize=(4.6 * max(1, len(sets)), 4), squeeze=False)
    for ax, name in zip(axes[0], sets, strict=False):
        for k, (method, points) in enumerate(sorted(robustness["curves"][name].items())):
            drawn = [p for p in points if p["value"] is not None]
            if drawn:
                ax.plot([100 * p["rate"] for p in drawn], [100 * p["value"] for p in drawn],
                        marker=_MARKERS[k % len(_MARKERS)], label=method)
        for k, (variant, value) in enumerate(sorted(robustness["no_retrieval"].get(name, {}).items())):
            if value is not None:
                ax.axhline(100 * value, color="0.4", linestyle=("--", ":", "-.")[k % 3],
                           label=f"{variant} (no retrieval)")
        metric = "FactScore" if robustness["metric"][name] == "factscore" else "accuracy"
        ax.set(xlabel="accurate retrieval results removed (%)", ylabel=f"{metric} (%)", xlim=(-5, 105),
               ylim=(-5, 105), title=name)
        _finish(ax, f"no {metric} at any removal rate", loc="best")
    if not sets:
        _finish(axes[0][0], "no eval set with gold passages to remove")
    fig.suptitle("Robustness to retrieval performance (CRAG Fig. 3)")
    return fig


def _coincident(xs: list[float], ys: list[float], deltas: list[float]) -> dict[tuple[float, float], list[float]]:
    """Sweep points that land on the same spot (to 0.5 points), with all their δ values."""
    groups: dict[tuple[float, float], list[float]] = {}
    for x, y, d in zip(xs, ys, deltas, strict=True):
        key = next((k for k in groups if abs(k[0] - x) < 0.5 and abs(k[1] - y) < 0.5), (x, y))
        groups.setdefault(key, []).append(d)
    return groups


def _delta_label(deltas: list[float]) -> str:
    deltas = sorted(deltas)
    if len(deltas) > 3:
        return f"δ={deltas[0]:g}–{deltas[-1]:g}"
    return "δ=" + ", ".join(f"{d:g}" for d in deltas)


#: label offsets tried in turn (points from the marker; a label reads rightwards from a positive dx,
#: leftwards from a negative one, and sits above a positive dy, below a negative one): beside the
#: marker first, then stepping up and down by a line
_OFFSETS = sorted(((dx, dy) for dx in (5, -5, 20, -20) for dy in (*range(3, 84, 9), *range(-3, -84, -9))),
                  key=lambda o: (abs(o[0]) > 5, abs(o[1]), o[0] < 0, o[1] < 0))
#: an overlap with another label or a marker costs this much more than one with a line
_HARD = 1000.0


def place_labels(ax: plt.Axes, labels: list[tuple[float, float, str, str]]) -> list[Any]:
    """Annotate (x, y, text, color) points so no two labels overlap, no label covers a labelled
    marker, labels avoid the plotted lines where they can, and each stays inside the axes: each
    label takes the first offset that is free (greedy, in the order given), or the one that costs
    least. Call after the figure's layout is final (boxes are measured in display space)."""
    renderer = ax.figure.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    radius = 5 * ax.figure.dpi / 72
    hard = [[px - radius, py - radius, px + radius, py + radius]
            for px, py in (ax.transData.transform([(x, y) for x, y, _, _ in labels]) if labels else [])]
    soft = _line_boxes(ax)
    annotations = []
    for x, y, text, color in labels:
        best = None
        for dx, dy in _OFFSETS:
            note = ax.annotate(text, (x, y), textcoords="offset points", xytext=(dx, dy), fontsize=7, color=color,
                               ha="left" if dx >= 0 else "right", va="bottom" if dy >= 0 else "top")
            box = note.get_window_extent(renderer)
            inside = frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
            cost = _HARD * _overlap_area(box, hard) + _overlap_area(box, soft) + (0 if inside else 1e9)
            if best is None or cost < best[0]:
                if best is not None:
                    best[1].remove()
                best = (cost, note, box)
            else:
                note.remove()
            if cost == 0:
                break
        assert best is not None
        hard.append([best[2].x0, best[2].y0, best[2].x1, best[2].y1])
        annotations.append(best[1])
    return annotations


def _line_boxes(ax: plt.Axes, step: float = 3.0) -> list[list[float]]:
    """Small boxes every `step` pixels along the axes' plotted lines (obstacles for labels)."""
    boxes = []
    for line in ax.get_lines():
        xy = ax.transData.transform(line.get_xydata())
        for (x0, y0), (x1, y1) in zip(xy[:-1], xy[1:], strict=True):
            n = max(1, int(np.hypot(x1 - x0, y1 - y0) / step))
            for t in np.linspace(0.0, 1.0, n + 1):
                px, py = x0 + t * (x1 - x0), y0 + t * (y1 - y0)
                boxes.append([px - 1.0, py - 1.0, px + 1.0, py + 1.0])
    return boxes


def _overlap_area(box: Bbox, others: list[list[float]]) -> float:
    """Total area `box` shares with each of `others` ([x0, y0, x1, y1] rows), in square pixels."""
    if not others:
        return 0.0
    arr = np.asarray(others)
    width = np.minimum(box.x1, arr[:, 2]) - np.maximum(box.x0, arr[:, 0])
    height = np.minimum(box.y1, arr[:, 3]) - np.maximum(box.y0, arr[:, 1])
    return float(np.sum(np.clip(width, 0, None) * np.clip(height, 0, None)))


def _save(fig: plt.Figure, path: str | Path, layout: bool = True) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if layout:
        fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
