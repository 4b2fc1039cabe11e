"""Helpers for the board's tests and benchmark: device records published to Kafka, the read
API as its own process, headless Chromium (Debian's chromium + chromedriver, selenium), and a
small second fleet spec (refrigerated trailers) unlike the built-in one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import orjson

from opsctl.stack.process import free_port
from precast.fleet import Fleet, load_fleet
from precast.fleet.snapshot import to_json
from precast.kafka import Producer
from precast.settings import KafkaSettings

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
SITES = ("site-north", "site-south", "site-east")
TYPES = ("gateway", "camera", "meter", "pump_controller")


def heartbeat(
    device: str, site: str, device_type: str, t: int, event_id: str | None = None
) -> bytes:
    return orjson.dumps(
        {
            "schema_version": 1,
            "event_id": event_id or uuid.uuid4().hex[:16],
            "device_id": device,
            "event_time_ms": t,
            "produced_at_ms": t,
            "kind": "heartbeat",
            "device_type": device_type,
            "firmware": "1.0.0",
            "metrics": {
                "cpu_pct": 12.5,
                "mem_pct": 40.0,
                "temperature_c": 41.0,
                "error_rate": 0.01,
                "signal_quality": 0.9,
                "uptime_s": 3600.0,
            },
            "meta": {"info": {"site": site, "hw_model": f"{device_type}-r1"}},
        }
    )


def snapshot(
    fleet: Fleet, device: str, events: list[tuple[str, dict]], as_of_ms: int | None = None
) -> bytes:
    """A device-context snapshot as precast-context publishes it: `events` (stream name, flat
    event without device_id) folded by the spec's own reducer, then `precast.fleet.snapshot`."""
    model = fleet.context
    ctx = model.new(device)
    for stream, event in events:
        model.apply(ctx, stream, {"device_id": device, **event})
    if as_of_ms is not None:
        ctx.as_of_ms = max(ctx.as_of_ms, as_of_ms)
    return to_json(model, ctx, ctx.as_of_ms)


def context(
    device: str, t: int, work_orders: dict[str, str], alarms: dict[str, tuple[int, str]]
) -> bytes:
    """A snapshot of the built-in fleet as of `t`: these work orders open (ID -> priority)
    and these alarms raised (ID -> (event time, severity))."""
    events = [
        ("work_orders", {"event_id": f"e-{k}", "event_time_ms": t, "work_order_id": k,
                         "status": "opened", "priority": p, "category": "test"})
        for k, p in work_orders.items()
    ] + [
        ("alarms", {"event_id": f"e-{k}", "event_time_ms": at, "alarm_id": k, "severity": sev,
                    "code": "TEST", "cleared": False})
        for k, (at, sev) in alarms.items()
    ]  # fmt: skip
    return snapshot(load_fleet(), device, events, t)


# A second fleet spec (refrigerated trailers), as unlike the built-in one as the board can meet.
TRAILERS = Path(__file__).with_name("board_trailers.toml")


def trailers() -> tuple[Path, Fleet]:
    """The trailers spec's path and its compiled fleet."""
    return TRAILERS, load_fleet(TRAILERS)


def trailer_reading(device: str, t_ms: int, temp: float, *, depot: str = "hamburg",
                    model: str = "R2", door: bool = False) -> bytes:  # fmt: skip
    """A trailer heartbeat as its devices send it (ts in seconds)."""
    return orjson.dumps(
        {"deviceId": device, "id": uuid.uuid4().hex[:12], "ts": t_ms / 1000, "box": {"temp": temp},
         "door": door, "model": model, "depot": depot, "axles": 3}
    )  # fmt: skip


def prediction(
    device: str,
    computed: int,
    strategies: tuple[str, ...] = ("replace_part", "remote_restart", "monitor_only"),
    *,
    horizon_ms: int = 600_000,
    trigger: str = "heartbeat",
    offset: int = 0,
    lineage: tuple[str, int, int, str] | None = None,
) -> bytes:
    """A PredictionSet record; `lineage` = (topic, partition, offset, event_id) of its input."""
    topic, part, off, ev = lineage or ("heartbeats", 0, offset, f"ev-{device}-{offset}")
    scores = (0.62, 0.25, 0.13)
    return orjson.dumps(
        {
            "schema_version": 1,
            "device_id": device,
            "candidates": [
                {"strategy": s, "score": sc} for s, sc in zip(strategies, scores, strict=False)
            ],
            "model_version": "1.0.0",
            "computed_at_ms": computed,
            "valid_until_ms": computed + horizon_ms,
            "produced_at_ms": computed + 15,
            "trigger": trigger,
            "lineage": [{"topic": topic, "partition": part, "offset": off, "event_id": ev}],
            "inference_ms": 2,
        }
    )


def publish(kafka: KafkaSettings, records: list[tuple[str, str, bytes]]) -> None:
    """(topic, key, value) records, flushed."""
    p = Producer(kafka)
    for topic, key, value in records:
        p.produce(topic, key.encode(), value)
    p.flush()


class ApiProcess:
    """`python -m consumer_api.cli` on a free port over a topic catalog; SIGTERM on exit."""

    def __init__(self, kafka: KafkaSettings, topics, **env: str) -> None:
        self.port = free_port()
        self.env = {
            **os.environ,
            "PRECAST_KAFKA__BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
            "PRECAST_TOPICS__PREFIX": topics.predictions.name.removesuffix("predictions"),
            "PRECAST_TOPICS__PARTITIONS": str(topics.predictions.partitions),
            "PRECAST_REDIS__URL": "",
            "PRECAST_API__PORT": str(self.port),
            "PRECAST_LOG_LEVEL": "WARNING",
            **env,
        }
        self.proc: subprocess.Popen[str] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ApiProcess:
        import httpx2

        self.proc = subprocess.Popen(
            [sys.executable, "-m", "consumer_api.cli"],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read() if self.proc.stderr else ""
                raise AssertionError(f"precast-api exited: {err}")
            try:
                if httpx2.get(self.url + "/readyz", timeout=1).status_code == 200:
                    return self
            except httpx2.TransportError:
                pass
            time.sleep(0.1)
        self.__exit__()
        raise AssertionError("precast-api not ready within 60 s")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self.proc is not None and self.proc.stderr is not None:
            self.proc.stderr.close()


def chrome(width: int = 1366, height: int = 768):
    """Headless Chromium through Debian's chromedriver, with the browser console captured."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        raise AssertionError(
            f"{', '.join(missing)} missing: ./dev setup installs chromium and chromium-driver"
        )
    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--window-size={width},{height}",
        "--enable-precise-memory-info",
    ):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=opts, service=Service(str(CHROMEDRIVER)))
    # The page's viewport itself at width x height (the window size includes the browser frame).
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
    )
    return driver


def close_chrome(driver) -> None:
    """Quit the browser and close the client's own connections to chromedriver: quit() leaves
    urllib3's pooled sockets to the garbage collector, whose ResourceWarning then fails
    whichever later test happens to trigger the collection (warnings are errors here)."""
    try:
        driver.quit()
    finally:
        driver.command_executor.close()


def console_errors(driver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def metric(text: str, name: str, **labels: str) -> float:
    """Sum of the samples of one metric whose labels include `labels` (0 when absent)."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name) or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        base, _, rest = head.partition("{")
        if base != name:
            continue
        if all(f'{k}="{v}"' in rest for k, v in labels.items()):
            total += float(value)
    return total
