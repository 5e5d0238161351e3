"""A teacher behind any OpenAI-compatible chat-completions server (a hosted model, vLLM's server, a
Ray Serve LLM app).

Self-RAG §3.2.1 collects 4k-20k GPT-4 judgements per aspect, one chat request each, with an
aspect-specific instruction and few-shot demonstrations (App. D); replies that do not name a valid
token are discarded. At that volume the things that matter are a bounded number of requests in
flight, retrying only what can get better, and never paying twice for the same judgement: the shared
chat client (`raypipe.clients.openai_chat`) sends only the ids its JSON-lines cache does not hold and
caches every reply, with its label (null: discarded), as it arrives.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import httpx

from raypipe.clients.openai_chat import OpenAIChat, ReplyCache
from raypipe.critic.teachers import LabelRequest, Teacher
from raypipe.prompts import Aspect, parse_teacher_reply, teacher_messages
from raypipe.settings.teachers import TeacherConfig

logger = logging.getLogger(__name__)


class OpenAITeacher(Teacher):
    """Labels through `OpenAIChat`; `cache_path` (rows ``{"id", "aspect", "label", "reply"}``) makes it
    resumable."""

    def __init__(self, cfg: TeacherConfig, cache_path: Path, http_client: httpx.Client | None = None):
        super().__init__()
        self.chat = OpenAIChat.for_teacher(cfg, "label.teacher", http_client)
        self.cache = ReplyCache(cache_path, value="label")

    def close(self) -> None:
        self.chat.close()

    def label(self, aspect: Aspect, requests: list[LabelRequest]) -> list[str | None]:
        self.check_aspect(aspect, requests)

        def parse(reply: str) -> dict[str, Any]:
            label = parse_teacher_reply(aspect, reply)
            if label is None:
                logger.debug("%s: unparseable reply %r", aspect.value, reply[:200])
            return {"aspect": aspect.value, "label": label, "reply": reply}

        self.chat.ask_all([(r.id, teacher_messages(r.example)) for r in requests], parse, self.cache,
                          what=f"{aspect.value} requests")
        labels = [self.cache.entries.get(r.id) for r in requests]
        for r, label in zip(requests, labels, strict=True):
            if r.id not in self.cache.entries:
                self.failed[aspect.value] += 1
            elif label is None:
                self.discarded[aspect.value] += 1
        return labels
