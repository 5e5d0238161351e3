"""The Ray Train worker group and its failure and checkpoint policy: the part of a training section
that every Ray Train job reads alike (raypipe.training.harness), whatever it trains."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from raypipe.settings.base import Section


class RayTrainWorkers(Section):
    """Ray Train's workers for one training job (`ScalingConfig`, `FailureConfig`, `CheckpointConfig`)."""

    #: Ray Train workers
    num_workers: int = Field(1, ge=1)
    #: CPUs reserved per worker (on GPU nodes each worker also takes one GPU)
    cpus_per_worker: float = Field(1.0, gt=0)
    #: `auto` = GPUs (NCCL) when the cluster has one per worker, else CPUs (gloo)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    #: the GPU type the workers (and the run's coordinator) must land on, as Ray names it (Ray Train's
    #: `ScalingConfig.accelerator_type`: a node offers `A100`, `A10G`, ... when Ray detects it, or any
    #: name its start resources declare as `accelerator_type:<name>`, e.g. `A100-80G`). A model sized
    #: for a GPU's memory then waits for such a node instead of running out of memory on a smaller
    #: one. None = any GPU; ignored on CPU workers
    accelerator_type: str | None = None
    #: worker-group restarts from the latest checkpoint before the run fails (-1: unlimited)
    max_failures: int = Field(0, ge=-1)
    #: checkpoints a run keeps on disk, the latest ones (Ray Train's `CheckpointConfig.num_to_keep`); 2,
    #: so that a checkpoint being written never leaves none whole
    keep_checkpoints: int = Field(2, ge=1)
    #: keep the Ray Train checkpoints (optimizer state included) once the job finished, e.g. to train on
    #: from its last step (delete `_SUCCESS`, ask for more epochs); off, the folder holds the model only
    keep_checkpoints_after_export: bool = False
