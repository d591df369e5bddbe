"""History tables: one version per transaction that changed a row, compared with every state the
reference applier went through (the history capture: three batches, applied by one run of the job);
and read_as_of — several silver tables as of one commit LSN, exact from history tables, batch ends by
time travel — against the same states. One module: the capture is applied once per test worker, and
each history table read once. (Crashes: test_history_crash.py.)"""

from __future__ import annotations

import pytest
from history_capture import COLUMNS, DOC, as_of, expected, reference_states

from cdc_apply import read_as_of
from cdc_apply.errors import AsOfError
from cdc_apply.lake.history.as_of import as_of_views
from cdc_apply.lake.history.lsn import lsn_text, register_lsn_functions

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def history_run(lake_factory):
    """The history capture (``history_capture``) applied with history tables, its three batches by one
    run of the job: (lake, rows, pipeline)."""
    from history_capture import CONFIG, apply_history

    lake = lake_factory("history", **CONFIG)
    rows, _, pipeline = apply_history(lake)
    return lake, rows, pipeline


@pytest.fixture(scope="module")
def histories(history_run):
    """Each history table's rows as Spark reads them, read once: {name: [row dicts, in column order]}."""
    from cdc_apply.delta.refs import history_ref

    lake = history_run[0]
    return {name: [r.asDict() for r in history_ref(lake.config, "public", name).read(lake.spark).collect()]
            for name in ("t", "bag", "evo", "tracked")}


@pytest.mark.parametrize("table", sorted(set(COLUMNS) - {"public.plain"}))
def test_the_history_as_of_every_commit_equals_the_reference_state_after_it(history_run, histories, table):
    _, rows, _ = history_run
    history = histories[table.split(".")[1]]
    states = reference_states(rows)
    assert len(states) == 10
    for lsn, tables in states:
        want = expected(tables.get(table, []), COLUMNS[table])
        assert as_of(history, lsn, COLUMNS[table]) == want, f"{table} as of {lsn:X}"


def test_a_key_gets_one_version_per_transaction_that_changed_it(histories):
    versions = sorted((r["_cdc_valid_from_lsn"], r["v"], r["_cdc_operation"], r["_cdc_closed_by"])
                      for r in histories["t"] if r["id"] == 1)
    assert [(v, op, closed) for _, v, op, closed in versions] == [
        ("v1", "insert", "update"), ("v1b", "update", "update"), ("v1d", "update", "update"),
        ("v1e", "update", "truncate"), ("after truncate", "insert", "update"), ("after truncate b", "update", None)]
    # Validity intervals follow each other without gaps.
    history = sorted((r["_cdc_valid_from_lsn"], r["_cdc_valid_to_lsn"]) for r in histories["t"] if r["id"] == 1)
    for (_, end), (start, _) in zip(history, history[1:]):
        assert end is not None and end <= start
    assert history[-1][1] is None


def test_unchanged_toast_and_key_moves_carry_the_previous_versions_values(histories):
    rows = histories["t"]
    assert {r["doc"] for r in rows if r["id"] == 1 and r["v"].startswith("v1")} == {DOC + "1"}
    moved = [r for r in rows if r["id"] == 5 and r["v"] == "v2"]
    assert len(moved) == 1 and moved[0]["doc"] == DOC + "2" and moved[0]["_cdc_operation"] == "move"
    assert moved[0]["_cdc_closed_by"] == "delete"   # deleted and re-inserted in one transaction
    gone = [r for r in rows if r["id"] == 2]
    assert len(gone) == 1 and gone[0]["_cdc_closed_by"] == "move"
    assert not [r for r in rows if r["id"] == 4], "inserted and deleted in one transaction: no version"


def test_truncate_closes_every_open_version_and_current_rows_equal_silver(history_run, histories):
    lake, _, _ = history_run
    for name in ("t", "bag", "evo", "tracked"):
        silver = lake.silver("public", name)
        current = [r for r in histories[name] if r["_cdc_is_current"]]
        assert all(r["_cdc_valid_to_lsn"] is None for r in current)
        rows = sorted(tuple(r[c] for c in silver.columns) for r in current for _ in range(r["_cdc_copies"]))
        assert rows == sorted(tuple(r) for r in silver.collect()), name
    truncated = [r for r in histories["bag"] if r["_cdc_closed_by"] == "truncate"]
    assert sorted((r["x"], r["y"], r["_cdc_copies"]) for r in truncated) == [(1, "c", 1), (2, "b", 2)]


def test_rows_without_a_key_keep_one_version_per_value_and_copy_count(histories):
    ones = sorted((r["_cdc_valid_from_lsn"], r["_cdc_copies"], r["_cdc_operation"], r["_cdc_closed_by"])
                  for r in histories["bag"] if (r["x"], r["y"]) == (1, "a"))
    assert [row[1:] for row in ones] == [(2, "insert", "delete"), (1, "delete", "update")]


def test_tracked_columns_open_versions_and_other_changes_update_the_open_version_in_place(histories):
    versions = sorted((r["_cdc_valid_from_lsn"], r["status"], r["seen"], r["_cdc_closed_by"])
                      for r in histories["tracked"] if r["id"] == 1)
    assert [v[1:] for v in versions] == [("new", 1, "update"), ("open", 3, "update"), ("closed", 4, None)]


def test_history_columns_follow_silver_through_add_rename_and_drop(histories):
    assert [c for c in histories["evo"][0] if not c.startswith("_cdc_")] == ["id", "renamed", "added"]
    versions = sorted((r["id"], r["_cdc_valid_from_lsn"], r["renamed"], r["added"], r["_cdc_closed_by"])
                      for r in histories["evo"])
    assert [v[:1] + v[2:] for v in versions] == [
        (1, "a1", None, "update"), (1, "a2", 7, "delete"), (2, "b1", None, "update"), (2, "b2", 8, None)]


# -- read_as_of ----------------------------------------------------------------------------------------

def _state(frame, columns):
    """The frame's rows as the reference applier names them; a column the table did not have yet reads NULL."""
    rows = [r.asDict() for r in frame.collect()]
    return expected([{c: (None if r.get(c) is None else str(r[c])) for c in columns} for r in rows], columns)


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
