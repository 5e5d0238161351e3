"""`raypipe eval` (raypipe.jobs.eval): the evaluated methods (`eval.methods`, each with its sweeps) as a
Ray Data batch job over eval sets, then metrics and plots.

Outputs in `eval.out_dir`:
- predictions/<variant>.jsonl: one row per eval question (item fields, decoded text, option,
  citations, per-segment reflection probabilities and scores, correctness); a `.meta.json` beside it
  holds the fingerprint of generator weights, decoding config, retriever config and eval files, so a
  rerun decodes only variants whose inputs changed; `<variant>.partial.jsonl` while its pass runs
  (each result as it arrives: a stopped run's rerun decodes only the items not yet there);
- results.md: every method (as configured) on every eval set beside the papers' figures and orderings
  (raypipe.eval.results_table), from `method_rows` and `run` in metrics.json;
- metrics.json: `accuracy`, `exact_match`, `retrieval_frequency` and `factscore` keyed by headline
  variant (Self-RAG's never, adaptive, always; other methods by name; pooled over all sets), `per_set`
  and `overall` for every variant (Self-Reasoning's with `trajectory_parse_rate` and `parse_failures`
  by cause; CRAG's and Self-CRAG's with `crag`, what the corrective step did: raypipe.eval.crag_steps),
  `comparisons` (per set: Self-RAG adaptive against every other headline variant on the same items,
  McNemar's exact test, Holm-corrected; raypipe.eval.comparisons), each summary's accuracy with its
  95% interval and, for closed sets, the majority baseline, chance and macro-F1,
  the sweeps, `critique` (per variant of Self-RAG's beam: how often
  the generator's IsRel ranks the gold passage above a look-alike's, raypipe.eval.critique),
  `relevance_verdicts` (per Self-Reasoning variant and set: its `Relevant:` verdict against whether a
  gold passage was among the documents it read, raypipe.eval.relevance_verdict),
  `robustness` when `eval.robustness.enabled`, and
  `longform` (per long-form set with the world's ground truth, per variant: EM recall and ALCE
  citation recall and precision, judged by `trajectories.qc`'s support checker);
- threshold_sweep.png (paper Fig. 3c) and is_sup_weight_sweep.png (Fig. 3b); robustness.png (CRAG
  Fig. 3, raypipe.eval.robustness);
- rejects/<set>.rejects.jsonl for bad eval rows; `_SUCCESS` when complete.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shlex
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raypipe.config import EvalConfig, MethodsConfig
from raypipe.data.io import write_jsonl
from raypipe.disk import write_text
from raypipe.errors import ConfigError, DataError, ModelError
from raypipe.eval.comparisons import stated_comparisons
from raypipe.eval.crag_steps import describe as describe_steps
from raypipe.eval.critique import describe, variant_ranking
from raypipe.eval.datasets import EvalItem, read_eval_sets
from raypipe.eval.metrics import judge, summarize
from raypipe.eval.partial import PartialWriter, partial_path, read_partial, remove_partials
from raypipe.eval.plots import plot_robustness, plot_threshold_sweep, plot_weight_sweep
from raypipe.eval.predict import EvalPredictor, SearcherFactory, tools_used
from raypipe.eval.relevance_verdict import collapsed_verdicts, relevance_verdicts
from raypipe.eval.results_table import results_markdown
from raypipe.eval.robustness import RemovalPlan, plan_removal, robustness_metrics
from raypipe.logs import ProgressLog
from raypipe.methods import get_method
from raypipe.methods.base import Variant
from raypipe.provenance import provenance
from raypipe.runtime import ensure_ray
from raypipe.settings.cluster import RayConfig
from raypipe.settings.crag_tools import EvaluatorConfig, RewriterConfig
from raypipe.settings.data import SegmentationConfig
from raypipe.settings.models import EngineConfig
from raypipe.settings.retrieval import RetrievalConfig
from raypipe.settings.teachers import QualityConfig
from raypipe.tools import ToolSources

logger = logging.getLogger(__name__)

#: sweeps whose variants are headline rows (metrics.json's top-level keys, the demo's table)
HEADLINE_SWEEPS = ("mode", "method")
THRESHOLD_PLOT = "threshold_sweep.png"
WEIGHT_PLOT = "is_sup_weight_sweep.png"
ROBUSTNESS_PLOT = "robustness.png"
RESULTS_TABLE = "results.md"
#: a sentence splitter (FactScore's unit)
Split = Callable[[str], list[str]]


@dataclass(frozen=True)
class EvalSections:
    """The config sections eval reads: its own, every method's settings, the index, the engine, the
    tools' sources (the instruct LM's folder, CRAG's evaluator and `openai` rewriter), the citation
    checker of Self-Reasoning's quality control, the sentence splitter, and the Ray instance and
    progress cadence."""

    eval: EvalConfig
    methods: MethodsConfig
    retrieval: RetrievalConfig
    engine: EngineConfig
    instruct_lm: str
    evaluator: EvaluatorConfig
    qc: QualityConfig
    segmentation: SegmentationConfig
    ray: RayConfig
    progress_every_s: float
    rewriter: RewriterConfig = field(default_factory=RewriterConfig)


def eval_variants(cfg: EvalSections) -> list[Variant]:
    """Each evaluated method's variants (its settings under its own sweeps), method by method."""
    variants: dict[str, Variant] = {}
    for name in cfg.eval.methods:
        for v in get_method(name).variants(getattr(cfg.methods, name), getattr(cfg.eval.sweeps, name, None)):
            if variants.get(v.name, v).method != v.method:
                raise DataError(f"eval variant {v.name!r} is named by both {variants[v.name].method} and {v.method}")
            variants[v.name] = v
    return list(variants.values())


def _stamp(path: Path) -> list[Any]:
    stat = path.stat()
    return [str(path.resolve()), stat.st_size, stat.st_mtime_ns]


def _weights(folder: str | Path) -> list[Any] | str:
    """The stamps of a model folder's weight files (or its path when it has none yet)."""
    folder = Path(folder)
    weights = sorted([*folder.glob("*.safetensors"), *folder.glob("*.bin")])
    return [_stamp(w) for w in weights] or str(folder.resolve())


def generator_for(cfg: EvalSections, method: str) -> str:
    """The generator folder `method`'s `engine` tool loads: its own (`eval.generators`) or `eval.generator`."""
    return cfg.eval.generators.get(method, cfg.eval.generator)


def first_per_set(items: list[EvalItem], limit: int | None) -> list[EvalItem]:
    """The first `limit` items of each set, in order (all of them for None)."""
    if limit is None:
        return items
    taken: Counter[str] = Counter()
    kept = []
    for item in items:
        if taken[item.set] < limit:
            taken[item.set] += 1
            kept.append(item)
    return kept


def decoding_plan(cfg: EvalSections, items: list[EvalItem],
                  variants: list[Variant]) -> list[tuple[str, list[EvalItem], list[Variant]]]:
    """(what, rows, variants) to decode, in order: the headline variants on every read row, then the
    others (sweeps, ablations, robustness) on the first `eval.sweep_limit` rows of each set. Headline
    first, so a run stopped in the sweeps has its table."""
    headline = [v for v in variants if v.sweep in HEADLINE_SWEEPS]
    others = [v for v in variants if v.sweep not in HEADLINE_SWEEPS]
    plan = [("eval", items, headline), ("eval sweeps", first_per_set(items, cfg.eval.sweep_limit), others)]
    return [(what, rows, group) for what, rows, group in plan if rows and group]


def variants_by_generator(cfg: EvalSections, variants: list[Variant]) -> dict[str, list[Variant]]:
    """The variants grouped by the generator folder their method loads, in order: one decoding pass
    each, since an actor holds one generator."""
    groups: dict[str, list[Variant]] = defaultdict(list)
    for v in variants:
        groups[generator_for(cfg, v.method)].append(v)
    return dict(groups)


def _tool_models(cfg: EvalSections, method: str) -> dict[str, Any]:
    """The model folders (and settings) behind the tools `method` may use: retraining any of them
    makes a variant's predictions stale."""
    tools = get_method(method).tool_names
    models: dict[str, Any] = {}
    if "engine" in tools:
        models["generator"] = _weights(generator_for(cfg, method))
    if "lm" in tools:
        models["lm"] = _weights(cfg.instruct_lm)
    if "evaluator" in tools:
        models["evaluator"] = [_weights(cfg.evaluator.path), cfg.evaluator.model_dump(mode="json")]
    return models


def _engine_stamp(cfg: EvalSections) -> list[str]:
    """The engine and weights' dtype the generator will decode on, as resolved here: the engines agree
    in fp32 but not to the bit, and bf16 differs from fp32, so predictions of one are not the other's."""
    from raypipe.inference.engines import engine_kind
    from raypipe.models.device import decoding_dtype, pick_device

    return [engine_kind(cfg.engine.kind), str(decoding_dtype(cfg.engine.precision, pick_device()))]


def _fingerprint(cfg: EvalSections, variant: Variant, injected_retriever: bool, removal: float | None,
                 items: list[EvalItem]) -> str:
    """What a variant's predictions depend on. The items are named by (set, id) rather than by
    `eval.limit`, whose meaning (which rows a limit keeps) is the reader's and may change."""
    payload: dict[str, Any] = {
        "models": _tool_models(cfg, variant.method),
        "engine": _engine_stamp(cfg),
        "method": variant.method,
        "settings": variant.settings.model_dump(mode="json"),
        "retrieval": ("injected", cfg.retrieval.top_k) if injected_retriever else cfg.retrieval.model_dump(mode="json"),
        "sets": [_stamp(Path(p)) for p in cfg.eval.eval_sets],
        "passages": cfg.eval.passages,
        "items": hashlib.sha256(json.dumps([[i.set, i.id] for i in items]).encode()).hexdigest(),
    }
    if removal is not None:
        payload["removal"] = [removal, cfg.eval.robustness.seed]
    if cfg.eval.retrieval_noise.perturbs:  # absent when off: predictions of earlier runs stay current
        payload["retrieval_noise"] = cfg.eval.retrieval_noise.model_dump(mode="json")
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


#: one pass's decoding: the items to decode -> rows {"variant", "item", "result"} (JSON strings) as they come
DecodeRows = Callable[[list[EvalItem]], Iterable[dict[str, Any]]]


def _predict(cfg: EvalSections, items: list[EvalItem], variants: list[Variant], searcher_factory: SearcherFactory | None,
             removal: dict[str, float], predictions_dir: Path, prints: dict[str, str],
             what: str = "eval") -> Iterator[dict[str, list[tuple[EvalItem, dict[str, Any]]]]]:
    """Decode every item under every variant on an actor pool, one pass per generator (methods with
    their own in `eval.generators` get theirs); yields each pass's results, in input order per variant,
    as soon as it ends, so a run stopped in a later pass keeps the earlier ones' predictions (and
    within a pass, what `pass_results` kept)."""
    import ray

    ensure_ray(cfg.ray)
    gpus = cfg.eval.actor_gpus if ray.cluster_resources().get("GPU", 0) > 0 else 0
    passes = variants_by_generator(cfg, variants)
    for n, (generator, group) in enumerate(passes.items(), start=1):

        def decode(todo: list[EvalItem], generator: str = generator, group: list[Variant] = group):
            dataset = ray.data.from_items([{"item": item.to_json()} for item in todo])
            return dataset.map_batches(
                EvalPredictor,
                fn_constructor_kwargs={
                    "sources": ToolSources(generator, cfg.engine, cfg.retrieval, cfg.instruct_lm, cfg.evaluator,
                                           cfg.rewriter),
                    "variants": group,
                    "searcher_factory": searcher_factory,
                    "index": any(item.passages is None for item in items),
                    "removal": {v.name: removal[v.name] for v in group if v.name in removal},
                    "removal_seed": cfg.eval.robustness.seed,
                    "noise": cfg.eval.retrieval_noise,
                },
                compute=ray.data.ActorPoolStrategy(size=cfg.eval.actors),
                batch_size=cfg.eval.batch_size,
                num_cpus=cfg.eval.actor_cpus,
                num_gpus=gpus,
                memory=int(cfg.eval.actor_memory_gib * 2**30),
            ).iter_rows()

        yield pass_results(decode, items, [v.name for v in group], predictions_dir, prints,
                           f"{what} pass {n} of {len(passes)} ({generator})", every_s=cfg.progress_every_s)


def pass_results(decode: DecodeRows, items: list[EvalItem], group: list[str], predictions_dir: Path,
                 prints: dict[str, str], label: str,
                 every_s: float | None = None) -> dict[str, list[tuple[EvalItem, dict[str, Any]]]]:
    """One pass's results per variant, in input order: what a stopped run kept for the same
    fingerprints (raypipe.eval.partial), then `decode` over the items some variant still lacks, each
    result kept as it arrives; a progress line every tenth and at least every `every_s` seconds
    between results where stderr is not a terminal."""
    order = {(item.set, item.id): i for i, item in enumerate(items)}
    kept = {name: read_partial(partial_path(predictions_dir, name), prints[name]) for name in group}
    todo = [item for item in items if any((item.set, item.id) not in kept[name] for name in group)]
    by_variant = {name: [(items[order[key]], result) for key, result in kept[name].items() if key in order]
                  for name in group}
    if len(todo) < len(items):
        logger.info("%s: %d of %d items kept from a stopped run", label, len(items) - len(todo), len(items))
    progress = ProgressLog(label, len(todo) * len(group), every_s=every_s)
    writer = PartialWriter(predictions_dir, {name: prints[name] for name in group}, kept)
    try:
        for row in decode(todo) if todo else ():
            item, result = EvalItem.from_json(row["item"]), json.loads(row["result"])
            if writer.add(row["variant"], (item.set, item.id), result):
                by_variant[row["variant"]].append((item, result))
            progress.step()
    finally:
        writer.close()
    for rows in by_variant.values():
        rows.sort(key=lambda pair: order[(pair[0].set, pair[0].id)])
    return by_variant


def _prediction_row(item: EvalItem, result: dict[str, Any], split: Split | None) -> dict[str, Any]:
    scored = judge(item.task, item.golds, item.choices, result, split)
    return {"id": item.id, "set": item.set, "task": item.task, "instruction": item.instruction, "input": item.input,
            "golds": list(item.golds), "choices": item.choices, **result,
            "correct": scored.correct, "exact_match": scored.exact, "factscore": scored.factscore}


def _summaries(predictions_dir: Path, variants: list[Variant], split: Split | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(per set -> variant -> summary, variant -> pooled summary) from the prediction files."""
    per_set: dict[str, dict[str, Any]] = defaultdict(dict)
    overall: dict[str, Any] = {}
    for v in variants:
        by_set: dict[str, list] = defaultdict(list)
        with (predictions_dir / f"{v.name}.jsonl").open(encoding="utf-8") as fh:
            for line in fh:
                row = json.loads(line)
                by_set[row["set"]].append(judge(row["task"], tuple(row["golds"]), row["choices"], row, split))
        for name, scored in by_set.items():
            per_set[name][v.name] = summarize(scored)
        overall[v.name] = summarize([s for scored in by_set.values() for s in scored])
    return dict(per_set), overall


def collapsed_answers(per_set: dict[str, Any]) -> list[str]:
    """One line per (set, variant) whose closed-set answers collapsed to one (`metrics.answer_collapse`):
    its accuracy is then the one-answer baseline's, whatever the table's ordering says."""
    lines = []
    for set_name, by_variant in per_set.items():
        for variant, summary in by_variant.items():
            answers = summary.get("answers")
            if answers and answers["collapsed"]:
                lines.append(f"{variant} answers {answers['top_answer']!r} to {answers['top_answer_share']:.0%} of "
                             f"{set_name}; the golds are {answers['majority_label']!r} for "
                             f"{answers['majority_baseline']:.0%}, so its accuracy ({summary['accuracy']:.1%}) is a "
                             f"one-answer model's, not a judgement per item")
    return lines


def _sweep(per_set: dict[str, Any], variants: list[Variant], sweep: str, key: str) -> dict[str, list[dict]]:
    return {name: [{key: v.value, **by_variant[v.name]} for v in variants if v.sweep == sweep]
            for name, by_variant in per_set.items()}


def _citation_sets(cfg: EvalSections, items: list[EvalItem]) -> dict[str, str]:
    """The long-form sets whose rows carry the world's ground truth (name -> file): Self-Reasoning's
    citation metrics score them. Checked before decoding, since the scores read the cited passages'
    texts from the passages table."""
    from raypipe.eval.longform import has_citation_truth

    longform = {item.set for item in items if item.task == "longform"}
    sets = {Path(p).stem: p for p in cfg.eval.eval_sets if Path(p).stem in longform and has_citation_truth(p)}
    if sets and not Path(cfg.retrieval.index.passages).exists():
        raise ConfigError(f"retrieval.index.passages: no passages table at {cfg.retrieval.index.passages}; the "
                          f"citation metrics of {', '.join(sorted(sets))} read the cited passages from it")
    return sets


def _longform_citations(cfg: EvalSections, predictions_dir: Path, variants: list[Variant],
                        sets: dict[str, str]) -> dict[str, dict[str, Any]]:
    """set -> variant -> EM recall, citation recall and precision (Self-Reasoning's long-form metrics)."""
    if not sets:
        return {}
    from raypipe.eval.citations import make_checker
    from raypipe.eval.longform import longform_metrics

    checker = make_checker(cfg.qc)
    return {name: {v.name: longform_metrics(predictions_dir / f"{v.name}.jsonl", path, cfg.retrieval.index.passages,
                                            checker, set_name=name)
                   for v in variants}
            for name, path in sets.items()}


def method_rows(cfg: EvalSections, variants: list[Variant]) -> dict[str, dict[str, Any]]:
    """Per evaluated method: its own variant (the one decoded with `methods.<name>` as configured),
    the model folder it answered with, and its `generator` setting (which paper row stands beside it)."""
    rows = {}
    for method in cfg.eval.methods:
        settings = getattr(cfg.methods, method)
        own = next((v.name for v in variants if v.method == method and v.settings.model_dump() == settings.model_dump()),
                   None)
        if own is None:  # a sweep that leaves the configured setting out: no row
            continue
        uses = get_method(method).uses(settings)
        model = generator_for(cfg, method) if "engine" in uses else cfg.instruct_lm if "lm" in uses else None
        rows[method] = {"variant": own, "model": model, "generator": getattr(settings, "generator", None)}
    return rows


def _run_record(cfg: EvalSections) -> dict[str, Any]:
    """When, where and how this eval ran, and with which retriever: the header of results.md, and the
    provenance (commit, date, CPU kind, cores) of README's figures drawn from metrics.json."""
    encoder = cfg.retrieval.encoder
    return {**provenance(), "command": shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]),
            "retriever": f"{encoder.kind}{' ' + encoder.path if encoder.path else ''} over "
                         f"{cfg.retrieval.index.out_dir} ({cfg.retrieval.index.factory}), {_k_of(cfg)}",
            "limit": cfg.eval.limit, "sweep_limit": cfg.eval.sweep_limit}


def _k_of(cfg: EvalSections) -> str:
    """The evaluated methods' K: one figure when they share it, else each method's."""
    ks = {m: getattr(cfg.methods, m).top_k for m in cfg.eval.methods}
    if len(set(ks.values())) <= 1:
        return f"K = {next(iter(ks.values()), cfg.retrieval.top_k)}"
    return "K per method: " + ", ".join(f"{m} {k}" for m, k in ks.items())


def _pair(recall: float | None, precision: float | None) -> str:
    return " / ".join("-" if x is None else f"{x:.2f}" for x in (recall, precision))


def evaluate(cfg: EvalSections, searcher_factory: SearcherFactory | None = None) -> dict[str, Any]:
    """Evaluate `cfg.eval.methods` with `cfg.eval.generator` on `cfg.eval.eval_sets`, every variant.

    `searcher_factory` replaces the configured dense retriever (built from `cfg.retrieval` in each
    actor); it is pickled to the actors, so it must be a picklable callable.
    """
    start = time.perf_counter()
    out = Path(cfg.eval.out_dir)
    for method in cfg.eval.methods:
        generator = generator_for(cfg, method)
        if "engine" in get_method(method).tool_names and not (Path(generator) / "config.json").is_file():
            key = f"eval.generators.{method}" if method in cfg.eval.generators else "eval.generator"
            raise ModelError(f"{key}: no model folder at {generator}")
    if "evaluator" in tools_used(eval_variants(cfg)):
        from raypipe.retrieval.cross_encoder import require_evaluator

        require_evaluator(cfg.evaluator.path)
    items, reports = read_eval_sets(cfg.eval.eval_sets, out / "rejects", cfg.eval.limit, cfg.eval.passages)
    if not items:
        raise DataError("no valid eval rows in any eval set", file=", ".join(cfg.eval.eval_sets))
    citation_sets = _citation_sets(cfg, items)
    (out / "_SUCCESS").unlink(missing_ok=True)
    predictions_dir = out / "predictions"
    variants = eval_variants(cfg)
    headline = [v.name for v in variants if v.sweep in HEADLINE_SWEEPS]
    plan: RemovalPlan | None = None
    if cfg.eval.robustness.enabled:
        plan = plan_removal([v for v in variants if v.sweep in HEADLINE_SWEEPS], cfg.eval.robustness)
        variants += plan.added
    removal = plan.rates if plan else {}
    stages = decoding_plan(cfg, items, variants)
    rows_of = {v.name: rows for _, rows, group in stages for v in group}
    prints = {v.name: _fingerprint(cfg, v, searcher_factory is not None, removal.get(v.name), rows_of[v.name])
              for v in variants}
    split = None
    if any(item.task == "longform" for item in items):
        from raypipe.data.segment import Segmenter  # spaCy: only FactScore needs it

        split = Segmenter(cfg.segmentation).split

    def finished(v: Variant) -> bool:
        meta = predictions_dir / f"{v.name}.meta.json"
        return meta.is_file() and json.loads(meta.read_text()).get("fingerprint") == prints[v.name]

    pending = [v for v in variants if not finished(v)]
    # a sweep point at the method's own setting (threshold 0.2 = adaptive; the IsSup weight sweep at
    # weight 1 = always) decodes exactly what that variant decodes: once, written under both names
    alike: dict[str, list[str]] = defaultdict(list)
    for v in pending:
        alike[prints[v.name]].append(v.name)
    decode = [v for v in pending if alike[prints[v.name]][0] == v.name]
    if decode:
        logger.info("decoding %d items under %d variants (%d already done, %d the same as another)", len(items),
                    len(decode), len(variants) - len(pending), len(pending) - len(decode))
    decode_names = {v.name for v in decode}
    for what, rows, group in stages:
        todo = [v for v in group if v.name in decode_names]
        if not todo:
            continue
        for decoded in _predict(cfg, rows, todo, searcher_factory, removal, predictions_dir, prints, what):
            for name, results in decoded.items():
                lines = [_prediction_row(item, result, split) for item, result in results]
                for alias in alike[prints[name]]:
                    write_jsonl(lines, predictions_dir / f"{alias}.jsonl")
                    meta = {"fingerprint": prints[alias], "variant": alias, "n": len(results)}
                    write_text(predictions_dir / f"{alias}.meta.json", json.dumps(meta, indent=2) + "\n")
                remove_partials(predictions_dir, [name])
    per_set, overall = _summaries(predictions_dir, variants, split)
    sweeps = {"threshold": _sweep(per_set, variants, "threshold", "threshold"),
              "is_sup_weight": _sweep(per_set, variants, "is_sup_weight", "w_is_sup")}
    plots = {}
    if any(sweeps["threshold"].values()):
        plots["threshold"] = str(plot_threshold_sweep(sweeps["threshold"], out / THRESHOLD_PLOT))
    if any(sweeps["is_sup_weight"].values()):
        plots["is_sup_weight"] = str(plot_weight_sweep(sweeps["is_sup_weight"], out / WEIGHT_PLOT))
    robustness = None
    if plan is not None:
        with_gold = {item.set for item in items if item.passage_ids}
        robustness = robustness_metrics(plan, per_set, with_gold, predictions_dir, cfg.eval.robustness)
        if robustness["curves"]:
            plots["robustness"] = str(plot_robustness(robustness, out / ROBUSTNESS_PLOT))
    longform = _longform_citations(cfg, predictions_dir, variants, citation_sets)
    parsing = {v: {"rate": round(m["trajectory_parse_rate"], 3), "failures": m["parse_failures"]}
               for v, m in overall.items() if m["trajectory_parse_rate"] is not None}
    steps = {v: describe_steps(overall[v]["crag"]) for v in headline if overall[v]["crag"] is not None}
    gold = {(item.set, item.id): set(item.passage_ids) for item in items if item.passage_ids}
    critique = {v.name: ranking for v in variants
                if (ranking := variant_ranking(predictions_dir / f"{v.name}.jsonl", gold)) is not None}
    verdicts = {v.name: found for v in variants
                if (found := relevance_verdicts(predictions_dir / f"{v.name}.jsonl", gold)) is not None}
    collapsed = collapsed_answers(per_set) + collapsed_verdicts(verdicts)
    comparisons = stated_comparisons(predictions_dir, headline)
    for warning in collapsed:
        logger.warning("COLLAPSE: %s", warning)
    metrics = {
        "generator": cfg.eval.generator,
        "methods": cfg.eval.methods,
        "method_rows": method_rows(cfg, variants),
        "run": _run_record(cfg),
        **({"retrieval_noise": cfg.eval.retrieval_noise.model_dump(mode="json")}
           if cfg.eval.retrieval_noise.perturbs else {}),
        **{key: {h: overall[h][key] for h in headline}
           for key in ("accuracy", "exact_match", "retrieval_frequency", "factscore")},
        "per_set": per_set,
        "overall": overall,
        **({"comparisons": comparisons} if comparisons else {}),
        "sweeps": sweeps,
        **({"critique": critique} if critique else {}),
        **({"relevance_verdicts": verdicts} if verdicts else {}),
        **({"robustness": robustness} if robustness is not None else {}),
        **({"longform": longform} if longform else {}),
        **({"answer_collapse": collapsed} if collapsed else {}),
        "eval_sets": {name: r.as_dict() for name, r in reports.items()},
        "plots": plots,
    }
    write_text(out / "metrics.json", json.dumps(metrics, indent=2) + "\n")
    write_text(out / RESULTS_TABLE, results_markdown(metrics))
    (out / "_SUCCESS").touch()
    quirks = {name: r.passages for name, r in reports.items() if r.passages}
    return {
        "out_dir": str(out),
        "eval rows": {name: r.n_ok for name, r in reports.items()},
        "rejected rows": {name: r.n_rejected for name, r in reports.items()},
        **({"passages kept with a quirk or dropped": quirks} if quirks else {}),
        "accuracy": metrics["accuracy"],
        "retrieval_frequency": metrics["retrieval_frequency"],
        **({"citation recall / precision": {f"{name} {v}": _pair(m["citation_recall"], m["citation_precision"])
                                            for name, by_variant in longform.items() for v, m in by_variant.items()}}
           if longform else {}),
        **({"trajectory parse rate (failures by cause)": parsing} if parsing else {}),
        **({"CRAG's corrective step (all sets)": steps} if steps else {}),
        **({"one answer or verdict for (nearly) every item": collapsed} if collapsed else {}),
        **({"critique vs look-alikes": {name: describe(critique[name]["all"]) for name in headline if name in critique}}
           if any(name in critique for name in headline) else {}),
        "variants decoded": len(decode),
        "variants reused": len(variants) - len(decode),  # finished before, or the same as one decoded
        "plots": ", ".join(plots.values()) or "none",
        "seconds": round(time.perf_counter() - start, 1),
    }
