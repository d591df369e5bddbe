"""History tables: one version per transaction that changed a row, compared with every state the
reference applier went through (the history capture: three batches, applied through two crashes)."""

from __future__ import annotations

import json

import pytest

from history_capture import COLUMNS, DOC, as_of, expected, reference_states

pytestmark = pytest.mark.spark


def _history(lake, name: str):
    from cdc_apply.lake.tables import history_ref

    return history_ref(lake.config, "public", name).read(lake.spark)


def _rows(lake, name: str) -> list[dict]:
    return [r.asDict() for r in _history(lake, name).collect()]


@pytest.mark.parametrize("table", sorted(set(COLUMNS) - {"public.plain"}))
def test_the_history_as_of_every_commit_equals_the_reference_state_after_it(history_run, table):
    lake, rows, _ = history_run
    history = _rows(lake, table.split(".")[1])
    states = reference_states(rows)
    assert len(states) == 10
    for lsn, tables in states:
        want = expected(tables.get(table, []), COLUMNS[table])
        assert as_of(history, lsn, COLUMNS[table]) == want, f"{table} as of {lsn:X}"


def test_a_key_gets_one_version_per_transaction_that_changed_it(history_run):
    lake, _, _ = history_run
    versions = sorted((r["_cdc_valid_from_lsn"], r["v"], r["_cdc_operation"], r["_cdc_closed_by"])
                      for r in _rows(lake, "t") if r["id"] == 1)
    assert [(v, op, closed) for _, v, op, closed in versions] == [
        ("v1", "insert", "update"), ("v1b", "update", "update"), ("v1d", "update", "update"),
        ("v1e", "update", "truncate"), ("after truncate", "insert", "update"), ("after truncate b", "update", None)]
    # Validity intervals follow each other without gaps.
    history = sorted((r["_cdc_valid_from_lsn"], r["_cdc_valid_to_lsn"]) for r in _rows(lake, "t") if r["id"] == 1)
    for (_, end), (start, _) in zip(history, history[1:]):
        assert end is not None and end <= start
    assert history[-1][1] is None


def test_unchanged_toast_and_key_moves_carry_the_previous_versions_values(history_run):
    lake, _, _ = history_run
    rows = _rows(lake, "t")
    assert {r["doc"] for r in rows if r["id"] == 1 and r["v"].startswith("v1")} == {DOC + "1"}
    moved = [r for r in rows if r["id"] == 5 and r["v"] == "v2"]
    assert len(moved) == 1 and moved[0]["doc"] == DOC + "2" and moved[0]["_cdc_operation"] == "move"
    assert moved[0]["_cdc_closed_by"] == "delete"   # deleted and re-inserted in one transaction
    gone = [r for r in rows if r["id"] == 2]
    assert len(gone) == 1 and gone[0]["_cdc_closed_by"] == "move"
    assert not [r for r in rows if r["id"] == 4], "inserted and deleted in one transaction: no version"


def test_truncate_closes_every_open_version_and_current_rows_equal_silver(history_run):
    lake, _, _ = history_run
    for name in ("t", "bag", "evo", "tracked"):
        silver = lake.silver("public", name)
        current = [r for r in _rows(lake, name) if r["_cdc_is_current"]]
        assert all(r["_cdc_valid_to_lsn"] is None for r in current)
        rows = sorted(tuple(r[c] for c in silver.columns) for r in current for _ in range(r["_cdc_copies"]))
        assert rows == sorted(tuple(r) for r in silver.collect()), name
    truncated = [r for r in _rows(lake, "bag") if r["_cdc_closed_by"] == "truncate"]
    assert sorted((r["x"], r["y"], r["_cdc_copies"]) for r in truncated) == [(1, "c", 1), (2, "b", 2)]


def test_rows_without_a_key_keep_one_version_per_value_and_copy_count(history_run):
    lake, _, _ = history_run
    ones = sorted((r["_cdc_valid_from_lsn"], r["_cdc_copies"], r["_cdc_operation"], r["_cdc_closed_by"])
                  for r in _rows(lake, "bag") if (r["x"], r["y"]) == (1, "a"))
    assert [row[1:] for row in ones] == [(2, "insert", "delete"), (1, "delete", "update")]


def test_tracked_columns_open_versions_and_other_changes_update_the_open_version_in_place(history_run):
    lake, _, _ = history_run
    versions = sorted((r["_cdc_valid_from_lsn"], r["status"], r["seen"], r["_cdc_closed_by"])
                      for r in _rows(lake, "tracked") if r["id"] == 1)
    assert [v[1:] for v in versions] == [("new", 1, "update"), ("open", 3, "update"), ("closed", 4, None)]


def test_history_columns_follow_silver_through_add_rename_and_drop(history_run):
    lake, _, _ = history_run
    history = _history(lake, "evo")
    assert [c for c in history.columns if not c.startswith("_cdc_")] == ["id", "renamed", "added"]
    versions = sorted((r["id"], r["_cdc_valid_from_lsn"], r["renamed"], r["added"], r["_cdc_closed_by"])
                      for r in _rows(lake, "evo"))
    assert [v[:1] + v[2:] for v in versions] == [
        (1, "a1", None, "update"), (1, "a2", 7, "delete"), (2, "b1", None, "update"), (2, "b2", 8, None)]


def test_each_batch_wrote_one_history_commit_per_table_though_crashes_made_it_run_again(history_run):
    lake, _, _ = history_run
    from cdc_apply.lake.history import history_app_id
    from cdc_apply.lake.ledger import STEPS_PER_VERSION
    from cdc_apply.lake.tables import history_ref

    prefix = history_app_id(lake.config, "hist", 0)[:-1]  # the history's app id, before the relation id
    # Batch 3 changes nothing in t's and bag's histories (it updates a key and deletes a value batch 2's
    # truncate removed): their MERGEs commit nothing, and nothing records their steps.
    for name, versions in (("t", [1, 2]), ("bag", [1, 2]), ("evo", [1, 2, 3]), ("tracked", [1, 2, 3])):
        table = history_ref(lake.config, "public", name).delta_table(lake.spark).history()
        tags = [json.loads(r.userMetadata)["cdc_apply"]
                for r in table.where("operation IN ('MERGE', 'WRITE')").select("userMetadata").collect()]
        steps = [tag["apply_step"] for tag in tags]
        assert len(steps) == len(set(steps)), name       # no history write twice
        assert sorted(step // STEPS_PER_VERSION for step in steps) == versions, name
        assert len({tag["app"] for tag in tags}) == 1 and tags[0]["app"].startswith(prefix), name
    assert not history_ref(lake.config, "public", "plain").exists(lake.spark)
