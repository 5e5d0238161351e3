"""The LM loop's length-grouped micro-batches (`training.*.group_by_length`) against plain shuffled ones,
in one run on the same encoded data: padded tokens per real token over one epoch of each batching (what
a CPU step pays for), and the real tokens/s of a few optimizer steps of each. Plain batching is the
baseline.

The data is a D_gen folder (augmentation's output) read as the generator reads it: its chat prompts,
the `--datasets` subset, prompt and passages masked. The model is trained as the demo's generator is:
one worker, ZeRO stage 0, the top `--trainable-layers`, the precision `auto` picks.

    python -m benchmarks.length_grouping     # the demo's SmolLM2 and D_gen (after `make demo`)
    python -m benchmarks.length_grouping --model runs/ls_lm/models/smollm2 --data runs/ls_lm/gen_data/data
    python -m benchmarks.length_grouping --quick    # a tiny model on generated rows of 1-12 sentences
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from benchmarks._common import timer, write_result
from benchmarks.training import build_tiny_base

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
logger = logging.getLogger("benchmarks.length_grouping")

#: the --quick run's tiny base model
QUICK_MODEL = {"hidden": 64, "layers": 2, "vocab": 512}
#: the demo's config (raypipe/demo.yaml): its generator's subset and shape are the defaults
DEMO_CONFIG = Path(__file__).resolve().parents[1] / "raypipe" / "demo.yaml"


def write_quick_rows(work: Path, n: int = 512) -> tuple[Path, list[dict[str, str]]]:
    """D_gen-shaped rows whose outputs run from 1 to 12 sentences, so their lengths vary as D_gen's do."""
    import random

    import pyarrow as pa
    import pyarrow.parquet as pq

    from raypipe.tokens import NO_RETRIEVAL, UTILITY

    rng = random.Random(0)
    rows = [{"id": f"q{i:05d}", "instruction": f"Say something about item {i}.", "input": "", "dataset": "factual_qa",
             "output": NO_RETRIEVAL + " ".join(f"Item {i} has part {j}." for j in range(rng.randint(1, 12))) + UTILITY[-1]}
            for i in range(n)]
    data = work / "gen_data"
    data.mkdir()
    pq.write_table(pa.Table.from_pylist(rows), data / "part-00000.parquet")
    return data, rows


def padding_ratio(dataset: Any, tc: Any) -> float:
    """Padded tokens per real token over one epoch of the loop's own micro-batches."""
    from raypipe.training.lm_task import micro_batches

    real = padded = 0
    for batch in micro_batches(dataset, tc, epoch=0):
        lengths = [len(ids) for ids in batch["input_ids"]]
        real, padded = real + sum(lengths), padded + len(lengths) * max(lengths)
    return padded / real


def main() -> None:
    from raypipe.config import load_config

    demo = load_config(DEMO_CONFIG).training.generator
    parser = argparse.ArgumentParser(prog="python -m benchmarks.length_grouping", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tiny model on generated rows, 4 steps")
    parser.add_argument("--model", type=Path, default=Path("runs/demo/models/smollm2"),
                        help="the base model folder (default: the demo's imported SmolLM2)")
    parser.add_argument("--data", type=Path, default=Path("runs/demo/gen_data/data"),
                        help="a D_gen folder of parquet files (default: the demo's)")
    parser.add_argument("--datasets", nargs="+", default=demo.datasets,
                        help="the rows' datasets to train on (default: the demo generator's)")
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps per batching (default 20)")
    parser.add_argument("--trainable-layers", type=int, default=demo.trainable_layers, metavar="N",
                        help=f"train the top N layers (the demo generator's: {demo.trainable_layers})")
    parser.add_argument("--micro-batch-size", type=int, default=demo.micro_batch_size)
    parser.add_argument("--max-length", type=int, default=demo.max_length)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    for noisy in ("ray", "ray.data", "ray.train"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if not args.quick and not (args.model / "config.json").is_file():
        parser.error(f"--model {args.model}: not an HF model folder (no config.json); `make demo` writes the default")
    if not args.quick and not args.data.is_dir():
        parser.error(f"--data {args.data}: no such folder; `make demo` writes the default")

    import ray

    from raypipe.models import load_tokenizer
    from raypipe.models.prompt_format import resolve_format
    from raypipe.runtime import ensure_ray
    from raypipe.settings.cluster import RayConfig
    from raypipe.settings.training import ModelTrainConfig, TrainStage
    from raypipe.training.trainer import encode_stage, fit_stage

    runs: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="raypipe-bench-grouping-") as tmp, timer() as total:
        work = Path(tmp)
        if args.quick:
            data, rows = write_quick_rows(work)
            model = str(build_tiny_base(work, QUICK_MODEL, [{"prompt": r["output"]} for r in rows]))
            steps, layers, micro_batch_size = 4, None, 8
        else:
            data, model = args.data.resolve(), str(args.model.resolve())
            steps, layers, micro_batch_size = args.steps, args.trainable_layers, args.micro_batch_size
        prompt_format = resolve_format("auto", model, load_tokenizer(model))
        ensure_ray(RayConfig(num_cpus=2))
        base = ModelTrainConfig(base_model=model, data=str(data), datasets=args.datasets, num_workers=1,
                           cpus_per_worker=2, zero_stage=0, micro_batch_size=micro_batch_size,
                           max_length=args.max_length, trainable_layers=layers,
                           checkpoint_every=10**6, log_every=10**6)
        stage = TrainStage(name="bench", lr=1.5e-4, mask=["prompt", "paragraph"])
        encoded = encode_stage(base, stage, model, work, prompt_format)
        for name, grouped in (("plain", False), ("grouped", True)):
            tc = base.model_copy(update={"group_by_length": grouped, "out_dir": str(work / name)})
            epochs = steps / encoded.plan.steps_per_epoch
            stats = fit_stage(tc, stage.model_copy(update={"name": name, "epochs": epochs}), model, encoded,
                              work / name, work / name, prompt_format)
            runs[name] = {"padded_per_real_token": round(padding_ratio(encoded.dataset, tc), 3),
                          "steps": stats["steps"], "tokens_per_s": round(stats["tokens_per_s"], 1),
                          "seconds": round(stats["seconds"], 1), "precision": stats["precision"]}
            logger.info("%s: %s", name, runs[name])
        ray.shutdown()

    plain, grouped = runs["plain"], runs["grouped"]
    payload = {"mode": "quick" if args.quick else "full", "model": "tiny" if args.quick else str(args.model),
               "data": "generated" if args.quick else str(args.data), "datasets": args.datasets,
               "rows": encoded.encode_stats["rows_train"], "steps": steps,
               "micro_batch_size": micro_batch_size, "trainable_layers": layers, "runs": runs,
               "padding_ratio_grouped_vs_plain": round(grouped["padded_per_real_token"]
                                                       / plain["padded_per_real_token"], 3),
               "tokens_per_s_grouped_vs_plain": round(grouped["tokens_per_s"] / plain["tokens_per_s"], 3),
               "seconds": round(total.seconds, 1)}
    path = write_result("length_grouping", payload)
    print(f"length grouping: {grouped['padded_per_real_token']:.2f} padded tokens per real token against "
          f"{plain['padded_per_real_token']:.2f}; {grouped['tokens_per_s']:.0f} real tokens/s against "
          f"{plain['tokens_per_s']:.0f} ({payload['tokens_per_s_grouped_vs_plain']:.2f}x); {path}")


if __name__ == "__main__":
    main()
