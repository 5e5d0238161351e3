"""The decoding benchmarks' `--engine`: a full run measures the engine the jobs pick (auto), a quick
run the one that starts in a second (hf), and an explicit choice wins in either mode."""

from __future__ import annotations

import argparse

import pytest

from benchmarks._common import add_engine_option, engine_choice


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    add_engine_option(parser)
    return parser.parse_args(argv)


@pytest.mark.parametrize(("argv", "kind"), [([], "auto"), (["--quick"], "hf"), (["--engine", "vllm"], "vllm"),
                                            (["--quick", "--engine", "vllm"], "vllm"), (["--engine", "hf"], "hf")])
def test_the_engine_follows_the_mode_unless_named(argv, kind):
    assert engine_choice(_parse(argv)) == kind


def test_an_unknown_engine_is_refused_by_name(capsys):
    with pytest.raises(SystemExit):
        _parse(["--engine", "tgi"])
    assert "invalid choice: 'tgi'" in capsys.readouterr().err
