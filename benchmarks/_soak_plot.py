"""The soak's per-minute figures as one PNG (docs/results/soak.png): requests/s, p50/p99 latency, mean
RSS per replica and replica counts per deployment, each kill marked on every panel.

matplotlib, which the project already depends on for the eval's plots (raypipe/eval/plots.py), headless.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display where benchmarks run; must precede pyplot
import matplotlib.pyplot as plt  # noqa: E402


def soak_figure(result: dict[str, Any]) -> plt.Figure:
    """Four panels over the minutes of `result` (a soak.json), a dashed line at each kill. Replica counts
    show the most (what the autoscaler added) and the fewest (what a kill took) seen in each minute."""
    rows = result["minutes"]
    minute_s = result["plan"]["minute_s"]
    x = [row["minute"] + 0.5 for row in rows]  # a row covers [minute, minute + 1)
    deployments = sorted({d for row in rows for d in row["replicas"]})
    fig, (rps, latency, memory, count) = plt.subplots(4, 1, figsize=(8, 10), sharex=True)
    rps.plot(x, [row["rps"] for row in rows], marker="o", label="answered")
    rps.axhline(result["rate_rps"], color="0.5", linewidth=0.8, label="offered")
    rps.set_ylabel("requests/s")
    for q in ("p50", "p99"):
        latency.plot(x, [row[f"{q}_ms"] for row in rows], marker="o", label=q)
    latency.set_ylabel("latency (ms)")
    for d in deployments:
        memory.plot(x, [row["replica_rss_mib"].get(d) for row in rows], marker="o", label=d)
        most = count.step(x, [row["replicas"].get(d, {}).get("max", 0) for row in rows], where="mid", label=d)
        count.step(x, [row["replicas"].get(d, {}).get("min", 0) for row in rows], where="mid", linestyle=":",
                   color=most[0].get_color())
    memory.set_ylabel("RSS per replica (MiB)")
    count.set_ylabel("replicas (most; dotted: fewest)")
    count.yaxis.get_major_locator().set_params(integer=True)
    count.set_xlabel(f"minute ({minute_s:g} s each)")
    for ax in (rps, latency, memory, count):
        for kill in result["kills"]:
            ax.axvline(kill["at_s"] / minute_s, color="tab:red", linestyle="--", linewidth=0.9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    kills = ", ".join(f"{k['kill']} killed at minute {k['at_s'] / minute_s:.1f}" for k in result["kills"])
    fig.suptitle(f"soak at {result['rate_rps']:g} requests/s ({result['engine']} engine): {kills}", fontsize=10)
    fig.tight_layout()
    return fig


def plot_soak(soak_json: Path, out: Path) -> Path:
    fig = soak_figure(json.loads(soak_json.read_text()))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
