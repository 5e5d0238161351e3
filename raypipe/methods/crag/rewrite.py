"""Query rewriting for web search (CRAG §4.5, App. A Table 7): the input becomes at most three
keywords, "to mimic the daily usage of search engine".

The paper prompts ChatGPT with the few-shot prompt of Table 7. The rewriter is pluggable:
- `lm`: the local instruct LM (SmolLM2-135M-Instruct by default) with the same prompt in its chat
  template, all of a batch's questions in one engine call;
- `openai`: any OpenAI-compatible chat-completions server (ChatGPT as in the paper, vLLM, Ray Serve);
- `none`: the raw question (Table 3 "w/o rewriting").
Replies are parsed leniently (`parse_keywords`); a reply with no usable keyword, or a rewriter that
fails (an endpoint, or the local LM raising), falls back to the raw question for that request alone,
and the rewrite's trace says so (`how: no_keyword` / `failed`); eval counts both (`rewrites`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from raypipe.clients.openai_chat import OpenAIChat, RequestFailed
from raypipe.errors import ConfigError
from raypipe.inference.engines.base import Engine, GenerationParams
from raypipe.prompts import chat_prompt
from raypipe.settings.crag_tools import RewriterConfig

logger = logging.getLogger(__name__)

#: App. A, Table 7, verbatim except straight apostrophes
REWRITE_PROMPT = """Extract at most three keywords separated by comma from the following dialogues and questions as queries for the web search, including topic background within dialogues and main intent within questions.

question: What is Henry Feilden's occupation?
query: Henry Feilden, occupation

question: In what city was Billy Carlson born?
query: city, Billy Carlson, born

question: What is the religion of John Gwynn?
query: religion of John Gwynn

question: What sport does Kiribati men's national basketball team play?
query: sport, Kiribati men's national basketball team play

question: {question}
query:"""

MAX_KEYWORDS = 3
#: tokens the LM may write for a keyword query
REWRITE_TOKENS = 32
#: newline runs whose token ends a local LM's reply: Table 7 asks for one line, and only the first
#: line is parsed, so what a small LM writes after it (another question, an answer) is not generated
_LINE_ENDS = ("\n", "\n\n", "\n\n\n")


@dataclass(frozen=True)
class Rewrite:
    """A web query and how it was made: `rewritten` (keywords parsed from a reply), `raw` (the
    question itself, rewriter `none`), or the question itself because the rewriter fell back:
    `no_keyword` (its reply held no usable keyword) or `failed` (the rewriter failed)."""

    query: str
    how: str
    reply: str | None = None
    error: str | None = None


def rewrite_prompt(question: str) -> str:
    return REWRITE_PROMPT.format(question=" ".join(question.split()))


def parse_keywords(reply: str) -> list[str]:
    """At most three keywords from a reply: its first non-empty line, without a leading `query:`,
    quotes or a trailing period, split at commas (a reply without commas is one keyword phrase)."""
    for line in reply.splitlines():
        line = line.strip()
        if line:
            break
    else:
        return []
    line = re.sub(r"^(?:query|keywords?)\s*:\s*", "", line, flags=re.IGNORECASE)
    keywords = []
    for part in line.split(","):
        part = part.strip().strip("\"'`*.").strip()
        if part and part not in keywords:
            keywords.append(part)
    return keywords[:MAX_KEYWORDS]


def _words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


def _from_reply(question: str, reply: str) -> Rewrite:
    """A reply none of whose keywords shares a word with the question is not a query for it (our
    guard: a small LM tends to answer one of the prompt's examples instead, e.g. "The religion of
    John Gwynn is Christianity"); the raw question is searched then (`no_keyword`)."""
    keywords = parse_keywords(reply)
    if not any(_words(k) & _words(question) for k in keywords):
        keywords = []
    if not keywords:
        return Rewrite(question, "no_keyword", reply=reply)
    return Rewrite(", ".join(keywords), "rewritten", reply=reply)


class Rewriter(Protocol):
    def rewrite(self, questions: Sequence[str]) -> list[Rewrite]: ...


class RawRewriter:
    """No rewriting: the question is the query."""

    def rewrite(self, questions: Sequence[str]) -> list[Rewrite]:
        return [Rewrite(q, "raw") for q in questions]


class LMRewriter:
    """Table 7's prompt as the user turn of the LM's chat template; one greedy engine call. Every
    prompt begins with the same few-shot text, so the call asks the engine to keep its KV cache
    between calls (`GenerationParams.reuse_prefix`): it is run once per engine, not once per batch.

    An engine that raises (a served LM's replica gone, a prompt it refuses) fails no request: the
    batch is retried question by question, and each question whose call still raises is searched
    raw (`how: failed`, the error in the trace), as the OpenAI rewriter does per request. Any
    exception counts: the engine may be local or a proxy of a remote deployment, each with its own
    errors, and a rewrite is an optimisation of the search, never a reason to answer nothing."""

    def __init__(self, engine: Engine):
        self.engine = engine

    def prompt(self, question: str) -> str:
        return chat_prompt(self.engine.tokenizer, rewrite_prompt(question))

    def rewrite(self, questions: Sequence[str]) -> list[Rewrite]:
        if not questions:
            return []
        params = GenerationParams(max_new_tokens=REWRITE_TOKENS, return_probs=False,
                                  stop_token_ids=line_end_ids(self.engine.tokenizer), reuse_prefix=True)
        try:
            generations = self.engine.generate([self.prompt(q) for q in questions], params)
        except Exception as exc:
            if len(questions) == 1:
                logger.warning("query rewriter failed: %s; searching with the raw question", exc)
                return [Rewrite(questions[0], "failed", error=f"{type(exc).__name__}: {exc}")]
            return [rw for q in questions for rw in self.rewrite([q])]
        return [_from_reply(q, g.text) for q, g in zip(questions, generations, strict=True)]


def line_end_ids(tokenizer: Any) -> tuple[int, ...]:
    """The ids of the tokens that are a run of newlines alone (a byte-level BPE has them; a
    tokenizer that spells a newline in several tokens gets no stop, and its reply runs to its cap)."""
    ids = (tokenizer.encode(text, add_special_tokens=False) for text in _LINE_ENDS)
    return tuple(dict.fromkeys(one[0] for one in ids if len(one) == 1))


class OpenAIRewriter:
    """Table 7's prompt to an OpenAI-compatible `/chat/completions` (temperature 0) through the shared
    chat client, a few requests in flight, each retried by the openai library; a failed one (no
    reply, an error status, a body that is no chat completion) falls back to the raw question. Built
    by the tools layer (`raypipe.tools`, the `rewriter` tool) from `crag.rewriter`."""

    def __init__(self, cfg: RewriterConfig, *, http_client: httpx.Client | None = None):
        if not cfg.url:
            raise ConfigError("crag.rewriter.url is not set: the openai query rewriter needs an OpenAI-compatible "
                              "server root (.../v1)")
        self.chat = OpenAIChat(base_url=cfg.url, model=cfg.model, api_key_env=cfg.api_key_env,
                               settings="crag.rewriter", timeout_s=cfg.timeout_s, retries=2,
                               concurrency=cfg.concurrency, temperature=0, max_tokens=REWRITE_TOKENS,
                               http_client=http_client)

    def _one(self, question: str) -> Rewrite:
        try:
            return self.chat.ask([{"role": "user", "content": rewrite_prompt(question)}],
                                 lambda reply: _from_reply(question, reply))
        except RequestFailed as exc:
            logger.warning("query rewriter %s failed: %s; searching with the raw question", self.chat.url, exc)
            return Rewrite(question, "failed", error=str(exc))

    def rewrite(self, questions: Sequence[str]) -> list[Rewrite]:
        return self.chat.fan_out(self._one, questions)
