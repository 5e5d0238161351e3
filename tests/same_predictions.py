"""Are two eval runs' predictions byte-identical? The check behind a refactor that must not change
what any method decodes: run `raypipe eval` on the same generator and config before and after, then

    python -m tests.same_predictions BEFORE/predictions AFTER/predictions

Every `<variant>.jsonl` of BEFORE must exist in AFTER with the same bytes; the first differing row of
a variant is printed. Exit status 0 only when all are identical (and there is at least one).
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path


def compare(before: Path, after: Path) -> tuple[list[str], list[str]]:
    """(report lines, names of the variants that are missing or differ)."""
    lines, bad = [], []
    names = sorted(p.name for p in before.glob("*.jsonl"))
    for name in names:
        old, new = before / name, after / name
        if not new.exists():
            lines.append(f"MISSING {name}")
            bad.append(name)
            continue
        a, b = old.read_bytes(), new.read_bytes()
        rows = a.count(b"\n")
        lines.append(f"{'same' if a == b else 'DIFF'} {name}: {rows} rows, sha256 {hashlib.sha256(a).hexdigest()[:12]}")
        if a != b:
            bad.append(name)
            row = next((i for i, (x, y) in enumerate(zip(a.splitlines(), b.splitlines(), strict=False)) if x != y),
                       min(a.count(b"\n"), b.count(b"\n")))
            lines.append(f"  first differing row: {row}")
    lines.append(f"{len(names) - len(bad)} of {len(names)} variants byte-identical")
    return lines, bad


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__)
        return 2
    lines, bad = compare(Path(argv[0]), Path(argv[1]))
    print("\n".join(lines))
    return 0 if lines[:-1] and not bad else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
