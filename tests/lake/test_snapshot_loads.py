"""A snapshot's rows go from bronze straight into the emptied silver table (one append after its
Truncate), the batch's later changes merge on top, and a re-run batch loads nothing twice."""

from __future__ import annotations

import json

import pytest

from cdc_apply.delta.engine import spark_tables
from cdc_apply.pgoutput import UNCHANGED_TOAST
from cdc_apply.testing.reference import ReferenceApplier
from cdc_apply.testing.stream import StreamBuilder

pytestmark = pytest.mark.spark

DOC = "d" * 3000


class Crash(RuntimeError):
    pass


def _stream():
    b = StreamBuilder("loads")
    t = b.relation("public", "t", [("id", "int8", True), ("v", "text", False), ("doc", "text", False)])
    bag = b.relation("public", "bag", [("x", "int4", False)], replica_identity="f")
    with b.transaction() as tx:                  # silver's rows before the snapshot: all replaced
        tx.insert(t, {"id": 1, "v": "stale", "doc": "old"})
        tx.insert(t, {"id": 99, "v": "gone", "doc": "old"})
        tx.insert(bag, {"x": 0})
    first = len(b.rows())
    b.snapshot(t, [{"id": i, "v": f"v{i}", "doc": DOC + str(i)} for i in range(1, 6)], chunk_rows=2)
    b.snapshot(bag, [{"x": 1}, {"x": 1}])
    with b.transaction() as tx:                  # after the snapshots, in the same batch
        tx.update(t, {"id": 2, "v": "two", "doc": UNCHANGED_TOAST})   # the loaded row's value stays
        tx.delete(t, key={"id": 3})
        tx.insert(t, {"id": 6, "v": "six", "doc": "new"})
        tx.insert(bag, {"x": 5})
    b.snapshot(bag, [{"x": 2}, {"x": 2}, {"x": 3}])   # replaces the first copy of bag and the insert
    return b.rows(), first, t


def _expected(rows):
    ref = ReferenceApplier()
    for _, seq, _, payload in rows:
        ref.feed(seq, payload)
    return (sorted((int(r["id"]), r["v"], r["doc"]) for r in ref.rows("public.t")),
            sorted(int(r["x"]) for r in ref.rows("public.bag")))


def _silver(lake):
    t = sorted((r.id, r.v, r.doc) for r in lake.silver("public", "t").collect())
    bag = sorted(r.x for r in lake.silver("public", "bag").collect())
    return t, bag


def _snapshot_inserts(lake) -> list[int]:
    """The transactions log's inserts per snapshot transaction (xid 2), in commit order."""
    rows = lake.state("transactions").where("xid = 2").orderBy("commit_seq").collect()
    return [sum(t.inserts for t in r.tables) for r in rows]


def test_a_snapshot_is_loaded_by_one_append_after_its_truncate_and_later_changes_merge_on_top(lake_factory):
    lake = lake_factory("snapshot_loads")
    rows, first, t = _stream()
    lake.land(rows[:first])
    lake.apply()
    lake.land(rows[first:])
    _, printed = lake.apply()
    assert _silver(lake) == _expected(rows)
    assert (2, "two", DOC + "2") in _silver(lake)[0]
    from cdc_apply.delta.refs import silver_ref

    history = (spark_tables(lake.spark).delta_table(silver_ref(lake.config, "public", "t")).history()
               .where("userMetadata IS NOT NULL").orderBy("version").collect())
    steps = [(h.operation, json.loads(h.userMetadata)["cdc_apply"].get("apply_step", 0) % 64) for h in history]
    # The batch: the snapshot's Truncate (1), its rows in one append (2), the later changes' MERGE (3).
    assert steps[-3:] == [("DELETE", 1), ("WRITE", 2), ("MERGE", 3)]
    assert _snapshot_inserts(lake) == [5, 2, 3]
    assert "public.t +" in printed


def test_a_batch_run_again_after_its_snapshot_load_loads_nothing_twice(lake_factory):
    from cdc_apply.lake.pipeline import ApplyPipeline

    lake = lake_factory("snapshot_loads_crash", apply={"parallelism": 1})
    rows, first, _ = _stream()
    lake.land(rows[:first])
    lake.apply()
    lake.land(rows[first:])
    state = {}

    def hook(point):
        if point == "logs" and state["pipeline"].version == 1:
            raise Crash("injected crash after the tables")

    pipeline = ApplyPipeline.open(spark_tables(lake.spark), lake.config, fault_hook=hook)
    state["pipeline"] = pipeline
    with pytest.raises(Exception, match="injected crash"):
        pipeline.run(once=True)
    lake.apply()
    assert _silver(lake) == _expected(rows)
    assert _snapshot_inserts(lake) == [5, 2, 3]


def test_key_range_chunks_replace_only_their_ranges_and_changes_before_them(lake_factory):
    from cdc_apply.pgoutput.snapshot import KeyRange

    b = StreamBuilder("ranges")
    t = b.relation("public", "t", [("id", "int8", True), ("v", "text", False), ("doc", "text", False)])
    with b.transaction() as tx:                        # silver before the chunks: 1..10, stale values
        for i in range(1, 11):
            tx.insert(t, {"id": i, "v": "stale", "doc": "old"})
    first = len(b.rows())
    with b.transaction() as tx:                        # committed before the first chunk's point
        tx.update(t, {"id": 2, "v": "two", "doc": DOC})   # in the range: the chunk holds its result
        tx.update(t, {"id": 7, "v": "seven", "doc": "old"})  # outside: applies
    b.snapshot(t, [{"id": 1, "v": "one", "doc": DOC}, {"id": 2, "v": "two", "doc": DOC},
                   {"id": 4, "v": "four", "doc": DOC}],   # 3 is gone from the source
               key_range=KeyRange("id", None, 5, rows=3))
    with b.transaction() as tx:                        # after the chunk
        tx.update(t, {"id": 4, "v": "four!", "doc": UNCHANGED_TOAST})   # the chunk's value stays
        tx.insert(t, {"id": 3, "v": "three again", "doc": "new"})
    second = len(b.rows())
    b.snapshot(t, [{"id": i, "v": f"r{i}", "doc": "x"} for i in (5, 7, 8, 9, 10, 11)],   # 6 is gone
               key_range=KeyRange("id", 5, None, rows=6))
    with b.transaction() as tx:
        tx.delete(t, key={"id": 9})
    rows = b.rows()
    lake = lake_factory("snapshot_ranges")
    lake.land(rows[:first])
    lake.apply()
    lake.land(rows[first:second])                      # the first chunk alone in a batch
    lake.apply()
    lake.land(rows[second:])
    lake.apply()
    ref = ReferenceApplier()
    for _, seq, _, payload in rows:
        ref.feed(seq, payload)
    expected = sorted((int(r["id"]), r["v"], r["doc"]) for r in ref.rows("public.t"))
    got = sorted((r.id, r.v, r.doc) for r in lake.silver("public", "t").collect())
    assert got == expected
    assert [r[:2] for r in got] == [(1, "one"), (2, "two"), (3, "three again"), (4, "four!"), (5, "r5"),
                                    (7, "r7"), (8, "r8"), (10, "r10"), (11, "r11")]
    assert (4, "four!", DOC) in got
    assert _snapshot_inserts(lake) == [3, 6]


def test_chunks_landed_in_one_batch_with_their_changes_load_in_one_append(lake_factory):
    from cdc_apply.pgoutput.snapshot import KeyRange

    b = StreamBuilder("ranges1")
    t = b.relation("public", "t", [("id", "int4", True), ("v", "text", False)])
    b.snapshot(t, [{"id": i, "v": f"a{i}"} for i in range(0, 50)], key_range=KeyRange("id", None, 50, rows=50))
    with b.transaction() as tx:
        tx.update(t, {"id": 10, "v": "changed"})
        tx.insert(t, {"id": 60, "v": "between"})        # in the next chunk's range, before it: the chunk has it
    b.snapshot(t, [{"id": i, "v": f"b{i}"} for i in range(50, 100)], key_range=KeyRange("id", 50, None, rows=50))
    lake = lake_factory("snapshot_ranges_one")
    lake.land(b.rows())
    lake.apply()
    got = dict((r.id, r.v) for r in lake.silver("public", "t").collect())
    assert len(got) == 100 and got[10] == "changed" and got[60] == "b60" and got[99] == "b99"
    from cdc_apply.delta.refs import silver_ref

    history = (spark_tables(lake.spark).delta_table(silver_ref(lake.config, "public", "t")).history()
               .where("userMetadata IS NOT NULL").orderBy("version").collect())
    assert [h.operation for h in history] == ["WRITE", "MERGE"]   # a new table: nothing to empty


def _snapshot_stream(name: str):
    """Stale rows, then a snapshot of t in three blocks; returns (builder rows, index of the head's
    first row, t)."""
    b = StreamBuilder(name)
    t = b.relation("public", "t", [("id", "int8", True), ("v", "text", False)])
    with b.transaction() as tx:
        for i in (1, 50, 99):
            tx.insert(t, {"id": i, "v": "stale"})
    first = len(b.rows())
    b.snapshot(t, [{"id": i, "v": f"s{i}"} for i in range(1, 31)], chunk_rows=10)
    return b.rows(), first, t


def test_a_snapshot_whose_first_blocks_landed_in_an_earlier_batch_still_empties_the_table_first(lake_factory):
    rows, first, _ = _snapshot_stream("snapshot_split")
    split = first + 20                        # the head (marker, Relation, Truncate) and some rows, no commit
    lake = lake_factory("snapshot_split")
    lake.land(rows[:split])
    lake.apply()                              # the snapshot is carried: nothing of it applied yet
    assert sorted(r.v for r in lake.silver("public", "t").collect()) == ["stale"] * 3
    lake.land(rows[split:])
    lake.apply()                              # its early blocks are read again, told apart by payload
    ref = ReferenceApplier()
    for _, seq, _, payload in rows:
        ref.feed(seq, payload)
    got = sorted((r.id, r.v) for r in lake.silver("public", "t").collect())
    assert got == sorted((int(r["id"]), r["v"]) for r in ref.rows("public.t"))
    assert got == [(i, f"s{i}") for i in range(1, 31)]   # 50 and 99 went with the Truncate
    assert _snapshot_inserts(lake) == [30]


def test_a_message_of_another_transaction_inside_a_snapshots_block_fails_the_load_naming_its_seq(lake_factory):
    from cdc_apply.pgoutput import messages as m
    from cdc_apply.pgoutput.encoder import encode

    rows, first, _ = _snapshot_stream("snapshot_stray")
    at = first + 12                           # an Insert in the first block
    source, seq, lsn, payload = rows[at]
    assert payload[:1] == b"I"
    rows[at] = (source, seq, lsn, encode(m.Message(7, True, lsn, "stray", b"x")))
    lake = lake_factory("snapshot_stray")
    lake.land(rows)
    with pytest.raises(Exception, match=rf"(?s)not an Insert of its relation.*Message.*seq={seq}\b"):
        lake.apply()



def test_a_load_reads_four_splits_per_task_slot_and_sizes_its_arrow_batches_by_width():
    from cdc_apply.lake.silver.snapshot_loads import ARROW_BATCH_ROWS, MIN_SPLITS, load_settings

    assert load_settings(15, slots=2) == {ARROW_BATCH_ROWS: "100000", MIN_SPLITS: "8"}
    assert load_settings(60, slots=16) == {ARROW_BATCH_ROWS: "25000", MIN_SPLITS: "64"}
    assert load_settings(400, slots=2)[ARROW_BATCH_ROWS] == "10000"   # never below Spark's default


def test_a_split_count_the_user_set_is_kept_by_a_load():
    from cdc_apply.lake.silver.snapshot_loads import MIN_SPLITS, load_settings

    assert MIN_SPLITS not in load_settings(15, slots=2, user_splits="3")


def test_a_load_whose_rows_fit_the_batch_byte_limit_runs_without_spark_measuring_each_row():
    from cdc_apply.lake.silver.snapshot_loads import ARROW_BATCH_BYTES, UNCHECKED_BATCH_BYTES, load_settings

    # 100,000 rows of at most 600 bytes: 60 MB, within Spark's default 64 MiB, however Spark spells it.
    for limit in ("67108864b", "64m", "64MB", "67108864"):
        assert load_settings(15, slots=2, row_bytes=600, batch_bytes=limit)[ARROW_BATCH_BYTES] == UNCHECKED_BATCH_BYTES
    assert ARROW_BATCH_BYTES not in load_settings(15, slots=2, row_bytes=700, batch_bytes="64m")  # 70 MB
    assert ARROW_BATCH_BYTES not in load_settings(15, slots=2, row_bytes=None, batch_bytes="64m")  # not said
    assert ARROW_BATCH_BYTES not in load_settings(15, slots=2, row_bytes=600, batch_bytes=None)  # no such limit
    assert ARROW_BATCH_BYTES not in load_settings(15, slots=2, row_bytes=600, batch_bytes="lots")


def test_a_loads_row_bytes_come_from_every_chunk_saying_its_longest_payload():
    from types import SimpleNamespace

    from cdc_apply.lake.silver.snapshot_loads import ROW_OVERHEAD_BYTES, load_row_bytes
    from cdc_apply.pgoutput.snapshot import KeyRange

    def chunk(widest):
        return SimpleNamespace(source="src", key_range=KeyRange("id", None, None, rows=1, widest=widest))

    assert load_row_bytes([chunk(90), chunk(120)]) == 120 + len("src") + ROW_OVERHEAD_BYTES
    assert load_row_bytes([chunk(90), chunk(None)]) is None                      # a chunk of an older lander
    assert load_row_bytes([SimpleNamespace(source="src", key_range=None)]) is None   # a whole table's copy


def test_key_range_chunks_load_without_the_per_row_byte_check_and_a_whole_table_keeps_it(lake_factory, monkeypatch):
    import cdc_apply.lake.silver_tables as silver_tables
    from cdc_apply.lake.silver.snapshot_loads import ARROW_BATCH_BYTES
    from cdc_apply.pgoutput.snapshot import KeyRange

    used = []
    real = silver_tables.load_settings
    monkeypatch.setattr(silver_tables, "load_settings", lambda *a, **k: used.append(real(*a, **k)) or used[-1])
    b = StreamBuilder("widest")
    t = b.relation("public", "t", [("id", "int4", True), ("v", "text", False)])
    w = b.relation("public", "w", [("id", "int4", True), ("v", "text", False)])
    b.snapshot(t, [{"id": i, "v": f"t{i}"} for i in range(0, 20)], key_range=KeyRange("id", None, 20, rows=20))
    b.snapshot(w, [{"id": i, "v": f"w{i}"} for i in range(0, 20)])
    lake = lake_factory("snapshot_widest")
    lake.land(b.rows())
    lake.apply()
    assert sorted(r.v for r in lake.silver("public", "t").collect()) == sorted(f"t{i}" for i in range(20))
    assert sorted(r.v for r in lake.silver("public", "w").collect()) == sorted(f"w{i}" for i in range(20))
    assert sorted(ARROW_BATCH_BYTES in s for s in used) == [False, True], used
