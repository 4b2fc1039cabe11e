"""Model registry: which version is served, background load, swap between batches, and a bad
version that must not stop serving."""

import shutil
import time

import pytest

from precast.errors import ConfigError, PrecastError
from workers.model.inference import ModelSession
from workers.model.registry import ModelRegistry, semver_key, wanted_version
from workers.settings import DEFAULT_MODEL_DIR

MODELS = DEFAULT_MODEL_DIR.parent


def load(path):
    return ModelSession(path, provider="cpu", warmup_rows=4)


def poll_until_swap(reg, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if reg.poll():
            return reg.current.version
        time.sleep(0.01)
    return None


@pytest.fixture
def registry_dir(tmp_path):
    for v in ("1.0.0", "1.1.0"):
        shutil.copytree(MODELS / v, tmp_path / v)
    return tmp_path


def test_semver_order_including_pre_releases():
    versions = ["1.10.0", "1.9.0", "1.0.0-rc.1", "1.0.0", "1.0.0-rc.2", "0.9.9"]
    assert sorted(versions, key=semver_key) == [
        "0.9.9",
        "1.0.0-rc.1",
        "1.0.0-rc.2",
        "1.0.0",
        "1.9.0",
        "1.10.0",
    ]
    assert semver_key("latest") is None


def test_active_file_wins_else_highest_version(registry_dir):
    assert wanted_version(registry_dir) == "1.1.0"
    (registry_dir / "ACTIVE").write_text("1.0.0\n")
    assert wanted_version(registry_dir) == "1.0.0"


def test_hot_swap_loads_in_the_background_and_switches_on_poll(registry_dir):
    (registry_dir / "ACTIVE").write_text("1.0.0")
    reg = ModelRegistry(load, registry=registry_dir, poll_s=0.01)
    assert reg.current.version == "1.0.0"
    held = reg.current  # what a running batch holds
    (registry_dir / "ACTIVE").write_text("1.1.0")
    assert poll_until_swap(reg) == "1.1.0"
    assert held.version == "1.0.0" and reg.swaps == 1
    reg.close()


def test_a_broken_version_is_refused_and_serving_continues(registry_dir):
    (registry_dir / "ACTIVE").write_text("1.0.0")
    reg = ModelRegistry(load, registry=registry_dir, poll_s=0.01)
    bad = registry_dir / "2.0.0"
    shutil.copytree(registry_dir / "1.1.0", bad)
    (bad / "model.onnx").write_bytes(b"not a model")
    (registry_dir / "ACTIVE").write_text("2.0.0")
    assert poll_until_swap(reg, timeout=2.0) is None
    assert reg.current.version == "1.0.0" and reg._failed == {"2.0.0"}
    reg.close()


def test_an_empty_registry_is_a_clear_error(tmp_path):
    with pytest.raises(PrecastError, match="holds no model version"):
        ModelRegistry(load, registry=tmp_path)
    with pytest.raises(ConfigError):
        load(tmp_path)


def test_committed_second_version_differs_from_the_first():
    import numpy as np

    from precast.fleet import load_fleet
    from precast.fleet.simulate.training import training_rows

    x, _ = training_rows(load_fleet(), 256, seed=3)
    a, b = load(MODELS / "1.0.0"), load(MODELS / "1.1.0")
    assert (a.version, b.version) == ("1.0.0", "1.1.0")
    assert not np.allclose(a.predict(x), b.predict(x))
    assert (a.predict(x).argmax(1) == b.predict(x).argmax(1)).mean() > 0.9
