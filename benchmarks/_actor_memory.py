"""The memory of augmentation's model actors, shard by shard (issue 60: "memory that stays flat").

A long augmentation's actors were seen to grow ~0.3 GiB per hour; whether they do is read here from
outside, as Ray's memory monitor sees them: every few seconds the resident bytes of each process
whose title names the actor class (`StepRunner`, raypipe/augment/pipeline.py), its engine's child
processes included (`raypipe.heap.tree_rss`), and each time the count of shards written grows, one row
with every actor's figure. `growth` compares each actor's mean over the first tenth of those rows with
its mean over the last tenth, for the actors in both (a restarted actor starts small and would hide a
leak), and `trend_mib_per_hour` fits each actor's slope.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks._common import PeriodicSampler

#: the class name in the title Ray gives an actor of the pool (`ray::MapWorker(MapBatches(StepRunner))`)
ACTOR_TITLE = "StepRunner"


def actor_rss(title: str = ACTOR_TITLE) -> dict[int, int]:
    """pid -> resident bytes (with descendants) of every Ray worker process on this machine whose title
    names `title`."""
    import psutil

    from raypipe.heap import tree_rss

    found = {}
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if cmdline.startswith("ray::") and title in cmdline:
            found[proc.info["pid"]] = tree_rss(proc.info["pid"])
    return found


def _steady(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows without the pool's last ones, taken while it winds down (fewer actors than at the first
    row, the one left trimmed after its last batch)."""
    end = len(rows)
    while end > 1 and len(rows[end - 1]["rss_mib"]) < len(rows[0]["rss_mib"]):
        end -= 1
    return rows[:end]


def _mean(rows: list[dict[str, Any]], actor: str) -> float:
    return sum(r["rss_mib"][actor] for r in rows) / len(rows)


def growth(rows: list[dict[str, Any]]) -> float | None:
    """The largest growth among the actors present in the first and the last tenth of the rows (three
    rows at least): the mean RSS over the last tenth over the mean over the first, less 1. Means over a
    tenth, not single rows: an actor's RSS swings by a tenth from one batch to the next with the lengths
    of its rows. A restarted actor starts small and would hide a leak: it is in one tenth only. None
    without six rows or an actor in both tenths."""
    rows = _steady(rows)
    n = max(3, len(rows) // 10)
    if len(rows) < 2 * n:
        return None
    first, last = rows[:n], rows[-n:]
    actors = [a for a in first[0]["rss_mib"] if all(a in r["rss_mib"] for r in first + last)]
    if not actors:
        return None
    return round(max(_mean(last, a) / _mean(first, a) - 1 for a in actors), 4)


def trend_mib_per_hour(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Per actor in three rows or more, the least-squares slope of its RSS over time, in MiB per hour: a
    leak is a slope that a longer run keeps; a swing with the rows is not."""
    import statistics

    rows = _steady(rows)
    slopes = {}
    for actor in dict.fromkeys(a for r in rows for a in r["rss_mib"]):
        mine = [r for r in rows if actor in r["rss_mib"]]
        if len(mine) >= 3:
            fit = statistics.linear_regression([r["t_s"] for r in mine], [r["rss_mib"][actor] for r in mine])
            slopes[actor] = round(fit.slope * 3600, 1)
    return slopes


class ActorMemory(PeriodicSampler):
    """Samples the actors every `every` seconds while the block runs; `rows` holds one row per shard
    count seen: `shards`, `t_s` (since the start) and `rss_mib` by actor pid."""

    def __init__(self, out_dir: Path, every: float = 2.0):
        super().__init__(every)
        self.data = out_dir / "data"
        self.rows: list[dict[str, Any]] = []

    def _shards(self) -> int:
        return len(list(self.data.glob("*.parquet"))) if self.data.is_dir() else 0

    def sample(self) -> None:
        shards = self._shards()
        if shards and (not self.rows or shards > self.rows[-1]["shards"]):
            rss = actor_rss()
            if rss:
                self.rows.append({"shards": shards, "t_s": round(self.elapsed(), 1),
                                  "rss_mib": {pid: round(b / 2**20, 1) for pid, b in sorted(rss.items())}})
