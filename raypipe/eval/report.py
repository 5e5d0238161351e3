"""A finished eval, shown in the terminal: accuracy (FactScore for long-form sets) by set and retrieval
mode, what CRAG's corrective step did by set (when a CRAG-family method ran), and a few answers with
the passages they cite (what `make demo` prints after `raypipe eval`); the world's eval sets by
readable names, QA first, in every table that shows them."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from rich import box
from rich.table import Table
from rich.text import Text

#: characters of an answer shown; untrained demo models can ramble for the whole length cap
ANSWER_CHARS = 160

#: the world's held-out sets (raypipe.settings.paths.HELDOUT_SETS and the long-form split) by file
#: stem, with the names tables show, in the order they show them: QA first, the set that needs no
#: retrieval last
SET_NAMES = {"heldout_qa": "QA", "heldout_fact": "fact verification", "heldout_mc": "multiple choice",
             "heldout_longform": "biographies", "heldout_noret": "plain instructions"}


def set_name(name: str) -> str:
    """The readable name of an eval set (another set, e.g. a released file, keeps its own)."""
    return SET_NAMES.get(name, name)


def ordered_sets(names: Iterable[str]) -> list[str]:
    """The world's held-out sets in `SET_NAMES` order, then any others by name."""
    known = list(SET_NAMES)
    return sorted(names, key=lambda n: (known.index(n), "") if n in SET_NAMES else (len(known), n))


def score_text(summary: dict[str, Any]) -> str:
    """A set's score in percent: accuracy over its judged items, `FS <score>` for a long-form set
    (FactScore, no accuracy), "-" for a set with no judged item (creative instructions only)."""
    if summary.get("accuracy") is None and summary.get("factscore") is not None:
        return f"FS {100 * summary['factscore']:.1f}"
    return "-" if summary.get("accuracy") is None else f"{100 * summary['accuracy']:.1f}"


def _cell(summary: dict[str, Any]) -> str:
    return f"{score_text(summary)} ({100 * summary['retrieval_frequency']:.0f})"


def accuracy_table(metrics: dict[str, Any]) -> Table:
    """Rows: eval sets (QA first, by their readable names) and all sets pooled; columns: accuracy or
    FactScore (retrieval frequency) per headline variant (Self-RAG's retrieval modes, other methods
    by name). The pooled row shows accuracy over the judged items, FactScore only when every set is
    long-form. Under a row whose closed-set outputs sometimes name no option, a `no option` row gives
    that share: an accuracy near 0 there means off-format answers, not wrong ones. Sized so that five
    variants fit an 80-column terminal on one line per row."""
    modes = list(metrics["accuracy"])
    per_set = metrics["per_set"]
    table = Table(title="Eval: accuracy % (retrieval %); FS = FactScore %", box=box.SIMPLE_HEAD,
                  title_justify="left", caption_justify="left", show_edge=False, pad_edge=False,
                  padding=0,
                  caption="plain instructions: retrieval % should be low"
                  if "heldout_noret" in per_set else None)
    table.add_column("eval set", no_wrap=True)
    for mode in modes:
        table.add_column(mode, justify="right", min_width=len("100.0 (100)"))
    rows = [*((set_name(name), per_set[name]) for name in ordered_sets(per_set)), ("all", metrics["overall"])]
    for name, by_variant in rows:
        table.add_row(name, *(_cell(by_variant[m]) for m in modes))
        if any(by_variant[m].get("no_option") for m in modes):
            table.add_row("  no option", *(f"{100 * (by_variant[m].get('no_option') or 0):.0f}%" for m in modes),
                          style="dim")
    return table


#: the columns of the CRAG table: header -> the count in a `crag_steps.count_steps` summary; the
#: headers are short so that the table fits an 80-column terminal, and its caption spells them out
CRAG_COLUMNS: dict[str, Callable[[dict[str, Any]], int]] = {
    "Cor": lambda c: c["actions"]["correct"],
    "Inc": lambda c: c["actions"]["incorrect"],
    "Amb": lambda c: c["actions"]["ambiguous"],
    "web": lambda c: c["web_searches"],
    "fail": lambda c: c["web_failures"],
    "empty": lambda c: c["web_empty"],
    "raw q": lambda c: c["rewriter_fallbacks"],
    "kept": lambda c: c["fallbacks"]["passing_document"],
    "none": lambda c: c["fallbacks"]["no_knowledge"],
}

CRAG_CAPTION = ("Cor/Inc/Amb: items per action. web: web searches, of them fail(ed) and empty.\n"
                "raw q: the rewriter fell back to the question. kept: a Correct item kept its\n"
                "best document. none: nothing to read after a failed web search.")


def crag_table(metrics: dict[str, Any]) -> Table | None:
    """Rows: (eval set, headline variant) for each variant with a corrective step, all sets pooled
    last; columns: items per action, web searches and those that failed or found nothing, queries
    searched raw because the rewriter fell back, and the two knowledge fallbacks (a Correct item
    whose strips were all filtered kept its best document; a failed web search left nothing to read).
    None when no headline variant is CRAG-family."""
    variants = [v for v in metrics["accuracy"] if metrics["overall"][v].get("crag")]
    if not variants:
        return None
    table = Table(title="CRAG's corrective step", caption=CRAG_CAPTION, title_justify="left",
                  caption_justify="left", box=box.MINIMAL, padding=(0, 1), show_edge=False,
                  collapse_padding=True)
    for column in ("eval set", "variant", *CRAG_COLUMNS):
        left = column in ("eval set", "variant")
        table.add_column(column, justify="left" if left else "right", no_wrap=True, min_width=len(column))
    per_set = metrics["per_set"]
    for name, by_variant in [*((set_name(n), per_set[n]) for n in ordered_sets(per_set)), ("all", metrics["overall"])]:
        for v in variants:
            counts = by_variant.get(v, {}).get("crag")
            if counts:
                table.add_row(name, v, *(str(count(counts)) for count in CRAG_COLUMNS.values()))
    return table


def _percent(share: float) -> str:
    return f"{100 * share:.1f}"


def _interval(summary: dict[str, Any]) -> str:
    low, high = summary["accuracy_interval"]
    return f"{_percent(summary['accuracy'])} [{_percent(low)}, {_percent(high)}]"


def comparisons_block(metrics: dict[str, Any]) -> Text | None:
    """Per set: its items, the majority-label baseline and chance (closed sets), and each stated
    comparison (raypipe.eval.comparisons: Self-RAG adaptive against another headline variant, with
    both accuracies' 95% intervals and McNemar's exact p after Holm's correction) read as ahead,
    behind or no difference shown (`PairedTest.verdict`). None when no comparison was run."""
    comparisons = metrics.get("comparisons")
    if not comparisons:
        return None
    block = Text("Which comparisons hold (95% intervals; McNemar's exact test, Holm-corrected per set)\n",
                 style="bold")
    for name in ordered_sets(comparisons):
        tests = comparisons[name]
        by_variant = metrics["per_set"][name]
        focus = by_variant[tests[0]["a"]]
        answers = focus.get("answers")
        extra = ""
        if answers:
            extra = (f"; always {answers['majority_label']!r} {_percent(answers['majority_baseline'])}"
                     + (f", chance {_percent(answers['chance'])}" if answers.get("chance") is not None else "")
                     + f", {tests[0]['a']} macro-F1 {answers['macro_f1']:.2f}")
        block.append(f"{set_name(name)}", style="bold").append(f" ({tests[0]['n']} items{extra})\n", style="dim")
        for t in tests:
            word = t["verdict"]
            style = {"ahead": "green", "behind": "red"}.get(word, "")
            block.append(f"  {t['a']} {_interval(focus)} vs {t['b']} {_interval(by_variant[t['b']])}: ")
            block.append(word, style=style)
            block.append(f" ({t['a_only']} vs {t['b_only']} items only one got right, p = {t['adjusted_p']:.2g})\n",
                         style="dim")
    block.rstrip()
    return block


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


def answers_block(out_dir: str | Path, variant: str = "adaptive", n: int = 3) -> Text | None:
    """The first `n` questions of each eval set (QA first), each as a question line and an answer line
    (right / wrong / not judged, `variant`'s answer, the gold answer, the passages cited), the shape of
    the serving demo's lines; None when `variant` was not evaluated. Lines, not a table: four
    columns on an 80-column terminal wrap every cell to a word or two (31 lines for 4 questions)."""
    if not (Path(out_dir) / "predictions" / f"{variant}.jsonl").is_file():
        return None
    block = Text(f"Held-out questions ({variant} retrieval)\n", style="bold")
    chosen = sample_answers(out_dir, variant, n)
    order = {name: i for i, name in enumerate(ordered_sets({row["set"] for row in chosen}))}
    for row in sorted(chosen, key=lambda r: order[r["set"]]):
        answer = row["option"] if row["task"] != "qa" and row["option"] else row["text"][:ANSWER_CHARS]
        cites = ", ".join(f"{c['title']} ({c['passage_id']})" for c in row["citations"]) or "-"
        mark, style = {True: ("✓", "green"), False: ("✗", "red"), None: ("·", "")}[row["correct"]]
        question = row["input"] if row["task"] in ("fact", "mc") else " ".join((row["instruction"], row["input"])).strip()
        block.append(f"{set_name(row['set'])}: ", style="bold").append(question.replace("\n", " ") + "\n")
        block.append(f"  {mark} ", style=style).append(answer.replace("\n", " "))
        block.append(f" | gold: {', '.join(row['golds']) or '(not judged)'} | cites: {cites}\n", style="dim")
    block.rstrip()
    return block
