"""A served `crag` request through the openai client (Ray Serve): the Evaluator, WebSearch and
InstructLM deployments are bound because the served method uses them, and the response's trace shows
the action, every document's score, the kept strips and the web search."""

from __future__ import annotations

import json
import socket

import pytest

from raypipe.config import (
    CRAGConfig,
    CRAGSettings,
    EncoderConfig,
    EngineConfig,
    EvaluatorConfig,
    IndexConfig,
    MethodsConfig,
    RaypipeConfig,
    RetrievalConfig,
    SearchBackendConfig,
    ServeConfig,
)
from raypipe.data.io import list_data_files
from raypipe.retrieval.build import assemble_index
from raypipe.retrieval.embed import ShardEmbedder, shard_path, source_stamp

APP = "raypipe-crag-test"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def index_cfg(tmp_path_factory, world_dir) -> RetrievalConfig:
    """The wiki index of one passage shard, and the world's web corpus as the second source."""
    dirs = {}
    for name, folder in (("wiki", world_dir / "passages"), ("web", world_dir / "web" / "passages")):
        source = list_data_files(folder)[0]
        out = tmp_path_factory.mktemp(f"crag_{name}_index")
        embedder = ShardEmbedder(EncoderConfig(), batch_size=64, threads=1, rejects_dir=str(out / "rejects"))
        embedder.embed_file(source, shard_path(out, source), source_stamp(source, EncoderConfig()))
        assemble_index(out, [source], True, IndexConfig(passages=str(source), out_dir=str(out), factory="Flat"))
        dirs[name] = (source, out)
    source, out = dirs["wiki"]
    return RetrievalConfig(index=IndexConfig(passages=str(source), out_dir=str(out), factory="Flat"), top_k=3,
                           fallback=SearchBackendConfig(kind="local", index_dir=str(dirs["web"][1])))


@pytest.fixture(scope="module")
def evaluator_dir(tmp_path_factory):
    """An (untrained) cross-encoder exported as the training job exports one."""
    from raypipe.methods.crag.evaluator import MANIFEST, load_cross_encoder
    from raypipe.models import minilm_path

    out = tmp_path_factory.mktemp("evaluator")
    model, tokenizer = load_cross_encoder(minilm_path())
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / MANIFEST).write_text(json.dumps({"kind": "crag-retrieval-evaluator", "output": "tanh"}))
    return out


@pytest.fixture(scope="module")
def base_url(ray_cluster, tiny_model_dir, index_cfg, evaluator_dir):
    from ray import serve

    from raypipe.serving.app import replica_counts, start_app

    serve_cfg = ServeConfig(port=_free_port(), app_name=APP, generator=str(tiny_model_dir), methods=["crag"],
                            default_method="crag", min_replicas=1, max_replicas=1, max_tokens_limit=16)
    cfg = RaypipeConfig(serve=serve_cfg, engine=EngineConfig(kind="hf"), retrieval=index_cfg,
                        methods=MethodsConfig(crag=CRAGSettings(max_new_tokens=8, upper=0.0, lower=-0.2)),
                        crag=CRAGConfig(lm=str(tiny_model_dir), evaluator=EvaluatorConfig(path=str(evaluator_dir))))
    try:
        url = start_app(cfg)
        assert {"Evaluator", "WebSearch", "InstructLM", "Generator", "Retrieval"} <= set(replica_counts(APP))
        yield url
    finally:
        serve.shutdown()


def test_served_crag_request_through_the_openai_client(base_url):
    from openai import OpenAI

    client = OpenAI(base_url=f"{base_url}/v1", api_key="unused", timeout=300, max_retries=0)
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
