"""Collapsing a table's changes to one row per key, and how many partitions it takes."""

from __future__ import annotations

import pytest

from cdc_apply.lake.silver import appends
from cdc_apply.lake.silver.merge import collapse_partitions, writes_deletion_vectors


def test_a_collapse_takes_more_partitions_only_when_its_values_outgrow_the_default():
    assert collapse_partitions(1_000, 10, default=4) is None
    assert collapse_partitions(100_000, 7, default=4) is None            # the bench's narrow tables
    assert collapse_partitions(95_000, 300, default=4) == 15             # the soak's wide table
    assert collapse_partitions(95_000, 600, default=4) > collapse_partitions(95_000, 300, default=4)


def test_an_append_takes_one_file_per_eight_million_values():
    assert appends.append_files(0, 6) == 1
    assert appends.append_files(100_000, 8) == 1                          # a bench table's base load
    assert appends.append_files(1_000_000, 8) == 2
    assert appends.append_files(1_000_000, 300) > appends.append_files(1_000_000, 8)


@pytest.mark.spark
def test_an_insert_only_load_into_an_empty_table_writes_files_by_rows_not_by_decode_partition(spark, tmp_path):
    from pyspark.sql import functions as F

    from cdc_apply.delta.refs import TableRef
    from cdc_apply.lake.silver.appends import append_rows
    from cdc_apply.planning.table_plan import TableWork
    from cdc_apply.planning.tables import SilverColumn

    ref = TableRef(path=str(tmp_path / "t"))
    work = TableWork(source="s", relation_id=1, qualified_name="public.t", ref=ref,
                     columns=(SilverColumn("id", "INT", 0), SilverColumn("v", "STRING", 1)), key=("id",),
                     slots=(), truncate_after=None, meta=(("_lsn", "_commit_lsn"),))
    # Eight partitions of decoded change rows, as the decode stage hands a batch's rows over.
    projected = spark.range(0, 4_000, numPartitions=8).select(
        F.col("id").cast("int").alias("n_0"), F.col("id").cast("string").alias("n_1"),
        F.lit("I").alias("_op"), F.col("id").alias("_commit_lsn"))
    append_rows(spark, projected, work, '{"cdc_apply":{}}', inserts=4_000)
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{ref.path}`").first()
    assert detail.numFiles == 1
    assert spark.read.format("delta").load(ref.path).count() == 4_000


def _never_counted():
    raise AssertionError("a small batch must not count the table's rows")


def test_a_merge_marks_rows_in_deletion_vectors_unless_its_batch_changes_half_the_table():
    assert writes_deletion_vectors(9_999, _never_counted, 0.5)
    assert writes_deletion_vectors(49_999, lambda: 100_000, 0.5)
    assert not writes_deletion_vectors(50_000, lambda: 100_000, 0.5)
    assert not writes_deletion_vectors(988_174, lambda: 1_000_000, 0.5)   # the bench's 1M batch
    assert not writes_deletion_vectors(10_000, lambda: 10**9, 0.0)        # 0: every large MERGE rewrites


def _never_sized():
    raise AssertionError("without rewrite_table_bytes the table's size must not be asked for")


def test_a_merge_into_a_table_smaller_than_rewrite_table_bytes_rewrites_its_files_whatever_the_batch():
    small = 8 * 1024 * 1024
    assert not writes_deletion_vectors(10, _never_counted, 0.5, lambda: small - 1, small)
    assert not writes_deletion_vectors(10, _never_counted, 0.5, lambda: 0, small)   # empty or just truncated
    assert writes_deletion_vectors(10, _never_counted, 0.5, lambda: small, small)
    assert writes_deletion_vectors(10, _never_counted, 0.5, lambda: None, small)    # size unknown: mark rows
    assert writes_deletion_vectors(10, _never_counted, 0.5, _never_sized, 0)        # 0: mark rows in any table
    assert not writes_deletion_vectors(60_000, lambda: 100_000, 0.5, lambda: 10 * small, small)


@pytest.mark.spark
def test_a_keyless_batch_applies_each_rows_changes_in_commit_order_when_some_find_no_copy(lake_factory):
    """A Delete or Update of a row silver lacks changes nothing at its place in the order, as in
    PostgreSQL's apply worker and the reference applier: netting the batch per row would let it cancel
    an Insert that comes after it."""
    from collections import Counter

    from cdc_apply.testing.reference import ReferenceApplier
    from cdc_apply.testing.stream import StreamBuilder

    b = StreamBuilder("keyless")
    dups = b.relation("public", "dups", [("a", "int4", True), ("b", "text", True)], replica_identity="f")
    with b.transaction() as tx:
        tx.insert(dups, {"a": 1, "b": "x"})
        tx.insert(dups, {"a": 1, "b": "x"})
        tx.insert(dups, {"a": 2, "b": "y"})
    first = len(b.rows())
    with b.transaction() as tx:
        tx.delete(dups, old={"a": 3, "b": "z"})                    # no copy yet: nothing happens
    with b.transaction() as tx:
        tx.insert(dups, {"a": 3, "b": "z"})
    with b.transaction() as tx:
        for _ in range(3):                                         # the third finds no copy left
            tx.delete(dups, old={"a": 1, "b": "x"})
        tx.insert(dups, {"a": 1, "b": "x"})
        for _ in range(2):                                         # the second moves no copy away
            tx.update(dups, {"a": 4, "b": "w"}, old={"a": 2, "b": "y"})
    rows = b.rows()
    lake = lake_factory("keyless_order")
    lake.land(rows[:first])
    lake.land(rows[first:])
    lake.apply()
    silver = Counter((r.a, r.b) for r in lake.silver("public", "dups").collect())
    reference = ReferenceApplier()
    for _, seq, _, payload in rows:
        reference.feed(seq, payload)
    assert silver == Counter((int(r["a"]), r["b"]) for r in reference.rows("public.dups"))
    assert silver == Counter({(1, "x"): 1, (3, "z"): 1, (4, "w"): 2})


@pytest.mark.spark
@pytest.mark.parametrize("rewrite_table_bytes,ranged", [(8 * 1024 * 1024, False), (0, True)],
                         ids=["a small table rewritten whole", "a table whose rows are marked"])
def test_a_merge_is_bounded_by_the_batch_s_key_range_only_where_files_can_be_skipped(
        lake_factory, monkeypatch, rewrite_table_bytes, ranged):
    from cdc_apply.lake import silver_tables
    from cdc_apply.testing.stream import StreamBuilder

    ranges = []
    key_range = silver_tables.key_range
    monkeypatch.setattr(silver_tables, "key_range", lambda rows, work: ranges.append(key_range(rows, work)) or ranges[-1])
    lake = lake_factory(f"key_range_{ranged}", silver={"rewrite_table_bytes": rewrite_table_bytes})
    b = StreamBuilder("src")
    t = b.relation("public", "t", [("id", "int4", True), ("v", "text", False)])
    with b.transaction() as tx:
        for i in range(10):
            tx.insert(t, {"id": i, "v": "a"})
    lake.land(b.rows())
    lake.apply()
    with b.transaction() as tx:
        tx.update(t, {"id": 3, "v": "b"})
        tx.update(t, {"id": 7, "v": "b"})
        tx.delete(t, {"id": 5})
    lake.land(b.rows()[-5:])
    lake.apply()
    assert ranges == ([(3, 3, 7)] if ranged else [])
    assert sorted((r.id, r.v) for r in lake.silver("public", "t").collect()) == \
        [(i, "b" if i in (3, 7) else "a") for i in range(10) if i != 5]


def _change_rows(spark, rows, width: int):
    """Projected change rows (``project``'s columns) of a table ``id`` + ``width - 1`` text columns:
    ``rows`` of (seq, op, new values or None, old key or None, carried flags)."""
    from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType

    from cdc_apply.planning import columns as cc

    fields = [StructField(cc.SEQ, LongType()), StructField(cc.COMMIT_LSN, LongType()),
              StructField(cc.COMMIT_TS, StringType()), StructField(cc.XID, LongType()),
              StructField(cc.ORIGIN, StringType()), StructField(cc.USER, StringType()),
              StructField(cc.OP, StringType()), StructField(cc.OLD_KIND, StringType())]
    for i in range(width):
        kind = LongType() if i == 0 else StringType()
        fields += [StructField(cc.value(i), kind), StructField(cc.old(i), kind),
                   StructField(cc.carried(i), BooleanType()), StructField(cc.present(i), BooleanType())]
    data = []
    for seq, op, new, old_key, carried in rows:
        new = new or [None] * width
        row = [seq, 100 + seq, None, seq, None, None, op, None if old_key is None else "K"]
        for i in range(width):
            row += [new[i], old_key if i == 0 else None, op != "D" and carried[i], op != "D"]
        data.append(row)
    return spark.createDataFrame(data, StructType(fields))


@pytest.mark.spark
def test_the_collapse_keeps_the_last_event_of_each_key_fills_unchanged_toast_and_moves_keys(spark):
    from cdc_apply.delta.refs import TableRef
    from cdc_apply.lake.silver.collapse import collapse, key_events
    from cdc_apply.planning.table_plan import TableWork
    from cdc_apply.planning.tables import SilverColumn

    width = 3
    work = TableWork(source="s", relation_id=1, qualified_name="public.t", ref=TableRef(path="/nowhere"),
                     columns=(SilverColumn("id", "BIGINT", 0), SilverColumn("a", "STRING", 1),
                              SilverColumn("b", "STRING", 2)), key=("id",), slots=(), truncate_after=None, meta=())
    every, toast_b = [True] * width, [True, True, False]
    changes = _change_rows(spark, [
        (1, "I", [1, "a1", "b1"], None, every),
        (2, "U", [1, "a2", None], None, toast_b),   # b unchanged TOAST: keeps the insert's b1
        (3, "I", [2, "x", "y"], None, every),
        (4, "D", None, 2, every),                   # key 2 goes: the last event decides
        (5, "U", [7, "m", None], 5, toast_b),       # key 5 moves to 7; b is silver's to fill
    ], width)
    rows = {r["k_0"]: r.asDict() for r in collapse(key_events(changes, work), work, has_toast=True).collect()}
    assert sorted(rows) == [1, 2, 5, 7]
    assert (rows[1]["_action"], rows[1]["v_1"], rows[1]["v_2"], rows[1]["_complete"]) == ("upsert", "a2", "b1", True)
    assert rows[1]["_new"] and rows[7]["_new"] and not rows[5]["_new"]   # a move-in is a new key's first event
    assert rows[2]["_action"] == "delete" and rows[5]["_action"] == "delete"
    assert (rows[7]["_action"], rows[7]["v_1"], rows[7]["s_2"], rows[7]["_complete"]) == ("upsert", "m", False, False)


@pytest.mark.spark
def test_a_wide_table_s_collapse_is_planned_in_a_few_py4j_round_trips_per_column(spark, monkeypatch):
    """Built as SQL text (~11 round trips a column): through the Column API the two selections took ~450 a
    column of a 40-column table, each a pause of a thread that holds the GIL while the batch's other
    tables wait for it."""
    import threading

    import py4j.java_gateway
    import py4j.protocol

    from cdc_apply.delta.refs import TableRef
    from cdc_apply.lake.silver.collapse import collapse, key_events
    from cdc_apply.planning.table_plan import TableWork
    from cdc_apply.planning.tables import SilverColumn

    width = 40
    columns = (SilverColumn("id", "BIGINT", 0),) + tuple(SilverColumn(f"c{i}", "STRING", i) for i in range(1, width))
    work = TableWork(source="s", relation_id=1, qualified_name="public.wide", ref=TableRef(path="/nowhere"),
                     columns=columns, key=("id",), slots=(), truncate_after=None, meta=())
    changes = _change_rows(spark, [(1, "I", [1] + ["v"] * (width - 1), None, [True] * width)], width)
    calls = []
    send = py4j.java_gateway.GatewayClient.send_command
    planner = threading.get_ident()

    def count(self, command, *a, **k):
        # Only this thread's calls: the finalizers of other tests' JavaObjects send memory-delete commands
        # through the same client whenever Python's GC runs, and they are not the collapse's round trips.
        if threading.get_ident() == planner and not command.startswith(py4j.protocol.MEMORY_COMMAND_NAME):
            calls.append(command[:2])
        return send(self, command, *a, **k)

    monkeypatch.setattr(py4j.java_gateway.GatewayClient, "send_command", count)
    collapsed = collapse(key_events(changes, work), work, has_toast=True)
    monkeypatch.undo()
    assert len(calls) < 16 * width
    assert collapsed.count() == 1
