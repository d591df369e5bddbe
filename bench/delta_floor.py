"""Delta Lake's own floor under the small-batch shapes: the same changes written by Delta alone.

Used by ``bench.small_batch --floor``: inside each child, in the job's Spark session and between the
job's micro-batches, the same per-table changes go through Delta Lake with no cdc_apply code in the
measured path:

* **MERGE floor** — one plain Delta MERGE per table of the ten tables' collapsed changes (one row per
  key, last change wins, built on the driver and handed over with ``spark.createDataFrame``):
  ``whenMatchedDelete`` for deleted keys, ``whenMatchedUpdate`` / ``whenNotMatchedInsert`` of every
  column for the rest. Four tables at once (the job's ``apply.parallelism``) and one at a time; and
  four at once rewriting the files each MERGE touches instead of marking rows in deletion vectors (as
  the job does in tables under ``silver.rewrite_table_bytes``).
* **append floor** — one plain Delta append per table of the same rows (ten commits): the least any
  applier writing each table's changes must do.
* **hot / random** — Delta's MERGE (``whenMatchedUpdateAll``) of the job's 2,000 updates of the newest
  5 % of keys, then of its 2,000 updates of random keys, into a copy of the 200,000-row table, with and
  without the batch's key range (``t.id BETWEEN low AND high``) in the ON clause. Also on the same rows
  laid out in 20 files by key range, which the bench's table (one file) is not, and with the key
  range, rewriting instead of marking rows.

Every floor table is a copy of the job's silver table before its measured batches: the same schema (with the
metadata columns), the same Delta properties read from the silver table (Change Data Feed, deletion
vectors, column mapping, type widening), its rows written the way the job writes them (one file,
sorted by key). Each variant writes its own copy, so every variant starts from the same state. Only
the Delta call is timed: the source DataFrames are built and held in the JVM before the clock starts
(:func:`materialized`), as the job's decoded rows are when its MERGEs read them — a source left as a
local DataFrame would make every MERGE scan it through Python workers (pickled rows, a worker per
task), time that is no part of Delta's write.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from cdc_apply.lake.silver.merge import PERSISTENT_DVS

# The silver properties a floor table copies from the job's table (those the job sets itself).
COPIED_PROPERTIES = ("delta.enableChangeDataFeed", "delta.enableDeletionVectors", "delta.columnMapping.mode",
                     "delta.enableTypeWidening")
# Session settings of the floor's MERGEs, as the job's table sessions have them: the source is local
# rows, nothing for Delta to copy before it reads it twice.
FLOOR_SETTINGS = {"spark.databricks.delta.merge.materializeSource": "none",
                  "spark.sql.constraintPropagation.enabled": "false", "spark.sql.codegen.maxFields": "400"}
WIDE_FILES = 20  # the hot table laid out by key range in this many files (not the bench's layout)
# Variants whose MERGEs rewrite the files they touch instead of marking rows in deletion vectors, as the
# job's MERGEs into tables under silver.rewrite_table_bytes do.
REWRITING = ("merge_rewrite_parallel", "hot_range_rewrite")
# The variants a large batch's floor copies and runs: the MERGE marking rows (as the job does at that size) and the
# plain append, four tables at once.
PARALLEL = ("merge_parallel", "append_parallel")


def collapse(changes) -> dict[str, dict[int, tuple]]:
    """``{table: {id: (op, a, t)}}``: each key's last change of the batch (op ``I``/``U``/``D``)."""
    out: dict[str, dict[int, tuple]] = {}
    for table, op, key, a, t in changes:
        out.setdefault(table, {})[key] = (op, a, t)
    return out


class Floor:
    """The floor tables of one child (under ``root``) and the measurements over them."""

    def __init__(self, spark, silver: Path, root: Path, tables: list[str], hot: str, parallelism: int):
        self.spark = spark.newSession()
        for key, value in FLOOR_SETTINGS.items():
            self.spark.conf.set(key, value)
        self.silver, self.root, self.tables, self.hot, self.parallelism = silver, root, tables, hot, parallelism
        self.schema = None
        self.properties: dict[str, str] = {}
        self.counts: dict[str, dict[str, int]] = {}  # path -> rows its last MERGE updated, deleted, inserted

    # -- set-up (not timed) ---------------------------------------------------------------------
    def _copy(self, table: str, dest: str, files: int = 1) -> None:
        """A new Delta table at ``dest``: ``table``'s schema and properties, its rows in ``files`` files
        sorted by key (by key range when several)."""
        from delta.tables import DeltaTable

        rows = self.spark.read.format("delta").load(str(self.silver / table)).select(*self.schema.names)
        builder = DeltaTable.create(self.spark).location(str(self.root / dest)).addColumns(self.schema)
        for key, value in self.properties.items():
            builder = builder.property(key, value)
        builder.execute()
        laid = rows.coalesce(1) if files == 1 else rows.repartitionByRange(files, "id")
        laid.sortWithinPartitions("id").write.format("delta").mode("append").save(str(self.root / dest))

    def set_up(self, variants=("merge_parallel", "merge_rewrite_parallel", "merge_serial", "append_parallel",
                               "append_serial")) -> dict:
        """Copy every table the floors write (before the job's measured batches); returns their layout. Without a
        hot table (``hot=None``), only the ten tables' ``variants``."""
        props = {r.key: r.value for r in
                 self.spark.sql(f"SHOW TBLPROPERTIES delta.`{self.silver / self.tables[0]}`").collect()}
        self.properties = {k: props[k] for k in COPIED_PROPERTIES if k in props}
        from pyspark.sql.types import StructField, StructType

        # Without the column-mapping metadata of the silver fields: each table assigns its own.
        self.schema = StructType([StructField(f.name, f.dataType, f.nullable) for f in
                                  self.spark.read.format("delta").load(str(self.silver / self.tables[0])).schema])
        for variant in variants:
            for table in self.tables:
                self._copy(table, f"{variant}/{table}")
        layout = {"properties": self.properties,
                  "silver_files": {self.tables[0]: self.files(str(self.silver / self.tables[0]))},
                  "floor_files": {"t": self.files(str(self.root / variants[0] / self.tables[0]))}}
        if self.hot is None:
            return layout
        for variant in ("hot_plain", "hot_range", "hot_range_rewrite"):
            self._copy(self.hot, variant)
        for variant in ("hot_plain_wide", "hot_range_wide"):
            self._copy(self.hot, variant, WIDE_FILES)
        return {"properties": self.properties, "silver_files": {
            t: self.files(str(self.silver / t)) for t in (self.tables[0], self.hot)},
            "floor_files": {"t": self.files(str(self.root / "merge_parallel" / self.tables[0])),
                            "hot": self.files(str(self.root / "hot_plain")),
                            "hot_wide": self.files(str(self.root / "hot_plain_wide"))}}

    def files(self, path: str) -> int:
        return int(self.spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first().numFiles)

    def _source(self, rows: dict[int, tuple], with_delete: bool):
        """The collapsed rows as a local DataFrame of the table's columns (+ ``_delete``)."""
        changes = [({"id": key, "a": None if op == "D" else a, "t": None if op == "D" else t}, op == "D")
                   for key, (op, a, t) in sorted(rows.items())]
        return self.source(changes, with_delete)

    def source(self, changes: list[tuple[dict, bool]], with_delete: bool):
        """``(values by column, deleted)`` per key as a local DataFrame of the table's columns (+
        ``_delete``); columns not given are null, the commit metadata columns are set."""
        from pyspark.sql.types import BooleanType, StructField, StructType

        extra = {"_cdc_commit_lsn": 1, "_cdc_commit_ts": datetime.now(timezone.utc)}
        names = [f.name for f in self.schema.fields]
        data = []
        for values, deleted in changes:
            row = tuple({**values, **extra}.get(n) for n in names)
            data.append(row + (deleted,) if with_delete else row)
        schema = StructType(self.schema.fields + [StructField("_delete", BooleanType(), False)]) if with_delete \
            else self.schema
        return self.spark.createDataFrame(data, schema)

    # -- the measurements -------------------------------------------------------------------------
    def merge(self, path: str, source, key_range: tuple | None = None, upsert: bool = True) -> float:
        from delta.tables import DeltaTable

        condition = "t.id = s.id"
        if key_range is not None:
            condition += f" AND t.id BETWEEN {int(key_range[0])} AND {int(key_range[1])}"
        started = time.monotonic()
        merge = DeltaTable.forPath(self.spark, path).alias("t").merge(source.alias("s"), condition)
        if upsert:
            columns = {f"`{f.name}`": f"s.`{f.name}`" for f in self.schema.fields}
            merge = (merge.whenMatchedDelete(condition="s._delete")
                     .whenMatchedUpdate(condition="NOT s._delete", set=columns)
                     .whenNotMatchedInsert(condition="NOT s._delete", values=columns))
        else:
            merge = merge.whenMatchedUpdateAll()
        metrics = merge.execute().collect()
        seconds = time.monotonic() - started
        row = metrics[0].asDict() if metrics else {}
        self.counts[path] = {k: int(row.get(f"num_{k}_rows") or 0) for k in ("updated", "deleted", "inserted")}
        return seconds

    def _append(self, path: str, source) -> float:
        started = time.monotonic()
        source.coalesce(1).write.format("delta").mode("append").save(path)
        return time.monotonic() - started

    def _each(self, variant: str, action, sources: dict, parallel: bool) -> dict:
        """``action(path, source)`` for every table: four at once (the job's parallelism) or one at a
        time; returns the wall seconds and each table's."""
        with self._rewriting(variant):
            started = time.monotonic()
            work = lambda t: (t, action(str(self.root / variant / t), sources[t]))  # noqa: E731
            if parallel:
                with ThreadPoolExecutor(max_workers=self.parallelism) as pool:
                    per_table = dict(pool.map(work, self.tables))
            else:
                per_table = dict(map(work, self.tables))
            return {"seconds": time.monotonic() - started, "tables": per_table}

    @contextmanager
    def _rewriting(self, variant: str):
        """The floor's session MERGEs rewriting files for a variant of ``REWRITING``, marking rows otherwise."""
        self.spark.conf.set(PERSISTENT_DVS, "false" if variant in REWRITING else "true")
        try:
            yield
        finally:
            self.spark.conf.set(PERSISTENT_DVS, "true")

    def small_batch(self, changes, rotate: int = 0, serial: bool = True) -> dict:
        """The ten tables' changes: Delta's MERGE and plain appends, four at once and one at a time (the
        variants' order rotated by ``rotate``; ``serial=False``: the MERGE marking rows and the append, four
        at once, only: the variants ``set_up(PARALLEL)`` copies)."""
        collapsed = collapse(changes)
        merge_sources = {t: materialized(self._source(collapsed.get(t, {}), True)) for t in self.tables}
        append_sources = {t: materialized(self._source(collapsed.get(t, {}), False)) for t in self.tables}
        out = {"rows": sum(len(collapsed.get(t, {})) for t in self.tables),
               "deletes": sum(op == "D" for t in self.tables for op, _, _ in collapsed.get(t, {}).values())}
        variants = [("merge_parallel", self.merge, merge_sources, True),
                    ("append_parallel", self._append, append_sources, True),
                    ("merge_rewrite_parallel", self.merge, merge_sources, True),
                    ("merge_serial", self.merge, merge_sources, False),
                    ("append_serial", self._append, append_sources, False)]
        chosen = variants if serial else [v for v in variants if v[0] in PARALLEL]
        for variant, action, sources, parallel in _rotated(chosen, rotate):
            out[variant] = self._each(variant, action, sources, parallel)
        out["merge_counts"] = {k: sum(self.counts[str(self.root / "merge_parallel" / t)][k] for t in self.tables)
                               for k in ("updated", "deleted", "inserted")}
        return out

    def hot_random(self, hot_changes, random_changes, rotate: int = 0) -> dict:
        """Delta's MERGE of the hot batch, then of the random batch (as the job runs them, on the same
        table), with and without the key range in the ON clause, on the bench's layout and on 20 files."""
        sources = {}
        for name, changes in (("hot", hot_changes), ("random", random_changes)):
            rows = collapse(changes)[self.hot]
            sources[name] = (materialized(self._source(rows, False)), (min(rows), max(rows)))
        out = {}
        for variant in _rotated(["hot_plain", "hot_range", "hot_plain_wide", "hot_range_wide", "hot_range_rewrite"],
                                rotate):
            path = str(self.root / variant)
            with self._rewriting(variant):
                out[variant] = {name: self.merge(path, df, bounds if "range" in variant else None, upsert=False)
                                for name, (df, bounds) in sources.items()}
        return out


def materialized(df):
    """``df`` computed now and held in the JVM's block manager (a local checkpoint: not the cache, whose
    state Delta's MERGE checks does not change while MERGEs run beside it)."""
    return df.localCheckpoint(eager=True)


def _rotated(items: list, k: int) -> list:
    k %= len(items)
    return items[k:] + items[:k]
