"""The robustness curve of CRAG §5.6 (Fig. 3): how a method's score falls as accurate retrieval
results are removed at random, against the generator without retrieval.

The paper removes a part of the accurate results from Self-RAG's and Self-CRAG's retrieval on PopQA
and plots accuracy against the retrieval performance left, with a horizontal line for no retrieval.
Ours, for every evaluated method: each headline variant whose method searches the retriever under its
settings (Self-RAG's adaptive and always modes, CRAG, RAG, Self-CRAG, Self-Reasoning) is decoded
once more per rate above 0 of `eval.robustness.removal_rates`, as a variant `<name>_removed<rate>`
whose retriever is wrapped in `GoldRemovalSearcher` (raypipe.retrieval.perturb; the accurate results
of an item are its `passage_ids`); rate 0 is the variant's own eval. Only the dense retriever is
perturbed: CRAG's web search is the paper's live second source, which a weaker retriever leaves as it
is. "No retrieval" is every headline variant that uses neither the retriever nor the web (Self-RAG's
`never` mode); without one the plot has no baseline. The score is the set's own metric (accuracy, or
FactScore for a long-form set), per eval set whose items carry accurate passages.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from raypipe.config import RobustnessConfig
from raypipe.methods import get_method
from raypipe.methods.base import Variant

#: the `Variant.sweep` of a removal point
SWEEP = "retrieval_removal"


@dataclass(frozen=True)
class RemovalPlan:
    """The curve's points: `points[base][rate]` names the variant decoded there (the base itself at
    rate 0), `rates` the removal rate of every added variant, `no_retrieval` the baseline variants."""

    points: dict[str, dict[float, str]]
    rates: dict[str, float]
    no_retrieval: list[str]
    added: list[Variant]


def removal_name(base: str, rate: float) -> str:
    return f"{base}_removed{rate:g}"


def plan_removal(headline: list[Variant], cfg: RobustnessConfig) -> RemovalPlan:
    """The variants to add for `headline` (the evaluated methods' headline variants)."""
    points: dict[str, dict[float, str]] = {}
    rates: dict[str, float] = {}
    added: list[Variant] = []
    no_retrieval = []
    for v in headline:
        uses = get_method(v.method).uses(v.settings)
        if not uses & {"retriever", "web"}:
            no_retrieval.append(v.name)
        if "retriever" not in uses:
            continue
        points[v.name] = {}
        for rate in cfg.removal_rates:
            if rate == 0.0:
                points[v.name][rate] = v.name
                continue
            name = removal_name(v.name, rate)
            added.append(Variant(name, v.method, SWEEP, rate, v.settings))
            points[v.name][rate], rates[name] = name, rate
    return RemovalPlan(points, rates, no_retrieval, added)


def set_metric(summaries: dict[str, Any]) -> str | None:
    """The metric a set is scored by: FactScore for a long-form set, else accuracy (None: neither,
    e.g. creative instructions only)."""
    for key in ("factscore", "accuracy"):
        if any(s.get(key) is not None for s in summaries.values()):
            return key
    return None


def _removed_shares(predictions_dir: Path, names: list[str]) -> dict[str, dict[str, float | None]]:
    """variant -> set -> removed / accurate results found, over every search of the set's items."""
    out: dict[str, dict[str, float | None]] = {}
    for name in names:
        found: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        with (predictions_dir / f"{name}.jsonl").open(encoding="utf-8") as fh:
            for line in fh:
                row = json.loads(line)
                counts = row.get("retrieval_removal") or {}
                found[row["set"]][0] += counts.get("gold_hits", 0)
                found[row["set"]][1] += counts.get("removed", 0)
        out[name] = {s: (removed / hits if hits else None) for s, (hits, removed) in found.items()}
    return out


def robustness_metrics(plan: RemovalPlan, per_set: dict[str, dict[str, Any]], sets: set[str],
                       predictions_dir: Path, cfg: RobustnessConfig) -> dict[str, Any]:
    """metrics.json's `robustness`: per eval set in `sets` (those with accurate passages), its
    metric, each method's curve (rate, value, the realized removed share) and the no-retrieval
    values."""
    shares = _removed_shares(predictions_dir, list(plan.rates))
    metric, curves, baselines = {}, {}, {}
    for name in sorted(sets & per_set.keys()):
        key = set_metric(per_set[name])
        if key is None:
            continue
        metric[name] = key
        curves[name] = {base: [{"rate": rate, "value": per_set[name][variant][key],
                                "removed_share": shares.get(variant, {}).get(name, 0.0 if rate == 0 else None)}
                               for rate, variant in sorted(by_rate.items())]
                        for base, by_rate in plan.points.items()}
        baselines[name] = {v: per_set[name][v][key] for v in plan.no_retrieval}
    return {"removal_rates": cfg.removal_rates, "seed": cfg.seed, "metric": metric, "curves": curves,
            "no_retrieval": baselines}
