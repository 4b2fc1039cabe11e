"""`precast model bind FOLDER`: bind a model trained elsewhere to the fleet spec.

The manifest must already name the model's input, output, labels and `features` in the spec's
expanded column order (`precast fleet show` lists them); bind checks that, then writes the
spec's name, version and feature hash into the manifest and into model.onnx's metadata_props,
and the new sha256. Before anything is written, the bound copy is loaded the way a worker
loads it (`ModelSession`: graph input and output names and widths, output kind, labels,
statistics of standardized features, metadata, a warm-up batch), so a bound model always
loads. It refuses, with one line and the folder untouched, a model that would not: binding
records that someone checked the columns mean what the spec says, and that the worker agrees.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

from precast.errors import ConfigError
from precast.fleet import Fleet, load_fleet
from precast.models.layout import semver_key
from precast.runtime import OneLineParser, run_cli
from workers.model.manifest import Manifest, binding, first_difference
from workers.training.export import stamp


def bind(folder: Path, spec: Path | str | None) -> dict[str, object]:
    import onnx

    fleet = load_fleet(spec)
    path = folder / "manifest.json"
    manifest = Manifest.load(path)
    if semver_key(manifest.version) is None:
        raise ConfigError(
            f"{manifest.who()}: version {manifest.version!r} is not a semantic version "
            "(MAJOR.MINOR.PATCH[-pre]): the registry and `precast purge` select by it"
        )
    raw = dict(manifest.raw)
    if tuple(raw["features"]) != fleet.features.names:
        raise ConfigError(
            f"{manifest.who()}: {first_difference(manifest.features, fleet.features.names)}"
        )
    raw["spec"] = binding(fleet)
    bound = dataclasses.replace(
        manifest, spec_name=fleet.name, feature_hash=fleet.features.hash, raw=raw
    )
    bound.check_binding(fleet)  # labels, statistics of standardized features
    try:
        model = onnx.load(str(folder / "model.onnx"))
    except Exception as exc:  # noqa: BLE001 - onnx raises its own untyped errors
        raise ConfigError(f"cannot read {folder / 'model.onnx'}: {exc}") from None
    data = stamp(model, fleet, tuple(raw["labels"]), manifest.output_kind)
    raw["sha256"] = hashlib.sha256(data).hexdigest()
    text = json.dumps(raw, indent=2) + "\n"
    _loads_as_the_worker_loads(data, text, fleet)
    (folder / "model.onnx").write_bytes(data)
    path.write_text(text)
    return raw


def _loads_as_the_worker_loads(model: bytes, manifest: str, fleet: Fleet) -> None:
    """Load the bound copy with the worker's own session on the CPU; its refusal is ours."""
    from workers.model.inference import ModelSession

    with tempfile.TemporaryDirectory(prefix="precast-bind-") as tmp:
        Path(tmp, "model.onnx").write_bytes(model)
        Path(tmp, "manifest.json").write_text(manifest)
        try:
            ModelSession(Path(tmp), fleet=fleet, provider="cpu", warmup_rows=8)
        except ConfigError as exc:
            raise ConfigError(f"the worker would refuse it: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own untyped errors
            raise ConfigError(f"the worker could not run it: {exc}") from None


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="precast model bind", description=__doc__.splitlines()[0])
    p.add_argument("folder", type=Path, help="model folder (model.onnx + manifest.json)")
    p.add_argument(
        "--spec", type=Path, help="fleet spec (default: PRECAST_FLEET__SPEC, else the built-in)"
    )
    args = p.parse_args(argv)

    def body() -> int:
        spec = args.spec or os.environ.get("PRECAST_FLEET__SPEC") or None
        raw = bind(args.folder, spec)
        b = raw["spec"]
        assert isinstance(b, dict)
        print(
            f"{args.folder}: bound to fleet spec {b['name']!r} v{b['version']} "
            f"(features {str(b['feature_hash'])[:12]})",
            file=sys.stderr,
        )
        return 0

    return run_cli("model bind", body, one_line_bugs=True)


if __name__ == "__main__":
    raise SystemExit(main())
