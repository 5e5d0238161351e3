"""How often the critic agrees with its teacher on the dev split (the paper's Table 4 / Fig. 5d:
Llama2-7B critic vs GPT-4, 93.8% Retrieve, 93.5% IsSup, 80.2% IsRel, 73.5% IsUse).

Per aspect: accuracy and a confusion matrix (rows: the teacher's label, columns: the critic's argmax),
returned as a JSON-ready dict and printed as tables. The paper notes IsUse errors concentrate between
neighbouring scores (4 vs 5); the matrix shows whether ours do too.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from raypipe.critic.dataset import read_split, split_examples
from raypipe.critic.predict import make_predictor
from raypipe.critic.predictor import ReflectionPredictor
from raypipe.disk import write_text
from raypipe.prompts import ASPECT_LABELS, Aspect
from raypipe.settings.models import EngineKind

logger = logging.getLogger(__name__)


def _dev_folder(dev_dir: str | Path) -> tuple[Path, str]:
    """Accept a D_critic folder or its dev/ folder itself."""
    path = Path(dev_dir)
    if any(path.glob("part-*.parquet")):
        return path.parent, path.name
    return path, "dev"


def _aspect_report(aspect: Aspect, truth: list[str], predicted: list[str]) -> dict[str, Any]:
    labels = ASPECT_LABELS[aspect]
    confusion = {t: dict.fromkeys(labels, 0) for t in labels}
    for t, p in zip(truth, predicted, strict=True):
        confusion[t][p] += 1
    correct = sum(confusion[t][t] for t in labels)
    return {"n": len(truth), "accuracy": correct / len(truth), "labels": list(labels), "confusion": confusion}


def agreement_report(predictor_or_model_path: ReflectionPredictor | str | Path, dev_dir: str | Path, *,
                     batch_size: int = 64, out_path: str | Path | None = None, show: bool = True,
                     engine_kind: EngineKind = "auto") -> dict[str, Any]:
    """Score a critic (a predictor, or a checkpoint folder, an LM critic then run on `engine_kind`)
    against the teacher labels of a dev split.

    Returns ``{"n", "accuracy", "aspects": {aspect: {"n", "accuracy", "labels", "confusion"}}}``;
    writes it as JSON to `out_path` when given, and prints the tables unless `show` is False.
    """
    predictor = (predictor_or_model_path if isinstance(predictor_or_model_path, ReflectionPredictor)
                 else make_predictor(predictor_or_model_path, batch_size=batch_size, engine_kind=engine_kind))
    table = read_split(*_dev_folder(dev_dir))
    examples = split_examples(table)
    aspects = [ex.aspect for ex in examples]
    truth = table.column("target").to_pylist()
    probs = predictor.distributions(examples)
    by_aspect: dict[Aspect, tuple[list[str], list[str]]] = defaultdict(lambda: ([], []))
    for aspect, t, p in zip(aspects, truth, probs, strict=True):
        by_aspect[aspect][0].append(t)
        by_aspect[aspect][1].append(ASPECT_LABELS[aspect][int(np.argmax(p))])
    reports = {a.value: _aspect_report(a, *by_aspect[a]) for a in Aspect if a in by_aspect}
    n = sum(r["n"] for r in reports.values())
    correct = sum(r["accuracy"] * r["n"] for r in reports.values())
    report = {"n": n, "accuracy": correct / n if n else 0.0, "aspects": reports}
    if out_path is not None:
        Path(out_path).parent.mkdir(parents=True, exist_ok=True)
        write_text(out_path, json.dumps(report, indent=2) + "\n")
    if show:
        print_agreement(report)
    return report


def print_agreement(report: dict[str, Any]) -> None:
    """An accuracy table over aspects, then one confusion matrix per aspect."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    summary = Table(title="critic vs teacher (dev)", header_style="bold")
    for column in ("aspect", "n", "accuracy"):
        summary.add_column(column, justify="left" if column == "aspect" else "right")
    for aspect, r in report["aspects"].items():
        summary.add_row(aspect, f"{r['n']:,}", f"{100 * r['accuracy']:.1f}%")
    summary.add_row("all", f"{report['n']:,}", f"{100 * report['accuracy']:.1f}%", style="bold")
    console.print(summary)
    for aspect, r in report["aspects"].items():
        matrix = Table(title=f"{aspect}: teacher (rows) x critic (columns)", header_style="bold")
        matrix.add_column("teacher \\ critic")
        for label in r["labels"]:
            matrix.add_column(label, justify="right")
        for truth in r["labels"]:
            matrix.add_row(truth, *(str(r["confusion"][truth][p]) for p in r["labels"]))
        console.print(matrix)
