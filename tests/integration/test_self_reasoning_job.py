"""`raypipe self-reasoning data` end to end on Ray (oracle teacher with errors, world checker, keyword
retriever over the world's passages), then the three gradual-training stages on its kept trajectories
with the tiny model, and an eval of the `self_reasoning` method with the untrained tiny model (every
trajectory fails to parse: answered from the tail, never an exception)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from raypipe.config import RaypipeConfig
from raypipe.errors import RaypipeError
from raypipe.jobs.trajectories import run_trajectories
from raypipe.trajectory_format import STAGE_MASKS, parse_trajectory, process_span

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
#: the processes each gradual-training stage trains on (the complement of its mask but the prompt)
STAGE_PROCESSES = {"rap": ["relevance"], "rap_eap": ["relevance", "evidence"], "all": ["relevance", "evidence", "analysis"]}


@pytest.fixture(scope="module")
def data_run(ray_cluster, world_dir, keyword_searcher, tmp_path_factory):
    out = tmp_path_factory.mktemp("trajectories")
    cfg = RaypipeConfig.model_validate({
        "retrieval": {"top_k": 3},
        # the fixture's world, so the long-form set asks about its held-out people
        "world": {"out_dir": str(world_dir), "instances": 400, "seed": 7, "eval_instances": 40, "shard_size": 150},
        "trajectories": {"instances": str(world_dir / "instances"), "out_dir": str(out), "questions": 60,
                         "negative_fraction": 0.3, "max_kept": 40, "batch_size": 16,
                         "teacher": {"kind": "oracle", "error_rate": 0.3}},
    })
    return cfg, out, run_trajectories(cfg, searcher_factory=keyword_searcher), keyword_searcher


def test_funnel_is_monotone_and_the_kept_rows_are_valid_trajectories(data_run, world_dir):
    cfg, out, stats, _ = data_run
    flow = stats["funnel"]["overall"]
    assert flow["generated"] == stats["items"] > stats["questions"] - stats["no_documents"]
    steps = [flow[k] for k in ("generated", "replied", "parsed", "answer_correct", "citation_passed")]
    assert steps == sorted(steps, reverse=True)
    assert flow["kept"] == min(40, flow["citation_passed"])
    # QC removes deliberate mistakes far more often than faithful trajectories
    errors = stats["funnel"]["per_oracle_error"]
    faithful = errors["none"]["citation_passed"] / errors["none"]["parsed"]
    wrong = errors["wrong_answer"]["citation_passed"] / max(1, errors["wrong_answer"]["parsed"])
    assert faithful > 0.6 and wrong < faithful
    rows = pq.read_table(out / "train").to_pylist()
    assert len(rows) == flow["kept"]
    for row in rows:  # every item shows top_k = 3 documents
        assert "\n[3] " in row["input"] and "\n[4] " not in row["input"]
        parse_trajectory(row["target"], 3)
    every = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert len(every) == flow["generated"] and (out / "_SUCCESS").exists()
    longform = [json.loads(line) for line in (out / "eval" / "heldout_longform.jsonl").read_text().splitlines()]
    heldout_people = {json.loads(line)["entity"] for line in (world_dir / "eval" / "heldout_qa.jsonl").open()}
    assert longform and {r["entity"] for r in longform} <= heldout_people


def test_a_finished_folder_is_not_redone(data_run):
    cfg, _, stats, factory = data_run
    again = run_trajectories(cfg, searcher_factory=factory)
    assert again["skipped"] and again["funnel"] == stats["funnel"]
    # a finished folder of another trajectory format is refused, not reused as training data
    ablation = cfg.model_copy(update={"methods": cfg.methods.model_copy(update={
        "self_reasoning": cfg.methods.self_reasoning.model_copy(update={"processes": ["evidence", "analysis"]})})})
    with pytest.raises(RaypipeError, match=r"processes \['relevance', 'evidence', 'analysis'\]"):
        run_trajectories(ablation, searcher_factory=factory)


def test_eval_of_an_untrained_model_answers_every_item(data_run, world_dir, tiny_model_dir, tmp_path):
    from raypipe.eval.longform import longform_metrics
    from raypipe.jobs.eval import run_eval

    _, data_out, _, factory = data_run
    longform_set = data_out / "eval" / "heldout_longform.jsonl"
    cfg = RaypipeConfig.model_validate({
        "retrieval": {"top_k": 2, "index": {"passages": str(world_dir / "passages")}}, "engine": {"kind": "hf"},
        "segmentation": {"spacy_model": "blank"},
        "methods": {"self_reasoning": {"max_new_tokens": 8}},
        "eval": {"generator": str(tiny_model_dir), "methods": ["self_reasoning"], "limit": 3, "batch_size": 3,
                 "eval_sets": [*(str(world_dir / "eval" / f"heldout_{s}.jsonl") for s in ("qa", "fact")),
                               str(longform_set)],
                 "out_dir": str(tmp_path / "eval")},
    })
    stats = run_eval(cfg, searcher_factory=factory)
    metrics = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    variants = {"self_reasoning", "self_reasoning_shuffled", "self_reasoning_noise50"}
    assert set(metrics["overall"]) == variants
    assert metrics["overall"]["self_reasoning"]["n"] == 9 and stats["variants decoded"] == 3
    predictions = tmp_path / "eval" / "predictions"
    rows = [json.loads(line) for line in (predictions / "self_reasoning.jsonl").open()]
    assert all(r["trace"]["parse_reason"] for r in rows)  # 8 tokens of an untrained model never parse
    # the long-form set (it carries the world's ground truth) gets citation scores per variant, on its
    # own rows only; the short-form sets get none
    assert set(metrics["longform"]) == {"heldout_longform"}
    by_variant = metrics["longform"]["heldout_longform"]
    assert set(by_variant) == variants and all(m["n"] == 3 for m in by_variant.values())
    for name, m in by_variant.items():
        assert m == longform_metrics(predictions / f"{name}.jsonl", longform_set, world_dir / "passages")
    assert set(stats["citation recall / precision"]) == {f"heldout_longform {v}" for v in variants}


def _expected_encoding(tokenizer, texts: list[tuple[str, str]], stage: str, max_length: int) -> tuple[int, int]:
    """(loss tokens, rows truncated) of a gradual-training stage, counted from the trajectory layout:
    a stage's sequence runs from the prompt to the end of the last process it trains on (RAP; RAP and
    EAP; the whole target and EOS), everything after the prompt is in the loss, and a sequence longer
    than `max_length` keeps its head."""
    loss = truncated = 0
    for prompt, target in texts:
        spans = [process_span(p, target) for p in STAGE_PROCESSES[stage]]
        end = max(span[1] for span in spans if span is not None)
        n = len(tokenizer(prompt + target[:end])["input_ids"]) + (end == len(target))  # + EOS
        loss += min(n, max_length) - len(tokenizer(prompt)["input_ids"])
        truncated += n > max_length
    return loss, truncated


def _batch_loss(model_dir, rows: list[dict], mask: list[str], max_length: int) -> float:
    """Mean loss of `model_dir` on the tokens `mask` leaves in the loss, the rows encoded as training does."""
    import torch

    from raypipe.models import load_model
    from raypipe.models.prompt_format import generator_prompt
    from raypipe.training.data import collate
    from raypipe.training.encode import encode_row

    model, tokenizer = load_model(model_dir, device="cpu", dtype=torch.float32)
    prompt = generator_prompt(model_dir, tokenizer)
    encoded = [encode_row(r, tokenizer, mask, max_length, prompt_format=prompt) for r in rows]
    batch = collate({"input_ids": [e.input_ids for e in encoded], "labels": [e.labels for e in encoded]},
                    tokenizer.pad_token_id)
    with torch.no_grad():
        return model(**batch).loss.item()


def test_gradual_training_runs_the_three_stages_each_from_the_last(data_run, tiny_model_dir, tmp_path):
    """Self-Reasoning §"Model Training" on the tiny model: RAP only, then RAP + EAP, then everything,
    each stage from the previous stage's export, on the kept trajectories of the data job."""
    import torch
    from safetensors.torch import load_file

    from raypipe.jobs.train import run_train
    from raypipe.models import load_model, load_tokenizer
    from raypipe.models.prompt_format import generator_prompt, recorded_format
    from raypipe.settings.training import SelfReasoningTrainConfig, TrainingConfig, TrainStage

    _, data_out, _, _ = data_run
    rows = pq.read_table(data_out / "train").to_pylist()
    tokenizer = load_tokenizer(tiny_model_dir)
    prompt = generator_prompt(tiny_model_dir, tokenizer)
    texts = [(prompt(r["instruction"], r["input"]), r["target"]) for r in rows]
    # the tiny model's 512 positions: long-form rows (3 documents and a multi-sentence analysis) do not
    # fit whole, so later stages, which feed more of the trajectory, cut some rows
    max_length = 512
    expected = {name: _expected_encoding(tokenizer, texts, name, max_length) for name in STAGE_MASKS}
    # a few optimizer steps per stage: 1 worker, micro-batch 4, a quarter of an epoch
    micro, epochs = 4, 0.25
    steps = math.ceil(epochs * (len(rows) // micro))
    assert steps >= 2
    # the paper's order of learning rates (decreasing), scaled up so that a few steps move the tiny model
    lrs = {"rap": 5e-3, "rap_eap": 3e-3, "all": 1e-3}
    # the format stages train the top layer of two, the answer stage both (a stage's own setting)
    layers = {"rap": None, "rap_eap": None, "all": "all"}
    stages = [TrainStage(name=name, lr=lrs[name], mask=STAGE_MASKS[name], epochs=epochs,
                         trainable_layers=layers[name]) for name in ("rap", "rap_eap", "all")]
    out = tmp_path / "self_reasoning"
    tc = SelfReasoningTrainConfig(
        base_model=str(tiny_model_dir), data=str(data_out / "train"), out_dir=str(out), stages=stages,
        num_workers=1, cpus_per_worker=0.5, micro_batch_size=micro, max_length=max_length, warmup_ratio=0.0,
        trainable_layers=1,
        deepspeed_config=str(REPO / "configs" / "deepspeed" / "zero3.json"), log_every=1)
    summary = run_train(RaypipeConfig(training=TrainingConfig(self_reasoning=tc)), "self_reasoning")

    stats = {s["stage"]: s for s in json.loads((out / "train_stats.json").read_text())["stages"]}
    assert list(stats) == ["rap", "rap_eap", "all"]
    folders = {"rap": out / "stages" / "rap", "rap_eap": out / "stages" / "rap_eap", "all": out}
    # each stage started from the previous stage's export
    assert stats["rap"]["base_model"] == str(tiny_model_dir.resolve())
    assert stats["rap_eap"]["base_model"] == str(folders["rap"])
    assert stats["all"]["base_model"] == str(folders["rap_eap"])
    for name, s in stats.items():
        assert s["mask"] == STAGE_MASKS[name] and s["lr"] == lrs[name]
        assert s["trainable_layers"] == (layers[name] or 1)
        # no warmup: the first step ran at the stage's own learning rate, then it decayed
        assert s["history"][0]["lr"] == pytest.approx(lrs[name])
        assert all(r["lr"] <= lrs[name] for r in s["history"])
        assert summary[f"stage {name}"]["steps"] == len(s["history"]) == steps
        enc = s["encode"]
        # every stage read the same rows and trained on all of them (every prompt fits); the stage's
        # loss tokens are its processes' tokens, cut at max_length
        assert (enc["rows_read"], enc["rows_train"], sum(enc["rows_rejected"].values())) == (len(rows), len(rows), 0)
        assert (enc["loss_tokens"], enc["rows_truncated"]) == expected[name], name
    # each stage puts more of the trajectory in the loss (and in the sequences: tokens after the last
    # loss token are not fed)
    loss_tokens = [stats[n]["encode"]["loss_tokens"] for n in ("rap", "rap_eap", "all")]
    tokens = [stats[n]["encode"]["tokens"] for n in ("rap", "rap_eap", "all")]
    assert loss_tokens[0] < loss_tokens[1] < loss_tokens[2]
    assert tokens[0] < tokens[1] < tokens[2]
    truncated = [stats[n]["encode"]["rows_truncated"] for n in ("rap", "rap_eap", "all")]
    assert truncated == sorted(truncated) and truncated[-1] > 0

    # every stage changed the top layer it started from; the lower layer moved only in the stage that
    # trains all layers
    for param, moved in (("model.layers.1.mlp.down_proj.weight", [True, True, True]),
                         ("model.layers.0.mlp.down_proj.weight", [False, False, True])):
        weights = [load_file(str(f / "model.safetensors"))[param] for f in (tiny_model_dir, *folders.values())]
        changed = [not torch.equal(before, after) for before, after in zip(weights[:-1], weights[1:], strict=True)]
        assert changed == moved, param
    # stage 1 learned the relevance process it was trained on
    rap_before = _batch_loss(tiny_model_dir, rows, STAGE_MASKS["rap"], max_length)
    rap_after = _batch_loss(folders["rap"], rows, STAGE_MASKS["rap"], max_length)
    assert rap_after < rap_before

    # the final folder is a self-reasoning generator: it loads, records its prompt format and generates
    assert (out / "_SUCCESS").exists() and recorded_format(out) == prompt.name
    model, tok = load_model(out, device="cpu")
    ids = tok(texts[0][0], return_tensors="pt")
    generated = model.generate(**ids, max_new_tokens=4, do_sample=False)
    assert generated.shape[1] > ids["input_ids"].shape[1]

