"""The apply rules, each on its own table, in one job run over three micro-batches.

The stream (``rules_capture``) is built with the encoder and landed in three bronze appends; the
job runs once (availableNow, one append per micro-batch), so transactions open at a batch end,
streamed transactions spanning batches and a prepared transaction committed two batches later are
all exercised. The same capture is then applied other ways (collapses over more partitions, MERGEs
that rewrite files, move resolution by rounds), which must leave the same tables.
"""

from __future__ import annotations

import json

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from cdc_apply.pgoutput.messages import format_lsn

from cdc_apply.lake.silver import collapse as collapse_module, merge
from rules_capture import BIG, apply_rules

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def rules_run(lake_factory):
    """The apply-rules capture (``rules_capture``) applied once with the defaults: (lake, pipeline, printed)."""
    from rules_capture import apply_rules

    lake = lake_factory("rules")
    pipeline, printed = apply_rules(lake)
    return lake, pipeline, printed


@pytest.fixture(scope="module")
def run(rules_run):
    return rules_run


def _rows(df, *cols):
    return sorted(tuple(r) for r in df.select(*cols).collect())


def test_inserts_updates_and_deletes_leave_the_current_rows(run):
    lake, _, _ = run
    assert _rows(lake.silver("public", "basic"), "id", "name") == [
        (1, "one"), (3, "n3"), (4, "n4"), (10, "spans batches"), (11, "after")]


def test_unchanged_toast_keeps_the_stored_value_from_silver_or_from_the_batch(run, spark):
    lake, _, _ = run
    expected = spark.createDataFrame([(1, 10, BIG + "1"), (2, 2, BIG + "2"), (3, 30, BIG + "3")],
                                     "id INT, n INT, doc STRING")
    assert_df_equality(lake.silver("public", "toasty").select("id", "n", "doc"), expected, ignore_row_order=True)


def test_a_key_change_moves_the_row_and_keeps_its_unchanged_toast(run):
    lake, _, _ = run
    assert _rows(lake.silver("public", "moves"), "id", "doc") == [(10, "m1"), (20, "new"), (30, "m3")]


def test_full_identity_without_a_key_keeps_exact_duplicates(run):
    lake, _, _ = run
    assert _rows(lake.silver("public", "dups"), "a", "b") == [(1, "x"), (3, "y")]


def test_truncate_empties_every_listed_table_and_later_changes_apply(run):
    lake, _, _ = run
    assert _rows(lake.silver("public", "parent"), "id") == [(5,)]
    assert _rows(lake.silver("public", "child"), "id") == []


def test_streamed_transactions_apply_at_commit_without_aborted_subtransactions(run):
    lake, _, _ = run
    assert _rows(lake.silver("public", "streamed"), "id", "v") == [(1, "s1"), (3, "s3")]


def test_a_prepared_transaction_applies_at_commit_prepared_and_a_rolled_back_one_never(run):
    lake, _, _ = run
    assert _rows(lake.silver("public", "twophase"), "id", "v") == [(1, "prepared then committed")]


def test_any_names_work_for_namespaces_tables_and_columns(run):
    lake, _, _ = run
    assert (lake.root / "silver" / "we%2Fird%25ns" / 'Mixed "Case", tbl').exists()
    df = lake.silver("we/ird%ns", 'Mixed "Case", tbl')
    assert _rows(df, "id", "`a b,c`", "`ünï`") == [(1, "w2", 11)]
    assert dict(df.dtypes)["ünï"] == "bigint"


def test_silver_rows_carry_commit_lsn_and_commit_time(run):
    lake, _, _ = run
    df = lake.silver("public", "basic")
    assert {"_cdc_commit_lsn", "_cdc_commit_ts"} <= set(df.columns)
    assert df.where("_cdc_commit_lsn IS NULL OR _cdc_commit_ts IS NULL").count() == 0


def test_the_transactions_log_has_one_row_per_applied_transaction(run):
    lake, _, _ = run
    log = lake.state("transactions")
    kinds = sorted(r.kind for r in log.select("kind").collect())
    assert kinds.count("streamed") == 1 and kinds.count("prepared") == 1
    truncating = log.where(F.exists("tables", lambda t: t["truncated"])).collect()
    assert len(truncating) == 1
    flags = {t["table"]: (t["cascade"], t["restart_identity"]) for t in truncating[0]["tables"] if t["truncated"]}
    assert flags == {"public.parent": (True, True), "public.child": (True, True)}


def test_logical_decoding_messages_land_transactional_or_not(run):
    lake, _, _ = run
    msgs = _rows(lake.state("messages"), "prefix", "transactional", "content")
    assert msgs == [("audit", False, bytearray(b"outside")), ("audit", True, bytearray(b"inside"))]


def test_progress_records_the_applied_seq_and_nothing_pending(run):
    lake, pipeline, printed = run
    last = lake.state("progress").orderBy(F.desc("apply_version")).first()
    assert last.applied_seq == pipeline.states["shop"].applied_seq
    assert last.carried == 0 and last.oldest_needed_seq is None
    assert len(printed.strip().splitlines()) == 3 and "public.basic" in printed


def test_each_progress_line_says_where_the_batch_time_went(run):
    _, pipeline, printed = run
    for report, line in zip(pipeline.reports, printed.strip().splitlines()):
        assert list(report.phases) == ["plan", "decode", "tables", "logs", "progress"]
        assert sum(report.phases.values()) <= report.seconds + 1e-6
        assert all(t.seconds > 0 for t in report.tables.values())
        assert f"(plan {report.phases['plan']:.1f}, decode" in line and f"{report.seconds:.1f}s" in line


def test_silver_tables_have_change_data_feed_and_name_their_source(run, spark):
    lake, _, _ = run
    props = {r.key: r.value for r in spark.sql(
        f"SHOW TBLPROPERTIES delta.`{lake.root / 'silver' / 'public' / 'basic'}`").collect()}
    assert props["delta.enableChangeDataFeed"] == "true"
    assert props["delta.columnMapping.mode"] == "name"
    assert props["cdc_apply.relation"] == "public.basic"
    assert "cdc_apply.last_commit_lsn" not in props  # no property commit per batch


def test_each_silver_data_commit_names_the_last_commit_lsn_it_applies(run, spark):
    lake, _, _ = run
    path = lake.root / "silver" / "public" / "basic"
    last = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").where("operation <> 'SET TBLPROPERTIES'").orderBy(
        F.desc("version")).first()
    said = json.loads(last.userMetadata)["cdc_apply"]
    assert said["source"] == "shop" and said["relation"] == "public.basic"
    touched = lake.state("transactions").where(F.exists("tables", lambda t: t["table"] == "public.basic"))
    assert said["last_commit_lsn"] == format_lsn(touched.agg(F.max("commit_lsn")).first()[0])


# -- the same capture applied other ways: the internals that must not change the result --------------

# The tables of the apply-rules capture the variant below can change: applying only those makes its run
# cost a few MERGEs instead of nine tables' (the suite's time is mostly such runs).
KEYED = ("public.basic", "public.toasty", "public.moves", "public.parent")


def _variant_lake(lake_factory, name: str, tables: tuple[str, ...], **extra):
    """The apply-rules capture applied again, to ``tables`` only, with settings of ``extra``."""
    lake = lake_factory(name, **extra, apply={"tables": list(tables)})
    apply_rules(lake)
    return lake


def _silver_tables(lake):
    return sorted(p for p in (lake.root / "silver").glob("*/*") if (p / "_delta_log").exists())


def _contents(lake, tables: tuple[str, ...]) -> dict[str, list]:
    out = {}
    for table in _silver_tables(lake):
        name = f"{table.parent.name}.{table.name}"
        if name in tables:
            df = lake.spark.read.format("delta").load(str(table))
            out[name] = sorted((tuple(r) for r in df.collect()), key=repr)
    return out


def _merge_metrics(lake) -> list[dict]:
    return [row.operationMetrics for table in _silver_tables(lake)
            for row in lake.spark.sql(f"DESCRIBE HISTORY delta.`{table}`").where("operation = 'MERGE'").collect()]


@pytest.mark.spark
def test_collapses_over_more_partitions_merges_that_mark_rows_and_moves_by_rounds_leave_the_same_tables(
        rules_run, lake_factory, monkeypatch):
    """One run of the capture with three internals switched at once (each run of it costs a minute here):
    collapses spread over many partitions, MERGEs that mark rows in deletion vectors instead of
    rewriting the files they touch (the capture's tables are far below ``silver.rewrite_table_bytes``),
    and unchanged TOAST of key moves resolved by rounds of window queries."""
    from cdc_apply.lake.silver import merge_moves

    tables = (*KEYED, "public.dups")  # dups: the keyless MERGE
    rewriting = rules_run[0]          # small tables: the defaults rewrite the files a MERGE touches
    monkeypatch.setattr(merge, "CELLS_PER_PARTITION", 1)
    wanted, rounds = [], []
    real = collapse_module.collapse

    def spy(events, work, has_toast, partitions=None):
        wanted.append(partitions)
        return real(events, work, has_toast, partitions)

    def by_rounds(events, work, target):
        rounds.append(work.qualified_name)
        return merge_moves.resolve_moves_by_rounds(events.localCheckpoint(), work, target)

    monkeypatch.setattr("cdc_apply.lake.silver_tables.collapse", spy)
    monkeypatch.setattr("cdc_apply.lake.silver_tables.resolve_moves", by_rounds)
    other = _variant_lake(lake_factory, "other_internals", tables, silver={"rewrite_table_bytes": 0})
    assert len(_contents(other, tables)) == len(tables)
    assert _contents(other, tables) == _contents(rewriting, tables)
    assert wanted and all(p and p > 4 for p in wanted)
    assert rounds and set(rounds) == {"public.moves"}
    assert any(int(m.get("numTargetDeletionVectorsAdded", 0)) for m in _merge_metrics(other))
    rewrites = _merge_metrics(rewriting)
    assert rewrites and not any(int(m.get("numTargetDeletionVectorsAdded", 0)) for m in rewrites)
    assert any(int(m.get("numTargetFilesRemoved", 0)) for m in rewrites)
