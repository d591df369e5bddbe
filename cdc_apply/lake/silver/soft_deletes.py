"""Soft deletes (``[tables."ns.t"] deletes = "soft"``): a deleted row stays in silver, marked.

The marker is the metadata column ``<metadata_prefix>deleted`` (``_cdc_deleted``): ``true`` on a row a
Delete, a TRUNCATE or a snapshot's replace removed, with that change's commit LSN and time in the
table's commit metadata columns; ``false`` on a live row; NULL on rows written before the table's
deletes became soft (the column is added then), which are live too. An Insert of a deleted key
revives its row. Every write of a soft table turns its removal into an UPDATE of the marker, so
the table's Change Data Feed shows ``update_preimage``/``update_postimage`` where a hard table shows
``delete``. Readers that compare silver with PostgreSQL (``cdc-apply verify``, ``read_as_of``, the
test comparisons) read the live rows only (:func:`live_rows`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cdc_apply.delta.names import quote_ident, sql_literal
from cdc_apply.delta.refs import TableRef
from cdc_apply.errors import SchemaError
from cdc_apply.planning import columns as cc
from cdc_apply.planning.table_plan import TableWork

if TYPE_CHECKING:
    from cdc_apply.delta.engine import SparkTables

DELETED = "deleted"   # the marker's name after silver.metadata_prefix


def deleted_column(prefix: str) -> str:
    """The marker column of a soft-deleting table with metadata columns named ``<prefix>…``."""
    return prefix + DELETED


def marker_of(work: TableWork) -> str:
    """The marker column of a soft-deleting table (``work.deleted``): the soft paths run only for one."""
    assert work.deleted is not None, f"{work.qualified_name} keeps no soft deletes"
    return work.deleted


def is_deleted_sql(column: str, alias: str | None = None) -> str:
    """SQL text true on a row marked deleted (NULL, from before the column existed, is live)."""
    name = quote_ident(column) if alias is None else f"{alias}.{quote_ident(column)}"
    return f"coalesce({name}, false)"


def live_rows(frame, prefix: str):
    """``frame`` (rows of a silver table) without its soft-deleted rows and without the marker column:
    the rows PostgreSQL has. A table without the marker is returned as it is."""
    column = deleted_column(prefix)
    if column not in frame.columns:
        return frame
    return frame.where(f"NOT {is_deleted_sql(column)}").drop(column)


def tombstone_set(work: TableWork, lsn_sql: str, ts_sql: str | None, others: str | None = None) -> dict[str, str]:
    """Assignments marking a row deleted at ``lsn_sql``/``ts_sql`` (SQL text). ``others``: the alias of a
    MERGE source whose metadata columns (xid, origin, user) the row takes too; without it they stay."""
    out = {quote_ident(marker_of(work)): "true"}
    for column, source in work.meta:
        if source == cc.COMMIT_LSN:
            out[quote_ident(column)] = lsn_sql
        elif source == cc.COMMIT_TS:
            if ts_sql is not None:
                out[quote_ident(column)] = ts_sql
        elif others is not None:
            out[quote_ident(column)] = f"{others}.`{source}`"
    return out


def keyed_soft_delete(merge, work: TableWork, assignments: dict, values: dict):
    """A keyed MERGE's delete clause for a soft table (``merge``: the builder, source ``s``, target ``t``):
    the row stays, marked with the delete's commit. Sets the marker false in ``assignments`` and ``values``
    (upserts revive) and returns ``(merge, condition of the upsert clause)``: a marked row is a row
    PostgreSQL lacks, so only a complete row revives it, as one would be inserted."""
    marked = is_deleted_sql(marker_of(work), "t")
    merge = merge.whenMatchedUpdate(condition=f"s._action = 'delete' AND NOT {marked}",
                                    set=tombstone_set(work, f"s.`{cc.COMMIT_LSN}`", f"s.`{cc.COMMIT_TS}`", "s"))
    assignments[quote_ident(marker_of(work))] = values[quote_ident(marker_of(work))] = "false"
    return merge, f"s._action = 'upsert' AND (s._complete OR NOT {marked})"


def keyless_soft_delete(target, source, condition: str, work: TableWork, insert_values: dict):
    """A keyless MERGE's removal for a soft table: the live copies of a row that loses copies are marked
    (with the last removal's commit) instead of deleted; the copies left come back as new live rows
    (``insert_values`` gets the marker false). Returns the builder."""
    insert_values[quote_ident(marker_of(work))] = "false"
    on = f"({condition}) AND s._kind = 'del' AND NOT {is_deleted_sql(marker_of(work), 't')}"
    return target.merge(source, on).whenMatchedUpdate(
        set=tombstone_set(work, f"s.`{cc.COMMIT_LSN}`", f"s.`{cc.COMMIT_TS}`", "s"))


def mark_deleted(tables: SparkTables, work: TableWork, lsn: int, ts, ranges_sql: str | None = None) -> None:
    """Every live row marked deleted at a commit: a TRUNCATE of a soft table (``ranges_sql`` None), or the
    rows in key-range snapshot chunks' ranges (the chunks' copies then revive those the source still
    has: see :func:`revive_copied`)."""
    stamp = tombstone_set(work, f"CAST({int(lsn)} AS BIGINT)", None if ts is None else sql_literal(ts, "timestamp"))
    live = f"NOT {is_deleted_sql(marker_of(work))}"
    tables.delta_table(work.ref).update(live if ranges_sql is None else f"({ranges_sql}) AND {live}", stamp)


def revive_copied(tables: SparkTables, rows, work: TableWork) -> int:
    """A snapshot's copied rows into a soft table whose copied range was marked deleted: one MERGE on the
    key (a copied key revives its row with the copy's values, a new one is inserted). A keyless table
    takes them as new rows (:func:`cdc_apply.lake.silver.appends.append_rows`'s rule for keyless rows).
    ``rows``: the copied rows under silver's column names and metadata columns."""
    names = [c.name for c in work.columns] + [col for col, _ in work.meta]
    condition = " AND ".join(f"t.{quote_ident(work.columns[i].name)} = s.{quote_ident(work.columns[i].name)}"
                             for i in work.key_index)
    values = {quote_ident(n): f"s.{quote_ident(n)}" for n in names}
    values[quote_ident(marker_of(work))] = "false"
    metrics = (tables.delta_table(work.ref).alias("t").merge(rows.alias("s"), condition)
               .whenMatchedUpdate(set=values).whenNotMatchedInsert(values=values).execute().collect())
    row = metrics[0].asDict() if metrics else {}
    return int(row.get("num_inserted_rows", 0) or 0) + int(row.get("num_updated_rows", 0) or 0)


def ensure_deleted_column(session, ref: TableRef, work: TableWork, columns: list[str], key: str) -> None:
    """Keep an existing table's marker in step with its setting: a table whose deletes became soft gets
    the column (its rows read NULL: live); a table holding the column whose deletes became hard is a
    :class:`SchemaError` naming ``key`` — its marked rows would read as live once deletes remove rows
    and new keys are appended beside them."""
    if work.deleted is not None:
        if work.deleted not in columns:
            session.sql(f"ALTER TABLE {ref.sql} ADD COLUMNS ({quote_ident(work.deleted)} BOOLEAN)").collect()
        return
    own = {c.name for c in work.columns}   # a source column of that name is no marker
    marker = next((c for c in columns if c in _markers(work) and c not in own), None)
    if marker is not None:
        raise SchemaError(f"silver table {ref} keeps soft-deleted rows (column {marker!r}) but {key} is not "
                          "\"soft\": set it back to \"soft\", or remove the table's marked rows and the column "
                          "yourself first", table=work.qualified_name, key=key)


def _markers(work: TableWork) -> set[str]:
    """The names the marker has under the table's metadata prefix (told from its commit LSN column)."""
    return {column[:-len("commit_lsn")] + DELETED for column, source in work.meta if source == cc.COMMIT_LSN}
