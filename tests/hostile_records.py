"""Hypothesis strategies for records a hostile or careless writer can put on a topic: not JSON,
nesting past any recursion limit, huge or non-finite numbers, wrong types anywhere, invalid
UTF-8, megabyte values, null or foreign keys, tombstones, headers with None or any bytes.
Shared by the readers' property tests (issue 36)."""

from __future__ import annotations

import json
from typing import Any

import orjson
from hypothesis import strategies as st

from precast.kafka import Record

DEPTH = 5000  # past Python's recursion limit and every JSON library's


def _dumps(v: Any) -> bytes:
    return json.dumps(v).encode()  # stdlib: integers of any size, as a hostile writer sends


def nested(depth: int = DEPTH, opener: bytes = b"[", closer: bytes = b"]") -> bytes:
    return opener * depth + closer * depth


def deep_object(depth: int = DEPTH) -> bytes:
    return b'{"x":' * depth + b"1" + b"}" * depth


_NUMBERS = [
    b"1e999",
    b"-1e999",
    b"NaN",
    b"Infinity",
    b"-Infinity",
    b"9" * 5000,
    b"1" + b"0" * 400,
    b"-0",
    b"1e-999",
    b"18446744073709551616",
    b"-9223372036854775809",
]

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=2**63, max_value=2**200),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)
json_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@st.composite
def mutated(draw: st.DrawFn, valid: dict[str, Any]) -> bytes:
    """A valid record with one field (possibly nested) replaced by something hostile."""
    doc: dict[str, Any] = orjson.loads(orjson.dumps(valid))
    paths: list[tuple[str, ...]] = []

    def walk(d: dict[str, Any], at: tuple[str, ...]) -> None:
        for k, v in d.items():
            paths.append((*at, k))
            if isinstance(v, dict):
                walk(v, (*at, k))

    walk(doc, ())
    path = draw(st.sampled_from(paths)) if paths else ("x",)
    marker = "\u0000HOSTILE\u0000"
    target = doc
    for k in path[:-1]:
        target = target[k]
    choice = draw(st.integers(0, 3))
    if choice == 0:
        target[path[-1]] = draw(json_values)
        return _dumps(doc)
    target[path[-1]] = marker
    text = orjson.dumps(doc)
    raw = {
        1: draw(st.sampled_from(_NUMBERS)),
        2: nested(),
        3: b'"'
        + draw(st.sampled_from([b"\xff\xfe", b"\xed\xa0\x80", b"\x1b[2J", b"a" * 1_100_000]))
        + b'"',
    }[choice]
    return text.replace(orjson.dumps(marker), raw)


@st.composite
def extra_field(draw: st.DrawFn, valid: dict[str, Any]) -> bytes:
    """A valid record with an undeclared field whose value is hostile (ignored fields are
    skipped by fast decoders, which may still recurse into them)."""
    text = orjson.dumps(valid)
    value = draw(st.sampled_from([nested(), deep_object(), *_NUMBERS, b'"\xff"']))
    return text[:-1] + b',"zz":' + value + b"}"


def hostile_values(valid: dict[str, Any] | None = None) -> st.SearchStrategy[bytes | None]:
    base: list[st.SearchStrategy[bytes | None]] = [
        st.none(),
        st.binary(max_size=64),
        st.sampled_from(
            [
                b"",
                b"null",
                b"[]",
                b"{}",
                b"\xff\xfe\xfd",
                nested(),
                deep_object(),
                nested(opener=b'{"a":[', closer=b"]}"),
                *_NUMBERS,
                b"a" * 1_100_000,
                b'{"a":"' + b"b" * 1_100_000 + b'"}',
            ]
        ),
        json_values.map(_dumps),
    ]
    if valid is not None:
        base += [mutated(valid), extra_field(valid)]
    return st.one_of(*base)


keys = st.one_of(
    st.none(),
    st.just(b""),
    st.binary(max_size=40),
    st.just(b"\xff\xfe"),
    st.just(b"\x1b[31mred\n"),
    st.just(b"k" * 100_000),
)

headers = st.one_of(
    st.none(),
    st.lists(
        st.tuples(
            st.one_of(st.text(max_size=12), st.sampled_from(["traceparent", "dlq.reason"])),
            st.one_of(st.none(), st.binary(max_size=64)),
        ),
        max_size=4,
    ),
)


@st.composite
def records(
    draw: st.DrawFn,
    topic: str,
    valid: dict[str, Any] | None = None,
    key: bytes | None = None,
) -> Record:
    """One hostile record for `topic`; with `valid`, often a near-miss of that record, and with
    `key`, often that key (so the record reaches the checks behind the key's)."""
    k = draw(st.one_of(keys, st.just(key))) if key is not None else draw(keys)
    return Record(
        topic,
        draw(st.integers(0, 5)),
        draw(st.integers(0, 2**40)),
        k,
        draw(hostile_values(valid)),
        draw(headers),  # type: ignore[arg-type]
    )
