"""The board in a real headless Chromium against a real `precast-api` process fed from Kafka:
the page loads with data, records published to Kafka appear on it, filters and keyboard
navigation work, prefetch hints and beacons arrive at the API, the console stays clean, and
a screenshot goes to docs/board.png (shown in the README). A second fleet spec's board gets its
own columns, filters and detail in the same page."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import httpx2
import pytest
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select, WebDriverWait

from precast.telemetry.objectives import AGE_ORIGINS, WAIT_ORIGINS
from schemas.partitioning import partition_for
from schemas.topics import catalog
from tests.integration.board_support import (
    SITES,
    TYPES,
    ApiProcess,
    chrome,
    close_chrome,
    console_errors,
    context,
    heartbeat,
    metric,
    prediction,
    publish,
    snapshot,
    trailer_reading,
    trailers,
)

DOCS = Path(__file__).resolve().parents[2] / "docs"
DEVICES = 10_000  # the board must stay smooth at 10,000+: only visible rows are drawn
STRATEGIES = ("replace_part", "remote_restart", "dispatch_technician", "firmware_update")


@pytest.fixture(scope="module")
def fleet(admin, kafka_settings):
    cat = catalog(prefix=f"test-board-{uuid.uuid4().hex[:8]}.", partitions=3)
    admin.ensure_topics(list(cat))
    now = int(time.time() * 1000)
    # Heartbeats first: the answers' lineage names their real offsets, and the board learns
    # site and type from them (it reads the heartbeats of the last seconds at start).
    hb, offsets, where = [], [0, 0, 0], {}
    for i in range(DEVICES):
        d = f"dev-{i:05d}"
        p = partition_for(d.encode(), 3)
        where[d], offsets[p] = (p, offsets[p]), offsets[p] + 1
        hb.append(
            (
                cat.heartbeats.name,
                d,
                heartbeat(d, SITES[i % 3], TYPES[i % 4], now - 2_000, f"hb-{d}"),
            )
        )
    publish(kafka_settings, hb)
    records = []
    for i in range(DEVICES):
        d = f"dev-{i:05d}"
        if i % 10 != 9:  # every tenth device has no answer yet: a fallback row
            s = STRATEGIES[i % len(STRATEGIES)]
            p, o = where[d]
            lineage = (cat.heartbeats.name, p, o, f"hb-{d}")
            records.append(
                (
                    cat.predictions.name,
                    d,
                    prediction(d, now - 1_000 - i, (s, "monitor_only"), lineage=lineage),
                )
            )
        if i % 7 == 0:
            alarms = {f"al-{i}": (now - 60_000, "critical" if i % 2 else "warning")}
            records.append(
                (cat.device_context.name, d, context(d, now - 1000, {f"wo-{i}": "high"}, alarms))
            )
    publish(kafka_settings, records)
    yield cat
    admin.delete_topics([t.name for t in cat])


@pytest.fixture(scope="module")
def api(fleet, kafka_settings):
    with ApiProcess(kafka_settings, fleet) as proc:
        yield proc


@pytest.fixture(scope="module")
def browser(api):
    driver = chrome(1366, 768)
    driver.get(api.url + "/board/")
    WebDriverWait(driver, 30).until(
        lambda d: d.execute_script("return window.precastBoard && window.precastBoard.ready")
    )
    yield driver
    errors = console_errors(driver)
    close_chrome(driver)
    assert errors == [], errors


def _rows(driver) -> list[list[str]]:
    return driver.execute_script(
        "return [...document.querySelectorAll('#rows tr:not(.spacer):not([hidden])')]"
        ".map(tr => [...tr.cells].map(c => c.textContent))"
    )


def test_the_page_loads_with_data_and_renders_only_what_is_visible(browser):
    WebDriverWait(browser, 20).until(lambda d: "10,000" in d.find_element(By.ID, "count").text)
    rows = _rows(browser)
    assert (
        rows[0][0] == "dev-00000" and rows[0][1] == "replace_part" and rows[0][3] == "precomputed"
    )
    assert 10 < len(rows) < 60  # virtualised: a screenful of rows in the DOM, not 10,000
    table = browser.find_element(By.CSS_SELECTOR, "#fleet-grid table")
    assert table.get_attribute("aria-rowcount") == str(DEVICES + 1)  # the header row counts
    assert rows[9][3] == "fallback" and rows[9][1] == "monitor_only"
    # site and type arrive with the heartbeats; the fleet panel and its streams are live
    WebDriverWait(browser, 20).until(
        lambda d: _rows(d)[1][6] == SITES[1] and _rows(d)[1][7] == TYPES[1]
    )
    WebDriverWait(browser, 20).until(lambda d: d.find_element(By.ID, "p-devices").text == "10,000")
    assert browser.find_element(By.ID, "conn").text == "live"
    assert browser.find_element(By.TAG_NAME, "h1").text.startswith("precast")
    for sel in browser.find_elements(By.CSS_SELECTOR, "#filters select, #filters input"):
        label = sel.find_element(By.XPATH, "ancestor::label")
        assert label.text.strip(), "every control has a label"


def test_a_wall_display_gets_larger_text_and_still_only_what_is_visible(browser):
    def metrics(w: int, h: int) -> None:
        browser.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": w, "height": h, "deviceScaleFactor": 1, "mobile": False},
        )

    metrics(3840, 2160)
    try:
        WebDriverWait(browser, 10).until(
            lambda d: (
                d.execute_script("return getComputedStyle(document.documentElement).fontSize")
                == "22px"
            )
        )
        WebDriverWait(browser, 10).until(lambda d: 30 < len(_rows(d)) < 80)
        heights = browser.execute_script(
            "return [...document.querySelectorAll('#rows tr:not(.spacer):not([hidden])')]"
            ".map(tr => tr.getBoundingClientRect().height)"
        )
        assert min(heights) >= 38  # rows grow with the text; the scroller measured them
    finally:
        metrics(1366, 768)
    WebDriverWait(browser, 10).until(lambda d: 10 < len(_rows(d)) < 40)


def test_an_event_published_to_kafka_appears_on_the_page(browser, fleet, kafka_settings):
    now = int(time.time() * 1000)
    publish(
        kafka_settings,
        [
            (
                fleet.predictions.name,
                "dev-00002",
                prediction("dev-00002", now, ("firmware_update",), offset=99),
            )
        ],
    )
    WebDriverWait(browser, 20).until(lambda d: _rows(d)[2][1] == "firmware_update")
    publish(
        kafka_settings,
        [
            (
                fleet.device_context.name,
                "dev-00003",
                context("dev-00003", now, {}, {"al-x": (now, "critical")}),
            )
        ],
    )
    WebDriverWait(browser, 20).until(lambda d: _rows(d)[3][8] == "critical")
    paints = browser.execute_script("return window.precastBoard.paints")
    assert any(p[0] == "dev-00002" and p[1] == now for p in paints)


def test_filters_sort_and_search(browser):
    site = Select(browser.find_element(By.ID, "f-site"))
    site.select_by_value(SITES[2])
    WebDriverWait(browser, 10).until(lambda d: all(r[6] == SITES[2] for r in _rows(d)))
    site.select_by_value("")
    q = browser.find_element(By.ID, "f-q")
    q.send_keys("dev-0199")
    WebDriverWait(browser, 10).until(
        lambda d: [r[0] for r in _rows(d)] == [f"dev-0199{i}" for i in range(10)]
    )
    q.send_keys(Keys.CONTROL, "a")
    q.send_keys(Keys.DELETE)  # typed, so the page sees `input` (clear() does not fire it)
    WebDriverWait(browser, 10).until(lambda d: len(_rows(d)) > 10)
    browser.find_element(By.CSS_SELECTOR, "th[data-col=alarm] button").click()
    WebDriverWait(browser, 10).until(lambda d: _rows(d)[0][8] == "critical")
    browser.find_element(By.CSS_SELECTOR, "th[data-col=device_id] button").click()
    WebDriverWait(browser, 10).until(lambda d: _rows(d)[0][0] == "dev-00000")


def test_keyboard_navigation_opens_and_closes_a_device(browser, api):
    grid = browser.find_element(By.ID, "fleet-grid")
    browser.execute_script("arguments[0].focus()", grid)
    grid.send_keys(Keys.HOME, *[Keys.ARROW_DOWN] * 7)
    sel = browser.find_element(By.CSS_SELECTOR, "#rows tr.sel")
    assert sel.get_attribute("data-id") == "dev-00007"
    grid.send_keys(Keys.ENTER)
    WebDriverWait(browser, 10).until(
        lambda d: d.find_element(By.ID, "device-h").text == "dev-00007"
    )
    WebDriverWait(browser, 10).until(
        lambda d: len(d.find_elements(By.CSS_SELECTOR, "#d-top tr")) == 2
    )
    text = browser.find_element(By.ID, "device").text
    assert "replace_part" not in text.split("Top strategies")[0]
    assert "Work order wo-7 (high)" in text and "Alarm al-7: critical" in text  # context
    assert "Open high priority\n1" in text  # every context value
    assert browser.find_element(By.ID, "d-meta").text == f"{SITES[1]} · {TYPES[3]}"
    assert f"Hw model\n{TYPES[3]}-r1" in text  # the spec's detail fields
    # lineage: the heartbeat that produced the answer, read back from Kafka through the spec
    WebDriverWait(browser, 10).until(
        lambda d: (
            "heartbeats hb-dev-00007: cpu_pct 12.5 %, mem_pct 40 %"
            in d.find_element(By.ID, "d-lineage").text
        )
    )
    assert "1.0.0" in text  # model version
    WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#d-history tr"))
    browser.save_screenshot(str(DOCS / "board.png"))
    browser.switch_to.active_element.send_keys(Keys.ESCAPE)
    WebDriverWait(browser, 10).until(lambda d: not d.find_element(By.ID, "device").is_displayed())
    assert browser.switch_to.active_element.get_attribute("id") == "fleet-grid"


@pytest.fixture
def http():
    with httpx2.Client(timeout=10) as client:  # one connection for every scrape
        yield client


def test_prefetch_hints_and_beacons_arrive_at_the_api(browser, api, http):
    before = http.get(api.url + "/metrics").text
    got: dict[str, float] = {}

    def grown(name: str, **labels: str) -> float:
        after = http.get(api.url + "/metrics").text
        got[name] = metric(after, name, **labels) - metric(before, name, **labels)
        return got[name]

    def wait(what, cond) -> None:
        try:
            WebDriverWait(browser, 20, 0.25).until(lambda _: cond())
        except TimeoutException:
            raise AssertionError(f"{what} not seen at the API: {got}") from None

    # Rows never shown before come into view: the board prefetches them, and the API passes
    # the devices that have an answer on to the workers as read hints (a device with no data
    # at all never asks: issue 11), once per hint interval.
    grid = browser.find_element(By.ID, "fleet-grid")
    browser.execute_script("arguments[0].scrollTop = 28 * 900", grid)
    wait("prefetch", lambda: grown("precast_api_read_hints_total", result="sent") > 0)
    # Two devices opened by the operator: two beacons with the browser's own timings.
    for i in (6, 9):  # past the 3 rows rendered above the viewport
        row = browser.find_elements(By.CSS_SELECTOR, "#rows tr:not(.spacer):not([hidden])")[i]
        row.click()
        device = row.get_attribute("data-id")
        WebDriverWait(browser, 10).until(
            lambda d, x=device: d.find_element(By.ID, "device-h").text == x
        )
        browser.switch_to.active_element.send_keys(Keys.ESCAPE)
    wait(
        "beacons",
        lambda: (
            grown("precast_beacon_views_total") >= 2
            and grown("precast_wait_origin_seconds_total", origin="front_jank") > 0
            and grown("precast_wait_origin_seconds_total", origin="network_qoe") > 0
            and grown("precast_age_origin_seconds_total", origin="cache") > 0
        ),
    )
    # The two panels now come from these beacons, each with its own origins: the wait's
    # (the page, the network, the read, the store) and the age's (the answers sit in the
    # store: cache is most of their age). One share is large in each, and that is no banner:
    # nothing rose from a baseline (the rule: tests/unit/test_signals.py).
    text = http.get(api.url + "/metrics").text
    wait = {o: metric(text, "precast_wait_origin_share", origin=o) for o in WAIT_ORIGINS}
    age = {o: metric(text, "precast_age_origin_share", origin=o) for o in AGE_ORIGINS}
    assert sum(wait.values()) == pytest.approx(1.0, abs=1e-4) and wait["front_jank"] > 0, wait
    assert max(age, key=lambda o: age[o]) == "cache", age
    WebDriverWait(browser, 10).until(
        lambda d: (
            "front_jank" in d.find_element(By.ID, "p-wait-shares").text
            and "cache" in d.find_element(By.ID, "p-age-shares").text
            and d.find_element(By.ID, "p-wait-p95").text != "–"
        )
    )
    assert "network_qoe" not in browser.find_element(By.ID, "p-age-shares").text
    assert not browser.find_element(By.ID, "banner").is_displayed()


def test_a_burst_of_updates_to_every_device_is_applied_and_the_page_stays_usable(
    browser, fleet, kafka_settings
):
    now = int(time.time() * 1000)
    burst = [
        (
            fleet.predictions.name,
            f"dev-{i:05d}",
            prediction(f"dev-{i:05d}", now + 5, ("remote_restart",)),
        )
        for i in range(DEVICES)
    ]
    publish(kafka_settings, burst)  # 10,000 answers at once
    WebDriverWait(browser, 30).until(
        lambda d: (
            all(r[1] == "remote_restart" for r in _rows(d)[:20])
            and d.find_element(By.ID, "p-fresh").text == "100.0 %"
        )
    )
    grid = browser.find_element(By.ID, "fleet-grid")
    browser.execute_script("arguments[0].focus()", grid)
    grid.send_keys(Keys.HOME, Keys.ARROW_DOWN)  # the page still answers the keyboard
    assert (
        browser.find_element(By.CSS_SELECTOR, "#rows tr.sel").get_attribute("data-id")
        == "dev-00001"
    )
    far = browser.execute_script(
        "arguments[0].scrollTop = 28 * 9000; return new Promise(r => requestAnimationFrame(() => "
        "requestAnimationFrame(() => r([...document.querySelectorAll('#rows tr:not(.spacer):not([hidden])')]"
        ".map(tr => tr.cells[1].textContent)))))",
        grid,
    )
    assert far and all(s == "remote_restart" for s in far)  # rows far down got the burst too
    browser.execute_script("arguments[0].scrollTop = 0", grid)
    WebDriverWait(browser, 10).until(lambda d: _rows(d)[0][0] == "dev-00000")


BOARD_TOKEN = "pct_board-browser-test-token-0123456789"


def test_with_a_token_the_board_asks_for_it_and_uses_it_for_every_call(topics, kafka_settings):
    now = int(time.time() * 1000)
    publish(kafka_settings, [(topics.predictions.name, "dev-t1", prediction("dev-t1", now))])
    with ApiProcess(kafka_settings, topics, PRECAST_API__AUTH_TOKEN=BOARD_TOKEN) as api:
        driver = chrome(1366, 768)
        try:
            driver.get(api.url + "/board/")
            WebDriverWait(driver, 20).until(lambda d: d.find_element(By.ID, "auth").is_displayed())
            assert driver.find_element(By.ID, "conn").text == "token needed"
            token = driver.find_element(By.ID, "token")
            assert driver.find_element(By.CSS_SELECTOR, "label[for=token]").text == "API token"
            token.send_keys(BOARD_TOKEN, Keys.ENTER)
            WebDriverWait(driver, 20).until(lambda d: [r[0] for r in _rows(d)] == ["dev-t1"])
            WebDriverWait(driver, 20).until(lambda d: d.find_element(By.ID, "conn").text == "live")
            assert not driver.find_element(By.ID, "auth").is_displayed()
            # the only errors: the first data calls, refused without the token
            errors = console_errors(driver)
            assert errors and all("401" in e for e in errors), errors
        finally:
            close_chrome(driver)


def test_a_miss_waits_for_the_computed_answer_and_reports_that_wait_as_model(admin, kafka_settings):
    # An expired answer served as the fallback (EXPIRED=fallback): the API asks for a
    # precompute, the page shows the default and waits; when the computed answer arrives on the
    # board's stream and replaces it, that part of the view's wait is the inference's.
    cat = catalog(prefix=f"test-miss-{uuid.uuid4().hex[:8]}.", partitions=1)
    admin.ensure_topics(list(cat))
    now = int(time.time() * 1000)
    publish(
        kafka_settings,
        [
            (cat.heartbeats.name, "dev-m1", heartbeat("dev-m1", SITES[0], TYPES[0], now - 1_000)),
            (
                cat.predictions.name,
                "dev-m1",
                prediction("dev-m1", now - 120_000, horizon_ms=60_000),
            ),
        ],
    )
    env = {"PRECAST_API__EXPIRED": "fallback", "PRECAST_API__GRACE_S": "600"}
    try:
        with ApiProcess(kafka_settings, cat, **env) as api, httpx2.Client(timeout=10) as http:
            driver = chrome(1366, 768)
            try:
                driver.get(api.url + "/board/")
                WebDriverWait(driver, 30).until(
                    lambda d: d.execute_script("return window.precastBoard.ready")
                )
                row = driver.find_element(By.CSS_SELECTOR, '#rows tr[data-id="dev-m1"]')
                row.click()
                WebDriverWait(driver, 10).until(
                    lambda d: "expired" in d.find_element(By.ID, "d-answer").text
                )
                time.sleep(1.0)  # the inference the operator waits for
                publish(
                    kafka_settings, [(cat.predictions.name, "dev-m1", prediction("dev-m1", now))]
                )
                WebDriverWait(driver, 20).until(
                    lambda d: "precomputed" in d.find_element(By.ID, "d-answer").text
                )

                def model_s() -> float:
                    text = http.get(api.url + "/metrics").text
                    return metric(text, "precast_wait_origin_seconds_total", origin="model")

                WebDriverWait(driver, 20, 0.5).until(lambda _: model_s() > 0)  # beacons: 5 s
                assert 1.0 <= model_s() < 10.0, model_s()
                text = http.get(api.url + "/metrics").text
                assert metric(text, "precast_beacon_views_total") == 1  # one view, not two
                assert metric(text, "precast_age_origin_seconds_total", origin="cache") == 0
                assert console_errors(driver) == []
            finally:
                close_chrome(driver)
    finally:
        admin.delete_topics([t.name for t in cat])


def test_a_second_fleet_spec_gets_its_own_columns_filters_and_detail(topics, kafka_settings):
    path, fleet = trailers()
    now = int(time.time() * 1000)
    records = []
    for i in range(6):
        d = f"tr-{i}"
        records.append((topics.heartbeats.name, d, trailer_reading(d, now - 1_000, -18.5 + i,
                        depot=("kiel", "hamburg")[i % 2], model=("R1", "R2")[i % 2])))  # fmt: skip
        records.append((topics.predictions.name, d, prediction(d, now, ("defrost",))))
    faults = [("faults", {"event_id": "e1", "event_time_ms": now - 60_000, "fault_id": "F-7",
                          "level": "severe"})]  # fmt: skip
    records.append((topics.device_context.name, "tr-3", snapshot(fleet, "tr-3", faults, now)))
    publish(kafka_settings, records)
    with ApiProcess(kafka_settings, topics, PRECAST_FLEET__SPEC=str(path)) as api:
        driver = chrome(1366, 768)
        try:
            driver.get(api.url + "/board/")
            WebDriverWait(driver, 20).until(lambda d: len(_rows(d)) == 6)
            heads = [th.text for th in driver.find_elements(By.CSS_SELECTOR, "#head th")]
            assert heads == ["Device", "Top strategy", "Score", "Source", "Age", "Age origin",
                             "Depot", "Box temp c (degC)", "Door open", "Alarm",
                             "Days since visit (d)", "Last visit cost (EUR)"]  # fmt: skip
            WebDriverWait(driver, 20).until(lambda d: _rows(d)[3][6:] == [
                "hamburg", "-15.5", "no", "fault", "365", "0"])  # fmt: skip
            labels = [x.text.split("\n")[0].strip()
                      for x in driver.find_elements(By.CSS_SELECTOR, "#filters label")]  # fmt: skip
            assert labels == ["Device", "Trailer model", "Depot", "Strategy", "Alarm", "Source"]
            Select(driver.find_element(By.ID, "f-trailer_model")).select_by_value("R1")
            WebDriverWait(driver, 10).until(
                lambda d: [r[0] for r in _rows(d)] == ["tr-0", "tr-2", "tr-4"]
            )
            Select(driver.find_element(By.ID, "f-trailer_model")).select_by_value("")
            driver.find_element(By.CSS_SELECTOR, "th[data-col=alarm] button").click()
            WebDriverWait(driver, 10).until(lambda d: _rows(d)[0][0] == "tr-3")
            driver.find_element(By.CSS_SELECTOR, "#rows tr[data-id=tr-3]").click()
            WebDriverWait(driver, 10).until(
                lambda d: "Fault F-7: fault at" in d.find_element(By.ID, "d-ctx").text
            )
            text = driver.find_element(By.ID, "device").text
            assert driver.find_element(By.ID, "d-meta").text == "hamburg · -15.5 · no"
            assert "Axles\n3" in text and "Severe faults 6h\n1" in text
            assert console_errors(driver) == []
        finally:
            close_chrome(driver)
