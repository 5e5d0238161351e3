"""The app builder's checks and config plumbing, without starting Ray."""

from __future__ import annotations

from pathlib import Path

import pytest

from raypipe.config import MethodsConfig, RaypipeConfig, ServeConfig, load_config
from raypipe.errors import ConfigError
from raypipe.jobs.serve import app_from_config, serve_sections
from raypipe.methods.selfrag.settings import SelfRAGSettings
from raypipe.serving.app import autoscaling_config, build_app, resolve_paths


def test_relative_model_and_index_paths_become_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = resolve_paths(serve_sections(RaypipeConfig(serve=ServeConfig(generator="models/gen"))))
    assert cfg.serve.generator == str(tmp_path / "models" / "gen")
    assert Path(cfg.retrieval.index.out_dir).is_absolute()
    assert cfg.retrieval.index.out_dir.endswith("runs/demo/index")
    assert cfg.retrieval.encoder.path is None  # the packaged MiniLM: no path to resolve


def test_autoscaling_config_carries_the_serve_settings():
    serve = ServeConfig(min_replicas=2, max_replicas=5, target_ongoing_requests=3.0, upscale_delay_s=1.5,
                        downscale_delay_s=7.0, look_back_period_s=4.0, metrics_interval_s=0.5)
    assert autoscaling_config(serve) == {"min_replicas": 2, "max_replicas": 5, "target_ongoing_requests": 3.0,
                                         "upscale_delay_s": 1.5, "downscale_delay_s": 7.0,
                                         "look_back_period_s": 4.0, "metrics_interval_s": 0.5}


def test_builder_args_are_checked():
    with pytest.raises(ConfigError, match="overides"):
        app_from_config({"config": None, "overides": ["serve.port=1"]})
    with pytest.raises(ConfigError, match="config file not found"):
        app_from_config({"config": "no/such/file.yaml"})


def test_defaults_beyond_the_request_limits_refuse_to_build():
    cfg = RaypipeConfig(serve=ServeConfig(max_beam_width=2), methods=MethodsConfig(selfrag=SelfRAGSettings(beam_width=4)))
    with pytest.raises(ConfigError, match="methods.selfrag.beam_width=4 > serve.max_beam_width=2"):
        build_app(serve_sections(cfg))


def test_the_old_import_path_of_the_app_builder_names_the_new_one():
    import importlib

    from raypipe.serving import app

    with pytest.raises(AttributeError, match=r"moved to raypipe\.jobs\.serve:app_from_config"):
        app.app_from_config  # noqa: B018 - the attribute access is what Serve does
    module, _, attr = app.MOVED["app_from_config"].partition(":")
    assert getattr(importlib.import_module(module), attr) is app_from_config


@pytest.mark.parametrize("url", [None, "http://lm.local/v1"])
def test_the_query_rewriter_deployment_is_bound_only_where_its_endpoint_is_set(monkeypatch, url):
    import raypipe.retrieval.cross_encoder as cross_encoder
    from raypipe.serving import app as app_module

    monkeypatch.setattr(app_module, "_cluster_has_gpus", lambda: False)
    monkeypatch.setattr(cross_encoder, "require_evaluator", lambda path: None)
    sets = ["serve.methods=[crag]", "serve.default_method=crag"] + ([f"crag.rewriter.url={url}"] if url else [])
    app = app_module.build_app(serve_sections(load_config(None, sets)))
    # Serve's bound graph: Ingress(decoder, ...) -> Decoder(handles, ...) -> one deployment per tool
    decoder = app._bound_deployment.init_args[0]
    handles = decoder._bound_deployment.init_args[0]
    bound = {name: handle._bound_deployment.name for name, handle in handles.items()}
    assert bound.get("rewriter") == ("QueryRewriter" if url else None)
    assert bound["web"] == "WebSearch" and bound["lm"] == "InstructLM"
