"""The action trigger (CRAG §4.3): three actions from the evaluator's scores of a request's documents.

- Correct: at least one document scores higher than `upper`;
- Incorrect: every document scores below `lower` (and no document at all is Incorrect too: there is
  nothing to trust);
- Ambiguous: everything else.

At the boundaries the paper's words hold: "higher than the upper threshold", "below the lower
threshold", both strict, so a score exactly at `upper` is Ambiguous and one exactly at `lower` is not
Incorrect (the official code compares with >= for Correct; we follow the text). A consequence worth
having: `upper: 1.0` means "never Correct" even though tanh saturates at exactly 1.0.

The ablations of Tables 2 and 11 are settings (`actions`): `no_correct` / `no_incorrect` merge that
action into Ambiguous (§5.4: "it was merged with Ambiguous"); `no_ambiguous` keeps one threshold, so
every input is Correct or Incorrect (the paper does not say which threshold; we keep `upper`, so that
Correct means the same as in the full method); `only_<action>` triggers that action for every input
that has documents (App. B.4).
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

from raypipe.methods.crag.settings import CRAGActions


class Action(str, Enum):
    CORRECT = "correct"
    INCORRECT = "incorrect"
    AMBIGUOUS = "ambiguous"


def above_upper(score: float, upper: float) -> bool:
    """A document the evaluator judges relevant enough for Correct: "higher than" `upper`, strictly.
    The evaluator's report counts with this predicate too, so report and trigger agree at the boundary."""
    return score > upper


def below_lower(score: float, lower: float) -> bool:
    """A document the evaluator judges irrelevant enough for Incorrect: "below" `lower`, strictly."""
    return score < lower


def trigger(scores: Sequence[float], upper: float, lower: float, actions: CRAGActions = "all") -> Action:
    """The action for one request whose documents scored `scores`."""
    if not scores:
        return Action.INCORRECT
    if actions.startswith("only_"):
        return Action(actions.removeprefix("only_"))
    best = max(scores)
    if actions == "no_ambiguous":
        return Action.CORRECT if above_upper(best, upper) else Action.INCORRECT
    if above_upper(best, upper):
        action = Action.CORRECT
    elif below_lower(best, lower):
        action = Action.INCORRECT
    else:
        action = Action.AMBIGUOUS
    merged = {"no_correct": Action.CORRECT, "no_incorrect": Action.INCORRECT}.get(actions)
    return Action.AMBIGUOUS if action is merged else action


def needs_internal(action: Action) -> bool:
    """Algorithm 1: Correct and Ambiguous read the refined retrieved documents."""
    return action is not Action.INCORRECT


def needs_external(action: Action) -> bool:
    """Algorithm 1: Incorrect and Ambiguous search the web."""
    return action is not Action.CORRECT
