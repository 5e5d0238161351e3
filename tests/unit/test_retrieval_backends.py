"""The HTTP search backend against a scripted server on 127.0.0.1 that fails, stalls and answers."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from raypipe.errors import ConfigError, DataError
from raypipe.retrieval.backends import HttpSearchBackend, SearchBackendError
from raypipe.settings.retrieval import SearchBackendConfig


@dataclass
class Script:
    """What the server answers, request by request; the last action repeats."""

    actions: list[tuple[str, Any]] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next(self, request: dict[str, Any]) -> tuple[str, Any]:
        with self.lock:
            self.requests.append(request)
            return self.actions[min(len(self.requests), len(self.actions)) - 1]


def _answer(query: str, k: int) -> dict[str, Any]:
    return {"data": {"items": [{"link": f"https://example.org/{query}/{i}", "name": f"about {query} #{i}",
                                "body": f"text {i} on {query}", "rel": 10 - i} for i in range(k + 2)]}}


def _handler(script: Script) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self, params: dict[str, str]) -> None:
            kind, arg = script.next({"method": self.command, "params": params, "headers": dict(self.headers)})
            if kind == "stall":
                script.release.wait(timeout=10)  # until the test is over; the client has timed out
                return
            if kind == "status":
                status, headers = arg
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                return
            body = json.dumps(arg(params["q"], int(params["n"])) if callable(arg) else arg).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):  # noqa: N802 (http.server's naming)
            self._serve({k: v[0] for k, v in parse_qs(urlparse(self.path).query).items()})

        def do_POST(self):  # noqa: N802
            length = int(self.headers.get("Content-Length", 0))
            self._serve({k: str(v) for k, v in json.loads(self.rfile.read(length)).items()})

        def log_message(self, *args):
            pass

    return Handler


@pytest.fixture
def server() -> Iterator[tuple[str, Script]]:
    script = Script()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(script))
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/search", script
    script.release.set()
    httpd.shutdown()
    httpd.server_close()


def _backend(url: str, sleeps: list[float], **overrides: Any) -> HttpSearchBackend:
    settings = {"kind": "http", "url": url, "query_param": "q", "count_param": "n",
                "results_field": "data.items", "id_field": "link", "title_field": "name", "text_field": "body",
                "timeout_s": 0.3, "retries": 3, "backoff_s": 0.1, **overrides}
    cfg = SearchBackendConfig(**settings)
    return HttpSearchBackend(cfg, sleep=sleeps.append)


def test_fails_stalls_then_answers_with_backoff(server, monkeypatch):
    url, script = server
    monkeypatch.setenv("RAYPIPE_SEARCH_API_KEY", "s3cret")
    script.actions = [("status", (503, {})), ("status", (429, {"Retry-After": "1.5"})), ("stall", None),
                      ("json", _answer)]
    sleeps: list[float] = []
    [hits] = _backend(url, sleeps).search(["ada lovelace"], 2)
    assert [h.id for h in hits] == ["https://example.org/ada lovelace/0", "https://example.org/ada lovelace/1"]
    assert hits[0].title == "about ada lovelace #0" and hits[1].text == "text 1 on ada lovelace"
    assert [h.score for h in hits] == [1.0, 0.5]  # 1 / rank without a score field
    assert sleeps == [0.1, 1.5, 0.4]  # doubling backoff; Retry-After wins when larger
    assert len(script.requests) == 4
    assert script.requests[-1]["params"] == {"q": "ada lovelace", "n": "2"}
    assert script.requests[-1]["headers"]["Authorization"] == "Bearer s3cret"


def test_gives_up_after_the_configured_retries(server):
    url, script = server
    script.actions = [("status", (502, {}))]
    sleeps: list[float] = []
    with pytest.raises(SearchBackendError, match="after 3 attempts: HTTP 502"):
        _backend(url, sleeps, retries=2).search(["x"], 1)
    assert sleeps == [0.1, 0.2] and len(script.requests) == 3


def test_a_stalled_server_times_out(server):
    url, script = server
    script.actions = [("stall", None)]
    with pytest.raises(SearchBackendError, match="Timeout"):
        _backend(url, [], retries=0).search(["x"], 1)
    assert len(script.requests) == 1


def test_client_errors_are_not_retried_and_name_the_key_variable(server, monkeypatch):
    url, script = server
    monkeypatch.delenv("RAYPIPE_SEARCH_API_KEY", raising=False)
    script.actions = [("status", (401, {}))]
    with pytest.raises(SearchBackendError, match=r"HTTP 401.*\$RAYPIPE_SEARCH_API_KEY"):
        _backend(url, []).search(["x"], 1)
    assert len(script.requests) == 1
    assert "Authorization" not in script.requests[0]["headers"]


def test_many_queries_keep_their_order(server):
    url, script = server
    script.actions = [("json", _answer)]
    queries = [f"query{i}" for i in range(9)]
    results = _backend(url, [], concurrency=4).search(queries, 1)
    assert [row[0].title for row in results] == [f"about {q} #0" for q in queries]


def test_post_and_score_field(server):
    url, script = server
    script.actions = [("json", _answer)]
    [hits] = _backend(url, [], method="POST", score_field="rel").search(["x"], 3)
    assert script.requests[0]["method"] == "POST" and script.requests[0]["params"] == {"q": "x", "n": "3"}
    assert [h.score for h in hits] == [10.0, 9.0, 8.0]


def test_missing_fields_are_data_errors_naming_them(server):
    url, script = server
    script.actions = [("json", {"data": {"items": [{"link": "u", "name": "t"}]}})]
    with pytest.raises(DataError, match="body") as err:
        _backend(url, []).search(["x"], 1)
    assert err.value.field == "body" and err.value.file == url
    script.actions = [("json", {"results": []})]
    with pytest.raises(DataError) as err:
        _backend(url, []).search(["x"], 1)
    assert err.value.field == "data.items"


def test_http_backend_needs_a_url():
    with pytest.raises(ConfigError, match="retrieval.fallback.url"):
        HttpSearchBackend(SearchBackendConfig(kind="http"))
