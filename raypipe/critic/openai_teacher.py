"""A teacher behind any OpenAI-compatible chat-completions server (a hosted model, vLLM's server, a
Ray Serve LLM app).

Self-RAG §3.2.1 collects 4k-20k GPT-4 judgements per aspect, one chat request each, with an
aspect-specific instruction and few-shot demonstrations (App. D); replies that do not name a valid
token are discarded. At that volume the things that matter are: a bounded number of requests in
flight, retrying what the server asks us to retry (429, 5xx, timeouts, dropped connections) with
exponential backoff, never retrying what will not get better (auth, unknown model), and never paying
twice for the same judgement: every reply is appended to a JSON-lines cache as it arrives, and a
rerun skips the ids found there.
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import httpx

from raypipe.critic.teachers import LabelRequest, Teacher
from raypipe.errors import ConfigError, RaypipeError
from raypipe.http_retry import NoResponse, RetryPolicy
from raypipe.prompts import Aspect, parse_teacher_reply, teacher_messages
from raypipe.settings.teachers import TeacherConfig

logger = logging.getLogger(__name__)

#: statuses that mean the configuration is wrong: every other request would fail the same way
FATAL_STATUSES = frozenset({401, 403, 404})


class RequestFailed(Exception):
    """No usable HTTP reply for one request (after retries, or a status that retrying cannot fix)."""


class LabelCache:
    """Append-only JSON lines ``{"id", "aspect", "label", "reply"}``; ``label`` null = discarded reply.

    Lines are flushed one by one, so a killed run loses at most the line being written; a torn last
    line is skipped on load.
    """

    def __init__(self, path: Path):
        self.path = path
        self.entries: dict[str, str | None] = {}
        self._lock = threading.Lock()
        if path.exists():
            self._load()

    def _load(self) -> None:
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):  # end a torn line, so the next append starts its own
            with self.path.open("ab") as f:
                f.write(b"\n")
        torn = 0
        for line in data.decode("utf-8", errors="replace").splitlines():
            try:
                row = json.loads(line)
                self.entries[row["id"]] = row["label"]
            except (json.JSONDecodeError, KeyError, TypeError):
                torn += 1
        if torn:
            logger.warning("%s: skipped %d unreadable cache lines (an interrupted write)", self.path, torn)
        logger.info("%s: %d cached teacher labels", self.path, len(self.entries))

    def add(self, request_id: str, aspect: Aspect, label: str | None, reply: str) -> None:
        row = {"id": request_id, "aspect": aspect.value, "label": label, "reply": reply}
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
            self.entries[request_id] = label


def _reply_text(body: Any) -> str | None:
    try:
        content = body["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        return None
    return content if isinstance(content, str) else None


class OpenAITeacher(Teacher):
    """Labels with ``POST {base_url}/chat/completions``; `cache_path` makes it resumable."""

    def __init__(self, cfg: TeacherConfig, cache_path: Path, client: httpx.Client | None = None):
        super().__init__()
        if not cfg.base_url:
            raise ConfigError("label.teacher.base_url is required when label.teacher.kind is 'openai'")
        self.cfg = cfg
        self.url = cfg.base_url.rstrip("/") + "/chat/completions"
        # Jitter keeps concurrent workers throttled by the same 429 from retrying in lockstep.
        self.retry = RetryPolicy(cfg.retries, cfg.backoff_s, jitter=random.random)
        self.cache = LabelCache(cache_path)
        headers = {"Content-Type": "application/json"}
        api_key = os.environ.get(cfg.api_key_env)
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        else:
            logger.info("%s is not set: calling %s without an API key", cfg.api_key_env, self.url)
        self.client = client or httpx.Client(
            headers=headers, timeout=cfg.timeout_s,
            limits=httpx.Limits(max_connections=cfg.concurrency, max_keepalive_connections=cfg.concurrency),
        )

    def close(self) -> None:
        self.client.close()

    def _post(self, request: LabelRequest) -> str:
        """The raw reply text, or RequestFailed; a fatal status raises RaypipeError for the whole job."""
        payload = {**self.cfg.extra_body, "model": self.cfg.model, "messages": teacher_messages(request.example),
                   "temperature": self.cfg.temperature, "max_tokens": self.cfg.max_tokens}
        try:
            response = self.retry.send(lambda: self.client.post(self.url, json=payload), what=f"request {request.id}")
        except NoResponse as exc:
            raise RequestFailed(str(exc)) from exc
        if response.status_code == 200:
            try:
                text = _reply_text(response.json())
            except ValueError:
                text = None
            return "" if text is None else text
        problem = f"HTTP {response.status_code}: {response.text[:200]}"
        if response.status_code in FATAL_STATUSES:
            raise RaypipeError(f"teacher at {self.url} answered {problem}; check label.teacher "
                               f"(base_url, model, {self.cfg.api_key_env})")
        raise RequestFailed(problem)

    def _label_one(self, aspect: Aspect, request: LabelRequest) -> None:
        reply = self._post(request)
        label = parse_teacher_reply(aspect, reply)
        if label is None:
            logger.debug("request %s: unparseable reply %r", request.id, reply[:200])
        self.cache.add(request.id, aspect, label, reply)

    def label(self, aspect: Aspect, requests: list[LabelRequest]) -> list[str | None]:
        self.check_aspect(aspect, requests)
        todo = list({r.id: r for r in requests if r.id not in self.cache.entries}.values())
        logger.info("%s: %d requests, %d cached, %d to send", aspect.value, len(requests),
                    len(requests) - len(todo), len(todo))
        errors: list[str] = []
        with ThreadPoolExecutor(max_workers=self.cfg.concurrency) as pool:
            futures = [pool.submit(self._label_one, aspect, r) for r in todo]
            try:
                for future in as_completed(futures):
                    try:
                        future.result()
                    except RequestFailed as exc:
                        errors.append(str(exc))
            except RaypipeError:
                for f in futures:
                    f.cancel()
                raise
        if todo and len(errors) == len(todo):
            raise RaypipeError(f"teacher at {self.url}: all {len(todo)} {aspect.value} requests failed; "
                               f"last error: {errors[-1]}")
        if errors:
            logger.warning("%s: %d requests failed (a rerun retries them); last error: %s",
                           aspect.value, len(errors), errors[-1])
        labels = [self.cache.entries.get(r.id) for r in requests]
        for r, label in zip(requests, labels, strict=True):
            if r.id not in self.cache.entries:
                self.failed[aspect.value] += 1
            elif label is None:
                self.discarded[aspect.value] += 1
        return labels
