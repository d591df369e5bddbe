"""History writes are exactly once through crashes: the history capture's first two batches applied
through two crashes — after a table's history write and before its silver writes in the first batch,
before the second batch's progress — then to the end, compared with the log's steps and with the
reference applier's state after every commit (what test_history.py's crash-free run is compared with).
The capture's third batch crashes nothing: it is left out."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from history_capture import as_of, expected, reference_states

from cdc_apply.delta.engine import spark_tables

pytestmark = pytest.mark.spark

HISTORIES = ("t", "bag", "evo", "tracked")


@pytest.fixture(scope="module")
def crashed_run(lake_factory):
    """(lake, the bronze rows applied): the first two batches, through a crash in each."""
    from history_capture import CONFIG, apply_history

    lake = lake_factory("history_crash", **CONFIG)
    rows, cuts, _ = apply_history(lake, crashes=(("history:public.t", 1), ("progress", 2)), batches=2)
    return lake, rows[:cuts[1]]


def test_a_batch_run_again_after_a_crash_writes_each_tables_history_once_under_one_app_id(crashed_run):
    from cdc_apply.delta.files import open_table
    from cdc_apply.delta.refs import history_ref
    from cdc_apply.lake.books.ledger import STEPS_PER_VERSION
    from cdc_apply.lake.history.tables import history_app_id

    lake, _ = crashed_run
    prefix = history_app_id(lake.config, "hist", 0)[:-1]  # the history's app id, before the relation id
    for name in HISTORIES:   # each changed by both batches
        commits = open_table(history_ref(lake.config, "public", name)).history()   # the log, no Spark job
        tags = [json.loads(c["userMetadata"])["cdc_apply"] for c in commits if c.get("operation") in ("MERGE", "WRITE")]
        steps = [tag["apply_step"] for tag in tags]
        assert len(steps) == len(set(steps)), name       # no history write twice
        assert sorted(step // STEPS_PER_VERSION for step in steps) == [1, 2], name
        assert len({tag["app"] for tag in tags}) == 1 and tags[0]["app"].startswith(prefix), name
    assert not spark_tables(lake.spark).exists(history_ref(lake.config, "public", "plain"))


def test_the_history_written_through_crashes_equals_the_reference_state_after_every_commit(crashed_run):
    from cdc_apply.delta.refs import history_ref

    lake, rows = crashed_run
    states = reference_states(rows)
    # A tracked table's other columns change its open version in place: as of an earlier commit only
    # its tracked column is that commit's.
    columns = {"t": ["id", "v", "doc"], "bag": ["x", "y"], "evo": ["id", "a", "gone", "added"],
               "tracked": ["id", "status"]}
    for name in HISTORIES:
        history = [r.asDict() for r in history_ref(lake.config, "public", name).read(lake.spark).collect()]
        for lsn, tables in states:
            want = expected(tables.get(f"public.{name}", []), columns[name])
            assert as_of(history, lsn, columns[name]) == want, f"{name} as of {lsn:X}"
        current = [r for r in history if r["_cdc_is_current"]]
        silver = lake.silver("public", name)
        assert Counter(tuple(r[c] for c in silver.columns) for r in current for _ in range(r["_cdc_copies"])) \
            == Counter(tuple(r) for r in silver.collect()), name
