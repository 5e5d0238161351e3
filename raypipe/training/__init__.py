"""Training on Ray Train + DeepSpeed ZeRO: loss-masked encoding, the worker loop, checkpoints, export."""

from raypipe.training.encode import IGNORE_INDEX, EncodedExample, encode_example, row_prompt_target
from raypipe.training.spans import SPAN_KINDS, find_spans, register_span_kind
from raypipe.training.trainer import encode_stage, fit_stage, train_lm

__all__ = [
    "IGNORE_INDEX",
    "SPAN_KINDS",
    "EncodedExample",
    "encode_example",
    "find_spans",
    "register_span_kind",
    "row_prompt_target",
    "encode_stage",
    "fit_stage",
    "train_lm",
]
