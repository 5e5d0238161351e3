"""The OpenAI-compatible teacher against a fake chat server on 127.0.0.1 that answers well, badly,
slowly and with errors, following a per-request script."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from raypipe import tokens
from raypipe.config import RaypipeConfig
from raypipe.critic.openai_teacher import OpenAITeacher
from raypipe.critic.teacher_factory import make_critic_teacher
from raypipe.critic.teachers import LabelRequest
from raypipe.errors import ConfigError, RaypipeError
from raypipe.jobs.label import run_label
from raypipe.prompts import Aspect, CriticExample
from raypipe.settings.teachers import TeacherConfig

HANG_LIMIT_S = 10.0  # a hanging handler gives up by itself, so a broken test cannot stall the suite


class FakeChatServer:
    """Scripts are keyed by a marker found in the user message ("*" for messages without one); each hit
    consumes the next action and the last action repeats. Actions: ("ok", text), ("status", code), ("hang",), ("garbage",),
    ("gate", text) = hold the reply until `gate_size` requests are in flight (or the last of
    `gate_total` gated requests has arrived, so a short final round is not held)."""

    def __init__(self) -> None:
        self.scripts: dict[str, list[tuple]] = {}
        self.hits: Counter[str] = Counter()
        self.auth: list[str | None] = []
        self.release = threading.Event()
        self.lock = threading.Condition()
        self.inflight = 0
        self.max_inflight = 0
        self.gate_size = 1
        self.gate_total = 0
        self.gate_arrived = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                assert self.path == "/v1/chat/completions"
                server.auth.append(self.headers.get("Authorization"))
                action = server.next_action(body["messages"][-1]["content"])
                with server.lock:
                    server.inflight += 1
                    server.max_inflight = max(server.max_inflight, server.inflight)
                    server.lock.notify_all()
                try:
                    self.respond(action)
                finally:
                    with server.lock:
                        server.inflight -= 1

            def respond(self, action: tuple) -> None:
                kind = action[0]
                if kind == "hang":
                    server.release.wait(HANG_LIMIT_S)
                    return
                if kind == "gate":
                    with server.lock:
                        server.gate_arrived += 1
                        server.lock.notify_all()
                        server.lock.wait_for(lambda: server.inflight >= server.gate_size
                                             or server.gate_arrived >= server.gate_total, HANG_LIMIT_S)
                if kind == "status":  # asks for a 1 ms wait, as OpenAI's servers say how long to wait
                    self.send(action[1], b'{"error": "scripted"}', {"retry-after-ms": "1"})
                elif kind == "garbage":
                    self.send(200, b"<html>not json</html>")
                else:
                    self.send(200, json.dumps({"choices": [{"message": {"content": action[1]}}]}).encode())

            def send(self, status: int, payload: bytes, headers: dict[str, str] | None = None) -> None:
                try:
                    self.send_response(status)
                    for name, value in (headers or {}).items():
                        self.send_header(name, value)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02},
                                       daemon=True)

    def next_action(self, content: str) -> tuple:
        with self.lock:
            marker = next((m for m in self.scripts if f"<{m}>" in content), "*")
            self.hits[marker] += 1
            script = self.scripts[marker]
            return script.pop(0) if len(script) > 1 else script[0]


@pytest.fixture
def server() -> Iterator[FakeChatServer]:
    fake = FakeChatServer()
    fake.thread.start()
    yield fake
    fake.release.set()
    fake.httpd.shutdown()
    fake.httpd.server_close()


def _request(marker: str, aspect: Aspect = Aspect.IS_REL) -> LabelRequest:
    example = CriticExample(aspect, f"Question <{marker}>?", evidence="Title\nSome text.")
    return LabelRequest(aspect, example, instance_id=marker, passage_id="p1")


def _teacher(server: FakeChatServer, tmp_path, **overrides) -> OpenAITeacher:
    cfg = TeacherConfig(kind="openai", base_url=server.url, model="fake", api_key_env="RAYPIPE_TEST_KEY",
                        timeout_s=5.0, retries=3, concurrency=4)
    cfg = cfg.model_copy(update=overrides)
    return OpenAITeacher(cfg, cache_path=tmp_path / "cache.jsonl")


VALID = {
    "plain": ("[Relevant]\nThe passage answers it.", tokens.RELEVANT),
    "markdown": ("**Rating:** [Irrelevant]\nWrong entity.", tokens.IRRELEVANT),
    "bare": ("irrelevant", tokens.IRRELEVANT),
    "inline": ("Relevant - it names the founder.", tokens.RELEVANT),
}
INVALID = {
    "prose": "I think the passage might be somewhat useful.",
    "both": "[Relevant] or [Irrelevant]",
    "empty": "",
    "other_group": "[Fully supported]",
}


def test_replies_are_parsed_strictly_and_bad_ones_discarded(server, tmp_path):
    for marker, (reply, _) in VALID.items():
        server.scripts[marker] = [("ok", reply)]
    for marker, reply in INVALID.items():
        server.scripts[marker] = [("ok", reply)]
    server.scripts["garbage"] = [("garbage",)]
    markers = [*VALID, *INVALID, "garbage"]
    teacher = _teacher(server, tmp_path)
    labels = teacher.label(Aspect.IS_REL, [_request(m) for m in markers])
    assert labels == [VALID[m][1] for m in VALID] + [None] * (len(INVALID) + 1)
    assert teacher.discarded == {"is_rel": len(INVALID) + 1}
    assert not teacher.failed


def test_rate_limits_and_server_errors_are_retried(server, tmp_path):
    server.scripts["flaky"] = [("status", 429), ("status", 500), ("status", 503), ("ok", "[Relevant]")]
    teacher = _teacher(server, tmp_path, retries=3)
    assert teacher.label(Aspect.IS_REL, [_request("flaky")]) == [tokens.RELEVANT]
    assert server.hits["flaky"] == 4


def test_a_timeout_is_retried(server, tmp_path):
    server.scripts["slow"] = [("hang",), ("ok", "[Irrelevant]")]
    teacher = _teacher(server, tmp_path, timeout_s=0.3)
    assert teacher.label(Aspect.IS_REL, [_request("slow")]) == [tokens.IRRELEVANT]
    assert server.hits["slow"] == 2


def test_exhausted_retries_count_as_failed_and_a_rerun_retries_them(server, tmp_path):
    server.scripts["good"] = [("ok", "[Relevant]")]
    server.scripts["down"] = [("status", 500), ("status", 502), ("status", 500), ("ok", "[Irrelevant]")]
    requests = [_request("good"), _request("down")]
    first = _teacher(server, tmp_path, retries=1)
    assert first.label(Aspect.IS_REL, requests) == [tokens.RELEVANT, None]
    assert first.failed == {"is_rel": 1} and not first.discarded
    assert server.hits == {"good": 1, "down": 2}

    second = _teacher(server, tmp_path, retries=1)
    assert second.label(Aspect.IS_REL, requests) == [tokens.RELEVANT, tokens.IRRELEVANT]
    assert server.hits == {"good": 1, "down": 4}


def test_a_rerun_skips_cached_ids_including_discarded_replies(server, tmp_path):
    for k in range(4):
        server.scripts[f"r{k}"] = [("ok", "[Relevant]" if k % 2 else "no idea")]
    first = _teacher(server, tmp_path)
    done = first.label(Aspect.IS_REL, [_request(f"r{k}") for k in range(3)])
    second = _teacher(server, tmp_path)
    again = second.label(Aspect.IS_REL, [_request(f"r{k}") for k in range(4)])
    assert again[:3] == done == [None, tokens.RELEVANT, None]
    assert again[3] == tokens.RELEVANT
    assert server.hits == {"r0": 1, "r1": 1, "r2": 1, "r3": 1}
    assert second.discarded == {"is_rel": 2}


def test_every_request_failing_is_an_error(server, tmp_path):
    server.scripts["down"] = [("status", 503)]
    with pytest.raises(RaypipeError, match="all 1 is_rel requests failed"):
        _teacher(server, tmp_path, retries=1).label(Aspect.IS_REL, [_request("down")])


def test_auth_errors_stop_the_job_without_retrying(server, tmp_path):
    server.scripts["denied"] = [("status", 401)]
    with pytest.raises(RaypipeError, match="RAYPIPE_TEST_KEY"):
        _teacher(server, tmp_path).label(Aspect.IS_REL, [_request("denied")])
    assert server.hits["denied"] == 1


def test_api_key_comes_from_the_configured_environment_variable(server, tmp_path, monkeypatch):
    monkeypatch.setenv("RAYPIPE_TEST_KEY", "sekret")
    server.scripts["k"] = [("ok", "[Relevant]")]
    _teacher(server, tmp_path).label(Aspect.IS_REL, [_request("k")])
    assert server.auth == ["Bearer sekret"]


def test_requests_in_flight_never_exceed_the_concurrency_limit(server, tmp_path):
    server.gate_size, server.gate_total = 3, 9
    markers = [f"g{k}" for k in range(9)]
    for m in markers:
        server.scripts[m] = [("gate", "[Relevant]")]
    labels = _teacher(server, tmp_path, concurrency=3).label(Aspect.IS_REL, [_request(m) for m in markers])
    assert labels == [tokens.RELEVANT] * 9
    assert server.max_inflight == 3


def test_cache_lines_record_every_reply(server, tmp_path):
    server.scripts["a"] = [("ok", "[Irrelevant]\nother entity")]
    teacher = _teacher(server, tmp_path)
    teacher.label(Aspect.IS_REL, [_request("a")])
    rows = [json.loads(line) for line in (tmp_path / "cache.jsonl").read_text().splitlines()]
    assert rows == [{"id": "a|is_rel|-|p1", "aspect": "is_rel", "label": tokens.IRRELEVANT,
                     "reply": "[Irrelevant]\nother entity"}]


def test_torn_cache_line_is_skipped(server, tmp_path):
    (tmp_path / "cache.jsonl").write_text('{"id": "a|is_rel|-|p1", "aspect": "is_rel", "label": "[Relevant]"'
                                          ', "reply": "x"}\n{"id": "b|is_r')
    server.scripts["b"] = [("ok", "[Irrelevant]")]
    teacher = _teacher(server, tmp_path)
    assert teacher.label(Aspect.IS_REL, [_request("a"), _request("b")]) == [tokens.RELEVANT, tokens.IRRELEVANT]
    assert server.hits == {"b": 1}



def test_an_openai_teacher_without_a_base_url_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="label.teacher.base_url"):
        make_critic_teacher(TeacherConfig(kind="openai"), tmp_path)


def test_run_label_with_the_http_teacher_resumes_after_failed_requests(server, tmp_path, world_dir):
    server.scripts["*"] = [("status", 500)] * 3 + [("ok", "[Relevant]\nIt helps.")]
    out = tmp_path / "critic_data"
    sizes = {a.value: 0 for a in Aspect if a is not Aspect.IS_REL}
    cfg = RaypipeConfig.model_validate({"label": {
        "instances": str(world_dir / "instances"), "passages": str(world_dir / "passages"), "out_dir": str(out),
        "per_aspect": 10, "aspect_sizes": sizes,
        "teacher": {"kind": "openai", "base_url": server.url, "retries": 0, "concurrency": 1}}})
    with pytest.raises(RaypipeError, match="3 teacher requests failed"):
        run_label(cfg)
    partial = json.loads((out / "stats.json").read_text())["aspects"]["is_rel"]
    assert (partial["failed"], partial["labeled"]) == (3, 7)
    assert not (out / "_SUCCESS").exists() and server.hits["*"] == 10

    stats = run_label(cfg)
    assert server.hits["*"] == 13  # only the three failed requests are sent again
    assert stats["aspects"]["is_rel"]["labels"] == {tokens.RELEVANT: 10}
    assert (out / "_SUCCESS").exists()
