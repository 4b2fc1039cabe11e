"""Issue 36 (7): a CLI that prints record content escapes control characters: a dead letter's
key or detail, a redrive's source topic header, a consumer group's name can hold ANSI escapes
and newlines, which must not repaint the operator's terminal or forge a line."""

from __future__ import annotations

import argparse

from hypothesis import given
from hypothesis import strategies as st

from opsctl.commands import deadletters, lag
from opsctl.toolkit import escape
from precast.kafka import Record
from schemas import deadletters as dl

ANSI = "\x1b[2J\x1b[31mPWNED\x1b[0m\r\nfake line\u2028"


def _clean(out: str) -> None:
    assert "\x1b" not in out and "\r" not in out and "\u2028" not in out
    assert "fake line" not in out.splitlines()  # never a line of its own


def _dead(key: bytes | None, detail: bytes | None, reason: bytes | None) -> Record:
    return Record(
        "p.dead-letters",
        0,
        7,
        key,
        b"v",
        [
            (dl.H_REASON, reason),
            (dl.H_DETAIL, detail),
            (dl.H_COMPONENT, ANSI.encode()),
            (dl.H_TOPIC, ANSI.encode()),
            (dl.H_REJECTED_AT, "\u0661\u0662".encode()),  # digits, but not ASCII ones
        ],
    )


def test_deadletters_list_escapes_keys_details_and_reasons(monkeypatch, capsys):
    recs = [
        _dead(ANSI.encode(), ANSI.encode(), ANSI.encode()),
        _dead(b"\xff\x1b]0;title\x07", None, None),
    ]
    monkeypatch.setattr(
        deadletters,
        "selected",
        lambda args, settings, what: ((m, deadletters.dead_letter_info(m.headers())) for m in recs),
    )
    assert deadletters.run_list(argparse.Namespace(limit=50), None) == 0
    out = capsys.readouterr().out
    _clean(out)
    assert "\x07" not in out
    assert "\\x1b[31mPWNED" in out  # shown, escaped


def test_lag_escapes_group_names(monkeypatch, capsys):
    group = "g\x1b[2J\nforged"
    rows = [lag.PartitionLag(group, "p.heartbeats", 0, 1, 5, 4, 1.0)]
    monkeypatch.setattr(lag, "measure", lambda s, g, t: (rows, {group: {"state": ANSI}}))
    monkeypatch.setattr(lag, "freshness", lambda a, s: {})
    lag.report(argparse.Namespace(group=None, topic=None, json=False), None)
    out = capsys.readouterr().out
    _clean(out)
    assert "forged" not in out.splitlines()
    assert "g\\x1b[2J\\x0aforged" in out


@given(st.lists(st.lists(st.one_of(st.text(), st.integers()), max_size=4), max_size=4))
def test_escaped_rows_hold_printable_ascii_and_keep_numbers(rows):
    for r, out in zip(rows, escape.rows(rows), strict=True):
        for v, o in zip(r, out, strict=True):
            if isinstance(v, str):
                assert o.isascii() and o.isprintable()
            else:
                assert o == v
