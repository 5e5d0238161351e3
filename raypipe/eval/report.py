"""A finished eval, shown in the terminal: accuracy (FactScore for long-form sets) by set and retrieval
mode, what CRAG's corrective step did by set (when a CRAG-family method ran), and a few answers with
the passages they cite (what `make demo` prints after `raypipe eval`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

#: characters of an answer shown; untrained demo models can ramble for the whole length cap
ANSWER_CHARS = 160


def _cell(summary: dict[str, Any]) -> str:
    """`accuracy (retrieval frequency)`, plus the share of closed-set outputs that named no option
    when there are any: an accuracy of 0 then means off-format answers, not wrong ones. A set with
    no judged item (creative instructions only) shows "-" for accuracy; a long-form set (FactScore, no
    accuracy) shows `FS <score>`."""
    if summary.get("accuracy") is None and summary.get("factscore") is not None:
        accuracy = f"FS {100 * summary['factscore']:.1f}"
    else:
        accuracy = "-" if summary.get("accuracy") is None else f"{100 * summary['accuracy']:.1f}"
    cell = f"{accuracy} ({100 * summary['retrieval_frequency']:.0f})"
    if summary.get("no_option"):
        cell += f" [{100 * summary['no_option']:.0f}% no option]"
    return cell


def accuracy_table(metrics: dict[str, Any]) -> Table:
    """Rows: eval sets and all sets pooled; columns: accuracy or FactScore (retrieval frequency) per
    headline variant (Self-RAG's retrieval modes, other methods by name). The pooled row shows
    accuracy over the judged items, FactScore only when every set is long-form."""
    modes = list(metrics["accuracy"])
    table = Table(title="Eval: accuracy % or FactScore % (FS, long-form sets) (retrieval frequency %) "
                        "[closed-set outputs naming no option]")
    table.add_column("eval set")
    for mode in modes:
        table.add_column(mode, justify="right")
    rows = [*sorted(metrics["per_set"].items()), ("all", metrics["overall"])]
    for name, by_variant in rows:
        table.add_row(name, *(_cell(by_variant[m]) for m in modes))
    return table


#: the columns of the CRAG table: header -> the count in a `crag_steps.count_steps` summary
CRAG_COLUMNS: dict[str, Callable[[dict[str, Any]], int]] = {
    "Correct": lambda c: c["actions"]["correct"],
    "Incorrect": lambda c: c["actions"]["incorrect"],
    "Ambiguous": lambda c: c["actions"]["ambiguous"],
    "web searches": lambda c: c["web_searches"],
    "failed": lambda c: c["web_failures"],
    "empty": lambda c: c["web_empty"],
    "rewriter fell back": lambda c: c["rewriter_fallbacks"],
    "Correct kept best doc": lambda c: c["fallbacks"]["passing_document"],
    "read nothing": lambda c: c["fallbacks"]["no_knowledge"],
}


def crag_table(metrics: dict[str, Any]) -> Table | None:
    """Rows: (eval set, headline variant) for each variant with a corrective step, all sets pooled
    last; columns: items per action, web searches and those that failed or found nothing, queries
    searched raw because the rewriter fell back, and the two knowledge fallbacks (a Correct item
    whose strips were all filtered kept its best document; a failed web search left nothing to read).
    None when no headline variant is CRAG-family."""
    variants = [v for v in metrics["accuracy"] if metrics["overall"][v].get("crag")]
    if not variants:
        return None
    table = Table(title="CRAG's corrective step: items per action, web searches, fallbacks")
    for column in ("eval set", "variant", *CRAG_COLUMNS):
        table.add_column(column, justify="left" if column in ("eval set", "variant") else "right")
    for name, by_variant in [*sorted(metrics["per_set"].items()), ("all", metrics["overall"])]:
        for v in variants:
            counts = by_variant.get(v, {}).get("crag")
            if counts:
                table.add_row(name, v, *(str(count(counts)) for count in CRAG_COLUMNS.values()))
    return table


def sample_answers(out_dir: str | Path, variant: str = "adaptive", n: int = 3) -> list[dict[str, Any]]:
    """The first `n` predictions of each eval set under `variant`."""
    per_set: dict[str, list[dict[str, Any]]] = {}
    with (Path(out_dir) / "predictions" / f"{variant}.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            chosen = per_set.setdefault(row["set"], [])
            if len(chosen) < n:
                chosen.append(row)
    return [row for rows in per_set.values() for row in rows]


def print_report(out_dir: str | Path, variant: str = "adaptive", n: int = 3, console: Console | None = None) -> None:
    console = console or Console()
    metrics = json.loads((Path(out_dir) / "metrics.json").read_text())
    console.print(accuracy_table(metrics))
    steps = crag_table(metrics)
    if steps is not None:
        console.print(steps)
    if variant not in metrics["overall"]:
        return
    answers = Table(title=f"Held-out questions ({variant} retrieval)", show_lines=True)
    for column in ("question", "answer", "gold", "cites"):
        answers.add_column(column, overflow="fold")
    for row in sample_answers(out_dir, variant, n):
        answer = row["option"] if row["task"] != "qa" and row["option"] else row["text"][:ANSWER_CHARS]
        cites = ", ".join(f"{c['title']} ({c['passage_id']})" for c in row["citations"]) or "-"
        mark = {True: "[green]✓[/green]", False: "[red]✗[/red]", None: "·"}[row["correct"]]
        question = row["input"] if row["task"] in ("fact", "mc") else " ".join((row["instruction"], row["input"])).strip()
        answers.add_row(question, f"{mark} {answer}", ", ".join(row["golds"]) or "(not judged)", cites)
    console.print(answers)
