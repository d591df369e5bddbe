"""A live progress line while a long apply batch runs.

The pipeline logs one line per batch when the batch is done; a batch of a million changes takes a
minute or more, with nothing said meanwhile. :class:`BatchWatcher` watches from outside the
pipeline — the streaming query's status, Spark's status tracker (active stages and their tasks) and
the pipeline's public ``reports`` / ``version`` — and logs a line every ``every`` seconds while a
batch runs. It cannot name the pipeline's phase (plan, decode, tables ...): only what Spark runs.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

log = logging.getLogger("cdc_apply.apply")

MAX_STAGES_SHOWN = 3


def query_name(pipeline_name: str) -> str:
    """The streaming query's name for a pipeline (``ApplyPipeline.run`` names its query so)."""
    return f"cdc_apply_{pipeline_name}"


class BatchWatcher:
    """Logs ``batch vN running 45s | stage 12 (...): 3/8 tasks (2 running)`` every ``every`` seconds
    while the named query runs a batch. ``start()`` runs it in a daemon thread; ``check()`` is one look."""

    def __init__(self, spark: Any, name: str, pipeline: Any, every: float,
                 logger: logging.Logger = log, clock: Callable[[], float] = time.monotonic) -> None:
        self.spark = spark
        self.name = name
        self.pipeline = pipeline
        self.every = every
        self.logger = logger
        self.clock = clock
        self._reports = len(pipeline.reports)
        self._since: float | None = None     # when the running batch started (as far as seen)
        self._said: float | None = None      # when the last line was logged
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def check(self) -> str | None:
        """Look once; return the line logged, if one was due."""
        now = self.clock()
        query = next((q for q in self.spark.streams.active if q.name == self.name), None)
        active = bool(query is not None and query.status.get("isTriggerActive"))
        done = len(self.pipeline.reports)
        if not active:
            self._since = None
        elif done != self._reports or self._since is None:
            # A batch ended since the last look (the next one starts at once under availableNow), or
            # the trigger just became active.
            self._since, self._said = now, None
        self._reports = done
        if self._since is None or now - self._since < self.every:
            return None
        if self._said is not None and now - self._said < self.every:
            return None
        self._said = now
        line = f"batch v{self.pipeline.version + 1} running {now - self._since:.0f}s | {self._stages()}"
        self.logger.info(line)
        return line

    def _stages(self) -> str:
        tracker = self.spark.sparkContext.statusTracker()
        shown = []
        for stage_id in sorted(tracker.getActiveStageIds())[:MAX_STAGES_SHOWN]:
            info = tracker.getStageInfo(stage_id)
            if info is not None:
                shown.append(f"stage {stage_id} ({info.name}): {info.numCompletedTasks}/{info.numTasks} tasks "
                             f"({info.numActiveTasks} running)")
        return " | ".join(shown) if shown else "no Spark stage running (driver work: planning or a Delta commit)"

    def _loop(self) -> None:
        poll = max(0.5, min(self.every / 3, 5.0))
        while not self._stop.wait(poll):
            try:
                self.check()
            except Exception as exc:  # noqa: BLE001 - progress only; never a reason to disturb the job
                self.logger.debug("progress check failed: %s", exc)

    def start(self) -> "BatchWatcher":
        self._thread = threading.Thread(target=self._loop, name="cdc_apply-progress", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
