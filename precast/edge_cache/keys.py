"""Surrogate keys: the names an edge cache can purge a cached answer by.

Every precomputed answer carries them in its `Surrogate-Key` header (space-separated, Fastly's
name; deploy/edge/precast.vcl hands them to Varnish's xkey, Cloudflare calls them cache tags):

- `precast`: every answer (purge it all);
- `d:<device_id>`: the device's answers (a newer answer or a purge marker purges it);
- `mv:<version>`: the exact model version, normalized (SemVer without the `v`, pre-release and
  build kept): 1.3.7-rc.1, 1.3.7+build.5;
- `ml:<major>`, `ml:<major>.<minor>`, `ml:<major>.<minor>.<patch>`: the lines it belongs to.

A line key selects exactly what the same line selects in the store (`precast.models.versions`):
`ml:1.3` is on 1.3.0, 1.3.7-rc.1, 1.3.7-hotfix and v1.3.9, never on 1.30.0 or 11.3.0, because
keys are whole tokens compared for equality, never prefixes. A version that is not SemVer gets
no version key (no selector matches it either); its answers still carry `precast` and `d:`.
"""

from __future__ import annotations

from precast.models.versions import Selector, line_parts, parse_version

ALL = "precast"
_CACHE_MAX = 1024  # distinct model versions remembered (few are ever live at once)
_version_cache: dict[str, bytes] = {}


def device_key(device_id: str) -> str:
    return "d:" + device_id


def version_keys(version: str) -> tuple[str, ...]:
    """The `mv:` and `ml:` keys of a stored model version (none when it is not SemVer)."""
    v = parse_version(version)
    if v is None:
        return ()
    return (
        f"mv:{v}",
        f"ml:{v.major}",
        f"ml:{v.major}.{v.minor}",
        f"ml:{v.major}.{v.minor}.{v.patch}",
    )


def answer_keys(device_id: str, version: str) -> bytes:
    """The `Surrogate-Key` header value of one answer (the read path: cached per version)."""
    tail = _version_cache.get(version)
    if tail is None:
        if len(_version_cache) >= _CACHE_MAX:
            _version_cache.clear()
        tail = _version_cache[version] = " ".join(version_keys(version)).encode()
    if not tail:
        return b"precast d:" + device_id.encode()
    return b"precast d:%s %s" % (device_id.encode(), tail)


def line_key(selector: Selector) -> str | None:
    """The one `ml:` key that selects exactly what a line selector (`1.3`, `v1.3.`, `1.3.x`)
    selects in the store; None for exact versions and ranges (purged by their versions)."""
    parts = line_parts(selector.text)
    if parts is None or selector.exact is not None:
        return None
    return "ml:" + ".".join(str(p) for p in parts)


def purge_keys(selector: Selector, versions: list[str]) -> list[str]:
    """What `precast purge SELECTOR` purges at the edge: a line's own key (it covers every
    version of the line, cached or not), else the `mv:` key of every stored version the
    selector matched (ranges and exact versions)."""
    line = line_key(selector)
    if line is not None:
        return [line]
    keys: list[str] = []
    for version in sorted(set(versions)):
        exact = version_keys(version)
        if exact and exact[0] not in keys:
            keys.append(exact[0])
    return keys
