"""How far an eval figure can be trusted: a 95% interval on every accuracy, the exact paired test
behind every "A beats B" on the same items, and macro-F1 for a closed set whose labels are unbalanced.

On 50 items a 65% accuracy is 65 +- 13 points, and two methods that disagree on a fifth of the items
need ~340 paired items before a 5-point lead means anything: a table without these is a rounding
accident waiting to be read as a result.

- The interval is Wilson's score interval (scipy's `binomtest(...).proportion_ci(method="wilson")`):
  unlike the normal approximation it stays inside [0, 1] and keeps its coverage near 0% and 100%.
- The paired test is McNemar's exact test: on the items exactly one of the two methods gets right,
  how often it is A, under a fair coin (a two-sided binomial test). The items both get right or both
  get wrong carry no evidence about which is better, so they do not enter.
- Several comparisons read together get Holm's step-down correction (`holm`), which controls the
  chance of any false "beats" among them without Bonferroni's loss of power.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from scipy.stats import binomtest

#: the level below which a paired difference is called a result
ALPHA = 0.05


def accuracy_interval(correct: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson's score interval on `correct` of `n` (as shares, not percent); (0, 1) for no item."""
    if n == 0:
        return (0.0, 1.0)
    ci = binomtest(correct, n).proportion_ci(confidence_level=confidence, method="wilson")
    return (float(ci.low), float(ci.high))


@dataclass(frozen=True)
class PairedTest:
    """McNemar's exact test of method `a` against method `b` on the same `n` items: `a_only` items only
    `a` answered right, `b_only` only `b`; `p_value` two-sided; `adjusted_p` after Holm's correction
    over the comparisons reported together (the raw p until then)."""

    a: str
    b: str
    n: int
    a_only: int
    b_only: int
    p_value: float
    adjusted_p: float

    @property
    def verdict(self) -> str:
        """'ahead' or 'behind' (`a` against `b`) where the difference passes the test after
        correction, else 'no difference shown'."""
        if self.adjusted_p >= ALPHA or self.a_only == self.b_only:
            return "no difference shown"
        return "ahead" if self.a_only > self.b_only else "behind"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "verdict": self.verdict}


def mcnemar(a: str, a_correct: Sequence[bool], b: str, b_correct: Sequence[bool]) -> PairedTest:
    """The exact paired test on two methods' per-item correctness (same items, same order)."""
    if len(a_correct) != len(b_correct):
        raise ValueError(f"paired test of {a} and {b}: {len(a_correct)} items against {len(b_correct)}")
    a_only = sum(x and not y for x, y in zip(a_correct, b_correct, strict=True))
    b_only = sum(y and not x for x, y in zip(a_correct, b_correct, strict=True))
    discordant = a_only + b_only
    p = 1.0 if discordant == 0 else float(binomtest(a_only, discordant, 0.5).pvalue)
    return PairedTest(a, b, len(a_correct), a_only, b_only, p, p)


def holm(tests: Sequence[PairedTest]) -> list[PairedTest]:
    """The same tests with `adjusted_p` after Holm's step-down correction over all of them (order kept)."""
    order = sorted(range(len(tests)), key=lambda i: tests[i].p_value)
    adjusted = [0.0] * len(tests)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(tests) - rank) * tests[i].p_value))
        adjusted[i] = running
    return [PairedTest(**{**asdict(t), "adjusted_p": adjusted[i]}) for i, t in enumerate(tests)]


def macro_f1(predicted: Sequence[str | None], gold: Sequence[str]) -> float:
    """The mean over the gold labels of each label's F1 (an answer naming no label is wrong for its
    item's label). Kept here rather than taken from scikit-learn: one formula does not earn a
    dependency, and `None` answers need this rule, which sklearn's label encoding does not take."""
    labels = sorted(set(gold))
    scores = []
    for label in labels:
        tp = sum(p == label and g == label for p, g in zip(predicted, gold, strict=True))
        fp = sum(p == label and g != label for p, g in zip(predicted, gold, strict=True))
        fn = sum(p != label and g == label for p, g in zip(predicted, gold, strict=True))
        scores.append(0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn))
    return sum(scores) / len(scores) if scores else 0.0
