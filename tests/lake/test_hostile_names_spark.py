"""Relations whose names attack paths or SQL text: one apply batch, then where and what the tables are."""

from __future__ import annotations

import pytest

from cdc_apply.delta.ddl import table_properties
from cdc_apply.delta.refs import silver_ref
from cdc_apply.lake.silver_tables import PROP_RELATION, PROP_SOURCE
from cdc_apply.testing.stream import StreamBuilder

pytestmark = pytest.mark.spark

# A name ending in a backslash made every later statement an unterminated literal.
QUOTED = "it's a \\ back\\slash, a `tick`, \"dq\", '; DROP TABLE x; -- ü \\"


@pytest.fixture(scope="module")
def hostile_lake(lake_factory):
    lake = lake_factory("hostile")
    b = StreamBuilder("src")
    escaping = b.relation("..", "escaped", [("id", "int4", True), ("v", "text", False)])
    quoted = b.relation("public", QUOTED, [("id", "int4", True), ("v", "text", False)])
    with b.transaction() as tx:
        tx.insert(escaping, {"id": 1, "v": "out?"})
        tx.insert(quoted, {"id": 2, "v": "q"})
    lake.land(b.rows())
    lake.apply()
    return lake


def test_a_relation_in_namespace_dot_dot_gets_its_table_under_the_silver_root(hostile_lake):
    lake = hostile_lake
    assert sorted(p.name for p in lake.root.iterdir()) == ["bronze", "silver", "state"]
    assert (lake.root / "silver" / "%2E%2E" / "escaped" / "_delta_log").is_dir()
    assert [tuple(r) for r in lake.silver("..", "escaped").select("id", "v").collect()] == [(1, "out?")]


def test_a_relation_named_with_backslashes_and_quotes_reads_back_exactly_in_properties_and_comment(hostile_lake):
    lake = hostile_lake
    ref = silver_ref(lake.config, "public", QUOTED)
    props = table_properties(lake.spark, ref)
    assert (props[PROP_SOURCE], props[PROP_RELATION]) == ("src", f"public.{QUOTED}")
    (detail,) = lake.spark.sql(f"DESCRIBE DETAIL {ref.sql}").collect()
    assert detail.description == f"cdc_apply silver table of src:public.{QUOTED}"
    assert [tuple(r) for r in lake.silver("public", QUOTED).select("id", "v").collect()] == [(2, "q")]
