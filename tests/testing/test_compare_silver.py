"""compare_silver: a large silver table is read in parts by ranges of its first column."""

import pyarrow as pa
import pytest

from cdc_apply.testing.compare import compare_silver

pytestmark = pytest.mark.spark

ROWS = [(i, f"v{i}") for i in range(1, 200)] + [(None, "no key"), (None, "no key either")]


def _source(rows):
    ids, values = zip(*rows)
    return pa.table({"c0": pa.array(ids, pa.int32()), "c1": pa.array(values)})


def _silver(spark, rows):
    return spark.createDataFrame(rows, "id int, v string")


def test_a_table_read_in_parts_compares_equal_when_every_row_matches(spark):
    check = compare_silver("t", _source(ROWS), _silver(spark, list(reversed(ROWS))), ["id", "v"], part_bytes=500)
    assert check.equal and (check.source_rows, check.silver_rows) == (201, 201)


def test_a_differing_row_in_one_part_is_named(spark):
    changed = [(i, v if i != 150 else "other") for i, v in ROWS]
    check = compare_silver("t", _source(ROWS), _silver(spark, changed), ["id", "v"], part_bytes=500)
    assert not check.equal
    assert check.missing == [(150, "v150")] and check.unexpected == [(150, "other")]


def test_silver_rows_outside_every_source_range_are_counted(spark):
    extra = ROWS + [(-5, "below"), (10_000, "above"), (None, "a third null")]
    check = compare_silver("t", _source(ROWS), _silver(spark, extra), ["id", "v"], part_bytes=500)
    assert not check.equal and check.silver_rows == 204
    assert sorted(check.unexpected, key=repr) == sorted([(-5, "below"), (10_000, "above"), (None, "a third null")],
                                                        key=repr)
