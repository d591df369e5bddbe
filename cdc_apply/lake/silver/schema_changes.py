"""Schema changes of a silver or history table: a batch's chain of relation versions as guarded ALTERs.

Each step is one Delta commit tagged with the chain and its step number in ``userMetadata``, so a batch
re-run after a crash skips the steps the table's history shows done (see :func:`apply_schema_ops`).

A table without column mapping (``silver.readers = "delta-rs"``: delta-rs and polars refuse the feature)
cannot rename or drop a column, nor widen a type in place: its renames, drops and retypes are one
overwrite of the table with the new schema, one commit (:func:`_rewrite_table`).
"""

from __future__ import annotations

from itertools import groupby
from typing import TYPE_CHECKING, Callable, Sequence

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
                     fills: Sequence[tuple] = (), fill_where: str | None = None, mapped: bool = True,
                     after_step: Callable[[int], None] | None = None) -> None:
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

    ``mapped``: whether the table has column mapping (:func:`cdc_apply.delta.ddl.is_mapped`); without it
    every chain that renames, drops or retypes is one step, the table rewritten with the chain's end
    schema. ``after_step`` is called with each step's number once it committed (tests crash there).
    """
    steps = _plan_steps(ops, mapped)
    if fills:
        steps.append(("fill", [SchemaOp("fill", c.name, spark_ddl=c.spark_ddl) for c, _ in fills]))
    values = {c.name: v for c, v in fills}
    done = _steps_done(tables.spark, ref, chain, len(steps)) if chain is not None else -1
    for step, (kind, run) in enumerate(steps):
        # A retype's column rebuild takes several commits, each guarded by its temporary column: re-run.
        if step < done or (step == done and kind != "retype"):
            continue
        if chain is not None:
            tables.spark.conf.set(USER_METADATA, encode_tag({"schema_chain": chain, "step": step}))
        try:
            if kind == "fill":
                _fill(tables, ref, run, values, fill_where)
            elif kind == "rewrite":
                _rewrite_table(tables, ref, run)
            else:
                _apply_step(tables.spark, ref, run)
        finally:
            if chain is not None:
                tables.spark.conf.unset(USER_METADATA)
        if after_step is not None:
            after_step(step)


def _plan_steps(ops: Sequence[SchemaOp], mapped: bool) -> list[tuple[str, list[SchemaOp]]]:
    """The chain's commits: with column mapping the adds together, the drops together, each rename and
    retype; without it one ADD COLUMNS when the chain only adds, else one rewrite of the whole chain."""
    netted = net_schema_ops(ops)
    if not netted:
        return []
    if not mapped:
        only_adds = all(o.kind == "add" for o in netted)
        return [("add" if only_adds else "rewrite", list(netted))]
    steps: list[tuple[str, list[SchemaOp]]] = []
    for kind, group in groupby(netted, key=lambda o: o.kind):
        steps += [(kind, list(group))] if kind in ("add", "drop") else [(kind, [o]) for o in group]
    return steps


def _rewrite_table(tables: SparkTables, ref: TableRef, run: Sequence[SchemaOp]) -> None:
    """The chain's schema changes as one overwrite of the table (``overwriteSchema``): one commit, so a
    crash leaves the table before or after all of them and the step's tag tells a re-run which.

    Delta allows it with Change Data Feed on when the table has no column mapping; its properties, comment
    and partitioning stay. A change feed read cannot span the commit (Delta refuses the schema change
    inside a range), as after any ALTER of such a table. Each column keeps its place; a retype casts.
    """
    df = tables.read(ref)
    exprs = [(f.name, quote_ident(f.name)) for f in df.schema.fields]   # (column, SQL expression)
    for op in run:
        names = [name for name, _ in exprs]
        if op.kind == "add" and op.column not in names:
            exprs.append((op.column, f"CAST(NULL AS {op.ddl})"))
        elif op.kind == "drop":
            exprs = [(name, e) for name, e in exprs if name != op.column]
        elif op.kind == "rename" and op.column in names and op.target not in names:
            exprs = [(op.target if name == op.column else name, e) for name, e in exprs]
        elif op.kind == "retype":
            exprs = [(name, f"CAST({e} AS {op.ddl})" if name == op.column else e) for name, e in exprs]
    detail = tables.spark.sql(f"DESCRIBE DETAIL {ref.sql}").collect()[0]
    writer = (df.selectExpr(*[f"{e} AS {quote_ident(name)}" for name, e in exprs]).write.format("delta")
              .mode("overwrite").option("overwriteSchema", "true"))
    if detail.partitionColumns:   # kept: an overwrite without partitionBy would drop them
        writer = writer.partitionBy(*detail.partitionColumns)
    metadata = tables.spark.conf.get(USER_METADATA, None)
    if metadata:
        writer = writer.option("userMetadata", metadata)
    if ref.path:
        writer.save(ref.path)
    else:   # Delta 4.4 keeps a catalog table's properties and comment through this overwrite
        writer.saveAsTable(ref.catalog_name)


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
    """An add, a drop, a rename or a retype of a table with column mapping, guarded by its current schema."""
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
