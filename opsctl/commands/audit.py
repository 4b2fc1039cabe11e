"""`precast audit checkpoint | prove | verify`: check the predictions audit log with nothing but
its public key (docs/audit.md).

checkpoint  the newest signed checkpoint (from the log's store, the auditor's HTTP API or the
            compacted checkpoints topic), its signature checked
prove       an inclusion proof for a prediction (--partition/--offset or --device/--computed-at)
            or a consistency proof between two checkpoints (--first/--second), checked here
verify      the whole log against every signed checkpoint and against the topic; exit 1 naming
            the first bad leaf"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from opsctl.commands.base import Action, Command
from opsctl.settings import StackCliSettings
from opsctl.toolkit.ranges import OffsetRange
from opsctl.toolkit.reader import RangeReader, range_consumer
from precast.audit.answers import (
    NotFound,
    check_consistency,
    check_inclusion,
    checkpoint_doc,
    consistency_doc,
    find_leaf,
    inclusion_doc,
)
from precast.audit.checkpoint import CheckpointError, Verifier, open_note
from precast.audit.proofs import ProofError
from precast.audit.store import LogStore, StoreError
from precast.audit.verify import Report, TopicRecord, verify_store
from precast.errors import ConfigError, PrecastError, Unreachable
from precast.telemetry.progress import bar, table


class AuditFailed(PrecastError):
    """The log, a checkpoint or a proof does not verify."""

    exit_code = 1


def _common(p: argparse.ArgumentParser, http: bool = True) -> None:
    p.add_argument("--db", type=Path, help="the log's SQLite file (default PRECAST_AUDIT__DB_PATH)")
    p.add_argument(
        "--key", help="verifier key, or a file holding it (default PRECAST_AUDIT__PUBLIC_KEY)"
    )
    if http:
        p.add_argument("--url", help="ask the auditor's HTTP API instead of reading the store")
    p.add_argument("--json", action="store_true", help="print JSON")


def _checkpoint_arguments(cp: argparse.ArgumentParser) -> None:
    _common(cp)
    cp.add_argument("--topic", action="store_true", help="read it from the checkpoints topic")


def _prove_arguments(pp: argparse.ArgumentParser) -> None:
    _common(pp)
    pp.add_argument("--partition", type=int)
    pp.add_argument("--offset", type=int)
    pp.add_argument("--device")
    pp.add_argument("--computed-at", type=int, dest="computed_at", metavar="MS")
    pp.add_argument("--first", type=int, metavar="SIZE", help="consistency: the older checkpoint")
    pp.add_argument(
        "--second", type=int, metavar="SIZE", help="consistency: the newer (default latest)"
    )
    pp.add_argument(
        "--tree-size", type=int, dest="tree_size", help="inclusion: prove against this checkpoint"
    )


def _verify_arguments(vp: argparse.ArgumentParser) -> None:
    _common(vp, http=False)
    vp.add_argument("--no-topic", action="store_true", help="skip the comparison with the topic")


# -- inputs -------------------------------------------------------------------------------------
def _verifier(args: argparse.Namespace, settings: StackCliSettings) -> Verifier:
    raw = args.key or str(settings.audit.verifier_path())
    path = Path(raw)
    try:
        text = path.read_text() if "+" not in raw or path.exists() else raw
        return Verifier.parse(text)
    except OSError as exc:
        raise ConfigError(f"cannot read the verifier key {raw}: {exc.strerror}") from None
    except (CheckpointError, ValueError) as exc:
        raise ConfigError(f"verifier key {raw}: {exc}") from None


def _store(args: argparse.Namespace, settings: StackCliSettings) -> LogStore:
    try:
        return LogStore(args.db or settings.audit.db_path, readonly=True)
    except StoreError as exc:
        raise ConfigError(str(exc)) from None


def _http(url: str, path: str, params: dict[str, Any]) -> dict[str, Any]:
    query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
    req = urllib.request.Request(
        f"{url.rstrip('/')}{path}?{query}", headers={"Accept": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        try:
            reason = json.loads(exc.read()).get("error", exc.reason)
        except ValueError:
            reason = exc.reason
        if exc.code == 404:
            raise AuditFailed(f"not found: {reason}") from None
        raise ConfigError(f"the auditor refused the request ({exc.code}): {reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise Unreachable("auditor", url, str(getattr(exc, "reason", exc))) from None


def _print(doc: dict[str, Any]) -> None:
    print(json.dumps(doc, indent=2))


# -- checkpoint ---------------------------------------------------------------------------------
def _latest_from_topic(settings: StackCliSettings) -> dict[str, Any]:
    t = settings.topics
    topic = t.catalog().audit_checkpoints.name
    c = range_consumer(settings.kafka, "audit-checkpoint")
    newest: dict[str, Any] | None = None
    try:
        ranges = []
        for p in range(t.partitions):
            lo, hi = c.watermarks(topic, p)
            if hi > lo:
                ranges.append(OffsetRange(p, max(lo, hi - 1), hi))
        for batch in RangeReader(c, topic, ranges, idle_timeout_s=10):
            for m in batch:
                doc = json.loads(m.value() or b"{}")
                if newest is None or doc.get("size", -1) >= newest.get("size", -1):
                    newest = doc
    finally:
        c.close()
    if newest is None:
        raise AuditFailed(f"no checkpoint in {topic}")
    return newest


def run_checkpoint(args: argparse.Namespace, settings: StackCliSettings) -> int:
    verifier = _verifier(args, settings)
    if args.topic:
        doc = _latest_from_topic(settings)
    elif args.url:
        doc = _http(args.url, "/v1/checkpoint", {})
    else:
        sc = _store(args, settings).latest_checkpoint()
        if sc is None:
            raise AuditFailed("the log has no signed checkpoint yet")
        doc = checkpoint_doc(sc)
    try:
        cp = open_note(doc["note"], verifier)
    except CheckpointError as exc:
        raise AuditFailed(f"checkpoint of size {doc.get('size')}: {exc}") from None
    if args.json:
        _print({**doc, "verified": True})
    else:
        sys.stdout.write(doc["note"])
        age = (time.time() * 1000 - doc["published_at_ms"]) / 1000
        print(f"verified: {cp.origin}, {cp.size:,} leaves, root {cp.root.hex()}, {age:.1f}s old")
    return 0


# -- prove --------------------------------------------------------------------------------------
def run_prove(args: argparse.Namespace, settings: StackCliSettings) -> int:
    verifier = _verifier(args, settings)
    consistency = args.first is not None
    by_offset = args.partition is not None or args.offset is not None
    by_device = args.device is not None or args.computed_at is not None
    if sum([consistency, by_offset, by_device]) != 1:
        raise ConfigError(
            "give one of --partition/--offset, --device/--computed-at, or --first [--second]"
        )
    if by_offset and (args.partition is None or args.offset is None):
        raise ConfigError("--partition and --offset go together")
    if by_device and (args.device is None or args.computed_at is None):
        raise ConfigError("--device and --computed-at go together")
    doc = _consistency(args, settings) if consistency else _inclusion(args, settings)
    try:
        if consistency:
            old, new = check_consistency(doc, verifier)
            summary = (
                f"consistent: {old.size:,} -> {new.size:,} leaves ({len(doc['proof'])} hashes)"
            )
        else:
            cp = check_inclusion(doc, verifier)
            summary = (
                f"included: leaf {doc['leaf_index']:,} in the signed tree of {cp.size:,} leaves "
                f"({len(doc['proof'])} hashes)"
            )
    except (ProofError, CheckpointError) as exc:
        raise AuditFailed(f"the proof does not verify: {exc}") from None
    if args.json:
        _print({**doc, "verified": True})
    else:
        if not consistency:
            print(json.dumps(doc["leaf"]))
        print(summary)
    return 0


def _inclusion(args: argparse.Namespace, settings: StackCliSettings) -> dict[str, Any]:
    params = {
        "partition": args.partition,
        "offset": args.offset,
        "device": args.device,
        "computed_at_ms": args.computed_at,
        "tree_size": args.tree_size,
    }
    if args.url:
        return _http(args.url, "/v1/proof/inclusion", params)
    store = _store(args, settings)
    try:
        idx = find_leaf(
            store,
            partition=args.partition,
            offset=args.offset,
            device=args.device,
            computed_at_ms=args.computed_at,
        )
        return inclusion_doc(store, idx, args.tree_size)
    except NotFound as exc:
        raise AuditFailed(f"not found: {exc}") from None


def _consistency(args: argparse.Namespace, settings: StackCliSettings) -> dict[str, Any]:
    if args.url:
        return _http(
            args.url, "/v1/proof/consistency", {"first": args.first, "second": args.second}
        )
    try:
        return consistency_doc(_store(args, settings), args.first, args.second)
    except NotFound as exc:
        raise AuditFailed(f"not found: {exc}") from None
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


# -- verify -------------------------------------------------------------------------------------
def _topic_reader(settings: StackCliSettings, topic: str, progress: Any) -> Any:
    def records(ranges: dict[int, tuple[int, int]]) -> Iterator[TopicRecord]:
        c = range_consumer(settings.kafka, "audit-verify")
        try:
            wanted = []
            for p, (_first, end) in sorted(ranges.items()):
                lo, _hi = c.watermarks(topic, p)
                wanted.append(OffsetRange(p, lo, end))
            for batch in RangeReader(c, topic, wanted):
                for m in batch:
                    yield m.partition(), m.offset(), m.key(), m.value()
                progress.update(len(batch))
        finally:
            c.close()

    return records


def run_verify(args: argparse.Namespace, settings: StackCliSettings) -> int:
    verifier = _verifier(args, settings)
    store = _store(args, settings)
    size = store.size()
    leaves_bar = bar(size, "leaves", "leaf")
    topic_bar = None
    reader = None
    if not args.no_topic:
        topic = str(store.meta("topic"))
        topic_bar = bar(size, f"topic {topic}", "rec")
        reader = _topic_reader(settings, topic, topic_bar)
    started = time.monotonic()
    try:
        report = verify_store(store, verifier, topic_records=reader, progress=leaves_bar.update)
    finally:
        leaves_bar.close()
        if topic_bar is not None:
            topic_bar.close()
    elapsed = time.monotonic() - started
    _print_report(args, report, elapsed)
    first = report.first()
    if first is not None:
        raise AuditFailed(f"the log does not verify; first bad leaf {first.leaf}: {first.what}")
    return 0


def _print_report(args: argparse.Namespace, report: Report, elapsed: float) -> None:
    if args.json:
        _print(
            {
                "ok": report.ok,
                "leaves": report.leaves,
                "checkpoint_size": report.checkpoint.size if report.checkpoint else None,
                "checkpoints_checked": report.checkpoints_checked,
                "topic_checked": report.topic_checked,
                "topic_unavailable": report.topic_unavailable,
                "findings": [{"leaf": f.leaf, "what": f.what} for f in sorted(report.findings)],
                "seconds": round(elapsed, 3),
            }
        )
        return
    print(
        table(
            [
                "leaves",
                "signed size",
                "checkpoints",
                "topic checked",
                "not in topic",
                "findings",
                "seconds",
            ],
            [
                [
                    report.leaves,
                    report.checkpoint.size if report.checkpoint else None,
                    report.checkpoints_checked,
                    report.topic_checked,
                    report.topic_unavailable,
                    len(report.findings),
                    round(elapsed, 1),
                ]
            ],
        )
    )
    for f in sorted(report.findings)[:20]:
        print(f"  leaf {f.leaf}: {f.what}")
    if len(report.findings) > 20:
        print(f"  ... and {len(report.findings) - 20} more")
    if report.ok:
        print(
            "ok: every leaf, every signed checkpoint"
            + ("" if args.no_topic else " and the topic agree")
        )


COMMAND = Command(
    "audit",
    help="check the predictions audit log (docs/audit.md)",
    description=__doc__,
    action_dest="audit_command",
    actions=(
        Action(
            "checkpoint",
            help="the newest signed checkpoint, signature checked",
            run=run_checkpoint,
            arguments=_checkpoint_arguments,
        ),
        Action(
            "prove",
            help="inclusion or consistency proof, checked with the key",
            run=run_prove,
            arguments=_prove_arguments,
        ),
        Action(
            "verify",
            help="the whole log against its checkpoints and the topic",
            run=run_verify,
            arguments=_verify_arguments,
        ),
    ),
)
