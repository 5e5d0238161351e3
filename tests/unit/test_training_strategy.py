"""The worker loop's strategies outside Ray Train: plain torch's gradient accumulation and schedule, and a
checkpoint folder one strategy cannot read named as such (the loop itself runs in
tests/integration/test_training.py, test_critic_encoder_train.py and test_crag_evaluator_train.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from raypipe.errors import RaypipeError
from raypipe.training import strategy as strategy_module
from raypipe.training.checkpoint import TrainState
from raypipe.training.loop import next_epoch_at_its_end
from raypipe.training.strategy import DS_TAG, TORCH_STATE, DeepSpeedStrategy, TorchStrategy


@pytest.fixture
def no_ddp(monkeypatch):
    """One process: Ray Train's `prepare_model` would wrap the model in DDP inside a worker group."""
    import ray.train.torch

    monkeypatch.setattr(ray.train.torch, "prepare_model", lambda model: model)


def _trained(grad_accum: int, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.nn.Module, float]:
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    strategy = TorchStrategy("fp32", grad_clip=100.0, grad_accum=grad_accum)
    strategy.prepare(model, torch.optim.AdamW(model.parameters(), lr=0.1), 1, 4, use_gpu=False)
    for index, (x, y) in enumerate(batches):
        with strategy.autocast():
            loss = torch.nn.functional.mse_loss(strategy.model(x), y)
        strategy.backward(loss)
        strategy.step(boundary=(index + 1) % grad_accum == 0)
    return model, strategy.lr()


def test_two_accumulated_halves_step_as_one_whole_batch(no_ddp):
    x, y = torch.randn(8, 3), torch.randn(8, 1)
    whole, lr_whole = _trained(1, [(x, y)])
    halves, lr_halves = _trained(2, [(x[:4], y[:4]), (x[4:], y[4:])])
    assert torch.allclose(whole.weight, halves.weight, atol=1e-6)
    assert torch.allclose(whole.bias, halves.bias, atol=1e-6)
    # one optimizer step each: the one warmup step done, the peak rate is next
    assert lr_whole == lr_halves == pytest.approx(0.1)
    untouched, _ = _trained(2, [(x[:4], y[:4])])  # half an accumulation: no step yet
    torch.manual_seed(0)
    assert torch.equal(untouched.weight, torch.nn.Linear(3, 1).weight)


def test_a_torch_checkpoint_restores_model_optimizer_and_schedule(no_ddp, tmp_path):
    x, y = torch.randn(8, 3), torch.randn(8, 1)
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    first = TorchStrategy("fp32", grad_clip=1.0)
    first.prepare(model, torch.optim.AdamW(model.parameters(), lr=0.1), 1, 4, use_gpu=False)
    first.backward(torch.nn.functional.mse_loss(first.model(x), y))
    first.step(boundary=True)
    first.save(tmp_path, rank=0)
    other = torch.nn.Linear(3, 1)
    second = TorchStrategy("fp32", grad_clip=1.0)
    second.prepare(other, torch.optim.AdamW(other.parameters(), lr=0.1), 1, 4, use_gpu=False)
    second.load(tmp_path)
    assert torch.equal(other.weight, model.weight) and second.lr() == first.lr()
    assert second.state_bytes()["optimizer"] > 0  # AdamW's two moments came back with the step count


def test_a_checkpoint_of_the_other_strategy_is_named_not_misread(no_ddp, tmp_path: Path):
    torch_written = tmp_path / "torch"
    torch_written.mkdir()
    (torch_written / TORCH_STATE).write_bytes(b"")
    deepspeed = DeepSpeedStrategy({}, "fp32", bf16_weights=False)
    with pytest.raises(RaypipeError, match=rf"holds no {DS_TAG}/ \(DeepSpeed's state\).*{TORCH_STATE}"):
        deepspeed.load(torch_written)

    ds_written = tmp_path / "ds"
    (ds_written / DS_TAG).mkdir(parents=True)
    model = torch.nn.Linear(3, 1)
    plain = TorchStrategy("fp32", grad_clip=1.0)
    plain.prepare(model, torch.optim.AdamW(model.parameters()), 0, 2, use_gpu=False)
    with pytest.raises(RaypipeError, match=rf"holds no {TORCH_STATE} \(plain torch's state\).*'{DS_TAG}'"):
        plain.load(ds_written)


def test_bf16_on_the_plain_strategy_is_autocast_over_fp32_weights(no_ddp, monkeypatch):
    monkeypatch.setattr(strategy_module, "worker_autocasts", lambda setting, gpu: setting == "autocast")
    model = torch.nn.Linear(3, 1)
    plain = TorchStrategy("bf16", grad_clip=1.0)
    plain.prepare(model, torch.optim.AdamW(model.parameters()), 0, 2, use_gpu=False)
    with plain.autocast():
        out = plain.model(torch.randn(2, 3))
    assert plain.precision == "autocast" and out.dtype == torch.bfloat16 and model.weight.dtype == torch.float32


def test_a_position_saved_at_an_epochs_end_resumes_at_the_next_epochs_start():
    ended = next_epoch_at_its_end(TrainState(step=8, epoch=0, micro_batches_done=8), 8)
    assert (ended.step, ended.epoch, ended.micro_batches_done) == (8, 1, 0)
    inside = next_epoch_at_its_end(TrainState(step=5, epoch=1, micro_batches_done=5), 8)
    assert (inside.epoch, inside.micro_batches_done) == (1, 5)
