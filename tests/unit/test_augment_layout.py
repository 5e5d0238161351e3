"""How the augmentation steps are grouped into Ray Data actor pools."""

from __future__ import annotations

from raypipe.augment.pipeline import actor_pool, algorithm_steps, step_groups
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


def test_each_model_actor_asks_ray_for_its_own_memory():
    fused = AugmentConfig(workers=3, worker_memory_gib=2.5)
    assert actor_pool(fused, {"critic", "retriever", "split_many"}) == (3, {"num_cpus": 0.4, "memory": int(2.5 * 2**30)})
    staged = AugmentConfig(layout="staged", critic_actors=2, critic_memory_gib=3.0, retriever_memory_gib=0.5)
    assert actor_pool(staged, {"critic"}) == (2, {"num_cpus": staged.critic_cpus, "memory": 3 * 2**30})
    assert actor_pool(staged, {"retriever"})[1]["memory"] == 2**29
    assert "memory" not in actor_pool(staged, {"split_many"})[1]
