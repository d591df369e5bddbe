"""Delta's statistics of a Parquet file written from an Arrow table (no JVM)."""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.parquet as pq

from cdc_apply.delta.arrow_files import STRING_STATS_CHARS, file_stats, parquet_file


def test_integer_and_short_string_columns_get_bounds_and_null_counts():
    table = pa.table({"v": pa.array([3, None, -2], pa.int64()), "s": ["b", "a", None],
                      "f": [1.5, 2.5, None], "ok": [True, False, None]})
    stats = json.loads(file_stats(table))
    assert stats == {"numRecords": 3, "minValues": {"v": -2, "s": "a"}, "maxValues": {"v": 3, "s": "b"},
                     "nullCount": {"v": 1, "s": 1}}


def test_a_string_column_with_a_value_longer_than_delta_s_prefix_gets_no_bounds():
    long = "x" * (STRING_STATS_CHARS + 1)
    stats = json.loads(file_stats(pa.table({"s": ["a", long]})))
    assert "s" not in stats["minValues"] and "s" not in stats["nullCount"]


def test_a_column_of_nulls_only_gets_its_null_count_and_no_bounds():
    stats = json.loads(file_stats(pa.table({"v": pa.nulls(2, pa.int32())})))
    assert stats["nullCount"] == {"v": 2} and stats["minValues"] == {} and stats["maxValues"] == {}


def test_the_file_holds_the_table_and_says_its_size_and_rows():
    table = pa.table({"v": pa.array([1, 2], pa.int32()), "s": ["a", "b"]})
    written = parquet_file(table)
    assert pq.read_table(io.BytesIO(written.data)).equals(table)
    assert (written.rows, written.size) == (2, len(written.data)) and written.name.endswith(".snappy.parquet")
    assert parquet_file(table, stats=False).stats is None
