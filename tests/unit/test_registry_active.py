"""ACTIVE names a version folder inside the registry and nothing else (issue 36, deliverable 7):
a path out of it, a separator, an absolute path, a symlink leaving it, bytes that are not a
version are refused with one line, at start and while a worker serves."""

import os
import shutil

import pytest
from hypothesis import given
from hypothesis import strategies as st

from precast.models import layout
from workers.model.inference import ModelSession
from workers.model.registry import ModelRegistry
from workers.settings import DEFAULT_MODEL_DIR

MODELS = DEFAULT_MODEL_DIR.parent


@pytest.fixture
def reg(tmp_path):
    root = tmp_path / "registry"
    for v in ("1.0.0", "1.1.0"):
        (root / v).mkdir(parents=True)
        (root / v / "manifest.json").write_text("{}")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "manifest.json").write_text("{}")
    return root


BAD = [
    "../outside",
    "../../etc",
    "/etc",
    "1.0.0/../../outside",
    "1.0.0/",
    "sub\\1.0.0",
    "..",
    ".",
    "latest",
    "1.0",
    "1.0.0\n2.0.0",
    "1.0.0\x00",
    "x" * 200,
]


@pytest.mark.parametrize("content", BAD)
def test_active_that_is_not_a_version_folder_name_is_refused(reg, content):
    (reg / "ACTIVE").write_bytes(content.encode())
    with pytest.raises(layout.RegistryError) as exc:
        layout.wanted_version(reg)
    msg = str(exc.value)
    assert "\n" not in msg and str(reg / "ACTIVE") in msg
    assert exc.value.exit_code != 0


def test_a_symlinked_version_folder_that_leaves_the_registry_is_refused(reg):
    os.symlink(reg.parent / "outside", reg / "9.9.9")
    (reg / "ACTIVE").write_text("9.9.9\n")
    with pytest.raises(layout.RegistryError, match="not a folder inside the registry"):
        layout.wanted_version(reg)


def test_active_that_is_a_file_not_a_folder_is_refused(reg):
    (reg / "2.0.0").write_text("not a folder")
    (reg / "ACTIVE").write_text("2.0.0")
    with pytest.raises(layout.RegistryError):
        layout.active_version(reg)


def test_unreadable_or_binary_active_is_an_error_not_a_fallback(reg):
    (reg / "ACTIVE").write_bytes(b"\xff\xfe1.0.0")
    with pytest.raises(layout.RegistryError, match="not UTF-8"):
        layout.wanted_version(reg)
    (reg / "ACTIVE").unlink()
    (reg / "ACTIVE").mkdir()  # a directory where the file should be
    with pytest.raises(layout.RegistryError, match="cannot be read"):
        layout.wanted_version(reg)


def test_good_active_absent_and_empty_still_work(reg):
    assert layout.wanted_version(reg) == "1.1.0"
    (reg / "ACTIVE").write_text("")
    assert layout.wanted_version(reg) == "1.1.0"
    (reg / "ACTIVE").write_text(" 1.0.0 \n")
    assert layout.wanted_version(reg) == "1.0.0"
    (reg / "ACTIVE").write_text("v1.0.0-rc.1")  # a pre-release folder not there yet: a name
    assert layout.wanted_version(reg) == "v1.0.0-rc.1"


def test_write_active_refuses_what_a_reader_would_refuse(reg):
    with pytest.raises(layout.RegistryError):
        layout.write_active(reg, "../outside")
    assert not (reg / "ACTIVE").exists()


def test_trailing_newline_is_not_part_of_a_version():
    assert layout.semver_key("1.0.0\n") is None and layout.semver_key("1.0.0") is not None


@given(st.text(min_size=1, max_size=40))
def test_any_accepted_name_is_one_path_component(name):
    """Whatever passes the name check cannot address anything but a child of the registry."""
    if layout.semver_key(name) is None:
        return
    assert "/" not in name and "\\" not in name and name not in (".", "..")
    assert not os.path.isabs(name) and "\x00" not in name


def load(path):
    return ModelSession(path, provider="cpu", warmup_rows=4)


def test_worker_refuses_to_start_on_a_bad_active_and_keeps_serving_on_one_later(tmp_path):
    root = tmp_path / "registry"
    for v in ("1.0.0", "1.1.0"):
        shutil.copytree(MODELS / v, root / v)
    shutil.copytree(MODELS / "1.0.0", tmp_path / "evil")
    (root / "ACTIVE").write_text("../evil")
    with pytest.raises(layout.RegistryError):
        ModelRegistry(load, registry=root, poll_s=0.0)
    (root / "ACTIVE").write_text("1.0.0")
    worker = ModelRegistry(load, registry=root, poll_s=0.0)
    try:
        (root / "ACTIVE").write_text(str(tmp_path / "evil"))
        worker.request_check()
        assert worker.poll() is None  # refused, logged, no load started
        assert worker._loading is None and worker.current.version == "1.0.0"
    finally:
        worker.close()
