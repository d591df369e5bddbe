"""A table's array_dimensions in planning: the silver column's Spark type and the decode slot's Arrow type agree."""

from __future__ import annotations

import pyarrow as pa

from cdc_apply.pgoutput import messages as m
from cdc_apply.pgoutput.types import TypeOptions, resolve_relation_column
from cdc_apply.planning.schema import SchemaHistory
from cdc_apply.planning.table_plan import type_of_in
from cdc_apply.planning.tables import evolve

INT4, INT4_ARRAY, TEXT_ARRAY = 23, 1007, 1009
OPTIONS = TypeOptions(array_dimensions=(("public.grid", "cells", 2), ("public.grid", "words", 3)))


def _history() -> SchemaHistory:
    history = SchemaHistory()
    columns = tuple(m.RelationColumn(1 if n == "id" else 0, n, t, -1)
                    for n, t in (("id", INT4), ("cells", INT4_ARRAY), ("words", TEXT_ARRAY), ("flat", INT4_ARRAY)))
    history.record(10, 0, m.Relation(None, 1, "public", "grid", "d", columns))
    return history


def test_a_tables_array_dimensions_nest_its_silver_columns_and_leave_the_others_one_dimensional():
    history = _history()
    columns, _ = evolve(history.relations[1].versions, type_of_in(history, OPTIONS, "public.grid"))
    assert [(c.name, c.spark_ddl) for c in columns] == [
        ("id", "INT"), ("cells", "ARRAY<ARRAY<INT>>"), ("words", "ARRAY<ARRAY<ARRAY<STRING>>>"),
        ("flat", "ARRAY<INT>")]


def test_the_decode_types_of_a_tables_array_columns_match_its_silver_types():
    version = _history().relations[1].versions[0]
    types = [resolve_relation_column(c.type_oid, c.type_modifier, None, OPTIONS, "public.grid", c.name)
             for c in version.columns]
    assert [t.arrow_type for t in types[1:]] == [pa.list_(pa.list_(pa.int32())),
                                                 pa.list_(pa.list_(pa.list_(pa.string()))), pa.list_(pa.int32())]
    assert [t.spark_ddl for t in types] == ["INT", "ARRAY<ARRAY<INT>>", "ARRAY<ARRAY<ARRAY<STRING>>>", "ARRAY<INT>"]


def test_another_tables_column_of_the_same_name_keeps_one_dimension():
    history = _history()
    columns, _ = evolve(history.relations[1].versions, type_of_in(history, OPTIONS, "public.other"))
    assert dict((c.name, c.spark_ddl) for c in columns)["cells"] == "ARRAY<INT>"
