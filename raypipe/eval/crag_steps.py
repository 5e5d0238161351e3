"""What CRAG's corrective step did on an eval set, counted, so that an accuracy of `crag` or `selfcrag`
is read beside how it was reached: how often each action fired (CRAG §4.3), how often the web search
(§4.5) failed or found nothing, how often the query rewriter fell back to the raw question, and how
often the step read something other than Algorithm 1's knowledge where the paper is silent
(raypipe.methods.crag.knowledge: a Correct request whose strips were all filtered keeps its best
document whole; an Incorrect request whose web search failed reads nothing).

Everything is read from each prediction's trace (`trace.crag`, `Knowledge.as_dict`), so the
prediction files of a finished eval are counted again without decoding. A Self-CRAG item for which
Self-RAG never retrieved has no corrective step and is not counted (its retrieval frequency says how
many).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

ACTIONS = ("correct", "incorrect", "ambiguous")
#: how a web query was made (`Rewrite.how`): keywords, the question with rewriter `none`, and the
#: two fallbacks to the question
REWRITES = ("rewritten", "raw", "no_keyword", "failed")
#: the rewrites where the rewriter fell back to the raw question
REWRITER_FALLBACKS = ("no_keyword", "failed")
#: what a request read where Algorithm 1 would leave it nothing (`Knowledge.fallback`)
FALLBACKS = ("passing_document", "no_knowledge")
#: how a web search ended: results, a failure after its retries (or a malformed response), no result
WebOutcome = Literal["found", "failed", "empty"]


@dataclass(frozen=True)
class CragStep:
    """One item's corrective step: its action, and when it searched the web, how the search ended
    and how its query was made; the fallback, if any."""

    action: str
    web: WebOutcome | None = None
    rewrite: str | None = None
    fallback: str | None = None

    @classmethod
    def of(cls, trace: dict[str, Any] | None) -> CragStep | None:
        """The step a method result's trace records (None: the item had no corrective step)."""
        crag = (trace or {}).get("crag")
        if not crag:
            return None
        web: WebOutcome | None = None
        if crag.get("web") is not None or crag.get("web_error"):
            web = "failed" if crag.get("web_error") else "found" if crag["web"]["results"] else "empty"
        rewrite = crag.get("rewrite")
        return cls(crag["action"], web, rewrite["how"] if rewrite else None, crag.get("fallback"))


def count_steps(steps: Iterable[CragStep]) -> dict[str, Any] | None:
    """Counts over a set's items (None when no item had a corrective step): `actions`; `web_searches`
    and, of them, `web_failures` and `web_empty`; `rewrites` by how the query was made and
    `rewriter_fallbacks` (no_keyword + failed); `fallbacks` by what was read instead."""
    steps = list(steps)
    if not steps:
        return None
    actions = Counter(s.action for s in steps)
    web = Counter(s.web for s in steps if s.web is not None)
    rewrites = Counter(s.rewrite for s in steps if s.rewrite is not None)
    fallbacks = Counter(s.fallback for s in steps if s.fallback is not None)
    return {
        "actions": {a: actions[a] for a in ACTIONS},
        "web_searches": sum(web.values()), "web_failures": web["failed"], "web_empty": web["empty"],
        "rewrites": {how: rewrites[how] for how in REWRITES},
        "rewriter_fallbacks": sum(rewrites[how] for how in REWRITER_FALLBACKS),
        "fallbacks": {f: fallbacks[f] for f in FALLBACKS},
    }


def describe(counts: dict[str, Any]) -> str:
    """One line for a terminal summary."""
    actions = " / ".join(f"{a} {counts['actions'][a]}" for a in ACTIONS)
    fallbacks = counts["fallbacks"]
    return (f"{actions}; web searches {counts['web_searches']} (failed {counts['web_failures']}, "
            f"empty {counts['web_empty']}); rewriter fell back to the question {counts['rewriter_fallbacks']}; "
            f"Correct kept its best document {fallbacks['passing_document']}; "
            f"read nothing after a failed web search {fallbacks['no_knowledge']}")
