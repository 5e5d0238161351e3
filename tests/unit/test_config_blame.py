"""A config error names where the bad value came from: the file, or the `--set` that gave it."""

from __future__ import annotations

import pytest

from raypipe.config import load_config
from raypipe.errors import ConfigError


@pytest.fixture
def config_file(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("world:\n  instances: 10\n  seed: -5\n")
    return path


@pytest.mark.parametrize("override, loc", [
    ("world.instances=-1", "world.instances: Input should be greater than or equal to 1"),
    ("world.instancez=3", "world.instancez: unknown key"),
    ("world={instances: -1}", "world.instances: Input should be greater than or equal to 1"),
])
def test_a_bad_value_from_set_is_blamed_on_the_set(config_file, override, loc):
    with pytest.raises(ConfigError) as info:
        load_config(config_file, [override])
    assert str(info.value) == f"--set {override}: {loc}"


def test_a_set_that_makes_a_leaf_a_section_is_blamed_on_the_set():
    with pytest.raises(ConfigError) as info:
        load_config(None, ["world.instances.x=1"])
    assert str(info.value).startswith("--set world.instances.x=1: world.instances: ")


def test_a_bad_value_from_the_file_is_still_blamed_on_the_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("world:\n  instances: -1\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, ["world.seed=3"])
    assert str(info.value) == f"{path}: world.instances: Input should be greater than or equal to 1"
