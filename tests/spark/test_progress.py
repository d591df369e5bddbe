"""The live progress line of a long batch, watched from outside the pipeline (stand-ins, no JVM)."""

from __future__ import annotations

import logging
from collections import namedtuple
from types import SimpleNamespace

from cdc_apply.spark.progress import BatchWatcher

StageInfo = namedtuple("StageInfo", "stageId currentAttemptId name numTasks numActiveTasks numCompletedTasks "
                                    "numFailedTasks")


class _Tracker:
    def __init__(self):
        self.stages = {}

    def getActiveStageIds(self):
        return list(self.stages)

    def getStageInfo(self, stage_id):
        return self.stages.get(stage_id)


class _Spark:
    def __init__(self):
        self.query = SimpleNamespace(name="cdc_apply_shop", status={"isTriggerActive": False})
        self.streams = SimpleNamespace(active=[self.query])
        self.tracker = _Tracker()
        self.sparkContext = SimpleNamespace(statusTracker=lambda: self.tracker)


def _watcher(every=30.0):
    spark, pipeline, now = _Spark(), SimpleNamespace(reports=[], version=4), [0.0]
    watcher = BatchWatcher(spark, "cdc_apply_shop", pipeline, every, logging.getLogger("cdc_apply.apply"),
                           clock=lambda: now[0])
    return watcher, spark, pipeline, now


def test_a_batch_running_longer_than_the_interval_gets_a_line_naming_its_spark_stages(caplog):
    watcher, spark, pipeline, now = _watcher()
    spark.query.status = {"isTriggerActive": True}
    assert watcher.check() is None                        # the batch just started
    spark.tracker.stages[41] = StageInfo(41, 0, "save at merge.py:120", 8, 2, 3, 0)
    now[0] = 31.0
    with caplog.at_level(logging.INFO, logger="cdc_apply.apply"):
        line = watcher.check()
    assert line == "batch v5 running 31s | stage 41 (save at merge.py:120): 3/8 tasks (2 running)"
    assert [r.getMessage() for r in caplog.records if r.name == "cdc_apply.apply"] == [line]
    now[0] = 45.0
    assert watcher.check() is None                        # one line per interval, not per look
    now[0] = 62.0
    assert watcher.check().startswith("batch v5 running 62s")


def test_no_line_while_the_query_waits_for_its_next_trigger():
    watcher, spark, pipeline, now = _watcher()
    for t in (0.0, 40.0, 100.0):
        now[0] = t
        assert watcher.check() is None


def test_a_new_batch_restarts_the_clock_and_driver_work_is_said_as_such():
    watcher, spark, pipeline, now = _watcher(every=10.0)
    spark.query.status = {"isTriggerActive": True}
    watcher.check()
    now[0] = 9.0
    pipeline.reports.append(object())                     # batch v5 ended; v6 starts at once
    pipeline.version = 5
    assert watcher.check() is None
    now[0] = 20.0
    assert watcher.check() == ("batch v6 running 11s | no Spark stage running "
                               "(driver work: planning or a Delta commit)")
