"""Model-version selectors that understand semantic versions (purge, backfill checks).

A string prefix is the wrong tool: `1.3` is a prefix of `1.30.0`, and `v1.3.` is not a prefix
of `1.3.7-hotfix` once someone drops the `v`. Versions are parsed (SemVer 2.0 via `semver`,
a leading `v` allowed, missing minor/patch read as 0) and compared by component.

Selector forms:
- a line: `1`, `1.3`, `v1.3.`, `1.3.x`, `1.3.*`, `1.3.7` — every version whose given
  components are equal, with any pre-release and build (`1.3` matches 1.3.0 … 1.3.7-rc.1 and
  1.3.7-hotfix, never 1.30.0);
- an exact version: `=1.3.7` (any build metadata) or `=1.3.7+build.5` (that build only); a
  bare version with a pre-release (`1.3.7-rc.1`) is exact too;
- a range: comparators joined by spaces or commas (all must hold), `>=1.2 <1.4`, `>1.3.0,<=1.3.5`,
  or a hyphen range `1.2 - 1.3` (inclusive lines). A bound is a line too: `<1.4` and
  `<1.4.0` exclude 1.4.0-rc.1; `>=1.3.0` includes 1.3.0-rc.1.
Versions that do not parse never match a selector (and are counted apart in dry runs).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import semver

from precast.errors import ConfigError

_LINE = re.compile(r"^[vV]?(\d+)(?:\.(\d+))?(?:\.(\d+))?\.?(?:\.?[xX*])?$")
_COMPARATOR = re.compile(r"^(>=|<=|>|<|==|=)\s*(\S+)$")


def parse_version(text: str) -> semver.Version | None:
    """A stored model version as SemVer, or None when it is not one."""
    t = text.strip()
    if t[:1] in ("v", "V"):
        t = t[1:]
    try:
        return semver.Version.parse(t, optional_minor_and_patch=True)
    except (ValueError, TypeError):
        return None


def line_parts(text: str) -> tuple[int, ...] | None:
    m = _LINE.match(text.strip())
    if not m:
        return None
    return tuple(int(g) for g in m.groups() if g is not None)


def _floor(parts: tuple[int, ...]) -> semver.Version:
    """The lowest version of a line, below its own pre-releases: 1.3 -> 1.3.0-0."""
    major, minor, patch = (*parts, 0, 0)[:3]
    return semver.Version(major, minor, patch, prerelease="0")


def _next_line(parts: tuple[int, ...]) -> semver.Version:
    """The floor of the line after this one: 1.3 -> 1.4.0-0, 1 -> 2.0.0-0, 1.3.7 -> 1.3.8-0."""
    bumped = (*parts[:-1], parts[-1] + 1)
    return _floor(bumped)


@dataclass(frozen=True)
class Bound:
    op: str  # ">=", ">", "<=", "<"
    version: semver.Version

    def holds(self, v: semver.Version) -> bool:
        c = v.compare(self.version)
        return {">=": c >= 0, ">": c > 0, "<=": c <= 0, "<": c < 0}[self.op]


@dataclass(frozen=True)
class Selector:
    text: str
    bounds: tuple[Bound, ...] = ()
    exact: semver.Version | None = None
    exact_build: bool = False

    def matches(self, version: str | semver.Version | None) -> bool:
        v = parse_version(version) if isinstance(version, str) else version
        if v is None:
            return False
        if self.exact is not None:
            if v.compare(self.exact) != 0:
                return False
            return not self.exact_build or v.build == self.exact.build
        return all(b.holds(v) for b in self.bounds)

    def __str__(self) -> str:
        return self.text


def _bounds_for(op: str, operand: str, selector: str) -> list[Bound]:
    parts = line_parts(operand)
    if parts is not None:  # a line as a bound
        lo, hi = _floor(parts), _next_line(parts)
        return {
            ">=": [Bound(">=", lo)],
            ">": [Bound(">=", hi)],
            "<": [Bound("<", lo)],
            "<=": [Bound("<", hi)],
        }[op]
    v = parse_version(operand)
    if v is None:
        raise ConfigError(f"malformed version {operand!r} in selector {selector!r}")
    return [Bound(op, v)]


def parse_selector(text: str) -> Selector:
    s = text.strip()
    if not s or s in ("*", "x", "X"):
        raise ConfigError(
            f"model-version selector {text!r} selects nothing or everything; "
            f"name a line (1.3), a version (=1.3.7) or a range (>=1.2 <1.4)"
        )
    parts = line_parts(s)
    if parts is not None:
        return Selector(text, (Bound(">=", _floor(parts)), Bound("<", _next_line(parts))))
    hyphen = re.fullmatch(r"(\S+)\s+-\s+(\S+)", s)
    if hyphen:
        lo, hi = hyphen.groups()
        pair = _bounds_for(">=", lo, text) + _bounds_for("<=", hi, text)
        return Selector(text, tuple(pair))
    if s[0] in "<>=":
        items = [i for i in re.split(r"[\s,]+", re.sub(r"([<>]=?|==?)\s+", r"\1", s)) if i]
        bounds: list[Bound] = []
        for item in items:
            m = _COMPARATOR.match(item)
            if not m:
                raise ConfigError(
                    f"malformed comparator {item!r} in selector {text!r} "
                    f"(expected e.g. >=1.2.0, <1.4, =1.3.7)"
                )
            op, operand = m.groups()
            if op in ("=", "=="):
                if len(items) > 1:
                    raise ConfigError(f"an exact version cannot be combined with a range: {text!r}")
                v = parse_version(operand)
                if (
                    v is None
                    or line_parts(operand) is not None
                    and len(line_parts(operand) or ()) < 3
                ):
                    raise ConfigError(
                        f"exact selector needs a full version (e.g. =1.3.7), got {text!r}"
                    )
                return Selector(text, exact=v, exact_build=v.build is not None)
            bounds += _bounds_for(op, operand, text)
        return Selector(text, tuple(bounds))
    v = parse_version(s)
    if v is not None and v.prerelease:  # 1.3.7-rc.1: that pre-release (any build)
        return Selector(text, exact=v, exact_build=v.build is not None)
    if v is not None:  # 1.3.7+build.5
        return Selector(text, exact=v, exact_build=True)
    raise ConfigError(
        f"malformed model-version selector {text!r}: expected a line (1.3), an exact "
        f"version (=1.3.7) or a range (>=1.2 <1.4, 1.2 - 1.3)"
    )
