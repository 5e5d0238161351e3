"""The Serve app end to end over HTTP on 127.0.0.1: the tiny model as Generator, a real faiss index of
world passages (MiniLM) as Retrieval, the Decoder autoscaled, bearer auth on; `crag` and
`self_reasoning` are served beside `selfrag`, so the Evaluator, WebSearch and InstructLM deployments are
bound too.

One app serves the whole module (replica start-up is the slow part); the last test shuts it down and
checks that no Serve actor is left. Auth off, and every validation rule, are covered without Ray in
tests/unit/test_serving_api.py. A Generator replica killed under load is `benchmarks/faults.py`'s serving
fault, whose quick run every `make test` makes and checks (test_benchmarks_quick.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest

from raypipe.config import MethodsConfig, RaypipeConfig, ServeConfig
from raypipe.data.io import list_data_files
from raypipe.jobs.serve import serve_sections
from raypipe.methods.crag.settings import CRAGSettings
from raypipe.methods.self_reasoning.settings import SelfReasoningSettings
from raypipe.methods.selfrag.settings import SelfRAGSettings
from raypipe.settings.crag_tools import CRAGConfig, EvaluatorConfig
from raypipe.settings.models import EngineConfig
from raypipe.settings.retrieval import RetrievalConfig, SearchBackendConfig
from raypipe.tokens import GROUP_TOKENS, Group
from tests.cluster_faults import flat_index

pytestmark = pytest.mark.slow

TOKEN_ENV = "RAYPIPE_TEST_SERVE_TOKEN"
TOKEN = "test-token-123"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
APP = "raypipe-test"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def index_cfg(tmp_path_factory, world_dir) -> RetrievalConfig:
    """Flat indexes of one passage shard of the world and of its web corpus (CRAG's second source), built
    with the pipeline's own embed + assemble."""
    web = flat_index(list_data_files(world_dir / "web" / "passages")[0], tmp_path_factory.mktemp("web_index"))
    wiki = flat_index(list_data_files(world_dir / "passages")[0], tmp_path_factory.mktemp("serve_index"))
    return wiki.model_copy(update={"fallback": SearchBackendConfig(kind="local", index_dir=web.index.out_dir)})


@pytest.fixture(scope="module")
def evaluator_dir(tmp_path_factory) -> Path:
    """An (untrained) cross-encoder exported as the training job exports one."""
    from raypipe.models import minilm_path
    from raypipe.retrieval.cross_encoder import MANIFEST, load_cross_encoder

    out = tmp_path_factory.mktemp("evaluator")
    model, tokenizer = load_cross_encoder(minilm_path())
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / MANIFEST).write_text(json.dumps({"kind": "crag-retrieval-evaluator", "output": "tanh"}))
    return out


@pytest.fixture(scope="module")
def passage_ids(index_cfg) -> set[str]:
    source = Path(index_cfg.index.passages)
    return set(pq.read_table(source, columns=["id"]).column("id").to_pylist())


@pytest.fixture(scope="module")
def app_cfg(tiny_model_dir, index_cfg, evaluator_dir) -> RaypipeConfig:
    # generator_cpus 0.25 (Generator and InstructLM): 3 Decoders, both LMs and the rest fit the session's 2 CPUs
    serve = ServeConfig(port=_free_port(), app_name=APP, generator=str(tiny_model_dir), auth_token_env=TOKEN_ENV,
                        # a batch's first engine call waits 50 ms for others (10 ms by default): the
                        # concurrent-request test's calls, through proxy, ingress and two Decoders, can
                        # arrive further apart than 10 ms on a loaded machine (seen once: none merged)
                        batch_wait_timeout_s=0.05,
                        methods=["selfrag", "crag", "self_reasoning"], generator_cpus=0.25, min_replicas=2, max_replicas=3,
                        target_ongoing_requests=1.0, max_ongoing_requests=2,
                        max_queued_requests=8, max_top_k=3, max_beam_width=2, max_depth_limit=2,
                        max_tokens_limit=16, max_prompt_chars=300, max_body_bytes=4096)
    selfrag = SelfRAGSettings(beam_width=2, max_depth=2, max_new_tokens=8)
    crag = CRAGSettings(max_new_tokens=8, upper=0.0, lower=-0.2)
    methods = MethodsConfig(selfrag=selfrag, crag=crag, self_reasoning=SelfReasoningSettings(max_new_tokens=8))
    return RaypipeConfig(serve=serve, engine=EngineConfig(kind="hf"), methods=methods,
                         retrieval=index_cfg, instruct_lm=str(tiny_model_dir),
                         crag=CRAGConfig(evaluator=EvaluatorConfig(path=str(evaluator_dir))))


@pytest.fixture(scope="module")
def url(ray_cluster, app_cfg):
    from ray import serve

    from raypipe.serving.app import start_app

    os.environ[TOKEN_ENV] = TOKEN
    try:
        yield start_app(serve_sections(app_cfg))
    finally:
        os.environ.pop(TOKEN_ENV, None)
        serve.shutdown()


@pytest.fixture(scope="module")
def client(url):
    with httpx.Client(base_url=url, headers=AUTH, timeout=120) as c:
        yield c


def test_answer_cites_retrieved_passages_with_normalized_critiques(client, passage_ids):
    r = client.post("/v1/generate", json={"instruction": "Where was the painter born?", "method": "selfrag",
                                          "mode": "always"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert isinstance(body["text"], str)
    assert body["retrieval_count"] >= 1 and body["retrieved"]
    assert body["citations"], "mode=always must cite the passage each segment was written from"
    assert {c["passage_id"] for c in body["citations"]} <= passage_ids
    assert body["method"] == "selfrag"
    first = body["trace"]["segments"][0]
    assert first["citation"] == body["citations"][0]
    is_rel = first["reflections"][Group.IS_REL.value]
    assert set(is_rel) == set(GROUP_TOKENS[Group.IS_REL])
    assert sum(is_rel.values()) == pytest.approx(1.0, abs=1e-5)
    assert body["timings"]["generation_calls"] >= 1 and body["timings"]["retrieval_calls"] >= 1
    assert body["timings"]["total_ms"] >= body["timings"]["decode_ms"] > 0
    assert body["usage"]["prompt_tokens"] > 0


def test_never_mode_retrieves_nothing(client):
    body = client.post("/v1/generate", json={"instruction": "Write a short poem.", "mode": "never"}).json()
    assert body["retrieval_count"] == 0 and body["citations"] == []
    assert body["timings"]["retrieval_calls"] == 0


@pytest.mark.parametrize(("payload", "field"), [
    ({"input": "no instruction"}, "instruction"),
    ({"instruction": ""}, "instruction"),
    ({"instruction": "q", "top_k": 0}, "top_k"),
    ({"instruction": "q", "mode": "sometimes"}, "mode"),
    ({"instruction": "q", "threshold": 1.5}, "threshold"),
    ({"instruction": "q", "forbid": ["[Maybe]"]}, "forbid"),
    ({"instruction": "q", "beam": 2}, "beam"),
    ({"instruction": "q", "method": "crag-ish"}, "method"),
])
def test_invalid_request_is_422_naming_the_field(client, payload, field):
    r = client.post("/v1/generate", json=payload)
    assert r.status_code == 422
    assert r.json()["error"]["param"] == field


@pytest.mark.parametrize(("payload", "field", "setting"), [
    ({"instruction": "q", "top_k": 4}, "top_k", "max_top_k"),
    ({"instruction": "q", "beam_width": 3}, "beam_width", "max_beam_width"),
    ({"instruction": "q", "max_depth": 3}, "max_depth", "max_depth_limit"),
    ({"instruction": "q", "max_tokens": 17}, "max_tokens", "max_tokens_limit"),
    ({"instruction": "q" * 200, "input": "x" * 101}, "input", "max_prompt_chars"),
])
def test_over_limit_parameters_are_422_naming_field_and_limit(client, payload, field, setting):
    r = client.post("/v1/generate", json=payload)
    assert r.status_code == 422
    error = r.json()["error"]
    assert error["param"] == field and f"serve.{setting}" in error["message"]


def test_parameters_at_the_limits_are_served(client):
    r = client.post("/v1/generate", json={"instruction": "q", "top_k": 3, "beam_width": 2, "max_depth": 2,
                                          "max_tokens": 16, "mode": "always"})
    assert r.status_code == 200, r.text
    assert all(len(s["raw"]) > 0 for s in r.json()["trace"]["segments"])


def test_auth_rejects_missing_and_wrong_tokens_but_not_healthz(url):
    request = {"instruction": "q"}
    assert httpx.post(f"{url}/v1/generate", json=request, timeout=60).status_code == 401
    wrong = httpx.post(f"{url}/v1/generate", json=request, headers={"Authorization": "Bearer nope"}, timeout=60)
    assert wrong.status_code == 401 and wrong.headers["www-authenticate"] == "Bearer"
    invalid_unauthenticated = httpx.post(f"{url}/v1/generate", json={"top_k": 99}, timeout=60)
    assert invalid_unauthenticated.status_code == 401
    health = httpx.get(f"{url}/healthz", timeout=60)
    assert health.status_code == 200 and health.json()["status"] == "ok"


def test_bad_input_through_serves_proxy_gets_the_apis_own_errors(client, url):
    """The body limit, the 404 for another model and the 422 for NaN hold behind Serve's HTTP proxy too,
    with the API's JSON error bodies."""
    big = b'{"instruction": "' + b"q" * 5000 + b'"}'
    for content in (big, iter([big[:3000], big[3000:]])):  # with a Content-Length, and chunked
        r = client.post("/v1/generate", content=content, headers={"content-type": "application/json"})
        assert r.status_code == 413 and r.json()["error"]["param"] == "body", r.text
    other = client.post("/v1/chat/completions", json={"model": "gpt-4o", "messages": [{"role": "user", "content": "q"}]})
    assert other.status_code == 404 and other.json()["error"]["code"] == "model_not_found"
    nan = client.post("/v1/generate", content=b'{"instruction": "q", "threshold": NaN}',
                      headers={"content-type": "application/json"})
    assert nan.status_code == 422 and nan.json()["error"]["param"] == "threshold"


def test_openai_client_round_trip(url, app_cfg):
    import openai

    client = openai.OpenAI(base_url=f"{url}/v1", api_key=TOKEN, max_retries=0)
    assert [m.id for m in client.models.list()] == [app_cfg.serve.model_name]
    completion = client.chat.completions.create(
        model=app_cfg.serve.model_name,
        messages=[{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Who painted it?"}],
        max_tokens=8, extra_body={"selfrag": {"mode": "always", "top_k": 2}},
    )
    assert completion.object == "chat.completion" and completion.model == app_cfg.serve.model_name
    assert isinstance(completion.choices[0].message.content, str)
    assert completion.usage.total_tokens == completion.usage.prompt_tokens + completion.usage.completion_tokens
    extras = completion.model_extra["selfrag"]
    assert extras["retrieval_count"] >= 1 and extras["citations"]
    with pytest.raises(openai.UnprocessableEntityError, match="max_top_k"):
        client.chat.completions.create(model="selfrag", messages=[{"role": "user", "content": "q"}],
                                       extra_body={"selfrag": {"top_k": 50}})
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{url}/v1", api_key="wrong", max_retries=0).chat.completions.create(
            model="selfrag", messages=[{"role": "user", "content": "q"}])


def test_served_crag_request_through_the_openai_client(url):
    """`crag` binds its own deployments, and the trace shows the action, every document's score, the kept
    strips and the web search."""
    from openai import OpenAI

    from raypipe.serving.app import replica_counts

    assert {"Evaluator", "WebSearch", "InstructLM", "Generator", "Retrieval"} <= set(replica_counts(APP))
    client = OpenAI(base_url=f"{url}/v1", api_key=TOKEN, timeout=300, max_retries=0)
    response = client.chat.completions.create(
        model="selfrag", messages=[{"role": "user", "content": "Where was the painter born?"}], max_tokens=8,
        extra_body={"method": "crag", "crag": {"strip_top_k": 2, "top_k": 3}})
    assert isinstance(response.choices[0].message.content, str)
    extras = response.model_extra["crag"]
    trace = extras["trace"]["crag"]
    assert trace["action"] in ("correct", "incorrect", "ambiguous")
    assert len(trace["documents"]) == 3 and all(-1.0 <= d["score"] <= 1.0 for d in trace["documents"])
    assert len(trace["internal_strips"]) <= 2
    if trace["action"] != "correct":
        assert trace["web_query"] and trace["web"]["error"] is None
    assert extras["timings"]["evaluator_calls"] >= 1 and extras["timings"]["retrieval_calls"] == 1


def test_served_self_reasoning_request_traces_its_documents_and_parse(client, passage_ids):
    """One search and one generation; the trace numbers the shown documents as the prompt did. The
    untrained tiny model's 8 tokens are no trajectory: answered from the tail, the reason in the trace."""
    r = client.post("/v1/generate", json={"instruction": "Where was the painter born?", "method": "self_reasoning",
                                          "top_k": 2, "doc_order": "shuffled", "text": "analysis"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["method"] == "self_reasoning" and body["retrieval_count"] == 1
    documents = body["trace"]["documents"]
    assert [d["n"] for d in documents] == [1, 2] and {d["id"] for d in documents} <= passage_ids
    assert body["trace"]["parse_reason"] and body["trace"]["trajectory"] is None and body["citations"] == []
    assert body["timings"]["retrieval_calls"] == 1 and body["timings"]["generation_calls"] == 1
    refused = client.post("/v1/generate", json={"instruction": "q", "method": "self_reasoning", "text": "essay"})
    assert refused.status_code == 422 and refused.json()["error"]["param"] == "text"


def test_concurrent_requests_share_engine_calls(url):
    from ray import serve

    generator = serve.get_deployment_handle("Generator", app_name=APP)
    before = generator.batching_stats.remote().result()

    async def burst() -> list[int]:
        async with httpx.AsyncClient(base_url=url, headers=AUTH, timeout=120) as c:
            replies = await asyncio.gather(*(c.post("/v1/generate", json={"instruction": f"Question {i}?",
                                                                          "mode": "always"}) for i in range(4)))
        return [r.status_code for r in replies]

    assert asyncio.run(burst()) == [200] * 4
    after = generator.batching_stats.remote().result()
    calls, engine_calls = after["calls"] - before["calls"], after["engine_calls"] - before["engine_calls"]
    assert engine_calls < calls, f"{calls} engine calls from 4 concurrent requests ran unbatched"


def test_autoscaling_bounds_are_applied(url, app_cfg):
    from ray import serve
    from ray.serve.context import _get_global_client

    app = serve.status().applications[APP]
    decoder = app.deployments["Decoder"]
    assert decoder.replica_states.get("RUNNING", 0) >= app_cfg.serve.min_replicas == 2
    details = _get_global_client().get_serve_details()
    autoscaling = details["applications"][APP]["deployments"]["Decoder"]["deployment_config"]["autoscaling_config"]
    assert (autoscaling["min_replicas"], autoscaling["max_replicas"]) == (2, 3)
    assert autoscaling["target_ongoing_requests"] == 1.0
    assert app.deployments["Generator"].replica_states.get("RUNNING") == 1


def test_over_capacity_answers_503_and_keeps_serving(client, url):
    # capacity: 3 Decoder replicas at most x 2 ongoing + 8 queued = 14 requests; 40 arrive at once
    async def flood() -> list[int]:
        async with httpx.AsyncClient(base_url=url, headers=AUTH, timeout=120) as c:
            replies = await asyncio.gather(*(c.post("/v1/generate", json={
                "instruction": f"Tell me about person {i}.", "mode": "always", "max_tokens": 16,
                "max_depth": 2}) for i in range(40)))
        return [r.status_code for r in replies]

    statuses = asyncio.run(flood())
    assert set(statuses) == {200, 503}, statuses
    assert statuses.count(200) >= 4
    assert client.post("/v1/generate", json={"instruction": "still there?"}).status_code == 200


def test_shutdown_leaves_no_serve_actors(url):
    """Runs last: shuts the module's app down."""
    import ray
    from ray import serve

    assert any(a["namespace"] == "serve" for a in ray.util.list_named_actors(all_namespaces=True))
    serve.shutdown()
    left = [a for a in ray.util.list_named_actors(all_namespaces=True) if a["namespace"] == "serve"]
    assert left == []
