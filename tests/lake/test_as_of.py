"""read_as_of: several silver tables as of one commit LSN — exact from history tables, batch ends by
time travel — compared with the reference applier's state after each commit (the history capture)."""

from __future__ import annotations

import pytest

from cdc_apply import read_as_of
from cdc_apply.lake.as_of import as_of_views
from cdc_apply.lake.lsn import lsn_text, register_lsn_functions
from cdc_apply.errors import AsOfError
from history_capture import COLUMNS, expected, reference_states

pytestmark = pytest.mark.spark


def _state(frame, columns):
    return expected([{c: (None if r[c] is None else str(r[c])) for c in columns} for r in frame.collect()], columns)


def _commits(rows):
    return reference_states(rows)


def test_history_tables_read_as_of_any_commit_show_that_commits_state(history_run):
    lake, rows, _ = history_run
    states = _commits(rows)
    tables = ["public.t", "public.bag", "public.evo"]
    for k in (1, 5):  # within the first batch, and within the second (between two truncates' neighbours)
        lsn, state = states[k]
        result = read_as_of(lake.spark, lake.config, lsn + 1, tables=tables)  # between this commit and the next
        assert (result.method, result.lsn, result.exact) == ("history", lsn, True)
        for name in tables:
            assert _state(result[name], COLUMNS[name]) == expected(state.get(name, []), COLUMNS[name]), (k, name)


def test_a_table_without_history_makes_the_read_time_travel_to_the_newest_batch_end(history_run):
    lake, rows, pipeline = history_run
    states = _commits(rows)
    first_batch_end = states[2][0]
    result = read_as_of(lake.spark, lake.config, lsn_text(states[5][0]), tables=["public.t", "public.plain"])
    assert (result.method, result.lsn, result.exact) == ("time travel", first_batch_end, False)
    for name in ("public.t", "public.plain"):
        assert _state(result[name], COLUMNS[name]) == expected(states[2][1][name], COLUMNS[name]), name


def test_reads_past_the_last_applied_commit_show_the_last_one_and_before_the_first_show_nothing(history_run):
    lake, rows, _ = history_run
    states = _commits(rows)
    late = read_as_of(lake.spark, lake.config, 2 ** 62, tables=["public.bag"])
    assert late.lsn == states[-1][0] and late.exact
    assert _state(late["public.bag"], ["x", "y"]) == expected(states[-1][1]["public.bag"], ["x", "y"])
    early = read_as_of(lake.spark, lake.config, states[0][0] - 1, tables=["public.t", "public.plain"])
    assert early.lsn is None and early["public.t"].count() == 0 and early["public.plain"].count() == 0


def test_views_and_lsn_functions_let_sql_read_tables_as_of_an_lsn(history_run):
    lake, rows, _ = history_run
    states = _commits(rows)
    register_lsn_functions(lake.spark)
    lsn = states[3][0]
    result = as_of_views(lake.spark, lake.config, lsn_text(lsn), tables=["public.t", "public.evo"], prefix="asof_")
    got = lake.spark.sql(f"SELECT cdc_lsn_text({lsn}) AS text, cdc_lsn('{lsn_text(lsn)}') AS value, "
                         "(SELECT count(*) FROM asof_t) AS t, (SELECT count(*) FROM asof_evo) AS evo").first()
    assert (got.text, got.value, result.lsn) == (lsn_text(lsn), lsn, lsn)
    assert (got.t, got.evo) == (len(states[3][1]["public.t"]), len(states[3][1]["public.evo"]))
    assert lake.spark.sql("SELECT cdc_lsn_text(0) AS a, cdc_lsn_text(CAST(97000000123 AS BIGINT)) AS b").first() \
        == ("0/0", "16/95A68A7B")


@pytest.mark.parametrize("kwargs,message", [
    ({"tables": ["public.nope"]}, "no relation of that name"),
    ({"tables": ["public.plain"], "method": "history"}, "no history table"),
    ({"lsn": "not/an lsn"}, "not an LSN"),
    ({"source": "elsewhere"}, "no source 'elsewhere'"),
])
def test_reads_that_cannot_be_answered_are_named_errors(history_run, kwargs, message):
    lake, _, _ = history_run
    args = {"lsn": 2 ** 40, **kwargs}
    with pytest.raises(AsOfError, match=message):
        read_as_of(lake.spark, lake.config, **args)


def test_progress_records_each_changed_tables_delta_version_per_batch(history_run):
    lake, _, _ = history_run
    from pyspark.sql import functions as F

    rows = (lake.state("progress").select("apply_version", F.explode("tables").alias("t"))
            .select("apply_version", "t.*").collect())
    by_batch = {}
    for r in rows:
        by_batch.setdefault(r.apply_version, {})[r.table] = r
    assert sorted(by_batch) == [1, 2, 3]
    assert set(by_batch[1]) == {"public.t", "public.bag", "public.evo", "public.tracked", "public.plain"}
    assert all(r.history_version is None for b in by_batch.values() for n, r in b.items() if n == "public.plain")
    assert all(r.history_version is not None for b in by_batch.values() for n, r in b.items() if n != "public.plain")
    versions = [by_batch[v]["public.tracked"].silver_version for v in (1, 2, 3)]
    assert versions == sorted(versions) and len(set(versions)) == 3
    # Batch 3's only change of t updates a key its truncate removed: the MERGE commits nothing.
    versions = [by_batch[v]["public.t"].silver_version for v in (1, 2, 3)]
    assert versions[0] < versions[1] == versions[2]
