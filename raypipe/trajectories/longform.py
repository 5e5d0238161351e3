"""The long-form eval set of Self-Reasoning (§"Evaluation Metrics", long-form QA): biographies of the
world's held-out people, never in any training instance, so their facts are only in the passages.

Each row is a long-form row of `raypipe eval` (`instruction`, `facts`: scored there by FactScore)
with `answers` = the person's fact values and the ground truth the citation metrics need
(`sentences` with their supporting passages and facts, `relevant_passages`, `entity`); the eval
scores it with `raypipe.eval.longform`. The world writes the same rows as its `heldout_longform`
split; the trajectory job writes a set of its own size and seed beside its training data.
"""

from __future__ import annotations

import random
from pathlib import Path

from raypipe.data.io import write_jsonl
from raypipe.settings.data import WorldConfig

LONGFORM_SET = "heldout_longform.jsonl"


def write_longform_set(world_cfg: WorldConfig, path: str | Path, n: int, seed: int = 0) -> Path:
    """`n` biography questions about distinct held-out people (seeded order), rows as the world's
    own `heldout_longform` split writes them."""
    from raypipe.data.world_entities import World
    from raypipe.data.world_tasks import heldout_longform

    world = World(world_cfg)
    people = world.heldout_people()
    rng = random.Random(seed)
    rng.shuffle(people)
    rows = [heldout_longform(world, rng, people[j], f"heldout_longform-{j:05d}") for j in range(min(n, len(people)))]
    return write_jsonl(rows, path)
