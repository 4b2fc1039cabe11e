"""docs/security.md's threat table says who can write each topic and who reads it; this holds
it to the ACL table it is derived from (schemas/access.py), so an ACL change that widens who may
write a topic shows up as a failing test until the table (and its reader column) says so."""

from __future__ import annotations

import re
from pathlib import Path

from schemas.access import COMPONENTS
from schemas.topics import catalog

DOC = (Path(__file__).resolve().parents[2] / "docs" / "security.md").read_text()


def topic_rows() -> dict[str, list[str]]:
    head = "| topic | who can write it | who reads it |"
    table = DOC[DOC.index(head) :].split("\n\n", 1)[0].splitlines()[2:]
    rows = {}
    for line in table:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows[cells[0]] = cells
    return rows


def names(cell: str) -> set[str]:
    return {n.strip() for n in cell.split(",") if n.strip()}


def test_every_topic_has_a_row_with_its_writers_and_readers_from_the_acls():
    rows = topic_rows()
    cat = catalog("")
    assert set(rows) == {t.name for t in cat}
    for t in cat:
        writers = {n for n, a in COMPONENTS.items() if t.role in a.write}
        readers = {n for n, a in COMPONENTS.items() if t.role in a.read}
        row = rows[t.name]
        assert names(row[1]) == writers, (t.name, row[1], writers)
        assert names(row[2]) == readers, (t.name, row[2], readers)
        assert len(row[3]) > 20, t.name  # says what the readers do


def test_the_files_table_names_every_file_the_issue_lists():
    files = DOC[DOC.index("| file | who can write it |") :].split("\n\n", 1)[0]
    for f in ("tokens file", "ACTIVE", "audit log", "signing key", "fleet specs", "credentials"):
        assert re.search(re.escape(f), files, re.I), f
