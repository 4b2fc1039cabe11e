"""A fleet spec's first-pass problems in the terms of the file a person wrote: where (a TOML path,
list items named by their `name`), what shape was expected (written as TOML), and the nearest
key, kind or value to a misspelt one. pydantic's own words ("Input should be a valid dictionary
or instance of TimeRef") name classes nobody wrote."""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterable
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic_core import ErrorDetails


def near(word: object, choices: Iterable[str]) -> str:
    """' (did you mean "x"?)' for the closest choice, or '' when none is close."""
    if not isinstance(word, str):
        return ""
    found = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f' (did you mean "{found[0]}"?)' if found else ""


def where(loc: tuple[Any, ...], data: Any) -> str:
    """A TOML path for an error location: union tags pydantic inserts are dropped and a list
    item that has a name is named (`features[1](mem_pct).source`)."""
    out: list[str] = []
    node = data
    for part in loc:
        if isinstance(node, dict) and part not in node and node.get("kind") == part:
            continue  # the discriminator's tag, not a key of the file
        if isinstance(part, int):
            out.append(f"[{part}]")
        else:
            out.append(("." if out else "") + str(part))
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            node = None
        if isinstance(part, int) and isinstance(node, dict) and isinstance(node.get("name"), str):
            out.append(f"({node['name']})")
    return "".join(out) or "spec"


def message(err: ErrorDetails, root: type[BaseModel], data: Any) -> tuple[str, str]:
    """(where, message) for one pydantic error of `root` validating `data`."""
    loc, kind, ctx = tuple(err["loc"]), err["type"], err.get("ctx") or {}
    place = where(loc, data)
    if kind == "extra_forbidden":
        owner = _model_at(root, loc[:-1], data)
        keys = list(owner.model_fields) if owner is not None else []
        hint = near(loc[-1], keys) or (f" (keys here: {', '.join(keys)})" if keys else "")
        return place, f"unknown key{hint}"
    if kind == "union_tag_invalid":
        tags = [t.strip(" '") for t in str(ctx.get("expected_tags", "")).split(",")]
        tag = ctx.get("tag")
        return f"{place}.kind", f'"{tag}" is not a kind{near(tag, tags)}; one of: {", ".join(tags)}'
    if kind == "literal_error":
        expected = [
            e.strip(" '") for e in str(ctx.get("expected", "")).replace(" or ", ",").split(",")
        ]
        got = err.get("input")
        return (
            place,
            f"{_toml(got)} is not allowed{near(got, expected)}; one of: {', '.join(expected)}",
        )
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        target = _model_at(root, loc, data)
        shape = _shape(loc[-1] if loc else "spec", target) if target is not None else "a table"
        return place, f"expected a table, e.g. {shape}; found {_toml(err.get('input'))}"
    if kind == "missing":
        owner = _model_at(root, loc[:-1], data)
        example = (
            _example(owner.model_fields[str(loc[-1])].annotation)
            if owner and str(loc[-1]) in owner.model_fields
            else '"..."'
        )
        return place, f"required key missing: {loc[-1]} = {example}"
    if kind in ("list_type", "tuple_type", "set_type"):
        return place, f"expected an array, e.g. {loc[-1]} = [...]; found {_toml(err.get('input'))}"
    return place, _plain(str(err["msg"]))


def _plain(msg: str) -> str:
    msg = msg.removeprefix("Value error, ")
    return msg.replace("Input should be", "expected").replace("valid ", "")


def _toml(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list | tuple):
        return "an array"
    return repr(value)


def _shape(key: object, cls: type[BaseModel]) -> str:
    """`key = { a = "...", b = "ms" }` with the table's required keys (optional ones after)."""
    required = [n for n, f in cls.model_fields.items() if f.is_required()]
    optional = [n for n, f in cls.model_fields.items() if not f.is_required()]
    shown = required + optional[: max(0, 2 - len(required))]
    body = ", ".join(f"{n} = {_example(cls.model_fields[n].annotation)}" for n in shown)
    rest = [n for n in optional if n not in shown]
    more = f" (optional: {', '.join(rest)})" if rest else ""
    return f"{key} = {{ {body} }}{more}"


def _example(annotation: Any) -> str:
    """A TOML value of the annotated type, to show a shape."""
    t = _strip(annotation)
    origin = get_origin(t)
    if origin is Literal:
        return " | ".join(_toml(a) for a in get_args(t))
    if origin in (Union, types.UnionType):
        members = [a for a in get_args(t) if a is not type(None)]
        return _example(members[0]) if members else '"..."'
    if t is bool:
        return "false"
    if t in (int, float):
        return "0"
    if origin in (tuple, list, set, frozenset):
        if "WirePath" in repr(t) or (get_args(t) and get_origin(_strip(get_args(t)[0])) is tuple):
            return '"a.b"'
        return "[...]"
    if origin is dict or (isinstance(t, type) and issubclass(t, BaseModel)):
        return "{ ... }"
    return '"..."'


def _strip(annotation: Any) -> Any:
    while get_origin(annotation) is typing.Annotated:
        annotation = get_args(annotation)[0]
    return annotation


def _model_at(root: type[BaseModel], loc: tuple[Any, ...], data: Any) -> type[BaseModel] | None:
    """The model class validating the table at `loc` (unions resolved by the data's `kind`)."""
    current: Any = root
    node = data
    for part in loc:
        current = _resolve(current, node)
        if isinstance(node, dict) and part not in node and node.get("kind") == part:
            continue  # a discriminator tag: `current` already chose the member
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(str(part))
            if field is None:
                return None
            current = field.annotation
        else:
            args = get_args(_strip(current))
            origin = get_origin(_strip(current))
            if origin is dict and len(args) == 2:
                current = args[1]
            elif origin in (tuple, list) and args:
                current = args[0]
            else:
                return None
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            node = None
    current = _resolve(current, node)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _resolve(annotation: Any, node: Any) -> Any:
    """Annotated stripped; a union narrowed to the member whose `kind` matches the data."""
    t = _strip(annotation)
    if get_origin(t) not in (Union, types.UnionType):
        return t
    members = [_strip(a) for a in get_args(t) if a is not type(None)]
    models = [m for m in members if isinstance(m, type) and issubclass(m, BaseModel)]
    tag = node.get("kind") if isinstance(node, dict) else None
    for m in models:
        field = m.model_fields.get("kind")
        if field is not None and tag in get_args(_strip(field.annotation)):
            return m
    if len(models) == 1 or (models and isinstance(node, dict)):
        return models[0]
    return members[0] if len(members) == 1 else t
