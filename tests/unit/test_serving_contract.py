"""The OpenAPI document is the contract: what `/openapi.json` declares is what the server does.

Read from the served document, not from the code: every limit a request body declares (`maximum`,
`minimum`, `maxLength`, `minLength`, `pattern`, `enum`, `minItems`) is accepted at the boundary and
refused one step past it, with the error naming that field; every error code an operation declares
occurs, with a body of the declared shape; the bearer scheme is declared exactly when auth is on. The
server serves every method that has controls, so a new method's controls are held to the same rules.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import jsonschema
import pytest
from fastapi.testclient import TestClient

from raypipe.config import RaypipeConfig, ServeConfig
from raypipe.jobs.serve import serve_sections
from raypipe.serving.api import DecodeTimeout, Overloaded, build_api
from raypipe.serving.auth import token_digest
from raypipe.serving.schemas import CONTROLS
from raypipe.settings.retrieval import RetrievalConfig
from tests.unit.test_serving_api import EchoBackend

TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
METHODS = list(CONTROLS)
SERVE = ServeConfig(methods=METHODS, max_prompt_chars=40, max_top_k=5, max_beam_width=3, max_depth_limit=4,
                    max_tokens_limit=512, max_body_bytes=2048)
CFG = RaypipeConfig(serve=SERVE, retrieval=RetrievalConfig(top_k=3))


def _client(backend: Any = None, auth: bool = True) -> TestClient:
    return TestClient(build_api(serve_sections(CFG), backend or EchoBackend(), token_digest(TOKEN) if auth else None))


@pytest.fixture(scope="module")
def client() -> TestClient:
    return _client()


@pytest.fixture(scope="module")
def doc(client) -> dict[str, Any]:
    return client.get("/openapi.json").json()


def _resolve(doc: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = doc["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def _value_schema(prop: dict[str, Any]) -> dict[str, Any]:
    """The schema of a property's values: the non-null branch of an optional one."""
    branches = [b for b in prop.get("anyOf", []) if b.get("type") != "null"]
    return branches[0] if len(branches) == 1 else prop


@dataclass
class Target:
    """One declared property and how to send a value for it."""

    route: str
    method: str
    #: where the value goes in the body, and the `param` a 422 about it must give
    path: tuple[str | int, ...]
    schema: dict[str, Any]

    @property
    def param(self) -> str:
        return ".".join(map(str, self.path))

    @property
    def containers(self) -> set[str]:
        """The params of the objects holding this field: a rule over several fields names one of them."""
        return {"body", *(".".join(map(str, self.path[:i])) for i in range(1, len(self.path)))}

    def body(self, value: Any) -> dict[str, Any]:
        if self.route == "/v1/generate":
            body: dict[str, Any] = {"instruction": "q", "method": self.method}
        else:
            body = {"model": SERVE.model_name, "messages": [{"role": "user", "content": "q"}], "method": self.method}
        node = body
        for key in self.path[:-1]:
            if isinstance(key, str) and key not in node:
                node[key] = {}
            node = node[key]
        node[self.path[-1]] = value
        return body


def _targets(doc: dict[str, Any]) -> Iterator[Target]:
    """Every property of the request bodies the document declares, per served method."""
    generate = doc["paths"]["/v1/generate"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    for variant in generate.get("oneOf", [generate]):
        body = _resolve(doc, variant)
        method = body["properties"]["method"].get("const") or body["properties"]["method"]["default"]
        for name, prop in body["properties"].items():
            yield Target("/v1/generate", method, (name,), _value_schema(prop))
    chat = _resolve(doc, doc["paths"]["/v1/chat/completions"]["post"]["requestBody"]["content"]["application/json"]
                    ["schema"])
    for name, prop in chat["properties"].items():
        if name in METHODS:  # a method's controls
            for field, control in _resolve(doc, prop)["properties"].items():
                yield Target("/v1/chat/completions", name, (name, field), _value_schema(control))
        elif name == "messages":
            yield Target("/v1/chat/completions", SERVE.default_method, (name,), prop)
            for field, part in _resolve(doc, prop["items"])["properties"].items():
                yield Target("/v1/chat/completions", SERVE.default_method, (name, 0, field), _value_schema(part))
        else:
            yield Target("/v1/chat/completions", SERVE.default_method, (name,), _value_schema(prop))


def _step(schema: dict[str, Any], bound: float, up: bool) -> float:
    if schema.get("type") == "integer":
        return int(bound) + (1 if up else -1)
    return math.nextafter(bound, math.inf if up else -math.inf)


def _cases(schema: dict[str, Any]) -> Iterator[tuple[str, Any, Any]]:
    """(what, a value at the declared boundary, a value one step past it) for each limit declared."""
    number = schema.get("type") in ("integer", "number")
    cast = int if schema.get("type") == "integer" else float
    if number and "maximum" in schema:
        yield "maximum", cast(schema["maximum"]), _step(schema, schema["maximum"], up=True)
    if number and "minimum" in schema:
        yield "minimum", cast(schema["minimum"]), _step(schema, schema["minimum"], up=False)
    if number and "exclusiveMaximum" in schema:
        yield "exclusiveMaximum", _step(schema, schema["exclusiveMaximum"], up=False), cast(schema["exclusiveMaximum"])
    if number and "exclusiveMinimum" in schema:
        yield "exclusiveMinimum", _step(schema, schema["exclusiveMinimum"], up=True), cast(schema["exclusiveMinimum"])
    if "maxLength" in schema:
        yield "maxLength", "q" * schema["maxLength"], "q" * (schema["maxLength"] + 1)
    if schema.get("minLength", 0) > 0:
        yield "minLength", "q" * schema["minLength"], "q" * (schema["minLength"] - 1)
    if "pattern" in schema:
        blank = " " * max(1, schema.get("minLength", 0))
        assert not re.search(schema["pattern"], blank), "no counter-example for this pattern"
        yield "pattern", "q", blank
    if "enum" in schema:
        for member in schema["enum"]:
            yield "enum", member, "not-a-member"
    if "enum" in schema.get("items", {}):
        for member in schema["items"]["enum"]:
            yield "items.enum", [member], [""]
    if schema.get("minItems", 0) > 0:
        yield "minItems", None, []


def _named(response: Any) -> str | None:
    return response.json()["error"]["param"] if response.status_code >= 400 else None


def test_every_declared_limit_holds_at_exactly_the_boundary(client, doc):
    checked, wrong = 0, []
    for target in _targets(doc):
        for what, at, past in _cases(target.schema):
            checked += 1
            if at is not None:
                ok = client.post(target.route, json=target.body(at), headers=AUTH)
                # accepted: answered, or refused only by a rule over several fields (CRAG's lower <=
                # upper, the last chat message from the user), which names the object holding them
                if not (ok.status_code == 200 or (ok.status_code == 422 and _named(ok) in target.containers)):
                    wrong.append(f"{target.route} {target.param} {what}={at!r}: {ok.status_code} {ok.text[:200]}")
            bad = client.post(target.route, json=target.body(past), headers=AUTH)
            if bad.status_code not in (404, 422) or not (_named(bad) or "").startswith(target.param):
                wrong.append(f"{target.route} {target.param} {what} past={past!r}: {bad.status_code} {bad.text[:200]}")
    assert not wrong, "\n".join(wrong)
    assert checked > 100  # every method's controls were read from the document


def test_the_document_declares_the_servers_limits(doc):
    """The limits are the `serve` settings, not pydantic's defaults."""
    limits = {(t.route, t.param, t.method): t.schema for t in _targets(doc)}
    for method in METHODS:
        assert limits[("/v1/generate", "top_k", method)]["maximum"] == SERVE.max_top_k
        assert limits[("/v1/chat/completions", f"{method}.top_k", method)]["maximum"] == SERVE.max_top_k
    assert limits[("/v1/generate", "instruction", "selfrag")]["maxLength"] == SERVE.max_prompt_chars
    assert limits[("/v1/generate", "beam_width", "selfrag")]["maximum"] == SERVE.max_beam_width
    assert limits[("/v1/chat/completions", "max_tokens", "selfrag")]["maximum"] == SERVE.max_tokens_limit
    assert limits[("/v1/chat/completions", "model", "selfrag")]["enum"] == [SERVE.model_name]
    assert "" not in limits[("/v1/generate", "forbid", "selfrag")]["items"]["enum"]


def _good_body(route: str) -> dict[str, Any]:
    return ({"instruction": "q"} if route == "/v1/generate" else
            {"model": SERVE.model_name, "messages": [{"role": "user", "content": "q"}]})


def _provoke(code: int, route: str, http: str) -> Any:
    """A request that should get `code` on `route`."""
    good = _good_body(route)
    client = _client({503: EchoBackend(fail=Overloaded("full")), 504: EchoBackend(fail=DecodeTimeout("slow"))}.get(code))
    headers = {} if code == 401 else AUTH
    if http == "get":
        return client.get(route, headers=headers)
    body: bytes = {
        400: b'{"instruction": "caf\xe9"}',
        404: json.dumps({**good, "model": "not-served"}).encode(),
        413: b" " * (SERVE.max_body_bytes + 1),
        422: b"{}",
    }.get(code, json.dumps(good).encode())
    return client.post(route, content=body, headers={**headers, "content-type": "application/json"})


def test_every_declared_error_code_occurs_with_the_declared_body(doc):
    produced = 0
    for route, operations in doc["paths"].items():
        for http, operation in operations.items():
            for code, declared in operation["responses"].items():
                r = _provoke(int(code) if code != "200" else 200, route, http)
                assert r.status_code == int(code), (route, code, r.text)
                schema = declared["content"]["application/json"]["schema"]
                jsonschema.validate(r.json(), {**schema, "components": doc["components"]})
                produced += 1
    assert produced >= 18  # 200 everywhere, and 400/401/413/422/503/504 (+404 on chat) on the POST routes


def test_the_post_routes_declare_every_error_they_answer(doc):
    declared = {route: set(doc["paths"][route]["post"]["responses"]) for route in ("/v1/generate", "/v1/chat/completions")}
    assert declared["/v1/generate"] == {"200", "400", "401", "413", "422", "503", "504"}
    assert declared["/v1/chat/completions"] == declared["/v1/generate"] | {"404"}


@pytest.mark.parametrize("auth", [True, False])
def test_the_security_scheme_is_declared_exactly_when_auth_is_on(auth):
    client = _client(auth=auth)
    doc = client.get("/openapi.json").json()
    schemes = doc.get("components", {}).get("securitySchemes", {})
    for route, operations in doc["paths"].items():
        for http, operation in operations.items():
            secured = bool(operation.get("security"))
            send: Callable[..., Any] = getattr(client, http)
            kwargs = {} if http == "get" else {"json": _good_body(route)}
            without = send(route, **kwargs)
            assert (without.status_code == 401) == secured == ("401" in operation["responses"]), (route, auth)
            if secured:
                (name,) = operation["security"][0]
                assert schemes[name] == {"type": "http", "scheme": "bearer"}
                assert without.headers["WWW-Authenticate"] == "Bearer"
                assert send(route, headers=AUTH, **kwargs).status_code == 200
    assert bool(schemes) == auth
    secured_routes = {r for r, ops in doc["paths"].items() for op in ops.values() if op.get("security")}
    assert secured_routes == ({"/v1/models", "/v1/generate", "/v1/chat/completions"} if auth else set())
