"""Self-RAG's released training data, as released, through the training job: `raypipe train generator`
on the generator data's JSON lines (tests/fixtures/released/selfrag_train_data.jsonl) trains with the
passages out of the loss; the critic data's JSON array file is read by the same job."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from raypipe.config import RaypipeConfig
from raypipe.jobs.train import run_train
from raypipe.prompts import format_generator_prompt
from raypipe.settings.training import GeneratorTrainConfig, TrainingConfig, TrainStage
from raypipe.tokens import PARAGRAPH_CLOSE, PARAGRAPH_OPEN
from raypipe.training.data import encode_dataset

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "released"

pytestmark = pytest.mark.slow


def test_released_generator_data_trains_and_released_critic_data_reads(ray_cluster, tiny_model_dir, tmp_path):
    from raypipe.models import load_tokenizer

    data = tmp_path / "selfrag_train_data"
    data.mkdir()
    shutil.copy(FIXTURES / "selfrag_train_data.jsonl", data / "train.jsonl")
    rows = [json.loads(line) for line in (data / "train.jsonl").read_text().splitlines()]
    out = tmp_path / "generator"
    tc = GeneratorTrainConfig(base_model=str(tiny_model_dir), data=str(data), out_dir=str(out), num_workers=2,
                              cpus_per_worker=0.5, micro_batch_size=1, max_length=512, warmup_ratio=0.0,
                              stages=[TrainStage(name="main", lr=1e-3, mask=["prompt", "paragraph"], epochs=1)],
                              deepspeed_config=str(REPO / "configs" / "deepspeed" / "zero3.json"), log_every=1)
    summary = run_train(RaypipeConfig(training=TrainingConfig(generator=tc)), "generator")

    assert (summary["stage main"]["rows"], summary["stage main"]["rejected"], summary["stage main"]["steps"]) == (4, 0, 2)
    encode = json.loads((out / "train_stats.json").read_text())["stages"][0]["encode"]
    # the loss reads each output with its passages' bodies cut out (markers kept), and EOS; nothing of the prompt
    tokenizer = load_tokenizer(tiny_model_dir)
    body = re.compile(re.escape(PARAGRAPH_OPEN) + ".*?" + re.escape(PARAGRAPH_CLOSE), re.S)
    expected = sum(len(tokenizer(format_generator_prompt(r["instruction"]) + body.sub(PARAGRAPH_OPEN + PARAGRAPH_CLOSE,
                                                                                        r["output"]))["input_ids"])
                   - len(tokenizer(format_generator_prompt(r["instruction"]))["input_ids"]) + 1 for r in rows)
    assert encode["loss_tokens"] == expected
    assert (out / "_SUCCESS").exists()

    # the released critic data is one JSON array (a .json file): read by the same job, each row's one token learned
    critic = tmp_path / "critic_data"
    critic.mkdir()
    shutil.copy(FIXTURES / "selfrag_critic_train.json", critic / "critic_train.json")
    train, stats = encode_dataset(str(critic), str(tiny_model_dir), ["prompt"], 512, 0, 2, tmp_path / "rejects.jsonl")
    assert (stats["rows_read"], stats["rows_train"], stats["rows_rejected"]) == (5, 5, {"bad_row": 0, "no_loss_tokens": 0})
    assert stats["loss_tokens"] == 5 * 2  # the label token and EOS
