"""One lake for a module's tests, and its batches driven without a streaming query.

A fresh lake costs a test its state tables' creation, and a streaming run its query's start and
checkpoint; the batch itself is ``ApplyPipeline.process`` either way. Tests whose subject is the batch
share one state and silver (each test its own sources, each landing into its own silver tables, so
none sees another's rows), land into one bronze table unless a test needs its own, and hand
``process`` the micro-batch a streaming query over bronze would hand it — the files of one bronze
commit — as cdc_apply/lake/batch_loop.py does over Spark Connect. A test of the streaming query itself
(its checkpoint, say) runs it with :meth:`SharedLake.stream` over a bronze table of its own.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from urllib.parse import unquote

from cdc_apply.config import Config, parse_config
from cdc_apply.delta.bronze_schema import create_bronze_table
from cdc_apply.delta.engine import spark_tables
from cdc_apply.lake.pipeline import ApplyPipeline
from cdc_apply.testing.pytest_plugin import append_bronze


class SharedLake:
    """State and silver under ``root``; bronze tables under ``root/bronze/<name>``."""

    def __init__(self, spark, root: Path) -> None:
        self.spark = spark
        self.root = root
        self._batch_ids = 0

    def bronze_path(self, bronze: str = "main") -> Path:
        return self.root / "bronze" / bronze

    def config(self, bronze: str = "main", **extra) -> Config:
        """The job's configuration over bronze table ``bronze`` (its own streaming checkpoint); ``extra``
        adds sections (``apply={"on_error": "quarantine"}``)."""
        raw = {"bronze": {"path": str(self.bronze_path(bronze)), "max_files_per_trigger": 1},
               "silver": {"path": str(self.root / "silver")},
               "state": {"path": str(self.root / "state"), "checkpoint": str(self.root / "checkpoints" / bronze)}}
        for section, values in extra.items():
            raw.setdefault(section, {}).update(values)
        return parse_config(raw)

    def land(self, rows, bronze: str = "main"):
        """Append bronze rows ``(source, seq, lsn, payload)`` as one commit; returns its micro-batch."""
        create_bronze_table(spark_tables(self.spark), str(self.bronze_path(bronze)))
        append_bronze(self.spark, str(self.bronze_path(bronze)), rows)
        return self.newest_commit(bronze)

    def newest_files(self, bronze: str = "main") -> list[Path]:
        """The files bronze's newest commit added."""
        path = self.bronze_path(bronze)
        log = max((path / "_delta_log").glob("*.json"), key=lambda p: int(p.stem))
        actions = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        files = [path / unquote(a["add"]["path"]) for a in actions if "add" in a]
        assert files, f"commit {log.name} of {path} added no file"
        return files

    def newest_commit(self, bronze: str = "main"):
        """The rows of bronze's newest commit as a streaming query's micro-batch holds them: a scan of the
        files that commit added, in the table's schema."""
        schema = self.spark.read.format("delta").load(str(self.bronze_path(bronze))).schema
        return self.spark.read.schema(schema).parquet(*(str(f) for f in self.newest_files(bronze)))

    def pipeline(self, bronze: str = "main", fault_hook=None, **extra) -> ApplyPipeline:
        """A new apply job over the lake, as a process starting ``cdc-apply apply`` builds it: it reads
        what the state tables hold."""
        return ApplyPipeline.open(spark_tables(self.spark), self.config(bronze, **extra), out=io.StringIO(), fault_hook=fault_hook)

    def process(self, batch, bronze: str = "main", pipeline: ApplyPipeline | None = None, **extra):
        """Apply the micro-batch ``batch`` as one batch of a new job (or of ``pipeline``); returns the job
        and what it printed. A failure is raised as the job raises it (its named error)."""
        from cdc_apply.delta.spark_errors import unwrap_error

        pipeline = pipeline or self.pipeline(bronze, **extra)
        self._batch_ids += 1
        try:
            pipeline.process(batch, self._batch_ids)
        except Exception as exc:
            raise unwrap_error(exc, pipeline.config) from None
        return pipeline, pipeline.out.getvalue()

    def stream(self, bronze: str, **extra) -> tuple[ApplyPipeline, str]:
        """One streaming run (``run(once=True)``: everything bronze table ``bronze`` holds, a micro-batch
        a commit) of a new job."""
        pipeline = self.pipeline(bronze, **extra)
        pipeline.run(once=True)
        return pipeline, pipeline.out.getvalue()

    def silver(self, namespace: str, name: str):
        from cdc_apply.delta.refs import silver_ref

        return silver_ref(self.config(), namespace, name).read(self.spark)

    def silver_exists(self, namespace: str, name: str) -> bool:
        return (self.root / "silver" / namespace / name).exists()

    def state(self, table: str, source: str):
        """State table ``table``'s rows of ``source``."""
        from pyspark.sql import functions as F

        return self.spark.read.format("delta").load(str(self.root / "state" / table)).where(F.col("source") == source)
