"""What a training worker computes in: the choice from `precision` and the hardware, and the engine
that choice builds (bf16 products under autocast, fp32 weights and gradients)."""

from __future__ import annotations

import socket

import pytest
import torch

from raypipe.settings.training import GeneratorTrainConfig
from raypipe.training import precision
from raypipe.training.deepspeed_config import load_deepspeed_config
from raypipe.training.precision import trains_in_bf16, worker_autocasts


@pytest.mark.parametrize(("setting", "gpu", "native_bf16", "bf16", "autocast"), [
    ("auto", True, False, True, False),     # GPU workers train in bf16 (Self-RAG App. B.1)
    ("auto", False, True, False, True),     # a CPU with AVX512-BF16 or AMX: bf16 products, fp32 weights
    ("auto", False, False, False, False),   # a CPU that would emulate bf16: fp32
    ("fp32", False, True, False, False),
    ("bf16", False, False, True, False),
    ("autocast", False, False, False, True),
    ("autocast", True, False, False, True),
])
def test_the_precision_follows_the_setting_and_the_workers_hardware(monkeypatch, setting, gpu, native_bf16, bf16,
                                                                    autocast):
    monkeypatch.setattr(precision, "cpu_computes_bf16", lambda: native_bf16)
    assert trains_in_bf16(setting, gpu) is bf16
    assert worker_autocasts(setting, gpu) is autocast


@pytest.fixture(scope="module")
def one_rank_group():
    """The single-process group Ray Train would have set up around the loop (one per module: DeepSpeed
    keeps the first group it sees)."""
    import torch.distributed as dist

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.MonkeyPatch.context() as env:
        for key, value in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": "0", "WORLD_SIZE": "1",
                           "LOCAL_RANK": "0", "DS_ACCELERATOR": "cpu"}.items():
            env.setenv(key, value)
        dist.init_process_group("gloo", rank=0, world_size=1)
        yield
        dist.destroy_process_group()


@pytest.mark.parametrize("autocast", [True, False])
def test_the_generator_engine_multiplies_in_bf16_under_autocast_and_keeps_fp32_weights(
        one_rank_group, tiny_model_dir, autocast):
    from raypipe.training.lm_task import LMTask
    from raypipe.training.strategy import DeepSpeedStrategy

    tc = GeneratorTrainConfig(base_model=str(tiny_model_dir), num_workers=1, micro_batch_size=2, zero_stage=0)
    model, tokenizer = LMTask(tc, None, "float32", "selfrag").load(str(tiny_model_dir))
    strategy = DeepSpeedStrategy(load_deepspeed_config(tc, bf16=False), "autocast" if autocast else "fp32", False)
    strategy.prepare(model, torch.optim.AdamW(model.parameters(), lr=1e-4), 0, 2, use_gpu=False)
    engine = strategy.model
    assert strategy.precision == ("autocast" if autocast else "fp32")
    products: list[torch.dtype] = []
    model = engine.module.lm if hasattr(engine.module, "lm") else engine.module
    model.model.layers[0].mlp.down_proj.register_forward_hook(lambda module, args, out: products.append(out.dtype))
    ids = torch.tensor([tokenizer("Ada Lovelace was a mathematician.")["input_ids"]] * 2)
    loss = engine(input_ids=ids, attention_mask=torch.ones_like(ids), labels=ids).loss
    engine.backward(loss)
    gradients = {p.grad.dtype for p in model.parameters() if p.grad is not None}
    engine.step()

    assert products == [torch.bfloat16 if autocast else torch.float32]
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert gradients == {torch.float32}
