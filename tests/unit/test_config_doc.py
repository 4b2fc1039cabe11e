"""docs/configuration.md documents every setting of every process (regenerate the tables with
`python -m tests.unit.test_config_doc`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from auditor.settings import AuditorSettings
from consumer_api.settings import ApiSettings
from opsctl.settings import StackCliSettings
from producers.settings import SimulatorSettings
from workers.settings import ContextSettings, DriftSettings, WorkerSettings

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
PROCESSES = {
    "precast (CLI, stack, demo)": StackCliSettings,
    "precast-simulator": SimulatorSettings,
    "precast-worker": WorkerSettings,
    "precast-api": ApiSettings,
    "precast-context": ContextSettings,
    "precast-drift": DriftSettings,
    "precast-auditor": AuditorSettings,
}


def env_vars(model: type[BaseModel], prefix: str = "PRECAST_") -> list[tuple[str, object, str]]:
    out = []
    for name, field in model.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out += env_vars(ann, f"{prefix}{name.upper()}__")
        else:
            default = field.default if field.default_factory is None else field.default_factory()
            out.append((f"{prefix}{name.upper()}", default, field.description or ""))
    return out


@pytest.mark.parametrize("process", sorted(PROCESSES))
def test_every_setting_is_documented(process):
    text = DOC.read_text()
    missing = [name for name, _, _ in env_vars(PROCESSES[process]) if f"`{name}`" not in text]
    assert not missing, f"add to docs/configuration.md: {missing}"


def render() -> str:
    seen: set[str] = set()
    parts = []
    for process, model in PROCESSES.items():
        rows = [r for r in env_vars(model) if r[0] not in seen]
        seen.update(r[0] for r in rows)
        if not rows:
            continue
        parts.append(f"### {process}\n\n| variable | default | notes |\n|---|---|---|")
        for name, default, desc in rows:
            d = "" if default is None else str(default)
            if "/" in d and len(d) > 40:
                d = "…/" + "/".join(d.split("/")[-3:])
            parts.append(f"| `{name}` | `{d}` | {desc} |")
        parts.append("")
    return "\n".join(parts)


if __name__ == "__main__":
    print(render())
