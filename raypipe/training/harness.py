"""The one Ray Train harness every training job runs through (the generator and critic stages, CRAG's
retrieval evaluator).

Shape follows Ray's ``deepspeed_finetune`` example: a job brings its settings, its data and its
per-worker loop; the harness picks the devices, builds the ``TorchTrainer`` (scaling, run storage,
failure and checkpoint policy), fits, turns Ray's failure into our error at this job boundary, and
copies the exported model out of the final checkpoint. A run is named and stored under a folder of
the job's, so a rerun with the same name and storage path resumes from its latest checkpoint (Ray
Train restores it) instead of starting over.

The loop's final checkpoint must hold the exported HF folder in `MODEL_DIR` and the `TrainState`.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from raypipe.disk import disk_full_in, full_disk_named
from raypipe.errors import RaypipeError
from raypipe.settings.workers import RayTrainWorkers
from raypipe.training.checkpoint import MODEL_DIR, TrainState

if TYPE_CHECKING:
    from ray.train import DataConfig, UserCallback


def choose_gpu(settings: RayTrainWorkers) -> bool:
    """Whether the workers run on GPUs: `auto` is decided from the cluster, not from the driver, which
    often runs on a CPU-only head node."""
    import ray

    if settings.device == "auto":
        return ray.cluster_resources().get("GPU", 0) >= settings.num_workers
    return settings.device == "cuda"


def fit_and_export(loop: Callable[[dict[str, Any]], None], loop_config: dict[str, Any], settings: RayTrainWorkers,
                   *, use_gpu: bool, run_name: str, storage: Path, export_dir: Path, what: str,
                   datasets: dict[str, Any] | None = None, dataset_config: DataConfig | None = None,
                   callbacks: Sequence[UserCallback] = ()) -> TrainState:
    """Run `loop` on `settings.num_workers` Ray Train workers as the run `run_name` under `storage`,
    copy the exported model of the final checkpoint into `export_dir`, and return the loop's final
    state. `what` names the run in the errors ("training stage 'sft' failed: ..."); `callbacks` run on
    Ray Train's controller after the run's own (the full-disk test fills its disk with one).

    A full disk anywhere in the run (a worker's checkpoint, Ray Train's record of the run) is a
    `DiskFullError`; the run's record is kept whole (`run_snapshot`), so the rerun resumes."""
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    from raypipe.training.run_snapshot import SnapshotCopy, restore_snapshot

    run_dir = storage / run_name
    restore_snapshot(run_dir)
    trainer = TorchTrainer(
        loop,
        train_loop_config=loop_config,
        torch_config=TorchConfig(backend="nccl" if use_gpu else "gloo"),
        scaling_config=ScalingConfig(num_workers=settings.num_workers, use_gpu=use_gpu,
                                     resources_per_worker={"CPU": settings.cpus_per_worker},
                                     accelerator_type=settings.accelerator_type if use_gpu else None),
        run_config=RunConfig(
            name=run_name, storage_path=str(storage),
            failure_config=FailureConfig(max_failures=settings.max_failures),
            checkpoint_config=CheckpointConfig(num_to_keep=settings.keep_checkpoints),
            callbacks=[SnapshotCopy(run_dir), *callbacks],
        ),
        datasets=datasets,
        dataset_config=dataset_config,
    )
    try:
        result = trainer.fit()
    except Exception as exc:  # noqa: BLE001 - the job boundary: report Ray's failure as our error
        if (full := disk_full_in(exc, where=run_dir)) is not None:
            raise full from exc  # a worker's full disk, named: the rerun resumes from the last whole checkpoint
        raise RaypipeError(f"{what} failed: {exc}") from exc
    if result.checkpoint is None:
        raise RaypipeError(f"{what} ended without a checkpoint: {result.error}")
    with result.checkpoint.as_directory() as folder, full_disk_named(export_dir):
        shutil.copytree(Path(folder) / MODEL_DIR, export_dir, dirs_exist_ok=True)
        return TrainState.load(Path(folder))
