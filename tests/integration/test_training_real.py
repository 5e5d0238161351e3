"""Ray Train + DeepSpeed ZeRO-3 on the real pretrained LM (SmolLM2-135M, 30 layers, tied 49k-row
embeddings), 2 CPU workers: a few steps lower the loss on a fixed batch, and the export loads back
with its reflection tokens and EOS intact."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from raypipe.config import RaypipeConfig
from raypipe.jobs.train import run_train
from raypipe.models import load_model, load_tokenizer, reflection_token_ids
from raypipe.models.prompt_format import generator_prompt, recorded_format
from raypipe.prompts import GeneratorPrompt
from raypipe.settings.training import GeneratorTrainConfig, TrainingConfig, TrainStage
from raypipe.tokens import FULLY_SUPPORTED, NO_RETRIEVAL, RELEVANT, RETRIEVAL, UTILITY, format_paragraph
from raypipe.training.data import collate
from raypipe.training.encode import encode_row

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
PEOPLE = [("Ada Velmor", "Ostrava"), ("Tomas Kell", "Quensa"), ("Lena Marrow", "Tillby"),
          ("Iris Dalgren", "Kelden"), ("Owen Pratt", "Velmora"), ("Mira Sol", "Harwick")]
MASK = ["prompt", "paragraph"]


def _rows(n: int) -> list[dict[str, str]]:
    rows = []
    for i in range(n):
        name, city = PEOPLE[i % len(PEOPLE)]
        if i % 2:
            output = f"{NO_RETRIEVAL}{name} is a person.{UTILITY[3]}"
        else:
            output = (f"{RETRIEVAL}{format_paragraph(name, f'{name} was born in {city}.')}{RELEVANT}"
                      f"{name} was born in {city}.{FULLY_SUPPORTED}{UTILITY[4]}")
        rows.append({"id": f"r{i:03d}", "instruction": f"Where was {name} born?", "input": "", "output": output})
    return rows


def _batch_loss(model_dir: Path, rows: list[dict[str, str]]) -> float:
    """Mean token loss of the rows, encoded exactly as training encodes them (SmolLM2 has a chat
    template, so `prompt_format: auto` writes them in it)."""
    model, tokenizer = load_model(model_dir, device="cpu", dtype=torch.float32)
    encoded = [encode_row(r, tokenizer, MASK, 96, prompt_format=GeneratorPrompt("chat", tokenizer)) for r in rows]
    batch = collate({"input_ids": [e.input_ids for e in encoded], "labels": [e.labels for e in encoded]},
                    tokenizer.pad_token_id)
    with torch.no_grad():
        return model(**batch).loss.item()


def test_zero3_steps_on_the_real_model_lower_the_loss_on_a_fixed_batch(ray_cluster, smollm2_dir, tmp_path):
    rows = _rows(8)
    data = tmp_path / "d_gen"
    data.mkdir()
    pq.write_table(pa.Table.from_pylist(rows), data / "part-00000.parquet")
    out = tmp_path / "generator"
    # 8 rows / 2 workers / micro-batch 2 = 2 optimizer steps in one epoch (one checkpoint: the final one);
    # a step of the 30-layer model takes ~9 s here
    tc = GeneratorTrainConfig(
        base_model=str(smollm2_dir), data=str(data), out_dir=str(out),
        stages=[TrainStage(name="main", lr=1e-4, mask=MASK, epochs=1)], num_workers=2, cpus_per_worker=0.5,
        micro_batch_size=2, max_length=96, warmup_ratio=0.0, zero_stage=3, log_every=1,
        deepspeed_config=str(REPO / "configs" / "deepspeed" / "zero3.json"),
    )
    before = _batch_loss(smollm2_dir, rows)
    stats = run_train(RaypipeConfig(training=TrainingConfig(generator=tc)), "generator")
    after = _batch_loss(out, rows)

    summary = stats["stage main"]
    assert summary["steps"] == 2 and summary["truncated"] == 0 and summary["rejected"] == 0
    assert after < 0.7 * before, (before, after)
    # ZeRO-3 really partitioned the 134.5M parameters: a rank holds well under a full fp32 copy's 16 B/param
    assert summary["model_state_mib_per_rank"] < 0.75 * 134.5e6 * 16 / 2**20

    model, tokenizer = load_model(out, device="cpu")
    assert model.config.num_hidden_layers == 30
    assert len(tokenizer) == model.get_input_embeddings().num_embeddings == 49152 + 15
    assert reflection_token_ids(tokenizer) == reflection_token_ids(load_tokenizer(smollm2_dir))
    assert model.generation_config.eos_token_id == tokenizer.eos_token_id == tokenizer.convert_tokens_to_ids("<|im_end|>")
    # trained in the chat format, the folder says so, and an engine on it prompts in that format
    assert recorded_format(out) == "chat" and recorded_format(smollm2_dir) is None
    assert generator_prompt(out, tokenizer)("Where was Ada Velmor born?").startswith("<|im_start|>")
