"""The serving step of `make demo`: start the app, ask a few questions over HTTP (one through the
official openai client), print the answers with their citations, shut the app down."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from raypipe.config import RaypipeConfig

logger = logging.getLogger(__name__)

#: asked when the world's held-out QA split is not there
FALLBACK_QUESTIONS = ("Where was the painter born?", "Which organisation did the chemist work for?")


def demo_questions(cfg: RaypipeConfig, n: int = 2) -> list[str]:
    """The first `n` questions of the first eval set that has them (held-out facts: retrieval helps)."""
    for name in cfg.eval.eval_sets:
        path = Path(name)
        if not path.is_file():
            continue
        with path.open() as f:
            questions = [q for line in f if line.strip() and (q := json.loads(line).get("question"))]
        if questions:
            return questions[:n]
    return list(FALLBACK_QUESTIONS[:n])


def _show(console: Any, title: str, answer: dict[str, Any]) -> None:
    sources = ", ".join(f"{c['title']} ({c['passage_id']})" for c in answer["citations"]) or "none"
    console.print(f"[bold]{title}[/bold]\n  answer: {answer['text'] or '(empty)'}\n  cites: {sources}\n"
                  f"  retrievals: {answer['retrieval_count']}, {answer['timings']['total_ms']:.0f} ms")


def run_serve_demo(cfg: RaypipeConfig) -> dict[str, Any]:
    """Serve `cfg`, send the demo questions to /v1/generate and one to /v1/chat/completions with the
    openai client, print the answers, shut Serve down. Returns counts and latencies."""
    import httpx
    import openai
    from ray import serve
    from rich.console import Console

    from raypipe.logs import reapply
    from raypipe.serving.app import start_app

    console = Console()
    token = os.environ.get(cfg.serve.auth_token_env, "").strip()
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    questions = demo_questions(cfg)
    answers: list[dict[str, Any]] = []
    reapply()  # importing Serve has just set its logger back to INFO
    url = start_app(cfg)
    try:
        with httpx.Client(base_url=url, headers=headers, timeout=cfg.serve.request_timeout_s) as client:
            health = client.get("/healthz").json()
            for question in questions:
                reply = client.post("/v1/generate", json={"instruction": question})
                reply.raise_for_status()
                answers.append(reply.json())
                _show(console, f"POST /v1/generate: {question}", answers[-1])
        chat = openai.OpenAI(base_url=f"{url}/v1", api_key=token or "unused", max_retries=0,
                             timeout=cfg.serve.request_timeout_s)
        completion = chat.chat.completions.create(
            model=cfg.serve.model_name, messages=[{"role": "user", "content": questions[0]}],
            extra_body={"selfrag": {"mode": "always"}})
        extras = completion.model_extra["selfrag"]
        answers.append({"text": completion.choices[0].message.content, **extras})
        _show(console, f"openai client, chat.completions (mode=always): {questions[0]}", answers[-1])
    finally:
        serve.shutdown()
    latencies = [a["timings"]["total_ms"] for a in answers]
    return {"url": url, "health": health["status"], "requests": len(answers),
            "answers_with_citations": sum(bool(a["citations"]) for a in answers),
            "retrievals": sum(a["retrieval_count"] for a in answers),
            "mean_latency_ms": round(sum(latencies) / len(latencies), 1)}
