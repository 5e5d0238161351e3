"""Fuzzing the HTTP API from its own OpenAPI document: no input gets a 5xx.

schemathesis reads `/openapi.json` of the in-process app (every method that has controls, bearer auth
on, an in-process backend; no Ray) and sends schema-valid and schema-violating requests with the token,
bounded in examples. Beside "no 5xx" it checks that every status code and response body is one the
document declares, that invalid data is refused and that the token is enforced. It does not check that
every schema-valid request is accepted: some rules span several fields and are not in the schema
(instruction and input together within `serve.max_prompt_chars`, the last chat message from the user,
CRAG's `lower <= upper`); test_serving_contract.py checks each declared limit one field at a time.

What schemathesis does not generate, since it writes strict JSON: NaN, Infinity and -Infinity (which
Python's JSON parser accepts) and lone surrogates (`"\\ud800"`, valid JSON escapes of no character).
`test_non_finite_and_surrogates_in_every_field` sends each of them, as raw JSON text, in every field
the document declares.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from raypipe.jobs.serve import serve_sections
from raypipe.serving.api import build_api
from raypipe.serving.auth import token_digest
from tests.unit.test_serving_api import EchoBackend
from tests.unit.test_serving_contract import AUTH, CFG, TOKEN, Target, _targets

APP = build_api(serve_sections(CFG), EchoBackend(), token_digest(TOKEN))
SCHEMA = schemathesis.openapi.from_asgi("/openapi.json", APP)
SCHEMA.config.generation.update(modes=["positive", "negative"])
# a body over serve.max_body_bytes is refused with 413 before anything else is looked at
_rejection = SCHEMA.config.checks.negative_data_rejection
_rejection.expected_statuses = [*_rejection.expected_statuses, "413"]
SCHEMA.config.checks.positive_data_acceptance.enabled = False  # see the docstring


@pytest.mark.slow
@SCHEMA.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None)
def test_no_request_the_document_describes_gets_a_5xx(case):
    case.call_and_validate(headers=AUTH)


PLACEHOLDER = "@@BAD@@"
#: what each bad value is written as in the JSON text
BAD = {"NaN": "NaN", "Infinity": "Infinity", "-Infinity": "-Infinity", "surrogate": '"\\ud800 x"',
       "surrogate_pair_half": '"x \\udfff"'}


def _refuse_constant(name: str) -> Any:
    raise AssertionError(f"{name} in an answer: not JSON")


@pytest.mark.parametrize("bad", list(BAD))
def test_non_finite_and_surrogates_in_every_field(bad):
    from fastapi.testclient import TestClient

    client = TestClient(APP)
    doc = client.get("/openapi.json").json()
    targets: list[Target] = list(_targets(doc))
    wrong = []
    for target in targets:
        text = json.dumps(target.body(PLACEHOLDER)).replace(json.dumps(PLACEHOLDER), BAD[bad])
        r = client.post(target.route, content=text.encode(), headers={**AUTH, "content-type": "application/json"})
        try:
            error = json.loads(r.content.decode("utf-8"), parse_constant=_refuse_constant)["error"]
        except (AssertionError, KeyError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            wrong.append(f"{target.route} {target.param}: {r.status_code} {exc}")
            continue
        # refused, naming the field (or, for the chat model, not served: 404)
        if r.status_code not in (404, 422) or not error["param"].startswith(target.param):
            wrong.append(f"{target.route} {target.param}: {r.status_code} {error}")
    assert not wrong, "\n".join(wrong)
    assert len(targets) > 50
