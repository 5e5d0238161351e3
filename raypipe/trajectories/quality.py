"""Quality control of generated trajectories (Self-Reasoning Algorithm 1).

Algorithm 1, per sample: keep it if its answer is correct (program P) and, for a long-form sample,
its citation recall ≥ δ_r and citation precision ≥ δ_p (the paper: 0.8 and 0.8). The citation
metrics (ALCE's, with a pluggable support checker) and the long-form EM recall are the eval's own
(`raypipe.eval.citations`, `raypipe.eval.longform`): the same scores judge the method's long-form
answers there.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from raypipe.eval.citations import SupportChecker, citation_scores
from raypipe.eval.longform import em_recall
from raypipe.eval.metrics import answer_match
from raypipe.settings.teachers import QualityConfig
from raypipe.trajectories.items import TrajectoryItem
from raypipe.trajectory_format import Trajectory


def answer_correct(item: TrajectoryItem, t: Trajectory, cfg: QualityConfig) -> bool:
    """Program P of Algorithm 1: QA answer match (accuracy as the paper's short-form metric), the
    exact label for fact verification, EM recall of the gold facts ≥ `min_em_recall` for long form."""
    if item.task == "qa":
        return answer_match(t.answer, [item.gold])
    if item.task == "fact":
        return t.answer == item.gold
    return em_recall(t.analysis, item.gold_facts) >= cfg.min_em_recall


@dataclass
class Verdict:
    """Quality control's verdict on one parsed trajectory; `stage` is the funnel step it failed at
    (None: kept)."""

    answer_correct: bool
    citation_recall: float | None = None
    citation_precision: float | None = None
    stage: str | None = None

    @property
    def kept(self) -> bool:
        return self.stage is None

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "kept": self.kept}


def quality_control(item: TrajectoryItem, t: Trajectory, checker: SupportChecker, cfg: QualityConfig) -> Verdict:
    """Algorithm 1 for one sample: answer first; long form then citation recall and precision of the
    analysis (the long-form answer). Ours: a trajectory whose RAP judged every document irrelevant
    answers from internal knowledge and has nothing to cite, so the citation check applies only when
    RAP found relevant documents. With `cfg.enabled` off every sample is kept (scores still
    reported)."""
    correct = answer_correct(item, t, cfg)
    verdict = Verdict(correct)
    cited = item.task == "longform" and t.relevant
    if cited:
        scores = citation_scores(t.analysis, item, checker)
        verdict.citation_recall, verdict.citation_precision = scores.recall, scores.precision
    if not cfg.enabled:
        return verdict
    if not correct:
        verdict.stage = "answer"
    elif cited and (verdict.citation_recall < cfg.min_citation_recall
                                      or verdict.citation_precision < cfg.min_citation_precision):
        verdict.stage = "citation"
    return verdict
