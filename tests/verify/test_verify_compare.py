"""The pure parts of `cdc-apply verify`: range cuts, the range a key falls in, what differs key by key."""

from __future__ import annotations

from cdc_apply.pgoutput.types import resolve_column_type
from cdc_apply.verification import compare as cmp
from cdc_apply.verification.encoding import (ColumnEncoding, cut_bounds, encode_column, pg_range_predicate, range_kind,
                                             spark_range_index)


def test_text_cut_points_follow_utf8_byte_order_not_a_locale():
    # sorted as A Z a b c é (upper case before lower case, é after ASCII): cut at the thirds
    assert cut_bounds("text", ["b", "a", "Z", "é", "c", "A"], 3) == ["a", "c"]
    assert cut_bounds("text", ["é", "z", "e"], 3) == ["z", "é"]


def test_integer_cut_points_are_numeric_and_distinct():
    assert cut_bounds("int", [10, 9, 100, 2, 2, 2, 50], 3) == [9, 50]
    assert cut_bounds("int", [5, 5, 5], 4) == [5]


def test_a_key_falls_in_the_range_the_spark_case_tree_names():
    bounds = [10, 20, 30]
    assert [cmp.range_index("int", bounds, v) for v in ("-1", "10", "19", "20", "31")] == [0, 1, 1, 2, 3]
    tree = spark_range_index("id", "int", bounds)
    assert tree.count("CASE WHEN") == 3 and "`id` < 20" in tree


def test_uuid_and_text_ranges_compare_in_spark_s_order():
    assert pg_range_predicate("k", "text", "a", None) == ('"k" COLLATE "C" >= %s', ["a"])
    assert pg_range_predicate("u", "uuid", None, "8") == ('"u" < %s::uuid', ["8"])
    assert range_kind(resolve_column_type(2950, -1)) == "uuid"
    assert range_kind(resolve_column_type(1042, 9)) is None     # bpchar: its comparison ignores padding
    assert range_kind(resolve_column_type(1043, 14)) == "text"


def test_floats_and_intervals_are_compared():
    assert isinstance(encode_column("f", resolve_column_type(701, -1), "double"), ColumnEncoding)
    assert isinstance(encode_column("i", resolve_column_type(1186, -1),
                                    "struct<months:int,days:int,microseconds:bigint>"), ColumnEncoding)
    assert isinstance(encode_column("n", resolve_column_type(1700, 655366), "decimal(10,2)"), ColumnEncoding)


def test_differing_ranges_compare_counts_and_sums():
    assert cmp.differing_ranges({0: (2, 5), 1: (1, 3)}, {0: (2, 5), 1: (1, 4), 2: (1, 1)}) == [1, 2]


def test_subtracting_rows_empties_a_range():
    assert cmp.subtract({0: (2, 5), 1: (1, 3)}, [("1", 3)], lambda row: 1) == {0: (2, 5)}


def test_key_differences_name_each_kind():
    source = [("1", 10), ("2", 20), ("3", 30)]
    silver = [("2", 21), ("3", 30), ("3", 30), ("4", 40)]
    found = [(d.key, d.what) for d in cmp.key_differences(source, silver, keyed=True)]
    assert found == [(("1",), "missing"), (("2",), "changed"), (("3",), "duplicated"), (("4",), "unexpected")]


def test_keyless_rows_compare_as_multisets():
    found = cmp.key_differences([("a", 1), ("a", 1), ("b", 2)], [("a", 1), ("b", 2), ("b", 2), ("c", 3)], keyed=False)
    assert [(d.key, d.what, d.source_copies, d.silver_copies) for d in found] == [
        (("a",), "missing", 2, 1), (("b",), "duplicated", 1, 2), (("c",), "unexpected", 0, 1)]


def test_exit_codes_are_the_worst_table_s():
    results = [cmp.TableResult("a"), cmp.TableResult("b", status=cmp.DIFFERS)]
    assert cmp.exit_code(results) == 1
    assert cmp.exit_code(results + [cmp.TableResult("c", status=cmp.ERROR)]) == 2
    assert cmp.exit_code([]) == 0
