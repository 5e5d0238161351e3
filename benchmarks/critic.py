"""Critic prediction throughput, in one run, on the tiny critic or any critic folder (`--model`):

1. batched (`distributions` on all rows, 64 per forward pass) vs one judgement per call, same process,
   one torch thread;
2. through Ray Data with 2 actors vs 1 (each actor 1 CPU and 1 torch thread, so the comparison is
   about parallelism, not about threads).

Targets (issue 4): batched >= 5x single, 2 actors >= 1.6x one. The Ray figures exclude actor start-up
(model loading): throughput counts rows arriving after the first output batch, which is the steady
state a long labeling job sees; the wall-clock ratio including start-up is reported beside it.

    python -m benchmarks.critic            # full run
    python -m benchmarks.critic --quick    # < 1 min
    python -m benchmarks.critic --quick --model runs/demo/models/smollm2   # another critic's cost
    python -m benchmarks.critic --model runs/demo/models/critic          # the demo's (encoder) critic

`--model` measures a critic folder of either kind (`raypipe.critic.predict.make_predictor`: an LM with
the reflection tokens, e.g. `raypipe models import`'s SmolLM2, or a trained encoder critic) on the same
judgements in place of the tiny critic: what it costs the augmentation, which asks the critic several
times per instance.
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time
from pathlib import Path

from benchmarks._common import timer, write_result

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
logger = logging.getLogger("benchmarks.critic")

BATCH_SIZE = 64
TARGETS = {"batched_vs_single_ratio": 5.0, "actors_2_vs_1_ratio": 1.6}
SIZES = {  # world instances, examples per aspect, single-prompt sample, Ray rows (prompts repeated)
    "quick": {"instances": 400, "per_aspect": 60, "single": 40, "ray_rows": 384},
    "full": {"instances": 2000, "per_aspect": 400, "single": 400, "ray_rows": 8000},
}


def build_inputs(work: Path, instances: int, per_aspect: int) -> tuple[Path, list[dict]]:
    """A small world, the tiny base model (the critic's architecture, untrained) and D_critic prompts."""
    from raypipe.config import RaypipeConfig
    from raypipe.critic.dataset import read_split
    from raypipe.data.world import synthesize
    from raypipe.jobs.label import run_label
    from raypipe.models import build_tiny_model, world_texts
    from raypipe.settings.data import WorldConfig
    from raypipe.settings.models import TinyModelConfig

    world = work / "world"
    synthesize(WorldConfig(out_dir=str(world), instances=instances, seed=0, eval_instances=0))
    model_dir = work / "model"
    model_cfg = TinyModelConfig(out_dir=str(model_dir), tokenizer_train_texts=2000)
    build_tiny_model(model_cfg, world_texts(world, limit=model_cfg.tokenizer_train_texts), model_dir)
    cfg = RaypipeConfig.model_validate({"label": {
        "instances": str(world / "instances"), "passages": str(world / "passages"),
        "out_dir": str(work / "critic_data"), "per_aspect": per_aspect, "dev_fraction": 0.0}})
    run_label(cfg)
    table = read_split(work / "critic_data", "train")
    rows = [{"id": r["id"], "prompt": r["prompt"], "aspect": r["aspect"], "example": r["example"]}
            for r in table.to_pylist()]
    return model_dir, rows


def examples_of(rows: list[dict]) -> list:
    """The judgements the rows hold, as every critic kind reads them."""
    from raypipe.critic.dataset import row_example

    return [row_example(r["aspect"], r["example"]) for r in rows]


def rows_per_second(predictor, rows: list[dict], one_at_a_time: bool) -> dict:
    """Throughput of `distributions` over all rows in one call, or called once per row (the naive
    loop a caller without batching would write)."""
    examples = examples_of(rows)
    predictor.distributions(examples[:2])  # warm-up: first-call allocations
    with timer() as t:
        if one_at_a_time:
            for example in examples:
                predictor.distributions([example])
        else:
            predictor.distributions(examples)
    return {"rows": len(rows), "seconds": round(t.seconds, 3), "rows_per_s": round(len(rows) / t.seconds, 2)}


def batched_vs_single(model_dir: Path, rows: list[dict], single_rows: int) -> dict:
    import torch

    from raypipe.critic.predict import make_predictor

    torch.set_num_threads(1)
    predictor = make_predictor(model_dir, batch_size=BATCH_SIZE, device="cpu", engine_kind="hf")
    sample = rows[:: max(1, len(rows) // single_rows)][:single_rows]  # every aspect, in proportion
    batched = rows_per_second(predictor, rows, one_at_a_time=False)
    single = rows_per_second(predictor, sample, one_at_a_time=True)
    return {"batched": {"batch_size": BATCH_SIZE, **batched}, "single": {"batch_size": 1, **single},
            "batched_vs_single_ratio": round(batched["rows_per_s"] / single["rows_per_s"], 2)}


class CriticActor:
    """A Ray Data actor holding one critic (one torch thread): adds each row's group distribution."""

    def __init__(self, model_dir: str):
        import torch

        from raypipe.critic.predict import make_predictor

        torch.set_num_threads(1)
        self.predictor = make_predictor(model_dir, batch_size=BATCH_SIZE, device="cpu", engine_kind="hf")

    def __call__(self, batch: dict) -> dict:
        rows = [{"aspect": a, "example": e} for a, e in zip(batch["aspect"], batch["example"], strict=True)]
        probs = self.predictor.distributions(examples_of(rows))
        return {"id": batch["id"], "probs": [p.tolist() for p in probs]}


def ray_throughput(model_dir: Path, rows: list[dict], actors: int) -> dict:
    import ray

    ds = ray.data.from_items(rows, override_num_blocks=max(8, len(rows) // BATCH_SIZE))
    out = ds.map_batches(CriticActor, fn_constructor_kwargs={"model_dir": str(model_dir)}, batch_size=BATCH_SIZE,
                         compute=ray.data.ActorPoolStrategy(size=actors), num_cpus=1.0)
    start = time.perf_counter()
    first_at, after_first, total = None, 0, 0
    for batch in out.iter_batches(batch_size=None, batch_format="pyarrow"):
        total += batch.num_rows
        if first_at is None:
            first_at = time.perf_counter()
        else:
            after_first += batch.num_rows
    end = time.perf_counter()
    steady = after_first / (end - first_at) if end > first_at else 0.0
    return {"actors": actors, "rows": total, "wall_seconds": round(end - start, 3),
            "wall_rows_per_s": round(total / (end - start), 2), "steady_rows_per_s": round(steady, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.critic", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes, finishes in under a minute")
    parser.add_argument("--model", type=Path, help="a critic folder to measure instead of the untrained tiny "
                        "critic: an LM holding the reflection tokens (e.g. runs/demo/models/smollm2) or a "
                        "trained encoder critic (e.g. runs/demo/models/critic)")
    args = parser.parse_args()
    if args.model:
        from raypipe.critic.encoder import is_encoder_critic
        from raypipe.models.folder import model_folder

        if not is_encoder_critic(args.model):
            model_folder(args.model)  # a wrong path fails here, before the inputs are built
    logging.basicConfig(level=logging.WARNING)
    size = SIZES["quick" if args.quick else "full"]

    from raypipe.runtime import ensure_ray
    from raypipe.settings.cluster import RayConfig

    with tempfile.TemporaryDirectory(prefix="bench_critic_") as tmp:
        tiny_dir, rows = build_inputs(Path(tmp), size["instances"], size["per_aspect"])
        model_dir = args.model.resolve() if args.model else tiny_dir
        local = batched_vs_single(model_dir, rows, size["single"])
        ray_rows = [{**r, "id": f"{r['id']}#{k}"} for k in range(-(-size["ray_rows"] // len(rows)))
                    for r in rows][: size["ray_rows"]]
        ensure_ray(RayConfig(num_cpus=2))
        import ray

        ray.data.DataContext.get_current().enable_progress_bars = False
        one = ray_throughput(model_dir, ray_rows, actors=1)
        two = ray_throughput(model_dir, ray_rows, actors=2)
        ray.shutdown()

    payload = {
        "quick": args.quick,
        "model": str(args.model) if args.model else "tiny Llama (raypipe.settings.models.TinyModelConfig defaults), untrained",
        "mean_prompt_chars": round(sum(len(r["prompt"]) for r in rows) / len(rows), 1),
        **local,
        "ray_1_actor": one,
        "ray_2_actors": two,
        "actors_2_vs_1_ratio": round(two["steady_rows_per_s"] / one["steady_rows_per_s"], 2),
        "actors_2_vs_1_wall_ratio": round(two["wall_rows_per_s"] / one["wall_rows_per_s"], 2),
        "targets": TARGETS,
    }
    path = write_result("critic", payload)
    print(f"critic: batched {local['batched']['rows_per_s']:.0f} rows/s vs single "
          f"{local['single']['rows_per_s']:.0f} rows/s = {payload['batched_vs_single_ratio']}x "
          f"(target {TARGETS['batched_vs_single_ratio']}x); Ray 2 actors vs 1 = "
          f"{payload['actors_2_vs_1_ratio']}x steady, {payload['actors_2_vs_1_wall_ratio']}x wall "
          f"(target {TARGETS['actors_2_vs_1_ratio']}x) -> {path}")


if __name__ == "__main__":
    main()
