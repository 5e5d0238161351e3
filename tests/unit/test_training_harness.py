"""The Ray Train harness every training job shares, around a stand-in trainer (no Ray started): the
device choice, the trainer it builds from a job's settings, the export it copies out of the final
checkpoint, and the errors a failed or checkpoint-less run becomes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import ray
import ray.train.torch

from raypipe.errors import RaypipeError
from raypipe.settings.crag_tools import EvaluatorTrainConfig
from raypipe.settings.training import ModelTrainConfig
from raypipe.training.checkpoint import MODEL_DIR, TrainState
from raypipe.training.harness import choose_gpu, fit_and_export


class Result:
    def __init__(self, checkpoint: Any, error: Exception | None = None):
        self.checkpoint, self.error = checkpoint, error


class FakeTrainer:
    """Records what it was built with; `fit` returns or raises what the test set."""

    built: dict[str, Any] = {}
    outcome: Result | Exception

    def __init__(self, loop: Any, **kwargs: Any):
        FakeTrainer.built = {"loop": loop, **kwargs}

    def fit(self) -> Result:
        if isinstance(FakeTrainer.outcome, Exception):
            raise FakeTrainer.outcome
        return FakeTrainer.outcome


def _loop(config: dict[str, Any]) -> None:
    """Never runs: the stand-in trainer only records it."""


@pytest.fixture
def trainer(monkeypatch):
    monkeypatch.setattr(ray.train.torch, "TorchTrainer", FakeTrainer)
    return FakeTrainer


def _checkpoint(folder: Path) -> ray.train.Checkpoint:
    (folder / MODEL_DIR).mkdir(parents=True)
    (folder / MODEL_DIR / "config.json").write_text("{}")
    TrainState(step=7, epoch=1, history=[{"step": 7, "loss": 0.5}], summary={"steps": 7}).save(folder)
    return ray.train.Checkpoint.from_directory(str(folder))


def test_device_choice_follows_the_setting_and_auto_asks_the_cluster_for_a_gpu_per_worker(monkeypatch):
    assert choose_gpu(ModelTrainConfig(device="cuda")) and not choose_gpu(ModelTrainConfig(device="cpu"))
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 8.0, "GPU": 1.0})
    assert choose_gpu(EvaluatorTrainConfig(device="auto", num_workers=1))
    assert not choose_gpu(EvaluatorTrainConfig(device="auto", num_workers=2))


def test_a_run_is_built_from_the_settings_and_its_export_copied_out(trainer, tmp_path):
    tc = EvaluatorTrainConfig(num_workers=3, cpus_per_worker=2.0, max_failures=4, keep_checkpoints=5)
    trainer.outcome = Result(_checkpoint(tmp_path / "ckpt"))
    state = fit_and_export(_loop, {"a": 1}, tc, use_gpu=False, run_name="evaluator", storage=tmp_path / "runs",
                           export_dir=tmp_path / "out", what="evaluator training")
    assert (state.step, state.epoch, state.summary) == (7, 1, {"steps": 7})
    assert (tmp_path / "out" / "config.json").read_text() == "{}"
    built = trainer.built
    assert built["loop"] is _loop and built["train_loop_config"] == {"a": 1}
    assert built["torch_config"].backend == "gloo"
    assert (built["scaling_config"].num_workers, built["scaling_config"].use_gpu) == (3, False)
    assert built["scaling_config"].resources_per_worker == {"CPU": 2.0}
    assert built["scaling_config"].accelerator_type is None
    run = built["run_config"]
    assert (run.name, run.storage_path) == ("evaluator", str(tmp_path / "runs"))
    assert run.failure_config.max_failures == 4 and run.checkpoint_config.num_to_keep == 5
    assert built["datasets"] is None and built["dataset_config"] is None


def test_a_failed_run_and_a_run_without_a_checkpoint_are_our_errors_naming_the_run(trainer, tmp_path):
    args = (_loop, {}, ModelTrainConfig())
    where = {"use_gpu": False, "run_name": "sft", "storage": tmp_path, "export_dir": tmp_path / "out",
             "what": "training stage 'sft'"}
    trainer.outcome = RuntimeError("worker died")
    with pytest.raises(RaypipeError, match=r"^training stage 'sft' failed: worker died$"):
        fit_and_export(*args, **where)
    trainer.outcome = Result(None, ValueError("no report"))
    with pytest.raises(RaypipeError, match=r"^training stage 'sft' ended without a checkpoint: no report$"):
        fit_and_export(*args, **where)


def test_gpu_workers_ask_for_the_configured_gpu_type_and_cpu_workers_ignore_it(trainer, tmp_path):
    tc = ModelTrainConfig(accelerator_type="A100-80G", num_workers=4)
    trainer.outcome = Result(_checkpoint(tmp_path / "ckpt"))
    where = {"run_name": "sft", "storage": tmp_path / "runs", "export_dir": tmp_path / "out", "what": "sft"}
    fit_and_export(_loop, {}, tc, use_gpu=True, **where)
    scaling = trainer.built["scaling_config"]
    assert scaling.accelerator_type == "A100-80G"
    # Ray places each worker on a node whose resources name that type
    assert scaling._resources_per_worker_not_none["accelerator_type:A100-80G"] > 0
    fit_and_export(_loop, {}, tc, use_gpu=False, **where)
    assert trainer.built["scaling_config"].accelerator_type is None


@pytest.mark.parametrize("keep", [False, True])
def test_a_finished_folder_drops_its_checkpoints_unless_asked_to_keep_them(tmp_path: Path, keep: bool):
    from raypipe.training.finished import CHECKPOINTS_DIR, SUCCESS, finished_summary, mark_finished

    shard = tmp_path / CHECKPOINTS_DIR / "main" / "checkpoint_000001" / "state.pt"
    shard.parent.mkdir(parents=True)
    shard.write_bytes(b"optimizer state")
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    mark_finished(tmp_path, {"summary": {"steps": 3}}, keep_checkpoints=keep)
    assert (tmp_path / SUCCESS).exists() and (tmp_path / "model.safetensors").exists()
    assert shard.exists() == keep
    assert finished_summary(tmp_path) == {"steps": 3, "skipped": True}
