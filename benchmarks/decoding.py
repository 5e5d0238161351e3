"""Self-RAG decoding on the jobs' engine (`--engine`: vLLM where it imports; tiny Llama, CPU, one torch
thread), in one run:

1. K = 5 passage continuations of each question expanded in one batched engine call vs one call per
   passage; the generated tokens must be identical (asserted) -> `batched_vs_sequential_ratio`;
2. greedy generation with the reflection read-out (token log-probs, exact group distributions) vs
   plain greedy generation of the same tokens -> `reflection_overhead` (a fraction).

Targets (issue 7): batched >= 2x sequential at K = 5; overhead <= 10%.

    python -m benchmarks.decoding            # full run
    python -m benchmarks.decoding --quick    # < 1 min
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import tempfile
from pathlib import Path

from benchmarks._common import add_engine_option, engine_choice, timer, write_result

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
logger = logging.getLogger("benchmarks.decoding")

K = 5
TARGETS = {"batched_vs_sequential_ratio": 2.0, "reflection_overhead": 0.10}
SIZES = {  # world instances, questions (each expanded with K passages), tokens per continuation, repeats
    "quick": {"instances": 200, "questions": 6, "max_new_tokens": 24, "repeats": 5},
    "full": {"instances": 2000, "questions": 40, "max_new_tokens": 64, "repeats": 3},
}


def build_inputs(work: Path, instances: int, questions: int) -> tuple[Path, list[list[str]]]:
    """A small world, the tiny base model (untrained) and, per held-out question, K continuation
    prompts `prompt + [Retrieval]<paragraph>...</paragraph>` as the decoder builds them."""
    import pyarrow.parquet as pq

    from raypipe.data.world import synthesize
    from raypipe.models import build_tiny_model, world_texts
    from raypipe.prompts import format_generator_prompt
    from raypipe.settings.data import WorldConfig
    from raypipe.settings.models import TinyModelConfig
    from raypipe.tokens import RETRIEVAL, format_paragraph

    world = work / "world"
    synthesize(WorldConfig(out_dir=str(world), instances=instances, seed=0, eval_instances=questions))
    model_dir = work / "model"
    model_cfg = TinyModelConfig(out_dir=str(model_dir), tokenizer_train_texts=2000)
    build_tiny_model(model_cfg, world_texts(world, limit=model_cfg.tokenizer_train_texts), model_dir)
    passages = pq.read_table(world / "passages").to_pylist()
    lines = (world / "eval" / "heldout_qa.jsonl").read_text().splitlines()[:questions]
    groups = []
    for i, line in enumerate(lines):
        prompt = format_generator_prompt(json.loads(line)["question"])
        chosen = [passages[(i * K + j) % len(passages)] for j in range(K)]
        groups.append([prompt + RETRIEVAL + format_paragraph(p["title"], p["text"]) for p in chosen])
    return model_dir, groups


def _params(engine, max_new_tokens: int, return_probs: bool):
    from raypipe.inference.engines.base import GenerationParams
    from raypipe.tokens import Group

    ids = engine.groups.ids
    return GenerationParams(max_new_tokens=max_new_tokens, stop_token_ids=tuple(ids[Group.RETRIEVE] + ids[Group.IS_USE]),
                            first_position_groups=(Group.IS_REL,), return_probs=return_probs)


def batched_vs_sequential(engine, groups: list[list[str]], params) -> dict:
    engine.generate(groups[0], params)  # warm-up
    with timer() as batched_t:
        batched = [g.token_ids for prompts in groups for g in engine.generate(prompts, params)]
    with timer() as sequential_t:
        sequential = [engine.generate([p], params)[0].token_ids for prompts in groups for p in prompts]
    identical = batched == sequential
    assert identical, "batched and one-by-one expansion generated different tokens"
    return {"k": K, "questions": len(groups), "tokens": sum(map(len, batched)),
            "batched_seconds": round(batched_t.seconds, 3), "sequential_seconds": round(sequential_t.seconds, 3),
            "batched_vs_sequential_ratio": round(sequential_t.seconds / batched_t.seconds, 2),
            "outputs_identical": identical}


def reflection_overhead(engine, groups: list[list[str]], max_new_tokens: int, repeats: int) -> dict:
    """Best of `repeats` for each side, alternating, so drift in machine load hits both alike."""
    with_probs, plain = _params(engine, max_new_tokens, True), _params(engine, max_new_tokens, False)
    times = {"with_probs": [], "plain": []}
    for _ in range(repeats):
        for name, params in (("plain", plain), ("with_probs", with_probs)):
            with timer() as t:
                tokens = [g.token_ids for prompts in groups for g in engine.generate(prompts, params)]
            times[name].append(t.seconds)
            if name == "plain":
                plain_tokens = tokens
            else:
                assert tokens == plain_tokens, "the reflection read-out changed the generated tokens"
    best = {name: min(ts) for name, ts in times.items()}
    return {"plain_seconds": round(best["plain"], 3), "with_probs_seconds": round(best["with_probs"], 3),
            "reflection_overhead": round(best["with_probs"] / best["plain"] - 1, 4)}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.decoding", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes, finishes in under a minute")
    add_engine_option(parser)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    size = SIZES["quick" if args.quick else "full"]

    import torch

    from raypipe.inference.engines import make_engine
    from raypipe.settings.models import EngineConfig

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="bench_decoding_") as tmp:
        model_dir, groups = build_inputs(Path(tmp), size["instances"], size["questions"])
        # fp32: the batched and one-by-one tokens are compared exactly (bf16 on vLLM is not reproducible)
        engine = make_engine(model_dir, EngineConfig(kind=engine_choice(args), batch_size=K, precision="fp32",
                                                     cpu_threads=1), device="cpu")
        expansion = batched_vs_sequential(engine, groups, _params(engine, size["max_new_tokens"], True))
        overhead = reflection_overhead(engine, groups, size["max_new_tokens"], size["repeats"])

    payload = {
        "quick": args.quick,
        "model": "tiny Llama (raypipe.settings.models.TinyModelConfig defaults), untrained, fp32, 1 torch thread",
        "engine": type(engine).__name__,
        "max_new_tokens": size["max_new_tokens"],
        **expansion,
        **overhead,
        "targets": TARGETS,
    }
    path = write_result("decoding", payload)
    print(f"decoding: K={K} batched {expansion['batched_seconds']}s vs one-by-one {expansion['sequential_seconds']}s "
          f"= {payload['batched_vs_sequential_ratio']}x (target {TARGETS['batched_vs_sequential_ratio']}x, "
          f"identical={payload['outputs_identical']}); reflection read-out overhead "
          f"{100 * payload['reflection_overhead']:.1f}% (target <= {100 * TARGETS['reflection_overhead']:.0f}%) -> {path}")


if __name__ == "__main__":
    main()
