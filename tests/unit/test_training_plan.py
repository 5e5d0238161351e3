"""Batch geometry and the DeepSpeed config the training loop is given."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from raypipe.config import load_config
from raypipe.errors import ConfigError
from raypipe.settings.training import ModelTrainConfig
from raypipe.training.data import StepPlan, plan_steps
from raypipe.training.deepspeed_config import fill_deepspeed_config

REPO = Path(__file__).resolve().parents[2]


def test_step_plan_splits_rows_equally_and_drops_partial_batches():
    # 1003 rows over 2 workers: 501 each; micro 8 -> 62 micro-batches; accum 4 -> 15 steps (60 used)
    plan = StepPlan(rows=1003, num_workers=2, micro_batch_size=8, grad_accum=4)
    assert plan.global_batch == 64
    assert plan.steps_per_epoch == 15
    assert plan.micro_batches_per_epoch == 60
    assert plan.rows_unused_per_epoch == 1003 - 15 * 64
    assert plan.total_steps(3) == 45
    assert plan.total_steps(0.1) == 2  # a fraction of an epoch rounds up


def test_too_little_data_for_one_global_batch_is_a_config_error():
    with pytest.raises(ConfigError, match="do not fill one global batch of 64"):
        plan_steps(63, num_workers=2, micro_batch_size=8, grad_accum=4, data="d")


def test_repo_zero3_template_is_filled_from_the_training_config():
    template = json.loads((REPO / "configs" / "deepspeed" / "zero3.json").read_text())
    tc = ModelTrainConfig(num_workers=4, micro_batch_size=2, grad_accum=16, grad_clip=0.5, zero_stage=3)
    ds = fill_deepspeed_config(template, tc, bf16=True)
    assert ds["train_batch_size"] == 128  # Self-RAG App. B.1: batch 128
    assert ds["train_micro_batch_size_per_gpu"] == 2
    assert ds["gradient_accumulation_steps"] == 16
    assert ds["gradient_clipping"] == 0.5
    assert ds["bf16"] == {"enabled": True}
    assert ds["zero_optimization"]["stage"] == 3
    assert "optimizer" not in ds
    assert "auto" not in json.dumps(ds)
    assert template["train_batch_size"] == "auto"  # the template itself is untouched


def test_a_hard_coded_value_that_disagrees_is_refused():
    with pytest.raises(ConfigError, match="gradient_accumulation_steps is 8"):
        fill_deepspeed_config({"gradient_accumulation_steps": 8}, ModelTrainConfig(grad_accum=2), bf16=False)
    agreeing = fill_deepspeed_config({"gradient_accumulation_steps": 2}, ModelTrainConfig(grad_accum=2), bf16=False)
    assert agreeing["gradient_accumulation_steps"] == 2


def test_an_optimizer_block_is_refused():
    with pytest.raises(ConfigError, match="optimizer"):
        fill_deepspeed_config({"optimizer": {"type": "AdamW"}}, ModelTrainConfig(), bf16=False)


def test_overriding_one_generator_key_keeps_the_generator_defaults():
    generator = load_config(None, ["training.generator.num_workers=4"]).training.generator
    assert generator.num_workers == 4
    assert generator.stages[0].mask == ["prompt", "paragraph"]  # Eq. 2, not the critic's mask
    assert generator.data.endswith("gen_data/data")


def test_a_max_length_beyond_the_base_models_positions_fails_before_any_ray_work(tiny_model_dir, tmp_path):
    import ray

    from raypipe.jobs.train import run_train

    positions = json.loads((tiny_model_dir / "config.json").read_text())["max_position_embeddings"]
    cfg = load_config(None, [f"training.generator.base_model={tiny_model_dir}", f"training.generator.out_dir={tmp_path}",
                             f"training.generator.max_length={positions + 1}",
                             f"training.generator.deepspeed_config={REPO / 'configs/deepspeed/zero3.json'}"])
    started = ray.is_initialized()  # True when this test runs after the integration tests' instance started
    with pytest.raises(ConfigError, match=rf"training.generator.max_length={positions + 1} is over the {positions} "
                                          "positions"):
        run_train(cfg, "generator")
    assert ray.is_initialized() == started  # refused before Ray was started
    assert not any(tmp_path.iterdir())  # and before any output was written

