"""The real instruct LM served: SmolLM2-135M-Instruct (imported once per session) as the server's
instruct LM, answering plain requests (`method: direct`) over HTTP, and Self-Reasoning's
OpenAI-compatible trajectory teacher run against this server: the paper's Figure 5 / Figure 6
instructions go out, the replies come back, are cached and are parsed strictly.

Its replicas hold vLLM engines (fp32, in process, as `raypipe serve` runs them); test_serving's app the
HF engine. The module has its own app: test_serving's limits (300 prompt characters, 16 tokens) are far below a
teacher prompt. The Self-RAG generator slot holds the tiny model (bound because `direct` may be asked
to use it); its decoding is test_serving's subject.
"""

from __future__ import annotations

import json
import socket

import httpx
import pytest

from raypipe.config import MethodsConfig, RaypipeConfig, ServeConfig
from raypipe.eval.citations import WorldChecker
from raypipe.jobs.serve import serve_sections
from raypipe.methods.direct.settings import DirectSettings
from raypipe.retrieval.types import Passage
from raypipe.settings.models import EngineConfig
from raypipe.settings.teachers import QualityConfig, TeacherConfig
from raypipe.trajectories.dataset import funnel, judge_reply
from raypipe.trajectories.items import TrajectoryItem
from raypipe.trajectories.teachers import OpenAITrajectoryTeacher

pytestmark = pytest.mark.slow

APP = "raypipe-real-lm"
MODEL = "smollm2"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def url(ray_cluster, smollm2_dir, tiny_model_dir):
    from ray import serve

    from raypipe.serving.app import start_app

    serve_cfg = ServeConfig(port=_free_port(), app_name=APP, model_name=MODEL, generator=str(tiny_model_dir),
                            methods=["direct"], default_method="direct", generator_cpus=0.25, min_replicas=1,
                            max_replicas=1, auth_token_env="RAYPIPE_TEST_REAL_LM_TOKEN_UNSET")
    cfg = RaypipeConfig(serve=serve_cfg, engine=EngineConfig(kind="vllm", precision="fp32"),
                        instruct_lm=str(smollm2_dir),
                        methods=MethodsConfig(direct=DirectSettings(max_new_tokens=24)))
    try:
        yield start_app(serve_sections(cfg))
    finally:
        serve.shutdown()


def test_the_served_instruct_lm_answers_a_plain_question(url, smollm2_dir):
    from raypipe.models import load_tokenizer

    question = "What is the capital of France?"
    r = httpx.post(f"{url}/v1/generate", json={"instruction": question}, timeout=300)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["method"] == "direct" and body["retrieval_count"] == 0 and body["citations"] == []
    assert "Paris" in body["text"]
    assert body["timings"]["lm_generation_calls"] == 1
    # usage is in SmolLM2's tokens, its prompt the chat template (not the tiny generator's tokenizer)
    tokenizer = load_tokenizer(smollm2_dir)
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": question}], tokenize=False,
                                           add_generation_prompt=True)
    assert body["usage"]["prompt_tokens"] == len(tokenizer(prompt)["input_ids"])
    assert body["usage"]["completion_tokens"] == len(tokenizer(body["text"], add_special_tokens=False)["input_ids"])


def test_the_trajectory_teacher_runs_against_raypipes_own_server(url, tmp_path):
    docs = [Passage("p1", "Margit Wesburn", "Margit Wesburn (1628) was a painter born in Umeikar.", 1.0),
            Passage("p2", "Umeikar", "Umeikar is a river town.", 1.0)]
    items = [TrajectoryItem("qa-1", "qa-1", "qa", "Where was Margit Wesburn born?", docs, False, "Umeikar",
                            ["Umeikar"]),
             TrajectoryItem("fact-1", "fact-1", "fact", "Margit Wesburn was born in 1628.", docs, False, "SUPPORT",
                            ["1628"])]
    cfg = TeacherConfig(kind="openai", base_url=f"{url}/v1", model=MODEL, max_tokens=48, concurrency=2, retries=1,
                        timeout_s=300, temperature=0.2, extra_body={"method": "direct"})
    cache = tmp_path / "teacher_cache.jsonl"
    teacher = OpenAITrajectoryTeacher(cfg, cache)
    replies = teacher.teach(items)
    teacher.close()
    assert teacher.failed == 0 and all(r.text and r.text.strip() for r in replies)
    assert {json.loads(line)["id"] for line in cache.read_text().splitlines()} == {"qa-1", "fact-1"}
    rows = [judge_reply(i, r, WorldChecker(), QualityConfig()) for i, r in zip(items, replies, strict=True)]
    flow = funnel(rows)
    # every reply is accounted for: parsed into a trajectory, or discarded with a reason
    assert flow["overall"]["generated"] == flow["overall"]["replied"] == 2
    assert flow["overall"]["parsed"] + sum(flow["discarded"].values()) == 2
    assert all(r["parse"] == "ok" or r["target"] is None for r in rows)
