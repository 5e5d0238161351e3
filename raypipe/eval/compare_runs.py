"""Did a lever's run beat the baseline's on the same items? Two eval runs (two `eval.out_dir`s, e.g. the
demo's and one with a data or training lever changed) compared set by set for one variant, paired by
item id, with the exact test the eval itself uses for its stated comparisons.

    python -m raypipe.eval.compare_runs runs/demo/eval runs/lever/eval --variant adaptive --against rag \\
        --json docs/results/files/margins/compare_lever.json

For each set both runs judged (long-form and creative sets have no per-item correctness and are left
out), on the items both runs hold (an item only one run holds is counted, not compared): the variant's
accuracy in BASE and in OTHER with Wilson's 95% intervals, the difference in points, and McNemar's
exact two-sided p on the items only one run got right (raypipe.eval.significance). With `--against`,
OTHER's variant against that method of OTHER on the same items too (did the lever's lead over, e.g.,
plain RAG hold?). Each p is one set's own test: it is not corrected across sets. `--json` writes the
same figures, both run folders, the variant and the date, for a docs/results page to cite.
Reads `<run>/predictions/<variant>.jsonl` (and `<run>/metrics.json`'s `run`, the commit and date, when
there); a run without the variant's predictions is an error naming the folder and the variants it has.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from raypipe.disk import write_text
from raypipe.errors import DataError, RaypipeError
from raypipe.eval.comparisons import FOCUS, correctness
from raypipe.eval.partial import partial_path
from raypipe.eval.report import ordered_sets, set_name
from raypipe.eval.significance import accuracy_interval, mcnemar

#: the folder of an eval's out_dir that holds one `<variant>.jsonl` per variant
PREDICTIONS = "predictions"

#: set -> item id -> correct (raypipe.eval.comparisons.correctness)
Correctness = dict[str, dict[str, bool]]


def variants_in(run_dir: Path) -> list[str]:
    """The variants a run finished (`predictions/<variant>.jsonl`; a `.partial.jsonl` is a pass still
    running or stopped, not a prediction file)."""
    return sorted(p.name.removesuffix(".jsonl") for p in (run_dir / PREDICTIONS).glob("*.jsonl")
                  if not p.name.endswith(".partial.jsonl"))


def load_variant(run_dir: Path, variant: str, role: str) -> Correctness:
    """`variant`'s per-item correctness in one run; `role` (BASE, OTHER) names the run in an error,
    which also says what the run holds, since the usual mistake is the wrong folder or variant name."""
    folder = run_dir / PREDICTIONS
    if not folder.is_dir():
        raise DataError(f"{role} run {run_dir} has no {PREDICTIONS}/ folder: is it an eval's out_dir?",
                        file=str(folder))
    path = folder / f"{variant}.jsonl"
    if not path.is_file():
        stopped = (f"; only {partial_path(folder, variant).name}, a pass that has not ended"
                   if partial_path(folder, variant).is_file() else "")
        raise DataError(f"{role} run {run_dir} has no predictions for variant {variant!r}{stopped}; "
                        f"variants there: {variants_in(run_dir) or 'none'}", file=str(path))
    return correctness(path)


def run_record(run_dir: Path) -> dict[str, Any] | None:
    """The run's `run` entry of metrics.json (commit, date, command) to cite beside its folder; None
    when the eval wrote no metrics.json (predictions alone still compare)."""
    path = run_dir / "metrics.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("run")
    except json.JSONDecodeError as exc:
        raise DataError(f"not valid JSON: {exc}", file=str(path)) from None


def accuracy(values: list[bool]) -> dict[str, Any]:
    """Right of n, the share and its Wilson 95% interval (the interval the eval's metrics.json gives)."""
    right = sum(values)
    return {"correct": right, "n": len(values), "accuracy": right / len(values),
            "interval": list(accuracy_interval(right, len(values)))}


def head_to_head(a_name: str, a: dict[str, bool], b_name: str, b: dict[str, bool], items: list[str]) -> dict[str, Any]:
    """`a` against `b` on `items`: each one's accuracy and McNemar's exact test (`a_only`: the items
    only `a` got right)."""
    a_values, b_values = [a[i] for i in items], [b[i] for i in items]
    return {"n": len(items), a_name: accuracy(a_values), b_name: accuracy(b_values),
            "paired": mcnemar(a_name, a_values, b_name, b_values).as_dict()}


def compare_set(base: dict[str, bool], other: dict[str, bool], against: dict[str, bool] | None,
                against_name: str | None) -> dict[str, Any] | None:
    """One set's figures on the items both runs judged; None when they share none. `against`: OTHER's
    method to test OTHER's variant against, on those of the shared items it judged too."""
    shared = sorted(base.keys() & other.keys())
    if not shared:
        return None
    result = {"only_base": len(base.keys() - other.keys()), "only_other": len(other.keys() - base.keys()),
              **head_to_head("other", other, "base", base, shared)}
    result["difference"] = result["other"]["accuracy"] - result["base"]["accuracy"]
    if against is not None and against_name is not None:
        mine = [i for i in shared if i in against]
        result["against"] = head_to_head("other", other, against_name, against, mine) if mine else None
    return result


def compare(base: Correctness, other: Correctness, against: Correctness | None = None,
            against_name: str | None = None) -> dict[str, Any]:
    """Per set both runs judged: `compare_set`; the sets only one run judged, and the sets both judged
    without an item in common, listed apart. No set in common is an error: nothing would be compared."""
    both = ordered_sets(base.keys() & other.keys())
    sets = {name: compare_set(base[name], other[name], None if against is None else against.get(name, {}),
                              against_name) for name in both}
    if not any(sets.values()):
        raise DataError(f"the two runs share no judged item: BASE's sets {ordered_sets(base)}, "
                        f"OTHER's {ordered_sets(other)}")
    return {"sets": {name: figures for name, figures in sets.items() if figures is not None},
            "no_common_item": [name for name, figures in sets.items() if figures is None],
            "only_in_base": ordered_sets(base.keys() - other.keys()),
            "only_in_other": ordered_sets(other.keys() - base.keys())}


def _share(figures: dict[str, Any]) -> str:
    low, high = figures["interval"]
    return f"{100 * figures['accuracy']:.1f}% [{100 * low:.1f}, {100 * high:.1f}] ({figures['correct']}/{figures['n']})"


def render(result: dict[str, Any]) -> str:
    """Plain lines, one block per set: both runs' accuracy, the difference and its paired test, then
    OTHER against `--against`'s method when asked."""
    variant, against = result["variant"], result["against"]
    lines = [f"BASE  {result['base']['dir']}", f"OTHER {result['other']['dir']}",
             f"variant {variant}; McNemar's exact test, two-sided, per set (not corrected across sets)", ""]
    for name, s in result["sets"].items():
        p = s["paired"]
        lines += [f"{set_name(name)} ({name}): {s['n']} items in both runs "
                  f"({s['only_base']} only in BASE, {s['only_other']} only in OTHER)",
                  f"  BASE  {variant} {_share(s['base'])}",
                  f"  OTHER {variant} {_share(s['other'])}",
                  f"  difference {100 * s['difference']:+.1f} points; {p['a_only']} items right only in OTHER, "
                  f"{p['b_only']} only in BASE: p = {p['p_value']:.2g}"]
        if against is not None:
            vs = s.get("against")
            if vs is None:
                lines.append(f"  OTHER {variant} vs {against}: {against} judged none of these items in OTHER")
            else:
                q = vs["paired"]
                lines.append(f"  OTHER {variant} {_share(vs['other'])} vs {against} {_share(vs[against])} on "
                             f"{vs['n']} items: {q['a_only']} vs {q['b_only']} only one got right, p = {q['p_value']:.2g}")
        lines.append("")
    for key, where in (("only_in_base", "only in BASE"), ("only_in_other", "only in OTHER"),
                       ("no_common_item", "in both runs, no item in common")):
        if result[key]:
            lines.append(f"sets {where} (not compared): {', '.join(result[key])}")
    return "\n".join(lines).rstrip() + "\n"


def compare_runs(base_dir: Path, other_dir: Path, variant: str = FOCUS, against: str | None = None) -> dict[str, Any]:
    """Everything `--json` writes: both runs (folder, metrics.json's `run`), the variant, the method
    tested against, today's date (UTC) and `compare`'s figures."""
    base = load_variant(base_dir, variant, "BASE")
    other = load_variant(other_dir, variant, "OTHER")
    versus = load_variant(other_dir, against, "OTHER") if against is not None else None
    return {"base": {"dir": str(base_dir), "run": run_record(base_dir)},
            "other": {"dir": str(other_dir), "run": run_record(other_dir)},
            "variant": variant, "against": against,
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "test": "McNemar's exact test, two-sided, per set, not corrected across sets; "
                    "paired.a_only: items right only in OTHER",
            **compare(base, other, versus, against)}


def main(argv: list[str] | None = None) -> int:
    intro, _, detail = __doc__.partition("\n\n")
    parser = argparse.ArgumentParser(prog="python -m raypipe.eval.compare_runs", description=intro,
                                     epilog=detail, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("base_dir", type=Path, help="the baseline run's eval out_dir (holds predictions/)")
    parser.add_argument("other_dir", type=Path, help="the run to compare with it (the lever's eval out_dir)")
    parser.add_argument("--variant", default=FOCUS,
                        help="the prediction file compared in both runs (default: %(default)s, Self-RAG's adaptive mode)")
    parser.add_argument("--against", metavar="METHOD", default=None,
                        help="also test OTHER's variant against this variant of OTHER on the same items (e.g. rag)")
    parser.add_argument("--json", metavar="OUT", type=Path, default=None,
                        help="also write the figures, both run folders, the variant and the date to this file")
    args = parser.parse_args(argv)
    try:
        result = compare_runs(args.base_dir, args.other_dir, args.variant, args.against)
    except RaypipeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(render(result), end="")
    if args.json is not None:
        write_text(args.json, json.dumps(result, indent=1) + "\n")
        print(f"written: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
