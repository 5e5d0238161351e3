"""The HTTP API without Ray: FastAPI's test client over `build_api` with an in-process backend.

Covers validation (422 naming the field), the server's limits, auth on and off, the mapping of
overload and timeouts to 503/504, and OpenAI compatibility of the chat response (checked against the
openai package's own response model)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from raypipe.config import MethodsConfig, RaypipeConfig, ServeConfig
from raypipe.errors import ConfigError
from raypipe.jobs.serve import serve_sections
from raypipe.methods.base import MethodRequest
from raypipe.methods.selfrag.settings import SelfRAGSettings
from raypipe.serving.api import DecodeTimeout, Overloaded, build_api
from raypipe.serving.auth import token_digest
from raypipe.serving.schemas import check_defaults_within_limits, request_models
from raypipe.settings.retrieval import RetrievalConfig

LIMITS = ServeConfig(max_top_k=5, max_beam_width=3, max_depth_limit=4, max_tokens_limit=64, max_prompt_chars=100,
                     retry_after_s=7)
SELFRAG = SelfRAGSettings(beam_width=2, max_depth=2, max_new_tokens=32)
CFG = RaypipeConfig(serve=LIMITS, retrieval=RetrievalConfig(top_k=3), methods=MethodsConfig(selfrag=SELFRAG))


class EchoBackend:
    """Answers with the instruction reversed and one citation per retrieval it was asked to make, and
    remembers what it was asked."""

    def __init__(self, fail: Exception | None = None):
        self.fail = fail
        self.seen: list[tuple[str, MethodRequest, SelfRAGSettings, int]] = []

    async def decode(self, method: str, request: MethodRequest, settings: SelfRAGSettings) -> dict[str, Any]:
        top_k = settings.top_k
        self.seen.append((method, request, settings, top_k))
        if self.fail:
            raise self.fail
        citations = [{"passage_id": f"p{i}", "title": f"T{i}"} for i in range(top_k if getattr(settings, "mode", None) == "always" else 0)]
        return {"text": request.instruction[::-1], "n_retrievals": len(citations) and 1, "retrieved": bool(citations),
                "citations": citations, "option": None, "option_scores": {}, "trace": {"segments": []},
                "timings": {"decode_ms": 2.0}, "usage": {"prompt_tokens": 11, "completion_tokens": 4}}


def _client(backend: EchoBackend, token: str | None = None) -> TestClient:
    return TestClient(build_api(serve_sections(CFG), backend, token_digest(token) if token else None))


@pytest.fixture
def backend() -> EchoBackend:
    return EchoBackend()


@pytest.fixture
def client(backend) -> TestClient:
    return _client(backend)


def test_generate_applies_per_request_controls_over_the_defaults(client, backend):
    r = client.post("/v1/generate", json={"instruction": "abc", "input": "ctx", "mode": "always", "top_k": 4,
                                          "threshold": 0.7, "beam_width": 3, "max_depth": 4, "w_is_sup": 2.5,
                                          "forbid": ["[No support / Contradictory]"], "max_tokens": 20})
    assert r.status_code == 200, r.text
    method, request, cfg, top_k = backend.seen[-1]
    assert method == "selfrag" and request == MethodRequest(instruction="abc", input="ctx")
    assert (cfg.mode, top_k, cfg.threshold, cfg.beam_width, cfg.max_depth) == ("always", 4, 0.7, 3, 4)
    assert (cfg.w_is_sup, cfg.w_is_rel, cfg.max_new_tokens) == (2.5, 1.0, 20)
    assert cfg.forbid == ["[No support / Contradictory]"]
    body = r.json()
    assert body["text"] == "cba" and len(body["citations"]) == 4 and body["retrieval_count"] == 1
    assert body["method"] == "selfrag" and body["trace"] == {"segments": []}
    assert body["timings"]["decode_ms"] == 2.0 and "total_ms" in body["timings"]


def test_unset_controls_keep_the_server_defaults(client, backend):
    client.post("/v1/generate", json={"instruction": "q"})
    served = SELFRAG.model_copy(update={"top_k": 3})  # the section's own settings, K from retrieval.top_k
    assert backend.seen[-1] == ("selfrag", MethodRequest("q"), served, 3)
    client.post("/v1/generate", json={"instruction": "q", "method": "selfrag"})
    assert backend.seen[-1] == ("selfrag", MethodRequest("q"), served, 3)


@pytest.mark.parametrize("route", ["/v1/generate", "/v1/chat/completions"])
def test_an_unknown_method_is_422_listing_the_known_ones(client, backend, route):
    body = {"instruction": "q", "method": "nope"} if route == "/v1/generate" else _chat(method="nope")
    r = client.post(route, json=body)
    assert r.status_code == 422
    error = r.json()["error"]
    assert error["param"] == "method" and "'selfrag'" in error["message"]
    assert backend.seen == []


@pytest.mark.parametrize(("payload", "field"), [
    ({}, "instruction"),
    ({"instruction": ""}, "instruction"),
    ({"instruction": 3}, "instruction"),
    ({"instruction": "q", "mode": "often"}, "mode"),
    ({"instruction": "q", "threshold": -0.1}, "threshold"),
    ({"instruction": "q", "top_k": 0}, "top_k"),
    ({"instruction": "q", "beam_width": "two"}, "beam_width"),
    ({"instruction": "q", "w_is_rel": "nan"}, "w_is_rel"),
    ({"instruction": "q", "forbid": ["[Retrieval]", "[Nope]"]}, "forbid"),
    ({"instruction": "q", "temperature": 0.5}, "temperature"),
])
def test_invalid_generate_request_is_422_naming_the_field(client, backend, payload, field):
    r = client.post("/v1/generate", json=payload)
    assert r.status_code == 422
    body = r.json()
    assert body["error"]["param"] == field and body["error"]["message"].startswith(f"{field}: ")
    assert body["detail"][0]["loc"][-1] == field
    assert backend.seen == []


@pytest.mark.parametrize(("payload", "field", "setting"), [
    ({"instruction": "q", "top_k": 6}, "top_k", "max_top_k"),
    ({"instruction": "q", "beam_width": 4}, "beam_width", "max_beam_width"),
    ({"instruction": "q", "max_depth": 5}, "max_depth", "max_depth_limit"),
    ({"instruction": "q", "max_tokens": 65}, "max_tokens", "max_tokens_limit"),
    ({"instruction": "q" * 101}, "instruction", "max_prompt_chars"),
    ({"instruction": "q" * 60, "input": "i" * 41}, "input", "max_prompt_chars"),
])
def test_over_limit_is_422_naming_field_and_setting(client, payload, field, setting):
    r = client.post("/v1/generate", json=payload)
    assert r.status_code == 422
    error = r.json()["error"]
    assert error["param"] == field and f"serve.{setting}" in error["message"]


def test_values_at_the_limits_pass(client):
    r = client.post("/v1/generate", json={"instruction": "q" * 60, "input": "i" * 40, "top_k": 5, "beam_width": 3,
                                          "max_depth": 4, "max_tokens": 64})
    assert r.status_code == 200


def _chat(**extra: Any) -> dict[str, Any]:
    return {"model": "selfrag", "messages": [{"role": "system", "content": "Be brief."},
                                             {"role": "user", "content": "Who wrote it?"}], **extra}


def test_chat_completion_is_an_openai_chat_completion(client, backend):
    from openai.types.chat import ChatCompletion

    r = client.post("/v1/chat/completions", json=_chat(max_tokens=12, temperature=0.3, user="u1",
                                                       selfrag={"mode": "always", "top_k": 2}))
    assert r.status_code == 200, r.text
    completion = ChatCompletion.model_validate(r.json())
    assert completion.choices[0].message.content == "?ti etorw ohW"
    assert completion.usage.total_tokens == 15
    assert len(completion.model_extra["selfrag"]["citations"]) == 2
    method, request, cfg, top_k = backend.seen[-1]
    assert request == MethodRequest(instruction="Who wrote it?", input="system: Be brief.")
    assert (method, cfg.mode, top_k, cfg.max_new_tokens) == ("selfrag", "always", 2, 12)


def test_chat_text_parts_and_max_completion_tokens(client, backend):
    body = _chat(max_tokens=5, max_completion_tokens=9)
    body["messages"] = [{"role": "user", "content": [{"type": "text", "text": "Part one, "},
                                                      {"type": "text", "text": "part two."}]}]
    assert client.post("/v1/chat/completions", json=body).status_code == 200
    _, request, cfg, _ = backend.seen[-1]
    assert request.instruction == "Part one, part two." and request.input == ""
    assert cfg.max_new_tokens == 9


@pytest.mark.parametrize(("payload", "field"), [
    ({"messages": [{"role": "user", "content": "q"}]}, "model"),
    (_chat(messages=[]), "messages"),
    (_chat(messages=[{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]), "messages"),
    (_chat(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]),
     "messages.0.content"),
    (_chat(messages=[{"role": "user", "content": "q" * 101}]), "messages"),
    (_chat(stream=True), "stream"),
    (_chat(n=2), "n"),
    (_chat(max_tokens=65), "max_tokens"),
    (_chat(selfrag={"top_k": 6}), "selfrag.top_k"),
    (_chat(selfrag={"beam": 2}), "selfrag.beam"),
])
def test_invalid_chat_request_is_422_naming_the_field(client, payload, field):
    r = client.post("/v1/chat/completions", json=payload)
    assert r.status_code == 422
    assert r.json()["error"]["param"].startswith(field)


def test_auth_off_serves_without_a_token(client):
    assert client.post("/v1/generate", json={"instruction": "q"}).status_code == 200
    assert client.get("/v1/models").json()["data"][0]["id"] == "selfrag"


def test_auth_on_requires_the_bearer_token(backend):
    client = _client(backend, token="s3cret")
    assert client.post("/v1/generate", json={"instruction": "q"}).status_code == 401
    for header in ("Bearer wrong", "s3cret", "Basic s3cret"):
        r = client.post("/v1/generate", json={"instruction": "q"}, headers={"Authorization": header})
        assert r.status_code == 401 and r.headers["WWW-Authenticate"] == "Bearer"
    assert client.post("/v1/chat/completions", json=_chat()).status_code == 401
    assert client.get("/v1/models").status_code == 401
    assert backend.seen == []
    ok = client.post("/v1/generate", json={"instruction": "q"}, headers={"Authorization": "Bearer s3cret"})
    assert ok.status_code == 200
    assert client.get("/healthz").status_code == 200


def test_overload_is_503_with_retry_after():
    r = _client(EchoBackend(fail=Overloaded("queue full"))).post("/v1/generate", json={"instruction": "q"})
    assert r.status_code == 503 and r.headers["Retry-After"] == "7"
    assert "queue full" in r.json()["error"]["message"]


def test_timeout_is_504():
    r = _client(EchoBackend(fail=DecodeTimeout("too slow"))).post("/v1/chat/completions", json=_chat())
    assert r.status_code == 504 and r.json()["error"]["message"] == "too slow"


def test_defaults_beyond_the_limits_are_refused_at_startup():
    over = RaypipeConfig(serve=LIMITS, retrieval=RetrievalConfig(top_k=9),
                         methods=MethodsConfig(selfrag=SelfRAGSettings(max_new_tokens=100)))
    with pytest.raises(ConfigError, match=r"retrieval.top_k=9 > serve.max_top_k=5.*"
                                          r"methods.selfrag.max_new_tokens=100 > serve.max_tokens_limit=64"):
        check_defaults_within_limits(serve_sections(over))
    with pytest.raises(ConfigError, match="max_top_k"):
        build_api(serve_sections(RaypipeConfig(serve=LIMITS, retrieval=RetrievalConfig(top_k=9))), EchoBackend(), None)
    # a K the method's own section sets is named there
    own = RaypipeConfig(serve=LIMITS, methods=MethodsConfig(selfrag=SELFRAG.model_copy(update={"top_k": 7})))
    with pytest.raises(ConfigError, match=r"^[^;]*methods.selfrag.top_k=7 > serve.max_top_k=5$"):
        check_defaults_within_limits(serve_sections(own))


def test_limits_differ_per_server():
    def models(**serve: Any):
        return request_models(serve_sections(RaypipeConfig(serve=ServeConfig(**serve), retrieval=RetrievalConfig(top_k=1))))

    tight, loose = models(max_top_k=2), models(max_top_k=50)
    assert loose.parse_generate({"instruction": "q", "top_k": 30}).top_k == 30
    with pytest.raises(ValueError, match="max_top_k"):
        tight.parse_generate({"instruction": "q", "top_k": 3})


class _Response:
    """A DeploymentResponse stand-in: awaits `result` (or never finishes), records cancel()."""

    def __init__(self, result: Any = None, error: Exception | None = None, hang: bool = False):
        self.result, self.error, self.hang, self.cancelled = result, error, hang, False

    def cancel(self) -> None:
        self.cancelled = True

    def __await__(self):
        return self._wait().__await__()

    async def _wait(self) -> Any:
        if self.hang:
            await asyncio.Event().wait()
        if self.error:
            raise self.error
        return self.result


class _Handle:
    def __init__(self, response: _Response):
        self.response = response
        self.decode = self

    def remote(self, *_: Any) -> _Response:
        return self.response


def test_decoder_backend_maps_backpressure_and_deadline():
    from ray.serve.exceptions import BackPressureError

    from raypipe.serving.ingress import DecoderBackend

    call = ("selfrag", MethodRequest("q"), SelfRAGSettings(top_k=3))
    ok = DecoderBackend(_Handle(_Response(result={"text": "a"})), timeout_s=5)
    assert asyncio.run(ok.decode(*call)) == {"text": "a"}
    full = DecoderBackend(_Handle(_Response(error=BackPressureError(num_queued_requests=4, max_queued_requests=4))),
                          timeout_s=5)
    with pytest.raises(Overloaded, match="max_queued_requests=4"):
        asyncio.run(full.decode(*call))
    hanging = _Response(hang=True)
    with pytest.raises(DecodeTimeout, match="0.05"):
        asyncio.run(DecoderBackend(_Handle(hanging), timeout_s=0.05).decode(*call))
    assert hanging.cancelled


#: what a replica's process does before its first request, by deployment
_REPLICA_START = {
    "ingress": "import raypipe.serving.ingress",
    # the Decoder: its module, every method it may run, and its tokenizer
    "decoder": ("import raypipe.serving.decoder; from raypipe.methods import REGISTRY, get_method; "
                "[get_method(name) for name in REGISTRY]; from raypipe.models import load_tokenizer; "
                "load_tokenizer({model!r})"),
}


@pytest.mark.parametrize("replica", sorted(_REPLICA_START))
def test_replicas_without_a_model_import_no_model_library(replica, tiny_model_dir):
    """The ingress and Decoder replicas (the Decoder autoscales with the load) start in seconds only if
    they stay clear of torch (and the ingress of transformers too); a fresh interpreter shows what a
    replica's start pulls in."""
    import subprocess
    import sys

    unwanted = ("torch", "transformers") if replica == "ingress" else ("torch",)
    probe = (_REPLICA_START[replica].format(model=str(tiny_model_dir)) +
             f"; import sys; print(sorted(m for m in {unwanted!r} if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert loaded.strip().splitlines()[-1] == "[]"


# --- bad input never answers 5xx (issue 18) ---------------------------------------------------------


def _raw(client: TestClient, route: str, text: str | bytes, **headers: str):
    """POST `text` as it is: Python's json accepts NaN and Infinity and escapes lone surrogates, so
    these bodies are written by hand, as a client that sends them would."""
    return client.post(route, content=text.encode() if isinstance(text, str) else text,
                       headers={"content-type": "application/json", **headers})


_CHAT_PREFIX = '{"model": "selfrag", "messages": [{"role": "user", "content": '


@pytest.mark.parametrize(("route", "text", "field", "echoed"), [
    ("/v1/generate", '{"instruction": "x", "threshold": NaN}', "threshold", "NaN"),
    ("/v1/generate", '{"instruction": "x", "w_is_sup": Infinity}', "w_is_sup", "Infinity"),
    ("/v1/generate", '{"instruction": "x", "w_is_rel": -Infinity}', "w_is_rel", "-Infinity"),
    ("/v1/generate", '{"instruction": "x", "top_k": 1e400}', "top_k", "Infinity"),
    ("/v1/generate", r'{"instruction": "\ud800 x"}', "instruction", "\\ud800 x"),
    ("/v1/generate", r'{"instruction": "x", "input": "a\udc00"}', "input", "a\\udc00"),
    ("/v1/generate", r'{"instruction": "x", "forbid": ["\ud800"]}', "forbid", ["\\ud800"]),
    ("/v1/chat/completions", _CHAT_PREFIX + r'"hi \ud83d"}]}', "messages.0.content", None),
    ("/v1/chat/completions", _CHAT_PREFIX + '"hi"}], "selfrag": {"threshold": NaN}}', "selfrag.threshold", "NaN"),
    ("/v1/chat/completions", _CHAT_PREFIX + '"hi"}], "max_tokens": Infinity}', "max_tokens", "Infinity"),
])
def test_non_finite_numbers_and_lone_surrogates_are_422_not_500(client, backend, route, text, field, echoed):
    r = _raw(client, route, text)
    assert r.status_code == 422, r.text
    body = json.loads(r.content.decode("utf-8"), parse_constant=lambda c: pytest.fail(f"{c} in the answer"))
    assert body["error"]["param"].startswith(field)
    if echoed is not None:  # the offending input is echoed, spelled out
        assert body["detail"][0]["input"] == echoed
    assert backend.seen == []


@pytest.mark.parametrize("instruction", [" ", "\n\t ", "\u3000\u00a0"])
def test_whitespace_only_instruction_is_422_on_generate_as_on_chat(client, backend, instruction):
    r = client.post("/v1/generate", json={"instruction": instruction})
    assert r.status_code == 422 and r.json()["error"]["param"] == "instruction"
    assert "whitespace" in r.json()["error"]["message"]
    chat = client.post("/v1/chat/completions", json=_chat(messages=[{"role": "user", "content": instruction}]))
    assert chat.status_code == 422 and chat.json()["error"]["param"] == "messages"
    assert backend.seen == []


@pytest.mark.parametrize(("route", "payload", "field"), [
    ("/v1/generate", {"instruction": "q", "top_k": True}, "top_k"),
    ("/v1/generate", {"instruction": "q", "beam_width": True}, "beam_width"),
    ("/v1/generate", {"instruction": "q", "threshold": False}, "threshold"),
    ("/v1/generate", {"instruction": "q", "w_is_sup": True}, "w_is_sup"),
    ("/v1/generate", {"instruction": "q", "max_depth": "3"}, "max_depth"),
    ("/v1/generate", {"instruction": "q", "top_k": 2.0}, "top_k"),
    ("/v1/chat/completions", _chat(max_tokens=True), "max_tokens"),
    ("/v1/chat/completions", _chat(n=True), "n"),
    ("/v1/chat/completions", _chat(selfrag={"top_k": True}), "selfrag.top_k"),
])
def test_booleans_and_strings_are_not_numbers(client, backend, route, payload, field):
    r = client.post(route, json=payload)
    assert r.status_code == 422 and r.json()["error"]["param"] == field
    assert backend.seen == []


def test_an_integer_is_a_number(client, backend):
    assert client.post("/v1/generate", json={"instruction": "q", "threshold": 1, "w_is_sup": 2}).status_code == 200
    assert (backend.seen[-1][2].threshold, backend.seen[-1][2].w_is_sup) == (1.0, 2.0)


def test_an_unknown_chat_model_is_404_model_not_found_naming_the_served_one(client, backend):
    r = client.post("/v1/chat/completions", json=_chat(model="gpt-4o"))
    assert r.status_code == 404
    assert r.json()["error"] == {"message": "The model 'gpt-4o' does not exist; this server serves 'selfrag'",
                                 "type": "invalid_request_error", "param": "model", "code": "model_not_found"}
    assert backend.seen == []


def test_the_openai_client_sees_model_not_found(client):
    import openai

    oai = openai.OpenAI(base_url="http://testserver/v1", api_key="x", http_client=client, max_retries=0)
    with pytest.raises(openai.NotFoundError) as caught:
        oai.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "q"}])
    assert caught.value.code == "model_not_found" and "serves 'selfrag'" in caught.value.message


def _limited(max_body_bytes: int, backend: EchoBackend) -> TestClient:
    cfg = CFG.model_copy(update={"serve": LIMITS.model_copy(update={"max_body_bytes": max_body_bytes})})
    return TestClient(build_api(serve_sections(cfg), backend, None))


def _body_of(size: int) -> bytes:
    """A valid /v1/generate body of exactly `size` bytes (the instruction pads it)."""
    head, tail = b'{"instruction": "', b'"}'
    return head + b"q" * (size - len(head) - len(tail)) + tail


def test_a_body_over_serve_max_body_bytes_is_413_before_it_is_parsed(backend):
    client = _limited(60, backend)
    assert _raw(client, "/v1/generate", _body_of(60)).status_code == 200
    for body in (_body_of(61), b"{" * 61, b"\xff" * 61):  # valid, malformed JSON, not UTF-8: all 413
        r = _raw(client, "/v1/generate", body)
        assert r.status_code == 413, r.text
        assert r.json()["error"]["param"] == "body" and "serve.max_body_bytes" in r.json()["error"]["message"]
    # sent without a Content-Length (chunked): counted as it arrives
    r = _raw(client, "/v1/generate", iter([b'{"instruction": "', b"q" * 50, b'"}']))
    assert "content-length" not in r.request.headers and r.status_code == 413
    assert _raw(client, "/v1/generate", iter([b'{"instruction": "', b"q" * 30, b'"}'])).status_code == 200
    assert len(backend.seen) == 2


def test_malformed_json_names_the_body_not_a_byte_offset(client):
    r = _raw(client, "/v1/generate", '{"instruction": "x",\n "top_k": ')
    assert r.status_code == 422
    error = r.json()["error"]
    assert error["param"] == "body" and error["message"] == "body: not valid JSON (Expecting value at byte 31)"


@pytest.mark.parametrize("body", [b'{"instruction": "caf\xe9"}',  # latin-1, not UTF-8
                                  b"[" * 50_000,  # nested past the parser's recursion limit
                                  b'{"instruction": "x", "top_k": 1' + b"0" * 5000 + b"}"])  # past int digits
def test_a_body_the_parser_cannot_read_is_400(client, backend, body):
    r = _raw(client, "/v1/generate", body)
    assert r.status_code == 400 and r.json()["error"]["param"] == "body"
    assert "UTF-8 JSON text" in r.json()["error"]["message"]
    assert backend.seen == []
