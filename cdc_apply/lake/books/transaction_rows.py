"""The transactions log's per-table entries, assembled with Arrow from counts per (transaction, table).

A batch of many transactions has its changes counted per (source, transaction, relation version) on the
driver: each change's source, transaction, relation version and kind come through Arrow (a batch of 1M
changes: ~17 MB) and are counted by a sort (:func:`count_groups`; past a bound, by one Spark aggregation
over the cached decode whose groups come through Arrow instead: ~650,000 for that batch), and the groups
become each transaction's ``tables`` list here, by sorting and offsets rather than a Python loop or a
second Spark shuffle. Collecting the lists in Spark instead (``collect_list`` of structs, then a join with
the committed transactions) took 4–5 s of such a batch against ~1 s for the aggregation alone.

No Spark here: pyarrow and numpy only.
"""

from __future__ import annotations

from typing import Sequence

import pyarrow as pa

from cdc_apply.errors import ApplyError

# The fields of one ``tables`` entry, in the order they sort (the order Spark's sort_array gives structs).
ENTRY_FIELDS = ("table", "inserts", "updates", "deletes", "truncated", "cascade", "restart_identity")
FLAGS = ("truncated", "cascade", "restart_identity")
ENTRY_TYPE = pa.struct([(f, pa.string() if f == "table" else pa.bool_() if f in FLAGS else pa.int64())
                        for f in ENTRY_FIELDS])


def entry_lists(groups, extra: Sequence[tuple], slot_names: Sequence[str], committed: dict[str, int]):
    """Each committed transaction's entries and changes, by its position in the batch.

    ``groups``: an Arrow table of (source, txn, slot, inserts, updates, deletes), one row per (source,
    transaction, relation version, or NULL for a transaction's logical decoding messages), or None;
    ``extra``: tuples (source, txn, table, inserts, updates, deletes, truncated, cascade,
    restart_identity) of the snapshot loads' and truncates' entries, built on the driver;
    ``slot_names``: a relation version's table name by slot; ``committed``: each source's committed
    transactions, in the order the batch lists them (source ``s``'s transaction ``txn`` is at position
    ``txn`` after those of the sources before it).

    Returns (tables, changes, present), one element per position: a list<struct> array of sorted
    entry lists, the changes (inserts + updates + deletes) and whether the transaction had any group
    or entry (one with neither is empty)."""
    import numpy as np
    import pyarrow.compute as pc

    total = sum(committed.values())
    columns: dict[str, list] = {k: [] for k in ("position", "keep", *ENTRY_FIELDS)}
    if groups is not None and groups.num_rows:
        slot = _array(groups.column("slot")).cast(pa.int32())
        columns["position"].append(_positions(groups.column("source"), groups.column("txn"), committed))
        columns["keep"].append(pc.is_valid(slot))   # a NULL slot: messages only, no entry
        columns["table"].append(pc.take(pa.array(list(slot_names), pa.string()), slot))
        for field in ("inserts", "updates", "deletes"):
            columns[field].append(_array(groups.column(field)).cast(pa.int64()))
        for field in FLAGS:
            columns[field].append(pa.array(np.zeros(groups.num_rows, np.bool_)))
    if extra:
        sources, txns, *fields = zip(*extra)
        columns["position"].append(_positions(pa.array(sources, pa.string()), pa.array(txns, pa.int64()), committed))
        columns["keep"].append(pa.array(np.ones(len(extra), np.bool_)))
        for field, values in zip(ENTRY_FIELDS, fields):
            columns[field].append(pa.array(values, ENTRY_TYPE.field(field).type))
    if not columns["position"]:
        return pa.array([[]] * total, pa.list_(ENTRY_TYPE)), np.zeros(total, np.int64), np.zeros(total, np.bool_)
    table = pa.table({k: pa.chunked_array(v) for k, v in columns.items()})
    position = table.column("position").to_numpy()
    present = np.bincount(position, minlength=total) > 0
    changes = np.bincount(position, minlength=total, weights=sum(
        table.column(f).to_numpy() for f in ("inserts", "updates", "deletes"))).astype(np.int64)
    entries = table.filter(table.column("keep")).sort_by(
        [("position", "ascending")] + [(f, "ascending") for f in ENTRY_FIELDS])
    sizes = np.bincount(entries.column("position").to_numpy(), minlength=total)
    offsets = pa.array(np.concatenate(([0], np.cumsum(sizes))), pa.int32())
    struct = pa.StructArray.from_arrays([_array(entries.column(f)).cast(ENTRY_TYPE.field(f).type)
                                         for f in ENTRY_FIELDS], fields=list(ENTRY_TYPE))
    return pa.ListArray.from_arrays(offsets, struct), changes, present


def count_groups(rows: pa.Table) -> pa.Table:
    """Per (source, txn, slot): how many of ``rows`` (source, txn, slot, op: one per decoded change or
    logical decoding message; slot NULL for messages) are inserts, updates and deletes — the groups
    :func:`entry_lists` takes, counted by a sort rather than Spark's aggregation."""
    import numpy as np
    import pyarrow.compute as pc

    sources = pc.dictionary_encode(_array(rows.column("source")))
    code = sources.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    txn = _array(rows.column("txn")).cast(pa.int64()).to_numpy(zero_copy_only=False)
    slot = _array(rows.column("slot")).cast(pa.int64()).fill_null(-1).to_numpy(zero_copy_only=False)
    order = np.lexsort((slot, txn, code))
    code, txn, slot = code[order], txn[order], slot[order]
    starts = np.flatnonzero(np.r_[True, (np.diff(code) != 0) | (np.diff(txn) != 0) | (np.diff(slot) != 0)]) \
        if len(order) else np.zeros(0, np.int64)
    op = _array(rows.column("op"))
    counted = {field: np.add.reduceat(pc.equal(op, kind).to_numpy(zero_copy_only=False)[order].astype(np.int64),
                                      starts) if len(starts) else np.zeros(0, np.int64)
               for field, kind in (("inserts", "I"), ("updates", "U"), ("deletes", "D"))}
    first = slot[starts]
    return pa.table({"source": sources.dictionary.take(pa.array(code[starts])), "txn": pa.array(txn[starts]),
                     "slot": pa.array(first, mask=first < 0), **{k: pa.array(v) for k, v in counted.items()}})


def _array(column) -> pa.Array:
    """A column as one array (Spark's ``toArrow`` gives a chunk per record batch)."""
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def _positions(sources, txns, committed: dict[str, int]):
    """Each row's position among the batch's committed transactions, each checked to name one."""
    import numpy as np
    import pyarrow.compute as pc

    firsts, at = {}, 0
    for source, count in committed.items():
        firsts[source], at = at, at + count
    # One array first: Spark's record batches are chunks, and each chunk's encoding has its own dictionary.
    encoded = pc.dictionary_encode(_array(sources))
    known = encoded.dictionary.to_pylist()
    for source in known:
        if source not in firsts:
            raise ApplyError("the decode counted changes of a source the batch did not plan", source=source)
    index = encoded.indices.to_numpy(zero_copy_only=False)
    txn = _array(txns).cast(pa.int64()).to_numpy()
    counts = np.array([committed[s] for s in known], np.int64)[index]
    bad = np.flatnonzero((txn < 0) | (txn >= counts))
    if len(bad):
        raise ApplyError("the decode counted changes of a transaction the batch did not commit",
                         source=known[index[bad[0]]], txn=int(txn[bad[0]]))
    return pa.array(np.array([firsts[s] for s in known], np.int64)[index] + txn)
