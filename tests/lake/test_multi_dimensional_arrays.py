"""Multi-dimensional array columns through the apply job: ``[tables."ns.t"] array_dimensions`` lands them in
silver as ARRAY<ARRAY<..>>, from the golden capture (a real PostgreSQL's pgoutput, text and binary); without
it, their values are quarantined saying why. The snapshot path: tests/lander/test_lander_snapshot_arrays.py."""

from __future__ import annotations

import pytest
from golden.loader import load_capture

pytestmark = pytest.mark.spark

GOLDEN = "public.types_array_multi"
CONFIGS = ("v1", "v1_binary")   # the types capture as text and as binary tuples: a source each
GOLDEN_DIMENSIONS = {"a_int4_2d": 2, "a_text_2d": 2}


def _apply_golden(lake) -> None:
    lake.land([(config, seq, lsn, payload) for config in CONFIGS
               for seq, lsn, _xid, payload in load_capture("types", config)])
    lake.apply()


def _rows(lake, source: str) -> tuple[object, list[tuple]]:
    table = lake.spark.read.format("delta").load(str(lake.root / "silver" / source / "public" / "types_array_multi"))
    return table.schema, sorted((r.id, r.a_int4_2d, r.a_text_2d) for r in table.collect())


def _quarantined(lake) -> dict[tuple[str, str], list[str]]:
    """The quarantine's errors of the golden table per (source, column)."""
    out: dict[tuple[str, str], list[str]] = {}
    for r in lake.state("quarantine").select("source", "error").collect():
        if f"table={GOLDEN}" in r.error:
            column = r.error.split("column=")[1].split(",")[0].rstrip("]")
            out.setdefault((r.source, column), []).append(r.error)
    return out


@pytest.fixture(scope="module")
def configured(lake_factory):
    lake = lake_factory("md_configured", apply={"on_error": "quarantine"}, silver={"source_in_path": True},
                        tables={GOLDEN: {"array_dimensions": GOLDEN_DIMENSIONS}})
    _apply_golden(lake)
    return lake


@pytest.mark.parametrize("source", CONFIGS)
def test_a_two_dimensional_column_of_a_golden_capture_lands_in_silver_as_nested_arrays(configured, source):
    from pyspark.sql.types import ArrayType, IntegerType, StringType

    schema, rows = _rows(configured, source)
    assert schema["a_int4_2d"].dataType == ArrayType(ArrayType(IntegerType()))
    assert schema["a_text_2d"].dataType == ArrayType(ArrayType(StringType()))
    # Rows 2-4 hold a value of other dimensions than their column's (PostgreSQL does not enforce them).
    assert rows == [(1, [[1, 2], [3, 4]], [["a", "b"], ["c,d", None]]),
                    (5, [], None),
                    (6, [[None, None], [None, None]], [["a b", "c\\d"]])]


@pytest.mark.parametrize("source", CONFIGS)
def test_a_golden_value_of_other_dimensions_than_its_column_is_quarantined_saying_both(configured, source):
    errors = _quarantined(configured)
    int4 = sorted(errors[source, "a_int4_2d"])
    assert len(int4) == 2 and "a 1-dimensional array in a column of 2 dimensions" in int4[0] \
        and "a 3-dimensional array in a column of 2 dimensions" in int4[1]
    text = errors[source, "a_text_2d"]
    assert len(text) == 1 and "a 1-dimensional array in a column of 2 dimensions" in text[0]
    assert all("array_dimensions" in e for e in int4 + text)


def test_without_the_option_a_golden_two_dimensional_value_is_quarantined_naming_the_option(lake_factory):
    from pyspark.sql.types import ArrayType, IntegerType

    lake = lake_factory("md_unset", apply={"on_error": "quarantine"}, silver={"source_in_path": True})
    _apply_golden(lake)
    errors = _quarantined(lake)
    for source in CONFIGS:
        schema, rows = _rows(lake, source)
        assert schema["a_int4_2d"].dataType == ArrayType(IntegerType())
        assert rows == [(5, [], None)]   # the only row whose values are empty, NULL or one-dimensional
        found = errors[source, "a_int4_2d"] + errors.get((source, "a_text_2d"), [])
        assert len(errors[source, "a_int4_2d"]) == 4
        assert all("-dimensional array in a column of 1 dimension; set the column's dimensions" in e
                   and "array_dimensions" in e for e in found)
