"""One table of every evaluated method on every eval set, beside the papers' figures: the
`results.md` that `raypipe eval` writes next to `metrics.json` (configs/results_table.yaml runs every
method on the learning-signal world).

A row is a method as configured (its own variant: Self-RAG's `mode`, not its sweeps; CRAG without
ablations), a column an eval set, QA first. Beside it stand the papers' 7B figures on the public set
nearest each of the world's held-out sets. Those numbers are not comparable with ours (other data, a
7B model against a 135M one, other retrievers); what a run can agree with is their *ordering*, so each
set gets our ordering, the papers' and how many pairs of methods come out in the papers' order (a
figure on another public set, e.g. Self-Reasoning's FEVER beside PubHealth, is shown but not ordered).

The papers' rows are theirs as printed; which row stands for a method is our choice, said in
`PAPER_ROWS`: CRAG's Table 1 has two blocks, the plain base model (LLaMA2-hf-7b) and the Self-RAG
generator used as a plain generator (SelfRAG-LLaMA2-7b), and a method's `generator` setting (`lm` or
`engine`) picks the block that matches it. No paper evaluates a plain instruction-tuned LM without
retrieval under these methods' settings; Self-RAG's Table 2 row for Alpaca 7B (instruction-tuned, no
retrieval) stands for `direct` with the instruct LM.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

from raypipe.eval.metrics import COLLAPSE_SHARE
from raypipe.eval.report import ordered_sets, score_text, set_name

#: readable method names, in the order the table lists them: the baselines first
METHOD_NAMES = {"direct": "no retrieval", "rag": "RAG", "crag": "CRAG", "selfrag": "Self-RAG",
                "selfcrag": "Self-CRAG", "self_reasoning": "Self-Reasoning"}

#: the public set a paper figure is on, by the world's held-out set it stands beside
PAPER_SETS = {"heldout_qa": "PopQA", "heldout_fact": "PubHealth", "heldout_mc": "ARC-Challenge",
              "heldout_longform": "Bio (FactScore)"}


@dataclass(frozen=True)
class PaperRow:
    """A paper's 7B row: where it is printed, and its figure per world set (on `PAPER_SETS[set]`, or on
    `other_sets[set]` where the paper used another public set)."""

    source: str
    figures: dict[str, float]
    other_sets: dict[str, str] = field(default_factory=dict)


def _four(popqa: float, pubhealth: float, arc: float, bio: float) -> dict[str, float]:
    return {"heldout_qa": popqa, "heldout_fact": pubhealth, "heldout_mc": arc, "heldout_longform": bio}


#: (method, its `generator` setting, None for a method without one) -> the papers' row standing for it
PAPER_ROWS: dict[tuple[str, str | None], PaperRow] = {
    ("direct", "lm"): PaperRow("Self-RAG Table 2, Alpaca 7B without retrieval", _four(23.6, 49.8, 45.0, 45.8)),
    ("rag", "lm"): PaperRow("CRAG Table 1, RAG on LLaMA2-hf-7b", _four(50.5, 48.9, 43.4, 44.9)),
    ("rag", "engine"): PaperRow("CRAG Table 1, RAG on SelfRAG-LLaMA2-7b", _four(52.8, 39.0, 53.2, 59.2)),
    ("crag", "lm"): PaperRow("CRAG Table 1, CRAG on LLaMA2-hf-7b", _four(54.9, 59.5, 53.7, 47.7)),
    ("crag", "engine"): PaperRow("CRAG Table 1, CRAG on SelfRAG-LLaMA2-7b", _four(59.8, 75.6, 68.6, 74.1)),
    ("selfrag", None): PaperRow("Self-RAG Table 2, Self-RAG 7B", _four(54.9, 72.4, 67.3, 81.2)),
    ("selfcrag", None): PaperRow("CRAG Table 1, Self-CRAG on SelfRAG-LLaMA2-7b", _four(61.8, 74.8, 67.2, 86.2)),
    ("self_reasoning", None): PaperRow("Self-Reasoning Table 1, Self-Reasoning 7B",
                                       {"heldout_qa": 54.2, "heldout_fact": 78.6}, {"heldout_fact": "FEVER"}),
}


def paper_row(method: str, generator: str | None) -> PaperRow | None:
    return PAPER_ROWS.get((method, generator))


def method_name(method: str) -> str:
    return METHOD_NAMES.get(method, method)


def _methods(rows: dict[str, Any]) -> list[str]:
    order = list(METHOD_NAMES)
    return sorted(rows, key=lambda m: (order.index(m), "") if m in order else (len(order), m))


def _score(summary: dict[str, Any]) -> float | None:
    """A set's score in percent: accuracy, or FactScore for a long-form set."""
    value = summary.get("accuracy")
    value = summary.get("factscore") if value is None else value
    return None if value is None else 100 * value


def _ordering(scores: dict[str, float]) -> str:
    ranked = sorted(scores.items(), key=lambda kv: -kv[1])
    out = method_name(ranked[0][0]) + f" {ranked[0][1]:.1f}"
    for (_, before), (method, value) in zip(ranked, ranked[1:], strict=False):
        out += f" {'=' if value == before else '>'} {method_name(method)} {value:.1f}"
    return out


def _agreement(ours: dict[str, float], papers: dict[str, float]) -> tuple[int, int]:
    """(pairs of methods ours orders as the papers do, pairs the papers order): pairs the papers tie
    are left out; a pair we tie and they do not counts as disagreeing."""
    agree = total = 0
    for a, b in combinations(sorted(set(ours) & set(papers)), 2):
        if papers[a] == papers[b]:
            continue
        total += 1
        agree += (ours[a] - ours[b]) * (papers[a] - papers[b]) > 0
    return agree, total


def _majority_baseline(by_variant: dict[str, Any]) -> float | None:
    """A closed set's majority-label accuracy in percent (the same for every variant: it reads the golds)."""
    answers = next(iter(by_variant.values())).get("answers")
    return None if answers is None else 100 * answers["majority_baseline"]


def _cell(summary: dict[str, Any]) -> str:
    collapsed = (summary.get("answers") or {}).get("collapsed")
    return f"{score_text(summary)}{' !' if collapsed else ''} ({100 * summary['retrieval_frequency']:.0f})"


def markdown_row(cells: list[str]) -> str:
    """One row of a markdown table."""
    return "| " + " | ".join(cells) + " |"


def results_markdown(metrics: dict[str, Any]) -> str:
    """The table of `metrics` (metrics.json of `raypipe eval`) as markdown: ours, the papers' rows,
    and per set both orderings with the share of pairs in the papers' order."""
    rows: dict[str, dict[str, Any]] = metrics["method_rows"]
    methods = _methods(rows)
    per_set = metrics["per_set"]
    sets = ordered_sets(per_set)
    run = metrics["run"]
    ours = {s: {m: v for m in methods if (v := _score(per_set[s][rows[m]["variant"]])) is not None} for s in sets}
    papers = {m: row for m in methods if (row := paper_row(m, rows[m]["generator"])) is not None}
    lines = [
        "# Every method on every eval set",
        "",
        f"Run {run['date'][:10]} on {run.get('cpu', 'an unrecorded CPU')} with `{run['command']}`. "
        f"Retrieval: {run['retriever']}. The first "
        f"{run['limit'] or 'all'} questions of each set; each method as configured (its own variant in "
        "`metrics.json`, beside its sweeps"
        f"{', decoded on the first ' + str(run['sweep_limit']) if run.get('sweep_limit') else ''}).",
        "",
        markdown_row(["method", "model", *(set_name(s) for s in sets)]),
        markdown_row(["---"] * (2 + len(sets))),
        # the headline variants' count: a sweep's variants may score fewer (`eval.sweep_limit`)
        markdown_row(["questions", "", *(str(max(v["n"] for v in per_set[s].values())) for s in sets)]),
    ]
    baselines = [_majority_baseline(per_set[s]) for s in sets]
    if any(b is not None for b in baselines):
        lines.append(markdown_row(["always the most frequent gold", "", *("-" if b is None else f"{b:.1f}" for b in baselines)]))
    for m in methods:
        cells = [_cell(per_set[s][rows[m]["variant"]]) for s in sets]
        lines.append(markdown_row([method_name(m), f"`{rows[m]['model']}`", *cells]))
    lines += ["", "Cells: accuracy % (retrieval frequency %); FS = FactScore %; - = no judged question "
              f"(creative instructions); ! = one answer to more than {COLLAPSE_SHARE:.0%} of the set's items "
              "(a collapse: the accuracy is a one-answer model's).", ""]
    compared = [s for s in sets if s in PAPER_SETS]
    if papers and compared:
        lines += [
            "## Beside the papers",
            "",
            "Their 7B figures on the public set nearest each of ours (not comparable in value: other data, "
            "models and retrievers; the ordering is what to compare).",
            "",
            markdown_row(["method", "paper row", *(f"{set_name(s)}: {PAPER_SETS[s]}" for s in compared)]),
            markdown_row(["---"] * (2 + len(compared))),
        ]
        for m, row in papers.items():
            cells = ["-" if s not in row.figures else
                     f"{row.figures[s]:.1f}" + (f" ({row.other_sets[s]})" if s in row.other_sets else "")
                     for s in compared]
            lines.append(markdown_row([method_name(m), row.source, *cells]))
        lines += ["", markdown_row(["set", "ours", "the papers", "pairs in the papers' order"]), markdown_row(["---"] * 4)]
        for s in compared:
            theirs = {m: row.figures[s] for m, row in papers.items() if s in row.figures and s not in row.other_sets}
            mine = {m: v for m, v in ours[s].items() if m in theirs}
            if len(mine) < 2:
                continue
            agree, total = _agreement(mine, theirs)
            lines.append(markdown_row([set_name(s), _ordering(mine), _ordering(theirs), f"{agree} of {total}"]))
    return "\n".join(lines) + "\n"
