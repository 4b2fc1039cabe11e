"""`precast-auditor` (`python -m auditor`): append the predictions topic to the audit log, sign
checkpoints, serve checkpoints and proofs over HTTP."""

from __future__ import annotations

import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from auditor.api import create_app
from auditor.appender import Appender
from auditor.settings import AuditorSettings
from precast.audit.checkpoint import CheckpointError, Signer, load_or_create_signer, open_note
from precast.audit.store import LogStore, StoreError
from precast.errors import ConfigError, TopicContractError
from precast.http.serve import ServerLimits, check_bind, raise_open_files, uvicorn_server
from precast.kafka import Consumer, Producer
from precast.kafka.access import connect_as
from precast.presence import Presence
from precast.runtime import OneLineParser, run_cli, setup_logging
from precast.settings import load
from precast.telemetry.tracing import Tracing, start_tracing


@dataclass
class Built:
    appender: Appender
    app: Any
    signer: Signer
    reader: LogStore


def build(settings: AuditorSettings, partitions: int, tracing: Tracing | None = None) -> Built:
    """`tracing`: the process's tracer (`run` starts it from `settings.tracing`)."""
    opts = settings.audit
    topics = settings.topics.catalog()
    try:
        store = LogStore(opts.db_path)
        if store.holds_a_log() and not opts.key_path.exists():
            # A new key would sign a second history under the same name: never.
            raise ConfigError(
                f"audit log: {opts.db_path} holds a log ({store.size():,} leaves, signed by key "
                f"{store.meta('key_id') or 'of its checkpoints'}) but its signing key "
                f"{opts.key_path} is missing; restore the key, or start a new log with a new "
                "PRECAST_AUDIT__ORIGIN, __KEY_PATH and __DB_PATH (docs/audit.md, key handling)"
            )
        signer = load_or_create_signer(opts.key_path, opts.origin)
        latest = store.latest_checkpoint()
        store.bind_key(
            signer.verifier.key_id.hex(),
            signer.verifier.encode(),
            signs_latest=latest is not None and _signed_by(latest.note, signer),
        )
        reader = LogStore(opts.db_path, readonly=True)
    except (CheckpointError, StoreError, OSError) as exc:
        raise ConfigError(f"audit log: {exc}") from None
    # Committed data only: an aborted transaction's records are not predictions anyone saw.
    tuning: dict[str, Any] = {
        "isolation.level": "read_committed",
        "max.partition.fetch.bytes": 8 * 1024 * 1024,
    }
    consumer = Consumer(settings.kafka, opts.group_id, **tuning)
    appender = Appender(
        store,
        signer,
        consumer,
        Producer(settings.kafka),
        topic=topics.predictions.name,
        checkpoint_topic=topics.audit_checkpoints.name,
        partitions=partitions,
        interval_s=opts.checkpoint_interval_s,
        batch=opts.consume_batch,
        tracing=tracing,
    )

    def health() -> tuple[bool, dict[str, Any]]:
        # What is down, never why: the reason is in the log (it may quote a broker or a path).
        if appender.error is not None:
            return False, {"down": ["appender"]}
        return True, {}

    def ready() -> tuple[bool, dict[str, Any]]:
        age = time.time() - appender.last_checkpoint_at
        fresh = age <= 3 * opts.checkpoint_interval_s + 1
        return appender.error is None and fresh, {
            "tree_size": appender.tree.size,
            "checkpoint_age_s": round(age, 3),
        }

    try:
        store.bind(signer.name, topics.predictions.name)
    except StoreError as exc:
        raise ConfigError(f"audit log: {exc}") from None
    return Built(appender, create_app(reader, health, ready), signer, reader)


def run(settings: AuditorSettings) -> int:
    opts = settings.audit
    limits = ServerLimits.from_options(opts, "PRECAST_AUDIT")
    check_bind(opts.host, opts.port, "PRECAST_AUDIT")
    admin = connect_as(settings, "auditor")  # one line for a refused password or ACL
    topics = settings.topics.catalog()  # names only: partitions come from the broker
    existing = admin.topic_partitions()
    for needed in (topics.predictions.name, topics.audit_checkpoints.name):
        if needed not in existing:
            raise TopicContractError(f"topic {needed} does not exist (run `precast topics ensure`)")
    partitions = existing[topics.predictions.name]
    tracing = start_tracing(settings.tracing, "precast-auditor")
    built = build(settings, partitions, tracing)
    thread = threading.Thread(target=built.appender.run, name="audit-appender", daemon=True)
    thread.start()
    # It assigns itself the predictions partitions: the guard sees it only through this.
    presence = Presence(
        settings.kafka, topics.presence.name, "auditor", [topics.predictions.name]
    ).start()
    print(
        f"precast-auditor: log {opts.db_path} ({built.appender.tree.size} leaves), key "
        f"{built.signer.verifier.encode()}, serving on http://{opts.host}:{opts.port}",
        file=sys.stderr,
        flush=True,
    )
    raise_open_files(limits.max_connections, "PRECAST_AUDIT")
    server = uvicorn_server(built.app, opts.host, opts.port, limits)

    def watch() -> None:  # a dead appender stops the process (exit 1), it does not limp on
        thread.join()
        server.should_exit = True

    threading.Thread(target=watch, name="audit-watch", daemon=True).start()
    # After its graceful shutdown uvicorn re-raises the signal to the handler it found; the
    # default one would kill the process before the appender signs its last checkpoint.
    previous = {sig: signal.signal(sig, _noop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        server.run()
    finally:
        presence.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        built.reader.close()  # first: the appender's connection, closed last, folds the WAL back
        built.appender.stop()
        thread.join(timeout=15)
        tracing.shutdown()  # exports the spans still queued
    if thread.is_alive():
        print("precast-auditor: the append loop did not stop within 15 s", file=sys.stderr)
        return 1
    if built.appender.error is not None:
        print(f"precast-auditor: {built.appender.error}", file=sys.stderr)
        return 1
    return 0


def _signed_by(note: str, signer: Signer) -> bool:
    try:
        open_note(note, signer.verifier)
        return True
    except CheckpointError:
        return False


def _noop(*_: object) -> None:
    return


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="precast-auditor", description=__doc__)
    p.add_argument("--port", type=int)
    p.add_argument("--host")
    args = p.parse_args(argv)

    def body() -> int:
        overrides = {k: v for k, v in vars(args).items() if v is not None}
        settings = load(AuditorSettings, audit=overrides)
        setup_logging(settings.log_level)
        return run(settings)

    return run_cli("precast-auditor", body)


if __name__ == "__main__":
    sys.exit(main())
