"""`raypipe eval`: every evaluated method and its variants decoded on Ray Data, scored, tabled and
plotted (raypipe.eval)."""

from __future__ import annotations

from typing import Any

from raypipe.config import RaypipeConfig
from raypipe.eval.predict import SearcherFactory
from raypipe.eval.runner import EvalSections, evaluate


def eval_sections(cfg: RaypipeConfig) -> EvalSections:
    """The sections of `cfg` eval reads."""
    return EvalSections(cfg.eval, cfg.methods, cfg.retrieval, cfg.engine, cfg.instruct_lm, cfg.crag.evaluator,
                        cfg.trajectories.qc, cfg.segmentation, cfg.ray, cfg.progress_every_s, cfg.crag.rewriter)


def run_eval(cfg: RaypipeConfig, searcher_factory: SearcherFactory | None = None) -> dict[str, Any]:
    """Evaluate `eval.methods` on `eval.eval_sets` into `eval.out_dir`; `searcher_factory` replaces the
    configured dense retriever in each actor (a picklable callable)."""
    return evaluate(eval_sections(cfg), searcher_factory)
