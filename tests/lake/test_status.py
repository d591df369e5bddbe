"""``cdc-apply status`` measures lag against bronze now — the age of the oldest change not yet in silver,
not the time since the last applied commit — puts a failure on the source whose message failed, and exits
with a code a scheduler can alert on; a missing or foreign bronze table stops the job before anything is
created."""

from __future__ import annotations

import io
import json
import random
import subprocess
import sys
import time
from contextlib import redirect_stdout
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from cdc_apply.cli.main import main
from cdc_apply.config import load_config
from cdc_apply.lake.books.bookkeeping import failed_source
from cdc_apply.lake.books.status import read_status_spark
from cdc_apply.lake.books.status_files import read_status_files
from cdc_apply.lake.pipeline import ApplyPipeline
from cdc_apply.errors import ConfigError, DecodeError, error_from_text
from cdc_apply.pgoutput.messages import PG_EPOCH
from cdc_apply.testing.stream import StreamBuilder

pytestmark = pytest.mark.spark


# Per lake (its root): each status taken, read both ways — (without a JVM, with Spark, seconds between).
COMPARED: dict[Path, list[tuple[list[dict], list[dict], float]]] = {}


def _config_file(lake) -> Path:
    path = lake.root / "pipeline.toml"
    on_error = lake.extra.get("apply", {}).get("on_error", "fail")
    formats = "".join(f'{s} = "{f}"\n' for s, f in lake.extra.get("bronze", {}).get("formats", {}).items())
    path.write_text(f'[bronze]\npath = "bronze"\n[bronze.formats]\n{formats}[silver]\npath = "silver"\n'
                    f'[state]\npath = "state"\n[apply]\non_error = "{on_error}"\n')
    return path


def _status(lake, *args: str) -> tuple[int, list[dict]]:
    """``cdc-apply status --json`` (local paths: read without a JVM); the same status is also read both
    ways directly and kept in ``COMPARED`` for the comparison tests."""
    path = _config_file(lake)
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["status", "--config", str(path), "--json", *args])
    COMPARED.setdefault(lake.root, []).append(_both_ways(lake, *args))
    return code, [json.loads(line) for line in out.getvalue().splitlines()]


def _both_ways(lake, *args: str) -> tuple[list[dict], list[dict], float]:
    options = dict(zip(args[::2], args[1::2]))
    window = timedelta(hours=float(options.get("--quarantine-hours", 24)))
    max_lag = float(options["--max-lag-seconds"]) if "--max-lag-seconds" in options else None
    config = load_config(_config_file(lake))
    started = time.monotonic()
    files = read_status_files(config, window, max_lag)
    spark = read_status_spark(lake.spark, config, window, max_lag)
    return files, spark, time.monotonic() - started


@pytest.fixture(scope="module")
def story(lake_factory):
    """One source through: applied, more landed, a bad message failing a batch, then quarantined."""
    b = StreamBuilder("src")
    t = b.relation("public", "t", [("id", "int4", True), ("v", "text", False)])
    for i in (1, 2):
        with b.transaction() as tx:
            tx.insert(t, {"id": i, "v": "x"})
    lake = lake_factory("status")
    lake.land(b.rows())
    lake.apply()
    seen = {"applied": _status(lake)}
    done = len(b.rows())
    with b.transaction() as tx:
        tx.insert(t, {"id": 3, "v": "x"})
    lake.land(b.rows()[done:])
    seen["landed"] = _status(lake)
    last = b.rows()[-1][1]
    lake.land([("src", last + 1, 0x99, b"Zgarbage")])
    with pytest.raises(Exception):
        lake.apply()
    seen["failed"] = _status(lake)
    lake.extra["apply"] = {"on_error": "quarantine"}
    lake.apply()
    seen["quarantined"] = _status(lake)
    seen["quarantine_window_0"] = _status(lake, "--quarantine-hours", "0")
    seen["lake"] = lake
    return seen, last


def test_status_reports_no_lag_and_exits_0_when_everything_landed_is_applied(story):
    code, (entry,) = story[0]["applied"]
    assert (code, entry["health"], entry["lag_seq"], entry["quarantined"]) == (0, "ok", 0, 0)


def test_status_measures_lag_against_bronze_now_not_the_last_batch(story):
    seen, last = story
    code, (entry,) = seen["landed"]
    assert entry["lag_seq"] == 3 and entry["bronze_max_seq"] == last  # Begin, Insert, Commit landed since
    assert entry["lag_seconds"] > 0 and code == 0


def test_status_exits_4_with_the_error_while_the_last_batch_failed(story):
    seen, last = story
    code, (entry,) = seen["failed"]
    assert (code, entry["health"]) == (4, "failing")
    assert f"seq={last + 1}" in entry["last_error"] and "unknown message type" in entry["last_error"]


def test_status_exits_3_while_messages_were_quarantined_recently_and_0_outside_the_window(story):
    seen, _ = story
    code, (entry,) = seen["quarantined"]
    assert (code, entry["health"], entry["quarantined"], entry["lag_seq"]) == (3, "quarantining", 1, 0)
    assert entry["last_error"] is None
    code, (entry,) = seen["quarantine_window_0"]
    assert (code, entry["health"], entry["quarantined"], entry["quarantined_recently"]) == (0, "ok", 1, 0)


def test_a_missing_bronze_path_is_an_error_naming_it_and_creates_nothing(lake_factory):
    lake = lake_factory("no_bronze")
    with pytest.raises(ConfigError) as info:
        ApplyPipeline(lake.spark, lake.config)
    assert info.value.context["key"] == "bronze.path" and "no bronze Delta table" in str(info.value)
    assert not (lake.root / "state").exists()


def test_a_bronze_table_without_the_bronze_columns_is_refused_before_anything_is_created(lake_factory):
    lake = lake_factory("foreign_bronze")
    lake.spark.createDataFrame([(1, "x")], "id INT, v STRING").write.format("delta").save(str(lake.root / "bronze"))
    with pytest.raises(ConfigError) as info:
        ApplyPipeline(lake.spark, lake.config)
    assert info.value.context["key"] == "bronze.path" and "no column 'source'" in str(info.value)
    assert not (lake.root / "state").exists()


# -- lag: the age of the oldest change not yet in silver ---------------------------------------------------

def _commit_at(b: StreamBuilder, rel, ident: int, when: datetime) -> None:
    """A transaction inserting ``ident``, committed at ``when`` (Begin and Commit carry the time)."""
    first = len(b.messages())
    with b.transaction() as tx:
        tx.insert(rel, {"id": ident, "v": "x"})
    micros = (when - PG_EPOCH) // timedelta(microseconds=1)
    b.patch(first, commit_ts=micros)
    b.patch(len(b.messages()) - 1, commit_ts=micros)


@pytest.fixture(scope="module")
def quiet(lake_factory):
    """A transaction committed six hours ago, applied; then one committed a minute ago landed, not applied."""
    built = time.monotonic()
    now = datetime.now(timezone.utc)
    b = StreamBuilder("src")
    t = b.relation("public", "t", [("id", "int4", True), ("v", "text", False)])
    _commit_at(b, t, 1, now - timedelta(hours=6))
    lake = lake_factory("quiet")
    lake.land(b.rows())
    pipeline, printed = lake.apply()
    seen = {"batch": (pipeline.reports[-1], printed), "caught_up": _status(lake, "--max-lag-seconds", "1800")}
    done = len(b.rows())
    _commit_at(b, t, 2, now - timedelta(minutes=1))
    lake.land(b.rows()[done:])
    seen["landed"] = _status(lake, "--max-lag-seconds", "1800")
    seen["lake"] = lake
    return seen, time.monotonic() - built


def test_a_batch_that_catches_up_after_a_quiet_period_reports_no_lag_and_the_last_commit_s_age_apart(quiet):
    (report, printed), _ = quiet[0]["batch"], quiet[1]
    assert report.lag_seq == 0 and report.lag_seconds == 0
    assert report.applied_commit_age_seconds >= 6 * 3600
    assert "lag 0 msgs, 0.0s (last applied commit " in printed


def test_status_caught_up_after_a_quiet_period_shows_no_lag_and_the_quiet_period_as_the_last_commit_s_age(quiet):
    code, (entry,) = quiet[0]["caught_up"]
    assert (code, entry["health"], entry["lag_seq"], entry["lag_seconds"]) == (0, "ok", 0, 0)
    assert entry["applied_commit_age_seconds"] >= 6 * 3600


def test_a_change_landed_after_a_quiet_period_lags_by_its_own_age_not_the_quiet_period(quiet):
    seen, elapsed = quiet
    code, (entry,) = seen["landed"]
    assert entry["lag_seq"] == 3   # Begin, Insert, Commit
    assert 60 <= entry["lag_seconds"] <= 60 + elapsed + 1
    assert entry["applied_commit_age_seconds"] >= 6 * 3600
    assert (code, entry["health"]) == (0, "ok")   # under --max-lag-seconds 1800


@pytest.fixture(scope="module")
def behind(lake_factory):
    """A transaction of six hours ago applied; then transactions committed ten minutes and one minute ago
    landed by two bronze commits: status before the apply, the apply's two batches (one file each), status after."""
    built = time.monotonic()
    now = datetime.now(timezone.utc)
    b = StreamBuilder("src")
    t = b.relation("public", "t", [("id", "int4", True), ("v", "text", False)])
    _commit_at(b, t, 1, now - timedelta(hours=6))
    lake = lake_factory("behind")
    lake.land(b.rows())
    lake.apply()
    for ident, age in ((2, timedelta(minutes=10)), (3, timedelta(minutes=1))):
        done = len(b.rows())
        _commit_at(b, t, ident, now - age)
        lake.land(b.rows()[done:])
    seen = {"before": _status(lake, "--max-lag-seconds", "300")}
    pipeline, _ = lake.apply()
    seen["batches"] = pipeline.reports
    seen["after"] = _status(lake, "--max-lag-seconds", "300")
    seen["lake"] = lake
    return seen, time.monotonic() - built


def test_status_behind_lags_by_the_age_of_the_oldest_unapplied_change_and_alerts_on_it(behind):
    seen, elapsed = behind
    code, (entry,) = seen["before"]
    assert entry["lag_seq"] == 6
    assert 600 <= entry["lag_seconds"] <= 600 + elapsed + 1   # the ten-minute-old commit, not the newest
    assert (code, entry["health"]) == (5, "lagging")           # above --max-lag-seconds 300


def test_a_batch_that_leaves_bronze_rows_behind_reports_the_age_of_the_oldest_of_them(behind):
    seen, elapsed = behind
    first, second = seen["batches"]
    assert first.lag_seq == 3 and 60 <= first.lag_seconds <= 60 + elapsed + 1   # the minute-old commit
    assert (second.lag_seq, second.lag_seconds) == (0, 0)
    code, (entry,) = seen["after"]
    assert (code, entry["health"], entry["lag_seconds"]) == (0, "ok", 0)


@pytest.fixture(scope="module")
def open_head(lake_factory):
    """A transaction of six hours ago applied; then a Begin and an Insert landed, their Commit still to come."""
    b = StreamBuilder("src")
    t = b.relation("public", "t", [("id", "int4", True), ("v", "text", False)])
    _commit_at(b, t, 1, datetime.now(timezone.utc) - timedelta(hours=6))
    lake = lake_factory("open_head")
    lake.land(b.rows())
    lake.apply()
    done = len(b.rows())
    with b.transaction() as tx:
        tx.insert(t, {"id": 2, "v": "x"})
    lake.land(b.rows()[done:-1])   # Begin and Insert: the Commit is still to come
    return {"status": _status(lake, "--max-lag-seconds", "1800"), "lake": lake}


def test_a_transaction_whose_commit_has_not_landed_is_not_lag(open_head):
    code, (entry,) = open_head["status"]
    assert (code, entry["lag_seq"], entry["lag_seconds"]) == (0, 2, 0)


@pytest.fixture(scope="module")
def gauss_lag(lake_factory):
    """A GaussDB source: half its rows applied, the other half landed after."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "gaussdb"))
    from gaussdb_workload import build

    payloads = build(seed=5, transactions=6).payloads(random.Random(3))   # committed days ago, by the builder
    lake = lake_factory("gauss_lag", bronze={"formats": {"gauss": "gaussdb"}},
                        tables={"public.accounts": {"key": ["id"]}, "shop.orders": {"key": ["region", "no"]}})
    half = len(payloads) // 2
    lake.land([("gauss", i, 0, payloads[i]) for i in range(half)])
    lake.apply()
    landing = time.monotonic()
    lake.land([("gauss", i, 0, payloads[i]) for i in range(half, len(payloads))])
    return {"status": _status(lake, "--max-lag-seconds", "3600"), "lake": lake, "landing": landing,
            "unapplied": len(payloads) - half, "asked": time.monotonic()}


def test_a_gaussdb_source_behind_lags_from_when_its_first_unapplied_row_was_landed(gauss_lag):
    code, (entry,) = gauss_lag["status"]
    assert entry["lag_seq"] == gauss_lag["unapplied"]
    assert 0 < entry["lag_seconds"] <= gauss_lag["asked"] - gauss_lag["landing"] + 1
    assert (code, entry["health"]) == (0, "ok")


@pytest.fixture(scope="module")
def deleted(lake_factory):
    """Bronze with deletion vectors: a transaction of six hours ago applied; transactions of ten minutes and
    one minute ago landed in one file; then the newer one deleted from bronze (its rows marked in a
    deletion vector: the file, and its statistics' newest seq, stay)."""
    built = time.monotonic()
    now = datetime.now(timezone.utc)
    b = StreamBuilder("src")
    t = b.relation("public", "t", [("id", "int4", True), ("v", "text", False)])
    _commit_at(b, t, 1, now - timedelta(hours=6))
    lake = lake_factory("deleted")
    lake.land(b.rows())
    bronze = lake.root / "bronze"
    lake.spark.sql(f"ALTER TABLE delta.`{bronze}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true', "
                  "'delta.appendOnly' = 'false')")
    lake.apply()
    done = len(b.rows())
    _commit_at(b, t, 2, now - timedelta(minutes=10))
    _commit_at(b, t, 3, now - timedelta(minutes=1))
    lake.land(b.rows()[done:])
    lake.spark.sql(f"DELETE FROM delta.`{bronze}` WHERE seq > {done + 2}")
    delete = lake.spark.sql(f"DESCRIBE HISTORY delta.`{bronze}`").where("operation = 'DELETE'").first()
    deletion_vectors = delete.operationMetrics.get("numDeletionVectorsAdded")
    return {"status": _status(lake, "--max-lag-seconds", "300"), "lake": lake, "kept_seq": done + 2,
            "deletion_vectors": deletion_vectors, "elapsed": time.monotonic() - built}


def test_rows_deleted_from_bronze_by_a_deletion_vector_are_not_lag(deleted):
    code, (entry,) = deleted["status"]
    assert deleted["deletion_vectors"] == "1"   # the rows were marked, not rewritten away
    assert (entry["bronze_max_seq"], entry["lag_seq"]) == (deleted["kept_seq"], 3)
    assert 600 <= entry["lag_seconds"] <= 600 + deleted["elapsed"] + 1
    assert (code, entry["health"]) == (5, "lagging")


# -- failures: on the source whose message failed ------------------------------------------------------------

@pytest.fixture(scope="module")
def two_sources(lake_factory):
    """``shop`` applied; then ``bad`` landed with a malformed message (apply.on_error = fail): the batch fails."""
    shop, bad = StreamBuilder("shop"), StreamBuilder("bad")
    for b in (shop, bad):
        t = b.relation("public", b.source, [("id", "int4", True), ("v", "text", False)])
        with b.transaction() as tx:
            tx.insert(t, {"id": 1, "v": "x"})
    lake = lake_factory("two_sources")
    lake.land(shop.rows())
    lake.apply()
    rows = bad.rows()
    lake.land([*rows, ("bad", rows[-1][1] + 1, 0x99, b"Zgarbage")])
    with pytest.raises(DecodeError):
        lake.apply()
    return lake, rows[-1][1] + 1


def test_a_malformed_message_of_one_source_is_that_source_s_failure_not_the_other_s(two_sources):
    lake, bad_seq = two_sources
    code, entries = _status(lake)
    by_source = {e["source"]: e for e in entries}
    assert set(by_source) == {"shop", "bad"} and code == 4
    assert by_source["bad"]["health"] == "failing" and f"seq={bad_seq}" in by_source["bad"]["last_error"]
    assert by_source["bad"]["applied_seq"] is None and by_source["bad"]["lag_seq"] == bad_seq + 1
    assert (by_source["shop"]["health"], by_source["shop"]["last_error"]) == ("ok", None)


def test_a_failure_that_names_no_source_is_an_entry_of_its_own_not_a_failure_of_a_source(two_sources):
    lake, _ = two_sources

    def stop(point: str) -> None:
        if point == "progress":
            raise RuntimeError("the driver went away")

    lake.extra["apply"] = {"on_error": "quarantine"}   # bad's message is quarantined: the batch gets to progress
    with pytest.raises(Exception, match="the driver went away"):
        lake.apply(fault_hook=stop)
    code, entries = _status(lake)
    by_source = {e["source"]: e for e in entries}
    assert set(by_source) == {"shop", None} and code == 4   # bad's own failure is no longer the newest
    assert by_source[None]["health"] == "failing" and "the driver went away" in by_source[None]["last_error"]
    assert (by_source["shop"]["health"], by_source["shop"]["last_error"]) == ("ok", None)


def test_the_source_of_a_worker_s_error_is_read_back_from_its_text_whatever_the_name():
    for name in ("bad", "a, seq=1] [source=x", "naïve name"):
        error = DecodeError("unknown message type 'Z'", source=name, seq=7, lsn="0/99", column="c")
        assert failed_source(error_from_text(str(error))) == name
    assert failed_source(error_from_text(str(DecodeError("truncated", seq=7)))) is None
    assert failed_source(RuntimeError("source=shop, seq=1")) is None


# -- the same status without a JVM as with Spark ---------------------------------------------------------

# Keys measured against the time of asking: the two reads ask a moment apart.
_CLOCK_KEYS = ("lag_seconds", "applied_commit_age_seconds")


def _assert_same(files: list[dict], spark: list[dict], apart: float) -> None:
    assert [list(e) for e in files] == [list(e) for e in spark]
    for mine, theirs in zip(files, spark):
        assert {k: v for k, v in mine.items() if k not in _CLOCK_KEYS} == \
               {k: v for k, v in theirs.items() if k not in _CLOCK_KEYS}
        for key in _CLOCK_KEYS:
            if theirs[key] is None or mine[key] is None:
                assert mine[key] == theirs[key], key
            else:   # read first without a JVM, then with Spark: Spark's clock is up to ``apart`` later
                assert abs(mine[key] - theirs[key]) <= apart + 1, (key, mine[key], theirs[key])
                assert (mine[key] == 0) == (theirs[key] == 0), (key, mine[key], theirs[key])


@pytest.mark.parametrize("scenario", ["story", "quiet", "behind", "open_head", "gauss_lag", "deleted",
                                      "two_sources"])
def test_status_read_without_a_jvm_equals_status_read_with_spark(scenario, request):
    seen = request.getfixturevalue(scenario)
    if scenario == "two_sources":
        lake = seen[0]
    else:
        lake = (seen[0] if isinstance(seen, tuple) else seen)["lake"]
    taken = [*COMPARED.get(lake.root, []), _both_ways(lake), _both_ways(lake, "--quarantine-hours", "0",
                                                                          "--max-lag-seconds", "0")]
    for files, spark, apart in taken:
        assert files, f"{scenario}: no status entries to compare"
        _assert_same(files, spark, apart)


_NO_SPARK = ("import sys\n"
             "sys.modules['pyspark'] = sys.modules['py4j'] = sys.modules['delta'] = None  # no JVM can start\n"
             "from cdc_apply.cli.main import main\n"
             "raise SystemExit(main(sys.argv[1:]))\n")


def test_status_json_on_local_paths_answers_with_pyspark_unimportable(story):
    seen, _ = story
    lake = seen["lake"]
    path = _config_file(lake)
    proc = subprocess.run([sys.executable, "-c", _NO_SPARK, "status", "--config", str(path), "--json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3, proc.stderr   # the story ends with a message quarantined just now
    (entry,) = [json.loads(line) for line in proc.stdout.splitlines()]
    (expected,) = json.loads(json.dumps(read_status_files(load_config(path)), default=str))
    assert {k: v for k, v in entry.items() if k not in _CLOCK_KEYS} == \
           {k: v for k, v in expected.items() if k not in _CLOCK_KEYS}
    assert (entry["health"], entry["quarantined"], entry["lag_seq"]) == ("quarantining", 1, 0)
