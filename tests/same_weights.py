"""Do the training loops give the same weights? The check behind a refactor of the training harness
that must not change what any trainer learns: on fixed seeds, train the three kinds of model briefly
(the generator on DeepSpeed ZeRO-3 with 2 workers and gradient accumulation, the encoder critic and
CRAG's retrieval evaluator on plain torch, one and two workers), hash every exported tensor, and
compare two such runs:

    python -m tests.same_weights run OUT.json        # before, then after the change
    python -m tests.same_weights compare BEFORE.json AFTER.json

Exit status 0 only when every tensor of every run is bit-identical.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def tensor_hashes(folder: Path) -> dict[str, str]:
    """sha256 of every tensor in the folder's safetensors files, by file and name."""
    import torch
    from safetensors.torch import load_file

    out = {}
    for path in sorted(folder.glob("*.safetensors")):
        for name, tensor in sorted(load_file(path).items()):
            raw = tensor.reshape(-1).contiguous().view(torch.uint8).numpy().tobytes()
            out[f"{path.name}:{name}"] = hashlib.sha256(raw).hexdigest()
    return out


def _generator(work: Path, world: Path) -> dict[str, str]:
    from raypipe.models import build_tiny_model, world_texts
    from raypipe.settings.cluster import RayConfig
    from raypipe.settings.models import TinyModelConfig
    from raypipe.settings.training import GeneratorTrainConfig, TrainStage
    from raypipe.training.trainer import train_lm
    from tests.integration.test_training import _generator_rows, _write

    base = work / "tiny"
    cfg = TinyModelConfig(out_dir=str(base), vocab_size=512, hidden_size=64, intermediate_size=128,
                          num_hidden_layers=2, num_attention_heads=2, max_position_embeddings=512,
                          tokenizer_train_texts=2000)
    build_tiny_model(cfg, world_texts(world, limit=cfg.tokenizer_train_texts), base)
    data = _write(_generator_rows(96), work / "gen_data" / "data")
    tc = GeneratorTrainConfig(base_model=str(base), data=str(data), out_dir=str(work / "generator"),
                              stages=[TrainStage(name="masked", lr=2e-3, mask=["prompt", "paragraph"], epochs=1)],
                              num_workers=2, cpus_per_worker=0.5, micro_batch_size=4, grad_accum=2, max_length=128,
                              warmup_ratio=0.1, deepspeed_config=str(REPO / "configs" / "deepspeed" / "zero3.json"),
                              shuffle_buffer_rows=64, log_every=2, checkpoint_every=2, group_by_length=True, seed=3)
    train_lm(tc, "generator", RayConfig())
    return tensor_hashes(work / "generator")


def _classifiers(work: Path, world: Path) -> dict[str, dict[str, str]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from raypipe.config import RaypipeConfig
    from raypipe.critic.encoder_train import CriticEncoderTask
    from raypipe.evaluator_training.task import EvaluatorTask
    from raypipe.jobs.label import run_label
    from raypipe.models import minilm_path
    from raypipe.settings.crag_tools import EvaluatorTrainConfig
    from raypipe.training.classifier import ClassifierRun, fit_classifier

    run_label(RaypipeConfig.model_validate({"label": {
        "instances": str(world / "instances"), "passages": str(world / "passages"),
        "out_dir": str(work / "critic_data"), "per_aspect": 40, "dev_fraction": 0.25, "teacher": {"error_rate": 0.0}}}))
    passages = pq.read_table(world / "passages").to_pylist()[:60]
    pairs = [{"query": f"What is {p['title']} known for?", "title": p["title"], "text": p["text"],
              "label": 1.0 if i % 2 else -1.0} for i, p in enumerate(passages)]
    pq.write_table(pa.Table.from_pylist(pairs), work / "pairs.parquet")
    base = str(minilm_path())
    out: dict[str, dict[str, str]] = {}
    for workers in (1, 2):
        settings = EvaluatorTrainConfig(num_workers=workers, cpus_per_worker=2 / workers / 2, device="cpu")
        run = ClassifierRun(name="critic", epochs=1.5, lr=2e-4, batch_size=16, warmup_ratio=0.1, weight_decay=0.01,
                            checkpoint_every=3, seed=5, precision="fp32")
        task = CriticEncoderTask(max_length=96, layers=3, trainable_layers=2, class_weights=None)
        folder = work / f"critic_{workers}"
        fit_classifier(task, run, settings, base, work / "critic_data" / "train", folder)
        out[f"encoder_critic_{workers}w"] = tensor_hashes(folder)
        run = ClassifierRun(name="evaluator", epochs=2, lr=1e-4, batch_size=8, warmup_ratio=0.1, weight_decay=0.01,
                            checkpoint_every=4, seed=5, precision="fp32")
        folder = work / f"evaluator_{workers}"
        fit_classifier(EvaluatorTask(48), run, settings, base, work / "pairs.parquet", folder)
        out[f"crag_evaluator_{workers}w"] = tensor_hashes(folder)
    return out


def run(out_file: Path) -> None:
    import ray

    from raypipe.data.world import synthesize
    from raypipe.runtime import use_local_worker_env
    from raypipe.settings.data import WorldConfig

    use_local_worker_env()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    with tempfile.TemporaryDirectory(prefix="raypipe-same-weights-") as tmp:
        work = Path(tmp)
        world = work / "world"
        synthesize(WorldConfig(out_dir=str(world), instances=400, seed=7, eval_instances=40, shard_size=150))
        hashes = {"generator_zero3_2w": _generator(work, world), **_classifiers(work, world)}
    ray.shutdown()
    out_file.write_text(json.dumps(hashes, indent=1, sort_keys=True) + "\n")
    print(f"{sum(len(h) for h in hashes.values())} tensors of {len(hashes)} runs hashed into {out_file}")


def compare(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """One line per run (same, or how many tensors differ or are missing); the last line the verdict."""
    lines, bad = [], 0
    for name in sorted(before):
        old, new = before[name], after.get(name, {})
        differ = [k for k in old if new.get(k) != old[k]]
        bad += bool(differ) or set(new) != set(old)
        lines.append(f"{'same' if not differ and set(new) == set(old) else 'DIFF'} {name}: "
                     f"{len(old) - len(differ)} of {len(old)} tensors bit-identical")
    lines.append("all runs bit-identical" if not bad else f"{bad} of {len(before)} runs differ")
    return lines


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "run":
        run(Path(argv[1]))
        return 0
    if len(argv) == 3 and argv[0] == "compare":
        lines = compare(json.loads(Path(argv[1]).read_text()), json.loads(Path(argv[2]).read_text()))
        print("\n".join(lines))
        return 0 if lines[-1] == "all runs bit-identical" else 1
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
