"""Predictions kept as they stream, so a stopped eval loses no decoded item.

A pass of `raypipe eval` decodes every item under each variant of one generator; on 2 CPU cores a
pass over a few hundred items takes hours. Each result is appended to
`predictions/<variant>.partial.jsonl` the moment it arrives (its first line is the variant's
fingerprint); a rerun with the same fingerprint reads those rows back and decodes only the rest. The
final `<variant>.jsonl` is written when the pass ends and the partial file is then removed. A file of
another fingerprint (the inputs changed) is started afresh; a line cut short by a kill is the only
one lost.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

logger = logging.getLogger(__name__)

#: (eval set, row id): how an eval item is named across runs
ItemKey = tuple[str, str]


def partial_path(predictions_dir: Path, variant: str) -> Path:
    return predictions_dir / f"{variant}.partial.jsonl"


def read_partial(path: Path, fingerprint: str) -> dict[ItemKey, dict[str, Any]]:
    """The results a stopped run kept for this fingerprint, by item; empty when there are none."""
    if not path.is_file():
        return {}
    done: dict[ItemKey, dict[str, Any]] = {}
    with path.open(encoding="utf-8") as fh:
        header = fh.readline()
        try:
            if json.loads(header).get("fingerprint") != fingerprint:
                return {}
        except json.JSONDecodeError:
            return {}
        for line in fh:
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                logger.info("%s: a line cut short by the stopped run is decoded again", path)
                continue
            done[(row["set"], row["id"])] = row["result"]
    return done


class PartialWriter:
    """Appends each result of one pass to its variant's partial file, flushed line by line."""

    def __init__(self, predictions_dir: Path, fingerprints: dict[str, str],
                 kept: dict[str, dict[ItemKey, dict[str, Any]]]):
        predictions_dir.mkdir(parents=True, exist_ok=True)
        self._kept = kept
        self._files: dict[str, IO[str]] = {}
        for variant, fingerprint in fingerprints.items():
            path = partial_path(predictions_dir, variant)
            if kept.get(variant):
                fh = path.open("a", encoding="utf-8")
                if not _ends_a_line(path):
                    fh.write("\n")  # after a line the kill cut short, which the reader skips
            else:  # absent, or another fingerprint's: start afresh
                fh = path.open("w", encoding="utf-8")
                fh.write(json.dumps({"fingerprint": fingerprint}) + "\n")
            self._files[variant] = fh

    def add(self, variant: str, key: ItemKey, result: dict[str, Any]) -> bool:
        """Keep a result; False for one a stopped run already kept (decoded again only because
        another variant of the pass lacked the item), which is not written twice."""
        if key in self._kept.get(variant, {}):
            return False
        self._files[variant].write(json.dumps({"set": key[0], "id": key[1], "result": result}) + "\n")
        self._files[variant].flush()
        return True

    def close(self) -> None:
        for fh in self._files.values():
            fh.close()


def _ends_a_line(path: Path) -> bool:
    with path.open("rb") as fh:
        fh.seek(-1, 2)
        return fh.read(1) == b"\n"


def remove_partials(predictions_dir: Path, variants: Iterable[str]) -> None:
    for variant in variants:
        partial_path(predictions_dir, variant).unlink(missing_ok=True)
