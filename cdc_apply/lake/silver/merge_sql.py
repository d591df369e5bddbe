"""A silver or history MERGE's expressions as SQL text, for a Spark Connect session.

Over Spark Connect :meth:`~cdc_apply.delta.refs.TableRef.delta_table` is
:class:`~cdc_apply.delta.sql_table.SqlDeltaTable`, which runs each MERGE, DELETE and UPDATE as one SQL
statement and so takes SQL text only (a Connect ``Column`` cannot be turned back into text). A classic
session keeps the ``Column`` expressions of ``merge.py``, ``snapshot_loads.py`` and ``history/versions.py``
(Delta's ``DeltaTable`` API, as before Connect was supported); this module is their text form, with the
values as literals (:func:`cdc_apply.delta.names.sql_literal`). The keyed MERGE's assignments are text
on a classic session too (:func:`~cdc_apply.lake.silver.merge.merge_keyed`): ~200 Py4J round trips fewer
a table and batch.
"""

from __future__ import annotations

from cdc_apply.delta.names import quote_ident, sql_literal
from cdc_apply.planning import columns as cc
from cdc_apply.planning.table_plan import TableWork


def key_bounds_sql(condition: str, column: str, bounds: tuple, ddl: str) -> str:
    """``condition`` and ``column BETWEEN low AND high`` (Delta skips silver files outside the bounds);
    ``condition`` alone when a bound has no SQL literal here (no file skipping then)."""
    try:
        low, high = sql_literal(bounds[0], ddl), sql_literal(bounds[1], ddl)
    except TypeError:
        return condition
    return f"({condition}) AND {column} BETWEEN {low} AND {high}"


def keyed_assignments_sql(work: TableWork) -> tuple[dict[str, str], dict[str, str]]:
    """The keyed MERGE's update assignments (a column carried by the row, else silver's value) and insert
    values, metadata columns included."""
    meta = {quote_ident(col): f"s.`{src}`" for col, src in work.meta}
    assignments = {quote_ident(c.name): f"CASE WHEN s.`{cc.sets(i)}` THEN s.`{cc.final(i)}` "
                                        f"ELSE t.{quote_ident(c.name)} END" for i, c in enumerate(work.columns)}
    values = {quote_ident(c.name): f"s.`{cc.final(i)}`" for i, c in enumerate(work.columns)}
    return {**assignments, **meta}, {**values, **meta}


def key_ranges_sql(work: TableWork) -> str:
    """Silver's rows in the key ranges of the batch's chunks (``work.clears``): one DELETE's condition."""
    conds = []
    for c in work.clears:
        column = work.columns[c.column]
        parts = [f"{quote_ident(column.name)} >= {sql_literal(c.low, column.spark_ddl)}"] if c.low is not None else []
        if c.high is not None:
            parts.append(f"{quote_ident(column.name)} < {sql_literal(c.high, column.spark_ddl)}")
        conds.append("(" + (" AND ".join(parts) or "TRUE") + ")")
    return " OR ".join(conds)


def truncate_closes_sql(truncates, work: TableWork, h) -> tuple[str, dict[str, str]]:
    """The history MERGE's close of open versions a batch's truncates end (``Truncates``, ``HistoryColumns``):
    the ``whenNotMatchedBySourceUpdate`` condition and assignments."""
    frm = f"t.{quote_ident(h.valid_from_lsn)}"
    target_key = lambda i: f"t.{quote_ident(work.columns[i].name)}"  # noqa: E731
    lsn, ts, cause, closes = "NULL", "NULL", "NULL", []
    for point in reversed(truncates.points):
        point_lsn, _, point_ts, point_cause = point[:4]
        hit = f"({frm} < {int(point_lsn)} AND {truncates.applies_sql(point, target_key)})"
        lsn = f"CASE WHEN {hit} THEN CAST({int(point_lsn)} AS BIGINT) ELSE {lsn} END"
        ts = f"CASE WHEN {hit} THEN {sql_literal(point_ts, 'timestamp')} ELSE {ts} END"
        cause = f"CASE WHEN {hit} THEN {sql_literal(point_cause)} ELSE {cause} END"
        closes.append(hit)
    return (f"t.{quote_ident(h.is_current)} AND ({' OR '.join(closes)})",
            {quote_ident(h.valid_to_lsn): lsn, quote_ident(h.valid_to_ts): ts,
             quote_ident(h.closed_by): cause, quote_ident(h.is_current): "FALSE"})
