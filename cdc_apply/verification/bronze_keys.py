"""The keys a table's changes committed at or past the source's point touched, read from bronze: how a table
that keeps no history table is verified exactly.

The transactions log (written by the apply job before each batch's progress row) names every transaction
with its commit LSN, its bronze seqs and the tables it changed. Those committed at or past the point that
changed the table are read back from bronze and decoded here: an Insert's new key, an Update's old key
(its key or old tuple, when the key changed or the identity is FULL) and new key, a Delete's key. A
TRUNCATE past the point changed every key; the table cannot be compared at that point.
"""

from __future__ import annotations

from functools import reduce
from typing import TYPE_CHECKING, Iterable, Sequence

from cdc_apply.errors import DecodeError, VerifyError
from cdc_apply.pgoutput import messages as m
from cdc_apply.pgoutput.decoder import StreamDecoder
from cdc_apply.planning.schema import RelationHistory

if TYPE_CHECKING:

    from cdc_apply.delta.engine import SparkTables


def key_positions(history: RelationHistory, key: Sequence[str]) -> tuple[int, ...]:
    """The lineage ids of the current key columns ``key`` (names as the source has them now): a key column
    renamed since a change is followed by its lineage, not its name."""
    latest = history.latest
    names = [c.name for c in latest.columns]
    missing = [k for k in key if k not in names]
    if missing:
        raise VerifyError(f"the key column {', '.join(missing)} is not in the relation's newest shape",
                          table=latest.qualified_name)
    return tuple(latest.lineage[names.index(k)] for k in key)


def changed_keys(units: Iterable[tuple[int | None, Iterable[tuple[int, bytes]]]], history: RelationHistory,
                 lineages: Sequence[int]) -> set[tuple]:
    """The key texts (one per key column, in ``lineages`` order) of every change of ``history``'s relation in
    ``units``: ``(xid, [(seq, payload), ...])`` per transaction, its bronze rows from its first message to its
    commit. ``xid`` (a streamed transaction's) keeps only that transaction's messages; ``None`` keeps all,
    as a range of a transaction sent whole holds nothing else — or, between a PREPARE and its COMMIT
    PREPARED, other transactions, whose keys then are left out too (more than needed, never fewer)."""
    table = history.latest.qualified_name
    keys: set[tuple] = set()
    for xid, rows in units:
        decoder = StreamDecoder()
        for seq, payload in rows:
            try:
                message = decoder.decode(bytes(payload))
            except DecodeError as err:
                raise VerifyError(f"a bronze row past the point does not decode: {err}", table=table, seq=seq) from None
            if xid is not None and getattr(message, "xid", None) not in (None, xid):
                continue
            if isinstance(message, m.Truncate):
                if history.relation_id in message.relation_ids:
                    raise VerifyError("the table was truncated at or past the source's point, so no key kept its "
                                      "state; verify again later", table=table, seq=seq)
                continue
            if getattr(message, "relation_id", None) != history.relation_id or not isinstance(
                    message, (m.Insert, m.Update, m.Delete)):
                continue
            version = history.at(seq)
            if version is None:
                raise VerifyError("a change past the point comes before the relation's first Relation message",
                                  table=table, seq=seq)
            for values in _tuples(message):
                keys.add(_key(values, version, lineages, table, seq))
    return keys


def _tuples(message) -> list:
    if isinstance(message, m.Insert):
        return [message.new]
    if isinstance(message, m.Update):
        return [t for t in (message.key or message.old, message.new) if t is not None]
    return [t for t in (message.key or message.old,) if t is not None]


def _key(values, version, lineages: Sequence[int], table: str, seq: int) -> tuple:
    out = []
    for lineage in lineages:
        if lineage not in version.lineage:
            raise VerifyError("a key column did not exist when a change past the point was made", table=table, seq=seq)
        value = values[version.lineage.index(lineage)]
        if value is m.UNCHANGED_TOAST or isinstance(value, (bytes, bytearray)):
            raise VerifyError("a key value past the point is not in text form (binary pgoutput, or an unchanged "
                              "TOAST key): keep a history table for this table to verify it", table=table, seq=seq)
        out.append(value)
    return tuple(out)


def transactions_past(engine: SparkTables, config, source: str, names: Sequence[str],
                      lsn: int) -> list[tuple[int | None, int, int]]:
    """``(xid of a streamed transaction or None, first seq, commit seq)`` of each logged transaction of
    ``source`` committed at or past ``lsn`` that changed (or truncated) a table of one of ``names``."""
    from pyspark.sql import functions as F

    from cdc_apply.delta.refs import state_ref

    ref = state_ref(config, "transactions")
    if not engine.exists(ref):
        return []
    touched = F.exists("tables", lambda t: t["table"].isin(list(names)))
    rows = (engine.read(ref).where((F.col("source") == source) & (F.col("commit_lsn") >= lsn) & touched)
            .select("xid", "kind", "begin_seq", "commit_seq").distinct().collect())
    return [(int(r.xid) if r.kind and "stream" in r.kind else None, int(r.begin_seq), int(r.commit_seq))
            for r in rows if r.begin_seq is not None and r.commit_seq is not None]


def bronze_units(engine: SparkTables, config, source: str, spans: list[tuple[int | None, int, int]]):
    """``(xid, [(seq, payload), ...])`` per span, read from bronze in one query."""
    from pyspark.sql import functions as F

    from cdc_apply.delta.refs import bronze_ref

    if not spans:
        return []
    within = reduce(lambda a, b: a | b, [F.col("seq").between(first, last) for _, first, last in spans])
    rows = (engine.read(bronze_ref(config)).where((F.col("source") == source) & within)
            .select("seq", "payload").orderBy("seq").collect())
    seqs = [(int(r.seq), r.payload) for r in rows]
    return [(xid, [(s, p) for s, p in seqs if first <= s <= last])
            for xid, first, last in sorted(spans, key=lambda x: x[1])]
