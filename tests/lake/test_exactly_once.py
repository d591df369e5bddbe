"""Crash the apply job at several points and restart it: silver ends as after one clean run.

One lake, two micro-batches, three job runs: the first dies between the two
table MERGEs of the first batch, the second dies after every MERGE and log of
the second batch but before its progress row, the third finishes. The result is compared with the
reference applier (the plain-Python semantics checked against PostgreSQL) —
a keyless table with duplicates would show any MERGE applied twice.
"""

from __future__ import annotations

import pytest

from cdc_apply.delta.engine import spark_tables
from cdc_apply.pgoutput import UNCHANGED_TOAST
from cdc_apply.testing.reference import ReferenceApplier
from cdc_apply.testing.stream import StreamBuilder

pytestmark = pytest.mark.spark


class Crash(RuntimeError):
    pass


def _stream():
    b = StreamBuilder("crashy")
    a = b.relation("public", "a", [("id", "int4", True), ("v", "text", False)])
    bag = b.relation("public", "bag", [("x", "int4", True)], replica_identity="f")
    cuts = []
    with b.transaction() as tx:
        for i in range(5):
            tx.insert(a, {"id": i, "v": f"v{i}"})
            tx.insert(bag, {"x": i % 2})
    cuts.append(len(b.rows()))
    with b.transaction() as tx:
        tx.update(a, {"id": 1, "v": UNCHANGED_TOAST})
        tx.update(a, {"id": 2, "v": "two"})
        tx.delete(a, key={"id": 3})
        tx.insert(bag, {"x": 1})
        tx.delete(bag, old={"x": 0})
        tx.message("m", b"once")
    with b.transaction() as tx:
        tx.insert(a, {"id": 9, "v": "nine"})
        tx.insert(bag, {"x": 7})
        tx.truncate([a])
        tx.insert(a, {"id": 10, "v": "ten"})
    cuts.append(len(b.rows()))
    return b.rows(), cuts


def _land_stream(lake) -> list:
    """Land the stream as two bronze commits (two batches); returns its rows."""
    rows, cuts = _stream()
    start = 0
    for cut in cuts:
        lake.land(rows[start:cut])
        start = cut
    return rows


def _crash_at(point_to_fail, version_to_fail):
    calls = {"version": None}

    def hook(point):
        if point == point_to_fail and calls["pipeline"].version + 1 == version_to_fail:
            raise Crash(f"injected crash at {point}")

    return hook, calls


def test_crashes_between_merges_and_before_progress_change_nothing_twice(lake_factory):
    lake = lake_factory("crash", apply={"parallelism": 1})
    rows = _land_stream(lake)

    for point, version in (("table:public.bag", 1), ("progress", 2)):
        hook, calls = _crash_at(point, version)
        from cdc_apply.lake.pipeline import ApplyPipeline
        pipeline = ApplyPipeline.open(spark_tables(lake.spark), lake.config, fault_hook=hook)
        calls["pipeline"] = pipeline
        with pytest.raises(Exception, match="injected crash"):
            pipeline.run(once=True)
    lake.apply()

    ref = ReferenceApplier()
    for _, seq, _, payload in rows:
        ref.feed(seq, payload)
    silver_a = sorted((r.id, r.v) for r in lake.silver("public", "a").collect())
    assert silver_a == sorted((int(r["id"]), r["v"]) for r in ref.rows("public.a")) == [(10, "ten")]
    silver_bag = sorted(r.x for r in lake.silver("public", "bag").collect())
    assert silver_bag == sorted(int(r["x"]) for r in ref.rows("public.bag")) == [0, 0, 1, 1, 1, 7]
    assert lake.state("transactions").count() == 3
    assert lake.state("messages").count() == 1
    assert lake.state("progress").select("apply_version").distinct().count() == 2


def test_a_crash_in_the_logs_written_beside_the_tables_is_raised_and_the_rerun_writes_each_log_row_once(lake_factory):
    # Without a snapshot load a batch writes its transactions, messages and quarantine logs beside
    # its silver tables: a failure there fails the batch, and the restart completes it.
    from cdc_apply.lake.pipeline import ApplyPipeline

    lake = lake_factory("crash_logs", apply={"parallelism": 2})
    rows = _land_stream(lake)
    hook, calls = _crash_at("logs", 2)
    pipeline = ApplyPipeline.open(spark_tables(lake.spark), lake.config, fault_hook=hook)
    calls["pipeline"] = pipeline
    with pytest.raises(Exception, match="injected crash at logs"):
        pipeline.run(once=True)
    assert pipeline.version == 1
    rerun, _ = lake.apply()

    assert [list(r.phases) for r in rerun.reports] == [["plan", "decode", "tables", "logs", "progress"]]
    ref = ReferenceApplier()
    for _, seq, _, payload in rows:
        ref.feed(seq, payload)
    assert sorted((r.id, r.v) for r in lake.silver("public", "a").collect()) == [(10, "ten")]
    assert sorted(r.x for r in lake.silver("public", "bag").collect()) == sorted(int(r["x"]) for r in ref.rows("public.bag"))
    assert lake.state("transactions").count() == 3
    assert lake.state("messages").count() == 1


def test_a_crash_after_a_batchs_schema_history_reruns_its_relation_messages_in_order(lake_factory):
    """The batch re-sends a relation unchanged, then changes it; it dies after its schema history append
    (at its first table). The restart is a new job: it must not meet the later version already loaded."""
    lake = lake_factory("crash_schema", apply={"parallelism": 1})
    b = StreamBuilder("crashy")
    t = b.relation("public", "t", [("id", "int4", True), ("v", "text", False)])
    with b.transaction() as tx:
        tx.insert(t, {"id": 1, "v": "one"})
    first = len(b.rows())
    b.resend(t)  # same shape: not a new version
    with b.transaction() as tx:
        tx.update(t, {"id": 1, "v": "uno"})
    t2 = b.relation("public", "t", [("id", "int4", True), ("v", "text", False), ("w", "int4", False)],
                    oid=t.oid)
    with b.transaction() as tx:
        tx.insert(t2, {"id": 2, "v": "two", "w": 2})
    rows = b.rows()
    lake.land(rows[:first])
    lake.land(rows[first:])

    from cdc_apply.lake.pipeline import ApplyPipeline
    hook, calls = _crash_at("table:public.t", 2)
    pipeline = ApplyPipeline.open(spark_tables(lake.spark), lake.config, fault_hook=hook)
    calls["pipeline"] = pipeline
    with pytest.raises(Exception, match="injected crash"):
        pipeline.run(once=True)
    assert lake.state("schema_history").where("apply_version = 2").count() == 1  # the batch's append landed
    lake.apply()
    assert sorted((r.id, r.v, r.w) for r in lake.silver("public", "t").collect()) == [(1, "uno", None), (2, "two", 2)]


RACE = ("io.delta.exceptions.ConcurrentDeleteReadException: [DELTA_CONCURRENT_DELETE_READ] This transaction "
        "attempted to read one or more files that were deleted (injected)")


def test_a_batch_that_loses_a_commit_race_runs_again_whole_and_writes_nothing_twice(lake_factory):
    """Another writer's DELETE (a forget) wins against the first batch's second table: the batch runs again
    from the tables' state, its first table's writes recognised, and every row is written once."""
    import io

    from cdc_apply.lake.pipeline import ApplyPipeline

    lake = lake_factory("race", apply={"parallelism": 1})
    rows = _land_stream(lake)
    raised = []

    def hook(point):
        if point == "table:public.bag" and not raised:
            raised.append(point)
            raise RuntimeError(RACE)

    out = io.StringIO()
    ApplyPipeline.open(spark_tables(lake.spark), lake.config, out=out, fault_hook=hook).run(once=True)
    assert raised and "batch 1 lost a commit race to another writer" in out.getvalue()
    ref = ReferenceApplier()
    for _, seq, _, payload in rows:
        ref.feed(seq, payload)
    assert sorted((r.id, r.v) for r in lake.silver("public", "a").collect()) == [(10, "ten")]
    bag = sorted(r.x for r in lake.silver("public", "bag").collect())
    assert bag == sorted(int(r["x"]) for r in ref.rows("public.bag"))
    assert lake.state("transactions").count() == 3
    assert lake.state("progress").select("apply_version").distinct().count() == 2


def test_a_commit_race_lost_again_and_again_stops_the_job_naming_another_writer(lake_factory):
    from cdc_apply.errors import StateError
    from cdc_apply.lake.pipeline import ApplyPipeline

    lake = lake_factory("race_again", apply={"parallelism": 1})
    _land_stream(lake)

    def hook(point):
        if point == "table:public.bag":
            raise RuntimeError(RACE)

    pipeline = ApplyPipeline.open(spark_tables(lake.spark), lake.config, fault_hook=hook)
    with pytest.raises(StateError, match="another job is applying pipeline"):
        pipeline.run(once=True)
