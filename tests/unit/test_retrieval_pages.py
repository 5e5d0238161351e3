"""Fetching the pages an HTTP search links to (CRAG §4.5, App. B.3), against a fake HTTP layer
(httpx.MockTransport): paragraphs transcribed, Wikipedia first, the snippet kept and counted on every
failure, the size and time limits, and the search API's key never sent to a page."""

from __future__ import annotations

import httpx

from raypipe.retrieval.backends import HttpSearchBackend
from raypipe.retrieval.pages import PageFetcher, html_paragraphs
from raypipe.retrieval.types import Passage
from raypipe.settings.retrieval import PageFetchConfig, SearchBackendConfig
from tests.unit.test_retrieval_backends import server  # noqa: F401 (the scripted search API fixture)

PAGE = """<html><head><title>Cy Orr</title><style>p { color: red }</style></head><body>
<div class="nav"><a href="/">Home</a></div>
<p>Cy Orr was born in 1701 in <b>Lund</b>.</p>
<p>Cy Orr worked at the
   Forge &amp; Mill.<script>var p = "<p>not text</p>";</script></p>
<p>   </p>
<p>This page was compiled from local archives.
</body></html>"""


def hit(url: str, snippet: str = "a snippet") -> Passage:
    return Passage(url, "title", snippet, 1.0)


class FakeWeb:
    """Serves `pages` (url -> (status, content type, body)); records the order pages were asked for
    and the headers they were asked with."""

    def __init__(self, pages: dict[str, tuple[int, str, bytes]], clock: list[float] | None = None,
                 step: float = 0.0):
        self.pages, self.asked, self.headers, self.clock, self.step = pages, [], [], clock, step

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.asked.append(str(request.url))
        self.headers.append(dict(request.headers))
        if self.clock is not None:
            self.clock[0] += self.step  # each page takes `step` seconds of the fake clock
        status, kind, body = self.pages.get(str(request.url), (404, "text/html", b"gone"))
        if status == 0:
            raise httpx.ConnectTimeout("timed out", request=request)
        return httpx.Response(status, headers={"content-type": kind}, content=body)


def fetcher(web: FakeWeb, clock: list[float] | None = None, **cfg) -> PageFetcher:
    now = clock if clock is not None else [0.0]
    return PageFetcher(PageFetchConfig(enabled=True, concurrency=1, **cfg),
                       client=httpx.Client(transport=httpx.MockTransport(web)), clock=lambda: now[0])


def test_html_paragraphs_are_the_p_elements_text_without_script_or_style():
    assert html_paragraphs(PAGE) == ["Cy Orr was born in 1701 in Lund.", "Cy Orr worked at the Forge & Mill.",
                                     "This page was compiled from local archives."]


def test_a_fetched_page_replaces_its_snippet_one_paragraph_per_line_and_failures_keep_the_snippet():
    web = FakeWeb({"https://example.org/cy": (200, "text/html; charset=utf-8", PAGE.encode()),
                   "https://example.org/plain": (200, "text/plain", b"First  block\nstill first.\n\nSecond."),
                   "https://example.org/pdf": (200, "application/pdf", b"%PDF"),
                   "https://example.org/empty": (200, "text/html", b"<html><div>menu only</div></html>"),
                   "https://example.org/slow": (0, "", b"")})
    pages = fetcher(web)
    urls = ["https://example.org/cy", "https://example.org/plain", "https://example.org/pdf",
            "https://example.org/empty", "https://example.org/slow", "https://example.org/missing", "w0000001"]
    [out] = pages.expand([[hit(u, f"snippet of {u}") for u in urls]])
    assert [p.id for p in out] == urls  # rank order kept
    assert out[0].text == ("Cy Orr was born in 1701 in Lund.\nCy Orr worked at the Forge & Mill.\n"
                           "This page was compiled from local archives.")
    assert out[0].title == "title" and out[0].score == 1.0
    assert out[1].text == "First block still first.\nSecond."
    assert [p.text for p in out[2:]] == [f"snippet of {u}" for u in urls[2:]]
    assert pages.counts == {"fetched": 2, "not_text": 1, "no_paragraphs": 1, "failed": 2, "not_http": 1}


def test_wikipedia_pages_are_fetched_first_and_the_budget_leaves_the_rest_their_snippets():
    clock = [0.0]
    urls = ["https://a.example/1", "https://en.wikipedia.org/wiki/Cy_Orr", "https://b.example/2",
            "https://en.wikipedia.org/wiki/Lund"]
    web = FakeWeb({u: (200, "text/html", f"<p>page {u}</p>".encode()) for u in urls}, clock, step=4.0)
    pages = fetcher(web, clock, budget_s=10.0)
    [first, second] = pages.expand([[hit(urls[0]), hit(urls[1])], [hit(urls[2]), hit(urls[3])]])
    # Wikipedia first over the whole call, then rank order; three pages fit in 10 s at 4 s each
    assert web.asked == [urls[1], urls[3], urls[0]]
    assert [p.text for p in first] == [f"page {urls[0]}", f"page {urls[1]}"]
    assert [p.text for p in second] == ["a snippet", f"page {urls[3]}"]
    assert pages.counts == {"fetched": 3, "over_budget": 1}


def test_a_page_over_the_byte_limit_is_cut_to_its_first_paragraphs():
    body = "".join(f"<p>paragraph {i}.</p>" for i in range(100)).encode()
    web = FakeWeb({"https://example.org/long": (200, "text/html", body)})
    pages = fetcher(web, max_bytes=60, max_paragraphs=30)
    [[page]] = pages.expand([[hit("https://example.org/long")]])
    assert page.text == "paragraph 0.\nparagraph 1.\nparagraph 2."  # 60 bytes hold three and the start of a fourth
    assert pages.counts == {"fetched": 1, "cut": 1}
    pages = fetcher(web, max_paragraphs=2)
    [[page]] = pages.expand([[hit("https://example.org/long")]])
    assert page.text == "paragraph 0.\nparagraph 1."


def test_the_backend_fetches_pages_only_when_asked_and_never_sends_its_key_to_them(server, monkeypatch):  # noqa: F811
    url, script = server
    script.actions = [("json", lambda q, k: {"results": [
        {"url": "https://en.wikipedia.org/wiki/Cy", "title": "Cy", "snippet": "Cy worked..."},
        {"url": "https://example.org/other", "title": "Other", "snippet": "other snippet"}]})]
    monkeypatch.setenv("SEARCH_KEY", "sk-secret")
    web = FakeWeb({"https://en.wikipedia.org/wiki/Cy": (200, "text/html", PAGE.encode())})
    client = httpx.Client(transport=httpx.MockTransport(web))
    cfg = SearchBackendConfig(kind="http", url=url, count_param="n", api_key_env="SEARCH_KEY")
    off = HttpSearchBackend(cfg, page_client=client)
    assert [p.text for p in off.search(["cy"], 2)[0]] == ["Cy worked...", "other snippet"]
    assert web.asked == [] and off.page_counts == {}
    on = HttpSearchBackend(cfg.model_copy(update={"pages": PageFetchConfig(enabled=True)}), page_client=client)
    [found] = on.search(["cy"], 2)
    assert found[0].text.split("\n")[1] == "Cy Orr worked at the Forge & Mill."
    assert found[1].text == "other snippet"  # 404: the snippet stands
    assert on.page_counts == {"fetched": 1, "failed": 1}
    assert script.requests[-1]["headers"]["Authorization"] == "Bearer sk-secret"
    assert all("authorization" not in h for h in web.headers)
