"""A model folder's manifest (`manifest.json` beside `model.onnx`) and its binding to a fleet
spec: the ordered, expanded feature names, the labels and the spec's feature hash, also
stamped into the ONNX file's `metadata_props` (`precast.*` keys). A worker or a shadow run
refuses a model whose binding differs from its spec, with one line naming the mismatch:
serving systems check tensor shapes, which would not notice that column 7 means something else.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from precast.errors import ConfigError
from precast.fleet import Fleet

OUTPUT_KINDS = ("probabilities", "logits")
# metadata_props keys stamped into model.onnx (onnx.helper.set_model_props)
META_SPEC_HASH = "precast.feature_hash"
META_FEATURES = "precast.features"
META_LABELS = "precast.labels"
META_OUTPUT_KIND = "precast.output_kind"


@dataclass(frozen=True)
class Manifest:
    name: str
    version: str
    input: str
    output: str
    features: tuple[str, ...]
    labels: tuple[str, ...]
    sha256: str | None
    output_kind: str
    spec_name: str | None
    spec_version: int | None
    feature_hash: str | None
    standardization: dict[str, tuple[float, float]]
    raw: dict[str, Any]

    @classmethod
    def load(cls, path: Path) -> Manifest:
        try:
            raw = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ConfigError(f"cannot read model manifest {path}: {exc}") from None
        need = ("name", "version", "input", "output", "features", "labels")
        missing = [k for k in need if k not in raw]
        if missing:
            raise ConfigError(f"model manifest {path} lacks {', '.join(missing)}")
        kind = raw.get("output_kind", "probabilities")
        if kind not in OUTPUT_KINDS:
            raise ConfigError(
                f"model manifest {path}: output_kind {kind!r} is not one of {OUTPUT_KINDS}"
            )
        spec = raw.get("spec") or {}
        stats = raw.get("standardize") or {}
        try:
            standardization = {str(k): (float(v[0]), float(v[1])) for k, v in stats.items()}
        except (TypeError, ValueError, IndexError, AttributeError):
            raise ConfigError(
                f"model manifest {path}: standardize holds [mean, std] per feature"
            ) from None
        return cls(
            raw["name"],
            str(raw["version"]),
            raw["input"],
            raw["output"],
            tuple(raw["features"]),
            tuple(raw["labels"]),
            raw.get("sha256"),
            kind,
            spec.get("name"),
            spec.get("version"),
            spec.get("feature_hash"),
            standardization,
            raw,
        )

    def who(self) -> str:
        return f"model {self.name} {self.version}"

    def check_binding(self, fleet: Fleet) -> None:
        """Raise ConfigError (one line) unless this model was made for `fleet`'s features."""
        fm = fleet.features
        if self.feature_hash is None:
            raise ConfigError(
                f"{self.who()} is bound to no fleet spec (a manifest without `spec`): "
                f"bind it with `precast model bind <folder>` after checking its features"
            )
        if self.features != fm.names:
            raise ConfigError(f"{self.who()}: {first_difference(self.features, fm.names)}")
        if self.feature_hash != fm.hash:
            raise ConfigError(
                f"{self.who()} is bound to fleet spec {self.spec_name!r} v{self.spec_version} "
                f"(features {self.feature_hash[:12]}); this process runs {fleet.describe()}: "
                "same feature names, different definitions"
            )
        if set(self.labels) != set(fleet.spec.labels) or len(self.labels) != len(fleet.spec.labels):
            extra = sorted(set(self.labels) - set(fleet.spec.labels))
            lacking = sorted(set(fleet.spec.labels) - set(self.labels))
            raise ConfigError(
                f"{self.who()} labels differ from fleet spec {fleet.name!r}: "
                f"not in the spec {extra}, missing {lacking}"
            )
        missing = [n for n in fm.standardized if n not in self.standardization]
        if missing:
            raise ConfigError(
                f"{self.who()}: no fitted statistics for standardized feature {missing[0]!r}"
            )

    def check_metadata(self, props: dict[str, str]) -> None:
        """The `precast.*` metadata_props of model.onnx, when present, must agree."""
        if META_SPEC_HASH in props and props[META_SPEC_HASH] != self.feature_hash:
            raise ConfigError(
                f"{self.who()}: model.onnx is bound to features {props[META_SPEC_HASH][:12]}, "
                f"its manifest to {str(self.feature_hash)[:12]}"
            )
        for key, mine in ((META_FEATURES, self.features), (META_LABELS, self.labels)):
            if key in props:
                try:
                    theirs = tuple(json.loads(props[key]))
                except (json.JSONDecodeError, TypeError):
                    raise ConfigError(
                        f"{self.who()}: model.onnx metadata {key} is not a JSON list"
                    ) from None
                if theirs != mine:
                    raise ConfigError(
                        f"{self.who()}: model.onnx metadata {key} differs from the manifest"
                    )
        if META_OUTPUT_KIND in props and props[META_OUTPUT_KIND] != self.output_kind:
            raise ConfigError(
                f"{self.who()}: model.onnx says its output is {props[META_OUTPUT_KIND]}"
            )


def first_difference(model: tuple[str, ...], spec: tuple[str, ...]) -> str:
    for i, (a, b) in enumerate(zip(model, spec, strict=False)):
        if a != b:
            return f"feature {i} is {a!r} in the model, {b!r} in the fleet spec"
    if len(model) != len(spec):
        return f"the model takes {len(model)} features, the fleet spec builds {len(spec)}"
    return "features agree"


def binding(fleet: Fleet) -> dict[str, Any]:
    """The manifest's `spec` block for a model trained on `fleet`'s features."""
    return {
        "name": fleet.name,
        "version": fleet.spec.fleet.version,
        "feature_hash": fleet.features.hash,
    }


def metadata_props(
    fleet: Fleet, labels: tuple[str, ...], output_kind: str = "probabilities"
) -> dict[str, str]:
    """The `precast.*` metadata_props to stamp into a model.onnx for `fleet` (labels in the
    order of the model's output columns)."""
    return {
        META_SPEC_HASH: fleet.features.hash,
        META_FEATURES: json.dumps(list(fleet.features.names)),
        META_LABELS: json.dumps(list(labels)),
        META_OUTPUT_KIND: output_kind,
    }
