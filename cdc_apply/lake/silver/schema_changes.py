"""Schema changes of a silver or history table: a batch's chain of relation versions as guarded ALTERs.

Each step is one Delta commit tagged with the chain and its step number in ``userMetadata``, so a batch
re-run after a crash skips the steps the table's history shows done (see :func:`apply_schema_ops`).
"""

from __future__ import annotations

from itertools import groupby
from typing import TYPE_CHECKING, Sequence

from cdc_apply.delta.ddl import USER_METADATA
from cdc_apply.delta.names import quote_ident
from cdc_apply.delta.refs import TableRef
from cdc_apply.lake.books.commit_tag import decode_tag, encode_tag
from cdc_apply.planning.schema_net import net_schema_ops
from cdc_apply.planning.tables import SchemaOp

if TYPE_CHECKING:

    from pyspark.sql import SparkSession

    from cdc_apply.delta.engine import SparkTables


def apply_schema_ops(tables: SparkTables, ref: TableRef, ops: Sequence[SchemaOp], chain: str | None = None,
                     fills: Sequence[tuple] = (), fill_where: str | None = None) -> None:
    """Run schema operations against the table, each guarded by its current schema.

    The chain is netted first (:func:`cdc_apply.planning.schema_net.net_schema_ops`), then consecutive
    adds go in one ``ADD COLUMNS`` and consecutive drops in one ``DROP COLUMNS``: each ALTER is a
    Delta commit, and a batch can carry many relation versions of one table.

    ``chain`` names the evolution (e.g. ``"12->40"``, from and to relation version seq). Each step's
    commit then records it with the step number in ``userMetadata``, and a re-run skips the steps the
    table's history shows done. Name guards alone cannot: after ``DROP a; RENAME b TO a`` the table
    has an ``a`` again, and a re-run would drop it (``b``'s data) before finding no ``b`` to rename.

    ``fills`` (silver column, value) set a column just added in every row the table holds — its
    missing value — as the last step: one UPDATE, guarded like the others (a re-run after the batch's
    MERGE must not overwrite what the MERGE wrote); ``fill_where`` limits it to the rows that hold
    (a history table fills only its open versions: older ones predate the column).
    """
    # One step per commit: the adds together, the drops together, each rename; a retype rebuilds its
    # column in several commits, each guarded by the temporary column's name, so it is re-run.
    steps: list[list[SchemaOp]] = []
    for kind, group in groupby(net_schema_ops(ops), key=lambda o: o.kind):
        steps += [list(group)] if kind in ("add", "drop") else [[o] for o in group]
    if fills:
        steps.append([SchemaOp("fill", c.name, spark_ddl=c.spark_ddl) for c, _ in fills])
    values = {c.name: v for c, v in fills}
    done = _steps_done(tables.spark, ref, chain, len(steps)) if chain is not None else -1
    for step, run in enumerate(steps):
        if step < done or (step == done and run[0].kind != "retype"):
            continue
        if chain is not None:
            tables.spark.conf.set(USER_METADATA, encode_tag({"schema_chain": chain, "step": step}))
        try:
            if run[0].kind == "fill":
                _fill(tables, ref, run, values, fill_where)
            else:
                _apply_step(tables.spark, ref, run)
        finally:
            if chain is not None:
                tables.spark.conf.unset(USER_METADATA)


def _fill(tables: SparkTables, ref: TableRef, run: Sequence[SchemaOp], values: dict, where: str | None = None) -> None:
    """Set columns just added to their missing values in every row (or those ``where`` holds for; one UPDATE)."""
    tables.delta_table(ref).update(condition=where, set={quote_ident(o.column): tables.value(values[o.column], o.ddl)
                                                         for o in run})


def _steps_done(spark: SparkSession, ref: TableRef, chain: str, steps: int) -> int:
    """The last step of ``chain`` the table's recent history has a commit of (-1: none)."""
    done = -1
    # A step commits at most four times (a column rebuilt for a retype); a MERGE, a truncate and a
    # property commit may follow the last one.
    for row in spark.sql(f"DESCRIBE HISTORY {ref.sql} LIMIT {4 * steps + 8}").select("userMetadata").collect():
        tag = decode_tag(row.userMetadata)
        if tag is not None and tag.get("schema_chain") == chain:
            done = max(done, int(tag.get("step", -1)))
    return done


def _apply_step(spark: SparkSession, ref: TableRef, run: Sequence[SchemaOp]) -> None:
    kind = run[0].kind
    if kind in ("add", "drop"):
        current = {f.name for f in ref.read(spark).schema.fields}
        if kind == "add":
            adds: dict[str, str] = {}
            for o in run:
                if o.column not in current:
                    adds.setdefault(o.column, o.ddl)
            if adds:
                listed = ", ".join(f"{quote_ident(c)} {t}" for c, t in adds.items())
                spark.sql(f"ALTER TABLE {ref.sql} ADD COLUMNS ({listed})")
        else:
            drops = list(dict.fromkeys(o.column for o in run if o.column in current))
            if drops:
                spark.sql(f"ALTER TABLE {ref.sql} DROP COLUMNS ({', '.join(quote_ident(c) for c in drops)})")
        return
    for op in run:
        _apply_one(spark, ref, op)


def _apply_one(spark: SparkSession, ref: TableRef, op: SchemaOp) -> None:
    """A rename or a retype, guarded by the table's current schema."""
    current = {f.name: f.dataType for f in ref.read(spark).schema.fields}
    if op.kind == "rename":
        if op.column in current and op.target not in current:
            spark.sql(f"ALTER TABLE {ref.sql} RENAME COLUMN {quote_ident(op.column)} TO {quote_ident(op.target)}")
    elif op.kind == "retype":
        resumed = f"{op.column}__retype" in current
        if resumed or (op.column in current and current[op.column].simpleString().upper() != _simple(op.ddl)):
            if op.in_place and not resumed:
                spark.sql(f"ALTER TABLE {ref.sql} ALTER COLUMN {quote_ident(op.column)} TYPE {op.spark_ddl}")
            else:
                _rewrite_column(spark, ref, op)
    else:  # pragma: no cover - the planner makes no other kinds
        raise ValueError(op.kind)


def _simple(ddl: str) -> str:
    return ddl.replace(" ", "").upper()


def _rewrite_column(spark: SparkSession, ref: TableRef, op: SchemaOp) -> None:
    """An incompatible type change: a new column holding the cast values takes the old one's place.

    Delta refuses to overwrite a table with Change Data Feed once columns were renamed or dropped,
    so the column is rebuilt in place: add ``<col>__retype``, fill it with ``CAST``, drop the old
    column, rename. Each step checks the schema first, so a re-run resumes where a crash stopped.
    The rebuilt column moves to the end of the table.
    """
    temp = f"{op.column}__retype"
    current = {f.name for f in ref.read(spark).schema.fields}
    if temp not in current:
        spark.sql(f"ALTER TABLE {ref.sql} ADD COLUMNS ({quote_ident(temp)} {op.spark_ddl})")
    if op.column in current:
        spark.sql(f"UPDATE {ref.sql} SET {quote_ident(temp)} = CAST({quote_ident(op.column)} AS {op.spark_ddl})")
        spark.sql(f"ALTER TABLE {ref.sql} DROP COLUMN {quote_ident(op.column)}")
    spark.sql(f"ALTER TABLE {ref.sql} RENAME COLUMN {quote_ident(temp)} TO {quote_ident(op.column)}")
