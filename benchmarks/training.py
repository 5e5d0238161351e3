"""Training throughput and memory on Ray Train + DeepSpeed, in one run:

1. tokens/s and peak memory per worker with 1 vs 2 workers (ZeRO-3, same micro-batch per worker, so
   the 2-worker global batch is twice as large; the 1-worker run is the baseline);
2. per-rank model-state memory (parameters + gradients + optimizer states, summed over the tensors each
   rank really holds, see raypipe/training/memory.py) under ZeRO-3 vs plain data parallelism (ZeRO
   stage 0) at 2 workers; DDP is the baseline. ZeRO-3 runs with the persistence threshold at 0 so the
   tiny model's small matrices are partitioned as a large model's would be. With Adam in fp32, DDP
   holds 16 bytes/param (weights, grads, 2 moments); ZeRO-3 on N ranks holds (4 + 4 + 4 + 8) / N
   (working weights, fp32 master copy, grads, moments): 20/32 = 0.625 at N = 2. In bf16 ZeRO-3 holds
   (2 + 2 + 4 + 8) / N against 12 for DeepSpeed's stage 0, which keeps no fp32 master copy: 16/(12 N),
   0.667 at N = 2 (exactly 1/N against a mixed-precision baseline that keeps one).

3. tokens/s of one worker at ZeRO stage 0 (the demo generator's layout) in fp32 and under bf16 autocast
   (`training.*.precision: autocast`, what `auto` picks on a CPU with native bf16); fp32 is the
   baseline. `--trainable-layers N` trains the top N layers only, as the demo's generator does.

Every run also records the CPU's GEMM rate in fp32 and bf16 (`gemm_gflops`): a CPU whose torch build
reports no AVX512-BF16 or AMX capability (`cpu_capability`) has no bf16 matrix kernels, so bf16 training
is several times slower than fp32 there and CPU runs train in fp32.

All runs train the same model on the same encoded critic-style data (encoded once).
Throughput counts every optimizer step but the first (warm-up).

`--model DIR` measures (2) and (3) only, on a real model folder (e.g. the imported SmolLM2, 134.5M parameters in
matrices of 0.3M-28M elements, where partitioning dominates): a few steps of ZeRO-3 and of DDP at 2
workers and of the two one-worker runs of (3), written to `training_<folder>_<precision>.json`.

    python -m benchmarks.training            # full run
    python -m benchmarks.training --quick    # ~1-1.5 min, most of it Ray Train worker start-up
    python -m benchmarks.training --model runs/demo/models/smollm2 --precision bf16
    python -m benchmarks.training --model runs/demo/models/smollm2 --trainable-layers 8
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import tempfile
from pathlib import Path

from benchmarks._common import timer, write_result

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
logger = logging.getLogger("benchmarks.training")

REPO = Path(__file__).resolve().parent.parent
SIZES = {  # model shape, training rows, optimizer steps per run
    "quick": {"hidden": 64, "layers": 2, "vocab": 512, "rows": 256, "steps": 8},
    "full": {"hidden": 256, "layers": 4, "vocab": 4096, "rows": 4096, "steps": 60},
    "model": {"rows": 64, "steps": 5},  # --model: a real model is slow on CPU
}
CITIES = ["Velmora", "Ostrava", "Kelden", "Marrow", "Tillby", "Quensa", "Arnhal", "Sorrel"]


def build_rows(work: Path, size: dict) -> tuple[Path, list[dict]]:
    """D_critic-shaped rows (prompt in the generator format, IsRel target) in `work/d_critic`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from raypipe.prompts import format_generator_prompt
    from raypipe.tokens import IRRELEVANT, RELEVANT

    rows = []
    for i in range(size["rows"]):
        city = CITIES[i % len(CITIES)]
        relevant = i % 2 == 0
        evidence = f"{city} is a city on the river {CITIES[(i + 3) % len(CITIES)]}." if relevant \
            else f"Item {i} is a cat that sleeps all day."
        prompt = format_generator_prompt(f"Question: where is {city}?\nEvidence: {evidence}\nIs it relevant?")
        rows.append({"id": f"b{i:06d}", "prompt": prompt, "target": RELEVANT if relevant else IRRELEVANT})
    data = work / "d_critic"
    data.mkdir()
    pq.write_table(pa.Table.from_pylist(rows), data / "part-00000.parquet")
    return data, rows


def build_tiny_base(work: Path, size: dict, rows: list[dict]) -> Path:
    """The tiny base model, its tokenizer trained on the rows' prompts."""
    from raypipe.models import build_tiny_model
    from raypipe.settings.models import TinyModelConfig

    model_dir = work / "base"
    cfg = TinyModelConfig(out_dir=str(model_dir), vocab_size=size["vocab"], hidden_size=size["hidden"],
                          intermediate_size=2 * size["hidden"], num_hidden_layers=size["layers"],
                          num_attention_heads=4, max_position_embeddings=256, tokenizer_train_texts=len(rows))
    build_tiny_model(cfg, (r["prompt"] for r in rows), model_dir)
    return model_dir


def partition_everything_config(work: Path) -> Path:
    """The repo's ZeRO-3 template with the persistence threshold at 0: every matrix of a tiny model is
    below the default 1e4 elements and would stay whole on every rank, unlike a 7B model's matrices."""
    template = json.loads((REPO / "configs" / "deepspeed" / "zero3.json").read_text())
    template["zero_optimization"]["stage3_param_persistence_threshold"] = 0
    path = work / "zero3_partition_all.json"
    path.write_text(json.dumps(template))
    return path


def run_once(name: str, work: Path, model_dir: Path, data_dir: Path, encoded, size: dict, *,
             num_workers: int, zero_stage: int, precision: str, trainable_layers: int | None = None) -> dict:
    from raypipe.settings.training import ModelTrainConfig, TrainStage
    from raypipe.training.data import plan_steps
    from raypipe.training.trainer import StageData, fit_stage

    tc = ModelTrainConfig(base_model=str(model_dir), data=str(data_dir), out_dir=str(work / name),
                     num_workers=num_workers, zero_stage=zero_stage, precision=precision, micro_batch_size=8,
                     trainable_layers=trainable_layers,
                     max_length=128, cpus_per_worker=1.0, checkpoint_every=10**6, log_every=10**6,
                     deepspeed_config=str(partition_everything_config(work)))
    plan = plan_steps(encoded.encode_stats["rows_train"], num_workers, tc.micro_batch_size, tc.grad_accum, name)
    stage = TrainStage(name=name, lr=1e-3, mask=["prompt"], epochs=size["steps"] / plan.steps_per_epoch)
    stats = fit_stage(tc, stage, str(model_dir), StageData(encoded.dataset, encoded.encode_stats, plan),
                      work / name, work / name)
    state = stats["model_state_bytes_rank0"]
    logger.info("%s: %.0f tokens/s, peak %.0f MiB/worker, model state %.2f MiB/rank", name,
                stats["tokens_per_s"], stats["peak_memory_mib"], stats["model_state_mib_per_rank"])
    return {"num_workers": num_workers, "zero_stage": zero_stage, "precision": stats["precision"], "steps": stats["steps"],
            "global_batch": plan.global_batch, "tokens_per_s": round(stats["tokens_per_s"], 1),
            "peak_memory_mib_per_worker": round(stats["peak_memory_mib"], 1),
            "model_state_mib_per_rank": round(stats["model_state_mib_per_rank"], 4),
            "model_state_bytes_rank0": state, "final_loss": stats["final_loss"], "seconds": stats["seconds"]}


def gemm_gflops(reps: int = 20) -> dict:
    """GFLOP/s of one thread on an nn.Linear-shaped product (256 tokens x 576 -> 1536, SmolLM2's MLP) in
    fp32 and bf16, and the CPU capability torch dispatches to: why bf16 trains slower on a CPU without
    bf16 matrix instructions."""
    import time

    import torch
    import torch.nn.functional as F

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    rates = {}
    try:
        for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            x, w = torch.randn(256, 576, dtype=dtype), torch.randn(1536, 576, dtype=dtype)
            F.linear(x, w)
            start = time.perf_counter()
            for _ in range(reps):
                F.linear(x, w)
            rates[name] = round(2 * 256 * 576 * 1536 * reps / (time.perf_counter() - start) / 1e9, 1)
    finally:
        torch.set_num_threads(threads)
    return {"cpu_capability": torch.backends.cpu.get_cpu_capability(), **rates,
            "fp32_vs_bf16_ratio": round(rates["fp32"] / rates["bf16"], 1)}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.training",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small model and few steps")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--model", type=Path, default=None,
                        help="an HF model folder: measure ZeRO-3 vs DDP model state and autocast vs fp32 on it")
    parser.add_argument("--trainable-layers", type=int, default=None, metavar="N",
                        help="the autocast vs fp32 runs train the top N layers only (the demo's generator: 8)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    for noisy in ("ray", "ray.data", "ray.train"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if args.model is not None and not (args.model / "config.json").is_file():
        parser.error(f"--model {args.model}: not an HF model folder (no config.json); "
                     "`raypipe models import` writes the SmolLM2 one")
    mode = "model" if args.model is not None else "quick" if args.quick else "full"
    size = SIZES[mode]

    import ray

    from raypipe.models import load_model
    from raypipe.runtime import ensure_ray
    from raypipe.settings.cluster import RayConfig
    from raypipe.settings.training import ModelTrainConfig, TrainStage
    from raypipe.training.trainer import encode_stage

    layouts = [("zero3_2_workers", 2, 3, args.precision), ("ddp_2_workers", 2, 0, args.precision),
               ("stage0_1_worker_fp32", 1, 0, "fp32"), ("stage0_1_worker_autocast", 1, 0, "autocast")]
    if args.model is None:
        layouts.insert(0, ("zero3_1_worker", 1, 3, args.precision))
    with tempfile.TemporaryDirectory(prefix="raypipe-bench-train-") as tmp, timer() as total:
        work = Path(tmp)
        data_dir, rows = build_rows(work, size)
        model_dir = args.model.resolve() if args.model is not None else build_tiny_base(work, size, rows)
        n_params = sum(p.numel() for p in load_model(model_dir, device="cpu")[0].parameters())
        ensure_ray(RayConfig(num_cpus=2))
        encoded = encode_stage(ModelTrainConfig(base_model=str(model_dir), data=str(data_dir), max_length=128),
                               TrainStage(mask=["prompt"]), str(model_dir), work)
        runs = {name: run_once(name, work, model_dir, data_dir, encoded, size, num_workers=w, zero_stage=z,
                               precision=p, trainable_layers=args.trainable_layers if w == 1 and z == 0 else None)
                for name, w, z, p in layouts}
        ray.shutdown()  # flush the workers' log lines now, so the summary below is the last line

    two, ddp = runs["zero3_2_workers"], runs["ddp_2_workers"]
    ratio = two["model_state_mib_per_rank"] / ddp["model_state_mib_per_rank"]
    by_part = {part: round(two["model_state_bytes_rank0"][part] / ddp["model_state_bytes_rank0"][part], 3)
               for part in ("params", "grads", "optimizer")}
    payload = {
        "mode": mode, "precision": args.precision, "model_params": n_params, "size": size,
        "model": str(args.model) if args.model is not None else "tiny",
        "model_state_mib_per_rank_zero3": two["model_state_mib_per_rank"],
        "model_state_mib_per_rank_ddp": ddp["model_state_mib_per_rank"],
        "zero3_vs_ddp_model_state_ratio": round(ratio, 3),
        "zero3_vs_ddp_ratio_by_part": by_part,
        "runs": runs, "gemm_gflops": gemm_gflops(), "seconds": round(total.seconds, 1),
        "trainable_layers": args.trainable_layers,
        "autocast_vs_fp32_tokens_per_s_ratio": round(runs["stage0_1_worker_autocast"]["tokens_per_s"]
                                                     / runs["stage0_1_worker_fp32"]["tokens_per_s"], 3),
    }
    throughput = ""
    if "zero3_1_worker" in runs:
        one = runs["zero3_1_worker"]
        payload |= {"tokens_per_s_1_worker": one["tokens_per_s"], "tokens_per_s_2_workers": two["tokens_per_s"],
                    "tokens_per_s_2_vs_1_ratio": round(two["tokens_per_s"] / one["tokens_per_s"], 3),
                    "peak_memory_mib_per_worker_1_worker": one["peak_memory_mib_per_worker"],
                    "peak_memory_mib_per_worker_2_workers": two["peak_memory_mib_per_worker"]}
        throughput = (f"{one['tokens_per_s']:.0f} tokens/s on 1 worker, {two['tokens_per_s']:.0f} on 2 "
                      f"({payload['tokens_per_s_2_vs_1_ratio']:.2f}x); ")
    name = "training" if args.model is None else f"training_{args.model.resolve().name}_{args.precision}"
    path = write_result(name, payload)
    print(f"training: {throughput}ZeRO-3 model state per rank = {ratio:.3f} x DDP ({args.precision}, "
          f"{n_params / 1e6:.1f}M parameters); autocast {payload['autocast_vs_fp32_tokens_per_s_ratio']:.2f}x "
          f"fp32's tokens/s; {path}")


if __name__ == "__main__":
    main()
