"""The memory of augmentation's model actors, shard by shard (issue 60: "memory that stays flat").

A long augmentation's actors were seen to grow ~0.3 GiB per hour; whether they do is read here from
outside, as Ray's memory monitor sees them: every few seconds the resident bytes of each process
whose title names the actor class (`StepRunner`, raypipe/augment/pipeline.py), its engine's child
processes included (`raypipe.heap.tree_rss`), and each time the count of shards written grows, one row
with every actor's figure. `growth` compares each actor's row at the first shard with its row at the
last, for the actors alive at both (a restarted actor starts small and would hide a leak).
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


def growth(rows: list[dict[str, Any]]) -> float | None:
    """The largest last-shard over first-shard RSS, less 1, among the actors in both rows; None
    without two rows or a common actor."""
    if len(rows) < 2:
        return None
    first, last = rows[0]["rss_mib"], rows[-1]["rss_mib"]
    both = [pid for pid in first if pid in last and first[pid] > 0]
    return round(max(last[pid] / first[pid] - 1 for pid in both), 4) if both else None


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
