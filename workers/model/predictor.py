"""What the worker needs of a model: the `Predictor` protocol.

`workers.model.inference.ModelSession` (ONNX Runtime) satisfies it as it is; the pipeline, the
registry and tests depend only on this, so a model behind another runtime, or a test double
that fails on purpose, plugs in without touching them.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np


class Predictor(Protocol):
    @property
    def version(self) -> str:
        """The model version (its manifest's semantic version), stamped on every prediction."""
        ...

    @property
    def labels(self) -> tuple[str, ...]:
        """Strategy names, in the order of `predict`'s columns."""
        ...

    def predict(self, features: np.ndarray) -> np.ndarray:
        """Scores of shape (n, len(labels)) for the (n, F) float32 matrix of `build_features`."""
        ...
