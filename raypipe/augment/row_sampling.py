"""The sampling policy of Self-RAG App. A.3, applied to rendered rows.

The paper drops 50% of the instances without any retrieval token (instruction-following sets are full
of queries that need none) and up-samples QA instances that carry [Irrelevant], so that
[Relevant]/[Fully supported] do not dominate. Ours beside it: a contrast copy of a QA row that reads
a passage the critic rejected (`contrast_irrelevant_qa`), and a copy of any row that reads a relevant
passage which does not support its segment (`contrast_unsupported`). Every draw is seeded by the row id and recorded in the
row's state, so a rerun makes the same choices.
"""

from __future__ import annotations

import math

from raypipe import tokens as T
from raypipe.augment.stages import contrast_segment, unsupported_segment
from raypipe.augment.state import InstanceState, seeded_uniform
from raypipe.settings.augment import SamplingConfig


def apply_sampling(state: InstanceState, row_id: str, dataset: str, augmented: str,
                   cfg: SamplingConfig) -> None:
    """Set `state.keep` and `state.copies` for one rendered row."""
    if T.RETRIEVAL not in augmented:
        u = seeded_uniform(cfg.seed, row_id, "drop")
        state.random_draws["drop"] = u
        state.keep = u >= cfg.drop_no_retrieval
    if state.keep and dataset in cfg.qa_datasets and T.IRRELEVANT in augmented:
        extra = cfg.upsample_irrelevant_qa
        u = seeded_uniform(cfg.seed, row_id, "upsample")
        state.random_draws["upsample"] = u
        state.copies = 1 + math.floor(extra) + (1 if u < extra - math.floor(extra) else 0)
    contrasted = cfg.qa_datasets if cfg.contrast_datasets is None else cfg.contrast_datasets
    if state.keep and dataset in contrasted and cfg.contrast_irrelevant_qa > 0 and contrast_segment(state) is not None:
        u = seeded_uniform(cfg.seed, row_id, "contrast")
        state.random_draws["contrast"] = u
        state.contrast = u < cfg.contrast_irrelevant_qa
    if state.keep and cfg.contrast_unsupported > 0 and unsupported_segment(state) is not None:
        u = seeded_uniform(cfg.seed, row_id, "unsupported")
        state.random_draws["unsupported"] = u
        state.unsupported = u < cfg.contrast_unsupported
