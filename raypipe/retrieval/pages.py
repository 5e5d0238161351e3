"""The pages an HTTP web search links to, as text CRAG can refine (CRAG §4.5: "we utilize the URL
links to navigate web pages, transcribe their content"; App. B.3: a page's content "is split with
special tokens like `<p>` and `</p>`").

A search API answers with a snippet per result; with `retrieval.fallback.pages.enabled` each result's
URL is fetched and its text becomes the page's `<p>` paragraphs, one per line (a `text/plain` page:
its blank-line separated blocks), which CRAG's refinement cuts into strips and selects with the
evaluator (raypipe.methods.crag.knowledge), so no page's length is cut by the evaluator's window.
Preferred sources (Wikipedia) are fetched first, so a tight time budget is spent on them.

A page that cannot be had keeps its snippet, and why is counted (`PageFetcher.counts`): `fetched`
(paragraphs read), `cut` (also fetched: the byte limit or the page's time ran out first),
`failed` (transport error, timeout, an error status), `not_text` (neither HTML nor plain text),
`no_paragraphs` (no paragraph text), `over_budget` (not started within the search call's budget),
`not_http` (the result's id is no http(s) URL). Pages are read with a client of their own, which
carries none of the search API's headers: its key is never sent to the pages a search links to.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from html.parser import HTMLParser

import httpx

from raypipe.retrieval.types import Passage
from raypipe.settings.retrieval import PageFetchConfig

logger = logging.getLogger(__name__)

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})


class _Paragraphs(HTMLParser):
    """The text of a page's `<p>` elements, whitespace collapsed; script and style left out. An
    unclosed `<p>` ends where the next one starts."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.paragraphs: list[str] = []
        self._open: list[str] | None = None
        self._hidden = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("script", "style"):
            self._hidden += 1
        elif tag == "p":
            self._end()
            self._open = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style"):
            self._hidden = max(0, self._hidden - 1)
        elif tag == "p":
            self._end()

    def handle_data(self, data: str) -> None:
        if self._open is not None and not self._hidden:
            self._open.append(data)

    def close(self) -> None:
        super().close()
        self._end()

    def _end(self) -> None:
        if self._open is not None:
            text = " ".join("".join(self._open).split())
            if text:
                self.paragraphs.append(text)
        self._open = None


def html_paragraphs(html: str) -> list[str]:
    parser = _Paragraphs()
    parser.feed(html)
    parser.close()
    return parser.paragraphs


def plain_paragraphs(text: str) -> list[str]:
    """Blocks separated by blank lines, each on one line."""
    return [" ".join(block.split()) for block in text.replace("\r\n", "\n").split("\n\n") if block.strip()]


class PageFetcher:
    """Replaces search results' snippets by their pages' paragraphs. `client` and `clock` are
    injectable so tests need neither the network nor real time."""

    def __init__(self, cfg: PageFetchConfig, *, client: httpx.Client | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.cfg, self.clock = cfg, clock
        self._client = client or httpx.Client(timeout=cfg.timeout_s, follow_redirects=True)
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def close(self) -> None:
        self._client.close()

    def expand(self, results: Sequence[Sequence[Passage]]) -> list[list[Passage]]:
        """Each query's results in their order, each fetched page's paragraphs as its text. Pages go
        preferred sources first, then in rank order, `concurrency` at a time, until `budget_s` has
        passed since the call began."""
        out = [list(hits) for hits in results]
        order = sorted(((q, r) for q, hits in enumerate(out) for r in range(len(hits))),
                       key=lambda qr: not any(s in out[qr[0]][qr[1]].id for s in self.cfg.first if s))
        if not order:
            return out
        deadline = self.clock() + self.cfg.budget_s
        with ThreadPoolExecutor(max_workers=min(self.cfg.concurrency, len(order))) as pool:
            texts = list(pool.map(lambda qr: self._page(out[qr[0]][qr[1]].id, deadline), order))
        for (q, r), text in zip(order, texts, strict=True):
            if text is not None:
                out[q][r] = replace(out[q][r], text=text)
        return out

    def _count(self, outcome: str, url: str, why: str = "") -> None:
        with self._lock:
            self.counts[outcome] += 1
        if why:
            logger.info("page %s keeps its snippet (%s): %s", url, outcome, why)

    def _page(self, url: str, deadline: float) -> str | None:
        """The page's paragraphs, one per line, or None (counted) when it keeps its snippet."""
        if not url.startswith(("http://", "https://")):
            self._count("not_http", url, "no http(s) URL")
            return None
        start = self.clock()
        if start >= deadline:
            self._count("over_budget", url, f"the search call's {self.cfg.budget_s} s were spent")
            return None
        until = min(deadline, start + self.cfg.timeout_s)
        try:
            with self._client.stream("GET", url, timeout=until - start) as response:
                if response.is_error:
                    self._count("failed", url, f"HTTP {response.status_code}")
                    return None
                kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
                if kind not in HTML_TYPES and kind != "text/plain":
                    self._count("not_text", url, f"content type {kind or 'missing'}")
                    return None
                body, cut = self._read(response, until)
                text = body.decode(response.encoding or "utf-8", errors="replace")
        except httpx.HTTPError as exc:
            self._count("failed", url, f"{type(exc).__name__}: {exc}")
            return None
        paragraphs = html_paragraphs(text) if kind in HTML_TYPES else plain_paragraphs(text)
        if not paragraphs:
            self._count("no_paragraphs", url, "no paragraph text")
            return None
        self._count("fetched", url)
        if cut:
            self._count("cut", url)
        return "\n".join(paragraphs[:self.cfg.max_paragraphs])

    def _read(self, response: httpx.Response, until: float) -> tuple[bytes, bool]:
        """At most `max_bytes` of the body, and nothing that arrives after `until`; whether the page
        was cut short."""
        chunks, size = [], 0
        for chunk in response.iter_bytes():
            if chunks and self.clock() >= until:
                return b"".join(chunks), True
            chunks.append(chunk)
            size += len(chunk)
            if size > self.cfg.max_bytes:
                return b"".join(chunks)[:self.cfg.max_bytes], True
        return b"".join(chunks), False
