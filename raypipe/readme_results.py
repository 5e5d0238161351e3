"""README's figures, generated from the results files committed under docs/results/files/, so that no
figure in README is typed in: `python -m raypipe.readme_results` (`make readme`) rewrites every
block between `<!-- results:NAME -->` and `<!-- /results:NAME -->`, and
tests/unit/test_readme_results.py fails when README and the files disagree.

A block is a renderer of one results file (`BLOCKS`): the demo's eval (`metrics.json` of `raypipe
eval`, its `run` record naming the commit, date and machine), the demo's clock (`demo_times.json`)
and the test suite's (tests/session_clock.py). `--publish RUN_DIR` copies a finished demo's files
there first, `--publish-tests` a whole-suite test session's (docs/results/files/README.md: the schema,
the paths, the commands).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from raypipe.eval.report import ordered_sets, set_name
from raypipe.eval.results_table import PAPER_SETS, markdown_row, method_name, paper_row

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
#: where the results files README is generated from are committed (relative to the repository)
FILES = Path("docs") / "results" / "files"
COMMAND = "python -m raypipe.readme_results"
#: a paired test's verdict (raypipe.eval.significance.PairedTest.verdict) as a sentence says it
VERDICTS = {"ahead": "ahead of", "behind": "behind", "no difference shown": "not shown to differ from"}
#: Self-RAG's retrieval modes by the name a table shows
MODE_NAMES = {"adaptive": "Self-RAG (adaptive)", "always": "Self-RAG (always retrieves)",
              "never": "Self-RAG (never retrieves)"}


@dataclass(frozen=True)
class Block:
    """One generated block of README: the results file it reads (under `FILES`) and its renderer."""

    file: str
    render: Callable[[dict[str, Any], str], str]


def _pct(share: float | None) -> str:
    return "-" if share is None else f"{100 * share:.0f}"


def _variant_name(variant: str) -> str:
    return MODE_NAMES.get(variant, method_name(variant))


def _source_line(record: dict[str, Any], path: str) -> str:
    """Where a table's figures come from: the file, the run's date, machine and commit."""
    commit = record.get("commit")
    commit_text = f"commit {commit[:7]}{'-dirty' if commit.endswith('-dirty') else ''}" if commit else "no commit recorded"
    machine = f"{record['cpu']}, {record['cores']} cores" if record.get("cpu") else "machine not recorded"
    return f"From [{path}]({path}): {record.get('date', '?')[:10]}, {machine}, {commit_text}."


def demo_eval_block(metrics: dict[str, Any], path: str) -> str:
    """The demo's eval as README shows it: accuracy % with its 95% interval per headline variant and
    set, retrieval % beside it, the majority-label and chance rows of the closed sets, the papers' 7B
    rows on the nearest public sets (their ordering is what compares), and which stated comparisons
    hold on the same items (McNemar's exact test, Holm-corrected per set)."""
    per_set = metrics["per_set"]
    sets = ordered_sets(per_set)
    variants = list(metrics["accuracy"])
    first = {s: per_set[s][variants[0]] for s in sets}
    # a set's judged items (the plain instructions' creative ones have no gold answer)
    lines = [markdown_row(["method", *(f"{set_name(s)} ({first[s].get('judged', first[s]['n'])})" for s in sets)]),
             markdown_row(["---"] * (1 + len(sets)))]
    for label, key in (("*always the most frequent gold*", "majority_baseline"), ("*chance*", "chance")):
        cells = [_pct((first[s].get("answers") or {}).get(key)) for s in sets]
        if any(c != "-" for c in cells):
            lines.append(markdown_row([label, *(f"*{c}*" if c != "-" else c for c in cells)]))
    for v in variants:
        lines.append(markdown_row([_variant_name(v), *(_cell(per_set[s][v]) for s in sets)]))
    own = {row["variant"]: (m, row.get("generator")) for m, row in metrics.get("method_rows", {}).items()}
    for v in variants:
        found = paper_row(*own[v]) if v in own else None
        if found is None:
            continue
        cells = [f"*{found.figures[s]:.1f}*" + (f" ({found.other_sets[s]})" if s in found.other_sets else "")
                 if s in found.figures else "-" for s in sets]
        lines.append(markdown_row([f"*{found.source}*", *cells]))
    nearest = ", ".join(f"{set_name(s)}: {PAPER_SETS[s]}" for s in sets if s in PAPER_SETS)
    lines += ["", "Cells: accuracy % [95% interval] (retrieval %); `!` one answer to most items (a collapse); "
              f"the papers' 7B rows in italics on the nearest public set ({nearest}): other data and models, "
              "so their ordering is what compares.", ""]
    for block in (_macro_f1(per_set, sets, variants), _comparisons(metrics)):
        if block:
            lines += [block, ""]
    return "\n".join([*lines, _source_line(metrics["run"], path)])


def _macro_f1(per_set: dict[str, Any], sets: list[str], variants: list[str]) -> str:
    """A line per closed set: each variant's macro-F1 over the gold labels, beside accuracy where one
    label is most of the golds (always answering it scores its share in accuracy, not in macro-F1)."""
    lines = []
    for s in sets:
        scores = [(v, f1) for v in variants if (f1 := (per_set[s][v].get("answers") or {}).get("macro_f1")) is not None]
        if scores:
            lines.append(f"- {set_name(s)}: " + ", ".join(f"{_variant_name(v)} {f1:.2f}" for v, f1 in scores))
    return "\n".join(["Macro-F1 over the gold labels:", *lines]) if lines else ""


def _cell(summary: dict[str, Any]) -> str:
    if summary.get("accuracy") is None:
        score = f"FS {_pct(summary.get('factscore'))}" if summary.get("factscore") is not None else "-"
    else:
        low, high = summary.get("accuracy_interval") or (None, None)
        score = _pct(summary["accuracy"]) + (f" [{_pct(low)}-{_pct(high)}]" if low is not None else "")
    collapsed = " !" if (summary.get("answers") or {}).get("collapsed") else ""
    retrieval = summary.get("retrieval_frequency")
    return f"{score}{collapsed}" + ("" if retrieval is None else f" ({_pct(retrieval)})")


def _comparisons(metrics: dict[str, Any]) -> str:
    """A line per set: each stated comparison read as ahead, behind or no difference shown."""
    comparisons = metrics.get("comparisons") or {}
    lines = []
    for s in ordered_sets(comparisons):
        said = [f"{VERDICTS.get(t['verdict'], t['verdict'])} {_variant_name(t['b'])} (p = {t['adjusted_p']:.2g})"
                for t in comparisons[s]]
        lines.append(f"- {set_name(s)}: {_variant_name(comparisons[s][0]['a'])} " + ", ".join(said))
    if not lines:
        return ""
    return "\n".join(["Paired on the same items (McNemar's exact test, Holm-corrected per set):", *lines])


def demo_times_block(times: dict[str, Any], path: str) -> str:
    """The demo's clock: its total and its three longest stages, and the machine."""
    stages = sorted(times["stages"].items(), key=lambda kv: -kv[1])[:3]
    longest = ", ".join(f"{name} {seconds / 60:.1f}" for name, seconds in stages)
    disk = times.get("disk_bytes", {})
    left = ""
    if "run_dir" in disk:
        venv = f", beside a {disk['venv'] / 1e9:.1f} GB `.venv`" if "venv" in disk else ""
        left = f" It left {disk['run_dir'] / 1e9:.1f} GB in its run folder{venv}."
    return (f"`make demo` took **{times['total_s'] / 60:.1f} min** of demo clock on {times['when'][:10]} "
            f"({times['cpu']}, {times['cores']} cores; the longest stages in minutes: {longest}).{left} "
            f"From [{path}]({path}).")


def test_time_block(session: dict[str, Any], path: str) -> str:
    """The test suite's clock (tests/session_clock.py): its wall time, outcomes and machine."""
    counts = ", ".join(f"{n:,} {outcome}" for outcome, n in sorted(session["outcomes"].items(), key=lambda kv: -kv[1]))
    return (f"`make test` took **{session['wall_s'] / 60:.1f} min** by the session's clock on "
            f"{session['date'][:10]} ({session['cpu']}, {session['cores']} cores; {counts}). From [{path}]({path}).")


#: README's generated blocks by name
BLOCKS = {
    "demo-eval": Block("demo/metrics.json", demo_eval_block),
    "demo-time": Block("demo/demo_times.json", demo_times_block),
    "test-time": Block("tests/test_session.json", test_time_block),
}

#: a block: its opening marker line, its body (no line, or lines), its closing marker
_MARKED = re.compile(r"(<!-- results:(?P<name>[\w-]+) -->\n)(?P<body>(?:.*?\n)?)(<!-- /results:(?P=name) -->)", re.S)


def render(readme: str, root: Path = ROOT) -> str:
    """`readme` with every marked block replaced by what its results file renders to."""
    def replace(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in BLOCKS:
            raise KeyError(f"README block results:{name} has no renderer (known: {', '.join(BLOCKS)})")
        path = (FILES / BLOCKS[name].file).as_posix()
        data = json.loads((root / path).read_text(encoding="utf-8"))
        return match[1] + BLOCKS[name].render(data, path) + "\n" + match[4]

    return _MARKED.sub(replace, readme)


def marked_blocks(readme: str) -> list[str]:
    return [m["name"] for m in _MARKED.finditer(readme)]


#: a finished demo's files (relative to its run folder) by the results file each becomes
PUBLISHED = {"demo/metrics.json": Path("eval") / "metrics.json", "demo/demo_times.json": Path("demo_times.json")}


def publish(run_dir: Path, root: Path = ROOT) -> list[Path]:
    """Copy a finished demo's results files under `FILES` (refusing a run without them all)."""
    missing = [str(run_dir / src) for src in PUBLISHED.values() if not (run_dir / src).is_file()]
    if missing:
        raise FileNotFoundError(f"{run_dir} is not a finished demo: no {', '.join(missing)} (`make demo` writes them)")
    copied = []
    for dest, src in PUBLISHED.items():
        target = root / FILES / dest
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(run_dir / src, target)
        copied.append(target)
    return copied


def publish_tests(session_file: Path, root: Path = ROOT) -> Path:
    """Copy a test session's clock under `FILES`, refusing one that ran only part of the suite."""
    session = json.loads(session_file.read_text(encoding="utf-8"))
    if session.get("selection") != "whole suite":
        raise ValueError(f"{session_file}: a session of {session.get('selection')!r}, not the whole suite "
                         "(`make test` writes one)")
    target = root / FILES / BLOCKS["test-time"].file
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(session_file, target)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if README differs from its files; write nothing")
    parser.add_argument("--publish", type=Path, metavar="RUN_DIR",
                        help="copy a finished demo's metrics.json and demo_times.json under docs/results/files/ first")
    parser.add_argument("--publish-tests", type=Path, metavar="SESSION_JSON",
                        help="copy a whole-suite test session's clock (.cache/test_session.json after `make "
                             "test`) under docs/results/files/ first")
    args = parser.parse_args(argv)
    published = publish(args.publish) if args.publish is not None else []
    if args.publish_tests is not None:
        published.append(publish_tests(args.publish_tests))
    for path in published:
        print(f"published {path.relative_to(ROOT)}")
    text = README.read_text(encoding="utf-8")
    generated = render(text)
    if args.check:
        if generated != text:
            print(f"README.md is stale against {FILES}: run `{COMMAND}`", file=sys.stderr)
            return 1
        return 0
    README.write_text(generated, encoding="utf-8")
    print(f"README.md: {len(marked_blocks(text))} blocks from {FILES}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
