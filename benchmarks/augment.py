"""Corpus augmentation at scale: the Ray Data pipeline vs a sequential loop (issue 6).

Full run: a 150k-instance synthetic world, the tiny critic and the MiniLM retriever through
`raypipe augment` (wall time, instances/s, peak RSS of the whole process tree, Ray workers included);
in the same run, the same stage functions as a plain loop in one process, stage after stage over a
2k subset (the shape of the reference scripts). `ratio_vs_sequential` = pipeline instances/s over loop
instances/s. The loop is also timed on one torch thread (half the subset): `ceiling_vs_sequential` =
cores x that rate / the loop's rate, the most that one single-threaded worker per core can gain over a
loop whose forward passes already use every core.

The critic is `--critic` (default: the demo's trained critic when `make demo` has built it, else an
untrained tiny model, which judges almost nothing worth retrieving and so measures the cheap branch;
the JSON says which); `--encoder-critic` builds an untrained encoder critic instead (MiniLM with
fresh heads: the demo's critic kind, whose memory and speed do not depend on its weights).

Every run also samples the model actors' memory shard by shard (benchmarks/_actor_memory.py):
`actor_rss_by_shard`, `actor_memory_growth` (each actor's mean RSS over the last tenth of the shards
over its mean over the first tenth, less 1, the largest: issue 60's "flat within 5%", read on a
>= 30,000-instance run) and `actor_memory_trend_mib_per_h` (each actor's fitted slope).

    python -m benchmarks.augment            # 150k instances
    python -m benchmarks.augment --quick    # 300 instances, < 1.5 min
    python -m benchmarks.augment --work runs/bench_augment   # resumable: rerun the same command
    python -m benchmarks.augment --instances 30000 --subset 200 --shard-size 500 --encoder-critic   # actor memory

With `--work` the run keeps its folder, and a rerun after a kill (a session's end, a lost machine)
reuses the world, index and sequential baseline and lets `raypipe augment` skip the shards already
written: the pipeline's rate is then all instances over the summed wall time of every attempt (each
attempt's elapsed time is saved every few seconds, so a killed attempt's time, and the partial shards
it lost, count against it), and the peak RSS is the highest of any attempt.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from benchmarks._actor_memory import ActorMemory, growth, trend_mib_per_hour
from benchmarks._common import PeriodicSampler, peak_rss_gib_tree, timer, write_result

REPO = Path(__file__).resolve().parent.parent
DEMO_CRITIC = Path("runs/demo/models/critic")


class PeakRss(PeriodicSampler):
    """The highest RSS of this process and all its descendants (raylet, Ray workers), read twice a second."""

    def __init__(self) -> None:
        super().__init__(every=0.5)
        self.peak = 0.0

    def sample(self) -> None:
        self.peak = max(self.peak, peak_rss_gib_tree())


class Attempts(PeriodicSampler):
    """The pipeline's attempts in a kept work folder (attempts.json): each one's elapsed seconds and
    peak RSS, saved every `every` seconds while it runs, so that a killed attempt still counts."""

    def __init__(self, path: Path, rss: PeakRss, every: float = 5.0):
        super().__init__(every)
        self.path, self.rss = path, rss
        self.past = json.loads(path.read_text()) if path.exists() else []

    def sample(self) -> None:
        now = {"wall_s": round(self.elapsed(), 1), "peak_rss_gib": round(self.rss.peak, 2)}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps([*self.past, now], indent=1) + "\n")
        tmp.replace(self.path)

    finish = sample

    def totals(self) -> tuple[float, float, int]:
        """(summed wall seconds, highest peak RSS, attempts) over every attempt, this one included."""
        every = json.loads(self.path.read_text())
        return sum(a["wall_s"] for a in every), max(a["peak_rss_gib"] for a in every), len(every)


def untrained_encoder_critic(folder: Path) -> Path:
    """An encoder critic folder of MiniLM with fresh heads (seeded), laid out as `raypipe train critic`
    lays out the demo's (its `training.critic` settings: input cut, input format), minus the training."""
    import torch

    from raypipe.config import load_config
    from raypipe.critic.encoder import write_manifest
    from raypipe.critic.encoder_model import load_aspect_heads, save_aspect_heads
    from raypipe.models import minilm_path

    if not (folder / "config.json").exists():
        demo = load_config(REPO / "configs" / "demo.yaml", []).training.critic
        torch.manual_seed(0)
        model, tokenizer = load_aspect_heads(minilm_path(), demo.encoder_layers)
        save_aspect_heads(model, tokenizer, folder)
        write_manifest(folder, str(minilm_path()), demo.encoder_layers, demo.max_length, demo.encoder_input)
    return folder


def sequential_loop(instances_dir: Path, cfg, limit: int, threads: int | None = None) -> tuple[int, float]:
    """The pipeline's steps, each over the whole subset before the next (no overlap, one process;
    torch uses its default threads, one per core, unless `threads` is given)."""
    import numpy as np
    import pyarrow.parquet as pq
    import torch

    from raypipe.augment import stages
    from raypipe.augment.pipeline import algorithm_steps, load_models
    from raypipe.augment.row_sampling import apply_sampling
    from raypipe.augment.state import InstanceState
    from raypipe.jobs.augment import augment_sections

    table = pq.read_table(instances_dir).slice(0, limit)
    batch = {c: np.array(table[c].to_pylist(), dtype=object) for c in table.column_names}
    steps = algorithm_steps(cfg.augment, cfg.retrieval.top_k, cfg.limits)
    default_threads = torch.get_num_threads()
    torch.set_num_threads(threads or default_threads)
    try:
        with timer() as t:
            models = load_models({kind for kind, _ in steps}, augment_sections(cfg))
            for kind, step in steps:
                batch = step(batch, **{kind: models[kind]})
            for i, raw in enumerate(batch["state"]):
                state = InstanceState.from_json(raw)
                apply_sampling(state, str(batch["id"][i]), str(batch["dataset"][i]), stages.render(state),
                               cfg.augment.sampling)
    finally:
        torch.set_num_threads(default_threads)
    return len(batch["id"]), t.seconds


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.augment",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="300 instances, < 1.5 min")
    parser.add_argument("--instances", type=int, help="corpus size (default 150000; quick 300)")
    parser.add_argument("--subset", type=int, help="sequential-loop subset (default 2000; quick 100)")
    parser.add_argument("--shard-size", type=int,
                        help="instances per input shard (default 5000; quick 100): the actors' memory is read per shard")
    parser.add_argument("--critic", help="critic model folder (default: the demo critic if built)")
    parser.add_argument("--encoder-critic", action="store_true",
                        help="an untrained encoder critic (MiniLM, fresh heads) instead of the default critic")
    parser.add_argument("--work", help="keep the run's folder here and resume from it (default: a temp "
                                       "folder, removed at the end)")
    args = parser.parse_args()
    n = args.instances or (300 if args.quick else 150_000)
    subset = args.subset or (100 if args.quick else 2000)
    shard_size = args.shard_size or (100 if args.quick else 5000)

    import ray

    from raypipe.config import load_config
    from raypipe.data.world import synthesize
    from raypipe.jobs.augment import run_augment
    from raypipe.jobs.index import run_build_index
    from raypipe.models import build_tiny_model, world_texts
    from raypipe.runtime import ensure_ray
    from raypipe.settings.data import WorldConfig
    from raypipe.settings.models import TinyModelConfig

    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="raypipe-bench-augment-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        world = work / "world"
        if not (world / "_SUCCESS").exists():
            synthesize(WorldConfig(out_dir=str(world), instances=n, seed=0, eval_instances=0, shard_size=shard_size))
        if args.critic:
            critic, critic_kind = Path(args.critic), "given"
        elif args.encoder_critic:
            critic, critic_kind = untrained_encoder_critic(work / "critic_encoder"), "untrained encoder"
        elif (DEMO_CRITIC / "config.json").exists():
            critic, critic_kind = DEMO_CRITIC, "demo (trained)"
        else:
            critic, critic_kind = work / "critic", "untrained tiny model"
            build_tiny_model(TinyModelConfig(out_dir=str(critic)), world_texts(world, limit=20_000), critic)
        overrides = [
            f"retrieval.index.passages={world / 'passages'}", f"retrieval.index.out_dir={work / 'index'}",
            "retrieval.index.embed_actors=2",
            f"augment.instances={world / 'instances'}", f"augment.critic={critic}",
            f"augment.out_dir={work / 'gen'}", "retrieval.top_k=3",
            # the quick run checks the benchmark's code, not the engine: HF starts in a second where each
            # vLLM engine (one per loop and per actor) takes ~25 s; the full run keeps `auto`
            *(["augment.critic_engine=hf"] if args.quick else []),
        ]
        cfg = load_config(None, overrides)
        ensure_ray(cfg.ray)
        run_build_index(cfg)

        baseline = work / "baseline.json"
        if not baseline.exists():
            # In a child process: the models the loop loads would otherwise stay in this process's
            # memory (Python does not hand it back) and count in the pipeline's peak RSS (the driver
            # held 1.4 GiB through the pipeline of the 2026-11-29 150k run, which ran the loop itself).
            with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as child:
                n_seq, seq_s = child.submit(sequential_loop, world / "instances", cfg, subset).result()
                n_one, one_s = child.submit(sequential_loop, world / "instances", cfg, subset // 2, 1).result()
            baseline.write_text(json.dumps([n_seq, seq_s, n_one, one_s]))
        n_seq, seq_s, n_one, one_s = json.loads(baseline.read_text())
        with PeakRss() as rss, ActorMemory(work / "gen") as actors, Attempts(work / "attempts.json", rss) as attempts:
            stats = run_augment(cfg)
        ray.shutdown()
        wall_s, peak_rss, n_attempts = attempts.totals()
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)

    instances = stats["row_counts"]["input"]  # every finished shard's, so a resumed run counts the whole corpus
    pipeline_rate = instances / wall_s
    sequential_rate = n_seq / seq_s
    one_thread_rate = n_one / one_s
    cores = os.cpu_count() or 1
    payload = {
        "n_instances": instances,
        "wall_s": round(wall_s, 1),
        "instances_per_s": round(pipeline_rate, 2),
        "peak_rss_gib": peak_rss,
        "actor_memory_growth": growth(actors.rows),
        "actor_memory_trend_mib_per_h": trend_mib_per_hour(actors.rows),
        "actor_rss_by_shard": actors.rows,
        "attempts": n_attempts,
        "sequential_subset": n_seq,
        "sequential_wall_s": round(seq_s, 1),
        "sequential_instances_per_s": round(sequential_rate, 2),
        "ratio_vs_sequential": round(pipeline_rate / sequential_rate, 2),
        # The loop's torch already spreads each forward pass over every core; one single-threaded
        # worker per core (the pipeline on CPU) can beat it by at most this much without doing less work.
        "sequential_one_thread_instances_per_s": round(one_thread_rate, 2),
        "ceiling_vs_sequential": round(cores * one_thread_rate / sequential_rate, 2),
        "critic": critic_kind,
        "shard_size": shard_size,
        "rows_written": stats["rows_written"],
        "retrieve_yes_share": stats["retrieve_yes_share"],
        "quick": args.quick,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    path = write_result("augment", payload)
    print(f"augment: {payload['n_instances']} instances in {payload['wall_s']} s "
          f"({payload['instances_per_s']}/s, {payload['ratio_vs_sequential']}x the sequential loop), "
          f"peak RSS {payload['peak_rss_gib']} GiB, model actors' growth first to last shard "
          f"{payload['actor_memory_growth']} -> {path}")


if __name__ == "__main__":
    main()
