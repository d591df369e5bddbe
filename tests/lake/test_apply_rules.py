"""The apply rules in one job run over three micro-batches: silver equals the reference applier.

The stream (``rules_capture``) is built with the encoder and landed in three bronze appends; the
job runs once (availableNow, one append per micro-batch), so transactions open at a batch end,
streamed transactions spanning batches and a prepared transaction committed two batches later are
all exercised. What each rule leaves is stated on the reference applier, in pure tests
(tests/testing/test_reference_rules.py); here every silver table equals its reference table, and
the tests read what only the Spark job shows: names on disk, the state tables, progress lines,
table properties and commit metadata. The same capture is then applied other ways (collapses over
more partitions, MERGEs that mark rows, move resolution by rounds), which must leave the same tables.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
from pyspark.sql import functions as F
from rules_capture import apply_rules, build_rules, reference_rules

from cdc_apply.lake.silver import collapse as collapse_module
from cdc_apply.lake.silver import merge
from cdc_apply.pgoutput.messages import format_lsn
from cdc_apply.testing.reference import ReferenceApplier

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def rules_run(lake_factory):
    """The apply-rules capture (``rules_capture``) applied once with the defaults: (lake, pipeline, printed)."""
    lake = lake_factory("rules")
    pipeline, printed = apply_rules(lake)
    return lake, pipeline, printed


@pytest.fixture(scope="module")
def run(rules_run):
    return rules_run


@pytest.fixture(scope="module")
def reference() -> ReferenceApplier:
    """The same capture through the reference applier."""
    return reference_rules()


def _rows(df, *cols):
    return sorted(tuple(r) for r in df.select(*cols).collect())


def _text(value):
    return None if value is None else str(value)


def test_every_silver_table_equals_the_reference_applier_table_after_three_batches(run, reference):
    """Key moves, unchanged TOAST, keyless duplicates, a cascading truncate, streamed and two-phase
    transactions spanning batches, names that need quoting: each table's rows, column for column."""
    lake, _, _ = run
    names = reference.table_names()
    on_disk = sorted(f"{p.parent.name}.{p.name}" for p in (lake.root / "silver").glob("*/*")
                     if (p / "_delta_log").exists())
    assert len(on_disk) == len(names) == 9
    differences = {}
    for name in names:
        df = lake.silver(*name.split(".", 1))
        columns = [c for c in df.columns if not c.startswith("_cdc_")]
        want = reference.rows(name)
        got = Counter(tuple(map(_text, r)) for r in df.select(*[f"`{c}`" for c in columns]).collect())
        if any(list(r) != columns for r in want) or got != Counter(tuple(r.values()) for r in want):
            differences[name] = (columns, sorted(got), want)
    assert differences == {}


def test_any_names_work_for_namespaces_tables_and_columns(run):
    lake, _, _ = run
    assert (lake.root / "silver" / "we%2Fird%25ns" / 'Mixed "Case", tbl').exists()
    df = lake.silver("we/ird%ns", 'Mixed "Case", tbl')
    assert [c for c in df.columns if not c.startswith("_cdc_")] == ["id", "a b,c", "ünï"]
    assert dict(df.dtypes)["ünï"] == "bigint"


def test_silver_rows_carry_commit_lsn_and_commit_time(run):
    lake, _, _ = run
    df = lake.silver("public", "basic")
    assert {"_cdc_commit_lsn", "_cdc_commit_ts"} <= set(df.columns)
    assert df.where("_cdc_commit_lsn IS NULL OR _cdc_commit_ts IS NULL").count() == 0


def test_the_transactions_log_has_one_row_per_transaction_the_reference_committed(run, reference):
    lake, _, _ = run
    log = lake.state("transactions")
    assert sorted((r.commit_lsn, r.kind) for r in log.select("commit_lsn", "kind").collect()) == sorted(
        reference.committed)
    truncating = log.where(F.exists("tables", lambda t: t["truncated"])).collect()
    assert len(truncating) == 1
    flags = {t["table"]: (t["cascade"], t["restart_identity"]) for t in truncating[0]["tables"] if t["truncated"]}
    assert flags == {"public.parent": (True, True), "public.child": (True, True)}


def test_logical_decoding_messages_land_transactional_or_not_as_the_reference_keeps_them(run, reference):
    lake, _, _ = run
    msgs = _rows(lake.state("messages"), "prefix", "transactional", "content")
    assert [(p, t, bytes(c)) for p, t, c in msgs] == sorted(
        (m.prefix, m.transactional, bytes(m.content)) for m in reference.messages)
    assert len(msgs) == 2


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

# The tables of the apply-rules capture whose MERGEs the variant below changes (dups: the keyless MERGE).
# Their last changes are in the capture's second append: the variant applies those tables only, over the
# first two appends — two batches of four tables instead of three of nine (the suite's time is mostly
# such runs).
VARIED = ("public.basic", "public.toasty", "public.moves", "public.dups")


def _variant_lake(lake_factory, name: str, tables: tuple[str, ...], **extra):
    """The apply-rules capture's first two appends applied again, to ``tables`` only, with settings of ``extra``."""
    lake = lake_factory(name, **extra, apply={"tables": list(tables)})
    rows, cuts = build_rules()
    lake.land(rows[:cuts[0]])
    lake.land(rows[cuts[0]:cuts[1]])
    lake.apply()
    return lake


def _silver_tables(lake, tables: tuple[str, ...]):
    return [lake.root / "silver" / name.replace(".", "/", 1) for name in tables]


def _contents(lake, tables: tuple[str, ...]) -> dict[str, list]:
    """Every column of every row, ``_cdc_`` columns too, of each of ``tables`` that exists."""
    out = {}
    for name, table in zip(tables, _silver_tables(lake, tables)):
        if (table / "_delta_log").exists():
            df = lake.spark.read.format("delta").load(str(table))
            out[name] = sorted((tuple(r) for r in df.collect()), key=repr)
    return out


def _merge_metrics(lake, tables: tuple[str, ...]) -> list[dict]:
    return [row.operationMetrics for table in _silver_tables(lake, tables)
            for row in lake.spark.sql(f"DESCRIBE HISTORY delta.`{table}`").where("operation = 'MERGE'").collect()]


@pytest.mark.spark
def test_collapses_over_more_partitions_merges_that_mark_rows_and_moves_by_rounds_leave_the_same_tables(
        rules_run, lake_factory, monkeypatch):
    """One run of the capture with three internals switched at once (each run of it costs a minute here):
    collapses spread over many partitions, MERGEs that mark rows in deletion vectors instead of
    rewriting the files they touch (the capture's tables are far below ``silver.rewrite_table_bytes``),
    and unchanged TOAST of key moves resolved by rounds of window queries."""
    from cdc_apply.lake.silver import merge_moves

    rewriting = rules_run[0]          # small tables: the defaults rewrite the files a MERGE touches
    monkeypatch.setattr(merge, "CELLS_PER_PARTITION", 1)
    wanted, rounds = [], []
    real = collapse_module.collapse

    def spy(events, work, has_toast, partitions=None):
        wanted.append((work.qualified_name, partitions))
        return real(events, work, has_toast, partitions)

    def by_rounds(events, work, target):
        rounds.append(work.qualified_name)
        return merge_moves.resolve_moves_by_rounds(events.localCheckpoint(), work, target)

    monkeypatch.setattr("cdc_apply.lake.silver_tables.collapse", spy)
    monkeypatch.setattr("cdc_apply.lake.silver_tables.resolve_moves", by_rounds)
    other = _variant_lake(lake_factory, "other_internals", VARIED, silver={"rewrite_table_bytes": 0})
    theirs = _contents(other, VARIED)
    assert len(theirs) == len(VARIED)
    assert theirs == _contents(rewriting, VARIED)
    assert {name for name, _ in wanted} == {"public.basic", "public.toasty", "public.moves"}
    assert all(p and p > 4 for _, p in wanted)
    assert rounds and set(rounds) == {"public.moves"}
    assert any(int(m.get("numTargetDeletionVectorsAdded", 0)) for m in _merge_metrics(other, VARIED))
    rewrites = _merge_metrics(rewriting, VARIED)
    assert rewrites and not any(int(m.get("numTargetDeletionVectorsAdded", 0)) for m in rewrites)
    assert any(int(m.get("numTargetFilesRemoved", 0)) for m in rewrites)
