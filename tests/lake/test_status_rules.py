"""The rules ``cdc-apply status`` applies to the rows it read, whichever way it read them."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from cdc_apply.lake.books.status_rules import current_failure, health, newest_failure, newest_progress

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def test_a_failure_outranks_quarantined_messages_which_outrank_lag():
    assert health(True, 1, 900.0, 60.0) == "failing"
    assert health(False, 1, 900.0, 60.0) == "quarantining"
    assert health(False, 0, 900.0, 60.0) == "lagging"
    assert health(False, 0, 900.0, None) == "ok"   # no --max-lag-seconds: lag never alerts
    assert health(False, 0, 60.0, 60.0) == "ok"    # at the limit is not above it


def test_the_newest_failure_is_the_latest_then_the_highest_apply_version_and_one_without_a_time_is_oldest():
    rows = [{"source": "a", "apply_version": 7, "failed_at": T0},
            {"source": "b", "apply_version": 6, "failed_at": T0 + timedelta(seconds=1)},
            {"source": "c", "apply_version": 8, "failed_at": T0 + timedelta(seconds=1)},
            {"source": "d", "apply_version": 9, "failed_at": None}]
    assert newest_failure(rows)["source"] == "c"
    assert newest_failure([]) is None


def test_a_failure_counts_only_while_no_batch_of_its_apply_version_has_succeeded():
    latest = newest_progress([{"source": "a", "apply_version": 4}, {"source": "a", "apply_version": 5},
                              {"source": "b", "apply_version": 3}])
    assert {s: r["apply_version"] for s, r in latest.items()} == {"a": 5, "b": 3}
    failed = {"source": "b", "apply_version": 6, "failed_at": T0, "error": "x"}
    assert current_failure(failed, latest) is failed
    assert current_failure({**failed, "apply_version": 5}, latest) is None   # version 5 succeeded since
    assert current_failure(failed, {}) is failed                            # no batch ever succeeded
