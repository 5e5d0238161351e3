"""The CLI: every job is a command, shortcuts map to config keys, errors exit 1 with a message."""

from __future__ import annotations

import json

import pytest

from raypipe import cli


def test_help_lists_every_job(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    for name in ("demo", "data", "models", "index", "label", "train", "augment", "eval", "serve"):
        assert f"    {name}" in out


def test_every_command_target_resolves():
    for cmd in cli.COMMANDS.values():
        assert callable(cli._resolve(cmd.target))


def test_shortcuts_become_overrides():
    parser = cli._build_parser()
    args = parser.parse_args(["data", "synth", "--instances", "7", "--seed", "3", "--out", "/tmp/w",
                              "--set", "world.heldout_fraction=0.2"])
    cfg = cli.config_from_args(args)
    assert (cfg.world.instances, cfg.world.seed, cfg.world.out_dir) == (7, 3, "/tmp/w")
    assert cfg.world.heldout_fraction == 0.2


def test_synth_runs_and_prints_json(tmp_path, capsys):
    rc = cli.main(["data", "synth", "--instances", "30", "--out", str(tmp_path / "w"), "--json",
                   "--set", "world.eval_instances=3"])
    assert rc == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["instances"] == 30
    assert (tmp_path / "w" / "_SUCCESS").exists()


def test_config_error_exits_1_naming_the_key(capsys):
    rc = cli.main(["data", "synth", "--set", "world.instnaces=3"])
    assert rc == 1
    assert "world.instnaces: unknown key" in capsys.readouterr().err
