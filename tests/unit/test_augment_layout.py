"""How the augmentation steps are grouped into Ray Data actor pools."""

from __future__ import annotations

from raypipe.augment.pipeline import algorithm_steps, step_groups
from raypipe.settings.augment import AugmentConfig


def test_fused_layout_runs_every_step_in_one_actor():
    steps = algorithm_steps(AugmentConfig(), top_k=3)
    assert step_groups(steps, "fused") == [steps]


def test_staged_layout_gives_each_run_of_one_model_its_own_pool():
    steps = algorithm_steps(AugmentConfig(), top_k=3)
    groups = step_groups(steps, "staged")
    assert [[kind for kind, _ in g] for g in groups] == [
        ["critic", "critic"], ["split_many"], ["retriever"], ["critic"], ["retriever"], ["critic"]]
    assert [step for g in groups for step in g] == steps  # nothing lost or reordered
