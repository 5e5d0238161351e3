"""How the augmentation steps are grouped into Ray Data actor pools."""

from __future__ import annotations

import logging

import numpy as np

from raypipe.augment.pipeline import AugmentSections, StepRunner, actor_pool, algorithm_steps, step_groups
from raypipe.settings.augment import AugmentConfig
from raypipe.settings.data import LimitsConfig, SegmentationConfig
from raypipe.settings.retrieval import RetrievalConfig
from raypipe.settings.teachers import TeacherConfig


def test_fused_layout_runs_every_step_in_one_actor():
    steps = algorithm_steps(AugmentConfig(), top_k=3)
    assert step_groups(steps, "fused") == [steps]


def test_staged_layout_gives_each_run_of_one_model_its_own_pool():
    steps = algorithm_steps(AugmentConfig(), top_k=3)
    groups = step_groups(steps, "staged")
    assert [[kind for kind, _ in g] for g in groups] == [
        ["critic", "critic"], ["split_many"], ["retriever"], ["critic"], ["retriever"], ["critic"]]
    assert [step for g in groups for step in g] == steps  # nothing lost or reordered


def test_each_model_actor_asks_ray_for_its_own_memory_and_names_its_setting():
    fused = AugmentConfig(workers=3, worker_memory_gib=2.5)
    assert actor_pool(fused, {"critic", "retriever", "split_many"}) == (
        3, {"num_cpus": 0.4, "memory": int(2.5 * 2**30)}, (int(2.5 * 2**30), "augment.worker_memory_gib"))
    staged = AugmentConfig(layout="staged", critic_actors=2, critic_memory_gib=3.0, retriever_memory_gib=0.5)
    assert actor_pool(staged, {"critic"}) == (
        2, {"num_cpus": staged.critic_cpus, "memory": 3 * 2**30}, (3 * 2**30, "augment.critic_memory_gib"))
    _, resources, request = actor_pool(staged, {"retriever"})
    assert resources["memory"] == 2**29 and request == (2**29, "augment.retriever_memory_gib")
    _, resources, request = actor_pool(staged, {"split_many"})
    assert "memory" not in resources and request is None


def test_a_model_actor_warns_after_a_batch_once_past_its_request(caplog):
    batch = {"id": np.array(["a"], dtype=object)}
    sections = AugmentSections(AugmentConfig(), RetrievalConfig(), SegmentationConfig(), LimitsConfig(),
                               TeacherConfig())
    with caplog.at_level(logging.WARNING, logger="raypipe.heap"):
        StepRunner([], sections)(batch)  # the splitter's pool: nothing asked, nothing watched
        assert not caplog.records
        # any process holds more than the 1 KiB asked here
        assert StepRunner([], sections, memory=(1024, "augment.worker_memory_gib"))(batch) is batch
    assert len(caplog.records) == 1 and "augment.worker_memory_gib" in caplog.text
