"""The purge selector matrix: semantic versions, never string prefixes."""

from __future__ import annotations

import pytest

from precast.errors import ConfigError
from precast.models.versions import parse_selector, parse_version

STORED = [
    "1.3.0",
    "1.3.7",
    "v1.3.7-hotfix",
    "1.3.7-rc.1",
    "1.3.7+build.5",
    "1.3.10",
    "1.30.0",
    "1.30.1-rc.1",
    "1.2.9",
    "1.4.0-rc.1",
    "1.4.0",
    "13.0.0",
    "2.0.0",
    "v1.3",
    "1.3.0-alpha",
    "not-a-version",
    "",
]

# selector -> exactly the stored versions it must select
MATRIX = {
    "1.3": {
        "1.3.0",
        "1.3.7",
        "v1.3.7-hotfix",
        "1.3.7-rc.1",
        "1.3.7+build.5",
        "1.3.10",
        "v1.3",
        "1.3.0-alpha",
    },
    "v1.3.": {
        "1.3.0",
        "1.3.7",
        "v1.3.7-hotfix",
        "1.3.7-rc.1",
        "1.3.7+build.5",
        "1.3.10",
        "v1.3",
        "1.3.0-alpha",
    },
    "1.3.x": {
        "1.3.0",
        "1.3.7",
        "v1.3.7-hotfix",
        "1.3.7-rc.1",
        "1.3.7+build.5",
        "1.3.10",
        "v1.3",
        "1.3.0-alpha",
    },
    "1.30": {"1.30.0", "1.30.1-rc.1"},
    "1": {
        "1.3.0",
        "1.3.7",
        "v1.3.7-hotfix",
        "1.3.7-rc.1",
        "1.3.7+build.5",
        "1.3.10",
        "1.30.0",
        "1.30.1-rc.1",
        "1.2.9",
        "1.4.0-rc.1",
        "1.4.0",
        "v1.3",
        "1.3.0-alpha",
    },
    "1.3.7": {"1.3.7", "v1.3.7-hotfix", "1.3.7-rc.1", "1.3.7+build.5"},
    "=1.3.7": {"1.3.7", "1.3.7+build.5"},
    "=1.3.7+build.5": {"1.3.7+build.5"},
    "1.3.7-rc.1": {"1.3.7-rc.1"},
    "=v1.3.7-hotfix": {"v1.3.7-hotfix"},
    ">=1.3 <1.4": {
        "1.3.0",
        "1.3.7",
        "v1.3.7-hotfix",
        "1.3.7-rc.1",
        "1.3.7+build.5",
        "1.3.10",
        "v1.3",
        "1.3.0-alpha",
    },
    ">=1.3.0, <1.3.7": {"1.3.0", "v1.3", "1.3.0-alpha"},
    ">1.3.7 <=1.4": {"1.3.10", "1.4.0-rc.1", "1.4.0"},
    ">=1.4.0-rc.1 <2": {
        "1.4.0-rc.1",
        "1.4.0",
        "1.30.0",
        "1.30.1-rc.1",
    },  # 30 > 4: numbers, not text
    "<1.3": {"1.2.9"},
    "1.2 - 1.3": {
        "1.2.9",
        "1.3.0",
        "1.3.7",
        "v1.3.7-hotfix",
        "1.3.7-rc.1",
        "1.3.7+build.5",
        "1.3.10",
        "v1.3",
        "1.3.0-alpha",
    },
    "1.3.7 - 1.4.0": {
        "1.3.7",
        "v1.3.7-hotfix",
        "1.3.7-rc.1",
        "1.3.7+build.5",
        "1.3.10",
        "1.4.0-rc.1",
        "1.4.0",
    },
}


@pytest.mark.parametrize("selector", sorted(MATRIX))
def test_selector_matrix(selector):
    sel = parse_selector(selector)
    assert {v for v in STORED if sel.matches(v)} == MATRIX[selector]


def test_prefix_traps():
    assert not parse_selector("1.3").matches("1.30.0")
    assert not parse_selector("1.3").matches("1.31")
    assert parse_selector("v1.3.").matches("v1.3.7-hotfix")
    assert parse_selector("v1.3.").matches("1.3.7-hotfix")
    assert not parse_selector("1").matches("13.0.0") and not parse_selector("1").matches("10.0.0")


def test_lenient_parsing_of_stored_versions():
    assert str(parse_version("v1.3")) == "1.3.0"
    assert str(parse_version("V2")) == "2.0.0"
    assert parse_version("1.3.7-hotfix").prerelease == "hotfix"
    assert parse_version("1.3.7+build.5").build == "build.5"
    for bad in ("", "latest", "1.3.7.1", "1..3", "01.3.0"):
        assert parse_version(bad) is None


@pytest.mark.parametrize(
    "bad", ["", "*", "x", "=1.3", ">=abc", "1.3 || 1.5", "latest", ">=1.2 =1.3.0", "~>1.3"]
)
def test_malformed_selectors_are_one_clear_error(bad):
    with pytest.raises(ConfigError):
        parse_selector(bad)
