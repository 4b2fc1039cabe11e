"""Surrogate keys select at the edge exactly what a purge selector selects in the store."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from precast.edge_cache.keys import answer_keys, line_key, purge_keys, version_keys
from precast.edge_cache.purge import batches
from precast.models.versions import parse_selector

VERSIONS = [
    "1.3.0",
    "1.3.7-rc.1",
    "1.3.7-hotfix",
    "v1.3.9",
    "1.3.7+build.5",
    "1.30.0",
    "11.3.0",
    "1.2.9",
    "13.0.0",
    "2.0.0",
    "not-a-version",
]


@pytest.mark.parametrize("selector", ["1.3", "v1.3.", "1.3.x", "1.3.*", "1", "1.3.7", "11"])
def test_a_line_key_hits_exactly_what_the_line_selects_in_the_store(selector):
    sel = parse_selector(selector)
    key = line_key(sel)
    assert key is not None
    at_edge = {v for v in VERSIONS if key in version_keys(v)}
    in_store = {v for v in VERSIONS if sel.matches(v)}
    assert at_edge == in_store and in_store  # never empty: the table covers each line


def test_purge_of_1_3_never_touches_1_30_or_11_3():
    key = line_key(parse_selector("1.3"))
    assert key == "ml:1.3"
    assert key not in version_keys("1.30.0") and key not in version_keys("11.3.0")
    for v in ("1.3.0", "1.3.7-rc.1", "1.3.7-hotfix", "v1.3.9"):
        assert key in version_keys(v)


def test_ranges_and_exact_versions_purge_the_versions_they_matched():
    sel = parse_selector(">=1.2 <1.4")
    assert line_key(sel) is None
    matched = [v for v in VERSIONS if sel.matches(v)]
    keys = purge_keys(sel, matched)
    assert set(keys) == {
        "mv:1.3.0",
        "mv:1.3.7-rc.1",
        "mv:1.3.7-hotfix",
        "mv:1.3.9",
        "mv:1.3.7+build.5",
        "mv:1.2.9",
    }
    assert purge_keys(parse_selector("=1.3.7"), ["1.3.7+build.5"]) == ["mv:1.3.7+build.5"]
    assert purge_keys(parse_selector("1.3"), ["1.3.0", "v1.3.9"]) == ["ml:1.3"]


def test_answer_keys_name_everything_the_device_and_the_version():
    assert answer_keys("dev-1", "v1.3.7-rc.1") == (
        b"precast d:dev-1 mv:1.3.7-rc.1 ml:1 ml:1.3 ml:1.3.7"
    )
    # not SemVer: no version key (no selector matches it), still purgeable by device and all
    assert answer_keys("dev:2", "nightly build") == b"precast d:dev:2"


_num = st.integers(min_value=0, max_value=40)
_ident = st.from_regex(r"[0-9A-Za-z-]{1,8}(\.[0-9A-Za-z-]{1,8}){0,2}", fullmatch=True).filter(
    lambda s: all(not (p.isdigit() and len(p) > 1 and p[0] == "0") for p in s.split("."))
)


@settings(max_examples=300, deadline=None)
@given(
    version=st.tuples(_num, _num, _num, st.none() | _ident, st.booleans()),
    line=st.lists(_num, min_size=1, max_size=3),
)
def test_any_line_selects_the_same_versions_at_the_edge_and_in_the_store(version, line):
    major, minor, patch, pre, vee = version
    text = ("v" if vee else "") + f"{major}.{minor}.{patch}" + (f"-{pre}" if pre else "")
    sel = parse_selector(".".join(str(p) for p in line))
    assert (line_key(sel) in version_keys(text)) == sel.matches(text)


def test_purge_batches_stay_under_the_header_limit_and_keep_every_key():
    keys = [f"d:device-{i:05d}" for i in range(2_000)]
    out = batches(keys, limit=1_000)
    assert all(len(b) <= 1_000 for b in out) and len(out) > 1
    assert [k for b in out for k in b.split(" ")] == keys
