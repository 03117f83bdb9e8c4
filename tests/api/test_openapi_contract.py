"""/openapi.json describes every route the app serves, with answers and error envelopes
precise enough for tests/fuzz to catch a mismatch: checked here in process, without a fuzzer."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from sift_server import errors
from sift_server.api.openapi import work_paths
from sift_server.core import endpoints
from sift_server.core.envelopes import native_envelope, openai_envelope
from tests.api.inprocess import Client
from tests.fixtures.tiny_embedder import TINY_EMBEDDER

# Never answered to a client that reads it (499: it went away) or a server error the
# fuzzer must never see (500).
UNDOCUMENTED = {499, 500}
DOMAIN_ERRORS = [
    cls
    for cls in vars(errors).values()
    if isinstance(cls, type)
    and issubclass(cls, errors.SiftError)
    and cls.status not in UNDOCUMENTED
    # Answered to a method no operation has (a GET of a work path): nothing to document it on.
    and cls is not errors.MethodNotAllowed
]


def resolved(spec: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with the document's components, for jsonschema to follow its $refs."""
    return {**schema, "components": spec["components"]}


async def test_every_route_the_app_serves_is_documented(app_client: Client) -> None:
    client, _ = app_client
    spec = (await client.get("/openapi.json")).json()
    served = {e.template for e in endpoints.ENDPOINTS}
    served |= {"/v1/models", "/v1/models/{model}", "/healthz", "/livez", "/readyz", "/metrics"}
    assert served <= set(spec["paths"])
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            assert "default" not in operation["responses"], (method, path)
            assert "422" not in operation["responses"], (method, path)  # FastAPI's, never answered here


@pytest.mark.parametrize("error", DOMAIN_ERRORS, ids=lambda cls: cls.__name__)
def test_every_domain_error_is_a_documented_status_and_envelope(error: type[errors.SiftError]) -> None:
    paths, components = work_paths()
    spec = {"components": {"schemas": components}}
    for endpoint in endpoints.ENDPOINTS:
        responses = paths[endpoint.template]["post"]["responses"]
        assert str(error.status) in responses, (endpoint.name, error.__name__)
        schema = responses[str(error.status)]["content"]["application/json"]["schema"]
        render = openai_envelope if endpoint.family == "openai" else native_envelope
        status, body, headers = render(error("a message"))
        assert status == error.status
        jsonschema.validate(body, resolved(spec, schema))
        assert "X-SIE-Error-Code" in headers


GENERATION = ("generate", "chat", "completions", "responses")


async def test_the_documented_examples_are_answered_as_documented(app_client: Client) -> None:
    client, _ = app_client
    spec = (await client.get("/openapi.json")).json()
    for endpoint in endpoints.ENDPOINTS:
        operation = spec["paths"][endpoint.template]["post"]
        if endpoint.media_type != "application/json":
            continue  # a multipart form (transcriptions) has no JSON example: tests/api/test_transcription_route.py
        content = operation["requestBody"]["content"]["application/json"]
        if endpoint.name in GENERATION:
            # No example: the fuzz suite's catalogs serve no generation model (tests/generation does).
            assert "example" not in content
            continue
        body = dict(content["example"])
        if "model" in body:
            body["model"] = TINY_EMBEDDER
        path = endpoint.path + TINY_EMBEDDER if endpoint.model_in_path else endpoint.path
        answer = await client.post(path, json=body, headers={"Accept": "application/json"})
        assert str(answer.status_code) in operation["responses"], (endpoint.name, answer.text)
        schema = operation["responses"][str(answer.status_code)]["content"]["application/json"]["schema"]
        jsonschema.validate(answer.json(), resolved(spec, schema))
        if endpoint.name in ("encode", "embeddings"):  # the tiny embedder does these, not score or extract
            assert answer.status_code == 200, answer.text


async def test_a_closed_answer_schema_refuses_an_extra_field(app_client: Client) -> None:
    client, _ = app_client
    spec = (await client.get("/openapi.json")).json()
    answer = (
        await client.post(
            f"/v1/encode/{TINY_EMBEDDER}", json={"items": [{"text": "x"}]}, headers={"Accept": "application/json"}
        )
    ).json()
    schema = resolved(
        spec, spec["paths"]["/v1/encode/{model}"]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
    )
    jsonschema.validate(answer, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**answer, "surprise": 1}, schema)
