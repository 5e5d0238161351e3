"""Self-Reasoning decoding cost and trajectory parse rate, in one run (Self-Reasoning Table 5: 2.19 s
per NQ question against Self-RAG's 2.08 s, a ratio of 1.05, both 7B):

1. `self_reasoning` decodes the held-out QA and fact questions (retrieve top-K, one trajectory per
   question in one engine call per batch) -> seconds per question and `trajectory_parse_rate`, the
   share of outputs that parse as RAP/EAP/TAP trajectories;
2. the same-run baseline: Self-RAG's decoding at its paper settings whatever the config says
   (retrieval `always`, K continuations per segment, beam 2, depth 3, 100 tokens per segment) over
   the same questions, the same retriever and the same weights (the engine is shared, so both
   methods pay for the same model) -> `sr_vs_selfrag_time_ratio`.

    python -m benchmarks.self_reasoning --model runs/ls_lm/models/self_reasoning -c configs/self_reasoning.yaml
    python -m benchmarks.self_reasoning --quick     # tiny untrained model, keyword retriever, < 2 min
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import tempfile
from pathlib import Path

from benchmarks._common import add_engine_option, engine_choice, timer, write_result
from tests.keyword_searcher import KeywordSearcher

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
logger = logging.getLogger("benchmarks.self_reasoning")

PAPER_RATIO = 2.19 / 2.08




def quick_inputs(work: Path):
    import pyarrow.parquet as pq

    from raypipe.data.world import synthesize
    from raypipe.models import build_tiny_model, world_texts
    from raypipe.settings.data import WorldConfig
    from raypipe.settings.models import TinyModelConfig

    world = work / "world"
    synthesize(WorldConfig(out_dir=str(world), instances=200, seed=0, eval_instances=8))
    model = work / "model"
    cfg = TinyModelConfig(out_dir=str(model), tokenizer_train_texts=2000)
    build_tiny_model(cfg, world_texts(world, limit=cfg.tokenizer_train_texts), model)
    return model, KeywordSearcher(pq.read_table(world / "passages").to_pylist()), world / "eval"


def requests_of(eval_dir: Path, limit: int):
    from raypipe.eval.datasets import read_eval_set

    out = []
    for name in ("heldout_qa", "heldout_fact"):
        items, _ = read_eval_set(eval_dir / f"{name}.jsonl", Path(tempfile.mkdtemp()), limit)
        out += [item.request() for item in items]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.self_reasoning", description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--model", help="the self-reasoning model folder")
    parser.add_argument("-c", "--config", help="raypipe config (retrieval index, eval sets)")
    parser.add_argument("--limit", type=int, default=None, help="questions per eval set")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--top-k", type=int, default=None,
                        help="documents per question for both methods (default: the config's retrieval.top_k; "
                             "Table 5's is 5)")
    add_engine_option(parser)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    import torch

    from raypipe.config import load_config
    from raypipe.inference.engines import make_engine
    from raypipe.methods.base import Toolkit
    from raypipe.methods.self_reasoning.method import SelfReasoning
    from raypipe.methods.selfrag.method import SelfRAG
    from raypipe.methods.selfrag.settings import SelfRAGSettings

    torch.set_num_threads(1)
    cfg = load_config(args.config)
    with tempfile.TemporaryDirectory() as tmp:
        if args.quick:
            model, retriever, eval_dir = quick_inputs(Path(tmp))
            limit, sr_tokens = args.limit or 4, 48
        else:
            from raypipe.retrieval import load_retriever

            model = Path(args.model or cfg.training.self_reasoning.out_dir)
            retriever, eval_dir = load_retriever(cfg.retrieval), Path(cfg.world.out_dir) / "eval"
            limit, sr_tokens = args.limit or 50, cfg.methods.self_reasoning.max_new_tokens
        # the config's engine (its precision: the demo decodes in fp32), of the kind --engine asks
        engine_cfg = cfg.engine.model_copy(update={"kind": engine_choice(args), "batch_size": 16})
        engine = make_engine(str(model), engine_cfg)
        toolkit = Toolkit(engine=engine, retriever=retriever)
        requests = requests_of(eval_dir, limit)
        top_k = args.top_k or cfg.retrieval.top_k
        sr = SelfReasoning(toolkit)
        sr_settings = cfg.methods.self_reasoning.model_copy(update={"max_new_tokens": sr_tokens, "top_k": top_k})
        # Table 5 times Self-RAG at its own decoding settings (beam 2, depth 3, 100 tokens per segment:
        # SelfRAGSettings' defaults), not at a config's demo-sized caps (configs/demo.yaml: depth 2 x
        # 40 tokens, a fifth of what one trajectory may write)
        selfrag_settings = SelfRAGSettings(mode="always", top_k=top_k)
        batches = [requests[i:i + args.batch_size] for i in range(0, len(requests), args.batch_size)]
        with timer() as t_sr:
            results = [r for b in batches for r in sr.decode(b, sr_settings)]
        with timer() as t_selfrag:
            for b in batches:
                SelfRAG(toolkit).decode(b, selfrag_settings)
    n = len(requests)
    parsed = sum(r.trace.get("trajectory") is not None for r in results)
    payload = {
        "mode": "quick" if args.quick else "full",
        "model": str(model) if not args.quick else "tiny untrained (quick)",
        "questions": n, "top_k": top_k, "engine": type(engine).__name__, "precision": engine_cfg.precision,
        "sr_seconds_per_question": t_sr.seconds / n,
        "selfrag_seconds_per_question": t_selfrag.seconds / n,
        "sr_vs_selfrag_time_ratio": t_sr.seconds / t_selfrag.seconds,
        "paper_ratio": round(PAPER_RATIO, 3),
        "trajectory_parse_rate": parsed / n,
        "parse_failures": dict(sr.parse_failures),
        "selfrag_settings": selfrag_settings.model_dump(),
        "sr_max_new_tokens": sr_tokens,
    }
    path = write_result("self_reasoning", payload)
    print(json.dumps({k: payload[k] for k in ("sr_vs_selfrag_time_ratio", "trajectory_parse_rate",
                                               "sr_seconds_per_question", "selfrag_seconds_per_question")},
                     indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
