"""The serving step of `make demo`: start the app, ask a few questions over HTTP (one through the
official openai client), print the answers with their citations, delete the app."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from raypipe.serving.sections import ServeSections

logger = logging.getLogger(__name__)

#: asked when the world's held-out QA split is not there (no gold answers: not scored)
FALLBACK_QUESTIONS = ("Where was the painter born?", "Which organisation did the chemist work for?")


def demo_questions(eval_sets: list[str], n: int = 2) -> list[tuple[str, tuple[str, ...]]]:
    """The first `n` (question, gold answers) of the first of `eval_sets` that has questions (held-out
    facts: retrieval helps), so the terminal shows whether each served answer is right."""
    for name in eval_sets:
        path = Path(name)
        if not path.is_file():
            continue
        with path.open() as f:
            rows = [row for line in f if line.strip() and (row := json.loads(line)).get("question")]
        if rows:
            return [(row["question"], tuple(row.get("answers") or ())) for row in rows[:n]]
    return [(q, ()) for q in FALLBACK_QUESTIONS[:n]]


def _verdict(answer: dict[str, Any], golds: tuple[str, ...]) -> bool | None:
    """The eval's own QA rule (a gold answer inside the output); None without gold answers."""
    from raypipe.eval.metrics import answer_match

    return answer_match(answer["text"] or "", golds) if golds else None


def _show(console: Any, title: str, answer: dict[str, Any], golds: tuple[str, ...]) -> bool | None:
    """Print one served answer (model text escaped: a "[...]" in it is not rich markup) and return
    its verdict against `golds`."""
    from rich.markup import escape

    sources = ", ".join(f"{c['title']} ({c['passage_id']})" for c in answer["citations"]) or "none"
    verdict = _verdict(answer, golds)
    gold = "" if verdict is None else f"\n  gold: {' / '.join(golds)} ({'right' if verdict else 'wrong'})"
    console.print(f"[bold]{escape(title)}[/bold]\n" + escape(
        f"  answer: {answer['text'] or '(empty)'}{gold}\n  cites: {sources}\n"
        f"  retrievals: {answer['retrieval_count']}, {answer['timings']['total_ms']:.0f} ms"), highlight=False)
    return verdict


def serve_demo(cfg: ServeSections, eval_sets: list[str]) -> dict[str, Any]:
    """Serve `cfg`, send the demo questions (from `eval_sets`) to /v1/generate and one to
    /v1/chat/completions with the openai client, print the answers, delete the app. Returns counts and
    latencies.

    The app is deleted, not Serve shut down: `serve.shutdown()` kills its controller while the
    controller's own graceful_shutdown call is in flight, and Ray prints that call's failure on the
    driver's terminal (whatever log_to_driver says). The controller and proxy go with the Ray instance
    when the demo's process ends."""
    import httpx
    import openai
    from ray import serve
    from rich.console import Console

    from raypipe.serving.app import start_app

    console = Console()
    token = os.environ.get(cfg.serve.auth_token_env, "").strip()
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    questions = demo_questions(eval_sets)
    answers: list[dict[str, Any]] = []
    verdicts: list[bool | None] = []
    url = start_app(cfg)
    try:
        with httpx.Client(base_url=url, headers=headers, timeout=cfg.serve.request_timeout_s) as client:
            health = client.get("/healthz").json()
            for question, gold in questions:
                reply = client.post("/v1/generate", json={"instruction": question})
                reply.raise_for_status()
                answers.append(reply.json())
                verdicts.append(_show(console, f"POST /v1/generate: {question}", answers[-1], gold))
        chat = openai.OpenAI(base_url=f"{url}/v1", api_key=token or "unused", max_retries=0,
                             timeout=cfg.serve.request_timeout_s)
        completion = chat.chat.completions.create(
            model=cfg.serve.model_name, messages=[{"role": "user", "content": questions[0][0]}],
            extra_body={"selfrag": {"mode": "always"}})
        extras = completion.model_extra["selfrag"]
        answers.append({"text": completion.choices[0].message.content, **extras})
        verdicts.append(_show(console, f"openai client, chat.completions (mode=always): {questions[0][0]}",
                              answers[-1], questions[0][1]))
    finally:
        serve.delete(cfg.serve.app_name)
    latencies = [a["timings"]["total_ms"] for a in answers]
    return {"url": url, "health": health["status"], "requests": len(answers),
            "answers_with_citations": sum(bool(a["citations"]) for a in answers),
            "right_of_scored": f"{sum(v is True for v in verdicts)} of {sum(v is not None for v in verdicts)}",
            "retrievals": sum(a["retrieval_count"] for a in answers),
            "mean_latency_ms": round(sum(latencies) / len(latencies), 1)}
