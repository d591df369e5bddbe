"""The apply job over Spark Connect: landed with the classic session, applied through a local Connect server
with Delta (SQL statements, no JVM in this process), silver compared with PostgreSQL."""

from __future__ import annotations

import io

import pytest

from cdc_apply.testing.connect_server import connect_mode
from cdc_apply.testing.differential import run_differential

# Minutes each (a Connect server of its own, the differential workload): run by make system.
pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.connect, pytest.mark.system]

SEED = 20261128


def test_silver_applied_over_spark_connect_equals_the_source_at_every_checkpoint(spark, postgres, connect_session,
                                                                                 tmp_path):
    """Streamed, two-phase and parallel transactions with TOAST values (protocol 4) and key-range snapshot
    chunks, applied by a pipeline whose session is a Spark Connect client: equal to PostgreSQL twice."""
    out = io.StringIO()
    outcome = run_differential(spark, SEED, transactions=40, checkpoints=2, configs=("v4_parallel",), postgres=postgres,
                               root=tmp_path, out=out, large_rows=120, preload=20, chunk_rows=40,
                               apply_spark=connect_session, apply_mode=connect_mode)
    print(out.getvalue())
    assert outcome.ok, "\n".join(outcome.failures)
    assert len(outcome.checkpoints) == 2
    checks = outcome.checkpoints[-1]["v4_parallel"]
    assert {c.name for c in checks} >= {"diff.pk_t", "diff.full_t", "diff.idx_t", "diff.comp_t"}
    assert sum(c.source_rows for c in checks) > 0


def test_soft_deletes_applied_over_spark_connect_leave_silver_less_its_marked_rows_equal_to_the_source(
        spark, postgres, connect_session, tmp_path):
    """Every table's deletes soft, applied through the SQL statements a Connect session runs (merge_sql.py,
    soft_deletes.py): silver less its marked rows equals PostgreSQL, and rows were marked."""
    out = io.StringIO()
    outcome = run_differential(spark, SEED, transactions=40, checkpoints=2, configs=("v4_parallel",), postgres=postgres,
                               root=tmp_path, out=out, large_rows=120, preload=20, chunk_rows=40,
                               apply_spark=connect_session, apply_mode=connect_mode, soft_deletes=True)
    print(out.getvalue())
    assert outcome.ok, "\n".join(outcome.failures)
    marked = sum(spark.read.format("delta").load(str(tmp_path / "silver" / "v4_parallel" / "diff" / table))
                 .where("_cdc_deleted").count() for table in ("pk_t", "full_t"))
    assert marked > 0
