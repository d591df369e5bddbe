"""``cdc-apply forget``: every trace of some keys of one table removed from the lake.

1. **The point.** One exported snapshot of the source (consistent point ``C``): the source must not hold the
   keys there (unless told otherwise: ``even_if_in_source``). Every change to them was committed below ``C``.
2. **Landed and applied.** Wait until the lander has landed and the apply job has applied every commit below
   ``C`` (as verify does): nothing of the keys is still on its way into the lake.
3. **Bronze and the quarantine.** Every message carrying a key (:mod:`cdc_apply.forgetting.keys`) is deleted —
   it carries nothing else — in one Delta commit per table; an Update moving a row between a forgotten key
   and another key stops the forget first, naming it. A quarantined message that cannot be decoded is named
   (its seq), not guessed at.
4. **Silver and history.** The keys' rows (soft-deleted ones too) and every history version of them, one DELETE
   each, matched by verify's canonical text of the key columns, with deletion vectors off; then the files an
   earlier deletion vector hides rows in are rewritten (``REORG ... APPLY (PURGE)``): a row an earlier MERGE
   replaced is still in such a file, in the current version.
5. **The record.** One row per key in the ``forgotten`` state table: a SHA-256 of the table and key (no value),
   the point, what was removed. Then, with ``vacuum``, VACUUM of the four tables — each, even where this run
   deleted nothing: a run killed before its VACUUM, or the source's own DELETE, left the rows in older files.

Every step is idempotent, so a forget killed anywhere is finished by running it again. Older Delta versions keep
the removed values in files the current version no longer reads, until VACUUM passes the table's retention.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Sequence

from cdc_apply.config import Config
from cdc_apply.delta.ddl import create_table, property_list, table_properties
from cdc_apply.delta.names import quote_literal
from cdc_apply.delta.refs import TableRef, bronze_ref, history_ref_for, silver_ref_for, state_ref
from cdc_apply.delta.spark_errors import lost_commit_race
from cdc_apply.errors import CdcApplyError, ForgetError
from cdc_apply.forgetting.keys import ForgetKey, ScanSpec, parse_keys, scan_batches
from cdc_apply.forgetting.source import key_encodings, keys_held, render_keys
from cdc_apply.forgetting.vacuum import vacuum as vacuum_table
from cdc_apply.lake.books.bookkeeping import Bookkeeping
from cdc_apply.lander.dsn import resolve_dsn
from cdc_apply.pgoutput.messages import format_lsn
from cdc_apply.planning.tables import type_options_of
from cdc_apply.verification import silver as sv
from cdc_apply.verification.source import SourceSnapshot
from cdc_apply.verification.table import masked_names

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from cdc_apply.delta.engine import SparkTables
    from cdc_apply.planning.schema import RelationHistory
    from cdc_apply.verification.encoding import ColumnEncoding

FORGOTTEN = "forgotten"
FORGOTTEN_COLUMNS = [
    ("source", "STRING"), ("table", "STRING"), ("key_sha256", "STRING"), ("point_lsn", "BIGINT"),
    ("forget_id", "STRING"), ("bronze_messages", "BIGINT"), ("quarantine_messages", "BIGINT"),
    ("silver_rows", "BIGINT"), ("history_rows", "BIGINT"), ("forgotten_at", "TIMESTAMP"),
]
CONFLICT_RETRIES = 5   # a DELETE that lost a race with another writer's commit is tried again
# Set beside ``delta.appendOnly = false`` while a forget has an append-only table open, cleared with it.
OPENED_BY_FORGET = "cdc_apply.forget_opened"
DELETE_DVS = "spark.databricks.delta.delete.deletionVectors.persistent"


@dataclass
class Forgetting:
    """One forget: the point, what each table lost, what VACUUM removed (or what is kept until it runs)."""

    source: str
    table: str
    keys: int
    lsn: int = 0
    bronze_messages: int = 0
    quarantine_messages: int = 0
    silver_rows: int = 0
    history_rows: int = 0
    undecodable_seqs: list[int] = field(default_factory=list)   # quarantined messages not searched
    touched: list[str] = field(default_factory=list)            # the tables a DELETE changed
    vacuumed: dict[str, str] = field(default_factory=dict)      # table -> the retention VACUUM ran with
    seconds: float = 0.0
    forget_id: str = field(default_factory=lambda: uuid.uuid4().hex)

    def lines(self) -> list[str]:
        out = [f"source {self.source}: forgot {self.keys} key(s) of {self.table} at {format_lsn(self.lsn)} in "
               f"{self.seconds:.1f} s: {self.bronze_messages} bronze message(s), {self.quarantine_messages} "
               f"quarantined, {self.silver_rows} silver row(s), {self.history_rows} history row(s)"]
        if self.undecodable_seqs:
            out.append(f"not searched: {len(self.undecodable_seqs)} quarantined message(s) of the table that cannot "
                       f"be decoded (seq {', '.join(map(str, self.undecodable_seqs[:10]))}); delete them by hand")
        if self.vacuumed:
            out.append("vacuumed: " + ", ".join(f"{t} ({r})" for t, r in self.vacuumed.items()))
        else:
            out.append("older files of bronze, the quarantine, silver and history keep the values until VACUUM passes "
                       "their retention (Delta's default 7 days): run forget again with --vacuum, or VACUUM them")
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"forget_id": self.forget_id, "source": self.source, "table": self.table, "keys": self.keys,
                "lsn": format_lsn(self.lsn), "bronze_messages": self.bronze_messages,
                "quarantine_messages": self.quarantine_messages, "silver_rows": self.silver_rows,
                "history_rows": self.history_rows, "undecodable_seqs": self.undecodable_seqs,
                "touched": self.touched, "vacuumed": self.vacuumed, "seconds": round(self.seconds, 3)}


def forget(spark: SparkSession, config: Config, table: str, keys: Sequence[str], even_if_in_source: bool = False,
           wait_seconds: float | None = None, vacuum: bool = False, retain_hours: float | None = None,
           dsn: str | None = None) -> Forgetting:
    """Remove every trace of ``keys`` (``--key`` texts: a value, or a JSON object by key column) of ``table``
    (qualified) from bronze, the quarantine, silver and history; a :class:`ForgetError` when the source still
    holds one (unless ``even_if_in_source``), a key moved to a key not forgotten, or the lander or the apply
    job does not reach the point within ``wait_seconds``. ``vacuum``: VACUUM the table's four tables, keeping
    ``retain_hours`` (default: each table's own retention)."""
    from cdc_apply.delta.engine import spark_tables

    started = time.monotonic()
    engine = spark_tables(spark)   # the forget entry point: the engine chosen here
    source = config.source.name
    relation = _relation(engine, config, source, table)
    latest = relation.versions[-1]
    key_columns = [c.name for c in latest.columns if c.flags & 1]
    given = parse_keys(keys, key_columns, table)
    silver = silver_ref_for(config, source, relation.versions)
    if not engine.exists(silver):
        raise ForgetError(f"the table has no silver table at {silver}", table=table)
    _refuse_masked_keys(config, table, relation, key_columns)
    run = Forgetting(source, table, len(given))
    wait = config.verify.wait_seconds if wait_seconds is None else wait_seconds
    with SourceSnapshot(dsn or resolve_dsn(config.source)) as snap:
        try:
            run.lsn = snap.open().lsn
        except CdcApplyError as exc:
            raise ForgetError(exc.detail.replace("no consistent point: ", "the source cannot be read: "),
                              **exc.context) from None
        namespace, name = table.split(".", 1)
        shape = snap.table(namespace, name, type_options_of(config))
        if shape is None:
            raise ForgetError("the table is not in the source (dropped?)", table=table)
        encodings = key_encodings(shape, key_columns, sv.silver_columns(engine.read(silver),
                                                                        config.silver.metadata_prefix),
                                  config.source.binary)
        held = keys_held(snap, shape, key_columns, given)
        if held and not even_if_in_source:
            raise ForgetError(f"the source still holds {len(held)} of the keys (the first: "
                              f"{', '.join(held[0])}); delete them there first, or force it (--even-if-in-source: "
                              "the source's next change of a key brings it back)", table=table)
        forgotten = render_keys(snap, shape, encodings, given)
        snap.emit_marker()
    try:
        sv.wait_applied(engine, config, source, run.lsn, wait)
    except CdcApplyError as exc:
        raise ForgetError(exc.detail, **exc.context) from None
    bronze, quarantine = bronze_ref(config), Bookkeeping(config).ref("quarantine")
    history = history_ref_for(config, source, relation.versions)
    # Every table that held the keys, whether or not this run deletes from it (a run killed before its VACUUM).
    holders = [bronze] + [ref for ref in (quarantine, silver, history) if ref is silver or engine.exists(ref)]
    spec = ScanSpec(_versions(relation, key_columns), tuple(forgotten), _stream_blocks(engine, bronze, source))
    run.bronze_messages = _scrub(engine, bronze, source, spec, run, table)
    if quarantine in holders:
        run.quarantine_messages = _scrub(engine, quarantine, source, spec, run, table, quarantine=True)
    match = _key_match(encodings, forgotten)
    run.silver_rows = _delete(engine, silver, match, run)
    _purge_deleted_rows(engine, silver, run)
    if history in holders:
        run.history_rows = _delete(engine, history, match, run)
        _purge_deleted_rows(engine, history, run)
    _record(engine, config, run, forgotten)
    if vacuum:
        for ref in holders:
            # Bronze's log stays whole: the apply job's stream reads its commits in order, and its files hold
            # no statistics of the payload (Delta keeps none of a BINARY column).
            run.vacuumed[str(ref)] = vacuum_table(engine, ref, retain_hours, log=ref != bronze)
    run.seconds = time.monotonic() - started
    return run


def _relation(engine: SparkTables, config: Config, source: str, table: str) -> RelationHistory:
    history = Bookkeeping(config).load_history(engine).get(source)
    found = [r for r in (history.relations.values() if history else ()) if r.latest.qualified_name == table]
    if not found:
        raise ForgetError("no relation of that name was applied (is the state location the apply job's?)",
                          source=source, table=table)
    return found[-1]


def _refuse_masked_keys(config: Config, table: str, relation: RelationHistory, key_columns: list[str]) -> None:
    names = sorted(masked_names(config, table, relation) & set(key_columns))
    if names:
        raise ForgetError(f"key column {', '.join(names)} is masked (mask_columns): silver holds no key to match",
                          table=table)


def _versions(relation: RelationHistory, key_columns: list[str]) -> dict:
    """The scan's versions: per relation id, the seqs its versions start after and their key positions."""
    seqs, positions = [], []
    for version in relation.versions:
        names = [c.name for c in version.columns]
        if any(k not in names for k in key_columns):
            raise ForgetError(f"the key columns {', '.join(key_columns)} are not all in the table's version of seq "
                              f"{version.seq} (a key column renamed): not supported", table=version.qualified_name)
        seqs.append(version.seq)
        positions.append(tuple(names.index(k) for k in key_columns))
    return {relation.relation_id: (tuple(seqs), tuple(positions))}


def _stream_blocks(engine: SparkTables, bronze: TableRef, source: str) -> tuple[tuple[int, int], ...]:
    """The source's Stream Start ... Stop blocks in bronze, as (start seq, stop seq); an open one ends never."""
    from pyspark.sql import functions as F

    rows = (engine.read(bronze).where((F.col("source") == source)
                                                  & F.expr("substring(payload, 1, 1) IN (X'53', X'45')"))
            .select("seq", F.expr("substring(payload, 1, 1) = X'53'").alias("start")).orderBy("seq").collect())
    blocks, start = [], None
    for row in rows:
        if row.start:
            start = row.seq
        elif start is not None:
            blocks.append((start, row.seq))
            start = None
    if start is not None:
        blocks.append((start, 2 ** 62))
    return tuple(blocks)


def _scrub(engine: SparkTables, ref: TableRef, source: str, spec: ScanSpec, run: Forgetting, table: str,
           quarantine: bool = False) -> int:
    """Delete the messages of ``ref`` (bronze or the quarantine) that carry a forgotten key; the count."""
    from pyspark.sql import functions as F

    oids = [f"X'{oid:08X}'" for oid in spec.versions]
    candidates = engine.read(ref).where(
        (F.col("source") == source) & F.expr("substring(payload, 1, 1) IN (X'49', X'55', X'44')")
        & F.expr(f"substring(payload, 2, 4) IN ({', '.join(oids)}) OR substring(payload, 6, 4) IN ({', '.join(oids)})"))
    found = (candidates.select("seq", "lsn", "payload")
             .mapInArrow(lambda batches: scan_batches(batches, spec),
                         "seq BIGINT, lsn BIGINT, found STRING, detail STRING").collect())
    moves = [r for r in found if r.found == "moves"]
    if moves:
        first = min(moves, key=lambda r: r.seq)
        raise ForgetError(f"{first.detail}: forget both keys, or neither ({len(moves)} such message(s))",
                          table=table, source=source, seq=first.seq, lsn=format_lsn(first.lsn))
    if quarantine:
        run.undecodable_seqs = sorted(r.seq for r in found if r.found == "undecodable")
    seqs = sorted({r.seq for r in found if r.found == "carries"})
    if not seqs:
        _close_if_opened(engine, ref)   # a forget killed with the table open, run again
        return 0
    chunks = [seqs[i:i + 1000] for i in range(0, len(seqs), 1000)]
    where = f"source = {quote_literal(source)} AND (" + " OR ".join(
        f"seq IN ({', '.join(map(str, chunk))})" for chunk in chunks) + ")"
    return _delete(engine, ref, where, run)


def _key_match(encodings: Sequence[ColumnEncoding], keys: Sequence[ForgetKey]) -> str:
    """Spark SQL true for a row of any of ``keys``: verify's canonical text of each key column equal to the key's."""
    return " OR ".join("(" + " AND ".join(f"({e.spark}) = {quote_literal(text)}"
                                          for e, text in zip(encodings, key.canonical)) + ")" for key in keys)


def _delete(engine: SparkTables, ref: TableRef, where: str, run: Forgetting) -> int:
    """DELETE ``where`` from ``ref`` (tried again when another writer's commit won a race with it); rows deleted.
    An append-only table (bronze: ``delta.appendOnly``) is opened for the DELETE and closed again after it —
    by a forget run again, too, when one was killed in between."""
    append_only = _append_only(engine, ref)
    if append_only:
        _sql_retried(engine, _opened(ref, True))
    # Deletion vectors off: a file holding a removed row is rewritten without it and leaves the current version
    # (with a deletion vector it would stay current, the row in it, beyond any VACUUM).
    engine.spark.conf.set(DELETE_DVS, "false")
    try:
        result = _sql_retried(engine, f"DELETE FROM {ref.sql} WHERE {where}")
    finally:
        engine.spark.conf.unset(DELETE_DVS)
        if append_only:
            _sql_retried(engine, _opened(ref, False))
    deleted = int(result[0][0]) if result and result[0][0] is not None else 0
    if deleted:
        run.touched.append(str(ref))
    return deleted


def _purge_deleted_rows(engine: SparkTables, ref: TableRef, run: Forgetting) -> None:
    """Rewrite the files of ``ref`` that carry a deletion vector: the rows a vector hides (an older version of
    the key an earlier MERGE replaced, a row an earlier DELETE removed) are still in the file, in the current
    version, where no VACUUM reaches them. Delta's ``REORG ... APPLY (PURGE)``; nothing on a table without."""
    rows = _sql_retried(engine, f"REORG TABLE {ref.sql} APPLY (PURGE)")
    metrics = rows[0]["metrics"] if rows and "metrics" in rows[0].asDict() else None
    rewritten = int(getattr(metrics, "numFilesRemoved", 0) or 0) if metrics is not None else 0
    if rewritten and str(ref) not in run.touched:
        run.touched.append(str(ref))


def _append_only(engine: SparkTables, ref: TableRef) -> bool:
    """Whether ``ref`` refuses DELETEs (``delta.appendOnly``); an earlier forget killed while it had the table
    open counts too (its own marker property says so), so a forget run again closes it."""
    props = table_properties(engine.spark, ref)
    return props.get("delta.appendOnly") == "true" or props.get(OPENED_BY_FORGET) == "true"


def _close_if_opened(engine: SparkTables, ref: TableRef) -> None:
    if table_properties(engine.spark, ref).get(OPENED_BY_FORGET) == "true":
        _sql_retried(engine, _opened(ref, False))


def _opened(ref: TableRef, opened: bool) -> str:
    """The ALTER that lifts ``delta.appendOnly`` for a forget's DELETE (``opened``), or sets it again."""
    return (f"ALTER TABLE {ref.sql} SET TBLPROPERTIES ("
            f"{property_list({'delta.appendOnly': str(not opened).lower(), OPENED_BY_FORGET: str(opened).lower()})})")


def _sql_retried(engine: SparkTables, statement: str) -> list:
    """One statement's rows, the statement run again when another writer's commit won a race with it."""
    for attempt in range(CONFLICT_RETRIES):
        try:
            return engine.spark.sql(statement).collect()
        except Exception as exc:
            if attempt + 1 == CONFLICT_RETRIES or not lost_commit_race(exc):
                raise
            time.sleep(0.5 * (attempt + 1))
    return []


def _record(engine: SparkTables, config: Config, run: Forgetting, keys: Sequence[ForgetKey]) -> None:
    from cdc_apply.lake.books.bookkeeping import local_frame

    ref = state_ref(config, FORGOTTEN)
    create_table(engine, ref, FORGOTTEN_COLUMNS, {})
    now = datetime.now(timezone.utc)
    rows = [(run.source, run.table, key.digest(run.table), run.lsn, run.forget_id, run.bronze_messages,
             run.quarantine_messages, run.silver_rows, run.history_rows, now) for key in keys]
    ref.append(local_frame(engine.spark, FORGOTTEN_COLUMNS, rows), None, 0)
