"""The jobs a user sees decode, timed on each engine: the demo's eval stage and the served Self-RAG
path. `benchmarks/engines.py` measures the engines' decode steps; these are the same engines inside
the jobs (Ray Data eval actors, Serve replicas), with everything around the decoding included:

- `eval_stage`: `raypipe eval` on the demo's run folder (its generator, critic, evaluator, index and
  held-out items, as `make demo` left them), once per engine setting, each into its own folder; the
  seconds, every headline variant's accuracy per set with its 95% interval, and every item whose
  answer differs between two settings;
- `serve_rps`: closed-loop requests/s against one replica of every deployment
  (`benchmarks.serve_load`'s app and load), the Generator on SmolLM2 on each engine.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Setting:
    """An engine and the precision of its weights."""

    kind: str
    precision: str

    @property
    def name(self) -> str:
        return f"{self.kind}_{self.precision}"


def eval_on(setting: Setting, config: Path, run_dir: Path, out_dir: Path) -> dict[str, Any]:
    """`raypipe eval` of the demo's config on `run_dir` with `setting`'s engine into `out_dir`: its
    seconds, its headline variants (the rows of the eval table) and, per set and headline variant, the
    accuracy, its 95% interval and the item count."""
    import ray

    from raypipe.config import load_config
    from raypipe.jobs.eval import run_eval

    cfg = load_config(config, [f"run_dir={run_dir}", f"engine.kind={setting.kind}",
                               f"engine.precision={setting.precision}", f"eval.out_dir={out_dir}"])
    try:
        summary = run_eval(cfg)
    finally:
        ray.shutdown()  # the eval actors and their engines go before the next setting's start
    metrics = json.loads((out_dir / "metrics.json").read_text())
    headline = list(metrics["accuracy"])
    return {"seconds": summary["seconds"], "headline": headline,
            "per_set": {name: {v: {"accuracy": s["accuracy"], "interval": s["accuracy_interval"], "n": s["n"]}
                               for v, s in by_variant.items() if v in headline}
                        for name, by_variant in metrics["per_set"].items()}}


def _answers(predictions: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """(set, item id) -> the answer (the chosen option of a closed-set item, else the text) and whether
    it was judged right."""
    out = {}
    with predictions.open(encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            answer = row["option"] if row.get("option") is not None else row["text"]
            out[(row["set"], row["id"])] = {"answer": answer, "correct": row["correct"]}
    return out


def differing_answers(a: Path, b: Path, variants: list[str]) -> list[dict[str, Any]]:
    """Every (variant, set, item) whose answer differs between the eval folders `a` and `b`, with both
    answers and verdicts; variants either folder lacks are skipped."""
    out = []
    for variant in variants:
        pa, pb = a / "predictions" / f"{variant}.jsonl", b / "predictions" / f"{variant}.jsonl"
        if not (pa.is_file() and pb.is_file()):
            continue
        left, right = _answers(pa), _answers(pb)
        if left.keys() != right.keys():
            raise ValueError(f"{variant}: the two evals judged other items ({pa}, {pb})")
        for key in sorted(left):
            if left[key]["answer"] != right[key]["answer"]:
                out.append({"variant": variant, "set": key[0], "id": key[1],
                            "a": left[key]["answer"], "b": right[key]["answer"],
                            "a_correct": left[key]["correct"], "b_correct": right[key]["correct"]})
    return out


def outside_intervals(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The (set, variant) figures of two `eval_on` results that differ by more than their 95% intervals:
    either accuracy outside the other's interval."""
    out = []
    for name, by_variant in a["per_set"].items():
        for variant, fa in by_variant.items():
            fb = b["per_set"].get(name, {}).get(variant)
            if fb is None or fa["accuracy"] is None or fb["accuracy"] is None:
                continue
            if not (fb["interval"][0] <= fa["accuracy"] <= fb["interval"][1]
                    and fa["interval"][0] <= fb["accuracy"] <= fa["interval"][1]):
                out.append(f"{name} / {variant}: {fa['accuracy']:.3f} vs {fb['accuracy']:.3f}")
    return out


def eval_stage(baseline: Setting, others: list[Setting], config: Path, run_dir: Path, work: Path) -> dict[str, Any]:
    """The demo's eval on `baseline` and on each of `others` (same items, same folders read): seconds,
    figures, each other setting's speed-up over the baseline, the figures outside each other's
    intervals and the items answered differently."""
    runs = {s.name: eval_on(s, config, run_dir, work / f"eval_{s.name}") for s in [baseline, *others]}
    base = runs[baseline.name]
    out: dict[str, Any] = {"baseline": baseline.name, "run_dir": str(run_dir), "runs": runs, "against_baseline": {}}
    for s in others:
        differing = differing_answers(work / f"eval_{baseline.name}", work / f"eval_{s.name}", base["headline"])
        out["against_baseline"][s.name] = {
            "speedup": round(base["seconds"] / runs[s.name]["seconds"], 3),
            "outside_intervals": outside_intervals(base, runs[s.name]),
            "differing_answers": len(differing), "differing": differing}
    return out


def serve_rps(model: Path, settings: list[Setting], work: Path, quick: bool = False) -> dict[str, Any]:
    """Requests/s and latency of the served Self-RAG path (`benchmarks.serve_load`'s load and sizes, the
    load held 90 s: a request of the real LM takes seconds) with the Generator on `model`, one replica of
    each deployment, once per engine setting."""
    import ray
    from ray import serve

    from benchmarks.serve_load import FULL, QUICK, app_config, build_world_index, free_port, measure
    from raypipe.runtime import use_local_worker_env
    from raypipe.settings.models import EngineConfig

    plan = QUICK if quick else replace(FULL, duration_s=90.0)
    _, retrieval = build_world_index(work, plan)
    use_local_worker_env()
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    port = free_port()  # Serve's proxy keeps the port it started on for every app after
    runs = {}
    try:
        for s in settings:
            engine = EngineConfig(kind=s.kind, precision=s.precision, cpu_threads=1, max_model_len=2048)
            runs[s.name] = measure(app_config(model, retrieval, plan, port, replicas=1, engine=engine), plan)
    finally:
        serve.shutdown()
        ray.shutdown()
    return {"plan": plan.__dict__, "runs": runs}
