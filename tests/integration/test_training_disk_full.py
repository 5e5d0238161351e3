"""A training checkpoint written into a run storage whose disk fills mid-run (a small tmpfs,
tests/small_disk.py), through Ray Train and the project's one worker loop: the run fails with a
`DiskFullError` naming a path in the run's storage, nothing half-written is left that the rerun would
take as done, and the rerun after the space is freed resumes from a whole checkpoint to the weights an
uninterrupted run ends with.

The model is a linear regression: what is tested is the checkpoint path, which every task shares. The
disk fills on Ray Train's controller right after it registered the step-2 checkpoint (a callback,
`FillAfterStep`), the one fault injection. The worker runs on meanwhile, so the write that then fails
is either its step-4 checkpoint or Ray's record of it (the run's snapshot, which the project keeps a
whole copy of): both must end the same, resumed from step 2, or from step 4 where only the copy of its
record failed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from ray.train import UserCallback

from raypipe.errors import DiskFullError
from raypipe.settings.workers import RayTrainWorkers
from raypipe.training.checkpoint import TrainState
from raypipe.training.harness import fit_and_export
from raypipe.training.loop import LoopPlan, train_loop_per_worker
from raypipe.training.strategy import TORCH_STATE, TorchStrategy
from raypipe.training.task import EpochBatches, TrainTask
from tests.small_disk import SmallDisk

pytestmark = pytest.mark.slow

STEPS, CHECKPOINT_EVERY = 6, 2
WEIGHTS = "weights.pt"


class FillAfterStep(UserCallback):
    """On Ray Train's controller: fills the disk at `root` once the checkpoint of `step` is registered."""

    def __init__(self, step: int, root: Path):
        self.step, self.root = step, root

    def after_report(self, run_context: Any, metrics: list[dict[str, Any]], checkpoint: Any) -> None:
        if checkpoint is not None and metrics[0]["step"] == self.step:
            SmallDisk(self.root).fill()


class Regression(TrainTask):
    """y = xW + b on fixed batches, the same ones for every run."""

    def load(self, base_model: str) -> tuple[Any, Any]:
        return torch.nn.Linear(4, 1), None

    def epoch_batches(self, rank: int, world: int) -> EpochBatches:
        def batches(epoch: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
            generator = torch.Generator().manual_seed(epoch)
            return [(torch.randn(8, 4, generator=generator), torch.randn(8, 1, generator=generator))
                    for _ in range(STEPS)]

        return batches

    def loss(self, model: Any, tokenizer: Any, batch: tuple[torch.Tensor, torch.Tensor]) -> tuple[Any, int]:
        x, y = batch
        return torch.nn.functional.mse_loss(model(x), y), len(x)

    def export(self, module: Any, state_dict: dict[str, Any], tokenizer: Any, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        torch.save(state_dict, folder / WEIGHTS)


def _fit(storage: Path, export_dir: Path, metrics_log: Path, callbacks: tuple[UserCallback, ...] = ()) -> TrainState:
    """Six steps, one epoch of six micro-batches, a checkpoint every two (so at 2 and 4, then the final);
    every step reported, so the worker runs at most a report ahead of the controller."""
    plan = LoopPlan(name="toy", base_model="", total_steps=STEPS, micro_batches_per_epoch=STEPS, lr=0.05,
                    weight_decay=0.0, warmup_steps=1, seed=0, metrics_log=str(metrics_log),
                    checkpoint_every=CHECKPOINT_EVERY, log_every=1)
    settings = RayTrainWorkers(num_workers=1, cpus_per_worker=1, device="cpu", max_failures=0, keep_checkpoints=2)
    return fit_and_export(train_loop_per_worker,
                          {"plan": plan, "task": Regression(), "strategy": TorchStrategy("fp32", grad_clip=1.0)},
                          settings, use_gpu=False, run_name="toy", storage=storage, export_dir=export_dir,
                          what="toy training", callbacks=callbacks)


def test_a_checkpoint_onto_a_full_disk_is_named_leaves_no_half_and_the_rerun_resumes(ray_cluster, small_disk,
                                                                                      tmp_path):
    clean = tmp_path / "clean"
    _fit(clean / "checkpoints", clean / "model", tmp_path / "clean.metrics.jsonl")

    storage, export_dir = small_disk.root / "checkpoints", small_disk.root / "model"
    metrics_log = tmp_path / "metrics.jsonl"  # off the small disk: the checkpoint is what fails
    with pytest.raises(DiskFullError) as raised:
        _fit(storage, export_dir, metrics_log, callbacks=(FillAfterStep(CHECKPOINT_EVERY, small_disk.root),))
    run_dir = storage / "toy"
    assert Path(raised.value.path) == run_dir or Path(raised.value.path).parent == run_dir
    for folder in (p for p in run_dir.glob("checkpoint_*") if p.is_dir()):  # whole: a partial copy is removed
        assert TrainState.load(folder).step in (2, 4) and (folder / TORCH_STATE).is_file()
    assert not export_dir.exists() and not list(small_disk.root.rglob("*.tmp"))

    small_disk.free()
    state = _fit(storage, export_dir, metrics_log)
    assert state.summary["resumed_from_step"] in (2, 4) and state.step == STEPS
    resumed, uninterrupted = (torch.load(d / WEIGHTS) for d in (export_dir, clean / "model"))
    assert resumed.keys() == uninterrupted.keys()
    assert all(torch.equal(resumed[k], uninterrupted[k]) for k in resumed)
