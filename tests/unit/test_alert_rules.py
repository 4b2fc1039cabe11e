"""The shipped alert rules parse and name only metrics the read API exports."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from prometheus_client import REGISTRY

import consumer_api.beacon  # noqa: F401  (registers the metrics)
import consumer_api.materializer  # noqa: F401
import consumer_api.service  # noqa: F401

RULES = Path(__file__).resolve().parents[2] / "deploy" / "alerts" / "precast-api.rules.yml"


def test_rules_use_exported_metrics_and_the_30_percent_threshold():
    doc = yaml.safe_load(RULES.read_text())
    rules = {r["alert"]: r for g in doc["groups"] for r in g["rules"]}
    assert "> 0.30" in rules["PrecastDelayOriginDominates"]["expr"]
    exported = {s.name for m in REGISTRY.collect() for s in m.samples}
    for r in rules.values():
        for name in set(re.findall(r"precast_[a-z_]+", r["expr"])):
            assert name in exported, f"{r['alert']}: {name} is not exported"
