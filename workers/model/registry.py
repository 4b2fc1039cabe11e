"""Model registry and hot swap: a folder of model versions; the worker serves the one named in
`<registry>/ACTIVE` (or, without that file, the highest semantic version), loads a new one in
the background without a restart, and switches between batches: a batch holds one model
reference from start to end, so no batch mixes versions."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from precast.errors import PrecastError
from precast.models.layout import ACTIVE_FILE, RegistryError, semver_key, wanted_version
from workers.model.predictor import Predictor
from workers.model.serving_metrics import MODEL_FAILURES, MODEL_SINCE, MODEL_VERSION

log = logging.getLogger("precast.workers.model.registry")

__all__ = ["ACTIVE_FILE", "ModelRegistry", "semver_key", "wanted_version"]


class ModelRegistry:
    """`current` is the model to use for the next batch. `poll()` (between batches) starts a
    background load when the registry names another version and swaps when it is ready."""

    def __init__(
        self,
        load: Callable[[Path], Predictor],
        *,
        path: Path | None = None,
        registry: Path | None = None,
        poll_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._load, self.registry, self.poll_s, self._clock = load, registry, poll_s, clock
        if registry is not None:
            version = wanted_version(registry)
            if version is None:
                raise PrecastError(
                    f"model registry {registry} holds no model version (folders with manifest.json)"
                )
            path = registry / version
        elif path is None:
            raise ValueError("need a model path or a registry folder")
        self.current: Predictor = load(path)
        MODEL_VERSION.labels(self.current.version).set(1)
        MODEL_SINCE.labels(self.current.version).set(time.time())
        MODEL_FAILURES.labels(self.current.version)  # a zero series, not a gap, until one fails
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="model-load")
        self._loading: tuple[str, Future[Predictor]] | None = None
        self._failed: set[str] = set()
        self._next_check = clock() + poll_s
        self._force = threading.Event()
        self._refused: str | None = None  # the last bad ACTIVE, logged once
        self.swaps = 0

    def request_check(self) -> None:
        """Check the registry at the next poll instead of waiting (SIGHUP)."""
        self._force.set()

    def poll(self) -> str | None:
        """Swap in a finished load; maybe start a new one. Returns the new version on a swap."""
        if self.registry is None:
            return None
        if self._loading is not None:
            version, fut = self._loading
            if not fut.done():
                return None
            self._loading = None
            try:
                model = fut.result()
            except Exception as exc:  # noqa: BLE001 - a bad version must not stop serving
                self._failed.add(version)
                log.error(
                    "model %s not loaded, still serving %s: %s", version, self.current.version, exc
                )
                return None
            if model.version != version:
                self._failed.add(version)
                log.error(
                    "registry folder %s holds model version %s; not swapping",
                    version,
                    model.version,
                )
                return None
            old = self.current.version
            self.current = model
            self.swaps += 1
            MODEL_VERSION.labels(old).set(0)
            MODEL_VERSION.labels(model.version).set(1)
            MODEL_SINCE.remove(old)
            MODEL_SINCE.labels(model.version).set(time.time())
            MODEL_FAILURES.labels(model.version)
            log.info("model swapped: %s -> %s", old, model.version)
            return model.version
        now = self._clock()
        if now < self._next_check and not self._force.is_set():
            return None
        self._force.clear()
        self._next_check = now + self.poll_s
        try:
            wanted = wanted_version(self.registry)
        except RegistryError as exc:
            # A bad ACTIVE must not stop serving: keep the model, say so once per content.
            if str(exc) != self._refused:
                self._refused = str(exc)
                log.error("%s; still serving %s", exc, self.current.version)
            return None
        self._refused = None
        if wanted and wanted != self.current.version and wanted not in self._failed:
            log.info("loading model %s (serving %s)", wanted, self.current.version)
            self._loading = (wanted, self._pool.submit(self._load, self.registry / wanted))
        return None

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
