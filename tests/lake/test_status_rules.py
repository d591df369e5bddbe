"""The rules ``cdc-apply status`` applies to the rows it read, whichever way it read them
(:mod:`cdc_apply.lake.books.status_rules`), on rows built by hand. ``test_status.py`` proves that the
real reads of a lake feed them."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest

from cdc_apply.lake.books.status_rules import (
    KEYS,
    current_failure,
    entries,
    health,
    lag_seq,
    newest_failure,
    newest_progress,
    shown_sources,
    source_states,
    worst_exit_code,
)
from cdc_apply.planning.state import OpenTxn, PreparedTxn, SourceState

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
NOW = T0 + timedelta(hours=7)


def progress(source: str, applied_seq: int, *, version: int = 1, committed: datetime | None = T0,
             lsn: int | None = 0x1_0000_00A0, state: SourceState | None = None) -> dict:
    """A progress row as status reads it (the columns of ``PROGRESS_COLUMNS``)."""
    state = state if state is not None else SourceState(applied_seq=applied_seq)
    return {"source": source, "apply_version": version, "applied_seq": applied_seq, "applied_commit_lsn": lsn,
            "applied_commit_ts": committed, "state": state.to_json(), "oldest_needed_seq": state.oldest_needed_seq(),
            "updated_at": committed}


def failure(source: str | None, version: int, error: str = "boom", at: datetime = NOW) -> dict:
    return {"source": source, "apply_version": version, "error": error, "failed_at": at}


def status(rows: list[dict], *, failed: dict | None = None, bronze_max: dict[str, int] | None = None,
           ages: dict[str, float] | None = None, quarantined: dict[str, tuple[int, int]] | None = None,
           max_lag_seconds: float | None = None) -> list[dict]:
    """The entries of progress rows ``rows`` (a pgoutput source's bronze seq is its applied seq), the newest
    failure ``failed``, and what bronze and the quarantine table said."""
    latest = newest_progress(rows)
    current = current_failure(failed, latest)
    sources = shown_sources(latest, current)
    states = source_states(latest, sources)
    applied = {s: states[s].applied_seq for s in sources}
    ages = {s: 0.0 for s in sources} | (ages or {})
    return entries(latest, current, sources, states, applied, bronze_max or {}, ages, quarantined or {}, NOW,
                   max_lag_seconds)


def by_source(got: list[dict]) -> dict:
    return {e["source"]: e for e in got}


# -- health and exit codes ---------------------------------------------------------------------------------

def test_a_failure_outranks_quarantined_messages_which_outrank_lag():
    assert health(True, 1, 900.0, 60.0) == "failing"
    assert health(False, 1, 900.0, 60.0) == "quarantining"
    assert health(False, 0, 900.0, 60.0) == "lagging"
    assert health(False, 0, 900.0, None) == "ok"   # no --max-lag-seconds: lag never alerts
    assert health(False, 0, 60.0, 60.0) == "ok"    # at the limit is not above it


def test_status_exits_with_the_least_healthy_source_s_code_failing_4_quarantining_3_lagging_5():
    def code(*healths: str) -> int:
        return worst_exit_code([{"health": h} for h in healths])

    assert code() == 0 and code("ok", "ok") == 0
    assert code("ok", "lagging") == 5
    assert code("lagging", "quarantining", "ok") == 3   # quarantining is worse than lagging, though 3 < 5
    assert code("quarantining", "failing", "lagging") == 4


# -- lag: against bronze now -------------------------------------------------------------------------------

def test_lag_is_counted_against_bronze_now_not_the_last_batch():
    # The progress row carries no lag: messages landed since the last batch count as bronze holds them.
    (entry,) = status([progress("src", 10)], bronze_max={"src": 13}, ages={"src": 120.0})
    assert (entry["applied_seq"], entry["bronze_max_seq"], entry["lag_seq"], entry["lag_seconds"]) == (10, 13, 3, 120.0)


def test_a_source_bronze_holds_nothing_past_is_not_behind():
    assert lag_seq(None, 10) == 0   # no row at or past the applied seq
    assert lag_seq(10, 10) == 0
    assert lag_seq(7, 10) == 0      # rows removed from bronze below the applied seq
    (entry,) = status([progress("src", 10)])
    assert (entry["bronze_max_seq"], entry["lag_seq"], entry["lag_seconds"]) == (None, 0, 0.0)


def test_a_source_caught_up_after_a_quiet_period_shows_no_lag_and_the_quiet_period_as_the_last_commit_s_age():
    (entry,) = status([progress("src", 10, committed=NOW - timedelta(hours=6))], bronze_max={"src": 10},
                      max_lag_seconds=1800)
    assert (entry["health"], entry["lag_seq"], entry["lag_seconds"]) == ("ok", 0, 0.0)
    assert entry["applied_commit_age_seconds"] == 6 * 3600


def test_a_source_lags_by_its_oldest_unapplied_change_s_age_and_alerts_only_above_max_lag_seconds():
    rows = [progress("src", 10, committed=NOW - timedelta(hours=6))]
    (entry,) = status(rows, bronze_max={"src": 16}, ages={"src": 600.0}, max_lag_seconds=300)
    assert (entry["health"], entry["lag_seconds"], entry["applied_commit_age_seconds"]) == \
           ("lagging", 600.0, 6 * 3600)
    assert status(rows, bronze_max={"src": 16}, ages={"src": 600.0}, max_lag_seconds=1800)[0]["health"] == "ok"
    assert status(rows, bronze_max={"src": 16}, ages={"src": 600.0})[0]["health"] == "ok"


@pytest.fixture
def local_time_not_utc(monkeypatch):
    """This process's local time off UTC for the test (Spark collects timestamps naive, in local time)."""
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_the_last_commit_s_age_reads_a_naive_time_as_local_and_a_commit_stamped_after_now_as_0(local_time_not_utc):
    local = (NOW - timedelta(minutes=5)).astimezone().replace(tzinfo=None)   # as Spark collects timestamps
    assert local != (NOW - timedelta(minutes=5)).replace(tzinfo=None)
    (entry,) = status([progress("src", 10, committed=local)])
    assert entry["applied_commit_age_seconds"] == 300
    (entry,) = status([progress("src", 10, committed=NOW + timedelta(minutes=5))])
    assert entry["applied_commit_age_seconds"] == 0
    (entry,) = status([progress("src", 10, committed=None, lsn=None)])   # nothing committed yet
    assert (entry["applied_commit_age_seconds"], entry["applied_commit_lsn"]) == (None, None)


# -- quarantine --------------------------------------------------------------------------------------------

def test_quarantined_messages_alert_within_the_window_and_are_counted_outside_it():
    rows = [progress("src", 10)]
    (entry,) = status(rows, quarantined={"src": (2, 1)}, ages={"src": 900.0}, max_lag_seconds=60)
    assert (entry["health"], entry["quarantined"], entry["quarantined_recently"]) == ("quarantining", 2, 1)
    (entry,) = status(rows, quarantined={"src": (2, 0)})
    assert (entry["health"], entry["quarantined"], entry["quarantined_recently"], entry["last_error"]) == \
           ("ok", 2, 0, None)


# -- failures: on the source whose message failed ----------------------------------------------------------

def test_a_failure_is_the_failing_source_s_alone_with_its_error():
    got = by_source(status([progress("a", 10, version=3), progress("b", 20, version=3)],
                           failed=failure("a", 4, "unknown message type [source=a, seq=11]"),
                           quarantined={"b": (1, 1)}))
    assert (got["a"]["health"], got["a"]["last_error"]) == ("failing", "unknown message type [source=a, seq=11]")
    assert (got["b"]["health"], got["b"]["last_error"]) == ("quarantining", None)
    assert worst_exit_code(list(got.values())) == 4


def test_a_source_whose_first_batch_failed_is_shown_with_nothing_applied_and_all_it_landed_behind():
    got = by_source(status([progress("shop", 10)], failed=failure("bad", 2), bronze_max={"bad": 3}))
    assert shown_sources(newest_progress([progress("shop", 10)]), failure("bad", 2)) == ["bad", "shop"]
    bad = got["bad"]
    assert (bad["health"], bad["last_error"]) == ("failing", "boom")
    assert [k for k, v in bad.items() if v is None] == \
           ["apply_version", "applied_seq", "applied_commit_lsn", "applied_commit_ts", "oldest_needed_seq",
            "applied_commit_age_seconds", "updated_at"]
    assert bad["lag_seq"] == 3 - SourceState().applied_seq   # seqs from the first on
    assert (got["shop"]["health"], got["shop"]["last_error"]) == ("ok", None)


def test_a_failure_that_names_no_source_is_an_entry_of_its_own_not_a_failure_of_a_source():
    got = status([progress("a", 10, version=3), progress("b", 20, version=3)], failed=failure(None, 4, "gone"))
    assert [e["source"] for e in got] == ["a", "b", None]
    *sources, own = got
    assert {(e["health"], e["last_error"]) for e in sources} == {("ok", None)}
    assert own == {**dict.fromkeys(KEYS), "health": "failing", "last_error": "gone"}
    assert list(own) == list(KEYS) and all(list(e) == list(KEYS) for e in sources)


def test_a_failure_no_longer_counts_once_a_batch_of_its_apply_version_succeeded():
    got = status([progress("a", 10, version=4)], failed=failure("a", 4))
    assert [(e["source"], e["health"], e["last_error"]) for e in got] == [("a", "ok", None)]
    assert status([progress("a", 10, version=4)], failed=failure(None, 3)) == status([progress("a", 10, version=4)])


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


# -- what the carried state says ---------------------------------------------------------------------------

def test_pending_transactions_and_prepared_gids_come_from_the_source_s_carried_state():
    state = SourceState(
        applied_seq=40,
        open_txn=OpenTxn(kind="plain", xid=9, begin_seq=38, begin_lsn=0x200, begin_ts=0),
        prepared=(PreparedTxn(xid=7, gid="g1", ranges=((12, 15),), in_stream=False, sub_aborts=(), begin_seq=12,
                              prepare_seq=15, prepare_lsn=0x100, prepare_end_lsn=0x110, prepare_ts=0),))
    (entry,) = status([progress("src", 40, state=state, lsn=0x1_0000_00A0)])
    assert (entry["pending_open"], entry["pending_streamed"], entry["pending_prepared"]) == (1, 0, 1)
    assert entry["prepared_gids"] == ["g1"]
    assert entry["oldest_needed_seq"] == 12
    assert entry["applied_commit_lsn"] == "1/A0"
