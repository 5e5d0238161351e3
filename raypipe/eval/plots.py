"""The paper's two inference-time analysis plots, redrawn from eval sweeps (PNG, headless).

- Figure 3c: retrieval frequency vs accuracy as the adaptive threshold δ varies, one line per set;
- Figure 3b: the effect of the IsSup weight, here on accuracy and on the mean s_IsSup of outputs
  (the support the weight buys; the paper shows citation precision and MAUVE on ASQA).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display on cluster nodes; must precede pyplot
import matplotlib.pyplot as plt  # noqa: E402

#: one sweep point: the swept value and the metrics measured there
Point = dict[str, float | None]


def plot_threshold_sweep(points: dict[str, list[Point]], path: str | Path) -> Path:
    """`points[set]`: dicts with threshold, retrieval_frequency and accuracy."""
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for name, rows in sorted(points.items()):
        rows = sorted(rows, key=lambda r: r["threshold"])
        xs = [100 * r["retrieval_frequency"] for r in rows]
        ys = [100 * r["accuracy"] for r in rows]
        ax.plot(xs, ys, marker="o", label=name)
        for r, x, y in zip(rows, xs, ys, strict=True):
            ax.annotate(f"δ={r['threshold']:g}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.set(xlabel="retrieval frequency (%)", ylabel="accuracy (%)", xlim=(-5, 105), ylim=(-5, 105),
           title="Adaptive retrieval threshold: frequency vs accuracy")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_weight_sweep(points: dict[str, list[Point]], path: str | Path) -> Path:
    """`points[set]`: dicts with w_is_sup, accuracy and is_sup (None when nothing was retrieved)."""
    fig, (acc_ax, sup_ax) = plt.subplots(1, 2, figsize=(9, 4))
    for name, rows in sorted(points.items()):
        rows = sorted(rows, key=lambda r: r["w_is_sup"])
        acc_ax.plot([r["w_is_sup"] for r in rows], [100 * r["accuracy"] for r in rows], marker="o", label=name)
        with_sup = [r for r in rows if r["is_sup"] is not None]
        sup_ax.plot([r["w_is_sup"] for r in with_sup], [r["is_sup"] for r in with_sup], marker="s", label=name)
    acc_ax.set(xlabel="IsSup weight", ylabel="accuracy (%)", ylim=(-5, 105), title="Accuracy")
    sup_ax.set(xlabel="IsSup weight", ylabel="mean s_IsSup of chosen segments", ylim=(-0.05, 1.05), title="Support")
    for ax in (acc_ax, sup_ax):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Effect of the IsSup weight (soft constraint)")
    return _save(fig, path)


def _save(fig: plt.Figure, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
