"""Each transaction's ``tables`` entries assembled with Arrow from counts per (transaction, relation
version): sorted as Spark sorts structs, placed by each source's transaction positions, checked."""

from __future__ import annotations

import pyarrow as pa
import pytest

from cdc_apply.errors import ApplyError
from cdc_apply.lake.books.transaction_rows import count_groups, entry_lists


def _groups(rows: list[tuple]) -> pa.Table:
    source, txn, slot, inserts, updates, deletes = zip(*rows)
    return pa.table({"source": pa.array(source), "txn": pa.array(txn, pa.int32()), "slot": pa.array(slot, pa.int32()),
                     "inserts": pa.array(inserts, pa.int64()), "updates": pa.array(updates, pa.int64()),
                     "deletes": pa.array(deletes, pa.int64())})


def _entry(table, i, u, d, truncated=False, cascade=False, restart=False) -> dict:
    return {"table": table, "inserts": i, "updates": u, "deletes": d, "truncated": truncated, "cascade": cascade,
            "restart_identity": restart}


def test_entries_land_at_each_sources_transaction_positions_sorted_as_spark_sorts_structs():
    groups = _groups([("a", 0, 1, 1, 0, 0), ("a", 0, 0, 2, 1, 0), ("b", 1, 0, 3, 0, 0), ("b", 1, 0, 0, 4, 1)])
    truncate = ("a", 1, "public.z", 0, 0, 0, True, True, False)
    tables, changes, present = entry_lists(groups, [truncate], ["public.x", "public.y"], {"a": 2, "b": 2})
    assert tables.to_pylist() == [
        [_entry("public.x", 2, 1, 0), _entry("public.y", 1, 0, 0)],
        [_entry("public.z", 0, 0, 0, True, True)],
        [],
        # two relation versions of one table: two entries, fewer inserts first
        [_entry("public.x", 0, 4, 1), _entry("public.x", 3, 0, 0)]]
    assert changes.tolist() == [4, 0, 0, 8]
    assert present.tolist() == [True, True, False, True]


def test_groups_in_several_record_batches_land_as_in_one():
    """Spark's toArrow gives one chunk per record batch; the sources differ from chunk to chunk."""
    rows = [("b", 0, 0, 1, 0, 0), ("a", 1, 0, 2, 0, 0), ("a", 0, 1, 0, 3, 0), ("b", 1, 1, 0, 0, 4)]
    whole = _groups(rows)
    chunked = pa.Table.from_batches([b for k in range(len(rows)) for b in whole.slice(k, 1).to_batches()])
    assert chunked.column("source").num_chunks == len(rows)
    names, committed = ["public.x", "public.y"], {"a": 2, "b": 2}
    one, several = entry_lists(whole, [], names, committed), entry_lists(chunked, [], names, committed)
    assert one[0].to_pylist() == several[0].to_pylist() == [
        [_entry("public.y", 0, 3, 0)], [_entry("public.x", 2, 0, 0)],
        [_entry("public.x", 1, 0, 0)], [_entry("public.y", 0, 0, 4)]]
    assert one[1].tolist() == several[1].tolist() == [3, 2, 1, 4]


def test_a_transaction_of_logical_decoding_messages_alone_is_present_with_no_entries():
    tables, changes, present = entry_lists(_groups([("a", 0, None, 0, 0, 0)]), [], ["public.x"], {"a": 1})
    assert (tables.to_pylist(), changes.tolist(), present.tolist()) == ([[]], [0], [True])


def test_no_counts_leave_every_transaction_empty():
    tables, changes, present = entry_lists(None, [], ["public.x"], {"a": 2})
    assert (tables.to_pylist(), changes.tolist(), present.tolist()) == ([[], []], [0, 0], [False, False])


@pytest.mark.parametrize("rows,named", [([("a", 2, 0, 1, 0, 0)], r"\[source=a, txn=2\]"),
                                        ([("c", 0, 0, 1, 0, 0)], r"\[source=c\]")],
                         ids=["a transaction past the source's", "a source the batch did not plan"])
def test_counts_of_a_transaction_the_batch_did_not_commit_are_an_error_naming_it(rows, named):
    with pytest.raises(ApplyError, match=named):
        entry_lists(_groups(rows), [], ["public.x"], {"a": 2, "b": 1})


def _changes(rows: list[tuple]) -> pa.Table:
    source, txn, slot, op = zip(*rows)
    return pa.table({"source": pa.array(source), "txn": pa.array(txn, pa.int32()),
                     "slot": pa.array(slot, pa.int32()), "op": pa.array(op)})


def _counted(groups: pa.Table) -> list[tuple]:
    return sorted((tuple(row.values()) for row in groups.to_pylist()), key=repr)


def test_rows_counted_per_transaction_and_relation_version_equal_a_count_of_each_group():
    import random
    from collections import Counter

    rng = random.Random(7)
    rows = [(rng.choice("ab"), rng.randrange(40), rng.choice([0, 1, 2, None]), rng.choice("IUD"))
            for _ in range(3_000)]
    rows = [(s, t, None, "M") if slot is None else (s, t, slot, op) for s, t, slot, op in rows]
    kinds = Counter((s, t, slot, op) for s, t, slot, op in rows)
    expected = sorted(((s, t, slot, kinds[(s, t, slot, "I")], kinds[(s, t, slot, "U")], kinds[(s, t, slot, "D")])
                       for s, t, slot in {r[:3] for r in rows}), key=repr)
    table = _changes(rows)
    chunked = pa.Table.from_batches([b for k in range(0, len(rows), 700) for b in table.slice(k, 700).to_batches()])
    assert chunked.column("op").num_chunks > 1
    assert _counted(count_groups(table)) == _counted(count_groups(chunked)) == expected


def test_counted_groups_build_the_entries_the_aggregated_ones_do():
    rows = [("a", 0, 1, "I"), ("a", 0, 1, "U"), ("a", 0, 0, "D"), ("a", 1, None, "M"), ("b", 0, 0, "I")]
    counted = count_groups(_changes(rows))
    aggregated = _groups([("a", 0, 1, 1, 1, 0), ("a", 0, 0, 0, 0, 1), ("a", 1, None, 0, 0, 0), ("b", 0, 0, 1, 0, 0)])
    names, committed = ["public.x", "public.y"], {"a": 2, "b": 1}
    one, other = entry_lists(counted, [], names, committed), entry_lists(aggregated, [], names, committed)
    assert one[0].to_pylist() == other[0].to_pylist()
    assert one[1].tolist() == other[1].tolist() == [3, 0, 1] and one[2].tolist() == other[2].tolist()


def test_no_rows_count_no_groups():
    assert count_groups(_changes([("a", 0, 0, "I")]).slice(0, 0)).num_rows == 0
