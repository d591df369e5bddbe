"""compare_rows and compare_tables: the verdict make demo, the differential suite and the soak rely on."""

from decimal import Decimal

import pyarrow as pa

from cdc_apply.testing.compare import compare_rows, compare_tables


def test_equal_tables_in_any_order_compare_equal():
    check = compare_rows("t", [(1, "a"), (2, None)], [(2, None), (1, "a")])
    assert check.equal and (check.source_rows, check.silver_rows) == (2, 2)


def test_a_row_missing_from_silver_is_named():
    check = compare_rows("t", [(1, "a"), (2, "b")], [(1, "a")])
    assert not check.equal
    assert check.missing == [(2, "b")] and check.unexpected == []
    assert "DIFFERS" in check.line()


def test_duplicates_count_as_rows():
    check = compare_rows("t", [(1, "a"), (1, "a")], [(1, "a")])
    assert not check.equal and check.missing == [(1, "a")]


def test_floats_compare_bit_exactly_and_nan_equals_nan():
    assert compare_rows("t", [(float("nan"),)], [(float("nan"),)]).equal
    assert not compare_rows("t", [(0.0,)], [(-0.0,)]).equal


def test_decimals_compare_by_value_and_nested_values_by_content():
    assert compare_rows("t", [(Decimal("1.50"), [1, 2], {"a": 1})], [(Decimal("1.5"), [1, 2], {"a": 1})]).equal
    assert not compare_rows("t", [([1, 2],)], [([2, 1],)]).equal


def test_skipped_columns_are_left_out_of_the_comparison():
    assert compare_rows("t", [(1, "x")], [(1, "y")], skip=[1]).equal


def test_rows_without_columns_count_as_rows():
    assert compare_rows("t", [(), ()], [(), ()]).equal
    assert not compare_rows("t", [(), ()], [()]).equal


def test_a_plain_column_next_to_a_float_column_is_compared_too():
    assert not compare_rows("t", [(1, 0.5)], [(2, 0.5)]).equal


# -- compare_tables: the same verdicts, computed in Arrow -------------------------------------------
def _table(*columns):
    return pa.Table.from_arrays([pa.array(c) if not isinstance(c, pa.Array) else c for c in columns],
                                names=[f"c{i}" for i in range(len(columns))])


def test_arrow_tables_equal_in_any_order_compare_equal():
    check = compare_tables("t", _table([1, 2, 3], ["a", None, "c"]), _table([3, 1, 2], ["c", "a", None]))
    assert check.equal and (check.source_rows, check.silver_rows) == (3, 3)


def test_arrow_tables_differing_in_one_value_name_the_rows():
    check = compare_tables("t", _table([1, 2], ["a", "b"]), _table([1, 2], ["a", "B"]))
    assert not check.equal
    assert check.missing == [(2, "b")] and check.unexpected == [(2, "B")]


def test_arrow_duplicates_count_as_rows():
    assert not compare_tables("t", _table([1, 1, 2]), _table([1, 2, 2])).equal
    assert compare_tables("t", _table([1, 1, 2]), _table([1, 2, 1])).equal


def test_arrow_floats_compare_bit_exactly_and_nan_equals_nan():
    assert compare_tables("t", _table([float("nan"), 1.5, None]), _table([None, 1.5, float("nan")])).equal
    assert not compare_tables("t", _table([0.0]), _table([-0.0])).equal


def test_arrow_timestamps_and_dates_compare_as_their_instants():
    ts = pa.array([0, 86_400_000_000], pa.timestamp("us", tz="UTC"))
    ntz = pa.array([86_400_000_000, 0], pa.timestamp("us"))
    days = pa.array([1, 0], pa.date32())
    assert compare_tables("t", _table(ts, pa.array([0, 1], pa.date32())), _table(ntz, days)).equal


def test_arrow_decimals_of_other_scales_compare_by_value():
    a = pa.array([Decimal("1.50"), None], pa.decimal128(10, 2))
    b = pa.array([None, Decimal("1.5")], pa.decimal128(12, 1))
    assert compare_tables("t", _table(a), _table(b)).equal
    assert not compare_tables("t", _table(a), _table(pa.array([None, Decimal("1.6")], pa.decimal128(12, 1)))).equal


def test_arrow_list_columns_compare_by_content_and_order():
    assert compare_tables("t", _table([1, 2], [[1, 2], None]), _table([2, 1], [None, [1, 2]])).equal
    assert not compare_tables("t", _table([1], [[1, 2]]), _table([1], [[2, 1]])).equal


def test_arrow_tables_without_columns_count_rows():
    empty = pa.table({"_": pa.nulls(2)}).drop_columns(["_"])
    assert compare_tables("t", empty, empty).equal
    assert not compare_tables("t", empty, empty.slice(0, 1)).equal
