"""The `direct` method's settings: its `methods.direct` section (and a request's controls)."""

from __future__ import annotations

from raypipe.methods.settings import PlainGeneratorSettings


class DirectSettings(PlainGeneratorSettings):
    """No retrieval: the plain generator answers the request as it is (the papers' "no retrieval"
    baselines; served, an OpenAI-compatible endpoint for an instruct LM, e.g. the trajectory teacher's)."""
