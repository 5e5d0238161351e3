"""CRAG's costs, in one run (CRAG Table 6: RAG 0.363 s, CRAG 0.512 s, Self-RAG 0.741 s, Self-CRAG
0.908 s per instance, i.e. CRAG/RAG 1.41, Self-CRAG/Self-RAG 1.23, Self-RAG/RAG 2.04):

1. the retrieval evaluator scoring the (question, document) pairs of the held-out QA questions'
   top-K, batched (`crag.evaluator.batch_size` pairs per forward pass, one call) vs one pair per call
   -> `evaluator_batched_vs_single` (pairs/s ratio; target >= 5);
2. `crag` vs `rag` over the same questions, same retriever, same plain generator (the instruct LM
   `instruct_lm`), same batches -> `crag_vs_rag_time_ratio` (seconds per instance; goal <= 1.2);
3. `selfcrag` vs `selfrag` (retrieval `always`) and `selfrag` vs `rag` with the Self-RAG generator as
   RAG's plain generator (`generator: engine`) -> `selfcrag_vs_selfrag_time_ratio` (goal <= 1.2) and
   `selfrag_vs_rag_time_ratio` (goal <= 1.5). `--generator` names a trained Self-RAG generator;
   without one the tiny model with random weights stands in (timing only: it never emits EOS, so
   every continuation runs to its token cap; the result file says which was used);
4. the local rewriter over the same questions, in the same batches, with the engine keeping Table 7's
   few-shot prefix between calls (`GenerationParams.reuse_prefix`, what CRAG runs) vs every prompt
   run whole -> `rewriter_prefix` (seconds per question each way, the ratio, and whether the queries
   are the same).

Each method decodes two questions as a warm-up (first-call allocations, spaCy load), then the
question set timed; one torch thread throughout. The timed pass is broken down per component
(`breakdown_seconds_per_instance`): retrieval, the evaluator on documents and on strips, the query
rewriting, the web search and generation (the instruct LM's answers, or Self-RAG's whole beam:
its generations and critique reads), each timed at its tool; `other` is the rest (sentence
splitting, Python). CRAG's Table 6 times generation alone.

    python -m benchmarks.crag --run-dir runs/crag     # trained evaluator, SmolLM2, faiss + web index
    python -m benchmarks.crag --run-dir runs/crag --set methods.crag.upper=0.1 ...   # any override
    python -m benchmarks.crag --quick                 # < 1 min: small world, keyword search, untrained
                                                      # evaluator head, tiny model as both generators
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import tempfile
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks._common import add_engine_option, engine_choice, timer, write_result
from raypipe.eval.crag_steps import CragStep, count_steps
from raypipe.inference.engines.base import Engine, Generation, GenerationParams
from tests.keyword_searcher import KeywordSearcher

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
logger = logging.getLogger("benchmarks.crag")

PAPER = {"crag_vs_rag": 0.512 / 0.363, "selfcrag_vs_selfrag": 0.908 / 0.741, "selfrag_vs_rag": 0.741 / 0.363}
TARGETS = {"evaluator_batched_vs_single": 5.0, "crag_vs_rag_time_ratio": 1.2,
           "selfcrag_vs_selfrag_time_ratio": 1.2, "selfrag_vs_rag_time_ratio": 1.5}




#: what the timed tools record, in pipeline order
COMPONENTS = ("retrieval", "evaluator_documents", "evaluator_strips", "rewriting", "web_search", "generation")


class Breakdown:
    """Seconds and items (queries, pairs, prompts) per component, recorded by the timed tools below.
    An evaluator call scores documents when every pair's document is one the retriever returned (the
    trigger's call), strips otherwise (CRAG scores a strip that is its whole document once)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.seconds: Counter[str] = Counter()
        self.items: Counter[str] = Counter()
        self.documents: set[str] = set()

    @contextmanager
    def timing(self, component: str, items: int) -> Iterator[None]:
        with timer() as t:
            yield
        self.seconds[component] += t.seconds
        self.items[component] += items

    def per_instance(self, total: float, n: int) -> dict[str, float]:
        """Seconds per instance of each component and of the rest (`other`)."""
        out = {c: round(self.seconds[c] / n, 4) for c in COMPONENTS if c in self.seconds}
        return {**out, "other": round((total - sum(self.seconds.values())) / n, 4)}


class TimedSearcher:
    def __init__(self, inner: Any, component: str, breakdown: Breakdown):
        self.inner, self.component, self.breakdown = inner, component, breakdown

    def search(self, queries: list[str], k: int, requests: Sequence[int] | None = None):
        from raypipe.prompts import as_document

        with self.breakdown.timing(self.component, len(queries)):
            found = self.inner.search(queries, k, requests=requests)
        if self.component == "retrieval":
            self.breakdown.documents.update(as_document(p.title, p.text) for hits in found for p in hits)
        return found


class TimedEvaluator:
    def __init__(self, inner: Any, breakdown: Breakdown):
        self.inner, self.breakdown, self.batch_size = inner, breakdown, inner.batch_size

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        documents = all(d in self.breakdown.documents for _, d in pairs)
        with self.breakdown.timing("evaluator_documents" if documents else "evaluator_strips", len(pairs)):
            return self.inner.score(pairs)


class TimedEngine(Engine):
    """An engine whose generations count as rewriting when they carry Table 7's prompt."""

    def __init__(self, inner: Engine, breakdown: Breakdown):
        self.inner, self.breakdown = inner, breakdown
        self.tokenizer, self.prompt = inner.tokenizer, inner.prompt

    def generate(self, prompts: list[str], params: GenerationParams) -> list[Generation]:
        from raypipe.methods.crag.rewrite import REWRITE_PROMPT

        rewriting = bool(prompts) and REWRITE_PROMPT.split("\n", 1)[0] in prompts[0]
        with self.breakdown.timing("rewriting" if rewriting else "generation", len(prompts)):
            return self.inner.generate(prompts, params)

    def next_token_probs(self, prompts: list[str], tokens: tuple[str, ...]) -> list[dict[str, float]]:
        with self.breakdown.timing("generation", len(prompts)):
            return self.inner.next_token_probs(prompts, tokens)


class WholePrompts(Engine):
    """An engine whose generations never reuse a kept prompt prefix: the rewriter's baseline."""

    def __init__(self, inner: Engine):
        self.inner, self.tokenizer, self.prompt = inner, inner.tokenizer, inner.prompt

    def generate(self, prompts: list[str], params: GenerationParams) -> list[Generation]:
        from dataclasses import replace

        return self.inner.generate(prompts, replace(params, reuse_prefix=False))

    def next_token_probs(self, prompts: list[str], tokens: tuple[str, ...]) -> list[dict[str, float]]:
        return self.inner.next_token_probs(prompts, tokens)


def rewriter_prefix(lm: Engine, questions: list[str], batch_size: int) -> dict:
    """The local rewriter with its kept prefix and without, the same batches each way; the kept pass
    starts from the prefix its warm-up left, as every CRAG batch after an engine's first does."""
    from raypipe.methods.crag.rewrite import LMRewriter

    batches = [questions[i:i + batch_size] for i in range(0, len(questions), batch_size)]
    LMRewriter(lm).rewrite(questions[:2])  # warm-up: first-call allocations, and the kept prefix
    with timer() as t_whole:
        whole = [rw.query for b in batches for rw in LMRewriter(WholePrompts(lm)).rewrite(b)]
    with timer() as t_kept:
        kept = [rw.query for b in batches for rw in LMRewriter(lm).rewrite(b)]
    n = len(questions)
    return {"questions": n, "seconds_per_question": {"kept_prefix": round(t_kept.seconds / n, 4),
                                                     "whole_prompts": round(t_whole.seconds / n, 4)},
            "whole_vs_kept_time_ratio": round(t_whole.seconds / t_kept.seconds, 3), "same_queries": kept == whole}


def timed_tools(toolkit, breakdown: Breakdown):
    """`toolkit` with every tool timed into `breakdown`."""
    def wrap(name: str, tool: Any) -> Any:
        if name in ("engine", "lm"):
            return TimedEngine(tool, breakdown)
        if name == "evaluator":
            return TimedEvaluator(tool, breakdown)
        return TimedSearcher(tool, "retrieval" if name == "retriever" else "web_search", breakdown)

    return toolkit.map(wrap)


def untrained_evaluator(folder: Path) -> Path:
    """An evaluator folder with all-MiniLM-L6-v2 and a fresh head (timing only: scores are noise)."""
    from raypipe.models import minilm_path
    from raypipe.retrieval.cross_encoder import MANIFEST, OUTPUT, load_cross_encoder

    model, tokenizer = load_cross_encoder(minilm_path())
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    (folder / MANIFEST).write_text(json.dumps({"kind": "crag-retrieval-evaluator", "output": OUTPUT,
                                               "base_model": "untrained (benchmark)"}))
    return folder


def tiny_generator(work: Path, world: Path) -> Path:
    from raypipe.models import build_tiny_model, world_texts
    from raypipe.settings.models import TinyModelConfig

    cfg = TinyModelConfig(out_dir=str(work / "tiny"), tokenizer_train_texts=1000)
    return build_tiny_model(cfg, world_texts(world, limit=cfg.tokenizer_train_texts), work / "tiny")


def quick_tools(work: Path, cfg, kind: str):
    """A small world searched by keywords, the untrained evaluator, the tiny model as LM and engine."""
    import pyarrow.parquet as pq

    from raypipe.data.world import synthesize
    from raypipe.inference.engines import make_engine
    from raypipe.methods.base import Toolkit
    from raypipe.retrieval.cross_encoder import CrossEncoderRetrievalEvaluator
    from raypipe.settings.data import WorldConfig
    from raypipe.settings.models import EngineConfig

    world = work / "world"
    synthesize(WorldConfig(out_dir=str(world), instances=200, seed=0, eval_instances=12))
    tiny = tiny_generator(work, world)
    engine = make_engine(str(tiny), EngineConfig(kind=kind, batch_size=16))
    evaluator = CrossEncoderRetrievalEvaluator(untrained_evaluator(work / "evaluator"),
                                               batch_size=cfg.crag.evaluator.batch_size, device="cpu")
    toolkit = Toolkit(engine=engine, lm=engine, evaluator=evaluator,
                      retriever=KeywordSearcher(pq.read_table(world / "passages").to_pylist()),
                      web=KeywordSearcher(pq.read_table(world / "web" / "passages").to_pylist()))
    return toolkit, world / "eval", "tiny untrained (quick)", "tiny untrained (quick)"


def full_tools(work: Path, cfg, generator: str | None, kind: str):
    """The run's dense retriever, web index, trained evaluator and instruct LM; the Self-RAG
    generator of `--generator`, or the tiny model with random weights."""
    from raypipe.tools import ToolSources, load_toolkit

    world = Path(cfg.world.out_dir)
    gen_path = Path(generator) if generator else tiny_generator(work, world)
    sources = ToolSources(str(gen_path), cfg.engine.model_copy(update={"kind": kind}), cfg.retrieval, cfg.instruct_lm,
                          cfg.crag.evaluator.model_copy(update={"device": "cpu"}))
    toolkit = load_toolkit({"engine", "retriever", "web", "evaluator", "lm"}, sources)
    return toolkit, world / "eval", cfg.instruct_lm, str(gen_path) if generator else "tiny, random weights (none trained)"


def requests_of(eval_dir: Path, limit: int):
    from raypipe.eval.datasets import read_eval_set

    items, _ = read_eval_set(eval_dir / "heldout_qa.jsonl", Path(tempfile.mkdtemp()), limit)
    return [item.request() for item in items]


def evaluator_pairs(toolkit, requests, top_k: int) -> list[tuple[str, str]]:
    from raypipe.methods.base import search_requests
    from raypipe.prompts import as_document

    docs = search_requests(toolkit.retriever, requests, top_k)
    return [(r.retrieval_text(), as_document(d.title, d.text)) for r, ds in zip(requests, docs, strict=True)
            for d in ds]


def batched_vs_single(evaluator, pairs: list[tuple[str, str]], single: int) -> dict:
    evaluator.score(pairs[:4])  # warm-up
    with timer() as t_b:
        evaluator.score(pairs)
    sample = pairs[:: max(1, len(pairs) // single)][:single]
    with timer() as t_s:
        for pair in sample:
            evaluator.score([pair])
    batched, one = len(pairs) / t_b.seconds, len(sample) / t_s.seconds
    return {"batched": {"pairs": len(pairs), "batch_size": evaluator.batch_size, "seconds": round(t_b.seconds, 3),
                        "pairs_per_s": round(batched, 2)},
            "single": {"pairs": len(sample), "seconds": round(t_s.seconds, 3), "pairs_per_s": round(one, 2)},
            "evaluator_batched_vs_single": batched / one}


def time_method(method, settings, batches, breakdown: Breakdown) -> tuple[float, list, dict]:
    """A warm-up batch, then the timed pass over all batches; (seconds, results of the timed pass,
    its breakdown per instance)."""
    method.decode(batches[0][:2], settings)
    breakdown.reset()
    with timer() as t:
        results = [r for b in batches for r in method.decode(b, settings)]
    n = sum(len(b) for b in batches)
    return t.seconds, results, {"seconds": breakdown.per_instance(t.seconds, n), "items": dict(breakdown.items)}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.crag", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes, finishes in under a minute")
    parser.add_argument("--run-dir", default="runs/crag", help="the run (world, indexes, evaluator, instruct_lm)")
    parser.add_argument("-c", "--config", help="raypipe config; --run-dir is applied on top")
    parser.add_argument("--generator", help="a trained Self-RAG generator (default: tiny, random weights)")
    parser.add_argument("--limit", type=int, default=None, help="held-out QA questions")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--set", action="append", default=[], help="config override, as `raypipe --set`")
    add_engine_option(parser)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    import torch

    from raypipe.config import load_config
    from raypipe.methods.crag.method import CRAG
    from raypipe.methods.rag.method import RAG
    from raypipe.methods.selfcrag.method import SelfCRAG
    from raypipe.methods.selfrag.method import SelfRAG

    torch.set_num_threads(1)
    cfg = load_config(args.config, ([] if args.quick else [f"run_dir={args.run_dir}"]) + args.set)
    with tempfile.TemporaryDirectory(prefix="bench_crag_") as tmp:
        if args.quick:
            toolkit, eval_dir, lm_name, gen_name = quick_tools(Path(tmp), cfg, engine_choice(args))
            limit, tokens, single = args.limit or 8, 8, 24
        else:
            toolkit, eval_dir, lm_name, gen_name = full_tools(Path(tmp), cfg, args.generator, engine_choice(args))
            limit, tokens, single = args.limit or 16, cfg.methods.crag.max_new_tokens, 48
        requests = requests_of(eval_dir, limit)
        engines = {"engine": type(toolkit.engine).__name__, "lm": type(toolkit.lm).__name__}
        top_k = cfg.methods.crag.top_k
        ev = batched_vs_single(toolkit.evaluator, evaluator_pairs(toolkit, requests, top_k), single)
        rewriter = rewriter_prefix(toolkit.lm, [r.retrieval_text() for r in requests], args.batch_size)
        breakdown = Breakdown()
        toolkit = timed_tools(toolkit, breakdown)
        batches = [requests[i:i + args.batch_size] for i in range(0, len(requests), args.batch_size)]
        rag_lm = cfg.methods.rag.model_copy(update={"generator": "lm", "max_new_tokens": tokens})
        crag_lm = cfg.methods.crag.model_copy(update={"generator": "lm", "max_new_tokens": tokens})
        rag_engine = rag_lm.model_copy(update={"generator": "engine"})
        sr_tokens = {"max_new_tokens": min(tokens, cfg.methods.selfrag.max_new_tokens)} if args.quick else {}
        selfrag = cfg.methods.selfrag.model_copy(update={"mode": "always", **sr_tokens})
        selfcrag = cfg.methods.selfcrag.model_copy(update={"mode": "always", **sr_tokens})
        t_rag, _, b_rag = time_method(RAG(toolkit), rag_lm, batches, breakdown)
        t_crag, crag_results, b_crag = time_method(CRAG(toolkit), crag_lm, batches, breakdown)
        t_rag_engine, _, b_rag_engine = time_method(RAG(toolkit), rag_engine, batches, breakdown)
        t_selfrag, _, b_selfrag = time_method(SelfRAG(toolkit), selfrag, batches, breakdown)
        t_selfcrag, _, b_selfcrag = time_method(SelfCRAG(toolkit), selfcrag, batches, breakdown)
    n = len(requests)
    steps = count_steps(step for r in crag_results if (step := CragStep.of(r.trace)) is not None)
    per = {k: v / n for k, v in {"rag_lm": t_rag, "crag_lm": t_crag, "rag_engine": t_rag_engine,
                                 "selfrag": t_selfrag, "selfcrag": t_selfcrag}.items()}
    payload = {
        "mode": "quick" if args.quick else "full",
        "instances": n, "top_k": top_k, "batch_size": args.batch_size, "engines": engines,
        "evaluator_batched_vs_single": ev.pop("evaluator_batched_vs_single"), "evaluator": ev,
        "crag_vs_rag_time_ratio": t_crag / t_rag,
        "selfcrag_vs_selfrag_time_ratio": t_selfcrag / t_selfrag,
        "selfrag_vs_rag_time_ratio": t_selfrag / t_rag_engine,
        "seconds_per_instance": per,
        "breakdown_seconds_per_instance": {k: b["seconds"] for k, b in (
            ("rag_lm", b_rag), ("crag_lm", b_crag), ("rag_engine", b_rag_engine), ("selfrag", b_selfrag),
            ("selfcrag", b_selfcrag))},
        "breakdown_items": {"crag_lm": b_crag["items"], "selfcrag": b_selfcrag["items"]},
        "crag_steps": steps,
        "rewriter_prefix": rewriter,
        "selfcrag_knowledge_passages": selfcrag.knowledge_passages,
        "plain_generator": str(lm_name), "selfrag_generator": gen_name,
        "max_new_tokens": tokens, "selfrag_settings": selfrag.model_dump(),
        "paper_table6": {k: round(v, 3) for k, v in PAPER.items()}, "targets": TARGETS,
    }
    path = write_result("crag", payload)
    keys = ("evaluator_batched_vs_single", "crag_vs_rag_time_ratio", "selfcrag_vs_selfrag_time_ratio",
            "selfrag_vs_rag_time_ratio")
    print(json.dumps({k: round(payload[k], 3) for k in keys}))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
