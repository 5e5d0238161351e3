"""The API examples a new user copies, run as written against the app `raypipe serve -c
configs/demo.yaml` builds: every python block of README.md, docs/serving.md and docs/cluster.md that
makes an openai client, and every curl line there, goes to `build_api` over the demo's config with an in-process
backend (no Ray, no model). So a renamed route, model id, method or control, or a reply field the
snippet reads and the server no longer sends, fails here instead of in a newcomer's terminal."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from urllib.parse import urlsplit

import openai
import pytest
from fastapi.testclient import TestClient

from raypipe.config import load_config
from raypipe.jobs.serve import serve_sections
from raypipe.serving.api import build_api
from tests.unit.test_serving_api import EchoBackend

ROOT = Path(__file__).resolve().parents[2]
PAGES = (ROOT / "README.md", ROOT / "docs" / "serving.md", ROOT / "docs" / "cluster.md")
_BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
QUESTION = {"id": "heldout_qa-00000", "question": "What kind of work is The Iron Kite in Blue?", "answers": ["opera"]}


def blocks(page: Path, language: str) -> list[str]:
    """The fenced code blocks of `page` in `language`."""
    return [body for lang, body in _BLOCK.findall(page.read_text(encoding="utf-8")) if lang == language]


OPENAI_SNIPPETS = [(page.relative_to(ROOT).as_posix(), code) for page in PAGES
                   for code in blocks(page, "python") if "OpenAI(" in code]
CURL_LINES = [(page.relative_to(ROOT).as_posix(), " ".join(line.strip().rstrip("\\") for line in code.split("\\\n")))
              for page in PAGES for block in blocks(page, "bash")
              for code in re.split(r"\n(?=\S)", block) if code.startswith("curl ")]


@pytest.fixture
def backend() -> EchoBackend:
    return EchoBackend()


@pytest.fixture
def demo_app(backend, monkeypatch, tmp_path) -> TestClient:
    """The demo server's API, and a working folder holding the demo world's held-out QA file (what the
    README's snippet reads), with the openai client pointed at the API whatever URL a snippet gives."""
    cfg = load_config(ROOT / "configs" / "demo.yaml")
    client = TestClient(build_api(serve_sections(cfg), backend, None))
    real = openai.OpenAI
    monkeypatch.setattr(openai, "OpenAI", lambda **kwargs: real(**kwargs, http_client=client, max_retries=0))
    qa = tmp_path / Path(cfg.eval.eval_sets[0])
    qa.parent.mkdir(parents=True)
    qa.write_text(json.dumps(QUESTION) + "\n")
    monkeypatch.chdir(tmp_path)
    return client


def test_the_pages_have_the_examples_checked_here():
    assert {page for page, _ in OPENAI_SNIPPETS} == {"README.md", "docs/serving.md"}
    assert {page for page, _ in CURL_LINES} == {"docs/serving.md", "docs/cluster.md"}


@pytest.mark.parametrize(("page", "code"), OPENAI_SNIPPETS, ids=[page for page, _ in OPENAI_SNIPPETS])
def test_the_openai_snippet_runs_against_the_demo_server(page, code, demo_app, backend, capsys):
    exec(compile(code, page, "exec"), {})
    (method, request, settings, top_k), = backend.seen
    assert (method, settings.mode, top_k) == ("selfrag", "always", 3)
    printed = capsys.readouterr().out
    assert request.instruction[::-1] in printed  # the echo backend's answer reached the snippet's print
    if page == "README.md":  # it asks the world's first held-out question and shows its gold answer
        assert request.instruction == QUESTION["question"] and "opera" in printed and "T0" in printed


@pytest.mark.parametrize(("page", "line"), CURL_LINES, ids=[page for page, _ in CURL_LINES])
def test_the_curl_example_is_a_valid_request(page, line, demo_app, backend):
    argv = shlex.split(line)
    url = next(arg for arg in argv if "/v1/" in arg)
    body = json.loads(argv[argv.index("-d") + 1])
    reply = demo_app.post(urlsplit(url if "//" in url else f"http://{url}").path, json=body)
    assert reply.status_code == 200, reply.text
    method, request, _, _ = backend.seen[-1]
    assert (method, request.instruction) == (body.get("method", "selfrag"), body["instruction"])
    assert reply.json()["text"] == body["instruction"][::-1]
