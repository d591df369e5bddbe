"""``cdc-apply status`` measures lag against bronze now — the age of the oldest change not yet in silver,
not the time since the last applied commit — puts a failure on the source whose message failed, and exits
with a code a scheduler can alert on; a missing or foreign bronze table stops the job before anything is
created.

The rules status applies to the rows it read are tested without Spark in ``test_status_rules.py``. Here one
lake's story proves that the real reads feed them: several sources share its bronze table, each the
scenario of a test (sources in one bronze table are independent), and each status taken is also read both
ways, without a JVM and with Spark, and compared."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest
from status_helpers import CLOCK_KEYS, Landing, Status, assert_same, commit_at, config_file, source

from cdc_apply.config import load_config
from cdc_apply.delta.engine import spark_tables
from cdc_apply.errors import ConfigError, DecodeError, error_from_text
from cdc_apply.lake.books.bookkeeping import failed_source
from cdc_apply.lake.books.status_files import read_status_files
from cdc_apply.lake.books.status_rules import KEYS
from cdc_apply.lake.pipeline import ApplyPipeline
from cdc_apply.metrics.source_side import STATUS_KEYS
from cdc_apply.planning.state import SourceState

pytestmark = pytest.mark.spark

# The sources of the lake's story that apply a transaction of six hours ago first.
QUIET = ("behind", "open", "deleted")
# The statuses taken along the story (attributes of ``story``), in order.
STATUSES = ("behind", "failed", "unnamed", "quarantined", "tail")


@pytest.fixture(scope="module")
def story(lake_factory):
    """One lake, its bronze shared by the sources of several scenarios (deletion vectors enabled):

    1. ``behind``, ``open`` and ``deleted`` each commit a transaction six hours ago; one apply batch takes
       them all; then ``behind`` commits transactions ten minutes and one minute ago, landed by two bronze
       commits → ``behind`` (``open`` and ``deleted`` caught up after their quiet period);
    2. an apply of one file a batch (two batches) catches ``behind`` up; ``bad`` lands a transaction and a
       malformed message, GaussDB source ``gauss`` the first half of its rows; the apply fails on ``bad``'s
       message (``apply.on_error = fail``) → ``failed`` (``behind`` caught up);
    3. with ``apply.on_error = quarantine`` the apply stops before its progress with an error naming no
       source → ``unnamed``; run again, it quarantines ``bad``'s message → ``quarantined``;
    4. ``open`` lands a Begin and an Insert whose Commit is still to come; ``gauss`` lands the rest of its
       rows; ``deleted`` lands transactions of ten minutes and one minute ago in one file and the newer is
       deleted from bronze (its rows marked in a deletion vector: the file, and its statistics' newest
       seq, stay) → ``tail``, read with a quarantine window of 0 hours."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gaussdb"))
    from gaussdb_workload import build

    lake = lake_factory("status", bronze={"formats": {"gauss": "gaussdb"}, "max_files_per_trigger": 100},
                        tables={"public.accounts": {"key": ["id"]}, "shop.orders": {"key": ["region", "no"]}})
    bronze = lake.root / "bronze"
    seen = SimpleNamespace(lake=lake)

    # 1. A quiet period: each source's transaction of six hours ago applied.
    landings = {}
    for name in QUIET:
        b, rel = source(name)
        commit_at(b, rel, 1, datetime.now(timezone.utc) - timedelta(hours=6))
        landings[name] = (Landing(lake, b), rel)
        landings[name][0].land()
    lake.spark.sql(f"ALTER TABLE delta.`{bronze}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true', "
                   "'delta.appendOnly' = 'false')")
    pipeline, printed = lake.apply()
    seen.quiet_batches, seen.quiet_printed = pipeline.reports, printed

    # ``behind``: two transactions landed since the last batch, then applied a file a batch.
    landing, rel = landings["behind"]
    stamped = time.monotonic()
    now = datetime.now(timezone.utc)
    for ident, age in ((2, timedelta(minutes=10)), (3, timedelta(minutes=1))):
        commit_at(landing.b, rel, ident, now - age)
        seen.behind_landed = landing.land()
    seen.behind = Status(lake, "--max-lag-seconds", "300")
    seen.behind_elapsed = time.monotonic() - stamped
    lake.extra["bronze"]["max_files_per_trigger"] = 1
    pipeline, _ = lake.apply()
    lake.extra["bronze"]["max_files_per_trigger"] = 100
    seen.behind_batches, seen.behind_batches_elapsed = pipeline.reports, time.monotonic() - stamped

    # 2. ``bad``'s malformed message fails the batch (``gauss``'s first rows wait in it).
    bad, rel = source("bad")
    with bad.transaction() as tx:
        tx.insert(rel, {"id": 1, "v": "x"})
    rows = bad.rows()
    seen.bad_seq = rows[-1][1] + 1
    lake.land([*rows, ("bad", seen.bad_seq, 0x99, b"Zgarbage")])
    gauss = build(seed=5, transactions=6).payloads(random.Random(3))   # committed days ago, by the builder
    half = len(gauss) // 2
    lake.land([("gauss", i, 0, gauss[i]) for i in range(half)])
    with pytest.raises(DecodeError):
        lake.apply()
    seen.failed = Status(lake, "--max-lag-seconds", "300")

    # 3. A failure naming no source; then the message quarantined.
    def stop(point: str) -> None:
        if point == "progress":
            raise RuntimeError("the driver went away")

    lake.extra["apply"] = {"on_error": "quarantine"}   # bad's message is quarantined: the batch gets to progress
    with pytest.raises(Exception, match="the driver went away"):
        lake.apply(fault_hook=stop)
    seen.unnamed = Status(lake)
    lake.apply()
    seen.quarantined = Status(lake)

    # 4. Heads landed and not applied: an open transaction, GaussDB rows, rows deleted by a deletion vector.
    landing, rel = landings["open"]
    with landing.b.transaction() as tx:
        tx.insert(rel, {"id": 2, "v": "x"})
    seen.open_landed = landing.land(-1)   # Begin and Insert: the Commit is still to come
    seen.gauss_landing = time.monotonic()
    lake.land([("gauss", i, 0, gauss[i]) for i in range(half, len(gauss))])
    seen.gauss_unapplied = len(gauss) - half
    landing, rel = landings["deleted"]
    seen.deleted_stamped = time.monotonic()
    now = datetime.now(timezone.utc)
    commit_at(landing.b, rel, 2, now - timedelta(minutes=10))
    seen.deleted_kept = landing.b.rows()[-1][1]
    commit_at(landing.b, rel, 3, now - timedelta(minutes=1))
    seen.deleted_landed = landing.land()
    lake.spark.sql(f"DELETE FROM delta.`{bronze}` WHERE source = 'deleted' AND seq > {seen.deleted_kept}")
    delete = lake.spark.sql(f"DESCRIBE HISTORY delta.`{bronze}`").where("operation = 'DELETE'").first()
    seen.deletion_vectors = delete.operationMetrics.get("numDeletionVectorsAdded")
    seen.tail = Status(lake, "--quarantine-hours", "0", "--max-lag-seconds", "300")
    seen.tail_asked = time.monotonic()
    return seen


# -- lag: the age of the oldest change not yet in silver ---------------------------------------------------

def test_a_batch_that_catches_up_after_a_quiet_period_reports_no_lag_and_the_last_commit_s_age_apart(story):
    (report,) = story.quiet_batches
    assert report.lag_seq == 0 and report.lag_seconds == 0
    assert report.applied_commit_age_seconds >= 6 * 3600
    assert "lag 0 msgs, 0.0s (last applied commit " in story.quiet_printed


def test_status_caught_up_after_a_quiet_period_shows_no_lag_and_the_quiet_period_as_the_last_commit_s_age(story):
    for name in ("open", "deleted"):   # their transactions of six hours ago applied, nothing landed since
        entry = story.behind.of(name)
        assert (entry["health"], entry["lag_seq"], entry["lag_seconds"], entry["quarantined"]) == ("ok", 0, 0, 0)
        assert entry["applied_commit_age_seconds"] >= 6 * 3600   # under --max-lag-seconds 300: not lag


def test_status_measures_lag_against_bronze_now_not_the_last_batch(story):
    (last_batch,) = story.quiet_batches
    entry = story.behind.of("behind")
    assert last_batch.lag_seq == 0
    assert entry["bronze_max_seq"] == story.behind_landed
    assert entry["lag_seq"] == story.behind_landed - entry["applied_seq"] == 6   # two Begin, Insert, Commit


def test_status_behind_lags_by_the_age_of_the_oldest_unapplied_change_not_the_quiet_period_and_alerts(story):
    status, elapsed = story.behind, story.behind_elapsed
    entry = status.of("behind")
    assert 600 <= entry["lag_seconds"] <= 600 + elapsed + 1   # the ten-minute-old commit, not the newest
    assert entry["applied_commit_age_seconds"] >= 6 * 3600     # not the quiet period either
    assert (status.code, entry["health"]) == (5, "lagging")   # above --max-lag-seconds 300
    assert {e["source"]: e["health"] for e in status.entries if e["source"] != "behind"} == \
           {"open": "ok", "deleted": "ok"}


def test_a_batch_that_leaves_bronze_rows_behind_reports_the_age_of_the_oldest_of_them(story):
    first, second = story.behind_batches
    assert first.lag_seq == 3   # the minute-old transaction's Begin, Insert, Commit
    assert 60 <= first.lag_seconds <= 60 + story.behind_batches_elapsed + 1
    assert (second.lag_seq, second.lag_seconds) == (0, 0)
    entry = story.failed.of("behind")   # the next status: nothing of behind's landed since
    assert (entry["health"], entry["lag_seq"], entry["lag_seconds"]) == ("ok", 0, 0)


def test_a_transaction_whose_commit_has_not_landed_is_not_lag(story):
    entry = story.tail.of("open")
    assert entry["lag_seq"] == story.open_landed - entry["applied_seq"] == 2   # Begin and Insert
    assert (entry["lag_seconds"], entry["health"]) == (0, "ok")


def test_a_gaussdb_source_behind_lags_from_when_its_first_unapplied_row_was_landed(story):
    entry = story.tail.of("gauss")
    assert entry["lag_seq"] == story.gauss_unapplied
    assert 0 < entry["lag_seconds"] <= story.tail_asked - story.gauss_landing + 1
    assert entry["health"] == "ok"   # under --max-lag-seconds 300: its rows were committed days ago


def test_rows_deleted_from_bronze_by_a_deletion_vector_are_not_lag(story):
    entry = story.tail.of("deleted")
    assert story.deletion_vectors == "1"   # the rows were marked, not rewritten away
    assert story.deleted_landed > story.deleted_kept == entry["bronze_max_seq"]
    assert entry["lag_seq"] == story.deleted_kept - entry["applied_seq"] == 3
    assert 600 <= entry["lag_seconds"] <= 600 + story.tail_asked - story.deleted_stamped + 1
    assert (story.tail.code, entry["health"]) == (5, "lagging")


# -- failures: on the source whose message failed ------------------------------------------------------------

def test_status_exits_4_with_the_error_on_the_source_whose_message_failed_and_not_on_the_others(story):
    status, bad_seq = story.failed, story.bad_seq
    entry = status.of("bad")
    assert status.sources() == {*QUIET, "bad"} and status.code == 4   # gauss has no progress row yet
    assert entry["health"] == "failing"
    assert f"seq={bad_seq}" in entry["last_error"] and "unknown message type" in entry["last_error"]
    # Its first batch failed: nothing applied, every landed message behind.
    assert entry["applied_seq"] is None and entry["lag_seq"] == bad_seq - SourceState().applied_seq
    assert {(e["health"], e["last_error"]) for e in status.entries if e["source"] != "bad"} == {("ok", None)}


def test_a_failure_that_names_no_source_is_an_entry_of_its_own_not_a_failure_of_a_source(story):
    status = story.unnamed
    assert status.sources() == {*QUIET, None} and status.code == 4   # bad's own failure is no longer the newest
    entry = status.of(None)
    assert entry["health"] == "failing" and "the driver went away" in entry["last_error"]
    assert {(e["health"], e["last_error"]) for e in status.entries if e["source"] is not None} == {("ok", None)}


def test_status_exits_3_while_messages_were_quarantined_recently_and_0_outside_the_window(story):
    entry = story.quarantined.of("bad")
    assert (story.quarantined.code, entry["health"], entry["quarantined"], entry["lag_seq"]) == \
           (3, "quarantining", 1, 0)
    assert entry["last_error"] is None
    assert story.quarantined.sources() == {*QUIET, "bad", "gauss"}
    entry = story.tail.of("bad")   # read with --quarantine-hours 0
    assert (entry["health"], entry["quarantined"], entry["quarantined_recently"], entry["lag_seq"]) == \
           ("ok", 1, 0, 0)


def test_the_source_of_a_worker_s_error_is_read_back_from_its_text_whatever_the_name():
    for name in ("bad", "a, seq=1] [source=x", "naïve name"):
        error = DecodeError("unknown message type 'Z'", source=name, seq=7, lsn="0/99", column="c")
        assert failed_source(error_from_text(str(error))) == name
    assert failed_source(error_from_text(str(DecodeError("truncated", seq=7)))) is None
    assert failed_source(RuntimeError("source=shop, seq=1")) is None


# -- the same status without a JVM as with Spark ---------------------------------------------------------

@pytest.mark.parametrize("taken", STATUSES)
def test_status_read_without_a_jvm_equals_status_read_with_spark(taken, story):
    files, spark, apart = getattr(story, taken).both_ways
    assert files, f"{taken}: no status entries to compare"
    assert_same(files, spark, apart)


_NO_SPARK = ("import sys\n"
             "sys.modules['pyspark'] = sys.modules['py4j'] = sys.modules['delta'] = None  # no JVM can start\n"
             "from cdc_apply.cli.main import main\n"
             "raise SystemExit(main(sys.argv[1:]))\n")


def test_status_json_on_local_paths_answers_with_pyspark_unimportable(story):
    path = config_file(story.lake)
    proc = subprocess.run([sys.executable, "-c", _NO_SPARK, "status", "--config", str(path), "--json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3, proc.stderr   # the story quarantined a message just now
    entries = [json.loads(line) for line in proc.stdout.splitlines()]
    expected = json.loads(json.dumps(read_status_files(load_config(path)), default=str))
    old = [{k: v for k, v in e.items() if k not in CLOCK_KEYS and k not in STATUS_KEYS} for e in entries]
    assert old == [{k: v for k, v in e.items() if k not in CLOCK_KEYS} for e in expected]
    # The slot's keys come after the keys status always printed, null with the reason (no source DSN here).
    assert all(list(e) == [*KEYS, *STATUS_KEYS] for e in entries), entries
    assert all(e["slot_retained_wal_bytes"] is None and e["source_unavailable"] for e in entries), entries
    bad = next(e for e in entries if e["source"] == "bad")
    assert (bad["health"], bad["quarantined"], bad["lag_seq"]) == ("quarantining", 1, 0)


# -- bronze that is not there ----------------------------------------------------------------------------

def test_a_missing_bronze_path_is_an_error_naming_it_and_creates_nothing(lake_factory):
    lake = lake_factory("no_bronze")
    with pytest.raises(ConfigError) as info:
        ApplyPipeline.open(spark_tables(lake.spark), lake.config)
    assert info.value.context["key"] == "bronze.path" and "no bronze Delta table" in str(info.value)
    assert not (lake.root / "state").exists()


def test_a_bronze_table_without_the_bronze_columns_is_refused_before_anything_is_created(lake_factory):
    lake = lake_factory("foreign_bronze")
    lake.spark.createDataFrame([(1, "x")], "id INT, v STRING").write.format("delta").save(str(lake.root / "bronze"))
    with pytest.raises(ConfigError) as info:
        ApplyPipeline.open(spark_tables(lake.spark), lake.config)
    assert info.value.context["key"] == "bronze.path" and "no column 'source'" in str(info.value)
    assert not (lake.root / "state").exists()
