"""The HTTP ingress deployment, in a module of its own so that its replica imports FastAPI and the API
(2 s here) and not torch and transformers (8-9 s with the deployments module), which only the
model-holding deployments and the Decoder's tokenizer need: an app deploys, and its ingress is
replaced, that much sooner."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import FastAPI
from ray import serve
from ray.serve.exceptions import BackPressureError, DeploymentUnavailableError
from ray.serve.handle import DeploymentHandle

from raypipe.methods.base import MethodRequest
from raypipe.methods.settings import MethodSettings
from raypipe.serving.api import DecodeTimeout, Overloaded, build_api
from raypipe.serving.sections import ServeSections


class DecoderBackend:
    """The ingress's view of the Decoder: Serve's back-pressure becomes `Overloaded` (503) and a
    request over its deadline `DecodeTimeout` (504), cancelled on the way out."""

    def __init__(self, decoder: DeploymentHandle, timeout_s: float):
        self.decoder, self.timeout_s = decoder, timeout_s

    async def decode(self, method: str, request: MethodRequest, settings: MethodSettings) -> dict[str, Any]:
        response = self.decoder.decode.remote(method, request, settings)
        try:
            return await asyncio.wait_for(response, self.timeout_s)
        except (BackPressureError, DeploymentUnavailableError) as exc:
            raise Overloaded(str(exc)) from exc
        except TimeoutError as exc:
            response.cancel()
            raise DecodeTimeout(f"no answer within serve.request_timeout_s={self.timeout_s} s") from exc


@serve.deployment
@serve.ingress()
class Ingress:
    """The HTTP API (api.py) of the app; the FastAPI app is built in the replica from `cfg`."""

    def __init__(self, decoder: DeploymentHandle, cfg: ServeSections, auth_digest: str | None):
        self.backend = DecoderBackend(decoder, cfg.serve.request_timeout_s)
        self.cfg, self.auth_digest = cfg, auth_digest

    def __serve_build_asgi_app__(self) -> FastAPI:
        return build_api(self.cfg, self.backend, self.auth_digest)
