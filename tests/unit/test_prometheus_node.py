"""The local stack's Prometheus configuration: promtool accepts it, it loads every shipped
rule file, and the targets files it discovers are what file_sd expects."""

from __future__ import annotations

import json
import shutil
import subprocess

import yaml

from opsctl.settings import StackSettings
from opsctl.stack.prometheus_node import RULES_DIR, PrometheusNode, prometheus_config


def test_generated_config_passes_promtool_and_loads_every_rule_file(tmp_path):
    cfg = prometheus_config(tmp_path / "targets", RULES_DIR, scrape_interval_s=5)
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(cfg))
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: ./dev setup installs Debian's prometheus package"
    out = subprocess.run([promtool, "check", "config", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    # every rule file is found by the glob, and promtool checked each of them
    for rules in RULES_DIR.glob("*.rules.yml"):
        assert str(rules) in out.stdout
    assert cfg["global"]["scrape_interval"] == "5s"


def test_targets_files_are_file_sd_groups_written_whole(tmp_path):
    node = PrometheusNode(StackSettings(home=tmp_path))
    path = node.write_targets("demo", {"precast-api": ["127.0.0.1:8000"], "redis": ["h:1", "h:2"]})
    groups = json.loads(path.read_text())
    assert groups == [
        {"targets": ["127.0.0.1:8000"], "labels": {"job": "precast-api"}},
        {"targets": ["h:1", "h:2"], "labels": {"job": "redis"}},
    ]
    assert [p.name for p in node.targets_dir.iterdir()] == ["demo.json"]  # no temporary left
    node.remove_targets("demo")
    node.remove_targets("demo")  # idempotent
    assert not any(node.targets_dir.iterdir())
