"""The lander's bronze rows as Arrow (pure: no PostgreSQL, no Spark)."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timezone

import pyarrow as pa

from cdc_apply.delta.bronze_schema import ARROW_SCHEMA
from cdc_apply.lander.bronze_commit import stream_batch

LANDED = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=timezone.utc)


def test_stream_rows_become_the_columns_pyarrow_would_convert_them_to():
    rows = ((5, 10, b"I\x00a"), (6, 0, b""), (7, 2 ** 62, b"C" * 300))
    batch = stream_batch("s\u00e9", rows, LANDED)
    batch.validate(full=True)
    expected = pa.RecordBatch.from_arrays([
        pa.array(["s\u00e9"] * 3, pa.string()), pa.array([5, 6, 7], pa.int64()), pa.array([10, 0, 2 ** 62], pa.int64()),
        pa.array([r[2] for r in rows], pa.binary()), pa.array([LANDED] * 3, pa.timestamp("us", tz="UTC")),
    ], schema=ARROW_SCHEMA)
    assert batch.equals(expected)


def test_an_empty_batch_and_an_empty_source_name_are_valid_columns():
    assert stream_batch("s", (), LANDED).num_rows == 0
    batch = stream_batch("", ((1, 1, b"x"), (2, 2, b"y")), LANDED)
    batch.validate(full=True)
    assert batch.column("source").to_pylist() == ["", ""]


def test_building_a_batch_does_not_import_pandas():
    code = ("import sys; from datetime import datetime, timezone; from cdc_apply.lander.bronze_commit import "
            "stream_batch; stream_batch('s', ((1, 2, b'x'),), datetime.now(timezone.utc)); "
            "print('pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
