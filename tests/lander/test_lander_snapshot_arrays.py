"""A lander's snapshot and stream of two-dimensional array columns of a real server, applied with
``[tables."ns.t"] array_dimensions``: silver holds ARRAY<ARRAY<..>>, the snapshot's copied rows and the
streamed changes alike, with text tuples and with binary ones."""

from __future__ import annotations

import datetime as dt
import io
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import pytest
from lander_helpers import make_config, run_lander

from cdc_apply.config import TableConfig
from cdc_apply.delta.engine import spark_tables
from cdc_apply.lake.pipeline import ApplyPipeline

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

SNAPSHOT_SETUP = """
CREATE TABLE grid (id int PRIMARY KEY, cells int4[], words text[], amounts numeric(10,2)[], stamps timestamptz[]);
INSERT INTO grid VALUES
 (1, '{{1,2},{3,NULL}}', ARRAY[['a "q"', 'b,c'], ['back\\slash', NULL]], '{{1.50,-2.25}}',
     ARRAY[['2024-01-02 03:04:05.5+00']]::timestamptz[]),
 (2, '[0:1][-1:0]={{5,6},{7,8}}', '{}', NULL, '{{NULL,NULL}}');
CREATE PUBLICATION grid_pub FOR TABLE grid;
"""
STREAMED = """
INSERT INTO grid VALUES (3, '{{9}}', '{{x,y}}', '{{0.01}}', '{}');
UPDATE grid SET cells = '{{10,20},{30,40}}' WHERE id = 1;
"""
GRID_ROWS = [
    (1, [[10, 20], [30, 40]], [['a "q"', "b,c"], ["back\\slash", None]], [[Decimal("1.50"), Decimal("-2.25")]],
     [[dt.datetime(2024, 1, 2, 3, 4, 5, 500000)]]),
    (2, [[5, 6], [7, 8]], [], None, [[None, None]]),
    (3, [[9]], [["x", "y"]], [[Decimal("0.01")]], []),
]


def _land_grid(postgres, spark, db: str, root: Path, binary: bool):
    """Database ``db`` with the grid table, its snapshot and stream landed; the config giving its dimensions."""
    postgres.create_database(db)
    postgres.execute(SNAPSHOT_SETUP, dbname=db)
    config = make_config(root, postgres.dsn(db), db, f"{db}_slot", "grid_pub", create_slot=True,
                         snapshot="initial", binary=binary)
    run_lander(config, spark)            # the slot and the initial snapshot
    postgres.execute(STREAMED, dbname=db)
    run_lander(config, spark)            # the stream after it
    dimensions = TableConfig(array_dimensions=(("cells", 2), ("words", 2), ("amounts", 2), ("stamps", 2)))
    return replace(config, tables={"public.grid": dimensions})


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_a_snapshot_and_the_stream_of_two_dimensional_columns_land_as_nested_arrays(postgres, spark,
                                                                                    tmp_path_factory, binary):
    from pyspark.sql.types import ArrayType, IntegerType

    db = f"grid_{'binary' if binary else 'text'}"
    root = tmp_path_factory.mktemp(db)
    config = _land_grid(postgres, spark, db, root, binary)
    ApplyPipeline.open(spark_tables(spark), config, out=io.StringIO()).run(once=True)
    silver = spark.read.format("delta").load(str(root / "silver" / "public" / "grid"))
    assert silver.schema["cells"].dataType == ArrayType(ArrayType(IntegerType()))
    rows = sorted((r.id, r.cells, r.words, r.amounts, r.stamps) for r in silver.collect())
    assert rows == GRID_ROWS


def test_silver_of_two_dimensional_columns_compares_equal_with_postgresql_under_the_tables_dimensions(
        postgres, spark, tmp_path_factory):
    from cdc_apply.testing.compare import compare_with_postgres

    db, root = "grid_compare", tmp_path_factory.mktemp("grid_compare")
    config = _land_grid(postgres, spark, db, root, binary=True)
    ApplyPipeline.open(spark_tables(spark), config, out=io.StringIO()).run(once=True)
    conn = postgres.connect(db)
    try:
        checks = compare_with_postgres(spark, config, conn, db, schemas=["public"])
    finally:
        conn.close()
    assert [c.name for c in checks] == ["public.grid"] and all(c.equal for c in checks), [c.line() for c in checks]
