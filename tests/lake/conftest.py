"""Helpers for pipeline tests: a bronze table fed in appends, one apply run over it."""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import pytest

from cdc_apply.config import Config, parse_config
from cdc_apply.delta.bronze_schema import create_bronze_table
from cdc_apply.delta.engine import spark_tables
from cdc_apply.lake.pipeline import ApplyPipeline
from cdc_apply.testing.pytest_plugin import append_bronze


@dataclass
class Lake:
    """A bronze/silver/state layout under one folder."""

    spark: object
    root: Path
    extra: dict

    @property
    def config(self) -> Config:
        raw = {"bronze": {"path": str(self.root / "bronze"), "max_files_per_trigger": 1},
               "silver": {"path": str(self.root / "silver")}, "state": {"path": str(self.root / "state")}}
        for section, values in self.extra.items():
            raw.setdefault(section, {}).update(values)
        return parse_config(raw)

    def land(self, rows) -> None:
        """Append bronze rows ``(source, seq, lsn, payload)`` as one Delta commit (one micro-batch)."""
        create_bronze_table(spark_tables(self.spark), str(self.root / "bronze"))
        append_bronze(self.spark, str(self.root / "bronze"), rows)

    def apply(self, **kwargs) -> tuple[ApplyPipeline, str]:
        out = io.StringIO()
        pipeline = ApplyPipeline.open(spark_tables(self.spark), self.config, out=out, **kwargs)
        pipeline.run(once=True)
        return pipeline, out.getvalue()

    def silver(self, namespace: str, name: str):
        from cdc_apply.delta.refs import silver_ref

        return silver_ref(self.config, namespace, name).read(self.spark)

    def state(self, table: str):
        return self.spark.read.format("delta").load(str(self.root / "state" / table))


@pytest.fixture(scope="session")
def lake_factory(spark, tmp_path_factory):
    def make(name: str = "lake", **extra) -> Lake:
        return Lake(spark, tmp_path_factory.mktemp(name), extra)

    return make
