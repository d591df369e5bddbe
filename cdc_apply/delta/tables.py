"""Where tables live (paths or catalog names) and the Delta DDL that creates and evolves them.

Names come from the source database (namespaces, relations, columns) and from bronze (source names),
so whoever can create a table on a published database chooses them. Every path built from one goes
through :func:`path_segment` and :func:`check_under_root`; every SQL string literal through
:func:`quote_literal` and every identifier through :func:`quote_ident`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from itertools import groupby
from typing import Iterable, Sequence

from cdc_apply.planning.schema_net import net_schema_ops
from cdc_apply.planning.tables import SchemaOp
from cdc_apply.config import Config
from cdc_apply.errors import PathError


def quote_ident(name: str) -> str:
    """A Spark SQL identifier in backticks (backticks inside doubled)."""
    return "`" + name.replace("`", "``") + "`"


def quote_literal(text: str) -> str:
    """A Spark SQL string literal that reads back as ``text``.

    Spark's parser treats a backslash inside a literal as an escape (``spark.sql.parser.escapedStringLiterals``
    is off by default), so backslashes are doubled before quotes are escaped; every other character,
    line breaks and NUL included, stands for itself.
    """
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def path_segment(name: str) -> str:
    """A namespace, relation or source name as exactly one path segment.

    ``%`` and ``/`` are percent-encoded (so ordinary names keep the paths existing lakes have), and so is
    NUL. Hadoop's ``Path`` resolves ``.`` and ``..`` and drops an empty segment, so a name of dots only
    has every dot encoded (``..`` is ``%2E%2E``) and the empty name becomes a lone ``%`` (every other
    ``%`` in a segment starts an encoded byte, so no other name maps to it).
    """
    if not name:
        return "%"
    if not name.strip("."):
        return "%2E" * len(name)
    return name.replace("%", "%25").replace("/", "%2F").replace("\x00", "%00")


def check_under_root(root: str, path: str, relation: str) -> None:
    """Raise :class:`PathError` unless ``path`` is ``root`` followed by segments that resolve to themselves."""
    below = path[len(root) + 1:].split("/") if path.startswith(root + "/") else None
    if below is None or any(part in ("", ".", "..") or "\x00" in part for part in below):
        raise PathError("the table would be written outside its root", relation=relation, root=root, path=path)


def _child_path(root: str, names: Sequence[str], relation: str) -> str:
    root = root.rstrip("/")
    path = "/".join([root, *(path_segment(n) for n in names)])
    check_under_root(root, path, relation)
    return path


@dataclass(frozen=True, slots=True)
class TableRef:
    """A Delta table by path or by catalog name; ``sql`` is usable in SQL text."""

    path: str | None = None
    name: str | None = None

    @property
    def sql(self) -> str:
        if self.path is not None:
            return "delta." + quote_ident(self.path)
        return self.name  # type: ignore[return-value]

    def __str__(self) -> str:
        return self.path or self.name or "?"

    def delta_table(self, spark):
        from delta.tables import DeltaTable

        return DeltaTable.forPath(spark, self.path) if self.path else DeltaTable.forName(spark, self.name)

    def exists(self, spark) -> bool:
        from delta.tables import DeltaTable

        if self.path is not None:
            return DeltaTable.isDeltaTable(spark, self.path)
        return spark.catalog.tableExists(self.name)

    def read(self, spark):
        reader = spark.read.format("delta")
        return reader.load(self.path) if self.path else spark.read.table(self.name)

    def append(self, df, app_id: str | None, version: int, metadata: str | None = None) -> None:
        """Append ``df``; with an ``app_id``, once per ``version`` (Delta's idempotent writes). Options, not
        session settings: a DataFrame writes with its own session's, which may not be the caller's."""
        writer = df.write.format("delta").mode("append")
        if app_id is not None:
            writer = writer.option("txnAppId", app_id).option("txnVersion", str(version))
        if metadata is not None:
            writer = writer.option("userMetadata", metadata)
        if self.path:
            writer.save(self.path)
        else:
            writer.saveAsTable(self.name)


def _catalog_name(template: str, namespace: str, name: str, source: str, suffix: str = "") -> str:
    parts = [p.format(namespace=namespace, name=name, source=source) for p in template.split(".")]
    parts[-1] += suffix
    return ".".join(quote_ident(p) for p in parts)


def silver_ref(config: Config, namespace: str, name: str, source: str = "") -> TableRef:
    """``<silver root>/[<source>/]<namespace>/<relation>`` or the catalog name built from the template.

    Each name is one :func:`path_segment`; a path that would still leave the silver root is a :class:`PathError`.
    """
    if config.silver.path is not None:
        names = [source, namespace, name] if config.silver.source_in_path else [namespace, name]
        return TableRef(path=_child_path(config.silver.path, names, f"{namespace}.{name}"))
    return TableRef(name=_catalog_name(config.silver.table_template, namespace, name, source))  # type: ignore[arg-type]


def history_ref(config: Config, namespace: str, name: str, source: str = "") -> TableRef:
    """Where a silver table's history table lives: the same layout under ``<silver path><history_suffix>``,
    or the catalog table named by the template with ``history_suffix`` appended to its table name."""
    suffix = config.silver.history_suffix
    if config.silver.path is not None:
        names = [source, namespace, name] if config.silver.source_in_path else [namespace, name]
        return TableRef(path=_child_path(config.silver.path.rstrip("/") + suffix, names, f"{namespace}.{name}"))
    return TableRef(name=_catalog_name(config.silver.table_template, namespace, name, source, suffix))  # type: ignore[arg-type]


def state_ref(config: Config, table: str) -> TableRef:
    """A bookkeeping table: ``<state location>/<table>`` or ``<state schema>.<table>``."""
    if config.state.path is not None:
        return TableRef(path=_child_path(config.state.path, [table], table))
    return TableRef(name=f"{config.state.schema}.{quote_ident(table)}")


def bronze_ref(config: Config) -> TableRef:
    return TableRef(path=config.bronze.path, name=config.bronze.table)


def column_list(columns: Iterable[tuple[str, str]]) -> str:
    return ", ".join(f"{quote_ident(name)} {ddl}" for name, ddl in columns)


def property_list(properties: dict[str, str]) -> str:
    return ", ".join(f"{quote_literal(k)} = {quote_literal(str(v))}" for k, v in properties.items())


def create_statement(ref: TableRef, columns: Sequence[tuple[str, str]], properties: dict[str, str],
                     comment: str | None = None, replace: bool = False) -> str:
    """The ``CREATE TABLE IF NOT EXISTS`` (or ``REPLACE TABLE``) text for the columns, properties and comment."""
    verb = "REPLACE TABLE" if replace else "CREATE TABLE IF NOT EXISTS"
    text = f"{verb} {ref.sql} ({column_list(columns)}) USING delta"
    if comment:
        text += f" COMMENT {quote_literal(comment)}"
    if properties:
        text += f" TBLPROPERTIES ({property_list(properties)})"
    return text


def create_table(spark, ref: TableRef, columns: Sequence[tuple[str, str]], properties: dict[str, str],
                 comment: str | None = None, replace: bool = False) -> None:
    """Run :func:`create_statement`; a creation killed before its first commit is cleared first
    (:mod:`cdc_apply.delta.table_create`)."""
    from cdc_apply.delta.table_create import ensure_table

    text = create_statement(ref, columns, properties, comment, replace)
    if replace:
        spark.sql(text)
    else:
        ensure_table(spark, ref, lambda: spark.sql(text))


def silver_properties(config: Config) -> dict[str, str]:
    props = {
        "delta.columnMapping.mode": "name",
        "delta.enableChangeDataFeed": str(config.silver.change_data_feed).lower(),
        "delta.enableDeletionVectors": str(config.silver.deletion_vectors).lower(),
        "delta.enableTypeWidening": "true",
    }
    return props


def set_properties(spark, ref: TableRef, properties: dict[str, str]) -> None:
    spark.sql(f"ALTER TABLE {ref.sql} SET TBLPROPERTIES ({property_list(properties)})")


def table_properties(spark, ref: TableRef) -> dict[str, str]:
    return {r.key: r.value for r in spark.sql(f"SHOW TBLPROPERTIES {ref.sql}").collect()}


USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"


def apply_schema_ops(spark, ref: TableRef, ops: Sequence[SchemaOp], chain: str | None = None,
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
    for kind, run in groupby(net_schema_ops(ops), key=lambda o: o.kind):
        steps += [list(run)] if kind in ("add", "drop") else [[o] for o in run]
    if fills:
        steps.append([SchemaOp("fill", c.name, spark_ddl=c.spark_ddl) for c, _ in fills])
    values = {c.name: v for c, v in fills}
    done = _steps_done(spark, ref, chain, len(steps)) if chain is not None else -1
    for step, run in enumerate(steps):
        if step < done or (step == done and run[0].kind != "retype"):
            continue
        if chain is not None:
            spark.conf.set(USER_METADATA, json.dumps({"cdc_apply": {"schema_chain": chain, "step": step}},
                                                     separators=(",", ":")))
        try:
            if run[0].kind == "fill":
                _fill(spark, ref, run, values, fill_where)
            else:
                _apply_step(spark, ref, run)
        finally:
            if chain is not None:
                spark.conf.unset(USER_METADATA)


def _fill(spark, ref: TableRef, run: Sequence[SchemaOp], values: dict, where: str | None = None) -> None:
    """Set columns just added to their missing values in every row (or those ``where`` holds for; one UPDATE)."""
    from pyspark.sql import functions as F

    ref.delta_table(spark).update(condition=where, set={quote_ident(o.column): F.lit(values[o.column]).cast(o.spark_ddl)
                                                        for o in run})


def _steps_done(spark, ref: TableRef, chain: str, steps: int) -> int:
    """The last step of ``chain`` the table's recent history has a commit of (-1: none)."""
    done = -1
    # A step commits at most four times (a column rebuilt for a retype); a MERGE, a truncate and a
    # property commit may follow the last one.
    for row in spark.sql(f"DESCRIBE HISTORY {ref.sql} LIMIT {4 * steps + 8}").select("userMetadata").collect():
        try:
            tag = json.loads(row.userMetadata or "null")
        except ValueError:
            continue
        tag = tag.get("cdc_apply") if isinstance(tag, dict) else None
        if isinstance(tag, dict) and tag.get("schema_chain") == chain:
            done = max(done, int(tag.get("step", -1)))
    return done


def _apply_step(spark, ref: TableRef, run: Sequence[SchemaOp]) -> None:
    kind = run[0].kind
    if kind in ("add", "drop"):
        current = {f.name for f in ref.read(spark).schema.fields}
        if kind == "add":
            adds: dict[str, str] = {}
            for o in run:
                if o.column not in current:
                    adds.setdefault(o.column, o.spark_ddl)
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


def _apply_one(spark, ref: TableRef, op: SchemaOp) -> None:
    """A rename or a retype, guarded by the table's current schema."""
    current = {f.name: f.dataType for f in ref.read(spark).schema.fields}
    if op.kind == "rename":
        if op.column in current and op.new_name not in current:
            spark.sql(f"ALTER TABLE {ref.sql} RENAME COLUMN {quote_ident(op.column)} TO {quote_ident(op.new_name)}")
    elif op.kind == "retype":
        resumed = f"{op.column}__retype" in current
        if resumed or (op.column in current and current[op.column].simpleString().upper() != _simple(op.spark_ddl)):
            if op.in_place and not resumed:
                spark.sql(f"ALTER TABLE {ref.sql} ALTER COLUMN {quote_ident(op.column)} TYPE {op.spark_ddl}")
            else:
                _rewrite_column(spark, ref, op)
    else:  # pragma: no cover - the planner makes no other kinds
        raise ValueError(op.kind)


def _simple(ddl: str) -> str:
    return ddl.replace(" ", "").upper()


def _rewrite_column(spark, ref: TableRef, op: SchemaOp) -> None:
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


def delta_log(spark, ref: TableRef):
    """Delta's ``DeltaLog`` of the table, or None where the JVM is out of reach (Spark Connect) or the
    catalog does not describe its tables."""
    try:
        location = ref.path or spark.sql(f"DESCRIBE DETAIL {ref.sql}").first().location
        return spark._jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, location)
    except Exception:  # noqa: BLE001 - no JVM access, or no location to ask for
        return None


def newest_snapshot(log):
    """The table's newest snapshot (``DeltaLog.update`` with its default arguments, from Python)."""
    return log.update(*(getattr(log, f"update$default${i}")() for i in (1, 2, 3)))


def log_changes(spark, log, start: int) -> list[tuple[int, list[dict]]]:
    """``(version, actions)`` of each commit of ``log`` from ``start`` on, each action as its JSON dict:
    the commit files only, no Spark job. Raises where those commits were cleaned up."""
    jvm = spark._jvm
    changes = log.getChanges(start, jvm.scala.Option.empty(), True)
    out = []
    while changes.hasNext():
        commit = changes.next()
        out.append((int(commit._1()), [json.loads(action.json()) for action in
                                       jvm.scala.jdk.javaapi.CollectionConverters.asJava(commit._2())]))
    return out


def newest_added_max(spark, ref: TableRef, column: str, commits: int = 4) -> int | None:
    """The largest ``column`` value in the rows that the newest commit adding rows added, from its files'
    statistics (the commit files only, no Spark job); -1 when no commit ever added rows. Equals the
    column's maximum in a table whose appends carry non-decreasing values (the bookkeeping tables'
    ``apply_version``). None when only a query can tell: no JVM to ask, a file without statistics of
    ``column``, or no commit among the newest ``commits`` added rows (compactions and empty files add
    none)."""
    log = delta_log(spark, ref)
    if log is None:
        return None
    try:
        start = max(0, int(newest_snapshot(log).version()) - commits + 1)
        found = None
        for _, actions in log_changes(spark, log, start):
            stats = [json.loads(a["add"]["stats"]) for a in actions if "add" in a and a["add"].get("dataChange", True)]
            added = [int(s["maxValues"][column]) for s in stats if int(s["numRecords"])]
            if added:
                found = max(added)
    except (KeyError, TypeError, ValueError):
        return None      # a file without statistics of the column
    except Exception:  # noqa: BLE001 - commits cleaned up, a JVM error: ask the table
        return None
    if found is None:
        return -1 if start == 0 else None
    return found


def files_bytes(spark, ref: TableRef) -> int | None:
    """The bytes of the table's current data files, from its newest snapshot: the one its next read or
    MERGE plans with, so a state reconstruction it starts is one that read would have run. None where
    the JVM is out of reach (Spark Connect)."""
    log = delta_log(spark, ref)
    if log is None:
        return None
    try:
        return int(newest_snapshot(log).sizeInBytes())
    except Exception:  # noqa: BLE001 - not known: the caller decides without it
        return None


def delta_version(spark, ref: TableRef) -> int | None:
    """The table's newest Delta version this JVM knows (its own commits included), without reading the
    log again: the cached snapshot Delta keeps per table. Falls back to ``DESCRIBE HISTORY`` (one small
    job) where the JVM is out of reach (Spark Connect); None for a table that does not exist."""
    log = delta_log(spark, ref)
    if log is not None:
        try:
            version = int(log.unsafeVolatileSnapshot().version())
            return version if version >= 0 else None
        except Exception:  # noqa: BLE001 - ask the table
            pass
    if not ref.exists(spark):
        return None
    return int(ref.delta_table(spark).history(1).select("version").first()[0])


def recorded_txn_version(spark, ref: TableRef, app_id: str) -> int | None:
    """The newest ``txnVersion`` Delta recorded for ``app_id`` in the table (None: none, or no JVM to ask,
    as under Spark Connect). Rebuilds the table's state once: call it once per table, not per write."""
    log = delta_log(spark, ref)
    if log is None:
        return None
    found = newest_snapshot(log).transactions().get(app_id)
    return int(found.get()) if found.isDefined() else None
