"""``cdc-apply status`` measures lag against bronze now and exits with a code a scheduler can alert on;
a missing or foreign bronze table stops the job before anything is created."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout

import pytest

from cdc_apply.cli.main import main
from cdc_apply.lake.pipeline import ApplyPipeline
from cdc_apply.errors import ConfigError
from cdc_apply.testing.stream import StreamBuilder

pytestmark = pytest.mark.spark


def _status(lake, *args: str) -> tuple[int, list[dict]]:
    path = lake.root / "pipeline.toml"
    on_error = lake.extra.get("apply", {}).get("on_error", "fail")
    path.write_text(f'[bronze]\npath = "bronze"\n[silver]\npath = "silver"\n[state]\npath = "state"\n'
                    f'[apply]\non_error = "{on_error}"\n')
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["status", "--config", str(path), "--json", *args])
    return code, [json.loads(line) for line in out.getvalue().splitlines()]


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
