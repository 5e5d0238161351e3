"""Where an eval's points go: each method's accuracy on the synthetic world's held-out sets, split by what
an item asks (the attribute: birthplace, employer, ...; a claim's truth) and by what retrieval handed
the method (the item's gold passage among its documents or not), and for multiple choice how often the
chosen option is a value the documents state. The split separates a retriever's misses from a generator that had the passage
and answered something else, which a single accuracy hides.

    python -m raypipe.eval.breakdown runs/demo/eval runs/demo/world --variants adaptive rag crag

reads `<eval>/predictions/<variant>.jsonl` and the world's `eval/heldout_*.jsonl` (their `relation`,
`label`, `passage_ids`) and passages, prints one table per set and writes `<eval>/breakdown.json`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from raypipe.disk import write_text

#: the closed and short-answer sets the world's eval holds; long-form and no-retrieval sets have no
#: attribute to split by
SETS = ("heldout_qa", "heldout_fact", "heldout_mc")


def documents(prediction: dict[str, Any]) -> list[str]:
    """The ids of the passages a method was handed first, from its trace: Self-RAG's first retrieval,
    CRAG's documents, RAG's documents; none for a method that did not retrieve."""
    trace = prediction.get("trace") or {}
    if "first_retrieval" in trace:
        return [d["passage_id"] for d in trace["first_retrieval"]]
    if "crag" in trace:
        return [d["id"] for d in trace["crag"].get("documents", [])]
    return [d["id"] for d in trace.get("documents", [])]


def chosen_text(prediction: dict[str, Any]) -> str | None:
    """The text of the option a multiple-choice prediction chose; None elsewhere (a QA answer is a
    sentence, a verdict's value is the claim's)."""
    if prediction["task"] != "mc":
        return None
    return (prediction.get("choices") or {}).get(prediction.get("option") or "")


def stated(value: str | None, texts: Iterable[str]) -> bool:
    """Whether `value` is said in one of the documents, case aside."""
    return bool(value) and any(value.lower() in text.lower() for text in texts)


def item_key(item: dict[str, Any], gold_retrieved: bool) -> tuple[str, str, str]:
    """(attribute, the claim's truth or "", whether the gold passage was retrieved)."""
    return item.get("relation", "?"), str(item.get("label", "")), "gold retrieved" if gold_retrieved else "gold missed"


def breakdown(predictions: dict[str, list[dict[str, Any]]], items: dict[str, dict[str, Any]],
              passages: dict[str, str]) -> dict[str, Any]:
    """Per set, per group of items (the attribute, a claim's truth, the gold passage among the
    documents or not), per variant: the items, those right, and the answers said in the documents. A
    variant's own documents decide its group, since methods retrieve differently."""
    out: dict[str, Any] = {}
    for name in SETS:
        groups: dict[tuple[str, str, str], dict[str, dict[str, int]]] = defaultdict(dict)
        for variant, rows in predictions.items():
            for p in rows:
                if p["set"] != name or p["id"] not in items:
                    continue
                item = items[p["id"]]
                docs = documents(p)
                gold = bool(set(item.get("passage_ids", [])) & set(docs))
                key = item_key(item, gold)
                cell = groups[key].setdefault(variant, {"n": 0, "correct": 0, "stated": 0})
                cell["n"] += 1
                cell["correct"] += bool(p["correct"])
                cell["stated"] += stated(chosen_text(p), [passages.get(d, "") for d in docs])
        out[name] = {" | ".join(k for k in key if k): group for key, group in sorted(groups.items())}
    return out


def totals(result: dict[str, Any]) -> dict[str, dict[str, dict[str, int]]]:
    """Per set and variant: items, right, right with the gold passage retrieved, gold retrieved."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for name, groups in result.items():
        per: dict[str, dict[str, int]] = defaultdict(lambda: {"n": 0, "correct": 0, "gold": 0, "correct_gold": 0})
        for key, group in groups.items():
            gold = key.endswith("gold retrieved")
            for variant, cell in group.items():
                t = per[variant]
                t["n"] += cell["n"]
                t["correct"] += cell["correct"]
                t["gold"] += cell["n"] if gold else 0
                t["correct_gold"] += cell["correct"] if gold else 0
        out[name] = dict(per)
    return out


def render(result: dict[str, Any], variants: Sequence[str]) -> str:
    """Markdown: per set, one row per group, `right/n` per variant (for multiple choice with how many
    chosen options the documents state)."""
    lines = []
    for name, groups in result.items():
        lines += [f"### {name}", "", "| group | " + " | ".join(variants) + " |",
                  "| --- | " + " | ".join("---" for _ in variants) + " |"]
        for key, group in groups.items():
            cells = []
            for v in variants:
                c = group.get(v)
                cells.append("-" if c is None else f"{c['correct']}/{c['n']}"
                             + (f" (stated {c['stated']})" if name == "heldout_mc" else ""))
            lines.append(f"| {key} | " + " | ".join(cells) + " |")
        lines.append("")
    for name, per in totals(result).items():
        lines.append(f"- {name}: " + "; ".join(
            f"{v} {t['correct']}/{t['n']} (gold retrieved for {t['gold']}, right on {t['correct_gold']} of them)"
            for v, t in per.items() if v in variants))
    return "\n".join(lines) + "\n"


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def load(eval_dir: Path, world_dir: Path, variants: Sequence[str]) -> tuple[dict, dict, dict]:
    """(predictions per variant, held-out items by id, passage texts by id) from an eval's and a
    world's folders; a missing file is an error naming it."""
    import pyarrow.parquet as pq

    predictions = {}
    for v in variants:
        path = eval_dir / "predictions" / f"{v}.jsonl"
        if not path.is_file():
            raise FileNotFoundError(f"no predictions for variant {v!r}: {path} (variants there: "
                                    f"{sorted(p.stem for p in (eval_dir / 'predictions').glob('*.jsonl'))})")
        predictions[v] = _read_jsonl(path)
    items = {r["id"]: r for name in SETS if (world_dir / "eval" / f"{name}.jsonl").is_file()
             for r in _read_jsonl(world_dir / "eval" / f"{name}.jsonl")}
    passages = {}
    for folder in (world_dir / "passages", world_dir / "web" / "passages"):
        if folder.exists():
            passages.update(zip(*pq.read_table(folder, columns=["id", "text"]).to_pydict().values(), strict=True))
    return predictions, items, passages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m raypipe.eval.breakdown", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("eval_dir", type=Path, help="an eval's out_dir (holds predictions/)")
    parser.add_argument("world_dir", type=Path, help="the world the eval's sets came from (holds eval/, passages/)")
    parser.add_argument("--variants", nargs="+", default=["adaptive", "rag", "crag", "never"],
                        help="prediction files to compare (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        predictions, items, passages = load(args.eval_dir, args.world_dir, args.variants)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    result = breakdown(predictions, items, passages)
    out = args.eval_dir / "breakdown.json"
    write_text(out, json.dumps({"groups": result, "totals": totals(result)}, indent=1) + "\n")
    print(render(result, args.variants), end="")
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
