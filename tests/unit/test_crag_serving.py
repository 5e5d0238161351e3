"""CRAG's per-request controls over HTTP (no Ray): the `crag`, `rag` and `selfcrag` methods with their
controls through /v1/generate and the OpenAI chat route, thresholds out of order as a 422, and the
deployments bound for CRAG's tools."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from raypipe.config import RaypipeConfig, load_config
from raypipe.jobs.serve import serve_sections
from raypipe.methods.base import MethodRequest
from raypipe.methods.crag.settings import CRAGSettings
from raypipe.methods.selfcrag.settings import SelfCRAGSettings
from raypipe.serving.api import build_api


class Backend:
    def __init__(self):
        self.seen: list[tuple[str, MethodRequest, Any, int]] = []

    async def decode(self, method, request, settings):
        self.seen.append((method, request, settings, settings.top_k))
        return {"text": "ok", "n_retrievals": 1, "retrieved": True, "citations": [], "option": None,
                "option_scores": {}, "trace": {"crag": {"action": "correct"}}, "timings": {"decode_ms": 1.0},
                "usage": {"prompt_tokens": 3, "completion_tokens": 1}}


def _cfg() -> RaypipeConfig:
    return load_config(None, ["serve.methods=[selfrag, crag, rag, selfcrag]", "serve.default_method=crag"])


def test_crag_controls_override_the_configured_settings():
    backend = Backend()
    client = TestClient(build_api(serve_sections(_cfg()), backend, None))
    body = {"instruction": "Where did Ada work?", "method": "crag", "upper": 0.3, "lower": -0.5, "web": False,
            "actions": "no_ambiguous", "strip_top_k": 2, "max_tokens": 20, "top_k": 4}
    r = client.post("/v1/generate", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["trace"] == {"crag": {"action": "correct"}}
    method, _, settings, top_k = backend.seen[-1]
    assert method == "crag" and top_k == 4 and isinstance(settings, CRAGSettings)
    assert (settings.upper, settings.lower, settings.web, settings.actions, settings.strip_top_k,
            settings.max_new_tokens) == (0.3, -0.5, False, "no_ambiguous", 2, 20)
    assert settings.strip_filter == -0.5  # untouched default


def test_selfcrag_takes_selfrag_and_corrective_controls_through_the_chat_route():
    backend = Backend()
    client = TestClient(build_api(serve_sections(_cfg()), backend, None))
    body = {"model": "selfrag", "messages": [{"role": "user", "content": "Who is Ada?"}], "method": "selfcrag",
            "selfcrag": {"mode": "always", "upper": 0.5, "rewriter": "none"}}
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    _, _, settings, _ = backend.seen[-1]
    assert isinstance(settings, SelfCRAGSettings)
    assert (settings.mode, settings.upper, settings.rewriter) == ("always", 0.5, "none")
    assert r.json()["selfcrag"]["trace"]["crag"]["action"] == "correct"


def test_thresholds_out_of_order_and_unknown_controls_are_422():
    client = TestClient(build_api(serve_sections(_cfg()), Backend(), None))
    r = client.post("/v1/generate", json={"instruction": "x", "method": "crag", "upper": -0.9, "lower": 0.2})
    assert r.status_code == 422 and "lower" in r.json()["error"]["message"]
    r = client.post("/v1/generate", json={"instruction": "x", "method": "rag", "upper": 0.2})
    assert r.status_code == 422 and "upper" in r.json()["error"]["message"]
    r = client.post("/v1/generate", json={"instruction": "x", "method": "crag", "actions": "only_web"})
    assert r.status_code == 422


def _rewriters(doc: dict, method: str) -> list[str]:
    """The rewriters the document offers in `method`'s /v1/generate body."""
    schemas = doc["components"]["schemas"]
    body = next(s for name, s in schemas.items() if name.startswith(f"{method.title()}GenerateRequest"))
    prop = body["properties"]["rewriter"]
    return next(b["enum"] for b in prop["anyOf"] if b.get("type") != "null")


def test_the_document_offers_the_openai_rewriter_only_where_its_endpoint_is_configured():
    plain = TestClient(build_api(serve_sections(_cfg()), Backend(), None))
    doc = plain.get("/openapi.json").json()
    assert _rewriters(doc, "crag") == _rewriters(doc, "selfcrag") == ["lm", "none"]
    r = plain.post("/v1/generate", json={"instruction": "x", "method": "crag", "rewriter": "openai"})
    assert r.status_code == 422 and r.json()["error"]["param"] == "rewriter"
    # a server with the rewriter endpoint (`crag.rewriter`, one for both methods) offers it to both
    cfg = load_config(None, ["serve.methods=[crag, selfcrag]", "serve.default_method=crag",
                             "crag.rewriter.url=http://lm.local/v1"])
    backend = Backend()
    client = TestClient(build_api(serve_sections(cfg), backend, None))
    doc = client.get("/openapi.json").json()
    assert _rewriters(doc, "crag") == _rewriters(doc, "selfcrag") == ["lm", "openai", "none"]
    r = client.post("/v1/generate", json={"instruction": "x", "method": "selfcrag", "rewriter": "openai"})
    assert r.status_code == 200, r.text
    assert backend.seen[-1][2].rewriter == "openai"
