"""Ray Train + DeepSpeed ZeRO-3 on CPU with 2 workers: loss, export, staged masks, a crashed run resumed.

A Ray Train fit costs ~35 s here, so each test checks several behaviours of one run. A worker group
restarted in place (`max_failures`) after a worker process is killed is tested on a multi-node cluster
in test_cluster_faults.py.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from raypipe.config import RaypipeConfig
from raypipe.errors import RaypipeError
from raypipe.jobs.train import run_train
from raypipe.prompts import format_generator_prompt
from raypipe.settings.training import (
    CriticTrainConfig,
    GeneratorTrainConfig,
    ModelTrainConfig,
    TrainingConfig,
    TrainStage,
)
from raypipe.tokens import (
    FULLY_SUPPORTED,
    GROUP_TOKENS,
    IRRELEVANT,
    NO_RETRIEVAL,
    PARAGRAPH_CLOSE,
    PARAGRAPH_OPEN,
    RELEVANT,
    RETRIEVAL,
    UTILITY,
    Group,
)
from tests.cluster_faults import Kill, kill_train_worker_after_checkpoint, own_processes

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow
CITIES = ["Velmora", "Ostrava", "Kelden", "Marrow", "Tillby", "Quensa"]


def _critic_rows(n: int) -> list[dict[str, str]]:
    rows = []
    for i in range(n):
        relevant = i % 2 == 0
        city = CITIES[i % len(CITIES)]
        evidence = f"{city} is a city on a river." if relevant else "Cats sleep most of the day."
        instruction = f"Question: where is {city}?\nEvidence: {evidence}\nIs the evidence relevant?"
        rows.append({"id": f"c{i:04d}", "aspect": "is_rel", "prompt": format_generator_prompt(instruction),
                     "target": RELEVANT if relevant else IRRELEVANT})
    return rows


def _generator_rows(n: int) -> list[dict[str, str]]:
    rows = []
    for i in range(n):
        city, other = CITIES[i % len(CITIES)], CITIES[(i + 1) % len(CITIES)]
        para = f"{PARAGRAPH_OPEN}{city}\n{city} lies on the river {other}.{PARAGRAPH_CLOSE}"
        if i % 3 == 0:
            output = f"{NO_RETRIEVAL}{city} is a city.{UTILITY[3]}"
        elif i % 3 == 1:
            output = f"{RETRIEVAL}{para}{RELEVANT}It lies on the {other}.{FULLY_SUPPORTED}{UTILITY[4]}"
        else:
            second = f"{PARAGRAPH_OPEN}{other}\n{other} is a long river.{PARAGRAPH_CLOSE}"
            output = (f"{RETRIEVAL}{para}{RELEVANT}It lies on the {other}.{FULLY_SUPPORTED}"
                      f"{RETRIEVAL}{second}{RELEVANT}The {other} is long.{FULLY_SUPPORTED}{UTILITY[4]}")
        rows.append({"id": f"g{i:04d}", "instruction": f"Tell me about {city}.", "input": "", "output": output,
                     "dataset": "bio"})
    return rows


def _write(rows: list[dict[str, str]], folder: Path) -> Path:
    folder.mkdir(parents=True)
    half = len(rows) // 2
    pq.write_table(pa.Table.from_pylist(rows[:half]), folder / "part-00000.parquet")
    pq.write_table(pa.Table.from_pylist(rows[half:]), folder / "part-00001.parquet")
    return folder


def _train_config(base: Path, data: Path, out: Path, stages: list[TrainStage], cls: type[ModelTrainConfig] = ModelTrainConfig,
                  **overrides) -> ModelTrainConfig:
    return cls(base_model=str(base), data=str(data), out_dir=str(out), stages=stages, num_workers=2,
                       cpus_per_worker=0.5, micro_batch_size=4, max_length=128, warmup_ratio=0.1,
                       deepspeed_config=str(REPO / "configs" / "deepspeed" / "zero3.json"),
                       shuffle_buffer_rows=64, log_every=2, **overrides)


def _metrics(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _is_rel_mass(model, tokenizer, prompt: str) -> float:
    """Probability the model puts on the IsRel tokens as the first response token."""
    ids = tokenizer(prompt, return_tensors="pt")
    with torch.no_grad():
        probs = model(**ids).logits[0, -1].softmax(-1)
    return float(sum(probs[tokenizer.convert_tokens_to_ids(t)] for t in GROUP_TOKENS[Group.IS_REL]))


def test_critic_learns_and_exports_the_consolidated_weights(ray_cluster, tiny_model_dir, tmp_path):
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
    from safetensors.torch import load_file

    from raypipe.logs import ray_logs_dir
    from raypipe.models import load_model
    from raypipe.training.target_loss import strip_prefix

    data = _write(_critic_rows(160), tmp_path / "d_critic" / "train")
    out = tmp_path / "critic"
    # 160 rows / 2 workers / micro 4 = 20 steps per epoch; 0.5 epoch = 10 steps
    tc = _train_config(tiny_model_dir, data, out, [TrainStage(name="main", lr=1e-2, mask=["prompt"], epochs=0.5)],
                       CriticTrainConfig, checkpoint_every=4, keep_checkpoints_after_export=True)
    stats = run_train(RaypipeConfig(training=TrainingConfig(critic=tc)), "critic")

    summary = stats["stage main"]
    assert summary["steps"] == 10 and summary["resumed_from_step"] is None
    log = {r["step"]: r for r in _metrics(out / "logs" / "main.metrics.jsonl")}
    assert sorted(log) == list(range(1, 11))
    losses = [log[s]["loss"] for s in (1, 2, 3)], [log[s]["loss"] for s in (8, 9, 10)]
    assert sum(losses[1]) < sum(losses[0]) * 0.8

    # the export holds the trained weights, consolidated from the ZeRO-3 shards of the last checkpoint
    last_checkpoint = sorted(p for p in (out / "checkpoints" / "main").glob("checkpoint_*") if p.is_dir())[-1]
    # (the engine trains the model inside TargetLossLM, so the shards name its parameters "lm.<name>")
    trained = strip_prefix(get_fp32_state_dict_from_zero_checkpoint(str(last_checkpoint), tag="ds"))
    exported = load_file(str(out / "model.safetensors"))
    base = load_file(str(tiny_model_dir / "model.safetensors"))
    name = "model.layers.0.mlp.down_proj.weight"
    assert torch.allclose(exported[name], trained[name])
    assert not torch.allclose(exported[name], base[name])
    assert (out / "_SUCCESS").exists()

    model, tokenizer = load_model(out, device="cpu")
    base_model, _ = load_model(tiny_model_dir, device="cpu")
    prompt = _critic_rows(1)[0]["prompt"]
    # Eq. 1 at work: the critic moved probability onto the IsRel tokens at the answer position
    assert _is_rel_mass(model, tokenizer, prompt) > 5 * _is_rel_mass(base_model, tokenizer, prompt)
    ids = tokenizer(prompt, return_tensors="pt")
    assert model.generate(**ids, max_new_tokens=2, do_sample=False).shape[1] == ids["input_ids"].shape[1] + 2

    # on a local instance Ray Train starts no preemption watcher (raypipe.runtime.LOCAL_INSTANCE_ENV):
    # the worker logs name each actor process, the controllers' included
    actors = [p.read_text(errors="replace")[:200] for p in Path(ray_logs_dir()).glob("worker-*.out")]
    assert any(":actor_name:TrainController" in head for head in actors)
    assert not any(":actor_name:PreemptionWatcher" in head for head in actors)


def _loss_token_count(tokenizer, rows: list[dict[str, str]], mask_paragraphs: bool) -> int:
    """Target ids + EOS, minus the ids strictly between each <paragraph> and its </paragraph>."""
    open_id = tokenizer.convert_tokens_to_ids(PARAGRAPH_OPEN)
    close_id = tokenizer.convert_tokens_to_ids(PARAGRAPH_CLOSE)
    total = 0
    for row in rows:
        prompt = format_generator_prompt(row["instruction"])
        ids = tokenizer(prompt + row["output"])["input_ids"][len(tokenizer(prompt)["input_ids"]):]
        inside = False
        for tok in ids:
            inside = inside and tok != close_id
            total += not (inside and mask_paragraphs)
            inside = inside or tok == open_id
        total += 1
    return total


def test_generator_stages_apply_their_masks_and_a_crashed_run_resumes(ray_cluster, tiny_model_dir, tmp_path):
    from raypipe.models import load_model, load_tokenizer

    rows = _generator_rows(96)
    # rejected: a prompt longer than max_length (nothing left to learn), a malformed output;
    # a long output is truncated and kept
    too_long_prompt = {**rows[0], "id": "long-prompt", "instruction": "Tell me about Velmora. " * 60}
    long_output = {**rows[0], "id": "long-output", "output": f"{NO_RETRIEVAL}{'Velmora is a city. ' * 60}"}
    unclosed = {**rows[1], "id": "unclosed", "output": f"{RETRIEVAL}{PARAGRAPH_OPEN}Velmora\nno end{UTILITY[4]}"}
    data = _write(rows + [too_long_prompt, long_output, unclosed], tmp_path / "gen_data" / "data")
    out = tmp_path / "generator"
    stages = [TrainStage(name="masked", lr=2e-3, mask=["prompt", "paragraph"], epochs=0.5),
              TrainStage(name="full", lr=1e-3, mask=["prompt"], epochs=0.25)]
    cfg = RaypipeConfig(training=TrainingConfig(
        generator=_train_config(tiny_model_dir, data, out, stages, GeneratorTrainConfig, checkpoint_every=2,
                                max_failures=0, group_by_length=True)))

    # a worker process SIGKILLed once the first checkpoint is registered; no retries allowed, so the run fails
    kills: list[Kill] = []
    killer = threading.Thread(target=lambda: kills.append(
        kill_train_worker_after_checkpoint(out, "masked", own_processes, timeout_s=300)), daemon=True)
    killer.start()
    with pytest.raises(RaypipeError, match="masked"):
        run_train(cfg, "generator")
    killer.join(timeout=30)
    assert kills, "the run failed before a worker was killed"
    assert not (out / "stages" / "masked" / "_SUCCESS").exists()
    summary = run_train(cfg, "generator")

    # the rerun picked the first stage up at its latest registered checkpoint and finished both stages,
    # its length-grouped micro-batches (a window of 64 rows per worker's 48) counted as plain ones are
    resumed = summary["stage masked"]["resumed_from_step"]
    assert resumed is not None and kills[0].checkpoint_step <= resumed <= kills[0].step_logged and resumed % 2 == 0
    reruns = [r for r in _metrics(out / "logs" / "masked.metrics.jsonl") if r["attempt_start_step"] == resumed]
    assert [r["step"] for r in reruns] == list(range(resumed + 1, 7))
    assert summary["stage masked"]["steps"] == 6  # 96 rows / 2 / 4 = 12 steps per epoch
    assert summary["stage full"]["resumed_from_step"] is None
    assert summary["stage full"]["steps"] == 3
    stages_stats = {s["stage"]: s for s in json.loads((out / "train_stats.json").read_text())["stages"]}
    assert stages_stats["full"]["base_model"] == str(out / "stages" / "masked")
    # finished, the run's checkpoints (both stages') are gone by default; the critic's test above keeps them
    assert (out / "_SUCCESS").exists() and not (out / "checkpoints").exists()

    tokenizer = load_tokenizer(tiny_model_dir)
    long_output_kept = 128 - len(tokenizer(format_generator_prompt(long_output["instruction"]))["input_ids"])
    masked, full = stages_stats["masked"]["encode"], stages_stats["full"]["encode"]
    assert masked["loss_tokens"] == _loss_token_count(tokenizer, rows, True) + long_output_kept
    assert full["loss_tokens"] == _loss_token_count(tokenizer, rows, False) + long_output_kept
    assert (masked["rows_read"], masked["rows_train"], masked["rows_truncated"]) == (99, 97, 2)
    assert masked["rows_rejected"] == {"bad_row": 1, "no_loss_tokens": 1}
    rejects = {r["id"]: r["reason"] for r in _metrics(out / "rejects" / "masked.jsonl")}
    assert set(rejects) == {"long-prompt", "unclosed"}
    assert rejects["long-prompt"].startswith("no_loss_tokens") and "128" in rejects["long-prompt"]
    assert "unclosed <paragraph>" in rejects["unclosed"] and "field='output'" in rejects["unclosed"]
    assert full["rows_rejected"] == {"bad_row": 1, "no_loss_tokens": 1}

    for folder in (out / "stages" / "masked", out):
        model, tok = load_model(folder, device="cpu")
        ids = tok(format_generator_prompt("Tell me about Velmora."), return_tensors="pt")
        generated = model.generate(**ids, max_new_tokens=4, do_sample=False)
        assert generated.shape[1] > ids["input_ids"].shape[1]
