"""The shared OpenAI-compatible chat client against a mock transport: the body it sends, the key it
sends (or not), failures in place, and what its cached fan-out keeps."""

from __future__ import annotations

import json

import httpx
import pytest

from raypipe.clients.openai_chat import MalformedReply, OpenAIChat, ReplyCache, RequestFailed
from raypipe.errors import RaypipeError


def _chat(handler, **overrides) -> OpenAIChat:
    settings = {"base_url": "http://lm.local/v1/", "model": "m", "api_key_env": "RAYPIPE_TEST_CHAT_KEY",
                "settings": "test.chat", "timeout_s": 5.0, "retries": 0, "concurrency": 2, "temperature": 0.5,
                "max_tokens": 7, **overrides}
    return OpenAIChat(**settings, http_client=httpx.Client(transport=httpx.MockTransport(handler)))


def _reply(text: str) -> httpx.Response:
    return httpx.Response(200, json={"choices": [{"message": {"content": text}}]})


def test_the_body_is_the_callers_over_extra_body_and_no_key_sends_no_authorization(monkeypatch):
    monkeypatch.delenv("RAYPIPE_TEST_CHAT_KEY", raising=False)
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return _reply("hello")

    chat = _chat(handler, extra_body={"method": "direct", "model": "not-this-one"})
    assert chat.ask([{"role": "user", "content": "hi"}], str.upper) == "HELLO"
    assert seen[0].url.path == "/v1/chat/completions" and "authorization" not in seen[0].headers
    assert json.loads(seen[0].content) == {"method": "direct", "model": "m", "temperature": 0.5, "max_tokens": 7,
                                           "messages": [{"role": "user", "content": "hi"}]}


def test_failures_take_their_place_and_a_malformed_body_is_its_own_failure():
    def handler(request: httpx.Request) -> httpx.Response:
        content = json.loads(request.content)["messages"][0]["content"]
        if content == "bad":
            return httpx.Response(400, json={"error": "no"})
        if content == "odd":
            return httpx.Response(200, json={"choices": []})
        return _reply(content * 2)

    chat = _chat(handler)
    out = chat.fan_out(lambda c: chat.ask([{"role": "user", "content": c}], str), ["a", "bad", "odd", "b"])
    assert out[0] == "aa" and out[3] == "bb"
    assert isinstance(out[1], RequestFailed) and out[1].status == 400 and str(out[1]).startswith("HTTP 400")
    assert isinstance(out[2], MalformedReply) and str(out[2]).startswith("IndexError")


def test_ask_all_caches_a_malformed_body_as_an_empty_reply_and_stops_at_a_fatal_status(tmp_path):
    def handler(request: httpx.Request) -> httpx.Response:
        content = json.loads(request.content)["messages"][0]["content"]
        return {"odd": httpx.Response(200, text="<html>"), "denied": httpx.Response(403, json={})}.get(
            content, _reply(content))

    cache = ReplyCache(tmp_path / "cache.jsonl", value="reply")
    chat = _chat(handler)
    errors = chat.ask_all([("1", [{"role": "user", "content": "x"}]), ("2", [{"role": "user", "content": "odd"}])],
                          lambda reply: {"reply": reply}, cache)
    assert errors == [] and cache.entries == {"1": "x", "2": ""}
    with pytest.raises(RaypipeError, match="check test.chat"):
        chat.ask_all([("3", [{"role": "user", "content": "denied"}])], lambda reply: {"reply": reply}, cache)
    assert "3" not in ReplyCache(tmp_path / "cache.jsonl", value="reply").entries
